/*
 * http_server.c — an HTTP/1.1 server on libevent bufferevents.
 *
 * The request parser is ours (host/http_head.c), so every answer the
 * server gives is ours too: what it refuses before a handler sees the
 * request (a malformed head, a head or body over its cap, an Expect it
 * does not do) is a JSON error like the handlers' own, counted per code.
 * It used to be evhttp, whose refusals were HTML pages nothing could
 * replace (libevent 2.1 has no hook between its parser and its error
 * page).
 *
 * A connection serves one request at a time:
 *   C_HEAD    reading a request head (read timeout: IO_TIMEOUT)
 *   C_BODY    reading its body, by Content-Length or chunked
 *   C_HANDLER the request is in hand: the owner answers when it likes.
 *             Reading goes on without a timeout, so a client that hangs up
 *             is seen at once (end of file); bytes of a pipelined request
 *             wait in the input buffer, up to a cap.
 *   C_FLUSH   the response is complete and being written; then the next
 *             request (keep-alive) or close
 *   C_LINGER  a refusal is being written; then the write side is shut and
 *             what the client still sends is read and dropped for a while,
 *             so it reads the answer instead of a reset
 *
 * Lifetime of a request (struct lr_httpd_req). The connection holds it
 * (c->req, r->conn) from its head to the end of its response; the owner
 * holds it from on_request to lr_httpd_req_free. Whichever lets go last
 * frees it. A request whose connection is gone is closed: writes answer
 * LR_ECLOSED. Callbacks of the bufferevents are deferred (run from the
 * loop, never inside one of our calls), so an owner never sees on_close or
 * a new request while it is inside lr_httpd_req_*.
 */
#include "http_server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Seconds a connection may make no progress reading a request or writing a response. */
#define IO_TIMEOUT 60
/* After a refusal: seconds without a byte, and bytes in all, read and dropped before closing. */
#define LINGER_TIMEOUT 5
#define LINGER_MAX ((size_t)64 << 20)

enum { REF_MALFORMED, REF_HEADERS, REF_BODY, REF_EXPECT };
static const char *const refusal_codes[LR_HTTPD_REFUSALS] = {
	"malformed_request", "headers_too_large", "body_too_large", "expectation_failed",
};

struct conn;

struct lr_httpd {
	struct lr_loop *loop;
	struct evconnlistener *lev;
	int port;
	size_t max_body, max_headers;
	void (*on_request)(struct lr_httpd_req *r, void *arg);
	void *arg;
	struct conn *conns;
	uint64_t refused[LR_HTTPD_REFUSALS];
};

enum conn_state { C_HEAD, C_BODY, C_HANDLER, C_FLUSH, C_LINGER };

struct conn {
	struct lr_httpd *srv;
	struct bufferevent *bev;
	struct conn *next, *prev;
	struct lr_httpd_req *req; /* from its head to the end of its response */
	enum conn_state state;
	struct lr_httpd_chunked chunks;
	uint64_t body_left; /* Content-Length bytes still to come */
	int chunked_body;
	int keep;           /* the connection stays open after this response */
	int minor;          /* HTTP/1.minor of the request in hand */
	int shut;           /* C_LINGER: the write side is shut, dropping input */
	size_t lingered;
	char remote[INET6_ADDRSTRLEN + 16];
};

struct hdr {
	const char *name, *value;
};

struct lr_httpd_req {
	struct conn *conn;      /* NULL once the connection is done with it */
	char *strings;          /* method, path, query, header names and values */
	const char *method, *path, *query;
	struct hdr *hdrs;
	int nhdr;
	struct evbuffer *body;
	struct evbuffer *out_headers; /* "Name: value\r\n" lines of the response */
	struct evbuffer *chunk;       /* staged for the next write */
	struct evbuffer_cb_entry *drain;
	size_t drain_low;
	void (*on_close)(struct lr_httpd_req *r, void *arg);
	void (*on_drain)(struct lr_httpd_req *r, void *arg);
	void *arg;
	int send_fd; /* the socket, from lr_httpd_req_send_begin to _end */
	char remote[INET6_ADDRSTRLEN + 16];
	unsigned dispatched : 1, closed : 1, started : 1, finished : 1, freed : 1, aborting : 1,
		head : 1, chunked : 1, no_body : 1;
};

