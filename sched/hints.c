/* SPDX-License-Identifier: MIT */
/*
 * The hint-aware policy (the default): the random policy's decisions, reordered by where work
 * will run soon. A worker's vCPU is rated as rt_futex rates a waiter's: 2 its physical CPU is
 * idle (a wake-up there runs at once), 1 not preempted, 0 preempted by the host.
 *   wake_target: the waker's own worker (it runs, and the woken ULT likely shares its data);
 *                for a foreign waker the ULT's last worker unless its vCPU is preempted, else
 *                the best-rated worker (ties: parked ones, which have nothing else to run).
 *   steal_victim: first a round over the workers whose vCPU is preempted and that have queued
 *                 work -- rescue what a descheduled vCPU cannot run -- then the random policy's
 *                 two rounds from a random start.
 *   wake_idle: the best-rated parked worker (a parked worker on an idle pCPU runs at once; one
 *              whose pCPU is busy would wait for the host to schedule it), scanning from the
 *              worker after 'where' so ties spread.
 *   lend: a worker whose vCPU is preempted while it runs a ULT or holds queued work: the idle
 *         caller asks the host to run that vCPU now (directed yield: on its own pCPU, in place
 *         of whatever runs there; the caller's turn ends). Without this the work waits for the
 *         host's next turn, up to a whole time slice. Nothing else can help a running ULT on a
 *         preempted vCPU: its context is the stopped vCPU's until that vCPU runs.
 * A source without preemption or idle hints (none) gets the random policy's decisions, by
 * delegation; one with preemption but no idle hints gets no idle preference.
 */
#include "pvrt_sched.h"

static int rate(const struct rt_sched_view *v, unsigned w)
{
	const pvhint_t *h = v->hint;
	unsigned vc = v->vcpu(v, w);
	if ((h->valid & PVHINT_VALID_IS_IDLE) && pvhint_pcpu_idle(h, vc))
		return 2;
	return (h->valid & PVHINT_VALID_PREEMPTED) && pvhint_vcpu_preempted(h, vc) ? 0 : 1;
}

/* Does the hint source say anything a decision here could use? Else decide as random does. */
static bool has_hints(const struct rt_sched_view *v)
{
	return v->hint->valid & (PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE);
}

static unsigned hints_wake_target(const struct rt_sched_view *v, const struct rt_sched_caller *c,
				  int last)
{
	if (c->worker >= 0 || !has_hints(v))
		return rt_sched_random.wake_target(v, c, last);
	if (last >= 0 && (unsigned)last < v->nworkers && rate(v, (unsigned)last) > 0)
		return (unsigned)last;
	unsigned start = (unsigned)(rt_sched_rand(c->rng) % v->nworkers), best = start;
	int best_score = -1;
	for (unsigned i = 0; i < v->nworkers; i++) {
		unsigned w = (start + i) % v->nworkers;
		int score = 2 * rate(v, w) + (v->parked(v, w) ? 1 : 0);
		if (score > best_score) {
			best = w;
			best_score = score;
		}
	}
	return best;
}

static int hints_steal_victim(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			      unsigned attempt)
{
	unsigned n = v->nworkers;
	if (!(v->hint->valid & PVHINT_VALID_PREEMPTED))
		return rt_sched_random.steal_victim(v, c, attempt); /* no rescue round */
	if (n < 2 || attempt >= 3 * n)
		return -1;
	uint64_t *s = c->rng;
	if (attempt == 0)
		s[1] = rt_sched_rand(s) % n; /* the start of both phases */
	unsigned w = (unsigned)((s[1] + attempt) % n);
	if (attempt < n) {
		/* Rescue round: only preempted vCPUs with work; the caller's own index is a no-op
		 * attempt (the runtime skips it). */
		bool stranded = rate(v, w) == 0 && v->queued(v, w) > 0;
		return stranded || c->worker < 0 ? (int)w : c->worker;
	}
	return (int)w;
}

static int hints_wake_idle(const struct rt_sched_view *v, const struct rt_sched_caller *c,
			   unsigned where)
{
	if (!has_hints(v))
		return rt_sched_random.wake_idle(v, c, where);
	/* Without is_idle no parked worker rates above 1: the first one not preempted will do. */
	int top = (v->hint->valid & PVHINT_VALID_IS_IDLE) ? 2 : 1;
	int best = -1, best_rate = -1;
	for (unsigned i = 1; i <= v->nworkers; i++) {
		unsigned w = (where + i) % v->nworkers;
		if (!v->parked(v, w))
			continue;
		int r = rate(v, w);
		if (r > best_rate) {
			best = (int)w;
			best_rate = r;
			if (r == top)
				break;
		}
	}
	return best;
}

static int hints_lend(const struct rt_sched_view *v, const struct rt_sched_caller *c)
{
	if (!(v->hint->valid & PVHINT_VALID_PREEMPTED) || v->nworkers < 2)
		return -1;
	/* From a random start, so that idle workers spread over the stranded ones. */
	unsigned start = (unsigned)(rt_sched_rand(c->rng) % v->nworkers);
	for (unsigned i = 0; i < v->nworkers; i++) {
		unsigned w = (start + i) % v->nworkers;
		if ((int)w != c->worker && rate(v, w) == 0 &&
		    (v->running(v, w) || v->queued(v, w) > 0))
			return (int)w;
	}
	return -1;
}

const struct rt_sched_policy rt_sched_hints = {
    .name = "hints",
    .wake_target = hints_wake_target,
    .steal_victim = hints_steal_victim,
    .wake_idle = hints_wake_idle,
    .lend = hints_lend,
};
