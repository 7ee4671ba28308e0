/* SPDX-License-Identifier: MIT */
/*
 * The overcommit emulator (source emu): V vCPUs on P physical CPUs, inside the process.
 *
 * Model. Threads attach to a vCPU (pvhint_emu_attach). A vCPU is runnable while at least one of
 * its threads is neither parked (pvhint_thread_park/unpark bracket the runtime's blocking waits)
 * nor, in slice and noisy modes, seen sleeping in the kernel by the ksleep sampling
 * (sample_threads), and halted otherwise, as a guest vCPU that executed HLT. vCPU v lives on
 * pCPU v % P. A control thread runs the mode:
 *   slice   each pCPU round-robins over its runnable vCPUs, one quantum each; a vCPU that halts
 *           gives the pCPU to the next runnable one at once; a halted vCPU that wakes on a busy
 *           pCPU waits for its turn (the stranded wake-up of real overcommit).
 *   noisy   every vCPU has its own pCPU, taken by a neighbour for 'duty' of each 'period'
 *           (phases staggered across vCPUs).
 *   script  only pvhint_emu_deschedule()/resume() (and timed resumes) change anything.
 *   random  the flags and steal change at random every 'period'; no thread is ever stopped.
 * It publishes the page of pvhint_abi.h as the host would: preempted = descheduled and runnable
 * (a halted vCPU is not preempted), is_idle = no vCPU runs on the pCPU under this vCPU (and, in
 * noisy mode, the neighbour does not hold it either), steal += time preempted, written under the
 * record's version counter.
 *
 * Stopping threads. A descheduled vCPU's threads must really stop: no user code runs on them while
 * the vCPU is held. Order, as on the host: the control side sets 'preempted' (release store), sets
 * each thread's 'hold' word, and then stops each thread that is running user code by sending it
 * the stop signal (a real-time signal, SIGRTMIN+8 or the first free one above, or 'signal=' of the
 * spec) with rt_tgsigqueueinfo and a cookie. The handler saves errno, acknowledges (state
 * STOPPED + futex wake), blocks on a futex until 'hold' is cleared, and restores errno; the signal
 * mask is restored by sigreturn. pvhint_emu_deschedule() returns only after every signalled thread
 * acknowledged (bounded by ack_timeout). On resume, holds are cleared and the threads woken first,
 * then 'preempted' is cleared: the flag is set before the stop and cleared once the vCPU runs.
 *
 * Switching. In slice and noisy modes the control side does not wait for the acks before giving
 * the pCPU to the next vCPU: once the stop signal is queued, the thread runs no more user code
 * (a running thread is kicked into the kernel at once; one waiting for a CPU takes the signal on
 * its way back to user mode, before any user instruction), so waiting would only add the
 * machine's scheduling delay to every switch. Requests not acknowledged within ack_timeout are
 * ended by reap_acks(). pvhint_emu_deschedule() (script mode) does wait: its caller expects the
 * stop complete.
 *
 * No EINTR. A signal handler that interrupts a blocking system call makes calls that never restart
 * (epoll_wait, poll, select, nanosleep, timed futex waits, ...) fail with EINTR even with
 * SA_RESTART. So the emulator never signals a thread that is blocked in the kernel:
 *   - threads inside pvhint_thread_park()/unpark() (the runtime's waits) are known to be blocked;
 *     they are never signalled, and unpark() itself blocks on 'hold' before returning to the
 *     caller. The PARKED state changes only under the emulator lock, so this is race-free.
 *   - for other blocking calls, the control side reads the thread's state from
 *     /proc/thread-self/stat (opened at attach) and leaves a sleeping thread alone (it runs no user
 *     code), polling it every millisecond while the vCPU stays held and stopping it once it runs.
 *     Limits: a thread that wakes runs user code for up to that poll interval while its vCPU is
 *     held, and a thread seen running that enters a non-restarting call in the microseconds before
 *     the signal lands gets EINTR; the handler detects that case (x86-64, aarch64) and counts it in
 *     pvhint_emu_stats().eintr. Restartable calls (read, write, futex without timeout, ...) are
 *     restarted by SA_RESTART and unaffected.
 * A thread that blocks the stop signal is not stopped (the ack times out; counted).
 *
 * fork(): the emulators a child inherits are inert there (see fork_child).
 *
 * Lifetime. Each attached thread owns its struct emu_thr (freed by itself at detach or thread
 * exit); the handler only touches the calling thread's own record, read from initial-exec TLS.
 * Closing the emulator orphans the records and releases every hold; the stop handler is
 * uninstalled (previous action restored) when the last emulator closes and no stop signal is in
 * flight.
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

#define IE __attribute__((tls_model("initial-exec")))

static __thread struct emu_thr *emu_self IE;
/*
 * Non-zero while this thread holds glock or an emulator lock. A stop that lands then must not
 * block in the handler (the control side or resume() needs the lock to release it): the handler
 * only notes it, and the thread stops itself when it drops the lock (lock_enter/lock_leave).
 * Without sanitizers this happens only for a stop delivered after its ack timed out; TSan
 * delivers every signal late, at the end of its interceptors, e.g. just after a mutex lock.
 */
static __thread int emu_in_lock IE;

unsigned pvhint_thread_tls_words(struct pvhint_tls_word *out, unsigned max)
{
	struct pvhint_tls_word w[] = {{&emu_self, sizeof(emu_self)},
				      {&emu_in_lock, sizeof(emu_in_lock)},
				      {&pvhint_tls_vcpu, sizeof(pvhint_tls_vcpu)}};
	unsigned n = sizeof(w) / sizeof(w[0]);
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = w[i];
	return n;
}

