// SPDX-License-Identifier: MIT
/*
 * idle_pingpong: the wake-up round trip between two CPUs that go idle in between, for the cost of
 * the host series' idle hook (host-patches/0001-0002) in L1 of the nested end-to-end test.
 *
 * Two threads, pinned on CPUs a and b, hand a token back and forth through futexes: each waits
 * in FUTEX_WAIT (its CPU goes idle: the hook's idle entry) until the other wakes it (the woken CPU
 * leaves idle: the hook's exit, then the wake-up). A round trip is two wake-ups of an idle CPU.
 * Prints one line: "pingpong <label> rounds N median_ns M p90_ns P" (times of CLOCK_MONOTONIC, on
 * TCG only good for ratios between runs of one boot).
 *
 * Usage: idle_pingpong LABEL [rounds, default 20000] [cpu a, default 0] [cpu b, default 1]
 *        idle_pingpong --valid   (in the idle L2: print the valid bits of /dev/pvhint's header)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic uint32_t turn; /* 0: a's turn, 1: b's turn */
static long rounds = 20000;
static uint64_t *rtt;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		exit(2);
	}
}

/* Wait until turn == me, sleeping in the kernel (no spinning: the CPU must go idle). */
static void wait_turn(uint32_t me)
{
	uint32_t t;

	while ((t = atomic_load(&turn)) != me)
		syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, t, NULL, NULL, 0);
}

static void give_turn(uint32_t to)
{
	atomic_store(&turn, to);
	syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static int cpu_b = 1;

static void *side_b(void *arg)
{
	(void)arg;
	pin(cpu_b);
	for (long i = 0; i < rounds; i++) {
		wait_turn(1);
		give_turn(0);
	}
	return NULL;
}

static int cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The header's valid bits (offset 20, include/pvrt/pvhint_abi.h): is_idle offered is bit 2. */
static int print_valid(void)
{
	int fd = open("/dev/pvhint", O_RDONLY);
	const uint32_t *h = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);

	if (h == MAP_FAILED) {
		printf("valid ? (/dev/pvhint: %s)\n", strerror(errno));
		return 1;
	}
	printf("valid %#x\n", h[5]);
	return 0;
}

int main(int argc, char **argv)
{
	const char *label = argc > 1 ? argv[1] : "run";

	if (!strcmp(label, "--valid"))
		return print_valid();
	int cpu_a = argc > 3 ? atoi(argv[3]) : 0;
	pthread_t t;

	if (argc > 2)
		rounds = atol(argv[2]);
	if (argc > 4)
		cpu_b = atoi(argv[4]);
	if (rounds < 10 || rounds > 10000000) {
		fprintf(stderr, "usage: %s LABEL [rounds 10..1e7] [cpu a] [cpu b]\n", argv[0]);
		return 2;
	}
	rtt = calloc((size_t)rounds, sizeof(*rtt));
	if (!rtt)
		return 2;
	pin(cpu_a);
	if (pthread_create(&t, NULL, side_b, NULL))
		return 2;
	for (long i = 0; i < rounds; i++) {
		uint64_t t0 = now_ns();

		give_turn(1);
		wait_turn(0);
		rtt[i] = now_ns() - t0;
	}
	pthread_join(t, NULL);
	qsort(rtt, (size_t)rounds, sizeof(*rtt), cmp);
	printf("pingpong %s rounds %ld median_ns %llu p90_ns %llu\n", label, rounds,
	       (unsigned long long)rtt[rounds / 2], (unsigned long long)rtt[rounds * 9 / 10]);
	return 0;
}
