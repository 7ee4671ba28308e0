/* SPDX-License-Identifier: MIT */
/*
 * libpvhint: per-vCPU scheduling hints for user space.
 *
 * A handle maps one hint page (see pvhint_abi.h) from one source:
 *   kvm   the guest kernel's read-only mapping of the host-written steal-time
 *         records (PVHINT_DEV_PATH, guest-patches/);
 *   emu   an in-process overcommit emulator that really stops the threads of
 *         descheduled vCPUs and publishes the same page;
 *   bpf   a BPF program on the scheduler tracepoints (needs CAP_BPF + CAP_PERFMON and a
 *         kernel with BTF); its records are thread slots, not vCPUs (PVHINT_KIND_THREAD):
 *         "is vCPU v preempted" reads "is the thread of slot v preempted";
 *   none  all hints false.
 * 'auto' (the default) picks kvm when the device exists, else bpf when it loads, else none.
 *
 * Queries are inline and read the page with one plain load: no syscall, no
 * lock. Every answer is a hint and may be stale when used.
 *
 * Functions return 0 or a negative errno; a human-readable reason for the
 * last failure on the calling thread is in pvhint_errmsg(). The library never
 * prints.
 */
#ifndef PVRT_PVHINT_H
#define PVRT_PVHINT_H

#include <pvrt/export.h>
#include <pvrt/pvhint_abi.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/rseq.h>

PVRT_BEGIN_DECLS

/*
 * A handle. The first three members are read by the inline queries and are
 * stable for the life of the handle; everything else is private.
 */
typedef struct pvhint {
	const struct pvhint_record *rec; /* nr records, in the mapped page */
	uint32_t nr;			 /* number of vCPU records */
	uint32_t valid;			 /* PVHINT_VALID_* */
	struct pvhint_impl *impl;	 /* private */
} pvhint_t;

struct pvhint_options {
	const char
	    *source;	 /* "auto", "kvm", "bpf", "emu", "none"; NULL: $PVRT_HINTS, else "auto" */
	const char *emu; /* emulator spec (see pvhint_emu_*); NULL: $PVRT_EMU, else defaults */
	const char *kvm_path; /* page to map for kvm; NULL: $PVRT_HINT_DEV, else PVHINT_DEV_PATH */
};

/* Open a handle (opts may be NULL: everything from the environment).
 * Context: ULT, thread, fork (a child opens its own emulator). */
PVRT_API int pvhint_open(const struct pvhint_options *opts, pvhint_t **out);
/* Close h (NULL: no-op); not the handle of pvhint_default(), which others share.
 * Context: ULT, thread, fork. */
PVRT_API void pvhint_close(pvhint_t *h);

/* The process-wide handle used by the runtime and locks, opened from the environment on first
 * call (thread-safe). On failure returns the error and leaves *out at a handle of source none.
 * Context: ULT, thread, fork (the parent's handle, inert there if emu). */
PVRT_API int pvhint_default(pvhint_t **out);

/* Why the last call on this thread failed (a static or thread-local string).
 * Context: any. */
PVRT_API const char *pvhint_errmsg(void);

/* The header of the mapped page (source, valid bits, ...).
 * Context: any. */
PVRT_API const struct pvhint_header *pvhint_header(const pvhint_t *h);
/* "kvm", "emu", "bpf" or "none".
 * Context: any. */
PVRT_API const char *pvhint_source_name(const pvhint_t *h);
/* Why 'auto' chose the source it chose ("" when nothing to say): the one-line notice.
 * Context: any. */
PVRT_API const char *pvhint_note(const pvhint_t *h);

/* ---- queries: one load from the page each ---- */

/* The number of vCPU records (vCPUs 0 .. n-1).
 * Context: any. */
static inline uint32_t pvhint_nr_vcpus(const pvhint_t *h)
{
	return h->nr;
}

/* Records at or above this were never used (thread-slot pages; nr for the others): the bound for
 * a scan of every record. Out of line: a read of the header.
 * Context: any. */
PVRT_API uint32_t pvhint_nr_used(const pvhint_t *h);

/* Is vCPU v held descheduled by the host though runnable?
 * Context: any. */
static inline bool pvhint_vcpu_preempted(const pvhint_t *h, unsigned v)
{
	/* Relaxed: a hint; the host (or emulator) writes it concurrently. */
	return v < h->nr &&
	       (__atomic_load_n(&h->rec[v].preempted, __ATOMIC_RELAXED) & PVHINT_PREEMPTED);
}

/* Is the physical CPU under vCPU v idle, so a wake-up sent there runs at once?
 * Context: any. */
