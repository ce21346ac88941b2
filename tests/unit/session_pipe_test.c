/*
 * session_pipe_test.c — host/session_pipe.c without Lua: a real session on
 * the memory store, the real HTTP server on loopback, a raw socket client
 * reading the frames, the loop driven by hand.
 *
 * Every wait is for an event (bytes on the client socket, a done callback)
 * with lr_loop_once blocking on the loop's own sockets and timers; the only
 * bound is a generous round count so a broken pipe fails instead of hanging.
 */
#include "../../host/host.h"
#include "../../storage/storage.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct fix {
	struct lr_loop *loop;
	struct lr_store *store;
	struct lr_session *s;
	struct lr_httpd *h;
	struct lr_httpd_req *req;
	struct lr_session_sub *sub;
	struct lr_session_pipe *pipe;
	int fd;                 /* the client's socket */
	char in[16 << 20];      /* what the client read, after the response head */
	size_t in_len;
	int head_done;
	int done_calls, why;
	int emitted;            /* enduring emissions acknowledged */
};

static void on_request(struct lr_httpd_req *r, void *arg)
{
	((struct fix *)arg)->req = r;
}

static void opened(struct lr_session_open *o)
{
	(void)o;
}

static void on_sub(void *arg)
{
	struct fix *f = arg;
	lr_session_pipe_notify(f->pipe);
}

static void on_close(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	struct fix *f = arg;
	lr_session_pipe_notify(f->pipe); /* the pipe sees the closed request and ends */
}

static void on_drain(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	lr_session_pipe_drained(((struct fix *)arg)->pipe);
}

static void pipe_done(void *arg, int why)
{
	struct fix *f = arg;
	f->done_calls++;
	f->why = why;
}

static int small_rcvbuf; /* the next client connects with a 4 KiB receive buffer */

static int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int sz = 4096;
	if (small_rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads what the socket has now (never blocks); strips the response head. */
static void pull(struct fix *f)
{
	for (;;) {
		size_t room = sizeof f->in - 1 - f->in_len;
		if (!room)
			return;
		ssize_t k = recv(f->fd, f->in + f->in_len, room, MSG_DONTWAIT);
		if (k <= 0)
			return;
		f->in_len += (size_t)k;
		f->in[f->in_len] = '\0';
		if (!f->head_done) {
			char *e = strstr(f->in, "\r\n\r\n");
			if (e) {
				size_t head = (size_t)(e - f->in) + 4;
				memmove(f->in, f->in + head, f->in_len - head + 1);
				f->in_len -= head;
				f->head_done = 1;
			}
		}
	}
}

/* One loop round that wakes for the loop's own events or for bytes at the client. */
static void round_trip(struct fix *f)
{
	lr_loop_once(f->loop, 1);
	struct pollfd pfd = { .fd = f->fd, .events = POLLIN };
	/* the server side is this thread: poll briefly for bytes, then run the loop again */
	(void)poll(&pfd, 1, 5);
	pull(f);
}

/* Runs rounds until the client has read at least n body bytes. */
static int want_bytes(struct fix *f, size_t n)
{
	for (int i = 0; i < 4000 && f->in_len < n; i++)
		round_trip(f);
	return f->in_len >= n;
}

static int want_done(struct fix *f)
{
	for (int i = 0; i < 4000 && !f->done_calls; i++)
		round_trip(f);
	return f->done_calls;
}

static void emitted(void *arg, int rc, uint64_t seq, const char *msg)
{
	(void)seq;
	(void)msg;
	if (rc == 0)
		((struct fix *)arg)->emitted++;
}

static void emit(struct fix *f, const char *json, int enduring)
{
	struct lr_session_emit a = { .json = json, .len = strlen(json), .kind = LR_SESSION_EVENT,
				     .enduring = enduring, .done = enduring ? emitted : NULL,
				     .arg = f };
	struct lr_session_emission *em = NULL;
	const char *msg = NULL;
	int before = f->emitted;
	CHECK_EQ_INT(lr_session_emit(f->s, &a, &em, &msg), 0);
	for (int i = 0; enduring && i < 4000 && f->emitted == before; i++)
		lr_loop_once(f->loop, 0);
}

/* A session, a server, a client whose GET is in hand, started as a stream. */
static int setup(struct fix *f, const char *http_version, size_t buffer,
		 const struct lr_session_pipe_config *pc)
{
	memset(f, 0, sizeof *f);
	struct lr_err e;
	if (lr_loop_new(&f->loop) || lr_store_memory_open(&f->store, &e))
		return -1;
	struct lr_session_open o;
	memset(&o, 0, sizeof o);
	o.loop = f->loop;
	o.store = f->store;
	o.done = opened;
	if (lr_session_open(&o))
		return -1;
	lr_loop_run(f->loop);
	if (o.rc)
		return -1;
	f->s = o.session;
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .max_body = 1024, .max_headers = 8192,
				       .on_request = on_request, .arg = f };
	if (lr_httpd_open(f->loop, &cfg, &f->h))
		return -1;
	f->fd = connect_to(lr_httpd_port(f->h));
	if (f->fd < 0)
		return -1;
	char req[128];
	int n = snprintf(req, sizeof req, "GET /events %s\r\nHost: t\r\n\r\n", http_version);
	if (send(f->fd, req, (size_t)n, 0) != n)
		return -1;
	for (int i = 0; i < 4000 && !f->req; i++)
		lr_loop_once(f->loop, 0);
	if (!f->req)
		return -1;
	lr_httpd_req_set_callbacks(f->req, on_close, on_drain, f);
	lr_httpd_req_add_header(f->req, "Content-Type", "text/event-stream");
	if (lr_httpd_req_start(f->req, 200))
		return -1;
	struct lr_session_filter flt = { .all_loops = 1, .ephemeral = 1, .buffer = buffer };
	if (lr_session_subscribe(f->s, &flt, on_sub, f, &f->sub))
		return -1;
	struct lr_session_pipe_config c = *pc;
	c.done = pipe_done;
	c.arg = f;
	return lr_session_pipe_new(f->loop, f->sub, f->req, &c, &f->pipe);
}

