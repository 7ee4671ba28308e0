/* SPDX-License-Identifier: MIT */
/*
 * Time-slice preemption of ULTs that run without calling into pvrt.
 *
 * sysmon (sysmon.c) notices a worker whose ULT has run for a whole slice (its switch count did
 * not move) while other work waits, and sends that worker's kernel thread the preemption signal
 * (a free real-time signal, queued with a cookie so that nobody else's signal is taken for ours).
 * The handler runs on the ULT's own stack (no SA_ONSTACK) and, where it is safe, switches to the
 * next ULT through the normal yield path (pvrt_thread_yield: switch_ctx, post action, TLS and
 * sanitizer bookkeeping all as for a voluntary yield). The interrupted context stays in the
 * signal frame the kernel pushed on the ULT's stack: all registers, the FPU/SSE/AVX state
 * (xsave area) and the signal mask. The switch itself only has to save what a call preserves
 * (callee-saved registers, MXCSR/x87 control word), because it is a call made by the handler;
 * the ULT resumes by returning from that call, then from the handler, and rt_sigreturn restores
 * the rest on whichever kernel thread it then runs. The kernel puts the frame below the 128-byte
 * red zone of the interrupted code (x86-64), so a leaf function's red zone survives.
 *
 * Safe points. The handler switches only if all hold, else it does nothing and sysmon retries
 * later (the ULT keeps running and is preempted at a later signal that lands in a safe spot):
 *  - the kernel thread runs a ULT (not a scheduler context) outside every runtime section
 *    (rt_enter/leave depth 0: no runtime lock held, no worker state in use);
 *  - the interrupted pc is not in the runtime's own object (libpvrt or the preload: the locks
 *    use per-kernel-thread state) nor in libpvhint (the emulator's locks: a ULT switched out
 *    holding emu_glock stalls every thread that attaches, the spare taking a worker too) and,
 *    unless ULTs own their TLS (M:N mode sets rt_state.preempt_anywhere), it is in the
 *    executable itself: libc, libstdc++, jemalloc, ... keep per-thread state (malloc's tcache,
 *    stdio's recursive lock owner, errno) that the worker's other ULTs share when TLS is per
 *    kernel thread;
 *  - with per-ULT TLS, the kernel thread holds none of ld.so's recursive locks (their owner is
 *    the kernel tid, which the worker's ULTs share: the next ULT there could enter ld.so as if
 *    it held them, and sysmon, which takes one to start a spare thread, would wait for the
 *    preempted ULT; dlopen runs constructors, which may spin, under dl_load_lock); ld.so must
 *    unlock on the tid that locked;
 *  - the interrupted signal mask is the one the ULT runs with: the runtime's base mask or, with
 *    per-ULT masks (M:N mode, where a ULT's mask is loaded at each switch), the ULT's recorded
 *    own. A different one means the ULT is inside a signal handler of the application (its
 *    signal is blocked there) or set its mask behind the runtime's back, and either state
 *    belongs to the kernel thread.
 * Where TLS is per kernel thread, all but the first are checked before the handler enters the
 * runtime: entering also moves a ULT whose thread lost its worker (sysmon.c) to another thread,
 * which changes the kernel thread under the ULT just as a preemption followed by a steal would.
 * The handler is SA_NODEFER with an empty sa_mask, so it runs with the interrupted mask, which
 * is the mask the runtime believes loaded when it switches: the next context gets the mask it
 * expects (loaded by the switch if it differs), and the preempted one gets its own back from
 * rt_sigreturn. The signal itself is never in a mask where ULTs run (rt_preempt_init; M:N
 * mode takes it out of what the program blocks). SA_RESTART: an interrupted
 * restartable call (the ULT was only about to block) restarts. errno is saved and restored
 * around the switch, so it follows the ULT even when TLS is per kernel thread. rt_sigreturn also
 * restores the alternate signal stack saved in the frame: after a migration the handler replaces
 * it with the new kernel thread's own.
 *
 * TSan runs signal handlers at its own interception points rather than where the signal lands,
 * so a switch from the handler would resume TSan in another fiber's middle: preemption is off in
 * TSan builds. valgrind's signal frames restore its whole guest state, thread pointer included:
 * off under valgrind too. ASan follows the switch (the fiber annotations of the yield path).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

__thread unsigned rt_tls_nopreempt __attribute__((tls_model("initial-exec")));

static const int preempt_cookie;
static uint32_t inflight; /* signals sent whose handler has not returned */
static struct sigaction old_act;
static int installed; /* the signal number, 0: none */
static sigset_t base_mask;

#define MAX_RANGES 8
struct ranges {
	unsigned n;
	uintptr_t lo[MAX_RANGES], hi[MAX_RANGES];
};
static struct ranges rt_text, exe_text;

static bool in_ranges(const struct ranges *r, uintptr_t pc)
{
	for (unsigned i = 0; i < r->n; i++)
		if (pc >= r->lo[i] && pc < r->hi[i])
			return true;
	return false;
}

