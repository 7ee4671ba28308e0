/* SPDX-License-Identifier: MIT */
/*
 * Runtime internals shared by the runtime's C files only (locks/ sees wait.h, sched/ its own
 * pvrt_sched.h). See README.md in this folder for the design.
 */
#ifndef PVRT_RUNTIME_INTERNAL_H
#define PVRT_RUNTIME_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t, pthread_getattr_np */
#endif

#include "arch/ctx.h"
#include "futex.h"
#include "lock.h"
#include "pvrt_os.h"
#include "san.h"
#include "tls.h"
#include "wait.h"
#include "pvrt_sched.h"

#include <pvrt/key.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if !defined(PVRT_TSAN)
/* liburcu's wait-free concurrent queue, inlined (LGPL inline functions are allowed for us). */
#define _LGPL_SOURCE
#include <urcu/wfcqueue.h>
#define PVRT_INJECT_WFCQ 1
#endif

#define PVRT_CACHELINE 64
#define PVRT_ALIGNED   __attribute__((aligned(PVRT_CACHELINE)))
#define likely(x)      __builtin_expect(!!(x), 1)
#define unlikely(x)    __builtin_expect(!!(x), 0)

/* ---- allocation: jemalloc (mallocx/sdallocx) in normal builds ---- */
/*
 * Under ASan and TSan the runtime uses malloc/free: the sanitizers replace malloc and track it
 * (leaks, races), whereas jemalloc's uninstrumented recycling would make TSan report races on
 * reused memory and hide leaks from LeakSanitizer.
 */
void *pvrt_alloc(size_t size); /* zeroed, cache-line aligned */
void pvrt_free(void *p, size_t size);

/* ---- contexts ---- */
struct pvrt_ctxrec {
	void *sp; /* saved stack pointer while suspended */
	struct pvrt_san san;
};

enum pvrt_ult_state {
	ULT_FREE = 0,  /* in a descriptor pool */
	ULT_RUNNING,   /* running, or claimed by a worker about to run it */
	ULT_READY,     /* in some worker's ring: whoever CASes READY->RUNNING runs it */
	ULT_READY_INJ, /* in an injection queue: only its dequeuer runs it */
	ULT_BLOCKED,   /* waiting; only its waker makes it ready */
	ULT_DONE,      /* exited */
};

#define ULT_F_PRIMARY  1u
#define ULT_F_DETACHED 2u

struct pvrt_timer;
struct pvrt_worker;

struct pvrt_ult {
	struct pvrt_ctxrec ctx;
	uint32_t state; /* enum pvrt_ult_state; atomic */
	uint32_t flags;
	int bound; /* worker it must run on, or -1 */
	int last;  /* worker it last ran on, or -1 */
	uint64_t id;
	void *(*fn)(void *);
	void *arg;
	void *ret;
	uint32_t join; /* futex word: 0 running, 1 exited, 2 running and someone waits */
	uint32_t refs; /* handle + the ULT itself; the last one returns the descriptor */
	void *stack;   /* mapping (guard pages at its bottom), NULL for the primary */
	size_t stack_len;
	size_t guard;	  /* guard bytes at the bottom of the mapping */
	void *tp;	  /* own thread pointer (TCB, tls.c), NULL: the worker's */
	uint64_t sigmask; /* with own TLS: its signal mask, loaded when it runs (kernel sigset) */
	void *stack_top;  /* with own TLS: the stack's end, below the TLS blocks */
	unsigned vg_id;
	void *fresh_sp; /* until the first run (ctx.sp NULL): the initial frame's sp in 'frame' */
	_Alignas(16) unsigned char frame[PVRT_CTX_FRAME];
	struct pvrt_keyvals *keys;
	const void *wait_addr; /* what it waits on (debugging; M:N cancellation wakes it) */
	uint32_t cancel;       /* M:N (locks/mn.c): futex word, 1 once pthread_cancel'led */
	void *cancel_cond;     /* M:N: the condvar it waits on, for pthread_cancel */
	char name[16];	       /* M:N: pthread_setname_np */
#if PVRT_INJECT_WFCQ
	struct cds_wfcq_node qnode;
#endif
	struct pvrt_ult *qnext;	     /* injection list (TSan builds), pool free list */
	struct pvrt_ult *chunk_next; /* unused; keeps descriptors of a chunk walkable */
} PVRT_ALIGNED;

/* ---- run queues ---- */
#define PVRT_RING_SIZE 256u /* power of two */

/*
 * The local queue: single producer (the owner), multiple consumers (the owner and thieves), FIFO.
 * Consumers CAS head; the owner publishes at tail. Entries may be stale (see ult.c: claim by
 * CAS on the ULT's state), which is why descriptors are type-stable (never returned to the
 * allocator while the runtime runs).
 */
