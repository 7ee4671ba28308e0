/* SPDX-License-Identifier: MIT */
/*
 * What a cooperative runtime cannot do alone, on one worker (pvrt-run --mn --workers=1):
 *   spin   a thread spins on a flag that another thread sets (needs time-slice preemption)
 *   pipe   two threads talk over a pipe with blocking read/write (needs the hand-off of the
 *          worker while a thread blocks in a system call)
 * Both hang without those (ctest label mn-preempt; see CMakeLists.txt).
 */
#include "mn_check.h"

#include <pthread.h>
#include <string.h>

static volatile int flag;

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

int main(int argc, char **argv)
{
	pthread_t t;
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
	fprintf(stderr, "usage: mn_preempt spin|pipe\n");
	return 2;
}
