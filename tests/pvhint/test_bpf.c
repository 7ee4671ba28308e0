/* SPDX-License-Identifier: MIT */
/*
 * The bpf source under real CFS oversubscription (busy threads pinned to one CPU):
 *  - a thread whose record says preempted is not running: its progress counter does not move
 *    while the flag stays set and the record's version is unchanged (no switch-in in between),
 *    and /proc says it is runnable (R);
 *  - a running thread never reads itself preempted or sleeping;
 *  - a sleeping thread's is_idle is 0 while another thread runs on its CPU (the walk of the
 *    CPU's waiting slots when it stops idling);
 *  - steal follows the kernel's own run_delay (schedstat);
 *  - the page cannot be written: not through the mapping (SIGSEGV), not by mprotect, mmap with
 *    PROT_WRITE or a bpf(2) update of the map;
 *  - an unprivileged process gets the one-line error naming the missing capabilities, and auto
 *    falls back to none;
 *  - slot churn: 10k short-lived threads, each registered; slots are freed at thread exit;
 *  - pvhintd's protocol (pvhint_bpf_serve on a socket of group nogroup): an unprivileged process
 *    in that group gets the bpf source through it, read-only, with distinct slots for its
 *    threads, and cannot claim a slot for a thread not its own; so does root, which could load
 *    its own (a daemon that is there is used first); one outside the group gets the one-line
 *    error and none under auto; a socket that never answers costs a client 2 s, not a hang;
 *    a daemon that sends a short file or a page that is not one gives the error, not a crash.
 * Exit 77 (skipped) where the source is unavailable: built without it, kernel without BTF, or
 * not privileged. `test_pvhint_bpf --usable` only answers whether it is (0 yes, 77 no), for the
 * tests that run other programs under PVRT_HINTS=bpf.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvhint_bpf.h"
#include "pvrt_os.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/bpf.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NBUSY 4

static pvhint_t *h;

static int skip(const char *why)
{
	printf("SKIP: bpf source unavailable: %s\n", why);
	return 77;
}

/* ---- unprivileged: the documented error ---- */

/* Returns 77 when the source is unavailable whatever the privilege, else 0. */
static int unprivileged(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* nobody: leaving uid 0 clears the effective capabilities */
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(3);
		pvhint_t *u;
		int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &u);
		printf("unprivileged bpf: %d %s\n", err, pvhint_errmsg());
		fflush(stdout);
		if (err == -ENOTSUP)
			_exit(77); /* built without it, or no BTF: nothing to test */
		if (err != -EPERM || !strstr(pvhint_errmsg(), "needs CAP_BPF and CAP_PERFMON") ||
		    strchr(pvhint_errmsg(), '\n'))
			_exit(1);
		if (pvhint_open(&(struct pvhint_options){.source = "auto"}, &u) ||
		    strcmp(pvhint_source_name(u), "none") || !strstr(pvhint_note(u), "CAP_BPF"))
			_exit(2);
		printf("unprivileged auto: %s (%s)\n", pvhint_source_name(u), pvhint_note(u));
		fflush(stdout);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return 77;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return 0;
}

/* ---- read-only ---- */

static size_t map_len(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return PVHINT_HEADER_SIZE + (((size_t)h->nr * PVHINT_RECORD_SIZE + pg - 1) & ~(pg - 1));
}

/* The fd of this process's BPF array map whose fdinfo also has 'want' (e.g. its size), and that
 * is mmapable. */
