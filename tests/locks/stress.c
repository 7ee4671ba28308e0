/* SPDX-License-Identifier: MIT */
/*
 * Mutual exclusion and no-lost-wake-up stress of the pvrt locks, with the hint
 * values the locks read flipping at random (a fake hint page driven by a chaos
 * thread, installed with pvrt_locks_set_hints: preempted, is_idle and steal, all
 * marked valid), so that every hint-dependent branch (spin cut short, short spin
 * budget after steal, wake-up choices, hand-off deferred, barrier parking) runs
 * while correctness is checked. Also run under TSan, and with PVRT_HINTS=emu
 * (random flags; real overcommit, where lock holders are stopped).
 *
 * Every check is exact: counters protected by a lock must add up, readers must
 * never see a half-done write (writers and readers overlap on one rwlock), every
 * produced item is consumed once (producers and consumers on counting
 * semaphores, with trywait and timed waits that time out), every barrier round
 * sees all threads. A lost wake-up shows as a hang (ctest's timeout).
 *
 * usage: stress [SCALE]   (iterations are multiplied by SCALE, default 1)
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/once.h>
#include <pvrt/pvhint.h>
#include <pvrt/rwlock.h>
#include <pvrt/sem.h>
#include <pvrt/spinlock.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NT 4
#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static long scale = 1;

/*
 * ---- fake hint page with random hints ----
 * Every field the locks read changes at random, with every valid bit set, so each
 * hint-dependent branch runs: the owner's vCPU preempted (spins cut short), the pCPU under a
 * vCPU idle or busy (wake-up choices), and the spinner's own steal time growing or still (the
 * short spin budget of a vCPU that shares its physical CPU, or the long one). Threads that are
 * not attached to an emulated vCPU read the record of the CPU they run on; all records change
 * alike, so which one does not matter.
 */
#define FAKE_VCPUS 8
static struct pvhint_record fake_rec[FAKE_VCPUS];
static pvhint_t fake = {.rec = fake_rec,
			.nr = FAKE_VCPUS,
			.valid =
			    PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE};
static int chaos_stop;
static long chaos_steal_bumps, chaos_idle_flips; /* written by the chaos thread only */

/*
 * Add 'delta' ns to a record's steal time with the writer protocol of pvhint_abi.h (the one
 * KVM and the emulator follow): version odd, steal, version even. This thread is the only
 * writer, so it may read its own fields relaxed.
 */
static void fake_add_steal(struct pvhint_record *r, uint64_t delta)
{
	uint32_t ver = __atomic_load_n(&r->version, __ATOMIC_RELAXED);
	uint64_t st = __atomic_load_n(&r->steal, __ATOMIC_RELAXED);
	/* Relaxed: the release store of steal below orders this odd version before it, so a
	 * reader that acquires the new steal sees the odd version (or later) on its re-check. */
	__atomic_store_n(&r->version, ver + 1, __ATOMIC_RELAXED);
	/* Release: see above. Monotonic: steal only grows. */
	__atomic_store_n(&r->steal, st + delta, __ATOMIC_RELEASE);
	/* Release: a reader that sees the even version also sees the new steal. */
	__atomic_store_n(&r->version, ver + 2, __ATOMIC_RELEASE);
}

