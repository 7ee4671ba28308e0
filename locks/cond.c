/* SPDX-License-Identifier: MIT */
/*
 * pvrt_cond: a FIFO of waiter nodes (on the waiters' stacks) under a small
 * internal lock; each waiter parks on its own node.
 *
 * signal takes the queued waiter that will run soonest by the hints (within a
 * bound; see pick()), broadcast all of them.
 *
 * Node states: WAITING (queued), CHAINED (taken off the queue by signal or
 * broadcast; a SIGNALED store is coming), SIGNALED. Only the queue owner (the
 * internal lock holder) moves a node out of WAITING, so a waiter whose wait
 * times out can tell under the lock whether it is still queued (then it
 * leaves with ETIMEDOUT) or already being woken (then it waits for the wake,
 * which is at most one mutex hand-over away, and returns 0).
 *
 * Thread waiters ('kernel' nodes) sleep in the kernel futex on the condvar's
 * 'kseq' word, each with a bit of its own (FUTEX_WAIT_BITSET, the bit from the
 * node's address), and check their node's state around it. A signaller
 * stores SIGNALED and then bumps 'kseq' under the queue lock (so that destroy,
 * which takes the queue lock, cannot return between the two), and after the
 * lock wakes the node's bit. Broadcast marks every kernel node SIGNALED in one
 * lock section and wakes them all with one system call: one wake-up per
 * waiter in a row would make each waiter wait, under oversubscription, for
 * the previous one to get a CPU (each hop a scheduling delay, or a whole
 * time slice of an emulated vCPU).
 *
 * ULT nodes (which park through rt_futex) of a broadcast are linked through
 * 'chain' and only the first is signalled. A woken ULT waiter signals its
 * chain successor as soon as it is woken, before it drops its reference and
 * before it locks the mutex again, so the wake-ups ripple down the chain and
 * never depend on anyone holding the mutex.
 *
 * Destroy: 'refs' counts waiters that may still touch the condvar; destroy
 * waits until they are gone, as glibc's does, so a condvar may be destroyed
 * right after a broadcast, even by a thread that holds the mutex: every
 * chained waiter is woken by its predecessor without needing the mutex, and
 * drops its reference before it blocks on the mutex. (Passing the wake-up on
 * only once the mutex is held again, as wait morphing would, deadlocks
 * there: the chained waiters keep their references while the destroyer holds
 * the mutex the first waiter needs before it wakes the next.)
 *
 * Cancellation (the preload's pthread_cond_*wait, plain threads): the wait is
 * a cancellation point as in glibc. glibc acts on a deferred cancel only in a
 * blocking call that switched to asynchronous cancellation around its system
 * call (pthread_cancel then sends SIGCANCEL), so the waiter sleeps in the
 * kernel futex itself, asynchronously cancellable only across that call. A
 * cleanup handler (pthread_cleanup_push) then leaves the queue, passes on a
 * signal the waiter already consumed, and locks the mutex again before the
 * application's cleanup handlers run, as POSIX requires.
 */
#define _GNU_SOURCE
#include <pvrt/cond.h>

#include "lk.h"
#include "lk_wait.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <unistd.h>

enum { WAITING = 0, CHAINED = 1, SIGNALED = 2 };
#define C	   PVRT_LOCK_COND
#define DESTROYING 0x80000000u

struct lk_cond_node {
	uint32_t state;
	bool kernel;	 /* a thread: sleeps in the kernel futex on 'kseq', bit 'kbit' */
	uint8_t skipped; /* times a signal passed over it (under the queue lock) */
	bool herd;	 /* kernel nodes: woken by a broadcast together with other threads */
	uint32_t vcpu1;	 /* a thread waiter's vCPU + 1 when it queued; 0: a ULT, or unknown */
	uint32_t kbit;	 /* kernel nodes: the futex bitset it sleeps with */
	struct lk_cond_node *next, *prev;
	struct lk_cond_node *chain; /* broadcast: the waiter to signal after us */
};

