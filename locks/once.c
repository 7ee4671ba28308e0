/* SPDX-License-Identifier: MIT */
/*
 * pvrt_once: state 0 -> 1 (running) by CAS; late callers mark 2 and park; 3 = done. A running
 * state carries the runner's fork generation in its upper bits (as glibc's once does): in a
 * fork child, an initialiser that a parent thread was running will never finish, so a caller
 * of a later generation runs it again instead of waiting for ever.
 */
#define _GNU_SOURCE
#include <pvrt/once.h>

#include "lk.h"

#include <errno.h>

enum { NOT_RUN = 0, RUNNING = 1, RUNNING_WAITERS = 2, DONE = 3 };
#define PHASE(s) ((s)&3u)
#define GEN(s)	 ((s) >> 2)

int pvrt_once(pvrt_once_t *o, void (*fn)(void))
{
	if (!fn)
		return -EINVAL;
	const uint32_t gen = lk_gen() & (UINT32_MAX >> 2);
	for (;;) {
		/* Acquire: the initialiser's effects happen-before our return. */
		uint32_t s = __atomic_load_n(&o->state, __ATOMIC_ACQUIRE);
		if (s == DONE)
			return 0;
		if (s == NOT_RUN || GEN(s) != gen) {
			if (!__atomic_compare_exchange_n(&o->state, &s, gen << 2 | RUNNING, false,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				continue;
			fn();
			/* Release: publishes the initialiser's effects. */
			if (PHASE(__atomic_exchange_n(&o->state, DONE, __ATOMIC_RELEASE)) ==
			    RUNNING_WAITERS)
				lk_wake(&o->state, INT32_MAX);
			return 0;
		}
		if (PHASE(s) == RUNNING &&
		    !__atomic_compare_exchange_n(&o->state, &s, gen << 2 | RUNNING_WAITERS, false,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		lk_park(&o->state, gen << 2 | RUNNING_WAITERS, CLOCK_MONOTONIC, NULL,
			PVRT_LOCK_MUTEX);
	}
}
