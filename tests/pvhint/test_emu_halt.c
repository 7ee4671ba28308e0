/* SPDX-License-Identifier: MIT */
/*
 * Kernel sleep halts a vCPU (slice mode, ksleep sampling). Two vCPUs on one pCPU: vCPU 0's only
 * thread blocks in a plain read() on a pipe (not through pvhint_thread_park), vCPU 1's spins.
 *  1. With the default ksleep sampling, vCPU 0 is seen sleeping (stats.ksleep), is halted (not
 *     preempted) and vCPU 1 gets the whole pCPU: its steal stays near zero.
 *  2. After the pipe is written, vCPU 0's thread runs again (read returned 1, no EINTR), the
 *     vCPU is runnable and the two share the pCPU: both accumulate steal, about half each.
 *  3. With ksleep=0 (only parked threads halt a vCPU, the old model) the same sleeping thread
 *     keeps vCPU 0 runnable and vCPU 1 loses about half its pCPU: the check in 1 can fail.
 *  1-2 again where the bpf program loads (root, BTF), with ksleep=30s: the halt and the wake-up
 *     are seen within seconds, from the program's events (and counts), not the periodic sample
 *     (pvhint/README.md "Exact halts and wake-ups"). With a 10 s quantum as well, no step of
 *     the model comes between, so only the halt event can give vCPU 1 the pCPU. And a thread
 *     that attached to the halted vCPU, detached and runs on without a switch (its count stays
 *     there) must not hide the sleeper's wake-up.
 *  4. Noisy mode, one vCPU: while its thread sleeps in read() its pCPU reads idle outside the
 *     neighbour's share (is_idle about 0.7 of the time); once the thread spins, almost never.
 *  5. Liveness: rounds of threads that attach (often to a held vCPU), meet in a glibc barrier
 *     (a kernel sleep that halts their vCPUs), spin briefly and detach, as a benchmark harness
 *     does; a vCPU must never stay halted while its thread waits for its turn (a ctest timeout
 *     catches a hang).
 * Shares come from the emulator's own steal accounting (time with 'preempted' set), not from the
 * loaded machine's scheduling, and the thresholds leave wide margins (< 0.1 vs about 0.5).
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

static pvhint_t *h;
static int pfd[2];
static int done;
static uint64_t a_progress, b_progress;

static int reader_tid; /* atomic */

static void *reader(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h, 0));
	__atomic_store_n(&reader_tid, (int)gettid(), __ATOMIC_RELEASE);
	char c;
	ssize_t n = read(pfd[0], &c, 1); /* a plain kernel sleep; SA_RESTART: no EINTR */
	CHECK(n == 1);
	while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&a_progress, 1, __ATOMIC_RELAXED);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static void *spinner(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h, 1));
	while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&b_progress, 1, __ATOMIC_RELAXED);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

/* Fraction of the next ms milliseconds vCPU v spent preempted (its steal). */
static void shares(uint64_t ms, double f[2], int *pre0_seen)
{
	uint64_t s0 = pvhint_steal(h, 0), s1 = pvhint_steal(h, 1), t0 = os_now_ns();
	*pre0_seen = 0;
	while (os_now_ns() - t0 < ms * 1000000) {
		test_sleep_us(1000);
		*pre0_seen += pvhint_vcpu_preempted(h, 0);
	}
	double span = (double)(os_now_ns() - t0);
	f[0] = (double)(pvhint_steal(h, 0) - s0) / span;
	f[1] = (double)(pvhint_steal(h, 1) - s1) / span;
}

