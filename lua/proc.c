/*
 * proc.c — the Lua binding of process supervision (host/proc.c):
 * rig.core.process_run, rig.core.process_spawn and the rig.process handle.
 *
 * Options are checked here, strictly: unknown fields and wrong types raise
 * naming the field. Failing to start (no such program, bad cwd) is an
 * expected failure: nil, message, code. A non-zero exit is a result.
 *
 * Cancellation of a task waiting in run, read, write or wait kills the
 * child's process group at once. A handle that is closed or collected
 * kills the group and reaps the child (in the background if it is not dead
 * yet; a sentinel reaps the rest when the state closes).
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define PROC_MT "rig.process"
#define RUNOP_MT "rig.op.process_run"
#define HOP_MT "rig.op.process"
#define SENTINEL_MT "rig.process.sentinel"

#define RUN_OUTPUT_LIMIT (1u << 20)
#define SPAWN_BUFFER (64u << 10)

extern char **environ;

/* ---- options ---- */

struct spawn_req {
	struct lr_proc_opts o;
	const char *stdin_data; /* run, or spawn with a data string */
	size_t stdin_len;
};

static const char *const run_fields[] = {
	"argv", "cwd", "env", "env_clear", "stdin", "timeout", "output_limit", NULL
};
static const char *const spawn_fields[] = {
	"argv", "cwd", "env", "env_clear", "stdin", "stdout", "stderr", "timeout", NULL
};

static int field_known(const char *const *fields, const char *k)
{
	for (; *fields; fields++)
		if (strcmp(*fields, k) == 0)
			return 1;
	return 0;
}

static int valid_env_name(const char *s, size_t n)
{
	return n > 0 && !memchr(s, '=', n) && strlen(s) == n;
}

/*
 * Builds the environment for env (a table at idx) into a NULL-terminated
 * array kept in a userdata left on the stack; the strings are anchored in a
 * table also left on the stack. stack: ... strings array
 */
static char **build_env(lua_State *L, int idx, int clear, const char *fname)
{
	lua_newtable(L); /* anchors */
	int anchors = lua_gettop(L);
	int n = 0;
	/* Validate and count the overrides first. */
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		size_t kl = 0;
		const char *kname = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &kl) : NULL;
		if (!kname || !valid_env_name(kname, kl))
			luaL_error(L, "%s: 'env' keys must be variable names (non-empty, no '=')", fname);
		const char *k = lua_tostring(L, -2);
		int t = lua_type(L, -1);
		if (t == LUA_TSTRING || t == LUA_TNUMBER) {
			size_t vl;
			const char *v = lua_tolstring(L, -1, &vl);
			if (strlen(v) != vl)
				luaL_error(L, "%s: 'env.%s' contains a NUL byte", fname, k);
			lua_pushfstring(L, "%s=%s", k, v);
			lua_rawseti(L, anchors, ++n);
		} else if (!(t == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
			luaL_error(L, "%s: 'env.%s' must be a string or false", fname, k);
		}
		lua_pop(L, 1);
	}
	size_t total = (size_t)n;
	if (!clear)
		for (char **e = environ; *e; e++)
			total++;
	char **arr = lua_newuserdatauv(L, (total + 1) * sizeof *arr, 0);
	size_t j = 0;
	if (!clear) {
		for (char **e = environ; *e; e++) {
			const char *eq = strchr(*e, '=');
			if (!eq)
				continue;
			lua_pushlstring(L, *e, (size_t)(eq - *e));
			int overridden = lua_rawget(L, idx) != LUA_TNIL;
			lua_pop(L, 1);
			if (!overridden)
				arr[j++] = *e;
		}
	}
	for (int i = 1; i <= n; i++) {
		lua_rawgeti(L, anchors, i);
		arr[j++] = (char *)lua_tostring(L, -1);
		lua_pop(L, 1);
	}
	arr[j] = NULL;
	return arr;
}

