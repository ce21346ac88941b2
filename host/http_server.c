/*
 * http_server.c — an HTTP/1.1 server over libevent's evhttp.
 *
 * evhttp parses requests, enforces the header and body caps and writes
 * responses; this file adds what it lacks for a server whose handlers
 * run for a long time: ownership of a request beyond the callback,
 * detection of a client that goes away while its handler is still
 * thinking, and a drain notification for streaming with backpressure.
 *
 * Lifetime of a request (struct lr_httpd_req). It lives while either side
 * needs it: evhttp's request (req != NULL) until the response is sent or
 * the connection dies, and the owner's handle until lr_httpd_req_free.
 * Whichever ends last frees the struct.
 *
 * How evhttp loses a request:
 *  - the response was written: the on_complete callback runs, then evhttp
 *    frees the request;
 *  - the connection failed (client gone, write error): evhttp detaches the
 *    request (its connection becomes NULL) and frees the connection, which
 *    runs the close callback; the detached request is ours to free;
 *  - we dropped the connection (abort, server close): the close callback
 *    runs and evhttp then frees the still-attached request itself.
 *
 * Between the request's arrival and the start of the response evhttp does
 * not read from the socket, so it would not notice a client that hung up.
 * A read watch of our own peeks at the socket meanwhile: end of file means
 * the client is gone. Once a response starts, evhttp reads again for close
 * detection and the watch is dropped.
 */
#include "internal.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <sys/queue.h> /* before keyvalq_struct.h: TAILQ_FIRST, TAILQ_NEXT */
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Seconds a connection may make no progress reading a request or writing a response. */
#define IO_TIMEOUT 60

struct lr_httpd {
	struct lr_loop *loop;
	struct evhttp *http;
	int port;
	void (*on_request)(struct lr_httpd_req *r, void *arg);
	void *arg;
	struct lr_httpd_req *reqs; /* requests evhttp still holds */
};

struct lr_httpd_req {
	struct lr_httpd *srv; /* NULL once evhttp let go of the request */
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	struct event *peek;
	struct evbuffer *chunk; /* reused for each streamed write */
	struct evbuffer_cb_entry *drain;
	size_t drain_low;
	void (*on_close)(struct lr_httpd_req *r, void *arg);
	void (*on_drain)(struct lr_httpd_req *r, void *arg);
	void *arg;
	const char *method;
	char remote[INET6_ADDRSTRLEN + 16];
	unsigned closed : 1, started : 1, finished : 1, freed : 1, aborting : 1, chunked : 1;
	struct lr_httpd_req *next, *prev;
};

static void req_unlink(struct lr_httpd_req *r)
{
	if (!r->srv)
		return;
	if (r->prev)
		r->prev->next = r->next;
	else
		r->srv->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->next = r->prev = NULL;
	r->srv = NULL;
}

static void peek_stop(struct lr_httpd_req *r)
{
	if (r->peek) {
		event_free(r->peek);
		r->peek = NULL;
	}
}

static struct evbuffer *req_output(const struct lr_httpd_req *r)
{
	return bufferevent_get_output(evhttp_connection_get_bufferevent(r->evcon));
}

void lr_httpd_req_cancel_drain(struct lr_httpd_req *r)
{
	if (r->drain) {
		if (r->req && r->evcon)
			evbuffer_remove_cb_entry(req_output(r), r->drain);
		r->drain = NULL;
	}
}

/* evhttp no longer needs r: drop everything tied to its connection. */
static void req_detach(struct lr_httpd_req *r)
{
	peek_stop(r);
	lr_httpd_req_cancel_drain(r);
	if (r->evcon)
		evhttp_connection_set_closecb(r->evcon, NULL, NULL);
	r->req = NULL;
	r->evcon = NULL;
	req_unlink(r);
}

static void req_destroy(struct lr_httpd_req *r)
{
	if (r->chunk)
		evbuffer_free(r->chunk);
	free(r);
}

/* The response went out whole; evhttp frees the request after this. */
static void on_complete(struct evhttp_request *req, void *arg)
{
	(void)req;
	struct lr_httpd_req *r = arg;
	req_detach(r);
	if (r->freed)
		req_destroy(r);
}

/* The connection is going down while r is in hand. */
static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	struct lr_httpd_req *r = arg;
	struct evhttp_request *req = r->req;
	/* A detached request (connection failure) is ours to free; an attached one evhttp frees next. */
	lr_httpd_req_cancel_drain(r);
	int detached = req && evhttp_request_get_connection(req) == NULL;
	req_detach(r);
	if (detached)
		evhttp_request_free(req);
	r->closed = 1;
	if (r->freed) {
		req_destroy(r);
		return;
	}
	if (!r->aborting && r->on_close)
		r->on_close(r, r->arg);
}

static void drop_connection(struct lr_httpd_req *r)
{
	/* Runs on_conn_close, which detaches r, before the connection is freed. */
	evhttp_connection_free(r->evcon);
}

