/* SPDX-License-Identifier: MIT */
/*
 * Telling sanitizers and valgrind about stack switches (internal).
 *   ASan: __sanitizer_start_switch_fiber() before a switch, ..._finish_... after it, so that
 *         stack-use checks and fake stacks follow the running stack.
 *   TSan: one fiber per context; __tsan_switch_to_fiber() before a switch (flags 0: the switch
 *         is a synchronisation, like the handoff it implements).
 *   valgrind: stacks registered at mmap, deregistered at munmap.
 */
#ifndef PVRT_RUNTIME_SAN_H
#define PVRT_RUNTIME_SAN_H

#include <stddef.h>

#if defined(PVRT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(PVRT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif
#if defined(PVRT_HAVE_VALGRIND)
#include <valgrind/valgrind.h>
#endif

/* Per-context sanitizer state. */
struct rt_san {
	const void *bottom; /* lowest usable stack address */
	size_t size;
	void *asan_fake;  /* ASan fake stack of the suspended context */
	void *tsan_fiber; /* TSan fiber of the context */
};

static inline void rt_san_fiber_create(struct rt_san *s)
{
#if defined(PVRT_TSAN)
	s->tsan_fiber = __tsan_create_fiber(0);
#else
	(void)s;
#endif
}

static inline void rt_san_fiber_current(struct rt_san *s)
{
#if defined(PVRT_TSAN)
	s->tsan_fiber = __tsan_get_current_fiber();
#else
	(void)s;
#endif
}

static inline void rt_san_fiber_destroy(struct rt_san *s)
{
#if defined(PVRT_TSAN)
	if (s->tsan_fiber)
		__tsan_destroy_fiber(s->tsan_fiber);
	s->tsan_fiber = NULL;
#else
	(void)s;
#endif
}

/* Before switching from 'from' (dying: it never resumes) to 'to'. */
static inline void rt_san_switch(struct rt_san *from, struct rt_san *to, int dying)
{
#if defined(PVRT_ASAN)
	__sanitizer_start_switch_fiber(dying ? NULL : &from->asan_fake, to->bottom, to->size);
#endif
#if defined(PVRT_TSAN)
	__tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
	(void)from;
	(void)to;
	(void)dying;
}

/* First thing after resuming in context 'self' (the one switched to). */
static inline void rt_san_resumed(struct rt_san *self)
{
#if defined(PVRT_ASAN)
	__sanitizer_finish_switch_fiber(self->asan_fake, NULL, NULL);
#endif
	(void)self;
}

static inline unsigned rt_san_stack_register(void *lo, void *hi)
{
#if defined(PVRT_HAVE_VALGRIND)
	return VALGRIND_STACK_REGISTER(lo, hi);
#else
	(void)lo;
	(void)hi;
	return 0;
#endif
}

static inline void rt_san_stack_deregister(unsigned id)
{
#if defined(PVRT_HAVE_VALGRIND)
	VALGRIND_STACK_DEREGISTER(id);
#else
	(void)id;
#endif
}

/*
 * A stack freshly mapped: ASan keeps the shadow of unmapped memory, so a new stack at the address
 * of an old one (the scheduler stack of the previous pvrt_init, a ULT stack given back when idle)
 * would inherit the redzones of frames that never returned there (the contexts abandoned at
 * their last switch) and report accesses of new frames to them.
 */
static inline void rt_san_stack_fresh(void *lo, size_t len)
{
#if defined(PVRT_ASAN)
	__asan_unpoison_memory_region(lo, len);
#else
	(void)lo;
	(void)len;
#endif
}

static inline int rt_san_on_valgrind(void)
{
#if defined(PVRT_HAVE_VALGRIND)
	return RUNNING_ON_VALGRIND != 0;
#else
	return 0;
#endif
}

#endif /* PVRT_RUNTIME_SAN_H */