static void run(const char *name)
{
	bool khalt = strcmp(name, "ksleep=0"), exact = !strcmp(name, "ksleep=30s");
	char spec[80];
	snprintf(spec, sizeof(spec), "vcpus=2,pcpus=1,quantum=2ms,mode=slice,%s", name);
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &h));
	CHECK(!pipe(pfd));
	__atomic_store_n(&done, 0, __ATOMIC_RELAXED);
	pthread_t ta, tb;
	CHECK(!pthread_create(&ta, NULL, reader, NULL));
	CHECK(!pthread_create(&tb, NULL, spinner, NULL));

	/* 1. vCPU 0's thread attached and asleep in read(). */
	struct pvhint_emu_stats st;
	uint64_t t0 = os_now_ns();
	for (;;) {
		CHECK(!pvhint_emu_stats(h, 0, &st));
		if (st.threads == 1 && (khalt ? st.ksleep == 1 : os_now_ns() - t0 > 100000000))
			break;
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
	}
	CHECK(!khalt || st.samples > 0);
	uint64_t seen_ms = (os_now_ns() - t0) / 1000000;
	double f[2];
	int pre0;
	shares(300, f, &pre0);
	printf("%s: vCPU 0 asleep in read(): preempted share vCPU 0 %.3f, vCPU 1 %.3f; vCPU 0 "
	       "preempted flag seen %d times\n",
	       name, f[0], f[1], pre0);
	if (khalt) {
		CHECK(f[1] < 0.1);  /* vCPU 1 has the pCPU to itself */
		CHECK(f[0] < 0.05); /* a halted vCPU is never preempted */
		CHECK(pre0 == 0);
	} else {
		CHECK(f[1] > 0.3); /* the old model: the sleeper still takes its turns */
	}

	/* 2. Wake vCPU 0's thread: it runs and the two vCPUs share the pCPU again. */
	CHECK(write(pfd[1], "x", 1) == 1);
	t0 = os_now_ns();
	while (!__atomic_load_n(&a_progress, __ATOMIC_RELAXED)) {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
	}
	test_sleep_us(20000);
	CHECK(!pvhint_emu_stats(h, 0, &st));
	/* Exact: seen before the next periodic sample, 30 s away (the 1 ms sampler has long seen
	 * it by now). */
	while (exact && st.ksleep) {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
		CHECK(!pvhint_emu_stats(h, 0, &st));
	}
	CHECK_EQ(st.ksleep, 0);
	if (exact)
		printf("%s: halt seen after %llu ms, wake-up after %llu ms\n", name,
		       (unsigned long long)seen_ms,
		       (unsigned long long)((os_now_ns() - t0) / 1000000));
	shares(300, f, &pre0);
	printf("%s: vCPU 0 running: preempted share vCPU 0 %.3f, vCPU 1 %.3f\n", name, f[0], f[1]);
	CHECK(f[0] > 0.3 && f[1] > 0.3);
	/* One pCPU: at most one of them runs at a time (steal is added at each resume and every
	 * 10 ms of a long preemption: the window's edges may miss up to a quantum of it). */
	CHECK(f[0] + f[1] > 0.8);
	/* And the pCPU is not left idle between them, except while the control thread switches
	 * them: about 30 us a switch, 1-2 % of a 2 ms quantum; on a loaded machine the control
	 * thread's delays add to that (1.06 seen beside two CPU hogs), hence the margin. */
	CHECK(f[0] + f[1] < 1.5);

	/* Liveness, not timing: the running vCPU's thread makes progress within seconds. */
	uint64_t a = __atomic_load_n(&a_progress, __ATOMIC_RELAXED);
	for (int i = 0; i < 100 && __atomic_load_n(&a_progress, __ATOMIC_RELAXED) == a; i++)
		test_sleep_us(50000);
	CHECK(__atomic_load_n(&a_progress, __ATOMIC_RELAXED) > a);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(ta, NULL));
	CHECK(!pthread_join(tb, NULL));
	close(pfd[0]);
	close(pfd[1]);
	pvhint_close(h);
	__atomic_store_n(&a_progress, 0, __ATOMIC_RELAXED);
}

/* Within 10 s: vCPU 0's one thread (the reader) is seen asleep in the kernel. */
static void wait_reader_asleep(void)
{
	struct pvhint_emu_stats st;
	uint64_t t0 = os_now_ns();
	do {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
		CHECK(!pvhint_emu_stats(h, 0, &st));
	} while (st.threads != 1 || st.ksleep != 1);
}

