/*
 * http.c — rig.core.http_request and rig.core.http_stream: the Lua face of
 * host/http_client.c. stdlib/rig/http.lua re-exports them as
 * rig.http.request and rig.http.stream.
 *
 * A request waits in a task until the transfer ends. A stream waits until
 * the response headers arrive and then hands out decoded SSE events: one
 * per st:next() (a table) or st:read() (two strings), or as many as have
 * come per st:batch() (into the caller's table). Events are framed out of
 * the received bytes as they are read (lr_http_next); the C side pauses
 * the transfer while 1 MiB of them waits unread.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLIENT_MT "rig.http.client"
#define REQOP_MT "rig.op.http"
#define STREAM_MT "rig.http.stream"

#define REQ_TIMEOUT 30.0
#define CONNECT_TIMEOUT 10.0
#define STREAM_IDLE_TIMEOUT 300.0
#define MAX_BODY ((size_t)64 << 20)
#define MAX_LINE ((size_t)1 << 20)
#define MAX_EVENT ((size_t)16 << 20)
#define MAX_ERROR_BODY ((size_t)64 << 10)
/* http_stream's stack: opts, header lines, header array, the stream. */
#define STREAM_IDX 4

static char client_key;

/* The one client of this state (and loop), made on first use. */
static struct lr_http *get_client(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &client_key);
	struct lr_http **pc = lua_touserdata(L, -1);
	lua_pop(L, 1);
	if (pc)
		return *pc;
	pc = lua_newuserdatauv(L, sizeof *pc, 0);
	*pc = NULL;
	luaL_setmetatable(L, CLIENT_MT);
	if (lr_http_new(lr_state_of(L)->loop, pc))
		luaL_error(L, "out of memory");
	lua_rawsetp(L, LUA_REGISTRYINDEX, &client_key);
	return *pc;
}

static int client_gc(lua_State *L)
{
	struct lr_http **pc = lua_touserdata(L, 1);
	lr_http_free(*pc);
	*pc = NULL;
	return 0;
}

/* ---- options ---- */

static const char *const request_fields[] = {
	"method", "url", "headers", "body", "timeout", "connect_timeout", "header_timeout",
	"idle_timeout", "follow_redirects", "max_body", NULL
};
static const char *const stream_fields[] = {
	"method", "url", "headers", "body", "timeout", "connect_timeout", "header_timeout",
	"idle_timeout", "follow_redirects", "max_body", "max_line", "max_event", "events", NULL
};

static int is_token(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!strchr("!#$%&'*+-.^_`|~", c) && !(c >= '0' && c <= '9') &&
		    !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z'))
			return 0;
	}
	return 1;
}

/* A positive number of seconds, or def when the field is nil. */
static double opt_seconds(lua_State *L, const char *fname, const char *field, double def)
{
	int t = lua_getfield(L, 1, field);
	double v = def;
	if (t != LUA_TNIL) {
		if (t != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0))
			luaL_error(L, "%s: option '%s' must be a positive number of seconds", fname,
				   field);
		v = lua_tonumber(L, -1);
	}
	lua_pop(L, 1);
	return v;
}

static size_t opt_size(lua_State *L, const char *fname, const char *field, size_t def)
{
	int t = lua_getfield(L, 1, field);
	size_t v = def;
	if (t != LUA_TNIL) {
		if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
			luaL_error(L, "%s: option '%s' must be a positive integer", fname, field);
		v = (size_t)lua_tointeger(L, -1);
	}
	lua_pop(L, 1);
	return v;
}

/*
 * Reads the options table at index 1 into o. Strings stay anchored in the
 * table; the header lines are built in a userdata array pushed on the
 * stack, valid until the caller pops it. Raises on misuse.
 */
