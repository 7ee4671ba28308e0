/* SPDX-License-Identifier: MIT */
/*
 * Stacks: a ULT inherits its creator's floating-point state even though its frame reaches its
 * stack only when it first runs; many ULTs alive at once each get their own stack, and their
 * locals survive while others run on the reused ones; after the burst, an idle runtime gives the
 * stacks back (the mappings count returns near where it started). Properties only: the idle
 * check waits as long as it takes (ctest's timeout bounds it).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/thread.h>

#include <fenv.h>
#include <stdint.h>
#include <string.h>

#ifdef __SANITIZE_THREAD__
#define BURST 300 /* a TSan fiber costs most of a MiB of shadow state */
#else
#define BURST 3000
#endif

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
	CHECK_EQ(pvrt_init(&c), 0);

	/* The creator's rounding mode, although the ULT first runs after the creator reset it. */
	pvrt_thread_t t;
	CHECK_EQ(fesetround(FE_UPWARD), 0);
	CHECK_EQ(pvrt_thread_create(&t, NULL, rounding, NULL), 0);
	CHECK_EQ(fesetround(FE_TONEAREST), 0);
	void *r;
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK_EQ((intptr_t)r, FE_UPWARD);

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
	CHECK_EQ(pvrt_finalize(), 0);
	return 0;
}
