/* SPDX-License-Identifier: MIT */
/*
 * pvrt_rwlock. state: bit 0 = a writer holds it, readers in units of 2.
 *
 * Parking uses two event counters, 'rseq' (readers) and 'wseq' (writers), and
 * waiter counts 'nrwait'/'nwwait'. A waiter increments its count, reads the
 * counter, re-checks the state and parks on the counter value; an unlocker
 * changes the state, then reads the counts and, if someone may wait, bumps the
 * counter and wakes. All four steps are sequentially consistent, so either the
 * waiter sees the new state or the unlocker sees the waiter (store-load on
 * both sides); a bump between the waiter's read and its park makes the park
 * return at once. Readers are woken all together, writers one at a time.
 *
 * Spinning: a contender spins (bounded) while a writer holds the lock and the
 * writer's vCPU is not preempted; readers have no single owner to watch, so a
 * writer waiting for readers spins only the bounded budget.
 */
#define _GNU_SOURCE
#include <pvrt/rwlock.h>

#include "lk.h"

#include <errno.h>
#include <stddef.h>

#define WRITER 1u
#define READER 2u
#define C      PVRT_LOCK_RWLOCK

_Static_assert(sizeof(lk_rwlock_t) == 56, "lk_rwlock_t must fit glibc's pthread_rwlock_t");
_Static_assert(offsetof(lk_rwlock_t, shared) == 28, "glibc's __shared offset");
_Static_assert(offsetof(lk_rwlock_t, flags) == 48, "glibc's __flags offset");
_Static_assert(offsetof(lk_rwlock_t, writer) == 24, "glibc's __cur_writer offset");

int pvrt_rwlock_init(pvrt_rwlock_t *prw, int pref)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	if (pref < PVRT_RWLOCK_PREFER_READER || pref > PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE)
		return -EINVAL;
	*rw = (lk_rwlock_t){.flags = (uint32_t)pref};
	return 0;
}

int pvrt_rwlock_destroy(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	(void)rw; /* glibc's destroy neither checks nor waits */
	return 0;
}

static inline bool writer_pref(const lk_rwlock_t *rw)
{
	return __atomic_load_n(&rw->flags, __ATOMIC_RELAXED) ==
	       PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE;
}

/* May a reader enter given state s? (Writer preference: not while a writer waits.) */
static inline bool reader_may_enter(lk_rwlock_t *rw, uint32_t s)
{
	if (s & WRITER)
		return false;
	return !writer_pref(rw) || __atomic_load_n(&rw->nwwait, __ATOMIC_RELAXED) == 0;
}

/* Is spinning on this state worthwhile (a writer holds it and its vCPU runs)? */
static inline bool spin_worth(lk_rwlock_t *rw, uint32_t s, pvhint_t *h, bool *cut)
{
	if ((s & WRITER) &&
	    lk_holder_preempted(h, __atomic_load_n(&rw->writer_vcpu, __ATOMIC_RELAXED))) {
		*cut = true;
		return false;
	}
	return true;
}

/* A reader's or writer's spin state across the rounds of one contended acquisition. */
struct contender {
	pvhint_t *h;
	struct lk_spin sp;
	bool spinning, contended;
	bool yielded; /* one directed yield per call */
};

/* One round of contention on state s: true to retry at once (spinning), false to park. */
static bool contend_spin(lk_rwlock_t *rw, uint32_t s, struct contender *cw)
{
	if (!cw->contended) {
		cw->contended = true;
		lk_stat(C, LK_CONTENDED);
		cw->h = lk_hints();
	}
	if (!cw->spinning) {
		cw->spinning = true;
		lk_spin_init(&cw->sp, lk_spin_budget(cw->h));
	}
	bool cut = false;
	if (cw->sp.budget && spin_worth(rw, s, cw->h, &cut)) {
		if (!lk_spin_more(&cw->sp))
			cw->sp.budget = 0; /* spent: park */
		return true;
	}
	if (cut && cw->sp.budget) {
		lk_stat(C, LK_SPIN_CUT);
		/* Run the writer's vCPU in ours (once per call), then look again; a second
		 * cut parks. */
		if (!cw->yielded &&
		    lk_yield_to_vcpu1(cw->h, __atomic_load_n(&rw->writer_vcpu, __ATOMIC_RELAXED),
				      C)) {
			cw->yielded = true;
			return true;
		}
		cw->sp.budget = 0;
	}
	return false;
}

