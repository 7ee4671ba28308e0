/* SPDX-License-Identifier: MIT */
/*
 * The spinner queue of the mutex: an MCS-style queue of would-be spinners, the kernel's
 * optimistic spin queue (OSQ) in user space. Only its head spins on the lock word; the others
 * spin each on a flag of their own node, so a contended lock's cache line is not hammered by
 * every waiter. A queued spinner may give up at any time (its budget ran out, the owner's or its
 * predecessor's vCPU was preempted) and leave the middle of the queue: the unqueue protocol is
 * the kernel's (kernel/locking/osq_lock.c), steps A-C below.
 *
 * The queue only decides who may spin and protects no data, so the lock's correctness never
 * depends on it: a spinner that gives up parks on the lock word as any waiter. Waiting to become
 * the head is bounded by the caller's give-up test. The hand-shakes of leaving (steps A and B,
 * and the head's unlock) wait for a neighbour to finish the two or three stores it is in the
 * middle of; the kernel runs them with preemption off, here the neighbour may be descheduled in
 * between, so after a few polls those waits yield the CPU (a neighbour on the same CPU then
 * runs). The mutex hands the head on before it takes the lock word, so an owner never waits in
 * them (locks/mutex.c).
 *
 * Nodes are per kernel thread and type-stable: never freed, only recycled through a pool when
 * their thread exits (spinq.c). Unqueueing reads a predecessor that may have just left (the
 * kernel relies on the same with its per-CPU nodes); such a read must hit a node, never freed or
 * reused memory, and a compare-and-swap on a recycled node can only succeed if that node links
 * to us, i.e. is our real predecessor. A ULT uses its worker's node: it never switches away while
 * queued (the mutex leaves the queue before yielding, the hand-shakes yield the kernel thread,
 * not the ULT, and lk_spinq_lock/unlock hold off time-slice preemption: runtime/wait.h), so no
 * other ULT of that worker can queue with the same node meanwhile; after a switch it must fetch the
 * node again (lk_spinq_node() is a real call for that reason: a compiler may keep an inlined
 * thread-local address across the switch, and the ULT may resume on another worker).
 *
 * Fork: a node of a parent thread that was queued at fork() stays in that queue in the child,
 * owned by nobody. Each node carries the fork generation of its owner (lk_fork_gen; the child
 * moves the forking thread's own node to the new one), so a spinner whose predecessor is of an
 * older generation knows that nobody will ever hand it the head and takes it: the child spins
 * on that mutex as on any other.
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

struct lk_sqnode {
	struct lk_sqnode *next; /* successor, set by it when it queues */
	struct lk_sqnode *prev; /* predecessor; rewritten when that one leaves */
	uint32_t locked;	/* set by the predecessor leaving: we are the head */
	uint32_t vcpu1;		/* our vCPU + 1 while queued (0 unknown): for the successor */
	struct lk_sqnode *pool; /* free-list link (spinq.c) */
	uint32_t gen;		/* its thread's fork generation (lk_fork_gen) */
} __attribute__((aligned(64)));

/* The calling kernel thread's node (allocated on first use); NULL when out of memory. Not
 * inline: see the ULT note above. */
struct lk_sqnode *lk_spinq_node(void);

