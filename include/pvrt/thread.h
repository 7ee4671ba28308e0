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

typedef struct pvrt_thread_attr {
	size_t stack_size; /* 0: the runtime default (64 KiB unless configured) */
	int detached;	   /* 1: no join; resources go when it exits */
	int worker;	   /* -1: any worker; else bound to this worker */
	size_t guard_size; /* 0: one page; else rounded up to pages */
} pvrt_thread_attr_t;

#define PVRT_STACK_MIN (16u * 1024)
#define PVRT_STACK_MAX ((size_t)1 << 30)

PVRT_API void pvrt_thread_attr_init(pvrt_thread_attr_t *a);

/*
 * Create a ULT running fn(arg). 'out' may be NULL only for detached ULTs. -EINVAL for bad
 * attributes, -ENXIO if the runtime is not running, -ENOMEM/-EAGAIN when out of memory.
 */
PVRT_API int pvrt_thread_create(pvrt_thread_t *out, const pvrt_thread_attr_t *attr,
				void *(*fn)(void *), void *arg);

/* Wait for t to exit; *ret (may be NULL) gets its value. -EDEADLK for self, -EINVAL if detached. */
PVRT_API int pvrt_thread_join(pvrt_thread_t t, void **ret);

/* Resources of t are released when it exits; t must not be used afterwards. */
PVRT_API int pvrt_thread_detach(pvrt_thread_t t);

/* Let other ready ULTs of this worker run. No-op (0) outside a ULT. */
PVRT_API int pvrt_thread_yield(void);

/*
 * Switch straight to t if it is ready (queued), else yield as pvrt_thread_yield(). The caller is
 * queued as ready. -EPERM outside a ULT.
 */
PVRT_API int pvrt_thread_yield_to(pvrt_thread_t t);

/* The calling ULT, or NULL in a thread that is not a ULT. */
PVRT_API pvrt_thread_t pvrt_thread_self(void);

/* A number unique among ULTs of this run (0 for NULL). */
PVRT_API uint64_t pvrt_thread_id(pvrt_thread_t t);

/* End the calling ULT with value ret; does not return. -EPERM outside a ULT or in the primary. */
PVRT_API int pvrt_thread_exit(void *ret);

/* Sleep at least ns nanoseconds (a ULT lets its worker run others meanwhile). */
PVRT_API int pvrt_thread_sleep(uint64_t ns);

/* Move the calling ULT to worker w and bind it there (w = -1: unbind, stay). -EPERM in the
 * primary or outside a ULT, -EINVAL for a bad worker. */
PVRT_API int pvrt_thread_set_worker(int w);

PVRT_END_DECLS

#endif /* PVRT_THREAD_H */
