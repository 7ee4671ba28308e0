/* SPDX-License-Identifier: MIT */
/*
 * M:N mode of libpvrt-preload.so (linked into the preload only) (PVRT_MN=1, pvrt-run --mn): every
 * pthread of an unmodified program is a ULT with its own glibc TLS and thread descriptor
 * (runtime/tls.c). The preload's constructor starts the runtime; the main thread becomes the
 * primary ULT (it stays on worker 0, where it started). See runtime/MN.md for the design and the
 * compatibility table.
 *
 * pthread_t is the ULT's thread descriptor (TCB), exactly what glibc's pthread_self() returns
 * in it, so pthread_self, pthread_equal, keys (glibc's own, in the ULT's descriptor) and most
 * of glibc work unchanged; the calls below are the ones whose glibc versions would act on the
 * kernel thread instead of the ULT, or block the worker in the kernel.
 *
 * Thread exit runs through glibc: the ULT's entry registers a cancellation buffer as glibc's
 * start_thread does (__pthread_register_cancel), so glibc's own pthread_exit unwinds the ULT's
 * stack (C++ destructors, pthread_cleanup_push handlers) and lands back in the entry, which
 * returns the exit value to the runtime.
 */
#define _GNU_SOURCE
#include "mn.h"

#include <pvrt/cond.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

bool rt_mn_on;

REALFN(int, pthread_join, pthread_t, void **)
REALFN(int, pthread_tryjoin_np, pthread_t, void **)
REALFN(int, pthread_timedjoin_np, pthread_t, void **, const struct timespec *)
REALFN(int, pthread_clockjoin_np, pthread_t, void **, clockid_t, const struct timespec *)
REALFN(int, pthread_detach, pthread_t)
REALFN(void, pthread_exit, void *)
REALFN(int, pthread_cancel, pthread_t)
REALFN(void, pthread_testcancel, void)
REALFN(int, pthread_setcancelstate, int, int *)
REALFN(int, pthread_setcanceltype, int, int *)
REALFN(int, pthread_once, pthread_once_t *, void (*)(void))
REALFN(int, pthread_getattr_np, pthread_t, pthread_attr_t *)
REALFN(int, pthread_setname_np, pthread_t, const char *)
REALFN(int, pthread_getname_np, pthread_t, char *, size_t)
REALFN(int, pthread_setaffinity_np, pthread_t, size_t, const cpu_set_t *)
REALFN(int, pthread_getaffinity_np, pthread_t, size_t, cpu_set_t *)
REALFN(int, pthread_setschedparam, pthread_t, int, const struct sched_param *)
REALFN(int, pthread_setschedprio, pthread_t, int)
REALFN(int, pthread_sigmask, int, const sigset_t *, sigset_t *)
REALFN(int, sigprocmask, int, const sigset_t *, sigset_t *)
REALFN(int, sched_yield, void)
REALFN(int, sched_getcpu, void)
REALFN(int, sched_getaffinity, pid_t, size_t, cpu_set_t *)
REALFN(int, sched_setaffinity, pid_t, size_t, const cpu_set_t *)
REALFN(unsigned, sleep, unsigned)
REALFN(int, usleep, useconds_t)
REALFN(int, nanosleep, const struct timespec *, struct timespec *)
REALFN(int, clock_nanosleep, clockid_t, int, const struct timespec *, struct timespec *)

/* The ULT behind a pthread_t: a ULT's own TCB, or the main thread's for the primary. */
static struct pvrt_ult *ult_of(pthread_t t)
{
	if (!rt_mn_on)
		return NULL;
	/* The main thread's TCB (pvrt_init; no primary yet while it starts). */
	struct pvrt_ult *p = rt_state.primary;
	if (p && (void *)t == p->tp)
		return p;
	return rt_tls_ult_of((const void *)t);
}

/* ---------------------------------------------------------------- start and exit */

/* Per ULT (its own TLS): pthread_exit's value, the cancellation state and type. */
static __thread void *exit_value;
static __thread int cancel_disabled;

static void *entry(void *(*fn)(void *), void *arg)
{
	__pthread_unwind_buf_t ub;
	/* As glibc's start_thread: glibc's pthread_exit and cancellation unwind to here. */
	if (__sigsetjmp_cancel(ub.__cancel_jmp_buf, 0) == 0) {
		__pthread_register_cancel(&ub);
		return fn(arg);
	}
	return exit_value;
}