static void teardown(struct fix *f)
{
	lr_session_pipe_free(f->pipe);
	lr_session_sub_free(f->sub);
	lr_httpd_req_free(f->req);
	lr_httpd_close(f->h);
	if (f->fd >= 0)
		close(f->fd);
	lr_session_free(f->s, NULL, NULL);
	for (int i = 0; i < 100 && lr_loop_once(f->loop, 1) > 0; i++)
		;
	lr_store_close(f->store);
	lr_loop_free(f->loop);
}

/* The tip before the first emission: the session's opening records. */
static uint64_t tip(struct fix *f)
{
	return lr_session_tip(f->s);
}

static struct fix F;

TEST(frames_are_exact)
{
	struct lr_session_pipe_config pc = { 0 };
	CHECK(setup(&F, "HTTP/1.0", 16, &pc) == 0);
	uint64_t t0 = tip(&F);
	emit(&F, "{\"type\":\"A\"}", 1);
	emit(&F, "{\"type\":\"tick\"}", 0);
	emit(&F, "{\"type\":\n\"B\"}", 1); /* a line break in the JSON: two data lines */
	char want[512];
	int n = snprintf(want, sizeof want,
			 "event: enduring\nid: %" PRIu64 "\ndata: {\"type\":\"A\"}\n\n"
			 "event: ephemeral\ndata: {\"type\":\"tick\"}\n\n"
			 "event: enduring\nid: %" PRIu64 "\ndata: {\"type\":\ndata: \"B\"}\n\n",
			 t0 + 1, t0 + 2);
	CHECK(want_bytes(&F, (size_t)n));
	CHECK_EQ_STR(F.in, want);
	CHECK(strstr(F.in, "\"seq\"") == NULL); /* the seq is the id line, the JSON as emitted */
	CHECK_EQ_INT(lr_session_pipe_last(F.pipe), t0 + 2);
	CHECK_EQ_INT(F.done_calls, 0);
	teardown(&F);
}

TEST(seqs_at_or_below_last_are_skipped)
{
	/* the owner replayed the journal up to the next seq: the live copy of it is dropped */
	struct fix *f = &F;
	struct lr_session_pipe_config pc = { 0 };
	CHECK(setup(f, "HTTP/1.0", 16, &pc) == 0);
	lr_session_pipe_free(f->pipe); /* again, with last set from the tip */
	uint64_t t0 = tip(f);
	struct lr_session_pipe_config c2 = { .last = t0 + 1, .done = pipe_done, .arg = f };
	CHECK(lr_session_pipe_new(f->loop, f->sub, f->req, &c2, &f->pipe) == 0);
	emit(f, "{\"type\":\"old\"}", 1);
	emit(f, "{\"type\":\"new\"}", 1);
	CHECK(want_bytes(f, 20));
	for (int i = 0; i < 200 && !strstr(f->in, "new"); i++)
		round_trip(f);
	CHECK(strstr(f->in, "old") == NULL);
	CHECK(strstr(f->in, "new") != NULL);
	char id[32];
	snprintf(id, sizeof id, "id: %" PRIu64 "\n", t0 + 2);
	CHECK(strstr(f->in, id) != NULL);
	CHECK_EQ_INT(lr_session_pipe_last(f->pipe), t0 + 2);
	teardown(f);
}

