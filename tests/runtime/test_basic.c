/* SPDX-License-Identifier: MIT */
/* ULT basics: create/join with values, detach, yield order, yield_to, self, exit, sleep, ids,
 * invalid arguments, finalize rules, init again after finalize. */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/thread.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static void *ret_arg(void *a)
{
	return a;
}

static int order[16], norder;

static void *yielder(void *a)
{
	for (int i = 0; i < 3; i++) {
		order[norder++] = (int)(intptr_t)a;
		pvrt_thread_yield();
	}
	return NULL;
}

static void *exiter(void *a)
{
	pvrt_thread_exit((char *)a + 1);
	return NULL; /* not reached */
}

static int detached_done;
static void *detached_fn(void *a)
{
	(void)a;
	pvrt_thread_yield();
	__atomic_add_fetch(&detached_done, 1, __ATOMIC_RELAXED);
	return NULL;
}

static pvrt_thread_t target;
static int ran_target;
static void *target_fn(void *a)
{
	(void)a;
	ran_target = 1;
	return NULL;
}

static void *self_fn(void *a)
{
	*(pvrt_thread_t *)a = pvrt_thread_self();
	CHECK(pvrt_worker_self() >= 0);
	CHECK_EQ(pvrt_thread_join(pvrt_thread_self(), NULL), -EDEADLK);
	return NULL;
}

static void *try_finalize(void *a)
{
	(void)a;
	return (void *)(intptr_t)pvrt_finalize();
}

