/* SPDX-License-Identifier: MIT */
/*
 * rt_futex for ULTs and foreign threads: value check, wake counts, timeouts on both clocks,
 * bad arguments, the hinted choice of whom to wake, and a no-lost-wake-up stress where ULTs and
 * threads pass a token around through one futex word each (a lost wake-up hangs the test; ctest's
 * timeout fails it).
 */
#define _GNU_SOURCE
#include "check.h"
#include "futex.h"
#include "pvrt_os.h"

#include <pvrt/thread.h>

#include <errno.h>
#include <limits.h>
#include <unistd.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static struct timespec in_ns(clockid_t c, uint64_t ns)
{
	uint64_t t = os_clock_ns(c) + ns;
	return (struct timespec){.tv_sec = (time_t)(t / 1000000000ull),
				 .tv_nsec = (long)(t % 1000000000ull)};
}

static void timeouts(void)
{
	uint32_t w = 0;
	clockid_t clocks[2] = {CLOCK_MONOTONIC, CLOCK_REALTIME};
	for (int i = 0; i < 2; i++) {
		uint64_t t0 = os_clock_ns(clocks[i]);
		struct timespec ts = in_ns(clocks[i], 2000000);
		CHECK_EQ(rt_futex_wait(&w, 0, clocks[i], &ts), -ETIMEDOUT);
		CHECK(os_clock_ns(clocks[i]) >= t0 + 2000000 - 1000);
		/* In the past: value checked first. */
		struct timespec past = {1, 0};
		CHECK_EQ(rt_futex_wait(&w, 0, clocks[i], &past), -ETIMEDOUT);
		CHECK_EQ(rt_futex_wait(&w, 1, clocks[i], &past), -EAGAIN);
		/* Before the epoch: POSIX makes it a valid time that has passed (only tv_nsec out
		 * of range is EINVAL), although the kernel's futex rejects it. */
		struct timespec neg = {-1, 0}, neg_bad = {-1, -1};
		CHECK_EQ(rt_futex_wait(&w, 0, clocks[i], &neg), -ETIMEDOUT);
		CHECK_EQ(rt_futex_wait(&w, 1, clocks[i], &neg), -EAGAIN);
		CHECK_EQ(rt_futex_wait(&w, 0, clocks[i], &neg_bad), -EINVAL);
	}
	CHECK_EQ(rt_futex_wait(&w, 1, CLOCK_MONOTONIC, NULL), -EAGAIN);
	struct timespec bad = {0, 1000000000L};
	CHECK_EQ(rt_futex_wait(&w, 0, CLOCK_MONOTONIC, &bad), -EINVAL);
	CHECK_EQ(rt_futex_wait(&w, 0, CLOCK_PROCESS_CPUTIME_ID, NULL), -EINVAL);
	CHECK_EQ(rt_futex_wake(&w, 0), 0);
	CHECK_EQ(rt_futex_wake(&w, 5), 0);
}

static void *ult_timeouts(void *a)
{
	(void)a;
	timeouts();
	return NULL;
}

static void *thread_timeouts(void *a)
{
	(void)a;
	timeouts();
	return NULL;
}

/* Waiters of both kinds on one word; wake counts. */
static uint32_t word;
static int woken;

static int far_timeouts; /* a deadline centuries away must never time out */

