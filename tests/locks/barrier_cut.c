/* SPDX-License-Identifier: MIT */
/*
 * Barrier arrivals stop spinning (the lock statistics' spin cuts) when another record is
 * preempted, with a fake hint page installed by pvrt_locks_set_hints: two threads meet 2,000
 * times, and record 4000 of 4096 (neither thread's) is preempted throughout.
 *   vCPU page: every check reads all records.
 *   thread-slot page (PVHINT_VALID_SLEEPING, nr_used 4096 as after many short threads): a check
 *   reads a window of LK_SCAN_RECORDS records, the next check the next window; the preempted
 *   record must still be found (a window that does not move, or does not wrap, never gets
 *   there).
 * Needs two CPUs (the barrier spins only when its round fits the CPUs).
 */
#define _GNU_SOURCE
#include <pvrt/barrier.h>
#include <pvrt/lockstat.h>
#include <pvrt/pvhint.h>

#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define ROUNDS 2000

#define NREC 4096
static struct pvhint_record rec[NREC];
static pvhint_t page = {.rec = rec, .nr = NREC};
static pvrt_barrier_t bar;

static void *meet(void *p)
{
	pvhint_tls_vcpu = (int)(intptr_t)p; /* the record the thread is (as if attached to it) */
	for (int i = 0; i < ROUNDS; i++) {
		int r = pvrt_barrier_wait(&bar);
		CHECK(r == 0 || r == PVRT_BARRIER_SERIAL_THREAD);
	}
	return NULL;
}

static uint64_t cuts_of(uint32_t valid)
{
	page.valid = valid;
	struct pvrt_lock_stats a, b;
	CHECK_EQ(pvrt_barrier_init(&bar, 2), 0);
	CHECK_EQ(pvrt_locks_stats_get(PVRT_LOCK_BARRIER, &a), 0);
	pthread_t t[2];
	for (intptr_t i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, meet, (void *)(i + 1)), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(pvrt_locks_stats_get(PVRT_LOCK_BARRIER, &b), 0);
	CHECK_EQ(pvrt_barrier_destroy(&bar), 0);
	CHECK_EQ(b.acquisitions - a.acquisitions, 2 * ROUNDS);
	return b.spin_cut - a.spin_cut;
}

int main(void)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("skipped: needs 2 CPUs\n");
		return 77;
	}
	pvrt_locks_stats_enable(true);
	pvrt_locks_set_hints(&page);
	rec[4000].preempted = PVHINT_PREEMPTED;
	uint64_t vcpu = cuts_of(PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED);
	uint64_t slots =
	    cuts_of(PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_SLEEPING);
	printf("spin cuts in %d rounds: vCPU page %llu, thread-slot page %llu\n", ROUNDS,
	       (unsigned long long)vcpu, (unsigned long long)slots);
	CHECK(vcpu > 0);
	CHECK(slots > 0);
	return 0;
}
