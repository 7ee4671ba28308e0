/* SPDX-License-Identifier: MIT */
/*
 * libpvrt-preload.so: pvrt's locks behind glibc's pthread_mutex_*, pthread_cond_*,
 * pthread_rwlock_*, pthread_spin_* and pthread_barrier_* (LD_PRELOAD; see pvrt-run).
 *
 * ABI notes (x86-64 glibc 2.36; see locks/README.md):
 *  - Each pvrt object overlays the glibc object of the same size and keeps the
 *    fields glibc's static initialisers set where glibc has them: the mutex
 *    type in __kind (offset 16), the rwlock preference in __flags (48). All-zero
 *    objects are valid pvrt objects.
 *  - Objects glibc must keep handling are created by glibc and recognised by
 *    glibc's own marks: mutex __kind bits ROBUST 0x10, PRIO_INHERIT 0x20,
 *    PRIO_PROTECT 0x40, PSHARED 0x80 (and -1 after destroy); condvar __wrefs
 *    bit 0 (offset 36); rwlock __shared (28); barrier 'shared' (12). Every call
 *    on such an object goes to glibc (dlsym(RTLD_NEXT)).
 *  - Symbols are exported without a version (locks/preload.map): the dynamic
 *    linker binds a versioned reference (pthread_cond_wait@GLIBC_2.3.2, the old
 *    @GLIBC_2.2.5, pthread_mutex_lock@GLIBC_2.2.5, ...@GLIBC_2.34) to an
 *    unversioned definition of the same name, so programs built against any
 *    glibc reach these. (The old 2.2.5 condvar was also 48 bytes and all-zero
 *    initialised.)
 *  - Return values are glibc's positive error numbers; errno is never changed.
 *  - pthread_create is wrapped so that, under the overcommit emulator, every
 *    application thread is attached to an emulated vCPU (round robin); the
 *    main thread is attached at load.
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/rwlock.h>
#include <pvrt/spinlock.h>

#include "lk.h"
#include "lk_wait.h"
#include "mutex_fast.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

_Static_assert(sizeof(pvrt_mutex_t) <= sizeof(pthread_mutex_t), "mutex size");
_Static_assert(sizeof(pvrt_cond_t) <= sizeof(pthread_cond_t), "cond size");
_Static_assert(sizeof(pvrt_rwlock_t) <= sizeof(pthread_rwlock_t), "rwlock size");
_Static_assert(sizeof(pvrt_barrier_t) <= sizeof(pthread_barrier_t), "barrier size");
_Static_assert(sizeof(pvrt_spinlock_t) == sizeof(pthread_spinlock_t), "spinlock size");
/* The fields glibc's static initialisers set, or that mark an object as glibc's own, are where
 * glibc keeps them (lk_layout.h; the barrier's is checked there: glibc's type is opaque). */
_Static_assert(offsetof(lk_mutex_t, kind) == offsetof(pthread_mutex_t, __data.__kind), "__kind");
_Static_assert(offsetof(lk_mutex_t, owner) == offsetof(pthread_mutex_t, __data.__owner), "__owner");
_Static_assert(offsetof(lk_cond_t, glibc_wrefs) == offsetof(pthread_cond_t, __data.__wrefs),
	       "__wrefs");
_Static_assert(offsetof(lk_rwlock_t, shared) == offsetof(pthread_rwlock_t, __data.__shared),
	       "__shared");
_Static_assert(offsetof(lk_rwlock_t, flags) == offsetof(pthread_rwlock_t, __data.__flags),
	       "__flags");
_Static_assert(offsetof(lk_rwlock_t, writer) == offsetof(pthread_rwlock_t, __data.__cur_writer),
	       "__cur_writer");

/* glibc's __kind bits for mutexes it must handle itself. */
#define GLIBC_MUTEX_ROBUST  0x10
#define GLIBC_MUTEX_PI	    0x20
#define GLIBC_MUTEX_PP	    0x40
#define GLIBC_MUTEX_PSHARED 0x80
#define GLIBC_MUTEX_FOREIGN                                                                        \
	(GLIBC_MUTEX_ROBUST | GLIBC_MUTEX_PI | GLIBC_MUTEX_PP | GLIBC_MUTEX_PSHARED)
#define GLIBC_COND_SHARED 1u