/* The main thread leaves with pthread_exit: the process lives on until every other ULT has
 * exited, then exits with status 0, as glibc's last thread does. (Main's own stack is not
 * unwound: worker 0's kernel thread must stay.) */
__attribute__((noreturn)) static void primary_exit(void)
{
	/* Gone, for signals too: a signal every other thread blocks must not be taken by threads
	 * without a ULT on main's account (runtime/sigmask.c counts main's mask until it exits).
	 * Its mask comes back for the atexit handlers. */
	uint64_t all = ~(uint64_t)0, old = 0;
	if (rt_state.ult_tls)
		rt_ult_sigmask(SIG_SETMASK, &all, &old);
	rt_wait_nlive_zero();
	if (rt_state.ult_tls)
		rt_ult_sigmask(SIG_SETMASK, &old, NULL);
	exit(0);
}

EXPORT void pthread_exit(void *v)
{
	struct pvrt_ult *u = self_ult();
	if (u && (u->flags & ULT_F_PRIMARY))
		primary_exit();
	if (u)
		exit_value = v;
	get_real_pthread_exit()(v);
	__builtin_unreachable();
}

/* ---------------------------------------------------------------- create, join, detach */

static size_t default_stack; /* glibc's default thread stack size */

int rt_mn_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.stack_size = default_stack;
	int detached = PTHREAD_CREATE_JOINABLE;
	if (attr) {
		void *addr = NULL;
		size_t sz = 0;
		/* glibc reports (stackaddr - size, size), with stackaddr NULL when none was set. */
		if (pthread_attr_getstack(attr, &addr, &sz) == 0 && (uintptr_t)addr + sz != 0)
			return ENOTSUP; /* application-provided stacks: refused (MN.md) */
		if (pthread_attr_getstacksize(attr, &sz) == 0 && sz)
			a.stack_size = sz < PVRT_STACK_MIN ? PVRT_STACK_MIN : sz;
		size_t g = 0;
		if (pthread_attr_getguardsize(attr, &g) == 0)
			a.guard_size = g ? g : 1; /* 0: glibc's "no guard"; we keep one page */
		pthread_attr_getdetachstate(attr, &detached);
	}
	pvrt_thread_t u;
	/* Joinable at first even when detached: the handle keeps the descriptor (and its TCB) alive
	 * until *t is written. */
	int r = pvrt_thread_create(&u, &a, fn, arg);
	if (r)
		return r == -ENOMEM ? EAGAIN : -r;
	*t = (pthread_t)u->tp;
	if (detached == PTHREAD_CREATE_DETACHED)
		pvrt_thread_detach(u);
	return 0;
}

/* Act on a pending cancellation at a cancellation point of the calling ULT. */
static void testcancel(struct pvrt_ult *u)
{
	if (unlikely(__atomic_load_n(&u->cancel, __ATOMIC_ACQUIRE)) && !cancel_disabled) {
		cancel_disabled = 1;
		pthread_exit(PTHREAD_CANCELED);
	}
}

/* join with an optional deadline (clk, abs) or none at all (try). */
static int join(struct pvrt_ult *t, void **ret, bool try, clockid_t clk, const struct timespec *abs)
{
	struct pvrt_ult *self = rt_ult_current();
	if (t == self)
		return EDEADLK;
	if (t->flags & (ULT_F_DETACHED | ULT_F_PRIMARY))
		return EINVAL;
	if (abs && (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000))
		return EINVAL;
	if (self) {
		testcancel(self);
		/* Still queued and ready? Run it now rather than block and wait for it. */
		if (!try && __atomic_load_n(&t->join, __ATOMIC_ACQUIRE) != 1)
			rt_ult_try_yield_to(t);
	}
	for (;;) {
		/* Acquire pairs with the exiting ULT's exchange: its result is visible. */
		uint32_t j = __atomic_load_n(&t->join, __ATOMIC_ACQUIRE);
		if (j == 1)
			break;
		if (try)
			return EBUSY;
		if (j == 0 && !__atomic_compare_exchange_n(&t->join, &j, 2, 0, __ATOMIC_RELAXED,
							   __ATOMIC_RELAXED))
			continue;
		int r = self && !cancel_disabled ? rt_futex_wait_cancel(&t->join, 2, clk, abs)
						 : rt_futex_wait(&t->join, 2, clk, abs);
		if (self)
			testcancel(self);
		if (r == -ETIMEDOUT && __atomic_load_n(&t->join, __ATOMIC_ACQUIRE) != 1)
			return ETIMEDOUT;
	}
	return -pvrt_thread_join(t, ret);
}

