// SPDX-License-Identifier: MIT
/*
 * pvhint_kvm_lib: libpvhint's kvm source against the real /dev/pvhint of a patched KVM guest (run
 * inside L2 of the nested end-to-end test, linked statically with libpvhint's sources).
 *
 * Checks that 'kvm' and 'auto' open the device, that the handle describes every possible vCPU,
 * and that the inline queries see what the host does: with one spinning thread pinned on each
 * vCPU, the squeezed vCPUs (0 and 1 by default) are seen preempted and running again by
 * pvhint_vcpu_preempted(), their pvhint_steal() advances, and no thread sees its own vCPU
 * preempted. pvhint_pcpu_idle() of a running vCPU is false, and always false when the host does
 * not provide is_idle. A process of another user cannot open the device (mode 0400, root's): 'kvm'
 * fails with EACCES and a message that says how access is granted, and 'auto' falls back with a
 * one-line note saying why.
 *
 * Usage: pvhint_kvm_lib [seconds, default 5] [squeezed vCPUs, default 0,1]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pvrt/pvhint.h>

#include "report.h"

#define MAX_CPUS 64

static pvhint_t *hint;
static int nr_online;
static atomic_bool go, stop;

struct watcher {
	int cpu;
	pthread_t thread;
	unsigned long set_seen[MAX_CPUS], clear_seen[MAX_CPUS];
	unsigned long self_preempted, self_idle, idle_seen;
	int pin_error;
};

static void *watch(void *arg)
{
	struct watcher *w = arg;
	bool last[MAX_CPUS];
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(w->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		w->pin_error = errno;
		return NULL;
	}
	while (!atomic_load_explicit(&go, memory_order_acquire))
		;
	for (int c = 0; c < nr_online; c++)
		last[c] = pvhint_vcpu_preempted(hint, (unsigned)c);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (int c = 0; c < nr_online; c++) {
			bool p = pvhint_vcpu_preempted(hint, (unsigned)c);

			w->idle_seen += pvhint_pcpu_idle(hint, (unsigned)c);
			if (c == w->cpu) {
				w->self_preempted += p;
				w->self_idle += pvhint_pcpu_idle(hint, (unsigned)c);
				continue;
			}
			w->set_seen[c] += p && !last[c];
			w->clear_seen[c] += !p && last[c];
			last[c] = p;
		}
	}
	return NULL;
}

/* In a child that became user nobody: 'kvm' fails with EACCES and says how access is granted;
 * 'auto' falls back to another source, and its note says why. */
