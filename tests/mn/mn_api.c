/* SPDX-License-Identifier: MIT */
/*
 * pthread API semantics under pvrt-run --mn: join, tryjoin, timedjoin, detach, exit with cleanup
 * handlers, keys with destructors, once, deferred cancellation (in a condvar wait wherever the
 * cancel lands, a sleep, a join, a semaphore wait and at pthread_testcancel), attributes, names,
 * the refused calls, semaphores, barriers, rwlocks and spinlocks, and finally pthread_exit from
 * main while a detached thread still runs (the process exits with status 0 once it is done; the
 * caller checks its last line).
 */
#include "mn_check.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static void *wait_started(void *a)
{
	CHECK_EQ(sem_wait(a), 0);
	return NULL;
}

static void *ret_arg(void *a)
{
	mn_tid_seen();
	return a;
}

/* ---- exit and cleanup handlers ---- */
static int cleanups;
static void cleanup(void *p)
{
	__atomic_add_fetch(&cleanups, (int)(intptr_t)p, __ATOMIC_RELAXED);
}

__attribute__((noreturn)) static void deep_exit(int depth)
{
	if (depth > 0)
		deep_exit(depth - 1);
	pthread_exit((void *)77);
}

static void *exiter(void *a)
{
	(void)a;
	pthread_cleanup_push(cleanup, (void *)1);
	pthread_cleanup_push(cleanup, (void *)10);
	deep_exit(5);
	pthread_cleanup_pop(0);
	pthread_cleanup_pop(0);
	return NULL;
}

/* ---- keys ---- */
static pthread_key_t key;
static int key_dtors;
static void key_dtor(void *v)
{
	CHECK(v != NULL);
	__atomic_add_fetch(&key_dtors, 1, __ATOMIC_RELAXED);
}
static void *key_user(void *a)
{
	CHECK(pthread_getspecific(key) == NULL);
	CHECK_EQ(pthread_setspecific(key, a), 0);
	sched_yield();
	CHECK(pthread_getspecific(key) == a);
	return NULL;
}

/* ---- once ---- */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void once_fn(void)
{
	__atomic_add_fetch(&once_runs, 1, __ATOMIC_RELAXED);
	sched_yield(); /* others arrive and wait meanwhile */
}
static void *once_user(void *a)
{
	CHECK_EQ(pthread_once(&once, once_fn), 0);
	CHECK_EQ(__atomic_load_n(&once_runs, __ATOMIC_RELAXED), 1);
	return a;
}

/* ---- cancellation ---- */
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cc = PTHREAD_COND_INITIALIZER;
static sem_t started, go;
static void unlock_cm(void *p)
{
	(void)p;
	pthread_mutex_unlock(&cm); /* the wait holds the mutex again when cancellation acts */
	cleanup((void *)100);
}
static void *cond_waiter(void *a)
{
	(void)a;
	pthread_mutex_lock(&cm);
	pthread_cleanup_push(unlock_cm, NULL);
	sem_post(&started);
	for (;;)
		pthread_cond_wait(&cc, &cm);
	pthread_cleanup_pop(1);
	return NULL;
}
static void *sleeper(void *a)
{
	(void)a;
	sem_post(&started);
	sleep(1000);
	return NULL;
}
static void *spinner(void *a)
{
	(void)a;
	sem_post(&started);
	for (;;) {
		pthread_testcancel();
		sched_yield();
	}
	return NULL;
}
static sem_t never;
static void *sem_waiter(void *a)
{
	(void)a;
	sem_post(&started);
	sem_wait(&never); /* blocks: only the cancel ends it */
	return NULL;
}
static void *forever(void *a)
{
	(void)a;
	sem_wait(&never);
	return NULL;
}
static pthread_t forever_t;
static void *joiner(void *a)
{
	(void)a;
	pthread_t f;
	CHECK_EQ(pthread_create(&f, NULL, forever, NULL), 0);
	forever_t = f;
	pthread_cleanup_push(cleanup, (void *)1000);
	sem_post(&started);
	pthread_join(f, NULL); /* blocks: only the cancel ends it */
	pthread_cleanup_pop(0);
	return NULL;
}
static void *disabled(void *a)
{
	(void)a;
	int old;
	CHECK_EQ(pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old), 0);
	CHECK_EQ(old, PTHREAD_CANCEL_ENABLE);
	sem_post(&started);
	CHECK_EQ(sem_wait(&go), 0); /* main posts after cancelling us */
	pthread_testcancel();	    /* disabled: no effect */
	CHECK_EQ(pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL), 0);
	pthread_testcancel();
	return (void *)1; /* not reached */
}