static int mmapable_map_fd(const char *want)
{
	DIR *d = opendir("/proc/self/fdinfo");
	struct dirent *e;
	int found = -1;

	CHECK(d);
	while (found < 0 && (e = readdir(d))) {
		char p[300], buf[512];
		snprintf(p, sizeof(p), "/proc/self/fdinfo/%s", e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		const char *fl = strstr(buf, "map_flags:");
		if (strstr(buf, "map_type:\t2\n") && fl &&
		    (strtoul(fl + 10, NULL, 16) & BPF_F_MMAPABLE) && strstr(buf, want))
			found = atoi(e->d_name);
	}
	closedir(d);
	return found;
}

/* The page map's fd (not vCPU mode's, which has 64-byte elements too). */
static int page_map_fd(void)
{
	char want[64];
	snprintf(want, sizeof(want), "max_entries:\t%u\n", PVHINT_BPF_ELEMS);
	return mmapable_map_fd(want);
}

static void read_only(void)
{
	void *map = (void *)pvhint_header(h);
	size_t len = map_len();

	/* mprotect: the read-only mapping may never become writable */
	CHECK(mprotect(map, len, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
	/* a write through the mapping faults */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV,
		       SIG_DFL); /* a sanitizer's handler would turn the fault into exit(1) */
		*(volatile uint8_t *)&h->rec[1].preempted = 1;
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	/* the map itself: frozen, so no writable mapping and no update from user space */
	int fd = page_map_fd();
	CHECK(fd >= 0);
	CHECK(mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED &&
	      errno == EPERM);
	struct pvhint_record r = {.preempted = 1};
	uint32_t key = PVHINT_HEADER_SIZE / PVHINT_RECORD_SIZE + 1;
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)fd;
	a.key = (uint64_t)(uintptr_t)&key;
	a.value = (uint64_t)(uintptr_t)&r;
	a.flags = BPF_ANY;
	CHECK(syscall(SYS_bpf, BPF_MAP_UPDATE_ELEM, &a, sizeof(a)) == -1 && errno == EPERM);
	printf("read-only: mprotect EACCES, store SIGSEGV, mmap(PROT_WRITE) EPERM, update EPERM\n");
}

/* ---- oversubscription ---- */

struct busy {
	pthread_t th;
	int slot, tid;
	uint64_t count;	   /* progress, written by the thread */
	uint64_t self_bad; /* episodes of reading its own record preempted or sleeping */
	uint64_t rd0;	   /* schedstat run_delay at registration */
	uint64_t steal0;   /* record steal at registration */
	uint64_t last_ns;  /* when it last ran user code (every 64 iterations) */
	int ready;
};
static int stop;

static uint64_t run_delay(int tid)
{
	uint64_t run, wait;
	test_schedstat(tid, &run, &wait);
	return wait;
}

static char proc_state(int tid)
{
	char p[64], buf[512];
	snprintf(p, sizeof(p), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(p, "r");
	CHECK(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *c = strrchr(buf, ')');
	return c && c[1] && c[2] ? c[2] : '?';
}

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	CHECK(!sched_setaffinity(0, sizeof(one), &one));
	b->tid = (int)syscall(SYS_gettid);
	b->slot = pvhint_self_vcpu();
	/* A new owner's record says 0 until its first switch-in writes the thread's run_delay,
	 * which includes every wait since the thread started: a sleep first, so that the two
	 * bases below count from the same point (under load the wait before registering was
	 * several times the window measured). */
	test_sleep_us(1000);
	b->rd0 = run_delay(b->tid);
	b->steal0 = pvhint_steal(h, (unsigned)b->slot);
	__atomic_store_n(&b->ready, 1, __ATOMIC_RELEASE);
	const struct pvhint_record *r = &h->rec[b->slot];
	uint32_t bad_v = UINT32_MAX;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		__atomic_store_n(&b->count, b->count + 1, __ATOMIC_RELEASE);
		if ((b->count & 63) == 0)
			__atomic_store_n(&b->last_ns, os_now_ns(), __ATOMIC_RELEASE);
		uint32_t v = __atomic_load_n(&r->version, __ATOMIC_ACQUIRE);
		if (((__atomic_load_n(&r->preempted, __ATOMIC_ACQUIRE) & PVHINT_PREEMPTED) ||
		     __atomic_load_n(&r->sleeping, __ATOMIC_RELAXED)) &&
		    v != bad_v) {
			b->self_bad++; /* episodes: one per unseen switch-in (same version) */
			bad_v = v;
		}
	}
	return NULL;
}

/* NBUSY busy threads on CPU 0, each registered. */
static void start_busy(struct busy *b)
{
	memset(b, 0, NBUSY * sizeof(*b));
	for (int i = 0; i < NBUSY; i++)
		CHECK(!pthread_create(&b[i].th, NULL, busy_main, &b[i]));
	for (int i = 0; i < NBUSY; i++)
		while (!__atomic_load_n(&b[i].ready, __ATOMIC_ACQUIRE))
			test_sleep_us(1000);
}

static void oversubscribed(void)
{
	struct busy b[NBUSY];
	cpu_set_t other;

	/* The observer runs on another CPU, so that it watches the pinned threads from outside. */
	CPU_ZERO(&other);
	for (int c = 1; c < CPU_SETSIZE && c < sysconf(_SC_NPROCESSORS_CONF); c++)
		CPU_SET(c, &other);
	if (!CPU_COUNT(&other) || sched_setaffinity(0, sizeof(other), &other)) {
		printf("oversubscription: skipped (needs a second CPU)\n");
		return;
	}
	start_busy(b);
	for (int i = 0; i < NBUSY; i++)
		CHECK(b[i].slot > 0 && (unsigned)b[i].slot < h->nr);

	uint64_t windows = 0, flagged = 0, samples = 0, stat_r = 0, stat_n = 0, episodes = 0;
	uint64_t waits_cpu0 = 0, waits_elsewhere = 0; /* pvhint_waits_on_cpu of flagged ones */
	int last_slot = -1;
	uint32_t last_v = 0;
	struct pvhint_bpf_stats s0, s1;
	CHECK(!pvhint_bpf_stats(h, &s0));
	uint64_t t0 = os_now_ns();
	while (os_now_ns() - t0 < 2000000000ull || windows < 200) {
		if (os_now_ns() - t0 > 30000000000ull)
			break; /* bounded; the check below says what was seen */
		for (int i = 0; i < NBUSY; i++) {
			const struct pvhint_record *r = &h->rec[b[i].slot];
			samples++;
			uint32_t v1 = __atomic_load_n(&r->version, __ATOMIC_ACQUIRE);
			if (!(__atomic_load_n(&r->preempted, __ATOMIC_ACQUIRE) & PVHINT_PREEMPTED))
				continue;
			flagged++;
			uint64_t c1 = __atomic_load_n(&b[i].count, __ATOMIC_ACQUIRE);
			char st = proc_state(b[i].tid); /* also a few us for the thread to move */
			uint64_t c2 = __atomic_load_n(&b[i].count, __ATOMIC_ACQUIRE);
			bool still =
			    (__atomic_load_n(&r->preempted, __ATOMIC_ACQUIRE) & PVHINT_PREEMPTED) &&
			    __atomic_load_n(&r->version, __ATOMIC_ACQUIRE) == v1;
			if (!still)
				continue;
			/* Flag set throughout and no switch-in: the thread ran no user code. */
			windows++;
			/* Pinned to CPU 0, it can only wait there (or run again: -1). */
			int wc = pvhint_waits_on_cpu(h, (unsigned)b[i].slot);
			waits_cpu0 += wc == 0;
			waits_elsewhere += wc > 0;
			if (c1 != c2) {
				/* It ran: a switch-in the program did not see (counted by it at the
				 * next switch-out). One episode per (slot, version). */
				if (b[i].slot != last_slot || v1 != last_v)
					episodes++;
				last_slot = b[i].slot;
				last_v = v1;
				continue;
			}
			stat_n++;
			stat_r += st == 'R';
		}
		test_sleep_us(200);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NBUSY; i++)
		CHECK(!pthread_join(b[i].th, NULL));
	test_sleep_us(20000); /* the last switch-outs count what they found */
	CHECK(!pvhint_bpf_stats(h, &s1));
	uint64_t self_bad = 0, sw = s1.switches - s0.switches, missed = s1.missed - s0.missed;
	for (int i = 0; i < NBUSY; i++)
		self_bad += b[i].self_bad;
	printf("oversubscription: %d busy threads on CPU 0: %llu samples, %.3f read preempted "
	       "(%.3f expected at fair shares), %llu stable windows, %llu/%llu in R; "
	       "%llu switch-outs, %llu unseen switch-ins, %llu observer episodes, %llu self\n",
	       NBUSY, (unsigned long long)samples, (double)flagged / (double)samples,
	       (double)(NBUSY - 1) / NBUSY, (unsigned long long)windows, (unsigned long long)stat_r,
	       (unsigned long long)stat_n, (unsigned long long)sw, (unsigned long long)missed,
	       (unsigned long long)episodes, (unsigned long long)self_bad);
	CHECK(flagged > 0 && windows > 0);
	CHECK(waits_cpu0 > 0 && waits_elsewhere == 0);
	CHECK(pvhint_waits_on_cpu(h, h->nr) == -1 && pvhint_waits_on_cpu(NULL, 1) == -1);
	CHECK_EQ(stat_r, stat_n); /* preempted threads are runnable, not asleep */
	/* A thread shown preempted ran, or a running thread read itself preempted, only where the
	 * kernel did not give the program that thread's switch-in; the record repairs itself at
	 * the next switch-out, which counts it. Such losses stay rare. A thread's last episode
	 * may end at its exit, which is not a counted switch-out, hence one more per thread
	 * (5 self episodes with 4 counted were seen beside two CPU hogs). */
	CHECK(episodes <= missed + NBUSY && self_bad <= missed + NBUSY);
	CHECK(sw > 100 && missed * 100 <= sw);
	stop = 0;
}

/* Steal follows the kernel's run_delay: threads that only wait for the CPU. */
static void steal_vs_schedstat(void)
{
	struct busy b[NBUSY];
	start_busy(b);
	test_sleep_us(500000);
	uint64_t rd[NBUSY], st[NBUSY];
	for (int i = 0; i < NBUSY; i++) {
		/* Both cumulative; read back to back, while the thread lives. */
		st[i] = pvhint_steal(h, (unsigned)b[i].slot) - b[i].steal0;
		rd[i] = run_delay(b[i].tid) - b[i].rd0;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NBUSY; i++) {
		CHECK(!pthread_join(b[i].th, NULL));
		double q = rd[i] ? (double)st[i] / (double)rd[i] : 0;
		printf("slot %d: steal %.1f ms, schedstat run_delay %.1f ms (ratio %.3f)\n",
		       b[i].slot, st[i] / 1e6, rd[i] / 1e6, q);
		/* Same quantity from two places; the reads are not atomic together, and the
		 * running thread's current wait is in neither or in one: a wide margin. */
		CHECK(rd[i] > 0 && q > 0.7 && q < 1.3);
	}
	stop = 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- is_idle of a sleeping thread follows its CPU (the program's walk at idle changes) ---- */

static int idle_pipe[2];
static int idle_slot;

static void pin_to(int cpu)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	CHECK(!sched_setaffinity(0, sizeof(one), &one));
}

static void *idle_sleeper(void *arg)
{
	pin_to((int)(intptr_t)arg);
	/* Release: pairs with idle_walk's acquire load. */
	__atomic_store_n(&idle_slot, pvhint_self_vcpu(), __ATOMIC_RELEASE);
	char c;
	CHECK(read(idle_pipe[0], &c, 1) == 1); /* asleep here until the end */
	return NULL;
}

/* A running thread on the sleeper's CPU: what it reads of the sleeper's is_idle. */
struct idle_spin {
	int cpu;
	uint64_t reads, ones;
};

static void *idle_spinner(void *arg)
{
	struct idle_spin *x = arg;
	pin_to(x->cpu);
	/* Running here, so this CPU is not idle: once the switch to us was seen (the version
	 * of our own record moved), the sleeper's is_idle must read 0. */
	const struct pvhint_record *me = &h->rec[pvhint_self_vcpu()];
	uint32_t v = __atomic_load_n(&me->version, __ATOMIC_ACQUIRE);
	while (__atomic_load_n(&me->version, __ATOMIC_ACQUIRE) == v)
		sched_yield(); /* until a switch-in of ours is recorded */
	uint64_t t0 = os_now_ns();
	while (os_now_ns() - t0 < 200000000ull) {
		x->reads++;
		x->ones += __atomic_load_n(&h->rec[idle_slot].is_idle, __ATOMIC_RELAXED) != 0;
	}
	return NULL;
}

static void idle_walk(void)
{
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), cpu = ncpu - 1;
	if (ncpu < 2) {
		printf("is_idle walk: skipped (needs a second CPU)\n");
		return;
	}
	pin_to(0); /* the observer stays off the sleeper's CPU */
	CHECK(!pipe(idle_pipe));
	__atomic_store_n(&idle_slot, 0, __ATOMIC_RELAXED);
	pthread_t s;
	CHECK(!pthread_create(&s, NULL, idle_sleeper, (void *)(intptr_t)cpu));
	while (!__atomic_load_n(&idle_slot, __ATOMIC_ACQUIRE))
		test_sleep_us(1000);
	const struct pvhint_record *r = &h->rec[idle_slot];
	/* The sleeper's CPU going idle sets it (only if that CPU gets idle at all: another
	 * program may keep it busy, then this half is not checked). */
	uint64_t t0 = os_now_ns();
	bool seen_idle = false;
	while (!seen_idle && os_now_ns() - t0 < 3000000000ull) {
		seen_idle = __atomic_load_n(&r->sleeping, __ATOMIC_RELAXED) &&
			    __atomic_load_n(&r->is_idle, __ATOMIC_RELAXED);
		test_sleep_us(1000);
	}
	struct idle_spin x = {.cpu = cpu};
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, idle_spinner, &x));
	CHECK(!pthread_join(t, NULL));
	printf("is_idle walk: CPU %d idle seen: %s; a thread running there read the sleeper's "
	       "is_idle 1 in %llu of %llu reads\n",
	       cpu, seen_idle ? "yes" : "no (busy: not checked)", (unsigned long long)x.ones,
	       (unsigned long long)x.reads);
	CHECK(x.reads > 0);
	CHECK_EQ(x.ones, 0);
	CHECK(write(idle_pipe[1], "x", 1) == 1);
	CHECK(!pthread_join(s, NULL));
	close(idle_pipe[0]);
	close(idle_pipe[1]);
	cpu_set_t all;
	CPU_ZERO(&all);
	for (int c = 0; c < ncpu; c++)
		CPU_SET(c, &all);
	CHECK(!sched_setaffinity(0, sizeof(all), &all));
}

