/* SPDX-License-Identifier: MIT */
/*
 * Validation of the spinlock: lock and trylock on one spinlock.
 * Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/spinlock.h>

/* ---- spinlock ---- */
static pvrt_spinlock_t spl;
static long spin_count;

static void *spin_thread(void *p)
{
	(void)p;
	long n = 20000 * scale;
	for (long i = 0; i < n; i++) {
		if (i % 5 == 0) {
			while (pvrt_spin_trylock(&spl) == -EBUSY)
				;
		} else {
			pvrt_spin_lock(&spl);
		}
		spin_count++;
		pvrt_spin_unlock(&spl);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	run(spin_thread, NT);
	if (spin_count != 20000 * scale * NT)
		FAIL("spinlock count %ld", spin_count);
	printf("spinlock: %ld sections\n", spin_count);
	validate_end();
	printf("validate spinlock: OK\n");
	return 0;
}
