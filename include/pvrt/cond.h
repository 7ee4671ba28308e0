/* SPDX-License-Identifier: MIT */
/*
 * pvrt_cond: condition variable.
 *
 * Each waiter queues a node on its own stack.
 *
 * signal wakes the waiter that will run soonest by the hints (its physical CPU
 * idle, else its vCPU not preempted), among the 8 oldest, the oldest among
 * equals; a waiter passed over 4 times goes next, so hints reorder signals by
 * a bounded amount. Without hints, signal wakes the oldest waiter.
 *
 * Thread waiters sleep in the kernel on a word of the condvar, each with a
 * bit of its own, so broadcast wakes all of them with one system call; ULT
 * waiters park on their node, and broadcast wakes the first of them, which
 * wakes the next as soon as it runs, before it locks the mutex again.
 * (Passing the wake-up on only once the mutex is held again -- wait morphing
 * -- deadlocks a destroy under the mutex right after a broadcast;
 * locks/model/cond.pml shows it.)
 *
 * Fits in glibc's 48-byte pthread_cond_t; all zero is a valid condvar using
 * CLOCK_REALTIME. Spurious wake-ups are possible, as POSIX allows.
 */
#ifndef PVRT_COND_H
#define PVRT_COND_H

#include <pvrt/export.h>
#include <pvrt/mutex.h>

#include <stdint.h>
#include <sys/types.h> /* clockid_t, also under strict ISO C */
#include <time.h>

PVRT_BEGIN_DECLS

/* Opaque storage (layout: locks/lk_layout.h): 48 bytes, glibc's pthread_cond_t, 8-byte aligned.
 * Only the pvrt_cond_* calls may read or write the object. */
typedef union pvrt_cond {
	uint32_t _reserved[12];
	uint64_t _align;
} pvrt_cond_t;

/* Fully braced in C: no missing-braces warning inside an enclosing initialiser. */
/* clang-format off */
#ifdef __cplusplus
#define PVRT_COND_INITIALIZER {}
#else
#define PVRT_COND_INITIALIZER { {0} }
#endif
/* clang-format on */

/* clk: CLOCK_REALTIME or CLOCK_MONOTONIC (used by pvrt_cond_timedwait); -EINVAL otherwise.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_init(pvrt_cond_t *c, clockid_t clk);
/* -EBUSY while threads wait.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_destroy(pvrt_cond_t *c);
/* Unlock m, wait for a signal or broadcast, lock m again (also after a spurious wake-up).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_wait(pvrt_cond_t *c, pvrt_mutex_t *m);
/* abstime on the condvar's clock; -ETIMEDOUT, -EINVAL for a bad timespec.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_timedwait(pvrt_cond_t *c, pvrt_mutex_t *m, const struct timespec *abstime);
/* abstime on clk (CLOCK_REALTIME or CLOCK_MONOTONIC).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_clockwait(pvrt_cond_t *c, pvrt_mutex_t *m, clockid_t clk,
				 const struct timespec *abstime);
/* Wake one waiter if any (the one that will run soonest; see above).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_signal(pvrt_cond_t *c);
/* Wake every waiter queued now, one after another (see above).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_cond_broadcast(pvrt_cond_t *c);

PVRT_END_DECLS

#endif /* PVRT_COND_H */
