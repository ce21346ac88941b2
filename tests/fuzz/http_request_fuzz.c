/*
 * http_request_fuzz.c — the host HTTP server's request parser
 * (host/http_head.c) on arbitrary bytes: request heads and chunked bodies.
 *
 * Invariants, heads: the result is one of the four; a parsed head lies
 * inside the input and the cap, and so do its method, target and header
 * offsets; the method is a token and the target a path; the head alone
 * parses the same and one byte less is incomplete; a refusal says why,
 * with 400, 417 or 431. Chunked bodies: decoding the input at once and in
 * pieces (split where the input's own bytes say) gives the same body and
 * the same outcome, and no step consumes more than it was given.
 */
#include "../../host/host.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_head(const char *buf, size_t size, size_t max)
{
	static struct lr_httpd_head h, h2;
	int rc = lr_httpd_head_parse(buf, size, max, &h);
	if (rc != 0 && rc != -EAGAIN && rc != LR_EPARSE && rc != LR_ETOOBIG)
		abort();
	if (rc == LR_EPARSE || rc == LR_ETOOBIG) {
		if (!h.code || !h.why || (h.status != 400 && h.status != 417 && h.status != 431) ||
		    (rc == LR_ETOOBIG) != (h.status == 431))
			abort();
		return;
	}
	if (rc != 0)
		return;
	if (h.len == 0 || h.len > size || h.len > max || h.nhdr > LR_HTTPD_HEADERS_MAX ||
	    h.method_len == 0 || h.method_len > LR_HTTPD_METHOD_MAX ||
	    (size_t)h.method + h.method_len > h.len || (size_t)h.target + h.target_len > h.len ||
	    h.target_len == 0 || buf[h.target] != '/' || (h.minor != 0 && h.minor != 1))
		abort();
	for (uint32_t i = 0; i < h.target_len; i++)
		if ((unsigned char)buf[h.target + i] <= ' ')
			abort();
	for (int i = 0; i < h.nhdr; i++)
		if (!h.hdr[i].nlen || (size_t)h.hdr[i].name + h.hdr[i].nlen > h.len ||
		    (size_t)h.hdr[i].value + h.hdr[i].vlen > h.len ||
		    memchr(buf + h.hdr[i].value, '\n', h.hdr[i].vlen) ||
		    memchr(buf + h.hdr[i].value, '\r', h.hdr[i].vlen))
			abort();
	if (h.chunked && h.content_length >= 0)
		abort();
	if (lr_httpd_head_parse(buf, h.len, max, &h2) != 0 || h2.len != h.len || h2.nhdr != h.nhdr ||
	    h2.target != h.target || h2.content_length != h.content_length)
		abort();
	if (lr_httpd_head_parse(buf, h.len - 1, max, &h2) != -EAGAIN)
		abort();
}

/* Decodes buf as a chunked body fed in pieces of at most piece bytes; returns the outcome. */
static int decode(const char *buf, size_t size, size_t piece, char *out, size_t *outlen)
{
	struct lr_httpd_chunked c;
	lr_httpd_chunked_init(&c, 256);
	size_t have = 0, pos = 0; /* buf[pos .. have) is given and not consumed */
	*outlen = 0;
	for (;;) {
		size_t used;
		int rc = lr_httpd_chunked_step(&c, buf + pos, have - pos, &used);
		if (used > have - pos)
			abort();
		if (rc == -EAGAIN) {
			if (used)
				abort();
			if (have == size)
				return -EAGAIN;
			have = have + piece < size ? have + piece : size;
			continue;
		}
		if (rc == LR_EPARSE || rc == LR_ETOOBIG)
			return rc;
		if (rc == LR_HTTPD_CHUNK_DATA) {
			if (used == 0)
				abort();
			memcpy(out + *outlen, buf + pos, used);
			*outlen += used;
		} else if (rc != LR_HTTPD_CHUNK_FRAMING && rc != LR_HTTPD_CHUNK_DONE) {
			abort();
		}
		pos += used;
		if (rc == LR_HTTPD_CHUNK_DONE)
			return (int)pos; /* where the body ended */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	check_head(buf, size, 8192);
	check_head(buf, size, 64);

	char *a = malloc(size + 1), *b = malloc(size + 1);
	if (!a || !b)
		abort();
	size_t alen, blen;
	int ra = decode(buf, size, size ? size : 1, a, &alen);
	int rb = decode(buf, size, size ? (size_t)data[0] % 7 + 1 : 1, b, &blen);
	/* data pieces may split differently, but the body and the outcome are the same */
	if (ra != rb || alen != blen || memcmp(a, b, alen) != 0)
		abort();
	free(a);
	free(b);
	return 0;
}
