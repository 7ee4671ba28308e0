/* SPDX-License-Identifier: MIT */
/*
 * glibc semantic parity: every pthread lock call whose result is deterministic,
 * printed one per line. tests/locks/parity.sh runs this program with and
 * without libpvrt-preload.so and requires identical output (and that the
 * preload really was in use). "--which" prints the object that provides
 * pthread_mutex_lock and pthread_cond_wait. For the statistics of a process
 * tree (pvrt-run --stats, PVRT_STATS_FILE): "--fork-locks N K": K children, one
 * after another, each lock and unlock a mutex N times and leave with _exit;
 * "--orphan-locks N": the parent exits at once, and its child, once orphaned,
 * locks N times and exits normally.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static int errno_changes;

#define R(name, call)                                                                              \
	do {                                                                                       \
		errno = 4242;                                                                      \
		int r_ = (call);                                                                   \
		if (errno != 4242)                                                                 \
			errno_changes++;                                                           \
		printf("%-44s %s\n", name,                                                         \
		       r_ == 0		     ? "0"                                                 \
		       : strerrorname_np(r_) ? strerrorname_np(r_)                                 \
					     : "?");                                               \
	} while (0)

static struct timespec in_ms(clockid_t clk, long ms)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	ts.tv_nsec += ms * 1000000L;
	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* ---- a helper thread that runs one call on demand ---- */
typedef int (*op_fn)(void *);
static int run_in_thread_result;
static void *thread_main(void *p)
{
	void **a = p;
	run_in_thread_result = ((op_fn)a[0])(a[1]);
	return NULL;
}
static int in_thread(op_fn fn, void *arg)
{
	pthread_t t;
	void *a[2] = {(void *)fn, arg};
	pthread_create(&t, NULL, thread_main, a);
	pthread_join(t, NULL);
	return run_in_thread_result;
}
static int op_mutex_lock(void *m)
{
	return pthread_mutex_lock(m);
}
static int op_mutex_trylock(void *m)
{
	return pthread_mutex_trylock(m);
}
static int op_mutex_unlock(void *m)
{
	return pthread_mutex_unlock(m);
}
static int op_rw_tryrd(void *rw)
{
	return pthread_rwlock_tryrdlock(rw);
}
static int op_rw_trywr(void *rw)
{
	return pthread_rwlock_trywrlock(rw);
}
static int op_rw_wrlock(void *rw)
{
	return pthread_rwlock_wrlock(rw);
}
static int op_rw_timedrd_20ms(void *rw)
{
	struct timespec ts = in_ms(CLOCK_REALTIME, 20);
	return pthread_rwlock_timedrdlock(rw, &ts);
}
static int op_rw_clockwr_20ms(void *rw)
{
	struct timespec ts = in_ms(CLOCK_MONOTONIC, 20);
	return pthread_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &ts);
}
static int op_spin_trylock(void *s)
{
	return pthread_spin_trylock(s);
}

/* Timed locks on a mutex held by another thread (results depend only on arguments). */
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static int op_timed_badnsec(void *p)
{
	(void)p;
	struct timespec ts = {time(NULL) + 10, 1000000000L};
	return pthread_mutex_timedlock(&held, &ts);
}
static int op_timed_negnsec(void *p)
{
	(void)p;
	struct timespec ts = {time(NULL) + 10, -1};
	return pthread_mutex_timedlock(&held, &ts);
}
static int op_timed_past(void *p)
{
	(void)p;
	struct timespec ts = {1, 0};
	return pthread_mutex_timedlock(&held, &ts);
}
static int op_timed_negsec(void *p)
{
	(void)p;
	struct timespec ts = {-1, 0};
	return pthread_mutex_timedlock(&held, &ts);
}
static int op_timed_20ms(void *p)
{
	(void)p;
	struct timespec ts = in_ms(CLOCK_REALTIME, 20);
	return pthread_mutex_timedlock(&held, &ts);
}
static int op_clock_mono_20ms(void *p)
{
	(void)p;
	struct timespec ts = in_ms(CLOCK_MONOTONIC, 20);
	return pthread_mutex_clocklock(&held, CLOCK_MONOTONIC, &ts);
}
static int op_clock_bad(void *p)
{
	(void)p;
	struct timespec ts = in_ms(CLOCK_MONOTONIC, 20);
	return pthread_mutex_clocklock(&held, CLOCK_PROCESS_CPUTIME_ID, &ts);
}