static inline bool pvhint_pcpu_idle(const pvhint_t *h, unsigned v)
{
	return v < h->nr && __atomic_load_n(&h->rec[v].is_idle, __ATOMIC_RELAXED);
}

/* Steal time of vCPU v in ns: a consistent read under the record's version counter.
 * Context: any. */
PVRT_API uint64_t pvhint_steal(const pvhint_t *h, unsigned v);

/*
 * Thread-slot handles (bpf): the CPU whose run queue slot v's thread waits on while it is
 * preempted (switched out runnable, not run since), or -1 (running, asleep, unknown, or a handle
 * whose records are vCPUs). A waiter on that same CPU takes the CPU its lock holder waits for.
 * Context: any.
 */
PVRT_API int pvhint_waits_on_cpu(const pvhint_t *h, unsigned v);

/* ---- directed yield ---- */

/*
 * Ask the host to run vCPU v, preempted now, in place of the caller's vCPU: for a waiter whose
 * lock holder sits on v (the kvm source on a kernel with guest-patches/0005; a system call that
 * may deschedule the caller). 0: asked (the host may still decline); -EAGAIN: v's record does not
 * show it preempted, or v is the caller's; -EBUSY: this vCPU asked a moment ago (the kernel's
 * rate limit); -EINVAL: no such vCPU; -ENOTSUP: the source cannot (other sources, an older
 * kernel, a host without directed yield, emu modes other than slice, or PVRT_DIRECTED_YIELD not
 * 1: it is off by default, see pvhint/README.md), at no cost.
 * Context: ULT, thread (it blocks the kernel thread, not a ULT switch).
 */
PVRT_API int pvhint_yield_to(pvhint_t *h, unsigned v);
/* Can pvhint_yield_to() ever ask? Context: any. */
PVRT_API bool pvhint_can_yield(const pvhint_t *h);

/* ---- which vCPU the calling thread is on ---- */

/* The emulated vCPU this thread is attached to, or -1 (private to libpvhint; read inline).
 * Initial-exec, as defined: libpvhint is loaded with the program or a library that needs it,
 * so its TLS is in the static block and a read costs no __tls_get_addr call. */
PVRT_API extern __thread int pvhint_tls_vcpu __attribute__((tls_model("initial-exec")));

/*
 * The calling kernel thread's thread-local words that identify it to the hint source (the
 * emulator's attachment, pvhint_tls_vcpu, the bpf source's thread slot). A runtime that gives
 * user-level threads TLS blocks of their own copies these words from a kernel thread's block into a
 * ULT's block before it runs the ULT on that thread (a word's offset from the thread pointer is the
 * same in every block), so a stop signal or a hint read in the ULT sees the kernel thread's
 * attachment. Fills up to max entries and returns how many there are. Context: any.
 */
struct pvhint_tls_word {
	void *addr; /* in the calling thread's TLS */
	size_t size;
};
PVRT_API unsigned pvhint_thread_tls_words(struct pvhint_tls_word *out, unsigned max);
/*
 * Non-zero while the calling kernel thread holds one of the hint source's internal locks (the
 * emulator's; from a fork's prepare handler to its parent handler, too). Such a lock and the
 * count that defers the emulator's stop signal belong to the kernel thread: a runtime must not
 * move the code running there to another kernel thread before it is zero again.
 * Context: any; async-signal-safe.
 */
PVRT_API int pvhint_thread_in_lock(void);

/* sched_getcpu(), for kernels or glibc tunables without rseq.
 * Context: any. */
PVRT_API int pvhint_cpu_slow(void);

/* The CPU the kernel runs this thread on now: rseq's cpu_id (one load), else sched_getcpu().
 * Context: any. */
static inline int pvhint_cpu_now(void)
{
#if defined(__x86_64__) || defined(__aarch64__)
	if (__rseq_size > 0) {
		const struct rseq *rs =
		    (const struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
		int cpu = (int)__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED);
		if (cpu >= 0)
			return cpu;
	}
#endif
	return pvhint_cpu_slow();
}

/* Thread-slot mode (a bpf handle is open): the calling thread's slot, or -1 before it registered
 * (private to libpvhint; read inline). */
PVRT_API extern __thread int pvhint_tls_slot __attribute__((tls_model("initial-exec")));
PVRT_API extern int pvhint_slot_mode;
/* Register the calling thread with the bpf source (once per thread: one or two bpf(2) calls) and
 * return its slot; 0 (a record that never says anything) when no slot is free.
 * Context: ULT, thread, fork (the child's threads register anew). */
PVRT_API int pvhint_slot_register(void);

