/* SPDX-License-Identifier: MIT */
/*
 * The live runtime that ctest tools.gdb inspects with tools/gdb/pvrt.py: two workers, three
 * ULTs blocked in known places (two on a mutex in gdb_blocked_on_mutex, one joining another in
 * gdb_joiner), one ready ULT that yields in gdb_yielder, then gdb_stop_here(), where gdb has a
 * breakpoint. Run alone it just finishes (exit 0).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/thread.h>

#include <stdint.h>

static pvrt_mutex_t m = PVRT_MUTEX_INITIALIZER;
static int arrived, stop;

/* noinline and used: gdb names these frames in the backtraces it prints. */
__attribute__((noinline, used)) void *gdb_blocked_on_mutex(void *a)
{
	(void)a;
	__atomic_add_fetch(&arrived, 1, __ATOMIC_RELAXED);
	pvrt_mutex_lock(&m);
	pvrt_mutex_unlock(&m);
	return NULL;
}

static pvrt_thread_t victim;
__attribute__((noinline, used)) void *gdb_joiner(void *a)
{
	(void)a;
	__atomic_add_fetch(&arrived, 1, __ATOMIC_RELAXED);
	pvrt_thread_join(victim, NULL);
	return NULL;
}

__attribute__((noinline, used)) void *gdb_yielder(void *a)
{
	(void)a;
	__atomic_add_fetch(&arrived, 1, __ATOMIC_RELAXED);
	/* Relaxed: a flag polled for progress only. */
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		pvrt_thread_yield();
	return NULL;
}

/* The breakpoint: every ULT above has reached its waiting point. */
__attribute__((noinline, used)) void gdb_stop_here(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 2;
	CHECK_EQ(pvrt_init(&c), 0);
	pvrt_locks_stats_enable(true);
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	pvrt_thread_t t[4];
	CHECK_EQ(pvrt_thread_create(&t[0], NULL, gdb_blocked_on_mutex, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&t[1], NULL, gdb_blocked_on_mutex, NULL), 0);
	victim = t[1];
	CHECK_EQ(pvrt_thread_create(&t[2], NULL, gdb_joiner, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&t[3], NULL, gdb_yielder, NULL), 0);
	/* Progress, not time: until all four reached their waits and both mutex waiters parked
	 * (counted just before a waiter blocks; the yields after let it finish blocking). */
	struct pvrt_lock_stats st;
	do {
		pvrt_thread_yield();
		pvrt_locks_stats_get(PVRT_LOCK_MUTEX, &st);
	} while (__atomic_load_n(&arrived, __ATOMIC_RELAXED) < 4 || st.parks < 2);
	for (int i = 0; i < 100; i++)
		pvrt_thread_yield();
	gdb_stop_here();
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	for (int i = 0; i < 4; i++)
		if (i != 1)
			CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	return 0;
}
