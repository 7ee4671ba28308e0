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

/*
 * Waiters spin up to RT_LOCK_SPIN_NS, then sleep in the kernel. A bound in time, not in pauses
 * (a pause costs from a few ns to ~100): sections are short, but one holds a futex bucket across
 * a context switch, which with per-ULT TLS and no FSGSBASE loads the thread pointer with a
 * system call (3-5 us on a PVM guest); a sleep costs the sleeper the wake-up of an idle vCPU
 * (80-90 us median there, BM_wake_latency/futex_pinned). With 128 pauses, M:N barrier rounds at
 * two ULTs per worker slept in the kernel three times a round and ran 1.6x slower.
 */
#define RT_LOCK_SPIN_NS 20000ull

__attribute__((noinline)) static void rt_lock_slow(struct rt_lock *l)
{
	uint64_t deadline = 0;
	for (unsigned i = 1;; i++) {
		os_cpu_relax();
		if (__atomic_load_n(&l->v, __ATOMIC_RELAXED) == 0 && os_lock_try(&l->v))
			return;
		if (i % 64)
			continue;
		uint64_t now = os_now_ns(); /* a clock read every 64 pauses: the vDSO, no call */
		if (!deadline)
			deadline = now + RT_LOCK_SPIN_NS;
		else if (now >= deadline)
			break;
	}
	os_lock_contended(&l->v, 0, os_lock_ksleep);
}

static inline void rt_lock_acquire(struct rt_lock *l)
{
	if (__builtin_expect(!os_lock_try(&l->v), 0))
		rt_lock_slow(l);
}

static inline void rt_lock_release(struct rt_lock *l)
{
	os_unlock(&l->v);
}

#endif /* PVRT_RUNTIME_LOCK_H */
