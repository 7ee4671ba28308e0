/* SPDX-License-Identifier: MIT */
/*
 * Two threads hand a turn back and forth, through a mutex and a condvar (cond) or through two
 * semaphores (sem): every pass is a wake-up and a hand-over, so with both threads on one CPU
 * (taskset -c 0) it measures what a lock library adds to each context switch, the shape of
 * every hand-over when threads outnumber CPUs. A plain pthread program: run it as is (glibc)
 * and under pvrt-run, in interleaved rounds.
 *
 * usage: handoff_pingpong [cond|sem] [PASSES]   (default cond 100000)
 * Prints "ns per pass" on stdout and "elapsed: <seconds>" on stderr (as bench/parsec's kernels).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static sem_t sem[2];
static int turn, use_sem;
static long passes;

static void *player(void *arg)
{
	int me = (int)(long)arg;
	for (long i = 0; i < passes; i++) {
		if (use_sem) {
			while (sem_wait(&sem[me]))
				;
			sem_post(&sem[!me]);
			continue;
		}
		pthread_mutex_lock(&m);
		while (turn != me)
			pthread_cond_wait(&c, &m);
		turn = !me;
		pthread_cond_signal(&c);
		pthread_mutex_unlock(&m);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "cond";
	passes = argc > 2 ? atol(argv[2]) : 100000;
	if ((strcmp(mode, "cond") && strcmp(mode, "sem")) || passes <= 0) {
		fprintf(stderr, "usage: handoff_pingpong [cond|sem] [PASSES]\n");
		return 2;
	}
	use_sem = !strcmp(mode, "sem");
	sem_init(&sem[0], 0, 1);
	sem_init(&sem[1], 0, 0);
	pthread_t t[2];
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, player, (void *)i)) {
			fprintf(stderr, "handoff_pingpong: pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("ns per pass: %.0f\n", s * 1e9 / (double)passes / 2);
	fprintf(stderr, "elapsed: %f\n", s);
	return 0;
}