/* Protects attach/detach against close (t->emu) and the stop signal's installation. */
static uint32_t glock;
static int sig_refs, sig_no;
static struct sigaction sig_old;
static uint32_t inflight;     /* stop signals sent whose handler has not finished */
static const int stop_cookie; /* si_value of our stop signals: tells them from anyone else's */

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static struct pvhint_emu *emu_list; /* every open emulator (glock), for fork_child */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The futex in the emulator's terms: a relative timeout in ns (0: none); wake everyone. */
static int futex_wait(uint32_t *addr, uint32_t val, uint64_t rel_ns)
{
	struct timespec ts = {(time_t)(rel_ns / OS_NS_PER_SEC), (long)(rel_ns % OS_NS_PER_SEC)};

	return os_futex_wait(addr, val, rel_ns ? &ts : NULL);
}

static void futex_wake(uint32_t *addr)
{
	os_futex_wake(addr, INT_MAX);
}

/*
 * A short sleep on an application thread. nanosleep and open are POSIX cancellation points, and
 * the emulator's calls are not the application's: a deferred cancel pending on the thread must
 * act at the application's next cancellation point, not inside a pthread_mutex_lock (or after the
 * thread already returned from pthread_cond_wait, counting it both returned and cancelled).
 */
static void nap_ns(long ns)
{
	int cs;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	nanosleep(&(struct timespec){0, ns}, NULL);
	pthread_setcancelstate(cs, NULL);
}

static inline struct pvhint_emu *thr_emu(const struct emu_thr *t)
{
	/* Relaxed: only compared with a handle the caller keeps open; changed under glock. */
	return __atomic_load_n(&t->emu, __ATOMIC_RELAXED);
}

/*
 * Runnable: some attached thread may run user code. Parked threads are known not to; with khalt,
 * neither are threads last seen sleeping in the kernel (a guest vCPU whose tasks all sleep
 * executes HLT and gives its pCPU up). The ksleep part is a sampled hint: it only decides whom the
 * model gives a pCPU to; whether a held thread gets stopped never depends on it (send_stop reads
 * the state again, and sample_threads keeps polling sleeping threads of held vCPUs).
 */
static inline bool runnable(const struct pvhint_emu *e, const struct emu_vcpu *vc)
{
	return vc->nr_att > vc->nr_parked + (e->khalt ? vc->nr_ksleep : 0);
}

/* Record t's sampled kernel state (emu->lock held). */
static void set_ksleep(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t, bool sl)
{
	if (t->ksleep == sl)
		return;
	t->ksleep = sl;
	if (sl)
		vc->nr_ksleep++;
	else
		vc->nr_ksleep--;
	e->dirty = true;
}

static void wait_hold(struct emu_thr *t);

/*
 * The emulator's locks are its own futex mutexes, not pthread mutexes: under pvrt's preload
 * library pthread_mutex_lock is pvrt's mutex, whose slow path calls pvhint_thread_park(), which
 * takes these locks; an interposed lock here would recurse. They are the OS layer's three-state
 * lock (os/pvrt_os.h), sleeping in the kernel at once (no spinning). Taken and dropped on a
 * thread that may be attached (see emu_in_lock).
 */
static void lock_enter(uint32_t *m)
{
	emu_in_lock++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST); /* the handler sees it before we may block */
	os_lock(m, 0);
}

static void lock_leave(uint32_t *m)
{
	os_unlock(m);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (--emu_in_lock)
		return;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	struct emu_thr *t = emu_self;
	if (t && __atomic_load_n(&t->deferred, __ATOMIC_RELAXED)) {
		__atomic_store_n(&t->deferred, 0, __ATOMIC_RELAXED);
		/* A parked thread runs no user code; a running one stops here if still held. */
		if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) != THR_PARKED)
			wait_hold(t);
	}
}

/* Wake the control thread (e->lock held): the model changed. */
static void kick_ctl(struct pvhint_emu *e)
{
	__atomic_fetch_add(&e->kick, 1, __ATOMIC_RELAXED); /* ordered by the lock release */
	os_futex_wake(&e->kick, 1);
}

/*
 * The control thread sleeps until 'until' (UINT64_MAX: no limit) or a kick. The kick count is
 * read under the lock, so a kick made after we drop the lock changes it and the futex wait
 * returns at once: no lost wake-up.
 */
static void ctl_sleep(struct pvhint_emu *e, uint64_t now, uint64_t until)
{
	uint32_t k = __atomic_load_n(&e->kick, __ATOMIC_RELAXED);
	lock_leave(&e->lock);
	futex_wait(&e->kick, k, until == UINT64_MAX ? 0 : until - now);
	lock_enter(&e->lock);
}

/* ---- the stop signal ---- */

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
			futex_wake(&t->state);
			/* acquire: what the control side did before releasing us is visible after
			 */
			while (__atomic_load_n(&t->hold, __ATOMIC_ACQUIRE))
				futex_wait(&t->hold, 1, 0); /* EINTR/EAGAIN: re-check */
			__atomic_fetch_add(&t->stopped_ns, os_now_ns() - t0, __ATOMIC_RELAXED);
			__atomic_fetch_add(&t->stops, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&t->state, after, __ATOMIC_SEQ_CST);
		}
		/* Resumed before the signal landed: nothing to stop, just end the request. */
	end_request:;
		uint32_t req = THR_STOPREQ;
		if (__atomic_compare_exchange_n(&t->state, &req, after, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			futex_wake(&t->state);
	}
	/* release: close() restores the old action only after seeing every handler finish. */
	__atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
	errno = saved_errno;
}

/* Called with glock held. */
static int sig_get(int want)
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

/* Called with glock held. */
static void sig_put(void)
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
		nap_ns(1000000);
	if (!__atomic_load_n(&inflight, __ATOMIC_ACQUIRE))
		sigaction(sig_no, &sig_old, NULL);
	else
		sig_refs = 1; /* keep it: nothing can remove it safely now */
}

/* ---- publishing the page (emu->lock held; the only writer) ---- */

