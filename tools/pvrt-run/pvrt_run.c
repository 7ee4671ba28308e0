/* SPDX-License-Identifier: MIT */
/*
 * pvrt-run [--hints=SRC] [--emu=SPEC] [--locks=pvrt|glibc] [--mn] [--workers=N] [--stats] [--]
 *          PROGRAM [ARGS...]
 *
 * Runs PROGRAM with libpvrt-preload.so (pvrt's locks behind glibc's pthread
 * lock functions) and the chosen hint source. --emu=SPEC selects the overcommit
 * emulator (implies --hints=emu) and places every application thread on an
 * emulated vCPU. --stats prints, when PROGRAM exits, per lock class:
 * acquisitions, contended acquisitions, spins cut short because the owner's
 * vCPU was preempted, parks and hand-offs (summed over PROGRAM's processes).
 * When ULTs ran in PROGRAM (M:N mode), --stats also prints per worker: ULT switches, steals,
 * rescues (steals from a worker whose vCPU was preempted), preemptions, hand-offs of the worker
 * for a ULT blocked in the kernel, ULTs created, and lends (an idle worker's directed yields to
 * a preempted one: sched/README.md).
 * --locks=glibc keeps glibc's locks (everything else unchanged, e.g. thread placement under
 * --emu): the baseline for comparisons under the emulator. --mn runs every pthread of PROGRAM as
 * a ULT of pvrt's runtime (PVRT_MN=1, runtime/MN.md); --workers=N sets the runtime's worker
 * count (PVRT_WORKERS). With the bpf source (auto or bpf) and no pvhintd, pvrt-run loads the
 * bpf program once for PROGRAM's whole process tree (start_bpf_server; pvhint/README.md).
 *
 * Exit status: PROGRAM's (128 + signal if it was killed); 2 for a usage error;
 * 127 if PROGRAM cannot be run.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PVRT_INSTALL_LIBDIR
#define PVRT_INSTALL_LIBDIR "/usr/local/lib"
#endif
#define PRELOAD_NAME "libpvrt-preload.so"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: pvrt-run [--hints=SRC] [--emu=SPEC] [--locks=pvrt|glibc] [--mn] "
	       "[--workers=N] [--stats] [--] PROGRAM [ARGS...]\n"
	       "  --hints=SRC   hint source: auto (default), kvm, bpf, emu, none\n"
	       "  --emu=SPEC    overcommit emulator, e.g. vcpus=4,pcpus=2 (implies --hints=emu)\n"
	       "  --locks=KIND  pvrt (default) or glibc (the baseline: glibc's locks, same setup)\n"
	       "  --mn          M:N mode: every pthread is a ULT of pvrt's runtime\n"
	       "  --workers=N   the runtime's worker threads (1..256; default: one per CPU)\n"
	       "  --stats       print per-lock-class statistics when PROGRAM exits\n"
	       "  --help        this text\n");
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "pvrt-run: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	usage(stderr);
	return 2;
}

static bool is_file(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* $PVRT_PRELOAD, else next to this executable (build tree), else the install libdir. */
static int find_preload(char *out, size_t n)
{
	const char *env = getenv("PVRT_PRELOAD");
	if (env && *env) {
		if (!is_file(env))
			return -1;
		snprintf(out, n, "%s", env);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (k > 0) {
		self[k] = 0;
		char *dir = dirname(self);
		snprintf(out, n, "%s/%s", dir, PRELOAD_NAME);
		if (is_file(out))
			return 0;
		/* An installed tree, wherever it was installed (the libdir relative to bindir). */
		snprintf(out, n, "%s/%s/%s", dir, PVRT_BIN_TO_LIB, PRELOAD_NAME);
		if (is_file(out))
			return 0;
	}
	snprintf(out, n, "%s/%s", PVRT_INSTALL_LIBDIR, PRELOAD_NAME);
	return is_file(out) ? 0 : -1;
}

#define PVRT_RUN_WORKERS 256 /* PVRT_MAX_WORKERS */

/* A line of the statistics file: a name and up to 7 counts (lock classes have 5). */
#define NV 7
struct sums {
	char name[64];
	unsigned long long v[NV];
};

static void print_stats(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "pvrt-run: no lock statistics were written (did PROGRAM exec "
				"something without the preload, or exit with _exit?)\n");
		return;
	}
	struct sums s[16 + PVRT_RUN_WORKERS];
	int ns = 0;
	char name[64], line[512];
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v[NV] = {0};
		if (sscanf(line, "%63s %llu %llu %llu %llu %llu %llu %llu", name, &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6]) < 6)
			continue;
		int i;
		for (i = 0; i < ns; i++)
			if (!strcmp(s[i].name, name))
				break;
		if (i == ns) {
			if (ns == 16 + PVRT_RUN_WORKERS)
				continue;
			memset(&s[ns], 0, sizeof(s[ns]));
			snprintf(s[ns].name, sizeof(s[ns].name), "%s", name);
			ns++;
		}
		for (int j = 0; j < NV; j++)
			s[i].v[j] += v[j];
	}
	fclose(f);
	fprintf(stderr, "pvrt-run: lock statistics\n%-9s %14s %12s %12s %12s %10s\n", "class",
		"acquisitions", "contended", "spin-cut", "parks", "hand-offs");
	bool workers = false;
	for (int i = 0; i < ns; i++) {
		if (!strncmp(s[i].name, "worker", 6)) {
			workers = true;
			continue;
		}
		fprintf(stderr, "%-9s %14llu %12llu %12llu %12llu %10llu\n", s[i].name, s[i].v[0],
			s[i].v[1], s[i].v[2], s[i].v[3], s[i].v[4]);
	}
	if (!workers)
		return;
	/* Written by the preload when ULTs ran (M:N mode), one line per worker. */
	fprintf(stderr, "pvrt-run: runtime statistics\n%-9s %14s %12s %12s %12s %12s %10s %10s\n",
		"worker", "switches", "steals", "rescues", "preemptions", "hand-offs", "ULTs",
		"lends");
	for (int i = 0; i < ns; i++)
		if (!strncmp(s[i].name, "worker", 6))
			fprintf(stderr, "%-9s %14llu %12llu %12llu %12llu %12llu %10llu %10llu\n",
				s[i].name + 6, s[i].v[0], s[i].v[1], s[i].v[6], s[i].v[2],
				s[i].v[3], s[i].v[4], s[i].v[5]);
}

