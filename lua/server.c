/*
 * server.c — the HTTP server binding: rig.core.http_listen and the
 * response object each handler receives.
 *
 * The Lua side (stdlib/rig/http_server.lua) validates options, compiles
 * the routes and passes one dispatch function. For every request the host
 * hands over, this file builds the request table and a response userdata
 * and spawns dispatch(req, res) as its own task. When the client goes away
 * (or the server closes) the task is cancelled; the response then answers
 * nil, "closed", "closed".
 *
 * Streaming has backpressure: a write that leaves more than HIGH_WATER
 * bytes queued on the connection waits until it falls to LOW_WATER.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_MT "rig.http.server"
#define RES_MT "rig.http.response"
#define HIGH_WATER ((size_t)1 << 20)
#define LOW_WATER ((size_t)256 << 10)

struct server {
	struct lr_httpd *h; /* NULL once closed */
	struct lr_state *S;
	struct lr_closer closer;
	int self_ref;     /* anchors a listening server: it serves without a Lua owner */
	int dispatch_ref;
	int port;
	char url[96];
};

struct res {
	struct lr_httpd_req *r; /* first, for lr_checkhandle; NULL before the task is set up and once released */
	struct lr_task *task;   /* anchored by the user value */
	struct lr_wait wait;    /* a write waiting for the output to drain */
	int waiting;
	int started, finished;
	void (*hook)(void *arg); /* a C writer's drain notification (lr__server_hook) */
	void *hook_arg;
};
LR_HANDLE_FIRST(struct res, r);

/* Server. */

static void server_release(struct server *s)
{
	if (!s->h)
		return;
	struct lr_httpd *h = s->h;
	s->h = NULL;
	lr_closer_remove(s->S, &s->closer);
	lr_httpd_close(h); /* cancels the handlers of requests in hand */
	lr_loop_unref(s->S->loop);
}

static void server_closer(struct lr_closer *c)
{
	struct server *s = (struct server *)((char *)c - offsetof(struct server, closer));
	/* Shutdown: C resources only; the references go with the state. */
	server_release(s);
}

static int server_close(lua_State *L)
{
	struct server *s = luaL_checkudata(L, 1, SERVER_MT);
	server_release(s);
	luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, s->dispatch_ref);
	s->self_ref = s->dispatch_ref = LUA_NOREF;
	return 0;
}

/* srv:refusals() -> { code = count, ... }: what the host server refused itself (all zero once closed) */
static int server_refusals(lua_State *L)
{
	struct server *s = luaL_checkudata(L, 1, SERVER_MT);
	uint64_t n[LR_HTTPD_REFUSALS] = { 0 };
	if (s->h)
		lr_httpd_refusals(s->h, n);
	lua_createtable(L, 0, LR_HTTPD_REFUSALS);
	for (int i = 0; i < LR_HTTPD_REFUSALS; i++) {
		lua_pushinteger(L, (lua_Integer)n[i]);
		lua_setfield(L, -2, lr_httpd_refusal_code(i));
	}
	return 1;
}

static int server_index(lua_State *L)
{
	struct server *s = luaL_checkudata(L, 1, SERVER_MT);
	const char *k = luaL_checkstring(L, 2);
	if (strcmp(k, "refusals") == 0)
		lua_pushcfunction(L, server_refusals);
	else if (strcmp(k, "port") == 0)
		lua_pushinteger(L, s->port);
	else if (strcmp(k, "url") == 0)
		lua_pushstring(L, s->url);
	else if (strcmp(k, "close") == 0)
		lua_pushcfunction(L, server_close);
	else
		lua_pushnil(L);
	return 1;
}

static int server_tostring(lua_State *L)
{
	struct server *s = luaL_checkudata(L, 1, SERVER_MT);
	lua_pushfstring(L, "http server %s (%s)", s->url, s->h ? "listening" : "closed");
	return 1;
}

/* Response callbacks from the host, on the loop. */

static void res_on_close(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	struct res *x = arg;
	if (x->task)
		lr_task_cancel(x->task);
	if (x->waiting) /* a writer outside the handler's task tree */
		lr_sched_wake(&x->wait);
}

static void res_on_drain(struct lr_httpd_req *r, void *arg)
{
	(void)r;
	struct res *x = arg;
	if (x->hook)
		x->hook(x->hook_arg);
	else
		lr_sched_wake(&x->wait);
}