TEST(pings_when_idle)
{
	struct lr_session_pipe_config pc = { .heartbeat = 0.05 };
	CHECK(setup(&F, "HTTP/1.0", 16, &pc) == 0);
	CHECK(want_bytes(&F, 16)); /* two pings and nothing else */
	CHECK(strncmp(F.in, ": ping\n\n: ping\n\n", 16) == 0);
	teardown(&F);
}

TEST(a_client_that_leaves_ends_the_pipe_once)
{
	struct lr_session_pipe_config pc = { 0 };
	CHECK(setup(&F, "HTTP/1.1", 16, &pc) == 0);
	emit(&F, "{\"type\":\"A\"}", 1);
	CHECK(want_bytes(&F, 10));
	close(F.fd);
	F.fd = -1;
	/* the server notices on its own (on_close), or at the next write */
	for (int i = 0; i < 4000 && !F.done_calls; i++) {
		if (i % 50 == 49)
			emit(&F, "{\"type\":\"more\"}", 1);
		lr_loop_once(F.loop, 0);
	}
	CHECK_EQ_INT(F.done_calls, 1);
	CHECK_EQ_INT(F.why, LR_SPIPE_GONE);
	emit(&F, "{\"type\":\"after\"}", 1);
	lr_loop_once(F.loop, 1);
	CHECK_EQ_INT(F.done_calls, 1);
	teardown(&F);
}

TEST(an_ended_subscription_ends_the_pipe)
{
	struct lr_session_pipe_config pc = { 0 };
	CHECK(setup(&F, "HTTP/1.0", 16, &pc) == 0);
	emit(&F, "{\"type\":\"A\"}", 1);
	lr_session_sub_end(F.sub);
	lr_session_pipe_notify(F.pipe); /* the owner forwards the end, as after any notify */
	CHECK(want_done(&F));
	CHECK_EQ_INT(F.why, LR_SPIPE_CLOSED);
	CHECK(want_bytes(&F, 10)); /* what was buffered before the end still went out */
	CHECK(strstr(F.in, "\"A\"") != NULL);
	teardown(&F);
}

TEST(a_client_too_slow_overflows_and_last_says_where_to_catch_up)
{
	/* the client does not read: above 4 KiB queued the pipe stops taking
	 * events and the subscription's 4-event buffer overflows; when the
	 * client reads again and the output drains, the pipe finds the overflow
	 * and ends with OVERFLOW, last being the highest seq that went to the
	 * connection, where the owner's journal catch-up starts */
	struct lr_session_pipe_config pc = { .high = 4096, .low = 1024 };
	small_rcvbuf = 1; /* so the kernel's buffers cannot absorb the burst */
	CHECK(setup(&F, "HTTP/1.0", 4, &pc) == 0);
	small_rcvbuf = 0;
	static char big[64 * 1024];
	int n = snprintf(big, sizeof big, "{\"type\":\"Big\",\"pad\":\"");
	memset(big + n, 'p', sizeof big - (size_t)n - 3);
	memcpy(big + sizeof big - 3, "\"}", 3);
	uint64_t t0 = tip(&F);
	for (int i = 0; i < 128; i++) /* 8 MiB */
		emit(&F, big, 1);
	CHECK_EQ_INT(F.done_calls, 0); /* paused: it has not looked at the subscription */
	CHECK(want_done(&F));
	CHECK_EQ_INT(F.done_calls, 1);
	CHECK_EQ_INT(F.why, LR_SPIPE_OVERFLOW);
	uint64_t last = lr_session_pipe_last(F.pipe);
	CHECK(last > t0 && last < tip(&F));
	/* reading now gets exactly the frames up to last, whole */
	char id[32];
	snprintf(id, sizeof id, "id: %" PRIu64 "\n", last);
	for (int i = 0; i < 4000 && !strstr(F.in, id); i++)
		round_trip(&F);
	CHECK(strstr(F.in, id) != NULL);
	snprintf(id, sizeof id, "id: %" PRIu64 "\n", last + 1);
	for (int i = 0; i < 50; i++)
		round_trip(&F);
	CHECK(strstr(F.in, id) == NULL);
	teardown(&F);
}

