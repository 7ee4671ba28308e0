/* SPDX-License-Identifier: MIT */
/*
 * The mutex's spinner queue (locks/spinq.h) on its own: threads queue, give up at random (from
 * the middle of the queue as well as at its tail), see their predecessor's vCPU preempted at
 * random (a fake hint page flipped by a chaos thread), and hold the head for a moment. Checks:
 * at most one head at a time, every give-up and every head accounted for, and the queue empty at
 * the end (a broken unqueue leaves the tail pointing at a node, or hangs: ctest's timeout).
 * Deep queues with give-ups in the middle hardly occur through the mutex on a small machine;
 * here every thread queues on one tail in a tight loop. A second phase replaces threads as they
 * exit, so nodes go back to the pool and out again while former neighbours may still read them.
 * Also run under TSan and ASan.
 *
 * usage: locks_spinq [ROUNDS-PER-THREAD [GENERATIONS]]
 */
#define _GNU_SOURCE
#include "spinq.h"

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NT 6

static struct lk_sqnode *tail;
static int heads_now;
static unsigned long heads, gave_up;
static long rounds = 5000; /* per thread, first phase (6 spinning threads: slow under load) */
static long gens = 1000;   /* threads replaced in the second phase */
#define GEN_ROUNDS 50	   /* per thread, second phase */

#define FAKE_VCPUS NT
static struct pvhint_record rec[FAKE_VCPUS];
static pvhint_t fake = {.rec = rec, .nr = FAKE_VCPUS, .valid = PVHINT_VALID_PREEMPTED};
static int stop;

static void *chaos(void *p)
{
	(void)p;
	unsigned seed = 99;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (int v = 0; v < FAKE_VCPUS; v++)
			/* Relaxed: hint bytes, as a host writes them. */
			__atomic_store_n(&rec[v].preempted,
					 (uint8_t)(rand_r(&seed) % 8 == 0 ? PVHINT_PREEMPTED : 0),
					 __ATOMIC_RELAXED);
		sched_yield();
	}
	return NULL;
}

struct giveup {
	unsigned seed;
	unsigned polls;
};

/* Give up after a random number of polls (0..63): many leave while queued mid-way. */
static bool random_give_up(void *arg)
{
	struct giveup *g = arg;
	if (g->polls == 0)
		g->polls = 1 + (unsigned)rand_r(&g->seed) % 64;
	/* Now and then let another thread run while we are queued, so that queues grow deep on
	 * a machine with few CPUs and successors are linked behind us when we leave. */
	if ((rand_r(&g->seed) & 15) == 0)
		sched_yield();
	return --g->polls == 0;
}

struct job {
	unsigned id;
	long rounds;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	unsigned id = j->id;
	struct lk_sqnode *n = lk_spinq_node();
	CHECK(n != NULL);
	struct giveup g = {.seed = id * 7919u + 1};
	for (long i = 0; i < j->rounds; i++) {
		g.polls = 0;
		if (!lk_spinq_lock(&tail, n, id % FAKE_VCPUS + 1, &fake, random_give_up, &g)) {
			__atomic_fetch_add(&gave_up, 1, __ATOMIC_RELAXED);
			continue;
		}
		/* Relaxed RMWs: the count itself is the check; the queue orders nothing here. */
		CHECK_EQ(__atomic_add_fetch(&heads_now, 1, __ATOMIC_RELAXED), 1); /* one head */
		__atomic_fetch_add(&heads, 1, __ATOMIC_RELAXED);
		for (int k = 0; k < 20; k++)
			os_cpu_relax();
		if ((i & 63) == 0)
			sched_yield(); /* a head that does not run: everyone queues behind it */
		__atomic_sub_fetch(&heads_now, 1, __ATOMIC_RELAXED);
		lk_spinq_unlock(&tail, n);
	}
	return NULL;
}

/*
 * Fork with parent threads in the queue (a head that holds on, a waiter behind it): in the child
 * nobody will ever hand the head on, so a spinner there must take it at once (spinq.h), not
 * spend its budget and give up on every attempt.
 */
static struct lk_sqnode *ftail;
static int f_release, f_queued;