static const struct timeval io_tv = { IO_TIMEOUT, 0 };
static const struct timeval linger_tv = { LINGER_TIMEOUT, 0 };

/* ---- requests ---- */

static void req_destroy(struct lr_httpd_req *r)
{
	if (r->body)
		evbuffer_free(r->body);
	if (r->out_headers)
		evbuffer_free(r->out_headers);
	if (r->chunk)
		evbuffer_free(r->chunk);
	free(r->strings);
	free(r->hdrs);
	free(r);
}

static struct evbuffer *conn_output(const struct conn *c)
{
	return bufferevent_get_output(c->bev);
}

void lr_httpd_req_cancel_drain(struct lr_httpd_req *r)
{
	if (r->drain) {
		if (r->conn)
			evbuffer_remove_cb_entry(conn_output(r->conn), r->drain);
		r->drain = NULL;
	}
}

/* Builds the request from a parsed head; NULL when out of memory. */
static struct lr_httpd_req *req_new(const char *buf, const struct lr_httpd_head *h,
				    const char *remote)
{
	struct lr_httpd_req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	/* method \0 target \0 then name \0 value \0 per header; the target is split in place */
	size_t need = h->method_len + 1 + h->target_len + 2;
	for (int i = 0; i < h->nhdr; i++)
		need += h->hdr[i].nlen + h->hdr[i].vlen + 2;
	r->strings = malloc(need);
	r->hdrs = calloc((size_t)h->nhdr + 1, sizeof *r->hdrs);
	r->body = evbuffer_new();
	r->out_headers = evbuffer_new();
	r->chunk = evbuffer_new();
	if (!r->strings || !r->hdrs || !r->body || !r->out_headers || !r->chunk) {
		req_destroy(r);
		return NULL;
	}
	char *p = r->strings;
	r->method = p;
	memcpy(p, buf + h->method, h->method_len);
	p += h->method_len;
	*p++ = 0;
	char *target = p;
	memcpy(p, buf + h->target, h->target_len);
	p[h->target_len] = 0;
	p += h->target_len + 1;
	*p++ = 0;
	char *hash = strchr(target, '#');
	if (hash)
		*hash = 0;
	char *q = strchr(target, '?');
	if (q) {
		*q = 0;
		r->query = q + 1;
	}
	r->path = target;
	for (int i = 0; i < h->nhdr; i++) {
		r->hdrs[i].name = p;
		memcpy(p, buf + h->hdr[i].name, h->hdr[i].nlen);
		p += h->hdr[i].nlen;
		*p++ = 0;
		r->hdrs[i].value = p;
		memcpy(p, buf + h->hdr[i].value, h->hdr[i].vlen);
		p += h->hdr[i].vlen;
		*p++ = 0;
	}
	r->nhdr = h->nhdr;
	r->head = h->method_len == 4 && memcmp(buf + h->method, "HEAD", 4) == 0;
	snprintf(r->remote, sizeof r->remote, "%s", remote);
	return r;
}

/* ---- connections ---- */

static void conn_read(struct bufferevent *b, void *arg);
static void conn_write(struct bufferevent *b, void *arg);
static void conn_event(struct bufferevent *b, short what, void *arg);

/*
 * Ends the connection. A request in hand is closed and its owner told
 * (on_close) unless it is the owner who aborts; one never handed over is
 * freed. Nothing of c or of its server is touched after on_close.
 */
static void conn_free(struct conn *c)
{
	struct lr_httpd *h = c->srv;
	struct lr_httpd_req *r = c->req;
	if (r) {
		lr_httpd_req_cancel_drain(r);
		r->conn = NULL;
		c->req = NULL;
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	bufferevent_free(c->bev);
	free(c);
	if (!r)
		return;
	if (!r->dispatched) {
		req_destroy(r);
		return;
	}
	r->closed = 1;
	if (!r->aborting && r->on_close)
		r->on_close(r, r->arg);
}

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 203: return "Non-Authoritative Information";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 412: return "Precondition Failed";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 416: return "Range Not Satisfiable";
	case 417: return "Expectation Failed";
	case 421: return "Misdirected Request";
	case 422: return "Unprocessable Content";
	case 426: return "Upgrade Required";
	case 428: return "Precondition Required";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	}
	return status < 200 ? "Informational" : status < 300 ? "Success" : status < 400 ? "Redirection"
	       : status < 500 ? "Client Error" : "Server Error";
}