TEST(free_stops_without_done)
{
	struct lr_session_pipe_config pc = { .heartbeat = 0.01 };
	CHECK(setup(&F, "HTTP/1.0", 16, &pc) == 0);
	emit(&F, "{\"type\":\"A\"}", 1);
	lr_session_pipe_free(F.pipe);
	F.pipe = NULL;
	emit(&F, "{\"type\":\"B\"}", 1);
	for (int i = 0; i < 20; i++)
		round_trip(&F);
	CHECK_EQ_INT(F.done_calls, 0);
	/* A was staged before free and still went out; nothing after it did */
	CHECK(strstr(F.in, "\"A\"") != NULL);
	CHECK(strstr(F.in, "\"B\"") == NULL);
	CHECK(strstr(F.in, "ping") == NULL || strstr(F.in, "ping") < strstr(F.in, "\"A\""));
	teardown(&F);
}

/*
 * A fan-out large enough for a round's sends to be shared with a worker of
 * the pool (SHARE_MIN, session_pipe.c): every client gets every frame, in
 * order, once, and a client gone before the burst ends its pipe (GONE)
 * while the others' sends go on.
 */
enum { FAN = 150 };
static struct {
	struct lr_httpd_req *req[FAN];
	int nreq;
	struct lr_session_sub *sub[FAN];
	struct lr_session_pipe *pipe[FAN];
	int fd[FAN];
	char *in[FAN];
	size_t len[FAN];
	int done[FAN], why[FAN];
} fan;

static void fan_request(struct lr_httpd_req *r, void *arg)
{
	(void)arg;
	if (fan.nreq < FAN)
		fan.req[fan.nreq++] = r;
}

static void fan_sub(void *arg)
{
	lr_session_pipe_notify(fan.pipe[(intptr_t)arg]);
}

static void fan_close(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	lr_session_pipe_notify(fan.pipe[(intptr_t)arg]);
}

static void fan_done(void *arg, int why)
{
	intptr_t i = (intptr_t)arg;
	fan.done[i]++;
	fan.why[i] = why;
}

/* Reads every client's socket; 1 once each live one holds want bytes of body. */
static int fan_pull(size_t want, int gone)
{
	int all = 1;
	for (int i = 0; i < FAN; i++) {
		if (i == gone)
			continue;
		for (;;) {
			char buf[4096];
			ssize_t k = recv(fan.fd[i], buf, sizeof buf, MSG_DONTWAIT);
			if (k <= 0)
				break;
			fan.in[i] = realloc(fan.in[i], fan.len[i] + (size_t)k + 1);
			memcpy(fan.in[i] + fan.len[i], buf, (size_t)k);
			fan.len[i] += (size_t)k;
			fan.in[i][fan.len[i]] = '\0';
		}
		char *body = fan.in[i] ? strstr(fan.in[i], "\r\n\r\n") : NULL;
		if (!body || strlen(body + 4) < want)
			all = 0;
	}
	return all;
}

/* One loop round without blocking, then a short wait for bytes at any client. */
static void fan_round(struct fix *f)
{
	lr_loop_once(f->loop, 1);
	struct pollfd pfd[FAN];
	for (int i = 0; i < FAN; i++)
		pfd[i] = (struct pollfd){ .fd = fan.fd[i], .events = POLLIN };
	(void)poll(pfd, FAN, 5);
}