EXPORT int pthread_join(pthread_t t, void **ret)
{
	struct pvrt_ult *u = ult_of(t);
	return u ? join(u, ret, false, CLOCK_MONOTONIC, NULL) : REAL(pthread_join, t, ret);
}

EXPORT int pthread_tryjoin_np(pthread_t t, void **ret)
{
	struct pvrt_ult *u = ult_of(t);
	return u ? join(u, ret, true, CLOCK_MONOTONIC, NULL) : REAL(pthread_tryjoin_np, t, ret);
}

EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *abs)
{
	struct pvrt_ult *u = ult_of(t);
	return u ? join(u, ret, false, CLOCK_REALTIME, abs)
		 : REAL(pthread_timedjoin_np, t, ret, abs);
}

EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t clk, const struct timespec *abs)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u)
		return REAL(pthread_clockjoin_np, t, ret, clk, abs);
	if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)
		return EINVAL;
	return join(u, ret, false, clk, abs);
}

EXPORT int pthread_detach(pthread_t t)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u)
		return REAL(pthread_detach, t);
	return -pvrt_thread_detach(u);
}

/* ---------------------------------------------------------------- cancellation */

EXPORT int pthread_cancel(pthread_t t)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u)
		return REAL(pthread_cancel, t);
	/* Seq_cst, then wait_addr: against a ULT entering a cancellable wait, which publishes
	 * wait_addr and then reads the word (futex.c, ult_wait). */
	if (__atomic_exchange_n(&u->cancel, 1, __ATOMIC_SEQ_CST))
		return 0;
	/* A sleeper waits on u->cancel itself; any other cancellable wait (condvar, semaphore,
	 * join) is woken through its address, and its next rt_futex_wait_cancel returns
	 * -ECANCELED. Other waiters on that address get a spurious wake-up: every pvrt wait
	 * loops on its condition. Only the address is used: nothing is dereferenced. */
	rt_futex_wake(&u->cancel, INT_MAX);
	const void *wa = __atomic_load_n(&u->wait_addr, __ATOMIC_SEQ_CST);
	if (wa)
		rt_futex_wake((uint32_t *)(uintptr_t)wa, INT_MAX);
	return 0;
}

EXPORT void pthread_testcancel(void)
{
	struct pvrt_ult *u = self_ult();
	if (!u) {
		REAL(pthread_testcancel);
		return;
	}
	testcancel(u);
}

EXPORT int pthread_setcancelstate(int state, int *old)
{
	if (!self_ult())
		return REAL(pthread_setcancelstate, state, old);
	if (state != PTHREAD_CANCEL_ENABLE && state != PTHREAD_CANCEL_DISABLE)
		return EINVAL;
	if (old)
		*old = cancel_disabled ? PTHREAD_CANCEL_DISABLE : PTHREAD_CANCEL_ENABLE;
	cancel_disabled = state == PTHREAD_CANCEL_DISABLE;
	return 0;
}

EXPORT int pthread_setcanceltype(int type, int *old)
{
	if (!self_ult())
		return REAL(pthread_setcanceltype, type, old);
	if (type != PTHREAD_CANCEL_DEFERRED && type != PTHREAD_CANCEL_ASYNCHRONOUS)
		return EINVAL;
	if (old)
		*old = PTHREAD_CANCEL_DEFERRED;
	/* A ULT can only be cancelled where it calls the runtime (MN.md). */
	return type == PTHREAD_CANCEL_ASYNCHRONOUS ? ENOTSUP : 0;
}

/* Condvar and semaphore waits (preload.c): cancellation points. */
bool rt_mn_cancel_enter(void)
{
	struct pvrt_ult *u = self_ult();
	if (!u)
		return true;
	testcancel(u);
	return !cancel_disabled;
}