/* "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n", formatted once a second. */
static const char *date_line(void)
{
	static char line[64];
	static time_t at = -1;
	time_t now = time(NULL);
	if (now != at) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(line, sizeof line, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
		at = now;
	}
	return line;
}

/*
 * Queues the status line and header block of r's response: the owner's
 * fields, then Date and the framing. len is the body length of a whole
 * response, or -1 for a stream (chunked for HTTP/1.1 clients, else
 * delimited by closing the connection).
 */
static int write_head(struct lr_httpd_req *r, int status, int64_t len)
{
	struct conn *c = r->conn;
	struct evbuffer *out = conn_output(c);
	int rc = evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status, reason(status)) < 0 ||
		 evbuffer_add_buffer(out, r->out_headers) != 0 ||
		 evbuffer_add(out, date_line(), strlen(date_line())) != 0;
	r->no_body = r->head || status < 200 || status == 204 || status == 304;
	if (status < 200 || status == 204 || status == 304) {
		/* no body and no length */
	} else if (len >= 0) {
		rc |= evbuffer_add_printf(out, "Content-Length: %lld\r\n", (long long)len) < 0;
	} else if (c->minor >= 1) {
		r->chunked = 1;
		rc |= evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28) != 0;
	}
	if (len < 0 && !r->chunked)
		c->keep = 0; /* the end of the stream is the end of the connection */
	if (!c->keep)
		rc |= evbuffer_add(out, "Connection: close\r\n\r\n", 21) != 0;
	else if (c->minor == 0)
		rc |= evbuffer_add(out, "Connection: keep-alive\r\n\r\n", 26) != 0;
	else
		rc |= evbuffer_add(out, "\r\n", 2) != 0;
	return rc ? -ENOMEM : 0;
}

/* The client gets a JSON error and the connection closes, after a linger. */
static void conn_refuse(struct conn *c, int which, int status, const char *message)
{
	struct lr_httpd *h = c->srv;
	h->refused[which]++;
	if (c->req) {
		req_destroy(c->req); /* never handed over */
		c->req = NULL;
	}
	char body[512];
	int n = snprintf(body, sizeof body,
			 "{\"error\":{\"code\":\"%s\",\"message\":\"%s\",\"retryable\":false}}",
			 refusal_codes[which], message);
	struct evbuffer *out = conn_output(c);
	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			    "Cache-Control: no-store\r\n%sContent-Length: %d\r\n"
			    "Connection: close\r\n\r\n%s",
			    status, reason(status), date_line(), n, body);
	c->state = C_LINGER;
	c->keep = 0;
	/* input stays off until the answer is out: then dropped, not parsed */
	bufferevent_disable(c->bev, EV_READ);
	bufferevent_set_timeouts(c->bev, NULL, &io_tv);
	bufferevent_enable(c->bev, EV_WRITE);
}

/* The request in hand goes to its owner. Nothing of c is touched after on_request. */
static void conn_dispatch(struct conn *c)
{
	struct lr_httpd *h = c->srv;
	struct lr_httpd_req *r = c->req;
	c->state = C_HANDLER;
	r->dispatched = 1;
	/* no read timeout while the owner thinks, but reading on: a hang-up is end of file */
	bufferevent_set_timeouts(c->bev, NULL, &io_tv);
	bufferevent_setwatermark(c->bev, EV_READ, 0, h->max_headers);
	bufferevent_enable(c->bev, EV_READ);
	h->on_request(r, h->arg);
}

/*
 * Moves body bytes from the input into the request: 1 when the body is
 * whole, 0 when more must come, LR_ETOOBIG over max_body, -EMSGSIZE when
 * the trailer fields are over their cap, LR_EPARSE, -ENOMEM.
 */
