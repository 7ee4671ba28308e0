/* SPDX-License-Identifier: MIT */
/* Minimal checks for the pvhint tests: print the failing expression and exit 1. */
#ifndef PVHINT_TEST_CHECK_H
#define PVHINT_TEST_CHECK_H

#include "pvrt_os.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		if (a_ != b_) {                                                                    \
			fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n",          \
				__FILE__, __LINE__, #a, #b, a_, b_);                               \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline void test_sleep_us(uint64_t us)
{
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts))
		;
}

#endif
