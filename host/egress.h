/*
 * egress.h — egress proxy (host/egress.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_EGRESS_H
#define LR_HOST_EGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"

/*
 * The network boundary of a sandboxed execution (docs/sandbox.md): an HTTP
 * proxy (CONNECT tunnels and absolute-URI "GET http://host/..." forwarding)
 * and a DNS stub, served on the loop thread from listener fds made inside
 * the target's network namespace (lr_sbx_make_listeners). The target has
 * only loopback, so these sockets are its only way out.
 *
 * Per request: parse the head (8 KiB, 100 headers, strict); the target
 * host:port must match the execution's allow-list (or its policy callback);
 * the proxy resolves the name itself on the worker pool and refuses the
 * request when ANY resolved address is loopback, private (RFC 1918, CGNAT
 * 100.64/10, ULA fc00::/7), link-local, unspecified, multicast, broadcast
 * or reserved (IPv4-mapped, NAT64 and 6to4 IPv6 forms are judged by the
 * IPv4 address they carry) unless the matching rule says allow_private;
 * cloud metadata addresses (169.254.169.254, fd00:ec2::254) are refused
 * even then. It connects to the very addresses it checked (no second
 * lookup a rebinding name could change), in order, each within
 * connect_timeout; a failure is a 502, never a direct connection. Denials
 * are "403 Forbidden" with a one-line text body naming the reason. Each
 * request ends in exactly one log event: allow (connected), deny or fail.
 *
 * The DNS stub answers A queries for names the allow-list covers (on any
 * port) with 127.0.0.1, AAAA and other types for them with NODATA, other
 * names with NXDOMAIN, non-IN classes with REFUSED and malformed queries
 * with FORMERR. 127.0.0.1 points the target back at its own loopback: the
 * real address would be unreachable there anyway, tools that honour the
 * proxy variables send the NAME to the proxy (which resolves and checks it
 * itself), and a lookup that must succeed first (npm, pip) does. For a
 * resolver to use it the view's resolv.conf must say "nameserver
 * 127.0.0.1" and the stub must be on port 53 (the executor's job).
 *
 * Everything runs on the loop thread. The egress holds no loop reference
 * (its owner, the execution, keeps the loop alive); a name lookup in flight
 * holds one until it finishes, even after lr_egress_close.
 */
struct lr_egress;
struct sockaddr;

/* One allow-list entry. pattern: "host:port" where host is a name
 * ("example.com", matched case-insensitively, a trailing dot ignored), a
 * "*.suffix" (any name strictly below suffix, not suffix itself), an IPv4
 * literal or a bracketed IPv6 literal ("[::1]"); port is 1..65535 or "*". */
struct lr_egress_rule {
	const char *pattern;
	int allow_private; /* resolved addresses may be loopback, private or link-local */
};

enum lr_egress_verdict { LR_EGRESS_ALLOW = 0, LR_EGRESS_DENY = 1, LR_EGRESS_FAIL = 2 };

/* What the log callback hears; every string is borrowed for the call only. */
struct lr_egress_event {
	uint64_t exec_id;
	const char *kind;   /* "connect", "http" or "dns" */
	const char *target; /* "host:port" as requested ("name" for dns), or "-" when unparsable */
	enum lr_egress_verdict verdict;
	const char *reason; /* "not on the allow-list", "resolves to loopback 127.0.0.1", "connected to 1.2.3.4:443", ... */
};
const char *lr_egress_verdict_name(enum lr_egress_verdict v); /* "allow", "deny", "fail" */

struct lr_egress_config {
	uint64_t exec_id;
	const struct lr_egress_rule *rules; /* copied; checked by lr_egress_open */
	size_t nrules;
	/*
	 * Optional, consulted instead of rules: 1 allows host:port (and sets
	 * *allow_private), 0 denies. host is lower-case without a trailing dot
	 * or brackets; port 0 means "any port" (the DNS stub asking about a
	 * name). Runs on the loop thread; must not close the egress.
	 */
	int (*policy)(void *arg, const char *host, uint16_t port, int *allow_private);
	/* Optional; runs on the loop thread; must not close the egress. */
	void (*log)(void *arg, const struct lr_egress_event *ev);
	void *arg;
	double connect_timeout; /* seconds per address; 0: 10 */
	double head_timeout;    /* seconds for a client to send its request head; 0: 30 */
	int max_conns;          /* connections served at once; 0: 256; beyond, accepted and closed */
};