struct pvrt_ring {
	uint64_t head PVRT_ALIGNED;
	uint64_t tail PVRT_ALIGNED;
	struct pvrt_ult *buf[PVRT_RING_SIZE];
};

/* The remote injection queue: any thread enqueues (wait-free); consumers hold 'lock'. */
struct pvrt_inject {
#if PVRT_INJECT_WFCQ
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail PVRT_ALIGNED;
#else
	struct pvrt_ult *first, *last; /* under lock (TSan cannot see liburcu's inline asm) */
#endif
	struct pvrt_lock lock PVRT_ALIGNED;
	uint32_t n; /* approximate length */
};

/* ---- timers ---- */
struct pvrt_timer {
	uint64_t deadline;		  /* CLOCK_MONOTONIC ns */
	unsigned pos;			  /* 1-based heap index; 0: not queued */
	uint32_t fired;			  /* set under the heap lock when it expired */
	struct pvrt_worker *w;		  /* whose heap */
	void (*fn)(struct pvrt_timer *t); /* called under the heap lock, on the heap's worker */
};

#define PVRT_STACK_KEEP 16 /* stacks a parking worker keeps in its pool (ult.c) */
#define PVRT_POOL_LOCAL 128

struct pvrt_worker {
	/* Owner-only hot state. */
	struct pvrt_ult *cur; /* running ULT, NULL in the scheduler context */
	void (*post_fn)(struct pvrt_worker *w, void *arg); /* run by the next context, see ult.c */
	void *post_arg;
	struct pvrt_ctxrec sched; /* the scheduler context */
	unsigned idx;
	unsigned tick;	   /* scheduling decisions, to poll timers now and then */
	unsigned inj_tick; /* local picks, to take the injection queue now and then */
	uint64_t rng[2];
	struct pvrt_ult *pool; /* free descriptors, most with their stacks */
	unsigned npool;
	unsigned nstacks; /* descriptors in pool that hold a stack */
	void *hot;	  /* the default-size stack an exited ULT left warm here, or NULL */
	unsigned hot_vg;
	uint64_t nid;

	struct pvrt_ring ring;
	struct pvrt_inject inj;

	/* Idle and parking. */
	uint32_t park_word PVRT_ALIGNED; /* futex: 1 parked (or about to), 0 running */
	uint64_t poll_ns;
	uint64_t last_steal; /* pvhint_steal() at the last idle entry */
	int cpu;	     /* pinned CPU */
	unsigned vcpu;	     /* vCPU for hints */
	pthread_t thread;
	void *altstack;
	void *tp;	  /* the kernel thread's own thread pointer */
	void *cur_tp;	  /* the thread pointer loaded now */
	int tid;	  /* the kernel thread's tid */
	uint64_t sigmask; /* the kernel thread's signal mask now (per-ULT TLS mode) */

	/* Timers: a binary min-heap under 'tlock'. */
	struct pvrt_lock tlock PVRT_ALIGNED;
	struct pvrt_timer **heap;
	unsigned nheap, capheap;
	uint64_t armed; /* programmed deadline (UINT64_MAX: none); see timer.c */

	/* Statistics (owner writes; relaxed reads by pvrt_stats_get). */
	uint64_t st_created, st_switches, st_steals, st_parks, st_unparks, st_polls_found;
	uint64_t st_timer_adds, st_timer_arms, st_timer_fires;
} PVRT_ALIGNED;

struct pvrt_rt {
	int running;
	unsigned nw;
	struct pvrt_worker **w;
	const struct pvrt_sched_policy *pol;
	struct pvrt_sched_view view;
	pvhint_t *hint;
	int emu;
	size_t stack_size; /* default mapping: usable size + guard page (+ TLS reserve) */
	int ult_tls;	   /* every ULT gets its own glibc TLS (tls.c) */
	uint64_t poll_min, poll_max;
	int eager_timers;
	uint64_t timer_slack; /* ns a timer may fire late, to share fires */
	struct pvrt_ult *primary;
	uint32_t stop;
	uint32_t nlive PVRT_ALIGNED;	  /* ULTs other than the primary; futex word */
	uint32_t nparked PVRT_ALIGNED;	  /* workers with park_word == 1 */
	uint32_t nsearching PVRT_ALIGNED; /* workers halt-polling */
	uint64_t foreign_ids;
	/* Global descriptor pool and the chunks they live in. */
	struct pvrt_lock plock PVRT_ALIGNED;
	struct pvrt_ult *pool;
	uint32_t nstacks; /* descriptors in pool that hold a stack (plock; racy reads) */
	struct pvrt_chunk *chunks;
	uint64_t foreign_rng[2];
	int segv_installed;
	struct sigaction old_segv;
	stack_t old_altstack;
	cpu_set_t old_affinity;
};

extern struct pvrt_rt pvrt_rt PVRT_HIDDEN;

