/* SPDX-License-Identifier: MIT */
/*
 * The overcommit emulator, part 2: the stop signal and stopping, releasing and sampling a vCPU's
 * threads (the design is in emu.c's header comment; the shared state in emu.h).
 */
#define _GNU_SOURCE
#include "emu.h"
#include "pvrt_os.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* ---- the stop signal ---- */

static int sig_refs, sig_no;
static struct sigaction sig_old;
static uint32_t inflight;     /* stop signals sent whose handler has not finished */
static const int stop_cookie; /* si_value of our stop signals: tells them from anyone else's */

/*
 * Did the signal interrupt a system call that now returns EINTR to its caller? The kernel left
 * the return value in the result register and the pc right after the syscall instruction (a
 * call it restarts has its pc moved back onto the instruction instead). Diagnostic only.
 */
static bool interrupted_eintr(const void *ucv)
{
	const ucontext_t *uc = ucv;
#if defined(__x86_64__)
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	if ((long long)uc->uc_mcontext.gregs[REG_RAX] != -EINTR || (pc & 4095) < 2)
		return false;
	const unsigned char *ins = (const unsigned char *)pc - 2; /* same page: mapped */
	return ins[0] == 0x0f && ins[1] == 0x05;		  /* syscall */
#elif defined(__aarch64__)
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.pc;
	if ((long long)uc->uc_mcontext.regs[0] != -EINTR || (pc & 4095) < 4)
		return false;
	return *(const uint32_t *)(pc - 4) == 0xd4000001u; /* svc #0 */
#else
	(void)uc;
	return false;
#endif
}

