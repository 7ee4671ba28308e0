/* SPDX-License-Identifier: MIT */
/*
 * Validation of the mutex: lock, trylock and timed lock (both clocks) on one mutex, short and long
 * sections. Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/mutex.h>

/* ---- mutex: lock / trylock / timedlock (both clocks), short and long sections ---- */
static pvrt_mutex_t mx = PVRT_MUTEX_INITIALIZER;
static long mx_count, mx_timeouts;
static int mx_inside;

static void *mutex_thread(void *p)
{
	long id = (long)p;
	long n = 20000 * scale;
	for (long i = 0; i < n; i++) {
		int r;
		switch ((i + id) % 8) {
		case 0:
			r = pvrt_mutex_trylock(&mx);
			if (r == -EBUSY)
				r = pvrt_mutex_lock(&mx);
			break;
		case 1: {
			struct timespec ts = in_us(CLOCK_MONOTONIC, 50);
			r = pvrt_mutex_timedlock(&mx, CLOCK_MONOTONIC, &ts);
			break;
		}
		case 2: {
			struct timespec ts = in_us(CLOCK_REALTIME, 200);
			r = pvrt_mutex_timedlock(&mx, CLOCK_REALTIME, &ts);
			break;
		}
		default:
			r = pvrt_mutex_lock(&mx);
		}
		if (r == -ETIMEDOUT) {
			__atomic_fetch_add(&mx_timeouts, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (r)
			FAIL("mutex lock: %d", r);
		if (__atomic_exchange_n(&mx_inside, 1, __ATOMIC_RELAXED))
			FAIL("two threads inside the mutex");
		mx_count++; /* plain: the mutex must protect it (TSan checks too) */
		if (i % 64 == 0)
			for (volatile int k = 0; k < 2000; k++) /* a long section now and then */
				;
		__atomic_store_n(&mx_inside, 0, __ATOMIC_RELAXED);
		if (pvrt_mutex_unlock(&mx))
			FAIL("mutex unlock");
	}
	return NULL;
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	run(mutex_thread, NT);
	if (mx_count + mx_timeouts != 20000 * scale * NT)
		FAIL("mutex: %ld + %ld timeouts != %ld", mx_count, mx_timeouts, 20000 * scale * NT);
	printf("mutex: %ld sections, %ld timed locks timed out\n", mx_count, mx_timeouts);
	validate_end();
	printf("validate mutex: OK\n");
	return 0;
}