static void push_lower(lua_State *L, const char *s)
{
	luaL_Buffer b;
	size_t n = strlen(s);
	char *p = luaL_buffinitsize(L, &b, n);
	for (size_t i = 0; i < n; i++)
		p[i] = (char)tolower((unsigned char)s[i]);
	luaL_pushresultsize(&b, n);
}

/* Builds the request table for r; stack: + req */
static void push_request(lua_State *L, struct lr_httpd_req *r)
{
	lua_createtable(L, 0, 8);
	lua_pushstring(L, lr_httpd_req_method(r));
	lua_setfield(L, -2, "method");
	lua_pushstring(L, lr_httpd_req_path(r));
	lua_setfield(L, -2, "raw_path");
	const char *q = lr_httpd_req_query(r);
	lua_pushstring(L, q ? q : "");
	lua_setfield(L, -2, "raw_query");
	lua_pushstring(L, lr_httpd_req_remote(r));
	lua_setfield(L, -2, "remote");
	size_t len;
	const char *body = lr_httpd_req_body(r, &len);
	lua_pushlstring(L, body, len);
	lua_setfield(L, -2, "body");

	lua_newtable(L); /* stack: req headers */
	const char *name, *value;
	for (const void *c = lr_httpd_req_header_next(r, NULL, &name, &value); c;
	     c = lr_httpd_req_header_next(r, c, &name, &value)) {
		push_lower(L, name);
		lua_pushvalue(L, -1);
		if (lua_rawget(L, -3) == LUA_TSTRING) { /* repeated: join as HTTP does */
			lua_pushliteral(L, ", ");
			lua_pushstring(L, value);
			lua_concat(L, 3);
		} else {
			lua_pop(L, 1);
			lua_pushstring(L, value);
		}
		lua_rawset(L, -3);
	}
	lua_setfield(L, -2, "headers");
}

/* Runs under lua_pcall: 1 server, 2 request (light userdata). */
static int spawn_handler(lua_State *L)
{
	struct server *s = lua_touserdata(L, 1);
	struct lr_httpd_req *r = lua_touserdata(L, 2);
	struct res *x = lua_newuserdatauv(L, sizeof *x, 1);
	memset(x, 0, sizeof *x);
	luaL_setmetatable(L, RES_MT); /* stack: s r res */
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->dispatch_ref);
	push_request(L, r);
	lua_pushvalue(L, 3); /* stack: s r res dispatch req res */
	struct lr_task *t = lr_sched_spawn(L, 2); /* stack: s r res task */
	lua_setiuservalue(L, 3, 1);
	/* Nothing below allocates: from here on the response owns r. */
	x->task = t;
	x->r = r;
	lr_httpd_req_set_callbacks(r, res_on_close, res_on_drain, x);
	return 0;
}

/* A request no handler can take: the one error shape of rig.http, 503. */
static void reply_unavailable(struct lr_httpd_req *r)
{
	static const char body[] = "{\"error\":{\"code\":\"unavailable\",\"message\":"
				   "\"the server cannot take requests now\",\"retryable\":true}}";
	lr_httpd_req_add_header(r, "Content-Type", "application/json");
	lr_httpd_req_reply(r, 503, body, sizeof body - 1);
	lr_httpd_req_free(r);
}

static void server_on_request(struct lr_httpd_req *r, void *arg)
{
	struct server *s = arg;
	struct lr_state *S = s->S;
	lua_State *L = S->L;
	if (S->killed || !s->h) {
		reply_unavailable(r);
		return;
	}
	int top = lua_gettop(L);
	lua_pushcfunction(L, spawn_handler);
	lua_pushlightuserdata(L, s);
	lua_pushlightuserdata(L, r);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
		fprintf(stderr, "luarig: http: cannot start a handler: %s\n", lua_tostring(L, -1));
		reply_unavailable(r);
	}
	lua_settop(L, top);
}

