/*
 * http_server.h — HTTP server (host/http_server.c, host/http_head.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_HTTP_SERVER_H
#define LR_HOST_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"

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
/*
 * lr_httpd_req_send in three parts, so that the sends of a fan-out can run
 * on more than one thread (lr_loop_share). begin, on the loop thread:
 * 1 when the chunk is framed and goes straight to the socket, and then
 * write (on any thread, touching only r's staged bytes and its socket) and
 * end (on the loop thread, before anything else touches r or the loop runs)
 * must follow; otherwise what lr_httpd_req_send returns, the send done.
 */
int lr_httpd_req_send_begin(struct lr_httpd_req *r);
void lr_httpd_req_send_write(struct lr_httpd_req *r);
int lr_httpd_req_send_end(struct lr_httpd_req *r);
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

#endif
