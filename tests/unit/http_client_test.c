/*
 * http_client_test.c — host/http_client.c without Lua: a scripted HTTP peer
 * on a loopback socket in a thread of its own, the loop driven by hand.
 *
 * The peer reads one request (head and Content-Length body) per script
 * entry and answers with that entry's parts; a part may first wait until
 * the test releases it (the `gate` pipe), so a test can hold the peer in
 * the middle of a response without any timed sleep.
 */
#include "../../host/host.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXPARTS 8
#define MAXREQS 4

struct part {
	const char *bytes;   /* sent as is; NULL ends the entry */
	size_t len;          /* 0: strlen(bytes) */
	int wait_gate;       /* read one byte from the gate pipe first */
};

struct exchange {
	struct part parts[MAXPARTS];
	int close_after;     /* close the connection after this answer */
	int hold;            /* after the parts, wait on the gate before closing */
};

struct peer {
	int lfd, port;
	int gate[2];
	pthread_t th;
	struct exchange ex[MAXREQS];
	int nex;
	char req[MAXREQS][4096]; /* what each request looked like */
	int accepted;            /* connections accepted */
};

static int read_request(int fd, char *out, size_t cap)
{
	size_t n = 0;
	char *end = NULL;
	while (!end) {
		if (n + 1 >= cap)
			return -1;
		ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
		if (k <= 0)
			return -1;
		n += (size_t)k;
		out[n] = '\0';
		end = strstr(out, "\r\n\r\n");
	}
	size_t head = (size_t)(end - out) + 4, want = 0;
	const char *cl = strcasestr(out, "\r\ncontent-length:");
	if (cl && cl < end)
		want = strtoul(cl + 17, NULL, 10);
	while (n < head + want && n + 1 < cap) {
		ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
		if (k <= 0)
			return -1;
		n += (size_t)k;
		out[n] = '\0';
	}
	return 0;
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	int cfd = -1;
	for (int i = 0; i < p->nex; i++) {
		if (cfd < 0) {
			cfd = accept(p->lfd, NULL, NULL);
			if (cfd < 0)
				return NULL;
			p->accepted++;
		}
		if (read_request(cfd, p->req[i], sizeof p->req[i]) != 0)
			break;
		struct exchange *e = &p->ex[i];
		for (int j = 0; j < MAXPARTS && e->parts[j].bytes; j++) {
			char c;
			if (e->parts[j].wait_gate && read(p->gate[0], &c, 1) != 1)
				break;
			send_all(cfd, e->parts[j].bytes,
				 e->parts[j].len ? e->parts[j].len : strlen(e->parts[j].bytes));
		}
		if (e->hold) {
			char c;
			(void)!read(p->gate[0], &c, 1);
		}
		if (e->close_after) {
			close(cfd);
			cfd = -1;
		}
	}
	if (cfd >= 0) {
		/* wait until the client is done with the connection */
		char buf[256];
		while (recv(cfd, buf, sizeof buf, 0) > 0)
			;
		close(cfd);
	}
	return NULL;
}

static int peer_start(struct peer *p)
{
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof sa;
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    listen(p->lfd, 8) != 0 || getsockname(p->lfd, (struct sockaddr *)&sa, &sl) != 0 ||
	    pipe(p->gate) != 0)
		return -1;
	p->port = ntohs(sa.sin_port);
	return pthread_create(&p->th, NULL, peer_main, p) == 0 ? 0 : -1;
}

static void peer_release(struct peer *p)
{
	(void)!write(p->gate[1], "x", 1);
}

static void peer_stop(struct peer *p)
{
	/* release anything still waiting, then unblock accept */
	for (int i = 0; i < 2 * MAXREQS * MAXPARTS; i++)
		peer_release(p);
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(p->th, NULL);
	close(p->lfd);
	close(p->gate[0]);
	close(p->gate[1]);
}

/* ---- the client side ---- */

struct call {
	struct lr_http_req *r;
	int notified;
};

static void notify(void *arg)
{
	((struct call *)arg)->notified++;
}

/* Runs the loop until the request ends (every wait has a timer behind it). */
static const struct lr_http_resp *run_to_end(struct lr_loop *loop, struct call *c)
{
	const struct lr_http_resp *rs = lr_http_resp(c->r);
	while (!rs->done)
		lr_loop_once(loop, 0);
	return rs;
}

static int start(struct lr_http *h, struct lr_http_opts *o, struct call *c)
{
	struct lr_err err = { "" };
	memset(c, 0, sizeof *c);
	int rc = lr_http_start(h, o, notify, c, &c->r, &err);
	if (rc)
		fprintf(stderr, "# start: %s\n", err.msg);
	return rc;
}