/* rig.core.http_listen(host, port, max_body, max_headers, dispatch) -> server | nil, msg, code */
static int core_http_listen(lua_State *L)
{
	const char *host = luaL_checkstring(L, 1);
	lua_Integer port = luaL_checkinteger(L, 2);
	lua_Integer max_body = luaL_checkinteger(L, 3);
	lua_Integer max_headers = luaL_checkinteger(L, 4);
	luaL_checktype(L, 5, LUA_TFUNCTION);
	luaL_argcheck(L, port >= 0 && port <= 65535, 2, "port out of range");
	luaL_argcheck(L, max_body >= 0, 3, "must not be negative");
	luaL_argcheck(L, max_headers > 0, 4, "must be positive");
	struct lr_state *S = lr_state_of(L);

	struct server *s = lua_newuserdatauv(L, sizeof *s, 0);
	memset(s, 0, sizeof *s);
	s->self_ref = s->dispatch_ref = LUA_NOREF;
	s->S = S;
	luaL_setmetatable(L, SERVER_MT); /* closed until listening */

	struct lr_httpd_config cfg = {
		.host = host,
		.port = (int)port,
		.max_body = (size_t)max_body,
		.max_headers = (size_t)max_headers,
		.on_request = server_on_request,
		.arg = s,
	};
	struct lr_httpd *h;
	int rc = lr_httpd_open(S->loop, &cfg, &h);
	if (rc == LR_EPARSE)
		return luaL_error(L, "rig.http.server: cannot resolve listen host '%s'", host);
	if (rc)
		return lr_pushfail(L, rc, "rig.http.server: cannot listen on '%s' port %d: %s", host,
				   (int)port, lr_strerror(rc));
	s->h = h;
	s->port = lr_httpd_port(h);
	if (strchr(host, ':'))
		snprintf(s->url, sizeof s->url, "http://[%s]:%d", host, s->port);
	else
		snprintf(s->url, sizeof s->url, "http://%s:%d", host, s->port);
	s->closer.close = server_closer;
	lr_closer_add(S, &s->closer);
	lr_loop_ref(S->loop);
	lua_pushvalue(L, 5);
	s->dispatch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_pushvalue(L, -1);
	s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	return 1;
}

/* Response. */

static struct res *check_res(lua_State *L)
{
	return lr_checkhandle(L, 1, RES_MT);
}

/* A response Lua may write to: none while a C writer owns its stream. */
static struct res *check_writer(lua_State *L)
{
	struct res *x = check_res(L);
	if (x->hook)
		luaL_error(L, "rig.http: another task is writing to this response");
	return x;
}

struct lr_httpd_req *lr__server_stream(lua_State *L, int idx, const char *fn, void **res)
{
	if (!luaL_testudata(L, idx, RES_MT))
		luaL_typeerror(L, idx, "http response"); /* sub:pipe(res) names it so */
	struct res *x = lr_checkhandle(L, idx, RES_MT);
	if (!x->started || x->finished)
		luaL_error(L, "%s: the response must be a started stream", fn);
	if (x->waiting || x->hook)
		luaL_error(L, "rig.http: another task is writing to this response");
	*res = x;
	return x->r;
}

void lr__server_hook(void *res, void (*drained)(void *arg), void *arg)
{
	struct res *x = res;
	x->hook = drained;
	x->hook_arg = arg;
}

static int push_closed(lua_State *L)
{
	return lr_pushfail(L, LR_ECLOSED, "closed");
}

/* Adds the headers in the table at idx (may be nil); raises on bad names or values. */
static int add_headers(lua_State *L, struct res *x, int idx)
{
	if (lua_isnoneornil(L, idx))
		return 0;
	luaL_checktype(L, idx, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		if (lua_type(L, -2) != LUA_TSTRING)
			return luaL_error(L, "rig.http: header names must be strings");
		const char *name = lua_tostring(L, -2);
		if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
			return luaL_error(L, "rig.http: header '%s' must be a string", name);
		size_t vlen;
		const char *value = lua_tolstring(L, -1, &vlen);
		if (strlen(value) != vlen)
			return luaL_error(L, "rig.http: header '%s' contains a NUL byte", name);
		int rc = lr_httpd_req_add_header(x->r, name, value);
		if (rc == -EINVAL)
			return luaL_error(L, "rig.http: invalid header '%s' (bad name, CR/LF in value, "
					  "or a framing field the server writes itself)", name);
		if (rc == -ENOMEM)
			return luaL_error(L, "out of memory");
		if (rc)
			return rc;
		lua_pop(L, 1);
	}
	return 0;
}

static int check_status(lua_State *L, int idx)
{
	lua_Integer st = luaL_checkinteger(L, idx);
	luaL_argcheck(L, st >= 100 && st <= 599, idx, "status must be 100..599");
	return (int)st;
}

/* res:_reply(status, headers, body): a whole response (used by the dispatcher). */
static int res_reply(lua_State *L)
{
	struct res *x = check_res(L);
	int status = check_status(L, 2);
	size_t len = 0;
	const char *body = luaL_optlstring(L, 4, "", &len);
	if (x->started || x->finished)
		return luaL_error(L, "rig.http: response already started");
	if (lr_httpd_req_closed(x->r))
		return push_closed(L);
	if (add_headers(L, x, 3))
		return push_closed(L);
	int rc = lr_httpd_req_reply(x->r, status, body, len);
	if (rc)
		return push_closed(L);
	x->finished = 1;
	lua_pushboolean(L, 1);
	return 1;
}

