/* SPDX-License-Identifier: MIT */
/*
 * Barrier-phased iteration shaped like PARSEC's streamcluster: T threads sweep their slice of
 * a point array, then meet at a barrier, then contribute to a reduction that one thread
 * finishes, then meet again; two barriers per iteration, little work between them. Built twice:
 * parsec_streamcluster_cond uses PARSEC's own barrier (a mutex + a condvar broadcast per phase,
 * what PARSEC maps pthread_barrier_wait onto), parsec_streamcluster_barrier uses
 * pthread_barrier_wait.
 *
 * usage: parsec_streamcluster_{cond,barrier} THREADS [POINTS] [ITERATIONS]
 * Check: the same iterations recomputed by one thread give the same array and reductions.
 */
#include "parsec.h"

#ifdef PS_PTHREAD_BARRIER
static pthread_barrier_t bar;
static void bwait(void)
{
	pthread_barrier_wait(&bar);
}
#else
static struct ps_barrier bar;
static void bwait(void)
{
	ps_barrier_wait(&bar);
}
#endif

static long nthreads, npoints, iters;
static uint64_t *cur, *nxt, *partial, *sums;

/* One point's new value from its neighbours in the previous iteration. */
static inline uint64_t step(const uint64_t *a, long n, long i, long it, uint64_t cost)
{
	uint64_t l = a[i ? i - 1 : n - 1], r = a[i + 1 < n ? i + 1 : 0];
	uint64_t v = a[i] * 3 + l + (r >> 1) + cost + (uint64_t)it;
	for (int k = 0; k < 8; k++) /* a little work per point, as the distance computations */
		v = v * 0x5851F42D4C957F2Dull + (v >> 29);
	return v;
}

static void *worker(void *arg)
{
	long t = (long)arg;
	long lo = npoints * t / nthreads, hi = npoints * (t + 1) / nthreads;
	uint64_t *a = cur, *b = nxt;
	for (long it = 0; it < iters; it++) {
		uint64_t cost = sums[it ? it - 1 : 0];
		uint64_t s = 0;
		for (long i = lo; i < hi; i++) {
			b[i] = step(a, npoints, i, it, cost);
			s += b[i] >> 7;
		}
		partial[t] = s;
		bwait();
		if (t == 0) { /* the reduction of this iteration, as streamcluster's pgain */
			uint64_t tot = 0;
			for (long k = 0; k < nthreads; k++)
				tot += partial[k];
			sums[it] = ps_mix(tot);
		}
		bwait();
		uint64_t *x = a;
		a = b;
		b = x;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *usage = "THREADS [POINTS] [ITERATIONS]";
	if (argc < 2) {
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		return 2;
	}
	nthreads = ps_arg(argc, argv, 1, 2, usage);
	npoints = ps_arg(argc, argv, 2, 2048, usage);
	iters = ps_arg(argc, argv, 3, 3000, usage);
	if (npoints < nthreads)
		npoints = nthreads;
	cur = calloc((size_t)npoints, sizeof(*cur));
	nxt = calloc((size_t)npoints, sizeof(*nxt));
	partial = calloc((size_t)nthreads, sizeof(*partial));
	sums = calloc((size_t)iters, sizeof(*sums));
	uint64_t *init = calloc((size_t)npoints, sizeof(*init));
	if (!cur || !nxt || !partial || !sums || !init)
		ps_die_errno("calloc", 12);
	for (long i = 0; i < npoints; i++)
		init[i] = cur[i] = ps_mix((uint64_t)i);
#ifdef PS_PTHREAD_BARRIER
	pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
#else
	ps_barrier_init(&bar, (unsigned)nthreads);
#endif
	double t0 = ps_now();
	ps_run_threads(nthreads, worker);
	double el = ps_now() - t0;
	uint64_t *res = (iters & 1) ? nxt : cur;

	/* The check: one thread, same iterations. */
	uint64_t *a = init, *b = calloc((size_t)npoints, sizeof(*b)), *sum1 = sums;
	if (!b)
		ps_die_errno("calloc", 12);
	uint64_t prev = 0;
	for (long it = 0; it < iters; it++) {
		uint64_t cost = it ? prev : 0, tot = 0;
		for (long t = 0; t < nthreads; t++) {
			uint64_t s = 0;
			for (long i = npoints * t / nthreads; i < npoints * (t + 1) / nthreads;
			     i++) {
				b[i] = step(a, npoints, i, it, cost);
				s += b[i] >> 7;
			}
			tot += s;
		}
		prev = ps_mix(tot);
		ps_check_or_die("reduction", sum1[it], prev);
		uint64_t *x = a;
		a = b;
		b = x;
	}
	uint64_t ck = 0, want = 0;
	for (long i = 0; i < npoints; i++) {
		ck = ps_mix(ck ^ res[i]);
		want = ps_mix(want ^ a[i]);
	}
	ps_check_or_die("points", ck, want);
	ps_report(ps_mix(ck ^ prev), el);
	return 0;
}
