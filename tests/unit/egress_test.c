/*
 * egress_test.c — the egress proxy against real sockets: listeners made
 * with lr_sbx_make_listeners (here in the host's namespace, on free ports)
 * and received over a socketpair, a real loop, an echo server and an HTTP
 * server on 127.0.0.1, blocking clients on threads, and curl.
 *
 * Every denial has its positive control: the same request through the same
 * proxy succeeds once the rule allows it.
 */
#include "../../host/host.h"
#include "../../sandbox/sandbox.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static struct lr_loop *loop;
static struct lr_egress *eg;
static int proxy_port, dns_port;

struct logent {
	char kind[16], target[300], reason[400];
	enum lr_egress_verdict verdict;
	uint64_t exec_id;
};
static struct logent logs[64];
static int nlogs;

static void on_log(void *arg, const struct lr_egress_event *ev)
{
	(void)arg;
	if (nlogs == 64)
		return;
	struct logent *l = &logs[nlogs++];
	snprintf(l->kind, sizeof l->kind, "%s", ev->kind);
	snprintf(l->target, sizeof l->target, "%s", ev->target);
	snprintf(l->reason, sizeof l->reason, "%s", ev->reason);
	l->verdict = ev->verdict;
	l->exec_id = ev->exec_id;
}

static int local_port(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	return ntohs(sa.sin_port);
}

/* A loop and an egress serving listeners made the way the helper makes them. */
static int setup(const struct lr_egress_rule *rules, size_t n)
{
	nlogs = 0;
	if (lr_loop_new(&loop) < 0)
		return -1;
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -1;
	int rc = lr_sbx_make_listeners(0, 0, sp[0]);
	int tcp = -1, udp = -1;
	if (rc == 0)
		rc = lr_sbx_recv_listeners(sp[1], &tcp, &udp);
	close(sp[0]);
	close(sp[1]);
	if (rc < 0)
		return rc;
	proxy_port = local_port(tcp);
	dns_port = local_port(udp);
	struct lr_egress_config cfg = { .exec_id = 42, .rules = rules, .nrules = n, .log = on_log,
					.connect_timeout = 5 };
	struct lr_err err;
	return lr_egress_open(loop, &cfg, tcp, udp, &eg, &err);
}

static void teardown(void)
{
	lr_egress_close(eg);
	eg = NULL;
	lr_loop_free(loop);
	loop = NULL;
}

/* ---- running blocking client code on a thread while the loop runs ---- */

struct bg {
	struct lr_work w;
	void (*fn)(void *);
	void *arg;
	int finished;
};
static void bg_done(struct lr_work *w)
{
	((struct bg *)w)->finished = 1;
}
static void *bg_main(void *p)
{
	struct bg *b = p;
	b->fn(b->arg);
	lr_loop_post(loop, &b->w);
	return NULL;
}
static void on_watchdog(struct lr_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	lr_loop_stop(loop);
}
/* Runs fn(arg) on a thread; the loop runs until it returns (at most 40 s). */
static void run_bg(void (*fn)(void *), void *arg)
{
	struct bg b = { .w.done = bg_done, .fn = fn, .arg = arg };
	pthread_t th;
	struct lr_timer wd;
	lr_timer_init(loop, &wd, on_watchdog, NULL);
	lr_timer_start(&wd, 40);
	lr_loop_ref(loop);
	pthread_create(&th, NULL, bg_main, &b);
	lr_loop_run(loop);
	lr_timer_release(&wd);
	pthread_join(th, NULL);
	if (!b.finished) { /* the watchdog ended it: let the post land */
		lr_loop_once(loop, 1);
		CHECK(b.finished);
	}
}

