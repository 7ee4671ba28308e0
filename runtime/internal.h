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
void *rt_alloc(size_t size); /* zeroed, cache-line aligned */
void rt_free(void *p, size_t size);

/* ---- contexts ---- */
struct rt_ctxrec {
	void *sp; /* saved stack pointer while suspended */
	struct rt_san san;
};

enum rt_ult_state {
	ULT_FREE = 0,  /* in a descriptor pool */
	ULT_RUNNING,   /* running, or claimed by a worker about to run it */
	ULT_READY,     /* in some worker's ring: whoever CASes READY->RUNNING runs it */
	ULT_READY_INJ, /* in an injection queue: only its dequeuer runs it */
	ULT_BLOCKED,   /* waiting; only its waker makes it ready */
	ULT_DONE,      /* exited */
	ULT_PARKING,   /* a futex waiter still switching away (futex.c): its waker marks it */
	ULT_WOKEN,     /* ... WOKEN, and the switch's post action makes it ready */
};

#define ULT_F_PRIMARY  1u
#define ULT_F_DETACHED 2u

struct rt_timer;
struct rt_worker;
struct rt_m;

struct pvrt_ult {
	/* What create, the first run, exit and join touch comes first (under three cache lines of
	 * the four): a batch of thousands of ULTs lives in the caches that much longer. */
	struct rt_ctxrec ctx;
	uint32_t state; /* enum rt_ult_state; atomic */
	uint32_t flags;
	int bound;	 /* worker it must run on, or -1 */
	int last;	 /* worker it last ran on, or -1 */
	uint32_t join;	 /* futex word: 0 running, 1 exited, 2 someone waits, 3 detached (ult.c) */
	uint32_t cancel; /* M:N (locks/mn.c): futex word, 1 once pthread_cancel'led */
	uint64_t id;
	void *(*fn)(void *);
	void *arg;
	void *ret;
	void *stack; /* mapping (guard pages at its bottom), NULL for the primary */
	size_t stack_len;
	size_t guard;	  /* guard bytes at the bottom of the mapping */
	void *tp;	  /* own thread pointer (TCB, tls.c), NULL: the worker's */
	uint64_t fpstate; /* until the first run (ctx.sp NULL): the creator's, for the frame */
	struct rt_keyvals *keys;
	struct pvrt_ult *qnext; /* injection list (TSan builds), pool free list */
	unsigned vg_id;
	/* Rarely used. */
	uint64_t sigmask; /* with own TLS: its signal mask, loaded when it runs (kernel sigset) */
	void *stack_top;  /* with own TLS: the stack's end, below the TLS blocks */
	const void *wait_addr; /* what it waits on (atomic; debugging, M:N cancellation wakes it) */
	uint64_t name_id;      /* M:N: 'name' is this ULT's if name_id == id (no reset at create) */
	char name[16];	       /* M:N: pthread_setname_np */
#if PVRT_INJECT_WFCQ
	struct cds_wfcq_node qnode;
#endif
	/* In the global pool, in a batch's first descriptor (desc.c): the next batch, the batch's
	 * last descriptor, its length and how many of them hold a stack. */
	struct pvrt_ult *batch_next;
	struct pvrt_ult *batch_last;
	uint32_t batch_n, batch_ns;
} PVRT_ALIGNED;

/* ---- run queues ---- */
#define PVRT_RING_SIZE 256u /* first capacity (a power of two); the ring doubles when full */

/* A ring's entries; 'prev' chains the buffers it outgrew (freed at finalize: a thief may still
 * read one). */
struct rt_ringbuf {
	uint64_t mask; /* capacity - 1 */
	struct rt_ringbuf *prev;
	struct pvrt_ult *e[];
};

/*
 * The local queue: single producer (the owner), multiple consumers (the owner and thieves), FIFO.
 * Consumers CAS head; the owner publishes at tail. Entries may be stale (see queue.c: claim by
 * CAS on the ULT's state), which is why descriptors are type-stable (never returned to the
 * allocator while the runtime runs). The owner doubles the buffer when it is full (as a
 * Chase-Lev deque grows), so a burst of N creates never spills into the injection queue.
 */
