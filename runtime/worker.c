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
static void idle(struct pvrt_worker *w)
{
	uint64_t t0 = os_now_ns();
	bool contended = pvhint_vcpu_preempted(pvrt_rt.hint, w->vcpu);
	if (pvrt_rt.hint->valid & PVHINT_VALID_STEAL) {
		uint64_t s = pvhint_steal(pvrt_rt.hint, w->vcpu);
		contended |= s != w->last_steal;
		w->last_steal = s;
	}
	uint64_t poll = contended ? 0 : w->poll_ns;
	if (poll) {
		__atomic_fetch_add(&pvrt_rt.nsearching, 1, __ATOMIC_RELAXED);
		bool found = false;
		uint64_t now = t0;
		while (now - t0 < poll) {
			for (int i = 0; i < 32; i++)
				os_cpu_relax();
			now = os_now_ns();
			if (pvrt_has_work(w) || pvrt_timers_due(w, now) ||
			    __atomic_load_n(&pvrt_rt.stop, __ATOMIC_RELAXED)) {
				found = true;
				break;
			}
		}
		__atomic_fetch_sub(&pvrt_rt.nsearching, 1, __ATOMIC_RELAXED);
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
	 * pvrt_notify_idle.
	 */
	__atomic_exchange_n(&w->park_word, 1, __ATOMIC_SEQ_CST);
	bool last = __atomic_add_fetch(&pvrt_rt.nparked, 1, __ATOMIC_RELAXED) == pvrt_rt.nw;
	uint64_t dl = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (!pvrt_has_work(w) && !__atomic_load_n(&pvrt_rt.stop, __ATOMIC_SEQ_CST) &&
	    dl > os_now_ns()) {
		PVRT_STAT_INC(w, st_parks);
		/* Idle costs no memory either: give back the stacks of a past burst. A wake-up
		 * meanwhile is not lost (park_word is re-read below), only later. */
		pvrt_stacks_trim(w, last);
		pvhint_thread_park(pvrt_rt.hint);
		/* Acquire: a waker's queue writes are visible once we see its 1->0. */
		while (__atomic_load_n(&w->park_word, __ATOMIC_ACQUIRE) == 1) {
			kpark(&w->park_word, dl);
			if (dl != UINT64_MAX && os_now_ns() >= dl)
				break;
		}
		pvhint_thread_unpark(pvrt_rt.hint);
	}
	/* Whoever moves park_word 1->0 (we, or a waker) takes us out of nparked. */
	uint32_t one = 1;
	if (__atomic_compare_exchange_n(&w->park_word, &one, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED))
		__atomic_fetch_sub(&pvrt_rt.nparked, 1, __ATOMIC_RELAXED);
	pvrt_sysmon_notify(); /* it sleeps while every worker is parked */

	if (contended)
		return;
	uint64_t idle_ns = os_now_ns() - t0;
	if (idle_ns > pvrt_rt.poll_max) {
		w->poll_ns /= 2;
		if (w->poll_ns < pvrt_rt.poll_min)
			w->poll_ns = 0;
	} else if (w->poll_ns < pvrt_rt.poll_max) {
		w->poll_ns = w->poll_ns ? w->poll_ns * 2 : pvrt_rt.poll_min;
		if (w->poll_ns > pvrt_rt.poll_max)
			w->poll_ns = pvrt_rt.poll_max;
	}
}

/* ---------------------------------------------------------------- scheduler loop */

void pvrt_sched_loop(struct pvrt_worker *w)
{
	if (pvrt_worker_cur() != w)
		return; /* a fresh scheduler context whose thread lost the worker (sysmon.c) */
	for (;;) {
		struct pvrt_ult *u = pvrt_local_next(w);
		if (!u && pvrt_timers_run(w, os_now_ns()))
			u = pvrt_local_next(w);
		if (!u)
			u = pvrt_steal(w);
		if (u) {
			pvrt_switch(w, &w->sched, u, NULL, NULL);
			w = pvrt_worker_cur();
			if (unlikely(!w))
				return; /* this thread lost the worker: it becomes a spare */
			continue;
		}
		/* Worker 0 never stops here: the primary is running whenever stop is set. */
		if (w->idx && __atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE))
			return;
		idle(w);
	}
}

void pvrt_sched_entry(void *arg)
{
	pvrt_after_switch();
	pvrt_sched_loop(arg);
	/* The main thread lost worker 0 (sysmon.c): it waits to take it back at finalize. */
	pvrt_m_idle(pvrt_m_cur());
	abort(); /* unreachable: the main thread's pvrt_m_idle never returns */
}

void *pvrt_worker_main(void *arg)
{
	struct pvrt_worker *w = arg;
	struct pvrt_m *m = w->owner;
	pvrt_m_register(m, false);
	__atomic_store_n(&m->inrt, 1, __ATOMIC_RELAXED); /* a scheduler context is runtime */
	pvrt_tls_worker_start(w);
	rt_tls_worker = w;
	stack_t old;
	pvrt_altstack_on(w, &old);
	if (pvrt_rt.emu) {
		m->emu = pvhint_emu_attach(pvrt_rt.hint, w->vcpu) == 0; /* -ECHILD: inert */
	}
	if (pvrt_rt.slots) /* its record is its own thread's slot (pvrt_m_register) */
		__atomic_store_n(&w->vcpu, (unsigned)m->slot, __ATOMIC_RELAXED);
	pvrt_san_thread_context(&w->sched.san);
	m->home.san = w->sched.san;
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED); /* sysmon samples it */
	pvrt_sched_loop(w);
	pvrt_m_idle(m); /* returns at once when stopping; else after losing the worker */
	if (m->emu)
		pvhint_emu_detach(pvrt_rt.hint);
	pvrt_altstack_off(w, &old);
	rt_tls_worker = NULL;
	pvrt_tls_m = NULL;
	return NULL;
}
