/* SPDX-License-Identifier: MIT */
/*
 * pvrt_rwlock: reader-writer lock. Nobody spins on a writer whose vCPU is
 * preempted. Preference as glibc offers: readers (default), or writers
 * (glibc's PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: new readers wait
 * while a writer waits, so a reader must not relock recursively).
 *
 * Fits in glibc's 56-byte pthread_rwlock_t (the preference where glibc keeps
 * __flags, so glibc's static initialisers work); all zero is a valid rwlock.
 */
#ifndef PVRT_RWLOCK_H
#define PVRT_RWLOCK_H

#include <pvrt/export.h>

#include <stdint.h>
#include <sys/types.h> /* clockid_t, also under strict ISO C */
#include <time.h>

PVRT_BEGIN_DECLS

enum {
	PVRT_RWLOCK_PREFER_READER = 0,
	PVRT_RWLOCK_PREFER_WRITER = 1, /* as in glibc: behaves like PREFER_READER */
	PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE = 2,
};

/* Opaque storage (layout: locks/lk_layout.h): 56 bytes, glibc's pthread_rwlock_t, 8-byte
 * aligned. Only the pvrt_rwlock_* calls may read or write the object. */
typedef union pvrt_rwlock {
	uint32_t _reserved[14];
	uint64_t _align;
} pvrt_rwlock_t;

/* Fully braced in C: no missing-braces warning inside an enclosing initialiser. */
/* clang-format off */
#ifdef __cplusplus
#define PVRT_RWLOCK_INITIALIZER {}
#else
#define PVRT_RWLOCK_INITIALIZER { {0} }
#endif
/* clang-format on */

/* preference: PVRT_RWLOCK_PREFER_*; -EINVAL otherwise.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_init(pvrt_rwlock_t *rw, int preference);
/* Nothing to release; as glibc's, it neither checks nor waits.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_destroy(pvrt_rwlock_t *rw);
/* -EDEADLK if the caller holds it for writing; -EAGAIN on reader count overflow.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_rdlock(pvrt_rwlock_t *rw);
/* -EBUSY when a writer holds it (or, preferring writers, waits), -EAGAIN on overflow.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_tryrdlock(pvrt_rwlock_t *rw);
/* rdlock before abstime on clk (CLOCK_REALTIME or CLOCK_MONOTONIC): -ETIMEDOUT, -EINVAL for a bad
 * clock or timespec. Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_timedrdlock(pvrt_rwlock_t *rw, clockid_t clk,
				     const struct timespec *abstime);
/* -EDEADLK if the caller holds it for writing.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_wrlock(pvrt_rwlock_t *rw);
/* -EBUSY when held.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_trywrlock(pvrt_rwlock_t *rw);
/* wrlock before abstime on clk (CLOCK_REALTIME or CLOCK_MONOTONIC): -ETIMEDOUT, -EINVAL for a bad
 * clock or timespec. Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_timedwrlock(pvrt_rwlock_t *rw, clockid_t clk,
				     const struct timespec *abstime);
/* Release a read or the write hold of the caller.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_rwlock_unlock(pvrt_rwlock_t *rw);

PVRT_END_DECLS

#endif /* PVRT_RWLOCK_H */