static void *chaos(void *p)
{
	(void)p;
	unsigned seed = 12345;
	while (!__atomic_load_n(&chaos_stop, __ATOMIC_RELAXED)) {
		for (int v = 0; v < FAKE_VCPUS; v++) {
			struct pvhint_record *r = &fake_rec[v];
			/* Relaxed (all three): hints, read with relaxed loads; no data depends
			 * on them. */
			__atomic_store_n(&r->preempted,
					 (uint8_t)(rand_r(&seed) % 3 == 0 ? PVHINT_PREEMPTED : 0),
					 __ATOMIC_RELAXED);
			uint8_t idle = (uint8_t)(rand_r(&seed) % 2);
			if (idle != __atomic_load_n(&r->is_idle, __ATOMIC_RELAXED))
				chaos_idle_flips++;
			__atomic_store_n(&r->is_idle, idle, __ATOMIC_RELAXED);
			/*
			 * Steal grows in random jumps (1 ns to ~4 ms) about every 13 ms per vCPU
			 * (1 in 64 rounds of 200 us): with the locks' 10 ms window, a spinner
			 * sees its vCPU's steal as recently grown about half of the time.
			 */
			if (rand_r(&seed) % 64 == 0) {
				fake_add_steal(r, 1 + (uint64_t)rand_r(&seed) % 4000000);
				chaos_steal_bumps++;
			}
		}
		usleep(200);
	}
	return NULL;
}

static struct timespec in_us(clockid_t clk, long us)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	ts.tv_nsec += us * 1000;
	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Under the emulator every worker thread sits on an emulated vCPU, so that in slice mode lock
 * holders really get stopped mid-section, as under a host. */
static pvhint_t *emu;
struct start {
	void *(*fn)(void *);
	long id;
	pthread_barrier_t *gate; /* NULL: start at once */
};
static void *start(void *p)
{
	struct start *s = p;
	if (emu && pvhint_emu_attach_next(emu))
		FAIL("pvhint_emu_attach_next");
	/* All threads of a run start together, so they contend from the first iteration
	 * instead of the first ones finishing before the last are created. */
	if (s->gate)
		pthread_barrier_wait(s->gate);
	void *r = s->fn((void *)s->id);
	if (emu)
		pvhint_emu_detach(emu);
	return r;
}

static void run(void *(*fn)(void *), int n)
{
	pthread_t t[16];
	struct start s[16];
	pthread_barrier_t gate;
	if (n > 16 || pthread_barrier_init(&gate, NULL, (unsigned)n))
		FAIL("run: %d threads", n);
	for (long i = 0; i < n; i++) {
		s[i] = (struct start){fn, i, &gate};
		if (pthread_create(&t[i], NULL, start, &s[i]))
			FAIL("pthread_create");
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&gate);
}

/* Events of one lock class since 'before' (to show how contended a part was). */
static struct pvrt_lock_stats stats_since(enum pvrt_lock_class c,
					  const struct pvrt_lock_stats *before)
{
	struct pvrt_lock_stats now;
	pvrt_locks_stats_get(c, &now);
	return (struct pvrt_lock_stats){
	    .acquisitions = now.acquisitions - before->acquisitions,
	    .contended = now.contended - before->contended,
	    .spin_cut = now.spin_cut - before->spin_cut,
	    .parks = now.parks - before->parks,
	    .handoffs = now.handoffs - before->handoffs,
	};
}

/* ---- mutex: lock / trylock / timedlock (both clocks), short and long sections ---- */
static pvrt_mutex_t mx = PVRT_MUTEX_INITIALIZER;
static long mx_count, mx_timeouts;
static int mx_inside;

