/*
 * session.c — a session's lease, journal, emission queue, fault latch,
 * subscriptions and catalog writer, on the loop thread (session.h).
 *
 * The emission queue holds everything emitted and not yet handed on:
 * journaled records (enduring events, commands, gate_prepared) in flight
 * or waiting for their turn, and ephemeral events waiting behind them.
 * One journaled record is in flight at a time (the journal would queue
 * more, but a failure must stop the ones behind it from landing). Its
 * completion arrives on a backend thread and is posted to the loop, where
 * the queue is drained from the head: durable enduring events and the
 * ephemeral events behind them are delivered in order.
 *
 * Memory: an idle session is this struct, the journal and the lease. Event
 * bodies are shared by every subscription (reference-counted); a
 * subscription's ring grows on demand up to its buffer size; the catalog
 * writer's state exists only while a write is pending.
 */
#include "session.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../storage/storage.h"

struct lr_session_emission {
	struct lr_session_emission *next;
	struct lr_session *s;
	struct lr_journal_op op; /* journaled only */
	struct lr_work work;     /* the completion's trip to the loop and the pool */
	int journaled, enduring;
	int state;               /* 0 queued, 1 in flight, 2 settled */
	int rc;
	uint64_t seq;
	lr_session_done_fn done;
	void *arg;
	char *loop_id;
	char *id;
	struct lr_session_event *ev;
};

struct lr_session_sub {
	struct lr_session *s;     /* NULL once detached */
	struct lr_session_sub *next, *prev;
	void (*notify)(void *arg);
	void *arg;
	struct lr_session_event **ring;
	size_t head, count, cap, max;
	uint64_t dropped, catch_up;
	int ended;                /* 0, LR_ECLOSED or LR_ETOOBIG */
	int all_loops, ephemeral;
	size_t nloops;
	char **loops;
};

/* Pending catalog values, plain copies. */
struct catvals {
	unsigned mask;
	int state, status;
	uint64_t loop_count, input_tokens, output_tokens, cache_read_tokens;
	double cost;
	char title[LR_CATALOG_TITLE_MAX + 1];
	char ws[LR_CATALOG_REF_MAX + 1];
	char fork[37];
	uint64_t fork_at;
};

struct catq;

struct cat {
	struct cat *qnext; /* in its catq's waiting list */
	struct lr_session *s;
	struct lr_store *store;
	char sid[37];
	struct catvals pending, writing;
	uint64_t tip;
	int inflight, again;
	int queued; /* in its catq's waiting list, not yet taken by a pool job */
	int final; /* the write of a closing session: the close goes on after it */
	struct lr_session_open *open; /* the write of a new session: its open completes after it */
	const struct lr_catalog_entry *known; /* the session's cat_known when the write started */
	uint64_t known_rev;
	struct lr_catalog_entry wrote;        /* what the write wrote, at wrote_rev (0: unknown) */
	uint64_t wrote_rev;
	int rc;
	struct lr_err err;
};

struct lr_session {
	struct lr_loop *loop;
	struct lr_store *store;
	struct lr_lease *lease;
	struct lr_journal *journal;
	char id[37];
	uint64_t tip, epoch;
	struct lr_session_emission *qhead, *qtail, *inflight;
	char *fault;
	struct lr_session_sub *subs;
	struct cat *cat;
	struct catq *catq;
	/* The catalog entry as this session last wrote it, at cat_known_rev (0:
	 * unknown): the next write starts from it, without reading and decoding
	 * the stored entry (a rev moved by anyone else makes it conflict and
	 * start over from the store). */
	struct lr_catalog_entry *cat_known;
	uint64_t cat_known_rev;
	int cat_logged;
	int no_catalog;
	int close_cat; /* close_work writes the catalog itself (no memory for a cat) */
	int note_open; /* created: its first catalog write is due before the open completes */
	int closing, closed, freeing;
	void (*close_done)(void *arg);
	void *close_arg;
	void (*freed)(void *arg);
	void *freed_arg;
	struct lr_work close_work;
};

static void try_finish(struct lr_session *s);

/* ---- opening ---- */

/*
 * The journal holds a fence from an epoch at or above the one the lease
 * store just gave out: the lease store forgot epochs (make soak saw it
 * after nats-server was killed with kill -9: a lease bucket write gone).
 * Epochs are fencing tokens, so the lease is taken again (each release and
 * acquire raises the epoch by one) until its epoch is above every fence in
 * the journal, which is then opened and fenced again: a writer still
 * holding one of the older epochs is fenced by that fence like by any
 * other. Returns LR_ELEASELOST with e untouched when the journal's fences
 * are all below the lease (the open failed for another reason).
 */