struct rt_ring {
	uint64_t head PVRT_ALIGNED;
	uint64_t tail PVRT_ALIGNED;
	struct rt_ringbuf *buf; /* atomic: the owner replaces it when it grows; NULL: none yet */
};
void rt_ring_fini(struct rt_ring *r) PVRT_HIDDEN;

/* The remote injection queue: any thread enqueues (wait-free); consumers hold 'lock'. */
struct rt_inject {
#if PVRT_INJECT_WFCQ
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail PVRT_ALIGNED;
#else
	struct pvrt_ult *first, *last; /* under lock (TSan cannot see liburcu's inline asm) */
#endif
	struct rt_lock lock PVRT_ALIGNED;
	uint32_t n; /* approximate length */
};

/* ---- timers ---- */
struct rt_timer {
	uint64_t deadline;		/* CLOCK_MONOTONIC ns */
	unsigned pos;			/* 1-based heap index; 0: not queued */
	uint32_t fired;			/* set under the heap lock when it expired */
	struct rt_worker *w;		/* whose heap */
	void (*fn)(struct rt_timer *t); /* called under the heap lock, on the heap's worker */
};

#define PVRT_STACK_KEEP 16 /* stacks a parking worker keeps in its pool (desc.c) */
#define PVRT_POOL_LOCAL 128

struct rt_worker {
	/* Owner-only hot state. */
	struct pvrt_ult *cur; /* running ULT, NULL in the scheduler context */
	void (*post_fn)(struct rt_worker *w, void *arg); /* run by the next context, see ult.c */
	void *post_arg;
	struct rt_ctxrec sched; /* the scheduler context */
	unsigned idx;
	unsigned tick;	     /* scheduling decisions, to poll timers now and then */
	unsigned inj_tick;   /* local picks, to take the ring first now and then */
	uint32_t timer_poke; /* sysmon saw timers due while ULTs run here (atomic; pick_next) */
	uint32_t wake_front; /* timers firing: their wake-ups go ahead of the ring (queue.c) */
	uint32_t ring_busy; /* a preempted ULT went to the ring since it was last empty (queue.c) */
	uint64_t rng[2];
	struct pvrt_ult *pool; /* free descriptors, most with their stacks */
	struct pvrt_ult *pool_last;
	unsigned npool;
	unsigned nstacks; /* descriptors in pool that hold a stack */
	void *hot;	  /* the default-size stack an exited ULT left warm here, or NULL */
	unsigned hot_vg;
	uint64_t nid;
	uint64_t nexited; /* ULTs that exited here (with st_created: rt_wait_nlive_zero) */

	struct rt_ring ring;
	struct rt_inject inj;

	/* Idle and parking. */
	uint32_t park_word PVRT_ALIGNED; /* futex: 1 parked (or about to), 0 running */
	uint64_t poll_ns;
	uint64_t last_steal; /* pvhint_steal() at the last idle entry */
	int cpu;	     /* pinned CPU */
	unsigned vcpu;	     /* vCPU for hints */
	pthread_t thread;
	void *altstack;
	void *tp;	     /* the kernel thread's own thread pointer */
	void *cur_tp;	     /* the thread pointer loaded now */
	int tid;	     /* the kernel thread's tid */
	uint64_t sigmask;    /* the kernel thread's signal mask now (per-ULT TLS mode) */
	uint32_t sm_loading; /* reading rt_sigmask_common to load it (sigmask.c's wait) */

	/* Timers: a binary min-heap under 'tlock'. */
	struct rt_lock tlock PVRT_ALIGNED;
	struct rt_timer **heap;
	unsigned nheap, capheap;
	uint64_t armed; /* programmed deadline (UINT64_MAX: none); see timer.c */

	/* Statistics (owner writes; relaxed reads by pvrt_stats_get). */
	uint64_t st_created, st_switches, st_steals, st_parks, st_unparks, st_polls_found;
	uint64_t st_timer_adds, st_timer_arms, st_timer_fires;

	/* Preemption and hand-off (sysmon.c, preempt.c). */
	struct rt_m *owner;   /* kernel thread running this worker's scheduler (sysmon hands it) */
	uint64_t preempt_seq; /* sysmon's request: st_switches + 1 when sent, 0 none */
	uint64_t sm_switches; /* sysmon's last sample of st_switches */
	uint64_t sm_since;    /* when that sample first took this value */
	uint64_t sm_kick;     /* sysmon's next preemption kick for this sample (0: at a slice) */
	uint64_t st_preempts, st_handoffs, st_lends, st_rescues;
} PVRT_ALIGNED;

