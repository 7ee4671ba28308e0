/* SPDX-License-Identifier: MIT */
/*
 * Per-ULT glibc TLS (pvrt_config.ult_tls): __thread variables, errno, glibc's pthread_self and
 * pthread keys, and a dlopen'ed module's dynamic TLS are each ULT's own, across yields and
 * migrations between workers; key destructors run at ULT exit; exited ULTs' TLS is reused
 * fresh (initial values again).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/thread.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define NULT   16
#define ROUNDS 50

static __thread long tvar = 7;
static __thread char tbuf[100];
static pthread_key_t gkey;
static int gkey_dtors;
static long (*mod_get)(int);
static void (*mod_set)(int, long);
static void *(*mod_addr)(void);
static unsigned nw;
static void *addrs[NULT];

static void gkey_dtor(void *v)
{
	CHECK(v != NULL);
	__atomic_add_fetch(&gkey_dtors, 1, __ATOMIC_RELAXED);
}

static void *body(void *arg)
{
	long id = (long)(intptr_t)arg;
	CHECK_EQ(tvar, 7); /* the initial image, also in a reused TLS block */
	CHECK_EQ(tbuf[0], 0);
	CHECK(pthread_getspecific(gkey) == NULL);
	CHECK_EQ(mod_get(0), 42);
	tvar = id;
	snprintf(tbuf, sizeof(tbuf), "ult %ld", id);
	CHECK_EQ(pthread_setspecific(gkey, (void *)(intptr_t)(id + 1)), 0);
	mod_set(1, id * 3);
	addrs[id] = &tvar;
	pthread_t me = pthread_self();
	for (int r = 0; r < ROUNDS; r++) {
		errno = (int)id + r;
		if (nw > 1 && r % 5 == 0)
			CHECK_EQ(pvrt_thread_set_worker((int)((id + r) % nw)), 0);
		else
			pvrt_thread_yield();
		CHECK_EQ(errno, id + r);
		CHECK_EQ(tvar, id);
		char want[100];
		snprintf(want, sizeof(want), "ult %ld", id);
		CHECK(strcmp(tbuf, want) == 0);
		CHECK(pthread_self() == me);
		CHECK(pthread_getspecific(gkey) == (void *)(intptr_t)(id + 1));
		CHECK_EQ(mod_get(1), id * 3);
		/* malloc's per-thread cache is the ULT's own too */
		void *p = malloc((size_t)(16 + r));
		CHECK(p != NULL);
		free(p);
	}
	CHECK_EQ(pvrt_thread_set_worker(-1), 0);
	return (void *)mod_addr();
}

int main(int argc, char **argv)
{
	(void)argc;
	/* The module sits beside the test binary. */
	char path[4096];
	snprintf(path, sizeof(path), "%s", argv[0]);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof(path) - (size_t)(slash ? slash + 1 - path : 0),
		 "libpvrt_test_tls_mod.so");
	void *mod = dlopen(path, RTLD_NOW);
	CHECK(mod != NULL);
	mod_get = (long (*)(int))dlsym(mod, "tls_mod_get");
	mod_set = (void (*)(int, long))dlsym(mod, "tls_mod_set");
	mod_addr = (void *(*)(void))dlsym(mod, "tls_mod_addr");
	CHECK(mod_get && mod_set && mod_addr);
	CHECK_EQ(pthread_key_create(&gkey, gkey_dtor), 0);

	struct pvrt_config c;
	pvrt_config_init(&c);
	c.ult_tls = 1;
	c.workers = 2;
	int r = pvrt_init(&c);
	CHECK_EQ(r, 0);
	nw = pvrt_nworkers();
	tvar = 1000;
	for (int round = 0; round < 3; round++) {
		pvrt_thread_t t[NULT];
		for (long i = 0; i < NULT; i++)
			CHECK_EQ(pvrt_thread_create(&t[i], NULL, body, (void *)(intptr_t)i), 0);
		void *maddr[NULT];
		for (int i = 0; i < NULT; i++)
			CHECK_EQ(pvrt_thread_join(t[i], &maddr[i]), 0);
		for (int i = 0; i < NULT; i++)
			for (int j = i + 1; j < NULT; j++) {
				CHECK(addrs[i] != addrs[j]);
				CHECK(maddr[i] != maddr[j]);
			}
		CHECK_EQ(__atomic_load_n(&gkey_dtors, __ATOMIC_RELAXED), NULT * (round + 1));
	}
	/* The primary's own TLS was never touched by the ULTs. */
	CHECK_EQ(tvar, 1000);
	CHECK_EQ(pvrt_finalize(), 0);
	CHECK_EQ(pthread_key_delete(gkey), 0);
	dlclose(mod);

	/* Without the option, ULTs share their worker's TLS (the old behaviour). */
	pvrt_config_init(&c);
	c.workers = 1;
	CHECK_EQ(pvrt_init(&c), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	printf("tls: ok\n");
	return 0;
}
