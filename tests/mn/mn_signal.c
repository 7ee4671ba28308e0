/* SPDX-License-Identifier: MIT */
/*
 * Signals under pvrt-run --mn: each thread's signal mask is its own and is the mask of the
 * kernel thread whenever it runs (read with the raw system call), across yields and moves
 * between workers; a new thread inherits its creator's mask; a process-directed signal is
 * handled by a thread that does not block it; a handler that sleeps (nanosleep is
 * async-signal-safe) works wherever the signal lands, also in a worker's scheduler context
 * while every thread waits; a sigwait thread gets the signals that every other thread blocks.
 */
#include "mn_check.h"

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static uint64_t kmask(void)
{
	uint64_t m = 0;
	CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, 8), 0);
	return m;
}

#define BIT(s) ((uint64_t)1 << ((s)-1))

static void *inherits(void *a)
{
	CHECK(kmask() & BIT(SIGUSR1));
	return a;
}

static void *body(void *a)
{
	int blocks = (int)(intptr_t)a & 1;
	mn_tid_seen();
	if (blocks) {
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGUSR1);
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, inherits, NULL), 0);
		CHECK_EQ(pthread_join(t, NULL), 0);
	}
	for (int i = 0; i < 200; i++) {
		sched_yield();
		CHECK_EQ(!!(kmask() & BIT(SIGUSR1)), blocks);
		sigset_t cur;
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
		CHECK_EQ(sigismember(&cur, SIGUSR1), blocks);
	}
	return NULL;
}

static volatile sig_atomic_t got;
static void on_usr2(int s)
{
	(void)s;
	got = 1;
}

static volatile sig_atomic_t alarms;
static void on_alrm(int s)
{
	(void)s;
	/* Interposed under --mn: in a ULT a ULT sleep, in a scheduler context a kernel sleep. */
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
	alarms++;
}

static void *napper(void *a)
{
	for (int i = 0; i < 20; i++)
		usleep(5000);
	return a;
}

/* SIGALRM every 2 ms while the main thread joins one that sleeps: the signals land in the
 * joiner's worker while it idles (its scheduler context) as well as in running ULTs. */
static void alarms_while_joining(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alrm;
	sa.sa_flags = SA_RESTART;
	CHECK_EQ(sigaction(SIGALRM, &sa, NULL), 0);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, napper, NULL), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	memset(&it, 0, sizeof(it));
	CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
	CHECK(alarms > 0);
}

/* Handlers that change the mask (the handler's own mask, added by the kernel, must not become
 * the ULT's, which a switch would then load again after the handler returned): one blocks and
 * unblocks a signal around a short section; one runs with every signal blocked (sa_mask full)
 * and saves and restores the mask; one leaves a signal blocked. Their return restores the mask
 * of the frame, and the ULT's record must be left as it was (checked after a switch, which
 * loads the record). */
static volatile sig_atomic_t hits;
static void usr1_handler(int kind)
{
	hits++;
	sigset_t b, saved;
	sigemptyset(&b);
	sigaddset(&b, SIGUSR2);
	if (kind == 0) {
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &b, NULL), 0);
		CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &b, NULL), 0);
	} else if (kind == 1) {
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &b, &saved), 0);
		CHECK(sigismember(&saved, SIGTERM)); /* the handler's mask: everything */
		CHECK_EQ(pthread_sigmask(SIG_SETMASK, &saved, NULL), 0);
	} else {
		CHECK_EQ(sigprocmask(SIG_BLOCK, &b, NULL), 0);
	}
}
static void on_usr1(int s)
{
	(void)s;
	usr1_handler(0);
}
static void on_usr1_setmask(int s)
{
	(void)s;
	usr1_handler(1);
}
static void on_usr1_leave_blocked(int s)
{
	(void)s;
	usr1_handler(2);
}

static void *nop(void *a)
{
	return a;
}

static void mask_in_handler(void)
{
	void (*handlers[])(int) = {on_usr1, on_usr1_setmask, on_usr1_leave_blocked};
	uint64_t before = kmask();
	CHECK_EQ(before & (BIT(SIGUSR1) | BIT(SIGUSR2) | BIT(SIGTERM)), 0);
	for (int k = 0; k < 3; k++) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = handlers[k];
		if (k == 1)
			sigfillset(&sa.sa_mask);
		CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
		hits = 0;
		for (int i = 1; i <= 3; i++) {
			CHECK_EQ(pthread_kill(pthread_self(), SIGUSR1), 0);
			CHECK_EQ(hits, i);
			pthread_t t;
			CHECK_EQ(pthread_create(&t, NULL, nop, NULL), 0);
			CHECK_EQ(pthread_join(t, NULL), 0); /* switches away and back */
			CHECK_EQ(kmask(), before);
		}
	}
	signal(SIGUSR1, SIG_DFL);
}

