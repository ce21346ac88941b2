/*
 * nats_bench.c — the NATS JetStream backend against LMDB (and SQLite) in
 * the same run, on the same disk, through the same lr_store API. Starts
 * its own nats-server -js (store under DIR) on a free loopback port.
 *
 *   nats_bench DIR        DIR on the disk under test (not tmpfs)
 *
 * Prints BENCH lines (costs: lower is better):
 *   nats_durable_append_1k_{1,256}sessions  µs of wall time per acknowledged
 *       1 KiB append, each session a thread appending to its own ledger
 *       (as store_bench.c): peers LMDB (group commit, fsync) and SQLite
 *       (WAL, synchronous=FULL, a transaction per record)
 *   nats_restore_10k  ms to reopen a 10k-record session: acquire its lease,
 *       lr_journal_open (the fence, the whole ledger read and decoded into
 *       the idempotency index), lr_journal_replay (every record decoded
 *       and handed over, as restore folds them); peer LMDB
 *   nats_blob_put_200m / nats_blob_get_200m  seconds to store a 200 MiB
 *       file (streamed from its fd, hashed, chunked) and to read it back
 *       into a file (verified); peer LMDB
 *
 * nats-server 2.9 acknowledges a message once it is in its store files
 * (flushed to the OS, fsync every 2 minutes by default; 2.9 has no
 * per-message sync setting): durable against a crash of the server
 * process, not of the machine, unlike the LMDB and SQLite peers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../storage/storage.h"

#define BENCH_PROG "nats_bench"
#include "bench_appends.h"
#include "bench_body.h"

#define RESTORE_RECORDS 10000
#define BLOB_BYTES ((uint64_t)200 << 20)

static char dir[4096], url[128];
static pid_t server = -1;

static void fail(const char *what, const struct lr_err *e)
{
	fprintf(stderr, "nats_bench: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
	if (server > 0)
		kill(server, SIGTERM);
	exit(1);
}

static void line(const char *name, double v, const char *unit, const char *peer, double pv)
{
	printf("BENCH name=%s value=%.6g unit=%s peer=%s peer_value=%.6g ratio=%.3f\n", name, v,
	       unit, peer, pv, v / pv);
	fflush(stdout);
}

/* ---- the server ---- */