static int open_above_fences(struct lr_store *st, const char *name, const char *sid,
			     struct lr_lease **lease, struct lr_journal **j, struct lr_err *e)
{
	uint64_t top = 0;
	struct lr_err te;
	if (lr_journal_top_epoch(st, sid, &top, &te) != 0 || top < (*lease)->epoch)
		return LR_ELEASELOST;
	int rc = 0;
	for (uint64_t tries = top - (*lease)->epoch + 2; (*lease)->epoch <= top; tries--) {
		struct lr_err re;
		lr_store_release(*lease, &re);
		*lease = NULL;
		if (tries == 0) {
			lr_err_set(e, "session %s: its lease stays below epoch %" PRIu64, sid, top);
			return LR_ELEASELOST;
		}
		if ((rc = lr_store_acquire(st, name, lease, e)) != 0)
			return rc;
	}
	return lr_journal_open(st, sid, *lease, j, e);
}

static void open_work(struct lr_work *w)
{
	struct lr_session_open *o = (struct lr_session_open *)w;
	struct lr_err e = { "" };
	char name[LR_JOURNAL_NAME_LEN];
	struct lr_lease *lease = NULL;
	struct lr_journal *j = NULL;
	int created = !o->sid[0];
	int rc = 0;
	if (created && (rc = lr_journal_new_id(o->sid)) != 0) {
		lr_err_set(&e, "session: cannot make an id: %s", lr_strerror(rc));
		goto fail;
	}
	snprintf(name, sizeof name, "sessions/%s", o->sid);
	if (!created) {
		uint64_t tip = 0;
		if ((rc = lr_store_tip(o->store, name, &tip, &e)) != 0)
			goto fail;
		if (tip == 0) {
			lr_err_set(&e, "session %s not found", o->sid);
			rc = LR_ENOTFOUND;
			goto fail;
		}
	}
	rc = lr_store_acquire(o->store, name, &lease, &e);
	if (rc == LR_ELEASEHELD) {
		lr_err_set(&e, "session %s is held by another writer (%s)", o->sid,
			   lr_strerror(rc));
		goto fail;
	}
	if (rc)
		goto fail;
	rc = lr_journal_open(o->store, o->sid, lease, &j, &e);
	if (rc == LR_ELEASELOST && !created) {
		int r2 = open_above_fences(o->store, name, o->sid, &lease, &j, &e);
		if (r2 != LR_ELEASELOST || !lease)
			rc = r2;
	}
	if (rc)
		goto fail;
	struct lr_session *s = calloc(1, sizeof *s);
	if (!s) {
		rc = -ENOMEM;
		lr_err_set(&e, "session %s: out of memory", o->sid);
		goto fail;
	}
	s->loop = o->loop;
	s->store = o->store;
	s->lease = lease;
	s->journal = j;
	memcpy(s->id, o->sid, sizeof s->id);
	s->tip = lr_journal_tip(j);
	s->epoch = lease->epoch;
	s->no_catalog = o->no_catalog;
	/* Best effort: the catalog lists the session from its start. The write
	 * goes through the catq (open_done) with every other session's. */
	s->note_open = created && !s->no_catalog;
	o->session = s;
	o->rc = 0;
	return;
fail:
	lr_journal_close(j);
	if (lease) {
		struct lr_err re;
		lr_store_release(lease, &re);
	}
	o->rc = rc;
	lr_err_set(&o->err, "%s", e.msg[0] ? e.msg : lr_strerror(rc));
}

static struct cat *cat_get(struct lr_session *s);
static void cat_start(struct cat *c);

static void open_done(struct lr_work *w)
{
	struct lr_session_open *o = (struct lr_session_open *)w;
	struct lr_session *s = o->rc == 0 ? o->session : NULL;
	if (s && s->note_open) {
		s->note_open = 0;
		struct cat *c = cat_get(s);
		if (c) {
			c->open = o; /* cat_finish completes the open */
			cat_start(c);
			return;
		}
		struct lr_err ce; /* no memory for a cat: write here */
		if (lr_catalog_note_append(s->store, s->id, s->tip, &ce) != 0)
			fprintf(stderr, "luarig: catalog of session %s: %s\n", s->id, ce.msg);
	}
	o->done(o);
}

int lr_session_open(struct lr_session_open *o)
{
	o->session = NULL;
	o->rc = 0;
	o->err.msg[0] = 0;
	if (o->sid[0]) {
		struct lr_err e;
		if (lr_journal_id_check(o->sid, &e) != 0) {
			lr_err_set(&o->err, "session: invalid id '%.64s' (a lower-case "
				 "hyphenated uuid)", o->sid);
			return -EINVAL;
		}
	}
	o->work.work = open_work;
	o->work.done = open_done;
	int rc = lr_pool_submit(o->loop, &o->work);
	if (rc)
		lr_err_set(&o->err, "session: cannot start a worker: %s",
			 lr_strerror(rc));
	return rc;
}

const char *lr_session_id(const struct lr_session *s)
{
	return s->id;
}

uint64_t lr_session_epoch(const struct lr_session *s)
{
	return s->epoch;
}

uint64_t lr_session_tip(const struct lr_session *s)
{
	return s->tip;
}

const char *lr_session_fault(const struct lr_session *s)
{
	return s->fault;
}

/* ---- events and subscriptions ---- */

void lr_session_event_unref(struct lr_session_event *ev)
{
	if (ev && --ev->refs == 0)
		free(ev);
}

