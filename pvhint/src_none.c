/* SPDX-License-Identifier: MIT */
/*
 * The none source: a page of all-zero records, one per possible CPU, so every query is defined
 * (vCPU numbers from rseq/sched_getcpu are below that count) and every hint is false. pvrt then
 * behaves like a good hint-less runtime.
 */
#include "internal.h"

int pvhint__none_open(struct pvhint_impl *im)
{
	/* valid = 0: no field is maintained, readers know the zeros mean "no information". */
	return pvhint__page_alloc(im, PVHINT_SOURCE_NONE, pvhint__possible_cpus(), 0, NULL);
}