/*
 * A kernel thread that can run a worker's scheduler: Go's M to the worker's P (sysmon.c). Workers'
 * own threads, the thread that called pvrt_init and spares created for hand-offs.
 */
struct rt_m {
	uint32_t inrt;		   /* runtime depth of the running context (rt_enter) */
	uint32_t insys;		   /* in an announced system call (pvrt_syscall_enter) */
	uint32_t lost;		   /* 0, 1 sysmon is taking its worker, 2 taken (see sysmon.c) */
	uint32_t park;		   /* futex word of a spare waiting for a worker */
	uint32_t kicked;	   /* a preemption signal is on its way to this thread */
	struct rt_worker *give;	   /* worker given to this spare */
	struct pvrt_ult *lost_ult; /* the ULT it ran when its worker was taken */
	struct pvrt_ult *post_ult; /* that ULT, readied by the home context */
	struct rt_ctxrec home;	   /* its scheduler context (saved there once it lost its worker) */
	void *tp; /* its own thread pointer (M:N mode: the home context runs on it) */
	pid_t tid;
	int statfd;	  /* /proc/thread-self/stat, read by sysmon; -1 */
	int slot;	  /* its thread slot (bpf hints): the record of a worker it runs */
	int emu;	  /* attached to the emulator (to its worker's vCPU, or parked) */
	int emu_parked;	  /* parked there: it holds no worker (rt_m_emu_idle) */
	uint32_t sm_idle; /* waiting for a worker with sm_mask loaded (sigmask.c) */
	uint64_t sm_mask; /* the mask it loaded then */
	int main;	  /* the thread that called pvrt_init: only ever takes worker 0 back */
	int spare;	  /* started by sysmon */
	int reserve;	  /* a spare started ahead of need: joins the spares list once set up */
	pthread_t thread;
	void *altstack;
	struct rt_m *next; /* every M, under rt_state.mlock */
	struct rt_m *spare_next;
} PVRT_ALIGNED;

struct rt_state {
	int running;
	unsigned nw;
	struct rt_worker **w;
	const struct rt_sched_policy *pol;
	struct rt_sched_view view;
	pvhint_t *hint;
	int emu;
	int slots;	   /* the hint records are thread slots (bpf): a worker's is its thread's */
	int can_lend;	   /* the source can yield to a vCPU (pvhint_can_yield): idle() lends */
	size_t stack_size; /* default mapping: usable size + guard page (+ TLS reserve) */
	size_t page_size;  /* rt_page_size(), the default guard */
	int ult_tls;	   /* every ULT gets its own glibc TLS (tls.c) */
	uint64_t poll_min, poll_max;
	int eager_timers;
	uint64_t timer_slack; /* ns a timer may fire late, to share fires */
	struct pvrt_ult *primary;
	uint32_t stop;
	/* ULTs alive: the workers' st_created plus foreign_ids, minus their nexited (ult.c). */
	uint32_t nlive_waiters PVRT_ALIGNED; /* threads waiting for none to be alive */
	uint32_t exit_seq;		     /* futex: bumped by exits while someone waits */
	uint32_t nparked PVRT_ALIGNED;	     /* workers with park_word == 1 */
	uint32_t nsearching PVRT_ALIGNED;    /* workers halt-polling */
	uint64_t foreign_ids;
	/* Global descriptor pool and the chunks they live in. */
	struct rt_lock plock PVRT_ALIGNED;
	struct pvrt_ult *pool;	/* batches of free descriptors (desc.c) */
	uint32_t nstacks;	/* descriptors in pool that hold a stack (plock; racy reads) */
	uint64_t stacks_mapped; /* ULT stacks mapped now: running, pooled or hot (pvrt_stats) */
	struct rt_chunk *chunks;
	uint64_t foreign_rng[2];
	int segv_installed;
	struct sigaction old_segv;
	stack_t old_altstack;
	cpu_set_t old_affinity;

