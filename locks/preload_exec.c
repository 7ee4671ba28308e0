/* SPDX-License-Identifier: MIT */
/*
 * The exec family in the preload: before the program image is replaced, the calling thread
 * leaves the overcommit emulator and a stop signal already queued for it is discarded
 * (pvhint_exec_prepare): the new program has no handler for it, and a pending real-time signal
 * with the default action would kill it. glibc's execl, execvp, ... call its internal execve,
 * not the interposable one, so each entry point is wrapped.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

extern char **environ;

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	int (*f)(const char *, char *const[], char *const[]) = real("execve");
	pvhint_exec_prepare();
	return f(path, argv, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	int (*f)(const char *, char *const[], char *const[]) = real("execvpe");
	pvhint_exec_prepare();
	return f(file, argv, envp);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	int (*f)(int, char *const[], char *const[]) = real("fexecve");
	pvhint_exec_prepare();
	return f(fd, argv, envp);
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
