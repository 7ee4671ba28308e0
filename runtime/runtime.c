/* SPDX-License-Identifier: MIT */
/*
 * Runtime life cycle: configuration, workers (one pinned kernel thread per CPU), the scheduler
 * loop, idle (adaptive halt-polling, then futex park), the stack-overflow handler, statistics.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct pvrt_rt pvrt_rt;

static __thread const char *errmsg = "no error";
static __thread char errbuf[160];
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

#define SCHED_STACK (256u * 1024) /* worker 0's scheduler context */
#define ALTSTACK    (64u * 1024)

int pvrt_fail(int err, const char *msg)
{
	errmsg = msg;
	return err;
}

static int failf(int err, const char *fmt, const char *a, const char *b)
{
	snprintf(errbuf, sizeof(errbuf), fmt, a, b);
	errmsg = errbuf;
	return err;
}

const char *pvrt_errmsg(void)
{
	return errmsg;
}

/* ---------------------------------------------------------------- configuration */

static int parse_u64(const char *s, uint64_t *out, bool suffixes)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == ' ')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	uint64_t mul = 1;
	if (suffixes && *end) {
		if ((*end == 'k' || *end == 'K') && !end[1])
			mul = 1024;
		else if ((*end == 'm' || *end == 'M') && !end[1])
			mul = 1024 * 1024;
		else
			return -EINVAL;
	} else if (*end) {
		return -EINVAL;
	}
	if (v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

/* "0-3,6": CPUs into set. -EINVAL on syntax errors. */
static int parse_cpus(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	const char *p = s;
	if (!*p)
		return -EINVAL;
	while (*p) {
		char *end;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		unsigned long a = strtoul(p, &end, 10), b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			b = strtoul(p, &end, 10);
			p = end;
		}
		if (a > b || b >= CPU_SETSIZE)
			return -EINVAL;
		for (unsigned long c = a; c <= b; c++)
			CPU_SET(c, set);
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			return -EINVAL;
	}
	return 0;
}

static const char *env_or(const char *given, const char *name)
{
	if (given)
		return given;
	const char *e = secure_getenv(name); /* none under AT_SECURE (setuid) */
	return e && *e ? e : NULL;
}

struct settings {
	unsigned nw;
	int cpus[PVRT_MAX_WORKERS];
	unsigned ncpus;
	size_t stack;
	const struct pvrt_sched_policy *pol;
	uint64_t poll_min, poll_max;
	int eager;
	uint64_t slack;
	uint64_t slice, handoff;
	int ult_tls;
};

/* PVRT_SLICE_NS / PVRT_HANDOFF_NS: a number of ns in [min, 10 s], or 0 / "off". */
static int parse_ns_off(int64_t given, const char *name, uint64_t def, uint64_t min, uint64_t *out)
{
	const char *e;
	*out = def;
	if (given == -1) {
		*out = 0;
	} else if (given) {
		*out = (uint64_t)given;
	} else if ((e = env_or(NULL, name))) {
		if (!strcmp(e, "off"))
			*out = 0;
		else if (parse_u64(e, out, false))
			return failf(-EINVAL, "%s: '%s' is not a number of ns (or 0, off)", name,
				     e);
	}
	if (given < -1 || (*out && (*out < min || *out > 10000000000ull)))
		return failf(-EINVAL, "%s: out of range (%s)", name,
			     min == 100000 ? "100 us .. 10 s, or 0/off"
					   : "50 us .. 10 s, or 0/off");
	return 0;
}

