/* SPDX-License-Identifier: MIT */
/*
 * Lifetime under churn (for the sanitizer builds): threads attach, park/unpark, move between
 * vCPUs, detach and exit with or without detaching while a fast time-slice emulator stops and
 * resumes them; the emulator is closed while some threads are still attached (held ones are
 * released, their records orphaned and freed by the threads). Then the same in random mode,
 * where hints move but nothing stops. Every thread must finish; sanitizers check the memory.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static pvhint_t *h;
static int phase;	/* 0 churn, 1 stop using h, 2 exit */
static int short_phase; /* the same for the short-lived threads */
static uint64_t work;
static int left; /* long-lived threads out of the churn loop (no longer using h) */

static void *churn(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	int *ph = id == 99 ? &short_phase : &phase;
	unsigned n = 0;
	while (__atomic_load_n(ph, __ATOMIC_ACQUIRE) == 0) {
		CHECK(!pvhint_emu_attach_next(h));
		for (int k = 0; k < 20; k++) {
			for (int i = 0; i < 2000; i++)
				__atomic_fetch_add(&work, 1, __ATOMIC_RELAXED);
			if ((k + id) % 5 == 0) {
				uint32_t w = 0;
				struct timespec ts = {0, 50000};
				pvhint_thread_park(h);
				syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
				pvhint_thread_unpark(h);
			}
			(void)pvhint_vcpu_preempted(h, (unsigned)pvhint_self_vcpu());
		}
		if (++n % 3)
			CHECK(!pvhint_emu_detach(h));
	}
	/* Some end attached: the close below orphans them. Wait without touching h. */
	if (id != 99)
		__atomic_fetch_add(&left, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(ph, __ATOMIC_ACQUIRE) < 2) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return NULL; /* attached or not: the thread-exit destructor frees the record */
}

static void run(const char *spec, int nthreads, uint64_t ms)
{
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &h));
	__atomic_store_n(&phase, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&left, 0, __ATOMIC_RELEASE);
	pthread_t th[16];
	for (int i = 0; i < nthreads; i++)
		CHECK(!pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)i));
	/* a short-lived thread that exits attached, while the emulator runs */
	for (int i = 0; i < 4; i++) {
		pthread_t t;
		CHECK(!pthread_create(&t, NULL, churn, (void *)(uintptr_t)99));
		test_sleep_us(ms * 1000 / 8);
		__atomic_store_n(&short_phase, 2, __ATOMIC_RELEASE);
		CHECK(!pthread_join(t, NULL));
		__atomic_store_n(&short_phase, 0, __ATOMIC_RELEASE);
	}
	test_sleep_us(ms * 1000 / 2);
	__atomic_store_n(&phase, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&left, __ATOMIC_ACQUIRE) < nthreads)
		test_sleep_us(1000); /* they leave the churn loop (possibly still attached) */
	pvhint_close(h);	     /* orphans the records of those still attached */
	__atomic_store_n(&phase, 2, __ATOMIC_RELEASE);
	for (int i = 0; i < nthreads; i++)
		CHECK(!pthread_join(th[i], NULL));
}

int main(int argc, char **argv)
{
	/* argv[1]: rounds (the soak test runs many; each round about 2 s) */
	int rounds = argc > 1 ? atoi(argv[1]) : 1;
	for (int r = 0; r < rounds; r++) {
		run("vcpus=4,pcpus=1,mode=slice,quantum=200us", 8, 1000);
		run("vcpus=3,pcpus=2,mode=noisy,duty=0.5,period=1ms", 6, 500);
		run("vcpus=4,mode=random,period=100us,duty=0.5", 6, 500);
	}
	CHECK(work > 0);
	printf("emu churn ok\n");
	return 0;
}
