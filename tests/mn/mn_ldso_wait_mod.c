/* SPDX-License-Identifier: MIT */
/* A module whose constructor waits (mn_ldso.c): under M:N mode each usleep is a ULT wait, so the
 * ULT running dlopen switches out, and may resume on another kernel thread, while it holds
 * ld.so's dl_load_lock. */
#include <unistd.h>

__attribute__((visibility("default"))) int mn_ldso_ctor_done;

__attribute__((constructor)) static void ctor(void)
{
	for (int i = 0; i < 20; i++)
		usleep(5000);
	__atomic_store_n(&mn_ldso_ctor_done, 1, __ATOMIC_RELEASE);
}
