/* SPDX-License-Identifier: MIT */
/*
 * Condition-variable broadcast round trips: one thread bumps a generation under the mutex and
 * broadcasts; T waiters each wake, take the mutex, note the generation, and the last one
 * signals the broadcaster, which starts the next round. Counter: rounds_per_s. Every waiter must
 * reacquire the mutex after each broadcast, so this measures how a broadcast's wake-ups reach
 * the mutex (pvrt and glibc: all thread waiters woken by one system call).
 *
 * Barrier round trips: T threads meet at a barrier again and again (pvrt_barrier vs
 * pthread_barrier). Counter: rounds_per_s.
 *
 * pvrt (pvrt_cond + pvrt_mutex, pvrt_barrier) vs glibc. Threads (waiters, resp. barrier
 * threads): PVRT_BENCH_THREADS (default 4), and 2x and 4x the CPUs (oversubscribed: more
 * threads than CPUs); under PVRT_HINTS=emu every thread is attached to an emulated vCPU, round
 * robin. PVRT_BENCH_SECONDS per run (default 0.5).
 */
#include "lockwork.h"

#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>

#include <pvrt_bench.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { K_PVRT, K_GLIBC, K_N };
static const char *const kname[K_N] = {"pvrt", "glibc"};

/* Every lock object and the data under the mutex on a cache line of its own, apart from the
 * fields every lock call reads ('kind'), so that neither kind pays for a neighbour (bench_locks
 * lost up to 40% when the pvrt mutex shared a line with a field every iteration read). */
struct shared {
	int kind, waiters;
	pvhint_t *emu;
	_Alignas(64) pvrt_mutex_t pm;
	_Alignas(64) pvrt_cond_t pc;
	_Alignas(64) pvrt_cond_t pdone;
	_Alignas(64) pthread_mutex_t gm;
	_Alignas(64) pthread_cond_t gc;
	_Alignas(64) pthread_cond_t gdone;
	_Alignas(64) uint64_t gen; /* under the mutex */
	int arrived;		   /* under the mutex */
	int stop;		   /* under the mutex */
};

/* lw_alloc_lines, or exit. */
static void *zalloc_lines(size_t n)
{
	void *p = lw_alloc_lines(n);
	if (!p) {
		fprintf(stderr, "bench_cond: out of memory\n");
		exit(1);
	}
	return p;
}

static void lock(struct shared *s)
{
	if (s->kind == K_PVRT)
		pvrt_mutex_lock(&s->pm);
	else
		pthread_mutex_lock(&s->gm);
}

static void unlock(struct shared *s)
{
	if (s->kind == K_PVRT)
		pvrt_mutex_unlock(&s->pm);
	else
		pthread_mutex_unlock(&s->gm);
}

static void wait_on(struct shared *s, bool done)
{
	if (s->kind == K_PVRT)
		pvrt_cond_wait(done ? &s->pdone : &s->pc, &s->pm);
	else
		pthread_cond_wait(done ? &s->gdone : &s->gc, &s->gm);
}

