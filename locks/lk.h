/* SPDX-License-Identifier: MIT */
/*
 * Internal helpers shared by the pvrt locks: the hint handles, the caller's
 * thread id, bounded spinning, parking (futex + emulator notification) and
 * statistics.
 */
#ifndef PVRT_LOCKS_LK_H
#define PVRT_LOCKS_LK_H

#include <pvrt/lockstat.h>
#include <pvrt/pvhint.h>

#include "lk_layout.h" /* the lock objects' private layout */
#include "wait.h"      /* all that the locks see of the runtime */

#include <pvrt/thread.h>

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define lk_likely(x)   __builtin_expect(!!(x), 1)
#define lk_unlikely(x) __builtin_expect(!!(x), 0)

/*
 * Spin budgets, in time: a pause costs from a few ns to ~100 ns depending on
 * the CPU and on whether a hypervisor intercepts it, so counting pauses does
 * not bound anything. A waiter spins at most LK_SPIN_NS when the hint source
 * tells preemption (it then spins only while the owner's vCPU runs, which is
 * productive), and LK_SPIN_BLIND_NS without such hints: the owner may be
 * descheduled, and a park + wake-up pair costs a few microseconds, so
 * spinning longer than that cannot win. Between checks of the lock word it
 * backs off 1, 2, 4 ... LK_BACKOFF_MAX pauses.
 */
#define LK_SPIN_NS	 20000ull
#define LK_SPIN_BLIND_NS 3000ull
#define LK_BACKOFF_MAX	 16
/* A mutex waiter stays off the lock's cache line this long before its first check (mutex.c,
 * step_back): the owner's core runs a batch of acquisitions meanwhile, instead of the lock
 * moving between cores on every one. */
#define LK_STEP_BACK_NS 700ull
/* A vCPU whose steal time grew this recently shares its physical CPU (see mutex.c). */
#define LK_STEAL_RECENT_NS 10000000ull
/* pthread_spin users expect spinning: a spinlock waiter spins longer before parking. */
#define LK_SPINLOCK_SPIN_NS 100000ull

/*
 * Fairness bound of the mutex: a waiter that has waited LK_STARVE_NS since it was first woken
 * (LK_STARVE_HARD_NS while its own vCPU shares its physical CPU: mutex.c, starve_bound())
 * asks for the lock to be handed to it directly, and waits for it awake while the owner runs;
 * once it has waited LK_STARVE_HARD_NS it takes the hand-off asleep too (locks/README.md,
 * "Fairness bound"). A bound in lost races instead (two, once) handed the lock over
 * thousands of times a second between two threads, each hand-over a wake-up long.
 */
#define LK_STARVE_NS	  20000ull
#define LK_STARVE_HARD_NS 1000000ull

static inline void lk_backoff(unsigned *b)
{
	for (unsigned i = 0; i < *b; i++)
		os_cpu_relax();
	if (*b < LK_BACKOFF_MAX)
		*b <<= 1;
}

/* ---- the runtime (wait.h) ---- */

/* rt_ult_current() without a call for threads that are not workers (the common case for
 * pthread programs) and for ULTs with their own TLS (M:N mode), whose block names them. Only for
 * use at the start of a lock call: a worker's ULT may move to another worker at any switch, so
 * the test must not be reused after one. */
static inline struct pvrt_ult *lk_self_ult(void)
{
	struct pvrt_ult *u = rt_tls_ult;
	if (u)
		return u;
	return __builtin_expect(rt_tls_worker == NULL, 1) ? NULL : rt_ult_current();
}
/* ---- hints ---- */
extern pvhint_t *lk_hints_ptr;
pvhint_t *lk_hints_slow(void);
/* The handle of source none (lk_hints while a served bpf source does not follow threads). */
pvhint_t *lk_hints_none(void);
/* Opening the default handle on a thread of one's own (the preload's pthread_create): claim it,
 * then open it; until then lk_hints() answers with source none. */
bool lk_hints_claim(void);
void lk_hints_open_claimed(void);

/* The handle the locks read hints from (never NULL; source none until opened). Called only on
 * contended paths, where the hints decide: that is what keeps a served bpf source's programs
 * attached (pvhint_want), so a process whose locks do not contend taxes no context switch.
 * While this process's wants do not keep them attached the records are stale, and the locks
 * decide as with source none (their adaptive blind budgets), not on records that say
 * "running". */
static inline pvhint_t *lk_hints(void)
{
	if (lk_unlikely(!pvhint_want()))
		return lk_hints_none();
	/* Acquire: pairs with the release store that publishes an opened handle. */
	pvhint_t *h = __atomic_load_n(&lk_hints_ptr, __ATOMIC_ACQUIRE);
	return lk_likely(h != NULL) ? h : lk_hints_slow();
}

/* Is vCPU+1 'v1' (as stored in owner records; 0 unknown) preempted? */
static inline bool lk_vcpu1_preempted(pvhint_t *h, uint32_t v1)
{
	return v1 != 0 && pvhint_vcpu_preempted(h, v1 - 1);
}

