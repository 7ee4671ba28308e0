/* SPDX-License-Identifier: MIT */
/*
 * Validation of the sem: counting semaphores: producers and consumers on a bounded ring, and bursts
 * of posts. Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/sem.h>
#include <pvrt/mutex.h>

/*
 * ---- counting semaphores: several producers and consumers on a bounded ring ----
 * 'slots' counts free ring entries (starts at SEM_CAP), 'items' filled ones (starts at 0).
 * A producer takes a slot token, pushes under a mutex, posts an item token; a consumer the
 * reverse. A token handed out without a matching entry (or one lost) shows exactly: the ring is
 * full or empty when the token says it cannot be, the totals differ, or, for a lost wake-up,
 * a thread that waits without a timeout sleeps for good (the test hangs: ctest's timeout). Each
 * side mixes trywait, short timed waits that may time out (and are retried) and plain waits;
 * producer 0 and consumer 0 use plain waits only, so a lost wake-up is not papered over by a
 * timeout. SEM_CAP is small, so both semaphores run out and are waited on all the time.
 */
#define SEM_PRODUCERS 3
#define SEM_CONSUMERS 3
#define SEM_CAP	      3
#define SEM_ITEMS     (6000 * scale) /* per producer; a multiple of SEM_CONSUMERS */
static pvrt_sem_t sem_slots, sem_items;
static pvrt_mutex_t ring_m = PVRT_MUTEX_INITIALIZER;
static long ring[SEM_CAP], ring_n, ring_head; /* under ring_m */
static long sem_psum, sem_csum, sem_consumed; /* under ring_m */
static long sem_timeouts, sem_try_fail;

/* Take one token from s: trywait, a timed wait (retried on timeout) or a plain wait. */
static void sem_take(pvrt_sem_t *s, long i, bool plain_only)
{
	int r;
	switch (plain_only ? 2 : i % 5) {
	case 0:
		r = pvrt_sem_trywait(s);
		if (r == -EAGAIN) {
			__atomic_fetch_add(&sem_try_fail, 1, __ATOMIC_RELAXED);
			r = pvrt_sem_wait(s);
		}
		break;
	case 1:
	case 3: {
		/* Timeouts of 10-40 us: many expire while the semaphore is empty. */
		for (;;) {
			struct timespec ts =
			    in_us(i % 2 ? CLOCK_MONOTONIC : CLOCK_REALTIME, 10 * (1 + i % 4));
			r = pvrt_sem_timedwait(s, i % 2 ? CLOCK_MONOTONIC : CLOCK_REALTIME, &ts);
			if (r != -ETIMEDOUT)
				break;
			__atomic_fetch_add(&sem_timeouts, 1, __ATOMIC_RELAXED);
		}
		break;
	}
	default:
		r = pvrt_sem_wait(s);
	}
	if (r)
		FAIL("sem wait/trywait/timedwait: %d", r);
	int v;
	if (pvrt_sem_getvalue(s, &v) || v < 0 || v > SEM_CAP)
		FAIL("sem value %d outside 0..%d", v, SEM_CAP);
}

static void *sem_producer(long id)
{
	for (long i = 0; i < SEM_ITEMS; i++) {
		sem_take(&sem_slots, i + id, id == 0);
		long item = id * SEM_ITEMS + i + 1;
		pvrt_mutex_lock(&ring_m);
		if (ring_n == SEM_CAP)
			FAIL("sem: a slot token but the ring is full");
		ring[(ring_head + ring_n++) % SEM_CAP] = item;
		sem_psum += item;
		pvrt_mutex_unlock(&ring_m);
		if (pvrt_sem_post(&sem_items))
			FAIL("sem_post items");
	}
	return NULL;
}

static void *sem_consumer(long id)
{
	long n = SEM_ITEMS * SEM_PRODUCERS / SEM_CONSUMERS;
	for (long i = 0; i < n; i++) {
		sem_take(&sem_items, i + id, id == 0);
		pvrt_mutex_lock(&ring_m);
		if (ring_n == 0)
			FAIL("sem: an item token but the ring is empty");
		long item = ring[ring_head];
		ring_head = (ring_head + 1) % SEM_CAP;
		ring_n--;
		sem_csum += item;
		sem_consumed++;
		pvrt_mutex_unlock(&ring_m);
		if (pvrt_sem_post(&sem_slots))
			FAIL("sem_post slots");
	}
	return NULL;
}

static void *sem_thread(void *p)
{
	long id = (long)p;
	return id < SEM_PRODUCERS ? sem_producer(id) : sem_consumer(id - SEM_PRODUCERS);
}