/* res:start(status, headers) */
static int res_start(lua_State *L)
{
	struct res *x = check_res(L);
	int status = check_status(L, 2);
	if (x->started || x->finished)
		return luaL_error(L, "rig.http: response already started");
	if (lr_httpd_req_closed(x->r))
		return push_closed(L);
	if (add_headers(L, x, 3))
		return push_closed(L);
	if (lr_httpd_req_start(x->r, status))
		return push_closed(L);
	x->started = 1;
	lua_pushboolean(L, 1);
	return 1;
}

static void drain_cancel(struct lr_wait *w)
{
	struct res *x = (struct res *)((char *)w - offsetof(struct res, wait));
	x->waiting = 0;
	if (x->r)
		lr_httpd_req_cancel_drain(x->r);
}

static int write_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct res *x = (struct res *)ctx;
	x->waiting = 0;
	lr_sched_resumed(L, &x->wait);
	if (lr_httpd_req_closed(x->r))
		return push_closed(L);
	lua_pushboolean(L, 1);
	return 1;
}

/* Sends what was staged plus p as one chunk, then waits while the output is over the mark. */
static int send_chunk(lua_State *L, struct res *x, const char *p, size_t n)
{
	if (lr_httpd_req_closed(x->r)) {
		lr_httpd_req_write(x->r, NULL, 0); /* drops what was staged */
		return push_closed(L);
	}
	if (!x->started || x->finished) {
		lr_httpd_req_write(x->r, NULL, 0); /* drops what was staged */
		return luaL_error(L, x->finished ? "rig.http: response already finished"
						 : "rig.http: res:start must come first");
	}
	int rc = lr_httpd_req_write(x->r, p, n);
	if (rc == -ENOMEM)
		return luaL_error(L, "out of memory");
	if (rc)
		return push_closed(L);
	if (lr_httpd_req_buffered(x->r) > HIGH_WATER && lua_isyieldable(L) && lr_sched_current(L)) {
		lr_sched_enter(L);
		rc = lr_httpd_req_notify_drain(x->r, LOW_WATER);
		if (rc == 0) {
			x->wait.cancel = drain_cancel;
			x->waiting = 1;
			return lr_sched_await(L, &x->wait, (lua_KContext)x, write_k);
		}
		if (rc == -ENOMEM)
			return luaL_error(L, "out of memory");
		if (rc == LR_ECLOSED)
			return push_closed(L);
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* res:write(data) -> true | nil, "closed", "closed" */
static int res_write(lua_State *L)
{
	struct res *x = check_writer(L);
	size_t n;
	const char *p = luaL_checklstring(L, 2, &n);
	if (x->waiting)
		return luaL_error(L, "rig.http: another task is writing to this response");
	return send_chunk(L, x, p, n);
}

/*
 * Stages the pieces of one SSE event: small pieces gather in a stack
 * buffer, so an event costs one append to the connection's chunk, not one
 * per field and line.
 */
struct stager {
	lua_State *L;
	struct res *x;
	size_t n;
	char buf[4096];
};

static void stage_flush(struct stager *g)
{
	if (g->n && lr_httpd_req_append(g->x->r, g->buf, g->n))
		luaL_error(g->L, "out of memory");
	g->n = 0;
}

static void stage(struct stager *g, const char *p, size_t n)
{
	if (n > sizeof g->buf - g->n) {
		stage_flush(g);
		if (n > sizeof g->buf) {
			if (lr_httpd_req_append(g->x->r, p, n))
				luaL_error(g->L, "out of memory");
			return;
		}
	}
	memcpy(g->buf + g->n, p, n);
	g->n += n;
}

/* Stages s as SSE field lines after what the stager holds. */
static void stage_lines(struct stager *g, const char *prefix, const char *s, size_t n)
{
	stage_flush(g);
	if (lr_httpd_req_append_lines(g->x->r, prefix, s, n))
		luaL_error(g->L, "out of memory");
}

static const char *sse_field(lua_State *L, int t, const char *key, size_t *len)
{
	lua_getfield(L, t, key);
	if (lua_isnil(L, -1))
		return NULL;
	if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
		luaL_error(L, "rig.http: res:event field '%s' must be a string", key);
	return lua_tolstring(L, -1, len); /* stays on the stack: a number's string is anchored */
}

/* res:event{event=, data=, id=, retry=} -> true | nil, "closed", "closed" */
static int res_event(lua_State *L)
{
	struct res *x = check_writer(L);
	luaL_checktype(L, 2, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 2)) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
		if (!k || (strcmp(k, "event") && strcmp(k, "data") && strcmp(k, "id") &&
			   strcmp(k, "retry")))
			return luaL_error(L, "rig.http: res:event: unknown field '%s'",
					  k ? k : luaL_typename(L, -2));
		lua_pop(L, 1);
	}
	if (!x->started || x->finished || lr_httpd_req_closed(x->r))
		return send_chunk(L, x, NULL, 0);
	size_t elen = 0, dlen = 0, ilen = 0;
	const char *ev = sse_field(L, 2, "event", &elen);
	const char *data = sse_field(L, 2, "data", &dlen);
	const char *id = sse_field(L, 2, "id", &ilen);
	lua_getfield(L, 2, "retry");
	int has_retry = !lua_isnil(L, -1);
	if (has_retry && !lua_isinteger(L, -1))
		return luaL_error(L, "rig.http: res:event: 'retry' must be an integer");
	lua_Integer retry = has_retry ? lua_tointeger(L, -1) : 0;
	if (ev && (strpbrk(ev, "\r\n") || strlen(ev) != elen))
		return luaL_error(L, "rig.http: res:event: 'event' must be one line");
	if (id && (strpbrk(id, "\r\n") || strlen(id) != ilen))
		return luaL_error(L, "rig.http: res:event: 'id' must be one line without NUL");
	if (has_retry && retry < 0)
		return luaL_error(L, "rig.http: res:event: 'retry' must not be negative");

	struct stager g = { .L = L, .x = x, .n = 0 };
	if (ev) {
		stage(&g, "event: ", 7);
		stage(&g, ev, elen);
		stage(&g, "\n", 1);
	}
	if (id) {
		stage(&g, "id: ", 4);
		stage(&g, id, ilen);
		stage(&g, "\n", 1);
	}
	if (has_retry) {
		char buf[40];
		int n = snprintf(buf, sizeof buf, "retry: %lld\n", (long long)retry);
		stage(&g, buf, (size_t)n);
	}
	if (data)
		stage_lines(&g, "data: ", data, dlen);
	stage(&g, "\n", 1);
	stage_flush(&g);
	return send_chunk(L, x, NULL, 0);
}