/* Flag latency (reported, not asserted: a timing): an observer spinning on another CPU sees a
 * thread's flag go up; the thread's last user-mode timestamp bounds when it stopped running. */
static void flag_latency(void)
{
	struct busy b[NBUSY];
	enum { MAXN = 4096 };
	static uint64_t lat[MAXN];
	bool was[NBUSY] = {0};
	int n = 0;

	start_busy(b);
	uint64_t t0 = os_now_ns(), prev = t0;
	while (n < MAXN && os_now_ns() - t0 < 1000000000ull) {
		/* Samples only while the observer itself ran throughout (gaps under 20 us). */
		uint64_t loop = os_now_ns();
		bool cont = loop - prev < 20000;
		prev = loop;
		for (int i = 0; i < NBUSY && n < MAXN; i++) {
			bool f = __atomic_load_n(&h->rec[b[i].slot].preempted, __ATOMIC_ACQUIRE) &
				 PVHINT_PREEMPTED;
			if (f && !was[i] && cont) {
				uint64_t now = os_now_ns(),
					 last = __atomic_load_n(&b[i].last_ns, __ATOMIC_ACQUIRE);
				if (last && now > last)
					lat[n++] = now - last;
			}
			was[i] = f;
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NBUSY; i++)
		CHECK(!pthread_join(b[i].th, NULL));
	stop = 0;
	if (n) {
		qsort(lat, (size_t)n, sizeof(lat[0]), cmp_u64);
		printf("flag latency (thread's last user-mode time to flag seen): %d switch-outs, "
		       "median %.1f us, p90 %.1f us\n",
		       n, lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3);
	} else
		printf("flag latency: no switch-out seen while the observer ran\n");
}

/* ---- slot churn ---- */

static uint32_t owned_slots(void)
{
	uint32_t n = 0, used = pvhint_nr_used(h);
	for (uint32_t s = 1; s < used; s++)
		n += __atomic_load_n(&h->rec[s].owner, __ATOMIC_RELAXED) != 0;
	return n;
}

static void *short_main(void *arg)
{
	int *slot = arg;
	*slot = pvhint_self_vcpu();
	sched_yield(); /* a switch: the program publishes the owner */
	return NULL;
}

static void churn(void)
{
	enum { TOTAL = 10000, BATCH = 64 };
	int slots[BATCH];
	uint32_t max_owned = 0;
	/* Threads that still hold slots (the busy ones are gone, their hooks may be pending). */
	uint64_t t0 = os_now_ns();
	while (owned_slots() > 1 && os_now_ns() - t0 < 10000000000ull)
		test_sleep_us(1000);
	uint32_t base = owned_slots();
	for (int done = 0; done < TOTAL; done += BATCH) {
		pthread_t th[BATCH];
		for (int i = 0; i < BATCH; i++)
			CHECK(!pthread_create(&th[i], NULL, short_main, &slots[i]));
		for (int i = 0; i < BATCH; i++) {
			CHECK(!pthread_join(th[i], NULL));
			/* > 0: a slot was free for every one, so exits freed theirs */
			CHECK(slots[i] > 0 && (unsigned)slots[i] < h->nr);
		}
		uint32_t o = owned_slots();
		if (o > max_owned)
			max_owned = o;
	}
	t0 = os_now_ns();
	while (owned_slots() > base && os_now_ns() - t0 < 10000000000ull)
		test_sleep_us(1000);
	printf("churn: %d threads, at most %u slots owned at once, %u after (%u before), "
	       "nr_used %u of %u\n",
	       TOTAL, max_owned, owned_slots(), base, pvhint_nr_used(h), h->nr);
	CHECK(owned_slots() <= base);
	CHECK(max_owned < h->nr / 2);
}

/* ---- vCPU mode: the host's steal time, as the guest kernel accounts it ---- */

static uint64_t proc_steal_ns(unsigned cpu)
{
	char line[512], name[16];
	unsigned long long v[8];
	uint64_t ns = UINT64_MAX;
	FILE *f = fopen("/proc/stat", "r");
	CHECK(f);
	snprintf(name, sizeof(name), "cpu%u", cpu);
	while (fgets(line, sizeof(line), f)) {
		char n[16];
		if (sscanf(line, "%15s %llu %llu %llu %llu %llu %llu %llu %llu", n, &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 9 &&
		    !strcmp(n, name))
			ns = v[7] * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
	}
	fclose(f);
	return ns;
}

static uint32_t vcpu_users(void)
{
	struct pvhint_bpf_stats st;
	CHECK(!pvhint_bpf_stats(h, &st));
	return st.vcpu_users;
}

/* The vCPU page's records move (its refresh runs) within a while: its versions change. */
static bool vpage_refreshed(pvhint_t *v)
{
	uint32_t before = __atomic_load_n(&v->rec[0].version, __ATOMIC_ACQUIRE);
	for (int i = 0; i < 400; i++) {
		test_sleep_us(5000);
		if (__atomic_load_n(&v->rec[0].version, __ATOMIC_ACQUIRE) != before)
			return true;
	}
	return false;
}

/*
 * The timers refresh the page while no CPU switches tasks: a SCHED_FIFO spinner on every CPU
 * (the caller on CPU 0) for 200 ms, counting the changes of vCPU 0's record as seen from CPU 0.
 * Without the timers only a switch refreshed it: none in that window but for kernel threads.
 * Up to 3 windows (before 6.5 a CPU whose ksoftirqd was woken defers its timers' softirq to it,
 * and the spinners starve it for the window); without SCHED_FIFO (no CAP_SYS_NICE) not checked.
 */
struct fifo_spin {
	int cpu;
	const int *stop;
};

static bool pin_fifo(int cpu)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	struct sched_param sp = {.sched_priority = 1};
	return !sched_setaffinity(0, sizeof(one), &one) && !sched_setscheduler(0, SCHED_FIFO, &sp);
}

static void *fifo_spinner(void *arg)
{
	struct fifo_spin *f = arg;
	if (!pin_fifo(f->cpu))
		return NULL;
	while (!__atomic_load_n(f->stop, __ATOMIC_RELAXED))
		os_cpu_relax();
	return NULL;
}

static void vcpu_timer_refresh(pvhint_t *v)
{
	int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t old;
	CHECK(!sched_getaffinity(0, sizeof(old), &old));
	if (n > 8 || CPU_COUNT(&old) != n) {
		printf("vcpu timers: not checked (%d CPUs, %d allowed)\n", n, CPU_COUNT(&old));
		return;
	}
	int stop = 0;
	pthread_t t[8];
	struct fifo_spin f[8];
	for (int c = 1; c < n; c++) {
		f[c] = (struct fifo_spin){.cpu = c, .stop = &stop};
		CHECK(!pthread_create(&t[c], NULL, fifo_spinner, &f[c]));
	}
	test_sleep_us(20000); /* the spinners are on their CPUs */
	unsigned changes = 0;
	int tries = 0;
	bool fifo = true;
	while (changes < 20 && tries < 3 && (fifo = pin_fifo(0))) {
		tries++;
		changes = 0;
		uint64_t end = os_now_ns() + 200000000ull;
		uint32_t last = __atomic_load_n(&v->rec[0].version, __ATOMIC_ACQUIRE);
		while (os_now_ns() < end) {
			uint32_t ver = __atomic_load_n(&v->rec[0].version, __ATOMIC_ACQUIRE);
			changes += ver != last;
			last = ver;
		}
		struct sched_param sp = {.sched_priority = 0};
		CHECK(!sched_setscheduler(0, SCHED_OTHER, &sp));
		test_sleep_us(10000); /* what the window starved on CPU 0 runs */
	}
	int why = errno;
	CHECK(!sched_setaffinity(0, sizeof(old), &old));
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int c = 1; c < n; c++)
		pthread_join(t[c], NULL);
	if (!fifo) {
		printf("vcpu timers: not checked (no SCHED_FIFO here: %s)\n", strerror(why));
		return;
	}
	printf(
	    "vcpu timers: %u refreshes seen in 200 ms with every CPU spinning (timer every %u us, "
	    "window %d)\n",
	    changes, PVHINT_BPF_TIMER_NS / 1000, tries);
	CHECK(changes >= 20);
}