	/* Preemption and hand-off (sysmon.c, preempt.c). */
	uint64_t slice;	  /* preemption time slice, ns; 0: off */
	uint64_t handoff; /* hand a worker stuck this long in the kernel to a spare, ns; 0: off */
	int preempt_anywhere; /* not only in the executable: ULTs own their TLS (M:N mode) */
	int preempt_sig;
	struct rt_lock mlock;
	struct rt_m *ms, *spares, *main_m;
	unsigned nspares;    /* atomic; written under mlock */
	uint32_t spares_seq; /* futex: bumped when a spare joins the list */
	uint32_t spawn_seq;  /* futex: bumped to wake the spawner (the list emptied, or stop) */
	pthread_t spawner;   /* starts reserve spares (sysmon.c) */
	int spawner_on;
	pthread_t sysmon;
	int sysmon_on;
	uint32_t sm_word PVRT_ALIGNED; /* futex: sysmon sleeps (1) or ticks (0) */
	int asym_fence;		       /* membarrier() works: the other side needs no fence */
	int entry_fence;	       /* hand-offs on without membarrier: entries fence */
};

extern struct rt_state rt_state PVRT_HIDDEN;

/* Owner-only counters read racily by pvrt_stats_get: relaxed atomics, no read-modify-write. */
#define PVRT_STAT_INC(w, f)                                                                        \
	__atomic_store_n(&(w)->f, __atomic_load_n(&(w)->f, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)

/*
 * The worker of the calling kernel thread, read again from TLS. Code that switches contexts must
 * call this after the switch: a ULT may resume on another worker, and compilers may keep a
 * thread-local address (or the thread pointer itself) in a register across a call.
 */
struct rt_worker *rt_worker_cur(void) PVRT_HIDDEN;

/* ---- sysmon.c: kernel threads, hand-off ---- */
extern __thread struct rt_m *rt_tls_m __attribute__((tls_model("initial-exec"))) PVRT_HIDDEN;
struct rt_m *rt_m_cur(void) PVRT_HIDDEN; /* read again after a switch, like rt_worker_cur */
void rt_m_lost(struct rt_m *m) PVRT_HIDDEN;
bool rt_asym_fence(void) PVRT_HIDDEN; /* membarrier, or a fence where it is missing */

/*
 * Runtime sections. Code that uses the calling worker's state (or a runtime lock) runs between
 * rt_enter and rt_leave: it is never preempted there (preempt.c), and sysmon never
 * hands its worker to another kernel thread meanwhile (sysmon.c). Leaving restores the depth
 * saved at entry, on whatever thread the context then runs: a context resumed after a switch
 * inherits the switcher's depth (at least 1: switches happen in the runtime) until its own
 * sections leave, so the depth is always the running context's. Entering
 * is also where a kernel thread that lost its worker while blocked in the kernel notices it.
 * The M side is a plain store and load: sysmon's side has the fence (membarrier), else a fence
 * here (only while hand-offs are on).
 */
/*
 * Raise m's depth; true if m lost its worker meanwhile and this is the outermost entry (the
 * caller then calls rt_m_lost). sysmon takes a worker only from an M at depth 0, so a nested
 * entry that sees the loss runs inside the outer one's way to rt_m_lost (a preemption signal
 * landing in the sched_yield system call of its wait for sysmon): only the outer one takes it.
 */
static inline bool rt_depth_up(struct rt_m *m, uint32_t *depth)
{
	uint32_t d = __atomic_load_n(&m->inrt, __ATOMIC_RELAXED);
	__atomic_store_n(&m->inrt, d + 1, __ATOMIC_RELAXED);
	if (unlikely(rt_state.entry_fence))
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	else
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	*depth = d;
	return unlikely(__atomic_load_n(&m->lost, __ATOMIC_ACQUIRE)) && d == 0;
}

static inline int rt_enter(void)
{
	struct rt_m *m = rt_tls_m;
	if (!m)
		return -1;
	uint32_t d;
	if (rt_depth_up(m, &d))
		rt_m_lost(m);
	return (int)d;
}

/* Restores the depth saved by the matching enter, on the thread the context runs on now. */
void rt_leave_slow(uint32_t depth) PVRT_HIDDEN;
static inline void rt_leave(int depth)
{
	if (depth >= 0)
		rt_leave_slow((uint32_t)depth);
}

static inline void rt_scope_end(int *depth)
{
	rt_leave(*depth);
}

/* The rest of the enclosing block is a runtime section. */
#define PVRT_RT_SCOPE() int rt_depth_ __attribute__((cleanup(rt_scope_end), unused)) = rt_enter()

/*
 * A runtime section that never switches contexts (create, join of an exited ULT) ends on the M
 * it began on, so its end restores the depth there without the call that re-reads the thread's
 * M. If the start found its M lost (and moved to another thread), the end is the usual one.
 */
struct rt_nsw {
	struct rt_m *m;
	int depth;
};

static inline void rt_nsw_begin(struct rt_nsw *s)
{
	struct rt_m *m = rt_tls_m;
	s->m = m;
	s->depth = -1;
	if (!m)
		return;
	uint32_t d;
	bool lost = rt_depth_up(m, &d);
	s->depth = (int)d;
	if (lost) {
		rt_m_lost(m);
		s->m = NULL;
	}
}

static inline void rt_nsw_end(struct rt_nsw *s)
{
	if (likely(s->m)) /* release: as rt_leave_slow */
		__atomic_store_n(&s->m->inrt, (uint32_t)s->depth, __ATOMIC_RELEASE);
	else
		rt_leave(s->depth);
}

/* The rest of the enclosing block is a runtime section in which no switch happens. */
#define PVRT_RT_SCOPE_NOSWITCH()                                                                   \
	struct rt_nsw rt_nsw_ __attribute__((cleanup(rt_nsw_end)));                                \
	rt_nsw_begin(&rt_nsw_)

/* ---- preempt.c ---- */
int rt_preempt_init(void) PVRT_HIDDEN;
void rt_preempt_fini(void) PVRT_HIDDEN;
/* Ask the kernel thread running w's current ULT to preempt it; false if it could not be sent. */
bool rt_preempt_kick(struct rt_worker *w, struct rt_m *m) PVRT_HIDDEN;

/* ---- sysmon.c ---- */
void rt_sysmon_prepare(void) PVRT_HIDDEN;
int rt_sysmon_start(void) PVRT_HIDDEN;
void rt_sysmon_stop(void) PVRT_HIDDEN;
void rt_sysmon_notify(void) PVRT_HIDDEN; /* a worker left its park */
void rt_m_add(struct rt_m *m, bool is_main) PVRT_HIDDEN;
int rt_m_register(struct rt_m *m, bool is_main) PVRT_HIDDEN;
void rt_spares_join(void) PVRT_HIDDEN;
const sigset_t *rt_preempt_base_mask(void) PVRT_HIDDEN;
void rt_switch_home(struct pvrt_ult *self, struct rt_m *m) PVRT_HIDDEN;
void rt_m_home_resumed(void) PVRT_HIDDEN;
void rt_san_thread_context(struct rt_san *s) PVRT_HIDDEN;
void rt_m_idle(struct rt_m *m) PVRT_HIDDEN; /* a worker's thread left its worker's loop */
void rt_ms_fini(void) PVRT_HIDDEN;
void rt_primary_home(void) PVRT_HIDDEN; /* finalize: back to the thread that called init */

/* ---- desc.c: allocation, descriptors, stacks ---- */
struct pvrt_ult *rt_desc_get_slow(struct rt_worker *w) PVRT_HIDDEN;
/* A free descriptor, most often with a stack, from w's pool (w NULL: a foreign thread, from the
 * global pool); NULL without memory. Inline: every create takes one. */
static inline struct pvrt_ult *rt_desc_get(struct rt_worker *w)
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
	return rt_desc_get_slow(w);
}
void rt_desc_put(struct rt_worker *w, struct pvrt_ult *u) PVRT_HIDDEN;
void rt_pool_fini(void) PVRT_HIDDEN;
/* Free pooled stacks of w beyond PVRT_STACK_KEEP, and with global those of the global pool
 * (w's owner, about to park). */
