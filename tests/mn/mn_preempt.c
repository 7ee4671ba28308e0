/* SPDX-License-Identifier: MIT */
/*
 * What a cooperative runtime cannot do alone, on one worker (pvrt-run --mn --workers=1):
 *   spin   a thread spins on a flag that another thread sets (needs time-slice preemption)
 *   pipe   two threads talk over a pipe with blocking read/write (needs the hand-off of the
 *          worker while a thread blocks in a system call)
 *   main   another thread blocks in a read while main keeps running: main continues on the
 *          kernel thread worker 0 was handed to, with its own __thread values, errno and
 *          pthread_self (the main thread's TLS goes with it, not with the kernel thread)
 *   spin_masked  spin, with every signal blocked by the program (a thread that leaves its
 *          signals to a sigwait thread): the runtime's preemption signal is not the program's
 *          to block, and the mask the program set survives the switches
 *   mask_handoff  a thread whose kernel thread lost the worker (it waited in a raw futex call
 *          the runtime does not see) changes its signal mask while main spins: the change is
 *          the caller's alone (main keeps its mask and stays preemptible), and a signal left
 *          pending while blocked is delivered when it is unblocked
 *   handler_cache  a handler leaves a signal blocked (its return restores the frame's mask):
 *          a ULT whose own mask equals the handler's still runs with its own (the worker's
 *          loaded-mask word must not keep the handler's)
 *   handler_lost  a handler runs on a kernel thread that lost the worker (main blocked in a
 *          read) and changes the mask there: the change is the handler's, not main's
 *   alarm_jump  a read timed out by SIGALRM and siglongjmp (the classic timeout), 20 times,
 *          beside a spinning thread: the read blocks the kernel thread, which loses the worker,
 *          the handler jumps back into the ULT on that thread, and all goes on from there
 *   sleep  100 sleeps of 1 ms beside three threads that compute on the same worker: each sleeper
 *          runs soon after its timer (timers due are run at the next pick, which sysmon forces
 *          after a wake-up slice, and a woken sleeper runs before ULTs that were preempted);
 *          the sleeps took 0.64 s each before (timers looked at every 64th pick, a slice per
 *          pick), so the whole loop must end within 30 s (about 0.2 s now)
 *   wake   200 condvar round trips between main and another thread beside five threads that
 *          compute on the same worker: a ULT woken by a ULT of its own worker runs before
 *          the preempted computing ones (a round trip took two slices per computing thread,
 *          20 s in all, before; about 0.3 s now); the loop must end within 10 s
 *   pause  `while (!flag) pause();` (and sigsuspend) for a SIGALRM 20 times, beside three threads
 *          that compute: the signal may be handled on another kernel thread than the one main
 *          waits on (Linux prefers the main thread, whose ULT may be anywhere here), and the
 *          wait must end anyway (it hung before the runtime's signal trampoline)
 *   exec_spin  spin in a new image exec'd from a ULT (as `env prog` does): the exec wrapper
 *          blocks the preemption signal across execve and the mask is inherited
 * All hang without those (ctest label mn-preempt; see CMakeLists.txt).
 */
#include "mn_check.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>

static volatile int flag;

static void *computer(void *a)
{
	while (!flag)
		;
	return a;
}

static volatile sig_atomic_t alarmed;

static void on_alarm(int sig)
{
	(void)sig;
	alarmed = 1;
}

static pthread_mutex_t tok_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tok_cv = PTHREAD_COND_INITIALIZER;
static int token;

static void *ponger(void *a)
{
	pthread_mutex_lock(&tok_mu);
	while (token >= 0) {
		if (token == 1) {
			token = 2;
			pthread_cond_broadcast(&tok_cv);
		}
		pthread_cond_wait(&tok_cv, &tok_mu);
	}
	pthread_mutex_unlock(&tok_mu);
	return a;
}

static void *setter(void *a)
{
	flag = 1;
	return a;
}

