/* SPDX-License-Identifier: MIT */
/*
 * The mutex's uncontended paths, inline: pvrt_mutex_lock/unlock (mutex.c) and the preload's
 * pthread_mutex_lock/unlock (preload.c) expand them in place, so an uncontended lock and unlock
 * through the preload costs one function call each, not two (callgrind, lock+unlock of a
 * normal mutex through the preload: 122 instructions before, glibc's own 66). Everything else
 * (contention, recursive and errorcheck types, timed locks) is mutex.c's.
 */
#ifndef PVRT_LOCKS_MUTEX_FAST_H
#define PVRT_LOCKS_MUTEX_FAST_H

#include <pvrt/mutex.h>

#include "lk.h"

#if defined(__GLIBC__) && __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif

#define LOCKED	 LK_MUTEX_LOCKED
#define WAITERS	 LK_MUTEX_WAITERS
#define HANDOFF	 LK_MUTEX_HANDOFF
#define KWAITERS LK_MUTEX_KWAITERS

/* mutex.c: the contended lock of any type, and the contended release (waiters, hand-off). */
int lk_mutex_lock_slow(lk_mutex_t *m);
void lk_mutex_release_slow(lk_mutex_t *m);

static inline int mtype(const lk_mutex_t *m)
{
	/* Relaxed: the type is written by init before the mutex is shared. */
	return __atomic_load_n(&m->kind, __ATOMIC_RELAXED) & 3;
}

/* A normal or adaptive type (the types without owner checks), from the kind word itself: the
 * preload loads it once for both its own test and this one. */
static inline bool kind_plain(int32_t kind)
{
	int t = kind & 3;
	return t == PVRT_MUTEX_NORMAL || t == PVRT_MUTEX_ADAPTIVE;
}

/* A normal or adaptive mutex? */
static inline bool mtype_plain(const lk_mutex_t *m)
{
	/* Relaxed: as mtype. */
	return kind_plain(__atomic_load_n(&m->kind, __ATOMIC_RELAXED));
}

/* vCPU + 1 as the 16-bit fields keep it: 0 (unknown) beyond their range. */
static inline uint16_t vcpu16(uint32_t v1)
{
	return v1 <= UINT16_MAX ? (uint16_t)v1 : 0;
}

static inline void publish_owner(lk_mutex_t *m, int tid, struct pvrt_ult *u)
{
	/* Relaxed: other threads read owner, owner_vcpu and owner_ult only as hints (spinners),
	 * and the owner checks of recursive/errorcheck mutexes compare with the reader's own tid,
	 * which only the reader itself stores. */
	__atomic_store_n(&m->owner, tid, __ATOMIC_RELAXED);
	__atomic_store_n(&m->owner_vcpu, vcpu16(lk_self_vcpu1(u)), __ATOMIC_RELAXED);
	/* Only ULT owners set it, and they clear it at unlock: a thread neither stores nor reads
	 * it. In an array of structures that embed a mutex (48-byte cells, as PARSEC's) it is
	 * often on the next cache line, the neighbour's, which another thread writes: even a
	 * load there costs a coherence miss per acquisition (parsec_fluidanimate). (A ULT's lock
	 * unlocked by a plain thread leaves it set: a stale hint for a ULT spinner's yield-to,
	 * which checks the ULT it names; descriptors are type-stable.) */
	if (u)
		__atomic_store_n(&m->owner_ult, (void *)u, __ATOMIC_RELAXED);
}

/*
 * One kernel thread in the process and it runs no ULTs: nothing can race with us, so the
 * uncontended paths need no locked instruction, as glibc's own since 2.34 (its
 * lll_mutex_lock_optimized): a single-threaded program under the preload (sqlite3, a script
 * interpreter, a tool built with -pthread) paid 15 ns per lock+unlock here against glibc's 5.
 * __libc_single_threaded turns false at the first pthread_create (the runtime's workers,
 * sysmon and spawner are pthreads) and never back (glibc 2.36 leaves it false even in the
 * fork child of a multi-threaded process). A thread that is a worker may switch between
 * ULTs, and M:N preemption could land between the load and the store, so a worker never
 * takes this path. As with glibc's, threads made with raw clone() are not counted: such a
 * program must not share these mutexes between them. A signal handler that locks a mutex
 * its thread holds deadlocks with glibc too; one that locks and unlocks a free one leaves
 * it free.
 */
