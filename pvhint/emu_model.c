/* SPDX-License-Identifier: MIT */
/*
 * The overcommit emulator, part 3: the model. Publishing the page, the modes (slice, noisy,
 * script, random) and the control thread that runs them (the design is in emu.c's header
 * comment; the shared state in emu.h).
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

/* ---- publishing the page (emu->lock held; the only writer) ---- */

static void emu_account_steal(struct pvhint_emu *e, unsigned v, uint64_t now)
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

void emu_set_pre(struct pvhint_emu *e, unsigned v, bool pre, uint64_t now)
{
	struct emu_vcpu *vc = &e->vc[v];

	if (pre == vc->pre)
		return;
	if (vc->pre)
		emu_account_steal(e, v, now);
	else
		vc->pre_since = now;
	vc->pre = pre;
	/* release: a reader that sees the flag with acquire also sees the steal written above */
	__atomic_store_n(&e->rec[v].preempted, pre ? PVHINT_PREEMPTED : 0, __ATOMIC_RELEASE);
}

void emu_publish(struct pvhint_emu *e, uint64_t now)
{
	unsigned V = e->c.vcpus, P = e->c.pcpus;

	if (e->c.mode == EMU_RANDOM)
		return; /* the random step writes the flags itself */
	for (unsigned p = 0; p < P; p++)
		e->busy[p] = false;
	for (unsigned v = 0; v < V; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		emu_set_pre(e, v, vc->desched && emu_runnable(e, vc), now);
		if (emu_runnable(e, vc) && !vc->desched)
			e->busy[v % P] = true;
	}
	for (unsigned v = 0; v < V; v++) {
		bool idle = !e->busy[v % P] && !e->vc[v].neighbour;
		/* relaxed: an independent hint byte */
		__atomic_store_n(&e->rec[v].is_idle, idle, __ATOMIC_RELAXED);
	}
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
			nrun += emu_runnable(e, &e->vc[p + i * P]);
		bool cur_ok = cur >= 0 && emu_runnable(e, &e->vc[cur]);
		if (!cur_ok || (nrun > 1 && now >= e->slice_end[p])) {
			/* Round robin: the next emu_runnable vCPU after cur in the ring of this
			 * pCPU.
			 */
			unsigned start = cur >= 0 ? (unsigned)cur / P : 0;
			int pick = -1;
			for (unsigned k = 1; k <= n; k++) {
				unsigned v = p + ((start + k) % n) * P;
				if (emu_runnable(e, &e->vc[v])) {
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
			sent |= emu_stop_begin(e, v, now);
	}
	(void)sent; /* no ack wait: see "Switching" above */
	for (unsigned v = 0; v < V; v++) {
		int cur = e->cur[v % P];
		if (cur < 0 || cur == (int)v)
			emu_run_vcpu(e, v, now);
	}
	return next;
}

/*
 * Directed yield (pvhint_yield_to) from a thread of vCPU self (-1: not attached) to vCPU v, in
 * slice mode, with the kernel's answers (guest-patches/0005). As KVM's KVM_HC_SCHED_YIELD: v, if
 * preempted, gets its pCPU now for a fresh quantum, and the caller's pCPU moves on to its next
 * vCPU (the caller yields too). The caller holds the lock, so the stop of its own vCPU is
 * deferred to its unlock, where it waits until its vCPU runs again: the call returns after v ran,
 * as the hypercall does.
 */
int emu_yield_to(struct pvhint_emu *e, int self, unsigned v, uint64_t now)
{
	unsigned P = e->c.pcpus;
	uint64_t *asked = self >= 0 ? &e->vc[self].asked_at : &e->asked_at;

	if ((int)v == self || !e->vc[v].pre)
		return -EAGAIN;
	if (*asked && now - *asked < EMU_YIELD_INTERVAL_NS)
		return -EBUSY;
	*asked = now;
	e->cur[v % P] = (int)v;
	e->slice_end[v % P] = now + e->c.quantum;
	if (self >= 0 && (unsigned)self % P != v % P && e->cur[self % P] == self)
		e->slice_end[self % P] = now;
	step_slice(e, now);
	emu_kick_ctl(e); /* its next slice end changed */
	return 0;
}

static uint64_t step_noisy(struct pvhint_emu *e, uint64_t now)
{
	unsigned V = e->c.vcpus;
	uint64_t period = e->c.period, on = (uint64_t)(e->c.duty * (double)period);
	uint64_t next = UINT64_MAX;
	bool sent = false;

	for (unsigned v = 0; v < V; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		if (v < e->c.noisy_lo || v > e->c.noisy_hi)
			continue; /* the neighbour never comes here */
		uint64_t ph = (now - e->t0 + (uint64_t)v * period / V) % period;
		bool active = ph < on;
		uint64_t at = now + (active ? on - ph : period - ph);
		next = next < at ? next : at;
		if (active && !vc->neighbour)
			vc->neighbour_at = now;
		else if (!active && vc->neighbour)
			vc->neighbour_ns += now - vc->neighbour_at;
		vc->neighbour = active;
		if (active)
			sent |= emu_stop_begin(e, v, now);
	}
	(void)sent; /* no ack wait: see "Switching" above */
	for (unsigned v = 0; v < V; v++)
		if (!e->vc[v].neighbour)
			emu_run_vcpu(e, v, now);
	emu_publish(e, now); /* is_idle follows the neighbour even when nothing changed state */
	return next;
}

static uint64_t step_script(struct pvhint_emu *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned v = 0; v < e->c.vcpus; v++) {
		struct emu_vcpu *vc = &e->vc[v];
		if (vc->desched && vc->until) {
			if (now >= vc->until)
				emu_run_vcpu(e, v, now);
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
		emu_set_pre(e, v, (double)(r >> 11) / 9007199254740992.0 < e->c.duty, now);
		__atomic_store_n(&e->rec[v].is_idle, (uint8_t)(r & 1), __ATOMIC_RELAXED);
	}
	return now + e->c.period;
}

void *emu_control_main(void *arg)
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
	/* Release: the open waiting for this returns only now (see emu.c, the open). */
	__atomic_store_n(&e->ctl_up, 1, __ATOMIC_RELEASE);
	os_futex_wake(&e->ctl_up, 1);
	emu_lock_enter(&e->lock);
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
			/* A posted halt or wake-up, or a count the model disagrees with: now. */
			bool stale = emu_kw_arm(e), due = stale || e->ksample_now;
			e->ksample_now = false;
			if (now >= e->next_sample) {
				e->next_sample = now + e->c.ksleep;
				due = true;
			}
			if (due)
				emu_sample_threads(e);
			/*
			 * A vCPU halted or woke, seen by the sampling or by a stop that found its
			 * thread asleep: emu_publish the flags and let the mode step again at once
			 * (bounded: a thread flapping between states cannot keep us here).
			 */
			if (e->dirty) {
				emu_publish(e, now);
				if (resteps++ < 2)
					continue;
				if (next > now + 100000) /* step again soon, not in a loop */
					next = now + 100000;
			}
			if (next > e->next_sample && emu_sampling_wanted(e))
				next = e->next_sample;
			/* A disagreement that outlasts a sample (a count that moves at a thread's
			 * next switch, a parked thread still running) is looked at again soon. */
			if (stale && next > now + 1000000)
				next = now + 1000000;
		} else if (emu_poll_kblocked(e) && next > now + 1000000) {
			next = now + 1000000;
		}
		uint64_t reap = emu_reap_acks(e, now);
		next = next < reap ? next : reap;
		/* Keep steal current during long preemptions (pvhint-top shows a rate). */
		bool any_pre = false;
		for (unsigned v = 0; v < e->c.vcpus; v++)
			any_pre |= e->vc[v].pre;
		if (any_pre) {
			if (now - e->last_flush >= 10000000) {
				for (unsigned v = 0; v < e->c.vcpus; v++)
					if (e->vc[v].pre)
						emu_account_steal(e, v, now);
				e->last_flush = now;
			}
			if (next > e->last_flush + 10000000)
				next = e->last_flush + 10000000;
		}
		resteps = 0;
		if (next > now)
			emu_ctl_sleep(e, now, next);
	}
	emu_lock_leave(&e->lock);
	return NULL;
}