int lr__proc_stdio_mode(lua_State *L, int idx, const char *fname, const char *field)
{
	int t = lua_getfield(L, idx, field);
	int mode = LR_PROC_PIPE;
	if (t != LUA_TNIL) {
		const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
		if (strcmp(s, "pipe") == 0)
			mode = LR_PROC_PIPE;
		else if (strcmp(s, "inherit") == 0)
			mode = LR_PROC_INHERIT;
		else if (strcmp(s, "null") == 0)
			mode = LR_PROC_NULL;
		else
			luaL_error(L, "%s: '%s' must be \"pipe\", \"inherit\" or \"null\"", fname, field);
	}
	lua_pop(L, 1);
	return mode;
}

/*
 * Reads the options table at index 1 into r. Leaves anchors (argv array,
 * environment) on the stack; they must stay there until the spawn.
 */
static void parse_opts(lua_State *L, int is_run, struct spawn_req *r)
{
	const char *fname = is_run ? "rig.process.run" : "rig.process.spawn";
	const char *const *fields = is_run ? run_fields : spawn_fields;
	if (lua_type(L, 1) != LUA_TTABLE)
		luaL_error(L, "%s: expects an options table", fname);
	lua_settop(L, 1);
	memset(r, 0, sizeof *r);

	lua_pushnil(L);
	while (lua_next(L, 1)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING || !field_known(fields, lua_tostring(L, -1)))
			luaL_error(L, "%s: unknown option '%s'", fname, luaL_tolstring(L, -1, NULL));
	}

	/* argv */
	if (lua_getfield(L, 1, "argv") != LUA_TTABLE || lua_rawlen(L, -1) == 0)
		luaL_error(L, "%s: 'argv' must be a non-empty list of strings", fname);
	int argvi = lua_gettop(L);
	lua_Unsigned argc = lua_rawlen(L, argvi);
	if (argc > 100000)
		luaL_error(L, "%s: 'argv' has too many elements", fname);
	char **argv = lua_newuserdatauv(L, ((size_t)argc + 1) * sizeof *argv, 0);
	for (lua_Unsigned i = 1; i <= argc; i++) {
		if (lua_rawgeti(L, argvi, (lua_Integer)i) != LUA_TSTRING)
			luaL_error(L, "%s: 'argv[%d]' must be a string", fname, (int)i);
		size_t len;
		const char *s = lua_tolstring(L, -1, &len);
		if (strlen(s) != len)
			luaL_error(L, "%s: 'argv[%d]' contains a NUL byte", fname, (int)i);
		if (i == 1 && len == 0)
			luaL_error(L, "%s: 'argv[1]' must not be empty", fname);
		argv[i - 1] = (char *)s; /* anchored by the argv table */
		lua_pop(L, 1);
	}
	argv[argc] = NULL;
	r->o.argv = argv;
	/* stack: opts argv_table argv_array */

	int t = lua_getfield(L, 1, "cwd");
	if (t == LUA_TSTRING) {
		size_t len;
		r->o.cwd = lua_tolstring(L, -1, &len);
		if (strlen(r->o.cwd) != len || len == 0)
			luaL_error(L, "%s: 'cwd' must be a non-empty path", fname);
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'cwd' must be a string", fname);
	}
	lua_pop(L, 1); /* the string stays anchored by the options table */

	t = lua_getfield(L, 1, "env_clear");
	if (t != LUA_TNIL && t != LUA_TBOOLEAN)
		luaL_error(L, "%s: 'env_clear' must be a boolean", fname);
	int clear = lua_toboolean(L, -1);
	lua_pop(L, 1);
	t = lua_getfield(L, 1, "env");
	if (t == LUA_TTABLE) {
		int envi = lua_gettop(L);
		r->o.envp = build_env(L, envi, clear, fname);
		/* stack: ... env anchors array */
	} else if (t == LUA_TNIL) {
		lua_pop(L, 1);
		if (clear) {
			char **empty = lua_newuserdatauv(L, sizeof *empty, 0);
			empty[0] = NULL;
			r->o.envp = empty;
		}
	} else {
		luaL_error(L, "%s: 'env' must be a table", fname);
	}

	t = lua_getfield(L, 1, "timeout");
	if (t == LUA_TNUMBER) {
		double v = lua_tonumber(L, -1);
		if (!(v >= 0) || v > 1e9)
			luaL_error(L, "%s: 'timeout' must be a non-negative number of seconds", fname);
		r->o.timeout = v > 0 ? v : 1e-6;
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'timeout' must be a number", fname);
	}
	lua_pop(L, 1);

	r->o.stdio[0] = LR_PROC_NULL;
	t = lua_getfield(L, 1, "stdin");
	if (t == LUA_TSTRING) {
		size_t len;
		const char *s = lua_tolstring(L, -1, &len);
		r->o.stdio[0] = LR_PROC_PIPE;
		if (is_run || strcmp(s, "pipe") != 0) {
			r->stdin_data = s; /* anchored by the options table */
			r->stdin_len = len;
		}
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'stdin' must be a string", fname);
	}
	lua_pop(L, 1);

	if (is_run) {
		size_t limit = RUN_OUTPUT_LIMIT;
		t = lua_getfield(L, 1, "output_limit");
		if (t != LUA_TNIL) {
			int isint;
			lua_Integer v = lua_tointegerx(L, -1, &isint);
			if (t != LUA_TNUMBER || !isint || v < 0)
				luaL_error(L, "%s: 'output_limit' must be a non-negative integer", fname);
			limit = (size_t)v;
		}
		lua_pop(L, 1);
		r->o.stdio[1] = r->o.stdio[2] = LR_PROC_PIPE;
		r->o.out_cap[1] = r->o.out_cap[2] = limit;
		r->o.out_drop = 1;
	} else {
		r->o.stdio[1] = lr__proc_stdio_mode(L, 1, fname, "stdout");
		r->o.stdio[2] = lr__proc_stdio_mode(L, 1, fname, "stderr");
		r->o.out_cap[1] = r->o.out_cap[2] = SPAWN_BUFFER;
		r->o.out_drop = 0;
	}
}

