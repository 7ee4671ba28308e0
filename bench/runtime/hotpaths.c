/* SPDX-License-Identifier: MIT */
/*
 * The hot paths through the public API, one at a time, for instruction counts: hotpaths.sh runs
 * it under callgrind (collecting inside work() only) against two builds of the libraries, so a
 * refactoring can be checked on a machine too loaded for timings. Uses only calls whose ABI is
 * stable (NULL config and attributes), so one binary runs against either library.
 *   usage: bench_hotpaths mutex|yield|create_join|batchB|hint N
 */
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long n;
static pvrt_mutex_t m;
static pvhint_t *h;
static volatile int sink;

static void *nop(void *a)
{
	return a;
}

static void *yield_loop(void *a)
{
	for (long i = 0; i < n; i++)
		pvrt_thread_yield();
	return a;
}

/* mutex: n uncontended lock+unlock pairs; yield: 2n yields between two ULTs on one worker;
 * create_join: n create+join of an empty ULT; batchB: n ULTs in rounds of B created, then
 * joined (B divides n); hint: n preemption queries. */
__attribute__((noinline)) void work(const char *what)
{
	if (!strncmp(what, "batch", 5)) {
		long b = atol(what + 5);
		pvrt_thread_t *t = malloc((size_t)b * sizeof(*t));
		for (long r = 0; t && r < n / b; r++) {
			for (long i = 0; i < b; i++)
				pvrt_thread_create(&t[i], NULL, nop, NULL);
			for (long i = 0; i < b; i++)
				pvrt_thread_join(t[i], NULL);
		}
		free(t);
	} else if (!strcmp(what, "mutex")) {
		for (long i = 0; i < n; i++) {
			pvrt_mutex_lock(&m);
			pvrt_mutex_unlock(&m);
		}
	} else if (!strcmp(what, "create_join")) {
		for (long i = 0; i < n; i++) {
			pvrt_thread_t t;
			pvrt_thread_create(&t, NULL, nop, NULL);
			pvrt_thread_join(t, NULL);
		}
	} else if (!strcmp(what, "yield")) {
		pvrt_thread_t a, b;
		pvrt_thread_create(&a, NULL, yield_loop, NULL);
		pvrt_thread_create(&b, NULL, yield_loop, NULL);
		pvrt_thread_join(a, NULL);
		pvrt_thread_join(b, NULL);
	} else if (!strcmp(what, "hint")) {
		for (long i = 0; i < n; i++)
			sink += pvhint_vcpu_preempted(h, (unsigned)i & 1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s mutex|yield|create_join|batchB|hint N\n", argv[0]);
		return 2;
	}
	n = atol(argv[2]);
	pvhint_default(&h);
	int rt = !strcmp(argv[1], "yield") || !strcmp(argv[1], "create_join") ||
		 !strncmp(argv[1], "batch", 5);
	if (rt && pvrt_init(NULL))
		return 1;
	work(argv[1]);
	if (rt)
		pvrt_finalize();
	return 0;
}