static void test_mutex(void)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	R("normal lock", pthread_mutex_lock(&m));
	R("normal trylock held", pthread_mutex_trylock(&m));
	R("normal trylock held (other thread)", in_thread(op_mutex_trylock, &m));
	R("normal unlock", pthread_mutex_unlock(&m));
	R("normal trylock free", pthread_mutex_trylock(&m));
	R("normal unlock by other thread", in_thread(op_mutex_unlock, &m));
	R("normal lock after foreign unlock", pthread_mutex_lock(&m));
	R("normal unlock", pthread_mutex_unlock(&m));
	R("normal destroy", pthread_mutex_destroy(&m));
	pthread_mutex_t d = PTHREAD_MUTEX_INITIALIZER;
	R("lock (to destroy while locked)", pthread_mutex_lock(&d));
	R("destroy locked", pthread_mutex_destroy(&d));
	R("unlock", pthread_mutex_unlock(&d));
	R("destroy", pthread_mutex_destroy(&d));
	R("trylock destroyed", pthread_mutex_trylock(&d));
	R("init again", pthread_mutex_init(&d, NULL));
	R("lock re-initialised", pthread_mutex_lock(&d));
	R("unlock", pthread_mutex_unlock(&d));

	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	R("errorcheck init", pthread_mutex_init(&m, &a));
	R("errorcheck unlock unlocked", pthread_mutex_unlock(&m));
	R("errorcheck lock", pthread_mutex_lock(&m));
	R("errorcheck relock", pthread_mutex_lock(&m));
	R("errorcheck trylock by owner", pthread_mutex_trylock(&m));
	R("errorcheck unlock by other thread", in_thread(op_mutex_unlock, &m));
	R("errorcheck trylock by other thread", in_thread(op_mutex_trylock, &m));
	struct timespec ts = in_ms(CLOCK_REALTIME, 10);
	R("errorcheck timedlock by owner", pthread_mutex_timedlock(&m, &ts));
	R("errorcheck unlock", pthread_mutex_unlock(&m));
	R("errorcheck unlock again", pthread_mutex_unlock(&m));
	R("errorcheck destroy", pthread_mutex_destroy(&m));

	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	R("recursive init", pthread_mutex_init(&m, &a));
	R("recursive lock 1", pthread_mutex_lock(&m));
	R("recursive lock 2", pthread_mutex_lock(&m));
	R("recursive trylock 3", pthread_mutex_trylock(&m));
	R("recursive timedlock 4", pthread_mutex_timedlock(&m, &ts));
	R("recursive trylock by other thread", in_thread(op_mutex_trylock, &m));
	R("recursive unlock by other thread", in_thread(op_mutex_unlock, &m));
	for (int i = 4; i >= 1; i--) {
		char n[64];
		snprintf(n, sizeof(n), "recursive unlock %d", i);
		R(n, pthread_mutex_unlock(&m));
	}
	R("recursive unlock unlocked", pthread_mutex_unlock(&m));
	R("recursive lock by other thread", in_thread(op_mutex_lock, &m));
	R("recursive trylock (held by exited)", pthread_mutex_trylock(&m));
	pthread_mutexattr_destroy(&a);

	pthread_mutex_t sr = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
	R("static recursive lock", pthread_mutex_lock(&sr));
	R("static recursive relock", pthread_mutex_lock(&sr));
	R("static recursive unlock", pthread_mutex_unlock(&sr));
	R("static recursive unlock", pthread_mutex_unlock(&sr));
	R("static recursive unlock unlocked", pthread_mutex_unlock(&sr));
	pthread_mutex_t se = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
	R("static errorcheck lock", pthread_mutex_lock(&se));
	R("static errorcheck relock", pthread_mutex_lock(&se));
	R("static errorcheck unlock", pthread_mutex_unlock(&se));
	pthread_mutex_t sa = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
	R("static adaptive lock", pthread_mutex_lock(&sa));
	R("static adaptive trylock", pthread_mutex_trylock(&sa));
	R("static adaptive unlock", pthread_mutex_unlock(&sa));

	/* Timed locks: uncontended with a bad timespec succeed (glibc checks only to wait). */
	pthread_mutex_t t = PTHREAD_MUTEX_INITIALIZER;
	struct timespec bad = {0, 2000000000L};
	R("timedlock free, bad nsec", pthread_mutex_timedlock(&t, &bad));
	R("unlock", pthread_mutex_unlock(&t));
	R("clocklock free, bad clock", pthread_mutex_clocklock(&t, CLOCK_PROCESS_CPUTIME_ID, &ts));
	R("lock (held for contended timed locks)", pthread_mutex_lock(&held));
	R("timedlock held, nsec 1e9", in_thread(op_timed_badnsec, NULL));
	R("timedlock held, nsec -1", in_thread(op_timed_negnsec, NULL));
	R("timedlock held, past", in_thread(op_timed_past, NULL));
	R("timedlock held, tv_sec -1", in_thread(op_timed_negsec, NULL));
	R("timedlock held, +20ms", in_thread(op_timed_20ms, NULL));
	R("clocklock held, monotonic +20ms", in_thread(op_clock_mono_20ms, NULL));
	R("clocklock held, bad clock", in_thread(op_clock_bad, NULL));
	R("unlock", pthread_mutex_unlock(&held));
}

