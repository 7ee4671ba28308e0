/* SPDX-License-Identifier: MIT */
/*
 * pvrt runtime: initialisation, configuration and shutdown of the M:N runtime.
 *
 * pvrt_init() starts one worker (kernel thread) per CPU of the process's affinity mask, each
 * pinned to its CPU and registered with libpvhint as its vCPU. The calling thread becomes the
 * *primary ULT*: it keeps its own stack, runs on worker 0 (its kernel thread is worker 0's) and is
 * bound there. Only the primary may call pvrt_finalize().
 *
 * pvrt_finalize() waits until every other ULT (joinable or detached) has exited, then stops the
 * workers, joins their kernel threads and releases every stack and descriptor (results of
 * exited but never joined ULTs are discarded). A ULT that never exits makes finalize wait
 * forever, just as pthread_join() would. After it returns, pvrt_init() may be called again.
 *
 * Threads that are not ULTs (foreign threads) may create, join and wake ULTs and use every
 * pvrt wait primitive; they block in the kernel.
 *
 * All functions return 0 or a negative errno; pvrt_errmsg() says why the last call on this
 * thread failed. The library never prints.
 */
#ifndef PVRT_RUNTIME_H
#define PVRT_RUNTIME_H

#include <pvrt/export.h>

#include <stddef.h>
#include <stdint.h>

PVRT_BEGIN_DECLS

#define PVRT_MAX_WORKERS 256

/* Zero or NULL fields take the value of the environment variable named, else the default. */
struct pvrt_config {
	unsigned workers;	/* $PVRT_WORKERS; default: number of CPUs in 'cpus' */
	const char *cpus;	/* $PVRT_CPUS, e.g. "0-3,6"; default: the affinity mask */
	size_t stack_size;	/* $PVRT_STACK_SIZE (bytes, k/m suffix); default 64 KiB */
	const char *sched;	/* $PVRT_SCHED: scheduling policy, "hints" (default) or "random" */
	uint64_t poll_min_ns;	/* $PVRT_POLL_MIN_NS: first halt-poll window; default 10 us */
	uint64_t poll_max_ns;	/* $PVRT_POLL_MAX_NS: largest window; default 200 us (0: no poll) */
	const char *timer;	/* $PVRT_TIMER: "lazy" (default) or "eager" re-arming */
	int64_t timer_slack_ns; /* $PVRT_TIMER_SLACK_NS: timers may fire this late; default 50 us
				 * (-1: none) */
	int no_segv_handler;	/* 1: do not install the stack-overflow SIGSEGV handler */
	int ult_tls;		/* 1 ($PVRT_ULT_TLS=1): every ULT gets its own glibc thread
				 * descriptor and TLS (__thread, errno, thread_local), switched with
				 * it; -ENOSYS where glibc's TLS allocator cannot be found */
};

/* Fill c with zeros (every field from the environment or its default). */
PVRT_API void pvrt_config_init(struct pvrt_config *c);

/* Start the runtime (c may be NULL). -EBUSY if already running, -EINVAL for a bad setting. */
PVRT_API int pvrt_init(const struct pvrt_config *c);

/* Stop it (see above). -EPERM unless called by the primary ULT; -ENXIO if not running. */
PVRT_API int pvrt_finalize(void);

/* Why the last pvrt call on this thread failed. */
PVRT_API const char *pvrt_errmsg(void);

/* Number of workers (0 when not running). */
PVRT_API unsigned pvrt_nworkers(void);

/* Index of the worker running the caller, or -1 for a foreign thread. */
PVRT_API int pvrt_worker_self(void);

/* Counters summed over workers since init. */
struct pvrt_stats {
	uint64_t ults_created;
	uint64_t switches;
	uint64_t steals;
	uint64_t parks;	      /* futex parks of idle workers */
	uint64_t unparks;     /* futex wakes sent to parked workers */
	uint64_t polls_found; /* idle periods ended by work found while halt-polling */
	uint64_t timer_adds;  /* timers started (sleeps, timed waits) */
	uint64_t timer_arms;  /* programmings of a worker's timer deadline */
	uint64_t timer_fires; /* expiries of a programmed deadline */
};
PVRT_API int pvrt_stats_get(struct pvrt_stats *s);

PVRT_END_DECLS

#endif /* PVRT_RUNTIME_H */
