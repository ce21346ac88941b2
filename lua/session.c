/*
 * session.c — sessions for Lua (rig.core.session_open and the rig.session
 * handle), their subscriptions, and the journal and catalog readers. The
 * runner (stdlib/rig/session.lua) builds on these; the contract is
 * docs/design/sessions.md.
 *
 * Waiting follows the coroutine bridge. Operations that run on the pool
 * live on the C heap: a cancelled task abandons them and their completion
 * frees them (an opened session is closed again). A cancelled emit-wait
 * only detaches: the record stays queued and still lands.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../storage/storage.h"

#define SESSION_MT "rig.session"
#define SUB_MT "rig.session.sub"
#define SOPEN_MT "rig.op.session_open"
#define EMITOP_MT "rig.op.session_emit"
#define NEXTOP_MT "rig.op.session_next"
#define CLOSEOP_MT "rig.op.session_close"
#define READOP_MT "rig.op.session_read"
#define PIPEOP_MT "rig.op.session_pipe"

struct sess {
	struct lr_session *s; /* first, for lr_checkhandle; NULL once closed */
	void *storeref;
	char id[37];
	struct lr_wait *close_waiter;
	int close_done;
};
LR_HANDLE_FIRST(struct sess, s);

struct pipeop;

struct subud {
	struct lr_session_sub *sub; /* first, for lr_checkhandle; NULL once closed */
	struct lr_wait *waiter;
	struct pipeop *pipe;        /* sub:pipe in progress: events go to C */
};
LR_HANDLE_FIRST(struct subud, sub);

static struct sess *check_sess(lua_State *L, int idx)
{
	return lr_checkhandle(L, idx, SESSION_MT);
}

static void store_unref_cb(void *ref)
{
	lr__store_unref(ref);
}

/* Unknown option fields raise, naming the field. */
static void check_fields(lua_State *L, int idx, const char *fn, const char *const *known)
{
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
		int ok = 0;
		for (int i = 0; k && !ok && known[i]; i++)
			ok = strcmp(k, known[i]) == 0;
		if (!ok)
			luaL_error(L, "%s: unknown option '%s'", fn, k ? k : luaL_typename(L, -2));
		lua_pop(L, 1);
	}
}

/* An optional field of the table at idx of type t: 1 and pushed, or 0 and nothing pushed. */
static int opt_field(lua_State *L, int idx, const char *fn, const char *k, int t)
{
	int got = lua_getfield(L, idx, k);
	if (got == LUA_TNIL) {
		lua_pop(L, 1);
		return 0;
	}
	if (got != t)
		luaL_error(L, "%s: option '%s' must be a %s", fn, k, lua_typename(L, t));
	return 1;
}

/* ---- session_open ---- */

struct openop {
	struct lr_session_open o;
	struct openud *ud; /* NULL once abandoned */
	void *storeref;
	int pending;       /* on the pool: open_done will run */
};

struct openud {
	struct lr_wait wait;
	struct openop *op;
};

static void openop_finish(struct openop *op)
{
	if (op->o.session)
		lr_session_free(op->o.session, store_unref_cb, op->storeref);
	else
		lr__store_unref(op->storeref);
	free(op);
}

static void open_done(struct lr_session_open *o)
{
	struct openop *op = (struct openop *)o;
	op->pending = 0;
	if (!op->ud) {
		openop_finish(op);
		return;
	}
	lr_sched_wake(&op->ud->wait);
}

/* The userdata lets go of its op: abandoned while on the pool, freed otherwise. */
static void openud_release(struct openud *ud)
{
	struct openop *op = ud->op;
	ud->op = NULL;
	if (!op)
		return;
	if (op->pending)
		op->ud = NULL; /* the worker finishes; open_done closes what it opened */
	else
		openop_finish(op);
}

static void open_cancel(struct lr_wait *w)
{
	openud_release((struct openud *)w);
}

static int openud_gc(lua_State *L)
{
	openud_release(lua_touserdata(L, 1));
	return 0;
}

static int open_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct openud *ud = (struct openud *)ctx;
	lr_sched_resumed(L, &ud->wait);
	struct openop *op = ud->op;
	if (op->o.rc) {
		ud->op = NULL;
		int rc = op->o.rc;
		char msg[sizeof op->o.err.msg];
		memcpy(msg, op->o.err.msg, sizeof msg);
		openop_finish(op);
		const char *code = rc == LR_ELEASEHELD ? "held" : rc == LR_ENOTFOUND ? "not_found"
				   : rc == LR_ECORRUPT ? "corrupt" : "io";
		luaL_pushfail(L);
		lua_pushstring(L, msg);
		lua_pushstring(L, code);
		return 3;
	}
	/* the handle first: if making it raises, the op (and the open session) stays with ud */
	struct sess *u = lua_newuserdatauv(L, sizeof *u, 0);
	memset(u, 0, sizeof *u);
	luaL_setmetatable(L, SESSION_MT);
	ud->op = NULL;
	u->s = op->o.session;
	u->storeref = op->storeref;
	snprintf(u->id, sizeof u->id, "%s", lr_session_id(u->s));
	free(op);
	return 1;
}

static const char *const open_fields[] = { "catalog", NULL };

/* rig.core.session_open(store, sid | nil [, { catalog = false }]) -> sess | nil, msg, code */
static int core_session_open(lua_State *L)
{
	struct lr_store *st;
	luaL_checkudata(L, 1, "rig.store");
	const char *sid = luaL_optstring(L, 2, NULL);
	int no_catalog = 0;
	if (!lua_isnoneornil(L, 3)) {
		luaL_checktype(L, 3, LUA_TTABLE);
		check_fields(L, 3, "rig.core.session_open", open_fields);
		if (opt_field(L, 3, "rig.core.session_open", "catalog", LUA_TBOOLEAN)) {
			no_catalog = !lua_toboolean(L, -1);
			lua_pop(L, 1);
		}
		lua_settop(L, 2);
	}
	if (sid) {
		struct lr_err e;
		if (lr_journal_id_check(sid, &e) != 0)
			return luaL_error(L, "rig.core.session_open: invalid session id '%s'", sid);
	}
	lr_sched_enter(L);
	struct openud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
	memset(ud, 0, sizeof *ud);
	luaL_setmetatable(L, SOPEN_MT);
	struct openop *op = calloc(1, sizeof *op);
	if (!op)
		return luaL_error(L, "rig.core.session_open: out of memory");
	op->ud = ud; /* ud owns op from here: a raise below leaves it to ud's __gc */
	ud->op = op;
	op->storeref = lr__store_ref(L, 1, &st);
	op->o.loop = lr_state_of(L)->loop;
	op->o.store = st;
	snprintf(op->o.sid, sizeof op->o.sid, "%s", sid ? sid : "");
	op->o.no_catalog = no_catalog;
	op->o.done = open_done;
	ud->wait.cancel = open_cancel;
	op->pending = 1;
	int rc = lr_session_open(&op->o);
	if (rc) {
		op->pending = 0;
		char msg[sizeof op->o.err.msg];
		memcpy(msg, op->o.err.msg, sizeof msg);
		ud->op = NULL;
		openop_finish(op);
		return lr_pushfail(L, rc, "%s", msg);
	}
	return lr_sched_await(L, &ud->wait, (lua_KContext)ud, open_k);
}

