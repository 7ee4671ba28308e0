/* SPDX-License-Identifier: MIT */
/*
 * The scheduling policies' decisions on a fake view of 4 workers with a fake hint page:
 * hints steals first from preempted workers with queued work, wakes the parked worker whose
 * physical CPU is idle, sends a foreign wake-up away from a preempted last worker, and lends an
 * idle worker's vCPU only to a preempted one that runs a ULT or holds queued work; without
 * hints its decisions are the random policy's (which never lends); both always answer valid
 * indices. Also: the default is hints, and PVRT_SCHED's names.
 */
#include "check.h"
#include "pvrt_sched.h"

#include <string.h>

#define NW 4
static struct pvhint_record rec[NW];
static pvhint_t page = {.rec = rec, .nr = NW};
static bool parked[NW];
static unsigned queued[NW];
static bool running[NW];

static unsigned f_vcpu(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	return w;
}
static bool f_parked(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	return parked[w];
}
static unsigned f_queued(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	return queued[w];
}

static bool f_running(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	return running[w];
}

static struct rt_sched_view view = {.nworkers = NW,
				    .hint = &page,
				    .vcpu = f_vcpu,
				    .parked = f_parked,
				    .queued = f_queued,
				    .running = f_running};

static void reset(void)
{
	memset(rec, 0, sizeof(rec));
	memset(parked, 0, sizeof(parked));
	memset(queued, 0, sizeof(queued));
	memset(running, 0, sizeof(running));
	page.valid = PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE;
}

/* The victims a full steal search of worker 'me' tries, in order (own index skipped). */
static int victims(const struct rt_sched_policy *p, int me, int *out, uint64_t seed)
{
	uint64_t rng[2] = {seed, 0};
	struct rt_sched_caller c = {.worker = me, .rng = rng};
	int n = 0;
	for (unsigned a = 0;; a++) {
		int v = p->steal_victim(&view, &c, a);
		if (v < 0)
			break;
		CHECK(v < NW);
		CHECK(a < 64); /* the search ends */
		if (v != me)
			out[n++] = v;
	}
	return n;
}

