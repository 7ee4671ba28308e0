/* SPDX-License-Identifier: MIT */
/*
 * ULTs: context switches, the warm stack of a first run, create/join/yield/exit (descriptors and
 * stacks: desc.c; run queues and placement: queue.c).
 *
 * Switching protocol. A context never touches the queues on its own behalf before it is
 * suspended: e.g., a yielding ULT must not appear in a queue while it still runs on its stack, or
 * a thief could resume it twice. So every switch leaves a *post action* in the worker
 * (w->post_fn/post_arg) that the context switched to runs first thing (rt_after_switch):
 * requeue the yielder, release the futex bucket lock a blocker holds, recycle the stack of an
 * exited ULT. The post action runs on the same kernel thread right after the switch, so it
 * always finds it in the worker that stored it.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread struct rt_worker *rt_tls_worker;
__thread struct pvrt_ult *rt_tls_ult;

__attribute__((noinline)) struct rt_worker *rt_worker_cur(void)
{
	/* The empty asm keeps the compiler from treating this as pure and reusing an old result. */
	__asm__ volatile("" ::: "memory");
	return rt_tls_worker;
}

/* ---------------------------------------------------------------- warm stacks */

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
#if !defined(PVRT_ASAN) && !defined(PVRT_TSAN)
static void ult_entry_chained(void *arg);
#endif

