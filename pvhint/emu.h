/* SPDX-License-Identifier: MIT */
/* The overcommit emulator's internal types (see emu.c for the design). */
#ifndef PVHINT_EMU_H
#define PVHINT_EMU_H

#include "bpf/pvhint_bpf.h"
#include "internal.h"
#include "pvrt_os.h"

#include <limits.h>

#include <pthread.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define EMU_MAX_VCPUS 1024u
/* Directed yield: the kernel's default rate limit (guest-patches/0005, yield_interval_us). */
#define EMU_YIELD_INTERVAL_NS 50000u
_Static_assert(EMU_MAX_VCPUS <= PVHINT_BPF_EMU_VCPUS, "the program counts every emulated vCPU");

enum emu_mode { EMU_SLICE, EMU_NOISY, EMU_SCRIPT, EMU_RANDOM };

struct emu_conf {
	unsigned vcpus, pcpus;
	enum emu_mode mode;
	uint64_t quantum, period, ack_timeout; /* ns */
	double duty;
	uint64_t seed;
	unsigned noisy_lo, noisy_hi; /* noisy: the vCPUs the neighbour takes turns on */
	int sig;		     /* 0: choose a free real-time signal */
	unsigned rt;		     /* try SCHED_FIFO for the control thread */
	uint64_t ksleep;       /* slice/noisy: sample interval of threads' kernel state (0: off) */
	char export_path[200]; /* export=: publish the page in this file too */
};

int pvhint__emu_parse(const char *spec, const char *label, struct emu_conf *c);

/* Thread states (emu_thr.state). */
enum {
	THR_RUN = 0,	 /* running user code, or blocked in a call libpvhint does not see */
	THR_PARKED = 1,	 /* between pvhint_thread_park() and _unpark(): never signalled */
	THR_STOPREQ = 2, /* the control side sent the stop signal; the handler has not run yet */
	THR_STOPPED = 3, /* inside the stop handler, blocked until the vCPU runs again */
};

/*
 * One attached thread. Owned (freed) by the thread itself: at detach, at re-attach or at thread
 * exit, so the stop handler, which runs on that thread, can never see it freed. The emulator
 * links it into its vCPU's list; when the emulator is closed first it sets 'emu' to NULL
 * ("orphan") and forgets it.
 */
struct emu_thr {
	pid_t tid;
	unsigned vcpu;
	struct pvhint_emu *emu; /* NULL once orphaned; written under glock (and emu->lock) */
	uint32_t state;		/* THR_*; futex word the control side waits on for the ack */
	uint32_t hold;		/* futex word: 1 while the vCPU is descheduled */
	int statfd;		/* /proc/thread-self/stat of this thread: R or sleeping */
	const struct pvhint_record *krec; /* its bpf thread slot (sleeping byte), or NULL */
	int kslot;			  /* that slot (with krec) */
	bool ksleep;	    /* control side (emu->lock): last seen sleeping in the kernel */
	uint32_t in_hold;   /* in wait_hold(): blocked by the emulator, not by the program */
	uint32_t deferred;  /* a stop landed while the thread held an emulator lock */
	uint64_t stop_sent; /* control side: when the pending stop signal was sent */
	/* Written by the thread (handler), read by pvhint_emu_stats. */
	uint64_t stops, stopped_ns, eintr;
	struct emu_thr *next; /* the vCPU's list (emu->lock) */
};

struct emu_vcpu {
	struct emu_thr *threads;
	unsigned nr_att, nr_parked;
	unsigned nr_ksleep; /* attached threads with ksleep set (not parked) */
	bool desched;	    /* model: held off its pCPU (threads held) */
	bool pre;	    /* published preempted bit */
	bool neighbour;	    /* noisy: the neighbour holds this vCPU's pCPU */
	uint64_t pre_since; /* steal accounting: when 'pre' was last accounted */
	uint64_t until;	    /* script: resume at this time (0: not timed) */
	uint64_t asked_at;  /* slice: its threads' last directed yield (pvhint_yield_to) */
	uint64_t desched_at, neighbour_at; /* when 'desched' / 'neighbour' last turned true */
	/* statistics (emu->lock) */
	uint64_t nr_desched, ack_timeouts, kernel_skips, samples;
	uint64_t desched_ns, neighbour_ns; /* ended periods of each (the current one: *_at) */
	uint64_t gone_stops, gone_stopped_ns, gone_eintr; /* of threads already detached */
};

struct pvhint_emu {
	struct emu_conf c;
	uint32_t lock;	 /* emu_lock: the model, the lists, the records */
	uint32_t kick;	 /* futex word: bumped (under lock) to wake the control thread */
	uint32_t ctl_up; /* futex word: 1 once the control thread runs its own code (open waits) */
	pthread_t ctl;
	bool ctl_started, exiting;
	bool khalt; /* slice/noisy with ksleep > 0: kernel sleep halts a vCPU */
	bool dirty; /* a thread's ksleep changed: publish and step again */
	/*
	 * khalt with the bpf program's kernel-sleep events (kw.fd >= 0, see emu_kw_arm): the
	 * control thread sleeps in ppoll on the event ring and on kw_kick (an eventfd that
	 * emu_kick_ctl writes while ctl_asleep), and samples at once after an event (ksample_now).
	 */
	struct pvhint_kwatch kw;
	int kw_kick;
	bool ctl_asleep, ksample_now;
	uint32_t dead;	      /* in a child of fork(): inert (see fork_child in emu.c) */
	uint64_t next_sample; /* khalt: when the thread states are sampled next */
	struct pvhint_impl *im;
	struct pvhint_emu *gnext; /* every open emulator (emu_glock), for fork_child */
	struct pvhint_record *rec;
	struct emu_vcpu *vc;
	int *cur;	     /* slice: the vCPU each pCPU runs (-1: idle) */
	bool *busy;	     /* per pCPU: some vCPU on it runs (is_idle) */
	uint64_t *slice_end; /* slice: when the pCPU's current slice ends */
	unsigned next_attach;
	uint64_t asked_at; /* the last directed yield of a thread not attached */
	uint64_t t0, rng, last_flush;
};

