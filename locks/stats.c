/* SPDX-License-Identifier: MIT */
/*
 * Lock statistics (pvrt_locks_stats_*, pvrt-run --stats).
 *
 * Each thread counts into a block of its own (single writer: relaxed load + store), taken from a
 * static pool so that counting never allocates (malloc may itself take a pthread mutex). Blocks
 * of exited threads keep their counts. Past the pool, threads share one block with atomic adds.
 *
 * A process tree (the preload with PVRT_STATS_FILE). lk_stats_share_with_children() moves the
 * counters into a MAP_SHARED region before counting starts, so forked children count into the
 * same pool -- also those that leave with _exit, which run no exit handlers. Each block records
 * the process that owns it. The process that loaded the preload (the loader) writes everyone's
 * counts at its exit: it first snapshots every block (lk_stats_snapshot) and reports the
 * snapshot. A child still running then reports, at its own exit, what its blocks counted since
 * the snapshot (LK_SUM_OWN_UNREPORTED); a child that ends before the loader reports nothing
 * itself. When the pool runs out (programs that fork thousands of children), a block whose
 * process has died and been reaped is reclaimed: its counts move to the 'retired' block first.
 */
#define _GNU_SOURCE
#include "lk.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct lk_tstats {
	uint64_t v[PVRT_LOCK_NCLASSES][LK_NSTATS];
	int32_t pid; /* shared region: the process whose thread owns the block */
};
#define LK_POOL 1024
struct lk_statmem {
	struct lk_tstats pool[LK_POOL];
	struct lk_tstats rep[LK_POOL]; /* the loader's snapshot of pool[] */
	struct lk_tstats shared;       /* past the pool: atomic adds */
	struct lk_tstats retired;      /* counts of reclaimed blocks: atomic adds */
	unsigned used;		       /* blocks handed out, at most LK_POOL */
	int snapshot;		       /* the loader took its snapshot */
};
static struct lk_statmem lk_sm_own;
/* The counters: the process's own, or the shared region. Switched only before counting. */
static struct lk_statmem *lk_sm = &lk_sm_own;
static bool lk_sm_shared;
static __thread struct lk_tstats *lk_my __attribute__((tls_model("initial-exec")));
int lk_stats_on;

