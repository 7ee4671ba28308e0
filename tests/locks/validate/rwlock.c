/* SPDX-License-Identifier: MIT */
/*
 * Validation of the rwlock: writers and readers overlapping on one rwlock, both preferences.
 * Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/rwlock.h>
#include <pvrt/mutex.h>

/*
 * ---- rwlock: writers and readers overlapping on one lock ----
 * Writers rewrite RW_WORDS words as one generation g (word k = g * (k + 1)), one word at a time
 * with a pause between, so a reader or writer let in during a write sees a mix of generations.
 * Readers read all words, also with pauses, so several readers hold the lock together and
 * writers wait for them. Some sections give the CPU away halfway (sched_yield), so that the
 * other threads meet a held lock even when the machine is loaded and runs one of them at a
 * time. The words are plain: only the lock orders them (TSan checks too).
 * Who is inside is also counted (relaxed: if the lock is right, its acquire/release orders these
 * updates; if it is wrong, the word check or TSan still sees it).
 */
#define RW_WRITERS 2
#define RW_READERS 3
#define RW_WORDS   8
static pvrt_rwlock_t rw;
static long rw_words[RW_WORDS];
static long rw_writes; /* under the write lock */
static long rw_reads, rw_rd_timeouts, rw_wr_timeouts, rw_busy, rw_nested;
static long rw_gen0; /* generation at the start of a run */
static int rw_readers_in, rw_writer_in;
static int rw_reader_pref;
static long rw_epoch;	    /* writes so far, read outside the lock */
static int rw_writers_left; /* writers still running */

static void dwell(int n)
{
	for (volatile int k = 0; k < n; k++)
		;
}

/* The words hold one complete generation; returns it. 'yield': give the CPU away halfway. */
static long rw_check_words(const char *who, bool yield)
{
	long g = rw_words[0];
	for (int k = 1; k < RW_WORDS; k++) {
		if (rw_words[k] != g * (k + 1))
			FAIL("rwlock: %s saw word %d = %ld in generation %ld (torn write)", who, k,
			     rw_words[k], g);
		if (k == RW_WORDS / 2 && yield)
			sched_yield();
		else if (k % 2 == 0)
			dwell(20);
	}
	return g;
}

