/* SPDX-License-Identifier: MIT */
/*
 * Directed yield under the emulator (slice mode, 3 vCPUs on 1 pCPU, one counting thread each):
 * the kernel device's answers (EINVAL, EAGAIN for the caller's own vCPU and for a running one,
 * EBUSY within the rate limit), and that a thread asking for a preempted vCPU returns only after
 * that vCPU ran: its counter moved. Only with PVRT_DIRECTED_YIELD=1 (-ENOTSUP without), and not in
 * modes without pCPUs to give (noisy, script, random).
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define V 3
static pvhint_t *h;
static int stop;
static unsigned long count[V];
static int asked, moved, busy, self_again;

static void *counter(void *arg)
{
	unsigned v = (unsigned)(uintptr_t)arg;
	CHECK(!pvhint_emu_attach(h, v));
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&count[v], 1, __ATOMIC_RELAXED);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

/* On vCPU 0: whenever vCPU 1 reads preempted, ask for it and see whether it ran meanwhile. */
static void *asker(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h, 0));
	CHECK_EQ(pvhint_yield_to(h, 0), -EAGAIN); /* our own vCPU runs */
	uint64_t t0 = os_now_ns();
	while (asked < 20 && os_now_ns() - t0 < 20000000000ull) {
		if (!pvhint_vcpu_preempted(h, 1))
			continue;
		unsigned long c0 = __atomic_load_n(&count[1], __ATOMIC_RELAXED);
		int r = pvhint_yield_to(h, 1);
		if (r == -EBUSY) {
			busy++;
			continue;
		}
		if (r == -EAGAIN) /* it ran between the look and the request */
			continue;
		CHECK_EQ(r, 0);
		asked++;
		moved += __atomic_load_n(&count[1], __ATOMIC_RELAXED) != c0;
	}
	self_again = pvhint_yield_to(h, 0);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

/* An emulator opened with spec cannot yield, and says so at no cost. */
static void expect_off(const char *spec)
{
	pvhint_t *o;
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &o));
	CHECK(!pvhint_can_yield(o));
	CHECK_EQ(pvhint_yield_to(o, 1), -ENOTSUP);
	pvhint_close(o);
}

static void wait_preempted(unsigned a, unsigned b)
{
	uint64_t t0 = os_now_ns();
	while (!(pvhint_vcpu_preempted(h, a) && pvhint_vcpu_preempted(h, b))) {
		CHECK(os_now_ns() - t0 < 10000000000ull);
		test_sleep_us(50);
	}
}

int main(void)
{
	expect_off("vcpus=2,pcpus=1"); /* off by default */
	CHECK(!setenv("PVRT_DIRECTED_YIELD", "1", 1));
	CHECK(!pvhint_open(
	    &(struct pvhint_options){.source = "emu",
				     .emu = "vcpus=3,pcpus=1,mode=slice,quantum=20ms,rt=0"},
	    &h));
	CHECK(pvhint_can_yield(h));
	CHECK_EQ(pvhint_yield_to(h, V), -EINVAL);
	CHECK_EQ(pvhint_yield_to(h, 1), -EAGAIN); /* nothing attached: nobody is preempted */

	pthread_t th[V], ask;
	for (unsigned v = 0; v < V; v++)
		CHECK(!pthread_create(&th[v], NULL, counter, (void *)(uintptr_t)v));
	/* From outside the emulation (this thread is attached to no vCPU). Two preempted vCPUs:
	 * the first is asked for, the second is within the rate limit, and the first then runs.
	 * A slice may end, or this thread lose its CPU, between the look and the requests: then
	 * look again (the emulator's control thread is not real-time here, so that it does not
	 * take this thread's CPU at each request). */
	int ok = 0;
	for (int i = 0; i < 200 && !ok; i++) {
		wait_preempted(1, 2);
		int r1 = pvhint_yield_to(h, 1), r2 = pvhint_yield_to(h, 2);
		ok = r1 == 0 && r2 == -EBUSY && pvhint_yield_to(h, 1) == -EAGAIN;
		if (r1 == 0)
			test_sleep_us(100); /* out of the rate limit for the next try */
	}
	CHECK(ok);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (unsigned v = 0; v < V; v++)
		CHECK(!pthread_join(th[v], NULL));

	/* From vCPU 0 with vCPU 1 counting (vCPU 2 idle: no thread). */
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	CHECK(!pthread_create(&th[1], NULL, counter, (void *)(uintptr_t)1));
	CHECK(!pthread_create(&ask, NULL, asker, NULL));
	CHECK(!pthread_join(ask, NULL));
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(th[1], NULL));
	printf("asked %d times: vCPU 1 ran before %d of the returns; %d within the rate limit\n",
	       asked, moved, busy);
	CHECK_EQ(asked, 20);
	CHECK_EQ(self_again, -EAGAIN);
	/* The caller returns only once its own vCPU runs again, after vCPU 1's quantum: whether
	 * vCPU 1's thread used it is the machine's business, but on most returns it did. */
	CHECK(moved * 2 > asked);
	pvhint_close(h);

	/* Off by the switch, and in modes with no pCPU to give. */
	CHECK(!setenv("PVRT_DIRECTED_YIELD", "0", 1));
	expect_off("vcpus=2,pcpus=1");
	CHECK(!setenv("PVRT_DIRECTED_YIELD", "1", 1));
	expect_off("vcpus=2,mode=script");
	expect_off("vcpus=2,mode=noisy");
	printf("emu yield ok\n");
	return 0;
}