/* ---- glibc's own functions, resolved on first use ---- */
#define REAL(ret, name, ...)                                                                       \
	static ret (*real_##name)(__VA_ARGS__);                                                    \
	static ret (*get_##name(void))(__VA_ARGS__)                                                \
	{                                                                                          \
		/* Relaxed: a function pointer; racing resolvers store the same value. */          \
		ret (*f)(__VA_ARGS__) = __atomic_load_n(&real_##name, __ATOMIC_RELAXED);           \
		if (!f) {                                                                          \
			f = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                          \
			__atomic_store_n(&real_##name, f, __ATOMIC_RELAXED);                       \
		}                                                                                  \
		return f;                                                                          \
	}

REAL(int, pthread_mutex_init, pthread_mutex_t *, const pthread_mutexattr_t *)
REAL(int, pthread_mutex_destroy, pthread_mutex_t *)
REAL(int, pthread_mutex_lock, pthread_mutex_t *)
REAL(int, pthread_mutex_trylock, pthread_mutex_t *)
REAL(int, pthread_mutex_timedlock, pthread_mutex_t *, const struct timespec *)
REAL(int, pthread_mutex_clocklock, pthread_mutex_t *, clockid_t, const struct timespec *)
REAL(int, pthread_mutex_unlock, pthread_mutex_t *)
REAL(int, pthread_cond_init, pthread_cond_t *, const pthread_condattr_t *)
REAL(int, pthread_cond_destroy, pthread_cond_t *)
REAL(int, pthread_cond_wait, pthread_cond_t *, pthread_mutex_t *)
REAL(int, pthread_cond_timedwait, pthread_cond_t *, pthread_mutex_t *, const struct timespec *)
REAL(int, pthread_cond_clockwait, pthread_cond_t *, pthread_mutex_t *, clockid_t,
     const struct timespec *)
REAL(int, pthread_cond_signal, pthread_cond_t *)
REAL(int, pthread_cond_broadcast, pthread_cond_t *)
REAL(int, pthread_rwlock_init, pthread_rwlock_t *, const pthread_rwlockattr_t *)
REAL(int, pthread_rwlock_destroy, pthread_rwlock_t *)
REAL(int, pthread_rwlock_rdlock, pthread_rwlock_t *)
REAL(int, pthread_rwlock_tryrdlock, pthread_rwlock_t *)
REAL(int, pthread_rwlock_timedrdlock, pthread_rwlock_t *, const struct timespec *)
REAL(int, pthread_rwlock_clockrdlock, pthread_rwlock_t *, clockid_t, const struct timespec *)
REAL(int, pthread_rwlock_wrlock, pthread_rwlock_t *)
REAL(int, pthread_rwlock_trywrlock, pthread_rwlock_t *)
REAL(int, pthread_rwlock_timedwrlock, pthread_rwlock_t *, const struct timespec *)
REAL(int, pthread_rwlock_clockwrlock, pthread_rwlock_t *, clockid_t, const struct timespec *)
REAL(int, pthread_rwlock_unlock, pthread_rwlock_t *)
REAL(int, pthread_barrier_init, pthread_barrier_t *, const pthread_barrierattr_t *, unsigned)
REAL(int, pthread_barrier_destroy, pthread_barrier_t *)
REAL(int, pthread_barrier_wait, pthread_barrier_t *)
REAL(int, pthread_spin_init, pthread_spinlock_t *, int)
REAL(int, pthread_spin_destroy, pthread_spinlock_t *)
REAL(int, pthread_spin_lock, pthread_spinlock_t *)
REAL(int, pthread_spin_trylock, pthread_spinlock_t *)
REAL(int, pthread_spin_unlock, pthread_spinlock_t *)
REAL(int, pthread_create, pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
REAL(int, sem_init, sem_t *, int, unsigned)
REAL(int, sem_destroy, sem_t *)
REAL(int, sem_post, sem_t *)
REAL(int, sem_wait, sem_t *)
REAL(int, sem_trywait, sem_t *)
REAL(int, sem_timedwait, sem_t *, const struct timespec *)
REAL(int, sem_clockwait, sem_t *, clockid_t, const struct timespec *)
REAL(int, sem_getvalue, sem_t *, int *)

/* Calls into glibc keep errno as glibc leaves it; ours never touch it (rt_futex saves it). */
#define CALL_REAL(name, ...) (get_##name()(__VA_ARGS__))

/* ---- mutex ---- */

/* The pthread object as pvrt's (the public calls) and as its layout (fields, inline paths). */
static inline pvrt_mutex_t *PM(pthread_mutex_t *m)
{
	return (pvrt_mutex_t *)(void *)m;
}
static inline lk_mutex_t *LM(pthread_mutex_t *m)
{
	return lk_mutex_of(PM(m));
}

/* PVRT_LOCKS=glibc (pvrt-run --locks=glibc): every call goes to glibc; only the thread placement
 * on emulated vCPUs remains, for comparisons under the emulator. Set by the constructor. */
static bool all_glibc;

/* The kind word, read once per call: the foreign test and the type test share the load. */
static inline int32_t mutex_kind(pthread_mutex_t *m)
{
	/* Relaxed: __kind is set at init, before the mutex is shared. */
	return __atomic_load_n(&LM(m)->kind, __ATOMIC_RELAXED);
}

static inline bool kind_foreign(int32_t kind)
{
	return lk_unlikely(all_glibc || (kind & GLIBC_MUTEX_FOREIGN));
}

static inline bool mutex_foreign(pthread_mutex_t *m)
{
	return kind_foreign(mutex_kind(m));
}

EXPORT int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *attr)
{
	int type = PTHREAD_MUTEX_DEFAULT, pshared = PTHREAD_PROCESS_PRIVATE;
	int robust = PTHREAD_MUTEX_STALLED, proto = PTHREAD_PRIO_NONE;
	if (attr) {
		pthread_mutexattr_gettype(attr, &type);
		pthread_mutexattr_getpshared(attr, &pshared);
		pthread_mutexattr_getrobust(attr, &robust);
		pthread_mutexattr_getprotocol(attr, &proto);
	}
	if (all_glibc || pshared != PTHREAD_PROCESS_PRIVATE || robust != PTHREAD_MUTEX_STALLED ||
	    proto != PTHREAD_PRIO_NONE)
		return CALL_REAL(pthread_mutex_init, m, attr);
	return -pvrt_mutex_init(PM(m), type);
}

EXPORT int pthread_mutex_destroy(pthread_mutex_t *m)
{
	if (mutex_foreign(m))
		return CALL_REAL(pthread_mutex_destroy, m);
	int r = pvrt_mutex_destroy(PM(m));
	if (r == 0)
		LM(m)->kind = -1; /* as glibc: later use goes to glibc, which says EINVAL */
	return -r;
}

EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
	int32_t kind = mutex_kind(m);
	if (kind_foreign(kind))
		return CALL_REAL(pthread_mutex_lock, m);
	return -lk_mutex_lock_kind(LM(m), kind); /* inline: mutex_fast.h */
}

EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
	if (mutex_foreign(m))
		return CALL_REAL(pthread_mutex_trylock, m);
	return -pvrt_mutex_trylock(PM(m));
}

EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abs)
{
	if (mutex_foreign(m))
		return CALL_REAL(pthread_mutex_timedlock, m, abs);
	return -pvrt_mutex_timedlock(PM(m), CLOCK_REALTIME, abs);
}

EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *abs)
{
	if (mutex_foreign(m))
		return CALL_REAL(pthread_mutex_clocklock, m, clk, abs);
	return -pvrt_mutex_timedlock(PM(m), clk, abs);
}

EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
	int32_t kind = mutex_kind(m);
	if (kind_foreign(kind))
		return CALL_REAL(pthread_mutex_unlock, m);
	if (lk_likely(kind_plain(kind)))
		return -lk_mutex_unlock_plain(LM(m)); /* inline: mutex_fast.h */
	return -pvrt_mutex_unlock(PM(m));
}

/* ---- condvar ---- */

/* The pthread object as pvrt's (the public calls) and as its layout (fields, inline paths). */
static inline pvrt_cond_t *PC(pthread_cond_t *c)
{
	return (pvrt_cond_t *)(void *)c;
}
static inline lk_cond_t *LC(pthread_cond_t *c)
{
	return lk_cond_of(PC(c));
}

static inline bool cond_foreign(pthread_cond_t *c)
{
	/* Relaxed: set at init, before the condvar is shared. */
	return lk_unlikely(all_glibc || (__atomic_load_n(&LC(c)->glibc_wrefs, __ATOMIC_RELAXED) &
					 GLIBC_COND_SHARED));
}

static int op_unlock(void *m)
{
	return -pthread_mutex_unlock(m);
}

static int op_lock(void *m)
{
	return -pthread_mutex_lock(m);
}

/* A cancellation point; in M:N mode, a ULT's cancellation acts before or after the wait. */
static int cond_wait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
		     const struct timespec *abs)
{
	if (lk_likely(!rt_mn_on))
		return -lk_cond_wait(LC(c), m, op_unlock, op_lock, clk, abs, true);
	bool cancellable = rt_mn_cancel_enter();
	return rt_mn_cancel_leave(
	    -lk_cond_wait(LC(c), m, op_unlock, op_lock, clk, abs, cancellable));
}

EXPORT int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *attr)
{
	int pshared = PTHREAD_PROCESS_PRIVATE;
	clockid_t clk = CLOCK_REALTIME;
	if (attr) {
		pthread_condattr_getpshared(attr, &pshared);
		pthread_condattr_getclock(attr, &clk);
	}
	if (all_glibc || pshared != PTHREAD_PROCESS_PRIVATE)
		return CALL_REAL(pthread_cond_init, c, attr);
	return -pvrt_cond_init(PC(c), clk);
}

EXPORT int pthread_cond_destroy(pthread_cond_t *c)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_destroy, c);
	return -pvrt_cond_destroy(PC(c));
}

EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_wait, c, m);
	return cond_wait(c, m, CLOCK_MONOTONIC, NULL);
}

EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abs)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_timedwait, c, m, abs);
	clockid_t clk =
	    __atomic_load_n(&LC(c)->clock, __ATOMIC_RELAXED) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
	return cond_wait(c, m, clk, abs);
}

EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
				  const struct timespec *abs)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_clockwait, c, m, clk, abs);
	if (!lk_valid_clock(clk))
		return EINVAL;
	return cond_wait(c, m, clk, abs);
}

EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_signal, c);
	return -pvrt_cond_signal(PC(c));
}

EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
	if (cond_foreign(c))
		return CALL_REAL(pthread_cond_broadcast, c);
	return -pvrt_cond_broadcast(PC(c));
}

/* ---- rwlock ---- */

/* The pthread object as pvrt's (the public calls) and as its layout (fields, inline paths). */
static inline pvrt_rwlock_t *PR(pthread_rwlock_t *rw)
{
	return (pvrt_rwlock_t *)(void *)rw;
}
static inline lk_rwlock_t *LR(pthread_rwlock_t *rw)
{
	return lk_rwlock_of(PR(rw));
}

static inline bool rw_foreign(pthread_rwlock_t *rw)
{
	/* Relaxed: set at init. */
	return lk_unlikely(all_glibc || __atomic_load_n(&LR(rw)->shared, __ATOMIC_RELAXED) != 0);
}

EXPORT int pthread_rwlock_init(pthread_rwlock_t *rw, const pthread_rwlockattr_t *attr)
{
	int pshared = PTHREAD_PROCESS_PRIVATE, pref = PTHREAD_RWLOCK_PREFER_READER_NP;
	if (attr) {
		pthread_rwlockattr_getpshared(attr, &pshared);
		pthread_rwlockattr_getkind_np(attr, &pref);
	}
	if (all_glibc || pshared != PTHREAD_PROCESS_PRIVATE)
		return CALL_REAL(pthread_rwlock_init, rw, attr);
	return -pvrt_rwlock_init(PR(rw), pref);
}

EXPORT int pthread_rwlock_destroy(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_destroy, rw);
	return -pvrt_rwlock_destroy(PR(rw));
}

EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_rdlock, rw);
	return -pvrt_rwlock_rdlock(PR(rw));
}

EXPORT int pthread_rwlock_tryrdlock(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_tryrdlock, rw);
	return -pvrt_rwlock_tryrdlock(PR(rw));
}

EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *rw, const struct timespec *abs)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_timedrdlock, rw, abs);
	return -pvrt_rwlock_timedrdlock(PR(rw), CLOCK_REALTIME, abs);
}

EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *rw, clockid_t clk,
				      const struct timespec *abs)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_clockrdlock, rw, clk, abs);
	return -pvrt_rwlock_timedrdlock(PR(rw), clk, abs);
}

EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_wrlock, rw);
	return -pvrt_rwlock_wrlock(PR(rw));
}

EXPORT int pthread_rwlock_trywrlock(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_trywrlock, rw);
	return -pvrt_rwlock_trywrlock(PR(rw));
}

EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *rw, const struct timespec *abs)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_timedwrlock, rw, abs);
	return -pvrt_rwlock_timedwrlock(PR(rw), CLOCK_REALTIME, abs);
}

EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *rw, clockid_t clk,
				      const struct timespec *abs)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_clockwrlock, rw, clk, abs);
	return -pvrt_rwlock_timedwrlock(PR(rw), clk, abs);
}

EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *rw)
{
	if (rw_foreign(rw))
		return CALL_REAL(pthread_rwlock_unlock, rw);
	return -pvrt_rwlock_unlock(PR(rw));
}

/* ---- spinlock ---- */

EXPORT int pthread_spin_init(pthread_spinlock_t *s, int pshared)
{
	if (all_glibc)
		return CALL_REAL(pthread_spin_init, s, pshared);
	/* pshared: glibc ignores it too; our parks are bounded (see spinlock.c). */
	return -pvrt_spin_init((pvrt_spinlock_t *)(void *)s);
}

EXPORT int pthread_spin_destroy(pthread_spinlock_t *s)
{
	if (all_glibc)
		return CALL_REAL(pthread_spin_destroy, s);
	return -pvrt_spin_destroy((pvrt_spinlock_t *)(void *)s);
}

EXPORT int pthread_spin_lock(pthread_spinlock_t *s)
{
	if (all_glibc)
		return CALL_REAL(pthread_spin_lock, s);
	return -pvrt_spin_lock((pvrt_spinlock_t *)(void *)s);
}

EXPORT int pthread_spin_trylock(pthread_spinlock_t *s)
{
	if (all_glibc)
		return CALL_REAL(pthread_spin_trylock, s);
	return -pvrt_spin_trylock((pvrt_spinlock_t *)(void *)s);
}