static void *mutex_thread(void *p)
{
	long id = (long)p;
	long n = 20000 * scale;
	for (long i = 0; i < n; i++) {
		int r;
		switch ((i + id) % 8) {
		case 0:
			r = pvrt_mutex_trylock(&mx);
			if (r == -EBUSY)
				r = pvrt_mutex_lock(&mx);
			break;
		case 1: {
			struct timespec ts = in_us(CLOCK_MONOTONIC, 50);
			r = pvrt_mutex_timedlock(&mx, CLOCK_MONOTONIC, &ts);
			break;
		}
		case 2: {
			struct timespec ts = in_us(CLOCK_REALTIME, 200);
			r = pvrt_mutex_timedlock(&mx, CLOCK_REALTIME, &ts);
			break;
		}
		default:
			r = pvrt_mutex_lock(&mx);
		}
		if (r == -ETIMEDOUT) {
			__atomic_fetch_add(&mx_timeouts, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (r)
			FAIL("mutex lock: %d", r);
		if (__atomic_exchange_n(&mx_inside, 1, __ATOMIC_RELAXED))
			FAIL("two threads inside the mutex");
		mx_count++; /* plain: the mutex must protect it (TSan checks too) */
		if (i % 64 == 0)
			for (volatile int k = 0; k < 2000; k++) /* a long section now and then */
				;
		__atomic_store_n(&mx_inside, 0, __ATOMIC_RELAXED);
		if (pvrt_mutex_unlock(&mx))
			FAIL("mutex unlock");
	}
	return NULL;
}

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

/* ---- condvar: bounded queue, signal and broadcast, timed waits ---- */
#define QCAP 8
static pvrt_mutex_t qm = PVRT_MUTEX_INITIALIZER;
static pvrt_cond_t notempty, notfull;
static int q[QCAP], qn;
static long produced, consumed, csum, psum;
static int producers_done;

static void *producer(void *p)
{
	long id = (long)p;
	long n = 5000 * scale;
	for (long i = 1; i <= n; i++) {
		pvrt_mutex_lock(&qm);
		while (qn == QCAP) {
			if (i % 2) {
				pvrt_cond_wait(&notfull, &qm);
			} else {
				struct timespec ts = in_us(CLOCK_REALTIME, 300);
				int r = pvrt_cond_timedwait(&notfull, &qm, &ts);
				if (r && r != -ETIMEDOUT)
					FAIL("timedwait %d", r);
			}
		}
		q[qn++] = (int)(i + id);
		produced++;
		psum += i + id;
		if (i % 7 == 0)
			pvrt_cond_broadcast(&notempty);
		else
			pvrt_cond_signal(&notempty);
		pvrt_mutex_unlock(&qm);
	}
	return NULL;
}

static void *consumer(void *p)
{
	/* One consumer waits without a timeout, so a lost wake-up hangs or fails the test
	 * instead of being papered over by the next 500 us timeout. */
	bool untimed = (long)p == 3;
	for (;;) {
		pvrt_mutex_lock(&qm);
		while (qn == 0 && !producers_done) {
			if (untimed) {
				int r = pvrt_cond_wait(&notempty, &qm);
				if (r)
					FAIL("cond wait %d", r);
				continue;
			}
			struct timespec ts = in_us(CLOCK_MONOTONIC, 500);
			int r = pvrt_cond_clockwait(&notempty, &qm, CLOCK_MONOTONIC, &ts);
			if (r && r != -ETIMEDOUT)
				FAIL("clockwait %d", r);
		}
		if (qn == 0 && producers_done) {
			pvrt_mutex_unlock(&qm);
			return NULL;
		}
		csum += q[--qn];
		consumed++;
		pvrt_cond_broadcast(&notfull);
		pvrt_mutex_unlock(&qm);
	}
}

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

/* ---- spinlock ---- */
static pvrt_spinlock_t spl;
static long spin_count;

static void *spin_thread(void *p)
{
	(void)p;
	long n = 20000 * scale;
	for (long i = 0; i < n; i++) {
		if (i % 5 == 0) {
			while (pvrt_spin_trylock(&spl) == -EBUSY)
				;
		} else {
			pvrt_spin_lock(&spl);
		}
		spin_count++;
		pvrt_spin_unlock(&spl);
	}
	return NULL;
}

static pvrt_once_t once = PVRT_ONCE_INIT;
static int once_runs;
static void once_fn(void)
{
	once_runs++;
}
static void *once_thread(void *p)
{
	(void)p;
	pvrt_once(&once, once_fn);
	if (__atomic_load_n(&once_runs, __ATOMIC_RELAXED) != 1)
		FAIL("once: initialiser not done on return");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		char *end;
		scale = strtol(argv[1], &end, 10);
		if (*end || scale < 1)
			FAIL("bad SCALE '%s'", argv[1]);
	}
	pvrt_locks_stats_enable(true);
	pvhint_t *def = NULL;
	int r = pvhint_default(&def);
	printf("default hint source: %s%s\n", def ? pvhint_source_name(def) : "?",
	       r ? " (open failed)" : "");
	/* The environment asked for a source: make sure we really got it. */
	const char *want = getenv("PVRT_HINTS");
	if (want && strcmp(want, "auto") && (!def || strcmp(pvhint_source_name(def), want)))
		FAIL("PVRT_HINTS=%s but the default handle is %s", want,
		     def ? pvhint_source_name(def) : "none");
	pthread_t ch;
	bool use_fake = !want || strcmp(want, "emu");
	if (!use_fake)
		emu = def;
	if (use_fake) {
		pvrt_locks_set_hints(&fake);
		pthread_create(&ch, NULL, chaos, NULL);
	}

	run(mutex_thread, NT);
	if (mx_count + mx_timeouts != 20000 * scale * NT)
		FAIL("mutex: %ld + %ld timeouts != %ld", mx_count, mx_timeouts, 20000 * scale * NT);

	rw_test(PVRT_RWLOCK_PREFER_READER);
	rw_test(PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE);

	pvrt_cond_init(&notempty, CLOCK_MONOTONIC);
	pvrt_cond_init(&notfull, CLOCK_REALTIME);
	pthread_t pc[4];
	struct start ps[4];
	for (long i = 0; i < 4; i++) {
		ps[i] = (struct start){i < 2 ? producer : consumer, i, NULL};
		pthread_create(&pc[i], NULL, start, &ps[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(pc[i], NULL);
	pvrt_mutex_lock(&qm);
	producers_done = 1;
	pvrt_cond_broadcast(&notempty);
	pvrt_mutex_unlock(&qm);
	for (int i = 2; i < 4; i++)
		pthread_join(pc[i], NULL);
	if (produced != consumed || psum != csum || produced != 2 * 5000 * scale)
		FAIL("cond: produced %ld consumed %ld", produced, consumed);
	if (pvrt_cond_destroy(&notempty) || pvrt_cond_destroy(&notfull))
		FAIL("cond destroy");

	sem_test();
	sem_burst_test();

	pvrt_barrier_init(&bar, NT);
	run(barrier_thread, NT);
	if (serials != 500 * scale)
		FAIL("barrier serials %ld", serials);
	if (pvrt_barrier_destroy(&bar))
		FAIL("barrier destroy");

	run(spin_thread, NT);
	if (spin_count != 20000 * scale * NT)
		FAIL("spinlock count %ld", spin_count);

	run(once_thread, NT);
	if (once_runs != 1)
		FAIL("once ran %d times", once_runs);

	if (use_fake) {
		__atomic_store_n(&chaos_stop, 1, __ATOMIC_RELAXED);
		pthread_join(ch, NULL);
		/* The chaos thread ran all along (joined: its counters are ours to read). */
		printf("fake hints: %ld steal jumps, %ld is_idle flips\n", chaos_steal_bumps,
		       chaos_idle_flips);
		if (chaos_steal_bumps == 0 || chaos_idle_flips == 0)
			FAIL("the fake hint page did not change");
	}
	for (int c = 0; c < PVRT_LOCK_NCLASSES; c++) {
		struct pvrt_lock_stats st;
		pvrt_locks_stats_get(c, &st);
		printf("%-8s acq %llu contended %llu spin-cut %llu parks %llu hand-offs %llu\n",
		       pvrt_lock_class_name(c), (unsigned long long)st.acquisitions,
		       (unsigned long long)st.contended, (unsigned long long)st.spin_cut,
		       (unsigned long long)st.parks, (unsigned long long)st.handoffs);
	}
	printf("mutex timeouts %ld\nstress: OK\n", mx_timeouts);
	return 0;
}
