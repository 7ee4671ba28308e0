/* SPDX-License-Identifier: MIT */
/*
 * The hint-free policy: random work stealing (the baseline the hints policy is measured
 * against; PVRT_SCHED=random).
 *   wake_target: the waker's own worker (the woken ULT likely shares its data, and the local queue
 *                needs no atomic read-modify-write), or for a foreign waker the ULT's last worker.
 *   steal_victim: a random start, then round robin, two rounds.
 *   wake_idle: the first parked worker after the one that queued the work.
 *   lend: never (it knows no vCPU to lend to).
 */
#include "pvrt_sched.h"

static unsigned random_wake_target(const struct rt_sched_view *v, const struct rt_sched_caller *c,
				   int last)
{
	if (c->worker >= 0)
		return (unsigned)c->worker;
	if (last >= 0 && (unsigned)last < v->nworkers)
		return (unsigned)last;
	return (unsigned)(rt_sched_rand(c->rng) % v->nworkers);
}

static int random_steal_victim(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			       unsigned attempt)
{
	if (v->nworkers < 2 || attempt >= 2 * v->nworkers)
		return -1;
	/* The first attempt draws the start; later ones walk from it (kept in the high bits). */
	uint64_t *s = c->rng;
	if (attempt == 0)
		s[1] = rt_sched_rand(s) % v->nworkers;
	return (int)((s[1] + attempt) % v->nworkers);
}

static int random_wake_idle(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			    unsigned where)
{
	(void)c;
	for (unsigned i = 1; i <= v->nworkers; i++) {
		unsigned w = (where + i) % v->nworkers;
		if (v->parked(v, w))
			return (int)w;
	}
	return -1;
}

static int random_lend(const struct rt_sched_view *v, const struct rt_sched_caller *c)
{
	(void)v;
	(void)c;
	return -1;
}

const struct rt_sched_policy rt_sched_random = {
    .name = "random",
    .wake_target = random_wake_target,
    .steal_victim = random_steal_victim,
    .wake_idle = random_wake_idle,
    .lend = random_lend,
};
