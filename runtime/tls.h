/* SPDX-License-Identifier: MIT */
/*
 * Per-ULT glibc thread-local storage (tls.c): a thread control block (struct pthread), static TLS
 * blocks and a DTV per ULT, made by ld.so's own allocator, placed at the top of the ULT's stack
 * mapping as nptl places a thread's, and switched with the ULT (see README.md, "Per-ULT TLS").
 */
#ifndef PVRT_RUNTIME_TLS_H
#define PVRT_RUNTIME_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pvrt_ult;
struct rt_worker;

#define PVRT_HIDDEN_TLS __attribute__((visibility("hidden")))

/* Find glibc's TLS allocator and its thread-descriptor layout; 0, or -ENOSYS with the reason in
 * *why (glibc too old or too new, or a static program). Idempotent. */
int rt_tls_init(const char **why) PVRT_HIDDEN_TLS;
/* The kernel thread the running ULT is on, as its TCB caches it (per-ULT TLS mode). */
int rt_tls_cur_tid(void) PVRT_HIDDEN_TLS;

/* Bytes to reserve at the top of a stack mapping for the TCB and static TLS (page multiple). */
size_t rt_tls_reserve(void) PVRT_HIDDEN_TLS;

/*
 * Build a fresh TCB + TLS for u in the reserve at the top of its stack mapping [stack, stack+len)
 * (the memory may hold a previous ULT's released TCB). Copies the stack-protector and pointer
 * guards from the calling thread. Returns the thread pointer (and the highest usable stack
 * address in *stack_top), or NULL when ld.so cannot allocate the DTV.
 */
void *rt_tls_create(struct pvrt_ult *u, void *stack, size_t len, size_t guard,
		    void **stack_top) PVRT_HIDDEN_TLS;

/*
 * A TCB + TLS of the runtime's own for a kernel thread whose glibc TCB belongs to a ULT: the
 * thread that called pvrt_init gives its TCB to the primary ULT (its __thread values, errno and
 * pthread_self are the program's main thread's, wherever the primary runs), and its runtime
 * contexts run on this one once it lost worker 0 (its home context). NULL without memory.
 * Freed with rt_tls_kernel_free (not on it).
 */
void *rt_tls_kernel_create(void) PVRT_HIDDEN_TLS;
void rt_tls_kernel_free(void *tp) PVRT_HIDDEN_TLS;

/* Run first in a new ULT on its own TLS: what glibc's start_thread sets up in a new thread's TLS
 * (the ctype table pointers, __ctype_init). */
void rt_tls_start(void) PVRT_HIDDEN_TLS;

/* Run in the exiting ULT: C++ thread_local destructors, then pthread key destructors (glibc's
 * keys live in the ULT's own descriptor), as glibc's thread exit does. */
void rt_tls_exit(void) PVRT_HIDDEN_TLS;

/* Set rt_tls_ult (wait.h) in the TLS block of thread pointer tp to u. */
void rt_tls_name(void *tp, struct pvrt_ult *u) PVRT_HIDDEN_TLS;

/* Release the DTV and dynamic TLS blocks of a ULT that has exited (any other context). */
void rt_tls_release(void *tp) PVRT_HIDDEN_TLS;

/* The ULT whose TCB is tp (a pthread_t under M:N), or NULL if tp is not a ULT's TCB. */
struct pvrt_ult *rt_tls_ult_of(const void *tp) PVRT_HIDDEN_TLS;

/*
 * ld.so's recursive locks are owned by a kernel tid, which the ULTs of a worker share, so their
 * ownership is moved with the ULT that holds them (below): switched out, it leaves them with no
 * owner (the next ULT there cannot enter ld.so "recursively"); switched in, anywhere, it owns
 * them again. A ULT holding one is still never preempted (preempt.c): a thread that must take
 * it (sysmon starting a spare) would wait for a ULT that may not run.
 * rt_tls_ldso_locked(tid): the thread tid holds one of them (a few plain loads, signal
 * safe). rt_tls_ldso_known(): the locks were found (rt_tls_init), else it says false.
 */
bool rt_tls_ldso_known(void) PVRT_HIDDEN_TLS;
bool rt_tls_ldso_locked(int tid) PVRT_HIDDEN_TLS;

/*
 * A ULT that holds ld.so's locks and moves to another kernel thread takes their ownership with
 * it (the ULT, not the thread, is their holder: it unlocks them where it then runs, and glibc
 * refuses an unlock from another tid, leaving the lock held for good). rt_tls_ldso_disown(tid)
 * clears the owner of those that tid holds, so no thread matches it meanwhile, and returns them
 * as a mask; rt_tls_ldso_own(mask), run in the ULT once it runs again, makes the running TCB's
 * tid their owner.
 */
unsigned rt_tls_ldso_disown(int tid) PVRT_HIDDEN_TLS;
void rt_tls_ldso_own(unsigned held) PVRT_HIDDEN_TLS;

/* The calling thread's thread pointer. */
static inline void *rt_tp_get(void)
{
	void *tp;
#if defined(__x86_64__)
	/* glibc's tcbhead_t starts with a pointer to itself (the TCB is at the thread pointer). */
	__asm__ volatile("movq %%fs:0, %0" : "=r"(tp));
#elif defined(__aarch64__)
	__asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
#else
#error "pvrt: no thread pointer access for this architecture"
#endif
	return tp;
}

/* Set the thread pointer (wrfsbase / arch_prctl / tpidr_el0). */
void rt_tp_set(void *tp) PVRT_HIDDEN_TLS;
/* Back on the calling kernel thread's own TLS (tp 'own'), taking the kernel-thread words along
 * (rt_switch_home, when the thread lost its worker while it ran a ULT). */
void rt_tls_home(void *own) PVRT_HIDDEN_TLS;

/*
 * Make tp the calling kernel thread's thread pointer for a context about to run on worker w:
 * first refresh, in tp's TLS, what belongs to the kernel thread (the worker pointer, the
 * hint source's per-thread words, glibc's cached tid), then load the thread pointer. Called by the
 * one switch function (ult.c) just before the stack switch.
 */
void rt_tls_switch(struct rt_worker *w, void *tp) PVRT_HIDDEN_TLS;

/* Record the calling kernel thread as worker w's (its own thread pointer and tid). */
void rt_tls_worker_start(struct rt_worker *w) PVRT_HIDDEN_TLS;

#endif /* PVRT_RUNTIME_TLS_H */
