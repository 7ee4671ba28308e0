/* SPDX-License-Identifier: MIT */
/*
 * pvrt's OS layer: the few kernel and CPU services every part needs, written once (the shape of
 * Argobots' abtd_futex.h and liburcu's urcu/futex.h).
 *
 * Who may include it: the libraries' own sources (pvhint/, runtime/, sched/, locks/, the preload)
 * and pvrt's tests and benchmarks. Never a public header (include/pvrt/), never an installed file:
 * it is private and may change at any time. It depends on nothing of pvrt, so pvhint, the lowest
 * library, can use it too.
 *
 * Names carry the os_ prefix: internal, off the public pvrt_ prefix (and static inline: no
 * symbols).
 *
 * The errno rule, for every function here: results come back as 0 (or a count) or a negative
 * errno, and errno itself is never changed. Callers include interposed pthread functions and
 * signal handlers, whose callers must see errno as they left it.
 */
#ifndef PVRT_OS_H
#define PVRT_OS_H

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- signals ---- */

/* Queue signal sig to thread tid of this process with 'cookie' as its value, so that the handler
 * can tell the library's signal from anyone else's (si_code SI_QUEUE: negative, so allowed
 * between threads of one process). 0 or -errno; errno untouched. */
static inline int os_signal_thread(pid_t tid, int sig, const void *cookie)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_ptr = (void *)cookie;
	int saved = errno;
	long r = syscall(SYS_rt_tgsigqueueinfo, getpid(), tid, sig, &si);
	int err = r ? errno : 0;
	errno = saved;
	return -err;
}

/* ---- futex (private, i.e. process-local words) ---- */

static inline int os_futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts,
			   uint32_t val3)
{
	int saved = errno;
	long r = syscall(SYS_futex, addr, op | FUTEX_PRIVATE_FLAG, val, ts, NULL, val3);
	int err = r >= 0 ? 0 : errno;
	errno = saved;
	return err ? -err : (int)r;
}

/* Sleep while *addr == val, at most 'rel' (NULL: no limit). 0 when woken (or spuriously),
 * -EAGAIN (*addr != val), -ETIMEDOUT, -EINTR. */
static inline int os_futex_wait(uint32_t *addr, uint32_t val, const struct timespec *rel)
{
	return os_futex(addr, FUTEX_WAIT, val, rel, 0);
}

/* Sleep while *addr == val, until the absolute time 'abs' on clk (CLOCK_MONOTONIC or
 * CLOCK_REALTIME; NULL: no limit), with the bits 'bits' (non-zero): only a wake whose bits
 * meet them (os_futex_wake_bits) or one of os_futex_wake reaches this sleeper. Results as
 * os_futex_wait; -EINVAL for a bad 'abs'. */
static inline int os_futex_wait_bits(uint32_t *addr, uint32_t val, clockid_t clk,
				     const struct timespec *abs, uint32_t bits)
{
	int op = FUTEX_WAIT_BITSET | (clk == CLOCK_REALTIME ? FUTEX_CLOCK_REALTIME : 0);
	return os_futex(addr, op, val, abs, bits);
}

/* os_futex_wait_bits with every bit: any wake reaches it. */
static inline int os_futex_wait_abs(uint32_t *addr, uint32_t val, clockid_t clk,
				    const struct timespec *abs)
{
	return os_futex_wait_bits(addr, val, clk, abs, FUTEX_BITSET_MATCH_ANY);
}

/* Wake up to n sleepers on addr (INT32_MAX: all); returns how many were woken. */
static inline int os_futex_wake(uint32_t *addr, int n)
{
	return os_futex(addr, FUTEX_WAKE, (uint32_t)n, NULL, 0);
}

/* Wake up to n sleepers on addr whose bits meet 'bits', oldest first; returns how many. */
static inline int os_futex_wake_bits(uint32_t *addr, int n, uint32_t bits)
{
	return os_futex(addr, FUTEX_WAKE_BITSET, (uint32_t)n, NULL, bits);
}

/* ---- time ---- */

#define OS_NS_PER_SEC 1000000000ull

/* Clock clk in ns (through the vDSO for the usual clocks: no system call). */
static inline uint64_t os_clock_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * OS_NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in ns: the clock of every deadline inside pvrt. */
static inline uint64_t os_now_ns(void)
{
	return os_clock_ns(CLOCK_MONOTONIC);
}