static int loop_passes(const struct lr_session_sub *sub, const char *loop_id)
{
	if (!loop_id || sub->all_loops)
		return 1;
	for (size_t i = 0; i < sub->nloops; i++) {
		size_t n = strlen(sub->loops[i]);
		if (strncmp(loop_id, sub->loops[i], n) == 0 &&
		    (loop_id[n] == 0 || loop_id[n] == '#'))
			return 1;
	}
	return 0;
}

/* Room for one more event (grows the ring by doubling up to max); 0 when full. */
static int sub_room(struct lr_session_sub *sub)
{
	if (sub->count < sub->cap)
		return 1;
	if (sub->cap >= sub->max)
		return 0;
	size_t cap = sub->cap ? sub->cap * 2 : 8;
	if (cap > sub->max)
		cap = sub->max;
	struct lr_session_event **r = malloc(cap * sizeof *r);
	if (!r)
		return 0;
	for (size_t i = 0; i < sub->count; i++)
		r[i] = sub->ring[(sub->head + i) % sub->cap];
	free(sub->ring);
	sub->ring = r;
	sub->head = 0;
	sub->cap = cap;
	return 1;
}

static void deliver(struct lr_session *s, struct lr_session_emission *em)
{
	for (struct lr_session_sub *sub = s->subs; sub; sub = sub->next) {
		if (sub->ended || !loop_passes(sub, em->loop_id))
			continue;
		if (!em->enduring && !sub->ephemeral)
			continue;
		if (sub_room(sub)) {
			sub->ring[(sub->head + sub->count) % sub->cap] = em->ev;
			sub->count++;
			em->ev->refs++;
		} else if (!em->enduring) {
			sub->dropped++;
			continue;
		} else {
			sub->ended = LR_ETOOBIG;
			sub->catch_up = em->seq;
		}
		sub->notify(sub->arg);
	}
}

int lr_session_subscribe(struct lr_session *s, const struct lr_session_filter *f,
			 void (*notify)(void *arg), void *arg, struct lr_session_sub **out)
{
	*out = NULL;
	if (s->closed || s->closing)
		return LR_ECLOSED;
	struct lr_session_sub *sub = calloc(1, sizeof *sub);
	if (!sub)
		return -ENOMEM;
	if (!f->all_loops && f->nloops) {
		sub->loops = calloc(f->nloops, sizeof *sub->loops);
		if (!sub->loops) {
			free(sub);
			return -ENOMEM;
		}
		for (size_t i = 0; i < f->nloops; i++) {
			if (!(sub->loops[i] = strdup(f->loops[i]))) {
				sub->nloops = i;
				lr_session_sub_free(sub);
				return -ENOMEM;
			}
		}
		sub->nloops = f->nloops;
	}
	sub->all_loops = f->all_loops;
	sub->ephemeral = f->ephemeral;
	sub->max = f->buffer ? f->buffer : 1;
	sub->notify = notify;
	sub->arg = arg;
	sub->s = s;
	sub->next = s->subs;
	if (s->subs)
		s->subs->prev = sub;
	s->subs = sub;
	*out = sub;
	return 0;
}

int lr_session_sub_next(struct lr_session_sub *sub, struct lr_session_event **ev,
			uint64_t *catch_up)
{
	*ev = NULL;
	if (catch_up)
		*catch_up = 0;
	if (sub->count) {
		*ev = sub->ring[sub->head];
		sub->head = (sub->head + 1) % sub->cap;
		sub->count--;
		return 1;
	}
	if (sub->ended == LR_ETOOBIG && catch_up)
		*catch_up = sub->catch_up;
	return sub->ended;
}

int lr_session_sub_more(const struct lr_session_sub *sub)
{
	return sub->s && sub->s->qhead;
}

uint64_t lr_session_sub_dropped(const struct lr_session_sub *sub)
{
	return sub->dropped;
}

static void sub_detach(struct lr_session_sub *sub)
{
	struct lr_session *s = sub->s;
	if (!s)
		return;
	if (sub->prev)
		sub->prev->next = sub->next;
	else
		s->subs = sub->next;
	if (sub->next)
		sub->next->prev = sub->prev;
	sub->next = sub->prev = NULL;
	sub->s = NULL;
}

void lr_session_sub_end(struct lr_session_sub *sub)
{
	sub_detach(sub);
	if (!sub->ended)
		sub->ended = LR_ECLOSED;
}

void lr_session_sub_free(struct lr_session_sub *sub)
{
	if (!sub)
		return;
	sub_detach(sub);
	while (sub->count) {
		lr_session_event_unref(sub->ring[sub->head]);
		sub->head = (sub->head + 1) % sub->cap;
		sub->count--;
	}
	free(sub->ring);
	for (size_t i = 0; i < sub->nloops; i++)
		free(sub->loops[i]);
	free(sub->loops);
	free(sub);
}

/* Ends every subscription (closed) and tells its owner. */
static void end_subs(struct lr_session *s)
{
	while (s->subs) {
		struct lr_session_sub *sub = s->subs;
		lr_session_sub_end(sub);
		sub->notify(sub->arg);
	}
}

