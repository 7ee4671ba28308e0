/* SPDX-License-Identifier: MIT */
/*
 * sysmon, kernel threads (Ms) and the hand-off of a worker whose thread is stuck in the kernel.
 *
 * The model is Go's: a worker (P: run queues, timers, vCPU identity) is run by one kernel thread
 * (M) at a time, w->owner. A ULT that blocks in the kernel (a pipe read, waitpid, a library's
 * own futex: calls pvrt never sees) blocks its M; sysmon then gives the worker to a spare M,
 * which runs the worker's scheduler loop, so the worker's other ULTs keep running. When the call
 * returns, the old M notices at its next runtime entry (rt_enter), or when sysmon's
 * preemption signal kicks it, that it lost its worker: it queues its ULT as ready (any worker
 * runs it, as for a wake-up), goes back to its own scheduler context and waits as a spare.
 * (Uncontended lock calls do not enter the runtime under per-ULT TLS: with PVRT_SLICE_NS=off,
 * where there is no signal to kick it, such an M runs on until its ULT waits, yields or
 * contends, one kernel thread more than the workers meanwhile.)
 *
 * sysmon is one thread that samples every worker each tick: a worker that is not parked, runs a
 * ULT (cur != NULL) and whose switch count has not moved since an earlier sample is stuck on one
 * ULT. If other work waits for it (its queues, or a due timer):
 *   - stuck >= PVRT_HANDOFF_NS and its M is blocked in the kernel (it announced a system call
 *     with pvrt_syscall_enter, or /proc/thread-self/stat says S or D) and its vCPU is not
 *     preempted (then the emulator or the host holds it: not a system call): hand-off;
 *   - stuck >= PVRT_SLICE_NS and running: the preemption signal (preempt.c).
 * It sleeps on a futex when every worker is parked (and no M that lost its worker is still out):
 * an idle runtime costs nothing; a worker leaving its park wakes it (rt_sysmon_notify). While
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

__thread struct rt_m *rt_tls_m;

__attribute__((noinline)) struct rt_m *rt_m_cur(void)
{
	__asm__ volatile("" ::: "memory"); /* see rt_worker_cur */
	return rt_tls_m;
}

/* Not inlined: the context may have moved to another kernel thread since it entered, and a fresh
 * call reads this thread's pointer anew (as rt_m_cur). */
__attribute__((noinline)) void rt_leave_slow(uint32_t depth)
{
	__asm__ volatile("" ::: "memory");
	struct rt_m *m = rt_tls_m;
	/* Release: what the section did is visible to sysmon once it reads the depth (acquire) and
	 * takes the worker. m is NULL once pvrt_finalize has freed the Ms. */
	if (m)
		__atomic_store_n(&m->inrt, depth, __ATOMIC_RELEASE);
}

#define ALTSTACK (64u * 1024)
/* The slice of a ULT while woken work waits on its worker (ns): CFS's wake-up granularity. */
#define WAKE_SLICE 1000000u

static uint32_t sm_stop;

/* ---------------------------------------------------------------- kernel threads */

/* Before its thread starts: finalize joins every M on the list. */
void rt_m_add(struct rt_m *m, bool is_main)
{
	__atomic_store_n(&m->statfd, -1, __ATOMIC_RELAXED);
	m->main = is_main;
	m->sm_mask = ~(uint64_t)0; /* none loaded yet (sigmask.c) */
	rt_lock_acquire(&rt_state.mlock);
	m->next = rt_state.ms;
	/* Release: sigmask.c walks the list without the lock (Ms stay until finalize). */
	__atomic_store_n(&rt_state.ms, m, __ATOMIC_RELEASE);
	if (is_main)
		rt_state.main_m = m;
	rt_lock_release(&rt_state.mlock);
}

