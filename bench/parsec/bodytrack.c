/* SPDX-License-Identifier: MIT */
/*
 * A task pool shaped like PARSEC's bodytrack: a pool of worker threads sleeps on a condvar until
 * the main thread starts a frame (broadcast); workers take particle tasks one at a time from a
 * shared queue under its mutex; the last one to finish signals the main thread, which then
 * resamples (serially) from the results to make the next frame's particles.
 *
 * usage: parsec_bodytrack THREADS [PARTICLES] [FRAMES]
 * Check: the final particle set equals the one computed by a single thread.
 */
#include "parsec.h"

static long nthreads, nparticles, nframes;
static uint64_t *particle, *weight;

static pthread_mutex_t pool_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_c = PTHREAD_COND_INITIALIZER, done_c = PTHREAD_COND_INITIALIZER;
static long frame = -1; /* the frame being worked on; nframes: exit */
static long next_task;	/* under pool_m */
static long tasks_done; /* under pool_m */

static inline uint64_t likelihood(uint64_t p, long f)
{
	uint64_t x = p ^ (uint64_t)f;
	for (int k = 0; k < 400; k++)
		x = x * 0x5851F42D4C957F2Dull + (x >> 27) + 1;
	return x;
}

/* The serial step between frames: new particles from the weights. */
static void resample(uint64_t *p, const uint64_t *w, long n, long f)
{
	uint64_t acc = (uint64_t)f;
	for (long i = 0; i < n; i++)
		acc = ps_mix(acc + w[i]);
	for (long i = 0; i < n; i++)
		p[i] = ps_mix(p[(i + (long)(acc % (uint64_t)n)) % n] ^ w[i] ^ acc);
}

static void *worker(void *arg)
{
	(void)arg;
	long seen = -1;
	pthread_mutex_lock(&pool_m);
	for (;;) {
		while (frame == seen)
			pthread_cond_wait(&start_c, &pool_m);
		if (frame == nframes)
			break;
		seen = frame;
		while (next_task < nparticles) {
			long i = next_task++;
			pthread_mutex_unlock(&pool_m);
			weight[i] = likelihood(particle[i], seen);
			pthread_mutex_lock(&pool_m);
			if (++tasks_done == nparticles)
				pthread_cond_signal(&done_c);
		}
	}
	pthread_mutex_unlock(&pool_m);
	return NULL;
}

static void *main_role(void *arg)
{
	(void)arg;
	for (long f = 0; f < nframes; f++) {
		pthread_mutex_lock(&pool_m);
		next_task = 0;
		tasks_done = 0;
		frame = f;
		pthread_cond_broadcast(&start_c);
		while (tasks_done < nparticles)
			pthread_cond_wait(&done_c, &pool_m);
		pthread_mutex_unlock(&pool_m);
		resample(particle, weight, nparticles, f);
	}
	pthread_mutex_lock(&pool_m);
	frame = nframes;
	pthread_cond_broadcast(&start_c);
	pthread_mutex_unlock(&pool_m);
	return NULL;
}

static void *role(void *arg)
{
	return (long)arg == 0 ? main_role(NULL) : worker(NULL);
}

int main(int argc, char **argv)
{
	const char *usage = "THREADS [PARTICLES] [FRAMES]";
	if (argc < 2) {
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		return 2;
	}
	nthreads = ps_arg(argc, argv, 1, 2, usage);
	nparticles = ps_arg(argc, argv, 2, 256, usage);
	nframes = ps_arg(argc, argv, 3, 1000, usage);
	particle = calloc((size_t)nparticles, sizeof(*particle));
	weight = calloc((size_t)nparticles, sizeof(*weight));
	uint64_t *p1 = calloc((size_t)nparticles, 8), *w1 = calloc((size_t)nparticles, 8);
	if (!particle || !weight || !p1 || !w1)
		ps_die_errno("calloc", 12);
	for (long i = 0; i < nparticles; i++)
		particle[i] = p1[i] = ps_mix((uint64_t)i + 99);
	double t0 = ps_now();
	ps_run_threads(1 + nthreads, role);
	double el = ps_now() - t0;

	for (long f = 0; f < nframes; f++) {
		for (long i = 0; i < nparticles; i++)
			w1[i] = likelihood(p1[i], f);
		resample(p1, w1, nparticles, f);
	}
	uint64_t ck = 0, want = 0;
	for (long i = 0; i < nparticles; i++) {
		ck = ps_mix(ck ^ particle[i]);
		want = ps_mix(want ^ p1[i]);
	}
	ps_check_or_die("particles", ck, want);
	ps_report(ck, el);
	return 0;
}
