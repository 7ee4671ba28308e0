/* SPDX-License-Identifier: MIT */
/*
 * Stacks: a ULT inherits its creator's floating-point state even though its frame reaches its
 * stack only when it first runs; many ULTs alive at once each get their own stack, and their
 * locals survive while others run on the reused ones; after the burst, an idle runtime gives the
 * stacks back (the mappings count returns near where it started, and the runtime's count of
 * mapped stacks, pvrt_stats.stacks, drops to what the parked workers keep). Then a batch of
 * 10,000 ULTs created before any is joined, twice: the second maps (almost) no stack and idling
 * gives them back again. Properties only: the idle checks wait as long as it takes (ctest's timeout
 * bounds them).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/thread.h>

#include <fenv.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#ifdef __SANITIZE_THREAD__
#define BURST 300 /* a TSan fiber costs most of a MiB of shadow state */
#define BATCH 1000
#else
#define BURST 3000
#define BATCH 10000
#endif

/* What two parked workers may keep: PVRT_STACK_KEEP (16) pooled and a warm one each. */
#define KEPT (2 * (16 + 1))

static int go;

static void *rounding(void *a)
{
	(void)a;
	return (void *)(intptr_t)fegetround();
}

static void *burst_ult(void *a)
{
	/* A local that lives across yields: a stack shared by two live ULTs would clobber it. */
	volatile uintptr_t mine = (uintptr_t)a * 2654435761u;
	while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
		pvrt_thread_yield();
	pvrt_thread_yield();
	return (void *)(uintptr_t)(mine == (uintptr_t)a * 2654435761u);
}

static void *nop(void *a)
{
	return a;
}

/* The size of the inaccessible mapping right below the caller's stack (its guard), from
 * /proc/self/maps; 0 if none. */
static void *guard_below(void *a)
{
	(void)a;
	char line[256], perms[8];
	uintptr_t here = (uintptr_t)&line, lo, hi, below_lo = 0, below_hi = 0, stack_lo = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL);
	uintptr_t prev_lo = 0, prev_hi = 0;
	char prev_perms[8] = "";
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
			continue;
		if (lo <= here && here < hi) {
			stack_lo = lo;
			if (prev_hi == lo && !strcmp(prev_perms, "---p")) {
				below_lo = prev_lo;
				below_hi = prev_hi;
			}
			break;
		}
		prev_lo = lo;
		prev_hi = hi;
		strcpy(prev_perms, perms);
	}
	fclose(f);
	CHECK(stack_lo != 0);
	return (void *)(below_hi - below_lo);
}

static uint64_t stacks(void)
{
	struct pvrt_stats st;
	CHECK_EQ(pvrt_stats_get(&st), 0);
	CHECK_EQ(st.size, sizeof(st));
	return st.stacks;
}

