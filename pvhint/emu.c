/* SPDX-License-Identifier: MIT */
/*
 * The overcommit emulator (source emu): V vCPUs on P physical CPUs, inside the process.
 *
 * Model. Threads attach to a vCPU (pvhint_emu_attach). A vCPU is emu_runnable while at least one of
 * its threads is neither parked (pvhint_thread_park/unpark bracket the runtime's blocking waits)
 * nor, in slice and noisy modes, seen sleeping in the kernel by the ksleep sampling
 * (emu_sample_threads, also run at once when the bpf program posts a halt or wake-up: emu_kw_arm),
 * and halted otherwise, as a guest vCPU that executed HLT. vCPU v lives on
 * pCPU v % P. A control thread runs the mode:
 *   slice   each pCPU round-robins over its emu_runnable vCPUs, one quantum each; a vCPU that halts
 *           gives the pCPU to the next emu_runnable one at once; a halted vCPU that wakes on a busy
 *           pCPU waits for its turn (the stranded wake-up of real overcommit).
 *   noisy   every vCPU has its own pCPU, taken by a neighbour for 'duty' of each 'period'
 *           (phases staggered across vCPUs).
 *   script  only pvhint_emu_deschedule()/resume() (and timed resumes) change anything.
 *   random  the flags and steal change at random every 'period'; no thread is ever stopped.
 * It publishes the page of pvhint_abi.h as the host would: preempted = descheduled and emu_runnable
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
 * ended by emu_reap_acks(). pvhint_emu_deschedule() (script mode) does wait: its caller expects the
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
 *     code), polling it every ksleep while the vCPU stays held and stopping it once it runs (at
 *     its wake-up, with the bpf program's events). Limits: without the events, a thread that wakes
 *     runs user code for up to that poll interval while its vCPU is held; a thread seen running
 *     that enters a non-restarting call in the microseconds before the signal lands gets EINTR;
 *     the handler detects that case (x86-64, aarch64) and counts it in pvhint_emu_stats().eintr.
 *     Restartable calls (read, write, futex without timeout, ...) are restarted by SA_RESTART and
 *     unaffected.
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
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

__thread struct emu_thr *emu_self EMU_IE;
/*
 * Non-zero while this thread holds emu_glock or an emulator lock. A stop that lands then must not
 * block in the handler (the control side or resume() needs the lock to release it): the handler
 * only notes it, and the thread stops itself when it drops the lock
 * (emu_lock_enter/emu_lock_leave). Without sanitizers this happens only for a stop delivered after
 * its ack timed out; TSan delivers every signal late, at the end of its interceptors, e.g. just
 * after a mutex lock.
 */
__thread int emu_in_lock EMU_IE;

unsigned pvhint_thread_tls_words(struct pvhint_tls_word *out, unsigned max)
{
	struct pvhint_tls_word w[] = {{&emu_self, sizeof(emu_self)},
				      {&emu_in_lock, sizeof(emu_in_lock)},
				      {&pvhint_tls_vcpu, sizeof(pvhint_tls_vcpu)},
				      {&pvhint_tls_slot, sizeof(pvhint_tls_slot)}};
	unsigned n = sizeof(w) / sizeof(w[0]);
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = w[i];
	return n;
}

uint32_t emu_glock;

int pvhint_thread_in_lock(void)
{
	return emu_in_lock != 0;
}

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static struct pvhint_emu *emu_list; /* every open emulator (emu_glock), for fork_child */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/*
 * A short sleep on an application thread. nanosleep and open are POSIX cancellation points, and
 * the emulator's calls are not the application's: a deferred cancel pending on the thread must
 * act at the application's next cancellation point, not inside a pthread_mutex_lock (or after the
 * thread already returned from pthread_cond_wait, counting it both returned and cancelled).
 */
void emu_nap_ns(long ns)
{
	int cs;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	nanosleep(&(struct timespec){0, ns}, NULL);
	pthread_setcancelstate(cs, NULL);
}

