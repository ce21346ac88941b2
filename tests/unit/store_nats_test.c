/*
 * store_nats_test.c — the conformance suite on NATS JetStream, against a
 * real nats-server this test starts on a free loopback port with a
 * temporary store (and stops), each case in its own namespace; then what
 * only NATS has: embedded mode (owning a server, refusing a second owner),
 * a holder that cannot renew fences itself, credentials kept out of
 * messages. Skips (one "skip" TAP line) when nats-server is not installed.
 * Re-executes itself (argv[1] = "holder") for the lease holder process.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "test.h"
#include "store_conformance.h"

#define TTL_MS 1500

static char base[256];
static char url[128];
static int server_pid = -1;
static int cases;
static char cur_ns[32];

static int nats_open_ns(const char *ns, int64_t ttl, struct lr_store **out, struct lr_err *e)
{
	struct lr_nats_opts o = { 0 };
	o.url = url;
	o.ns = ns;
	o.lease_ttl_ms = ttl;
	return lr_store_nats_open(&o, out, e);
}

static int n_open(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	snprintf(cur_ns, sizeof cur_ns, "c%d", cases++);
	return nats_open_ns(cur_ns, TTL_MS, out, e);
}

static int n_second(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	return nats_open_ns(cur_ns, TTL_MS, out, e);
}

static int holder_main(const char *u, const char *ns, const char *name)
{
	snprintf(url, sizeof url, "%s", u);
	struct lr_store *s;
	struct lr_err e;
	if (nats_open_ns(ns, TTL_MS, &s, &e)) {
		fprintf(stderr, "holder: %s\n", e.msg);
		return 1;
	}
	struct lr_lease *l;
	if (lr_store_acquire(s, name, &l, &e)) {
		fprintf(stderr, "holder: %s\n", e.msg);
		return 1;
	}
	printf("%llu\n", (unsigned long long)l->epoch);
	fflush(stdout);
	for (;;)
		pause();
}

static int n_spawn_holder(void *ctx, const char *name, uint64_t *epoch, int *pid)
{
	(void)ctx;
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	*pid = fork();
	if (*pid == 0) {
		dup2(p[1], 1);
		execl("/proc/self/exe", "store_nats_test", "holder", url, cur_ns, name, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char buf[64] = { 0 };
	ssize_t n = read(p[0], buf, sizeof buf - 1);
	close(p[0]);
	if (n <= 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		*pid = -1;
		return -EIO;
	}
	*epoch = strtoull(buf, NULL, 10);
	return 0;
}

/* Starts nats-server -js on 127.0.0.1 (a port it picks) storing under dir; fills url. */
static int start_server(const char *dir)
{
	char conf[512], ports[512];
	snprintf(conf, sizeof conf, "%s/server.conf", dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		return -1;
	fprintf(f, "listen: \"127.0.0.1:-1\"\nmax_payload: 8MB\n"
		   "jetstream { store_dir: \"%s/js\" }\n", dir);
	fclose(f);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	char *argv[] = { "nats-server", "-c", conf, "-js", "--ports_file_dir", (char *)dir, NULL };
	/* SIGKILL when the test ends: a crashed test leaves no server behind */
	struct lr_spawn_opts so = { .file = "nats-server", .argv = argv, .fd = { -1, null, null },
				    .pdeathsig = SIGKILL };
	int rc = lr_spawn(&so, &server_pid);
	close(null);
	if (rc)
		return -1;
	snprintf(ports, sizeof ports, "%s/nats-server_%d.ports", dir, server_pid);
	for (int i = 0; i < 200; i++) {
		FILE *pf = fopen(ports, "r");
		if (pf) {
			char buf[1024];
			size_t k = fread(buf, 1, sizeof buf - 1, pf);
			fclose(pf);
			buf[k] = 0;
			char *u = strstr(buf, "nats://");
			int port = 0;
			if (u && sscanf(u, "nats://127.0.0.1:%d", &port) == 1) {
				snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
				return 0;
			}
		}
		usleep(50000);
	}
	return -1;
}

static void stop_server(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGTERM);
		waitpid(server_pid, NULL, 0);
		server_pid = -1;
	}
}