static int read_body(struct conn *c)
{
	struct lr_httpd *h = c->srv;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	struct lr_httpd_req *r = c->req;
	if (!c->chunked_body) {
		size_t n = evbuffer_get_length(in);
		if (n > c->body_left)
			n = (size_t)c->body_left;
		if (n && evbuffer_remove_buffer(in, r->body, n) != (int)n)
			return -ENOMEM;
		c->body_left -= n;
		return c->body_left == 0;
	}
	for (;;) {
		size_t len = evbuffer_get_length(in);
		/* a step looks at one contiguous piece: at most a line, or a run of data */
		size_t look = len < 4096 ? len : 4096;
		const char *p = look ? (const char *)evbuffer_pullup(in, (ev_ssize_t)look) : "";
		if (look && !p)
			return -ENOMEM;
		size_t used;
		int rc = lr_httpd_chunked_step(&c->chunks, p, look, &used);
		if (rc == -EAGAIN)
			return 0;
		if (rc == LR_ETOOBIG)
			return -EMSGSIZE; /* the trailer, not the body */
		if (rc == LR_EPARSE)
			return rc;
		if (rc == LR_HTTPD_CHUNK_DATA) {
			if (evbuffer_get_length(r->body) + used > h->max_body)
				return LR_ETOOBIG;
			if (evbuffer_remove_buffer(in, r->body, used) != (int)used)
				return -ENOMEM;
			continue;
		}
		evbuffer_drain(in, used);
		if (rc == LR_HTTPD_CHUNK_DONE)
			return 1;
	}
}

static void refuse_body_too_large(struct conn *c)
{
	char msg[96];
	snprintf(msg, sizeof msg, "the request body is over %zu bytes", c->srv->max_body);
	conn_refuse(c, REF_BODY, 413, msg);
}

/* Reads what the input holds as far as it goes: heads, bodies, then a dispatch. */
static void conn_advance(struct conn *c)
{
	struct lr_httpd *h = c->srv;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	for (;;) {
		if (c->state == C_LINGER) {
			size_t n = evbuffer_get_length(in);
			evbuffer_drain(in, n);
			c->lingered += n;
			if (c->shut && c->lingered > LINGER_MAX)
				conn_free(c);
			return;
		}
		if (c->state == C_HEAD) {
			size_t len = evbuffer_get_length(in);
			if (len == 0)
				return;
			size_t look = len < h->max_headers ? len : h->max_headers;
			const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
			struct lr_httpd_head head;
			int rc = buf ? lr_httpd_head_parse(buf, look, h->max_headers, &head) : -ENOMEM;
			if (rc == -EAGAIN)
				return;
			if (rc == -ENOMEM) {
				conn_free(c);
				return;
			}
			if (rc) {
				conn_refuse(c, head.status == 431 ? REF_HEADERS
					       : head.status == 417 ? REF_EXPECT : REF_MALFORMED,
					    head.status, head.why);
				continue;
			}
			struct lr_httpd_req *r = req_new(buf, &head, c->remote);
			if (!r) {
				conn_free(c);
				return;
			}
			r->conn = c;
			c->req = r;
			c->minor = head.minor;
			c->keep = head.minor >= 1 ? !head.close : head.keep_alive && !head.close;
			c->chunked_body = head.chunked;
			c->body_left = head.content_length > 0 ? (uint64_t)head.content_length : 0;
			evbuffer_drain(in, head.len);
			if (head.content_length > 0 && (uint64_t)head.content_length > h->max_body) {
				refuse_body_too_large(c);
				continue;
			}
			if (c->chunked_body)
				lr_httpd_chunked_init(&c->chunks, h->max_headers);
			if (!c->chunked_body && c->body_left == 0) {
				conn_dispatch(c);
				return;
			}
			if (head.expect_continue && evbuffer_get_length(in) == 0)
				evbuffer_add(conn_output(c), "HTTP/1.1 100 Continue\r\n\r\n", 25);
			c->state = C_BODY;
		}
		if (c->state == C_BODY) {
			int rc = read_body(c);
			if (rc == 0)
				return;
			if (rc == 1) {
				conn_dispatch(c);
				return;
			}
			if (rc == -ENOMEM) {
				conn_free(c);
				return;
			}
			if (rc == LR_ETOOBIG)
				refuse_body_too_large(c);
			else if (rc == -EMSGSIZE)
				conn_refuse(c, REF_HEADERS, 431, "the trailer fields are too large");
			else
				conn_refuse(c, REF_MALFORMED, 400, "malformed chunked body");
			continue;
		}
		return; /* C_HANDLER, C_FLUSH: the next request waits its turn */
	}
}

