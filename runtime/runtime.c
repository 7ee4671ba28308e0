/* SPDX-License-Identifier: MIT */
/*
 * Runtime life cycle: errors, the stack-overflow handler, init/finalize (the primary ULT, starting
 * and stopping the workers), statistics. Configuration: config.c; the workers' scheduler loop and
 * idle: worker.c.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct rt_state rt_state;

static __thread const char *errmsg = "no error";
static __thread char errbuf[160];
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

#define SCHED_STACK (256u * 1024) /* worker 0's scheduler context */
#define ALTSTACK    (64u * 1024)

int rt_fail(int err, const char *msg)
{
	errmsg = msg;
	return err;
}

int rt_failf(int err, const char *fmt, const char *a, const char *b)
{
	snprintf(errbuf, sizeof(errbuf), fmt, a, b);
	errmsg = errbuf;
	return err;
}

const char *pvrt_errmsg(void)
{
	return errmsg;
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
	struct rt_worker *w = rt_tls_worker;
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
	const struct sigaction *o = &rt_state.old_segv;
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

void rt_altstack_on(struct rt_worker *w, stack_t *old)
{
	if (!rt_state.segv_installed)
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

void rt_altstack_off(struct rt_worker *w, const stack_t *old)
{
	if (!w->altstack)
		return;
	stack_t dis = {.ss_flags = SS_DISABLE};
	sigaltstack(old && !(old->ss_flags & SS_DISABLE) ? old : &dis, NULL);
	munmap(w->altstack, ALTSTACK);
	w->altstack = NULL;
}

/* ---------------------------------------------------------------- init / finalize */

static void free_workers(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct rt_worker *w = rt_state.w[i];
		if (w->hot)
			rt_stack_free(w->hot, rt_state.stack_size, w->hot_vg);
		rt_timers_fini(w);
		rt_ring_fini(&w->ring);
		rt_free(w, sizeof(*w));
	}
	rt_free(rt_state.w, rt_state.nw * sizeof(*rt_state.w));
	rt_state.w = NULL;
	rt_preempt_fini();
	rt_ms_fini();
}

static void *sched0_stack;
/* With per-ULT TLS: the TCB the thread that called pvrt_init runs its runtime contexts on once it
 * lost worker 0 (its own glibc TCB stays with the primary ULT; see pvrt_init). */
static void *main_ktp;
static unsigned sched0_vg;

static void stop_workers(unsigned started)
{
	/* Seq_cst store, then look at park words: pairs with idle()'s fence (no lost wake-up). */
	__atomic_store_n(&rt_state.stop, 1, __ATOMIC_SEQ_CST);
	rt_sysmon_stop();
	for (unsigned i = 1; i < started; i++)
		rt_wake_worker(i);
	for (unsigned i = 1; i < started; i++)
		pthread_join(rt_state.w[i]->thread, NULL);
	rt_spares_join();
}

static void teardown_primary(void)
{
	struct rt_worker *w0 = rt_state.w[0];
	/* The primary's TSan fiber is the thread's own: not ours to destroy. */
	rt_state.primary->ctx.san.tsan_fiber = NULL;
	if (rt_state.emu)
		pvhint_emu_detach(rt_state.hint);
	if (rt_state.segv_installed) {
		rt_altstack_off(w0, &rt_state.old_altstack);
		sigaction(SIGSEGV, &rt_state.old_segv, NULL);
		rt_state.segv_installed = 0;
	}
	pthread_setaffinity_np(pthread_self(), sizeof(rt_state.old_affinity),
			       &rt_state.old_affinity);
	rt_san_fiber_destroy(&w0->sched.san);
	if (sched0_stack)
		rt_stack_free(sched0_stack, SCHED_STACK, sched0_vg);
	sched0_stack = NULL;
	/* Not on it: finalize runs on the primary, on this thread's own TCB (rt_primary_home). */
	if (main_ktp)
		rt_tls_kernel_free(main_ktp);
	main_ktp = NULL;
	rt_tls_worker = NULL;
	rt_tls_ult = NULL;
	rt_tls_m = NULL; /* the parent's kernel-thread record (sysmon.c) */
}

int pvrt_init(const struct pvrt_config *c)
{
	struct rt_settings s;
	pthread_mutex_lock(&life_lock);
	if (rt_state.running) {
		pthread_mutex_unlock(&life_lock);
		return rt_fail(-EBUSY, "pvrt_init: the runtime is already running");
	}
	int r = rt_configure(c, &s);
	if (r) {
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	pvhint_t *h;
	r = pvhint_default(&h);
	if (r) {
		pthread_mutex_unlock(&life_lock);
		return rt_failf(r, "pvrt_init: hint source: %s%s", pvhint_errmsg(), "");
	}
	memset(&rt_state, 0, sizeof(rt_state));
	rt_state.hint = h;
	rt_state.emu = pvhint_header(h)->source == PVHINT_SOURCE_EMU;
	rt_state.slots = pvhint_header(h)->kind == PVHINT_KIND_THREAD;
	rt_state.can_lend = pvhint_can_yield(h);
	rt_state.nw = s.nw;
	rt_state.pol = s.pol;
	rt_state.stack_size = s.stack;
	rt_state.page_size = rt_page_size();
	rt_state.ult_tls = s.ult_tls;
	/* Inside libc too when ULTs own their TLS, and ld.so's locks can be seen (tls.c). */
	rt_state.preempt_anywhere = s.ult_tls && rt_tls_ldso_known();
	rt_state.poll_min = s.poll_min;
	rt_state.poll_max = s.poll_max;
	rt_state.eager_timers = s.eager;
	rt_state.timer_slack = s.slack;
	rt_state.slice = s.slice;
	rt_state.handoff = s.handoff;
	rt_state.w = rt_alloc(s.nw * sizeof(*rt_state.w));
	if (!rt_state.w)
		goto nomem;
	for (unsigned i = 0; i < s.nw; i++) {
		struct rt_worker *w = rt_alloc(sizeof(*w));
		if (!w) {
			rt_state.nw = i;
			free_workers(i);
			goto nomem;
		}
		rt_state.w[i] = w;
		w->owner = rt_alloc(sizeof(*w->owner));
		if (!w->owner) {
			rt_state.nw = i + 1;
			free_workers(i + 1);
			goto nomem;
		}
		rt_m_add(w->owner, i == 0);
		w->idx = i;
		w->cpu = s.cpus[i % s.ncpus];
		unsigned nv = pvhint_nr_vcpus(h);
		/* Thread slots (bpf): slot 0 (no hints) until the worker's thread registers. */
		w->vcpu = rt_state.emu && nv ? i % nv : rt_state.slots ? 0 : (unsigned)w->cpu;
		w->rng[0] = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)os_now_ns();
		w->armed = UINT64_MAX;
#if PVRT_INJECT_WFCQ
		__cds_wfcq_init(&w->inj.head, &w->inj.tail);
#endif
	}
	rt_sched_view_init(&rt_state.view);

	/* The calling thread becomes the primary ULT, running on worker 0. */
	struct rt_worker *w0 = rt_state.w[0];
	struct pvrt_ult *p = rt_primary_alloc();
	if (!p || rt_stack_alloc(SCHED_STACK, rt_page_size(), &sched0_stack, &sched0_vg) ||
	    (rt_state.ult_tls && !(main_ktp = rt_tls_kernel_create()))) {
		if (sched0_stack)
			rt_stack_free(sched0_stack, SCHED_STACK, sched0_vg);
		sched0_stack = NULL;
		rt_pool_fini();
		free_workers(s.nw);
		goto nomem;
	}
	rt_ult_init_primary(p);
	rt_sigmask_reset();
	if (rt_state.ult_tls)
		rt_sigmask_ref(p->sigmask);
	rt_state.primary = p;
	size_t ps = rt_page_size();
	w0->sched.san.bottom = (char *)sched0_stack + ps;
	w0->sched.san.size = SCHED_STACK - ps;
	rt_san_fiber_create(&w0->sched.san);
	w0->sched.sp = rt_ctx_make((char *)sched0_stack + SCHED_STACK, rt_sched_entry, w0);
	w0->owner->home.san = w0->sched.san;
	rt_m_register(w0->owner, true);
	w0->cur = p;
	w0->thread = pthread_self();
	rt_tls_worker_start(w0);
	/*
	 * With per-ULT TLS the primary ULT keeps this thread's glibc TCB wherever it runs (its
	 * __thread values, errno and pthread_self are the program's main thread's): after a
	 * hand-off of worker 0 it runs on another kernel thread, while this one, back from the
	 * kernel, runs its home context (sysmon.c) on main_ktp. Sharing one TCB between the two
	 * would mix the primary's TLS with that thread's, and the kernel-thread words of both.
	 */
	if (rt_state.ult_tls) {
		p->tp = w0->tp;
		w0->owner->tp = main_ktp;
		rt_tls_ult = p;
	}
	pthread_getaffinity_np(pthread_self(), sizeof(rt_state.old_affinity),
			       &rt_state.old_affinity);
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
		if (!sigaction(SIGSEGV, &sa, &rt_state.old_segv))
			rt_state.segv_installed = 1;
		rt_altstack_on(w0, &rt_state.old_altstack);
	}
	if (rt_state.emu) {
		w0->owner->emu = pvhint_emu_attach(h, w0->vcpu) == 0;
	}
	if (rt_state.slots)
		__atomic_store_n(&w0->vcpu, (unsigned)w0->owner->slot, __ATOMIC_RELAXED);
	rt_tls_worker = w0;
	rt_sysmon_prepare();
	r = rt_preempt_init();
	if (r) {
		teardown_primary();
		rt_pool_fini();
		free_workers(s.nw);
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	/* Release: workers and creators that see 'running' see the whole runtime. */
	__atomic_store_n(&rt_state.running, 1, __ATOMIC_RELEASE);

	for (unsigned i = 1; i < s.nw; i++) {
		struct rt_worker *w = rt_state.w[i];
		pthread_attr_t a;
		pthread_attr_init(&a);
		cpu_set_t cs;
		CPU_ZERO(&cs);
		CPU_SET(w->cpu, &cs);
		pthread_attr_setaffinity_np(&a, sizeof(cs), &cs);
		r = pthread_create(&w->thread, &a, rt_worker_main, w);
		pthread_attr_destroy(&a);
		if (r) {
			stop_workers(i);
			teardown_primary();
			rt_pool_fini();
			free_workers(s.nw);
			__atomic_store_n(&rt_state.running, 0, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&life_lock);
			return rt_fail(-r, "pvrt_init: cannot start a worker thread");
		}
	}
	r = rt_sysmon_start();
	if (r) {
		stop_workers(s.nw);
		teardown_primary();
		rt_pool_fini();
		free_workers(s.nw);
		__atomic_store_n(&rt_state.running, 0, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&life_lock);
		return r;
	}
	pthread_mutex_unlock(&life_lock);
	return 0;
nomem:
	pthread_mutex_unlock(&life_lock);
	return rt_fail(-ENOMEM, "pvrt_init: out of memory");
}

int pvrt_finalize(void)
{
	PVRT_RT_SCOPE();
	if (!__atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE))
		return rt_fail(-ENXIO, "pvrt_finalize: the runtime is not running");
	if (rt_ult_current() != rt_state.primary)
		return rt_fail(-EPERM, "pvrt_finalize: only the primary ULT (the thread that "
				       "called pvrt_init) may finalize");
	/* Wait for every other ULT; ult_exit wakes us when the count drops to 0. Then the
	 * primary's own key values are destroyed, as if it exited (their destructors may still
	 * use the runtime, so wait again afterwards). */
	for (;;) {
		rt_wait_nlive_zero();
		if (!rt_state.primary->keys)
			break;
		rt_keys_run_destructors(&rt_state.primary->keys);
	}
	rt_primary_home(); /* after a hand-off of worker 0 it may run on another thread */
	pthread_mutex_lock(&life_lock);
	stop_workers(rt_state.nw);
	/* The last exiting ULT on worker 0 may have left its stack to a post action that ran
	 * when we resumed: all post actions are done now that every worker has stopped. */
	teardown_primary();
	rt_pool_fini();
	free_workers(rt_state.nw);
	__atomic_store_n(&rt_state.running, 0, __ATOMIC_RELEASE);
	rt_state.nw = 0;
	pthread_mutex_unlock(&life_lock);
	return 0;
}