/* Spawns; on failure pushes nil, message, code and returns 3, else 0. */
static int do_spawn(lua_State *L, struct spawn_req *r, struct lr_proc **out)
{
	struct lr_err err = { "" };
	int rc = lr_proc_spawn(lr_state_of(L)->loop, &r->o, out, &err);
	if (rc)
		return lr_pushfail(L, rc, "process: %s", err.msg);
	if (r->stdin_data) {
		rc = lr_proc_write(*out, r->stdin_data, r->stdin_len);
		if (rc && rc != -EPIPE) { /* a child that ignores its stdin is fine */
			lr_proc_close(*out);
			*out = NULL;
			return lr_pushfail(L, rc, "process: cannot queue stdin: %s", lr_strerror(rc));
		}
		lr_proc_close_stdin(*out);
	}
	return 0;
}

const char *lr__signal_name(int signo, char *buf, size_t n)
{
	const char *abbr = sigabbrev_np(signo);
	if (abbr)
		snprintf(buf, n, "SIG%s", abbr);
	else if (signo >= SIGRTMIN && signo <= SIGRTMAX)
		snprintf(buf, n, "SIGRTMIN+%d", signo - SIGRTMIN);
	else
		snprintf(buf, n, "SIG%d", signo);
	return buf;
}

/* Sets code, signal, timed_out on the table on top. */
static void push_status_fields(lua_State *L, struct lr_proc *p)
{
	int code = -1, signo = 0;
	lr_proc_status(p, &code, &signo);
	if (code >= 0) {
		lua_pushinteger(L, code);
		lua_setfield(L, -2, "code");
	}
	if (signo) {
		char buf[32];
		lua_pushstring(L, lr__signal_name(signo, buf, sizeof buf));
		lua_setfield(L, -2, "signal");
	}
	lua_pushboolean(L, lr_proc_timed_out(p));
	lua_setfield(L, -2, "timed_out");
}

/* ---- run ---- */

struct runop {
	struct lr_wait wait;
	struct lr_proc *p;
};

