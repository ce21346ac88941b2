/*
 * host.h — the runtime under the Lua layer: one libevent loop on the main
 * thread with timers, fd watches, signals and a worker pool; the HTTP
 * client and server; process supervision; the bundle reader.
 *
 * Included by lua/ and tests. Never includes lua.h. Everything here runs on
 * the loop's thread except a work item's work() function, which runs on a
 * pool thread and must not touch anything but its own item.
 */
#ifndef LR_HOST_H
#define LR_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

struct event;
struct event_base;
struct lr_loop;

/*
 * The loop. lr_loop_run runs until lr_loop_stop is called or nothing holds
 * a reference (lr_loop_ref): tasks, servers and in-flight work hold one
 * each, so the process ends when its work is done.
 */
int lr_loop_new(struct lr_loop **out);
void lr_loop_free(struct lr_loop *loop);
int lr_loop_run(struct lr_loop *loop);
/* Runs at most one round of ready events without blocking when nowait. */
int lr_loop_once(struct lr_loop *loop, int nowait);
void lr_loop_stop(struct lr_loop *loop);
int lr_loop_stopped(struct lr_loop *loop);
void lr_loop_ref(struct lr_loop *loop);
void lr_loop_unref(struct lr_loop *loop);
int lr_loop_refs(struct lr_loop *loop);
/* The libevent base, for host/ and lua/ code that builds on libevent. */
struct event_base *lr_loop_base(struct lr_loop *loop);
/* The loop's cached clock, in seconds (monotonic, from an arbitrary origin). */
double lr_loop_now(struct lr_loop *loop);

/*
 * Timers. A timer is embedded by its owner: init, start any number of
 * times, release. The callback runs on the loop; starting an armed timer
 * re-arms it.
 */
struct lr_timer {
	struct event *ev;
	void (*cb)(struct lr_timer *t, void *arg);
	void *arg;
};
int lr_timer_init(struct lr_loop *loop, struct lr_timer *t,
		  void (*cb)(struct lr_timer *t, void *arg), void *arg);
void lr_timer_start(struct lr_timer *t, double seconds);
void lr_timer_stop(struct lr_timer *t);
int lr_timer_pending(const struct lr_timer *t);
void lr_timer_release(struct lr_timer *t);

/* File descriptor watches; events is LR_READ | LR_WRITE, persistent. */
enum { LR_READ = 1, LR_WRITE = 2 };
struct lr_watch {
	struct event *ev;
	int fd;
	void (*cb)(struct lr_watch *w, int events, void *arg);
	void *arg;
};
int lr_watch_init(struct lr_loop *loop, struct lr_watch *w, int fd,
		  void (*cb)(struct lr_watch *w, int events, void *arg), void *arg);
int lr_watch_start(struct lr_watch *w, int events);
void lr_watch_stop(struct lr_watch *w);
void lr_watch_release(struct lr_watch *w);

/*
 * Deferred calls: cb runs on the next loop round, never inside the caller.
 * One lr_defer is one pending call at most; scheduling it again while
 * pending is a no-op.
 */
struct lr_defer {
	struct event *ev;
	void (*cb)(struct lr_defer *d, void *arg);
	void *arg;
};
int lr_defer_init(struct lr_loop *loop, struct lr_defer *d,
		  void (*cb)(struct lr_defer *d, void *arg), void *arg);
void lr_defer_schedule(struct lr_defer *d);
void lr_defer_release(struct lr_defer *d);

/*
 * Signals. lr_loop_on_signal makes cb run on the loop after signo arrives.
 * The async hook, if set, is called inside the real signal handler and must
 * be async-signal-safe: lua/ uses it to set a Lua hook so that a busy Lua
 * chunk notices Ctrl-C without returning to the loop.
 */
int lr_loop_on_signal(struct lr_loop *loop, int signo,
		      void (*cb)(int signo, void *arg), void *arg);
void lr_loop_set_async_signal_hook(void (*hook)(int signo));

/*
 * The worker pool. work() runs on a pool thread; done() runs afterwards on
 * the loop thread. A submitted item holds a loop reference until done().
 * Workers never touch a lua_State.
 */
struct lr_work {
	void (*work)(struct lr_work *w);
	void (*done)(struct lr_work *w);
	struct lr_work *next; /* owned by the pool while submitted */
};
int lr_pool_submit(struct lr_loop *loop, struct lr_work *w);
/*
 * Hands a finished item to the loop from any thread: w->done(w) runs on the
 * loop thread soon after (w->work is not called). Use it for completions
 * that arrive on threads the loop does not own (a storage backend's writer
 * thread). The caller must have taken a loop reference with lr_loop_ref,
 * on the loop thread, when it started the work; it is dropped after done().
 */
void lr_loop_post(struct lr_loop *loop, struct lr_work *w);

/* ---- sessions (host/session.c) ---- */

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
 * never runs) for a malformed sid, or an lr_pool_submit failure.
 */