static void conn_read(struct bufferevent *b, void *arg)
{
	(void)b;
	conn_advance(arg);
}

/*
 * The response went out whole: the next request, or close. A stream
 * answering HEAD is whole once its head is out: the owner, still
 * streaming into nothing, is told as if the client had left.
 */
static void conn_done(struct conn *c)
{
	struct lr_httpd_req *r = c->req, *ended = NULL;
	if (r) {
		lr_httpd_req_cancel_drain(r);
		r->conn = NULL;
		c->req = NULL;
		if (r->freed) {
			req_destroy(r);
		} else if (!r->finished) {
			r->closed = 1;
			ended = r;
		}
	}
	if (!c->keep) {
		conn_free(c);
	} else {
		c->state = C_HEAD;
		bufferevent_set_timeouts(c->bev, &io_tv, &io_tv);
		bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
		bufferevent_enable(c->bev, EV_READ);
		conn_advance(c);
	}
	/* last: it may close the server; c may be gone already */
	if (ended && ended->on_close)
		ended->on_close(ended, ended->arg);
}

static void conn_write(struct bufferevent *b, void *arg)
{
	struct conn *c = arg;
	if (evbuffer_get_length(bufferevent_get_output(b)) != 0)
		return;
	if (c->state == C_FLUSH) {
		conn_done(c);
	} else if (c->state == C_LINGER && !c->shut) {
		/* the answer is out: stop writing, drop what still comes for a while */
		c->shut = 1;
		shutdown(bufferevent_getfd(b), SHUT_WR);
		bufferevent_set_timeouts(b, &linger_tv, NULL);
		bufferevent_setwatermark(b, EV_READ, 0, 0);
		bufferevent_enable(b, EV_READ);
		conn_advance(c);
	}
}

static void conn_event(struct bufferevent *b, short what, void *arg)
{
	(void)b;
	(void)what;
	/* end of file, an error or a timeout, in any state: the connection is over */
	conn_free(arg);
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	(void)lev;
	(void)salen;
	struct lr_httpd *h = arg;
	/*
	 * No Nagle: an answer or an event is written as it is ready, often in two
	 * small writes (an SSE event, then the chunk that ends the stream); with
	 * Nagle the second waits for the peer's delayed ACK, 40 ms on Linux, per
	 * request (measured: an MCP tools/call over Streamable HTTP took 47 ms).
	 */
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct conn *c = calloc(1, sizeof *c);
	struct bufferevent *b = c ? bufferevent_socket_new(lr_loop_base(h->loop), fd,
		BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS) : NULL;
	if (!b) {
		free(c);
		evutil_closesocket(fd);
		return;
	}
	char addr[INET6_ADDRSTRLEN] = "";
	unsigned port = 0;
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof addr);
		port = ntohs(s6->sin6_port);
		snprintf(c->remote, sizeof c->remote, "[%s]:%u", addr, port);
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof addr);
		port = ntohs(s4->sin_port);
		snprintf(c->remote, sizeof c->remote, "%s:%u", addr, port);
	}
	c->srv = h;
	c->bev = b;
	c->state = C_HEAD;
	c->next = h->conns;
	if (h->conns)
		h->conns->prev = c;
	h->conns = c;
	bufferevent_setcb(b, conn_read, conn_write, conn_event, c);
	bufferevent_set_timeouts(b, &io_tv, &io_tv);
	bufferevent_enable(b, EV_READ | EV_WRITE);
}

