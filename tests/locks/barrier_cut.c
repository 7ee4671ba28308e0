/* SPDX-License-Identifier: MIT */
/*
 * When a barrier arrival stops spinning (the lock statistics' spin cuts), with a fake hint page
 * installed by pvrt_locks_set_hints, two threads meeting 2,000 times and record 3 (neither
 * thread's) preempted throughout:
 *   vCPU page: another vCPU is preempted, a peer may be on it: arrivals that spin are cut;
 *   thread-slot page (PVHINT_VALID_SLEEPING): record 3 is some other registered thread, of this
 *   process or another; what counts is whether our own thread waited for a CPU lately (its
 *   steal, which stays 0 here): no cuts. Before, each check of an arrival read every record
 *   ever used (all of pvhintd's, and all of this process's past threads) and cut on any.
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

static struct pvhint_record rec[4];
static pvhint_t page = {.rec = rec, .nr = 4};
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
	rec[3].preempted = PVHINT_PREEMPTED;
	uint64_t vcpu = cuts_of(PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED);
	uint64_t slots =
	    cuts_of(PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_SLEEPING);
	printf("spin cuts in %d rounds: vCPU page %llu, thread-slot page %llu\n", ROUNDS,
	       (unsigned long long)vcpu, (unsigned long long)slots);
	CHECK(vcpu > 0);
	CHECK_EQ(slots, 0);
	return 0;
}