static void account_steal(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];
	struct pvhint_record *r = &e->rec[v];

	if (now <= vc->pre_since)
		return;
	uint32_t ver = r->version;
	/*
	 * Sequence count: odd version, then the data with release (orders the odd version before
	 * it, for a reader that acquires the new value), then even with release.
	 */
	__atomic_store_n(&r->version, ver + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&r->steal, r->steal + (now - vc->pre_since), __ATOMIC_RELEASE);
	__atomic_store_n(&r->version, ver + 2, __ATOMIC_RELEASE);
	vc->pre_since = now;
}

static void set_pre(struct pvhint_emu *e, unsigned v, bool pre, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];

	if (pre == vc->pre)
		return;
	if (vc->pre)
		account_steal(e, v, now);
	else
		vc->pre_since = now;
	vc->pre = pre;
	/* release: a reader that sees the flag with acquire also sees the steal written above */
	__atomic_store_n(&e->rec[v].preempted, pre ? PVHINT_PREEMPTED : 0, __ATOMIC_RELEASE);
}

static void publish(struct pvhint_emu *e, uint64_t now)
{
	unsigned V = e->c.vcpus, P = e->c.pcpus;

	if (e->c.mode == EMU_RANDOM)
		return; /* the random step writes the flags itself */
	for (unsigned p = 0; p < P; p++)
		e->busy[p] = false;
	for (unsigned v = 0; v < V; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		set_pre(e, v, vc->desched && runnable(e, vc), now);
		if (runnable(e, vc) && !vc->desched)
			e->busy[v % P] = true;
	}
	for (unsigned v = 0; v < V; v++) {
		bool idle = !e->busy[v % P] && !e->vc[v].neighbour;
		/* relaxed: an independent hint byte */
		__atomic_store_n(&e->rec[v].is_idle, idle, __ATOMIC_RELAXED);
	}
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
 * blocked since its last switch-out, not yet woken; one load), else /proc as in_kernel_wait().
 * Only the model uses it: whether a thread may be signalled is always read from /proc
 * (send_stop), which never misses a state, whereas the program may miss a switch.
 */
static bool sampled_sleep(struct emu_vcpu *vc, const struct emu_thr *t)
{
	if (!t->krec)
		return in_kernel_wait(vc, t);
	vc->samples++;
	return __atomic_load_n(&t->krec->sleeping, __ATOMIC_RELAXED) != 0;
}

/* Send the stop signal to t if it runs user code; returns whether it was sent. */
static bool send_stop(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t)
{
	if (__atomic_load_n(&t->state, __ATOMIC_SEQ_CST) != THR_RUN)
		return false; /* parked (unpark checks hold) or already stopping (handler re-checks)
			       */
	/*
	 * Blocked in wait_hold(): runs no user code while hold is set. seq_cst: Dekker with
	 * wait_hold, which clears in_hold and then re-reads hold (we stored hold = 1 before).
	 */
	if (__atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST)) {
		set_ksleep(e, vc, t, false); /* waiting for its turn: runnable */
		return false;
	}
	if (in_kernel_wait(vc, t)) {
		/* Asleep in wait_hold() (entered since the load above): runnable, see above. */
		if (__atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST)) {
			set_ksleep(e, vc, t, false);
			return false;
		}
		if (!t->ksleep)
			vc->kernel_skips++;
		set_ksleep(e, vc, t, true); /* polled by the control thread while held */
		return false;
	}
	set_ksleep(e, vc, t, false);
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
static void wait_acks(struct pvhint_emu *e, struct emu_vcpu *vc)
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
			futex_wait(&t->state, THR_STOPREQ, deadline - now);
		}
	}
}

/* Deschedule v: flag, holds, signals. Returns whether a signal was sent (acks to wait for). */
static bool stop_begin(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];
	bool sent = false;

	if (vc->desched)
		return false;
	vc->desched = true;
	vc->nr_desched++;
	publish(e, now); /* 'preempted' first, as the host sets it at vcpu_put */
	for (struct emu_thr *t = vc->threads; t; t = t->next)
		__atomic_store_n(&t->hold, 1, __ATOMIC_SEQ_CST); /* Dekker: see stop_handler */
	for (struct emu_thr *t = vc->threads; t; t = t->next)
		sent |= send_stop(e, vc, t);
	return sent;
}

static void stop_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	if (stop_begin(e, v, now))
		wait_acks(e, &e->vc[v]);
}

static void run_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];

	if (!vc->desched)
		return;
	vc->desched = false;
	vc->until = 0;
	for (struct emu_thr *t = vc->threads; t; t = t->next) {
		/* Script: only held vCPUs are polled. With khalt the sampling goes on. */
		if (!e->khalt)
			set_ksleep(e, vc, t, false);
		/* release: pairs with the acquire loads of hold in the handler and unpark */
		__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST);
		futex_wake(&t->hold);
	}
	publish(e, now); /* cleared once the vCPU runs again */
}

/* Poll threads left alone because they slept in the kernel; stop those that woke up. */
static bool poll_kblocked(struct pvhint_emu *e)
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
			sent |= send_stop(e, vc, t);
			any |= t->ksleep;
		}
		if (sent && e->c.mode == EMU_SCRIPT)
			wait_acks(e, vc);
	}
	return any;
}

/*
 * khalt (slice, noisy): sample the kernel state of the threads that can change the model, so that
 * a vCPU whose threads all sleep in the kernel (a glibc mutex's futex wait, a read on a pipe,
 * nanosleep) halts and gives its pCPU up as a guest vCPU executing HLT would, and becomes runnable
 * again when one wakes. Sampled: threads not parked and not being stopped, on vCPUs not held, and
 * threads of held vCPUs last seen sleeping (the kblocked poll of script mode: one that woke is
 * stopped now). Threads of held vCPUs that were signalled are known runnable and cost nothing.
 * One pread of /proc/<tid>/stat each (about 3 us).
 */
