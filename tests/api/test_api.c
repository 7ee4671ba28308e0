/* SPDX-License-Identifier: MIT */
/* Public constants and the version: what a program built against the headers relies on. */
#include "check.h"

#include <pvrt/barrier.h>
#include <pvrt/cond.h>
#include <pvrt/lockstat.h>
#include <pvrt/mutex.h>
#include <pvrt/rwlock.h>
#include <pvrt/sem.h>
#include <pvrt/version.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Linux error numbers are below 4096 (MAX_ERRNO): a result in [-4095, -1] is an errno. */
#define MAX_ERRNO 4095

int main(void)
{
	/* The library in use says the version of the headers it was built with. */
	CHECK_EQ(pvrt_version(), PVRT_VERSION);
	CHECK_EQ(PVRT_VERSION,
		 (PVRT_VERSION_MAJOR << 16) | (PVRT_VERSION_MINOR << 8) | PVRT_VERSION_PATCH);
	char s[32];
	snprintf(s, sizeof s, "%d.%d.%d", PVRT_VERSION_MAJOR, PVRT_VERSION_MINOR,
		 PVRT_VERSION_PATCH);
	CHECK(!strcmp(s, PVRT_VERSION_STRING));

	/* The serial thread's result is neither 0 (the others) nor any errno. */
	CHECK(PVRT_BARRIER_SERIAL_THREAD != 0);
	CHECK(PVRT_BARRIER_SERIAL_THREAD > 0 || PVRT_BARRIER_SERIAL_THREAD < -MAX_ERRNO);
	pvrt_locks_stats_enable(true);
	pvrt_barrier_t b;
	CHECK_EQ(pvrt_barrier_init(&b, 1), 0);
	for (int i = 0; i < 3; i++) /* a round of one: always the serial thread */
		CHECK_EQ(pvrt_barrier_wait(&b), PVRT_BARRIER_SERIAL_THREAD);
	CHECK_EQ(pvrt_barrier_destroy(&b), 0);

	/* The opaque storage is ABI: glibc's x86-64 sizes (the preload overlays the pthread
	 * objects), 8-byte alignment. */
	CHECK_EQ(sizeof(pvrt_mutex_t), 40);
	CHECK_EQ(sizeof(pvrt_cond_t), 48);
	CHECK_EQ(sizeof(pvrt_rwlock_t), 56);
	CHECK_EQ(sizeof(pvrt_barrier_t), 32);
	CHECK_EQ(sizeof(pvrt_sem_t), 16);
	CHECK_EQ(_Alignof(pvrt_mutex_t), 8);
	CHECK_EQ(_Alignof(pvrt_cond_t), 8);
	CHECK_EQ(_Alignof(pvrt_rwlock_t), 8);
	CHECK_EQ(_Alignof(pvrt_barrier_t), 8);
	CHECK_EQ(_Alignof(pvrt_sem_t), 8);

	/* The static initialisers set the type: the recursive one relocks, the errorcheck one
	 * refuses to. */
	pvrt_mutex_t rm = PVRT_RECURSIVE_MUTEX_INITIALIZER, em = PVRT_ERRORCHECK_MUTEX_INITIALIZER;
	CHECK_EQ(pvrt_mutex_lock(&rm), 0);
	CHECK_EQ(pvrt_mutex_lock(&rm), 0);
	CHECK_EQ(pvrt_mutex_unlock(&rm), 0);
	CHECK_EQ(pvrt_mutex_unlock(&rm), 0);
	CHECK_EQ(pvrt_mutex_lock(&em), 0);
	CHECK_EQ(pvrt_mutex_lock(&em), -EDEADLK);
	CHECK_EQ(pvrt_mutex_unlock(&em), 0);

	/* A sized out-struct: written no further than the program's size, which it reports. */
	struct pvrt_lock_stats ls;
	memset(&ls, 0xab, sizeof(ls));
	CHECK_EQ(pvrt_locks_stats_read(PVRT_LOCK_BARRIER, &ls, 4), -EINVAL);
	size_t part = offsetof(struct pvrt_lock_stats, contended); /* up to acquisitions */
	CHECK_EQ(pvrt_locks_stats_read(PVRT_LOCK_BARRIER, &ls, part), 0);
	CHECK_EQ(ls.size, part);
	CHECK_EQ(ls.flags, 0);
	CHECK_EQ(ls.acquisitions, 3);
	CHECK_EQ(ls.contended, 0xababababababababull);
	CHECK_EQ(pvrt_locks_stats_get(PVRT_LOCK_BARRIER, &ls), 0);
	CHECK_EQ(ls.size, sizeof(ls));
	CHECK_EQ(ls.contended, 0);
	return 0;
}
