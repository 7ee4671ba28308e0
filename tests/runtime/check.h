/* SPDX-License-Identifier: MIT */
/* Minimal test assertions: print the failed condition with its location and exit non-zero. */
#ifndef PVRT_TESTS_CHECK_H
#define PVRT_TESTS_CHECK_H

#include <pvrt/runtime.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s (pvrt_errmsg: %s)\n", __FILE__,   \
				__LINE__, #cond, pvrt_errmsg());                                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		if (a_ != b_) {                                                                    \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld; %s)\n",      \
				__FILE__, __LINE__, #a, #b, a_, b_, pvrt_errmsg());                \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
