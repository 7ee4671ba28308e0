/* SPDX-License-Identifier: MIT */
/*
 * pvhint-top: a live view of the per-vCPU hints, refreshed like top.
 *
 * Per vCPU: preempted and is_idle now, steal rate and the fraction of the last interval the vCPU
 * read as preempted (sampled every millisecond). With PVRT_HINTS=emu it drives an emulator
 * configured by PVRT_EMU, with spinning threads attached so there is something to show.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include "pvrt_os.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t quit;
static pvhint_t *h;
static int spin_stop;

static void on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

static void *spin_main(void *arg)
{
	(void)arg;
	if (pvhint_emu_attach_next(h))
		return NULL;
	/* A runnable vCPU that parks now and then, like a worker: busy 90%, halted 10%. */
	while (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE)) {
		uint64_t t = os_now_ns();
		while (os_now_ns() - t < 9000000)
			;
		pvhint_thread_park(h);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
		pvhint_thread_unpark(h);
	}
	pvhint_emu_detach(h);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pvhint-top [--interval SECONDS] [--once] [--json] [--spin N]\n"
		"  Live view of per-vCPU hints: preempted, is_idle, steal rate and the fraction\n"
		"  of the last interval each vCPU read as preempted.\n"
		"  --interval S  refresh period (default 1; 0.01..3600)\n"
		"  --once        sample one interval, print, exit\n"
		"  --json        print JSON (one object per refresh)\n"
		"  --spin N      emu: attach N spinning threads (default: one per vCPU)\n"
		"  --help        this text\n"
		"Environment: PVRT_HINTS=auto|kvm|emu|none, PVRT_EMU (emulator spec),\n"
		"  PVRT_HINT_DEV (kernel page path).\n");
}

int main(int argc, char **argv)
{
	double interval = 1.0;
	int once = 0, json = 0, nspin = -1;
	static const struct option opts[] = {
	    {"interval", required_argument, NULL, 'i'}, {"once", no_argument, NULL, 'o'},
	    {"json", no_argument, NULL, 'j'},		{"spin", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},		{NULL, 0, NULL, 0}};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "i:ojs:h", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			interval = strtod(optarg, &end);
			if (*end || end == optarg || !(interval >= 0.01 && interval <= 3600)) {
				fprintf(stderr, "pvhint-top: bad --interval '%s' (0.01..3600)\n",
					optarg);
				return 2;
			}
			break;
		case 'o':
			once = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 's':
			nspin = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || nspin < 0 || nspin > 1024) {
				fprintf(stderr, "pvhint-top: bad --spin '%s' (0..1024)\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pvhint-top: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	int err = pvhint_open(NULL, &h);
	if (err) {
		fprintf(stderr, "pvhint-top: %s\n", pvhint_errmsg());
		return 1;
	}
	unsigned nr = pvhint_nr_vcpus(h);
	const char *src = pvhint_source_name(h);
	const char *mode = pvhint_emu_mode(h);
	pthread_t *spin = NULL;
	if (mode && strcmp(mode, "script")) {
		if (nspin < 0)
			nspin = (int)nr;
		spin = calloc((size_t)nspin, sizeof(*spin));
		for (int i = 0; i < nspin; i++)
			if (pthread_create(&spin[i], NULL, spin_main, NULL))
				nspin = i;
	} else {
		nspin = 0;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	uint64_t *steal0 = calloc(nr, sizeof(uint64_t)), *pre_ns = calloc(nr, sizeof(uint64_t));
	if (!steal0 || !pre_ns) {
		fprintf(stderr, "pvhint-top: out of memory\n");
		return 1;
	}
	uint64_t iv = (uint64_t)(interval * 1e9);
	for (unsigned v = 0; v < nr; v++)
		steal0[v] = pvhint_steal(h, v);
	while (!quit) {
		uint64_t t0 = os_now_ns(), t = t0;
		memset(pre_ns, 0, nr * sizeof(uint64_t));
		while (!quit && t - t0 < iv) {
			bool pre[nr];
			for (unsigned v = 0; v < nr; v++)
				pre[v] = pvhint_vcpu_preempted(h, v);
			nanosleep(&(struct timespec){0, 1000000}, NULL);
			uint64_t now = os_now_ns();
			for (unsigned v = 0; v < nr; v++)
				if (pre[v])
					pre_ns[v] += now - t;
			t = now;
		}
		double span = (double)(t - t0);
		const struct pvhint_header *hd = pvhint_header(h);
		if (json) {
			printf("{\"source\":\"%s\",\"mode\":%s%s%s,\"note\":\"", src,
			       mode ? "\"" : "", mode ? mode : "null", mode ? "\"" : "");
			for (const char *p = pvhint_note(h); *p; p++)
				printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
			printf("\",\"interval_s\":%.3f,\"valid\":{\"steal\":%s,\"preempted\":%s,"
			       "\"is_idle\":%s},\"nr_vcpus\":%u,\"vcpus\":[",
			       span / 1e9, hd->valid & PVHINT_VALID_STEAL ? "true" : "false",
			       hd->valid & PVHINT_VALID_PREEMPTED ? "true" : "false",
			       hd->valid & PVHINT_VALID_IS_IDLE ? "true" : "false", nr);
		} else {
			printf("\033[H\033[2J"); /* home, clear: redraw like top */
			printf("pvhint-top  source %s%s%s  vCPUs %u  interval %.2fs%s%s\n\n", src,
			       mode ? " mode " : "", mode ? mode : "", nr, span / 1e9,
			       *pvhint_note(h) ? "  " : "", pvhint_note(h));
			printf("%5s %9s %7s %8s %11s%s\n", "vCPU", "preempted", "is_idle", "steal%",
			       "preempted%", mode ? " threads parked    stops" : "");
		}
		for (unsigned v = 0; v < nr; v++) {
			uint64_t s = pvhint_steal(h, v);
			double rate = (double)(s - steal0[v]) / span,
			       frac = (double)pre_ns[v] / span;
			steal0[v] = s;
			bool p = pvhint_vcpu_preempted(h, v), idle = pvhint_pcpu_idle(h, v);
			struct pvhint_emu_stats es;
			bool emu = mode && !pvhint_emu_stats(h, v, &es);
			if (json) {
				printf("%s{\"vcpu\":%u,\"preempted\":%s,\"is_idle\":%s,"
				       "\"steal_ns\":%llu,\"steal_rate\":%.4f,"
				       "\"preempted_fraction\":%.4f",
				       v ? "," : "", v, p ? "true" : "false",
				       idle ? "true" : "false", (unsigned long long)s, rate, frac);
				if (emu)
					printf(",\"threads\":%u,\"parked\":%u,\"stops\":%llu",
					       es.threads, es.parked, (unsigned long long)es.stops);
				printf("}");
			} else {
				printf("%5u %9s %7s %7.1f%% %10.1f%%", v, p ? "yes" : "-",
				       idle ? "yes" : "-", rate * 100, frac * 100);
				if (emu)
					printf(" %7u %6u %8llu", es.threads, es.parked,
					       (unsigned long long)es.stops);
				printf("\n");
			}
		}
		if (json)
			printf("]}\n");
		else if (!once)
			printf("\n(ctrl-c to quit)\n");
		fflush(stdout);
		if (once)
			break;
	}
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < nspin; i++)
		pthread_join(spin[i], NULL);
	free(spin);
	free(steal0);
	free(pre_ns);
	pvhint_close(h);
	return 0;
}
