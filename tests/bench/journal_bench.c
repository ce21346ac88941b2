/*
 * journal_bench.c — replay of a 100k-record journal (JSON bodies of
 * ~200–500 bytes), in ns per record, from the memory backend and from LMDB; peer: SELECT of the same 100k rows (seq, kind,
 * id, body) from SQLite in the same run.
 *
 * usage: journal_bench [records]
 * Prints BENCH lines (tests/bench/bench.py runs it).
 */
#include "../../storage/storage.h"
#include "bench_body.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SID "4f2a9c1e-7b3d-4e8f-9a0b-1c2d3e4f5a6b"

struct sink {
	uint64_t n, bytes, kinds;
};

static int sink_cb(void *arg, const struct lr_journal_rec *r)
{
	struct sink *s = arg;
	s->n++;
	s->bytes += r->len + ((const unsigned char *)r->body)[r->len ? r->len - 1 : 0];
	s->kinds += (uint64_t)r->kind + r->id_len;
	return 0;
}

static void fail(const char *what, const struct lr_err *e)
{
	fprintf(stderr, "journal_bench: %s: %s\n", what, e ? e->msg : "");
	exit(1);
}

/* Fills the store; returns the bodies' total size. */
static void fill(struct lr_store *s, unsigned n, sqlite3 *db)
{
	struct lr_err e;
	struct lr_lease *l;
	struct lr_journal *j;
	if (lr_store_acquire(s, "sessions/" SID, &l, &e) || lr_journal_open(s, SID, l, &j, &e))
		fail("open", &e);
	sqlite3_stmt *ins = NULL;
	if (db) {
		sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE j (seq INTEGER PRIMARY KEY, "
				 "kind INTEGER, id TEXT, body BLOB); BEGIN", NULL, NULL, NULL);
		sqlite3_prepare_v2(db, "INSERT INTO j VALUES (?, ?, ?, ?)", -1, &ins, NULL);
	}
	char body[1024], id[32];
	rng = 12345;
	for (unsigned i = 1; i < n; i++) {
		size_t len = make_body(body, sizeof body, i, SID);
		snprintf(id, sizeof id, "ev-%08u", i);
		uint64_t seq;
		if (lr_journal_append(j, LR_JOURNAL_EVENT, id, body, len, &seq, NULL, &e))
			fail("append", &e);
		if (ins) {
			sqlite3_bind_int64(ins, 1, (sqlite3_int64)seq);
			sqlite3_bind_int(ins, 2, LR_JOURNAL_EVENT);
			sqlite3_bind_text(ins, 3, id, -1, SQLITE_STATIC);
			sqlite3_bind_blob(ins, 4, body, (int)len, SQLITE_STATIC);
			if (sqlite3_step(ins) != SQLITE_DONE)
				fail("sqlite insert", NULL);
			sqlite3_reset(ins);
		}
	}
	if (db) {
		sqlite3_finalize(ins);
		sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	}
	lr_journal_close(j);
	lr_store_release(l, &e);
}

static double replay_ns(struct lr_store *s, unsigned n)
{
	double best = 1e18;
	for (int run = 0; run < 5; run++) {
		struct sink k = { 0, 0, 0 };
		struct lr_err e;
		uint64_t t0 = lr_now_ns();
		if (lr_journal_replay(s, SID, 0, sink_cb, &k, &e))
			fail("replay", &e);
		double ns = (double)(lr_now_ns() - t0) / (double)k.n;
		if (k.n != n)
			fail("replay count", NULL);
		if (ns < best)
			best = ns;
	}
	return best;
}

static double sqlite_ns(sqlite3 *db, unsigned n)
{
	double best = 1e18;
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, "SELECT seq, kind, id, body FROM j WHERE seq >= ? ORDER BY seq",
			       -1, &st, NULL) != SQLITE_OK)
		fail("sqlite prepare", NULL);
	for (int run = 0; run < 5; run++) {
		struct sink k = { 0, 0, 0 };
		uint64_t t0 = lr_now_ns();
		sqlite3_bind_int64(st, 1, 1);
		while (sqlite3_step(st) == SQLITE_ROW) {
			const unsigned char *b = sqlite3_column_blob(st, 3);
			int len = sqlite3_column_bytes(st, 3);
			k.n++;
			k.bytes += (uint64_t)len + (len ? b[len - 1] : 0);
			k.kinds += (uint64_t)sqlite3_column_int(st, 1) +
				   (uint64_t)sqlite3_column_bytes(st, 2);
			(void)sqlite3_column_int64(st, 0);
			(void)sqlite3_column_text(st, 2);
		}
		sqlite3_reset(st);
		double ns = (double)(lr_now_ns() - t0) / (double)k.n;
		if (k.n != n - 1)
			fail("sqlite count", NULL);
		if (ns < best)
			best = ns;
	}
	sqlite3_finalize(st);
	return best;
}

static void line(const char *name, double v, double peer)
{
	printf("BENCH name=%s value=%.6g unit=ns/record peer=sqlite-select peer_value=%.6g "
	       "ratio=%.3f\n", name, v, peer, v / peer);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 100000; /* records, the fence included */
	char dir[] = "/tmp/journal-bench-XXXXXX";
	if (!mkdtemp(dir))
		fail("mkdtemp", NULL);
	char path[256];
	snprintf(path, sizeof path, "%s/peer.sqlite", dir);
	sqlite3 *db;
	if (sqlite3_open(path, &db) != SQLITE_OK)
		fail("sqlite open", NULL);

	struct lr_err e;
	struct lr_store *s;
	if (lr_store_memory_open(&s, &e))
		fail("memory", &e);
	fill(s, n, db);
	double peer = sqlite_ns(db, n);
	line("journal_replay_memory", replay_ns(s, n), peer);
	lr_store_close(s);

	{
		char root[300];
		snprintf(root, sizeof root, "%s/lmdb", dir);
		struct lr_lmdb_opts o = { .root = root, .no_sync = 1 };
		if (lr_store_lmdb_open(&o, &s, &e))
			fail("lmdb", &e);
		fill(s, n, NULL);
		line("journal_replay_lmdb", replay_ns(s, n), sqlite_ns(db, n));
		lr_store_close(s);
	}
	sqlite3_close(db);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "journal_bench: could not remove %s\n", dir);
	return 0;
}
