/* SPDX-License-Identifier: MIT */
/*
 * Symbol visibility: the libraries build with -fvisibility=hidden; only PVRT_API symbols export.
 *
 * Every public call has a "Context:" line naming where it may be called:
 *   ULT     a pvrt thread, the primary ULT (the thread that called pvrt_init) included;
 *   thread  a thread that is not a ULT (a foreign thread), whether the runtime runs or not;
 *   signal  a signal handler: the call is async-signal-safe;
 *   fork    the child of fork() before exec, when a thread that is not a ULT forked (as with
 *           pthread locks, a lock another thread held at the fork stays held in the child);
 *   any     all of these.
 * A context not named is not allowed.
 */
#ifndef PVRT_EXPORT_H
#define PVRT_EXPORT_H

#if defined(__GNUC__)
#define PVRT_API __attribute__((visibility("default")))
#else
#define PVRT_API
#endif

#ifdef __cplusplus
#define PVRT_BEGIN_DECLS extern "C" {
#define PVRT_END_DECLS	 }
#else
#define PVRT_BEGIN_DECLS
#define PVRT_END_DECLS
#endif

/* A static initialiser of all zeros, for C ({0}) and C++ ({}: no missing-field warning). */
#ifdef __cplusplus
#define PVRT_ZERO_INITIALIZER                                                                      \
	{                                                                                          \
	}
#else
#define PVRT_ZERO_INITIALIZER                                                                      \
	{                                                                                          \
		0                                                                                  \
	}
#endif

#endif /* PVRT_EXPORT_H */
