/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * What the bpf source's BPF program (pvhint.bpf.c) and its loader (src_bpf.c) share: the map
 * sizes and the program's private per-slot and per-CPU state. The published page itself is
 * struct pvhint_header + struct pvhint_record of pvhint_abi.h.
 */
#ifndef PVHINT_BPF_H
#define PVHINT_BPF_H

#include <pvrt/pvhint_abi.h>

/* Thread slots per page, slot 0 included (reserved, never assigned). */
#define PVHINT_BPF_SLOTS 4096u /* a power of 2 */
/* The page map is an array of 64-byte elements: the header page is its first elements. */
#define PVHINT_BPF_HDR_ELEMS (PVHINT_HEADER_SIZE / PVHINT_RECORD_SIZE)
#define PVHINT_BPF_ELEMS     (PVHINT_BPF_HDR_ELEMS + PVHINT_BPF_SLOTS)
#define PVHINT_BPF_WORDS     (PVHINT_BPF_SLOTS / 64)

/* vCPU mode: at most this many CPUs are published (records of the vpage map). */
#define PVHINT_BPF_MAXCPU 256u
/* vCPU mode: the records are refreshed from the host's at most this often (ns), by whichever CPU
 * switches tasks: a copy of all vCPUs costs one kernel read each. */
#define PVHINT_BPF_REFRESH_NS 20000u

/* Per slot, private to the program. */
struct pvhint_bpf_slot {
	pvhint_u64 wait_start; /* runnable (woken or preempted) since, ns; 0: running or asleep */
	pvhint_u32 cpu1;       /* CPU + 1 whose 'waiting' bitmap holds the slot; 0: none */
	pvhint_u32 running;    /* on a CPU now */
};

/* Per CPU, private to the program. */
struct pvhint_bpf_cpu {
	pvhint_u64 waiting[PVHINT_BPF_WORDS]; /* slots switched out here (not running) */
	pvhint_u32 idle;		      /* the CPU runs its idle task */
	pvhint_u32 pad;
};

#endif /* PVHINT_BPF_H */
