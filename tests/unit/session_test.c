/*
 * session_test.c — host sessions on a real loop, over the memory store
 * and a real LMDB store: emission order, durable before delivery,
 * overflow of both kinds, filters, the fault latch, held leases, a fenced
 * writer, close, the catalog, and the memory of idle sessions.
 */
#include "../../host/host.h"
#include "../../storage/storage.h"
#include "test.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char base[256];
static int nroot;
static char last_root[300];

static struct lr_store *fresh(int lmdb)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	if (!lmdb) {
		if (lr_store_memory_open(&s, &e) != 0)
			abort();
		return s;
	}
	snprintf(last_root, sizeof last_root, "%s/r%d", base, nroot++);
	struct lr_lmdb_opts o = { last_root, 0, 0, 1, NULL };
	if (lr_store_lmdb_open(&o, &s, &e) != 0) {
		fprintf(stderr, "lmdb: %s\n", e.msg);
		abort();
	}
	return s;
}

/* A second handle on the last LMDB root. */
static struct lr_store *second(void)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	struct lr_lmdb_opts o = { last_root, 0, 0, 1, NULL };
	if (lr_store_lmdb_open(&o, &s, &e) != 0)
		abort();
	return s;
}

static void opened(struct lr_session_open *o)
{
	(void)o;
}

/* Opens sid ("" for new) and runs the loop until it is done. */
static int open_session(struct lr_loop *loop, struct lr_store *st, const char *sid,
			struct lr_session **out, char *err)
{
	struct lr_session_open o;
	memset(&o, 0, sizeof o);
	o.loop = loop;
	o.store = st;
	snprintf(o.sid, sizeof o.sid, "%s", sid);
	o.done = opened;
	int rc = lr_session_open(&o);
	if (rc == 0) {
		lr_loop_run(loop);
		rc = o.rc;
	}
	if (err)
		snprintf(err, 384, "%s", o.err.msg);
	*out = o.session;
	return rc;
}

static void closed(void *arg)
{
	(*(int *)arg)++;
}

static void close_session(struct lr_loop *loop, struct lr_session *s)
{
	int n = 0;
	CHECK_EQ_INT(lr_session_close(s, closed, &n), 0);
	lr_loop_run(loop);
	CHECK_EQ_INT(n, 1);
	lr_session_free(s, NULL, NULL);
}

/* What a subscription received, checked against the store at delivery time. */
struct seen {
	struct lr_session_sub *sub;
	struct lr_store *store;
	char sid[37];
	int n;
	char json[32][64];
	uint64_t seq[32];
	int end;
	uint64_t catch_up;
	int not_durable; /* an enduring event delivered before the ledger had it */
	int notified;
};

static void on_notify(void *arg)
{
	struct seen *w = arg;
	w->notified++;
	struct lr_session_event *ev;
	int rc;
	while ((rc = lr_session_sub_next(w->sub, &ev, &w->catch_up)) == 1) {
		if (w->n < 32) {
			snprintf(w->json[w->n], sizeof w->json[w->n], "%s", ev->data);
			w->seq[w->n] = ev->seq;
			w->n++;
		}
		if (ev->seq) {
			char name[64];
			uint64_t tip = 0;
			struct lr_err e;
			snprintf(name, sizeof name, "sessions/%.36s", w->sid);
			lr_store_tip(w->store, name, &tip, &e);
			if (tip < ev->seq)
				w->not_durable++;
		}
		lr_session_event_unref(ev);
	}
	if (rc)
		w->end = rc;
}

static void subscribe(struct lr_session *s, struct lr_store *st, struct seen *w, int eph,
		      size_t buffer, const char *const *loops, size_t nloops)
{
	memset(w, 0, sizeof *w);
	w->store = st;
	snprintf(w->sid, sizeof w->sid, "%s", lr_session_id(s));
	struct lr_session_filter f = { loops == NULL, loops, nloops, eph, buffer };
	CHECK_EQ_INT(lr_session_subscribe(s, &f, on_notify, w, &w->sub), 0);
}

