/* SPDX-License-Identifier: MIT */
/*
 * libpvhint: handles, source selection (auto|kvm|emu|none), errors, the process-wide default
 * handle and the out-of-line queries. The sources live in src_none.c, src_kvm.c and emu.c.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "bpf/pvhint_bpf.h"
#include "pvrt_os.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * initial-exec: the emulator's stop handler reads it from signal context, where a lazily
 * allocated TLS block would be unsafe; libpvhint is always loaded at program start.
 */
PVRT_API __thread int pvhint_tls_vcpu __attribute__((tls_model("initial-exec"))) = -1;

static __thread char errbuf[256];
static __thread const char *errmsg;

int pvhint__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	errmsg = errbuf;
	return err;
}

const char *pvhint_errmsg(void)
{
	return errmsg ? errmsg : "no error";
}

uint32_t pvhint__possible_cpus(void)
{
	/* Possible CPUs bound every CPU number sched_getcpu()/rseq can return. */
	long n = sysconf(_SC_NPROCESSORS_CONF);
	return n > 0 ? (uint32_t)n : 1;
}

uint32_t pvhint__affinity_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (uint32_t)CPU_COUNT(&set);
	return pvhint__possible_cpus();
}

/*
 * export= files: created under a temporary name (O_EXCL, never an existing file, never through a
 * symbolic link), filled, then linked to the path, which must not exist (link(2) neither
 * replaces nor follows). Removed at close, and at exit by the process that created them (a
 * forked child's emulator is inert and has no export: see emu.c's fork_child).
 */
struct export_ent {
	struct export_ent *next;
	pid_t pid;
	char path[sizeof(((struct pvhint_impl *)0)->export_path)];
};
static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;
static struct export_ent *exports;

static void export_forget(const char *path, bool remove)
{
	pthread_mutex_lock(&export_lock);
	for (struct export_ent **pp = &exports, *e; (e = *pp); pp = &e->next) {
		if (e->pid == getpid() && !strcmp(e->path, path)) {
			if (remove)
				unlink(e->path);
			*pp = e->next;
			free(e);
			break;
		}
	}
	pthread_mutex_unlock(&export_lock);
}

__attribute__((destructor)) static void export_atexit(void)
{
	/* No lock: exit runs destructors on one thread; entries of a parent stay (pid). */
	for (struct export_ent *e = exports; e; e = e->next)
		if (e->pid == getpid())
			unlink(e->path);
}

static int export_create(const char *path, size_t len, char *tmp, size_t tmpsz, void **map)
{
	if ((size_t)snprintf(tmp, tmpsz, "%s.XXXXXX", path) >= tmpsz)
		return pvhint__fail(-ENAMETOOLONG, "%s: path too long", path);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return pvhint__fail(-errno, "cannot create a file beside %s: %s", path,
				    strerror(errno));
	int e = 0;
	/* Readable by all (watchers of other users), writable by us only: nobody else can
	 * truncate it under the mapping (which would kill us with SIGBUS). */
	if (fchmod(fd, 0644) || ftruncate(fd, (off_t)len))
		e = errno;
	void *p = e ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!e && p == MAP_FAILED)
		e = errno;
	close(fd);
	if (e) {
		unlink(tmp);
		return pvhint__fail(-e, "cannot size or map %s: %s", tmp, strerror(e));
	}
	*map = p;
	return 0;
}

/* Make the filled temporary file visible at path; it must not exist. */
static int export_publish(const char *tmp, const char *path)
{
	int r = link(tmp, path) ? -errno : 0;
	unlink(tmp);
	if (r == -EEXIST)
		return pvhint__fail(
		    r, "%s exists (an export never replaces a file: remove it first)", path);
	if (r)
		return pvhint__fail(r, "cannot create %s: %s", path, strerror(-r));
	struct export_ent *e = calloc(1, sizeof(*e));
	if (e) {
		e->pid = getpid();
		snprintf(e->path, sizeof(e->path), "%s", path);
		pthread_mutex_lock(&export_lock);
		e->next = exports;
		exports = e;
		pthread_mutex_unlock(&export_lock);
	}
	return 0;
}