/* abs: the deadline on clk, or NULL to wait without one. */
static int rdlock_common(lk_rwlock_t *rw, clockid_t clk, const struct timespec *abs)
{
	if ((__atomic_load_n(&rw->state, __ATOMIC_RELAXED) & WRITER) &&
	    __atomic_load_n(&rw->writer, __ATOMIC_RELAXED) == lk_self_id(lk_self_ult()))
		return -EDEADLK;
	struct contender cw = {0};
	for (;;) {
		uint32_t s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
		if (reader_may_enter(rw, s)) {
			if (s >= UINT32_MAX - READER)
				return -EAGAIN;
			/* Acquire: the last writer's critical section happens-before ours. */
			if (__atomic_compare_exchange_n(&rw->state, &s, s + READER, false,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				lk_stat(C, LK_ACQ);
				return 0;
			}
			continue;
		}
		if (contend_spin(rw, s, &cw))
			continue;
		if (abs && abs->tv_sec < 0) /* glibc: a deadline before 1970 has passed */
			return -ETIMEDOUT;
		/* Seq_cst (here and below): see the header comment. */
		__atomic_fetch_add(&rw->nrwait, 1, __ATOMIC_SEQ_CST);
		uint32_t seq = __atomic_load_n(&rw->rseq, __ATOMIC_SEQ_CST);
		s = __atomic_load_n(&rw->state, __ATOMIC_SEQ_CST);
		int r = 0;
		if (!reader_may_enter(rw, s))
			r = lk_park(&rw->rseq, seq, clk, abs, C);
		__atomic_fetch_sub(&rw->nrwait, 1, __ATOMIC_SEQ_CST);
		if (r == -ETIMEDOUT || r == -EINVAL)
			return r;
		cw.spinning = false; /* woken: spin again */
		cw.sp.budget = 0;
	}
}

/* A writer gave up waiting: readers held back by writer preference may go now. */
static void writer_left(lk_rwlock_t *rw)
{
	__atomic_fetch_sub(&rw->nwwait, 1, __ATOMIC_SEQ_CST);
	if (writer_pref(rw) && __atomic_load_n(&rw->nrwait, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&rw->rseq, 1, __ATOMIC_SEQ_CST);
		lk_wake(&rw->rseq, INT32_MAX);
	}
}

/* abs: the deadline on clk, or NULL to wait without one. */
static int wrlock_common(lk_rwlock_t *rw, clockid_t clk, const struct timespec *abs)
{
	struct pvrt_ult *u = lk_self_ult();
	int tid = lk_self_id(u);
	if ((__atomic_load_n(&rw->state, __ATOMIC_RELAXED) & WRITER) &&
	    __atomic_load_n(&rw->writer, __ATOMIC_RELAXED) == tid)
		return -EDEADLK;
	struct contender cw = {0};
	for (;;) {
		uint32_t s = 0;
		/* Acquire: the previous holders' critical sections happen-before ours. */
		if (__atomic_compare_exchange_n(&rw->state, &s, WRITER, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			/* Relaxed: hints for contenders and the EDEADLK check by this thread. */
			__atomic_store_n(&rw->writer, tid, __ATOMIC_RELAXED);
			__atomic_store_n(&rw->writer_vcpu, lk_self_vcpu1(u), __ATOMIC_RELAXED);
			lk_stat(C, LK_ACQ);
			return 0;
		}
		if (contend_spin(rw, s, &cw))
			continue;
		if (abs && abs->tv_sec < 0) /* glibc: a deadline before 1970 has passed */
			return -ETIMEDOUT;
		__atomic_fetch_add(&rw->nwwait, 1, __ATOMIC_SEQ_CST);
		uint32_t seq = __atomic_load_n(&rw->wseq, __ATOMIC_SEQ_CST);
		s = __atomic_load_n(&rw->state, __ATOMIC_SEQ_CST);
		int r = 0;
		if (s != 0)
			r = lk_park(&rw->wseq, seq, clk, abs, C);
		if (r == -ETIMEDOUT || r == -EINVAL) {
			writer_left(rw);
			return r;
		}
		__atomic_fetch_sub(&rw->nwwait, 1, __ATOMIC_SEQ_CST);
		cw.spinning = false; /* woken: spin again */
		cw.sp.budget = 0;
	}
}

int pvrt_rwlock_rdlock(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	return rdlock_common(rw, CLOCK_MONOTONIC, NULL);
}

int pvrt_rwlock_wrlock(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	return wrlock_common(rw, CLOCK_MONOTONIC, NULL);
}

int pvrt_rwlock_timedrdlock(pvrt_rwlock_t *prw, clockid_t clk, const struct timespec *abstime)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	/* glibc checks clock and timespec before anything else. */
	if (!lk_valid_clock(clk) || !abstime || !os_timespec_valid(abstime))
		return -EINVAL;
	return rdlock_common(rw, clk, abstime);
}

int pvrt_rwlock_timedwrlock(pvrt_rwlock_t *prw, clockid_t clk, const struct timespec *abstime)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	if (!lk_valid_clock(clk) || !abstime || !os_timespec_valid(abstime))
		return -EINVAL;
	return wrlock_common(rw, clk, abstime);
}