static void cancel_and_join(void *(*fn)(void *))
{
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, fn, NULL), 0);
	CHECK_EQ(sem_wait(&started), 0);
	CHECK_EQ(pthread_cancel(t), 0);
	if (fn == disabled)
		CHECK_EQ(sem_post(&go), 0);
	void *r;
	CHECK_EQ(pthread_join(t, &r), 0);
	CHECK(r == PTHREAD_CANCELED);
}

/* ---- detached threads and the end ---- */
static sem_t det_done;
static int det_count;
static void *detached_fn(void *a)
{
	mn_tid_seen();
	__atomic_add_fetch(&det_count, 1, __ATOMIC_RELAXED);
	sem_post(&det_done);
	return a;
}
static void *late(void *a)
{
	(void)a;
	usleep(20000);
	printf("mn_api: late thread done\n");
	fflush(stdout);
	return NULL;
}

/* ---- locks ---- */
static pthread_barrier_t bar;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static long spin_sum, rw_sum;
static void *locker(void *a)
{
	mn_tid_seen();
	for (int i = 0; i < 100; i++) {
		pthread_barrier_wait(&bar);
		pthread_spin_lock(&spin);
		spin_sum++;
		pthread_spin_unlock(&spin);
		pthread_rwlock_wrlock(&rw);
		long v = rw_sum;
		sched_yield(); /* others run meanwhile, and must not enter */
		rw_sum = v + 1;
		pthread_rwlock_unlock(&rw);
		pthread_rwlock_rdlock(&rw);
		sched_yield();
		pthread_rwlock_unlock(&rw);
	}
	return a;
}

