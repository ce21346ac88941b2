/*
 * http_server_test.c — the host HTTP server without Lua: a raw socket
 * client on loopback, the loop driven by hand.
 */
#include "../../host/host.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static struct lr_httpd_req *got;
static int closes;

static void on_request(struct lr_httpd_req *r, void *arg)
{
	(void)arg;
	got = r;
}

static void on_close(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	(void)arg;
	closes++;
}

static int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Runs loop rounds until pred() or about 2 s pass. */
static int spin(struct lr_loop *loop, int (*pred)(void))
{
	for (int i = 0; i < 200 && !pred(); i++) {
		lr_loop_once(loop, 1);
		usleep(10000);
	}
	return pred();
}

static int have_request(void) { return got != NULL; }
static int have_close(void) { return closes > 0; }

static void read_all(struct lr_loop *loop, int fd, char *buf, size_t cap)
{
	size_t n = 0;
	for (int i = 0; i < 200 && n + 1 < cap; i++) {
		lr_loop_once(loop, 1);
		ssize_t k = recv(fd, buf + n, cap - 1 - n, MSG_DONTWAIT);
		if (k == 0)
			break;
		if (k > 0)
			n += (size_t)k;
		else
			usleep(10000);
	}
	buf[n] = 0;
}

TEST(serves_a_request)
{
	struct lr_loop *loop;
	CHECK(lr_loop_new(&loop) == 0);
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .port = 0, .max_body = 1024,
				       .max_headers = 8192, .on_request = on_request };
	struct lr_httpd *h;
	CHECK(lr_httpd_open(loop, &cfg, &h) == 0);
	int port = lr_httpd_port(h);
	CHECK(port > 0);

	/* The same port is taken now. */
	struct lr_httpd *h2;
	cfg.port = port;
	CHECK_EQ_INT(lr_httpd_open(loop, &cfg, &h2), -EADDRINUSE);
	cfg.host = "no.such.host.invalid";
	CHECK_EQ_INT(lr_httpd_open(loop, &cfg, &h2), LR_EPARSE);

	int fd = connect_to(port);
	CHECK(fd >= 0);
	const char *reqtext = "POST /a%20b?x=1 HTTP/1.1\r\nHost: t\r\nX-One: v\r\n"
			      "Content-Length: 5\r\nConnection: close\r\n\r\nhello";
	CHECK(send(fd, reqtext, strlen(reqtext), 0) == (ssize_t)strlen(reqtext));
	got = NULL;
	CHECK(spin(loop, have_request));
	if (got) {
		CHECK_EQ_STR(lr_httpd_req_method(got), "POST");
		CHECK_EQ_STR(lr_httpd_req_path(got), "/a%20b");
		CHECK_EQ_STR(lr_httpd_req_query(got), "x=1");
		CHECK(strncmp(lr_httpd_req_remote(got), "127.0.0.1:", 10) == 0);
		size_t len;
		const char *body = lr_httpd_req_body(got, &len);
		CHECK_EQ_INT(len, 5);
		CHECK(memcmp(body, "hello", 5) == 0);
		int found = 0;
		const char *name, *value;
		for (const void *c = lr_httpd_req_header_next(got, NULL, &name, &value); c;
		     c = lr_httpd_req_header_next(got, c, &name, &value))
			if (strcmp(name, "X-One") == 0 && strcmp(value, "v") == 0)
				found = 1;
		CHECK(found);
		CHECK_EQ_INT(lr_httpd_req_add_header(got, "X-Bad", "a\r\nInjected: 1"), -EINVAL);
		CHECK_EQ_INT(lr_httpd_req_add_header(got, "Bad Name", "a"), -EINVAL);
		CHECK_EQ_INT(lr_httpd_req_add_header(got, "X-Good", "yes"), 0);
		CHECK_EQ_INT(lr_httpd_req_write(got, "x", 1), -EINVAL); /* not started */
		CHECK_EQ_INT(lr_httpd_req_reply(got, 201, "made", 4), 0);
		CHECK_EQ_INT(lr_httpd_req_reply(got, 201, "made", 4), -EINVAL);
		char buf[2048];
		read_all(loop, fd, buf, sizeof buf);
		CHECK(strncmp(buf, "HTTP/1.1 201 Created\r\n", 22) == 0);
		CHECK(strstr(buf, "\r\nX-Good: yes\r\n") != NULL);
		CHECK(strstr(buf, "Injected") == NULL);
		CHECK(strstr(buf, "\r\n\r\nmade") != NULL);
		lr_httpd_req_free(got);
	}
	close(fd);
	lr_httpd_close(h);
	lr_loop_free(loop);
}

