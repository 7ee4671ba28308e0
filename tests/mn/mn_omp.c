/* SPDX-License-Identifier: MIT */
/*
 * libgomp's thread team in ULTs (pvrt-run --mn): a parallel for with a reduction, barriers,
 * critical sections, single, tasks with taskwait, and nested teams. libgomp's threads spin
 * (GOMP_SPINCOUNT) and then wait with raw futex system calls that pvrt never sees: the spin
 * needs time-slice preemption and the futex wait needs the hand-off of the blocked worker.
 * Every result is checked exactly; prints "mn_omp: ok THREADS".
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "mn_omp: %s:%d: %s\n", __FILE__, __LINE__, #c);            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static long fib(int n)
{
	if (n < 2)
		return n;
	long x, y;
#pragma omp task shared(x)
	x = fib(n - 1);
#pragma omp task shared(y)
	y = fib(n - 2);
#pragma omp taskwait
	return x + y;
}

int main(void)
{
	int nt = 0;
	for (int round = 0; round < 20; round++) {
		/* Reduction. */
		long sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(dynamic, 64)
		for (long i = 0; i < 100000; i++)
			sum += i % 1000;
		CHECK(sum == 100L * (999L * 1000 / 2));

		/* Barriers between phases: every thread sees the whole previous phase. */
		int phase[64] = {0}, bad = 0, crit = 0;
#pragma omp parallel shared(phase, bad, crit)
		{
			int me = omp_get_thread_num(), n = omp_get_num_threads();
#pragma omp single
			nt = n;
			for (int p = 1; p <= 10; p++) {
				__atomic_store_n(&phase[me], p, __ATOMIC_RELAXED);
#pragma omp barrier
				for (int t = 0; t < n; t++)
					if (__atomic_load_n(&phase[t], __ATOMIC_RELAXED) < p)
						__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
#pragma omp barrier
			}
			/* A plain increment: only the critical section protects it. */
			for (int i = 0; i < 1000; i++) {
#pragma omp critical
				crit++;
			}
		}
		CHECK(!bad);
		CHECK(crit == 1000 * nt);

		/* Tasks. */
		long f = -1;
#pragma omp parallel
#pragma omp single
		f = fib(18);
		CHECK(f == 2584);

		/* Nested teams of 2 in each thread. */
		int inner = 0;
		omp_set_max_active_levels(2);
#pragma omp parallel num_threads(2) reduction(+ : inner)
#pragma omp parallel num_threads(2) reduction(+ : inner)
		inner += 1;
		CHECK(inner == 4);
	}
	CHECK(nt == omp_get_max_threads());
	printf("mn_omp: ok %d\n", nt);
	return 0;
}