static void *die_holding(void *m)
{
	pthread_mutex_lock(m);
	return NULL;
}

static void test_foreign_mutexes(void)
{
	pthread_mutexattr_t a;
	pthread_mutex_t m;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	R("robust init", pthread_mutex_init(&m, &a));
	pthread_t t;
	pthread_create(&t, NULL, die_holding, &m);
	pthread_join(t, NULL);
	R("robust lock after owner died", pthread_mutex_lock(&m));
	R("robust consistent", pthread_mutex_consistent(&m));
	R("robust unlock", pthread_mutex_unlock(&m));
	R("robust destroy", pthread_mutex_destroy(&m));
	pthread_mutexattr_destroy(&a);

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	R("pshared errorcheck init", pthread_mutex_init(&m, &a));
	R("pshared lock", pthread_mutex_lock(&m));
	R("pshared relock", pthread_mutex_lock(&m));
	R("pshared unlock", pthread_mutex_unlock(&m));
	R("pshared destroy", pthread_mutex_destroy(&m));
	pthread_mutexattr_destroy(&a);

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
	R("PI init", pthread_mutex_init(&m, &a));
	R("PI lock", pthread_mutex_lock(&m));
	R("PI trylock by other thread", in_thread(op_mutex_trylock, &m));
	R("PI unlock", pthread_mutex_unlock(&m));
	R("PI destroy", pthread_mutex_destroy(&m));
	pthread_mutexattr_destroy(&a);
}

/* ---- condvars ---- */
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready, go, woke;

static void *cond_waiter(void *p)
{
	(void)p;
	pthread_mutex_lock(&cm);
	ready++;
	pthread_cond_broadcast(&cv);
	while (!go) /* tolerates spurious wake-ups, as POSIX requires */
		pthread_cond_wait(&cv, &cm);
	woke++;
	pthread_mutex_unlock(&cm);
	return NULL;
}