static inline void swap_hot(struct rt_worker *w, struct pvrt_ult *u)
{
	/* Only default stacks change hands (the hot one is one): a stack of the default length
	 * with a larger guard is another stack. */
	if (u->stack_len != rt_state.stack_size || u->guard != rt_state.page_size || !u->stack ||
	    u->tp)
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
static void first_run(struct rt_worker *w, struct pvrt_ult *u)
{
	if (w->hot)
		swap_hot(w, u);
	/* With TLS of its own the stack ends below the TLS blocks at its top (tls.c). */
	char *end = u->tp ? (char *)u->stack_top : (char *)u->stack + u->stack_len;
	u->ctx.sp = rt_ctx_make_fp(end, ult_entry, u, u->fpstate);
	u->ctx.san.bottom = (char *)u->stack + u->guard;
	u->ctx.san.size = (size_t)(end - (char *)u->ctx.san.bottom);
}

/* ---------------------------------------------------------------- switching */

/* The next ULT for w when the running one yields or exits (holding no lock); checks timers now
 * and then. */
static struct pvrt_ult *pick_next(struct rt_worker *w)
{
	uint64_t armed = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	/* The clock now and then, or when sysmon saw a timer due (a worker whose ULTs only
	 * switch at preemptions picks every slice: every 64th pick alone let a sleep of 1 ms
	 * beside CPU-bound ULTs last 0.7 s). */
	if (unlikely(armed != UINT64_MAX) &&
	    ((++w->tick & 63) == 0 || __atomic_load_n(&w->timer_poke, __ATOMIC_RELAXED))) {
		__atomic_store_n(&w->timer_poke, 0, __ATOMIC_RELAXED);
		rt_timers_run(w, os_now_ns());
	}
	struct pvrt_ult *u = rt_local_next(w);
	if (!u && armed != UINT64_MAX && rt_timers_run(w, os_now_ns()))
		u = rt_local_next(w);
	return u;
}

void rt_after_switch(void)
{
	struct rt_worker *w = rt_worker_cur();
	if (unlikely(!w)) {
		rt_m_home_resumed(); /* this thread lost its worker (sysmon.c) */
		return;
	}
	rt_san_resumed(w->cur ? &w->cur->ctx.san : &w->sched.san);
	void (*fn)(struct rt_worker *, void *) = w->post_fn;
	if (fn) {
		w->post_fn = NULL;
		fn(w, w->post_arg);
	}
}

/* Suspend 'from' and run 'to' (a ULT, or w's scheduler when NULL). */
static void switch_ctx(struct rt_worker *w, struct rt_ctxrec *from, struct pvrt_ult *to,
		       void (*post)(struct rt_worker *, void *), void *arg, int dying)
{
	struct rt_ctxrec *tc = to ? &to->ctx : &w->sched;
	if (unlikely(!tc->sp))
		first_run(w, to);
	w->post_fn = post;
	w->post_arg = arg;
	__atomic_store_n(&w->cur, to, __ATOMIC_RELAXED); /* sysmon samples it */
	if (to)
		to->last = (int)w->idx;
	PVRT_STAT_INC(w, st_switches);
	rt_san_switch(&from->san, &tc->san, dying);
	/* ULTs with TLS of their own: the thread pointer goes with the stack (the one place). */
	void *tp = to && to->tp ? to->tp : w->tp;
	/* One TCB for two contexts: the primary's is worker 0's scheduler's too until worker 0 is
	 * first handed off (pvrt_init). Name whichever runs next there (NULL: the scheduler). */
	if (unlikely(rt_state.ult_tls) && tp == w->tp)
		rt_tls_name(tp, to);
	if (unlikely(tp != w->cur_tp))
		rt_tls_switch(w, tp);
	/* Per-ULT signal masks (with per-ULT TLS): a system call only when the next context's
	 * mask differs from the one loaded. The scheduler context runs no ULT: it takes what
	 * every live ULT blocks (sigmask.c), so that a signal they all block is not taken here. */
	if (unlikely(rt_state.ult_tls)) {
		if (!to) /* see rt_sigmask_idle */
			__atomic_store_n(&w->sm_loading, 1, __ATOMIC_SEQ_CST);
		uint64_t m =
		    to ? to->sigmask : __atomic_load_n(&rt_sigmask_common, __ATOMIC_SEQ_CST);
		if (m != w->sigmask) {
			syscall(SYS_rt_sigprocmask, SIG_SETMASK, &m, NULL, 8);
			__atomic_store_n(&w->sigmask, m, __ATOMIC_SEQ_CST);
		}
		if (!to)
			__atomic_store_n(&w->sm_loading, 0, __ATOMIC_SEQ_CST);
	}
	/* ld.so's locks go with the context that holds them (tls.h): a ULT that waits inside
	 * dlopen (a library constructor taking a contended lock) resumes on whichever kernel thread
	 * runs it then, and the ULTs that run here meanwhile must not take them "recursively". */
	unsigned ldso = unlikely(rt_state.ult_tls) ? rt_tls_ldso_disown(w->tid) : 0;
	rt_ctx_switch(&from->sp, tc->sp);
	rt_after_switch();
	if (unlikely(ldso))
		rt_tls_ldso_own(ldso);
}

/*
 * A thread that lost its worker leaves 'self' for its own scheduler context (sysmon.c). Whatever
 * switch_ctx does per switch besides the stack (the M:N mode's thread pointer) belongs here too:
 * the home context runs with the kernel thread's own.
 */
void rt_switch_home(struct pvrt_ult *self, struct rt_m *m)
{
	/* The home context runs on the thread's own TLS (the worker went to another thread,
	 * whose thread pointer the worker now records: take()), with the kernel-thread words as
	 * this thread left them on the ULT's (no worker: rt_after_switch must see NULL). */
	unsigned ldso = 0;
	if (rt_state.ult_tls && m->tp) {
		/* Its ld.so locks go with the ULT (see switch_ctx): a library constructor under
		 * dlopen calls pthread functions, and so enters the runtime and notices the loss.
		 * Open MPI's ranks under --mn hung in dlsym, the primary waiting on a lock owned
		 * by the tid it had left. */
		ldso = rt_tls_ldso_disown(m->tid);
		rt_tls_home(m->tp);
	}
	rt_san_switch(&self->ctx.san, &m->home.san, 0);
	rt_ctx_switch(&self->ctx.sp, m->home.sp);
	rt_after_switch();
	if (ldso)
		rt_tls_ldso_own(ldso);
}

void rt_switch(struct rt_worker *w, struct rt_ctxrec *from, struct pvrt_ult *to,
	       void (*post)(struct rt_worker *, void *), void *arg)
{
	switch_ctx(w, from, to, post, arg, 0);
}

static void post_requeue(struct rt_worker *w, void *arg)
{
	rt_requeue(w, arg);
}

static void post_ready(struct rt_worker *w, void *arg)
{
	(void)w;
	rt_ult_ready(arg);
}

void rt_ult_block(void (*post)(struct rt_worker *, void *), void *arg)
{
	struct rt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w->cur;
	/*
	 * No timers fired here: the caller may hold a lock its post action releases (a futex
	 * bucket), and a timer callback may need that very lock. When timers are due, go to the
	 * scheduler context instead: it fires them after the post action ran.
	 */
	struct pvrt_ult *next = NULL;
	uint64_t armed = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (likely(armed == UINT64_MAX) || (++w->tick & 63) || !rt_timers_due(w, os_now_ns()))
		next = rt_local_next(w);
	/* Nothing here: steal before leaving for the scheduler context, which would steal the same
	 * ULT after one more switch. With per-ULT TLS every context entered loads its thread
	 * pointer (a system call where the CPU lacks FSGSBASE, 3-5 us on a PVM guest): through the
	 * scheduler that is two. (Neither caller, futex.c's wait and set_worker, holds a lock
	 * here: stealing may take another worker's injection-queue lock.) */
	if (!next && rt_state.nw > 1)
		next = rt_steal(w);
	switch_ctx(w, &self->ctx, next, post, arg, 0);
}

bool rt_ult_try_yield_to(struct pvrt_ult *u)
{
	PVRT_RT_SCOPE();
	struct rt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w ? w->cur : NULL;
	if (!self || !u || u == self || rt_bound_elsewhere(u, w))
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
	struct rt_worker *w = rt_worker_cur();
	struct pvrt_ult *self = w ? w->cur : NULL;
	/* Relaxed: a hint; rt_ult_try_yield_to's CAS decides. */
	return self && u && u != self && !rt_bound_elsewhere(u, w) &&
	       __atomic_load_n(&u->state, __ATOMIC_RELAXED) == ULT_READY;
}

uint64_t rt_kernel_sigmask(void)
{
	uint64_t m = 0;
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, 8);
	return m;
}