/*
 * Should a spinner stop because the holder on vCPU+1 'v1' cannot run? A vCPU's record (kvm,
 * emu): preempted is the host's decision, a time slice long: yes. A thread slot's (bpf): its
 * thread is runnable and off its CPU; only if it waits for the CPU this spinner holds (or where
 * is unknown) does spinning delay it. Queued on another CPU it runs as soon as that CPU's
 * task yields or blocks, often within microseconds: `sysbench threads` (the lock held across
 * sched_yield, 4 threads on 2 CPUs) made 0.65x glibc's events when every such waiter parked.
 */
static inline bool lk_holder_preempted(pvhint_t *h, uint32_t v1)
{
	if (!lk_vcpu1_preempted(h, v1))
		return false;
	if (!(h->valid & PVHINT_VALID_SLEEPING))
		return true;
	int c = pvhint_waits_on_cpu(h, v1 - 1);
	if (c >= 0)
		return c == pvhint_cpu_now();
	/* Where is unknown: stop, as for a vCPU; unless it was switched in meanwhile. */
	return lk_vcpu1_preempted(h, v1);
}

/* The caller's vCPU (the record that describes it) + 1, for owner records. u: the caller's ULT
 * (rt_ult_current()) or NULL. A ULT reports its worker's vCPU, read through a call because a ULT
 * may have moved to another worker (and thread pointer) since the caller last read thread-local
 * data. */
static inline uint32_t lk_self_vcpu1(struct pvrt_ult *u)
{
	/* A thread: its emulated vCPU, its bpf thread slot or its CPU (pvhint_self_vcpu). */
	int v = u ? rt_worker_vcpu() : pvhint_self_vcpu();
	return (uint32_t)v + 1;
}

/* The owner on vCPU+1 'v1' cannot run (lk_vcpu1_preempted): ask the host to run its vCPU in place
 * of ours (pvhint_yield_to) instead of waiting for the host's next turn. True when asked: we ran
 * again after it did, so the caller looks at the lock again before parking. */
bool lk_yield_to_vcpu1(pvhint_t *h, uint32_t v1, enum pvrt_lock_class cls);

/* Is a vCPU other than the caller's preempted (barrier: a missing peer may be there)?
 * Thread-slot pages: one of the next LK_SCAN_RECORDS records (a window that moves with every
 * call). */
#define LK_SCAN_RECORDS 64u
bool lk_any_other_preempted(pvhint_t *h);

/* Set by a thread (not a ULT) while it relocks the mutex after a condvar wait (mutex.c): woken
 * alone (signal, or a broadcast that found no other thread waiting) or in a herd (a broadcast
 * that woke several threads, which now all want the mutex). */
enum { LK_RELOCK_NONE = 0, LK_RELOCK_ONE = 1, LK_RELOCK_HERD = 2 };
extern __thread uint8_t lk_cond_relock;

/* CPUs this process may run on (affinity at first call; cached). More threads than this that
 * wait for each other cannot all run: a spin then takes the CPU a peer needs. */
unsigned lk_nr_cpus(void);

/* ---- the caller's identity for owner checks ----
 * A thread: its tid (glibc's, cached; reset in a fork child). A ULT: 0x40000000 | its ULT id
 * (tids stay below 2^22), since the ULTs of one worker share the worker's tid. Both stay below
 * the mutex's GRANT bit (2^31). */
extern __thread int lk_tid_cache;
int lk_tid_slow(void);
static inline int lk_tid(void)
{
	int t = lk_tid_cache;
	return lk_likely(t != 0) ? t : lk_tid_slow();
}
static inline int lk_self_id(struct pvrt_ult *u)
{
	if (lk_likely(!u))
		return lk_tid();
	return (int)(0x40000000u | (uint32_t)(pvrt_thread_id(u) & 0x3fffffffu));
}

/* ---- fork ----
 * In a fork child only the forking thread exists; every record a parent thread left in a lock
 * (a condvar waiter node, a spinner-queue node, a once in progress, a mutex hand-off target)
 * belongs to nobody. lk_fork_gen counts the forks this process descends from (0 in the
 * original process; the child handler bumps it). Records stamped with it are recognised as
 * stale by a later generation and skipped, as glibc's once does with its fork generation. */
extern uint32_t lk_fork_gen;
static inline uint32_t lk_gen(void)
{
	/* Relaxed: changes only in a fork child's handler, before any other thread exists. */
	return __atomic_load_n(&lk_fork_gen, __ATOMIC_RELAXED);
}
/* A registered mutex hand-off target id (lk_self_id) that cannot collect a grant: a thread of
 * the parent, in a fork descendant (a system call, only there; never true in the original
 * process). A tid reused by a new thread of the child is taken for alive. */
bool lk_target_gone(uint32_t id);
void lk_spinq_atfork_child(void);

/* ---- parking ---- */

/*
 * Park on addr while *addr == val (rt_futex_wait semantics), counted as a park of class cls.
 * Not reported to the hint source (see common.c). Returns rt_futex_wait's result.
 */
