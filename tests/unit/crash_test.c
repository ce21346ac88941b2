/*
 * crash_test.c — the journal on the LMDB backend across real processes.
 *
 * Crash safety: a child (this binary re-executed with "child") opens 16
 * session journals and appends to all of them from 16 threads as fast as
 * it can, reporting each acknowledged (session, seq, record hash) on a
 * pipe. The parent SIGKILLs it after a random 0–30 ms, 200 times. After
 * each kill: every acknowledged record is present and byte-identical (and
 * so is every record seen after an earlier kill), sequences have no gap,
 * every record decodes and passes its CRC, fences carry growing epochs,
 * and the journal opens again (new lease epoch, new fence) and takes an
 * append.
 *
 * Stale writer: process A holds the lease and writes; its lease goes away
 * without A noticing (A detaches the journal's notification before
 * releasing, as a partitioned holder would); this process acquires,
 * fences and writes; A's next appends fail with LR_ELEASELOST naming the
 * epoch, and none of them is in the ledger.
 */
#include "../../storage/storage.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SESSIONS 16
#define MAX_DELAY_MS 30

static char self_exe[4096];

static void session_id(int i, char out[37])
{
	snprintf(out, 37, "c0ffee00-0000-4000-8000-%012d", i);
}

static uint64_t rec_hash(int kind, const char *id, size_t idl, const void *body, size_t len)
{
	uint64_t h = 1469598103934665603u;
	unsigned char k = (unsigned char)kind;
	const unsigned char *parts[3] = { &k, (const unsigned char *)id, body };
	size_t lens[3] = { 1, idl, len };
	for (int p = 0; p < 3; p++)
		for (size_t i = 0; i < lens[p]; i++)
			h = (h ^ parts[p][i]) * 1099511628211u;
	return h | 1; /* 0 means "not known" in the parent's tables */
}

static int open_lmdb(const char *root, struct lr_store **s, struct lr_err *e)
{
	struct lr_lmdb_opts o = { .root = root, .no_sync = 0 };
	return lr_store_lmdb_open(&o, s, e);
}

/* ---- the child ---- */

struct child {
	struct lr_store *store;
	int fd, idx;
	unsigned round;
};

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* One write of < PIPE_BUF bytes: atomic among the threads. */
	if (write(fd, line, (size_t)n) != n)
		_exit(3);
}

static void *child_writer(void *arg)
{
	struct child *c = arg;
	char sid[37], name[64];
	session_id(c->idx, sid);
	snprintf(name, sizeof name, "sessions/%s", sid);
	struct lr_err e;
	struct lr_lease *l;
	struct lr_journal *j;
	int rc = lr_store_acquire(c->store, name, &l, &e);
	if (!rc)
		rc = lr_journal_open(c->store, sid, l, &j, &e);
	if (rc) {
		say(c->fd, "E %d %d %s\n", c->idx, rc, e.msg);
		return NULL;
	}
	say(c->fd, "F %d %" PRIu64 " %" PRIu64 "\n", c->idx, lr_journal_tip(j), l->epoch);
	char body[400], id[64];
	for (unsigned k = 0;; k++) {
		int n = snprintf(id, sizeof id, "r%u-s%d-%u", c->round, c->idx, k);
		int len = snprintf(body, sizeof body, "{\"type\":\"StepDone\",\"round\":%u,\"k\":%u,"
				   "\"pad\":\"%.*s\"}", c->round, k, (int)((k * 37 + c->round) % 200),
				   "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789"
				   "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789"
				   "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789");
		uint64_t seq;
		rc = lr_journal_append(j, LR_JOURNAL_EVENT, id, body, (size_t)len, &seq, NULL, &e);
		if (rc) {
			say(c->fd, "E %d %d %s\n", c->idx, rc, e.msg);
			return NULL;
		}
		say(c->fd, "A %d %" PRIu64 " %" PRIu64 "\n", c->idx, seq,
		    rec_hash(LR_JOURNAL_EVENT, id, (size_t)n, body, (size_t)len));
	}
}

static int child_main(const char *root, unsigned round)
{
	struct lr_store *s;
	struct lr_err e;
	if (open_lmdb(root, &s, &e)) {
		say(3, "E -1 0 %s\n", e.msg);
		return 1;
	}
	pthread_t t[SESSIONS];
	struct child c[SESSIONS];
	for (int i = 0; i < SESSIONS; i++) {
		c[i] = (struct child){ s, 3, i, round };
		pthread_create(&t[i], NULL, child_writer, &c[i]);
	}
	for (int i = 0; i < SESSIONS; i++)
		pthread_join(t[i], NULL);
	return 1; /* only an error gets here: the parent kills the writers */
}