/* ---- the session handle ---- */

static int sess_index(lua_State *L)
{
	struct sess *u = luaL_checkudata(L, 1, SESSION_MT);
	const char *k = lua_tostring(L, 2);
	if (k && strcmp(k, "id") == 0) {
		lua_pushstring(L, u->id);
		return 1;
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static int sess_epoch(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)lr_session_epoch(check_sess(L, 1)->s));
	return 1;
}

static int sess_tip(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)lr_session_tip(check_sess(L, 1)->s));
	return 1;
}

static int sess_faulted(lua_State *L)
{
	const char *f = lr_session_fault(check_sess(L, 1)->s);
	if (!f)
		return 0;
	lua_pushstring(L, f);
	return 1;
}

/* An emit that waits for durability. */
struct emitop {
	struct lr_wait wait;
	struct lr_session_emission *em; /* NULL once settled or detached */
	int settled;
	int rc;
	uint64_t seq;
	char msg[512];
};

static void emit_done(void *arg, int rc, uint64_t seq, const char *msg)
{
	struct emitop *op = arg;
	op->em = NULL;
	op->settled = 1;
	op->rc = rc;
	op->seq = seq;
	snprintf(op->msg, sizeof op->msg, "%s", msg ? msg : "");
	lr_sched_wake(&op->wait);
}

static void emit_cancel(struct lr_wait *w)
{
	struct emitop *op = (struct emitop *)w;
	lr_session_emission_detach(op->em); /* it still lands */
	op->em = NULL;
}

static int emitop_gc(lua_State *L)
{
	struct emitop *op = lua_touserdata(L, 1);
	lr_session_emission_detach(op->em);
	op->em = NULL;
	return 0;
}

static int push_faulted(lua_State *L, const char *msg)
{
	luaL_pushfail(L);
	lua_pushstring(L, msg);
	lua_pushliteral(L, "faulted");
	return 3;
}

static int emit_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct emitop *op = (struct emitop *)ctx;
	lr_sched_resumed(L, &op->wait);
	if (op->rc)
		return push_faulted(L, op->msg);
	lua_pushinteger(L, (lua_Integer)op->seq);
	return 1;
}

static const char *const emit_fields[] = { "type", "loop_id", "enduring", "ends_turn", "kind",
					   "id", "wait", NULL };

/* The id option, checked (the string stays on the stack while used). */
static const char *check_emit_id(lua_State *L, int idx, const char *fn)
{
	size_t idl;
	const char *id = lua_tolstring(L, idx, &idl);
	if (idl > LR_JOURNAL_ID_MAX || strlen(id) != idl)
		luaL_error(L, "%s: option 'id' is longer than 256 bytes or holds NUL", fn);
	for (size_t i = 0; i < idl; i++)
		if ((unsigned char)id[i] < 0x20 || (unsigned char)id[i] > 0x7e)
			luaL_error(L, "%s: option 'id' must be printable ASCII", fn);
	return id;
}

/* An emit that waits gets its op before the record is handed over; NULL otherwise. */
static struct emitop *emit_prepare(lua_State *L, struct lr_session_emit *a, int wait)
{
	if (!wait)
		return NULL;
	lr_sched_enter(L);
	struct emitop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, EMITOP_MT);
	op->wait.cancel = emit_cancel;
	a->done = emit_done;
	a->arg = op;
	return op;
}

/* lr_session_emit's answer, as sess:emit returns it. */
static int emit_finish(lua_State *L, struct sess *u, int rc, const char *msg,
		       struct lr_session_emission *em, struct emitop *op)
{
	if (rc == LR_EREFUSED)
		return push_faulted(L, msg);
	if (rc == LR_ECLOSED) {
		luaL_pushfail(L);
		lua_pushfstring(L, "session %s is closed", u->id);
		lua_pushliteral(L, "closed");
		return 3;
	}
	if (rc)
		return lr_pushfail(L, rc, "rig.session.emit: %s", msg ? msg : lr_strerror(rc));
	if (!op) {
		lua_pushboolean(L, 1);
		return 1;
	}
	op->em = em;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, emit_k);
}

/* What sess_emit and sess_emit_event share once their options are read (a->json set). */
static int emit_start(lua_State *L, struct sess *u, struct lr_session_emit *a, int wait)
{
	if (a->len > LR_JOURNAL_BODY_MAX)
		return luaL_error(L, "%s: body of %d bytes is too large", "rig.session.emit",
				  (int)a->len);
	struct emitop *op = emit_prepare(L, a, wait);
	const char *msg;
	struct lr_session_emission *em = NULL;
	int rc = lr_session_emit(u->s, a, &em, &msg);
	return emit_finish(L, u, rc, msg, em, op);
}

/*
 * emit_event with a table: encoded here (rig.json.encode's text, in its
 * shared buffer) and copied by lr_session_emit, never a Lua string. Nothing
 * between the encode and its end can raise or run Lua.
 */
