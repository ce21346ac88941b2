/*
 * http_head.c — the HTTP/1.1 request parser of the host server
 * (host/http_server.c): request heads and chunked bodies, as pure
 * functions over bytes, so a fuzz target can drive them alone
 * (tests/fuzz/http_request_fuzz.c).
 *
 * Strict where leniency lets two parsers disagree about where a request
 * ends (RFC 9112 §6.3, §11.2): a bare CR, whitespace before a colon, a
 * folded line, Content-Length with Transfer-Encoding, two different
 * Content-Lengths, a transfer coding other than chunked, two Host fields
 * or none in HTTP/1.1 are all refused. Only origin-form targets ("/…")
 * are taken: this server is not a proxy.
 */
#include "http_server.h"

#include <errno.h>
#include <string.h>

static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value byte: visible ASCII, obs-text, space or tab. */
static int is_vbyte(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int ci_eq(const char *a, size_t n, const char *b)
{
	if (strlen(b) != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x - 'A' + 'a');
		if (x != y)
			return 0;
	}
	return 1;
}

static int refuse(struct lr_httpd_head *h, int status, const char *code, const char *why)
{
	h->status = status;
	h->code = code;
	h->why = why;
	return status == 431 ? LR_ETOOBIG : LR_EPARSE;
}

/*
 * The next line of buf from *pos: its start and length without the line
 * break (LF or CRLF). 0 when there is one, -EAGAIN when no LF comes before
 * len, LR_EPARSE on a CR not followed by LF.
 */
static int next_line(const char *buf, size_t len, size_t *pos, size_t *start, size_t *n)
{
	size_t i = *pos;
	const char *lf = memchr(buf + i, '\n', len - i);
	if (!lf)
		return -EAGAIN;
	size_t end = (size_t)(lf - buf);
	*start = i;
	*n = end - i;
	if (*n && buf[end - 1] == '\r')
		(*n)--;
	if (memchr(buf + i, '\r', *n))
		return LR_EPARSE;
	*pos = end + 1;
	return 0;
}

/* Comma-separated tokens of a Connection value: close and keep-alive. */
static void connection_tokens(const char *v, size_t n, struct lr_httpd_head *h)
{
	size_t i = 0;
	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			i++;
		if (ci_eq(v + s, i - s, "close"))
			h->close = 1;
		else if (ci_eq(v + s, i - s, "keep-alive"))
			h->keep_alive = 1;
	}
}

static int parse_request_line(const char *buf, size_t s, size_t n, struct lr_httpd_head *h)
{
	const char *line = buf + s;
	const char *sp1 = memchr(line, ' ', n);
	if (!sp1 || sp1 == line)
		return refuse(h, 400, "malformed_request", "malformed request line");
	size_t ml = (size_t)(sp1 - line);
	if (ml > LR_HTTPD_METHOD_MAX)
		return refuse(h, 400, "malformed_request", "the method is too long");
	for (size_t i = 0; i < ml; i++)
		if (!is_tchar((unsigned char)line[i]))
			return refuse(h, 400, "malformed_request", "the method is not a token");
	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', n - ml - 1);
	if (!sp2 || sp2 == t)
		return refuse(h, 400, "malformed_request", "malformed request line");
	size_t tl = (size_t)(sp2 - t);
	const char *v = sp2 + 1;
	size_t vl = n - ml - tl - 2;
	if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9')
		return refuse(h, 400, "malformed_request", "malformed HTTP version");
	if (v[5] != '1')
		return refuse(h, 400, "malformed_request",
			      "unsupported HTTP version (HTTP/1.0 or HTTP/1.1 only)");
	h->minor = v[7] == '0' ? 0 : 1; /* 1.2 and later minors read as 1.1 */
	if (t[0] != '/')
		return refuse(h, 400, "malformed_request", "the request target must be a path");
	for (size_t i = 0; i < tl; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c <= 0x20 || c == 0x7f)
			return refuse(h, 400, "malformed_request", "bad byte in the request target");
	}
	h->method = s;
	h->method_len = (uint32_t)ml;
	h->target = (uint32_t)(t - buf);
	h->target_len = (uint32_t)tl;
	return 0;
}