static void stop_handler(int sig, siginfo_t *si, void *ucv)
{
	(void)sig;
	int saved_errno = errno; /* futex and clock_gettime below may change it */

	if (si->si_code != SI_QUEUE || si->si_value.sival_ptr != (void *)&stop_cookie) {
		errno = saved_errno; /* not ours: the signal was chosen free, nothing to chain */
		return;
	}
	/*
	 * The record is this thread's own: detach/exit clear emu_self (with a signal fence) before
	 * freeing it, so a non-NULL value here stays valid until this handler returns.
	 */
	struct emu_thr *t = emu_self;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (t) {
		uint32_t entry = __atomic_load_n(&t->state, __ATOMIC_RELAXED);
		/* A late signal (after an ack timeout) may land in a parked thread: keep PARKED. */
		uint32_t after = entry == THR_PARKED ? THR_PARKED : THR_RUN;
		bool noted = false;
		if (emu_in_lock) {
			__atomic_store_n(&t->deferred, 1, __ATOMIC_RELAXED); /* see emu_in_lock */
			goto end_request;
		}
		/*
		 * seq_cst on hold and state: Dekker with the control side, which stores hold = 1
		 * and then loads state. Either it sees our final state store (RUN) and signals
		 * again, or we see its hold store here and stop again.
		 */
		while (__atomic_load_n(&t->hold, __ATOMIC_SEQ_CST)) {
			if (!noted && interrupted_eintr(ucv))
				__atomic_fetch_add(&t->eintr, 1, __ATOMIC_RELAXED);
			noted = true;
			uint64_t t0 = os_now_ns();
			/* The ack: the control side waits on 'state' leaving STOPREQ. */
			__atomic_store_n(&t->state, THR_STOPPED, __ATOMIC_SEQ_CST);
			emu_futex_wake(&t->state);
			/* acquire: what the control side did before releasing us is visible after
			 */
			while (__atomic_load_n(&t->hold, __ATOMIC_ACQUIRE))
				emu_futex_wait(&t->hold, 1, 0); /* EINTR/EAGAIN: re-check */
			__atomic_fetch_add(&t->stopped_ns, os_now_ns() - t0, __ATOMIC_RELAXED);
			__atomic_fetch_add(&t->stops, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&t->state, after, __ATOMIC_SEQ_CST);
		}
		/* Resumed before the signal landed: nothing to stop, just end the request. */
	end_request:;
		uint32_t req = THR_STOPREQ;
		if (__atomic_compare_exchange_n(&t->state, &req, after, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			emu_futex_wake(&t->state);
	}
	/* release: close() restores the old action only after seeing every handler finish. */
	__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
	errno = saved_errno;
}

/* Called with emu_glock held. */
int emu_sig_get(int want)
{
	if (sig_refs > 0) {
		if (want && want != sig_no)
			return pvhint__fail(-EBUSY,
					    "emu: the stop signal is already %d (SIGRTMIN+%d) for "
					    "another emulator; cannot use %d",
					    sig_no, sig_no - SIGRTMIN, want);
		sig_refs++;
		return 0;
	}
	int lo = want ? want : SIGRTMIN + 8, hi = want ? want : SIGRTMAX;
	for (int s = lo; s <= hi; s++) {
		struct sigaction cur;
		if (sigaction(s, NULL, &cur))
			continue;
		if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
			struct sigaction sa;
			memset(&sa, 0, sizeof(sa));
			sa.sa_sigaction = stop_handler;
			/*
			 * SA_RESTART: restartable calls interrupted anyway (see the header comment)
			 * restart. sa_mask full: a stopped vCPU runs none of the application's
			 * signal handlers either; sigreturn restores the thread's own mask.
			 */
			sa.sa_flags = SA_SIGINFO | SA_RESTART;
			sigfillset(&sa.sa_mask);
			if (sigaction(s, &sa, &sig_old))
				return pvhint__fail(-errno,
						    "emu: cannot install the stop handler: %s",
						    strerror(errno));
			sig_no = s;
			sig_refs = 1;
			return 0;
		}
	}
	if (want)
		return pvhint__fail(-EBUSY, "emu: signal %d (SIGRTMIN+%d) already has a handler",
				    want, want - SIGRTMIN);
	return pvhint__fail(-EBUSY, "emu: no free real-time signal for the stop handler");
}

/* Called with emu_glock held. */
void emu_sig_put(void)
{
	if (--sig_refs > 0)
		return;
	/*
	 * A signal still queued when the default action comes back would kill the process. Every
	 * send increments inflight first and every handler decrements it last (release; acquire
	 * here), so zero means none is queued or running. A thread blocking the signal forever
	 * keeps it queued: then the (harmless) handler stays installed.
	 */
	for (int i = 0; i < 200 && __atomic_load_n(&inflight, __ATOMIC_ACQUIRE); i++)
		emu_nap_ns(1000000);
	if (!__atomic_load_n(&inflight, __ATOMIC_ACQUIRE))
		sigaction(sig_no, &sig_old, NULL);
	else
		sig_refs = 1; /* keep it: nothing can remove it safely now */
}

/* In a child of fork(): no stop signal is in flight there; the handler goes (emu.c's fork_child).
 */
void emu_sig_fork_child(void)
{
	if (sig_refs > 0)
		sigaction(sig_no, &sig_old, NULL);
	sig_refs = 0;
	__atomic_store_n(&inflight, 0, __ATOMIC_RELAXED);
}

int emu_sig_number(void)
{
	return sig_refs > 0 ? sig_no : 0;
}

void emu_sig_discard(void)
{
	int sig = emu_sig_number();
	if (!sig)
		return;
	sigset_t s, old;
	sigemptyset(&s);
	sigaddset(&s, sig);
	/* Blocked, a queued instance stays queued instead of running the handler; take each one
	 * off the queue (ours: count it done, as the handler would), then restore the mask. */
	pthread_sigmask(SIG_BLOCK, &s, &old);
	siginfo_t si;
	const struct timespec zero = {0, 0};
	while (sigtimedwait(&s, &si, &zero) == sig)
		if (si.si_code == SI_QUEUE && si.si_value.sival_ptr == (void *)&stop_cookie)
			__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- stopping and releasing a vCPU's threads (emu->lock held) ---- */

/* Is t blocked in the kernel (so not running user code)? From its /proc stat state letter. */
static bool in_kernel_wait(struct emu_vcpu *vc, const struct emu_thr *t)
{
	char buf[512];

	if (t->statfd < 0)
		return false;
	vc->samples++;
	ssize_t n = pread(t->statfd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the command name may contain anything */
	return p && p[1] == ' ' && p[2] != 'R';
}

/*
 * The sampler's view of t: the bpf source's record when t has one (the scheduler's own events:
 * blocked since its last switch-out and not run since; one load), else /proc as
 * in_kernel_wait(). A woken thread still waiting for a real CPU reads asleep until it runs
 * (src_bpf.c load: no wake-up programs where the kernel keeps sched_info): its vCPU halts for
 * that run-queue wait, as if the wake-up had come that much later.
 * Only the model uses it: whether a thread may be signalled is always read from /proc
 * (emu_send_stop), which never misses a state, whereas the program may miss a switch.
 */
static bool sampled_sleep(struct emu_vcpu *vc, const struct emu_thr *t)
{
	if (!t->krec)
		return in_kernel_wait(vc, t);
	vc->samples++;
	return __atomic_load_n(&t->krec->sleeping, __ATOMIC_RELAXED) != 0;
}

/* Send the stop signal to t if it runs user code; returns whether it was sent. */
bool emu_send_stop(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t)
{
	if (__atomic_load_n(&t->state, __ATOMIC_SEQ_CST) != THR_RUN)
		return false; /* parked (unpark checks hold) or already stopping (handler re-checks)
			       */
	/*
	 * Blocked in emu_wait_hold(): runs no user code while hold is set. seq_cst: Dekker with
	 * emu_wait_hold, which clears in_hold and then re-reads hold (we stored hold = 1 before).
	 */
	if (__atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST)) {
		emu_set_ksleep(e, vc, t, false); /* waiting for its turn: emu_runnable */
		return false;
	}
	if (in_kernel_wait(vc, t)) {
		/* Asleep in emu_wait_hold() (entered since the load above): emu_runnable, see
		 * above. */
		if (__atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST)) {
			emu_set_ksleep(e, vc, t, false);
			return false;
		}
		if (!t->ksleep)
			vc->kernel_skips++;
		emu_set_ksleep(e, vc, t, true); /* polled by the control thread while held */
		return false;
	}
	emu_set_ksleep(e, vc, t, false);
	uint32_t run = THR_RUN;
	if (!__atomic_compare_exchange_n(&t->state, &run, THR_STOPREQ, false, __ATOMIC_SEQ_CST,
					 __ATOMIC_RELAXED))
		return false;
	t->stop_sent = os_now_ns();
	__atomic_fetch_add(&inflight, 1, __ATOMIC_RELAXED); /* before the handler can run */
	if (os_signal_thread(t->tid, sig_no, &stop_cookie)) {
		__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELAXED);
		uint32_t req = THR_STOPREQ;
		__atomic_compare_exchange_n(&t->state, &req, THR_RUN, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_RELAXED);
		return false;
	}
	return true;
}

