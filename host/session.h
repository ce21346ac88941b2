/*
 * session.h — sessions (host/session.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_SESSION_H
#define LR_HOST_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"

/*
 * A session: its lease ("sessions/<uuid>") and journal, an ordered
 * emission queue, a fault latch, a hub of subscriptions and a coalesced
 * catalog writer. Everything here runs on the loop thread; blocking
 * storage work runs on the worker pool and appends go through the
 * journal's asynchronous path (group-committed with other sessions').
 *
 * Emission order: enduring events and private records (commands,
 * gate_prepared) are appended in emission order, one in flight per
 * session. An enduring event is delivered to subscribers only after it is
 * durable; an ephemeral event is never journaled and is delivered in
 * emission order, so it waits behind enduring events still in flight.
 * Private records are never delivered. A failed append (or a lost lease,
 * a fence) latches the session faulted: queued emissions fail, ephemeral
 * ones behind them are dropped, every later emit is refused.
 *
 * An idle session holds no buffers: its memory is the session struct, the
 * journal (with its idempotency index) and the lease.
 */
struct lr_store;
struct lr_session;
struct lr_session_sub;
struct lr_session_emission;

/*
 * Opens (sid given) or creates (sid "") a session on the pool. The caller
 * fills loop, store, sid and done, keeps *o until done runs on the loop,
 * and then owns o->session (on success). rc: LR_ELEASEHELD ("held": a live
 * holder), LR_ENOTFOUND (sid has no journal), LR_ECORRUPT, LR_ELEASELOST,
 * -errno; err says which. lr_session_open returns -EINVAL (err set, done
 * never runs) for a malformed sid, or an lr_pool_submit failure. With
 * no_catalog the session writes no catalog entry (at creation, through
 * lr_session_catalog, which then returns -EINVAL, or at close): a journal
 * and lease that other layers index themselves.
 */
struct lr_session_open {
	struct lr_work work;
	struct lr_loop *loop;
	struct lr_store *store;
	char sid[37];
	int no_catalog;       /* 1: no catalog entry is ever written (rig.flow's runs) */
	void (*done)(struct lr_session_open *o);
	void *arg;
	int rc;
	struct lr_err err;
	struct lr_session *session;
};
int lr_session_open(struct lr_session_open *o);

const char *lr_session_id(const struct lr_session *s);
uint64_t lr_session_epoch(const struct lr_session *s);
/* The last durable sequence this session knows of (its fence at least). */
uint64_t lr_session_tip(const struct lr_session *s);
/* NULL, or "session <id> is faulted: <cause>" (borrowed, lives as long as s). */
const char *lr_session_fault(const struct lr_session *s);

enum { LR_SESSION_EVENT = 1, LR_SESSION_COMMAND = 2, LR_SESSION_GATE_PREPARED = 5 };

/* done(arg, rc, seq, msg) for a journaled emission: on the loop, once, unless detached. */
typedef void (*lr_session_done_fn)(void *arg, int rc, uint64_t seq, const char *msg);

struct lr_session_emit {
	const char *json;     /* copied */
	size_t len;
	const char *loop_id;  /* NULL: session scope (always passes filters) */
	int kind;             /* LR_SESSION_EVENT, _COMMAND, _GATE_PREPARED */
	int enduring;         /* events only: journaled and delivered when durable */
	const char *id;       /* idempotency id or NULL */
	lr_session_done_fn done; /* journaled only; NULL: nobody waits */
	void *arg;
};
/*
 * Emits one record. Returns 0 (and, when a->done is set for a journaled
 * record, *em: a handle for lr_session_emission_detach, valid until done
 * runs), LR_EREFUSED when faulted (msg = the fault), LR_ECLOSED when
 * closing or closed, -EINVAL for a bad kind, -ENOMEM. msg is borrowed.
 */
int lr_session_emit(struct lr_session *s, const struct lr_session_emit *a,
		    struct lr_session_emission **em, const char **msg);
/* The waiter is gone (a cancelled task): the emission still lands, done is not called. */
void lr_session_emission_detach(struct lr_session_emission *em);

