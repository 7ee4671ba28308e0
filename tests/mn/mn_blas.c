/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS's own thread pool in ULTs (pvrt-run --mn, OPENBLAS_NUM_THREADS=4): dgemm of matrices
 * large enough for OpenBLAS to split the product over its threads, checked element by element
 * against a naive triple loop; openblas_get_num_threads() must report the requested threads (it
 * sizes the pool from the CPUs sched_getaffinity reports). Prints "mn_blas: ok THREADS".
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N 300

int openblas_get_num_threads(void);

static double a[N * N], b[N * N], c[N * N];

static int check(int round)
{
	for (int i = 0; i < N * N; i++) {
		a[i] = (double)((i * 7 + round) % 13) - 6.0;
		b[i] = (double)((i * 5 + 3 * round) % 11) - 5.0;
		c[i] = 1.0;
	}
	/* C = 2 A B + 0.5 C (row major) */
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 2.0, a, N, b, N, 0.5, c, N);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			double s = 0;
			for (int k = 0; k < N; k++)
				s += a[i * N + k] * b[k * N + j];
			double want = 2.0 * s + 0.5;
			/* Integer-valued products: exact in double whatever the summation order. */
			if (fabs(c[i * N + j] - want) > 1e-9) {
				fprintf(stderr, "mn_blas: C[%d][%d] = %g, want %g (round %d)\n", i,
					j, c[i * N + j], want, round);
				return 1;
			}
		}
	return 0;
}

int main(void)
{
	for (int r = 0; r < 5; r++)
		if (check(r))
			return 1;
	printf("mn_blas: ok %d\n", openblas_get_num_threads());
	return 0;
}