static void run_event(struct lr_proc *p, int events, void *arg)
{
	(void)events;
	struct runop *op = arg;
	if (lr_proc_done(p))
		lr_sched_wake(&op->wait);
}

static void run_cancel(struct lr_wait *w)
{
	struct runop *op = (struct runop *)w;
	lr_proc_close(op->p); /* kills the group */
	op->p = NULL;
}

static int runop_gc(lua_State *L)
{
	struct runop *op = lua_touserdata(L, 1);
	lr_proc_close(op->p);
	op->p = NULL;
	return 0;
}

static int run_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct runop *op = (struct runop *)ctx;
	struct lr_proc *p = op->p;
	if (!p) { /* cancelled while waiting: run_cancel closed it */
		lr_sched_resumed(L, &op->wait);
		return luaL_error(L, "cancelled");
	}
	/* The result is built and the child closed before a late cancellation raises. */
	lua_createtable(L, 0, 8);
	push_status_fields(L, p);
	static const char *const names[] = { NULL, "stdout", "stderr" };
	for (int s = LR_PROC_STDOUT; s <= LR_PROC_STDERR; s++) {
		const struct lr_buf *b = lr_proc_output(p, s);
		lua_pushlstring(L, b->len ? b->data : "", b->len);
		lua_setfield(L, -2, names[s]);
	}
	lua_pushboolean(L, lr_proc_truncated(p, LR_PROC_STDOUT) ||
				   lr_proc_truncated(p, LR_PROC_STDERR));
	lua_setfield(L, -2, "truncated");
	lua_pushinteger(L, lr_proc_pid(p));
	lua_setfield(L, -2, "pid");
	/* Ends what the command left in its group and reaps it. */
	op->p = NULL;
	lr_proc_close(p);
	lr_sched_resumed(L, &op->wait);
	return 1;
}

/* rig.core.process_run(opts) -> result | nil, message, code */
static int proc_run(lua_State *L)
{
	struct spawn_req r;
	parse_opts(L, 1, &r);
	lr_sched_enter(L);
	struct runop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, RUNOP_MT);
	r.o.on_event = run_event;
	r.o.arg = op;
	int n = do_spawn(L, &r, &op->p);
	if (n)
		return n;
	op->wait.cancel = run_cancel;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, run_k);
}

/* ---- spawn and the handle ---- */

struct handle {
	struct lr_proc *p; /* first, for lr_checkhandle; NULL once closed */
	pid_t pid;
	int stdio[3];
	int stdin_data;          /* stdin was given as a string: not writable */
	struct lr_wait *waiters; /* ops waiting for any change */
	void (*on_end)(void *arg); /* once, when the process is over or the handle closed */
	void *end_arg;
};
LR_HANDLE_FIRST(struct handle, p);

static void handle_ended(struct handle *h)
{
	void (*f)(void *) = h->on_end;
	h->on_end = NULL;
	if (f)
		f(h->end_arg);
}

enum { OP_READ, OP_WRITE, OP_WAIT };

struct hop {
	struct lr_wait wait;
	struct handle *h;
	int kind;
	int stream;
	int has_timer, timed_out;
	struct lr_timer timer;
};

