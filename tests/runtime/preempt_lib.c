/* SPDX-License-Identifier: MIT */
/*
 * Code of a shared library for test_rt_preempt's 'lost' case: pvrt must not move a ULT to
 * another kernel thread while it runs here (outside the executable, in per-ULT-TLS-less mode).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Spins for 'ns' nanoseconds; returns the number of times the kernel thread under it changed. */
__attribute__((visibility("default"))) int pvrt_test_spin_here(uint64_t ns)
{
	long tid = syscall(SYS_gettid);
	int moves = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		long now = syscall(SYS_gettid);
		moves += now != tid;
		tid = now;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t.tv_nsec -
		     (uint64_t)t0.tv_nsec <
		 ns);
	return moves;
}
