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

/*
 * Zero or NULL fields take the value of the environment variable named, else the default.
 * 'size' is the struct's size as the program was compiled (pvrt_config_init sets it): fields
 * are only ever appended, and a library newer than the program takes the default for fields
 * past 'size'. Initialise with pvrt_config_init() or PVRT_CONFIG_INIT.
 */
struct pvrt_config {
	uint32_t size;		/* sizeof(struct pvrt_config); 0 (not initialised): -EINVAL */
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
	int64_t slice_ns;	/* $PVRT_SLICE_NS: preempt a ULT that ran this long while others
				 * wait; default 10 ms (-1 or "off": never) */
	int64_t handoff_ns;	/* $PVRT_HANDOFF_NS: give the worker of a ULT blocked this long in
				 * the kernel to a spare thread; default 1 ms (-1 or "off": never) */
	int ult_tls;		/* 1 ($PVRT_ULT_TLS=1): every ULT gets its own glibc thread
				 * descriptor and TLS (__thread, errno, thread_local), switched with
				 * it; -ENOSYS where glibc's TLS allocator cannot be found */
};

/* Every field from the environment or its default (C and C++). Lists every field (-Wextra
 * warns about a missing one): extend it with the struct. */
#define PVRT_CONFIG_INIT                                                                           \
	{                                                                                          \
		sizeof(struct pvrt_config), 0, NULL, 0, NULL, 0, 0, NULL, 0, 0, 0, 0, 0            \
	}

/* Set c to PVRT_CONFIG_INIT. Inline: the size is the program's.
 * Context: any. */
static inline void pvrt_config_init(struct pvrt_config *c)
{
	const struct pvrt_config z = PVRT_CONFIG_INIT;
	*c = z;
}

/* Start the runtime (c may be NULL). -EBUSY if already running, -EINVAL for a bad setting.
 * Context: thread (it becomes the primary ULT); fork only if the parent's runtime was not running.
 */
PVRT_API int pvrt_init(const struct pvrt_config *c);

/* Stop it (see above). -EPERM unless called by the primary ULT; -ENXIO if not running.
 * Context: the primary ULT only. */
PVRT_API int pvrt_finalize(void);

/* Why the last pvrt call on this thread failed.
 * Context: any. */
PVRT_API const char *pvrt_errmsg(void);

/* Number of workers (0 when not running).
 * Context: any. */
PVRT_API unsigned pvrt_nworkers(void);

/* Index of the worker running the caller, or -1 for a foreign thread.
 * Context: any. */
PVRT_API int pvrt_worker_self(void);

/* Counters summed over workers since init. Fields are only ever appended; 'size' says how many
 * bytes the library filled (a library older than the program leaves the fields past them 0). */
struct pvrt_stats {
	uint32_t size;	/* out: bytes filled */
	uint32_t flags; /* out: 0 (reserved) */
	uint64_t ults_created;
	uint64_t switches;
	uint64_t steals;
	uint64_t parks;	      /* futex parks of idle workers */
	uint64_t unparks;     /* futex wakes sent to parked workers */
	uint64_t polls_found; /* idle periods ended by work found while halt-polling */
	uint64_t timer_adds;  /* timers started (sleeps, timed waits) */
	uint64_t timer_arms;  /* programmings of a worker's timer deadline */
	uint64_t timer_fires; /* expiries of a programmed deadline */
	uint64_t preemptions; /* ULTs preempted at the end of their time slice */
	uint64_t handoffs;    /* workers handed to a spare thread (a ULT blocked in the kernel) */
	/* Not a counter: ULT stacks mapped now (live ULTs', pooled and warm ones), for the whole
	 * runtime (0 in a worker's stats). Idle workers give the pooled ones back. */
	uint64_t stacks;
	uint64_t lends; /* directed yields of an idle worker's vCPU to a preempted worker's */
	uint64_t
	    rescues; /* steals (counted in steals too) from a worker whose vCPU was preempted */
};
/* Fill the first 'size' bytes of *s (size: the program's sizeof(struct pvrt_stats)). -EINVAL for
 * NULL or a size below the header, -ENXIO when the runtime is not running.
 * Context: ULT, thread. */
PVRT_API int pvrt_stats_read(struct pvrt_stats *s, size_t size);
/* pvrt_stats_read with the program's size.
 * Context: ULT, thread. */
static inline int pvrt_stats_get(struct pvrt_stats *s)
{
	return pvrt_stats_read(s, sizeof(*s));
}
/* The same counters for worker i alone; -EINVAL also for a bad i.
 * Context: ULT, thread. */
PVRT_API int pvrt_stats_read_worker(unsigned i, struct pvrt_stats *s, size_t size);
/* pvrt_stats_read_worker with the program's size.
 * Context: ULT, thread. */
static inline int pvrt_stats_get_worker(unsigned i, struct pvrt_stats *s)
{
	return pvrt_stats_read_worker(i, s, sizeof(*s));
}

/*
 * Announce a system call that may block (optional, cheap: a store each): between the two, sysmon
 * knows that a worker stuck on this ULT is blocked in the kernel without reading /proc, and
 * pvrt_syscall_exit is where the thread finds out, when the call returns, that its worker was
 * handed to another thread meanwhile (the ULT then continues on some worker). Calls that are not
 * announced are found by sysmon all the same, a little later. No-ops outside ULTs.
 * Context: ULT, thread.
 */
PVRT_API void pvrt_syscall_enter(void);
/* The end of an announced call (see pvrt_syscall_enter).
 * Context: ULT, thread. */
PVRT_API void pvrt_syscall_exit(void);

PVRT_END_DECLS

#endif /* PVRT_RUNTIME_H */