/* Record t's sampled kernel state (emu->lock held). */
void emu_set_ksleep(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t, bool sl)
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

/*
 * The emulator's locks are its own futex mutexes, not pthread mutexes: under pvrt's preload
 * library pthread_mutex_lock is pvrt's mutex, whose slow path calls pvhint_thread_park(), which
 * takes these locks; an interposed lock here would recurse. They are the OS layer's three-state
 * lock (os/pvrt_os.h), sleeping in the kernel at once (no spinning). Taken and dropped on a
 * thread that may be attached (see emu_in_lock).
 */
void emu_lock_enter(uint32_t *m)
{
	emu_in_lock++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST); /* the handler sees it before we may block */
	os_lock(m, 0);
}

void emu_lock_leave(uint32_t *m)
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
			emu_wait_hold(t);
	}
}

/*
 * The control thread sleeps until 'until' (UINT64_MAX: no limit) or a kick. The kick count is
 * read under the lock, so a kick made after we drop the lock changes it and the futex wait
 * returns at once: no lost wake-up.
 */
void emu_ctl_sleep(struct pvhint_emu *e, uint64_t now, uint64_t until)
{
	if (e->kw.fd >= 0) {
		/* ppoll, not epoll_wait: the slices and ack deadlines need better than 1 ms. */
		struct pollfd pf[2] = {{.fd = e->kw.fd, .events = POLLIN},
				       {.fd = e->kw_kick, .events = POLLIN}};
		uint64_t rel = until == UINT64_MAX ? 0 : until - now;
		struct timespec ts = {(time_t)(rel / OS_NS_PER_SEC), (long)(rel % OS_NS_PER_SEC)};
		e->ctl_asleep = true;
		emu_lock_leave(&e->lock);
		int n = ppoll(pf, 2, until == UINT64_MAX ? NULL : &ts, NULL);
		if (n > 0 && pf[0].revents) {
			pvhint__bpf_kwatch_drain();
			e->ksample_now = true; /* written by the control thread only */
		}
		if (n > 0 && pf[1].revents) {
			uint64_t x;
			ssize_t r = read(e->kw_kick, &x, sizeof(x));
			(void)r; /* nonblocking: a kick made since the poll is read again later */
		}
		emu_lock_enter(&e->lock);
		e->ctl_asleep = false;
		return;
	}
	uint32_t k = __atomic_load_n(&e->kick, __ATOMIC_RELAXED);
	emu_lock_leave(&e->lock);
	emu_futex_wait(&e->kick, k, until == UINT64_MAX ? 0 : until - now);
	emu_lock_enter(&e->lock);
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
 * emulators of its own. The parent holds emu_glock across fork (prepare/parent handlers), so the
 * child's lists and signal bookkeeping are consistent; the emulators' own locks may have been
 * held by threads that do not exist in the child, so the child never takes them.
 */
static void fork_prepare(void)
{
	emu_lock_enter(&emu_glock);
}

static void fork_parent(void)
{
	emu_lock_leave(&emu_glock);
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
	emu_sig_fork_child();
	/* fork_prepare's emu_glock: this thread's, released without emu_lock_leave's stop check. */
	__atomic_store_n(&emu_glock, 0, __ATOMIC_RELAXED);
	emu_in_lock--;
}

/* Called with emu_glock held. */
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

/*
 * How khalt learns kernel sleeps (PVRT_EMU_KSTATE): "events" (the default) samples the bpf
 * records every ksleep and at once when the program posts a vCPU's halt or wake-up; "sample"
 * only every ksleep; "proc" reads /proc every ksleep. Where the program cannot load
 * (unprivileged, no BTF, built without) events and sample fall back to proc.
 */
static int kstate_open(struct pvhint_emu *e)
{
	const char *ks = secure_getenv("PVRT_EMU_KSTATE");
	bool events = true;

	if (ks && *ks && strcmp(ks, "events")) {
		if (!strcmp(ks, "proc"))
			return 0;
		if (strcmp(ks, "sample"))
			return pvhint__fail(
			    -EINVAL,
			    "emu: PVRT_EMU_KSTATE=%.40s: expected events, sample or "
			    "proc",
			    ks);
		events = false;
	}
	pvhint__bpf_prepare(); /* now: a load at the first attach would delay it */
	if (!events)
		return 0;
	e->kw_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->kw_kick < 0 || pvhint__bpf_kwatch_open(&e->kw)) {
		/* Not loaded here, or another emulator has the events: sampling only. */
		e->kw.fd = -1;
		if (e->kw_kick >= 0)
			close(e->kw_kick);
		e->kw_kick = -1;
	}
	return 0;
}