/* Idle until the parked workers trimmed their pools (ctest's timeout bounds the wait). */
static uint64_t idle_stacks(void)
{
	uint64_t n;
	while ((n = stacks()) > KEPT)
		pvrt_thread_sleep(20000000);
	return n;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	CHECK(f);
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static long mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f);
	long n = 0;
	for (int c; (c = fgetc(f)) != EOF;)
		n += c == '\n';
	fclose(f);
	return n;
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 2;
	/* The batch checks below need the primary to create the whole batch before worker 0 runs
	 * any of it, and worker 0 never to park between the rounds: a preemption mid-batch would
	 * let early ULTs exit and lend their stacks to later creates, a hand-off of worker 0
	 * (its thread seen blocked in the kernel) would let it park and trim. */
	c.slice_ns = -1;
	c.handoff_ns = -1;
	CHECK_EQ(pvrt_init(&c), 0);

	/* The creator's rounding mode, although the ULT first runs after the creator reset it. */
	pvrt_thread_t t;
	CHECK_EQ(fesetround(FE_UPWARD), 0);
	CHECK_EQ(pvrt_thread_create(&t, NULL, rounding, NULL), 0);
	CHECK_EQ(fesetround(FE_TONEAREST), 0);
	void *r;
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK_EQ((intptr_t)r, FE_UPWARD);

	/* A guard of two pages on a stack as long as the default one (usable part one page
	 * shorter): the ULT runs on a stack with that guard, not on worker 0's warm stack (the
	 * rounding ULT above left it there), whose guard is one page. */
	long ps = sysconf(_SC_PAGESIZE);
	pvrt_thread_attr_t ga;
	pvrt_thread_attr_init(&ga);
	ga.stack_size = 64 * 1024 - (size_t)ps;
	ga.guard_size = 2 * (size_t)ps;
	ga.worker = 0;
	CHECK_EQ(pvrt_thread_create(&t, &ga, guard_below, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK((uintptr_t)r >= 2 * (uintptr_t)ps);
	CHECK_EQ(pvrt_thread_create(&t, NULL, guard_below, NULL), 0); /* and the default: one */
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK_EQ((uintptr_t)r, (uintptr_t)ps);

	long base = mappings();
	static pvrt_thread_t ts[BURST];
	for (int round = 0; round < 2; round++) {
		__atomic_store_n(&go, 0, __ATOMIC_RELEASE);
		for (long i = 0; i < BURST; i++)
			CHECK_EQ(pvrt_thread_create(&ts[i], NULL, burst_ult, (void *)i), 0);
		/* Let them all start (each needs a stack of its own while it waits). */
		for (int i = 0; i < 20; i++)
			pvrt_thread_yield();
		__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
		long ok = 0;
		for (long i = 0; i < BURST; i++) {
			CHECK_EQ(pvrt_thread_join(ts[i], &r), 0);
			ok += r != NULL;
		}
		CHECK_EQ(ok, BURST);
	}
	long peak = mappings();
	/* Idle: every worker parks and trims (the primary sleeping parks worker 0). Two mappings
	 * per stack (guard and usable part); each worker may keep PVRT_STACK_KEEP and a hot one. */
	long limit = base + 2 * 2 * (16 + 1) + 16;
	long now = peak;
#ifdef __SANITIZE_THREAD__
	limit = -1; /* TSan maps its own state per fiber and keeps it: no count to compare */
#endif
	while (limit >= 0 && (now = mappings()) > limit)
		pvrt_thread_sleep(20000000);
	printf("stacks: mappings %ld at start, %ld after the bursts, %ld when idle\n", base, peak,
	       now);
	uint64_t idle = idle_stacks();
	long rss0 = rss_kib();

	/* A batch created before any is joined: one stack per descriptor the first time, none
	 * the second (the pooled ones are reused, no mapping per create), all given back when
	 * idle. Bound to worker 0, which usually never idles meanwhile (each join runs the ULT
	 * or finds it done). But worker 1, woken for the queued batch, may steal one of it and
	 * send it home; a join of that one meanwhile parks worker 0, which trims its pool. A
	 * first round that kept fewer than one stack per ULT was trimmed so: the pair runs
	 * again, a few times at most (a pool that never keeps its stacks still fails the check
	 * below); a trim in the second round only lowers its count. */
	static pvrt_thread_t tb[BATCH];
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.worker = 0;
	uint64_t after[2];
	long rss[2];
	for (int attempt = 0; attempt < 8; attempt++) {
		if (attempt)
			idle_stacks(); /* start again from trimmed pools, as the first attempt */
		for (int round = 0; round < 2; round++) {
			for (long i = 0; i < BATCH; i++)
				CHECK_EQ(pvrt_thread_create(&tb[i], &a, nop, (void *)i), 0);
			for (long i = 0; i < BATCH; i++) {
				CHECK_EQ(pvrt_thread_join(tb[i], &r), 0);
				CHECK_EQ((long)r, i);
			}
			after[round] = stacks();
			rss[round] = rss_kib();
		}
		if (after[0] >= BATCH)
			break;
	}
	CHECK(after[0] >= BATCH);
	/* The second maps a few at most (pooled descriptors left stackless by the earlier trim
	 * may come first), not one per create. */
	CHECK(after[1] <= after[0] + KEPT);
	uint64_t idle2 = idle_stacks();
	long rss_idle = rss_kib();
	printf("stacks: %llu mapped when idle after the bursts (RSS %ld KiB); batches of %d: %llu, "
	       "%llu mapped (RSS %ld, %ld KiB), %llu when idle (RSS %ld KiB)\n",
	       (unsigned long long)idle, rss0, BATCH, (unsigned long long)after[0],
	       (unsigned long long)after[1], rss[0], rss[1], (unsigned long long)idle2, rss_idle);
	CHECK_EQ(pvrt_finalize(), 0);
	return 0;
}
