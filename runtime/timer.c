/* SPDX-License-Identifier: MIT */
/*
 * Per-worker timers for sleeps and timed waits, armed lazily.
 *
 * Each worker keeps a binary min-heap of deadlines and one *programmed deadline* ('armed'): the
 * time at which it must look at its heap. A running worker compares the clock with it at
 * scheduling points; a parked worker hands it to the kernel as the timeout of its futex park, so
 * it is the worker's kernel timer. Programming it is an "arm" (counted).
 *
 * Lazy arming is the TSC-deadline trick of the guest kernel applied here: adding a timer re-arms
 * only if its deadline is earlier than the armed one; cancelling never re-arms (the armed
 * deadline may then fire for nothing, which is cheap); when the armed deadline fires, every
 * expired timer runs and the next earliest deadline is armed from there. 'armed' is therefore
 * never later than the earliest pending deadline, which is all correctness needs. The eager
 * variant (PVRT_TIMER=eager) re-arms at every add and cancel, for comparison.
 *
 * Slack, as the kernel's hrtimers have it (timer_slack_ns): a timer with deadline d may fire
 * anywhere in [d, d + slack]. The worker arms the earliest d + slack and, when that fires, runs
 * every timer whose d has passed, so timers close together share one fire and one arm. The
 * slack (PVRT_TIMER_SLACK_NS, default 50 us like Linux's) applies to both variants.
 *
 * Timers are added only by the heap's own worker (a ULT arms on the worker it runs on) and fire
 * only there; cancellation may come from any worker. A timer fires under the heap lock, so a
 * canceller that takes the lock knows the callback is over when it gets it.
 */
#include "internal.h"

#include <errno.h>

#include <stdlib.h>

static void arm(struct rt_worker *w, uint64_t dl)
{
	/* Relaxed: the owner reads it racily and only ever checks too early, never too late. */
	__atomic_store_n(&w->armed, dl, __ATOMIC_RELAXED);
	if (dl != UINT64_MAX)
		__atomic_fetch_add(&w->st_timer_arms, 1, __ATOMIC_RELAXED);
}

static void heap_set(struct rt_worker *w, unsigned i, struct rt_timer *t)
{
	w->heap[i] = t;
	t->pos = i + 1;
}

static void sift_up(struct rt_worker *w, unsigned i)
{
	struct rt_timer *t = w->heap[i];
	while (i) {
		unsigned p = (i - 1) / 2;
		if (w->heap[p]->deadline <= t->deadline)
			break;
		heap_set(w, i, w->heap[p]);
		i = p;
	}
	heap_set(w, i, t);
}

static void sift_down(struct rt_worker *w, unsigned i)
{
	struct rt_timer *t = w->heap[i];
	for (;;) {
		unsigned c = 2 * i + 1;
		if (c >= w->nheap)
			break;
		if (c + 1 < w->nheap && w->heap[c + 1]->deadline < w->heap[c]->deadline)
			c++;
		if (t->deadline <= w->heap[c]->deadline)
			break;
		heap_set(w, i, w->heap[c]);
		i = c;
	}
	heap_set(w, i, t);
}

static void heap_remove(struct rt_worker *w, struct rt_timer *t)
{
	unsigned i = t->pos - 1;
	t->pos = 0;
	w->nheap--;
	if (i == w->nheap)
		return;
	struct rt_timer *last = w->heap[w->nheap];
	heap_set(w, i, last);
	if (i && w->heap[(i - 1) / 2]->deadline > last->deadline)
		sift_up(w, i);
	else
		sift_down(w, i);
}

int rt_timer_add(struct rt_worker *w, struct rt_timer *t)
{
	t->w = w;
	t->fired = 0;
	rt_lock_acquire(&w->tlock);
	if (w->nheap == w->capheap) {
		unsigned cap = w->capheap ? 2 * w->capheap : 64;
		struct rt_timer **h = rt_alloc(cap * sizeof(*h));
		if (!h) {
			rt_lock_release(&w->tlock);
			return -ENOMEM; /* not queued: the caller must not wait for it */
		}
		for (unsigned i = 0; i < w->nheap; i++)
			h[i] = w->heap[i];
		rt_free(w->heap, w->capheap * sizeof(*h));
		w->heap = h;
		w->capheap = cap;
	}
	heap_set(w, w->nheap, t);
	w->nheap++;
	sift_up(w, w->nheap - 1);
	if (rt_state.eager_timers)
		arm(w, w->heap[0]->deadline + rt_state.timer_slack);
	else if (t->deadline + rt_state.timer_slack < w->armed)
		arm(w, t->deadline + rt_state.timer_slack);
	rt_lock_release(&w->tlock);
	__atomic_fetch_add(&w->st_timer_adds, 1, __ATOMIC_RELAXED);
	return 0;
}

void rt_timer_cancel(struct rt_timer *t)
{
	struct rt_worker *w = t->w;
	if (!w)
		return;
	rt_lock_acquire(&w->tlock);
	if (t->pos) {
		heap_remove(w, t);
		if (rt_state.eager_timers)
			arm(w, w->nheap ? w->heap[0]->deadline + rt_state.timer_slack : UINT64_MAX);
	}
	rt_lock_release(&w->tlock);
}

unsigned rt_timers_run(struct rt_worker *w, uint64_t now)
{
	if (!rt_timers_due(w, now))
		return 0;
	unsigned n = 0;
	rt_lock_acquire(&w->tlock);
	if (w->armed <= now)
		__atomic_fetch_add(&w->st_timer_fires, 1, __ATOMIC_RELAXED);
	w->wake_front = 1; /* the sleepers it wakes run before ULTs that yielded (queue.c) */
	while (w->nheap && w->heap[0]->deadline <= now) {
		struct rt_timer *t = w->heap[0];
		heap_remove(w, t);
		t->fired = 1;
		t->fn(t);
		n++;
	}
	w->wake_front = 0;
	/* Arm the next deadline from here (both variants). */
	arm(w, w->nheap ? w->heap[0]->deadline + rt_state.timer_slack : UINT64_MAX);
	rt_lock_release(&w->tlock);
	return n;
}

void rt_timers_fini(struct rt_worker *w)
{
	rt_free(w->heap, w->capheap * sizeof(*w->heap));
	w->heap = NULL;
	w->nheap = w->capheap = 0;
}
