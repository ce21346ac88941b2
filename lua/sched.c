/*
 * sched.c — Lua tasks as coroutines resumed by the host loop.
 *
 * A task is a coroutine plus bookkeeping: its parent and children (so that
 * cancellation reaches everything it started), the operation it waits on,
 * the tasks waiting for it, and its outcome. Tasks run only from the ready
 * queue, drained by a deferred loop callback, so no completion callback
 * ever resumes Lua re-entrantly.
 *
 * A binding that waits yields the scheduler marker with lua_yieldk. When
 * the task yields from inside a user coroutine, the coroutine wrappers in
 * stdlib/rig/init.lua pass the marker outward to the task's own thread and
 * pass the resumption back in, so user coroutines and waiting nest.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TASK_MT "rig.task"
#define WAITOP_MT "rig.op.wait"
#define SLEEPOP_MT "rig.op.sleep"

enum {
	T_NEW,      /* spawned, never resumed */
	T_READY,    /* in the ready queue */
	T_RUNNING,  /* resumed right now */
	T_WAITING,  /* yielded on an lr_wait */
	T_DONE,
	T_FAILED,
	T_CANCELLED,
};

struct lr_task {
	struct lr_state *S;
	lua_State *co;
	int co_ref;      /* anchors the coroutine while live */
	int self_ref;    /* anchors this userdata while live */
	int results_ref; /* a table of results once done */
	int nresults;
	int err_ref;     /* the error message with traceback once failed */
	int oom;         /* failed, and there was no memory to keep why: "not enough memory" */
	int state;
	int nargs;       /* arguments waiting on co for the first resume */
	int cancel_requested;
	int retrieved;   /* someone saw the error */
	int background;  /* holds no loop reference: never keeps the process running */
	unsigned id;
	struct lr_wait *wait;     /* what it waits on */
	struct lr_wait *waiters;  /* who waits on it */
	struct lr_task *parent, *first_child, *next_sib, *prev_sib;
	struct lr_task *ready_next;
	struct lr_task *live_next, *live_prev;
};

struct lr_sched {
	struct lr_defer ready_ev;
	struct lr_task *ready_head, *ready_tail;
	struct lr_task *current;
	struct lr_task *live;
	int nlive;
	unsigned next_id;
};

static char sched_marker;

void lr_sched_push_marker(lua_State *L)
{
	lua_pushlightuserdata(L, &sched_marker);
}

static void task_finish(struct lr_task *t, int state);

static void ready_push(struct lr_sched *s, struct lr_task *t)
{
	t->state = T_READY;
	t->ready_next = NULL;
	if (s->ready_tail)
		s->ready_tail->ready_next = t;
	else
		s->ready_head = t;
	s->ready_tail = t;
	lr_defer_schedule(&s->ready_ev);
}

static void child_unlink(struct lr_task *t)
{
	if (!t->parent)
		return;
	if (t->prev_sib)
		t->prev_sib->next_sib = t->next_sib;
	else
		t->parent->first_child = t->next_sib;
	if (t->next_sib)
		t->next_sib->prev_sib = t->prev_sib;
	t->parent = t->next_sib = t->prev_sib = NULL;
}

struct settle {
	struct lr_task *t;
	int status, nres;
	int state; /* how the task ends */
};

static int task_settle(lua_State *L);

