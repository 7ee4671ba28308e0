/* SPDX-License-Identifier: MIT */
/*
 * ULTs: descriptors, stacks, run queues, context switches, create/join/yield/exit.
 *
 * Switching protocol. A context never touches the queues on its own behalf before it is
 * suspended: e.g., a yielding ULT must not appear in a queue while it still runs on its stack, or
 * a thief could resume it twice. So every switch leaves a *post action* in the worker
 * (w->post_fn/post_arg) that the context switched to runs first thing (pvrt_after_switch):
 * requeue the yielder, release the futex bucket lock a blocker holds, recycle the stack of an
 * exited ULT. The post action runs on the same kernel thread right after the switch, so it
 * always finds it in the worker that stored it.
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

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(PVRT_ASAN) && !defined(PVRT_TSAN)
#include <jemalloc/jemalloc.h>
#endif

__thread struct pvrt_worker *rt_tls_worker;

__attribute__((noinline)) struct pvrt_worker *pvrt_worker_cur(void)
{
	/* The empty asm keeps the compiler from treating this as pure and reusing an old result. */
	__asm__ volatile("" ::: "memory");
	return rt_tls_worker;
}

/* ---------------------------------------------------------------- allocation */

void *pvrt_alloc(size_t size)
{
#if defined(PVRT_ASAN) || defined(PVRT_TSAN)
	void *p = NULL;
	if (posix_memalign(&p, PVRT_CACHELINE, size))
		return NULL;
	memset(p, 0, size);
	return p;
#else
	return mallocx(size, MALLOCX_ALIGN(PVRT_CACHELINE) | MALLOCX_ZERO);
#endif
}

void pvrt_free(void *p, size_t size)
{
	if (!p)
		return;
#if defined(PVRT_ASAN) || defined(PVRT_TSAN)
	(void)size;
	free(p);
#else
	sdallocx(p, size, MALLOCX_ALIGN(PVRT_CACHELINE));
#endif
}

/* ---------------------------------------------------------------- descriptors */

#define CHUNK_ULTS 64

struct pvrt_chunk {
	struct pvrt_chunk *next;
	unsigned n;
	struct pvrt_ult u[CHUNK_ULTS];
};

/* Debuggers find every descriptor through this (tools/gdb/pvrt.py). */
PVRT_HIDDEN struct pvrt_chunk *volatile pvrt_debug_chunks;

/*
 * Pools. A worker's pool is a list with its last element known; the global pool is a stack of
 * batches (each a list whose first descriptor holds its last one, length and stack count), so
 * moving a batch either way is O(1) under the lock: a worker that runs out takes a whole batch, a
 * worker whose pool reaches twice PVRT_POOL_LOCAL gives back all but the PVRT_POOL_LOCAL most
 * recent (still in its caches) as one batch, as Go moves Gs and stacks between a P's cache and
 * the global one. Neither walks cold descriptors, so a burst of any size costs the same per ULT.
 * Foreign threads take from and add to the top batch one descriptor at a time.
 */
static void gpool_push(struct pvrt_ult *first, struct pvrt_ult *last, unsigned n, unsigned ns)
{
	last->qnext = NULL;
	first->batch_next = pvrt_rt.pool;
	first->batch_last = last;
	first->batch_n = n;
	first->batch_ns = ns;
	pvrt_rt.pool = first;
	/* Atomic (under plock): pvrt_stacks_trim reads it without the lock. */
	__atomic_fetch_add(&pvrt_rt.nstacks, ns, __ATOMIC_RELAXED);
}

/* A new chunk's descriptors as a list; NULL without memory. Under plock. */
static struct pvrt_ult *chunk_new(void)
{
	struct pvrt_chunk *c = pvrt_alloc(sizeof(*c));
	if (!c)
		return NULL;
	c->n = CHUNK_ULTS;
	c->next = pvrt_rt.chunks;
	pvrt_rt.chunks = c;
	pvrt_debug_chunks = c;
	for (unsigned i = 0; i + 1 < CHUNK_ULTS; i++)
		c->u[i].qnext = &c->u[i + 1];
	c->u[CHUNK_ULTS - 1].qnext = NULL;
	return &c->u[0];
}

static __attribute__((noinline)) struct pvrt_ult *desc_get_slow(struct pvrt_worker *w)
{
	pvrt_lock_acquire(&pvrt_rt.plock);
	struct pvrt_ult *b = pvrt_rt.pool, *u;
	if (b) {
		__atomic_fetch_sub(&pvrt_rt.nstacks, b->batch_ns, __ATOMIC_RELAXED);
		pvrt_rt.pool = b->batch_next;
		u = b;
		if (w) { /* the whole batch: the rest is the worker's pool */
			w->pool = b->qnext;
			w->pool_last = w->pool ? b->batch_last : NULL;
			w->npool = b->batch_n - 1;
			w->nstacks = b->batch_ns - (b->stack != NULL);
		} else if (b->batch_n > 1) { /* one: the rest stays a batch */
			gpool_push(b->qnext, b->batch_last, b->batch_n - 1,
				   b->batch_ns - (b->stack != NULL));
		}
	} else {
		u = chunk_new();
		if (u && w) {
			w->pool = u->qnext;
			w->pool_last = &pvrt_rt.chunks->u[CHUNK_ULTS - 1];
			w->npool = CHUNK_ULTS - 1;
			w->nstacks = 0;
		} else if (u) {
			gpool_push(u->qnext, &pvrt_rt.chunks->u[CHUNK_ULTS - 1], CHUNK_ULTS - 1, 0);
		}
	}
	pvrt_lock_release(&pvrt_rt.plock);
	return u;
}

static inline struct pvrt_ult *desc_get(struct pvrt_worker *w)
{
	struct pvrt_ult *u;
	if (likely(w && w->pool)) {
		u = w->pool;
		w->pool = u->qnext;
		if (!w->pool)
			w->pool_last = NULL;
		w->npool--;
		w->nstacks -= u->stack != NULL;
		return u;
	}
	return desc_get_slow(w);
}

/* The worker's pool reached twice PVRT_POOL_LOCAL: all but the most recent PVRT_POOL_LOCAL go
 * to the global pool as one batch (the walk is over the recent, warm ones). */
static __attribute__((noinline)) void pool_spill(struct pvrt_worker *w)
{
	struct pvrt_ult *last = w->pool;
	unsigned ks = last->stack != NULL;
	for (unsigned i = 1; i < PVRT_POOL_LOCAL; i++) {
		last = last->qnext;
		ks += last->stack != NULL;
	}
	struct pvrt_ult *first = last->qnext, *end = w->pool_last;
	unsigned n = w->npool - PVRT_POOL_LOCAL, ns = w->nstacks - ks;
	last->qnext = NULL;
	w->pool_last = last;
	w->npool = PVRT_POOL_LOCAL;
	w->nstacks = ks;
	pvrt_lock_acquire(&pvrt_rt.plock);
	gpool_push(first, end, n, ns);
	pvrt_lock_release(&pvrt_rt.plock);
}