int pvhint__page_alloc(struct pvhint_impl *im, unsigned source, uint32_t nr, uint32_t valid,
		       const char *export_path)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = PVHINT_HEADER_SIZE + (((size_t)nr * PVHINT_RECORD_SIZE + pg - 1) & ~(pg - 1));
	void *p = NULL;
	char tmp[sizeof(im->export_path) + 8];

	if (export_path) {
		/* A file laid out like the kernel's page, so that other processes can read these
		 * hints with the kvm source (PVRT_HINT_DEV=path). Written only by this process. */
		int err = export_create(export_path, len, tmp, sizeof(tmp), &p);
		if (err)
			return err;
	} else {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return pvhint__fail(-errno, "cannot map a hint page of %zu bytes: %s", len,
					    strerror(errno));
	}
	struct pvhint_header *hdr = p;
	hdr->abi_version = PVHINT_ABI_VERSION;
	hdr->source = (uint16_t)source;
	hdr->header_size = PVHINT_HEADER_SIZE;
	hdr->record_stride = PVHINT_RECORD_SIZE;
	hdr->nr_records = nr;
	hdr->valid = valid;
	/* release: a reader of an exported page that sees the magic sees the header */
	__atomic_store_n(&hdr->magic, PVHINT_MAGIC, __ATOMIC_RELEASE);
	if (export_path) {
		int err = export_publish(tmp, export_path);
		if (err) {
			munmap(p, len);
			return err;
		}
		snprintf(im->export_path, sizeof(im->export_path), "%s", export_path);
	}
	im->map = p;
	im->map_len = len;
	im->hdr = hdr;
	im->source = source;
	return 0;
}

void pvhint__page_free(struct pvhint_impl *im)
{
	if (im->map)
		munmap(im->map, im->map_len);
	im->map = NULL;
	if (im->export_path[0])
		export_forget(im->export_path, true);
	im->export_path[0] = 0;
}

static const char *const accepted = "auto, kvm, bpf, emu, none";

int pvhint_open(const struct pvhint_options *opts, pvhint_t **out)
{
	const char *src = opts && opts->source ? opts->source : NULL;
	const char *what = "hint source";
	int err;

	if (!out)
		return pvhint__fail(-EINVAL, "pvhint_open: out is NULL");
	*out = NULL;
	/* secure_getenv: a setuid or otherwise AT_SECURE program reads no PVRT_* variable, or an
	 * unprivileged caller could steer it (export= writes files, PVRT_HINT_DEV maps them). */
	if (!src) {
		src = secure_getenv("PVRT_HINTS");
		what = "PVRT_HINTS";
	}
	if (!src || !*src)
		src = "auto";

	const char *kvm_path =
	    opts && opts->kvm_path ? opts->kvm_path : secure_getenv("PVRT_HINT_DEV");
	if (!kvm_path || !*kvm_path)
		kvm_path = PVHINT_DEV_PATH;
	const char *spec = opts && opts->emu ? opts->emu : secure_getenv("PVRT_EMU");
	const char *spec_label = opts && opts->emu ? "emulator spec" : "PVRT_EMU";

	/* Directed yield (kvm, emu slice): only with PVRT_DIRECTED_YIELD=1 (pvhint/README.md).
	 * Source none never yields, so that a bad value leaves the fallback handle open. */
	const char *dy = secure_getenv("PVRT_DIRECTED_YIELD");
	if (dy && *dy && strcmp(dy, "0") && strcmp(dy, "1") && strcmp(src, "none"))
		return pvhint__fail(-EINVAL, "PVRT_DIRECTED_YIELD='%s': expected 0 or 1", dy);

	pvhint_t *h = calloc(1, sizeof(*h));
	struct pvhint_impl *im = calloc(1, sizeof(*im));
	if (!h || !im) {
		free(h);
		free(im);
		return pvhint__fail(-ENOMEM, "out of memory");
	}
	im->yield_fd = -1;
	im->yield_off = !dy || strcmp(dy, "1");

	if (!strcmp(src, "none")) {
		err = pvhint__none_open(im);
	} else if (!strcmp(src, "kvm")) {
		err = pvhint__kvm_open(im, kvm_path);
	} else if (!strcmp(src, "bpf")) {
		const char *mode = secure_getenv("PVRT_BPF");
		if (mode && *mode && strcmp(mode, "thread") && strcmp(mode, "vcpu"))
			err = pvhint__fail(
			    -EINVAL, "PVRT_BPF='%s': unknown bpf mode (accepted: thread, vcpu)",
			    mode);
		else
			err = pvhint__bpf_open(im, mode && !strcmp(mode, "vcpu"));
	} else if (!strcmp(src, "emu")) {
		err = pvhint__emu_open(im, spec, spec_label);
	} else if (!strcmp(src, "auto")) {
		/*
		 * The kernel page when it is there and valid (vCPU hints from the host), else the
		 * BPF program when it loads (thread hints from this kernel's scheduler), else none:
		 * an unpatched, unprivileged machine must keep working. Why the earlier ones were
		 * passed over stays in pvhint_note().
		 */
		err = pvhint__kvm_open(im, kvm_path);
		/* A device there that we may not read: the administrator can change that. */
		im->notice = err == -EACCES;
		if (err) {
			char why[256];
			snprintf(why, sizeof(why), "%s", pvhint_errmsg());
			/* Not for a setuid (AT_SECURE) program: its invoker could make it load a
			 * kernel program that runs at every context switch on the machine. */
			err = getauxval(AT_SECURE)
				  ? pvhint__fail(-EPERM, "bpf: not loaded by a setuid program")
				  : pvhint__bpf_open(im, false);
			if (err) {
				snprintf(im->note, sizeof(im->note), "auto: %s; %s; using none",
					 why, pvhint_errmsg());
				err = pvhint__none_open(im);
			} else {
				snprintf(im->note, sizeof(im->note), "auto: %s; using bpf", why);
			}
		}
	} else {
		err = pvhint__fail(-EINVAL, "%s='%s': unknown hint source (accepted: %s)", what,
				   src, accepted);
	}
	if (err) {
		free(im);
		free(h);
		return err;
	}
	h->impl = im;
	h->rec = (const struct pvhint_record *)((const char *)im->map + im->hdr->header_size);
	h->nr = im->hdr->nr_records;
	h->valid = im->hdr->valid;
	*out = h;
	return 0;
}

