/* SPDX-License-Identifier: MIT */
/*
 * Slice mode (timing; label nosan): 4 vCPUs with a spinning thread each on 2 pCPUs share them
 * round-robin, so each reads preempted about half the time and the two vCPUs of a pCPU are
 * never both running; when one vCPU halts (its thread parks), the other vCPU of its pCPU gets the
 * pCPU all the time, and a halted vCPU's pCPU-mate is not idle while it runs.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <math.h>
#include <pthread.h>

static pvhint_t *h;
static int stop, park_v0, parked_v0;

static void *spin(void *arg)
{
	unsigned v = (unsigned)(uintptr_t)arg;
	CHECK(!pvhint_emu_attach(h, v));
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		if (v == 0 && __atomic_load_n(&park_v0, __ATOMIC_ACQUIRE)) {
			pvhint_thread_park(h);
			__atomic_store_n(&parked_v0, 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&park_v0, __ATOMIC_ACQUIRE))
				test_sleep_us(1000);
			pvhint_thread_unpark(h);
			__atomic_store_n(&parked_v0, 0, __ATOMIC_RELEASE);
		}
	}
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

/*
 * Preempted fraction of each vCPU over ms, from its steal counter (the time its flag was set, as
 * accounted by the emulator: exact, unlike sampling from a thread the loaded machine delays);
 * and the fraction of samples where both vCPUs of a pCPU read running. A switch sets the outgoing
 * flag before clearing the incoming one, so a true overlap shows in both reading orders.
 */
static void sample(uint64_t ms, double frac[4], double *both_running)
{
	uint64_t s0[4], t0 = os_now_ns();
	long n = 0, both = 0;
	for (unsigned v = 0; v < 4; v++)
		s0[v] = pvhint_steal(h, v);
	while (os_now_ns() - t0 < ms * 1000000) {
		test_sleep_us(100);
		for (unsigned p = 0; p < 2; p++) {
			bool a1 = pvhint_vcpu_preempted(h, p), b1 = pvhint_vcpu_preempted(h, p + 2);
			bool b2 = pvhint_vcpu_preempted(h, p + 2), a2 = pvhint_vcpu_preempted(h, p);
			n++;
			both += !a1 && !b1 && !a2 && !b2;
		}
	}
	double span = (double)(os_now_ns() - t0);
	for (unsigned v = 0; v < 4; v++)
		frac[v] = (double)(pvhint_steal(h, v) - s0[v]) / span;
	*both_running = (double)both / (double)n;
}

int main(void)
{
	CHECK(
	    !pvhint_open(&(struct pvhint_options){.source = "emu",
						  .emu = "vcpus=4,pcpus=2,mode=slice,quantum=2ms"},
			 &h));
	pthread_t th[4];
	for (unsigned v = 0; v < 4; v++)
		CHECK(!pthread_create(&th[v], NULL, spin, (void *)(uintptr_t)v));
	test_sleep_us(50000);
	double fr[4], both;
	sample(600, fr, &both);
	printf("all runnable: preempted %.3f %.3f %.3f %.3f, both-running samples %.4f\n", fr[0],
	       fr[1], fr[2], fr[3], both);
	for (unsigned v = 0; v < 4; v++)
		CHECK(fabs(fr[v] - 0.5) < 0.1);
	CHECK(both < 0.01);

	/* vCPU 0 halts: vCPU 2 (same pCPU) runs all the time, pCPU 0 stays busy */
	__atomic_store_n(&park_v0, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&parked_v0, __ATOMIC_ACQUIRE))
		test_sleep_us(100);
	test_sleep_us(10000);
	sample(300, fr, &both);
	printf("vCPU 0 halted: preempted %.3f %.3f %.3f %.3f\n", fr[0], fr[1], fr[2], fr[3]);
	CHECK(fr[0] < 0.01); /* halted is not preempted */
	CHECK(fr[2] < 0.05);
	CHECK(fabs(fr[1] - 0.5) < 0.1 && fabs(fr[3] - 0.5) < 0.1);
	CHECK(!pvhint_pcpu_idle(h, 0) && !pvhint_pcpu_idle(h, 2));

	__atomic_store_n(&park_v0, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (unsigned v = 0; v < 4; v++)
		CHECK(!pthread_join(th[v], NULL));
	/* nothing attached: all halted, every pCPU idle, nothing preempted */
	for (unsigned v = 0; v < 4; v++)
		CHECK(pvhint_pcpu_idle(h, v) && !pvhint_vcpu_preempted(h, v));
	pvhint_close(h);
	printf("emu slice ok\n");
	return 0;
}
