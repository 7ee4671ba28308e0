/* SPDX-License-Identifier: MIT */
/*
 * pvrt_futex: the one wait/wake primitive of pvrt (internal to libpvrt).
 *
 * Semantics are the kernel futex's, for ULTs and plain threads alike:
 * pvrt_futex_wait() blocks the caller only if *addr still equals 'expected'
 * when it is queued, so a waker that changes *addr and then calls
 * pvrt_futex_wake() can never be missed. A ULT blocks by switching away (its
 * worker runs other ULTs); a thread that is not a ULT blocks in the kernel.
 * Spurious wake-ups are allowed: callers re-check their condition.
 *
 * Locks, join, sleep and barriers are all built on this.
 */
#ifndef PVRT_RUNTIME_FUTEX_H
#define PVRT_RUNTIME_FUTEX_H

#include <stdint.h>
#include <time.h>

/*
 * Wait while *addr == expected, until woken or until the absolute time
 * 'abstime' on clock 'clk' (CLOCK_MONOTONIC or CLOCK_REALTIME; NULL: no limit).
 * Returns 0 when woken (or spuriously), -EAGAIN when *addr != expected,
 * -ETIMEDOUT, or -EINVAL for a bad clock or timespec.
 */
int pvrt_futex_wait(uint32_t *addr, uint32_t expected, clockid_t clk,
		    const struct timespec *abstime);

/* Wake up to n waiters on addr (n = INT32_MAX: all). Returns how many were woken. */
int pvrt_futex_wake(uint32_t *addr, int n);

#endif /* PVRT_RUNTIME_FUTEX_H */