/* ---- emissions ---- */

static void em_free(struct lr_session_emission *em)
{
	lr_session_event_unref(em->ev);
	free(em->loop_id);
	free(em->id);
	free(em);
}

static void set_fault(struct lr_session *s, const char *cause)
{
	if (s->fault)
		return;
	size_t n = strlen(s->id) + strlen(cause) + 40;
	s->fault = malloc(n);
	if (s->fault)
		snprintf(s->fault, n, "session %s is faulted: %s", s->id, cause);
}

static const char *fault_msg(const struct lr_session *s)
{
	return s->fault ? s->fault : "session is faulted";
}

/* Hands settled records on from the head of the queue, in order. */
static void drain(struct lr_session *s)
{
	while (s->qhead && (!s->qhead->journaled || s->qhead->state == 2)) {
		struct lr_session_emission *em = s->qhead;
		s->qhead = em->next;
		if (!s->qhead)
			s->qtail = NULL;
		if (em->journaled) {
			if (!em->rc && em->enduring && em->op.appended) {
				em->ev->seq = em->seq; /* known only now that it is durable */
				deliver(s, em);
			}
			if (em->done)
				em->done(em->arg, em->rc ? LR_EREFUSED : 0, em->seq,
					 em->rc ? fault_msg(s) : NULL);
		} else if (!s->fault) {
			deliver(s, em);
		}
		em_free(em);
	}
}

static void em_journaled(struct lr_journal_op *op);

/* Starts the first queued journaled record when none is in flight. */
static void submit_next(struct lr_session *s)
{
	if (s->inflight || s->fault || !s->journal)
		return;
	struct lr_session_emission *em = s->qhead;
	while (em && !(em->journaled && em->state == 0))
		em = em->next;
	if (!em)
		return;
	em->state = 1;
	s->inflight = em;
	em->op.cb = em_journaled;
	em->op.arg = em;
	lr_loop_ref(s->loop); /* consumed by lr_loop_post */
	lr_journal_append_async(s->journal, &em->op);
}

static void em_settled(struct lr_session_emission *em);

static void slow_work(struct lr_work *w)
{
	struct lr_session_emission *em = (struct lr_session_emission *)((char *)w -
		offsetof(struct lr_session_emission, work));
	lr_journal_append_slow(&em->op);
}

static void slow_done(struct lr_work *w)
{
	em_settled((struct lr_session_emission *)((char *)w -
		   offsetof(struct lr_session_emission, work)));
}

/* On the loop: the journal's answer arrived. */
static void em_posted(struct lr_work *w)
{
	struct lr_session_emission *em = (struct lr_session_emission *)((char *)w -
		offsetof(struct lr_session_emission, work));
	if (em->op.slow) {
		/* The journal needs blocking work: the pool does it, then we settle. */
		em->work.work = slow_work;
		em->work.done = slow_done;
		struct lr_loop *loop = em->s->loop;
		int rc = lr_pool_submit(loop, &em->work);
		if (rc == 0)
			return;
		/* No worker: do it here rather than leave the journal stuck. */
		lr_journal_append_slow(&em->op);
	}
	em_settled(em);
}

/* On a backend thread (or inline): post to the loop. */
static void em_journaled(struct lr_journal_op *op)
{
	struct lr_session_emission *em = op->arg;
	em->work.work = NULL;
	em->work.done = em_posted;
	lr_loop_post(em->s->loop, &em->work);
}

static void em_settled(struct lr_session_emission *em)
{
	struct lr_session *s = em->s;
	s->inflight = NULL;
	em->state = 2;
	em->rc = em->op.rc;
	em->seq = em->op.seq;
	if (!em->rc) {
		if (em->seq > s->tip)
			s->tip = em->seq;
	} else {
		set_fault(s, em->op.err.msg[0] ? em->op.err.msg : lr_strerror(em->rc));
		/* Everything queued behind it fails with the fault. */
		for (struct lr_session_emission *q = em->next; q; q = q->next)
			if (q->journaled && q->state == 0) {
				q->state = 2;
				q->rc = LR_EREFUSED;
			}
	}
	drain(s);
	submit_next(s);
	try_finish(s);
}