/* On its own thread. */
int rt_m_register(struct rt_m *m, bool is_main)
{
	(void)is_main;
	__atomic_store_n(&m->statfd, open("/proc/thread-self/stat", O_RDONLY | O_CLOEXEC),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&m->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	m->tp = rt_tp_get(); /* the thread's own (M:N mode switches ULTs' in and out) */
	/* Registered here, where the thread is set up, not when it takes a worker: a hand-off
	 * must not wait for a system call (nor for the claim's allocation). */
	m->slot = rt_state.slots ? pvhint_self_vcpu() : 0;
	rt_tls_m = m;
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
static void m_emu_setup(struct rt_m *m)
{
	if (!rt_state.emu || m->emu)
		return;
	if (pvhint_emu_attach_parked(rt_state.hint, 0))
		return; /* the thread then runs unseen by the emulator, as before attach */
	m->emu = 1;
	m->emu_parked = 1;
}

void rt_m_emu_idle(struct rt_m *m)
{
	if (m->emu && !m->emu_parked) {
		pvhint_thread_park(rt_state.hint);
		m->emu_parked = 1;
	}
}

static void m_emu_take(struct rt_m *m, unsigned v)
{
	if (!m->emu || !m->emu_parked)
		return;
	/* It fails only on a bug (this thread is attached and parked; v is a worker's vCPU): the
	 * thread then counts as its old vCPU's, a hint error, not a hang. */
	int r = pvhint_emu_move(rt_state.hint, v);
	(void)r;
	assert(r == 0);
	m->emu_parked = 0;
	pvhint_thread_unpark(rt_state.hint);
}

/* Run worker w's scheduler on this thread (given to it by sysmon or a hand-back). */
static void take(struct rt_m *m, struct rt_worker *w)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(w->cpu, &one);
	pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	m_emu_take(m, w->vcpu);
	/* With thread slots the worker's record is its thread's: hints about the worker (the
	 * policy's, its ULTs' lock owner records, sysmon's) are now about this thread. */
	if (rt_state.slots)
		__atomic_store_n(&w->vcpu, (unsigned)m->slot, __ATOMIC_RELAXED);
	w->sched.san = m->home.san;
	w->sched.san.asan_fake = NULL;
	/* The worker's thread pointer, tid and signal mask are now this thread's. */
	rt_tls_worker_start(w);
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED);
	rt_tls_worker = w;
	__atomic_store_n(&m->inrt, 1, __ATOMIC_RELAXED); /* a scheduler context is runtime */
	rt_sched_loop(w);
}

static void give(struct rt_m *s, struct rt_worker *w)
{
	__atomic_store_n(&s->give, w, __ATOMIC_RELAXED);
	/* Release: the taker sees the worker as we left it. */
	__atomic_store_n(&s->park, 1, __ATOMIC_RELEASE);
	os_futex_wake(&s->park, 1);
}

/* Wait to be given a worker; NULL when the runtime stops. */
static struct rt_worker *wait_given(struct rt_m *m)
{
	for (;;) {
		if (__atomic_load_n(&m->park, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&m->park, 0, __ATOMIC_RELAXED);
			struct rt_worker *w = __atomic_load_n(&m->give, __ATOMIC_RELAXED);
			m->give = NULL;
			if (w) {
				/* Its mask is the worker's now: take() records it there. */
				__atomic_store_n(&m->sm_idle, 0, __ATOMIC_SEQ_CST);
				__atomic_store_n(&m->sm_mask, ~(uint64_t)0, __ATOMIC_RELAXED);
				return w;
			}
		}
		if (!m->main && __atomic_load_n(&rt_state.stop, __ATOMIC_ACQUIRE))
			return NULL;
		/* Per-ULT masks: take the signals some ULT accepts, as a parked worker does
		 * (sigmask.c; it wakes us when that changes). */
		if (rt_state.ult_tls)
			rt_sigmask_m_idle(m);
		os_futex_wait(&m->park, 0, NULL);
	}
}

