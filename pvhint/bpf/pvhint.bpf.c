// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The bpf hint source's program: on the scheduler tracepoints it keeps, for every registered
 * thread slot, the record of pvhint_abi.h (kind PVHINT_KIND_THREAD) in a BPF_F_MMAPABLE array
 * that user space maps read-only:
 *   preempted  switched out while runnable (prev_state TASK_RUNNING, or preempted), cleared
 *              when it runs;
 *   sleeping   switched out not runnable, cleared when it runs again (at its wake-up on
 *              kernels without sched_info, where the wake-up programs are attached);
 *   steal      its run-queue wait (wake-up or preemption to switch-in), summed: the kernel's
 *              own sched_info.run_delay, copied at each switch-in under the record's version
 *              counter (no clock read of ours: a ktime read costs ~95 ns on a PVM guest, most
 *              of the program's cost);
 *   is_idle    the CPU it last ran on (or was moved to) runs its idle task now.
 * Threads register from user space (tid -> slot in tid_slot); sched_process_exit frees the slot.
 *
 * Per-CPU idle comes from sched_switch to and from the idle task (pid 0). When a CPU's idle
 * state changes, the records of the slots waiting on it (switched out there, a bitmap per CPU)
 * are rewritten, so a query stays one load of the record. That walk is bounded by nr_used.
 *
 * Kernel features: tp_btf (5.5), bpf_loop (5.17), atomic fetch ops (5.12), mmapable arrays
 * (5.5); every one is in Debian 12's 6.1. Types come from sched_min.h through CO-RE.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sched_min.h"
#include "pvhint_bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Header element 0 + the rest of the header page, then one record per slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PVHINT_BPF_ELEMS);
	__type(key, __u32);
	__type(value, struct pvhint_record);
} page SEC(".maps");

/* Registration, written by user space: kernel tid -> slot (tid_dm, and tid_slot for the tids
 * that do not fit there: see PVHINT_BPF_DM), and slot -> tid (the claim). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PVHINT_BPF_DM);
	__type(key, __u32);
	__type(value, __u64);
} tid_dm SEC(".maps");

/* Registered tids in tid_slot only (their tid_dm entry was taken). */
__u32 dm_spill;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PVHINT_BPF_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} tid_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PVHINT_BPF_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} slot_owner SEC(".maps");

/* max_entries set to the number of possible CPUs by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pvhint_bpf_cpu);
} cpus SEC(".maps");

#define TASK_RUNNING 0

static __always_inline struct pvhint_header *hdr(void)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&page, &k);
}

static __always_inline struct pvhint_record *rec_of(__u32 slot)
{
	__u32 k = PVHINT_BPF_HDR_ELEMS + slot;
	return bpf_map_lookup_elem(&page, &k);
}

/* The program's state of a slot, in its record's padding (pvhint_bpf.h). */
static __always_inline struct pvhint_bpf_slot *priv_of(struct pvhint_record *r)
{
	return r ? (struct pvhint_bpf_slot *)((char *)r + PVHINT_BPF_PRIV_OFF) : NULL;
}

/* The slot of kernel thread 'tid', or 0 (not registered; the idle task is never); *dm: found
 * in tid_dm. */
static __always_inline __u32 slot_find(int tid, int *dm)
{
	__u32 k = (__u32)tid & (PVHINT_BPF_DM - 1), s;
	__u64 *e;

	*dm = 0;
	if (tid <= 0)
		return 0;
	e = bpf_map_lookup_elem(&tid_dm, &k);
	if (e) {
		/* One 64-bit load: user space publishes an entry with one store. */
		__u64 v = *(volatile __u64 *)e;
		if ((__u32)v == (__u32)tid) {
			*dm = 1;
			s = (__u32)(v >> 32);
			return s < PVHINT_BPF_SLOTS ? s : 0;
		}
	}
	if (!*(volatile __u32 *)&dm_spill)
		return 0;
	k = (__u32)tid;
	__u32 *hs = bpf_map_lookup_elem(&tid_slot, &k);
	return hs && *hs > 0 && *hs < PVHINT_BPF_SLOTS ? *hs : 0;
}

