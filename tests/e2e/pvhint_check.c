// SPDX-License-Identifier: MIT
/*
 * pvhint_check: checks /dev/pvhint of a patched KVM guest (run inside L2 of the nested end-to-end
 * test, built static on the host).
 *
 *  - the header follows include/pvrt/pvhint_abi.h and describes every possible CPU;
 *  - the mapping is read-only for good (mmap with PROT_WRITE or PROT_EXEC, mprotect, mremap growth,
 *    offsets and lengths beyond the area all fail) and exposes nothing but zeroes beyond the data;
 *  - with one spinning thread pinned on each vCPU while the host squeezes some vCPUs (the
 *    "squeezed" list) onto one physical CPU and runs another vCPU elsewhere, each squeezed vCPU
 *    is seen preempted and then running again by the other vCPUs, and its steal counter
 *    advances; no vCPU ever sees itself preempted.
 *
 * Two squeezed vCPUs alone cannot see each other's byte change: whenever one runs, the other is
 * preempted. The observer that sees both states is a vCPU on another physical CPU.
 *
 * Prints one "PASS <name>: ..." or "FAIL <name>: ..." line per check and exits 0 only if all
 * passed. With a third argument, vCPU h, it also takes h offline and back online: the host stops
 * updating h's record while h is offline (its steal-time MSR is cleared) and updates it again
 * after h comes back (the guest registered the record again).
 *
 * Directed yield (PVHINT_IOC_YIELD_TO): its errors, that a vCPU seeing a squeezed sibling
 * preempted can ask for it, and how often the sibling then runs before the request returns (a
 * thread counting on it has counted) against as long a wait without a request: reported, not
 * required, since the host's scheduler decides (see guest-patches/README.md).
 *
 * Usage: pvhint_check [seconds, default 10] [squeezed vCPUs, default 0,1] [vCPU to hotplug]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pvrt/pvhint_abi.h"
#include "report.h"

#define MAX_CPUS 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Number of possible CPUs: the highest CPU number in /sys/devices/system/cpu/possible, plus one. */
static int possible_cpus(void)
{
	char buf[256];
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY);
	ssize_t n;
	char *p;
	int hi = -1;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "0-3" or "0,2-5": the last number is the highest. */
	for (p = buf; *p;) {
		if (*p >= '0' && *p <= '9')
			hi = (int)strtol(p, &p, 10);
		else
			p++;
	}
	return hi + 1;
}

static const volatile struct pvhint_record *records;
static int nr_cpus;
static double observe_s = 10.0;
static atomic_bool go, stop;
static bool squeezed[MAX_CPUS];

struct observer {
	int cpu;
	pthread_t thread;
	/* For each other vCPU: transitions seen from this vCPU. */
	unsigned long set_seen[MAX_CPUS];
	unsigned long clear_seen[MAX_CPUS];
	unsigned long self_preempted;
	unsigned long loops;
	/* is_idle: samples with the byte set, per vCPU, and of this vCPU's own byte. */
	unsigned long idle_seen[MAX_CPUS];
	unsigned long self_idle;
	int pin_error;
};

/*
 * Pinned to its vCPU, spins and watches the preempted byte of every other vCPU. While this thread
 * runs, its own vCPU runs, so its own byte must read 0 (bit 1, KVM_VCPU_FLUSH_TLB, is only ever set
 * together with bit 0 by the guest kernel, so testing bit 0 is enough).
 */
static void *observe(void *arg)
{
	struct observer *o = arg;
	unsigned char last[MAX_CPUS];
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(o->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		o->pin_error = errno;
		return NULL;
	}
	while (!atomic_load_explicit(&go, memory_order_acquire))
		;
	for (int c = 0; c < nr_cpus; c++)
		last[c] = records[c].preempted & PVHINT_PREEMPTED;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		/*
		 * Plain volatile loads: the host writes these bytes at any time; a torn or stale
		 * value is impossible for a byte and staleness is what we measure.
		 */
		for (int c = 0; c < nr_cpus; c++) {
			unsigned char p = records[c].preempted & PVHINT_PREEMPTED;

			if (c == o->cpu) {
				o->self_preempted += p;
				o->self_idle += records[c].is_idle != 0;
				continue;
			}
			o->idle_seen[c] += records[c].is_idle != 0;
			if (p && !last[c])
				o->set_seen[c]++;
			if (!p && last[c])
				o->clear_seen[c]++;
			last[c] = p;
		}
		o->loops++;
	}
	return NULL;
}

