/*
 * egress.c — the egress proxy of a sandboxed execution: HTTP CONNECT and
 * absolute-URI forwarding plus a DNS stub, served on the loop from the
 * listeners the helper made inside the target's network namespace.
 *
 * A connection goes HEAD (reading the request head, with a deadline) ->
 * RESOLVE (getaddrinfo on the worker pool; skipped for a literal address)
 * -> CONNECT (to each checked address in turn, each with a deadline) ->
 * TUNNEL (bytes both ways; a CONNECT gets "200 Connection established"
 * first, a forwarded request its rewritten head), or REPLY (an error
 * response, then close). The bytes the client sent after its head wait in
 * its input buffer until the tunnel opens.
 *
 * The tunnel keeps at most TUNNEL_MAX bytes queued towards either side:
 * past that it stops reading from the other until the queue halves. End of
 * file on one side is passed on as a half-close (shutdown SHUT_WR) once
 * what it sent has been written; the connection ends when both directions
 * are done, or at once on an error.
 *
 * The name lookup runs on a pool thread and cannot be interrupted; a
 * connection closed meanwhile detaches its job, which then only frees
 * itself when it comes back.
 *
 * A forwarded request gets "Connection: close", so a connection carries one
 * request; whatever the client sends after the head (a body, or a second
 * pipelined request) is relayed as is to the upstream already judged, so
 * it can never reach another target.
 */
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TUNNEL_MAX (256 * 1024)
#define MAX_ADDRS 8
#define DNS_MAX 4096

/* ---- addresses ---- */

static const char *v4_class(uint32_t a, int *hard)
{
	unsigned b0 = a >> 24, b1 = (a >> 16) & 0xff;
	*hard = 1;
	if (a == 0xa9fea9feu) /* 169.254.169.254 */
		return "metadata";
	if (b0 == 0)
		return "unspecified";
	if (b0 >= 224 && b0 < 240)
		return "multicast";
	if (b0 >= 240) /* 240/4 and the broadcast address */
		return "reserved";
	*hard = 0;
	if (b0 == 127)
		return "loopback";
	if (b0 == 10 || (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168))
		return "private";
	if (b0 == 100 && (b1 & 0xc0) == 64) /* CGNAT 100.64/10 */
		return "private";
	if ((a & 0xffffff00u) == 0xc0000000u || (a & 0xfffe0000u) == 0xc6120000u)
		return "private"; /* 192.0.0/24, 198.18/15 */
	if (b0 == 169 && b1 == 254)
		return "link-local";
	return NULL;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

const char *lr_egress_classify(const struct sockaddr *sa, int *hard)
{
	int dummy;
	if (!hard)
		hard = &dummy;
	*hard = 1;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		return v4_class(ntohl(s4->sin_addr.s_addr), hard);
	}
	if (sa->sa_family != AF_INET6)
		return "reserved";
	const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	static const unsigned char zero[16], mapped[12] = { [10] = 0xff, [11] = 0xff },
					     nat64[12] = { 0, 0x64, 0xff, 0x9b },
					     ec2[16] = { 0xfd, 0, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54 };
	if (memcmp(b, zero, 16) == 0)
		return "unspecified";
	if (memcmp(b, zero, 15) == 0 && b[15] == 1) {
		*hard = 0;
		return "loopback";
	}
	if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0)
		return v4_class(be32(b + 12), hard);
	if (b[0] == 0x20 && b[1] == 0x02) /* 6to4 carries an IPv4 address */
		return v4_class(be32(b + 2), hard);
	if (memcmp(b, zero, 12) == 0) /* deprecated IPv4-compatible */
		return "reserved";
	if (memcmp(b, ec2, 16) == 0)
		return "metadata";
	if (b[0] == 0xff)
		return "multicast";
	if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) /* Teredo */
		return "reserved";
	if (b[0] == 0x01 && memcmp(b + 1, zero, 7) == 0) /* 100::/64 discard */
		return "reserved";
	*hard = 0;
	if ((b[0] & 0xfe) == 0xfc) /* ULA fc00::/7 */
		return "private";
	if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
		return "private"; /* 64:ff9b:1::/48 local-use NAT64 */
	if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
		return "link-local";
	if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) /* site-local, deprecated */
		return "private";
	return NULL;
}

static void ip_text(const struct sockaddr *sa, char *out, size_t n)
{
	const void *a = sa->sa_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, a, out, (socklen_t)n))
		snprintf(out, n, "?");
}

static void addr_text(const struct sockaddr *sa, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
		snprintf(out, n, "%s:%u", ip, ntohs(s->sin_port));
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
		snprintf(out, n, "[%s]:%u", ip, ntohs(s->sin6_port));
	}
}

/* ---- hosts, ports, rules ---- */

static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/*
 * A host as a client or a rule spells it: a DNS name (letters, digits, '-'
 * and '_' in labels of 1..63, at most 253 bytes; a trailing dot dropped;
 * the last label not all digits, so "2130706433" or "0x7f.1" never reach
 * the resolver as hidden IPv4 forms), a dotted-quad IPv4 address or a
 * bracketed IPv6 address without a zone. out gets the canonical form
 * (lower-case; inet_ntop's for addresses). Returns 1 for a name, 4 or 6
 * for a literal, 0 when malformed.
 */
