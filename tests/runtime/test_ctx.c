/* SPDX-License-Identifier: MIT */
/*
 * The context switch alone (no runtime): ping-pong between contexts, callee-saved floating-point
 * state and control registers preserved per context. Built natively and, for aarch64, with the
 * cross compiler and run under qemu-user (see CMakeLists.txt).
 */
#include "arch/ctx.h"

#include <fenv.h>
#if defined(__x86_64__)
#include <fpu_control.h>
#include <xmmintrin.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), exit(1))

static void *main_sp, *co_sp;
static volatile int counter;
static char stack[64 * 1024] __attribute__((aligned(16)));

#if defined(__x86_64__)
/* The x87 control word alone (precision control), which fesetround does not tell apart: the
 * switch reloads the control state only where it differs, and must see this difference too. */
static fpu_control_t x87_cw(void)
{
	fpu_control_t cw;
	_FPU_GETCW(cw);
	return cw;
}

static void x87_set_precision(fpu_control_t pc)
{
	fpu_control_t cw = (x87_cw() & ~_FPU_EXTENDED) | pc;
	_FPU_SETCW(cw);
}
#define X87_SET(pc) x87_set_precision(pc)
#define X87_CHECK(pc, who)                                                                         \
	do {                                                                                       \
		if ((x87_cw() & _FPU_EXTENDED) != (pc))                                            \
			FAIL("x87 precision control of %s lost\n", who);                           \
	} while (0)
#else
#define X87_SET(pc)	   ((void)0)
#define X87_CHECK(pc, who) ((void)0)
#define _FPU_DOUBLE	   0
#define _FPU_EXTENDED	   0
#endif

static void co(void *arg)
{
	if (arg != (void *)0x5eed)
		FAIL("bad argument %p\n", arg);
	/* A different rounding mode in this context only. */
	fesetround(FE_UPWARD);
	for (;;) {
		counter++;
		volatile double x = 1.0, y = 3.0;
		if (x / y <= 0.3333333333333333)
			FAIL("rounding mode of the coroutine lost\n");
		rt_ctx_switch(&co_sp, main_sp);
	}
}

/* MXCSR equal, the x87 control word not: the switch must still tell them apart. */
static void *co2_sp;
static char stack2[64 * 1024] __attribute__((aligned(16)));

static void co2(void *arg)
{
	(void)arg;
	X87_SET(_FPU_DOUBLE);
	for (;;) {
		counter++;
		X87_CHECK(_FPU_DOUBLE, "the coroutine");
		rt_ctx_switch(&co2_sp, main_sp);
	}
}

#if defined(__x86_64__)
/*
 * MXCSR alone, one difference at a time (the switch skips the reload when the words are equal,
 * so a bit left out of its compare would leak from one context to the other): co3 differs only
 * in the sticky exception flags (C: the floating-point environment is per thread), co4 only in
 * DAZ (bit 6, the lowest control bit), both sides clearing their flags before each switch.
 */
#define MXCSR_FLAGS 0x3fu
#define MXCSR_PE    0x20u /* precision (inexact) flag */
#define MXCSR_DAZ   0x40u
static void *co3_sp, *co4_sp;
static char stack3[64 * 1024] __attribute__((aligned(16)));
static char stack4[64 * 1024] __attribute__((aligned(16)));

static void co3(void *arg)
{
	(void)arg;
	_mm_setcsr(_mm_getcsr() & ~MXCSR_FLAGS);
	for (;;) {
		counter++;
		if (_mm_getcsr() & MXCSR_FLAGS)
			FAIL("MXCSR flags of main leaked into the coroutine\n");
		rt_ctx_switch(&co3_sp, main_sp);
	}
}

static void co4(void *arg)
{
	(void)arg;
	_mm_setcsr((_mm_getcsr() | MXCSR_DAZ) & ~MXCSR_FLAGS);
	for (;;) {
		counter++;
		if (!(_mm_getcsr() & MXCSR_DAZ))
			FAIL("MXCSR DAZ of the coroutine lost\n");
		_mm_setcsr(_mm_getcsr() & ~MXCSR_FLAGS);
		rt_ctx_switch(&co4_sp, main_sp);
	}
}