int lk_stats_share_with_children(void)
{
	void *p = mmap(NULL, sizeof(struct lk_statmem), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	lk_sm = p;
	lk_sm_shared = true;
	return 0;
}

/* Relaxed throughout: counters; readers need eventually consistent sums only. */
static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* A block of a process that is gone (reaped: a zombie still answers kill), made ours after its
 * counts moved to 'retired'. Shared region only; errno preserved (we run inside lock calls). */
static struct lk_tstats *reclaim(int me)
{
	int saved = errno;
	struct lk_tstats *got = NULL;
	for (unsigned i = 0; i < LK_POOL && !got; i++) {
		struct lk_tstats *t = &lk_sm->pool[i];
		int32_t p = __atomic_load_n(&t->pid, __ATOMIC_RELAXED);
		if (p == 0 || p == me || kill(p, 0) == 0 || errno != ESRCH)
			continue;
		/* One reclaimer wins the block. */
		if (!__atomic_compare_exchange_n(&t->pid, &p, me, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		for (int c = 0; c < PVRT_LOCK_NCLASSES; c++)
			for (int s = 0; s < LK_NSTATS; s++) {
				uint64_t v = ld(&t->v[c][s]);
				__atomic_fetch_add(&lk_sm->retired.v[c][s], v, __ATOMIC_RELAXED);
				__atomic_store_n(&t->v[c][s], 0, __ATOMIC_RELAXED);
				/* The snapshot was of the dead process's counts, now retired. */
				__atomic_store_n(&lk_sm->rep[i].v[c][s], 0, __ATOMIC_RELAXED);
			}
		got = t;
	}
	errno = saved;
	return got;
}

static struct lk_tstats *take_block(void)
{
	int me = lk_sm_shared ? (int)getpid() : 0;
	unsigned u = __atomic_load_n(&lk_sm->used, __ATOMIC_RELAXED);
	while (u < LK_POOL)
		if (__atomic_compare_exchange_n(&lk_sm->used, &u, u + 1, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			__atomic_store_n(&lk_sm->pool[u].pid, me, __ATOMIC_RELAXED);
			return &lk_sm->pool[u];
		}
	struct lk_tstats *t = lk_sm_shared ? reclaim(me) : NULL;
	return t ? t : &lk_sm->shared;
}

void lk_stat_add_slow(enum pvrt_lock_class cls, enum lk_stat s)
{
	struct lk_tstats *t = lk_my;
	if (!t)
		lk_my = t = take_block();
	uint64_t *p = &t->v[cls][s];
	if (t == &lk_sm->shared)
		__atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
	else
		__atomic_store_n(p, ld(p) + 1, __ATOMIC_RELAXED);
}

void lk_stats_atfork_child(void)
{
	if (lk_sm_shared) {
		/* Counting into the shared region: the forking thread's block is its parent
		 * thread's (one writer per block), so the child takes a block of its own. */
		lk_my = NULL;
		return;
	}
	/* A child counts its own events only (the copied counts are the parent's). Only the
	 * forking thread exists in the child: plain writes are race-free. Only the used blocks are
	 * cleared (no page of an unused pool is touched). */
	if (lk_sm->used)
		memset(lk_sm->pool, 0, lk_sm->used * sizeof(lk_sm->pool[0]));
	memset(&lk_sm->shared, 0, sizeof(lk_sm->shared));
	lk_sm->used = 0;
	lk_my = NULL;
}

void lk_stats_snapshot(void)
{
	unsigned n = __atomic_load_n(&lk_sm->used, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n; i++)
		for (int c = 0; c < PVRT_LOCK_NCLASSES; c++)
			for (int s = 0; s < LK_NSTATS; s++)
				__atomic_store_n(&lk_sm->rep[i].v[c][s],
						 ld(&lk_sm->pool[i].v[c][s]), __ATOMIC_RELAXED);
	/* Release: a child that sees the flag sees the snapshot. */
	__atomic_store_n(&lk_sm->snapshot, 1, __ATOMIC_RELEASE);
}

bool lk_stats_snapshot_taken(void)
{
	/* Acquire: pairs with lk_stats_snapshot's release. */
	return __atomic_load_n(&lk_sm->snapshot, __ATOMIC_ACQUIRE) != 0;
}

void lk_stats_sum(enum pvrt_lock_class cls, int which, struct pvrt_lock_stats *out)
{
	uint64_t sum[LK_NSTATS] = {0};
	int me = which == LK_SUM_OWN_UNREPORTED ? (int)getpid() : 0;
	unsigned n = __atomic_load_n(&lk_sm->used, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n; i++) {
		const struct lk_tstats *t = &lk_sm->pool[i];
		if (which == LK_SUM_OWN_UNREPORTED &&
		    __atomic_load_n(&t->pid, __ATOMIC_RELAXED) != me)
			continue;
		for (int s = 0; s < LK_NSTATS; s++) {
			uint64_t now = ld(&t->v[cls][s]), rep = ld(&lk_sm->rep[i].v[cls][s]);
			if (which == LK_SUM_REPORTED)
				sum[s] += rep;
			else if (which == LK_SUM_OWN_UNREPORTED)
				sum[s] += now > rep ? now - rep : 0;
			else
				sum[s] += now;
		}
	}
	if (which != LK_SUM_OWN_UNREPORTED) /* not attributable to one process */
		for (int s = 0; s < LK_NSTATS; s++)
			sum[s] += ld(&lk_sm->shared.v[cls][s]) + ld(&lk_sm->retired.v[cls][s]);
	out->acquisitions = sum[LK_ACQ];
	out->contended = sum[LK_CONTENDED];
	out->spin_cut = sum[LK_SPIN_CUT];
	out->parks = sum[LK_PARKS];
	out->handoffs = sum[LK_HANDOFFS];
	out->yields = sum[LK_YIELDS];
}

void pvrt_locks_stats_enable(bool on)
{
	__atomic_store_n(&lk_stats_on, on ? 1 : 0, __ATOMIC_RELAXED);
}

int pvrt_locks_stats_read(enum pvrt_lock_class cls, struct pvrt_lock_stats *out, size_t size)
{
	if ((unsigned)cls >= PVRT_LOCK_NCLASSES || !out ||
	    size < offsetof(struct pvrt_lock_stats, acquisitions))
		return -EINVAL;
	struct pvrt_lock_stats st = {0};
	lk_stats_sum(cls, LK_SUM_ALL, &st);
	out->size = (uint32_t)os_sized_out(out, size, &st, sizeof(st));
	return 0;
}