static int configure(const struct pvrt_config *c, struct settings *s)
{
	struct pvrt_config z;
	if (!c) {
		pvrt_config_init(&z);
	} else {
		if (c->size < sizeof(c->size))
			return pvrt_fail(-EINVAL, "pvrt_init: config not initialised "
						  "(pvrt_config_init or PVRT_CONFIG_INIT)");
		os_sized_in(&z, sizeof(z), c, c->size); /* fields past the program's: default */
	}
	c = &z;
	cpu_set_t mask, want;
	if (sched_getaffinity(0, sizeof(mask), &mask))
		return pvrt_fail(-errno, "pvrt_init: cannot read the affinity mask");
	const char *cpus = env_or(c->cpus, "PVRT_CPUS");
	if (cpus) {
		if (parse_cpus(cpus, &want))
			return failf(-EINVAL, "PVRT_CPUS: bad CPU list '%s' (e.g. \"0-3,6\")%s",
				     cpus, "");
		for (int i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &want) && !CPU_ISSET(i, &mask))
				return failf(-EINVAL,
					     "PVRT_CPUS: '%s' names a CPU outside the process's "
					     "affinity mask%s",
					     cpus, "");
	} else {
		want = mask;
	}
	s->ncpus = 0;
	for (int i = 0; i < CPU_SETSIZE && s->ncpus < PVRT_MAX_WORKERS; i++)
		if (CPU_ISSET(i, &want))
			s->cpus[s->ncpus++] = i;
	if (!s->ncpus)
		return pvrt_fail(-EINVAL, "PVRT_CPUS: no CPU selected");

	s->nw = c->workers;
	const char *e;
	if (!s->nw && (e = env_or(NULL, "PVRT_WORKERS"))) {
		uint64_t v;
		if (parse_u64(e, &v, false) || v < 1 || v > PVRT_MAX_WORKERS)
			return failf(-EINVAL, "PVRT_WORKERS: '%s' is not a number in 1..%s", e,
				     "256");
		s->nw = (unsigned)v;
	}
	if (!s->nw)
		s->nw = s->ncpus;
	if (s->nw > PVRT_MAX_WORKERS)
		return pvrt_fail(-EINVAL, "pvrt_init: workers must be in 1..256");

	size_t ps = pvrt_page_size();
	uint64_t st = c->stack_size;
	if (!st && (e = env_or(NULL, "PVRT_STACK_SIZE")) && (parse_u64(e, &st, true) || !st))
		return failf(-EINVAL, "PVRT_STACK_SIZE: '%s' is not a size (bytes, or with k/m)%s",
			     e, "");
	if (!st)
		st = 64 * 1024;
	if (st < PVRT_STACK_MIN || st > PVRT_STACK_MAX)
		return pvrt_fail(-EINVAL, "PVRT_STACK_SIZE: out of range (16 KiB .. 1 GiB)");
	s->stack = (st + ps - 1) / ps * ps + ps; /* usable size plus the guard page */

	const char *pol = env_or(c->sched, "PVRT_SCHED");
	s->pol = pvrt_sched_find(pol);
	if (!s->pol)
		return failf(-EINVAL, "PVRT_SCHED: unknown policy '%s' (accepted: %s)", pol,
			     pvrt_sched_names());

	s->poll_min = c->poll_min_ns;
	if (!s->poll_min && (e = env_or(NULL, "PVRT_POLL_MIN_NS")) &&
	    parse_u64(e, &s->poll_min, false))
		return failf(-EINVAL, "PVRT_POLL_MIN_NS: '%s' is not a number of ns%s", e, "");
	if (!s->poll_min)
		s->poll_min = 10000;
	s->poll_max = c->poll_max_ns;
	bool max_given = s->poll_max != 0;
	if (!max_given && (e = env_or(NULL, "PVRT_POLL_MAX_NS"))) {
		if (parse_u64(e, &s->poll_max, false))
			return failf(-EINVAL, "PVRT_POLL_MAX_NS: '%s' is not a number of ns%s", e,
				     "");
		max_given = true;
	}
	if (!max_given)
		s->poll_max = 200000;
	if (s->poll_max > 1000000000ull)
		return pvrt_fail(-EINVAL, "PVRT_POLL_MAX_NS: at most 1 s");
	if (s->poll_min > s->poll_max)
		s->poll_min = s->poll_max;

	const char *tm = env_or(c->timer, "PVRT_TIMER");
	if (!tm || !strcmp(tm, "lazy"))
		s->eager = 0;
	else if (!strcmp(tm, "eager"))
		s->eager = 1;
	else
		return failf(-EINVAL, "PVRT_TIMER: unknown mode '%s' (accepted: lazy, eager)%s", tm,
			     "");
	if (c->timer_slack_ns < -1 || c->timer_slack_ns > 1000000000)
		return pvrt_fail(-EINVAL, "pvrt_init: timer_slack_ns must be -1 or 0..1 s");
	s->ult_tls = c->ult_tls;
	if (!s->ult_tls && (e = env_or(NULL, "PVRT_ULT_TLS"))) {
		if (strcmp(e, "0") && strcmp(e, "1"))
			return failf(-EINVAL, "PVRT_ULT_TLS: '%s' is not 0 or 1%s", e, "");
		s->ult_tls = *e == '1';
	}
	if (s->ult_tls) {
#if defined(PVRT_ASAN) || defined(PVRT_TSAN)
		/* The sanitizers keep their per-thread state in the thread's TLS. */
		return pvrt_fail(-ENOTSUP,
				 "pvrt_init: per-ULT TLS does not work under a sanitizer");
#else
		const char *why = NULL;
		if (pvrt_tls_init(&why))
			return failf(-ENOSYS, "pvrt_init: per-ULT TLS: %s%s", why, "");
		s->stack += pvrt_tls_reserve();
#endif
	}
	s->slack = c->timer_slack_ns == -1 ? 0 : (uint64_t)c->timer_slack_ns;
	if (!c->timer_slack_ns) {
		s->slack = 50000;
		if ((e = env_or(NULL, "PVRT_TIMER_SLACK_NS")) &&
		    (parse_u64(e, &s->slack, false) || s->slack > 1000000000))
			return failf(-EINVAL, "PVRT_TIMER_SLACK_NS: '%s' is not a number of ns%s",
				     e, "");
	}
	/* Preemption: 10 ms, Go's forcePreemptNS (see README). TSan: off, see preempt.c. */
	int r = parse_ns_off(c->slice_ns, "PVRT_SLICE_NS", 10000000, 100000, &s->slice);
	if (r)
		return r;