static int emit_encoded(lua_State *L, struct sess *u, struct lr_session_emit *a, int wait)
{
	struct emitop *op = emit_prepare(L, a, wait);
	struct lr__json_text t;
	if (lr__json_encode_begin(L, 2, &t) != 0) {
		luaL_pushfail(L);
		lua_insert(L, -2);
		lua_pushliteral(L, "encode");
		return 3; /* stack: ... nil message "encode" */
	}
	a->json = t.text;
	a->len = t.len;
	int toobig = a->len > LR_JOURNAL_BODY_MAX, rc = 0;
	const char *msg = NULL;
	struct lr_session_emission *em = NULL;
	if (!toobig)
		rc = lr_session_emit(u->s, a, &em, &msg); /* copies the text */
	lr__json_encode_end(&t);
	if (toobig)
		return luaL_error(L, "%s: body of %d bytes is too large", "rig.session.emit",
				  (int)a->len);
	return emit_finish(L, u, rc, msg, em, op);
}

/* sess:emit(json, meta) -> seq | true | nil, msg, code */
static int sess_emit(lua_State *L)
{
	struct sess *u = check_sess(L, 1);
	size_t len;
	const char *json = luaL_checklstring(L, 2, &len);
	luaL_checktype(L, 3, LUA_TTABLE);
	const char *fn = "rig.session.emit";
	check_fields(L, 3, fn, emit_fields);
	if (!opt_field(L, 3, fn, "type", LUA_TSTRING))
		return luaL_error(L, "%s: option 'type' must be a string", fn);
	lua_pop(L, 1);
	struct lr_session_emit a;
	memset(&a, 0, sizeof a);
	a.json = json;
	a.len = len;
	a.kind = LR_SESSION_EVENT;
	if (opt_field(L, 3, fn, "kind", LUA_TSTRING)) {
		const char *k = lua_tostring(L, -1);
		if (strcmp(k, "event") == 0)
			a.kind = LR_SESSION_EVENT;
		else if (strcmp(k, "command") == 0)
			a.kind = LR_SESSION_COMMAND;
		else if (strcmp(k, "gate_prepared") == 0)
			a.kind = LR_SESSION_GATE_PREPARED;
		else
			return luaL_error(L, "%s: option 'kind' must be \"event\", \"command\" or "
					  "\"gate_prepared\"", fn);
		lua_pop(L, 1);
	}
	if (opt_field(L, 3, fn, "loop_id", LUA_TSTRING)) {
		a.loop_id = lua_tostring(L, -1); /* stays on the stack while used */
	}
	if (opt_field(L, 3, fn, "enduring", LUA_TBOOLEAN)) {
		a.enduring = lua_toboolean(L, -1);
		lua_pop(L, 1);
	}
	if (opt_field(L, 3, fn, "ends_turn", LUA_TBOOLEAN))
		lua_pop(L, 1);
	if (opt_field(L, 3, fn, "id", LUA_TSTRING))
		a.id = check_emit_id(L, -1, fn); /* stays on the stack while used */
	int journaled = a.kind != LR_SESSION_EVENT || a.enduring;
	int wait = journaled;
	if (opt_field(L, 3, fn, "wait", LUA_TBOOLEAN)) {
		wait = journaled && lua_toboolean(L, -1);
		lua_pop(L, 1);
	}
	return emit_start(L, u, &a, wait);
}

/*
 * sess:emit_event(body, type, loop_id, enduring, id, wait) -> as sess:emit,
 * or nil, message, "encode"
 * An event (kind "event") with its options as arguments, for the runner's
 * every event (rig.session_base's emit): no options table to build and walk.
 * body is the JSON text, or a table to encode as rig.json.encode would (no
 * Lua string made; a value it cannot encode returns its message and
 * "encode", nothing emitted). loop_id and id may be nil; enduring and wait
 * are booleans (wait counts only for an enduring event). Misuse raises
 * with sess:emit's messages.
 */
static int sess_emit_event(lua_State *L)
{
	struct sess *u = check_sess(L, 1);
	const char *fn = "rig.session.emit";
	struct lr_session_emit a;
	memset(&a, 0, sizeof a);
	int encode = lua_type(L, 2) == LUA_TTABLE;
	if (!encode)
		a.json = luaL_checklstring(L, 2, &a.len);
	if (lua_type(L, 3) != LUA_TSTRING)
		return luaL_error(L, "%s: option 'type' must be a string", fn);
	a.kind = LR_SESSION_EVENT;
	int t = lua_type(L, 4);
	if (t == LUA_TSTRING)
		a.loop_id = lua_tostring(L, 4);
	else if (t > LUA_TNIL)
		return luaL_error(L, "%s: option '%s' must be a %s", fn, "loop_id",
				  lua_typename(L, LUA_TSTRING));
	if (lua_type(L, 5) != LUA_TBOOLEAN)
		return luaL_error(L, "%s: option '%s' must be a %s", fn, "enduring",
				  lua_typename(L, LUA_TBOOLEAN));
	a.enduring = lua_toboolean(L, 5);
	t = lua_type(L, 6);
	if (t == LUA_TSTRING)
		a.id = check_emit_id(L, 6, fn);
	else if (t > LUA_TNIL)
		return luaL_error(L, "%s: option '%s' must be a %s", fn, "id",
				  lua_typename(L, LUA_TSTRING));
	if (lua_type(L, 7) != LUA_TBOOLEAN)
		return luaL_error(L, "%s: option '%s' must be a %s", fn, "wait",
				  lua_typename(L, LUA_TBOOLEAN));
	int wait = a.enduring && lua_toboolean(L, 7);
	lua_settop(L, 7); /* the strings stay on the stack while used */
	return encode ? emit_encoded(L, u, &a, wait) : emit_start(L, u, &a, wait);
}

/* ---- subscriptions ---- */

struct pipeop {
	struct lr_wait wait;
	struct subud *su;           /* NULL once the pipe is over */
	void *res;                  /* the response (lr__server_hook) */
	struct lr_session_pipe *p;
	int why;
	uint64_t last;
};

static void sub_notify(void *arg)
{
	struct subud *su = arg;
	if (su->pipe) {
		lr_session_pipe_notify(su->pipe->p);
		return;
	}
	if (su->waiter) {
		struct lr_wait *w = su->waiter;
		su->waiter = NULL;
		lr_sched_wake(w);
	}
}

static const char *const sub_fields[] = { "loops", "ephemeral", "buffer", NULL };

