/* SPDX-License-Identifier: MIT */
/*
 * pvrt_cond: a FIFO of waiter nodes (on the waiters' stacks) under a small
 * internal lock; each waiter parks on its own node.
 *
 * Node states: WAITING (queued), CHAINED (taken off the queue by signal or
 * broadcast; a SIGNALED store is coming), SIGNALED. Only the queue owner (the
 * internal lock holder) moves a node out of WAITING, so a waiter whose wait
 * times out can tell under the lock whether it is still queued (then it
 * leaves with ETIMEDOUT) or already being woken (then it waits for the wake,
 * which is at most one mutex hand-over away, and returns 0).
 *
 * Broadcast detaches the queue, links it through 'chain' and signals only the
 * first node. A woken waiter signals its chain successor after it holds the
 * mutex again, so the waiters of a broadcast take the mutex one after another
 * instead of all waking into it at once (wait morphing without requeue).
 *
 * Destroy: 'refs' counts waiters that may still touch the condvar; destroy
 * waits until they are gone, as glibc's does, so a condvar may be destroyed
 * right after a broadcast.
 */
#define _GNU_SOURCE
#include <pvrt/cond.h>

#include "lk.h"
#include "lk_cond.h"

#include <errno.h>
#include <stddef.h>

enum { WAITING = 0, CHAINED = 1, SIGNALED = 2 };
#define C	   PVRT_LOCK_COND
#define DESTROYING 0x80000000u

struct pvrt_cond_node {
	uint32_t state;
	struct pvrt_cond_node *next, *prev;
	struct pvrt_cond_node *chain; /* broadcast: the waiter to signal after us */
};

_Static_assert(sizeof(pvrt_cond_t) == 48, "pvrt_cond_t must fit glibc's pthread_cond_t");
_Static_assert(offsetof(pvrt_cond_t, glibc_wrefs) == 36, "glibc's __wrefs offset");

/* 'refs' lives in the first padding word (offset 24). */
static inline uint32_t *refs_of(pvrt_cond_t *c)
{
	return &c->pad[0];
}

int pvrt_cond_init(pvrt_cond_t *c, clockid_t clk)
{
	if (!lk_valid_clock(clk))
		return -EINVAL;
	*c = (pvrt_cond_t){.clock = clk == CLOCK_MONOTONIC ? 1 : 0};
	return 0;
}

