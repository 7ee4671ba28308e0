/* SPDX-License-Identifier: MIT */
/* ULTs that yield to each other on a worker do not starve a ULT injected into that worker's
 * queue from outside (here by a thread that is not a ULT): the only one that can end their loop
 * (hangs if starved). */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/thread.h>

#include <pthread.h>

static volatile int flag;

static void *spin_yield(void *a)
{
	while (!flag)
		pvrt_thread_yield();
	return a;
}

static void *setter(void *a)
{
	flag = 1;
	return a;
}

/* A thread that is not a ULT: what it creates goes through the worker's injection queue. */
static void *foreign(void *a)
{
	pvrt_thread_t t;
	CHECK_EQ(pvrt_thread_create(&t, NULL, setter, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	return a;
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 1; /* no idle worker to steal (and so reshuffle) the yielders */
	CHECK_EQ(pvrt_init(&c), 0);
	pvrt_thread_t t[2];
	CHECK_EQ(pvrt_thread_create(&t[0], NULL, spin_yield, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&t[1], NULL, spin_yield, NULL), 0);
	pthread_t f;
	CHECK_EQ(pthread_create(&f, NULL, foreign, NULL), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	CHECK_EQ(pthread_join(f, NULL), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	printf("inject: ok\n");
	return 0;
}