TEST(notices_a_client_that_hangs_up)
{
	struct lr_loop *loop;
	CHECK(lr_loop_new(&loop) == 0);
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .port = 0, .max_body = 1024,
				       .max_headers = 8192, .on_request = on_request };
	struct lr_httpd *h;
	CHECK(lr_httpd_open(loop, &cfg, &h) == 0);
	int fd = connect_to(lr_httpd_port(h));
	const char *reqtext = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
	CHECK(send(fd, reqtext, strlen(reqtext), 0) > 0);
	got = NULL;
	closes = 0;
	CHECK(spin(loop, have_request));
	if (got) {
		lr_httpd_req_set_callbacks(got, on_close, NULL, NULL);
		close(fd); /* while the "handler" has not answered */
		CHECK(spin(loop, have_close));
		CHECK(lr_httpd_req_closed(got));
		CHECK_EQ_INT(lr_httpd_req_reply(got, 200, "", 0), LR_ECLOSED);
		lr_httpd_req_free(got);
	}
	lr_httpd_close(h);
	lr_loop_free(loop);
}

TEST(close_drops_requests_in_hand)
{
	struct lr_loop *loop;
	CHECK(lr_loop_new(&loop) == 0);
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .port = 0, .max_body = 1024,
				       .max_headers = 8192, .on_request = on_request };
	struct lr_httpd *h;
	CHECK(lr_httpd_open(loop, &cfg, &h) == 0);
	int fd = connect_to(lr_httpd_port(h));
	const char *reqtext = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
	CHECK(send(fd, reqtext, strlen(reqtext), 0) > 0);
	got = NULL;
	closes = 0;
	CHECK(spin(loop, have_request));
	if (got) {
		lr_httpd_req_set_callbacks(got, on_close, NULL, NULL);
		CHECK_EQ_INT(lr_httpd_req_start(got, 200), 0);
		CHECK_EQ_INT(lr_httpd_req_write(got, "part", 4), 0);
		lr_httpd_close(h);
		CHECK_EQ_INT(closes, 1);
		CHECK_EQ_INT(lr_httpd_req_write(got, "more", 4), LR_ECLOSED);
		lr_httpd_req_free(got);
	} else {
		lr_httpd_close(h);
	}
	close(fd);
	lr_loop_free(loop);
}

static int head_rc(const char *text, struct lr_httpd_head *h)
{
	return lr_httpd_head_parse(text, strlen(text), 8192, h);
}