/* No thread's mask: SIGKILL and SIGSTOP can never be blocked. */
#define SIGMASK_UNKNOWN (~(uint64_t)0)
#define SIGBIT(sig)	((uint64_t)1 << ((sig)-1))

/* What a ULT's record never holds: the runtime's signal, glibc's own two (its pthread_sigmask
 * drops them too), and the two the kernel never blocks. */
static uint64_t sigmask_ours(void)
{
	uint64_t m =
	    SIGBIT(__SIGRTMIN) | SIGBIT(__SIGRTMIN + 1) | SIGBIT(SIGKILL) | SIGBIT(SIGSTOP);
	return rt_state.preempt_sig ? m | SIGBIT(rt_state.preempt_sig) : m;
}

/*
 * The mask change and its record happen on one thread with the preemption signal blocked: no
 * kick can move the ULT between the system call and the record, and the record is the
 * caller's own (rt_tls_ult), wherever it runs. No runtime entry either: a thread that lost its
 * worker while the ULT blocked in the kernel keeps running it until its next entry, as after
 * any blocking call (an entry here would move the ULT from inside a signal handler that may
 * longjmp out, leaving the section's depth raised, or leave the thread at home where a
 * process-directed signal's handler could jump back into the ULT). The worker's loaded-mask
 * word is marked unknown (the next switch loads whatever mask it needs); on a worker that has
 * gone to a spare meanwhile that costs the spare a reload, nothing more. The last call sets
 * the mask asked for and unblocks the preemption signal again: a pending signal it unblocks
 * runs its handler there, outside the runtime.
 *
 * Outside the program's signal handlers the thread's mask is the ULT's record (a switch loads
 * it). Inside one the kernel has added the handler's own mask, and the handler's return
 * restores the mask saved in its frame (sigreturn), whatever the handler set meanwhile: so a
 * change made while the thread's mask differs from the record is the handler's alone, and
 * leaves the record as it is. (Recording it would leave a record that the thread's mask no
 * longer matches after the return: the ULT would then never be preempted, or would load the
 * handler's mask again at its next switch.) A handler installed with SA_NODEFER and an empty
 * sa_mask is not told apart; nor is a mask set behind the runtime's back by a raw system call.
 */
int rt_ult_sigmask(int how, const uint64_t *set, uint64_t *oldp)
{
	struct pvrt_ult *u = rt_tls_ult;
	uint64_t old = 0;
	if (!set) {
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &old, 8);
		if (oldp)
			*oldp = old;
		return 0;
	}
	if (how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK)
		return EINVAL;
	uint64_t add = how != SIG_UNBLOCK ? *set & ~sigmask_ours() : 0;
	/* Everything held (but glibc's two) until the final mask is loaded: no kick moves the ULT
	 * and no handler (one that jumps out, say) runs between the count's update and the record
	 * (sigmask.c may wait there). */
	uint64_t hold = ~(SIGBIT(__SIGRTMIN) | SIGBIT(__SIGRTMIN + 1));
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, &hold, &old, 8);
	uint64_t kernel = how == SIG_BLOCK ? old | add : how == SIG_UNBLOCK ? old & ~*set : add;
	/* This thread holds everything now: sigmask.c's wait need not wait for our worker (it
	 * would, for 20 ms, on a word that showed our old mask). */
	rt_ult_sigmask_unknown();
	if (old == u->sigmask) { /* not inside a signal handler */
		uint64_t rec = kernel & ~sigmask_ours();
		rt_sigmask_move(u->sigmask, rec);
		u->sigmask = rec;
	}
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &kernel, NULL, 8);
	if (oldp)
		*oldp = old;
	return 0;
}

