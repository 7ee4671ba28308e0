/* SPDX-License-Identifier: MIT */
/*
 * rt_futex: kernel-futex semantics for ULTs and threads alike (see futex.h).
 *
 * Waiters queue in one of FUTEX_BUCKETS hash buckets keyed by address; the waiter record
 * lives on the waiter's own stack (a blocked ULT's stack stays put, so no allocation). Each
 * bucket has a lock; nothing else is shared.
 *
 * No lost wake-ups. A waiter takes the bucket lock, compares *addr with 'expected' and queues
 * itself while holding the lock; a waker first changes *addr (its own business, before calling
 * rt_futex_wake), then takes the lock to dequeue waiters. Either the waker's lock section
 * comes first, so its store to *addr happened before our comparison and we return -EAGAIN, or
 * ours does, so the waker finds us queued. A foreign thread instead waits in the kernel on a word
 * of its own record; the waker sets that word and wakes it.
 *
 * A queued ULT still runs on its stack until its switch away is done, so no waker may make it
 * ready before. It does not hold the bucket lock across the switch (a switch can take a system
 * call: the thread pointer with per-ULT TLS and no FSGSBASE, 3-5 us on a PVM guest, and every
 * waiter and waker of the bucket's addresses would spin behind it). Instead it queues itself as
 * ULT_PARKING, drops the lock and switches; the switch's post action, once the context is saved,
 * moves PARKING to BLOCKED. A waker (or the timer) that dequeues it moves PARKING to WOKEN and
 * leaves the rest to that post action, which then finds WOKEN and makes it ready; one that finds
 * BLOCKED makes it ready itself. Both moves are compare-and-swaps on the state, so exactly one
 * side readies it.
 *
 * Timeouts. A ULT's deadline is a timer of its worker (timer.c), added before the bucket lock
 * is taken, because timers fire under the heap lock and then take the bucket lock (the lock
 * order is heap lock, then bucket lock). Whoever dequeues the record under the bucket lock --
 * the waker or the timer -- is the one that makes the ULT ready, so it is woken exactly once. A
 * foreign thread uses the kernel's timeout and, on expiry, dequeues itself under the bucket lock;
 * if a waker got there first, it waits for the waker's imminent store to its word.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>

#define FUTEX_BUCKETS_SHIFT 9
#define FUTEX_BUCKETS	    (1u << FUTEX_BUCKETS_SHIFT)

struct waiter {
	struct waiter *next, *prev;
	const uint32_t *addr;
	struct pvrt_ult *ult; /* NULL: a thread waiting on 'word' */
	uint32_t word;	      /* thread waiters: 0 waiting, 1 woken */
	int result;	      /* ULT waiters: 0, or -ETIMEDOUT set by the timer */
	uint32_t vcpu1;	      /* thread waiters: the vCPU + 1 it waited on; 0 unknown */
	uint8_t skipped;      /* times rt_futex_wake_hinted passed it over */
	bool queued;	      /* under the bucket lock */
	struct rt_timer timer;
};

struct bucket {
	struct rt_lock lock;
	struct waiter *first, *last;
} PVRT_ALIGNED;

static struct bucket buckets[FUTEX_BUCKETS];

/*
 * In a child of fork() only the forking thread exists: waiter records of the parent's other
 * threads would be woken instead of the child's own waiters, and a bucket lock held by one of
 * them would never be released. The child starts with empty buckets.
 */
static void buckets_atfork_child(void)
{
	for (unsigned i = 0; i < FUTEX_BUCKETS; i++)
		buckets[i] = (struct bucket){0};
}

__attribute__((constructor)) static void buckets_atfork_register(void)
{
	pthread_atfork(NULL, NULL, buckets_atfork_child);
}

static struct bucket *bucket_of(const uint32_t *addr)
{
	uint64_t a = (uint64_t)(uintptr_t)addr;
	/* Fibonacci hashing of the word address. */
	return &buckets[((a >> 2) * 0x9E3779B97F4A7C15ull) >> (64 - FUTEX_BUCKETS_SHIFT)];
}

static void enqueue(struct bucket *b, struct waiter *w)
{
	w->next = NULL;
	w->prev = b->last;
	if (b->last)
		b->last->next = w;
	else
		b->first = w;
	b->last = w;
	w->queued = true;
}