void rt_m_idle(struct rt_m *m)
{
	for (;;) {
		if (!m->main && __atomic_load_n(&rt_state.stop, __ATOMIC_ACQUIRE))
			return;
		rt_m_emu_idle(m);
		/* The thread that called pvrt_init only takes worker 0 back (rt_primary_home). */
		if (!m->main) {
			rt_lock_acquire(&rt_state.mlock);
			m->spare_next = rt_state.spares;
			rt_state.spares = m;
			__atomic_store_n(&rt_state.nspares, rt_state.nspares + 1, __ATOMIC_RELAXED);
			rt_lock_release(&rt_state.mlock);
			__atomic_add_fetch(&rt_state.spares_seq, 1, __ATOMIC_RELEASE);
			os_futex_wake(&rt_state.spares_seq, INT32_MAX);
		}
		struct rt_worker *w = wait_given(m);
		if (!w)
			return;
		take(m, w);
	}
}

static void *spare_main(void *arg)
{
	struct rt_m *m = arg;
	/* Named before it takes a worker (the creator names it too, for top -H at once). */
	prctl(PR_SET_NAME, "pvrt-spare");
	/* Per-ULT masks: wait_given loads what every ULT blocks (sigmask.c) */
	if (!rt_state.ult_tls)
		pthread_sigmask(SIG_SETMASK, rt_preempt_base_mask(), NULL);
	rt_m_register(m, false);
	if (rt_state.segv_installed) {
		m->altstack = mmap(NULL, ALTSTACK, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m->altstack == MAP_FAILED) {
			m->altstack = NULL;
		} else {
			stack_t ss = {.ss_sp = m->altstack, .ss_size = ALTSTACK};
			sigaltstack(&ss, NULL);
		}
	}
	rt_san_thread_context(&m->home.san);
	m_emu_setup(m);
	if (m->reserve) {
		rt_m_idle(m);
	} else {
		struct rt_worker *w = wait_given(m); /* created for a hand-off: given at once */
		if (w) {
			take(m, w);
			rt_m_idle(m);
		}
	}
	if (m->emu)
		pvhint_emu_detach(rt_state.hint);
	if (m->altstack) {
		stack_t dis = {.ss_flags = SS_DISABLE};
		sigaltstack(&dis, NULL);
	}
	rt_tls_m = NULL;
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
static struct rt_m *start_spare(bool reserve)
{
	struct rt_m *s = rt_alloc(sizeof(*s));
	if (!s)
		return NULL;
	/* In the runtime (a scheduler context) until it runs a ULT: never taken before that. */
	s->inrt = 1;
	s->reserve = reserve;
	rt_m_add(s, false); /* before the thread registers itself (statfd); freed at finalize */
	if (pthread_create(&s->thread, NULL, spare_main, s))
		return NULL;
	pthread_setname_np(s->thread, "pvrt-spare"); /* as sysmon's */
	s->spare = 1;				     /* joined at finalize */
	return s;
}

static void spawner_wake(void)
{
	__atomic_add_fetch(&rt_state.spawn_seq, 1, __ATOMIC_RELEASE);
	os_futex_wake(&rt_state.spawn_seq, 1);
}

/* A spare M from the list; NULL if there is none now (the spawner is making one). */
static struct rt_m *get_spare(void)
{
	rt_lock_acquire(&rt_state.mlock);
	struct rt_m *s = rt_state.spares;
	if (s) {
		rt_state.spares = s->spare_next;
		__atomic_store_n(&rt_state.nspares, rt_state.nspares - 1, __ATOMIC_RELAXED);
	}
	rt_lock_release(&rt_state.mlock);
	if (!rt_state.spawner_on)
		return s ? s : start_spare(false);
	if (!s || !__atomic_load_n(&rt_state.nspares, __ATOMIC_RELAXED))
		spawner_wake();
	return s;
}

/* The spawner: while the spares list is empty, start a reserve and wait until it is in. */
static void *spawner_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint32_t seq = __atomic_load_n(&rt_state.spawn_seq, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&rt_state.stop, __ATOMIC_ACQUIRE))
			break;
		if (__atomic_load_n(&rt_state.nspares, __ATOMIC_ACQUIRE)) {
			os_futex_wait(&rt_state.spawn_seq, seq, NULL);
			continue;
		}
		uint32_t in = __atomic_load_n(&rt_state.spares_seq, __ATOMIC_ACQUIRE);
		if (!start_spare(true)) {
			/* Out of threads or memory: pvrt_init waits no longer (it waits for a
			 * change of spares_seq); try again in a while, not in a loop. */
			__atomic_add_fetch(&rt_state.spares_seq, 1, __ATOMIC_RELEASE);
			os_futex_wake(&rt_state.spares_seq, INT32_MAX);
			struct timespec ts = {.tv_sec = 0, .tv_nsec = 10000000};
			os_futex_wait(&rt_state.spawn_seq, seq, &ts);
			continue;
		}
		while (__atomic_load_n(&rt_state.spares_seq, __ATOMIC_ACQUIRE) == in &&
		       !__atomic_load_n(&rt_state.stop, __ATOMIC_ACQUIRE)) {
			os_futex_wait(&rt_state.spares_seq, in, NULL);
		}
	}
	return NULL;
}

