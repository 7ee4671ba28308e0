/* SPDX-License-Identifier: MIT */
/* Internal: the waits of the locks with the options the preload's pthread wrappers and M:N
 * mode (runtime/mn.c) need: the condvar wait with the mutex operations passed in (mutexes
 * that may be glibc's own: robust, process-shared, PI/PP), and cancellable waits. */
#ifndef PVRT_LOCKS_LK_WAIT_H
#define PVRT_LOCKS_LK_WAIT_H

#include <pvrt/cond.h>
#include <pvrt/sem.h>

#include "lk_layout.h"

#include <stdbool.h>
#include <time.h>

typedef int (*lk_mutex_op)(void *m); /* 0 or a negative errno */

/*
 * abs NULL: no limit; clk must be valid (callers check). cancellable: the wait is a
 * cancellation point. A thread gets glibc's semantics (pthread_cancel; the mutex is locked
 * again before cleanup handlers run); a ULT of M:N mode returns -ECANCELED with the mutex held
 * again once it was cancelled (rt_futex_wait_cancel; the caller acts on it), having passed on a
 * signal it consumed.
 */
int lk_cond_wait(lk_cond_t *c, void *m, lk_mutex_op unlock, lk_mutex_op lock, clockid_t clk,
		 const struct timespec *abs, bool cancellable);

/* pvrt_sem_timedwait (abs NULL: pvrt_sem_wait); cancellable: as rt_futex_wait_cancel, -ECANCELED
 * (nothing taken) once the calling ULT is cancelled. */
int lk_sem_wait(lk_sem_t *s, clockid_t clk, const struct timespec *abs, bool cancellable);

#endif /* PVRT_LOCKS_LK_WAIT_H */