static __always_inline __u32 slot_of(int tid)
{
	int dm;
	return slot_find(tid, &dm);
}

/* Thread 'tid''s slot with its private state and record, or 0 when not registered. */
static __always_inline __u32 slot_state(int tid, struct pvhint_bpf_slot **ps,
					struct pvhint_record **r)
{
	__u32 s = slot_of(tid);

	if (!s)
		return 0;
	*r = rec_of(s);
	*ps = priv_of(*r);
	return *ps && *r ? s : 0;
}

static __always_inline void waiting_bit(__u32 cpu1, __u32 slot, int set)
{
	/* masked, not only compared: the verifier keeps the bound through any code shape */
	__u32 cpu = cpu1 - 1, w = (slot & (PVHINT_BPF_SLOTS - 1)) / 64;
	struct pvhint_bpf_cpu *c;
	__u64 m = 1ull << (slot & 63);

	if (!cpu1 || w >= PVHINT_BPF_WORDS)
		return;
	c = bpf_map_lookup_elem(&cpus, &cpu);
	if (!c)
		return;
	if (set)
		__sync_fetch_and_or(&c->waiting[w], m);
	else
		__sync_fetch_and_and(&c->waiting[w], ~m);
}

/* First sight of a registered slot: publish its owner and raise nr_used. */
static __always_inline void note_owner(struct pvhint_record *r, __u32 slot, int tid)
{
	struct pvhint_header *h;

	if (r->owner == (__u32)tid)
		return;
	r->owner = (__u32)tid;
	h = hdr();
	if (!h)
		return;
	/* A lost race is harmless: the loser's slot is below the winner's or raised later. */
	for (int i = 0; i < 4; i++) {
		__u32 cur = h->nr_used;
		if (slot + 1 <= cur ||
		    __sync_val_compare_and_swap(&h->nr_used, cur, slot + 1) == cur)
			break;
	}
}

/* Set the record's steal to base + d (base: the old value when 'add') under the version
 * protocol (odd while written). The fetch forms are full barriers, so the steal store sits
 * between the two version changes. */
static __always_inline void write_steal(struct pvhint_record *r, int add, __u64 d)
{
	__u32 v = __sync_fetch_and_add(&r->version, 1);
	r->steal = (add ? r->steal : 0) + d;
	__sync_lock_test_and_set(&r->version, v + 2);
}

static __always_inline __u32 task_cpu(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return p->thread_info.cpu;
	return ((struct task_struct___old *)p)->cpu;
}

static __always_inline __u32 cpu_idle(__u32 cpu)
{
	struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);
	return c ? c->idle : 0;
}

struct walk {
	__u32 cpu;
	__u32 idle;
	__u32 base; /* walk_bit: the first slot of the word */
	__u64 w;    /* walk_bit: the word's bits not yet visited */
};

/* The index of a 64-bit word's lowest set bit: (w & -w) times a de Bruijn sequence puts a
 * distinct 6-bit pattern in the top bits for each bit position. */
static const __u8 debruijn64[64] = {0,	1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,
				    62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
				    63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
				    46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,	6};

/* bpf_loop callback: the next waiting slot of the word (one call per set bit). A callback of
 * its own, not a loop in walk_word: the verifier checks a callback once, a bounded loop once
 * per iteration (64 times the body with its branches made the switch program's verification
 * most of a load: 0.1-0.3 s of CPU). */
static long walk_bit(__u32 unused, struct walk *x)
{
	__u64 w = x->w;

	(void)unused;
	if (!w)
		return 1;
	x->w = w & (w - 1);
	__u32 s = x->base + debruijn64[((w & -w) * 0x03f79d71b4cb0a89ull) >> 58];
	struct pvhint_record *r = rec_of(s);
	struct pvhint_bpf_slot *p = priv_of(r);
	if (p && r && !p->running) /* a stale bit of a running thread: leave it 0 */
		r->is_idle = (__u8)x->idle;
	return 0;
}

