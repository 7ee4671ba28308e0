/* SPDX-License-Identifier: MIT */
/*
 * pvrt_spinlock: the word is 0 when free, else the holder's vCPU + 1, with
 * PARKED (bit 31) once a waiter may sleep on it. A waiter spins on reads; it
 * parks at once when the holder's vCPU is preempted, and after a long spin in
 * any case (nothing spins forever). Parking is bounded by a short timeout so
 * that even a process-shared spinlock, whose unlocker's private wake-up cannot
 * reach another process, never loses a waiter for long.
 */
#define _GNU_SOURCE
#include <pvrt/spinlock.h>

#include "lk.h"

#include <errno.h>

#define PARKED	0x80000000u
#define C	PVRT_LOCK_SPIN
#define PARK_NS 2000000L

int pvrt_spin_init(pvrt_spinlock_t *s)
{
	__atomic_store_n(s, 0, __ATOMIC_RELAXED);
	return 0;
}

int pvrt_spin_destroy(pvrt_spinlock_t *s)
{
	(void)s;
	return 0;
}

static inline uint32_t self_word(void)
{
	uint32_t v = lk_self_vcpu1(lk_self_ult());
	return (v ? v : 1) & ~PARKED;
}

int pvrt_spin_trylock(pvrt_spinlock_t *s)
{
	uint32_t z = 0;
	/* Acquire: the previous holder's critical section happens-before ours. */
	if (!__atomic_compare_exchange_n(s, &z, self_word(), false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return -EBUSY;
	lk_stat(C, LK_ACQ);
	return 0;
}

static void spin_slow(pvrt_spinlock_t *s)
{
	lk_stat(C, LK_CONTENDED);
	pvhint_t *h = lk_hints();
	uint32_t me = self_word();
	uint32_t parked = 0; /* PARKED once we have parked: others may still sleep */
	/* One directed yield per call: the kernel's rate limit must not be the only bound. */
	bool yielded = false;
	for (;;) {
		struct lk_spin sp;
		lk_spin_init(&sp, LK_SPINLOCK_SPIN_NS);
		for (;;) {
			uint32_t w = __atomic_load_n(s, __ATOMIC_RELAXED);
			if (w == 0) {
				/* Acquire: as in trylock. */
				if (__atomic_compare_exchange_n(s, &w, me | parked, false,
								__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
					return;
				continue;
			}
			if (lk_holder_preempted(h, w & ~PARKED)) {
				lk_stat(C, LK_SPIN_CUT);
				/* Run the holder's vCPU in ours (once per call), then spin
				 * again: it runs now. A second cut parks. */
				if (!yielded && lk_yield_to_vcpu1(h, w & ~PARKED, C)) {
					yielded = true;
					lk_spin_init(&sp, LK_SPINLOCK_SPIN_NS);
				} else {
					break;
				}
			}
			if (!lk_spin_more(&sp))
				break;
			if (sp.backoff == LK_BACKOFF_MAX)
				sp.backoff = 1; /* pthread_spin users expect short reaction times */
		}
		uint32_t w = __atomic_load_n(s, __ATOMIC_RELAXED);
		if (w == 0)
			continue;
		/* Relaxed: the futex compares under its lock; the flag only has to be there. */
		if (!(w & PARKED) &&
		    !__atomic_compare_exchange_n(s, &w, w | PARKED, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		parked = PARKED;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += PARK_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		lk_park(s, w | PARKED, CLOCK_MONOTONIC, &ts, C);
	}
}

int pvrt_spin_lock(pvrt_spinlock_t *s)
{
	uint32_t z = 0;
	/* Acquire: as in trylock. */
	if (lk_unlikely(!__atomic_compare_exchange_n(s, &z, self_word(), false, __ATOMIC_ACQUIRE,
						     __ATOMIC_RELAXED)))
		spin_slow(s);
	lk_stat(C, LK_ACQ);
	return 0;
}

int pvrt_spin_unlock(pvrt_spinlock_t *s)
{
	/* Release: our critical section happens-before the next holder's. */
	if (lk_unlikely(__atomic_exchange_n(s, 0, __ATOMIC_RELEASE) & PARKED))
		lk_wake_one(s);
	return 0;
}
