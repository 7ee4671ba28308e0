/* SPDX-License-Identifier: MIT */
/*
 * AArch64 (AAPCS64) context switch.
 *
 * Frame on the suspended stack, 176 bytes from the saved stack pointer:
 *   +0   x19..x28   +80  x29 (fp), x30 (lr: where the context resumes)
 *   +96  d8..d15    +160 FPCR   +168 FPSR
 * x19-x29, sp, the low 64 bits of v8-v15 and FPCR are preserved across calls in AAPCS64; FPSR
 * (the cumulative exception flags) is kept per context too, as C gives the floating-point
 * environment thread storage duration.
 */
	.text
	.globl	rt_ctx_switch
	.hidden	rt_ctx_switch
	.type	rt_ctx_switch, %function
	.p2align 4
rt_ctx_switch: /* x0 = void **save, x1 = void *to */
	.cfi_startproc
	sub	sp, sp, #176
	stp	x19, x20, [sp, #0]
	stp	x21, x22, [sp, #16]
	stp	x23, x24, [sp, #32]
	stp	x25, x26, [sp, #48]
	stp	x27, x28, [sp, #64]
	stp	x29, x30, [sp, #80]
	stp	d8, d9, [sp, #96]
	stp	d10, d11, [sp, #112]
	stp	d12, d13, [sp, #128]
	stp	d14, d15, [sp, #144]
	mrs	x10, fpcr
	mrs	x11, fpsr
	stp	x10, x11, [sp, #160]
	mov	x9, sp
	str	x9, [x0]
	mov	sp, x1
	ldp	x19, x20, [sp, #0]
	ldp	x21, x22, [sp, #16]
	ldp	x23, x24, [sp, #32]
	ldp	x25, x26, [sp, #48]
	ldp	x27, x28, [sp, #64]
	ldp	x29, x30, [sp, #80]
	ldp	d8, d9, [sp, #96]
	ldp	d10, d11, [sp, #112]
	ldp	d12, d13, [sp, #128]
	ldp	d14, d15, [sp, #144]
	/* Write FPCR and FPSR only if they differ: the writes may synchronise the pipeline, and
	 * contexts nearly always share one state. */
	ldp	x9, x12, [sp, #160]
	cmp	x9, x10
	b.eq	1f
	msr	fpcr, x9
1:	cmp	x12, x11
	b.eq	2f
	msr	fpsr, x12
2:	add	sp, sp, #176
	ret
	.cfi_endproc
	.size	rt_ctx_switch, .-rt_ctx_switch

/* First code of a fresh context: entry in x19, its argument in x20 (see ctx.c). */
	.globl	rt_ctx_trampoline
	.hidden	rt_ctx_trampoline
	.type	rt_ctx_trampoline, %function
	.p2align 4
rt_ctx_trampoline:
	.cfi_startproc
	.cfi_undefined x30
	mov	x29, #0
	mov	x0, x20
	blr	x19
	brk	#0	/* entry must not return */
	.cfi_endproc
	.size	rt_ctx_trampoline, .-rt_ctx_trampoline

/*
 * Start a fresh context on the stack ending at x0, from the running one, which is abandoned:
 * entry (x1) is called with arg (x2) and the floating-point state x3 (FPCR, FPSR << 32, as
 * rt_ctx_make_fp), each written only where it differs. The stack may be the one running now.
 */
	.globl	rt_ctx_restart
	.hidden	rt_ctx_restart
	.type	rt_ctx_restart, %function
	.p2align 4
rt_ctx_restart: /* x0 = top, x1 = entry, x2 = arg, x3 = floating-point state */
	.cfi_startproc
	.cfi_undefined x30
	bic	x0, x0, #15
	mov	sp, x0		/* where rt_ctx_make_fp's frame leaves it */
	mrs	x9, fpcr
	mrs	x10, fpsr
	mov	w11, w3
	lsr	x12, x3, #32
	cmp	x9, x11
	b.eq	1f
	msr	fpcr, x11
1:	cmp	x10, x12
	b.eq	2f
	msr	fpsr, x12
2:	mov	x29, #0
	mov	x30, #0
	mov	x0, x2
	blr	x1
	brk	#0	/* entry must not return */
	.cfi_endproc
	.size	rt_ctx_restart, .-rt_ctx_restart

	.section .note.GNU-stack,"",%progbits