/* bpf_loop callback: rewrite is_idle of the slots waiting on one CPU, one bitmap word. */
static long walk_word(__u32 i, struct walk *x)
{
	struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &x->cpu);

	if (!c || i >= PVHINT_BPF_WORDS)
		return 1;
	x->w = c->waiting[i];
	x->base = i * 64;
	if (x->w)
		bpf_loop(64, walk_bit, x, 0);
	return 0;
}

static __always_inline void walk_cpu(__u32 cpu, __u32 idle)
{
	struct pvhint_header *h = hdr();
	struct walk x = {.cpu = cpu, .idle = idle};
	__u32 used = h ? h->nr_used : PVHINT_BPF_SLOTS;

	if (used > PVHINT_BPF_SLOTS)
		used = PVHINT_BPF_SLOTS;
	bpf_loop((used + 63) / 64, walk_word, &x, 0);
}

/*
 * The emulator's exact kernel sleeps (pvhint/README.md "Halting in the kernel"). An emulator of
 * the loading process (pvhint/emu.c) names each attached thread's emulated vCPU (emu_vcpu1, by
 * slot; 0: none). The program counts, per emulated vCPU, the slots it holds awake (not blocked
 * in the kernel): emu_cv1 is the vCPU + 1 a slot is counted in, and every event of the slot's
 * thread moves it to where it belongs now, so a slot whose vCPU changed, or that was counted
 * before a switch the program missed, is right again at its next event. When a vCPU's last
 * awake thread blocks (it halts, as a guest vCPU executing HLT), or whenever a thread of a vCPU
 * armed for wake-ups runs again, the program posts to emu_events, if the control thread armed
 * that edge (emu_arm): the control thread sleeps on the ring and updates its model at once,
 * instead of at its next sample. It wakes for vCPU halts and wake-ups, as a host does for HLT
 * exits and kicks, not at every sleep of every thread. A wake-up is posted for any thread, not
 * only on a count leaving 0: a thread that detached or moved is counted where it was until its
 * next switch, and that count must not hide the wake-up of the thread the model waits for. A missed
 * edge (a full ring, a switch the program did not see, an arm racing an edge) is caught by the
 * emulator's periodic sample.
 */
__u32 emu_watch; /* an emulator uses the events: nothing is counted while 0 */
__u16 emu_vcpu1[PVHINT_BPF_SLOTS];
__u16 emu_cv1[PVHINT_BPF_SLOTS];
__u32 emu_awake[PVHINT_BPF_EMU_VCPUS];
__u8 emu_arm[PVHINT_BPF_EMU_VCPUS];

/* max_entries set to the page size by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} emu_events SEC(".maps");

/* Indices masked, not only compared: the verifier keeps the bound through any code shape. */
#define EMU_V(v) ((v) & (PVHINT_BPF_EMU_VCPUS - 1))

static __always_inline void emu_post(__u32 v, __u32 edge)
{
	/* Read after the count's atomic update (a full barrier): the control thread stores the
	 * arm, fences and reads the count (emu_kw_arm), so one of the two sees the other. */
	if (!(*(volatile __u8 *)&emu_arm[EMU_V(v)] & edge))
		return;
	/* A full ring already wakes the control thread, which re-reads every record. */
	bpf_ringbuf_output(&emu_events, &v, sizeof(v), 0);
}

