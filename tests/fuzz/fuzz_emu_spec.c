/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the emulator spec parser (pvhint/emu_spec.c). Any input is parsed; an
 * accepted spec must describe an emulator that can run (the checks below), a refused one must
 * say why. Build and run: tests/fuzz/run-fuzz.sh (see tests/fuzz/README.md).
 */
#define _GNU_SOURCE
#include "emu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char spec[4096];
	if (size >= sizeof(spec))
		size = sizeof(spec) - 1;
	memcpy(spec, data, size);
	spec[size] = 0;
	struct emu_conf c;
	int err = pvhint__emu_parse(spec, "PVRT_EMU", &c);
	if (err) {
		if (err >= 0 || !strcmp(pvhint_errmsg(), "no error"))
			abort(); /* an error without a message */
		return 0;
	}
	if (c.vcpus < 1 || c.vcpus > EMU_MAX_VCPUS || c.pcpus < 1 || c.pcpus > c.vcpus)
		abort();
	if (c.quantum < 10000 || c.period < 10000 || c.ack_timeout < 1000000)
		abort();
	if (c.quantum > 1000000000000000ull || c.period > 1000000000000000ull ||
	    c.ack_timeout > 1000000000000000ull || c.ksleep > 1000000000000000ull)
		abort();
	if (!isfinite(c.duty) || c.duty < 0 || c.duty > 1 || (c.mode == EMU_NOISY && c.duty >= 1))
		abort();
	if (c.export_path[0] && c.export_path[0] != '/')
		abort();
	if (memchr(c.export_path, 0, sizeof(c.export_path)) == NULL)
		abort();
	return 0;
}