static bool sample_wanted(const struct emu_thr *t, const struct emu_vcpu *vc)
{
	uint32_t s = __atomic_load_n(&t->state, __ATOMIC_SEQ_CST);
	/* parked, or stopping/stopped: known; signalled threads of held vCPUs: runnable. A
	 * stopped thread last seen asleep is re-read once: see sample_threads. */
	return (s == THR_RUN && (!vc->desched || t->ksleep)) || (s == THR_STOPPED && t->ksleep);
}

static void sample_threads(struct pvhint_emu *e)
{
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		for (struct emu_thr *t = vc->threads; t; t = t->next) {
			if (!sample_wanted(t, vc))
				continue;
			/*
			 * Stopped in the handler after it was seen asleep: the signal landed late
			 * (the thread had it blocked, or a sanitizer deferred it until the thread
			 * woke). It waits for its turn now, so its vCPU is runnable; a stale
			 * 'asleep' would keep the vCPU halted, never scheduled, never released.
			 */
			if (__atomic_load_n(&t->state, __ATOMIC_SEQ_CST) == THR_STOPPED) {
				set_ksleep(e, vc, t, false);
				continue;
			}
			if (vc->desched) {
				send_stop(e, vc, t); /* re-reads the state; stops it if it woke */
				continue;
			}
			bool sl = sampled_sleep(vc, t);
			/*
			 * Read in_hold after the state: a thread seen sleeping in wait_hold() had
			 * set it before it slept, so this load sees it (or the thread has woken
			 * since, and the next sample sees it run). seq_cst: see send_stop.
			 */
			if (sl && __atomic_load_n(&t->in_hold, __ATOMIC_SEQ_CST))
				sl = false;
			set_ksleep(e, vc, t, sl);
		}
	}
}

/*
 * Is there a thread to sample at the next tick? Evaluated after every step, never cached: the
 * model changes between ticks (attach, unpark, a vCPU run or held), and a sleeping thread of a
 * held vCPU (perhaps misread: a thread just entering wait_hold) must be re-read, or the vCPU
 * could stay halted with its thread waiting for its turn.
 */
static bool sampling_wanted(const struct pvhint_emu *e)
{
	for (unsigned v = 0; v < e->c.vcpus; v++)
		for (const struct emu_thr *t = e->vc[v].threads; t; t = t->next)
			if (sample_wanted(t, &e->vc[v]))
				return true;
	return false;
}

/*
 * Slice and noisy modes do not wait for acks (see "Switching"); end stop requests older than
 * ack_timeout here, as wait_acks does, so park() never waits on a signal that cannot land.
 * Returns the earliest deadline still pending.
 */
static uint64_t reap_acks(struct pvhint_emu *e, uint64_t now)
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

/* ---- the modes (emu->lock held); each returns the time of its next event ---- */

static uint64_t step_slice(struct pvhint_emu *e, uint64_t now)
{
	unsigned V = e->c.vcpus, P = e->c.pcpus;
	uint64_t next = UINT64_MAX;

	for (unsigned p = 0; p < P && p < V; p++) {
		unsigned n = (V - p + P - 1) / P; /* vCPUs p, p+P, p+2P, ... */
		int cur = e->cur[p];
		unsigned nrun = 0;
		for (unsigned i = 0; i < n; i++)
			nrun += runnable(e, &e->vc[p + i * P]);
		bool cur_ok = cur >= 0 && runnable(e, &e->vc[cur]);
		if (!cur_ok || (nrun > 1 && now >= e->slice_end[p])) {
			/* Round robin: the next runnable vCPU after cur in the ring of this pCPU.
			 */
			unsigned start = cur >= 0 ? (unsigned)cur / P : 0;
			int pick = -1;
			for (unsigned k = 1; k <= n; k++) {
				unsigned v = p + ((start + k) % n) * P;
				if (runnable(e, &e->vc[v])) {
					pick = (int)v;
					break;
				}
			}
			e->cur[p] = pick;
			e->slice_end[p] = now + e->c.quantum;
		}
		if (nrun > 1)
			next = next < e->slice_end[p] ? next : e->slice_end[p];
	}
	/* Stop the outgoing vCPUs before starting the incoming ones: never two on one pCPU. */
	bool sent = false;
	for (unsigned v = 0; v < V; v++) {
		int cur = e->cur[v % P];
		if (cur >= 0 && cur != (int)v)
			sent |= stop_begin(e, v, now);
	}
	(void)sent; /* no ack wait: see "Switching" above */
	for (unsigned v = 0; v < V; v++) {
		int cur = e->cur[v % P];
		if (cur < 0 || cur == (int)v)
			run_vcpu(e, v, now);
	}
	return next;
}

static uint64_t step_noisy(struct pvhint_emu *e, uint64_t now)
{
	unsigned V = e->c.vcpus;
	uint64_t period = e->c.period, on = (uint64_t)(e->c.duty * (double)period);
	uint64_t next = UINT64_MAX;
	bool sent = false;

	for (unsigned v = 0; v < V; v++) {
		uint64_t ph = (now - e->t0 + (uint64_t)v * period / V) % period;
		bool active = ph < on;
		uint64_t at = now + (active ? on - ph : period - ph);
		next = next < at ? next : at;
		e->vc[v].neighbour = active;
		if (active)
			sent |= stop_begin(e, v, now);
	}
	(void)sent; /* no ack wait: see "Switching" above */
	for (unsigned v = 0; v < V; v++)
		if (!e->vc[v].neighbour)
			run_vcpu(e, v, now);
	publish(e, now); /* is_idle follows the neighbour even when nothing changed state */
	return next;
}

static uint64_t step_script(struct pvhint_emu *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		if (vc->desched && vc->until) {
			if (now >= vc->until)
				run_vcpu(e, v, now);
			else
				next = next < vc->until ? next : vc->until;
		}
	}
	return next;
}

static uint64_t rng_next(struct pvhint_emu *e)
{
	/* xorshift64*: reproducible per seed, good enough for flag noise */
	e->rng ^= e->rng >> 12;
	e->rng ^= e->rng << 25;
	e->rng ^= e->rng >> 27;
	return e->rng * 0x2545F4914F6CDD1Dull;
}

