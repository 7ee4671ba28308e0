/* SPDX-License-Identifier: MIT */
/* Checks for the M:N tests: plain pthread programs run under pvrt-run --mn. */
#ifndef PVRT_TESTS_MN_CHECK_H
#define PVRT_TESTS_MN_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "check.h" /* tests/check.h: CHECK, CHECK_EQ */

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int mn_tid(void)
{
	return (int)syscall(SYS_gettid);
}

/*
 * The tests must fail if pthreads are kernel threads (M:N mode not on): ULTs share their
 * workers' kernel threads, so threads see at most $PVRT_WORKERS distinct tids (besides spares:
 * mn_on_spare). Record tids with
 * mn_tid_seen() and check with mn_check_ults() at the end.
 */
#define MN_MAX_TIDS 4096
static int mn_tids[MN_MAX_TIDS];
static int mn_ntids;

/* A spare kernel thread (named by the runtime) that took a worker whose thread blocked in the
 * kernel (the hand-off) runs ULTs too: it is the worker's, not a thread of its own. */
static inline bool mn_on_spare(void)
{
	char comm[32] = "";
	FILE *f = fopen("/proc/thread-self/comm", "r");
	if (f) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
	}
	return !strncmp(comm, "pvrt-spare", 10);
}

static inline void mn_tid_seen(void)
{
	/* A preemption may move the ULT between reading its tid and its thread's name: the pair
	 * counts only when the tid is the same after the name was read. */
	int t;
	bool spare;
	do {
		t = mn_tid();
		spare = mn_on_spare();
	} while (t != mn_tid());
	if (spare)
		return;
	for (int i = 0; i < __atomic_load_n(&mn_ntids, __ATOMIC_ACQUIRE); i++)
		if (__atomic_load_n(&mn_tids[i], __ATOMIC_RELAXED) == t)
			return;
	int i = __atomic_fetch_add(&mn_ntids, 1, __ATOMIC_ACQ_REL);
	if (i < MN_MAX_TIDS)
		__atomic_store_n(&mn_tids[i], t, __ATOMIC_RELAXED);
}

static inline void mn_check_ults(int nthreads)
{
	const char *w = getenv("PVRT_WORKERS");
	int workers = w ? atoi(w) : 0;
	CHECK(workers > 0); /* the tests set it */
	CHECK(nthreads > workers);
	/* Two recorders preempted between their search and their add record one tid twice:
	 * count distinct tids. */
	int n = mn_ntids < MN_MAX_TIDS ? mn_ntids : MN_MAX_TIDS, distinct = 0;
	for (int i = 0; i < n; i++) {
		bool dup = false;
		for (int j = 0; j < i && !dup; j++)
			dup = mn_tids[j] == mn_tids[i];
		distinct += !dup;
	}
	if (distinct > workers) {
		fprintf(stderr, "%d distinct kernel tids for %d threads on %d workers: not M:N\n",
			distinct, nthreads, workers);
		exit(1);
	}
}

#endif
