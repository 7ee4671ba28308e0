/* SPDX-License-Identifier: MIT */
/*
 * libpvhint benchmarks: the cost of a hint query per source (none, kvm on a fake page file, emu),
 * the consistent steal read, "which vCPU am I on", and the emulator's stop/resume latency.
 *
 *   build/bench/pvhint/bench_pvhint --benchmark_repetitions=5 --benchmark_report_aggregates_only
 *
 * Queries: ns per query (goal <= 2 ns median for the one-load queries). Latency benchmarks use
 * manual time: deschedule = the call (flag set, every running attached thread stopped);
 * resume = from the call until the attached thread runs user code again (this includes the
 * machine's own wake-up latency; call_median_us is the call alone: holds released, flag
 * cleared). median_us/p90_us are per-iteration percentiles.
 */
#define _GNU_SOURCE
#include "pvrt_bench.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { SRC_NONE, SRC_KVM, SRC_EMU, NSRC };
static const char *const src_name[NSRC] = {"none", "kvm(fake page)", "emu(random)"};
static pvhint_t *hs[NSRC];
static char kvm_path[] = "/tmp/pvhint-bench-XXXXXX";

#define BATCH 1024

/* i & mask cycles over the vCPUs (a power-of-two prefix of them) without a division. */
static unsigned vcpu_mask(const pvhint_t *h)
{
	unsigned mask = 1;
	while (mask * 2 <= pvhint_nr_vcpus(h))
		mask *= 2;
	return mask - 1;
}

static void BM_vcpu_preempted(pvrt_bench_state *st)
{
	pvhint_t *h = hs[pvrt_bench_arg(st, 0)];
	unsigned mask = vcpu_mask(h);
	unsigned acc = 0;
	while (pvrt_bench_keep_running_batch(st, BATCH))
		for (unsigned i = 0; i < BATCH; i++)
			acc += pvhint_vcpu_preempted(h, i & mask);
	pvrt_bench_do_not_optimize(acc);
	pvrt_bench_set_label(st, src_name[pvrt_bench_arg(st, 0)]);
}

static void BM_pcpu_idle(pvrt_bench_state *st)
{
	pvhint_t *h = hs[pvrt_bench_arg(st, 0)];
	unsigned mask = vcpu_mask(h);
	unsigned acc = 0;
	while (pvrt_bench_keep_running_batch(st, BATCH))
		for (unsigned i = 0; i < BATCH; i++)
			acc += pvhint_pcpu_idle(h, i & mask);
	pvrt_bench_do_not_optimize(acc);
	pvrt_bench_set_label(st, src_name[pvrt_bench_arg(st, 0)]);
}

static void BM_steal(pvrt_bench_state *st)
{
	pvhint_t *h = hs[pvrt_bench_arg(st, 0)];
	uint64_t acc = 0;
	while (pvrt_bench_keep_running_batch(st, BATCH))
		for (unsigned i = 0; i < BATCH; i++)
			acc += pvhint_steal(h, i & 1);
	pvrt_bench_do_not_optimize(acc);
	pvrt_bench_set_label(st, src_name[pvrt_bench_arg(st, 0)]);
}

/* arg 0: not attached (rseq cpu_id); 1: attached to an emulated vCPU (TLS); 2: sched_getcpu */
static void BM_self_vcpu(pvrt_bench_state *st)
{
	int64_t how = pvrt_bench_arg(st, 0);
	if (how == 1)
		pvhint_emu_attach(hs[SRC_EMU], 1);
	int acc = 0;
	while (pvrt_bench_keep_running_batch(st, BATCH))
		for (unsigned i = 0; i < BATCH; i++) {
			acc += how == 2 ? pvhint_cpu_slow() : pvhint_self_vcpu();
			pvrt_bench_clobber(); /* re-read the TLS / rseq area every time */
		}
	pvrt_bench_do_not_optimize(acc);
	if (how == 1)
		pvhint_emu_detach(hs[SRC_EMU]);
	pvrt_bench_set_label(st, how == 0   ? "rseq cpu_id"
				 : how == 1 ? "emu-attached (TLS)"
					    : "sched_getcpu");
}

/* ---- emulator stop/resume latency (script mode) ---- */

static pvhint_t *hscript;
static uint64_t spin_ts;
static int spin_stop;