/* Slot s's thread is awake (runs, or runnable) or blocked, as of this event. */
static __always_inline void emu_note(__u32 s, int awake)
{
	if (!*(volatile __u32 *)&emu_watch || s >= PVHINT_BPF_SLOTS)
		return;
	/* The compiler drops a mask it can prove redundant after the compare, and 6.1's verifier
	 * does not carry that compare's bound to the register it then indexes with. */
	barrier_var(s);
	s &= PVHINT_BPF_SLOTS - 1;
	__u32 v1 = *(volatile __u16 *)&emu_vcpu1[s], have = emu_cv1[s];
	__u32 want = awake ? v1 : 0;

	if (v1 > PVHINT_BPF_EMU_VCPUS || have > PVHINT_BPF_EMU_VCPUS)
		return; /* not a vCPU user space could name */
	if (want == have) {
		/* Blocked and not counted: attached since its last event (user space names the
		 * vCPU, only the program counts). Its vCPU halts if nobody there is awake. */
		/* An atomic read: a full barrier after our 'sleeping' store, as on the counted
		 * path, so the control thread's arm-fence-count sees one or the other. */
		if (!awake && v1 && !__sync_fetch_and_add(&emu_awake[EMU_V(v1 - 1)], 0))
			emu_post(v1 - 1, PVHINT_BPF_EMU_HALT);
		return;
	}
	emu_cv1[s] = (__u16)want;
	if (have) {
		/* The last one counted there blocks, or leaves after a detach or a move, which
		 * may be the halt its vCPU's real last thread could not post meanwhile. */
		if (__sync_fetch_and_sub(&emu_awake[EMU_V(have - 1)], 1) == 1)
			emu_post(have - 1, PVHINT_BPF_EMU_HALT);
	}
	if (want) {
		__sync_fetch_and_add(&emu_awake[EMU_V(want - 1)], 1);
		emu_post(want - 1, PVHINT_BPF_EMU_WAKE);
	}
}

/* Thread 'tid' (slot s) leaves CPU 'cpu' (its state c). The counters are for the loader
 * (pvhint_bpf_stats): switch-outs, and switch-outs of a thread whose switch-in the program did
 * not see (see pvhint/README.md: kernel 6.18 loses a few sched_switch calls to the program; the
 * next switch-out repairs the record). Plain increments: only this CPU writes them, with
 * interrupts off. */
static __always_inline void switch_out(struct pvhint_bpf_cpu *c, __u32 s, int tid, __u32 cpu,
				       int runnable, __u32 idle, __u64 now)
{
	struct pvhint_record *r = rec_of(s);
	struct pvhint_bpf_slot *p = priv_of(r);

	if (!p || !r)
		return;
	/* Out twice (not the first event after registration): a switch-in was not seen. */
	if (r->owner == (__u32)tid && !p->running)
		c->missed++;
	c->switches++;
	note_owner(r, s, tid);
	p->running = 0;
	p->wait_start = runnable ? now : 0;
	if (p->cpu1 != cpu + 1) {
		waiting_bit(p->cpu1, s, 0);
		p->cpu1 = cpu + 1;
	}
	waiting_bit(cpu + 1, s, 1);
	r->sleeping = !runnable;
	r->is_idle = (__u8)idle;
	r->preempted = runnable ? PVHINT_PREEMPTED : 0;
	emu_note(s, runnable); /* after 'sleeping': the control thread reads it at the event */
}

/* The kernel keeps every task's run-queue wait (sched_info) unless built without
 * CONFIG_SCHED_INFO: then the program times the waits itself (wait_start, a clock read at every
 * switch and wake-up of a registered thread). */
#define HAVE_SCHED_INFO bpf_core_field_exists(((struct task_struct *)0)->sched_info.last_queued)

/* next's run_delay including the wait that ends now: sched_info_arrive() adds it only after this
 * tracepoint, from rq->clock, which __schedule() updated before picking next. */
static __always_inline __u64 run_delay_now(struct task_struct *next)
{
	__u64 rd = next->sched_info.run_delay, q = next->sched_info.last_queued;

	if (q && bpf_core_field_exists(next->se.cfs_rq)) {
		struct cfs_rq *cr = next->se.cfs_rq;
		struct rq *rq = cr ? cr->rq : NULL;
		__u64 now = rq ? rq->clock : 0;
		if (now > q)
			rd += now - q;
	}
	return rd;
}

