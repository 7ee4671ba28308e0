/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * pvhint ABI: the page that carries per-vCPU scheduling hints to user space.
 *
 * This header is the single definition of that page. The guest kernel patches
 * (guest-patches/) define the kernel's part in include/uapi/linux/pvhint.h: the
 * same header block (the kernel's source value only, its reserved words zero)
 * over struct kvm_steal_time records; the other sources, the thread-slot fields
 * and the device path are this library's own. Every hint source of libpvhint
 * (kvm, emu, bpf, none) publishes exactly this format, so nothing above
 * libpvhint can tell the sources apart.
 *
 * Layout of the mapping (all offsets in bytes, little endian, read-only):
 *
 *   0                 struct pvhint_header   (one page: PVHINT_HEADER_SIZE)
 *   header_size       struct pvhint_record[nr_records], each record_stride bytes
 *                     (record i describes vCPU i, i.e. the guest's CPU number i, or, when
 *                     the header's kind is PVHINT_KIND_THREAD, thread slot i: see below)
 *   ...               zero padding up to a page boundary
 *
 * Records keep the exact layout of KVM's struct kvm_steal_time so that the
 * host's writes land in the mapped page with no copy: the kernel maps the very
 * pages it registered with MSR_KVM_STEAL_TIME.
 *
 * Contract for the kernel (kvm) source
 * ------------------------------------
 *  - Device: a misc character device, PVHINT_DEV_PATH ("/dev/pvhint", mode 0400
 *    root's unless the administrator grants a group; present only when the host
 *    offers steal time), whose mmap() at offset 0
 *    returns the header page followed by the record pages themselves (no
 *    copy). The total size is header_size + round_up(nr_records *
 *    record_stride, page size). Mappings are shared and read-only: PROT_EXEC
 *    fails with EPERM, PROT_WRITE with EACCES (the device opens O_RDONLY) or
 *    EPERM, mprotect() to write or execute with EACCES, mremap() growth with
 *    EFAULT, and offsets or lengths beyond the area with ENXIO. A reader maps
 *    the header page first, checks magic and abi_version, then maps the whole
 *    area.
 *  - The header is written once at boot and never changes afterwards, except
 *    'valid', which may gain bits when the host starts providing a field
 *    (e.g. after a CPU comes online); readers must tolerate that.
 *  - is_idle is provided when the host offers KVM_FEATURE_PCPU_IS_IDLE
 *    (CPUID 0x40000001 bit 18, host-patches/; QEMU passes it to a guest with
 *    -cpu host,migratable=no); the header then has PVHINT_VALID_IS_IDLE.
 *  - Records of CPUs that never came online are all zero. A CPU taken offline
 *    keeps its last values (zeroing them would restart the host's steal at 0
 *    and make the guest account a huge steal delta when the CPU returns).
 *  - No kernel pointer or other kernel data appears in the mapping; it reveals
 *    only this VM's own steal-time data, so any local user may read it.
 *
 * Thread-slot pages (kind PVHINT_KIND_THREAD, the bpf source)
 * -----------------------------------------------------------
 * Without a hypervisor (or without the guest patch) the unit the kernel preempts is a thread,
 * not a vCPU. The bpf source's BPF program on the scheduler tracepoints publishes one record
 * per registered thread slot, with the same meaning as for a vCPU:
 *  - preempted: the thread was switched out while runnable (involuntary preemption, or a yield)
 *    and has not run since; a thread blocked in the kernel is not preempted (as a halted vCPU).
 *  - steal:     cumulative ns the thread was runnable but not running (woken or preempted,
 *    waiting for a CPU) since it took the slot; same version protocol; restarts at 0 when the
 *    slot is reused.
 *  - is_idle:   the CPU the thread last ran on (or was moved to while waiting) is idle now, so a
 *    wake-up of this thread runs at once; 0 while the thread runs.
 *  - sleeping:  byte 18: the thread is blocked in the kernel: switched out not runnable and not
 *    run since (a woken thread still waiting for a CPU may read 1; on kernels without
 *    CONFIG_SCHED_INFO it clears at the wake-up). Only in thread-slot pages
 *    (PVHINT_VALID_SLEEPING).
 *  - owner:     the slot's thread id (kernel tid), 0 while the slot is free.
 * Record 0 is never assigned: it stays all zero ("no hints") and is the slot of a thread that
 * could not be registered. A thread's slot is what pvhint_self_vcpu() returns and what lock
 * owner records store, so "is the owner's vCPU preempted?" becomes "is the owner preempted?".
 * A slot is freed when its thread exits (the program's sched_process_exit hook). nr_used bounds
 * the slots ever taken, for readers that scan all records.
 * An instance served by pvhintd or pvrt-run follows threads only while some client wants hints
 * (pvhint_want() in pvhint.h): between wants the records keep their last values, and when it
 * follows threads again every record first reads "running" (preempted, sleeping and is_idle
 * 0) until its thread's next switch-out.
 *
 * Readers must treat every field as a hint: it may be stale by the time it is
 * used. Correctness must never depend on it.
 */
#ifndef PVRT_PVHINT_ABI_H
#define PVRT_PVHINT_ABI_H

#if defined(__KERNEL__) || defined(__bpf__) /* the kernel, or the bpf source's BPF program */
#include <linux/types.h>
typedef __u8 pvhint_u8;
typedef __u16 pvhint_u16;
typedef __u32 pvhint_u32;
typedef __u64 pvhint_u64;
#else
#include <stddef.h>
#include <stdint.h>
typedef uint8_t pvhint_u8;
typedef uint16_t pvhint_u16;
typedef uint32_t pvhint_u32;
typedef uint64_t pvhint_u64;
#endif

#define PVHINT_MAGIC	   0x54485650u /* "PVHT" in memory order on little endian */
#define PVHINT_ABI_VERSION 1u
#define PVHINT_HEADER_SIZE 4096u /* records start here: one x86 page */
#define PVHINT_RECORD_SIZE 64u
#define PVHINT_DEV_PATH	   "/dev/pvhint"

/* Bits of pvhint_header.valid: which record fields the source maintains. */
#define PVHINT_VALID_STEAL     (1u << 0) /* steal and version */
#define PVHINT_VALID_PREEMPTED (1u << 1)
#define PVHINT_VALID_IS_IDLE   (1u << 2)
#define PVHINT_VALID_SLEEPING  (1u << 3) /* sleeping and owner (thread-slot pages) */

/* pvhint_header.kind: what a record describes. */
#define PVHINT_KIND_VCPU   0u /* record i = vCPU i (kvm, emu, none; the kernel's pages) */
#define PVHINT_KIND_THREAD 1u /* record i = registered thread slot i (bpf) */

/* pvhint_header.source: who produced the page. */
#define PVHINT_SOURCE_NONE 0u
#define PVHINT_SOURCE_KVM  1u
#define PVHINT_SOURCE_EMU  2u
#define PVHINT_SOURCE_BPF  3u

/*
 * ioctl(fd, PVHINT_IOC_YIELD_TO, cpu) on the kernel's device (guest-patches/0005): ask the host
 * to run vCPU cpu, preempted now, in place of the caller's (KVM_HC_SCHED_YIELD). 0 asked; EAGAIN
 * cpu not preempted or the caller's own; EBUSY this vCPU asked within the kernel's rate limit;
 * EINVAL not an online CPU; EOPNOTSUPP no directed yield from this host; ENOTTY an older kernel.
 * _IO(0xB8, 0), spelt out so that the header needs no ioctl header.
 */
#define PVHINT_IOC_YIELD_TO 0xB800u

/* Bits of pvhint_record.preempted (the same values as KVM_VCPU_*). */
#define PVHINT_PREEMPTED (1u << 0) /* host holds the vCPU descheduled though runnable */
/* Bit 1 is KVM_VCPU_FLUSH_TLB, guest-kernel internal: readers must ignore it. */

struct pvhint_header {
	pvhint_u32 magic;	  /* PVHINT_MAGIC */
	pvhint_u16 abi_version;	  /* PVHINT_ABI_VERSION; readers refuse others */
	pvhint_u16 source;	  /* PVHINT_SOURCE_* */
	pvhint_u32 header_size;	  /* byte offset of record 0 (PVHINT_HEADER_SIZE) */
	pvhint_u32 record_stride; /* bytes between records (PVHINT_RECORD_SIZE) */
	pvhint_u32 nr_records;	  /* one per possible vCPU */
	pvhint_u32 valid;	  /* PVHINT_VALID_* */
	pvhint_u32 kind;	  /* PVHINT_KIND_*; 0 (vCPU) in pages that predate it */
	pvhint_u32 nr_used;	  /* records >= nr_used were never used; 0: all may be */
	pvhint_u64 reserved[4];	  /* zero */
};

/*
 * One vCPU, laid out exactly as struct kvm_steal_time.
 *
 * steal:     nanoseconds this vCPU was runnable but not running (stolen by the
 *            host), monotonically increasing. Guarded by 'version': the writer
 *            makes version odd, updates steal, then makes it even again; a
 *            reader retries while version is odd or changed across its read.
 * version:   see steal.
 * flags:     KVM's steal-time flags; unused by pvhint, readers ignore it.
 * preempted: bit 0 (PVHINT_PREEMPTED) is set while the host holds the vCPU
 *            descheduled though runnable (set at vcpu_put on preemption,
 *            cleared when the vCPU runs again). A halted (idle) vCPU is not
 *            preempted.
 * is_idle:   non-zero when the physical CPU this vCPU would run on is idle now,
 *            i.e. a wake-up sent to this vCPU is served at once. Byte 17, the
 *            first u8_pad byte of kvm_steal_time; zero when the host does not
 *            provide it (see PVHINT_VALID_IS_IDLE).
 */
struct pvhint_record {
	pvhint_u64 steal;
	pvhint_u32 version;
	pvhint_u32 flags;
	pvhint_u8 preempted;
	pvhint_u8 is_idle;
	pvhint_u8 sleeping; /* thread-slot pages only (see above); 0 otherwise */
	pvhint_u8 pad8;
	pvhint_u32 owner;   /* thread-slot pages only: the slot's tid, 0 free */
	pvhint_u32 pad[10]; /* readers ignore it (the bpf source keeps its per-slot state here,
			     * which only libpvhint reads: pvhint_waits_on_cpu) */
};

#ifndef __KERNEL__
#if defined(__cplusplus)
#define PVHINT_STATIC_ASSERT static_assert
#else
#define PVHINT_STATIC_ASSERT _Static_assert
#endif
PVHINT_STATIC_ASSERT(sizeof(struct pvhint_record) == PVHINT_RECORD_SIZE, "record is 64 bytes");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, steal) == 0, "steal at 0");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, version) == 8, "version at 8");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, flags) == 12, "flags at 12");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, preempted) == 16, "preempted at 16");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, is_idle) == 17, "is_idle at 17");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, sleeping) == 18, "sleeping at 18");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_record, owner) == 20, "owner at 20 (pad[0])");
PVHINT_STATIC_ASSERT(sizeof(struct pvhint_header) == 64, "header block is 64 bytes");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_header, kind) == 24,
		     "kind at 24 (reserved[0])");
PVHINT_STATIC_ASSERT(__builtin_offsetof(struct pvhint_header, nr_used) == 28, "nr_used at 28");
PVHINT_STATIC_ASSERT(PVHINT_HEADER_SIZE % 4096 == 0, "records start on a page boundary");
#endif

#endif /* PVRT_PVHINT_ABI_H */
