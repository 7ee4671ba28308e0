/* SPDX-License-Identifier: MIT */
/*
 * Per-ULT glibc TLS: each ULT gets what nptl gives a thread (allocatestack.c): a struct pthread
 * (the TCB, at the thread pointer on x86-64), the static TLS blocks of every loaded module and a
 * DTV, so __thread, errno, C++ thread_local, glibc's own per-thread state and modules loaded
 * later by dlopen (dynamic TLS through __tls_get_addr and the DTV) are the ULT's own wherever it
 * runs.
 *
 * Allocation: ld.so's _dl_allocate_tls(mem) builds the DTV and copies every module's TLS image
 * into memory we give it; _dl_deallocate_tls(tcb, false) frees the DTV and dynamic blocks and
 * leaves the memory to us. As nptl does, that memory is the top of the ULT's stack mapping, so
 * a cached stack keeps its TLS room and the TCB leads back to the ULT (a trailer after it).
 *
 * struct pthread is private to glibc: its size and the offsets of the fields we must set come
 * from the descriptors libc exports for libthread_db (_thread_db_*: {bits, count, offset}, see
 * glibc's nptl_db/structs.def and nptl/db_info.c), from the kernel (the robust-list head glibc
 * registered, get_robust_list) and from public symbols (__rseq_offset); the rest of the layout
 * we rely on is checked against the calling thread's own descriptor at init. Without any of it,
 * rt_tls_init fails and M:N mode is refused.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "tls.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <asm/prctl.h>
#endif

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
extern void *__libc_stack_end;

#define TRAILER_MAGIC			0x70767274746c7331ull /* "pvrttls1" */
#define KEY_L1				32		      /* PTHREAD_KEY_1STLEVEL_SIZE */
#define KEY_L2				32		      /* PTHREAD_KEY_2NDLEVEL_SIZE */
#define KEY_ROUNDS			4		      /* PTHREAD_DESTRUCTOR_ITERATIONS */
#define RSEQ_CPU_ID_REGISTRATION_FAILED (-2)

struct trailer {
	uint64_t magic;
	struct pvrt_ult *ult;
};

struct glibc_key {
	uintptr_t seq;
	void (*destr)(void *);
};

struct key_data {
	uintptr_t seq;
	void *data;
};

#define MAX_KWORDS     8
#define MAX_LDSO_LOCKS 32

static struct {
	int state; /* 0 not tried, 1 ready, -1 failed */
	const char *why;
	void *(*allocate)(void *mem);
	void (*deallocate)(void *tcb, bool dealloc_tcb);
	void (*call_tls_dtors)(void);
	void (*ctype_init)(void); /* __ctype_init: this thread's ctype table pointers */
	struct glibc_key *keys;	  /* __pthread_keys */
	size_t nkeys;
	size_t static_size, static_align, pthread_size;
	size_t off_tid, off_specific, off_robust, off_stackblock, off_list;
	bool have_stackblock, have_robust_prev, have_used;
	ptrdiff_t off_rseq;
	bool have_rseq;
	bool fsgsbase;
	size_t reserve;
	/* Words of the kernel thread's TLS copied into a ULT's before it runs (offsets from tp). */
	ptrdiff_t kw_off[MAX_KWORDS];
	size_t kw_size[MAX_KWORDS];
	unsigned nkw;
	ptrdiff_t off_ult; /* rt_tls_ult (wait.h), from tp */
	/* The owner words of ld.so's recursive locks (in _rtld_global): the kernel tid of the
	 * thread that holds each (rt_tls_ldso_locked). */
	int *ldso_owner[MAX_LDSO_LOCKS]; /* at most 32: a mask holds them */
	unsigned nldso;
	bool ldso_known;
} T;

static struct rt_lock init_lock;