/* steal of vCPU c, read under its version as the ABI says. */
static unsigned long long read_steal(int c)
{
	unsigned int v1, v2;
	unsigned long long steal;

	do {
		v1 = records[c].version;
		atomic_thread_fence(memory_order_acquire); /* read steal after version */
		steal = records[c].steal;
		atomic_thread_fence(memory_order_acquire); /* and version again after steal */
		v2 = records[c].version;
	} while ((v1 & 1) || v1 != v2);
	return steal;
}

static void check_security(int fd, size_t area, long page)
{
	void *p;
	int rwfd;

	errno = 0;
	p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	report(p == MAP_FAILED && errno == EACCES, "mmap-write-shared-rdonly-fd",
	       "PROT_WRITE MAP_SHARED on O_RDONLY fd: %s",
	       p == MAP_FAILED ? strerror(errno) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, page);

	errno = 0;
	p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	report(p == MAP_FAILED && errno == EPERM, "mmap-write-private",
	       "PROT_WRITE MAP_PRIVATE: %s", p == MAP_FAILED ? strerror(errno) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, page);

	/* As root the file opens for writing (DAC bypass); the driver must still refuse. */
	rwfd = open(PVHINT_DEV_PATH, O_RDWR);
	if (rwfd >= 0) {
		errno = 0;
		p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, rwfd, 0);
		report(p == MAP_FAILED && errno == EPERM, "mmap-write-shared-rdwr-fd",
		       "PROT_WRITE MAP_SHARED on O_RDWR fd: %s",
		       p == MAP_FAILED ? strerror(errno) : "mapped");
		if (p != MAP_FAILED)
			munmap(p, page);
		close(rwfd);
	} else {
		report(true, "mmap-write-shared-rdwr-fd", "O_RDWR open refused: %s",
		       strerror(errno));
	}

	errno = 0;
	p = mmap(NULL, page, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	report(p == MAP_FAILED && (errno == EPERM || errno == EACCES), "mmap-exec", "PROT_EXEC: %s",
	       p == MAP_FAILED ? strerror(errno) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, page);

	p = mmap(NULL, area, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		report(false, "mprotect", "read-only mmap failed: %s", strerror(errno));
	} else {
		int r1, e1, r2, e2;
		void *q;

		errno = 0;
		r1 = mprotect(p, page, PROT_READ | PROT_WRITE);
		e1 = errno;
		errno = 0;
		r2 = mprotect(p, page, PROT_READ | PROT_EXEC);
		e2 = errno;
		report(r1 != 0 && r2 != 0 && e1 == EACCES && e2 == EACCES, "mprotect",
		       "to write: %s, to exec: %s", r1 ? strerror(e1) : "allowed",
		       r2 ? strerror(e2) : "allowed");

		errno = 0;
		q = mremap(p, area, area + page, MREMAP_MAYMOVE);
		report(q == MAP_FAILED, "mremap-grow", "grow by a page: %s",
		       q == MAP_FAILED ? strerror(errno) : "allowed");
		if (q != MAP_FAILED)
			p = q;
		munmap(p, q != MAP_FAILED ? area + page : area);
	}

	errno = 0;
	p = mmap(NULL, area + page, PROT_READ, MAP_SHARED, fd, 0);
	report(p == MAP_FAILED && errno == ENXIO, "mmap-length-beyond", "area + 1 page: %s",
	       p == MAP_FAILED ? strerror(errno) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, area + page);

	errno = 0;
	p = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, (off_t)area);
	report(p == MAP_FAILED && errno == ENXIO, "mmap-offset-beyond", "offset = area size: %s",
	       p == MAP_FAILED ? strerror(errno) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, page);

	/*
	 * A mapping of the record pages alone (offset one page) shows the same records: record 0's
	 * steal read there lies between two reads through the full mapping (a wrong page would show
	 * the header, whose first 8 bytes read as about 78 hours of steal).
	 */
	p = mmap(NULL, area - page, PROT_READ, MAP_SHARED, fd, page);
	if (p == MAP_FAILED) {
		report(false, "mmap-offset-records", "offset %ld: %s", page, strerror(errno));
	} else {
		const volatile struct pvhint_record *full = records;
		unsigned long long s0, s1, s2;

		s0 = read_steal(0);
		records = p;
		s1 = read_steal(0);
		records = full;
		s2 = read_steal(0);
		report(s0 <= s1 && s1 <= s2, "mmap-offset-records",
		       "record 0 steal through offset %ld: %llu <= %llu <= %llu", page, s0, s1, s2);
		munmap(p, area - page);
	}
}

