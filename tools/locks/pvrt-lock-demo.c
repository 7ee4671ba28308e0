/* SPDX-License-Identifier: MIT */
/*
 * pvrt-lock-demo: the README's demonstration. A lock-heavy workload (threads taking one mutex
 * with ~1.5 us critical sections) under emulated 2x overcommit (2P vCPUs on P pCPUs, one thread
 * per vCPU), with glibc's mutex and with pvrt's, side by side, and the ratio.
 *
 * usage: pvrt-lock-demo [--pcpus=P] [--overcommit=F] [--seconds=S] [--runs=N]
 *   defaults: P = 2, F = 2, S = 1, N = 3 (the median of N runs is shown).
 * PVRT_EMU, when set, replaces the emulator spec built from P and F.
 */
#include "lockwork.h"

#include <stdbool.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int usage(const char *bad)
{
	if (bad)
		fprintf(stderr, "pvrt-lock-demo: bad argument '%s'\n", bad);
	fprintf(stderr, "usage: pvrt-lock-demo [--pcpus=P] [--overcommit=F] [--seconds=S] "
			"[--runs=N]\n");
	return 2;
}

int main(int argc, char **argv)
{
	int pcpus = 2, runs = 3;
	double factor = 2, seconds = 1;
	for (int i = 1; i < argc; i++) {
		char *end = NULL;
		if (!strncmp(argv[i], "--pcpus=", 8))
			pcpus = (int)strtol(argv[i] + 8, &end, 10);
		else if (!strncmp(argv[i], "--overcommit=", 13))
			factor = strtod(argv[i] + 13, &end);
		else if (!strncmp(argv[i], "--seconds=", 10))
			seconds = strtod(argv[i] + 10, &end);
		else if (!strncmp(argv[i], "--runs=", 7))
			runs = (int)strtol(argv[i] + 7, &end, 10);
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return usage(NULL), 0;
		else
			return usage(argv[i]);
		if (!end || *end)
			return usage(argv[i]);
	}
	int vcpus = (int)(factor * pcpus + 0.5);
	if (pcpus < 1 || factor < 1 || vcpus > 64 || seconds <= 0 || runs < 1 || runs > 99)
		return usage("(out of range)");
	char spec[128];
	snprintf(spec, sizeof(spec), "vcpus=%d,pcpus=%d", vcpus, pcpus);
	setenv("PVRT_HINTS", "emu", 1);
	setenv("PVRT_EMU", getenv("PVRT_EMU") ? getenv("PVRT_EMU") : spec, 1);
	pvhint_t *h = NULL;
	if (pvhint_default(&h) || strcmp(pvhint_source_name(h), "emu")) {
		fprintf(stderr, "pvrt-lock-demo: cannot start the overcommit emulator: %s\n",
			pvhint_errmsg());
		return 1;
	}
	printf("lock-heavy workload: %u threads, one per vCPU, emulated %s (%.1fx overcommit)\n",
	       pvhint_nr_vcpus(h), getenv("PVRT_EMU"), factor);
	printf(
	    "each thread: lock; ~1.5 us of work; unlock; repeat (%.1f s per run, median of %d)\n",
	    seconds, runs);
	const enum lw_kind kinds[2] = {LW_GLIBC, LW_PVRT};
	double med[2];
	for (int k = 0; k < 2; k++) {
		double v[99], fair[99];
		for (int r = 0; r < runs; r++) {
			struct lw_config c = {.kind = kinds[k],
					      .threads = (int)pvhint_nr_vcpus(h),
					      .cs_work = 1000,
					      .out_work = 20,
					      .seconds = seconds};
			struct lw_result res;
			if (lw_run(&c, &res))
				return 1;
			v[r] = res.ops_per_s;
			fair[r] = res.fairness;
		}
		qsort(v, (size_t)runs, sizeof(double), cmp_double);
		qsort(fair, (size_t)runs, sizeof(double), cmp_double);
		med[k] = v[runs / 2];
		printf("  %-12s %12.0f lock acquisitions/s   (fairness min/max %.2f)\n",
		       k ? "pvrt mutex" : "glibc mutex", med[k], fair[runs / 2]);
	}
	printf("  pvrt / glibc: %.2fx\n", med[0] > 0 ? med[1] / med[0] : 0.0);
	return 0;
}