static const uint32_t *db_desc(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

/* x86-64 keeps the TCB at the thread pointer (TLS_TCB_AT_TP); AArch64 puts struct pthread just
 * below it (TLS_DTV_AT_TP, TLS_PRE_TCB_SIZE = sizeof(struct pthread)). */
static inline char *pd_of(void *tp)
{
#if defined(__x86_64__)
	return tp;
#else
	return (char *)tp - T.pthread_size;
#endif
}

static int fail(const char *why)
{
	T.why = why;
	T.state = -1;
	return -ENOSYS;
}

static void ldso_find(void);

static int discover(void)
{
	T.allocate = (void *(*)(void *))dlsym(RTLD_DEFAULT, "_dl_allocate_tls");
	T.deallocate = (void (*)(void *, bool))dlsym(RTLD_DEFAULT, "_dl_deallocate_tls");
	void (*info)(size_t *, size_t *) =
	    (void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
	T.call_tls_dtors = (void (*)(void))dlsym(RTLD_DEFAULT, "__call_tls_dtors");
	if (!T.allocate || !T.deallocate || !info)
		return fail("ld.so does not export _dl_allocate_tls/_dl_deallocate_tls/"
			    "_dl_get_tls_static_info (not glibc, or a static program)");
	if (!T.call_tls_dtors)
		return fail("libc does not export __call_tls_dtors (C++ thread_local destructors)");
	/* glibc's start_thread calls it in every new thread: isalpha, toupper and tolower read
	 * per-thread pointers (__ctype_b, __ctype_toupper, __ctype_tolower, initial-exec TLS) that
	 * are zero in a fresh TLS block until it sets them from the thread's locale. */
	T.ctype_init = (void (*)(void))dlsym(RTLD_DEFAULT, "__ctype_init");
	if (!T.ctype_init)
		return fail("libc does not export __ctype_init (per-thread ctype tables)");
	info(&T.static_size, &T.static_align);

	const uint32_t *sz = db_desc("_thread_db_sizeof_pthread");
	const uint32_t *tid = db_desc("_thread_db_pthread_tid");
	const uint32_t *spec = db_desc("_thread_db_pthread_specific");
	const uint32_t *kd = db_desc("_thread_db_sizeof_pthread_key_data");
	const uint32_t *keys = db_desc("_thread_db___pthread_keys");
	const uint32_t *ks = db_desc("_thread_db_sizeof_pthread_key_struct");
	const uint32_t *list = db_desc("_thread_db_pthread_list");
	T.keys = dlsym(RTLD_DEFAULT, "__pthread_keys");
	if (!sz || !tid || !spec || !kd || !keys || !ks || !list || !T.keys)
		return fail("libc does not export the libthread_db descriptors of struct pthread "
			    "(_thread_db_*, __pthread_keys)");
	/* Descriptors are {size in bits, element count, offset}. */
	if (tid[0] != 32 || spec[0] != 64 * KEY_L1 || *kd != sizeof(struct key_data) ||
	    *ks != sizeof(struct glibc_key) || keys[0] != 8 * sizeof(struct glibc_key))
		return fail("glibc's struct pthread layout is not the expected one");
	T.pthread_size = *sz;
	T.off_tid = tid[2];
	T.off_specific = spec[2];
	T.off_list = list[2];
	T.nkeys = keys[1];
	if (T.static_size < T.pthread_size || T.off_specific + 8 * KEY_L1 > T.pthread_size)
		return fail("glibc's static TLS sizes are inconsistent");

	/* Check against our own descriptor: specific[0] points to specific_1stblock, which
	 * precedes the array (nptl/descr.h); tid is the kernel's. */
	char *pd = pd_of(rt_tp_get());
	if (*(void **)(pd + T.off_specific) !=
	    pd + T.off_specific - KEY_L2 * sizeof(struct key_data))
		return fail("glibc's thread-specific data layout is not the expected one");
	if (*(int *)(pd + T.off_tid) != (int)syscall(SYS_gettid))
		return fail("glibc's cached tid is not at the offset libthread_db says");

	/* specific_used, the flag glibc sets with the first key value (after the specific
	 * array): checked by setting a value of a fresh key, when it is still clear. */
	bool *used = (bool *)(pd + T.off_specific + 8 * KEY_L1);
	pthread_key_t k;
	if (!*used && pthread_key_create(&k, NULL) == 0) {
		pthread_setspecific(k, (void *)1);
		T.have_used = *used;
		pthread_setspecific(k, NULL);
		pthread_key_delete(k);
		*used = false; /* no value left: as before */
	}

	/* The robust-list head glibc registered with the kernel is in our descriptor. */
	void *head = NULL;
	size_t hlen = 0;
	if (syscall(SYS_get_robust_list, 0, &head, &hlen) == 0 && head && (char *)head >= pd &&
	    (char *)head + hlen <= pd + T.pthread_size)
		T.off_robust = (size_t)((char *)head - pd);
	else
		return fail("cannot find glibc's robust-list head (get_robust_list)");
	/* 64-bit glibc keeps robust_prev just before the head (__PTHREAD_MUTEX_HAVE_PREV), equal
	 * to the head's address while no robust mutex is held. */
	T.have_robust_prev = T.off_robust >= 8 && *(char **)(pd + T.off_robust - 8) == head;

	/* stackblock_size: glibc stores __libc_stack_end there for the main thread (it sizes
	 * alloca limits from it); stackblock is the word before. Found on the main thread only. */
	if (syscall(SYS_gettid) == getpid()) {
		unsigned hits = 0;
		for (size_t o = T.off_specific; o + 8 <= T.pthread_size; o += 8)
			if (*(void **)(pd + o) == __libc_stack_end)
				T.off_stackblock = o - 8, hits++;
		T.have_stackblock = hits == 1;
	}

	if (&__rseq_size && &__rseq_offset && __rseq_size >= 8) {
		T.have_rseq = true;
		T.off_rseq = __rseq_offset;
	}
#if defined(__x86_64__)
	T.fsgsbase = (getauxval(AT_HWCAP2) & 2) != 0; /* HWCAP2_FSGSBASE: the kernel enabled it */
#endif
	size_t ps = rt_page_size();
	size_t a = T.static_align < 64 ? 64 : T.static_align;
	T.static_align = a;
	T.reserve = (T.static_size + a + sizeof(struct trailer) + a + ps - 1) / ps * ps;

	/* Kernel-thread words: the worker pointer, the hint source's. */
	char *tp = rt_tp_get();
	T.kw_off[0] = (char *)&rt_tls_worker - tp;
	T.kw_size[0] = sizeof(rt_tls_worker);
	T.kw_off[1] = (char *)&rt_tls_m - tp; /* the kernel thread (sysmon.c) */
	T.kw_size[1] = sizeof(rt_tls_m);
	struct pvhint_tls_word hw[MAX_KWORDS - 2];
	unsigned n = pvhint_thread_tls_words(hw, MAX_KWORDS - 2);
	if (n > MAX_KWORDS - 2)
		return fail("the hint source has too many thread-local words");
	for (unsigned i = 0; i < n; i++) {
		T.kw_off[2 + i] = (char *)hw[i].addr - tp;
		T.kw_size[2 + i] = hw[i].size;
	}
	T.nkw = 2 + n;
	T.off_ult = (char *)&rt_tls_ult - tp;
	ldso_find();
	T.state = 1;
	return 0;
}

/*
 * ld.so's locks (dl_load_lock, dl_load_write_lock, dl_load_tls_lock, the unique-symbol table's)
 * are recursive pthread mutexes inside _rtld_global, whose layout is private. They are found by
 * shape: a mutex of kind PTHREAD_MUTEX_RECURSIVE_NP that is free, as
 * PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP left it, or held by the calling thread. The scan is
 * checked inside a dl_iterate_phdr callback, which runs with dl_load_write_lock held: one of
 * the locks found must then be ours.
 */
static void ldso_scan(char *g, size_t size, int tid)
{
	T.nldso = 0;
	for (size_t o = 0; o + sizeof(pthread_mutex_t) <= size && T.nldso < MAX_LDSO_LOCKS;
	     o += 8) {
		struct __pthread_mutex_s *m = (void *)(g + o);
		if (m->__kind != PTHREAD_MUTEX_RECURSIVE_NP || m->__spins || m->__elision ||
		    m->__list.__prev || m->__list.__next)
			continue;
		bool unused = !m->__lock && !m->__count && !m->__owner && !m->__nusers;
		bool mine = m->__lock && m->__count && m->__owner == tid && m->__nusers;
		if (unused || mine)
			T.ldso_owner[T.nldso++] = &m->__owner;
	}
}

struct ldso_probe {
	char *g;
	size_t size;
	int tid;
	unsigned held;
};

static int ldso_probe_cb(struct dl_phdr_info *info, size_t sz, void *arg)
{
	(void)info;
	(void)sz;
	struct ldso_probe *p = arg;
	ldso_scan(p->g, p->size, p->tid);
	p->held = 0;
	for (unsigned i = 0; i < T.nldso; i++)
		p->held += *T.ldso_owner[i] == p->tid;
	return 1; /* once is enough */
}

static void ldso_find(void)
{
	T.ldso_known = false;
	T.nldso = 0;
	char *g = dlsym(RTLD_DEFAULT, "_rtld_global");
	Dl_info info;
	const ElfW(Sym) *sym = NULL;
	if (!g || !dladdr1(g, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size)
		return;
	struct ldso_probe p = {g, sym->st_size, (int)syscall(SYS_gettid), 0};
	dl_iterate_phdr(ldso_probe_cb, &p);
	unsigned n = T.nldso;
	ldso_scan(g, sym->st_size, p.tid); /* again with the write lock free: the same set */
	T.ldso_known = p.held == 1 && n == T.nldso && n >= 2;
}

bool rt_tls_ldso_known(void)
{
	return T.ldso_known;
}

bool rt_tls_ldso_locked(int tid)
{
	for (unsigned i = 0; i < T.nldso; i++)
		if (__atomic_load_n(T.ldso_owner[i], __ATOMIC_RELAXED) == tid)
			return true;
	return false;
}

unsigned rt_tls_ldso_disown(int tid)
{
	unsigned held = 0;
	for (unsigned i = 0; i < T.nldso; i++)
		if (__atomic_load_n(T.ldso_owner[i], __ATOMIC_RELAXED) == tid) {
			/* No tid is 0: nobody takes it "recursively" until the holder owns it
			 * again. glibc's lock path reads the owner only to compare it with its own
			 * tid. */
			__atomic_store_n(T.ldso_owner[i], 0, __ATOMIC_RELAXED);
			held |= 1u << i;
		}
	return held;
}

int rt_tls_cur_tid(void)
{
	return *(int *)(pd_of(rt_tp_get()) + T.off_tid);
}

void rt_tls_ldso_own(unsigned held)
{
	/* The tid glibc compares with when it unlocks: the one cached in the running TCB. */
	int tid = *(int *)(pd_of(rt_tp_get()) + T.off_tid);
	for (unsigned i = 0; i < T.nldso; i++)
		if (held & (1u << i))
			__atomic_store_n(T.ldso_owner[i], tid, __ATOMIC_RELAXED);
}

int rt_tls_init(const char **why)
{
	rt_lock_acquire(&init_lock);
	int r = T.state == 1 ? 0 : T.state == -1 ? -ENOSYS : discover();
	rt_lock_release(&init_lock);
	if (r && why)
		*why = T.why;
	return r;
}

size_t rt_tls_reserve(void)
{
	return T.reserve;
}

void *rt_tls_create(struct pvrt_ult *u, void *stack, size_t len, size_t guard, void **stack_top)
{
	uintptr_t top = (uintptr_t)stack + len;
	uintptr_t a = T.static_align;
	struct trailer *tr = (struct trailer *)(top - sizeof(struct trailer));
	/* As nptl: the descriptor at the top, the static TLS blocks below it (x86-64), or the TLS
	 * blocks above the thread pointer that follows the descriptor (AArch64). */
#if defined(__x86_64__)
	char *pd = (char *)(((uintptr_t)tr - T.pthread_size) & ~(a - 1));
	char *tp = pd;
	char *low = pd + T.pthread_size - T.static_size;
#else
	char *tp = (char *)(((uintptr_t)tr - T.static_size) & ~(a - 1));
	char *pd = tp - T.pthread_size;
	char *low = pd;
#endif
	memset(pd, 0, T.pthread_size);
	if (!T.allocate(tp))
		return NULL;
	tr->magic = TRAILER_MAGIC;
	tr->ult = u;
	rt_tls_name(tp, u);

	char *me = pd_of(rt_tp_get());
#if defined(__x86_64__)
	/* tcbhead_t: tcb (0), dtv (8, set by ld.so), self (16), multiple_threads (24),
	 * stack_guard (40), pointer_guard (48), feature_1 (72, CET). */
	*(void **)(pd + 0) = pd;
	*(void **)(pd + 16) = pd;
	*(int *)(pd + 24) = 1;
	memcpy(pd + 40, me + 40, 16);
	memcpy(pd + 72, me + 72, 4);
#endif
	/* The first block of thread-specific data is part of the descriptor. */
	*(void **)(pd + T.off_specific) = pd + T.off_specific - KEY_L2 * sizeof(struct key_data);
	*(int *)(pd + T.off_tid) = *(int *)(me + T.off_tid);
	/* An empty robust list; futex_offset as glibc set it for every thread. */
	char *rh = pd + T.off_robust;
	*(void **)rh = rh;
	*(long *)(rh + 8) = *(long *)(me + T.off_robust + 8);
	if (T.have_robust_prev)
		*(void **)(rh - 8) = rh;
	/* A node of glibc's thread lists that links to itself: a fork child's stack reclaim
	 * unlinks the forking thread's node, and that must work for a ULT's. */
	*(void **)(pd + T.off_list) = pd + T.off_list;
	*(void **)(pd + T.off_list + 8) = pd + T.off_list;
	if (T.have_stackblock) {
		*(void **)(pd + T.off_stackblock) = (char *)stack + guard;
		*(size_t *)(pd + T.off_stackblock + 8) = len - guard;
	}
	/* The kernel updates only the rseq area each kernel thread registered: make this one say
	 * "not registered", so rseq readers (sched_getcpu) fall back to a system call. */
	if (T.have_rseq)
		*(int32_t *)(tp + T.off_rseq + 4) = RSEQ_CPU_ID_REGISTRATION_FAILED;
	*stack_top = (void *)((uintptr_t)low & ~(uintptr_t)63);
	return tp;
}

/*
 * The top of the mapping whose TCB is tp: the trailer ends there (page aligned) and starts less
 * than one alignment unit above the end of the descriptor (x86-64) or of the static TLS
 * (AArch64), so that range holds one page boundary; 0 if it does not (tp is no TCB of ours).
 */
static uintptr_t tls_top(const void *tp)
{
#if defined(__x86_64__)
	uintptr_t end = (uintptr_t)tp + T.pthread_size + sizeof(struct trailer);
#else
	uintptr_t end = (uintptr_t)tp + T.static_size + sizeof(struct trailer);
#endif
	uintptr_t ps = rt_page_size();
	uintptr_t top = (end + ps - 1) & ~(ps - 1);
	return top - end < T.static_align ? top : 0;
}

struct pvrt_ult *rt_tls_ult_of(const void *tp)
{
	if (T.state != 1 || !tp)
		return NULL;
	uintptr_t top = tls_top(tp);
	if (!top)
		return NULL;
	const struct trailer *tr = (const struct trailer *)(top - sizeof(struct trailer));
	return tr->magic == TRAILER_MAGIC ? tr->ult : NULL;
}

/* The mapping of a kernel TCB: its size is fixed at init (the reserve plus a page below it). */
static size_t kernel_tls_len(void)
{
	return T.reserve + rt_page_size();
}

void *rt_tls_kernel_create(void)
{
	size_t len = kernel_tls_len();
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return NULL;
	void *top;
	/* No ULT behind it (rt_tls_ult_of says NULL); the tid and guards are the caller's. */
	void *tp = rt_tls_create(NULL, mem, len, 0, &top);
	if (!tp)
		munmap(mem, len);
	return tp;
}

void rt_tls_kernel_free(void *tp)
{
	uintptr_t top = tls_top(tp);
	T.deallocate(tp, false);
	munmap((void *)(top - kernel_tls_len()), kernel_tls_len());
}

/* glibc's __nptl_deallocate_tsd, on the calling ULT's descriptor. */
static void run_key_destructors(char *pd)
{
	struct key_data **spec = (struct key_data **)(pd + T.off_specific);
	if (T.have_used && !*(bool *)(pd + T.off_specific + 8 * KEY_L1))
		return; /* no value was ever set (nor a second-level block allocated) */
	for (int round = 0; round < KEY_ROUNDS; round++) {
		bool any = false;
		for (size_t i = 0, idx = 0; i < KEY_L1; i++, idx += KEY_L2) {
			struct key_data *l2 = spec[i];
			if (!l2)
				continue;
			for (size_t j = 0; j < KEY_L2 && idx + j < T.nkeys; j++) {
				void *data = l2[j].data;
				if (!data)
					continue;
				l2[j].data = NULL;
				struct glibc_key *k = &T.keys[idx + j];
				void (*d)(void *) = __atomic_load_n(&k->destr, __ATOMIC_RELAXED);
				if (l2[j].seq == __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE) && d) {
					d(data);
					any = true;
				}
			}
		}
		if (!any)
			break;
	}
	for (size_t i = 1; i < KEY_L1; i++)
		if (spec[i]) {
			free(spec[i]);
			spec[i] = NULL;
		}
}

void rt_tls_start(void)
{
	/* As glibc's start_thread, first thing on the new thread's own TLS. */
	T.ctype_init();
}

void rt_tls_exit(void)
{
	/* The order of glibc's start_thread: thread_local destructors, then keys. */
	T.call_tls_dtors();
	run_key_destructors(pd_of(rt_tp_get()));
}

void rt_tls_release(void *tp)
{
	T.deallocate(tp, false);
}

void rt_tp_set(void *tp)
{
#if defined(__x86_64__)
	if (likely(T.fsgsbase))
		__asm__ volatile("wrfsbase %0" ::"r"(tp) : "memory");
	else
		syscall(SYS_arch_prctl, ARCH_SET_FS, tp);
#elif defined(__aarch64__)
	__asm__ volatile("msr tpidr_el0, %0" ::"r"(tp) : "memory");
#endif
}

void rt_tls_name(void *tp, struct pvrt_ult *u)
{
	*(struct pvrt_ult **)(void *)((char *)tp + T.off_ult) = u;
}

void rt_tls_switch(struct rt_worker *w, void *tp)
{
	if (tp != w->tp) {
		/* Into a ULT's TLS: what belongs to the kernel thread first (written through the
		 * target's addresses: after the switch of the thread pointer, compiled code might
		 * still use addresses it computed from the old one). */
		char *src = w->tp;
		for (unsigned i = 0; i < T.nkw; i++) {
			char *d = (char *)tp + T.kw_off[i];
			const char *o = src + T.kw_off[i];
			/* Words of 8 and 4 bytes (no memcpy call on the switch path). */
			if (T.kw_size[i] == 8)
				*(uint64_t *)(void *)d = *(const uint64_t *)(const void *)o;
			else if (T.kw_size[i] == 4)
				*(uint32_t *)(void *)d = *(const uint32_t *)(const void *)o;
			else
				memcpy(d, o, T.kw_size[i]);
		}
		*(int *)(pd_of(tp) + T.off_tid) = w->tid;
	}
	rt_tp_set(tp);
	w->cur_tp = tp;
}

void rt_tls_home(void *own)
{
	char *cur = rt_tp_get();
	if (cur != own) {
		/* The kernel-thread words this thread changed while it ran on a ULT's TLS (its
		 * worker pointer cleared, the hint source's detach) go back with it. */
		for (unsigned i = 0; i < T.nkw; i++)
			memcpy((char *)own + T.kw_off[i], cur + T.kw_off[i], T.kw_size[i]);
	}
	rt_tp_set(own);
}

void rt_tls_worker_start(struct rt_worker *w)
{
	w->tp = rt_tp_get();
	w->cur_tp = w->tp;
	w->tid = (int)syscall(SYS_gettid);
	w->sigmask = rt_kernel_sigmask();
}