/* Runs one task until it waits, finishes or fails. */
static void task_resume(struct lr_state *S, struct lr_task *t)
{
	struct lr_sched *s = S->sched;
	lua_State *L = S->L;
	int nargs = t->nargs, nres = 0;
	t->nargs = 0;
	t->state = T_RUNNING;
	s->current = t;
	S->running = t->co;
	int status = lua_resume(t->co, L, nargs, &nres);
	S->running = NULL;
	s->current = NULL;

	if (status == LUA_YIELD) {
		int marked = nres == 1 && lua_touserdata(t->co, -1) == &sched_marker;
		lua_pop(t->co, nres);
		if (marked && t->state == T_WAITING)
			return;
		if (marked && t->state == T_READY) /* woken before it yielded */
			return;
	}
	/*
	 * Keeping the results or the error allocates (a table, a traceback, a
	 * registry slot), and this runs from the loop, outside any pcall: an
	 * allocation failure here would be a panic. So it runs protected, and
	 * when even that fails the task fails with "not enough memory", kept
	 * as a flag (lr_task_push_error pushes the message Lua preallocated).
	 */
	struct settle c = { t, status, nres, T_FAILED };
	lua_pushcfunction(L, task_settle); /* the main stack always has room for two */
	lua_pushlightuserdata(L, &c);
	if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
		lua_pop(L, 1);
		if (t->co)
			lua_settop(t->co, 0);
		luaL_unref(L, LUA_REGISTRYINDEX, t->results_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, t->err_ref);
		t->results_ref = t->err_ref = LUA_NOREF;
		t->oom = 1;
		c.state = T_FAILED;
	}
	task_finish(t, c.state);
}

/* Protected, from task_resume: keeps a finished task's results or error. */
static int task_settle(lua_State *L)
{
	struct settle *c = lua_touserdata(L, 1);
	struct lr_task *t = c->t;
	struct lr_state *S = t->S;
	int nres = c->nres;
	if (c->status == LUA_YIELD) {
		lua_pushstring(L, "attempt to yield from a task outside a coroutine "
				  "(use rig.sleep to pause a task)");
		t->err_ref = luaL_ref(L, LUA_REGISTRYINDEX);
		c->state = T_FAILED;
		return 0;
	}
	if (c->status == LUA_OK) {
		/* stack of co: results */
		luaL_checkstack(L, nres + 1, "too many results");
		lua_createtable(L, nres, 0);
		lua_xmove(t->co, L, nres); /* stack: results table, r1..rn */
		for (int i = nres; i >= 1; i--)
			lua_rawseti(L, -1 - i, i);
		t->nresults = nres;
		t->results_ref = luaL_ref(L, LUA_REGISTRYINDEX);
		c->state = T_DONE;
		return 0;
	}
	/* An error: the dead coroutine's stack is still intact for the traceback. */
	const char *msg = NULL;
	if (luaL_callmeta(t->co, -1, "__tostring") && lua_type(t->co, -1) == LUA_TSTRING)
		msg = lua_tostring(t->co, -1);
	else if (lua_type(t->co, -1) == LUA_TSTRING || lua_type(t->co, -1) == LUA_TNUMBER)
		msg = lua_tostring(t->co, -1);
	if (!msg)
		msg = lua_pushfstring(t->co, "(error object is a %s value)", luaL_typename(t->co, -1));
	if (S->killed && S->kill_msg)
		msg = S->kill_msg;
	luaL_traceback(L, t->co, msg, 0);
	t->err_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	c->state = T_FAILED;
	return 0;
}

static void on_ready(struct lr_defer *d, void *arg)
{
	(void)d;
	struct lr_state *S = arg;
	struct lr_sched *s = S->sched;
	/* Run only what is ready now; tasks woken meanwhile get the next round. */
	struct lr_task *tail = s->ready_tail;
	while (s->ready_head && !S->killed) {
		struct lr_task *t = s->ready_head;
		s->ready_head = t->ready_next;
		if (!s->ready_head)
			s->ready_tail = NULL;
		t->ready_next = NULL;
		if (t->state == T_NEW && t->cancel_requested)
			task_finish(t, T_CANCELLED);
		else if (t->state == T_READY || t->state == T_NEW)
			task_resume(S, t);
		if (t == tail)
			break;
	}
	if (S->killed) {
		lr_loop_stop(S->loop);
		return;
	}
	if (s->ready_head)
		lr_defer_schedule(&s->ready_ev);
}