#if defined(PVRT_TSAN)
	s->slice = 0;
#endif
	/* valgrind's signal frames hold the whole guest state, thread pointer included: a ULT
	 * preempted on one thread would return from the handler with that thread's TLS on another.
	 */
	if (pvrt_san_on_valgrind())
		s->slice = 0;
	return parse_ns_off(c->handoff_ns, "PVRT_HANDOFF_NS", 1000000, 50000, &s->handoff);
}

/* ---------------------------------------------------------------- stack overflow */

static size_t fmt_u64(char *p, uint64_t v, int base)
{
	char t[24];
	size_t n = 0;
	do {
		t[n++] = "0123456789abcdef"[v % (unsigned)base];
		v /= (unsigned)base;
	} while (v);
	for (size_t i = 0; i < n; i++)
		p[i] = t[n - 1 - i];
	return n;
}

static size_t put(char *p, const char *s)
{
	size_t n = strlen(s);
	memcpy(p, s, n);
	return n;
}

static void segv_handler(int sig, siginfo_t *si, void *uc)
{
	struct pvrt_worker *w = rt_tls_worker;
	struct pvrt_ult *u = w ? w->cur : NULL;
	uintptr_t a = (uintptr_t)si->si_addr;
	if (u && u->stack) {
		uintptr_t lo = (uintptr_t)u->stack, ps = u->guard;
		/* The guard page, or just below it (a big frame may jump over it). */
		if (a < lo + ps && a + 64 * 1024 >= lo) {
			/* Async-signal-safe formatting; then die of the same SIGSEGV. */
			char m[256];
			size_t n = put(m, "pvrt: stack overflow in ULT ");
			n += fmt_u64(m + n, u->id, 10);
			n += put(m + n, " (stack of ");
			n += fmt_u64(m + n, u->stack_len - ps, 10);
			n += put(m + n, " bytes at 0x");
			n += fmt_u64(m + n, lo + ps, 16);
			n += put(m + n, "): fault at 0x");
			n += fmt_u64(m + n, a, 16);
			n += put(m + n, " in its guard page\n");
			ssize_t r = write(STDERR_FILENO, m, n);
			(void)r;
			signal(SIGSEGV, SIG_DFL);
			return; /* the faulting access repeats and kills the process */
		}
	}
	const struct sigaction *o = &pvrt_rt.old_segv;
	if (o->sa_flags & SA_SIGINFO) {
		o->sa_sigaction(sig, si, uc);
	} else if (o->sa_handler == SIG_IGN) {
		return;
	} else if (o->sa_handler == SIG_DFL) {
		signal(SIGSEGV, SIG_DFL);
	} else {
		o->sa_handler(sig);
	}
}

static void altstack_on(struct pvrt_worker *w, stack_t *old)
{
	if (!pvrt_rt.segv_installed)
		return;
	w->altstack =
	    mmap(NULL, ALTSTACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->altstack == MAP_FAILED) {
		w->altstack = NULL;
		return;
	}
	stack_t ss = {.ss_sp = w->altstack, .ss_size = ALTSTACK};
	sigaltstack(&ss, old);
}

static void altstack_off(struct pvrt_worker *w, const stack_t *old)
{
	if (!w->altstack)
		return;
	stack_t dis = {.ss_flags = SS_DISABLE};
	sigaltstack(old && !(old->ss_flags & SS_DISABLE) ? old : &dis, NULL);
	munmap(w->altstack, ALTSTACK);
	w->altstack = NULL;
}

/* ---------------------------------------------------------------- idle */

