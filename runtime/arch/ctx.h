/* SPDX-License-Identifier: MIT */
/*
 * Machine contexts of ULTs: the one arch-specific interface of the runtime.
 *
 * A suspended context is just its saved stack pointer: rt_ctx_switch() pushes the callee-saved
 * registers (and the floating-point control state the ABI says is preserved across calls: x87
 * control word and MXCSR on x86-64, FPCR on aarch64) on the current stack, stores the stack
 * pointer in *save, loads 'to' and pops the same frame from there. No signal mask is saved and no
 * system call is made; caller-saved registers are the compiler's business since this is a call.
 *
 * Implementations: arch/x86_64/ (SysV) and arch/aarch64/ (AAPCS64), one folder per arch.
 */
#ifndef PVRT_RUNTIME_ARCH_CTX_H
#define PVRT_RUNTIME_ARCH_CTX_H

#include <stddef.h>
#include <stdint.h>

/* Save the running context in *save and resume the one whose stack pointer is 'to'. */
void rt_ctx_switch(void **save, void *to);

/*
 * Prepare a fresh context on the stack ending at 'top' (exclusive) so that switching to the
 * returned stack pointer calls entry(arg) with a correctly aligned stack and an outermost frame
 * (unwinders stop there). entry must never return. The floating-point control state is inherited
 * from the caller, as POSIX threads inherit it.
 */
void *rt_ctx_make(void *top, void (*entry)(void *), void *arg);

/*
 * The caller's floating-point environment (x86-64: MXCSR, x87 control word << 32; AArch64:
 * FPCR, FPSR << 32), and rt_ctx_make with a state taken earlier: ult.c takes it when a ULT is
 * created (it inherits its creator's) and builds the frame on the stack when the ULT first runs.
 */
static inline uint64_t rt_ctx_fpstate(void)
{
#if defined(__x86_64__)
	uint32_t mxcsr;
	uint16_t fpcw;
	__asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
	__asm__ volatile("fnstcw %0" : "=m"(fpcw));
	return mxcsr | ((uint64_t)fpcw << 32);
#elif defined(__aarch64__)
	uint64_t fpcr, fpsr;
	__asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
	__asm__ volatile("mrs %0, fpsr" : "=r"(fpsr));
	return (uint32_t)fpcr | fpsr << 32; /* both 32-bit registers in practice */
#else
#error "no context switch for this architecture"
#endif
}
void *rt_ctx_make_fp(void *top, void (*entry)(void *), void *arg, uint64_t fp);

/*
 * Abandon the running context and call entry(arg) on a fresh one on the stack ending at 'top',
 * with floating-point state fp (rt_ctx_fpstate's form): what switching to rt_ctx_make_fp's
 * result would do, without a context to save. 'top' may be the top of the stack running now
 * (an exiting ULT starts its successor there: ult.c).
 */
__attribute__((noreturn)) void rt_ctx_restart(void *top, void (*entry)(void *), void *arg,
					      uint64_t fp);

#endif /* PVRT_RUNTIME_ARCH_CTX_H */