/* Only the halt event gives vCPU 1 the pCPU: no periodic step or sample within 10 s. */
static void exact_halt(void)
{
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu",
						    .emu = "vcpus=2,pcpus=1,quantum=10s,"
							   "mode=slice,ksleep=30s"},
			   &h));
	CHECK(!pipe(pfd));
	__atomic_store_n(&done, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&reader_tid, 0, __ATOMIC_RELAXED);
	pthread_t ta, tb;
	CHECK(!pthread_create(&ta, NULL, reader, NULL));
	/* The reader asleep before the spinner attaches: a spinner first would hold the pCPU for
	 * the whole quantum, the reader waiting for its turn. */
	uint64_t t0 = os_now_ns();
	for (char state = 0; state != 'S';) {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
		int tid = __atomic_load_n(&reader_tid, __ATOMIC_ACQUIRE);
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
		FILE *f = tid ? fopen(path, "r") : NULL;
		if (f) {
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			buf[n] = 0;
			fclose(f);
			char *p = strrchr(buf, ')');
			state = p && p[1] ? p[2] : 0;
		}
	}
	CHECK(!pthread_create(&tb, NULL, spinner, NULL));
	struct pvhint_emu_stats st;
	t0 = os_now_ns();
	do {
		CHECK(os_now_ns() - t0 < 5000000000ull);
		test_sleep_us(1000);
		CHECK(!pvhint_emu_stats(h, 0, &st));
	} while (st.threads != 1 || st.ksleep != 1 || pvhint_vcpu_preempted(h, 1));
	printf("quantum=10s: vCPU 0 halted and vCPU 1 running after %llu ms\n",
	       (unsigned long long)((os_now_ns() - t0) / 1000000));
	/* The spinner detaches first: vCPU 1 empties and the reader's vCPU can run. */
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(tb, NULL));
	CHECK(write(pfd[1], "x", 1) == 1);
	CHECK(!pthread_join(ta, NULL));
	close(pfd[0]);
	close(pfd[1]);
	pvhint_close(h);
}

static int d_detached; /* atomic */

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	CHECK(!pthread_setaffinity_np(pthread_self(), sizeof(set), &set));
}

/* Counted on vCPU 0, then detached and running on CPU 1 (SCHED_FIFO: no switch) for 50 ms. */
static void *detacher(void *arg)
{
	(void)arg;
	pin(1);
	struct sched_param sp = {.sched_priority = 10};
	CHECK(!pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp));
	CHECK(!pvhint_emu_attach(h, 0));
	test_sleep_us(2000); /* a switch-in with its vCPU named: counted on vCPU 0 */
	CHECK(!pvhint_emu_detach(h));
	__atomic_store_n(&d_detached, 1, __ATOMIC_RELEASE);
	uint64_t t0 = os_now_ns();
	while (os_now_ns() - t0 < 50000000ull)
		;
	sp.sched_priority = 0;
	CHECK(!pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp));
	return NULL;
}

static void detach_phantom(void)
{
	cpu_set_t old;
	CHECK(!pthread_getaffinity_np(pthread_self(), sizeof(old), &old));
	pin(0); /* the control thread inherits CPU 0 */
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu",
						    .emu = "vcpus=2,pcpus=1,quantum=2ms,"
							   "mode=slice,ksleep=30s"},
			   &h));
	CHECK(!pthread_setaffinity_np(pthread_self(), sizeof(old), &old));
	CHECK(!pipe(pfd));
	__atomic_store_n(&done, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&d_detached, 0, __ATOMIC_RELAXED);
	pthread_t ta, tb, td;
	CHECK(!pthread_create(&ta, NULL, reader, NULL));
	CHECK(!pthread_create(&tb, NULL, spinner, NULL));
	struct pvhint_emu_stats st;
	wait_reader_asleep();
	CHECK(!pthread_create(&td, NULL, detacher, NULL));
	while (!__atomic_load_n(&d_detached, __ATOMIC_ACQUIRE))
		test_sleep_us(1000);
	CHECK(write(pfd[1], "x", 1) == 1);
	uint64_t t0 = os_now_ns();
	do {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(1000);
		CHECK(!pvhint_emu_stats(h, 0, &st));
	} while (st.ksleep);
	printf("detached thread still counted on vCPU 0: the reader's wake-up seen after %llu ms\n",
	       (unsigned long long)((os_now_ns() - t0) / 1000000));
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(ta, NULL));
	CHECK(!pthread_join(tb, NULL));
	CHECK(!pthread_join(td, NULL));
	close(pfd[0]);
	close(pfd[1]);
	pvhint_close(h);
	__atomic_store_n(&a_progress, 0, __ATOMIC_RELAXED);
}

static double idle_frac(uint64_t ms)
{
	uint64_t t0 = os_now_ns();
	long n = 0, idle = 0;
	while (os_now_ns() - t0 < ms * 1000000) {
		test_sleep_us(500);
		n++;
		idle += pvhint_pcpu_idle(h, 0);
	}
	return (double)idle / (double)n;
}

