/* SPDX-License-Identifier: MIT */
/*
 * The private layout of the lock objects. The public headers give sized opaque storage only
 * (a union of reserved words and an 8-byte alignment member, as glibc's pthread types); what
 * lives where is this file's, and may change between versions without an ABI change as long as
 * it fits. Three things are ABI and are checked below: the size, the alignment, and the fields
 * the public static initialisers set (the mutex type at byte 16).
 *
 * The sizes are glibc's on x86-64 (mutex 40, cond 48, rwlock 56, barrier 32; aarch64's are the
 * same or larger): the preload overlays these objects on the pthread objects of unmodified
 * programs, so some fields sit where glibc keeps the ones its static initialisers set or that
 * mark an object as glibc's own (process-shared): the mutex's __kind and __owner, the cond's
 * __wrefs, the rwlock's __shared and __flags, the barrier's shared flag. The unused words are
 * room for later state (M:N's per-object state included).
 *
 * Library code converts a public pointer once, at the API boundary (lk_mutex_of, ...), and uses
 * these types everywhere below it. Only locks/ and white-box tests include this file.
 */
#ifndef PVRT_LOCKS_LK_LAYOUT_H
#define PVRT_LOCKS_LK_LAYOUT_H

#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/rwlock.h>
#include <pvrt/sem.h>

#include <stddef.h>
#include <stdint.h>

struct lk_sqnode;
struct lk_cond_node;

/* ---- mutex ---- */
typedef struct lk_mutex {
	uint32_t word;	       /* lock word and futex: LK_MUTEX_{LOCKED,WAITERS,HANDOFF,KWAITERS} */
	uint32_t count;	       /* recursion depth (recursive type) */
	int32_t owner;	       /* owner's thread id (glibc's __owner), 0 when free */
	uint16_t owner_vcpu;   /* owner's vCPU + 1, published at acquisition; 0: unknown (or
				* a vCPU number above 65534) */
	uint16_t handoff_vcpu; /* hand-off target's vCPU + 1 (0: unknown, or 0x7fff and above),
				* | 0x8000 while the target sleeps below the hard bound */
	int32_t kind;	       /* type (PVRT_MUTEX_*), at the offset of glibc's __kind */
	uint32_t handoff; /* hand-off futex: 0, the target's tid, or tid | 0x80000000: granted */
	struct lk_sqnode *spinq; /* tail of the queue of spinning waiters, or NULL */
	void *owner_ult;	 /* the owner ULT when it is one (runtime), else NULL */
} __attribute__((may_alias)) lk_mutex_t;

#define LK_MUTEX_LOCKED	  1u
#define LK_MUTEX_WAITERS  2u /* a ULT may be parked on 'word' (the runtime's futex) */
#define LK_MUTEX_HANDOFF  4u /* a starving waiter asked for the lock to be handed to it */
#define LK_MUTEX_KWAITERS 8u /* a thread may sleep in the kernel futex on 'word' */

/* ---- condition variable ---- */
typedef struct lk_cond {
	uint32_t lock;		   /* internal lock word guarding the queue (futex) */
	uint32_t clock;		   /* 0: CLOCK_REALTIME, 1: CLOCK_MONOTONIC */
	struct lk_cond_node *head; /* oldest waiter */
	struct lk_cond_node *tail;
	uint32_t refs;	      /* waiters still referring to the condvar (destroy waits for 0) */
	uint32_t qgen;	      /* the fork generation the queue belongs to (cond.c) */
	uint32_t kseq;	      /* bumped after every SIGNALED store to a kernel node */
	uint32_t glibc_wrefs; /* at glibc's __wrefs: bit 0 marks a process-shared glibc cond */
	uint32_t spare[2];
} __attribute__((may_alias)) lk_cond_t;

