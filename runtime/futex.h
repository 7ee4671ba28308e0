/* SPDX-License-Identifier: MIT */
/*
 * rt_futex: the one wait/wake primitive of pvrt (internal to libpvrt).
 *
 * Semantics are the kernel futex's, for ULTs and plain threads alike:
 * rt_futex_wait() blocks the caller only if *addr still equals 'expected'
 * when it is queued, so a waker that changes *addr and then calls
 * rt_futex_wake() can never be missed. A ULT blocks by switching away (its
 * worker runs other ULTs); a thread that is not a ULT blocks in the kernel.
 * Spurious wake-ups are allowed: callers re-check their condition.
 *
 * Locks, join, sleep and barriers are all built on this.
 */
#ifndef PVRT_RUNTIME_FUTEX_H
#define PVRT_RUNTIME_FUTEX_H

#include <pvrt/pvhint.h>

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/*
 * Wait while *addr == expected, until woken or until the absolute time
 * 'abstime' on clock 'clk' (CLOCK_MONOTONIC or CLOCK_REALTIME; NULL: no limit).
 * Returns 0 when woken (or spuriously), -EAGAIN when *addr != expected,
 * -ETIMEDOUT, or -EINVAL for a bad clock or timespec.
 */
int rt_futex_wait(uint32_t *addr, uint32_t expected, clockid_t clk, const struct timespec *abstime);
/*
 * rt_futex_wait, and a cancellation point of an M:N ULT (runtime/mn.c): -ECANCELED instead of
 * blocking once the calling ULT is cancelled (pthread_cancel sets its word, then wakes the
 * address it waits on). Callers pass only waits where cancellation is enabled, and act on it.
 * Threads that are not ULTs wait as with rt_futex_wait.
 */
int rt_futex_wait_cancel(uint32_t *addr, uint32_t expected, clockid_t clk,
			 const struct timespec *abstime);

/* Wake up to n waiters on addr (n = INT32_MAX: all), oldest first. Returns how many were woken. */
int rt_futex_wake(uint32_t *addr, int n);

/*
 * Wake one waiter on addr, preferring one that will run soon according to the hints h: among the
 * RT_WAKE_PICK_SCAN oldest waiters on addr, the oldest whose vCPU's physical CPU is idle (it
 * runs at once), else the oldest whose vCPU is not preempted, else the oldest. A thread waiter's
 * vCPU is the one it waited on (its emulated vCPU, else its CPU then: where the kernel will most
 * likely wake it); a ULT's is unknown (the scheduler places it when it is readied) and counts as
 * not preempted. Bounded unfairness: a waiter passed over RT_WAKE_MAX_SKIPS times is taken
 * next (see struct rt_wake_pick). Hints only reorder wake-ups: every waiter is still woken by
 * some wake. Returns 0 or 1.
 */
int rt_futex_wake_hinted(uint32_t *addr, const pvhint_t *h);
/* How many waiters are queued on addr now (for tests). */
int rt_futex_nr_waiters(const uint32_t *addr);

/* How soon a thread waiting on vCPU vcpu1 - 1 (0: unknown) would run if woken now: 2 at once
 * (the physical CPU under that vCPU is idle), 1 its vCPU is not preempted (or unknown), 0 it
 * is preempted. The ranking of rt_futex_wake_hinted, also used by the condvar's signal. */
static inline int rt_wake_rank(const pvhint_t *h, uint32_t vcpu1)
{
	if (!vcpu1)
		return 1;
	unsigned v = vcpu1 - 1;
	if ((h->valid & PVHINT_VALID_IS_IDLE) && pvhint_pcpu_idle(h, v))
		return 2;
	return (h->valid & PVHINT_VALID_PREEMPTED) && pvhint_vcpu_preempted(h, v) ? 0 : 1;
}

/*
 * "Wake who runs soonest, with bounded skips": the choice of rt_futex_wake_hinted and of the
 * condvar's signal. Offer the queued waiters oldest first; the pick is the one with the highest
 * rt_wake_rank among the first RT_WAKE_PICK_SCAN, the oldest among equals, cut short by a
 * rank of 2 (cannot do better) or by a waiter already passed over RT_WAKE_MAX_SKIPS times (the
 * fairness bound: it goes first). The caller then counts a skip for each waiter older than the
 * pick, so hints reorder wake-ups by a bounded amount.
 */
#define RT_WAKE_PICK_SCAN 8
#define RT_WAKE_MAX_SKIPS 4
struct rt_wake_pick {
	void *best; /* NULL until a waiter was offered */
	int rank;
	int seen;
};

static inline void rt_wake_pick_init(struct rt_wake_pick *p)
{
	*p = (struct rt_wake_pick){.rank = -1};
}

/* Offer waiter w (its vCPU + 1, 0 unknown, and its skip count); false: the pick is made. */
static inline bool rt_wake_pick_offer(struct rt_wake_pick *p, const pvhint_t *h, void *w,
				      uint32_t vcpu1, unsigned skipped)
{
	if (skipped >= RT_WAKE_MAX_SKIPS) {
		p->best = w;
		return false;
	}
	int r = rt_wake_rank(h, vcpu1);
	if (r > p->rank) {
		p->best = w;
		p->rank = r;
		if (r == 2)
			return false;
	}
	return ++p->seen < RT_WAKE_PICK_SCAN;
}

#endif /* PVRT_RUNTIME_FUTEX_H */
