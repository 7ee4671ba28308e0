/* SPDX-License-Identifier: MIT */
/*
 * The exec family in the preload: before the program image is replaced, the calling thread
 * leaves the overcommit emulator and a stop signal already queued for it is discarded
 * (pvhint_exec_prepare): the new program has no handler for it, and a pending real-time signal
 * with the default action would kill it. glibc's execl, execvp, ... call its internal execve,
 * not the interposable one, so each entry point is wrapped.
 *
 * In M:N mode the calling ULT's kernel thread is a worker's, pinned to one CPU, and a new
 * program inherits the thread's affinity: the exec family, posix_spawn, posix_spawnp, system
 * and popen (the last two spawn through glibc's internal posix_spawn) run with the CPUs the
 * program's ULTs report, and the thread's own come back when they return (rt_mn_spawn_*).
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include "lk.h"

#include <dlfcn.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

extern char **environ;

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

/* CALL with the process's CPUs (M:N mode), the thread's own back afterwards. */
#define WITH_PROCESS_CPUS(type, call)                                                              \
	struct rt_mn_spawn sp_;                                                                    \
	rt_mn_spawn_enter(&sp_);                                                                   \
	type r_ = call;                                                                            \
	rt_mn_spawn_leave(&sp_);                                                                   \
	return r_

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	int (*f)(const char *, char *const[], char *const[]) = real("execve");
	pvhint_exec_prepare();
	WITH_PROCESS_CPUS(int, f(path, argv, envp));
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	int (*f)(const char *, char *const[], char *const[]) = real("execvpe");
	pvhint_exec_prepare();
	WITH_PROCESS_CPUS(int, f(file, argv, envp));
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	int (*f)(int, char *const[], char *const[]) = real("fexecve");
	pvhint_exec_prepare();
	WITH_PROCESS_CPUS(int, f(fd, argv, envp));
}

typedef int spawn_fn(pid_t *, const char *, const posix_spawn_file_actions_t *,
		     const posix_spawnattr_t *, char *const[], char *const[]);

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	spawn_fn *f = (spawn_fn *)real("posix_spawn");
	WITH_PROCESS_CPUS(int, f(pid, path, fa, at, argv, envp));
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	spawn_fn *f = (spawn_fn *)real("posix_spawnp");
	WITH_PROCESS_CPUS(int, f(pid, file, fa, at, argv, envp));
}

EXPORT int system(const char *cmd)
{
	int (*f)(const char *) = (int (*)(const char *))real("system");
	WITH_PROCESS_CPUS(int, f(cmd));
}

EXPORT FILE *popen(const char *cmd, const char *mode)
{
	FILE *(*f)(const char *, const char *) =
	    (FILE * (*)(const char *, const char *)) real("popen");
	WITH_PROCESS_CPUS(FILE *, f(cmd, mode));
}

EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

/* The list forms: count the arguments, then the array form (on the stack, as glibc does). */
#define ARGV_FROM_LIST(first, ap, extra)                                                           \
	size_t n = 1;                                                                              \
	va_start(ap, first);                                                                       \
	while (va_arg(ap, char *))                                                                 \
		n++;                                                                               \
	va_end(ap);                                                                                \
	char *argv[n + 1];                                                                         \
	argv[0] = (char *)(first);                                                                 \
	va_start(ap, first);                                                                       \
	for (size_t i = 1; i <= n; i++)                                                            \
		argv[i] = va_arg(ap, char *); /* argv[n] is the terminating NULL */                \
	extra;                                                                                     \
	va_end(ap)

EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	ARGV_FROM_LIST(arg, ap, (void)0);
	return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	ARGV_FROM_LIST(arg, ap, (void)0);
	return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char **envp;
	ARGV_FROM_LIST(arg, ap, envp = va_arg(ap, char **));
	return execve(path, argv, envp);
}
