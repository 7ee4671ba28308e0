/* SPDX-License-Identifier: MIT */
/*
 * A lock-heavy workload shared by the lock benchmarks (bench/locks) and the
 * demonstration (tools/locks/pvrt-lock-demo): T threads, each attached to an
 * emulated vCPU when the default hint source is the overcommit emulator, take
 * one lock in a loop for a fixed wall time, doing 'cs' units of work inside and
 * a little outside. Result: total acquisitions per second and the spread of
 * per-thread counts (fairness).
 *
 * Lock variants: pvrt mutex (hints on / off), glibc mutex (default and
 * adaptive), pthread_spin, and two classic spin locks written here as
 * baselines: a ticket lock and an MCS queue lock.
 */
#ifndef PVRT_BENCH_LOCKWORK_H
#define PVRT_BENCH_LOCKWORK_H

#define _GNU_SOURCE
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>
#include <pvrt/spinlock.h>

#include "pvrt_os.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum lw_kind {
	LW_PVRT,
	LW_PVRT_NOHINTS,
	LW_GLIBC,
	LW_GLIBC_ADAPTIVE,
	LW_SPIN,
	LW_TICKET,
	LW_MCS,
	LW_PVRT_SPIN,	      /* pvrt_spinlock: spins only while the owner's vCPU runs */
	LW_PVRT_SPIN_NOHINTS, /* the same on source none (its blind budget, then yield) */
	LW_NKINDS
};
static const char *const lw_names[LW_NKINDS] = {
    "pvrt",   "pvrt_nohints", "glibc",	   "glibc_adaptive",   "pthread_spin",
    "ticket", "mcs",	      "pvrt_spin", "pvrt_spin_nohints"};

/* ---- ticket lock (baseline): FIFO, everyone spins on 'serving' ---- */
struct lw_ticket {
	uint32_t next, serving;
};
static inline void lw_ticket_lock(struct lw_ticket *t)
{
	/* Relaxed: taking a number orders nothing; the acquire load below does. */
	uint32_t me = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED);
	while (__atomic_load_n(&t->serving, __ATOMIC_ACQUIRE) != me)
		os_cpu_relax();
}
static inline void lw_ticket_unlock(struct lw_ticket *t)
{
	/* Release: the critical section happens-before the next holder's. */
	__atomic_store_n(&t->serving, t->serving + 1, __ATOMIC_RELEASE);
}

