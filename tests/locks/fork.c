/* SPDX-License-Identifier: MIT */
/*
 * fork() with every primitive in an awkward state: other threads hold it, wait in it, run a
 * once initialiser, sit registered as a mutex hand-off target (forced, not left to a race).
 * Each scenario sets the state up, forks, and the single-threaded child uses the objects and
 * prints what every call returned; the parent reports a child that hangs (a watchdog alarm)
 * or dies. Built twice: on the pthread API (run with glibc, and with libpvrt-preload.so) and
 * on pvrt's native API (FORK_NATIVE). tests/locks/fork.sh compares the outputs: the child must
 * behave as it does under glibc.
 *
 * usage: locks_fork glibc|pvrt   (pvrt: the objects are pvrt's, so the forced hand-off state
 *                                 can be checked before the fork)
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/mutex.h>

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lk_layout.h" /* white box: the mutex hand-off state */

#ifdef FORK_NATIVE
/* The wrappers below negate results that statements then ignore. */
#pragma GCC diagnostic ignored "-Wunused-value"
#include <pvrt/cond.h>
#include <pvrt/once.h>
#include <pvrt/rwlock.h>
#include <pvrt/sem.h>
#include <pvrt/spinlock.h>

typedef pvrt_mutex_t mutex_t;
typedef pvrt_cond_t cond_t;
typedef pvrt_rwlock_t rwlock_t;
typedef pvrt_barrier_t barrier_t;
typedef pvrt_spinlock_t spin_t;
typedef pvrt_sem_t sema_t;
typedef pvrt_once_t once_t;
#define ONCE_INIT	       PVRT_ONCE_INIT
#define mx_init(m, type)       (-pvrt_mutex_init(m, type))
#define mx_lock(m)	       (-pvrt_mutex_lock(m))
#define mx_trylock(m)	       (-pvrt_mutex_trylock(m))
#define mx_timedlock(m, ts)    (-pvrt_mutex_timedlock(m, CLOCK_REALTIME, ts))
#define mx_unlock(m)	       (-pvrt_mutex_unlock(m))
#define cv_init(c)	       (-pvrt_cond_init(c, CLOCK_REALTIME))
#define cv_wait(c, m)	       (-pvrt_cond_wait(c, m))
#define cv_timedwait(c, m, ts) (-pvrt_cond_timedwait(c, m, ts))
#define cv_signal(c)	       (-pvrt_cond_signal(c))
#define cv_broadcast(c)	       (-pvrt_cond_broadcast(c))
#define rw_init(rw, pref)      (-pvrt_rwlock_init(rw, pref))
#define rw_rdlock(rw)	       (-pvrt_rwlock_rdlock(rw))
#define rw_wrlock(rw)	       (-pvrt_rwlock_wrlock(rw))
#define rw_tryrdlock(rw)       (-pvrt_rwlock_tryrdlock(rw))
#define rw_trywrlock(rw)       (-pvrt_rwlock_trywrlock(rw))
#define rw_timedrdlock(rw, ts) (-pvrt_rwlock_timedrdlock(rw, CLOCK_REALTIME, ts))
#define rw_timedwrlock(rw, ts) (-pvrt_rwlock_timedwrlock(rw, CLOCK_REALTIME, ts))
#define rw_unlock(rw)	       (-pvrt_rwlock_unlock(rw))
#define bar_init(b, n)	       (-pvrt_barrier_init(b, n))
#define bar_wait_raw(b)	       pvrt_barrier_wait(b)
#define BAR_SERIAL	       PVRT_BARRIER_SERIAL_THREAD
#define sp_init(s)	       (-pvrt_spin_init(s))
#define sp_lock(s)	       (-pvrt_spin_lock(s))
#define sp_trylock(s)	       (-pvrt_spin_trylock(s))
#define sp_unlock(s)	       (-pvrt_spin_unlock(s))
#define sm_init(s, v)	       (-pvrt_sem_init(s, v))
#define sm_post(s)	       (-pvrt_sem_post(s))
#define sm_wait(s)	       (-pvrt_sem_wait(s))
#define sm_trywait(s)	       (-pvrt_sem_trywait(s))
#define sm_timedwait(s, ts)    (-pvrt_sem_timedwait(s, CLOCK_REALTIME, ts))
#define sm_getvalue(s, v)      (-pvrt_sem_getvalue(s, v))
#define on_once(o, fn)	       (-pvrt_once(o, fn))
#define RW_PREFER_READER       PVRT_RWLOCK_PREFER_READER
#define RW_PREFER_WRITER_NR    PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE
#define MX_NORMAL	       PVRT_MUTEX_NORMAL
#define MX_RECURSIVE	       PVRT_MUTEX_RECURSIVE
#define MX_ERRORCHECK	       PVRT_MUTEX_ERRORCHECK
#else
typedef pthread_mutex_t mutex_t;
typedef pthread_cond_t cond_t;
typedef pthread_rwlock_t rwlock_t;
typedef pthread_barrier_t barrier_t;
typedef pthread_spinlock_t spin_t;
typedef sem_t sema_t;
typedef pthread_once_t once_t;
#define ONCE_INIT	       PTHREAD_ONCE_INIT
static int mx_init(mutex_t *m, int type)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, type);
	int r = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return r;
}
#define mx_lock(m)	       pthread_mutex_lock(m)
#define mx_trylock(m)	       pthread_mutex_trylock(m)
#define mx_timedlock(m, ts)    pthread_mutex_timedlock(m, ts)
#define mx_unlock(m)	       pthread_mutex_unlock(m)
#define cv_init(c)	       pthread_cond_init(c, NULL)
#define cv_wait(c, m)	       pthread_cond_wait(c, m)
#define cv_timedwait(c, m, ts) pthread_cond_timedwait(c, m, ts)
#define cv_signal(c)	       pthread_cond_signal(c)
#define cv_broadcast(c)	       pthread_cond_broadcast(c)
static int rw_init(rwlock_t *rw, int pref)
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, pref);
	int r = pthread_rwlock_init(rw, &a);
	pthread_rwlockattr_destroy(&a);
	return r;
}
#define rw_rdlock(rw)	       pthread_rwlock_rdlock(rw)
#define rw_wrlock(rw)	       pthread_rwlock_wrlock(rw)
#define rw_tryrdlock(rw)       pthread_rwlock_tryrdlock(rw)
#define rw_trywrlock(rw)       pthread_rwlock_trywrlock(rw)
#define rw_timedrdlock(rw, ts) pthread_rwlock_timedrdlock(rw, ts)
#define rw_timedwrlock(rw, ts) pthread_rwlock_timedwrlock(rw, ts)
#define rw_unlock(rw)	       pthread_rwlock_unlock(rw)
#define bar_init(b, n)	       pthread_barrier_init(b, NULL, n)
#define bar_wait_raw(b)	       pthread_barrier_wait(b)
#define BAR_SERIAL	       PTHREAD_BARRIER_SERIAL_THREAD
#define sp_init(s)	       pthread_spin_init(s, PTHREAD_PROCESS_PRIVATE)
#define sp_lock(s)	       pthread_spin_lock(s)
#define sp_trylock(s)	       pthread_spin_trylock(s)
#define sp_unlock(s)	       pthread_spin_unlock(s)
#define sm_init(s, v)	       (sem_init(s, 0, v) ? errno : 0)
#define sm_post(s)	       (sem_post(s) ? errno : 0)
#define sm_wait(s)	       (sem_wait(s) ? errno : 0)
#define sm_trywait(s)	       (sem_trywait(s) ? errno : 0)
#define sm_timedwait(s, ts)    (sem_timedwait(s, ts) ? errno : 0)
#define sm_getvalue(s, v)      (sem_getvalue(s, v) ? errno : 0)
#define on_once(o, fn)	       pthread_once(o, fn)
#define RW_PREFER_READER       PTHREAD_RWLOCK_PREFER_READER_NP
#define RW_PREFER_WRITER_NR    PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
#define MX_NORMAL	       PTHREAD_MUTEX_NORMAL
#define MX_RECURSIVE	       PTHREAD_MUTEX_RECURSIVE
#define MX_ERRORCHECK	       PTHREAD_MUTEX_ERRORCHECK
#endif