static int parse_length(const char *v, size_t n, int64_t *out)
{
	if (n == 0 || n > 18)
		return -1;
	int64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (v[i] - '0');
	}
	*out = x;
	return 0;
}

int lr_httpd_head_parse(const char *buf, size_t len, size_t max, struct lr_httpd_head *h)
{
	memset(h, 0, sizeof *h);
	h->content_length = -1;
	if (len > max)
		len = max;
	size_t pos = 0, s, n;
	int rc;
	/* Blank lines before the request line are skipped (RFC 9112 §2.2). */
	for (;;) {
		rc = next_line(buf, len, &pos, &s, &n);
		if (rc == -EAGAIN)
			goto incomplete;
		if (rc)
			return refuse(h, 400, "malformed_request", "a CR without LF");
		if (n)
			break;
	}
	if ((rc = parse_request_line(buf, s, n, h)) != 0)
		return rc;
	int hosts = 0, lengths = 0, codings = 0;
	for (;;) {
		rc = next_line(buf, len, &pos, &s, &n);
		if (rc == -EAGAIN)
			goto incomplete;
		if (rc)
			return refuse(h, 400, "malformed_request", "a CR without LF");
		if (n == 0)
			break;
		const char *line = buf + s;
		if (line[0] == ' ' || line[0] == '\t')
			return refuse(h, 400, "malformed_request", "folded header lines are refused");
		const char *colon = memchr(line, ':', n);
		if (!colon || colon == line)
			return refuse(h, 400, "malformed_request", "malformed header line");
		size_t nl = (size_t)(colon - line);
		for (size_t i = 0; i < nl; i++)
			if (!is_tchar((unsigned char)line[i]))
				return refuse(h, 400, "malformed_request",
					      "a header name is not a token");
		size_t vs = nl + 1, ve = n;
		while (vs < ve && (line[vs] == ' ' || line[vs] == '\t'))
			vs++;
		while (ve > vs && (line[ve - 1] == ' ' || line[ve - 1] == '\t'))
			ve--;
		for (size_t i = vs; i < ve; i++)
			if (!is_vbyte((unsigned char)line[i]))
				return refuse(h, 400, "malformed_request", "bad byte in a header value");
		if (h->nhdr == LR_HTTPD_HEADERS_MAX)
			return refuse(h, 431, "headers_too_large", "too many header fields");
		const char *v = line + vs;
		size_t vl = ve - vs;
		h->hdr[h->nhdr].name = (uint32_t)s;
		h->hdr[h->nhdr].nlen = (uint32_t)nl;
		h->hdr[h->nhdr].value = (uint32_t)(s + vs);
		h->hdr[h->nhdr].vlen = (uint32_t)vl;
		h->nhdr++;
		if (ci_eq(line, nl, "host")) {
			hosts++;
		} else if (ci_eq(line, nl, "content-length")) {
			int64_t cl;
			if (parse_length(v, vl, &cl) != 0)
				return refuse(h, 400, "malformed_request", "bad Content-Length");
			if (lengths++ && cl != h->content_length)
				return refuse(h, 400, "malformed_request",
					      "two different Content-Length fields");
			h->content_length = cl;
		} else if (ci_eq(line, nl, "transfer-encoding")) {
			if (codings++ || !ci_eq(v, vl, "chunked"))
				return refuse(h, 400, "malformed_request",
					      "unsupported Transfer-Encoding (chunked only)");
			h->chunked = 1;
		} else if (ci_eq(line, nl, "connection")) {
			connection_tokens(v, vl, h);
		} else if (ci_eq(line, nl, "expect") && h->minor >= 1) {
			if (!ci_eq(v, vl, "100-continue"))
				return refuse(h, 417, "expectation_failed",
					      "unsupported Expect (100-continue only)");
			h->expect_continue = 1;
		}
	}
	if (h->chunked && (lengths || h->minor == 0))
		return refuse(h, 400, "malformed_request",
			      "Transfer-Encoding with Content-Length or in HTTP/1.0");
	if (hosts > 1 || (hosts == 0 && h->minor >= 1))
		return refuse(h, 400, "malformed_request", "an HTTP/1.1 request needs one Host field");
	h->len = pos;
	return 0;

incomplete:
	if (len >= max)
		return refuse(h, 431, "headers_too_large", "the request head is too large");
	return -EAGAIN;
}