struct waited {
	int calls, rc;
	uint64_t seq;
	char msg[400];
};

static void on_done(void *arg, int rc, uint64_t seq, const char *msg)
{
	struct waited *w = arg;
	w->calls++;
	w->rc = rc;
	w->seq = seq;
	snprintf(w->msg, sizeof w->msg, "%s", msg ? msg : "");
}

static int emit(struct lr_session *s, const char *json, const char *loop, int kind, int enduring,
		struct waited *w)
{
	struct lr_session_emit a = { json, strlen(json), loop, kind, enduring, NULL,
				     w ? on_done : NULL, w };
	struct lr_session_emission *em;
	const char *msg;
	return lr_session_emit(s, &a, &em, &msg);
}

static void order_on(int lmdb)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(lmdb);
	struct lr_session *s;
	char err[384];
	CHECK_EQ_INT(open_session(loop, st, "", &s, err), 0);
	CHECK_EQ_INT(lr_session_tip(s), 1);
	CHECK(lr_session_epoch(s) >= 1);
	struct seen all, dur;
	subscribe(s, st, &all, 1, 64, NULL, 0);
	subscribe(s, st, &dur, 0, 64, NULL, 0);
	struct waited w1 = { 0 }, w2 = { 0 }, wc = { 0 };
	CHECK_EQ_INT(emit(s, "{\"e\":1}", "a", LR_SESSION_EVENT, 1, &w1), 0);
	CHECK_EQ_INT(emit(s, "{\"x\":1}", "a", LR_SESSION_EVENT, 0, NULL), 0);
	CHECK_EQ_INT(emit(s, "{\"c\":1}", NULL, LR_SESSION_COMMAND, 0, &wc), 0);
	CHECK_EQ_INT(emit(s, "{\"e\":2}", NULL, LR_SESSION_EVENT, 1, &w2), 0);
	CHECK_EQ_INT(emit(s, "{\"x\":2}", "a", LR_SESSION_EVENT, 0, NULL), 0);
	/* Nothing is durable yet: the ephemeral events wait behind the enduring one. */
	CHECK_EQ_INT(all.n, 0);
	lr_loop_run(loop);
	CHECK_EQ_INT(all.n, 4);
	CHECK_EQ_STR(all.json[0], "{\"e\":1}");
	CHECK_EQ_INT(all.seq[0], 2);
	CHECK_EQ_STR(all.json[1], "{\"x\":1}");
	CHECK_EQ_INT(all.seq[1], 0);
	CHECK_EQ_STR(all.json[2], "{\"e\":2}");
	CHECK_EQ_INT(all.seq[2], 4);
	CHECK_EQ_STR(all.json[3], "{\"x\":2}");
	CHECK_EQ_INT(dur.n, 2);
	CHECK_EQ_INT(all.not_durable + dur.not_durable, 0);
	CHECK_EQ_INT(w1.calls, 1);
	CHECK_EQ_INT(w1.seq, 2);
	CHECK_EQ_INT(wc.seq, 3);
	CHECK_EQ_INT(w2.seq, 4);
	CHECK_EQ_INT(lr_session_tip(s), 4);
	/* An ephemeral event with nothing ahead is delivered at once. */
	CHECK_EQ_INT(emit(s, "{\"x\":3}", NULL, LR_SESSION_EVENT, 0, NULL), 0);
	CHECK_EQ_INT(all.n, 5);
	/* Many without waiters, then close: all land, subs end after their buffers. */
	for (int i = 0; i < 20; i++)
		CHECK_EQ_INT(emit(s, "{\"m\":1}", NULL, LR_SESSION_EVENT, 1, NULL), 0);
	lr_session_sub_free(dur.sub);
	int n = 0;
	CHECK_EQ_INT(lr_session_close(s, closed, &n), 0);
	const char *msg;
	struct lr_session_emit late = { "{}", 2, NULL, LR_SESSION_EVENT, 1, NULL, NULL, NULL };
	CHECK_EQ_INT(lr_session_emit(s, &late, NULL, &msg), LR_ECLOSED);
	lr_loop_run(loop);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(all.n, 25);
	CHECK_EQ_INT(all.end, LR_ECLOSED);
	CHECK_EQ_INT(lr_session_tip(s), 24);
	struct lr_catalog_entry ce;
	struct lr_err e;
	CHECK_EQ_INT(lr_catalog_get(st, lr_session_id(s), &ce, &e), 0);
	CHECK_EQ_INT(ce.last_seq, 24);
	/* The lease is free again: a reopen fences at a greater epoch. */
	char sid[37];
	snprintf(sid, sizeof sid, "%s", lr_session_id(s));
	uint64_t ep = lr_session_epoch(s);
	lr_session_sub_free(all.sub);
	lr_session_free(s, NULL, NULL);
	CHECK_EQ_INT(open_session(loop, st, sid, &s, err), 0);
	CHECK(lr_session_epoch(s) > ep);
	CHECK_EQ_INT(lr_session_tip(s), 25);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(order_and_durability_memory)
{
	order_on(0);
}