/* The vCPU the calling thread runs on, i.e. the record that describes it: its emulated vCPU when
 * attached to one; its thread slot while a bpf handle is open (registered on first use); else
 * the CPU.
 * Context: any. */
static inline int pvhint_self_vcpu(void)
{
	int v = pvhint_tls_vcpu;
	if (v >= 0)
		return v;
	if (__builtin_expect(__atomic_load_n(&pvhint_slot_mode, __ATOMIC_RELAXED), 0)) {
		v = pvhint_tls_slot;
		return v >= 0 ? v : pvhint_slot_register();
	}
	return pvhint_cpu_now();
}

/* ---- telling the source what threads do (no-ops unless the source needs it) ---- */

/* The calling thread is about to block (park) / has woken. The emulator treats a vCPU all of
 * whose attached threads are parked as halted: not preempted, and its pCPU may be idle. A wait
 * bracketed by these two is never interrupted by the emulator's stop signal (no EINTR, even for
 * a timed futex wait), and unpark() returns only once the thread's vCPU runs. The runtime's
 * kernel waits (pvrt's futex waits) should be bracketed this way. Cheap no-ops for other sources
 * and for threads not attached to h. Must be paired on the same thread.
 * Context: thread, ULT (for its worker); fork (no-op for an inherited emulator). */
PVRT_API void pvhint_thread_park(pvhint_t *h);
/* The calling thread has woken (see pvhint_thread_park).
 * Context: thread, ULT (for its worker); fork (no-op for an inherited emulator). */
PVRT_API void pvhint_thread_unpark(pvhint_t *h);

#define PVHINT_WANT_EVERY_NS 100000000ull
#define PVHINT_WANT_MIN	     64u
#define PVHINT_WANT_LIVE_NS  900000000ull /* the server keeps them a second after a want */
/* pvhint_want's state and its sending half (private to libpvhint; read inline). */
PVRT_API extern int pvhint_want_mode;
/* Context: any. */
PVRT_API bool pvhint_want_send(unsigned weight);
/*
 * The caller is about to decide with the hints (a contended lock, a scheduler's placement).
 * A bpf source served by pvhintd or pvrt-run attaches its scheduler programs only while some
 * process wants hints (an attached program costs every context switch of the machine), and
 * detaches them a second after the last want; between, every record reads "running". This
 * tells it once a thread has wanted PVHINT_WANT_MIN times within PVHINT_WANT_EVERY_NS
 * (sustained demand: a lock that contends a few hundred times a second is not worth the tax),
 * at most once per PVHINT_WANT_EVERY_NS per process (a coarse clock read and a compare
 * otherwise; no system call). Returns whether this process's wants keep the programs attached
 * (it sent one within PVHINT_WANT_LIVE_NS): when not, the caller should decide as with source
 * none. Right after a first want the records read "running" for about a millisecond, until
 * the server has attached. Always true for the other sources.
 * pvhint_want_sustained(): the same, for a caller whose demand is sustained by itself (a
 * scheduler while it runs work).
 * Context: any (a signal handler too: it never blocks).
 */
static inline bool pvhint_want(void)
{
	if (__builtin_expect(__atomic_load_n(&pvhint_want_mode, __ATOMIC_RELAXED), 0))
		return pvhint_want_send(1);
	return true;
}
/* Context: any. */
static inline bool pvhint_want_sustained(void)
{
	if (__builtin_expect(__atomic_load_n(&pvhint_want_mode, __ATOMIC_RELAXED), 0))
		return pvhint_want_send(PVHINT_WANT_MIN);
	return true;
}

/*
 * Before execve: detach the calling thread from the emulator it is attached to (if any) and
 * discard a stop signal already queued for it, which the new program (with no handler for it)
 * would die of. If the exec fails, the thread goes on detached: its vCPU no longer stops it.
 * The preload calls it in its exec wrappers. Returns 1 if the thread was attached, else 0.
 * Context: thread, ULT (its kernel thread's attachment).
 */
PVRT_API int pvhint_exec_prepare(void);

/* ---- the bpf source ---- */

/* Counters of the process's BPF program (totals since it was loaded). */
struct pvhint_bpf_stats {
	uint64_t switches;   /* switch-outs of registered threads */
	uint64_t missed;     /* switch-outs whose preceding switch-in the program did not see */
	uint32_t slots;	     /* slots owned now */
	uint32_t vcpu_users; /* users of the vCPU page (bpf vcpu mode), whose refresh runs only
			      * while this is not 0: this process's open handles, pvhintd's
			      * clients that asked for it */
};
/* -ENOTSUP unless h is a bpf handle whose program this process loaded (not pvhintd's).
 * Context: any. */
