/* SPDX-License-Identifier: MIT */
/*
 * sqlite3 with several threads: T threads share one in-memory database connection in
 * serialized mode (every call takes the connection's pthread mutex) and each runs N
 * transactions of an insert plus a lookup. Prints a deterministic result line (rows, key sum)
 * and the throughput; run it with and without the preload to compare (bench/locks/realprogs.sh,
 * tests/locks/realprog.sh).
 *
 * usage: sqlite_threads [THREADS] [TRANSACTIONS-PER-THREAD]
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static sqlite3 *db;
static long per_thread = 20000;

static void die(const char *what)
{
	fprintf(stderr, "sqlite_threads: %s: %s\n", what, db ? sqlite3_errmsg(db) : "?");
	exit(1);
}

static void *worker(void *p)
{
	long id = (long)p;
	sqlite3_stmt *ins, *sel;
	if (sqlite3_prepare_v2(db, "INSERT INTO t(k, v) VALUES (?, ?)", -1, &ins, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT v FROM t WHERE k = ?", -1, &sel, NULL))
		die("prepare");
	for (long i = 0; i < per_thread; i++) {
		long k = id * per_thread + i;
		sqlite3_bind_int64(ins, 1, k);
		sqlite3_bind_int64(ins, 2, k * 7);
		if (sqlite3_step(ins) != SQLITE_DONE)
			die("insert");
		sqlite3_reset(ins);
		sqlite3_bind_int64(sel, 1, k);
		if (sqlite3_step(sel) != SQLITE_ROW || sqlite3_column_int64(sel, 0) != k * 7)
			die("lookup");
		sqlite3_reset(sel);
	}
	sqlite3_finalize(ins);
	sqlite3_finalize(sel);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	if (argc > 2)
		per_thread = atol(argv[2]);
	if (threads < 1 || threads > 256 || per_thread < 1) {
		fprintf(stderr, "usage: sqlite_threads [THREADS] [TRANSACTIONS-PER-THREAD]\n");
		return 2;
	}
	if (sqlite3_open_v2(":memory:", &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
			    NULL))
		die("open");
	if (sqlite3_exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v INTEGER)", 0, 0, 0))
		die("create");
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	pthread_t t[256];
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	sqlite3_stmt *q;
	if (sqlite3_prepare_v2(db, "SELECT count(*), sum(k), sum(v) FROM t", -1, &q, NULL) ||
	    sqlite3_step(q) != SQLITE_ROW)
		die("check");
	printf("result: rows=%lld ksum=%lld vsum=%lld\n", sqlite3_column_int64(q, 0),
	       sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2));
	sqlite3_finalize(q);
	sqlite3_close(db);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	printf("throughput: %.0f transactions/s\n", (double)threads * (double)per_thread / s);
	return 0;
}