EXPORT int pthread_spin_unlock(pthread_spinlock_t *s)
{
	if (all_glibc)
		return CALL_REAL(pthread_spin_unlock, s);
	return -pvrt_spin_unlock((pvrt_spinlock_t *)(void *)s);
}

/* ---- barrier ---- */

/* The pthread object as pvrt's (the public calls) and as its layout (fields, inline paths). */
static inline pvrt_barrier_t *PB(pthread_barrier_t *b)
{
	return (pvrt_barrier_t *)(void *)b;
}
static inline lk_barrier_t *LB(pthread_barrier_t *b)
{
	return lk_barrier_of(PB(b));
}

static inline bool barrier_foreign(pthread_barrier_t *b)
{
	return lk_unlikely(all_glibc || __atomic_load_n(&LB(b)->shared, __ATOMIC_RELAXED) != 0);
}

EXPORT int pthread_barrier_init(pthread_barrier_t *b, const pthread_barrierattr_t *attr,
				unsigned count)
{
	int pshared = PTHREAD_PROCESS_PRIVATE;
	if (attr)
		pthread_barrierattr_getpshared(attr, &pshared);
	if (all_glibc || pshared != PTHREAD_PROCESS_PRIVATE)
		return CALL_REAL(pthread_barrier_init, b, attr, count);
	return -pvrt_barrier_init(PB(b), count);
}

EXPORT int pthread_barrier_destroy(pthread_barrier_t *b)
{
	if (barrier_foreign(b))
		return CALL_REAL(pthread_barrier_destroy, b);
	return -pvrt_barrier_destroy(PB(b));
}

EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
	if (barrier_foreign(b))
		return CALL_REAL(pthread_barrier_wait, b);
	int r = pvrt_barrier_wait(PB(b));
	return r == PVRT_BARRIER_SERIAL_THREAD ? PTHREAD_BARRIER_SERIAL_THREAD : -r;
}

/* ---- threads: attach application threads to emulated vCPUs ---- */

static pvhint_t *emu_handle; /* set when the hint source is the emulator */
static void *hint_lib_base;  /* threads libpvhint creates itself are not application threads */
static pthread_key_t detach_key;

struct start {
	void *(*fn)(void *);
	void *arg;
};

static void detach_at_exit(void *p)
{
	(void)p;
	pvhint_emu_detach(emu_handle);
}

static void attach_self(void)
{
	if (!emu_handle)
		return;
	if (pvhint_emu_attach_next(emu_handle) == 0)
		pthread_setspecific(detach_key, (void *)1);
}

static void *start_thread(void *p)
{
	struct start s = *(struct start *)p;
	free(p);
	attach_self();
	return s.fn(s.arg);
}

static void *self_base; /* threads the preload makes itself (workers) are kernel threads */
/* The address ranges of those two libraries (set at load: a lookup per pthread_create, dladdr,
 * cost more than the creation of a ULT). */
static uintptr_t own_lo[2], own_hi[2];

static int find_ranges(struct dl_phdr_info *in, size_t size, void *data)
{
	(void)size;
	(void)data;
	for (int k = 0; k < 2; k++) {
		void *base = k ? self_base : hint_lib_base;
		if (!base || (void *)in->dlpi_addr != base)
			continue;
		for (int i = 0; i < in->dlpi_phnum; i++) {
			const ElfW(Phdr) *ph = &in->dlpi_phdr[i];
			if (ph->p_type != PT_LOAD)
				continue;
			uintptr_t lo = in->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
			if (!own_lo[k] || lo < own_lo[k])
				own_lo[k] = lo;
			if (hi > own_hi[k])
				own_hi[k] = hi;
		}
	}
	return 0;
}

static bool called_from_hint_lib(void *ret)
{
	uintptr_t a = (uintptr_t)ret;
	return (a >= own_lo[0] && a < own_hi[0]) || (a >= own_lo[1] && a < own_hi[1]);
}

/*
 * A deferred hint source (hints_deferred) opens with the process's second thread, on a thread of
 * its own: where auto ends at the bpf source, opening takes tens of milliseconds (libbpf reads
 * the kernel's BTF in page-sized reads and the kernel verifies the program: 70 ms of wall time,
 * 50 of them system time, on these 2-vCPU guests), and the thread that called pthread_create
 * must not wait for it, nor the threads it creates, which start contending at once. The locks
 * read source none until the handle is published (common.c); hints are advisory, so that is
 * correct throughout. The opener runs at nice 10 with every signal blocked: it takes CPU time the
 * application leaves idle first, and the application's process-directed signals never land on
 * it. A fork while it opens leaves the child on source none (the opener does not exist there).
 * If the thread cannot be created, the caller opens the source itself, as before.
 */
static void *hints_opener(void *arg)
{
	(void)arg;
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
	lk_hints_open_claimed();
	return NULL;
}