/* ---------------------------------------------------------------- one bpf instance per run */

static volatile int srv_stop;
static const char *srv_path;

static void *watch_program(void *arg)
{
	struct pollfd p = {.fd = (int)(intptr_t)arg, .events = POLLIN};
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	/* PROGRAM has exited: serve on while any of its processes is attached. */
	__atomic_store_n(&srv_stop, PVHINT_SERVE_STOP_IDLE, __ATOMIC_RELAXED);
	/*
	 * Then wake the server's poll with a connection of our own, closed at once: it sees the
	 * flag within one loop instead of at its next 200 ms timeout. That matters: the attached
	 * program costs every context switch of the machine (3% of a switch-heavy glibc program's
	 * time here, 13% while the wake-up programs were attached: pvhint/README.md), and a
	 * server that lingers taxes whatever runs next, e.g. the next side of a benchmark. A
	 * pending connection keeps the socket readable until accepted, so the wake-up is not lost
	 * if poll has not started yet.
	 */
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", srv_path);
	if (fd >= 0) {
		connect(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
	}
	return NULL;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Close every descriptor but these three (close_range: Linux 5.9; else one by one). */
static void close_all_but(int a, int b, int c)
{
	int keep[4] = {a, b, c, INT_MAX};
	qsort(keep, 3, sizeof(int), cmp_int);
	unsigned lo = 0;
	for (int i = 0; i < 4; i++) {
		unsigned hi = keep[i] == INT_MAX ? ~0u : (unsigned)keep[i] - 1;
		if ((unsigned)keep[i] > lo && syscall(SYS_close_range, lo, hi, 0))
			for (unsigned fd = lo; fd <= hi && fd < 65536; fd++)
				close((int)fd);
		lo = (unsigned)keep[i] + 1;
	}
}

/* The server: PROGRAM's process tree attaches here. Never returns. */
static void serve(int lfd, int ready, int pidfd, const char *path, const char *dir)
{
	/* Out of PROGRAM's way: its own session (no terminal signals), no descriptor of
	 * PROGRAM's (a pipe held open here would keep PROGRAM's reader waiting for EOF). */
	setsid();
	close_all_but(lfd, ready, pidfd);
	int nul = open("/dev/null", O_RDWR); /* 0, 1 and 2, where not one of ours */
	for (int fd = 0; fd < 3 && nul >= 0; fd++)
		if (fd != nul && fd != lfd && fd != ready && fd != pidfd)
			dup2(nul, fd);
	if (nul > 2)
		close(nul);
	/* Load here (one handle keeps the instance), then say whether it worked. */
	struct pvhint_options o = {.source = "bpf"};
	pvhint_t *h = NULL;
	pthread_t t;
	srv_path = path;
	char ok = pvhint_open(&o, &h) == 0 &&
		  !pthread_create(&t, NULL, watch_program, (void *)(intptr_t)pidfd);
	if (write(ready, &ok, 1) != 1 || !ok) {
		unlink(path);
		rmdir(dir);
		_exit(0);
	}
	close(ready);
	pvhint_bpf_serve(lfd, &srv_stop);
	unlink(path);
	rmdir(dir);
	_exit(0);
}

/*
 * One bpf instance for PROGRAM's whole process tree. Without pvhintd, every process that opens
 * the bpf source loads an instance of its own: about 20 ms of CPU each (the kernel's BTF parse
 * and verification, pvhint/README.md), and one more program at every context switch while it
 * lives; a shell script or any fork/exec-heavy program pays that per command. So when it may
 * load, pvrt-run starts a server on a socket in a private directory (0700) and PROGRAM's
 * processes attach there (PVHINT_BPF_SOCKET), as to pvhintd. The server is a grandchild in its
 * own session: no child of PROGRAM (a shell's `wait` would wait for it), holding none of its
 * descriptors. It serves until PROGRAM has exited and no process is attached any more (a
 * process stays attached while it lives). Not started when the source cannot be bpf, when
 * pvhintd or PVHINT_BPF_SOCKET already name an instance, for auto when a kvm page exists
 * (auto takes it first), or when the load fails (each process then tries itself, as before).
 */
static void start_bpf_server(const char *hints)
{
	if (!hints)
		hints = getenv("PVRT_HINTS");
	if (hints && *hints && strcmp(hints, "auto") && strcmp(hints, "bpf"))
		return;
	const char *env = getenv("PVHINT_BPF_SOCKET");
	if (env && *env)
		return;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	strcpy(a.sun_path, PVHINT_BPF_SOCKET_PATH);
	int up = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	if (up)
		return; /* pvhintd serves */
	if (!hints || !*hints || !strcmp(hints, "auto")) {
		struct pvhint_options o = {.source = "kvm"};
		pvhint_t *h = NULL;
		if (pvhint_open(&o, &h) == 0) {
			pvhint_close(h);
			return;
		}
	}
	const char *tmp = getenv("TMPDIR");
	char dir[sizeof(a.sun_path) - 8];
	if (!tmp || *tmp != '/' ||
	    snprintf(dir, sizeof(dir), "%s/pvrt-run.XXXXXX", tmp) >= (int)sizeof(dir))
		snprintf(dir, sizeof(dir), "/tmp/pvrt-run.XXXXXX");
	if (!mkdtemp(dir))
		return;
	char path[sizeof(a.sun_path)];
	snprintf(path, sizeof(path), "%s/bpf", dir);
	strcpy(a.sun_path, path);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	int rp[2] = {-1, -1};
	if (lfd < 0 || pidfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lfd, 64) || pipe2(rp, O_CLOEXEC))
		goto out;
	pid_t c = fork();
	if (c == 0) {
		if (fork() == 0)
			serve(lfd, rp[1], pidfd, path, dir);
		_exit(0);
	}
	if (c > 0) {
		while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
			;
		close(rp[1]);
		rp[1] = -1;
		char ok = 0;
		while (read(rp[0], &ok, 1) < 0 && errno == EINTR)
			;
		if (ok) {
			setenv("PVHINT_BPF_SOCKET", path, 1);
			close(lfd);
			close(pidfd);
			close(rp[0]);
			return; /* the server removes the socket and the directory */
		}
	}
out:
	for (int i = 0; i < 2; i++)
		if (rp[i] >= 0)
			close(rp[i]);
	if (lfd >= 0)
		close(lfd);
	if (pidfd >= 0)
		close(pidfd);
	unlink(path);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	const char *hints = NULL, *emu = NULL, *locks = NULL, *workers = NULL;
	bool stats = false, mn = false;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-')
			break;
		if (!strncmp(a, "--hints=", 8))
			hints = a + 8;
		else if (!strncmp(a, "--emu=", 6))
			emu = a + 6;
		else if (!strncmp(a, "--locks=", 8))
			locks = a + 8;
		else if (!strcmp(a, "--stats"))
			stats = true;
		else if (!strcmp(a, "--mn"))
			mn = true;
		else if (!strncmp(a, "--workers=", 10))
			workers = a + 10;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else
			return usage_error("unknown option '%s'", a);
	}
	if (i >= argc)
		return usage_error("%s", "no PROGRAM given");
	if (hints && !*hints)
		return usage_error("%s", "--hints needs a value");
	if (hints && strcmp(hints, "auto") && strcmp(hints, "kvm") && strcmp(hints, "emu") &&
	    strcmp(hints, "none") && strcmp(hints, "bpf"))
		return usage_error("unknown hint source '%s' (auto, kvm, bpf, emu, none)", hints);
	if (locks && strcmp(locks, "pvrt") && strcmp(locks, "glibc"))
		return usage_error("--locks is pvrt or glibc, not '%s'", locks);
	if (workers) {
		char *end;
		errno = 0;
		long n = strtol(workers, &end, 10);
		if (!*workers || *end || errno || n < 1 || n > 256)
			return usage_error("--workers is a number in 1..256, not '%s'", workers);
	}
	if (mn && locks && !strcmp(locks, "glibc"))
		return usage_error("%s", "--mn needs pvrt's locks, not --locks=glibc");
	if (emu && !*emu)
		return usage_error("%s", "--emu needs a SPEC, e.g. --emu=vcpus=4,pcpus=2");
	if (emu && hints && strcmp(hints, "emu"))
		return usage_error("--emu needs --hints=emu, not '%s'", hints);
	if (emu)
		hints = "emu";
	/* Check the source and the emulator spec now, so a typo is a usage error and not a
	 * failure inside PROGRAM. Not by opening auto or bpf: that may load the bpf program,
	 * whose verification costs 0.1-0.2 s of CPU, here and again in PROGRAM (an explicit bpf
	 * that cannot load is said by the preload at PROGRAM's start, which then runs on none). */
	if (hints && (!strcmp(hints, "auto") || !strcmp(hints, "bpf"))) {
		;
	} else if (hints) {
		struct pvhint_options o = {.source = hints, .emu = emu};
		pvhint_t *h = NULL;
		int r = pvhint_open(&o, &h);
		if (r < 0) {
			char msg[512];
			snprintf(msg, sizeof(msg), "%s", pvhint_errmsg());
			return usage_error("bad hint settings: %s", msg);
		}
		pvhint_close(h);
	}

	start_bpf_server(hints);

	char preload[PATH_MAX];
	if (find_preload(preload, sizeof(preload))) {
		fprintf(stderr, "pvrt-run: cannot find %s (set PVRT_PRELOAD)\n", PRELOAD_NAME);
		return 127;
	}
	const char *old = getenv("LD_PRELOAD");
	char *ld;
	if (asprintf(&ld, "%s%s%s", preload, old && *old ? ":" : "", old ? old : "") < 0)
		return 127;
	setenv("LD_PRELOAD", ld, 1);
	if (hints)
		setenv("PVRT_HINTS", hints, 1);
	if (emu)
		setenv("PVRT_EMU", emu, 1);
	if (locks)
		setenv("PVRT_LOCKS", locks, 1);
	if (mn)
		setenv("PVRT_MN", "1", 1);
	if (workers)
		setenv("PVRT_WORKERS", workers, 1);

	/* --emu=...,export=PATH: PROGRAM's process exports (the check above created and removed
	 * the file, so the path is free and ours); one that leaves by _exit (dash does), exec or a
	 * signal cannot remove it, so pvrt-run waits for PROGRAM and removes it then. */
	char export[PATH_MAX] = "";
	const char *ex = emu ? strstr(emu, "export=") : NULL;
	if (ex && (ex == emu || ex[-1] == ',' || ex[-1] == ' '))
		snprintf(export, sizeof(export), "%.*s", (int)strcspn(ex + 7, ","), ex + 7);

	if (!stats && !export[0]) {
		unsetenv("PVRT_STATS_FILE");
		execvp(argv[i], argv + i);
		fprintf(stderr, "pvrt-run: cannot run %s: %s\n", argv[i], strerror(errno));
		return 127;
	}

	char path[] = "/tmp/pvrt-run-stats.XXXXXX";
	if (stats) {
		int fd = mkstemp(path);
		if (fd < 0) {
			fprintf(stderr, "pvrt-run: cannot create a statistics file: %s\n",
				strerror(errno));
			return 127;
		}
		close(fd);
		setenv("PVRT_STATS_FILE", path, 1);
	} else {
		unsetenv("PVRT_STATS_FILE");
	}
	/* Like system(): the terminal's SIGINT/SIGQUIT are for PROGRAM; we report after it. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "pvrt-run: fork: %s\n", strerror(errno));
		if (stats)
			unlink(path);
		return 127;
	}
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGQUIT, SIG_DFL);
		execvp(argv[i], argv + i);
		fprintf(stderr, "pvrt-run: cannot run %s: %s\n", argv[i], strerror(errno));
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (stats) {
		print_stats(path);
		unlink(path);
	}
	struct stat est;
	if (export[0] && !lstat(export, &est) && S_ISREG(est.st_mode) && est.st_uid == geteuid())
		unlink(export);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 1;
}
