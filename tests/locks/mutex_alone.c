/* SPDX-License-Identifier: MIT */
/*
 * The mutex's single-threaded paths (mutex_fast.h lk_alone): while the process has one thread,
 * lock and unlock use plain loads and stores instead of locked instructions. Checked: alone, a
 * lock leaves the word LOCKED (trylock then says EBUSY) and an unlock frees it; a mutex locked
 * alone holds off a thread created afterwards, which sleeps in the kernel futex on the word
 * with its waiter bit set and gets the lock at the unlock (now multi-threaded: the atomic path
 * that wakes it); a fork child of the multi-threaded process (glibc keeps it on the atomic
 * paths) locks and unlocks. Both paths store the same words, so a fast path that never
 * applied would pass too: what it saves is measured, not tested (locks/README.md).
 */
#define _GNU_SOURCE
#include <pvrt/mutex.h>

#include "lk_layout.h" /* white box: the mutex word */

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>

static pvrt_mutex_t m = PVRT_MUTEX_INITIALIZER;
static int got; /* under m */
static pid_t waiter_tid;

static uint32_t word(void)
{
	return __atomic_load_n(&lk_mutex_of(&m)->word, __ATOMIC_RELAXED);
}

static void *waiter(void *arg)
{
	(void)arg;
	__atomic_store_n(&waiter_tid, gettid(), __ATOMIC_RELEASE);
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	got++;
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	return NULL;
}

static bool sleeps_on_word(pid_t tid)
{
	return test_sleeps_in_futex((int)tid, &lk_mutex_of(&m)->word);
}

static void lock_unlock_alone(void)
{
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	CHECK_EQ(word(), LK_MUTEX_LOCKED);
	CHECK_EQ(pvrt_mutex_trylock(&m), -EBUSY);
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	CHECK_EQ(word(), 0);
	CHECK_EQ(pvrt_mutex_trylock(&m), 0);
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	CHECK_EQ(word(), 0);
}

int main(void)
{
	/* Sanitizer runtimes may start threads of their own: then the plain path is not taken
	 * and the checks below hold all the same. */
	printf("single-threaded at start: %d\n", (int)__libc_single_threaded);
	lock_unlock_alone();

	/* Locked alone, then a thread: it must find the lock held and sleep on it. */
	CHECK_EQ(pvrt_mutex_lock(&m), 0);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, waiter, NULL), 0);
	CHECK(!__libc_single_threaded);
	pid_t tid;
	while (!(tid = __atomic_load_n(&waiter_tid, __ATOMIC_ACQUIRE)))
		sched_yield();
	while (!sleeps_on_word(tid))
		usleep(1000);
	CHECK_EQ(word(), LK_MUTEX_LOCKED | LK_MUTEX_KWAITERS);
	CHECK_EQ(got, 0);
	CHECK_EQ(pvrt_mutex_unlock(&m), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(got, 1);
	CHECK_EQ(word(), 0);

	/* A fork child has one thread again. */
	pid_t c = fork();
	CHECK(c >= 0);
	if (c == 0) {
		lock_unlock_alone();
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(c, &st, 0), c);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	lock_unlock_alone();
	printf("mutex alone ok\n");
	return 0;
}