TEST(order_and_durability_lmdb)
{
	order_on(1);
}

static void count_notify(void *arg)
{
	(*(int *)arg)++;
}

static void overflow_on(int lmdb)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(lmdb);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	/* Ephemeral overflow: dropped and counted; the subscription goes on. */
	struct lr_session_filter f = { 1, NULL, 0, 1, 2 };
	struct lr_session_sub *sub;
	int notes = 0;
	CHECK_EQ_INT(lr_session_subscribe(s, &f, count_notify, &notes, &sub), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(emit(s, "{\"x\":1}", NULL, LR_SESSION_EVENT, 0, NULL), 0);
	CHECK_EQ_INT(lr_session_sub_dropped(sub), 3);
	struct lr_session_event *ev;
	uint64_t cu;
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), 1);
	lr_session_event_unref(ev);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), 1);
	lr_session_event_unref(ev);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), 0);
	/* Enduring overflow: the subscription ends, naming the seq to catch up from. */
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(emit(s, "{\"e\":1}", NULL, LR_SESSION_EVENT, 1, NULL), 0);
	lr_loop_run(loop);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), 1);
	CHECK_EQ_INT(ev->seq, 2);
	lr_session_event_unref(ev);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), 1);
	CHECK_EQ_INT(ev->seq, 3);
	lr_session_event_unref(ev);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), LR_ETOOBIG);
	CHECK_EQ_INT(cu, 4);
	CHECK(notes >= 5);
	/* Later events do not revive it. */
	CHECK_EQ_INT(emit(s, "{\"x\":1}", NULL, LR_SESSION_EVENT, 0, NULL), 0);
	CHECK_EQ_INT(lr_session_sub_next(sub, &ev, &cu), LR_ETOOBIG);
	lr_session_sub_free(sub);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(overflow_memory)
{
	overflow_on(0);
}

TEST(overflow_lmdb)
{
	overflow_on(1);
}

TEST(filters)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(0);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	const char *loops[] = { "assistant" };
	struct seen f;
	subscribe(s, st, &f, 1, 16, loops, 1);
	emit(s, "{\"l\":\"assistant\"}", "assistant", LR_SESSION_EVENT, 0, NULL);
	emit(s, "{\"l\":\"assistant#2\"}", "assistant#2", LR_SESSION_EVENT, 0, NULL);
	emit(s, "{\"l\":\"assistants\"}", "assistants", LR_SESSION_EVENT, 0, NULL);
	emit(s, "{\"l\":\"other\"}", "other", LR_SESSION_EVENT, 1, NULL);
	emit(s, "{\"l\":null}", NULL, LR_SESSION_EVENT, 1, NULL);
	lr_loop_run(loop);
	CHECK_EQ_INT(f.n, 3);
	CHECK_EQ_STR(f.json[0], "{\"l\":\"assistant\"}");
	CHECK_EQ_STR(f.json[1], "{\"l\":\"assistant#2\"}");
	CHECK_EQ_STR(f.json[2], "{\"l\":null}");
	lr_session_sub_free(f.sub);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

