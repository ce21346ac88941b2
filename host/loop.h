/*
 * loop.h — the event loop, timers, fd watches, deferred calls and the worker pool (host/loop.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_LOOP_H
#define LR_HOST_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

struct event;
struct event_base;
struct lr_loop;

/*
 * The loop. lr_loop_run runs until lr_loop_stop is called or nothing holds
 * a reference (lr_loop_ref): tasks, servers and in-flight work hold one
 * each, so the process ends when its work is done.
 */
int lr_loop_new(struct lr_loop **out);
void lr_loop_free(struct lr_loop *loop);
int lr_loop_run(struct lr_loop *loop);
/* Runs at most one round of ready events without blocking when nowait. */
int lr_loop_once(struct lr_loop *loop, int nowait);
void lr_loop_stop(struct lr_loop *loop);
int lr_loop_stopped(struct lr_loop *loop);
void lr_loop_ref(struct lr_loop *loop);
void lr_loop_unref(struct lr_loop *loop);
int lr_loop_refs(struct lr_loop *loop);
/* The libevent base, for host/ and lua/ code that builds on libevent. */
struct event_base *lr_loop_base(struct lr_loop *loop);
/* The loop's cached clock, in seconds (monotonic, from an arbitrary origin). */
double lr_loop_now(struct lr_loop *loop);

/*
 * Timers. A timer is embedded by its owner: init, start any number of
 * times, release. The callback runs on the loop; starting an armed timer
 * re-arms it.
 */
struct lr_timer {
	struct event *ev;
	void (*cb)(struct lr_timer *t, void *arg);
	void *arg;
};
int lr_timer_init(struct lr_loop *loop, struct lr_timer *t,
		  void (*cb)(struct lr_timer *t, void *arg), void *arg);
void lr_timer_start(struct lr_timer *t, double seconds);
void lr_timer_stop(struct lr_timer *t);
int lr_timer_pending(const struct lr_timer *t);
void lr_timer_release(struct lr_timer *t);

/* File descriptor watches; events is LR_READ | LR_WRITE, persistent. */
enum { LR_READ = 1, LR_WRITE = 2 };
struct lr_watch {
	struct event *ev;
	int fd;
	void (*cb)(struct lr_watch *w, int events, void *arg);
	void *arg;
};
int lr_watch_init(struct lr_loop *loop, struct lr_watch *w, int fd,
		  void (*cb)(struct lr_watch *w, int events, void *arg), void *arg);
int lr_watch_start(struct lr_watch *w, int events);
void lr_watch_stop(struct lr_watch *w);
void lr_watch_release(struct lr_watch *w);

/*
 * Deferred calls: cb runs on the next loop round, never inside the caller.
 * One lr_defer is one pending call at most; scheduling it again while
 * pending is a no-op.
 */
struct lr_defer {
	struct event *ev;
	void (*cb)(struct lr_defer *d, void *arg);
	void *arg;
};
int lr_defer_init(struct lr_loop *loop, struct lr_defer *d,
		  void (*cb)(struct lr_defer *d, void *arg), void *arg);
void lr_defer_schedule(struct lr_defer *d);
void lr_defer_release(struct lr_defer *d);

/*
 * Signals. lr_loop_on_signal makes cb run on the loop after signo arrives.
 * The async hook, if set, is called inside the real signal handler and must
 * be async-signal-safe: lua/ uses it to set a Lua hook so that a busy Lua
 * chunk notices Ctrl-C without returning to the loop.
 */
int lr_loop_on_signal(struct lr_loop *loop, int signo,
		      void (*cb)(int signo, void *arg), void *arg);
void lr_loop_set_async_signal_hook(void (*hook)(int signo));

/*
 * The worker pool. work() runs on a pool thread; done() runs afterwards on
 * the loop thread. A submitted item holds a loop reference until done().
 * Workers never touch a lua_State.
 */
struct lr_work {
	void (*work)(struct lr_work *w);
	void (*done)(struct lr_work *w);
	struct lr_work *next; /* owned by the pool while submitted */
};
int lr_pool_submit(struct lr_loop *loop, struct lr_work *w);
/*
 * Hands a finished item to the loop from any thread: w->done(w) runs on the
 * loop thread soon after (w->work is not called). Use it for completions
 * that arrive on threads the loop does not own (a storage backend's writer
 * thread). The caller must have taken a loop reference with lr_loop_ref,
 * on the loop thread, when it started the work; it is dropped after done().
 */
void lr_loop_post(struct lr_loop *loop, struct lr_work *w);

/*
 * Runs fn(i, arg) for every i in [0, n), on the calling loop thread and, at
 * the same time, on one worker of the pool when one takes it up, each call
 * once; returns when every call has returned. For a batch of independent
 * system calls the loop would otherwise make one after another (a fan-out's
 * sends: host/session_pipe.c). fn must touch nothing another call touches
 * and nothing of the loop's (no timers, events or callbacks): only what
 * item i owns. When the pool is busy the loop thread runs every call
 * itself, so the call never waits on a queue.
 */
void lr_loop_share(struct lr_loop *loop, size_t n, void (*fn)(size_t i, void *arg), void *arg);

#endif
