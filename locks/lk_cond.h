/* SPDX-License-Identifier: MIT */
/* Internal: the condvar wait with the mutex operations passed in (the preload uses it with
 * mutexes that may be glibc's own: robust, process-shared, PI/PP). */
#ifndef PVRT_LOCKS_LK_COND_H
#define PVRT_LOCKS_LK_COND_H

#include <pvrt/cond.h>

#include <stdbool.h>
#include <time.h>

typedef int (*lk_mutex_op)(void *m); /* 0 or a negative errno */

/* abs NULL: no limit; clk must be valid (callers check). cancellable: the wait is a
 * cancellation point with glibc's semantics (pthread_cancel; the mutex is locked again before
 * cleanup handlers run). */
int lk_cond_wait(pvrt_cond_t *c, void *m, lk_mutex_op unlock, lk_mutex_op lock, clockid_t clk,
		 const struct timespec *abs, bool cancellable);

#endif /* PVRT_LOCKS_LK_COND_H */
