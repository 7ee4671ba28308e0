/* SPDX-License-Identifier: MIT */
/*
 * Where process-directed signals land in M:N mode (per-ULT signal masks, ult.c).
 *
 * The kernel delivers a process-directed signal to any of the process's kernel threads that does
 * not block it. With pthreads those are the program's threads; here they are also the threads
 * that run no ULT at the moment: parked workers, spares and Ms waiting for a worker. Left with
 * the mask the process started with, such a thread took the signals that every one of the
 * program's threads blocks: a program that blocks SIGTERM and SIGUSR1 in all its threads and
 * waits for them in a sigwait thread (the usual shape of a daemon) was killed by the first
 * `kill -USR1` whenever a spare was waiting.
 *
 * So a thread without a ULT blocks what every live ULT blocks, and only that: the intersection
 * of the live ULTs' masks. A signal some ULT accepts still reaches a parked worker at once (a
 * Ctrl-C with the default action ends an idle program as it would with pthreads); a signal
 * every ULT blocks stays pending for the ULT that waits for it (sigwait) or unblocks it. An M
 * waiting for a worker loads the intersection too (with every worker's thread blocked in a
 * system call, it is the only taker).
 *
 * The intersection comes from a small table of the distinct masks live ULTs have, each with a
 * count of the ULTs that have it (programs use one or two masks). Counting is lock-free (a
 * signal handler may change the mask of the ULT it interrupted, inside a create or an exit): a
 * slot's count and a version share one word, so that a slot nobody counts in can take another
 * mask (rt_sigmask_ref) without a racer counting into it by its old one. A count that moves
 * between 0 and 1 recomputes the intersection, and a new value wakes the threads without a ULT
 * to load it and waits for them (settle). More than SLOTS distinct masks alive at once count
 * in 'other', which stands for a mask that blocks nothing (the fallback: every thread without
 * a ULT accepts every signal, as before this table).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS 8
#define EMPTY (~(uint64_t)0) /* no record holds it: SIGKILL and SIGSTOP are never recorded */

/* A slot: its mask, and one word with the number of ULTs that have it (low half; BUSY while
 * the slot is being given a new mask) and a version (high half) that each new mask bumps. */
/* Each on a line of its own, apart from rt_sigmask_common: creates and exits write a slot's word,
 * and the switch to a scheduler context and every idle poll turn read the intersection (shared
 * with them, M:N create+join on 2 workers took 20 % longer). */
static struct {
	uint64_t mask;
	uint64_t word;
} PVRT_ALIGNED tab[SLOTS];
static uint32_t other PVRT_ALIGNED;

#define BUSY UINT32_MAX
static inline uint32_t cnt(uint64_t w)
{
	return (uint32_t)w;
}
uint64_t rt_sigmask_common PVRT_ALIGNED; /* the intersection; 0 until a ULT is counted */

/* pvrt_init, before the primary counts itself: no ULT lives (a fork child forgets the parent's). */
void rt_sigmask_reset(void)
{
	for (int i = 0; i < SLOTS; i++) {
		tab[i].mask = EMPTY;
		tab[i].word = 0;
	}
	other = 0;
	rt_sigmask_common = 0;
}

static uint64_t intersect(void)
{
	/* Seq_cst: after our own count change and intersection store (see settle). */
	if (__atomic_load_n(&other, __ATOMIC_SEQ_CST))
		return 0;
	uint64_t m = EMPTY;
	for (int i = 0; i < SLOTS; i++) {
		uint32_t c = cnt(__atomic_load_n(&tab[i].word, __ATOMIC_SEQ_CST));
		if (c && c != BUSY) /* a slot being given a mask counts once it has it */
			m &= __atomic_load_n(&tab[i].mask, __ATOMIC_SEQ_CST);
	}
	return m == EMPTY ? 0 : m;
}

/* A count crossed 0: store the intersection until it stays what we computed (two racing
 * crossings: the one that stores last has checked after its store), then wake the parked workers
 * to load it. Lock-free and async-signal-safe. */