/*
 * Fork: in a child, the queue's nodes are the parent's waiters, which do not exist there, on
 * stacks the child's new threads reuse (glibc recycles them): they must not be signalled, nor
 * even read. 'qgen' is the fork generation (lk_fork_gen) the queue
 * belongs to; the first queue operation of a later generation empties it, with the references
 * of those waiters, so signals and broadcasts reach the child's own waiters only.
 */
static void queue_lock(lk_cond_t *c)
{
	lk_ilock(&c->lock, C);
	uint32_t gen = lk_gen();
	if (lk_unlikely(c->qgen != gen)) {
		/* Relaxed: as set_head. */
		__atomic_store_n(&c->head, NULL, __ATOMIC_RELAXED);
		c->tail = NULL;
		__atomic_store_n(&c->refs, 0, __ATOMIC_RELAXED);
		c->qgen = gen;
	}
}

static inline uint32_t kbit_of(const struct lk_cond_node *n)
{
	/* Nodes are on their waiters' stacks: mix the address so that neighbours differ. */
	return 1u << (((uintptr_t)n * 0x9E3779B97F4A7C15ull) >> 59);
}

int pvrt_cond_init(pvrt_cond_t *pc, clockid_t clk)
{
	lk_cond_t *c = lk_cond_of(pc);
	if (!lk_valid_clock(clk))
		return -EINVAL;
	*c = (lk_cond_t){.clock = clk == CLOCK_MONOTONIC ? 1 : 0};
	return 0;
}