/* Spin one observer on each vCPU of 'cpus' for observe_s / 2 seconds. */
static void run_phase(struct observer *obs, const bool *cpus, int online)
{
	double t0;

	memset(obs, 0, sizeof(*obs) * MAX_CPUS);
	atomic_store(&go, false);
	atomic_store(&stop, false);
	for (int c = 0; c < online; c++) {
		obs[c].cpu = c;
		if (cpus[c] && pthread_create(&obs[c].thread, NULL, observe, &obs[c]) != 0)
			obs[c].pin_error = EAGAIN;
	}
	t0 = now_s();
	atomic_store_explicit(&go, true, memory_order_release);
	while (now_s() - t0 < observe_s / 2)
		usleep(100000);
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	for (int c = 0; c < online; c++)
		if (cpus[c] && !obs[c].pin_error)
			pthread_join(obs[c].thread, NULL);
}

/*
 * is_idle, when the host provides it. busy: the observers of the first phase, one on every vCPU.
 *  - A running vCPU never sees its own is_idle set (the host clears it before the vCPU runs).
 *  - The squeezed vCPUs share a physical CPU that both keep busy: while one is preempted, the
 *    other runs there, so the unsqueezed vCPU sees their is_idle set rarely if ever (< 5% of
 *    its samples, a margin for the moments the host runs nothing else).
 *  - Second phase: only the squeezed vCPUs spin; the others halt and their physical CPU goes
 *    idle, so the squeezed vCPUs see those vCPUs' is_idle set.
 */
static void check_is_idle(const struct observer *busy, int online)
{
	struct observer idle[MAX_CPUS];
	bool on[MAX_CPUS] = {false};
	int watcher = -1;

	for (int c = 0; c < online; c++) {
		report(busy[c].self_idle == 0, "is-idle-self-running",
		       "vCPU %d saw its own is_idle set in %lu of %lu loops", c, busy[c].self_idle,
		       busy[c].loops);
		if (!squeezed[c] && watcher < 0)
			watcher = c;
	}
	if (watcher < 0) {
		report(false, "is-idle", "no unsqueezed vCPU to watch from");
		return;
	}
	for (int c = 0; c < online; c++) {
		if (!squeezed[c])
			continue;
		report(busy[watcher].idle_seen[c] * 20 < busy[watcher].loops, "is-idle-busy-pcpu",
		       "vCPU %d (squeezed, pCPU busy) seen idle in %lu of %lu samples by vCPU %d",
		       c, busy[watcher].idle_seen[c], busy[watcher].loops, watcher);
	}

	for (int c = 0; c < online; c++)
		on[c] = squeezed[c];
	run_phase(idle, on, online);
	for (int c = 0; c < online; c++) {
		unsigned long seen = 0, loops = 0;

		if (squeezed[c]) {
			report(idle[c].self_idle == 0, "is-idle-self-running",
			       "second phase: vCPU %d saw its own is_idle set in %lu loops", c,
			       idle[c].self_idle);
			continue;
		}
		for (int o = 0; o < online; o++) {
			if (!squeezed[o])
				continue;
			seen += idle[o].idle_seen[c];
			loops += idle[o].loops;
		}
		report(seen > 0, "is-idle-idle-pcpu",
		       "vCPU %d halted on an idle pCPU: seen idle in %lu of %lu samples", c, seen,
		       loops);
	}
}

static int set_online(int cpu, int on)
{
	char path[64];
	int fd, ok;

	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", cpu);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	ok = write(fd, on ? "1" : "0", 1) == 1;
	close(fd);
	return ok ? 0 : -errno;
}

static void *spin_on(void *arg)
{
	int cpu = *(int *)arg;
	cpu_set_t set;
	double t0 = now_s();

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		return (void *)1;
	while (now_s() - t0 < 1.0)
		;
	return NULL;
}

struct counter {
	int cpu, pin_error;
	atomic_ulong count;
	atomic_bool stop;
};

static int pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? errno : 0;
}

static void *count_on(void *arg)
{
	struct counter *k = arg;

	k->pin_error = pin_self(k->cpu);
	while (!k->pin_error && !atomic_load_explicit(&k->stop, memory_order_relaxed))
		atomic_fetch_add_explicit(&k->count, 1, memory_order_relaxed);
	return NULL;
}

