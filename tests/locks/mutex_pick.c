/* SPDX-License-Identifier: MIT */
/*
 * Whom a mutex unlock wakes among thread waiters (asleep in the kernel futex on the word, each
 * with its vCPU's bit): with a hint page (a fake one, installed with pvrt_locks_set_hints)
 * saying vCPU 0 is preempted, a waiter on vCPU 1 is woken before an older one on vCPU 0; a
 * waiter on a preempted vCPU is still woken when it is the only one; without hints the older
 * waiter goes first. Each waiter is started only once the previous one sleeps in the kernel
 * (state S in /proc: the only place it can sleep), so the test has no timing assumption.
 */
#define _GNU_SOURCE
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
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

static char state_of(pid_t tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *e = strrchr(buf, ')'); /* the name may hold spaces */
	CHECK(e != NULL && e[1] == ' ');
	return e[2];
}

/* Start a waiter on the held mutex and return once it sleeps in the kernel. */
static void start(struct waiter *w, int id, int vcpu)
{
	*w = (struct waiter){.id = id, .vcpu = vcpu};
	CHECK_EQ(pthread_create(&w->th, NULL, lock_once, w), 0);
	pid_t tid;
	while (!(tid = __atomic_load_n(&w->tid, __ATOMIC_ACQUIRE)))
		sched_yield();
	while (!(__atomic_load_n(&m.word, __ATOMIC_RELAXED) & PVRT_MUTEX_KWAITERS) ||
	       state_of(tid) != 'S')
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
	rec[0].preempted = PVHINT_PREEMPTED;
	page.valid = PVHINT_VALID_PREEMPTED;
	pvrt_locks_set_hints(&page);

	/* The older waiter's vCPU is preempted: the younger one, on vCPU 1, goes first. */
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	start(&w[0], 1, 0);
	start(&w[1], 2, 1);
	finish(w, 2);
	CHECK_EQ(order[0], 2);
	CHECK_EQ(order[1], 1);

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