static void desc_put(struct pvrt_worker *w, struct pvrt_ult *u)
{
	/* Relaxed: a stale ring entry may read the state concurrently; any value but READY makes
	 * its claim fail, and the next owner initialises the descriptor before it is published. */
	__atomic_store_n(&u->state, ULT_FREE, __ATOMIC_RELAXED);
	if (likely(w)) {
		if (!w->pool)
			w->pool_last = u;
		u->qnext = w->pool;
		w->pool = u;
		w->npool++;
		w->nstacks += u->stack != NULL;
		if (unlikely(w->npool >= 2 * PVRT_POOL_LOCAL))
			pool_spill(w);
		return;
	}
	pvrt_lock_acquire(&pvrt_rt.plock);
	struct pvrt_ult *b = pvrt_rt.pool;
	if (b && b->batch_n < PVRT_POOL_LOCAL) { /* u becomes the top batch's first */
		pvrt_rt.pool = b->batch_next;
		__atomic_fetch_sub(&pvrt_rt.nstacks, b->batch_ns, __ATOMIC_RELAXED);
		u->qnext = b;
		gpool_push(u, b->batch_last, b->batch_n + 1, b->batch_ns + (u->stack != NULL));
	} else {
		gpool_push(u, u, 1, u->stack != NULL);
	}
	pvrt_lock_release(&pvrt_rt.plock);
}

void pvrt_wait_nlive_zero(void)
{
	/* Announce the wait, then read the count, both seq_cst; an exit lowers the count, then
	 * reads the announcement (seq_cst): one sees the other, so either we read 0 or the exit
	 * that makes it 0 wakes us (the futex re-checks the count under its bucket lock). */
	__atomic_fetch_add(&pvrt_rt.nlive_waiters, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		uint32_t n = __atomic_load_n(&pvrt_rt.nlive, __ATOMIC_SEQ_CST);
		if (!n)
			break;
		rt_futex_wait(&pvrt_rt.nlive, n, CLOCK_MONOTONIC, NULL);
	}
	__atomic_fetch_sub(&pvrt_rt.nlive_waiters, 1, __ATOMIC_RELAXED);
}

void pvrt_pool_fini(void)
{
	struct pvrt_chunk *c = pvrt_rt.chunks;
	while (c) {
		struct pvrt_chunk *n = c->next;
		for (unsigned i = 0; i < c->n; i++) {
			struct pvrt_ult *u = &c->u[i];
			if (u->stack)
				pvrt_stack_free(u->stack, u->stack_len, u->vg_id);
			pvrt_san_fiber_destroy(&u->ctx.san);
		}
		pvrt_free(c, sizeof(*c));
		c = n;
	}
	pvrt_rt.chunks = NULL;
	pvrt_rt.pool = NULL;
	pvrt_rt.nstacks = 0;
	pvrt_rt.stacks_mapped = 0;
	pvrt_debug_chunks = NULL;
}

/* ---------------------------------------------------------------- stacks */

