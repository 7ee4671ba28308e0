/* SPDX-License-Identifier: MIT */
/*
 * pvrt_futex for threads that are not ULTs: the kernel futex, private to the
 * process. (The runtime routes ULT waiters through its own wait queues.)
 */
#include "futex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static int valid_timespec(const struct timespec *ts)
{
	return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000L;
}

int pvrt_futex_wait(uint32_t *addr, uint32_t expected, clockid_t clk,
		    const struct timespec *abstime)
{
	int op = FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG;

	if (clk == CLOCK_REALTIME)
		op |= FUTEX_CLOCK_REALTIME;
	else if (clk != CLOCK_MONOTONIC)
		return -EINVAL;
	if (abstime && !valid_timespec(abstime))
		return -EINVAL;
	/* Interposed pthread calls must not change errno as glibc's do not. */
	int saved = errno;
	/* The kernel compares *addr with expected under its bucket lock: no lost wake-up. */
	long r = syscall(SYS_futex, addr, op, expected, abstime, NULL, FUTEX_BITSET_MATCH_ANY);
	int err = r == 0 ? 0 : errno;
	errno = saved;
	switch (err) {
	case 0:
		return 0;
	case EAGAIN:
		return -EAGAIN;
	case ETIMEDOUT:
		return -ETIMEDOUT;
	case EINTR:
		return 0; /* a spurious wake-up as far as the caller is concerned */
	default:
		return -err;
	}
}

int pvrt_futex_wake(uint32_t *addr, int n)
{
	int saved = errno;
	long r = syscall(SYS_futex, addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
	errno = saved;
	return r < 0 ? 0 : (int)r;
}