/* Wait (bounded) until every thread of vc that was sent the signal acknowledged it. */
void emu_wait_acks(struct pvhint_emu *e, struct emu_vcpu *vc)
{
	uint64_t start = os_now_ns(), deadline = start + e->c.ack_timeout;

	for (struct emu_thr *t = vc->threads; t; t = t->next) {
		/*
		 * A running thread acks within tens of microseconds; poll that long before
		 * sleeping, as a futex sleep would add the caller's own wake-up delay to every
		 * stop.
		 */
		while (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) == THR_STOPREQ &&
		       os_now_ns() - start < 30000)
			os_cpu_relax();
		for (;;) {
			/* acquire: pairs with the handler's ack store */
			if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) != THR_STOPREQ)
				break;
			uint64_t now = os_now_ns();
			if (now >= deadline) {
				/*
				 * The thread blocks the signal or is starved. Give up on it for now
				 * (the handler still stops it if it lands while the vCPU is held)
				 * and let park() proceed.
				 */
				uint32_t req = THR_STOPREQ;
				if (__atomic_compare_exchange_n(&t->state, &req, THR_RUN, false,
								__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
					vc->ack_timeouts++;
				break;
			}
			emu_futex_wait(&t->state, THR_STOPREQ, deadline - now);
		}
	}
}

/* Deschedule v: flag, holds, signals. Returns whether a signal was sent (acks to wait for). */
bool emu_stop_begin(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];
	bool sent = false;

	if (vc->desched)
		return false;
	vc->desched = true;
	vc->desched_at = now;
	vc->nr_desched++;
	/* Its threads are about to block in the stop handler: that is no halt (see emu_kw_arm). */
	emu_kw_set_arm(e, v, vc->nr_ksleep ? PVHINT_BPF_EMU_WAKE : 0);
	emu_publish(e, now); /* 'preempted' first, as the host sets it at vcpu_put */
	for (struct emu_thr *t = vc->threads; t; t = t->next)
		__atomic_store_n(&t->hold, 1, __ATOMIC_SEQ_CST); /* Dekker: see stop_handler */
	for (struct emu_thr *t = vc->threads; t; t = t->next)
		sent |= emu_send_stop(e, vc, t);
	return sent;
}

