/* SPDX-License-Identifier: MIT */
/*
 * The bpf source: loads bpf/pvhint.bpf.c (libbpf skeleton, CO-RE) on the scheduler tracepoints
 * and maps its page read-only. Records are thread slots (PVHINT_KIND_THREAD in pvhint_abi.h).
 *
 * One instance per process, loaded by the first open and kept until the process exits: every
 * handle maps the same page, and slots stay valid across close and reopen (the threads' cached
 * slots need no invalidation). The page map is frozen before it is mapped, so user space can
 * neither write it through bpf(2) nor map it writable (the kernel refuses PROT_WRITE on a
 * frozen map and clears VM_MAYWRITE of a read-only mapping); only the program writes it.
 *
 * Registration: a thread's first pvhint_self_vcpu() while a bpf handle is open claims a free
 * slot (BPF_NOEXIST update of slot_owner: atomic even between processes sharing the maps) and
 * maps its tid to it: a compare and swap in the direct-mapped table tid_dm (mapped writable
 * here, see PVHINT_BPF_DM), or when its entry is taken, the tid_slot hash: one or two bpf(2)
 * calls, once per thread. Lock paths after that read the slot from TLS. The program frees the
 * slot when the thread exits.
 *
 * Unprivileged processes: pvhintd (tools/pvhintd) loads the program once, as root or with
 * CAP_BPF + CAP_PERFMON, and serves it on a Unix socket (pvhint_bpf_serve). A process that
 * cannot load it connects there (PVHINT_BPF_SOCKET, default PVHINT_BPF_SOCKET_PATH): the daemon
 * sends the frozen page maps' descriptors (SCM_RIGHTS; the process maps them read-only, which
 * needs no bpf(2)), and claims slots for the process's threads on request, after checking that
 * the thread belongs to the peer (SO_PEERCRED, same pid namespace). Who may connect is the
 * socket's permission: a group the daemon's administrator chooses. The claim is one socket round
 * trip per thread, as the local claim is two bpf(2) calls.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "bpf/pvhint_bpf.h"
#include "pvrt_os.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

PVRT_API __thread int pvhint_tls_slot __attribute__((tls_model("initial-exec"))) = -1;
PVRT_API int pvhint_slot_mode;
PVRT_API int pvhint_want_mode;

#if defined(PVRT_HAVE_BPF) && PVRT_HAVE_BPF

#include "pvhint_bpf.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>

/* The daemon's protocol (SOCK_SEQPACKET: one message per request and reply). */
enum { DMSG_HELLO = 1, DMSG_CLAIM = 2, DMSG_VCPU = 3, DMSG_WANT = 4 /* no reply */ };
struct dreq {
	uint32_t op;
	uint32_t tid; /* DMSG_CLAIM: the thread to claim a slot for */
};
struct drep {
	int32_t status; /* 0, the slot (DMSG_CLAIM), or a negative errno */
	uint32_t len;	/* DMSG_HELLO: the thread page's mapping length */
	uint32_t vlen;	/* DMSG_VCPU: the vCPU page's (0: none); DMSG_HELLO: the highest op the
			 * daemon knows (0 from daemons older than DMSG_WANT: never sent one) */
	char why[120];	/* DMSG_VCPU: no vCPU page: why */
};

static struct {
	pthread_mutex_t mu;
	struct pvhint_bpf *skel; /* NULL until loaded */
	int page_fd, tid_fd, owner_fd;
	uint64_t *dm; /* tid_dm, mapped writable (PVHINT_BPF_DM) */
	size_t len;
	int vpage_fd; /* vCPU mode's page; -1: not asked for yet (vwhy empty) or none (vwhy) */
	size_t vlen;
	char vwhy[120];	 /* why there is no vCPU mode */
	unsigned vopen;	 /* open vCPU-mode handles (a loaded program: its vcpu_users) */
	unsigned nopen;	 /* open bpf handles: pvhint_slot_mode while > 0 */
	uint32_t cursor; /* next slot to try */
	char log[160];	 /* libbpf's first warning during the load */
	char vlog[160];	 /* the verifier's complaint */
	bool ready;	 /* the page fds are set: loaded here, or received from pvhintd */
	int dfd;	 /* connection to pvhintd (-1: the program is this process's) */
	pid_t dpid;	 /* the process that made dfd (a fork child reconnects) */
	pid_t load_pid;	 /* the process that loaded skel (a fork child shares its maps) */
	/* One request on dfd at a time. An os_lock, not a pthread mutex: under the preload a
	 * contended pthread mutex parks through pvrt's locks, whose park registers the waiting
	 * thread (pvhint_self_vcpu), i.e. claims a slot through here again. */
	uint32_t dmu;
	/* A served instance (pvhint_bpf_serve): the programs that follow threads are attached
	 * (sched_on) from a client's want until WANT_LINGER_NS after the last one. */
	bool sched_on, reset_again;
	uint64_t want_at;
	bool dwant; /* our pvhintd attaches on wants (it knows DMSG_WANT) */
} inst = {.mu = PTHREAD_MUTEX_INITIALIZER, .dfd = -1};

/* libbpf prints to stderr by default; a library must not. Keep, for the error message, the first
 * warning and the verifier's complaint (the log line before its statistics) instead. Called with
 * inst.mu held, during the load only. */
static int quiet_print(enum libbpf_print_level lvl, const char *fmt, va_list ap)
{
	char *msg;

	if (lvl != LIBBPF_WARN || vasprintf(&msg, fmt, ap) < 0)
		return 0;
	char *log = strstr(msg, "-- BEGIN PROG LOAD LOG --\n");
	if (log) {
		const char *prev = NULL;
		for (char *l = log, *nl; l && *l; l = nl) {
			nl = strchr(l, '\n');
			if (nl)
				*nl++ = 0;
			if (!strncmp(l, "processed ", 10) || !strncmp(l, "verification time", 17))
				break;
			prev = l;
		}
		if (prev && !inst.vlog[0])
			snprintf(inst.vlog, sizeof(inst.vlog), ": %s", prev);
	} else if (!inst.log[0]) {
		msg[strcspn(msg, "\n")] = 0;
		snprintf(inst.log, sizeof(inst.log), ": %s", msg);
	}
	free(msg);
	return 0;
}