/*
 * From vCPU a, for `seconds`: whenever b's record shows b preempted (a and b share one host
 * CPU, so b is preempted whenever a runs), read the counter of a thread that counts on b, then
 * either ask for b (ask) or wait as long as a request took on average (*ns / tries of the asking
 * rounds so far, `win`), and read it again: b may also run because a's turn ended meanwhile.
 * Counts the tries and those after which the counter moved.
 */
static void yield_round(int fd, int b, struct counter *k, bool ask, double seconds, double win,
			unsigned long *tries, unsigned long *moved, unsigned long errs[4],
			double *ns)
{
	double t0 = now_s();

	while (now_s() - t0 < seconds) {
		unsigned long c0, c1;
		double s0;

		if (!(records[b].preempted & PVHINT_PREEMPTED))
			continue;
		c0 = atomic_load_explicit(&k->count, memory_order_relaxed);
		s0 = now_s();
		if (ask && ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)b) != 0) {
			errs[errno == EAGAIN ? 0 : errno == EBUSY ? 1 : errno == EINVAL ? 2 : 3]++;
			/* EBUSY: within the rate limit; wait it out rather than count it. */
			while (now_s() - s0 < 60e-6)
				;
			continue;
		}
		while (!ask && now_s() - s0 < win)
			;
		c1 = atomic_load_explicit(&k->count, memory_order_relaxed);
		*ns += (now_s() - s0) * 1e9;
		(*tries)++;
		*moved += c1 != c0;
	}
}

static void check_yield(int fd, int a, int b, int watcher)
{
	unsigned long tries[2] = {0}, moved[2] = {0}, errs[4] = {0}, junk[4] = {0};
	double ns[2] = {0};
	struct counter k = {.cpu = b};
	cpu_set_t saved;
	pthread_t t;
	int r, e;

	r = ioctl(fd, _IO(0xB8, 15), 0UL);
	report(r == -1 && errno == ENOTTY, "yield-unknown-request", "ioctl 0xB80F: %s",
	       r ? strerror(errno) : "accepted");
	r = ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)nr_cpus);
	e = errno;
	report(r == -1 && e == EINVAL, "yield-supported",
	       "a CPU beyond the records: %s (EOPNOTSUPP: the host offers no directed yield)",
	       r ? strerror(e) : "accepted");
	if (r == 0 || e != EINVAL)
		return;
	sched_getaffinity(0, sizeof(saved), &saved);
	if (pin_self(a)) {
		report(false, "yield", "cannot pin to vCPU %d", a);
		return;
	}
	r = ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)a);
	report(r == -1 && errno == EAGAIN, "yield-self", "vCPU %d asking for itself: %s", a,
	       r ? strerror(errno) : "accepted");
	if (watcher >= 0) {
		/* An idle, unsqueezed vCPU is halted, not preempted. */
		usleep(100000);
		r = ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)watcher);
		report(r == -1 && errno == EAGAIN, "yield-not-preempted",
		       "vCPU %d asking for idle vCPU %d: %s", a, watcher,
		       r ? strerror(errno) : "accepted");
	}
	if (pthread_create(&t, NULL, count_on, &k)) {
		report(false, "yield", "pthread_create failed");
		return;
	}
	/* Alternate asking and waiting, so that both see the same host. */
	for (int round = 0; round < 8; round++) {
		bool ask = !(round & 1);

		yield_round(fd, b, &k, ask, observe_s / 16,
			    tries[0] ? ns[0] / tries[0] / 1e9 : 100e-6, &tries[!ask], &moved[!ask],
			    ask ? errs : junk, &ns[!ask]);
	}
	atomic_store(&k.stop, true);
	pthread_join(t, NULL);
	sched_setaffinity(0, sizeof(saved), &saved);
	if (k.pin_error) {
		report(false, "yield", "cannot pin to vCPU %d: %s", b, strerror(k.pin_error));
		return;
	}
	report(tries[0] > 0 && errs[2] + errs[3] == 0, "yield-asks",
	       "vCPU %d asked for preempted vCPU %d %lu times; refused: %lu EAGAIN (it ran "
	       "meanwhile), %lu EBUSY, %lu EINVAL, %lu other",
	       a, b, tries[0], errs[0], errs[1], errs[2], errs[3]);
	printf("INFO yield: vCPU %d ran before %lu of %lu requests returned (%.3f; %.0f us each) "
	       "and during %lu of %lu waits as long without a request (%.3f; %.0f us each)\n",
	       b, moved[0], tries[0], tries[0] ? (double)moved[0] / tries[0] : 0.0,
	       tries[0] ? ns[0] / tries[0] / 1e3 : 0.0, moved[1], tries[1],
	       tries[1] ? (double)moved[1] / tries[1] : 0.0,
	       tries[1] ? ns[1] / tries[1] / 1e3 : 0.0);
}