static void task_finish(struct lr_task *t, int state)
{
	struct lr_state *S = t->S;
	struct lr_sched *s = S->sched;
	lua_State *L = S->L;
	if (t->cancel_requested)
		state = T_CANCELLED;
	t->state = state;
	t->wait = NULL;

	/* Wake everyone waiting for this task. */
	struct lr_wait *w = t->waiters;
	t->waiters = NULL;
	while (w) {
		struct lr_wait *next = w->next;
		w->next = NULL;
		lr_sched_wake(w);
		w = next;
	}
	/* Orphan the children: they keep running, but no longer through us. */
	for (struct lr_task *c = t->first_child; c;) {
		struct lr_task *n = c->next_sib;
		c->parent = c->next_sib = c->prev_sib = NULL;
		c = n;
	}
	t->first_child = NULL;
	child_unlink(t);

	if (t->live_prev)
		t->live_prev->live_next = t->live_next;
	else
		s->live = t->live_next;
	if (t->live_next)
		t->live_next->live_prev = t->live_prev;
	t->live_next = t->live_prev = NULL;
	s->nlive--;

	luaL_unref(L, LUA_REGISTRYINDEX, t->co_ref);
	t->co_ref = LUA_NOREF;
	t->co = NULL;
	luaL_unref(L, LUA_REGISTRYINDEX, t->self_ref);
	t->self_ref = LUA_NOREF;
	if (!t->background)
		lr_loop_unref(S->loop);
}

struct lr_task *lr_sched_spawn(lua_State *L, int nargs)
{
	struct lr_state *S = lr_state_of(L);
	struct lr_sched *s = S->sched;
	int fidx = lua_gettop(L) - nargs;
	luaL_checktype(L, fidx, LUA_TFUNCTION);
	/* the task and its thread on this stack; the function and its arguments
	 * (any number: a script's command line) on the thread's */
	luaL_checkstack(L, 3, "too many arguments");

	struct lr_task *t = lua_newuserdatauv(L, sizeof *t, 0);
	memset(t, 0, sizeof *t);
	t->co_ref = t->self_ref = t->results_ref = t->err_ref = LUA_NOREF;
	t->state = T_DONE; /* "closed" until fully set up */
	luaL_setmetatable(L, TASK_MT);
	lua_State *co = lua_newthread(L);
	if (!lua_checkstack(co, nargs + 1))
		luaL_error(L, "too many arguments (%d)", nargs);
	/* stack: f a1..an task co */
	lua_rotate(L, fidx, 2); /* stack: task co f a1..an */
	lua_xmove(L, co, nargs + 1);
	t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pops co; stack: task */
	lua_pushvalue(L, -1);
	t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);

	t->S = S;
	t->co = co;
	t->nargs = nargs;
	t->id = ++s->next_id;
	t->parent = s->current;
	if (t->parent) {
		t->next_sib = t->parent->first_child;
		if (t->next_sib)
			t->next_sib->prev_sib = t;
		t->parent->first_child = t;
	}
	t->live_next = s->live;
	if (s->live)
		s->live->live_prev = t;
	s->live = t;
	s->nlive++;
	lr_loop_ref(S->loop);
	ready_push(s, t);
	t->state = T_NEW;
	return t;
}

struct lr_task *lr_sched_current(lua_State *L)
{
	return lr_state_of(L)->sched->current;
}

struct lr_task *lr_sched_enter(lua_State *L)
{
	struct lr_state *S = lr_state_of(L);
	struct lr_task *t = S->sched->current;
	if (!t)
		luaL_error(L, "not inside a task: waiting needs rig.spawn or the script's top level");
	if (t->cancel_requested)
		luaL_error(L, "cancelled");
	if (!lua_isyieldable(L))
		luaL_error(L, "cannot wait here: inside require, a metamethod or a C callback");
	return t;
}

int lr_sched_await(lua_State *L, struct lr_wait *w, lua_KContext ctx, lua_KFunction k)
{
	struct lr_task *t = lr_state_of(L)->sched->current;
	w->task = t;
	w->status = 0;
	t->wait = w;
	t->state = T_WAITING;
	lr_sched_push_marker(L);
	return lua_yieldk(L, 1, ctx, k);
}