/* ---- the parent ---- */

struct sess {
	uint64_t *hash; /* by seq; 0 = not yet seen */
	uint64_t cap, acked_max, seen_tip, last_epoch;
};

static struct sess sess[SESSIONS];
static int bad_lines;

static void expect(struct sess *x, uint64_t seq, uint64_t h)
{
	if (seq >= x->cap) {
		uint64_t cap = x->cap ? x->cap : 1024;
		while (cap <= seq)
			cap *= 2;
		x->hash = realloc(x->hash, cap * sizeof *x->hash);
		memset(x->hash + x->cap, 0, (cap - x->cap) * sizeof *x->hash);
		x->cap = cap;
	}
	if (x->hash[seq] && x->hash[seq] != h) {
		fprintf(stderr, "seq %" PRIu64 " acknowledged twice with different bytes\n", seq);
		bad_lines++;
	}
	x->hash[seq] = h;
}

static void parse_line(char *line, uint64_t *acks)
{
	int i;
	uint64_t a, b;
	if (sscanf(line, "A %d %" SCNu64 " %" SCNu64, &i, &a, &b) == 3 && i >= 0 && i < SESSIONS) {
		expect(&sess[i], a, b);
		if (a > sess[i].acked_max)
			sess[i].acked_max = a;
		(*acks)++;
	} else if (sscanf(line, "F %d %" SCNu64 " %" SCNu64, &i, &a, &b) == 3) {
		/* an opening fence: checked on replay */
	} else {
		fprintf(stderr, "child: %s\n", line);
		bad_lines++;
	}
}

struct verify {
	struct sess *x;
	uint64_t n, prev_epoch;
	int bad;
	int idx;
};

static int verify_one(void *arg, const struct lr_journal_rec *r)
{
	struct verify *v = arg;
	v->n++;
	uint64_t h = rec_hash(r->kind, r->id, r->id_len, r->body, r->len);
	if (r->seq < v->x->cap && v->x->hash[r->seq] && v->x->hash[r->seq] != h) {
		fprintf(stderr, "session %d: record %" PRIu64 " changed\n", v->idx, r->seq);
		v->bad++;
	}
	expect(v->x, r->seq, h); /* once seen, it must never change */
	if (r->kind == LR_JOURNAL_FENCE) {
		if (r->epoch <= v->prev_epoch) {
			fprintf(stderr, "session %d: fence at %" PRIu64 " has epoch %" PRIu64
					" after %" PRIu64 "\n", v->idx, r->seq, r->epoch, v->prev_epoch);
			v->bad++;
		}
		v->prev_epoch = r->epoch;
	}
	return 0;
}

/* Replays every session; then reopens one (new lease, new fence) and appends. */
static int verify_all(const char *root, unsigned round, int reopen)
{
	struct lr_store *s;
	struct lr_err e;
	if (open_lmdb(root, &s, &e)) {
		fprintf(stderr, "reopen store: %s\n", e.msg);
		return 1;
	}
	int bad = 0;
	for (int i = 0; i < SESSIONS; i++) {
		char sid[37];
		session_id(i, sid);
		struct verify v = { &sess[i], 0, 0, 0, i };
		int rc = lr_journal_replay(s, sid, 1, verify_one, &v, &e);
		if (rc) {
			fprintf(stderr, "round %u session %d: replay: %s\n", round, i, e.msg);
			bad++;
			continue;
		}
		bad += v.bad;
		if (v.n < sess[i].acked_max || v.n < sess[i].seen_tip) {
			fprintf(stderr, "round %u session %d: %" PRIu64 " records, acknowledged up to %"
					PRIu64 ", seen %" PRIu64 "\n", round, i, v.n, sess[i].acked_max,
				sess[i].seen_tip);
			bad++;
		}
		sess[i].seen_tip = v.n;
		sess[i].last_epoch = v.prev_epoch;
		if (!reopen && i != (int)(round % SESSIONS))
			continue;
		char name[64];
		snprintf(name, sizeof name, "sessions/%s", sid);
		struct lr_lease *l;
		struct lr_journal *j;
		rc = lr_store_acquire(s, name, &l, &e);
		if (rc) {
			fprintf(stderr, "round %u session %d: acquire: %s\n", round, i, e.msg);
			bad++;
			continue;
		}
		if (l->epoch <= sess[i].last_epoch) {
			fprintf(stderr, "session %d: new epoch %" PRIu64 " not above %" PRIu64 "\n", i,
				l->epoch, sess[i].last_epoch);
			bad++;
		}
		rc = lr_journal_open(s, sid, l, &j, &e);
		if (rc) {
			fprintf(stderr, "round %u session %d: open: %s\n", round, i, e.msg);
			bad++;
		} else {
			uint64_t seq;
			char id[32];
			snprintf(id, sizeof id, "parent-%u", round);
			if (lr_journal_tip(j) != v.n + 1 ||
			    lr_journal_append(j, LR_JOURNAL_COMMAND, id, "{}", 2, &seq, NULL, &e) ||
			    seq != v.n + 2) {
				fprintf(stderr, "round %u session %d: fence/append after reopen: %s\n",
					round, i, e.msg);
				bad++;
			}
			lr_journal_close(j);
		}
		lr_store_release(l, &e);
	}
	lr_store_close(s);
	return bad;
}

