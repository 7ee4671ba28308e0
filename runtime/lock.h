/* SPDX-License-Identifier: MIT */
/*
 * A tiny kernel-thread lock for the runtime's own short critical sections (futex buckets, timer
 * heaps, descriptor pool). Bounded spinning, then the kernel futex (Drepper's three-state mutex):
 * nothing spins forever, and a holder whose vCPU is preempted costs waiters a park, not a
 * time slice of spinning.
 */
#ifndef PVRT_RUNTIME_LOCK_H
#define PVRT_RUNTIME_LOCK_H

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

struct pvrt_lock {
	uint32_t v; /* 0 free, 1 held, 2 held with (possible) sleepers */
};

#define PVRT_LOCK_SPINS 128

static inline void pvrt_cpu_relax(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

void pvrt_lock_slow(struct pvrt_lock *l);

static inline void pvrt_lock_acquire(struct pvrt_lock *l)
{
	uint32_t z = 0;
	/* Acquire: the critical section reads what the previous holder wrote. */
	if (__atomic_compare_exchange_n(&l->v, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	pvrt_lock_slow(l);
}

static inline void pvrt_lock_release(struct pvrt_lock *l)
{
	/* Release: publishes the critical section; 2 means someone may sleep in the kernel. */
	if (__atomic_exchange_n(&l->v, 0, __ATOMIC_RELEASE) == 2) {
		int saved = errno; /* callers include interposed pthread functions */
		syscall(SYS_futex, &l->v, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
		errno = saved;
	}
}

#endif /* PVRT_RUNTIME_LOCK_H */
