/* SPDX-License-Identifier: MIT */
/*
 * The OS layer (os/pvrt_os.h): the errno rule (results as -errno, errno untouched), the POSIX
 * timespec rule, the three-state lock under contention (an exact count), the sized-struct copies.
 */
#include "check.h"
#include "pvrt_os.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>

static uint32_t lock_word;
static unsigned long counter;
#define ROUNDS 200000

static void *incr(void *a)
{
	unsigned spins = (unsigned)(uintptr_t)a;
	for (int i = 0; i < ROUNDS; i++) {
		os_lock(&lock_word, spins);
		counter++; /* plain: the lock orders it */
		os_unlock(&lock_word);
	}
	return NULL;
}

static int sleeps;
static void count_sleep(uint32_t *w)
{
	sleeps++;
	__atomic_store_n(w, 0, __ATOMIC_RELEASE); /* as if the holder released it meanwhile */
}

int main(void)
{
	uint32_t w = 0;
	errno = 1234;
	CHECK_EQ(os_futex_wait(&w, 1, NULL), -EAGAIN);
	struct timespec bad = {0, -1}, rel = {0, 1000};
	CHECK_EQ(os_futex_wait(&w, 0, &rel), -ETIMEDOUT);
	CHECK_EQ(os_futex_wait_abs(&w, 0, CLOCK_MONOTONIC, &bad), -EINVAL);
	CHECK_EQ(os_futex_wake(&w, INT_MAX), 0);
	CHECK_EQ(errno, 1234);

	/* POSIX: only tv_nsec outside [0, 1e9) is invalid; a negative tv_sec has passed. */
	struct timespec ok0 = {0, 0}, ok1 = {0, 999999999}, neg = {-1, 0}, hi = {0, 1000000000};
	CHECK(os_timespec_valid(&ok0) && os_timespec_valid(&ok1) && os_timespec_valid(&neg));
	CHECK(!os_timespec_valid(&bad) && !os_timespec_valid(&hi));
	CHECK(os_timespec_past(&neg) && !os_timespec_past(&ok0));

	uint64_t t0 = os_now_ns(), t1 = os_now_ns();
	CHECK(t1 >= t0);

	/* Mutual exclusion on the contended path: with and without spinning before sleeping. */
	for (unsigned spins = 0; spins <= 128; spins += 128) {
		counter = 0;
		pthread_t t[3];
		for (int i = 0; i < 3; i++)
			CHECK_EQ(pthread_create(&t[i], NULL, incr, (void *)(uintptr_t)spins), 0);
		for (int i = 0; i < 3; i++)
			pthread_join(t[i], NULL);
		CHECK_EQ(counter, 3ul * ROUNDS);
		CHECK_EQ(lock_word, 0);
	}
	/* The sleep is the caller's: called with the word marked contended, until it is free. */
	uint32_t held = 1;
	os_lock_contended(&held, 0, count_sleep);
	CHECK_EQ(sleeps, 1);
	CHECK_EQ(held, 2); /* taken, marked contended: the unlock wakes a sleeper */
	CHECK(os_unlock_contended(&held));
	CHECK_EQ(held, 0);

	/* Sized structs: the common prefix, zeros past it, never past the program's size. */
	unsigned char lib[8] = {1, 2, 3, 4, 5, 6, 7, 8}, prog[12];
	memset(prog, 0xee, sizeof(prog));
	CHECK_EQ(os_sized_out(prog, 4, lib, sizeof(lib)), 4);
	CHECK(prog[3] == 4 && prog[4] == 0xee);
	CHECK_EQ(os_sized_out(prog, sizeof(prog), lib, sizeof(lib)), 8);
	CHECK(prog[7] == 8 && prog[8] == 0 && prog[11] == 0);
	unsigned char in[8];
	os_sized_in(in, sizeof(in), prog, 3);
	CHECK(in[2] == 3 && in[3] == 0 && in[7] == 0);
	printf("ok\n");
	return 0;
}
