/*
 * session_pipe.c — forwards a hub subscription to a streamed HTTP response
 * as server-sent events, with no Lua per event (session_pipe.h).
 *
 * Why: an SSE stream used to be a Lua task woken per event to format and
 * write the frame, ~12 us of CPU per frame and subscriber; a turn's frames
 * to 1,000 subscribers serialized into ~80 ms. Here the subscription's
 * notify (forwarded by the owner) pulls every buffered event and formats
 * the frames into the request's staging buffer; the pipe then joins the
 * flush queue, and a deferred call sends each queued pipe's staged bytes as
 * one chunk (lr_httpd_req_send: straight to the socket when nothing is
 * queued on it), up to FLUSH_SLICE pipes per loop round. The queue is
 * process-wide (one loop).
 *
 * Sends, not formatting, are what a fan-out to 1,000 connections spends its
 * time on (the loopback send includes the receiver's TCP work), so frames
 * are gathered: while the session still has emissions queued or in flight
 * (lr_session_sub_more: the rest of a burst, a fraction of a millisecond
 * away) a pipe holds its staged bytes, at most HOLD_S, and the burst goes
 * out in one send per connection.
 *
 * The pipe ends once, with done(arg, why): the subscription overflowed
 * (the owner catches up from the journal after lr_session_pipe_last and
 * starts a new pipe), it ended (session closing), or the response can take
 * no more (client gone). done never runs inside lr_session_pipe_new or
 * lr_session_pipe_free; it may run inside lr_session_pipe_notify.
 */
#include "session_pipe.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pipes handed to the socket per loop round. */
#define FLUSH_SLICE 1024
/* Straight sends in a round from which they are shared with a worker. */
#define SHARE_MIN 64

struct lr_session_pipe {
	struct lr_session_pipe *qnext, *qprev; /* the flush queue or the held list */
	int queued, held;
	size_t staged;             /* bytes in the request's staging buffer */
	struct lr_session_sub *sub;
	struct lr_httpd_req *r;
	struct lr_loop *loop;
	struct lr_defer defer;     /* pumps outside the callers that asked */
	struct lr_timer beat;      /* heartbeat */
	double heartbeat;
	double last_write;         /* lr_loop_now of the last bytes sent */
	size_t high, low;
	uint64_t last;             /* the highest enduring seq sent or skipped */
	int paused;                /* waiting for the output to drain */
	int why;                   /* 0 while running, then an LR_SPIPE_* */
	void (*done)(void *arg, int why);
	void *arg;
};

/* The flush queue; its defer exists while pipes do. */
struct plist {
	struct lr_session_pipe *head, *tail;
};

static struct {
	struct lr_loop *loop;
	struct lr_defer defer;
	struct lr_timer hold;  /* ends the holds of the held list */
	struct plist queue;    /* staged, to send */
	struct plist held;     /* staged, waiting a little for more */
	size_t pipes;
	struct lr_session_pipe *batch[FLUSH_SLICE]; /* a round's straight sends */
	struct {
		struct lr_session_pipe *p;
		int why;
	} ends[FLUSH_SLICE]; /* a round's pipes to end */
} fq;

static void plist_remove(struct plist *l, struct lr_session_pipe *p)
{
	if (p->qprev)
		p->qprev->qnext = p->qnext;
	else
		l->head = p->qnext;
	if (p->qnext)
		p->qnext->qprev = p->qprev;
	else
		l->tail = p->qprev;
	p->qnext = p->qprev = NULL;
}

static void plist_append(struct plist *l, struct lr_session_pipe *p)
{
	p->qprev = l->tail;
	p->qnext = NULL;
	if (l->tail)
		l->tail->qnext = p;
	else
		l->head = p;
	l->tail = p;
}

static void queue_remove(struct lr_session_pipe *p)
{
	if (p->queued)
		plist_remove(&fq.queue, p);
	else if (p->held)
		plist_remove(&fq.held, p);
	p->queued = p->held = 0;
}

