/* SPDX-License-Identifier: MIT */
/*
 * Whom a condvar signal wakes: with a hint page (a fake one, installed with
 * pvrt_locks_set_hints) saying vCPU 0 is preempted and the physical CPU under vCPU 2 is idle,
 * waiters queued on vCPUs 0, 1, 2 are signalled in the order 2 (runs at once), 1 (not
 * preempted), 0; a waiter on a preempted vCPU passed over 4 times goes next; without hints the
 * order is FIFO. Waiters record themselves under the mutex before waiting, and the condvar
 * queues a waiter before it releases the mutex, so "all recorded" seen under the mutex means
 * "all queued": the test has no timing assumption.
 */
#define _GNU_SOURCE
#include <pvrt/cond.h>
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>

#include "check.h"

#include <pthread.h>
#include <sched.h>

static pvrt_mutex_t m = PVRT_MUTEX_INITIALIZER;
static pvrt_cond_t c = PVRT_COND_INITIALIZER;
static int queued, woke = -1; /* under m */
static struct pvhint_record rec[4];
static pvhint_t page = {.rec = rec, .nr = 4};

struct waiter {
	int id, vcpu;
	pthread_t th;
};

static void *wait_once(void *p)
{
	struct waiter *w = p;
	pvhint_tls_vcpu = w->vcpu; /* the vCPU the waiter records (as if attached to it) */
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	queued++;
	/* pvrt's condvar returns from a wait only when a signal took the waiter (POSIX would
	 * allow spurious wake-ups; this implementation has none, and one would fail here). */
	CHECK_EQ(pvrt_cond_wait(&c, &m), 0);
	CHECK_EQ(woke, -1); /* one signal, one waiter */
	woke = w->id;
	queued--;
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	return NULL;
}

static void start(struct waiter *w, int id, int vcpu)
{
	*w = (struct waiter){.id = id, .vcpu = vcpu};
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	int before = queued;
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	CHECK_EQ(pthread_create(&w->th, NULL, wait_once, w), 0);
	for (;;) { /* until it has queued (see the file comment) */
		CHECK_EQ(pvrt_mutex_lock(&m), 0);
		int q = queued;
		CHECK_EQ(pvrt_mutex_unlock(&m), 0);
		if (q > before)
			return;
		sched_yield();
	}
}

/* Signal once and return the id of the waiter that woke. */
static int signal_one(struct waiter *all, int n)
{
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	CHECK_EQ(pvrt_cond_signal(&c), 0);
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	for (;;) {
		CHECK_EQ(pvrt_mutex_lock(&m), 0);
		int id = woke;
		woke = -1;
		CHECK_EQ(pvrt_mutex_unlock(&m), 0);
		if (id >= 0) {
			for (int i = 0; i < n; i++)
				if (all[i].id == id)
					CHECK_EQ(pthread_join(all[i].th, NULL), 0);
			return id;
		}
		sched_yield();
	}
}

int main(void)
{
	struct waiter w[8];
	rec[0].preempted = PVHINT_PREEMPTED;
	rec[2].is_idle = 1;
	page.valid = PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE;
	pvrt_locks_set_hints(&page);

	for (int i = 0; i < 3; i++)
		start(&w[i], i, i);
	CHECK_EQ(signal_one(w, 3), 2);
	CHECK_EQ(signal_one(w, 3), 1);
	CHECK_EQ(signal_one(w, 3), 0);

	/* The bound: passed over 4 times, the waiter on the preempted vCPU goes first. */
	start(&w[0], 10, 0);
	for (int r = 0; r < 4; r++) {
		start(&w[1], 11 + r, 1);
		CHECK_EQ(signal_one(w, 2), 11 + r);
	}
	start(&w[1], 20, 1);
	CHECK_EQ(signal_one(w, 2), 10);
	CHECK_EQ(signal_one(w, 2), 20);

	/* No preemption or idle hints: FIFO. */
	page.valid = 0;
	start(&w[0], 30, 2);
	start(&w[1], 31, 0);
	start(&w[2], 32, 1);
	CHECK_EQ(signal_one(w, 3), 30);
	CHECK_EQ(signal_one(w, 3), 31);
	CHECK_EQ(signal_one(w, 3), 32);
	pvrt_locks_set_hints(NULL);
	printf("cond_pick: OK\n");
	return 0;
}
