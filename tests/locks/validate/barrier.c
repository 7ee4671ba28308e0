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

/* ---- more threads than the count: rounds overlap, every arrival joins exactly one ---- */
static pvrt_barrier_t half, all;
static long half_serials, half_in; /* atomic */

/* Per phase, each of 2 NT threads arrives once at 'half' (count NT): two rounds, the second's
 * arrivals racing with the first's end; then at 'all' (count 2 NT), so no thread runs a phase
 * ahead (it would wait in a round nobody else can fill). */
static void *overlap_thread(void *p)
{
	(void)p;
	for (long i = 0; i < 300 * scale; i++) {
		__atomic_fetch_add(&half_in, 1, __ATOMIC_RELAXED);
		int r = pvrt_barrier_wait(&half);
		/* Released only once a round of NT has arrived in this phase (the barrier's
		 * release orders their counts before our return). */
		long in = __atomic_load_n(&half_in, __ATOMIC_RELAXED);
		if (in < i * 2 * NT + NT)
			FAIL("overlapping rounds: released with %ld arrivals, round needs %ld", in,
			     i * 2 * NT + NT);
		if (r == PVRT_BARRIER_SERIAL_THREAD)
			__atomic_fetch_add(&half_serials, 1, __ATOMIC_RELAXED);
		else if (r)
			FAIL("barrier %d", r);
		pvrt_barrier_wait(&all);
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
	/* An arrival racing with a round's end belongs to the next round: one counted twice or
	 * in an ended round shows as a wrong number of rounds, or as a hang. */
	if (pvrt_barrier_init(&half, NT) || pvrt_barrier_init(&all, 2 * NT))
		FAIL("barrier init");
	run(overlap_thread, 2 * NT);
	if (half_serials != 2 * 300 * scale)
		FAIL("overlapping rounds: %ld serials, expected %ld", half_serials,
		     2 * 300 * scale);
	if (pvrt_barrier_destroy(&half) || pvrt_barrier_destroy(&all))
		FAIL("barrier destroy");
	printf("barrier: %ld overlapping rounds of %d threads with %d inside\n", half_serials, NT,
	       2 * NT);
	validate_end();
	printf("validate barrier: OK\n");
	return 0;
}
