/* SPDX-License-Identifier: MIT */
/*
 * pvrt_mutex: spin while the owner runs, park when it does not, hand off to a
 * starving waiter. The protocol (modelled in locks/model/mutex.pml):
 *
 * word = LOCKED | WAITERS | KWAITERS | HANDOFF bits.
 *   lock:    CAS 0 -> LOCKED; else spin (bounded, only while the owner's vCPU
 *            runs; waiters queue in 'spinq' and only its head spins on the
 *            word); else set its kind's waiter bit and sleep on 'word': a ULT
 *            sets WAITERS and parks through rt_futex (it switches away), a
 *            thread sets KWAITERS and sleeps in the kernel futex on the word
 *            itself, as glibc's waiters do (see kpark). A waiter that has
 *            slept once acquires with its bit set, because it cannot know
 *            whether others of its kind still sleep (Drepper's "mutex 3").
 *   unlock:  CAS LOCKED -> 0; else clear LOCKED and both waiter bits and wake
 *            one waiter of each kind whose bit was set, preferring one whose
 *            vCPU will run soon (kwake_one, rt_futex_wake_hinted). Each woken
 *            waiter then answers for its own kind's bit, so waking one of each
 *            loses no wake-up.
 *
 * hand-off: a waiter that has waited starve_bound() since it was first woken
 *   registers in 'handoff' (CAS 0 -> its tid; one target at a time), sets
 *   HANDOFF in the word while it is LOCKED, and parks on 'handoff'. An unlocker
 *   that finds a target keeps LOCKED, clears HANDOFF and turns 'handoff' into
 *   tid|GRANT: ownership passes without the word ever being free. If the
 *   target's vCPU is preempted, or the target sleeps below the hard bound
 *   (ASLEEP), the unlocker releases instead and cancels the registration
 *   ('handoff' -> 0, wake), so the lock is not stuck behind a thread that
 *   cannot run or has yet to wake. Every release that finds a registered target after
 *   freeing the word cancels it the same way: the target stores its tid, then
 *   reads the word; the unlocker frees the word, then reads 'handoff' (both
 *   sequentially consistent), so one of them sees the other (no lost wake-up).
 *   In a fork child a target registered by a parent thread does not exist: the unlocker
 *   cancels it the same way (lk_target_gone).
 */
#define _GNU_SOURCE
#include <pvrt/mutex.h>

#include "lk.h"
#include "mutex_fast.h"
#include "spinq.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#define GRANT 0x80000000u /* in 'handoff': target tid | GRANT = the lock is yours */
/* In 'handoff_vcpu', beside the target's vCPU + 1 (below 0x8000, else 0): the target sleeps, and
 * has waited less than LK_STARVE_HARD_NS. */
#define ASLEEP 0x8000u
#define C      PVRT_LOCK_MUTEX

static inline bool is_target(uint32_t h)
{
	return h != 0 && !(h & GRANT);
}

int pvrt_mutex_init(pvrt_mutex_t *pm, int type)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	if (type < PVRT_MUTEX_NORMAL || type > PVRT_MUTEX_ADAPTIVE)
		return -EINVAL;
	*m = (lk_mutex_t){.kind = type};
	return 0;
}

int pvrt_mutex_destroy(pvrt_mutex_t *pm)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	if (__atomic_load_n(&m->word, __ATOMIC_RELAXED) & LOCKED)
		return -EBUSY;
	return 0;
}

/*
 * What a thread learnt of the few mutexes it contended on last, kept per
 * thread (per worker for ULTs), not in the mutex, whose 40 bytes are all taken:
 * - Without preemption hints a spinner cannot tell a running owner from a
 *   descheduled one, so the blind budget adapts (as glibc's adaptive mutex
 *   does) to an estimate of how long a successful spin takes. A success moves
 *   the estimate 1/8 towards its duration; a spin that runs out shrinks it by
 *   a quarter, so a mutex whose owners get descheduled (or sleep while holding
 *   it) soon costs its waiters little more than glibc's immediate park. The
 *   budget is twice the estimate plus 500 ns, at most LK_SPIN_BLIND_NS.
 * - Whether the mutex is mostly free between acquisitions, for the step back
 *   (step_wanted).
 */
#define EST_SLOTS_SHIFT 3
#define EST_SLOTS	(1u << EST_SLOTS_SHIFT)
struct spin_est {
	const lk_mutex_t *m;
	uint32_t ns;	    /* the blind estimate */
	uint8_t free_first; /* 0..3: how often the word was free at the head's first check */
};

/* The mutex's per-thread state: what it learnt of mutexes and the last steal seen (below). */
struct mx_thread {
	struct spin_est est[EST_SLOTS];
	uint64_t steal_seen, steal_at;
	bool steal_primed;
};
static __thread struct mx_thread mx_tls __attribute__((tls_model("initial-exec")));

/* The calling kernel thread's state. A real call with a memory clobber: a ULT may resume on
 * another worker after lk_park or a yield, and a compiler may keep an inlined thread-local
 * address across those calls (aarch64 does). */
