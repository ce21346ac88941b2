/*
 * store_conformance.h — the storage contract's conformance suite, run on
 * every backend (memory, LMDB, NATS JetStream) unchanged. It uses only the
 * lr_store_* API and the hooks below; each case prints one TAP line
 * "ok - <backend> <case>" (or "ok - … # SKIP reason", which tests/run.sh
 * counts as skipped, apart from the passes, when the backend cannot offer a
 * hook the case needs).
 *
 *   static int my_open(struct lr_store **out, void *ctx, struct lr_err *e);
 *   struct conformance h = { "lmdb", my_open, my_second, my_spawn, ctx, 1 };
 *   conformance_run(&h);
 *
 * Include after test.h.
 */
#ifndef LR_STORE_CONFORMANCE_H
#define LR_STORE_CONFORMANCE_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../storage/storage.h"
#include "test.h"

struct conformance {
	const char *backend;
	/* A fresh, empty store for one case. */
	int (*open)(struct lr_store **out, void *ctx, struct lr_err *e);
	/* Another handle on the store the last open returned (NULL: such cases skip). */
	int (*open_second)(struct lr_store **out, void *ctx, struct lr_err *e);
	/*
	 * Starts a process that opens the store the last open returned,
	 * acquires lease `name` and reports its epoch, then waits to be killed;
	 * *pid receives its id (NULL: such cases skip).
	 */
	int (*spawn_holder)(void *ctx, const char *name, uint64_t *epoch, int *pid);
	void *ctx;
	int small; /* non-zero: scale the heavy cases down (sanitizers) */
	/* non-NULL: why racing appends to one ledger cannot be tested (the case skips) */
	const char *no_race;
};

/* ---- helpers ---- */

struct conf_recs {
	uint64_t n, first, last;
	uint64_t seqs[64];
	char data[64][64];
	size_t lens[64];
	int stop_at; /* return non-zero on this many records (0: never) */
};

static int conf_collect(void *arg, const struct lr_record *r)
{
	struct conf_recs *c = arg;
	if (c->n < 64) {
		c->seqs[c->n] = r->seq;
		c->lens[c->n] = r->len;
		size_t n = r->len < 63 ? r->len : 63;
		memcpy(c->data[c->n], r->data, n);
		c->data[c->n][n] = 0;
	}
	if (!c->n)
		c->first = r->seq;
	c->last = r->seq;
	c->n++;
	return c->stop_at && c->n == (uint64_t)c->stop_at ? 7 : 0;
}

static int conf_append_str(struct lr_store *s, const char *name, uint64_t expected,
			   const char *str)
{
	struct lr_err e;
	int rc = lr_store_append(s, name, expected, str, strlen(str), &e);
	if (rc)
		fprintf(stderr, "append: %s\n", e.msg);
	return rc;
}

static uint64_t conf_tip(struct lr_store *s, const char *name)
{
	struct lr_err e;
	uint64_t tip = 999999;
	if (lr_store_tip(s, name, &tip, &e))
		fprintf(stderr, "tip: %s\n", e.msg);
	return tip;
}

static void conf_fill(unsigned char *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
}

struct conf_names {
	int n;
	char names[16][64];
	int stop_at;
};

static int conf_name_cb(void *arg, const char *name)
{
	struct conf_names *c = arg;
	if (c->n < 16)
		snprintf(c->names[c->n], sizeof c->names[0], "%s", name);
	c->n++;
	return c->stop_at && c->n == c->stop_at ? 5 : 0;
}

/* ---- ledger ---- */

static void conf_ledger_order(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	char buf[16];
	CHECK_EQ_INT(conf_tip(s, "l/order"), 0);
	for (int i = 1; i <= 5; i++) {
		snprintf(buf, sizeof buf, "r%d", i);
		CHECK_EQ_INT(conf_append_str(s, "l/order", (uint64_t)i - 1, buf), 0);
	}
	CHECK_EQ_INT(conf_tip(s, "l/order"), 5);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "l/order", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 5);
	for (int i = 0; i < 5 && i < (int)r.n; i++) {
		snprintf(buf, sizeof buf, "r%d", i + 1);
		CHECK_EQ_INT(r.seqs[i], i + 1);
		CHECK_EQ_STR(r.data[i], buf);
	}
	/* another ledger is independent */
	CHECK_EQ_INT(conf_tip(s, "l/order2"), 0);
	CHECK_EQ_INT(conf_append_str(s, "l/order2", 0, "x"), 0);
	CHECK_EQ_INT(conf_tip(s, "l/order"), 5);
}

