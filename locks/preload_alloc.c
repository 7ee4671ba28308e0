/* SPDX-License-Identifier: MIT */
/*
 * The runtime objects inside libpvrt-preload.so allocate with jemalloc's mallocx()/sdallocx().
 * Linking libjemalloc into the preload would replace the application's malloc, which the
 * preload must not change; these two local definitions (the version script keeps them out of
 * the dynamic symbol table) serve those calls from memory of the runtime's own.
 *
 * Not from the application's malloc: in M:N mode a ULT may be preempted inside malloc while it
 * holds an arena lock, and the runtime allocates where that ULT cannot run until the
 * allocation is done -- requeueing that very ULT after its preemption (a run queue growing),
 * arming a timer, creating a ULT on a worker whose other ULTs are all queued behind it. A
 * thread blocked inside the runtime is not handed off (sysmon.c), so the worker would wait for
 * ever (RocksDB's db_bench under --mn did). Here the lock is the runtime's own, taken only
 * inside the runtime, where no ULT is preempted.
 *
 * Sizes up to SLAB_MAX come in power-of-two classes carved from 64 KiB mappings, each object
 * aligned to its class size (cache-line alignment for every class, as rt_alloc asks); freed
 * objects go back to their class's list (the runtime's metadata: rings, descriptor chunks, key
 * tables, timer heaps, and the M records). Bigger ones are mappings of their own.
 */
#define _GNU_SOURCE
#include <jemalloc/jemalloc.h>

#include "pvrt_os.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define CLASS_MIN_SHIFT 6  /* 64 bytes: a cache line */
#define SLAB_SHIFT	16 /* 64 KiB mappings */
#define SLAB_MAX	((size_t)1 << SLAB_SHIFT)
#define NCLASS		(SLAB_SHIFT - CLASS_MIN_SHIFT + 1)

struct free_obj {
	struct free_obj *next;
};

static uint32_t lock; /* os_lock: short sections, inside the runtime only */
static struct free_obj *free_list[NCLASS];

static unsigned class_of(size_t size)
{
	unsigned c = 0;
	while (((size_t)1 << (c + CLASS_MIN_SHIFT)) < size)
		c++;
	return c;
}

/* The size an object of (size, flags) gets: at least its alignment (jemalloc's flags: bits 0-5
 * lg(alignment)), so that mallocx and sdallocx agree on its class. An object is aligned to its
 * class size up to a page (slabs are page-aligned), a mapping to a page. */
static size_t obj_size(size_t size, int flags)
{
	size_t align = (size_t)1 << ((unsigned)flags & 0x3f);
	return size < align ? align : size;
}

static void *map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* A fresh slab cut into objects of class c: all but the first go on the list (lock held). */
static void *slab_refill(unsigned c)
{
	size_t sz = (size_t)1 << (c + CLASS_MIN_SHIFT);
	char *s = map(SLAB_MAX);
	if (!s)
		return NULL;
	for (size_t off = SLAB_MAX - sz; off >= sz; off -= sz) {
		struct free_obj *o = (struct free_obj *)(void *)(s + off);
		o->next = free_list[c];
		free_list[c] = o;
	}
	return s;
}

void *mallocx(size_t size, int flags)
{
	if (((unsigned)flags & 0x3f) > 12)
		return NULL; /* no caller asks for more than a page's alignment */
	size = obj_size(size, flags);
	if (size > SLAB_MAX)
		return map(size); /* zeroed by the kernel */
	void *p;
	unsigned c = class_of(size);
	os_lock(&lock, 0);
	struct free_obj *o = free_list[c];
	if (o) {
		free_list[c] = o->next;
		p = o;
	} else {
		p = slab_refill(c);
	}
	os_unlock(&lock);
	if (p && (flags & MALLOCX_ZERO))
		memset(p, 0, (size_t)1 << (c + CLASS_MIN_SHIFT));
	return p;
}

void sdallocx(void *p, size_t size, int flags)
{
	if (!p)
		return;
	size = obj_size(size, flags); /* the class mallocx took it from */
	if (size > SLAB_MAX) {
		munmap(p, size);
		return;
	}
	unsigned c = class_of(size);
	struct free_obj *o = p;
	os_lock(&lock, 0);
	o->next = free_list[c];
	free_list[c] = o;
	os_unlock(&lock);
}
