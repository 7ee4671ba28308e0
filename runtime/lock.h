/* SPDX-License-Identifier: MIT */
/*
 * A tiny kernel-thread lock for the runtime's own short critical sections (futex buckets, timer
 * heaps, descriptor pool): the OS layer's three-state futex lock (os/pvrt_os.h) with bounded
 * spinning. Nothing spins forever, and a holder whose vCPU is preempted costs waiters a park,
 * not a time slice of spinning.
 */
#ifndef PVRT_RUNTIME_LOCK_H
#define PVRT_RUNTIME_LOCK_H

#include "pvrt_os.h"

#include <stdint.h>

struct rt_lock {
	uint32_t v; /* 0 free, 1 held, 2 held with (possible) sleepers */
};

#define PVRT_LOCK_SPINS 128

static inline void rt_lock_acquire(struct rt_lock *l)
{
	os_lock(&l->v, PVRT_LOCK_SPINS);
}

static inline void rt_lock_release(struct rt_lock *l)
{
	os_unlock(&l->v);
}

#endif /* PVRT_RUNTIME_LOCK_H */
