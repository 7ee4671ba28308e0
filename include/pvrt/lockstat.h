/* SPDX-License-Identifier: MIT */
/*
 * pvrt lock settings and statistics (all pvrt locks share them).
 */
#ifndef PVRT_LOCKSTAT_H
#define PVRT_LOCKSTAT_H

#include <pvrt/export.h>
#include <pvrt/pvhint.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

PVRT_BEGIN_DECLS

enum pvrt_lock_class {
	PVRT_LOCK_MUTEX,
	PVRT_LOCK_RWLOCK,
	PVRT_LOCK_COND,
	PVRT_LOCK_SPIN,
	PVRT_LOCK_BARRIER,
	PVRT_LOCK_SEM,
	PVRT_LOCK_NCLASSES
};

/* Fields are only ever appended; 'size' says how many bytes the library filled (a library older
 * than the program leaves the fields past them 0). */
struct pvrt_lock_stats {
	uint32_t size;	       /* out: bytes filled */
	uint32_t flags;	       /* out: 0 (reserved) */
	uint64_t acquisitions; /* successful lock / wait calls */
	uint64_t contended;    /* of which had to spin or park */
	uint64_t spin_cut;     /* spins cut short because the owner's vCPU was preempted */
	uint64_t parks;	       /* futex parks */
	uint64_t handoffs;     /* locks handed directly to a starving waiter */
	uint64_t yields;       /* directed yields to a preempted owner's vCPU (pvhint_yield_to) */
};

/* The hint handle the locks read ("should I spin?"). NULL: pvhint_default(). Use a handle of
 * source none to run the locks with hints off. Parking still reports to the default handle.
 * Context: ULT, thread, fork. */
PVRT_API void pvrt_locks_set_hints(pvhint_t *h);

/* Counting costs a thread-local increment per event; off by default.
 * Context: any. */
PVRT_API void pvrt_locks_stats_enable(bool on);
/* Sums over all threads so far, into the first 'size' bytes of *out (size: the program's
 * sizeof(struct pvrt_lock_stats)). -EINVAL for a bad class, NULL or a size below the header.
 * Context: ULT, thread, fork. */
PVRT_API int pvrt_locks_stats_read(enum pvrt_lock_class cls, struct pvrt_lock_stats *out,
				   size_t size);
/* pvrt_locks_stats_read with the program's size.
 * Context: ULT, thread, fork. */
static inline int pvrt_locks_stats_get(enum pvrt_lock_class cls, struct pvrt_lock_stats *out)
{
	return pvrt_locks_stats_read(cls, out, sizeof(*out));
}
/* "mutex", "rwlock", ...
 * Context: any. */
PVRT_API const char *pvrt_lock_class_name(enum pvrt_lock_class cls);

PVRT_END_DECLS

#endif /* PVRT_LOCKSTAT_H */
