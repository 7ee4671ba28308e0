/* SPDX-License-Identifier: MIT */
/*
 * bench_ult: pvrt ULT costs beside Boost.Fiber's (boost_fiber.cc), in one run.
 *
 *   BM_create_join/pvrt    create a ULT and join it, one worker
 *   BM_create_join_batch/pvrt/N  create N ULTs, then join all N, one worker; time per ULT
 *                          (a program starting N threads at once: stacks must not fall off a cache)
 *   BM_yield/pvrt          two ULTs ping-pong with yield on one worker; time per yield
 *   BM_create_join/pvrt_tls, BM_yield/pvrt_tls: the same, each ULT with its own glibc TLS
 *   BM_wake_latency/...    waker's store+wake to the wakee running, manual time (median is the
 *                          figure): a ULT on a parked worker (poll off), the same with
 *                          halt-polling on, and a bare futex between two pthreads
 *   BM_idle_cpu/pvrt       CPU seconds used by an idle runtime over 2 s (getrusage)
 *   BM_timer_arms/...      64 ULTs sleeping in a loop: timer arms per 1000 sleeps, lazy vs eager
 *
 * Each pvrt benchmark starts the runtime it needs (pvrt_init) and stops it when done.
 * Run: build/bench/runtime/bench_ult --benchmark_repetitions=5 --benchmark_report_aggregates_only
 */
#define _GNU_SOURCE
#include "pvrt_bench.h"
#include "pvrt_os.h"

#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The futex primitive of libpvrt (internal, hidden): the benchmark uses the public wrappers. */
void boost_fiber_register(void);

/* Set by the *_tls variants: every ULT gets its own glibc TLS (M:N mode's per-ULT TLS). */
static int bench_tls;

static int start(pvrt_bench_state *st, unsigned workers, uint64_t poll_max, const char *timer)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.ult_tls = bench_tls;
	c.workers = workers;
	c.poll_max_ns = poll_max;
	c.timer = timer;
	int r = pvrt_init(&c);
	if (r) {
		pvrt_bench_skip(st, pvrt_errmsg());
		return r;
	}
	return 0;
}

static void *nop(void *a)
{
	return a;
}

static void BM_create_join(pvrt_bench_state *st)
{
	if (start(st, 1, 0, NULL))
		return;
	pvrt_thread_t t;
	while (pvrt_bench_keep_running_batch(st, 1000))
		for (int i = 0; i < 1000; i++) {
			pvrt_thread_create(&t, NULL, nop, NULL);
			pvrt_thread_join(t, NULL);
		}
	pvrt_finalize();
}

/* Create n ULTs, then join all n. */
static void batch(pvrt_thread_t *t, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		pvrt_thread_create(&t[i], NULL, nop, NULL);
	for (int64_t i = 0; i < n; i++)
		pvrt_thread_join(t[i], NULL);
}

static void BM_create_join_batch(pvrt_bench_state *st)
{
	const int64_t n = pvrt_bench_arg(st, 0);
	pvrt_thread_t *t = malloc((size_t)n * sizeof(*t));
	if (!t || start(st, 1, 0, NULL)) {
		free(t);
		return;
	}
	/* One untimed batch first: a short run (tools/bench-report --quick) times a single batch
	 * of the large sizes, whose first one maps and faults in every stack (5.6 us per ULT at
	 * 10,000 instead of 62 ns). The peers' figures are best of many rounds, warm too. */
	batch(t, n);
	while (pvrt_bench_keep_running_batch(st, n))
		batch(t, n);
	pvrt_finalize();
	free(t);
}

static void *yield_loop(void *a)
{
	long n = (long)(intptr_t)a;
	for (long i = 0; i < n; i++)
		pvrt_thread_yield();
	return NULL;
}

static void BM_yield(pvrt_bench_state *st)
{
	if (start(st, 1, 0, NULL))
		return;
	const long k = 100000;
	pvrt_thread_t a, b;
	/* One batch = 2k yields (k per ULT); create/join of the pair is amortised over them. */
	while (pvrt_bench_keep_running_batch(st, 2 * k)) {
		pvrt_thread_create(&a, NULL, yield_loop, (void *)(intptr_t)k);
		pvrt_thread_create(&b, NULL, yield_loop, (void *)(intptr_t)k);
		pvrt_thread_join(a, NULL);
		pvrt_thread_join(b, NULL);
	}
	pvrt_finalize();
}

static void BM_create_join_tls(pvrt_bench_state *st)
{
	bench_tls = 1;
	BM_create_join(st);
	bench_tls = 0;
}

static void BM_yield_tls(pvrt_bench_state *st)
{
	bench_tls = 1;
	BM_yield(st);
	bench_tls = 0;
}

/* ---- wake latency ---- */

static uint32_t wl_word;
static volatile uint64_t wl_t1;
static volatile int wl_stop;