static void kstate_close(struct pvhint_emu *e)
{
	int cs; /* close() is a cancellation point, and kwatch_close holds the instance's mutex */

	if (e->kw.fd < 0)
		return;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	pvhint__bpf_kwatch_close();
	close(e->kw_kick);
	pthread_setcancelstate(cs, NULL);
	e->kw.fd = e->kw_kick = -1;
}

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
	e->kw.fd = e->kw_kick = -1;
	e->khalt = (c.mode == EMU_SLICE || c.mode == EMU_NOISY) && c.ksleep;
	if (e->khalt) {
		int cs; /* the loader and libbpf close files: cancellation points (emu_nap_ns) */
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
		err = kstate_open(e);
		pthread_setcancelstate(cs, NULL);
		if (err)
			goto fail_page;
	}
	pthread_once(&fork_once, fork_register);
	emu_lock_enter(&emu_glock);
	err = emu_sig_get(c.sig);
	if (!err) {
		e->gnext = emu_list;
		emu_list = e;
	}
	emu_lock_leave(&emu_glock);
	if (err)
		goto fail_page;

	emu_publish(e, e->t0);

	/* The control thread takes no signals: neither ours nor the application's. */
	pthread_attr_t attr;
	sigset_t all;
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setsigmask_np(&attr, &all);
	err = -pthread_create(&e->ctl, &attr, emu_control_main, e);
	pthread_attr_destroy(&attr);
	if (err) {
		pvhint__fail(err, "emu: cannot start the control thread: %s", strerror(-err));
		goto fail_sig;
	}
	e->ctl_started = true;
	/*
	 * Return once the control thread runs its own code: its start is where a thread
	 * allocates (its stack, a sanitizer's per-thread state), and a fork() then leaves the
	 * child a lock that no thread of its own holds. glibc's malloc is fork-safe; the
	 * sanitizers' allocators are not (test_emu_export's child, forked right after an open,
	 * hung in LeakSanitizer's exit check). Acquire: pairs with the control thread's store.
	 */
	while (!__atomic_load_n(&e->ctl_up, __ATOMIC_ACQUIRE))
		emu_futex_wait(&e->ctl_up, 0, 0);
	im->emu = e;
	return 0;

fail_sig:
	emu_lock_enter(&emu_glock);
	list_del(e);
	emu_sig_put();
	emu_lock_leave(&emu_glock);
fail_page:
	kstate_close(e);
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
		/* Inherited through fork: no thread, no signal, no record left (fork_child). The
		 * program's counts and ring are the parent's (kwatch_close would end its events):
		 * only our descriptor goes. */
		if (e->kw_kick >= 0)
			close(e->kw_kick);
		emu_lock_enter(&emu_glock);
		list_del(e);
		emu_lock_leave(&emu_glock);
		emu_free(im, e);
		return;
	}
	emu_lock_enter(&e->lock);
	e->exiting = true;
	emu_kick_ctl(e);
	emu_lock_leave(&e->lock);
	if (e->ctl_started)
		pthread_join(e->ctl, NULL);
	kstate_close(e);

	emu_lock_enter(&emu_glock);
	emu_lock_enter(&e->lock);
	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_thr *t = e->vc[v].threads;
		while (t) {
			struct emu_thr *next = t->next;
			/* Orphan: the thread frees its record itself; release it if held. */
			__atomic_store_n(&t->emu, NULL, __ATOMIC_RELAXED);
			t->next = NULL;
			__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST);
			emu_futex_wake(&t->hold);
			t = next;
		}
	}
	emu_lock_leave(&e->lock);
	list_del(e);
	emu_sig_put();
	emu_lock_leave(&emu_glock);
	emu_free(im, e);
}