static void check_opts(lua_State *L, const char *fname, int stream, struct lr_http_opts *o)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	const char *const *fields = stream ? stream_fields : request_fields;
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "%s: option names must be strings", fname);
		const char *k = lua_tostring(L, -1);
		int known = 0;
		for (int i = 0; fields[i]; i++)
			known |= strcmp(fields[i], k) == 0;
		if (!known)
			luaL_error(L, "%s: unknown option '%s'", fname, k);
	}
	memset(o, 0, sizeof *o);

	if (lua_getfield(L, 1, "url") != LUA_TSTRING)
		luaL_error(L, "%s: option 'url' must be a string", fname);
	o->url = lua_tostring(L, -1);
	if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
		luaL_error(L, "%s: option 'url' must start with http:// or https:// (got '%s')",
			   fname, o->url);
	lua_pop(L, 1);

	int t = lua_getfield(L, 1, "method");
	if (t != LUA_TNIL) {
		size_t n = 0;
		const char *m = t == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
		if (!m || !is_token(m, n))
			luaL_error(L, "%s: option 'method' must be an HTTP method name", fname);
		o->method = lua_tostring(L, -1);
	}
	lua_pop(L, 1);

	t = lua_getfield(L, 1, "body");
	if (t != LUA_TNIL) {
		if (t != LUA_TSTRING)
			luaL_error(L, "%s: option 'body' must be a string", fname);
		o->body = lua_tolstring(L, -1, &o->body_len);
		o->has_body = 1;
	}
	lua_pop(L, 1);

	t = lua_getfield(L, 1, "follow_redirects");
	if (t != LUA_TNIL && t != LUA_TBOOLEAN)
		luaL_error(L, "%s: option 'follow_redirects' must be a boolean", fname);
	o->follow_redirects = lua_toboolean(L, -1);
	lua_pop(L, 1);

	o->timeout = opt_seconds(L, fname, "timeout", stream ? 0 : REQ_TIMEOUT);
	o->connect_timeout = opt_seconds(L, fname, "connect_timeout", CONNECT_TIMEOUT);
	o->header_timeout = opt_seconds(L, fname, "header_timeout", 0);
	o->idle_timeout = opt_seconds(L, fname, "idle_timeout", stream ? STREAM_IDLE_TIMEOUT : 0);
	o->max_body = opt_size(L, fname, "max_body", MAX_BODY);
	o->stream = stream;
	if (stream) {
		o->max_line = opt_size(L, fname, "max_line", MAX_LINE);
		o->max_event = opt_size(L, fname, "max_event", MAX_EVENT);
		o->max_error_body = o->max_body < MAX_ERROR_BODY ? o->max_body : MAX_ERROR_BODY;
		t = lua_getfield(L, 1, "events");
		if (t != LUA_TNIL) {
			const char *ev = t == LUA_TSTRING ? lua_tostring(L, -1) : "";
			if (strcmp(ev, "auto") == 0)
				o->sse_auto = 1;
			else if (strcmp(ev, "sse") != 0)
				luaL_error(L, "%s: option 'events' must be \"sse\" or \"auto\"", fname);
		}
		lua_pop(L, 1);
	}

	/* Headers: "name: value" strings kept in a table at the top of the stack. */
	lua_newtable(L);
	int lines = lua_gettop(L);
	t = lua_getfield(L, 1, "headers");
	if (t != LUA_TNIL && t != LUA_TTABLE)
		luaL_error(L, "%s: option 'headers' must be a table", fname);
	int n = 0;
	if (t == LUA_TTABLE) {
		lua_pushnil(L);
		while (lua_next(L, -2)) {
			size_t kl = 0, vl;
			const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &kl) : NULL;
			if (!k || !is_token(k, kl))
				luaL_error(L, "%s: header names must be tokens", fname);
			if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
				luaL_error(L, "%s: header '%s' must have a string value", fname,
					   lua_tostring(L, -2));
			const char *v = lua_tolstring(L, -1, &vl);
			if (strpbrk(v, "\r\n") || strlen(v) != vl)
				luaL_error(L, "%s: header '%s' holds a line break or NUL", fname,
					   lua_tostring(L, -2));
			lua_pushfstring(L, "%s: %s", lua_tostring(L, -2), v);
			lua_rawseti(L, lines, ++n);
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	/* stack: ... lines */
	const char **arr = lua_newuserdatauv(L, sizeof *arr * (size_t)(n ? n : 1), 0);
	for (int i = 0; i < n; i++) {
		lua_rawgeti(L, lines, i + 1);
		arr[i] = lua_tostring(L, -1); /* anchored by the lines table */
		lua_pop(L, 1);
	}
	o->headers = arr;
	o->nheaders = (size_t)n;
	/* stack: ... lines arr */
}