void pvhint_close(pvhint_t *h)
{
	if (!h)
		return;
	if (h->impl->emu)
		pvhint__emu_close(h->impl);
	if (h->impl->bpf)
		pvhint__bpf_close(h->impl);
	if (h->impl->yield_fd >= 0)
		close(h->impl->yield_fd);
	pvhint__page_free(h->impl);
	free(h->impl);
	free(h);
}

const struct pvhint_header *pvhint_header(const pvhint_t *h)
{
	return h->impl->hdr;
}

const char *pvhint_source_name(const pvhint_t *h)
{
	switch (h->impl->hdr->source) {
	case PVHINT_SOURCE_KVM:
		return "kvm";
	case PVHINT_SOURCE_EMU:
		return "emu";
	case PVHINT_SOURCE_BPF:
		return "bpf";
	default:
		return "none";
	}
}

int pvhint_waits_on_cpu(const pvhint_t *h, unsigned v)
{
	/* The bpf source's own page only: another page with the same header (a file mapped
	 * by the kvm source) has no program state in its padding. */
	if (!h || !h->impl || h->impl->source != PVHINT_SOURCE_BPF ||
	    !(h->valid & PVHINT_VALID_SLEEPING) || v >= h->nr)
		return -1;
	/* The program's slot state, in the record's padding (pvhint_bpf.h); relaxed: a hint. */
	const struct pvhint_bpf_slot *p =
	    (const void *)((const char *)&h->rec[v] + PVHINT_BPF_PRIV_OFF);
	uint32_t c1 = __atomic_load_n(&p->cpu1, __ATOMIC_RELAXED);
	return c1 && pvhint_vcpu_preempted(h, v) ? (int)c1 - 1 : -1;
}

bool pvhint_can_yield(const pvhint_t *h)
{
	return h && h->impl &&
	       (__atomic_load_n(&h->impl->yield_fd, __ATOMIC_RELAXED) >= 0 ||
		pvhint__emu_can_yield(h->impl));
}