/* In a forked child: fd becomes target, inherited across exec. */
static void move_fd(int fd, int target)
{
	if (fd == target ? fcntl(fd, F_SETFD, 0) < 0 : dup2(fd, target) < 0)
		_exit(127);
}

static pid_t spawn(char *const argv[], int child_fd)
{
	pid_t pid = fork();
	if (pid == 0) {
		move_fd(child_fd, 3);
		execv(self_exe, argv);
		_exit(127);
	}
	return pid;
}

static unsigned rng_state;
static unsigned rnd(unsigned n)
{
	rng_state = rng_state * 1103515245u + 12345u;
	return (rng_state >> 8) % n;
}

TEST(crash_safety_200_kills)
{
	char root[] = "/tmp/journal-crash-XXXXXX";
	CHECK(mkdtemp(root) != NULL);
	rng_state = (unsigned)time(NULL);
	unsigned kills = 0, rounds = 200;
	uint64_t acks = 0, acks_before_kill_total = 0;
	int bad = 0;
	uint64_t t0 = lr_now_ns();
	for (unsigned round = 0; round < rounds && !bad; round++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC)) {
			CHECK(0);
			break;
		}
		char rs[16];
		snprintf(rs, sizeof rs, "%u", round);
		char *argv[] = { self_exe, "child", root, rs, NULL };
		/* The child's end must survive exec: fd 3 is dup2'ed without O_CLOEXEC. */
		pid_t pid = spawn(argv, p[1]);
		close(p[1]);
		/* Mostly kill while appending; one round in 8 also during open and fencing. */
		int from_spawn = round % 8 == 0;
		unsigned delay = rnd(MAX_DELAY_MS + 1);
		uint64_t deadline = from_spawn ? lr_now_ns() + (uint64_t)delay * 1000000u : 0;
		char buf[65536];
		size_t have = 0;
		uint64_t round_acks = 0;
		for (;;) {
			uint64_t now = lr_now_ns();
			if (deadline && now >= deadline)
				break;
			/* before the first acknowledgement: a bound for a child that hangs, not a
			 * timing (an open after a kill syncs the dead writer's last commit, and
			 * under ASan on a loaded machine that took more than 2 s) */
			int ms = deadline ? (int)((deadline - now) / 1000000u) + 1 : 30000;
			struct pollfd pf = { p[0], POLLIN, 0 };
			if (poll(&pf, 1, ms) <= 0) {
				if (!deadline) {
					fprintf(stderr, "round %u: the child never acknowledged\n", round);
					bad++;
				}
				break;
			}
			ssize_t n = read(p[0], buf + have, sizeof buf - 1 - have);
			if (n <= 0)
				break;
			have += (size_t)n;
			char *nl;
			while ((nl = memchr(buf, '\n', have))) {
				*nl = '\0';
				parse_line(buf, &round_acks);
				have -= (size_t)(nl + 1 - buf);
				memmove(buf, nl + 1, have);
			}
			if (!deadline && round_acks)
				deadline = lr_now_ns() + (uint64_t)delay * 1000000u;
		}
		kill(pid, SIGKILL);
		acks_before_kill_total += round_acks;
		/* Acknowledgements still in the pipe count too: they were acknowledged. */
		for (;;) {
			ssize_t n = read(p[0], buf + have, sizeof buf - 1 - have);
			if (n <= 0)
				break;
			have += (size_t)n;
			char *nl;
			while ((nl = memchr(buf, '\n', have))) {
				*nl = '\0';
				parse_line(buf, &round_acks);
				have -= (size_t)(nl + 1 - buf);
				memmove(buf, nl + 1, have);
			}
		}
		close(p[0]);
		int st;
		waitpid(pid, &st, 0);
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
			kills++;
		else
			fprintf(stderr, "round %u: the child exited by itself (status %d)\n", round, st);
		acks += round_acks;
		bad += bad_lines;
		bad_lines = 0;
		bad += verify_all(root, round, round % 50 == 49);
	}
	double secs = (double)(lr_now_ns() - t0) / 1e9;
	printf("# %u kills in %.1f s, %" PRIu64 " acknowledged appends; records per session:",
	       kills, secs, acks);
	for (int i = 0; i < SESSIONS; i++)
		printf(" %" PRIu64, sess[i].seen_tip);
	printf("\n");
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(kills, rounds);
	CHECK(acks > rounds); /* the children did get to write */
	(void)acks_before_kill_total;
	for (int i = 0; i < SESSIONS; i++)
		free(sess[i].hash);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK_EQ_INT(system(cmd), 0);
}