void rt_stacks_trim(struct rt_worker *w, bool global) PVRT_HIDDEN;
int rt_stack_alloc(size_t size, size_t guard, void **stack, unsigned *vg_id) PVRT_HIDDEN;
void rt_stack_free(void *stack, size_t len, unsigned vg_id) PVRT_HIDDEN;
/* ULT stacks, counted (pvrt_stats.stacks). */
int rt_ult_stack_alloc(size_t len, size_t guard, void **out, unsigned *vg_id) PVRT_HIDDEN;
void rt_ult_stack_free(void *stack, size_t len, unsigned vg_id) PVRT_HIDDEN;

/* ---- queue.c: run queues, waking workers, placement ---- */
/* Make a BLOCKED (or fresh, or claimed) ULT ready; any thread. */
void rt_ult_ready(struct pvrt_ult *u) PVRT_HIDDEN;
/* The same from worker w (NULL: a foreign thread), in a runtime section: where it is bound, or
 * where the policy places it. */
void rt_ult_ready_from(struct rt_worker *w, struct pvrt_ult *u) PVRT_HIDDEN;
void rt_requeue(struct rt_worker *w, struct pvrt_ult *u) PVRT_HIDDEN;
/* Pop work for worker w: local ring, injection queue; NULL if none. */
struct pvrt_ult *rt_local_next(struct rt_worker *w) PVRT_HIDDEN;
struct pvrt_ult *rt_steal(struct rt_worker *w) PVRT_HIDDEN;
/* Work for w: its ring or injection queue, and if 'others', a ring of another worker (stealable).
 */