static bool pvrt_objects; /* the objects are pvrt's (native API, or under the preload) */
static int failures;

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	if (pthread_create(t, NULL, fn, arg))
		die("pthread_create");
}

static void join(pthread_t t)
{
	if (pthread_join(t, NULL))
		die("pthread_join");
}

static struct timespec in_ms(long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (ms % 1000) * 1000000L;
	ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	return ts;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts))
		;
}

/* A gate a parent thread blocks on (a pipe: independent of the primitives under test). */
struct gate {
	int fd[2];
};
static void gate_init(struct gate *g)
{
	if (pipe(g->fd))
		die("pipe");
}
static void gate_wait(struct gate *g)
{
	char c;
	while (read(g->fd[0], &c, 1) < 0 && errno == EINTR)
		;
}
static void gate_open(struct gate *g, int n)
{
	for (int i = 0; i < n; i++)
		if (write(g->fd[1], "x", 1) != 1)
			die("write");
}
static void gate_close(struct gate *g)
{
	close(g->fd[0]);
	close(g->fd[1]);
}

static int flag_get(int *f)
{
	return __atomic_load_n(f, __ATOMIC_ACQUIRE);
}
static void flag_set(int *f, int v)
{
	__atomic_store_n(f, v, __ATOMIC_RELEASE);
}