int rt_mn_cancel_leave(int r)
{
	struct pvrt_ult *u = self_ult();
	/* ECANCELED only comes from a cancellable wait of a ULT: testcancel acts. A wait that
	 * returned otherwise (it may have consumed a signal or a post) leaves the cancel pending
	 * for the next cancellation point, as glibc's does. */
	if (u && r == ECANCELED)
		testcancel(u);
	return r == ECANCELED ? 0 : r;
}

/* ---------------------------------------------------------------- once */

/* glibc's encoding (nptl/pthread_once.c): 0 not run, 1 in progress, 2 done; so a once run
 * before M:N started stays done. Waiters wait as ULTs. */
#define ONCE_INPROGRESS 1
#define ONCE_DONE	2

static void once_abandon(void *p)
{
	/* The initialiser was cancelled: let another caller run it. */
	__atomic_store_n((uint32_t *)p, 0, __ATOMIC_RELEASE);
	rt_futex_wake(p, INT_MAX);
}

EXPORT int pthread_once(pthread_once_t *o, void (*fn)(void))
{
	uint32_t *w = (uint32_t *)(void *)o;
	/* Acquire: the initialiser's effects are visible once we see DONE. */
	uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	if (likely(v == ONCE_DONE))
		return 0;
	if (!rt_mn_on)
		return REAL(pthread_once, o, fn);
	for (;;) {
		if (v == ONCE_DONE)
			return 0;
		if (v == 0) {
			if (!__atomic_compare_exchange_n(w, &v, ONCE_INPROGRESS, 0,
							 __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
				continue;
			pthread_cleanup_push(once_abandon, w);
			fn();
			pthread_cleanup_pop(0);
			__atomic_store_n(w, ONCE_DONE, __ATOMIC_RELEASE);
			rt_futex_wake(w, INT_MAX);
			return 0;
		}
		rt_futex_wait(w, v, CLOCK_MONOTONIC, NULL);
		v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	}
}

/* ---------------------------------------------------------------- attributes, names */

EXPORT int pthread_getattr_np(pthread_t t, pthread_attr_t *attr)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u || (u->flags & ULT_F_PRIMARY))
		return REAL(pthread_getattr_np, t, attr);
	int r = pthread_attr_init(attr);
	if (r)
		return r;
	/* The usable stack: between the guard and the TLS at the top (see tls.c). */
	char *lo = (char *)u->stack + u->guard;
	size_t sz = (size_t)((char *)u->stack_top - lo); /* set at create, before any run */
	pthread_attr_setstack(attr, lo, sz);
	pthread_attr_setguardsize(attr, u->guard);
	pthread_attr_setdetachstate(attr, (u->flags & ULT_F_DETACHED) ? PTHREAD_CREATE_DETACHED
								      : PTHREAD_CREATE_JOINABLE);
	return 0;
}

EXPORT int pthread_setname_np(pthread_t t, const char *name)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u)
		return REAL(pthread_setname_np, t, name);
	size_t n = strlen(name);
	if (n >= sizeof(u->name))
		return ERANGE;
	memcpy(u->name, name, n + 1);
	u->name_id = u->id; /* a reused descriptor's old name is not this ULT's */
	return 0;
}

EXPORT int pthread_getname_np(pthread_t t, char *buf, size_t len)
{
	struct pvrt_ult *u = ult_of(t);
	if (!u)
		return REAL(pthread_getname_np, t, buf, len);
	size_t n = u->name_id == u->id ? strnlen(u->name, sizeof(u->name) - 1) : 0;
	if (len < n + 1)
		return ERANGE;
	memcpy(buf, u->name, n);
	buf[n] = 0;
	return 0;
}

/* Per-ULT placement and priorities are the scheduler's: refused (they would change the
 * worker's kernel thread). */
EXPORT int pthread_setaffinity_np(pthread_t t, size_t n, const cpu_set_t *set)
{
	if (!ult_of(t))
		return REAL(pthread_setaffinity_np, t, n, set);
	return ENOTSUP;
}

static cpu_set_t process_cpus; /* the affinity at start: where the workers run */

/* The process's CPUs at start into set (n bytes), as the kernel reports a mask: EINVAL when a
 * CPU of it does not fit, the rest of the buffer zeroed. */
