/* SPDX-License-Identifier: MIT */
/*
 * The runtime objects inside libpvrt-preload.so allocate with jemalloc's
 * mallocx()/sdallocx(). Linking libjemalloc into the preload would replace the
 * application's malloc, which the preload must not change; these two local
 * definitions (the version script keeps them out of the dynamic symbol table)
 * serve those calls from the application's allocator instead.
 */
#define _GNU_SOURCE
#include <jemalloc/jemalloc.h>

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void *mallocx(size_t size, int flags)
{
	/* jemalloc's flag layout: bits 0-5 lg(alignment) (0: default), MALLOCX_ZERO. */
	size_t lg = (size_t)flags & 0x3f;
	size_t align = lg ? (size_t)1 << lg : alignof(max_align_t);
	if (align < sizeof(void *))
		align = sizeof(void *);
	void *p = NULL;
	if (posix_memalign(&p, align, size ? size : 1))
		return NULL;
	if (flags & MALLOCX_ZERO)
		memset(p, 0, size);
	return p;
}

void sdallocx(void *p, size_t size, int flags)
{
	(void)size;
	(void)flags;
	free(p);
}
