/* SPDX-License-Identifier: MIT */
/*
 * An idle worker lends its vCPU to a preempted one that runs a ULT (sched/hints.c, lend). Four
 * workers on four emulated vCPUs over two pCPUs (vCPU v on pCPU v % 2): the primary (worker 0)
 * and a ULT bound to worker 2 compute, so pCPU 0 alternates between vCPUs 0 and 2 and one of
 * them is always preempted with its ULT on it; a ULT on worker 3 wakes every millisecond and
 * starts a short ULT bound to worker 1, so worker 1 (no timer of its own) goes idle again and
 * again while pCPU 1 has room. Where the source can yield (PVRT_DIRECTED_YIELD=1, slice mode)
 * and the policy is hints, an idle worker must lend at least once; with random, or without
 * directed yield, never. The results are the same either way. (That a lend helps is
 * bench_sched's to show: the emulator runs the lent vCPU on its own pCPU, in place of the one
 * there, as KVM's directed yield does.)
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pvrt_os.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* 60 ms of CPU time: several of the emulator's 10 ms turns, whatever the machine's load. */
static uint64_t spin(void)
{
	uint64_t x = 1, t0 = os_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	while (os_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0 < 60000000ull)
		for (int i = 0; i < 10000; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			__asm__ volatile("" : "+r"(x));
		}
	return x | 1;
}

static void *compute(void *arg)
{
	(void)arg;
	CHECK_EQ(pvrt_thread_set_worker(2), 0);
	return (void *)(uintptr_t)spin();
}

static int shorts;

static void *short_one(void *arg)
{
	(void)arg;
	CHECK_EQ(pvrt_worker_self(), 1);
	__atomic_add_fetch(&shorts, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *sleeper(void *arg)
{
	(void)arg;
	CHECK_EQ(pvrt_thread_set_worker(3), 0);
	struct pvrt_thread_attr at;
	pvrt_thread_attr_init(&at);
	at.worker = 1;
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(pvrt_thread_sleep(1000000), 0);
		pvrt_thread_t t;
		CHECK_EQ(pvrt_thread_create(&t, &at, short_one, NULL), 0);
		CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	}
	return (void *)1;
}

int main(void)
{
	pvhint_t *h = NULL;
	CHECK_EQ(pvhint_default(&h), 0);
	const char *pol = getenv("PVRT_SCHED");
	bool expect = pvhint_can_yield(h) && (!pol || !strcmp(pol, "hints"));
	const char *dy = getenv("PVRT_DIRECTED_YIELD");
	if (dy && !strcmp(dy, "1"))
		CHECK(pvhint_can_yield(h)); /* the ctests that ask for it run slice mode */

	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 4;
	CHECK_EQ(pvrt_init(&c), 0);
	CHECK_EQ(pvrt_nworkers(), 4);
	struct pvrt_stats s0, s1;
	CHECK_EQ(pvrt_stats_get(&s0), 0);
	pvrt_thread_t a, s;
	CHECK_EQ(pvrt_thread_create(&a, NULL, compute, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&s, NULL, sleeper, NULL), 0);
	CHECK(spin() != 0);
	void *ra = NULL, *rs = NULL;
	CHECK_EQ(pvrt_thread_join(a, &ra), 0);
	CHECK_EQ(pvrt_thread_join(s, &rs), 0);
	CHECK(ra != NULL);
	CHECK(rs == (void *)1);
	CHECK_EQ(shorts, 100);
	CHECK_EQ(pvrt_stats_get(&s1), 0);
	uint64_t lends = s1.lends - s0.lends;
	printf("lends %llu (expected %s)\n", (unsigned long long)lends, expect ? "some" : "none");
	if (expect)
		CHECK(lends >= 1);
	else
		CHECK_EQ(lends, 0);
	CHECK_EQ(pvrt_finalize(), 0);
	return 0;
}