static void add_exec_segments(struct ranges *r, const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum && r->n < MAX_RANGES; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		r->lo[r->n] = info->dlpi_addr + ph->p_vaddr;
		r->hi[r->n] = r->lo[r->n] + ph->p_memsz;
		r->n++;
	}
}

static int find_objects(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	int *first = arg;
	/* The first object is the executable. */
	if (*first) {
		add_exec_segments(&exe_text, info);
		*first = 0;
	}
	/* The runtime (libpvrt, or the preload that contains it) and the hint source (libpvhint:
	 * the emulator's locks, emu_glock among them, are held by the calling thread and its
	 * stop-signal deferral is a per-kernel-thread word). */
	struct ranges tmp = {0};
	add_exec_segments(&tmp, info);
	if (in_ranges(&tmp, (uintptr_t)&rt_preempt_init) ||
	    in_ranges(&tmp, (uintptr_t)&pvhint_open))
		for (unsigned i = 0; i < tmp.n && rt_text.n < MAX_RANGES; i++) {
			rt_text.lo[rt_text.n] = tmp.lo[i];
			rt_text.hi[rt_text.n++] = tmp.hi[i];
		}
	return 0;
}

static uintptr_t uc_pc(const ucontext_t *uc)
{
#if defined(__x86_64__)
	return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	return (uintptr_t)uc->uc_mcontext.pc;
#else
#error "pvrt: no pc in ucontext for this arch"
#endif
}

static bool pc_ok(uintptr_t pc)
{
	if (in_ranges(&rt_text, pc))
		return false;
	return __atomic_load_n(&rt_state.preempt_anywhere, __ATOMIC_RELAXED) ||
	       in_ranges(&exe_text, pc);
}

/*
 * The interrupted mask is the one the ULT runs with: the base mask, or with per-ULT masks (M:N
 * mode) the ULT's own as the runtime recorded it. Anything else is a signal handler of the
 * program (the kernel added its signal) or a mask set behind the runtime's back (a raw system
 * call), both the kernel thread's. The kernel's part of the mask (64 signals) is all the frame
 * holds.
 */
static bool mask_ok(const ucontext_t *uc, const struct rt_worker *w)
{
	uint64_t m;
	memcpy(&m, &uc->uc_sigmask, sizeof(m));
	if (rt_state.ult_tls)
		return w && w->cur && m == w->cur->sigmask;
	return !memcmp(&m, &base_mask, sizeof(m));
}

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (old_act.sa_flags & SA_SIGINFO)
		old_act.sa_sigaction(sig, si, uc);
	else if (old_act.sa_handler != SIG_DFL && old_act.sa_handler != SIG_IGN)
		old_act.sa_handler(sig);
}

static void preempt_handler(int sig, siginfo_t *si, void *ucv)
{
	int saved_errno = errno;
	if (si->si_code != SI_QUEUE || si->si_value.sival_ptr != (void *)&preempt_cookie) {
		chain(sig, si, ucv);
		errno = saved_errno;
		return;
	}
	ucontext_t *uc = ucv;
	struct rt_m *m = rt_tls_m;
	if (m) {
		/* Received: sysmon may send the next one (one at a time, or they would nest). */
		__atomic_store_n(&m->kicked, 0, __ATOMIC_RELAXED);
		/* Holding one of ld.so's locks (tls.c): not even the runtime entry below, which
		 * moves a ULT whose thread lost its worker to another thread: ld.so would then
		 * unlock its recursive lock from a tid that does not own it (the unlock fails, the
		 * lock stays held, and the next dlopen waits forever). sysmon kicks again. */
		/* Likewise inside the hint source's locks (the emulator's emu_glock, held across a
		 * fork's handlers, and its stop-deferral count are the kernel thread's): moved, the
		 * ULT would unlock on another thread and leave this one's count raised for ever. */
		/* And inside a no-preemption section of the locks (wait.h). */
		if (rt_tls_nopreempt || pvhint_thread_in_lock() ||
		    (rt_state.ult_tls && rt_tls_ldso_locked(m->tid))) {
			__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
			errno = saved_errno;
			return;
		}
		/* Not at a safe point, where TLS is per kernel thread: not even the runtime entry
		 * below, which moves a ULT whose thread lost its worker to another thread. The ULT
		 * may hold per-kernel-thread state that must not change threads under it (ASan's
		 * allocator keeps its thread's cache in a register across a refill, under a lock:
		 * moved, it shares that cache with the thread's next ULT and corrupts the heap). It
		 * runs on its own thread meanwhile, as a plain thread would; sysmon kicks again.
		 * (M:N mode, where ULTs own their TLS and nothing of theirs is tied to the thread,
		 * moves it at once, unless it is in the runtime's own code: there it may be inside
		 * rt_m_lost already, between its load of the loss and its store, or in an entry
		 * between reading its M and raising that M's depth; moved now, it would resume
		 * there on another thread with the old M in hand and switch to that M's home
		 * context a second time, long after it went on (a crash in the switch, or a
		 * worker left naming as its owner a thread that waits as a spare). Kicks sent
		 * while the emulator holds a thread there arrive as its stop handler returns, at
		 * that pc (the stop handler blocks every signal). The runtime's own code enters
		 * soon (its spins are bounded) and notices the loss itself.) */
		bool anywhere = __atomic_load_n(&rt_state.preempt_anywhere, __ATOMIC_RELAXED);
		bool safe = pc_ok(uc_pc(uc)) && (anywhere || mask_ok(uc, rt_tls_worker));
		if (!safe) {
			__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
			errno = saved_errno;
			return;
		}
		/* Entering notices a lost worker too: the ULT then resumes here on another thread.
		 */
		int depth = rt_enter();
		struct rt_worker *w = rt_tls_worker;
		if (anywhere)
			safe = safe && mask_ok(uc, w);
		if (w && depth == 0 && w->cur && safe &&
		    __atomic_load_n(&w->preempt_seq, __ATOMIC_RELAXED) ==
			__atomic_load_n(&w->st_switches, __ATOMIC_RELAXED) + 1) {
			__atomic_store_n(&w->preempt_seq, 0, __ATOMIC_RELAXED);
			PVRT_STAT_INC(w, st_preempts);
			w->ring_busy = 1; /* wake-ups here now go ahead of the ring (queue.c) */
			/* An announcement belongs to the ULT's call, not to the next ULT here. */
			__atomic_store_n(&m->insys, 0, __ATOMIC_RELAXED);
			pvrt_thread_yield();
		}
		rt_leave(depth);
		if (rt_m_cur() != m) {
			/* Migrated: sigreturn must not install the old thread's alternate stack. */
			stack_t cur;
			if (!sigaltstack(NULL, &cur))
				uc->uc_stack = cur;
		}
	}
	/* Release: finalize restores the old action only once every handler is done. */
	__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
	errno = saved_errno;
}