int lr_httpd_open(struct lr_loop *loop, const struct lr_httpd_config *cfg,
		  struct lr_httpd **out)
{
	*out = NULL;
	char portstr[16];
	snprintf(portstr, sizeof portstr, "%d", cfg->port);
	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(cfg->host, portstr, &hints, &ai) != 0 || !ai)
		return LR_EPARSE;

	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int rc = -errno;
		freeaddrinfo(ai);
		return rc;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
		int rc = -errno;
		freeaddrinfo(ai);
		close(fd);
		return rc;
	}
	freeaddrinfo(ai);

	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int port = 0;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
		port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						: ntohs(((struct sockaddr_in *)&ss)->sin_port);

	struct lr_httpd *h = calloc(1, sizeof *h);
	/* Accepted sockets inherit close-on-exec from the listener's flags. */
	struct evconnlistener *lev = h ? evconnlistener_new(lr_loop_base(loop), on_accept, h,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 0, fd) : NULL;
	if (!lev) {
		close(fd);
		free(h);
		return -ENOMEM;
	}

	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);

	h->loop = loop;
	h->lev = lev;
	h->port = port;
	h->max_body = cfg->max_body;
	h->max_headers = cfg->max_headers;
	h->on_request = cfg->on_request;
	h->arg = cfg->arg;
	*out = h;
	return 0;
}

int lr_httpd_port(const struct lr_httpd *h)
{
	return h->port;
}

void lr_httpd_close(struct lr_httpd *h)
{
	if (!h)
		return;
	evconnlistener_free(h->lev);
	/* each request in hand gets on_close, synchronously */
	while (h->conns)
		conn_free(h->conns);
	free(h);
}

const char *lr_httpd_refusal_code(int i)
{
	return i >= 0 && i < LR_HTTPD_REFUSALS ? refusal_codes[i] : NULL;
}

void lr_httpd_refusals(const struct lr_httpd *h, uint64_t out[LR_HTTPD_REFUSALS])
{
	memcpy(out, h->refused, sizeof h->refused);
}

const char *lr_httpd_req_method(const struct lr_httpd_req *r)
{
	return r->method;
}

const char *lr_httpd_req_path(const struct lr_httpd_req *r)
{
	return *r->path ? r->path : "/";
}

const char *lr_httpd_req_query(const struct lr_httpd_req *r)
{
	return r->query;
}

const char *lr_httpd_req_remote(const struct lr_httpd_req *r)
{
	return r->remote;
}

const char *lr_httpd_req_body(const struct lr_httpd_req *r, size_t *len)
{
	*len = evbuffer_get_length(r->body);
	if (*len == 0)
		return "";
	const char *p = (const char *)evbuffer_pullup(r->body, -1);
	if (!p)
		*len = 0;
	return p ? p : "";
}

const void *lr_httpd_req_header_next(const struct lr_httpd_req *r, const void *cursor,
				     const char **name, const char **value)
{
	const struct hdr *e = cursor ? (const struct hdr *)cursor + 1 : r->hdrs;
	if (e >= r->hdrs + r->nhdr)
		return NULL;
	*name = e->name;
	*value = e->value;
	return e;
}

static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

int lr_httpd_req_add_header(struct lr_httpd_req *r, const char *name, const char *value)
{
	if (!*name)
		return -EINVAL;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (!is_tchar(*p))
			return -EINVAL;
	if (strpbrk(value, "\r\n"))
		return -EINVAL;
	if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
	    strcasecmp(name, "connection") == 0)
		return -EINVAL;
	if (r->closed || !r->conn)
		return LR_ECLOSED;
	if (r->started || r->finished)
		return -EINVAL;
	return evbuffer_add_printf(r->out_headers, "%s: %s\r\n", name, value) < 0 ? -ENOMEM : 0;
}

static int req_check_open(const struct lr_httpd_req *r)
{
	return r->closed || !r->conn ? LR_ECLOSED : 0;
}

