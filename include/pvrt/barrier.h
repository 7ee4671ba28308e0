/* SPDX-License-Identifier: MIT */
/*
 * pvrt_barrier: with preemption hints, arrivals spin briefly while no other
 * vCPU is preempted and the round fits on the CPUs; otherwise they park at
 * once. The last arrival wakes every thread waiter with one system call. Fits
 * in glibc's 32-byte pthread_barrier_t.
 */
#ifndef PVRT_BARRIER_H
#define PVRT_BARRIER_H

#include <pvrt/export.h>

#include <stdint.h>

PVRT_BEGIN_DECLS

/* Returned to exactly one thread of each round. Positive, so distinct from 0 and from every
 * negative errno (glibc's PTHREAD_BARRIER_SERIAL_THREAD is -1, which is -EPERM here). */
#define PVRT_BARRIER_SERIAL_THREAD 1

/* Opaque storage (layout: locks/lk_layout.h): 32 bytes, glibc's pthread_barrier_t, 8-byte
 * aligned. Only the pvrt_barrier_* calls may read or write the object. */
typedef union pvrt_barrier {
	uint32_t _reserved[8];
	uint64_t _align;
} pvrt_barrier_t;

/* count >= 1, else -EINVAL.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_barrier_init(pvrt_barrier_t *b, unsigned count);
/* Waits until the threads of the last round have left.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_barrier_destroy(pvrt_barrier_t *b);
/* PVRT_BARRIER_SERIAL_THREAD for one thread of the round, 0 for the others, or a negative
 * errno.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_barrier_wait(pvrt_barrier_t *b);

PVRT_END_DECLS

#endif /* PVRT_BARRIER_H */