static void noisy_idle(void)
{
	CHECK(
	    !pvhint_open(&(struct pvhint_options){.source = "emu",
						  .emu = "vcpus=1,mode=noisy,duty=0.3,period=10ms"},
			 &h));
	CHECK(!pipe(pfd));
	__atomic_store_n(&done, 0, __ATOMIC_RELAXED);
	pthread_t ta;
	CHECK(!pthread_create(&ta, NULL, reader, NULL));
	wait_reader_asleep();
	double asleep = idle_frac(300);
	CHECK(write(pfd[1], "x", 1) == 1);
	while (!__atomic_load_n(&a_progress, __ATOMIC_RELAXED))
		test_sleep_us(1000);
	test_sleep_us(20000);
	double running = idle_frac(300);
	printf("noisy: pCPU idle %.2f of the time while the thread sleeps in read(), %.2f while it "
	       "runs\n",
	       asleep, running);
	CHECK(asleep > 0.4);
	CHECK(running < 0.2);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(ta, NULL));
	close(pfd[0]);
	close(pfd[1]);
	pvhint_close(h);
	__atomic_store_n(&a_progress, 0, __ATOMIC_RELAXED);
}

static pthread_barrier_t bar;

static void *round_thread(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach_next(h));
	pthread_barrier_wait(&bar); /* futex sleep: halts the vCPU */
	uint64_t t0 = os_now_ns();
	while (os_now_ns() - t0 < 200000)
		;
	pthread_barrier_wait(&bar);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static void rounds(int n)
{
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu",
						    .emu = "vcpus=4,pcpus=2,quantum=1ms,mode=slice,"
							   "ksleep=100us"},
			   &h));
	CHECK(!pthread_barrier_init(&bar, NULL, 5));
	uint64_t t0 = os_now_ns();
	for (int r = 0; r < n; r++) {
		pthread_t th[4];
		for (int i = 0; i < 4; i++)
			CHECK(!pthread_create(&th[i], NULL, round_thread, NULL));
		pthread_barrier_wait(&bar);
		pthread_barrier_wait(&bar);
		for (int i = 0; i < 4; i++)
			CHECK(!pthread_join(th[i], NULL));
	}
	printf("%d attach/barrier/detach rounds in %.2f s\n", n, (double)(os_now_ns() - t0) / 1e9);
	pthread_barrier_destroy(&bar);
	pvhint_close(h);
}

/*
 * --events: only the checks that need the bpf program's events, failing if it does not load.
 * The nested e2e runs this in L1, on Debian's 6.1 kernel, whose verifier is older than this
 * machine's.
 */
int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--events")) {
		pvhint_t *b;
		if (pvhint_open(&(struct pvhint_options){.source = "bpf"}, &b)) {
			printf("the bpf program does not load: %s\n", pvhint_errmsg());
			return 1;
		}
		pvhint_close(b);
		exact_halt();
		detach_phantom();
		printf("emu events ok\n");
		return 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--events]\n", argv[0]);
		return 2;
	}
	run("ksleep=1ms");
	run("ksleep=0");
	pvhint_t *b;
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &b);
	if (!err) {
		pvhint_close(b);
		run("ksleep=30s"); /* the program loaded in this process: its events */
		exact_halt();
		detach_phantom();
	} else {
		printf("ksleep=30s: skipped, the bpf program does not load here: %s\n",
		       pvhint_errmsg());
	}
	noisy_idle();
	rounds(300);
	/* A bad value names the key. */
	pvhint_t *bad;
	CHECK(pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "ksleep=5us"}, &bad) ==
	      -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "ksleep"));
	/* So does a bad PVRT_EMU_KSTATE (only read where the kernel state is sampled). */
	CHECK(!setenv("PVRT_EMU_KSTATE", "exact", 1));
	CHECK(pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "vcpus=2"}, &bad) ==
	      -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "PVRT_EMU_KSTATE=exact"));
	CHECK(!setenv("PVRT_EMU_KSTATE", "sample", 1));
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "vcpus=2"}, &bad));
	pvhint_close(bad);
	CHECK(!unsetenv("PVRT_EMU_KSTATE"));
	printf("emu halt ok\n");
	return 0;
}
