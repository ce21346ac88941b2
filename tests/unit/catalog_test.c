/*
 * catalog_test.c — per-session metadata in kv: defaults, updates with
 * compare-and-swap retries, listing order, strict decoding, repair from
 * the journal tip, and that a broken catalog never fails an append.
 */
#include "../../storage/storage.h"
#include "test.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SID_A "0a000000-0000-4000-8000-000000000001"
#define SID_B "0b000000-0000-4000-8000-000000000002"
#define SID_C "0c000000-0000-4000-8000-000000000003"

static struct lr_store *mem(void)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	if (lr_store_memory_open(&s, &e) != 0)
		abort();
	return s;
}

static int set_fields(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)arg;
	CHECK_EQ_INT(exists, 0);
	snprintf(c->title, sizeof c->title, "fix the \"build\" — ünïcode");
	c->state = LR_CATALOG_RUNNING;
	c->loop_count = 2;
	c->input_tokens = 1200;
	c->output_tokens = 300;
	c->cache_read_tokens = 1000;
	c->cost = 0.0125;
	snprintf(c->workspace_ref, sizeof c->workspace_ref, "v1:sha256:%064d", 7);
	return 0;
}

TEST(update_creates_and_get_reads)
{
	struct lr_store *s = mem();
	struct lr_err e;
	struct lr_catalog_entry c;
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), LR_ENOTFOUND);
	CHECK(strstr(e.msg, SID_A) != NULL);
	double before = lr_wall_seconds();
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, set_fields, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_STR(c.id, SID_A);
	CHECK_EQ_STR(c.title, "fix the \"build\" — ünïcode");
	CHECK(c.created_at >= before - 1 && c.created_at <= lr_wall_seconds() + 1);
	CHECK_EQ_INT(c.status, LR_CATALOG_ACTIVE);
	CHECK_EQ_INT(c.state, LR_CATALOG_RUNNING);
	CHECK_EQ_INT(c.loop_count, 2);
	CHECK_EQ_INT(c.input_tokens, 1200);
	CHECK_EQ_INT(c.output_tokens, 300);
	CHECK_EQ_INT(c.cache_read_tokens, 1000);
	CHECK(c.cost > 0.0124 && c.cost < 0.0126);
	CHECK(strncmp(c.workspace_ref, "v1:sha256:000", 13) == 0);
	/* The stored JSON is what the header says. */
	struct lr_bytes b;
	CHECK_EQ_INT(lr_store_kv_get(s, "catalog/sessions/" SID_A, &b, NULL, &e), 0);
	CHECK(strstr((char *)b.data, "\"state\":\"running\"") != NULL);
	CHECK(strstr((char *)b.data, "\"status\":\"active\"") != NULL);
	CHECK(strstr((char *)b.data, "\"v\":1") != NULL);
	lr_bytes_release(&b);
	CHECK_EQ_INT(lr_catalog_get(s, "NOT-A-UUID", &c, &e), -EINVAL);
	lr_store_close(s);
}

static int bump_loops(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)arg;
	(void)exists;
	c->loop_count++;
	return 0;
}

static struct lr_store *race_store;
static int race_calls;

/* On its first run, another writer updates the entry behind our back. */
static int racing(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	race_calls++;
	if (race_calls == 1) {
		struct lr_err e;
		CHECK_EQ_INT(lr_catalog_update(race_store, (const char *)arg, bump_loops, NULL, &e), 0);
	}
	c->loop_count += 10;
	return 0;
}

static int always_racing(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	struct lr_err e;
	race_calls++;
	CHECK_EQ_INT(lr_catalog_update(race_store, (const char *)arg, bump_loops, NULL, &e), 0);
	c->loop_count += 100;
	return 0;
}

TEST(compare_and_swap_retries)
{
	struct lr_store *s = mem();
	struct lr_err e;
	race_store = s;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, bump_loops, NULL, &e), 0);
	race_calls = 0;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, racing, SID_A, &e), 0);
	CHECK_EQ_INT(race_calls, 2);
	struct lr_catalog_entry c;
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 1 + 1 + 10); /* neither update lost */
	/* A race lost 8 times in a row gives up with a conflict. */
	race_calls = 0;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, always_racing, SID_A, &e), LR_ECONFLICT);
	CHECK_EQ_INT(race_calls, 8);
	CHECK(strstr(e.msg, "lost 8 races") != NULL);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 12 + 8);
	lr_store_close(s);
}

static int no_change(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)arg;
	(void)c;
	(void)exists;
	return 1;
}