static void vcpu_mode(void)
{
	pvhint_t *v;
	/* The refresh (a clock read at every context switch, machine-wide) is off until a vCPU
	 * page is open, and off again once the last one closes. */
	CHECK_EQ(vcpu_users(), 0);
	setenv("PVRT_BPF", "vcpu", 1);
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &v);
	unsetenv("PVRT_BPF");
	if (err) {
		printf("vcpu mode: unavailable here: %s\n", pvhint_errmsg());
		CHECK_EQ(err, -ENOTSUP);
		CHECK_EQ(vcpu_users(), 0);
		return;
	}
	CHECK_EQ(vcpu_users(), 1);
	CHECK(vpage_refreshed(v));
	CHECK_EQ(pvhint_header(v)->kind, PVHINT_KIND_VCPU);
	CHECK_EQ(pvhint_nr_vcpus(v), sysconf(_SC_NPROCESSORS_CONF));
	vcpu_timer_refresh(v);
	test_sleep_us(100000);
	for (unsigned c = 0; c < pvhint_nr_vcpus(v); c++) {
		uint64_t p = proc_steal_ns(c), r = pvhint_steal(v, c);
		printf("vcpu %u: host steal %.3f s (record), %.3f s (/proc/stat)\n", c, r / 1e9,
		       p / 1e9);
		/* the same counter: /proc/stat is the kernel's tick-rounded account of it */
		if (p != UINT64_MAX && p > 1000000000ull && r)
			CHECK(r > p * 9 / 10 && r < p * 11 / 10 + 1000000000ull);
	}
	pvhint_close(v);
	CHECK_EQ(vcpu_users(), 0);
}