void emu_stop_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	if (emu_stop_begin(e, v, now))
		emu_wait_acks(e, &e->vc[v]);
}

void emu_run_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];

	if (!vc->desched)
		return;
	vc->desched = false;
	vc->desched_ns += now - vc->desched_at;
	vc->until = 0;
	/* Its threads leave the stop handler: no wake-up from a halt (see emu_kw_arm). */
	emu_kw_set_arm(e, v, PVHINT_BPF_EMU_HALT);
	for (struct emu_thr *t = vc->threads; t; t = t->next) {
		/* Script: only held vCPUs are polled. With khalt the sampling goes on. */
		if (!e->khalt)
			emu_set_ksleep(e, vc, t, false);
		/* release: pairs with the acquire loads of hold in the handler and unpark */
		__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST);
		emu_futex_wake(&t->hold);
	}
	emu_publish(e, now); /* cleared once the vCPU runs again */
}

/* Poll threads left alone because they slept in the kernel; stop those that woke up. */
bool emu_poll_kblocked(struct pvhint_emu *e)
{
	bool any = false;

	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		bool sent = false;
		if (!vc->desched)
			continue;
		for (struct emu_thr *t = vc->threads; t; t = t->next) {
			if (!t->ksleep)
				continue;
			sent |= emu_send_stop(e, vc, t);
			any |= t->ksleep;
		}
		if (sent && e->c.mode == EMU_SCRIPT)
			emu_wait_acks(e, vc);
	}
	return any;
}

/*
 * khalt (slice, noisy): sample the kernel state of the threads that can change the model, so that
 * a vCPU whose threads all sleep in the kernel (a glibc mutex's futex wait, a read on a pipe,
 * nanosleep) halts and gives its pCPU up as a guest vCPU executing HLT would, and becomes
 * emu_runnable again when one wakes. Sampled: threads not parked and not being stopped, on vCPUs
 * not held, and threads of held vCPUs last seen sleeping (the kblocked poll of script mode: one
 * that woke is stopped now). Threads of held vCPUs that were signalled are known emu_runnable and
 * cost nothing. One pread of /proc/<tid>/stat each (about 3 us).
 */
static bool sample_wanted(const struct emu_thr *t, const struct emu_vcpu *vc)
{
	uint32_t s = __atomic_load_n(&t->state, __ATOMIC_SEQ_CST);
	/* parked, or stopping/stopped: known; signalled threads of held vCPUs: emu_runnable. A
	 * stopped thread last seen asleep is re-read once: see emu_sample_threads. */
	return (s == THR_RUN && (!vc->desched || t->ksleep)) || (s == THR_STOPPED && t->ksleep);
}

void emu_sample_threads(struct pvhint_emu *e)
{
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		for (struct emu_thr *t = vc->threads; t; t = t->next) {
			if (!sample_wanted(t, vc))
				continue;
			/*
			 * Stopped in the handler after it was seen asleep: the signal landed late
			 * (the thread had it blocked, or a sanitizer deferred it until the thread
			 * woke). It waits for its turn now, so its vCPU is emu_runnable; a stale
			 * 'asleep' would keep the vCPU halted, never scheduled, never released.
			 */
			if (__atomic_load_n(&t->state, __ATOMIC_SEQ_CST) == THR_STOPPED) {
				emu_set_ksleep(e, vc, t, false);
				continue;
			}
			if (vc->desched) {
				emu_send_stop(e, vc,
					      t); /* re-reads the state; stops it if it woke */
				continue;
			}
			bool sl = sampled_sleep(vc, t);
			/*
			 * Read in_hold after the state: a thread seen sleeping in emu_wait_hold()
			 * had set it before it slept, so this load sees it (or the thread has woken
			 * since, and the next sample sees it run). seq_cst: see emu_send_stop.
			 */
			if (sl && __atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST))
				sl = false;
			emu_set_ksleep(e, vc, t, sl);
		}
	}
}

