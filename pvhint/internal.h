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
	char note[256];			 /* why auto chose what it chose */
	char export_path[256];		 /* emu export=: the page's file, removed at close */
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
int pvhint__emu_open(struct pvhint_impl *im, const char *spec, const char *label);
void pvhint__emu_close(struct pvhint_impl *im);
void pvhint__emu_park(struct pvhint_impl *im);
void pvhint__emu_unpark(struct pvhint_impl *im);

/* Parse "12", "3ms", "250us", "1s", "10ns" into ns. Returns 0 or -EINVAL. */
int pvhint__parse_ns(const char *s, uint64_t *out);

#endif /* PVHINT_INTERNAL_H */