static void *writer(void *a)
{
	int fd = (int)(intptr_t)a;
	for (int i = 0; i < 100; i++)
		CHECK_EQ(write(fd, &i, sizeof(i)), sizeof(i));
	return NULL;
}

static int rfd;
static __thread long main_tv = 7;
static int reader_done;

static void *reader(void *a)
{
	char c;
	CHECK_EQ(read(rfd, &c, 1), 1); /* blocks its kernel thread, holding worker 0 */
	__atomic_store_n(&reader_done, 1, __ATOMIC_RELAXED);
	return a;
}

static volatile sig_atomic_t got_usr2;
static void on_usr2(int s)
{
	(void)s;
	got_usr2 = 1;
}

static int nap_word;
static void *masker(void *a)
{
	/* 20 ms in the kernel, unseen by the runtime: sysmon hands worker 0 to a spare (main
	 * spins there) and this kernel thread comes back without it. */
	struct timespec ts = {0, 20 * 1000 * 1000};
	syscall(SYS_futex, &nap_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
	sigset_t s, cur;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigaddset(&s, SIGUSR2);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
	/* Back to a worker: only once main has been preempted, and the mask goes along. */
	sched_yield();
	CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &cur), 0);
	CHECK(sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGUSR2));
	got_usr2 = 0;
	CHECK_EQ(pthread_kill(pthread_self(), SIGUSR2), 0);
	CHECK_EQ(got_usr2, 0); /* blocked: pending */
	CHECK_EQ(sigprocmask(SIG_UNBLOCK, &s, &cur), 0);
	CHECK(sigismember(&cur, SIGUSR1)); /* the old mask */
	CHECK_EQ(got_usr2, 1);		   /* delivered by the unblocking call itself */
	flag = 1;
	return a;
}

static uint64_t kmask(void)
{
	uint64_t m = 0;
	CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, 8), 0);
	return m;
}
#define BIT(s) ((uint64_t)1 << ((s)-1))

static void block_usr2(int s)
{
	(void)s;
	sigset_t b;
	sigemptyset(&b);
	sigaddset(&b, SIGUSR2);
	CHECK_EQ(sigprocmask(SIG_BLOCK, &b, NULL), 0);
}

static volatile int phase;
static void *usr12_blocked(void *a)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigaddset(&s, SIGUSR2);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
	phase = 1;
	while (phase < 2)
		sched_yield();
	CHECK_EQ(kmask() & (BIT(SIGUSR1) | BIT(SIGUSR2)), BIT(SIGUSR1) | BIT(SIGUSR2));
	return a;
}

static int lost_pipe[2];
static volatile pid_t main_tid;
static void *kick_then_write(void *a)
{
	usleep(20000); /* main blocks in its read meanwhile, and loses worker 0 */
	CHECK_EQ(syscall(SYS_tgkill, getpid(), main_tid, SIGUSR1), 0);
	usleep(20000);
	CHECK_EQ(write(lost_pipe[1], "x", 1), 1);
	return a;
}

static void *nop_ult(void *a)
{
	return a;
}

static sigjmp_buf alarm_env;
static void alarm_jump(int s)
{
	(void)s;
	siglongjmp(alarm_env, 1);
}

static volatile int spin_stop;
static void *spin_until_stop(void *a)
{
	while (!spin_stop)
		;
	return a;
}