/* ---- stale writer across processes ---- */

static int stale_main(const char *root, const char *sid)
{
	/* fd 3: reports to the parent; fd 4: the parent's "go". */
	struct lr_store *s;
	struct lr_err e;
	char name[64];
	snprintf(name, sizeof name, "sessions/%s", sid);
	struct lr_lease *l;
	struct lr_journal *j;
	if (open_lmdb(root, &s, &e) || lr_store_acquire(s, name, &l, &e) ||
	    lr_journal_open(s, sid, l, &j, &e)) {
		say(3, "E %s\n", e.msg);
		return 1;
	}
	uint64_t seq;
	for (int i = 1; i <= 2; i++) {
		char id[16];
		snprintf(id, sizeof id, "a%d", i);
		if (lr_journal_append(j, LR_JOURNAL_EVENT, id, "{\"from\":\"a\"}", 12, &seq, NULL, &e)) {
			say(3, "E %s\n", e.msg);
			return 1;
		}
	}
	/* The lease goes without the journal hearing of it (a partitioned holder). */
	l->on_lost = NULL;
	l->on_lost_arg = NULL;
	lr_store_release(l, &e);
	say(3, "READY %" PRIu64 "\n", seq);
	char go[8];
	if (read(4, go, sizeof go) <= 0)
		return 1;
	for (int i = 3; i <= 4; i++) {
		char id[16];
		snprintf(id, sizeof id, "a%d", i);
		int rc = lr_journal_append(j, LR_JOURNAL_EVENT, id, "{\"from\":\"a\"}", 12, &seq, NULL, &e);
		say(3, "R %d %s\n", rc, e.msg);
	}
	/* The journal's lease is gone: leave without closing it (no exit handlers either). */
	lr_store_close(s);
	_exit(0);
}

static int no_a3(void *arg, const struct lr_journal_rec *r)
{
	struct verify *v = arg;
	v->n++;
	if (strcmp(r->id, "a3") == 0 || strcmp(r->id, "a4") == 0)
		v->bad++;
	return 0;
}

static ssize_t read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			break;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return (ssize_t)n;
}