/* A delivered event, reference-counted (shared by every subscription). */
struct lr_session_event {
	int refs;
	uint64_t seq;   /* 0 for an ephemeral event */
	size_t len;
	char data[];    /* the JSON, NUL-terminated */
};
void lr_session_event_unref(struct lr_session_event *ev);

struct lr_session_filter {
	int all_loops;
	const char *const *loops; /* copied: a name passes itself and "name#..." */
	size_t nloops;
	int ephemeral;            /* 0: enduring events only */
	size_t buffer;            /* events held unread at most (>= 1) */
};
/*
 * A subscription sees events delivered after it was made. notify(arg) runs
 * on the loop when an event was buffered or the subscription ended; it
 * must not free the subscription.
 */
int lr_session_subscribe(struct lr_session *s, const struct lr_session_filter *f,
			 void (*notify)(void *arg), void *arg, struct lr_session_sub **out);
/*
 * 1 and *ev (the caller's reference) when an event is buffered; 0 when
 * none is yet; once the buffer is empty and the subscription is over,
 * LR_ECLOSED (the sub or the session closed) or LR_ETOOBIG (an enduring
 * event did not fit: *catch_up is its seq, read the journal from there).
 */
int lr_session_sub_next(struct lr_session_sub *sub, struct lr_session_event **ev,
			uint64_t *catch_up);
uint64_t lr_session_sub_dropped(const struct lr_session_sub *sub);
/*
 * 1 while the session has emissions queued or in flight, so more events may
 * be delivered soon (a writer may wait a little to send them together).
 */
int lr_session_sub_more(const struct lr_session_sub *sub);
/* Ends the subscription (later next: LR_ECLOSED after the buffer). */
void lr_session_sub_end(struct lr_session_sub *sub);
/* Frees; accepts NULL. */
void lr_session_sub_free(struct lr_session_sub *sub);

/* Catalog values to merge (absolute); mask says which are set. */
enum {
	LR_SCAT_STATE = 1 << 0, LR_SCAT_TITLE = 1 << 1, LR_SCAT_STATUS = 1 << 2,
	LR_SCAT_LOOP_COUNT = 1 << 3, LR_SCAT_INPUT_TOKENS = 1 << 4,
	LR_SCAT_OUTPUT_TOKENS = 1 << 5, LR_SCAT_CACHE_READ_TOKENS = 1 << 6,
	LR_SCAT_COST = 1 << 7, LR_SCAT_WORKSPACE_REF = 1 << 8, LR_SCAT_FORKED_FROM = 1 << 9,
};
struct lr_session_catalog {
	unsigned mask;
	int state, status;          /* enum lr_catalog_state / lr_catalog_status */
	const char *title;          /* copied; cut to 320 bytes at a UTF-8 boundary */
	uint64_t loop_count, input_tokens, output_tokens, cache_read_tokens;
	double cost;
	const char *workspace_ref;  /* copied; at most 128 bytes (else -EINVAL) */
	const char *forked_from;    /* copied; a session id (else -EINVAL), with forked_at > 0 */
	uint64_t forked_at;
};
/*
 * Merges values into the pending catalog write and starts it on the pool
 * unless one is in flight (then it follows with the latest values). The
 * entry's last_seq becomes the durable tip. Never blocks; a failed write
 * is logged to stderr once per session. -ENOMEM, -EINVAL, LR_ECLOSED.
 */
int lr_session_catalog(struct lr_session *s, const struct lr_session_catalog *c);

/*
 * Closes: refuses new emissions, waits for queued appends (their done
 * callbacks run), writes the catalog, ends the subscriptions (LR_ECLOSED),
 * closes the journal and releases the lease on the pool, then runs
 * done(arg) on the loop. A second call while closing or after returns
 * LR_ECLOSED and done never runs.
 */
int lr_session_close(struct lr_session *s, void (*done)(void *arg), void *arg);
/*
 * Frees without waiting (accepts NULL). done callbacks of pending
 * emissions never run. While an append or a catalog write is in flight the
 * memory is kept until it completes (the loop must go on running); then
 * the journal is closed, the lease released and freed(freed_arg) called.
 */
void lr_session_free(struct lr_session *s, void (*freed)(void *arg), void *freed_arg);

#endif
