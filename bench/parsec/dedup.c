/* SPDX-License-Identifier: MIT */
/*
 * A condvar pipeline shaped like PARSEC's dedup: a producer cuts the input into chunks, two
 * parallel stages of THREADS threads each transform them ("fingerprint", "compress"), and a
 * writer puts them back in sequence order. Stages are joined by bounded queues, each a mutex
 * with notEmpty / notFull condvars that are broadcast on every change (as dedup's queue does).
 *
 * usage: parsec_dedup THREADS [CHUNKS] [QUEUE-SIZE]
 * Check: every chunk arrives exactly once and the in-order digest equals the one computed by
 * a single thread.
 */
#include "parsec.h"

struct item {
	long seq;
	uint64_t data;
};

struct queue {
	pthread_mutex_t m;
	pthread_cond_t not_empty, not_full;
	struct item *ring;
	long cap, head, n;
	long producers; /* still running; the queue ends when 0 and empty */
};

static long nthreads, nchunks, qsize;
static struct queue q1, q2, q3;

static void q_init(struct queue *q, long cap, long producers)
{
	pthread_mutex_init(&q->m, NULL);
	pthread_cond_init(&q->not_empty, NULL);
	pthread_cond_init(&q->not_full, NULL);
	q->ring = calloc((size_t)cap, sizeof(*q->ring));
	if (!q->ring)
		ps_die_errno("calloc", 12);
	q->cap = cap;
	q->producers = producers;
}

static void q_put(struct queue *q, struct item it)
{
	pthread_mutex_lock(&q->m);
	while (q->n == q->cap)
		pthread_cond_wait(&q->not_full, &q->m);
	q->ring[(q->head + q->n) % q->cap] = it;
	q->n++;
	pthread_cond_broadcast(&q->not_empty);
	pthread_mutex_unlock(&q->m);
}

/* 0 when the queue has ended. */
static int q_get(struct queue *q, struct item *it)
{
	pthread_mutex_lock(&q->m);
	while (q->n == 0 && q->producers > 0)
		pthread_cond_wait(&q->not_empty, &q->m);
	int got = q->n > 0;
	if (got) {
		*it = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->n--;
		pthread_cond_broadcast(&q->not_full);
	}
	pthread_mutex_unlock(&q->m);
	return got;
}

static void q_producer_done(struct queue *q)
{
	pthread_mutex_lock(&q->m);
	if (--q->producers == 0)
		pthread_cond_broadcast(&q->not_empty);
	pthread_mutex_unlock(&q->m);
}

static inline uint64_t chunk(long seq)
{
	return ps_mix((uint64_t)seq * 31 + 1);
}
static inline uint64_t work(uint64_t x, int rounds)
{
	for (int k = 0; k < rounds; k++)
		x = x * 0x5851F42D4C957F2Dull + (x >> 33) + (uint64_t)k;
	return x;
}
static inline uint64_t fingerprint(uint64_t x)
{
	return work(x, 200);
}
static inline uint64_t compress(uint64_t x)
{
	return work(x ^ 0xA5A5A5A5ull, 300);
}

static void *producer(void *arg)
{
	(void)arg;
	for (long s = 0; s < nchunks; s++)
		q_put(&q1, (struct item){s, chunk(s)});
	q_producer_done(&q1);
	return NULL;
}

static void *stage(struct queue *in, struct queue *out, uint64_t (*fn)(uint64_t))
{
	struct item it;
	while (q_get(in, &it)) {
		it.data = fn(it.data);
		q_put(out, it);
	}
	q_producer_done(out);
	return NULL;
}
static void *stage1(void *arg)
{
	(void)arg;
	return stage(&q1, &q2, fingerprint);
}
static void *stage2(void *arg)
{
	(void)arg;
	return stage(&q2, &q3, compress);
}

static uint64_t digest;
static long received;
static void *writer(void *arg)
{
	(void)arg;
	/* Reorder: chunks arrive in any order; write them in sequence. */
	uint64_t *slot = calloc((size_t)nchunks, sizeof(*slot));
	char *seen = calloc((size_t)nchunks, 1);
	if (!slot || !seen)
		ps_die_errno("calloc", 12);
	long next = 0;
	struct item it;
	while (q_get(&q3, &it)) {
		if (it.seq < 0 || it.seq >= nchunks || seen[it.seq]) {
			fprintf(stderr, "FAIL: chunk %ld duplicated or out of range\n", it.seq);
			exit(1);
		}
		seen[it.seq] = 1;
		slot[it.seq] = it.data;
		received++;
		while (next < nchunks && seen[next])
			digest = ps_mix(digest ^ slot[next++]);
	}
	free(slot);
	free(seen);
	return NULL;
}

static void *role(void *arg)
{
	long i = (long)arg;
	if (i == 0)
		return producer(NULL);
	if (i == 1)
		return writer(NULL);
	return i < 2 + nthreads ? stage1(NULL) : stage2(NULL);
}

int main(int argc, char **argv)
{
	const char *usage = "THREADS [CHUNKS] [QUEUE-SIZE]";
	if (argc < 2) {
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		return 2;
	}
	nthreads = ps_arg(argc, argv, 1, 2, usage);
	nchunks = ps_arg(argc, argv, 2, 100000, usage);
	qsize = ps_arg(argc, argv, 3, 16, usage);
	q_init(&q1, qsize, 1);
	q_init(&q2, qsize, nthreads);
	q_init(&q3, qsize, nthreads);
	double t0 = ps_now();
	ps_run_threads(2 + 2 * nthreads, role);
	double el = ps_now() - t0;
	if (received != nchunks) {
		fprintf(stderr, "FAIL: %ld chunks of %ld arrived\n", received, nchunks);
		return 1;
	}
	uint64_t want = 0;
	for (long s = 0; s < nchunks; s++)
		want = ps_mix(want ^ compress(fingerprint(chunk(s))));
	ps_check_or_die("digest", digest, want);
	ps_report(digest, el);
	return 0;
}
