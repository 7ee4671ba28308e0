/* SPDX-License-Identifier: MIT */
/*
 * pvrt_barrier. One 64-bit word, 'state', holds the round: its low half counts
 * the arrivals, its high half is the round number << 2 with the kinds of
 * waiters asleep in its two low bits (KSLEEP, USLEEP). An arrival counts
 * itself with a compare-and-swap on the whole word, so it reads the round
 * and joins it in one step and nobody ever waits for a preempted holder of an
 * internal lock; the last arrival's swap clears the count, bumps the round
 * and takes the kinds asleep, all at once (release), which ends the round for
 * everyone. Waiters spin briefly on the round unless some other vCPU is
 * preempted or the round has more threads than there are CPUs (a peer they
 * wait for may then not be running: spinning would only burn the CPU that
 * peer needs), then park on the high half.
 *
 * Thread waiters sleep in the kernel futex on the high half itself, so the
 * last arrival wakes all of them with one system call (as glibc's barrier),
 * not one per waiter: under oversubscription the waker is often preempted by
 * the first thread it wakes, and the rest of a one-by-one wake-up then waits
 * for the waker's next time slice. ULTs park through rt_futex (they switch
 * away). A waiter sets its kind's bit in the word, then the kernel (or
 * rt_futex) compares the high half with the value it set; the bit and the
 * round's end are changes of one word, so either the last arrival's swap sees
 * the bit, or the waiter's compare sees the new round. A waiter of the next
 * round can only set a bit after that swap: the last arrival never takes it.
 *
 * The round number has 30 bits: a waiter stalled between its load and its swap or
 * futex compare while 2^30 further rounds pass (only possible with more threads
 * than 'count') would take the round for its own and wait one round more. It
 * never leaves early. The 64-bit swaps and the 32-bit futex compares of the high
 * half are accesses of different sizes to one word, which x86-64 and arm64 keep
 * coherent (C11 does not promise it).
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

/* The high half of the state: the futex word (little-endian: the word's upper 32 bits). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the futex is the state's high half");
static inline uint32_t *round_word(lk_barrier_t *b)
{
	return &b->half[1];
}
static inline uint32_t hi(uint64_t s)
{
	return (uint32_t)(s >> 32);
}
static inline uint32_t round_of(uint64_t s)
{
	return hi(s) >> 2;
}

int pvrt_barrier_wait(pvrt_barrier_t *pb)
{
	lk_barrier_t *b = lk_barrier_of(pb);
	__atomic_fetch_add(&b->inside, 1, __ATOMIC_RELAXED);
	/* Arrive: one swap reads the round and counts us in it, so an arrival racing with the
	 * end of a round (more threads than 'count') fails its swap and counts itself in the
	 * next round, never in the ended one. The last arrival's new word has no arrivals, the
	 * next round and no kinds asleep (it takes them). Acq_rel: the swaps of a round form a
	 * release sequence, so everything before every arrival happens-before the last
	 * arrival's swap, and every waiter that reads the next round acquires all of it. */
	uint64_t s = __atomic_load_n(&b->state, __ATOMIC_RELAXED), n;
	do {
		n = (uint32_t)s + 1 == b->count ? (uint64_t)((hi(s) & ~3u) + 4) << 32 : s + 1;
	} while (!__atomic_compare_exchange_n(&b->state, &s, n, true, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	lk_stat(C, LK_ACQ);
	uint32_t g = round_of(s);
	if ((uint32_t)n == 0) {
		if (hi(s) & KSLEEP)
			lk_kwake(round_word(b), INT32_MAX);
		if (hi(s) & USLEEP)
			lk_wake(round_word(b), INT32_MAX);
		leave(b);
		return PVRT_BARRIER_SERIAL_THREAD;
	}
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
		/* Acquire: see the last arrival's swap above. */
		if (round_of(__atomic_load_n(&b->state, __ATOMIC_ACQUIRE)) != g)
			goto done;
		if ((i & 15) == 0 && lk_any_other_preempted(h)) {
			lk_stat(C, LK_SPIN_CUT);
			break;
		}
		if (!lk_spin_more(&sp))
			break;
	}
	uint32_t kind = lk_self_ult() ? USLEEP : KSLEEP;
	for (;;) {
		/* Acquire: see the last arrival's swap above. */
		s = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
		if (round_of(s) != g)
			break;
		if (!(hi(s) & kind)) {
			/* Our kind's bit, by a swap on the word the last arrival swaps: one of the
			 * two swaps comes first (see the file comment). A failed swap (an arrival,
			 * another waiter) looks again. */
			uint64_t w = s | (uint64_t)kind << 32;
			if (!__atomic_compare_exchange_n(&b->state, &s, w, false, __ATOMIC_RELAXED,
							 __ATOMIC_RELAXED))
				continue;
			s = w;
		}
		/* Sleeps only if the high half is still what we set: if the other kind's bit
		 * came in between, the compare fails and we look again. Asleep, we stay so
		 * until a last arrival wakes our kind: the end of our round, or (the same
		 * address) of the round before, if its waker was slow; the loop looks again. */
		if (kind == USLEEP) {
			lk_park(round_word(b), hi(s), CLOCK_MONOTONIC, NULL, C);
		} else {
			lk_stat(C, LK_PARKS);
			lk_kwait(round_word(b), hi(s));
		}
	}
done:
	leave(b);
	return 0;
}