/*
 * A jump to a point whose mask sigsetjmp saved makes that mask the thread's (POSIX), inside a
 * signal handler or not: the usual jump out of a handler lands where the handler's mask no
 * longer applies. (A jump to a point saved inside the same handler would record the handler's
 * mask; rare.) No runtime entry here: the jump may leave a handler that interrupted the runtime,
 * or run on a thread that lost its worker (an entry would move the ULT, and the handler's frame
 * on this thread's alternate stack with it). Instead the preemption signal is blocked until the
 * jump loads m, so that nothing moves the ULT in between; a thread that lost its worker gives
 * the ULT up at its next entry, as after any blocking call. The worker's loaded-mask word says
 * unknown (a stale worker's only costs it a reload).
 */
void rt_ult_sigmask_jump(uint64_t m)
{
	/* Everything held until the jump loads m (see rt_ult_sigmask). */
	uint64_t b = ~(SIGBIT(__SIGRTMIN) | SIGBIT(__SIGRTMIN + 1));
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, &b, NULL, 8);
	struct pvrt_ult *u = rt_tls_ult;
	uint64_t rec = m & ~sigmask_ours();
	rt_ult_sigmask_unknown(); /* before the move: see rt_ult_sigmask */
	rt_sigmask_move(u->sigmask, rec);
	u->sigmask = rec;
}

/* No runtime entry (see above): the caller has the preemption signal blocked, or is about to
 * load a mask with it blocked (rt_mn_spawn_enter/leave). */
void rt_ult_sigmask_unknown(void)
{
	/* Not on a thread that lost its worker (it has not entered since): the word is then the
	 * spare's, which sigmask.c's wait would take for one that blocks everything. The ULT's
	 * TCB caches the tid of the thread it runs on (tls.c), the worker the tid of its own. */
	struct rt_worker *w = rt_tls_worker;
	if (w &&
	    (!rt_state.ult_tls || rt_tls_cur_tid() == __atomic_load_n(&w->tid, __ATOMIC_RELAXED)))
		__atomic_store_n(&w->sigmask, SIGMASK_UNKNOWN, __ATOMIC_SEQ_CST);
}

void rt_ult_sigmask_changed(uint64_t m)
{
	struct rt_worker *w = rt_worker_cur();
	if (w && w->cur) {
		if (rt_state.ult_tls)
			rt_sigmask_move(w->cur->sigmask, m);
		w->cur->sigmask = m;
		w->sigmask = m;
	}
}

struct pvrt_ult *rt_ult_current(void)
{
	/* Per-ULT TLS: the caller's own block names it (M:N mode, every lock call). */
	if (rt_state.ult_tls)
		return rt_tls_ult;
	/* Shared TLS: the worker's current ULT, read in a section, so that a preemption cannot move
	 * the caller between reading its worker and reading that worker's current ULT. */
	PVRT_RT_SCOPE();
	struct rt_worker *w = rt_tls_worker;
	return w ? w->cur : NULL;
}

int rt_worker_vcpu(void)
{
	/* No section: a hint, and a ULT that moves on right after the load reports its old worker's
	 * vCPU, as one that moves just after the call does. Workers outlive every ULT, so a worker
	 * read on the thread the caller has just left is still one to read. */
	struct rt_worker *w = rt_worker_cur();
	/* Relaxed: take() moves a worker's thread-slot vCPU with it (sysmon.c). */
	return w ? (int)__atomic_load_n(&w->vcpu, __ATOMIC_RELAXED) : pvhint_self_vcpu();
}

/* ---------------------------------------------------------------- life cycle */

/*
 * The join word says who owns an exited ULT's descriptor, so neither side needs a reference
 * count: 0 running, 2 running and a joiner waits, 3 running and detached (nobody will join), 1
 * exited and off its stack. The exit stores 1 once it is off the stack (post_exit); a joiner that
 * reads 1 owns the descriptor and returns it, an exit that finds 3 returns it, a detach that finds
 * 1 returns it.
 */
static void post_exit(struct rt_worker *w, void *arg)
{
	struct pvrt_ult *u = arg;
	/* Keep the warm stack on this worker; the descriptor takes the previous one (or none; see
	 * rt_stacks_trim). With TLS of its own, the ULT keeps its stack: the TCB on it names the
	 * thread (tp stays valid) until the descriptor is reused. */
	if (u->tp)
		rt_tls_release(u->tp);
	else
		swap_hot(w, u);
	rt_san_fiber_destroy(&u->ctx.san);
	/* Acq_rel: release publishes ret and everything the ULT did to the joiner (acquire load
	 * of 1); acquire, for a detached one, what the detacher did before its exchange. */
	uint32_t j = __atomic_exchange_n(&u->join, 1, __ATOMIC_ACQ_REL);
	if (j == 3)
		rt_desc_put(w, u);
	else if (j == 2) /* the joiner may own u already: the wake only uses the address (a
			  * reused descriptor's joiner gets a spurious wake-up, and re-checks) */
		rt_futex_wake(&u->join, INT_MAX);
}

