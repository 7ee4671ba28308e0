/* SPDX-License-Identifier: MIT */
/* AArch64: the initial frame of a fresh context (see switch.S for the layout). */
#include "../ctx.h"

#include <stdint.h>

void rt_ctx_trampoline(void);

void *rt_ctx_make_fp(void *top, void (*entry)(void *), void *arg, uint64_t fp)
{
	uint64_t *sp = (uint64_t *)(((uintptr_t)top & ~(uintptr_t)15) - 176);
	for (int i = 0; i < 22; i++)
		sp[i] = 0;
	sp[0] = (uint64_t)entry;	      /* x19 */
	sp[1] = (uint64_t)arg;		      /* x20 */
	sp[10] = 0;			      /* x29: ends frame-pointer chains */
	sp[11] = (uint64_t)rt_ctx_trampoline; /* x30: where the switch "returns" */
	sp[20] = (uint32_t)fp;		      /* FPCR */
	sp[21] = fp >> 32;		      /* FPSR */
	return sp;
}

void *rt_ctx_make(void *top, void (*entry)(void *), void *arg)
{
	/* Inherit the caller's rounding mode and trap enables, as POSIX threads do. */
	return rt_ctx_make_fp(top, entry, arg, rt_ctx_fpstate());
}