bool rt_preempt_kick(struct rt_worker *w, struct rt_m *m)
{
	(void)w;
	if (!installed)
		return false;
	/* Real-time signals queue: never more than one in flight per thread. */
	if (__atomic_exchange_n(&m->kicked, 1, __ATOMIC_RELAXED))
		return true;
	__atomic_fetch_add(&inflight, 1, __ATOMIC_RELAXED); /* before the handler can run */
	if (os_signal_thread(__atomic_load_n(&m->tid, __ATOMIC_ACQUIRE), installed,
			     &preempt_cookie)) {
		__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&m->kicked, 0, __ATOMIC_RELAXED);
		return false;
	}
	return true;
}

const sigset_t *rt_preempt_base_mask(void)
{
	return &base_mask;
}

/*
 * The signal must not be blocked where ULTs run. A mask is inherited through execve, and the
 * exec wrappers block the signal across the call (a queued one would otherwise stay pending
 * into the new image, whose default action kills it): a pvrt program started from a ULT (even
 * through `env`) begins with it blocked, and every ULT would inherit that mask and never be
 * preempted. So it leaves the base mask and the calling thread's mask (and so the primary
 * ULT's, recorded from it) here.
 */
static void unblock_own(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, installed);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	sigdelset(&base_mask, installed);
	rt_ult_sigmask_changed(rt_kernel_sigmask());
}

int rt_preempt_init(void)
{
	pthread_sigmask(SIG_SETMASK, NULL, &base_mask);
	if (installed) { /* still, or after a fork whose child forgot the runtime */
		rt_state.preempt_sig = installed;
		unblock_own();
	}
	if (!rt_state.slice || installed)
		return 0;
	rt_text.n = exe_text.n = 0;
	int first = 1;
	dl_iterate_phdr(find_objects, &first);
	/* A free real-time signal (the emulator takes SIGRTMIN+8 or the first free one above). */
	for (int s = SIGRTMIN + 9; s <= SIGRTMAX; s++) {
		struct sigaction cur;
		if (sigaction(s, NULL, &cur) || (cur.sa_flags & SA_SIGINFO) ||
		    cur.sa_handler != SIG_DFL)
			continue;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = preempt_handler;
		sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		if (sigaction(s, &sa, &old_act))
			continue;
		installed = s;
		rt_state.preempt_sig = s;
		unblock_own();
		return 0;
	}
	return rt_fail(-EBUSY, "pvrt_init: no free real-time signal for preemption "
			       "(PVRT_SLICE_NS=off runs without)");
}

void rt_preempt_fini(void)
{
	if (!installed)
		return;
	/*
	 * Every ULT has exited and sysmon is stopped, so signals still in flight are queued to
	 * threads that take them at once; give them a moment. One that a thread blocks forever
	 * keeps the handler installed (its default action would kill the process).
	 */
	for (int i = 0; i < 1000 && __atomic_load_n(&inflight, __ATOMIC_ACQUIRE); i++)
		os_yield();
	if (__atomic_load_n(&inflight, __ATOMIC_ACQUIRE))
		return;
	sigaction(installed, &old_act, NULL);
	installed = 0;
	rt_state.preempt_sig = 0;
}