/*
 * An exit whose successor has never run starts it where it stands, with no switch: nothing to
 * save, no frame to build. The exiting stack goes to the worker as its warm one (post_exit) and
 * at once to the successor (first_run's swap), which then starts at its top: a batch of ULTs
 * created and then joined runs on one stack, one after the other. Publishing the exit before
 * leaving the stack is safe only because the stack is no longer the descriptor's when the exit
 * is published (the joiner may take the descriptor at once): so not for a ULT that keeps its
 * stack (its own TLS block is on it, or its size is not the pool's; see swap_hot), and not
 * under a sanitizer (its fiber calls come in pairs around a real switch).
 */
static void exit_chain(struct rt_worker *w, struct pvrt_ult *self, struct pvrt_ult *next)
{
#if !defined(PVRT_ASAN) && !defined(PVRT_TSAN)
	if (!next || next->ctx.sp || rt_state.ult_tls || !self->stack ||
	    self->stack_len != rt_state.stack_size || self->guard != rt_state.page_size)
		return;
	/* What switch_ctx records for a switch (without per-ULT TLS, nothing else changes). */
	__atomic_store_n(&w->cur, next, __ATOMIC_RELAXED); /* sysmon samples it */
	next->last = (int)w->idx;
	PVRT_STAT_INC(w, st_switches);
	post_exit(w, self); /* self's stack is now w->hot; self is the joiner's */
	swap_hot(w, next);  /* and now next's, unless next keeps its own */
	char *end = (char *)next->stack + next->stack_len;
	next->ctx.sp = end; /* it has run: the next switch away saves its real one */
	next->ctx.san.bottom = (char *)next->stack + next->guard;
	next->ctx.san.size = next->stack_len - next->guard;
	rt_ctx_restart(end, ult_entry_chained, next, next->fpstate);
#else
	(void)w, (void)self, (void)next;
#endif
}