int main(void)
{
	mn_tid_seen();
	CHECK_EQ(sem_init(&started, 0, 0), 0);
	CHECK_EQ(sem_init(&go, 0, 0), 0);
	CHECK_EQ(sem_init(&det_done, 0, 0), 0);
	CHECK_EQ(sem_init(&never, 0, 0), 0);

	/* join, values, self/equal */
	pthread_t t[8];
	for (long i = 0; i < 8; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, ret_arg, (void *)(intptr_t)(i + 1)), 0);
	for (long i = 0; i < 8; i++) {
		void *r;
		CHECK(!pthread_equal(t[i], pthread_self()));
		CHECK_EQ(pthread_join(t[i], &r), 0);
		CHECK_EQ((long)(intptr_t)r, i + 1);
	}
	CHECK_EQ(pthread_join(pthread_self(), NULL), EDEADLK);

	/* pthread_exit with cleanup handlers, from a nested call */
	pthread_t x;
	void *r;
	CHECK_EQ(pthread_create(&x, NULL, exiter, NULL), 0);
	CHECK_EQ(pthread_join(x, &r), 0);
	CHECK(r == (void *)77);
	CHECK_EQ(cleanups, 11);

	/* tryjoin / timedjoin on a thread that waits for us */
	CHECK_EQ(pthread_create(&x, NULL, wait_started, &started), 0);
	CHECK_EQ(pthread_tryjoin_np(x, NULL), EBUSY);
	struct timespec past;
	clock_gettime(CLOCK_REALTIME, &past);
	past.tv_sec -= 1;
	CHECK_EQ(pthread_timedjoin_np(x, NULL, &past), ETIMEDOUT);
	CHECK_EQ(sem_post(&started), 0);
	struct timespec later;
	clock_gettime(CLOCK_REALTIME, &later);
	later.tv_sec += 600;
	CHECK_EQ(pthread_timedjoin_np(x, &r, &later), 0);
	CHECK(r == NULL);

	/* keys: per-thread values, destructors at thread exit */
	CHECK_EQ(pthread_key_create(&key, key_dtor), 0);
	CHECK_EQ(pthread_setspecific(key, (void *)5), 0);
	for (long i = 0; i < 8; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, key_user, (void *)(intptr_t)(i + 1)), 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(key_dtors, 8);
	CHECK(pthread_getspecific(key) == (void *)5);

	/* once */
	for (long i = 0; i < 8; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, once_user, NULL), 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(once_runs, 1);

	/* deferred cancellation */
	cancel_and_join(cond_waiter);
	CHECK_EQ(cleanups, 111);
	CHECK_EQ(pthread_mutex_trylock(&cm), 0); /* the cleanup handler unlocked it */
	pthread_mutex_unlock(&cm);
	/* The cancel lands anywhere between the post of 'started' and the blocked wait: every
	 * point of the waiter's way into the condvar queue, many times over. */
	for (int i = 0; i < 300; i++) {
		cancel_and_join(cond_waiter);
		CHECK_EQ(pthread_mutex_trylock(&cm), 0);
		pthread_mutex_unlock(&cm);
	}
	CHECK_EQ(cleanups, 111 + 300 * 100);
	cancel_and_join(sem_waiter);
	cancel_and_join(joiner);
	CHECK_EQ(cleanups, 1111 + 300 * 100);
	CHECK_EQ(sem_post(&never), 0); /* the cancelled join left its target joinable */
	CHECK_EQ(pthread_join(forever_t, NULL), 0);
	cancel_and_join(sleeper);
	cancel_and_join(spinner);
	cancel_and_join(disabled);
	CHECK_EQ(pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL), ENOTSUP);

	/* attributes: stack size, guard, detach state; names */
	pthread_attr_t a;
	pthread_attr_init(&a);
	CHECK_EQ(pthread_attr_setstacksize(&a, 256 * 1024), 0);
	CHECK_EQ(pthread_attr_setguardsize(&a, 3 * 4096), 0);
	CHECK_EQ(pthread_create(&x, &a, wait_started, &started), 0);
	pthread_attr_t got;
	CHECK_EQ(pthread_getattr_np(x, &got), 0);
	size_t sz = 0, gs = 0;
	void *lo = NULL;
	int ds = -1;
	CHECK_EQ(pthread_attr_getstack(&got, &lo, &sz), 0);
	CHECK_EQ(pthread_attr_getguardsize(&got, &gs), 0);
	CHECK_EQ(pthread_attr_getdetachstate(&got, &ds), 0);
	CHECK(sz >= 256 * 1024 && sz < 512 * 1024);
	CHECK(gs >= 3 * 4096);
	CHECK_EQ(ds, PTHREAD_CREATE_JOINABLE);
	pthread_attr_destroy(&got);
	CHECK_EQ(pthread_setname_np(x, "worker-x"), 0);
	char name[16];
	CHECK_EQ(pthread_getname_np(x, name, sizeof(name)), 0);
	CHECK(strcmp(name, "worker-x") == 0);
	CHECK_EQ(pthread_setname_np(x, "a name that is far too long"), ERANGE);
	cpu_set_t cs;
	CPU_ZERO(&cs);
	CPU_SET(0, &cs);
	CHECK_EQ(pthread_setaffinity_np(x, sizeof(cs), &cs), ENOTSUP);
	CHECK_EQ(pthread_getaffinity_np(x, sizeof(cs), &cs), 0);
	CHECK(CPU_COUNT(&cs) >= 1);
	CHECK_EQ(sem_post(&started), 0);
	CHECK_EQ(pthread_join(x, NULL), 0);

	/* detached threads */
	CHECK_EQ(pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED), 0);
	for (int i = 0; i < 16; i++)
		CHECK_EQ(pthread_create(&x, &a, detached_fn, NULL), 0);
	CHECK_EQ(pthread_create(&x, NULL, detached_fn, NULL), 0);
	CHECK_EQ(pthread_detach(x), 0);
	for (int i = 0; i < 17; i++)
		CHECK_EQ(sem_wait(&det_done), 0);
	CHECK_EQ(det_count, 17);

	/* locks */
	CHECK_EQ(pthread_barrier_init(&bar, NULL, 8), 0);
	CHECK_EQ(pthread_spin_init(&spin, 0), 0);
	for (long i = 0; i < 8; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, locker, NULL), 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(spin_sum, 8 * 100);
	CHECK_EQ(rw_sum, 8 * 100);

	/* sleeps are ULT waits: a sleeping thread does not hold up its worker */
	struct timespec ts = {0, 1000000};
	CHECK_EQ(nanosleep(&ts, NULL), 0);
	CHECK_EQ(usleep(1000), 0);
	struct timespec bad = {0, 2000000000};
	CHECK_EQ(nanosleep(&bad, NULL), -1);
	CHECK_EQ(errno, EINVAL);

	mn_check_ults(40);
	printf("mn_api: ok\n");
	fflush(stdout);
	/* main leaves first; the process ends when the late thread is done, with status 0 */
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	CHECK_EQ(pthread_create(&x, &a, late, NULL), 0);
	pthread_attr_destroy(&a);
	pthread_exit(NULL);
}
