/* SPDX-License-Identifier: MIT */
/*
 * The kvm source against a file laid out like the kernel's page: a valid page is mapped and
 * queries follow the bytes the "host" (this test) writes; bad magic, an unknown ABI version and a
 * truncated file are refused (auto falls back to none).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char path[] = "/tmp/pvhint-kvm-XXXXXX";

/* Write a page with nr records; returns a writable shared mapping of the records. */
static struct pvhint_record *make_page(uint32_t magic, uint16_t abi, uint32_t nr, off_t size)
{
	int fd = open(path, O_RDWR | O_TRUNC);
	CHECK(fd >= 0);
	size_t len = PVHINT_HEADER_SIZE + ((nr * PVHINT_RECORD_SIZE + 4095) & ~4095u);
	CHECK(ftruncate(fd, size ? size : (off_t)len) == 0);
	struct pvhint_header h = {
	    .magic = magic,
	    .abi_version = abi,
	    .source = PVHINT_SOURCE_KVM,
	    .header_size = PVHINT_HEADER_SIZE,
	    .record_stride = PVHINT_RECORD_SIZE,
	    .nr_records = nr,
	    .valid = PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED,
	};
	CHECK(pwrite(fd, &h, sizeof(h), 0) == sizeof(h));
	struct pvhint_record *rec = NULL;
	if (!size) {
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		CHECK(p != MAP_FAILED);
		rec = (struct pvhint_record *)((char *)p + PVHINT_HEADER_SIZE);
	}
	close(fd);
	return rec;
}

/* Overwrite len bytes of the page file at off (a header field). */
static bool pwrite_at(const void *p, size_t len, off_t off)
{
	int fd = open(path, O_RDWR);
	bool ok = fd >= 0 && pwrite(fd, p, len, off) == (ssize_t)len;
	if (fd >= 0)
		close(fd);
	return ok;
}

static int open_kvm(const char *src, pvhint_t **h)
{
	return pvhint_open(&(struct pvhint_options){.source = src, .kvm_path = path}, h);
}