void lr_sched_wake(struct lr_wait *w)
{
	struct lr_task *t = w->task;
	if (!t || t->wait != w)
		return;
	t->wait = NULL;
	ready_push(t->S->sched, t);
}

void lr_sched_resumed(lua_State *L, struct lr_wait *w)
{
	struct lr_task *t = w->task;
	if (w->status == LR_ECANCELLED || (t && t->cancel_requested))
		luaL_error(L, "cancelled");
}

int lr_task_cancel(struct lr_task *t)
{
	if (t->state >= T_DONE)
		return 0;
	if (t->cancel_requested)
		return 1;
	t->cancel_requested = 1;
	for (struct lr_task *c = t->first_child; c;) {
		struct lr_task *n = c->next_sib;
		lr_task_cancel(c);
		c = n;
	}
	switch (t->state) {
	case T_NEW:
		/* Never ran: it is still queued and finishes there without running. */
		break;
	case T_WAITING: {
		struct lr_wait *w = t->wait;
		t->wait = NULL;
		w->status = LR_ECANCELLED;
		if (w->cancel)
			w->cancel(w);
		ready_push(t->S->sched, t);
		break;
	}
	default:
		/* Ready or running: it raises "cancelled" at its next wait. */
		break;
	}
	return 1;
}

int lr_task_done(const struct lr_task *t)
{
	return t->state >= T_DONE;
}

int lr_task_outcome(const struct lr_task *t)
{
	switch (t->state) {
	case T_DONE: return 0;
	case T_FAILED: return 1;
	case T_CANCELLED: return 2;
	}
	return -1;
}

void lr_task_push_error(lua_State *L, struct lr_task *t)
{
	t->retrieved = 1;
	if (t->err_ref != LUA_NOREF)
		lua_rawgeti(L, LUA_REGISTRYINDEX, t->err_ref);
	else if (t->oom)
		lua_pushliteral(L, "not enough memory");
	else
		lua_pushstring(L, "cancelled");
}

void lr_sched_cancel_all(struct lr_state *S)
{
	/* Cancel roots first; cancellation walks the children. */
	for (struct lr_task *t = S->sched->live; t;) {
		struct lr_task *n = t->live_next;
		lr_task_cancel(t);
		t = n;
	}
}

int lr_sched_live(struct lr_state *S)
{
	return S->sched->nlive;
}

/* Lua API: tasks. */

static struct lr_task *check_task(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, TASK_MT);
}

static const char *task_status_name(const struct lr_task *t)
{
	static const char *const names[] = {
		"pending", "ready", "running", "waiting", "done", "failed", "cancelled"
	};
	return names[t->state];
}

/* Pushes what wait() returns for a finished task. */
static int task_push_outcome(lua_State *L, struct lr_task *t)
{
	switch (t->state) {
	case T_DONE:
		lua_rawgeti(L, LUA_REGISTRYINDEX, t->results_ref);
		for (int i = 1; i <= t->nresults; i++)
			lua_rawgeti(L, -i, i);
		/* stack: results r1..rn */
		lua_remove(L, -1 - t->nresults);
		return t->nresults;
	case T_FAILED:
		luaL_pushfail(L);
		lr_task_push_error(L, t);
		lua_pushliteral(L, "error");
		return 3;
	default:
		t->retrieved = 1;
		luaL_pushfail(L);
		lua_pushliteral(L, "cancelled");
		lua_pushliteral(L, "cancelled");
		return 3;
	}
}

struct waitop {
	struct lr_wait wait;
	struct lr_task *target;
	struct lr_timer timer;
	int timed_out;
};

static void waitop_unlink(struct waitop *op)
{
	struct lr_wait **pp = &op->target->waiters;
	while (*pp && *pp != &op->wait)
		pp = &(*pp)->next;
	if (*pp)
		*pp = op->wait.next;
	op->wait.next = NULL;
}

static void waitop_cancel(struct lr_wait *w)
{
	struct waitop *op = (struct waitop *)w;
	waitop_unlink(op);
	lr_timer_stop(&op->timer);
}

