/* SPDX-License-Identifier: MIT */
/*
 * pvrt_barrier. An arrival reads the round number 'gen' and counts itself
 * in 'arrived' under a small internal lock; the last arrival of a round
 * resets 'arrived' and bumps 'gen' (release), which ends the round for
 * everyone. Waiters spin briefly on 'gen' unless some other vCPU is preempted
 * or the round has more threads than there are CPUs (a peer they wait for may
 * then not be running: spinning would only burn the CPU that peer needs),
 * then park on it.
 *
 * Thread waiters sleep in the kernel futex on 'gen' itself, so the last
 * arrival wakes all of them with one system call (as glibc's barrier), not
 * one per waiter: under oversubscription the waker is often preempted by the
 * first thread it wakes, and the rest of a one-by-one wake-up then waits for
 * the waker's next time slice. ULTs park through rt_futex (they switch
 * away). Which kinds sleep is kept in 'sleepers' (KSLEEP, USLEEP): a waiter
 * sets its bit, then the kernel (or rt_futex) compares 'gen'; the last
 * arrival stores 'gen', then takes the bits and wakes only what they name
 * (both sides sequentially consistent, so one of them sees the other). It
 * takes them under the internal lock, before the next round's arrivals can
 * register, so it never takes a bit of a waiter of the next round.
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>

#include "lk.h"

#include <errno.h>
#include <stddef.h>

#define C PVRT_LOCK_BARRIER
enum { KSLEEP = 1, USLEEP = 2 };

_Static_assert(sizeof(lk_barrier_t) == 32, "lk_barrier_t must fit glibc's pthread_barrier_t");
_Static_assert(offsetof(lk_barrier_t, shared) == 12, "glibc's barrier 'shared' offset");

int pvrt_barrier_init(pvrt_barrier_t *pb, unsigned count)
{
	lk_barrier_t *b = lk_barrier_of(pb);
	if (count == 0 || count > INT32_MAX)
		return -EINVAL;
	*b = (lk_barrier_t){.count = count};
	return 0;
}

int pvrt_barrier_destroy(pvrt_barrier_t *pb)
{
	lk_barrier_t *b = lk_barrier_of(pb);
	/* Wait until the last round's waiters have stopped reading the barrier. */
	for (;;) {
		/* Acquire: pairs with the release decrement in pvrt_barrier_wait. */
		uint32_t in = __atomic_load_n(&b->inside, __ATOMIC_ACQUIRE);
		if (in == 0)
			return 0;
		lk_park(&b->inside, in, CLOCK_MONOTONIC, NULL, C);
	}
}

static void leave(lk_barrier_t *b)
{
	/* Release: our reads of the barrier happen-before destroy's return. */
	if (__atomic_sub_fetch(&b->inside, 1, __ATOMIC_RELEASE) == 0)
		lk_wake(&b->inside, INT32_MAX);
}

int pvrt_barrier_wait(pvrt_barrier_t *pb)
{
	lk_barrier_t *b = lk_barrier_of(pb);
	__atomic_fetch_add(&b->inside, 1, __ATOMIC_RELAXED);
	/* Arrival under the internal lock: reading the round and counting ourselves in it must
	 * be one step, or an arrival racing with the end of a round (more threads than 'count')
	 * could count itself in the next round while waiting on the old one. */
	uint32_t *ilock = &b->ilock, *sleepers = &b->sleepers;
	lk_ilock(ilock, C);
	uint32_t g = __atomic_load_n(&b->gen, __ATOMIC_RELAXED);
	uint32_t a = ++b->arrived;
	lk_stat(C, LK_ACQ);
	if (a == b->count) {
		b->arrived = 0;
		/* Release: everything before every arrival (ordered before us by the internal
		 * lock) happens-before every waiter's return. Seq_cst: against the waiters'
		 * set-bit-then-compare (see the file comment). */
		__atomic_store_n(&b->gen, g + 1, __ATOMIC_SEQ_CST);
		uint32_t sl = __atomic_exchange_n(sleepers, 0, __ATOMIC_SEQ_CST);
		lk_iunlock(ilock);
		if (sl & KSLEEP)
			lk_kwake(&b->gen, INT32_MAX);
		if (sl & USLEEP)
			lk_wake(&b->gen, INT32_MAX);
		leave(b);
		return PVRT_BARRIER_SERIAL_THREAD;
	}
	lk_iunlock(ilock);
	lk_stat(C, LK_CONTENDED);
	/* Spin only when every thread of the round can run at once and with preemption hints
	 * (it then stops when a peer's vCPU is preempted). Without hints a waiter parks at once,
	 * as glibc's do: phases of real programs rarely end within a spin, and a spin that fails
	 * costs the CPU (and, on a loaded or oversubscribed machine, the time slice) a peer
	 * needs. The round size first: a round larger than the CPUs never reads the hints, so it
	 * does not ask a served bpf source to attach (lk_hints). */
	pvhint_t *h = b->count <= lk_nr_cpus() ? lk_hints() : NULL;
	bool spin = h && (h->valid & PVHINT_VALID_PREEMPTED);
	struct lk_spin sp;
	if (spin)
		lk_spin_init(&sp, lk_spin_budget(h));
	for (unsigned i = 0; spin; i++) {
		if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) != g)
			goto done;
		if ((i & 15) == 0 && lk_any_other_preempted(h)) {
			lk_stat(C, LK_SPIN_CUT);
			break;
		}
		if (!lk_spin_more(&sp))
			break;
	}
	bool ult = lk_self_ult() != NULL;
	/* Acquire: see the release bump above. */
	while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g) {
		__atomic_fetch_or(sleepers, ult ? USLEEP : KSLEEP, __ATOMIC_SEQ_CST);
		if (ult) {
			lk_park(&b->gen, g, CLOCK_MONOTONIC, NULL, C);
			continue;
		}
		lk_stat(C, LK_PARKS);
		lk_kwait(&b->gen, g);
	}
done:
	leave(b);
	return 0;
}