/*
 * Starts serving. tcp_fd: a listening TCP socket or -1; udp_fd: a bound UDP
 * socket or -1. Takes ownership of both fds in every case (they are closed
 * on failure). Returns 0, -EINVAL with err naming the bad rule ("egress:
 * bad rule 'x': ...") or -ENOMEM.
 */
int lr_egress_open(struct lr_loop *loop, const struct lr_egress_config *cfg, int tcp_fd,
		   int udp_fd, struct lr_egress **out, struct lr_err *err);
/* Connections open now (accepted and not yet finished). */
int lr_egress_conns(const struct lr_egress *e);
/* Closes the listeners and every connection at once; accepts NULL. */
void lr_egress_close(struct lr_egress *e);

/* Checks one rule pattern; 0 or -EINVAL with a message in err. */
int lr_egress_rule_check(const char *pattern, struct lr_err *err);

/*
 * How the proxy judges an address (sa: AF_INET or AF_INET6). Returns NULL
 * when it may be reached, else the reason's noun ("loopback", "private",
 * "link-local", "metadata", "unspecified", "multicast", "reserved"). *hard
 * is 1 for the kinds allow_private does not lift (metadata, unspecified,
 * multicast, broadcast, reserved).
 */
const char *lr_egress_classify(const struct sockaddr *sa, int *hard);

/*
 * The parsers, public for the fuzz targets and tests. A request head
 * (everything up to the blank line): request line, headers.
 */
#define LR_EGRESS_HEAD_MAX 8192
#define LR_EGRESS_HEADERS_MAX 100
struct lr_egress_head {
	int connect;            /* 1: CONNECT host:port; 0: an absolute http:// URI */
	char method[24];
	char host[256];         /* lower-case, no brackets, no trailing dot */
	uint16_t port;
	size_t len;             /* bytes of the head, blank line included */
	uint16_t path, pathlen; /* origin-form path of an absolute URI (offsets in the buffer) */
	int minor;              /* HTTP/1.minor */
	int nhdr;
	struct { uint16_t name, nlen, value, vlen; } hdr[LR_EGRESS_HEADERS_MAX];
};
/*
 * Parses buf[0..len). Returns 0 (h filled), -EAGAIN (no blank line yet and
 * len < LR_EGRESS_HEAD_MAX), LR_ETOOBIG (head or header count over the
 * caps) or LR_EPARSE (malformed: bad request line, method, target, version,
 * header syntax, obs-fold, CR or NUL in the wrong place, a scheme other
 * than http, a port out of range).
 */
int lr_egress_head_parse(const char *buf, size_t len, struct lr_egress_head *h);
/*
 * The head to send upstream for a forwarded (non-CONNECT) request:
 * origin-form request line, the client's headers minus hop-by-hop and
 * proxy ones (Connection, Proxy-*, Keep-Alive, TE, Trailer, Upgrade, Host),
 * then "Host: <authority>" and "Connection: close". Appends to out.
 */
int lr_egress_head_forward(const char *buf, const struct lr_egress_head *h, struct lr_buf *out);

/* A DNS query, parsed strictly: one question, no compression, at most one OPT record. */
struct lr_egress_dns_query {
	uint16_t id;
	int rd;                 /* recursion desired, echoed */
	uint16_t qtype, qclass;
	char name[256];         /* lower-case, dotted, no trailing dot */
	size_t qend;            /* offset just past the question */
};
/* 0, LR_EPARSE (malformed: answer with FORMERR when the header is there) or LR_ETOOBIG. */
int lr_egress_dns_parse(const uint8_t *p, size_t n, struct lr_egress_dns_query *q);
/*
 * Writes a reply to q (query: its bytes) into out (cap bytes, at least
 * 512): rcode (0 NOERROR, 1 FORMERR, 3 NXDOMAIN, 5 REFUSED), with one A
 * record 127.0.0.1 when answer_a. Returns its length or LR_ETOOBIG.
 */
int lr_egress_dns_reply(const uint8_t *query, const struct lr_egress_dns_query *q, int rcode,
			int answer_a, uint8_t *out, size_t cap);

#endif
