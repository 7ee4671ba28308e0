/* SPDX-License-Identifier: MIT */
/*
 * A stop signal that lands late must not leave a vCPU halted for ever. Slice mode, two vCPUs on
 * one pCPU: vCPU 0's thread spins; vCPU 1's thread blocks the stop signal, spins a while (the
 * emulator's stop requests stay pending), then sleeps in read() (the sampler sees it asleep and
 * halts vCPU 1). When it wakes and unblocks the signal, the pending stop lands while vCPU 1 is
 * held, so the thread stops in the handler with its vCPU still recorded as asleep. The vCPU must
 * become runnable again (it waits for its turn) and get its slices: the thread finishes its
 * rounds. (Sanitizers that defer signals to the thread's next intercepted call produce the same
 * late landing without any mask.) A hang is the failure: ctest's timeout.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static pvhint_t *h;
static int pfd[2];
static int stop_spinner;

static void spin_ms(uint64_t ms)
{
	uint64_t t0 = os_now_ns();
	while (os_now_ns() - t0 < ms * 1000000u)
		;
}

static void *late(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h, 1));
	int sig = pvhint_emu_signal(h);
	CHECK(sig > 0);
	sigset_t s, old;
	sigemptyset(&s);
	sigaddset(&s, sig);
	for (int round = 0; round < 5; round++) {
		CHECK(!pthread_sigmask(SIG_BLOCK, &s, &old));
		spin_ms(20); /* stop requests arrive and stay pending */
		char c;
		CHECK(read(pfd[0], &c, 1) == 1); /* asleep: the sampler halts vCPU 1 */
		CHECK(!pthread_sigmask(SIG_SETMASK, &old, NULL)); /* the pending stop lands */
		spin_ms(5);
	}
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static void *spinner(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h, 0));
	while (!__atomic_load_n(&stop_spinner, __ATOMIC_ACQUIRE))
		;
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

int main(void)
{
	CHECK(!pvhint_open(
	    &(struct pvhint_options){.source = "emu", .emu = "vcpus=2,pcpus=1,quantum=2ms"}, &h));
	CHECK(!pipe(pfd));
	pthread_t a, b;
	CHECK(!pthread_create(&a, NULL, spinner, NULL));
	CHECK(!pthread_create(&b, NULL, late, NULL));
	for (int round = 0; round < 5; round++) {
		usleep(60000); /* the reader spins, then sleeps */
		CHECK(write(pfd[1], "x", 1) == 1);
	}
	CHECK(!pthread_join(b, NULL));
	__atomic_store_n(&stop_spinner, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(a, NULL));
	pvhint_close(h);
	printf("late stop signals: ok\n");
	return 0;
}
