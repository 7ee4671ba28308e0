/* SPDX-License-Identifier: MIT */
/*
 * The checks of every pvrt test: print the failed condition with its location, and why the last
 * library call failed (pvrt_errmsg, else pvhint_errmsg for a test of libpvhint alone), then exit
 * non-zero. tests/CMakeLists.txt puts this folder on every test's include path.
 */
#ifndef PVRT_TESTS_CHECK_H
#define PVRT_TESTS_CHECK_H

#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

/* Weak: a test that links only libpvhint has no pvrt_errmsg (the address is then NULL). */
#pragma weak pvrt_errmsg
#pragma weak pvhint_errmsg

static inline void check_failed(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: CHECK failed: %s", file, line, what);
	if (pvrt_errmsg)
		fprintf(stderr, " (pvrt_errmsg: %s)", pvrt_errmsg());
	else if (pvhint_errmsg)
		fprintf(stderr, " (pvhint_errmsg: %s)", pvhint_errmsg());
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			check_failed(__FILE__, __LINE__, #cond);                                   \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		if (a_ != b_) {                                                                    \
			char what_[256];                                                           \
			snprintf(what_, sizeof(what_), "%s == %s (%lld vs %lld)", #a, #b, a_, b_); \
			check_failed(__FILE__, __LINE__, what_);                                   \
		}                                                                                  \
	} while (0)

/* Sleep at least us microseconds (restarted after signals). */
static inline void test_sleep_us(uint64_t us)
{
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts))
		;
}

/* /proc schedstat of one of this process's threads: on-CPU ns and run-queue wait ns. */
static inline void test_schedstat(int tid, uint64_t *run, uint64_t *wait)
{
	char path[64];
	unsigned long long r = 0, w = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
	FILE *f = fopen(path, "r");
	CHECK(f);
	CHECK(fscanf(f, "%llu %llu", &r, &w) == 2);
	fclose(f);
	*run = r;
	*wait = w;
}

/* What 'auto' falls back to without a kernel page: bpf where it loads (privileged, kernel with
 * BTF, built with it), else none. */
static inline const char *test_auto_fallback(void)
{
	pvhint_t *b;
	struct pvhint_options o; /* no compound literal: C++ tests include this too */
	memset(&o, 0, sizeof(o));
	o.source = "bpf";
	if (pvhint_open(&o, &b))
		return "none";
	pvhint_close(b);
	return "bpf";
}

/* Is thread tid of this process blocked in futex(2) on addr? (/proc/self/task/TID/syscall: the
 * number and arguments of the call it is blocked in, or "running".) No timing assumption: a
 * test waits for this before it acts on a sleeper. */
static inline int test_sleeps_in_futex(int tid, const void *addr)
{
	char path[64];
	long nr = -1;
	unsigned long a0 = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	int n = fscanf(f, "%ld %lx", &nr, &a0);
	fclose(f);
	return n == 2 && nr == SYS_futex && a0 == (unsigned long)addr;
}

/* Thread-slot pages (the bpf source): does record s (the caller's) see one of the caller's
 * switch-ins within 'naps' sleeps of a millisecond? Every switch-in the program sees moves the
 * record's version. */
static inline bool test_record_follows(pvhint_t *h, int s, int naps)
{
	uint32_t v0 = __atomic_load_n(&h->rec[s].version, __ATOMIC_ACQUIRE);
	for (int i = 0; i < naps; i++) {
		test_sleep_us(1000);
		if (__atomic_load_n(&h->rec[s].version, __ATOMIC_ACQUIRE) != v0)
			return true;
	}
	return false;
}

/* Within 20 s: record s stops following the caller (50 naps without a switch-in seen), as when a
 * served instance's programs are detached (pvhint_want). */
static inline bool test_record_stops_following(pvhint_t *h, int s)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (!test_record_follows(h, s, 50))
			return true;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 20);
	return false;
}

#endif /* PVRT_TESTS_CHECK_H */
