/* SPDX-License-Identifier: MIT */
/*
 * The locks from ULTs: more ULTs than workers share a mutex, a condvar queue, an rwlock and a
 * barrier with a plain pthread, so waits must switch ULTs away (a ULT that blocked its worker
 * in the kernel would deadlock the barrier, which needs every ULT to arrive) and wake-ups must
 * cross between ULTs and threads. Counts are exact.
 *
 * Then spinners whose owners are ULTs bound to the other worker: each worker's spinner may not
 * run the other's owner, and must not spin on it for ever either (it parks once its budget is
 * spent, which lets its worker run the owner it waits for). A hang fails (alarm, then ctest's
 * timeout).
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/runtime.h>
#include <pvrt/rwlock.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NULT  12
#define ITERS 3000
#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                             \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static pvrt_mutex_t m = PVRT_MUTEX_INITIALIZER;
static pvrt_cond_t cv = PVRT_COND_INITIALIZER;
static pvrt_rwlock_t rw = PVRT_RWLOCK_INITIALIZER;
static pvrt_barrier_t bar;
static long counter, tokens = 2, rw_a, rw_b;

static void work(long id)
{
	for (int i = 0; i < ITERS; i++) {
		pvrt_mutex_lock(&m);
		counter++;
		/* Two tokens for all: take one at i%10 == 0 (waiting on the condvar while there is
		 * none), give it back at i%10 == 5. */
		if (i % 10 == 0) {
			while (tokens == 0)
				pvrt_cond_wait(&cv, &m);
			tokens--;
		} else if (i % 10 == 5) {
			tokens++;
			if (i % 20 == 5)
				pvrt_cond_signal(&cv);
			else
				pvrt_cond_broadcast(&cv);
		}
		pvrt_mutex_unlock(&m);
		if ((i + id) % 4 == 0) {
			pvrt_rwlock_wrlock(&rw);
			rw_a++;
			rw_b++;
			pvrt_rwlock_unlock(&rw);
		} else {
			pvrt_rwlock_rdlock(&rw);
			if (rw_a != rw_b)
				FAIL("torn rwlock read");
			pvrt_rwlock_unlock(&rw);
		}
		if (i % 500 == 7) /* never while holding a token */
			pvrt_barrier_wait(&bar);
	}
}

static void *ult_main(void *p)
{
	work((long)p);
	return NULL;
}

static void *thread_main(void *p)
{
	work((long)p);
	return NULL;
}

/* ---- owners bound to the other worker ---- */
static pvrt_mutex_t m1 = PVRT_MUTEX_INITIALIZER, m2 = PVRT_MUTEX_INITIALIZER;
static int o1_locked, d_done, b_trying, d_trying;
#define LD(x)	 __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), v, __ATOMIC_SEQ_CST)

static void *bound_owner(void *p) /* on worker 1: holds m1 until D got m2 */
{
	(void)p;
	pvrt_thread_set_worker(1);
	pvrt_mutex_lock(&m1);
	ST(o1_locked, 1);
	while (!LD(d_done))
		pvrt_thread_yield();
	pvrt_mutex_unlock(&m1);
	return NULL;
}

static void *spinner_on(void *p) /* B on worker 0 waits for m1, D on worker 1 for m2 */
{
	int on1 = p != NULL;
	pvrt_thread_set_worker(on1 ? 1 : 0);
	while (!LD(o1_locked))
		pvrt_thread_yield();
	ST(*(on1 ? &d_trying : &b_trying), 1);
	pvrt_mutex_t *mx = on1 ? &m2 : &m1;
	pvrt_mutex_lock(mx);
	pvrt_mutex_unlock(mx);
	if (on1)
		ST(d_done, 1);
	return NULL;
}

static void on_alarm(int s)
{
	(void)s;
	static const char msg[] = "FAIL: spinners on bound ULT owners never gave up\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* Runs on the primary ULT (bound to worker 0), which owns m2 meanwhile. */
static void bound_owners(void)
{
	/* A hang detector, not a time limit: a spinner that never gives up spins for ever (under
	 * valgrind on a loaded machine a pass may take a minute; ctest's limit is 300 s). */
	signal(SIGALRM, on_alarm);
	alarm(240);
	pvrt_mutex_lock(&m2);
	pvrt_thread_t o, d, b;
	if (pvrt_thread_create(&o, NULL, bound_owner, NULL) ||
	    pvrt_thread_create(&d, NULL, spinner_on, (void *)1) ||
	    pvrt_thread_create(&b, NULL, spinner_on, NULL))
		FAIL("pvrt_thread_create");
	while (!LD(b_trying) || !LD(d_trying))
		pvrt_thread_yield();
	for (int i = 0; i < 100; i++)
		pvrt_thread_yield(); /* ready while B spins on worker 0 */
	pvrt_mutex_unlock(&m2);
	pvrt_thread_join(o, NULL);
	pvrt_thread_join(d, NULL);
	pvrt_thread_join(b, NULL);
	alarm(0);
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 2;
	int r = pvrt_init(&c);
	if (r)
		FAIL("pvrt_init: %d %s", r, pvrt_errmsg());
	pvrt_barrier_init(&bar, NULT + 1);
	pvrt_thread_t t[NULT];
	for (long i = 0; i < NULT; i++)
		if (pvrt_thread_create(&t[i], NULL, ult_main, (void *)i))
			FAIL("pvrt_thread_create");
	pthread_t th;
	pthread_create(&th, NULL, thread_main, (void *)(long)NULT);
	for (int i = 0; i < NULT; i++)
		pvrt_thread_join(t[i], NULL);
	pthread_join(th, NULL);
	bound_owners();
#ifndef PVRT_TSAN
	/* Under TSan, pvrt_finalize() currently trips a sanitizer CHECK while destroying fibers
	 * (the runtime's own tests show the same); the lock checks below do not need it. */
	pvrt_finalize();
#endif
	if (counter != (long)(NULT + 1) * ITERS)
		FAIL("counter %ld", counter);
	if (tokens != 2)
		FAIL("tokens %ld", tokens);
	printf("ult: OK (%ld increments, %ld rwlock writes)\n", counter, rw_a);
	return 0;
}