/* Finalize waits for detached ULTs still running. */
static int late_done;
static void *late(void *a)
{
	(void)a;
	pvrt_thread_sleep(30000000);
	__atomic_store_n(&late_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *sleeper(void *a)
{
	uint64_t t0 = os_now_ns();
	CHECK_EQ(pvrt_thread_sleep((uint64_t)(uintptr_t)a), 0);
	/* A sleep never ends early (no upper bound checked: the machine is shared). */
	CHECK(os_now_ns() - t0 >= (uint64_t)(uintptr_t)a);
	return NULL;
}

int main(void)
{
	pvrt_thread_t t;
	/* Not running yet. */
	CHECK_EQ(pvrt_thread_create(&t, NULL, ret_arg, NULL), -ENXIO);
	CHECK_EQ(pvrt_finalize(), -ENXIO);
	CHECK(pvrt_thread_self() == NULL);

	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 1;
	CHECK_EQ(pvrt_init(&c), 0);
	CHECK_EQ(pvrt_init(&c), -EBUSY);
	CHECK_EQ(pvrt_nworkers(), 1);
	CHECK(pvrt_thread_self() != NULL);

	/* Values through join. */
	void *r = NULL;
	CHECK_EQ(pvrt_thread_create(&t, NULL, ret_arg, (void *)0x1234), 0);
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK(r == (void *)0x1234);
	CHECK_EQ(pvrt_thread_create(&t, NULL, exiter, (void *)0x10), 0);
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK(r == (void *)0x11);

	/* Round-robin yield order on one worker. */
	pvrt_thread_t y[3];
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pvrt_thread_create(&y[i], NULL, yielder, (void *)(intptr_t)i), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pvrt_thread_join(y[i], NULL), 0);
	CHECK_EQ(norder, 9);
	for (int i = 0; i < 9; i++)
		CHECK_EQ(order[i], i % 3);

	/* Detached ULTs finish before finalize returns; here we wait by yielding. */
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.detached = 1;
	for (int i = 0; i < 10; i++)
		CHECK_EQ(pvrt_thread_create(NULL, &a, detached_fn, NULL), 0);
	while (__atomic_load_n(&detached_done, __ATOMIC_RELAXED) < 10)
		pvrt_thread_yield();

	/* Detach after create. */
	CHECK_EQ(pvrt_thread_create(&t, NULL, ret_arg, NULL), 0);
	CHECK_EQ(pvrt_thread_detach(t), 0);

	/* yield_to runs the target now. */
	CHECK_EQ(pvrt_thread_create(&target, NULL, target_fn, NULL), 0);
	CHECK_EQ(pvrt_thread_yield_to(target), 0);
	CHECK_EQ(ran_target, 1);
	CHECK_EQ(pvrt_thread_join(target, NULL), 0);

	/* self, ids. */
	pvrt_thread_t seen = NULL;
	CHECK_EQ(pvrt_thread_create(&t, NULL, self_fn, &seen), 0);
	uint64_t id = pvrt_thread_id(t);
	CHECK(id != 0 && id != pvrt_thread_id(pvrt_thread_self()));
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	CHECK(seen == t);

	/* Sleeps, some concurrent. */
	pvrt_thread_t s[8];
	for (int i = 0; i < 8; i++)
		CHECK_EQ(
		    pvrt_thread_create(&s[i], NULL, sleeper, (void *)(uintptr_t)(100000 * (8 - i))),
		    0);
	CHECK_EQ(pvrt_thread_sleep(200000), 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pvrt_thread_join(s[i], NULL), 0);

	/* Invalid arguments. */
	CHECK_EQ(pvrt_thread_create(&t, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(pvrt_thread_create(NULL, NULL, ret_arg, NULL), -EINVAL);
	pvrt_thread_attr_init(&a);
	a.stack_size = 100;
	CHECK_EQ(pvrt_thread_create(&t, &a, ret_arg, NULL), -EINVAL);
	a.stack_size = 0;
	a.worker = 5;
	CHECK_EQ(pvrt_thread_create(&t, &a, ret_arg, NULL), -EINVAL);
	a.worker = -1;
	a.detached = 7;
	CHECK_EQ(pvrt_thread_create(&t, &a, ret_arg, NULL), -EINVAL);
	CHECK_EQ(pvrt_thread_join(NULL, NULL), -EINVAL);
	CHECK_EQ(pvrt_thread_join(pvrt_thread_self(), NULL), -EDEADLK);
	CHECK_EQ(pvrt_thread_detach(NULL), -EINVAL);
	CHECK_EQ(pvrt_thread_exit(NULL), -EPERM); /* the primary may not exit */
	CHECK_EQ(pvrt_thread_set_worker(0), -EPERM);
	CHECK_EQ(pvrt_stats_get(NULL), -EINVAL);

	/* 8 MiB stacks are cheap (lazily committed). */
	pvrt_thread_attr_init(&a);
	a.stack_size = 8u << 20;
	pvrt_thread_t big[32];
	for (int i = 0; i < 32; i++)
		CHECK_EQ(pvrt_thread_create(&big[i], &a, ret_arg, NULL), 0);
	for (int i = 0; i < 32; i++)
		CHECK_EQ(pvrt_thread_join(big[i], NULL), 0);

	struct pvrt_stats st;
	CHECK_EQ(pvrt_stats_get(&st), 0);
	CHECK(st.ults_created >= 58);

	/* Only the primary may finalize. */
	void *fr;
	CHECK_EQ(pvrt_thread_create(&t, NULL, try_finalize, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, &fr), 0);
	CHECK_EQ((intptr_t)fr, -EPERM);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, try_finalize, NULL), 0);
	while (pthread_tryjoin_np(th, &fr))
		pvrt_thread_yield();
	CHECK_EQ((intptr_t)fr, -EPERM);

	/* A detached ULT still sleeping, and an exited ULT never joined. */
	pvrt_thread_attr_init(&a);
	a.detached = 1;
	CHECK_EQ(pvrt_thread_create(NULL, &a, late, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&t, NULL, ret_arg, NULL), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	CHECK_EQ(__atomic_load_n(&late_done, __ATOMIC_ACQUIRE), 1);
	CHECK(pvrt_thread_self() == NULL);
	/* Again, with defaults. */
	CHECK_EQ(pvrt_init(NULL), 0);
	CHECK_EQ(pvrt_thread_create(&t, NULL, ret_arg, (void *)1), 0);
	CHECK_EQ(pvrt_thread_join(t, &r), 0);
	CHECK(r == (void *)1);
	CHECK_EQ(pvrt_finalize(), 0);
	printf("ok\n");
	return 0;
}
