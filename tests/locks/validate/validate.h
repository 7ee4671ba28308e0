/* SPDX-License-Identifier: MIT */
/*
 * The harness of the lock validation programs (one per primitive: mutex.c, rwlock.c, cond.c,
 * sem.c, barrier.c, spinlock.c, once.c). Each checks mutual exclusion and that no wake-up is
 * lost, with exact counts (counters under a lock add up, every produced item is consumed once,
 * every barrier round sees all threads); a lost wake-up shows as a hang (ctest's timeout).
 *
 * The hint values the locks read flip at random: a fake hint page driven by a chaos thread,
 * installed with pvrt_locks_set_hints (preempted, is_idle and steal, all marked valid), so
 * every hint-dependent branch runs (spin cut short, short spin budget after steal, wake-up
 * choices, hand-off deferred, barrier parking). With PVRT_HINTS=emu the default handle is the
 * overcommit emulator instead, and every test thread sits on an emulated vCPU (in slice mode
 * lock holders are really stopped mid-section).
 *
 * usage: PROGRAM [SCALE]   (iterations are multiplied by SCALE, default 1)
 */
#ifndef PVRT_TESTS_VALIDATE_H
#define PVRT_TESTS_VALIDATE_H

#define _GNU_SOURCE
#include <pvrt/lockstat.h>
#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NT 4 /* threads of a run, unless a program says otherwise */
#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

extern long scale;

/* Parse SCALE, open the default hint source and install the fake page unless it is the
 * emulator; validate_end stops the chaos thread, checks it ran and prints the lock counters. */
void validate_begin(int argc, char **argv);
void validate_end(void);

/* A test thread: attached to an emulated vCPU under the emulator, waits at gate (if any) so that
 * the threads of a run contend from their first iteration, then runs fn(id). */
struct start {
	void *(*fn)(void *);
	long id;
	pthread_barrier_t *gate; /* NULL: start at once */
};
void *start(void *p);

/* Run fn(id) on n threads (n <= 16), id 0..n-1, started together (a barrier), each attached to
 * an emulated vCPU under the emulator; returns when all are joined. */
void run(void *(*fn)(void *), int n);

/* Events of one lock class since 'before' (to show how contended a part was). */
struct pvrt_lock_stats stats_since(enum pvrt_lock_class c, const struct pvrt_lock_stats *before);

/* An absolute deadline us microseconds from now on clock clk. */
static inline struct timespec in_us(clockid_t clk, long us)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	ts.tv_nsec += us * 1000;
	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

#endif