static void server_start(void)
{
	char conf[4200], ports[4200];
	snprintf(conf, sizeof conf, "%s/server.conf", dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		fail("cannot write the server configuration", NULL);
	fprintf(f, "listen: \"127.0.0.1:-1\"\nmax_payload: 8MB\n"
		   "jetstream { store_dir: \"%s/js\", max_file_store: 4GB }\n", dir);
	fclose(f);
	server = fork();
	if (server == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int null = open("/dev/null", O_RDWR);
		dup2(null, 1);
		dup2(null, 2);
		execlp("nats-server", "nats-server", "-c", conf, "-js", "--ports_file_dir", dir,
		       (char *)NULL);
		_exit(127);
	}
	snprintf(ports, sizeof ports, "%s/nats-server_%d.ports", dir, (int)server);
	for (int i = 0; i < 200; i++) {
		FILE *pf = fopen(ports, "r");
		if (pf) {
			char buf[1024];
			size_t k = fread(buf, 1, sizeof buf - 1, pf);
			fclose(pf);
			buf[k] = 0;
			int port = 0;
			char *u = strstr(buf, "nats://");
			if (u && sscanf(u, "nats://127.0.0.1:%d", &port) == 1) {
				snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
				return;
			}
		}
		usleep(50000);
	}
	fail("nats-server did not start", NULL);
}

static struct lr_store *open_nats(const char *ns)
{
	struct lr_nats_opts o = { 0 };
	o.url = url;
	o.ns = ns;
	o.timeout_ms = 30000;
	struct lr_store *s;
	struct lr_err e;
	if (lr_store_nats_open(&o, &s, &e))
		fail("nats", &e);
	return s;
}

static struct lr_store *open_lmdb(const char *name, int no_sync)
{
	char root[4200];
	snprintf(root, sizeof root, "%s/%s", dir, name);
	struct lr_lmdb_opts o = { root, 0, 0, no_sync, NULL };
	struct lr_store *s;
	struct lr_err e;
	if (lr_store_lmdb_open(&o, &s, &e))
		fail("lmdb", &e);
	return s;
}

/* ---- durable appends (bench_appends.h, as store_bench.c) ---- */

static void bench_appends(int threads, int n)
{
	char ns[32], name[64];
	snprintf(ns, sizeof ns, "append%d", threads);
	struct lr_store *s = open_nats(ns);
	double ours = run(threads, n, store_worker, s, NULL);
	lr_store_close(s);
	snprintf(name, sizeof name, "lmdb-%d", threads);
	s = open_lmdb(name, 0);
	double lmdb = run(threads, n, store_worker, s, NULL);
	lr_store_close(s);
	double sq = sqlite_appends(dir, threads, n);
	snprintf(name, sizeof name, "nats_durable_append_1k_%dsessions", threads);
	line(name, ours, "us", "lmdb", lmdb);
	line(name, ours, "us", "sqlite_wal_full", sq);
}

/* ---- restore of a 10k-record session ---- */

struct fold {
	uint64_t n, bytes;
};

static int fold_cb(void *arg, const struct lr_journal_rec *r)
{
	struct fold *f = arg;
	f->n++;
	f->bytes += r->len + r->id_len;
	return 0;
}

/* 10k records through the journal (a fence and 9999 events). */
static void fill(struct lr_store *s, const char *sid)
{
	char name[64], body[1024], id[32];
	snprintf(name, sizeof name, "sessions/%s", sid);
	struct lr_lease *l;
	struct lr_journal *j;
	struct lr_err e;
	if (lr_store_acquire(s, name, &l, &e) || lr_journal_open(s, sid, l, &j, &e))
		fail("fill", &e);
	rng = 12345;
	for (unsigned i = 1; i < RESTORE_RECORDS; i++) {
		size_t len = make_body(body, sizeof body, i, sid);
		snprintf(id, sizeof id, "e1.%u", i);
		if (lr_journal_append(j, LR_JOURNAL_EVENT, id, body, len, NULL, NULL, &e))
			fail("fill append", &e);
	}
	lr_journal_close(j);
	lr_store_release(l, &e);
}

/* Best of 3: lease, open (fence + index), replay everything, close, release. */
static double restore_ms(struct lr_store *s, const char *sid)
{
	char name[64];
	snprintf(name, sizeof name, "sessions/%s", sid);
	double best = 1e18;
	for (int run = 0; run < 3; run++) {
		struct lr_lease *l;
		struct lr_journal *j;
		struct lr_err e;
		struct fold f = { 0, 0 };
		double t0 = now();
		if (lr_store_acquire(s, name, &l, &e) || lr_journal_open(s, sid, l, &j, &e) ||
		    lr_journal_replay(s, sid, 0, fold_cb, &f, &e))
			fail("restore", &e);
		lr_journal_close(j);
		lr_store_release(l, &e);
		double ms = (now() - t0) * 1e3;
		if (f.n < RESTORE_RECORDS)
			fail("restore: records missing", NULL);
		if (ms < best)
			best = ms;
	}
	return best;
}

static void bench_restore(void)
{
	char sid[37];
	if (lr_journal_new_id(sid))
		fail("no session id", NULL);
	struct lr_store *n = open_nats("restore");
	/* LMDB filled without fsync (the appends are not what is measured here) */
	struct lr_store *m = open_lmdb("lmdb-restore", 1);
	fill(n, sid);
	fill(m, sid);
	line("nats_restore_10k", restore_ms(n, sid), "ms", "lmdb", restore_ms(m, sid));
	lr_store_close(n);
	lr_store_close(m);
}

/* ---- a 200 MiB blob ---- */

static void make_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		fail("cannot create the blob source", NULL);
	static uint64_t buf[1 << 17]; /* 1 MiB */
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (uint64_t done = 0; done < BLOB_BYTES; done += sizeof buf) {
		for (size_t i = 0; i < sizeof buf / 8; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = x;
		}
		if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
			fail("cannot write the blob source", NULL);
	}
	fsync(fd);
	close(fd);
}

static void blob_times(struct lr_store *s, const char *src, const char *dst, double *put,
		       double *get)
{
	struct lr_err e;
	int fd = open(src, O_RDONLY | O_CLOEXEC);
	double t0 = now();
	if (fd < 0 || lr_store_blob_put_fd(s, "bench/blob", fd, BLOB_BYTES, &e))
		fail("blob put", &e);
	*put = now() - t0;
	close(fd);
	fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint64_t len = 0;
	t0 = now();
	if (fd < 0 || lr_store_blob_get_fd(s, "bench/blob", fd, &len, &e))
		fail("blob get", &e);
	*get = now() - t0;
	close(fd);
	if (len != BLOB_BYTES)
		fail("blob get: wrong size", NULL);
	unlink(dst);
}

static void bench_blob(void)
{
	char src[4200], dst[4200];
	snprintf(src, sizeof src, "%s/blob.src", dir);
	snprintf(dst, sizeof dst, "%s/blob.out", dir);
	make_file(src);
	double nput, nget, mput, mget;
	struct lr_store *s = open_nats("blob");
	blob_times(s, src, dst, &nput, &nget);
	lr_store_close(s);
	s = open_lmdb("lmdb-blob", 0);
	blob_times(s, src, dst, &mput, &mget);
	lr_store_close(s);
	unlink(src);
	line("nats_blob_put_200m", nput, "s", "lmdb", mput);
	line("nats_blob_get_200m", nget, "s", "lmdb", mget);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: nats_bench DIR\n");
		return 2;
	}
	if (system("command -v nats-server >/dev/null 2>&1") != 0) {
		fprintf(stderr, "nats_bench: nats-server is not installed: skipped\n");
		return 0;
	}
	snprintf(dir, sizeof dir, "%s", argv[1]);
	server_start();
	bench_appends(1, 300);
	bench_appends(256, 8);
	bench_restore();
	bench_blob();
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	return 0;
}
