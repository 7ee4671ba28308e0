/* SPDX-License-Identifier: MIT */
/*
 * pvhint_exec_prepare: a stop signal queued for a thread when it replaces its program would kill
 * the new program (no handler there). Here the queued signal is made certain: the thread blocks
 * the stop signal and its vCPU is descheduled (the stop's acknowledgement times out, the signal
 * stays pending). pvhint_exec_prepare detaches the thread and takes the signal off its queue;
 * the thread then unblocks it and execs /bin/true, which must exit 0.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static pvhint_t *h;
static int ready, queued;

static void *execer(void *a)
{
	(void)a;
	int sig = pvhint_emu_signal(h);
	CHECK(sig > 0);
	CHECK(!pvhint_emu_attach(h, 1));
	sigset_t s, pend;
	sigemptyset(&s);
	sigaddset(&s, sig);
	CHECK(!pthread_sigmask(SIG_BLOCK, &s, NULL));
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	/* Spinning, in user code: a thread seen asleep in the kernel would not be signalled. */
	while (!__atomic_load_n(&queued, __ATOMIC_ACQUIRE))
		;
	CHECK(!sigpending(&pend) && sigismember(&pend, sig)); /* the stop is queued */
	CHECK_EQ(pvhint_exec_prepare(), 1);
	CHECK(!sigpending(&pend) && !sigismember(&pend, sig)); /* and gone */
	CHECK(!pthread_sigmask(SIG_UNBLOCK, &s, NULL));
	execl("/bin/true", "true", (char *)NULL);
	CHECK(!"execl failed");
	return NULL;
}

int main(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		CHECK(!pvhint_open(
		    &(struct pvhint_options){.source = "emu",
					     .emu = "vcpus=2,mode=script,ack_timeout=1ms"},
		    &h));
		pthread_t t;
		CHECK(!pthread_create(&t, NULL, execer, NULL));
		while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
			test_sleep_us(100);
		/* The thread blocks the signal: the stop is sent, not acknowledged (1 ms). */
		CHECK(!pvhint_emu_deschedule(h, 1, 0));
		struct pvhint_emu_stats st;
		CHECK(!pvhint_emu_stats(h, 1, &st));
		CHECK_EQ(st.ack_timeouts, 1);
		CHECK(!pvhint_emu_resume(h, 1));
		__atomic_store_n(&queued, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL); /* not reached: the exec replaces the process */
		_exit(9);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (WIFSIGNALED(st))
		printf("exec'd program killed by signal %d\n", WTERMSIG(st));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("emu_exec: ok\n");
	return 0;
}
