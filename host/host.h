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


/* ---- HTTP client (host/http_client.c) ---- */


/* ---- HTTP server (host/http_server.c) ---- */


/* ---- processes (host/proc.c) ---- */


/* ---- bundles (host/bundle.c) ---- */


#endif
