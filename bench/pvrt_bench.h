/* SPDX-License-Identifier: MIT */
/*
 * pvrt_bench: Google Benchmark for benchmarks written in C.
 *
 *   static void BM_x(pvrt_bench_state *st) {
 *           int64_t n = pvrt_bench_arg(st, 0);
 *           while (pvrt_bench_keep_running_batch(st, 1000))
 *                   for (int i = 0; i < 1000; i++) work(n);
 *   }
 *   int main(int argc, char **argv) {
 *           pvrt_bench *b = pvrt_bench_register("BM_x", BM_x);
 *           pvrt_bench_args(b, 1, (int64_t[]){64});
 *           return pvrt_bench_main(argc, argv);
 *   }
 *
 * Every Google Benchmark flag works (--benchmark_format=json, _filter, _repetitions, ...).
 */
#ifndef PVRT_BENCH_H
#define PVRT_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pvrt_bench_state pvrt_bench_state;
typedef struct pvrt_bench pvrt_bench;
typedef void (*pvrt_bench_fn)(pvrt_bench_state *st);

/* Registration (before pvrt_bench_main). Each returns b for chaining in C style. */
pvrt_bench *pvrt_bench_register(const char *name, pvrt_bench_fn fn);
pvrt_bench *pvrt_bench_args(pvrt_bench *b, int n, const int64_t *args); /* one argument tuple */
pvrt_bench *pvrt_bench_arg_names(pvrt_bench *b, int n, const char *const *names);
pvrt_bench *pvrt_bench_threads(pvrt_bench *b, int threads);
pvrt_bench *pvrt_bench_real_time(pvrt_bench *b);
pvrt_bench *pvrt_bench_manual_time(pvrt_bench *b);
pvrt_bench *pvrt_bench_min_time(pvrt_bench *b, double seconds);
pvrt_bench *pvrt_bench_iterations(pvrt_bench *b, int64_t iterations);
pvrt_bench *pvrt_bench_repetitions(pvrt_bench *b, int n);
pvrt_bench *pvrt_bench_unit_ns(pvrt_bench *b);
pvrt_bench *pvrt_bench_unit_us(pvrt_bench *b);

/* Runs the registered benchmarks; argv as for benchmark::Initialize. Returns the exit status. */
int pvrt_bench_main(int argc, char **argv);

/* ---- inside a benchmark function ---- */
bool pvrt_bench_keep_running(pvrt_bench_state *st);
/* Counts n iterations per true; the body must run n times each time it returns true. */
bool pvrt_bench_keep_running_batch(pvrt_bench_state *st, int64_t n);
int64_t pvrt_bench_arg(pvrt_bench_state *st, int i);
int pvrt_bench_thread_index(pvrt_bench_state *st);
int pvrt_bench_thread_count(pvrt_bench_state *st);
int64_t pvrt_bench_iteration_count(pvrt_bench_state *st);
void pvrt_bench_pause(pvrt_bench_state *st);
void pvrt_bench_resume(pvrt_bench_state *st);
void pvrt_bench_set_iteration_time(pvrt_bench_state *st, double seconds);
void pvrt_bench_set_items(pvrt_bench_state *st, int64_t items);
void pvrt_bench_set_label(pvrt_bench_state *st, const char *label);
void pvrt_bench_skip(pvrt_bench_state *st, const char *why);

enum pvrt_bench_counter_kind {
	PVRT_BENCH_COUNTER_VALUE,    /* reported as is (summed over threads) */
	PVRT_BENCH_COUNTER_AVG,	     /* averaged over threads */
	PVRT_BENCH_COUNTER_RATE,     /* divided by elapsed seconds */
	PVRT_BENCH_COUNTER_PER_ITER, /* divided by iterations */
};
void pvrt_bench_counter(pvrt_bench_state *st, const char *name, double value,
			enum pvrt_bench_counter_kind kind);

/* Keep the compiler from deleting a computation or hoisting a load out of a loop. */
#define pvrt_bench_do_not_optimize(v) __asm__ volatile("" : : "r,m"(v) : "memory")
#define pvrt_bench_clobber()	      __asm__ volatile("" : : : "memory")

#ifdef __cplusplus
}
#endif

#endif /* PVRT_BENCH_H */
