/* SPDX-License-Identifier: MIT */
/*
 * Lock throughput and fairness: pvrt mutex (hints on and off) vs glibc mutex (default,
 * adaptive) vs pthread_spin vs ticket vs MCS, short and long critical sections.
 *
 * One benchmark iteration runs the workload of lockwork.h for PVRT_BENCH_SECONDS (default 0.5)
 * with T threads: PVRT_BENCH_THREADS, else the emulator's vCPU count when PVRT_HINTS=emu, else
 * the CPUs available. Counters: ops_per_s (acquisitions per second, all threads) and fairness
 * (min/max per-thread acquisitions). Use --benchmark_repetitions=N for medians;
 * bench/locks/overcommit.sh runs it undercommitted and at 1.5x/2x/3x emulated overcommit and
 * prints the ratios. PVRT_BENCH_STATS=1 prints the pvrt mutex statistics at the end.
 * Also counted: thread_min_ops/thread_max_ops (acquisitions/s of the slowest and fastest thread).
 * PVRT_BENCH_LATENCY=1 adds lat_p50_us, lat_p99_us, lat_p999_us: acquisition latency (lock call
 * to acquired) from sampled acquisitions (lockwork.h: two clock reads in one acquisition of 8,
 * fewer as a thread's sample buffer fills; without the variable the measured loop has no
 * sampling code).
 */
#include "lockwork.h"

#include <pvrt_bench.h>

#include <sched.h>
#include <unistd.h>

static int threads;
static double seconds = 0.5;
static bool latency;

static void bm_lock(pvrt_bench_state *st)
{
	struct lw_config c = {
	    .kind = (enum lw_kind)pvrt_bench_arg(st, 0),
	    .threads = threads,
	    .cs_work = (unsigned)pvrt_bench_arg(st, 1),
	    .out_work = 20,
	    .seconds = seconds,
	    .latency = latency,
	};
	struct lw_result r = {0};
	while (pvrt_bench_keep_running(st)) {
		if (lw_run(&c, &r)) {
			pvrt_bench_skip(st, "workload failed");
			return;
		}
		pvrt_bench_set_iteration_time(st, r.elapsed);
	}
	pvrt_bench_counter(st, "ops_per_s", r.ops_per_s, PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "fairness", r.fairness, PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "threads", threads, PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "thread_min_ops", (double)r.thread_min / r.elapsed,
			   PVRT_BENCH_COUNTER_VALUE);
	pvrt_bench_counter(st, "thread_max_ops", (double)r.thread_max / r.elapsed,
			   PVRT_BENCH_COUNTER_VALUE);
	if (latency) {
		pvrt_bench_counter(st, "lat_p50_us", r.lat_p50 * 1e-3, PVRT_BENCH_COUNTER_VALUE);
		pvrt_bench_counter(st, "lat_p99_us", r.lat_p99 * 1e-3, PVRT_BENCH_COUNTER_VALUE);
		pvrt_bench_counter(st, "lat_p999_us", r.lat_p999 * 1e-3, PVRT_BENCH_COUNTER_VALUE);
	}
}

int main(int argc, char **argv)
{
	lw_env(&seconds, &threads);
	const char *e = getenv("PVRT_BENCH_LATENCY");
	if (e && strcmp(e, "0") && strcmp(e, "1")) {
		fprintf(stderr, "bench_locks: PVRT_BENCH_LATENCY must be 0 or 1, not '%s'\n", e);
		return 2;
	}
	latency = e && !strcmp(e, "1");
	if (!threads) {
		pvhint_t *def = NULL;
		pvhint_default(&def);
		if (def && !strcmp(pvhint_source_name(def), "emu"))
			threads = (int)pvhint_nr_vcpus(def);
	}
	if (!threads) {
		cpu_set_t set;
		threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 2;
	}
	if (threads > 64)
		threads = 64;
	static const int64_t cs[] = {4, 1000}; /* short (~5 ns) and long (~1.5 us) sections */
	static const char *const csname[] = {"short", "long"};
	for (int k = 0; k < LW_NKINDS; k++)
		for (int j = 0; j < 2; j++) {
			char name[64];
			snprintf(name, sizeof(name), "lock/%s/%s", lw_names[k], csname[j]);
			pvrt_bench *b = pvrt_bench_register(strdup(name), bm_lock);
			pvrt_bench_args(b, 2, (int64_t[]){k, cs[j]});
			pvrt_bench_iterations(b, 1);
			pvrt_bench_manual_time(b);
			pvrt_bench_unit_us(b);
		}
	bool stats = getenv("PVRT_BENCH_STATS") != NULL;
	pvrt_locks_stats_enable(stats);
	int r = pvrt_bench_main(argc, argv);
	if (stats) {
		struct pvrt_lock_stats s;
		pvrt_locks_stats_get(PVRT_LOCK_MUTEX, &s);
		fprintf(stderr,
			"pvrt mutex: acquisitions %llu contended %llu spin-cut %llu parks %llu "
			"hand-offs %llu yields %llu\n",
			(unsigned long long)s.acquisitions, (unsigned long long)s.contended,
			(unsigned long long)s.spin_cut, (unsigned long long)s.parks,
			(unsigned long long)s.handoffs, (unsigned long long)s.yields);
	}
	return r;
}