static void kpark(uint32_t *word, uint64_t deadline)
{
	struct timespec ts, *tp = NULL;
	if (deadline != UINT64_MAX) {
		ts.tv_sec = (time_t)(deadline / 1000000000ull);
		ts.tv_nsec = (long)(deadline % 1000000000ull);
		tp = &ts;
	}
	os_futex_wait_abs(word, 1, CLOCK_MONOTONIC, tp);
}

/*
 * No work found: poll for a while, in the manner of KVM's halt-polling, then park on the
 * worker's futex word until woken or until its armed timer deadline.
 *
 * The poll window adapts per worker: an idle period that ended within poll_max grows it
 * (doubling from poll_min), a longer one halves it (below poll_min it drops to 0). A worker whose
 * vCPU is preempted now or lost time to the host since the last idle period does not poll at all:
 * its physical CPU is contended, and spinning would take time from whoever shares it.
 */
static void idle(struct pvrt_worker *w)
{
	uint64_t t0 = os_now_ns();
	bool contended = pvhint_vcpu_preempted(pvrt_rt.hint, w->vcpu);
	if (pvrt_rt.hint->valid & PVHINT_VALID_STEAL) {
		uint64_t s = pvhint_steal(pvrt_rt.hint, w->vcpu);
		contended |= s != w->last_steal;
		w->last_steal = s;
	}
	uint64_t poll = contended ? 0 : w->poll_ns;
	if (poll) {
		__atomic_fetch_add(&pvrt_rt.nsearching, 1, __ATOMIC_RELAXED);
		bool found = false;
		uint64_t now = t0;
		while (now - t0 < poll) {
			for (int i = 0; i < 32; i++)
				os_cpu_relax();
			now = os_now_ns();
			if (pvrt_has_work(w) || pvrt_timers_due(w, now) ||
			    __atomic_load_n(&pvrt_rt.stop, __ATOMIC_RELAXED)) {
				found = true;
				break;
			}
		}
		__atomic_fetch_sub(&pvrt_rt.nsearching, 1, __ATOMIC_RELAXED);
		if (found) {
			PVRT_STAT_INC(w, st_polls_found);
			return;
		}
	}

	/*
	 * Park. Announce it (park_word = 1, nparked + 1), then look for work once more. A thread
	 * that queues work for us raises our inj.n, then reads park_word (ult.c, inject_to); we
	 * set park_word, then read inj.n. All with seq_cst operations, so at least one of us sees
	 * the other: either we find the work here or it finds park_word == 1 and wakes us. stop is
	 * handled the same way by stop_workers. Work queued on other workers' rings only needs a
	 * best-effort wake-up (their owners run it anyway): nparked, read racily by notify_idle.
	 */
	__atomic_exchange_n(&w->park_word, 1, __ATOMIC_SEQ_CST);
	bool last = __atomic_add_fetch(&pvrt_rt.nparked, 1, __ATOMIC_RELAXED) == pvrt_rt.nw;
	uint64_t dl = __atomic_load_n(&w->armed, __ATOMIC_RELAXED);
	if (!pvrt_has_work(w) && !__atomic_load_n(&pvrt_rt.stop, __ATOMIC_SEQ_CST) &&
	    dl > os_now_ns()) {
		PVRT_STAT_INC(w, st_parks);
		/* Idle costs no memory either: give back the stacks of a past burst. A wake-up
		 * meanwhile is not lost (park_word is re-read below), only later. */
		pvrt_stacks_trim(w, last);
		pvhint_thread_park(pvrt_rt.hint);
		/* Acquire: a waker's queue writes are visible once we see its 1->0. */
		while (__atomic_load_n(&w->park_word, __ATOMIC_ACQUIRE) == 1) {
			kpark(&w->park_word, dl);
			if (dl != UINT64_MAX && os_now_ns() >= dl)
				break;
		}
		pvhint_thread_unpark(pvrt_rt.hint);
	}
	/* Whoever moves park_word 1->0 (we, or a waker) takes us out of nparked. */
	uint32_t one = 1;
	if (__atomic_compare_exchange_n(&w->park_word, &one, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED))
		__atomic_fetch_sub(&pvrt_rt.nparked, 1, __ATOMIC_RELAXED);
	pvrt_sysmon_notify(); /* it sleeps while every worker is parked */

	if (contended)
		return;
	uint64_t idle_ns = os_now_ns() - t0;
	if (idle_ns > pvrt_rt.poll_max) {
		w->poll_ns /= 2;
		if (w->poll_ns < pvrt_rt.poll_min)
			w->poll_ns = 0;
	} else if (w->poll_ns < pvrt_rt.poll_max) {
		w->poll_ns = w->poll_ns ? w->poll_ns * 2 : pvrt_rt.poll_min;
		if (w->poll_ns > pvrt_rt.poll_max)
			w->poll_ns = pvrt_rt.poll_max;
	}
}