/* Pushes the headers as a table: lower-case names, repeats joined with ", ". */
static void push_headers(lua_State *L, const struct lr_http_resp *resp)
{
	lua_newtable(L);
	const char *p = resp->headers.data, *end = p + resp->headers.len;
	while (p && p < end) {
		size_t nl = strlen(p);
		const char *v = p + nl + 1;
		size_t vl = strlen(v);
		lua_pushlstring(L, p, nl);
		if (lua_rawget(L, -2) == LUA_TSTRING) {
			lua_pushliteral(L, ", ");
			lua_pushlstring(L, v, vl);
			lua_concat(L, 3);
		} else {
			lua_pop(L, 1);
			lua_pushlstring(L, v, vl);
		}
		/* stack: headers value */
		lua_pushlstring(L, p, nl);
		lua_insert(L, -2);
		lua_rawset(L, -3);
		p = v + vl + 1;
	}
}

/* { status =, headers =, body = } */
static void push_response(lua_State *L, const struct lr_http_resp *resp)
{
	lua_createtable(L, 0, 4);
	lua_pushinteger(L, resp->status);
	lua_setfield(L, -2, "status");
	push_headers(L, resp);
	lua_setfield(L, -2, "headers");
	lua_pushlstring(L, resp->body.data ? resp->body.data : "", resp->body.len);
	lua_setfield(L, -2, "body");
	lua_pushboolean(L, resp->connects == 0);
	lua_setfield(L, -2, "reused");
}

/* ---- rig.core.http_request ---- */

struct reqop {
	struct lr_wait wait;
	struct lr_http_req *req;
};

static void reqop_notify(void *arg)
{
	struct reqop *op = arg;
	if (lr_http_resp(op->req)->done)
		lr_sched_wake(&op->wait);
}

static void reqop_cancel(struct lr_wait *w)
{
	struct reqop *op = (struct reqop *)w;
	lr_http_req_free(op->req);
	op->req = NULL;
}

static int reqop_gc(lua_State *L)
{
	struct reqop *op = lua_touserdata(L, 1);
	lr_http_req_free(op->req);
	op->req = NULL;
	return 0;
}

static int request_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct reqop *op = (struct reqop *)ctx;
	lr_sched_resumed(L, &op->wait);
	const struct lr_http_resp *resp = lr_http_resp(op->req);
	if (resp->rc) {
		lua_pushstring(L, resp->err.msg);
		int rc = resp->rc;
		lr_http_req_free(op->req);
		op->req = NULL;
		return lr_pushfail(L, rc, "%s", lua_tostring(L, -1));
	}
	push_response(L, resp);
	lr_http_req_free(op->req);
	op->req = NULL;
	return 1;
}

/* rig.core.http_request(opts) -> resp | nil, message, code */
static int http_request(lua_State *L)
{
	struct lr_http_opts o;
	lua_settop(L, 1);
	check_opts(L, "rig.http.request", 0, &o);
	lr_sched_enter(L);
	struct lr_http *c = get_client(L);
	struct reqop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, REQOP_MT);
	op->wait.cancel = reqop_cancel;
	struct lr_err err = { "" };
	int rc = lr_http_start(c, &o, reqop_notify, op, &op->req, &err);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	return lr_sched_await(L, &op->wait, (lua_KContext)op, request_k);
}

/* ---- rig.core.http_stream ---- */

struct stream {
	struct lr_wait wait;
	struct lr_http_req *req;
	int waiting;              /* a task waits in wait */
	int closed;               /* closed by the owner */
	int cancelled;            /* aborted under a waiting task */
	int ended;                /* the end was reported */
	int mode;                 /* the waiting call: STEP_TABLE, STEP_READ or STEP_BATCH */
	int rc;                   /* how it ended */
	struct lr_err err;
};

/* What stream_step hands out: next()'s table, read()'s strings, batch()'s array. */
enum { STEP_TABLE, STEP_READ, STEP_BATCH };

/* batch()'s default and largest number of events per call. */
#define BATCH_DEFAULT 64
#define BATCH_MAX 1024

static void stream_notify(void *arg)
{
	struct stream *s = arg;
	if (s->waiting) {
		s->waiting = 0;
		lr_sched_wake(&s->wait);
	}
}

static void stream_abort(struct stream *s)
{
	lr_http_req_free(s->req);
	s->req = NULL;
}

static void stream_cancel(struct lr_wait *w)
{
	struct stream *s = (struct stream *)w;
	s->waiting = 0;
	s->cancelled = 1;
	stream_abort(s);
}

static struct stream *check_stream(lua_State *L)
{
	struct stream *s = luaL_checkudata(L, 1, STREAM_MT);
	if (s->closed)
		luaL_error(L, "attempt to use a closed rig.http.stream");
	return s;
}

static int stream_gc(lua_State *L)
{
	struct stream *s = lua_touserdata(L, 1);
	stream_abort(s);
	return 0;
}

