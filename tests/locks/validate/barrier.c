/* SPDX-License-Identifier: MIT */
/*
 * Validation of the barrier: every round of a barrier sees all threads, one serial thread per
 * round. Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/barrier.h>

/* ---- barrier: each round everyone sees the same round number ---- */
static pvrt_barrier_t bar;
static long round_no, serials;

static void *barrier_thread(void *p)
{
	(void)p;
	long n = 500 * scale;
	for (long i = 0; i < n; i++) {
		long seen = __atomic_load_n(&round_no, __ATOMIC_RELAXED);
		if (seen != i)
			FAIL("barrier round %ld, expected %ld", seen, i);
		int r = pvrt_barrier_wait(&bar);
		if (r == PVRT_BARRIER_SERIAL_THREAD) {
			serials++;
			__atomic_store_n(&round_no, i + 1, __ATOMIC_RELAXED);
		} else if (r)
			FAIL("barrier %d", r);
		/* Second barrier: the serial thread's update is done before anyone reads. */
		pvrt_barrier_wait(&bar);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	if (pvrt_barrier_init(&bar, NT))
		FAIL("barrier init");
	run(barrier_thread, NT);
	if (serials != 500 * scale)
		FAIL("barrier serials %ld", serials);
	if (pvrt_barrier_destroy(&bar))
		FAIL("barrier destroy");
	printf("barrier: %ld rounds\n", serials);
	validate_end();
	printf("validate barrier: OK\n");
	return 0;
}