static void *spinner(void *arg)
{
	(void)arg;
	pvhint_emu_attach(hscript, 1);
	while (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
		__atomic_store_n(&spin_ts, os_now_ns(), __ATOMIC_RELEASE);
	pvhint_emu_detach(hscript);
	return NULL;
}

/* Yield while waiting: on 2 CPUs a spinning waiter would keep the spinner off a CPU. */
static void wait_running(uint64_t after)
{
	while (__atomic_load_n(&spin_ts, __ATOMIC_ACQUIRE) <= after)
		sched_yield();
}

/* Per-iteration samples: the mean Google Benchmark reports is dominated by the machine's tail. */
#define NLAT 100000
static double lat[NLAT];
static int nlat;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void lat_add(pvrt_bench_state *st, uint64_t ns)
{
	if (nlat < NLAT)
		lat[nlat++] = (double)ns / 1e3;
	pvrt_bench_set_iteration_time(st, (double)ns / 1e9);
}

static void lat_report(pvrt_bench_state *st)
{
	if (!nlat)
		return;
	qsort(lat, (size_t)nlat, sizeof(lat[0]), cmp_d);
	pvrt_bench_counter(st, "median_us", lat[nlat / 2], PVRT_BENCH_COUNTER_AVG);
	pvrt_bench_counter(st, "p90_us", lat[nlat * 9 / 10], PVRT_BENCH_COUNTER_AVG);
	nlat = 0;
}

static void BM_emu_deschedule(pvrt_bench_state *st)
{
	pthread_t th;
	nlat = 0;
	__atomic_store_n(&spin_stop, 0, __ATOMIC_RELAXED);
	pthread_create(&th, NULL, spinner, NULL);
	while (pvrt_bench_keep_running(st)) {
		wait_running(os_now_ns());
		uint64_t t0 = os_now_ns();
		pvhint_emu_deschedule(hscript, 1, 0);
		uint64_t t1 = os_now_ns();
		lat_add(st, t1 - t0);
		pvhint_emu_resume(hscript, 1);
	}
	lat_report(st);
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	pvrt_bench_set_label(st, "flag set + thread stopped");
}

static double call[NLAT];

static void BM_emu_resume(pvrt_bench_state *st)
{
	pthread_t th;
	int ncall = 0;
	nlat = 0;
	__atomic_store_n(&spin_stop, 0, __ATOMIC_RELAXED);
	pthread_create(&th, NULL, spinner, NULL);
	while (pvrt_bench_keep_running(st)) {
		wait_running(os_now_ns());
		pvhint_emu_deschedule(hscript, 1, 0);
		uint64_t t0 = os_now_ns();
		pvhint_emu_resume(hscript, 1);
		uint64_t tc = os_now_ns();
		if (ncall < NLAT)
			call[ncall++] = (double)(tc - t0) / 1e3;
		wait_running(t0);
		uint64_t t1 = os_now_ns();
		lat_add(st, t1 - t0);
	}
	lat_report(st);
	if (ncall) {
		qsort(call, (size_t)ncall, sizeof(call[0]), cmp_d);
		pvrt_bench_counter(st, "call_median_us", call[ncall / 2], PVRT_BENCH_COUNTER_AVG);
	}
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	pvrt_bench_set_label(st, "resume -> thread running");
}

static int make_fake_kvm_page(unsigned nr)
{
	int fd = mkstemp(kvm_path);
	if (fd < 0)
		return -1;
	size_t len = PVHINT_HEADER_SIZE + ((nr * PVHINT_RECORD_SIZE + 4095) & ~4095u);
	struct pvhint_header hd = {.magic = PVHINT_MAGIC,
				   .abi_version = PVHINT_ABI_VERSION,
				   .source = PVHINT_SOURCE_KVM,
				   .header_size = PVHINT_HEADER_SIZE,
				   .record_stride = PVHINT_RECORD_SIZE,
				   .nr_records = nr,
				   .valid = PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED};
	int ok = ftruncate(fd, (off_t)len) == 0 && pwrite(fd, &hd, sizeof(hd), 0) == sizeof(hd);
	close(fd);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (make_fake_kvm_page(8) ||
	    pvhint_open(&(struct pvhint_options){.source = "none"}, &hs[SRC_NONE]) ||
	    pvhint_open(&(struct pvhint_options){.source = "kvm", .kvm_path = kvm_path},
			&hs[SRC_KVM]) ||
	    pvhint_open(
		&(struct pvhint_options){.source = "emu", .emu = "vcpus=8,mode=random,period=1ms"},
		&hs[SRC_EMU]) ||
	    pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "vcpus=2,mode=script"},
			&hscript)) {
		fprintf(stderr, "bench_pvhint: %s\n", pvhint_errmsg());
		return 1;
	}
	unlink(kvm_path); /* the mapping stays */
	for (int64_t s = 0; s < NSRC; s++) {
		pvrt_bench_args(pvrt_bench_register("BM_vcpu_preempted", BM_vcpu_preempted), 1, &s);
		pvrt_bench_args(pvrt_bench_register("BM_pcpu_idle", BM_pcpu_idle), 1, &s);
		pvrt_bench_args(pvrt_bench_register("BM_steal", BM_steal), 1, &s);
	}
	for (int64_t how = 0; how < 3; how++)
		pvrt_bench_args(pvrt_bench_register("BM_self_vcpu", BM_self_vcpu), 1, &how);
	pvrt_bench_unit_us(
	    pvrt_bench_manual_time(pvrt_bench_register("BM_emu_deschedule", BM_emu_deschedule)));
	pvrt_bench_unit_us(
	    pvrt_bench_manual_time(pvrt_bench_register("BM_emu_resume", BM_emu_resume)));
	int rc = pvrt_bench_main(argc, argv);
	for (int s = 0; s < NSRC; s++)
		pvhint_close(hs[s]);
	pvhint_close(hscript);
	return rc;
}