static void conf_ledger_conflicts(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	CHECK_EQ_INT(conf_append_str(s, "l/c", 0, "a"), 0);
	CHECK_EQ_INT(conf_append_str(s, "l/c", 1, "b"), 0);
	/* expected tip too low */
	CHECK_EQ_INT(lr_store_append(s, "l/c", 1, "x", 1, &e), LR_ECONFLICT);
	CHECK(strstr(e.msg, "'l/c'") != NULL);
	CHECK_EQ_INT(lr_store_append(s, "l/c", 0, "x", 1, &e), LR_ECONFLICT);
	/* too high */
	CHECK_EQ_INT(lr_store_append(s, "l/c", 3, "x", 1, &e), LR_ECONFLICT);
	CHECK_EQ_INT(lr_store_append(s, "l/c", 100, "x", 1, &e), LR_ECONFLICT);
	/* absent ledger */
	CHECK_EQ_INT(lr_store_append(s, "l/absent", 1, "x", 1, &e), LR_ECONFLICT);
	CHECK_EQ_INT(conf_tip(s, "l/absent"), 0);
	CHECK_EQ_INT(conf_tip(s, "l/c"), 2);
	/* after delete: the old tip conflicts, 0 creates again */
	CHECK_EQ_INT(lr_store_ledger_delete(s, "l/c", &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "l/c", 2, "x", 1, &e), LR_ECONFLICT);
	CHECK_EQ_INT(conf_append_str(s, "l/c", 0, "new"), 0);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "l/c", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_STR(r.data[0], "new");
}

static int conf_check_big(void *arg, const struct lr_record *r)
{
	const unsigned char *want = arg;
	if (r->seq == 1)
		return r->len == 0 ? 0 : 100;
	if (r->len != ((size_t)1 << 20) || memcmp(r->data, want, r->len) != 0)
		return 101;
	return 0;
}

static void conf_ledger_payloads(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	size_t big = (size_t)1 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 1);
	CHECK_EQ_INT(lr_store_append(s, "l/p", 0, "", 0, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "l/p", 1, p, big, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "l/p", 2, p, big, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "l/p"), 3);
	CHECK_EQ_INT(lr_store_read(s, "l/p", 1, 0, conf_check_big, p, &e), 0);
	free(p);
}

static void conf_ledger_read_bounds(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	char buf[16];
	for (int i = 1; i <= 10; i++) {
		snprintf(buf, sizeof buf, "r%d", i);
		conf_append_str(s, "l/rb", (uint64_t)i - 1, buf);
	}
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 11, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 1000, 5, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 4, 3, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 3);
	CHECK_EQ_INT(r.first, 4);
	CHECK_EQ_INT(r.last, 6);
	CHECK_EQ_STR(r.data[0], "r4");
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 0, 2, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 2);
	CHECK_EQ_INT(r.first, 1);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 9, 100, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 2);
	CHECK_EQ_INT(r.last, 10);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 10, 1, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_STR(r.data[0], "r10");
	/* the largest limit is no limit (no wrap-around) */
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 2, UINT64_MAX, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 9);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/rb", UINT64_MAX, UINT64_MAX, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
	/* a callback's non-zero value stops the read and is returned */
	memset(&r, 0, sizeof r);
	r.stop_at = 2;
	CHECK_EQ_INT(lr_store_read(s, "l/rb", 1, 0, conf_collect, &r, &e), 7);
	CHECK_EQ_INT(r.n, 2);
	/* an absent ledger reads empty */
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/none", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
}

static void conf_ledger_delete(struct lr_store *s, const struct conformance *h)
{
	struct lr_err e;
	conf_append_str(s, "l/d", 0, "a");
	conf_append_str(s, "l/d", 1, "b");
	conf_append_str(s, "l/d2", 0, "keep");
	CHECK_EQ_INT(lr_store_ledger_delete(s, "l/d", &e), 0);
	CHECK_EQ_INT(conf_tip(s, "l/d"), 0);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "l/d", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
	CHECK_EQ_INT(lr_store_ledger_delete(s, "l/d", &e), 0);
	CHECK_EQ_INT(lr_store_ledger_delete(s, "l/never", &e), 0);
	/* a neighbour whose name extends the deleted one is untouched */
	CHECK_EQ_INT(conf_tip(s, "l/d2"), 1);
	CHECK_EQ_INT(lr_store_read(s, "l/d2", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_STR(r.data[0], "keep");
	/* a ledger spanning many pages, between neighbours sharing its prefix */
	char big[600];
	memset(big, 'd', sizeof big);
	int n = h->small ? 300 : 1500;
	CHECK_EQ_INT(conf_append_str(s, "l/dbi", 0, "left"), 0);
	CHECK_EQ_INT(conf_append_str(s, "l/dbig0", 0, "right"), 0);
	for (int i = 0; i < n; i++)
		if (lr_store_append(s, "l/dbig", (uint64_t)i, big, sizeof big, &e))
			break;
	CHECK_EQ_INT(conf_tip(s, "l/dbig"), n);
	CHECK_EQ_INT(lr_store_ledger_delete(s, "l/dbig", &e), 0);
	CHECK_EQ_INT(conf_tip(s, "l/dbig"), 0);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/dbig", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 0);
	CHECK_EQ_INT(conf_tip(s, "l/dbi"), 1);
	CHECK_EQ_INT(conf_tip(s, "l/dbig0"), 1);
	CHECK_EQ_INT(conf_append_str(s, "l/dbig", 0, "fresh"), 0);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/dbig", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 1);
	/* deleted == never written: records start at 1 again */
	CHECK_EQ_INT(conf_append_str(s, "l/d", 0, "again"), 0);
	memset(&r, 0, sizeof r);
	CHECK_EQ_INT(lr_store_read(s, "l/d", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_STR(r.data[0], "again");
}

static void conf_append_definitely(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 0, "ours", 4, &e), 0);
	/* a retry whose first try landed: conflict, but the record equals ours */
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 0, "ours", 4, &e), 0);
	/* someone else's record at expected + 1: a real conflict */
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 0, "theirs", 6, &e), LR_ECONFLICT);
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 0, "our", 3, &e), LR_ECONFLICT);
	/* expected beyond the tip: nothing to compare, a conflict */
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 5, "ours", 4, &e), LR_ECONFLICT);
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 1, "", 0, &e), 0);
	CHECK_EQ_INT(lr_store_append_definitely(s, "l/ad", 1, "", 0, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "l/ad"), 2);
}