int pvrt_cond_destroy(pvrt_cond_t *pc)
{
	lk_cond_t *c = lk_cond_of(pc);
	queue_lock(c);
	bool busy = c->head != NULL;
	lk_iunlock(&c->lock);
	if (busy)
		return -EBUSY;
	uint32_t *refs = &c->refs;
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
static inline void set_head(lk_cond_t *c, struct lk_cond_node *n)
{
	/* Relaxed: the peek only decides whether to take the queue lock; see pvrt_cond_signal. */
	__atomic_store_n(&c->head, n, __ATOMIC_RELAXED);
}

static void put_ref(lk_cond_t *c)
{
	/* Release: our last accesses to the condvar happen-before destroy's return. */
	uint32_t r = __atomic_fetch_sub(&c->refs, 1, __ATOMIC_RELEASE);
	if (r == (DESTROYING | 1))
		lk_wake(&c->refs, INT32_MAX);
}

/* A ULT node taken by signal or broadcast (CHAINED): SIGNALED and its wake-up. */
static void signal_node(struct lk_cond_node *n)
{
	/* Release: the chain link (written under the queue lock) and the signaller's writes are
	 * visible to the woken waiter. After this store the node may vanish (its waiter may see
	 * SIGNALED and return): the wake on a dead address is harmless, as with any futex. */
	__atomic_store_n(&n->state, SIGNALED, __ATOMIC_RELEASE);
	lk_wake(&n->state, 1);
}

/* A kernel node taken by signal or broadcast, under the queue lock: SIGNALED. The caller then
 * bumps 'kseq' (kseq_bump, still under the lock) and wakes (kwake) after the lock. */
static void signal_knode_locked(struct lk_cond_node *n)
{
	/* Release: the signaller's writes are visible to the woken waiter. After this store the
	 * node may vanish; the condvar may not (destroy takes the queue lock we hold). */
	__atomic_store_n(&n->state, SIGNALED, __ATOMIC_RELEASE);
}

static void kseq_bump(lk_cond_t *c)
{
	/* Seq_cst: the waiter loads 'kseq' before it checks its state (see kwait). */
	__atomic_fetch_add(&c->kseq, 1, __ATOMIC_SEQ_CST);
}

/* Wake kernel waiters of the bits in 'bits' (after signal_knode_locked, outside the queue lock;
 * on a destroyed condvar's address it is a harmless spurious wake-up, as with any futex). */
static void kwake(lk_cond_t *c, uint32_t bits)
{
	os_futex_wake_bits(&c->kseq, INT32_MAX, bits);
}

/* Wait for the SIGNALED store that follows CHAINED (a ULT node; not cancellable: this runs in
 * cleanup and error paths). A kernel node is never CHAINED: it goes from WAITING to SIGNALED
 * under the queue lock. */
static void park_chained(struct lk_cond_node *n)
{
	lk_park(&n->state, CHAINED, CLOCK_MONOTONIC, NULL, C);
}

/* Take n out of the queue, wherever it is (under the queue lock). */
static void unlink_node(lk_cond_t *c, struct lk_cond_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		set_head(c, n->next);
	if (n->next)
		n->next->prev = n->prev;
	else
		c->tail = n->prev;
}

/* Unlink n if it is still queued (under the queue lock); false if a signal took it. */
static bool unqueue(lk_cond_t *c, struct lk_cond_node *n)
{
	queue_lock(c);
	bool queued = __atomic_load_n(&n->state, __ATOMIC_RELAXED) == WAITING;
	if (queued)
		unlink_node(c, n);
	lk_iunlock(&c->lock);
	return queued;
}

static int cond_signal(lk_cond_t *c);

/* A waiter leaving without returning 0 (mutex error, cancellation): if a signal or broadcast
 * already took it, wait for the imminent SIGNALED store and pass the wake-up on, so that
 * neither the signal nor the rest of a broadcast chain is lost. Then drop the reference. */
static void withdraw(lk_cond_t *c, struct lk_cond_node *n)
{
	if (!unqueue(c, n)) {
		/* Acquire: pairs with signal_node's release store (n->chain is visible). */
		while (__atomic_load_n(&n->state, __ATOMIC_ACQUIRE) != SIGNALED)
			park_chained(n);
		if (n->chain)
			signal_node(n->chain);
		cond_signal(c);
	}
	put_ref(c);
}

/* The state of a kernel wait, read by its cleanup handler when it is cancellable. */
struct cwait {
	lk_cond_t *c;
	void *m;
	lk_mutex_op lock;
	struct lk_cond_node *n;
	bool cancellable;
};

/* Runs when the waiter is cancelled in kwait (glibc unwinds to the frame that pushed it). */
static void cancel_cleanup(void *p)
{
	struct cwait *w = p;
	withdraw(w->c, w->n);
	lk_stat(C, LK_ACQ);
	/* POSIX: the mutex is held again when the application's cleanup handlers run. An error
	 * (not possible for a mutex we held when waiting) cannot be reported from here. */
	(void)w->lock(w->m);
}

/* Sleep in the kernel until the node may have been signalled (a bump of 'kseq' since it was
 * found WAITING), asynchronously cancellable across the call only if the wait is. */
static int kwait(struct cwait *w, clockid_t clk, const struct timespec *abs)
{
	/* Seq_cst, then the state: if the signaller's bump is not seen here, the kernel's compare
	 * below sees it or the wake that follows it finds us asleep. */
	uint32_t seq = __atomic_load_n(&w->c->kseq, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&w->n->state, __ATOMIC_SEQ_CST) == SIGNALED)
		return 0;
	int old = 0;
	lk_stat(C, LK_PARKS);
	/* A cancel that is already pending acts inside this call (the cleanup handler runs). */
	if (w->cancellable)
		pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
	int r = os_futex_wait_bits(&w->c->kseq, seq, clk, abs, w->n->kbit);
	if (w->cancellable)
		pthread_setcanceltype(old, NULL);
	return r < 0 ? r : 0;
}

/* Wait until n is signalled (0) or the deadline passes while it is still queued (-ETIMEDOUT).
 * w: a wait in the kernel (a thread), else NULL (lk_park: a ULT; cancellable: -ECANCELED once
 * it is cancelled, n still queued or not: the caller withdraws it). */