/* res:comment(text) -> ": text\n\n" */
static int res_comment(lua_State *L)
{
	struct res *x = check_writer(L);
	size_t n;
	const char *s = luaL_optlstring(L, 2, "", &n);
	if (x->started && !x->finished && !lr_httpd_req_closed(x->r)) {
		struct stager g = { .L = L, .x = x, .n = 0 };
		stage_lines(&g, ": ", s, n);
		stage(&g, "\n", 1);
		stage_flush(&g);
	}
	return send_chunk(L, x, NULL, 0);
}

/* res:finish() -> true | nil, "closed", "closed" */
static int res_finish(lua_State *L)
{
	struct res *x = check_res(L);
	if (!x->started)
		return luaL_error(L, "rig.http: res:finish before res:start");
	if (x->finished)
		return luaL_error(L, "rig.http: response already finished");
	if (lr_httpd_req_finish(x->r))
		return push_closed(L);
	x->finished = 1;
	lua_pushboolean(L, 1);
	return 1;
}

/* res:abort(): drops the connection at once */
static int res_abort(lua_State *L)
{
	struct res *x = check_res(L);
	lr_httpd_req_abort(x->r);
	return 0;
}

/* res:closed() -> boolean */
static int res_closed(lua_State *L)
{
	struct res *x = check_res(L);
	lua_pushboolean(L, lr_httpd_req_closed(x->r));
	return 1;
}

/* res:_state() -> "new" | "started" | "finished" | "closed" */
static int res_state(lua_State *L)
{
	struct res *x = check_res(L);
	if (lr_httpd_req_closed(x->r))
		lua_pushliteral(L, "closed");
	else if (x->finished)
		lua_pushliteral(L, "finished");
	else if (x->started)
		lua_pushliteral(L, "started");
	else
		lua_pushliteral(L, "new");
	return 1;
}