/* Embedded mode: owns its server, refuses a second owner, data survives a restart. */
TEST(embedded_owns_and_refuses_a_second_owner)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/embedded", base);
	struct lr_nats_opts o = { 0 };
	o.embedded_dir = dir;
	struct lr_store *s = NULL, *s2 = NULL;
	struct lr_err e;
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), 0);
	if (!s) {
		fprintf(stderr, "embedded: %s\n", e.msg);
		return;
	}
	CHECK_EQ_INT(conf_append_str(s, "sessions/e", 0, "one"), 0);
	CHECK_EQ_INT(lr_store_nats_open(&o, &s2, &e), -EBUSY);
	CHECK(s2 == NULL);
	CHECK(strstr(e.msg, "owned by another process") != NULL);
	lr_store_close(s);
	/* stopped: nothing listens in the ports file any more; a new owner starts it again */
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), 0);
	if (!s)
		return;
	CHECK_EQ_INT(conf_tip(s, "sessions/e"), 1);
	CHECK_EQ_INT(conf_append_str(s, "sessions/e", 1, "two"), 0);
	lr_store_close(s);
	/* a relative directory and both modes at once are refused */
	o.embedded_dir = "rel/dir";
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), -EINVAL);
	o.embedded_dir = dir;
	o.url = url;
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), -EINVAL);
	CHECK(strstr(e.msg, "exactly one") != NULL);
	/* no such server program: said at once (the spawn's own error), not after a wait */
	o.url = NULL;
	o.server_bin = "luarig-no-such-nats-server";
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), LR_EUNAVAILABLE);
	CHECK(s == NULL);
	CHECK(strstr(e.msg, "cannot start 'luarig-no-such-nats-server': No such file") != NULL);
}

static int lost_calls;
static void on_lost(struct lr_lease *l, void *arg)
{
	(void)l;
	(void)arg;
	__atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

/* The server paused past the TTL: the holder cannot renew and fences itself. */
TEST(holder_that_cannot_renew_fences_itself)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	struct lr_nats_opts o = { 0 };
	o.url = url;
	o.ns = "fence";
	o.lease_ttl_ms = 1000;
	o.timeout_ms = 300;
	CHECK_EQ_INT(lr_store_nats_open(&o, &s, &e), 0);
	if (!s)
		return;
	struct lr_lease *l = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/f", &l, &e), 0);
	if (!l) {
		lr_store_close(s);
		return;
	}
	l->on_lost = on_lost;
	lost_calls = 0;
	/* renewals keep it alive well past the TTL */
	usleep(2500 * 1000);
	CHECK_EQ_INT(l->lost, 0);
	kill(server_pid, SIGSTOP);
	int waited = 0;
	while (!__atomic_load_n(&l->lost, __ATOMIC_SEQ_CST) && waited < 5000) {
		usleep(50000);
		waited += 50;
	}
	kill(server_pid, SIGCONT);
	CHECK_EQ_INT(l->lost, 1);
	CHECK_EQ_INT(lost_calls, 1);
	CHECK(waited <= 2000); /* generous: the TTL is 1 s */
	CHECK_EQ_INT(lr_store_release(l, &e), 0);
	CHECK_EQ_INT(lost_calls, 1);
	/* after the pause the name can be taken again with a higher epoch */
	struct lr_lease *l2 = NULL;
	int rc = LR_ELEASEHELD;
	for (int i = 0; i < 100 && rc; i++) {
		rc = lr_store_acquire(s, "sessions/f", &l2, &e);
		if (rc)
			usleep(100000);
	}
	CHECK_EQ_INT(rc, 0);
	CHECK(l2 && l2->epoch >= 2);
	lr_store_release(l2, &e);
	lr_store_close(s);
}

