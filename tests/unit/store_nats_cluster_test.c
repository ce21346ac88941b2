/*
 * store_nats_cluster_test.c — the storage contract on a 3-node nats-server
 * cluster on loopback (JetStream, every stream at 3 replicas), started and
 * stopped by this test: the conformance suite through a client given all
 * three URLs. Reads go to each stream's leader: with direct gets, which any
 * replica answers, "ledger delete is never written" and "lease across two
 * handles" fail (a replica behind its leader answers with an older state).
 * Nodes killed mid-turn and partitions: tests/lua/store_nats_cluster_spec.lua.
 * Skips when nats-server is not installed. Re-executes itself (argv[1] =
 * "holder") for the lease holder process.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "test.h"
#include "store_conformance.h"

#define NODES 3
#define TTL_MS 2000

static char base[256];
static char url[512];
static int cases;
static char cur_ns[32];
static struct node {
	int port, cport;
	pid_t pid;
	char url[64];
} nodes[NODES];

static int open_with(const char *u, const char *ns, int64_t timeout_ms, struct lr_store **out,
		     struct lr_err *e)
{
	struct lr_nats_opts o = { 0 };
	o.url = u;
	o.ns = ns;
	o.lease_ttl_ms = TTL_MS;
	o.timeout_ms = timeout_ms;
	o.replicas = NODES;
	/* a cluster electing its leaders refuses for a moment */
	int rc = 0;
	for (int i = 0; i < 100; i++) {
		rc = lr_store_nats_open(&o, out, e);
		if (rc == 0 || rc == -EINVAL)
			break;
		usleep(100000);
	}
	return rc;
}

static int open_at(const char *u, const char *ns, struct lr_store **out, struct lr_err *e)
{
	return open_with(u, ns, 5000, out, e);
}

static int c_open(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	snprintf(cur_ns, sizeof cur_ns, "k%d", cases++);
	return open_at(url, cur_ns, out, e);
}

static int c_second(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	return open_at(url, cur_ns, out, e);
}