/* Which of the capabilities the load needs this thread lacks (CAP_SYS_ADMIN covers both). */
static const char *missing_caps(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {0};

	if (syscall(SYS_capget, &h, d))
		return NULL; /* unknown: let the load say */
#define HAS(c) ((d[(c) / 32].effective >> ((c) % 32)) & 1)
	if (HAS(21 /* CAP_SYS_ADMIN */))
		return NULL;
	bool bpf = HAS(39 /* CAP_BPF */), perfmon = HAS(38 /* CAP_PERFMON */);
#undef HAS
	if (bpf && perfmon)
		return NULL;
	return !bpf && !perfmon ? "CAP_BPF and CAP_PERFMON" : !bpf ? "CAP_BPF" : "CAP_PERFMON";
}

/* The .data..percpu offsets of runqueues and steal_time from the kernel's BTF (vCPU mode). */
static int percpu_offsets(uint64_t *rq, uint64_t *st)
{
	struct btf *btf = btf__load_vmlinux_btf();
	int err = -ENOENT;

	*rq = *st = 0;
	if (!btf)
		return -errno;
	int id = btf__find_by_name_kind(btf, ".data..percpu", BTF_KIND_DATASEC);
	const struct btf_type *sec = id > 0 ? btf__type_by_id(btf, (uint32_t)id) : NULL;
	if (sec) {
		const struct btf_var_secinfo *v = btf_var_secinfos(sec);
		for (int i = 0; i < btf_vlen(sec); i++, v++) {
			const char *n =
			    btf__name_by_offset(btf, btf__type_by_id(btf, v->type)->name_off);
			if (!strcmp(n, "runqueues"))
				*rq = v->offset;
			else if (!strcmp(n, "steal_time"))
				*st = v->offset;
		}
		if (*rq && *st)
			err = 0;
	}
	btf__free(btf);
	return err;
}

/* The programs that follow threads: switch and migrate, and the wake-up ones where they are
 * loaded. The exit program stays attached whatever happens: it frees the slots. */
static struct bpf_link **sched_link(struct pvhint_bpf *s, int i, struct bpf_program **prog)
{
	struct bpf_program *p[] = {s->progs.pvhint_switch, s->progs.pvhint_migrate,
				   s->progs.pvhint_wakeup, s->progs.pvhint_wakeup_new};
	struct bpf_link **l[] = {&s->links.pvhint_switch, &s->links.pvhint_migrate,
				 &s->links.pvhint_wakeup, &s->links.pvhint_wakeup_new};
	*prog = p[i];
	return l[i];
}
#define SCHED_PROGS 4

/* Every record to "running" (pvhint_reset in pvhint.bpf.c). */
static int sched_reset(struct pvhint_bpf *s)
{
	LIBBPF_OPTS(bpf_test_run_opts, o);
	return bpf_prog_test_run_opts(bpf_program__fd(s->progs.pvhint_reset), &o) ? -errno : 0;
}

/* Stop following threads (inst.mu held): the records then read "running", not the last values
 * (a stale "preempted" would refuse a starving waiter its hand-off, or keep spinners off a
 * running owner, in clients that still read them: older ones, the runtime's scheduler). A
 * program already running when its link goes may still write one record; the serving loop
 * resets once more at its next turn (reset_again). */
static void sched_detach(struct pvhint_bpf *s)
{
	for (int i = 0; i < SCHED_PROGS; i++) {
		struct bpf_program *p;
		struct bpf_link **l = sched_link(s, i, &p);
		bpf_link__destroy(*l);
		*l = NULL;
	}
	inst.sched_on = false;
	(void)sched_reset(s);
	inst.reset_again = true;
}

/* Follow threads again: every record reset to "running" (pvhint_reset in pvhint.bpf.c says
 * why), then the programs attached. On failure the programs stay detached (hints stay
 * "running": advisory, so correct) and the error is returned. */
static int sched_attach(struct pvhint_bpf *s)
{
	int err = sched_reset(s);
	for (int i = 0; !err && i < SCHED_PROGS; i++) {
		struct bpf_program *p;
		struct bpf_link **l = sched_link(s, i, &p);
		if (*l || !bpf_program__autoload(p))
			continue;
		*l = bpf_program__attach(p);
		if (!*l)
			err = -errno;
	}
	if (err)
		sched_detach(s);
	else
		inst.sched_on = true;
	return err;
}