/*
 * A daemon's shape: every thread blocks SIGUSR1 and SIGTERM, and one waits for them in sigwait
 * while the others sleep (so workers park and the waiter's blocked worker is handed to a spare).
 * Kernel threads that run no ULT must not take them: the default action would end the process.
 * Before that, main goes through twelve other masks, more than the runtime's table of masks has
 * slots (runtime/sigmask.c): a slot nobody counts in must take the next new mask.
 */
static void *sigwaiter(void *a)
{
	const sigset_t *s = a;
	int sig;
	long n = 0;
	for (;;) {
		CHECK_EQ(sigwait(s, &sig), 0);
		if (sig == SIGTERM)
			return (void *)n;
		CHECK_EQ(sig, SIGUSR1);
		n++;
	}
}

static void *sleeper(void *a)
{
	CHECK(kmask() & BIT(SIGUSR1)); /* inherited */
	for (int i = 0; i < 40; i++)
		usleep(1000);
	return a;
}

static void sigwait_thread(void)
{
	sigset_t s, old;
	CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &old), 0);
	for (int k = 0; k < 12; k++) {
		sigemptyset(&s);
		sigaddset(&s, SIGRTMIN + 2 + k);
		CHECK_EQ(pthread_sigmask(SIG_SETMASK, &s, NULL), 0);
	}
	CHECK_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigaddset(&s, SIGTERM);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
	pthread_t w, t[3];
	CHECK_EQ(pthread_create(&w, NULL, sigwaiter, &s), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, sleeper, NULL), 0);
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(kill(getpid(), SIGUSR1), 0);
		usleep(500);
	}
	CHECK_EQ(kill(getpid(), SIGTERM), 0);
	void *n;
	CHECK_EQ(pthread_join(w, &n), 0);
	CHECK((long)n >= 1); /* standard signals sent while one is pending merge */
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

/* SIG_IGN with SA_SIGINFO (an action saved from the kernel and restored keeps the flag) is still
 * "ignore": not a handler to run behind the runtime's trampoline (it called address 1). */
static void ignored_siginfo(void)
{
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = SA_SIGINFO;
	CHECK_EQ(sigaction(SIGUSR2, &sa, NULL), 0);
	CHECK_EQ(raise(SIGUSR2), 0);
	CHECK_EQ(sigaction(SIGUSR2, NULL, &old), 0);
	CHECK(old.sa_handler == SIG_IGN);
	signal(SIGUSR2, SIG_DFL);
}

/* siglongjmp back to a point whose saved mask differs from the mask at the jump: glibc loads
 * it with its own system call, and the ULT's record must follow (a switch loads the record). */
static void jump_restores_mask(void)
{
	static sigjmp_buf env;
	uint64_t before = kmask();
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGINT);
	if (!sigsetjmp(env, 1)) {
		CHECK_EQ(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
		siglongjmp(env, 1);
	}
	CHECK_EQ(kmask(), before);
	/* A later change of another signal, then switches, which load the record. */
	sigset_t u;
	sigemptyset(&u);
	sigaddset(&u, SIGUSR1);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &u, NULL), 0);
	CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &u, NULL), 0);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, nop, NULL), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(kmask(), before);
}

int main(void)
{
	pthread_t t[16];
	for (long i = 0; i < 16; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, body, (void *)(intptr_t)i), 0);
	for (int i = 0; i < 16; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(kmask() & BIT(SIGUSR1), 0);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr2;
	CHECK_EQ(sigaction(SIGUSR2, &sa, NULL), 0);
	CHECK_EQ(kill(getpid(), SIGUSR2), 0);
	while (!got)
		sched_yield();
	alarms_while_joining();
	mask_in_handler();
	jump_restores_mask();
	sigwait_thread();
	ignored_siginfo();
	mn_check_ults(16);
	printf("mn_signal: ok (%d alarms handled)\n", (int)alarms);
	return 0;
}
