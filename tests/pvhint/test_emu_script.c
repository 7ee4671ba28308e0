/* SPDX-License-Identifier: MIT */
/*
 * The emulator in script mode, functionally: a descheduled vCPU's thread really stops (no
 * progress while 'preempted' is set) and resumes; flags and is_idle follow the model; halted
 * vCPUs (all threads parked) are not preempted and an unpark on a held vCPU waits for it;
 * timed deschedule; several threads on one vCPU; errno kept; detach/close clean up; a parked
 * thread moves between vCPUs.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>

static pvhint_t *h;

struct spinner {
	unsigned vcpu;
	uint64_t count; /* progress */
	int stop;	/* ask it to finish */
	int attached;	/* set once attached */
	int errno_bad;	/* errno changed under it */
	int park_now;	/* ask it to park */
	int parked;	/* it is inside park..unpark */
};

static void *spin_main(void *arg)
{
	struct spinner *s = arg;
	CHECK(!pvhint_emu_attach(h, s->vcpu));
	CHECK_EQ(pvhint_self_vcpu(), (int)s->vcpu);
	__atomic_store_n(&s->attached, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		errno = 4242;
		for (int i = 0; i < 100; i++)
			__atomic_fetch_add(&s->count, 1, __ATOMIC_RELAXED);
		if (errno != 4242)
			__atomic_store_n(&s->errno_bad, 1, __ATOMIC_RELAXED);
#ifdef PVRT_TSAN
		/* TSan delivers asynchronous signals at its interceptors only. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
		if (__atomic_load_n(&s->park_now, __ATOMIC_ACQUIRE)) {
			pvhint_thread_park(h);
			__atomic_store_n(&s->parked, 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&s->park_now, __ATOMIC_ACQUIRE))
				test_sleep_us(200);
			pvhint_thread_unpark(h);
			__atomic_store_n(&s->parked, 0, __ATOMIC_RELEASE);
		}
	}
	if (s->vcpu & 1) /* odd ones detach, even ones leave it to thread exit */
		CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static uint64_t count(struct spinner *s)
{
	return __atomic_load_n(&s->count, __ATOMIC_RELAXED);
}

static void wait_progress(struct spinner *s)
{
	uint64_t c0 = count(s), t_end = os_now_ns() + 5000000000ull;
	while (count(s) == c0)
		CHECK(os_now_ns() < t_end);
}

int main(void)
{
	/* ack_timeout=10s: a thread the machine starves still acknowledges its stop in time, so
	 * every stop completes (a missed one is a bug, not load). */
	CHECK(!pvhint_open(
	    &(struct pvhint_options){.source = "emu",
				     .emu = "vcpus=4,pcpus=2,mode=script,ack_timeout=10s"},
	    &h));
	struct spinner sp[5] = {{.vcpu = 0}, {.vcpu = 1}, {.vcpu = 2}, {.vcpu = 3}, {.vcpu = 1}};
	pthread_t th[5];
	for (int i = 0; i < 5; i++) {
		CHECK(!pthread_create(&th[i], NULL, spin_main, &sp[i]));
		while (!__atomic_load_n(&sp[i].attached, __ATOMIC_ACQUIRE))
			test_sleep_us(100);
	}
	/* all running: nothing preempted, no pCPU idle (v on pCPU v%2) */
	for (unsigned v = 0; v < 4; v++) {
		CHECK(!pvhint_vcpu_preempted(h, v));
		CHECK(!pvhint_pcpu_idle(h, v));
	}

	for (int round = 0; round < 20; round++) {
		/* deschedule vCPU 1 (two threads: sp[1], sp[4]) */
		CHECK(!pvhint_emu_deschedule(h, 1, 0));
		CHECK(pvhint_vcpu_preempted(h, 1));
		CHECK(!pvhint_vcpu_preempted(h, 0));
		uint64_t c1 = count(&sp[1]), c4 = count(&sp[4]);
		struct pvhint_emu_stats sa;
		CHECK(!pvhint_emu_stats(h, 1, &sa));
		test_sleep_us(round == 0 ? 30000 : 2000);
		/* no progress while preempted (the stop completed before deschedule returned) */
		CHECK_EQ(sa.ack_timeouts, 0);
		CHECK_EQ(count(&sp[1]), c1);
		CHECK_EQ(count(&sp[4]), c4);
		CHECK(pvhint_vcpu_preempted(h, 1));
		wait_progress(&sp[3]); /* others run */
		CHECK(!pvhint_emu_resume(h, 1));
		CHECK(!pvhint_vcpu_preempted(h, 1));
		wait_progress(&sp[1]);
		wait_progress(&sp[4]);
	}
	struct pvhint_emu_stats st;
	CHECK(!pvhint_emu_stats(h, 1, &st));
	CHECK_EQ(st.desched, 20);
	CHECK_EQ(st.threads, 2);
	CHECK(st.stops >= 40); /* 2 threads x 20 rounds */
	CHECK_EQ(st.ack_timeouts, 0);
	CHECK(st.stopped_ns > 20 * 2000000ull);
	CHECK_EQ(st.eintr, 0);

	/* timed deschedule resumes by itself (the period starts at the call: on a loaded machine
	 * the stop itself may take a while, so only check the flag if the call was quick) */
	uint64_t t_call = os_now_ns();
	CHECK(!pvhint_emu_deschedule(h, 2, 200000000));
	if (os_now_ns() - t_call < 100000000)
		CHECK(pvhint_vcpu_preempted(h, 2));
	uint64_t t_end = os_now_ns() + 5000000000ull;
	while (pvhint_vcpu_preempted(h, 2))
		CHECK(os_now_ns() < t_end);
	CHECK(os_now_ns() - t_call >= 200000000);
	wait_progress(&sp[2]);

	/* is_idle: vCPUs 0 and 2 share pCPU 0; deschedule both -> pCPU 0 idle */
	CHECK(!pvhint_emu_deschedule(h, 0, 0));
	CHECK(!pvhint_pcpu_idle(h, 0)); /* vCPU 2 still runs on it */
	CHECK(!pvhint_emu_deschedule(h, 2, 0));
	CHECK(pvhint_pcpu_idle(h, 0) && pvhint_pcpu_idle(h, 2));
	CHECK(!pvhint_pcpu_idle(h, 1));
	uint64_t s0 = pvhint_steal(h, 0);
	test_sleep_us(20000);
	CHECK(!pvhint_emu_resume(h, 0));
	CHECK(!pvhint_emu_resume(h, 2));
	CHECK(pvhint_steal(h, 0) >= s0 + 20000000); /* steal accumulates preempted time */
	CHECK(!pvhint_pcpu_idle(h, 0));

	/* halted: vCPU 3's only thread parks -> not preempted when descheduled, pCPU 1 still
	 * busy with vCPU 1; unpark on the held vCPU waits until it is resumed */
	__atomic_store_n(&sp[3].park_now, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&sp[3].parked, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	CHECK(!pvhint_emu_deschedule(h, 3, 0));
	CHECK(!pvhint_vcpu_preempted(h, 3)); /* halted vCPUs are not preempted */
	CHECK(!pvhint_emu_stats(h, 3, &st));
	CHECK_EQ(st.parked, 1);
	__atomic_store_n(&sp[3].park_now, 0, __ATOMIC_RELEASE);
	/* it unparks: runnable on a held vCPU -> preempted, and it does not return to user code */
	t_end = os_now_ns() + 5000000000ull;
	while (!pvhint_vcpu_preempted(h, 3))
		CHECK(os_now_ns() < t_end);
	uint64_t c3 = count(&sp[3]);
	test_sleep_us(10000);
	CHECK(__atomic_load_n(&sp[3].parked, __ATOMIC_ACQUIRE)); /* still inside unpark */
	CHECK_EQ(count(&sp[3]), c3);
	CHECK(!pvhint_emu_resume(h, 3));
	wait_progress(&sp[3]);

	/* pCPU idle when all vCPUs on it are halted: park vCPU 1's two threads and vCPU 3's */
	for (int i = 1; i < 5; i += 2)
		__atomic_store_n(&sp[i].park_now, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&sp[4].park_now, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&sp[1].parked, __ATOMIC_ACQUIRE) ||
	       !__atomic_load_n(&sp[3].parked, __ATOMIC_ACQUIRE) ||
	       !__atomic_load_n(&sp[4].parked, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	CHECK(pvhint_pcpu_idle(h, 1) && pvhint_pcpu_idle(h, 3));
	CHECK(!pvhint_pcpu_idle(h, 0));
	for (int i = 1; i < 5; i++)
		__atomic_store_n(&sp[i].park_now, 0, __ATOMIC_RELEASE);
	wait_progress(&sp[1]);
	CHECK(!pvhint_pcpu_idle(h, 1));

	/* the caller cannot deschedule its own vCPU */
	CHECK(!pvhint_emu_attach(h, 0));
	CHECK_EQ(pvhint_emu_deschedule(h, 0, 0), -EDEADLK);
	CHECK(!pvhint_emu_detach(h));
	CHECK_EQ(pvhint_emu_deschedule(h, 9, 0), -EINVAL);
	CHECK_EQ(pvhint_emu_attach(h, 4), -EINVAL);

	/* a held vCPU at close: close releases the threads */
	CHECK(!pvhint_emu_deschedule(h, 2, 0));
	for (int i = 0; i < 5; i++)
		__atomic_store_n(&sp[i].stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 5; i++)
		if (i != 2)
			CHECK(!pthread_join(th[i], NULL));
	for (int i = 0; i < 5; i++)
		CHECK(!sp[i].errno_bad);
	pvhint_close(h); /* releases vCPU 2's thread, which then exits (orphaned record) */
	CHECK(!pthread_join(th[2], NULL));

	/* reopen works (signal reinstalled), and attach on a closed-then-new handle is clean */
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "vcpus=2,mode=script"},
			   &h));
	CHECK(!pvhint_emu_attach_next(h));
	CHECK_EQ(pvhint_self_vcpu(), 0);
	CHECK(!pvhint_emu_attach_next(h)); /* moves */
	CHECK_EQ(pvhint_self_vcpu(), 1);
	CHECK(!pvhint_emu_detach(h));

	/* move: only a parked thread moves; it then counts as the new vCPU's, and its unpark
	 * waits for that vCPU's turn */
	CHECK(!pvhint_emu_attach(h, 0));
	CHECK_EQ(pvhint_emu_move(h, 1), -EINVAL); /* running */
	pvhint_thread_park(h);
	CHECK_EQ(pvhint_emu_move(h, 2), -EINVAL);      /* out of range */
	CHECK(!pvhint_emu_deschedule(h, 1, 50000000)); /* 50 ms, then the control thread resumes */
	CHECK(!pvhint_emu_move(h, 1));
	CHECK_EQ(pvhint_self_vcpu(), 1);
	struct pvhint_emu_stats m0, m1;
	CHECK(!pvhint_emu_stats(h, 0, &m0));
	CHECK(!pvhint_emu_stats(h, 1, &m1));
	CHECK_EQ(m0.threads, 0);
	CHECK_EQ(m1.threads, 1);
	pvhint_thread_unpark(h);
	CHECK(!pvhint_vcpu_preempted(h, 1)); /* the unpark returned on vCPU 1's turn */
	CHECK(!pvhint_emu_detach(h));

	/* attach_parked on a held vCPU: counts as parked at once (a plain attach would wait for
	 * the vCPU's turn first), and its unpark waits for that turn */
	CHECK(!pvhint_emu_deschedule(h, 1, 50000000));
	CHECK(!pvhint_emu_attach_parked(h, 1));
	CHECK(!pvhint_emu_stats(h, 1, &m1));
	CHECK_EQ(m1.threads, 1);
	CHECK_EQ(m1.parked, 1);
	CHECK_EQ(pvhint_emu_attach_parked(h, 2), -EINVAL);
	pvhint_thread_unpark(h);
	CHECK(!pvhint_vcpu_preempted(h, 1));
	CHECK(!pvhint_emu_detach(h));
	pvhint_close(h);
	printf("emu script ok\n");
	return 0;
}