bool rt_has_work_others(struct rt_worker *w, bool others) PVRT_HIDDEN;
static inline bool rt_has_work(struct rt_worker *w)
{
	return rt_has_work_others(w, true);
}
void rt_wake_worker(unsigned i) PVRT_HIDDEN;
void rt_notify_idle(struct rt_worker *w) PVRT_HIDDEN;
/* Fill in the scheduler's view of the runtime (sched/pvrt_sched.h). */
void rt_sched_view_init(struct rt_sched_view *v) PVRT_HIDDEN;
bool rt_ring_grow(struct rt_ring *r, struct rt_ringbuf *b, uint64_t h, uint64_t t) PVRT_HIDDEN;

/*
 * A ULT's binding: written by the ULT itself (set_worker) or its creator, read by whoever places
 * it, possibly concurrently (yield_to): relaxed atomics, a stale value only misplaces it once.
 */
static inline int rt_ult_bound(const struct pvrt_ult *u)
{
	return __atomic_load_n(&u->bound, __ATOMIC_RELAXED);
}

/* Does u have to run on a worker other than w? */
static inline bool rt_bound_elsewhere(const struct pvrt_ult *u, const struct rt_worker *w)
{
	int b = rt_ult_bound(u);
	return b >= 0 && (unsigned)b != w->idx;
}

/* The owner's side of a ring and the injection queue's enqueue, inline for create (ult.c) and
 * the placement in queue.c. */
static inline bool rt_ring_reserve(struct rt_ring *r)
{
	/* Acquire: a consumer read the slot we may reuse before its CAS moved head past it. */
	uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	struct rt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED); /* only we write it */
	uint64_t t = r->tail; /* only the owner writes tail */
	if (likely(b && t - h <= b->mask))
		return true;
	return rt_ring_grow(r, b, h, t);
}

/* Append u (owner only, after rt_ring_reserve()). */
static inline void rt_ring_put(struct rt_ring *r, struct pvrt_ult *u)
{
	uint64_t t = r->tail;
	struct rt_ringbuf *b = __atomic_load_n(&r->buf, __ATOMIC_RELAXED);
	__atomic_store_n(&b->e[t & b->mask], u, __ATOMIC_RELAXED);
	/* Release: publishes the slot (and the ULT's READY state and saved context) to consumers.
	 */
	__atomic_store_n(&r->tail, t + 1, __ATOMIC_RELEASE);
}

static inline void rt_inject_push(struct rt_worker *t, struct pvrt_ult *u)
{
	__atomic_store_n(&u->state, ULT_READY_INJ, __ATOMIC_RELAXED);
#if PVRT_INJECT_WFCQ
	cds_wfcq_node_init(&u->qnode);
	/* Wait-free; a full barrier before publication orders the ULT's saved state. */
	cds_wfcq_enqueue(&t->inj.head, &t->inj.tail, &u->qnode);
#else
	u->qnext = NULL;
	rt_lock_acquire(&t->inj.lock);
	if (t->inj.last)
		t->inj.last->qnext = u;
	else
		t->inj.first = u;
	t->inj.last = u;
	rt_lock_release(&t->inj.lock);
#endif
	/* Seq_cst: ordered before our read of the target's park word (see inject_to, queue.c). */
	__atomic_fetch_add(&t->inj.n, 1, __ATOMIC_SEQ_CST);
}