struct conf_async {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, rc;
	uint64_t seq;
	char msg[384];
};

static void conf_async_cb(void *arg, int rc, uint64_t seq, const struct lr_err *e)
{
	struct conf_async *a = arg;
	pthread_mutex_lock(&a->mu);
	a->done++;
	a->rc = rc;
	a->seq = seq;
	snprintf(a->msg, sizeof a->msg, "%s", rc && e ? e->msg : "");
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static int conf_async_wait(struct conf_async *a, int n)
{
	pthread_mutex_lock(&a->mu);
	while (a->done < n)
		pthread_cond_wait(&a->cv, &a->mu);
	pthread_mutex_unlock(&a->mu);
	return a->rc;
}

static void conf_append_async(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct conf_async a = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, "" };
	char buf[8] = "async";
	lr_store_append_async(s, "l/as", 0, buf, 5, conf_async_cb, &a);
	memset(buf, 'z', sizeof buf); /* the backend must have copied it */
	CHECK_EQ_INT(conf_async_wait(&a, 1), 0);
	CHECK_EQ_INT(a.seq, 1);
	lr_store_append_async(s, "l/as", 0, "x", 1, conf_async_cb, &a);
	CHECK_EQ_INT(conf_async_wait(&a, 2), LR_ECONFLICT);
	CHECK(strstr(a.msg, "l/as") != NULL);
	lr_store_append_async(s, "l/as", 1, "y", 1, conf_async_cb, &a);
	CHECK_EQ_INT(conf_async_wait(&a, 3), 0);
	CHECK_EQ_INT(a.seq, 2);
	struct conf_recs r = { 0 };
	struct lr_err e;
	CHECK_EQ_INT(lr_store_read(s, "l/as", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 2);
	CHECK_EQ_STR(r.data[0], "async");
	CHECK_EQ_STR(r.data[1], "y");
}

/* Threads race on one ledger, each retrying on conflict. */
struct conf_race {
	struct lr_store *s;
	const char *name;
	int id, n, errors;
};

static void *conf_race_main(void *arg)
{
	struct conf_race *r = arg;
	struct lr_err e;
	char buf[32];
	for (int i = 0; i < r->n; i++) {
		int len = snprintf(buf, sizeof buf, "t%d/%d", r->id, i);
		for (;;) {
			uint64_t tip;
			if (lr_store_tip(r->s, r->name, &tip, &e)) {
				r->errors++;
				return NULL;
			}
			int rc = lr_store_append(r->s, r->name, tip, buf, (size_t)len, &e);
			if (rc == 0)
				break;
			if (rc != LR_ECONFLICT) {
				fprintf(stderr, "race: %s\n", e.msg);
				r->errors++;
				return NULL;
			}
		}
	}
	return NULL;
}

struct conf_race_check {
	int threads, n;
	int *next; /* per thread: the next counter expected */
	uint64_t count;
	int bad;
};

static int conf_race_check_cb(void *arg, const struct lr_record *rec)
{
	struct conf_race_check *c = arg;
	int t, i;
	char buf[32];
	size_t n = rec->len < 31 ? rec->len : 31;
	memcpy(buf, rec->data, n);
	buf[n] = 0;
	c->count++;
	if (rec->seq != c->count || sscanf(buf, "t%d/%d", &t, &i) != 2 || t < 0 ||
	    t >= c->threads || c->next[t] != i)
		c->bad++;
	else
		c->next[t]++;
	return 0;
}

static void conf_concurrent_one_ledger(struct lr_store *s, const struct conformance *h)
{
	int threads = 8, n = h->small ? 25 : 100;
	struct conf_race r[8];
	pthread_t th[8];
	for (int i = 0; i < threads; i++) {
		r[i] = (struct conf_race){ s, "l/race", i, n, 0 };
		pthread_create(&th[i], NULL, conf_race_main, &r[i]);
	}
	int errors = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		errors += r[i].errors;
	}
	CHECK_EQ_INT(errors, 0);
	CHECK_EQ_INT(conf_tip(s, "l/race"), threads * n);
	int next[8] = { 0 };
	struct conf_race_check c = { threads, n, next, 0, 0 };
	struct lr_err e;
	CHECK_EQ_INT(lr_store_read(s, "l/race", 1, 0, conf_race_check_cb, &c, &e), 0);
	CHECK_EQ_INT(c.count, threads * n);
	CHECK_EQ_INT(c.bad, 0);
	for (int i = 0; i < threads; i++)
		CHECK_EQ_INT(next[i], n);
}

/* Each thread owns a few ledgers and appends to them in turn. */
struct conf_many {
	struct lr_store *s;
	int id, ledgers, n, errors;
};

