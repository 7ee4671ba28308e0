// SPDX-License-Identifier: MIT
// C++20 synchronisation under pvrt-run --mn. libstdc++ builds std::barrier, std::latch,
// std::counting_semaphore and std::atomic<T>::wait on its own futex calls (atomic_wait: a spin,
// then SYS_futex), not on pthread's: a ULT that waits there blocks its worker's kernel thread
// until the runtime hands the worker to a spare. std::jthread's stop_token wakes a
// condition_variable_any, std::shared_mutex is a pthread rwlock, std::async a thread per task.
// Each part checks its own result; the threads must be ULTs (mn_check_ults).
#include "mn_check.h"

#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <future>
#include <latch>
#include <mutex>
#include <semaphore>
#include <shared_mutex>
#include <stop_token>
#include <thread>
#include <vector>

// std::barrier: every phase sees all arrivals of the previous one (its completion function runs
// once per phase, between them).
static void barrier_phases()
{
	constexpr int n = 6, phases = 300;
	std::atomic<int> arrived{0};
	int completions = 0;
	bool ok = true;
	std::barrier b(n, [&]() noexcept {
		// Runs in one thread while the others wait: the phase's arrivals are all in.
		if (arrived.load() != (completions + 1) * n)
			ok = false;
		completions++;
	});
	std::vector<std::thread> ts;
	for (int i = 0; i < n; i++)
		ts.emplace_back([&] {
			mn_tid_seen();
			for (int p = 0; p < phases; p++) {
				arrived++;
				b.arrive_and_wait();
			}
		});
	for (auto &t : ts)
		t.join();
	CHECK(ok);
	CHECK_EQ(completions, phases);
}

// std::latch and std::counting_semaphore: at most 3 holders at once, all 10 done.
static void latch_semaphore()
{
	constexpr int n = 10;
	std::counting_semaphore<3> sem(3);
	std::latch start(n), done(n);
	std::atomic<int> inside{0}, most{0}, passes{0};
	std::vector<std::thread> ts;
	for (int i = 0; i < n; i++)
		ts.emplace_back([&] {
			mn_tid_seen();
			start.arrive_and_wait();
			for (int k = 0; k < 200; k++) {
				sem.acquire();
				int v = ++inside, m = most.load();
				while (v > m && !most.compare_exchange_weak(m, v))
					;
				if (k % 16 == 0)
					std::this_thread::yield();
				--inside;
				sem.release();
				passes++;
			}
			done.count_down();
		});
	done.wait();
	for (auto &t : ts)
		t.join();
	CHECK(most.load() <= 3);
	CHECK(most.load() >= 1);
	CHECK_EQ(passes.load(), n * 200);
}

// std::atomic<int>::wait/notify_one: a ping-pong of 2000 turns between two threads.
static void atomic_wait()
{
	std::atomic<int> turn{0};
	constexpr int rounds = 2000;
	auto player = [&](int me) {
		mn_tid_seen();
		for (int r = 0; r < rounds; r++) {
			int want = 2 * r + me;
			for (int v = turn.load(); v != want; v = turn.load())
				turn.wait(v);
			turn.store(want + 1);
			turn.notify_one();
		}
	};
	std::thread a(player, 0), b(player, 1);
	a.join();
	b.join();
	CHECK_EQ(turn.load(), 2 * rounds);
}

// std::jthread: a stop request wakes a condition_variable_any wait that no notify reaches.
static void jthread_stop()
{
	std::mutex m;
	std::condition_variable_any cv;
	std::atomic<int> stopped{0};
	{
		std::vector<std::jthread> js;
		for (int i = 0; i < 4; i++)
			js.emplace_back([&](std::stop_token st) {
				mn_tid_seen();
				std::unique_lock l(m);
				// Nothing ever becomes true but the stop request.
				bool woke = cv.wait(l, st, [] { return false; });
				if (!woke && st.stop_requested())
					stopped++;
			});
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	} // each jthread's destructor requests a stop and joins
	CHECK_EQ(stopped.load(), 4);
}

// std::shared_mutex: writers alone, readers together, no reader sees a writer inside.
static void shared_mutex_rw()
{
	std::shared_mutex sm;
	std::atomic<int> readers{0}, writers{0};
	std::atomic<bool> bad{false};
	long value = 0;
	std::vector<std::thread> ts;
	for (int i = 0; i < 8; i++)
		ts.emplace_back([&, i] {
			mn_tid_seen();
			for (int k = 0; k < 1000; k++) {
				if ((k + i) % 8 == 0) {
					std::unique_lock l(sm);
					if (++writers != 1 || readers.load() != 0)
						bad = true;
					value++;
					--writers;
				} else {
					std::shared_lock l(sm);
					readers++;
					if (writers.load() != 0)
						bad = true;
					readers--;
				}
			}
		});
	for (auto &t : ts)
		t.join();
	CHECK(!bad.load());
	CHECK_EQ(value, 8L * 1000 / 8);
}

// std::async with launch::async: a thread per task, results through futures.
static void async_tasks()
{
	std::vector<std::future<long>> fs;
	for (int i = 0; i < 48; i++)
		fs.push_back(std::async(std::launch::async, [i] {
			mn_tid_seen();
			long s = 0;
			for (int k = 0; k <= i * 100; k++)
				s += k;
			return s;
		}));
	long total = 0, want = 0;
	for (int i = 0; i < 48; i++) {
		total += fs[(size_t)i].get();
		want += (long)i * 100 * (i * 100 + 1) / 2;
	}
	CHECK_EQ(total, want);
}

int main()
{
	mn_tid_seen();
	barrier_phases();
	latch_semaphore();
	atomic_wait();
	jthread_stop();
	shared_mutex_rw();
	async_tasks();
	mn_check_ults(6 + 10 + 2 + 4 + 8 + 48 + 1);
	printf("mn_cxx20: ok\n");
	return 0;
}
