/*
 * http_client.h — HTTP client (host/http_client.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_HTTP_CLIENT_H
#define LR_HOST_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"

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
	struct lr_err err;       /* the message for rc */
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
 * notify is never called and err says why: -EINVAL for a bad
 * option, LR_EUNAVAILABLE when libcurl cannot be loaded.
 */
int lr_http_start(struct lr_http *c, const struct lr_http_opts *o,
		  void (*notify)(void *arg), void *arg, struct lr_http_req **out, struct lr_err *err);
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

#endif
