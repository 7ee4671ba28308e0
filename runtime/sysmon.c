/* SPDX-License-Identifier: MIT */
/*
 * sysmon, kernel threads (Ms) and the hand-off of a worker whose thread is stuck in the kernel.
 *
 * The model is Go's: a worker (P: run queues, timers, vCPU identity) is run by one kernel thread
 * (M) at a time, w->owner. A ULT that blocks in the kernel (a pipe read, waitpid, a library's
 * own futex: calls pvrt never sees) blocks its M; sysmon then gives the worker to a spare M,
 * which runs the worker's scheduler loop, so the worker's other ULTs keep running. When the call
 * returns, the old M notices at its next runtime entry (pvrt_rt_enter), or when sysmon's
 * preemption signal kicks it, that it lost its worker: it queues its ULT as ready (any worker
 * runs it, as for a wake-up), goes back to its own scheduler context and waits as a spare.
 *
 * sysmon is one thread that samples every worker each tick: a worker that is not parked, runs a
 * ULT (cur != NULL) and whose switch count has not moved since an earlier sample is stuck on one
 * ULT. If other work waits for it (its queues, or a due timer):
 *   - stuck >= PVRT_HANDOFF_NS and its M is blocked in the kernel (it announced a system call
 *     with pvrt_syscall_enter, or /proc/thread-self/stat says S or D) and its vCPU is not
 *     preempted (then the emulator or the host holds it: not a system call): hand-off;
 *   - stuck >= PVRT_SLICE_NS and running: the preemption signal (preempt.c).
 * It sleeps on a futex when every worker is parked (and no M that lost its worker is still out):
 * an idle runtime costs nothing; a worker leaving its park wakes it (pvrt_sysmon_notify). While
 * it ticks, the tick is half the smaller threshold (50 us .. 1 ms) while some work waits behind
 * a running ULT, and grows up to 2 ms while none does (detection then takes up to one such
 * tick more).
 *
 * Taking a worker away (try_handoff) is a Dekker handshake with the M's runtime entries: sysmon
 * stores m->lost = 1, then fences, then reads m->inrt (the M's runtime depth) and the worker's
 * switch count; an entry stores inrt, then reads lost. Either sysmon sees the M inside the
 * runtime (and gives up), or the M sees lost != 0 and waits until sysmon either gives up (0)
 * or commits (2). The fence is sysmon's alone: membarrier(PRIVATE_EXPEDITED) makes every
 * running thread of the process execute a full barrier, so the entry needs only a compiler
 * barrier (where membarrier is missing, or under TSan, the entry fences). Committed, the old M
 * keeps running its ULT on its own (user code only: it takes no worker state without entering)
 * and nothing of the worker is touched by it again.
 *
 * The worker's scheduler context belongs to its M: when the worker moves, the old M keeps its
 * scheduler context (copied into m->home) and the new M runs the scheduler loop on its own
 * stack. The primary ULT is bound to worker 0 and may continue on another M after worker 0 was
 * handed off; pvrt_finalize brings it back to the thread that called pvrt_init.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread struct pvrt_m *pvrt_tls_m;

__attribute__((noinline)) struct pvrt_m *pvrt_m_cur(void)
{
	__asm__ volatile("" ::: "memory"); /* see pvrt_worker_cur */
	return pvrt_tls_m;
}

/* Not inlined: the context may have moved to another kernel thread since it entered, and a fresh
 * call reads this thread's pointer anew (as pvrt_m_cur). */
__attribute__((noinline)) void pvrt_rt_leave_slow(uint32_t depth)
{
	__asm__ volatile("" ::: "memory");
	struct pvrt_m *m = pvrt_tls_m;
	/* Release: what the section did is visible to sysmon once it reads the depth (acquire) and
	 * takes the worker. m is NULL once pvrt_finalize has freed the Ms. */
	if (m)
		__atomic_store_n(&m->inrt, depth, __ATOMIC_RELEASE);
}

#define ALTSTACK (64u * 1024)

static uint32_t sm_stop;

/* ---------------------------------------------------------------- kernel threads */

