/* SPDX-License-Identifier: MIT */
/*
 * pvrt_finalize returns only once every ULT has exited: ULTs created by a thread that is not a
 * ULT (the injection path) and by ULTs on either worker, still creating children while the
 * primary already waits in finalize, exiting on whatever worker they were moved to. The live
 * count behind the wait is each worker's creates minus its exits (ult.c); several init/finalize
 * cycles check that nothing of an earlier runtime is counted in a later one.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <stdint.h>

#define ROOTS 40
#define DEPTH 4 /* a root makes a binary tree of 2^(DEPTH+1) - 1 ULTs */
#define TREE  ((2 << DEPTH) - 1)

static unsigned done;

/* Detached: nobody joins, so only finalize's wait keeps the runtime up for them. */
static void *node(void *a)
{
	intptr_t depth = (intptr_t)a;
	pvrt_thread_attr_t at;
	pvrt_thread_attr_init(&at);
	at.detached = 1;
	for (int i = 0; depth > 0 && i < 2; i++) {
		CHECK_EQ(pvrt_thread_create(NULL, &at, node, (void *)(depth - 1)), 0);
		pvrt_thread_yield(); /* let a thief move the child, or us */
	}
	if (depth == 0)
		pvrt_thread_sleep(100000 + (uint64_t)(uintptr_t)&at % 7 * 50000);
	__atomic_fetch_add(&done, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* A thread that is not a ULT: its creates take the injection path and count apart. */
static void *foreign(void *a)
{
	pvrt_thread_attr_t at;
	pvrt_thread_attr_init(&at);
	at.detached = 1;
	for (int i = 0; i < ROOTS; i++)
		CHECK_EQ(pvrt_thread_create(NULL, &at, node, (void *)(intptr_t)DEPTH), 0);
	return a;
}

int main(void)
{
	for (int round = 0; round < 5; round++) {
		struct pvrt_config c;
		pvrt_config_init(&c);
		c.workers = 2;
		CHECK_EQ(pvrt_init(&c), 0);
		__atomic_store_n(&done, 0, __ATOMIC_RELAXED);
		pthread_t f;
		CHECK_EQ(pthread_create(&f, NULL, foreign, NULL), 0);
		CHECK_EQ(pthread_join(f, NULL), 0);
		/* The trees are still growing: most nodes are created while finalize waits. */
		CHECK_EQ(pvrt_finalize(), 0);
		CHECK_EQ(__atomic_load_n(&done, __ATOMIC_RELAXED), ROOTS * TREE);
	}
	return 0;
}