/* Credentials never appear in messages. */
TEST(credentials_are_not_printed)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	struct lr_nats_opts o = { 0 };
	o.url = "nats://alice:s3kr1t@127.0.0.1:1";
	o.timeout_ms = 500;
	CHECK(lr_store_nats_open(&o, &s, &e) != 0);
	CHECK(strstr(e.msg, "s3kr1t") == NULL);
	CHECK(strstr(e.msg, "alice") == NULL);
	CHECK(strstr(e.msg, "127.0.0.1:1") != NULL);
	/* a cluster's list: each server's credentials hidden */
	o.url = "nats://alice:s3kr1t@127.0.0.1:1, nats://bob:hunter2@127.0.0.1:2";
	CHECK(lr_store_nats_open(&o, &s, &e) != 0);
	CHECK(strstr(e.msg, "s3kr1t") == NULL);
	CHECK(strstr(e.msg, "hunter2") == NULL);
	CHECK(strstr(e.msg, "bob") == NULL);
	CHECK(strstr(e.msg, "127.0.0.1:2") != NULL);
	o.url = "nats://127.0.0.1:1";
	o.user = "alice";
	o.password = "s3kr1t";
	CHECK(lr_store_nats_open(&o, &s, &e) != 0);
	CHECK(strstr(e.msg, "s3kr1t") == NULL);
}

/* An empty ledger: the per-subject check must be sent for 0 too. */
TEST(append_zero_on_a_nonempty_ledger_conflicts)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	CHECK_EQ_INT(nats_open_ns("zero", TTL_MS, &s, &e), 0);
	if (!s)
		return;
	CHECK_EQ_INT(conf_append_str(s, "z", 0, "a"), 0);
	CHECK_EQ_INT(lr_store_append(s, "z", 0, "b", 1, &e), LR_ECONFLICT);
	CHECK_EQ_INT(conf_tip(s, "z"), 1);
	lr_store_close(s);
}

/* A handle remembers its last append to publish at once; another handle's delete and
 * rewrite make that memory stale: the append still succeeds or conflicts as it must. */
TEST(append_after_another_handle_rewrote_the_ledger)
{
	struct lr_store *a = NULL, *b = NULL;
	struct lr_err e;
	CHECK_EQ_INT(nats_open_ns("tips", TTL_MS, &a, &e), 0);
	CHECK_EQ_INT(nats_open_ns("tips", TTL_MS, &b, &e), 0);
	if (!a || !b)
		goto out;
	CHECK_EQ_INT(conf_append_str(a, "t", 0, "a1"), 0);
	/* b deletes and writes record 1 again: a's remembered tip is 1, its stream position old */
	CHECK_EQ_INT(lr_store_ledger_delete(b, "t", &e), 0);
	CHECK_EQ_INT(conf_append_str(b, "t", 0, "b1"), 0);
	CHECK_EQ_INT(conf_append_str(a, "t", 1, "a2"), 0);
	CHECK_EQ_INT(conf_tip(b, "t"), 2);
	/* b deletes it: a's append at 2 conflicts (the ledger is empty) */
	CHECK_EQ_INT(lr_store_ledger_delete(b, "t", &e), 0);
	CHECK_EQ_INT(lr_store_append(a, "t", 2, "a3", 2, &e), LR_ECONFLICT);
	CHECK_EQ_INT(conf_tip(a, "t"), 0);
	/* b writes two records: a, remembering an empty ledger, learns the tip the long way */
	CHECK_EQ_INT(conf_append_str(b, "t", 0, "b1"), 0);
	CHECK_EQ_INT(conf_append_str(b, "t", 1, "b2"), 0);
	CHECK_EQ_INT(lr_store_append(a, "t", 1, "a2", 2, &e), LR_ECONFLICT);
	CHECK_EQ_INT(conf_append_str(a, "t", 2, "a3"), 0);
	CHECK_EQ_INT(conf_tip(b, "t"), 3);
out:
	lr_store_close(a);
	lr_store_close(b);
}

/* The same bytes appended at the same place again by the same handle, once the ledger was
 * deleted between: the server knows the message id (its duplicate window), but the first
 * copy is gone, so the record is sent anew and stored. */