static void *conf_many_main(void *arg)
{
	struct conf_many *m = arg;
	struct lr_err e;
	char name[64], buf[64];
	for (int i = 0; i < m->n; i++) {
		for (int l = 0; l < m->ledgers; l++) {
			snprintf(name, sizeof name, "many/%d/%d", m->id, l);
			int len = snprintf(buf, sizeof buf, "%d.%d.%d", m->id, l, i);
			if (lr_store_append(m->s, name, (uint64_t)i, buf, (size_t)len, &e)) {
				fprintf(stderr, "many: %s\n", e.msg);
				m->errors++;
				return NULL;
			}
		}
	}
	return NULL;
}

struct conf_many_check {
	int id, l;
	uint64_t count;
	int bad;
};

static int conf_many_cb(void *arg, const struct lr_record *rec)
{
	struct conf_many_check *c = arg;
	char want[64];
	int len = snprintf(want, sizeof want, "%d.%d.%llu", c->id, c->l,
			   (unsigned long long)rec->seq - 1);
	c->count++;
	if (rec->seq != c->count || rec->len != (size_t)len || memcmp(rec->data, want, rec->len))
		c->bad++;
	return 0;
}

static void conf_many_ledgers(struct lr_store *s, const struct conformance *h)
{
	int threads = 8, ledgers = 4, n = h->small ? 10 : 40;
	struct conf_many m[8];
	pthread_t th[8];
	for (int i = 0; i < threads; i++) {
		m[i] = (struct conf_many){ s, i, ledgers, n, 0 };
		pthread_create(&th[i], NULL, conf_many_main, &m[i]);
	}
	int errors = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		errors += m[i].errors;
	}
	CHECK_EQ_INT(errors, 0);
	struct lr_err e;
	for (int i = 0; i < threads; i++) {
		for (int l = 0; l < ledgers; l++) {
			char name[64];
			snprintf(name, sizeof name, "many/%d/%d", i, l);
			struct conf_many_check c = { i, l, 0, 0 };
			CHECK_EQ_INT(lr_store_read(s, name, 1, 0, conf_many_cb, &c, &e), 0);
			CHECK_EQ_INT(c.count, n);
			CHECK_EQ_INT(c.bad, 0);
		}
	}
}

/* A read callback may use the store: append elsewhere while reading. */
struct conf_reentry {
	struct lr_store *s;
	int rc;
};

static int conf_reentry_cb(void *arg, const struct lr_record *rec)
{
	struct conf_reentry *r = arg;
	struct lr_err e;
	if (!r->rc)
		r->rc = lr_store_append(r->s, "l/re-copy", rec->seq - 1, rec->data, rec->len, &e);
	return 0;
}

static void conf_read_reentrant(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	for (int i = 0; i < 20; i++)
		conf_append_str(s, "l/re", (uint64_t)i, "rec");
	struct conf_reentry r = { s, 0 };
	CHECK_EQ_INT(lr_store_read(s, "l/re", 1, 0, conf_reentry_cb, &r, &e), 0);
	CHECK_EQ_INT(r.rc, 0);
	CHECK_EQ_INT(conf_tip(s, "l/re-copy"), 20);
}

/* ---- leases ---- */

static int conf_lost_calls;

static void conf_on_lost(struct lr_lease *l, void *arg)
{
	(void)l;
	(void)arg;
	conf_lost_calls++;
}

static void conf_lease_basics(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	struct lr_lease *a = NULL, *b = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "lease/x", &a, &e), 0);
	if (!a)
		return;
	uint64_t e1 = a->epoch;
	CHECK(e1 >= 1);
	CHECK_EQ_INT(a->lost, 0);
	CHECK_EQ_INT(lr_store_acquire(s, "lease/x", &b, &e), LR_ELEASEHELD);
	CHECK(b == NULL);
	char want[64];
	snprintf(want, sizeof want, "epoch %llu", (unsigned long long)e1);
	CHECK(strstr(e.msg, want) != NULL);
	CHECK(strstr(e.msg, "'lease/x'") != NULL);
	/* another name is independent */
	CHECK_EQ_INT(lr_store_acquire(s, "lease/y", &b, &e), 0);
	CHECK_EQ_INT(lr_store_release(b, &e), 0);
	/* release sets lost and calls on_lost once */
	conf_lost_calls = 0;
	a->on_lost = conf_on_lost;
	CHECK_EQ_INT(lr_store_release(a, &e), 0);
	CHECK_EQ_INT(conf_lost_calls, 1);
	CHECK_EQ_INT(lr_store_release(NULL, &e), 0);
	/* epochs strictly increase across release and re-acquire */
	uint64_t prev = e1;
	for (int i = 0; i < 5; i++) {
		a = NULL;
		CHECK_EQ_INT(lr_store_acquire(s, "lease/x", &a, &e), 0);
		if (!a)
			return;
		CHECK(a->epoch > prev);
		prev = a->epoch;
		CHECK_EQ_INT(lr_store_release(a, &e), 0);
	}
}