static int holder_main(const char *u, const char *ns, const char *name)
{
	struct lr_store *s;
	struct lr_err e;
	if (open_at(u, ns, &s, &e)) {
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

static int c_spawn_holder(void *ctx, const char *name, uint64_t *epoch, int *pid)
{
	(void)ctx;
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	*pid = fork();
	if (*pid == 0) {
		dup2(p[1], 1);
		execl("/proc/self/exe", "store_nats_cluster_test", "holder", url, cur_ns, name,
		      (char *)NULL);
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

/* A loopback port free a moment ago. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int listening(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static int node_up(int i)
{
	char dir[300], conf[340];
	snprintf(dir, sizeof dir, "%s/n%d", base, i);
	mkdir(dir, 0700);
	snprintf(conf, sizeof conf, "%s/server.conf", dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		return -1;
	fprintf(f, "server_name: n%d\nlisten: \"127.0.0.1:%d\"\nmax_payload: 8MB\n"
		   "jetstream { store_dir: \"%s/js\" }\n"
		   "cluster { name: lrtest, listen: \"127.0.0.1:%d\", routes: [",
		i, nodes[i].port, dir, nodes[i].cport);
	for (int j = 0, k = 0; j < NODES; j++)
		if (j != i)
			fprintf(f, "%s\"nats-route://127.0.0.1:%d\"", k++ ? ", " : "", nodes[j].cport);
	fprintf(f, "] }\n");
	fclose(f);
	nodes[i].pid = fork();
	if (nodes[i].pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a crashed test leaves no server behind */
		int null = open("/dev/null", O_RDWR);
		dup2(null, 1);
		dup2(null, 2);
		char log[340];
		snprintf(log, sizeof log, "%s/server.log", dir);
		execlp("nats-server", "nats-server", "-c", conf, "-l", log, (char *)NULL);
		_exit(127);
	}
	for (int t = 0; t < 400; t++) {
		if (listening(nodes[i].port))
			return 0;
		usleep(50000);
	}
	return -1;
}

static void node_kill(int i, int sig)
{
	if (nodes[i].pid > 0) {
		kill(nodes[i].pid, sig);
		waitpid(nodes[i].pid, NULL, 0);
		nodes[i].pid = -1;
	}
}

/*
 * SIGSTOP, then waits for the stop to be reported (the node is our child):
 * kill() returns before the group stop has reached a thread busy on the
 * other core, and a follower that answers in that window acknowledges what
 * the case needs unacknowledged. The report comes once every thread is
 * stopped. Returns 0, or -1 when the node died instead.
 */
static int stop_node(pid_t pid)
{
	if (kill(pid, SIGSTOP))
		return -1;
	int st;
	pid_t r;
	while ((r = waitpid(pid, &st, WUNTRACED)) < 0 && errno == EINTR)
		;
	return r == pid && WIFSTOPPED(st) ? 0 : -1;
}

/* The node whose log last says it became the leader of stream, or -1. */
static int leader_of(const char *stream)
{
	char pat[128], at[32] = "";
	snprintf(pat, sizeof pat, "new stream leader for '$G > %s'", stream);
	int best = -1;
	for (int i = 0; i < NODES; i++) {
		char path[320], line[1024];
		snprintf(path, sizeof path, "%s/n%d/server.log", base, i);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			/* "[pid] 2026/12/01 21:56:39.073677 [INF] JetStream cluster new ..." */
			char *t = strchr(line, ']');
			if (!strstr(line, pat) || !t || strlen(t) < 28)
				continue;
			if (best < 0 || strncmp(t + 2, at, 26) > 0) {
				best = i;
				snprintf(at, sizeof at, "%.26s", t + 2);
			}
		}
		fclose(f);
	}
	return best;
}

struct recs {
	int n, twos;
	char last[16];
};

static int count_rec(void *arg, const struct lr_record *r)
{
	struct recs *c = arg;
	c->n++;
	c->twos += r->len == 3 && memcmp(r->data, "two", 3) == 0;
	snprintf(c->last, sizeof c->last, "%.*s", (int)(r->len < 15 ? r->len : 15),
		 (const char *)r->data);
	return 0;
}

/*
 * An append whose acknowledgement is lost while the ledger stream's leader
 * cannot reach a quorum (both followers stopped, for less than an election
 * timeout): lr_store_append_definitely sends it again, the leader checks
 * the expected subject sequence against what it has applied (neither copy
 * yet) and proposes the second copy too. Once the followers are back both
 * are committed; the server must keep one (the appends' message ids), else
 * the ledger holds record 2 twice and reads as corrupt after record 3.
 */
TEST(an_ambiguous_append_sent_again_is_stored_once)
{
	struct lr_store *s = NULL, *at_leader = NULL;
	struct lr_err e = { "" };
	CHECK_EQ_INT(open_at(url, "dup", &s, &e), 0);
	if (!s)
		return;
	CHECK_EQ_INT(lr_store_append(s, "l", 0, "one", 3, &e), 0);
	int lead = leader_of("LR_dup_LEDGERS");
	CHECK(lead >= 0);
	/* through the leader's own port: the stopped followers take nothing in */
	if (lead >= 0)
		CHECK_EQ_INT(open_with(nodes[lead].url, "dup", 1000, &at_leader, &e), 0);
	if (!at_leader) {
		lr_store_close(s);
		return;
	}
	for (int i = 0; i < NODES; i++)
		if (i != lead)
			CHECK_EQ_INT(stop_node(nodes[i].pid), 0);
	int rc = lr_store_append_definitely(at_leader, "l", 1, "two", 3, &e);
	for (int i = 0; i < NODES; i++)
		if (i != lead)
			kill(nodes[i].pid, SIGCONT);
	CHECK_EQ_INT(rc, LR_EAMBIGUOUS);
	/* The copies of "two" are still in the leader's log, committed once the followers
	 * answer again: wait for that before "three". Appended at tip 1 while they were
	 * pending, "three" would pass the expected-sequence check too (against what the
	 * leader has applied, nats-server issue 4320) and be stored as a second record 2
	 * (make check once did, under load). If "two" never lands, "three" goes at 1. */
	for (int t = 0; t < 300; t++) {
		uint64_t tip = 0;
		if (lr_store_tip(s, "l", &tip, &e) == 0 && tip >= 2)
			break;
		usleep(100000);
	}
	/* whatever became of "two", the next append goes at the tip */
	for (int t = 0; t < 100; t++) {
		uint64_t tip = 0;
		rc = lr_store_tip(s, "l", &tip, &e);
		if (rc == 0)
			rc = lr_store_append_definitely(s, "l", tip, "three", 5, &e);
		if (rc == 0)
			break;
		usleep(200000);
	}
	CHECK_EQ_INT(rc, 0);
	struct recs c = { 0, 0, "" };
	rc = lr_store_read(s, "l", 1, 0, count_rec, &c, &e);
	if (rc)
		fprintf(stderr, "read: %s\n", e.msg);
	CHECK_EQ_INT(rc, 0);
	CHECK(c.twos <= 1);
	CHECK_EQ_INT(c.n, 2 + c.twos);
	CHECK_EQ_STR(c.last, "three");
	lr_store_close(at_leader);
	lr_store_close(s);
}

/* Bytes the node on `port` has received and not read (a stopped server's socket). */
static long unread_at(int port)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	if (!f)
		return -1;
	char line[512];
	long total = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned la, lp, ra, rp, st;
		unsigned long tx, rx;
		if (sscanf(line, " %*d: %x:%x %x:%x %x %lx:%lx", &la, &lp, &ra, &rp, &st, &tx,
			   &rx) == 7 &&
		    (int)lp == port && st == 1 /* ESTABLISHED */)
			total += (long)rx;
	}
	fclose(f);
	return total;
}