/* ---------------------------------------------------------------- scheduler loop */

void pvrt_sched_loop(struct pvrt_worker *w)
{
	if (pvrt_worker_cur() != w)
		return; /* a fresh scheduler context whose thread lost the worker (sysmon.c) */
	for (;;) {
		struct pvrt_ult *u = pvrt_local_next(w);
		if (!u && pvrt_timers_run(w, os_now_ns()))
			u = pvrt_local_next(w);
		if (!u)
			u = pvrt_steal(w);
		if (u) {
			pvrt_switch(w, &w->sched, u, NULL, NULL);
			w = pvrt_worker_cur();
			if (unlikely(!w))
				return; /* this thread lost the worker: it becomes a spare */
			continue;
		}
		/* Worker 0 never stops here: the primary is running whenever stop is set. */
		if (w->idx && __atomic_load_n(&pvrt_rt.stop, __ATOMIC_ACQUIRE))
			return;
		idle(w);
	}
}

static void sched_entry(void *arg)
{
	pvrt_after_switch();
	pvrt_sched_loop(arg);
	/* The main thread lost worker 0 (sysmon.c): it waits to take it back at finalize. */
	pvrt_m_idle(pvrt_m_cur());
	abort(); /* unreachable: the main thread's pvrt_m_idle never returns */
}

static void *worker_main(void *arg)
{
	struct pvrt_worker *w = arg;
	struct pvrt_m *m = w->owner;
	pvrt_m_register(m, false);
	__atomic_store_n(&m->inrt, 1, __ATOMIC_RELAXED); /* a scheduler context is runtime */
	pvrt_tls_worker_start(w);
	rt_tls_worker = w;
	stack_t old;
	altstack_on(w, &old);
	if (pvrt_rt.emu) {
		pvhint_emu_attach(pvrt_rt.hint, w->vcpu);
		m->emu = 1;
	}
	if (pvrt_rt.slots) /* its record is its own thread's slot (registered here) */
		__atomic_store_n(&w->vcpu, (unsigned)pvhint_self_vcpu(), __ATOMIC_RELAXED);
	pvrt_san_thread_context(&w->sched.san);
	m->home.san = w->sched.san;
	__atomic_store_n(&w->cur, NULL, __ATOMIC_RELAXED); /* sysmon samples it */
	pvrt_sched_loop(w);
	pvrt_m_idle(m); /* returns at once when stopping; else after losing the worker */
	if (m->emu)
		pvhint_emu_detach(pvrt_rt.hint);
	altstack_off(w, &old);
	rt_tls_worker = NULL;
	pvrt_tls_m = NULL;
	return NULL;
}

/* ---------------------------------------------------------------- init / finalize */

static void free_workers(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct pvrt_worker *w = pvrt_rt.w[i];
		if (w->hot)
			pvrt_stack_free(w->hot, pvrt_rt.stack_size, w->hot_vg);
		pvrt_timers_fini(w);
		pvrt_ring_fini(&w->ring);
		pvrt_free(w, sizeof(*w));
	}
	pvrt_free(pvrt_rt.w, pvrt_rt.nw * sizeof(*pvrt_rt.w));
	pvrt_rt.w = NULL;
	pvrt_preempt_fini();
	pvrt_ms_fini();
}

static void *sched0_stack;
/* With per-ULT TLS: the TCB the thread that called pvrt_init runs its runtime contexts on once it
 * lost worker 0 (its own glibc TCB stays with the primary ULT; see pvrt_init). */
static void *main_ktp;
static unsigned sched0_vg;

static void stop_workers(unsigned started)
{
	/* Seq_cst store, then look at park words: pairs with idle()'s fence (no lost wake-up). */
	__atomic_store_n(&pvrt_rt.stop, 1, __ATOMIC_SEQ_CST);
	pvrt_sysmon_stop();
	for (unsigned i = 1; i < started; i++)
		pvrt_wake_worker(i);
	for (unsigned i = 1; i < started; i++)
		pthread_join(pvrt_rt.w[i]->thread, NULL);
	pvrt_spares_join();
}