static int tcp_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { 15, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Reads up to the blank line, byte by byte, so nothing after it is taken. */
static size_t read_head(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		if (recv(fd, buf + n, 1, 0) != 1)
			break;
		n++;
		if (n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	buf[n] = '\0';
	return n;
}

static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t k;
	while (n + 1 < cap && (k = recv(fd, buf + n, cap - 1 - n, 0)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	return n;
}

/* ---- an echo server on 127.0.0.1: one connection, echoes until EOF ---- */

struct echo {
	int lfd, port;
	pthread_t th;
	size_t echoed;
};
static void *echo_main(void *p)
{
	struct echo *e = p;
	int fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		struct timeval tv = { 20, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		char buf[65536];
		ssize_t k;
		while ((k = recv(fd, buf, sizeof buf, 0)) > 0) {
			if (send_all(fd, buf, (size_t)k) < 0)
				break;
			e->echoed += (size_t)k;
		}
		close(fd);
	}
	return NULL;
}
static int listen_any(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0) {
		close(fd);
		return -1;
	}
	struct timeval tv = { 20, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	*port = local_port(fd);
	return fd;
}
static void echo_start(struct echo *e)
{
	memset(e, 0, sizeof *e);
	e->lfd = listen_any(&e->port);
	pthread_create(&e->th, NULL, echo_main, e);
}
static void echo_stop(struct echo *e)
{
	/* unblock an accept that never got a connection */
	int fd = tcp_connect(e->port);
	if (fd >= 0)
		close(fd);
	pthread_join(e->th, NULL);
	close(e->lfd);
}

/* ---- the parsers ---- */

TEST(classify_addresses)
{
	static const struct {
		const char *ip;
		const char *cls;
		int hard;
	} t[] = {
		{ "93.184.216.34", NULL, 0 }, { "8.8.8.8", NULL, 0 },
		{ "127.0.0.1", "loopback", 0 }, { "127.255.0.9", "loopback", 0 },
		{ "10.1.2.3", "private", 0 }, { "172.16.0.1", "private", 0 },
		{ "172.31.255.255", "private", 0 }, { "172.32.0.1", NULL, 0 },
		{ "192.168.1.1", "private", 0 }, { "100.64.0.1", "private", 0 },
		{ "100.127.255.255", "private", 0 }, { "100.128.0.1", NULL, 0 },
		{ "169.254.1.1", "link-local", 0 }, { "169.254.169.254", "metadata", 1 },
		{ "0.0.0.0", "unspecified", 1 }, { "224.0.0.1", "multicast", 1 },
		{ "255.255.255.255", "reserved", 1 }, { "::", "unspecified", 1 },
		{ "::1", "loopback", 0 }, { "::ffff:127.0.0.1", "loopback", 0 },
		{ "::ffff:169.254.169.254", "metadata", 1 }, { "::ffff:8.8.8.8", NULL, 0 },
		{ "64:ff9b::a00:1", "private", 0 }, { "2002:c0a8:0101::1", "private", 0 },
		{ "fc00::1", "private", 0 }, { "fd12:3456::1", "private", 0 },
		{ "fd00:ec2::254", "metadata", 1 }, { "fe80::1", "link-local", 0 },
		{ "ff02::1", "multicast", 1 }, { "2606:4700::1111", NULL, 0 },
		{ "::127.0.0.1", "reserved", 1 },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct sockaddr_storage ss;
		memset(&ss, 0, sizeof ss);
		if (strchr(t[i].ip, ':')) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
			s6->sin6_family = AF_INET6;
			CHECK(inet_pton(AF_INET6, t[i].ip, &s6->sin6_addr) == 1);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
			s4->sin_family = AF_INET;
			CHECK(inet_pton(AF_INET, t[i].ip, &s4->sin_addr) == 1);
		}
		int hard = -1;
		const char *cls = lr_egress_classify((struct sockaddr *)&ss, &hard);
		if (!t[i].cls) {
			if (cls)
				fprintf(stderr, "%s: %s\n", t[i].ip, cls);
			CHECK(cls == NULL);
		} else {
			CHECK_EQ_STR(cls, t[i].cls);
			if (cls && hard != t[i].hard)
				fprintf(stderr, "%s: hard %d\n", t[i].ip, hard);
			CHECK(!cls || hard == t[i].hard);
		}
	}
}

TEST(rules_checked)
{
	const char *good[] = { "example.com:443", "*.example.com:443", "EXAMPLE.com.:*",
			       "10.0.0.1:80", "[::1]:8080", "localhost:1", "a_b-c.d:65535" };
	const char *bad[] = { "example.com", "example.com:0", "example.com:65536", ":80",
			      "*.:80", "*.10.0.0.1:80", "ex ample.com:80", "::1:80",
			      "[::1:80", "2130706433:80", "0x7f.1:80", "a..b:80", "*:80",
			      "example.com:8a", "[fe80::1%eth0]:80", "" };
	struct lr_err err = { "" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		int rc = lr_egress_rule_check(good[i], &err);
		if (rc)
			fprintf(stderr, "%s: %s\n", good[i], err.msg);
		CHECK_EQ_INT(rc, 0);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lr_err_clear(&err);
		int rc = lr_egress_rule_check(bad[i], &err);
		if (rc == 0)
			fprintf(stderr, "accepted: '%s'\n", bad[i]);
		CHECK_EQ_INT(rc, -EINVAL);
		CHECK(strstr(err.msg, "egress: bad rule") != NULL);
	}
}

static int parse(const char *s, struct lr_egress_head *h)
{
	return lr_egress_head_parse(s, strlen(s), h);
}

TEST(head_parse)
{
	struct lr_egress_head h;
	CHECK_EQ_INT(parse("CONNECT Example.COM.:443 HTTP/1.1\r\nHost: x\r\n\r\nextra", &h), 0);
	CHECK(h.connect);
	CHECK_EQ_STR(h.host, "example.com");
	CHECK_EQ_INT(h.port, 443);
	CHECK_EQ_INT(h.nhdr, 1);
	CHECK_EQ_INT(h.len, strlen("CONNECT Example.COM.:443 HTTP/1.1\r\nHost: x\r\n\r\n"));
	CHECK_EQ_INT(parse("CONNECT [::1]:8080 HTTP/1.0\n\n", &h), 0);
	CHECK_EQ_STR(h.host, "::1");
	CHECK_EQ_INT(h.port, 8080);
	CHECK_EQ_INT(parse("GET http://a.b/x/y?q=1 HTTP/1.1\r\n\r\n", &h), 0);
	CHECK(!h.connect);
	CHECK_EQ_STR(h.host, "a.b");
	CHECK_EQ_INT(h.port, 80);
	CHECK_EQ_INT(parse("POST HTTP://[2001:db8::1]:81 HTTP/1.1\r\n\r\n", &h), 0);
	CHECK_EQ_STR(h.host, "2001:db8::1");
	CHECK_EQ_INT(h.port, 81);
	CHECK_EQ_INT(h.pathlen, 0);

	CHECK_EQ_INT(parse("CONNECT a.b:443 HTTP/1.1\r\nHost: x\r\n", &h), -EAGAIN);
	CHECK_EQ_INT(parse("CONNECT a.b:4", &h), -EAGAIN);
	const char *bad[] = {
		"CONNECT a.b HTTP/1.1\r\n\r\n",          /* no port */
		"CONNECT a.b:0 HTTP/1.1\r\n\r\n",        /* port 0 */
		"CONNECT a.b:443 HTTP/2.0\r\n\r\n",      /* version */
		"CONNECT a.b:443  HTTP/1.1\r\n\r\n",     /* two spaces */
		"GET / HTTP/1.1\r\n\r\n",                /* origin-form to a proxy */
		"GET https://a.b/ HTTP/1.1\r\n\r\n",     /* not http */
		"GET http://u@a.b/ HTTP/1.1\r\n\r\n",    /* userinfo */
		"GET http:///x HTTP/1.1\r\n\r\n",        /* no host */
		"GET http://a.b/#f HTTP/1.1\r\n\r\n",    /* fragment */
		"GET http://127.1/ HTTP/1.1\r\n\r\n",    /* a hidden IPv4 form */
		"CONNECT a.b:443 HTTP/1.1\r\n folded\r\n\r\n",
		"CONNECT a.b:443 HTTP/1.1\r\nBad Name: x\r\n\r\n",
		"CONNECT a.b:443 HTTP/1.1\r\nName : x\r\n\r\n",
		"CONNECT a.b:443 HTTP/1.1\r\nName: a\rb\r\n\r\n",
		"CONNECT a.b:443 HTTP/1.1\r\nName: a\001b\r\n\r\n",
		"C@NNECT a.b:443 HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = parse(bad[i], &h);
		if (rc != LR_EPARSE)
			fprintf(stderr, "%zu: %d\n", i, rc);
		CHECK_EQ_INT(rc, LR_EPARSE);
	}
	/* a NUL inside */
	CHECK_EQ_INT(lr_egress_head_parse("CONNECT a.b:443 HTTP/1.1\r\nA: \0\r\n\r\n", 33, &h),
		     LR_EPARSE);

	/* the caps: 8 KiB of head, 100 headers */
	static char big[LR_EGRESS_HEAD_MAX + 100];
	strcpy(big, "CONNECT a.b:443 HTTP/1.1\r\nX: ");
	size_t n = strlen(big);
	memset(big + n, 'a', sizeof big - n - 1);
	CHECK_EQ_INT(lr_egress_head_parse(big, sizeof big - 1, &h), LR_ETOOBIG);
	CHECK_EQ_INT(lr_egress_head_parse(big, LR_EGRESS_HEAD_MAX - 1, &h), -EAGAIN);
	struct lr_buf b;
	lr_buf_init(&b, 1 << 20);
	lr_buf_addstr(&b, "CONNECT a.b:443 HTTP/1.1\r\n");
	for (int i = 0; i < 100; i++)
		lr_buf_printf(&b, "H%d: v\r\n", i);
	lr_buf_addstr(&b, "\r\n");
	CHECK_EQ_INT(lr_egress_head_parse(b.data, b.len, &h), 0);
	CHECK_EQ_INT(h.nhdr, 100);
	b.len -= 2;
	lr_buf_addstr(&b, "H100: v\r\n\r\n");
	CHECK_EQ_INT(lr_egress_head_parse(b.data, b.len, &h), LR_ETOOBIG);
	lr_buf_release(&b);
}

TEST(head_forward)
{
	const char *req = "GET http://Example.com:8080/p?q=1 HTTP/1.1\r\n"
			  "Host: evil.example\r\nProxy-Connection: keep-alive\r\n"
			  "Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Hop\r\n"
			  "X-Hop: 1\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n";
	struct lr_egress_head h;
	CHECK_EQ_INT(parse(req, &h), 0);
	struct lr_buf b;
	lr_buf_init(&b, 1 << 16);
	CHECK_EQ_INT(lr_egress_head_forward(req, &h, &b), 0);
	CHECK_EQ_STR(b.data, "GET /p?q=1 HTTP/1.1\r\nAccept: */*\r\nContent-Length: 3\r\n"
			     "Host: example.com:8080\r\nConnection: close\r\n\r\n");
	lr_buf_reset(&b);
	const char *req2 = "HEAD http://[::1] HTTP/1.0\r\n\r\n";
	CHECK_EQ_INT(parse(req2, &h), 0);
	CHECK_EQ_INT(lr_egress_head_forward(req2, &h, &b), 0);
	CHECK_EQ_STR(b.data, "HEAD / HTTP/1.0\r\nHost: [::1]\r\nConnection: close\r\n\r\n");
	lr_buf_release(&b);
}

/* A DNS query for name and qtype, id 0x1234, RD set. */
static size_t dns_query(uint8_t *out, const char *name, uint16_t qtype)
{
	uint8_t hdr[12] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0 };
	memcpy(out, hdr, 12);
	size_t n = 12;
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t l = dot ? (size_t)(dot - name) : strlen(name);
		out[n++] = (uint8_t)l;
		memcpy(out + n, name, l);
		n += l;
		name += l + (dot ? 1 : 0);
	}
	out[n++] = 0;
	out[n++] = (uint8_t)(qtype >> 8);
	out[n++] = (uint8_t)qtype;
	out[n++] = 0;
	out[n++] = 1;
	return n;
}