static inline bool lk_alone(const struct rt_worker *w)
{
#if defined(__GLIBC__) && __has_include(<sys/single_threaded.h>)
	return __libc_single_threaded && w == NULL;
#else
	(void)w;
	return false;
#endif
}

/* w: rt_tls_worker, read once per call by the caller (only whether it is NULL matters, which a
 * switch to another worker does not change). */
static inline bool try_fast(lk_mutex_t *m, const struct rt_worker *w)
{
	uint32_t z = 0;
	if (lk_alone(w)) {
		/* No other thread can read the word; the signal fence keeps the compiler from
		 * moving the critical section before the store (a handler of this thread is
		 * the only other observer). Plain loads and stores on x86. */
		if (__atomic_load_n(&m->word, __ATOMIC_RELAXED) != 0)
			return false;
		__atomic_store_n(&m->word, LOCKED, __ATOMIC_RELAXED);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		return true;
	}
	/* Acquire: the previous owner's critical section happens-before ours. */
	return __atomic_compare_exchange_n(&m->word, &z, LOCKED, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

static inline void release(lk_mutex_t *m, const struct rt_worker *wk)
{
	uint32_t w = LOCKED;
	if (lk_alone(wk) && __atomic_load_n(&m->word, __ATOMIC_RELAXED) == LOCKED) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST); /* see try_fast */
		__atomic_store_n(&m->word, 0, __ATOMIC_RELAXED);
		return;
	}
	/* Release: our critical section happens-before the next owner's. */
	if (lk_unlikely(!__atomic_compare_exchange_n(&m->word, &w, 0, false, __ATOMIC_RELEASE,
						     __ATOMIC_RELAXED)))
		lk_mutex_release_slow(m);
}

/* mutex.c: publish_owner for a caller on a worker (a ULT, or a worker's own context), out of
 * line so that a thread's fast path calls nothing and needs no stack frame. */
void lk_mutex_publish_worker(lk_mutex_t *m);

/*
 * pvrt_mutex_lock of a mutex whose kind word the caller has read. The per-thread words are read
 * once each: a plain thread (neither a ULT nor a worker) has both NULL, and that is all the
 * fast path asks of them.
 */
static inline int lk_mutex_lock_kind(lk_mutex_t *m, int32_t kind)
{
	struct pvrt_ult *u = rt_tls_ult;
	struct rt_worker *w = rt_tls_worker;
	if (lk_likely(kind_plain(kind) && try_fast(m, w))) {
		if (lk_likely(!u && !w))
			publish_owner(m, lk_tid(), NULL);
		else
			lk_mutex_publish_worker(m);
		lk_stat(PVRT_LOCK_MUTEX, LK_ACQ);
		return 0;
	}
	return lk_mutex_lock_slow(m);
}

/* pvrt_mutex_lock. */
static inline int lk_mutex_lock(lk_mutex_t *m)
{
	/* Relaxed: as mtype. */
	return lk_mutex_lock_kind(m, __atomic_load_n(&m->kind, __ATOMIC_RELAXED));
}

/* pvrt_mutex_unlock of a normal or adaptive mutex (the caller checks mtype_plain). */
static inline int lk_mutex_unlock_plain(lk_mutex_t *m)
{
	struct rt_worker *w = rt_tls_worker;
	__atomic_store_n(&m->owner, 0, __ATOMIC_RELAXED);
	/* A spinner between the next owner's CAS and its publish_owner() must not take us (who
	 * may exit) for the owner to yield to. Only a ULT owner set it (publish_owner), and a ULT
	 * runs on a worker (its own TLS block carries the worker word: runtime/tls.c). Outside
	 * that (an M:N primary inside pvrt_init, a ULT in sysmon's lost path) a stale owner_ult
	 * may stay: a hint that the yield-to checks (see publish_owner). */
	if (lk_unlikely(w != NULL) && lk_self_ult())
		__atomic_store_n(&m->owner_ult, NULL, __ATOMIC_RELAXED);
	release(m, w);
	return 0;
}

#endif /* PVRT_LOCKS_MUTEX_FAST_H */
