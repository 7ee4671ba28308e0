/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the hint-page header validator of the kvm source (pvhint__page_check in
 * pvhint/src_kvm.c). The input is a header (zero-padded), then 8 bytes of file size and one
 * byte saying whether the page is a regular file. A header the validator accepts must be safe to
 * map and index: records inside the length it returns, the length inside the file.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pvhint_header h;
	uint64_t file_size = 0;
	uint8_t is_file = 0;
	size_t n = size < sizeof(h) ? size : sizeof(h);
	memset(&h, 0, sizeof(h));
	memcpy(&h, data, n);
	if (size >= sizeof(h) + 8)
		memcpy(&file_size, data + sizeof(h), 8);
	if (size >= sizeof(h) + 9)
		is_file = data[sizeof(h) + 8] & 1;
	size_t len = 0;
	int err = pvhint__page_check(&h, "fuzz", 4096, is_file, (size_t)file_size, &len);
	if (err) {
		if (err >= 0 || !strcmp(pvhint_errmsg(), "no error"))
			abort();
		return 0;
	}
	if (h.magic != PVHINT_MAGIC || h.abi_version != PVHINT_ABI_VERSION)
		abort();
	if (h.record_stride != PVHINT_RECORD_SIZE || h.nr_records == 0)
		abort();
	if (h.header_size < sizeof(h) || h.header_size % 4096 || len % 4096)
		abort();
	if ((uint64_t)h.header_size + (uint64_t)h.nr_records * h.record_stride > len)
		abort();
	if (is_file && len > file_size)
		abort();
	for (unsigned i = 0; i < sizeof(h.reserved) / sizeof(h.reserved[0]); i++)
		if (h.reserved[i])
			abort();
	return 0;
}