static void teardown_primary(void)
{
	struct pvrt_worker *w0 = pvrt_rt.w[0];
	/* The primary's TSan fiber is the thread's own: not ours to destroy. */
	pvrt_rt.primary->ctx.san.tsan_fiber = NULL;
	if (pvrt_rt.emu)
		pvhint_emu_detach(pvrt_rt.hint);
	if (pvrt_rt.segv_installed) {
		altstack_off(w0, &pvrt_rt.old_altstack);
		sigaction(SIGSEGV, &pvrt_rt.old_segv, NULL);
		pvrt_rt.segv_installed = 0;
	}
	pthread_setaffinity_np(pthread_self(), sizeof(pvrt_rt.old_affinity), &pvrt_rt.old_affinity);
	pvrt_san_fiber_destroy(&w0->sched.san);
	if (sched0_stack)
		pvrt_stack_free(sched0_stack, SCHED_STACK, sched0_vg);
	sched0_stack = NULL;
	/* Not on it: finalize runs on the primary, on this thread's own TCB (pvrt_primary_home). */
	if (main_ktp)
		pvrt_tls_kernel_free(main_ktp);
	main_ktp = NULL;
	rt_tls_worker = NULL;
	pvrt_tls_m = NULL; /* the parent's kernel-thread record (sysmon.c) */
}

