/* SPDX-License-Identifier: MIT */
/*
 * ULT-local storage keys (pthread_key_t for ULTs). Each ULT has its own value per key;
 * destructors run when a ULT exits, for non-NULL values, repeated while values are set again,
 * up to PVRT_KEY_DESTRUCTOR_ITERATIONS rounds. Threads that are not ULTs have their own values
 * too; their destructors run when the thread exits.
 */
#ifndef PVRT_KEY_H
#define PVRT_KEY_H

#include <pvrt/export.h>

#include <stdint.h>

PVRT_BEGIN_DECLS

typedef uint32_t pvrt_key_t;

#define PVRT_KEYS_MAX		       256
#define PVRT_KEY_DESTRUCTOR_ITERATIONS 4

/* -EAGAIN when PVRT_KEYS_MAX keys exist.
 * Context: ULT, thread. */
PVRT_API int pvrt_key_create(pvrt_key_t *key, void (*destructor)(void *));
/* -EINVAL for a key that does not exist. Values are not destroyed (as pthread_key_delete).
 * Context: ULT, thread. */
PVRT_API int pvrt_key_delete(pvrt_key_t key);
/* -EINVAL for a deleted or bad key; -ENOMEM if the value table cannot be allocated.
 * Context: ULT, thread (its own values). */
PVRT_API int pvrt_key_set(pvrt_key_t key, const void *value);
/* NULL for a bad key or no value.
 * Context: ULT, thread (its own values). */
PVRT_API void *pvrt_key_get(pvrt_key_t key);

PVRT_END_DECLS

#endif /* PVRT_KEY_H */