static int load(void)
{
	struct pvhint_bpf *s = NULL;
	struct stat st;
	int err;

	const char *miss = missing_caps();
	if (miss)
		return pvhint__fail(-EPERM,
				    "bpf: loading the scheduler program needs CAP_BPF and "
				    "CAP_PERFMON (or root); this process lacks %s",
				    miss);
	if (stat("/sys/kernel/btf/vmlinux", &st))
		return pvhint__fail(-ENOTSUP,
				    "bpf: the kernel has no BTF (/sys/kernel/btf/vmlinux: %s); "
				    "CONFIG_DEBUG_INFO_BTF is needed",
				    strerror(errno));
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0)
		return pvhint__fail(ncpu ? ncpu : -EINVAL, "bpf: cannot count the possible CPUs");

	inst.log[0] = inst.vlog[0] = 0;
	libbpf_print_fn_t old = libbpf_set_print(quiet_print);
	s = pvhint_bpf__open();
	if (!s) {
		err = pvhint__fail(-errno, "bpf: cannot open the program: %s", strerror(errno));
		goto out;
	}
	inst.vwhy[0] = 0;
	if (ncpu > (int)PVHINT_BPF_MAXCPU)
		snprintf(inst.vwhy, sizeof(inst.vwhy), "more than %u CPUs", PVHINT_BPF_MAXCPU);
	s->rodata->nr_cpus = (uint32_t)ncpu;
	err = bpf_map__set_max_entries(s->maps.cpus, (uint32_t)ncpu);
	if (!err)
		err = bpf_map__set_max_entries(s->maps.vtimers, (uint32_t)ncpu);
	if (!err)
		err =
		    bpf_map__set_max_entries(s->maps.vpage, PVHINT_BPF_HDR_ELEMS + (uint32_t)ncpu);
	if (!err) /* a ring is a power-of-2 number of pages; one holds 256 events */
		err = bpf_map__set_max_entries(s->maps.emu_events, (uint32_t)sysconf(_SC_PAGESIZE));
	/*
	 * The wake-up programs only when the kernel keeps no sched_info (/proc/<pid>/schedstat
	 * exists exactly with CONFIG_SCHED_INFO): there they start the wait that steal times.
	 * With it, steal is the kernel's run_delay, is_idle of a sleeper follows its CPU through
	 * the idle walk and sched_migrate_task, and 'sleeping' clears at switch-in; what is left
	 * (clearing 'sleeping' while the woken thread waits for a CPU) is not worth a tracepoint
	 * dispatch at every wake-up of the machine: a glibc barrier program with 8 threads on 2
	 * CPUs ran 13% slower beside an idle instance with them, 3% without (pvhint/README.md).
	 * The BPF side decides sched_info by BTF (HAVE_SCHED_INFO), we by /proc: both follow
	 * CONFIG_SCHED_INFO; a kernel whose BTF lacked sched_info.last_queued while /proc had
	 * schedstat would lose the wake-up part of steal (the program then times waits from
	 * preemption only).
	 */
	if (!err && access("/proc/self/schedstat", F_OK) == 0) {
		bpf_program__set_autoload(s->progs.pvhint_wakeup, false);
		bpf_program__set_autoload(s->progs.pvhint_wakeup_new, false);
	}
	if (!err)
		err = pvhint_bpf__load(s);
	if (err) {
		err = pvhint__fail(err, "bpf: the kernel refused the program: %s%s%s",
				   strerror(-err), inst.log, inst.vlog);
		goto out;
	}
	/* The header, then freeze: from here on only the program writes the page. */
	int fd = bpf_map__fd(s->maps.page);
	struct pvhint_header h = {.magic = PVHINT_MAGIC,
				  .abi_version = PVHINT_ABI_VERSION,
				  .source = PVHINT_SOURCE_BPF,
				  .header_size = PVHINT_HEADER_SIZE,
				  .record_stride = PVHINT_RECORD_SIZE,
				  .nr_records = PVHINT_BPF_SLOTS,
				  .valid = PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED |
					   PVHINT_VALID_IS_IDLE | PVHINT_VALID_SLEEPING,
				  .kind = PVHINT_KIND_THREAD,
				  .nr_used = 1};
	struct pvhint_header vh = h;
	vh.nr_records = (uint32_t)ncpu;
	vh.valid = PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED;
	vh.kind = PVHINT_KIND_VCPU;
	vh.nr_used = 0;
	uint32_t k0 = 0;
	int vfd = bpf_map__fd(s->maps.vpage);
	_Static_assert(sizeof(h) == PVHINT_RECORD_SIZE, "the header is one page-map element");
	if (bpf_map_update_elem(fd, &k0, &h, BPF_ANY) || bpf_map_freeze(fd) ||
	    bpf_map_update_elem(vfd, &k0, &vh, BPF_ANY) || bpf_map_freeze(vfd)) {
		err = pvhint__fail(-errno, "bpf: cannot set up the page maps: %s", strerror(errno));
		goto out;
	}
	err = pvhint_bpf__attach(s);
	inst.sched_on = !err;
	if (err) {
		err = pvhint__fail(err, "bpf: cannot attach to the scheduler tracepoints: %s%s",
				   strerror(-err), inst.log);
		goto out;
	}
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	void *dm = mmap(NULL, (size_t)PVHINT_BPF_DM * sizeof(uint64_t), PROT_READ | PROT_WRITE,
			MAP_SHARED, bpf_map__fd(s->maps.tid_dm), 0);
	if (dm == MAP_FAILED) {
		err = pvhint__fail(-errno, "bpf: cannot map the registration table: %s",
				   strerror(errno));
		goto out;
	}
	inst.dm = dm; /* never unmapped: the instance lives as long as the process */
	inst.len = ((size_t)PVHINT_BPF_ELEMS * PVHINT_RECORD_SIZE + pg - 1) & ~(pg - 1);
	inst.page_fd = fd;
	inst.vpage_fd = inst.vwhy[0] ? -1 : vfd;
	inst.vlen = ((size_t)(PVHINT_BPF_HDR_ELEMS + (size_t)ncpu) * PVHINT_RECORD_SIZE + pg - 1) &
		    ~(pg - 1);
	inst.tid_fd = bpf_map__fd(s->maps.tid_slot);
	inst.owner_fd = bpf_map__fd(s->maps.slot_owner);
	inst.cursor = 1;
	inst.load_pid = getpid();
	/* Release: a claimer that sees the skeleton (or ready) sees the fds. */
	__atomic_store_n(&inst.skel, s, __ATOMIC_RELEASE);
	__atomic_store_n(&inst.ready, true, __ATOMIC_RELEASE);
	s = NULL;
out:
	libbpf_set_print(old);
	pvhint_bpf__destroy(s);
	return err;
}

static const char *daemon_path(void)
{
	const char *p = secure_getenv("PVHINT_BPF_SOCKET");
	return p && *p ? p : PVHINT_BPF_SOCKET_PATH;
}

static int daemon_connect(void)
{
	const char *path = daemon_path();
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A daemon that accepts and does not answer (stopped, stuck) must not hang us: every
	 * process tries the daemon first (pvhint__bpf_open). Its replies take microseconds. */
	struct timeval tmo = {.tv_sec = 2};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* One request and its reply; fds (up to 2) received with it, else -1. */
static int daemon_call(int fd, const struct dreq *q, struct drep *r, int fds[2])
{
	if (send(fd, q, sizeof(*q), MSG_NOSIGNAL) != (ssize_t)sizeof(*q))
		return errno ? -errno : -EIO;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = {r, sizeof(*r)};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = c.buf,
			   .msg_controllen = sizeof(c.buf)};
	ssize_t n;
	do
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*r))
		return n < 0 ? -errno : -EPROTO;
	if (fds) {
		fds[0] = fds[1] = -1;
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
			if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
				size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				memcpy(fds, CMSG_DATA(h), (k > 2 ? 2 : k) * sizeof(int));
			}
	}
	return 0;
}

/*
 * vCPU mode on a program loaded here: give it the per-CPU offsets (inst.mu held). Done at the
 * first vCPU-mode open (pvhintd: the first client that asks), not at the load: it parses the
 * kernel's BTF again (libbpf's parse for CO-RE is not shared), 20-60 ms on this machine kind,
 * which thread mode does not need. The refresh itself runs only while vcpu_users > 0.
 */