/* st:close(), __close: aborts the transfer; a task waiting in next() gets "cancelled". */
static int stream_close(lua_State *L)
{
	struct stream *s = luaL_checkudata(L, 1, STREAM_MT);
	if (s->closed)
		return 0;
	s->closed = 1;
	stream_abort(s);
	if (s->waiting) {
		s->waiting = 0;
		s->cancelled = 1;
		lr_sched_wake(&s->wait);
	}
	return 0;
}

static int stream_wait(lua_State *L, struct stream *s, lua_KFunction k)
{
	if (s->waiting)
		return luaL_error(L, "rig.http.stream: another task is already waiting on this stream");
	lr_sched_enter(L);
	s->waiting = 1;
	s->wait.cancel = stream_cancel;
	return lr_sched_await(L, &s->wait, (lua_KContext)s, k);
}

static int stream_next_k(lua_State *L, int status, lua_KContext ctx);

/*
 * batch()'s body once an event has come (e, taken): moves up to max events
 * that have come into buf (index 2) as data, event pairs, without waiting
 * for more.
 * One Lua string per event: the event name of a run of events with the same
 * name is one string, pushed once (a provider stream names every event the
 * same, or alternates a few).
 */
static int stream_fill(lua_State *L, struct stream *s, struct lr_http_event *e)
{
	lua_Integer max = lua_tointeger(L, 3);
	lua_Integer n = 0;
	int cut = 0;
	lua_settop(L, 3);
	lua_pushnil(L); /* stack: st buf max name: the last event name pushed */
	const char *name = NULL;
	size_t name_len = 0;
	do {
		lua_pushlstring(L, e->data, e->data_len);
		lua_rawseti(L, 2, 2 * n + 1);
		if (!name || name_len != e->type_len || memcmp(name, e->type, name_len) != 0) {
			lua_pushlstring(L, e->type, e->type_len);
			lua_replace(L, 4);
			name = lua_tolstring(L, 4, &name_len); /* anchored in slot 4 */
		}
		lua_pushvalue(L, 4);
		lua_rawseti(L, 2, 2 * n + 2);
		n++;
		cut = e->unterminated;
		/* e's bytes are copied: the next lr_http_next may move them. */
	} while (n < max && !cut && lr_http_next(s->req, e));
	lua_pushnil(L);
	lua_rawseti(L, 2, 2 * n + 1);
	lua_pushinteger(L, n);
	if (!cut)
		return 1;
	lua_pushboolean(L, 1);
	return 2;
}

/* The body of next(): an event, the end, a failure, or wait for more. */
static int stream_step(lua_State *L, struct stream *s)
{
	if (s->cancelled || !s->req) {
		if (!s->rc) {
			s->rc = LR_ECANCELLED;
			lr_err_set(&s->err, "http: stream was closed");
		}
		s->ended = 1;
		return lr_pushfail(L, s->rc, "%s", s->err.msg);
	}
	struct lr_http_event e;
	if (lr_http_next(s->req, &e)) {
		if (s->mode == STEP_BATCH)
			return stream_fill(L, s, &e);
		if (s->mode == STEP_READ) {
			lua_pushlstring(L, e.data, e.data_len);
			if (e.type_len)
				lua_pushlstring(L, e.type, e.type_len);
			else
				lua_pushliteral(L, "message");
			int n = 2;
			if (e.unterminated) {
				lua_pushboolean(L, 1);
				n = 3;
			}
			return n;
		}
		lua_createtable(L, 0, 2 + (e.id != NULL) + (e.retry >= 0) + e.unterminated);
		lua_pushlstring(L, e.type, e.type_len);
		lua_setfield(L, -2, "event");
		lua_pushlstring(L, e.data, e.data_len);
		lua_setfield(L, -2, "data");
		if (e.id) {
			lua_pushlstring(L, e.id, e.id_len);
			lua_setfield(L, -2, "id");
		}
		if (e.retry >= 0) {
			lua_pushinteger(L, e.retry);
			lua_setfield(L, -2, "retry");
		}
		if (e.unterminated) {
			lua_pushboolean(L, 1);
			lua_setfield(L, -2, "unterminated");
		}
		return 1;
	}
	const struct lr_http_resp *resp = lr_http_resp(s->req);
	if (resp->done) {
		s->ended = 1;
		s->rc = resp->rc;
		if (resp->rc) {
			s->err = resp->err;
			return lr_pushfail(L, s->rc, "%s", s->err.msg);
		}
		lua_pushnil(L);
		return 1;
	}
	return stream_wait(L, s, stream_next_k);
}

