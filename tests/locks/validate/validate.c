/* SPDX-License-Identifier: MIT */
/* The harness of the lock validation programs: see validate.h. */
#include "validate.h"

long scale = 1;

/*
 * ---- fake hint page with random hints ----
 * Every field the locks read changes at random, with every valid bit set, so each
 * hint-dependent branch runs: the owner's vCPU preempted (spins cut short), the pCPU under a
 * vCPU idle or busy (wake-up choices), and the spinner's own steal time growing or still (the
 * short spin budget of a vCPU that shares its physical CPU, or the long one). Threads that are
 * not attached to an emulated vCPU read the record of the CPU they run on; all records change
 * alike, so which one does not matter.
 */
#define FAKE_VCPUS 8
static struct pvhint_record fake_rec[FAKE_VCPUS];
static pvhint_t fake = {.rec = fake_rec,
			.nr = FAKE_VCPUS,
			.valid =
			    PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE};
static int chaos_stop;
static long chaos_steal_bumps, chaos_idle_flips; /* written by the chaos thread only */

/*
 * Add 'delta' ns to a record's steal time with the writer protocol of pvhint_abi.h (the one
 * KVM and the emulator follow): version odd, steal, version even. This thread is the only
 * writer, so it may read its own fields relaxed.
 */
static void fake_add_steal(struct pvhint_record *r, uint64_t delta)
{
	uint32_t ver = __atomic_load_n(&r->version, __ATOMIC_RELAXED);
	uint64_t st = __atomic_load_n(&r->steal, __ATOMIC_RELAXED);
	/* Relaxed: the release store of steal below orders this odd version before it, so a
	 * reader that acquires the new steal sees the odd version (or later) on its re-check. */
	__atomic_store_n(&r->version, ver + 1, __ATOMIC_RELAXED);
	/* Release: see above. Monotonic: steal only grows. */
	__atomic_store_n(&r->steal, st + delta, __ATOMIC_RELEASE);
	/* Release: a reader that sees the even version also sees the new steal. */
	__atomic_store_n(&r->version, ver + 2, __ATOMIC_RELEASE);
}

static void *chaos(void *p)
{
	(void)p;
	unsigned seed = 12345;
	/* Until told to stop, and at least until the page changed both ways once: a short test
	 * still ran beside a changing page. */
	while (!__atomic_load_n(&chaos_stop, __ATOMIC_RELAXED) || !chaos_steal_bumps ||
	       !chaos_idle_flips) {
		for (int v = 0; v < FAKE_VCPUS; v++) {
			struct pvhint_record *r = &fake_rec[v];
			/* Relaxed (all three): hints, read with relaxed loads; no data depends
			 * on them. */
			__atomic_store_n(&r->preempted,
					 (uint8_t)(rand_r(&seed) % 3 == 0 ? PVHINT_PREEMPTED : 0),
					 __ATOMIC_RELAXED);
			uint8_t idle = (uint8_t)(rand_r(&seed) % 2);
			if (idle != __atomic_load_n(&r->is_idle, __ATOMIC_RELAXED))
				chaos_idle_flips++;
			__atomic_store_n(&r->is_idle, idle, __ATOMIC_RELAXED);
			/*
			 * Steal grows in random jumps (1 ns to ~4 ms) about every 13 ms per vCPU
			 * (1 in 64 rounds of 200 us): with the locks' 10 ms window, a spinner
			 * sees its vCPU's steal as recently grown about half of the time.
			 */
			if (rand_r(&seed) % 64 == 0) {
				fake_add_steal(r, 1 + (uint64_t)rand_r(&seed) % 4000000);
				chaos_steal_bumps++;
			}
		}
		usleep(200);
	}
	return NULL;
}

/* Under the emulator every worker thread sits on an emulated vCPU, so that in slice mode lock
 * holders really get stopped mid-section, as under a host. */
static pvhint_t *emu;
void *start(void *p)
{
	struct start *s = p;
	if (emu && pvhint_emu_attach_next(emu))
		FAIL("pvhint_emu_attach_next");
	/* All threads of a run start together, so they contend from the first iteration
	 * instead of the first ones finishing before the last are created. */
	if (s->gate)
		pthread_barrier_wait(s->gate);
	void *r = s->fn((void *)s->id);
	if (emu)
		pvhint_emu_detach(emu);
	return r;
}

void run(void *(*fn)(void *), int n)
{
	pthread_t t[16];
	struct start s[16];
	pthread_barrier_t gate;
	if (n > 16 || pthread_barrier_init(&gate, NULL, (unsigned)n))
		FAIL("run: %d threads", n);
	for (long i = 0; i < n; i++) {
		s[i] = (struct start){fn, i, &gate};
		if (pthread_create(&t[i], NULL, start, &s[i]))
			FAIL("pthread_create");
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&gate);
}

struct pvrt_lock_stats stats_since(enum pvrt_lock_class c, const struct pvrt_lock_stats *before)
{
	struct pvrt_lock_stats now;
	pvrt_locks_stats_get(c, &now);
	return (struct pvrt_lock_stats){
	    .acquisitions = now.acquisitions - before->acquisitions,
	    .contended = now.contended - before->contended,
	    .spin_cut = now.spin_cut - before->spin_cut,
	    .parks = now.parks - before->parks,
	    .handoffs = now.handoffs - before->handoffs,
	    .yields = now.yields - before->yields,
	};
}

static bool use_fake;
static pthread_t chaos_thread;

void validate_begin(int argc, char **argv)
{
	if (argc > 1) {
		char *end;
		scale = strtol(argv[1], &end, 10);
		if (*end || scale < 1)
			FAIL("bad SCALE '%s'", argv[1]);
	}
	pvrt_locks_stats_enable(true);
	pvhint_t *def = NULL;
	int r = pvhint_default(&def);
	printf("default hint source: %s%s\n", def ? pvhint_source_name(def) : "?",
	       r ? " (open failed)" : "");
	/* The environment asked for a source: make sure we really got it. */
	const char *want = getenv("PVRT_HINTS");
	if (want && strcmp(want, "auto") && (!def || strcmp(pvhint_source_name(def), want)))
		FAIL("PVRT_HINTS=%s but the default handle is %s", want,
		     def ? pvhint_source_name(def) : "none");
	use_fake = !want || strcmp(want, "emu");
	if (!use_fake)
		emu = def;
	if (use_fake) {
		pvrt_locks_set_hints(&fake);
		if (pthread_create(&chaos_thread, NULL, chaos, NULL))
			FAIL("pthread_create (chaos)");
	}
}

void validate_end(void)
{
	if (use_fake) {
		__atomic_store_n(&chaos_stop, 1, __ATOMIC_RELAXED);
		pthread_join(chaos_thread, NULL);
		/* The chaos thread ran all along (joined: its counters are ours to read). */
		printf("fake hints: %ld steal jumps, %ld is_idle flips\n", chaos_steal_bumps,
		       chaos_idle_flips);
	}
	for (int c = 0; c < PVRT_LOCK_NCLASSES; c++) {
		struct pvrt_lock_stats st;
		pvrt_locks_stats_get(c, &st);
		if (!st.acquisitions)
			continue;
		printf(
		    "%-8s acq %llu contended %llu spin-cut %llu parks %llu hand-offs %llu yields "
		    "%llu\n",
		    pvrt_lock_class_name(c), (unsigned long long)st.acquisitions,
		    (unsigned long long)st.contended, (unsigned long long)st.spin_cut,
		    (unsigned long long)st.parks, (unsigned long long)st.handoffs,
		    (unsigned long long)st.yields);
	}
}
