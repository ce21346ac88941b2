/*
 * sse.c — the text/event-stream framer (WHATWG "interpreting an event
 * stream"), a push parser fed arbitrary chunks.
 *
 * Speed matters: a model stream is parsed as it arrives and the benchmark
 * compares against `curl -N`. Line ends are found with memchr, never byte by
 * byte, and a line that lies whole inside a chunk is processed in place;
 * only a line split across chunks is copied into p->line. An event whose
 * data is one line lying whole inside the chunk (a provider's every event)
 * is dispatched from the chunk itself (p->borrowed), never copied; other
 * data bytes are copied once, into the event being built, and a borrowed
 * line is copied there only when the event goes on past it (a second data
 * line, or the end of the chunk).
 */
#include "sse.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static const unsigned char sse_bom[3] = { 0xEF, 0xBB, 0xBF };

void lr_sse_init(struct lr_sse *p, size_t max_line, size_t max_event)
{
	memset(p, 0, sizeof *p);
	p->max_line = max_line;
	p->max_event = max_event;
	lr_buf_init(&p->line, max_line);
	lr_buf_init(&p->data, max_event);
	lr_buf_init(&p->type, max_line);
	lr_buf_init(&p->id, max_line);
	p->retry = -1;
}

void lr_sse_release(struct lr_sse *p)
{
	if (!p)
		return;
	lr_buf_release(&p->line);
	lr_buf_release(&p->data);
	lr_buf_release(&p->type);
	lr_buf_release(&p->id);
}

static int sse_dispatch(struct lr_sse *p, lr_sse_cb cb, void *arg, int unterminated)
{
	if (!p->has_data) {
		/* Spec: an empty data buffer dispatches nothing and resets the name. */
		lr_buf_reset(&p->type);
		return 0;
	}
	struct lr_sse_event ev;
	if (p->type.len) {
		ev.type = p->type.data;
		ev.type_len = p->type.len;
	} else {
		ev.type = "message";
		ev.type_len = 7;
	}
	if (p->borrowed) {
		ev.data = p->borrowed;
		ev.data_len = p->borrowed_len;
	} else {
		ev.data = p->data.len ? p->data.data : "";
		ev.data_len = p->data.len;
	}
	ev.id = p->id.len ? p->id.data : NULL;
	ev.id_len = p->id.len;
	ev.retry = p->retry;
	ev.unterminated = unterminated;
	int rc = cb(arg, &ev);
	p->borrowed = NULL;
	lr_buf_reset(&p->data);
	lr_buf_reset(&p->type);
	p->has_data = 0;
	p->retry = -1;
	return rc;
}

static int sse_set(struct lr_buf *b, const char *v, size_t n)
{
	lr_buf_reset(b);
	return lr_buf_add(b, v, n);
}

/* A borrowed data line becomes the start of p->data: the event goes on past it. */
static int sse_unborrow(struct lr_sse *p)
{
	const char *v = p->borrowed;
	p->borrowed = NULL;
	return lr_buf_add(&p->data, v, p->borrowed_len);
}

/*
 * One complete line without its terminator; inplace when it lies in the
 * chunk being fed (it outlives this call until the feed returns), not in
 * p->line.
 */
static int sse_line(struct lr_sse *p, const char *line, size_t n, int inplace, lr_sse_cb cb,
		    void *arg)
{
	if (n == 0)
		return sse_dispatch(p, cb, arg, 0);
	if (line[0] == ':')
		return 0;
	const char *colon = memchr(line, ':', n);
	size_t flen = colon ? (size_t)(colon - line) : n;
	const char *v = colon ? colon + 1 : line + n;
	size_t vlen = n - (size_t)(v - line);
	if (vlen && *v == ' ') {
		v++;
		vlen--;
	}
	int rc = 0;
	switch (flen) {
	case 4:
		if (memcmp(line, "data", 4) == 0) {
			if (!p->has_data && inplace) {
				/* p->data's own cap, checked as lr_buf_add would */
				if (vlen > p->max_event)
					return LR_ETOOBIG;
				p->borrowed = v;
				p->borrowed_len = vlen;
				p->has_data = 1;
				break;
			}
			if (p->borrowed)
				rc = sse_unborrow(p);
			if (p->has_data && !rc)
				rc = lr_buf_add(&p->data, "\n", 1);
			if (!rc)
				rc = lr_buf_add(&p->data, v, vlen);
			p->has_data = 1;
		}
		break;
	case 5:
		if (memcmp(line, "event", 5) == 0) {
			rc = sse_set(&p->type, v, vlen);
		} else if (memcmp(line, "retry", 5) == 0 && vlen) {
			long r = 0;
			size_t i;
			for (i = 0; i < vlen && v[i] >= '0' && v[i] <= '9'; i++)
				r = r > (LONG_MAX - 9) / 10 ? LONG_MAX : r * 10 + (v[i] - '0');
			if (i == vlen)
				p->retry = r;
		}
		break;
	case 2:
		if (memcmp(line, "id", 2) == 0 && !memchr(v, '\0', vlen))
			rc = sse_set(&p->id, v, vlen);
		break;
	}
	return rc;
}