int lr_session_emit(struct lr_session *s, const struct lr_session_emit *a,
		    struct lr_session_emission **emp, const char **msg)
{
	if (emp)
		*emp = NULL;
	*msg = NULL;
	if (s->closing || s->closed || s->freeing) {
		*msg = "session is closed";
		return LR_ECLOSED;
	}
	if (s->fault) {
		*msg = s->fault;
		return LR_EREFUSED;
	}
	if (a->kind != LR_SESSION_EVENT && a->kind != LR_SESSION_COMMAND &&
	    a->kind != LR_SESSION_GATE_PREPARED) {
		*msg = "invalid record kind";
		return -EINVAL;
	}
	int journaled = a->kind != LR_SESSION_EVENT || a->enduring;
	struct lr_session_emission *em = calloc(1, sizeof *em);
	struct lr_session_event *ev = malloc(sizeof *ev + a->len + 1);
	if (!em || !ev) {
		free(em);
		free(ev);
		*msg = "out of memory";
		return -ENOMEM;
	}
	ev->refs = 1;
	ev->seq = 0;
	ev->len = a->len;
	if (a->len)
		memcpy(ev->data, a->json, a->len);
	ev->data[a->len] = 0;
	em->ev = ev;
	em->s = s;
	em->journaled = journaled;
	em->enduring = a->kind == LR_SESSION_EVENT && a->enduring;
	if ((a->loop_id && !(em->loop_id = strdup(a->loop_id))) ||
	    (a->id && a->id[0] && !(em->id = strdup(a->id)))) {
		em_free(em);
		*msg = "out of memory";
		return -ENOMEM;
	}
	if (!journaled && !s->qhead) {
		deliver(s, em); /* nothing ahead of it */
		em_free(em);
		return 0;
	}
	if (journaled) {
		em->op.kind = a->kind;
		em->op.id = em->id;
		em->op.body = ev->data;
		em->op.len = a->len;
		em->done = a->done;
		em->arg = a->arg;
		if (a->done && emp)
			*emp = em;
	}
	if (s->qtail)
		s->qtail->next = em;
	else
		s->qhead = em;
	s->qtail = em;
	submit_next(s);
	return 0;
}

void lr_session_emission_detach(struct lr_session_emission *em)
{
	if (em) {
		em->done = NULL;
		em->arg = NULL;
	}
}

/* ---- catalog ---- */

static void cut_utf8(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap) {
		n = cap - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = 0;
}

static void merge(struct catvals *d, const struct catvals *v)
{
	unsigned m = v->mask;
	if (m & LR_SCAT_STATE)
		d->state = v->state;
	if (m & LR_SCAT_STATUS)
		d->status = v->status;
	if (m & LR_SCAT_TITLE)
		memcpy(d->title, v->title, sizeof d->title);
	if (m & LR_SCAT_WORKSPACE_REF)
		memcpy(d->ws, v->ws, sizeof d->ws);
	if (m & LR_SCAT_FORKED_FROM) {
		memcpy(d->fork, v->fork, sizeof d->fork);
		d->fork_at = v->fork_at;
	}
	if (m & LR_SCAT_LOOP_COUNT)
		d->loop_count = v->loop_count;
	if (m & LR_SCAT_INPUT_TOKENS)
		d->input_tokens = v->input_tokens;
	if (m & LR_SCAT_OUTPUT_TOKENS)
		d->output_tokens = v->output_tokens;
	if (m & LR_SCAT_CACHE_READ_TOKENS)
		d->cache_read_tokens = v->cache_read_tokens;
	if (m & LR_SCAT_COST)
		d->cost = v->cost;
	d->mask |= m;
}

struct apply_ctx {
	const struct catvals *v;
	uint64_t tip;
};

static int cat_apply(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	struct apply_ctx *a = arg;
	const struct catvals *v = a->v;
	unsigned m = v->mask;
	if (m & LR_SCAT_STATE)
		c->state = (enum lr_catalog_state)v->state;
	if (m & LR_SCAT_STATUS)
		c->status = (enum lr_catalog_status)v->status;
	if (m & LR_SCAT_TITLE)
		memcpy(c->title, v->title, sizeof c->title);
	if (m & LR_SCAT_WORKSPACE_REF)
		memcpy(c->workspace_ref, v->ws, sizeof c->workspace_ref);
	if (m & LR_SCAT_FORKED_FROM) {
		memcpy(c->forked_from, v->fork, sizeof c->forked_from);
		c->forked_at = v->fork_at;
	}
	if (m & LR_SCAT_LOOP_COUNT)
		c->loop_count = v->loop_count;
	if (m & LR_SCAT_INPUT_TOKENS)
		c->input_tokens = v->input_tokens;
	if (m & LR_SCAT_OUTPUT_TOKENS)
		c->output_tokens = v->output_tokens;
	if (m & LR_SCAT_CACHE_READ_TOKENS)
		c->cache_read_tokens = v->cache_read_tokens;
	if (m & LR_SCAT_COST)
		c->cost = v->cost;
	if (a->tip > c->last_seq)
		c->last_seq = a->tip;
	c->last_active_at = lr_wall_seconds();
	return 0;
}

/*
 * The catalog writes of every session of one store on one loop go through
 * one queue: one pool job at a time takes every write waiting (up to
 * CATQ_BATCH) and makes them one lr_catalog_update_many, which LMDB commits
 * as one transaction. A blocking update per session would hold a pool
 * thread through a commit each: with 1,000 sessions, thousands of commits
 * (two fsyncs each) one or two at a time, the shutdown of 1,000 LMDB
 * sessions 4-15 s of waiting.
 */
#define CATQ_BATCH 1024

