/* SPDX-License-Identifier: MIT */
/*
 * Preemption and hand-off (runtime/preempt.c, sysmon.c). Progress properties only: each case
 * deadlocks (and the ctest timeout fails it) without the mechanism it tests.
 *   spin      a ULT spins on a flag that only a ULT of the same worker sets (preemption)
 *   pipe      two ULTs of one worker ping-pong over pipes with blocking read/write (hand-off)
 *   waitpid   a ULT in waitpid for a child that exits only once a ULT of the same worker let it
 *   sleep     a ULT sleeping in the kernel (nanosleep loop) until another ULT of its worker ran
 *   futexlock a ULT preempted while holding a library's own futex lock that the next ULT on its
 *             worker then waits for in the kernel (libc's internal locks are such locks)
 *   malloc    many ULTs on one worker doing malloc/snprintf/fprintf work, preempted
 *   stress    many ULTs yielding, computing and taking pvrt mutexes with a tiny slice
 *   idle      an idle runtime with preemption on uses (next to) no CPU
 *   lost      a ULT whose thread lost its worker during a blocking call and then runs in a
 *             shared library stays on its thread there (sysmon's kicks move it only at a safe
 *             point), then finishes on a worker
 * Usage: test_rt_preempt CASE...  (no case: all)
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/mutex.h>
#include <pvrt/thread.h>

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pvrt_thread_t spawn(void *(*fn)(void *), void *arg, int worker)
{
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.worker = worker;
	pvrt_thread_t t;
	CHECK_EQ(pvrt_thread_create(&t, &a, fn, arg), 0);
	return t;
}

static void start(void)
{
	CHECK_EQ(pvrt_init(NULL), 0);
}

static struct pvrt_stats stop(void)
{
	struct pvrt_stats s;
	CHECK_EQ(pvrt_stats_get(&s), 0);
	CHECK_EQ(pvrt_finalize(), 0);
	/* Worker 0 may have been handed off: finalize brings the primary home. */
	CHECK_EQ(syscall(SYS_gettid), getpid());
	return s;
}

/* ---------------------------------------------------------------- spin */

static int spin_started, spin_flag;

static void *spinner(void *a)
{
	(void)a;
	__atomic_store_n(&spin_started, 1, __ATOMIC_RELAXED);
	while (!__atomic_load_n(&spin_flag, __ATOMIC_RELAXED))
		; /* no pvrt call: only preemption lets the setter run */
	return NULL;
}

