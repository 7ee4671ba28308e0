/* SPDX-License-Identifier: MIT */
/*
 * pvrt_barrier. An arrival reads the round number 'gen' and counts itself
 * in 'arrived' under a small internal lock; the last arrival of a round
 * resets 'arrived' and bumps 'gen' (release), which ends the round for
 * everyone. Waiters spin briefly on 'gen' unless some other vCPU is preempted
 * (a peer they wait for may sit there: spinning would only burn the pCPU
 * that peer needs), then park on it.
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>

#include "lk.h"

#include <errno.h>
#include <stddef.h>

#define C PVRT_LOCK_BARRIER

_Static_assert(sizeof(pvrt_barrier_t) == 32, "pvrt_barrier_t must fit glibc's pthread_barrier_t");
_Static_assert(offsetof(pvrt_barrier_t, shared) == 12, "glibc's barrier 'shared' offset");

int pvrt_barrier_init(pvrt_barrier_t *b, unsigned count)
{
	if (count == 0 || count > INT32_MAX)
		return -EINVAL;
	*b = (pvrt_barrier_t){.count = count};
	return 0;
}

int pvrt_barrier_destroy(pvrt_barrier_t *b)
{
	/* Wait until the last round's waiters have stopped reading the barrier. */
	for (;;) {
		/* Acquire: pairs with the release decrement in pvrt_barrier_wait. */
		uint32_t in = __atomic_load_n(&b->inside, __ATOMIC_ACQUIRE);
		if (in == 0)
			return 0;
		lk_park(&b->inside, in, CLOCK_MONOTONIC, NULL, C);
	}
}

static void leave(pvrt_barrier_t *b)
{
	/* Release: our reads of the barrier happen-before destroy's return. */
	if (__atomic_sub_fetch(&b->inside, 1, __ATOMIC_RELEASE) == 0)
		lk_wake(&b->inside, INT32_MAX);
}

int pvrt_barrier_wait(pvrt_barrier_t *b)
{
	__atomic_fetch_add(&b->inside, 1, __ATOMIC_RELAXED);
	/* Arrival under the internal lock: reading the round and counting ourselves in it must
	 * be one step, or an arrival racing with the end of a round (more threads than 'count')
	 * could count itself in the next round while waiting on the old one. */
	uint32_t *ilock = &b->pad[0];
	lk_ilock(ilock);
	uint32_t g = __atomic_load_n(&b->gen, __ATOMIC_RELAXED);
	uint32_t a = ++b->arrived;
	lk_stat(C, LK_ACQ);
	if (a == b->count) {
		b->arrived = 0;
		/* Release: everything before every arrival (ordered before us by the internal
		 * lock) happens-before every waiter's return. */
		__atomic_store_n(&b->gen, g + 1, __ATOMIC_RELEASE);
		lk_iunlock(ilock);
		lk_wake(&b->gen, INT32_MAX);
		leave(b);
		return PVRT_BARRIER_SERIAL_THREAD;
	}
	lk_iunlock(ilock);
	lk_stat(C, LK_CONTENDED);
	pvhint_t *h = lk_hints();
	struct lk_spin sp;
	lk_spin_init(&sp, lk_spin_budget(h));
	for (unsigned i = 0;; i++) {
		if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) != g)
			goto done;
		if ((i & 15) == 0 && lk_any_other_preempted(h)) {
			lk_stat(C, LK_SPIN_CUT);
			break;
		}
		if (!lk_spin_more(&sp))
			break;
	}
	/* Acquire: see the release bump above. */
	while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g)
		lk_park(&b->gen, g, CLOCK_MONOTONIC, NULL, C);
done:
	leave(b);
	return 0;
}