static int bad_state(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)arg;
	(void)exists;
	c->state = (enum lr_catalog_state)42;
	return 0;
}

TEST(skip_and_invalid_updates)
{
	struct lr_store *s = mem();
	struct lr_err e;
	struct lr_catalog_entry c;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, no_change, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), LR_ENOTFOUND);
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, bad_state, NULL, &e), -EINVAL);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), LR_ENOTFOUND);
	lr_store_close(s);
}

struct listed {
	int n;
	char id[8][37];
};

static int keep_entry(void *arg, const struct lr_catalog_entry *c)
{
	struct listed *l = arg;
	if (l->n < 8)
		snprintf(l->id[l->n++], 37, "%s", c->id);
	return 0;
}

TEST(list_is_sorted_and_strict)
{
	struct lr_store *s = mem();
	struct lr_err e;
	CHECK_EQ_INT(lr_catalog_update(s, SID_C, bump_loops, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, bump_loops, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_update(s, SID_B, bump_loops, NULL, &e), 0);
	/* Unrelated keys are not entries. */
	uint64_t rev;
	CHECK_EQ_INT(lr_store_kv_put(s, "catalog/other", 0, "x", 1, &rev, &e), 0);
	struct listed l = { 0 };
	CHECK_EQ_INT(lr_catalog_list(s, keep_entry, &l, &e), 0);
	CHECK_EQ_INT(l.n, 3);
	CHECK_EQ_STR(l.id[0], SID_A);
	CHECK_EQ_STR(l.id[1], SID_B);
	CHECK_EQ_STR(l.id[2], SID_C);
	CHECK_EQ_INT(lr_catalog_delete(s, SID_B, &e), 0);
	l.n = 0;
	CHECK_EQ_INT(lr_catalog_list(s, keep_entry, &l, &e), 0);
	CHECK_EQ_INT(l.n, 2);

	/* Broken entries: unknown member, wrong type, not JSON, another session's id. */
	const char *bad[] = {
		"{\"v\":1}",
		"not json",
		"[]",
		"{\"v\":2,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\"}",
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"dancing\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\"}",
		"{\"v\":1,\"id\":\"" SID_A "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\"}",
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":-1,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\"}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_EQ_INT(lr_store_kv_delete(s, "catalog/sessions/" SID_B, &e), 0);
		CHECK_EQ_INT(lr_store_kv_put(s, "catalog/sessions/" SID_B, 0, bad[i], strlen(bad[i]), &rev, &e), 0);
		struct lr_catalog_entry c;
		CHECK_EQ_INT(lr_catalog_get(s, SID_B, &c, &e), LR_ECORRUPT);
		CHECK(strstr(e.msg, "catalog: entry 'catalog/sessions/" SID_B "'") != NULL);
		l.n = 0;
		CHECK_EQ_INT(lr_catalog_list(s, keep_entry, &l, &e), LR_ECORRUPT);
		CHECK_EQ_INT(l.n, 1); /* A came before the broken one */
		/* An update does not paper over a broken entry either. */
		CHECK_EQ_INT(lr_catalog_update(s, SID_B, bump_loops, NULL, &e), LR_ECORRUPT);
	}
	lr_store_close(s);
}

static int set_fork(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)arg;
	(void)exists;
	snprintf(c->forked_from, sizeof c->forked_from, "%s", SID_A);
	c->forked_at = 12;
	return 0;
}

