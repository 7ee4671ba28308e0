/* SPDX-License-Identifier: MIT */
/*
 * Shared by the PARSEC-shaped kernels: argument parsing, timing, a checksum mix, and PARSEC's
 * own barrier (parsec_barrier in PARSEC's pthreads hooks: a mutex, a condvar and a cycle flag;
 * the last arrival broadcasts). The kernels use plain pthreads only, so they run unmodified under
 * glibc, `pvrt-run` and `pvrt-run --mn`.
 *
 * Output (stdout), identical for every lock library at the same arguments:
 *   checksum: <16 hex digits>
 * and on stderr the elapsed time of the parallel part (`elapsed: <seconds>`). Exit status 1 when
 * the kernel's own check fails.
 */
#ifndef PVRT_BENCH_PARSEC_H
#define PVRT_BENCH_PARSEC_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double ps_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64's finaliser: a cheap, well-mixing step for data and checksums. */
static inline uint64_t ps_mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* argv[i] as a positive integer, else the default; a bad value is a usage error. */
static inline long ps_arg(int argc, char **argv, int i, long def, const char *usage)
{
	if (argc <= i)
		return def;
	char *end;
	long v = strtol(argv[i], &end, 10);
	if (*argv[i] == 0 || *end != 0 || v <= 0 || v > 100000000) {
		fprintf(stderr, "bad argument '%s'\nusage: %s %s\n", argv[i], argv[0], usage);
		exit(2);
	}
	return v;
}

static inline void ps_check_or_die(const char *what, uint64_t got, uint64_t want)
{
	if (got == want)
		return;
	fprintf(stderr, "FAIL: %s: got %016llx, expected %016llx\n", what, (unsigned long long)got,
		(unsigned long long)want);
	exit(1);
}

static inline void ps_report(uint64_t checksum, double elapsed)
{
	printf("checksum: %016llx\n", (unsigned long long)checksum);
	fprintf(stderr, "elapsed: %.6f\n", elapsed);
}

static inline void ps_die_errno(const char *what, int err)
{
	fprintf(stderr, "%s: %s\n", what, strerror(err));
	exit(1);
}

/* PARSEC's barrier (hooks/parsec_barrier.cpp without its optional spinning). */
struct ps_barrier {
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	unsigned max, count;
	int cycle;
};

static inline void ps_barrier_init(struct ps_barrier *b, unsigned n)
{
	pthread_mutex_init(&b->mutex, NULL);
	pthread_cond_init(&b->cond, NULL);
	b->max = n;
	b->count = 0;
	b->cycle = 0;
}

static inline void ps_barrier_destroy(struct ps_barrier *b)
{
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->mutex);
}

/* Returns 1 in one thread per round (as PTHREAD_BARRIER_SERIAL_THREAD), else 0. */
static inline int ps_barrier_wait(struct ps_barrier *b)
{
	int serial = 0;
	pthread_mutex_lock(&b->mutex);
	int cycle = b->cycle;
	if (++b->count == b->max) {
		b->count = 0;
		b->cycle = !b->cycle;
		pthread_cond_broadcast(&b->cond);
		serial = 1;
	} else {
		while (cycle == b->cycle)
			pthread_cond_wait(&b->cond, &b->mutex);
	}
	pthread_mutex_unlock(&b->mutex);
	return serial;
}

/* Start n threads running fn((void *)i) for i in 0..n-1 and join them. */
static inline void ps_run_threads(long n, void *(*fn)(void *))
{
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	if (!t)
		ps_die_errno("calloc", 12);
	for (long i = 0; i < n; i++) {
		int r = pthread_create(&t[i], NULL, fn, (void *)i);
		if (r)
			ps_die_errno("pthread_create", r);
	}
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
}

#endif /* PVRT_BENCH_PARSEC_H */
