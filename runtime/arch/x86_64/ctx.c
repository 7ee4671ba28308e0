/* SPDX-License-Identifier: MIT */
/* x86-64: the initial frame of a fresh context (see switch.S for the layout). */
#include "../ctx.h"

#include <stdint.h>

void rt_ctx_trampoline(void);

void *rt_ctx_make_fp(void *top, void (*entry)(void *), void *arg, uint64_t fp)
{
	/*
	 * After the switch pops 8 slots (64 bytes) rsp is sp + 64; the trampoline's call needs rsp
	 * 16-byte aligned then, so sp must be 16-byte aligned. 16 bytes of zeros stay above.
	 */
	uint64_t *sp = (uint64_t *)(((uintptr_t)top & ~(uintptr_t)15) - 80);
	sp[0] = fp;		 /* MXCSR, x87 CW */
	sp[1] = 0;		 /* r15 */
	sp[2] = 0;		 /* r14 */
	sp[3] = (uint64_t)arg;	 /* r13 */
	sp[4] = (uint64_t)entry; /* r12 */
	sp[5] = 0;		 /* rbx */
	sp[6] = 0;		 /* rbp: ends frame-pointer chains */
	sp[7] = (uint64_t)rt_ctx_trampoline;
	sp[8] = 0;
	sp[9] = 0;
	return sp;
}

void *rt_ctx_make(void *top, void (*entry)(void *), void *arg)
{
	/* Inherit the caller's rounding and exception masks (POSIX threads inherit them). */
	return rt_ctx_make_fp(top, entry, arg, rt_ctx_fpstate());
}