static void *timed_reads(void *a)
{
	int p[2];
	CHECK_EQ(pipe(p), 0);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGALRM);
	CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &s, NULL), 0);
	int timeouts = 0;
	for (int i = 0; i < 20; i++) {
		if (sigsetjmp(alarm_env, 1) == 0) {
			struct itimerval it = {{0, 0}, {0, 20000}};
			CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
			char c;
			CHECK(read(p[0], &c, 1) < 0); /* never returns: the alarm jumps out */
		} else {
			timeouts++;
		}
		sigset_t cur;
		CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &cur), 0);
		CHECK(!sigismember(&cur, SIGALRM));
	}
	CHECK_EQ(timeouts, 20);
	close(p[0]);
	close(p[1]);
	return a;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc == 2 && !strcmp(argv[1], "exec_spin")) {
		execl("/proc/self/exe", argv[0], "spin", (char *)NULL);
		perror("mn_preempt: execl");
		return 1;
	}
	if (argc == 2 && !strcmp(argv[1], "sleep")) {
		pthread_t c[3];
		for (int i = 0; i < 3; i++)
			CHECK_EQ(pthread_create(&c[i], NULL, computer, NULL), 0);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < 100; i++) {
			CHECK_EQ(usleep(1000), 0);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			CHECK(t1.tv_sec - t0.tv_sec < 30);
		}
		flag = 1;
		for (int i = 0; i < 3; i++)
			CHECK_EQ(pthread_join(c[i], NULL), 0);
		printf("mn_preempt: sleep ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "pause")) {
		pthread_t c[3];
		for (int i = 0; i < 3; i++)
			CHECK_EQ(pthread_create(&c[i], NULL, computer, NULL), 0);
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_alarm;
		CHECK_EQ(sigaction(SIGALRM, &sa, NULL), 0);
		struct sigaction back;
		CHECK_EQ(sigaction(SIGALRM, NULL, &back), 0);
		CHECK(back.sa_handler == on_alarm); /* the program's own action, not a wrapper's */
		sigset_t none;
		sigemptyset(&none);
		for (int i = 0; i < 20; i++) {
			alarmed = 0;
			struct itimerval it = {{0, 0}, {0, 3000}};
			CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
			while (!alarmed) {
				int r = i & 1 ? sigsuspend(&none) : pause();
				CHECK(r == -1 && errno == EINTR);
			}
		}
		flag = 1;
		for (int i = 0; i < 3; i++)
			CHECK_EQ(pthread_join(c[i], NULL), 0);
		printf("mn_preempt: pause ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "wake")) {
		pthread_t c[5], p;
		CHECK_EQ(pthread_create(&p, NULL, ponger, NULL), 0);
		for (int i = 0; i < 5; i++)
			CHECK_EQ(pthread_create(&c[i], NULL, computer, NULL), 0);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < 200; i++) {
			pthread_mutex_lock(&tok_mu);
			token = 1;
			pthread_cond_broadcast(&tok_cv);
			while (token != 2)
				pthread_cond_wait(&tok_cv, &tok_mu);
			pthread_mutex_unlock(&tok_mu);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			CHECK(t1.tv_sec - t0.tv_sec < 10);
		}
		pthread_mutex_lock(&tok_mu);
		token = -1;
		pthread_cond_broadcast(&tok_cv);
		pthread_mutex_unlock(&tok_mu);
		flag = 1;
		CHECK_EQ(pthread_join(p, NULL), 0);
		for (int i = 0; i < 5; i++)
			CHECK_EQ(pthread_join(c[i], NULL), 0);
		printf("mn_preempt: wake ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "spin_masked")) {
		sigset_t all, cur;
		sigfillset(&all);
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &all, NULL), 0);
		CHECK_EQ(pthread_create(&t, NULL, setter, NULL), 0); /* inherits the mask */
		while (!flag)
			;
		CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &cur), 0);
		CHECK(sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGTERM));
		CHECK_EQ(pthread_join(t, NULL), 0);
		printf("mn_preempt: spin_masked ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "mask_handoff")) {
		signal(SIGUSR2, on_usr2);
		for (int i = 0; i < 10; i++) {
			flag = 0;
			CHECK_EQ(pthread_create(&t, NULL, masker, NULL), 0);
			while (!flag)
				; /* preemptible only while its record is its own mask */
			CHECK_EQ(pthread_join(t, NULL), 0);
			sigset_t cur;
			CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &cur), 0);
			CHECK(!sigismember(&cur, SIGUSR1) && !sigismember(&cur, SIGUSR2));
		}
		printf("mn_preempt: mask_handoff ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "handler_cache")) {
		signal(SIGUSR1, block_usr2);
		CHECK_EQ(pthread_create(&t, NULL, usr12_blocked, NULL), 0);
		while (!phase)
			sched_yield();
		CHECK_EQ(pthread_kill(pthread_self(), SIGUSR1),
			 0); /* returns with USR2 unblocked */
		CHECK_EQ(kmask() & BIT(SIGUSR2), 0);
		phase = 2;
		CHECK_EQ(pthread_join(t, NULL), 0);
		CHECK_EQ(kmask() & (BIT(SIGUSR1) | BIT(SIGUSR2)), 0);
		printf("mn_preempt: handler_cache ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "handler_lost")) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = block_usr2;
		sa.sa_flags = SA_RESTART;
		CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
		CHECK_EQ(pipe(lost_pipe), 0);
		uint64_t before = kmask();
		main_tid = (pid_t)syscall(SYS_gettid);
		CHECK_EQ(pthread_create(&t, NULL, kick_then_write, NULL), 0);
		char c;
		CHECK_EQ(read(lost_pipe[0], &c, 1), 1);
		CHECK_EQ(pthread_join(t, NULL), 0);
		CHECK_EQ(pthread_create(&t, NULL, nop_ult, NULL), 0);
		CHECK_EQ(pthread_join(t, NULL), 0); /* a switch loads main's record */
		CHECK_EQ(kmask(), before);
		printf("mn_preempt: handler_lost ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "alarm_jump")) {
		signal(SIGALRM, alarm_jump);
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGALRM);
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0); /* only the reader takes it */
		pthread_t r;
		CHECK_EQ(pthread_create(&t, NULL, spin_until_stop, NULL), 0);
		CHECK_EQ(pthread_create(&r, NULL, timed_reads, NULL), 0);
		CHECK_EQ(pthread_join(r, NULL), 0);
		spin_stop = 1;
		CHECK_EQ(pthread_join(t, NULL), 0);
		printf("mn_preempt: alarm_jump ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "spin")) {
		CHECK_EQ(pthread_create(&t, NULL, setter, NULL), 0);
		while (!flag)
			; /* never calls into the runtime */
		CHECK_EQ(pthread_join(t, NULL), 0);
		printf("mn_preempt: spin ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "pipe")) {
		int p[2];
		CHECK_EQ(pipe(p), 0);
		/* The reader (main) blocks first, before the writer has run. */
		CHECK_EQ(pthread_create(&t, NULL, writer, (void *)(intptr_t)p[1]), 0);
		for (int i = 0; i < 100; i++) {
			int v;
			CHECK_EQ(read(p[0], &v, sizeof(v)), sizeof(v));
			CHECK_EQ(v, i);
		}
		CHECK_EQ(pthread_join(t, NULL), 0);
		printf("mn_preempt: pipe ok\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "main")) {
		int p[2];
		CHECK_EQ(pipe(p), 0);
		rfd = p[0];
		main_tv = 99;
		pthread_t self = pthread_self();
		CHECK_EQ(pthread_create(&t, NULL, reader, NULL), 0);
		/* One worker: the reader runs now and blocks; main runs again only once sysmon has
		 * handed worker 0 to a spare kernel thread. */
		sched_yield();
		for (int i = 0; i < 1000; i++) {
			CHECK_EQ(main_tv, 99);
			CHECK(pthread_equal(pthread_self(), self));
			errno = i;
			sched_yield();
			CHECK_EQ(errno, i);
		}
		CHECK_EQ(__atomic_load_n(&reader_done, __ATOMIC_RELAXED), 0); /* still blocked */
		CHECK_EQ(write(p[1], "x", 1), 1);
		CHECK_EQ(pthread_join(t, NULL), 0);
		CHECK_EQ(main_tv, 99);
		CHECK(pthread_equal(pthread_self(), self));
		printf("mn_preempt: main ok\n");
		return 0;
	}
	fprintf(stderr,
		"usage: mn_preempt "
		"spin|spin_masked|mask_handoff|handler_cache|handler_lost|exec_spin|pipe|main\n");
	return 2;
}
