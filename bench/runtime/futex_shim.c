/* SPDX-License-Identifier: MIT */
/* The benchmark links the runtime's objects directly, so it may call its internal futex. */
#include "futex.h"

#include <limits.h>

int pvrt_bench_futex_wait(uint32_t *addr, uint32_t expected);
int pvrt_bench_futex_wake(uint32_t *addr);

int pvrt_bench_futex_wait(uint32_t *addr, uint32_t expected)
{
	return rt_futex_wait(addr, expected, CLOCK_MONOTONIC, NULL);
}

int pvrt_bench_futex_wake(uint32_t *addr)
{
	return rt_futex_wake(addr, INT_MAX);
}