int main(void)
{
	const struct rt_sched_policy *h = rt_sched_find(NULL);
	CHECK(h == &rt_sched_hints); /* the default */
	CHECK(rt_sched_find("random") == &rt_sched_random);
	CHECK(rt_sched_find("bogus") == NULL);

	/* Steal: worker 2's vCPU is preempted with work queued; it is tried first, whatever the
	 * random start; workers 1 and 3 (running, queued work too) only afterwards. */
	for (uint64_t seed = 1; seed < 50; seed++) {
		reset();
		rec[2].preempted = PVHINT_PREEMPTED;
		queued[1] = queued[2] = queued[3] = 5;
		int out[64];
		int n = victims(h, 0, out, seed);
		CHECK(n > 3);
		CHECK_EQ(out[0], 2);
		/* Then every other worker is still tried (the random rounds). */
		bool seen[NW] = {0};
		for (int i = 0; i < n; i++)
			seen[out[i]] = true;
		CHECK(seen[1] && seen[2] && seen[3]);
	}
	/* A preempted worker with nothing queued is not a rescue target: the first round (one
	 * attempt per worker) tries nobody. */
	for (uint64_t seed = 1; seed < 20; seed++) {
		reset();
		rec[3].preempted = PVHINT_PREEMPTED;
		queued[1] = 1;
		uint64_t r[2] = {seed, 0};
		struct rt_sched_caller c0 = {.worker = 0, .rng = r};
		for (unsigned a = 0; a < NW; a++)
			CHECK_EQ(h->steal_victim(&view, &c0, a), 0);
	}

	/* Wake an idle worker: parked 1 (pCPU busy), 2 (vCPU preempted), 3 (pCPU idle) -> 3. */
	reset();
	parked[1] = parked[2] = parked[3] = true;
	rec[2].preempted = PVHINT_PREEMPTED;
	rec[3].is_idle = 1;
	uint64_t rng[2] = {5, 0};
	struct rt_sched_caller w0 = {.worker = 0, .rng = rng};
	for (unsigned where = 0; where < NW; where++)
		CHECK_EQ(h->wake_idle(&view, &w0, where), 3);
	rec[3].is_idle = 0; /* no idle pCPU: a parked worker that is not preempted */
	for (unsigned where = 0; where < NW; where++) {
		int v = h->wake_idle(&view, &w0, where);
		CHECK(v == 1 || v == 3);
	}
	parked[1] = parked[3] = false; /* only the preempted one is parked: still woken */
	CHECK_EQ(h->wake_idle(&view, &w0, 0), 2);
	parked[2] = false;
	CHECK_EQ(h->wake_idle(&view, &w0, 0), -1);

	/* Lend: only to a preempted worker with a running ULT or queued work, never to the caller;
	 * with two such, both are chosen over the draws. */
	reset();
	for (uint64_t seed = 1; seed < 30; seed++) {
		uint64_t r[2] = {seed, 0};
		struct rt_sched_caller c0 = {.worker = 0, .rng = r};
		CHECK_EQ(h->lend(&view, &c0), -1); /* nobody preempted */
	}
	rec[1].preempted = PVHINT_PREEMPTED; /* preempted, but nothing of ours waits there */
	running[2] = true;		     /* runs, not preempted */
	queued[3] = 4;
	rec[0].preempted = PVHINT_PREEMPTED; /* the caller itself */
	running[0] = true;
	for (uint64_t seed = 1; seed < 30; seed++) {
		uint64_t r[2] = {seed, 0};
		struct rt_sched_caller c0 = {.worker = 0, .rng = r};
		CHECK_EQ(h->lend(&view, &c0), -1);
		CHECK_EQ(rt_sched_random.lend(&view, &c0), -1);
	}
	rec[2].preempted = rec[3].preempted = PVHINT_PREEMPTED;
	bool chose[NW] = {0};
	for (uint64_t seed = 1; seed < 60; seed++) {
		uint64_t r[2] = {seed, 0};
		struct rt_sched_caller c0 = {.worker = 0, .rng = r};
		int v = h->lend(&view, &c0);
		CHECK(v == 2 || v == 3);
		chose[v] = true;
		CHECK_EQ(rt_sched_random.lend(&view, &c0), -1);
	}
	CHECK(chose[2] && chose[3]);
	page.valid = PVHINT_VALID_IS_IDLE; /* no preemption hints: nothing to lend to */
	CHECK_EQ(h->lend(&view, &w0), -1);

	/* Wake target: a worker keeps the ULT; a foreign waker avoids a preempted last worker
	 * and prefers a parked worker on an idle pCPU. */
	reset();
	CHECK_EQ(h->wake_target(&view, &w0, 2), 0);
	struct rt_sched_caller f = {.worker = -1, .rng = rng};
	CHECK_EQ(h->wake_target(&view, &f, 2), 2);
	rec[2].preempted = PVHINT_PREEMPTED;
	rec[1].is_idle = 1;
	parked[1] = true;
	for (int i = 0; i < 20; i++)
		CHECK_EQ(h->wake_target(&view, &f, 2), 1);

	/* Without hints: the random policy's choices. */
	reset();
	page.valid = 0;
	rec[2].preempted = PVHINT_PREEMPTED; /* ignored */
	queued[2] = 5;
	parked[1] = parked[3] = true;
	for (uint64_t seed = 1; seed < 20; seed++) {
		int a[64], b[64];
		int na = victims(h, 0, a, seed), nb = victims(&rt_sched_random, 0, b, seed);
		/* hints' rescue round finds nothing; its random rounds walk as random's do. */
		CHECK_EQ(na, nb);
		for (int i = 0; i < na; i++)
			CHECK_EQ(a[i], b[i]);
		for (unsigned where = 0; where < NW; where++)
			CHECK_EQ(h->wake_idle(&view, &w0, where),
				 rt_sched_random.wake_idle(&view, &w0, where));
		/* Foreign wake-ups, also of ULTs that never ran (last -1): the same draws. */
		for (int last = -1; last < NW; last++) {
			uint64_t ra[2] = {seed, 0}, rb[2] = {seed, 0};
			struct rt_sched_caller fa = {.worker = -1, .rng = ra};
			struct rt_sched_caller fb = {.worker = -1, .rng = rb};
			CHECK_EQ(h->wake_target(&view, &fa, last),
				 rt_sched_random.wake_target(&view, &fb, last));
		}
	}
	printf("sched: OK\n");
	return 0;
}
