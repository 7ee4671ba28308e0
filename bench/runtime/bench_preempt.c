/* SPDX-License-Identifier: MIT */
/*
 * Costs of preemption and hand-off (runtime/preempt.c, sysmon.c), one worker:
 *   handoff   time from a ULT blocking in read() to the next ULT of its worker running
 *             (default PVRT_HANDOFF_NS, and 100 us), medians and 90th percentiles
 *   preempt   time from a ULT starting to spin to the next ULT running (default slice)
 *   cost      CPU time of two CPU-bound ULTs with a 100 us slice vs preemption off, in
 *             interleaved rounds: the extra CPU time per preemption
 * Usage: bench_preempt [ROUNDS]
 */
#define _GNU_SOURCE
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void init1(int64_t slice, int64_t handoff)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 1;
	c.slice_ns = slice;
	c.handoff_ns = handoff;
	if (pvrt_init(&c)) {
		fprintf(stderr, "bench_preempt: pvrt_init: %s\n", pvrt_errmsg());
		exit(1);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	printf("%-36s median %8.1f us   p90 %8.1f us   (%d rounds)\n", what, v[n / 2] / 1e3,
	       v[n * 9 / 10] / 1e3, n);
}

static pvrt_thread_t spawn0(void *(*fn)(void *), void *arg)
{
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.worker = 0;
	pvrt_thread_t t;
	if (pvrt_thread_create(&t, &a, fn, arg))
		exit(1);
	return t;
}

/* ---- hand-off: the blocker reads a pipe that the next ULT writes */
static int fds[2];
static uint64_t t_block, t_next;
static volatile int go_flag, spinning;

static void *blocker(void *a)
{
	(void)a;
	char c;
	t_block = now_ns();
	if (read(fds[0], &c, 1) != 1)
		exit(1);
	return NULL;
}

static void *next_ult(void *a)
{
	(void)a;
	t_next = now_ns();
	go_flag = 1;
	if (write(fds[1], "x", 1) != 1)
		exit(1);
	return NULL;
}

static void bench_handoff(int rounds, int64_t handoff, const char *what)
{
	uint64_t *v = calloc((size_t)rounds, sizeof(*v));
	init1(-1, handoff);
	if (pipe(fds))
		exit(1);
	for (int i = 0; i < rounds; i++) {
		pvrt_thread_t a = spawn0(blocker, NULL), b = spawn0(next_ult, NULL);
		pvrt_thread_join(a, NULL);
		pvrt_thread_join(b, NULL);
		v[i] = t_next - t_block;
	}
	close(fds[0]), close(fds[1]);
	pvrt_finalize();
	report(what, v, rounds);
	free(v);
}

/* ---- preemption latency: the spinner spins until the next ULT ran */
static void *spinner(void *a)
{
	(void)a;
	t_block = now_ns();
	spinning = 1;
	while (!go_flag)
		;
	return NULL;
}

static void *next_plain(void *a)
{
	(void)a;
	t_next = now_ns();
	go_flag = 1;
	return NULL;
}

static void bench_preempt(int rounds)
{
	uint64_t *v = calloc((size_t)rounds, sizeof(*v));
	init1(0, -1);
	for (int i = 0; i < rounds; i++) {
		go_flag = spinning = 0;
		pvrt_thread_t a = spawn0(spinner, NULL);
		while (!spinning)
			pvrt_thread_yield();
		t_block = now_ns(); /* the primary ran: the spinner was preempted once already */
		pvrt_thread_t b = spawn0(next_plain, NULL);
		pvrt_thread_join(a, NULL);
		pvrt_thread_join(b, NULL);
		v[i] = t_next - t_block;
	}
	pvrt_finalize();
	report("preemption latency (default slice)", v, rounds);
	free(v);
}

/* ---- preemption cost */
static volatile uint64_t sink;
static void *burn(void *a)
{
	uint64_t x = (uintptr_t)a;
	for (long i = 0; i < 200000000; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
	return NULL;
}

static double run_burn(int64_t slice, uint64_t *npre)
{
	init1(slice, -1);
	double c0 = cpu_s();
	pvrt_thread_t a = spawn0(burn, (void *)1), b = spawn0(burn, (void *)2);
	pvrt_thread_join(a, NULL);
	pvrt_thread_join(b, NULL);
	double c = cpu_s() - c0;
	struct pvrt_stats s;
	pvrt_stats_get(&s);
	*npre = s.preemptions;
	pvrt_finalize();
	return c;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 30;
	if (rounds < 1)
		rounds = 1;
	bench_handoff(rounds, 0, "hand-off latency (default 1 ms)");
	bench_handoff(rounds, 100000, "hand-off latency (100 us)");
	bench_preempt(rounds > 10 ? 10 : rounds);
	double on[3], off[3];
	uint64_t n[3], z;
	for (int i = 0; i < 3; i++) {
		on[i] = run_burn(100000, &n[i]);
		off[i] = run_burn(-1, &z);
	}
	for (int i = 0; i < 3; i++)
		printf("cost round %d: %.3f s CPU with a 100 us slice (%llu preemptions), %.3f s "
		       "without: %.2f us per preemption\n",
		       i, on[i], (unsigned long long)n[i], off[i],
		       n[i] ? (on[i] - off[i]) / (double)n[i] * 1e6 : 0.0);
	return 0;
}
