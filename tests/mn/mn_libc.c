/* SPDX-License-Identifier: MIT */
/*
 * glibc state that its start_thread sets up for every new thread, checked in ULTs (pvrt-run --mn):
 *   ctype     isalpha/toupper/tolower (__ctype_b, __ctype_toupper, __ctype_tolower: per-thread
 *             pointers that __ctype_init sets; zero in fresh TLS), also under uselocale
 *   affinity  sched_getaffinity(0) and pthread_getaffinity_np(self) report the CPUs the program
 *             was started on (those of its parent, which runs natively), not the one CPU the
 *             worker is pinned to: OpenBLAS and libgomp size their thread pools from it
 *   spawn     programs started from ULTs (fork + execve, posix_spawn, system, popen) start on
 *             the CPUs the program was started on, not pinned to the CPU of the worker that ran
 *             the exec (they would then run every thread of theirs on one CPU); a thread's
 *             sched_setaffinity of its own (as taskset does before it execs) is what they get
 */
#include "mn_check.h"

#include <ctype.h>
#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

#define NT 8

static void check_ctype(void)
{
	const char *s = "Hello, World 42!";
	char up[32], lo[32];
	int alpha = 0, digit = 0;
	for (size_t i = 0; s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		alpha += isalpha(c) != 0;
		digit += isdigit(c) != 0;
		up[i] = (char)toupper(c);
		lo[i] = (char)tolower(c);
		up[i + 1] = lo[i + 1] = 0;
	}
	CHECK_EQ(alpha, 10);
	CHECK_EQ(digit, 2);
	CHECK(!strcmp(up, "HELLO, WORLD 42!"));
	CHECK(!strcmp(lo, "hello, world 42!"));
	/* A per-thread locale: the ctype pointers follow uselocale. */
	locale_t l = newlocale(LC_CTYPE_MASK, "C", (locale_t)0);
	CHECK(l != (locale_t)0);
	locale_t old = uselocale(l);
	CHECK(isupper('Q') && !isupper('q') && toupper('q') == 'Q');
	uselocale(old);
	freelocale(l);
	CHECK(isspace(' ') && !isspace('x'));
}

static cpu_set_t parent_cpus;

static void check_affinity(void)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CHECK_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
	if (!CPU_EQUAL(&s, &parent_cpus)) {
		fprintf(stderr, "sched_getaffinity: %d CPUs, the program was started on %d\n",
			CPU_COUNT(&s), CPU_COUNT(&parent_cpus));
		exit(1);
	}
	CPU_ZERO(&s);
	CHECK_EQ(pthread_getaffinity_np(pthread_self(), sizeof(s), &s), 0);
	CHECK(CPU_EQUAL(&s, &parent_cpus));
}

static char self_path[4096], cpu_list[4096];

/* The affinity as a list "0,1,3," (the child checks its own against it). */
static void list_of(const cpu_set_t *s, char *out, size_t len)
{
	out[0] = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, s))
			snprintf(out + strlen(out), len - strlen(out), "%d,", c);
}

/* Child mode: mn_libc affinity LIST: the kernel's mask of this new program is LIST. */
static int child_check(const char *want)
{
	cpu_set_t s;
	char have[4096];
	CPU_ZERO(&s);
	/* Under M:N, the CPUs this program started on (its own workers are pinned since). */
	CHECK_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
	list_of(&s, have, sizeof(have));
	if (strcmp(have, want)) {
		fprintf(stderr, "mn_libc: a program started from a ULT runs on CPUs %s, not %s\n",
			have, want);
		return 1;
	}
	printf("affinity ok\n");
	return 0;
}

static void check_spawn(int how)
{
	char *argv[] = {self_path, "affinity", cpu_list, NULL};
	int st = -1;
	if (how == 0) { /* fork + execv */
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			execv(self_path, argv);
			_exit(127);
		}
		CHECK_EQ(waitpid(p, &st, 0), p);
	} else if (how == 1) {
		pid_t p;
		CHECK_EQ(posix_spawn(&p, self_path, NULL, NULL, argv, environ), 0);
		CHECK_EQ(waitpid(p, &st, 0), p);
	} else if (how == 2) {
		char cmd[9000];
		snprintf(cmd, sizeof(cmd), "'%s' affinity %s >/dev/null", self_path, cpu_list);
		st = system(cmd);
	} else {
		char cmd[9000], line[64] = "";
		snprintf(cmd, sizeof(cmd), "'%s' affinity %s", self_path, cpu_list);
		FILE *f = popen(cmd, "r");
		CHECK(f != NULL);
		CHECK(fgets(line, sizeof(line), f) != NULL);
		CHECK(!strcmp(line, "affinity ok\n"));
		st = pclose(f);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "mn_libc: spawn method %d: the child failed (status %#x)\n", how,
			st);
		exit(1);
	}
}

static void *spawner(void *a)
{
	mn_tid_seen();
	check_spawn((int)(intptr_t)a);
	return a;
}

static void *thread(void *a)
{
	mn_tid_seen();
	check_ctype();
	check_affinity();
	sched_yield();
	mn_tid_seen();
	check_ctype();
	return a;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "affinity"))
		return child_check(argv[2]);
	CPU_ZERO(&parent_cpus);
	CHECK_EQ(sched_getaffinity(getppid(), sizeof(parent_cpus), &parent_cpus), 0);
	list_of(&parent_cpus, cpu_list, sizeof(cpu_list));
	ssize_t n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
	CHECK(n > 0);
	self_path[n] = 0;
	check_ctype();
	check_affinity();
	pthread_t t[NT];
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, thread, NULL), 0);
	for (int i = 0; i < NT; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	/* Each way of starting a program, from main and from other threads. */
	for (int how = 0; how < 4; how++) {
		check_spawn(how);
		CHECK_EQ(pthread_create(&t[how], NULL, spawner, (void *)(intptr_t)how), 0);
	}
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	/* sched_setaffinity of one's own (taskset before an exec): what is reported and what a
	 * new program gets; then back. */
	cpu_set_t one, s;
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &parent_cpus)) {
			CPU_SET(c, &one);
			break;
		}
	CHECK_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	CHECK_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
	CHECK(CPU_EQUAL(&s, &one));
	list_of(&one, cpu_list, sizeof(cpu_list));
	check_spawn(0);
	CHECK_EQ(sched_setaffinity(0, sizeof(parent_cpus), &parent_cpus), 0);
	list_of(&parent_cpus, cpu_list, sizeof(cpu_list));
	check_spawn(1);
	mn_check_ults(NT);
	printf("mn_libc: ok\n");
	return 0;
}