static void check_unprivileged(struct pvhint_options *opts)
{
	int pipefd[2], status;
	char buf[1024] = "";
	pid_t pid;

	if (geteuid() != 0) {
		printf("INFO unprivileged: not root, not checked\n");
		return;
	}
	if (pipe(pipefd) || (pid = fork()) < 0) {
		report(false, "unprivileged", "pipe/fork: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		pvhint_t *h;
		int err, n;

		close(pipefd[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(2);
		opts->source = "kvm";
		err = pvhint_open(opts, &h);
		n = snprintf(buf, sizeof(buf), "kvm: %d %s|", err, err ? pvhint_errmsg() : "");
		opts->source = "auto";
		err = pvhint_open(opts, &h);
		snprintf(buf + n, sizeof(buf) - n, "auto chose %s: %s",
			 err ? "nothing" : pvhint_source_name(h),
			 err ? pvhint_errmsg() : pvhint_note(h));
		if (write(pipefd[1], buf, strlen(buf)) < 0)
			_exit(3);
		_exit(0);
	}
	close(pipefd[1]);
	ssize_t n = read(pipefd[0], buf, sizeof(buf) - 1);
	close(pipefd[0]);
	buf[n > 0 ? n : 0] = 0;
	waitpid(pid, &status, 0);
	report(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(buf, "kvm: -13 ") &&
		   strstr(buf, "grant") &&
		   (strstr(buf, "|auto chose none: ") || strstr(buf, "|auto chose bpf: ")) &&
		   strstr(strstr(buf, "|auto chose"), "Permission denied"),
	       "unprivileged", "as user nobody: %s", buf);
}

int main(int argc, char **argv)
{
	report_prefix = "lib-";
	struct pvhint_options opts = {.source = "kvm"};
	struct watcher w[MAX_CPUS];
	uint64_t steal0[MAX_CPUS], steal1[MAX_CPUS];
	bool squeezed[MAX_CPUS] = {false};
	double seconds = 5;
	const char *list = argc > 2 ? argv[2] : "0,1";
	pvhint_t *autoh;
	char *end;
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1) {
		seconds = strtod(argv[1], &end);
		if (*end || seconds <= 0 || seconds > 3600) {
			fprintf(stderr, "usage: %s [seconds] [squeezed vCPUs: 0,1]\n", argv[0]);
			return 2;
		}
	}
	for (const char *p = list; *p;) {
		long c = strtol(p, &end, 10);

		if (end == p || c < 0 || c >= MAX_CPUS || (*end && *end != ',')) {
			fprintf(stderr, "%s: bad vCPU list '%s'\n", argv[0], list);
			return 2;
		}
		squeezed[c] = true;
		p = *end ? end + 1 : end;
	}

	err = pvhint_open(&opts, &hint);
	report(err == 0, "open-kvm", "pvhint_open(kvm): %s", err ? pvhint_errmsg() : "ok");
	if (err)
		return 1;
	report(strcmp(pvhint_source_name(hint), "kvm") == 0 &&
		   pvhint_header(hint)->source == PVHINT_SOURCE_KVM,
	       "source", "source %s", pvhint_source_name(hint));

	opts.source = "auto";
	err = pvhint_open(&opts, &autoh);
	report(err == 0 && strcmp(pvhint_source_name(autoh), "kvm") == 0, "auto-picks-kvm",
	       "auto chose %s (%s)", err ? "nothing" : pvhint_source_name(autoh),
	       err ? pvhint_errmsg() : pvhint_note(autoh));
	if (!err)
		pvhint_close(autoh);

	check_unprivileged(&opts);

	nr_online = (int)sysconf(_SC_NPROCESSORS_ONLN);
	report(pvhint_nr_vcpus(hint) >= (uint32_t)nr_online && nr_online <= MAX_CPUS &&
		   nr_online >= 2,
	       "nr-vcpus", "%u records, %d online vCPUs", pvhint_nr_vcpus(hint), nr_online);
	report((hint->valid & (PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED)) ==
		   (PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED),
	       "valid", "valid %#x", hint->valid);
	if (nr_online < 2 || nr_online > MAX_CPUS)
		return 1;

	memset(w, 0, sizeof(w));
	for (int c = 0; c < nr_online; c++)
		steal0[c] = pvhint_steal(hint, (unsigned)c);
	for (int c = 0; c < nr_online; c++) {
		w[c].cpu = c;
		if (pthread_create(&w[c].thread, NULL, watch, &w[c]) != 0) {
			report(false, "threads", "pthread_create failed");
			return 1;
		}
	}
	atomic_store_explicit(&go, true, memory_order_release);
	usleep((useconds_t)(seconds * 1e6));
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	for (int c = 0; c < nr_online; c++)
		pthread_join(w[c].thread, NULL);
	for (int c = 0; c < nr_online; c++)
		steal1[c] = pvhint_steal(hint, (unsigned)c);

	unsigned long idle = 0;
	for (int c = 0; c < nr_online; c++) {
		unsigned long set = 0, clear = 0;

		if (w[c].pin_error) {
			report(false, "pin", "vCPU %d: %s", c, strerror(w[c].pin_error));
			continue;
		}
		for (int o = 0; o < nr_online; o++) {
			set += w[o].set_seen[c];
			clear += w[o].clear_seen[c];
		}
		idle += w[c].idle_seen;
		report(w[c].self_preempted == 0, "self-not-preempted", "vCPU %d: %lu", c,
		       w[c].self_preempted);
		/* The host clears is_idle before a vCPU runs: a running vCPU's pCPU is busy. */
		report(w[c].self_idle == 0, "self-pcpu-not-idle",
		       "vCPU %d: pvhint_pcpu_idle(self) true %lu times", c, w[c].self_idle);
		if (!squeezed[c])
			continue;
		report(set > 0 && clear > 0, "preempted-toggles",
		       "vCPU %d: pvhint_vcpu_preempted() went true %lu times, false %lu times", c,
		       set, clear);
		report(steal1[c] > steal0[c], "steal-advances", "vCPU %d: +%.1f ms", c,
		       (double)(steal1[c] - steal0[c]) / 1e6);
	}
	if (!(hint->valid & PVHINT_VALID_IS_IDLE))
		report(idle == 0, "pcpu-idle-false",
		       "pvhint_pcpu_idle() true %lu times without host "
		       "support",
		       idle);
	pvhint_close(hint);
	printf("pvhint_kvm_lib: %s (%d failed)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
