/* SPDX-License-Identifier: MIT */
/*
 * fork() under an emulator in slice mode (2 vCPUs on 1 pCPU, 1 ms quantum), while attached
 * threads are being stopped and resumed, from a thread that is itself attached. In each child:
 * the inherited emulator is inert (the pvhint_emu_* calls return -ECHILD), the stop signal's
 * action is back to the default (so a stop signal reaching the child would kill it: the parent
 * sees the exit status), the page reads not preempted / not idle, user code runs, a new thread
 * parks and unparks and takes a mutex, a fresh emulator of the child's own stops a thread, and
 * closing the inherited handle leaves the parent's export file alone; the child exits 0. The
 * parent's emulator keeps descheduling its threads throughout and closes cleanly.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define TSAN 1 /* TSan aborts a child of a multi-threaded fork that starts threads */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

static pvhint_t *h;
static int done;
static uint64_t progress[2];

static void *spinner(void *arg)
{
	unsigned v = (unsigned)(uintptr_t)arg;
	CHECK(!pvhint_emu_attach(h, v));
	while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&progress[v], 1, __ATOMIC_RELAXED);
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pvhint_t *h2;
static int child_done;

static void *child_thread(void *arg)
{
	(void)arg;
	/* The inherited handle: park/unpark are no-ops, attach fails cleanly. */
	pvhint_thread_park(h);
	pvhint_thread_unpark(h);
	CHECK(pvhint_emu_attach(h, 1) == -ECHILD);
	CHECK(!pthread_mutex_lock(&m));
	CHECK(!pthread_mutex_unlock(&m));
	return NULL;
}

static void *child_own_emu(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(h2, 1));
	while (!__atomic_load_n(&child_done, __ATOMIC_ACQUIRE))
		;
	CHECK(!pvhint_emu_detach(h2));
	return NULL;
}

static void child(int sig)
{
	struct pvhint_emu_stats st;
	CHECK(pvhint_emu_attach(h, 0) == -ECHILD);
	CHECK(strstr(pvhint_errmsg(), "fork"));
	CHECK(pvhint_emu_attach_next(h) == -ECHILD);
	CHECK(pvhint_emu_detach(h) == -ECHILD);
	CHECK(pvhint_emu_deschedule(h, 1, 0) == -ECHILD);
	CHECK(pvhint_emu_resume(h, 1) == -ECHILD);
	CHECK(pvhint_emu_stats(h, 0, &st) == -ECHILD);
	CHECK(pvhint_emu_signal(h) == -ECHILD);
	pvhint_thread_park(h); /* the caller was attached in the parent: now a no-op */
	pvhint_thread_unpark(h);
	struct sigaction sa;
	CHECK(!sigaction(sig, NULL, &sa));
	CHECK(!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL);
	for (unsigned v = 0; v < 2; v++)
		CHECK(!pvhint_vcpu_preempted(h, v) && !pvhint_pcpu_idle(h, v));
	/* User code, long enough for several of the parent's quanta: no stop, no signal. */
	uint64_t t0 = os_now_ns();
	volatile uint64_t n = 0;
	while (os_now_ns() - t0 < 20000000)
		n++;
	CHECK(n > 0);
	if (!TSAN) {
		pthread_t th;
		CHECK(!pthread_create(&th, NULL, child_thread, NULL));
		CHECK(!pthread_join(th, NULL));
		/* An emulator of the child's own works: its stop handler is installed anew. */
		CHECK(!pvhint_open(
		    &(struct pvhint_options){.source = "emu", .emu = "vcpus=2,mode=script"}, &h2));
		CHECK(pvhint_emu_signal(h2) > 0);
		CHECK(!pthread_create(&th, NULL, child_own_emu, NULL));
		do {
			CHECK(!pvhint_emu_stats(h2, 1, &st));
		} while (st.threads != 1);
		CHECK(!pvhint_emu_deschedule(h2, 1, 0));
		CHECK(pvhint_vcpu_preempted(h2, 1));
		CHECK(!pvhint_emu_resume(h2, 1));
		__atomic_store_n(&child_done, 1, __ATOMIC_RELEASE);
		CHECK(!pthread_join(th, NULL));
		CHECK(!pvhint_emu_stats(h2, 1, &st));
		CHECK_EQ(st.desched, 1);
		pvhint_close(h2);
	}
	pvhint_close(h);
	exit(0);
}

int main(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/dev/shm/pvrt-test-fork-%d", (int)getpid());
	char spec[160];
	snprintf(spec, sizeof(spec), "vcpus=2,pcpus=1,quantum=1ms,mode=slice,export=%s", path);
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &h));
	int sig = pvhint_emu_signal(h);
	CHECK(sig > 0);
	pthread_t th[2];
	for (unsigned v = 0; v < 2; v++)
		CHECK(!pthread_create(&th[v], NULL, spinner, (void *)(uintptr_t)v));
	CHECK(!pvhint_emu_attach(h, 0)); /* the forking thread is attached too */
	struct pvhint_emu_stats s0, s1;
	/* Fork once both spinners are attached: an attach in flight at fork (its record not yet
	 * linked; the first one loads the bpf source for the sampler, which takes a while) leaves
	 * the child a record only that thread's stack pointed to (LeakSanitizer: a leak). */
	for (unsigned v = 0; v < 2; v++) {
		unsigned want = v == 0 ? 2 : 1; /* vCPU 0: a spinner and this thread */
		for (;;) {
			CHECK(!pvhint_emu_stats(h, v, &s0));
			if (s0.threads == want)
				break;
			test_sleep_us(1000);
		}
	}
	CHECK(!pvhint_emu_stats(h, 0, &s0));
	uint64_t p0[2] = {__atomic_load_n(&progress[0], __ATOMIC_RELAXED),
			  __atomic_load_n(&progress[1], __ATOMIC_RELAXED)};
	for (int i = 0; i < 10; i++) {
		test_sleep_us(3000);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (!pid)
			child(sig);
		int status;
		pid_t w;
		while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
			;
		CHECK(w == pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "child %d: %s %d\n", i,
				WIFEXITED(status) ? "exit status" : "killed by signal",
				WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			CHECK(0);
		}
		CHECK(!access(path, F_OK)); /* the child's close left the parent's file */
	}
	/* The parent's emulator still works: it keeps switching and its threads progress. */
	test_sleep_us(50000);
	CHECK(!pvhint_emu_stats(h, 0, &s1));
	CHECK(s1.desched > s0.desched);
	CHECK(s1.threads == 2);
	for (unsigned v = 0; v < 2; v++)
		CHECK(__atomic_load_n(&progress[v], __ATOMIC_RELAXED) > p0[v]);
	CHECK(!pvhint_emu_detach(h));
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	for (unsigned v = 0; v < 2; v++)
		CHECK(!pthread_join(th[v], NULL));
	pvhint_close(h);
	CHECK(access(path, F_OK) && errno == ENOENT);
	printf("emu fork ok\n");
	return 0;
}