static void fault_on(int lmdb)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(lmdb);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	struct seen w;
	subscribe(s, st, &w, 1, 16, NULL, 0);
	lr_store_inject_failure(st, 1);
	struct waited a = { 0 }, b = { 0 }, c = { 0 };
	emit(s, "{\"n\":1}", NULL, LR_SESSION_EVENT, 1, &a);
	emit(s, "{\"n\":2}", NULL, LR_SESSION_EVENT, 1, &b);
	emit(s, "{\"x\":1}", NULL, LR_SESSION_EVENT, 0, NULL);
	emit(s, "{\"n\":3}", NULL, LR_SESSION_COMMAND, 0, &c);
	lr_loop_run(loop);
	CHECK_EQ_INT(a.rc, 0);
	CHECK_EQ_INT(a.seq, 2);
	CHECK_EQ_INT(b.rc, LR_EREFUSED);
	CHECK(strstr(b.msg, "is faulted: ") != NULL);
	CHECK(strstr(b.msg, "injected failure") != NULL);
	CHECK_EQ_INT(c.rc, LR_EREFUSED);
	CHECK_EQ_INT(w.n, 1); /* only the durable one; the ephemeral behind the failure is dropped */
	CHECK(lr_session_fault(s) != NULL);
	const char *msg;
	struct lr_session_emit late = { "{}", 2, NULL, LR_SESSION_EVENT, 0, NULL, NULL, NULL };
	CHECK_EQ_INT(lr_session_emit(s, &late, NULL, &msg), LR_EREFUSED);
	CHECK(strstr(msg, "is faulted") != NULL);
	lr_store_inject_failure(st, -1);
	CHECK_EQ_INT(lr_session_emit(s, &late, NULL, &msg), LR_EREFUSED);
	uint64_t tip;
	struct lr_err e;
	char name[64];
	snprintf(name, sizeof name, "sessions/%.36s", lr_session_id(s));
	CHECK_EQ_INT(lr_store_tip(st, name, &tip, &e), 0);
	CHECK_EQ_INT(tip, 2); /* nothing after the failure landed */
	lr_session_sub_free(w.sub);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(fault_on_injected_failure_memory)
{
	fault_on(0);
}

TEST(fault_on_injected_failure_lmdb)
{
	fault_on(1);
}

TEST(held_and_not_found)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(1), *st2 = second();
	struct lr_session *s, *t;
	char err[384];
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	CHECK_EQ_INT(open_session(loop, st2, lr_session_id(s), &t, err), LR_ELEASEHELD);
	CHECK(t == NULL);
	CHECK(strstr(err, lr_session_id(s)) != NULL);
	CHECK(strstr(err, "held") != NULL);
	CHECK_EQ_INT(open_session(loop, st2, "00000000-0000-4000-8000-000000000000", &t, err),
		     LR_ENOTFOUND);
	CHECK(strstr(err, "not found") != NULL);
	struct lr_session_open o;
	memset(&o, 0, sizeof o);
	o.loop = loop;
	o.store = st;
	snprintf(o.sid, sizeof o.sid, "NOT-A-UUID");
	o.done = opened;
	CHECK_EQ_INT(lr_session_open(&o), -EINVAL);
	close_session(loop, s);
	lr_store_close(st2);
	lr_store_close(st);
	/* The memory store: a second open on the same handle is held too. */
	st = fresh(0);
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	CHECK_EQ_INT(open_session(loop, st, lr_session_id(s), &t, err), LR_ELEASEHELD);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(stale_writer_fenced)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(1);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	/* Another writer's fence lands under us (as after a lease expiry we missed). */
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	unsigned char body[8] = { 0 };
	uint64_t ep = lr_session_epoch(s) + 3;
	for (int i = 0; i < 8; i++)
		body[i] = (unsigned char)(ep >> (8 * i));
	char fid[24], name[64];
	snprintf(fid, sizeof fid, "%llu", (unsigned long long)ep);
	snprintf(name, sizeof name, "sessions/%.36s", lr_session_id(s));
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, fid, strlen(fid), body, 8), 0);
	CHECK_EQ_INT(lr_store_append(st, name, 1, b.data, b.len, &e), 0);
	struct waited a = { 0 };
	emit(s, "{}", NULL, LR_SESSION_EVENT, 1, &a);
	lr_loop_run(loop);
	CHECK_EQ_INT(a.rc, LR_EREFUSED);
	CHECK(strstr(a.msg, "was fenced by epoch") != NULL);
	CHECK(lr_session_fault(s) != NULL);
	lr_buf_release(&b);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