void rt_ms_fini(void)
{
	struct rt_m *m = rt_state.ms;
	while (m) {
		struct rt_m *n = m->next;
		if (m->statfd >= 0)
			close(m->statfd);
		if (m->altstack)
			munmap(m->altstack, ALTSTACK);
		rt_free(m, sizeof(*m));
		m = n;
	}
	rt_state.ms = rt_state.spares = rt_state.main_m = NULL;
	rt_state.nspares = 0;
	rt_tls_m = NULL;
}

/* ---------------------------------------------------------------- losing the worker */

void rt_m_lost(struct rt_m *m)
{
	uint32_t l;
	/* 1: sysmon is deciding (a few instructions and a membarrier). */
	while ((l = __atomic_load_n(&m->lost, __ATOMIC_ACQUIRE)) == 1)
		os_yield();
	if (l == 0)
		return;
	/* Acquire above: lost_ult and home are sysmon's writes. Never nested, so nothing runs
	 * this again between the load above and the store below: a kick's handler does not enter
	 * the runtime from the runtime's own code (preempt.c), and one that lands in os_yield
	 * enters at depth > 0, where rt_depth_up leaves the loss to us. */
	struct pvrt_ult *self = m->lost_ult;
	__atomic_store_n(&m->lost, 0, __ATOMIC_RELAXED);
	rt_tls_worker = NULL;
	rt_m_emu_idle(m);
	m->post_ult = self;
	/* Our home context readies us once we are off this stack; we resume on some worker. */
	rt_switch_home(self, m);
}

/* First thing in the home context after rt_switch_home (rt_after_switch, no worker). */
void rt_m_home_resumed(void)
{
	struct rt_m *m = rt_m_cur();
	rt_san_resumed(&m->home.san);
	struct pvrt_ult *u = m->post_ult;
	if (u) {
		m->post_ult = NULL;
		/* The thread still has the ULT's mask: the intersection before the ULT runs on
		 * (and may block more) elsewhere (sigmask.c). */
		if (rt_state.ult_tls)
			rt_sigmask_m_idle(m);
		rt_ult_ready(u);
	}
}

/* ---------------------------------------------------------------- finalize: home again */

static void post_give_main(struct rt_worker *w, void *arg)
{
	struct rt_m *m = rt_m_cur(), *mm = rt_state.main_m;
	rt_ult_ready(arg); /* onto w (worker 0, where it is bound): the main thread runs it */
	rt_tls_worker = NULL;
	__atomic_store_n(&w->owner, mm, __ATOMIC_RELEASE);
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED);
	(void)m;
	give(mm, w);
}