/* The body after the BOM check. */
static int sse_lines(struct lr_sse *p, const char *s, const char *end, lr_sse_cb cb, void *arg)
{
	int rc;
	if (p->after_cr && s < end) {
		p->after_cr = 0;
		if (*s == '\n')
			s++;
	}
	/*
	 * The next CR at or after s (NULL: none before end), known once
	 * scanned: a chunk without CRs is scanned for them once, not per line.
	 */
	const char *cr = NULL;
	int cr_known = 0;
	while (s < end) {
		/* The first CR or LF: scan for LF, then take the next CR if before it. */
		const char *eol = memchr(s, '\n', (size_t)(end - s));
		if (!cr_known || (cr && cr < s)) {
			cr = memchr(s, '\r', (size_t)(end - s));
			cr_known = 1;
		}
		if (cr && (!eol || cr < eol))
			eol = cr;
		if (!eol)
			return lr_buf_add(&p->line, s, (size_t)(end - s));
		size_t n = (size_t)(eol - s);
		if (p->line.len) {
			rc = lr_buf_add(&p->line, s, n);
			if (!rc)
				rc = sse_line(p, p->line.data, p->line.len, 0, cb, arg);
			lr_buf_reset(&p->line);
		} else {
			rc = n > p->max_line ? LR_ETOOBIG : sse_line(p, s, n, 1, cb, arg);
		}
		if (rc)
			return rc;
		s = eol + 1;
		if (*eol == '\r') {
			if (s == end)
				p->after_cr = 1;
			else if (*s == '\n')
				s++;
		}
	}
	return 0;
}

/* sse_lines, and the chunk is no longer borrowed when it returns. */
static int sse_body(struct lr_sse *p, const char *s, const char *end, lr_sse_cb cb, void *arg)
{
	int rc = sse_lines(p, s, end, cb, arg);
	if (p->borrowed) {
		int rc2 = sse_unborrow(p);
		if (!rc)
			rc = rc2;
	}
	return rc;
}

int lr_sse_feed(struct lr_sse *p, const void *buf, size_t len, lr_sse_cb cb, void *arg)
{
	const char *s = buf, *end = s + len;
	int rc;
	if (p->status)
		return p->status;
	while (p->bom < 3 && s < end) {
		if ((unsigned char)*s == sse_bom[p->bom]) {
			s++;
			p->bom++;
			continue;
		}
		/* Not a BOM after all: the bytes matched so far are data. */
		int k = p->bom;
		p->bom = 3;
		rc = sse_body(p, (const char *)sse_bom, (const char *)sse_bom + k, cb, arg);
		if (rc)
			return p->status = rc;
	}
	rc = sse_body(p, s, end, cb, arg);
	return p->status = rc;
}

int lr_sse_finish(struct lr_sse *p, lr_sse_cb cb, void *arg)
{
	int rc;
	if (p->status)
		return p->status;
	if (p->bom > 0 && p->bom < 3) {
		int k = p->bom;
		p->bom = 3;
		rc = sse_body(p, (const char *)sse_bom, (const char *)sse_bom + k, cb, arg);
		if (rc)
			return p->status = rc;
	}
	p->bom = 3;
	p->after_cr = 0;
	if (p->line.len) {
		rc = sse_line(p, p->line.data, p->line.len, 0, cb, arg);
		lr_buf_reset(&p->line);
		if (rc)
			return p->status = rc;
	}
	return p->status = sse_dispatch(p, cb, arg, 1);
}