/*
 * The lease store forgot epochs (a fence in the journal from an epoch above
 * the one it hands out, as after nats-server lost a lease bucket write in
 * make soak): the session still opens, with an epoch above every fence, and
 * takes appends; before, every open failed "was fenced by epoch N".
 */
static void lease_store_behind(int lmdb)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(lmdb);
	struct lr_session *s, *t;
	char err[384], sid[40];
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	snprintf(sid, sizeof sid, "%s", lr_session_id(s));
	uint64_t ep = lr_session_epoch(s) + 5;
	close_session(loop, s);
	/* a fence of an epoch the lease store does not know, at the tip */
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	unsigned char body[8] = { 0 };
	for (int i = 0; i < 8; i++)
		body[i] = (unsigned char)(ep >> (8 * i));
	char fid[24], name[64];
	snprintf(fid, sizeof fid, "%llu", (unsigned long long)ep);
	snprintf(name, sizeof name, "sessions/%s", sid);
	struct lr_err e;
	uint64_t tip = 0;
	CHECK_EQ_INT(lr_store_tip(st, name, &tip, &e), 0);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, fid, strlen(fid), body, 8), 0);
	CHECK_EQ_INT(lr_store_append(st, name, tip, b.data, b.len, &e), 0);
	lr_buf_release(&b);
	CHECK_EQ_INT(open_session(loop, st, sid, &t, err), 0);
	if (!t) {
		fprintf(stderr, "reopen: %s\n", err);
	} else {
		CHECK(lr_session_epoch(t) > ep);
		struct waited a = { 0 };
		emit(t, "{}", NULL, LR_SESSION_EVENT, 1, &a);
		lr_loop_run(loop);
		CHECK_EQ_INT(a.rc, 0);
		CHECK(lr_session_fault(t) == NULL);
		close_session(loop, t);
	}
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(lease_store_behind_memory)
{
	lease_store_behind(0);
}

TEST(lease_store_behind_lmdb)
{
	lease_store_behind(1);
}

TEST(catalog_coalesced)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(1);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	for (int i = 1; i <= 50; i++) {
		struct lr_session_catalog c = { LR_SCAT_INPUT_TOKENS | LR_SCAT_COST, 0, 0, NULL, 0,
						(uint64_t)i, 0, 0, i * 0.5, NULL, NULL, 0 };
		CHECK_EQ_INT(lr_session_catalog(s, &c), 0);
	}
	struct lr_session_catalog t = { LR_SCAT_TITLE | LR_SCAT_STATE, LR_CATALOG_RUNNING, 0,
					"fix the build", 0, 0, 0, 0, 0, NULL, NULL, 0 };
	CHECK_EQ_INT(lr_session_catalog(s, &t), 0);
	emit(s, "{}", NULL, LR_SESSION_EVENT, 1, NULL);
	lr_loop_run(loop);
	struct lr_catalog_entry ce;
	struct lr_err e;
	CHECK_EQ_INT(lr_catalog_get(st, lr_session_id(s), &ce, &e), 0);
	CHECK_EQ_INT(ce.input_tokens, 50);
	CHECK(ce.cost == 25.0);
	CHECK_EQ_STR(ce.title, "fix the build");
	CHECK_EQ_INT(ce.state, LR_CATALOG_RUNNING);
	struct lr_session_catalog st2 = { LR_SCAT_STATE | LR_SCAT_STATUS, LR_CATALOG_STATE_STOPPED,
					  LR_CATALOG_STOPPED, NULL, 0, 0, 0, 0, 0, NULL, NULL, 0 };
	CHECK_EQ_INT(lr_session_catalog(s, &st2), 0);
	char sid[37];
	snprintf(sid, sizeof sid, "%s", lr_session_id(s));
	close_session(loop, s); /* the final write carries the tip */
	CHECK_EQ_INT(lr_catalog_get(st, sid, &ce, &e), 0);
	CHECK_EQ_INT(ce.last_seq, 2);
	CHECK_EQ_INT(ce.status, LR_CATALOG_STOPPED);
	CHECK_EQ_STR(ce.title, "fix the build");
	lr_store_close(st);
	lr_loop_free(loop);
}