int lk_park(uint32_t *addr, uint32_t val, clockid_t clk, const struct timespec *abstime,
	    enum pvrt_lock_class cls);
/* lk_park, cancellable (rt_futex_wait_cancel) if so asked. */
int lk_park_as(uint32_t *addr, uint32_t val, clockid_t clk, const struct timespec *abstime,
	       enum pvrt_lock_class cls, bool cancellable);

static inline int lk_wake(uint32_t *addr, int n)
{
	return rt_futex_wake(addr, n);
}

/* The kernel futex on a process-private word, for waits that only threads (never ULTs) make on
 * a word shared by all their waiters, so that one wake reaches all of them in one system call
 * (rt_futex wakes each thread waiter with a call of its own). errno is preserved. */
int lk_kwait(uint32_t *addr, uint32_t val);
void lk_kwake(uint32_t *addr, int n);

/* Wake one waiter, preferring one whose vCPU will run soon (see rt_futex_wake_hinted). */
static inline int lk_wake_one(uint32_t *addr)
{
	return rt_futex_wake_hinted(addr, lk_hints());
}

/* A small internal lock for short queue manipulations: the OS layer's three-state lock, its
 * sleepers parked through rt_futex (a ULT switches away instead of blocking its worker) and
 * counted as parks of the lock class cls that uses it. */
void lk_ilock_slow(uint32_t *w, enum pvrt_lock_class cls);
static inline void lk_ilock(uint32_t *w, enum pvrt_lock_class cls)
{
	/* Acquire: the queue written by the previous holder is visible to us. */
	if (lk_unlikely(!os_lock_try(w)))
		lk_ilock_slow(w, cls);
}
static inline void lk_iunlock(uint32_t *w)
{
	/* Release: our queue updates are visible to the next holder. */
	if (lk_unlikely(os_unlock_contended(w)))
		lk_wake(w, 1);
}

/* Validate a clock the way glibc does before waiting (timeouts: os_timespec_valid). */
static inline bool lk_valid_clock(clockid_t clk)
{
	return clk == CLOCK_REALTIME || clk == CLOCK_MONOTONIC;
}

/*
 * A bounded spin: lk_spin_init() once, then while (lk_spin_more(&sp)) { check; }. Only every
 * LK_SPIN_FREE-th check reads the clock (short waits are the common case and a clock read
 * costs about as much as a short critical section); the time budget starts at the first read.
 */
#define LK_SPIN_FREE 8
struct lk_spin {
	uint64_t deadline; /* 0 until the clock is first read */
	uint64_t budget;
	unsigned backoff;
	unsigned n;
};
static inline uint64_t lk_spin_budget(pvhint_t *h)
{
	return (h->valid & PVHINT_VALID_PREEMPTED) ? LK_SPIN_NS : LK_SPIN_BLIND_NS;
}
static inline void lk_spin_init(struct lk_spin *sp, uint64_t budget_ns)
{
	sp->deadline = 0;
	sp->budget = budget_ns;
	sp->backoff = 1;
	sp->n = 0;
}
/* Back off, then say whether the budget allows another check. */
static inline bool lk_spin_more(struct lk_spin *sp)
{
	lk_backoff(&sp->backoff);
	/* A clock read costs about what a check does: look at the time every LK_SPIN_FREE-th. */
	if ((++sp->n % LK_SPIN_FREE) != 0)
		return true;
	uint64_t now = os_now_ns();
	if (!sp->deadline) {
		sp->deadline = now + sp->budget;
		return true;
	}
	return now < sp->deadline;
}
/* Time spent since the clock was first read (0 if it never was). */
static inline uint64_t lk_spin_elapsed(const struct lk_spin *sp)
{
	return sp->deadline ? os_now_ns() + sp->budget - sp->deadline : 0;
}

/* ---- statistics ---- */
enum lk_stat { LK_ACQ, LK_CONTENDED, LK_SPIN_CUT, LK_PARKS, LK_HANDOFFS, LK_YIELDS, LK_NSTATS };
extern int lk_stats_on;
void lk_stat_add_slow(enum pvrt_lock_class cls, enum lk_stat s);
/* locks/stats.c: the counters of a process tree (the preload's PVRT_STATS_FILE). */
int lk_stats_share_with_children(void);
void lk_stats_atfork_child(void);
void lk_stats_snapshot(void);
bool lk_stats_snapshot_taken(void);
void lk_stats_sum(enum pvrt_lock_class cls, int which, struct pvrt_lock_stats *out);
enum { LK_SUM_ALL, LK_SUM_REPORTED, LK_SUM_OWN_UNREPORTED };
static inline void lk_stat(enum pvrt_lock_class cls, enum lk_stat s)
{
	/* Relaxed: a switch read often; a late change only loses or adds a few counts. */
	if (lk_unlikely(__atomic_load_n(&lk_stats_on, __ATOMIC_RELAXED)))
		lk_stat_add_slow(cls, s);
}

#endif /* PVRT_LOCKS_LK_H */