static void hints_open_async(void)
{
	/* Acquire: pairs with the release that publishes the handle. */
	if (lk_likely(__atomic_load_n(&lk_hints_ptr, __ATOMIC_ACQUIRE) != NULL) ||
	    !lk_hints_claim())
		return;
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	int r = pthread_attr_init(&a);
	if (r == 0) {
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		/* The new thread inherits the mask. */
		pthread_sigmask(SIG_SETMASK, &all, &old);
		r = CALL_REAL(pthread_create, &t, &a, hints_opener, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
	}
	if (r != 0)
		lk_hints_open_claimed();
}

EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (__atomic_load_n(&rt_mn_on, __ATOMIC_ACQUIRE) &&
	    !called_from_hint_lib(__builtin_return_address(0)))
		return rt_mn_create(t, attr, fn, arg);
	if (called_from_hint_lib(__builtin_return_address(0)))
		return CALL_REAL(pthread_create, t, attr, fn, arg);
	/* A deferred hint source starts opening now, beside the threads that may contend (see
	 * hints_open_async); once open this is one load. glibc's locks read no hints. */
	if (!all_glibc)
		hints_open_async();
	if (!__atomic_load_n(&emu_handle, __ATOMIC_ACQUIRE))
		return CALL_REAL(pthread_create, t, attr, fn, arg);
	struct start *s = malloc(sizeof(*s));
	if (!s)
		return EAGAIN;
	s->fn = fn;
	s->arg = arg;
	int r = CALL_REAL(pthread_create, t, attr, start_thread, s);
	if (r)
		free(s);
	return r;
}

/* ---- load and exit ---- */

static void env_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *stats_file;
static bool stats_shared; /* forked children count into our region (lk_stats_share_with_children) */
static pid_t stats_loader; /* the process that loaded us and set the region up */

static void write_stats(void)
{
	if (!stats_file)
		return;
	int saved = errno;
	/* Shared counters (locks/stats.c): the loader reports a snapshot of everyone's; a forked
	 * child reports only what it counted after that snapshot, and nothing before it (the
	 * loader's report will include it). */
	int which = LK_SUM_ALL;
	if (stats_shared && getpid() == stats_loader) {
		lk_stats_snapshot();
		which = LK_SUM_REPORTED;
	} else if (stats_shared) {
		if (!lk_stats_snapshot_taken()) {
			errno = saved;
			return;
		}
		which = LK_SUM_OWN_UNREPORTED;
	}
	char buf[1024];
	size_t n = 0;
	for (int c = 0; c < PVRT_LOCK_NCLASSES; c++) {
		struct pvrt_lock_stats st;
		lk_stats_sum((enum pvrt_lock_class)c, which, &st);
		int k = snprintf(buf + n, sizeof(buf) - n, "%s %llu %llu %llu %llu %llu\n",
				 pvrt_lock_class_name((enum pvrt_lock_class)c),
				 (unsigned long long)st.acquisitions,
				 (unsigned long long)st.contended, (unsigned long long)st.spin_cut,
				 (unsigned long long)st.parks, (unsigned long long)st.handoffs);
		if (k < 0 || (size_t)k >= sizeof(buf) - n)
			break;
		n += (size_t)k;
	}
	/* Per worker, when ULTs run here (M:N mode): pvrt-run prints them as a second table. */
	unsigned nw = pvrt_nworkers();
	/* Sized by the workers there are (at most PVRT_MAX_WORKERS): this runs at exit on whatever
	 * stack called exit, a ULT's of 16 KiB perhaps. A line is at most 8 counts of 20 digits. */
	char rbuf[(nw ? nw : 1) * 176];
	size_t rn = 0;
	for (unsigned i = 0; i < nw; i++) {
		struct pvrt_stats ws;
		if (pvrt_stats_get_worker(i, &ws))
			break;
		int k = snprintf(
		    rbuf + rn, sizeof(rbuf) - rn, "worker%u %llu %llu %llu %llu %llu %llu %llu\n",
		    i, (unsigned long long)ws.switches, (unsigned long long)ws.steals,
		    (unsigned long long)ws.preemptions, (unsigned long long)ws.handoffs,
		    (unsigned long long)ws.ults_created, (unsigned long long)ws.lends,
		    (unsigned long long)ws.rescues);
		if (k < 0 || (size_t)k >= sizeof(rbuf) - rn)
			break;
		rn += (size_t)k;
	}
	/* Never through a symbolic link (it could point anywhere), never a FIFO or a device
	 * (O_NONBLOCK: opening a FIFO nobody reads must not hang the exit). */
	int fd = open(stats_file,
		      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
		close(fd);
		fd = -1;
		errno = EINVAL;
	}
	if (fd >= 0) {
		/* One write per process: lines of concurrent processes do not interleave. */
		struct iovec iov[2] = {{buf, n}, {rbuf, rn}};
		ssize_t w = writev(fd, iov, 2);
		(void)w;
		close(fd);
	} else {
		env_warn("PVRT_STATS_FILE='%.200s': cannot open: %s; statistics not written",
			 stats_file, strerror(errno));
	}
	errno = saved;
}

