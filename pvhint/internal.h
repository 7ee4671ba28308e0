/* SPDX-License-Identifier: MIT */
/*
 * libpvhint internals: one handle = one mapped hint page + the source that fills it.
 *
 * Every source publishes the page format of pvhint_abi.h; the public handle's 'rec', 'nr' and
 * 'valid' point into it, so the inline queries never know which source is behind them.
 */
#ifndef PVHINT_INTERNAL_H
#define PVHINT_INTERNAL_H

#include <pvrt/pvhint.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pvhint_emu;

struct pvhint_impl {
	unsigned source; /* PVHINT_SOURCE_* */
	void *map;	 /* the whole mapping (header page + records) */
	size_t map_len;
	const struct pvhint_header *hdr; /* == map */
	struct pvhint_emu *emu;		 /* source emu only */
	bool bpf;			 /* source bpf: a reference on the process's instance */
	bool bpf_slots;			 /* ... in thread-slot mode (else vCPU mode) */
	int yield_fd;	/* kvm source: the device, kept for PVHINT_IOC_YIELD_TO; -1 without */
	bool yield_off; /* PVRT_DIRECTED_YIELD is not 1 */
	char note[512]; /* why auto chose what it chose */
	bool notice; /* ... and the default handle says it on stderr (a device it may not read) */
	char export_path[256]; /* emu export=: the page's file, removed at close */
};

/* Set the calling thread's error message (a static string or a thread-local buffer); returns err.
 */
int pvhint__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocate a page laid out like the kernel's (header + nr zeroed records): anonymous, or a shared
 * file at export_path (removed by pvhint__page_free) that other processes can map read-only. */
int pvhint__page_alloc(struct pvhint_impl *im, unsigned source, uint32_t nr, uint32_t valid,
		       const char *export_path);
void pvhint__page_free(struct pvhint_impl *im);
/* Writable view of the records of a page this process owns (none, emu). */
static inline struct pvhint_record *pvhint__rec_w(struct pvhint_impl *im)
{
	return (struct pvhint_record *)((char *)im->map + PVHINT_HEADER_SIZE);
}

/* Number of possible CPUs (records of the none source; default emulated vCPUs). */
uint32_t pvhint__possible_cpus(void);
uint32_t pvhint__affinity_cpus(void);

/* Sources. Each fills im (map, hdr) or returns a negative errno with the message set. */
int pvhint__none_open(struct pvhint_impl *im);
int pvhint__kvm_open(struct pvhint_impl *im, const char *path);
/* The kvm source's header checks (src_kvm.c): 0 and the length to map, or an error. */
int pvhint__page_check(const struct pvhint_header *h, const char *path, size_t pg, bool is_file,
		       size_t file_size, size_t *len);
/* The bpf source (src_bpf.c): one program instance per process, loaded by the first open. */
/* vcpu: the zero-patch KVM mode (per-vCPU records copied from the host's steal time). */
int pvhint__bpf_open(struct pvhint_impl *im, bool vcpu);
void pvhint__bpf_close(struct pvhint_impl *im);
/* Claim a slot for the calling thread in the process's instance: the slot, or a negative errno
 * (-ENODEV: no instance loaded, -ENOSPC: all taken). Two bpf(2) calls. */
int pvhint__bpf_claim(void);
/* For the emulator's ksleep sampler: load the process's bpf instance without a handle (so
 * pvhint_self_vcpu() is unchanged), unless PVRT_EMU_KSTATE=proc or it cannot load (then the
 * sampler reads /proc); then the calling thread's record in it, registering the thread (NULL when
 * not prepared). */
void pvhint__bpf_prepare(void);
const struct pvhint_record *pvhint__bpf_self_record(int *slot);
/*
 * The emulator's kernel-sleep events (pvhint.bpf.c, emu_note), from the program this process
 * loaded (pvhint__bpf_prepare); one emulator at a time (-EBUSY), -ENOTSUP without one. fd becomes
 * readable (epoll) when an armed edge was posted; drain consumes the posts. The arrays are the
 * program's: vcpu1 by slot (written by the thread itself: attach, move, detach), awake and arm by
 * emulated vCPU (arm written by the control thread).
 */
struct pvhint_kwatch {
	int fd;
	uint16_t *vcpu1;
	uint32_t *awake;
	uint8_t *arm;
};
int pvhint__bpf_kwatch_open(struct pvhint_kwatch *w);
void pvhint__bpf_kwatch_drain(void);
void pvhint__bpf_kwatch_close(void);
int pvhint__emu_open(struct pvhint_impl *im, const char *spec, const char *label);
void pvhint__emu_close(struct pvhint_impl *im);
void pvhint__emu_park(struct pvhint_impl *im);
void pvhint__emu_unpark(struct pvhint_impl *im);
/* Directed yield in slice mode (emu_yield_to); the answers of pvhint_yield_to. */
bool pvhint__emu_can_yield(const struct pvhint_impl *im);
int pvhint__emu_yield_to(struct pvhint_impl *im, unsigned v);

/* Parse "12", "3ms", "250us", "1s", "10ns" into ns. Returns 0 or -EINVAL. */
int pvhint__parse_ns(const char *s, uint64_t *out);

#endif /* PVHINT_INTERNAL_H */
