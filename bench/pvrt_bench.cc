// SPDX-License-Identifier: MIT
// The C face of Google Benchmark: benchmark::State behind an opaque C type.
#include "pvrt_bench.h"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

struct pvrt_bench_state {
	benchmark::State *s;
};

struct pvrt_bench {
	benchmark::internal::Benchmark *b;
};

static std::vector<pvrt_bench *> &registry()
{
	static std::vector<pvrt_bench *> r;
	return r;
}

extern "C" {

pvrt_bench *pvrt_bench_register(const char *name, pvrt_bench_fn fn)
{
	auto *pb = new pvrt_bench;
	pb->b = benchmark::RegisterBenchmark(name, [fn](benchmark::State &s) {
		pvrt_bench_state st{&s};
		fn(&st);
	});
	registry().push_back(pb);
	return pb;
}

pvrt_bench *pvrt_bench_args(pvrt_bench *b, int n, const int64_t *args)
{
	b->b->Args(std::vector<int64_t>(args, args + n));
	return b;
}

pvrt_bench *pvrt_bench_arg_names(pvrt_bench *b, int n, const char *const *names)
{
	b->b->ArgNames(std::vector<std::string>(names, names + n));
	return b;
}

pvrt_bench *pvrt_bench_threads(pvrt_bench *b, int threads)
{
	b->b->Threads(threads);
	return b;
}

pvrt_bench *pvrt_bench_real_time(pvrt_bench *b)
{
	b->b->UseRealTime();
	return b;
}

pvrt_bench *pvrt_bench_manual_time(pvrt_bench *b)
{
	b->b->UseManualTime();
	return b;
}

pvrt_bench *pvrt_bench_min_time(pvrt_bench *b, double seconds)
{
	b->b->MinTime(seconds);
	return b;
}

pvrt_bench *pvrt_bench_iterations(pvrt_bench *b, int64_t iterations)
{
	b->b->Iterations(iterations);
	return b;
}

pvrt_bench *pvrt_bench_repetitions(pvrt_bench *b, int n)
{
	b->b->Repetitions(n);
	return b;
}

pvrt_bench *pvrt_bench_unit_ns(pvrt_bench *b)
{
	b->b->Unit(benchmark::kNanosecond);
	return b;
}

pvrt_bench *pvrt_bench_unit_us(pvrt_bench *b)
{
	b->b->Unit(benchmark::kMicrosecond);
	return b;
}

int pvrt_bench_main(int argc, char **argv)
{
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	for (auto *pb : registry())
		delete pb;
	registry().clear();
	return 0;
}

bool pvrt_bench_keep_running(pvrt_bench_state *st)
{
	return st->s->KeepRunning();
}

bool pvrt_bench_keep_running_batch(pvrt_bench_state *st, int64_t n)
{
	return st->s->KeepRunningBatch(n);
}

int64_t pvrt_bench_arg(pvrt_bench_state *st, int i)
{
	return st->s->range(i);
}

int pvrt_bench_thread_index(pvrt_bench_state *st)
{
	return st->s->thread_index();
}

int pvrt_bench_thread_count(pvrt_bench_state *st)
{
	return st->s->threads();
}

int64_t pvrt_bench_iteration_count(pvrt_bench_state *st)
{
	return st->s->iterations();
}

void pvrt_bench_pause(pvrt_bench_state *st)
{
	st->s->PauseTiming();
}

void pvrt_bench_resume(pvrt_bench_state *st)
{
	st->s->ResumeTiming();
}

void pvrt_bench_set_iteration_time(pvrt_bench_state *st, double seconds)
{
	st->s->SetIterationTime(seconds);
}

void pvrt_bench_set_items(pvrt_bench_state *st, int64_t items)
{
	st->s->SetItemsProcessed(items);
}

void pvrt_bench_set_label(pvrt_bench_state *st, const char *label)
{
	st->s->SetLabel(label);
}

void pvrt_bench_skip(pvrt_bench_state *st, const char *why)
{
	st->s->SkipWithError(why);
}

void pvrt_bench_counter(pvrt_bench_state *st, const char *name, double value,
			enum pvrt_bench_counter_kind kind)
{
	benchmark::Counter::Flags f = benchmark::Counter::kDefaults;
	switch (kind) {
	case PVRT_BENCH_COUNTER_VALUE:
		break;
	case PVRT_BENCH_COUNTER_AVG:
		f = benchmark::Counter::kAvgThreads;
		break;
	case PVRT_BENCH_COUNTER_RATE:
		f = benchmark::Counter::kIsRate;
		break;
	case PVRT_BENCH_COUNTER_PER_ITER:
		f = benchmark::Counter::kAvgIterations;
		break;
	}
	st->s->counters[name] = benchmark::Counter(value, f);
}

} // extern "C"