static void dequeue(struct bucket *b, struct waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		b->first = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		b->last = w->prev;
	w->queued = false;
}

/* Saturates: a deadline centuries away must not wrap into the past. */
static uint64_t ts_ns(const struct timespec *ts)
{
	if ((uint64_t)ts->tv_sec >= UINT64_MAX / 1000000000ull - 1)
		return UINT64_MAX;
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* Make a dequeued ULT waiter ready, or leave that to its post_parked when it is still switching
 * away. Acq_rel: the waiter, readied by either side, sees what the waker did before. */
static void ready_waiter(struct pvrt_ult *u)
{
	uint32_t s = ULT_PARKING;
	if (!__atomic_compare_exchange_n(&u->state, &s, ULT_WOKEN, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		rt_ult_ready(u);
}

/* Runs on the timer's worker, under its heap lock (see the file comment). */
static void waiter_timeout(struct rt_timer *t)
{
	struct waiter *wr = (struct waiter *)((char *)t - offsetof(struct waiter, timer));
	struct bucket *b = bucket_of(wr->addr);
	rt_lock_acquire(&b->lock);
	bool mine = wr->queued;
	if (mine) {
		dequeue(b, wr);
		wr->result = -ETIMEDOUT;
	}
	struct pvrt_ult *u = wr->ult;
	rt_lock_release(&b->lock);
	/* If not mine, a waker dequeued it and readies it; the record stays valid until the
	 * ULT's timer_cancel gets the heap lock we hold. */
	if (mine)
		ready_waiter(u);
}

/* The post action of a ULT's futex wait: its context is saved now (see the file comment). */
static void post_parked(struct rt_worker *w, void *arg)
{
	struct pvrt_ult *u = arg;
	uint32_t s = ULT_PARKING;
	/* Acquire on failure: the waker's writes (before its WOKEN) go with the ready below. */
	if (!__atomic_compare_exchange_n(&u->state, &s, ULT_BLOCKED, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		rt_ult_ready_from(w, u);
}

/*
 * The worker has nothing else to run: wait for the word in place, for up to the worker's halt-poll
 * window (capped), as its idle loop would poll anyway. Blocking instead goes to the scheduler
 * context and back: two switches, and with per-ULT TLS two thread-pointer loads, each a system
 * call where the CPU lacks FSGSBASE. Stops at once when work appears (local, injected or on
 * another worker's ring), a timer of this worker falls due, or a cancel is asked; true when the
 * word changed. Idle costs nothing more: the window is 0 once idle periods run long (worker.c,
 * idle). (Unlike the idle loop's poll, it does not check for a vCPU that lost time to the host.)
 */
#define ULT_SPIN_MAX_NS 50000ull
static bool ult_spin(struct rt_worker *w, struct pvrt_ult *self, const uint32_t *addr,
		     uint32_t expected, bool cancellable)
{
	uint64_t budget = w->poll_ns < ULT_SPIN_MAX_NS ? w->poll_ns : ULT_SPIN_MAX_NS;
	if (!budget || rt_has_work(w))
		return false;
	uint64_t t0 = os_now_ns(), now = t0;
	for (unsigned i = 1; now - t0 < budget; i++) {
		os_cpu_relax();
		/* Acquire: as after a wake-up, the waker's writes before its store are visible. */
		if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != expected)
			return true;
		/* Work readied onto this worker from elsewhere, at every round: a pause takes
		 * ~20 ns here, so 32 of them would keep a woken ULT waiting ~0.6 us. (Its own
		 * ring only grows when this worker pushes; the other rings are for stealing.) */
		if (__atomic_load_n(&w->inj.n, __ATOMIC_RELAXED))
			break;
		if (i % 32)
			continue;
		now = os_now_ns();
		if (rt_has_work(w) || rt_timers_due(w, now) ||
		    (cancellable && __atomic_load_n(&self->cancel, __ATOMIC_RELAXED)))
			break;
	}
	return false;
}

static int ult_wait(struct pvrt_ult *self, uint32_t *addr, uint32_t expected, clockid_t clk,
		    const struct timespec *abstime, bool cancellable)
{
	/* Timed waits do not spin: their deadline may fall inside the spin. */
	if (!abstime && ult_spin(rt_tls_worker, self, addr, expected, cancellable))
		return -EAGAIN;
	struct waiter wr = {.addr = addr, .ult = self};
	struct bucket *b = bucket_of(addr);
	if (abstime && ts_ns(abstime) == UINT64_MAX)
		abstime = NULL; /* centuries away: wait without a timer, as the kernel would */
	if (abstime) {
		/* Deadlines on CLOCK_REALTIME become monotonic now; later clock jumps are not
		 * followed (a documented difference from the kernel futex). */
		uint64_t now = os_now_ns(), dl;
		if (clk == CLOCK_REALTIME) {
			struct timespec rt;
			clock_gettime(CLOCK_REALTIME, &rt);
			int64_t left = (int64_t)(ts_ns(abstime) - ts_ns(&rt));
			dl = left <= 0 ? now : now + (uint64_t)left;
		} else {
			dl = ts_ns(abstime);
		}
		if (dl <= now)
			return __atomic_load_n(addr, __ATOMIC_RELAXED) != expected ? -EAGAIN
										   : -ETIMEDOUT;
		wr.timer.deadline = dl;
		wr.timer.fn = waiter_timeout;
		/* Added on our worker, which cannot run its timers before we have switched away.
		 * Out of memory for the timer: return as a spurious wake-up (the caller re-checks
		 * and waits again until the deadline passes) rather than block with no timeout. */
		if (rt_timer_add(rt_tls_worker, &wr.timer))
			return 0;
	}
	rt_lock_acquire(&b->lock);
	/* Relaxed: ordered against the waker's store by the bucket lock (see the file comment). */
	if (__atomic_load_n(addr, __ATOMIC_RELAXED) != expected) {
		rt_lock_release(&b->lock);
		if (abstime)
			rt_timer_cancel(&wr.timer);
		return -EAGAIN;
	}
	enqueue(b, &wr);
	/* Seq_cst, then the cancel word: pthread_cancel (mn.c) sets the word, then reads
	 * wait_addr and wakes it. Either it sees our address, and its wake (which needs the
	 * bucket lock we hold) finds us queued, or we see its word. */
	__atomic_store_n(&self->wait_addr, addr, __ATOMIC_SEQ_CST);
	if (cancellable && __atomic_load_n(&self->cancel, __ATOMIC_SEQ_CST)) {
		dequeue(b, &wr);
		rt_lock_release(&b->lock);
		__atomic_store_n(&self->wait_addr, NULL, __ATOMIC_RELAXED);
		if (abstime)
			rt_timer_cancel(&wr.timer);
		return -ECANCELED;
	}
	__atomic_store_n(&self->state, ULT_PARKING, __ATOMIC_RELAXED);
	rt_lock_release(&b->lock);
	rt_ult_block(post_parked, self);
	__atomic_store_n(&self->wait_addr, NULL, __ATOMIC_RELAXED);
	if (abstime)
		rt_timer_cancel(&wr.timer); /* waits out a timer firing concurrently */
	return wr.result;
}

static int thread_wait(uint32_t *addr, uint32_t expected, clockid_t clk,
		       const struct timespec *abstime)
{
	int v = pvhint_self_vcpu();
	struct waiter wr = {.addr = addr, .vcpu1 = v >= 0 ? (uint32_t)v + 1 : 0};
	struct bucket *b = bucket_of(addr);
	rt_lock_acquire(&b->lock);
	if (__atomic_load_n(addr, __ATOMIC_RELAXED) != expected) {
		rt_lock_release(&b->lock);
		return -EAGAIN;
	}
	enqueue(b, &wr);
	rt_lock_release(&b->lock);
	for (;;) {
		int r = os_futex_wait_abs(&wr.word, 0, clk, abstime);
		/* Acquire pairs with the waker's release store: its earlier writes are visible. */
		if (__atomic_load_n(&wr.word, __ATOMIC_ACQUIRE))
			return 0;
		if (r == -ETIMEDOUT || (r && r != -EAGAIN && r != -EINTR)) {
			rt_lock_acquire(&b->lock);
			bool mine = wr.queued;
			if (mine)
				dequeue(b, &wr);
			rt_lock_release(&b->lock);
			if (mine)
				return r; /* -ETIMEDOUT, or the kernel's error */
			/* A waker dequeued us and is about to store 1: wait for it. */
			while (!__atomic_load_n(&wr.word, __ATOMIC_ACQUIRE))
				os_futex_wait_abs(&wr.word, 0, CLOCK_MONOTONIC, NULL);
			return 0;
		}
	}
}

static int futex_wait(uint32_t *addr, uint32_t expected, clockid_t clk,
		      const struct timespec *abstime, bool cancellable)
{
	PVRT_RT_SCOPE();
	if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)
		return -EINVAL;
	if (abstime && !os_timespec_valid(abstime))
		return -EINVAL;
	/* Before every epoch: already passed (POSIX; the kernel would say EINVAL). */
	if (abstime && os_timespec_past(abstime))
		return __atomic_load_n(addr, __ATOMIC_RELAXED) != expected ? -EAGAIN : -ETIMEDOUT;
	struct pvrt_ult *self = rt_ult_current();
	if (self)
		return ult_wait(self, addr, expected, clk, abstime, cancellable);
	return thread_wait(addr, expected, clk, abstime);
}

int rt_futex_wait(uint32_t *addr, uint32_t expected, clockid_t clk, const struct timespec *abstime)
{
	return futex_wait(addr, expected, clk, abstime, false);
}

int rt_futex_wait_cancel(uint32_t *addr, uint32_t expected, clockid_t clk,
			 const struct timespec *abstime)
{
	return futex_wait(addr, expected, clk, abstime, true);
}

/* Make a dequeued waiter run. Records stay valid until their owner is readied / its word is
 * set: callers read anything they need from wr first. */
static void wake_one(struct waiter *wr)
{
	if (wr->ult) {
		ready_waiter(wr->ult);
	} else {
		uint32_t *word = &wr->word;
		/* Release: the waiter sees what we did before waking it. After this store the
		 * record may be gone; a kernel wake on a dead address is harmless (at worst a
		 * spurious wake-up, which every waiter tolerates). */
		__atomic_store_n(word, 1, __ATOMIC_RELEASE);
		os_futex_wake(word, 1);
	}
}

int rt_futex_wake(uint32_t *addr, int n)
{
	PVRT_RT_SCOPE();
	if (n <= 0)
		return 0;
	struct bucket *b = bucket_of(addr);
	struct waiter *list = NULL, **tail = &list;
	int cnt = 0;
	rt_lock_acquire(&b->lock);
	for (struct waiter *wr = b->first, *nx; wr && cnt < n; wr = nx) {
		nx = wr->next;
		if (wr->addr != addr)
			continue;
		dequeue(b, wr);
		wr->next = NULL;
		*tail = wr;
		tail = &wr->next;
		cnt++;
	}
	rt_lock_release(&b->lock);
	while (list) {
		struct waiter *wr = list;
		list = wr->next;
		wake_one(wr);
	}
	return cnt;
}

int rt_futex_wake_hinted(uint32_t *addr, const pvhint_t *h)
{
	PVRT_RT_SCOPE();
	if (!(h->valid & (PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE)))
		return rt_futex_wake(addr, 1); /* nothing to choose by */
	struct bucket *b = bucket_of(addr);
	struct rt_wake_pick pick;
	rt_wake_pick_init(&pick);
	rt_lock_acquire(&b->lock);
	for (struct waiter *wr = b->first; wr; wr = wr->next)
		if (wr->addr == addr && !rt_wake_pick_offer(&pick, h, wr, wr->vcpu1, wr->skipped))
			break;
	struct waiter *best = pick.best;
	if (best) {
		/* Older waiters passed over: count it, for the bound. */
		for (struct waiter *wr = b->first; wr != best; wr = wr->next)
			if (wr->addr == addr)
				wr->skipped++;
		dequeue(b, best);
	}
	rt_lock_release(&b->lock);
	if (!best)
		return 0;
	wake_one(best);
	return 1;
}

int rt_futex_nr_waiters(const uint32_t *addr)
{
	struct bucket *b = bucket_of(addr);
	int n = 0;
	rt_lock_acquire(&b->lock);
	for (struct waiter *wr = b->first; wr; wr = wr->next)
		n += wr->addr == addr;
	rt_lock_release(&b->lock);
	return n;
}