static void waiters_unlink(struct handle *h, struct lr_wait *w)
{
	for (struct lr_wait **pp = &h->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	w->next = NULL;
}

/* Wakes every waiter; each re-checks its condition and waits again if need be. */
static void wake_all(struct handle *h)
{
	struct lr_wait *w = h->waiters;
	h->waiters = NULL;
	while (w) {
		struct lr_wait *next = w->next;
		w->next = NULL;
		lr_sched_wake(w);
		w = next;
	}
}

static void handle_event(struct lr_proc *p, int events, void *arg)
{
	(void)events;
	struct handle *h = arg;
	if (h->on_end && lr_proc_done(p))
		handle_ended(h);
	wake_all(arg);
}

static void handle_close(struct handle *h)
{
	if (!h->p)
		return;
	lr_proc_close(h->p);
	h->p = NULL;
	handle_ended(h);
	wake_all(h);
}

static void hop_cancel(struct lr_wait *w)
{
	struct hop *op = (struct hop *)w;
	waiters_unlink(op->h, w);
	if (op->has_timer)
		lr_timer_stop(&op->timer);
	if (op->h->p)
		lr_proc_kill(op->h->p, SIGKILL);
}

static void hop_timeout(struct lr_timer *t, void *arg)
{
	(void)t;
	struct hop *op = arg;
	op->timed_out = 1;
	waiters_unlink(op->h, &op->wait);
	lr_sched_wake(&op->wait);
}

static int hop_gc(lua_State *L)
{
	struct hop *op = lua_touserdata(L, 1);
	if (op->has_timer)
		lr_timer_release(&op->timer);
	op->has_timer = 0;
	return 0;
}

static int hop_k(lua_State *L, int status, lua_KContext ctx);

/* stdin failures: both ways of being closed are code "closed". */
static int push_stdin_fail(lua_State *L, int rc)
{
	if (rc == -EPIPE)
		return lr_pushfail(L, LR_ECLOSED, "process: the child closed its stdin");
	if (rc == LR_ECLOSED)
		return lr_pushfail(L, LR_ECLOSED, "process: stdin is closed");
	return lr_pushfail(L, rc, "process: cannot write stdin: %s", lr_strerror(rc));
}

static int hop_done(lua_State *L, struct hop *op, int n)
{
	(void)L;
	if (op->has_timer)
		lr_timer_stop(&op->timer);
	return n;
}

/* Answers the operation if it can, or waits again. */
static int hop_step(lua_State *L, struct hop *op)
{
	struct handle *h = op->h;
	struct lr_proc *p = h->p;
	if (!p)
		return hop_done(L, op, lr_pushfail(L, LR_ECLOSED, "process: the handle was closed"));
	switch (op->kind) {
	case OP_READ: {
		const struct lr_buf *b = lr_proc_output(p, op->stream);
		if (b->len) {
			lua_pushlstring(L, b->data, b->len);
			lr_proc_consume(p, op->stream, b->len);
			return hop_done(L, op, 1);
		}
		int eof = lr_proc_output_eof(p, op->stream);
		if (eof > 0) {
			lua_pushnil(L);
			return hop_done(L, op, 1);
		}
		if (eof < 0)
			return hop_done(L, op, lr_pushfail(L, eof, "process: cannot read %s: %s",
							  op->stream == LR_PROC_STDOUT ? "stdout" : "stderr",
							  lr_strerror(eof)));
		break;
	}
	case OP_WRITE: {
		int st = lr_proc_input_status(p);
		/* Written in full, even if another task closed stdin after it. */
		if (lr_proc_input_pending(p) == 0 && (st == 0 || st == LR_ECLOSED)) {
			lua_pushboolean(L, 1);
			return hop_done(L, op, 1);
		}
		if (st)
			return hop_done(L, op, push_stdin_fail(L, st));
		break;
	}
	case OP_WAIT:
		if (lr_proc_status(p, NULL, NULL)) {
			lua_createtable(L, 0, 3);
			push_status_fields(L, p);
			return hop_done(L, op, 1);
		}
		if (op->timed_out)
			return hop_done(L, op, lr_pushfail(L, LR_ETIMEOUT, "timeout"));
		break;
	}
	op->wait.next = h->waiters;
	h->waiters = &op->wait;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, hop_k);
}

static int hop_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct hop *op = (struct hop *)ctx;
	if (op->wait.status == LR_ECANCELLED && op->has_timer)
		lr_timer_stop(&op->timer);
	lr_sched_resumed(L, &op->wait);
	return hop_step(L, op);
}

static struct hop *hop_new(lua_State *L, struct handle *h, int kind)
{
	lr_sched_enter(L);
	struct hop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, HOP_MT);
	op->h = h;
	op->kind = kind;
	op->wait.cancel = hop_cancel;
	return op;
}

