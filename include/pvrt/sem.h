/* SPDX-License-Identifier: MIT */
/* pvrt_sem: counting semaphore (process-private), parks on the count. */
#ifndef PVRT_SEM_H
#define PVRT_SEM_H

#include <pvrt/export.h>

#include <stdint.h>
#include <sys/types.h> /* clockid_t, also under strict ISO C */
#include <time.h>

PVRT_BEGIN_DECLS

/* Opaque storage (layout: locks/lk_layout.h): 16 bytes, 8-byte aligned. Only the pvrt_sem_*
 * calls may read or write the object. */
typedef union pvrt_sem {
	uint32_t _reserved[4];
	uint64_t _align;
} pvrt_sem_t;

#define PVRT_SEM_VALUE_MAX 0x7fffffffu

/* value <= PVRT_SEM_VALUE_MAX, else -EINVAL.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_init(pvrt_sem_t *s, unsigned value);
/* Nothing to release.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_destroy(pvrt_sem_t *s);
/* -EOVERFLOW past PVRT_SEM_VALUE_MAX.
 * Context: ULT, thread, fork; not a signal handler (unlike sem_post, it may take a lock). */
PVRT_API int pvrt_sem_post(pvrt_sem_t *s);
/* Take one from the count, parking while it is 0.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_wait(pvrt_sem_t *s);
/* -EAGAIN when the count is 0.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_trywait(pvrt_sem_t *s);
/* sem_wait before abstime on clk (CLOCK_REALTIME or CLOCK_MONOTONIC): -ETIMEDOUT, -EINVAL for a bad
 * clock or timespec. Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_timedwait(pvrt_sem_t *s, clockid_t clk, const struct timespec *abstime);
/* *out = the count now.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_sem_getvalue(pvrt_sem_t *s, int *out);

PVRT_END_DECLS

#endif /* PVRT_SEM_H */