static void waitop_timeout(struct lr_timer *tm, void *arg)
{
	(void)tm;
	struct waitop *op = arg;
	waitop_unlink(op);
	op->timed_out = 1;
	lr_sched_wake(&op->wait);
}

static int waitop_gc(lua_State *L)
{
	struct waitop *op = lua_touserdata(L, 1);
	lr_timer_release(&op->timer);
	return 0;
}

static int task_wait_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct waitop *op = (struct waitop *)ctx;
	lr_timer_stop(&op->timer);
	lr_sched_resumed(L, &op->wait);
	if (op->timed_out)
		return lr_pushfail(L, LR_ETIMEOUT, "task did not finish in time");
	return task_push_outcome(L, op->target);
}

/* task:wait([timeout]) -> results... | nil, message, "error"|"cancelled"|"timeout" */
static int task_wait(lua_State *L)
{
	struct lr_task *t = check_task(L, 1);
	double timeout = luaL_optnumber(L, 2, -1);
	if (t->state >= T_DONE)
		return task_push_outcome(L, t);
	struct lr_task *me = lr_sched_enter(L);
	if (me == t)
		return luaL_error(L, "a task cannot wait for itself");
	struct waitop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, WAITOP_MT);
	op->target = t;
	op->wait.cancel = waitop_cancel;
	op->wait.next = t->waiters;
	t->waiters = &op->wait;
	if (timeout >= 0) {
		if (lr_timer_init(lr_state_of(L)->loop, &op->timer, waitop_timeout, op))
			return luaL_error(L, "out of memory");
		lr_timer_start(&op->timer, timeout);
	}
	return lr_sched_await(L, &op->wait, (lua_KContext)op, task_wait_k);
}

static int task_cancel(lua_State *L)
{
	lua_pushboolean(L, lr_task_cancel(check_task(L, 1)));
	return 1;
}

static int task_status(lua_State *L)
{
	lua_pushstring(L, task_status_name(check_task(L, 1)));
	return 1;
}

static int task_tostring(lua_State *L)
{
	struct lr_task *t = check_task(L, 1);
	lua_pushfstring(L, "task %d (%s)", (int)t->id, task_status_name(t));
	return 1;
}

static int task_gc(lua_State *L)
{
	struct lr_task *t = lua_touserdata(L, 1);
	struct lr_state *S = lr_state_of(L);
	if (t->state == T_FAILED && !t->retrieved && (t->err_ref != LUA_NOREF || t->oom)) {
		lr_task_push_error(L, t);
		char lead[48];
		snprintf(lead, sizeof lead, "unhandled error in task %u: ", t->id);
		lr__report_error(S, lead, lua_tostring(L, -1));
		lua_pop(L, 1);
		S->unhandled++;
	}
	if (t->state >= T_DONE) {
		luaL_unref(L, LUA_REGISTRYINDEX, t->results_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, t->err_ref);
		t->results_ref = t->err_ref = LUA_NOREF;
	}
	return 0;
}

/* rig.core.spawn(fn, ...) -> task */
static int core_spawn(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	lr_sched_spawn(L, lua_gettop(L) - 1);
	return 1;
}

/*
 * rig.core.spawn_detached(fn, ...) -> task: a task without a parent, so the
 * spawner's cancellation never reaches it (a session's loop drivers started
 * from inside another loop's turn: delegation).
 */
static int core_spawn_detached(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	struct lr_task *t = lr_sched_spawn(L, lua_gettop(L) - 1);
	child_unlink(t);
	return 1;
}

/*
 * rig.core.spawn_background(fn, ...) -> task: a detached task that holds no
 * loop reference, so it never keeps the process running by itself (a
 * reader of an MCP server's stdout waits forever for the next line; the
 * script that made the client must still end when its work is done).
 */
static int core_spawn_background(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	struct lr_task *t = lr_sched_spawn(L, lua_gettop(L) - 1);
	child_unlink(t);
	t->background = 1;
	lr_loop_unref(lr_state_of(L)->loop);
	return 1;
}