int lr_httpd_req_reply(struct lr_httpd_req *r, int status, const void *body, size_t len)
{
	int rc = req_check_open(r);
	if (rc)
		return rc;
	if (r->started || r->finished)
		return -EINVAL;
	struct conn *c = r->conn;
	if (write_head(r, status, (int64_t)len) != 0 ||
	    (!r->no_body && len && evbuffer_add(conn_output(c), body, len) != 0))
		return -ENOMEM;
	r->finished = 1;
	c->state = C_FLUSH;
	return 0;
}

int lr_httpd_req_start(struct lr_httpd_req *r, int status)
{
	int rc = req_check_open(r);
	if (rc)
		return rc;
	if (r->started || r->finished)
		return -EINVAL;
	if (write_head(r, status, -1) != 0)
		return -ENOMEM;
	r->started = 1;
	if (r->no_body) /* HEAD (or a status without a body): the head is all of it */
		r->conn->state = C_FLUSH;
	return 0;
}

int lr_httpd_req_append(struct lr_httpd_req *r, const void *p, size_t n)
{
	return evbuffer_add(r->chunk, p, n) == 0 ? 0 : -ENOMEM;
}

int lr_httpd_req_append_lines(struct lr_httpd_req *r, const char *prefix, const char *s,
			      size_t n)
{
	size_t plen = strlen(prefix);
	size_t i = 0;
	for (;;) {
		size_t j = i;
		while (j < n && s[j] != '\n' && s[j] != '\r')
			j++;
		if (evbuffer_add(r->chunk, prefix, plen) || evbuffer_add(r->chunk, s + i, j - i) ||
		    evbuffer_add(r->chunk, "\n", 1))
			return -ENOMEM;
		if (j >= n)
			return 0;
		if (s[j] == '\r' && j + 1 < n && s[j + 1] == '\n')
			j++;
		i = j + 1;
		if (i >= n)
			return 0; /* a trailing break ends the last line */
	}
}

/* Frames the staged chunk for the wire: chunked framing, or nothing at all for HEAD. */
static int frame_chunk(struct lr_httpd_req *r)
{
	size_t n = evbuffer_get_length(r->chunk);
	if (r->no_body) {
		evbuffer_drain(r->chunk, n);
		return 0;
	}
	if (r->chunked) {
		/* "%zx\r\n" by hand: snprintf was most of a fan-out send's own instructions */
		char head[24];
		size_t hl = sizeof head;
		head[--hl] = '\n';
		head[--hl] = '\r';
		size_t v = n;
		do {
			head[--hl] = "0123456789abcdef"[v & 15];
			v >>= 4;
		} while (v);
		if (evbuffer_prepend(r->chunk, head + hl, sizeof head - hl) != 0 ||
		    evbuffer_add(r->chunk, "\r\n", 2) != 0) {
			evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
			return -ENOMEM;
		}
	}
	return 0;
}

int lr_httpd_req_write(struct lr_httpd_req *r, const void *p, size_t n)
{
	int rc = req_check_open(r);
	if (rc || !r->started || r->finished) {
		evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
		return rc ? rc : -EINVAL;
	}
	if (n && evbuffer_add(r->chunk, p, n) != 0)
		return -ENOMEM;
	if (evbuffer_get_length(r->chunk) == 0) /* an empty chunk would end the response */
		return 0;
	if (frame_chunk(r) != 0)
		return -ENOMEM;
	if (evbuffer_get_length(r->chunk) &&
	    evbuffer_add_buffer(conn_output(r->conn), r->chunk) != 0) { /* moves, no copy */
		evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
		return -ENOMEM;
	}
	return 0;
}

/*
 * Like lr_httpd_req_write(r, NULL, 0), but when nothing is queued on the
 * connection the chunk goes to the socket at once (one writev), and only
 * what the socket did not take is queued for libevent to finish. A fan-out
 * to many connections then costs one system call per connection instead of
 * three (arming and disarming the write event around the send).
 */
int lr_httpd_req_send(struct lr_httpd_req *r)
{
	int rc = lr_httpd_req_send_begin(r);
	if (rc != 1)
		return rc;
	lr_httpd_req_send_write(r);
	return lr_httpd_req_send_end(r);
}