static void *setter(void *a)
{
	(void)a;
	__atomic_store_n(&spin_flag, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void case_spin(void)
{
	start();
	spin_started = spin_flag = 0;
	pvrt_thread_t s = spawn(spinner, NULL, 0);
	/* The primary is bound to worker 0 too: it runs again only if the spinner is preempted. */
	while (!__atomic_load_n(&spin_started, __ATOMIC_RELAXED))
		pvrt_thread_yield();
	pvrt_thread_t t = spawn(setter, NULL, 0);
	CHECK_EQ(pvrt_thread_join(s, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	struct pvrt_stats st = stop();
	CHECK(st.preemptions >= 1);
	struct pvrt_stats w0;
	CHECK_EQ(pvrt_stats_get_worker(0, &w0), -ENXIO); /* finalized */
	printf("spin: %llu preemptions\n", (unsigned long long)st.preemptions);
}

/* ---------------------------------------------------------------- pipe */

#define ROUNDS 20
static int ping[2], pong[2];

static void full_read(int fd, void *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		CHECK(r > 0 || (r < 0 && errno == EINTR));
		if (r > 0)
			got += (size_t)r;
	}
}

static void *pinger(void *a)
{
	(void)a;
	for (int i = 0; i < ROUNDS; i++) {
		CHECK_EQ(write(ping[1], &i, sizeof(i)), sizeof(i));
		int j;
		full_read(pong[0], &j, sizeof(j)); /* blocks in the kernel */
		CHECK_EQ(j, i + 1000);
	}
	return NULL;
}

static void *ponger(void *a)
{
	int announce = (int)(intptr_t)a;
	for (int i = 0; i < ROUNDS; i++) {
		int j;
		if (announce)
			pvrt_syscall_enter();
		full_read(ping[0], &j, sizeof(j));
		if (announce)
			pvrt_syscall_exit();
		CHECK_EQ(j, i);
		j += 1000;
		CHECK_EQ(write(pong[1], &j, sizeof(j)), sizeof(j));
	}
	return NULL;
}

static void case_pipe(void)
{
	for (int announce = 0; announce < 2; announce++) {
		start();
		CHECK_EQ(pipe(ping), 0);
		CHECK_EQ(pipe(pong), 0);
		/* The reader first, so that it blocks in the kernel with the writer queued behind.
		 */
		pvrt_thread_t b = spawn(ponger, (void *)(intptr_t)announce, 0);
		pvrt_thread_t a = spawn(pinger, NULL, 0);
		CHECK_EQ(pvrt_thread_join(a, NULL), 0);
		CHECK_EQ(pvrt_thread_join(b, NULL), 0);
		int away = syscall(SYS_gettid) != getpid(); /* the primary on another thread */
		struct pvrt_stats st = stop();
		CHECK(st.handoffs >= 1);
		printf("pipe (announced %d): %llu hand-offs%s\n", announce,
		       (unsigned long long)st.handoffs, away ? ", primary brought home" : "");
		close(ping[0]), close(ping[1]), close(pong[0]), close(pong[1]);
	}
}

/* ---------------------------------------------------------------- waitpid */

static int gate[2];
static pid_t child;

static void *releaser(void *a);
static pvrt_thread_t helper;

static void *waiter(void *a)
{
	(void)a;
	/* Queued behind us on our worker: it runs only if the worker is handed off. */
	helper = spawn(releaser, NULL, 0);
	int status;
	pid_t r;
	while ((r = waitpid(child, &status, 0)) < 0 && errno == EINTR)
		;
	CHECK_EQ(r, child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
	return NULL;
}

static void *releaser(void *a)
{
	(void)a;
	char c = 'x';
	CHECK_EQ(write(gate[1], &c, 1), 1);
	return NULL;
}

static void case_waitpid(void)
{
	CHECK_EQ(pipe(gate), 0);
	child = fork();
	CHECK(child >= 0);
	if (!child) {
		char c;
		_exit(read(gate[0], &c, 1) == 1 ? 7 : 1);
	}
	start();
	pvrt_thread_t a = spawn(waiter, NULL, 0);
	CHECK_EQ(pvrt_thread_join(a, NULL), 0);
	CHECK_EQ(pvrt_thread_join(helper, NULL), 0);
	struct pvrt_stats st = stop();
	CHECK(st.handoffs >= 1);
	close(gate[0]), close(gate[1]);
}

/* ---------------------------------------------------------------- sleep */

static int other_ran;

static void *other(void *a);

static void *ksleeper(void *a)
{
	(void)a;
	helper = spawn(other, NULL, 0); /* queued behind us, as in waitpid */
	struct timespec ts = {0, 2000000};
	while (!__atomic_load_n(&other_ran, __ATOMIC_ACQUIRE))
		nanosleep(&ts, NULL); /* the kernel's sleep, not pvrt's */
	return NULL;
}

static void *other(void *a)
{
	(void)a;
	__atomic_store_n(&other_ran, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void case_sleep(void)
{
	start();
	other_ran = 0;
	pvrt_thread_t a = spawn(ksleeper, NULL, 0);
	CHECK_EQ(pvrt_thread_join(a, NULL), 0);
	CHECK_EQ(pvrt_thread_join(helper, NULL), 0);
	struct pvrt_stats st = stop();
	CHECK(st.handoffs + st.preemptions >= 1);
}

/* ---------------------------------------------------------------- futexlock */

/* A library's own lock: a futex word, waited for in the kernel (as glibc's lll_lock). */
static uint32_t flock_word;
static int holder_in;

static void flock_lock(void)
{
	uint32_t z = 0;
	while (!__atomic_compare_exchange_n(&flock_word, &z, 1, 0, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		syscall(SYS_futex, &flock_word, FUTEX_WAIT_PRIVATE, z, NULL, NULL, 0);
		z = 0;
	}
}

static void flock_unlock(void)
{
	__atomic_store_n(&flock_word, 0, __ATOMIC_RELEASE);
	syscall(SYS_futex, &flock_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *holder(void *a)
{
	(void)a;
	flock_lock();
	__atomic_store_n(&holder_in, 1, __ATOMIC_RELAXED);
	/* Hold it until the contender ran (so it waited in the kernel): preemption lets it. */
	while (__atomic_load_n(&holder_in, __ATOMIC_RELAXED) != 2)
		;
	flock_unlock();
	return NULL;
}

static void *contender(void *a)
{
	(void)a;
	__atomic_store_n(&holder_in, 2, __ATOMIC_RELAXED);
	flock_lock(); /* blocks this worker's thread in the kernel: a hand-off runs the holder */
	flock_unlock();
	return NULL;
}

static void case_futexlock(void)
{
	start();
	holder_in = 0;
	pvrt_thread_t h = spawn(holder, NULL, 0);
	while (!__atomic_load_n(&holder_in, __ATOMIC_RELAXED))
		pvrt_thread_yield();
	pvrt_thread_t c = spawn(contender, NULL, 0);
	CHECK_EQ(pvrt_thread_join(h, NULL), 0);
	CHECK_EQ(pvrt_thread_join(c, NULL), 0);
	struct pvrt_stats st = stop();
	CHECK(st.preemptions >= 1);
	printf("futexlock: %llu preemptions, %llu hand-offs\n", (unsigned long long)st.preemptions,
	       (unsigned long long)st.handoffs);
}

/* ---------------------------------------------------------------- malloc */

static FILE *devnull;

static void *allocator(void *a)
{
	unsigned id = (unsigned)(uintptr_t)a;
	for (int i = 0; i < 2000; i++) {
		size_t n = 16 + (size_t)((i * 37 + id) % 2000);
		unsigned char *p = malloc(n);
		CHECK(p);
		memset(p, (int)(id & 0xff), n);
		char line[64];
		snprintf(line, sizeof(line), "%u %d %zu", id, i, n);
		fprintf(devnull, "%s\n", line);
		for (size_t k = 0; k < n; k += 97)
			CHECK_EQ(p[k], id & 0xff);
		free(p);
	}
	return NULL;
}

static void case_malloc(void)
{
	devnull = fopen("/dev/null", "w");
	CHECK(devnull);
	start();
	pvrt_thread_t t[32];
	for (unsigned i = 0; i < 32; i++)
		t[i] = spawn(allocator, (void *)(uintptr_t)i, i % 2 ? 0 : -1);
	for (unsigned i = 0; i < 32; i++)
		CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	struct pvrt_stats st = stop();
	printf("malloc: %llu preemptions, %llu hand-offs\n", (unsigned long long)st.preemptions,
	       (unsigned long long)st.handoffs);
	fclose(devnull);
}

/* ---------------------------------------------------------------- lost */

int pvrt_test_spin_here(uint64_t ns); /* preempt_lib.c, a shared library */

static int lpipe[2];
static int lost_moves, lost_reading;

static void *lost_reader(void *a)
{
	(void)a;
	char c;
	/* Blocks the worker's thread with lost_writer queued behind: sysmon hands the worker
	 * off, and the read returns on a thread without one. */
	__atomic_store_n(&lost_reading, 1, __ATOMIC_RELEASE);
	CHECK_EQ(read(lpipe[0], &c, 1), 1);
	/* sysmon kicks this thread every tick from now on, to move us back to a worker. The
	 * library's code is not a safe point: before the fix the first kick moved us mid-call. */
	lost_moves = pvrt_test_spin_here(200000000);
	return NULL;
}

static void *lost_writer(void *a)
{
	(void)a;
	/* Both are bound to worker 0: once the reader is about to read, we run again only when
	 * its thread blocked in the read and the worker was handed off. */
	while (!__atomic_load_n(&lost_reading, __ATOMIC_ACQUIRE))
		pvrt_thread_yield();
	pvrt_thread_yield();
	CHECK_EQ(write(lpipe[1], "x", 1), 1);
	return NULL;
}

static void case_lost(void)
{
	start();
	CHECK_EQ(pipe(lpipe), 0);
	lost_reading = 0;
	pvrt_thread_t r = spawn(lost_reader, NULL, 0);
	pvrt_thread_t w = spawn(lost_writer, NULL, 0);
	CHECK_EQ(pvrt_thread_join(r, NULL), 0);
	CHECK_EQ(pvrt_thread_join(w, NULL), 0);
	struct pvrt_stats st = stop();
	CHECK(st.handoffs >= 1);
	CHECK_EQ(lost_moves, 0);
	printf("lost: %llu hand-offs, no move inside the library\n",
	       (unsigned long long)st.handoffs);
	close(lpipe[0]), close(lpipe[1]);
}

/* ---------------------------------------------------------------- stress */

#define SULTS 64
static pvrt_mutex_t smx;
static uint64_t scount;
static uint64_t sink; /* atomic: written by ULTs on all workers */

static void *stresser(void *a)
{
	unsigned id = (unsigned)(uintptr_t)a;
	for (int i = 0; i < 200; i++) {
		uint64_t x = id;
		for (int k = 0; k < 20000 + (int)(id * 997 % 20000); k++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
		__atomic_store_n(&sink, x, __ATOMIC_RELAXED);
		CHECK_EQ(pvrt_mutex_lock(&smx), 0);
		uint64_t v = scount;
		if (i % 3 == 0)
			pvrt_thread_yield(); /* inside the critical section too */
		scount = v + 1;
		CHECK_EQ(pvrt_mutex_unlock(&smx), 0);
		if (i % 5 == 0)
			pvrt_thread_yield();
	}
	return NULL;
}

static void case_stress(void)
{
	start();
	CHECK_EQ(pvrt_mutex_init(&smx, 0), 0);
	scount = 0;
	pvrt_thread_t t[SULTS];
	for (unsigned i = 0; i < SULTS; i++)
		t[i] = spawn(stresser, (void *)(uintptr_t)i, i % 4 ? -1 : 0);
	for (unsigned i = 0; i < SULTS; i++)
		CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	CHECK_EQ(scount, SULTS * 200);
	CHECK_EQ(pvrt_mutex_destroy(&smx), 0);
	struct pvrt_stats st = stop();
	printf("stress: %llu preemptions, %llu hand-offs, %llu switches\n",
	       (unsigned long long)st.preemptions, (unsigned long long)st.handoffs,
	       (unsigned long long)st.switches);
}

/* ---------------------------------------------------------------- idle */

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void *briefly(void *a)
{
	(void)a;
	__atomic_store_n(&sink, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void case_idle(void)
{
	start();
	pvrt_thread_t t = spawn(briefly, NULL, -1);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	pvrt_thread_sleep(50000000); /* let the workers settle into their parks */
	double c0 = cpu_s();
	pvrt_thread_sleep(1000000000); /* every worker parked: sysmon sleeps too */
	double used = cpu_s() - c0;
	stop();
	printf("idle: %.6f s CPU over 1 s\n", used);
	CHECK(used < 0.05); /* generous: a ticking sysmon alone stays below, spinning does not */
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
		bool preempts; /* needs preemption (off under TSan: see runtime/preempt.c) */
	} cases[] = {{"spin", case_spin, true},		  {"pipe", case_pipe, false},
		     {"waitpid", case_waitpid, false},	  {"sleep", case_sleep, false},
		     {"futexlock", case_futexlock, true}, {"malloc", case_malloc, false},
		     {"stress", case_stress, false},	  {"idle", case_idle, false},
		     {"lost", case_lost, false}};
	const unsigned n = sizeof(cases) / sizeof(cases[0]);
	for (unsigned i = 0; i < n; i++) {
		bool run = argc < 2;
		for (int j = 1; j < argc; j++)
			run |= !strcmp(argv[j], cases[i].name);
#if defined(PVRT_TSAN)
		if (run && cases[i].preempts) {
			printf("%s: skipped (no preemption under TSan)\n", cases[i].name);
			continue;
		}
#endif
		if (run) {
			cases[i].fn();
			fflush(stdout);
		}
	}
	return 0;
}