/* Before its thread starts: finalize joins every M on the list. */
void pvrt_m_add(struct pvrt_m *m, bool is_main)
{
	__atomic_store_n(&m->statfd, -1, __ATOMIC_RELAXED);
	m->main = is_main;
	pvrt_lock_acquire(&pvrt_rt.mlock);
	m->next = pvrt_rt.ms;
	pvrt_rt.ms = m;
	if (is_main)
		pvrt_rt.main_m = m;
	pvrt_lock_release(&pvrt_rt.mlock);
}

/* On its own thread. */
int pvrt_m_register(struct pvrt_m *m, bool is_main)
{
	(void)is_main;
	__atomic_store_n(&m->statfd, open("/proc/thread-self/stat", O_RDONLY | O_CLOEXEC),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&m->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	m->tp = pvrt_tp_get(); /* the thread's own (M:N mode switches ULTs' in and out) */
	/* Registered here, where the thread is set up, not when it takes a worker: a hand-off
	 * must not wait for a system call (nor for the claim's allocation). */
	m->slot = pvrt_rt.slots ? pvhint_self_vcpu() : 0;
	pvrt_tls_m = m;
	return 0;
}

/*
 * The emulator's view of a kernel thread (emulated hints). Attached once, where the thread is set
 * up: attaching allocates and takes emu_glock, which the ULT a hand-off is for may hold (a ULT
 * preempted inside malloc, or forking: emu's fork handlers hold emu_glock while glibc takes
 * malloc's locks). Without a worker the thread stays attached, parked (it runs none of the
 * vCPU's code); taking a worker moves it to that worker's vCPU (pvhint_emu_move: its
 * emulator's lock only) and unparks it there, on that vCPU's turn.
 */
static void m_emu_setup(struct pvrt_m *m)
{
	if (!pvrt_rt.emu || m->emu)
		return;
	if (pvhint_emu_attach_parked(pvrt_rt.hint, 0))
		return; /* the thread then runs unseen by the emulator, as before attach */
	m->emu = 1;
	m->emu_parked = 1;
}

void pvrt_m_emu_idle(struct pvrt_m *m)
{
	if (m->emu && !m->emu_parked) {
		pvhint_thread_park(pvrt_rt.hint);
		m->emu_parked = 1;
	}
}

static void m_emu_take(struct pvrt_m *m, unsigned v)
{
	if (!m->emu || !m->emu_parked)
		return;
	/* It fails only on a bug (this thread is attached and parked; v is a worker's vCPU): the
	 * thread then counts as its old vCPU's, a hint error, not a hang. */
	int r = pvhint_emu_move(pvrt_rt.hint, v);
	(void)r;
	assert(r == 0);
	m->emu_parked = 0;
	pvhint_thread_unpark(pvrt_rt.hint);
}

/* Run worker w's scheduler on this thread (given to it by sysmon or a hand-back). */
static void take(struct pvrt_m *m, struct pvrt_worker *w)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(w->cpu, &one);
	pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	m_emu_take(m, w->vcpu);
	/* With thread slots the worker's record is its thread's: hints about the worker (the
	 * policy's, its ULTs' lock owner records, sysmon's) are now about this thread. */
	if (pvrt_rt.slots)
		__atomic_store_n(&w->vcpu, (unsigned)m->slot, __ATOMIC_RELAXED);
	w->sched.san = m->home.san;
	w->sched.san.asan_fake = NULL;
	/* The worker's thread pointer, tid and signal mask are now this thread's. */
	pvrt_tls_worker_start(w);
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED);
	rt_tls_worker = w;
	__atomic_store_n(&m->inrt, 1, __ATOMIC_RELAXED); /* a scheduler context is runtime */
	pvrt_sched_loop(w);
}

static void give(struct pvrt_m *s, struct pvrt_worker *w)
{
	__atomic_store_n(&s->give, w, __ATOMIC_RELAXED);
	/* Release: the taker sees the worker as we left it. */
	__atomic_store_n(&s->park, 1, __ATOMIC_RELEASE);
	os_futex_wake(&s->park, 1);
}

