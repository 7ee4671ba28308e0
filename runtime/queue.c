/* SPDX-License-Identifier: MIT */
/*
 * Run queues and placement: the per-worker rings and injection queues, waking parked workers,
 * where a ready ULT goes (its binding, the policy's wake target), local picks and steals. The
 * owner's side of a ring and rt_queue_local are inline in internal.h, for create (ult.c).
 *
 * Claiming. A ready ULT sits in a ring (state READY) or in an injection queue (READY_INJ).
 * Whoever moves READY->RUNNING with a CAS runs it; ring entries whose CAS fails are stale and
 * skipped. That lets yield_to() take a ULT out of any ring without searching it. Stale entries
 * can outlive the ULT, so descriptors are type-stable: they go back to pools, never to the
 * allocator, until pvrt_finalize(). A stale entry then either fails the CAS or finds another
 * READY ULT in the same descriptor, which it may legitimately run.
 */
#define _GNU_SOURCE
#include "internal.h"

/* ---------------------------------------------------------------- queues */

/*
 * Make room for one more entry (owner only): double the buffer when it is full. The new buffer
 * gets the entries from head on and is published before any entry past the old capacity, so a
 * consumer that read a tail (acquire) and then the buffer finds the entry it saw in either one:
 * the old buffer is never written again. False only when the memory for a bigger one is missing.
 * Stays true until the owner pushes, since consumers only ever move head forward.
 */
__attribute__((noinline)) bool rt_ring_grow(struct rt_ring *r, struct rt_ringbuf *b, uint64_t h,
					    uint64_t t)
{
	uint64_t cap = b ? 2 * (b->mask + 1) : PVRT_RING_SIZE;
	struct rt_ringbuf *nb = rt_alloc(sizeof(*nb) + cap * sizeof(nb->e[0]));
	if (!nb)
		return false;
	nb->mask = cap - 1;
	nb->prev = b;
	for (uint64_t i = h; b && i != t; i++)
		nb->e[i & nb->mask] = __atomic_load_n(&b->e[i & b->mask], __ATOMIC_RELAXED);
	/* Release: the copied entries are visible to whoever reads the new buffer. */
	__atomic_store_n(&r->buf, nb, __ATOMIC_RELEASE);
	return true;
}

void rt_ring_fini(struct rt_ring *r)
{
	for (struct rt_ringbuf *b = r->buf, *p; b; b = p) {
		p = b->prev;
		rt_free(b, sizeof(*b) + (b->mask + 1) * sizeof(b->e[0]));
	}
	r->buf = NULL;
}

static inline bool ring_nonempty(const struct rt_ring *r)
{
	/* Relaxed: a hint for idle workers; they take entries with ring_pop's ordered accesses. */
	return __atomic_load_n(&r->tail, __ATOMIC_RELAXED) !=
	       __atomic_load_n(&r->head, __ATOMIC_RELAXED);
}