/* rig.core.current() -> the running task, or nil */
static int core_current(lua_State *L)
{
	struct lr_task *t = lr_sched_current(L);
	if (!t)
		return 0;
	lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref);
	return 1;
}

struct sleepop {
	struct lr_wait wait;
	struct lr_timer timer;
};

static void sleep_fire(struct lr_timer *tm, void *arg)
{
	(void)tm;
	lr_sched_wake(&((struct sleepop *)arg)->wait);
}

static void sleep_cancel(struct lr_wait *w)
{
	lr_timer_stop(&((struct sleepop *)w)->timer);
}

static int sleepop_gc(lua_State *L)
{
	lr_timer_release(&((struct sleepop *)lua_touserdata(L, 1))->timer);
	return 0;
}

static int sleep_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct sleepop *op = (struct sleepop *)ctx;
	lr_sched_resumed(L, &op->wait);
	lr_timer_release(&op->timer);
	return 0;
}

/* rig.core.sleep(seconds) */
static int core_sleep(lua_State *L)
{
	double secs = luaL_checknumber(L, 1);
	luaL_argcheck(L, secs >= 0 && secs == secs, 1, "must be a non-negative number");
	lr_sched_enter(L);
	struct sleepop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, SLEEPOP_MT);
	if (lr_timer_init(lr_state_of(L)->loop, &op->timer, sleep_fire, op))
		return luaL_error(L, "out of memory");
	op->wait.cancel = sleep_cancel;
	lr_timer_start(&op->timer, secs);
	return lr_sched_await(L, &op->wait, (lua_KContext)op, sleep_k);
}

static int core_now(lua_State *L)
{
	lua_pushnumber(L, (double)lr_now_ns() / 1e9);
	return 1;
}

static int core_time(lua_State *L)
{
	lua_pushnumber(L, lr_wall_seconds());
	return 1;
}

/*
 * Conditions: c:wait([timeout]) parks the task until c:signal() wakes
 * every waiter. Waiters are the wait ops on the coroutine stacks, linked
 * in the condition; a cancelled or timed-out waiter unlinks itself.
 */
#define COND_MT "rig.cond"
#define CONDOP_MT "rig.op.cond"

struct cond {
	struct lr_wait *waiters;
};

struct condop {
	struct lr_wait wait; /* wait.next links the condition's waiters */
	struct cond *c;
	struct lr_timer timer;
	int has_timer, timed_out;
};

static void condop_unlink(struct condop *op)
{
	if (!op->c)
		return;
	struct lr_wait **pp = &op->c->waiters;
	while (*pp && *pp != &op->wait)
		pp = &(*pp)->next;
	if (*pp)
		*pp = op->wait.next;
	op->wait.next = NULL;
	op->c = NULL;
}

static void cond_cancel(struct lr_wait *w)
{
	struct condop *op = (struct condop *)w;
	condop_unlink(op);
	if (op->has_timer)
		lr_timer_stop(&op->timer);
}

static void cond_timeout(struct lr_timer *t, void *arg)
{
	(void)t;
	struct condop *op = arg;
	condop_unlink(op);
	op->timed_out = 1;
	lr_sched_wake(&op->wait);
}

static int condop_gc(lua_State *L)
{
	struct condop *op = lua_touserdata(L, 1);
	condop_unlink(op);
	if (op->has_timer)
		lr_timer_release(&op->timer);
	op->has_timer = 0;
	return 0;
}

