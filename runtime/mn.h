/* SPDX-License-Identifier: MIT */
/*
 * What the M:N mode's files of libpvrt-preload.so share (mn.c, mn_signal.c): the switch, the
 * export attribute and the lookup of glibc's own functions.
 */
#ifndef PVRT_RUNTIME_MN_H
#define PVRT_RUNTIME_MN_H

#include "internal.h"

#include <dlfcn.h>

#define EXPORT __attribute__((visibility("default")))

/* M:N mode is on (the runtime runs and pthreads are ULTs). */
extern bool rt_mn_on;

/* glibc's functions, for threads that are not ULTs and for exit/unwinding. */
#define REALFN(ret, name, ...)                                                                     \
	static ret (*get_real_##name(void))(__VA_ARGS__)                                           \
	{                                                                                          \
		static ret (*f)(__VA_ARGS__);                                                      \
		ret (*g)(__VA_ARGS__) = __atomic_load_n(&f, __ATOMIC_RELAXED);                     \
		if (!g) {                                                                          \
			g = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                          \
			__atomic_store_n(&f, g, __ATOMIC_RELAXED);                                 \
		}                                                                                  \
		return g;                                                                          \
	}
#define REAL(name, ...) (get_real_##name()(__VA_ARGS__))

/* mn_signal.c: put handlers installed before M:N mode behind the trampoline; a fork child's
 * reset. */
void rt_mn_signal_start(void) PVRT_HIDDEN;
void rt_mn_signal_atfork_child(void) PVRT_HIDDEN;

/* The calling ULT in M:N mode, else NULL (the real function is used). */
static inline struct pvrt_ult *self_ult(void)
{
	return likely(rt_mn_on) ? rt_ult_current() : NULL;
}

#endif /* PVRT_RUNTIME_MN_H */