static uint64_t step_random(struct pvhint_emu *e, uint64_t now)
{
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		uint64_t r = rng_next(e);
		/* preempted with probability 'duty'; is_idle a fair coin; no thread is stopped */
		set_pre(e, v, (double)(r >> 11) / 9007199254740992.0 < e->c.duty, now);
		__atomic_store_n(&e->rec[v].is_idle, (uint8_t)(r & 1), __ATOMIC_RELAXED);
	}
	return now + e->c.period;
}

static void *control_main(void *arg)
{
	struct pvhint_emu *e = arg;

	pthread_setname_np(pthread_self(), "pvhint-emu"); /* for top -H, gdb, overhead checks */
	if (e->c.rt) {
		/*
		 * The model's timing is only as good as this thread's wake-ups; on a loaded machine
		 * a real-time priority keeps it on time. It never spins (every wait is a futex
		 * wait). Without the privilege it simply stays SCHED_OTHER.
		 */
		struct sched_param sp = {.sched_priority = 1};
		pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	}
	lock_enter(&e->lock);
	unsigned resteps = 0;
	while (!e->exiting) {
		uint64_t now = os_now_ns(), next;
		e->dirty = false;
		switch (e->c.mode) {
		case EMU_SLICE:
			next = step_slice(e, now);
			break;
		case EMU_NOISY:
			next = step_noisy(e, now);
			break;
		case EMU_SCRIPT:
			next = step_script(e, now);
			break;
		default:
			next = step_random(e, now);
			break;
		}
		now = os_now_ns();
		if (e->khalt) {
			if (now >= e->next_sample) {
				e->next_sample = now + e->c.ksleep;
				sample_threads(e);
			}
			/*
			 * A vCPU halted or woke, seen by the sampling or by a stop that found its
			 * thread asleep: publish the flags and let the mode step again at once
			 * (bounded: a thread flapping between states cannot keep us here).
			 */
			if (e->dirty) {
				publish(e, now);
				if (resteps++ < 2)
					continue;
				if (next > now + 100000) /* step again soon, not in a loop */
					next = now + 100000;
			}
			if (next > e->next_sample && sampling_wanted(e))
				next = e->next_sample;
		} else if (poll_kblocked(e) && next > now + 1000000) {
			next = now + 1000000;
		}
		uint64_t reap = reap_acks(e, now);
		next = next < reap ? next : reap;
		/* Keep steal current during long preemptions (pvhint-top shows a rate). */
		bool any_pre = false;
		for (unsigned v = 0; v < e->c.vcpus; v++)
			any_pre |= e->vc[v].pre;
		if (any_pre) {
			if (now - e->last_flush >= 10000000) {
				for (unsigned v = 0; v < e->c.vcpus; v++)
					if (e->vc[v].pre)
						account_steal(e, v, now);
				e->last_flush = now;
			}
			if (next > e->last_flush + 10000000)
				next = e->last_flush + 10000000;
		}
		resteps = 0;
		if (next > now)
			ctl_sleep(e, now, next);
	}
	lock_leave(&e->lock);
	return NULL;
}

/* ---- fork ---- */

/*
 * A child of fork() has one thread and none of the parent's others: no control thread, no
 * attached thread but (perhaps) the caller. Using the parent's emulator there would wait for
 * acks that never come and signal thread ids that are not ours. So the child makes every
 * emulator it inherited inert ('dead'): the pvhint_emu_* calls return -ECHILD, park/unpark are
 * no-ops (no thread is attached), the records are dropped, the stop handler goes back to the
 * previous action (no stop signal can reach the child: pending signals are not inherited and
 * nothing sends new ones), and the page reads "not preempted, not idle" with steal frozen, as
 * a hint-less source would, rather than the parent's last flags frozen forever. A child may open
 * emulators of its own. The parent holds glock across fork (prepare/parent handlers), so the
 * child's lists and signal bookkeeping are consistent; the emulators' own locks may have been
 * held by threads that do not exist in the child, so the child never takes them.
 */
static void fork_prepare(void)
{
	lock_enter(&glock);
}

static void fork_parent(void)
{
	lock_leave(&glock);
}

/* The child's page: a private copy (an export= mapping is the parent's file), flags cleared. */
static void freeze_page(struct pvhint_emu *e)
{
	struct pvhint_impl *im = e->im;

	if (im->export_path[0]) {
		/* Whatever happens, the file is the parent's: the child's close leaves it. */
		im->export_path[0] = 0;
		void *p = mmap(NULL, im->map_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return; /* still shared: must not write the parent's flags */
		memcpy(p, im->map, im->map_len);
		/* Atomically replaces the shared mapping at the same address. */
		if (mremap(p, im->map_len, im->map_len, MREMAP_MAYMOVE | MREMAP_FIXED, im->map) ==
		    MAP_FAILED) {
			munmap(p, im->map_len);
			return; /* likewise */
		}
	}
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		/* Relaxed: the child's only thread; readers treat these as hints anyway. */
		__atomic_store_n(&e->rec[v].preempted, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->rec[v].is_idle, 0, __ATOMIC_RELAXED);
		/* The parent's control thread may have forked in the middle of a steal update:
		 * nobody will finish it here, so close it (readers wait while version is odd). */
		uint32_t ver = __atomic_load_n(&e->rec[v].version, __ATOMIC_RELAXED);
		if (ver & 1)
			__atomic_store_n(&e->rec[v].version, ver + 1, __ATOMIC_RELAXED);
	}
}