/* Frees with an append in flight: the memory waits for it, nothing leaks. */
TEST(free_while_in_flight)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(1);
	struct lr_session *s;
	CHECK_EQ_INT(open_session(loop, st, "", &s, NULL), 0);
	char sid[37];
	snprintf(sid, sizeof sid, "%s", lr_session_id(s));
	struct waited a = { 0 };
	emit(s, "{\"n\":1}", NULL, LR_SESSION_EVENT, 1, &a);
	emit(s, "{\"n\":2}", NULL, LR_SESSION_EVENT, 1, &a);
	int freed = 0;
	lr_session_free(s, closed, &freed);
	lr_loop_run(loop);
	CHECK_EQ_INT(freed, 1);
	CHECK_EQ_INT(a.calls, 0);
	/* The lease was released: the session opens again. */
	CHECK_EQ_INT(open_session(loop, st, sid, &s, NULL), 0);
	CHECK(lr_session_tip(s) >= 3);
	close_session(loop, s);
	lr_store_close(st);
	lr_loop_free(loop);
}

/* Memory of idle sessions (lease + journal + session), printed for the record. */
static void idle_memory_on(int lmdb, int n)
{
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_store *st = fresh(lmdb);
	struct lr_session **ss = calloc((size_t)n, sizeof *ss);
	struct lr_session *warm;
	CHECK_EQ_INT(open_session(loop, st, "", &warm, NULL), 0);
	struct mallinfo2 m0 = mallinfo2();
	int ok = 1;
	for (int i = 0; i < n; i++)
		ok &= open_session(loop, st, "", &ss[i], NULL) == 0;
	struct mallinfo2 m1 = mallinfo2();
	CHECK(ok);
	double per = ((double)m1.uordblks - (double)m0.uordblks) / n;
	if (!getenv("ASAN_OPTIONS") && m1.uordblks > m0.uordblks)
		fprintf(stderr, "# idle session (%s store): %.0f bytes each (%d sessions)\n",
			lmdb ? "lmdb" : "memory", per, n);
	for (int i = 0; i < n; i++)
		if (ss[i])
			lr_session_free(ss[i], NULL, NULL);
	lr_session_free(warm, NULL, NULL);
	free(ss);
	lr_store_close(st);
	lr_loop_free(loop);
}

TEST(idle_session_memory)
{
	idle_memory_on(0, 500);
	idle_memory_on(1, 200);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/lr-session-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(order_and_durability_memory);
	RUN(order_and_durability_lmdb);
	RUN(overflow_memory);
	RUN(overflow_lmdb);
	RUN(filters);
	RUN(fault_on_injected_failure_memory);
	RUN(fault_on_injected_failure_lmdb);
	RUN(held_and_not_found);
	RUN(stale_writer_fenced);
	RUN(lease_store_behind_memory);
	RUN(lease_store_behind_lmdb);
	RUN(catalog_coalesced);
	RUN(free_while_in_flight);
	RUN(idle_session_memory);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
	return test_summary();
}