static void test_cond(void)
{
	pthread_cond_t c = PTHREAD_COND_INITIALIZER;
	pthread_mutex_t m = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
	R("cond signal, no waiters", pthread_cond_signal(&c));
	R("cond broadcast, no waiters", pthread_cond_broadcast(&c));
	R("lock", pthread_mutex_lock(&m));
	struct timespec past = {1, 0};
	R("cond timedwait past", pthread_cond_timedwait(&c, &m, &past));
	R("mutex relocked after timeout (relock)", pthread_mutex_lock(&m));
	struct timespec bad = {time(NULL) + 5, 1000000000L};
	R("cond timedwait bad nsec", pthread_cond_timedwait(&c, &m, &bad));
	struct timespec neg = {-1, 0};
	R("cond timedwait tv_sec -1", pthread_cond_timedwait(&c, &m, &neg));
	struct timespec ts = in_ms(CLOCK_REALTIME, 20);
	R("cond timedwait +20ms", pthread_cond_timedwait(&c, &m, &ts));
	ts = in_ms(CLOCK_MONOTONIC, 20);
	R("cond clockwait monotonic +20ms", pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &ts));
	R("cond clockwait bad clock", pthread_cond_clockwait(&c, &m, CLOCK_THREAD_CPUTIME_ID, &ts));
	R("unlock", pthread_mutex_unlock(&m));
	R("cond wait, errorcheck mutex not held", pthread_cond_wait(&c, &m));
	R("cond destroy", pthread_cond_destroy(&c));

	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	R("cond init monotonic", pthread_cond_init(&c, &ca));
	R("lock", pthread_mutex_lock(&m));
	ts = in_ms(CLOCK_MONOTONIC, 20);
	R("cond(monotonic) timedwait +20ms", pthread_cond_timedwait(&c, &m, &ts));
	R("unlock", pthread_mutex_unlock(&m));
	R("cond destroy", pthread_cond_destroy(&c));
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	R("cond init pshared", pthread_cond_init(&c, &ca));
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutex_t pm;
	pthread_mutex_init(&pm, &ma);
	R("lock pshared", pthread_mutex_lock(&pm));
	ts = in_ms(CLOCK_MONOTONIC, 10);
	R("cond(pshared) timedwait +10ms", pthread_cond_timedwait(&c, &pm, &ts));
	R("unlock pshared", pthread_mutex_unlock(&pm));
	R("cond destroy pshared", pthread_cond_destroy(&c));
	pthread_condattr_destroy(&ca);

	enum { N = 6 };
	pthread_t t[N];
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, cond_waiter, NULL);
	pthread_mutex_lock(&cm);
	while (ready < N)
		pthread_cond_wait(&cv, &cm);
	go = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&cm);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	printf("%-44s %d\n", "cond broadcast woke", woke);
	R("cond destroy after broadcast", pthread_cond_destroy(&cv));
}

/* ---- destroy right after a broadcast, by the thread that holds the mutex ----
 * POSIX allows it (no thread is blocked on the condvar after the broadcast) and glibc returns 0.
 * The waiters need the mutex the destroyer holds, so destroy must not depend on them getting it.
 */
static pthread_mutex_t dm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dc = PTHREAD_COND_INITIALIZER;
static int d_ready, d_go, d_woke;

static void *d_waiter(void *p)
{
	(void)p;
	pthread_mutex_lock(&dm);
	d_ready++;
	while (!d_go)
		pthread_cond_wait(&dc, &dm);
	d_woke++;
	pthread_mutex_unlock(&dm);
	return NULL;
}

static void test_cond_destroy_after_broadcast(void)
{
	enum { N = 3 };
	pthread_t t[N];
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, d_waiter, NULL);
	/* Once d_ready == N is seen under the mutex, every waiter is inside pthread_cond_wait. */
	pthread_mutex_lock(&dm);
	while (d_ready < N) {
		pthread_mutex_unlock(&dm);
		usleep(1000);
		pthread_mutex_lock(&dm);
	}
	d_go = 1;
	int rb = pthread_cond_broadcast(&dc);
	int rd = pthread_cond_destroy(&dc);
	pthread_mutex_unlock(&dm);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	printf("%-44s %d\n", "broadcast, destroy under mutex: broadcast", rb);
	printf("%-44s %d\n", "broadcast, destroy under mutex: destroy", rd);
	printf("%-44s %d\n", "broadcast, destroy under mutex: woke", d_woke);
}