/*
 * The chunked decoder: a state machine over what has arrived, so a body
 * may come in pieces split anywhere. Chunk-size lines (hex, then
 * extensions the decoder skips) are read whole, at most CHUNK_LINE_MAX
 * bytes; trailer fields are read and dropped, at most max_trailer bytes.
 */
#define CHUNK_LINE_MAX 1024

enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

void lr_httpd_chunked_init(struct lr_httpd_chunked *c, size_t max_trailer)
{
	memset(c, 0, sizeof *c);
	c->state = CH_SIZE;
	c->max_trailer = max_trailer;
}

int lr_httpd_chunked_step(struct lr_httpd_chunked *c, const char *buf, size_t len, size_t *used)
{
	*used = 0;
	size_t pos = 0, s, n;
	int rc;
	switch (c->state) {
	case CH_SIZE: {
		rc = next_line(buf, len > CHUNK_LINE_MAX ? CHUNK_LINE_MAX : len, &pos, &s, &n);
		if (rc == -EAGAIN)
			return len >= CHUNK_LINE_MAX ? LR_EPARSE : -EAGAIN;
		if (rc)
			return LR_EPARSE;
		uint64_t size = 0;
		size_t i = 0;
		for (; i < n; i++) {
			char ch = buf[i];
			int d = ch >= '0' && ch <= '9' ? ch - '0'
				: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
				: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
			if (d < 0)
				break;
			if (i >= 15) /* 2^60 is more than any cap */
				return LR_EPARSE;
			size = size * 16 + (uint64_t)d;
		}
		if (i == 0)
			return LR_EPARSE;
		while (i < n && (buf[i] == ' ' || buf[i] == '\t'))
			i++;
		if (i < n && buf[i] != ';')
			return LR_EPARSE;
		for (; i < n; i++)
			if (!is_vbyte((unsigned char)buf[i]))
				return LR_EPARSE;
		*used = pos;
		c->left = size;
		c->state = size ? CH_DATA : CH_TRAILER;
		return LR_HTTPD_CHUNK_FRAMING;
	}
	case CH_DATA: {
		if (len == 0)
			return -EAGAIN;
		size_t take = len < c->left ? len : (size_t)c->left;
		c->left -= take;
		*used = take;
		if (c->left == 0)
			c->state = CH_DATA_END;
		return LR_HTTPD_CHUNK_DATA;
	}
	case CH_DATA_END:
		if (len == 0)
			return -EAGAIN;
		if (buf[0] == '\n') {
			*used = 1;
		} else if (buf[0] == '\r') {
			if (len < 2)
				return -EAGAIN;
			if (buf[1] != '\n')
				return LR_EPARSE;
			*used = 2;
		} else {
			return LR_EPARSE;
		}
		c->state = CH_SIZE;
		return LR_HTTPD_CHUNK_FRAMING;
	case CH_TRAILER: {
		size_t room = c->max_trailer - c->trailer;
		rc = next_line(buf, len > room ? room : len, &pos, &s, &n);
		if (rc == -EAGAIN)
			return len >= room ? LR_ETOOBIG : -EAGAIN;
		if (rc)
			return LR_EPARSE;
		c->trailer += pos;
		*used = pos;
		if (n == 0) {
			c->state = CH_DONE;
			return LR_HTTPD_CHUNK_DONE;
		}
		const char *colon = memchr(buf, ':', n);
		if (!colon || colon == buf || buf[0] == ' ' || buf[0] == '\t')
			return LR_EPARSE;
		for (const char *p = buf; p < colon; p++)
			if (!is_tchar((unsigned char)*p))
				return LR_EPARSE;
		for (const char *p = colon + 1; p < buf + n; p++)
			if (!is_vbyte((unsigned char)*p))
				return LR_EPARSE;
		return LR_HTTPD_CHUNK_FRAMING;
	}
	}
	return LR_EPARSE; /* NEVER: a step after the end */
}