TEST(dns_parse_and_reply)
{
	uint8_t q[600], r[600];
	struct lr_egress_dns_query dq;
	size_t n = dns_query(q, "Api.Example.COM", 1);
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), 0);
	CHECK_EQ_STR(dq.name, "api.example.com");
	CHECK_EQ_INT(dq.qtype, 1);
	CHECK_EQ_INT(dq.qclass, 1);
	CHECK_EQ_INT(dq.id, 0x1234);
	CHECK_EQ_INT(dq.qend, n);
	int len = lr_egress_dns_reply(q, &dq, 0, 1, r, sizeof r);
	CHECK_EQ_INT(len, (int)n + 16);
	CHECK(r[2] & 0x80);              /* QR */
	CHECK_EQ_INT(r[3] & 0xf, 0);     /* NOERROR */
	CHECK_EQ_INT(r[7], 1);           /* one answer */
	CHECK(memcmp(r + len - 4, "\x7f\0\0\1", 4) == 0);

	/* with an EDNS OPT record */
	uint8_t opt[11] = { 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0 };
	memcpy(q + n, opt, sizeof opt);
	q[11] = 1;
	CHECK_EQ_INT(lr_egress_dns_parse(q, n + sizeof opt, &dq), 0);
	CHECK_EQ_INT(dq.qend, n);
	CHECK_EQ_INT(lr_egress_dns_parse(q, n + sizeof opt - 1, &dq), LR_EPARSE);
	CHECK_EQ_INT(lr_egress_dns_parse(q, n + sizeof opt + 1, &dq), LR_EPARSE);
	q[11] = 0;
	CHECK_EQ_INT(lr_egress_dns_parse(q, n + 1, &dq), LR_EPARSE); /* trailing byte */

	/* strictness */
	n = dns_query(q, "a.b", 1);
	q[5] = 2; /* two questions */
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), LR_EPARSE);
	q[5] = 1;
	q[2] |= 0x80; /* a response */
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), LR_EPARSE);
	q[2] = 0x01;
	q[12] = 0xc0; /* a compression pointer */
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), LR_EPARSE);
	n = dns_query(q, "a b.c", 1);
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), LR_EPARSE);
	CHECK_EQ_INT(lr_egress_dns_parse(q, 11, &dq), LR_EPARSE);
	/* a name longer than 255 bytes on the wire */
	char longname[300];
	memset(longname, 'a', sizeof longname);
	for (int i = 63; i < 299; i += 64)
		longname[i] = '.';
	longname[299] = '\0';
	n = dns_query(q, longname, 1);
	CHECK_EQ_INT(lr_egress_dns_parse(q, n, &dq), LR_EPARSE);
	/* FORMERR for a malformed query carries the id and no question */
	CHECK_EQ_INT(lr_egress_dns_parse(q, 13, &dq), LR_EPARSE);
	dq.qend = 0;
	len = lr_egress_dns_reply(q, &dq, 1, 0, r, sizeof r);
	CHECK_EQ_INT(len, 12);
	CHECK_EQ_INT(r[0], 0x12);
	CHECK_EQ_INT(r[3] & 0xf, 1);
	CHECK_EQ_INT(r[5], 0);
}

