/* SPDX-License-Identifier: MIT */
/*
 * Whom a mutex unlock wakes among thread waiters (asleep in the kernel futex on the word, each
 * with its vCPU's bit): with a hint page (a fake one, installed with pvrt_locks_set_hints)
 * saying vCPU 0 is preempted, a waiter on vCPU 1 is woken before an older one on vCPU 0,
 * except at every fourth contended wake of the unlocking thread (the bound: the oldest goes);
 * a waiter on a preempted vCPU is still woken when it is the only one; without hints the
 * older waiter goes first. Each waiter is started only once the previous one sleeps in the
 * futex on the mutex word (/proc's syscall file), so the test has no timing assumption.
 */
#define _GNU_SOURCE
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>

#include "lk_layout.h" /* white box: the futex word waiters sleep on */
#include <pvrt/pvhint.h>

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static pvrt_mutex_t m = PVRT_MUTEX_INITIALIZER;
static int order[8], norder; /* under m */
static struct pvhint_record rec[4];
static pvhint_t page = {.rec = rec, .nr = 4};

struct waiter {
	int id, vcpu;
	pid_t tid; /* set before it locks */
	pthread_t th;
};

static void *lock_once(void *p)
{
	struct waiter *w = p;
	pvhint_tls_vcpu = w->vcpu; /* the vCPU the waiter sleeps with (as if attached to it) */
	__atomic_store_n(&w->tid, gettid(), __ATOMIC_RELEASE);
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	order[norder++] = w->id;
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	return NULL;
}

static bool sleeps_on_word(pid_t tid)
{
	return test_sleeps_in_futex((int)tid, &lk_mutex_of(&m)->word);
}

/* Start a waiter on the held mutex and return once it sleeps in the kernel futex. */
static void start(struct waiter *w, int id, int vcpu)
{
	*w = (struct waiter){.id = id, .vcpu = vcpu};
	CHECK_EQ(pthread_create(&w->th, NULL, lock_once, w), 0);
	pid_t tid;
	while (!(tid = __atomic_load_n(&w->tid, __ATOMIC_ACQUIRE)))
		sched_yield();
	while (!sleeps_on_word(tid))
		usleep(1000);
}

static void finish(struct waiter *w, int n)
{
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	for (int i = 0; i < n; i++)
		CHECK_EQ(pthread_join(w[i].th, NULL), 0);
	CHECK_EQ(norder, n);
	norder = 0;
}

int main(void)
{
	struct waiter w[2];
	alarm(50); /* a waiter that never sleeps where expected fails here, not at ctest's limit */
	rec[0].preempted = PVHINT_PREEMPTED;
	page.valid = PVHINT_VALID_PREEMPTED;
	pvrt_locks_set_hints(&page);

	/* The older waiter's vCPU is preempted: the younger one, on vCPU 1, goes first, but for
	 * every fourth of this thread's wakes (each round's second wake is the first waiter's
	 * unlock, a thread of its own). */
	int fifo = 0;
	for (int r = 0; r < 8; r++) {
		CHECK_EQ(pvrt_mutex_lock(&m), 0);
		start(&w[0], 1, 0);
		start(&w[1], 2, 1);
		finish(w, 2);
		CHECK((order[0] == 2 && order[1] == 1) || (order[0] == 1 && order[1] == 2));
		fifo += order[0] == 1;
	}
	CHECK_EQ(fifo, 2);

	/* Alone on a preempted vCPU: woken all the same. */
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	start(&w[0], 3, 0);
	finish(w, 1);
	CHECK_EQ(order[0], 3);

	/* No preemption hints: the oldest first. */
	page.valid = 0;
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	start(&w[0], 4, 0);
	start(&w[1], 5, 1);
	finish(w, 2);
	CHECK_EQ(order[0], 4);
	CHECK_EQ(order[1], 5);
	pvrt_locks_set_hints(NULL);
	printf("mutex_pick: OK\n");
	return 0;
}