static void queue_add(struct lr_session_pipe *p)
{
	if (p->queued)
		return;
	queue_remove(p);
	plist_append(&fq.queue, p);
	p->queued = 1;
	lr_defer_schedule(&fq.defer);
}

/*
 * The session has more emissions on the way (its next append completes in
 * a fraction of a millisecond): hold the staged bytes for them, so the burst
 * of a turn costs one send per connection, not one per event. HOLD_S caps
 * the wait.
 */
#define HOLD_S 0.002

static void hold(struct lr_session_pipe *p)
{
	if (p->queued || p->held)
		return;
	plist_append(&fq.held, p);
	p->held = 1;
	if (!lr_timer_pending(&fq.hold))
		lr_timer_start(&fq.hold, HOLD_S);
}

static void on_hold(struct lr_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	while (fq.held.head)
		queue_add(fq.held.head);
}

static void pipe_end(struct lr_session_pipe *p, int why)
{
	if (p->why)
		return;
	p->why = why;
	lr_timer_stop(&p->beat);
	if (p->paused) {
		lr_httpd_req_cancel_drain(p->r);
		p->paused = 0;
	}
	p->done(p->arg, why);
}

/*
 * The frame of the last event staged, and that event (referenced, so its
 * address cannot come back as another one while it is cached). A fan-out
 * pumps one event into every subscriber's pipe in turn: it is framed once,
 * not once per subscriber (framing was most of a delivery's instructions).
 */
static struct {
	struct lr_session_event *ev;
	struct lr_buf frame;
} fc;

static void frame_cache_release(void)
{
	lr_session_event_unref(fc.ev);
	fc.ev = NULL;
	lr_buf_release(&fc.frame);
}

/*
 * The frame of ev in fc.frame: its name and id, then its data as "data: "
 * lines (split at LF, CR or CRLF as lr_httpd_req_append_lines does), then
 * the blank line. 0 or -ENOMEM.
 */
static int frame_event(struct lr_session_event *ev)
{
	if (fc.ev == ev)
		return 0;
	lr_session_event_unref(fc.ev);
	fc.ev = NULL;
	struct lr_buf *b = &fc.frame;
	if (!b->cap)
		lr_buf_init(b, SIZE_MAX);
	lr_buf_reset(b);
	char head[64];
	int n;
	if (ev->seq)
		n = snprintf(head, sizeof head, "event: enduring\nid: %" PRIu64 "\n", ev->seq);
	else
		n = snprintf(head, sizeof head, "event: ephemeral\n");
	int rc = lr_buf_add(b, head, (size_t)n);
	const char *s = ev->data;
	size_t len = ev->len, i = 0;
	while (!rc) {
		size_t j = i;
		while (j < len && s[j] != '\n' && s[j] != '\r')
			j++;
		rc = lr_buf_add(b, "data: ", 6);
		if (!rc)
			rc = lr_buf_add(b, s + i, j - i);
		if (!rc)
			rc = lr_buf_add(b, "\n", 1);
		if (rc || j >= len)
			break;
		if (s[j] == '\r' && j + 1 < len && s[j + 1] == '\n')
			j++;
		i = j + 1;
		if (i >= len)
			break; /* a trailing break ends the last line */
	}
	if (!rc)
		rc = lr_buf_add(b, "\n", 1);
	if (rc) {
		lr_buf_reset(b);
		return -ENOMEM;
	}
	ev->refs++;
	fc.ev = ev;
	return 0;
}

/* Stages one frame; returns its size, or -ENOMEM. */
static ssize_t stage_event(struct lr_session_pipe *p, struct lr_session_event *ev)
{
	if (frame_event(ev) || lr_httpd_req_append(p->r, fc.frame.data, fc.frame.len))
		return -ENOMEM;
	return (ssize_t)fc.frame.len;
}

/* A send's outcome: 0, or the reason to end. */
static int sent(struct lr_session_pipe *p, int rc)
{
	if (rc)
		return rc == -ENOMEM ? LR_SPIPE_NOMEM : LR_SPIPE_GONE;
	p->last_write = lr_loop_now(p->loop);
	return 0;
}