TEST(a_fan_out_to_many_clients_delivers_every_frame_to_each)
{
	struct fix *f = &F;
	memset(f, 0, sizeof *f);
	memset(&fan, 0, sizeof fan);
	for (int i = 0; i < FAN; i++)
		fan.fd[i] = -1;
	struct lr_err e;
	CHECK(lr_loop_new(&f->loop) == 0 && lr_store_memory_open(&f->store, &e) == 0);
	struct lr_session_open o;
	memset(&o, 0, sizeof o);
	o.loop = f->loop;
	o.store = f->store;
	o.done = opened;
	CHECK(lr_session_open(&o) == 0);
	lr_loop_run(f->loop);
	CHECK(o.rc == 0);
	f->s = o.session;
	struct lr_httpd_config cfg = { .host = "127.0.0.1", .max_body = 1024, .max_headers = 8192,
				       .on_request = fan_request };
	CHECK(lr_httpd_open(f->loop, &cfg, &f->h) == 0);
	for (int i = 0; i < FAN; i++) {
		fan.fd[i] = connect_to(lr_httpd_port(f->h));
		CHECK(fan.fd[i] >= 0);
		const char *get = "GET /events HTTP/1.1\r\nHost: t\r\n\r\n";
		CHECK(send(fan.fd[i], get, strlen(get), 0) == (ssize_t)strlen(get));
		lr_loop_once(f->loop, 1); /* accept as they come: the backlog is short */
	}
	for (int i = 0; i < 4000 && fan.nreq < FAN; i++)
		fan_round(f);
	CHECK_EQ_INT(fan.nreq, FAN);
	for (intptr_t i = 0; i < FAN; i++) {
		lr_httpd_req_set_callbacks(fan.req[i], fan_close, NULL, (void *)i);
		lr_httpd_req_add_header(fan.req[i], "Content-Type", "text/event-stream");
		CHECK(lr_httpd_req_start(fan.req[i], 200) == 0);
		struct lr_session_filter flt = { .all_loops = 1, .ephemeral = 1, .buffer = 64 };
		CHECK(lr_session_subscribe(f->s, &flt, fan_sub, (void *)i, &fan.sub[i]) == 0);
		struct lr_session_pipe_config c = { .done = fan_done, .arg = (void *)i };
		CHECK(lr_session_pipe_new(f->loop, fan.sub[i], fan.req[i], &c, &fan.pipe[i]) == 0);
	}
	/* the response heads go out; then one client leaves */
	for (int i = 0; i < 200 && !fan_pull(0, -1); i++)
		fan_round(f);
	int gone = FAN / 2;
	close(fan.fd[gone]);
	uint64_t t0 = tip(f);
	emit(f, "{\"type\":\"A\"}", 1);
	emit(f, "{\"type\":\"tick\"}", 0);
	emit(f, "{\"type\":\"B\"}", 1);
	char want[512];
	int n = snprintf(want, sizeof want,
			 "event: enduring\nid: %" PRIu64 "\ndata: {\"type\":\"A\"}\n\n"
			 "event: ephemeral\ndata: {\"type\":\"tick\"}\n\n"
			 "event: enduring\nid: %" PRIu64 "\ndata: {\"type\":\"B\"}\n\n",
			 t0 + 1, t0 + 2);
	/* chunked: each chunk's size line and CRLF around the frames */
	int ok = 0;
	for (int i = 0; i < 4000 && !(ok = fan_pull((size_t)n, gone)); i++)
		fan_round(f);
	CHECK(ok);
	int exact = 0;
	for (int i = 0; i < FAN; i++) {
		if (i == gone)
			continue;
		/* the body without its chunk framing is exactly the three frames */
		char *b = strstr(fan.in[i], "\r\n\r\n") + 4, body[1024];
		size_t bl = 0;
		while (*b) {
			char *end;
			unsigned long sz = strtoul(b, &end, 16);
			if (end == b || strncmp(end, "\r\n", 2) != 0 || sz + bl >= sizeof body)
				break;
			memcpy(body + bl, end + 2, sz);
			bl += sz;
			b = end + 2 + sz + 2;
		}
		body[bl] = '\0';
		exact += strcmp(body, want) == 0;
	}
	CHECK_EQ_INT(exact, FAN - 1);
	/* the gone client's pipe ends, once, GONE; no other pipe ends */
	for (int i = 0; i < 4000 && !fan.done[gone]; i++) {
		if (i % 50 == 49)
			emit(f, "{\"type\":\"more\"}", 1);
		fan_round(f);
	}
	CHECK_EQ_INT(fan.done[gone], 1);
	CHECK_EQ_INT(fan.why[gone], LR_SPIPE_GONE);
	int others = 0;
	for (int i = 0; i < FAN; i++)
		others += i != gone && fan.done[i];
	CHECK_EQ_INT(others, 0);
	for (int i = 0; i < FAN; i++) {
		lr_session_pipe_free(fan.pipe[i]);
		lr_session_sub_free(fan.sub[i]);
		lr_httpd_req_free(fan.req[i]);
		if (i != gone)
			close(fan.fd[i]);
		free(fan.in[i]);
	}
	lr_httpd_close(f->h);
	lr_session_free(f->s, NULL, NULL);
	for (int i = 0; i < 100 && lr_loop_once(f->loop, 1) > 0; i++)
		;
	lr_store_close(f->store);
	lr_loop_free(f->loop);
}

int main(void)
{
	RUN(frames_are_exact);
	RUN(seqs_at_or_below_last_are_skipped);
	RUN(pings_when_idle);
	RUN(a_client_that_leaves_ends_the_pipe_once);
	RUN(an_ended_subscription_ends_the_pipe);
	RUN(a_client_too_slow_overflows_and_last_says_where_to_catch_up);
	RUN(free_stops_without_done);
	RUN(a_fan_out_to_many_clients_delivers_every_frame_to_each);
	return test_summary();
}
