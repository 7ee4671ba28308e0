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
 * pthread_mutex_t: 'kind' sits where glibc keeps __kind, so glibc's static
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

struct pvrt_spinq_node; /* private to the library */

typedef struct pvrt_mutex {
	uint32_t word;	     /* lock word and futex: PVRT_MUTEX_{LOCKED,WAITERS,HANDOFF,KWAITERS} */
	uint32_t count;	     /* recursion depth (recursive type) */
	int32_t owner;	     /* owner's thread id (glibc's __owner), 0 when free */
	uint16_t owner_vcpu; /* owner's vCPU + 1, published at acquisition; 0: unknown (or
			      * a vCPU number above 65534) */
	uint16_t handoff_vcpu; /* hand-off target's vCPU + 1 */
	int32_t kind;	       /* type, at the offset of glibc's __kind */
	uint32_t handoff; /* hand-off futex: 0, the target's tid, or tid | 0x80000000: granted */
	struct pvrt_spinq_node *spinq; /* tail of the queue of spinning waiters, or NULL */
	void *owner_ult;	       /* the owner ULT when it is one (runtime), else NULL */
} pvrt_mutex_t;

#define PVRT_MUTEX_LOCKED   1u
#define PVRT_MUTEX_WAITERS  2u /* a ULT may be parked on 'word' (the runtime's futex) */
#define PVRT_MUTEX_HANDOFF  4u /* a starving waiter asked for the lock to be handed to it */
#define PVRT_MUTEX_KWAITERS 8u /* a thread may sleep in the kernel futex on 'word' */

/* Static initialisers (C and C++17: positional, every field, as -Wextra wants). */
#define PVRT_MUTEX_INITIALIZER PVRT_ZERO_INITIALIZER
#define PVRT_RECURSIVE_MUTEX_INITIALIZER                                                           \
	{                                                                                          \
		0, 0, 0, 0, 0, PVRT_MUTEX_RECURSIVE, 0, 0, 0                                       \
	}
#define PVRT_ERRORCHECK_MUTEX_INITIALIZER                                                          \
	{                                                                                          \
		0, 0, 0, 0, 0, PVRT_MUTEX_ERRORCHECK, 0, 0, 0                                      \
	}

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
