/* SPDX-License-Identifier: MIT */
/* Shared by all pvrt locks: hint handles, thread ids, parking, the internal lock. */
#define _GNU_SOURCE
#include "lk.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- hint handles ---- */

/* A handle of source none: no records, so every query answers false. */
static pvhint_t lk_none_handle;
pvhint_t *lk_hints_ptr;		 /* what the locks read (override or default) */
static pvhint_t *lk_default_ptr; /* pvhint_default() */
static int lk_hints_state;	 /* 0 not opened, 1 opening, 2 open */

/* Only one thread opens the default handle: state 0 -> 1 claims it. A thread that re-enters
 * (the hint library may take a lock of its own while opening) or races sees state 1 and uses the
 * none handle meanwhile: hints are advisory, so reading none for a moment is always correct. */
bool lk_hints_claim(void)
{
	int st = 0;
	return __atomic_compare_exchange_n(&lk_hints_state, &st, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

void lk_hints_open_claimed(void)
{
	pvhint_t *h = NULL;
	/* Opened from inside a lock call or pthread_create, which leave errno as glibc's do. */
	int saved = errno;
	/* On failure pvhint_default leaves h at a handle of source none (its contract). */
	(void)pvhint_default(&h);
	errno = saved;
	if (!h)
		h = &lk_none_handle;
	/* Release: publish the opened handle's fields to threads that load the pointer. */
	__atomic_store_n(&lk_default_ptr, h, __ATOMIC_RELEASE);
	pvhint_t *expected = NULL;
	/* An override set by pvrt_locks_set_hints() meanwhile wins. */
	__atomic_compare_exchange_n(&lk_hints_ptr, &expected, h, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	__atomic_store_n(&lk_hints_state, 2, __ATOMIC_RELEASE);
}

static void lk_open_default(void)
{
	if (lk_hints_claim())
		lk_hints_open_claimed();
}

pvhint_t *lk_hints_none(void)
{
	return &lk_none_handle;
}

pvhint_t *lk_hints_slow(void)
{
	lk_open_default();
	pvhint_t *h = __atomic_load_n(&lk_hints_ptr, __ATOMIC_ACQUIRE);
	return h ? h : &lk_none_handle;
}

void pvrt_locks_set_hints(pvhint_t *h)
{
	if (!h) {
		lk_open_default();
		h = __atomic_load_n(&lk_default_ptr, __ATOMIC_ACQUIRE);
		if (!h)
			return; /* being opened by another thread, which will install it */
	}
	/* Release: the handle's fields are visible to whoever loads the pointer. */
	__atomic_store_n(&lk_hints_ptr, h, __ATOMIC_RELEASE);
}

/* Thread-slot pages: where the next check starts (per kernel thread; see below). */
static __thread uint32_t lk_scan_at __attribute__((tls_model("initial-exec")));

bool lk_yield_to_vcpu1(pvhint_t *h, uint32_t v1, enum pvrt_lock_class cls)
{
	/* -EAGAIN (it runs again), -EBUSY (this vCPU asked a moment ago), -ENOTSUP: park. */
	if (v1 == 0 || pvhint_yield_to(h, v1 - 1) != 0)
		return false;
	lk_stat(cls, LK_YIELDS);
	return true;
}

bool lk_any_other_preempted(pvhint_t *h)
{
	uint32_t n = pvhint_nr_used(h), from = 0, len = n;
	int self = pvhint_self_vcpu();
	if (h->valid & PVHINT_VALID_SLEEPING) {
		/* Thread-slot records: every thread this process ever registered (nr_used only
		 * grows: 4,094 after 10,000 short threads), and pvhintd's other processes' too. A
		 * check reads LK_SCAN_RECORDS of them, the next check the next ones: a preempted
		 * peer is seen within nr_used / LK_SCAN_RECORDS checks, a check costs the same
		 * whatever the page holds. (A thread's own steal is no substitute: it grows by
		 * every wake-up's latency, not only when the CPUs are oversubscribed.) */
		if (len > LK_SCAN_RECORDS) {
			from = lk_scan_at < n ? lk_scan_at : 0;
			len = LK_SCAN_RECORDS;
			lk_scan_at = (from + len) % n;
		}
	}
	for (uint32_t i = 0; i < len; i++) {
		uint32_t v = (from + i) % n;
		if ((int)v != self && pvhint_vcpu_preempted(h, v))
			return true;
	}
	return false;
}

__thread uint8_t lk_cond_relock __attribute__((tls_model("initial-exec")));

unsigned lk_nr_cpus(void)
{
	static unsigned n;
	/* Relaxed: every thread computes the same value; a race only repeats the call. */
	unsigned v = __atomic_load_n(&n, __ATOMIC_RELAXED);
	if (lk_likely(v))
		return v;
	cpu_set_t set;
	int saved = errno;
	v = sched_getaffinity(0, sizeof(set), &set) == 0 ? (unsigned)CPU_COUNT(&set) : 0;
	if (!v) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		v = c > 0 ? (unsigned)c : 1;
	}
	errno = saved;
	__atomic_store_n(&n, v, __ATOMIC_RELAXED);
	return v;
}

/* ---- thread ids ---- */

__thread int lk_tid_cache __attribute__((tls_model("initial-exec")));

int lk_tid_slow(void)
{
	int saved = errno;
	lk_tid_cache = (int)syscall(SYS_gettid);
	errno = saved;
	return lk_tid_cache;
}

uint32_t lk_fork_gen;

static void lk_atfork_child(void)
{
	/* The forking thread has a new tid in the child. */
	lk_tid_cache = 0;
	/* Waiter records of the parent's other threads (cond nodes, spinner nodes, once runners,
	 * hand-off targets) are now stale: see lk_fork_gen in lk.h. Relaxed: the only thread. */
	__atomic_store_n(&lk_fork_gen, lk_fork_gen + 1, __ATOMIC_RELAXED);
	lk_spinq_atfork_child();
	/* The emulator's control thread did not survive the fork, and its locks may have been
	 * held by it: report no parks from the child. */
	pvhint_t *d = __atomic_load_n(&lk_default_ptr, __ATOMIC_RELAXED);
	if (d && d != &lk_none_handle && !strcmp(pvhint_source_name(d), "emu")) {
		/* Nor does the emulator's page change any more: its frozen flags would say "owner
		 * preempted" for ever. (A kernel source's shared mapping stays live.) */
		__atomic_store_n(&lk_default_ptr, &lk_none_handle, __ATOMIC_RELAXED);
		pvhint_t *expected = d;
		__atomic_compare_exchange_n(&lk_hints_ptr, &expected, &lk_none_handle, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	lk_stats_atfork_child();
}

__attribute__((constructor)) static void lk_init(void)
{
	pthread_atfork(NULL, NULL, lk_atfork_child);
}

bool lk_target_gone(uint32_t id)
{
	if (lk_likely(lk_gen() == 0))
		return false;
	/* A ULT (0x40000000 | id) cannot be looked up; cancelling its registration is always
	 * safe (a live target re-registers), so treat it as gone. */
	if (id & 0x40000000u)
		return true;
	int saved = errno;
	/* ESRCH: no such thread in our thread group (a parent thread, in a fork child). */
	bool gone = syscall(SYS_tgkill, getpid(), (pid_t)id, 0) != 0 && errno == ESRCH;
	errno = saved;
	return gone;
}

/* ---- parking ---- */

/*
 * Lock waits are not reported to the hint source (pvhint_thread_park/unpark, which only the
 * emulator acts on): the emulator then sees a thread asleep in a pvrt lock as it sees any thread
 * asleep in the kernel, glibc's lock waiters included (its ksleep sampling), so a comparison
 * under the emulator models both libraries' sleeps alike. A reported park halts the emulated
 * vCPU at once, and every wake-up then needs the emulator's control thread to resume it and
 * waits for a physical CPU turn (up to a quantum) behind vCPUs whose threads sleep unreported:
 * a barrier or broadcast pays that on each of its wake-ups (PARSEC-shaped kernels under
 * --emu=vcpus=4,pcpus=2 took 2-3x glibc's time, and 15x when only condvar waits were
 * unreported; locks/README.md). The runtime still reports its idle workers.
 */
int lk_park(uint32_t *addr, uint32_t val, clockid_t clk, const struct timespec *abstime,
	    enum pvrt_lock_class cls)
{
	lk_stat(cls, LK_PARKS);
	return rt_futex_wait(addr, val, clk, abstime);
}

int lk_park_as(uint32_t *addr, uint32_t val, clockid_t clk, const struct timespec *abstime,
	       enum pvrt_lock_class cls, bool cancellable)
{
	if (!cancellable)
		return lk_park(addr, val, clk, abstime, cls);
	lk_stat(cls, LK_PARKS);
	return rt_futex_wait_cancel(addr, val, clk, abstime);
}

int lk_kwait(uint32_t *addr, uint32_t val)
{
	return os_futex_wait(addr, val, NULL);
}

void lk_kwake(uint32_t *addr, int n)
{
	os_futex_wake(addr, n);
}

void lk_ilock_slow(uint32_t *w, enum pvrt_lock_class cls)
{
	/* os_lock_contended's loop without its spinning (sections are short), parking with the
	 * caller's class: mark the lock contended (2), sleep while it stays so. */
	while (__atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE) != 0)
		lk_park(w, 2, CLOCK_MONOTONIC, NULL, cls);
}

const char *pvrt_lock_class_name(enum pvrt_lock_class cls)
{
	static const char *const names[] = {"mutex",	"rwlock",  "cond",
					    "spinlock", "barrier", "sem"};
	return (unsigned)cls < PVRT_LOCK_NCLASSES ? names[cls] : "?";
}
