/* SPDX-License-Identifier: MIT */
/*
 * Condition-variable broadcast round trips: one thread bumps a generation under the mutex and
 * broadcasts; T waiters each wake, take the mutex, note the generation, and the last one
 * signals the broadcaster, which starts the next round. Counter: rounds_per_s. Every waiter must
 * reacquire the mutex after each broadcast, so this measures how a broadcast's wake-ups reach
 * the mutex (pvrt: each woken waiter wakes the next, one at a time; glibc: all at once).
 *
 * pvrt (pvrt_cond + pvrt_mutex) vs glibc (pthread_cond + pthread_mutex). Threads:
 * PVRT_BENCH_THREADS waiters (default 4); under PVRT_HINTS=emu every thread is attached to an
 * emulated vCPU, round robin. PVRT_BENCH_SECONDS per run (default 0.5).
 */
#include "lockwork.h"

#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>

#include <pvrt_bench.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K_PVRT, K_GLIBC, K_N };
static const char *const kname[K_N] = {"pvrt", "glibc"};

struct shared {
	int kind, waiters;
	pvhint_t *emu;
	pvrt_mutex_t pm;
	pvrt_cond_t pc, pdone;
	pthread_mutex_t gm;
	pthread_cond_t gc, gdone;
	uint64_t gen; /* under the mutex */
	int arrived;  /* under the mutex */
	int stop;     /* under the mutex */
};

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
	struct shared *s = calloc(1, sizeof(*s));
	s->kind = (int)pvrt_bench_arg(st, 0);
	s->waiters = waiters;
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
	for (int i = 0; i < waiters; i++)
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
	for (int i = 0; i < waiters; i++)
		pthread_join(t[i], NULL);
	if (attached)
		pvhint_emu_detach(s->emu);
	pvrt_bench_counter(st, "rounds_per_s", (double)rounds / (t1 - t0),
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "waiters", waiters, PVRT_BENCH_COUNTER_VALUE);
	free(s);
}

int main(int argc, char **argv)
{
	lw_env(&seconds, &waiters);
	for (int k = 0; k < K_N; k++) {
		char name[64];
		snprintf(name, sizeof(name), "cond_broadcast/%s", kname[k]);
		pvrt_bench *b = pvrt_bench_register(strdup(name), bm_broadcast);
		pvrt_bench_args(b, 1, (int64_t[]){k});
		pvrt_bench_iterations(b, 1);
		pvrt_bench_manual_time(b);
		pvrt_bench_unit_us(b);
	}
	return pvrt_bench_main(argc, argv);
}
