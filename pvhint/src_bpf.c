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
 * maps its tid to it (tid_slot): two bpf(2) calls, once per thread. Lock paths after that read
 * the slot from TLS. The program frees the slot when the thread exits.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "bpf/pvhint_bpf.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

PVRT_API __thread int pvhint_tls_slot __attribute__((tls_model("initial-exec"))) = -1;
PVRT_API int pvhint_slot_mode;

#if defined(PVRT_HAVE_BPF) && PVRT_HAVE_BPF

#include "pvhint_bpf.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

static struct {
	pthread_mutex_t mu;
	struct pvhint_bpf *skel; /* NULL until loaded */
	int page_fd, tid_fd, owner_fd;
	size_t len;
	int vpage_fd; /* vCPU mode's page, -1 when the kernel has no per-CPU steal_time */
	size_t vlen;
	char vwhy[120];	 /* why there is no vCPU mode */
	unsigned nopen;	 /* open bpf handles: pvhint_slot_mode while > 0 */
	uint32_t cursor; /* next slot to try */
	char log[160];	 /* libbpf's first warning during the load */
	char vlog[160];	 /* the verifier's complaint */
} inst = {.mu = PTHREAD_MUTEX_INITIALIZER};

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
	uint64_t orq, ost;
	inst.vwhy[0] = 0;
	if (percpu_offsets(&orq, &ost))
		snprintf(inst.vwhy, sizeof(inst.vwhy),
			 "the kernel's BTF has no per-CPU steal_time (not a KVM guest kernel)");
	else if (ncpu > (int)PVHINT_BPF_MAXCPU)
		snprintf(inst.vwhy, sizeof(inst.vwhy), "more than %u CPUs", PVHINT_BPF_MAXCPU);
	if (!inst.vwhy[0]) {
		s->rodata->off_rq = orq;
		s->rodata->off_st = ost;
	}
	s->rodata->nr_cpus = (uint32_t)ncpu;
	err = bpf_map__set_max_entries(s->maps.cpus, (uint32_t)ncpu);
	if (!err)
		err =
		    bpf_map__set_max_entries(s->maps.vpage, PVHINT_BPF_HDR_ELEMS + (uint32_t)ncpu);
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
	if (err) {
		err = pvhint__fail(err, "bpf: cannot attach to the scheduler tracepoints: %s%s",
				   strerror(-err), inst.log);
		goto out;
	}
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	inst.len = ((size_t)PVHINT_BPF_ELEMS * PVHINT_RECORD_SIZE + pg - 1) & ~(pg - 1);
	inst.page_fd = fd;
	inst.vpage_fd = inst.vwhy[0] ? -1 : vfd;
	inst.vlen = ((size_t)(PVHINT_BPF_HDR_ELEMS + (size_t)ncpu) * PVHINT_RECORD_SIZE + pg - 1) &
		    ~(pg - 1);
	inst.tid_fd = bpf_map__fd(s->maps.tid_slot);
	inst.owner_fd = bpf_map__fd(s->maps.slot_owner);
	inst.cursor = 1;
	/* Release: a claimer that sees the skeleton sees the fds. */
	__atomic_store_n(&inst.skel, s, __ATOMIC_RELEASE);
	s = NULL;
out:
	libbpf_set_print(old);
	pvhint_bpf__destroy(s);
	return err;
}

static void atfork_child(void)
{
	/* The forking thread has a new tid: its slot is the parent thread's. The child shares
	 * the parent's maps and program; it registers its threads there. */
	pvhint_tls_slot = -1;
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
	if (!inst.skel)
		err = load();
	if (!err && vcpu && inst.vpage_fd < 0)
		err = pvhint__fail(-ENOTSUP, "bpf vcpu mode: %s", inst.vwhy);
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
			if (!vcpu && inst.nopen++ == 0)
				__atomic_store_n(&pvhint_slot_mode, 1, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&inst.mu);
	return err;
}

void pvhint__bpf_close(struct pvhint_impl *im)
{
	if (!im->bpf_slots)
		return;
	pthread_mutex_lock(&inst.mu);
	/* The program stays loaded (see the top): only the slot answers stop. */
	if (--inst.nopen == 0)
		__atomic_store_n(&pvhint_slot_mode, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&inst.mu);
}

int pvhint__bpf_claim(void)
{
	uint32_t tid = (uint32_t)syscall(SYS_gettid);

	if (!__atomic_load_n(&inst.skel, __ATOMIC_ACQUIRE))
		return -ENODEV;
	/* Start where the last claim ended: freed slots are found again on the way round. */
	uint32_t start = __atomic_fetch_add(&inst.cursor, 1, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < PVHINT_BPF_SLOTS - 1; i++) {
		uint32_t s = 1 + (start + i - 1) % (PVHINT_BPF_SLOTS - 1);
		if (bpf_map_update_elem(inst.owner_fd, &s, &tid, BPF_NOEXIST)) {
			if (errno == EEXIST)
				continue;
			return -errno;
		}
		if (bpf_map_update_elem(inst.tid_fd, &tid, &s, BPF_ANY)) {
			int e = -errno;
			bpf_map_delete_elem(inst.owner_fd, &s);
			return e;
		}
		__atomic_store_n(&inst.cursor, s + 1, __ATOMIC_RELAXED);
		return (int)s;
	}
	return -ENOSPC;
}

int pvhint_bpf_stats(pvhint_t *h, struct pvhint_bpf_stats *out)
{
	if (!h || !h->impl || !h->impl->bpf || !out)
		return pvhint__fail(-ENOTSUP, "not a bpf handle");
	out->switches = __atomic_load_n(&inst.skel->bss->switches_out, __ATOMIC_RELAXED);
	out->missed = __atomic_load_n(&inst.skel->bss->missed_in, __ATOMIC_RELAXED);
	out->slots = 0;
	for (uint32_t s = 1; s < pvhint_nr_used(h); s++)
		out->slots += __atomic_load_n(&h->rec[s].owner, __ATOMIC_RELAXED) != 0;
	return 0;
}

static void *emu_map; /* the emulator's view of the thread page, never unmapped */

void pvhint__bpf_prepare(void)
{
	static int failed; /* do not retry a load that failed */
	const char *ks = secure_getenv("PVRT_EMU_KSTATE");

	if (ks && !strcmp(ks, "proc"))
		return;
	int saved = errno;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", pvhint_errmsg()); /* a fallback: no error to report */
	pthread_mutex_lock(&inst.mu);
	if (!inst.skel && !failed)
		failed = load() != 0;
	if (inst.skel && !emu_map) {
		void *p = mmap(NULL, inst.len, PROT_READ, MAP_SHARED, inst.page_fd, 0);
		__atomic_store_n(&emu_map, p == MAP_FAILED ? NULL : p, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&inst.mu);
	pvhint__fail(0, "%s", msg);
	errno = saved;
}

const struct pvhint_record *pvhint__bpf_self_record(void)
{
	char *map = __atomic_load_n(&emu_map, __ATOMIC_ACQUIRE);
	if (!map)
		return NULL;
	int s = pvhint_tls_slot >= 0 ? pvhint_tls_slot : pvhint_slot_register();
	return s > 0 ? (const struct pvhint_record *)(map + PVHINT_HEADER_SIZE) + s : NULL;
}

#else /* !PVRT_HAVE_BPF */

void pvhint__bpf_prepare(void)
{
}

const struct pvhint_record *pvhint__bpf_self_record(void)
{
	return NULL;
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
