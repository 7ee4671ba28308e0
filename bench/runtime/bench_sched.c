/* SPDX-License-Identifier: MIT */
/*
 * Scheduling policies under (emulated) overcommit: the hints policy against the hint-free random
 * one, each measured against the ideal. Shapes:
 *   forkjoin  the primary ULT creates PVRT_BENCH_ULTS ULTs (default 2000) of ~20 us of work
 *             each, then joins them;
 *   tree      a binary tree of ULTs with 2048 such leaves: every worker produces work;
 *   waves     64 waves of 2 ULTs per worker, the primary sleeping 300 us between waves so that
 *             the workers park: each wave is a wake-up of parked workers, and which one is woken
 *             decides when the wave runs (a parked worker whose pCPU is idle runs at once);
 *   pingpong  two ULTs hand a token back and forth 2000 times through a mutex and condvar:
 *             latency, not throughput (us per round trip).
 * Run it with PVRT_HINTS=emu and a PVRT_EMU spec, e.g. vcpus=4,pcpus=2 (workers on vCPUs that
 * the emulator time-slices over two pCPUs) or vcpus=2,mode=noisy,duty=0.5,noisy_vcpus=1 (one
 * vCPU descheduled half the time): tools/bench-report runs both. Under the emulator there is one
 * worker per emulated vCPU (unless PVRT_WORKERS says otherwise), so that vcpus=4,pcpus=2 is
 * overcommitted; the runtime's time-slice preemption is off (the ULTs never run long, and a
 * preempted ULT could finish its work on another kernel thread, whose CPU clock is another).
 *
 * Counters: batch_ms, the mean time of a batch (also the manual time); for the throughput shapes
 * vs_ideal, the CPU time the emulator offered during the batches (pvhint_emu_stats: pcpus x the
 * time, less the noisy neighbour's share, bounded by the CPUs this process may use) over the
 * CPU time the ULTs' work took (each ULT's in its thread's CPU time): 1.0 is a
 * schedule that wasted nothing, whatever the emulator took away. Without the emulator vs_ideal
 * uses the usable CPUs alone. The primary's creating and joining count as waste, as they are
 * (a few us per ULT against ~20 us of work).
 */
#define _GNU_SOURCE
#include <pvrt/cond.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pvrt_bench.h>
#include <pvrt_os.h>

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const policy[] = {"hints", "random"};
static const char *const shapes[] = {"forkjoin", "tree", "waves", "pingpong"};
enum { FORKJOIN, TREE, WAVES, PINGPONG, NSHAPES };
enum { WAVES_N = 64, WAVE_GAP_US = 300, PINGS = 2000 };

static long nults = 2000;
static uint64_t work_total; /* the CPU time the ULTs' work took (ns) */

