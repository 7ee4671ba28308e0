/* SPDX-License-Identifier: MIT */
/*
 * pvrt threads: user-level threads (ULTs) scheduled M:N on the runtime's workers.
 *
 * A ULT runs until it blocks, yields or exits (cooperative); a worker then runs the next one.
 * Blocked ULTs (join, sleep, pvrt locks) cost no worker. Most calls are also allowed from
 * threads that are not ULTs (they block in the kernel); the exceptions say so.
 */
#ifndef PVRT_THREAD_H
#define PVRT_THREAD_H

#include <pvrt/export.h>

#include <stddef.h>
#include <stdint.h>

PVRT_BEGIN_DECLS

typedef struct pvrt_ult *pvrt_thread_t;

/*
 * Attributes of a new ULT. 'size' is the struct's size as the program was compiled
 * (pvrt_thread_attr_init sets it): fields are only ever appended (per-ULT settings of M:N mode
 * will be), each new one with 0 meaning the behaviour before it existed, and a library newer than
 * the program takes the default for fields past 'size'.
 */
typedef struct pvrt_thread_attr {
	uint32_t size;	   /* sizeof(pvrt_thread_attr_t); 0 (not initialised): -EINVAL */
	int detached;	   /* 1: no join; resources go when it exits */
	size_t stack_size; /* 0: the runtime default (64 KiB unless configured) */
	int worker;	   /* -1: any worker; else bound to this worker */
	size_t guard_size; /* 0: one page; else rounded up to pages */
} pvrt_thread_attr_t;

/* Defaults: joinable, default stack, any worker (C and C++). */
#define PVRT_THREAD_ATTR_INIT                                                                      \
	{                                                                                          \
		sizeof(pvrt_thread_attr_t), 0, 0, -1, 0                                            \
	}

#define PVRT_STACK_MIN (16u * 1024)
#define PVRT_STACK_MAX ((size_t)1 << 30)

/* Set a to PVRT_THREAD_ATTR_INIT. Inline: the size is the program's.
 * Context: any. */
static inline void pvrt_thread_attr_init(pvrt_thread_attr_t *a)
{
	const pvrt_thread_attr_t z = PVRT_THREAD_ATTR_INIT;
	*a = z;
}

/*
 * Create a ULT running fn(arg). 'out' may be NULL only for detached ULTs. -EINVAL for bad
 * attributes, -ENXIO if the runtime is not running, -ENOMEM/-EAGAIN when out of memory.
 * Context: ULT, thread (the runtime running, not in a fork child of it).
 */
PVRT_API int pvrt_thread_create(pvrt_thread_t *out, const pvrt_thread_attr_t *attr,
				void *(*fn)(void *), void *arg);

/* Wait for t to exit; *ret (may be NULL) gets its value. -EDEADLK for self, -EINVAL if detached.
 * Context: ULT, thread. */
PVRT_API int pvrt_thread_join(pvrt_thread_t t, void **ret);

/* Resources of t are released when it exits; t must not be used afterwards.
 * Context: ULT, thread. */
PVRT_API int pvrt_thread_detach(pvrt_thread_t t);

/* Let other ready ULTs of this worker run. No-op (0) outside a ULT.
 * Context: ULT (thread: a no-op). */
PVRT_API int pvrt_thread_yield(void);

/*
 * Switch straight to t if it is ready (queued), else yield as pvrt_thread_yield(). The caller is
 * queued as ready. -EPERM outside a ULT.
 * Context: ULT.
 */
PVRT_API int pvrt_thread_yield_to(pvrt_thread_t t);

/* The calling ULT, or NULL in a thread that is not a ULT.
 * Context: any. */
PVRT_API pvrt_thread_t pvrt_thread_self(void);

/* A number unique among ULTs of this run (0 for NULL).
 * Context: any. */
PVRT_API uint64_t pvrt_thread_id(pvrt_thread_t t);

/* End the calling ULT with value ret; does not return. -EPERM outside a ULT or in the primary.
 * Context: ULT other than the primary. */
PVRT_API int pvrt_thread_exit(void *ret);

/* Sleep at least ns nanoseconds (a ULT lets its worker run others meanwhile).
 * Context: ULT, thread. */
PVRT_API int pvrt_thread_sleep(uint64_t ns);

/* Move the calling ULT to worker w and bind it there (w = -1: unbind, stay). -EPERM in the
 * primary or outside a ULT, -EINVAL for a bad worker.
 * Context: ULT other than the primary. */
PVRT_API int pvrt_thread_set_worker(int w);

PVRT_END_DECLS

#endif /* PVRT_THREAD_H */