int lr_httpd_req_send_begin(struct lr_httpd_req *r)
{
	int rc = req_check_open(r);
	if (rc || !r->started || r->finished || r->no_body)
		return lr_httpd_req_write(r, NULL, 0);
	if (evbuffer_get_length(r->chunk) == 0)
		return 0;
	struct bufferevent *bev = r->conn->bev;
	if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
		return lr_httpd_req_write(r, NULL, 0);
	if (frame_chunk(r) != 0)
		return -ENOMEM;
	r->send_fd = bufferevent_getfd(bev);
	return 1;
}

void lr_httpd_req_send_write(struct lr_httpd_req *r)
{
	/* An error leaves the bytes queued: the bufferevent's own write meets it and closes. */
	evbuffer_write(r->chunk, r->send_fd);
}

int lr_httpd_req_send_end(struct lr_httpd_req *r)
{
	if (evbuffer_get_length(r->chunk) != 0 &&
	    bufferevent_write_buffer(r->conn->bev, r->chunk) != 0) {
		evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
		return -ENOMEM;
	}
	return 0;
}

int lr_httpd_req_finish(struct lr_httpd_req *r)
{
	int rc = req_check_open(r);
	if (rc)
		return rc;
	if (!r->started || r->finished)
		return -EINVAL;
	struct conn *c = r->conn;
	if (r->chunked && !r->no_body && evbuffer_add(conn_output(c), "0\r\n\r\n", 5) != 0)
		return -ENOMEM;
	r->finished = 1;
	c->state = C_FLUSH;
	/* nothing left to write: the write callback would not come by itself */
	if (evbuffer_get_length(conn_output(c)) == 0)
		bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
	return 0;
}

void lr_httpd_req_abort(struct lr_httpd_req *r)
{
	if (r->closed)
		return;
	if (!r->conn) {
		r->closed = 1;
		return;
	}
	r->aborting = 1;
	conn_free(r->conn);
	r->aborting = 0;
}

int lr_httpd_req_closed(const struct lr_httpd_req *r)
{
	return r->closed;
}

size_t lr_httpd_req_buffered(const struct lr_httpd_req *r)
{
	if (r->closed || !r->conn)
		return 0;
	return evbuffer_get_length(conn_output(r->conn));
}

void lr_httpd_req_set_callbacks(struct lr_httpd_req *r,
				void (*on_close)(struct lr_httpd_req *r, void *arg),
				void (*on_drain)(struct lr_httpd_req *r, void *arg), void *arg)
{
	r->on_close = on_close;
	r->on_drain = on_drain;
	r->arg = arg;
}

static void on_output_change(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)info;
	struct lr_httpd_req *r = arg;
	if (evbuffer_get_length(buf) > r->drain_low)
		return;
	/* Removing the running entry itself is safe inside evbuffer's callback loop. */
	evbuffer_remove_cb_entry(buf, r->drain);
	r->drain = NULL;
	if (r->on_drain)
		r->on_drain(r, r->arg);
}

int lr_httpd_req_notify_drain(struct lr_httpd_req *r, size_t low)
{
	if (r->closed || !r->conn)
		return LR_ECLOSED;
	lr_httpd_req_cancel_drain(r);
	if (evbuffer_get_length(conn_output(r->conn)) <= low)
		return 1;
	r->drain_low = low;
	r->drain = evbuffer_add_cb(conn_output(r->conn), on_output_change, r);
	return r->drain ? 0 : -ENOMEM;
}

void lr_httpd_req_free(struct lr_httpd_req *r)
{
	if (!r)
		return;
	r->on_close = NULL;
	r->on_drain = NULL;
	r->freed = 1;
	struct conn *c = r->conn;
	if (!c) {
		req_destroy(r);
		return;
	}
	if (!r->finished && !(r->started && r->no_body)) {
		/* Unanswered, or a stream not ended: the client must see it broken. */
		conn_free(c);
		req_destroy(r);
		return;
	}
	/* Finished (or a head that is all of it) and still sending: the connection goes on without it. */
	lr_httpd_req_cancel_drain(r);
	r->conn = NULL;
	c->req = NULL;
	req_destroy(r);
}
