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
 * when body bytes of a stream arrive and when it ends; the owner reads
 * lr_http_resp and takes events (lr_http_next). notify runs inside
 * libcurl's callbacks (and possibly inside lr_http_next): it must only
 * record or wake, never free the request.
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
	size_t max_unread;           /* body bytes received and not yet framed by lr_http_next
				        at which the transfer pauses; 0: 1 MiB */
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
 * A decoded event as lr_http_next hands it out: the pointers borrow the
 * request's bytes and stay valid until the next lr_http_next or
 * lr_http_req_free.
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
 * A stream's body bytes wait in one buffer as they came, and events are
 * framed out of them only here, one per call, when the owner reads: fills
 * *ev and returns 1, or returns 0 when no whole event has come (wait for
 * notify; once resp->done, 0 means the end). The transfer pauses while
 * max_unread bytes wait unframed and goes on once all of them are framed.
 * Resuming may deliver bytes at once, and a framing failure (a line or
 * event cap) ends the transfer with resp->rc set, so notify may run inside
 * this call; for a stream, resp->rc may thus still change after resp->done
 * while the last bytes are framed.
 */
int lr_http_next(struct lr_http_req *r, struct lr_http_event *ev);
/* Aborts at once (the connection is closed) and frees; accepts NULL. */
void lr_http_req_free(struct lr_http_req *r);

#endif