static int stream_next_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct stream *s = (struct stream *)ctx;
	lr_sched_resumed(L, &s->wait);
	return stream_step(L, s);
}

/* st:next() -> ev | nil (the end) | nil, message, code */
/* The end (nil), its failure, or the next event in the form of mode. */
static int stream_take(lua_State *L, struct stream *s, int mode)
{
	if (s->waiting)
		return luaL_error(L, "rig.http.stream: another task is already waiting on this stream");
	s->mode = mode;
	if (s->ended) {
		if (s->rc)
			return lr_pushfail(L, s->rc, "%s", s->err.msg);
		lua_pushnil(L);
		return 1;
	}
	return stream_step(L, s);
}

static int stream_next(lua_State *L)
{
	return stream_take(L, check_stream(L), STEP_TABLE);
}

/*
 * st:read() -> data, event [, true] | nil (the end) | nil, message, code:
 * next() without the table, for decoders that only need the data and the
 * event name ("message" when the event had none). The third value is true
 * for a last event the end of the stream cut short (no blank line after
 * it; next() says unterminated = true).
 */
static int stream_read(lua_State *L)
{
	return stream_take(L, check_stream(L), STEP_READ);
}

/*
 * st:batch(buf [, max]) -> n [, true] | nil (the end) | nil, message, code:
 * read() for up to max events (BATCH_DEFAULT) at once, into the caller's
 * table: buf[2i-1] is the i-th event's data and buf[2i] its name, for i =
 * 1..n, and buf[2n+1] = nil (the rest of buf is left as it was). It waits
 * only while no event has come, so n is at least 1 and at most what had
 * arrived. The second value is true when the last of the n events was cut
 * short by the end of the stream (read()'s third value). No table per
 * event: the form for a decoder that reads many events, reusing buf.
 */
static int stream_batch(lua_State *L)
{
	struct stream *s = check_stream(L);
	luaL_checktype(L, 2, LUA_TTABLE);
	lua_Integer max = luaL_optinteger(L, 3, BATCH_DEFAULT);
	luaL_argcheck(L, max >= 1 && max <= BATCH_MAX, 3, "max must be 1..1024");
	lua_settop(L, 2);
	lua_pushinteger(L, max);
	return stream_take(L, s, STEP_BATCH);
}

/* st:events() -> iterator over next(); ends at the end or at a failure. */
static int stream_events(lua_State *L)
{
	check_stream(L);
	lua_pushcfunction(L, stream_next);
	lua_pushvalue(L, 1);
	return 2;
}

/*
 * st:head() -> the first bytes of the body (at most LR_HTTP_HEAD_BYTES) as
 * they came, events or not: what to show when a 2xx answer was no event
 * stream (a proxy's HTML page). "" before any byte, or once closed.
 */
static int stream_head(lua_State *L)
{
	struct stream *s = luaL_checkudata(L, 1, STREAM_MT);
	const struct lr_http_resp *resp = s->req ? lr_http_resp(s->req) : NULL;
	if (resp && resp->body.len)
		lua_pushlstring(L, resp->body.data, resp->body.len);
	else
		lua_pushliteral(L, "");
	return 1;
}

/* st:result() -> true | nil, message, code: how the stream ended. */
static int stream_result(lua_State *L)
{
	struct stream *s = check_stream(L);
	if (!s->ended && !s->cancelled)
		return luaL_error(L, "rig.http.stream: result() before the stream ended");
	if (s->cancelled && !s->rc)
		return lr_pushfail(L, LR_ECANCELLED, "http: stream was closed");
	if (s->rc)
		return lr_pushfail(L, s->rc, "%s", s->err.msg);
	lua_pushboolean(L, 1);
	return 1;
}

/* Fields (status, headers) live in the uservalue; methods in the upvalue. */
static int stream_index(lua_State *L)
{
	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
		return 1;
	lua_pop(L, 1);
	lua_getiuservalue(L, 1, 1);
	lua_pushvalue(L, 2);
	lua_rawget(L, -2);
	return 1;
}

static int stream_tostring(lua_State *L)
{
	struct stream *s = luaL_checkudata(L, 1, STREAM_MT);
	lua_pushfstring(L, "rig.http.stream (%s)",
			s->closed ? "closed" : s->ended ? "ended" : "open");
	return 1;
}

static int stream_open_k(lua_State *L, int status, lua_KContext ctx);