/* sess:subscribe{ loops = "all" | { ... }, ephemeral = true, buffer = 1024 } -> sub */
static int sess_subscribe(lua_State *L)
{
	struct sess *u = check_sess(L, 1);
	const char *fn = "rig.session.subscribe";
	if (lua_isnoneornil(L, 2))
		lua_newtable(L);
	else
		luaL_checktype(L, 2, LUA_TTABLE);
	lua_settop(L, 2);
	check_fields(L, 2, fn, sub_fields);
	struct lr_session_filter f = { 1, NULL, 0, 1, 1024 };
	const char **names = NULL;
	int t = lua_getfield(L, 2, "loops"); /* stack: sess opts loops */
	if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "all") == 0) {
		f.all_loops = 1;
	} else if (t == LUA_TTABLE) {
		lua_Integer n = luaL_len(L, -1);
		if (n < 0 || n > 4096)
			return luaL_error(L, "%s: option 'loops' has too many names", fn);
		names = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *names, 0);
		/* stack: sess opts loops names */
		for (lua_Integer i = 1; i <= n; i++) {
			if (lua_geti(L, 3, i) != LUA_TSTRING)
				return luaL_error(L, "%s: option 'loops' entry %d is not a string", fn,
						  (int)i);
			names[i - 1] = lua_tostring(L, -1);
			lua_pop(L, 1); /* the string stays alive in the table */
		}
		f.all_loops = 0;
		f.loops = names;
		f.nloops = (size_t)n;
	} else if (t != LUA_TNIL) {
		return luaL_error(L, "%s: option 'loops' must be \"all\" or a list of names", fn);
	}
	if (opt_field(L, 2, fn, "ephemeral", LUA_TBOOLEAN)) {
		f.ephemeral = lua_toboolean(L, -1);
		lua_pop(L, 1);
	}
	if (opt_field(L, 2, fn, "buffer", LUA_TNUMBER)) {
		lua_Integer b = lua_tointeger(L, -1);
		if (!lua_isinteger(L, -1) || b < 1 || b > (1 << 24))
			return luaL_error(L, "%s: option 'buffer' must be an integer 1..16777216", fn);
		f.buffer = (size_t)b;
		lua_pop(L, 1);
	}
	struct subud *su = lua_newuserdatauv(L, sizeof *su, 0);
	memset(su, 0, sizeof *su);
	luaL_setmetatable(L, SUB_MT);
	int rc = lr_session_subscribe(u->s, &f, sub_notify, su, &su->sub);
	if (rc == LR_ECLOSED)
		return luaL_error(L, "%s: session %s is closing", fn, u->id);
	if (rc)
		return luaL_error(L, "%s: %s", fn, lr_strerror(rc));
	return 1;
}

static struct subud *check_sub(lua_State *L, int idx)
{
	return lr_checkhandle(L, idx, SUB_MT);
}

struct nextop {
	struct lr_wait wait;
	struct subud *su;
	struct lr_timer timer;
	int has_timer, timed_out;
};

static void next_timeout(struct lr_timer *t, void *arg)
{
	(void)t;
	struct nextop *op = arg;
	op->timed_out = 1;
	if (op->su->waiter == &op->wait)
		op->su->waiter = NULL;
	lr_sched_wake(&op->wait);
}

static void next_cancel(struct lr_wait *w)
{
	struct nextop *op = (struct nextop *)w;
	if (op->su && op->su->waiter == w)
		op->su->waiter = NULL;
	if (op->has_timer)
		lr_timer_stop(&op->timer);
}

static int nextop_gc(lua_State *L)
{
	struct nextop *op = lua_touserdata(L, 1);
	if (op->has_timer)
		lr_timer_release(&op->timer);
	op->has_timer = 0;
	return 0;
}

/* 1..2 results pushed, or -1 when nothing is there yet. */
static int sub_try(lua_State *L, struct subud *su)
{
	struct lr_session_event *ev;
	uint64_t cu = 0;
	int rc = lr_session_sub_next(su->sub, &ev, &cu);
	if (rc == 1) {
		lua_pushlstring(L, ev->data, ev->len);
		if (ev->seq)
			lua_pushinteger(L, (lua_Integer)ev->seq);
		else
			lua_pushnil(L);
		lr_session_event_unref(ev);
		return 2;
	}
	if (rc == LR_ETOOBIG) {
		luaL_pushfail(L);
		lua_pushfstring(L, "subscription overflowed: an enduring event did not fit the "
				   "buffer; catch up from the journal from seq %I", (lua_Integer)cu);
		lua_pushliteral(L, "overflow");
		return 3;
	}
	if (rc) {
		luaL_pushfail(L);
		lua_pushliteral(L, "subscription closed");
		lua_pushliteral(L, "closed");
		return 3;
	}
	return -1;
}

static int next_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct nextop *op = (struct nextop *)ctx;
	if (op->su->waiter == &op->wait)
		op->su->waiter = NULL;
	if (op->has_timer)
		lr_timer_stop(&op->timer);
	lr_sched_resumed(L, &op->wait);
	if (!op->su->sub) {
		luaL_pushfail(L);
		lua_pushliteral(L, "subscription closed");
		lua_pushliteral(L, "closed");
		return 3;
	}
	int n = sub_try(L, op->su);
	if (n >= 0)
		return n;
	if (op->timed_out)
		return lr_pushfail(L, LR_ETIMEOUT, "timeout");
	/* A wake with nothing to read (cannot happen today): wait again. */
	op->su->waiter = &op->wait;
	return lr_sched_await(L, &op->wait, ctx, next_k);
}

/* sub:next([timeout]) -> json, seq | nil, msg, code */
static int sub_next(lua_State *L)
{
	struct subud *su = check_sub(L, 1);
	double timeout = luaL_optnumber(L, 2, -1);
	int n = sub_try(L, su);
	if (n >= 0)
		return n;
	if (timeout == 0)
		return lr_pushfail(L, LR_ETIMEOUT, "timeout");
	lr_sched_enter(L);
	if (su->waiter)
		return luaL_error(L, "rig.session.sub.next: another task is waiting on this "
				  "subscription");
	struct nextop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, NEXTOP_MT);
	op->su = su;
	op->wait.cancel = next_cancel;
	if (timeout > 0) {
		if (lr_timer_init(lr_state_of(L)->loop, &op->timer, next_timeout, op))
			return luaL_error(L, "out of memory");
		op->has_timer = 1;
		lr_timer_start(&op->timer, timeout);
	}
	su->waiter = &op->wait;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, next_k);
}

static int sub_dropped(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)lr_session_sub_dropped(check_sub(L, 1)->sub));
	return 1;
}

static void pipe_release(struct pipeop *op);
static void pipe_done(void *arg, int why);