struct catq {
	struct catq *next;
	struct lr_loop *loop;
	struct lr_store *store;
	int refs;                  /* sessions holding it (under catqs_mu) */
	struct cat *head, **tail;  /* waiting, in order */
	struct cat **batch;        /* the pool job's, n of them */
	size_t n;
	int running, finishing;
	struct lr_work work;
	struct lr_defer kick;      /* catq_kick on the next loop round */
	int has_kick, kick_pending; /* kick_pending holds a loop reference */
};

static pthread_mutex_t catqs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct catq *catqs;

static struct catq *catq_get(struct lr_loop *loop, struct lr_store *store)
{
	pthread_mutex_lock(&catqs_mu);
	struct catq *q;
	for (q = catqs; q; q = q->next)
		if (q->loop == loop && q->store == store)
			break;
	if (!q && (q = calloc(1, sizeof *q)) != NULL) {
		q->loop = loop;
		q->store = store;
		q->tail = &q->head;
		q->next = catqs;
		catqs = q;
	}
	if (q)
		q->refs++;
	pthread_mutex_unlock(&catqs_mu);
	return q;
}

/* Frees the queue once no session holds it and nothing is in it. */
static void catq_maybe_free(struct catq *q)
{
	pthread_mutex_lock(&catqs_mu);
	int gone = q->refs == 0 && !q->running && !q->finishing && !q->head && !q->kick_pending;
	if (gone)
		for (struct catq **pp = &catqs; *pp; pp = &(*pp)->next)
			if (*pp == q) {
				*pp = q->next;
				break;
			}
	pthread_mutex_unlock(&catqs_mu);
	if (gone) {
		if (q->has_kick)
			lr_defer_release(&q->kick);
		free(q);
	}
}

static void catq_put(struct catq *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&catqs_mu);
	q->refs--;
	pthread_mutex_unlock(&catqs_mu);
	catq_maybe_free(q);
}

/* On the pool: the batch's updates, together. */
static void catq_work(struct lr_work *w)
{
	struct catq *q = (struct catq *)((char *)w - offsetof(struct catq, work));
	struct lr_catalog_job *jobs = calloc(q->n, sizeof *jobs);
	struct apply_ctx *ctx = calloc(q->n, sizeof *ctx);
	if (!jobs || !ctx) {
		free(jobs);
		free(ctx);
		for (size_t i = 0; i < q->n; i++) {
			struct cat *c = q->batch[i];
			struct apply_ctx a = { &c->writing, c->tip };
			c->err.msg[0] = 0;
			c->rc = lr_catalog_update(c->store, c->sid, cat_apply, &a, &c->err);
		}
		return;
	}
	for (size_t i = 0; i < q->n; i++) {
		struct cat *c = q->batch[i];
		ctx[i] = (struct apply_ctx){ &c->writing, c->tip };
		jobs[i] = (struct lr_catalog_job){ .sid = c->sid, .fn = cat_apply, .arg = &ctx[i],
						   .known = c->known, .known_rev = c->known_rev,
						   .wrote = &c->wrote };
	}
	lr_catalog_update_many(q->store, q->n, jobs);
	for (size_t i = 0; i < q->n; i++) {
		struct cat *c = q->batch[i];
		c->rc = jobs[i].rc;
		c->err = jobs[i].err;
		c->wrote_rev = c->rc ? 0 : jobs[i].wrote_rev;
	}
	free(jobs);
	free(ctx);
}

static void cat_finish(struct cat *c);
static void catq_done(struct lr_work *w);
static void catq_kick(struct catq *q);

static void catq_kicked(struct lr_defer *d, void *arg)
{
	(void)d;
	struct catq *q = arg;
	q->kick_pending = 0;
	lr_loop_unref(q->loop);
	catq_kick(q);
	catq_maybe_free(q);
}

/* Starts a pool job for what is waiting, unless one runs. */
static void catq_kick(struct catq *q)
{
	if (q->running || !q->head)
		return;
	size_t n = 0;
	for (struct cat *c = q->head; c && n < CATQ_BATCH; c = c->qnext)
		n++;
	struct cat **batch = malloc(n * sizeof *batch);
	if (!batch)
		n = 1; /* one at a time, from the waiting list itself */
	struct cat *one = NULL;
	for (size_t i = 0; i < n; i++) {
		struct cat *c = q->head;
		q->head = c->qnext;
		c->qnext = NULL;
		c->queued = 0;
		if (batch)
			batch[i] = c;
		else
			one = c;
	}
	if (!q->head)
		q->tail = &q->head;
	q->batch = batch ? batch : NULL;
	q->n = n;
	if (!batch) {
		/* out of memory: write this one here rather than lose it */
		struct apply_ctx a = { &one->writing, one->tip };
		one->err.msg[0] = 0;
		one->rc = lr_catalog_update(one->store, one->sid, cat_apply, &a, &one->err);
		q->finishing = 1;
		cat_finish(one);
		q->finishing = 0;
		catq_kick(q);
		catq_maybe_free(q);
		return;
	}
	q->running = 1;
	q->work.work = catq_work;
	q->work.done = catq_done;
	if (lr_pool_submit(q->loop, &q->work) != 0) {
		catq_work(&q->work); /* no worker: write here rather than lose it */
		catq_done(&q->work);
	}
}