/* ---- pvhintd: the source served to unprivileged processes ---- */

/* A thread whose tid's entry in the direct-mapped registration table is taken registers
 * through the tid_slot hash: the program must find it there (its record shows it asleep), and
 * free its slot when it exits. */
struct spill {
	int tid, slot, go;
	int pipe[2];
};

static void *spill_thread(void *p)
{
	struct spill *x = p;
	__atomic_store_n(&x->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	while (!__atomic_load_n(&x->go, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	__atomic_store_n(&x->slot, pvhint_self_vcpu(), __ATOMIC_RELEASE);
	char c;
	CHECK(read(x->pipe[0], &c, 1) == 1); /* asleep until released */
	return NULL;
}

/* own = 0: the thread's entry holds another (impossible) tid: it registers through the hash.
 * own = 1: the entry holds the thread's own tid with another slot, as one left by an exec, which
 * keeps the tid without an exit: the claim replaces it. */
static void spilled(int own)
{
	char want[64];
	snprintf(want, sizeof(want), "max_entries:\t%u\n", PVHINT_BPF_DM);
	int fd = mmapable_map_fd(want);
	CHECK(fd >= 0);
	uint64_t *dm =
	    mmap(NULL, PVHINT_BPF_DM * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(dm != MAP_FAILED);
	struct spill x = {0};
	CHECK(!pipe(x.pipe));
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, spill_thread, &x));
	while (!__atomic_load_n(&x.tid, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	uint64_t *e = &dm[(uint32_t)x.tid & (PVHINT_BPF_DM - 1)], z = 0;
	const uint64_t blocker = PVHINT_BPF_DM_ENTRY(own ? (uint32_t)x.tid : 0, 1);
	CHECK(
	    __atomic_compare_exchange_n(e, &z, blocker, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	__atomic_store_n(&x.go, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&x.slot, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	CHECK(x.slot > 1 && (unsigned)x.slot < h->nr);
	const struct pvhint_record *r = &h->rec[x.slot];
	uint64_t t0 = os_now_ns();
	bool seen = false;
	while (!seen && os_now_ns() - t0 < 10000000000ull) {
		seen = __atomic_load_n(&r->owner, __ATOMIC_RELAXED) == (uint32_t)x.tid &&
		       __atomic_load_n(&r->sleeping, __ATOMIC_RELAXED);
		test_sleep_us(1000);
	}
	CHECK(__atomic_load_n(e, __ATOMIC_SEQ_CST) ==
	      (own ? PVHINT_BPF_DM_ENTRY(x.tid, x.slot) : blocker));
	CHECK(write(x.pipe[1], "x", 1) == 1);
	CHECK(!pthread_join(t, NULL));
	t0 = os_now_ns();
	while (__atomic_load_n(&r->owner, __ATOMIC_RELAXED) && os_now_ns() - t0 < 10000000000ull)
		test_sleep_us(1000);
	printf("%s registration: slot %d asleep seen: %s, freed at exit: %s\n",
	       own ? "stale own entry" : "spilled", x.slot, seen ? "yes" : "no",
	       r->owner ? "no" : "yes");
	CHECK(seen);
	CHECK_EQ(r->owner, 0);
	if (own)
		CHECK_EQ(__atomic_load_n(e, __ATOMIC_SEQ_CST), 0); /* cleared by the exit */
	else
		CHECK(__atomic_compare_exchange_n(e, (uint64_t[]){blocker}, 0, false,
						  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	munmap(dm, PVHINT_BPF_DM * sizeof(uint64_t));
	close(x.pipe[0]);
	close(x.pipe[1]);
}

static void *slot_thread(void *p)
{
	*(int *)p = pvhint_self_vcpu();
	return NULL;
}

/* Threads that claim slots through the daemon, one after another, until claim_stop. */
static int claim_stop; /* atomic */
static void *claimer_main(void *p)
{
	(void)p;
	while (!__atomic_load_n(&claim_stop, __ATOMIC_RELAXED)) {
		pthread_t t;
		int s;
		CHECK(!pthread_create(&t, NULL, slot_thread, &s));
		CHECK(!pthread_join(t, NULL));
	}
	return NULL;
}

/* fork() while other threads claim slots through the daemon (each claim holds the client's
 * lock across a round trip): the child's own first claim must not wait for a lock that a
 * parent thread held at the fork (a shell under --mn hung so, forking a pipeline). */
static void fork_while_claiming(void)
{
	pthread_t c;
	CHECK(!pthread_create(&c, NULL, claimer_main, NULL));
	int forks = 0;
	for (uint64_t t0 = os_now_ns(); forks < 200 && os_now_ns() - t0 < 3000000000ull; forks++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			alarm(10);
			_exit(pvhint_self_vcpu() > 0 ? 0 : 3);
		}
		int st;
		CHECK_EQ(waitpid(pid, &st, 0), pid);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			printf("fork child: %s %d\n", WIFEXITED(st) ? "exit" : "signal",
			       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	__atomic_store_n(&claim_stop, 1, __ATOMIC_RELAXED);
	CHECK(!pthread_join(c, NULL));
	printf("daemon client: %d forks while claiming, every child claimed its slot\n", forks);
}

/* The daemon follows threads only while some client wants hints (pvhint_want), and stops about
 * a second after the last want: an attached program taxes every context switch of the machine.
 * A previous client's wants may still hold, hence the bounded waits. */
/* A registered thread that sleeps in read() on a pipe until it is written. */
struct sleeper {
	int fd[2];
	int slot; /* atomic: set once registered */
};

static void *sleeper_main(void *p)
{
	struct sleeper *z = p;
	__atomic_store_n(&z->slot, pvhint_self_vcpu(), __ATOMIC_RELEASE);
	char c;
	CHECK(read(z->fd[0], &c, 1) == 1);
	return NULL;
}

/* Sustained wants until the programs follow the calling thread (slot s) again. */
static void want_until_attached(pvhint_t *u, int s)
{
	bool on = false, live = false;
	for (int i = 0; i < 5000 && !on; i++) {
		for (unsigned k = 0; k < PVHINT_WANT_MIN; k++)
			live = pvhint_want();
		on = test_record_follows(u, s, 1);
	}
	CHECK(on && live);
}

static void wanted_only(pvhint_t *u, int s)
{
	CHECK(test_record_stops_following(u, s));
	/* One want is not demand (PVHINT_WANT_MIN): nothing follows us after it, and it says so
	 * (the caller decides as with source none). */
	CHECK(!pvhint_want());
	CHECK(!test_record_follows(u, s, 50));
	want_until_attached(u, s);
	/* Attached afresh, the records were reset to "running": ours runs, and says so. */
	CHECK(!(__atomic_load_n(&u->rec[s].preempted, __ATOMIC_RELAXED) & PVHINT_PREEMPTED));
	/* A thread asleep while followed reads sleeping; kept asleep through the detach and the
	 * next attach (it never switches meanwhile), it reads what the resets wrote ("running"),
	 * not the stale flag, which only its next switch-out could otherwise correct. */
	struct sleeper z = {.slot = 0};
	pthread_t zt;
	CHECK(!pipe(z.fd));
	CHECK(!pthread_create(&zt, NULL, sleeper_main, &z));
	bool asleep = false;
	for (int i = 0; i < 20000 && !asleep; i++) {
		for (unsigned k = 0; k < PVHINT_WANT_MIN; k++)
			pvhint_want(); /* stay attached meanwhile */
		int zs = __atomic_load_n(&z.slot, __ATOMIC_ACQUIRE);
		asleep = zs > 0 && __atomic_load_n(&u->rec[zs].sleeping, __ATOMIC_RELAXED);
		test_sleep_us(500);
	}
	CHECK(asleep);
	CHECK(test_record_stops_following(u, s));
	/* The reset follows the detach in the daemon's same step, and once more at its next turn
	 * (a program already running when its link went may still write a record: sched_detach),
	 * so allow it that turn (200 ms) and a descheduled daemon on a loaded machine: the record
	 * "stops following" as soon as the links are gone, maybe before either reset ran. */
	for (int i = 0; i < 5000 && __atomic_load_n(&u->rec[z.slot].sleeping, __ATOMIC_RELAXED);
	     i++)
		test_sleep_us(1000);
	CHECK_EQ(__atomic_load_n(&u->rec[z.slot].sleeping, __ATOMIC_RELAXED), 0);
	want_until_attached(u, s);
	CHECK_EQ(__atomic_load_n(&u->rec[z.slot].sleeping, __ATOMIC_RELAXED), 0);
	CHECK(write(z.fd[1], "x", 1) == 1);
	CHECK(!pthread_join(zt, NULL));
	close(z.fd[0]);
	close(z.fd[1]);
	CHECK(test_record_stops_following(u, s));
	printf("daemon client: the daemon followed threads only while wanted\n");
}

/* Run as nobody or root (exec'd by daemon_test()): use the source through the daemon. */
static int daemon_client(void)
{
	pvhint_t *u;
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &u);
	printf("daemon client: %d %s\n", err, err ? pvhint_errmsg() : pvhint_source_name(u));
	CHECK_EQ(err, 0);
	CHECK(!strcmp(pvhint_source_name(u), "bpf"));
	CHECK_EQ(pvhint_header(u)->kind, PVHINT_KIND_THREAD);
	h = u;
	int s[3];
	s[0] = pvhint_self_vcpu();
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_create(&t[i], NULL, slot_thread, &s[i + 1]));
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_join(t[i], NULL));
	for (int i = 0; i < 3; i++)
		CHECK(s[i] > 0 && (unsigned)s[i] < u->nr);
	CHECK(s[0] != s[1] && s[1] != s[2] && s[0] != s[2]);
	/* The record of the calling thread is kept: it runs, so it is not preempted. */
	CHECK(!(__atomic_load_n(&u->rec[s[0]].preempted, __ATOMIC_RELAXED) & PVHINT_PREEMPTED));
	CHECK(mprotect((void *)pvhint_header(u), map_len(), PROT_READ | PROT_WRITE) == -1 &&
	      errno == EACCES);
	struct pvhint_bpf_stats st;
	CHECK_EQ(pvhint_bpf_stats(u, &st), -ENOTSUP); /* the daemon's counters */
	/* A claim for someone else's thread (pid 1's) is refused. */
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", getenv("PVHINT_BPF_SOCKET"));
	CHECK(fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a)));
	uint32_t q[2] = {2 /* claim */, 1 /* init */};
	int32_t rep[32];
	CHECK(send(fd, q, sizeof(q), 0) == sizeof(q));
	CHECK(recv(fd, rep, sizeof(rep), 0) > 0);
	CHECK_EQ(rep[0], -ESRCH);
	close(fd);
	printf("daemon client: slots %d %d %d; foreign claim refused\n", s[0], s[1], s[2]);
	wanted_only(u, s[0]);
	fork_while_claiming();
	/* The vCPU page, asked for when first opened: the daemon turns its refresh on for us
	 * (daemon_test checks that it is off again once we have gone). */
	pvhint_t *v;
	setenv("PVRT_BPF", "vcpu", 1);
	err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &v);
	unsetenv("PVRT_BPF");
	printf("daemon client: vcpu mode: %d %s\n", err, err ? pvhint_errmsg() : "ok");
	if (!err) {
		CHECK_EQ(pvhint_header(v)->kind, PVHINT_KIND_VCPU);
		CHECK(vpage_refreshed(v));
		pvhint_close(v);
	} else {
		CHECK_EQ(err, -ENOTSUP);
	}
	pvhint_close(u);
	return 0;
}

/* Root, with a socket that takes connections and never answers: the open does not hang, it
 * gives up on the daemon and loads the program itself. */
static int daemon_silent(void)
{
	pvhint_t *u;
	uint64_t t0 = os_now_ns();
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &u);
	printf("silent daemon: %d after %.1f s\n", err, (os_now_ns() - t0) / 1e9);
	CHECK_EQ(err, 0);
	struct pvhint_bpf_stats st;
	CHECK_EQ(pvhint_bpf_stats(u, &st), 0); /* our own program, not a daemon's */
	pvhint_close(u);
	return 0;
}

/* A client the bpf source refuses (as `who`): error `want` with a one-line message naming
 * pvhintd and `word`, and none under auto. */
static int refused(const char *who, int want, const char *word)
{
	pvhint_t *u;
	int err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &u);
	printf("%s: %d %s\n", who, err, pvhint_errmsg());
	CHECK_EQ(err, want);
	CHECK(strstr(pvhint_errmsg(), "pvhintd") && strstr(pvhint_errmsg(), word));
	CHECK(!strchr(pvhint_errmsg(), '\n'));
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "auto"}, &u));
	CHECK(!strcmp(pvhint_source_name(u), "none"));
	pvhint_close(u);
	return 0;
}