static int sub_close(lua_State *L)
{
	struct subud *su = luaL_checkudata(L, 1, SUB_MT);
	if (su->pipe) { /* a task piping this subscription ends with "closed" */
		struct pipeop *op = su->pipe;
		int ended = op->why != 0; /* its wake is on the way */
		pipe_release(op);
		if (!ended)
			pipe_done(op, LR_SPIPE_CLOSED);
	}
	if (su->sub) {
		lr_session_sub_free(su->sub);
		su->sub = NULL;
	}
	sub_notify(su); /* a task waiting in next() sees "closed" */
	return 0;
}

/* ---- sub:pipe: the live part of an SSE stream, in C (host/session_pipe.c) ---- */

/* Ends the pipe (C side): unhooks the response and the subscription. */
static void pipe_release(struct pipeop *op)
{
	if (!op->su)
		return;
	op->last = lr_session_pipe_last(op->p);
	lr_session_pipe_free(op->p);
	op->p = NULL;
	lr__server_hook(op->res, NULL, NULL);
	op->su->pipe = NULL;
	op->su = NULL;
}

static void pipe_done(void *arg, int why)
{
	struct pipeop *op = arg;
	op->why = why;
	lr_sched_wake(&op->wait);
}

static void pipe_drained(void *arg)
{
	struct pipeop *op = arg;
	lr_session_pipe_drained(op->p);
}

static void pipe_cancel(struct lr_wait *w)
{
	pipe_release((struct pipeop *)w);
}

static int pipeop_gc(lua_State *L)
{
	pipe_release(lua_touserdata(L, 1));
	return 0;
}

static int pipe_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct pipeop *op = (struct pipeop *)ctx;
	pipe_release(op);
	lr_sched_resumed(L, &op->wait);
	switch (op->why) {
	case LR_SPIPE_OVERFLOW: lua_pushliteral(L, "overflow"); break;
	case LR_SPIPE_CLOSED: lua_pushliteral(L, "closed"); break;
	case LR_SPIPE_GONE: lua_pushliteral(L, "gone"); break;
	default: return luaL_error(L, "out of memory");
	}
	lua_pushinteger(L, (lua_Integer)op->last);
	return 2;
}

static const char *const pipe_fields[] = { "last", "heartbeat", NULL };

/*
 * sub:pipe(res, { last = 0, heartbeat = 20 }) -> why, last
 * Forwards the subscription's events to the started SSE response res in C
 * until the subscription overflows ("overflow": catch up from the journal
 * after last, then pipe again), ends ("closed": the session is closing or
 * sub:close() was called) or the client leaves ("gone"). last: the highest
 * enduring seq sent or skipped; enduring events at or below opts.last are
 * not sent.
 */
static int sub_pipe(lua_State *L)
{
	const char *fn = "rig.session.sub.pipe";
	struct subud *su = check_sub(L, 1);
	void *res;
	struct lr_httpd_req *r = lr__server_stream(L, 2, fn, &res);
	if (lua_isnoneornil(L, 3))
		lua_newtable(L);
	else
		luaL_checktype(L, 3, LUA_TTABLE);
	lua_settop(L, 3);
	check_fields(L, 3, fn, pipe_fields);
	struct lr_session_pipe_config c = { 0 };
	if (opt_field(L, 3, fn, "last", LUA_TNUMBER)) {
		if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
			return luaL_error(L, "%s: option 'last' must be a non-negative integer", fn);
		c.last = (uint64_t)lua_tointeger(L, -1);
		lua_pop(L, 1);
	}
	c.heartbeat = 20;
	if (opt_field(L, 3, fn, "heartbeat", LUA_TNUMBER)) {
		c.heartbeat = lua_tonumber(L, -1);
		if (!(c.heartbeat > 0))
			return luaL_error(L, "%s: option 'heartbeat' must be a positive number", fn);
		lua_pop(L, 1);
	}
	lr_sched_enter(L);
	if (su->waiter || su->pipe)
		return luaL_error(L, "%s: another task is waiting on this subscription", fn);
	struct pipeop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, PIPEOP_MT);
	c.done = pipe_done;
	c.arg = op;
	int rc = lr_session_pipe_new(lr_state_of(L)->loop, su->sub, r, &c, &op->p);
	if (rc)
		return luaL_error(L, "out of memory");
	op->su = su;
	op->res = res;
	op->last = c.last;
	op->wait.cancel = pipe_cancel;
	su->pipe = op;
	lr__server_hook(res, pipe_drained, op);
	return lr_sched_await(L, &op->wait, (lua_KContext)op, pipe_k);
}

/* ---- catalog ---- */

static const char *const cat_fields[] = { "state", "title", "status", "loop_count",
					  "input_tokens", "output_tokens", "cache_read_tokens",
					  "cost", "workspace_ref", "forked_from", NULL };

static uint64_t count_field(lua_State *L, const char *fn, const char *k)
{
	if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
		luaL_error(L, "%s: option '%s' must be a non-negative integer", fn, k);
	uint64_t v = (uint64_t)lua_tointeger(L, -1);
	lua_pop(L, 1);
	return v;
}