/* On the loop: each cat of the batch goes on (a cat may free its session). */
static void catq_done(struct lr_work *w)
{
	struct catq *q = (struct catq *)((char *)w - offsetof(struct catq, work));
	struct cat **batch = q->batch;
	size_t n = q->n;
	q->batch = NULL;
	q->n = 0;
	q->running = 0;
	q->finishing = 1;
	for (size_t i = 0; i < n; i++)
		cat_finish(batch[i]);
	free(batch);
	q->finishing = 0;
	catq_kick(q);
	catq_maybe_free(q);
}

static void close_submit(struct lr_session *s);

static void cat_start(struct cat *c);

static void cat_finish(struct cat *c)
{
	struct lr_session *s = c->s;
	c->inflight = 0;
	s->cat_known_rev = 0;
	if (c->wrote_rev) {
		if (!s->cat_known)
			s->cat_known = malloc(sizeof *s->cat_known);
		if (s->cat_known) {
			*s->cat_known = c->wrote;
			s->cat_known_rev = c->wrote_rev;
		}
	}
	c->wrote_rev = 0;
	if (c->rc && !s->cat_logged) {
		s->cat_logged = 1;
		fprintf(stderr, "luarig: catalog of session %s: %s\n", s->id,
			c->err.msg[0] ? c->err.msg : lr_strerror(c->rc));
	}
	if (c->open) {
		/* A new session's first catalog write landed: the open completes. */
		struct lr_session_open *o = c->open;
		c->open = NULL;
		if (c->again) { /* values set meanwhile: written next, in the background */
			cat_start(c);
		} else {
			s->cat = NULL;
			free(c);
		}
		o->done(o);
		return;
	}
	if (c->final) {
		/* The close's catalog write landed: the journal and the lease next. */
		s->cat = NULL;
		free(c);
		close_submit(s);
		return;
	}
	if (c->again && !s->freeing) {
		cat_start(c);
		return;
	}
	s->cat = NULL;
	free(c);
	try_finish(s);
}

static void cat_start(struct cat *c)
{
	struct lr_session *s = c->s;
	c->writing = c->pending;
	memset(&c->pending, 0, sizeof c->pending);
	c->tip = s->tip;
	c->again = 0;
	c->inflight = 1;
	c->known = s->cat_known_rev ? s->cat_known : NULL;
	c->known_rev = s->cat_known_rev;
	if (!s->catq)
		s->catq = catq_get(s->loop, s->store);
	struct catq *q = s->catq;
	if (!q) {
		/* out of memory: write here rather than lose it */
		struct apply_ctx a = { &c->writing, c->tip };
		c->err.msg[0] = 0;
		c->rc = lr_catalog_update(c->store, c->sid, cat_apply, &a, &c->err);
		cat_finish(c);
		return;
	}
	c->qnext = NULL;
	c->queued = 1;
	*q->tail = c;
	q->tail = &c->qnext;
	/* The pool job starts on the next loop round, not now: the writes of
	 * this round (a turn's end sets its usage, then its state; other
	 * sessions' turns end in the same round) go in one batch, and a
	 * session's later values join its queued write instead of making
	 * another one. */
	if (!q->has_kick)
		q->has_kick = lr_defer_init(s->loop, &q->kick, catq_kicked, q) == 0;
	if (q->has_kick) {
		if (!q->kick_pending) {
			q->kick_pending = 1;
			lr_loop_ref(q->loop); /* the loop runs until the write is made */
			lr_defer_schedule(&q->kick);
		}
	} else
		catq_kick(q);
}

/* The pending-writes record (created on demand); NULL when out of memory. */
static struct cat *cat_get(struct lr_session *s)
{
	if (s->cat)
		return s->cat;
	struct cat *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->s = s;
	c->store = s->store;
	memcpy(c->sid, s->id, sizeof c->sid);
	s->cat = c;
	return c;
}

int lr_session_catalog(struct lr_session *s, const struct lr_session_catalog *v)
{
	if (s->closed || s->freeing)
		return LR_ECLOSED;
	if (s->no_catalog)
		return -EINVAL;
	if ((v->mask & LR_SCAT_WORKSPACE_REF) && v->workspace_ref &&
	    strlen(v->workspace_ref) > LR_CATALOG_REF_MAX)
		return -EINVAL;
	if ((v->mask & LR_SCAT_FORKED_FROM) &&
	    (!v->forked_from || strlen(v->forked_from) != 36 || v->forked_at == 0))
		return -EINVAL;
	struct catvals n;
	memset(&n, 0, sizeof n);
	n.mask = v->mask;
	n.state = v->state;
	n.status = v->status;
	n.loop_count = v->loop_count;
	n.input_tokens = v->input_tokens;
	n.output_tokens = v->output_tokens;
	n.cache_read_tokens = v->cache_read_tokens;
	n.cost = v->cost;
	if (v->mask & LR_SCAT_TITLE)
		cut_utf8(n.title, sizeof n.title, v->title ? v->title : "");
	if (v->mask & LR_SCAT_WORKSPACE_REF)
		cut_utf8(n.ws, sizeof n.ws, v->workspace_ref ? v->workspace_ref : "");
	if (v->mask & LR_SCAT_FORKED_FROM) {
		memcpy(n.fork, v->forked_from, 37);
		n.fork_at = v->forked_at;
	}
	struct cat *c = cat_get(s);
	if (!c)
		return -ENOMEM;
	if (c->queued) {
		/* its write has not started: these values go with it */
		merge(&c->writing, &n);
		c->tip = s->tip;
		return 0;
	}
	merge(&c->pending, &n);
	if (c->inflight)
		c->again = 1;
	else if (!s->closing)
		cat_start(c);
	return 0;
}