static void settle(void)
{
	uint64_t m, old = __atomic_load_n(&rt_sigmask_common, __ATOMIC_RELAXED);
	do {
		m = intersect();
		__atomic_store_n(&rt_sigmask_common, m, __ATOMIC_SEQ_CST);
	} while (intersect() != m);
	if (!rt_state.w)
		return;
	/* A parked worker wakes (a futex wake alone would be lost on a worker between its look
	 * at the mask and its wait), finds no work and parks again with the new mask loaded; a
	 * polling one looks at every turn; an M waiting for a worker looks at each wake-up. The
	 * seq_cst store above and the park word's seq_cst load in rt_wake_worker pair with the
	 * worker's park_word store and its load of the mask: one of the two sees the other. */
	if (m != old)
		for (unsigned i = 0; i < rt_state.nw; i++)
			if (rt_state.w[i])
				rt_wake_worker(i);
	/* Wait until every thread without a ULT blocks what every ULT blocks, so that the change
	 * that blocked more is whole when it returns, as with pthreads (a program that blocks
	 * SIGUSR1, starts a sigwait thread and at once sends itself SIGUSR1 must not die by it;
	 * a woken worker takes tens of microseconds to reload). Against the intersection now,
	 * not ours: a racing settle may have stored ours already. A worker's word is its
	 * thread's mask, or the one it is about to load (sm_loading: wait); a worker running a
	 * ULT has that ULT's, which blocks at least the intersection. A waiting M is woken each
	 * turn (its wait is on its own park word, whose wake-up may come before its wait).
	 * Bounded: a worker that stays stopped (the emulator holds it) is not waited for beyond
	 * 20 ms; nor are workers during pvrt_init (not all started yet: each loads what it
	 * needs). */
	if (!__atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE))
		return;
	/* Not a worker this thread lost while its ULT was in a system call: a spare runs it. */
	struct rt_worker *self = rt_tls_worker;
	if (self && rt_tls_cur_tid() != __atomic_load_n(&self->tid, __ATOMIC_RELAXED))
		self = NULL;
	uint64_t t0 = os_now_ns();
	for (;;) {
		uint64_t c = __atomic_load_n(&rt_sigmask_common, __ATOMIC_SEQ_CST);
		bool lag = false;
		for (unsigned i = 0; i < rt_state.nw; i++) {
			struct rt_worker *w = rt_state.w[i];
			/* Not the caller's own: it runs the ULT whose change this is (holding every
			 * signal in a mask change; an exiting ULT may take one as it exits). */
			if (w && w != self &&
			    (__atomic_load_n(&w->sm_loading, __ATOMIC_SEQ_CST) ||
			     (__atomic_load_n(&w->sigmask, __ATOMIC_SEQ_CST) & c) != c)) {
				rt_wake_worker(i); /* parked on a value a racing settle stored */
				lag = true;
			}
		}
		for (struct rt_m *x = __atomic_load_n(&rt_state.ms, __ATOMIC_ACQUIRE); x;
		     x = x->next) {
			if (__atomic_load_n(&x->sm_idle, __ATOMIC_SEQ_CST) &&
			    (__atomic_load_n(&x->sm_mask, __ATOMIC_SEQ_CST) & c) != c) {
				os_futex_wake(&x->park, 1);
				lag = true;
			}
		}
		if (!lag || os_now_ns() - t0 > 20000000 ||
		    __atomic_load_n(&rt_state.stop, __ATOMIC_RELAXED))
			return;
		os_yield();
	}
}

/*
 * Count one more ULT with mask m: in a slot that has m (its word read before its mask, so that a
 * slot given another mask in between fails the compare-and-swap on the version), else in a slot
 * nobody counts in (its version bumped and BUSY while the mask is stored: a racer reading the
 * old mask then fails its swap), else in 'other'. Two racers with a new mask may take two
 * slots: a mask's count is then split, which the intersection and unref do not mind.
 */
