/* SPDX-License-Identifier: MIT */
/*
 * Run under `pvrt-run --hints=bpf` (tests/tools/pvrt_run_bpf.sh): pvrt-run's server follows
 * threads only while the process's locks contend (lk_hints -> pvhint_want). Watched through the
 * record of the main thread, whose version moves at every switch-in the program sees:
 *   1. barrier rounds larger than the CPUs (they never read the hints): not followed;
 *   2. a contended mutex: followed (within 10 s);
 *   3. quiet again: not followed (the server detaches a second after the last want).
 * Exit 0 and "want: ok", or a CHECK failure.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pvhint_t *h;
static int self;
static volatile int stop;
static pthread_barrier_t bar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long counter;

static int quit; /* written by a round's serial thread between its two waits */

static void *barrier_thread(void *arg)
{
	(void)arg;
	for (;;) {
		/* One thread reads the stop for the round; all act on it after the second wait. */
		if (pthread_barrier_wait(&bar) == PTHREAD_BARRIER_SERIAL_THREAD)
			quit = __atomic_load_n(&stop, __ATOMIC_RELAXED);
		pthread_barrier_wait(&bar);
		if (quit)
			return NULL;
	}
}

static void *mutex_thread(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&mu);
		counter++;
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

/* n threads of fn until stopped; 'check' runs meanwhile. */
static void run(void *(*fn)(void *), unsigned n, void (*check)(void))
{
	pthread_t *t = calloc(n, sizeof(*t));
	CHECK(t != NULL);
	__atomic_store_n(&stop, 0, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n; i++)
		CHECK(!pthread_create(&t[i], NULL, fn, NULL));
	check();
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n; i++)
		CHECK(!pthread_join(t[i], NULL));
	free(t);
}

static void check_barrier(void)
{
	/* Several windows while the rounds run: none sees the program follow us. */
	test_sleep_us(1500000); /* a want of the start-up (thread creation) expires */
	CHECK(test_record_stops_following(h, self));
	for (int i = 0; i < 10; i++)
		CHECK(!test_record_follows(h, self, 50));
}

static void check_mutex(void)
{
	bool on = false;
	for (int i = 0; i < 10000 && !on; i++)
		on = test_record_follows(h, self, 1);
	CHECK(on);
}

int main(void)
{
	CHECK_EQ(pvhint_default(&h), 0);
	if (strcmp(pvhint_source_name(h), "bpf") || !pvhint_want_mode) {
		printf("want: not a served bpf source (%s): skipped\n", pvhint_source_name(h));
		return 77;
	}
	self = pvhint_self_vcpu();
	CHECK(self > 0);
	/* More threads a round than the CPUs the locks count (the process's affinity). */
	cpu_set_t set;
	CHECK(!sched_getaffinity(0, sizeof(set), &set));
	unsigned n = 2 * (unsigned)CPU_COUNT(&set) + 1;
	CHECK(!pthread_barrier_init(&bar, NULL, n));
	run(barrier_thread, n, check_barrier);
	run(mutex_thread, 4, check_mutex);
	CHECK(test_record_stops_following(h, self));
	printf("want: ok (%lu mutex acquisitions)\n", counter);
	return 0;
}