static int report_cpus(size_t n, cpu_set_t *set)
{
	size_t have = 0; /* bytes up to the highest CPU of the mask */
	for (size_t c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &process_cpus))
			have = c / 8 + 1;
	if (!set || n < have)
		return EINVAL;
	memset(set, 0, n);
	memcpy(set, &process_cpus, n < sizeof(process_cpus) ? n : sizeof(process_cpus));
	return 0;
}

/* A ULT's kernel thread is its worker's, pinned to one CPU; the ULT itself may run on any
 * worker, so it reports the CPUs the program started on (libgomp and OpenBLAS size their thread
 * pools from this). */
EXPORT int pthread_getaffinity_np(pthread_t t, size_t n, cpu_set_t *set)
{
	if (!ult_of(t))
		return REAL(pthread_getaffinity_np, t, n, set);
	return report_cpus(n, set);
}

/* The calling thread asked by pid: 0, its (worker's) tid, or the process. */
static bool is_self(pid_t pid)
{
	return pid == 0 || pid == getpid() || pid == gettid();
}

/* The same for the calling thread asked by pid. */
EXPORT int sched_getaffinity(pid_t pid, size_t n, cpu_set_t *set)
{
	if (!self_ult() || !is_self(pid))
		return REAL(sched_getaffinity, pid, n, set);
	int r = report_cpus(n, set);
	if (r) {
		errno = r;
		return -1;
	}
	return 0;
}

/* A ULT setting its own affinity (taskset before it execs, a program narrowing itself) sets
 * what the process's ULTs report and what the programs they start inherit; the workers stay on
 * their CPUs (placement is the scheduler's). */
EXPORT int sched_setaffinity(pid_t pid, size_t n, const cpu_set_t *set)
{
	if (!self_ult() || !is_self(pid))
		return REAL(sched_setaffinity, pid, n, set);
	cpu_set_t s;
	CPU_ZERO(&s);
	memcpy(&s, set, n < sizeof(s) ? n : sizeof(s));
	for (size_t c = sizeof(s) * 8; c < n * 8; c++)
		if (CPU_ISSET_S(c, n, set)) {
			errno = EINVAL; /* beyond CPU_SETSIZE: no such CPU here */
			return -1;
		}
	/* The kernel's check, roughly: some CPU of the set exists. */
	int ncpu = get_nprocs_conf();
	for (int c = ncpu; c < CPU_SETSIZE; c++)
		CPU_CLR(c, &s);
	if (!CPU_COUNT(&s)) {
		errno = EINVAL;
		return -1;
	}
	process_cpus = s;
	return 0;
}

void rt_mn_spawn_enter(struct rt_mn_spawn *s)
{
	s->on = false;
	if (!self_ult())
		return;
	int e = errno;
	sigset_t pre;
	sigemptyset(&pre);
	if (rt_state.preempt_sig)
		sigaddset(&pre, rt_state.preempt_sig);
	/* Raw: the ULT's recorded mask stays as it is (the thread's only changes until leave);
	 * a switch meanwhile (a contended lock in the call) must not take the thread's mask for
	 * the record, so the loaded-mask word says unknown, once the signal is blocked (no
	 * preemption reloads it before). No runtime entry: a vfork child runs this on its
	 * parent's memory and thread pointer. */
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, &pre, &s->mask, _NSIG / 8);
	rt_ult_sigmask_unknown();
	CPU_ZERO(&s->cpus);
	if (syscall(SYS_sched_getaffinity, 0, sizeof(s->cpus), &s->cpus) > 0)
		syscall(SYS_sched_setaffinity, 0, sizeof(process_cpus), &process_cpus);
	s->on = true;
	errno = e;
}

void rt_mn_spawn_leave(const struct rt_mn_spawn *s)
{
	if (!s->on)
		return;
	int e = errno;
	if (CPU_COUNT(&s->cpus))
		syscall(SYS_sched_setaffinity, 0, sizeof(s->cpus), &s->cpus);
	rt_ult_sigmask_unknown();
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &s->mask, NULL, _NSIG / 8);
	errno = e;
}