int pvrt_cond_destroy(pvrt_cond_t *c)
{
	lk_ilock(&c->lock);
	bool busy = c->head != NULL;
	lk_iunlock(&c->lock);
	if (busy)
		return -EBUSY;
	uint32_t *refs = refs_of(c);
	for (;;) {
		/* Acquire: pairs with the waiters' release decrement (their accesses are done). */
		uint32_t r = __atomic_load_n(refs, __ATOMIC_ACQUIRE);
		if ((r & ~DESTROYING) == 0)
			return 0;
		if (!(r & DESTROYING) &&
		    !__atomic_compare_exchange_n(refs, &r, r | DESTROYING, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		lk_park(refs, r | DESTROYING, CLOCK_MONOTONIC, NULL, C);
	}
}

/* 'head' is also peeked without the queue lock (signal/broadcast fast path): store atomically. */
static inline void set_head(pvrt_cond_t *c, struct pvrt_cond_node *n)
{
	/* Relaxed: the peek only decides whether to take the queue lock; see pvrt_cond_signal. */
	__atomic_store_n(&c->head, n, __ATOMIC_RELAXED);
}

static void put_ref(pvrt_cond_t *c)
{
	/* Release: our last accesses to the condvar happen-before destroy's return. */
	uint32_t r = __atomic_fetch_sub(refs_of(c), 1, __ATOMIC_RELEASE);
	if (r == (DESTROYING | 1))
		lk_wake(refs_of(c), INT32_MAX);
}

static void signal_node(struct pvrt_cond_node *n)
{
	/* Release: the chain link (written under the queue lock) and the signaller's writes are
	 * visible to the woken waiter. After this store the node may vanish (its waiter may see
	 * SIGNALED and return): the wake on a dead address is harmless, as with any futex. */
	__atomic_store_n(&n->state, SIGNALED, __ATOMIC_RELEASE);
	lk_wake(&n->state, 1);
}

int lk_cond_wait(pvrt_cond_t *c, void *m, lk_mutex_op unlock, lk_mutex_op lock, clockid_t clk,
		 const struct timespec *abs)
{
	if (abs && !lk_valid_timespec(abs))
		return -EINVAL;
	struct pvrt_cond_node n = {.state = WAITING};

	lk_ilock(&c->lock);
	n.prev = c->tail;
	if (c->tail)
		c->tail->next = &n;
	else
		set_head(c, &n);
	c->tail = &n;
	/* Relaxed: destroy reads it after taking the queue lock or with acquire (put_ref). */
	__atomic_fetch_add(refs_of(c), 1, __ATOMIC_RELAXED);
	lk_iunlock(&c->lock);

	int err = unlock(m);
	if (err) {
		/* Not the owner (errorcheck/recursive): leave as if never queued, unless a
		 * signal already took us, in which case pass it on to the next waiter. */
		lk_ilock(&c->lock);
		bool queued = __atomic_load_n(&n.state, __ATOMIC_RELAXED) == WAITING;
		if (queued) {
			if (n.prev)
				n.prev->next = n.next;
			else
				set_head(c, n.next);
			if (n.next)
				n.next->prev = n.prev;
			else
				c->tail = n.prev;
		}
		lk_iunlock(&c->lock);
		if (!queued) {
			while (__atomic_load_n(&n.state, __ATOMIC_ACQUIRE) != SIGNALED)
				lk_park(&n.state, CHAINED, CLOCK_MONOTONIC, NULL, C);
			if (n.chain)
				signal_node(n.chain);
			pvrt_cond_signal(c);
		}
		put_ref(c);
		return err;
	}

	int result = 0;
	for (;;) {
		/* Acquire: pairs with signal_node's release store. */
		uint32_t s = __atomic_load_n(&n.state, __ATOMIC_ACQUIRE);
		if (s == SIGNALED)
			break;
		int r = abs && abs->tv_sec < 0 ? -ETIMEDOUT : lk_park(&n.state, s, clk, abs, C);
		if (r != -ETIMEDOUT)
			continue;
		lk_ilock(&c->lock);
		if (__atomic_load_n(&n.state, __ATOMIC_RELAXED) == WAITING) {
			if (n.prev)
				n.prev->next = n.next;
			else
				set_head(c, n.next);
			if (n.next)
				n.next->prev = n.prev;
			else
				c->tail = n.prev;
			result = -ETIMEDOUT;
		}
		lk_iunlock(&c->lock);
		if (result)
			break;
		abs = NULL; /* being woken: wait for it without a limit */
		clk = CLOCK_MONOTONIC;
	}
	put_ref(c);

	lk_stat(C, LK_ACQ);
	int lr = lock(m);
	/* Wait morphing: only now, holding the mutex, let the next broadcast waiter run. */
	if (result == 0 && n.chain)
		signal_node(n.chain);
	return lr ? lr : result;
}

static int mutex_unlock_op(void *m)
{
	return pvrt_mutex_unlock(m);
}

static int mutex_lock_op(void *m)
{
	return pvrt_mutex_lock(m);
}

int pvrt_cond_wait(pvrt_cond_t *c, pvrt_mutex_t *m)
{
	return lk_cond_wait(c, m, mutex_unlock_op, mutex_lock_op, CLOCK_MONOTONIC, NULL);
}

int pvrt_cond_timedwait(pvrt_cond_t *c, pvrt_mutex_t *m, const struct timespec *abstime)
{
	if (!abstime)
		return -EINVAL;
	clockid_t clk =
	    __atomic_load_n(&c->clock, __ATOMIC_RELAXED) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
	return lk_cond_wait(c, m, mutex_unlock_op, mutex_lock_op, clk, abstime);
}

int pvrt_cond_clockwait(pvrt_cond_t *c, pvrt_mutex_t *m, clockid_t clk,
			const struct timespec *abstime)
{
	if (!lk_valid_clock(clk) || !abstime)
		return -EINVAL;
	return lk_cond_wait(c, m, mutex_unlock_op, mutex_lock_op, clk, abstime);
}

int pvrt_cond_signal(pvrt_cond_t *c)
{
	/* Unlocked peek (relaxed): an empty queue needs no lock; a waiter that queues after
	 * this load started waiting after the signal, so missing it is correct. */
	if (!__atomic_load_n(&c->head, __ATOMIC_RELAXED))
		return 0;
	lk_ilock(&c->lock);
	struct pvrt_cond_node *n = c->head;
	if (n) {
		set_head(c, n->next);
		if (n->next)
			n->next->prev = NULL;
		else
			c->tail = NULL;
		n->chain = NULL;
		__atomic_store_n(&n->state, CHAINED, __ATOMIC_RELAXED);
	}
	lk_iunlock(&c->lock);
	if (n)
		signal_node(n);
	return 0;
}

int pvrt_cond_broadcast(pvrt_cond_t *c)
{
	if (!__atomic_load_n(&c->head, __ATOMIC_RELAXED))
		return 0;
	lk_ilock(&c->lock);
	struct pvrt_cond_node *first = c->head;
	for (struct pvrt_cond_node *n = first; n; n = n->next) {
		n->chain = n->next;
		__atomic_store_n(&n->state, CHAINED, __ATOMIC_RELAXED);
	}
	set_head(c, NULL);
	c->tail = NULL;
	lk_iunlock(&c->lock);
	if (first)
		signal_node(first);
	return 0;
}