/* Run child() in a fork child (one thread), with a watchdog: a hang or death is reported. */
static void in_child(const char *name, void (*child)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		alarm(20);
		/* Unbuffered: what a hung child printed before it hung shows. */
		setvbuf(stdout, NULL, _IONBF, 0);
		printf("%s:", name);
		child();
		printf("\n");
		fflush(stdout);
		_exit(0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("%s: CHILD %s %d (hung or died)\n", name,
		       WIFSIGNALED(st) ? "signal" : "status",
		       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		failures++;
	}
}

#define OUT(x) printf(" %s=%d", #x, (x))

/* ---- mutex: a queued hand-off to a parent thread (issue 9, bug 1) ---- */

static mutex_t m1, m2;
static int stop;

static void *mutex_looper(void *p)
{
	(void)p;
	while (!flag_get(&stop)) {
		mx_lock(&m1);
		mx_lock(&m2);
		mx_unlock(&m2);
		mx_unlock(&m1);
	}
	return NULL;
}

/* Is a parent thread registered as the hand-off target of m1 (pvrt's layout)? */
static bool handoff_pending(void)
{
	lk_mutex_t *pm = lk_mutex_of((pvrt_mutex_t *)(void *)&m1);
	uint32_t h = __atomic_load_n(&pm->handoff, __ATOMIC_ACQUIRE);
	return h != 0 && !(h & 0x80000000u) &&
	       (__atomic_load_n(&pm->word, __ATOMIC_RELAXED) & LK_MUTEX_HANDOFF);
}

static void child_handoff(void)
{
	/* As a pthread_atfork child handler that unlocks what its prepare handler locked. */
	OUT(mx_unlock(&m1));
	OUT(mx_lock(&m1));
	OUT(mx_lock(&m2));
	OUT(mx_unlock(&m2));
	OUT(mx_unlock(&m1));
	struct timespec ts = in_ms(2000);
	OUT(mx_timedlock(&m1, &ts));
	OUT(mx_unlock(&m1));
}

static void scenario_mutex_handoff(void)
{
	mx_init(&m1, MX_NORMAL);
	mx_init(&m2, MX_NORMAL);
	flag_set(&stop, 0);
	pthread_t t[2];
	mx_lock(&m1);
	for (int i = 0; i < 2; i++)
		start(&t[i], mutex_looper, NULL);
	/* Force the state: a waiter that has waited over 1 ms since it parked registers for a
	 * hand-off when it wakes up to a locked mutex. Hold the lock, let go briefly, take it
	 * back, until one did (pvrt) or a few rounds passed (glibc has no hand-off). */
	bool forced = false;
	for (int i = 0; i < 20000 && !forced; i++) {
		sleep_ms(2);
		if (pvrt_objects && handoff_pending()) {
			forced = true;
			break;
		}
		if (!pvrt_objects && i == 20)
			break;
		mx_unlock(&m1);
		sched_yield();
		mx_lock(&m1);
	}
	if (pvrt_objects && !forced) {
		printf("mutex_handoff: could not force a hand-off registration\n");
		failures++;
	}
	in_child("mutex_handoff", child_handoff);
	flag_set(&stop, 1);
	mx_unlock(&m1);
	for (int i = 0; i < 2; i++)
		join(t[i]);
}

/* ---- mutex: held by another parent thread, and held by the forking thread ---- */

static mutex_t me, mr;
static struct gate g_hold;
static int held;

static void *mutex_holder(void *p)
{
	(void)p;
	mx_lock(&m2);
	flag_set(&held, 1);
	gate_wait(&g_hold);
	mx_unlock(&m2);
	return NULL;
}

static void *mutex_taker(void *p)
{
	(void)p;
	mx_lock(&m1);
	mx_unlock(&m1);
	return NULL;
}

static void child_held(void)
{
	OUT(mx_trylock(&m2));
	struct timespec ts = in_ms(50);
	OUT(mx_timedlock(&m2, &ts));
	/* m1 has parent waiters parked on it; the forking thread holds it. */
	OUT(mx_unlock(&m1));
	OUT(mx_trylock(&m1));
	OUT(mx_unlock(&m1));
	OUT(mx_lock(&m1));
	OUT(mx_unlock(&m1));
	/* Recursive and errorcheck mutexes the forking thread held (its tid changed). */
	OUT(mx_unlock(&mr));
	OUT(mx_unlock(&me));
	OUT(mx_trylock(&me));
	OUT(mx_trylock(&mr));
}

static void scenario_mutex_held(void)
{
	mx_init(&m1, MX_NORMAL);
	mx_init(&m2, MX_NORMAL);
	mx_init(&mr, MX_RECURSIVE);
	mx_init(&me, MX_ERRORCHECK);
	gate_init(&g_hold);
	flag_set(&held, 0);
	pthread_t h, w[2];
	start(&h, mutex_holder, NULL);
	while (!flag_get(&held))
		sleep_ms(1);
	mx_lock(&m1);
	mx_lock(&mr);
	mx_lock(&me);
	for (int i = 0; i < 2; i++)
		start(&w[i], mutex_taker, NULL);
	sleep_ms(20); /* let them park (the result does not depend on it) */
	in_child("mutex_held", child_held);
	mx_unlock(&me);
	mx_unlock(&mr);
	mx_unlock(&m1);
	gate_open(&g_hold, 1);
	join(h);
	for (int i = 0; i < 2; i++)
		join(w[i]);
	gate_close(&g_hold);
}

/* ---- rwlock ---- */

static rwlock_t rw, rwr;
static struct gate g_rw;

static void *rw_reader_holder(void *p)
{
	(void)p;
	rw_rdlock(&rwr);
	flag_set(&held, 1);
	gate_wait(&g_rw);
	rw_unlock(&rwr);
	return NULL;
}

static void child_rw(void)
{
	/* rwr: read-held by a parent thread. */
	int r = rw_tryrdlock(&rwr);
	OUT(r);
	if (r == 0)
		rw_unlock(&rwr);
	OUT(rw_trywrlock(&rwr));
	/* rw: read-held by the forking thread. (A write lock cannot be released in glibc's
	 * child: the unlock compares the writer's tid, which changed, and takes it for a reader.)
	 */
	OUT(rw_unlock(&rw));
	struct timespec ts = in_ms(100);
	r = rw_timedrdlock(&rw, &ts);
	OUT(r);
	if (r == 0)
		OUT(rw_unlock(&rw));
	ts = in_ms(100);
	r = rw_timedwrlock(&rw, &ts);
	OUT(r);
	if (r == 0)
		OUT(rw_unlock(&rw));
}

static void scenario_rwlock(const char *name, int pref)
{
	rw_init(&rw, pref);
	rw_init(&rwr, pref);
	gate_init(&g_rw);
	flag_set(&held, 0);
	pthread_t h;
	start(&h, rw_reader_holder, NULL);
	while (!flag_get(&held))
		sleep_ms(1);
	rw_rdlock(&rw);
	in_child(name, child_rw);
	rw_unlock(&rw);
	gate_open(&g_rw, 1);
	join(h);
	gate_close(&g_rw);
}

/* ---- condvar: a parent thread waiting ---- */

static cond_t cv;
static mutex_t cm;
static int waiting, woken;

static void *cond_waiter(void *p)
{
	int *gone = p;
	mx_lock(&cm);
	waiting++;
	while (!flag_get(gone))
		cv_wait(&cv, &cm);
	waiting--;
	woken++;
	mx_unlock(&cm);
	return NULL;
}

static int child_go;

/* Wait until n waiters are inside the wait (they count themselves under the mutex before). */
static void await_waiting(int n)
{
	for (;;) {
		mx_lock(&cm);
		int w = waiting;
		mx_unlock(&cm);
		if (w >= n)
			return;
		sleep_ms(1);
	}
}

static void child_cond(void)
{
	/* The parent's waiter is queued first. A broadcast must reach both of ours. */
	waiting = 0;
	woken = 0;
	child_go = 0;
	pthread_t w[2];
	for (int i = 0; i < 2; i++)
		start(&w[i], cond_waiter, &child_go);
	await_waiting(2);
	mx_lock(&cm);
	flag_set(&child_go, 1);
	OUT(cv_broadcast(&cv));
	mx_unlock(&cm);
	for (int i = 0; i < 2; i++)
		join(w[i]);
	OUT(woken);
	mx_lock(&cm);
	struct timespec ts = in_ms(50);
	OUT(cv_timedwait(&cv, &cm, &ts));
	OUT(mx_unlock(&cm));
}

/* pvrt only (glibc's signal hangs there): a signal with a parent's waiter queued first reaches
 * ours. Reported on stderr, outside the comparison. */
static void child_cond_signal(void)
{
	woken = 0;
	child_go = 0;
	pthread_t w;
	start(&w, cond_waiter, &child_go);
	await_waiting(2);
	mx_lock(&cm);
	flag_set(&child_go, 1);
	cv_signal(&cv);
	mx_unlock(&cm);
	join(w);
	OUT(woken);
}

static void scenario_cond(void)
{
	cv_init(&cv);
	mx_init(&cm, MX_NORMAL);
	waiting = 0;
	static int parent_go;
	parent_go = 0;
	pthread_t t;
	start(&t, cond_waiter, &parent_go);
	await_waiting(1);
	in_child("cond", child_cond);
	if (pvrt_objects) {
		in_child("pvrt-only cond_signal", child_cond_signal);
	}
	mx_lock(&cm);
	flag_set(&parent_go, 1);
	cv_broadcast(&cv);
	mx_unlock(&cm);
	join(t);
}

/* ---- barrier: a parent thread arrived ---- */

static barrier_t bar;

static int bar_wait(barrier_t *b)
{
	int r = bar_wait_raw(b);
	return r == BAR_SERIAL ? 1 : r;
}

static void *bar_arrive(void *p)
{
	int *out = p;
	*out = bar_wait(&bar);
	return NULL;
}

/* Arrivals counted in the current round: glibc's 'in' (offset 0), or pvrt's (the low half of
 * the state word at offset 16, locks/lk_layout.h). */
static unsigned bar_arrivals(void)
{
	const unsigned *w = (const unsigned *)(const void *)&bar;
	return __atomic_load_n(&w[pvrt_objects ? 4 : 0], __ATOMIC_ACQUIRE);
}

static void child_barrier(void)
{
	/* The parent's thread counts as arrived: ours completes the round. */
	OUT(bar_wait(&bar));
	/* A full round of our own. */
	int a = -9;
	pthread_t t;
	start(&t, bar_arrive, &a);
	int b = bar_wait(&bar);
	join(t);
	OUT(a + b);
}

static void scenario_barrier(void)
{
	bar_init(&bar, 2);
	int a = -9;
	pthread_t t;
	start(&t, bar_arrive, &a);
	while (bar_arrivals() < 1)
		sleep_ms(1);
	sleep_ms(5);
	in_child("barrier", child_barrier);
	bar_wait(&bar);
	join(t);
}

/* ---- spinlock ---- */

static spin_t s1, s2;
static struct gate g_sp;

static void *spin_holder(void *p)
{
	(void)p;
	sp_lock(&s1);
	flag_set(&held, 1);
	gate_wait(&g_sp);
	sp_unlock(&s1);
	return NULL;
}

static void *spin_waiter(void *p)
{
	(void)p;
	sp_lock(&s2);
	sp_unlock(&s2);
	return NULL;
}

static void child_spin(void)
{
	OUT(sp_trylock(&s1));
	OUT(sp_unlock(&s2));
	OUT(sp_lock(&s2));
	OUT(sp_unlock(&s2));
	OUT(sp_trylock(&s2));
	OUT(sp_unlock(&s2));
}

static void scenario_spin(void)
{
	sp_init(&s1);
	sp_init(&s2);
	gate_init(&g_sp);
	flag_set(&held, 0);
	pthread_t h, w;
	start(&h, spin_holder, NULL);
	while (!flag_get(&held))
		sleep_ms(1);
	sp_lock(&s2);
	start(&w, spin_waiter, NULL);
	sleep_ms(20);
	in_child("spin", child_spin);
	sp_unlock(&s2);
	gate_open(&g_sp, 1);
	join(h);
	join(w);
	gate_close(&g_sp);
}

/* ---- semaphore: a parent thread waiting ---- */

static sema_t sem;

static void *sem_waiter(void *p)
{
	(void)p;
	sm_wait(&sem);
	return NULL;
}

static void child_sem(void)
{
	int v = -1;
	OUT(sm_post(&sem));
	OUT(sm_trywait(&sem));
	OUT(sm_trywait(&sem));
	struct timespec ts = in_ms(50);
	OUT(sm_timedwait(&sem, &ts));
	OUT(sm_post(&sem));
	OUT(sm_post(&sem));
	OUT(sm_wait(&sem));
	sm_getvalue(&sem, &v);
	OUT(v);
}

static void scenario_sem(void)
{
	sm_init(&sem, 0);
	pthread_t t;
	start(&t, sem_waiter, NULL);
	sleep_ms(20);
	in_child("sem", child_sem);
	sm_post(&sem);
	join(t);
}

/* ---- once: a parent thread inside the initialiser ---- */

static once_t once_busy = ONCE_INIT, once_done = ONCE_INIT;
static struct gate g_once;
static int in_init, child_runs, done_runs;

static void parent_init(void)
{
	flag_set(&in_init, 1);
	gate_wait(&g_once);
}

static void child_init(void)
{
	child_runs++;
}

static void done_init(void)
{
	done_runs++;
}

static void *once_runner(void *p)
{
	(void)p;
	on_once(&once_busy, parent_init);
	return NULL;
}

static void child_once(void)
{
	/* The parent's initialiser never finishes here: ours runs instead, once. */
	OUT(on_once(&once_busy, child_init));
	OUT(on_once(&once_busy, child_init));
	OUT(child_runs);
	OUT(on_once(&once_done, done_init));
	OUT(done_runs);
}

static void scenario_once(void)
{
	gate_init(&g_once);
	on_once(&once_done, done_init);
	pthread_t t;
	start(&t, once_runner, NULL);
	while (!flag_get(&in_init))
		sleep_ms(1);
	in_child("once", child_once);
	gate_open(&g_once, 1);
	join(t);
	gate_close(&g_once);
}

int main(int argc, char **argv)
{
#ifdef FORK_NATIVE
	pvrt_objects = true;
	(void)argc;
	(void)argv;
#else
	if (argc != 2 || (strcmp(argv[1], "glibc") && strcmp(argv[1], "pvrt"))) {
		fprintf(stderr, "usage: %s glibc|pvrt\n", argv[0]);
		return 2;
	}
	pvrt_objects = !strcmp(argv[1], "pvrt");
#endif
	setvbuf(stdout, NULL, _IOLBF, 0);
	scenario_mutex_handoff();
	scenario_mutex_held();
	scenario_rwlock("rwlock_prefer_reader", RW_PREFER_READER);
	scenario_rwlock("rwlock_prefer_writer", RW_PREFER_WRITER_NR);
	scenario_cond();
	scenario_barrier();
	scenario_spin();
	scenario_sem();
	scenario_once();
	if (failures)
		fprintf(stderr, "%d scenario(s) failed\n", failures);
	return failures ? 1 : 0;
}