static void *work_body(void *p)
{
	/* ~20 us of dependent arithmetic the compiler cannot drop. */
	uint64_t x = (uint64_t)(uintptr_t)p + 1;
	for (int i = 0; i < 15000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		__asm__ volatile("" : "+r"(x));
	}
	return (void *)(uintptr_t)x;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A ULT's work, in its kernel thread's CPU time: a stop (the emulator's, or the machine's) does
 * not count, and the work does not yield, so it runs on one kernel thread throughout. */
static void *work(void *p)
{
	/* The CPU-time clock is a system call (about 1 us here, counted as work: it is small
	 * against the 20 us and the same for both policies). */
	uint64_t t0 = thread_cpu_ns();
	void *r = work_body(p);
	__atomic_fetch_add(&work_total, thread_cpu_ns() - t0, __ATOMIC_RELAXED);
	return r;
}

/* ---- the CPU time the emulator offers ---- */

static pvhint_t *emu; /* the process's emulator (pvhint_default), or NULL */
static unsigned emu_vcpus, emu_pcpus, usable_cpus;

static uint64_t neighbour_sum(void)
{
	uint64_t s = 0;
	for (unsigned v = 0; emu && v < emu_vcpus; v++) {
		struct pvhint_emu_stats st;
		if (pvhint_emu_stats(emu, v, &st) == 0)
			s += st.neighbour_ns;
	}
	return s;
}

struct span {
	uint64_t t0, nb0;
	double offered_ns; /* the sum over the spans of a run */
};

static void span_begin(struct span *s)
{
	s->nb0 = neighbour_sum();
	s->t0 = os_now_ns();
}

static void span_end(struct span *s)
{
	double el = (double)(os_now_ns() - s->t0), nb = (double)(neighbour_sum() - s->nb0);
	double p = emu ? emu_pcpus * el - nb : usable_cpus * el;
	/* An emulator of more pCPUs than the machine gives us cannot offer more than it. */
	if (p > usable_cpus * el)
		p = usable_cpus * el;
	s->offered_ns += p;
}

/* ---- shapes ---- */

/* A binary tree of ULTs: every worker produces work, so queues fill everywhere and a thief
 * has a choice of victims. */
static void *tree(void *p)
{
	uintptr_t depth = (uintptr_t)p;
	if (depth == 0)
		return work(p);
	pvrt_thread_t a, b;
	if (pvrt_thread_create(&a, NULL, tree, (void *)(depth - 1)) ||
	    pvrt_thread_create(&b, NULL, tree, (void *)(depth - 1)))
		abort();
	pvrt_thread_join(a, NULL);
	pvrt_thread_join(b, NULL);
	return NULL;
}

static void fork_join(pvrt_thread_t *t, long n)
{
	for (long i = 0; i < n; i++)
		if (pvrt_thread_create(&t[i], NULL, work, (void *)(uintptr_t)i))
			abort();
	for (long i = 0; i < n; i++)
		pvrt_thread_join(t[i], NULL);
}

static struct {
	pvrt_mutex_t mu;
	pvrt_cond_t cv;
	int turn; /* 0: the pinger's, 1: the ponger's */
} pp;

static void *ponger(void *arg)
{
	(void)arg;
	pvrt_mutex_lock(&pp.mu);
	for (int i = 0; i < PINGS; i++) {
		while (pp.turn != 1)
			pvrt_cond_wait(&pp.cv, &pp.mu);
		pp.turn = 0;
		pvrt_cond_signal(&pp.cv);
	}
	pvrt_mutex_unlock(&pp.mu);
	return NULL;
}

/* PINGS round trips between the primary and a ULT; returns the elapsed ns. */
static uint64_t ping_pong(void)
{
	pvrt_thread_t t;
	pvrt_mutex_init(&pp.mu, PVRT_MUTEX_NORMAL);
	pvrt_cond_init(&pp.cv, CLOCK_MONOTONIC);
	pp.turn = 0;
	uint64_t t0 = os_now_ns();
	if (pvrt_thread_create(&t, NULL, ponger, NULL))
		abort();
	pvrt_mutex_lock(&pp.mu);
	for (int i = 0; i < PINGS; i++) {
		pp.turn = 1;
		pvrt_cond_signal(&pp.cv);
		while (pp.turn != 0)
			pvrt_cond_wait(&pp.cv, &pp.mu);
	}
	pvrt_mutex_unlock(&pp.mu);
	pvrt_thread_join(t, NULL);
	uint64_t el = os_now_ns() - t0;
	pvrt_cond_destroy(&pp.cv);
	pvrt_mutex_destroy(&pp.mu);
	return el;
}

static void bm_sched(pvrt_bench_state *st)
{
	int shape = (int)pvrt_bench_arg(st, 1);
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.sched = policy[pvrt_bench_arg(st, 0)];
	c.slice_ns = -1; /* see the file comment */
	if (emu && !getenv("PVRT_WORKERS"))
		c.workers = emu_vcpus;
	if (pvrt_init(&c)) {
		pvrt_bench_skip(st, pvrt_errmsg());
		return;
	}
	struct pvrt_stats s0 = {0}, s1 = {0};
	long nw = 0;
	for (unsigned i = 0;; i++) {
		struct pvrt_stats w;
		if (pvrt_stats_get_worker(i, &w))
			break;
		nw++;
	}
	long n = shape == WAVES ? 2 * nw : nults;
	pvrt_thread_t *t = malloc(sizeof(*t) * (size_t)(n > 0 ? n : 1));
	if (!t) {
		pvrt_finalize();
		pvrt_bench_skip(st, "out of memory");
		return;
	}
	/* Untimed: a process's first batch also pays for mapping the stacks and faulting them in,
	 * which the first benchmark of a run would carry for its policy alone. */
	if (shape == TREE)
		tree((void *)(uintptr_t)11);
	else
		fork_join(t, shape == PINGPONG ? 2 : n);
	pvrt_stats_get(&s0); /* after the warm-up */
	struct span sp = {0};
	double ms = 0;
	uint64_t work0 = __atomic_load_n(&work_total, __ATOMIC_RELAXED);
	int iters = 0;
	while (pvrt_bench_keep_running(st)) {
		uint64_t t0 = os_now_ns();
		switch (shape) {
		case FORKJOIN:
			span_begin(&sp);
			fork_join(t, n);
			span_end(&sp);
			break;
		case TREE:
			span_begin(&sp);
			tree((void *)(uintptr_t)11); /* 2048 leaves */
			span_end(&sp);
			break;
		case WAVES:
			for (int k = 0; k < WAVES_N; k++) {
				/* The gap lets every worker run dry and park (the runtime's
				 * halt-poll window is at most 200 us by default). */
				pvrt_thread_sleep(WAVE_GAP_US * 1000ull);
				span_begin(&sp);
				fork_join(t, n);
				span_end(&sp);
			}
			break;
		default:
			ping_pong();
			break;
		}
		double el = (double)(os_now_ns() - t0) * 1e-9;
		pvrt_bench_set_iteration_time(st, el);
		ms += el * 1e3;
		iters++;
	}
	pvrt_stats_get(&s1);
	free(t);
	pvrt_bench_counter(st, "batch_ms", iters ? ms / iters : 0, PVRT_BENCH_COUNTER_VALUE);
	if (shape == PINGPONG)
		pvrt_bench_counter(st, "rtt_us", iters ? ms * 1e3 / iters / PINGS : 0,
				   PVRT_BENCH_COUNTER_VALUE);
	else if (__atomic_load_n(&work_total, __ATOMIC_RELAXED) > work0)
		pvrt_bench_counter(
		    st, "vs_ideal",
		    sp.offered_ns /
			(double)(__atomic_load_n(&work_total, __ATOMIC_RELAXED) - work0),
		    PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "steals", (double)(s1.steals - s0.steals) / (iters ? iters : 1),
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "lends", (double)(s1.lends - s0.lends) / (iters ? iters : 1),
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_finalize();
}

int main(int argc, char **argv)
{
	const char *e = getenv("PVRT_BENCH_ULTS");
	if (e && atol(e) > 0)
		nults = atol(e);
	cpu_set_t set;
	usable_cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? (unsigned)CPU_COUNT(&set) : 1;
	pvhint_t *h;
	struct pvhint_emu_stats st;
	if (pvhint_default(&h) == 0 && pvhint_emu_stats(h, 0, &st) == 0) {
		emu = h;
		emu_pcpus = st.pcpus;
		emu_vcpus = pvhint_nr_vcpus(h);
	}
	fprintf(stderr, "bench_sched: %s, %u usable CPUs\n", emu ? "emulator" : "no emulator",
		usable_cpus);
	for (int shape = 0; shape < NSHAPES; shape++)
		for (int k = 0; k < 2; k++) {
			char name[64];
			snprintf(name, sizeof(name), "%s/%s", shapes[shape], policy[k]);
			pvrt_bench *b = pvrt_bench_register(strdup(name), bm_sched);
			pvrt_bench_args(b, 2, (int64_t[]){k, shape});
			pvrt_bench_iterations(b, shape == WAVES ? 2 : 5);
			pvrt_bench_manual_time(b);
			pvrt_bench_unit_us(b);
		}
	return pvrt_bench_main(argc, argv);
}