/* Take vCPU cpu offline and online again; see the usage above. */
static void check_hotplug(int cpu, int online)
{
	unsigned int v_off1, v_off2, v_on;
	pthread_t t;
	void *ret = (void *)1;
	int err;

	if (cpu <= 0 || cpu >= online) {
		report(false, "hotplug", "vCPU %d cannot be taken offline (%d online)", cpu,
		       online);
		return;
	}
	err = set_online(cpu, 0);
	report(err == 0, "hotplug-offline", "vCPU %d offline: %s", cpu,
	       err ? strerror(-err) : "ok");
	if (err)
		return;
	usleep(300000);
	v_off1 = records[cpu].version;
	usleep(1000000);
	v_off2 = records[cpu].version;
	report(v_off1 == v_off2, "hotplug-offline-frozen",
	       "vCPU %d offline: record version %u -> %u in 1 s (host must not write)", cpu, v_off1,
	       v_off2);
	err = set_online(cpu, 1);
	report(err == 0, "hotplug-online", "vCPU %d online: %s", cpu, err ? strerror(-err) : "ok");
	if (err)
		return;
	if (pthread_create(&t, NULL, spin_on, &cpu) == 0)
		pthread_join(t, &ret);
	v_on = records[cpu].version;
	report(ret == NULL && v_on != v_off2, "hotplug-online-registered",
	       "vCPU %d back online: record version %u -> %u (host writes again)", cpu, v_off2,
	       v_on);
}