/* ---- cancellation inside a condvar wait ----
 * POSIX: the mutex is held again when the cancelled waiter's cleanup handlers run. The handler
 * unlocks an errorcheck mutex: 0 if it was held, EPERM if not. */
static pthread_mutex_t xm = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_cond_t xc = PTHREAD_COND_INITIALIZER;
static int x_waiting, x_unlock_result, x_kind;

static void x_cleanup(void *p)
{
	(void)p;
	x_unlock_result = pthread_mutex_unlock(&xm);
}

static void *x_waiter(void *p)
{
	(void)p;
	pthread_mutex_lock(&xm);
	x_waiting = 1;
	pthread_cleanup_push(x_cleanup, NULL);
	struct timespec ts;
	for (;;) { /* never signalled: only the cancel ends the wait */
		if (x_kind == 0) {
			pthread_cond_wait(&xc, &xm);
		} else if (x_kind == 1) {
			ts = in_ms(CLOCK_REALTIME, 60000);
			pthread_cond_timedwait(&xc, &xm, &ts);
		} else {
			ts = in_ms(CLOCK_MONOTONIC, 60000);
			pthread_cond_clockwait(&xc, &xm, CLOCK_MONOTONIC, &ts);
		}
	}
	pthread_cleanup_pop(1);
	return NULL;
}

static void test_cond_cancel(void)
{
	static const char *const kinds[] = {"wait", "timedwait", "clockwait"};
	for (x_kind = 0; x_kind < 3; x_kind++) {
		for (int hold = 0; hold < 2; hold++) {
			x_waiting = 0;
			x_unlock_result = -1;
			pthread_t t;
			pthread_create(&t, NULL, x_waiter, NULL);
			/* Once we hold xm with x_waiting set, the waiter is inside the wait. */
			for (;;) {
				pthread_mutex_lock(&xm);
				if (x_waiting)
					break;
				pthread_mutex_unlock(&xm);
				usleep(1000);
			}
			if (!hold) {
				pthread_mutex_unlock(&xm);
				usleep(20000); /* usually asleep in the kernel by now */
			}
			int rc = pthread_cancel(t);
			if (hold)
				pthread_mutex_unlock(
				    &xm); /* the waiter relocks it after the cancel */
			void *ret = NULL;
			pthread_join(t, &ret);
			char name[64];
			snprintf(name, sizeof(name), "cancel in cond %s%s", kinds[x_kind],
				 hold ? " (mutex held)" : "");
			printf("%-44s cancel=%d canceled=%d handler unlock=%s\n", name, rc,
			       ret == PTHREAD_CANCELED,
			       x_unlock_result == 0 ? "0" : strerrorname_np(x_unlock_result));
			R("  mutex free after cancel (trylock)", pthread_mutex_trylock(&xm));
			R("  unlock", pthread_mutex_unlock(&xm));
		}
	}
	R("cond destroy after cancelled waiters", pthread_cond_destroy(&xc));
}

/* A waiter cancelled after a signal chose it must pass the signal on: two waiters wait for a
 * token, one signal is sent and one waiter cancelled at once; the token must not be left with
 * the other waiter asleep. */
static pthread_mutex_t ym = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t yc = PTHREAD_COND_INITIALIZER;
static int y_tokens, y_waiting, y_stop, y_returned;

static void y_unlock(void *p)
{
	(void)p;
	pthread_mutex_unlock(&ym);
}

