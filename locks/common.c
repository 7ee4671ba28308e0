/* SPDX-License-Identifier: MIT */
/* Shared by all pvrt locks: hint handles, thread ids, parking, the internal lock, statistics. */
#define _GNU_SOURCE
#include "lk.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- hint handles ---- */

/* A handle of source none: no records, so every query answers false. */
static pvhint_t lk_none_handle;
pvhint_t *lk_hints_ptr;		 /* what the locks read (override or default) */
static pvhint_t *lk_default_ptr; /* pvhint_default(): parking is reported there */
static int lk_hints_state;	 /* 0 not opened, 1 opening, 2 open */

static void lk_open_default(void)
{
	int st = 0;
	/* Only one thread opens the default handle; a thread that re-enters (the hint library may
	 * take a lock of its own while opening) or races sees state 1 and uses the none handle
	 * meanwhile: hints are advisory, so reading none for a moment is always correct. */
	if (!__atomic_compare_exchange_n(&lk_hints_state, &st, 1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return;
	pvhint_t *h = NULL;
	/* On failure pvhint_default leaves h at a handle of source none (its contract). */
	(void)pvhint_default(&h);
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

pvhint_t *lk_hints_slow(void)
{
	lk_open_default();
	pvhint_t *h = __atomic_load_n(&lk_hints_ptr, __ATOMIC_ACQUIRE);
	return h ? h : &lk_none_handle;
}

static pvhint_t *lk_park_handle(void)
{
	/* Acquire: pairs with the release store in lk_open_default(). */
	pvhint_t *h = __atomic_load_n(&lk_default_ptr, __ATOMIC_ACQUIRE);
	if (lk_unlikely(!h)) {
		lk_open_default();
		h = __atomic_load_n(&lk_default_ptr, __ATOMIC_ACQUIRE);
	}
	return h;
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

bool lk_any_other_preempted(pvhint_t *h)
{
	uint32_t n = pvhint_nr_vcpus(h);
	int self = pvhint_self_vcpu();
	for (uint32_t v = 0; v < n; v++)
		if ((int)v != self && pvhint_vcpu_preempted(h, v))
			return true;
	return false;
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

static void lk_stats_reset(void);

static void lk_atfork_child(void)
{
	/* The forking thread has a new tid in the child. */
	lk_tid_cache = 0;
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
	/* A child counts its own events only (the copied counts are the parent's). */
	lk_stats_reset();
}

__attribute__((constructor)) static void lk_init(void)
{
	pthread_atfork(NULL, NULL, lk_atfork_child);
}

/* ---- parking ---- */

/* Set while this thread is inside pvhint_thread_park/unpark: the hint source may take locks of
 * its own (under the preload its pthread mutexes are ours), and a park inside must not call back
 * into it. */
static __thread int lk_in_hint __attribute__((tls_model("initial-exec")));

pvhint_t *lk_park_begin(enum pvrt_lock_class cls)
{
	pvhint_t *ph = lk_park_handle();
	/* A ULT does not block its worker: it switches away, and the runtime reports the worker's
	 * own idle parking. (It must not touch lk_in_hint either: it may resume on another worker,
	 * whose thread-local data another ULT may be using.) */
	bool tell = ph && ph != &lk_none_handle && !lk_in_hint && !lk_self_ult();
	lk_stat(cls, LK_PARKS);
	if (tell) {
		lk_in_hint = 1;
		pvhint_thread_park(ph);
		lk_in_hint = 0;
	}
	return tell ? ph : NULL;
}

void lk_park_end(pvhint_t *told)
{
	if (!told)
		return;
	lk_in_hint = 1;
	pvhint_thread_unpark(told);
	lk_in_hint = 0;
}

int lk_park(uint32_t *addr, uint32_t val, clockid_t clk, const struct timespec *abstime,
	    enum pvrt_lock_class cls)
{
	pvhint_t *told = lk_park_begin(cls);
	int r = pvrt_futex_wait(addr, val, clk, abstime);
	lk_park_end(told);
	return r;
}

void lk_ilock_slow(uint32_t *w)
{
	/* Drepper's three-state lock: 2 means "maybe waiters", so the unlocker wakes one.
	 * Acquire on success: see lk_ilock(). */
	uint32_t c = __atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		lk_park(w, 2, CLOCK_MONOTONIC, NULL, PVRT_LOCK_COND);
		c = __atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE);
	}
}

/* ---- statistics ----
 * Each thread counts into its own block (single writer: relaxed load + store), taken from a
 * static pool so counting never allocates (malloc may itself take a pthread mutex). Blocks are
 * never reused, so counts of exited threads remain in the sums. Past the pool, threads share one
 * block with atomic adds. */
struct lk_tstats {
	uint64_t v[PVRT_LOCK_NCLASSES][LK_NSTATS];
};
#define LK_POOL 1024
struct lk_statmem {
	struct lk_tstats pool[LK_POOL];
	struct lk_tstats shared; /* past the pool */
	unsigned used;		 /* blocks handed out */
};
static struct lk_statmem lk_sm_own;
/* The counters: the process's own, or a MAP_SHARED region that forked children count into too
 * (lk_stats_share_with_children). Switched only before counting starts. */
static struct lk_statmem *lk_sm = &lk_sm_own;
static bool lk_sm_shared;
#define lk_pool	     (lk_sm->pool)
#define lk_shared    (lk_sm->shared)
#define lk_pool_used (lk_sm->used)
static __thread struct lk_tstats *lk_my __attribute__((tls_model("initial-exec")));

int lk_stats_share_with_children(void)
{
	void *p = mmap(NULL, sizeof(struct lk_statmem), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	lk_sm = p;
	lk_sm_shared = true;
	return 0;
}
int lk_stats_on;

void lk_stat_add_slow(enum pvrt_lock_class cls, enum lk_stat s)
{
	struct lk_tstats *t = lk_my;
	if (!t) {
		unsigned i = __atomic_fetch_add(&lk_pool_used, 1, __ATOMIC_RELAXED);
		t = i < LK_POOL ? &lk_pool[i] : &lk_shared;
		lk_my = t;
	}
	uint64_t *p = &t->v[cls][s];
	/* Relaxed: counters; readers only need eventually consistent sums. */
	if (t == &lk_shared)
		__atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
	else
		__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static void lk_stats_reset(void)
{
	if (lk_sm_shared) {
		/* Counting into the parent's region: the forking thread's block is the parent
		 * thread's (one writer per block), so the child takes a block of its own. The
		 * block counter is atomic in the shared region, across processes too. */
		lk_my = NULL;
		return;
	}
	/* Only the forking thread exists in the child: plain writes are race-free. Only the used
	 * blocks are cleared (no page of an unused pool is touched). */
	unsigned used = lk_pool_used < LK_POOL ? lk_pool_used : LK_POOL;
	if (used)
		memset(lk_pool, 0, used * sizeof(lk_pool[0]));
	if (lk_pool_used > LK_POOL)
		memset(&lk_shared, 0, sizeof(lk_shared));
	lk_pool_used = 0;
	lk_my = NULL;
}

void pvrt_locks_stats_enable(bool on)
{
	__atomic_store_n(&lk_stats_on, on ? 1 : 0, __ATOMIC_RELAXED);
}

int pvrt_locks_stats_get(enum pvrt_lock_class cls, struct pvrt_lock_stats *out)
{
	if ((unsigned)cls >= PVRT_LOCK_NCLASSES || !out)
		return -EINVAL;
	uint64_t sum[LK_NSTATS] = {0};
	unsigned n = __atomic_load_n(&lk_pool_used, __ATOMIC_RELAXED);
	if (n > LK_POOL)
		n = LK_POOL;
	for (unsigned i = 0; i < n; i++)
		for (int s = 0; s < LK_NSTATS; s++)
			sum[s] += __atomic_load_n(&lk_pool[i].v[cls][s], __ATOMIC_RELAXED);
	for (int s = 0; s < LK_NSTATS; s++)
		sum[s] += __atomic_load_n(&lk_shared.v[cls][s], __ATOMIC_RELAXED);
	out->acquisitions = sum[LK_ACQ];
	out->contended = sum[LK_CONTENDED];
	out->spin_cut = sum[LK_SPIN_CUT];
	out->parks = sum[LK_PARKS];
	out->handoffs = sum[LK_HANDOFFS];
	return 0;
}

const char *pvrt_lock_class_name(enum pvrt_lock_class cls)
{
	static const char *const names[] = {"mutex",	"rwlock",  "cond",
					    "spinlock", "barrier", "sem"};
	return (unsigned)cls < PVRT_LOCK_NCLASSES ? names[cls] : "?";
}