/* Wait to be given a worker; NULL when the runtime stops. */
static struct pvrt_worker *wait_given(struct pvrt_m *m)
{
	for (;;) {
		if (__atomic_load_n(&m->park, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&m->park, 0, __ATOMIC_RELAXED);
			struct pvrt_worker *w = __atomic_load_n(&m->give, __ATOMIC_RELAXED);
			m->give = NULL;
			if (w)
				return w;
		}
		if (!m->main && __atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE))
			return NULL;
		os_futex_wait(&m->park, 0, NULL);
	}
}

void pvrt_m_idle(struct pvrt_m *m)
{
	for (;;) {
		if (!m->main && __atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE))
			return;
		pvrt_m_emu_idle(m);
		/* The thread that called pvrt_init only takes worker 0 back (pvrt_primary_home). */
		if (!m->main) {
			pvrt_lock_acquire(&pvrt_rt.mlock);
			m->spare_next = pvrt_rt.spares;
			pvrt_rt.spares = m;
			__atomic_store_n(&pvrt_rt.nspares, pvrt_rt.nspares + 1, __ATOMIC_RELAXED);
			pvrt_lock_release(&pvrt_rt.mlock);
			__atomic_add_fetch(&pvrt_rt.spares_seq, 1, __ATOMIC_RELEASE);
			os_futex_wake(&pvrt_rt.spares_seq, INT32_MAX);
		}
		struct pvrt_worker *w = wait_given(m);
		if (!w)
			return;
		take(m, w);
	}
}

static void *spare_main(void *arg)
{
	struct pvrt_m *m = arg;
	/* Named before it takes a worker (the creator names it too, for top -H at once). */
	prctl(PR_SET_NAME, "pvrt-spare");
	pthread_sigmask(SIG_SETMASK, pvrt_preempt_base_mask(), NULL);
	pvrt_m_register(m, false);
	if (pvrt_rt.segv_installed) {
		m->altstack = mmap(NULL, ALTSTACK, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m->altstack == MAP_FAILED) {
			m->altstack = NULL;
		} else {
			stack_t ss = {.ss_sp = m->altstack, .ss_size = ALTSTACK};
			sigaltstack(&ss, NULL);
		}
	}
	pvrt_san_thread_context(&m->home.san);
	m_emu_setup(m);
	if (m->reserve) {
		pvrt_m_idle(m);
	} else {
		struct pvrt_worker *w = wait_given(m); /* created for a hand-off: given at once */
		if (w) {
			take(m, w);
			pvrt_m_idle(m);
		}
	}
	if (m->emu)
		pvhint_emu_detach(pvrt_rt.hint);
	if (m->altstack) {
		stack_t dis = {.ss_flags = SS_DISABLE};
		sigaltstack(&dis, NULL);
	}
	pvrt_tls_m = NULL;
	return NULL;
}

/*
 * Start a spare M: for a hand-off (its worker is given at once), or a reserve, which joins the
 * spares list once its thread is set up. NULL if it cannot be started.
 *
 * Starting a thread allocates (the M, glibc's thread descriptor and DTV, the stack) with the
 * application's allocator. A hand-off is often needed exactly because a ULT was preempted while
 * it held that allocator's lock and another ULT of its worker now blocks on it in the kernel: a
 * sysmon that started a thread then would block on the same lock, and the program with it. So
 * sysmon never starts threads: hand-offs take spares that are already set up, and a thread of
 * its own, the spawner, keeps one in the list (it may block in the allocator meanwhile; sysmon
 * goes on, hands the worker to the spare, and the lock's holder runs). Only without a spawner
 * (it could not be started) does a hand-off start its spare itself.
 */
static struct pvrt_m *start_spare(bool reserve)
{
	struct pvrt_m *s = pvrt_alloc(sizeof(*s));
	if (!s)
		return NULL;
	/* In the runtime (a scheduler context) until it runs a ULT: never taken before that. */
	s->inrt = 1;
	s->reserve = reserve;
	pvrt_m_add(s, false); /* before the thread registers itself (statfd); freed at finalize */
	if (pthread_create(&s->thread, NULL, spare_main, s))
		return NULL;
	pthread_setname_np(s->thread, "pvrt-spare"); /* as sysmon's */
	s->spare = 1;				     /* joined at finalize */
	return s;
}

