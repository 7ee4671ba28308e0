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
#include <stdlib.h>
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

#endif /* PVRT_TESTS_CHECK_H */