static void preload_atfork_child(void)
{
	/* The emulator's control thread does not survive fork: attaching a thread in the child
	 * could block it for ever on a vCPU that nobody resumes. Children run unemulated. */
	emu_handle = NULL;
}

/*
 * Bad settings in the environment. The preload has no caller to return an error to and must
 * not stop the program it was injected into, so it says once, on stderr, what it ignored and
 * what it does instead (locks/README.md, "Environment"). One write(2) of the whole line: lines
 * of concurrent processes do not interleave and stdio is not touched from the constructor.
 */
static void env_warn(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "libpvrt-preload: ");
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	n += k;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2; /* truncated by vsnprintf: still one line */
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}

/* PVRT_LOCKS: unset, empty or "pvrt" selects pvrt's locks, "glibc" glibc's; anything else is
 * reported and means pvrt (the value pvrt-run never sets, so a hand-written typo). */
static void parse_locks_env(void)
{
	const char *locks = secure_getenv("PVRT_LOCKS");
	if (!locks || !*locks || !strcmp(locks, "pvrt"))
		return;
	if (!strcmp(locks, "glibc")) {
		all_glibc = true;
		return;
	}
	env_warn("PVRT_LOCKS='%.64s' is not valid (accepted: pvrt, glibc, or unset); using pvrt",
		 locks);
}

/* PVRT_MN=1 (pvrt-run --mn): pthreads become ULTs (runtime/mn.c). A runtime that cannot start is
 * reported and the program runs in lock-only mode. */
static void start_mn(void)
{
	const char *mn = secure_getenv("PVRT_MN");
	if (!mn || !*mn || !strcmp(mn, "0"))
		return;
	if (strcmp(mn, "1")) {
		env_warn("PVRT_MN='%.64s' is not valid (accepted: 0, 1, or unset); M:N mode off",
			 mn);
		return;
	}
	if (all_glibc) {
		env_warn("PVRT_MN=1 needs pvrt's locks (PVRT_LOCKS=glibc given); M:N mode off");
		return;
	}
	const char *why = rt_mn_start();
	if (why)
		env_warn("PVRT_MN=1: cannot start the runtime (%s); M:N mode off", why);
}

/*
 * export= makes this process's emulator publish its page in a file. Programs it starts load the
 * preload again and would each open an emulator exporting to the same path: only this process,
 * the emulator's owner, exports. The key is cut out of the PVRT_EMU string in place, because
 * programs such as bash pass on the environment main() received, not a setenv() copy. Called
 * once the default handle is open, before any thread.
 */
static void drop_export_from_env(void)
{
	extern char **environ;
	for (char **ep = environ; ep && *ep; ep++) {
		if (strncmp(*ep, "PVRT_EMU=", 9))
			continue;
		char *w = *ep + 9, *r = w;
		bool first = true;
		while (*r) {
			size_t len = strcspn(r, ",");
			bool skip = !strncmp(r + strspn(r, " "), "export=", 7);
			if (!skip) {
				if (!first)
					*w++ = ',';
				memmove(w, r, len);
				w += len;
				first = false;
			}
			r += len;
			if (*r == ',')
				r++;
		}
		*w = 0;
	}
}

/*
 * Under source auto (the default) the hint source is opened when the process creates its second
 * thread (on a thread of its own: hints_open_async), or at its first contended lock, not at load:
 * where auto ends at the bpf source, opening loads a kernel program (`perf stat -e task-clock
 * pvrt-run --hints=bpf -- true`: 66-77 ms of CPU on these 2-vCPU guests, 3 ms with none;
 * pvhint/README.md), and a single-threaded process (a shell, a compiler, most of what a build runs
 * under pvrt-run) has no lock to contend on and must not pay that. An explicit source (emu: threads
 * attach from the start; or a bad value: said at once) opens here.
 */
static bool hints_deferred(void)
{
	const char *src = secure_getenv("PVRT_HINTS");
	return !src || !*src || !strcmp(src, "auto");
}

