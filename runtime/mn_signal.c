/* SPDX-License-Identifier: MIT */
/*
 * M:N mode: the program's signal handlers, and pause() and sigsuspend() in a ULT.
 *
 * A process-directed signal goes to any kernel thread that does not block it (sigmask.c), so a
 * ULT that waits for a signal in pause() or sigsuspend() on its kernel thread may see the
 * handler run on another thread and go on waiting. Linux prefers the thread group leader, so
 * `alarm(1); while (!flag) pause();` in main works natively whatever the other threads do;
 * under M:N main's ULT runs wherever worker 0 runs (a hand-off moves it), and the idiom hung
 * beside computing threads. So:
 * - The program's handlers are installed behind a trampoline (sigaction, signal, bsd_signal,
 *   and handlers found installed when M:N mode starts), which runs the handler and then counts
 *   the signal as caught and wakes the ULTs that wait for a signal. sigaction reports the
 *   program's own action. The runtime's and the emulator's handlers are left alone (their
 *   calls come from their own objects).
 * - pause() and sigsuspend() in a ULT wait in the kernel, on the count's futex word, with the
 *   wait's mask loaded (the worker is handed off as for any blocking call), and return EINTR
 *   once a signal their mask accepts was caught anywhere, or a handler ran on their own thread
 *   (the futex wait ends with EINTR). A ULT whose mask accepts the signal is thereby "the
 *   thread it was delivered to", as the leader would be natively; a waiter that another
 *   thread's signal wakes while its mask blocks that signal waits on.
 * Not covered: handlers installed behind these wrappers later (sysv_signal, sigset, a raw
 *   system call), whose signals end a ULT's pause only when delivered to its own thread, and
 *   that only if delivered after the wait started (a signal handled by such a handler between
 *   the mask load and the futex wait is seen at the next caught signal).
 */
#define _GNU_SOURCE
#include "mn.h"

#include <errno.h>
#include <link.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/futex.h>

#define SIGBIT(sig) ((uint64_t)1 << ((sig)-1))
#define NSIGS	    64 /* the kernel's sigset: what a ULT's mask records */

REALFN(int, sigaction, int, const struct sigaction *, struct sigaction *)
REALFN(int, pause, void)
REALFN(int, sigsuspend, const sigset_t *)
REALFN(__sighandler_t, signal, int, __sighandler_t)
REALFN(__sighandler_t, bsd_signal, int, __sighandler_t)

static struct sigaction acts[NSIGS + 1]; /* the program's actions where 'trap' is set */
static bool trap[NSIGS + 1];		 /* installed behind the trampoline */
static uint32_t acts_lock;	   /* with every signal blocked: a handler may call sigaction */
static uint64_t caught[NSIGS + 1]; /* handlers run to their end, per signal (atomic) */
static uint32_t caught_seq;	   /* futex word: bumped after each */
static uint32_t waiters;	   /* ULTs waiting in pause/sigsuspend */

/* Seq_cst: pairs with a waiter's load of the count after it reads the sequence word. */
static void caught_one(int sig)
{
	int e = errno;
	__atomic_fetch_add(&caught[sig], 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&caught_seq, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&waiters, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &caught_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	errno = e;
}

static bool is_handler(const struct sigaction *a);

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	/* Relaxed copy: an action changed meanwhile applies from the next delivery, as the
	 * kernel's own would. */
	struct sigaction a = acts[sig];
	if (a.sa_flags & SA_RESETHAND) /* the kernel has reset its side to SIG_DFL */
		trap[sig] = false;
	/* Counted before the handler (one that jumps out would never get to the count after)
	 * and after it (a waiter woken by the first may have found the handler's flag unset
	 * and waits again: the second wakes it with the flag set). */
	caught_one(sig);
	if (!is_handler(&a))
		return;
	if (a.sa_flags & SA_SIGINFO)
		a.sa_sigaction(sig, si, uc);
	else
		a.sa_handler(sig);
	caught_one(sig);
}