static void *y_waiter(void *p)
{
	(void)p;
	pthread_mutex_lock(&ym);
	pthread_cleanup_push(y_unlock, NULL);
	y_waiting++;
	while (!y_tokens && !y_stop)
		pthread_cond_wait(&yc, &ym);
	if (y_tokens)
		y_tokens--;
	y_returned++;
	pthread_cleanup_pop(1);
	return NULL;
}

/*
 * A deferred cancel that is pending while a thread calls functions that are not cancellation
 * points (locks, condvar signals, semaphore posts, thread exit with its key destructors) must
 * not act: the thread returns its own result. (The emulator closed a file in a key destructor:
 * close is a cancellation point, and the result became PTHREAD_CANCELED.)
 */
static pthread_mutex_t pc_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pc_c = PTHREAD_COND_INITIALIZER;
static void *pending_cancel_thread(void *p)
{
	(void)p;
	static sem_t s;
	sem_init(&s, 0, 0);
	pthread_cancel(pthread_self());
	for (int i = 0; i < 100; i++) {
		pthread_mutex_lock(&pc_m);
		pthread_cond_signal(&pc_c);
		pthread_mutex_unlock(&pc_m);
		sem_post(&s);
		sem_trywait(&s);
	}
	sem_destroy(&s);
	return (void *)7;
}

static void test_pending_cancel(void)
{
	int kept = 0;
	for (int i = 0; i < 20; i++) {
		pthread_t t;
		void *r = NULL;
		if (pthread_create(&t, NULL, pending_cancel_thread, NULL))
			continue;
		pthread_join(t, &r);
		kept += r == (void *)7;
	}
	printf("%-44s %d\n", "pending cancel, not a cancellation point (20)", kept);
}

static void test_cond_cancel_signal(void)
{
	int lost = 0;
	for (int i = 0; i < 20; i++) {
		pthread_t a, b;
		y_tokens = y_waiting = y_stop = 0;
		pthread_create(&a, NULL, y_waiter, NULL);
		pthread_create(&b, NULL, y_waiter, NULL);
		for (;;) {
			pthread_mutex_lock(&ym);
			if (y_waiting == 2)
				break;
			pthread_mutex_unlock(&ym);
			usleep(1000);
		}
		pthread_mutex_unlock(&ym);
		usleep(i % 2 ? 5000 : 0); /* asleep in the kernel, or maybe not yet */
		pthread_mutex_lock(&ym);
		y_tokens = 1;
		pthread_cond_signal(&yc);
		pthread_cancel(a);
		pthread_mutex_unlock(&ym);
		pthread_join(a, NULL);
		int left = 1;
		for (int t = 0; t < 2000 && left; t++) { /* up to 2 s for b to take it */
			pthread_mutex_lock(&ym);
			left = y_tokens;
			pthread_mutex_unlock(&ym);
			if (left)
				usleep(1000);
		}
		lost += left;
		pthread_mutex_lock(&ym);
		y_stop = 1;
		pthread_cond_broadcast(&yc);
		pthread_mutex_unlock(&ym);
		pthread_join(b, NULL);
	}
	printf("%-44s %d\n", "cancelled waiter: signals lost (of 20)", lost);

	/* Broadcast, then cancel the middle one of three waiters before any can return (we hold
	 * the mutex): the cancelled one must not break the wake-up of the third. */
	pthread_t t[3];
	y_tokens = y_waiting = y_stop = y_returned = 0;
	for (int i = 0; i < 3; i++) {
		pthread_create(&t[i], NULL, y_waiter, NULL);
		for (;;) { /* queue them in order: t[i] waits before t[i+1] starts */
			pthread_mutex_lock(&ym);
			if (y_waiting == i + 1)
				break;
			pthread_mutex_unlock(&ym);
			usleep(1000);
		}
		pthread_mutex_unlock(&ym);
	}
	usleep(5000);
	pthread_mutex_lock(&ym);
	y_stop = 1;
	pthread_cond_broadcast(&yc);
	pthread_cancel(t[1]);
	pthread_mutex_unlock(&ym);
	void *r1 = NULL;
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], i == 1 ? &r1 : NULL);
	/* Whether the middle one returned (glibc wakes it at once; it may leave before the cancel
	 * acts) or was cancelled varies; that all three ended and the others returned does not. */
	printf("%-44s %d\n", "broadcast, cancel middle waiter: all ended",
	       y_returned + (r1 == PTHREAD_CANCELED) == 3);
}

