/* SPDX-License-Identifier: MIT */
/*
 * Validation of the once: the initialiser runs once and is done before any caller returns.
 * Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/once.h>

static pvrt_once_t once = PVRT_ONCE_INIT;
static int once_runs;
static void once_fn(void)
{
	once_runs++;
}
static void *once_thread(void *p)
{
	(void)p;
	pvrt_once(&once, once_fn);
	if (__atomic_load_n(&once_runs, __ATOMIC_RELAXED) != 1)
		FAIL("once: initialiser not done on return");
	return NULL;
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	run(once_thread, NT);
	if (once_runs != 1)
		FAIL("once ran %d times", once_runs);
	validate_end();
	printf("validate once: OK\n");
	return 0;
}
