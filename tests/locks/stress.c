/* SPDX-License-Identifier: MIT */
/*
 * Mutual exclusion and no-lost-wake-up stress of the pvrt locks, with the hint
 * values the locks read flipping at random (a fake hint page driven by a chaos
 * thread, installed with pvrt_locks_set_hints), so that every hint-dependent
 * branch (spin cut short, hand-off deferred, barrier parking) runs while
 * correctness is checked. Also run under TSan, and with PVRT_HINTS=emu
 * PVRT_EMU=mode=random for the parking notifications.
 *
 * Every check is exact: counters protected by a lock must add up, readers must
 * never see a half-done write, every produced item is consumed, every barrier
 * round sees all threads. A lost wake-up shows as a hang (ctest's timeout).
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

/* ---- fake hint page with random flags ---- */
#define FAKE_VCPUS 8
static struct pvhint_record fake_rec[FAKE_VCPUS];
static pvhint_t fake = {.rec = fake_rec, .nr = FAKE_VCPUS, .valid = PVHINT_VALID_PREEMPTED};
static int chaos_stop;

static void *chaos(void *p)
{
	(void)p;
	unsigned seed = 12345;
	while (!__atomic_load_n(&chaos_stop, __ATOMIC_RELAXED)) {
		for (int v = 0; v < FAKE_VCPUS; v++)
			__atomic_store_n(&fake_rec[v].preempted,
					 (uint8_t)(rand_r(&seed) % 3 == 0 ? PVHINT_PREEMPTED : 0),
					 __ATOMIC_RELAXED);
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
};
static void *start(void *p)
{
	struct start *s = p;
	if (emu && pvhint_emu_attach_next(emu))
		FAIL("pvhint_emu_attach_next");
	void *r = s->fn((void *)s->id);
	if (emu)
		pvhint_emu_detach(emu);
	return r;
}

static void run(void *(*fn)(void *), int n)
{
	pthread_t t[16];
	struct start s[16];
	for (long i = 0; i < n; i++) {
		s[i] = (struct start){fn, i};
		if (pthread_create(&t[i], NULL, start, &s[i]))
			FAIL("pthread_create");
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
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

/* ---- rwlock: writers keep a == b, readers check it ---- */
static pvrt_rwlock_t rw;
static long rw_a, rw_b, rw_writes;

static void *rw_thread(void *p)
{
	long id = (long)p;
	long n = 10000 * scale;
	for (long i = 0; i < n; i++) {
		if ((i + id) % 4 == 0) {
			int r = (i % 3) ? pvrt_rwlock_wrlock(&rw) : pvrt_rwlock_trywrlock(&rw);
			if (r == -EBUSY)
				continue;
			if (r)
				FAIL("wrlock %d", r);
			rw_a++;
			rw_b++;
			rw_writes++;
			pvrt_rwlock_unlock(&rw);
		} else {
			int r;
			if (i % 5 == 0) {
				struct timespec ts = in_us(CLOCK_MONOTONIC, 100);
				r = pvrt_rwlock_timedrdlock(&rw, CLOCK_MONOTONIC, &ts);
				if (r == -ETIMEDOUT)
					continue;
			} else {
				r = pvrt_rwlock_rdlock(&rw);
			}
			if (r)
				FAIL("rdlock %d", r);
			if (rw_a != rw_b)
				FAIL("reader saw a torn write");
			pvrt_rwlock_unlock(&rw);
		}
	}
	return NULL;
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

/* ---- semaphore ping-pong: every post is consumed exactly once ---- */
static pvrt_sem_t sem;
static long sem_taken;

static void *sem_thread(void *p)
{
	long id = (long)p;
	long n = 5000 * scale;
	for (long i = 0; i < n; i++) {
		if (id % 2 == 0) {
			if (pvrt_sem_post(&sem))
				FAIL("sem_post");
		} else {
			if (pvrt_sem_wait(&sem))
				FAIL("sem_wait");
			__atomic_fetch_add(&sem_taken, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
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

	pvrt_rwlock_init(&rw, PVRT_RWLOCK_PREFER_READER);
	run(rw_thread, NT);
	pvrt_rwlock_init(&rw, PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE);
	run(rw_thread, NT);
	if (rw_a != rw_writes || rw_b != rw_writes)
		FAIL("rwlock: a=%ld b=%ld writes=%ld", rw_a, rw_b, rw_writes);

	pvrt_cond_init(&notempty, CLOCK_MONOTONIC);
	pvrt_cond_init(&notfull, CLOCK_REALTIME);
	pthread_t pc[4];
	struct start ps[4];
	for (long i = 0; i < 4; i++) {
		ps[i] = (struct start){i < 2 ? producer : consumer, i};
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

	pvrt_sem_init(&sem, 0);
	run(sem_thread, NT);
	if (sem_taken != 2 * 5000 * scale || sem.value != 0)
		FAIL("sem: taken %ld", sem_taken);

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
	}
	for (int c = 0; c < PVRT_LOCK_NCLASSES; c++) {
		struct pvrt_lock_stats st;
		pvrt_locks_stats_get(c, &st);
		printf("%-8s acq %llu contended %llu spin-cut %llu parks %llu hand-offs %llu\n",
		       pvrt_lock_class_name(c), (unsigned long long)st.acquisitions,
		       (unsigned long long)st.contended, (unsigned long long)st.spin_cut,
		       (unsigned long long)st.parks, (unsigned long long)st.handoffs);
	}
	printf("mutex timeouts %ld, rw writes %ld\nstress: OK\n", mx_timeouts, rw_writes);
	return 0;
}