int pvrt_bench_futex_wait(uint32_t *addr, uint32_t expected);
int pvrt_bench_futex_wake(uint32_t *addr);

static void *wl_waiter(void *a)
{
	(void)a;
	uint32_t seen = 0;
	while (!wl_stop) {
		while (__atomic_load_n(&wl_word, __ATOMIC_ACQUIRE) == seen)
			pvrt_bench_futex_wait(&wl_word, seen);
		wl_t1 = os_now_ns();
		seen = __atomic_load_n(&wl_word, __ATOMIC_ACQUIRE);
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Report the median of the samples as a counter (the mean is what manual time shows). */
void pvrt_bench_median_us(pvrt_bench_state *st, uint64_t *ns, size_t n);
void pvrt_bench_median_us(pvrt_bench_state *st, uint64_t *ns, size_t n)
{
	if (!n)
		return;
	qsort(ns, n, sizeof(*ns), cmp_u64);
	pvrt_bench_counter(st, "median_us", (double)ns[n / 2] * 1e-3, PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "p90_us", (double)ns[n * 9 / 10] * 1e-3, PVRT_BENCH_COUNTER_VALUE);
}

#define WL_MAX 4096
static uint64_t wl_samples[WL_MAX];

static void wl_loop(pvrt_bench_state *st, int (*wake)(uint32_t *))
{
	size_t n = 0;
	while (pvrt_bench_keep_running(st)) {
		/* Let the waiter's worker (or thread) go idle and park (or poll) first. */
		struct timespec d = {0, 2000000};
		nanosleep(&d, NULL);
		wl_t1 = 0;
		uint64_t t0 = os_now_ns();
		__atomic_add_fetch(&wl_word, 1, __ATOMIC_RELEASE);
		wake(&wl_word);
		while (!wl_t1)
			;
		pvrt_bench_set_iteration_time(st, (double)(wl_t1 - t0) * 1e-9);
		if (n < WL_MAX)
			wl_samples[n++] = wl_t1 - t0;
	}
	pvrt_bench_median_us(st, wl_samples, n);
}

static void BM_wake_latency_pvrt(pvrt_bench_state *st)
{
	/* Arg 0: poll window in ns (0: park at once). Needs 2 workers: the waiter is bound to 1. */
	if (start(st, 2, (uint64_t)pvrt_bench_arg(st, 0), NULL))
		return;
	if (pvrt_nworkers() < 2) {
		pvrt_finalize();
		pvrt_bench_skip(st, "needs 2 workers");
		return;
	}
	wl_stop = 0;
	wl_word = 0;
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.worker = 1;
	pvrt_thread_t t;
	pvrt_thread_create(&t, &a, wl_waiter, NULL);
	wl_loop(st, pvrt_bench_futex_wake);
	wl_stop = 1;
	__atomic_add_fetch(&wl_word, 1, __ATOMIC_RELEASE);
	pvrt_bench_futex_wake(&wl_word);
	pvrt_thread_join(t, NULL);
	pvrt_finalize();
}

static int kwake(uint32_t *w)
{
	return os_futex_wake(w, 1);
}

static void pin(int cpu)
{
	cpu_set_t cs;
	CPU_ZERO(&cs);
	CPU_SET(cpu, &cs);
	pthread_setaffinity_np(pthread_self(), sizeof(cs), &cs);
}

static void *kwaiter(void *a)
{
	if (a)
		pin(1);
	uint32_t seen = 0;
	while (!wl_stop) {
		while (__atomic_load_n(&wl_word, __ATOMIC_ACQUIRE) == seen)
			os_futex_wait(&wl_word, seen, NULL);
		wl_t1 = os_now_ns();
		seen = __atomic_load_n(&wl_word, __ATOMIC_ACQUIRE);
	}
	return NULL;
}

static void BM_wake_latency_futex(pvrt_bench_state *st)
{
	/* Arg 0: 1 = pin waker and waiter to CPUs 0 and 1, as pvrt's workers are. */
	int pinned = (int)pvrt_bench_arg(st, 0);
	cpu_set_t old;
	pthread_getaffinity_np(pthread_self(), sizeof(old), &old);
	if (pinned) {
		if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
			pvrt_bench_skip(st, "needs 2 CPUs");
			return;
		}
		pin(0);
	}
	wl_stop = 0;
	wl_word = 0;
	pthread_t th;
	pthread_create(&th, NULL, kwaiter, (void *)(intptr_t)pinned);
	wl_loop(st, kwake);
	wl_stop = 1;
	__atomic_add_fetch(&wl_word, 1, __ATOMIC_RELEASE);
	kwake(&wl_word);
	pthread_join(th, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
}

/* ---- idle CPU ---- */

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void BM_idle_cpu(pvrt_bench_state *st)
{
	if (start(st, 0, 0, NULL)) /* every CPU of the mask, default polling */
		return;
	double cpu = 0;
	while (pvrt_bench_keep_running(st)) {
		pvrt_thread_sleep(100000000); /* let the workers settle into their idle state */
		double c0 = cpu_seconds();
		pvrt_thread_sleep(2000000000ull);
		cpu += cpu_seconds() - c0;
	}
	pvrt_bench_counter(st, "cpu_s_per_2s", cpu, PVRT_BENCH_COUNTER_PER_ITER);
	pvrt_bench_counter(st, "workers", pvrt_nworkers(), PVRT_BENCH_COUNTER_VALUE);
	pvrt_finalize();
}

/* ---- timer arms ---- */

static void *sleep_loop(void *a)
{
	unsigned seed = (unsigned)(uintptr_t)a;
	for (int i = 0; i < 100; i++)
		pvrt_thread_sleep(20000 + (uint64_t)(rand_r(&seed) % 80000));
	return NULL;
}

static void BM_timer_arms(pvrt_bench_state *st)
{
	const char *mode = pvrt_bench_arg(st, 0) ? "eager" : "lazy";
	if (start(st, 1, 0, mode))
		return;
	pvrt_bench_set_label(st, mode);
	struct pvrt_stats s0, s1;
	uint64_t sleeps = 0;
	pvrt_stats_get(&s0);
	while (pvrt_bench_keep_running(st)) {
		pvrt_thread_t t[64];
		for (int i = 0; i < 64; i++)
			pvrt_thread_create(&t[i], NULL, sleep_loop, (void *)(uintptr_t)(i + 1));
		for (int i = 0; i < 64; i++)
			pvrt_thread_join(t[i], NULL);
		sleeps += 64 * 100;
	}
	pvrt_stats_get(&s1);
	pvrt_bench_counter(st, "arms_per_1000_sleeps",
			   1000.0 * (double)(s1.timer_arms - s0.timer_arms) / (double)sleeps,
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "fires_per_1000_sleeps",
			   1000.0 * (double)(s1.timer_fires - s0.timer_fires) / (double)sleeps,
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_finalize();
}

int main(int argc, char **argv)
{
	/* Fixed placement: the benchmark runtimes pick their own worker counts. */
	unsetenv("PVRT_WORKERS");
	pvrt_bench_unit_ns(pvrt_bench_register("BM_create_join/pvrt", BM_create_join));
	static const int64_t batch[] = {1, 16, 17, 64, 1000, 10000};
	for (size_t i = 0; i < sizeof(batch) / sizeof(batch[0]); i++)
		pvrt_bench_unit_ns(pvrt_bench_args(
		    pvrt_bench_register("BM_create_join_batch/pvrt", BM_create_join_batch), 1,
		    &batch[i]));
	pvrt_bench_unit_ns(pvrt_bench_register("BM_yield/pvrt", BM_yield));
	pvrt_bench_unit_ns(pvrt_bench_register("BM_create_join/pvrt_tls", BM_create_join_tls));
	pvrt_bench_unit_ns(pvrt_bench_register("BM_yield/pvrt_tls", BM_yield_tls));
	pvrt_bench *b = pvrt_bench_register("BM_wake_latency/pvrt_parked", BM_wake_latency_pvrt);
	pvrt_bench_args(b, 1, (int64_t[]){0});
	pvrt_bench_unit_us(pvrt_bench_manual_time(pvrt_bench_iterations(b, 300)));
	b = pvrt_bench_register("BM_wake_latency/pvrt_polling", BM_wake_latency_pvrt);
	pvrt_bench_args(b, 1, (int64_t[]){5000000});
	pvrt_bench_unit_us(pvrt_bench_manual_time(pvrt_bench_iterations(b, 300)));
	b = pvrt_bench_register("BM_wake_latency/futex", BM_wake_latency_futex);
	pvrt_bench_args(b, 1, (int64_t[]){0});
	pvrt_bench_unit_us(pvrt_bench_manual_time(pvrt_bench_iterations(b, 300)));
	b = pvrt_bench_register("BM_wake_latency/futex_pinned", BM_wake_latency_futex);
	pvrt_bench_args(b, 1, (int64_t[]){1});
	pvrt_bench_unit_us(pvrt_bench_manual_time(pvrt_bench_iterations(b, 300)));
	b = pvrt_bench_register("BM_idle_cpu/pvrt", BM_idle_cpu);
	pvrt_bench_unit_ns(pvrt_bench_iterations(b, 1));
	b = pvrt_bench_register("BM_timer_arms/pvrt", BM_timer_arms);
	pvrt_bench_args(b, 1, (int64_t[]){0});
	pvrt_bench_iterations(b, 3);
	b = pvrt_bench_register("BM_timer_arms/pvrt", BM_timer_arms);
	pvrt_bench_args(b, 1, (int64_t[]){1});
	pvrt_bench_iterations(b, 3);
	boost_fiber_register();
	return pvrt_bench_main(argc, argv);
}
