/* SPDX-License-Identifier: MIT */
/* pvrt_once: state 0 -> 1 (running) by CAS; late callers mark 2 and park; 3 = done. */
#define _GNU_SOURCE
#include <pvrt/once.h>

#include "lk.h"

#include <errno.h>

enum { NOT_RUN = 0, RUNNING = 1, RUNNING_WAITERS = 2, DONE = 3 };

int pvrt_once(pvrt_once_t *o, void (*fn)(void))
{
	if (!fn)
		return -EINVAL;
	for (;;) {
		/* Acquire: the initialiser's effects happen-before our return. */
		uint32_t s = __atomic_load_n(&o->state, __ATOMIC_ACQUIRE);
		if (s == DONE)
			return 0;
		if (s == NOT_RUN) {
			if (!__atomic_compare_exchange_n(&o->state, &s, RUNNING, false,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				continue;
			fn();
			/* Release: publishes the initialiser's effects. */
			if (__atomic_exchange_n(&o->state, DONE, __ATOMIC_RELEASE) ==
			    RUNNING_WAITERS)
				lk_wake(&o->state, INT32_MAX);
			return 0;
		}
		if (s == RUNNING &&
		    !__atomic_compare_exchange_n(&o->state, &s, RUNNING_WAITERS, false,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		lk_park(&o->state, RUNNING_WAITERS, CLOCK_MONOTONIC, NULL, PVRT_LOCK_MUTEX);
	}
}