/*
 * Is there a thread to sample at the next tick? Evaluated after every step, never cached: the
 * model changes between ticks (attach, unpark, a vCPU run or held), and a sleeping thread of a
 * held vCPU (perhaps misread: a thread just entering emu_wait_hold) must be re-read, or the vCPU
 * could stay halted with its thread waiting for its turn.
 */
bool emu_sampling_wanted(const struct pvhint_emu *e)
{
	for (unsigned v = 0; v < e->c.vcpus; v++)
		for (const struct emu_thr *t = e->vc[v].threads; t; t = t->next)
			if (sample_wanted(t, &e->vc[v]))
				return true;
	return false;
}

/*
 * Slice mode: a running vCPU's halt changes who runs only when another vCPU of its pCPU waits
 * for it; otherwise it changes only its pCPU's is_idle, which the next sample publishes. Each
 * halt seen is an emulated switch (signals, futex wake-ups: tens of microseconds of the control
 * thread here), so the control thread wakes only for those.
 */
static bool halt_matters(const struct pvhint_emu *e, unsigned v)
{
	unsigned P = e->c.pcpus;

	if (e->c.mode != EMU_SLICE)
		return true;
	for (unsigned w = v % P; w < e->c.vcpus; w += P)
		if (w != v && emu_runnable(e, &e->vc[w]))
			return true;
	return false;
}

/*
 * Arm the program's kernel-sleep events (pvhint.bpf.c, emu_note) for the model as it stands, so
 * that the control thread wakes exactly for the kernel sleeps that change it:
 *   a vCPU that runs and is runnable: its halt (its last awake thread blocks), in slice mode
 *   only when another vCPU waits for its pCPU (halt_matters);
 *   a vCPU halted with threads asleep in the kernel, or held with such threads (which were not
 *   stopped: they would run user code while held if they woke): a wake-up;
 *   otherwise nothing (all parked: unpark kicks; held threads block in the stop handler).
 * The program updates a vCPU's count, then reads its arm; we store the arm, fence, then read the
 * count: an edge that came before the arm is seen here. Returns true when a count disagrees with
 * the model: a sample is due now, and again within 1 ms while it lasts (a thread not counted yet,
 * or asleep in emu_wait_hold, makes it persist: a sample a millisecond, never a loop).
 */
bool emu_kw_arm(struct pvhint_emu *e)
{
	bool stale = false;
	uint8_t arm[64];

	if (e->kw.fd < 0)
		return false;
	for (unsigned v0 = 0; v0 < e->c.vcpus; v0 += 64) {
		unsigned n = e->c.vcpus - v0 < 64 ? e->c.vcpus - v0 : 64;
		for (unsigned i = 0; i < n; i++) {
			const struct emu_vcpu *vc = &e->vc[v0 + i];
			arm[i] = vc->desched || !emu_runnable(e, vc)
				     ? (vc->nr_ksleep ? PVHINT_BPF_EMU_WAKE : 0)
				     : (halt_matters(e, v0 + i) ? PVHINT_BPF_EMU_HALT : 0);
			emu_kw_set_arm(e, v0 + i, arm[i]);
		}
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		for (unsigned i = 0; i < n; i++) {
			uint32_t a = __atomic_load_n(&e->kw.awake[v0 + i], __ATOMIC_RELAXED);
			stale |= (arm[i] == PVHINT_BPF_EMU_HALT && !a) ||
				 (arm[i] == PVHINT_BPF_EMU_WAKE && a);
		}
	}
	return stale;
}

/*
 * Slice and noisy modes do not wait for acks (see "Switching"); end stop requests older than
 * ack_timeout here, as emu_wait_acks does, so park() never waits on a signal that cannot land.
 * Returns the earliest deadline still pending.
 */
uint64_t emu_reap_acks(struct pvhint_emu *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		for (struct emu_thr *t = vc->threads; t; t = t->next) {
			if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) != THR_STOPREQ)
				continue;
			uint64_t dl = t->stop_sent + e->c.ack_timeout;
			uint32_t req = THR_STOPREQ;
			if (now < dl)
				next = next < dl ? next : dl;
			else if (__atomic_compare_exchange_n(&t->state, &req, THR_RUN, false,
							     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
				vc->ack_timeouts++;
		}
	}
	return next;
}