/* Peeks at the idle socket: end of file or an error means the client left. */
static void on_peek(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct lr_httpd_req *r = arg;
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		/* A pipelined request: we cannot tell any more; evhttp will see the close later. */
		peek_stop(r);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	drop_connection(r);
}

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_CONNECT: return "CONNECT";
	case EVHTTP_REQ_PATCH: return "PATCH";
	}
	return NULL;
}

static void on_http_request(struct evhttp_request *req, void *arg)
{
	struct lr_httpd *h = arg;
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	const char *method = method_name(evhttp_request_get_command(req));
	struct lr_httpd_req *r = calloc(1, sizeof *r);
	if (!r || !method || !evcon || !(r->chunk = evbuffer_new())) {
		if (r)
			req_destroy(r);
		evhttp_send_error(req, method ? HTTP_SERVUNAVAIL : HTTP_NOTIMPLEMENTED, NULL);
		return;
	}
	r->req = req;
	r->evcon = evcon;
	r->method = method;

	char *addr = NULL;
	ev_uint16_t port = 0;
	evhttp_connection_get_peer(evcon, &addr, &port);
	if (addr && strchr(addr, ':'))
		snprintf(r->remote, sizeof r->remote, "[%s]:%u", addr, (unsigned)port);
	else
		snprintf(r->remote, sizeof r->remote, "%s:%u", addr ? addr : "", (unsigned)port);

	r->srv = h;
	r->next = h->reqs;
	if (h->reqs)
		h->reqs->prev = r;
	h->reqs = r;
	evhttp_request_set_on_complete_cb(req, on_complete, r);
	evhttp_connection_set_closecb(evcon, on_conn_close, r);

	evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(evcon));
	r->peek = event_new(lr_loop_base(h->loop), fd, EV_READ | EV_PERSIST, on_peek, r);
	if (r->peek && event_add(r->peek, NULL) != 0)
		peek_stop(r);
	h->on_request(r, h->arg);
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
	struct evhttp *http = evhttp_new(lr_loop_base(loop));
	/* Accepted sockets inherit close-on-exec from the listener's flags. */
	struct evconnlistener *lev = http ? evconnlistener_new(lr_loop_base(loop), NULL, NULL,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 0, fd) : NULL;
	if (!h || !lev || !evhttp_bind_listener(http, lev)) {
		if (lev)
			evconnlistener_free(lev);
		else
			close(fd);
		if (http)
			evhttp_free(http);
		free(h);
		return -ENOMEM;
	}
	evhttp_set_max_body_size(http, (ev_ssize_t)cfg->max_body);
	evhttp_set_max_headers_size(http, (ev_ssize_t)cfg->max_headers);
	evhttp_set_default_content_type(http, NULL);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
				   EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
				   EVHTTP_REQ_PATCH);
	/* Drain an oversized body before the 413, so the client reads it instead of a reset. */
	evhttp_set_flags(http, EVHTTP_SERVER_LINGERING_CLOSE);
	/* Without a timeout an idle or slow-loris connection would stay forever. */
	evhttp_set_timeout(http, IO_TIMEOUT);
	evhttp_set_gencb(http, on_http_request, h);

	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);

	h->loop = loop;
	h->http = http;
	h->port = port;
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
	/* Frees the listener and every connection; each request in hand gets on_close. */
	evhttp_free(h->http);
	while (h->reqs) /* NEVER: on_conn_close unlinked them all */
		req_unlink(h->reqs);
	free(h);
}

const char *lr_httpd_req_method(const struct lr_httpd_req *r)
{
	return r->method;
}

const char *lr_httpd_req_path(const struct lr_httpd_req *r)
{
	if (!r->req)
		return "/";
	const char *p = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(r->req));
	return p && *p ? p : "/";
}

const char *lr_httpd_req_query(const struct lr_httpd_req *r)
{
	if (!r->req)
		return NULL;
	return evhttp_uri_get_query(evhttp_request_get_evhttp_uri(r->req));
}

const char *lr_httpd_req_remote(const struct lr_httpd_req *r)
{
	return r->remote;
}

const char *lr_httpd_req_body(const struct lr_httpd_req *r, size_t *len)
{
	*len = 0;
	if (!r->req)
		return "";
	struct evbuffer *b = evhttp_request_get_input_buffer(r->req);
	*len = evbuffer_get_length(b);
	if (*len == 0)
		return "";
	return (const char *)evbuffer_pullup(b, -1);
}

const void *lr_httpd_req_header_next(const struct lr_httpd_req *r, const void *cursor,
				     const char **name, const char **value)
{
	const struct evkeyval *kv;
	if (!cursor) {
		if (!r->req)
			return NULL;
		kv = TAILQ_FIRST(evhttp_request_get_input_headers(r->req));
	} else {
		kv = TAILQ_NEXT((const struct evkeyval *)cursor, next);
	}
	if (!kv)
		return NULL;
	*name = kv->key;
	*value = kv->value;
	return kv;
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
	if (r->closed || !r->req)
		return LR_ECLOSED;
	if (r->started || r->finished)
		return -EINVAL;
	return evhttp_add_header(evhttp_request_get_output_headers(r->req), name, value) == 0
		       ? 0 : -ENOMEM;
}

