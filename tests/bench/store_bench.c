/*
 * store_bench.c — durable 1 KiB appends with 1, 16 and 256 concurrent
 * sessions: the LMDB backend (lr_store_append, which returns once the
 * group commit is fsynced) against SQLite (WAL, synchronous=FULL, one
 * transaction per record, one connection per thread, busy timeout). Each
 * session is a thread appending to its own ledger / inserting its own rows.
 *
 *   store_bench DIR [SESSIONS [lmdb|sqlite]]
 *                          DIR on the disk under test (not tmpfs); SESSIONS
 *                          runs that case alone, and lmdb or sqlite one side
 *                          of it (to count its syncs with strace -c -f)
 *
 * Prints one BENCH line per session count: microseconds of wall time per
 * append across all threads (a cost: lower is better).
 */
#define BENCH_PROG "store_bench"
#include "bench_appends.h"

static double bench_lmdb(const char *dir, int threads, int n)
{
	char root[4096];
	snprintf(root, sizeof root, "%s/lmdb-%d", dir, threads);
	struct lr_lmdb_opts o = { root, 0, 0, 0, NULL };
	struct lr_store *s;
	struct lr_err e;
	if (lr_store_lmdb_open(&o, &s, &e)) {
		fprintf(stderr, "store_bench: %s\n", e.msg);
		exit(1);
	}
	double us = run(threads, n, store_worker, s, NULL);
	lr_store_close(s);
	return us;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: store_bench DIR [SESSIONS [lmdb|sqlite]]\n");
		return 2;
	}
	int only = argc > 2 ? atoi(argv[2]) : 0;
	const char *side = argc > 3 ? argv[3] : "";
	static const struct {
		int threads, n;
	} cases[] = { { 1, 300 }, { 16, 40 }, { 256, 8 } };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int t = cases[i].threads, n = cases[i].n;
		if (only && t != only)
			continue;
		double ours = strcmp(side, "sqlite") ? bench_lmdb(argv[1], t, n) : 0;
		double peer = strcmp(side, "lmdb") ? sqlite_appends(argv[1], t, n) : 0;
		if (*side) {
			printf("%s %d sessions: %.6g us per append\n", side, t, ours + peer);
			continue;
		}
		printf("BENCH name=durable_append_1k_%dsessions value=%.6g unit=us peer=sqlite_wal_full "
		       "peer_value=%.6g ratio=%.3f\n", t, ours, peer, ours / peer);
		fflush(stdout);
	}
	return 0;
}