static int wait_signal(lk_cond_t *c, struct lk_cond_node *n, clockid_t clk,
		       const struct timespec *abs, struct cwait *w, bool cancellable)
{
	for (;;) {
		/* Acquire: pairs with signal_node's release store. */
		uint32_t s = __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
		if (s == SIGNALED)
			return 0;
		int r;
		if (abs && abs->tv_sec < 0)
			r = -ETIMEDOUT;
		else if (w)
			r = kwait(w, clk, abs);
		else
			r = lk_park_as(&n->state, s, clk, abs, C, cancellable);
		if (r == -ECANCELED)
			return r;
		if (r != -ETIMEDOUT)
			continue;
		if (unqueue(c, n))
			return -ETIMEDOUT;
		abs = NULL; /* being woken: wait for it without a limit */
		clk = CLOCK_MONOTONIC;
	}
}

static int wait_kernel(lk_cond_t *c, void *m, lk_mutex_op lock, struct lk_cond_node *n,
		       clockid_t clk, const struct timespec *abs, bool cancellable)
{
	struct cwait w = {.c = c, .m = m, .lock = lock, .n = n, .cancellable = cancellable};
	if (!cancellable)
		return wait_signal(c, n, clk, abs, &w, false);
	int result;
	pthread_cleanup_push(cancel_cleanup, &w);
	result = wait_signal(c, n, clk, abs, &w, false);
	pthread_cleanup_pop(0);
	return result;
}