static const char *header(const struct lr_http_resp *rs, const char *name)
{
	const char *p = rs->headers.data, *end = p + rs->headers.len;
	while (p && p < end) {
		const char *v = p + strlen(p) + 1;
		if (strcmp(p, name) == 0)
			return v;
		p = v + strlen(v) + 1;
	}
	return NULL;
}

static char url[128];

static void set_url(const struct peer *p, const char *path)
{
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", p->port, path);
}

TEST(buffered_get_and_post)
{
	struct peer p = { .nex = 2 };
	p.ex[0].parts[0].bytes = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Thing: One\r\n\r\nhello";
	p.ex[1].parts[0].bytes = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);

	set_url(&p, "/a?b=1");
	struct lr_http_opts o = { .url = url, .timeout = 10, .max_body = 1024, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, 0);
	CHECK_EQ_INT(rs->status, 200);
	CHECK_EQ_INT(rs->body.len, 5);
	CHECK_EQ_STR(rs->body.data, "hello");
	CHECK_EQ_STR(header(rs, "x-thing"), "One"); /* names lower-case, values as sent */
	CHECK(c.notified > 0);
	CHECK(strncmp(p.req[0], "GET /a?b=1 HTTP/1.1\r\n", 21) == 0);
	lr_http_req_free(c.r);

	/* a POST on the same connection: the multi keeps it */
	const char *hdrs[] = { "Content-Type: application/json", "X-Ask: yes" };
	struct lr_http_opts po = { .url = url, .timeout = 10, .max_body = 1024, .max_headers = 8192,
				   .body = "{\"a\":1}", .body_len = 7, .has_body = 1,
				   .headers = hdrs, .nheaders = 2 };
	CHECK(start(h, &po, &c) == 0);
	rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, 0);
	CHECK_EQ_INT(rs->status, 201);
	CHECK_EQ_STR(rs->body.data, "ok");
	CHECK_EQ_INT(rs->connects, 0);
	CHECK(strncmp(p.req[1], "POST /a?b=1 HTTP/1.1\r\n", 22) == 0);
	CHECK(strstr(p.req[1], "\r\nX-Ask: yes\r\n") != NULL);
	CHECK(strstr(p.req[1], "\r\n\r\n{\"a\":1}") != NULL);
	lr_http_req_free(c.r);

	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
	CHECK_EQ_INT(p.accepted, 1);
}

TEST(bad_options_fail_at_start)
{
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	struct call c;
	struct lr_err err = { "" };
	const char *bad[] = { "ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://x/", "" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct lr_http_opts o = { .url = bad[i], .timeout = 5, .max_body = 16 };
		memset(&c, 0, sizeof c);
		lr_err_clear(&err);
		int rc = lr_http_start(h, &o, notify, &c, &c.r, &err);
		CHECK_EQ_INT(rc, -EINVAL);
		CHECK(err.msg[0] != '\0');
		CHECK_EQ_INT(c.notified, 0);
	}
	const char *inj[] = { "X-A: b\r\nX-Injected: 1" };
	struct lr_http_opts o = { .url = "http://127.0.0.1:1/", .timeout = 5, .max_body = 16,
				  .headers = inj, .nheaders = 1 };
	memset(&c, 0, sizeof c);
	CHECK_EQ_INT(lr_http_start(h, &o, notify, &c, &c.r, &err), -EINVAL);
	lr_http_free(h);
	lr_loop_free(loop);
}

TEST(refused_connection_is_a_network_error)
{
	/* a port nobody listens on: bind one, learn it, close it */
	struct peer p = { .nex = 0 };
	CHECK(peer_start(&p) == 0);
	int port = p.port;
	peer_stop(&p);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
	struct lr_http_opts o = { .url = url, .timeout = 10, .max_body = 16 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, LR_ENETWORK);
	CHECK(strstr(rs->err.msg, "127.0.0.1") != NULL); /* the message names the host */
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
}