/* ---- netfds ---- */

static int send_fds(int sock, const int *fds, int n)
{
	char byte = 'L';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	}
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

TEST(netfds_pass_and_check)
{
	int sp[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	CHECK_EQ_INT(lr_sbx_make_listeners(0, 0, sp[0]), 0);
	int tcp = -1, udp = -1;
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &tcp, &udp), 0);
	CHECK(tcp >= 0 && udp >= 0);
	CHECK(local_port(tcp) > 0 && local_port(udp) > 0);
	CHECK(fcntl(tcp, F_GETFD) & FD_CLOEXEC);
	CHECK(fcntl(udp, F_GETFL) & O_NONBLOCK);
	/* the listener really listens */
	int c = tcp_connect(local_port(tcp));
	CHECK(c >= 0);
	close(c);

	/* refused: swapped order, one fd, a connected socket for the listener */
	int fds[2] = { udp, tcp };
	CHECK(send_fds(sp[0], fds, 2) == 0);
	int t2, u2;
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &t2, &u2), -EPROTO);
	CHECK_EQ_INT(t2, -1);
	CHECK(send_fds(sp[0], fds, 1) == 0);
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &t2, &u2), -EPROTO);
	int s2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	fds[0] = s2;
	fds[1] = udp;
	CHECK(send_fds(sp[0], fds, 2) == 0);
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &t2, &u2), -EPROTO);
	close(s2);
	/* positive control on the same channel: the right pair passes */
	fds[0] = tcp;
	fds[1] = udp;
	CHECK(send_fds(sp[0], fds, 2) == 0);
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &t2, &u2), 0);
	close(t2);
	close(u2);
	/* the helper died before sending */
	close(sp[0]);
	CHECK_EQ_INT(lr_sbx_recv_listeners(sp[1], &t2, &u2), LR_ECLOSED);
	close(sp[1]);
	close(tcp);
	close(udp);
}

/* ---- the proxy ---- */

struct exchange {
	char req[512];
	char head[1024];
	char body[1024];
	int after_connect;  /* 1: send "ping" through the tunnel and read it back */
	char echoed[16];
};

static void do_exchange(void *arg)
{
	struct exchange *x = arg;
	int fd = tcp_connect(proxy_port);
	if (fd < 0)
		return;
	send_all(fd, x->req, strlen(x->req));
	read_head(fd, x->head, sizeof x->head);
	if (x->after_connect && strstr(x->head, " 200 ")) {
		send_all(fd, "ping\n", 5);
		size_t n = 0;
		while (n < 5) {
			ssize_t k = recv(fd, x->echoed + n, 5 - n, 0);
			if (k <= 0)
				break;
			n += (size_t)k;
		}
	} else {
		read_all(fd, x->body, sizeof x->body);
	}
	close(fd);
}

