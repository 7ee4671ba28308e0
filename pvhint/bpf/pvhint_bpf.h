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

/* Registration table, direct-mapped by tid: entry tid & (PVHINT_BPF_DM - 1) holds
 * PVHINT_BPF_DM_ENTRY(tid, slot) or 0. Every context switch on the machine looks both tasks up,
 * and an array lookup is an indexed load where a hash lookup cost 70-80 ns (most of the switch
 * program's time). A tid whose entry is taken by another registered thread goes to the tid_slot
 * hash only, and 'dm_spill' (the program's .bss) counts those: the program consults the hash
 * only while it is non-zero. */
#define PVHINT_BPF_DM		       (1u << 16) /* a power of 2 */
#define PVHINT_BPF_DM_ENTRY(tid, slot) ((pvhint_u64)(slot) << 32 | (pvhint_u32)(tid))

/* vCPU mode: at most this many CPUs are published (records of the vpage map). */
#define PVHINT_BPF_MAXCPU 256u
/* vCPU mode: the records are refreshed from the host's at most this often (ns), by whichever CPU
 * switches tasks: a copy of all vCPUs costs one kernel read each. */
#define PVHINT_BPF_REFRESH_NS 20000u
/* vCPU mode: each CPU that runs a task also refreshes this often (ns) from a timer, so a vCPU
 * that keeps running one task (no switches) does not leave the page stale; see pvhint.bpf.c. */
#define PVHINT_BPF_TIMER_NS 500000u

/* The emulator's kernel-sleep events (pvhint.bpf.c, emu_note): at most this many emulated vCPUs
 * (EMU_MAX_VCPUS), and the edges a control thread arms per vCPU (emu_arm). */
#define PVHINT_BPF_EMU_VCPUS 1024u
#define PVHINT_BPF_EMU_HALT  1u /* post when the vCPU's last awake thread blocks */
#define PVHINT_BPF_EMU_WAKE  2u /* post when a thread of a vCPU with none awake runs again */

/* Per slot, private to the program, kept in the padding of the slot's record (at
 * PVHINT_BPF_PRIV_OFF; pvhint_abi.h: readers ignore it): every event of a thread writes its
 * record, and state on a line of its own cost each event a second cache miss. */
struct pvhint_bpf_slot {
	pvhint_u64 wait_start; /* runnable (woken or preempted) since, ns; 0: running or asleep */
	pvhint_u32 cpu1;       /* CPU + 1 whose 'waiting' bitmap holds the slot; 0: none */
	pvhint_u32 running;    /* on a CPU now */
};
#define PVHINT_BPF_PRIV_OFF 24u /* 8-byte aligned, after 'owner' */
_Static_assert(PVHINT_BPF_PRIV_OFF + sizeof(struct pvhint_bpf_slot) <= PVHINT_RECORD_SIZE,
	       "the program's slot state fits the record's padding");

/* Per CPU, private to the program. 'idle' and the counters are written by their CPU only; the
 * bitmap by every CPU (a slot's bit is cleared where its thread runs next): apart. */
struct pvhint_bpf_cpu {
	pvhint_u32 idle; /* the CPU runs its idle task */
	pvhint_u32 pad0;
	pvhint_u64 switches; /* registered threads switched out here (pvhint_bpf_stats) */
	pvhint_u64 missed;   /* of those, switched out twice without a switch-in seen */
	pvhint_u64 pad1[5];
	pvhint_u64 waiting[PVHINT_BPF_WORDS]; /* slots switched out here (not running) */
};

#endif /* PVHINT_BPF_H */