static int req_check_open(const struct lr_httpd_req *r)
{
	if (r->closed || !r->req || !evhttp_request_get_connection(r->req))
		return LR_ECLOSED;
	return 0;
}

int lr_httpd_req_reply(struct lr_httpd_req *r, int status, const void *body, size_t len)
{
	int rc = req_check_open(r);
	if (rc)
		return rc;
	if (r->started || r->finished)
		return -EINVAL;
	if (evbuffer_add(r->chunk, body, len) != 0)
		return -ENOMEM;
	peek_stop(r);
	r->finished = 1;
	/* May complete synchronously: on_complete then detaches r. */
	evhttp_send_reply(r->req, status, NULL, r->chunk);
	evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
	return 0;
}

int lr_httpd_req_start(struct lr_httpd_req *r, int status)
{
	int rc = req_check_open(r);
	if (rc)
		return rc;
	if (r->started || r->finished)
		return -EINVAL;
	peek_stop(r);
	r->started = 1;
	evhttp_send_reply_start(r->req, status, NULL);
	/* evhttp chose chunked framing (HTTP/1.1, no Content-Length): lr_httpd_req_send frames itself */
	const char *te = evhttp_find_header(evhttp_request_get_output_headers(r->req),
					    "Transfer-Encoding");
	r->chunked = te && evutil_ascii_strcasecmp(te, "chunked") == 0;
	/*
	 * A stream may be quiet for long and its client sends nothing: keep
	 * only the write timeout (a reader that stops reading is dropped).
	 */
	const struct timeval wtv = { IO_TIMEOUT, 0 };
	bufferevent_set_timeouts(evhttp_connection_get_bufferevent(r->evcon), NULL, &wtv);
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

int lr_httpd_req_write(struct lr_httpd_req *r, const void *p, size_t n)
{
	int rc = req_check_open(r);
	if (rc) {
		evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
		return rc;
	}
	if (!r->started || r->finished) {
		evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
		return -EINVAL;
	}
	if (n && evbuffer_add(r->chunk, p, n) != 0)
		return -ENOMEM;
	if (evbuffer_get_length(r->chunk) == 0) /* an empty chunk would end the response */
		return 0;
	evhttp_send_reply_chunk(r->req, r->chunk); /* moves the bytes, no copy */
	evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
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
	int rc = req_check_open(r);
	if (rc || !r->started || r->finished || strcmp(r->method, "HEAD") == 0)
		return lr_httpd_req_write(r, NULL, 0);
	size_t n = evbuffer_get_length(r->chunk);
	if (n == 0)
		return 0;
	struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
	if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
		return lr_httpd_req_write(r, NULL, 0);
	if (r->chunked) {
		char head[24];
		int hl = snprintf(head, sizeof head, "%zx\r\n", n);
		if (evbuffer_prepend(r->chunk, head, (size_t)hl) != 0 ||
		    evbuffer_add(r->chunk, "\r\n", 2) != 0) {
			evbuffer_drain(r->chunk, evbuffer_get_length(r->chunk));
			return -ENOMEM;
		}
	}
	/* An error leaves the bytes queued: libevent's own write meets it and closes. */
	evbuffer_write(r->chunk, bufferevent_getfd(bev));
	if (evbuffer_get_length(r->chunk) != 0 && bufferevent_write_buffer(bev, r->chunk) != 0) {
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
	r->finished = 1;
	evhttp_send_reply_end(r->req); /* may complete synchronously */
	return 0;
}

void lr_httpd_req_abort(struct lr_httpd_req *r)
{
	if (r->closed)
		return;
	if (!r->req || !r->evcon) {
		r->closed = 1;
		return;
	}
	r->aborting = 1;
	drop_connection(r);
	r->aborting = 0;
}

int lr_httpd_req_closed(const struct lr_httpd_req *r)
{
	return r->closed;
}

size_t lr_httpd_req_buffered(const struct lr_httpd_req *r)
{
	if (r->closed || !r->req || !r->evcon)
		return 0;
	return evbuffer_get_length(req_output(r));
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
	if (r->closed || !r->req || !r->evcon)
		return LR_ECLOSED;
	lr_httpd_req_cancel_drain(r);
	if (evbuffer_get_length(req_output(r)) <= low)
		return 1;
	r->drain_low = low;
	r->drain = evbuffer_add_cb(req_output(r), on_output_change, r);
	return r->drain ? 0 : -ENOMEM;
}

void lr_httpd_req_free(struct lr_httpd_req *r)
{
	if (!r)
		return;
	r->on_close = NULL;
	r->on_drain = NULL;
	r->freed = 1;
	if (!r->req) {
		req_destroy(r);
		return;
	}
	if (!r->finished) {
		/* Unanswered: drop the connection; on_conn_close frees r. */
		if (r->evcon && evhttp_request_get_connection(r->req)) {
			drop_connection(r);
			return;
		}
		struct evhttp_request *req = r->req;
		req_detach(r);
		evhttp_request_free(req);
		req_destroy(r);
		return;
	}
	/* Finished and still sending: on_complete or on_conn_close frees r. */
	lr_httpd_req_cancel_drain(r);
}
