/* SPDX-License-Identifier: MIT */
/*
 * A hand-off while the allocator's lock is held (pvrt-run --mn --workers=1).
 *
 * ULT A takes lock L of this program's allocator (its calloc and posix_memalign replace libc's,
 * as a malloc library would, and take L while 'gate' is set) and yields, still holding it. ULT B
 * then waits for L in the kernel (a raw futex call, as glibc's internal locks do), which blocks
 * the only worker's kernel thread. sysmon must give the worker to a spare thread so that A can
 * run and release L; if making that spare allocates (the spare's descriptor, glibc's thread
 * descriptor and DTV), sysmon blocks on L too and the program hangs: the watchdog alarm ends
 * it with SIGALRM.
 */
#include "mn_check.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

static uint32_t L; /* 0 free, 1 held */
static int gate;

/* The futex system call without glibc's wrapper: nothing the runtime could see. */
static long raw_futex(uint32_t *addr, int op, uint32_t val)
{
	long r;
	register long r10 __asm__("r10") = 0;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_futex), "D"(addr), "S"((long)op), "d"((long)val), "r"(r10)
			 : "rcx", "r11", "memory");
	return r;
}

static void lock_L(void)
{
	uint32_t free_ = 0;
	while (!__atomic_compare_exchange_n(&L, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		raw_futex(&L, FUTEX_WAIT_PRIVATE, 1);
		free_ = 0;
	}
}

static void unlock_L(void)
{
	__atomic_store_n(&L, 0, __ATOMIC_RELEASE);
	raw_futex(&L, FUTEX_WAKE_PRIVATE, INT_MAX);
}

static void gated(void)
{
	if (__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) {
		lock_L();
		unlock_L();
	}
}

__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
	gated();
	return __libc_calloc(n, size);
}

__attribute__((visibility("default"))) int posix_memalign(void **p, size_t align, size_t size)
{
	gated();
	void *m = __libc_memalign(align, size);
	if (!m)
		return ENOMEM;
	*p = m;
	return 0;
}

static int a_resumed;

static void *holder(void *arg)
{
	(void)arg;
	lock_L();
	__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
	sched_yield(); /* B runs and blocks its kernel thread on L */
	__atomic_store_n(&a_resumed, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&gate, 0, __ATOMIC_RELEASE);
	unlock_L();
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	lock_L();
	unlock_L();
	return NULL;
}

/*
 * "ring": the runtime's own allocations on the wait and switch paths. main takes L and sleeps
 * before any ULT was queued on its worker: the sleep arms the worker's first timer (its heap is
 * allocated), and when it fires the runtime queues main again, the worker's first local
 * queueing (its run queue is allocated). Were those allocations the application's malloc (this
 * program's calloc or posix_memalign: L), they would wait for L inside the runtime, where no
 * hand-off happens, for main, which only they let run again (RocksDB's db_bench hung so under
 * --mn: a ULT preempted inside malloc holding the arena lock, its requeue growing a ring).
 */
static int ring_mode(void)
{
	lock_L();
	__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
	usleep(1000);
	__atomic_store_n(&gate, 0, __ATOMIC_RELEASE);
	unlock_L();
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, waiter, NULL), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	printf("mn_spare: ring ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	alarm(60);
	if (argc > 1 && strcmp(argv[1], "ring") == 0)
		return ring_mode();
	for (int round = 0; round < 20; round++) {
		__atomic_store_n(&a_resumed, 0, __ATOMIC_RELAXED);
		pthread_t a, b;
		CHECK_EQ(pthread_create(&a, NULL, holder, NULL), 0);
		CHECK_EQ(pthread_create(&b, NULL, waiter, NULL), 0);
		CHECK_EQ(pthread_join(a, NULL), 0);
		CHECK_EQ(pthread_join(b, NULL), 0);
		CHECK(__atomic_load_n(&a_resumed, __ATOMIC_RELAXED));
	}
	printf("mn_spare: ok\n");
	return 0;
}