static void mxcsr_alone(void)
{
	co3_sp = rt_ctx_make(stack3 + sizeof(stack3), co3, NULL);
	co4_sp = rt_ctx_make(stack4 + sizeof(stack4), co4, NULL);
	for (int i = 0; i < 1000; i++) {
		_mm_setcsr(_mm_getcsr() | MXCSR_PE); /* raised here, clear in co3 */
		rt_ctx_switch(&main_sp, co3_sp);
		if (!(_mm_getcsr() & MXCSR_PE))
			FAIL("MXCSR flags of main lost\n");
		_mm_setcsr(_mm_getcsr() & ~(MXCSR_FLAGS | MXCSR_DAZ));
		rt_ctx_switch(&main_sp, co4_sp);
		if (_mm_getcsr() & MXCSR_DAZ)
			FAIL("MXCSR DAZ of the coroutine leaked into main\n");
	}
}
#else
/* AArch64: FPSR's cumulative flags alone (FPCR equal), through <fenv.h>. */
static void *co3_sp;
static char stack3[64 * 1024] __attribute__((aligned(16)));

static void co3(void *arg)
{
	(void)arg;
	feclearexcept(FE_ALL_EXCEPT);
	for (;;) {
		counter++;
		if (fetestexcept(FE_ALL_EXCEPT))
			FAIL("exception flags of main leaked into the coroutine\n");
		rt_ctx_switch(&co3_sp, main_sp);
	}
}

static void mxcsr_alone(void)
{
	co3_sp = rt_ctx_make(stack3 + sizeof(stack3), co3, NULL);
	for (int i = 0; i < 1000; i++) {
		feraiseexcept(FE_INEXACT);
		rt_ctx_switch(&main_sp, co3_sp);
		if (!fetestexcept(FE_INEXACT))
			FAIL("exception flags of main lost\n");
	}
}
#endif

/* rt_ctx_restart: a context starts its successor on its own stack, RESTARTS times, each with
 * the floating-point state it is given (upward rounding and the caller's, in turn); the stack
 * does not grow, and the last one switches back to main. */
#define RESTARTS 1000
static void *re_sp;
static char stack5[64 * 1024] __attribute__((aligned(16)));
static uint64_t fp_up, fp_near;
static uintptr_t re_frame;
static int re_done;

static void re(void *arg)
{
	uintptr_t n = (uintptr_t)arg;
	char buf[64];
	volatile double third = 1.0 / 3.0; /* a varargs double: a misaligned stack faults here */
	snprintf(buf, sizeof(buf), "%d %f", (int)n, third);
	uintptr_t f = (uintptr_t)__builtin_frame_address(0);
	if (f < (uintptr_t)stack5 || f >= (uintptr_t)stack5 + sizeof(stack5))
		FAIL("restart %d runs off its stack\n", (int)n);
	if (n == 0)
		re_frame = f;
	else if (f != re_frame)
		FAIL("restart %d: the stack grew\n", (int)n);
	if (fegetround() != (n & 1 ? FE_UPWARD : FE_TONEAREST))
		FAIL("rounding mode of restart %d\n", (int)n);
	if (n == RESTARTS) {
		re_done = 1;
		rt_ctx_switch(&re_sp, main_sp); /* never resumed */
	}
	rt_ctx_restart(stack5 + sizeof(stack5), re, (void *)(n + 1), (n + 1) & 1 ? fp_up : fp_near);
}

static void restarts(void)
{
	fesetround(FE_UPWARD);
	fp_up = rt_ctx_fpstate();
	fesetround(FE_TONEAREST);
	fp_near = rt_ctx_fpstate();
	re_sp = rt_ctx_make(stack5 + sizeof(stack5), re, (void *)0);
	fesetround(FE_DOWNWARD); /* main's own, kept across the whole chain */
	rt_ctx_switch(&main_sp, re_sp);
	if (!re_done)
		FAIL("restarts did not finish\n");
	if (fegetround() != FE_DOWNWARD)
		FAIL("rounding mode of main lost across restarts\n");
	fesetround(FE_TONEAREST);
}

int main(void)
{
	co_sp = rt_ctx_make(stack + sizeof(stack), co, (void *)0x5eed);
	fesetround(FE_TONEAREST);
	X87_SET(_FPU_EXTENDED);
	register double keep =
	    42.5; /* lives across the switch in a callee-saved register or stack */
	for (int i = 0; i < 100000; i++) {
		rt_ctx_switch(&main_sp, co_sp);
		if (counter != i + 1)
			FAIL("counter %d at %d\n", counter, i);
		if (fegetround() != FE_TONEAREST)
			FAIL("rounding mode of main lost\n");
		X87_CHECK(_FPU_EXTENDED, "main");
	}
	if (keep != 42.5)
		FAIL("value lost\n");
	co2_sp = rt_ctx_make(stack2 + sizeof(stack2), co2, NULL);
	counter = 0;
	for (int i = 0; i < 1000; i++) {
		rt_ctx_switch(&main_sp, co2_sp);
		if (counter != i + 1)
			FAIL("counter %d at %d\n", counter, i);
		X87_CHECK(_FPU_EXTENDED, "main");
	}
	mxcsr_alone();
	restarts();
	printf("ok\n");
	return 0;
}