static void rw_reader_body(bool nested, bool yield)
{
	/* Relaxed: see the section comment. */
	__atomic_fetch_add(&rw_readers_in, 1, __ATOMIC_RELAXED);
	if (__atomic_load_n(&rw_writer_in, __ATOMIC_RELAXED))
		FAIL("rwlock: a reader is in with a writer");
	rw_check_words("reader", yield);
	__atomic_fetch_sub(&rw_readers_in, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(nested ? &rw_nested : &rw_reads, 1, __ATOMIC_RELAXED);
}

static void *rw_reader(void *p)
{
	long id = (long)p;
	long n = 4000 * scale;
	long seen = 0;
	for (long i = 0; i < n; i++) {
		int r;
		if (i % 8 == 7) {
			/*
			 * Let a writer in before reading on. Without this, readers (which overlap
			 * and, under reader preference, keep the lock read-held) finish first and
			 * the writers then run alone, so the two would barely meet. Waiting outside
			 * the lock holds nothing: once every reader waits, the lock is free and a
			 * writer gets it, unless its wake-up was lost (then this hangs: the test
			 * fails by its timeout). Relaxed: only progress is read here.
			 */
			while (__atomic_load_n(&rw_epoch, __ATOMIC_RELAXED) == seen &&
			       __atomic_load_n(&rw_writers_left, __ATOMIC_RELAXED))
				sched_yield();
			seen = __atomic_load_n(&rw_epoch, __ATOMIC_RELAXED);
		}
		switch ((i + id) % 6) {
		case 0:
			r = pvrt_rwlock_tryrdlock(&rw);
			if (r == -EBUSY) {
				__atomic_fetch_add(&rw_busy, 1, __ATOMIC_RELAXED);
				r = pvrt_rwlock_rdlock(&rw);
			}
			break;
		case 1: {
			/* Short enough to time out behind a writer now and then. */
			struct timespec ts = in_us(CLOCK_MONOTONIC, 20 + 20 * (i % 4));
			r = pvrt_rwlock_timedrdlock(&rw, CLOCK_MONOTONIC, &ts);
			if (r == -ETIMEDOUT) {
				__atomic_fetch_add(&rw_rd_timeouts, 1, __ATOMIC_RELAXED);
				continue;
			}
			break;
		}
		default:
			r = pvrt_rwlock_rdlock(&rw);
		}
		if (r)
			FAIL("rdlock %d", r);
		rw_reader_body(false, i % 4 == 0);
		if (rw_reader_pref && i % 7 == 0) {
			/* Reader preference lets a reader lock again while writers wait
			 * (POSIX's recursive read lock); a wrong refusal hangs here. */
			if (pvrt_rwlock_rdlock(&rw))
				FAIL("nested rdlock");
			rw_reader_body(true, false);
			if (pvrt_rwlock_unlock(&rw))
				FAIL("nested rdunlock");
		}
		if (pvrt_rwlock_unlock(&rw))
			FAIL("rdunlock");
	}
	return NULL;
}

static void *rw_writer(void *p)
{
	long id = (long)p;
	long n = 1500 * scale;
	for (long i = 0; i < n; i++) {
		int r;
		switch ((i + id) % 4) {
		case 0:
			r = pvrt_rwlock_trywrlock(&rw);
			if (r == -EBUSY) {
				__atomic_fetch_add(&rw_busy, 1, __ATOMIC_RELAXED);
				r = pvrt_rwlock_wrlock(&rw);
			}
			break;
		case 1: {
			struct timespec ts = in_us(CLOCK_REALTIME, 30 + 30 * (i % 3));
			r = pvrt_rwlock_timedwrlock(&rw, CLOCK_REALTIME, &ts);
			if (r == -ETIMEDOUT) {
				__atomic_fetch_add(&rw_wr_timeouts, 1, __ATOMIC_RELAXED);
				continue;
			}
			break;
		}
		default:
			r = pvrt_rwlock_wrlock(&rw);
		}
		if (r)
			FAIL("wrlock %d", r);
		if (__atomic_exchange_n(&rw_writer_in, 1, __ATOMIC_RELAXED))
			FAIL("rwlock: two writers inside");
		if (__atomic_load_n(&rw_readers_in, __ATOMIC_RELAXED))
			FAIL("rwlock: a writer is in with readers");
		long g = rw_check_words("writer", false) + 1;
		for (int k = 0; k < RW_WORDS; k++) {
			rw_words[k] = g * (k + 1);
			if (k == RW_WORDS / 2 && i % 4 == 0)
				sched_yield();
			else
				dwell(20);
		}
		rw_writes++;
		/* Relaxed: a progress count for waiting readers (see rw_reader). */
		__atomic_fetch_add(&rw_epoch, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&rw_writer_in, 0, __ATOMIC_RELAXED);
		if (pvrt_rwlock_unlock(&rw))
			FAIL("wrunlock");
	}
	return NULL;
}

static void *rw_thread(void *p)
{
	long id = (long)p;
	if (id >= RW_WRITERS)
		return rw_reader((void *)(id - RW_WRITERS));
	rw_writer(p);
	/* Relaxed: see rw_reader; the join orders everything else. */
	__atomic_fetch_sub(&rw_writers_left, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void rw_test(int pref)
{
	if (pvrt_rwlock_init(&rw, pref))
		FAIL("rwlock init");
	rw_reader_pref = pref == PVRT_RWLOCK_PREFER_READER;
	rw_writes = rw_reads = rw_rd_timeouts = rw_wr_timeouts = rw_busy = rw_nested = 0;
	rw_epoch = 0;
	rw_writers_left = RW_WRITERS;
	struct pvrt_lock_stats before;
	pvrt_locks_stats_get(PVRT_LOCK_RWLOCK, &before);
	run(rw_thread, RW_WRITERS + RW_READERS);
	struct pvrt_lock_stats st = stats_since(PVRT_LOCK_RWLOCK, &before);
	/* Every attempt either got the lock or timed out; the words hold one generation per
	 * write (continued from the previous run). */
	if (rw_writes + rw_wr_timeouts != 1500 * scale * RW_WRITERS)
		FAIL("rwlock: %ld writes + %ld timeouts", rw_writes, rw_wr_timeouts);
	if (rw_reads + rw_rd_timeouts != 4000 * scale * RW_READERS)
		FAIL("rwlock: %ld reads + %ld timeouts", rw_reads, rw_rd_timeouts);
	if (rw_words[0] != rw_gen0 + rw_writes || rw_check_words("main", false) != rw_words[0])
		FAIL("rwlock: generation %ld after %ld + %ld writes", rw_words[0], rw_gen0,
		     rw_writes);
	rw_gen0 = rw_words[0];
	if (rw_readers_in || rw_writer_in)
		FAIL("rwlock: still inside: %d readers, writer %d", rw_readers_in, rw_writer_in);
	/* Neither a timed-out attempt nor an unlock may leave the lock taken. */
	if (pvrt_rwlock_trywrlock(&rw) || pvrt_rwlock_unlock(&rw))
		FAIL("rwlock: not free after the run");
	if (pvrt_rwlock_destroy(&rw))
		FAIL("rwlock destroy");
	printf("rwlock %s: %ld writes (%ld timed out), %ld reads (%ld timed out, %ld nested), "
	       "%ld busy; %llu of %llu acquisitions contended, %llu parks\n",
	       rw_reader_pref ? "reader-pref" : "writer-pref", rw_writes, rw_wr_timeouts, rw_reads,
	       rw_rd_timeouts, rw_nested, rw_busy, (unsigned long long)st.contended,
	       (unsigned long long)st.acquisitions, (unsigned long long)st.parks);
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	rw_test(PVRT_RWLOCK_PREFER_READER);
	rw_test(PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE);
	validate_end();
	printf("validate rwlock: OK\n");
	return 0;
}
