/*
 * session_pipe.h — session pipes (host/session_pipe.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_SESSION_PIPE_H
#define LR_HOST_SESSION_PIPE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"
#include "session.h"
#include "http_server.h"

/*
 * A pipe forwards a session subscription's events to a started, streamed
 * HTTP response as server-sent events, in C (rig.serve's live SSE):
 *   enduring:  "event: enduring\nid: SEQ\ndata: JSON\n\n"
 *   ephemeral: "event: ephemeral\ndata: JSON\n\n"
 * (a data line per line of JSON, as rig.http's res:event frames them) and
 * ": ping\n\n" after heartbeat seconds with nothing sent. Enduring events
 * with seq <= last are skipped (sent already by a replay of the journal).
 * Frames are gathered per connection and sent one chunk per loop round (held
 * up to 2 ms while the session has more emissions on the way, so a turn's
 * burst costs one send per connection). Above high bytes
 * queued on the connection it stops taking events (the subscription's
 * buffer holds them, and overflows for a client too slow) until the queue
 * drains to low.
 *
 * The owner keeps sub and r alive while the pipe lives, forwards the
 * subscription's notify to lr_session_pipe_notify and the request's on_drain
 * to lr_session_pipe_drained. done(arg, why) runs once, on the loop, when
 * the pipe ends (never inside new or free; it may run inside notify); the
 * pipe sends nothing afterwards. lr_session_pipe_last is then where a
 * journal catch-up resumes. free stops a pipe at any time (done not called).
 */
struct lr_session_pipe;
enum {
	LR_SPIPE_OVERFLOW = 1, /* an enduring event did not fit the subscription */
	LR_SPIPE_CLOSED,       /* the subscription ended (closed, session closing) */
	LR_SPIPE_GONE,         /* the client is gone or the response ended */
	LR_SPIPE_NOMEM,
};
struct lr_session_pipe_config {
	uint64_t last;          /* enduring seqs <= last are not sent */
	double heartbeat;       /* seconds; <= 0: no pings */
	size_t high, low;       /* output marks; 0: 1 MiB and 256 KiB (rig.http's) */
	void (*done)(void *arg, int why);
	void *arg;
};
/* 0 and *out, or -ENOMEM (done is then never called). */
int lr_session_pipe_new(struct lr_loop *loop, struct lr_session_sub *sub,
			struct lr_httpd_req *r, const struct lr_session_pipe_config *c,
			struct lr_session_pipe **out);
void lr_session_pipe_notify(struct lr_session_pipe *p);
void lr_session_pipe_drained(struct lr_session_pipe *p);
/* The highest enduring seq sent or skipped (the config's last at first). */
uint64_t lr_session_pipe_last(const struct lr_session_pipe *p);
/* Stops and frees; accepts NULL. */
void lr_session_pipe_free(struct lr_session_pipe *p);

#endif
