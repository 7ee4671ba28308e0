/* SPDX-License-Identifier: MIT */
/*
 * pthread_create + pthread_join of a thread that returns at once, in a loop: a plain pthread
 * program, run natively (glibc's kernel threads) and under pvrt-run --mn (ULTs), e.g.
 *   build/bench/runtime/pthread_create_join 20000 5
 *   build/bin/pvrt-run --mn build/bench/runtime/pthread_create_join 20000 5
 * Prints, for each of ROUNDS rounds of N create+join pairs, ns per pair (wall and CPU of the
 * process), then the medians.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *nop(void *a)
{
	return a;
}

static double now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	if (n < 1 || rounds < 1 || rounds > 100) {
		fprintf(stderr, "usage: pthread_create_join [N [ROUNDS]]\n");
		return 2;
	}
	double wall[100], cpu[100];
	for (int r = 0; r < rounds; r++) {
		double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
		for (long i = 0; i < n; i++) {
			pthread_t t;
			if (pthread_create(&t, NULL, nop, NULL) || pthread_join(t, NULL)) {
				fprintf(stderr, "pthread_create/join failed\n");
				return 1;
			}
		}
		wall[r] = (now(CLOCK_MONOTONIC) - w0) / (double)n;
		cpu[r] = (now(CLOCK_PROCESS_CPUTIME_ID) - c0) / (double)n;
		printf("round %d: %.0f ns wall, %.0f ns CPU per create+join\n", r, wall[r], cpu[r]);
	}
	qsort(wall, (size_t)rounds, sizeof(double), cmp);
	qsort(cpu, (size_t)rounds, sizeof(double), cmp);
	printf("median: %.0f ns wall, %.0f ns CPU per create+join\n", wall[rounds / 2],
	       cpu[rounds / 2]);
	return 0;
}