/* forked_from is optional: absent on a plain session, { session, at } on a fork. */
TEST(forked_from_round_trip_and_strict)
{
	struct lr_store *s = mem();
	struct lr_err e;
	struct lr_catalog_entry c;
	uint64_t rev;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, bump_loops, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_STR(c.forked_from, "");
	CHECK_EQ_INT(c.forked_at, 0);
	CHECK_EQ_INT(lr_catalog_update(s, SID_B, set_fork, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_update(s, SID_B, bump_loops, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_B, &c, &e), 0);
	CHECK_EQ_STR(c.forked_from, SID_A);
	CHECK_EQ_INT(c.forked_at, 12);
	CHECK_EQ_INT(c.loop_count, 1);
	struct lr_bytes b;
	CHECK_EQ_INT(lr_store_kv_get(s, "catalog/sessions/" SID_B, &b, NULL, &e), 0);
	CHECK(strstr((char *)b.data, "\"forked_from\":{\"at\":12,\"session\":\"" SID_A "\"}") != NULL);
	lr_bytes_release(&b);
	static const char *const bad[] = {
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\",\"forked_from\":{\"session\":\"nope\",\"at\":3}}",
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\",\"forked_from\":{\"session\":\"" SID_A "\",\"at\":0}}",
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\",\"forked_from\":\"" SID_A "\"}",
		"{\"v\":1,\"id\":\"" SID_B "\",\"title\":\"\",\"created_at\":1,\"last_active_at\":1,"
		"\"status\":\"active\",\"state\":\"idle\",\"loop_count\":0,\"last_seq\":0,"
		"\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_tokens\":0,\"cost\":0},"
		"\"workspace_ref\":\"\",\"forked_from\":{\"session\":\"" SID_A "\",\"at\":3,\"x\":1}}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_EQ_INT(lr_store_kv_delete(s, "catalog/sessions/" SID_B, &e), 0);
		CHECK_EQ_INT(lr_store_kv_put(s, "catalog/sessions/" SID_B, 0, bad[i], strlen(bad[i]), &rev, &e), 0);
		CHECK_EQ_INT(lr_catalog_get(s, SID_B, &c, &e), LR_ECORRUPT);
	}
	lr_store_close(s);
}

TEST(note_append_and_repair)
{
	struct lr_store *s = mem();
	struct lr_err e;
	struct lr_lease *l;
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/" SID_A, &l, &e), 0);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID_A, l, &j, &e), 0);
	uint64_t seq;
	for (int i = 0; i < 5; i++) {
		CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
		CHECK_EQ_INT(lr_catalog_note_append(s, SID_A, seq, &e), 0);
	}
	struct lr_catalog_entry c;
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.last_seq, 6);
	/* last_seq only moves forward. */
	CHECK_EQ_INT(lr_catalog_note_append(s, SID_A, 3, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.last_seq, 6);

	/* Appends that the catalog missed: repair reads the tip. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(lr_catalog_repair(s, SID_A, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.last_seq, 8);

	/* A broken catalog entry fails the catalog, never the journal. */
	uint64_t rev;
	CHECK_EQ_INT(lr_store_kv_delete(s, "catalog/sessions/" SID_A, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "catalog/sessions/" SID_A, 0, "garbage", 7, &rev, &e), 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 9);
	CHECK_EQ_INT(lr_catalog_note_append(s, SID_A, seq, &e), LR_ECORRUPT);
	/* Repair of a session with no entry creates it. */
	CHECK_EQ_INT(lr_catalog_repair(s, SID_C, &e), 0);
	CHECK_EQ_INT(lr_catalog_get(s, SID_C, &c, &e), 0);
	CHECK_EQ_INT(c.last_seq, 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

/* lr_catalog_update_many: each job on its own (a lost race retried alone,
 * a skip, a bad id), on the memory store and on LMDB (one commit). */
static void update_many_on(struct lr_store *s)
{
	struct lr_err e;
	race_store = s;
	CHECK_EQ_INT(lr_catalog_update(s, SID_B, bump_loops, NULL, &e), 0);
	race_calls = 0;
	struct lr_catalog_job jobs[4] = {
		{ .sid = SID_A, .fn = bump_loops },
		{ .sid = SID_B, .fn = racing, .arg = (void *)SID_B },
		{ .sid = SID_C, .fn = no_change },
		{ .sid = "not-a-session-id", .fn = bump_loops },
	};
	lr_catalog_update_many(s, 4, jobs);
	CHECK_EQ_INT(jobs[0].rc, 0);
	CHECK_EQ_INT(jobs[1].rc, 0);
	CHECK_EQ_INT(jobs[2].rc, 0);
	CHECK(jobs[3].rc != 0);
	CHECK(jobs[3].err.msg[0] != 0);
	CHECK_EQ_INT(race_calls, 2); /* lost its race once inside the batch, then alone */
	struct lr_catalog_entry c;
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 1);
	CHECK_EQ_INT(lr_catalog_get(s, SID_B, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 1 + 1 + 10); /* neither update lost */
	CHECK_EQ_INT(lr_catalog_get(s, SID_C, &c, &e), LR_ENOTFOUND);
	/* Many at once: every entry written. */
	enum { MANY = 300 };
	static char sids[MANY][37];
	static struct lr_catalog_job many[MANY];
	for (int i = 0; i < MANY; i++) {
		snprintf(sids[i], sizeof sids[i], "0d000000-0000-4000-8000-%012d", i);
		many[i] = (struct lr_catalog_job){ .sid = sids[i], .fn = bump_loops };
	}
	lr_catalog_update_many(s, MANY, many);
	lr_catalog_update_many(s, MANY, many);
	for (int i = 0; i < MANY; i++) {
		CHECK_EQ_INT(many[i].rc, 0);
		CHECK_EQ_INT(lr_catalog_get(s, sids[i], &c, &e), 0);
		CHECK_EQ_INT(c.loop_count, 2);
	}
	lr_catalog_update_many(s, 0, NULL);
	/* A known entry: the update starts from it, not from the store... */
	struct lr_catalog_entry wrote, known;
	struct lr_catalog_job kj = { .sid = SID_A, .fn = bump_loops, .wrote = &wrote };
	lr_catalog_update_many(s, 1, &kj);
	CHECK_EQ_INT(kj.rc, 0);
	CHECK(kj.wrote_rev > 0);
	CHECK_EQ_INT(wrote.loop_count, 2);
	known = wrote;
	known.loop_count = 40; /* tells which one the update started from */
	kj = (struct lr_catalog_job){ .sid = SID_A, .fn = bump_loops, .known = &known,
				      .known_rev = kj.wrote_rev, .wrote = &wrote };
	lr_catalog_update_many(s, 1, &kj);
	CHECK_EQ_INT(kj.rc, 0);
	CHECK_EQ_INT(wrote.loop_count, 41);
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 41);
	/* ...unless someone wrote meanwhile: then from the store, nothing lost. */
	uint64_t stale = kj.wrote_rev;
	CHECK_EQ_INT(lr_catalog_update(s, SID_A, bump_loops, NULL, &e), 0); /* 42 */
	known.loop_count = 40;
	kj = (struct lr_catalog_job){ .sid = SID_A, .fn = bump_loops, .known = &known,
				      .known_rev = stale, .wrote = &wrote };
	lr_catalog_update_many(s, 1, &kj);
	CHECK_EQ_INT(kj.rc, 0);
	CHECK_EQ_INT(kj.wrote_rev, 0); /* redone on its own: not known */
	CHECK_EQ_INT(lr_catalog_get(s, SID_A, &c, &e), 0);
	CHECK_EQ_INT(c.loop_count, 43);
}

TEST(update_many_each_on_its_own)
{
	struct lr_store *s = mem();
	update_many_on(s);
	lr_store_close(s);
	char root[] = "/tmp/catalog-test-XXXXXX";
	CHECK(mkdtemp(root) != NULL);
	struct lr_lmdb_opts o = { root, 0, 0, 1, NULL };
	struct lr_err e;
	CHECK_EQ_INT(lr_store_lmdb_open(&o, &s, &e), 0);
	update_many_on(s);
	/* kv puts together: a stale revision fails alone. */
	struct lr_kv_put p[3] = {
		{ .key = "t/a", .expected_rev = 0, .val = "1", .len = 1 },
		{ .key = "t/b", .expected_rev = 7, .val = "2", .len = 1 },
		{ .key = "t/c", .expected_rev = 0, .val = "3", .len = 1 },
	};
	lr_store_kv_put_many(s, 3, p);
	CHECK_EQ_INT(p[0].rc, 0);
	CHECK_EQ_INT(p[1].rc, LR_ECONFLICT);
	CHECK_EQ_INT(p[2].rc, 0);
	CHECK(p[0].new_rev > 0 && p[2].new_rev > 0);
	struct lr_bytes b = { NULL, 0 };
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_kv_get(s, "t/c", &b, &rev, &e), 0);
	CHECK_EQ_INT(rev, p[2].new_rev);
	lr_bytes_release(&b);
	CHECK_EQ_INT(lr_store_kv_get(s, "t/b", &b, &rev, &e), LR_ENOTFOUND);
	lr_store_close(s);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK_EQ_INT(system(cmd), 0);
}

/* The entry as jansson dumped it before the catalog wrote its JSON itself. */
static char *jansson_encode(const struct lr_catalog_entry *c)
{
	json_t *o = json_pack("{s:i, s:s, s:s, s:f, s:f, s:s, s:s, s:I, s:I, s:{s:I, s:I, s:I, s:f}, s:s}",
			      "v", 1, "id", c->id, "title", c->title,
			      "created_at", c->created_at, "last_active_at", c->last_active_at,
			      "status", lr_catalog_status_name(c->status),
			      "state", lr_catalog_state_name(c->state),
			      "loop_count", (json_int_t)c->loop_count,
			      "last_seq", (json_int_t)c->last_seq,
			      "usage",
			      "input_tokens", (json_int_t)c->input_tokens,
			      "output_tokens", (json_int_t)c->output_tokens,
			      "cache_read_tokens", (json_int_t)c->cache_read_tokens,
			      "cost", c->cost,
			      "workspace_ref", c->workspace_ref);
	if (o && c->forked_from[0])
		json_object_set_new(o, "forked_from", json_pack("{s:s, s:I}", "session", c->forked_from,
								"at", (json_int_t)c->forked_at));
	if (!o)
		return NULL;
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static int set_random(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	const struct lr_catalog_entry *want = arg;
	char id[37];
	memcpy(id, c->id, sizeof id);
	*c = *want;
	memcpy(c->id, id, sizeof id);
	return 0;
}

/* The catalog's own JSON writer: jansson's bytes, entry for entry. */
TEST(entry_json_is_janssons)
{
	static const char *const bits[] = { "a", "\"", "\\", "/", "\n", "\t", "\b", "\f", "\r", "\x01",
					    "\x1f", "\x7f", "é", "世", "😀", " ", "fix the build", "%s" };
	struct lr_store *s = mem();
	struct lr_err e;
	for (int i = 0; i < 400; i++) {
		struct lr_catalog_entry c;
		memset(&c, 0, sizeof c);
		for (int k = (int)(rnd() % 12); k > 0; k--)
			strncat(c.title, bits[rnd() % (sizeof bits / sizeof *bits)],
				sizeof c.title - strlen(c.title) - 5);
		static const double reals[] = { 0.0, 1.0, 0.1, 1e20, 1e-5, 123.456, 5e-324, 1e300,
						1796162338.3054066, 2.5, 1e16, 0.0125 };
		c.created_at = i % 3 ? 1.7e9 + (double)(rnd() % 1000000007) / 1e6 : reals[rnd() % 12];
		c.last_active_at = reals[rnd() % 12] * (i % 2 ? 1 : 1 + (double)(rnd() % 1000) / 7);
		c.cost = i % 4 ? (double)(rnd() % 100000) / 1e5 : reals[rnd() % 12];
		c.status = (enum lr_catalog_status)(rnd() % 2);
		c.state = (enum lr_catalog_state)(rnd() % 6);
		c.loop_count = rnd() % 5;
		c.last_seq = i % 5 ? rnd() % 100000 : rnd() >> 1;
		c.input_tokens = rnd() % 1000000;
		c.output_tokens = rnd() % 1000;
		c.cache_read_tokens = i % 7 ? 0 : rnd() >> 1;
		if (i % 3 == 0)
			snprintf(c.workspace_ref, sizeof c.workspace_ref, "v1:sha256:%064d", i);
		if (i % 5 == 0) {
			snprintf(c.forked_from, sizeof c.forked_from, SID_B);
			c.forked_at = 1 + rnd() % 1000;
		}
		CHECK_EQ_INT(lr_catalog_update(s, SID_A, set_random, &c, &e), 0);
		snprintf(c.id, sizeof c.id, SID_A);
		char *want = jansson_encode(&c);
		CHECK(want != NULL);
		struct lr_bytes b = { NULL, 0 };
		CHECK_EQ_INT(lr_store_kv_get(s, "catalog/sessions/" SID_A, &b, NULL, &e), 0);
		CHECK_EQ_INT(b.len, strlen(want));
		if (b.len == strlen(want))
			CHECK(memcmp(b.data, want, b.len) == 0);
		lr_bytes_release(&b);
		free(want);
	}
	/* What jansson refused, refused: a title that is not UTF-8, a NaN. */
	struct lr_catalog_entry c;
	memset(&c, 0, sizeof c);
	snprintf(c.title, sizeof c.title, "bad \xc3\x28");
	CHECK(lr_catalog_update(s, SID_A, set_random, &c, &e) != 0);
	snprintf(c.title, sizeof c.title, "ok");
	c.cost = NAN;
	CHECK(lr_catalog_update(s, SID_A, set_random, &c, &e) != 0);
	lr_store_close(s);
}

int main(void)
{
	RUN(update_creates_and_get_reads);
	RUN(compare_and_swap_retries);
	RUN(skip_and_invalid_updates);
	RUN(list_is_sorted_and_strict);
	RUN(note_append_and_repair);
	RUN(forked_from_round_trip_and_strict);
	RUN(update_many_each_on_its_own);
	RUN(entry_json_is_janssons);
	return test_summary();
}