int main(int argc, char **argv)
{
	long page = sysconf(_SC_PAGESIZE);
	const struct pvhint_header *h;
	struct observer obs[MAX_CPUS];
	unsigned long long steal0[MAX_CPUS], steal1[MAX_CPUS];
	size_t area;
	int fd, online, possible;
	char *end;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1) {
		observe_s = strtod(argv[1], &end);
		if (*end || observe_s <= 0 || observe_s > 3600) {
			fprintf(stderr,
				"usage: %s [seconds (0 < s <= 3600)] [squeezed CPUs: 0,1]\n",
				argv[0]);
			return 2;
		}
	}
	{
		const char *list = argc > 2 ? argv[2] : "0,1";

		for (const char *p = list; *p;) {
			long c = strtol(p, &end, 10);

			if (end == p || c < 0 || c >= MAX_CPUS || (*end && *end != ',')) {
				fprintf(stderr, "%s: bad squeezed CPU list '%s'\n", argv[0], list);
				return 2;
			}
			squeezed[c] = true;
			p = *end ? end + 1 : end;
		}
	}

	fd = open(PVHINT_DEV_PATH, O_RDONLY | O_CLOEXEC);
	report(fd >= 0, "open", "%s: %s", PVHINT_DEV_PATH, fd >= 0 ? "ok" : strerror(errno));
	if (fd < 0)
		return 1;

	h = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
	report(h != MAP_FAILED, "mmap-header", "%s", h != MAP_FAILED ? "ok" : strerror(errno));
	if (h == MAP_FAILED)
		return 1;

	possible = possible_cpus();
	online = (int)sysconf(_SC_NPROCESSORS_ONLN);
	report(h->magic == PVHINT_MAGIC && h->abi_version == PVHINT_ABI_VERSION &&
		   h->source == PVHINT_SOURCE_KVM && h->header_size == PVHINT_HEADER_SIZE &&
		   h->record_stride == PVHINT_RECORD_SIZE,
	       "header", "magic %#x abi %u source %u header_size %u stride %u", h->magic,
	       h->abi_version, h->source, h->header_size, h->record_stride);
	report(h->nr_records == (unsigned int)possible && possible <= MAX_CPUS, "header-records",
	       "nr_records %u, possible CPUs %d, online %d", h->nr_records, possible, online);
	report((h->valid & (PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED)) ==
		   (PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED),
	       "header-valid", "valid %#x (is_idle %s)", h->valid,
	       h->valid & PVHINT_VALID_IS_IDLE ? "provided" : "not provided by this host");
	{
		const unsigned char *b = (const unsigned char *)h;
		long nz = 0;

		for (long i = sizeof(*h) - sizeof(h->reserved); i < page; i++)
			nz += b[i] != 0;
		report(nz == 0, "header-zero", "%ld non-zero bytes after the header fields", nz);
	}
	if (h->nr_records == 0 || h->nr_records > MAX_CPUS ||
	    h->record_stride != PVHINT_RECORD_SIZE)
		return 1;
	nr_cpus = (int)h->nr_records;
	area = h->header_size +
	       (((size_t)nr_cpus * h->record_stride + page - 1) & ~(size_t)(page - 1));

	{
		const unsigned char *base = mmap(NULL, area, PROT_READ, MAP_SHARED, fd, 0);
		long nz = 0;

		report(base != MAP_FAILED, "mmap-area", "%zu bytes: %s", area,
		       base != MAP_FAILED ? "ok" : strerror(errno));
		if (base == MAP_FAILED)
			return 1;
		records = (const volatile struct pvhint_record *)(base + h->header_size);
		for (size_t i = h->header_size + (size_t)nr_cpus * h->record_stride; i < area; i++)
			nz += base[i] != 0;
		report(nz == 0, "tail-zero", "%ld non-zero bytes after the last record", nz);
		if (!(h->valid & PVHINT_VALID_IS_IDLE)) {
			int bad = 0;

			for (int c = 0; c < nr_cpus; c++)
				bad += records[c].is_idle != 0;
			report(bad == 0, "is-idle-zero",
			       "%d records with is_idle set though not valid", bad);
		}
	}

	check_security(fd, area, page);

	if (online < 2) {
		report(false, "observe", "needs at least 2 online vCPUs, have %d", online);
		return 1;
	}

	for (int c = online; c < MAX_CPUS; c++) {
		if (squeezed[c]) {
			report(false, "observe", "squeezed vCPU %d is not online (%d online)", c,
			       online);
			return 1;
		}
	}
	for (int c = 0; c < online; c++)
		steal0[c] = read_steal(c);
	memset(obs, 0, sizeof(obs));
	for (int c = 0; c < online; c++) {
		obs[c].cpu = c;
		if (pthread_create(&obs[c].thread, NULL, observe, &obs[c]) != 0) {
			report(false, "observe", "pthread_create failed");
			return 1;
		}
	}
	{
		double t0 = now_s();

		atomic_store_explicit(&go, true, memory_order_release);
		while (now_s() - t0 < observe_s)
			usleep(100000);
		atomic_store_explicit(&stop, true, memory_order_relaxed);
	}
	for (int c = 0; c < online; c++)
		pthread_join(obs[c].thread, NULL);
	for (int c = 0; c < online; c++)
		steal1[c] = read_steal(c);

	for (int c = 0; c < online; c++) {
		unsigned long set = 0, clear = 0;

		if (obs[c].pin_error) {
			report(false, "observe", "cannot pin to CPU %d: %s", c,
			       strerror(obs[c].pin_error));
			continue;
		}
		for (int o = 0; o < online; o++) {
			set += obs[o].set_seen[c];
			clear += obs[o].clear_seen[c];
		}
		report(obs[c].self_preempted == 0, "self-not-preempted",
		       "vCPU %d saw itself preempted in %lu of %lu loops", c, obs[c].self_preempted,
		       obs[c].loops);
		if (!squeezed[c]) {
			printf(
			    "INFO vCPU %d (not squeezed): seen preempted %lu times, running again "
			    "%lu times, steal +%.1f ms\n",
			    c, set, clear, (steal1[c] - steal0[c]) / 1e6);
			continue;
		}
		report(set > 0 && clear > 0, "preempted-toggles",
		       "vCPU %d seen preempted %lu times and running again %lu times by the others",
		       c, set, clear);
		report(steal1[c] > steal0[c], "steal-advances",
		       "vCPU %d steal %llu -> %llu ns (+%.1f ms in %.0f s)", c, steal0[c],
		       steal1[c], (steal1[c] - steal0[c]) / 1e6, observe_s);
	}

	if (h->valid & PVHINT_VALID_IS_IDLE)
		check_is_idle(obs, online);

	{
		int a = -1, b = -1, watcher = -1;

		for (int c = 0; c < online; c++) {
			if (!squeezed[c])
				watcher = watcher < 0 ? c : watcher;
			else if (a < 0)
				a = c;
			else if (b < 0)
				b = c;
		}
		if (a >= 0 && b >= 0)
			check_yield(fd, a, b, watcher);
		else
			report(false, "yield", "needs two squeezed vCPUs");
	}

	if (argc > 3)
		check_hotplug((int)strtol(argv[3], NULL, 10), online);

	printf("pvhint_check: %s (%d failed)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
