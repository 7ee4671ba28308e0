/* SPDX-License-Identifier: MIT */
/*
 * The spinner queue of the mutex: an MCS-style queue of would-be spinners, the kernel's
 * optimistic spin queue (OSQ) in user space. Only its head spins on the lock word; the others
 * spin each on a flag of their own node, so a contended lock's cache line is not hammered by
 * every waiter. A queued spinner may give up at any time (its budget ran out, the owner's or its
 * predecessor's vCPU was preempted) and leave the middle of the queue: the unqueue protocol is
 * the kernel's (kernel/locking/osq_lock.c), steps A-C below.
 *
 * The queue only decides who may spin; it protects no data and nothing waits on it for ever
 * (every wait in it is bounded by the caller's give-up test), so the lock's correctness never
 * depends on it: a spinner that gives up parks on the lock word as any waiter.
 *
 * Nodes are per kernel thread and type-stable: never freed, only recycled through a pool when
 * their thread exits (spinq.c). Unqueueing reads a predecessor that may have just left (the
 * kernel relies on the same with its per-CPU nodes); such a read must hit a node, never freed or
 * reused memory, and a compare-and-swap on a recycled node can only succeed if that node links
 * to us, i.e. is our real predecessor. A ULT uses its worker's node: it never switches away while
 * queued (the mutex leaves the queue before yielding), so no other ULT of that worker can queue
 * with the same node meanwhile.
 *
 * Every queue operation is sequentially consistent, as the kernel's xchg/cmpxchg are fully
 * ordered: the node fields a thread writes before linking itself are visible to whoever reaches
 * the node through 'tail' or a 'next' pointer, and step A/B's load-CAS pairs need no weaker
 * reasoning. These run only on the contended path.
 */
#ifndef PVRT_LOCKS_SPINQ_H
#define PVRT_LOCKS_SPINQ_H

#include "lk.h"

#include <stdbool.h>
#include <stdint.h>

struct pvrt_spinq_node {
	struct pvrt_spinq_node *next; /* successor, set by it when it queues */
	struct pvrt_spinq_node *prev; /* predecessor; rewritten when that one leaves */
	uint32_t locked;	      /* set by the predecessor leaving: we are the head */
	uint32_t vcpu1;		      /* our vCPU + 1 while queued (0 unknown): for the successor */
	struct pvrt_spinq_node *pool; /* free-list link (spinq.c) */
} __attribute__((aligned(64)));

/* The calling kernel thread's node (allocated on first use); NULL when out of memory. */
struct pvrt_spinq_node *lk_spinq_node_slow(void);
extern __thread struct pvrt_spinq_node *lk_spinq_mine __attribute__((tls_model("initial-exec")));
static inline struct pvrt_spinq_node *lk_spinq_node(void)
{
	struct pvrt_spinq_node *n = lk_spinq_mine;
	return lk_likely(n != NULL) ? n : lk_spinq_node_slow();
}

#define SQ_LOAD(p)     __atomic_load_n(p, __ATOMIC_SEQ_CST)
#define SQ_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)
#define SQ_XCHG(p, v)  __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST)
#define SQ_CAS(p, e, v)                                                                            \
	__atomic_compare_exchange_n(p, e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#define SQ_LOAD_RELAXED(p) __atomic_load_n(p, __ATOMIC_RELAXED)

/*
 * Wait until n is the successor of nothing (the tail moved back to 'prev', or to empty when
 * prev is NULL) -- returns NULL -- or until a successor has linked itself to n, which is then
 * detached from n and returned. Bounded: a successor that swapped itself into the tail links
 * itself right away.
 */
static inline struct pvrt_spinq_node *lk_spinq_wait_next(struct pvrt_spinq_node **tail,
							 struct pvrt_spinq_node *n,
							 struct pvrt_spinq_node *prev)
{
	for (;;) {
		struct pvrt_spinq_node *e = n;
		if (SQ_LOAD(tail) == n && SQ_CAS(tail, &e, prev))
			return NULL; /* nobody behind us: the queue ends at prev now */
		if (SQ_LOAD(&n->next)) {
			struct pvrt_spinq_node *next = SQ_XCHG(&n->next, NULL);
			if (next)
				return next;
		}
		pvrt_cpu_relax();
	}
}

/*
 * Queue n and wait to become the head. give_up(arg) is polled while waiting (it must become true
 * within a bounded time); the wait also ends when the predecessor's vCPU is preempted, since the
 * queue cannot move past a spinner that does not run. Returns true as the head (call
 * lk_spinq_unlock when done spinning), false after leaving the queue.
 */
static inline bool lk_spinq_lock(struct pvrt_spinq_node **tail, struct pvrt_spinq_node *n,
				 uint32_t vcpu1, pvhint_t *h, bool (*give_up)(void *), void *arg)
{
	SQ_STORE(&n->next, NULL);
	SQ_STORE(&n->locked, 0);
	SQ_STORE(&n->vcpu1, vcpu1);
	struct pvrt_spinq_node *prev = SQ_XCHG(tail, n);
	if (!prev)
		return true;
	SQ_STORE(&n->prev, prev);
	SQ_STORE(&prev->next, n);

	for (;;) {
		if (SQ_LOAD(&n->locked))
			return true;
		/* Relaxed: the predecessor's vCPU is a hint; a stale value costs one decision. */
		struct pvrt_spinq_node *p = SQ_LOAD_RELAXED(&n->prev);
		if (give_up(arg) || lk_vcpu1_preempted(h, SQ_LOAD_RELAXED(&p->vcpu1)))
			break;
		pvrt_cpu_relax();
	}

	/* Step A: unlink from the predecessor, unless it is handing the head to us right now. */
	for (;;) {
		struct pvrt_spinq_node *e = n;
		if (SQ_LOAD(&prev->next) == n && SQ_CAS(&prev->next, &e, NULL))
			break;
		/* The predecessor took n off its 'next' to make us the head: we are. */
		if (SQ_LOAD(&n->locked))
			return true;
		pvrt_cpu_relax();
		/* It may itself have left and relinked us to its own predecessor. */
		prev = SQ_LOAD(&n->prev);
	}
	/* Step B: nobody points at n now; find our successor, or move the tail back to prev. */
	struct pvrt_spinq_node *next = lk_spinq_wait_next(tail, n, prev);
	if (!next)
		return false;
	/* Step C: link the successor to our predecessor. */
	SQ_STORE(&next->prev, prev);
	SQ_STORE(&prev->next, next);
	return false;
}

/* The head is done spinning: make the next node the head. */
static inline void lk_spinq_unlock(struct pvrt_spinq_node **tail, struct pvrt_spinq_node *n)
{
	struct pvrt_spinq_node *e = n;
	if (SQ_CAS(tail, &e, NULL))
		return; /* alone */
	struct pvrt_spinq_node *next = SQ_XCHG(&n->next, NULL);
	if (!next)
		next = lk_spinq_wait_next(tail, n, NULL);
	if (next)
		SQ_STORE(&next->locked, 1);
}

#endif /* PVRT_LOCKS_SPINQ_H */
