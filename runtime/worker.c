/* SPDX-License-Identifier: MIT */
/*
 * Workers: idle (adaptive halt-polling, then futex park), the scheduler loop, worker 0's scheduler
 * context and the threads of the other workers.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdlib.h>

/* ---------------------------------------------------------------- idle */

static void kpark(uint32_t *word, uint64_t deadline)
{
	struct timespec ts, *tp = NULL;
	if (deadline != UINT64_MAX) {
		ts.tv_sec = (time_t)(deadline / 1000000000ull);
		ts.tv_nsec = (long)(deadline % 1000000000ull);
		tp = &ts;
	}
	os_futex_wait_abs(word, 1, CLOCK_MONOTONIC, tp);
}

/*
 * No work found: poll for a while, in the manner of KVM's halt-polling, then park on the
 * worker's futex word until woken or until its armed timer deadline.
 *
 * The poll window adapts per worker: an idle period that ended within poll_max grows it
 * (doubling from poll_min), a longer one halves it (below poll_min it drops to 0). A worker whose
 * vCPU is preempted now or lost time to the host since the last idle period does not poll at all:
 * its physical CPU is contended, and spinning would take time from whoever shares it.
 */
#define POLL_OTHERS_NS 2000

static void idle(struct rt_worker *w)
{
	/* Work stranded on a preempted vCPU (the ULT it runs, or a queue we just failed to steal
	 * from): ask the host to run that vCPU now, in our vCPU's place (directed yield), if the
	 * policy names one (sched/hints.c) and the source can ask. Not while this worker has work
	 * of its own coming (queued, or a timer armed: bound ULTs and timers are nobody else's).
	 * The yield returns when our vCPU runs again, and the usual idle path follows (it finds
	 * new work, or parks until woken). */
	if (rt_state.can_lend && __atomic_load_n(&w->armed, __ATOMIC_RELAXED) == UINT64_MAX &&
	    !rt_has_work(w)) {
		struct rt_sched_caller c = {.worker = (int)w->idx, .rng = w->rng};
		int t = rt_state.pol->lend(&rt_state.view, &c);
		if (t >= 0 && (unsigned)t < rt_state.nw && (unsigned)t != w->idx &&
		    pvhint_yield_to(rt_state.hint,
				    __atomic_load_n(&rt_state.w[t]->vcpu, __ATOMIC_RELAXED)) == 0) {
			PVRT_STAT_INC(w, st_lends);
			/* The turn we gave away is steal time of our own making: it says nothing
			 * of contention (as a wake-up's delay below), so it must not turn
			 * halt-polling off. */
			if (rt_state.hint->valid & PVHINT_VALID_STEAL)
				w->last_steal = pvhint_steal(rt_state.hint, w->vcpu);
		}
	}
	uint64_t t0 = os_now_ns();
	bool contended = pvhint_vcpu_preempted(rt_state.hint, w->vcpu);
	if (rt_state.hint->valid & PVHINT_VALID_STEAL) {
		uint64_t s = pvhint_steal(rt_state.hint, w->vcpu);
		contended |= s != w->last_steal;
		w->last_steal = s;
	}
	uint64_t poll = contended ? 0 : w->poll_ns;
	if (poll) {
		__atomic_fetch_add(&rt_state.nsearching, 1, __ATOMIC_RELAXED);
		bool found = false;
		uint64_t now = t0, others = t0;
		while (now - t0 < poll) {
			for (int i = 0; i < 32; i++)
				os_cpu_relax();
			now = os_now_ns();
			/* Other workers' rings only every POLL_OTHERS_NS (as Go's thieves leave a
			 * running P's next G alone for 3 us): a ULT queued by a running worker is
			 * nearly always run by it soon (a create then a join, a wake-up then a
			 * block), and reading its ring's lines at every turn makes each of its
			 * queue operations a cache miss and sends us to steal what it then takes.
			 */
			rt_sigmask_idle(w); /* a change of what all ULTs block (sigmask.c) */
			bool look = now - others >= POLL_OTHERS_NS;
			if (look)
				others = now;
			if (rt_has_work_others(w, look) || rt_timers_due(w, now) ||
			    __atomic_load_n(&rt_state.stop, __ATOMIC_RELAXED)) {
				found = true;
				break;
			}
		}
		__atomic_fetch_sub(&rt_state.nsearching, 1, __ATOMIC_RELAXED);
		if (found) {
			PVRT_STAT_INC(w, st_polls_found);
			return;
		}
	}

	/*
	 * Park. Announce it (park_word = 1, nparked + 1), then look for work once more. A thread
	 * that queues work for us raises our inj.n, then reads park_word (queue.c, inject_to); we
	 * set park_word, then read inj.n. All with seq_cst operations, so at least one of us sees
	 * the other: either we find the work here or it finds park_word == 1 and wakes us. stop is
	 * handled the same way by stop_workers. Work queued on other workers' rings only needs a
	 * best-effort wake-up (their owners run it anyway): nparked, read racily by
	 * rt_notify_idle.
	 */
	__atomic_exchange_n(&w->park_word, 1, __ATOMIC_SEQ_CST);
	bool last = __atomic_add_fetch(&rt_state.nparked, 1, __ATOMIC_RELAXED) == rt_state.nw;
	uint64_t dl = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (!rt_has_work(w) && !__atomic_load_n(&rt_state.stop, __ATOMIC_SEQ_CST) &&
	    dl > os_now_ns()) {
		PVRT_STAT_INC(w, st_parks);
		/* Idle costs no memory either: give back the stacks of a past burst. A wake-up
		 * meanwhile is not lost (park_word is re-read below), only later. */
		rt_stacks_trim(w, last);
		pvhint_thread_park(rt_state.hint);
		/* Acquire: a waker's queue writes are visible once we see its 1->0. */
		while (__atomic_load_n(&w->park_word, __ATOMIC_ACQUIRE) == 1) {
			/* Per-ULT masks: parked, take only the signals some ULT accepts
			 * (sigmask.c), again after a wake-up that a new intersection sent. */
			rt_sigmask_idle(w);
			kpark(&w->park_word, dl);
			if (dl != UINT64_MAX && os_now_ns() >= dl)
				break;
		}
		pvhint_thread_unpark(rt_state.hint);
		/* The wake-up's own delay counts as steal where the source measures time runnable
		 * but not running (bpf: the run queue's delay, a few us from an idle CPU): it says
		 * nothing of contention, and left in, every park would turn polling off at the next
		 * idle period, whose shorter polls park more (M:N fluidanimate: 20% slower). */
		if (rt_state.hint->valid & PVHINT_VALID_STEAL)
			w->last_steal = pvhint_steal(rt_state.hint, w->vcpu);
	}
	/* Whoever moves park_word 1->0 (we, or a waker) takes us out of nparked. */
	uint32_t one = 1;
	if (__atomic_compare_exchange_n(&w->park_word, &one, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED))
		__atomic_fetch_sub(&rt_state.nparked, 1, __ATOMIC_RELAXED);
	rt_sysmon_notify(); /* it sleeps while every worker is parked */

	if (contended)
		return;
	uint64_t idle_ns = os_now_ns() - t0;
	if (idle_ns > rt_state.poll_max) {
		w->poll_ns /= 2;
		if (w->poll_ns < rt_state.poll_min)
			w->poll_ns = 0;
	} else if (w->poll_ns < rt_state.poll_max) {
		w->poll_ns = w->poll_ns ? w->poll_ns * 2 : rt_state.poll_min;
		if (w->poll_ns > rt_state.poll_max)
			w->poll_ns = rt_state.poll_max;
	}
}

