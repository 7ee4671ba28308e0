/* SPDX-License-Identifier: MIT */
/*
 * The stop is invisible to the program except for the time it takes: threads blocked in calls
 * that never restart after a signal handler (epoll_wait, poll, timed futex wait, nanosleep) or
 * that would restart (read on a pipe) while their vCPU is descheduled and resumed many times see
 * no EINTR; a thread whose waits are bracketed by pvhint_thread_park/unpark (as the runtime's)
 * never sees EINTR however the stops fall; errno of a stopped thread is unchanged.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

static pvhint_t *h;
static int efd, epfd, pfd[2], pfd2[2];
static uint32_t fword;
static int done;
static int eintr_seen[8];
static int results[8];
static pid_t tids[8];
static uint64_t spins;

enum { T_EPOLL, T_POLL, T_FUTEX, T_READ, T_SLEEP, T_PARKED, T_SPIN, NT };
static const char *const names[NT] = {"epoll_wait", "poll",   "futex(timeout)",	      "read(pipe)",
				      "nanosleep",  "parked", "spinner (errno, mask)"};

static long futex(uint32_t *a, int op, uint32_t v, const struct timespec *ts)
{
	return syscall(SYS_futex, a, op, v, ts, NULL, 0);
}

static void *worker(void *arg)
{
	int k = (int)(intptr_t)arg;
	CHECK(!pvhint_emu_attach(h, 1));
	__atomic_store_n(&tids[k], (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	int r = 0;
	errno = 0;
	switch (k) {
	case T_EPOLL: {
		struct epoll_event ev;
		r = epoll_wait(epfd, &ev, 1, 20000);
		break;
	}
	case T_POLL: {
		struct pollfd p = {.fd = pfd2[0], .events = POLLIN};
		r = poll(&p, 1, 20000);
		break;
	}
	case T_FUTEX: {
		struct timespec ts = {20, 0};
		r = (int)futex(&fword, FUTEX_WAIT_PRIVATE, 0, &ts);
		break;
	}
	case T_READ: {
		char c;
		r = (int)read(pfd[0], &c, 1);
		break;
	}
	case T_SLEEP: {
		struct timespec ts = {0, 800000000};
		r = nanosleep(&ts, NULL);
		break;
	}
	case T_PARKED:
		/* The runtime's way: waits bracketed by park/unpark, here in a tight loop of
		 * short timed futex waits interleaved with user code, racing the stops. */
		while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
			uint32_t w = 0;
			struct timespec ts = {0, 300000};
			pvhint_thread_park(h);
			long rr = futex(&w, FUTEX_WAIT_PRIVATE, 0, &ts);
			int e = errno;
			pvhint_thread_unpark(h);
			if (rr < 0 && e == EINTR)
				__atomic_fetch_add(&eintr_seen[k], 1, __ATOMIC_RELAXED);
			for (int i = 0; i < 1000; i++)
				__atomic_fetch_add(&spins, 1, __ATOMIC_RELAXED);
		}
		break;
	case T_SPIN: {
		/* errno and the signal mask are exactly as the thread left them */
		sigset_t m0, m;
		sigemptyset(&m0);
		sigaddset(&m0, SIGUSR2);
		CHECK(!pthread_sigmask(SIG_SETMASK, &m0, NULL));
		while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
			CHECK(!pthread_sigmask(SIG_SETMASK, NULL, &m));
			/* by member: bytes past the kernel's sigset size are unspecified */
			for (int sg = 1; sg < SIGRTMAX; sg++)
				if (sigismember(&m, sg) != sigismember(&m0, sg))
					__atomic_fetch_add(&eintr_seen[k], 1, __ATOMIC_RELAXED);
			errno = 777;
			for (int i = 0; i < 1000; i++)
				__atomic_fetch_add(&spins, 1, __ATOMIC_RELAXED);
#ifdef PVRT_TSAN
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts); /* TSan delivers signals here */
#endif
			if (errno != 777)
				__atomic_fetch_add(&eintr_seen[k], 1, __ATOMIC_RELAXED);
		}
		break;
	}
	}
	if (r < 0 && errno == EINTR)
		__atomic_fetch_add(&eintr_seen[k], 1, __ATOMIC_RELAXED);
	results[k] = r < 0 ? -errno : r;
	CHECK(!pvhint_emu_detach(h));
	return NULL;
}

static char task_state(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] ? p[2] : '?';
}

int main(void)
{
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "vcpus=2,mode=script"},
			   &h));
	efd = eventfd(0, 0);
	epfd = epoll_create1(0);
	CHECK(efd >= 0 && epfd >= 0);
	struct epoll_event ev = {.events = EPOLLIN};
	CHECK(!epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev));
	CHECK(!pipe(pfd) && !pipe(pfd2));

	pthread_t th[NT];
	for (int k = 0; k < NT; k++)
		CHECK(!pthread_create(&th[k], NULL, worker, (void *)(intptr_t)k));
	/* wait until the blocking ones sleep in the kernel */
	uint64_t t_end = os_now_ns() + 10000000000ull;
	for (int k = 0; k <= T_SLEEP; k++) {
		while (!__atomic_load_n(&tids[k], __ATOMIC_ACQUIRE) || task_state(tids[k]) != 'S')
			CHECK(os_now_ns() < t_end);
	}
	/* many stops and resumes while they block; the nanosleep one spans about 800 ms */
	int rounds = 0;
	uint64_t t_stop = os_now_ns() + 500000000;
	while (os_now_ns() < t_stop) {
		CHECK(!pvhint_emu_deschedule(h, 1, 0));
		test_sleep_us(2000 + (rounds % 7) * 300);
		CHECK(!pvhint_emu_resume(h, 1));
		test_sleep_us(500 + (rounds % 5) * 400);
		rounds++;
	}
	struct pvhint_emu_stats st;
	CHECK(!pvhint_emu_stats(h, 1, &st));
	printf("%d rounds: %llu stops, %llu kernel skips, %llu ack timeouts, %llu eintr\n", rounds,
	       (unsigned long long)st.stops, (unsigned long long)st.kernel_skips,
	       (unsigned long long)st.ack_timeouts, (unsigned long long)st.eintr);
	CHECK(st.stops > 0);	    /* the running threads were really stopped */
	CHECK(st.kernel_skips > 0); /* the blocked ones were left alone */

	/* wake the blocked ones while their vCPU runs */
	uint64_t one = 1;
	CHECK(write(efd, &one, sizeof(one)) == sizeof(one));
	CHECK(write(pfd[1], "x", 1) == 1);
	CHECK(write(pfd2[1], "x", 1) == 1);
	__atomic_store_n(&fword, 1, __ATOMIC_RELEASE);
	futex(&fword, FUTEX_WAKE_PRIVATE, 1, NULL);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	for (int k = 0; k < NT; k++)
		CHECK(!pthread_join(th[k], NULL));
	int bad = 0;
	for (int k = 0; k < NT; k++) {
		printf("%-15s result %d, EINTR/errno changes %d\n", names[k], results[k],
		       eintr_seen[k]);
		bad |= eintr_seen[k] != 0;
	}
	CHECK(!bad);
	CHECK_EQ(results[T_EPOLL], 1);
	CHECK_EQ(results[T_POLL], 1);
	CHECK(results[T_FUTEX] == 0 || results[T_FUTEX] == -EAGAIN);
	CHECK_EQ(results[T_READ], 1);
	CHECK_EQ(results[T_SLEEP], 0);
	pvhint_close(h);
	close(efd);
	close(epfd);
	printf("emu eintr ok\n");
	return 0;
}
