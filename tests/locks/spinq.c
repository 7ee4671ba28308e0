/* SPDX-License-Identifier: MIT */
/*
 * The mutex's spinner queue (locks/spinq.h) on its own: threads queue, give up at random (from
 * the middle of the queue as well as at its tail), see their predecessor's vCPU preempted at
 * random (a fake hint page flipped by a chaos thread), and hold the head for a moment. Checks:
 * at most one head at a time, every give-up and every head accounted for, and the queue empty at
 * the end (a broken unqueue leaves the tail pointing at a node, or hangs: ctest's timeout).
 * Deep queues with give-ups in the middle hardly occur through the mutex on a small machine;
 * here every thread queues on one tail in a tight loop. Also run under TSan and ASan.
 *
 * usage: locks_spinq [ROUNDS-PER-THREAD]
 */
#define _GNU_SOURCE
#include "spinq.h"

#include "../runtime/check.h"

#include <pthread.h>
#include <sched.h>

#define NT 6

static struct pvrt_spinq_node *tail;
static int heads_now;
static unsigned long heads, gave_up, middle_leaves;
static long rounds = 20000;

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

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	struct pvrt_spinq_node *n = lk_spinq_node();
	CHECK(n != NULL);
	struct giveup g = {.seed = id * 7919u + 1};
	for (long i = 0; i < rounds; i++) {
		g.polls = 0;
		/* Whether we are behind someone right now: a give-up then leaves from inside. */
		bool queued_behind = __atomic_load_n(&tail, __ATOMIC_RELAXED) != NULL;
		if (!lk_spinq_lock(&tail, n, id + 1, &fake, random_give_up, &g)) {
			__atomic_fetch_add(&gave_up, 1, __ATOMIC_RELAXED);
			if (queued_behind)
				__atomic_fetch_add(&middle_leaves, 1, __ATOMIC_RELAXED);
			continue;
		}
		/* Relaxed RMWs: the count itself is the check; the queue orders nothing here. */
		CHECK_EQ(__atomic_add_fetch(&heads_now, 1, __ATOMIC_RELAXED), 1); /* one head */
		__atomic_fetch_add(&heads, 1, __ATOMIC_RELAXED);
		for (int k = 0; k < 20; k++)
			pvrt_cpu_relax();
		if ((i & 63) == 0)
			sched_yield(); /* a head that does not run: everyone queues behind it */
		__atomic_sub_fetch(&heads_now, 1, __ATOMIC_RELAXED);
		lk_spinq_unlock(&tail, n);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rounds = atol(argv[1]);
	pthread_t c, t[NT];
	CHECK_EQ(pthread_create(&c, NULL, chaos, NULL), 0);
	for (uintptr_t i = 0; i < NT; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
	for (int i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(c, NULL);
	CHECK(tail == NULL); /* the queue is empty at the end */
	CHECK_EQ(heads + gave_up, NT * rounds);
	printf("spinq: %lu heads, %lu give-ups (%lu while queued behind others)\n", heads, gave_up,
	       middle_leaves);
	CHECK(gave_up > 0 && heads > 0); /* both paths ran */
	printf("spinq: OK\n");
	return 0;
}
