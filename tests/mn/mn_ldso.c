/* SPDX-License-Identifier: MIT */
/*
 * ld.so's locks are recursive mutexes owned by a kernel tid, which the ULTs of one worker
 * share. Main dlopens MOD, whose constructor spins for 0.3 s under dl_load_lock, while another
 * thread waits to dlopen MOD too. On one worker (pvrt-run --mn --workers=1), preempting main
 * inside the constructor let the other thread into ld.so "recursively" (same tid): its dlopen
 * returned MOD while MOD's constructor had not finished, and a spare thread started for a
 * hand-off at such a moment waited forever for ld.so's TLS lock. The ULT holding an ld.so
 * lock must not be preempted: the other dlopen returns only after the constructor.
 * With mn_ldso_wait_mod the constructor waits (ULT sleeps) instead: the ULT holding the lock
 * switches out, and the others must still wait for it (ctest mn.ldso_wait).
 * usage: mn_ldso MOD
 */
#include "mn_check.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>

static const char *mod;
static int started;

static void *other(void *a)
{
	mn_tid_seen();
	while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
		sched_yield();
	void *h = dlopen(mod, RTLD_NOW);
	CHECK(h != NULL);
	int *done = dlsym(h, "mn_ldso_ctor_done");
	CHECK(done != NULL);
	if (!__atomic_load_n(done, __ATOMIC_ACQUIRE)) {
		fprintf(stderr, "mn_ldso: dlopen returned before the module's constructor ran\n");
		exit(1);
	}
	dlclose(h);
	return a;
}

int main(int argc, char **argv)
{
	CHECK(argc == 2);
	mod = argv[1];
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, other, NULL), 0);
	__atomic_store_n(&started, 1, __ATOMIC_RELEASE);
	void *h = dlopen(mod, RTLD_NOW);
	CHECK(h != NULL);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	dlclose(h);
	mn_tid_seen();
	printf("mn_ldso: ok\n");
	return 0;
}