/* Thread 'tid' (slot s) runs on CPU 'cpu'. */
static __always_inline void switch_in(__u32 s, int tid, __u32 cpu, __u64 now,
				      struct task_struct *next)
{
	struct pvhint_record *r = rec_of(s);
	struct pvhint_bpf_slot *p = priv_of(r);

	if (!p || !r)
		return;
	note_owner(r, s, tid);
	p->running = 1;
	waiting_bit(p->cpu1, s, 0);
	p->cpu1 = 0;
	/* Every switch-in moves the version (by 2), with or without steal to add: a reader that
	 * sees the same version across a window knows the thread did not start running in it. */
	if (HAVE_SCHED_INFO)
		write_steal(r, 0, run_delay_now(next));
	else
		write_steal(r, 1, p->wait_start && now > p->wait_start ? now - p->wait_start : 0);
	p->wait_start = 0;
	r->preempted = 0;
	r->sleeping = 0;
	r->is_idle = 0;
	emu_note(s, 1);
	(void)cpu;
}

/*
 * vCPU mode (zero-patch KVM hints): on a KVM guest, the host writes each vCPU's steal time and
 * preempted byte into the guest kernel's per-CPU struct kvm_steal_time. The per-CPU symbol is
 * not reachable as a __ksym without CONFIG_KALLSYMS_ALL (the verifier resolves ksym addresses
 * through kallsyms), so the program derives it: a task's cfs_rq->rq is &per_cpu(runqueues, cpu),
 * and per-CPU variables keep their .data..percpu section distance in every CPU's area, so
 * &per_cpu(steal_time, cpu) = rq - off_rq + off_st, with both offsets from the kernel's BTF
 * (DATASEC .data..percpu), set by the loader. Each CPU learns its own address at its first
 * switch; while the page has users (vcpu_users), any switch then copies every known vCPU's record
 * into vpage (kind VCPU), at most every PVHINT_BPF_REFRESH_NS. A vCPU that runs one task for long
 * switches rarely, so each busy CPU also refreshes from a timer of its own every
 * PVHINT_BPF_TIMER_NS (vtimer_fire): armed by a switch to a task while the page has users,
 * re-armed only while that still holds and the CPU is not idle. The timers are per CPU because
 * a preempted vCPU's timer does not fire: the vCPUs that run refresh for it. They are set up
 * by pvhint_vtimers_init, which the loader runs when vCPU mode is first opened: bpf_timer_init
 * allocates, which must not happen under the run-queue lock that sched_switch holds.
 */
/* Set by the loader when vCPU mode is first opened. Globals, not read-only data: set after the
 * load, so that a process that never opens vCPU mode never parses the kernel's BTF for them. */
__u64 off_rq, off_st;
/* Users of the vCPU page now (open handles of the loading process, pvhintd's clients that asked
 * for it). The refresh runs only while there is one: it reads the clock at every switch (95 ns
 * on these guests) and makes the CPUs take turns on last_refresh, which cost the switch program
 * 2.7x its time in thread mode (about 370 ns per switch instead of 140 with bpf statistics on),
 * in every process of the machine, for a page most runs never map. */
__u32 vcpu_users;
const volatile __u32 nr_cpus = 1;
__u64 st_addr[PVHINT_BPF_MAXCPU];
__u64 last_refresh;

enum { VT_NEW, VT_IDLE, VT_ARMED };
struct vtimer {
	struct bpf_timer t;
	/* VT_*: set up (pvhint_vtimers_init), then written by its CPU's switches and its timer's
	 * softirq (which may run elsewhere on 6.1, where a timer cannot be pinned): a race costs
	 * a restart or one switch's delay, nothing else. */
	volatile __u32 state;
};
/* max_entries set to the number of possible CPUs by the loader, as cpus. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vtimer);
} vtimers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PVHINT_BPF_HDR_ELEMS + 1); /* set by the loader: + nr_cpus */
	__type(key, __u32);
	__type(value, struct pvhint_record);
} vpage SEC(".maps");