#define SQ_LOAD(p)     __atomic_load_n(p, __ATOMIC_SEQ_CST)
#define SQ_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)
#define SQ_XCHG(p, v)  __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST)
#define SQ_CAS(p, e, v)                                                                            \
	__atomic_compare_exchange_n(p, e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#define SQ_LOAD_RELAXED(p) __atomic_load_n(p, __ATOMIC_RELAXED)

/* A poll in a leaving hand-shake: pause, and after a while let a descheduled neighbour run.
 * The system call, not the symbol sched_yield: M:N mode interposes that with a ULT yield, and a
 * queued ULT must not switch away (see the top). */
static inline void sq_handshake_pause(unsigned *polls)
{
	if (++*polls < 64)
		os_cpu_relax();
	else
		os_yield();
}

/*
 * Wait until n is the successor of nothing (the tail moved back to 'prev', or to empty when
 * prev is NULL) -- returns NULL -- or until a successor has linked itself to n, which is then
 * detached from n and returned. A successor that swapped itself into the tail links itself
 * right away, unless it is descheduled in between (see the file comment).
 */
static inline struct lk_sqnode *lk_spinq_wait_next(struct lk_sqnode **tail, struct lk_sqnode *n,
						   struct lk_sqnode *prev)
{
	for (unsigned polls = 0;; sq_handshake_pause(&polls)) {
		struct lk_sqnode *e = n;
		if (SQ_LOAD(tail) == n && SQ_CAS(tail, &e, prev))
			return NULL; /* nobody behind us: the queue ends at prev now */
		if (SQ_LOAD(&n->next)) {
			/* Exchanged, not read: left in n->next, the successor's own step A (leaving
			 * at the same time) would still find n->next == itself, unlink from n and
			 * take n for its predecessor while we relink it elsewhere. With n->next
			 * NULL its step A fails and it waits for the new 'prev' we give it. */
			struct lk_sqnode *next = SQ_XCHG(&n->next, NULL);
			if (next)
				return next;
		}
	}
}

/*
 * Queue n and wait to become the head. give_up(arg) is polled while waiting (it must become true
 * within a bounded time); the wait also ends when the predecessor's vCPU is preempted, since the
 * queue cannot move past a spinner that does not run. Returns true as the head (call
 * lk_spinq_unlock when done spinning), false after leaving the queue.
 */
static inline bool sq_lock(struct lk_sqnode **tail, struct lk_sqnode *n, uint32_t vcpu1,
			   pvhint_t *h, bool (*give_up)(void *), void *arg)
{
	SQ_STORE(&n->next, NULL);
	SQ_STORE(&n->locked, 0);
	SQ_STORE(&n->vcpu1, vcpu1);
	struct lk_sqnode *prev = SQ_XCHG(tail, n);
	if (!prev)
		return true;
	SQ_STORE(&n->prev, prev);
	SQ_STORE(&prev->next, n);

	for (;;) {
		if (SQ_LOAD(&n->locked))
			return true;
		/* Relaxed: the predecessor's vCPU is a hint; a stale value costs one decision. */
		struct lk_sqnode *p = SQ_LOAD_RELAXED(&n->prev);
		/* A predecessor left by a parent thread at fork never moves: we are the head. */
		if (lk_unlikely(SQ_LOAD_RELAXED(&p->gen) != lk_gen()))
			return true;
		if (give_up(arg) || lk_vcpu1_preempted(h, SQ_LOAD_RELAXED(&p->vcpu1)))
			break;
		os_cpu_relax();
	}

	/* Step A: unlink from the predecessor, unless it is handing the head to us right now. */
	for (unsigned polls = 0;; sq_handshake_pause(&polls)) {
		struct lk_sqnode *e = n;
		if (SQ_LOAD(&prev->next) == n && SQ_CAS(&prev->next, &e, NULL))
			break;
		/* The predecessor took n off its 'next' to make us the head: we are. */
		if (SQ_LOAD(&n->locked))
			return true;
		/* It may itself have left and relinked us to its own predecessor. */
		prev = SQ_LOAD(&n->prev);
	}
	/* Step B: nobody points at n now; find our successor, or move the tail back to prev. */
	struct lk_sqnode *next = lk_spinq_wait_next(tail, n, prev);
	if (!next)
		return false;
	/* Step C: link the successor to our predecessor. Both are stable: prev because nothing
	 * else links to it (its 'next' was n, which step A cleared, and it waits in its own step A
	 * or spins for a 'next'), next because step B took it off n->next, so its step A fails
	 * until it reads the 'prev' stored here. */
	SQ_STORE(&next->prev, prev);
	SQ_STORE(&prev->next, next);
	return false;
}

static inline bool lk_spinq_lock(struct lk_sqnode **tail, struct lk_sqnode *n, uint32_t vcpu1,
				 pvhint_t *h, bool (*give_up)(void *), void *arg)
{
	/* Queued, a ULT is not preempted (see the top): until lk_spinq_unlock, or until it left. */
	rt_nopreempt_enter();
	if (sq_lock(tail, n, vcpu1, h, give_up, arg))
		return true;
	rt_nopreempt_leave();
	return false;
}

/* The head is done spinning: make the next node the head. */
static inline void lk_spinq_unlock(struct lk_sqnode **tail, struct lk_sqnode *n)
{
	struct lk_sqnode *e = n;
	struct lk_sqnode *next = NULL;
	if (!SQ_CAS(tail, &e, NULL)) {
		next = SQ_XCHG(&n->next, NULL);
		if (!next)
			next = lk_spinq_wait_next(tail, n, NULL);
	}
	if (next)
		SQ_STORE(&next->locked, 1);
	rt_nopreempt_leave();
}

#endif /* PVRT_LOCKS_SPINQ_H */
