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
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PVHINT_MAX_RECORDS 65536u /* far above any vCPU count; bounds a corrupt header */

/*
 * Check a header read from path (the validator the fuzz target tests/fuzz/fuzz_pvhint.c runs):
 * 0 and the length to map, or an error with the message set. file_size counts only for a
 * regular file (is_file), which must hold the whole area.
 */
int pvhint__page_check(const struct pvhint_header *h, const char *path, size_t pg, bool is_file,
		       size_t file_size, size_t *len)
{
	if (h->magic != PVHINT_MAGIC)
		return pvhint__fail(-EINVAL, "kvm: %s: bad magic 0x%08x (expected 0x%08x)", path,
				    h->magic, PVHINT_MAGIC);
	if (h->abi_version != PVHINT_ABI_VERSION)
		return pvhint__fail(
		    -EPROTO, "kvm: %s: unknown hint ABI version %u (this libpvhint reads %u)", path,
		    h->abi_version, PVHINT_ABI_VERSION);
	/* Pages come from the kernel (kvm), an emulator's export= (emu) or the bpf source. */
	if (h->source != PVHINT_SOURCE_KVM && h->source != PVHINT_SOURCE_EMU &&
	    h->source != PVHINT_SOURCE_BPF)
		return pvhint__fail(-EINVAL, "kvm: %s: unknown source %u in the header", path,
				    h->source);
	if (h->kind > PVHINT_KIND_THREAD)
		return pvhint__fail(-EINVAL, "kvm: %s: unknown record kind %u in the header", path,
				    h->kind);
	for (unsigned i = 0; i < sizeof(h->reserved) / sizeof(h->reserved[0]); i++) {
		if (h->reserved[i])
			return pvhint__fail(-EINVAL, "kvm: %s: reserved header word %u is not zero",
					    path, i);
	}
	if (h->header_size < sizeof(struct pvhint_header) || h->header_size % pg)
		return pvhint__fail(-EINVAL, "kvm: %s: bad header_size %u", path, h->header_size);
	/* The inline queries index records as an array of struct pvhint_record. */
	if (h->record_stride != PVHINT_RECORD_SIZE)
		return pvhint__fail(-EINVAL, "kvm: %s: record_stride %u, expected %u", path,
				    h->record_stride, PVHINT_RECORD_SIZE);
	if (h->nr_records == 0 || h->nr_records > PVHINT_MAX_RECORDS)
		return pvhint__fail(-EINVAL, "kvm: %s: bad nr_records %u", path, h->nr_records);
	*len = h->header_size + (((size_t)h->nr_records * h->record_stride + pg - 1) & ~(pg - 1));
	if (is_file && file_size < *len)
		return pvhint__fail(-EINVAL, "kvm: %s: truncated (%lld bytes, %u records need %zu)",
				    path, (long long)file_size, h->nr_records, *len);
	return 0;
}

int pvhint__kvm_open(struct pvhint_impl *im, const char *path)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct stat st;
	int err = 0;
	/* Non-blocking: opening a FIFO for reading would wait for a writer for ever. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd < 0 && errno == EACCES && !strcmp(path, PVHINT_DEV_PATH))
		return pvhint__fail(
		    -EACCES,
		    "kvm: cannot open %s: %s (root's only, unless the administrator "
		    "grants a group: README, 'Access to /dev/pvhint')",
		    path, strerror(EACCES));
	if (fd < 0)
		return pvhint__fail(-errno, "kvm: cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		err = pvhint__fail(-errno, "kvm: cannot stat %s: %s", path, strerror(errno));
		goto out;
	}
	/* The kernel's page is a character device; a regular file is an export= page or a test's.
	 */
	if (!S_ISCHR(st.st_mode) && !S_ISREG(st.st_mode)) {
		err = pvhint__fail(
		    -EINVAL, "kvm: %s is neither a character device nor a regular file", path);
		goto out;
	}
	/*
	 * A regular file must hold the whole area: touching a page past its end is SIGBUS, in
	 * every reader, whenever the file shrinks under the mapping. So only a file that nobody
	 * else can shrink is mapped: owned by us or root, writable by its owner alone (an export=
	 * file is created so, and never shrinks: its exporter unlinks it at the end).
	 */
	bool is_file = S_ISREG(st.st_mode);
	if (is_file && ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022))) {
		err =
		    pvhint__fail(-EPERM,
				 "kvm: %s: a regular hint file must belong to this user or root "
				 "and be writable by its owner only (another user could shrink it "
				 "and kill every reader with SIGBUS)",
				 path);
		goto out;
	}
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

	size_t len;
	err = pvhint__page_check(&h, path, pg, is_file, (size_t)st.st_size, &len);
	if (err)
		goto out;
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
	/*
	 * Directed yield: the kernel's device answers a request for a CPU beyond its records with
	 * EINVAL when it can yield (EOPNOTSUPP: the host cannot; ENOTTY: an older kernel). The
	 * probe costs no exit. A header of source kvm only: export= pages are files.
	 */
	if (S_ISCHR(st.st_mode) && !im->yield_off && h.source == PVHINT_SOURCE_KVM &&
	    ioctl(fd, PVHINT_IOC_YIELD_TO, (unsigned long)h.nr_records) < 0 && errno == EINVAL) {
		im->yield_fd = fd;
		fd = -1;
	}
out:
	if (fd >= 0)
		close(fd); /* the mapping keeps the page alive */
	return err;
}
