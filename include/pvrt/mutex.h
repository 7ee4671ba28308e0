/* SPDX-License-Identifier: MIT */
/*
 * pvrt_mutex: a hint-aware mutex for ULTs and plain threads.
 *
 * Waiters spin (bounded; queued so that only the first spins on the lock
 * word) only while the owner's vCPU runs; when the hint says it is preempted
 * they stop at once and park. Unlock wakes one waiter. A waiter that keeps losing is handed the
 * lock directly (see locks/README.md for the bound).
 *
 * The object fits in (and the preload library overlays it on) glibc's 40-byte
 * pthread_mutex_t: the type sits where glibc keeps __kind, so glibc's static
 * initialisers (all zero; PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, ...) are
 * valid pvrt mutexes of the same type. An all-zero object is an unlocked
 * normal mutex.
 *
 * Functions return 0 or a negative errno.
 */
#ifndef PVRT_MUTEX_H
#define PVRT_MUTEX_H

#include <pvrt/export.h>

#include <stdint.h>
#include <sys/types.h> /* clockid_t, also under strict ISO C */
#include <time.h>

PVRT_BEGIN_DECLS

/* Types: the values of glibc's PTHREAD_MUTEX_{TIMED,RECURSIVE,ERRORCHECK,ADAPTIVE}_NP. */
enum {
	PVRT_MUTEX_NORMAL = 0,	   /* relocking by the owner deadlocks; no owner checks */
	PVRT_MUTEX_RECURSIVE = 1,  /* owner may relock; unlock by a non-owner is -EPERM */
	PVRT_MUTEX_ERRORCHECK = 2, /* relock is -EDEADLK; unlock by a non-owner is -EPERM */
	PVRT_MUTEX_ADAPTIVE = 3,   /* same as NORMAL (pvrt always spins adaptively) */
};

/*
 * Opaque storage: the layout is the library's own (locks/lk_layout.h) and may change between
 * versions. What is ABI: the size (40 bytes, glibc's pthread_mutex_t on x86-64), the 8-byte
 * alignment, and the type at byte 16, which the initialisers below set. Only the pvrt_mutex_*
 * calls may read or write the object.
 */
typedef union pvrt_mutex {
	struct {
		uint32_t _reserved0[4];
		int32_t _kind; /* PVRT_MUTEX_* (where glibc keeps __kind) */
		uint32_t _reserved1[5];
	} _s;
	uint64_t _align;
} pvrt_mutex_t;

/* Static initialisers (C, and C++ from C++11). */
/* clang-format off */
#ifdef __cplusplus
#define PVRT_MUTEX_INITIALIZER {}
#else
#define PVRT_MUTEX_INITIALIZER { { {0}, 0, {0} } }
#endif
#define PVRT_RECURSIVE_MUTEX_INITIALIZER { { {0}, PVRT_MUTEX_RECURSIVE, {0} } }
#define PVRT_ERRORCHECK_MUTEX_INITIALIZER { { {0}, PVRT_MUTEX_ERRORCHECK, {0} } }
/* clang-format on */

/* type: PVRT_MUTEX_*; -EINVAL otherwise.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_init(pvrt_mutex_t *m, int type);
/* -EBUSY if locked.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_destroy(pvrt_mutex_t *m);
/* -EDEADLK (errorcheck relock), -EAGAIN (recursion count overflow).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_lock(pvrt_mutex_t *m);
/* -EBUSY when held (also by the caller, unless recursive).
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_trylock(pvrt_mutex_t *m);
/* Lock before the absolute time abstime on clk (CLOCK_REALTIME or CLOCK_MONOTONIC):
 * -ETIMEDOUT, or -EINVAL for a bad clock or a bad timespec when the call has to wait.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_timedlock(pvrt_mutex_t *m, clockid_t clk, const struct timespec *abstime);
/* -EPERM when a recursive or errorcheck mutex is not held by the caller.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_mutex_unlock(pvrt_mutex_t *m);

PVRT_END_DECLS

#endif /* PVRT_MUTEX_H */