TEST(the_same_append_after_a_delete_is_stored_again)
{
	struct lr_store *a = NULL, *b = NULL;
	struct lr_err e;
	CHECK_EQ_INT(nats_open_ns("again", TTL_MS, &a, &e), 0);
	CHECK_EQ_INT(nats_open_ns("again", TTL_MS, &b, &e), 0);
	if (!a || !b)
		goto out;
	CHECK_EQ_INT(conf_append_str(a, "x", 0, "same"), 0);
	CHECK_EQ_INT(lr_store_ledger_delete(b, "x", &e), 0);
	CHECK_EQ_INT(conf_append_str(a, "x", 0, "same"), 0);
	CHECK_EQ_INT(conf_tip(b, "x"), 1);
	CHECK_EQ_INT(conf_append_str(a, "x", 1, "next"), 0);
	CHECK_EQ_INT(conf_tip(b, "x"), 2);
out:
	lr_store_close(a);
	lr_store_close(b);
}

/* Publishes a ledger record by hand (the NATS text protocol, no acknowledgement: a PING
 * after it returns once the server has it): what another client, or a server that stored
 * a publish twice, leaves on the subject. */
static int raw_record(const char *ns, const char *name, uint64_t lrseq, const char *data)
{
	int port = 0;
	if (sscanf(url, "nats://127.0.0.1:%d", &port) != 1)
		return -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char hdr[128], msg[1024];
	int hl = snprintf(hdr, sizeof hdr, "NATS/1.0\r\nLr-Seq: %llu\r\n\r\n",
			  (unsigned long long)lrseq);
	int dl = (int)strlen(data);
	int ml = snprintf(msg, sizeof msg,
			  "CONNECT {\"verbose\":false,\"headers\":true}\r\n"
			  "HPUB lr.%s.ledger.%s %d %d\r\n%s%s\r\nPING\r\n",
			  ns, name, hl, hl + dl, hdr, data);
	int rc = write(fd, msg, (size_t)ml) == ml ? 0 : -1;
	char buf[512];
	size_t got = 0;
	while (rc == 0 && got < sizeof buf - 1) {
		ssize_t k = read(fd, buf + got, sizeof buf - 1 - got);
		if (k <= 0) {
			rc = -1;
			break;
		}
		got += (size_t)k;
		buf[got] = 0;
		if (strstr(buf, "PONG"))
			break;
		if (strstr(buf, "-ERR"))
			rc = -1;
	}
	close(fd);
	return rc;
}

static int keep_all(void *arg, const struct lr_record *r)
{
	char *out = arg;
	size_t l = strlen(out);
	snprintf(out + l, 256 - l, "%llu:%.*s ", (unsigned long long)r->seq, (int)r->len,
		 (const char *)r->data);
	return 0;
}

/* A journal written before appends carried message ids may hold an append twice (a
 * clustered nats-server that stored a publish sent again): the same bytes after their
 * own record are one record; other bytes there are a corrupt ledger, not an end. */
TEST(a_record_stored_twice_reads_once)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	CHECK_EQ_INT(nats_open_ns("twice", TTL_MS, &s, &e), 0);
	if (!s)
		return;
	CHECK_EQ_INT(conf_append_str(s, "d", 0, "one"), 0);
	CHECK_EQ_INT(conf_append_str(s, "d", 1, "two"), 0);
	CHECK_EQ_INT(raw_record("twice", "d", 2, "two"), 0);
	CHECK_EQ_INT(conf_append_str(s, "d", 2, "three"), 0);
	char got[256] = "";
	CHECK_EQ_INT(lr_store_read(s, "d", 1, 0, keep_all, got, &e), 0);
	CHECK_EQ_STR(got, "1:one 2:two 3:three ");
	got[0] = 0;
	CHECK_EQ_INT(lr_store_read(s, "d", 2, 0, keep_all, got, &e), 0);
	CHECK_EQ_STR(got, "2:two 3:three ");
	/* record 3 again with other bytes: corrupt */
	CHECK_EQ_INT(raw_record("twice", "d", 3, "other"), 0);
	CHECK_EQ_INT(conf_append_str(s, "d", 3, "four"), 0);
	got[0] = 0;
	CHECK_EQ_INT(lr_store_read(s, "d", 1, 0, keep_all, got, &e), LR_ECORRUPT);
	lr_store_close(s);
}