__attribute__((noreturn)) static void ult_exit(struct pvrt_ult *self, void *ret)
{
	if (self->tp)
		rt_tls_exit();
	if (self->keys)
		rt_keys_run_destructors(&self->keys);
	/* Uncounted after the key destructors (one may change the mask). Until the switch loads
	 * the next context's mask the thread is still this ULT's, which may take a signal as an
	 * exiting thread may (sigmask.c's wait leaves the caller's own worker out). */
	if (rt_state.ult_tls)
		rt_sigmask_unref(__atomic_load_n(&self->sigmask, __ATOMIC_RELAXED));
	self->ret = ret;
	__atomic_store_n(&self->state, ULT_DONE, __ATOMIC_RELAXED);
	struct rt_worker *w = rt_worker_cur();
	/* Count the exit, then read the waiters' count: the light side of rt_wait_nlive_zero's
	 * handshake (release: what the ULT did is visible to a waiter that counts the exit). */
	__atomic_store_n(&w->nexited, __atomic_load_n(&w->nexited, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
	if (unlikely(!rt_state.asym_fence))
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	else
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (unlikely(__atomic_load_n(&rt_state.nlive_waiters, __ATOMIC_RELAXED))) {
		/* Release: a waiter that reads the new value counts this exit. */
		__atomic_add_fetch(&rt_state.exit_seq, 1, __ATOMIC_RELEASE);
		rt_futex_wake(&rt_state.exit_seq, INT_MAX);
	}
	struct pvrt_ult *next = pick_next(w);
	exit_chain(w, self, next);
	/* The joiner learns of the exit in post_exit, once we are off the stack. */
	switch_ctx(w, &self->ctx, next, post_exit, self, 1);
	__builtin_unreachable();
}

/*
 * ULTs alive = created (each worker's st_created, and foreign_ids for creates outside the
 * workers) - exited (each worker's nexited). The counts belong to their workers, so a create and
 * an exit write no shared line (a global count cost a third of a create+join). All counts only
 * grow: summing the exits first, then the creates, gives E' <= E(t) and C(t) <= C' for the moment
 * t in between, so E' == C' means none was alive at t. After t only a thread that is not a ULT
 * could create one, racing the finalize it cannot be ordered with (as before these counts).
 *
 * Waking is an asymmetric Dekker handshake: announce the wait (seq_cst), then membarrier
 * (rt_asym_fence, once); an exit stores its count, then reads the announcement after a compiler
 * barrier. An exit whose store the barrier did not drain reads the announcement after it, so
 * every exit that a later sum misses bumps exit_seq after its store; the sum comes after reading
 * exit_seq (acquire: a bump read means its exit is in the sum), so the futex wait then returns at
 * once or is woken.
 */
void rt_wait_nlive_zero(void)
{
	__atomic_fetch_add(&rt_state.nlive_waiters, 1, __ATOMIC_SEQ_CST);
	/* Should membarrier fail now (it worked at pvrt_init), look again every millisecond. */
	bool sure = rt_asym_fence();
	for (;;) {
		uint32_t seq = __atomic_load_n(&rt_state.exit_seq, __ATOMIC_ACQUIRE);
		uint64_t exited = 0, created = 0;
		for (unsigned i = 0; i < rt_state.nw; i++)
			exited += __atomic_load_n(&rt_state.w[i]->nexited, __ATOMIC_ACQUIRE);
		for (unsigned i = 0; i < rt_state.nw; i++)
			created += __atomic_load_n(&rt_state.w[i]->st_created, __ATOMIC_ACQUIRE);
		created += __atomic_load_n(&rt_state.foreign_ids, __ATOMIC_ACQUIRE);
		if (created == exited)
			break;
		uint64_t dl = os_now_ns() + 1000000;
		struct timespec t = {.tv_sec = (time_t)(dl / 1000000000),
				     .tv_nsec = (long)(dl % 1000000000)};
		rt_futex_wait(&rt_state.exit_seq, seq, CLOCK_MONOTONIC, sure ? NULL : &t);
	}
	__atomic_fetch_sub(&rt_state.nlive_waiters, 1, __ATOMIC_RELAXED);
}

void *(*rt_ult_entry_wrap)(void *(*fn)(void *), void *arg);

/* A ULT's first run, on its own stack, in the runtime (the depth its starter left). */
static inline __attribute__((always_inline, noreturn)) void ult_run(struct pvrt_ult *u)
{
	/* The switch left the switcher's depth: a fresh ULT starts outside the runtime. */
	struct rt_m *m = rt_m_cur();
	if (m) /* release: as rt_leave_slow */
		__atomic_store_n(&m->inrt, 0, __ATOMIC_RELEASE);
	if (u->tp)
		rt_tls_start();
	void *(*wrap)(void *(*)(void *), void *) = rt_ult_entry_wrap;
	void *r = wrap ? wrap(u->fn, u->arg) : u->fn(u->arg);
	rt_enter(); /* never left: the exit switch saves it */
	ult_exit(u, r);
}

static void ult_entry(void *arg)
{
	rt_after_switch();
	ult_run(arg);
}

#if !defined(PVRT_ASAN) && !defined(PVRT_TSAN)
/* Started by exit_chain: no switch happened, so there is nothing to finish after one. */
static void ult_entry_chained(void *arg)
{
	ult_run(arg);
}
#endif

void rt_ult_init_primary(struct pvrt_ult *u)
{
	memset(u, 0, sizeof(*u));
	u->flags = ULT_F_PRIMARY;
	u->bound = 0;
	u->last = 0;
	u->id = 1;
	u->state = ULT_RUNNING;
	u->sigmask = rt_kernel_sigmask();
	rt_san_thread_context(&u->ctx.san);
}

/* The calling thread's own stack and sanitizer fiber, for a context that runs on it. */
void rt_san_thread_context(struct rt_san *s)
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
	rt_san_fiber_current(s);
}

struct pvrt_ult *rt_primary_alloc(void)
{
	return rt_desc_get(NULL);
}

size_t rt_page_size(void)
{
	static size_t ps;
	if (!ps)
		ps = (size_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/* The attributes of a create, checked; 0 or a negative errno (message set). Not inlined: the
 * common create has none. */
static __attribute__((noinline)) int create_attr(const pvrt_thread_attr_t *attr, size_t *len,
						 size_t *guard, int *detached, int *bound)
{
	size_t ps = rt_page_size();
	pvrt_thread_attr_t a;
	if (attr->size < sizeof(attr->size))
		return rt_fail(-EINVAL, "pvrt_thread_create: attr not initialised "
					"(pvrt_thread_attr_init or PVRT_THREAD_ATTR_INIT)");
	if (attr->size < sizeof(a)) { /* fields past the program's: default */
		pvrt_thread_attr_init(&a);
		memcpy(&a, attr, attr->size);
		attr = &a;
	}
	if (attr->stack_size || attr->guard_size) {
		size_t st = attr->stack_size;
		if (st && (st < PVRT_STACK_MIN || st > PVRT_STACK_MAX))
			return rt_fail(-EINVAL, "pvrt_thread_create: stack size out of range");
		if (attr->guard_size > PVRT_STACK_MAX)
			return rt_fail(-EINVAL, "pvrt_thread_create: guard size out of range");
		if (attr->guard_size)
			*guard = (attr->guard_size + ps - 1) / ps * ps;
		if (st)
			*len = (st + ps - 1) / ps * ps + *guard +
			       (rt_state.ult_tls ? rt_tls_reserve() : 0);
		else
			*len += *guard - ps;
	}
	if (attr->detached != 0 && attr->detached != 1)
		return rt_fail(-EINVAL, "pvrt_thread_create: detached must be 0 or 1");
	*detached = attr->detached;
	if (attr->worker < -1 || attr->worker >= (int)rt_state.nw)
		return rt_fail(-EINVAL, "pvrt_thread_create: no such worker");
	*bound = attr->worker;
	return 0;
}

/* A descriptor whose stack does not fit (another size or guard) or is missing: map one. */
static __attribute__((noinline)) int create_stack(struct pvrt_ult *u, size_t len, size_t guard)
{
	if (u->stack) {
		rt_ult_stack_free(u->stack, u->stack_len, u->vg_id);
		u->stack = NULL;
	}
	int r = rt_ult_stack_alloc(len, guard, &u->stack, &u->vg_id);
	if (r)
		return r;
	u->stack_len = len;
	u->guard = guard;
	return 0;
}

/* A create with its attributes checked, inside the caller's section. Inlined twice, so that the
 * common create (no attributes) works with constants. */
static inline __attribute__((always_inline)) int create(pvrt_thread_t *out, void *(*fn)(void *),
							void *arg, size_t len, size_t guard,
							int detached, int bound)
{
	struct rt_worker *w = rt_tls_worker;
	struct pvrt_ult *u = rt_desc_get(w);
	if (!u)
		return rt_fail(-ENOMEM, "pvrt_thread_create: out of memory");
	/* The steady state: the descriptor's stack fits, no system call. */
	if (unlikely(!u->stack || u->stack_len != len || u->guard != guard)) {
		int r = create_stack(u, len, guard);
		if (r) {
			rt_desc_put(w, u);
			return rt_fail(r, "pvrt_thread_create: cannot map a stack");
		}
	}
	u->tp = NULL;
	if (unlikely(rt_state.ult_tls)) {
		u->tp = rt_tls_create(u, u->stack, len, guard, &u->stack_top);
		if (!u->tp) {
			rt_ult_stack_free(u->stack, len, u->vg_id);
			u->stack = NULL;
			rt_desc_put(w, u);
			return rt_fail(-ENOMEM, "pvrt_thread_create: no memory for the TLS");
		}
		/* As a thread, it inherits its creator's signal mask. */
		struct pvrt_ult *cu = w ? w->cur : NULL;
		u->sigmask = cu ? cu->sigmask : rt_kernel_sigmask();
		rt_sigmask_ref(u->sigmask);
	}
	u->flags = detached ? ULT_F_DETACHED : 0;
	__atomic_store_n(&u->bound, bound, __ATOMIC_RELAXED);
	u->last = -1;
	if (likely(w))
		u->id = (++w->nid << 12) | w->idx;
	else
		u->id = /* also the count of rt_wait_nlive_zero */
		    (__atomic_add_fetch(&rt_state.foreign_ids, 1, __ATOMIC_RELAXED) << 12) | 0xfff;
	u->fn = fn;
	u->arg = arg;
	u->ret = NULL;
	u->join = detached ? 3 : 0;
	u->keys = NULL;
	u->cancel = 0;
	/* wait_addr is NULL outside waits, name is the old ULT's (name_id): the
	 * descriptor's cold lines stay untouched. */
	u->ctx.san.asan_fake = NULL;
	rt_san_fiber_create(&u->ctx.san);
	/* The frame is built on the stack at the first run (first_run), with the creator's
	 * floating-point state: a create does not touch the stack. */
	u->ctx.sp = NULL;
	u->fpstate = rt_ctx_fpstate();
	if (out)
		*out = u;
	if (likely(w)) {
		PVRT_STAT_INC(w, st_created); /* also the count of rt_wait_nlive_zero */
		/* A ULT created on a worker starts in that worker's queue (as Go's newproc puts it
		 * in its P's): every policy's wake_target picks the caller's worker for a caller
		 * that is a worker, so the call is skipped here; a bound one goes to its worker. */
		if (bound < 0)
			rt_queue_local(w, u);
		else
			rt_ult_ready_from(w, u);
	} else {
		rt_ult_ready_from(NULL, u);
	}
	return 0;
}

int pvrt_thread_create(pvrt_thread_t *out, const pvrt_thread_attr_t *attr, void *(*fn)(void *),
		       void *arg)
{
	/* No switch in here: a create never waits (a lock of the global pool sleeps in the kernel).
	 */
	PVRT_RT_SCOPE_NOSWITCH();
	if (!fn)
		return rt_fail(-EINVAL, "pvrt_thread_create: fn is NULL");
	if (!__atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE))
		return rt_fail(-ENXIO, "pvrt_thread_create: the runtime is not running");
	size_t len = rt_state.stack_size;
	size_t guard = rt_state.page_size;
	if (likely(!attr && out))
		return create(out, fn, arg, len, guard, 0, -1);
	int detached = 0, bound = -1;
	if (attr) {
		int r = create_attr(attr, &len, &guard, &detached, &bound);
		if (r)
			return r;
	}
	if (!out && !detached)
		return rt_fail(-EINVAL, "pvrt_thread_create: out is NULL for a joinable ULT");
	return create(out, fn, arg, len, guard, detached, bound);
}

/* Join a ULT that has not exited yet: run it now if it is still queued, else wait. */
static __attribute__((noinline)) int join_wait(struct pvrt_ult *t, void **ret)
{
	PVRT_RT_SCOPE();
	struct rt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w ? w->cur : NULL;
	if (t == self)
		return rt_fail(-EDEADLK, "pvrt_thread_join: a ULT cannot join itself");
	if (t->flags & (ULT_F_DETACHED | ULT_F_PRIMARY))
		return rt_fail(-EINVAL, "pvrt_thread_join: not a joinable ULT");
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
	rt_desc_put(rt_worker_cur(), t); /* the waits may have moved us */
	return 0;
}

int pvrt_thread_join(pvrt_thread_t t, void **ret)
{
	if (!t)
		return rt_fail(-EINVAL, "pvrt_thread_join: NULL thread");
	/* Exited (acquire: pairs with post_exit's exchange, ret is visible)? Then it is ours and
	 * neither the caller itself nor the primary (which never exits). */
	if (__atomic_load_n(&t->join, __ATOMIC_ACQUIRE) != 1)
		return join_wait(t, ret);
	if (t->flags & ULT_F_DETACHED)
		return rt_fail(-EINVAL, "pvrt_thread_join: not a joinable ULT");
	if (ret)
		*ret = t->ret;
	PVRT_RT_SCOPE_NOSWITCH(); /* the pool is the worker's */
	rt_desc_put(rt_tls_worker, t);
	return 0;
}

int pvrt_thread_detach(pvrt_thread_t t)
{
	PVRT_RT_SCOPE();
	if (!t || (t->flags & (ULT_F_DETACHED | ULT_F_PRIMARY)))
		return rt_fail(-EINVAL, "pvrt_thread_detach: not a joinable ULT");
	/* The flag only guards against a later join on this handle; the join word does the work
	 * (see post_exit). */
	t->flags |= ULT_F_DETACHED;
	uint32_t j = __atomic_load_n(&t->join, __ATOMIC_ACQUIRE);
	while (j != 1)
		if (__atomic_compare_exchange_n(&t->join, &j, 3, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return 0;
	rt_desc_put(rt_tls_worker, t); /* it exited: ours */
	return 0;
}

int pvrt_thread_yield(void)
{
	PVRT_RT_SCOPE();
	struct rt_worker *w = rt_tls_worker;
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
		return rt_fail(-EPERM, "pvrt_thread_yield_to: not called from a ULT");
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
		return rt_fail(-EPERM, "pvrt_thread_exit: not called from a ULT");
	if (self->flags & ULT_F_PRIMARY)
		return rt_fail(-EPERM, "pvrt_thread_exit: the primary ULT cannot exit");
	ult_exit(self, ret);
}

int pvrt_thread_set_worker(int wi)
{
	PVRT_RT_SCOPE();
	struct pvrt_ult *self = rt_ult_current();
	if (!self)
		return rt_fail(-EPERM, "pvrt_thread_set_worker: not called from a ULT");
	if (self->flags & ULT_F_PRIMARY)
		return rt_fail(-EPERM, "pvrt_thread_set_worker: the primary ULT stays on worker 0");
	if (wi == -1) {
		__atomic_store_n(&self->bound, -1, __ATOMIC_RELAXED);
		return 0;
	}
	if (wi < 0 || wi >= (int)rt_state.nw)
		return rt_fail(-EINVAL, "pvrt_thread_set_worker: no such worker");
	__atomic_store_n(&self->bound, wi, __ATOMIC_RELAXED);
	if ((unsigned)wi == rt_tls_worker->idx)
		return 0;
	/* Off this worker: suspend, and let the next context queue us on the bound worker. */
	__atomic_store_n(&self->state, ULT_BLOCKED, __ATOMIC_RELAXED);
	rt_ult_block(post_ready, self);
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