static void fork_child(void)
{
	struct emu_thr *self = emu_self;

	emu_self = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pvhint_tls_vcpu = -1;
	if (self && exit_key != (pthread_key_t)-1)
		pthread_setspecific(exit_key, NULL);
	for (struct pvhint_emu *e = emu_list; e; e = e->gnext) {
		__atomic_store_n(&e->dead, 1, __ATOMIC_RELAXED);
		freeze_page(e);
		/* Records of threads that do not exist here (and the caller's): dropped. */
		for (unsigned v = 0; v < e->c.vcpus; v++) {
			struct emu_vcpu *vc = &e->vc[v];
			for (struct emu_thr *t = vc->threads, *n; t; t = n) {
				n = t->next;
				if (t->statfd >= 0)
					close(t->statfd);
				if (t == self)
					self = NULL;
				free(t);
			}
			vc->threads = NULL;
			vc->nr_att = vc->nr_parked = vc->nr_ksleep = 0;
		}
	}
	if (self) { /* attached to an emulator closed since (orphan): ours to free */
		if (self->statfd >= 0)
			close(self->statfd);
		free(self);
	}
	if (sig_refs > 0)
		sigaction(sig_no, &sig_old, NULL);
	sig_refs = 0;
	__atomic_store_n(&inflight, 0, __ATOMIC_RELAXED);
	/* fork_prepare's glock: this thread's, released without lock_leave's stop check. */
	__atomic_store_n(&glock, 0, __ATOMIC_RELAXED);
	emu_in_lock--;
}

/* Called with glock held. */
static void list_del(struct pvhint_emu *e)
{
	for (struct pvhint_emu **pp = &emu_list; *pp; pp = &(*pp)->gnext) {
		if (*pp == e) {
			*pp = e->gnext;
			break;
		}
	}
}

static void fork_register(void)
{
	/* Without it (ENOMEM) a child must not touch the emulator, as before. */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- open / close ---- */

int pvhint__emu_open(struct pvhint_impl *im, const char *spec, const char *label)
{
	struct emu_conf c;
	int err = pvhint__emu_parse(spec, label, &c);

	if (err)
		return err;
	struct pvhint_emu *e = calloc(1, sizeof(*e));
	if (!e)
		return pvhint__fail(-ENOMEM, "out of memory");
	e->c = c;
	e->vc = calloc(c.vcpus, sizeof(*e->vc));
	e->cur = calloc(c.pcpus, sizeof(*e->cur));
	e->slice_end = calloc(c.pcpus, sizeof(*e->slice_end));
	e->busy = calloc(c.pcpus, sizeof(*e->busy));
	if (!e->vc || !e->cur || !e->slice_end || !e->busy) {
		err = pvhint__fail(-ENOMEM, "out of memory");
		goto fail_mem;
	}
	for (unsigned p = 0; p < c.pcpus; p++)
		e->cur[p] = -1;
	err = pvhint__page_alloc(im, PVHINT_SOURCE_EMU, c.vcpus,
				 PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE,
				 c.export_path[0] ? c.export_path : NULL);
	if (err) {
		char why[200]; /* the message lives in the buffer pvhint__fail writes */
		snprintf(why, sizeof(why), "%s", pvhint_errmsg());
		pvhint__fail(err, "emu: export: %s", why);
		goto fail_mem;
	}
	e->rec = pvhint__rec_w(im);
	e->t0 = e->last_flush = os_now_ns();
	e->rng = c.seed ? c.seed : 0x9E3779B97F4A7C15ull;

	e->im = im;
	e->khalt = (c.mode == EMU_SLICE || c.mode == EMU_NOISY) && c.ksleep;
	if (e->khalt)
		pvhint__bpf_prepare(); /* now: a load at the first attach would delay it */
	pthread_once(&fork_once, fork_register);
	lock_enter(&glock);
	err = sig_get(c.sig);
	if (!err) {
		e->gnext = emu_list;
		emu_list = e;
	}
	lock_leave(&glock);
	if (err)
		goto fail_page;

	publish(e, e->t0);

	/* The control thread takes no signals: neither ours nor the application's. */
	pthread_attr_t attr;
	sigset_t all;
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setsigmask_np(&attr, &all);
	err = -pthread_create(&e->ctl, &attr, control_main, e);
	pthread_attr_destroy(&attr);
	if (err) {
		pvhint__fail(err, "emu: cannot start the control thread: %s", strerror(-err));
		goto fail_sig;
	}
	e->ctl_started = true;
	im->emu = e;
	return 0;

fail_sig:
	lock_enter(&glock);
	list_del(e);
	sig_put();
	lock_leave(&glock);
fail_page:
	pvhint__page_free(im);
fail_mem:
	free(e->busy);
	free(e->slice_end);
	free(e->cur);
	free(e->vc);
	free(e);
	return err;
}

static void emu_free(struct pvhint_impl *im, struct pvhint_emu *e)
{
	free(e->busy);
	free(e->slice_end);
	free(e->cur);
	free(e->vc);
	free(e);
	im->emu = NULL;
}

void pvhint__emu_close(struct pvhint_impl *im)
{
	struct pvhint_emu *e = im->emu;

	if (__atomic_load_n(&e->dead, __ATOMIC_RELAXED)) {
		/* Inherited through fork: no thread, no signal, no record left (fork_child). */
		lock_enter(&glock);
		list_del(e);
		lock_leave(&glock);
		emu_free(im, e);
		return;
	}
	lock_enter(&e->lock);
	e->exiting = true;
	kick_ctl(e);
	lock_leave(&e->lock);
	if (e->ctl_started)
		pthread_join(e->ctl, NULL);

	lock_enter(&glock);
	lock_enter(&e->lock);
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_thr *t = e->vc[v].threads;
		while (t) {
			struct emu_thr *next = t->next;
			/* Orphan: the thread frees its record itself; release it if held. */
			__atomic_store_n(&t->emu, NULL, __ATOMIC_RELAXED);
			t->next = NULL;
			__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST);
			futex_wake(&t->hold);
			t = next;
		}
	}
	lock_leave(&e->lock);
	list_del(e);
	sig_put();
	lock_leave(&glock);
	emu_free(im, e);
}

/* ---- attach / detach ---- */