/* ---- attach / detach ---- */

/* Tell the program which emulated vCPU (+ 1; 0: none) t's kernel sleeps count for. Only t's own
 * thread calls this: the program reads it at t's next switch, which comes after the store. */
static void kw_name_vcpu(struct pvhint_emu *e, struct emu_thr *t, unsigned v1)
{
	if (e->kw.fd >= 0 && t->krec)
		__atomic_store_n(&e->kw.vcpu1[t->kslot], (uint16_t)v1, __ATOMIC_RELAXED);
}

void emu_wait_hold(struct emu_thr *t)
{
	/*
	 * Library code, not the application's: blocking here is the vCPU not running, not the
	 * program sleeping, so in_hold tells the ksleep sampling to count the thread emu_runnable
	 * (and emu_send_stop not to signal it). seq_cst on in_hold and hold: Dekker with the
	 * control side, which stores hold = 1 and then loads in_hold; after clearing in_hold we
	 * re-read hold, so either it saw in_hold = 0 (and stops us the usual way) or we see the new
	 * hold and wait.
	 * While held, every signal is blocked (glibc's two cannot be), as in the stop handler: a
	 * stopped vCPU runs no handler, and the kernel gives a process-directed signal to a
	 * thread that runs, or keeps it pending (the M:N runtime relies on idle threads taking
	 * only what it lets them: a held worker took a signal with the mask it had before).
	 */
	uint64_t prev = 0;
	bool masked = false;
	for (;;) {
		__atomic_store_n(&t->in_hold, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&t->hold, __ATOMIC_SEQ_CST)) {
			if (!masked) {
				/* Not signals 32 and 33 (glibc's), nor our stop signal: a stop
				 * sent just before we came here must be acknowledged (its handler
				 * holds in turn), or the control side waits out ack_timeout. */
				uint64_t all = ~((uint64_t)3 << 31);
				int stop = emu_sig_number();
				if (stop)
					all &= ~((uint64_t)1 << (stop - 1));
				syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &prev, 8);
				masked = true;
			}
			emu_futex_wait(&t->hold, 1, 0);
		}
		__atomic_store_n(&t->in_hold, 0, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&t->hold, __ATOMIC_SEQ_CST))
			break;
	}
	if (masked)
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &prev, NULL, 8);
}