/* Sends what was staged as one chunk; 0, or the reason to end. */
static int flush(struct lr_session_pipe *p)
{
	queue_remove(p);
	if (!p->staged)
		return 0;
	p->staged = 0;
	return sent(p, lr_httpd_req_send(p->r));
}

static void send_write(size_t i, void *arg)
{
	(void)arg;
	lr_httpd_req_send_write(fq.batch[i]->r);
}

/*
 * One round of the flush queue, in three passes: each pipe's chunk framed
 * (lr_httpd_req_send_begin), then the sends that go straight to their
 * sockets, shared with a worker of the pool when there are SHARE_MIN or
 * more (lr_loop_share: a loopback send costs about as much in the kernel as
 * all the rest of a delivery, and on a machine with a core to spare two
 * threads send a burst to 1,000 subscribers in about half the time), then
 * what each socket did not take queued. The pipes that end are told last,
 * once no send is in flight.
 */
static void flush_queue(void)
{
	size_t nb = 0, ne = 0;
	for (int n = 0; fq.queue.head && n < FLUSH_SLICE; n++) {
		struct lr_session_pipe *p = fq.queue.head;
		queue_remove(p);
		if (!p->staged)
			continue;
		p->staged = 0;
		int rc = lr_httpd_req_send_begin(p->r);
		if (rc == 1) {
			fq.batch[nb++] = p;
			continue;
		}
		int why = sent(p, rc);
		if (why) {
			fq.ends[ne].p = p;
			fq.ends[ne++].why = why;
		}
	}
	if (nb >= SHARE_MIN)
		lr_loop_share(fq.loop, nb, send_write, NULL);
	else
		for (size_t i = 0; i < nb; i++)
			send_write(i, NULL);
	for (size_t i = 0; i < nb; i++) {
		struct lr_session_pipe *p = fq.batch[i];
		int why = sent(p, lr_httpd_req_send_end(p->r));
		if (why) {
			fq.ends[ne].p = p;
			fq.ends[ne++].why = why;
		}
	}
	for (size_t i = 0; i < ne; i++)
		pipe_end(fq.ends[i].p, fq.ends[i].why); /* done() only wakes its owner */
	if (fq.queue.head)
		lr_defer_schedule(&fq.defer);
}

static void on_flush(struct lr_defer *d, void *arg)
{
	(void)d;
	(void)arg;
	flush_queue();
}

/*
 * Takes every buffered event the output has room for. Above the high mark
 * it stops taking (the subscription's buffer holds the rest, and overflows
 * when the client is too slow) until the output drains to the low mark.
 */
static void pump(struct lr_session_pipe *p)
{
	int why = 0;
	while (!p->why && !p->paused) {
		if (lr_httpd_req_closed(p->r)) {
			why = LR_SPIPE_GONE;
			break;
		}
		if (lr_httpd_req_buffered(p->r) + p->staged > p->high) {
			if ((why = flush(p)))
				break;
			int rc = lr_httpd_req_notify_drain(p->r, p->low);
			if (rc == 0) {
				p->paused = 1;
				return;
			}
			if (rc != 1) {
				why = rc == -ENOMEM ? LR_SPIPE_NOMEM : LR_SPIPE_GONE;
				break;
			}
		}
		struct lr_session_event *ev;
		uint64_t catch_up = 0;
		int rc = lr_session_sub_next(p->sub, &ev, &catch_up);
		if (rc == 0)
			break;
		if (rc != 1) {
			why = rc == LR_ETOOBIG ? LR_SPIPE_OVERFLOW : LR_SPIPE_CLOSED;
			break;
		}
		if (ev->seq && ev->seq <= p->last) { /* sent already, by the journal's replay */
			lr_session_event_unref(ev);
			continue;
		}
		ssize_t n = stage_event(p, ev);
		if (n > 0 && ev->seq)
			p->last = ev->seq;
		lr_session_event_unref(ev);
		if (n < 0) {
			why = LR_SPIPE_NOMEM;
			break;
		}
		p->staged += (size_t)n;
	}
	if (p->staged) {
		if (!why && lr_session_sub_more(p->sub))
			hold(p);
		else
			queue_add(p);
	}
	if (why)
		pipe_end(p, why);
}

