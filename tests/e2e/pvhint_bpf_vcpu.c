/* SPDX-License-Identifier: MIT */
/*
 * The bpf source's zero-patch KVM mode (PVRT_BPF=vcpu) on an unpatched guest kernel: run by the
 * nested e2e in an L2 that boots Debian's own 6.1 kernel, with the same vCPU layout as the main
 * L2 (vCPUs 0 and 1 squeezed onto one L1 CPU, vCPU 2 alone). The records are copies of what the
 * host writes into the guest kernel's per-CPU kvm_steal_time, made by the program at task
 * switches and by its per-CPU timers.
 *
 * usage: pvhint_bpf_vcpu SECONDS SQUEEZED WATCHER   e.g. pvhint_bpf_vcpu 10 0,1 2
 * Prints "PASS <name>: ..." / "FAIL <name>: ..." / "INFO ..." lines; exit 0 only if all passed.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 8

static int failures;
static pvhint_t *h;
static atomic_bool stop;

static void report(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;
	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	failures += !ok;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool pin(int cpu, bool fifo)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	struct sched_param sp = {.sched_priority = 1};
	return !sched_setaffinity(0, sizeof(one), &one) &&
	       (!fifo || !sched_setscheduler(0, SCHED_FIFO, &sp));
}

/* vCPU c's cumulative steal as this guest's /proc/stat counts it (ns), or UINT64_MAX. */
static uint64_t proc_steal_ns(int c)
{
	FILE *f = fopen("/proc/stat", "r");
	char name[16], want[16];
	unsigned long long v[8];
	uint64_t ns = UINT64_MAX;
	snprintf(want, sizeof(want), "cpu%d", c);
	while (f && fscanf(f, "%15s %llu %llu %llu %llu %llu %llu %llu %llu%*[^\n]", name, &v[0],
			   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 9)
		if (!strcmp(name, want))
			ns = v[7] * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
	if (f)
		fclose(f);
	return ns;
}

struct spinner {
	int cpu;
	bool fifo;
	pthread_t t;
};

static void *spin(void *arg)
{
	struct spinner *s = arg;
	if (!pin(s->cpu, s->fifo))
		return (void *)1;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		;
	return NULL;
}

static void spinners_start(struct spinner *s, const int *cpus, int n, bool fifo)
{
	atomic_store(&stop, false);
	for (int i = 0; i < n; i++) {
		s[i] = (struct spinner){.cpu = cpus[i], .fifo = fifo};
		if (pthread_create(&s[i].t, NULL, spin, &s[i]))
			report(false, "spinner", "pthread_create failed");
	}
}

static bool spinners_stop(struct spinner *s, int n)
{
	bool ok = true;
	atomic_store(&stop, true);
	for (int i = 0; i < n; i++) {
		void *r;
		pthread_join(s[i].t, &r);
		ok &= r == NULL;
	}
	return ok;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: pvhint_bpf_vcpu SECONDS SQUEEZED WATCHER\n");
		return 2;
	}
	double secs = atof(argv[1]);
	int sq[MAX_CPUS], nsq = 0, watcher = atoi(argv[3]);
	for (char *p = argv[2]; *p && nsq < MAX_CPUS; p += *p == ',') {
		char *end;
		sq[nsq++] = (int)strtol(p, &end, 10);
		p = end;
	}
	int online = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (secs <= 0 || nsq == 0 || online > MAX_CPUS || watcher < 0 || watcher >= online) {
		fprintf(stderr, "pvhint_bpf_vcpu: bad arguments for %d CPUs\n", online);
		return 2;
	}

	setenv("PVRT_BPF", "vcpu", 1);
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &h);
	report(err == 0, "vcpu-open", "%s", err ? pvhint_errmsg() : "ok");
	if (err)
		return 1;
	long conf = sysconf(_SC_NPROCESSORS_CONF); /* a record per possible CPU */
	report(pvhint_header(h)->kind == PVHINT_KIND_VCPU && (long)pvhint_nr_vcpus(h) == conf,
	       "vcpu-page", "kind %u, %u records for %ld CPUs, valid 0x%x", pvhint_header(h)->kind,
	       pvhint_nr_vcpus(h), conf, h->valid);

	/* 1. The watcher, alone on its L1 CPU, sees the squeezed vCPUs come and go. */
	uint64_t steal0[MAX_CPUS];
	for (int c = 0; c < online; c++)
		steal0[c] = pvhint_steal(h, c);
	struct spinner s[MAX_CPUS];
	spinners_start(s, sq, nsq, false);
	if (!pin(watcher, false))
		report(false, "pin", "cannot pin to CPU %d: %s", watcher, strerror(errno));
	unsigned long set[MAX_CPUS] = {0}, clear[MAX_CPUS] = {0}, on[MAX_CPUS] = {0}, loops = 0;
	unsigned char last[MAX_CPUS];
	for (int c = 0; c < online; c++)
		last[c] = h->rec[c].preempted & PVHINT_PREEMPTED;
	double end = now_s() + secs;
	while (now_s() < end) {
		for (int c = 0; c < online; c++) {
			/* Volatile loads: the program rewrites the records at any time. */
			unsigned char p =
			    ((const volatile struct pvhint_record *)&h->rec[c])->preempted &
			    PVHINT_PREEMPTED;
			on[c] += p;
			set[c] += p && !last[c];
			clear[c] += !p && last[c];
			last[c] = p;
		}
		loops++;
	}
	report(spinners_stop(s, nsq), "pin-spinners", "spinners on vCPUs %s", argv[2]);
	for (int i = 0; i < nsq; i++) {
		int c = sq[i];
		uint64_t d = pvhint_steal(h, c) - steal0[c];
		report(set[c] > 0 && clear[c] > 0, "vcpu-preempted-toggles",
		       "vCPU %d seen preempted %lu times and running again %lu times, preempted in "
		       "%.2f of %lu reads; steal +%.1f ms in %.0f s",
		       c, set[c], clear[c], loops ? (double)on[c] / loops : 0.0, loops, d / 1e6,
		       secs);
		report(d > 0, "vcpu-steal-advances", "vCPU %d steal +%.1f ms", c, d / 1e6);
	}
	/* A copy made while the watcher's vCPU was preempted stays until the next refresh. */
	printf(
	    "INFO vCPU %d (the watcher) read itself preempted in %lu of %lu reads (a stale copy)\n",
	    watcher, on[watcher], loops);

	/* 2. The timers refresh the page while no CPU switches tasks: SCHED_FIFO spinners on the
	 * other vCPUs, the watcher spinning too, for 0.5 s; up to 3 windows (a CPU whose ksoftirqd
	 * was woken defers the timers' softirq to it on 6.1, and the spinners starve it). */
	int others[MAX_CPUS], no = 0;
	for (int c = 0; c < online; c++)
		if (c != watcher)
			others[no++] = c;
	spinners_start(s, others, no, true);
	usleep(50000);
	bool fifo = true;
	unsigned changes = 0;
	for (int w = 0; w < 3 && changes < 20 && (fifo = pin(watcher, true)); w++) {
		uint32_t lastv = __atomic_load_n(&h->rec[sq[0]].version, __ATOMIC_ACQUIRE);
		changes = 0;
		end = now_s() + 0.5;
		while (now_s() < end) {
			uint32_t v = __atomic_load_n(&h->rec[sq[0]].version, __ATOMIC_ACQUIRE);
			changes += v != lastv;
			lastv = v;
		}
		struct sched_param sp = {.sched_priority = 0};
		sched_setscheduler(0, SCHED_OTHER, &sp);
		usleep(20000);
	}
	report(spinners_stop(s, no) && fifo, "pin-fifo", "SCHED_FIFO spinners on every vCPU");
	report(changes >= 20, "vcpu-timer-refresh",
	       "vCPU %d's record changed %u times in 0.5 s while every vCPU spun", sq[0], changes);

	/* 3. The copies are the host's account: this kernel's /proc/stat steal, tick-rounded. */
	for (int c = 0; c < online; c++) {
		uint64_t p = proc_steal_ns(c), r = pvhint_steal(h, c);
		bool big = p != UINT64_MAX && p > 1000000000ull;
		report(!big || (r > p * 9 / 10 && r < p * 11 / 10 + 200000000ull),
		       "vcpu-steal-matches", "vCPU %d: record %.3f s, /proc/stat %.3f s", c,
		       r / 1e9, p == UINT64_MAX ? -1.0 : p / 1e9);
	}
	pvhint_close(h);
	printf("pvhint_bpf_vcpu: %s (%d failed)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
