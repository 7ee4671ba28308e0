/* SPDX-License-Identifier: MIT */
/*
 * Soak: pvrt's locks and runtime for SECONDS (default 180) with more threads than CPUs, under
 * whatever hint source the environment selects (ctest: the emulator in random mode, and in
 * slice mode, which really stops threads). Every operation is counted and checked at the end:
 * a mutex and a spinlock counter, an rwlock whose writers rewrite four words that readers
 * check, a bounded queue (mutex + two condvars) whose consumed sum must equal the produced sum,
 * semaphore tokens, barrier rounds, and ULTs created in batches that increment a counter under a
 * pvrt mutex. A lost wake-up hangs (the watchdog then fails the run); a lost update is a count
 * mismatch. Prints the operations done.
 *
 * usage: pvrt_soak [SECONDS]
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/rwlock.h>
#include <pvrt/sem.h>
#include <pvrt/spinlock.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "soak: %s:%d: %s failed\n", __FILE__, __LINE__, #c);       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static double deadline;
static int stop;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool over(void)
{
	if (__atomic_load_n(&stop, __ATOMIC_RELAXED))
		return true;
	if (now_s() < deadline)
		return false;
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	return true;
}

/* Under the emulator, every thread sits on an emulated vCPU (round robin): in slice mode the
 * threads of a descheduled vCPU are really stopped, lock holders included. */
static pvhint_t *emu;

static void attach(void)
{
	if (emu)
		CHECK(!pvhint_emu_attach_next(emu));
}

static void detach(void)
{
	if (emu)
		CHECK(!pvhint_emu_detach(emu));
}

/* ---- mixed workers: mutex, spinlock, rwlock, semaphore ---- */

static pvrt_mutex_t mx = PVRT_MUTEX_INITIALIZER;
static pvrt_spinlock_t sl = PVRT_SPINLOCK_INITIALIZER;
static pvrt_rwlock_t rw = PVRT_RWLOCK_INITIALIZER;
static pvrt_sem_t sem;
static uint64_t mx_count, sl_count, rw_words[4];
static uint64_t mx_ops, sl_ops, rw_writes, rw_reads, torn, sem_ops;

static void *mixed(void *arg)
{
	attach();
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint64_t m = 0, s = 0, w = 0, r = 0, bad = 0, t = 0;
	while (!over()) {
		for (int i = 0; i < 64; i++) {
			unsigned x = (unsigned)rand_r(&seed);
			switch (x % 5) {
			case 0:
				CHECK(!pvrt_mutex_lock(&mx));
				mx_count++;
				CHECK(!pvrt_mutex_unlock(&mx));
				m++;
				break;
			case 1:
				CHECK(!pvrt_spin_lock(&sl));
				sl_count++;
				CHECK(!pvrt_spin_unlock(&sl));
				s++;
				break;
			case 2:
				if (x % 8 == 2) {
					CHECK(!pvrt_rwlock_wrlock(&rw));
					for (int k = 0; k < 4; k++)
						rw_words[k]++;
					CHECK(!pvrt_rwlock_unlock(&rw));
					w++;
				} else {
					CHECK(!pvrt_rwlock_rdlock(&rw));
					for (int k = 1; k < 4; k++)
						bad += rw_words[k] != rw_words[0];
					CHECK(!pvrt_rwlock_unlock(&rw));
					r++;
				}
				break;
			default:
				/* A token taken is given back: the value stays 2 on average. */
				CHECK(!pvrt_sem_wait(&sem));
				CHECK(!pvrt_sem_post(&sem));
				t++;
				break;
			}
		}
	}
	__atomic_fetch_add(&mx_ops, m, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sl_ops, s, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rw_writes, w, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rw_reads, r, __ATOMIC_RELAXED);
	__atomic_fetch_add(&torn, bad, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sem_ops, t, __ATOMIC_RELAXED);
	detach();
	return NULL;
}

/* ---- bounded queue: mutex + condvars ---- */

#define QCAP 8
static pvrt_mutex_t qm = PVRT_MUTEX_INITIALIZER;
static pvrt_cond_t not_full = PVRT_COND_INITIALIZER, not_empty = PVRT_COND_INITIALIZER;
static uint64_t ring[QCAP];
static unsigned qhead, qlen;
static uint64_t produced_sum, consumed_sum, produced_n, consumed_n;

static void put(uint64_t v)
{
	CHECK(!pvrt_mutex_lock(&qm));
	while (qlen == QCAP)
		CHECK(!pvrt_cond_wait(&not_full, &qm));
	ring[(qhead + qlen++) % QCAP] = v;
	CHECK(!pvrt_cond_signal(&not_empty));
	CHECK(!pvrt_mutex_unlock(&qm));
}

static void *producer(void *arg)
{
	attach();
	uint64_t v = (uint64_t)(uintptr_t)arg << 40, sum = 0, n = 0;
	while (!over()) {
		put(++v);
		sum += v;
		n++;
	}
	__atomic_fetch_add(&produced_sum, sum, __ATOMIC_RELAXED);
	__atomic_fetch_add(&produced_n, n, __ATOMIC_RELAXED);
	detach();
	return NULL;
}

static void *consumer(void *arg)
{
	attach();
	(void)arg;
	uint64_t sum = 0, n = 0;
	for (;;) {
		CHECK(!pvrt_mutex_lock(&qm));
		while (qlen == 0)
			CHECK(!pvrt_cond_wait(&not_empty, &qm));
		uint64_t v = ring[qhead];
		qhead = (qhead + 1) % QCAP;
		qlen--;
		/* Broadcast now and then: the chained wake-ups run too. */
		if (v % 16 == 0)
			CHECK(!pvrt_cond_broadcast(&not_full));
		else
			CHECK(!pvrt_cond_signal(&not_full));
		CHECK(!pvrt_mutex_unlock(&qm));
		if (v == 0)
			break; /* end marker */
		sum += v;
		n++;
	}
	__atomic_fetch_add(&consumed_sum, sum, __ATOMIC_RELAXED);
	__atomic_fetch_add(&consumed_n, n, __ATOMIC_RELAXED);
	detach();
	return NULL;
}

