/*
 * mcp_frame_fuzz.c — the MCP stdio line framer on arbitrary bytes.
 *
 * The first input byte picks the line cap and a seed for chunk sizes; the
 * rest is the stream. It is framed once whole and once in pieces, and both
 * must give the same lines; each line is checked against the stream itself
 * (a complete line holds no LF and ends in no CR, a line's bytes are the
 * stream's bytes at that place, an oversized line's length is its true
 * length and its head and tail are its ends).
 */
#include "../../host/host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rec {
	struct lr_buf out;
	const char *s;
	size_t n, pos; /* where the next line may start in s */
	size_t max_line;
};

/* Finds where this line sits in the stream (after skipped empty lines) and checks it. */
static int rec_cb(void *arg, const struct lr_mcp_line *l)
{
	struct rec *r = arg;
	while (r->pos < r->n && (r->s[r->pos] == '\n' ||
	       (r->s[r->pos] == '\r' && r->pos + 1 < r->n && r->s[r->pos + 1] == '\n')))
		r->pos += r->s[r->pos] == '\n' ? 1 : 2;
	const char *at = r->s + r->pos;
	size_t left = r->n - r->pos;
	const char *nl = memchr(at, '\n', left);
	size_t raw = nl ? (size_t)(nl - at) : left;
	size_t len = raw && at[raw - 1] == '\r' ? raw - 1 : raw;
	if (l->total != len || len == 0)
		abort();
	if (!l->oversized) {
		if (raw > r->max_line || l->len != len || memcmp(l->data, at, len) != 0 ||
		    memchr(l->data, '\n', l->len))
			abort();
	} else {
		size_t h = len < LR_MCP_FRAME_KEEP ? len : LR_MCP_FRAME_KEEP;
		if (raw <= r->max_line || l->len != h || memcmp(l->data, at, h) != 0)
			abort();
		if (l->tail_len > LR_MCP_FRAME_KEEP || l->tail_len > len ||
		    memcmp(l->tail, at + len - l->tail_len, l->tail_len) != 0)
			abort();
		if (len >= LR_MCP_FRAME_KEEP && l->tail_len + 1 < LR_MCP_FRAME_KEEP) /* a CR may go */
			abort();
	}
	r->pos += raw + (nl ? 1 : 0);
	lr_buf_printf(&r->out, "%d:%zu:", l->oversized, l->total);
	lr_buf_add(&r->out, l->data, l->len);
	lr_buf_add(&r->out, "\0", 1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned seed = data[0];
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	size_t caps[4] = { 1, 8, 600, 1 << 20 };
	size_t max_line = caps[seed & 3];

	struct rec a, b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	a.s = b.s = s;
	a.n = b.n = n;
	a.max_line = b.max_line = max_line;
	lr_buf_init(&a.out, 1 << 26);
	lr_buf_init(&b.out, 1 << 26);

	struct lr_mcp_frame f;
	lr_mcp_frame_init(&f, max_line);
	if (lr_mcp_frame_feed(&f, s, n, rec_cb, &a) || lr_mcp_frame_finish(&f, rec_cb, &a))
		abort();
	lr_mcp_frame_release(&f);

	/* Pieces of 1..64 bytes from a tiny LCG seeded by the first byte. */
	lr_mcp_frame_init(&f, max_line);
	unsigned x = seed * 2654435761u + 1;
	for (size_t off = 0; off < n;) {
		x = x * 1103515245u + 12345u;
		size_t c = 1 + ((x >> 16) % 64);
		if (c > n - off)
			c = n - off;
		if (lr_mcp_frame_feed(&f, s + off, c, rec_cb, &b))
			abort();
		off += c;
	}
	if (lr_mcp_frame_finish(&f, rec_cb, &b))
		abort();
	lr_mcp_frame_release(&f);

	if (a.out.len != b.out.len || (a.out.len && memcmp(a.out.data, b.out.data, a.out.len) != 0))
		abort();
	lr_buf_release(&a.out);
	lr_buf_release(&b.out);
	return 0;
}
