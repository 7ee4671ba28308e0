/* SPDX-License-Identifier: MIT */
/* ULT-local keys: per-ULT values, destructors at exit (repeated rounds), deleted keys,
 * foreign threads, bad keys. */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/key.h>
#include <pvrt/thread.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

static pvrt_key_t k1, k2;
static int dtor1_calls, dtor2_calls;

static void dtor1(void *v)
{
	CHECK(v != NULL);
	__atomic_add_fetch(&dtor1_calls, 1, __ATOMIC_RELAXED);
}

/* Sets k2 again once: the destructor loop must run another round. */
static void dtor2(void *v)
{
	__atomic_add_fetch(&dtor2_calls, 1, __ATOMIC_RELAXED);
	if ((uintptr_t)v == 1)
		pvrt_key_set(k2, (void *)2);
}

static void *user(void *a)
{
	CHECK(pvrt_key_get(k1) == NULL);
	CHECK_EQ(pvrt_key_set(k1, a), 0);
	pvrt_thread_yield();
	CHECK(pvrt_key_get(k1) == a); /* not overwritten by the others */
	CHECK_EQ(pvrt_key_set(k2, (void *)1), 0);
	return NULL;
}

static void *thread_user(void *a)
{
	CHECK(pvrt_key_get(k1) == NULL);
	CHECK_EQ(pvrt_key_set(k1, a), 0);
	CHECK(pvrt_key_get(k1) == a);
	return NULL;
}

int main(void)
{
	CHECK_EQ(pvrt_init(NULL), 0);
	CHECK_EQ(pvrt_key_create(&k1, dtor1), 0);
	CHECK_EQ(pvrt_key_create(&k2, dtor2), 0);
	CHECK(k1 != k2);
	pvrt_thread_t t[10];
	for (int i = 0; i < 10; i++)
		CHECK_EQ(pvrt_thread_create(&t[i], NULL, user, (void *)(uintptr_t)(i + 100)), 0);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	CHECK_EQ(dtor1_calls, 10);
	CHECK_EQ(dtor2_calls, 20); /* value 1, then value 2 in the second round */

	/* Foreign thread: its own values, destructor at thread exit. */
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, thread_user, (void *)7), 0);
	while (pthread_tryjoin_np(th, NULL))
		pvrt_thread_sleep(100000);
	CHECK_EQ(dtor1_calls, 11);

	/* Deleted key: get NULL, set EINVAL; a new key in the same slot does not see old values. */
	CHECK_EQ(pvrt_key_set(k1, (void *)5), 0);
	CHECK_EQ(pvrt_key_delete(k1), 0);
	CHECK(pvrt_key_get(k1) == NULL);
	CHECK_EQ(pvrt_key_set(k1, (void *)5), -EINVAL);
	CHECK_EQ(pvrt_key_delete(k1), -EINVAL);
	pvrt_key_t k3;
	CHECK_EQ(pvrt_key_create(&k3, NULL), 0);
	CHECK(pvrt_key_get(k3) == NULL);
	CHECK_EQ(pvrt_key_set(0xdead00ffu, NULL), -EINVAL);
	CHECK(pvrt_key_get(0) == NULL);
	CHECK_EQ(pvrt_key_create(NULL, NULL), -EINVAL);

	/* Exhaustion. */
	pvrt_key_t ks[PVRT_KEYS_MAX];
	int n = 0;
	while (n < PVRT_KEYS_MAX && pvrt_key_create(&ks[n], NULL) == 0)
		n++;
	CHECK(n < PVRT_KEYS_MAX); /* k2 and k3 take two slots */
	CHECK_EQ(pvrt_key_create(&ks[0], NULL), -EAGAIN);
	for (int i = 0; i < n; i++)
		CHECK_EQ(pvrt_key_delete(ks[i]), 0);
	CHECK_EQ(pvrt_key_delete(k2), 0);
	CHECK_EQ(pvrt_key_delete(k3), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	printf("ok\n");
	return 0;
}