/* sess:catalog{ ... } -> true (never yields) */
static int sess_catalog(lua_State *L)
{
	struct sess *u = check_sess(L, 1);
	const char *fn = "rig.session.catalog";
	luaL_checktype(L, 2, LUA_TTABLE);
	check_fields(L, 2, fn, cat_fields);
	struct lr_session_catalog c;
	memset(&c, 0, sizeof c);
	if (opt_field(L, 2, fn, "state", LUA_TSTRING)) {
		const char *v = lua_tostring(L, -1);
		int found = -1;
		for (int i = 0; lr_catalog_state_name((enum lr_catalog_state)i); i++)
			if (strcmp(v, lr_catalog_state_name((enum lr_catalog_state)i)) == 0)
				found = i;
		if (found < 0)
			return luaL_error(L, "%s: option 'state' has unknown value '%s'", fn, v);
		c.state = found;
		c.mask |= LR_SCAT_STATE;
		lua_pop(L, 1);
	}
	if (opt_field(L, 2, fn, "status", LUA_TSTRING)) {
		const char *v = lua_tostring(L, -1);
		int found = -1;
		for (int i = 0; lr_catalog_status_name((enum lr_catalog_status)i); i++)
			if (strcmp(v, lr_catalog_status_name((enum lr_catalog_status)i)) == 0)
				found = i;
		if (found < 0)
			return luaL_error(L, "%s: option 'status' has unknown value '%s'", fn, v);
		c.status = found;
		c.mask |= LR_SCAT_STATUS;
		lua_pop(L, 1);
	}
	if (opt_field(L, 2, fn, "title", LUA_TSTRING)) {
		c.title = lua_tostring(L, -1); /* left on the stack */
		c.mask |= LR_SCAT_TITLE;
	}
	if (opt_field(L, 2, fn, "workspace_ref", LUA_TSTRING)) {
		c.workspace_ref = lua_tostring(L, -1);
		if (strlen(c.workspace_ref) > LR_CATALOG_REF_MAX)
			return luaL_error(L, "%s: option 'workspace_ref' is longer than %d bytes", fn,
					  LR_CATALOG_REF_MAX);
		c.mask |= LR_SCAT_WORKSPACE_REF;
	}
	if (opt_field(L, 2, fn, "loop_count", LUA_TNUMBER)) {
		c.loop_count = count_field(L, fn, "loop_count");
		c.mask |= LR_SCAT_LOOP_COUNT;
	}
	if (opt_field(L, 2, fn, "input_tokens", LUA_TNUMBER)) {
		c.input_tokens = count_field(L, fn, "input_tokens");
		c.mask |= LR_SCAT_INPUT_TOKENS;
	}
	if (opt_field(L, 2, fn, "output_tokens", LUA_TNUMBER)) {
		c.output_tokens = count_field(L, fn, "output_tokens");
		c.mask |= LR_SCAT_OUTPUT_TOKENS;
	}
	if (opt_field(L, 2, fn, "cache_read_tokens", LUA_TNUMBER)) {
		c.cache_read_tokens = count_field(L, fn, "cache_read_tokens");
		c.mask |= LR_SCAT_CACHE_READ_TOKENS;
	}
	if (opt_field(L, 2, fn, "cost", LUA_TNUMBER)) {
		c.cost = lua_tonumber(L, -1);
		if (!isfinite(c.cost) || c.cost < 0)
			return luaL_error(L, "%s: option 'cost' must be a non-negative number", fn);
		c.mask |= LR_SCAT_COST;
		lua_pop(L, 1);
	}
	if (opt_field(L, 2, fn, "forked_from", LUA_TTABLE)) {
		/* { session = id, at = seq }: written once, when a fork starts */
		lua_getfield(L, -1, "session");
		c.forked_from = lua_tostring(L, -1); /* left on the stack */
		if (lua_type(L, -1) != LUA_TSTRING || strlen(c.forked_from) != 36)
			return luaL_error(L, "%s: option 'forked_from.session' must be a session id",
					  fn);
		lua_getfield(L, -2, "at");
		if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
			return luaL_error(L, "%s: option 'forked_from.at' must be a positive integer",
					  fn);
		c.forked_at = (uint64_t)lua_tointeger(L, -1);
		lua_pop(L, 1);
		c.mask |= LR_SCAT_FORKED_FROM;
	}
	int rc = lr_session_catalog(u->s, &c);
	if (rc == LR_ECLOSED)
		return luaL_error(L, "%s: session %s is closing", fn, u->id);
	if (rc)
		return luaL_error(L, "%s: %s", fn, lr_strerror(rc));
	lua_pushboolean(L, 1);
	return 1;
}

/* ---- close ---- */

struct closeop {
	struct lr_wait wait;
	struct sess *u;
};

static void session_closed(void *arg)
{
	struct sess *u = arg;
	u->close_done = 1;
	if (u->close_waiter) {
		struct lr_wait *w = u->close_waiter;
		u->close_waiter = NULL;
		lr_sched_wake(w);
	}
}

static void close_cancel(struct lr_wait *w)
{
	struct closeop *op = (struct closeop *)w;
	if (op->u && op->u->close_waiter == w)
		op->u->close_waiter = NULL;
}

/* Frees the host session (done closing, or abandoned); the store reference goes with it. */
static void sess_release(struct sess *u)
{
	if (!u->s)
		return;
	lr_session_free(u->s, store_unref_cb, u->storeref);
	u->s = NULL;
	u->storeref = NULL;
}

static int close_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct closeop *op = (struct closeop *)ctx;
	lr_sched_resumed(L, &op->wait);
	if (op->u->close_done)
		sess_release(op->u);
	lua_pushboolean(L, 1);
	return 1;
}

/* sess:close() -> true (yields until the queue is done) */
static int sess_close(lua_State *L)
{
	struct sess *u = luaL_checkudata(L, 1, SESSION_MT);
	if (!u->s || u->close_done) {
		sess_release(u);
		lua_pushboolean(L, 1);
		return 1;
	}
	lr_sched_enter(L);
	if (u->close_waiter)
		return luaL_error(L, "rig.session.close: another task is closing this session");
	struct closeop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, CLOSEOP_MT);
	op->u = u;
	op->wait.cancel = close_cancel;
	int rc = lr_session_close(u->s, session_closed, u);
	(void)rc; /* LR_ECLOSED: a close already runs; wait for the same end */
	u->close_waiter = &op->wait;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, close_k);
}

static int sess_gc(lua_State *L)
{
	struct sess *u = luaL_checkudata(L, 1, SESSION_MT);
	sess_release(u);
	return 0;
}

static int sess_tostring(lua_State *L)
{
	struct sess *u = luaL_checkudata(L, 1, SESSION_MT);
	lua_pushfstring(L, "rig.session %s%s", u->id, u->s ? "" : " (closed)");
	return 1;
}

/* ---- journal_read, catalog_list, catalog_get (on the pool) ---- */

enum rkind { R_JOURNAL, R_LIST, R_GET };

struct rec {
	uint64_t seq, epoch;
	int kind;
	char *id;
	char *body;
	size_t len;
};

struct readop {
	struct lr_work work;
	struct readud *ud; /* NULL once abandoned */
	void *storeref;
	struct lr_store *store;
	enum rkind kind;
	char sid[37];
	uint64_t from, limit, tip;
	int rc;
	struct lr_err err;
	struct rec *recs;
	size_t n, cap;
	struct lr_catalog_entry *ents;
	size_t nents, capents;
};

struct readud {
	struct lr_wait wait;
	struct readop *op;
};