/*
 * ---- shared by the emulator's files (emu.c: API, attach, park, fork; emu_stop.c: the stop
 * signal, stopping and sampling threads; emu_model.c: the page, the modes, the control thread).
 * Local to libpvhint (its version script exports only pvhint_*).
 */
#define EMU_IE __attribute__((tls_model("initial-exec")))
extern __thread struct emu_thr *emu_self EMU_IE; /* this thread's record (attached) */
extern __thread int emu_in_lock EMU_IE;		 /* holds emu_glock or an emulator lock */
/* Protects attach/detach against close (t->emu) and the stop signal's installation. */
extern uint32_t emu_glock;

/* The futex in the emulator's terms: a relative timeout in ns (0: none); wake everyone. */
static inline int emu_futex_wait(uint32_t *addr, uint32_t val, uint64_t rel_ns)
{
	struct timespec ts = {(time_t)(rel_ns / OS_NS_PER_SEC), (long)(rel_ns % OS_NS_PER_SEC)};

	return os_futex_wait(addr, val, rel_ns ? &ts : NULL);
}

static inline void emu_futex_wake(uint32_t *addr)
{
	os_futex_wake(addr, INT_MAX);
}

static inline struct pvhint_emu *emu_thr_emu(const struct emu_thr *t)
{
	/* Relaxed: only compared with a handle the caller keeps open; changed under emu_glock. */
	return __atomic_load_n(&t->emu, __ATOMIC_RELAXED);
}

/*
 * Runnable: some attached thread may run user code. Parked threads are known not to; with khalt,
 * neither are threads last seen sleeping in the kernel (a guest vCPU whose tasks all sleep
 * executes HLT and gives its pCPU up). The ksleep part is a sampled hint: it only decides whom the
 * model gives a pCPU to; whether a held thread gets stopped never depends on it (emu_send_stop
 * reads the state again, and emu_sample_threads keeps polling sleeping threads of held vCPUs).
 */
static inline bool emu_runnable(const struct pvhint_emu *e, const struct emu_vcpu *vc)
{
	return vc->nr_att > vc->nr_parked + (e->khalt ? vc->nr_ksleep : 0);
}

/* Wake the control thread (e->lock held): the model changed. */
static inline void emu_kick_ctl(struct pvhint_emu *e)
{
	__atomic_fetch_add(&e->kick, 1, __ATOMIC_RELAXED); /* ordered by the lock release */
	if (e->kw.fd < 0) {
		os_futex_wake(&e->kick, 1);
	} else if (e->ctl_asleep) {
		/* It set ctl_asleep under the lock before it dropped it: the eventfd stays
		 * readable until it reads it, so it sleeps through none of these. */
		e->ctl_asleep = false;
		uint64_t one = 1;
		/* Not write(): a cancellation point, and the caller may have a cancel pending
		 * while it holds the emulator's locks. It cannot fail: the count stays small. */
		(void)syscall(SYS_write, e->kw_kick, &one, sizeof(one));
	}
}

/* The kernel-sleep edges the program posts for vCPU v (emu->lock held; see emu_kw_arm). */
static inline void emu_kw_set_arm(struct pvhint_emu *e, unsigned v, uint8_t arm)
{
	if (e->kw.fd >= 0 && e->kw.arm[v] != arm)
		__atomic_store_n(&e->kw.arm[v], arm, __ATOMIC_RELAXED);
}

/* emu.c */
void emu_nap_ns(long ns);
void emu_set_ksleep(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t, bool sl);
void emu_lock_enter(uint32_t *m);
void emu_lock_leave(uint32_t *m);
void emu_ctl_sleep(struct pvhint_emu *e, uint64_t now, uint64_t until);
void emu_wait_hold(struct emu_thr *t);

/* emu_stop.c (emu->lock held, except the signal's installation: emu_glock held) */
int emu_sig_get(int want);
void emu_sig_put(void);
void emu_sig_fork_child(void);
int emu_sig_number(void);   /* the stop signal (0: none installed) */
void emu_sig_discard(void); /* drop stop signals queued for the calling thread */
bool emu_send_stop(struct pvhint_emu *e, struct emu_vcpu *vc, struct emu_thr *t);
void emu_wait_acks(struct pvhint_emu *e, struct emu_vcpu *vc);
bool emu_stop_begin(struct pvhint_emu *e, unsigned v, uint64_t now);
void emu_stop_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now);
void emu_run_vcpu(struct pvhint_emu *e, unsigned v, uint64_t now);
bool emu_poll_kblocked(struct pvhint_emu *e);
void emu_sample_threads(struct pvhint_emu *e);
bool emu_sampling_wanted(const struct pvhint_emu *e);
bool emu_kw_arm(struct pvhint_emu *e);
uint64_t emu_reap_acks(struct pvhint_emu *e, uint64_t now);

/* emu_model.c (emu->lock held, except the control thread's entry) */
void emu_set_pre(struct pvhint_emu *e, unsigned v, bool pre, uint64_t now);
void emu_publish(struct pvhint_emu *e, uint64_t now);
void *emu_control_main(void *arg);
int emu_yield_to(struct pvhint_emu *e, int self, unsigned v, uint64_t now);

#endif /* PVHINT_EMU_H */