void rt_primary_home(void)
{
	struct rt_m *m = rt_tls_m;
	if (!m || m->main)
		return;
	struct rt_worker *w = rt_tls_worker;
	struct pvrt_ult *self = w->cur;
	/* To this thread's scheduler context, which hands worker 0 (and us) to the main thread. */
	rt_switch(w, &self->ctx, NULL, post_give_main, self);
}

/* ---------------------------------------------------------------- system call announcements */

void pvrt_syscall_enter(void)
{
	struct rt_m *m = rt_tls_m;
	if (m)
		__atomic_store_n(&m->insys, 1, __ATOMIC_RELAXED);
}

void pvrt_syscall_exit(void)
{
	struct rt_m *m = rt_tls_m;
	if (!m)
		return;
	__atomic_store_n(&m->insys, 0, __ATOMIC_RELAXED);
	/* Lost the worker during the call? Entering finds out (and moves us to a worker). */
	rt_leave(rt_enter());
}

/* ---------------------------------------------------------------- sysmon */

/* The heavy side of an asymmetric Dekker handshake (here, and the wait for every ULT to exit in
 * ult.c): a full barrier on every running thread of the process, whose light side is then a
 * compiler barrier. False if the barrier failed: the light side then had none. */
bool rt_asym_fence(void)
{
	if (rt_state.asym_fence)
		return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return true;
}

/* Is m's thread blocked in the kernel (state S or D)? */
static bool blocked(struct rt_m *m)
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

static bool has_work(struct rt_worker *w, uint64_t now)
{
	return __atomic_load_n(&w->ring.tail, __ATOMIC_RELAXED) !=
		   __atomic_load_n(&w->ring.head, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&w->inj.n, __ATOMIC_RELAXED) || rt_timers_due(w, now);
}

static bool try_handoff(struct rt_worker *w, struct rt_m *m, uint64_t sw)
{
	__atomic_store_n(&m->lost, 1, __ATOMIC_SEQ_CST);
	/* Acquire: pairs with the release of the M's last leave (its writes to the worker). */
	if (!rt_asym_fence() || __atomic_load_n(&m->inrt, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&w->st_switches, __ATOMIC_RELAXED) != sw || !blocked(m))
		goto undo;
	struct rt_m *s = get_spare();
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
	rt_lock_acquire(&rt_state.mlock);
	for (struct rt_m *m = rt_state.ms; m; m = m->next) {
		if (__atomic_load_n(&m->lost, __ATOMIC_ACQUIRE) != 2)
			continue;
		any = true;
		if (!blocked(m))
			rt_preempt_kick(NULL, m);
	}
	rt_lock_release(&rt_state.mlock);
	return any;
}

static bool all_parked(void)
{
	for (unsigned i = 0; i < rt_state.nw; i++)
		if (!__atomic_load_n(&rt_state.w[i]->park_word, __ATOMIC_SEQ_CST))
			return false;
	return true;
}