/* The object a call comes from is the runtime's (this preload) or the hint library's: their
 * handlers (preemption, stack overflow, the emulator's stop signal) are not the program's. */
/* The address ranges of this object (the preload) and the hint library, found once when M:N
 * mode starts (dl_iterate_phdr; no dladdr per call: it takes the dynamic linker's lock, which a
 * handler that calls signal() may interrupt on its own thread). */
static struct range {
	uintptr_t lo, hi;
} ranges[2];

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct range *r = arg;
	uintptr_t want = r->lo, lo = UINTPTR_MAX, hi = 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (want < lo || want >= hi)
		return 0;
	r->lo = lo;
	r->hi = hi;
	return 1;
}

static void find_ranges(void)
{
	const void *in[2] = {(const void *)trampoline, (const void *)pvhint_header};
	for (int i = 0; i < 2; i++) {
		struct range r = {(uintptr_t)in[i], 0};
		if (dl_iterate_phdr(find_object, &r))
			ranges[i] = r;
	}
}

static bool internal_caller(const void *ret)
{
	uintptr_t a = (uintptr_t)ret;
	for (int i = 0; i < 2; i++)
		if (a >= ranges[i].lo && a < ranges[i].hi)
			return true;
	return false;
}

/* The kernel takes SIG_DFL (0) and SIG_IGN (1) for what they are whatever SA_SIGINFO says
 * (sa_handler and sa_sigaction share their storage). */
static bool is_handler(const struct sigaction *a)
{
	return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* Every signal blocked (glibc's two cannot be) around the table's lock: a handler that calls
 * sigaction on this thread must not find it held. */
static uint64_t acts_enter(void)
{
	uint64_t all = ~(uint64_t)0, prev = 0;
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &prev, 8);
	while (__atomic_exchange_n(&acts_lock, 1, __ATOMIC_ACQUIRE))
		os_cpu_relax();
	return prev;
}

static void acts_leave(uint64_t prev)
{
	__atomic_store_n(&acts_lock, 0, __ATOMIC_RELEASE);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &prev, NULL, 8);
}

static int mn_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	uint64_t prev = acts_enter();
	struct sigaction kold, was = acts[sig];
	bool trapped = trap[sig];
	int r;
	if (act && is_handler(act)) {
		struct sigaction k = *act;
		k.sa_sigaction = trampoline;
		k.sa_flags |= SA_SIGINFO;
		r = REAL(sigaction, sig, &k, &kold);
		if (!r) {
			acts[sig] = *act;
			trap[sig] = true;
		}
	} else {
		r = REAL(sigaction, sig, act, &kold);
		if (!r && act)
			trap[sig] = false;
	}
	acts_leave(prev);
	if (!r && old) {
		/* The program's action, unless someone changed the kernel's behind us. */
		bool ours = (kold.sa_flags & SA_SIGINFO) && kold.sa_sigaction == trampoline;
		*old = trapped && ours ? was : kold;
	}
	return r;
}

/* Signals the wrappers do not take: bad numbers (glibc says EINVAL), the runtime's own. */
static bool passed_through(int sig)
{
	return !rt_mn_on || sig < 1 || sig > NSIGS || sig == rt_state.preempt_sig;
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (passed_through(sig) || internal_caller(__builtin_return_address(0)))
		return REAL(sigaction, sig, act, old);
	return mn_sigaction(sig, act, old);
}

/* glibc's signal() and bsd_signal(): BSD semantics (the signal blocked in its handler, system
 * calls restarted; glibc drops SA_RESTART after siginterrupt, which is not followed here). */
static __sighandler_t mn_signal(int sig, __sighandler_t h)
{
	struct sigaction a, o;
	memset(&a, 0, sizeof(a));
	a.sa_handler = h;
	sigemptyset(&a.sa_mask);
	sigaddset(&a.sa_mask, sig);
	a.sa_flags = SA_RESTART;
	if (h == SIG_ERR || mn_sigaction(sig, &a, &o) < 0) {
		errno = EINVAL;
		return SIG_ERR;
	}
	return o.sa_handler;
}

