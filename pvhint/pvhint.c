/* SPDX-License-Identifier: MIT */
/* libpvhint: source selection and the none source. (kvm and emu sources: in progress.) */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include <sched.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

PVRT_API __thread int pvhint_tls_vcpu = -1;
static __thread const char *errmsg = "no error";

static const struct pvhint_header none_header = {
	.magic = PVHINT_MAGIC,
	.abi_version = PVHINT_ABI_VERSION,
	.source = PVHINT_SOURCE_NONE,
	.header_size = PVHINT_HEADER_SIZE,
	.record_stride = PVHINT_RECORD_SIZE,
};

static int fail(int err, const char *msg)
{
	errmsg = msg;
	return err;
}

const char *pvhint_errmsg(void)
{
	return errmsg;
}

int pvhint_open(const struct pvhint_options *opts, pvhint_t **out)
{
	const char *src = opts && opts->source ? opts->source : getenv("PVRT_HINTS");
	if (!src || !*src)
		src = "auto";
	if (strcmp(src, "auto") && strcmp(src, "none"))
		return fail(-EINVAL, "PVRT_HINTS: unknown hint source (accepted: auto, kvm, emu, none)");
	pvhint_t *h = calloc(1, sizeof(*h));
	if (!h)
		return fail(-ENOMEM, "out of memory");
	*out = h;
	return 0;
}

void pvhint_close(pvhint_t *h)
{
	free(h);
}

const struct pvhint_header *pvhint_header(const pvhint_t *h)
{
	(void)h;
	return &none_header;
}

int pvhint_cpu_slow(void)
{
	int c = sched_getcpu();
	return c < 0 ? 0 : c;
}