__attribute__((constructor)) static void preload_init(void)
{
	int saved = errno;
	pthread_atfork(NULL, NULL, preload_atfork_child);
	parse_locks_env();
	const char *sf = secure_getenv("PVRT_STATS_FILE");
	if (sf && *sf) {
		stats_file = strdup(sf);
		/* Before any counting. Failing that, each process writes its own counts at exit
		 * (forked children that leave with _exit are then missed). */
		stats_shared = lk_stats_share_with_children() == 0;
		stats_loader = getpid();
		pvrt_locks_stats_enable(true);
		atexit(write_stats);
	}
	Dl_info info;
	if (dladdr((void *)pvhint_header, &info))
		hint_lib_base = info.dli_fbase;
	if (dladdr((void *)preload_init, &info))
		self_base = info.dli_fbase;
	dl_iterate_phdr(find_ranges, NULL);
	pvhint_t *h = NULL;
	if (hints_deferred())
		; /* opened with the second thread (pthread_create) or at the first contention */
	else if (pvhint_default(&h) < 0) {
		/* A bad PVRT_HINTS or PVRT_EMU (libpvhint's message names the variable, the
		 * value and what it accepts): the locks then run on source none, as pvhint_default
		 * leaves them. */
		env_warn("%s; using hint source none", pvhint_errmsg());
		h = NULL;
	}
	drop_export_from_env();
	if (h && strcmp(pvhint_source_name(h), "emu") == 0) {
		pthread_key_create(&detach_key, detach_at_exit);
		/* Release: the handle is complete before pthread_create reads it. */
		__atomic_store_n(&emu_handle, h, __ATOMIC_RELEASE);
		attach_self();
	}
	start_mn();
	errno = saved;
}

/* ---- POSIX semaphores (M:N mode) ---- */

/*
 * A process-private semaphore made in M:N mode is a pvrt_sem_t at the start of the sem_t,
 * marked at byte 16 (glibc's sem_t is 32 bytes and glibc uses the first 16), so its waits are
 * ULT waits. Others (process-shared, sem_open, made before M:N started) stay glibc's.
 */
#define SEM_MARK 0x6d657376u /* "vsem" */
_Static_assert(sizeof(sem_t) >= 16 + sizeof(uint32_t), "sem_t size");
_Static_assert(sizeof(pvrt_sem_t) <= 16, "pvrt_sem_t fits in glibc's used part");

static inline uint32_t *sem_mark(sem_t *s)
{
	return (uint32_t *)(void *)((char *)s + 16);
}

static inline pvrt_sem_t *PS(sem_t *s)
{
	return __atomic_load_n(sem_mark(s), __ATOMIC_RELAXED) == SEM_MARK ? (pvrt_sem_t *)(void *)s
									  : NULL;
}

static int sem_ret(int r)
{
	if (!r)
		return 0;
	errno = -r;
	return -1;
}

EXPORT int sem_init(sem_t *s, int pshared, unsigned value)
{
	if (!rt_mn_on || pshared)
		return CALL_REAL(sem_init, s, pshared, value);
	memset(s, 0, sizeof(*s));
	int r = pvrt_sem_init((pvrt_sem_t *)(void *)s, value);
	if (!r)
		*sem_mark(s) = SEM_MARK;
	return sem_ret(r);
}

EXPORT int sem_destroy(sem_t *s)
{
	pvrt_sem_t *p = PS(s);
	if (!p)
		return CALL_REAL(sem_destroy, s);
	int r = pvrt_sem_destroy(p);
	if (!r)
		*sem_mark(s) = 0;
	return sem_ret(r);
}

EXPORT int sem_post(sem_t *s)
{
	pvrt_sem_t *p = PS(s);
	return p ? sem_ret(pvrt_sem_post(p)) : CALL_REAL(sem_post, s);
}

EXPORT int sem_trywait(sem_t *s)
{
	pvrt_sem_t *p = PS(s);
	return p ? sem_ret(pvrt_sem_trywait(p)) : CALL_REAL(sem_trywait, s);
}

EXPORT int sem_getvalue(sem_t *s, int *v)
{
	pvrt_sem_t *p = PS(s);
	return p ? sem_ret(pvrt_sem_getvalue(p, v)) : CALL_REAL(sem_getvalue, s, v);
}

/* A cancellation point in M:N mode, as the condvar wait. */
static int sem_wait_ult(pvrt_sem_t *p, clockid_t clk, const struct timespec *abs)
{
	bool cancellable = rt_mn_cancel_enter();
	return sem_ret(-rt_mn_cancel_leave(-lk_sem_wait(lk_sem_of(p), clk, abs, cancellable)));
}

EXPORT int sem_wait(sem_t *s)
{
	pvrt_sem_t *p = PS(s);
	return p ? sem_wait_ult(p, CLOCK_MONOTONIC, NULL) : CALL_REAL(sem_wait, s);
}

EXPORT int sem_timedwait(sem_t *s, const struct timespec *abs)
{
	pvrt_sem_t *p = PS(s);
	return p ? sem_wait_ult(p, CLOCK_REALTIME, abs) : CALL_REAL(sem_timedwait, s, abs);
}

EXPORT int sem_clockwait(sem_t *s, clockid_t clk, const struct timespec *abs)
{
	pvrt_sem_t *p = PS(s);
	if (!p)
		return CALL_REAL(sem_clockwait, s, clk, abs);
	if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)
		return sem_ret(-EINVAL);
	return sem_wait_ult(p, clk, abs);
}