TEST(stale_writer_across_processes)
{
	char root[] = "/tmp/journal-stale-XXXXXX";
	CHECK(mkdtemp(root) != NULL);
	const char *sid = "5ca1ab1e-0000-4000-8000-000000000001";
	int rep[2], go[2];
	CHECK_EQ_INT(pipe2(rep, O_CLOEXEC), 0);
	CHECK_EQ_INT(pipe2(go, O_CLOEXEC), 0);
	char *argv[] = { self_exe, "stale", root, (char *)sid, NULL };
	pid_t pid = fork();
	if (pid == 0) {
		if (go[0] == 3) /* do not clobber it with the first move */
			go[0] = dup(go[0]);
		move_fd(rep[1], 3);
		move_fd(go[0], 4);
		execv(self_exe, argv);
		_exit(127);
	}
	close(rep[1]);
	close(go[0]);
	char line[512];
	read_line(rep[0], line, sizeof line);
	CHECK(strncmp(line, "READY 3", 7) == 0);
	if (strncmp(line, "READY", 5) != 0)
		fprintf(stderr, "A said: %s\n", line);

	/* B: this process takes the lease (a greater epoch) and fences. */
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(open_lmdb(root, &s, &e), 0);
	struct lr_lease *l;
	struct lr_journal *j;
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/5ca1ab1e-0000-4000-8000-000000000001", &l, &e), 0);
	CHECK_EQ_INT(lr_journal_open(s, sid, l, &j, &e), 0);
	CHECK_EQ_INT(lr_journal_tip(j), 4);
	uint64_t seq;
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "b1", "{\"from\":\"b\"}", 12, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 5);
	CHECK_EQ_INT(write(go[1], "go\n", 3), 3);

	char want[128];
	snprintf(want, sizeof want, "R %d journal: writer for 'sessions/%s' was fenced by epoch %" PRIu64,
		 LR_ELEASELOST, sid, l->epoch);
	for (int i = 0; i < 2; i++) {
		read_line(rep[0], line, sizeof line);
		CHECK(strncmp(line, want, strlen(want)) == 0);
		if (strncmp(line, want, strlen(want)) != 0)
			fprintf(stderr, "A said: %s\nwanted: %s\n", line, want);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(rep[0]);
	close(go[1]);

	/* Nothing A tried after B's fence is there; B goes on. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "b2", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 6);
	struct verify v = { NULL, 0, 0, 0, 0 };
	CHECK_EQ_INT(lr_journal_replay(s, sid, 1, no_a3, &v, &e), 0);
	CHECK_EQ_INT(v.n, 6);
	CHECK_EQ_INT(v.bad, 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK_EQ_INT(system(cmd), 0);
}

/* A byte flipped on disk inside a record: replay names the record, drops nothing silently. */
TEST(corrupted_record_on_disk)
{
	char root[] = "/tmp/journal-disk-XXXXXX";
	CHECK(mkdtemp(root) != NULL);
	const char *sid = "d15c0000-0000-4000-8000-000000000001";
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(open_lmdb(root, &s, &e), 0);
	struct lr_lease *l;
	struct lr_journal *j;
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/d15c0000-0000-4000-8000-000000000001", &l, &e), 0);
	CHECK_EQ_INT(lr_journal_open(s, sid, l, &j, &e), 0);
	const char *bodies[] = { "{\"text\":\"first record\"}", "{\"text\":\"MARKER-7f3a9-record-two\"}",
				 "{\"text\":\"third record\"}" };
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", bodies[i], strlen(bodies[i]), NULL, NULL, &e), 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);

	char path[128];
	snprintf(path, sizeof path, "%s/data.mdb", root);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL);
	int flipped = 0;
	if (f) {
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		char *buf = malloc((size_t)n);
		fseek(f, 0, SEEK_SET);
		CHECK_EQ_INT(fread(buf, 1, (size_t)n, f), n);
		const char *m = "MARKER-7f3a9";
		for (long i = 0; i + 12 <= n; i++) {
			if (memcmp(buf + i, m, 12) == 0) {
				fseek(f, i + 7, SEEK_SET);
				fputc('X', f);
				flipped++;
			}
		}
		fclose(f);
		free(buf);
	}
	CHECK(flipped >= 1);
	CHECK_EQ_INT(open_lmdb(root, &s, &e), 0);
	struct verify v = { NULL, 0, 0, 0, 0 };
	CHECK_EQ_INT(lr_journal_replay(s, sid, 1, no_a3, &v, &e), LR_ECORRUPT);
	CHECK_EQ_STR(e.msg, "journal: record 3 of 'sessions/d15c0000-0000-4000-8000-000000000001' fails its checksum");
	CHECK_EQ_INT(v.n, 2); /* the fence and the first record */
	/* The writer cannot reopen over it either. */
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/d15c0000-0000-4000-8000-000000000001", &l, &e), 0);
	j = NULL;
	CHECK_EQ_INT(lr_journal_open(s, sid, l, &j, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "record 3") != NULL);
	lr_store_release(l, &e);
	lr_store_close(s);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK_EQ_INT(system(cmd), 0);
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
	if (n <= 0)
		return 2;
	self_exe[n] = '\0';
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return child_main(argv[2], (unsigned)atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "stale") == 0)
		return stale_main(argv[2], argv[3]);
	signal(SIGPIPE, SIG_IGN);
	RUN(stale_writer_across_processes);
	RUN(corrupted_record_on_disk);
	RUN(crash_safety_200_kills);
	return test_summary();
}
