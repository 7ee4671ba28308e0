/* SPDX-License-Identifier: MIT */
/*
 * Validation of the cond: a bounded queue on two condvars (both clocks), signal, broadcast and
 * timed waits. Harness, hints and usage: validate.h.
 */
#include "validate.h"

#include <pvrt/cond.h>
#include <pvrt/mutex.h>

/* ---- condvar: bounded queue, signal and broadcast, timed waits ---- */
#define QCAP 8
static pvrt_mutex_t qm = PVRT_MUTEX_INITIALIZER;
static pvrt_cond_t notempty, notfull;
static int q[QCAP], qn;
static long produced, consumed, csum, psum;
static int producers_done;

static void *producer(void *p)
{
	long id = (long)p;
	long n = 5000 * scale;
	for (long i = 1; i <= n; i++) {
		pvrt_mutex_lock(&qm);
		while (qn == QCAP) {
			if (i % 2) {
				pvrt_cond_wait(&notfull, &qm);
			} else {
				struct timespec ts = in_us(CLOCK_REALTIME, 300);
				int r = pvrt_cond_timedwait(&notfull, &qm, &ts);
				if (r && r != -ETIMEDOUT)
					FAIL("timedwait %d", r);
			}
		}
		q[qn++] = (int)(i + id);
		produced++;
		psum += i + id;
		if (i % 7 == 0)
			pvrt_cond_broadcast(&notempty);
		else
			pvrt_cond_signal(&notempty);
		pvrt_mutex_unlock(&qm);
	}
	return NULL;
}

static void *consumer(void *p)
{
	/* One consumer waits without a timeout, so a lost wake-up hangs or fails the test
	 * instead of being papered over by the next 500 us timeout. */
	bool untimed = (long)p == 3;
	for (;;) {
		pvrt_mutex_lock(&qm);
		while (qn == 0 && !producers_done) {
			if (untimed) {
				int r = pvrt_cond_wait(&notempty, &qm);
				if (r)
					FAIL("cond wait %d", r);
				continue;
			}
			struct timespec ts = in_us(CLOCK_MONOTONIC, 500);
			int r = pvrt_cond_clockwait(&notempty, &qm, CLOCK_MONOTONIC, &ts);
			if (r && r != -ETIMEDOUT)
				FAIL("clockwait %d", r);
		}
		if (qn == 0 && producers_done) {
			pvrt_mutex_unlock(&qm);
			return NULL;
		}
		csum += q[--qn];
		consumed++;
		pvrt_cond_broadcast(&notfull);
		pvrt_mutex_unlock(&qm);
	}
}

/* Threads 0 and 1 produce, 2 and 3 consume; the last producer to finish tells the consumers,
 * with a broadcast, that nothing more comes. */
static int producers_left = 2;
static void *cond_thread(void *p)
{
	long id = (long)p;
	if (id >= 2)
		return consumer(p); /* id 3 waits without a timeout */
	producer((void *)id);
	/* Relaxed: the mutex orders producers_done for the consumers. */
	if (__atomic_sub_fetch(&producers_left, 1, __ATOMIC_RELAXED) == 0) {
		pvrt_mutex_lock(&qm);
		producers_done = 1;
		pvrt_cond_broadcast(&notempty);
		pvrt_mutex_unlock(&qm);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	validate_begin(argc, argv);
	if (pvrt_cond_init(&notempty, CLOCK_MONOTONIC) || pvrt_cond_init(&notfull, CLOCK_REALTIME))
		FAIL("cond init");
	run(cond_thread, 4);
	if (produced != consumed || psum != csum || produced != 2 * 5000 * scale)
		FAIL("cond: produced %ld consumed %ld", produced, consumed);
	if (pvrt_cond_destroy(&notempty) || pvrt_cond_destroy(&notfull))
		FAIL("cond destroy");
	printf("cond: %ld items\n", consumed);
	validate_end();
	printf("validate cond: OK\n");
	return 0;
}