struct collect {
	uint64_t first, next, stop_at;
	size_t size;
	int bad;
};

static int collect_cb(void *arg, const struct lr_record *r)
{
	struct collect *c = arg;
	char want[64];
	int n = snprintf(want, sizeof want, "record %llu", (unsigned long long)r->seq);
	if (r->seq != c->next || r->len != (c->size ? c->size : (size_t)n) ||
	    memcmp(r->data, want, (size_t)n) != 0)
		c->bad++;
	c->next = r->seq + 1;
	return r->seq == c->stop_at ? 7 : 0;
}

static uint64_t read_range(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
			   size_t size, uint64_t stop_at, int *rc)
{
	struct collect c = { from, from, stop_at, size, 0 };
	struct lr_err e;
	*rc = lr_store_read(s, name, from, limit, collect_cb, &c, &e);
	CHECK_EQ_INT(c.bad, 0);
	return c.next - from;
}

/* Long reads stream through an ordered consumer: every record once, in order, bounds kept. */
TEST(long_reads_stream_every_record_in_order)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	CHECK_EQ_INT(nats_open_ns("long", TTL_MS, &s, &e), 0);
	if (!s)
		return;
	char rec[64];
	for (uint64_t i = 0; i < 300; i++) {
		int n = snprintf(rec, sizeof rec, "record %llu", (unsigned long long)i + 1);
		CHECK_EQ_INT(lr_store_append(s, "long/a", i, rec, (size_t)n, &e), 0);
		/* another ledger in between: the consumer must filter it out */
		if (i % 3 == 0)
			CHECK_EQ_INT(lr_store_append(s, "long/b", i / 3, "other", 5, &e), 0);
	}
	int rc;
	CHECK_EQ_INT((int)read_range(s, "long/a", 1, 0, 0, 0, &rc), 300);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT((int)read_range(s, "long/a", 50, 100, 0, 0, &rc), 100);
	CHECK_EQ_INT((int)read_range(s, "long/a", 250, 0, 0, 0, &rc), 51);
	/* the callback stops it: its value comes back */
	CHECK_EQ_INT((int)read_range(s, "long/a", 1, 0, 0, 120, &rc), 120);
	CHECK_EQ_INT(rc, 7);
	/* big records (256 KiB each, 12 MiB): the consumer's flow control */
	size_t big = 256 << 10;
	char *buf = calloc(1, big);
	for (uint64_t i = 0; buf && i < 48; i++) {
		snprintf(buf, 64, "record %llu", (unsigned long long)i + 1);
		CHECK_EQ_INT(lr_store_append(s, "long/big", i, buf, big, &e), 0);
	}
	CHECK_EQ_INT((int)read_range(s, "long/big", 1, 0, big, 0, &rc), 48);
	CHECK_EQ_INT(rc, 0);
	free(buf);
	lr_store_close(s);
}

static int have_server(void)
{
	return system("command -v nats-server >/dev/null 2>&1") == 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "holder") == 0)
		return holder_main(argv[2], argv[3], argv[4]);
	if (!have_server()) {
		printf("ok - nats # SKIP skip: nats-server is not installed\n");
		test_count++;
		return test_summary();
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/lr-nats-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	if (start_server(base)) {
		fprintf(stderr, "could not start nats-server\n");
		stop_server();
		return 1;
	}
	struct conformance h = { "nats", n_open, n_second, n_spawn_holder, NULL,
				 getenv("ASAN_OPTIONS") != NULL, NULL };
	conformance_run(&h);
	RUN(append_zero_on_a_nonempty_ledger_conflicts);
	RUN(long_reads_stream_every_record_in_order);
	RUN(append_after_another_handle_rewrote_the_ledger);
	RUN(the_same_append_after_a_delete_is_stored_again);
	RUN(a_record_stored_twice_reads_once);
	RUN(credentials_are_not_printed);
	RUN(holder_that_cannot_renew_fences_itself);
	RUN(embedded_owns_and_refuses_a_second_owner);
	stop_server();
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
	return test_summary();
}
