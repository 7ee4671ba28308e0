/* SPDX-License-Identifier: MIT */
/*
 * Fine-grained locks shaped like PARSEC's fluidanimate: a ring of cells, each with its own
 * mutex, cut into one contiguous block per thread (fluidanimate partitions its grid the same
 * way). Every step, each thread computes a contribution from each of its cells (from the
 * previous step's values) and adds it into that cell and its neighbours, each add under the
 * target cell's mutex: adds inside the block take uncontended locks, adds across a block's
 * edge take locks the neighbouring thread takes too. Phases are separated by
 * pthread_barrier_wait, as in fluidanimate.
 *
 * (An earlier version dealt the cells round robin, so that every lock and every value's cache
 * line was shared by all threads. That shape runs slower the more its threads overlap: two
 * threads with glibc's mutexes took 0.30 s behind a spinning barrier, which starts them in
 * lockstep, and 0.18 s behind a parking one, whose wake-up latency staggers them so that they
 * hardly run at once; any waiting policy that keeps threads running loses there, and
 * fluidanimate does not have that shape.)
 *
 * usage: parsec_fluidanimate THREADS [CELLS] [STEPS]
 * Check: the same steps computed by one thread without locks (the adds commute, so the result
 * does not depend on the order the threads took the locks in).
 */
#include "parsec.h"

#define REACH 2 /* neighbours on each side */

struct cell {
	pthread_mutex_t lock;
	uint64_t acc; /* this step's sum of contributions, under 'lock' */
};

static long nthreads, ncells, steps;
static struct cell *cells;
static uint64_t *val;
static pthread_barrier_t bar;

static inline uint64_t contribution(uint64_t v, long s, int d)
{
	uint64_t x = v + (uint64_t)s * 0x9E37ull + (uint64_t)(d + REACH);
	for (int k = 0; k < 4; k++)
		x = x * 0x5851F42D4C957F2Dull + (x >> 31);
	return x;
}

static void *worker(void *arg)
{
	long t = (long)arg, lo = t * ncells / nthreads, hi = (t + 1) * ncells / nthreads;
	for (long s = 0; s < steps; s++) {
		for (long i = lo; i < hi; i++) {
			for (int d = -REACH; d <= REACH; d++) {
				long j = (i + d + ncells) % ncells;
				uint64_t c = contribution(val[i], s, d);
				pthread_mutex_lock(&cells[j].lock);
				cells[j].acc += c;
				pthread_mutex_unlock(&cells[j].lock);
			}
		}
		pthread_barrier_wait(&bar);
		for (long i = lo; i < hi; i++) {
			val[i] = ps_mix(cells[i].acc);
			cells[i].acc = 0;
		}
		pthread_barrier_wait(&bar);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *usage = "THREADS [CELLS] [STEPS]";
	if (argc < 2) {
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		return 2;
	}
	nthreads = ps_arg(argc, argv, 1, 2, usage);
	ncells = ps_arg(argc, argv, 2, 512, usage);
	steps = ps_arg(argc, argv, 3, 1000, usage);
	if (ncells < 2 * REACH + 1)
		ncells = 2 * REACH + 1;
	cells = calloc((size_t)ncells, sizeof(*cells));
	val = calloc((size_t)ncells, sizeof(*val));
	uint64_t *v1 = calloc((size_t)ncells, sizeof(*v1)), *acc1 = calloc((size_t)ncells, 8);
	if (!cells || !val || !v1 || !acc1)
		ps_die_errno("calloc", 12);
	for (long i = 0; i < ncells; i++) {
		pthread_mutex_init(&cells[i].lock, NULL);
		val[i] = v1[i] = ps_mix((uint64_t)i * 7);
	}
	pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
	double t0 = ps_now();
	ps_run_threads(nthreads, worker);
	double el = ps_now() - t0;

	for (long s = 0; s < steps; s++) {
		for (long i = 0; i < ncells; i++)
			for (int d = -REACH; d <= REACH; d++)
				acc1[(i + d + ncells) % ncells] += contribution(v1[i], s, d);
		for (long i = 0; i < ncells; i++) {
			v1[i] = ps_mix(acc1[i]);
			acc1[i] = 0;
		}
	}
	uint64_t ck = 0, want = 0;
	for (long i = 0; i < ncells; i++) {
		ck = ps_mix(ck ^ val[i]);
		want = ps_mix(want ^ v1[i]);
	}
	ps_check_or_die("cells", ck, want);
	for (long i = 0; i < ncells; i++)
		pthread_mutex_destroy(&cells[i].lock);
	pthread_barrier_destroy(&bar);
	ps_report(ck, el);
	return 0;
}