static void readop_free(struct readop *op)
{
	for (size_t i = 0; i < op->n; i++) {
		free(op->recs[i].id);
		free(op->recs[i].body);
	}
	free(op->recs);
	free(op->ents);
	lr__store_unref(op->storeref);
	free(op);
}

static int keep_rec(void *arg, const struct lr_journal_rec *r)
{
	struct readop *op = arg;
	if (op->limit && op->n >= op->limit)
		return 1;
	if (op->n == op->cap) {
		size_t cap = op->cap ? op->cap * 2 : 16;
		struct rec *nr = realloc(op->recs, cap * sizeof *nr);
		if (!nr)
			return -ENOMEM;
		op->recs = nr;
		op->cap = cap;
	}
	struct rec *x = &op->recs[op->n];
	memset(x, 0, sizeof *x);
	x->seq = r->seq;
	x->kind = r->kind;
	x->epoch = r->epoch;
	x->id = strdup(r->id);
	if (!x->id)
		return -ENOMEM;
	if (r->kind != LR_JOURNAL_FENCE) {
		x->body = malloc(r->len + 1);
		if (!x->body) {
			free(x->id);
			return -ENOMEM;
		}
		memcpy(x->body, r->body, r->len);
		x->body[r->len] = 0;
		x->len = r->len;
	}
	op->n++;
	return 0;
}

static int keep_ent(void *arg, const struct lr_catalog_entry *c)
{
	struct readop *op = arg;
	if (op->nents == op->capents) {
		size_t cap = op->capents ? op->capents * 2 : 16;
		struct lr_catalog_entry *ne = realloc(op->ents, cap * sizeof *ne);
		if (!ne)
			return -ENOMEM;
		op->ents = ne;
		op->capents = cap;
	}
	op->ents[op->nents++] = *c;
	return 0;
}

static void read_work(struct lr_work *w)
{
	struct readop *op = (struct readop *)w;
	op->err.msg[0] = 0;
	switch (op->kind) {
	case R_JOURNAL: {
		char name[LR_JOURNAL_NAME_LEN];
		snprintf(name, sizeof name, "sessions/%s", op->sid);
		op->rc = lr_store_tip(op->store, name, &op->tip, &op->err);
		if (op->rc)
			break;
		op->rc = lr_journal_replay(op->store, op->sid, op->from, keep_rec, op, &op->err);
		if (op->rc == 1)
			op->rc = 0;
		if (op->rc == -ENOMEM)
			lr_err_set(&op->err, "journal read: out of memory");
		break;
	}
	case R_LIST:
		op->rc = lr_catalog_list(op->store, keep_ent, op, &op->err);
		break;
	case R_GET:
		if (keep_ent(op, &(struct lr_catalog_entry){ .id = "" }) != 0) {
			op->rc = -ENOMEM;
			break;
		}
		op->rc = lr_catalog_get(op->store, op->sid, &op->ents[0], &op->err);
		break;
	}
}

static void read_done(struct lr_work *w)
{
	struct readop *op = (struct readop *)w;
	if (!op->ud) {
		readop_free(op);
		return;
	}
	lr_sched_wake(&op->ud->wait);
}

static void read_cancel(struct lr_wait *w)
{
	struct readud *ud = (struct readud *)w;
	if (ud->op) {
		ud->op->ud = NULL;
		ud->op = NULL;
	}
}

static int readud_gc(lua_State *L)
{
	struct readud *ud = lua_touserdata(L, 1);
	if (ud->op) {
		ud->op->ud = NULL;
		ud->op = NULL;
	}
	return 0;
}

static void set_u64(lua_State *L, const char *k, uint64_t v)
{
	lua_pushinteger(L, (lua_Integer)v);
	lua_setfield(L, -2, k);
}

static void push_entry(lua_State *L, const struct lr_catalog_entry *c)
{
	lua_createtable(L, 0, 13);
	lua_pushstring(L, c->id);
	lua_setfield(L, -2, "id");
	lua_pushstring(L, c->title);
	lua_setfield(L, -2, "title");
	lua_pushnumber(L, c->created_at);
	lua_setfield(L, -2, "created_at");
	lua_pushnumber(L, c->last_active_at);
	lua_setfield(L, -2, "last_active_at");
	const char *st = lr_catalog_status_name(c->status);
	lua_pushstring(L, st ? st : "unknown");
	lua_setfield(L, -2, "status");
	st = lr_catalog_state_name(c->state);
	lua_pushstring(L, st ? st : "unknown");
	lua_setfield(L, -2, "state");
	set_u64(L, "loop_count", c->loop_count);
	set_u64(L, "last_seq", c->last_seq);
	set_u64(L, "input_tokens", c->input_tokens);
	set_u64(L, "output_tokens", c->output_tokens);
	set_u64(L, "cache_read_tokens", c->cache_read_tokens);
	lua_pushnumber(L, c->cost);
	lua_setfield(L, -2, "cost");
	lua_pushstring(L, c->workspace_ref);
	lua_setfield(L, -2, "workspace_ref");
	if (c->forked_from[0]) {
		lua_createtable(L, 0, 2);
		lua_pushstring(L, c->forked_from);
		lua_setfield(L, -2, "session");
		set_u64(L, "at", c->forked_at);
		lua_setfield(L, -2, "forked_from");
	}
}

static const char *kind_name(int k)
{
	switch (k) {
	case LR_JOURNAL_EVENT: return "event";
	case LR_JOURNAL_COMMAND: return "command";
	case LR_JOURNAL_FENCE: return "fence";
	case LR_JOURNAL_GATE_PREPARED: return "gate_prepared";
	}
	return "unknown";
}