static void spawner_wake(void)
{
	__atomic_add_fetch(&pvrt_rt.spawn_seq, 1, __ATOMIC_RELEASE);
	os_futex_wake(&pvrt_rt.spawn_seq, 1);
}

/* A spare M from the list; NULL if there is none now (the spawner is making one). */
static struct pvrt_m *get_spare(void)
{
	pvrt_lock_acquire(&pvrt_rt.mlock);
	struct pvrt_m *s = pvrt_rt.spares;
	if (s) {
		pvrt_rt.spares = s->spare_next;
		__atomic_store_n(&pvrt_rt.nspares, pvrt_rt.nspares - 1, __ATOMIC_RELAXED);
	}
	pvrt_lock_release(&pvrt_rt.mlock);
	if (!pvrt_rt.spawner_on)
		return s ? s : start_spare(false);
	if (!s || !__atomic_load_n(&pvrt_rt.nspares, __ATOMIC_RELAXED))
		spawner_wake();
	return s;
}

/* The spawner: while the spares list is empty, start a reserve and wait until it is in. */
static void *spawner_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint32_t seq = __atomic_load_n(&pvrt_rt.spawn_seq, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE))
			break;
		if (__atomic_load_n(&pvrt_rt.nspares, __ATOMIC_ACQUIRE)) {
			os_futex_wait(&pvrt_rt.spawn_seq, seq, NULL);
			continue;
		}
		uint32_t in = __atomic_load_n(&pvrt_rt.spares_seq, __ATOMIC_ACQUIRE);
		if (!start_spare(true)) {
			/* Out of threads or memory: pvrt_init waits no longer (it waits for a
			 * change of spares_seq); try again in a while, not in a loop. */
			__atomic_add_fetch(&pvrt_rt.spares_seq, 1, __ATOMIC_RELEASE);
			os_futex_wake(&pvrt_rt.spares_seq, INT32_MAX);
			struct timespec ts = {.tv_sec = 0, .tv_nsec = 10000000};
			os_futex_wait(&pvrt_rt.spawn_seq, seq, &ts);
			continue;
		}
		while (__atomic_load_n(&pvrt_rt.spares_seq, __ATOMIC_ACQUIRE) == in &&
		       !__atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE)) {
			os_futex_wait(&pvrt_rt.spares_seq, in, NULL);
		}
	}
	return NULL;
}

void pvrt_ms_fini(void)
{
	struct pvrt_m *m = pvrt_rt.ms;
	while (m) {
		struct pvrt_m *n = m->next;
		if (m->statfd >= 0)
			close(m->statfd);
		if (m->altstack)
			munmap(m->altstack, ALTSTACK);
		pvrt_free(m, sizeof(*m));
		m = n;
	}
	pvrt_rt.ms = pvrt_rt.spares = pvrt_rt.main_m = NULL;
	pvrt_rt.nspares = 0;
	pvrt_tls_m = NULL;
}

/* ---------------------------------------------------------------- losing the worker */

void pvrt_m_lost(struct pvrt_m *m)
{
	uint32_t l;
	/* 1: sysmon is deciding (a few instructions and a membarrier). */
	while ((l = __atomic_load_n(&m->lost, __ATOMIC_ACQUIRE)) == 1)
		os_yield();
	if (l == 0)
		return;
	/* Acquire above: lost_ult and home are sysmon's writes. Cleared first: a kick landing
	 * from here on must not start this again. */
	struct pvrt_ult *self = m->lost_ult;
	__atomic_store_n(&m->lost, 0, __ATOMIC_RELAXED);
	rt_tls_worker = NULL;
	pvrt_m_emu_idle(m);
	m->post_ult = self;
	/* Our home context readies us once we are off this stack; we resume on some worker. */
	pvrt_switch_home(self, m);
}