int pvrt_rwlock_tryrdlock(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	uint32_t s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	for (;;) {
		if (!reader_may_enter(rw, s))
			return -EBUSY;
		if (s >= UINT32_MAX - READER)
			return -EAGAIN;
		/* Acquire: as in rdlock_common. */
		if (__atomic_compare_exchange_n(&rw->state, &s, s + READER, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
	}
	lk_stat(C, LK_ACQ);
	return 0;
}

int pvrt_rwlock_trywrlock(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	uint32_t s = 0;
	/* Acquire: as in wrlock_common. */
	if (!__atomic_compare_exchange_n(&rw->state, &s, WRITER, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return -EBUSY;
	struct pvrt_ult *u = lk_self_ult();
	__atomic_store_n(&rw->writer, lk_self_id(u), __ATOMIC_RELAXED);
	__atomic_store_n(&rw->writer_vcpu, lk_self_vcpu1(u), __ATOMIC_RELAXED);
	lk_stat(C, LK_ACQ);
	return 0;
}

int pvrt_rwlock_unlock(pvrt_rwlock_t *prw)
{
	lk_rwlock_t *rw = lk_rwlock_of(prw);
	uint32_t s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	bool was_writer = false;
	if (s & WRITER) {
		/* Only the writer may unlock a write-held lock (a reader cannot hold it now). */
		__atomic_store_n(&rw->writer, 0, __ATOMIC_RELAXED);
		/* Release + seq_cst: publishes the critical section; orders the state change before
		 * the waiter-count loads below. */
		s = __atomic_and_fetch(&rw->state, ~WRITER, __ATOMIC_SEQ_CST);
		was_writer = true;
	} else {
		if (s < READER)
			return 0; /* not locked: glibc returns 0 too */
		s = __atomic_sub_fetch(&rw->state, READER, __ATOMIC_SEQ_CST);
	}
	if (s != 0)
		return 0; /* readers remain; the last one wakes */
	if (__atomic_load_n(&rw->nwwait, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&rw->wseq, 1, __ATOMIC_SEQ_CST);
		lk_wake_one(&rw->wseq);
		if (writer_pref(rw))
			return 0; /* readers wait for the writers */
	}
	if ((was_writer || writer_pref(rw)) && __atomic_load_n(&rw->nrwait, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&rw->rseq, 1, __ATOMIC_SEQ_CST);
		lk_wake(&rw->rseq, INT32_MAX);
	}
	return 0;
}