static long copy_vcpu(__u32 c, void *unused)
{
	struct kvm_steal_time st;
	__u32 k = PVHINT_BPF_HDR_ELEMS + c;
	struct pvhint_record *r;

	(void)unused;
	if (c >= PVHINT_BPF_MAXCPU || c >= nr_cpus)
		return 1;
	if (!st_addr[c] || bpf_probe_read_kernel(&st, sizeof(st), (void *)st_addr[c]))
		return 0;
	r = bpf_map_lookup_elem(&vpage, &k);
	if (!r)
		return 0;
	if (st.version & 1)
		return 0; /* the host is mid-update: the next refresh copies it */
	write_steal(r, 0, st.steal);
	r->preempted = st.preempted & PVHINT_PREEMPTED;
	return 0;
}

/* Copy every vCPU's record unless another CPU did within PVHINT_BPF_REFRESH_NS or does now. */
static __always_inline void vcpu_copy_all(__u64 now)
{
	__u64 last = last_refresh;
	if (now - last < PVHINT_BPF_REFRESH_NS ||
	    __sync_val_compare_and_swap(&last_refresh, last, now) != last)
		return; /* fresh, or another CPU is refreshing */
	bpf_loop(nr_cpus < PVHINT_BPF_MAXCPU ? nr_cpus : PVHINT_BPF_MAXCPU, copy_vcpu, NULL, 0);
}

/* The timer of CPU *key, in softirq context on that CPU: refresh, and come back while the page
 * has users and the CPU runs a task (a timer that woke an idle CPU stops: idle costs nothing). */
static int vtimer_fire(void *map, __u32 *key, struct vtimer *vt)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);

	(void)map;
	(void)key;
	if (!*(volatile __u32 *)&vcpu_users || !c || c->idle) {
		vt->state = VT_IDLE;
		return 0;
	}
	vcpu_copy_all(bpf_ktime_get_ns());
	if (bpf_timer_start(&vt->t, PVHINT_BPF_TIMER_NS, 0))
		vt->state = VT_IDLE; /* the next switch to a task tries again */
	return 0;
}

/* A switch to a task on a CPU whose timer is set up and not running starts it (vcpu_users > 0).
 * Starting only enqueues an hrtimer, as the scheduler's own hrtick does under this lock. */
static __always_inline void vtimer_arm(__u32 cpu)
{
	struct vtimer *vt = bpf_map_lookup_elem(&vtimers, &cpu);

	if (vt && vt->state == VT_IDLE && !bpf_timer_start(&vt->t, PVHINT_BPF_TIMER_NS, 0))
		vt->state = VT_ARMED;
}

