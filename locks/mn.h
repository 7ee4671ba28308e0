/* SPDX-License-Identifier: MIT */
/* M:N mode of the preload (mn.c), as preload.c uses it. */
#ifndef PVRT_LOCKS_MN_H
#define PVRT_LOCKS_MN_H

#include <pthread.h>
#include <stdbool.h>

/* Set once M:N mode runs: pthreads are ULTs. */
extern bool lk_mn_on __attribute__((visibility("hidden")));

/* Start the runtime with the calling (main) thread as the primary ULT: NULL, or why not. */
const char *lk_mn_start(void) __attribute__((visibility("hidden")));

/* pthread_create as a ULT; glibc's error numbers. */
int lk_mn_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
    __attribute__((visibility("hidden")));

/* Around a condvar wait of the caller (no-ops unless it is a ULT): cancellation points. */
void lk_mn_cond_enter(void *c) __attribute__((visibility("hidden")));
void lk_mn_cond_leave(void) __attribute__((visibility("hidden")));

#endif