static void *waiter(void *p)
{
	struct shared *s = p;
	if (s->emu)
		pvhint_emu_attach_next(s->emu);
	uint64_t seen = 0;
	lock(s);
	for (;;) {
		while (s->gen == seen && !s->stop)
			wait_on(s, false);
		if (s->stop)
			break;
		seen = s->gen;
		if (++s->arrived == s->waiters) {
			if (s->kind == K_PVRT)
				pvrt_cond_signal(&s->pdone);
			else
				pthread_cond_signal(&s->gdone);
		}
	}
	unlock(s);
	if (s->emu)
		pvhint_emu_detach(s->emu);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int waiters = 4;
static double seconds = 0.5;

static void bm_broadcast(pvrt_bench_state *st)
{
	struct shared *s = zalloc_lines(sizeof(*s));
	s->kind = (int)pvrt_bench_arg(st, 0);
	s->waiters = (int)pvrt_bench_arg(st, 1);
	pvhint_t *def = NULL;
	pvhint_default(&def);
	if (def && !strcmp(pvhint_source_name(def), "emu"))
		s->emu = def;
	pvrt_mutex_init(&s->pm, PVRT_MUTEX_NORMAL);
	pvrt_cond_init(&s->pc, CLOCK_MONOTONIC);
	pvrt_cond_init(&s->pdone, CLOCK_MONOTONIC);
	pthread_mutex_init(&s->gm, NULL);
	pthread_cond_init(&s->gc, NULL);
	pthread_cond_init(&s->gdone, NULL);
	bool attached = s->emu && pvhint_tls_vcpu < 0 && pvhint_emu_attach_next(s->emu) == 0;
	pthread_t t[64];
	for (int i = 0; i < s->waiters; i++)
		pthread_create(&t[i], NULL, waiter, s);
	uint64_t rounds = 0;
	double t0 = now_s(), t1 = t0;
	while (pvrt_bench_keep_running(st)) {
		t0 = now_s();
		rounds = 0;
		do {
			lock(s);
			s->arrived = 0;
			s->gen++;
			if (s->kind == K_PVRT)
				pvrt_cond_broadcast(&s->pc);
			else
				pthread_cond_broadcast(&s->gc);
			while (s->arrived < s->waiters)
				wait_on(s, true);
			unlock(s);
			rounds++;
		} while ((t1 = now_s()) - t0 < seconds);
		pvrt_bench_set_iteration_time(st, t1 - t0);
	}
	lock(s);
	s->stop = 1;
	if (s->kind == K_PVRT)
		pvrt_cond_broadcast(&s->pc);
	else
		pthread_cond_broadcast(&s->gc);
	unlock(s);
	for (int i = 0; i < s->waiters; i++)
		pthread_join(t[i], NULL);
	if (attached)
		pvhint_emu_detach(s->emu);
	pvrt_bench_counter(st, "rounds_per_s", (double)rounds / (t1 - t0),
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "waiters", s->waiters, PVRT_BENCH_COUNTER_VALUE);
	free(s);
}

struct bar_shared {
	int kind;
	pvhint_t *emu;
	_Alignas(64) pvrt_barrier_t pb;
	_Alignas(64) pthread_barrier_t gb;
	_Alignas(64) double t0, t1;
	uint64_t rounds; /* written by the serial thread of each round */
	int stop;	 /* set by a serial thread before the round's second barrier */
};

static bool bar_wait(struct bar_shared *s)
{
	if (s->kind == K_PVRT)
		return pvrt_barrier_wait(&s->pb) == PVRT_BARRIER_SERIAL_THREAD;
	return pthread_barrier_wait(&s->gb) == PTHREAD_BARRIER_SERIAL_THREAD;
}

static void *bar_thread(void *p)
{
	struct bar_shared *s = p;
	bool attached = s->emu && pvhint_tls_vcpu < 0 && pvhint_emu_attach_next(s->emu) == 0;
	for (;;) {
		if (bar_wait(s)) {
			s->rounds += 2;
			if ((s->t1 = now_s()) - s->t0 >= seconds)
				s->stop = 1;
		}
		bar_wait(s); /* everyone reads the same 'stop' */
		if (s->stop)
			break;
	}
	if (attached)
		pvhint_emu_detach(s->emu);
	return NULL;
}

static void bm_barrier(pvrt_bench_state *st)
{
	struct bar_shared *s = zalloc_lines(sizeof(*s));
	s->kind = (int)pvrt_bench_arg(st, 0);
	int n = (int)pvrt_bench_arg(st, 1);
	pvhint_t *def = NULL;
	pvhint_default(&def);
	if (def && !strcmp(pvhint_source_name(def), "emu"))
		s->emu = def;
	pvrt_barrier_init(&s->pb, (unsigned)n);
	pthread_barrier_init(&s->gb, NULL, (unsigned)n);
	while (pvrt_bench_keep_running(st)) {
		s->rounds = 0;
		s->stop = 0;
		s->t0 = s->t1 = now_s();
		pthread_t t[64];
		for (int i = 0; i < n; i++)
			pthread_create(&t[i], NULL, bar_thread, s);
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		pvrt_bench_set_iteration_time(st, s->t1 - s->t0);
	}
	pvrt_barrier_destroy(&s->pb);
	pthread_barrier_destroy(&s->gb);
	pvrt_bench_counter(st, "rounds_per_s", (double)s->rounds / (s->t1 - s->t0),
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "threads", n, PVRT_BENCH_COUNTER_VALUE);
	free(s);
}

int main(int argc, char **argv)
{
	lw_env(&seconds, &waiters);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1)
		cpus = 1;
	int64_t counts[3] = {waiters, 2 * cpus > 64 ? 64 : 2 * cpus, 4 * cpus > 64 ? 64 : 4 * cpus};
	for (int c = 0; c < 3; c++) {
		if ((c == 1 && counts[1] == counts[0]) || (c == 2 && counts[2] == counts[0]))
			continue;
		for (int w = 0; w < 2; w++) {
			for (int k = 0; k < K_N; k++) {
				char name[64];
				snprintf(name, sizeof(name), "%s/%s",
					 w ? "barrier" : "cond_broadcast", kname[k]);
				pvrt_bench *b = pvrt_bench_register(strdup(name),
								    w ? bm_barrier : bm_broadcast);
				pvrt_bench_args(b, 2, (int64_t[]){k, counts[c]});
				pvrt_bench_iterations(b, 1);
				pvrt_bench_manual_time(b);
				pvrt_bench_unit_us(b);
			}
		}
	}
	return pvrt_bench_main(argc, argv);
}