static int cond_wait_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct condop *op = (struct condop *)ctx;
	if (op->has_timer)
		lr_timer_stop(&op->timer);
	condop_unlink(op);
	lr_sched_resumed(L, &op->wait);
	if (op->timed_out) {
		luaL_pushfail(L);
		lua_pushliteral(L, "timeout");
		lua_pushliteral(L, "timeout");
		return 3;
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* c:wait([timeout]) -> true | nil, "timeout", "timeout" */
static int cond_wait(lua_State *L)
{
	struct cond *c = luaL_checkudata(L, 1, COND_MT);
	double timeout = luaL_optnumber(L, 2, -1);
	luaL_argcheck(L, timeout == timeout, 2, "must be a number");
	lr_sched_enter(L);
	struct condop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, CONDOP_MT);
	op->c = c;
	op->wait.cancel = cond_cancel;
	if (timeout >= 0) {
		if (lr_timer_init(lr_state_of(L)->loop, &op->timer, cond_timeout, op))
			return luaL_error(L, "out of memory");
		op->has_timer = 1;
		lr_timer_start(&op->timer, timeout);
	}
	/* Appended at the tail: waiters wake in the order they came. */
	struct lr_wait **pp = &c->waiters;
	while (*pp)
		pp = &(*pp)->next;
	op->wait.next = NULL;
	*pp = &op->wait;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, cond_wait_k);
}

/* c:signal() -> n: wakes every waiter */
static int cond_signal(lua_State *L)
{
	struct cond *c = luaL_checkudata(L, 1, COND_MT);
	struct lr_wait *w = c->waiters;
	c->waiters = NULL;
	lua_Integer n = 0;
	while (w) {
		struct lr_wait *next = w->next;
		struct condop *op = (struct condop *)w;
		w->next = NULL;
		op->c = NULL;
		if (op->has_timer)
			lr_timer_stop(&op->timer);
		lr_sched_wake(w);
		n++;
		w = next;
	}
	lua_pushinteger(L, n);
	return 1;
}

/* A condition collected while tasks wait on it: they keep waiting (for a timeout or a cancel). */
static int cond_gc(lua_State *L)
{
	struct cond *c = luaL_checkudata(L, 1, COND_MT);
	for (struct lr_wait *w = c->waiters; w;) {
		struct lr_wait *next = w->next;
		w->next = NULL;
		((struct condop *)w)->c = NULL;
		w = next;
	}
	c->waiters = NULL;
	return 0;
}

/* rig.core.cond() -> c */
static int core_cond(lua_State *L)
{
	struct cond *c = lua_newuserdatauv(L, sizeof *c, 0);
	c->waiters = NULL;
	luaL_setmetatable(L, COND_MT);
	return 1;
}

/* rig.core.yield_marker(): the value a waiting task yields (for the coroutine wrappers). */
static int core_marker(lua_State *L)
{
	lr_sched_push_marker(L);
	return 1;
}

void lr__sched_open(lua_State *L)
{
	static const luaL_Reg task_methods[] = {
		{ "wait", task_wait },
		{ "cancel", task_cancel },
		{ "status", task_status },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, TASK_MT);
	luaL_newlib(L, task_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, task_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushcfunction(L, task_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, task_cancel);
	lua_setfield(L, -2, "__close");
	lua_pop(L, 1);

	luaL_newmetatable(L, WAITOP_MT);
	lua_pushcfunction(L, waitop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	luaL_newmetatable(L, SLEEPOP_MT);
	lua_pushcfunction(L, sleepop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg cond_methods[] = {
		{ "wait", cond_wait },
		{ "signal", cond_signal },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, COND_MT);
	luaL_newlib(L, cond_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, cond_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	luaL_newmetatable(L, CONDOP_MT);
	lua_pushcfunction(L, condop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg funcs[] = {
		{ "cond", core_cond },
		{ "spawn", core_spawn },
		{ "spawn_detached", core_spawn_detached },
		{ "spawn_background", core_spawn_background },
		{ "current", core_current },
		{ "sleep", core_sleep },
		{ "now", core_now },
		{ "time", core_time },
		{ "yield_marker", core_marker },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, funcs, 0);
}

int lr_sched_open(struct lr_state *S)
{
	struct lr_sched *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	if (lr_defer_init(S->loop, &s->ready_ev, on_ready, S)) {
		free(s);
		return -ENOMEM;
	}
	S->sched = s;
	return 0;
}

void lr_sched_close(struct lr_state *S)
{
	if (!S->sched)
		return;
	lr_defer_release(&S->sched->ready_ev);
	free(S->sched);
	S->sched = NULL;
}