/* a != NULL: wait with such a deadline on CLOCK_REALTIME (it must not wrap into the past). */
static void *waiter(void *a)
{
	/* Year 2554: past 2^64 ns, so a naive tv_sec * 1e9 wraps to 0.29 s after the epoch. */
	static const struct timespec far = {.tv_sec = 18446744074};
	while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0) {
		if (rt_futex_wait(&word, 0, a ? CLOCK_REALTIME : CLOCK_MONOTONIC,
				  a ? &far : NULL) == -ETIMEDOUT) {
			__atomic_add_fetch(&far_timeouts, 1, __ATOMIC_RELAXED);
			return NULL; /* retrying at once, a ULT would starve its worker */
		}
	}
	__atomic_add_fetch(&woken, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* Token ring: N participants (ULTs and threads), participant i waits for turn == i. */
#define RING 6
#define LAPS 3000
static uint32_t turn;

static void *ring_member(void *a)
{
	uint32_t me = (uint32_t)(uintptr_t)a;
	for (int lap = 0; lap < LAPS; lap++) {
		uint32_t t;
		while ((t = __atomic_load_n(&turn, __ATOMIC_ACQUIRE)) % RING != me)
			rt_futex_wait(&turn, t, CLOCK_MONOTONIC, NULL);
		__atomic_store_n(&turn, t + 1, __ATOMIC_RELEASE);
		rt_futex_wake(&turn, INT_MAX);
	}
	return NULL;
}

/* Join a pthread from the primary ULT without blocking worker 0 in the kernel. */
static void join_thread(pthread_t t)
{
	while (pthread_tryjoin_np(t, NULL))
		pvrt_thread_sleep(100000);
}

/*
 * fork() while a thread waits: the child must not inherit the parent's waiter records, or its
 * wake-up goes to a thread that does not exist there and its own waiter sleeps on.
 */
static uint32_t fork_word, child_ready;

#ifdef PVRT_TSAN
#define PVRT_TSAN_BUILD 1
#else
#define PVRT_TSAN_BUILD 0
#endif

static void *fork_waiter(void *a)
{
	while (__atomic_load_n(&fork_word, __ATOMIC_ACQUIRE) == 0)
		rt_futex_wait(&fork_word, 0, CLOCK_MONOTONIC, NULL);
	return a;
}

static void *child_waiter(void *a)
{
	(void)a;
	struct timespec dl = in_ns(CLOCK_MONOTONIC, 5000000000ull);
	__atomic_store_n(&child_ready, 1, __ATOMIC_RELEASE);
	int r = rt_futex_wait(&fork_word, 0, CLOCK_MONOTONIC, &dl);
	return (void *)(intptr_t)r;
}

static void fork_with_waiter(void)
{
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, fork_waiter, NULL), 0);
	usleep(50000); /* let it queue */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* A fresh thread on a big stack, so its record cannot land on the old one's. */
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setstacksize(&at, 32u << 20);
		pthread_t c;
		void *r;
		if (pthread_create(&c, &at, child_waiter, NULL))
			_exit(2);
		while (!__atomic_load_n(&child_ready, __ATOMIC_ACQUIRE))
			usleep(1000);
		usleep(100000); /* let it queue */
		rt_futex_wake(&fork_word, 1);
		pthread_join(c, &r);
		_exit(r == NULL ? 0 : 1); /* 0: woken, not timed out */
	}
	int status;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	__atomic_store_n(&fork_word, 1, __ATOMIC_RELEASE);
	rt_futex_wake(&fork_word, INT_MAX);
	CHECK_EQ(pthread_join(t, NULL), 0);
}

/* ---- rt_futex_wake_hinted: which waiter goes first, and the skip bound ---- */
static struct pvhint_record hrec[4];
static pvhint_t hpage = {.rec = hrec, .nr = 4};
static uint32_t hword;
static int hwoke = -1; /* the id of the waiter woken last; one wake-up at a time */

struct hwaiter {
	int id, vcpu;
	pthread_t th;
};

static void *hinted_waiter(void *p)
{
	struct hwaiter *a = p;
	pvhint_tls_vcpu = a->vcpu; /* the vCPU the waiter records (as if attached to it) */
	CHECK_EQ(rt_futex_wait(&hword, 0, CLOCK_MONOTONIC, NULL), 0);
	pvhint_tls_vcpu = -1;
	/* Relaxed: the waker joins us before it reuses anything. */
	__atomic_store_n(&hwoke, a->id, __ATOMIC_RELAXED);
	return NULL;
}

static void hqueue(struct hwaiter *a, int id, int vcpu)
{
	int before = rt_futex_nr_waiters(&hword);
	a->id = id;
	a->vcpu = vcpu;
	CHECK_EQ(pthread_create(&a->th, NULL, hinted_waiter, a), 0);
	while (rt_futex_nr_waiters(&hword) == before)
		usleep(100);
}

/* Wake one with the hints and return who woke. */
static int hwake(struct hwaiter *all, int n)
{
	CHECK_EQ(rt_futex_wake_hinted(&hword, &hpage), 1);
	int id;
	while ((id = __atomic_load_n(&hwoke, __ATOMIC_RELAXED)) < 0)
		usleep(100);
	__atomic_store_n(&hwoke, -1, __ATOMIC_RELAXED);
	for (int i = 0; i < n; i++)
		if (all[i].id == id)
			CHECK_EQ(pthread_join(all[i].th, NULL), 0);
	return id;
}