TEST(parses_request_heads)
{
	struct lr_httpd_head h;
	const char *t = "\r\nPOST /a?b HTTP/1.1\r\nHost: x:1\r\nContent-Length:  12 \r\n"
			"Connection: Keep-Alive, close\nExpect: 100-Continue\r\n\r\nbody";
	CHECK_EQ_INT(head_rc(t, &h), 0);
	CHECK_EQ_INT(h.len, strlen(t) - 4);
	CHECK(h.method_len == 4 && memcmp(t + h.method, "POST", 4) == 0);
	CHECK(h.target_len == 4 && memcmp(t + h.target, "/a?b", 4) == 0);
	CHECK_EQ_INT(h.minor, 1);
	CHECK_EQ_INT(h.nhdr, 4);
	CHECK(h.hdr[1].vlen == 2 && memcmp(t + h.hdr[1].value, "12", 2) == 0);
	CHECK_EQ_INT(h.content_length, 12);
	CHECK(h.close && h.keep_alive && h.expect_continue && !h.chunked);
	/* every prefix is incomplete */
	for (size_t n = 0; n < h.len; n++)
		CHECK_EQ_INT(lr_httpd_head_parse(t, n, 8192, &h), -EAGAIN);

	static const struct { const char *text; int status; } bad[] = {
		{ "GET / HTTP/2.0\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\n\r\n", 400 },                       /* no Host */
		{ "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", 400 },
		{ "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400 },
		{ "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nExpect: x\r\n\r\n", 417 },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = head_rc(bad[i].text, &h);
		CHECK_EQ_INT(rc, LR_EPARSE);
		CHECK_EQ_INT(h.status, bad[i].status);
		CHECK(h.why != NULL);
	}
	/* over the cap: refused once max bytes came without the end */
	char big[300];
	memset(big, 'a', sizeof big);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	CHECK_EQ_INT(lr_httpd_head_parse(big, sizeof big, 256, &h), LR_ETOOBIG);
	CHECK_EQ_INT(h.status, 431);
	CHECK_EQ_INT(lr_httpd_head_parse(big, 200, 256, &h), -EAGAIN);
	/* HTTP/1.0 needs no Host; 1.7 reads as 1.1 */
	CHECK_EQ_INT(head_rc("GET / HTTP/1.0\r\n\r\n", &h), 0);
	CHECK_EQ_INT(h.minor, 0);
	CHECK_EQ_INT(head_rc("GET / HTTP/1.7\r\nHost: a\r\n\r\n", &h), 0);
	CHECK_EQ_INT(h.minor, 1);
}

TEST(decodes_chunked_bodies)
{
	const char *t = "5;x=y\r\nhello\r\n1\nZ\n0\r\nT: v\r\n\r\nnext";
	struct lr_httpd_chunked c;
	lr_httpd_chunked_init(&c, 64);
	char body[16];
	size_t blen = 0, pos = 0, n = strlen(t), used;
	int rc;
	while ((rc = lr_httpd_chunked_step(&c, t + pos, n - pos, &used)) != LR_HTTPD_CHUNK_DONE) {
		CHECK(rc == LR_HTTPD_CHUNK_DATA || rc == LR_HTTPD_CHUNK_FRAMING);
		if (rc != LR_HTTPD_CHUNK_DATA && rc != LR_HTTPD_CHUNK_FRAMING)
			break;
		if (rc == LR_HTTPD_CHUNK_DATA) {
			memcpy(body + blen, t + pos, used);
			blen += used;
		}
		pos += used;
	}
	pos += used;
	CHECK(blen == 6 && memcmp(body, "helloZ", 6) == 0);
	CHECK_EQ_STR(t + pos, "next");

	static const char *const bad[] = { "x\r\n", "5\r\nhelloX", "5 z\r\n", "1234567890abcdef0\r\n" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lr_httpd_chunked_init(&c, 64);
		pos = 0;
		n = strlen(bad[i]);
		do {
			rc = lr_httpd_chunked_step(&c, bad[i] + pos, n - pos, &used);
			pos += used;
		} while (rc == LR_HTTPD_CHUNK_DATA || rc == LR_HTTPD_CHUNK_FRAMING);
		CHECK_EQ_INT(rc, LR_EPARSE);
	}
	/* trailer fields over their cap */
	lr_httpd_chunked_init(&c, 8);
	CHECK_EQ_INT(lr_httpd_chunked_step(&c, "0\r\n", 3, &used), LR_HTTPD_CHUNK_FRAMING);
	CHECK_EQ_INT(lr_httpd_chunked_step(&c, "Long-Trailer: v\r\n", 17, &used), LR_ETOOBIG);
}

int main(void)
{
	RUN(parses_request_heads);
	RUN(decodes_chunked_bodies);
	RUN(serves_a_request);
	RUN(notices_a_client_that_hangs_up);
	RUN(close_drops_requests_in_hand);
	return test_summary();
}
