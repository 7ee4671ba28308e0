/* SPDX-License-Identifier: MIT */
/*
 * pvrt_spinlock: pthread_spin_* semantics in 4 bytes (glibc's pthread_spinlock_t),
 * but a waiter stops spinning and parks when the holder's vCPU is preempted,
 * and no spin is unbounded: after a long spin it parks as well.
 * The word is 0 when free, else the holder's vCPU + 1 (bit 31: parked waiters).
 */
#ifndef PVRT_SPINLOCK_H
#define PVRT_SPINLOCK_H

#include <pvrt/export.h>

#include <stdint.h>

PVRT_BEGIN_DECLS

typedef uint32_t pvrt_spinlock_t;
#define PVRT_SPINLOCK_INITIALIZER 0u

/* Unlocked (the same as PVRT_SPINLOCK_INITIALIZER).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_spin_init(pvrt_spinlock_t *s);
/* Nothing to release.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_spin_destroy(pvrt_spinlock_t *s);
/* Spin while the holder runs; park when it is preempted or after a long spin.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_spin_lock(pvrt_spinlock_t *s);
/* -EBUSY when held.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_spin_trylock(pvrt_spinlock_t *s);
/* Release; wakes a parked waiter if any.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_spin_unlock(pvrt_spinlock_t *s);

PVRT_END_DECLS

#endif /* PVRT_SPINLOCK_H */