static void hinted_wake(void)
{
	struct hwaiter w[8];
	hrec[0].preempted = PVHINT_PREEMPTED; /* vCPU 0 cannot run */
	hrec[2].is_idle = 1;		      /* vCPU 2's physical CPU is idle: runs at once */
	hpage.valid = PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE;

	/* Queued A(0) B(1) C(2) D(3): idle first, then the oldest not preempted, then the rest. */
	for (int i = 0; i < 4; i++)
		hqueue(&w[i], i, i);
	CHECK_EQ(hwake(w, 4), 2);
	CHECK_EQ(hwake(w, 4), 1);
	CHECK_EQ(hwake(w, 4), 3);
	CHECK_EQ(hwake(w, 4), 0);
	CHECK_EQ(rt_futex_wake_hinted(&hword, &hpage), 0); /* nobody left */

	/* The bound: a waiter on a preempted vCPU is passed over RT_WAKE_MAX_SKIPS times, then
	 * goes first although a runnable waiter is queued behind it. */
	hqueue(&w[0], 10, 0);
	for (int r = 0; r < RT_WAKE_MAX_SKIPS; r++) {
		hqueue(&w[1], 11 + r, 1);
		CHECK_EQ(hwake(w, 2), 11 + r);
	}
	hqueue(&w[1], 20, 1);
	CHECK_EQ(hwake(w, 2), 10);
	CHECK_EQ(hwake(w, 2), 20);

	/* The choice looks at the RT_WAKE_PICK_SCAN oldest only: behind 8 waiters on a
	 * preempted vCPU, one on an idle pCPU is not preferred; the oldest goes first. */
	struct hwaiter many[RT_WAKE_PICK_SCAN + 1];
	for (int i = 0; i < RT_WAKE_PICK_SCAN; i++)
		hqueue(&many[i], 40 + i, 0);
	hqueue(&many[RT_WAKE_PICK_SCAN], 60, 2);
	CHECK_EQ(hwake(many, RT_WAKE_PICK_SCAN + 1), 40);
	for (int i = 1; i < RT_WAKE_PICK_SCAN; i++) /* now within reach: it goes first */
		CHECK_EQ(hwake(many, RT_WAKE_PICK_SCAN + 1), i == 1 ? 60 : 40 + i - 1);
	CHECK_EQ(hwake(many, RT_WAKE_PICK_SCAN + 1), 40 + RT_WAKE_PICK_SCAN - 1);

	/* Without preemption or idle hints: plain FIFO. */
	hpage.valid = 0;
	hqueue(&w[0], 30, 0);
	hqueue(&w[1], 31, 2);
	CHECK_EQ(hwake(w, 2), 30);
	CHECK_EQ(hwake(w, 2), 31);
}

int main(void)
{
	hinted_wake();
	/* Without the runtime: plain threads. */
	timeouts();
	/* TSan does not support threads in a child of a multi-threaded fork. */
	if (!PVRT_TSAN_BUILD)
		fork_with_waiter();
	CHECK_EQ(pvrt_init(NULL), 0);
	timeouts(); /* the primary ULT */
	pvrt_thread_t t;
	CHECK_EQ(pvrt_thread_create(&t, NULL, ult_timeouts, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, thread_timeouts, NULL), 0);
	join_thread(th);

	/* 8 ULT waiters and 2 thread waiters; wake 3, then the rest. */
	pvrt_thread_t u[8];
	pthread_t p[2];
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pvrt_thread_create(&u[i], NULL, waiter, i % 2 ? &word : NULL), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&p[i], NULL, waiter, i % 2 ? &word : NULL), 0);
	/* Wake-ups before the value changes are spurious: waiters re-check and wait again. */
	for (int i = 0; i < 50; i++) {
		rt_futex_wake(&word, 3);
		pvrt_thread_yield();
	}
	CHECK_EQ(__atomic_load_n(&woken, __ATOMIC_RELAXED), 0);
	__atomic_store_n(&word, 1, __ATOMIC_RELEASE);
	rt_futex_wake(&word, INT_MAX);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(pvrt_thread_join(u[i], NULL), 0);
	for (int i = 0; i < 2; i++)
		join_thread(p[i]);
	CHECK_EQ(far_timeouts, 0);
	CHECK_EQ(woken, 10);

	/* Token ring: 4 ULTs and 2 threads. */
	pvrt_thread_t ru[4];
	pthread_t rp[2];
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pvrt_thread_create(&ru[i], NULL, ring_member, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&rp[i], NULL, ring_member, (void *)(uintptr_t)(4 + i)), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pvrt_thread_join(ru[i], NULL), 0);
	for (int i = 0; i < 2; i++)
		join_thread(rp[i]);
	CHECK_EQ(turn, RING * LAPS);
	CHECK_EQ(pvrt_finalize(), 0);
	printf("ok\n");
	return 0;
}