/* First thing in the home context after pvrt_switch_home (pvrt_after_switch, no worker). */
void pvrt_m_home_resumed(void)
{
	struct pvrt_m *m = pvrt_m_cur();
	pvrt_san_resumed(&m->home.san);
	struct pvrt_ult *u = m->post_ult;
	if (u) {
		m->post_ult = NULL;
		pvrt_ult_ready(u);
	}
}

/* ---------------------------------------------------------------- finalize: home again */

static void post_give_main(struct pvrt_worker *w, void *arg)
{
	struct pvrt_m *m = pvrt_m_cur(), *mm = pvrt_rt.main_m;
	pvrt_ult_ready(arg); /* onto w (worker 0, where it is bound): the main thread runs it */
	rt_tls_worker = NULL;
	__atomic_store_n(&w->owner, mm, __ATOMIC_RELEASE);
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED);
	(void)m;
	give(mm, w);
}

void pvrt_primary_home(void)
{
	struct pvrt_m *m = pvrt_tls_m;
	if (!m || m->main)
		return;
	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w->cur;
	/* To this thread's scheduler context, which hands worker 0 (and us) to the main thread. */
	pvrt_switch(w, &self->ctx, NULL, post_give_main, self);
}

/* ---------------------------------------------------------------- system call announcements */

void pvrt_syscall_enter(void)
{
	struct pvrt_m *m = pvrt_tls_m;
	if (m)
		__atomic_store_n(&m->insys, 1, __ATOMIC_RELAXED);
}

void pvrt_syscall_exit(void)
{
	struct pvrt_m *m = pvrt_tls_m;
	if (!m)
		return;
	__atomic_store_n(&m->insys, 0, __ATOMIC_RELAXED);
	/* Lost the worker during the call? Entering finds out (and moves us to a worker). */
	pvrt_rt_leave(pvrt_rt_enter());
}

/* ---------------------------------------------------------------- sysmon */

/* False if the barrier failed: the M side then had none, and the hand-off must not go on. */
static bool asym_fence(void)
{
	if (pvrt_rt.asym_fence)
		return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return true;
}

/* Is m's thread blocked in the kernel (state S or D)? */
static bool blocked(struct pvrt_m *m)
{
	if (__atomic_load_n(&m->insys, __ATOMIC_RELAXED))
		return true;
	int fd = __atomic_load_n(&m->statfd, __ATOMIC_ACQUIRE);
	if (fd < 0)
		return false;
	char buf[512];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the command name may hold anything */
	return p && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D');
}

static bool has_work(struct pvrt_worker *w, uint64_t now)
{
	return __atomic_load_n(&w->ring.tail, __ATOMIC_RELAXED) !=
		   __atomic_load_n(&w->ring.head, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&w->inj.n, __ATOMIC_RELAXED) || pvrt_timers_due(w, now);
}

static bool try_handoff(struct pvrt_worker *w, struct pvrt_m *m, uint64_t sw)
{
	__atomic_store_n(&m->lost, 1, __ATOMIC_SEQ_CST);
	/* Acquire: pairs with the release of the M's last leave (its writes to the worker). */
	if (!asym_fence() || __atomic_load_n(&m->inrt, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&w->st_switches, __ATOMIC_RELAXED) != sw || !blocked(m))
		goto undo;
	struct pvrt_m *s = get_spare();
	if (!s)
		goto undo;
	/* The M is blocked outside the runtime and waits for us if it enters: the worker is ours.
	 */
	m->lost_ult = __atomic_load_n(&w->cur, __ATOMIC_RELAXED);
	m->home = w->sched;
	/* Until the spare runs a ULT, nothing runs on w for sysmon to look at. */
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&w->owner, s, __ATOMIC_RELAXED);
	__atomic_fetch_add(&w->st_handoffs, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&m->lost, 2, __ATOMIC_RELEASE);
	give(s, w);
	return true;
undo:
	__atomic_store_n(&m->lost, 0, __ATOMIC_RELEASE);
	return false;
}