static int vcpu_enable(void)
{
	uint64_t orq, ost;
	if (!inst.skel || inst.vpage_fd < 0 || inst.skel->bss->off_st)
		return 0;
	if (percpu_offsets(&orq, &ost)) {
		snprintf(inst.vwhy, sizeof(inst.vwhy),
			 "the kernel's BTF has no per-CPU steal_time (not a KVM guest kernel)");
		inst.vpage_fd = -1; /* the map stays with the skeleton */
		return -ENOTSUP;
	}
	/* The refresh timers: without them (a failed set-up) the page is refreshed at task
	 * switches only (pvhint.bpf.c). */
	LIBBPF_OPTS(bpf_test_run_opts, o);
	(void)bpf_prog_test_run_opts(bpf_program__fd(inst.skel->progs.pvhint_vtimers_init), &o);
	/* The program uses them once it reads both non-zero (each is stored once). */
	__atomic_store_n(&inst.skel->bss->off_rq, orq, __ATOMIC_RELAXED);
	__atomic_store_n(&inst.skel->bss->off_st, ost, __ATOMIC_RELAXED);
	return 0;
}

/*
 * A page pvhintd sent, before and after it is mapped. The daemon is trusted as far as its
 * socket's path is, but a page that is not one must be an error, not a crash: a descriptor of
 * a regular file (a memfd) must hold the whole length (reading past its end is SIGBUS), and
 * the header must describe records that fit the mapping, with this source and kind (the
 * page validator of the kvm source, tests/fuzz).
 */
static int daemon_page_check(int fd, size_t len, bool vcpu, char *why, size_t n)
{
	struct stat st;
	/* bpf maps are anonymous inodes (no file type); a file must cover the mapping. */
	if (!len || fstat(fd, &st) ||
	    ((st.st_mode & S_IFMT) && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < len))) {
		snprintf(why, n, "pvhintd at %s sent a descriptor that is not its page",
			 daemon_path());
		return -EPROTO;
	}
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(why, n, "pvhintd at %s: its page cannot be mapped: %s", daemon_path(),
			 strerror(errno));
		return -EPROTO;
	}
	const struct pvhint_header *h = p;
	size_t need, pg = (size_t)sysconf(_SC_PAGESIZE);
	int err = pvhint__page_check(h, "pvhintd's page", pg, false, 0, &need) ? -EPROTO : 0;
	if (!err && (need > len || h->source != PVHINT_SOURCE_BPF ||
		     h->kind != (vcpu ? PVHINT_KIND_VCPU : PVHINT_KIND_THREAD)))
		err = -EPROTO;
	munmap(p, len);
	if (err)
		snprintf(why, n, "pvhintd at %s sent a page that is not a bpf hint page",
			 daemon_path());
	return err;
}

/* Attach to pvhintd's instance (inst.mu held). On failure, why (n bytes) says what failed. */
static int daemon_attach(char *why, size_t n)
{
	int fd = daemon_connect();
	if (fd < 0) {
		snprintf(why, n, "no pvhintd at %s (%s)", daemon_path(), strerror(-fd));
		return -EPERM;
	}
	struct dreq q = {.op = DMSG_HELLO};
	struct drep r;
	int fds[2] = {-1, -1};
	int err = daemon_call(fd, &q, &r, fds);
	if (!err && r.status)
		err = r.status;
	if (!err && fds[0] < 0)
		err = -EPROTO;
	if (err)
		snprintf(why, n, "pvhintd at %s: %s", daemon_path(), strerror(-err));
	else
		err = daemon_page_check(fds[0], r.len, false, why, n);
	if (fds[1] >= 0)
		close(fds[1]); /* not sent by this protocol: refused */
	if (err) {
		if (fds[0] >= 0)
			close(fds[0]);
		close(fd);
		return err;
	}
	inst.page_fd = fds[0];
	inst.len = r.len;
	inst.vpage_fd = -1; /* asked for at the first vCPU-mode open (daemon_vcpu) */
	inst.vwhy[0] = 0;
	inst.dfd = fd;
	inst.dpid = getpid();
	inst.dwant = r.vlen >= DMSG_WANT;
	__atomic_store_n(&inst.ready, true, __ATOMIC_RELEASE);
	return 0;
}

/* This process's connection to pvhintd (inst.dmu held): a fork child makes its own, the
 * parent's is the parent's. A child that uses the vCPU page asks for it again on its own
 * connection, so that the daemon keeps refreshing it after the parent has gone. */
static int daemon_fd(void)
{
	if (inst.dpid != getpid()) {
		close(inst.dfd);
		inst.dfd = daemon_connect();
		inst.dpid = getpid();
		if (inst.dfd >= 0 && inst.vpage_fd >= 0) {
			struct dreq q = {.op = DMSG_VCPU};
			struct drep r;
			int fds[2];
			if (!daemon_call(inst.dfd, &q, &r, fds))
				for (int i = 0; i < 2; i++)
					if (fds[i] >= 0)
						close(fds[i]); /* the page we map already */
		}
	}
	return inst.dfd;
}

/* When the process may send its next want, and when it sent its last (CLOCK_MONOTONIC_COARSE
 * ns). */
static uint64_t want_next, want_sent;
/* A thread's wants in its current window of PVHINT_WANT_EVERY_NS (per thread: a shared count
 * would be one more line that every contended lock call moves between CPUs). */
static __thread uint64_t want_win __attribute__((tls_model("initial-exec")));
static __thread uint32_t want_cnt __attribute__((tls_model("initial-exec")));