int pvrt_init(const struct pvrt_config *c)
{
	struct settings s;
	pthread_mutex_lock(&life_lock);
	if (pvrt_rt.running) {
		pthread_mutex_unlock(&life_lock);
		return pvrt_fail(-EBUSY, "pvrt_init: the runtime is already running");
	}
	int r = configure(c, &s);
	if (r) {
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	pvhint_t *h;
	r = pvhint_default(&h);
	if (r) {
		pthread_mutex_unlock(&life_lock);
		return failf(r, "pvrt_init: hint source: %s%s", pvhint_errmsg(), "");
	}
	memset(&pvrt_rt, 0, sizeof(pvrt_rt));
	pvrt_rt.hint = h;
	pvrt_rt.emu = pvhint_header(h)->source == PVHINT_SOURCE_EMU;
	pvrt_rt.slots = pvhint_header(h)->kind == PVHINT_KIND_THREAD;
	pvrt_rt.nw = s.nw;
	pvrt_rt.pol = s.pol;
	pvrt_rt.stack_size = s.stack;
	pvrt_rt.ult_tls = s.ult_tls;
	/* Inside libc too when ULTs own their TLS, and ld.so's locks can be seen (tls.c). */
	pvrt_rt.preempt_anywhere = s.ult_tls && pvrt_tls_ldso_known();
	pvrt_rt.poll_min = s.poll_min;
	pvrt_rt.poll_max = s.poll_max;
	pvrt_rt.eager_timers = s.eager;
	pvrt_rt.timer_slack = s.slack;
	pvrt_rt.slice = s.slice;
	pvrt_rt.handoff = s.handoff;
	pvrt_rt.w = pvrt_alloc(s.nw * sizeof(*pvrt_rt.w));
	if (!pvrt_rt.w)
		goto nomem;
	for (unsigned i = 0; i < s.nw; i++) {
		struct pvrt_worker *w = pvrt_alloc(sizeof(*w));
		if (!w) {
			pvrt_rt.nw = i;
			free_workers(i);
			goto nomem;
		}
		pvrt_rt.w[i] = w;
		w->owner = pvrt_alloc(sizeof(*w->owner));
		if (!w->owner) {
			pvrt_rt.nw = i + 1;
			free_workers(i + 1);
			goto nomem;
		}
		pvrt_m_add(w->owner, i == 0);
		w->idx = i;
		w->cpu = s.cpus[i % s.ncpus];
		unsigned nv = pvhint_nr_vcpus(h);
		/* Thread slots (bpf): slot 0 (no hints) until the worker's thread registers. */
		w->vcpu = pvrt_rt.emu && nv ? i % nv : pvrt_rt.slots ? 0 : (unsigned)w->cpu;
		w->rng[0] = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)os_now_ns();
		w->armed = UINT64_MAX;
#if PVRT_INJECT_WFCQ
		__cds_wfcq_init(&w->inj.head, &w->inj.tail);
#endif
	}
	pvrt_sched_view_init(&pvrt_rt.view);

	/* The calling thread becomes the primary ULT, running on worker 0. */
	struct pvrt_worker *w0 = pvrt_rt.w[0];
	struct pvrt_ult *p = pvrt_primary_alloc();
	if (!p || pvrt_stack_alloc(SCHED_STACK, pvrt_page_size(), &sched0_stack, &sched0_vg) ||
	    (pvrt_rt.ult_tls && !(main_ktp = pvrt_tls_kernel_create()))) {
		if (sched0_stack)
			pvrt_stack_free(sched0_stack, SCHED_STACK, sched0_vg);
		sched0_stack = NULL;
		pvrt_pool_fini();
		free_workers(s.nw);
		goto nomem;
	}
	pvrt_ult_init_primary(p);
	pvrt_rt.primary = p;
	size_t ps = pvrt_page_size();
	w0->sched.san.bottom = (char *)sched0_stack + ps;
	w0->sched.san.size = SCHED_STACK - ps;
	pvrt_san_fiber_create(&w0->sched.san);
	w0->sched.sp = pvrt_ctx_make((char *)sched0_stack + SCHED_STACK, sched_entry, w0);
	w0->owner->home.san = w0->sched.san;
	pvrt_m_register(w0->owner, true);
	w0->cur = p;
	w0->thread = pthread_self();
	pvrt_tls_worker_start(w0);
	/*
	 * With per-ULT TLS the primary ULT keeps this thread's glibc TCB wherever it runs (its
	 * __thread values, errno and pthread_self are the program's main thread's): after a
	 * hand-off of worker 0 it runs on another kernel thread, while this one, back from the
	 * kernel, runs its home context (sysmon.c) on main_ktp. Sharing one TCB between the two
	 * would mix the primary's TLS with that thread's, and the kernel-thread words of both.
	 */
	if (pvrt_rt.ult_tls) {
		p->tp = w0->tp;
		w0->owner->tp = main_ktp;
	}
	pthread_getaffinity_np(pthread_self(), sizeof(pvrt_rt.old_affinity), &pvrt_rt.old_affinity);
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(w0->cpu, &one);
	pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	const char *nosegv = secure_getenv("PVRT_NO_SEGV_HANDLER");
	if (!(c && c->no_segv_handler) && !(nosegv && !strcmp(nosegv, "1"))) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = segv_handler;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		if (!sigaction(SIGSEGV, &sa, &pvrt_rt.old_segv))
			pvrt_rt.segv_installed = 1;
		altstack_on(w0, &pvrt_rt.old_altstack);
	}
	if (pvrt_rt.emu) {
		pvhint_emu_attach(h, w0->vcpu);
		w0->owner->emu = 1;
	}
	if (pvrt_rt.slots)
		__atomic_store_n(&w0->vcpu, (unsigned)pvhint_self_vcpu(), __ATOMIC_RELAXED);
	rt_tls_worker = w0;
	pvrt_sysmon_prepare();
	r = pvrt_preempt_init();
	if (r) {
		teardown_primary();
		pvrt_pool_fini();
		free_workers(s.nw);
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	/* Release: workers and creators that see 'running' see the whole runtime. */
	__atomic_store_n(&pvrt_rt.running, 1, __ATOMIC_RELEASE);

	for (unsigned i = 1; i < s.nw; i++) {
		struct pvrt_worker *w = pvrt_rt.w[i];
		pthread_attr_t a;
		pthread_attr_init(&a);
		cpu_set_t cs;
		CPU_ZERO(&cs);
		CPU_SET(w->cpu, &cs);
		pthread_attr_setaffinity_np(&a, sizeof(cs), &cs);
		r = pthread_create(&w->thread, &a, worker_main, w);
		pthread_attr_destroy(&a);
		if (r) {
			stop_workers(i);
			teardown_primary();
			pvrt_pool_fini();
			free_workers(s.nw);
			__atomic_store_n(&pvrt_rt.running, 0, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&life_lock);
			return pvrt_fail(-r, "pvrt_init: cannot start a worker thread");
		}
	}
	r = pvrt_sysmon_start();
	if (r) {
		stop_workers(s.nw);
		teardown_primary();
		pvrt_pool_fini();
		free_workers(s.nw);
		__atomic_store_n(&pvrt_rt.running, 0, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	pthread_mutex_unlock(&life_lock);
	return 0;
nomem:
	pthread_mutex_unlock(&life_lock);
	return pvrt_fail(-ENOMEM, "pvrt_init: out of memory");
}

int pvrt_finalize(void)
{
	PVRT_RT_SCOPE();
	if (!__atomic_load_n(&pvrt_rt.running, __ATOMIC_ACQUIRE))
		return pvrt_fail(-ENXIO, "pvrt_finalize: the runtime is not running");
	if (rt_ult_current() != pvrt_rt.primary)
		return pvrt_fail(-EPERM, "pvrt_finalize: only the primary ULT (the thread that "
					 "called pvrt_init) may finalize");
	/* Wait for every other ULT; ult_exit wakes us when the count drops to 0. Then the
	 * primary's own key values are destroyed, as if it exited (their destructors may still
	 * use the runtime, so wait again afterwards). */
	for (;;) {
		pvrt_wait_nlive_zero();
		if (!pvrt_rt.primary->keys)
			break;
		pvrt_keys_run_destructors(&pvrt_rt.primary->keys);
	}
	pvrt_primary_home(); /* after a hand-off of worker 0 it may run on another thread */
	pthread_mutex_lock(&life_lock);
	stop_workers(pvrt_rt.nw);
	/* The last exiting ULT on worker 0 may have left its stack to a post action that ran
	 * when we resumed: all post actions are done now that every worker has stopped. */
	teardown_primary();
	pvrt_pool_fini();
	free_workers(pvrt_rt.nw);
	__atomic_store_n(&pvrt_rt.running, 0, __ATOMIC_RELEASE);
	pvrt_rt.nw = 0;
	pthread_mutex_unlock(&life_lock);
	return 0;
}

void pvrt_fork_child_reset(void)
{
	/*
	 * Only the forking thread exists here: the workers, their stacks and every other ULT are
	 * gone, and locks they held stay held. Forget the runtime without freeing what it owned
	 * (a bounded leak in the child), so that pvrt_init can start a new one with the caller
	 * as its primary.
	 */
	memset(&pvrt_rt, 0, sizeof(pvrt_rt));
	life_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	sched0_stack = NULL;
	main_ktp = NULL;
	rt_tls_worker = NULL;
	pvrt_tls_m = NULL; /* the parent's kernel-thread record (sysmon.c) */
}

unsigned pvrt_nworkers(void)
{
	return __atomic_load_n(&pvrt_rt.running, __ATOMIC_ACQUIRE) ? pvrt_rt.nw : 0;
}

int pvrt_worker_self(void)
{
	struct pvrt_worker *w = rt_tls_worker;
	return w ? (int)w->idx : -1;
}

static void sum_workers(struct pvrt_stats *s, unsigned lo, unsigned hi)
{
	for (unsigned i = lo; i < hi; i++) {
		struct pvrt_worker *w = pvrt_rt.w[i];
#define LD(f) __atomic_load_n(&w->f, __ATOMIC_RELAXED)
		s->ults_created += LD(st_created);
		s->switches += LD(st_switches);
		s->steals += LD(st_steals);
		s->parks += LD(st_parks);
		s->unparks += LD(st_unparks);
		s->polls_found += LD(st_polls_found);
		s->timer_adds += LD(st_timer_adds);
		s->timer_arms += LD(st_timer_arms);
		s->timer_fires += LD(st_timer_fires);
		s->preemptions += LD(st_preempts);
		s->handoffs += LD(st_handoffs);
#undef LD
	}
}

int pvrt_stats_read(struct pvrt_stats *out, size_t size)
{
	if (!out || size < offsetof(struct pvrt_stats, ults_created))
		return pvrt_fail(-EINVAL, "pvrt_stats_read: NULL or size below the header");
	struct pvrt_stats st = {0};
	int r = 0;
	if (!__atomic_load_n(&pvrt_rt.running, __ATOMIC_ACQUIRE))
		r = pvrt_fail(-ENXIO, "pvrt_stats_read: the runtime is not running");
	else {
		sum_workers(&st, 0, pvrt_rt.nw);
		st.stacks = __atomic_load_n(&pvrt_rt.stacks_mapped, __ATOMIC_RELAXED);
	}
	out->size = (uint32_t)os_sized_out(out, size, &st, sizeof(st));
	return r;
}

int pvrt_stats_read_worker(unsigned i, struct pvrt_stats *out, size_t size)
{
	if (!out || size < offsetof(struct pvrt_stats, ults_created))
		return pvrt_fail(-EINVAL, "pvrt_stats_read_worker: NULL or size below the header");
	struct pvrt_stats st = {0};
	int r = 0;
	if (!__atomic_load_n(&pvrt_rt.running, __ATOMIC_ACQUIRE))
		r = pvrt_fail(-ENXIO, "pvrt_stats_read_worker: the runtime is not running");
	else if (i >= pvrt_rt.nw)
		r = pvrt_fail(-EINVAL, "pvrt_stats_read_worker: no such worker");
	else
		sum_workers(&st, i, i + 1);
	out->size = (uint32_t)os_sized_out(out, size, &st, sizeof(st));
	return r;
}