/* Waits for the headers; then the stream, or the failure with the error body. */
static int stream_open_step(lua_State *L, struct stream *s)
{
	const struct lr_http_resp *resp = lr_http_resp(s->req);
	if (!resp->headers_done && !resp->done)
		return stream_wait(L, s, stream_open_k);
	if (!resp->headers_done) {
		/* Failed before the headers: connect, header timeout, ... */
		lua_pushstring(L, resp->err.msg);
		int rc = resp->rc;
		stream_abort(s);
		s->closed = 1;
		return lr_pushfail(L, rc, "%s", lua_tostring(L, -1));
	}
	if (resp->status / 100 != 2) {
		if (!resp->done)
			return stream_wait(L, s, stream_open_k);
		lua_getfield(L, 1, "url");
		char host[128];
		const char *u = lua_tostring(L, -1), *p = strstr(u, "://");
		p = p ? p + 3 : u;
		size_t n = strcspn(p, "/?#");
		if (n >= sizeof host)
			n = sizeof host - 1;
		memcpy(host, p, n);
		host[n] = '\0';
		lua_pop(L, 1);
		luaL_pushfail(L);
		lua_pushfstring(L, "http: status %d from '%s'", (int)resp->status, host);
		lua_pushstring(L, lr_errcode(LR_EHTTPSTATUS));
		push_response(L, resp);
		stream_abort(s);
		s->closed = 1;
		return 4;
	}
	if (resp->buffered && !resp->done)
		return stream_wait(L, s, stream_open_k);
	if (resp->buffered && resp->rc) {
		/* events = "auto": the whole body failed (cap, reset, timeout) */
		lua_pushstring(L, resp->err.msg);
		int rc = resp->rc;
		stream_abort(s);
		s->closed = 1;
		return lr_pushfail(L, rc, "%s", lua_tostring(L, -1));
	}
	lua_settop(L, STREAM_IDX);
	lua_getiuservalue(L, STREAM_IDX, 1);
	lua_pushinteger(L, resp->status);
	lua_setfield(L, -2, "status");
	push_headers(L, resp);
	lua_setfield(L, -2, "headers");
	if (resp->buffered) {
		lua_pushlstring(L, resp->body.data ? resp->body.data : "", resp->body.len);
		lua_setfield(L, -2, "body");
		s->ended = 1;
	}
	lua_pop(L, 1);
	return 1; /* the stream, on top */
}

static int stream_open_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct stream *s = (struct stream *)ctx;
	lr_sched_resumed(L, &s->wait);
	if (!s->req)
		return lr_pushfail(L, LR_ECANCELLED, "http: stream was closed");
	return stream_open_step(L, s);
}

/* rig.core.http_stream(opts) -> st | nil, message, code [, resp] */
static int http_stream(lua_State *L)
{
	struct lr_http_opts o;
	lua_settop(L, 1);
	check_opts(L, "rig.http.stream", 1, &o);
	lr_sched_enter(L);
	struct lr_http *c = get_client(L);
	struct stream *s = lua_newuserdatauv(L, sizeof *s, 1);
	memset(s, 0, sizeof *s);
	luaL_setmetatable(L, STREAM_MT);
	lua_newtable(L);
	lua_setiuservalue(L, -2, 1);
	struct lr_err err = { "" };
	int rc = lr_http_start(c, &o, stream_notify, s, &s->req, &err);
	if (rc) {
		s->closed = 1;
		return lr_pushfail(L, rc, "%s", err.msg);
	}
	return stream_open_step(L, s);
}

void lr__http_open(lua_State *L)
{
	/* stack: core */
	luaL_newmetatable(L, CLIENT_MT);
	lua_pushcfunction(L, client_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	luaL_newmetatable(L, REQOP_MT);
	lua_pushcfunction(L, reqop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	luaL_newmetatable(L, STREAM_MT);
	static const luaL_Reg methods[] = {
		{ "next", stream_next },     { "read", stream_read },     { "events", stream_events },
		{ "batch", stream_batch },
		{ "result", stream_result }, { "close", stream_close },
		{ "head", stream_head },
		{ NULL, NULL },
	};
	luaL_newlib(L, methods);
	lua_pushcclosure(L, stream_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, stream_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, stream_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, stream_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	lua_pushcfunction(L, http_request);
	lua_setfield(L, -2, "http_request");
	lua_pushcfunction(L, http_stream);
	lua_setfield(L, -2, "http_stream");
}
