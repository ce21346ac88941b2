/*
 * sse_subscribers.c — N server-sent-event subscribers in one process, for
 * tests/bench/serve_bench.py: the latency from an event's created_at (the
 * server's CLOCK_REALTIME, stamped as the event is queued for its journal
 * append) to its arrival at each subscriber.
 *
 *   sse_subscribers HOST PORT PATH N
 *
 * Opens N connections, sends `GET PATH` on each, prints "ready" once every
 * one has its 200 headers, then reads until a line arrives on stdin (or
 * stdin closes) and prints one JSON object: events per connection (min,
 * max), latency p50, p99 and max in ms over every (event, subscriber).
 *
 * Arrival is the kernel's receive timestamp of the socket read that
 * completed the event (SO_TIMESTAMPNS, CLOCK_REALTIME), so the time this
 * process takes to get round to a socket does not count. When one read
 * holds several events, they all get its timestamp, which is that of the
 * last segment read: earlier events count as later than they were (the
 * figure errs high, never low). Only `event: enduring` events with a
 * "created_at" field count (journaled ones; pings and ephemeral ones not).
 *
 * With SSE_SUBSCRIBERS_DUMP=FILE it also writes one line per sample to
 * FILE: the connection's index, the event's id, its created_at and its
 * arrival (seconds), so one event's spread over the subscribers (the
 * server's send round) and the gaps between a turn's events can be seen.
 *
 * A benchmark helper, not part of luarig: it trusts the server it reads.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_CAP (64 << 10)

struct conn {
	int fd;
	int headers_done;
	size_t len;
	long events;
	char *buf;
};

static FILE *dump; /* SSE_SUBSCRIBERS_DUMP, or NULL */
static double *samples;
static size_t nsamples, capsamples;

static void add_sample(double ms)
{
	if (nsamples == capsamples) {
		capsamples = capsamples ? capsamples * 2 : 65536;
		samples = realloc(samples, capsamples * sizeof *samples);
		if (!samples) {
			perror("realloc");
			exit(1);
		}
	}
	samples[nsamples++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

_Noreturn static void die(const char *what)
{
	fprintf(stderr, "sse_subscribers: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Scans the complete events in c->buf (each ends with a blank line); i is c's index. */
static void scan(struct conn *c, int i, double arrival)
{
	size_t off = 0;
	if (!c->headers_done) {
		const char *h = memmem(c->buf, c->len, "\r\n\r\n", 4);
		if (!h)
			return;
		if (h - c->buf < 12 || strncmp(c->buf, "HTTP/1.1 200", 12) != 0) {
			fprintf(stderr, "sse_subscribers: not 200: %.40s\n", c->buf);
			exit(1);
		}
		c->headers_done = 1;
		off = (size_t)(h - c->buf) + 4;
	}
	for (;;) {
		char *p = c->buf + off;
		char *e = memmem(p, c->len - off, "\n\n", 2);
		if (!e)
			break;
		size_t n = (size_t)(e - p);
		*e = 0; /* the event as a string: SSE text holds no NUL */
		if (strstr(p, "event: enduring\n")) {
			const char *ca = strstr(p, "\"created_at\":");
			if (ca) {
				double created = strtod(ca + 13, NULL);
				add_sample((arrival - created) * 1e3);
				c->events++;
				if (dump) {
					const char *id = strstr(p, "\nid: ");
					fprintf(dump, "%d %ld %.6f %.6f\n", i,
						id ? strtol(id + 5, NULL, 10) : -1L, created, arrival);
				}
			}
		}
		*e = '\n';
		off += n + 2;
	}
	c->len -= off;
	memmove(c->buf, c->buf + off, c->len);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: sse_subscribers HOST PORT PATH N\n");
		return 2;
	}
	int n = atoi(argv[4]);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (n <= 0 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "sse_subscribers: bad arguments\n");
		return 2;
	}
	const char *dump_path = getenv("SSE_SUBSCRIBERS_DUMP");
	if (dump_path && !(dump = fopen(dump_path, "w")))
		die(dump_path);
	char req[1024];
	int rlen = snprintf(req, sizeof req,
			    "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n\r\n",
			    argv[3], argv[1], argv[2]);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct conn *cs = calloc((size_t)n, sizeof *cs);
	if (!cs)
		die("calloc");
	for (int i = 0; i < n; i++) {
		struct conn *c = &cs[i];
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			die("socket");
		int one = 1;
		if (setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0)
			die("SO_TIMESTAMPNS");
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
			die("connect");
		if (write(c->fd, req, (size_t)rlen) != rlen)
			die("write");
		fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
		c->buf = malloc(BUF_CAP);
		if (!c->buf)
			die("malloc");
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
			die("epoll_ctl");
	}
	struct epoll_event sev = { .events = EPOLLIN, .data.u32 = UINT32_MAX };
	epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev);

	int ready = 0, stop = 0;
	struct epoll_event evs[256];
	while (!stop) {
		int k = epoll_wait(ep, evs, 256, -1);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int j = 0; j < k; j++) {
			if (evs[j].data.u32 == UINT32_MAX) {
				stop = 1;
				continue;
			}
			struct conn *c = &cs[evs[j].data.u32];
			for (;;) {
				if (c->len == BUF_CAP) {
					fprintf(stderr, "sse_subscribers: an event over %d bytes\n", BUF_CAP);
					return 1;
				}
				char ctl[CMSG_SPACE(sizeof(struct timespec))];
				struct iovec iov = { c->buf + c->len, BUF_CAP - c->len };
				struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
						     .msg_control = ctl, .msg_controllen = sizeof ctl };
				ssize_t got = recvmsg(c->fd, &mh, 0);
				if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				if (got < 0 && errno == EINTR)
					continue;
				if (got <= 0) {
					fprintf(stderr, "sse_subscribers: a stream ended early\n");
					return 1;
				}
				double arrival = 0;
				for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
					if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
						struct timespec ts;
						memcpy(&ts, CMSG_DATA(cm), sizeof ts);
						arrival = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
					}
				if (arrival == 0) {
					struct timespec ts;
					clock_gettime(CLOCK_REALTIME, &ts);
					arrival = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
				}
				int had = c->headers_done;
				c->len += (size_t)got;
				scan(c, (int)evs[j].data.u32, arrival);
				if (!had && c->headers_done && ++ready == n) {
					printf("ready\n");
					fflush(stdout);
				}
			}
		}
	}
	long emin = -1, emax = 0;
	for (int i = 0; i < n; i++) {
		if (emin < 0 || cs[i].events < emin)
			emin = cs[i].events;
		if (cs[i].events > emax)
			emax = cs[i].events;
		close(cs[i].fd);
		free(cs[i].buf);
	}
	double p50 = 0, p99 = 0, mx = 0;
	if (nsamples) {
		qsort(samples, nsamples, sizeof *samples, cmp_double);
		p50 = samples[nsamples / 2];
		p99 = samples[(size_t)((double)(nsamples - 1) * 0.99)];
		mx = samples[nsamples - 1];
	}
	printf("{\"subscribers\": %d, \"ready\": %d, \"samples\": %zu, \"events_min\": %ld, "
	       "\"events_max\": %ld, \"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f}\n",
	       n, ready, nsamples, emin, emax, p50, p99, mx);
	free(samples);
	free(cs);
	if (dump && fclose(dump) != 0)
		die("SSE_SUBSCRIBERS_DUMP");
	return 0;
}