static void *sysmon_main(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	uint64_t lo = rt_state.slice, hi = 2000000;
	if (rt_state.handoff && (!lo || rt_state.handoff < lo))
		lo = rt_state.handoff;
	uint64_t base = lo / 2 < 50000 ? 50000 : lo / 2 > 1000000 ? 1000000 : lo / 2;
	uint64_t tick = base;
	unsigned quiet = 0;
	while (!__atomic_load_n(&sm_stop, __ATOMIC_ACQUIRE)) {
		uint64_t now = os_now_ns();
		bool busy = false, acted = false, waiting = false;
		/* Work queued on a running worker while none is parked: a worker blocked in the
		 * kernel is then handed off even with an empty queue of its own, so that its spare
		 * steals that work (as Go's sysmon retakes a P in a system call when no P is idle):
		 * else a ULT that blocks for good (a sigwait thread) halves a 2-worker runtime. */
		bool backlog = false;
		if (rt_state.handoff && !__atomic_load_n(&rt_state.nparked, __ATOMIC_RELAXED))
			for (unsigned i = 0; i < rt_state.nw && !backlog; i++)
				backlog = has_work(rt_state.w[i], now);
		for (unsigned i = 0; i < rt_state.nw; i++) {
			struct rt_worker *w = rt_state.w[i];
			uint64_t sw = __atomic_load_n(&w->st_switches, __ATOMIC_RELAXED);
			struct rt_m *m = __atomic_load_n(&w->owner, __ATOMIC_ACQUIRE);
			if (__atomic_load_n(&w->park_word, __ATOMIC_RELAXED) || !m ||
			    !__atomic_load_n(&w->cur, __ATOMIC_RELAXED) || sw != w->sm_switches ||
			    !w->sm_since) { /* 0: never sampled (the primary runs from the start) */
				busy |= !__atomic_load_n(&w->park_word, __ATOMIC_RELAXED);
				w->sm_switches = sw;
				w->sm_since = now;
				w->sm_kick = 0;
				continue;
			}
			busy = true;
			uint64_t stuck = now - w->sm_since;
			/* Woken work waits here: a sleeper whose timer is due (the worker's next
			 * pick must run its timers: poked) or a ULT in the injection queue (woken
			 * from another worker). Those run first at the next pick (queue.c), and
			 * the ULT running now is preempted after WAKE_SLICE instead of a slice,
			 * as CFS lets a wakee preempt after its wake-up granularity (1 ms). */
			bool due = rt_timers_due(w, now);
			if (due)
				__atomic_store_n(&w->timer_poke, 1, __ATOMIC_RELAXED);
			bool woken = due || __atomic_load_n(&w->inj.n, __ATOMIC_RELAXED);
			bool work = has_work(w, now);
			if (!work && !backlog)
				continue;
			waiting = true;
			if (rt_state.handoff && stuck >= rt_state.handoff &&
			    /* Relaxed: take() moves it (thread slots); a stale one costs a tick. */
			    !pvhint_vcpu_preempted(rt_state.hint,
						   __atomic_load_n(&w->vcpu, __ATOMIC_RELAXED)) &&
			    /* Cheap first (a read of its stat line): a ULT that runs long in
			     * code that cannot be preempted would cost a membarrier a tick. */
			    blocked(m) && try_handoff(w, m, sw)) {
				acted = true;
				continue;
			}
			if (!work) /* backlog elsewhere: a preemption here would find nothing */
				continue;
			/* Preempt after a slice; retry every quarter slice while it lasts. The
			 * retries leave 'stuck' growing: a ULT blocked in a system call is
			 * preempted only if a kick lands while it runs code that may be interrupted
			 * (its own executable's, outside M:N mode), so a worker stuck in the kernel
			 * must still reach the hand-off above (the retries used to restart the
			 * count: test_rt_preempt's futexlock waited seconds for a kick to land
			 * between two futex calls). */
			uint64_t slice = rt_state.slice;
			if (woken && slice > WAKE_SLICE)
				slice = WAKE_SLICE;
			if (slice && stuck >= slice && now >= w->sm_kick) {
				__atomic_store_n(&w->preempt_seq, sw + 1, __ATOMIC_RELAXED);
				rt_preempt_kick(w, m);
				w->sm_kick = now + slice / 4;
				acted = true;
			}
		}
		busy |= kick_lost();
		/* Workers run: their placement, steals and hand-offs read the hints, so a served
		 * bpf source keeps following threads (pvhint_want; no-op for other sources). */
		if (busy)
			pvhint_want_sustained();
		if (!busy) {
			/* Every worker parked: sleep until one leaves its park
			 * (rt_sysmon_notify). Seq_cst store, then the park words: pairs with
			 * notify's seq_cst load. */
			__atomic_store_n(&rt_state.sm_word, 1, __ATOMIC_SEQ_CST);
			if (all_parked() && !__atomic_load_n(&sm_stop, __ATOMIC_ACQUIRE))
				os_futex_wait(&rt_state.sm_word, 1, NULL);
			__atomic_store_n(&rt_state.sm_word, 0, __ATOMIC_RELAXED);
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

void rt_sysmon_notify(void)
{
	if (__atomic_load_n(&rt_state.sm_word, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&rt_state.sm_word, 0, __ATOMIC_RELAXED))
		os_futex_wake(&rt_state.sm_word, 1);
}

/* Before any worker runs: the entries read entry_fence. */
void rt_sysmon_prepare(void)
{
	rt_state.asym_fence = 0;
#if !defined(PVRT_TSAN)
	/* TSan does not know that membarrier orders the light sides: they fence instead there. */
	rt_state.asym_fence =
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
	rt_state.entry_fence = rt_state.handoff && !rt_state.asym_fence;
}

int rt_sysmon_start(void)
{
	rt_state.sysmon_on = 0;
	if (!rt_state.slice && !rt_state.handoff)
		return 0;
	__atomic_store_n(&sm_stop, 0, __ATOMIC_RELAXED);
	sigset_t all, old;
	sigfillset(&all);
	if (rt_state.handoff) {
		/* The spawner and the first reserve, set up before any ULT can need a hand-off
		 * (see start_spare): pvrt_init waits for a thread start. */
		uint32_t in = __atomic_load_n(&rt_state.spares_seq, __ATOMIC_ACQUIRE);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rt_state.spawner_on = !pthread_create(&rt_state.spawner, NULL, spawner_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rt_state.spawner_on) {
			pthread_setname_np(rt_state.spawner, "pvrt-spawner");
			while (__atomic_load_n(&rt_state.spares_seq, __ATOMIC_ACQUIRE) == in)
				os_futex_wait(&rt_state.spares_seq, in, NULL);
		}
	}
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread starts with every signal blocked */
	int r = pthread_create(&rt_state.sysmon, NULL, sysmon_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) /* the caller's stop_workers ends the spawner's and the reserve's threads */
		return rt_fail(-r, "pvrt_init: cannot start the sysmon thread");
	/* Named here, before it runs: top -H, gdb, and tests that count the threads that may run
	 * application code tell it from the workers. */
	pthread_setname_np(rt_state.sysmon, "pvrt-sysmon");
	rt_state.sysmon_on = 1;
	return 0;
}

void rt_sysmon_stop(void)
{
	if (rt_state.sysmon_on) {
		__atomic_store_n(&sm_stop, 1, __ATOMIC_RELEASE);
		os_futex_wake(&sm_stop, 1);
		__atomic_store_n(&rt_state.sm_word, 0, __ATOMIC_SEQ_CST);
		os_futex_wake(&rt_state.sm_word, 1);
		pthread_join(rt_state.sysmon, NULL);
		rt_state.sysmon_on = 0;
	}
	/* The spawner first, so that no spare starts after the wake-up below. */
	if (rt_state.spawner_on) {
		spawner_wake();
		__atomic_add_fetch(&rt_state.spares_seq, 1, __ATOMIC_RELEASE);
		os_futex_wake(&rt_state.spares_seq, INT32_MAX);
		pthread_join(rt_state.spawner, NULL);
		rt_state.spawner_on = 0;
	}
	/* Wake the spares: they see stop and leave. */
	rt_lock_acquire(&rt_state.mlock);
	for (struct rt_m *m = rt_state.ms; m; m = m->next)
		if (!m->main) {
			__atomic_store_n(&m->park, 1, __ATOMIC_RELEASE);
			os_futex_wake(&m->park, 1);
		}
	rt_lock_release(&rt_state.mlock);
}

/* After stop: the spares' threads end (workers' own threads are joined by runtime.c). */
void rt_spares_join(void)
{
	for (struct rt_m *m = rt_state.ms; m; m = m->next)
		if (m->spare)
			pthread_join(m->thread, NULL);
}
