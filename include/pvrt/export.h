/* SPDX-License-Identifier: MIT */
/* Symbol visibility: the libraries build with -fvisibility=hidden; only PVRT_API symbols export. */
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