struct lr_session_open {
	struct lr_work work;
	struct lr_loop *loop;
	struct lr_store *store;
	char sid[37];
	void (*done)(struct lr_session_open *o);
	void *arg;
	int rc;
	char err[384];
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


/* ---- SSE framing (host/sse.c) ---- */

/*
 * A push parser for text/event-stream bodies following the WHATWG
 * EventSource rules: feed it chunks split anywhere (even between CR and
 * LF); it calls back once per dispatched event. No Lua, no libcurl.
 *
 * Lines end in LF, CRLF or CR. "data:" lines join with "\n"; one space
 * after the colon is dropped; lines starting with ':' are comments; a line
 * without a colon is a field with an empty value; unknown fields are
 * ignored; a BOM at the very start is dropped. A blank line dispatches the
 * event if any data line was seen, otherwise it only resets the event name.
 * "id:" sets the last event id, which persists across events (an id holding
 * NUL is ignored; an empty id clears it); "retry:" with digits only is
 * reported with the next dispatched event. lr_sse_finish, at the end of the
 * stream, dispatches a last event that lacked its blank line (recorded
 * provider streams end that way).
 *
 * Caps: a line longer than max_line bytes or an event with more than
 * max_event data bytes stops the parser with LR_ETOOBIG. Errors stick: every
 * later call returns the same status without calling back.
 */
struct lr_sse_event {
	const char *type; /* "message" unless an event: line named it */
	size_t type_len;
	const char *data; /* not NUL-safe text: data may hold NUL bytes */
	size_t data_len;
	const char *id;   /* the last event id, NULL when none */
	size_t id_len;
	long retry;       /* a retry: value seen since the last dispatch, or -1 */
	int unterminated; /* dispatched by lr_sse_finish: the stream ended before its blank line */
};

/*
 * Called per event; the pointers are borrowed until the callback returns.
 * A non-zero return stops the parser and becomes its sticky status.
 */
typedef int (*lr_sse_cb)(void *arg, const struct lr_sse_event *ev);

struct lr_sse {
	struct lr_buf line;  /* a line split across chunks */
	struct lr_buf data;
	struct lr_buf type;
	struct lr_buf id;
	size_t max_line, max_event;
	long retry;
	int has_data;
	int after_cr;  /* the last byte fed was CR: skip one LF */
	int bom;       /* bytes of a BOM matched at the start; 3 when settled */
	int status;
};

void lr_sse_init(struct lr_sse *p, size_t max_line, size_t max_event);
void lr_sse_release(struct lr_sse *p);
/* Returns 0, LR_ETOOBIG, -ENOMEM or a callback's non-zero status. */
int lr_sse_feed(struct lr_sse *p, const void *buf, size_t len, lr_sse_cb cb, void *arg);
/* End of stream: processes a final unterminated line and dispatches a pending event. */
int lr_sse_finish(struct lr_sse *p, lr_sse_cb cb, void *arg);


/* ---- MCP stdio framing (host/mcp_frame.c) ---- */

/*
 * A push parser for the Model Context Protocol's stdio transport: JSON-RPC
 * messages as newline-delimited lines. Feed it chunks split anywhere; it
 * calls back once per line. No JSON is parsed here (rig.json decodes the
 * line above), no Lua, no I/O: the client (a server's stdout) and the
 * server side (its own stdin) share it, and so does the fuzz target.
 *
 * A line ends in LF; one CR before the LF is dropped (CRLF writers); empty
 * lines (after that) are skipped. A line longer than max_line bytes (a CR
 * before its LF counted) is not
 * an error of the stream: its bytes are dropped as they come, and at its LF
 * the callback gets one oversized report holding the first and the last
 * LR_MCP_FRAME_KEEP bytes and the full length, so the reader can still
 * name the request it answered (an "id" usually sits at either end) and the
 * stream goes on with the next line. lr_mcp_frame_finish, at the end of the
 * stream, reports a last line that lacked its LF.
 */
#define LR_MCP_FRAME_KEEP 512

struct lr_mcp_line {
	const char *data;    /* the line (no LF, no trailing CR), or an oversized line's head */
	size_t len;
	const char *tail;    /* oversized: its last bytes (may overlap the head's range) */
	size_t tail_len;
	size_t total;        /* the line's length in bytes (oversized: all of it) */
	int oversized;
};

/* Called per line; pointers are borrowed until it returns. Non-zero stops the parser (sticky). */
typedef int (*lr_mcp_frame_cb)(void *arg, const struct lr_mcp_line *line);

struct lr_mcp_frame {
	struct lr_buf line;   /* a line split across chunks (at most max_line bytes) */
	size_t max_line;
	size_t over;          /* bytes of the current oversized line seen, 0 when none */
	char head[LR_MCP_FRAME_KEEP];
	size_t head_len;
	char tail[LR_MCP_FRAME_KEEP]; /* the last bytes seen, oldest first */
	size_t tail_len;
	int status;
};

/* max_line: 1 or more bytes (the caller's cap: a client takes 16 MiB by default). */
void lr_mcp_frame_init(struct lr_mcp_frame *f, size_t max_line);
void lr_mcp_frame_release(struct lr_mcp_frame *f);
/* Returns 0, -ENOMEM or the callback's non-zero status (then sticky). */
int lr_mcp_frame_feed(struct lr_mcp_frame *f, const void *buf, size_t len, lr_mcp_frame_cb cb,
		      void *arg);
/* End of stream: reports a last line without its LF (oversized or not). */
int lr_mcp_frame_finish(struct lr_mcp_frame *f, lr_mcp_frame_cb cb, void *arg);


/* ---- HTTP client (host/http_client.c) ---- */

/*
 * HTTP(S) requests over one libcurl multi handle per loop, driven by the
 * loop's sockets and timers, so connections are reused across requests.
 * libcurl is opened on first use (lr_lazy_open), never linked.
 *
 * Policy fixed here: only http and https (also for redirects), TLS
 * verification always on, no redirects unless follow_redirects (then at
 * most 5). Two timers of our own: header_timeout (from the start until the
 * final header block is complete) and idle_timeout (between received bytes;
 * stopped while the transfer is paused for backpressure); timeout is
 * libcurl's, from the start to the end, paused or not (for a stream too: a
 * deadline that bytes arriving slowly never push back). A stream keeps the first
 * LR_HTTP_HEAD_BYTES of a 2xx body in resp->body, so a caller can say what
 * came instead of events (a proxy's HTML page).
 *
 * A request calls notify(arg) on the loop when the final headers arrive,
 * when events are queued and when it ends; the owner reads lr_http_resp and
 * pops events. notify runs inside libcurl's callbacks (and possibly inside
 * lr_http_pop): it must only record or wake, never free the request.
 * Errors: LR_ENETWORK, LR_ETIMEOUT, LR_ETOOBIG, LR_EUNAVAILABLE (no
 * libcurl), with a message naming the URL's host in resp->err.
 */
struct lr_http;
struct lr_http_req;

#define LR_HTTP_HEAD_BYTES 512

/* One client per loop. Creating it does not load libcurl. */
int lr_http_new(struct lr_loop *loop, struct lr_http **out);
/* Aborts every request in flight (their notify is never called again); accepts NULL. */
void lr_http_free(struct lr_http *c);

struct lr_http_opts {
	const char *method;          /* NULL: GET, or POST when has_body */
	const char *url;             /* http:// or https:// */
	const char *const *headers;  /* "Name: value" lines, borrowed for the call */
	size_t nheaders;
	const void *body;            /* copied */
	size_t body_len;
	int has_body;
	double timeout;              /* seconds; <= 0 means none (all four) */
	double connect_timeout;
	double header_timeout;
	double idle_timeout;
	int follow_redirects;
	size_t max_body;             /* buffered mode: a longer body is LR_ETOOBIG */
	size_t max_headers;          /* bytes of the header block */
	int stream;                  /* 2xx bodies go through the SSE framer */
	int sse_auto;                /* stream mode: only when the 2xx Content-Type is
				        text/event-stream; any other 2xx body is buffered
				        (max_body) and resp.buffered set (MCP's Streamable
				        HTTP answers a POST either way) */
	size_t max_line, max_event;  /* the framer's caps */
	size_t max_queue;            /* events queued unread before the transfer pauses (or 1 MiB) */
	size_t max_error_body;       /* stream mode, non-2xx: body kept up to this, then stop */
};

/* What a request has produced so far; read it after notify. */
struct lr_http_resp {
	int headers_done;        /* the final header block arrived */
	int done;                /* the transfer ended; rc is final */
	int rc;                  /* 0 or a status code */
	char err[320];           /* the message for rc */
	long status;
	struct lr_buf headers;   /* "name\0value\0" pairs in order, names lower-case */
	struct lr_buf body;      /* buffered mode, a stream's non-2xx body, or a 2xx stream's
				  * first LR_HTTP_HEAD_BYTES */
	long connects;           /* new connections this transfer opened (0: reused) */
	int buffered;            /* sse_auto: the 2xx body was not an event stream and is in body */
};

/*
 * A decoded event as lr_http_peek shows it: the pointers borrow the
 * request's queue and stay valid until lr_http_consume or lr_http_req_free.
 */
struct lr_http_event {
	const char *type;
	size_t type_len;
	const char *data;
	size_t data_len;
	const char *id;          /* NULL when none */
	size_t id_len;
	long retry;              /* -1 when none */
	int unterminated;        /* the last event, cut short by the end of the stream */
};

/*
 * Starts a request. On success *out is owned by the caller, who must end it
 * with lr_http_req_free (which aborts it if it still runs). On failure
 * notify is never called and err (>= 320 bytes) says why: -EINVAL for a bad
 * option, LR_EUNAVAILABLE when libcurl cannot be loaded.
 */
int lr_http_start(struct lr_http *c, const struct lr_http_opts *o,
		  void (*notify)(void *arg), void *arg, struct lr_http_req **out, char *err);
const struct lr_http_resp *lr_http_resp(const struct lr_http_req *r);
/*
 * Events queue in one contiguous buffer (no allocation per event). peek
 * fills *ev with the oldest queued event and returns 1, or returns 0 when
 * none is queued; consume drops that event. Resuming a paused transfer may
 * deliver more bytes at once, so notify may run inside lr_http_consume:
 * copy what you need out of *ev before calling it.
 */
int lr_http_peek(struct lr_http_req *r, struct lr_http_event *ev);
void lr_http_consume(struct lr_http_req *r);
/* Aborts at once (the connection is closed) and frees; accepts NULL. */
void lr_http_req_free(struct lr_http_req *r);


/* ---- HTTP server (host/http_server.c, host/http_head.c) ---- */

/*
 * An HTTP/1.1 server on libevent bufferevents, with its own request
 * parser. The server hands each request, body complete, to on_request; the
 * callee owns the lr_httpd_req from then on and must lr_httpd_req_free it.
 * A request is answered either whole (lr_httpd_req_reply) or streamed
 * (start, write..., finish; chunked for HTTP/1.1 clients, close-delimited
 * for HTTP/1.0). While a request is in hand the server watches its
 * connection: when the client goes away, on_close runs once and every later
 * write fails with LR_ECLOSED. Keep-alive and pipelined requests are served
 * in order, one at a time.
 *
 * What the server refuses itself never reaches on_request: it answers with
 * a JSON error {"error":{"code","message","retryable":false}} and closes
 * (after reading and dropping what the client still sends, so the client
 * sees the answer, not a reset):
 *   400 malformed_request   request line, header syntax, framing (see http_head.c)
 *   413 body_too_large      a body over max_body (by Content-Length, or as it arrives)
 *   417 expectation_failed  an Expect other than 100-continue
 *   431 headers_too_large   request line + headers over max_headers, or too many fields
 * Each refusal is counted (lr_httpd_refusals).
 */
struct lr_httpd;
struct lr_httpd_req;

struct lr_httpd_config {
	const char *host;   /* numeric address or name; IPv6 without brackets */
	int port;           /* 0 picks a free port */
	size_t max_body;    /* request body cap (Content-Length and real size) */
	size_t max_headers; /* request line + headers cap */
	void (*on_request)(struct lr_httpd_req *r, void *arg);
	void *arg;
};

/*
 * Binds and listens. Returns 0 and the server in *out, -errno from
 * socket/bind/listen (-EADDRINUSE), or LR_EPARSE when host does not
 * resolve. Ignores SIGPIPE for the process (writes to a vanished client
 * must fail with EPIPE, not kill us): children should reset it.
 */
int lr_httpd_open(struct lr_loop *loop, const struct lr_httpd_config *cfg,
		  struct lr_httpd **out);
int lr_httpd_port(const struct lr_httpd *h);
/*
 * Stops listening and drops every connection: requests in hand get their
 * on_close (synchronously, inside this call) and stay valid until freed.
 */
void lr_httpd_close(struct lr_httpd *h);

/*
 * The refusals counted since lr_httpd_open, one count per code of the list
 * above, in the order of lr_httpd_refusal_code(0 .. LR_HTTPD_REFUSALS - 1).
 */
#define LR_HTTPD_REFUSALS 4
const char *lr_httpd_refusal_code(int i);
void lr_httpd_refusals(const struct lr_httpd *h, uint64_t out[LR_HTTPD_REFUSALS]);

/* The request. Strings are borrowed until lr_httpd_req_free. */
const char *lr_httpd_req_method(const struct lr_httpd_req *r); /* "GET", ... */
const char *lr_httpd_req_path(const struct lr_httpd_req *r);   /* raw, undecoded */
const char *lr_httpd_req_query(const struct lr_httpd_req *r);  /* raw, or NULL */
const char *lr_httpd_req_remote(const struct lr_httpd_req *r); /* "ip:port", "[v6]:port" */
const char *lr_httpd_req_body(const struct lr_httpd_req *r, size_t *len);
/*
 * Iterates the request headers: pass NULL first, then the returned cursor;
 * returns NULL at the end. Names are as the client sent them.
 */
const void *lr_httpd_req_header_next(const struct lr_httpd_req *r, const void *cursor,
				     const char **name, const char **value);

/*
 * The response. add_header refuses (-EINVAL) names that are not tokens,
 * values holding CR, LF or NUL, and the framing fields the server writes
 * itself (Content-Length, Transfer-Encoding, Connection). reply sends a whole response; start begins
 * a streamed one, write appends a chunk (one copy of p), finish ends it.
 * All return LR_ECLOSED once the client is gone or the response was
 * aborted, and -EINVAL when called out of order.
 */
int lr_httpd_req_add_header(struct lr_httpd_req *r, const char *name, const char *value);
int lr_httpd_req_reply(struct lr_httpd_req *r, int status, const void *body, size_t len);
int lr_httpd_req_start(struct lr_httpd_req *r, int status);
int lr_httpd_req_write(struct lr_httpd_req *r, const void *p, size_t n);
/* Stages bytes for the next write (one chunk from several pieces, one copy). */
int lr_httpd_req_append(struct lr_httpd_req *r, const void *p, size_t n);
/*
 * Stages s as server-sent-event field lines: prefix + line + "\n" for each
 * line, split at CRLF, LF or CR (a trailing break ends the last line; an
 * empty s is one empty line).
 */
int lr_httpd_req_append_lines(struct lr_httpd_req *r, const char *prefix, const char *s,
			      size_t n);
/*
 * Sends what was staged as one chunk, like write(r, NULL, 0), straight to
 * the socket when nothing is queued (the rest queued as usual).
 */
int lr_httpd_req_send(struct lr_httpd_req *r);
int lr_httpd_req_finish(struct lr_httpd_req *r);
/* Drops the connection at once (no on_close: the caller knows). */
void lr_httpd_req_abort(struct lr_httpd_req *r);
/* 1 once the connection is gone or aborted. */
int lr_httpd_req_closed(const struct lr_httpd_req *r);
/* Bytes queued on the connection and not yet written to the socket. */
size_t lr_httpd_req_buffered(const struct lr_httpd_req *r);

/*
 * Notifications, run on the loop. on_close: the client went away or the
 * server closed (once). on_drain: armed by lr_httpd_req_notify_drain, runs
 * once when the queued bytes fall to low or below (or at close).
 */
void lr_httpd_req_set_callbacks(struct lr_httpd_req *r,
				void (*on_close)(struct lr_httpd_req *r, void *arg),
				void (*on_drain)(struct lr_httpd_req *r, void *arg), void *arg);
int lr_httpd_req_notify_drain(struct lr_httpd_req *r, size_t low);
void lr_httpd_req_cancel_drain(struct lr_httpd_req *r);
/*
 * Releases the request. An unanswered request is aborted; a finished one
 * keeps sending in the background and is freed when done. NULL is fine.
 */
void lr_httpd_req_free(struct lr_httpd_req *r);

/*
 * The request parser (host/http_head.c), pure functions over bytes.
 *
 * lr_httpd_head_parse reads one request head from buf[0..len), looking at
 * most max bytes: 0 when the head is whole (h->len bytes, the blank line
 * included; offsets in h point into buf), -EAGAIN when more bytes are
 * needed, LR_EPARSE or LR_ETOOBIG when it is refused; then h->status (400,
 * 417, 431), h->code and h->why (static text) say why.
 */
#define LR_HTTPD_HEADERS_MAX 128
#define LR_HTTPD_METHOD_MAX 32

struct lr_httpd_head {
	size_t len;
	uint32_t method, method_len, target, target_len;
	int minor;              /* HTTP/1.minor: 0, or 1 for 1.1 and later */
	int nhdr;
	struct { uint32_t name, nlen, value, vlen; } hdr[LR_HTTPD_HEADERS_MAX];
	int64_t content_length; /* -1: none */
	unsigned chunked : 1, close : 1, keep_alive : 1, expect_continue : 1;
	int status;
	const char *code, *why;
};
int lr_httpd_head_parse(const char *buf, size_t len, size_t max, struct lr_httpd_head *h);

/*
 * A chunked body, decoded as it arrives: each step looks at buf[0..len)
 * and consumes *used bytes, returning LR_HTTPD_CHUNK_DATA (those bytes are
 * body), LR_HTTPD_CHUNK_FRAMING (chunk sizes, line breaks, trailer
 * fields: dropped), LR_HTTPD_CHUNK_DONE (the body ended, *used bytes
 * included), -EAGAIN (nothing consumed: more bytes needed), LR_EPARSE
 * (malformed) or LR_ETOOBIG (trailer fields over max_trailer).
 */
enum { LR_HTTPD_CHUNK_DATA = 1, LR_HTTPD_CHUNK_FRAMING, LR_HTTPD_CHUNK_DONE };
struct lr_httpd_chunked {
	int state;
	uint64_t left;
	size_t trailer, max_trailer;
};
void lr_httpd_chunked_init(struct lr_httpd_chunked *c, size_t max_trailer);
int lr_httpd_chunked_step(struct lr_httpd_chunked *c, const char *buf, size_t len, size_t *used);

/* ---- session pipes (host/session_pipe.c) ---- */

/*
 * A pipe forwards a session subscription's events to a started, streamed
 * HTTP response as server-sent events, in C (rig.serve's live SSE):
 *   enduring:  "event: enduring\nid: SEQ\ndata: JSON\n\n"
 *   ephemeral: "event: ephemeral\ndata: JSON\n\n"
 * (a data line per line of JSON, as rig.http's res:event frames them) and
 * ": ping\n\n" after heartbeat seconds with nothing sent. Enduring events
 * with seq <= last are skipped (sent already by a replay of the journal).
 * Frames are gathered per connection and sent one chunk per loop round (held
 * up to 2 ms while the session has more emissions on the way, so a turn's
 * burst costs one send per connection). Above high bytes
 * queued on the connection it stops taking events (the subscription's
 * buffer holds them, and overflows for a client too slow) until the queue
 * drains to low.
 *
 * The owner keeps sub and r alive while the pipe lives, forwards the
 * subscription's notify to lr_session_pipe_notify and the request's on_drain
 * to lr_session_pipe_drained. done(arg, why) runs once, on the loop, when
 * the pipe ends (never inside new or free; it may run inside notify); the
 * pipe sends nothing afterwards. lr_session_pipe_last is then where a
 * journal catch-up resumes. free stops a pipe at any time (done not called).
 */
struct lr_session_pipe;
enum {
	LR_SPIPE_OVERFLOW = 1, /* an enduring event did not fit the subscription */
	LR_SPIPE_CLOSED,       /* the subscription ended (closed, session closing) */
	LR_SPIPE_GONE,         /* the client is gone or the response ended */
	LR_SPIPE_NOMEM,
};
struct lr_session_pipe_config {
	uint64_t last;          /* enduring seqs <= last are not sent */
	double heartbeat;       /* seconds; <= 0: no pings */
	size_t high, low;       /* output marks; 0: 1 MiB and 256 KiB (rig.http's) */
	void (*done)(void *arg, int why);
	void *arg;
};
/* 0 and *out, or -ENOMEM (done is then never called). */
int lr_session_pipe_new(struct lr_loop *loop, struct lr_session_sub *sub,
			struct lr_httpd_req *r, const struct lr_session_pipe_config *c,
			struct lr_session_pipe **out);
void lr_session_pipe_notify(struct lr_session_pipe *p);
void lr_session_pipe_drained(struct lr_session_pipe *p);
/* The highest enduring seq sent or skipped (the config's last at first). */
uint64_t lr_session_pipe_last(const struct lr_session_pipe *p);
/* Stops and frees; accepts NULL. */
void lr_session_pipe_free(struct lr_session_pipe *p);


/* ---- processes (host/proc.c) ---- */

/*
 * Process supervision: spawn a child with argv/cwd/env/fds, watch it on the
 * loop and end it. The host is multi-threaded, so children are started with
 * posix_spawn (glibc's CLONE_VFORK path: an exec failure comes back as the
 * return value), never by running code in a forked copy. Every child leads
 * its own process group; lr_proc_kill and lr_proc_close signal the whole
 * group. A pidfd per child is watched on the loop; the exit status is read
 * with waitid(P_PIDFD, WNOWAIT), and the child is reaped only by
 * lr_proc_close, so until then its zombie keeps the process-group id from
 * being reused and the group can still be killed safely.
 *
 * The child gets exactly the fds named in lr_proc_opts (0, 1, 2 and
 * extra_fds as 3, 4, ...): everything the host opens is O_CLOEXEC. Its
 * signal mask is empty and every signal has its default disposition.
 *
 * Everything runs on the loop thread. The later sandbox executor builds on
 * this: it spawns its re-executed helper (file = "/proc/self/exe", argv
 * naming the helper mode) with extra_fds carrying the profile.
 */
struct lr_proc;

enum { LR_PROC_STDIN = 0, LR_PROC_STDOUT = 1, LR_PROC_STDERR = 2 };
/* What one of the child's fds 0, 1, 2 is connected to. */
enum {
	LR_PROC_NULL = 0, /* /dev/null */
	LR_PROC_PIPE,     /* a non-blocking pipe to the host, read/written here */
	LR_PROC_INHERIT,  /* the host's own fd of the same number */
	LR_PROC_FD,       /* stdio_fd[i], duplicated (the caller keeps it) */
};
/* Events passed to on_event. */
enum {
	LR_PROC_EV_EXIT = 1,    /* the exit status is known (or the timeout fired) */
	LR_PROC_EV_OUTPUT = 2,  /* bytes or EOF on stdout or stderr */
	LR_PROC_EV_INPUT = 4,   /* the stdin queue drained, or stdin failed */
};
#define LR_PROC_ERRLEN 256

struct lr_proc_opts {
	const char *file;          /* the program; NULL: argv[0]. Without a '/' it is searched in PATH */
	char *const *argv;         /* NULL-terminated, argv[0] required */
	char *const *envp;         /* the complete environment; NULL: the host's */
	const char *cwd;           /* NULL: the host's */
	int stdio[3];              /* LR_PROC_NULL (0), PIPE, INHERIT or FD, for fds 0, 1, 2 */
	int stdio_fd[3];           /* the host fd for LR_PROC_FD */
	const int *extra_fds;      /* become the child's fds 3, 4, ...; the caller keeps them */
	int n_extra;
	size_t out_cap[3];         /* [1], [2]: bytes buffered per output pipe */
	int out_drop;              /* 1: beyond out_cap keep draining, drop, mark truncated
				      (a cap of 0 keeps nothing); 0: stop reading until
				      lr_proc_consume makes room (a cap of 0 means 64 KiB) */
	double timeout;            /* seconds (> 0): then SIGKILL to the group; 0: none */
	/*
	 * The write end (an fd above 2; 0: none) of a pipe whose read end the
	 * child watches, as the confinement helper does: the proc keeps its own
	 * copy for the child's lifetime (the caller keeps theirs, and closes it
	 * after the spawn). Ending the proc, by lr_proc_close, the timeout or
	 * lr_proc_kill(SIGKILL), then closes that copy instead of signalling
	 * the group, and the child ends itself and everything it started.
	 */
	int lifeline_fd;
	/* Called on the loop after something changed; must not call lr_proc_close. */
	void (*on_event)(struct lr_proc *p, int events, void *arg);
	void *arg;
};

/*
 * Starts a child. On success *out is a heap object that the caller must
 * end with lr_proc_close. On failure returns -errno and writes a message to
 * err ("cannot run 'nosuch': No such file or directory", "cannot change to
 * directory 'x': ..."); on_event is then never called.
 */
int lr_proc_spawn(struct lr_loop *loop, const struct lr_proc_opts *o,
		  struct lr_proc **out, char err[LR_PROC_ERRLEN]);
pid_t lr_proc_pid(const struct lr_proc *p);
/*
 * 1 once the child exited: *code is its exit status or -1, *signo the
 * signal that killed it or 0. 0 while it runs.
 */
int lr_proc_status(const struct lr_proc *p, int *code, int *signo);
int lr_proc_timed_out(const struct lr_proc *p);
/* Exited and every output pipe at EOF (or the timeout fired, so leftovers are not awaited). */
int lr_proc_done(const struct lr_proc *p);
/* Sends signo to the child's process group (SIGKILL with a lifeline: closes it); 0 or -errno. */
int lr_proc_kill(struct lr_proc *p, int signo);

/*
 * stdin (LR_PROC_PIPE only). lr_proc_write copies n bytes into the queue
 * and writes them as the pipe accepts them; LR_PROC_EV_INPUT fires when the
 * queue is empty again or writing failed. lr_proc_input_status says: 0 open,
 * LR_ECLOSED after lr_proc_close_stdin (or when stdin is not a pipe),
 * -EPIPE when the child closed its end (the queue is then dropped), another
 * -errno on failure. lr_proc_close_stdin closes after the queue drains.
 */
int lr_proc_write(struct lr_proc *p, const void *data, size_t n);
size_t lr_proc_input_pending(const struct lr_proc *p);
int lr_proc_input_status(const struct lr_proc *p);
void lr_proc_close_stdin(struct lr_proc *p);

/*
 * Output (stream LR_PROC_STDOUT or LR_PROC_STDERR, piped). The buffer is
 * borrowed: valid until the next loop round or lr_proc_consume.
 * lr_proc_output_eof is 1 at EOF, 0 before, -errno after a read error.
 */
const struct lr_buf *lr_proc_output(const struct lr_proc *p, int stream);
int lr_proc_output_eof(const struct lr_proc *p, int stream);
int lr_proc_truncated(const struct lr_proc *p, int stream);
/* Drops the first n buffered bytes and resumes reading a paused pipe. */
void lr_proc_consume(struct lr_proc *p, int stream, size_t n);

/*
 * Ends a child: if it has not exited, SIGKILL to its group; after exit,
 * SIGKILL to what is left of the group (the zombie still pins the id).
 * Then reaps it, right away or, if it is not dead yet, from the loop in the
 * background. Closes the pipes, frees p. Accepts NULL.
 */
void lr_proc_close(struct lr_proc *p);
/* Reaps, waiting if need be, every child of loop that lr_proc_close left
 * to the background: call before lr_loop_free. */
void lr_proc_reap_all(struct lr_loop *loop);


/* ---- egress proxy (host/egress.c) ---- */

/*
 * The network boundary of a sandboxed execution (docs/sandbox.md): an HTTP
 * proxy (CONNECT tunnels and absolute-URI "GET http://host/..." forwarding)
 * and a DNS stub, served on the loop thread from listener fds made inside
 * the target's network namespace (lr_sbx_make_listeners). The target has
 * only loopback, so these sockets are its only way out.
 *
 * Per request: parse the head (8 KiB, 100 headers, strict); the target
 * host:port must match the execution's allow-list (or its policy callback);
 * the proxy resolves the name itself on the worker pool and refuses the
 * request when ANY resolved address is loopback, private (RFC 1918, CGNAT
 * 100.64/10, ULA fc00::/7), link-local, unspecified, multicast, broadcast
 * or reserved (IPv4-mapped, NAT64 and 6to4 IPv6 forms are judged by the
 * IPv4 address they carry) unless the matching rule says allow_private;
 * cloud metadata addresses (169.254.169.254, fd00:ec2::254) are refused
 * even then. It connects to the very addresses it checked (no second
 * lookup a rebinding name could change), in order, each within
 * connect_timeout; a failure is a 502, never a direct connection. Denials
 * are "403 Forbidden" with a one-line text body naming the reason. Each
 * request ends in exactly one log event: allow (connected), deny or fail.
 *
 * The DNS stub answers A queries for names the allow-list covers (on any
 * port) with 127.0.0.1, AAAA and other types for them with NODATA, other
 * names with NXDOMAIN, non-IN classes with REFUSED and malformed queries
 * with FORMERR. 127.0.0.1 points the target back at its own loopback: the
 * real address would be unreachable there anyway, tools that honour the
 * proxy variables send the NAME to the proxy (which resolves and checks it
 * itself), and a lookup that must succeed first (npm, pip) does. For a
 * resolver to use it the view's resolv.conf must say "nameserver
 * 127.0.0.1" and the stub must be on port 53 (the executor's job).
 *
 * Everything runs on the loop thread. The egress holds no loop reference
 * (its owner, the execution, keeps the loop alive); a name lookup in flight
 * holds one until it finishes, even after lr_egress_close.
 */
struct lr_egress;
struct sockaddr;

/* One allow-list entry. pattern: "host:port" where host is a name
 * ("example.com", matched case-insensitively, a trailing dot ignored), a
 * "*.suffix" (any name strictly below suffix, not suffix itself), an IPv4
 * literal or a bracketed IPv6 literal ("[::1]"); port is 1..65535 or "*". */
struct lr_egress_rule {
	const char *pattern;
	int allow_private; /* resolved addresses may be loopback, private or link-local */
};

enum lr_egress_verdict { LR_EGRESS_ALLOW = 0, LR_EGRESS_DENY = 1, LR_EGRESS_FAIL = 2 };

/* What the log callback hears; every string is borrowed for the call only. */
struct lr_egress_event {
	uint64_t exec_id;
	const char *kind;   /* "connect", "http" or "dns" */
	const char *target; /* "host:port" as requested ("name" for dns), or "-" when unparsable */
	enum lr_egress_verdict verdict;
	const char *reason; /* "not on the allow-list", "resolves to loopback 127.0.0.1", "connected to 1.2.3.4:443", ... */
};
const char *lr_egress_verdict_name(enum lr_egress_verdict v); /* "allow", "deny", "fail" */

struct lr_egress_config {
	uint64_t exec_id;
	const struct lr_egress_rule *rules; /* copied; checked by lr_egress_open */
	size_t nrules;
	/*
	 * Optional, consulted instead of rules: 1 allows host:port (and sets
	 * *allow_private), 0 denies. host is lower-case without a trailing dot
	 * or brackets; port 0 means "any port" (the DNS stub asking about a
	 * name). Runs on the loop thread; must not close the egress.
	 */
	int (*policy)(void *arg, const char *host, uint16_t port, int *allow_private);
	/* Optional; runs on the loop thread; must not close the egress. */
	void (*log)(void *arg, const struct lr_egress_event *ev);
	void *arg;
	double connect_timeout; /* seconds per address; 0: 10 */
	double head_timeout;    /* seconds for a client to send its request head; 0: 30 */
	int max_conns;          /* connections served at once; 0: 256; beyond, accepted and closed */
};

/*
 * Starts serving. tcp_fd: a listening TCP socket or -1; udp_fd: a bound UDP
 * socket or -1. Takes ownership of both fds in every case (they are closed
 * on failure). Returns 0, -EINVAL with err naming the bad rule ("egress:
 * bad rule 'x': ...") or -ENOMEM.
 */
int lr_egress_open(struct lr_loop *loop, const struct lr_egress_config *cfg, int tcp_fd,
		   int udp_fd, struct lr_egress **out, char *err, size_t errlen);
/* Connections open now (accepted and not yet finished). */
int lr_egress_conns(const struct lr_egress *e);
/* Closes the listeners and every connection at once; accepts NULL. */
void lr_egress_close(struct lr_egress *e);

/* Checks one rule pattern; 0 or -EINVAL with a message in err. */
int lr_egress_rule_check(const char *pattern, char *err, size_t errlen);

/*
 * How the proxy judges an address (sa: AF_INET or AF_INET6). Returns NULL
 * when it may be reached, else the reason's noun ("loopback", "private",
 * "link-local", "metadata", "unspecified", "multicast", "reserved"). *hard
 * is 1 for the kinds allow_private does not lift (metadata, unspecified,
 * multicast, broadcast, reserved).
 */
const char *lr_egress_classify(const struct sockaddr *sa, int *hard);

/*
 * The parsers, public for the fuzz targets and tests. A request head
 * (everything up to the blank line): request line, headers.
 */
#define LR_EGRESS_HEAD_MAX 8192
#define LR_EGRESS_HEADERS_MAX 100
struct lr_egress_head {
	int connect;            /* 1: CONNECT host:port; 0: an absolute http:// URI */
	char method[24];
	char host[256];         /* lower-case, no brackets, no trailing dot */
	uint16_t port;
	size_t len;             /* bytes of the head, blank line included */
	uint16_t path, pathlen; /* origin-form path of an absolute URI (offsets in the buffer) */
	int minor;              /* HTTP/1.minor */
	int nhdr;
	struct { uint16_t name, nlen, value, vlen; } hdr[LR_EGRESS_HEADERS_MAX];
};
/*
 * Parses buf[0..len). Returns 0 (h filled), -EAGAIN (no blank line yet and
 * len < LR_EGRESS_HEAD_MAX), LR_ETOOBIG (head or header count over the
 * caps) or LR_EPARSE (malformed: bad request line, method, target, version,
 * header syntax, obs-fold, CR or NUL in the wrong place, a scheme other
 * than http, a port out of range).
 */
int lr_egress_head_parse(const char *buf, size_t len, struct lr_egress_head *h);
/*
 * The head to send upstream for a forwarded (non-CONNECT) request:
 * origin-form request line, the client's headers minus hop-by-hop and
 * proxy ones (Connection, Proxy-*, Keep-Alive, TE, Trailer, Upgrade, Host),
 * then "Host: <authority>" and "Connection: close". Appends to out.
 */
int lr_egress_head_forward(const char *buf, const struct lr_egress_head *h, struct lr_buf *out);

/* A DNS query, parsed strictly: one question, no compression, at most one OPT record. */
struct lr_egress_dns_query {
	uint16_t id;
	int rd;                 /* recursion desired, echoed */
	uint16_t qtype, qclass;
	char name[256];         /* lower-case, dotted, no trailing dot */
	size_t qend;            /* offset just past the question */
};
/* 0, LR_EPARSE (malformed: answer with FORMERR when the header is there) or LR_ETOOBIG. */
int lr_egress_dns_parse(const uint8_t *p, size_t n, struct lr_egress_dns_query *q);
/*
 * Writes a reply to q (query: its bytes) into out (cap bytes, at least
 * 512): rcode (0 NOERROR, 1 FORMERR, 3 NXDOMAIN, 5 REFUSED), with one A
 * record 127.0.0.1 when answer_a. Returns its length or LR_ETOOBIG.
 */
int lr_egress_dns_reply(const uint8_t *query, const struct lr_egress_dns_query *q, int rcode,
			int answer_a, uint8_t *out, size_t cap);


/* ---- bundles (host/bundle.c) ---- */

/*
 * A bundle is one gzip-compressed POSIX tar archive: `rig.json` (the
 * manifest) first, then every file sorted by path, regular files only,
 * mtime 0, owner 0, no user or group names, so packing the same tree twice
 * gives the same bytes. The manifest holds format (1), name, version, entry
 * (a module name), description, luarig (the version that packed it) and
 * files: [{path, size, sha256}] sorted by path.
 *
 * Everything read from a bundle is untrusted. lr_bundle_read verifies the
 * whole archive in memory before anyone may use it, and refuses with a
 * message naming the entry: unsafe paths, links, devices, duplicates, files
 * missing from or extra to the manifest, size or SHA-256 mismatches,
 * precompiled Lua bytecode, entries or totals over their caps, and
 * compression-ratio bombs (checked while decompressing).
 * libarchive and libcrypto are opened on first use.
 */
struct lr_bundle_limits {
	size_t max_entry;   /* bytes of one entry (16 MiB) */
	size_t max_total;   /* bytes of all entries together (64 MiB) */
	size_t max_entries; /* entries, directories included (10000) */
	unsigned max_ratio; /* decompressed:compressed over any prefix (100) */
	size_t ratio_after; /* the ratio is checked past this much output (1 MiB) */
	const char *version; /* this luarig: a bundle needing a newer one is refused; NULL: no check */
};
void lr_bundle_limits_default(struct lr_bundle_limits *lim);

struct lr_bundle_file {
	char *path;          /* "lib/util.lua" */
	unsigned char *data; /* size bytes, NUL-terminated */
	size_t size;
	char sha256[65];     /* lower-case hex */
};

/* A verified bundle, owned by the caller: free with lr_bundle_free. */
struct lr_bundle {
	int format;
	char *name, *version, *entry, *luarig;
	char *description;   /* NULL when absent */
	struct lr_bundle_file *files; /* sorted by path */
	size_t nfiles;
	char *manifest;      /* the rig.json bytes as stored */
	size_t manifest_len;
};

/*
 * Reads and verifies a bundle from memory (data, len). On success *out is
 * a bundle that owns copies of everything. On failure returns LR_EREFUSED
 * (the bundle is hostile or broken), LR_EUNAVAILABLE (libarchive or
 * libcrypto missing) or -ENOMEM, and err (errlen bytes) holds a message
 * like "entry '../x.lua' escapes the bundle".
 */
int lr_bundle_read(const void *data, size_t len, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, char *err, size_t errlen);
/* Reads the file at path (at most max_total bytes) and verifies it as above. */
int lr_bundle_load(const char *path, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, char *err, size_t errlen);
void lr_bundle_free(struct lr_bundle *b);
/* The file at path, or NULL. Borrowed: lives as long as b. */
const struct lr_bundle_file *lr_bundle_find(const struct lr_bundle *b, const char *path);
/*
 * The file that serves module name ("app.cli" -> "app/cli.lua", then
 * "app/cli/init.lua"), or NULL.
 */
const struct lr_bundle_file *lr_bundle_module(const struct lr_bundle *b, const char *name);

/*
 * Writes the raw archive bytes of a list of entries to out (appended). The
 * packer uses it for real bundles; tests use it to build hostile ones, so
 * it writes whatever it is given, links and devices included.
 */
enum { LR_BUNDLE_REG, LR_BUNDLE_DIR, LR_BUNDLE_SYMLINK, LR_BUNDLE_HARDLINK,
       LR_BUNDLE_CHR, LR_BUNDLE_FIFO };
struct lr_bundle_entry {
	const char *path;
	int type;
	const void *data;  /* LR_BUNDLE_REG */
	size_t size;
	const char *link;  /* symlink or hardlink target */
};
int lr_bundle_archive(const struct lr_bundle_entry *e, size_t n, struct lr_buf *out,
		      char *err, size_t errlen);

/*
 * Packs directory dir into a bundle at out, or NAME-VERSION.rig in the
 * current directory when out is NULL; the file is written to a temporary
 * name and renamed. dir may hold a rig.json with name, version, entry and
 * description. version is this luarig's, recorded in the manifest. notice
 * (may be NULL) hears about skipped dot-directories and files that do not
 * compile. compile (may be NULL) is called for every file whose name ends
 * in ".lua", with its name as "DIR/lib/x.lua" and its bytes; it returns 0
 * when the file compiles, nonzero otherwise with a message such as
 * "DIR/lib/x.lua:3: unexpected symbol near 'x'" in msg (msglen bytes).
 * Every file is tried; any failure refuses the pack and nothing is written.
 * notice and compile get arg. The path written is copied to written
 * (writtenlen bytes). Returns 0, LR_EREFUSED with err naming the path (a
 * link, a device, a bad rig.json, no entry module, a cap exceeded, Lua that
 * does not compile), LR_EUNAVAILABLE or -errno.
 */
int lr_bundle_write(const char *dir, const char *out, const char *version,
		    void (*notice)(void *arg, const char *msg),
		    int (*compile)(void *arg, const char *name, const void *data, size_t size,
				   char *msg, size_t msglen),
		    void *arg, char *written, size_t writtenlen, char *err, size_t errlen);

/* Compares two versions "MAJOR.MINOR.PATCH[-pre]": <0, 0, >0; -2 with ok=0 when either is malformed. */
int lr_bundle_vercmp(const char *a, const char *b, int *ok);


/* ---- sandboxed executors (host/executor.c) ---- */

/*
 * Executors run commands confined by a profile (sandbox/sandbox.h). A set
 * belongs to one profile: it validates the profile, probes the machine,
 * keeps the guarantee report (construction fails when the profile needs a
 * guarantee the machine lacks), owns a scratch root and the grants store,
 * and hands out at most max executors, one per key, each with its own HOME
 * and TMPDIR under the scratch root.
 *
 * One run: the request plus the profile (plus the grants it redeems) become
 * an lr_sbx_spec (lr_executor_build_spec: pure, unit-tested), sealed in a
 * memfd and given as fd 3 to "/proc/self/exe __sandbox-helper" spawned
 * through lr_proc_spawn (empty environment; the target's is in the spec).
 * The helper leads its own process group and is the parent of the
 * sandbox's pid 1, so killing the group (timeout, cancel, close) ends the
 * whole tree.
 */
struct lr_profile;
struct lr_sbx_caps;
struct lr_sbx_spec;
struct lr_sbx_report;
struct lr_protect_plan;
struct lr_protect_tree;
struct lr_grants;
struct lr_executor_set;
struct lr_executor;
struct lr_exec;

#define LR_EXEC_ERRLEN 320

/* A grant token with what it is for (its class and target). */
struct lr_exec_grant {
	const char *token;
	int cls;            /* enum lr_grant_class */
	const char *target; /* a path or "host:port" */
};

/* What one run asks for. Everything is borrowed for the call. */
struct lr_exec_request {
	char *const *argv;       /* NULL-terminated; or NULL with command */
	const char *command;     /* run as /bin/sh -c command */
	const char *cwd;         /* NULL: the workspace root (or HOME without a workspace) */
	char *const *env;        /* "NAME=value" passed explicitly (kept even if secret-looking);
				    "NAME" alone removes NAME; NULL-terminated or NULL */
	const struct lr_exec_grant *grants;
	size_t ngrants;
	char *const *network;    /* "host:port" targets wanted; NULL-terminated or NULL */
	double timeout;          /* seconds; 0: none */
	size_t output_limit;     /* per stream, head + tail (0: 1 MiB) */
	const void *stdin_data;  /* piped to the command, then closed; NULL: /dev/null */
	size_t stdin_len;
	int inherit_stdio;       /* 1: fds 0, 1, 2 are the host's (the CLI); nothing captured */
};

/*
 * The dirs of one executor and the grants it redeemed, as the spec builder
 * sees them. granted_* lists are what redeemed grants opened (absolute
 * paths; "host:port"), command_granted says a gated command was approved.
 */
struct lr_exec_ctx {
	uint64_t exec_id;
	const char *home, *tmpdir;   /* absolute, existing */
	char *const *host_env;       /* the host's environment (environ) */
	const char *const *granted_read;
	size_t ngranted_read;
	const char *const *granted_write;
	size_t ngranted_write;
	const char *const *granted_net;
	size_t ngranted_net;
	int command_granted;
	uint16_t proxy_port, dns_port; /* non-zero: network targets go through the proxy */
	/* out, or NULL: the scan of the writable roots (sandbox/protect.c) that
	   the spec's protected binds came from, for the launch's placeholders
	   and the check after the run; zeroed by the caller, released by it
	   (build_spec releases it when it fails) */
	struct lr_protect_plan *plan;
	/* an earlier walk of the same roots (lr_protect_opts.cache), or NULL */
	const struct lr_protect_tree *protect_cache;
};

/*
 * Builds the spec for one run into out (owned by the caller: release with
 * lr_sbx_spec_release). The mount view: /usr /bin /sbin /lib /lib32 /lib64
 * /etc /opt /srv read-only when present and host_read is allow; the
 * workspace read-write when workspace_write is allow (or gated and
 * granted), else read-only when workspace_read is allow (or gated and
 * granted); extra roots by their states; granted paths; HOME and TMPDIR
 * read-write at their own paths; the real home only with home=real.
 * Landlock rules match the mounts (read + execute on read-only roots, every
 * write right incl. REFER on writable ones, plus /dev, /proc and /tmp of the
 * view). Inside the writable roots (the workspace, extra roots, granted
 * paths), what the host interprets later stays as it is: the plan of
 * lr_protect_scan (sandbox.h) becomes pins and read-only directories among
 * the mounts and read-only paths (the git files of every repository at any
 * depth, the protected names), or the run is refused (LR_EREFUSED: a tier
 * without a mount view, a symbolic link where a protected entry is, a tree
 * beyond the walk's cap, more binds than the spec holds). The environment is scrubbed (see executor.c); argv[0]
 * is resolved on the view's PATH. Errors: LR_EREFUSED (command or network
 * not allowed, cwd outside the view), LR_ENOTFOUND (no such command),
 * -errno; err says which.
 */
int lr_executor_build_spec(const struct lr_profile *p, const struct lr_sbx_caps *caps,
			   const struct lr_exec_request *r, const struct lr_exec_ctx *ctx,
			   struct lr_sbx_spec *out, char err[LR_EXEC_ERRLEN]);
/* The command line a grant of class command binds to: command, or argv joined by spaces. */
int lr_executor_command_line(const struct lr_exec_request *r, struct lr_buf *out);

/*
 * A set. profile is copied. scratch_root must not exist (its parent must):
 * it is created 0700 and removed with everything in it by
 * lr_executor_set_free; NULL makes one under $TMPDIR (or /tmp). max: the
 * number of executors get may create (0: 16). Errors: -EINVAL (profile
 * invalid), LR_EREFUSED (a required guarantee is missing), -errno.
 */
int lr_executor_set_new(struct lr_loop *loop, const struct lr_profile *p,
			const char *scratch_root, size_t max, struct lr_executor_set **out,
			char err[LR_EXEC_ERRLEN]);
/*
 * Ends every run still going and waits until each is gone (and every
 * process closed before on the loop: lr_proc_reap_all), removes the
 * scratch root (following no symlink), frees. Accepts NULL.
 */
void lr_executor_set_free(struct lr_executor_set *s);
const char *lr_executor_set_root(const struct lr_executor_set *s);
const struct lr_sbx_report *lr_executor_set_report(const struct lr_executor_set *s);
const struct lr_profile *lr_executor_set_profile(const struct lr_executor_set *s);
/* The set's grant store: the host mints there after a gate approval. */
struct lr_grants *lr_executor_set_grants(struct lr_executor_set *s);
/*
 * The executor for key ([A-Za-z0-9_.-]{1,64}), created on first use with
 * HOME and TMPDIR dirs of its own. Borrowed: lives as long as the set.
 * Errors: -EINVAL (bad key), LR_ETOOBIG (the set is full), -errno.
 */
int lr_executor_get(struct lr_executor_set *s, const char *key, struct lr_executor **out,
		    char err[LR_EXEC_ERRLEN]);
uint64_t lr_executor_id(const struct lr_executor *e);
const char *lr_executor_home(const struct lr_executor *e);
const char *lr_executor_tmpdir(const struct lr_executor *e);
const char *lr_executor_key(const struct lr_executor *e);
/* The profile's fingerprint (grants bind to it). */
const char *lr_executor_fingerprint(const struct lr_executor *e);
/* Ends this executor's runs still going (they complete as aborted); the executor stays usable. */
void lr_executor_abort(struct lr_executor *e);

/*
 * Everything needed to spawn the helper for one request: grants redeemed,
 * spec built and sealed. proc has file, argv, envp (empty), extra_fds (the
 * memfd as fd 3) and cwd set; the caller sets stdio, caps, timeout and
 * on_event, then calls lr_proc_spawn. Do not copy (proc points into it).
 * Release after the spawn (the child holds its own copy of the memfd).
 */
struct lr_exec_launch {
	int spec_fd;
	/*
	 * The helper's fds 3, 4, 5: the sealed spec, the read end of the run's
	 * lifeline, and the control socket (with a proxy). proc.lifeline_fd is
	 * the lifeline's write end: the proc keeps a copy, so that ending the
	 * proc (or the host) ends every process of the run.
	 */
	int fds[3];
	int life_w;
	struct lr_proc_opts proc;
	int unconfined;
	/*
	 * With network through the proxy: the host end of the helper's control
	 * socket (fd 4 in the helper; the listeners arrive on it), and the
	 * allow-list (owned, "host:port" patterns; allow_any: every public
	 * target). -1 / empty otherwise. lr_executor_run serves the proxy; a
	 * caller that cannot must refuse a launch with ctl_fd >= 0.
	 */
	int ctl_fd;
	char **allow;
	size_t nallow;
	int allow_any;
	struct lr_exec_after *after; /* see lr_exec_after_finish */
};
int lr_executor_launch_init(struct lr_executor *e, const struct lr_exec_request *r,
			    struct lr_exec_launch *l, char err[LR_EXEC_ERRLEN]);
void lr_executor_launch_release(struct lr_exec_launch *l);

/*
 * What a launch leaves to do once its command is over (l->after, NULL when
 * nothing): the check after the run (a .git or bare repository that
 * appeared inside a repository of a writable root, a protected name that
 * appeared at the top of a repository: moved aside) and the placeholders
 * removed. lr_exec_after_finish does both once and frees a; moved (may be
 * NULL) gets one line per entry moved aside. 0, or -errno / LR_ETOOBIG with
 * err. lr_executor_run does it itself; a caller that spawns l.proc on its
 * own takes l.after (setting it NULL) and finishes it when the process is
 * gone; launch_release finishes one that is left.
 */
struct lr_exec_after;
int lr_exec_after_finish(struct lr_exec_after *a, struct lr_buf *moved, char err[LR_EXEC_ERRLEN]);

/*
 * A run: starts the helper and collects its output, each stream capped at
 * output_limit as head + tail with a line "[… N bytes omitted …]" between
 * (reading goes on to the end). done(x, arg) runs on the loop once the run
 * is over (never inside this call; never after lr_exec_free). On failure
 * returns LR_EREFUSED, LR_ENOTFOUND, -errno with err, and done never runs.
 */
struct lr_exec_result {
	int code;            /* exit status, or -1 */
	int signo;           /* the signal that ended the helper, or 0 */
	int timed_out;
	int truncated;       /* either stream lost bytes to the cap */
	int setup_failed;    /* the helper exited 126 before exec; err holds its message */
	int aborted;         /* the set was freed while the run went on; err says so */
	struct lr_buf out, err_out; /* stdout, stderr (empty with inherit_stdio) */
	struct lr_buf net_log;      /* the egress proxy's verdicts, one line each:
				       "allow|deny|fail connect|http|dns TARGET: reason" */
	struct lr_buf moved;        /* what the check after the run moved aside, one line each:
				       "'PATH' moved to 'NEW': why" (and its failure, if any) */
	char err[LR_EXEC_ERRLEN];
};
int lr_executor_run(struct lr_executor *e, const struct lr_exec_request *r,
		    void (*done)(struct lr_exec *x, void *arg), void *arg, struct lr_exec **out,
		    char err[LR_EXEC_ERRLEN]);
const struct lr_exec_result *lr_exec_result(const struct lr_exec *x);
pid_t lr_exec_pid(const struct lr_exec *x);
/* Kills the tree if it still runs, reaps, frees. Accepts NULL. */
void lr_exec_free(struct lr_exec *x);


#endif