static void test_rwlock(void)
{
	pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
	R("rw rdlock", pthread_rwlock_rdlock(&rw));
	R("rw rdlock again", pthread_rwlock_rdlock(&rw));
	R("rw tryrdlock", pthread_rwlock_tryrdlock(&rw));
	R("rw trywrlock (read-held)", pthread_rwlock_trywrlock(&rw));
	R("rw trywrlock other thread", in_thread(op_rw_trywr, &rw));
	R("rw clockwrlock other thread +20ms", in_thread(op_rw_clockwr_20ms, &rw));
	for (int i = 0; i < 3; i++)
		R("rw unlock", pthread_rwlock_unlock(&rw));
	R("rw wrlock", pthread_rwlock_wrlock(&rw));
	R("rw wrlock again", pthread_rwlock_wrlock(&rw));
	R("rw rdlock while write-held", pthread_rwlock_rdlock(&rw));
	R("rw tryrdlock while write-held", pthread_rwlock_tryrdlock(&rw));
	R("rw trywrlock while write-held", pthread_rwlock_trywrlock(&rw));
	R("rw tryrdlock other thread", in_thread(op_rw_tryrd, &rw));
	R("rw timedrdlock other thread +20ms", in_thread(op_rw_timedrd_20ms, &rw));
	struct timespec bad = {time(NULL) + 5, -5};
	R("rw timedwrlock bad nsec (self holds)", pthread_rwlock_timedwrlock(&rw, &bad));
	R("rw unlock", pthread_rwlock_unlock(&rw));
	R("rw timedrdlock bad nsec (free)", pthread_rwlock_timedrdlock(&rw, &bad));
	struct timespec ts = in_ms(CLOCK_MONOTONIC, 10);
	R("rw clockrdlock bad clock",
	  pthread_rwlock_clockrdlock(&rw, CLOCK_PROCESS_CPUTIME_ID, &ts));
	R("rw wrlock other thread", in_thread(op_rw_wrlock, &rw));
	R("rw destroy", pthread_rwlock_destroy(&rw));

	pthread_rwlock_t wp = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
	R("rw(writer-pref) rdlock", pthread_rwlock_rdlock(&wp));
	R("rw(writer-pref) trywrlock other thread", in_thread(op_rw_trywr, &wp));
	R("rw(writer-pref) unlock", pthread_rwlock_unlock(&wp));
	R("rw(writer-pref) wrlock", pthread_rwlock_wrlock(&wp));
	R("rw(writer-pref) unlock", pthread_rwlock_unlock(&wp));

	pthread_rwlockattr_t ra;
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setpshared(&ra, PTHREAD_PROCESS_SHARED);
	R("rw init pshared", pthread_rwlock_init(&rw, &ra));
	R("rw pshared wrlock", pthread_rwlock_wrlock(&rw));
	R("rw pshared rdlock (self)", pthread_rwlock_rdlock(&rw));
	R("rw pshared unlock", pthread_rwlock_unlock(&rw));
	R("rw pshared destroy", pthread_rwlock_destroy(&rw));
	pthread_rwlockattr_destroy(&ra);
}

static pthread_barrier_t bar;
static int serials;
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
enum { BT = 4, ROUNDS = 200 };
static void *barrier_thread(void *p)
{
	(void)p;
	for (int i = 0; i < ROUNDS; i++) {
		int r = pthread_barrier_wait(&bar);
		if (r == PTHREAD_BARRIER_SERIAL_THREAD) {
			pthread_mutex_lock(&serial_lock);
			serials++;
			pthread_mutex_unlock(&serial_lock);
		} else if (r != 0) {
			printf("barrier wait returned %d\n", r);
		}
	}
	return NULL;
}