TEST(a_body_over_the_cap_is_too_big)
{
	struct peer p = { .nex = 1 };
	p.ex[0].parts[0].bytes = "HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n"
				 "0123456789012345678901234567890123456789012345678901234567890123";
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/");
	struct lr_http_opts o = { .url = url, .timeout = 10, .max_body = 16, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, LR_ETOOBIG);
	CHECK(rs->body.len <= 16);
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(header_timeout_when_the_peer_never_answers)
{
	struct peer p = { .nex = 1 };
	p.ex[0].hold = 1; /* reads the request, sends nothing, waits */
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/");
	struct lr_http_opts o = { .url = url, .timeout = 30, .header_timeout = 0.3,
				  .max_body = 16, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, LR_ETIMEOUT);
	CHECK_EQ_INT(rs->headers_done, 0);
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

/* Takes every event that has come into out (type:data;...), returns how many. */
static int drain(struct call *c, char *out, size_t cap)
{
	struct lr_http_event ev;
	int n = 0;
	while (lr_http_next(c->r, &ev)) {
		size_t len = strlen(out);
		snprintf(out + len, cap - len, "%.*s:%.*s%s%.*s;", (int)ev.type_len, ev.type,
			 (int)ev.data_len, ev.data, ev.id ? "#" : "", ev.id ? (int)ev.id_len : 0,
			 ev.id ? ev.id : "");
		n++;
	}
	return n;
}

TEST(stream_mode_frames_events_split_anywhere)
{
	struct peer p = { .nex = 1 };
	struct part *pt = p.ex[0].parts;
	pt[0].bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		      "Transfer-Encoding: chunked\r\n\r\n";
	pt[1].bytes = "7\r\ndata: a\r\n";   /* "data: a" ends mid-event */
	pt[2].bytes = "14\r\n\n\nevent: x\nid: 7\ndat\r\n";
	pt[2].wait_gate = 1;
	pt[3].bytes = "6\r\na: b\n\n\r\n0\r\n\r\n";
	pt[3].wait_gate = 1;
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/s");
	struct lr_http_opts o = { .url = url, .timeout = 10, .idle_timeout = 10, .stream = 1,
				  .max_line = 1024, .max_event = 4096, .max_headers = 8192,
				  .max_error_body = 1024 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = lr_http_resp(c.r);
	while (!rs->headers_done && !rs->done)
		lr_loop_once(loop, 0);
	CHECK_EQ_INT(rs->status, 200);
	char got[256] = "";
	peer_release(&p);
	peer_release(&p);
	while (!rs->done)
		lr_loop_once(loop, 0);
	drain(&c, got, sizeof got);
	CHECK_EQ_INT(rs->rc, 0);
	CHECK_EQ_STR(got, "message:a;x:b#7;");
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(stream_mode_keeps_an_error_body)
{
	struct peer p = { .nex = 1 };
	p.ex[0].parts[0].bytes = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
				 "Retry-After: 3\r\nContent-Length: 25\r\n\r\n{\"error\":\"slow down!!!!\"}";
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/s");
	struct lr_http_opts o = { .url = url, .timeout = 10, .stream = 1, .max_line = 1024,
				  .max_event = 4096, .max_headers = 8192, .max_error_body = 1024 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->status, 429);
	CHECK_EQ_STR(rs->body.data, "{\"error\":\"slow down!!!!\"}");
	CHECK_EQ_STR(header(rs, "retry-after"), "3");
	struct lr_http_event ev;
	CHECK_EQ_INT(lr_http_next(c.r, &ev), 0); /* no events from a non-2xx body */
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(idle_timeout_between_bytes)
{
	struct peer p = { .nex = 1 };
	p.ex[0].parts[0].bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: one\n\n";
	p.ex[0].hold = 1; /* then silence */
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/s");
	struct lr_http_opts o = { .url = url, .timeout = 30, .idle_timeout = 0.3, .stream = 1,
				  .max_line = 1024, .max_event = 4096, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	char got[64] = "";
	drain(&c, got, sizeof got);
	CHECK_EQ_STR(got, "message:one;"); /* what came before the stall is kept */
	CHECK_EQ_INT(rs->rc, LR_ETIMEOUT);
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(redirects_only_when_asked)
{
	static char loc[192];
	struct peer p = { .nex = 3 };
	CHECK(peer_start(&p) == 0);
	snprintf(loc, sizeof loc,
		 "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/there\r\nContent-Length: 0\r\n\r\n",
		 p.port);
	/* the peer thread reads ex[] only after accepting: filling it now is safe */
	p.ex[0].parts[0].bytes = loc;
	p.ex[1].parts[0].bytes = loc;
	p.ex[2].parts[0].bytes = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nhere";
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/here");
	struct lr_http_opts o = { .url = url, .timeout = 10, .max_body = 64, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->status, 302); /* not followed */
	lr_http_req_free(c.r);
	o.follow_redirects = 1;
	CHECK(start(h, &o, &c) == 0);
	rs = run_to_end(loop, &c);
	CHECK_EQ_INT(rs->rc, 0);
	CHECK_EQ_INT(rs->status, 200);
	CHECK_EQ_STR(rs->body.data, "here");
	CHECK(strncmp(p.req[2], "GET /there ", 11) == 0);
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(backpressure_pauses_and_loses_nothing)
{
	/* 2000 events of 4000 bytes (8 MB, more than the socket buffers hold)
	 * against max_unread = 16 KiB: the transfer pauses once 16 KiB wait
	 * unframed and resumes as the owner reads, so the owner never finds
	 * more than that plus two reads' worth (the read that crossed the cap
	 * and the one curl held while paused, 256 KiB each) at once; every event
	 * arrives once, in order */
	enum { NEV = 2000, EVLEN = 4000 };
	static char body[NEV * (EVLEN + 16) + 256];
	size_t n = (size_t)snprintf(body, sizeof body, "HTTP/1.1 200 OK\r\nContent-Type: "
				    "text/event-stream\r\nConnection: close\r\n\r\n");
	for (int i = 0; i < NEV; i++) {
		n += (size_t)snprintf(body + n, sizeof body - n, "data: %04d", i);
		memset(body + n, 'z', EVLEN - 4);
		n += EVLEN - 4;
		memcpy(body + n, "\n\n", 2);
		n += 2;
	}
	struct peer p = { .nex = 1 };
	p.ex[0].parts[0].bytes = body;
	p.ex[0].parts[0].len = n;
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/s");
	struct lr_http_opts o = { .url = url, .timeout = 30, .idle_timeout = 10, .stream = 1,
				  .max_line = 8192, .max_event = 8192, .max_headers = 8192,
				  .max_unread = 16 << 10 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	const struct lr_http_resp *rs = lr_http_resp(c.r);
	int next = 0, max_queued = 0, ok = 1;
	for (;;) {
		int queued = 0;
		struct lr_http_event ev;
		while (lr_http_next(c.r, &ev)) {
			char want[16];
			snprintf(want, sizeof want, "%04d", next);
			ok &= ev.data_len == EVLEN && memcmp(ev.data, want, 4) == 0;
			next++;
			queued++;
		}
		if (queued > max_queued)
			max_queued = queued;
		if (rs->done && !lr_http_next(c.r, &ev))
			break;
		if (!rs->done)
			lr_loop_once(loop, 0);
	}
	CHECK_EQ_INT(rs->rc, 0);
	CHECK(ok);
	CHECK_EQ_INT(next, NEV);
	/* (16 KiB + 2 * 256 KiB) / 4 KB = 135; without the pause the owner
	 * finds most of the 2000 at once */
	if (max_queued > 140)
		fprintf(stderr, "# %d events were waiting at once\n", max_queued);
	CHECK(max_queued <= 140);
	lr_http_req_free(c.r);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

TEST(freeing_a_running_request_aborts_it)
{
	struct peer p = { .nex = 1 };
	p.ex[0].parts[0].bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n";
	p.ex[0].hold = 1;
	p.ex[0].close_after = 1;
	CHECK(peer_start(&p) == 0);
	struct lr_loop *loop;
	struct lr_http *h;
	CHECK(lr_loop_new(&loop) == 0);
	CHECK(lr_http_new(loop, &h) == 0);
	set_url(&p, "/s");
	struct lr_http_opts o = { .url = url, .timeout = 30, .stream = 1, .max_line = 1024,
				  .max_event = 4096, .max_headers = 8192 };
	struct call c;
	CHECK(start(h, &o, &c) == 0);
	struct lr_http_event ev;
	while (!lr_http_next(c.r, &ev))
		lr_loop_once(loop, 0);
	lr_http_req_free(c.r);
	int before = c.notified;
	/* the loop has nothing left of it: no callback into freed memory (ASan) */
	lr_loop_once(loop, 1);
	CHECK_EQ_INT(c.notified, before);
	lr_http_free(h);
	lr_loop_free(loop);
	peer_stop(&p);
}

int main(void)
{
	RUN(buffered_get_and_post);
	RUN(bad_options_fail_at_start);
	RUN(refused_connection_is_a_network_error);
	RUN(a_body_over_the_cap_is_too_big);
	RUN(header_timeout_when_the_peer_never_answers);
	RUN(stream_mode_frames_events_split_anywhere);
	RUN(stream_mode_keeps_an_error_body);
	RUN(idle_timeout_between_bytes);
	RUN(redirects_only_when_asked);
	RUN(backpressure_pauses_and_loses_nothing);
	RUN(freeing_a_running_request_aborts_it);
	return test_summary();
}