/* Unlink t from its emulator (if any) and free it. Runs on t's own thread. */
static void thr_release(struct emu_thr *t)
{
	emu_lock_enter(&emu_glock);
	struct pvhint_emu *e = t->emu;
	if (e) {
		emu_lock_enter(&e->lock);
		struct emu_vcpu *vc = &e->vc[t->vcpu];
		for (struct emu_thr **pp = &vc->threads; *pp; pp = &(*pp)->next) {
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		}
		vc->nr_att--;
		kw_name_vcpu(e, t, 0);
		if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) == THR_PARKED)
			vc->nr_parked--;
		emu_set_ksleep(e, vc, t, false);
		vc->gone_stops += __atomic_load_n(&t->stops, __ATOMIC_RELAXED);
		vc->gone_stopped_ns += __atomic_load_n(&t->stopped_ns, __ATOMIC_RELAXED);
		vc->gone_eintr += __atomic_load_n(&t->eintr, __ATOMIC_RELAXED);
		__atomic_store_n(&t->emu, NULL, __ATOMIC_RELAXED);
		__atomic_store_n(&t->hold, 0, __ATOMIC_SEQ_CST); /* a pending signal won't block */
		emu_publish(e, os_now_ns());
		emu_kick_ctl(e);
		emu_lock_leave(&e->lock);
	}
	emu_lock_leave(&emu_glock);
	/*
	 * A stop signal may still be queued for this thread: the handler reads emu_self, so clear
	 * it (ordered before the free by the signal fence, the handler runs on this thread).
	 */
	emu_self = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pvhint_tls_vcpu = -1;
	if (t->statfd >= 0) {
		/* close is a cancellation point (see emu_nap_ns); this runs also in a key
		 * destructor after the thread returned, where acting on a pending cancel would
		 * replace the thread's result with PTHREAD_CANCELED. */
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

static int attach(pvhint_t *h, unsigned v, bool parked, const char *fn)
{
	struct pvhint_emu *e;
	int err = emu_of(h, fn, &e);

	if (err)
		return err;
	if (v >= e->c.vcpus)
		return pvhint__fail(-EINVAL, "%s: vCPU %u out of range (0..%u)", fn, v,
				    e->c.vcpus - 1);
	if (emu_self)
		thr_release(emu_self); /* re-attach: move */
	struct emu_thr *t = calloc(1, sizeof(*t));
	if (!t)
		return pvhint__fail(-ENOMEM, "out of memory");
	t->tid = (pid_t)syscall(SYS_gettid);
	t->vcpu = v;
	/* Parked: it does not make its vCPU runnable (nor is it signalled) until it unparks. */
	t->state = parked ? THR_PARKED : THR_RUN;
	int cs; /* open is a cancellation point: see emu_nap_ns */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	t->statfd = open("/proc/thread-self/stat", O_RDONLY | O_CLOEXEC);
	if (e->khalt) /* the sampler's exact source, when it loads */
		t->krec = pvhint__bpf_self_record(&t->kslot);
	pthread_setcancelstate(cs, NULL);
	pthread_once(&key_once, make_key);
	if (exit_key != (pthread_key_t)-1)
		pthread_setspecific(exit_key, t);
	/* Before the record is visible to the control side: a stop signal must find it. */
	emu_self = t;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pvhint_tls_vcpu = (int)v;

	emu_lock_enter(&emu_glock);
	emu_lock_enter(&e->lock);
	t->emu = e;
	kw_name_vcpu(e, t, v + 1);
	t->next = e->vc[v].threads;
	e->vc[v].threads = t;
	e->vc[v].nr_att++;
	e->vc[v].nr_parked += parked;
	if (e->vc[v].desched && e->c.mode != EMU_RANDOM)
		t->hold = 1; /* joining a held vCPU: wait for its turn below */
	emu_publish(e, os_now_ns());
	emu_kick_ctl(e);
	emu_lock_leave(&e->lock);
	emu_lock_leave(&emu_glock);
	if (!parked) /* a parked thread waits for its vCPU's turn when it unparks */
		emu_wait_hold(t);
	return 0;
}

int pvhint_emu_attach(pvhint_t *h, unsigned v)
{
	return attach(h, v, false, "pvhint_emu_attach");
}

int pvhint_emu_attach_parked(pvhint_t *h, unsigned v)
{
	return attach(h, v, true, "pvhint_emu_attach_parked");
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

/*
 * Move the calling thread, attached to e and parked, to vCPU v. A runtime's kernel thread that
 * goes idle parks and keeps its record; it moves to the vCPU of the worker it takes next. Only
 * e->lock: no allocation and no emu_glock, either of which a thread (or ULT) the mover is about
 * to run may hold (a fork's prepare handler holds emu_glock while glibc takes malloc's locks).
 */
int pvhint_emu_move(pvhint_t *h, unsigned v)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_move", &e);

	if (err)
		return err;
	if (v >= e->c.vcpus)
		return pvhint__fail(-EINVAL, "pvhint_emu_move: vCPU %u out of range (0..%u)", v,
				    e->c.vcpus - 1);
	struct emu_thr *t = emu_self;
	if (!t || emu_thr_emu(t) != e)
		return pvhint__fail(-EINVAL, "pvhint_emu_move: thread not attached to this handle");
	emu_lock_enter(&e->lock);
	/* Parked: no stop is sent to it. A late one (sent before it parked, after its ack timed
	 * out) is deferred while we hold the lock and then reads the new vCPU's hold. */
	if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) != THR_PARKED) {
		emu_lock_leave(&e->lock);
		return pvhint__fail(-EINVAL, "pvhint_emu_move: thread not parked");
	}
	if (t->vcpu != v) {
		struct emu_vcpu *from = &e->vc[t->vcpu], *to = &e->vc[v];
		for (struct emu_thr **pp = &from->threads; *pp; pp = &(*pp)->next) {
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		}
		emu_set_ksleep(e, from, t, false);
		from->nr_att--;
		from->nr_parked--;
		/* Its stops so far are the old vCPU's (as at detach); only this thread (its
		 * handler, deferred while we hold the lock) writes them. */
		from->gone_stops += __atomic_exchange_n(&t->stops, 0, __ATOMIC_RELAXED);
		from->gone_stopped_ns += __atomic_exchange_n(&t->stopped_ns, 0, __ATOMIC_RELAXED);
		from->gone_eintr += __atomic_exchange_n(&t->eintr, 0, __ATOMIC_RELAXED);
		t->vcpu = v;
		kw_name_vcpu(e, t, v + 1);
		t->next = to->threads;
		to->threads = t;
		to->nr_att++;
		to->nr_parked++;
		/* The new vCPU's hold, as attach and emu_stop_begin set it (unpark waits on it). */
		__atomic_store_n(&t->hold, to->desched && e->c.mode != EMU_RANDOM,
				 __ATOMIC_SEQ_CST);
		emu_publish(e, os_now_ns());
		emu_kick_ctl(e);
	}
	emu_lock_leave(&e->lock);
	pvhint_tls_vcpu = (int)v;
	return 0;
}