int lk_cond_wait(lk_cond_t *c, void *m, lk_mutex_op unlock, lk_mutex_op lock, clockid_t clk,
		 const struct timespec *abs, bool cancellable)
{
	if (abs && !os_timespec_valid(abs))
		return -EINVAL;
	/* A ULT blocks through rt_futex (it switches away); cancellation is for threads. */
	struct pvrt_ult *self = lk_self_ult();
	bool kernel = !self;
	/* A ULT's vCPU is where the scheduler puts it when readied: unknown here. */
	struct lk_cond_node n = {
	    .state = WAITING, .kernel = kernel, .vcpu1 = self ? 0 : lk_self_vcpu1(NULL)};
	n.kbit = kbit_of(&n);

	queue_lock(c);
	n.prev = c->tail;
	if (c->tail)
		c->tail->next = &n;
	else
		set_head(c, &n);
	c->tail = &n;
	/* Relaxed: destroy reads it after taking the queue lock or with acquire (put_ref). */
	__atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
	lk_iunlock(&c->lock);

	int err = unlock(m);
	if (err) {
		/* Not the owner (errorcheck/recursive): leave as if never queued. */
		withdraw(c, &n);
		return err;
	}

	int result = kernel ? wait_kernel(c, m, lock, &n, clk, abs, cancellable)
			    : wait_signal(c, &n, clk, abs, NULL, cancellable);
	if (result == -ECANCELED) {
		/* A cancelled ULT: out of the queue, any signal it took passed on, as a cancelled
		 * thread's cleanup does; then the mutex again (the caller acts on the cancel). */
		withdraw(c, &n);
		lk_stat(C, LK_ACQ);
		int lr = lock(m);
		return lr ? lr : result;
	}
	/* Broadcast (ULT nodes): wake the next chained waiter now, before dropping our reference
	 * and before locking the mutex, so that the chain drains without the mutex (a destroyer
	 * may hold it and wait for the chained waiters' references; see the file comment). n.chain
	 * was written under the queue lock before our SIGNALED store (acquired in wait_signal);
	 * the successor's node is alive: its waiter cannot return before we store SIGNALED. */
	if (result == 0 && n.chain)
		signal_node(n.chain);
	put_ref(c);

	lk_stat(C, LK_ACQ);
	if (!self)
		lk_cond_relock = n.herd ? LK_RELOCK_HERD : LK_RELOCK_ONE;
	int lr = lock(m);
	if (!self)
		lk_cond_relock = LK_RELOCK_NONE;
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

int pvrt_cond_wait(pvrt_cond_t *pc, pvrt_mutex_t *pm)
{
	lk_cond_t *c = lk_cond_of(pc);
	return lk_cond_wait(c, pm, mutex_unlock_op, mutex_lock_op, CLOCK_MONOTONIC, NULL, false);
}

int pvrt_cond_timedwait(pvrt_cond_t *pc, pvrt_mutex_t *pm, const struct timespec *abstime)
{
	lk_cond_t *c = lk_cond_of(pc);
	if (!abstime)
		return -EINVAL;
	clockid_t clk =
	    __atomic_load_n(&c->clock, __ATOMIC_RELAXED) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
	return lk_cond_wait(c, pm, mutex_unlock_op, mutex_lock_op, clk, abstime, false);
}

int pvrt_cond_clockwait(pvrt_cond_t *pc, pvrt_mutex_t *pm, clockid_t clk,
			const struct timespec *abstime)
{
	lk_cond_t *c = lk_cond_of(pc);
	if (!lk_valid_clock(clk) || !abstime)
		return -EINVAL;
	return lk_cond_wait(c, pm, mutex_unlock_op, mutex_lock_op, clk, abstime, false);
}

/*
 * Which waiter a signal takes (under the queue lock; the queue is not empty). POSIX lets it be
 * any; it is the one that will run soonest by the hints, with bounded skips, as for
 * rt_futex_wake_hinted (struct rt_wake_pick).
 */
static struct lk_cond_node *pick(lk_cond_t *c, const pvhint_t *h)
{
	if (!(h->valid & (PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE)))
		return c->head;
	struct rt_wake_pick p;
	rt_wake_pick_init(&p);
	for (struct lk_cond_node *n = c->head; n; n = n->next)
		if (!rt_wake_pick_offer(&p, h, n, n->vcpu1, n->skipped))
			break;
	struct lk_cond_node *best = p.best;
	for (struct lk_cond_node *n = c->head; n != best; n = n->next)
		n->skipped++;
	return best;
}

static int cond_signal(lk_cond_t *c)
{
	/* Unlocked peek (relaxed): an empty queue needs no lock; a waiter that queues after
	 * this load started waiting after the signal, so missing it is correct. */
	if (!__atomic_load_n(&c->head, __ATOMIC_RELAXED))
		return 0;
	pvhint_t *h = lk_hints();
	queue_lock(c);
	struct lk_cond_node *n = c->head ? pick(c, h) : NULL;
	uint32_t kbits = 0;
	if (n) {
		unlink_node(c, n);
		n->chain = NULL;
		if (n->kernel) {
			kbits = n->kbit; /* read before the store: then the node may vanish */
			signal_knode_locked(n);
			kseq_bump(c);
			n = NULL;
		} else {
			__atomic_store_n(&n->state, CHAINED, __ATOMIC_RELAXED);
		}
	}
	lk_iunlock(&c->lock);
	if (kbits)
		kwake(c, kbits);
	if (n)
		signal_node(n);
	return 0;
}

int pvrt_cond_signal(pvrt_cond_t *c)
{
	return cond_signal(lk_cond_of(c));
}

int pvrt_cond_broadcast(pvrt_cond_t *pc)
{
	lk_cond_t *c = lk_cond_of(pc);
	if (!__atomic_load_n(&c->head, __ATOMIC_RELAXED))
		return 0;
	queue_lock(c);
	/* Kernel nodes: SIGNALED now, one wake for all below. ULT nodes: chained in queue order. */
	struct lk_cond_node *first = NULL, **link = &first;
	bool kernel = false;
	unsigned nk = 0;
	for (struct lk_cond_node *n = c->head; n && nk < 2; n = n->next)
		nk += n->kernel;
	for (struct lk_cond_node *n = c->head, *next; n; n = next) {
		next = n->next; /* before the store: then the node may vanish */
		if (n->kernel) {
			kernel = true;
			n->chain = NULL;
			n->herd = nk > 1; /* read by its waiter after the SIGNALED store */
			signal_knode_locked(n);
		} else {
			*link = n;
			link = &n->chain;
			__atomic_store_n(&n->state, CHAINED, __ATOMIC_RELAXED);
		}
	}
	*link = NULL;
	if (kernel)
		kseq_bump(c);
	set_head(c, NULL);
	c->tail = NULL;
	lk_iunlock(&c->lock);
	if (kernel)
		kwake(c, FUTEX_BITSET_MATCH_ANY);
	if (first)
		signal_node(first);
	return 0;
}