size_t pvrt_page_size(void)
{
	static size_t ps;
	if (!ps)
		ps = (size_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/*
 * A stack is one mapping: a PROT_NONE guard page at the bottom, then the usable part. Pages are
 * committed by the kernel on first touch (MAP_NORESERVE), so an 8 MiB stack costs what it uses.
 */
int pvrt_stack_alloc(size_t len, size_t guard, void **out, unsigned *vg_id)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	if (mprotect(p, guard, PROT_NONE)) {
		int e = errno;
		munmap(p, len);
		return -e;
	}
	pvrt_san_stack_fresh((char *)p + guard, len - guard);
	*vg_id = pvrt_san_stack_register((char *)p + guard, (char *)p + len);
	*out = p;
	return 0;
}

void pvrt_stack_free(void *stack, size_t len, unsigned vg_id)
{
	pvrt_san_stack_deregister(vg_id);
	munmap(stack, len);
}

/* ULT stacks, counted (pvrt_stats.stacks). */
static int ult_stack_alloc(size_t len, size_t guard, void **out, unsigned *vg_id)
{
	int r = pvrt_stack_alloc(len, guard, out, vg_id);
	if (!r)
		__atomic_fetch_add(&pvrt_rt.stacks_mapped, 1, __ATOMIC_RELAXED);
	return r;
}

static void ult_stack_free(void *stack, size_t len, unsigned vg_id)
{
	pvrt_stack_free(stack, len, vg_id);
	__atomic_fetch_sub(&pvrt_rt.stacks_mapped, 1, __ATOMIC_RELAXED);
}

/*
 * A descriptor keeps its stack when it goes back to a pool, so a create takes both with one pop
 * and a program that starts many threads at once maps stacks only the first time: there is no
 * cache size to fall off. A create does not touch the stack either (it keeps the creator's
 * floating-point state; the initial frame is built at the first run), and a ULT's first run swaps
 * its stack for the worker's hot one, which an exit on that worker left warm (an exit swaps its
 * stack in): N ULTs created, then run one after the other, run on two warm stacks while the cold
 * ones only change hands. So the cost per ULT stays flat whatever N. The memory goes back when
 * idle: a worker about to park frees the stacks of its pool beyond PVRT_STACK_KEEP, and the last
 * worker to park frees those of the global pool.
 */
static void ult_entry(void *arg);

static inline void swap_hot(struct pvrt_worker *w, struct pvrt_ult *u)
{
	if (u->stack_len != pvrt_rt.stack_size || !u->stack || u->tp)
		return;
	void *s = w->hot;
	unsigned vg = w->hot_vg;
	w->hot = u->stack;
	w->hot_vg = u->vg_id;
	u->stack = s;
	u->vg_id = vg;
}

/* Before the first switch to u: give it a stack (the warm one when there is one) and build its
 * initial frame there, with the floating-point state its creator had. */
static void first_run(struct pvrt_worker *w, struct pvrt_ult *u)
{
	if (w->hot)
		swap_hot(w, u);
	/* With TLS of its own the stack ends below the TLS blocks at its top (tls.c). */
	char *end = u->tp ? (char *)u->stack_top : (char *)u->stack + u->stack_len;
	u->ctx.sp = pvrt_ctx_make_fp(end, ult_entry, u, u->fpstate);
	u->ctx.san.bottom = (char *)u->stack + u->guard;
	u->ctx.san.size = (size_t)(end - (char *)u->ctx.san.bottom);
}

static void stacks_free_list(struct pvrt_ult *u, unsigned keep)
{
	for (; u; u = u->qnext) {
		if (!u->stack)
			continue;
		if (keep) {
			keep--;
			continue;
		}
		ult_stack_free(u->stack, u->stack_len, u->vg_id);
		u->stack = NULL;
		u->tp = NULL;
	}
}

void pvrt_stacks_trim(struct pvrt_worker *w, bool global)
{
	if (w->nstacks > PVRT_STACK_KEEP) {
		stacks_free_list(w->pool, PVRT_STACK_KEEP);
		w->nstacks = PVRT_STACK_KEEP;
	}
	if (!global || !__atomic_load_n(&pvrt_rt.nstacks, __ATOMIC_RELAXED))
		return;
	/* Detach the batches so that creators (foreign threads) need not wait for the unmapping;
	 * meanwhile they find the pool empty and allocate a chunk. */
	pvrt_lock_acquire(&pvrt_rt.plock);
	struct pvrt_ult *list = pvrt_rt.pool;
	pvrt_rt.pool = NULL;
	__atomic_store_n(&pvrt_rt.nstacks, 0, __ATOMIC_RELAXED);
	pvrt_lock_release(&pvrt_rt.plock);
	if (!list)
		return;
	struct pvrt_ult *last = list;
	for (struct pvrt_ult *b = list; b; b = b->batch_next) {
		stacks_free_list(b, 0);
		b->batch_ns = 0;
		last = b;
	}
	pvrt_lock_acquire(&pvrt_rt.plock);
	last->batch_next = pvrt_rt.pool;
	pvrt_rt.pool = list;
	pvrt_lock_release(&pvrt_rt.plock);
}

/*
 * A ULT's binding: written by the ULT itself (set_worker) or its creator, read by whoever places
 * it, possibly concurrently (yield_to): relaxed atomics, a stale value only misplaces it once.
 */
static inline int ult_bound(const struct pvrt_ult *u)
{
	return __atomic_load_n(&u->bound, __ATOMIC_RELAXED);
}

/* Does u have to run on a worker other than w? */
static inline bool bound_elsewhere(const struct pvrt_ult *u, const struct pvrt_worker *w)
{
	int b = ult_bound(u);
	return b >= 0 && (unsigned)b != w->idx;
}

/* ---------------------------------------------------------------- queues */

/*
 * Make room for one more entry (owner only): double the buffer when it is full. The new buffer
 * gets the entries from head on and is published before any entry past the old capacity, so a
 * consumer that read a tail (acquire) and then the buffer finds the entry it saw in either one:
 * the old buffer is never written again. False only when the memory for a bigger one is missing.
 * Stays true until the owner pushes, since consumers only ever move head forward.
 */
static __attribute__((noinline)) bool ring_grow(struct pvrt_ring *r, struct pvrt_ringbuf *b,
						uint64_t h, uint64_t t)
{
	uint64_t cap = b ? 2 * (b->mask + 1) : PVRT_RING_SIZE;
	struct pvrt_ringbuf *nb = pvrt_alloc(sizeof(*nb) + cap * sizeof(nb->e[0]));
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

static inline bool ring_reserve(struct pvrt_ring *r)
{
	/* Acquire: a consumer read the slot we may reuse before its CAS moved head past it. */
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	struct pvrt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED); /* only we write it */
	uint64_t t = r->tail; /* only the owner writes tail */
	if (likely(b && t - h <= b->mask))
		return true;
	return ring_grow(r, b, h, t);
}

/* Append u (owner only, after ring_reserve()). */
static void ring_put(struct pvrt_ring *r, struct pvrt_ult *u)
{
	uint64_t t = r->tail;
	struct pvrt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED);
	__atomic_store_n(&b->e[t & b->mask], u, __ATOMIC_RELAXED);
	/* Release: publishes the slot (and the ULT's READY state and saved context) to consumers.
	 */
	__atomic_store_n(&r->tail, t + 1, __ATOMIC_RELEASE);
}

void pvrt_ring_fini(struct pvrt_ring *r)
{
	for (struct pvrt_ringbuf *b = r->buf, *p; b; b = p) {
		p = b->prev;
		pvrt_free(b, sizeof(*b) + (b->mask + 1) * sizeof(b->e[0]));
	}
	r->buf = NULL;
}

static inline bool ring_nonempty(const struct pvrt_ring *r)
{
	/* Relaxed: a hint for idle workers; they take entries with ring_pop's ordered accesses. */
	return __atomic_load_n(&r->tail, __ATOMIC_RELAXED) !=
	       __atomic_load_n(&r->head, __ATOMIC_RELAXED);
}