int pvhint_emu_detach(pvhint_t *h)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_detach", &e);

	if (err)
		return err;
	struct emu_thr *t = emu_self;
	if (!t || (emu_thr_emu(t) != e && emu_thr_emu(t)))
		return pvhint__fail(-EINVAL,
				    "pvhint_emu_detach: thread not attached to this handle");
	if (exit_key != (pthread_key_t)-1)
		pthread_setspecific(exit_key, NULL);
	thr_release(t);
	return 0;
}

int pvhint_exec_prepare(void)
{
	struct emu_thr *t = emu_self;
	if (t) {
		if (exit_key != (pthread_key_t)-1)
			pthread_setspecific(exit_key, NULL);
		thr_release(t); /* no stop is sent to it after this */
	}
	emu_lock_enter(&emu_glock); /* the signal stays installed meanwhile */
	emu_sig_discard();
	emu_lock_leave(&emu_glock);
	return t != NULL;
}

/* ---- park / unpark (the runtime's blocking waits) ---- */

void pvhint__emu_park(struct pvhint_impl *im)
{
	struct pvhint_emu *e = im->emu;
	struct emu_thr *t = emu_self;

	if (!t || emu_thr_emu(t) != e)
		return;
	for (;;) {
		emu_lock_enter(&e->lock);
		uint32_t run = THR_RUN;
		/* Under the lock: the control side never sees a half-parked thread. */
		if (__atomic_compare_exchange_n(&t->state, &run, THR_PARKED, false,
						__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			break;
		emu_lock_leave(&e->lock);
		/*
		 * STOPREQ: our stop signal is on its way (or the handler ran and is about to set
		 * RUN). Let it land now, in user code, rather than in the wait the caller is about
		 * to make, where it would cause EINTR. The control side reverts STOPREQ after
		 * ack_timeout, so this ends. A short sleep rather than sched_yield: any return from
		 * the kernel delivers the signal, and TSan delivers it only in calls it intercepts.
		 */
		emu_nap_ns(1000);
	}
	struct emu_vcpu *vc = &e->vc[t->vcpu];
	bool was = emu_runnable(e, vc);
	emu_set_ksleep(e, vc, t, false); /* it runs (this code): a stale sample */
	vc->nr_parked++;
	if (was && !emu_runnable(e, vc)) { /* the vCPU halts: flags change, pCPU may go */
		emu_publish(e, os_now_ns());
		emu_kick_ctl(e);
	}
	emu_lock_leave(&e->lock);
}

void pvhint__emu_unpark(struct pvhint_impl *im)
{
	struct pvhint_emu *e = im->emu;
	struct emu_thr *t = emu_self;

	if (!t || emu_thr_emu(t) != e)
		return;
	emu_lock_enter(&e->lock);
	if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) == THR_PARKED) {
		struct emu_vcpu *vc = &e->vc[t->vcpu];
		bool was = emu_runnable(e, vc);
		/* Under the lock, ordered against emu_stop_vcpu's hold stores and state loads. */
		__atomic_store_n(&t->state, THR_RUN, __ATOMIC_SEQ_CST);
		vc->nr_parked--;
		if (!was && emu_runnable(e, vc)) { /* the vCPU wakes from halt */
			emu_publish(e, os_now_ns());
			emu_kick_ctl(e);
		}
	}
	emu_lock_leave(&e->lock);
	/* A held vCPU: do not return to the caller's code until it runs. */
	emu_wait_hold(t);
}