bool pvhint_want_send(unsigned weight)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	/*
	 * Only sustained demand attaches: PVHINT_WANT_MIN wants of one thread within a window.
	 * What the hints save a contended decision is at most a futile spin, which the locks'
	 * adaptive budget keeps to a few microseconds without them; what attaching costs is some
	 * 200-250 ns at every context switch of the machine (pvhint/README.md), 4% of a CPU at
	 * this machine's 200k switches a second. So a few hundred contended decisions a second
	 * are not worth it: fluidanimate's cells (230 contended acquisitions in 25 million, 0.6
	 * s) ran at 0.92x glibc's speed attached, 1.0x with the hints unused.
	 */
	if (now - want_win >= PVHINT_WANT_EVERY_NS) {
		want_win = now;
		want_cnt = 0;
	}
	/* Relaxed: a hint of our own sends, read for a decision that is itself a hint. */
	bool live = now - __atomic_load_n(&want_sent, __ATOMIC_RELAXED) < PVHINT_WANT_LIVE_NS;
	if ((want_cnt += weight) < PVHINT_WANT_MIN)
		return live;
	/* Relaxed: a rate limit; two threads that both pass only send twice. */
	uint64_t next = __atomic_load_n(&want_next, __ATOMIC_RELAXED);
	if (now < next ||
	    !__atomic_compare_exchange_n(&want_next, &next, now + PVHINT_WANT_EVERY_NS, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return live;
	/* Never wait here (lock paths, perhaps a signal handler): a thread that talks to the
	 * daemon now holds dmu, and its process is known to be alive anyway; a full socket
	 * buffer drops the want, and the next one, 0.1 s later, goes. A fork child's first want
	 * would reconnect (a blocking connect): its next claim does that; until then it decides
	 * as with source none. */
	if (inst.dpid != getpid() || !os_lock_try(&inst.dmu))
		return live;
	int saved = errno;
	int fd = daemon_fd();
	struct dreq q = {.op = DMSG_WANT};
	/* Live from now: the server attaches within about a millisecond; until then the records
	 * read "running" (pvhint_reset runs at every detach). */
	if (fd >= 0 && send(fd, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(q)) {
		__atomic_store_n(&want_sent, now, __ATOMIC_RELAXED);
		live = true;
	}
	errno = saved;
	os_unlock(&inst.dmu);
	return live;
}

/* A slot for tid through pvhintd. */
static int daemon_claim(uint32_t tid)
{
	os_lock(&inst.dmu, 0);
	int r = daemon_fd();
	if (r >= 0) {
		struct dreq q = {.op = DMSG_CLAIM, .tid = tid};
		struct drep rep;
		r = daemon_call(r, &q, &rep, NULL);
		if (!r)
			r = rep.status;
	}
	os_unlock(&inst.dmu);
	return r;
}

/* The vCPU page from pvhintd (inst.mu held), once: sets vpage_fd, or vwhy. The daemon counts
 * this connection as a user of the page until it closes (the process exits). */
static void daemon_vcpu(void)
{
	struct dreq q = {.op = DMSG_VCPU};
	struct drep r;
	int fds[2] = {-1, -1};
	os_lock(&inst.dmu, 0);
	int fd = daemon_fd();
	int err = fd < 0 ? fd : daemon_call(fd, &q, &r, fds);
	os_unlock(&inst.dmu);
	if (!err && r.status) {
		r.why[sizeof(r.why) - 1] = 0;
		/* The daemon's reason as it gave it (it names the daemon's kernel's limits). */
		snprintf(inst.vwhy, sizeof(inst.vwhy), "%.*s", (int)sizeof(inst.vwhy) - 1,
			 r.why[0] ? r.why : strerror(-r.status));
	} else if (!err && (fds[0] < 0 || !r.vlen)) {
		err = -EPROTO;
	} else if (!err) {
		err = daemon_page_check(fds[0], r.vlen, true, inst.vwhy, sizeof(inst.vwhy));
		if (!err) {
			inst.vpage_fd = fds[0];
			inst.vlen = r.vlen;
			fds[0] = -1;
		}
	}
	if (err && !inst.vwhy[0])
		snprintf(inst.vwhy, sizeof(inst.vwhy), "pvhintd at %s: %s", daemon_path(),
			 strerror(-err));
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A vCPU-mode handle opens (inst.mu held): the page, and the refresh on while it is open. */
static int vcpu_acquire(void)
{
	if (inst.skel)
		vcpu_enable();
	else if (inst.vpage_fd < 0 && !inst.vwhy[0])
		daemon_vcpu();
	if (inst.vpage_fd < 0)
		return pvhint__fail(-ENOTSUP, "bpf vcpu mode: %s", inst.vwhy);
	/* A count, not a flag: pvhintd's clients add to it too. Relaxed: the program only needs
	 * to see it change eventually (vcpu_check waits for the first refresh). */
	if (inst.vopen++ == 0 && inst.skel)
		__atomic_fetch_add(&inst.skel->bss->vcpu_users, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ... and closes (inst.mu held). pvhintd's count goes with the connection. */
static void vcpu_release(void)
{
	if (--inst.vopen == 0 && inst.skel)
		__atomic_fetch_sub(&inst.skel->bss->vcpu_users, 1, __ATOMIC_RELAXED);
}

static void atfork_child(void)
{
	/* The forking thread has a new tid: its slot is the parent thread's. The child shares
	 * the parent's maps and program; it registers its threads there. */
	pvhint_tls_slot = -1;
	/* Another thread of the parent may have been inside daemon_claim at the fork: nobody here
	 * would ever release its lock (the child's first claim hung, a shell under --mn forking
	 * a pipeline). The state it guards is the parent's connection, which the child replaces
	 * at its first claim (dpid). */
	__atomic_store_n(&inst.dmu, 0, __ATOMIC_RELAXED);
}

static void atfork_once(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

/* vCPU mode: the records are the host's once the program has seen a switch on every CPU with
 * steal time registered (version > 0); wait a little for that (switches are frequent). */
static int vcpu_check(const struct pvhint_header *vh)
{
	const struct pvhint_record *r =
	    (const struct pvhint_record *)((const char *)vh + PVHINT_HEADER_SIZE);
	uint32_t seen = 0;
	for (int i = 0; i < 200 && seen < vh->nr_records; i++) {
		seen = 0;
		for (uint32_t c = 0; c < vh->nr_records; c++)
			seen += __atomic_load_n(&r[c].version, __ATOMIC_ACQUIRE) != 0;
		if (seen < vh->nr_records)
			usleep(1000);
	}
	if (seen)
		return 0; /* an idle CPU's record follows at its first switch */
	return pvhint__fail(-ENOTSUP, "bpf vcpu mode: no steal time from the host (not a KVM "
				      "guest with steal time, or no task switches seen)");
}

int pvhint__bpf_open(struct pvhint_impl *im, bool vcpu)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int err = 0;

	pthread_once(&once, atfork_once);
	pthread_mutex_lock(&inst.mu);
	if (!inst.ready) {
		/*
		 * pvhintd's instance first, privileged or not: attaching is a connect and two
		 * descriptors, where a load of our own costs every process the kernel's BTF parse
		 * and verification (about 20 ms of CPU here, pvhint/README.md), and runs one more
		 * program at every context switch. Without a daemon, load; a process that may not
		 * load and has no daemon gets both reasons.
		 */
		char why[160];
		int derr = daemon_attach(why, sizeof(why));
		err = derr ? load() : 0;
		if (err == -EPERM) {
			char
			    msg[256]; /* the message is formatted into the buffer it is read from */
			snprintf(msg, sizeof(msg), "%s", pvhint_errmsg());
			err = pvhint__fail(derr, "%s; %s", msg, why);
		}
	}
	if (!err && vcpu)
		err = vcpu_acquire();
	if (!err) {
		size_t len = vcpu ? inst.vlen : inst.len;
		void *p =
		    mmap(NULL, len, PROT_READ, MAP_SHARED, vcpu ? inst.vpage_fd : inst.page_fd, 0);
		if (p == MAP_FAILED) {
			err = pvhint__fail(-errno, "bpf: cannot map the page: %s", strerror(errno));
		} else if (vcpu && (err = vcpu_check(p))) {
			munmap(p, len);
		} else {
			im->map = p;
			im->map_len = len;
			im->hdr = p;
			im->source = PVHINT_SOURCE_BPF;
			im->bpf = true;
			im->bpf_slots = !vcpu;
			if (!vcpu && inst.nopen++ == 0) {
				__atomic_store_n(&pvhint_slot_mode, 1, __ATOMIC_RELEASE);
				/* A served instance follows threads only while wanted. */
				__atomic_store_n(&pvhint_want_mode, !inst.skel && inst.dwant,
						 __ATOMIC_RELAXED);
			}
		}
		if (err && vcpu)
			vcpu_release();
	}
	pthread_mutex_unlock(&inst.mu);
	return err;
}

void pvhint__bpf_close(struct pvhint_impl *im)
{
	pthread_mutex_lock(&inst.mu);
	/* The program stays loaded (see the top): only the slot answers stop, and the vCPU page's
	 * refresh when its last handle closes. */
	if (!im->bpf_slots)
		vcpu_release();
	else if (--inst.nopen == 0) {
		__atomic_store_n(&pvhint_slot_mode, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&pvhint_want_mode, 0, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&inst.mu);
}

/* Publish tid -> slot s in its tid_dm entry: a free one, or one that holds our own tid, which
 * is stale (we are alive and registering; an exec keeps the tid without an exit). One store,
 * which the program reads whole. False: another thread's. */
static bool dm_publish(uint64_t *e, uint32_t tid, uint32_t s)
{
	uint64_t z = 0;
	for (;;) {
		if (__atomic_compare_exchange_n(e, &z, PVHINT_BPF_DM_ENTRY(tid, s), false,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED))
			return true;
		if ((uint32_t)z != tid)
			return false;
	}
}

/* Claim a free slot for tid in this process's maps. */
static int claim_local(uint32_t tid)
{
	/* Start where the last claim ended: freed slots are found again on the way round. */
	uint32_t start = __atomic_fetch_add(&inst.cursor, 1, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < PVHINT_BPF_SLOTS - 1; i++) {
		uint32_t s = 1 + (start + i - 1) % (PVHINT_BPF_SLOTS - 1);
		if (bpf_map_update_elem(inst.owner_fd, &s, &tid, BPF_NOEXIST)) {
			if (errno == EEXIST)
				continue;
			return -errno;
		}
		/* tid_dm first (dm_publish); else the hash, announced to the program by dm_spill
		 * first. dm_spill counts the hash's entries, one each. */
		bool in_dm = dm_publish(&inst.dm[tid & (PVHINT_BPF_DM - 1)], tid, s);
		if (!in_dm) {
			__atomic_fetch_add(&inst.skel->bss->dm_spill, 1, __ATOMIC_SEQ_CST);
			int err = 0;
			if (bpf_map_update_elem(inst.tid_fd, &tid, &s, BPF_NOEXIST)) {
				err = -errno;
				/* Our tid has a (stale) hash entry already, counted: replace it. */
				__atomic_fetch_sub(&inst.skel->bss->dm_spill, 1, __ATOMIC_SEQ_CST);
				if (err == -EEXIST)
					err = bpf_map_update_elem(inst.tid_fd, &tid, &s, BPF_EXIST)
						  ? -errno
						  : 0;
			}
			if (err) {
				bpf_map_delete_elem(inst.owner_fd, &s);
				return err;
			}
		}
		__atomic_store_n(&inst.cursor, s + 1, __ATOMIC_RELAXED);
		return (int)s;
	}
	return -ENOSPC;
}

int pvhint__bpf_claim(void)
{
	uint32_t tid = (uint32_t)syscall(SYS_gettid);

	if (__atomic_load_n(&inst.skel, __ATOMIC_ACQUIRE))
		return claim_local(tid);
	if (__atomic_load_n(&inst.ready, __ATOMIC_ACQUIRE))
		return daemon_claim(tid);
	return -ENODEV;
}

/* ---- pvhintd's side ---- */

/* Is tid a thread of process pid (the peer's, from SO_PEERCRED)? */
static bool thread_of(pid_t pid, uint32_t tid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task/%u", (int)pid, tid);
	return tid && access(p, F_OK) == 0;
}

/* One request on connection fd; *vuser: the connection uses the vCPU page (counted once). */
static void serve_one(int fd, bool *vuser)
{
	struct dreq q;
	ssize_t n = recv(fd, &q, sizeof(q), 0);
	if (n != (ssize_t)sizeof(q))
		return;
	if (q.op == DMSG_WANT) {
		pthread_mutex_lock(&inst.mu);
		inst.want_at = os_now_ns();
		if (!inst.sched_on)
			(void)sched_attach(inst.skel); /* failed: tried again at the next want */
		pthread_mutex_unlock(&inst.mu);
		return;
	}
	struct drep r = {0};
	int fds[1] = {inst.page_fd};
	int nfd = 0;
	if (q.op == DMSG_HELLO) {
		r.len = (uint32_t)inst.len;
		r.vlen = DMSG_WANT;
		nfd = 1;
	} else if (q.op == DMSG_VCPU) {
		pthread_mutex_lock(&inst.mu);
		vcpu_enable();
		/* Follow threads before the reply: the client waits for the first refresh. */
		if (inst.vpage_fd >= 0 && !inst.sched_on)
			(void)sched_attach(inst.skel);
		if (inst.vpage_fd < 0) {
			r.status = -ENOTSUP;
			snprintf(r.why, sizeof(r.why), "%s", inst.vwhy);
		} else {
			r.vlen = (uint32_t)inst.vlen;
			fds[0] = inst.vpage_fd;
			nfd = 1;
			if (!*vuser)
				__atomic_fetch_add(&inst.skel->bss->vcpu_users, 1,
						   __ATOMIC_RELAXED);
			*vuser = true;
		}
		pthread_mutex_unlock(&inst.mu);
	} else if (q.op == DMSG_CLAIM) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl))
			r.status = -errno;
		else if (!thread_of(cr.pid, q.tid))
			r.status = -ESRCH; /* not the peer's thread (or another pid namespace) */
		else
			r.status = claim_local(q.tid);
	} else {
		r.status = -EINVAL;
	}
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = {&r, sizeof(r)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfd) {
		memset(&c, 0, sizeof(c));
		m.msg_control = c.buf;
		m.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(h), fds, (size_t)nfd * sizeof(int));
	}
	sendmsg(fd, &m, MSG_NOSIGNAL);
}

#define SERVE_MAX 1024 /* connections at once (one per client process) */
/* A served instance detaches the programs that follow threads this long after the last want
 * (unless a client uses the vCPU page, which the switch program refreshes): ten wants of a
 * process that still contends, so a lock that contends now and then keeps them, and at most one
 * attach and detach a second (each patches the tracepoints' call sites on every CPU). */
#define WANT_LINGER_NS 1000000000ull

/* The serving loop's turn: the programs that follow threads attached while a client uses the
 * vCPU page or wanted hints within WANT_LINGER_NS, else detached. Returns the poll timeout (ms):
 * the stop flag's checks, and the detach. */
static int serve_sched(unsigned vusers)
{
	int ms = 200;
	pthread_mutex_lock(&inst.mu);
	uint64_t now = os_now_ns(), end = inst.want_at + WANT_LINGER_NS;
	if (!inst.sched_on && inst.reset_again) {
		(void)sched_reset(inst.skel);
		inst.reset_again = false;
	}
	if (vusers && !inst.sched_on)
		(void)sched_attach(inst.skel); /* failed: tried again at the next turn */
	else if (!vusers && inst.sched_on && now >= end)
		sched_detach(inst.skel);
	else if (!vusers && inst.sched_on && (end - now) / 1000000u + 1 < (uint64_t)ms)
		ms = (int)((end - now) / 1000000u + 1);
	pthread_mutex_unlock(&inst.mu);
	return ms;
}

int pvhint_bpf_serve(int listen_fd, volatile int *stop)
{
	pthread_mutex_lock(&inst.mu);
	int err = inst.skel ? 0 : load();
	pthread_mutex_unlock(&inst.mu);
	if (err)
		return err;
	static struct pollfd pf[SERVE_MAX + 1];
	static bool vuser[SERVE_MAX + 1]; /* pf[i]'s client uses the vCPU page */
	nfds_t n = 1;
	/* Nobody wants hints yet: the programs that follow threads wait for the first want. */
	pthread_mutex_lock(&inst.mu);
	sched_detach(inst.skel);
	pthread_mutex_unlock(&inst.mu);
	pf[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
	for (;;) {
		/* Relaxed: a flag set by a signal handler or another thread, polled. */
		int s = stop ? __atomic_load_n(stop, __ATOMIC_RELAXED) : 0;
		if (s == PVHINT_SERVE_STOP)
			break;
		if (s == PVHINT_SERVE_STOP_IDLE && n == 1) {
			/* Idle, unless a client is still in the accept queue (a descendant of
			 * the program that attaches as it exits): serve it first. */
			struct pollfd l = {.fd = listen_fd, .events = POLLIN};
			if (poll(&l, 1, 0) <= 0)
				break;
		}
		unsigned vusers = 0;
		for (nfds_t i = 1; i < n; i++)
			vusers += vuser[i];
		if (poll(pf, n, serve_sched(vusers)) < 0) {
			if (errno == EINTR)
				continue;
			return pvhint__fail(-errno, "pvhintd: poll: %s", strerror(errno));
		}
		for (nfds_t i = n; i-- > 1;) {
			if (pf[i].revents & POLLIN)
				serve_one(pf[i].fd, &vuser[i]);
			else if (!(pf[i].revents & (POLLHUP | POLLERR)))
				continue;
			if (pf[i].revents & (POLLHUP | POLLERR)) {
				close(pf[i].fd);
				if (vuser[i])
					__atomic_fetch_sub(&inst.skel->bss->vcpu_users, 1,
							   __ATOMIC_RELAXED);
				--n;
				pf[i] = pf[n];
				vuser[i] = vuser[n];
			}
		}
		if (pf[0].revents & POLLIN) {
			int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0 && n <= SERVE_MAX) {
				vuser[n] = false;
				pf[n++] = (struct pollfd){.fd = c, .events = POLLIN};
			} else if (c >= 0)
				close(c); /* full: the client falls back to none */
		}
	}
	for (nfds_t i = 1; i < n; i++) {
		close(pf[i].fd);
		if (vuser[i])
			__atomic_fetch_sub(&inst.skel->bss->vcpu_users, 1, __ATOMIC_RELAXED);
	}
	return 0;
}

/* The program's per-CPU switch counters, summed: one lookup per CPU (a statistics read). */
static int cpu_counters(struct pvhint_bpf_stats *out)
{
	int fd = bpf_map__fd(inst.skel->maps.cpus);
	uint32_t n = bpf_map__max_entries(inst.skel->maps.cpus);

	out->switches = out->missed = 0;
	for (uint32_t k = 0; k < n; k++) {
		struct pvhint_bpf_cpu c;
		if (bpf_map_lookup_elem(fd, &k, &c))
			return pvhint__fail(-errno, "bpf: cannot read the program's counters: %s",
					    strerror(errno));
		out->switches += c.switches;
		out->missed += c.missed;
	}
	return 0;
}

int pvhint_bpf_stats(pvhint_t *h, struct pvhint_bpf_stats *out)
{
	if (!h || !h->impl || !h->impl->bpf || !out)
		return pvhint__fail(-ENOTSUP, "not a bpf handle");
	if (!inst.skel)
		return pvhint__fail(-ENOTSUP, "bpf: the program is pvhintd's: its counters are "
					      "not this process's to read");
	int err = cpu_counters(out);
	if (err)
		return err;
	out->vcpu_users = __atomic_load_n(&inst.skel->bss->vcpu_users, __ATOMIC_RELAXED);
	out->slots = 0;
	for (uint32_t s = 1; s < pvhint_nr_used(h); s++)
		out->slots += __atomic_load_n(&h->rec[s].owner, __ATOMIC_RELAXED) != 0;
	return 0;
}

static void *emu_map; /* the emulator's view of the thread page, never unmapped */

void pvhint__bpf_prepare(void)
{
	static int failed; /* do not retry a load that failed */
	int saved = errno;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", pvhint_errmsg()); /* a fallback: no error to report */
	pthread_mutex_lock(&inst.mu);
	/* Not while this process uses pvhintd's page: its threads' slots are the daemon's, and
	 * the emulator would read (and name) other threads' records in a page of its own. */
	if (!inst.skel && !failed && !(inst.ready && inst.dfd >= 0))
		failed = load() != 0;
	if (inst.skel && !emu_map) {
		void *p = mmap(NULL, inst.len, PROT_READ, MAP_SHARED, inst.page_fd, 0);
		__atomic_store_n(&emu_map, p == MAP_FAILED ? NULL : p, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&inst.mu);
	pvhint__fail(0, "%s", msg);
	errno = saved;
}

const struct pvhint_record *pvhint__bpf_self_record(int *slot)
{
	char *map = __atomic_load_n(&emu_map, __ATOMIC_ACQUIRE);
	if (!map)
		return NULL;
	int s = pvhint_tls_slot >= 0 ? pvhint_tls_slot : pvhint_slot_register();
	*slot = s;
	return s > 0 ? (const struct pvhint_record *)(map + PVHINT_HEADER_SIZE) + s : NULL;
}

/* The kernel-sleep events of the loaded program (pvhint.bpf.c, emu_note). */
static struct ring_buffer *kw_ring;
static pid_t kw_pid; /* the process that opened kw_ring */

static int kw_event(void *ctx, void *data, size_t len)
{
	(void)ctx;
	(void)data;
	(void)len;
	return 0; /* the control thread re-reads every thread's record: only the wake-up counts */
}

int pvhint__bpf_kwatch_open(struct pvhint_kwatch *w)
{
	int err = -EBUSY;

	pthread_mutex_lock(&inst.mu);
	struct pvhint_bpf *s = inst.skel;
	/* Not loaded by this process (pvhint__bpf_prepare), or inherited through fork: the
	 * counts, arms and ring are the parent's (MAP_SHARED), and so is the ring's consumer. */
	if (!s || !emu_map || (kw_pid && kw_pid != getpid()) || inst.load_pid != getpid())
		err = -ENOTSUP;
	else if (!kw_ring) {
		struct pvhint_bpf__bss *b = s->bss;
		/* Nothing counts while emu_watch is 0: start every count from zero. */
		memset((void *)b->emu_vcpu1, 0, sizeof(b->emu_vcpu1));
		memset((void *)b->emu_cv1, 0, sizeof(b->emu_cv1));
		memset((void *)b->emu_awake, 0, sizeof(b->emu_awake));
		memset((void *)b->emu_arm, 0, sizeof(b->emu_arm));
		kw_ring = ring_buffer__new(bpf_map__fd(s->maps.emu_events), kw_event, NULL, NULL);
		err = kw_ring ? 0 : -errno;
		if (!err) {
			w->fd = ring_buffer__epoll_fd(kw_ring);
			w->vcpu1 = b->emu_vcpu1;
			w->awake = b->emu_awake;
			w->arm = b->emu_arm;
			kw_pid = getpid();
			__atomic_store_n(&b->emu_watch, 1, __ATOMIC_SEQ_CST);
		}
	}
	pthread_mutex_unlock(&inst.mu);
	return err;
}

void pvhint__bpf_kwatch_drain(void)
{
	ring_buffer__consume(kw_ring);
}

void pvhint__bpf_kwatch_close(void)
{
	pthread_mutex_lock(&inst.mu);
	__atomic_store_n(&inst.skel->bss->emu_watch, 0, __ATOMIC_SEQ_CST);
	ring_buffer__free(kw_ring);
	kw_ring = NULL;
	pthread_mutex_unlock(&inst.mu);
}

#else /* !PVRT_HAVE_BPF */

void pvhint__bpf_prepare(void)
{
}

const struct pvhint_record *pvhint__bpf_self_record(int *slot)
{
	(void)slot;
	return NULL;
}

int pvhint__bpf_kwatch_open(struct pvhint_kwatch *w)
{
	(void)w;
	return -ENOTSUP;
}

void pvhint__bpf_kwatch_drain(void)
{
}

void pvhint__bpf_kwatch_close(void)
{
}

int pvhint_bpf_stats(pvhint_t *h, struct pvhint_bpf_stats *out)
{
	(void)h;
	(void)out;
	return pvhint__fail(-ENOTSUP, "not a bpf handle");
}

int pvhint__bpf_open(struct pvhint_impl *im, bool vcpu)
{
	(void)im;
	(void)vcpu;
	return pvhint__fail(-ENOTSUP, "bpf: this libpvhint was built without the bpf source "
				      "(clang, bpftool or libbpf-dev missing at build time)");
}

void pvhint__bpf_close(struct pvhint_impl *im)
{
	(void)im;
}

int pvhint__bpf_claim(void)
{
	return -ENODEV;
}

int pvhint_bpf_serve(int listen_fd, volatile int *stop)
{
	(void)listen_fd;
	(void)stop;
	return pvhint__fail(-ENOTSUP, "bpf: this libpvhint was built without the bpf source");
}
#endif

int pvhint_slot_register(void)
{
	int s = pvhint_tls_slot;
	if (s >= 0)
		return s;
	int saved = errno;
	s = pvhint__bpf_claim();
	errno = saved;
	/* No free slot (or no instance): slot 0, whose record never says anything. Not retried:
	 * the claim is a system call, and this is on lock paths. */
	pvhint_tls_slot = s > 0 ? s : 0;
	return pvhint_tls_slot;
}