static struct handle *check_handle(lua_State *L)
{
	return lr_checkhandle(L, 1, PROC_MT);
}

static int check_stream(lua_State *L, struct handle *h, int idx)
{
	static const char *const names[] = { "stdout", "stderr", NULL };
	int s = luaL_checkoption(L, idx, "stdout", names) + 1;
	if (h->stdio[s] != LR_PROC_PIPE)
		luaL_error(L, "rig.process: %s is not a pipe", names[s - 1]);
	return s;
}

/* p:read([stream]) -> chunk | nil at EOF | nil, message, code */
static int h_read(lua_State *L)
{
	struct handle *h = check_handle(L);
	int s = check_stream(L, h, 2);
	const struct lr_buf *b = lr_proc_output(h->p, s);
	if (b->len || lr_proc_output_eof(h->p, s)) {
		struct hop tmp = { .h = h, .kind = OP_READ, .stream = s };
		return hop_step(L, &tmp); /* answers without waiting */
	}
	struct hop *op = hop_new(L, h, OP_READ);
	op->stream = s;
	return hop_step(L, op);
}

/* p:write(data) -> true | nil, message, code */
static int h_write(lua_State *L)
{
	struct handle *h = check_handle(L);
	size_t len;
	const char *data = luaL_checklstring(L, 2, &len);
	if (h->stdio[0] != LR_PROC_PIPE || h->stdin_data)
		luaL_error(L, "rig.process: stdin is not a pipe");
	int rc = lr_proc_write(h->p, data, len);
	if (rc)
		return push_stdin_fail(L, rc);
	if (lr_proc_input_pending(h->p) == 0) {
		lua_pushboolean(L, 1);
		return 1;
	}
	return hop_step(L, hop_new(L, h, OP_WRITE));
}

static int h_close_stdin(lua_State *L)
{
	struct handle *h = check_handle(L);
	lr_proc_close_stdin(h->p);
	lua_pushboolean(L, 1);
	return 1;
}

/* p:wait([timeout]) -> { code, signal, timed_out } | nil, "timeout", "timeout" */
static int h_wait(lua_State *L)
{
	struct handle *h = check_handle(L);
	double timeout = -1;
	if (!lua_isnoneornil(L, 2)) {
		timeout = luaL_checknumber(L, 2);
		luaL_argcheck(L, timeout >= 0, 2, "must be a non-negative number");
	}
	if (lr_proc_status(h->p, NULL, NULL)) {
		lua_createtable(L, 0, 3);
		push_status_fields(L, h->p);
		return 1;
	}
	struct hop *op = hop_new(L, h, OP_WAIT);
	if (timeout >= 0) {
		if (lr_timer_init(lr_state_of(L)->loop, &op->timer, hop_timeout, op))
			return luaL_error(L, "out of memory");
		op->has_timer = 1;
		lr_timer_start(&op->timer, timeout);
	}
	return hop_step(L, op);
}

static int parse_signal(lua_State *L, int idx)
{
	if (lua_isnoneornil(L, idx))
		return SIGKILL;
	if (lua_type(L, idx) == LUA_TNUMBER) {
		lua_Integer n = luaL_checkinteger(L, idx);
		luaL_argcheck(L, n >= 0 && n < NSIG, idx, "not a signal number");
		return (int)n;
	}
	const char *name = luaL_checkstring(L, idx);
	const char *bare = strncmp(name, "SIG", 3) == 0 ? name + 3 : name;
	for (int i = 1; i < NSIG; i++) {
		const char *abbr = sigabbrev_np(i);
		if (abbr && strcmp(abbr, bare) == 0)
			return i;
	}
	return luaL_error(L, "rig.process: unknown signal '%s'", name);
}

/* p:kill([signal]) -> true | nil, message, code */
static int h_kill(lua_State *L)
{
	struct handle *h = check_handle(L);
	int signo = parse_signal(L, 2);
	int rc = lr_proc_kill(h->p, signo);
	if (rc)
		return lr_pushfail(L, rc, "process: cannot signal %d: %s", (int)h->pid, lr_strerror(rc));
	lua_pushboolean(L, 1);
	return 1;
}