/* A fake pvhintd: answers every hello on 'fd' with a memfd of 'size' bytes of zeros as a page
 * of 64 KiB, until the listening socket is shut down. */
struct bogus {
	int fd;
	size_t size;
};

static void *bogus_main(void *arg)
{
	struct bogus *b = arg;
	int c;
	while ((c = accept(b->fd, NULL, NULL)) >= 0) {
		uint32_t q[2];
		if (recv(c, q, sizeof(q), 0) > 0) {
			int m = memfd_create("bogus", MFD_CLOEXEC);
			CHECK(m >= 0 && !ftruncate(m, (off_t)b->size));
			struct {
				int32_t status;
				uint32_t len, vlen;
				char why[120];
			} r = {0, 65536, 0, ""};
			union {
				char buf[CMSG_SPACE(sizeof(int))];
				struct cmsghdr align;
			} cm;
			struct iovec iov = {&r, sizeof(r)};
			struct msghdr msg = {.msg_iov = &iov,
					     .msg_iovlen = 1,
					     .msg_control = cm.buf,
					     .msg_controllen = sizeof(cm.buf)};
			struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
			h->cmsg_level = SOL_SOCKET;
			h->cmsg_type = SCM_RIGHTS;
			h->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(h), &m, sizeof(int));
			sendmsg(c, &msg, MSG_NOSIGNAL);
			close(m);
		}
		close(c);
	}
	return NULL;
}

