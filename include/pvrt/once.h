/* SPDX-License-Identifier: MIT */
/* pvrt_once: run an initialiser exactly once; concurrent callers park until it is done. */
#ifndef PVRT_ONCE_H
#define PVRT_ONCE_H

#include <pvrt/export.h>

#include <stdint.h>

PVRT_BEGIN_DECLS

typedef struct pvrt_once {
	uint32_t state; /* 0 not run, 1 running, 2 running with waiters (with the runner's fork
			 * generation in bits 2-31), 3 done */
} pvrt_once_t;
#define PVRT_ONCE_INIT PVRT_ZERO_INITIALIZER

/* Run fn once for o; every caller returns after it has run. -EINVAL for a NULL fn.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_once(pvrt_once_t *o, void (*fn)(void));

PVRT_END_DECLS

#endif /* PVRT_ONCE_H */
