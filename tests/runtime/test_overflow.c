/* SPDX-License-Identifier: MIT */
/* A ULT that overflows its stack dies on the guard page with a message naming it. */
#include "check.h"

#include <pvrt/thread.h>

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int depth(volatile char *prev, int n)
{
	volatile char buf[1024];
	buf[0] = (char)n;
	buf[1023] = prev ? prev[0] : 0;
	return n > 1000000 ? buf[0] : depth(buf, n + 1) + buf[1023];
}

static void *overflow(void *a)
{
	(void)a;
	return (void *)(intptr_t)depth(NULL, 0);
}

int main(void)
{
	int p[2];
	CHECK_EQ(pipe(p), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		dup2(p[1], 2);
		if (pvrt_init(NULL))
			_exit(3);
		pvrt_thread_t t;
		pvrt_thread_create(&t, NULL, overflow, NULL);
		pvrt_thread_join(t, NULL);
		_exit(4); /* not reached */
	}
	close(p[1]);
	char out[4096] = {0};
	size_t n = 0;
	ssize_t r;
	while (n < sizeof(out) - 1 && (r = read(p[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	fprintf(stderr, "child said: %s", out);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	CHECK(strstr(out, "pvrt: stack overflow in ULT ") != NULL);
	printf("ok\n");
	return 0;
}