static volatile int serve_stop;
static int serve_fd;
static void *serve_main(void *p)
{
	(void)p;
	return (void *)(intptr_t)pvhint_bpf_serve(serve_fd, &serve_stop);
}

/* Run argv0 with 'mode' as uid/gid, with the socket path in the environment. */
static void run_as(const char *argv0, const char *mode, uid_t uid, gid_t gid, const char *sock)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
			_exit(3);
		setenv("PVHINT_BPF_SOCKET", sock, 1);
		execl(argv0, argv0, mode, (char *)NULL);
		_exit(4);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void daemon_test(const char *argv0)
{
	char dir[] = "/tmp/pvhintd-test.XXXXXX";
	CHECK(mkdtemp(dir));
	CHECK(!chmod(dir, 0755));
	char sock[64];
	snprintf(sock, sizeof(sock), "%s/d.sock", dir);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	serve_fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK(serve_fd >= 0 && !bind(serve_fd, (struct sockaddr *)&a, sizeof(a)) &&
	      !listen(serve_fd, 8));
	CHECK(!chown(sock, 0, 65534) && !chmod(sock, 0660));
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, serve_main, NULL));
	run_as(argv0, "--daemon-client", 65534, 65534, sock);
	/* Root too uses a daemon that is there rather than load a program of its own. */
	run_as(argv0, "--daemon-client", 0, 0, sock);
	run_as(argv0, "--daemon-outsider", 65533, 65533, sock);
	/* The clients have gone: their vCPU page's refresh is off (the daemon sees the hang-up
	 * within its poll period). */
	for (int i = 0; i < 400 && vcpu_users(); i++)
		test_sleep_us(5000);
	CHECK_EQ(vcpu_users(), 0);
	__atomic_store_n(&serve_stop, 1, __ATOMIC_RELAXED); /* polled by the server */
	void *r;
	CHECK(!pthread_join(t, &r));
	CHECK_EQ((intptr_t)r, 0);
	close(serve_fd);
	unlink(sock);
	/* A socket nobody serves (listening, never accepted): clients time out and load. */
	int silent = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK(silent >= 0 && !bind(silent, (struct sockaddr *)&a, sizeof(a)) && !listen(silent, 8));
	run_as(argv0, "--daemon-silent", 0, 0, sock);
	close(silent);
	unlink(sock);
	/* A daemon that sends a short file, then a full one that is not a hint page. */
	for (int i = 0; i < 2; i++) {
		struct bogus b = {socket(AF_UNIX, SOCK_SEQPACKET, 0), i ? 65536 : 4096};
		CHECK(b.fd >= 0 && !bind(b.fd, (struct sockaddr *)&a, sizeof(a)) &&
		      !listen(b.fd, 8) && !chmod(sock, 0666));
		pthread_t bt;
		CHECK(!pthread_create(&bt, NULL, bogus_main, &b));
		run_as(argv0, "--daemon-bogus", 65534, 65534, sock);
		shutdown(b.fd, SHUT_RDWR); /* ends accept() */
		CHECK(!pthread_join(bt, NULL));
		close(b.fd);
		unlink(sock);
	}
	rmdir(dir);
	printf("pvhintd protocol ok\n");
}