EXPORT int pthread_setschedparam(pthread_t t, int policy, const struct sched_param *p)
{
	if (!ult_of(t))
		return REAL(pthread_setschedparam, t, policy, p);
	return ENOTSUP;
}

EXPORT int pthread_setschedprio(pthread_t t, int prio)
{
	if (!ult_of(t))
		return REAL(pthread_setschedprio, t, prio);
	return ENOTSUP;
}

/* ---------------------------------------------------------------- signal masks */

/*
 * A ULT's mask is its own: loaded on its worker whenever it runs there (ult.c, rt_ult_sigmask).
 * The preemption signal is the runtime's, as glibc's SIGCANCEL is glibc's: a program that blocks
 * every signal (a thread that leaves signals to a sigwait thread) must still be preemptible, so
 * it is taken out of what the program blocks or sets.
 */
static const sigset_t *without_preempt(int how, const sigset_t *set, sigset_t *tmp)
{
	int sig = rt_state.preempt_sig;
	if (!set || how == SIG_UNBLOCK || !sig || !sigismember(set, sig))
		return set;
	*tmp = *set;
	sigdelset(tmp, sig);
	return tmp;
}

static int ult_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	uint64_t s = 0, o;
	if (set)
		memcpy(&s, set, sizeof(s));
	int r = rt_ult_sigmask(how, set ? &s : NULL, old ? &o : NULL);
	if (!r && old) {
		sigemptyset(old);
		memcpy(old, &o, sizeof(o));
	}
	return r;
}

EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t tmp;
	if (!self_ult() || !rt_state.ult_tls)
		return REAL(pthread_sigmask, how, without_preempt(how, set, &tmp), old);
	return ult_sigmask(how, set, old);
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t tmp;
	if (!self_ult() || !rt_state.ult_tls)
		return REAL(sigprocmask, how, without_preempt(how, set, &tmp), old);
	int r = ult_sigmask(how, set, old);
	if (r) {
		errno = r;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- non-local jumps */

/*
 * siglongjmp restores the mask sigsetjmp saved with a system call of glibc's own, not through
 * sigprocmask (longjmp and _longjmp are the same function in glibc; __longjmp_chk is
 * _FORTIFY_SOURCE's): the ULT's record follows the jump here, before it is made
 * (rt_ult_sigmask_jump). The C names differ from the symbols they define: with
 * _FORTIFY_SOURCE, <setjmp.h> renames longjmp to __longjmp_chk. The real functions are looked
 * up when the preload is loaded: a jump out of a signal handler must not be the first call,
 * which would run dlsym inside the handler.
 */
typedef void (*jump_fn)(struct __jmp_buf_tag *, int);
static jump_fn real_siglongjmp, real_longjmp_chk;

__attribute__((constructor)) static void jumps_init(void)
{
	real_siglongjmp = (jump_fn)dlsym(RTLD_NEXT, "siglongjmp");
	real_longjmp_chk = (jump_fn)dlsym(RTLD_NEXT, "__longjmp_chk");
}

static inline void jump_mask(const struct __jmp_buf_tag *env)
{
	if (unlikely(env->__mask_was_saved) && rt_state.ult_tls && self_ult()) {
		uint64_t m;
		memcpy(&m, &env->__saved_mask, sizeof(m));
		rt_ult_sigmask_jump(m);
	}
}

EXPORT __attribute__((noreturn)) void mn_siglongjmp(struct __jmp_buf_tag *env,
						    int val) __asm__("siglongjmp");
EXPORT __attribute__((noreturn)) void mn_longjmp(struct __jmp_buf_tag *env,
						 int val) __asm__("longjmp");
EXPORT __attribute__((noreturn)) void mn__longjmp(struct __jmp_buf_tag *env,
						  int val) __asm__("_longjmp");
EXPORT __attribute__((noreturn)) void mn_longjmp_chk(struct __jmp_buf_tag *env,
						     int val) __asm__("__longjmp_chk");

void mn_siglongjmp(struct __jmp_buf_tag *env, int val)
{
	jump_mask(env);
	if (unlikely(!real_siglongjmp)) /* a constructor that ran before the preload's */
		jumps_init();
	real_siglongjmp(env, val);
	__builtin_unreachable();
}

void mn_longjmp(struct __jmp_buf_tag *env, int val)
{
	mn_siglongjmp(env, val);
}

void mn__longjmp(struct __jmp_buf_tag *env, int val)
{
	mn_siglongjmp(env, val);
}

void mn_longjmp_chk(struct __jmp_buf_tag *env, int val)
{
	jump_mask(env);
	if (unlikely(!real_longjmp_chk))
		jumps_init();
	real_longjmp_chk(env, val);
	__builtin_unreachable();
}

/* ---------------------------------------------------------------- yield, CPU, sleep */

EXPORT int sched_yield(void)
{
	if (!self_ult())
		return REAL(sched_yield);
	pvrt_thread_yield();
	return 0;
}

EXPORT int sched_getcpu(void)
{
	/* With thread slots (bpf hints) a worker's record number is no CPU number; its thread is
	 * pinned to the worker's CPU. */
	if (!self_ult() || rt_state.slots)
		return REAL(sched_getcpu);
	return rt_worker_vcpu();
}

/* Sleep until abs on clk: a ULT wait on its own cancel word (pthread_cancel wakes it). */
static void ult_sleep(struct pvrt_ult *u, clockid_t clk, const struct timespec *abs)
{
	testcancel(u);
	while (rt_futex_wait(&u->cancel, 0, clk, abs) == 0)
		;
	testcancel(u);
}

static void deadline(struct timespec *out, const struct timespec *rel)
{
	clock_gettime(CLOCK_MONOTONIC, out);
	out->tv_sec += rel->tv_sec;
	out->tv_nsec += rel->tv_nsec;
	if (out->tv_nsec >= 1000000000) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000;
	}
}

EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
			   struct timespec *rem)
{
	struct pvrt_ult *u = self_ult();
	if (!u || (clk != CLOCK_MONOTONIC && clk != CLOCK_REALTIME))
		return REAL(clock_nanosleep, clk, flags, req, rem);
	if (req->tv_nsec < 0 || req->tv_nsec >= 1000000000 || req->tv_sec < 0)
		return EINVAL;
	struct timespec abs;
	if (flags & TIMER_ABSTIME) {
		abs = *req;
	} else {
		deadline(&abs, req);
		clk = CLOCK_MONOTONIC;
	}
	ult_sleep(u, clk, &abs);
	return 0;
}

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
	if (!self_ult())
		return REAL(nanosleep, req, rem);
	int r = clock_nanosleep(CLOCK_MONOTONIC, 0, req, rem);
	if (r) {
		errno = r;
		return -1;
	}
	return 0;
}

EXPORT int usleep(useconds_t us)
{
	if (!self_ult())
		return REAL(usleep, us);
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
	return nanosleep(&ts, NULL);
}

EXPORT unsigned sleep(unsigned s)
{
	if (!self_ult())
		return REAL(sleep, s);
	struct timespec ts = {(time_t)s, 0};
	nanosleep(&ts, NULL);
	return 0;
}

/* ---------------------------------------------------------------- start, fork */

static int start_runtime(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.ult_tls = 1;
	if (!getenv("PVRT_STACK_SIZE"))
		c.stack_size = default_stack;
	rt_ult_entry_wrap = entry;
	return pvrt_init(&c);
}

static void atfork_child(void)
{
	/* Only the forking thread (ULT) exists: it becomes the primary of a new runtime. */
	rt_fork_child_reset();
	rt_mn_signal_atfork_child();
	if (start_runtime())
		rt_mn_on = false; /* no runtime: threads of the child are kernel threads */
}

const char *rt_mn_start(void)
{
	pthread_attr_t a;
	size_t st = 0;
	if (pthread_getattr_default_np(&a) == 0) {
		pthread_attr_getstacksize(&a, &st);
		pthread_attr_destroy(&a);
	}
	default_stack = st >= PVRT_STACK_MIN && st <= PVRT_STACK_MAX ? st : 8u << 20;
	REAL(sched_getaffinity, 0, sizeof(process_cpus), &process_cpus);
	if (start_runtime())
		return pvrt_errmsg();
	pthread_atfork(NULL, NULL, atfork_child);
	/* Release: pthread_create in other (foreign) threads sees the runtime. */
	__atomic_store_n(&rt_mn_on, true, __ATOMIC_RELEASE);
	rt_mn_signal_start();
	return NULL;
}