/* Ms that lost their worker and have not noticed: kick those that run again. */
static bool kick_lost(void)
{
	bool any = false;
	pvrt_lock_acquire(&pvrt_rt.mlock);
	for (struct pvrt_m *m = pvrt_rt.ms; m; m = m->next) {
		if (__atomic_load_n(&m->lost, __ATOMIC_ACQUIRE) != 2)
			continue;
		any = true;
		if (!blocked(m))
			pvrt_preempt_kick(NULL, m);
	}
	pvrt_lock_release(&pvrt_rt.mlock);
	return any;
}

static bool all_parked(void)
{
	for (unsigned i = 0; i < pvrt_rt.nw; i++)
		if (!__atomic_load_n(&pvrt_rt.w[i]->park_word, __ATOMIC_SEQ_CST))
			return false;
	return true;
}

static void *sysmon_main(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	uint64_t lo = pvrt_rt.slice, hi = 2000000;
	if (pvrt_rt.handoff && (!lo || pvrt_rt.handoff < lo))
		lo = pvrt_rt.handoff;
	uint64_t base = lo / 2 < 50000 ? 50000 : lo / 2 > 1000000 ? 1000000 : lo / 2;
	uint64_t tick = base;
	unsigned quiet = 0;
	while (!__atomic_load_n(&sm_stop, __ATOMIC_ACQUIRE)) {
		uint64_t now = os_now_ns();
		bool busy = false, acted = false, waiting = false;
		for (unsigned i = 0; i < pvrt_rt.nw; i++) {
			struct pvrt_worker *w = pvrt_rt.w[i];
			uint64_t sw = __atomic_load_n(&w->st_switches, __ATOMIC_RELAXED);
			struct pvrt_m *m = __atomic_load_n(&w->owner, __ATOMIC_ACQUIRE);
			if (__atomic_load_n(&w->park_word, __ATOMIC_RELAXED) || !m ||
			    !__atomic_load_n(&w->cur, __ATOMIC_RELAXED) || sw != w->sm_switches) {
				busy |= !__atomic_load_n(&w->park_word, __ATOMIC_RELAXED);
				w->sm_switches = sw;
				w->sm_since = now;
				continue;
			}
			busy = true;
			uint64_t stuck = now - w->sm_since;
			if (!has_work(w, now))
				continue;
			waiting = true;
			if (pvrt_rt.handoff && stuck >= pvrt_rt.handoff &&
			    !pvhint_vcpu_preempted(pvrt_rt.hint, w->vcpu) &&
			    try_handoff(w, m, sw)) {
				acted = true;
				continue;
			}
			/* Preempt after a slice; retry every quarter slice while it lasts. */
			if (pvrt_rt.slice && stuck >= pvrt_rt.slice) {
				__atomic_store_n(&w->preempt_seq, sw + 1, __ATOMIC_RELAXED);
				pvrt_preempt_kick(w, m);
				w->sm_since = now - pvrt_rt.slice + pvrt_rt.slice / 4;
				acted = true;
			}
		}
		busy |= kick_lost();
		if (!busy) {
			/* Every worker parked: sleep until one leaves its park
			 * (pvrt_sysmon_notify). Seq_cst store, then the park words: pairs with
			 * notify's seq_cst load. */
			__atomic_store_n(&pvrt_rt.sm_word, 1, __ATOMIC_SEQ_CST);
			if (all_parked() && !__atomic_load_n(&sm_stop, __ATOMIC_ACQUIRE))
				os_futex_wait(&pvrt_rt.sm_word, 1, NULL);
			__atomic_store_n(&pvrt_rt.sm_word, 0, __ATOMIC_RELAXED);
			tick = base;
			quiet = 0;
			continue;
		}
		if (acted || waiting) {
			tick = base;
			quiet = 0;
		} else if (++quiet >= 64 && tick < hi) {
			tick = tick * 2 > hi ? hi : tick * 2;
			quiet = 0;
		}
		struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)tick};
		os_futex_wait(&sm_stop, 0, &ts);
	}
	return NULL;
}

