/* SPDX-License-Identifier: MIT */
/*
 * Stress on all workers: 100k ULTs, a deep join tree, ULTs migrating across workers, many
 * concurrent sleeps, yield_to chains, and foreign threads creating/joining ULTs. Also run under
 * the hint emulator (random hints; real overcommit) by ctest with PVRT_HINTS=emu.
 * Argument "quick" shrinks the counts (emulator runs, ASan), "tiny" even more (TSan).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

static int quick, tiny;

static void *add_one(void *a)
{
	__atomic_add_fetch((long *)a, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void many(void)
{
	long n = tiny ? 2000 : quick ? 20000 : 100000, count = 0;
	enum { BATCH = 1000 };
	pvrt_thread_t t[BATCH];
	for (long done = 0; done < n; done += BATCH) {
		for (int i = 0; i < BATCH; i++)
			CHECK_EQ(pvrt_thread_create(&t[i], NULL, add_one, &count), 0);
		for (int i = 0; i < BATCH; i++)
			CHECK_EQ(pvrt_thread_join(t[i], NULL), 0);
	}
	CHECK_EQ(__atomic_load_n(&count, __ATOMIC_RELAXED), n);
	/* And as many detached ones, all alive at once. */
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	a.detached = 1;
	count = 0;
	for (long i = 0; i < n / 4; i++)
		CHECK_EQ(pvrt_thread_create(NULL, &a, add_one, &count), 0);
	while (__atomic_load_n(&count, __ATOMIC_RELAXED) < n / 4)
		pvrt_thread_yield();
}

static void *tree(void *a)
{
	intptr_t depth = (intptr_t)a;
	if (!depth)
		return (void *)1;
	pvrt_thread_t l, r;
	void *x, *y;
	CHECK_EQ(pvrt_thread_create(&l, NULL, tree, (void *)(depth - 1)), 0);
	CHECK_EQ(pvrt_thread_create(&r, NULL, tree, (void *)(depth - 1)), 0);
	CHECK_EQ(pvrt_thread_join(l, &x), 0);
	CHECK_EQ(pvrt_thread_join(r, &y), 0);
	return (void *)((intptr_t)x + (intptr_t)y);
}

static void *migrate(void *a)
{
	unsigned nw = pvrt_nworkers();
	long moves = 0;
	for (int i = 0; i < 200; i++) {
		int w = (int)(((uintptr_t)a + (unsigned)i) % nw);
		CHECK_EQ(pvrt_thread_set_worker(w), 0);
		CHECK_EQ(pvrt_worker_self(), w);
		pvrt_thread_yield();
		CHECK_EQ(pvrt_worker_self(), w);
		moves++;
	}
	CHECK_EQ(pvrt_thread_set_worker(-1), 0);
	/* Unbound, it may be stolen anywhere: keep yielding so thieves get a chance. */
	for (int i = 0; i < 200; i++)
		pvrt_thread_yield();
	return (void *)moves;
}

static void *sleepy(void *a)
{
	unsigned seed = (unsigned)(uintptr_t)a;
	for (int i = 0; i < 5; i++)
		CHECK_EQ(pvrt_thread_sleep((uint64_t)(rand_r(&seed) % 2000000)), 0);
	return NULL;
}

#define CHAIN 64
static pvrt_thread_t chain[CHAIN];
static int chain_hits[CHAIN];
static uint32_t chain_go;

static void *chain_fn(void *a)
{
	intptr_t i = (intptr_t)a;
	/* Wait until every link exists, then pass the baton on with yield_to. */
	while (!__atomic_load_n(&chain_go, __ATOMIC_ACQUIRE))
		pvrt_thread_yield();
	for (int round = 0; round < 50; round++) {
		__atomic_add_fetch(&chain_hits[i], 1, __ATOMIC_RELAXED);
		CHECK_EQ(pvrt_thread_yield_to(chain[(i + 1) % CHAIN]), 0);
	}
	return NULL;
}

/*
 * The claim protocol under pressure: more ULTs than a ring holds (overflow into injection queues),
 * all yielding to random peers across workers (stale ring entries everywhere). Each ULT marks
 * itself running while between switches: a ULT resumed twice would find its own mark set.
 */
#define CLAIMERS 600
static pvrt_thread_t claimers[CLAIMERS];
static uint32_t claim_running[CLAIMERS];
static uint32_t claim_go;

static void *claimer(void *a)
{
	uintptr_t i = (uintptr_t)a;
	unsigned seed = (unsigned)i * 7919u + 1;
	while (!__atomic_load_n(&claim_go, __ATOMIC_ACQUIRE))
		pvrt_thread_yield();
	for (int k = 0; k < (tiny ? 30 : 300); k++) {
		CHECK_EQ(__atomic_exchange_n(&claim_running[i], 1, __ATOMIC_ACQ_REL), 0);
		pvrt_thread_t peer = claimers[rand_r(&seed) % CLAIMERS];
		__atomic_store_n(&claim_running[i], 0, __ATOMIC_RELEASE);
		if (k & 1)
			CHECK_EQ(pvrt_thread_yield_to(peer), 0);
		else
			CHECK_EQ(pvrt_thread_yield(), 0);
	}
	return NULL;
}

