/* SPDX-License-Identifier: MIT */
/*
 * What the rest of libpvrt may see of the runtime: the one header locks/ includes (and the
 * preload through them). Everything else in runtime/ (workers, rings, descriptors, the runtime
 * state of internal.h) stays private to the runtime's C files, so the runtime can change its inside
 * without touching the locks.
 *
 * It gives: the wait/wake primitive (futex.h: rt_futex_*, the wake ranking and pick), the OS
 * layer (pvrt_os.h: clock, CPU relax, the three-state lock), and who is calling: the calling ULT
 * (opaque), its worker's vCPU, and yielding to a ready ULT (hand-off). All hidden symbols.
 */
#ifndef PVRT_RUNTIME_WAIT_H
#define PVRT_RUNTIME_WAIT_H

#include "futex.h"
#include "pvrt_os.h"

#include <stdbool.h>

#define PVRT_HIDDEN __attribute__((visibility("hidden")))

struct pvrt_ult;  /* a ULT; opaque outside runtime/ (pvrt_thread_t of <pvrt/thread.h>) */
struct rt_worker; /* opaque outside runtime/ */

/* The worker of the calling kernel thread; NULL in threads that are not workers (initial-exec
 * TLS, hidden in libpvrt and the preload). A ULT may move to another worker at every switch:
 * read it again after one (see rt_worker_cur in internal.h). */
extern __thread struct rt_worker *rt_tls_worker __attribute__((tls_model("initial-exec")))
PVRT_HIDDEN;

/* The ULT that runs on the calling TLS block, with per-ULT TLS (pvrt_config.ult_tls): set in
 * each ULT's own block, NULL in a kernel thread's. The block moves with its ULT, so this one load
 * names the caller wherever it runs. The primary's block (the main thread's) is also worker 0's
 * scheduler's until worker 0 is first handed off: the switch between the two sets it (ult.c).
 * Without per-ULT TLS it is always NULL (rt_ult_current reads the worker's current ULT inside a
 * runtime section instead). */
extern __thread struct pvrt_ult *rt_tls_ult __attribute__((tls_model("initial-exec"))) PVRT_HIDDEN;

/*
 * A section in which the calling ULT must not be preempted (switched away by the time-slice
 * signal): runtime/preempt.c defers the signal while the count is raised, and sysmon sends it
 * again later. The locks' spinner queue (locks/spinq.h) needs it: a queued ULT links its
 * worker's node, which no other ULT of that worker may queue before it is unlinked, and M:N
 * preemption may land anywhere outside the runtime's text (in clock_gettime, say). Nestable;
 * the count is per TLS block (per ULT in M:N mode, per kernel thread otherwise), which is the
 * one the signal handler reads. Keep such sections short and free of blocking calls.
 */
extern __thread unsigned rt_tls_nopreempt __attribute__((tls_model("initial-exec"))) PVRT_HIDDEN;
static inline void rt_nopreempt_enter(void)
{
	rt_tls_nopreempt++;
	/* The handler runs on this thread: order the count before the section, for the compiler
	 * only. */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static inline void rt_nopreempt_leave(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	rt_tls_nopreempt--;
}

/* The calling ULT, NULL in threads that are not ULTs. */
struct pvrt_ult *rt_ult_current(void) PVRT_HIDDEN;
/* If u is ready in a ring, run it now and queue the caller as ready; true if it switched. */
bool rt_ult_try_yield_to(struct pvrt_ult *u) PVRT_HIDDEN;
/* Could rt_ult_try_yield_to(u) switch to u now (it is ready and may run on the caller's
 * worker)? A racy answer: a true may still be followed by a failed yield. */
bool rt_ult_can_yield_to(const struct pvrt_ult *u) PVRT_HIDDEN;
/* The vCPU of the calling worker (for hints), else the CPU the thread runs on. */
int rt_worker_vcpu(void) PVRT_HIDDEN;

/* ---- M:N mode of the preload (runtime/mn.c, linked into libpvrt-preload.so only) ---- */
#include <pthread.h>
/* Set once M:N mode runs: pthreads are ULTs. */
extern bool rt_mn_on PVRT_HIDDEN;
/* Start the runtime with the calling (main) thread as the primary ULT: NULL, or why not. */
const char *rt_mn_start(void) PVRT_HIDDEN;
/* pthread_create as a ULT; glibc's error numbers. */
int rt_mn_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
		 void *arg) PVRT_HIDDEN;
/* Around a condvar or semaphore wait of the caller, cancellation points (no-ops unless it is a
 * ULT): enter acts on a pending cancel, else says whether the wait is cancellable; leave takes
 * the wait's result (a positive errno), acts on a cancel (ECANCELED from the wait: it does not
 * return then) and returns the result. */
bool rt_mn_cancel_enter(void) PVRT_HIDDEN;
int rt_mn_cancel_leave(int r) PVRT_HIDDEN;
/*
 * Around an exec or a spawn of a program by the caller (preload_exec.c): a worker's kernel
 * thread is pinned to its CPU, and a new program inherits that; enter gives the thread the
 * CPUs the program's ULTs report (sched_getaffinity: those it started on) and keeps the ULT on
 * this thread until leave (the preemption signal is blocked: a preempted ULT could go on on
 * another worker's thread), leave (after a failed exec, or once the spawn returned) puts the
 * thread's CPUs and mask back, errno kept. Nothing to do (on = false) for a thread that is not
 * a ULT or outside M:N mode.
 */
#include <sched.h>
#include <signal.h>
struct rt_mn_spawn {
	bool on;
	cpu_set_t cpus;
	sigset_t mask;
};
void rt_mn_spawn_enter(struct rt_mn_spawn *s) PVRT_HIDDEN;
void rt_mn_spawn_leave(const struct rt_mn_spawn *s) PVRT_HIDDEN;

#endif /* PVRT_RUNTIME_WAIT_H */