struct inflight {
	struct lr_store *s;
	int rc;
	struct lr_err e;
};

static void *append_two(void *arg)
{
	struct inflight *a = arg;
	a->rc = lr_store_append(a->s, "l", 1, "two", 3, &a->e);
	return NULL;
}

/*
 * An append out when the node its client is connected to dies: the
 * request is sent again on the client's next connection (another node of
 * the cluster) at once, with its message id, instead of waiting out the
 * request timeout (10 s in make soak's cluster storm, where a session
 * stalled that long). The node is stopped first so that the request is
 * surely out and unanswered, then killed; with a 10-minute request
 * timeout, an append that waited it out would not be back within the
 * 2 minutes this waits. The record is stored once.
 */
TEST(an_append_out_when_its_node_dies_is_sent_again_at_once)
{
	struct lr_store *s = NULL, *all = NULL;
	struct lr_err e = { "" };
	CHECK_EQ_INT(open_at(url, "gone", &all, &e), 0);
	if (!all)
		return;
	CHECK_EQ_INT(lr_store_append(all, "l", 0, "one", 3, &e), 0);
	int lead = leader_of("LR_gone_LEDGERS");
	CHECK(lead >= 0);
	/* through a follower (no election after its death), knowing the others from it */
	int v = (lead + 1) % NODES;
	CHECK_EQ_INT(open_with(nodes[v].url, "gone", 600000, &s, &e), 0);
	if (!s) {
		lr_store_close(all);
		return;
	}
	long before = unread_at(nodes[v].port);
	CHECK_EQ_INT(stop_node(nodes[v].pid), 0);
	struct inflight a = { s, -1, { "" } };
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, append_two, &a), 0);
	/* the publish has reached the stopped node (make check once did not see it within a
	 * minute, cause unknown: then the kill comes anyway, and the case may not have had
	 * its request out; the append must still come back, stored once) */
	int out = 0;
	for (int i = 0; i < 6000 && !(out = unread_at(nodes[v].port) > before); i++)
		usleep(10000);
	if (!out)
		fprintf(stderr, "# no unread bytes seen at the stopped node (before: %ld)\n", before);
	node_kill(v, SIGKILL);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 120;
	int joined = pthread_timedjoin_np(t, NULL, &ts) == 0;
	CHECK(joined);
	if (!joined) {
		/* left waiting (its store with it) until the process ends */
		fprintf(stderr, "the append still waits 2 minutes after its node died\n");
		pthread_detach(t);
		lr_store_close(all);
		CHECK_EQ_INT(node_up(v), 0);
		return;
	}
	if (a.rc)
		fprintf(stderr, "append: %s\n", a.e.msg);
	CHECK_EQ_INT(a.rc, 0);
	struct recs c = { 0, 0, "" };
	int rc = lr_store_read(all, "l", 1, 0, count_rec, &c, &e);
	if (rc)
		fprintf(stderr, "read: %s\n", e.msg);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(c.n, 2);
	CHECK_EQ_INT(c.twos, 1);
	lr_store_close(s);
	lr_store_close(all);
	CHECK_EQ_INT(node_up(v), 0);
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
		printf("ok - nats cluster # SKIP skip: nats-server is not installed\n");
		test_count++;
		return test_summary();
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/lr-natsc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	url[0] = 0;
	for (int i = 0; i < NODES; i++) {
		nodes[i].port = free_port();
		nodes[i].cport = free_port();
		snprintf(nodes[i].url, sizeof nodes[i].url, "nats://127.0.0.1:%d", nodes[i].port);
		snprintf(url + strlen(url), sizeof url - strlen(url), "%s%s", i ? "," : "",
			 nodes[i].url);
	}
	int rc = 0;
	for (int i = 0; i < NODES && !rc; i++)
		rc = node_up(i);
	if (rc) {
		fprintf(stderr, "could not start the nats-server cluster\n");
	} else {
		/* A clustered stream checks an expected subject sequence before it proposes
		 * the message, against what it has stored: two publishes in flight at once
		 * with the same expectation can both be stored (nats-server issue 4320, and
		 * across a leader change on every version). One writer per ledger, which
		 * leases give, never races; docs/soak.md and the README say so. */
		struct conformance h = { "nats-cluster", c_open, c_second, c_spawn_holder, NULL, 1,
					 "a clustered nats-server does not serialize racing "
					 "expected-sequence publishes (nats-server#4320)" };
		conformance_run(&h);
		RUN(an_ambiguous_append_sent_again_is_stored_once);
		RUN(an_append_out_when_its_node_dies_is_sent_again_at_once);
	}
	for (int i = 0; i < NODES; i++)
		node_kill(i, SIGTERM);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
	return rc ? 1 : test_summary();
}