/* Queue u, claimed or fresh and free to run on w, on w's ring (its owner). */
static inline __attribute__((always_inline)) void rt_queue_local(struct rt_worker *w,
								 struct pvrt_ult *u)
{
	/*
	 * Decide on the ring before publishing READY: a stale ring entry elsewhere may claim u the
	 * moment it is READY, so a READY ULT must not then also go into an injection queue.
	 */
	if (unlikely(!rt_ring_reserve(&w->ring))) {
		rt_inject_push(w, u);
		return;
	}
	/* Release: whoever claims it sees its saved context. */
	__atomic_store_n(&u->state, ULT_READY, __ATOMIC_RELEASE);
	rt_ring_put(&w->ring, u);
	if (unlikely(rt_state.nw > 1))
		rt_notify_idle(w);
}

/* ---- ult.c: switching, life cycle ---- */
/* Block the calling ULT (its state already set to BLOCKED, or PARKING: futex.c, by the caller);
 * post(w, arg) runs in the next context once this one is suspended (e.g., to release the lock its
 * waker needs). */
void rt_ult_block(void (*post)(struct rt_worker *, void *), void *arg) PVRT_HIDDEN;
void rt_switch(struct rt_worker *w, struct rt_ctxrec *from, struct pvrt_ult *to,
	       void (*post)(struct rt_worker *, void *), void *arg) PVRT_HIDDEN;
void rt_after_switch(void) PVRT_HIDDEN;
/* Wait until every ULT but the primary has exited (finalize, the M:N main thread's exit). */
void rt_wait_nlive_zero(void) PVRT_HIDDEN;
void rt_ult_init_primary(struct pvrt_ult *u) PVRT_HIDDEN;
size_t rt_page_size(void) PVRT_HIDDEN;
/* A descriptor for the primary ULT (the thread that called pvrt_init). */
struct pvrt_ult *rt_primary_alloc(void) PVRT_HIDDEN;

/* The calling kernel thread's signal mask (the first 64 signals, the kernel's sigset). */
uint64_t rt_kernel_sigmask(void) PVRT_HIDDEN;
/* The calling ULT's signal mask changed to m (already loaded on its kernel thread; pvrt_init
 * only, before other ULTs run). */
void rt_ult_sigmask_changed(uint64_t m) PVRT_HIDDEN;
/* pthread_sigmask for the calling ULT with per-ULT TLS (the first 64 signals; set and old may
 * be NULL): 0, or EINVAL for a bad how. */
int rt_ult_sigmask(int how, const uint64_t *set, uint64_t *old) PVRT_HIDDEN;
/* The calling ULT is about to load mask m with a raw system call (siglongjmp); blocks the
 * preemption signal until then. */
void rt_ult_sigmask_jump(uint64_t m) PVRT_HIDDEN;
/* The calling ULT's thread mask changes behind its record, with the preemption signal blocked:
 * a switch must load the mask. */
void rt_ult_sigmask_unknown(void) PVRT_HIDDEN;

/* sigmask.c: the masks of the live ULTs (M:N mode), counted so that threads without a ULT block
 * what every ULT blocks. ref/unref a ULT's mask at its birth and death, move at a change. */
void rt_sigmask_reset(void) PVRT_HIDDEN;
/* What every live ULT blocks (atomic): the mask of a context that runs no ULT. */
extern uint64_t rt_sigmask_common PVRT_HIDDEN;
void rt_sigmask_ref(uint64_t m) PVRT_HIDDEN;
void rt_sigmask_unref(uint64_t m) PVRT_HIDDEN;
void rt_sigmask_move(uint64_t from, uint64_t to) PVRT_HIDDEN;
/* A worker without a ULT (polling, about to park, woken while parked): load the intersection of
 * the ULTs' masks if it changed. */
