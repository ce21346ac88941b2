/*
 * bench_appends.h — durable 1 KiB appends, each session a thread appending
 * to its own ledger, through the lr_store API or through SQLite (WAL,
 * synchronous=FULL, a transaction per record), the peer. Shared by
 * store_bench.c and nats_bench.c; BENCH_PROG names the program in errors.
 */
#ifndef LR_BENCH_APPENDS_H
#define LR_BENCH_APPENDS_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../storage/storage.h"

#define REC 1024

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct worker {
	int id, n, errors;
	struct lr_store *s;
	const char *db;
	pthread_barrier_t *start;
};

static void *store_worker(void *arg)
{
	struct worker *w = arg;
	char name[32], rec[REC];
	struct lr_err e;
	snprintf(name, sizeof name, "sessions/%d", w->id);
	memset(rec, 'x', sizeof rec);
	pthread_barrier_wait(w->start);
	for (int i = 0; i < w->n; i++) {
		snprintf(rec, 32, "%d/%d", w->id, i);
		if (lr_store_append(w->s, name, (uint64_t)i, rec, sizeof rec, &e)) {
			fprintf(stderr, BENCH_PROG ": %s\n", e.msg);
			w->errors++;
			break;
		}
	}
	return NULL;
}

static void *sqlite_worker(void *arg)
{
	struct worker *w = arg;
	sqlite3 *db;
	sqlite3_stmt *st = NULL;
	char rec[REC];
	memset(rec, 'x', sizeof rec);
	if (sqlite3_open(w->db, &db) != SQLITE_OK) {
		w->errors++;
		pthread_barrier_wait(w->start);
		return NULL;
	}
	sqlite3_busy_timeout(db, 60000);
	sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
	if (sqlite3_prepare_v2(db, "INSERT INTO rec(ledger, seq, data) VALUES (?, ?, ?)", -1, &st,
			       NULL) != SQLITE_OK)
		w->errors++;
	pthread_barrier_wait(w->start);
	for (int i = 0; i < w->n && st; i++) {
		snprintf(rec, 32, "%d/%d", w->id, i);
		sqlite3_bind_int(st, 1, w->id);
		sqlite3_bind_int(st, 2, i + 1);
		sqlite3_bind_blob(st, 3, rec, sizeof rec, SQLITE_STATIC);
		int rc = sqlite3_step(st); /* autocommit: one transaction per record */
		sqlite3_reset(st);
		if (rc != SQLITE_DONE) {
			fprintf(stderr, BENCH_PROG ": sqlite: %s\n", sqlite3_errmsg(db));
			w->errors++;
			break;
		}
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return NULL;
}

/* Runs threads workers of n appends; returns µs of wall time per append
 * (exits on any failed append). */
static double run(int threads, int n, void *(*fn)(void *), struct lr_store *s, const char *db)
{
	struct worker *w = calloc((size_t)threads, sizeof *w);
	pthread_t *th = calloc((size_t)threads, sizeof *th);
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){ i, n, 0, s, db, &start };
		pthread_create(&th[i], NULL, fn, &w[i]);
	}
	pthread_barrier_wait(&start);
	double t0 = now();
	int errors = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		errors += w[i].errors;
	}
	double dt = now() - t0;
	pthread_barrier_destroy(&start);
	free(w);
	free(th);
	if (errors) {
		fprintf(stderr, BENCH_PROG ": %d errors\n", errors);
		exit(1);
	}
	return dt * 1e6 / ((double)threads * n);
}

/* The SQLite peer in DIR/sqlite-THREADS.db: µs per append. */
static double sqlite_appends(const char *dir, int threads, int n)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/sqlite-%d.db", dir, threads);
	sqlite3 *db;
	if (sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
			     "CREATE TABLE rec(ledger INTEGER, seq INTEGER, data BLOB, "
			     "PRIMARY KEY(ledger, seq))", NULL, NULL, NULL) != SQLITE_OK) {
		fprintf(stderr, BENCH_PROG ": sqlite setup: %s\n", sqlite3_errmsg(db));
		exit(1);
	}
	double us = run(threads, n, sqlite_worker, NULL, path);
	sqlite3_close(db);
	return us;
}

#endif
