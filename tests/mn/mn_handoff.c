/* SPDX-License-Identifier: MIT */
/*
 * Hand-offs back to back while preemption signals land everywhere (pvrt-run --mn).
 *
 * Pairs of ULTs pass a token through futex system calls the runtime does not see (syscall(2),
 * as a library's own locks do): a wait blocks its kernel thread until sysmon hands the worker
 * to a spare, so that the partner, queued there, can run and pass the token back. The waiter
 * then runs user code on a thread that lost its worker (sysmon kicks such threads) and enters
 * the runtime, which moves it to a worker. Busy ULTs keep every worker's queue non-empty, so
 * sysmon also sends time-slice kicks. Under the emulator, threads are stopped in the middle of
 * all this, and kicks sent meanwhile land when they resume: inside the runtime's own handling of
 * a lost worker, too (a kick handled there once moved the ULT twice: a crash in the context
 * switch, or a worker left owned by a thread that waited as a spare, a stall; runtime/MN.md).
 * Fails on a token held by both sides at once, a crash, or a hang (the alarm; a lost token
 * ends in one).
 *
 * usage: mn_handoff [PAIRS [PASSES [BUSY]]]
 */
#include "mn_check.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct pair {
	uint32_t turn; /* 0 or 1: whose pass it is */
	int holding;   /* 1 while a side holds the token: never both */
} __attribute__((aligned(64)));

struct side {
	struct pair *p;
	int me;
};

static long npasses = 150;
static int stop;

static void *passer(void *arg)
{
	struct side *s = arg;
	struct pair *p = s->p;
	mn_tid_seen();
	for (long i = 0; i < npasses; i++) {
		uint32_t t;
		while ((t = __atomic_load_n(&p->turn, __ATOMIC_ACQUIRE)) != (uint32_t)s->me)
			syscall(SYS_futex, &p->turn, FUTEX_WAIT_PRIVATE, t, NULL, NULL, 0);
		/* A ULT resumed twice (two threads running it) would hold the token twice. */
		CHECK_EQ(__atomic_exchange_n(&p->holding, 1, __ATOMIC_RELAXED), 0);
		/* User code on a thread that may have lost its worker: sysmon's kicks land here. */
		for (volatile int k = 0; k < 2000; k++)
			;
		sched_yield(); /* a runtime entry: a lost worker is noticed here at the latest */
		__atomic_store_n(&p->holding, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->turn, (uint32_t)!s->me, __ATOMIC_RELEASE);
		syscall(SYS_futex, &p->turn, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	}
	return NULL;
}

static void *busy(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		for (volatile int k = 0; k < 1000; k++)
			;
	return NULL;
}

int main(int argc, char **argv)
{
	alarm(100);
	int npairs = argc > 1 ? atoi(argv[1]) : 2;
	if (argc > 2)
		npasses = atol(argv[2]);
	int nbusy = argc > 3 ? atoi(argv[3]) : 1;
	CHECK(npairs > 0 && npairs <= 64 && npasses > 0 && nbusy >= 0 && nbusy <= 8);
	struct pair *pairs = calloc((size_t)npairs, sizeof(*pairs));
	struct side *sides = calloc((size_t)npairs * 2, sizeof(*sides));
	pthread_t *t = calloc((size_t)npairs * 2, sizeof(*t));
	pthread_t b[8];
	CHECK(pairs && sides && t);
	for (int i = 0; i < nbusy; i++)
		CHECK_EQ(pthread_create(&b[i], NULL, busy, NULL), 0);
	for (int i = 0; i < npairs * 2; i++) {
		sides[i] = (struct side){&pairs[i / 2], i % 2};
		CHECK_EQ(pthread_create(&t[i], NULL, passer, &sides[i]), 0);
	}
	for (int i = 0; i < npairs * 2; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < nbusy; i++)
		CHECK_EQ(pthread_join(b[i], NULL), 0);
	for (int i = 0; i < npairs; i++)
		CHECK_EQ(pairs[i].turn, 0u); /* 2 x npasses passes from side 0 */
	mn_check_ults(npairs * 2 + nbusy + 1);
	printf("mn_handoff: ok\n");
	return 0;
}
