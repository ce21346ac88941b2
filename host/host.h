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

/* ---- SSE framing (host/sse.c) ---- */


/* ---- HTTP client (host/http_client.c) ---- */


/* ---- HTTP server (host/http_server.c) ---- */

/*
 * An HTTP/1.1 server over evhttp. The server hands each request, body
 * complete, to on_request; the callee owns the lr_httpd_req from then on
 * and must lr_httpd_req_free it. A request is answered either whole
 * (lr_httpd_req_reply) or streamed (start, write..., finish; chunked for
 * HTTP/1.1 clients). While a request is in hand the server watches its
 * connection: when the client goes away, on_close runs once and every later
 * write fails with LR_ECLOSED. Bodies above max_body get evhttp's 413 and
 * malformed requests its 400, without reaching on_request.
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
 * The response. add_header refuses (-EINVAL) names that are not tokens and
 * values holding CR, LF or NUL. reply sends a whole response; start begins
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


/* ---- processes (host/proc.c) ---- */


/* ---- bundles (host/bundle.c) ---- */


#endif