/* ---- directed yield (pvhint_yield_to) ---- */

bool pvhint__emu_can_yield(const struct pvhint_impl *im)
{
	return im->emu && im->emu->c.mode == EMU_SLICE && !im->yield_off &&
	       !__atomic_load_n(&im->emu->dead, __ATOMIC_RELAXED);
}

/* pvhint_yield_to checked that we may yield and that v is in range. */
int pvhint__emu_yield_to(struct pvhint_impl *im, unsigned v)
{
	struct pvhint_emu *e = im->emu;
	struct emu_thr *t = emu_self;
	int self = t && emu_thr_emu(t) == e ? (int)t->vcpu : -1;
	int saved = errno; /* called from lock paths, which leave errno as glibc's do */
	emu_lock_enter(&e->lock);
	int r = emu_yield_to(e, self, v, os_now_ns());
	emu_lock_leave(&e->lock); /* our vCPU's stop, if it lost its pCPU, waits here */
	errno = saved;
	return r;
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
	if (emu_self && emu_thr_emu(emu_self) == e && emu_self->vcpu == v)
		return pvhint__fail(-EDEADLK, "pvhint_emu_deschedule: the caller runs on vCPU %u",
				    v);
	emu_lock_enter(&e->lock);
	uint64_t now = os_now_ns();
	emu_stop_vcpu(e, v, now);
	e->vc[v].until = ns ? now + ns : 0;
	emu_kick_ctl(e); /* timed resume, kblocked polling */
	emu_lock_leave(&e->lock);
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
	emu_lock_enter(&e->lock);
	emu_run_vcpu(e, v, os_now_ns());
	emu_lock_leave(&e->lock);
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
	emu_lock_enter(&e->lock);
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
	uint64_t now = os_now_ns();
	out->desched_ns = vc->desched_ns + (vc->desched ? now - vc->desched_at : 0);
	out->neighbour_ns = vc->neighbour_ns + (vc->neighbour ? now - vc->neighbour_at : 0);
	out->pcpus = e->c.pcpus;
	for (struct emu_thr *t = vc->threads; t; t = t->next) {
		out->stops += __atomic_load_n(&t->stops, __ATOMIC_RELAXED);
		out->stopped_ns += __atomic_load_n(&t->stopped_ns, __ATOMIC_RELAXED);
		out->eintr += __atomic_load_n(&t->eintr, __ATOMIC_RELAXED);
	}
	emu_lock_leave(&e->lock);
	return 0;
}

int pvhint_emu_signal(pvhint_t *h)
{
	struct pvhint_emu *e;
	int err = emu_of(h, "pvhint_emu_signal", &e);

	if (err)
		return err;
	return emu_sig_number();
}

const char *pvhint_emu_mode(pvhint_t *h)
{
	struct pvhint_emu *e = h ? h->impl->emu : NULL;

	return e ? mode_names[e->c.mode] : NULL;
}
