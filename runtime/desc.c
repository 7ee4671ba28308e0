/* SPDX-License-Identifier: MIT */
/*
 * ULT memory: runtime allocations, descriptors (chunks, per-worker and global pools) and stacks
 * (mapping, counting, trimming when idle). Descriptors are type-stable until pvrt_finalize() (see
 * "Claiming" in queue.c); a descriptor keeps its stack in the pools (the warm stack: ult.c).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if !defined(PVRT_ASAN) && !defined(PVRT_TSAN)
#include <jemalloc/jemalloc.h>
#endif

/* ---------------------------------------------------------------- allocation */

void *rt_alloc(size_t size)
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

void rt_free(void *p, size_t size)
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

struct rt_chunk {
	struct rt_chunk *next;
	unsigned n;
	struct pvrt_ult u[CHUNK_ULTS];
};

/* Debuggers find every descriptor through this (tools/gdb/pvrt.py). */
PVRT_HIDDEN struct rt_chunk *volatile rt_debug_chunks;

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
	first->batch_next = rt_state.pool;
	first->batch_last = last;
	first->batch_n = n;
	first->batch_ns = ns;
	rt_state.pool = first;
	/* Atomic (under plock): rt_stacks_trim reads it without the lock. */
	__atomic_fetch_add(&rt_state.nstacks, ns, __ATOMIC_RELAXED);
}

/* A new chunk's descriptors as a list; NULL without memory. Under plock. */
static struct pvrt_ult *chunk_new(void)
{
	struct rt_chunk *c = rt_alloc(sizeof(*c));
	if (!c)
		return NULL;
	c->n = CHUNK_ULTS;
	c->next = rt_state.chunks;
	rt_state.chunks = c;
	rt_debug_chunks = c;
	for (unsigned i = 0; i + 1 < CHUNK_ULTS; i++)
		c->u[i].qnext = &c->u[i + 1];
	c->u[CHUNK_ULTS - 1].qnext = NULL;
	return &c->u[0];
}

__attribute__((noinline)) struct pvrt_ult *rt_desc_get_slow(struct rt_worker *w)
{
	rt_lock_acquire(&rt_state.plock);
	struct pvrt_ult *b = rt_state.pool, *u;
	if (b) {
		__atomic_fetch_sub(&rt_state.nstacks, b->batch_ns, __ATOMIC_RELAXED);
		rt_state.pool = b->batch_next;
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
			w->pool_last = &rt_state.chunks->u[CHUNK_ULTS - 1];
			w->npool = CHUNK_ULTS - 1;
			w->nstacks = 0;
		} else if (u) {
			gpool_push(u->qnext, &rt_state.chunks->u[CHUNK_ULTS - 1], CHUNK_ULTS - 1,
				   0);
		}
	}
	rt_lock_release(&rt_state.plock);
	return u;
}

/* The worker's pool reached twice PVRT_POOL_LOCAL: all but the most recent PVRT_POOL_LOCAL go
 * to the global pool as one batch (the walk is over the recent, warm ones). */
static __attribute__((noinline)) void pool_spill(struct rt_worker *w)
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
	rt_lock_acquire(&rt_state.plock);
	gpool_push(first, end, n, ns);
	rt_lock_release(&rt_state.plock);
}

void rt_desc_put(struct rt_worker *w, struct pvrt_ult *u)
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
	rt_lock_acquire(&rt_state.plock);
	struct pvrt_ult *b = rt_state.pool;
	if (b && b->batch_n < PVRT_POOL_LOCAL) { /* u becomes the top batch's first */
		rt_state.pool = b->batch_next;
		__atomic_fetch_sub(&rt_state.nstacks, b->batch_ns, __ATOMIC_RELAXED);
		u->qnext = b;
		gpool_push(u, b->batch_last, b->batch_n + 1, b->batch_ns + (u->stack != NULL));
	} else {
		gpool_push(u, u, 1, u->stack != NULL);
	}
	rt_lock_release(&rt_state.plock);
}

void rt_pool_fini(void)
{
	struct rt_chunk *c = rt_state.chunks;
	while (c) {
		struct rt_chunk *n = c->next;
		for (unsigned i = 0; i < c->n; i++) {
			struct pvrt_ult *u = &c->u[i];
			if (u->stack)
				rt_stack_free(u->stack, u->stack_len, u->vg_id);
			rt_san_fiber_destroy(&u->ctx.san);
		}
		rt_free(c, sizeof(*c));
		c = n;
	}
	rt_state.chunks = NULL;
	rt_state.pool = NULL;
	rt_state.nstacks = 0;
	rt_state.stacks_mapped = 0;
	rt_debug_chunks = NULL;
}

/* ---------------------------------------------------------------- stacks */

/*
 * A stack is one mapping: a PROT_NONE guard page at the bottom, then the usable part. Pages are
 * committed by the kernel on first touch (MAP_NORESERVE), so an 8 MiB stack costs what it uses.
 */
int rt_stack_alloc(size_t len, size_t guard, void **out, unsigned *vg_id)
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
	rt_san_stack_fresh((char *)p + guard, len - guard);
	*vg_id = rt_san_stack_register((char *)p + guard, (char *)p + len);
	*out = p;
	return 0;
}

void rt_stack_free(void *stack, size_t len, unsigned vg_id)
{
	rt_san_stack_deregister(vg_id);
	munmap(stack, len);
}

/* ULT stacks, counted (pvrt_stats.stacks). */
int rt_ult_stack_alloc(size_t len, size_t guard, void **out, unsigned *vg_id)
{
	int r = rt_stack_alloc(len, guard, out, vg_id);
	if (!r)
		__atomic_fetch_add(&rt_state.stacks_mapped, 1, __ATOMIC_RELAXED);
	return r;
}

void rt_ult_stack_free(void *stack, size_t len, unsigned vg_id)
{
	rt_stack_free(stack, len, vg_id);
	__atomic_fetch_sub(&rt_state.stacks_mapped, 1, __ATOMIC_RELAXED);
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
		rt_ult_stack_free(u->stack, u->stack_len, u->vg_id);
		u->stack = NULL;
		u->tp = NULL;
	}
}

void rt_stacks_trim(struct rt_worker *w, bool global)
{
	if (w->nstacks > PVRT_STACK_KEEP) {
		stacks_free_list(w->pool, PVRT_STACK_KEEP);
		w->nstacks = PVRT_STACK_KEEP;
	}
	if (!global || !__atomic_load_n(&rt_state.nstacks, __ATOMIC_RELAXED))
		return;
	/* Detach the batches so that creators (foreign threads) need not wait for the unmapping;
	 * meanwhile they find the pool empty and allocate a chunk. */
	rt_lock_acquire(&rt_state.plock);
	struct pvrt_ult *list = rt_state.pool;
	rt_state.pool = NULL;
	__atomic_store_n(&rt_state.nstacks, 0, __ATOMIC_RELAXED);
	rt_lock_release(&rt_state.plock);
	if (!list)
		return;
	struct pvrt_ult *last = list;
	for (struct pvrt_ult *b = list; b; b = b->batch_next) {
		stacks_free_list(b, 0);
		b->batch_ns = 0;
		last = b;
	}
	rt_lock_acquire(&rt_state.plock);
	last->batch_next = rt_state.pool;
	rt_state.pool = list;
	rt_lock_release(&rt_state.plock);
}