void rt_sigmask_load(struct rt_worker *w, uint64_t m) PVRT_HIDDEN;
static inline void rt_sigmask_idle(struct rt_worker *w)
{
	if (__builtin_expect(rt_state.ult_tls, 0)) {
		/* Seq_cst, and flagged while between the load and the store of w->sigmask:
		 * sigmask.c's wait must not take the old word for what the thread will have. */
		__atomic_store_n(&w->sm_loading, 1, __ATOMIC_SEQ_CST);
		uint64_t m = __atomic_load_n(&rt_sigmask_common, __ATOMIC_SEQ_CST);
		if (m != w->sigmask)
			rt_sigmask_load(w, m);
		__atomic_store_n(&w->sm_loading, 0, __ATOMIC_SEQ_CST);
	}
}
/* An M waiting for a worker (each turn of its wait): load the intersection if it changed. */
void rt_sigmask_m_idle(struct rt_m *m) PVRT_HIDDEN;

/* If set (the M:N preload, before it creates ULTs): every ULT runs wrap(fn, arg) instead of
 * fn(arg), and exits with its result. */
extern void *(*rt_ult_entry_wrap)(void *(*fn)(void *), void *arg)PVRT_HIDDEN;

/* ---- timer.c ---- */
/* 0, or -ENOMEM when the heap cannot grow (the timer is then not queued). */
int rt_timer_add(struct rt_worker *w, struct rt_timer *t) PVRT_HIDDEN;
void rt_timer_cancel(struct rt_timer *t) PVRT_HIDDEN;
/* Fire expired timers of w (its owner only); returns how many fired. */
unsigned rt_timers_run(struct rt_worker *w, uint64_t now) PVRT_HIDDEN;
static inline bool rt_timers_due(struct rt_worker *w, uint64_t now)
{
	/* Relaxed: only the owner writes 'armed'; a stale value only delays a check. */
	return __atomic_load_n(&w->armed, __ATOMIC_RELAXED) <= now;
}
void rt_timers_fini(struct rt_worker *w) PVRT_HIDDEN;

/* ---- key.c ---- */
void rt_keys_run_destructors(struct rt_keyvals **kv) PVRT_HIDDEN;

/* ---- runtime.c: errors, the stack-overflow handler, init/finalize ---- */
int rt_fail(int err, const char *msg) PVRT_HIDDEN;
/* rt_fail with a message formatted from fmt and two strings. */
int rt_failf(int err, const char *fmt, const char *a, const char *b) PVRT_HIDDEN;
/* The stack-overflow handler's alternate signal stack for w's thread (when the handler is
 * installed); old receives the thread's previous one, which rt_altstack_off restores. */
void rt_altstack_on(struct rt_worker *w, stack_t *old) PVRT_HIDDEN;
void rt_altstack_off(struct rt_worker *w, const stack_t *old) PVRT_HIDDEN;
/* In a fork child: forget the parent's runtime (leaking it) so that pvrt_init works again. */
void rt_fork_child_reset(void) PVRT_HIDDEN;
/* Emulated hints: the calling kernel thread m goes without a worker (parked on its vCPU). */
void rt_m_emu_idle(struct rt_m *m) PVRT_HIDDEN;

/* ---- config.c: pvrt_config and PVRT_* settings ---- */
struct rt_settings {
	unsigned nw;
	int cpus[PVRT_MAX_WORKERS];
	unsigned ncpus;
	size_t stack;
	const struct rt_sched_policy *pol;
	uint64_t poll_min, poll_max;
	int eager;
	uint64_t slack;
	uint64_t slice, handoff;
	int ult_tls;
};
/* Check c (NULL: defaults) and the environment into s; 0 or a negative errno (message set). */
int rt_configure(const struct pvrt_config *c, struct rt_settings *s) PVRT_HIDDEN;

/* ---- worker.c: scheduler loop, idle ---- */
void rt_sched_loop(struct rt_worker *w) PVRT_HIDDEN;
/* Worker 0's scheduler context starts here (arg: the worker). */
void rt_sched_entry(void *arg) PVRT_HIDDEN;
/* The thread of workers 1..n-1 (arg: the worker). */
void *rt_worker_main(void *arg) PVRT_HIDDEN;

#endif /* PVRT_RUNTIME_INTERNAL_H */
