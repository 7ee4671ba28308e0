/* SPDX-License-Identifier: MIT */
/*
 * x86-64 SysV context switch.
 *
 * Frame pushed on the suspended stack, from the saved stack pointer upwards:
 *   +0  MXCSR (4 bytes) and x87 control word (2 bytes, at +4)
 *   +8  r15, r14, r13, r12, rbx, rbp
 *   +56 return address
 * rbx, rbp, r12-r15, the x87 control word and MXCSR's control bits are callee-saved in the SysV
 * ABI, so they are all a cooperative switch must keep; everything else (rax, rdx here) is dead
 * across the call.
 */
	.text
	.globl	rt_ctx_switch
	.hidden	rt_ctx_switch
	.type	rt_ctx_switch, @function
	.p2align 4
rt_ctx_switch: /* rdi = void **save, rsi = void *to */
	.cfi_startproc
	pushq	%rbp
	pushq	%rbx
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	subq	$8, %rsp
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
	movl	(%rsp), %eax	/* the sizes of the stores above: forwarded, no stall */
	movzwl	4(%rsp), %edx
	movq	%rsp, (%rdi)
	movq	%rsi, %rsp
	/*
	 * Reload MXCSR and the x87 control word only if either differs: contexts nearly always
	 * share one state. The whole MXCSR, its sticky exception flags (bits 0-5) too: C gives the
	 * floating-point environment thread storage duration, so a ULT's fetestexcept must not see
	 * flags another ULT raised or cleared meanwhile (the usual case, inexact raised everywhere,
	 * still compares equal).
	 */
	xorl	(%rsp), %eax
	xorw	4(%rsp), %dx
	orl	%edx, %eax
	jnz	2f
1:	addq	$8, %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
2:	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	jmp	1b
	.cfi_endproc
	.size	rt_ctx_switch, .-rt_ctx_switch

/*
 * First code run by a fresh context: rt_ctx_make() put entry in r12 and its argument in r13.
 * The return address is undefined so that debuggers and unwinders stop here.
 */
	.globl	rt_ctx_trampoline
	.hidden	rt_ctx_trampoline
	.type	rt_ctx_trampoline, @function
	.p2align 4
rt_ctx_trampoline:
	.cfi_startproc
	.cfi_undefined rip
	movq	%r13, %rdi
	callq	*%r12
	ud2	/* entry must not return */
	.cfi_endproc
	.size	rt_ctx_trampoline, .-rt_ctx_trampoline

/*
 * Start a fresh context on the stack ending at rdi, from the running one, which is abandoned:
 * entry (rsi) is called with arg (rdx) and the floating-point state rcx (rt_ctx_make_fp's),
 * loaded only where it differs. The stack may be the one running now: nothing of the caller's
 * is read once rsp has moved.
 */
	.globl	rt_ctx_restart
	.hidden	rt_ctx_restart
	.type	rt_ctx_restart, @function
	.p2align 4
rt_ctx_restart: /* rdi = top, rsi = entry, rdx = arg, rcx = floating-point state */
	.cfi_startproc
	.cfi_undefined rip
	andq	$-16, %rdi
	leaq	-16(%rdi), %rsp	/* 16 bytes of zeros above, as rt_ctx_make_fp leaves */
	movq	$0, 8(%rsp)
	movq	$0, (%rsp)	/* the two bytes above the control word compare as zero */
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
	cmpq	%rcx, (%rsp)	/* MXCSR and the x87 control word, as the frame holds them */
	je	1f
	movq	%rcx, (%rsp)
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
1:	movq	$0, (%rsp)
	xorl	%ebp, %ebp	/* ends frame-pointer chains */
	movq	%rdx, %rdi
	callq	*%rsi
	ud2	/* entry must not return */
	.cfi_endproc
	.size	rt_ctx_restart, .-rt_ctx_restart

	.section .note.GNU-stack,"",@progbits