static void connect_through(const char *target, struct exchange *x)
{
	memset(x, 0, sizeof *x);
	snprintf(x->req, sizeof x->req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
	x->after_connect = 1;
	run_bg(do_exchange, x);
}

TEST(connect_allowed_and_denied)
{
	struct echo e;
	echo_start(&e);
	char allow[64], target[64];
	snprintf(allow, sizeof allow, "127.0.0.1:%d", e.port);
	struct lr_egress_rule rules[] = { { allow, 1 } };
	CHECK_EQ_INT(setup(rules, 1), 0);
	struct exchange x;

	connect_through(allow, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 200 Connection established\r\n\r\n", 40) == 0);
	CHECK_EQ_STR(x.echoed, "ping\n");
	CHECK_EQ_INT(nlogs, 1);
	CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_ALLOW);
	CHECK_EQ_STR(logs[0].kind, "connect");
	CHECK_EQ_STR(logs[0].target, allow);
	CHECK_EQ_INT(logs[0].exec_id, 42);
	CHECK(strstr(logs[0].reason, "connected to 127.0.0.1:") != NULL);

	/* not on the list: 403 naming the reason, logged; the echo server never hears of it */
	snprintf(target, sizeof target, "example.com:443");
	connect_through(target, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 Forbidden\r\n", 24) == 0);
	CHECK(strstr(x.body, "not on the allow-list") != NULL);
	CHECK(strstr(x.body, "example.com:443") != NULL);
	CHECK_EQ_INT(nlogs, 2);
	CHECK_EQ_INT(logs[1].verdict, LR_EGRESS_DENY);
	CHECK_EQ_STR(logs[1].target, "example.com:443");
	CHECK_EQ_STR(logs[1].reason, "not on the allow-list");
	/* the same address on another port is another target */
	snprintf(target, sizeof target, "127.0.0.1:%d", e.port == 65535 ? 1 : e.port + 1);
	connect_through(target, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK_EQ_INT(lr_egress_conns(eg), 0);
	teardown();
	echo_stop(&e);
}

/* A name that resolves to loopback is refused, unless the rule allows private targets. */
TEST(loopback_name_needs_allow_private)
{
	for (int ap = 0; ap <= 1; ap++) {
		struct echo e;
		echo_start(&e);
		char allow[64];
		snprintf(allow, sizeof allow, "localhost:%d", e.port);
		struct lr_egress_rule rules[] = { { allow, ap } };
		CHECK_EQ_INT(setup(rules, 1), 0);
		struct exchange x;
		connect_through(allow, &x);
		if (ap) {
			CHECK(strncmp(x.head, "HTTP/1.1 200 ", 13) == 0);
			CHECK_EQ_STR(x.echoed, "ping\n");
			CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_ALLOW);
		} else {
			CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
			CHECK(strstr(x.body, "resolves to loopback address") != NULL);
			CHECK_EQ_INT(nlogs, 1);
			CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_DENY);
			CHECK(strstr(logs[0].reason, "'localhost' resolves to loopback") != NULL);
			CHECK_EQ_INT(e.echoed, 0);
		}
		teardown();
		echo_stop(&e);
	}
}

/* Literal private, loopback and metadata addresses; allow_private never lifts metadata. */
TEST(literal_addresses)
{
	struct echo e;
	echo_start(&e);
	char lo_strict[64], lo_open[64];
	snprintf(lo_strict, sizeof lo_strict, "127.0.0.2:%d", e.port);
	snprintf(lo_open, sizeof lo_open, "127.0.0.1:%d", e.port);
	struct lr_egress_rule rules[] = { { "10.1.2.3:80", 0 },
					  { "169.254.169.254:80", 1 },
					  { "[fd00:ec2::254]:80", 1 },
					  { lo_strict, 0 },
					  { lo_open, 1 } };
	CHECK_EQ_INT(setup(rules, 5), 0);
	struct exchange x;
	connect_through("10.1.2.3:80", &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK(strstr(x.body, "10.1.2.3 is a private address") != NULL);
	connect_through("169.254.169.254:80", &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK(strstr(x.body, "metadata") != NULL);
	connect_through("[fd00:ec2::254]:80", &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK(strstr(x.body, "metadata") != NULL);
	connect_through(lo_strict, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK(strstr(x.body, "loopback") != NULL);
	CHECK_EQ_INT(nlogs, 4);
	for (int i = 0; i < nlogs; i++)
		CHECK_EQ_INT(logs[i].verdict, LR_EGRESS_DENY);
	/* positive control: loopback with allow_private reaches the echo server */
	connect_through(lo_open, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 200 ", 13) == 0);
	CHECK_EQ_STR(x.echoed, "ping\n");
	teardown();
	echo_stop(&e);
}

TEST(upstream_failure_is_502)
{
	int port;
	int fd = listen_any(&port);
	close(fd); /* nothing listens there now */
	char allow[64];
	snprintf(allow, sizeof allow, "127.0.0.1:%d", port);
	struct lr_egress_rule rules[] = { { allow, 1 }, { "nosuch.invalid:80", 1 } };
	CHECK_EQ_INT(setup(rules, 2), 0);
	struct exchange x;
	connect_through(allow, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0);
	CHECK(strstr(x.body, "cannot connect to 127.0.0.1:") != NULL);
	CHECK_EQ_INT(nlogs, 1);
	CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_FAIL);
	connect_through("nosuch.invalid:80", &x);
	CHECK(strncmp(x.head, "HTTP/1.1 502 ", 13) == 0);
	CHECK(strstr(x.body, "cannot resolve 'nosuch.invalid'") != NULL);
	teardown();
}

/* Megabytes both ways through a tunnel with a half-close at the end. */
struct bulk {
	int fd;
	size_t sent, got;
	int match;
};
static void *bulk_writer(void *p)
{
	struct bulk *b = p;
	char buf[65536];
	for (int i = 0; i < 48; i++) {
		for (size_t k = 0; k < sizeof buf; k++)
			buf[k] = (char)((b->sent + k) * 7);
		if (send_all(b->fd, buf, sizeof buf) < 0)
			break;
		b->sent += sizeof buf;
	}
	shutdown(b->fd, SHUT_WR);
	return NULL;
}
static void do_bulk(void *arg)
{
	struct bulk *b = arg;
	b->fd = tcp_connect(proxy_port);
	char req[128], head[256];
	snprintf(req, sizeof req, "CONNECT localhost:%d HTTP/1.1\r\n\r\n", (int)(intptr_t)b->match);
	b->match = 1;
	send_all(b->fd, req, strlen(req));
	read_head(b->fd, head, sizeof head);
	if (!strstr(head, " 200 ")) {
		b->match = 0;
		close(b->fd);
		return;
	}
	pthread_t th;
	pthread_create(&th, NULL, bulk_writer, b);
	char buf[65536];
	ssize_t k;
	/* read slowly at first so the proxy's queue fills and it must pause */
	usleep(200000);
	while ((k = recv(b->fd, buf, sizeof buf, 0)) > 0) {
		for (ssize_t i = 0; i < k; i++)
			if (buf[i] != (char)((b->got + (size_t)i) * 7))
				b->match = 0;
		b->got += (size_t)k;
	}
	pthread_join(th, NULL);
	close(b->fd);
}

TEST(tunnel_bulk_with_backpressure)
{
	struct echo e;
	echo_start(&e);
	char allow[64];
	snprintf(allow, sizeof allow, "localhost:%d", e.port);
	struct lr_egress_rule rules[] = { { allow, 1 } };
	CHECK_EQ_INT(setup(rules, 1), 0);
	struct bulk b = { .match = e.port };
	run_bg(do_bulk, &b);
	CHECK_EQ_INT(b.sent, 48 * 65536);
	CHECK_EQ_INT(b.got, b.sent);
	CHECK(b.match);
	/* both sides closed: the connection is gone */
	for (int i = 0; i < 50 && lr_egress_conns(eg); i++)
		lr_loop_once(loop, 1);
	CHECK_EQ_INT(lr_egress_conns(eg), 0);
	teardown();
	echo_stop(&e);
	CHECK_EQ_INT(e.echoed, b.sent);
}

/* ---- HTTP forwarding, with an lr_httpd upstream on the same loop ---- */

static void on_upstream(struct lr_httpd_req *r, void *arg)
{
	(void)arg;
	char body[512];
	const char *host = "-", *pc = "none", *conn = "-", *name, *value;
	for (const void *cur = lr_httpd_req_header_next(r, NULL, &name, &value); cur;
	     cur = lr_httpd_req_header_next(r, cur, &name, &value)) {
		if (strcasecmp(name, "host") == 0)
			host = value;
		else if (strcasecmp(name, "proxy-connection") == 0)
			pc = value;
		else if (strcasecmp(name, "connection") == 0)
			conn = value;
	}
	const char *q = lr_httpd_req_query(r);
	snprintf(body, sizeof body, "%s %s%s%s host=%s conn=%s proxy-connection=%s",
		 lr_httpd_req_method(r), lr_httpd_req_path(r), q ? "?" : "", q ? q : "", host,
		 conn, pc);
	lr_httpd_req_reply(r, 200, body, strlen(body));
	lr_httpd_req_free(r);
}

static struct lr_httpd *upstream(int *port)
{
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .port = 0, .max_body = 1 << 16,
				       .max_headers = 8192, .on_request = on_upstream };
	struct lr_httpd *h = NULL;
	if (lr_httpd_open(loop, &cfg, &h) < 0)
		return NULL;
	*port = lr_httpd_port(h);
	return h;
}

TEST(http_forwarding)
{
	struct lr_egress_rule rules[] = { { "localhost:*", 1 } };
	CHECK_EQ_INT(setup(rules, 1), 0);
	int port;
	struct lr_httpd *h = upstream(&port);
	CHECK(h != NULL);
	struct exchange x;
	memset(&x, 0, sizeof x);
	snprintf(x.req, sizeof x.req,
		 "GET http://localhost:%d/hello?x=1 HTTP/1.1\r\nHost: localhost:%d\r\n"
		 "Proxy-Connection: keep-alive\r\n\r\n",
		 port, port);
	run_bg(do_exchange, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 200 ", 13) == 0);
	char want[256];
	snprintf(want, sizeof want,
		 "GET /hello?x=1 host=localhost:%d conn=close proxy-connection=none", port);
	CHECK_EQ_STR(x.body, want);
	CHECK_EQ_INT(nlogs, 1);
	CHECK_EQ_STR(logs[0].kind, "http");
	CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_ALLOW);

	/* denied forwarding: 403 */
	memset(&x, 0, sizeof x);
	snprintf(x.req, sizeof x.req, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
	run_bg(do_exchange, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 403 ", 13) == 0);
	CHECK(strstr(x.body, "egress: request to 'example.com:80' denied: not on the allow-list"));
	/* malformed and oversized heads */
	memset(&x, 0, sizeof x);
	snprintf(x.req, sizeof x.req, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
	run_bg(do_exchange, &x);
	CHECK(strncmp(x.head, "HTTP/1.1 400 ", 13) == 0);
	CHECK_EQ_INT(nlogs, 3);
	CHECK_EQ_INT(logs[2].verdict, LR_EGRESS_DENY);
	lr_httpd_close(h);
	teardown();
}

struct big_head {
	char head[256];
};
static void do_big_head(void *arg)
{
	struct big_head *b = arg;
	int fd = tcp_connect(proxy_port);
	char buf[LR_EGRESS_HEAD_MAX + 64];
	memset(buf, 'a', sizeof buf);
	memcpy(buf, "CONNECT a.b:443 HTTP/1.1\r\nX: ", 29);
	send_all(fd, buf, sizeof buf);
	read_head(fd, b->head, sizeof b->head);
	close(fd);
}

TEST(oversized_head_is_431)
{
	struct lr_egress_rule rules[] = { { "a.b:443", 0 } };
	CHECK_EQ_INT(setup(rules, 1), 0);
	struct big_head b = { { 0 } };
	run_bg(do_big_head, &b);
	CHECK(strncmp(b.head, "HTTP/1.1 431 ", 13) == 0);
	teardown();
}

/* ---- the DNS stub ---- */

struct dnsx {
	uint8_t q[600];
	size_t qn;
	uint8_t r[600];
	ssize_t rn;
};
static void do_dns(void *arg)
{
	struct dnsx *d = arg;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { 10, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)dns_port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sendto(fd, d->q, d->qn, 0, (struct sockaddr *)&sa, sizeof sa);
	d->rn = recv(fd, d->r, sizeof d->r, 0);
	close(fd);
}

TEST(dns_stub)
{
	struct lr_egress_rule rules[] = { { "registry.npmjs.org:443", 0 }, { "*.pypi.org:443", 0 } };
	CHECK_EQ_INT(setup(rules, 2), 0);
	struct dnsx d;
	/* allowed A: 127.0.0.1 */
	d.qn = dns_query(d.q, "registry.npmjs.org", 1);
	run_bg(do_dns, &d);
	CHECK_EQ_INT(d.rn, (ssize_t)d.qn + 16);
	CHECK(d.rn > 12 && (d.r[3] & 0xf) == 0 && d.r[7] == 1);
	CHECK(d.rn > 12 && memcmp(d.r + d.rn - 4, "\x7f\0\0\1", 4) == 0);
	CHECK_EQ_INT(logs[0].verdict, LR_EGRESS_ALLOW);
	CHECK_EQ_STR(logs[0].kind, "dns");
	CHECK_EQ_STR(logs[0].target, "registry.npmjs.org");
	/* a wildcard match */
	d.qn = dns_query(d.q, "files.pypi.org", 1);
	run_bg(do_dns, &d);
	CHECK(d.rn > 12 && (d.r[3] & 0xf) == 0 && d.r[7] == 1);
	/* allowed AAAA: NODATA */
	d.qn = dns_query(d.q, "registry.npmjs.org", 28);
	run_bg(do_dns, &d);
	CHECK_EQ_INT(d.rn, (ssize_t)d.qn);
	CHECK(d.rn > 12 && (d.r[3] & 0xf) == 0 && d.r[7] == 0);
	/* not allowed: NXDOMAIN, logged */
	d.qn = dns_query(d.q, "pypi.org", 1);
	run_bg(do_dns, &d);
	CHECK(d.rn > 12 && (d.r[3] & 0xf) == 3 && d.r[7] == 0);
	CHECK_EQ_INT(logs[nlogs - 1].verdict, LR_EGRESS_DENY);
	CHECK_EQ_STR(logs[nlogs - 1].target, "pypi.org");
	/* class CH: REFUSED */
	d.qn = dns_query(d.q, "registry.npmjs.org", 1);
	d.q[d.qn - 1] = 3;
	run_bg(do_dns, &d);
	CHECK(d.rn > 12 && (d.r[3] & 0xf) == 5);
	/* malformed: FORMERR with the id */
	d.qn = dns_query(d.q, "registry.npmjs.org", 1);
	d.q[5] = 2;
	run_bg(do_dns, &d);
	CHECK_EQ_INT(d.rn, 12);
	CHECK(d.rn == 12 && d.r[0] == 0x12 && (d.r[3] & 0xf) == 1);
	teardown();
}

/* ---- closing ---- */

struct held {
	int fd;
	char head[256];
	ssize_t after;
};
static void do_hold(void *arg)
{
	struct held *h = arg;
	h->fd = tcp_connect(proxy_port);
	char req[128];
	snprintf(req, sizeof req, "CONNECT localhost:%d HTTP/1.1\r\n\r\n", (int)h->after);
	send_all(h->fd, req, strlen(req));
	read_head(h->fd, h->head, sizeof h->head);
}
static void do_read_eof(void *arg)
{
	struct held *h = arg;
	char c;
	h->after = recv(h->fd, &c, 1, 0);
	close(h->fd);
}
static void close_egress(struct lr_defer *d, void *arg)
{
	(void)d;
	(void)arg;
	lr_egress_close(eg);
	eg = NULL;
}

TEST(close_ends_connections)
{
	struct echo e;
	echo_start(&e);
	char allow[64];
	snprintf(allow, sizeof allow, "localhost:%d", e.port);
	struct lr_egress_rule rules[] = { { allow, 1 } };
	CHECK_EQ_INT(setup(rules, 1), 0);
	struct held h = { .after = e.port };
	run_bg(do_hold, &h);
	CHECK(strncmp(h.head, "HTTP/1.1 200 ", 13) == 0);
	CHECK_EQ_INT(lr_egress_conns(eg), 1);
	struct lr_defer d;
	lr_defer_init(loop, &d, close_egress, NULL);
	lr_defer_schedule(&d);
	h.after = 99;
	run_bg(do_read_eof, &h); /* returns once the proxy closed the tunnel */
	CHECK(h.after <= 0);
	CHECK(eg == NULL);
	lr_defer_release(&d);
	teardown();
	echo_stop(&e);
}

/* ---- the real arrangement: listeners made inside a new network namespace ---- */

/*
 * The child enters new user and network namespaces (only a down loopback
 * there), makes the listeners on 3128 and 53 as the helper will, and then,
 * from inside: a direct connection to the host's echo server fails (the
 * positive control: the same connection from the host succeeds), the DNS
 * stub answers, and CONNECT through the proxy reaches the echo server.
 * Exit codes: 0 all well, 77 no namespaces here, others name the step.
 */
static int child_in_netns(int sock, int echo_port)
{
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0 && unshare(CLONE_NEWNET) < 0)
		return 77;
	if (lr_sbx_make_listeners(3128, 53, sock) < 0)
		return 2;
	char go;
	if (recv(sock, &go, 1, 0) != 1) /* the host serves now */
		return 3;
	int fd = tcp_connect(echo_port);
	if (fd >= 0)
		return 4; /* a direct route out: must not exist */
	uint8_t q[600], r[600];
	size_t qn = dns_query(q, "echo.test", 1);
	int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { 10, 0 };
	setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sendto(u, q, qn, 0, (struct sockaddr *)&sa, sizeof sa);
	ssize_t rn = recv(u, r, sizeof r, 0);
	if (rn != (ssize_t)qn + 16 || memcmp(r + rn - 4, "\x7f\0\0\1", 4) != 0)
		return 5;
	fd = tcp_connect(3128);
	if (fd < 0)
		return 6;
	char req[128], head[256], pong[8] = { 0 };
	int n = snprintf(req, sizeof req, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", echo_port);
	send_all(fd, req, (size_t)n);
	read_head(fd, head, sizeof head);
	if (strncmp(head, "HTTP/1.1 200 ", 13) != 0)
		return 7;
	send_all(fd, "ping", 4);
	if (recv(fd, pong, 4, MSG_WAITALL) != 4 || memcmp(pong, "ping", 4) != 0)
		return 8;
	close(fd);
	return 0;
}

struct waitx {
	pid_t pid;
	int status;
};
static void do_wait(void *arg)
{
	struct waitx *w = arg;
	while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR)
		;
}

TEST(listeners_from_a_network_namespace)
{
	struct echo e;
	echo_start(&e);
	int direct = tcp_connect(e.port); /* positive control: reachable from the host */
	CHECK(direct >= 0);
	if (direct >= 0)
		close(direct);
	/* that connection was the echo server's one: give it another */
	pthread_join(e.th, NULL);
	e.echoed = 0;
	pthread_create(&e.th, NULL, echo_main, &e);

	int sp[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[1]);
		_exit(child_in_netns(sp[0], e.port));
	}
	close(sp[0]);
	int tcp, udp, rc = lr_sbx_recv_listeners(sp[1], &tcp, &udp);
	if (rc == LR_ECLOSED) {
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 77);
		close(sp[1]);
		echo_stop(&e);
		SKIP("no network namespaces here");
	}
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(local_port(tcp), 3128);
	CHECK_EQ_INT(local_port(udp), 53);
	nlogs = 0;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	char allow[64];
	snprintf(allow, sizeof allow, "127.0.0.1:%d", e.port);
	struct lr_egress_rule rules[] = { { allow, 1 }, { "echo.test:*", 0 } };
	struct lr_egress_config cfg = { .exec_id = 7, .rules = rules, .nrules = 2, .log = on_log };
	struct lr_err err;
	CHECK_EQ_INT(lr_egress_open(loop, &cfg, tcp, udp, &eg, &err), 0);
	CHECK(send(sp[1], "g", 1, MSG_NOSIGNAL) == 1);
	struct waitx w = { .pid = pid };
	run_bg(do_wait, &w);
	if (!WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0)
		fprintf(stderr, "child status %d\n", w.status);
	CHECK(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0);
	CHECK_EQ_INT(nlogs, 2);
	CHECK_EQ_STR(logs[0].kind, "dns");
	CHECK_EQ_STR(logs[1].kind, "connect");
	CHECK_EQ_INT(logs[1].verdict, LR_EGRESS_ALLOW);
	close(sp[1]);
	teardown();
	echo_stop(&e);
	CHECK_EQ_INT(e.echoed, 4);
}

/* ---- curl through the proxy ---- */

struct curlx {
	char cmd[512];
	char out[1024];
};
static void do_curl(void *arg)
{
	struct curlx *c = arg;
	FILE *f = popen(c->cmd, "r");
	if (!f)
		return;
	size_t n = fread(c->out, 1, sizeof c->out - 1, f);
	c->out[n] = '\0';
	pclose(f);
}

TEST(curl_through_proxy)
{
	if (system("curl --version >/dev/null 2>&1") != 0) {
		SKIP("no curl");
	}
	for (int ap = 0; ap <= 1; ap++) {
		struct lr_egress_rule rules[] = { { "localhost:*", ap } };
		CHECK_EQ_INT(setup(rules, 1), 0);
		int port;
		struct lr_httpd *h = upstream(&port);
		CHECK(h != NULL);
		for (int tunnel = 0; tunnel <= 1; tunnel++) {
			struct curlx c;
			memset(&c, 0, sizeof c);
			snprintf(c.cmd, sizeof c.cmd,
				 "env -u NO_PROXY -u no_proxy -u http_proxy -u HTTP_PROXY "
				 "curl -sS %s --max-time 20 -w ' code=%%{http_code}' "
				 "-x http://127.0.0.1:%d http://localhost:%d/curl 2>&1",
				 tunnel ? "-p" : "", proxy_port, port);
			run_bg(do_curl, &c);
			if (ap) {
				char want[128];
				snprintf(want, sizeof want, "GET /curl host=localhost:%d", port);
				if (!strstr(c.out, want) || !strstr(c.out, "code=200"))
					fprintf(stderr, "curl: %s\n", c.out);
				CHECK(strstr(c.out, want) != NULL);
				CHECK(strstr(c.out, "code=200") != NULL);
			} else if (tunnel) {
				/* curl reports the refused CONNECT itself */
				if (!strstr(c.out, "403"))
					fprintf(stderr, "curl: %s\n", c.out);
				CHECK(strstr(c.out, "403") != NULL);
				CHECK(strstr(c.out, "GET /curl") == NULL);
			} else {
				if (!strstr(c.out, "code=403"))
					fprintf(stderr, "curl: %s\n", c.out);
				CHECK(strstr(c.out, "resolves to loopback") != NULL);
				CHECK(strstr(c.out, "code=403") != NULL);
			}
		}
		lr_httpd_close(h);
		teardown();
	}
}

int main(void)
{
	RUN(classify_addresses);
	RUN(rules_checked);
	RUN(head_parse);
	RUN(head_forward);
	RUN(dns_parse_and_reply);
	RUN(netfds_pass_and_check);
	RUN(connect_allowed_and_denied);
	RUN(loopback_name_needs_allow_private);
	RUN(literal_addresses);
	RUN(upstream_failure_is_502);
	RUN(tunnel_bulk_with_backpressure);
	RUN(http_forwarding);
	RUN(oversized_head_is_431);
	RUN(dns_stub);
	RUN(close_ends_connections);
	RUN(listeners_from_a_network_namespace);
	RUN(curl_through_proxy);
	return test_summary();
}