/*
 * Bursts: SEM_CONSUMERS threads wait (plain waits) on an empty semaphore, then SEM_CONSUMERS
 * posts come back to back; every waiter must get one. This catches a post that wakes only
 * when the count leaves 0 (the second post of a burst then wakes nobody and a waiter sleeps
 * for good with a count of 1: the test hangs), which the ring above hides because later posts
 * rescue the sleeper. The short sleep before a burst only lets the waiters reach their park,
 * which makes such a bug show; nothing depends on its length.
 */
static pvrt_sem_t sem_burst;
static long burst_arrived, burst_taken, burst_round;

static void *burst_waiter(void *p)
{
	(void)p;
	for (long r = 1; r <= 300 * scale; r++) {
		/* One token per waiter and round: wait for the round to begin (else a fast
		 * waiter could take two tokens of one burst). Relaxed (all three counters):
		 * main and the waiters only poll them for progress; the semaphore itself is
		 * what is checked. */
		while (__atomic_load_n(&burst_round, __ATOMIC_RELAXED) < r)
			sched_yield();
		__atomic_fetch_add(&burst_arrived, 1, __ATOMIC_RELAXED);
		if (pvrt_sem_wait(&sem_burst))
			FAIL("burst sem_wait");
		__atomic_fetch_add(&burst_taken, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void sem_burst_test(void)
{
	pthread_t t[SEM_CONSUMERS];
	struct start s[SEM_CONSUMERS];
	if (pvrt_sem_init(&sem_burst, 0))
		FAIL("sem init");
	for (long i = 0; i < SEM_CONSUMERS; i++) {
		s[i] = (struct start){burst_waiter, i, NULL};
		if (pthread_create(&t[i], NULL, start, &s[i]))
			FAIL("pthread_create");
	}
	for (long r = 1; r <= 300 * scale; r++) {
		__atomic_store_n(&burst_round, r, __ATOMIC_RELAXED);
		while (__atomic_load_n(&burst_arrived, __ATOMIC_RELAXED) < r * SEM_CONSUMERS)
			sched_yield();
		usleep(50);
		for (int k = 0; k < SEM_CONSUMERS; k++)
			if (pvrt_sem_post(&sem_burst))
				FAIL("burst sem_post");
		/* A lost wake-up leaves this loop waiting for good (ctest's timeout). */
		while (__atomic_load_n(&burst_taken, __ATOMIC_RELAXED) < r * SEM_CONSUMERS)
			sched_yield();
	}
	for (int i = 0; i < SEM_CONSUMERS; i++)
		pthread_join(t[i], NULL);
	int v;
	if (pvrt_sem_getvalue(&sem_burst, &v) || v != 0)
		FAIL("burst: value %d at the end", v);
}

static void sem_test(void)
{
	if (pvrt_sem_init(&sem_slots, SEM_CAP) || pvrt_sem_init(&sem_items, 0))
		FAIL("sem init");
	struct pvrt_lock_stats before;
	pvrt_locks_stats_get(PVRT_LOCK_SEM, &before);
	run(sem_thread, SEM_PRODUCERS + SEM_CONSUMERS);
	struct pvrt_lock_stats st = stats_since(PVRT_LOCK_SEM, &before);
	long total = SEM_ITEMS * SEM_PRODUCERS;
	/* Items 1..total, each produced once and consumed once. */
	if (sem_consumed != total || sem_psum != total * (total + 1) / 2 || sem_csum != sem_psum)
		FAIL("sem: consumed %ld of %ld, sums %ld / %ld", sem_consumed, total, sem_csum,
		     sem_psum);
	int vs, vi;
	if (pvrt_sem_getvalue(&sem_slots, &vs) || pvrt_sem_getvalue(&sem_items, &vi) ||
	    vs != SEM_CAP || vi != 0 || ring_n != 0)
		FAIL("sem: values slots %d items %d ring %ld at the end", vs, vi, ring_n);
	/* Nothing left to take: trywait must say so. */
	if (pvrt_sem_trywait(&sem_items) != -EAGAIN)
		FAIL("sem: trywait on an empty semaphore");
	if (pvrt_sem_destroy(&sem_slots) || pvrt_sem_destroy(&sem_items))
		FAIL("sem destroy");
	printf("sem: %ld items, %ld timed waits timed out, %ld trywaits failed; %llu of %llu "
	       "acquisitions contended, %llu parks\n",
	       total, sem_timeouts, sem_try_fail, (unsigned long long)st.contended,
	       (unsigned long long)st.acquisitions, (unsigned long long)st.parks);
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	sem_test();
	sem_burst_test();
	validate_end();
	printf("validate sem: OK\n");
	return 0;
}