int main(int argc, char **argv)
{
	int err;

	if (argc > 1 && !strcmp(argv[1], "--daemon-client"))
		return daemon_client();
	if (argc > 1 && !strcmp(argv[1], "--daemon-outsider"))
		/* Outside the socket's group: the error, and none under auto. */
		return refused("outsider", -EPERM, "Permission denied");
	if (argc > 1 && !strcmp(argv[1], "--daemon-silent"))
		return daemon_silent();
	if (argc > 1 && !strcmp(argv[1], "--daemon-bogus"))
		/* A daemon that sends something else than its page: the error, not a crash. */
		return refused("bogus daemon", -EPROTO, "page");

	if (argc > 1 && !strcmp(argv[1], "--usable")) {
		err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &h);
		if (err)
			return skip(pvhint_errmsg());
		return 0;
	}
	/* Before this process loads the program: the child must try to load it. */
	if (geteuid() == 0 && unprivileged() == 77)
		return skip("not built in, or no kernel BTF");
	err = pvhint_open(&(struct pvhint_options){.source = "bpf"}, &h);
	if (err == -ENOTSUP || err == -EPERM)
		return skip(pvhint_errmsg());
	if (err) {
		fprintf(stderr, "bpf source: %d %s\n", err, pvhint_errmsg());
		return 1;
	}
	const struct pvhint_header *hd = pvhint_header(h);
	CHECK(!strcmp(pvhint_source_name(h), "bpf"));
	CHECK_EQ(hd->kind, PVHINT_KIND_THREAD);
	CHECK_EQ(hd->valid, PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE |
				PVHINT_VALID_SLEEPING);
	CHECK(h->nr > 64);
	/* the calling thread registers on first use; its slot is stable */
	int me = pvhint_self_vcpu();
	CHECK(me > 0 && me == pvhint_self_vcpu());
	read_only();
	oversubscribed();
	steal_vs_schedstat();
	flag_latency();
	idle_walk();
	spilled(0);
	spilled(1);
	churn();
	vcpu_mode();
	daemon_test(argv[0]);
	pvhint_close(h);
	printf("bpf ok\n");
	return 0;
}