int main(void)
{
	pvhint_t *h;
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);

	/* valid page, 8 vCPUs */
	struct pvhint_record *rec = make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, 0);
	CHECK(!open_kvm("kvm", &h));
	CHECK(!strcmp(pvhint_source_name(h), "kvm"));
	CHECK_EQ(pvhint_nr_vcpus(h), 8);
	CHECK_EQ(pvhint_header(h)->valid, PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED);
	CHECK(!pvhint_vcpu_preempted(h, 3));
	/* the "host" writes; the mapping is shared, so the queries see it with no reopen */
	__atomic_store_n(&rec[3].preempted, 1, __ATOMIC_RELEASE);
	CHECK(pvhint_vcpu_preempted(h, 3));
	CHECK(!pvhint_vcpu_preempted(h, 2));
	__atomic_store_n(&rec[3].preempted, 2, __ATOMIC_RELEASE); /* FLUSH_TLB bit: ignored */
	CHECK(!pvhint_vcpu_preempted(h, 3));
	__atomic_store_n(&rec[3].preempted, 0, __ATOMIC_RELEASE);
	CHECK(!pvhint_vcpu_preempted(h, 3));
	__atomic_store_n(&rec[7].is_idle, 1, __ATOMIC_RELEASE);
	CHECK(pvhint_pcpu_idle(h, 7));
	CHECK(!pvhint_pcpu_idle(h, 8)); /* out of range: false, no read past the page */
	CHECK(!pvhint_vcpu_preempted(h, 1000));
	/* steal under the version counter */
	rec[5].steal = 12345;
	rec[5].version = 2;
	CHECK_EQ(pvhint_steal(h, 5), 12345);
	/* A page in a file cannot yield (only the kernel's device can): no system call, and a
	 * lock that asks parks as before. */
	__atomic_store_n(&rec[3].preempted, 1, __ATOMIC_RELEASE);
	CHECK(!pvhint_can_yield(h));
	CHECK_EQ(pvhint_yield_to(h, 3), -ENOTSUP);
	CHECK_EQ(pvhint_yield_to(h, 1000), -ENOTSUP);
	CHECK(!pvhint_can_yield(NULL));
	CHECK_EQ(pvhint_yield_to(NULL, 0), -ENOTSUP);
	__atomic_store_n(&rec[3].preempted, 0, __ATOMIC_RELEASE);
	pvhint_close(h);
	/* The switch: 0 and 1 are accepted, anything else is refused with the name. */
	CHECK(!setenv("PVRT_DIRECTED_YIELD", "0", 1));
	CHECK(!open_kvm("kvm", &h));
	CHECK(!pvhint_can_yield(h));
	pvhint_close(h);
	CHECK(!setenv("PVRT_DIRECTED_YIELD", "yes", 1));
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "PVRT_DIRECTED_YIELD"));
	/* ... but source none, the fallback of pvhint_default(), still opens. */
	CHECK(!open_kvm("none", &h));
	pvhint_close(h);
	CHECK(!unsetenv("PVRT_DIRECTED_YIELD"));
	/* auto picks it when valid */
	CHECK(!open_kvm("auto", &h));
	CHECK(!strcmp(pvhint_source_name(h), "kvm"));
	CHECK(!strcmp(pvhint_note(h), ""));
	pvhint_close(h);
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);

	/* wrong magic */
	rec = make_page(0x12345678, PVHINT_ABI_VERSION, 8, 0);
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "bad magic"));
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);

	/* unknown ABI version: refused with a clear message; auto falls back to none */
	rec = make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION + 1, 8, 0);
	CHECK_EQ(open_kvm("kvm", &h), -EPROTO);
	CHECK(strstr(pvhint_errmsg(), "unknown hint ABI version 2"));
	CHECK(!open_kvm("auto", &h));
	CHECK(!strcmp(pvhint_source_name(h), test_auto_fallback()));
	CHECK(strstr(pvhint_note(h), "unknown hint ABI version 2"));
	pvhint_close(h);
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);

	/* truncated: header page only, and a file shorter than the header */
	make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, PVHINT_HEADER_SIZE);
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "truncated"));
	make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, 100);
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "truncated"));
	CHECK(!open_kvm("auto", &h)); /* still works: none */
	CHECK(!strcmp(pvhint_source_name(h), test_auto_fallback()));
	pvhint_close(h);

	/* absurd record count */
	make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 0, 8192);
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "nr_records"));

	/* issue 9: header fields that no producer writes (a page claiming source 99 read as
	 * "none"): an unknown source, a reserved word that is not zero. */
	uint16_t src99 = 99, src0 = 0;
	uint64_t one = 1;
	rec = make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, 0);
	CHECK(pwrite_at(&src99, sizeof(src99), offsetof(struct pvhint_header, source)));
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "unknown source 99"));
	CHECK(pwrite_at(&src0, sizeof(src0), offsetof(struct pvhint_header, source)));
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "unknown source 0"));
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);
	rec = make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, 0);
	CHECK(pwrite_at(&one, sizeof(one), offsetof(struct pvhint_header, reserved[3])));
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "reserved header word 3"));
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);

	/* A regular file someone else may shrink under the mapping (SIGBUS in every reader) is
	 * refused: writable by group or others, or owned by another user. */
	rec = make_page(PVHINT_MAGIC, PVHINT_ABI_VERSION, 8, 0);
	CHECK(chmod(path, 0666) == 0);
	CHECK_EQ(open_kvm("kvm", &h), -EPERM);
	CHECK(strstr(pvhint_errmsg(), "writable by its owner only"));
	CHECK(chmod(path, 0644) == 0);
	CHECK(!open_kvm("kvm", &h));
	pvhint_close(h);
	if (geteuid() == 0) {
		CHECK(chown(path, 65534, 65534) == 0);
		CHECK_EQ(open_kvm("kvm", &h), -EPERM);
		CHECK(chown(path, 0, 0) == 0);
	}
	munmap((char *)rec - PVHINT_HEADER_SIZE, PVHINT_HEADER_SIZE + 4096);

	/* A FIFO (open for reading used to wait for a writer for ever) and a directory: refused
	 * at once, also under auto (every preloaded process used to hang in its constructor). */
	alarm(30);
	unlink(path);
	CHECK(mkfifo(path, 0600) == 0);
	CHECK_EQ(open_kvm("kvm", &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "neither a character device nor a regular file"));
	CHECK(!open_kvm("auto", &h));
	CHECK(!strcmp(pvhint_source_name(h), test_auto_fallback()));
	pvhint_close(h);
	unlink(path);
	CHECK(mkdir(path, 0700) == 0);
	CHECK(open_kvm("kvm", &h) < 0);
	rmdir(path);
	alarm(0);
	printf("kvm fake page ok\n");
	return 0;
}
