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

int main(void)
{
	RUN(serves_a_request);
	RUN(notices_a_client_that_hangs_up);
	RUN(close_drops_requests_in_hand);
	return test_summary();
}
