/* SPDX-License-Identifier: MIT */
/*
 * Scheduling policies under (emulated) overcommit, the hints policy against the hint-free random
 * one, on two shapes of work: forkjoin (the primary ULT creates PVRT_BENCH_ULTS ULTs, default
 * 2000, of ~20 us of work each and joins them) and tree (a binary tree of ULTs with 2048 such
 * leaves: every worker produces work). Run it with PVRT_HINTS=emu and
 * PVRT_EMU=vcpus=4,pcpus=2 (workers sit on emulated vCPUs that the emulator deschedules): ULTs
 * queued on a descheduled worker wait until another worker steals them, which the hints policy
 * does first. Counter: batch_ms, the mean batch time of a run (also the manual time); compare
 * the two policies' medians over --benchmark_repetitions.
 */
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pvrt_bench.h>
#include <pvrt_os.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const policy[] = {"hints", "random"};
static long nults = 2000;

static double now_s(void)
{
	return (double)os_now_ns() * 1e-9;
}

static void *work(void *p)
{
	/* ~20 us of dependent arithmetic the compiler cannot drop. */
	uint64_t x = (uint64_t)(uintptr_t)p + 1;
	for (int i = 0; i < 4000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		__asm__ volatile("" : "+r"(x));
	}
	return (void *)(uintptr_t)x;
}

/* A binary tree of ULTs: every worker produces work, so queues fill everywhere and a thief
 * has a choice of victims. */
static void *tree(void *p)
{
	uintptr_t depth = (uintptr_t)p;
	if (depth == 0)
		return work(p);
	pvrt_thread_t a, b;
	if (pvrt_thread_create(&a, NULL, tree, (void *)(depth - 1)) ||
	    pvrt_thread_create(&b, NULL, tree, (void *)(depth - 1)))
		abort();
	pvrt_thread_join(a, NULL);
	pvrt_thread_join(b, NULL);
	return NULL;
}

static void bm_forkjoin(pvrt_bench_state *st)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.sched = policy[pvrt_bench_arg(st, 0)];
	if (pvrt_init(&c)) {
		pvrt_bench_skip(st, pvrt_errmsg());
		return;
	}
	pvrt_thread_t *t = malloc(sizeof(*t) * (size_t)nults);
	if (!t) {
		pvrt_finalize();
		pvrt_bench_skip(st, "out of memory");
		return;
	}
	double ms = 0;
	int iters = 0;
	while (pvrt_bench_keep_running(st)) {
		double t0 = now_s();
		if (pvrt_bench_arg(st, 1)) {
			tree((void *)(uintptr_t)11); /* 2048 leaves */
		} else {
			for (long i = 0; i < nults; i++)
				if (pvrt_thread_create(&t[i], NULL, work, (void *)(uintptr_t)i))
					abort();
			for (long i = 0; i < nults; i++)
				pvrt_thread_join(t[i], NULL);
		}
		double el = now_s() - t0;
		pvrt_bench_set_iteration_time(st, el);
		ms += el * 1e3;
		iters++;
	}
	free(t);
	pvrt_bench_counter(st, "batch_ms", iters ? ms / iters : 0, PVRT_BENCH_COUNTER_VALUE);
	pvrt_finalize();
}

int main(int argc, char **argv)
{
	const char *e = getenv("PVRT_BENCH_ULTS");
	if (e && atol(e) > 0)
		nults = atol(e);
	for (int shape = 0; shape < 2; shape++)
		for (int k = 0; k < 2; k++) {
			char name[64];
			snprintf(name, sizeof(name), "%s/%s", shape ? "tree" : "forkjoin",
				 policy[k]);
			pvrt_bench *b = pvrt_bench_register(strdup(name), bm_forkjoin);
			pvrt_bench_args(b, 2, (int64_t[]){k, shape});
			pvrt_bench_iterations(b, 5);
			pvrt_bench_manual_time(b);
			pvrt_bench_unit_us(b);
		}
	return pvrt_bench_main(argc, argv);
}
