/*
 * sse.c — the text/event-stream framer (WHATWG "interpreting an event
 * stream"), a push parser fed arbitrary chunks.
 *
 * Speed matters: a model stream is parsed as it arrives and the benchmark
 * compares against `curl -N`. The pull form (lr_sse_next) is the parser;
 * the push form (lr_sse_feed) is a loop over it. Line ends are found with memchr, never byte by
 * byte, and a line that lies whole inside a chunk is processed in place;
 * only a line split across chunks is copied into p->line. An event whose
 * data is one line lying whole inside the chunk (a provider's every event)
 * is handed out from the chunk itself (p->borrowed), never copied; other
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

/* Clears the event lr_sse_next handed out, which stayed whole until now. */
static void sse_clear(struct lr_sse *p)
{
	p->handed = 0;
	p->borrowed = NULL;
	/* An empty buffer already ends in its NUL: a borrowed event left both so. */
	if (p->data.len)
		lr_buf_reset(&p->data);
	if (p->type.len)
		lr_buf_reset(&p->type);
	p->has_data = 0;
	p->retry = -1;
}

/*
 * A blank line (or the end): 1 with *ev filled when there is an event to
 * hand out (p->handed; its fields are cleared at the next call), else 0.
 */
static int sse_dispatch(struct lr_sse *p, struct lr_sse_event *ev, int unterminated)
{
	if (!p->has_data) {
		/* Spec: an empty data buffer dispatches nothing and resets the name. */
		lr_buf_reset(&p->type);
		return 0;
	}
	if (p->type.len) {
		ev->type = p->type.data;
		ev->type_len = p->type.len;
	} else {
		ev->type = "message";
		ev->type_len = 7;
	}
	if (p->borrowed) {
		ev->data = p->borrowed;
		ev->data_len = p->borrowed_len;
	} else {
		ev->data = p->data.len ? p->data.data : "";
		ev->data_len = p->data.len;
	}
	ev->id = p->id.len ? p->id.data : NULL;
	ev->id_len = p->id.len;
	ev->retry = p->retry;
	ev->unterminated = unterminated;
	p->handed = 1;
	return 1;
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
 * input being read (it outlives this call until the caller drops the
 * input), not in p->line. Returns 1 with *ev for a dispatched event, 0, or
 * an error.
 */
static int sse_line(struct lr_sse *p, const char *line, size_t n, int inplace,
		    struct lr_sse_event *ev)
{
	if (n == 0)
		return sse_dispatch(p, ev, 0);
	if (line[0] == ':')
		return 0;
	/* "data:" first: a provider's every line but the blank ones */
	const char *colon = n >= 5 && memcmp(line, "data:", 5) == 0 ? line + 4 : memchr(line, ':', n);
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

/*
 * What is known of CRs in the input: bytes before clear hold none, and cr
 * (when not NULL) is the CR at clear. A stream without CRs is scanned for
 * them once, not per line, and that knowledge carries across lr_sse_next
 * calls through p->cr_clear (a CR found stays found: clear stops at it).
 */
struct sse_scan {
	const char *clear, *cr;
};

/* The first CR at or after s and before end, or NULL. */
static const char *sse_next_cr(struct sse_scan *t, const char *s, const char *end)
{
	if (t->cr && t->cr >= s)
		return t->cr;
	const char *from = t->clear > s ? t->clear : s;
	const char *cr = from < end ? memchr(from, '\r', (size_t)(end - from)) : NULL;
	t->cr = cr;
	t->clear = cr ? cr : end;
	return cr;
}

int lr_sse_next(struct lr_sse *p, const void *buf, size_t len, size_t *used,
		struct lr_sse_event *ev)
{
	const char *s0 = buf, *s = s0, *end = s0 + len;
	int rc = 0;
	*used = 0;
	if (p->status)
		return p->status;
	if (p->handed)
		sse_clear(p);
	while (p->bom < 3 && s < end) {
		if ((unsigned char)*s == sse_bom[p->bom]) {
			s++;
			p->bom++;
			continue;
		}
		/* Not a BOM after all: the bytes matched so far begin the first line. */
		rc = lr_buf_add(&p->line, sse_bom, (size_t)p->bom);
		p->bom = 3;
		if (rc)
			return p->status = rc;
	}
	if (p->after_cr && s < end) {
		p->after_cr = 0;
		if (*s == '\n')
			s++;
	}
	struct sse_scan t;
	size_t known = p->cr_clear < len ? p->cr_clear : len;
	t.clear = s0 + known;
	t.cr = NULL;
	while (s < end) {
		/*
		 * A provider's every event: one "data:" line and the blank line
		 * after it, whole in buf, no CR among them, at the start of an
		 * event. It is handed out at once, borrowed, as the two lines one
		 * by one would (the caps are left to them).
		 */
		if (!p->has_data && !p->line.len && end - s > 6 && memcmp(s, "data:", 5) == 0) {
			const char *nl = memchr(s + 5, '\n', (size_t)(end - s - 5));
			if (nl && nl + 1 < end && nl[1] == '\n' && (size_t)(nl - s) <= p->max_line) {
				const char *cr = sse_next_cr(&t, s, end);
				const char *v = s[5] == ' ' ? s + 6 : s + 5;
				if ((!cr || cr > nl) && (size_t)(nl - v) <= p->max_event) {
					p->borrowed = v;
					p->borrowed_len = (size_t)(nl - v);
					p->has_data = 1;
					sse_dispatch(p, ev, 0);
					s = nl + 2;
					*used = (size_t)(s - s0);
					p->cr_clear = t.clear > s ? (size_t)(t.clear - s) : 0;
					return 1;
				}
			}
		}
		/*
		 * The first CR or LF: scan for LF, then take the next CR if before
		 * it; a blank line (an event's usual end) needs no scan.
		 */
		const char *eol = s;
		if (*s != '\n') {
			eol = memchr(s, '\n', (size_t)(end - s));
			const char *cr = sse_next_cr(&t, s, end);
			if (cr && (!eol || cr < eol))
				eol = cr;
		}
		if (!eol) {
			rc = lr_buf_add(&p->line, s, (size_t)(end - s));
			break;
		}
		size_t n = (size_t)(eol - s);
		if (p->line.len) {
			rc = lr_buf_add(&p->line, s, n);
			if (!rc)
				rc = sse_line(p, p->line.data, p->line.len, 0, ev);
			lr_buf_reset(&p->line);
		} else {
			rc = n > p->max_line ? LR_ETOOBIG : sse_line(p, s, n, 1, ev);
		}
		if (rc < 0)
			break;
		s = eol + 1;
		if (*eol == '\r') {
			if (s == end)
				p->after_cr = 1;
			else if (*s == '\n')
				s++;
		}
		if (rc == 1) {
			/* Handed out mid-input: keep what is known of the rest. */
			*used = (size_t)(s - s0);
			p->cr_clear = t.clear > s ? (size_t)(t.clear - s) : 0;
			return 1;
		}
	}
	p->cr_clear = 0;
	/* The input is used up and may go: a borrowed line is copied now. */
	if (p->borrowed) {
		int rc2 = sse_unborrow(p);
		if (!rc)
			rc = rc2;
	}
	if (rc)
		return p->status = rc;
	*used = len;
	return 0;
}

int lr_sse_end(struct lr_sse *p, struct lr_sse_event *ev)
{
	int rc;
	if (p->status)
		return p->status;
	if (p->handed)
		sse_clear(p);
	if (p->bom > 0 && p->bom < 3) {
		rc = lr_buf_add(&p->line, sse_bom, (size_t)p->bom);
		if (rc)
			return p->status = rc;
	}
	p->bom = 3;
	p->after_cr = 0;
	if (p->line.len) {
		rc = sse_line(p, p->line.data, p->line.len, 0, ev);
		lr_buf_reset(&p->line);
		if (rc < 0)
			return p->status = rc;
		/* A complete line cannot be blank here: the one line dispatches nothing. */
	}
	return sse_dispatch(p, ev, 1);
}

int lr_sse_feed(struct lr_sse *p, const void *buf, size_t len, lr_sse_cb cb, void *arg)
{
	const char *s = buf;
	struct lr_sse_event ev;
	for (;;) {
		size_t used;
		int rc = lr_sse_next(p, s, len, &used, &ev);
		if (rc != 1)
			return rc;
		s += used;
		len -= used;
		rc = cb(arg, &ev);
		if (rc)
			return p->status = rc;
	}
}

int lr_sse_finish(struct lr_sse *p, lr_sse_cb cb, void *arg)
{
	struct lr_sse_event ev;
	int rc = lr_sse_end(p, &ev);
	if (rc == 1) {
		rc = cb(arg, &ev);
		sse_clear(p);
		if (!rc)
			rc = lr_sse_end(p, &ev);
	}
	return p->status = rc;
}
