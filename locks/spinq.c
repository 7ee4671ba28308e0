/* SPDX-License-Identifier: MIT */
/*
 * Spinner-queue nodes (spinq.h): one per kernel thread, type-stable. A thread's node is taken
 * from the pool (or allocated) the first time it queues, and goes back to the pool when the
 * thread exits (a thread-specific-data destructor). Nodes are never freed: a spinner leaving the
 * queue may still read a node whose thread has just exited (see spinq.h), so that memory must
 * stay a node. The pool holds at most as many nodes as threads ever queued at once.
 */
#define _GNU_SOURCE
#include "spinq.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static __thread struct lk_sqnode *lk_spinq_mine __attribute__((tls_model("initial-exec")));

static uint32_t pool_lock; /* lk_ilock */
static struct lk_sqnode *pool;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool exit_key_ok;

static void node_release(void *p)
{
	struct lk_sqnode *n = p;
	/* The thread is exiting, outside any lock call: n is in no queue. */
	lk_ilock(&pool_lock, PVRT_LOCK_MUTEX);
	n->pool = pool;
	pool = n;
	lk_iunlock(&pool_lock);
	lk_spinq_mine = NULL;
}

static void exit_key_create(void)
{
	exit_key_ok = pthread_key_create(&exit_key, node_release) == 0;
}

/* In a fork child (called by the locks' child handler, after lk_fork_gen moved on) only the
 * forking thread exists; a pool lock held by another is reset, and the forking thread's node
 * joins the new generation. The nodes of the parent's other threads are not recycled (a bounded
 * leak): they keep their generation, which tells spinners queued behind them (spinq.h). */
void lk_spinq_atfork_child(void)
{
	pool_lock = 0;
	if (lk_spinq_mine)
		__atomic_store_n(&lk_spinq_mine->gen, lk_gen(), __ATOMIC_RELAXED);
}

static struct lk_sqnode *node_alloc(void)
{
	pthread_once(&exit_once, exit_key_create);
	lk_ilock(&pool_lock, PVRT_LOCK_MUTEX);
	struct lk_sqnode *n = pool;
	if (n)
		pool = n->pool;
	lk_iunlock(&pool_lock);
	if (!n) {
		n = aligned_alloc(_Alignof(struct lk_sqnode), sizeof(*n));
		if (!n)
			return NULL; /* the caller parks without spinning */
		memset(n, 0, sizeof(*n));
	}
	/* Relaxed atomic: a former neighbour may still read a recycled node (spinq.h); the
	 * queue's seq_cst exchange publishes it before anyone reaches it anew. */
	__atomic_store_n(&n->gen, lk_gen(), __ATOMIC_RELAXED);
	/* Without the exit hook (no keys left) the node stays with the thread's memory slot for
	 * good: never freed, so still type-stable. */
	if (exit_key_ok)
		pthread_setspecific(exit_key, n);
	lk_spinq_mine = n;
	return n;
}

__attribute__((noinline)) struct lk_sqnode *lk_spinq_node(void)
{
	/* The empty asm keeps the compiler from treating this as pure and reusing an old result
	 * after a ULT switch (see spinq.h). */
	__asm__ volatile("" ::: "memory");
	struct lk_sqnode *n = lk_spinq_mine;
	return lk_likely(n != NULL) ? n : node_alloc();
}