static bool give_up_flag(void *arg)
{
	return __atomic_load_n((int *)arg, __ATOMIC_ACQUIRE) != 0;
}

static void *fork_head(void *arg)
{
	(void)arg;
	struct lk_sqnode *n = lk_spinq_node();
	CHECK(lk_spinq_lock(&ftail, n, 1, &fake, give_up_flag, &f_release));
	__atomic_fetch_add(&f_queued, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&f_release, __ATOMIC_ACQUIRE))
		sched_yield();
	lk_spinq_unlock(&ftail, n);
	return NULL;
}

static void *fork_waiter(void *arg)
{
	(void)arg;
	struct lk_sqnode *n = lk_spinq_node();
	static int never;
	/* The parent forks once the tail is our node. */
	CHECK(lk_spinq_lock(&ftail, n, 2, &fake, give_up_flag, &never));
	lk_spinq_unlock(&ftail, n);
	return NULL;
}

/* Give up after about 2 s of polls (a child that never becomes the head). */
static bool give_up_late(void *arg)
{
	struct timespec *t0 = arg, now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec - t0->tv_sec >= 2;
}

static void fork_phase(void)
{
	pthread_t h, w;
	for (int v = 0; v < FAKE_VCPUS; v++) /* as the chaos thread left them: none preempted */
		rec[v].preempted = 0;
	CHECK_EQ(pthread_create(&h, NULL, fork_head, NULL), 0);
	while (!__atomic_load_n(&f_queued, __ATOMIC_ACQUIRE))
		sched_yield();
	struct lk_sqnode *head_node = SQ_LOAD(&ftail);
	CHECK_EQ(pthread_create(&w, NULL, fork_waiter, NULL), 0);
	while (SQ_LOAD(&ftail) == head_node)
		sched_yield();
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(60);
		struct lk_sqnode *n = lk_spinq_node();
		for (int i = 0; i < 3; i++) {
			struct timespec t0;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			if (!lk_spinq_lock(&ftail, n, 3, &fake, give_up_late, &t0)) {
				fprintf(stderr, "spinq fork: the child never became the head\n");
				_exit(1);
			}
			lk_spinq_unlock(&ftail, n);
		}
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	__atomic_store_n(&f_release, 1, __ATOMIC_RELEASE);
	CHECK_EQ(pthread_join(h, NULL), 0);
	CHECK_EQ(pthread_join(w, NULL), 0);
	CHECK(ftail == NULL);
	printf("spinq fork: the child took the head behind the parent's queued threads\n");
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rounds = atol(argv[1]);
	if (argc > 2)
		gens = atol(argv[2]);
	pthread_t c, t[NT];
	struct job jobs[NT];
	CHECK_EQ(pthread_create(&c, NULL, chaos, NULL), 0);
	for (unsigned i = 0; i < NT; i++) {
		jobs[i] = (struct job){i, rounds};
		CHECK_EQ(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK(tail == NULL); /* the queue is empty at the end */
	CHECK_EQ(heads + gave_up, NT * rounds);
	CHECK(gave_up > 0 && heads > 0); /* both paths ran */
	printf("spinq: %lu heads, %lu give-ups\n", heads, gave_up);

	/* Second phase: short-lived threads; each exit returns a node to the pool. */
	heads = gave_up = 0;
	for (unsigned i = 0; i < NT; i++) {
		jobs[i] = (struct job){i, GEN_ROUNDS};
		CHECK_EQ(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
	}
	for (long k = 0; k < gens; k++) {
		int i = (int)(k % NT);
		CHECK_EQ(pthread_join(t[i], NULL), 0);
		jobs[i] = (struct job){(unsigned)(k + NT), GEN_ROUNDS};
		CHECK_EQ(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	CHECK_EQ(pthread_join(c, NULL), 0);
	CHECK(tail == NULL);
	CHECK_EQ(heads + gave_up, (gens + NT) * GEN_ROUNDS);
	printf("spinq recycling: %ld threads, %lu heads, %lu give-ups\n", gens + NT, heads,
	       gave_up);
	fork_phase();
	printf("spinq: OK\n");
	return 0;
}