/* ---- barrier rounds ---- */

#define BAR_N 3
static pvrt_barrier_t bar;
static int bar_stop;
static uint64_t bar_rounds;

static void *barrier_member(void *arg)
{
	attach();
	(void)arg;
	for (;;) {
		/* The serial thread decides for the round; the second wait publishes it to all. */
		if (pvrt_barrier_wait(&bar) == PVRT_BARRIER_SERIAL_THREAD) {
			__atomic_store_n(&bar_stop, over(), __ATOMIC_RELAXED);
			bar_rounds++;
		}
		pvrt_barrier_wait(&bar);
		if (__atomic_load_n(&bar_stop, __ATOMIC_RELAXED))
			break;
	}
	detach();
	return NULL;
}

/* ---- the runtime: batches of ULTs ---- */

#define ULTS	 16
#define ULT_INCS 200
static pvrt_mutex_t um = PVRT_MUTEX_INITIALIZER;
static uint64_t ult_count;

static void *ult_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < ULT_INCS; i++) {
		CHECK(!pvrt_mutex_lock(&um));
		ult_count++;
		CHECK(!pvrt_mutex_unlock(&um));
		if (i % 16 == 0)
			pvrt_thread_yield();
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "soak: watchdog: no progress to the end (a lost wake-up?)\n";
	ssize_t w = write(2, msg, sizeof(msg) - 1);
	(void)w;
	_exit(3);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 180;
	CHECK(secs > 0);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int nmixed = (int)(ncpu > 0 ? 3 * ncpu : 6);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)(secs * 3) + 120);
	CHECK(!pvrt_sem_init(&sem, 2));
	CHECK(!pvrt_barrier_init(&bar, BAR_N));
	pvhint_t *h = NULL;
	if (!pvhint_default(&h) && h && !strcmp(pvhint_source_name(h), "emu"))
		emu = h;
	CHECK(!pvrt_init(NULL));
	double t0 = now_s();
	deadline = t0 + secs;

	pthread_t mt[64], pt[2], ct[2], bt[BAR_N];
	if (nmixed > 64)
		nmixed = 64;
	for (int i = 0; i < nmixed; i++)
		CHECK(!pthread_create(&mt[i], NULL, mixed, (void *)(uintptr_t)(i + 1)));
	for (int i = 0; i < 2; i++) {
		CHECK(!pthread_create(&pt[i], NULL, producer, (void *)(uintptr_t)(i + 1)));
		CHECK(!pthread_create(&ct[i], NULL, consumer, NULL));
	}
	for (int i = 0; i < BAR_N; i++)
		CHECK(!pthread_create(&bt[i], NULL, barrier_member, NULL));

	uint64_t batches = 0;
	while (!over()) {
		pvrt_thread_t u[ULTS];
		for (int i = 0; i < ULTS; i++)
			CHECK(!pvrt_thread_create(&u[i], NULL, ult_main, NULL));
		for (int i = 0; i < ULTS; i++)
			CHECK(!pvrt_thread_join(u[i], NULL));
		batches++;
	}

	for (int i = 0; i < nmixed; i++)
		CHECK(!pthread_join(mt[i], NULL));
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_join(pt[i], NULL));
	for (int i = 0; i < 2; i++)
		put(0);
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_join(ct[i], NULL));
	for (int i = 0; i < BAR_N; i++)
		CHECK(!pthread_join(bt[i], NULL));
	CHECK(!pvrt_finalize());
	double el = now_s() - t0;
	int sv = -1;
	pvrt_sem_getvalue(&sem, &sv);

	printf("soak: %.0f s, %d mixed threads + 7 on %ld CPUs, hints %s\n", el, nmixed, ncpu,
	       h ? pvhint_source_name(h) : "?");
	printf("  mutex %llu ops, counter %llu\n", (unsigned long long)mx_ops,
	       (unsigned long long)mx_count);
	printf("  spinlock %llu ops, counter %llu\n", (unsigned long long)sl_ops,
	       (unsigned long long)sl_count);
	printf("  rwlock %llu writes, %llu reads, %llu torn\n", (unsigned long long)rw_writes,
	       (unsigned long long)rw_reads, (unsigned long long)torn);
	printf("  semaphore %llu wait+post, value %d (2 expected)\n", (unsigned long long)sem_ops,
	       sv);
	printf("  queue %llu produced, %llu consumed\n", (unsigned long long)produced_n,
	       (unsigned long long)consumed_n);
	printf("  barrier %llu rounds of %d\n", (unsigned long long)bar_rounds, BAR_N);
	printf("  ULTs %llu in %llu batches, counter %llu of %llu\n",
	       (unsigned long long)(batches * ULTS), (unsigned long long)batches,
	       (unsigned long long)ult_count, (unsigned long long)(batches * ULTS * ULT_INCS));
	CHECK(mx_count == mx_ops && mx_ops > 0);
	CHECK(sl_count == sl_ops && sl_ops > 0);
	CHECK(torn == 0 && rw_words[0] == rw_writes && rw_reads > 0);
	CHECK(sv == 2 && sem_ops > 0);
	CHECK(produced_n == consumed_n && produced_sum == consumed_sum && produced_n > 0);
	CHECK(bar_rounds > 0);
	CHECK(ult_count == batches * ULTS * ULT_INCS && batches > 0);
	printf("soak: nothing lost\n");
	return 0;
}