/*
 * Is ts an acceptable absolute timeout? POSIX (pthread_mutex_timedlock and the other timed waits)
 * makes only tv_nsec outside [0, 1e9) an error (EINVAL); a negative tv_sec is a valid time in the
 * past, so such a wait times out (glibc does the same). Note that the kernel's futex rejects a
 * negative tv_sec with EINVAL: callers must treat it as expired before calling it
 * (os_timespec_past).
 */
static inline bool os_timespec_valid(const struct timespec *ts)
{
	return ts->tv_nsec >= 0 && ts->tv_nsec < (long)OS_NS_PER_SEC;
}

/* A valid absolute time before every clock's epoch: already passed on any clock. */
static inline bool os_timespec_past(const struct timespec *ts)
{
	return ts->tv_sec < 0;
}

/* ---- CPU ---- */

/* The spin-wait hint: lets the sibling hyperthread run, and tells a hypervisor that this vCPU
 * spins (pause-loop exiting). The one arch-specific line of the OS layer. */
static inline void os_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* Give this kernel thread's CPU to another runnable thread: the system call itself, never the
 * symbol sched_yield, which M:N mode interposes (runtime/mn.c) with a ULT yield that enters the
 * runtime. The runtime's own waits for another kernel thread (sysmon mid-decision, a hint writer
 * mid-update) must not re-enter it: a wait inside rt_m_lost recursed through that wrapper until
 * the ULT's stack overflowed. errno untouched. */
static inline void os_yield(void)
{
	int saved = errno;
	syscall(SYS_sched_yield);
	errno = saved;
}

/* ---- sized structs of the public API (include/pvrt/version.h) ----
 * A struct the program passes in or out carries its size as the program was compiled; fields are
 * only appended, so the common prefix is what both sides know. */

/* In: dst (dst_size bytes) gets the first 'size' bytes of the program's src; the rest is 0. */
static inline void os_sized_in(void *dst, size_t dst_size, const void *src, size_t size)
{
	memset(dst, 0, dst_size);
	memcpy(dst, src, size < dst_size ? size : dst_size);
}

/* Out: the program's dst ('size' bytes) gets the common prefix of src (src_size bytes), zeros
 * past it; returns the bytes filled from src. */
static inline size_t os_sized_out(void *dst, size_t size, const void *src, size_t src_size)
{
	size_t n = size < src_size ? size : src_size;
	memcpy(dst, src, n);
	memset((char *)dst + n, 0, size - n);
	return n;
}

/* ---- the three-state lock (Drepper, "Futexes are tricky") ----
 * A word: 0 free, 1 held, 2 held with possible sleepers. Acquire on taking, release on dropping:
 * they order the protected data (and TSan sees the happens-before through the atomics). Used for
 * short internal critical sections; nothing spins forever: at most 'spins' relaxed re-checks, then
 * sleep. Who sleeps how is the caller's (the runtime's kernel futex here, the locks' ULT-aware
 * park), so the fast paths and the protocol are here and the sleep is a parameter. */

static inline bool os_lock_try(uint32_t *w)
{
	uint32_t z = 0;
	return __atomic_compare_exchange_n(w, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* The contended path: spin up to 'spins' times, then mark the word contended (2) and sleep(w)
 * (which returns, perhaps spuriously, once *w may have left 2) until the word was free. */
static inline void os_lock_contended(uint32_t *w, unsigned spins, void (*sleep)(uint32_t *w))
{
	for (unsigned i = 0; i < spins; i++) {
		os_cpu_relax();
		if (__atomic_load_n(w, __ATOMIC_RELAXED) == 0 && os_lock_try(w))
			return;
	}
	while (__atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE) != 0)
		sleep(w);
}

/* Drop the lock; true if a sleeper may wait (the caller wakes one on w). */
static inline bool os_unlock_contended(uint32_t *w)
{
	return __atomic_exchange_n(w, 0, __ATOMIC_RELEASE) == 2;
}

/* The kernel-futex flavour, for threads that are not ULTs (or must block their worker). */
static inline void os_lock_ksleep(uint32_t *w)
{
	os_futex_wait(w, 2, NULL); /* -EAGAIN, -EINTR: the caller re-checks */
}

__attribute__((noinline, unused)) static void os_lock_kslow(uint32_t *w, unsigned spins)
{
	os_lock_contended(w, spins, os_lock_ksleep);
}

static inline void os_lock(uint32_t *w, unsigned spins)
{
	if (__builtin_expect(!os_lock_try(w), 0))
		os_lock_kslow(w, spins);
}

static inline void os_unlock(uint32_t *w)
{
	if (__builtin_expect(os_unlock_contended(w), 0))
		os_futex_wake(w, 1);
}

#endif /* PVRT_OS_H */
