/* SPDX-License-Identifier: MIT */
/*
 * Processes under pvrt-run --mn:
 *   fork          a ULT forks while others run; the child has only the calling thread, and a
 *                 working runtime (it creates and joins threads); the parent goes on
 *   exec          a ULT execs this program (mode exec-child) while others run
 *   dlopen MOD    threads use a module's dynamic TLS (loaded with dlopen, before and after
 *                 the threads start)
 */
#include "mn_check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

static volatile int stop;
static char *self_path;

static void *busy(void *a)
{
	mn_tid_seen();
	while (!stop)
		sched_yield();
	return a;
}

/* Kernel threads that can run application code: all but the runtime's monitor, spawner and
 * spares (sysmon.c) and the emulator's control thread. */
static int count_tasks(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d != NULL);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = 0;
			fclose(f);
		}
		bool app = strncmp(comm, "pvrt-sysmon", 11) && strncmp(comm, "pvrt-spare", 10) &&
			   strncmp(comm, "pvrt-spawner", 12) && strncmp(comm, "pvhint-emu", 10);
		n += app;
		if (app && getenv("MN_PROC_TASKS"))
			fprintf(stderr, "task %s: %s", e->d_name, comm);
	}
	closedir(d);
	return n;
}

static __thread int tls_in_child = 3;

static void *child_thread(void *a)
{
	CHECK_EQ(tls_in_child, 3);
	tls_in_child = (int)(intptr_t)a;
	sched_yield();
	return (void *)(intptr_t)(tls_in_child * 2);
}

static void *forker(void *a)
{
	(void)a;
	tls_in_child = 42;
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		/* Only this thread, plus the workers of the child's new runtime. */
		CHECK_EQ(tls_in_child, 42);
		pthread_t t[4];
		for (long i = 0; i < 4; i++)
			CHECK_EQ(
			    pthread_create(&t[i], NULL, child_thread, (void *)(intptr_t)(i + 1)),
			    0);
		for (long i = 0; i < 4; i++) {
			void *r;
			CHECK_EQ(pthread_join(t[i], &r), 0);
			CHECK_EQ((long)(intptr_t)r, (i + 1) * 2);
		}
		const char *w = getenv("PVRT_WORKERS");
		CHECK(count_tasks() <= atoi(w));
		printf("mn_proc: child ok\n");
		fflush(stdout);
		exit(0);
	}
	int st;
	CHECK_EQ(waitpid(p, &st, 0), p);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return NULL;
}

static void *execer(void *a)
{
	(void)a;
	sched_yield();
	execl(self_path, self_path, "exec-child", (char *)NULL);
	CHECK(!"execl failed");
	return NULL;
}

static long (*mod_get)(int);
static void (*mod_set)(int, long);

static void *mod_user(void *a)
{
	long id = (long)(intptr_t)a;
	mn_tid_seen();
	CHECK_EQ(mod_get(0), 42);
	mod_set(0, id);
	for (int i = 0; i < 50; i++) {
		sched_yield();
		CHECK_EQ(mod_get(0), id);
	}
	return NULL;
}

static void run_busy(int n, pthread_t *t)
{
	for (int i = 0; i < n; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, busy, NULL), 0);
}

int main(int argc, char **argv)
{
	self_path = argv[0];
	mn_tid_seen();
	if (argc >= 2 && !strcmp(argv[1], "exec-child")) {
		printf("mn_proc: exec ok\n");
		return 0;
	}
	pthread_t t[8], x;
	if (argc >= 2 && !strcmp(argv[1], "fork")) {
		run_busy(8, t);
		CHECK_EQ(pthread_create(&x, NULL, forker, NULL), 0);
		CHECK_EQ(pthread_join(x, NULL), 0);
		stop = 1;
		for (int i = 0; i < 8; i++)
			CHECK_EQ(pthread_join(t[i], NULL), 0);
		mn_check_ults(9);
		printf("mn_proc: fork ok\n");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "exec")) {
		run_busy(8, t);
		CHECK_EQ(pthread_create(&x, NULL, execer, NULL), 0);
		pthread_join(x, NULL); /* never returns: the exec replaces the process */
		CHECK(!"exec did not happen");
	}
	if (argc >= 3 && !strcmp(argv[1], "dlopen")) {
		run_busy(4, t); /* running before the module is loaded */
		void *m = dlopen(argv[2], RTLD_NOW);
		CHECK(m != NULL);
		mod_get = (long (*)(int))dlsym(m, "tls_mod_get");
		mod_set = (void (*)(int, long))dlsym(m, "tls_mod_set");
		CHECK(mod_get && mod_set);
		pthread_t u[16];
		for (long i = 0; i < 16; i++)
			CHECK_EQ(pthread_create(&u[i], NULL, mod_user, (void *)(intptr_t)i), 0);
		for (int i = 0; i < 16; i++)
			CHECK_EQ(pthread_join(u[i], NULL), 0);
		stop = 1;
		for (int i = 0; i < 4; i++)
			CHECK_EQ(pthread_join(t[i], NULL), 0);
		mn_check_ults(20);
		printf("mn_proc: dlopen ok\n");
		return 0;
	}
	fprintf(stderr, "usage: mn_proc fork|exec|dlopen MODULE\n");
	return 2;
}