/* ---- reader-writer lock ---- */
typedef struct lk_rwlock {
	uint32_t state;	      /* bit 0: writer holds it; readers counted in units of 2 */
	uint32_t nrwait;      /* readers parked (or about to) */
	uint32_t rseq;	      /* futex readers park on */
	uint32_t wseq;	      /* futex writers park on */
	uint32_t nwwait;      /* writers parked (or about to) */
	uint32_t writer_vcpu; /* writer's vCPU + 1, published at acquisition */
	int32_t writer;	      /* writer's thread id (glibc's __cur_writer) */
	int32_t shared;	      /* glibc's __shared: nonzero marks a process-shared glibc rwlock */
	uint32_t spare[4];
	uint32_t flags; /* preference, at glibc's __flags */
	uint32_t spare2;
} __attribute__((may_alias)) lk_rwlock_t;

/* ---- barrier ---- */
typedef struct lk_barrier {
	uint32_t count;	 /* threads per round */
	uint32_t inside; /* threads inside pvrt_barrier_wait (destroy waits for 0) */
	uint32_t spare0;
	int32_t shared; /* glibc's 'shared': nonzero marks a process-shared glibc barrier */
	/* One word, so an arrival reads the round and counts itself in one atomic step
	 * (barrier.c): low half the arrivals of this round; high half (the futex waiters
	 * park on, little-endian) the round number << 2 | the kinds of waiters asleep. */
	union {
		uint64_t state;
		uint32_t half[2];
	};
	uint32_t spare[2];
} __attribute__((may_alias)) lk_barrier_t;

/* ---- semaphore ---- */
typedef struct lk_sem {
	uint32_t value; /* the count; the futex waiters park on */
	uint32_t nwait; /* waiters parked (or about to) */
	uint32_t spare[2];
} __attribute__((may_alias)) lk_sem_t;

/* Every layout fits its storage, with the storage's alignment, and the initialisers' fields are
 * where the public unions put them. */
#define LK_LAYOUT_FITS(lk, pub)                                                                    \
	_Static_assert(sizeof(lk) == sizeof(pub), #lk " fills " #pub);                             \
	_Static_assert(_Alignof(lk) <= _Alignof(pub), #lk " alignment")
LK_LAYOUT_FITS(lk_mutex_t, pvrt_mutex_t);
LK_LAYOUT_FITS(lk_cond_t, pvrt_cond_t);
LK_LAYOUT_FITS(lk_rwlock_t, pvrt_rwlock_t);
LK_LAYOUT_FITS(lk_barrier_t, pvrt_barrier_t);
LK_LAYOUT_FITS(lk_sem_t, pvrt_sem_t);
#undef LK_LAYOUT_FITS
_Static_assert(offsetof(lk_mutex_t, kind) == offsetof(pvrt_mutex_t, _s._kind),
	       "the initialisers' type field");
_Static_assert(offsetof(lk_mutex_t, kind) == 16, "glibc's __kind");
_Static_assert(offsetof(lk_mutex_t, owner) == 8, "glibc's __owner");
_Static_assert(offsetof(lk_cond_t, glibc_wrefs) == 36, "glibc's __wrefs");
_Static_assert(offsetof(lk_rwlock_t, shared) == 28, "glibc's __shared");
_Static_assert(offsetof(lk_rwlock_t, flags) == 48, "glibc's __flags");
_Static_assert(offsetof(lk_barrier_t, shared) == 12, "glibc's barrier 'shared'");

/* The public object's storage as its layout. The library reaches the objects through these
 * types only, never through the public unions' members; the types are may_alias all the same,
 * since the program initialised the object as its own type (or as glibc's, under the preload). */
static inline lk_mutex_t *lk_mutex_of(pvrt_mutex_t *m)
{
	return (lk_mutex_t *)(void *)m;
}
static inline lk_cond_t *lk_cond_of(pvrt_cond_t *c)
{
	return (lk_cond_t *)(void *)c;
}
static inline lk_rwlock_t *lk_rwlock_of(pvrt_rwlock_t *rw)
{
	return (lk_rwlock_t *)(void *)rw;
}
static inline lk_barrier_t *lk_barrier_of(pvrt_barrier_t *b)
{
	return (lk_barrier_t *)(void *)b;
}
static inline lk_sem_t *lk_sem_of(pvrt_sem_t *s)
{
	return (lk_sem_t *)(void *)s;
}

#endif /* PVRT_LOCKS_LK_LAYOUT_H */