static int parse_host(const char *s, size_t n, char out[256])
{
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		char tmp[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;
		if (n - 2 >= sizeof tmp)
			return 0;
		memcpy(tmp, s + 1, n - 2);
		tmp[n - 2] = '\0';
		if (inet_pton(AF_INET6, tmp, &a6) != 1 || !inet_ntop(AF_INET6, &a6, out, 256))
			return 0;
		return 6;
	}
	if (n && s[n - 1] == '.')
		n--;
	if (n == 0 || n > 253)
		return 0;
	size_t label = 0;
	int all_digits = 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '.') {
			if (label == 0)
				return 0;
			label = 0;
			all_digits = 1;
			out[i] = '.';
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return 0;
		if (++label > 63)
			return 0;
		if (c < '0' || c > '9')
			all_digits = 0;
		out[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	out[n] = '\0';
	if (label == 0)
		return 0;
	if (all_digits) {
		struct in_addr a4;
		return inet_pton(AF_INET, out, &a4) == 1 ? 4 : 0;
	}
	return 1;
}

/* 1..65535 in decimal, at most 5 digits; *any for "*" when allowed. */
static int parse_port(const char *s, size_t n, uint16_t *port)
{
	if (n == 0 || n > 5)
		return -1;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

/* "host:port" with the host bracketed when IPv6; the port split at the last ':'. */
static int parse_authority(const char *s, size_t n, char host[256], uint16_t *port, int *kind)
{
	const char *colon = NULL;
	for (size_t i = n; i-- > 0;) {
		if (s[i] == ':') {
			colon = s + i;
			break;
		}
		if (s[i] == ']')
			break;
	}
	if (!colon)
		return -1;
	size_t hn = (size_t)(colon - s);
	if (parse_port(colon + 1, n - hn - 1, port) < 0)
		return -1;
	*kind = parse_host(s, hn, host);
	return *kind ? 0 : -1;
}

struct rule {
	char host[256]; /* canonical; for a wildcard the suffix with its leading dot */
	int wildcard;
	int any_port;
	uint16_t port;
	int allow_private;
};

static int rule_parse(const char *pattern, struct rule *r, struct lr_err *err)
{
	memset(r, 0, sizeof *r);
	size_t n = strlen(pattern);
	const char *colon = strrchr(pattern, ':');
	const char *why = NULL;
	const char *rb = strchr(pattern, ']');
	if (!colon || (strchr(pattern, '[') && (!rb || colon < rb))) {
		why = "expected host:port";
		goto bad;
	}
	size_t hn = (size_t)(colon - pattern);
	if (strcmp(colon + 1, "*") == 0)
		r->any_port = 1;
	else if (parse_port(colon + 1, n - hn - 1, &r->port) < 0) {
		why = "port must be 1..65535 or '*'";
		goto bad;
	}
	const char *h = pattern;
	if (hn > 2 && h[0] == '*' && h[1] == '.') {
		r->wildcard = 1;
		h += 2;
		hn -= 2;
	}
	int kind = parse_host(h, hn, r->host + r->wildcard);
	if (!kind || (r->wildcard && kind != 1)) {
		why = "bad host";
		goto bad;
	}
	if (r->wildcard)
		r->host[0] = '.';
	return 0;
bad:
	if (err)
		lr_err_set(err, "egress: bad rule '%s': %s", pattern, why);
	return -EINVAL;
}

int lr_egress_rule_check(const char *pattern, struct lr_err *err)
{
	struct rule r;
	return rule_parse(pattern, &r, err);
}

/* port 0: any port of the rule (the DNS stub's question). */
static const struct rule *rule_match(const struct rule *rules, size_t n, const char *host,
				     uint16_t port)
{
	size_t hl = strlen(host);
	for (size_t i = 0; i < n; i++) {
		const struct rule *r = &rules[i];
		if (port && !r->any_port && r->port != port)
			continue;
		if (r->wildcard) {
			size_t sl = strlen(r->host);
			if (hl > sl && strcmp(host + hl - sl, r->host) == 0)
				return r;
		} else if (strcmp(host, r->host) == 0) {
			return r;
		}
	}
	return NULL;
}

/* ---- the request head ---- */

static int ci_eq(const char *a, size_t an, const char *b)
{
	size_t bn = strlen(b);
	if (an != bn)
		return 0;
	for (size_t i = 0; i < an; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
		if (x >= 'A' && x <= 'Z')
			x += 32;
		if (y >= 'A' && y <= 'Z')
			y += 32;
		if (x != y)
			return 0;
	}
	return 1;
}

/* The next line of buf[*pos..len): its start and length without CRLF/LF. */
static int next_line(const char *buf, size_t len, size_t *pos, size_t *start, size_t *n)
{
	size_t i = *pos;
	for (; i < len; i++) {
		if (buf[i] == '\n')
			break;
		if (buf[i] == '\0')
			return LR_EPARSE;
		if (buf[i] == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return LR_EPARSE;
	}
	if (i >= len)
		return -EAGAIN;
	*start = *pos;
	*n = i - *pos;
	if (*n && buf[i - 1] == '\r')
		(*n)--;
	*pos = i + 1;
	return 0;
}

static int parse_request_line(const char *buf, size_t s, size_t n, struct lr_egress_head *h)
{
	const char *l = buf + s;
	const char *sp1 = memchr(l, ' ', n);
	if (!sp1 || sp1 == l || (size_t)(sp1 - l) >= sizeof h->method)
		return LR_EPARSE;
	size_t ml = (size_t)(sp1 - l);
	for (size_t i = 0; i < ml; i++)
		if (!is_tchar((unsigned char)l[i]))
			return LR_EPARSE;
	memcpy(h->method, l, ml);
	h->method[ml] = '\0';
	const char *t = sp1 + 1, *end = l + n;
	const char *sp2 = memchr(t, ' ', (size_t)(end - t));
	if (!sp2 || sp2 == t)
		return LR_EPARSE;
	size_t vl = (size_t)(end - sp2 - 1);
	if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
		return LR_EPARSE;
	h->minor = sp2[8] - '0';
	size_t tl = (size_t)(sp2 - t);
	for (size_t i = 0; i < tl; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return LR_EPARSE;
	int kind;
	if (strcmp(h->method, "CONNECT") == 0) {
		h->connect = 1;
		return parse_authority(t, tl, h->host, &h->port, &kind) < 0 ? LR_EPARSE : 0;
	}
	/* absolute-form, http only: the authority ends at '/', '?' or the end */
	if (tl < 7 || !ci_eq(t, 7, "http://"))
		return LR_EPARSE;
	const char *a = t + 7, *p = a;
	while (p < sp2 && *p != '/' && *p != '?')
		p++;
	size_t an = (size_t)(p - a);
	if (memchr(a, '@', an) || memchr(t, '#', tl))
		return LR_EPARSE; /* userinfo, fragment */
	if (an == 0)
		return LR_EPARSE;
	const char *colon = NULL;
	for (size_t i = an; i-- > 0;) {
		if (a[i] == ':') {
			colon = a + i;
			break;
		}
		if (a[i] == ']')
			break;
	}
	if (colon) {
		if (parse_authority(a, an, h->host, &h->port, &kind) < 0)
			return LR_EPARSE;
	} else {
		h->port = 80;
		if (!parse_host(a, an, h->host))
			return LR_EPARSE;
	}
	h->path = (uint16_t)(p - buf);
	h->pathlen = (uint16_t)(sp2 - p);
	return 0;
}

int lr_egress_head_parse(const char *buf, size_t len, struct lr_egress_head *h)
{
	memset(h, 0, sizeof *h);
	int big = len >= LR_EGRESS_HEAD_MAX;
	if (big)
		len = LR_EGRESS_HEAD_MAX;
	size_t pos = 0, s, n;
	int rc = next_line(buf, len, &pos, &s, &n);
	if (rc == -EAGAIN)
		return big ? LR_ETOOBIG : -EAGAIN;
	if (rc < 0)
		return rc;
	if ((rc = parse_request_line(buf, s, n, h)) < 0)
		return rc;
	for (;;) {
		rc = next_line(buf, len, &pos, &s, &n);
		if (rc == -EAGAIN)
			return big ? LR_ETOOBIG : -EAGAIN;
		if (rc < 0)
			return rc;
		if (n == 0)
			break;
		const char *l = buf + s;
		if (h->nhdr == LR_EGRESS_HEADERS_MAX)
			return LR_ETOOBIG;
		size_t nl = 0;
		while (nl < n && is_tchar((unsigned char)l[nl]))
			nl++;
		if (nl == 0 || nl == n || l[nl] != ':')
			return LR_EPARSE; /* also obs-fold: a line starting with SP or HT */
		size_t v = nl + 1;
		while (v < n && (l[v] == ' ' || l[v] == '\t'))
			v++;
		size_t ve = n;
		while (ve > v && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
			ve--;
		for (size_t i = v; i < ve; i++) {
			unsigned char c = (unsigned char)l[i];
			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return LR_EPARSE;
		}
		h->hdr[h->nhdr].name = (uint16_t)s;
		h->hdr[h->nhdr].nlen = (uint16_t)nl;
		h->hdr[h->nhdr].value = (uint16_t)(s + v);
		h->hdr[h->nhdr].vlen = (uint16_t)(ve - v);
		h->nhdr++;
	}
	h->len = pos;
	return 0;
}

/* Is header name (n bytes) listed in any Connection header's value? */
static int named_by_connection(const char *buf, const struct lr_egress_head *h, const char *name,
			       size_t n)
{
	for (int i = 0; i < h->nhdr; i++) {
		if (!ci_eq(buf + h->hdr[i].name, h->hdr[i].nlen, "connection"))
			continue;
		const char *v = buf + h->hdr[i].value, *e = v + h->hdr[i].vlen;
		while (v < e) {
			while (v < e && (*v == ',' || *v == ' ' || *v == '\t'))
				v++;
			const char *t = v;
			while (v < e && *v != ',' && *v != ' ' && *v != '\t')
				v++;
			if (v > t && (size_t)(v - t) == n) {
				char tmp[64];
				if (n < sizeof tmp) {
					memcpy(tmp, t, n);
					tmp[n] = '\0';
					if (ci_eq(name, n, tmp))
						return 1;
				}
			}
		}
	}
	return 0;
}

int lr_egress_head_forward(const char *buf, const struct lr_egress_head *h, struct lr_buf *out)
{
	static const char *const drop[] = { "connection", "proxy-connection", "keep-alive",
					    "proxy-authorization", "proxy-authenticate", "te",
					    "trailer", "upgrade", "host", NULL };
	int rc = lr_buf_printf(out, "%s %s%.*s HTTP/1.%d\r\n", h->method,
			       h->pathlen && buf[h->path] == '/' ? "" : "/", (int)h->pathlen,
			       buf + h->path, h->minor);
	for (int i = 0; rc == 0 && i < h->nhdr; i++) {
		const char *name = buf + h->hdr[i].name;
		size_t nl = h->hdr[i].nlen;
		int skip = 0;
		for (int d = 0; drop[d] && !skip; d++)
			skip = ci_eq(name, nl, drop[d]);
		/* framing stays whatever Connection says: the body is relayed as is */
		if (!skip && !ci_eq(name, nl, "content-length") &&
		    !ci_eq(name, nl, "transfer-encoding"))
			skip = named_by_connection(buf, h, name, nl);
		if (!skip)
			rc = lr_buf_printf(out, "%.*s: %.*s\r\n", (int)nl, name,
					   (int)h->hdr[i].vlen, buf + h->hdr[i].value);
	}
	if (rc == 0) {
		int v6 = strchr(h->host, ':') != NULL;
		rc = lr_buf_printf(out, "Host: %s%s%s", v6 ? "[" : "", h->host, v6 ? "]" : "");
		if (rc == 0 && h->port != 80)
			rc = lr_buf_printf(out, ":%u", h->port);
		if (rc == 0)
			rc = lr_buf_addstr(out, "\r\nConnection: close\r\n\r\n");
	}
	return rc;
}

/* ---- DNS ---- */

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

int lr_egress_dns_parse(const uint8_t *p, size_t n, struct lr_egress_dns_query *q)
{
	memset(q, 0, sizeof *q);
	if (n < 12)
		return LR_EPARSE;
	q->id = be16(p);
	q->rd = p[2] & 1;
	if (n > DNS_MAX)
		return LR_ETOOBIG;
	if (p[2] & 0x80 || (p[2] >> 3 & 0xf) != 0) /* a response, or opcode not QUERY */
		return LR_EPARSE;
	if (be16(p + 4) != 1 || be16(p + 6) != 0 || be16(p + 8) != 0 || be16(p + 10) > 1)
		return LR_EPARSE;
	size_t i = 12, o = 0, wire = 1;
	for (;;) {
		if (i >= n)
			return LR_EPARSE;
		size_t l = p[i++];
		if (l == 0)
			break;
		wire += l + 1;
		if (l > 63 || i + l > n || wire > 255) /* no compression; 255 bytes on the wire */
			return LR_EPARSE;
		if (o)
			q->name[o++] = '.';
		for (size_t k = 0; k < l; k++) {
			uint8_t c = p[i + k];
			if (c >= 'A' && c <= 'Z')
				c += 32;
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
				return LR_EPARSE;
			q->name[o++] = (char)c;
		}
		i += l;
	}
	q->name[o] = '\0';
	if (i + 4 > n)
		return LR_EPARSE;
	q->qtype = be16(p + i);
	q->qclass = be16(p + i + 2);
	i += 4;
	size_t qend = i;
	if (be16(p + 10) == 1) { /* one OPT pseudo-record: root name, type 41 */
		if (i + 11 > n || p[i] != 0 || be16(p + i + 1) != 41)
			return LR_EPARSE;
		size_t rdlen = be16(p + i + 9);
		i += 11 + rdlen;
		if (i > n)
			return LR_EPARSE;
	}
	if (i != n)
		return LR_EPARSE;
	q->qend = qend;
	return 0;
}

int lr_egress_dns_reply(const uint8_t *query, const struct lr_egress_dns_query *q, int rcode,
			int answer_a, uint8_t *out, size_t cap)
{
	size_t qn = q->qend > 12 ? q->qend - 12 : 0;
	size_t need = 12 + qn + (answer_a && qn ? 16 : 0);
	if (need > cap)
		return LR_ETOOBIG;
	memset(out, 0, 12);
	out[0] = (uint8_t)(q->id >> 8);
	out[1] = (uint8_t)q->id;
	out[2] = (uint8_t)(0x80 | 0x04 | (q->rd ? 1 : 0)); /* QR, AA, RD echoed */
	out[3] = (uint8_t)(rcode & 0xf);
	out[5] = qn ? 1 : 0;
	if (qn)
		memcpy(out + 12, query + 12, qn);
	size_t len = 12 + qn;
	if (answer_a && qn) {
		static const uint8_t rr[16] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 1 };
		memcpy(out + len, rr, sizeof rr);
		out[7] = 1;
		len += sizeof rr;
	}
	return (int)len;
}

/* ---- the proxy ---- */

enum { C_HEAD, C_RESOLVE, C_CONNECT, C_TUNNEL, C_REPLY };

struct resolve;

struct side {
	struct bufferevent *bev;
	int eof;    /* it sent end of file */
	int shut;   /* we passed an end of file on to it (SHUT_WR) */
	int paused; /* reading stopped: the other side's queue is full */
};

struct conn {
	struct lr_egress *eg;
	struct conn *prev, *next;
	int state;
	struct side s[2]; /* 0: the client, 1: upstream */
	struct resolve *job;
	struct lr_egress_head head;
	char target[300];
	int allow_private;
	struct sockaddr_storage addrs[MAX_ADDRS];
	socklen_t lens[MAX_ADDRS];
	int naddr, next_addr;
	char last_err[160];
	struct lr_buf fwd; /* the rewritten head of a forwarded request */
};

struct resolve {
	struct lr_work w;
	struct conn *conn; /* NULL once the connection went away */
	char host[256];
	uint16_t port;
	int rc;
	struct sockaddr_storage addrs[MAX_ADDRS];
	socklen_t lens[MAX_ADDRS];
	int naddr;
	char bad[400]; /* the first address refused, with why */
	int bad_hard;
};

struct lr_egress {
	struct lr_loop *loop;
	struct event_base *base;
	struct lr_egress_config cfg;
	struct rule *rules;
	size_t nrules;
	int tcp_fd, udp_fd;
	struct lr_watch tcp_w, udp_w;
	int tcp_on, udp_on;
	struct conn *conns;
	int nconns;
};

const char *lr_egress_verdict_name(enum lr_egress_verdict v)
{
	return v == LR_EGRESS_ALLOW ? "allow" : v == LR_EGRESS_DENY ? "deny" : "fail";
}

static void emit(struct lr_egress *e, const char *kind, const char *target,
		 enum lr_egress_verdict v, const char *reason)
{
	if (!e->cfg.log)
		return;
	struct lr_egress_event ev = { .exec_id = e->cfg.exec_id, .kind = kind,
				      .target = target && *target ? target : "-",
				      .verdict = v, .reason = reason };
	e->cfg.log(e->cfg.arg, &ev);
}

static int allowed(struct lr_egress *e, const char *host, uint16_t port, int *allow_private)
{
	*allow_private = 0;
	if (e->cfg.policy)
		return e->cfg.policy(e->cfg.arg, host, port, allow_private) == 1;
	const struct rule *r = rule_match(e->rules, e->nrules, host, port);
	if (r)
		*allow_private = r->allow_private;
	return r != NULL;
}

static void conn_free(struct conn *c)
{
	struct lr_egress *e = c->eg;
	if (c->prev)
		c->prev->next = c->next;
	else
		e->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	e->nconns--;
	if (c->job)
		c->job->conn = NULL;
	for (int i = 0; i < 2; i++)
		if (c->s[i].bev)
			bufferevent_free(c->s[i].bev);
	lr_buf_release(&c->fwd);
	free(c);
}

static const char *kind_of(const struct conn *c)
{
	return c->head.connect ? "connect" : "http";
}

/* An error response to the client, then close once it is written. */
static void reply(struct conn *c, int status, const char *text, const char *body)
{
	if (c->s[1].bev) {
		bufferevent_free(c->s[1].bev);
		c->s[1].bev = NULL;
	}
	struct bufferevent *cl = c->s[0].bev;
	bufferevent_disable(cl, EV_READ);
	bufferevent_set_timeouts(cl, NULL, NULL);
	struct evbuffer *out = bufferevent_get_output(cl);
	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
			    status, text, strlen(body) + 1, body);
	bufferevent_setwatermark(cl, EV_WRITE, 0, 0);
	bufferevent_enable(cl, EV_WRITE);
	c->state = C_REPLY;
}

static void deny(struct conn *c, const char *reason)
{
	char body[800];
	snprintf(body, sizeof body, "egress: %s to '%s' denied: %s",
		 c->head.connect ? "CONNECT" : "request", c->target, reason);
	emit(c->eg, kind_of(c), c->target, LR_EGRESS_DENY, reason);
	reply(c, 403, "Forbidden", body);
}

static void fail(struct conn *c, const char *reason)
{
	char body[800];
	snprintf(body, sizeof body, "egress: %s to '%s' failed: %s",
		 c->head.connect ? "CONNECT" : "request", c->target, reason);
	emit(c->eg, kind_of(c), c->target, LR_EGRESS_FAIL, reason);
	reply(c, 502, "Bad Gateway", body);
}

static void try_connect(struct conn *c);
static void up_read(struct bufferevent *b, void *arg);
static void up_write(struct bufferevent *b, void *arg);
static void up_event(struct bufferevent *b, short what, void *arg);

/* Once more than one address failed, the last error is the one reported. */
static void try_connect(struct conn *c)
{
	while (c->next_addr < c->naddr) {
		int i = c->next_addr++;
		struct sockaddr *sa = (struct sockaddr *)&c->addrs[i];
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			snprintf(c->last_err, sizeof c->last_err, "socket: %s", strerror(errno));
			continue;
		}
		struct bufferevent *b =
			bufferevent_socket_new(c->eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
		if (!b) {
			close(fd);
			snprintf(c->last_err, sizeof c->last_err, "out of memory");
			continue;
		}
		bufferevent_setcb(b, up_read, up_write, up_event, c);
		double t = c->eg->cfg.connect_timeout;
		struct timeval tv = { (time_t)t, (suseconds_t)((t - (double)(time_t)t) * 1e6) };
		bufferevent_set_timeouts(b, NULL, &tv);
		c->s[1].bev = b;
		c->state = C_CONNECT;
		if (bufferevent_socket_connect(b, sa, c->lens[i]) == 0)
			return;
		char at[80];
		addr_text(sa, at, sizeof at);
		snprintf(c->last_err, sizeof c->last_err, "cannot connect to %s: %s", at,
			 strerror(errno));
		bufferevent_free(b);
		c->s[1].bev = NULL;
	}
	fail(c, c->last_err[0] ? c->last_err : "no address");
}

/* Refuses the addresses unless all may be reached; then connects. */
static void check_and_connect(struct conn *c, const char *bad, int hard)
{
	if (bad && (hard || !c->allow_private)) {
		deny(c, bad);
		return;
	}
	try_connect(c);
}

static void resolve_work(struct lr_work *w)
{
	struct resolve *r = (struct resolve *)w;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(r->host, NULL, &hints, &res);
	if (rc != 0) {
		snprintf(r->bad, sizeof r->bad, "cannot resolve '%s': %s", r->host,
			 gai_strerror(rc));
		r->rc = -1;
		return;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof r->addrs[0])
			continue;
		int hard;
		const char *cls = lr_egress_classify(ai->ai_addr, &hard);
		if (cls && !r->bad[0]) {
			char at[INET6_ADDRSTRLEN];
			ip_text(ai->ai_addr, at, sizeof at);
			snprintf(r->bad, sizeof r->bad, "'%s' resolves to %s address %s", r->host,
				 cls, at);
			r->bad_hard = hard;
		} else if (cls && hard) {
			r->bad_hard = 1;
		}
		if (r->naddr < MAX_ADDRS) {
			memcpy(&r->addrs[r->naddr], ai->ai_addr, ai->ai_addrlen);
			r->lens[r->naddr] = ai->ai_addrlen;
			r->naddr++;
		}
	}
	freeaddrinfo(res);
	if (!r->naddr) {
		snprintf(r->bad, sizeof r->bad, "'%s' has no IPv4 or IPv6 address", r->host);
		r->rc = -1;
	}
}

static void resolve_done(struct lr_work *w)
{
	struct resolve *r = (struct resolve *)w;
	struct conn *c = r->conn;
	if (!c) {
		free(r);
		return;
	}
	c->job = NULL;
	if (r->rc < 0) {
		fail(c, r->bad);
		free(r);
		return;
	}
	for (int i = 0; i < r->naddr; i++) {
		c->addrs[i] = r->addrs[i];
		c->lens[i] = r->lens[i];
		struct sockaddr *sa = (struct sockaddr *)&c->addrs[i];
		if (sa->sa_family == AF_INET)
			((struct sockaddr_in *)sa)->sin_port = htons(r->port);
		else
			((struct sockaddr_in6 *)sa)->sin6_port = htons(r->port);
	}
	c->naddr = r->naddr;
	int hard = r->bad_hard;
	char bad[400];
	snprintf(bad, sizeof bad, "%s", r->bad);
	free(r);
	check_and_connect(c, bad[0] ? bad : NULL, hard);
}

/* The head is in (and gone from the input): judge the target, then resolve or connect. */
static void start_target(struct conn *c)
{
	struct lr_egress_head *h = &c->head;
	if (!allowed(c->eg, h->host, h->port, &c->allow_private)) {
		deny(c, "not on the allow-list");
		return;
	}
	/* a literal address needs no lookup */
	struct sockaddr_in s4;
	struct sockaddr_in6 s6;
	memset(&s4, 0, sizeof s4);
	memset(&s6, 0, sizeof s6);
	struct sockaddr *sa = NULL;
	if (inet_pton(AF_INET, h->host, &s4.sin_addr) == 1) {
		s4.sin_family = AF_INET;
		s4.sin_port = htons(h->port);
		sa = (struct sockaddr *)&s4;
		c->lens[0] = sizeof s4;
	} else if (inet_pton(AF_INET6, h->host, &s6.sin6_addr) == 1) {
		s6.sin6_family = AF_INET6;
		s6.sin6_port = htons(h->port);
		sa = (struct sockaddr *)&s6;
		c->lens[0] = sizeof s6;
	}
	if (sa) {
		memcpy(&c->addrs[0], sa, c->lens[0]);
		c->naddr = 1;
		int hard;
		const char *cls = lr_egress_classify(sa, &hard);
		char bad[400];
		if (cls)
			snprintf(bad, sizeof bad, "%s is a %s address", h->host, cls);
		check_and_connect(c, cls ? bad : NULL, hard);
		return;
	}
	struct resolve *r = calloc(1, sizeof *r);
	if (!r) {
		fail(c, "out of memory");
		return;
	}
	r->w.work = resolve_work;
	r->w.done = resolve_done;
	r->conn = c;
	snprintf(r->host, sizeof r->host, "%s", h->host);
	r->port = h->port;
	if (lr_pool_submit(c->eg->loop, &r->w) < 0) {
		free(r);
		fail(c, "cannot start the name lookup");
		return;
	}
	c->job = r;
	c->state = C_RESOLVE;
}

/* ---- the tunnel ---- */

static int finished(const struct conn *c)
{
	return c->s[0].shut && c->s[1].shut;
}

/* Passes an end of file from the other side on to side i once its queue is empty. */
static void maybe_shut(struct conn *c, int i)
{
	struct side *b = &c->s[i];
	if (!c->s[!i].eof || b->shut || evbuffer_get_length(bufferevent_get_output(b->bev)))
		return;
	b->shut = 1;
	(void)shutdown(bufferevent_getfd(b->bev), SHUT_WR);
}

static void pump(struct conn *c, int i)
{
	struct side *a = &c->s[i], *b = &c->s[!i];
	struct evbuffer *out = bufferevent_get_output(b->bev);
	evbuffer_add_buffer(out, bufferevent_get_input(a->bev));
	if (!a->paused && evbuffer_get_length(out) >= TUNNEL_MAX) {
		a->paused = 1;
		bufferevent_disable(a->bev, EV_READ);
		bufferevent_setwatermark(b->bev, EV_WRITE, TUNNEL_MAX / 2, 0);
	}
}

/* Side i's queue fell to its low mark. */
static void drained(struct conn *c, int i)
{
	struct side *a = &c->s[!i], *b = &c->s[i];
	if (a->paused) {
		a->paused = 0;
		bufferevent_setwatermark(b->bev, EV_WRITE, 0, 0);
		if (!a->eof)
			bufferevent_enable(a->bev, EV_READ);
	}
	maybe_shut(c, i);
	if (finished(c))
		conn_free(c);
}

/* Side i sent end of file, failed or timed out; may free c. */
static void side_event(struct conn *c, int i, short what)
{
	if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		conn_free(c);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		c->s[i].eof = 1;
		pump(c, i);
		maybe_shut(c, !i);
		if (finished(c))
			conn_free(c);
	}
}

static void open_tunnel(struct conn *c)
{
	struct bufferevent *cl = c->s[0].bev, *up = c->s[1].bev;
	bufferevent_set_timeouts(up, NULL, NULL);
	char at[80];
	addr_text((struct sockaddr *)&c->addrs[c->next_addr - 1], at, sizeof at);
	char why[120];
	snprintf(why, sizeof why, "connected to %s", at);
	emit(c->eg, kind_of(c), c->target, LR_EGRESS_ALLOW, why);
	if (c->head.connect)
		evbuffer_add_printf(bufferevent_get_output(cl),
				    "HTTP/1.1 200 Connection established\r\n\r\n");
	else
		bufferevent_write(up, c->fwd.data, c->fwd.len);
	lr_buf_release(&c->fwd);
	c->state = C_TUNNEL;
	bufferevent_setwatermark(cl, EV_READ, 0, 0);
	bufferevent_enable(cl, EV_READ | EV_WRITE);
	bufferevent_enable(up, EV_READ | EV_WRITE);
	pump(c, 0); /* what the client sent after its head */
}

static void up_read(struct bufferevent *b, void *arg)
{
	(void)b;
	struct conn *c = arg;
	if (c->state == C_TUNNEL)
		pump(c, 1);
}

static void up_write(struct bufferevent *b, void *arg)
{
	(void)b;
	struct conn *c = arg;
	if (c->state == C_TUNNEL)
		drained(c, 1);
}

static void up_event(struct bufferevent *b, short what, void *arg)
{
	struct conn *c = arg;
	if (c->state == C_CONNECT) {
		if (what & BEV_EVENT_CONNECTED) {
			open_tunnel(c);
			return;
		}
		char at[80];
		addr_text((struct sockaddr *)&c->addrs[c->next_addr - 1], at, sizeof at);
		int err = evutil_socket_geterror(bufferevent_getfd(b));
		snprintf(c->last_err, sizeof c->last_err, "cannot connect to %s: %s", at,
			 (what & BEV_EVENT_TIMEOUT) ? "timed out" : strerror(err ? err : ECONNREFUSED));
		bufferevent_free(b);
		c->s[1].bev = NULL;
		try_connect(c);
		return;
	}
	if (c->state == C_TUNNEL)
		side_event(c, 1, what);
}

static void cl_read(struct bufferevent *b, void *arg)
{
	struct conn *c = arg;
	if (c->state == C_TUNNEL) {
		pump(c, 0);
		return;
	}
	if (c->state != C_HEAD)
		return;
	struct evbuffer *in = bufferevent_get_input(b);
	size_t len = evbuffer_get_length(in);
	if (len > LR_EGRESS_HEAD_MAX)
		len = LR_EGRESS_HEAD_MAX;
	const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
	int rc = lr_egress_head_parse(buf, len, &c->head);
	if (rc == -EAGAIN)
		return;
	bufferevent_set_timeouts(b, NULL, NULL);
	if (rc == LR_ETOOBIG) {
		emit(c->eg, "http", "-", LR_EGRESS_DENY, "request head too large");
		reply(c, 431, "Request Header Fields Too Large", "egress: request head too large");
		return;
	}
	if (rc < 0) {
		emit(c->eg, "http", "-", LR_EGRESS_DENY, "malformed request");
		reply(c, 400, "Bad Request",
		      "egress: malformed request (CONNECT host:port or an absolute http:// URI)");
		return;
	}
	bufferevent_disable(b, EV_READ);
	struct lr_egress_head *h = &c->head;
	int v6 = strchr(h->host, ':') != NULL;
	snprintf(c->target, sizeof c->target, "%s%s%s:%u", v6 ? "[" : "", h->host, v6 ? "]" : "",
		 h->port);
	if (!h->connect) {
		lr_buf_init(&c->fwd, LR_EGRESS_HEAD_MAX + 512);
		if (lr_egress_head_forward(buf, h, &c->fwd) < 0) {
			deny(c, "request head too large");
			return;
		}
	}
	/* the offsets in c->head die here; what follows the head waits for the tunnel */
	evbuffer_drain(in, h->len);
	start_target(c);
}

static void cl_write(struct bufferevent *b, void *arg)
{
	struct conn *c = arg;
	if (c->state == C_TUNNEL)
		drained(c, 0);
	else if (c->state == C_REPLY && evbuffer_get_length(bufferevent_get_output(b)) == 0)
		conn_free(c);
}

static void cl_event(struct bufferevent *b, short what, void *arg)
{
	(void)b;
	struct conn *c = arg;
	if (c->state == C_TUNNEL)
		side_event(c, 0, what);
	else
		conn_free(c); /* gone, failed or too slow before the tunnel opened */
}

static void on_accept(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_egress *e = arg;
	for (int k = 0; k < 16; k++) {
		int fd = accept4(e->tcp_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct conn *c = e->nconns < e->cfg.max_conns ? calloc(1, sizeof *c) : NULL;
		struct bufferevent *b =
			c ? bufferevent_socket_new(e->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
		if (!b) {
			free(c);
			close(fd);
			continue;
		}
		c->eg = e;
		c->s[0].bev = b;
		c->state = C_HEAD;
		c->next = e->conns;
		if (e->conns)
			e->conns->prev = c;
		e->conns = c;
		e->nconns++;
		double t = e->cfg.head_timeout;
		struct timeval tv = { (time_t)t, (suseconds_t)((t - (double)(time_t)t) * 1e6) };
		bufferevent_setcb(b, cl_read, cl_write, cl_event, c);
		bufferevent_setwatermark(b, EV_READ, 0, LR_EGRESS_HEAD_MAX);
		bufferevent_set_timeouts(b, &tv, NULL);
		bufferevent_enable(b, EV_READ);
	}
}

static void on_dns(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_egress *e = arg;
	uint8_t in[DNS_MAX + 1], out[DNS_MAX + 64];
	for (int k = 0; k < 16; k++) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(e->udp_fd, in, sizeof in, MSG_TRUNC, (struct sockaddr *)&from,
				     &fl);
		if (n < 0)
			return;
		struct lr_egress_dns_query q;
		int rc = lr_egress_dns_parse(in, (size_t)n > sizeof in ? sizeof in : (size_t)n, &q);
		if ((size_t)n > DNS_MAX)
			rc = LR_ETOOBIG;
		int rcode, answer = 0;
		if (rc < 0) {
			if (n < 12 || (in[2] & 0x80))
				continue; /* not a query: no answer at all */
			q.qend = 0;
			rcode = 1; /* FORMERR */
			emit(e, "dns", "-", LR_EGRESS_DENY, "malformed query");
		} else if (q.qclass != 1) {
			rcode = 5; /* REFUSED */
			emit(e, "dns", q.name, LR_EGRESS_DENY, "not class IN");
		} else {
			int ap;
			if (q.name[0] && allowed(e, q.name, 0, &ap)) {
				rcode = 0;
				answer = q.qtype == 1;
				emit(e, "dns", q.name, LR_EGRESS_ALLOW,
				     answer ? "answered 127.0.0.1 (the proxy)" : "no data for this type");
			} else {
				rcode = 3; /* NXDOMAIN */
				emit(e, "dns", q.name, LR_EGRESS_DENY, "not on the allow-list");
			}
		}
		int len = lr_egress_dns_reply(in, &q, rcode, answer, out, sizeof out);
		if (len > 0)
			(void)sendto(e->udp_fd, out, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&from,
				     fl);
	}
}

int lr_egress_open(struct lr_loop *loop, const struct lr_egress_config *cfg, int tcp_fd,
		   int udp_fd, struct lr_egress **out, struct lr_err *err)
{
	*out = NULL;
	struct lr_egress *e = calloc(1, sizeof *e);
	int rc = -ENOMEM;
	if (!e)
		goto fail;
	e->loop = loop;
	e->base = lr_loop_base(loop);
	e->cfg = *cfg;
	e->cfg.rules = NULL;
	e->cfg.nrules = 0;
	if (e->cfg.connect_timeout <= 0)
		e->cfg.connect_timeout = 10;
	if (e->cfg.head_timeout <= 0)
		e->cfg.head_timeout = 30;
	if (e->cfg.max_conns <= 0)
		e->cfg.max_conns = 256;
	e->tcp_fd = tcp_fd;
	e->udp_fd = udp_fd;
	tcp_fd = udp_fd = -1;
	if (cfg->nrules) {
		e->rules = calloc(cfg->nrules, sizeof *e->rules);
		if (!e->rules)
			goto fail;
		for (size_t i = 0; i < cfg->nrules; i++) {
			rc = rule_parse(cfg->rules[i].pattern ? cfg->rules[i].pattern : "",
					&e->rules[i], err);
			if (rc < 0)
				goto fail;
			e->rules[i].allow_private = cfg->rules[i].allow_private;
		}
		e->nrules = cfg->nrules;
	}
	rc = -ENOMEM;
	if (e->tcp_fd >= 0) {
		if (lr_watch_init(loop, &e->tcp_w, e->tcp_fd, on_accept, e) < 0)
			goto fail;
		e->tcp_on = 1;
		if (lr_watch_start(&e->tcp_w, LR_READ) < 0)
			goto fail;
	}
	if (e->udp_fd >= 0) {
		if (lr_watch_init(loop, &e->udp_w, e->udp_fd, on_dns, e) < 0)
			goto fail;
		e->udp_on = 1;
		if (lr_watch_start(&e->udp_w, LR_READ) < 0)
			goto fail;
	}
	*out = e;
	return 0;
fail:
	if (rc == -ENOMEM && err)
		lr_err_set(err, "egress: out of memory");
	if (tcp_fd >= 0)
		close(tcp_fd);
	if (udp_fd >= 0)
		close(udp_fd);
	lr_egress_close(e);
	return rc;
}

int lr_egress_conns(const struct lr_egress *e)
{
	return e->nconns;
}

void lr_egress_close(struct lr_egress *e)
{
	if (!e)
		return;
	while (e->conns)
		conn_free(e->conns);
	if (e->tcp_on)
		lr_watch_release(&e->tcp_w);
	if (e->udp_on)
		lr_watch_release(&e->udp_w);
	if (e->tcp_fd >= 0)
		close(e->tcp_fd);
	if (e->udp_fd >= 0)
		close(e->udp_fd);
	free(e->rules);
	free(e);
}
