/* SPDX-License-Identifier: MIT */
/*
 * Scheduling policies: the three decisions the runtime delegates (internal to libpvrt).
 *
 *   wake_target  a ULT became ready (woken, created, yielded by a thief): which worker's queue
 *                gets it. The runtime overrides it only for bound ULTs.
 *   steal_victim an idle worker looks for work: whom to try next (attempt = 0, 1, ...).
 *   wake_idle    ready work exists and workers are parked: which parked worker to wake.
 *   lend         an idle worker found nothing to run or steal: whose preempted vCPU should get
 *                this one's physical CPU (a directed yield, pvhint_yield_to), if any.
 *
 * Each call receives a read-only view of the workers (their vCPUs, whether parked, queue
 * lengths) and the process's pvhint handle, so a policy may prefer vCPUs that run (not
 * preempted) and whose physical CPU is idle. Hints are advisory: any answer must be safe, and the
 * runtime validates every index it gets back. Calls happen on hot paths: no locks, no system
 * calls, no allocation.
 */
#ifndef PVRT_SCHED_H
#define PVRT_SCHED_H

#include <pvrt/pvhint.h>

#include <stdbool.h>
#include <stdint.h>

/* What a policy may look at. All reads are racy snapshots. */
struct rt_sched_view {
	unsigned nworkers;
	pvhint_t *hint;
	/* Per worker, indexed 0..nworkers-1. */
	unsigned (*vcpu)(const struct rt_sched_view *v, unsigned w);   /* its vCPU (for hints) */
	bool (*parked)(const struct rt_sched_view *v, unsigned w);     /* parked on its futex */
	unsigned (*queued)(const struct rt_sched_view *v, unsigned w); /* ready ULTs (estimate) */
	bool (*running)(const struct rt_sched_view *v, unsigned w);    /* runs a ULT now */
	void *rt;						       /* runtime-private */
};

/* Who is asking: the worker running the caller (-1 for a foreign thread) and its random state. */
struct rt_sched_caller {
	int worker;
	uint64_t *rng; /* two words of per-caller state: rng[0] for rt_sched_rand(), rng[1] free
			* for the policy (random keeps its steal round's start there) */
};

struct rt_sched_policy {
	const char *name;
	/* A ready ULT last ran on 'last' (-1: never ran): the worker whose queue takes it. */
	unsigned (*wake_target)(const struct rt_sched_view *v, const struct rt_sched_caller *c,
				int last);
	/* The worker to try stealing from at 'attempt', or -1 to stop searching. */
	int (*steal_victim)(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			    unsigned attempt);
	/* A parked worker to wake for newly ready work queued on 'where', or -1 for none. */
	int (*wake_idle)(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			 unsigned where);
	/* The caller's worker is idle: a worker whose vCPU should run in place of the caller's
	 * (the runtime asks the host with pvhint_yield_to, where the source can), or -1. */
	int (*lend)(const struct rt_sched_view *v, const struct rt_sched_caller *c);
};

/* The policies: hints (sched/hints.c, the default) and random (sched/random.c). */
extern const struct rt_sched_policy rt_sched_hints, rt_sched_random;

/* Look up a policy by name (NULL: the default; NULL back if unknown); the names for error
 * messages. */
const struct rt_sched_policy *rt_sched_find(const char *name);
const char *rt_sched_names(void);

static inline uint64_t rt_sched_rand(uint64_t *s)
{
	/* xorshift64*: a few cycles, good enough to spread steal attempts. */
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

#endif /* PVRT_SCHED_H */
