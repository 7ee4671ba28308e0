/* SPDX-License-Identifier: MIT */
/*
 * The context switch alone (no runtime): ping-pong between contexts, callee-saved floating-point
 * state and control registers preserved per context. Built natively and, for aarch64, with the
 * cross compiler and run under qemu-user (see CMakeLists.txt).
 */
#include "arch/ctx.h"

#include <fenv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), exit(1))

static void *main_sp, *co_sp;
static volatile int counter;
static char stack[64 * 1024] __attribute__((aligned(16)));

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

int main(void)
{
	co_sp = rt_ctx_make(stack + sizeof(stack), co, (void *)0x5eed);
	fesetround(FE_TONEAREST);
	register double keep =
	    42.5; /* lives across the switch in a callee-saved register or stack */
	for (int i = 0; i < 100000; i++) {
		rt_ctx_switch(&main_sp, co_sp);
		if (counter != i + 1)
			FAIL("counter %d at %d\n", counter, i);
		if (fegetround() != FE_TONEAREST)
			FAIL("rounding mode of main lost\n");
	}
	if (keep != 42.5)
		FAIL("value lost\n");
	printf("ok\n");
	return 0;
}