void rt_sigmask_ref(uint64_t m)
{
	for (int i = 0; i < SLOTS; i++) {
		uint64_t w = __atomic_load_n(&tab[i].word, __ATOMIC_SEQ_CST);
		while (cnt(w) != BUSY && __atomic_load_n(&tab[i].mask, __ATOMIC_SEQ_CST) == m) {
			if (__atomic_compare_exchange_n(&tab[i].word, &w, w + 1, false,
							__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
				if (cnt(w) == 0)
					settle();
				return;
			}
		}
	}
	for (int i = 0; i < SLOTS; i++) {
		uint64_t w = __atomic_load_n(&tab[i].word, __ATOMIC_SEQ_CST);
		uint64_t v = (w >> 32) + 1;
		if (cnt(w) != 0 ||
		    !__atomic_compare_exchange_n(&tab[i].word, &w, v << 32 | BUSY, false,
						 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			continue;
		__atomic_store_n(&tab[i].mask, m, __ATOMIC_SEQ_CST);
		__atomic_store_n(&tab[i].word, v << 32 | 1, __ATOMIC_SEQ_CST);
		settle();
		return;
	}
	if (__atomic_fetch_add(&other, 1, __ATOMIC_SEQ_CST) == 0)
		settle();
}

/* Count one ULT with mask m fewer: from a slot with m that counts some (ours, or a racer's of
 * the same mask: the total stays right), else from 'other', which then holds ours. */
void rt_sigmask_unref(uint64_t m)
{
	for (int i = 0; i < SLOTS; i++) {
		uint64_t w = __atomic_load_n(&tab[i].word, __ATOMIC_SEQ_CST);
		while (cnt(w) != 0 && cnt(w) != BUSY &&
		       __atomic_load_n(&tab[i].mask, __ATOMIC_SEQ_CST) == m) {
			if (__atomic_compare_exchange_n(&tab[i].word, &w, w - 1, false,
							__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
				if (cnt(w) == 1)
					settle();
				return;
			}
		}
	}
	if (__atomic_sub_fetch(&other, 1, __ATOMIC_SEQ_CST) == 0)
		settle();
}

void rt_sigmask_move(uint64_t from, uint64_t to)
{
	if (from == to)
		return;
	rt_sigmask_ref(to); /* first: the intersection never drops both for a moment */
	rt_sigmask_unref(from);
}

/*
 * A worker without a ULT (its scheduler context: ult.c's switch loads it, the idle poll and the
 * park loop look again) has the intersection loaded, so that it takes only the signals some ULT
 * accepts. The preemption signal stays as it was (never
 * in a record). A system call only when the loaded mask differs; the loaded-mask word then says
 * what is loaded, and the next switch to a ULT loads that ULT's.
 */
void rt_sigmask_load(struct rt_worker *w, uint64_t m)
{
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &m, NULL, 8);
	__atomic_store_n(&w->sigmask, m, __ATOMIC_SEQ_CST); /* settle() may wait for it */
}

/* An M waiting for a worker, at each turn of its wait: the intersection, as a parked worker has
 * it (it stands for the program's threads as much as they do: with no worker parked, a
 * process-directed signal that some ULT accepts would otherwise wait for a worker's next idle
 * moment). sm_idle goes up after the load, and the intersection is read again after it: a
 * settle() either sees the M idle with its mask, or the M sees the new intersection. */
void rt_sigmask_m_idle(struct rt_m *m)
{
	for (;;) {
		uint64_t c = __atomic_load_n(&rt_sigmask_common, __ATOMIC_SEQ_CST);
		if (c != __atomic_load_n(&m->sm_mask, __ATOMIC_RELAXED)) {
			syscall(SYS_rt_sigprocmask, SIG_SETMASK, &c, NULL, 8);
			__atomic_store_n(&m->sm_mask, c, __ATOMIC_SEQ_CST);
		}
		__atomic_store_n(&m->sm_idle, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&rt_sigmask_common, __ATOMIC_SEQ_CST) == c)
			return;
	}
}