PVRT_API int pvhint_bpf_stats(pvhint_t *h, struct pvhint_bpf_stats *out);

/*
 * pvhintd's socket: a process that may not load the program itself (no CAP_BPF + CAP_PERFMON)
 * gets the page from the daemon there ($PVHINT_BPF_SOCKET overrides; ignored in setuid programs).
 */
#define PVHINT_BPF_SOCKET_PATH "/run/pvhint/pvhintd.sock"

/*
 * Load the bpf program (privileged) and serve it to other processes on listen_fd, a listening
 * AF_UNIX SOCK_SEQPACKET socket whose permissions say who may connect: each gets the page maps
 * (read-only) and slots for its own threads. Returns 0 once *stop is PVHINT_SERVE_STOP, or is
 * PVHINT_SERVE_STOP_IDLE and no client is connected (a client stays connected while it lives);
 * checked at least every 200 ms; stop may be NULL. A negative errno: the load failed.
 * From the call on, the program follows threads only while a client wants hints (pvhint_want)
 * or uses the vCPU page, and a second longer (between, every record reads "running"); the
 * serving process's own handles want nothing, and it returns with the programs detached.
 * tools/pvhintd, and pvrt-run (one instance for the process tree it starts).
 * Context: thread (it blocks).
 */
#define PVHINT_SERVE_STOP      1
#define PVHINT_SERVE_STOP_IDLE 2
PVRT_API int pvhint_bpf_serve(int listen_fd, volatile int *stop);

/* ---- overcommit emulator (source emu) ----
 *
 * Spec: comma-separated key=value, e.g. "vcpus=4,pcpus=2,quantum=3ms".
 *   vcpus=V       emulated vCPUs (default: CPUs of the affinity mask)
 *   pcpus=P       emulated physical CPUs (default: vcpus, i.e. no overcommit)
 *   mode=slice    vCPUs round-robin over the pCPUs, one quantum each (default)
 *   mode=noisy    each vCPU descheduled 'duty' of every 'period' (noisy neighbour)
 *   mode=script   nothing happens unless pvhint_emu_deschedule()/resume() say so
 *   mode=random   flags flip at random every 'period' and no thread is stopped
 *                 (for tests that hints are only advisory)
 *   quantum=3ms   host time slice (units ns, us, ms, s)
 *   duty=0.3      noisy: fraction of each period descheduled
 *   period=10ms   noisy/random: period
 *   noisy_vcpus=A-B  noisy: the vCPUs the neighbour visits (V or A-B; default all)
 *   seed=N        random choices are reproducible
 *   signal=rtmin+K  the stop signal (default: the first real-time signal from SIGRTMIN+8 up
 *                 with no handler); a signal that already has a handler is -EBUSY
 *   ack_timeout=50ms  how long a stop waits for a thread's acknowledgement
 *   rt=1          run the control thread SCHED_FIFO when permitted (0: never)
 *   ksleep=1ms    slice/noisy: how often the kernel state of attached threads is sampled; a
 *                 vCPU whose threads are all parked or sleeping in the kernel (futex, read,
 *                 nanosleep, ...) is halted, as a guest vCPU in HLT (0: only parked threads
 *                 halt a vCPU; script and random modes never sample). The sample reads the
 *                 thread's bpf record where the bpf program loads, else /proc; with the
 *                 program, halts and wake-ups are also seen the moment they happen
 *                 (PVRT_EMU_KSTATE=events, the default; sample: only every ksleep; proc:
 *                 /proc every ksleep; another value: the open fails)
 *   export=PATH   also publish the page in the new file PATH (e.g. /dev/shm/pvrt-emu; -EEXIST
 *                 if PATH exists, even as a symbolic link), removed at close and at exit:
 *                 other processes read the emulated hints with the kvm source
 *                 (PVRT_HINTS=kvm PVRT_HINT_DEV=PATH), e.g. pvhint-top
 * A bad key or value is -EINVAL with pvhint_errmsg() naming it (also: nan or inf durations, a
 * negative seed, pcpus > vcpus, duty=1 with mode=noisy). Setuid programs read no PVRT_*.
 *
 * A descheduled vCPU's attached threads are really stopped (a signal whose handler blocks until
 * the vCPU runs again), except threads blocked in the kernel, which are left alone so that no
 * call sees EINTR; see pvhint/README.md for the mechanism and its limits. A vCPU is halted (never
 * preempted, its pCPU may be idle) while all its attached threads are between
 * pvhint_thread_park() and pvhint_thread_unpark() or (slice and noisy modes, ksleep > 0) seen
 * sleeping in the kernel; a vCPU with no thread attached is halted.
 *
 * fork(): in a child, every emulator the parent had open is inert: no control thread, no stop
 * signal (the handler is restored to the parent's previous action), no attached thread; its page
 * reads "not preempted, not idle" with steal frozen at the fork; pvhint_emu_attach, _detach,
 * _deschedule, _resume, _stats and _signal return -ECHILD; park/unpark are no-ops;
 * pvhint_close() frees it (and leaves an export= file to the parent). A child may open its own.
 */