static void on_defer(struct lr_defer *d, void *arg)
{
	(void)d;
	pump(arg);
}

static void on_beat(struct lr_timer *t, void *arg)
{
	(void)t;
	struct lr_session_pipe *p = arg;
	if (p->why)
		return;
	double idle = lr_loop_now(p->loop) - p->last_write;
	if (idle < p->heartbeat * 0.999) {
		lr_timer_start(&p->beat, p->heartbeat - idle);
		return;
	}
	lr_timer_start(&p->beat, p->heartbeat);
	if (p->paused) /* bytes are queued already: a ping would only add to them */
		return;
	if (lr_httpd_req_append(p->r, ": ping\n\n", 8)) {
		pipe_end(p, LR_SPIPE_NOMEM);
		return;
	}
	p->staged += 8;
	p->last_write = lr_loop_now(p->loop); /* it goes out with the next flush */
	queue_add(p);
}

static void fq_unref(void)
{
	if (--fq.pipes == 0) {
		frame_cache_release();
		lr_defer_release(&fq.defer);
		lr_timer_release(&fq.hold);
		fq.loop = NULL;
	}
}

int lr_session_pipe_new(struct lr_loop *loop, struct lr_session_sub *sub,
			struct lr_httpd_req *r, const struct lr_session_pipe_config *c,
			struct lr_session_pipe **out)
{
	*out = NULL;
	if (fq.pipes && fq.loop != loop)
		return -EINVAL; /* NEVER: one loop per process */
	if (!fq.pipes && lr_defer_init(loop, &fq.defer, on_flush, NULL))
		return -ENOMEM;
	if (!fq.pipes && lr_timer_init(loop, &fq.hold, on_hold, NULL)) {
		lr_defer_release(&fq.defer);
		return -ENOMEM;
	}
	fq.loop = loop;
	fq.pipes++;
	struct lr_session_pipe *p = calloc(1, sizeof *p);
	if (!p || lr_defer_init(loop, &p->defer, on_defer, p)) {
		free(p);
		fq_unref();
		return -ENOMEM;
	}
	if (lr_timer_init(loop, &p->beat, on_beat, p)) {
		lr_defer_release(&p->defer);
		free(p);
		fq_unref();
		return -ENOMEM;
	}
	p->sub = sub;
	p->r = r;
	p->loop = loop;
	p->last = c->last;
	p->heartbeat = c->heartbeat;
	p->high = c->high ? c->high : (size_t)1 << 20;
	p->low = c->low ? c->low : (size_t)256 << 10;
	if (p->low > p->high)
		p->low = p->high;
	p->done = c->done;
	p->arg = c->arg;
	p->last_write = lr_loop_now(loop);
	if (p->heartbeat > 0)
		lr_timer_start(&p->beat, p->heartbeat);
	lr_defer_schedule(&p->defer); /* events buffered before the pipe started */
	*out = p;
	return 0;
}

void lr_session_pipe_notify(struct lr_session_pipe *p)
{
	if (p && !p->why && !p->paused)
		pump(p);
}

void lr_session_pipe_drained(struct lr_session_pipe *p)
{
	if (!p || p->why || !p->paused)
		return;
	p->paused = 0;
	/* Not from inside the output buffer's callback: pump on the next round. */
	lr_defer_schedule(&p->defer);
}

uint64_t lr_session_pipe_last(const struct lr_session_pipe *p)
{
	return p->last;
}

void lr_session_pipe_free(struct lr_session_pipe *p)
{
	if (!p)
		return;
	if (p->paused)
		lr_httpd_req_cancel_drain(p->r);
	flush(p); /* what was staged goes out before anything the owner writes next */
	lr_timer_release(&p->beat);
	lr_defer_release(&p->defer);
	free(p);
	fq_unref();
}