/* ---- MCS lock (baseline): FIFO queue, each waiter spins on its own node ---- */
struct lw_mcs_node {
	struct lw_mcs_node *next;
	int locked;
};
struct lw_mcs {
	struct lw_mcs_node *tail;
};
static inline void lw_mcs_lock(struct lw_mcs *l, struct lw_mcs_node *n)
{
	n->next = NULL;
	n->locked = 1;
	/* Acq_rel: publishes our node's fields and acquires the predecessor's. */
	struct lw_mcs_node *prev = __atomic_exchange_n(&l->tail, n, __ATOMIC_ACQ_REL);
	if (!prev)
		return;
	/* Release: our node is complete before the predecessor can see it. */
	__atomic_store_n(&prev->next, n, __ATOMIC_RELEASE);
	while (__atomic_load_n(&n->locked, __ATOMIC_ACQUIRE))
		os_cpu_relax();
}
static inline void lw_mcs_unlock(struct lw_mcs *l, struct lw_mcs_node *n)
{
	struct lw_mcs_node *next = __atomic_load_n(&n->next, __ATOMIC_ACQUIRE);
	if (!next) {
		struct lw_mcs_node *exp = n;
		/* Release: the critical section happens-before the next locker's acquire. */
		if (__atomic_compare_exchange_n(&l->tail, &exp, NULL, false, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			return;
		while (!(next = __atomic_load_n(&n->next, __ATOMIC_ACQUIRE)))
			os_cpu_relax();
	}
	/* Release: hand the lock (and our critical section) to the successor. */
	__atomic_store_n(&next->locked, 0, __ATOMIC_RELEASE);
}

/* PVRT_BENCH_SECONDS (a positive number) and PVRT_BENCH_THREADS (a positive integer, at most
 * 64) into *seconds and *threads; either stays as it was when unset or not positive. */
static inline void lw_env(double *seconds, int *threads)
{
	const char *e = getenv("PVRT_BENCH_SECONDS");
	if (e && atof(e) > 0)
		*seconds = atof(e);
	e = getenv("PVRT_BENCH_THREADS");
	if (e && atoi(e) > 0)
		*threads = atoi(e) > 64 ? 64 : atoi(e);
}

/* n zeroed bytes starting on a cache line of their own (the structure's _Alignas(64) members
 * then sit on lines of their own), or NULL. */
static inline void *lw_alloc_lines(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
	return p ? memset(p, 0, n) : NULL;
}

/* ---- the workload ---- */
struct lw_config {
	enum lw_kind kind;
	int threads;
	unsigned cs_work;  /* work units inside the critical section */
	unsigned out_work; /* work units outside */
	double seconds;
	bool latency; /* sample acquisition latency (lw_result.lat_*) */
};

struct lw_result {
	double ops_per_s;
	double fairness; /* min/max of per-thread acquisitions (1 = perfectly fair) */
	double elapsed;
	uint64_t total;
	uint64_t thread_min, thread_max; /* fewest and most acquisitions of one thread */
	/* With lw_config.latency: acquisition latency percentiles in ns (lock call to acquired),
	 * from sampled acquisitions; 0 when off or nothing was sampled. */
	double lat_p50, lat_p99, lat_p999;
};

/* Latency sampling: each thread times one acquisition in 'stride' (starting at LW_LAT_STRIDE)
 * and keeps at most LW_LAT_MAX samples; when the buffer fills it drops every other sample and
 * doubles its stride, so the samples stay spread evenly over the whole run at any lock rate. */
enum { LW_LAT_STRIDE = 8, LW_LAT_MAX = 4096 };
struct lw_lat {
	uint32_t ns[LW_LAT_MAX];
	uint32_t n;	 /* samples kept */
	uint64_t stride; /* acquisitions per sample (a power of two) */
};

struct lw_shared {
	const struct lw_config *cfg;
	pvhint_t *emu; /* default handle when it is the emulator, else NULL */
	pthread_barrier_t start;
	/* Each lock, the flag every iteration reads and the data the section writes on a cache
	 * line of its own, so no kind pays for a neighbour: with 'stop' beside the pvrt mutex's
	 * word every thread's check of it missed once the owner wrote the word, and the first
	 * benchmark of a run made 13M acquisitions/s or 23M depending on where the heap put
	 * the structure. */
	_Alignas(64) int stop;
	_Alignas(64) pvrt_mutex_t pm;
	_Alignas(64) pthread_mutex_t gm;
	_Alignas(64) pthread_spinlock_t sl;
	_Alignas(64) pvrt_spinlock_t ps;
	_Alignas(64) struct lw_ticket tk;
	_Alignas(64) struct lw_mcs mcs;
	_Alignas(64) uint64_t shared_counter;
	_Alignas(64) uint64_t counts[64];
	struct lw_lat *lat; /* [threads] when sampling latency, else NULL */
};

/* One unit of work: a few dependent arithmetic operations (~5 ns) the compiler cannot drop. */
static inline uint64_t lw_work(uint64_t x, unsigned units)
{
	for (unsigned i = 0; i < units; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

static inline void lw_lat_add(struct lw_lat *l, uint64_t ns)
{
	if (l->n == LW_LAT_MAX) {
		for (uint32_t i = 0; i < LW_LAT_MAX / 2; i++)
			l->ns[i] = l->ns[2 * i];
		l->n = LW_LAT_MAX / 2;
		l->stride *= 2;
	}
	l->ns[l->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

/* The measured loop. Always inlined with a constant 'sample', so the loop without sampling
 * has no trace of it. */
static inline __attribute__((always_inline)) uint64_t lw_loop(struct lw_shared *s, long id,
							      bool sample)
{
	const struct lw_config *c = s->cfg;
	struct lw_lat *lat = sample ? &s->lat[id] : NULL;
	struct lw_mcs_node node;
	uint64_t n = 0, x = (uint64_t)id + 1, t0 = 0;
	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		bool timed = sample && (n & (lat->stride - 1)) == 0;
		if (timed)
			t0 = os_now_ns();
		switch (c->kind) {
		case LW_PVRT:
		case LW_PVRT_NOHINTS:
			pvrt_mutex_lock(&s->pm);
			break;
		case LW_GLIBC:
		case LW_GLIBC_ADAPTIVE:
			pthread_mutex_lock(&s->gm);
			break;
		case LW_SPIN:
			pthread_spin_lock(&s->sl);
			break;
		case LW_TICKET:
			lw_ticket_lock(&s->tk);
			break;
		case LW_MCS:
			lw_mcs_lock(&s->mcs, &node);
			break;
		case LW_PVRT_SPIN:
		case LW_PVRT_SPIN_NOHINTS:
			pvrt_spin_lock(&s->ps);
			break;
		default:
			break;
		}
		/* The clock is read inside the section but the sample is stored after it, so the
		 * holder keeps the lock no longer than one clock read. */
		uint64_t t1 = timed ? os_now_ns() : 0;
		s->shared_counter = lw_work(s->shared_counter, c->cs_work);
		switch (c->kind) {
		case LW_PVRT:
		case LW_PVRT_NOHINTS:
			pvrt_mutex_unlock(&s->pm);
			break;
		case LW_GLIBC:
		case LW_GLIBC_ADAPTIVE:
			pthread_mutex_unlock(&s->gm);
			break;
		case LW_SPIN:
			pthread_spin_unlock(&s->sl);
			break;
		case LW_TICKET:
			lw_ticket_unlock(&s->tk);
			break;
		case LW_MCS:
			lw_mcs_unlock(&s->mcs, &node);
			break;
		case LW_PVRT_SPIN:
		case LW_PVRT_SPIN_NOHINTS:
			pvrt_spin_unlock(&s->ps);
			break;
		default:
			break;
		}
		if (timed)
			lw_lat_add(lat, t1 - t0);
		n++;
		x = lw_work(x, c->out_work);
	}
	__asm__ volatile("" : : "r"(x));
	return n;
}

static inline void *lw_thread(void *p)
{
	void **a = p;
	struct lw_shared *s = a[0];
	long id = (long)a[1];
	if (s->emu && pvhint_tls_vcpu < 0)
		pvhint_emu_attach_next(s->emu);
	pthread_barrier_wait(&s->start);
	s->counts[id] = s->lat ? lw_loop(s, id, true) : lw_loop(s, id, false);
	if (s->emu && pvhint_tls_vcpu >= 0)
		pvhint_emu_detach(s->emu);
	return NULL;
}

struct lw_lat_sample {
	uint32_t ns;
	uint64_t weight; /* acquisitions the sample stands for: its thread's final stride */
};

static inline int lw_lat_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct lw_lat_sample *)a)->ns,
		 y = ((const struct lw_lat_sample *)b)->ns;
	return x < y ? -1 : x > y;
}

/* Weighted percentiles over every thread's samples: a thread that ran more acquisitions kept
 * a coarser stride, so each of its samples counts for more. */
static inline void lw_lat_percentiles(const struct lw_shared *s, int threads, struct lw_result *out)
{
	size_t n = 0;
	for (int i = 0; i < threads; i++)
		n += s->lat[i].n;
	struct lw_lat_sample *v = n ? malloc(n * sizeof(*v)) : NULL;
	if (!v)
		return;
	size_t k = 0;
	uint64_t total = 0;
	for (int i = 0; i < threads; i++)
		for (uint32_t j = 0; j < s->lat[i].n; j++) {
			/* A thread's earlier samples were taken at finer strides but were
			 * thinned by the same factor since, so all stand for the final one. */
			v[k++] = (struct lw_lat_sample){s->lat[i].ns[j], s->lat[i].stride};
			total += s->lat[i].stride;
		}
	qsort(v, n, sizeof(*v), lw_lat_cmp);
	const double q[3] = {0.5, 0.99, 0.999};
	double *dst[3] = {&out->lat_p50, &out->lat_p99, &out->lat_p999};
	uint64_t acc = 0;
	size_t j = 0;
	for (int i = 0; i < 3; i++) {
		while (j < n - 1 && (double)(acc + v[j].weight) < q[i] * (double)total)
			acc += v[j++].weight;
		*dst[i] = v[j].ns;
	}
	free(v);
}

static inline double lw_now(void)
{
	return (double)os_now_ns() * 1e-9;
}

/* Runs one measurement. Returns 0, or -1 with a message on stderr. */
static inline int lw_run(const struct lw_config *c, struct lw_result *out)
{
	if (c->threads < 1 || c->threads > 64)
		return -1;
	struct lw_shared *s = lw_alloc_lines(sizeof(*s));
	if (!s)
		return -1;
	s->cfg = c;
	pvhint_t *def = NULL;
	pvhint_default(&def);
	if (def && !strcmp(pvhint_source_name(def), "emu"))
		s->emu = def;
	static pvhint_t *none;
	if (!none) {
		struct pvhint_options o = {.source = "none"};
		if (pvhint_open(&o, &none))
			none = NULL;
	}
	pvrt_locks_set_hints(c->kind == LW_PVRT_NOHINTS || c->kind == LW_PVRT_SPIN_NOHINTS ? none
											   : NULL);
	pvrt_mutex_init(&s->pm, PVRT_MUTEX_NORMAL);
	pvrt_spin_init(&s->ps);
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	if (c->kind == LW_GLIBC_ADAPTIVE)
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&s->gm, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_spin_init(&s->sl, PTHREAD_PROCESS_PRIVATE);
	if (c->latency) {
		s->lat = calloc((size_t)c->threads, sizeof(*s->lat));
		if (!s->lat) {
			free(s);
			return -1;
		}
		for (int i = 0; i < c->threads; i++)
			s->lat[i].stride = LW_LAT_STRIDE;
	}
	pthread_barrier_init(&s->start, NULL, (unsigned)c->threads + 1);

	pthread_t t[64];
	void *args[64][2];
	for (long i = 0; i < c->threads; i++) {
		args[i][0] = s;
		args[i][1] = (void *)i;
		if (pthread_create(&t[i], NULL, lw_thread, args[i])) {
			fprintf(stderr, "lockwork: pthread_create failed\n");
			exit(1);
		}
	}
	pthread_barrier_wait(&s->start);
	double t0 = lw_now();
	struct timespec d = {(time_t)c->seconds,
			     (long)((c->seconds - (double)(time_t)c->seconds) * 1e9)};
	while (nanosleep(&d, &d))
		;
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < c->threads; i++)
		pthread_join(t[i], NULL);
	double el = lw_now() - t0;
	uint64_t total = 0, mn = UINT64_MAX, mx = 0;
	for (int i = 0; i < c->threads; i++) {
		total += s->counts[i];
		mn = s->counts[i] < mn ? s->counts[i] : mn;
		mx = s->counts[i] > mx ? s->counts[i] : mx;
	}
	out->total = total;
	out->elapsed = el;
	out->ops_per_s = (double)total / el;
	out->fairness = mx ? (double)mn / (double)mx : 0;
	out->thread_min = mn;
	out->thread_max = mx;
	out->lat_p50 = out->lat_p99 = out->lat_p999 = 0;
	if (s->lat) {
		lw_lat_percentiles(s, c->threads, out);
		free(s->lat);
	}
	pvrt_locks_set_hints(NULL);
	pthread_barrier_destroy(&s->start);
	pthread_mutex_destroy(&s->gm);
	free(s);
	return 0;
}

#endif /* PVRT_BENCH_LOCKWORK_H */
