// SPDX-License-Identifier: MIT
// The Boost.Fiber peer of bench_ult.c: the same operations, registered through the C shim so
// they run side by side with pvrt's in one binary. Fibers run on the calling thread's default
// round-robin scheduler (one "worker").
#include "pvrt_bench.h"

#include <boost/fiber/all.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace bf = boost::fibers;

static uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

static void BM_create_join_boost(pvrt_bench_state *st)
{
	while (pvrt_bench_keep_running_batch(st, 1000))
		for (int i = 0; i < 1000; i++) {
			bf::fiber f([] {});
			f.join();
		}
}

/* Create N fibers, then join all N; time per fiber (as BM_create_join_batch/pvrt). */
static void BM_create_join_batch_boost(pvrt_bench_state *st)
{
	const int64_t n = pvrt_bench_arg(st, 0);
	std::vector<bf::fiber> f;
	f.reserve(size_t(n));
	for (int64_t i = 0; i < n; i++) /* untimed, as BM_create_join_batch/pvrt's first batch */
		f.emplace_back([] {});
	for (auto &x : f)
		x.join();
	f.clear();
	while (pvrt_bench_keep_running_batch(st, n)) {
		for (int64_t i = 0; i < n; i++)
			f.emplace_back([] {});
		for (auto &x : f)
			x.join();
		f.clear();
	}
}

static void BM_yield_boost(pvrt_bench_state *st)
{
	const long k = 100000;
	while (pvrt_bench_keep_running_batch(st, 2 * k)) {
		auto loop = [k] {
			for (long i = 0; i < k; i++)
				boost::this_fiber::yield();
		};
		bf::fiber a(loop), b(loop);
		a.join();
		b.join();
	}
}

// Wake latency: a fiber on another thread waits on a fiber condition variable; this thread
// notifies. The other thread's scheduler sleeps in the kernel while it has nothing to run.
extern "C" void pvrt_bench_median_us(pvrt_bench_state *st, uint64_t *ns, size_t n);

static void BM_wake_latency_boost(pvrt_bench_state *st)
{
	std::vector<uint64_t> samples;
	bf::mutex m;
	bf::condition_variable cv;
	uint64_t seq = 0;
	volatile uint64_t t1 = 0;
	bool stop = false;
	std::thread th([&] {
		bf::fiber f([&] {
			uint64_t seen = 0;
			std::unique_lock<bf::mutex> lk(m);
			while (!stop) {
				cv.wait(lk, [&] { return seq != seen || stop; });
				t1 = now_ns();
				seen = seq;
			}
		});
		f.join();
	});
	while (pvrt_bench_keep_running(st)) {
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
		t1 = 0;
		uint64_t t0 = now_ns();
		{
			std::unique_lock<bf::mutex> lk(m);
			seq++;
		}
		cv.notify_one();
		while (!t1)
			;
		pvrt_bench_set_iteration_time(st, double(t1 - t0) * 1e-9);
		samples.push_back(t1 - t0);
	}
	pvrt_bench_median_us(st, samples.data(), samples.size());
	{
		std::unique_lock<bf::mutex> lk(m);
		stop = true;
	}
	cv.notify_one();
	th.join();
}

static double cpu_seconds()
{
	rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

static void BM_idle_cpu_boost(pvrt_bench_state *st)
{
	double cpu = 0;
	while (pvrt_bench_keep_running(st)) {
		double c0 = cpu_seconds();
		boost::this_fiber::sleep_for(std::chrono::seconds(2));
		cpu += cpu_seconds() - c0;
	}
	pvrt_bench_counter(st, "cpu_s_per_2s", cpu, PVRT_BENCH_COUNTER_PER_ITER);
}

extern "C" void boost_fiber_register(void)
{
	pvrt_bench_unit_ns(pvrt_bench_register("BM_create_join/boost_fiber", BM_create_join_boost));
	for (int64_t n : {1, 16, 17, 64, 1000, 10000})
		pvrt_bench_unit_ns(
		    pvrt_bench_args(pvrt_bench_register("BM_create_join_batch/boost_fiber",
							BM_create_join_batch_boost),
				    1, &n));
	pvrt_bench_unit_ns(pvrt_bench_register("BM_yield/boost_fiber", BM_yield_boost));
	pvrt_bench *b = pvrt_bench_register("BM_wake_latency/boost_fiber", BM_wake_latency_boost);
	pvrt_bench_unit_us(pvrt_bench_manual_time(pvrt_bench_iterations(b, 300)));
	b = pvrt_bench_register("BM_idle_cpu/boost_fiber", BM_idle_cpu_boost);
	pvrt_bench_unit_ns(pvrt_bench_iterations(b, 1));
}