/* Attach the calling thread to emulated vCPU v (-EINVAL if out of range; -ENOTSUP unless emu).
 * From then on it is stopped whenever v is descheduled.
 * Context: thread (a ULT attaches its worker's kernel thread); fork: -ECHILD for an inherited
 * emulator. */
PVRT_API int pvhint_emu_attach(pvhint_t *h, unsigned v);
/* Attach the calling thread to v as if it then called pvhint_thread_park() at once: v does not
 * become runnable (nor does the caller wait for v's turn) until the thread unparks. A runtime
 * sets up a kernel thread that has no work yet this way. Errors as pvhint_emu_attach.
 * Context: thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_attach_parked(pvhint_t *h, unsigned v);
/* Attach to vCPU (n++ % vcpus): the placement pvrt-run uses for application threads.
 * Context: thread (a ULT attaches its worker's kernel thread); fork: -ECHILD for an inherited
 * emulator. */
PVRT_API int pvhint_emu_attach_next(pvhint_t *h);
/* Move the calling thread, attached to h and parked (pvhint_thread_park), to emulated vCPU v:
 * it counts as v's from then on and unparks on v's turn. Takes no lock a program may hold and
 * allocates nothing: a thread that must not wait for the program (a runtime's spare taking a
 * worker) moves rather than detach and attach. -EINVAL: v out of range, the thread not attached
 * to h or not parked.
 * Context: thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_move(pvhint_t *h, unsigned v);
/* Detach the calling thread from its emulated vCPU (-ENOTSUP unless emu).
 * Context: thread, ULT (as attach); fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_detach(pvhint_t *h);
/* Scripted (mode=script): deschedule v now for ns nanoseconds (0: until resumed); resume v now.
 * deschedule returns once 'preempted' is set (if v is runnable) and every attached thread running
 * user code has stopped (bounded by ack_timeout); resume once the threads are released and
 * 'preempted' is cleared. -EDEADLK when the caller is attached to v itself.
 * Context: ULT, thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_deschedule(pvhint_t *h, unsigned v, uint64_t ns);
/* Resume v now (script mode; see pvhint_emu_deschedule).
 * Context: ULT, thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_resume(pvhint_t *h, unsigned v);

/* Counters of emulated vCPU v (totals since open). */
struct pvhint_emu_stats {
	uint64_t desched;      /* times v was descheduled */
	uint64_t stops;	       /* thread stops completed by the stop handler */
	uint64_t stopped_ns;   /* time attached threads spent stopped in the handler */
	uint64_t ack_timeouts; /* stops not acknowledged within ack_timeout */
	uint64_t kernel_skips; /* threads left alone because they were blocked in the kernel */
	uint64_t eintr;	       /* stops that interrupted a call which then failed with EINTR */
	uint32_t threads;      /* attached now */
	uint32_t parked;       /* of which parked */
	uint32_t ksleep;       /* of which seen sleeping in the kernel at the last sample */
	uint64_t samples;      /* kernel-state samples taken (the ksleep sampling's cost) */
	uint64_t desched_ns;   /* time the model held v off a pCPU, runnable or not (slice: not
				* its turn, also while halted or with no thread; noisy: the
				* neighbour's turns; script: the holds; random: 0) */
	uint64_t neighbour_ns; /* noisy: time the neighbour held v's pCPU */
	uint32_t pcpus;	       /* the emulated pCPUs (the same for every v). The CPU time the
				* emulator offers the guest over an interval: pcpus x its length,
				* less the growth of every vCPU's neighbour_ns */
};
/* Counters of emulated vCPU v into *out; -EINVAL if v is out of range.
 * Context: ULT, thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_stats(pvhint_t *h, unsigned v, struct pvhint_emu_stats *out);
/* The stop signal number in use, or a negative errno unless emu.
 * Context: ULT, thread; fork: -ECHILD for an inherited emulator. */
PVRT_API int pvhint_emu_signal(pvhint_t *h);
/* "slice", "noisy", "script" or "random"; NULL unless emu.
 * Context: any. */
PVRT_API const char *pvhint_emu_mode(pvhint_t *h);

PVRT_END_DECLS

#endif /* PVRT_PVHINT_H */