void rt_fork_child_reset(void)
{
	/*
	 * Only the forking thread exists here: the workers, their stacks and every other ULT are
	 * gone, and locks they held stay held. Forget the runtime without freeing what it owned
	 * (a bounded leak in the child), so that pvrt_init can start a new one with the caller
	 * as its primary.
	 */
	memset(&rt_state, 0, sizeof(rt_state));
	life_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	sched0_stack = NULL;
	main_ktp = NULL;
	rt_tls_worker = NULL;
	rt_tls_ult = NULL;
	rt_tls_m = NULL; /* the parent's kernel-thread record (sysmon.c) */
}

unsigned pvrt_nworkers(void)
{
	return __atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE) ? rt_state.nw : 0;
}

int pvrt_worker_self(void)
{
	struct rt_worker *w = rt_tls_worker;
	return w ? (int)w->idx : -1;
}

static void sum_workers(struct pvrt_stats *s, unsigned lo, unsigned hi)
{
	for (unsigned i = lo; i < hi; i++) {
		struct rt_worker *w = rt_state.w[i];
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
		s->lends += LD(st_lends);
		s->rescues += LD(st_rescues);
#undef LD
	}
}

int pvrt_stats_read(struct pvrt_stats *out, size_t size)
{
	if (!out || size < offsetof(struct pvrt_stats, ults_created))
		return rt_fail(-EINVAL, "pvrt_stats_read: NULL or size below the header");
	struct pvrt_stats st = {0};
	int r = 0;
	if (!__atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE))
		r = rt_fail(-ENXIO, "pvrt_stats_read: the runtime is not running");
	else {
		sum_workers(&st, 0, rt_state.nw);
		st.stacks = __atomic_load_n(&rt_state.stacks_mapped, __ATOMIC_RELAXED);
	}
	out->size = (uint32_t)os_sized_out(out, size, &st, sizeof(st));
	return r;
}

int pvrt_stats_read_worker(unsigned i, struct pvrt_stats *out, size_t size)
{
	if (!out || size < offsetof(struct pvrt_stats, ults_created))
		return rt_fail(-EINVAL, "pvrt_stats_read_worker: NULL or size below the header");
	struct pvrt_stats st = {0};
	int r = 0;
	if (!__atomic_load_n(&rt_state.running, __ATOMIC_ACQUIRE))
		r = rt_fail(-ENXIO, "pvrt_stats_read_worker: the runtime is not running");
	else if (i >= rt_state.nw)
		r = rt_fail(-EINVAL, "pvrt_stats_read_worker: no such worker");
	else
		sum_workers(&st, i, i + 1);
	out->size = (uint32_t)os_sized_out(out, size, &st, sizeof(st));
	return r;
}
