/* SPDX-License-Identifier: MIT */
/*
 * An MPI program whose ranks run under pvrt-run --mn (tests/mn/mpi.sh): point-to-point
 * messages in a ring, MPI_Allreduce, and pthreads inside each rank (MPI_THREAD_MULTIPLE when
 * the library provides it: every thread exchanges its own messages with the other rank, tagged
 * by thread; FUNNELED otherwise: threads compute and the main thread communicates). Rank 0
 * prints "mn_mpi: ok RANKS LEVEL SUM".
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NT     4
#define ROUNDS 50

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "mn_mpi: %s:%d: %s\n", __FILE__, __LINE__, #c);            \
			MPI_Abort(MPI_COMM_WORLD, 1);                                              \
		}                                                                                  \
	} while (0)

static int rank, size, multiple;
static long partial[NT];

static void *thread(void *arg)
{
	int t = (int)(long)arg;
	long s = 0;
	for (long i = 0; i < 200000; i++)
		s += (i * (t + 1) + rank) % 7;
	partial[t] = s;
	if (multiple) {
		/* Each thread talks to the same thread of the neighbour ranks (its own tag). */
		int to = (rank + 1) % size, from = (rank + size - 1) % size;
		for (int r = 0; r < ROUNDS; r++) {
			long out = (long)rank * 1000000 + t * 1000 + r, in = -1;
			CHECK(MPI_Sendrecv(&out, 1, MPI_LONG, to, t, &in, 1, MPI_LONG, from, t,
					   MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
			CHECK(in == (long)from * 1000000 + t * 1000 + r);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	CHECK(provided >= MPI_THREAD_FUNNELED);
	multiple = provided >= MPI_THREAD_MULTIPLE;

	/* A token around the ring, incremented by every rank. */
	for (int r = 0; r < ROUNDS; r++) {
		long tok = r;
		if (rank == 0) {
			MPI_Send(&tok, 1, MPI_LONG, 1 % size, 0, MPI_COMM_WORLD);
			MPI_Recv(&tok, 1, MPI_LONG, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			CHECK(tok == r + size - 1);
		} else {
			MPI_Recv(&tok, 1, MPI_LONG, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			tok++;
			MPI_Send(&tok, 1, MPI_LONG, (rank + 1) % size, 0, MPI_COMM_WORLD);
		}
	}

	pthread_t t[NT];
	for (long i = 0; i < NT; i++)
		CHECK(pthread_create(&t[i], NULL, thread, (void *)i) == 0);
	for (int i = 0; i < NT; i++)
		CHECK(pthread_join(t[i], NULL) == 0);

	/* The threads' sums, reduced over the ranks, against the same sums computed here. */
	long mine = 0, all = 0, want = 0;
	for (int i = 0; i < NT; i++)
		mine += partial[i];
	CHECK(MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
	for (int r = 0; r < size; r++)
		for (int tt = 0; tt < NT; tt++)
			for (long i = 0; i < 200000; i++)
				want += (i * (tt + 1) + r) % 7;
	CHECK(all == want);
	if (rank == 0)
		printf("mn_mpi: ok %d %s %ld\n", size, multiple ? "multiple" : "funneled", all);
	MPI_Finalize();
	return 0;
}