/* ---------------------------------------------------------------- scheduler loop */

void rt_sched_loop(struct rt_worker *w)
{
	if (rt_worker_cur() != w)
		return; /* a fresh scheduler context whose thread lost the worker (sysmon.c) */
	for (;;) {
		struct pvrt_ult *u = rt_local_next(w);
		if (!u && rt_timers_run(w, os_now_ns()))
			u = rt_local_next(w);
		if (!u)
			u = rt_steal(w);
		if (u) {
			rt_switch(w, &w->sched, u, NULL, NULL);
			w = rt_worker_cur();
			if (unlikely(!w))
				return; /* this thread lost the worker: it becomes a spare */
			continue;
		}
		/* Worker 0 never stops here: the primary is running whenever stop is set. */
		if (w->idx && __atomic_load_n(&rt_state.stop, __ATOMIC_ACQUIRE))
			return;
		idle(w);
	}
}

void rt_sched_entry(void *arg)
{
	rt_after_switch();
	rt_sched_loop(arg);
	/* The main thread lost worker 0 (sysmon.c): it waits to take it back at finalize. */
	rt_m_idle(rt_m_cur());
	abort(); /* unreachable: the main thread's rt_m_idle never returns */
}

void *rt_worker_main(void *arg)
{
	struct rt_worker *w = arg;
	struct rt_m *m = w->owner;
	rt_m_register(m, false);
	__atomic_store_n(&m->inrt, 1, __ATOMIC_RELAXED); /* a scheduler context is runtime */
	rt_tls_worker_start(w);
	rt_tls_worker = w;
	stack_t old;
	rt_altstack_on(w, &old);
	if (rt_state.emu) {
		m->emu = pvhint_emu_attach(rt_state.hint, w->vcpu) == 0; /* -ECHILD: inert */
	}
	if (rt_state.slots) /* its record is its own thread's slot (rt_m_register) */
		__atomic_store_n(&w->vcpu, (unsigned)m->slot, __ATOMIC_RELAXED);
	rt_san_thread_context(&w->sched.san);
	m->home.san = w->sched.san;
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED); /* sysmon samples it */
	rt_sched_loop(w);
	rt_m_idle(m); /* returns at once when stopping; else after losing the worker */
	if (m->emu)
		pvhint_emu_detach(rt_state.hint);
	rt_altstack_off(w, &old);
	rt_tls_worker = NULL;
	rt_tls_m = NULL;
	return NULL;
}
