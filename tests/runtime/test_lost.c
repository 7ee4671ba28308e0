/* SPDX-License-Identifier: MIT */
/*
 * A runtime entry that finds sysmon mid-decision (m->lost == 1, sysmon.c's try_handoff) waits
 * without re-entering the runtime. M:N mode interposes sched_yield with a ULT yield, and the
 * yield's first step is a runtime entry (runtime/mn.c): a wait that called the symbol
 * sched_yield entered again, found lost == 1 again, and recursed until the ULT's stack
 * overflowed (pvrt-run --mn sysbench on a loaded machine, where sysmon is often descheduled
 * between its two steps). This program interposes sched_yield the way M:N mode does and plays
 * sysmon's part by hand: lost = 1, then, 20 ms later, 0 (sysmon gave up).
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"
#include "pvrt_os.h"

#include <pvrt/thread.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static int armed;
static unsigned reentries;

/* What runtime/mn.c's wrapper does first: find the calling ULT through a runtime entry. */
int sched_yield(void)
{
	if (__atomic_load_n(&armed, __ATOMIC_RELAXED)) {
		reentries++;
		(void)rt_ult_current();
	}
	return (int)syscall(SYS_sched_yield);
}

static void *sysmon_gives_up(void *arg)
{
	struct rt_m *m = arg;
	usleep(20000);
	__atomic_store_n(&m->lost, 0, __ATOMIC_RELEASE);
	return NULL;
}

static void *ult(void *arg)
{
	(void)arg;
	struct rt_m *m = rt_tls_m;
	CHECK(m != NULL);
	struct pvrt_ult *self = rt_ult_current();
	CHECK(self != NULL);
	/* sysmon's first step: the M is outside the runtime, so it may decide. */
	__atomic_store_n(&m->lost, 1, __ATOMIC_SEQ_CST);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, sysmon_gives_up, m), 0);
	__atomic_store_n(&armed, 1, __ATOMIC_RELAXED);
	/* Enters, waits for lost to leave 1, keeps the worker (sysmon gave up). */
	CHECK(rt_ult_current() == self);
	__atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(reentries, 0u);
	return NULL;
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 1;
	c.slice_ns = -1; /* no sysmon: this program plays its part */
	c.handoff_ns = -1;
	CHECK_EQ(pvrt_init(&c), 0);
	pvrt_thread_t t;
	CHECK_EQ(pvrt_thread_create(&t, NULL, ult, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	puts("runtime.lost: a runtime entry waits for sysmon without re-entering");
	return 0;
}