static void conf_lease_two_handles(struct lr_store *s, const struct conformance *h)
{
	struct lr_err e;
	struct lr_store *s2 = NULL;
	CHECK_EQ_INT(h->open_second(&s2, h->ctx, &e), 0);
	if (!s2)
		return;
	struct lr_lease *a = NULL, *b = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "lease/two", &a, &e), 0);
	CHECK_EQ_INT(lr_store_acquire(s2, "lease/two", &b, &e), LR_ELEASEHELD);
	uint64_t e1 = a ? a->epoch : 0;
	CHECK_EQ_INT(lr_store_release(a, &e), 0);
	CHECK_EQ_INT(lr_store_acquire(s2, "lease/two", &b, &e), 0);
	CHECK(b && b->epoch > e1);
	a = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "lease/two", &a, &e), LR_ELEASEHELD);
	CHECK_EQ_INT(lr_store_release(b, &e), 0);
	/* the second handle sees the first one's data */
	CHECK_EQ_INT(conf_append_str(s, "l/two", 0, "one"), 0);
	CHECK_EQ_INT(conf_tip(s2, "l/two"), 1);
	CHECK_EQ_INT(conf_append_str(s2, "l/two", 1, "two"), 0);
	CHECK_EQ_INT(conf_tip(s, "l/two"), 2);
	lr_store_close(s2);
}

static void conf_lease_takeover(struct lr_store *s, const struct conformance *h)
{
	struct lr_err e;
	uint64_t held = 0;
	int pid = -1;
	/* a first grant, so the child's epoch must beat it */
	struct lr_lease *a = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "lease/dead", &a, &e), 0);
	uint64_t first = a ? a->epoch : 0;
	lr_store_release(a, &e);
	CHECK_EQ_INT(h->spawn_holder(h->ctx, "lease/dead", &held, &pid), 0);
	if (pid <= 0)
		return;
	CHECK(held > first);
	a = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, "lease/dead", &a, &e), LR_ELEASEHELD);
	char want[64];
	snprintf(want, sizeof want, "epoch %llu", (unsigned long long)held);
	CHECK(strstr(e.msg, want) != NULL);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* a networked backend may need its TTL to pass: retry for up to 30 s */
	int rc = LR_ELEASEHELD;
	for (int i = 0; i < 600 && rc == LR_ELEASEHELD; i++) {
		rc = lr_store_acquire(s, "lease/dead", &a, &e);
		if (rc == LR_ELEASEHELD)
			usleep(50000);
	}
	CHECK_EQ_INT(rc, 0);
	CHECK(a && a->epoch > held);
	lr_store_release(a, &e);
}

/* ---- kv ---- */

static void conf_kv_revisions(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	struct lr_bytes v = { 0 };
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/a", &v, &rev, &e), LR_ENOTFOUND);
	CHECK(strstr(e.msg, "'kv/a'") != NULL);
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/a", 0, "one", 3, &rev, &e), 0);
	CHECK_EQ_INT(rev, 1);
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/a", &v, &rev, &e), 0);
	CHECK_EQ_INT(rev, 1);
	CHECK(v.len == 3 && memcmp(v.data, "one", 3) == 0);
	lr_bytes_release(&v);
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/a", 1, "two", 3, &rev, &e), 0);
	CHECK_EQ_INT(rev, 2);
	/* the compare-and-swap table */
	static const struct {
		const char *key;
		uint64_t expected;
	} bad[] = {
		{ "kv/absent", 1 }, /* update of an absent key */
		{ "kv/absent", 7 },
		{ "kv/a", 0 },      /* create of an existing key */
		{ "kv/a", 1 },      /* stale revision */
		{ "kv/a", 3 },      /* future revision */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_EQ_INT(lr_store_kv_put(s, bad[i].key, bad[i].expected, "bad", 3, &rev, &e),
			     LR_ECONFLICT);
		CHECK(strstr(e.msg, bad[i].key) != NULL);
	}
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/absent", &v, &rev, &e), LR_ENOTFOUND);
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/a", &v, &rev, &e), 0);
	CHECK_EQ_INT(rev, 2);
	CHECK(v.len == 3 && memcmp(v.data, "two", 3) == 0);
	lr_bytes_release(&v);
	/* get without a revision pointer */
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/a", &v, NULL, &e), 0);
	lr_bytes_release(&v);
}

static void conf_kv_values(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	size_t big = (size_t)1 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 2);
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/big", 0, p, big, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/empty", 0, "", 0, &rev, &e), 0);
	struct lr_bytes v = { 0 };
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/big", &v, &rev, &e), 0);
	CHECK(v.len == big && memcmp(v.data, p, big) == 0);
	lr_bytes_release(&v);
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/empty", &v, &rev, &e), 0);
	CHECK_EQ_INT(v.len, 0);
	lr_bytes_release(&v);
	free(p);
}