/* ---- closing and freeing ---- */

/* On the pool: the journal closed, the lease released (the final catalog
 * write went through the catq before). */
static void close_work(struct lr_work *w)
{
	struct lr_session *s = (struct lr_session *)((char *)w -
		offsetof(struct lr_session, close_work));
	struct lr_err e;
	if (s->close_cat && !s->no_catalog) { /* there was no memory for the batched write */
		struct catvals none;
		memset(&none, 0, sizeof none);
		struct apply_ctx a = { s->cat ? &s->cat->pending : &none, s->tip };
		if (lr_catalog_update(s->store, s->id, cat_apply, &a, &e) != 0 && !s->cat_logged) {
			s->cat_logged = 1;
			fprintf(stderr, "luarig: catalog of session %s: %s\n", s->id, e.msg);
		}
	}
	lr_journal_close(s->journal);
	s->journal = NULL;
	lr_store_release(s->lease, &e);
	s->lease = NULL;
}

static void session_release(struct lr_session *s)
{
	free(s->cat);
	s->cat = NULL;
	free(s->cat_known);
	s->cat_known = NULL;
	catq_put(s->catq);
	s->catq = NULL;
	free(s->fault);
	void (*freed)(void *) = s->freed;
	void *arg = s->freed_arg;
	free(s);
	if (freed)
		freed(arg);
}

static void close_done(struct lr_work *w)
{
	struct lr_session *s = (struct lr_session *)((char *)w -
		offsetof(struct lr_session, close_work));
	s->closed = 1;
	end_subs(s);
	if (s->freeing) {
		session_release(s);
		return;
	}
	if (s->close_done)
		s->close_done(s->close_arg);
}

/* Direct teardown on the loop thread (no pool): journal, lease, memory. */
static void teardown_now(struct lr_session *s)
{
	struct lr_err e;
	while (s->qhead) {
		struct lr_session_emission *em = s->qhead;
		s->qhead = em->next;
		em_free(em);
	}
	s->qtail = NULL;
	lr_journal_close(s->journal);
	s->journal = NULL;
	lr_store_release(s->lease, &e);
	s->lease = NULL;
	session_release(s);
}

/* Moves a closing or freeing session on once nothing is in flight. */
static void try_finish(struct lr_session *s)
{
	if (s->inflight || (s->cat && s->cat->inflight))
		return;
	if (s->freeing) {
		if (s->closed == 2)
			return; /* close_work is running; close_done releases */
		teardown_now(s);
		return;
	}
	if (!s->closing || s->closed || s->qhead)
		return;
	s->closed = 2; /* in progress: close_done sets 1 */
	/* The final catalog write (last_seq, the values still pending) rides
	 * the catq with everyone else's; cat_finish then calls close_submit. */
	struct cat *c = s->no_catalog ? NULL : cat_get(s);
	if (c) {
		c->final = 1;
		cat_start(c);
		return;
	}
	s->close_cat = !s->no_catalog;
	close_submit(s);
}

static void close_submit(struct lr_session *s)
{
	s->close_work.work = close_work;
	s->close_work.done = close_done;
	if (lr_pool_submit(s->loop, &s->close_work) != 0) {
		close_work(&s->close_work);
		close_done(&s->close_work);
	}
}

int lr_session_close(struct lr_session *s, void (*done)(void *arg), void *arg)
{
	if (s->closing || s->freeing)
		return LR_ECLOSED;
	s->closing = 1;
	s->close_done = done;
	s->close_arg = arg;
	try_finish(s);
	return 0;
}

void lr_session_free(struct lr_session *s, void (*freed)(void *arg), void *freed_arg)
{
	if (!s)
		return;
	s->freed = freed;
	s->freed_arg = freed_arg;
	s->freeing = 1;
	end_subs(s);
	/* Queued records that never started are dropped; done callbacks never run. */
	struct lr_session_emission **pp = &s->qhead;
	s->qtail = NULL;
	while (*pp) {
		struct lr_session_emission *em = *pp;
		if (em == s->inflight) {
			em->done = NULL;
			s->qtail = em;
			pp = &em->next;
			continue;
		}
		*pp = em->next;
		em_free(em);
	}
	if (s->closed == 1) {
		session_release(s);
		return;
	}
	try_finish(s);
}