EXPORT __sighandler_t signal(int sig, __sighandler_t h)
{
	if (passed_through(sig) || internal_caller(__builtin_return_address(0)))
		return REAL(signal, sig, h);
	return mn_signal(sig, h);
}

EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t h)
{
	if (passed_through(sig) || internal_caller(__builtin_return_address(0)))
		return REAL(bsd_signal, sig, h);
	return mn_signal(sig, h);
}

/* M:N mode starts: handlers installed before (library constructors) go behind the trampoline. */
void rt_mn_signal_start(void)
{
	find_ranges();
	for (int sig = 1; sig <= NSIGS; sig++) {
		struct sigaction a;
		if (sig == SIGKILL || sig == SIGSTOP || sig == rt_state.preempt_sig ||
		    REAL(sigaction, sig, NULL, &a) || !is_handler(&a) ||
		    ((a.sa_flags & SA_SIGINFO) && a.sa_sigaction == trampoline))
			continue;
		const void *h = (a.sa_flags & SA_SIGINFO) ? (const void *)a.sa_sigaction
							  : (const void *)a.sa_handler;
		if (internal_caller(h))
			continue; /* the runtime's or the emulator's */
		mn_sigaction(sig, &a, NULL);
	}
}

/* A fork child: the thread that held the table's lock may not exist there. */
void rt_mn_signal_atfork_child(void)
{
	__atomic_store_n(&acts_lock, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&waiters, 0, __ATOMIC_RELAXED);
}

/* Wait with mask m until a signal m accepts was caught (anywhere) or a handler ran here. */
static int wait_caught(uint64_t m)
{
	/* The preemption signal stays blocked: a kick must not end the wait as a handler would
	 * (the ULT is in the kernel: nothing to preempt). glibc's two stay as they are. */
	if (rt_state.preempt_sig)
		m |= SIGBIT(rt_state.preempt_sig);
	m &= ~(SIGBIT(__SIGRTMIN) | SIGBIT(__SIGRTMIN + 1));
	uint64_t acc = ~m, c0[NSIGS + 1];
	for (int s = 1; s <= NSIGS; s++)
		if (acc & SIGBIT(s))
			c0[s] = __atomic_load_n(&caught[s], __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&waiters, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		uint32_t seq = __atomic_load_n(&caught_seq, __ATOMIC_SEQ_CST);
		bool any = false;
		for (int s = 1; s <= NSIGS && !any; s++)
			any = (acc & SIGBIT(s)) &&
			      __atomic_load_n(&caught[s], __ATOMIC_SEQ_CST) != c0[s];
		if (any)
			break;
		/* Load m (a signal pending for it is handled here, before the wait, and bumps the
		 * word), wait while the word stays, restore the ULT's mask. */
		uint64_t prev = 0;
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &m, &prev, 8);
		long r = syscall(SYS_futex, &caught_seq, FUTEX_WAIT_PRIVATE, seq, NULL, NULL, 0);
		int e = errno;
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &prev, NULL, 8);
		if (r == -1 && e == EINTR)
			break; /* a handler ran on this thread */
	}
	__atomic_sub_fetch(&waiters, 1, __ATOMIC_SEQ_CST);
	errno = EINTR;
	return -1;
}

EXPORT int pause(void)
{
	if (!self_ult() || !rt_state.ult_tls)
		return REAL(pause);
	return wait_caught(rt_kernel_sigmask());
}

EXPORT int sigsuspend(const sigset_t *set)
{
	if (!self_ult() || !rt_state.ult_tls)
		return REAL(sigsuspend, set);
	uint64_t m;
	memcpy(&m, set, sizeof(m));
	return wait_caught(m);
}
