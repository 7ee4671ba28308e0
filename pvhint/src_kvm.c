/* SPDX-License-Identifier: MIT */
/*
 * The kvm source: map the guest kernel's read-only hint page (PVHINT_DEV_PATH, or a file laid
 * out the same way for tests), following the contract in pvhint_abi.h: map the header page
 * first, check it, then map the whole area. Nothing is copied: the queries read the records the
 * host writes.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PVHINT_MAX_RECORDS 65536u /* far above any vCPU count; bounds a corrupt header */

int pvhint__kvm_open(struct pvhint_impl *im, const char *path)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct stat st;
	int err = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return pvhint__fail(-errno, "kvm: cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		err = pvhint__fail(-errno, "kvm: cannot stat %s: %s", path, strerror(errno));
		goto out;
	}
	/* A regular file (tests) must hold the whole area: touching a page past its end is SIGBUS.
	 */
	bool is_file = S_ISREG(st.st_mode);
	if (is_file && (size_t)st.st_size < PVHINT_HEADER_SIZE) {
		err = pvhint__fail(-EINVAL, "kvm: %s: truncated (%lld bytes, header needs %u)",
				   path, (long long)st.st_size, PVHINT_HEADER_SIZE);
		goto out;
	}

	const struct pvhint_header *hp =
	    mmap(NULL, PVHINT_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (hp == MAP_FAILED) {
		err = pvhint__fail(-errno, "kvm: cannot map the header of %s: %s", path,
				   strerror(errno));
		goto out;
	}
	struct pvhint_header h = *hp; /* the header never changes except 'valid' (see ABI) */
	munmap((void *)hp, PVHINT_HEADER_SIZE);

	if (h.magic != PVHINT_MAGIC) {
		err = pvhint__fail(-EINVAL, "kvm: %s: bad magic 0x%08x (expected 0x%08x)", path,
				   h.magic, PVHINT_MAGIC);
		goto out;
	}
	if (h.abi_version != PVHINT_ABI_VERSION) {
		err = pvhint__fail(-EPROTO,
				   "kvm: %s: unknown hint ABI version %u (this libpvhint reads %u)",
				   path, h.abi_version, PVHINT_ABI_VERSION);
		goto out;
	}
	if (h.header_size < sizeof(struct pvhint_header) || h.header_size % pg) {
		err = pvhint__fail(-EINVAL, "kvm: %s: bad header_size %u", path, h.header_size);
		goto out;
	}
	/* The inline queries index records as an array of struct pvhint_record. */
	if (h.record_stride != PVHINT_RECORD_SIZE) {
		err = pvhint__fail(-EINVAL, "kvm: %s: record_stride %u, expected %u", path,
				   h.record_stride, PVHINT_RECORD_SIZE);
		goto out;
	}
	if (h.nr_records == 0 || h.nr_records > PVHINT_MAX_RECORDS) {
		err = pvhint__fail(-EINVAL, "kvm: %s: bad nr_records %u", path, h.nr_records);
		goto out;
	}
	size_t len =
	    h.header_size + (((size_t)h.nr_records * h.record_stride + pg - 1) & ~(pg - 1));
	if (is_file && (size_t)st.st_size < len) {
		err = pvhint__fail(-EINVAL, "kvm: %s: truncated (%lld bytes, %u records need %zu)",
				   path, (long long)st.st_size, h.nr_records, len);
		goto out;
	}
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		err = pvhint__fail(-errno, "kvm: cannot map %zu bytes of %s: %s", len, path,
				   strerror(errno));
		goto out;
	}
	im->map = p;
	im->map_len = len;
	im->hdr = p;
	im->source = PVHINT_SOURCE_KVM;
out:
	close(fd); /* the mapping keeps the page alive */
	return err;
}