static __attribute__((noinline)) struct mx_thread *mx_self(void)
{
	__asm__ volatile("" ::: "memory");
	return &mx_tls;
}

static struct spin_est *est_slot(struct mx_thread *t, const lk_mutex_t *m)
{
	/* Fibonacci hashing of the whole address: neighbours in an array of mutexes differ. */
	struct spin_est *e =
	    &t->est[((uintptr_t)m * 0x9E3779B97F4A7C15ull) >> (64 - EST_SLOTS_SHIFT)];
	if (e->m != m) {
		e->m = m;
		e->ns = LK_SPIN_BLIND_NS / 2;
		e->free_first = 1; /* one free first check to start stepping back */
	}
	return e;
}

/*
 * Is our own vCPU sharing its physical CPU? Its steal time grew within the last
 * LK_STEAL_RECENT_NS. Then a long spin is not free: while we spin, a vCPU that
 * waits for our physical CPU does not run, whereas a parked thread's vCPU halts
 * and gives the CPU away at once. Such a spinner uses the adaptive budget of
 * the blind case (it still stops at once when the owner's vCPU is preempted).
 * One racy load of the steal field (only a change matters, so no consistent
 * read is needed) and a clock read, on the contended path only. The last seen
 * value is per kernel thread, i.e. per worker for ULTs, whose vCPU it is.
 */
static bool own_vcpu_shared(struct mx_thread *t, pvhint_t *h, struct pvrt_ult *u)
{
	/* Not on thread-slot pages (bpf): a thread's steal is its run-queue wait, which grows at
	 * every wake-up, so a waiter that parked once would read "shared" and park the next time
	 * too. There the short budget cost bench_locks 13% of its long-section throughput at 4
	 * threads on 2 CPUs (0.87x glibc's; 0.98x without it). */
	if ((h->valid & (PVHINT_VALID_STEAL | PVHINT_VALID_SLEEPING)) != PVHINT_VALID_STEAL)
		return false;
	unsigned v = lk_self_vcpu1(u) - 1;
	if (v >= pvhint_nr_vcpus(h))
		return false;
	/* Relaxed: a hint compared for change only; a torn or stale value costs one decision. */
	uint64_t st = __atomic_load_n(&h->rec[v].steal, __ATOMIC_RELAXED);
	if (!t->steal_primed) {
		/* The first read is a baseline: steal is cumulative, not a change. */
		t->steal_primed = true;
		t->steal_seen = st;
		return false;
	}
	uint64_t now = os_now_ns();
	if (st != t->steal_seen) {
		t->steal_seen = st;
		t->steal_at = now;
	}
	return t->steal_at != 0 && now - t->steal_at < LK_STEAL_RECENT_NS;
}

struct spin_ctx {
	lk_mutex_t *m;
	pvhint_t *h;
	struct lk_spin sp;
	bool cut;     /* stopped because the owner's vCPU is preempted */
	bool ran_out; /* the budget ran out */
};

/* Stop spinning? The lock is promised to a starving waiter, the owner cannot run, or the
 * budget is spent. */
static bool spin_futile(struct spin_ctx *c, uint32_t w)
{
	if (w & HANDOFF)
		return true;
	if (lk_holder_preempted(c->h, __atomic_load_n(&c->m->owner_vcpu, __ATOMIC_RELAXED))) {
		/* The owner cannot release before its vCPU runs again: park now. */
		c->cut = true;
		return true;
	}
	if (!lk_spin_more(&c->sp)) {
		c->ran_out = true;
		return true;
	}
	return false;
}

/* The give-up test of a queued spinner: its budget only. It touches nothing of the mutex (the
 * point of the queue is that only the head reads that cache line); when the owner's vCPU is
 * preempted the head gives up, and each next head sees it in turn. */
static bool queue_give_up(void *arg)
{
	struct spin_ctx *c = arg;
	if (lk_spin_more(&c->sp))
		return false;
	c->ran_out = true;
	return true;
}

/*
 * Threads spinning on any mutex now. A spinner takes a CPU: with as many spinners as CPUs but
 * one, the owners and everyone else share the last one, and a further spinner would spin on an
 * owner that is runnable but not running (more threads than CPUs), which no hint may tell
 * (source none), and delay it. So a waiter spins only while fewer than CPUs - 1 others do, and
 * parks at once otherwise (as a woken herd that meets a held mutex then does). Counted on the
 * contended path only.
 */
static uint32_t spinners;

static bool spin_admit(void)
{
	unsigned cap = lk_nr_cpus() - 1;
	/* Relaxed: a count that decides only whether to spin. */
	if (__atomic_load_n(&spinners, __ATOMIC_RELAXED) >= cap)
		return false;
	if (__atomic_fetch_add(&spinners, 1, __ATOMIC_RELAXED) < cap)
		return true;
	__atomic_fetch_sub(&spinners, 1, __ATOMIC_RELAXED);
	return false;
}

static void spin_leave(void)
{
	__atomic_fetch_sub(&spinners, 1, __ATOMIC_RELAXED);
}