static int h_close(lua_State *L)
{
	struct handle *h = luaL_checkudata(L, 1, PROC_MT);
	handle_close(h);
	return 0;
}

static int h_index(lua_State *L)
{
	struct handle *h = luaL_checkudata(L, 1, PROC_MT);
	const char *k = lua_tostring(L, 2);
	if (k && strcmp(k, "pid") == 0) {
		lua_pushinteger(L, h->pid);
		return 1;
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static int h_tostring(lua_State *L)
{
	struct handle *h = luaL_checkudata(L, 1, PROC_MT);
	lua_pushfstring(L, "rig.process %d (%s)", (int)h->pid, h->p ? "open" : "closed");
	return 1;
}

/* rig.core.process_spawn(opts) -> handle | nil, message, code */
static int proc_spawn(lua_State *L)
{
	struct spawn_req r;
	parse_opts(L, 0, &r);
	return lr__proc_spawn_handle(L, &r.o, r.stdin_data, r.stdin_len, NULL, NULL);
}

/*
 * For other bindings (the sandbox executor): spawns o as a rig.process
 * handle (o's on_event and arg are replaced; stdin_data, when given, is
 * written and stdin closed) and pushes it, or pushes nil, message, code.
 */
int lr__proc_spawn_handle(lua_State *L, const struct lr_proc_opts *o, const char *stdin_data,
			  size_t stdin_len, void (*on_end)(void *arg), void *arg)
{
	struct spawn_req r;
	memset(&r, 0, sizeof r);
	r.o = *o;
	r.stdin_data = stdin_data;
	r.stdin_len = stdin_len;
	struct handle *h = lua_newuserdatauv(L, sizeof *h, 0);
	memset(h, 0, sizeof *h);
	luaL_setmetatable(L, PROC_MT);
	int hidx = lua_gettop(L);
	r.o.on_event = handle_event;
	r.o.arg = h;
	memcpy(h->stdio, r.o.stdio, sizeof h->stdio);
	h->stdin_data = r.stdin_data != NULL;
	int n = do_spawn(L, &r, &h->p);
	if (n)
		return n;
	h->on_end = on_end;
	h->end_arg = arg;
	h->pid = lr_proc_pid(h->p);
	lua_pushvalue(L, hidx);
	return 1;
}

/* Reaps, when the state closes, the children whose handles were collected last. */
static int sentinel_gc(lua_State *L)
{
	lr_proc_reap_all(lr_state_of(L)->loop);
	return 0;
}

void lr__proc_open(lua_State *L)
{
	luaL_newmetatable(L, RUNOP_MT);
	lua_pushcfunction(L, runop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	luaL_newmetatable(L, HOP_MT);
	lua_pushcfunction(L, hop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg methods[] = {
		{ "read", h_read },
		{ "write", h_write },
		{ "close_stdin", h_close_stdin },
		{ "wait", h_wait },
		{ "kill", h_kill },
		{ "close", h_close },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, PROC_MT);
	luaL_newlib(L, methods); /* stack: core mt methods */
	lua_pushvalue(L, -1);
	lua_setfield(L, -4, "process_methods");
	lua_pushcclosure(L, h_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, h_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, h_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, h_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	/* Created first, so finalized last when the state closes. */
	if (luaL_newmetatable(L, SENTINEL_MT)) {
		lua_pushcfunction(L, sentinel_gc);
		lua_setfield(L, -2, "__gc");
		lua_newuserdatauv(L, 1, 0);
		lua_pushvalue(L, -2);
		lua_setmetatable(L, -2);
		lua_setfield(L, LUA_REGISTRYINDEX, "rig.process.sentinel.obj");
	}
	lua_pop(L, 1);

	lua_pushcfunction(L, proc_run);
	lua_setfield(L, -2, "process_run");
	lua_pushcfunction(L, proc_spawn);
	lua_setfield(L, -2, "process_spawn");
}