static __always_inline void vcpu_refresh(struct task_struct *next, __u32 cpu, __u64 now)
{
	/* Each goes from 0 to its value once: with both non-zero both are right, whatever order
	 * the loads were done in (BPF has no acquire load before v4). */
	__u64 ost = *(volatile __u64 *)&off_st, orq = *(volatile __u64 *)&off_rq;

	if (!ost || !orq || cpu >= PVHINT_BPF_MAXCPU)
		return;
	if (!st_addr[cpu] && bpf_core_field_exists(next->se.cfs_rq)) {
		struct cfs_rq *cr = BPF_CORE_READ(next, se.cfs_rq);
		struct rq *rq = cr && bpf_core_field_exists(cr->rq) ? BPF_CORE_READ(cr, rq) : NULL;
		if (rq && BPF_CORE_READ(rq, cpu) == (int)cpu)
			st_addr[cpu] = (__u64)rq - orq + ost;
	}
	if (next->pid)
		vtimer_arm(cpu);
	vcpu_copy_all(now);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(pvhint_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);
	int ptid = prev->pid, ntid = next->pid;
	__u32 idle = ntid == 0, ps = slot_of(ptid), ns = slot_of(ntid);
	__u32 vcpu = *(volatile __u32 *)&vcpu_users;
	/* The clock only for vCPU mode, or to time waits without sched_info. */
	__u64 now = vcpu || ((ps || ns) && !HAVE_SCHED_INFO) ? bpf_ktime_get_ns() : 0;

	if (!c)
		return 0;
	if (ps) {
		/* Still on the run queue: preempted, or it yielded, or a signal cancelled its
		 * sleep (__schedule set it TASK_RUNNING again). Not: blocked, incl. EEVDF's delayed
		 * dequeue, which keeps a sleeper on the queue with a sleeping state. */
		int runnable = preempt || prev->__state == TASK_RUNNING;
		switch_out(c, ps, ptid, cpu, runnable, idle, now);
	}
	if (ns)
		switch_in(ns, ntid, cpu, now, next);
	if (c->idle != idle) {
		c->idle = idle;
		walk_cpu(cpu, idle);
	}
	if (vcpu)
		vcpu_refresh(next, cpu, now);
	return 0;
}

/* Attached only on kernels without CONFIG_SCHED_INFO (src_bpf.c load says why). */
static __always_inline int on_wakeup(struct task_struct *p)
{
	struct pvhint_bpf_slot *ps;
	struct pvhint_record *r;

	__u32 s = slot_state(p->pid, &ps, &r);

	if (!s || ps->running)
		return 0;
	if (!HAVE_SCHED_INFO && !ps->wait_start)
		ps->wait_start = bpf_ktime_get_ns();
	/* Stored only when changed: other CPUs read the record, each store costs them a miss. */
	__u8 idle = (__u8)cpu_idle(task_cpu(p));
	if (r->sleeping) {
		r->sleeping = 0;
		emu_note(s, 1);
	}
	if (r->is_idle != idle)
		r->is_idle = idle;
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(pvhint_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(pvhint_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

/* A waiting thread moved to another CPU's queue: it now waits on (and would run at) dest. */
SEC("tp_btf/sched_migrate_task")
int BPF_PROG(pvhint_migrate, struct task_struct *p, int dest_cpu)
{
	__u32 dest = (__u32)dest_cpu;
	struct pvhint_bpf_slot *ps;
	struct pvhint_record *r;
	__u32 s = slot_state(p->pid, &ps, &r);

	if (!s || ps->running)
		return 0;
	if (ps->cpu1 != dest + 1) {
		waiting_bit(ps->cpu1, s, 0);
		ps->cpu1 = dest + 1;
		waiting_bit(ps->cpu1, s, 1);
	}
	r->is_idle = (__u8)cpu_idle(dest);
	return 0;
}

/* The thread exits (runs in its context): free its slot for the next registration. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(pvhint_exit, struct task_struct *p)
{
	__u32 tid = (__u32)p->pid, k = tid & (PVHINT_BPF_DM - 1);
	struct pvhint_bpf_slot *ps;
	struct pvhint_record *r;
	int dm;
	__u32 s = slot_find(p->pid, &dm);
	__u64 *e = bpf_map_lookup_elem(&tid_dm, &k);

	r = s ? rec_of(s) : NULL;
	ps = priv_of(r);
	if (!ps || !r || !e)
		return 0;
	/* It runs (it is exiting) but its record says not: a switch-in the program did not see,
	 * which no later switch-out of this thread will count (see switch_out). */
	if (r->owner == tid && !ps->running) {
		__u32 cpu = bpf_get_smp_processor_id();
		struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);
		if (c)
			__sync_fetch_and_add(&c->missed, 1);
	}
	waiting_bit(ps->cpu1, s, 0);
	ps->cpu1 = 0;
	ps->wait_start = 0;
	ps->running = 0;
	emu_note(s, 0); /* out of its vCPU's count before the slot is reused */
	emu_vcpu1[s & (PVHINT_BPF_SLOTS - 1)] = 0;
	write_steal(r, 0, 0); /* the next owner starts from 0 */
	r->preempted = 0;
	r->sleeping = 0;
	r->is_idle = 0;
	r->owner = 0;
	/* The claim last: a new owner never sees the old thread's state. The tid_dm entry is
	 * cleared only if it is still ours (user space fills free entries with a compare and swap).
	 */
	if (dm)
		__sync_val_compare_and_swap(e, PVHINT_BPF_DM_ENTRY(tid, s), 0);
	/* dm_spill counts the hash's entries (src_bpf.c claim_local), stale ones included. */
	if (!bpf_map_delete_elem(&tid_slot, &tid))
		__sync_fetch_and_sub(&dm_spill, 1);
	bpf_map_delete_elem(&slot_owner, &s);
	return 0;
}

/*
 * A served instance (pvhint_bpf_serve) attaches the switch and migrate programs only while a
 * client wants hints; events between are not seen. Before it attaches them again it runs this
 * (BPF_PROG_TEST_RUN of a syscall program, the only writer of the frozen page besides the
 * tracepoints) to make every record say what a thread that runs says: not preempted, not
 * sleeping, not on an idle CPU's waiting list. Each thread's next switch-out then tells the
 * truth again; until then a stale "preempted" of a thread that has run since would keep
 * spinners off a running owner. Steal is the kernel's run_delay (kept across the gap); on
 * kernels without sched_info the waits of the gap are not timed.
 */
static long reset_slot(__u32 s, void *unused)
{
	struct pvhint_record *r = rec_of(s);
	struct pvhint_bpf_slot *p = priv_of(r);

	(void)unused;
	if (!s)
		return 0; /* record 0 stays all zero */
	if (!p || !r)
		return 1;
	p->running = 1;
	p->cpu1 = 0;
	p->wait_start = 0;
	r->preempted = 0;
	r->sleeping = 0;
	r->is_idle = 0;
	return 0;
}

static long reset_cpu(__u32 cpu, void *unused)
{
	struct pvhint_bpf_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);

	(void)unused;
	if (!c)
		return 1;
	/* Not idle: the CPU's next switch to its idle task rewrites it (with nobody waiting). */
	c->idle = 0;
	for (int i = 0; i < PVHINT_BPF_WORDS; i++)
		c->waiting[i] = 0;
	return 0;
}

