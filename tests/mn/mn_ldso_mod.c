/* SPDX-License-Identifier: MIT */
/* A module whose constructor runs for a while without calling anything that blocks or yields
 * (mn_ldso.c): dlopen runs it with ld.so's dl_load_lock held. */
#include <time.h>

__attribute__((visibility("default"))) int mn_ldso_ctor_done;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((constructor)) static void ctor(void)
{
	double end = now() + 0.3; /* 30 time slices */
	while (now() < end)
		;
	__atomic_store_n(&mn_ldso_ctor_done, 1, __ATOMIC_RELEASE);
}