static int read_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct readud *ud = (struct readud *)ctx;
	lr_sched_resumed(L, &ud->wait);
	struct readop *op = ud->op;
	ud->op = NULL;
	int n;
	if (op->rc) {
		int rc = op->rc;
		char msg[sizeof op->err.msg];
		memcpy(msg, op->err.msg[0] ? op->err.msg : lr_strerror(rc), sizeof msg);
		msg[sizeof msg - 1] = 0;
		readop_free(op);
		luaL_pushfail(L);
		lua_pushstring(L, msg);
		lua_pushstring(L, rc == LR_ENOTFOUND ? "not_found" : rc == LR_ECORRUPT ? "corrupt"
				  : "io");
		return 3;
	}
	/* The tables are built here: an allocation error raises after op is anchored in ud again. */
	ud->op = op;
	switch (op->kind) {
	case R_JOURNAL:
		lua_createtable(L, (int)(op->n > INT_MAX ? 0 : op->n), 0);
		for (size_t i = 0; i < op->n; i++) {
			struct rec *r = &op->recs[i];
			lua_createtable(L, 0, 5);
			set_u64(L, "seq", r->seq);
			lua_pushstring(L, kind_name(r->kind));
			lua_setfield(L, -2, "kind");
			lua_pushstring(L, r->id);
			lua_setfield(L, -2, "id");
			if (r->kind == LR_JOURNAL_FENCE) {
				set_u64(L, "epoch", r->epoch);
			} else {
				lua_pushlstring(L, r->body, r->len);
				lua_setfield(L, -2, "body");
			}
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		lua_pushinteger(L, (lua_Integer)op->tip);
		n = 2;
		break;
	case R_LIST:
		lua_createtable(L, (int)(op->nents > INT_MAX ? 0 : op->nents), 0);
		for (size_t i = 0; i < op->nents; i++) {
			push_entry(L, &op->ents[i]);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		n = 1;
		break;
	default:
		push_entry(L, &op->ents[0]);
		n = 1;
		break;
	}
	ud->op = NULL;
	readop_free(op);
	return n;
}

static int read_start(lua_State *L, enum rkind kind, const char *sid, uint64_t from,
		      uint64_t limit)
{
	struct lr_store *st;
	luaL_checkudata(L, 1, "rig.store");
	lr_sched_enter(L);
	struct readud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
	memset(ud, 0, sizeof *ud);
	luaL_setmetatable(L, READOP_MT);
	struct readop *op = calloc(1, sizeof *op);
	if (!op)
		return luaL_error(L, "out of memory");
	op->storeref = lr__store_ref(L, 1, &st);
	op->store = st;
	op->kind = kind;
	snprintf(op->sid, sizeof op->sid, "%s", sid ? sid : "");
	op->from = from;
	op->limit = limit;
	op->work.work = read_work;
	op->work.done = read_done;
	op->ud = ud;
	ud->op = op;
	ud->wait.cancel = read_cancel;
	int rc = lr_pool_submit(lr_state_of(L)->loop, &op->work);
	if (rc) {
		ud->op = NULL;
		readop_free(op);
		return lr_pushfail(L, rc, "cannot start a worker: %s", lr_strerror(rc));
	}
	return lr_sched_await(L, &ud->wait, (lua_KContext)ud, read_k);
}

static const char *check_sid(lua_State *L, int idx, const char *fn)
{
	const char *sid = luaL_checkstring(L, idx);
	struct lr_err e;
	if (lr_journal_id_check(sid, &e) != 0)
		luaL_error(L, "%s: invalid session id '%s'", fn, sid);
	return sid;
}

/* rig.core.journal_read(store, sid, from, limit) -> records, tip | nil, msg, code */
static int core_journal_read(lua_State *L)
{
	const char *sid = check_sid(L, 2, "rig.core.journal_read");
	lua_Integer from = luaL_optinteger(L, 3, 1), limit = luaL_optinteger(L, 4, 0);
	luaL_argcheck(L, from >= 0, 3, "must be >= 0");
	luaL_argcheck(L, limit >= 0, 4, "must be >= 0");
	return read_start(L, R_JOURNAL, sid, (uint64_t)from, (uint64_t)limit);
}

/* rig.core.catalog_list(store) -> { entry, ... } */
static int core_catalog_list(lua_State *L)
{
	return read_start(L, R_LIST, NULL, 0, 0);
}

/* rig.core.catalog_get(store, sid) -> entry | nil, msg, "not_found" */
static int core_catalog_get(lua_State *L)
{
	const char *sid = check_sid(L, 2, "rig.core.catalog_get");
	return read_start(L, R_GET, sid, 0, 0);
}

/* rig.core.store_inject_failure(store, "append", after) -- tests only */
static int core_store_inject_failure(lua_State *L)
{
	struct lr_store *st;
	luaL_checkudata(L, 1, "rig.store");
	const char *what = luaL_checkstring(L, 2);
	if (strcmp(what, "append") != 0)
		return luaL_error(L, "rig.core.store_inject_failure: unknown operation '%s'", what);
	lua_Integer after = luaL_checkinteger(L, 3);
	void *ref = lr__store_ref(L, 1, &st);
	lr_store_inject_failure(st, after < 0 ? -1 : (long)after);
	lr__store_unref(ref);
	return 0;
}

static void gc_only(lua_State *L, const char *mt, lua_CFunction gc)
{
	luaL_newmetatable(L, mt);
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
}

static int noop_gc(lua_State *L)
{
	(void)L;
	return 0;
}

void lr__session_open(lua_State *L)
{
	gc_only(L, SOPEN_MT, openud_gc);
	gc_only(L, EMITOP_MT, emitop_gc);
	gc_only(L, NEXTOP_MT, nextop_gc);
	gc_only(L, PIPEOP_MT, pipeop_gc);
	gc_only(L, CLOSEOP_MT, noop_gc);
	gc_only(L, READOP_MT, readud_gc);

	static const luaL_Reg sess_methods[] = {
		{ "epoch", sess_epoch },
		{ "tip", sess_tip },
		{ "faulted", sess_faulted },
		{ "emit", sess_emit },
		{ "emit_event", sess_emit_event },
		{ "subscribe", sess_subscribe },
		{ "catalog", sess_catalog },
		{ "close", sess_close },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, SESSION_MT); /* stack: core mt */
	luaL_newlib(L, sess_methods);
	lua_pushcclosure(L, sess_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, sess_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, sess_gc);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, sess_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	static const luaL_Reg sub_methods[] = {
		{ "next", sub_next },
		{ "dropped", sub_dropped },
		{ "pipe", sub_pipe },
		{ "close", sub_close },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, SUB_MT);
	luaL_newlib(L, sub_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, sub_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, sub_close);
	lua_setfield(L, -2, "__close");
	lua_pop(L, 1);

	static const luaL_Reg funcs[] = {
		{ "session_open", core_session_open },
		{ "journal_read", core_journal_read },
		{ "catalog_list", core_catalog_list },
		{ "catalog_get", core_catalog_get },
		{ "store_inject_failure", core_store_inject_failure },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, funcs, 0);
}
