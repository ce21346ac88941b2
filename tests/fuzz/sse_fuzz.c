/*
 * sse_fuzz.c — the event-stream framer on arbitrary bytes.
 *
 * The first input byte picks the caps and a seed for chunk sizes; the rest
 * is the stream. It is parsed once whole, once in pieces, and once pulled
 * (lr_sse_next) out of a buffer that bytes are appended to and the used
 * bytes moved out of, as the HTTP client reads; the invariant is that all
 * give the same events and the same final status (or, when a cap was hit,
 * the same events up to the failure).
 */
#include "../../host/host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rec {
	struct lr_buf out;
	int count;
};

static int rec_cb(void *arg, const struct lr_sse_event *ev)
{
	struct rec *r = arg;
	r->count++;
	if (ev->type_len == 0 || (ev->id && ev->id_len == 0) || memchr(ev->type, '\n', ev->type_len))
		abort();
	lr_buf_add(&r->out, ev->type, ev->type_len);
	lr_buf_add(&r->out, "\0", 1);
	if (ev->id)
		lr_buf_add(&r->out, ev->id, ev->id_len);
	lr_buf_printf(&r->out, "%c%ld", ev->id ? 1 : 2, ev->retry);
	lr_buf_add(&r->out, ev->data, ev->data_len);
	lr_buf_add(&r->out, "\0\0", 2);
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
	size_t max_line = (seed & 1) ? 32 : 4096;
	size_t max_event = (seed & 2) ? 48 : 65536;

	struct rec a, b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	lr_buf_init(&a.out, 1 << 24);
	lr_buf_init(&b.out, 1 << 24);

	struct lr_sse p;
	lr_sse_init(&p, max_line, max_event);
	int ra = lr_sse_feed(&p, s, n, rec_cb, &a);
	if (!ra)
		ra = lr_sse_finish(&p, rec_cb, &a);
	lr_sse_release(&p);

	/* Pieces of 1..16 bytes from a tiny LCG seeded by the first byte. */
	lr_sse_init(&p, max_line, max_event);
	unsigned x = seed * 2654435761u + 1;
	int rb = 0;
	for (size_t off = 0; off < n && !rb;) {
		x = x * 1103515245u + 12345u;
		size_t c = 1 + ((x >> 16) % 16);
		if (c > n - off)
			c = n - off;
		rb = lr_sse_feed(&p, s + off, c, rec_cb, &b);
		off += c;
	}
	if (!rb)
		rb = lr_sse_finish(&p, rec_cb, &b);
	lr_sse_release(&p);

	/* Pulled: appends of 1..64 bytes, one event per call, the rest moved to the front. */
	struct rec c;
	memset(&c, 0, sizeof c);
	lr_buf_init(&c.out, 1 << 24);
	lr_sse_init(&p, max_line, max_event);
	char *buf = malloc(n + 1);
	size_t have = 0, fed = 0;
	int rcc = 0;
	while (!rcc) {
		struct lr_sse_event ev;
		size_t used;
		rcc = lr_sse_next(&p, buf, have, &used, &ev);
		if (rcc < 0)
			break;
		int got = rcc == 1;
		rcc = got ? rec_cb(&c, &ev) : 0;
		memmove(buf, buf + used, have - used);
		have -= used;
		if (got && have)
			continue;
		if (fed == n)
			break;
		x = x * 1103515245u + 12345u;
		size_t k = 1 + ((x >> 16) % 64);
		if (k > n - fed)
			k = n - fed;
		memcpy(buf + have, s + fed, k);
		have += k;
		fed += k;
	}
	struct lr_sse_event last;
	while (!rcc && (rcc = lr_sse_end(&p, &last)) == 1)
		rcc = rec_cb(&c, &last);
	free(buf);
	lr_sse_release(&p);

	if (ra != rb || ra != rcc)
		abort();
	if (a.count != c.count || a.out.len != c.out.len ||
	    (a.out.len && memcmp(a.out.data, c.out.data, a.out.len) != 0))
		abort();
	lr_buf_release(&c.out);
	if (a.count != b.count || a.out.len != b.out.len ||
	    (a.out.len && memcmp(a.out.data, b.out.data, a.out.len) != 0))
		abort();
	lr_buf_release(&a.out);
	lr_buf_release(&b.out);
	return 0;
}
