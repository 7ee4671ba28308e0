// SPDX-License-Identifier: MIT
// C++ under pvrt-run --mn: std::thread, std::mutex, std::condition_variable, thread_local
// objects (constructed per thread, destroyed at each thread's exit), exceptions thrown and
// caught on a ULT's stack, and pthread_exit unwinding C++ frames (destructors run).
#include "mn_check.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <pthread.h>
#include <queue>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static std::atomic<int> ctors{0}, dtors{0}, unwound{0};

struct PerThread {
	int id = -1;
	std::string name;
	PerThread()
	{
		ctors++;
	}
	~PerThread()
	{
		dtors++;
	}
};
static thread_local PerThread pt;

struct Guard {
	~Guard()
	{
		unwound++;
	}
};

static std::mutex m;
static std::condition_variable cv;
static std::queue<int> q;
static bool done;

static void consumer(int id, long *sum)
{
	mn_tid_seen();
	pt.id = id;
	pt.name = "consumer " + std::to_string(id);
	for (;;) {
		std::unique_lock<std::mutex> l(m);
		cv.wait(l, [] { return !q.empty() || done; });
		if (q.empty())
			break;
		int v = q.front();
		q.pop();
		l.unlock();
		*sum += v;
		CHECK_EQ(pt.id, id);
		CHECK(pt.name == "consumer " + std::to_string(id));
		try {
			if (v % 100 == 0)
				throw std::runtime_error("multiple of 100");
		} catch (const std::exception &e) {
			CHECK(std::string(e.what()) == "multiple of 100");
			std::this_thread::yield();
			CHECK_EQ(pt.id, id);
		}
	}
}

static void exiter()
{
	Guard g;
	pthread_exit(nullptr);
}

int main()
{
	const int nc = 8, n = 10000;
	std::vector<long> sums(nc);
	std::vector<std::thread> ts;
	for (int i = 0; i < nc; i++)
		ts.emplace_back(consumer, i, &sums[i]);
	for (int i = 1; i <= n; i++) {
		{
			std::lock_guard<std::mutex> l(m);
			q.push(i);
		}
		cv.notify_one();
	}
	{
		std::lock_guard<std::mutex> l(m);
		done = true;
	}
	cv.notify_all();
	for (auto &t : ts)
		t.join();
	long total = 0;
	for (long s : sums)
		total += s;
	CHECK_EQ(total, (long)n * (n + 1) / 2);
	// Each consumer constructed and destroyed its own thread_local (main's lives on).
	CHECK_EQ(dtors.load(), nc);
	CHECK(ctors.load() >= nc);

	std::thread e(exiter);
	e.join();
	CHECK_EQ(unwound.load(), 1);
	mn_check_ults(nc + 1);
	printf("mn_cxx: ok\n");
	return 0;
}