static void test_barrier_spin(void)
{
	pthread_barrier_t b;
	R("barrier init count 0", pthread_barrier_init(&b, NULL, 0));
	R("barrier init count 1", pthread_barrier_init(&b, NULL, 1));
	R("barrier(1) wait is serial",
	  pthread_barrier_wait(&b) == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : -1);
	R("barrier destroy", pthread_barrier_destroy(&b));
	R("barrier init", pthread_barrier_init(&bar, NULL, BT));
	pthread_t t[BT];
	for (int i = 0; i < BT; i++)
		pthread_create(&t[i], NULL, barrier_thread, NULL);
	for (int i = 0; i < BT; i++)
		pthread_join(t[i], NULL);
	printf("%-44s %d\n", "barrier serial threads over rounds", serials);
	R("barrier destroy", pthread_barrier_destroy(&bar));
	pthread_barrierattr_t ba;
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	R("barrier init pshared", pthread_barrier_init(&b, &ba, 1));
	R("barrier(pshared) wait serial",
	  pthread_barrier_wait(&b) == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : -1);
	R("barrier destroy pshared", pthread_barrier_destroy(&b));

	pthread_spinlock_t s;
	R("spin init", pthread_spin_init(&s, PTHREAD_PROCESS_PRIVATE));
	R("spin lock", pthread_spin_lock(&s));
	R("spin trylock held", pthread_spin_trylock(&s));
	R("spin trylock other thread", in_thread(op_spin_trylock, (void *)&s));
	R("spin unlock", pthread_spin_unlock(&s));
	R("spin trylock free", pthread_spin_trylock(&s));
	R("spin unlock", pthread_spin_unlock(&s));
	R("spin destroy", pthread_spin_destroy(&s));
}

/* The pre-2.3.2 condvar symbol, as binaries linked against old glibc reference it. */
extern int old_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
__asm__(".symver old_cond_wait, pthread_cond_wait@GLIBC_2.2.5");

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--which")) {
		Dl_info i1, i2, i3;
		dladdr((void *)pthread_mutex_lock, &i1);
		dladdr((void *)pthread_cond_wait, &i2);
		dladdr((void *)old_cond_wait, &i3);
		printf("%s\n%s\n%s\n", i1.dli_fname, i2.dli_fname, i3.dli_fname);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "--fork-locks")) {
		static pthread_mutex_t fm = PTHREAD_MUTEX_INITIALIZER;
		long n = atol(argv[2]), k = argc > 3 ? atol(argv[3]) : 1;
		for (long j = 0; j < k; j++) {
			pid_t pid = fork();
			if (pid == 0) {
				for (long i = 0; i < n; i++) {
					pthread_mutex_lock(&fm);
					pthread_mutex_unlock(&fm);
				}
				_exit(0);
			}
			int st;
			if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0)
				return 1;
		}
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "--orphan-locks")) {
		static pthread_mutex_t om = PTHREAD_MUTEX_INITIALIZER;
		long n = atol(argv[2]);
		pid_t parent = getpid(), pid = fork();
		if (pid != 0)
			return pid > 0 ? 0 : 1;
		while (getppid() == parent) /* until the parent has exited */
			usleep(1000);
		for (long i = 0; i < n; i++) {
			pthread_mutex_lock(&om);
			pthread_mutex_unlock(&om);
		}
		exit(0);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_mutex();
	test_foreign_mutexes();
	test_cond();
	test_cond_destroy_after_broadcast();
	test_cond_cancel();
	test_cond_cancel_signal();
	test_pending_cancel();
	test_rwlock();
	test_barrier_spin();
	printf("%-44s %d\n", "calls that changed errno", errno_changes);
	return 0;
}