static void wait_hold(struct emu_thr *t)
{
	/*
	 * Library code, not the application's: blocking here is the vCPU not running, not the
	 * program sleeping, so in_hold tells the ksleep sampling to count the thread runnable (and
	 * send_stop not to signal it). seq_cst on in_hold and hold: Dekker with the control side,
	 * which stores hold = 1 and then loads in_hold; after clearing in_hold we re-read hold, so
	 * either it saw in_hold = 0 (and stops us the usual way) or we see the new hold and wait.
	 */
	for (;;) {
		__atomic_store_n(&t->in_hold, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&t->hold, __ATOMIC_SEQ_CST))
			futex_wait(&t->hold, 1, 0);
		__atomic_store_n(&t->in_hold, 0, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&t->hold, __ATOMIC_SEQ_CST))
			return;
	}
}

/* Unlink t from its emulator (if any) and free it. Runs on t's own thread. */
static void thr_release(struct emu_thr *t)
{
	lock_enter(&glock);
	struct pvhint_emu *e = t->emu;
	if (e) {
		lock_enter(&e->lock);
		struct emu_vcpu *vc = &e->vc[t->vcpu];
		for (struct emu_thr **pp = &vc->threads; *pp; pp = &(*pp)->next) {
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		}
		vc->nr_att--;
		if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) == THR_PARKED)
			vc->nr_parked--;
		set_ksleep(e, vc, t, false);
		vc->gone_stops += __atomic_load_n(&t->stops, __ATOMIC_RELAXED);
		vc->gone_stopped_ns += __atomic_load_n(&t->stopped_ns, __ATOMIC_RELAXED);
		vc->gone_eintr += __atomic_load_n(&t->eintr, __ATOMIC_RELAXED);
		__atomic_store_n(&t->emu, NULL, __ATOMIC_RELAXED);
		__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST); /* a pending signal won't block */
		publish(e, os_now_ns());
		kick_ctl(e);
		lock_leave(&e->lock);
	}
	lock_leave(&glock);
	/*
	 * A stop signal may still be queued for this thread: the handler reads emu_self, so clear
	 * it (ordered before the free by the signal fence, the handler runs on this thread).
	 */
	emu_self = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pvhint_tls_vcpu = -1;
	if (t->statfd >= 0) {
		/* close is a cancellation point (see nap_ns); this runs also in a key destructor
		 * after the thread returned, where acting on a pending cancel would replace the
		 * thread's result with PTHREAD_CANCELED. */
		int cs;
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
		close(t->statfd);
		pthread_setcancelstate(cs, NULL);
	}
	free(t);
}

static void thr_exit(void *p)
{
	if (p && emu_self == p)
		thr_release(p);
}

static void make_key(void)
{
	if (pthread_key_create(&exit_key, thr_exit))
		exit_key = (pthread_key_t)-1;
}

/* The live emulator behind h, or a negative errno with the message set. */
static int emu_of(pvhint_t *h, const char *fn, struct pvhint_emu **out)
{
	*out = NULL;
	if (!h)
		return pvhint__fail(-EINVAL, "%s: handle is NULL", fn);
	struct pvhint_emu *e = h->impl->emu;
	if (!e)
		return pvhint__fail(-ENOTSUP, "%s: the hint source is %s, not emu", fn,
				    pvhint_source_name(h));
	/* Relaxed: set by fork_child on this very thread, before any other thread existed. */
	if (__atomic_load_n(&e->dead, __ATOMIC_RELAXED))
		return pvhint__fail(-ECHILD,
				    "%s: this emulator belongs to the parent process (inert after "
				    "fork)",
				    fn);
	*out = e;
	return 0;
}

int pvhint_emu_attach(pvhint_t *h, unsigned v)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_attach", &e);

	if (err)
		return err;
	if (v >= e->c.vcpus)
		return pvhint__fail(-EINVAL, "pvhint_emu_attach: vCPU %u out of range (0..%u)", v,
				    e->c.vcpus - 1);
	if (emu_self)
		thr_release(emu_self); /* re-attach: move */
	struct emu_thr *t = calloc(1, sizeof(*t));
	if (!t)
		return pvhint__fail(-ENOMEM, "out of memory");
	t->tid = (pid_t)syscall(SYS_gettid);
	t->vcpu = v;
	t->state = THR_RUN;
	int cs; /* open is a cancellation point: see nap_ns */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	t->statfd = open("/proc/thread-self/stat", O_RDONLY | O_CLOEXEC);
	if (e->khalt)
		t->krec = pvhint__bpf_self_record(); /* the sampler's exact source, when it loads */
	pthread_setcancelstate(cs, NULL);
	pthread_once(&key_once, make_key);
	if (exit_key != (pthread_key_t)-1)
		pthread_setspecific(exit_key, t);
	/* Before the record is visible to the control side: a stop signal must find it. */
	emu_self = t;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pvhint_tls_vcpu = (int)v;

	lock_enter(&glock);
	lock_enter(&e->lock);
	t->emu = e;
	t->next = e->vc[v].threads;
	e->vc[v].threads = t;
	e->vc[v].nr_att++;
	if (e->vc[v].desched && e->c.mode != EMU_RANDOM)
		t->hold = 1; /* joining a held vCPU: wait for its turn below */
	publish(e, os_now_ns());
	kick_ctl(e);
	lock_leave(&e->lock);
	lock_leave(&glock);
	wait_hold(t);
	return 0;
}

int pvhint_emu_attach_next(pvhint_t *h)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_attach_next", &e);

	if (err)
		return err;
	unsigned v = __atomic_fetch_add(&e->next_attach, 1, __ATOMIC_RELAXED) % e->c.vcpus;
	return pvhint_emu_attach(h, v);
}

int pvhint_emu_detach(pvhint_t *h)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_detach", &e);

	if (err)
		return err;
	struct emu_thr *t = emu_self;
	if (!t || (thr_emu(t) != e && thr_emu(t)))
		return pvhint__fail(-EINVAL,
				    "pvhint_emu_detach: thread not attached to this handle");
	if (exit_key != (pthread_key_t)-1)
		pthread_setspecific(exit_key, NULL);
	thr_release(t);
	return 0;
}