static struct pvrt_ult *ring_pop(struct pvrt_ring *r)
{
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
	for (;;) {
		/* Acquire pairs with ring_put's release of tail: the slot is written (and the
		 * buffer that holds it published, see ring_reserve). */
		uint64_t t = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
		if ((int64_t)(t - h) <= 0)
			return NULL;
		struct pvrt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_ACQUIRE);
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
static struct pvrt_ult *ring_take(struct pvrt_ring *r)
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
static inline struct pvrt_ult *ring_take_alone(struct pvrt_ring *r)
{
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
	for (; r->tail != h; h++) { /* only the owner writes tail */
		struct pvrt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED);
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

static inline bool pvrt_lock_try(struct pvrt_lock *l)
{
	uint32_t z = 0;
	return __atomic_compare_exchange_n(&l->v, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void inject_push(struct pvrt_worker *t, struct pvrt_ult *u)
{
	__atomic_store_n(&u->state, ULT_READY_INJ, __ATOMIC_RELAXED);
#if PVRT_INJECT_WFCQ
	cds_wfcq_node_init(&u->qnode);
	/* Wait-free; a full barrier before publication orders the ULT's saved state. */
	cds_wfcq_enqueue(&t->inj.head, &t->inj.tail, &u->qnode);
#else
	u->qnext = NULL;
	pvrt_lock_acquire(&t->inj.lock);
	if (t->inj.last)
		t->inj.last->qnext = u;
	else
		t->inj.first = u;
	t->inj.last = u;
	pvrt_lock_release(&t->inj.lock);
#endif
	/* Seq_cst: ordered before our read of the target's park word (see inject_to). */
	__atomic_fetch_add(&t->inj.n, 1, __ATOMIC_SEQ_CST);
}

static struct pvrt_ult *inject_pop(struct pvrt_worker *t, bool thief)
{
	if (!__atomic_load_n(&t->inj.n, __ATOMIC_RELAXED))
		return NULL;
	if (thief) {
		if (!pvrt_lock_try(&t->inj.lock))
			return NULL;
	} else {
		pvrt_lock_acquire(&t->inj.lock);
	}
	struct pvrt_ult *u = NULL;
#if PVRT_INJECT_WFCQ
	/* The lock gives the mutual exclusion among dequeuers that the __cds_ variant needs. */
	struct cds_wfcq_node *n = __cds_wfcq_dequeue_blocking(&t->inj.head, &t->inj.tail);
	if (n)
		u = caa_container_of(n, struct pvrt_ult, qnode);
#else
	u = t->inj.first;
	if (u) {
		t->inj.first = u->qnext;
		if (!t->inj.first)
			t->inj.last = NULL;
	}
#endif
	pvrt_lock_release(&t->inj.lock);
	if (u) {
		__atomic_fetch_sub(&t->inj.n, 1, __ATOMIC_RELAXED);
		/* The dequeue made it ours: nobody else can claim a READY_INJ ULT. */
		__atomic_store_n(&u->state, ULT_RUNNING, __ATOMIC_RELAXED);
	}
	return u;
}

/* ---------------------------------------------------------------- waking workers */

static bool view_parked(const struct pvrt_sched_view *v, unsigned w)
{
	(void)v;
	return __atomic_load_n(&pvrt_rt.w[w]->park_word, __ATOMIC_RELAXED) != 0;
}

static unsigned view_vcpu(const struct pvrt_sched_view *v, unsigned w)
{
	(void)v;
	/* Relaxed: set once by the worker's thread in slot mode (bpf). */
	return __atomic_load_n(&pvrt_rt.w[w]->vcpu, __ATOMIC_RELAXED);
}

static unsigned view_queued(const struct pvrt_sched_view *v, unsigned w)
{
	(void)v;
	struct pvrt_worker *x = pvrt_rt.w[w];
	uint64_t t = __atomic_load_n(&x->ring.tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&x->ring.head, __ATOMIC_RELAXED);
	return (unsigned)(t - h) + __atomic_load_n(&x->inj.n, __ATOMIC_RELAXED);
}

void pvrt_sched_view_init(struct pvrt_sched_view *v)
{
	v->nworkers = pvrt_rt.nw;
	v->hint = pvrt_rt.hint;
	v->vcpu = view_vcpu;
	v->parked = view_parked;
	v->queued = view_queued;
	v->rt = &pvrt_rt;
}

static __thread uint64_t foreign_rng[2] = {0x9E3779B97F4A7C15ull, 0};

static struct pvrt_sched_caller caller_of(struct pvrt_worker *w)
{
	struct pvrt_sched_caller c;
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
void pvrt_wake_worker(unsigned i)
{
	struct pvrt_worker *t = pvrt_rt.w[i];
	uint32_t one = 1;
	/* Seq_cst: the second half of the handshakes in inject_to and stop_workers. */
	if (__atomic_load_n(&t->park_word, __ATOMIC_SEQ_CST) == 1 &&
	    __atomic_compare_exchange_n(&t->park_word, &one, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED)) {
		__atomic_fetch_sub(&pvrt_rt.nparked, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&t->st_unparks, 1, __ATOMIC_RELAXED);
		os_futex_wake(&t->park_word, 1);
	}
}

/*
 * Work was queued locally on w: if workers are parked and none is already searching, wake one to
 * steal it. No fence: w itself is running and will run the work anyway, so a missed wake-up here
 * costs parallelism, never progress.
 */
static void notify_idle(struct pvrt_worker *w)
{
	if (pvrt_rt.nw == 1 || !__atomic_load_n(&pvrt_rt.nparked, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&pvrt_rt.nsearching, __ATOMIC_RELAXED))
		return;
	struct pvrt_sched_caller c = caller_of(w);
	int v = pvrt_rt.pol->wake_idle(&pvrt_rt.view, &c, w->idx);
	if (v >= 0 && (unsigned)v < pvrt_rt.nw && (unsigned)v != w->idx)
		pvrt_wake_worker((unsigned)v);
}

static void inject_to(struct pvrt_worker *from, unsigned target, struct pvrt_ult *u)
{
	struct pvrt_worker *t = pvrt_rt.w[target];
	inject_push(t, u);
	/*
	 * No lost wake-up with a worker going idle (see idle() in runtime.c): it sets park_word=1
	 * with a seq_cst exchange, then reads its queue count inj.n (seq_cst); we raised inj.n with
	 * a seq_cst RMW (inject_push), then read park_word (seq_cst). All four are in the single
	 * seq_cst order, so at least one side sees the other's write: it finds the work, or we find
	 * it parked and wake it. (Seq_cst operations rather than fences: TSan understands them.)
	 */
	if (__atomic_load_n(&t->park_word, __ATOMIC_SEQ_CST)) {
		pvrt_wake_worker(target);
	} else if (pvhint_vcpu_preempted(pvrt_rt.hint,
					 __atomic_load_n(&t->vcpu, __ATOMIC_RELAXED))) {
		/* The target runs but its vCPU is held by the host: let a parked worker take it. */
		struct pvrt_sched_caller c = caller_of(from);
		int v = pvrt_rt.pol->wake_idle(&pvrt_rt.view, &c, target);
		if (v >= 0 && (unsigned)v < pvrt_rt.nw)
			pvrt_wake_worker((unsigned)v);
	}
}

/* Queue a claimed or blocked ULT on w (the caller's worker) or where it is bound. */
/* Queue u, claimed or fresh and free to run on w, on w's ring (its owner). */
static inline __attribute__((always_inline)) void queue_local(struct pvrt_worker *w,
							      struct pvrt_ult *u)
{
	/*
	 * Decide on the ring before publishing READY: a stale ring entry elsewhere may claim u the
	 * moment it is READY, so a READY ULT must not then also go into an injection queue.
	 */
	if (unlikely(!ring_reserve(&w->ring))) {
		inject_push(w, u);
		return;
	}
	/* Release: whoever claims it sees its saved context. */
	__atomic_store_n(&u->state, ULT_READY, __ATOMIC_RELEASE);
	ring_put(&w->ring, u);
	if (unlikely(pvrt_rt.nw > 1))
		notify_idle(w);
}

static void requeue(struct pvrt_worker *w, struct pvrt_ult *u)
{
	int b = ult_bound(u);
	if (b >= 0 && (unsigned)b != w->idx) {
		inject_to(w, (unsigned)b, u);
		return;
	}
	queue_local(w, u);
}

static void ult_ready(struct pvrt_worker *w, struct pvrt_ult *u)
{
	unsigned target;
	int b = ult_bound(u);
	if (b >= 0) {
		target = (unsigned)b;
	} else {
		struct pvrt_sched_caller c = caller_of(w);
		target = pvrt_rt.pol->wake_target(&pvrt_rt.view, &c, u->last);
		if (target >= pvrt_rt.nw)
			target = w ? w->idx : 0;
	}
	if (w && target == w->idx)
		requeue(w, u);
	else
		inject_to(w, target, u);
}

void pvrt_ult_ready(struct pvrt_ult *u)
{
	PVRT_RT_SCOPE();
	ult_ready(rt_tls_worker, u);
}

/* A claimed ULT found in the wrong place (bound elsewhere): send it home. */
static void reroute(struct pvrt_worker *w, struct pvrt_ult *u)
{
	inject_to(w, (unsigned)ult_bound(u), u);
}

struct pvrt_ult *pvrt_local_next(struct pvrt_worker *w)
{
	for (;;) {
		/* Every 16th pick takes the injection queue first: ULTs that yield to each other
		 * keep the ring non-empty, and a ULT woken from another worker (or bound here)
		 * would otherwise never run (as Go's scheduler checks its global queue every 61
		 * ticks). */
		struct pvrt_ult *u = NULL;
		if (unlikely((++w->inj_tick & 15) == 0))
			u = inject_pop(w, false);
		if (!u)
			u = pvrt_rt.nw == 1 ? ring_take_alone(&w->ring) : ring_take(&w->ring);
		if (!u)
			u = inject_pop(w, false);
		if (!u)
			return NULL;
		if (unlikely(bound_elsewhere(u, w))) {
			reroute(w, u);
			continue;
		}
		return u;
	}
}

struct pvrt_ult *pvrt_steal(struct pvrt_worker *w)
{
	struct pvrt_sched_caller c = caller_of(w);
	for (unsigned a = 0;; a++) {
		int v = pvrt_rt.pol->steal_victim(&pvrt_rt.view, &c, a);
		if (v < 0 || (unsigned)v >= pvrt_rt.nw)
			return NULL;
		if ((unsigned)v == w->idx)
			continue;
		struct pvrt_worker *x = pvrt_rt.w[v];
		struct pvrt_ult *u = ring_take(&x->ring);
		if (!u)
			u = inject_pop(x, true);
		if (!u)
			continue;
		if (bound_elsewhere(u, w)) {
			reroute(w, u);
			continue;
		}
		PVRT_STAT_INC(w, st_steals);
		return u;
	}
}

bool pvrt_has_work(struct pvrt_worker *w)
{
	/* Seq_cst load of inj.n: the parking side of the handshake in inject_to. */
	if (ring_nonempty(&w->ring) || __atomic_load_n(&w->inj.n, __ATOMIC_SEQ_CST))
		return true;
	for (unsigned i = 0; i < pvrt_rt.nw; i++)
		if (i != w->idx && ring_nonempty(&pvrt_rt.w[i]->ring))
			return true;
	return false;
}

/* The next ULT for w when the running one yields or exits (holding no lock); checks timers now
 * and then. */
static struct pvrt_ult *pick_next(struct pvrt_worker *w)
{
	uint64_t armed = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (unlikely(armed != UINT64_MAX) && (++w->tick & 63) == 0)
		pvrt_timers_run(w, os_now_ns());
	struct pvrt_ult *u = pvrt_local_next(w);
	if (!u && armed != UINT64_MAX && pvrt_timers_run(w, os_now_ns()))
		u = pvrt_local_next(w);
	return u;
}

/* ---------------------------------------------------------------- switching */

void pvrt_after_switch(void)
{
	struct pvrt_worker *w = pvrt_worker_cur();
	if (unlikely(!w)) {
		pvrt_m_home_resumed(); /* this thread lost its worker (sysmon.c) */
		return;
	}
	pvrt_san_resumed(w->cur ? &w->cur->ctx.san : &w->sched.san);
	void (*fn)(struct pvrt_worker *, void *) = w->post_fn;
	if (fn) {
		w->post_fn = NULL;
		fn(w, w->post_arg);
	}
}

/* Suspend 'from' and run 'to' (a ULT, or w's scheduler when NULL). */
static void switch_ctx(struct pvrt_worker *w, struct pvrt_ctxrec *from, struct pvrt_ult *to,
		       void (*post)(struct pvrt_worker *, void *), void *arg, int dying)
{
	struct pvrt_ctxrec *tc = to ? &to->ctx : &w->sched;
	if (unlikely(!tc->sp))
		first_run(w, to);
	w->post_fn = post;
	w->post_arg = arg;
	__atomic_store_n(&w->cur, to, __ATOMIC_RELAXED); /* sysmon samples it */
	if (to)
		to->last = (int)w->idx;
	PVRT_STAT_INC(w, st_switches);
	pvrt_san_switch(&from->san, &tc->san, dying);
	/* ULTs with TLS of their own: the thread pointer goes with the stack (the one place). */
	void *tp = to && to->tp ? to->tp : w->tp;
	if (unlikely(tp != w->cur_tp))
		pvrt_tls_switch(w, tp);
	/* Per-ULT signal masks (with per-ULT TLS): a system call only when the next ULT's mask
	 * differs from the one loaded (the scheduler context keeps whatever is loaded). */
	if (unlikely(pvrt_rt.ult_tls) && to && to->sigmask != w->sigmask) {
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &to->sigmask, NULL, 8);
		w->sigmask = to->sigmask;
	}
	/* ld.so's locks go with the context that holds them (tls.h): a ULT that waits inside
	 * dlopen (a library constructor taking a contended lock) resumes on whichever kernel thread
	 * runs it then, and the ULTs that run here meanwhile must not take them "recursively". */
	unsigned ldso = unlikely(pvrt_rt.ult_tls) ? pvrt_tls_ldso_disown(w->tid) : 0;
	pvrt_ctx_switch(&from->sp, tc->sp);
	pvrt_after_switch();
	if (unlikely(ldso))
		pvrt_tls_ldso_own(ldso);
}

/*
 * A thread that lost its worker leaves 'self' for its own scheduler context (sysmon.c). Whatever
 * switch_ctx does per switch besides the stack (the M:N mode's thread pointer) belongs here too:
 * the home context runs with the kernel thread's own.
 */
void pvrt_switch_home(struct pvrt_ult *self, struct pvrt_m *m)
{
	/* The home context runs on the thread's own TLS (the worker went to another thread,
	 * whose thread pointer the worker now records: take()), with the kernel-thread words as
	 * this thread left them on the ULT's (no worker: pvrt_after_switch must see NULL). */
	unsigned ldso = 0;
	if (pvrt_rt.ult_tls && m->tp) {
		/* Its ld.so locks go with the ULT (see switch_ctx): a library constructor under
		 * dlopen calls pthread functions, and so enters the runtime and notices the loss.
		 * Open MPI's ranks under --mn hung in dlsym, the primary waiting on a lock owned
		 * by the tid it had left. */
		ldso = pvrt_tls_ldso_disown(m->tid);
		pvrt_tls_home(m->tp);
	}
	pvrt_san_switch(&self->ctx.san, &m->home.san, 0);
	pvrt_ctx_switch(&self->ctx.sp, m->home.sp);
	pvrt_after_switch();
	if (ldso)
		pvrt_tls_ldso_own(ldso);
}

void pvrt_switch(struct pvrt_worker *w, struct pvrt_ctxrec *from, struct pvrt_ult *to,
		 void (*post)(struct pvrt_worker *, void *), void *arg)
{
	switch_ctx(w, from, to, post, arg, 0);
}

static void post_requeue(struct pvrt_worker *w, void *arg)
{
	requeue(w, arg);
}

static void post_ready(struct pvrt_worker *w, void *arg)
{
	(void)w;
	pvrt_ult_ready(arg);
}

void pvrt_ult_block(void (*post)(struct pvrt_worker *, void *), void *arg)
{
	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w->cur;
	/*
	 * No timers fired here: the caller may hold a lock its post action releases (a futex
	 * bucket), and a timer callback may need that very lock. When timers are due, go to the
	 * scheduler context instead: it fires them after the post action ran.
	 */
	struct pvrt_ult *next = NULL;
	uint64_t armed = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (likely(armed == UINT64_MAX) || (++w->tick & 63) || !pvrt_timers_due(w, os_now_ns()))
		next = pvrt_local_next(w);
	switch_ctx(w, &self->ctx, next, post, arg, 0);
}

bool rt_ult_try_yield_to(struct pvrt_ult *u)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w ? w->cur : NULL;
	if (!self || !u || u == self || bound_elsewhere(u, w))
		return false;
	uint32_t s = ULT_READY;
	/* Acquire: pairs with the release that made it READY (its context is saved). */
	if (!__atomic_compare_exchange_n(&u->state, &s, ULT_RUNNING, 0, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return false;
	switch_ctx(w, &self->ctx, u, post_requeue, self, 0);
	return true;
}

bool rt_ult_can_yield_to(const struct pvrt_ult *u)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = pvrt_worker_cur();
	struct pvrt_ult *self = w ? w->cur : NULL;
	/* Relaxed: a hint; rt_ult_try_yield_to's CAS decides. */
	return self && u && u != self && !bound_elsewhere(u, w) &&
	       __atomic_load_n(&u->state, __ATOMIC_RELAXED) == ULT_READY;
}

uint64_t pvrt_kernel_sigmask(void)
{
	uint64_t m = 0;
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, 8);
	return m;
}

void pvrt_ult_sigmask_changed(uint64_t m)
{
	struct pvrt_worker *w = pvrt_worker_cur();
	if (w && w->cur) {
		w->cur->sigmask = m;
		w->sigmask = m;
	}
}

struct pvrt_ult *rt_ult_current(void)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = rt_tls_worker;
	return w ? w->cur : NULL;
}

int rt_worker_vcpu(void)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = rt_tls_worker;
	return w ? (int)w->vcpu : pvhint_self_vcpu();
}

/* ---------------------------------------------------------------- life cycle */

/*
 * The join word says who owns an exited ULT's descriptor, so neither side needs a reference
 * count: 0 running, 2 running and a joiner waits, 3 running and detached (nobody will join), 1
 * exited and off its stack. The exit stores 1 once it is off the stack (post_exit); a joiner that
 * reads 1 owns the descriptor and returns it, an exit that finds 3 returns it, a detach that finds
 * 1 returns it.
 */
static void post_exit(struct pvrt_worker *w, void *arg)
{
	struct pvrt_ult *u = arg;
	/* Keep the warm stack on this worker; the descriptor takes the previous one (or none; see
	 * pvrt_stacks_trim). With TLS of its own, the ULT keeps its stack: the TCB on it names the
	 * thread (tp stays valid) until the descriptor is reused. */
	if (u->tp)
		pvrt_tls_release(u->tp);
	else
		swap_hot(w, u);
	pvrt_san_fiber_destroy(&u->ctx.san);
	/* Acq_rel: release publishes ret and everything the ULT did to the joiner (acquire load
	 * of 1); acquire, for a detached one, what the detacher did before its exchange. */
	uint32_t j = __atomic_exchange_n(&u->join, 1, __ATOMIC_ACQ_REL);
	if (j == 3)
		desc_put(w, u);
	else if (j == 2) /* the joiner may own u already: the wake only uses the address (a
			  * reused descriptor's joiner gets a spurious wake-up, and re-checks) */
		rt_futex_wake(&u->join, INT_MAX);
}

__attribute__((noreturn)) static void ult_exit(struct pvrt_ult *self, void *ret)
{
	if (self->tp)
		pvrt_tls_exit();
	if (self->keys)
		pvrt_keys_run_destructors(&self->keys);
	self->ret = ret;
	__atomic_store_n(&self->state, ULT_DONE, __ATOMIC_RELAXED);
	/* Seq_cst, then the waiters' count: see pvrt_wait_nlive_zero. Nobody waits but finalize,
	 * so the last exit of a batch does not go through the futex table. */
	if (__atomic_sub_fetch(&pvrt_rt.nlive, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&pvrt_rt.nlive_waiters, __ATOMIC_SEQ_CST))
		rt_futex_wake(&pvrt_rt.nlive, INT_MAX);
	struct pvrt_worker *w = pvrt_worker_cur();
	struct pvrt_ult *next = pick_next(w);
	/* The joiner learns of the exit in post_exit, once we are off the stack. */
	switch_ctx(w, &self->ctx, next, post_exit, self, 1);
	__builtin_unreachable();
}

void *(*pvrt_ult_entry_wrap)(void *(*fn)(void *), void *arg);

static void ult_entry(void *arg)
{
	pvrt_after_switch();
	struct pvrt_ult *u = arg;
	/* The switch left the switcher's depth: a fresh ULT starts outside the runtime. */
	struct pvrt_m *m = pvrt_m_cur();
	if (m) /* release: as pvrt_rt_leave_slow */
		__atomic_store_n(&m->inrt, 0, __ATOMIC_RELEASE);
	if (u->tp)
		pvrt_tls_start();
	void *(*wrap)(void *(*)(void *), void *) = pvrt_ult_entry_wrap;
	void *r = wrap ? wrap(u->fn, u->arg) : u->fn(u->arg);
	pvrt_rt_enter(); /* never left: the exit switch saves it */
	ult_exit(u, r);
}

void pvrt_ult_init_primary(struct pvrt_ult *u)
{
	memset(u, 0, sizeof(*u));
	u->flags = ULT_F_PRIMARY;
	u->bound = 0;
	u->last = 0;
	u->id = 1;
	u->state = ULT_RUNNING;
	u->sigmask = pvrt_kernel_sigmask();
	pvrt_san_thread_context(&u->ctx.san);
}

/* The calling thread's own stack and sanitizer fiber, for a context that runs on it. */
void pvrt_san_thread_context(struct pvrt_san *s)
{
	pthread_attr_t a;
	if (!pthread_getattr_np(pthread_self(), &a)) {
		void *lo;
		size_t sz;
		if (!pthread_attr_getstack(&a, &lo, &sz)) {
			s->bottom = lo;
			s->size = sz;
		}
		pthread_attr_destroy(&a);
	}
	pvrt_san_fiber_current(s);
}

struct pvrt_ult *pvrt_primary_alloc(void)
{
	return desc_get(NULL);
}

/* The attributes of a create, checked; 0 or a negative errno (message set). Not inlined: the
 * common create has none. */
static __attribute__((noinline)) int create_attr(const pvrt_thread_attr_t *attr, size_t *len,
						 size_t *guard, int *detached, int *bound)
{
	size_t ps = pvrt_page_size();
	pvrt_thread_attr_t a;
	if (attr->size < sizeof(attr->size))
		return pvrt_fail(-EINVAL, "pvrt_thread_create: attr not initialised "
					  "(pvrt_thread_attr_init or PVRT_THREAD_ATTR_INIT)");
	if (attr->size < sizeof(a)) { /* fields past the program's: default */
		pvrt_thread_attr_init(&a);
		memcpy(&a, attr, attr->size);
		attr = &a;
	}
	if (attr->stack_size || attr->guard_size) {
		size_t st = attr->stack_size;
		if (st && (st < PVRT_STACK_MIN || st > PVRT_STACK_MAX))
			return pvrt_fail(-EINVAL, "pvrt_thread_create: stack size out of range");
		if (attr->guard_size > PVRT_STACK_MAX)
			return pvrt_fail(-EINVAL, "pvrt_thread_create: guard size out of range");
		if (attr->guard_size)
			*guard = (attr->guard_size + ps - 1) / ps * ps;
		if (st)
			*len = (st + ps - 1) / ps * ps + *guard +
			       (pvrt_rt.ult_tls ? pvrt_tls_reserve() : 0);
		else
			*len += *guard - ps;
	}
	if (attr->detached != 0 && attr->detached != 1)
		return pvrt_fail(-EINVAL, "pvrt_thread_create: detached must be 0 or 1");
	*detached = attr->detached;
	if (attr->worker < -1 || attr->worker >= (int)pvrt_rt.nw)
		return pvrt_fail(-EINVAL, "pvrt_thread_create: no such worker");
	*bound = attr->worker;
	return 0;
}

/* A descriptor whose stack does not fit (another size or guard) or is missing: map one. */
static __attribute__((noinline)) int create_stack(struct pvrt_ult *u, size_t len, size_t guard)
{
	if (u->stack) {
		ult_stack_free(u->stack, u->stack_len, u->vg_id);
		u->stack = NULL;
	}
	int r = ult_stack_alloc(len, guard, &u->stack, &u->vg_id);
	if (r)
		return r;
	u->stack_len = len;
	u->guard = guard;
	return 0;
}

int pvrt_thread_create(pvrt_thread_t *out, const pvrt_thread_attr_t *attr, void *(*fn)(void *),
		       void *arg)
{
	/* No switch in here: a create never waits (a lock of the global pool sleeps in the kernel).
	 */
	PVRT_RT_SCOPE_NOSWITCH();
	if (!fn)
		return pvrt_fail(-EINVAL, "pvrt_thread_create: fn is NULL");
	if (!__atomic_load_n(&pvrt_rt.running, __ATOMIC_ACQUIRE))
		return pvrt_fail(-ENXIO, "pvrt_thread_create: the runtime is not running");
	size_t len = pvrt_rt.stack_size;
	size_t guard = pvrt_page_size();
	int detached = 0, bound = -1;
	if (attr) {
		int r = create_attr(attr, &len, &guard, &detached, &bound);
		if (r)
			return r;
	}
	if (!out && !detached)
		return pvrt_fail(-EINVAL, "pvrt_thread_create: out is NULL for a joinable ULT");

	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *u = desc_get(w);
	if (!u)
		return pvrt_fail(-ENOMEM, "pvrt_thread_create: out of memory");
	/* The steady state: the descriptor's stack fits, no system call. */
	if (unlikely(!u->stack || u->stack_len != len || u->guard != guard)) {
		int r = create_stack(u, len, guard);
		if (r) {
			desc_put(w, u);
			return pvrt_fail(r, "pvrt_thread_create: cannot map a stack");
		}
	}
	u->tp = NULL;
	if (unlikely(pvrt_rt.ult_tls)) {
		u->tp = pvrt_tls_create(u, u->stack, len, guard, &u->stack_top);
		if (!u->tp) {
			ult_stack_free(u->stack, len, u->vg_id);
			u->stack = NULL;
			desc_put(w, u);
			return pvrt_fail(-ENOMEM, "pvrt_thread_create: no memory for the TLS");
		}
		/* As a thread, it inherits its creator's signal mask. */
		struct pvrt_ult *cu = w ? w->cur : NULL;
		u->sigmask = cu ? cu->sigmask : pvrt_kernel_sigmask();
	}
	u->flags = detached ? ULT_F_DETACHED : 0;
	__atomic_store_n(&u->bound, bound, __ATOMIC_RELAXED);
	u->last = -1;
	if (likely(w))
		u->id = (++w->nid << 12) | w->idx;
	else
		u->id =
		    (__atomic_add_fetch(&pvrt_rt.foreign_ids, 1, __ATOMIC_RELAXED) << 12) | 0xfff;
	u->fn = fn;
	u->arg = arg;
	u->ret = NULL;
	u->join = detached ? 3 : 0;
	u->keys = NULL;
	u->cancel = 0;
	/* wait_addr and cancel_cond are NULL outside waits, name is the old ULT's (name_id): the
	 * descriptor's cold lines stay untouched. */
	u->ctx.san.asan_fake = NULL;
	pvrt_san_fiber_create(&u->ctx.san);
	/* The frame is built on the stack at the first run (first_run), with the creator's
	 * floating-point state: a create does not touch the stack. */
	u->ctx.sp = NULL;
	u->fpstate = pvrt_ctx_fpstate();
	/* Relaxed: finalize only needs the count to be exact once every creator is done. */
	__atomic_add_fetch(&pvrt_rt.nlive, 1, __ATOMIC_RELAXED);
	if (out)
		*out = u;
	if (likely(w)) {
		PVRT_STAT_INC(w, st_created);
		/* A ULT created on a worker starts in that worker's queue (as Go's newproc puts it
		 * in its P's): every policy's wake_target picks the caller's worker for a caller
		 * that is a worker, so the call is skipped here; a bound one goes to its worker. */
		if (bound < 0)
			queue_local(w, u);
		else
			ult_ready(w, u);
	} else {
		ult_ready(NULL, u);
	}
	return 0;
}

/* Join a ULT that has not exited yet: run it now if it is still queued, else wait. */
static __attribute__((noinline)) int join_wait(struct pvrt_ult *t, void **ret)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w ? w->cur : NULL;
	if (t == self)
		return pvrt_fail(-EDEADLK, "pvrt_thread_join: a ULT cannot join itself");
	if (t->flags & (ULT_F_DETACHED | ULT_F_PRIMARY))
		return pvrt_fail(-EINVAL, "pvrt_thread_join: not a joinable ULT");
	/* Still queued and ready? Run it now rather than block and wait for it. */
	if (self)
		rt_ult_try_yield_to(t);
	for (;;) {
		/* Acquire pairs with post_exit's exchange: ret is visible. */
		uint32_t j = __atomic_load_n(&t->join, __ATOMIC_ACQUIRE);
		if (j == 1)
			break;
		/* Announce a waiter so that the exit calls wake; the futex re-checks the value. */
		if (j == 0 && !__atomic_compare_exchange_n(&t->join, &j, 2, 0, __ATOMIC_RELAXED,
							   __ATOMIC_RELAXED))
			continue;
		rt_futex_wait(&t->join, 2, CLOCK_MONOTONIC, NULL);
	}
	if (ret)
		*ret = t->ret;
	desc_put(pvrt_worker_cur(), t); /* the waits may have moved us */
	return 0;
}