/* Set up every CPU's refresh timer (loader, BPF_PROG_TEST_RUN, when vCPU mode is first opened). A
 * timer that cannot be set up stays VT_NEW: its CPU refreshes at switches only. */
SEC("syscall")
int pvhint_vtimers_init(void *ctx)
{
	(void)ctx;
	for (__u32 c = 0; c < PVHINT_BPF_MAXCPU && c < nr_cpus; c++) {
		__u32 k = c;
		struct vtimer *vt = bpf_map_lookup_elem(&vtimers, &k);
		if (!vt || vt->state != VT_NEW)
			continue;
		if (bpf_timer_init(&vt->t, &vtimers, 1 /* CLOCK_MONOTONIC */) ||
		    bpf_timer_set_callback(&vt->t, vtimer_fire))
			continue;
		vt->state = VT_IDLE;
	}
	return 0;
}

SEC("syscall")
int pvhint_reset(void *ctx)
{
	struct pvhint_header *h = hdr();
	__u32 used = h ? h->nr_used : PVHINT_BPF_SLOTS;

	(void)ctx;
	if (used > PVHINT_BPF_SLOTS)
		used = PVHINT_BPF_SLOTS;
	bpf_loop(used, reset_slot, NULL, 0);
	bpf_loop(nr_cpus < PVHINT_BPF_MAXCPU ? nr_cpus : PVHINT_BPF_MAXCPU, reset_cpu, NULL, 0);
	return 0;
}