/* Owner-only counters read racily by pvrt_stats_get: relaxed atomics, no read-modify-write. */
#define PVRT_STAT_INC(w, f)                                                                        \
	__atomic_store_n(&(w)->f, __atomic_load_n(&(w)->f, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)

/*
 * The worker of the calling kernel thread, read again from TLS. Code that switches contexts must
 * call this after the switch: a ULT may resume on another worker, and compilers may keep a
 * thread-local address (or the thread pointer itself) in a register across a call.
 */
struct pvrt_worker *pvrt_worker_cur(void) PVRT_HIDDEN;

/* ---- ult.c ---- */
/* Make a BLOCKED (or fresh, or claimed) ULT ready; any thread. */
void pvrt_ult_ready(struct pvrt_ult *u) PVRT_HIDDEN;
/* Block the calling ULT (its state already set to BLOCKED by the caller); post(w, arg) runs in
 * the next context once this one is suspended (e.g., to release the lock its waker needs). */
void pvrt_ult_block(void (*post)(struct pvrt_worker *, void *), void *arg) PVRT_HIDDEN;
/* Pop work for worker w: local ring, injection queue; NULL if none. */
struct pvrt_ult *pvrt_local_next(struct pvrt_worker *w) PVRT_HIDDEN;
struct pvrt_ult *pvrt_steal(struct pvrt_worker *w) PVRT_HIDDEN;
bool pvrt_has_work(struct pvrt_worker *w) PVRT_HIDDEN;
void pvrt_switch(struct pvrt_worker *w, struct pvrt_ctxrec *from, struct pvrt_ult *to,
		 void (*post)(struct pvrt_worker *, void *), void *arg) PVRT_HIDDEN;
void pvrt_after_switch(void) PVRT_HIDDEN;
void pvrt_wake_worker(unsigned i) PVRT_HIDDEN;
void pvrt_pool_fini(void) PVRT_HIDDEN;
/* Free pooled stacks of w beyond PVRT_STACK_KEEP, and with global those of the global pool
 * (w's owner, about to park). */
void pvrt_stacks_trim(struct pvrt_worker *w, bool global) PVRT_HIDDEN;
void pvrt_ult_init_primary(struct pvrt_ult *u) PVRT_HIDDEN;
int pvrt_stack_alloc(size_t size, size_t guard, void **stack, unsigned *vg_id) PVRT_HIDDEN;
void pvrt_stack_free(void *stack, size_t len, unsigned vg_id) PVRT_HIDDEN;
size_t pvrt_page_size(void) PVRT_HIDDEN;
/* A descriptor for the primary ULT (the thread that called pvrt_init). */
struct pvrt_ult *pvrt_primary_alloc(void) PVRT_HIDDEN;
/* Fill in the scheduler's view of the runtime (sched/pvrt_sched.h). */
void pvrt_sched_view_init(struct pvrt_sched_view *v) PVRT_HIDDEN;

/* The calling kernel thread's signal mask (the first 64 signals, the kernel's sigset). */
uint64_t pvrt_kernel_sigmask(void) PVRT_HIDDEN;
/* The calling ULT's signal mask changed to m (already loaded on its kernel thread). */
void pvrt_ult_sigmask_changed(uint64_t m) PVRT_HIDDEN;

/* If set (the M:N preload, before it creates ULTs): every ULT runs wrap(fn, arg) instead of
 * fn(arg), and exits with its result. */
extern void *(*pvrt_ult_entry_wrap)(void *(*fn)(void *), void *arg)PVRT_HIDDEN;

/* ---- timer.c ---- */
/* 0, or -ENOMEM when the heap cannot grow (the timer is then not queued). */
int pvrt_timer_add(struct pvrt_worker *w, struct pvrt_timer *t) PVRT_HIDDEN;
void pvrt_timer_cancel(struct pvrt_timer *t) PVRT_HIDDEN;
/* Fire expired timers of w (its owner only); returns how many fired. */
unsigned pvrt_timers_run(struct pvrt_worker *w, uint64_t now) PVRT_HIDDEN;
static inline bool pvrt_timers_due(struct pvrt_worker *w, uint64_t now)
{
	/* Relaxed: only the owner writes 'armed'; a stale value only delays a check. */
	return __atomic_load_n(&w->armed, __ATOMIC_RELAXED) <= now;
}
void pvrt_timers_fini(struct pvrt_worker *w) PVRT_HIDDEN;

/* ---- key.c ---- */
void pvrt_keys_run_destructors(struct pvrt_keyvals **kv) PVRT_HIDDEN;

/* ---- runtime.c ---- */
int pvrt_fail(int err, const char *msg) PVRT_HIDDEN;
void pvrt_sched_loop(struct pvrt_worker *w) PVRT_HIDDEN;
/* In a fork child: forget the parent's runtime (leaking it) so that pvrt_init works again. */
void pvrt_fork_child_reset(void) PVRT_HIDDEN;

#endif /* PVRT_RUNTIME_INTERNAL_H */