struct foreign_arg {
	long count;
};

static void *foreign_thread(void *p)
{
	struct foreign_arg *fa = p;
	CHECK(pvrt_thread_self() == NULL);
	CHECK_EQ(pvrt_worker_self(), -1);
	for (int i = 0; i < 200; i++) {
		pvrt_thread_t t;
		CHECK_EQ(pvrt_thread_create(&t, NULL, add_one, &fa->count), 0);
		CHECK_EQ(pvrt_thread_join(t, NULL), 0);
	}
	CHECK_EQ(pvrt_thread_sleep(1000), 0);
	return NULL;
}

int main(int argc, char **argv)
{
	tiny = argc > 1 && !strcmp(argv[1], "tiny");
	quick = tiny || (argc > 1 && !strcmp(argv[1], "quick"));
	int r = pvrt_init(NULL);
	CHECK_EQ(r, 0);

	many();

	void *leaves;
	pvrt_thread_t root;
	int depth = tiny ? 7 : quick ? 10 : 13;
	CHECK_EQ(pvrt_thread_create(&root, NULL, tree, (void *)(intptr_t)depth), 0);
	CHECK_EQ(pvrt_thread_join(root, &leaves), 0);
	CHECK_EQ((intptr_t)leaves, 1 << depth);

	pvrt_thread_t m[16];
	for (int i = 0; i < 16; i++)
		CHECK_EQ(pvrt_thread_create(&m[i], NULL, migrate, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < 16; i++) {
		void *moves;
		CHECK_EQ(pvrt_thread_join(m[i], &moves), 0);
		CHECK_EQ((intptr_t)moves, 200);
	}

	int ns = tiny ? 50 : quick ? 200 : 1000;
	pvrt_thread_t *s = calloc((size_t)ns, sizeof(*s));
	for (int i = 0; i < ns; i++)
		CHECK_EQ(pvrt_thread_create(&s[i], NULL, sleepy, (void *)(uintptr_t)(i + 1)), 0);
	for (int i = 0; i < ns; i++)
		CHECK_EQ(pvrt_thread_join(s[i], NULL), 0);
	free(s);

	for (int i = 0; i < CHAIN; i++)
		CHECK_EQ(pvrt_thread_create(&chain[i], NULL, chain_fn, (void *)(intptr_t)i), 0);
	__atomic_store_n(&chain_go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < CHAIN; i++)
		CHECK_EQ(pvrt_thread_join(chain[i], NULL), 0);
	for (int i = 0; i < CHAIN; i++)
		CHECK_EQ(chain_hits[i], 50);

	for (int i = 0; i < CLAIMERS; i++)
		CHECK_EQ(pvrt_thread_create(&claimers[i], NULL, claimer, (void *)(uintptr_t)i), 0);
	__atomic_store_n(&claim_go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < CLAIMERS; i++)
		CHECK_EQ(pvrt_thread_join(claimers[i], NULL), 0);

	struct foreign_arg fa = {0};
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, foreign_thread, &fa), 0);
	/* pthread_join would block worker 0's kernel thread (the primary runs on it) and with it
	 * the ULTs queued there: wait as a ULT instead. */
	for (int i = 0; i < 3; i++)
		while (pthread_tryjoin_np(th[i], NULL))
			pvrt_thread_sleep(100000);
	CHECK_EQ(fa.count, 600);

	struct pvrt_stats st;
	CHECK_EQ(pvrt_stats_get(&st), 0);
	printf("workers %u: created %llu switches %llu steals %llu parks %llu unparks %llu "
	       "polls_found %llu timer adds %llu arms %llu fires %llu\n",
	       pvrt_nworkers(), (unsigned long long)st.ults_created,
	       (unsigned long long)st.switches, (unsigned long long)st.steals,
	       (unsigned long long)st.parks, (unsigned long long)st.unparks,
	       (unsigned long long)st.polls_found, (unsigned long long)st.timer_adds,
	       (unsigned long long)st.timer_arms, (unsigned long long)st.timer_fires);
	/* Under an emulator that deschedules vCPUs, make sure it really did stop workers. */
	pvhint_t *h;
	if (!pvhint_default(&h) && pvhint_emu_mode(h)) {
		uint64_t desched = 0, stops = 0;
		for (unsigned v = 0; v < pvhint_nr_vcpus(h); v++) {
			struct pvhint_emu_stats es;
			if (!pvhint_emu_stats(h, v, &es)) {
				desched += es.desched;
				stops += es.stops;
			}
		}
		printf("emulator %s: %llu deschedules, %llu thread stops\n", pvhint_emu_mode(h),
		       (unsigned long long)desched, (unsigned long long)stops);
		if (!strcmp(pvhint_emu_mode(h), "slice") || !strcmp(pvhint_emu_mode(h), "noisy"))
			CHECK(desched > 0);
	}
	CHECK_EQ(pvrt_finalize(), 0);
	printf("ok\n");
	return 0;
}