static struct pvrt_ult *ring_pop(struct rt_ring *r)
{
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
	for (;;) {
		/* Acquire pairs with rt_ring_put's release of tail: the slot is written (and the
		 * buffer that holds it published, see rt_ring_reserve). */
		uint64_t t = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
		if ((int64_t)(t - h) <= 0)
			return NULL;
		struct rt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_ACQUIRE);
		struct pvrt_ult *u = __atomic_load_n(&b->e[h & b->mask], __ATOMIC_RELAXED);
		/*
		 * The slot can only be overwritten after head moved past h, which makes this CAS
		 * fail; so a successful CAS means u was the entry at h. Acq_rel: acquire orders
		 * our later use of u after the CAS, release lets the owner's head load see we are
		 * done with the slot.
		 */
		if (__atomic_compare_exchange_n(&r->head, &h, h + 1, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return u;
	}
}

/* Pop entries until one can be claimed (READY->RUNNING). */
static struct pvrt_ult *ring_take(struct rt_ring *r)
{
	for (;;) {
		struct pvrt_ult *u = ring_pop(r);
		if (!u)
			return NULL;
		uint32_t s = ULT_READY;
		/* Acquire pairs with the release that made it READY: its context is saved. */
		if (__atomic_compare_exchange_n(&u->state, &s, ULT_RUNNING, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return u;
	}
}

/* ring_take by the owner when it is the only consumer (one worker: nobody steals, and yield_to
 * runs on workers), without the CAS on head or the claim. */
static inline struct pvrt_ult *ring_take_alone(struct rt_ring *r)
{
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
	for (; r->tail != h; h++) { /* only the owner writes tail */
		struct rt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED);
		struct pvrt_ult *u = __atomic_load_n(&b->e[h & b->mask], __ATOMIC_RELAXED);
		/* Acquire pairs with the release that made it READY: its context is saved. */
		if (__atomic_load_n(&u->state, __ATOMIC_ACQUIRE) == ULT_READY) {
			__atomic_store_n(&r->head, h + 1, __ATOMIC_RELAXED);
			__atomic_store_n(&u->state, ULT_RUNNING, __ATOMIC_RELAXED);
			return u;
		}
	}
	__atomic_store_n(&r->head, h, __ATOMIC_RELAXED);
	return NULL;
}

static inline bool rt_lock_try(struct rt_lock *l)
{
	uint32_t z = 0;
	return __atomic_compare_exchange_n(&l->v, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static struct pvrt_ult *inject_pop(struct rt_worker *t, bool thief)
{
	if (!__atomic_load_n(&t->inj.n, __ATOMIC_RELAXED))
		return NULL;
	if (thief) {
		if (!rt_lock_try(&t->inj.lock))
			return NULL;
	} else {
		rt_lock_acquire(&t->inj.lock);
	}
	struct pvrt_ult *u = NULL;
#if PVRT_INJECT_WFCQ
	/*
	 * The lock gives the mutual exclusion among dequeuers that the __cds_ variant needs.
	 * Nonblocking: where an enqueuer has swung the tail but not yet linked its node (it was
	 * preempted between its two stores), the blocking variant sleeps in poll(2) for 10 ms
	 * with our lock held, and sets errno to EINTR under the preemption signal, in the ULT's
	 * own TLS (a program's errno changed across a yield). Here nothing is taken for now (the
	 * ULT held back may be an earlier one, linked and counted). Nothing is lost: the owner
	 * keeps seeing inj.n >= 1, so it does not park, and the stalled enqueuer raises inj.n and
	 * checks the park word once linked (inject_to); a thief gives up and tries elsewhere.
	 */
	struct cds_wfcq_node *n = __cds_wfcq_dequeue_nonblocking(&t->inj.head, &t->inj.tail);
	bool linking = n == CDS_WFCQ_WOULDBLOCK;
	if (n && !linking)
		u = caa_container_of(n, struct pvrt_ult, qnode);
#else
	u = t->inj.first;
	if (u) {
		t->inj.first = u->qnext;
		if (!t->inj.first)
			t->inj.last = NULL;
	}
#endif
	rt_lock_release(&t->inj.lock);
#if PVRT_INJECT_WFCQ
	/* The owner would find the count raised and come straight back: give the enqueuer (on
	 * this CPU, perhaps) the CPU instead of spinning on its second store. */
	if (linking && !thief)
		os_yield();
#endif
	if (u) {
		__atomic_fetch_sub(&t->inj.n, 1, __ATOMIC_RELAXED);
		/* The dequeue made it ours: nobody else can claim a READY_INJ ULT. */
		__atomic_store_n(&u->state, ULT_RUNNING, __ATOMIC_RELAXED);
	}
	return u;
}

/* ---------------------------------------------------------------- waking workers */

static bool view_parked(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	return __atomic_load_n(&rt_state.w[w]->park_word, __ATOMIC_RELAXED) != 0;
}

static unsigned view_vcpu(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	/* Relaxed: set once by the worker's thread in slot mode (bpf). */
	return __atomic_load_n(&rt_state.w[w]->vcpu, __ATOMIC_RELAXED);
}

static unsigned view_queued(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	struct rt_worker *x = rt_state.w[w];
	uint64_t t = __atomic_load_n(&x->ring.tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&x->ring.head, __ATOMIC_RELAXED);
	return (unsigned)(t - h) + __atomic_load_n(&x->inj.n, __ATOMIC_RELAXED);
}

static bool view_running(const struct rt_sched_view *v, unsigned w)
{
	(void)v;
	/* Relaxed: a snapshot (sysmon samples the same word). */
	return __atomic_load_n(&rt_state.w[w]->cur, __ATOMIC_RELAXED) != NULL;
}

void rt_sched_view_init(struct rt_sched_view *v)
{
	v->nworkers = rt_state.nw;
	v->hint = rt_state.hint;
	v->vcpu = view_vcpu;
	v->parked = view_parked;
	v->queued = view_queued;
	v->running = view_running;
	v->rt = &rt_state;
}

static __thread uint64_t foreign_rng[2] = {0x9E3779B97F4A7C15ull, 0};

static struct rt_sched_caller caller_of(struct rt_worker *w)
{
	struct rt_sched_caller c;
	if (w) {
		c.worker = (int)w->idx;
		c.rng = w->rng;
	} else {
		c.worker = -1;
		if (!foreign_rng[1])
			foreign_rng[0] ^= (uint64_t)(uintptr_t)&c, foreign_rng[1] = 1;
		c.rng = foreign_rng;
	}
	return c;
}

/* Wake worker i if it is parked. Whoever moves park_word 1->0 accounts for it in nparked. */
void rt_wake_worker(unsigned i)
{
	struct rt_worker *t = rt_state.w[i];
	uint32_t one = 1;
	/* Seq_cst: the second half of the handshakes in inject_to and stop_workers. */
	if (__atomic_load_n(&t->park_word, __ATOMIC_SEQ_CST) == 1 &&
	    __atomic_compare_exchange_n(&t->park_word, &one, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED)) {
		__atomic_fetch_sub(&rt_state.nparked, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&t->st_unparks, 1, __ATOMIC_RELAXED);
		os_futex_wake(&t->park_word, 1);
	}
}

/*
 * Work was queued locally on w: if workers are parked and none is already searching, wake one to
 * steal it. No fence: w itself is running and will run the work anyway, so a missed wake-up here
 * costs parallelism, never progress.
 */
void rt_notify_idle(struct rt_worker *w)
{
	if (rt_state.nw == 1 || !__atomic_load_n(&rt_state.nparked, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&rt_state.nsearching, __ATOMIC_RELAXED))
		return;
	struct rt_sched_caller c = caller_of(w);
	int v = rt_state.pol->wake_idle(&rt_state.view, &c, w->idx);
	if (v >= 0 && (unsigned)v < rt_state.nw && (unsigned)v != w->idx)
		rt_wake_worker((unsigned)v);
}

static void inject_to(struct rt_worker *from, unsigned target, struct pvrt_ult *u)
{
	struct rt_worker *t = rt_state.w[target];
	rt_inject_push(t, u);
	/*
	 * No lost wake-up with a worker going idle (see idle() in worker.c): it sets park_word=1
	 * with a seq_cst exchange, then reads its queue count inj.n (seq_cst); we raised inj.n with
	 * a seq_cst RMW (rt_inject_push), then read park_word (seq_cst). All four are in the
	 * single seq_cst order, so at least one side sees the other's write: it finds the work, or
	 * we find it parked and wake it. (Seq_cst operations rather than fences: TSan understands
	 * them.)
	 */
	if (__atomic_load_n(&t->park_word, __ATOMIC_SEQ_CST)) {
		rt_wake_worker(target);
	} else if (pvhint_vcpu_preempted(rt_state.hint,
					 __atomic_load_n(&t->vcpu, __ATOMIC_RELAXED))) {
		/* The target runs but its vCPU is held by the host: let a parked worker take it. */
		struct rt_sched_caller c = caller_of(from);
		int v = rt_state.pol->wake_idle(&rt_state.view, &c, target);
		if (v >= 0 && (unsigned)v < rt_state.nw)
			rt_wake_worker((unsigned)v);
	}
}

/* Queue a claimed or blocked ULT on w (the caller's worker) or where it is bound. */
void rt_requeue(struct rt_worker *w, struct pvrt_ult *u)
{
	int b = rt_ult_bound(u);
	if (b >= 0 && (unsigned)b != w->idx) {
		inject_to(w, (unsigned)b, u);
		return;
	}
	rt_queue_local(w, u);
}

void rt_ult_ready_from(struct rt_worker *w, struct pvrt_ult *u)
{
	unsigned target;
	int b = rt_ult_bound(u);
	if (b >= 0) {
		target = (unsigned)b;
	} else {
		struct rt_sched_caller c = caller_of(w);
		target = rt_state.pol->wake_target(&rt_state.view, &c, u->last);
		if (target >= rt_state.nw)
			target = w ? w->idx : 0;
	}
	/* A ULT woken here goes ahead of ULTs that were preempted here (they compute): into the
	 * injection queue, which picks take first (rt_local_next), as CFS favours a wakee and
	 * Go's goready puts it in runnext; so does a sleeper whose timer fires here (wake_front),
	 * which the pick after a preemption must not leave behind the other computing ULTs.
	 * Else the ring, cheaper: a barrier's release wakes every waiter there (through the
	 * injection queue the M:N barrier kernels took 8-30 % longer). */
	if (w && target == w->idx && !w->wake_front && !w->ring_busy) {
		rt_requeue(w, u);
	} else {
		inject_to(w, target, u);
		if (w && target == w->idx && rt_state.nw > 1)
			rt_notify_idle(w); /* as rt_queue_local: a parked worker may take it */
	}
}

void rt_ult_ready(struct pvrt_ult *u)
{
	PVRT_RT_SCOPE();
	rt_ult_ready_from(rt_tls_worker, u);
}

/* A claimed ULT found in the wrong place (bound elsewhere): send it home. */
static void reroute(struct rt_worker *w, struct pvrt_ult *u)
{
	inject_to(w, (unsigned)rt_ult_bound(u), u);
}

struct pvrt_ult *rt_local_next(struct rt_worker *w)
{
	for (;;) {
		/* The injection queue first: ULTs woken from other workers and sleepers whose
		 * timers fired here wait there, and they run before the ULTs that yielded or were
		 * preempted (the ring), as a woken thread runs soon under CFS; on a worker whose
		 * ULTs compute they used to wait for 16 picks, a slice each. Every 16th pick takes
		 * the ring first, so that ULTs waking each other through the injection queue do
		 * not starve the ring. */
		struct pvrt_ult *u = NULL;
		if (likely((++w->inj_tick & 15) != 0))
			u = inject_pop(w, false);
		if (!u) {
			u = rt_state.nw == 1 ? ring_take_alone(&w->ring) : ring_take(&w->ring);
			if (!u)
				w->ring_busy = 0; /* no preempted ULT waits here any more */
		}
		if (!u)
			u = inject_pop(w, false);
		if (!u)
			return NULL;
		if (unlikely(rt_bound_elsewhere(u, w))) {
			reroute(w, u);
			continue;
		}
		return u;
	}
}

struct pvrt_ult *rt_steal(struct rt_worker *w)
{
	struct rt_sched_caller c = caller_of(w);
	for (unsigned a = 0;; a++) {
		int v = rt_state.pol->steal_victim(&rt_state.view, &c, a);
		if (v < 0 || (unsigned)v >= rt_state.nw)
			return NULL;
		if ((unsigned)v == w->idx)
			continue;
		struct rt_worker *x = rt_state.w[v];
		struct pvrt_ult *u = ring_take(&x->ring);
		if (!u)
			u = inject_pop(x, true);
		if (!u)
			continue;
		if (rt_bound_elsewhere(u, w)) {
			reroute(w, u);
			continue;
		}
		PVRT_STAT_INC(w, st_steals);
		/* A rescue: work its own vCPU could not run now (whatever the policy's reason for
		 * trying this victim). */
		if (pvhint_vcpu_preempted(rt_state.hint,
					  __atomic_load_n(&x->vcpu, __ATOMIC_RELAXED)))
			PVRT_STAT_INC(w, st_rescues);
		return u;
	}
}

bool rt_has_work_others(struct rt_worker *w, bool others)
{
	/* Seq_cst load of inj.n: the parking side of the handshake in inject_to. */
	if (ring_nonempty(&w->ring) || __atomic_load_n(&w->inj.n, __ATOMIC_SEQ_CST))
		return true;
	if (!others)
		return false;
	for (unsigned i = 0; i < rt_state.nw; i++)
		if (i != w->idx && ring_nonempty(&rt_state.w[i]->ring))
			return true;
	return false;
}