static void conf_kv_keys(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	const char *keys[] = { "k/b", "k/a", "ka", "k/c/d", "j", "l" };
	for (size_t i = 0; i < 6; i++)
		CHECK_EQ_INT(lr_store_kv_put(s, keys[i], 0, "v", 1, NULL, &e), 0);
	struct conf_names n = { 0 };
	CHECK_EQ_INT(lr_store_kv_keys(s, "k/", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 3);
	CHECK_EQ_STR(n.names[0], "k/a");
	CHECK_EQ_STR(n.names[1], "k/b");
	CHECK_EQ_STR(n.names[2], "k/c/d");
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_kv_keys(s, "", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 6);
	CHECK_EQ_STR(n.names[0], "j");
	CHECK_EQ_STR(n.names[1], "k/a");
	CHECK_EQ_STR(n.names[4], "ka");
	CHECK_EQ_STR(n.names[5], "l");
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_kv_keys(s, "k", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 4);
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_kv_keys(s, "zz", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 0);
	memset(&n, 0, sizeof n);
	n.stop_at = 2;
	CHECK_EQ_INT(lr_store_kv_keys(s, "", conf_name_cb, &n, &e), 5);
	CHECK_EQ_INT(n.n, 2);
}

static void conf_kv_delete(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	uint64_t rev = 0;
	struct lr_bytes v = { 0 };
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/d", 0, "x", 1, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/d", rev, "y", 1, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_kv_delete(s, "kv/d", &e), 0);
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/d", &v, &rev, &e), LR_ENOTFOUND);
	CHECK_EQ_INT(lr_store_kv_delete(s, "kv/d", &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "kv/d", 0, "z", 1, &rev, &e), 0);
	CHECK(rev >= 1);
	CHECK_EQ_INT(lr_store_kv_get(s, "kv/d", &v, &rev, &e), 0);
	CHECK(v.len == 1 && memcmp(v.data, "z", 1) == 0);
	lr_bytes_release(&v);
	struct conf_names n = { 0 };
	CHECK_EQ_INT(lr_store_kv_delete(s, "kv/d", &e), 0);
	CHECK_EQ_INT(lr_store_kv_keys(s, "kv/", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 0);
}

/* ---- blobs ---- */

static void conf_blobs(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	struct lr_err e;
	struct lr_bytes b = { 0 };
	uint64_t len = 0;
	CHECK_EQ_INT(lr_store_blob_get(s, "b/x", &b, &e), LR_ENOTFOUND);
	CHECK(strstr(e.msg, "'b/x'") != NULL);
	CHECK_EQ_INT(lr_store_blob_stat(s, "b/x", &len, &e), LR_ENOTFOUND);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/x", "hello", 5, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/empty", "", 0, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/y/z", "zz", 2, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, "c", "c", 1, &e), 0);
	CHECK_EQ_INT(lr_store_blob_stat(s, "b/x", &len, &e), 0);
	CHECK_EQ_INT(len, 5);
	CHECK_EQ_INT(lr_store_blob_get(s, "b/x", &b, &e), 0);
	CHECK(b.len == 5 && memcmp(b.data, "hello", 5) == 0);
	lr_bytes_release(&b);
	CHECK_EQ_INT(lr_store_blob_get(s, "b/empty", &b, &e), 0);
	CHECK_EQ_INT(b.len, 0);
	lr_bytes_release(&b);
	/* same bytes: a no-op; different bytes: a conflict, the original intact */
	CHECK_EQ_INT(lr_store_blob_put(s, "b/x", "hello", 5, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/x", "hellO", 5, &e), LR_EBLOBCONFLICT);
	CHECK(strstr(e.msg, "'b/x'") != NULL);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/x", "hello!", 6, &e), LR_EBLOBCONFLICT);
	CHECK_EQ_INT(lr_store_blob_put(s, "b/empty", "x", 1, &e), LR_EBLOBCONFLICT);
	CHECK_EQ_INT(lr_store_blob_get(s, "b/x", &b, &e), 0);
	CHECK(b.len == 5 && memcmp(b.data, "hello", 5) == 0);
	lr_bytes_release(&b);
	struct conf_names n = { 0 };
	CHECK_EQ_INT(lr_store_blob_list(s, "b/", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 3);
	CHECK_EQ_STR(n.names[0], "b/empty");
	CHECK_EQ_STR(n.names[1], "b/x");
	CHECK_EQ_STR(n.names[2], "b/y/z");
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_blob_list(s, "", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 4);
	CHECK_EQ_INT(lr_store_blob_delete(s, "b/x", &e), 0);
	CHECK_EQ_INT(lr_store_blob_delete(s, "b/x", &e), 0);
	CHECK_EQ_INT(lr_store_blob_get(s, "b/x", &b, &e), LR_ENOTFOUND);
	/* after delete, other bytes may take the key */
	CHECK_EQ_INT(lr_store_blob_put(s, "b/x", "other", 5, &e), 0);
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_blob_list(s, "b/y", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 1);
}

/* A temporary file of n pseudo-random bytes (seed), rewound. */
static int conf_tmpfile(size_t n, unsigned seed, size_t flip)
{
	FILE *f = tmpfile();
	if (!f)
		return -1;
	int fd = dup(fileno(f));
	fclose(f);
	unsigned char *buf = malloc(1 << 20);
	for (size_t off = 0, i = 0; off < n; i++) {
		size_t k = n - off < (1 << 20) ? n - off : (1 << 20);
		conf_fill(buf, k, seed + (unsigned)i);
		if (flip >= off && flip < off + k)
			buf[flip - off] ^= 0x5a;
		if (write(fd, buf, k) != (ssize_t)k) {
			close(fd);
			fd = -1;
			break;
		}
		off += k;
	}
	free(buf);
	if (fd >= 0)
		lseek(fd, 0, SEEK_SET);
	return fd;
}

static int conf_same_fd(int a, int b, size_t n)
{
	unsigned char *x = malloc(1 << 20), *y = malloc(1 << 20);
	int same = 1;
	lseek(a, 0, SEEK_SET);
	lseek(b, 0, SEEK_SET);
	for (size_t off = 0; off < n && same;) {
		size_t k = n - off < (1 << 20) ? n - off : (1 << 20);
		if (read(a, x, k) != (ssize_t)k || read(b, y, k) != (ssize_t)k || memcmp(x, y, k))
			same = 0;
		off += k;
	}
	char extra;
	if (same && read(b, &extra, 1) != 0)
		same = 0;
	free(x);
	free(y);
	return same;
}

static void conf_blob_fd(struct lr_store *s, const struct conformance *h)
{
	struct lr_err e;
	size_t n = h->small ? (size_t)16 << 20 : (size_t)64 << 20;
	int src = conf_tmpfile(n, 3, (size_t)-1);
	CHECK(src >= 0);
	if (src < 0)
		return;
	CHECK_EQ_INT(lr_store_blob_put_fd(s, "big/blob", src, n, &e), 0);
	uint64_t len = 0;
	CHECK_EQ_INT(lr_store_blob_stat(s, "big/blob", &len, &e), 0);
	CHECK_EQ_INT(len, n);
	int dst = conf_tmpfile(0, 0, (size_t)-1);
	len = 0;
	CHECK_EQ_INT(lr_store_blob_get_fd(s, "big/blob", dst, &len, &e), 0);
	CHECK_EQ_INT(len, n);
	CHECK(conf_same_fd(src, dst, n));
	/* the same bytes again through an fd: a no-op */
	lseek(src, 0, SEEK_SET);
	CHECK_EQ_INT(lr_store_blob_put_fd(s, "big/blob", src, n, &e), 0);
	/* one byte different near the end: a conflict, the original intact */
	int other = conf_tmpfile(n, 3, n - 10);
	CHECK_EQ_INT(lr_store_blob_put_fd(s, "big/blob", other, n, &e), LR_EBLOBCONFLICT);
	close(dst);
	dst = conf_tmpfile(0, 0, (size_t)-1);
	CHECK_EQ_INT(lr_store_blob_get_fd(s, "big/blob", dst, &len, &e), 0);
	CHECK(conf_same_fd(src, dst, n));
	/* a source that ends early stores nothing */
	int shortf = conf_tmpfile(1000, 4, (size_t)-1);
	CHECK(lr_store_blob_put_fd(s, "big/short", shortf, 2000, &e) != 0);
	CHECK_EQ_INT(lr_store_blob_stat(s, "big/short", &len, &e), LR_ENOTFOUND);
	close(shortf);
	close(other);
	close(dst);
	close(src);
}

/* ---- names ---- */

struct conf_cbrc {
	int rc, called;
};

static void conf_cbrc_cb(void *arg, int rc, uint64_t seq, const struct lr_err *e)
{
	(void)seq;
	(void)e;
	struct conf_cbrc *c = arg;
	c->rc = rc;
	c->called++;
}

static int conf_nop_rec(void *arg, const struct lr_record *r)
{
	(void)arg;
	(void)r;
	return 0;
}

static void conf_names_refused(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	char long513[514];
	memset(long513, 'a', 513);
	long513[513] = 0;
	const char *bad[] = { "", "Upper", "..", ".", "a//b", "a/", "/a", "a/../b", "a b",
			      "-a", "a/.b", long513 };
	int fd = conf_tmpfile(4, 5, (size_t)-1);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *nm = bad[i];
		struct lr_err e;
		uint64_t u = 0;
		struct lr_bytes b = { 0 };
		struct lr_lease *l = NULL;
		struct conf_cbrc cr = { 0, 0 };
		CHECK_EQ_INT(lr_store_append(s, nm, 0, "x", 1, &e), -EINVAL);
		lr_store_append_async(s, nm, 0, "x", 1, conf_cbrc_cb, &cr);
		CHECK(cr.called == 1 && cr.rc == -EINVAL);
		CHECK_EQ_INT(lr_store_append_definitely(s, nm, 0, "x", 1, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_read(s, nm, 1, 0, conf_nop_rec, NULL, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_tip(s, nm, &u, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_ledger_delete(s, nm, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_acquire(s, nm, &l, &e), -EINVAL);
		CHECK(l == NULL);
		CHECK_EQ_INT(lr_store_kv_get(s, nm, &b, &u, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_kv_put(s, nm, 0, "x", 1, &u, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_kv_delete(s, nm, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_put(s, nm, "x", 1, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_put_fd(s, nm, fd, 4, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_get(s, nm, &b, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_get_fd(s, nm, fd, &u, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_stat(s, nm, &u, &e), -EINVAL);
		CHECK_EQ_INT(lr_store_blob_delete(s, nm, &e), -EINVAL);
	}
	close(fd);
	/* nothing was written */
	struct conf_names n = { 0 };
	struct lr_err e;
	CHECK_EQ_INT(lr_store_kv_keys(s, "", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(lr_store_blob_list(s, "", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 0);
}

/* 512 bytes is the longest name: every primitive takes it. */
static void conf_names_longest(struct lr_store *s, const struct conformance *h)
{
	(void)h;
	char nm[513], nm2[513];
	memset(nm, 'a', 512);
	nm[512] = 0;
	nm[100] = '/';
	memcpy(nm2, nm, 513);
	nm2[511] = 'b';
	struct lr_err e;
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_append(s, nm, 0, "one", 3, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, nm, 1, "two", 3, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, nm2, 0, "other", 5, &e), 0);
	CHECK_EQ_INT(conf_tip(s, nm), 2);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, nm, 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT(r.n, 2);
	CHECK_EQ_STR(r.data[1], "two");
	CHECK_EQ_INT(lr_store_kv_put(s, nm, 0, "v", 1, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, nm, 1, "w", 1, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "aaa", 0, "v", 1, &rev, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, nm, "blob", 4, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, nm, "blob", 4, &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, nm, "blub", 4, &e), LR_EBLOBCONFLICT);
	struct lr_bytes b = { 0 };
	CHECK_EQ_INT(lr_store_kv_get(s, nm, &b, &rev, &e), 0);
	CHECK(rev == 2 && b.len == 1 && memcmp(b.data, "w", 1) == 0);
	lr_bytes_release(&b);
	CHECK_EQ_INT(lr_store_blob_get(s, nm, &b, &e), 0);
	CHECK(b.len == 4 && memcmp(b.data, "blob", 4) == 0);
	lr_bytes_release(&b);
	struct conf_names n = { 0 };
	char pfx[120];
	memcpy(pfx, nm, 101);
	pfx[101] = 0;
	CHECK_EQ_INT(lr_store_kv_keys(s, pfx, conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 1);
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_kv_keys(s, "", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 2);
	CHECK_EQ_STR(n.names[0], "aaa");
	memset(&n, 0, sizeof n);
	CHECK_EQ_INT(lr_store_blob_list(s, "a", conf_name_cb, &n, &e), 0);
	CHECK_EQ_INT(n.n, 1);
	CHECK_EQ_INT(lr_store_ledger_delete(s, nm, &e), 0);
	CHECK_EQ_INT(conf_tip(s, nm), 0);
	CHECK_EQ_INT(conf_tip(s, nm2), 1);
	struct lr_lease *l = NULL;
	CHECK_EQ_INT(lr_store_acquire(s, nm, &l, &e), 0);
	CHECK_EQ_INT(lr_store_release(l, &e), 0);
}

/* ---- the runner ---- */

typedef void (*conf_case_fn)(struct lr_store *s, const struct conformance *h);

static void conf_case(const struct conformance *h, const char *name, conf_case_fn fn,
		      const char *skip)
{
	test_count++;
	if (skip) {
		printf("ok - %s %s # SKIP %s\n", h->backend, name, skip);
		fflush(stdout);
		return;
	}
	test_failed_now = 0;
	struct lr_store *s = NULL;
	struct lr_err e;
	int rc = h->open(&s, h->ctx, &e);
	if (rc) {
		fprintf(stderr, "%s: open: %s\n", name, e.msg);
		test_failed_now = 1;
	} else {
		fn(s, h);
		lr_store_close(s);
	}
	if (test_failed_now)
		test_failures++;
	printf("%s - %s %s\n", test_failed_now ? "not ok" : "ok", h->backend, name);
	fflush(stdout);
}

static void conformance_run(const struct conformance *h)
{
	conf_case(h, "ledger order", conf_ledger_order, NULL);
	conf_case(h, "ledger conflicts", conf_ledger_conflicts, NULL);
	conf_case(h, "ledger zero-length and 1 MiB payloads", conf_ledger_payloads, NULL);
	conf_case(h, "ledger read bounds", conf_ledger_read_bounds, NULL);
	conf_case(h, "ledger delete is never written", conf_ledger_delete, NULL);
	conf_case(h, "append definitely", conf_append_definitely, NULL);
	conf_case(h, "append async", conf_append_async, NULL);
	conf_case(h, "concurrent appends to one ledger", conf_concurrent_one_ledger, h->no_race);
	conf_case(h, "many ledgers at once", conf_many_ledgers, NULL);
	conf_case(h, "read callback may use the store", conf_read_reentrant, NULL);
	conf_case(h, "lease epochs, held, release", conf_lease_basics, NULL);
	conf_case(h, "lease across two handles", conf_lease_two_handles,
		  h->open_second ? NULL : "no second handle on one store");
	conf_case(h, "lease takeover after the holder dies", conf_lease_takeover,
		  h->spawn_holder ? NULL : "no holder process");
	conf_case(h, "kv revisions and compare-and-swap", conf_kv_revisions, NULL);
	conf_case(h, "kv zero-length and 1 MiB values", conf_kv_values, NULL);
	conf_case(h, "kv keys by prefix, sorted", conf_kv_keys, NULL);
	conf_case(h, "kv delete then create", conf_kv_delete, NULL);
	conf_case(h, "blobs put get stat list delete", conf_blobs, NULL);
	conf_case(h, "blob streamed through fds", conf_blob_fd, NULL);
	conf_case(h, "names outside the grammar are refused", conf_names_refused, NULL);
	conf_case(h, "512-byte names", conf_names_longest, NULL);
}

#endif
