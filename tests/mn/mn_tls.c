/* SPDX-License-Identifier: MIT */
/*
 * __thread variables and errno are each thread's own under pvrt-run --mn, across yields and
 * across waits after which a ULT may resume on another worker (it is woken by threads on other
 * workers); malloc, stdio and strerror (glibc's per-thread state) work in every thread. A
 * ULT keeps owning an error-checking mutex it holds across such a wait (the locks name their
 * caller wherever it runs).
 */
#include "mn_check.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <string.h>

#define N      32
#define ROUNDS 200

static __thread long tv = 11;
static __thread char tname[32];
static sem_t ring[N];
static pthread_mutex_t own[N];
static int moved;

static void *body(void *arg)
{
	long id = (long)(intptr_t)arg;
	CHECK_EQ(tv, 11);
	tv = id;
	snprintf(tname, sizeof(tname), "thread-%ld", id);
	int cpu = sched_getcpu();
	for (int r = 0; r < ROUNDS; r++) {
		mn_tid_seen();
		errno = (int)(id * 1000 + r);
		CHECK_EQ(pthread_mutex_lock(&own[id]), 0);
		/* A token ring: wait for our predecessor, pass on to the successor. */
		CHECK_EQ(sem_wait(&ring[id]), 0);
		CHECK_EQ(errno, id * 1000 + r); /* sem_wait succeeded: errno untouched */
		/* Still the owner, wherever we resumed; the successor's mutex is not ours. */
		CHECK_EQ(pthread_mutex_lock(&own[id]), EDEADLK);
		CHECK_EQ(pthread_mutex_unlock(&own[(id + 1) % N]), EPERM);
		CHECK_EQ(pthread_mutex_unlock(&own[id]), 0);
		errno = (int)(id * 1000 + r);
		CHECK_EQ(sem_post(&ring[(id + 1) % N]), 0);
		sched_yield();
		CHECK_EQ(errno, id * 1000 + r);
		CHECK_EQ(tv, id);
		char want[32];
		snprintf(want, sizeof(want), "thread-%ld", id);
		CHECK(strcmp(tname, want) == 0);
		char *p = malloc((size_t)(r + 1) * 8);
		CHECK(p != NULL);
		memset(p, (int)id, (size_t)(r + 1) * 8);
		free(p);
		int c = sched_getcpu();
		if (c != cpu)
			__atomic_add_fetch(&moved, 1, __ATOMIC_RELAXED);
		cpu = c;
	}
	CHECK(strlen(strerror(EINVAL)) > 0);
	return (void *)(intptr_t)tv;
}

int main(void)
{
	pthread_mutexattr_t a;
	CHECK_EQ(pthread_mutexattr_init(&a), 0);
	CHECK_EQ(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK), 0);
	for (int i = 0; i < N; i++) {
		CHECK_EQ(sem_init(&ring[i], 0, i == 0), 0);
		CHECK_EQ(pthread_mutex_init(&own[i], &a), 0);
	}
	tv = -1;
	pthread_t t[N];
	for (long i = 0; i < N; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, body, (void *)(intptr_t)i), 0);
	for (long i = 0; i < N; i++) {
		void *r;
		CHECK_EQ(pthread_join(t[i], &r), 0);
		CHECK_EQ((long)(intptr_t)r, i);
	}
	CHECK_EQ(tv, -1);
	mn_check_ults(N);
	printf("mn_tls: ok (%d worker changes seen)\n", moved);
	return 0;
}