/* In a fork child only the forking thread exists, and it is not spinning. */
static void spinners_atfork_child(void)
{
	__atomic_store_n(&spinners, 0, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void spinners_init(void)
{
	pthread_atfork(NULL, NULL, spinners_atfork_child);
}

/*
 * The head's step back: LK_STEP_BACK_NS of pauses (checking the clock every LK_SPIN_FREE
 * pauses, so up to that many pauses more), touching nothing shared, before its first check of
 * the word. Under sustained contention on a short section the word is free most of the time
 * between one owner's acquisitions, so a waiter that checks at once takes it the moment the
 * owner lets go; the owner's next acquisition then misses, becomes the waiter, and takes it
 * back the same way: the lock and the data it guards move between cores on nearly every
 * acquisition, and throughput is bounded by the line's transfer time (bench_locks, short
 * sections, 2 threads on 2 CPUs: 12-13M acquisitions/s, no better than pthread_spin, while
 * glibc made 14-20M: its waiters spend a futex call away from the line, and meanwhile the
 * owner's core runs alone from its cache). Staying away under a microsecond lets the owner's
 * core run a few dozen acquisitions per transfer: 1.1-1.3x glibc's throughput at 2, 4 and 6
 * threads on 2 CPUs (locks/README.md, "Step back"). The waiter pays the step, and may lose
 * a race it would have won to an owner that retakes the lock meanwhile. 700 ns: 500 ns gave
 * a third less of the gain, 1.5 us a little more throughput but a p99 latency (2.4-2.5 us)
 * well above glibc's (1.5 us). step_wanted says where it is taken.
 */
static void step_back(void)
{
	uint64_t end = os_now_ns() + LK_STEP_BACK_NS;
	do
		for (unsigned i = 0; i < LK_SPIN_FREE; i++)
			os_cpu_relax();
	while (os_now_ns() < end);
}

/*
 * Step back only where it pays: on a mutex whose word this thread found free at the head's
 * first check of late (after a step back or without one), i.e. one that is free most of the
 * time between its acquisitions. On a mutex held most of the time (long sections) the head
 * must be polling at the instant the owner lets go, or the owner takes it back at once and
 * the head runs out of budget and parks (long sections, 2 threads on 2 CPUs: 5-7% fewer
 * acquisitions/s when every head stepped back). Only before the first park: a woken waiter
 * has been away from the line long enough, and it is woken just as the lock was freed, while
 * the unlocker is still in its futex call; stepping back then handed the lock back to the
 * unlocker every time, and the woken waiter starved until its hand-off. For the same reason
 * not when relocking after a condvar wait (the signaller usually releases at once). Only for a
 * head that did not wait in the spinner queue: one that did has been away from the line. Not
 * when the first check would stop the spin anyway (a hand-off is pending, the owner's vCPU is
 * preempted), and not for a ULT whose owner is a ULT it can run on this worker (spin_queued
 * yields to it).
 */
static bool step_wanted(const struct spin_est *est, const struct spin_ctx *c, uint32_t extra,
			struct pvrt_ult *self)
{
	if (extra || lk_cond_relock || c->sp.n || est->free_first < 2)
		return false;
	/* Relaxed, as the polls: hints for one decision. The line is ours after the queue's
	 * exchange on m->spinq, which sits beside these fields. */
	lk_mutex_t *m = c->m;
	if ((__atomic_load_n(&m->word, __ATOMIC_RELAXED) & HANDOFF) ||
	    lk_vcpu1_preempted(c->h, __atomic_load_n(&m->owner_vcpu, __ATOMIC_RELAXED)))
		return false;
	struct pvrt_ult *ou = self ? __atomic_load_n(&m->owner_ult, __ATOMIC_RELAXED) : NULL;
	return !ou || !rt_ult_can_yield_to(ou);
}

static void step_learn(struct spin_est *est, bool was_free)
{
	if (was_free && est->free_first < 3)
		est->free_first++;
	else if (!was_free && est->free_first > 0)
		est->free_first--;
}

/*
 * Spin while that can win: the owner's vCPU is not preempted, no hand-off is
 * pending, and the budget lasts. Waiters queue in the spinner queue; only its
 * head polls the word, after a step back where that pays (step_wanted) and
 * with back-off (without it the word moved between cores on nearly every
 * acquisition of short sections). The head leaves the queue before it takes
 * the word, so the new owner never waits in the queue's hand-shakes. 'extra'
 * is WAITERS once the caller has parked (see the header comment).
 */
static bool spin_queued(lk_mutex_t *m, uint32_t extra, struct pvrt_ult *self, pvhint_t *h,
			bool *cut)
{
	struct mx_thread *t = mx_self();
	bool blind = !(h->valid & PVHINT_VALID_PREEMPTED) || own_vcpu_shared(t, h, self);
	struct spin_est *est = est_slot(t, m);
	uint64_t budget = LK_SPIN_NS;
	if (blind) {
		budget = 2 * (uint64_t)est->ns + 500;
		if (budget > LK_SPIN_BLIND_NS)
			budget = LK_SPIN_BLIND_NS;
	}
	struct spin_ctx c = {.m = m, .h = h};
	lk_spin_init(&c.sp, budget);
	bool got = false, moved = false, first_done = false;
	for (;;) {
		/* Fetched again after a yield: we may be on another worker (its node, its vCPU). */
		struct lk_sqnode *node = lk_spinq_node();
		if (!node || !lk_spinq_lock(&m->spinq, node, vcpu16(lk_self_vcpu1(self)), h,
					    queue_give_up, &c))
			break;
		bool again = false;
		if (!first_done && step_wanted(est, &c, extra, self))
			step_back();
		for (unsigned i = 0;; i++) {
			uint32_t w = __atomic_load_n(&m->word, __ATOMIC_RELAXED);
			if (!first_done) {
				first_done = true;
				step_learn(est, !(w & LOCKED));
			}
			if (!(w & LOCKED)) {
				lk_spinq_unlock(&m->spinq, node);
				/* Acquire: the previous owner's critical section happens-before
				 * ours. Lost the race: queue again (the budget goes on). */
				got = __atomic_compare_exchange_n(&m->word, &w, w | LOCKED | extra,
								  false, __ATOMIC_ACQUIRE,
								  __ATOMIC_RELAXED);
				again = !got;
				break;
			}
			if (self && (i & 7) == 0) {
				/* A ULT owner that sits queued (not running) on a worker we may run
				 * it on releases only once it runs: run it now instead of spinning
				 * (we are queued ready meanwhile). Leave the spinner queue first:
				 * its node is our worker's, and the worker runs other ULTs while we
				 * are away. */
				struct pvrt_ult *ou =
				    __atomic_load_n(&m->owner_ult, __ATOMIC_RELAXED);
				if (ou && rt_ult_can_yield_to(ou)) {
					lk_spinq_unlock(&m->spinq, node);
					if (rt_ult_try_yield_to(ou)) {
						lk_stat(C, LK_SPIN_CUT);
						moved = true;
					}
					/* A failed yield still costs budget: no endless loop. */
					again = !spin_futile(&c, w);
					break;
				}
			}
			if (spin_futile(&c, w)) {
				lk_spinq_unlock(&m->spinq, node);
				break;
			}
		}
		if (!again)
			break;
	}
	if (c.cut)
		lk_stat(C, LK_SPIN_CUT);
	*cut = c.cut && !got;
	/* The estimate belongs to the thread we started on; after a yield we may be on another,
	 * and the time away was not spinning: leave it alone then. */
	if (blind && !moved && got) {
		uint64_t el = lk_spin_elapsed(&c.sp), e = est->ns;
		est->ns = (uint32_t)(el > e ? e + (el - e) / 8 : e - (e - el) / 8);
	} else if (blind && !moved && c.ran_out) {
		est->ns -= est->ns / 4;
	}
	return got;
}

/* Spin (spin_queued) unless as many threads spin as the CPUs allow (spin_admit), or, for a
 * thread relocking after a condvar wait, the owner acquired on the CPU we run on. */
static bool spin_acquire(lk_mutex_t *m, uint32_t extra, struct pvrt_ult *self)
{
	pvhint_t *h = lk_hints();
	/* Threads woken together by a broadcast meet at the mutex, one at a time: each spinner
	 * holds a CPU that the owner, the rest of the herd or a straggler of the program's
	 * phase needs (they outnumber the CPUs whenever the threads do), and with a descheduled
	 * vCPU's threads the herd may be larger than the CPUs that run. Park at once, as
	 * glibc's waiters do (lock-only streamcluster_cond under --emu=vcpus=4,pcpus=2: 0.55x
	 * glibc's speed with the herd spinning, 1.11x without). A herd member that starves
	 * later still spins for its hand-off grant (await_grant). */
	if (!self && lk_cond_relock == LK_RELOCK_HERD)
		return false;
	/* Woken alone, without preemption hints: an owner that acquired on the CPU we run on now
	 * waits for this CPU. (For every acquisition this rule cost bench_locks up to half its
	 * undercommitted throughput: with threads migrating on a loaded machine the owner's CPU
	 * number is often stale.) */
	if (!self && lk_cond_relock && !(h->valid & PVHINT_VALID_PREEMPTED)) {
		uint32_t ov = __atomic_load_n(&m->owner_vcpu, __ATOMIC_RELAXED);
		if (ov && ov == vcpu16(lk_self_vcpu1(NULL)))
			return false;
	}
	if (!spin_admit())
		return false;
	bool cut = false;
	bool got = spin_queued(m, extra, self, h, &cut);
	spin_leave();
	/* The owner's vCPU is preempted: have it run in our vCPU's place (PVRT_DIRECTED_YIELD),
	 * then look once more before parking, which would leave the owner to the host's next
	 * turn. Not counted as a spinner meanwhile: others may spin on an owner that runs. */
	if (cut && lk_yield_to_vcpu1(h, __atomic_load_n(&m->owner_vcpu, __ATOMIC_RELAXED), C)) {
		uint32_t w = __atomic_load_n(&m->word, __ATOMIC_RELAXED);
		/* Acquire: as in spin_queued. */
		got = !(w & LOCKED) &&
		      __atomic_compare_exchange_n(&m->word, &w, w | LOCKED | extra, false,
						  __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
	}
	return got;
}

/*
 * Thread waiters sleep in the kernel futex on 'word', each with the bit of its vCPU
 * (FUTEX_WAIT_BITSET), so that an unlocker can wake the oldest waiter whose vCPU runs with one
 * FUTEX_WAKE_BITSET, without a queue of its own: a queue in user space (rt_futex's buckets)
 * lengthens both sides of every hand-over by a lock and a scan, and with threads that share a
 * CPU every added step on that path costs whole context switches (two threads handing a
 * mutex back and forth through a condvar on one CPU: 0.83x glibc's speed through rt_futex,
 * 0.98x with the kernel futex; lock-only parsec_streamcluster_cond at 4x threads per CPU,
 * hints none: 0.96x -> 0.99x).
 * Bits: vCPU v is bit v % 31; bit 31 is "unknown".
 */
#define KBIT_UNKNOWN 0x80000000u
#define KBIT_SCAN    64u /* vCPU pages up to this size choose by the hints; larger: oldest */

static inline uint32_t kbit_of(uint32_t vcpu1)
{
	return vcpu1 ? 1u << ((vcpu1 - 1) % 31) : KBIT_UNKNOWN;
}

static int kpark(lk_mutex_t *m, uint32_t w, clockid_t clk, const struct timespec *abs)
{
	lk_stat(C, LK_PARKS);
	uint32_t bit = kbit_of(lk_self_vcpu1(NULL));
	int r;
	/* A signal handler ran: sleep again (the deadline is absolute), as rt_futex does; a
	 * wake-up would start the starvation clock. */
	do
		r = os_futex_wait_bits(&m->word, w, clk, abs, bit);
	while (r == -EINTR);
	return r;
}

/* The bits of the thread waiters to wake first: those of vCPUs that are not preempted (a bit
 * that a preempted vCPU shares, on pages of more than 31 vCPUs, is left out) and the unknown,
 * or all when the hints cannot tell (none, thread-slot records: a sleeping thread's own record
 * says nothing of when it would run, or a page too large to scan on every wake). */
static uint32_t kwake_pref(const pvhint_t *h)
{
	if ((h->valid & (PVHINT_VALID_PREEMPTED | PVHINT_VALID_SLEEPING)) != PVHINT_VALID_PREEMPTED)
		return FUTEX_BITSET_MATCH_ANY;
	uint32_t n = pvhint_nr_vcpus(h), preempted = 0;
	if (n > KBIT_SCAN)
		return FUTEX_BITSET_MATCH_ANY;
	for (uint32_t v = 0; v < n; v++)
		if (pvhint_vcpu_preempted(h, v))
			preempted |= kbit_of(v + 1);
	return preempted ? ~preempted : FUTEX_BITSET_MATCH_ANY;
}

/*
 * Bounded unfairness, as rt_futex_wake_hinted's: every KWAKE_FIFO_EVERY-th contended wake of
 * an unlocking thread takes the oldest waiter whatever its vCPU. The bit says where a waiter
 * went to sleep, not where the kernel will run it, so a waiter on a vCPU that reads as
 * preempted at every unlock could otherwise be passed over for ever while others come and go
 * (and its starvation clock only starts at its first wake-up). Per thread: the mutex has no
 * bytes to spare, and one thread's unlocks of a contended mutex come in runs.
 */
#define KWAKE_FIFO_EVERY 4u
static __thread uint8_t kwake_n __attribute__((tls_model("initial-exec")));

static void kwake_one(lk_mutex_t *m)
{
	uint32_t pref = FUTEX_BITSET_MATCH_ANY;
	if (++kwake_n % KWAKE_FIFO_EVERY)
		pref = kwake_pref(lk_hints());
	if (pref != FUTEX_BITSET_MATCH_ANY && os_futex_wake_bits(&m->word, 1, pref) > 0)
		return;
	os_futex_wake_bits(&m->word, 1, FUTEX_BITSET_MATCH_ANY);
}

/*
 * A registered hand-off target spins for its grant while the owner runs
 * before it parks: a grant to a sleeping target adds a wake-up to the
 * hand-over, during which the lock is held by nobody running.
 */
static void await_grant(lk_mutex_t *m, uint32_t t, struct pvrt_ult *u)
{
	if (u)
		return; /* a ULT parks (switches away): its owner may be a ULT of this worker */
	pvhint_t *h = lk_hints();
	struct lk_spin sp;
	lk_spin_init(&sp, lk_spin_budget(h));
	/* Relaxed: polling; the caller re-reads 'handoff' with acquire before acting. */
	while (__atomic_load_n(&m->handoff, __ATOMIC_RELAXED) == t &&
	       (__atomic_load_n(&m->word, __ATOMIC_RELAXED) & LOCKED) &&
	       !lk_holder_preempted(h, __atomic_load_n(&m->owner_vcpu, __ATOMIC_RELAXED)) &&
	       lk_spin_more(&sp))
		;
}

/* A target's vCPU + 1 for 'handoff_vcpu': 0 (unknown) where it would reach the ASLEEP bit. */
static uint16_t handoff_vcpu1(struct pvrt_ult *u)
{
	uint32_t v = lk_self_vcpu1(u);
	return (uint16_t)(v < ASLEEP ? v : 0);
}

/*
 * Mark the registered target t asleep in 'handoff_vcpu' (its current vCPU | ASLEEP, in *v1 the
 * vCPU), unless it is no longer the target. The check and the store are two steps: a target
 * cancelled in between may leave its mark on its successor's registration, which costs that
 * successor one cancel (it registers again, storing a clean value) and never a hang: every mark
 * is followed by its writer's clearing CAS. Relaxed: a hint for the unlocker's choice between
 * two paths (grant, or release and cancel) that are both correct.
 */
static bool mark_asleep(lk_mutex_t *m, uint32_t t, uint16_t *v1)
{
	*v1 = handoff_vcpu1(NULL);
	if (__atomic_load_n(&m->handoff, __ATOMIC_RELAXED) != t)
		return false;
	__atomic_store_n(&m->handoff_vcpu, (uint16_t)(*v1 | ASLEEP), __ATOMIC_RELAXED);
	return true;
}

/*
 * The starving waiter's path. Returns 0 when it owns the lock, -EAGAIN if
 * another thread is the hand-off target (the caller parks on the word as
 * before), or the timeout error.
 */
static int handoff_acquire(lk_mutex_t *m, clockid_t clk, const struct timespec *abs,
			   struct pvrt_ult *u, uint32_t wbit, uint64_t t0)
{
	const uint32_t t = (uint32_t)lk_self_id(u);
	bool registered = false;

	for (;;) {
		/* Acquire: a grant (t|GRANT) carries the granter's critical section. */
		uint32_t h = __atomic_load_n(&m->handoff, __ATOMIC_ACQUIRE);
		if (h == (t | GRANT)) {
			/* Relaxed: we own the lock; the next registrant CASes from 0. */
			__atomic_store_n(&m->handoff, 0, __ATOMIC_RELAXED);
			return 0;
		}
		if (registered && h != t)
			registered = false; /* an unlocker cancelled us: the word was freed */
		if (!registered) {
			if (h != 0)
				return -EAGAIN;
			uint32_t z = 0;
			/* Seq_cst: store-then-load against the unlocker's free-then-load. */
			if (!__atomic_compare_exchange_n(&m->handoff, &z, t, false,
							 __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
				return -EAGAIN;
			registered = true;
			/* Our vCPU now: a cancelled thread often wakes on another CPU. */
			__atomic_store_n(&m->handoff_vcpu, handoff_vcpu1(u), __ATOMIC_RELAXED);
		}
		uint32_t w = __atomic_load_n(&m->word, __ATOMIC_SEQ_CST);
		if (!(w & LOCKED)) {
			/* Free: take it directly (acquire as in spin_acquire), then unregister. */
			if (__atomic_compare_exchange_n(&m->word, &w, w | LOCKED | wbit, false,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				uint32_t e = t;
				/* Fails only if an unlocker cancelled us meanwhile (now 0). */
				__atomic_compare_exchange_n(&m->handoff, &e, 0, false,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
				return 0;
			}
			continue;
		}
		if ((w & (HANDOFF | wbit)) != (HANDOFF | wbit)) {
			/* Seq_cst like the load above: the flag forces the unlocker's slow path;
			 * our kind's bit, which we answer for since we were woken (see the top). */
			if (!__atomic_compare_exchange_n(&m->word, &w, w | HANDOFF | wbit, false,
							 __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
				continue;
		}
		await_grant(m, t, u);
		/* A thread that goes to sleep tells the unlocker so (below the hard bound): a
		 * grant to a sleeper holds the lock through the sleeper's wake-up, with nobody
		 * running it, which costs every other waiter that wake-up too. The unlocker
		 * cancels instead (frees the word and wakes us): we then take the free word, or
		 * register again and wait for the grant awake (await_grant). Past the hard
		 * bound we take the grant asleep. A ULT parks by switching away and is woken
		 * onto a worker: no flag. */
		bool flag = !u && os_now_ns() - t0 < LK_STARVE_HARD_NS;
		uint16_t v1 = 0;
		if (flag)
			flag = mark_asleep(m, t, &v1);
		int r = lk_park(&m->handoff, t, clk, abs, C);
		if (flag) {
			/* Only our own mark: if we were cancelled or granted meanwhile, a new
			 * target may have registered with its own vCPU, which we must not
			 * overwrite (a CAS; a new target of the same vCPU that is itself asleep
			 * would have stored the same value). Relaxed: as mark_asleep. */
			uint16_t e = (uint16_t)(v1 | ASLEEP);
			__atomic_compare_exchange_n(&m->handoff_vcpu, &e, v1, false,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
		if (r == -ETIMEDOUT || r == -EINVAL) {
			uint32_t e = t;
			/* Withdraw; acquire (needed on failure: it may be our grant). A stale
			 * HANDOFF bit is cleared by the next unlock. */
			if (__atomic_compare_exchange_n(&m->handoff, &e, 0, false, __ATOMIC_ACQUIRE,
							__ATOMIC_ACQUIRE))
				return r;
			if (e == (t | GRANT)) {
				__atomic_store_n(&m->handoff, 0, __ATOMIC_RELAXED);
				return 0;
			}
			return r; /* cancelled: nothing registered any more */
		}
	}
}

/*
 * How long a woken waiter may lose to bargers before it asks for a hand-off (bounded barging).
 * LK_STARVE_NS: a few wake-ups' worth, so that a waiter that keeps losing to an owner that
 * unlocks and relocks at once (long sections, 2 threads on 2 CPUs) waits tens of microseconds,
 * not the hard bound (bench_locks long sections, 2 threads on 2 CPUs: p99 69 -> 42 us against
 * glibc's 57, p99.9 150-330 -> 46-72 us; locks/README.md "Fairness bound"). But not while our
 * own vCPU shares its physical CPU: waits there are mostly the host's turns of the owner's vCPU or
 * ours, which no hand-off shortens, and a registered target whose vCPU is descheduled holds the one
 * hand-off slot and (HANDOFF) sends every spinner to sleep: at --emu vcpus=4,pcpus=2 the short
 * bound took the p99 from 6 us to 118 us. There the hard bound alone.
 */
static uint64_t starve_bound(struct pvrt_ult *u)
{
	pvhint_t *h = lk_hints();
	bool shared = (h->valid & PVHINT_VALID_PREEMPTED) && own_vcpu_shared(mx_self(), h, u);
	return shared ? LK_STARVE_HARD_NS : LK_STARVE_NS;
}

static int lock_slow(lk_mutex_t *m, clockid_t clk, const struct timespec *abs, bool timed,
		     struct pvrt_ult *u)
{
	lk_stat(C, LK_CONTENDED);
	if (timed) {
		/* glibc's order: a bad timespec is EINVAL once the first attempt failed (not
		 * before), and a negative tv_sec is already expired. */
		if (!os_timespec_valid(abs))
			return -EINVAL;
		if (abs->tv_sec < 0)
			return -ETIMEDOUT;
	} else {
		clk = CLOCK_MONOTONIC;
		abs = NULL;
	}
	if (spin_acquire(m, 0, u))
		return 0;

	const uint32_t wbit = u ? WAITERS : KWAITERS;
	uint64_t t0 = 0;
	uint32_t extra = 0;
	for (;;) {
		uint32_t w = __atomic_load_n(&m->word, __ATOMIC_RELAXED);
		if (!(w & LOCKED)) {
			/* Acquire: see spin_acquire. */
			if (__atomic_compare_exchange_n(&m->word, &w, w | LOCKED | extra, false,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				return 0;
			continue;
		}
		if (t0 && os_now_ns() - t0 >= starve_bound(u)) {
			int r = handoff_acquire(m, clk, abs, u, wbit, t0);
			if (r != -EAGAIN)
				return r;
		}
		if (!(w & wbit)) {
			/* Relaxed: the futex compares the word under its own lock; the bit only
			 * has to be in the word before we sleep, which the CAS guarantees. */
			if (!__atomic_compare_exchange_n(&m->word, &w, w | wbit, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				continue;
			w |= wbit;
		}
		extra = wbit;
		int r = u ? lk_park(&m->word, w, clk, abs, C) : kpark(m, w, clk, abs);
		if (r == -ETIMEDOUT || r == -EINVAL)
			return r;
		/* The starvation clock starts at the first wake-up, not at the first park: until
		 * an unlock wakes us we wait for the owner (perhaps preempted for a whole host
		 * time slice), which a hand-off would not shorten; from then on we may lose to
		 * bargers. (Counting from the park made most waits behind a preempted owner end
		 * in a grant to a sleeping waiter, each one a wake-up with the lock held: under
		 * --emu vcpus=4,pcpus=2 12% of bench_locks' long-section throughput.) */
		if (!t0)
			t0 = os_now_ns();
		/* Woken: the owner changed, so spinning may pay again. */
		if (spin_acquire(m, extra, u))
			return 0;
	}
}

/* Free the word and, if the freeing raced with a hand-off registration, cancel it. */
void lk_mutex_release_slow(lk_mutex_t *m)
{
	pvhint_t *hints = NULL;
	for (;;) {
		uint32_t w = __atomic_load_n(&m->word, __ATOMIC_SEQ_CST);
		uint32_t t = __atomic_load_n(&m->handoff, __ATOMIC_SEQ_CST);
		if (is_target(t)) {
			if (!hints)
				hints = lk_hints();
			uint32_t tv = __atomic_load_n(&m->handoff_vcpu, __ATOMIC_RELAXED);
			/* A target left by a parent thread at fork would never collect a grant. */
			if (!(tv & ASLEEP) && !lk_vcpu1_preempted(hints, tv) &&
			    !lk_target_gone(t)) {
				/* Grant: keep LOCKED, drop HANDOFF; ownership passes to t. */
				if (!__atomic_compare_exchange_n(&m->word, &w, w & ~HANDOFF, false,
								 __ATOMIC_RELAXED,
								 __ATOMIC_RELAXED))
					continue;
				uint32_t e = t;
				/* Release: our critical section happens-before the target's. */
				if (__atomic_compare_exchange_n(&m->handoff, &e, t | GRANT, false,
								__ATOMIC_RELEASE,
								__ATOMIC_RELAXED)) {
					lk_stat(C, LK_HANDOFFS);
					lk_wake(&m->handoff, 1);
					return;
				}
				continue; /* the target withdrew (timeout): look again */
			}
			/* The target cannot run, or sleeps: release normally; the cancel below
			 * wakes it so it re-checks (when its vCPU runs again). */
		}
		/* Release + seq_cst: publishes our critical section and orders the free before
		 * the 'handoff' load below (against handoff_acquire's register-then-load). */
		if (!__atomic_compare_exchange_n(&m->word, &w, 0, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_RELAXED))
			continue;
		t = __atomic_load_n(&m->handoff, __ATOMIC_SEQ_CST);
		/* Wake every sleeper on 'handoff', not one: between our cancel and the wake a new
		 * target may register and sleep there too, and a wake of one would then depend on
		 * the futex's order (FIFO in rt_futex; the kernel's puts a real-time waiter
		 * first) to reach the cancelled target, which nobody would wake again. The new
		 * target finds itself still registered and sleeps again. */
		if (is_target(t) && __atomic_compare_exchange_n(&m->handoff, &t, 0, false,
								__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			lk_wake(&m->handoff, INT32_MAX);
		if (w & KWAITERS)
			kwake_one(m);
		if (w & WAITERS)
			lk_wake_one(&m->word);
		return;
	}
}

static int lock_common(lk_mutex_t *m, clockid_t clk, const struct timespec *abs, bool timed)
{
	int type = mtype(m);
	struct pvrt_ult *u = lk_self_ult();
	int tid = lk_self_id(u);
	if (type == PVRT_MUTEX_RECURSIVE || type == PVRT_MUTEX_ERRORCHECK) {
		if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == tid) {
			if (type == PVRT_MUTEX_ERRORCHECK)
				return -EDEADLK;
			if (m->count == UINT32_MAX)
				return -EAGAIN;
			m->count++;
			lk_stat(C, LK_ACQ);
			return 0;
		}
	}
	if (lk_unlikely(!try_fast(m, rt_tls_worker))) {
		int r = lock_slow(m, clk, abs, timed, u);
		if (r)
			return r;
	}
	publish_owner(m, tid, u);
	if (type == PVRT_MUTEX_RECURSIVE)
		m->count = 1;
	lk_stat(C, LK_ACQ);
	return 0;
}

void lk_mutex_publish_worker(lk_mutex_t *m)
{
	struct pvrt_ult *u = lk_self_ult();
	publish_owner(m, lk_self_id(u), u);
}

int lk_mutex_lock_slow(lk_mutex_t *m)
{
	return lock_common(m, CLOCK_MONOTONIC, NULL, false);
}

int pvrt_mutex_lock(pvrt_mutex_t *pm)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	return lk_mutex_lock(m);
}

int pvrt_mutex_timedlock(pvrt_mutex_t *pm, clockid_t clk, const struct timespec *abstime)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	if (!lk_valid_clock(clk) || !abstime)
		return -EINVAL;
	return lock_common(m, clk, abstime, true);
}

int pvrt_mutex_trylock(pvrt_mutex_t *pm)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	int type = mtype(m);
	struct pvrt_ult *u = lk_self_ult();
	int tid = lk_self_id(u);
	if (type == PVRT_MUTEX_RECURSIVE && __atomic_load_n(&m->owner, __ATOMIC_RELAXED) == tid) {
		if (m->count == UINT32_MAX)
			return -EAGAIN;
		m->count++;
		lk_stat(C, LK_ACQ);
		return 0;
	}
	uint32_t w = __atomic_load_n(&m->word, __ATOMIC_RELAXED);
	for (;;) {
		if (w & LOCKED)
			return -EBUSY;
		/* Acquire: as try_fast; keeps WAITERS/HANDOFF bits already present. */
		if (__atomic_compare_exchange_n(&m->word, &w, w | LOCKED, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
	}
	publish_owner(m, tid, u);
	if (type == PVRT_MUTEX_RECURSIVE)
		m->count = 1;
	lk_stat(C, LK_ACQ);
	return 0;
}

int pvrt_mutex_unlock(pvrt_mutex_t *pm)
{
	lk_mutex_t *m = lk_mutex_of(pm);
	if (lk_likely(mtype_plain(m)))
		return lk_mutex_unlock_plain(m);
	/* Recursive or errorcheck: only the owner may unlock. */
	if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) != lk_self_id(lk_self_ult()) ||
	    !(__atomic_load_n(&m->word, __ATOMIC_RELAXED) & LOCKED))
		return -EPERM;
	if (mtype(m) == PVRT_MUTEX_RECURSIVE && --m->count != 0)
		return 0;
	return lk_mutex_unlock_plain(m);
}