static int res_gc(lua_State *L)
{
	struct res *x = luaL_checkudata(L, 1, RES_MT);
	lr_httpd_req_free(x->r);
	x->r = NULL;
	x->task = NULL;
	return 0;
}

static int res_tostring(lua_State *L)
{
	lua_pushliteral(L, "http response");
	return 1;
}

/*
 * Graceful shutdown for servers (rig.serve): while a task waits in
 * rig.core.await_shutdown_signal(), the first SIGINT/SIGTERM wakes it
 * instead of cancelling every task, so it can finish requests in flight
 * and shut sessions down itself. A second signal still exits at once.
 */
struct sigop {
	struct lr_wait wait;
	int signo;
};

static struct sigop *g_sigwaiter; /* the one waiting task, or NULL */

int lr__server_take_signal(int signo)
{
	struct sigop *op = g_sigwaiter;
	if (!op)
		return 0;
	g_sigwaiter = NULL;
	op->signo = signo;
	lr_sched_wake(&op->wait);
	return 1;
}

int lr__server_graceful(void)
{
	return g_sigwaiter != NULL;
}

static void sig_cancel(struct lr_wait *w)
{
	if (g_sigwaiter == (struct sigop *)w)
		g_sigwaiter = NULL;
}

static int sig_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct sigop *op = (struct sigop *)ctx;
	lr_sched_resumed(L, &op->wait);
	char buf[32];
	lua_pushstring(L, lr__signal_name(op->signo, buf, sizeof buf));
	return 1;
}

static int sigop_gc(lua_State *L)
{
	if (g_sigwaiter == lua_touserdata(L, 1))
		g_sigwaiter = NULL;
	return 0;
}

/* rig.core.await_shutdown_signal() -> "SIGTERM" | "SIGINT"; one waiter at a time */
static int core_await_shutdown_signal(lua_State *L)
{
	lr_sched_enter(L);
	if (g_sigwaiter)
		return luaL_error(L, "rig.core.await_shutdown_signal: another task is waiting");
	struct sigop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, "rig.op.shutdown_signal");
	op->wait.cancel = sig_cancel;
	g_sigwaiter = op;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, sig_k);
}

/*
 * rig.core.asset(name) -> the bytes of stdlib/NAME as embedded (the web
 * console's files, "rig/console/index.html"), or nil. With LUARIG_PATH set
 * the file is read from that folder first, as modules are (not in a bundle).
 */
static int core_asset(lua_State *L)
{
	size_t len;
	const char *name = luaL_checklstring(L, 1, &len);
	if (len == 0 || len > 200 || name[0] == '/' || strstr(name, "..") ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-./") != len)
		return luaL_error(L, "rig.core.asset: bad asset name '%s'", name);
	const char *dir = lr__stdlib_dir(L);
	if (dir) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, name);
		FILE *f = fopen(path, "rbe");
		if (f) {
			luaL_Buffer b;
			luaL_buffinit(L, &b);
			char chunk[4096];
			size_t n;
			while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
				luaL_addlstring(&b, chunk, n);
			fclose(f);
			luaL_pushresult(&b);
			return 1;
		}
	}
	for (size_t i = 0; i < lr_stdlib_count; i++) {
		const struct lr_embedded *e = &lr_stdlib[i];
		if (strncmp(e->path, "stdlib/", 7) == 0 && strcmp(e->path + 7, name) == 0) {
			lua_pushlstring(L, (const char *)e->data, e->len);
			return 1;
		}
	}
	lua_pushnil(L);
	return 1;
}

void lr__server_open(lua_State *L)
{
	luaL_newmetatable(L, "rig.op.shutdown_signal");
	lua_pushcfunction(L, sigop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	luaL_newmetatable(L, SERVER_MT);
	lua_pushcfunction(L, server_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, server_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, server_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, server_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	static const luaL_Reg res_methods[] = {
		{ "start", res_start },
		{ "write", res_write },
		{ "event", res_event },
		{ "comment", res_comment },
		{ "finish", res_finish },
		{ "abort", res_abort },
		{ "closed", res_closed },
		{ "_reply", res_reply },
		{ "_state", res_state },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, RES_MT);
	luaL_newlib(L, res_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, res_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, res_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	lua_pushcfunction(L, core_http_listen);
	lua_setfield(L, -2, "http_listen");
	lua_pushcfunction(L, core_await_shutdown_signal);
	lua_setfield(L, -2, "await_shutdown_signal");
	lua_pushcfunction(L, core_asset);
	lua_setfield(L, -2, "asset");
}