int pvrt_thread_join(pvrt_thread_t t, void **ret)
{
	if (!t)
		return pvrt_fail(-EINVAL, "pvrt_thread_join: NULL thread");
	/* Exited (acquire: pairs with post_exit's exchange, ret is visible)? Then it is ours and
	 * neither the caller itself nor the primary (which never exits). */
	if (__atomic_load_n(&t->join, __ATOMIC_ACQUIRE) != 1)
		return join_wait(t, ret);
	if (t->flags & ULT_F_DETACHED)
		return pvrt_fail(-EINVAL, "pvrt_thread_join: not a joinable ULT");
	if (ret)
		*ret = t->ret;
	PVRT_RT_SCOPE_NOSWITCH(); /* the pool is the worker's */
	desc_put(rt_tls_worker, t);
	return 0;
}

int pvrt_thread_detach(pvrt_thread_t t)
{
	PVRT_RT_SCOPE();
	if (!t || (t->flags & (ULT_F_DETACHED | ULT_F_PRIMARY)))
		return pvrt_fail(-EINVAL, "pvrt_thread_detach: not a joinable ULT");
	/* The flag only guards against a later join on this handle; the join word does the work
	 * (see post_exit). */
	t->flags |= ULT_F_DETACHED;
	uint32_t j = __atomic_load_n(&t->join, __ATOMIC_ACQUIRE);
	while (j != 1)
		if (__atomic_compare_exchange_n(&t->join, &j, 3, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return 0;
	desc_put(rt_tls_worker, t); /* it exited: ours */
	return 0;
}

int pvrt_thread_yield(void)
{
	PVRT_RT_SCOPE();
	struct pvrt_worker *w = rt_tls_worker;
	if (!w || !w->cur)
		return 0;
	struct pvrt_ult *next = pick_next(w);
	if (!next)
		return 0;
	struct pvrt_ult *self = w->cur;
	switch_ctx(w, &self->ctx, next, post_requeue, self, 0);
	return 0;
}

int pvrt_thread_yield_to(pvrt_thread_t t)
{
	PVRT_RT_SCOPE();
	if (!rt_ult_current())
		return pvrt_fail(-EPERM, "pvrt_thread_yield_to: not called from a ULT");
	if (!rt_ult_try_yield_to(t))
		return pvrt_thread_yield();
	return 0;
}

pvrt_thread_t pvrt_thread_self(void)
{
	return rt_ult_current();
}

uint64_t pvrt_thread_id(pvrt_thread_t t)
{
	return t ? t->id : 0;
}

int pvrt_thread_exit(void *ret)
{
	PVRT_RT_SCOPE();
	struct pvrt_ult *self = rt_ult_current();
	if (!self)
		return pvrt_fail(-EPERM, "pvrt_thread_exit: not called from a ULT");
	if (self->flags & ULT_F_PRIMARY)
		return pvrt_fail(-EPERM, "pvrt_thread_exit: the primary ULT cannot exit");
	ult_exit(self, ret);
}

int pvrt_thread_set_worker(int wi)
{
	PVRT_RT_SCOPE();
	struct pvrt_ult *self = rt_ult_current();
	if (!self)
		return pvrt_fail(-EPERM, "pvrt_thread_set_worker: not called from a ULT");
	if (self->flags & ULT_F_PRIMARY)
		return pvrt_fail(-EPERM,
				 "pvrt_thread_set_worker: the primary ULT stays on worker 0");
	if (wi == -1) {
		__atomic_store_n(&self->bound, -1, __ATOMIC_RELAXED);
		return 0;
	}
	if (wi < 0 || wi >= (int)pvrt_rt.nw)
		return pvrt_fail(-EINVAL, "pvrt_thread_set_worker: no such worker");
	__atomic_store_n(&self->bound, wi, __ATOMIC_RELAXED);
	if ((unsigned)wi == rt_tls_worker->idx)
		return 0;
	/* Off this worker: suspend, and let the next context queue us on the bound worker. */
	__atomic_store_n(&self->state, ULT_BLOCKED, __ATOMIC_RELAXED);
	pvrt_ult_block(post_ready, self);
	return 0;
}

int pvrt_thread_sleep(uint64_t ns)
{
	PVRT_RT_SCOPE();
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t t = (uint64_t)ts.tv_nsec + ns % 1000000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000ull + t / 1000000000ull);
	ts.tv_nsec = (long)(t % 1000000000ull);
	if (!rt_ult_current()) {
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		return 0;
	}
	/* Nobody wakes this word: the wait ends by its timeout (spurious wake-ups loop). */
	uint32_t word = 0;
	while (rt_futex_wait(&word, 0, CLOCK_MONOTONIC, &ts) == 0)
		;
	return 0;
}