int pvhint_yield_to(pvhint_t *h, unsigned v)
{
	if (!pvhint_can_yield(h))
		return -ENOTSUP;
	if (v >= h->nr)
		return -EINVAL;
	if (h->impl->emu)
		return pvhint__emu_yield_to(h->impl, v);
	/* The kernel checks the record again; this saves the system call when it reads running. */
	if (!pvhint_vcpu_preempted(h, v))
		return -EAGAIN;
	int saved = errno; /* called from lock paths, which leave errno as glibc's do */
	int fd = __atomic_load_n(&h->impl->yield_fd, __ATOMIC_RELAXED);
	int r = ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)v) ? -errno : 0;
	errno = saved;
	/* The program closed our descriptor (closefrom() and the like), or the number now names
	 * another file: stop asking; it is not ours to close any more. */
	if (r == -EBADF || r == -ENOTTY) {
		__atomic_store_n(&h->impl->yield_fd, -1, __ATOMIC_RELAXED);
		return -ENOTSUP;
	}
	return r == -EOPNOTSUPP ? -ENOTSUP : r;
}

uint32_t pvhint_nr_used(const pvhint_t *h)
{
	if (!h->impl) /* a handle built by hand (tests): records only */
		return h->nr;
	uint32_t u = __atomic_load_n(&h->impl->hdr->nr_used, __ATOMIC_RELAXED);
	return u && u < h->nr ? u : h->nr;
}

const char *pvhint_note(const pvhint_t *h)
{
	return h->impl->note;
}

/* ---- the process-wide handle ---- */

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static pvhint_t *default_h;
static int default_err;
static char default_msg[256];

static void default_init(void)
{
	default_err = pvhint_open(NULL, &default_h);
	/* The one-line notice of a fallback that the user can act on (README, 'Access to
	 * /dev/pvhint'); once per process: this runs once. */
	if (!default_err && default_h->impl->notice)
		dprintf(2, "pvrt: hints: %s\n", default_h->impl->note);
	if (default_err) {
		snprintf(default_msg, sizeof(default_msg), "%s", pvhint_errmsg());
		/* The callers still get well-defined answers: all hints false. */
		if (pvhint_open(&(struct pvhint_options){.source = "none"}, &default_h))
			default_h = NULL;
	}
}

int pvhint_default(pvhint_t **out)
{
	/* pthread_once orders the initialisation before every caller's reads of default_h. */
	pthread_once(&default_once, default_init);
	*out = default_h;
	if (default_err)
		return pvhint__fail(default_err, "%s", default_msg);
	return default_h ? 0 : pvhint__fail(-ENOMEM, "out of memory");
}

/* ---- out-of-line queries ---- */

uint64_t pvhint_steal(const pvhint_t *h, unsigned v)
{
	if (v >= h->nr)
		return 0;
	const struct pvhint_record *r = &h->rec[v];
	/*
	 * Sequence-count read: the writer makes version odd, writes steal, makes version even.
	 * The acquire load of version orders the steal load after it; the acquire load of steal
	 * orders the second version load after it (no fence: TSan does not model fences). If
	 * steal came from the writer's release store, the second load sees the odd version or
	 * later. Equal even versions: a consistent steal.
	 */
	for (int tries = 0; tries < 64; tries++) {
		uint32_t v1 = __atomic_load_n(&r->version, __ATOMIC_ACQUIRE);
		if (v1 & 1) {
			os_yield(); /* the writer (host or emulator) is mid-update */
			continue;
		}
		uint64_t s = __atomic_load_n(&r->steal, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&r->version, __ATOMIC_RELAXED) == v1)
			return s;
	}
	/* Bounded (nothing spins forever): a writer that died mid-update, e.g. the exporter of an
	 * export= page, leaves version odd for good. Steal is a hint: give the last value read. */
	return __atomic_load_n(&r->steal, __ATOMIC_RELAXED);
}

int pvhint_cpu_slow(void)
{
	int c = sched_getcpu();
	return c < 0 ? 0 : c;
}

/* Both are called from interposed pthread functions, which must leave errno as it was; the
 * emulator's waits (futex, nanosleep) may set it. */
void pvhint_thread_park(pvhint_t *h)
{
	if (h && h->impl->emu) {
		int saved = errno;
		pvhint__emu_park(h->impl);
		errno = saved;
	}
}

void pvhint_thread_unpark(pvhint_t *h)
{
	if (h && h->impl->emu) {
		int saved = errno;
		pvhint__emu_unpark(h->impl);
		errno = saved;
	}
}
