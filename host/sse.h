/*
 * sse.h — SSE framing (host/sse.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_SSE_H
#define LR_HOST_SSE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

/*
 * A push parser for text/event-stream bodies following the WHATWG
 * EventSource rules: feed it chunks split anywhere (even between CR and
 * LF); it calls back once per dispatched event (lr_sse_feed), or hands out
 * one event per call out of the bytes it is given (lr_sse_next, for a
 * reader that frames events only when it wants them). No Lua, no libcurl.
 *
 * Lines end in LF, CRLF or CR. "data:" lines join with "\n"; one space
 * after the colon is dropped; lines starting with ':' are comments; a line
 * without a colon is a field with an empty value; unknown fields are
 * ignored; a BOM at the very start is dropped. A blank line dispatches the
 * event if any data line was seen, otherwise it only resets the event name.
 * "id:" sets the last event id, which persists across events (an id holding
 * NUL is ignored; an empty id clears it); "retry:" with digits only is
 * reported with the next dispatched event. lr_sse_finish, at the end of the
 * stream, dispatches a last event that lacked its blank line (recorded
 * provider streams end that way).
 *
 * Caps: a line longer than max_line bytes or an event with more than
 * max_event data bytes stops the parser with LR_ETOOBIG. Errors stick: every
 * later call returns the same status without calling back.
 */
struct lr_sse_event {
	const char *type; /* "message" unless an event: line named it */
	size_t type_len;
	const char *data; /* not NUL-safe text: data may hold NUL bytes */
	size_t data_len;
	const char *id;   /* the last event id, NULL when none */
	size_t id_len;
	long retry;       /* a retry: value seen since the last dispatch, or -1 */
	int unterminated; /* dispatched by lr_sse_finish: the stream ended before its blank line */
};

/*
 * Called per event; the pointers are borrowed until the callback returns.
 * A non-zero return stops the parser and becomes its sticky status.
 */
typedef int (*lr_sse_cb)(void *arg, const struct lr_sse_event *ev);

struct lr_sse {
	struct lr_buf line;  /* a line split across chunks */
	struct lr_buf data;
	const char *borrowed;   /* the data, while it is one line inside the input being read */
	size_t borrowed_len;
	struct lr_buf type;
	struct lr_buf id;
	size_t max_line, max_event;
	long retry;
	int has_data;
	int after_cr;  /* the last byte used was CR: skip one LF */
	int bom;       /* bytes of a BOM matched at the start; 3 when settled */
	int status;
	int handed;    /* lr_sse_next handed out an event: clear it at the next call */
	size_t cr_clear; /* lr_sse_next: the first bytes of the next input known to hold no CR */
};

void lr_sse_init(struct lr_sse *p, size_t max_line, size_t max_event);
void lr_sse_release(struct lr_sse *p);

/*
 * The pull form: frames the next event out of buf. Returns 1 with *ev set
 * and *used the bytes of buf it took (up to the end of the event's blank
 * line); 0 when buf ended without completing an event (*used = len: a
 * partial line or event is kept in p, so buf may go); or LR_ETOOBIG /
 * -ENOMEM, sticky. The next call's buf must begin with the len - *used
 * bytes not used (moved or with more appended, but the same bytes): what it
 * knows of them (where the next CR is) carries over. *ev borrows from buf
 * and from p until the next call on p; nothing is copied for an event whose
 * data is one line lying whole in buf (a provider's every event).
 */
int lr_sse_next(struct lr_sse *p, const void *buf, size_t len, size_t *used,
		struct lr_sse_event *ev);
/*
 * The pull form of lr_sse_finish, once the input has ended and every event
 * lr_sse_next had was taken: returns 1 with *ev the last event the end cut
 * short (ev->unterminated), 0 when there is none (from then on), or a
 * sticky error. *ev is borrowed until the next call on p.
 */
int lr_sse_end(struct lr_sse *p, struct lr_sse_event *ev);

/* The push form. Returns 0, LR_ETOOBIG, -ENOMEM or a callback's non-zero status. */
int lr_sse_feed(struct lr_sse *p, const void *buf, size_t len, lr_sse_cb cb, void *arg);
/* End of stream: processes a final unterminated line and dispatches a pending event. */
int lr_sse_finish(struct lr_sse *p, lr_sse_cb cb, void *arg);

#endif