void pvrt_sysmon_notify(void)
{
	if (__atomic_load_n(&pvrt_rt.sm_word, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&pvrt_rt.sm_word, 0, __ATOMIC_RELAXED))
		os_futex_wake(&pvrt_rt.sm_word, 1);
}

/* Before any worker runs: the entries read entry_fence. */
void pvrt_sysmon_prepare(void)
{
	pvrt_rt.asym_fence = 0;
#if !defined(PVRT_TSAN)
	/* TSan does not know that membarrier orders the entries: they fence instead there. */
	if (pvrt_rt.handoff)
		pvrt_rt.asym_fence =
		    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
	pvrt_rt.entry_fence = pvrt_rt.handoff && !pvrt_rt.asym_fence;
}

int pvrt_sysmon_start(void)
{
	pvrt_rt.sysmon_on = 0;
	if (!pvrt_rt.slice && !pvrt_rt.handoff)
		return 0;
	__atomic_store_n(&sm_stop, 0, __ATOMIC_RELAXED);
	sigset_t all, old;
	sigfillset(&all);
	if (pvrt_rt.handoff) {
		/* The spawner and the first reserve, set up before any ULT can need a hand-off
		 * (see start_spare): pvrt_init waits for a thread start. */
		uint32_t in = __atomic_load_n(&pvrt_rt.spares_seq, __ATOMIC_ACQUIRE);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pvrt_rt.spawner_on = !pthread_create(&pvrt_rt.spawner, NULL, spawner_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (pvrt_rt.spawner_on) {
			pthread_setname_np(pvrt_rt.spawner, "pvrt-spawner");
			while (__atomic_load_n(&pvrt_rt.spares_seq, __ATOMIC_ACQUIRE) == in)
				os_futex_wait(&pvrt_rt.spares_seq, in, NULL);
		}
	}
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread starts with every signal blocked */
	int r = pthread_create(&pvrt_rt.sysmon, NULL, sysmon_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) /* the caller's stop_workers ends the spawner's and the reserve's threads */
		return pvrt_fail(-r, "pvrt_init: cannot start the sysmon thread");
	/* Named here, before it runs: top -H, gdb, and tests that count the threads that may run
	 * application code tell it from the workers. */
	pthread_setname_np(pvrt_rt.sysmon, "pvrt-sysmon");
	pvrt_rt.sysmon_on = 1;
	return 0;
}

void pvrt_sysmon_stop(void)
{
	if (pvrt_rt.sysmon_on) {
		__atomic_store_n(&sm_stop, 1, __ATOMIC_RELEASE);
		os_futex_wake(&sm_stop, 1);
		__atomic_store_n(&pvrt_rt.sm_word, 0, __ATOMIC_SEQ_CST);
		os_futex_wake(&pvrt_rt.sm_word, 1);
		pthread_join(pvrt_rt.sysmon, NULL);
		pvrt_rt.sysmon_on = 0;
	}
	/* The spawner first, so that no spare starts after the wake-up below. */
	if (pvrt_rt.spawner_on) {
		spawner_wake();
		__atomic_add_fetch(&pvrt_rt.spares_seq, 1, __ATOMIC_RELEASE);
		os_futex_wake(&pvrt_rt.spares_seq, INT32_MAX);
		pthread_join(pvrt_rt.spawner, NULL);
		pvrt_rt.spawner_on = 0;
	}
	/* Wake the spares: they see stop and leave. */
	pvrt_lock_acquire(&pvrt_rt.mlock);
	for (struct pvrt_m *m = pvrt_rt.ms; m; m = m->next)
		if (!m->main) {
			__atomic_store_n(&m->park, 1, __ATOMIC_RELEASE);
			os_futex_wake(&m->park, 1);
		}
	pvrt_lock_release(&pvrt_rt.mlock);
}

/* After stop: the spares' threads end (workers' own threads are joined by runtime.c). */
void pvrt_spares_join(void)
{
	for (struct pvrt_m *m = pvrt_rt.ms; m; m = m->next)
		if (m->spare)
			pthread_join(m->thread, NULL);
}