/* ---- park / unpark (the runtime's blocking waits) ---- */

void pvhint__emu_park(struct pvhint_impl *im)
{
	struct pvhint_emu *e = im->emu;
	struct emu_thr *t = emu_self;

	if (!t || thr_emu(t) != e)
		return;
	for (;;) {
		lock_enter(&e->lock);
		uint32_t run = THR_RUN;
		/* Under the lock: the control side never sees a half-parked thread. */
		if (__atomic_compare_exchange_n(&t->state, &run, THR_PARKED, false,
						__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			break;
		lock_leave(&e->lock);
		/*
		 * STOPREQ: our stop signal is on its way (or the handler ran and is about to set
		 * RUN). Let it land now, in user code, rather than in the wait the caller is about
		 * to make, where it would cause EINTR. The control side reverts STOPREQ after
		 * ack_timeout, so this ends. A short sleep rather than sched_yield: any return from
		 * the kernel delivers the signal, and TSan delivers it only in calls it intercepts.
		 */
		nap_ns(1000);
	}
	struct emu_vcpu *vc = &e->vc[t->vcpu];
	bool was = runnable(e, vc);
	set_ksleep(e, vc, t, false); /* it runs (this code): a stale sample */
	vc->nr_parked++;
	if (was && !runnable(e, vc)) { /* the vCPU halts: flags change, pCPU may go */
		publish(e, os_now_ns());
		kick_ctl(e);
	}
	lock_leave(&e->lock);
}

void pvhint__emu_unpark(struct pvhint_impl *im)
{
	struct pvhint_emu *e = im->emu;
	struct emu_thr *t = emu_self;

	if (!t || thr_emu(t) != e)
		return;
	lock_enter(&e->lock);
	if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) == THR_PARKED) {
		struct emu_vcpu *vc = &e->vc[t->vcpu];
		bool was = runnable(e, vc);
		/* Under the lock, ordered against stop_vcpu's hold stores and state loads. */
		__atomic_store_n(&t->state, THR_RUN, __ATOMIC_SEQ_CST);
		vc->nr_parked--;
		if (!was && runnable(e, vc)) { /* the vCPU wakes from halt */
			publish(e, os_now_ns());
			kick_ctl(e);
		}
	}
	lock_leave(&e->lock);
	/* A held vCPU: do not return to the caller's code until it runs. */
	wait_hold(t);
}

/* ---- scripted control and statistics ---- */

static const char *const mode_names[] = {"slice", "noisy", "script", "random"};

int pvhint_emu_deschedule(pvhint_t *h, unsigned v, uint64_t ns)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_deschedule", &e);

	if (err)
		return err;
	if (e->c.mode != EMU_SCRIPT)
		return pvhint__fail(-EINVAL, "pvhint_emu_deschedule: mode is %s, not script",
				    mode_names[e->c.mode]);
	if (v >= e->c.vcpus)
		return pvhint__fail(-EINVAL, "pvhint_emu_deschedule: vCPU %u out of range", v);
	if (emu_self && thr_emu(emu_self) == e && emu_self->vcpu == v)
		return pvhint__fail(-EDEADLK, "pvhint_emu_deschedule: the caller runs on vCPU %u",
				    v);
	lock_enter(&e->lock);
	uint64_t now = os_now_ns();
	stop_vcpu(e, v, now);
	e->vc[v].until = ns ? now + ns : 0;
	kick_ctl(e); /* timed resume, kblocked polling */
	lock_leave(&e->lock);
	return 0;
}

int pvhint_emu_resume(pvhint_t *h, unsigned v)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_resume", &e);

	if (err)
		return err;
	if (e->c.mode != EMU_SCRIPT)
		return pvhint__fail(-EINVAL, "pvhint_emu_resume: mode is %s, not script",
				    mode_names[e->c.mode]);
	if (v >= e->c.vcpus)
		return pvhint__fail(-EINVAL, "pvhint_emu_resume: vCPU %u out of range", v);
	lock_enter(&e->lock);
	run_vcpu(e, v, os_now_ns());
	lock_leave(&e->lock);
	return 0;
}

int pvhint_emu_stats(pvhint_t *h, unsigned v, struct pvhint_emu_stats *out)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_stats", &e);

	if (err)
		return err;
	if (v >= e->c.vcpus || !out)
		return pvhint__fail(-EINVAL, "pvhint_emu_stats: vCPU %u out of range", v);
	lock_enter(&e->lock);
	struct emu_vcpu *vc = &e->vc[v];
	memset(out, 0, sizeof(*out));
	out->desched = vc->nr_desched;
	out->ack_timeouts = vc->ack_timeouts;
	out->kernel_skips = vc->kernel_skips;
	out->stops = vc->gone_stops;
	out->stopped_ns = vc->gone_stopped_ns;
	out->eintr = vc->gone_eintr;
	out->threads = vc->nr_att;
	out->parked = vc->nr_parked;
	out->ksleep = vc->nr_ksleep;
	out->samples = vc->samples;
	for (struct emu_thr *t = vc->threads; t; t = t->next) {
		out->stops += __atomic_load_n(&t->stops, __ATOMIC_RELAXED);
		out->stopped_ns += __atomic_load_n(&t->stopped_ns, __ATOMIC_RELAXED);
		out->eintr += __atomic_load_n(&t->eintr, __ATOMIC_RELAXED);
	}
	lock_leave(&e->lock);
	return 0;
}

int pvhint_emu_signal(pvhint_t *h)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_signal", &e);

	if (err)
		return err;
	return sig_no;
}

const char *pvhint_emu_mode(pvhint_t *h)
{
	struct pvhint_emu *e = h ? h->impl->emu : NULL;

	return e ? mode_names[e->c.mode] : NULL;
}
