/*
 * executor.c — the Lua face of sandboxed executors (host/executor.c):
 * rig.core.sandbox_executors(profile, opts) -> set; set:get(key) ->
 * executor; executor:run{...} -> result | nil, message, code;
 * executor:spawn{...} -> a rig.process handle; executor:report();
 * executor:grant{...} -> token; close() on both.
 *
 * Options are checked strictly (unknown fields raise, naming them). A run
 * that cannot start (refused by the profile, a grant refused, confinement
 * that failed in the helper) is an expected failure: nil, message, code.
 * Cancelling the waiting task, closing the executor or the set, and a
 * timeout all kill the helper's process group, which ends the whole tree.
 */
#include "internal.h"

#include "../sandbox/sandbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SET_MT "rig.sandbox.executors"
#define EXEC_MT "rig.sandbox.executor"
#define RUNOP_MT "rig.op.sandbox_run"
#define SPAWN_BUFFER (64u << 10)
#define RUN_OUTPUT_LIMIT (1u << 20)

/* uservalues: the set holds 1 = executors by key, 2 = weak table of spawned handles. */
struct setud {
	struct lr_executor_set *s; /* first, for lr_checkhandle; NULL once closed */
};
LR_HANDLE_FIRST(struct setud, s);

/* uservalues: 1 = the set userdata (keeps it alive), 2 = weak table of spawned handles. */
struct execud {
	struct lr_executor *e;
	struct setud *set;
	int closed;
};

static struct setud *check_set(lua_State *L, int idx)
{
	return lr_checkhandle(L, idx, SET_MT);
}

static struct execud *check_exec(lua_State *L, int idx)
{
	struct execud *u = luaL_checkudata(L, idx, EXEC_MT);
	if (u->closed || !u->set->s)
		luaL_error(L, "rig.sandbox: the executor is closed");
	return u;
}

/* ---- the report ---- */

static const char *tier_name(enum lr_tier t)
{
	return t == LR_TIER_A ? "A" : t == LR_TIER_B ? "B" : "none";
}

/* The space-separated names as a list. */
static void push_names(lua_State *L, const char *s)
{
	lua_newtable(L);
	lua_Integer i = 0;
	while (s && *s) {
		size_t n = strcspn(s, " ");
		if (n) {
			lua_pushlstring(L, s, n);
			lua_rawseti(L, -2, ++i);
		}
		s += n;
		s += *s == ' ';
	}
}

/* Pushes { tier = "A", guarantees = { read_boundary = { enforced, required, how, missing }, ... } }. */
static void push_report(lua_State *L, const struct lr_sbx_report *r, int unconfined)
{
	lua_createtable(L, 0, 3);
	lua_pushstring(L, tier_name(r->tier));
	lua_setfield(L, -2, "tier");
	lua_pushboolean(L, unconfined);
	lua_setfield(L, -2, "unconfined");
	lua_createtable(L, 0, LR_G_COUNT);
	for (int g = 0; g < LR_G_COUNT; g++) {
		lua_createtable(L, 0, 4);
		lua_pushboolean(L, r->enforced[g]);
		lua_setfield(L, -2, "enforced");
		lua_pushboolean(L, r->required[g]);
		lua_setfield(L, -2, "required");
		if (r->how[g][0]) {
			lua_pushstring(L, r->how[g]);
			lua_setfield(L, -2, "how");
		}
		if (r->missing[g][0]) {
			lua_pushstring(L, r->missing[g]);
			lua_setfield(L, -2, "missing");
		}
		lua_setfield(L, -2, lr_guarantee_name((enum lr_guarantee)g));
	}
	lua_setfield(L, -2, "guarantees");
	push_names(L, r->protected_names);
	lua_setfield(L, -2, "protected_names");
}

static void push_exec_report(lua_State *L, struct execud *u)
{
	if (!u->set->s) { /* the set was closed meanwhile */
		lua_pushnil(L);
		return;
	}
	const struct lr_profile *p = lr_executor_set_profile(u->set->s);
	push_report(L, lr_executor_set_report(u->set->s), p->isolation == LR_ISO_UNCONFINED);
}

/* ---- options ---- */

static const char *const run_fields[] = { "argv", "command", "cwd", "env", "stdin", "timeout",
					  "output_limit", "grants", "network", NULL };
static const char *const spawn_fields[] = { "argv", "command", "cwd", "env", "stdin", "stdout",
					    "stderr", "timeout", "grants", "network", NULL };

static int field_known(const char *const *fields, const char *k)
{
	for (; *fields; fields++)
		if (strcmp(*fields, k) == 0)
			return 1;
	return 0;
}

static const char *checked_string(lua_State *L, int idx, const char *fname, const char *field)
{
	size_t len;
	const char *s = lua_tolstring(L, idx, &len);
	if (!s || lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "%s: '%s' must be a string", fname, field);
	if (strlen(s) != len)
		luaL_error(L, "%s: '%s' contains a NUL byte", fname, field);
	return s;
}

/* A NULL-terminated array of the strings of list at idx, in a userdata left on the stack. */
static char **string_list(lua_State *L, int idx, const char *fname, const char *field, int nonempty)
{
	idx = lua_absindex(L, idx);
	lua_Unsigned n = lua_rawlen(L, idx);
	if ((nonempty && n == 0) || n > 100000)
		luaL_error(L, "%s: '%s' must be a non-empty list of strings", fname, field);
	char **v = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *v, 0);
	for (lua_Unsigned i = 1; i <= n; i++) {
		lua_rawgeti(L, idx, (lua_Integer)i);
		char name[64];
		snprintf(name, sizeof name, "%s[%d]", field, (int)i);
		v[i - 1] = (char *)checked_string(L, -1, fname, name); /* anchored by the list */
		lua_pop(L, 1);
	}
	v[n] = NULL;
	return v;
}

static int grant_kind(const char *k)
{
	if (strcmp(k, "filesystem.read") == 0)
		return LR_GRANT_FS_READ;
	if (strcmp(k, "filesystem.write") == 0)
		return LR_GRANT_FS_WRITE;
	if (strcmp(k, "network") == 0)
		return LR_GRANT_NETWORK;
	if (strcmp(k, "command.execute") == 0)
		return LR_GRANT_COMMAND;
	return -1;
}

struct req {
	struct lr_exec_request r;
	int stdio[3]; /* spawn */
	int stdin_pipe;
};

/*
 * Reads the options table at index 2 into q. Anchors (arrays, strings) are
 * left on the stack above it and must stay there until the spawn.
 */
static void parse_req(lua_State *L, int is_run, struct req *q)
{
	const char *fname = is_run ? "executor:run" : "executor:spawn";
	const char *const *fields = is_run ? run_fields : spawn_fields;
	memset(q, 0, sizeof *q);
	if (lua_type(L, 2) != LUA_TTABLE)
		luaL_error(L, "%s: expects an options table", fname);
	lua_settop(L, 2);
	lua_pushnil(L);
	while (lua_next(L, 2)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING || !field_known(fields, lua_tostring(L, -1)))
			luaL_error(L, "%s: unknown option '%s'", fname, luaL_tolstring(L, -1, NULL));
	}
	/* argv | command */
	int ta = lua_getfield(L, 2, "argv");
	int tc = lua_getfield(L, 2, "command");
	if ((ta == LUA_TNIL) == (tc == LUA_TNIL))
		luaL_error(L, "%s: give exactly one of 'argv' and 'command'", fname);
	if (ta != LUA_TNIL) {
		if (ta != LUA_TTABLE)
			luaL_error(L, "%s: 'argv' must be a non-empty list of strings", fname);
		q->r.argv = string_list(L, -2, fname, "argv", 1);
		if (!q->r.argv[0][0])
			luaL_error(L, "%s: 'argv[1]' must not be empty", fname);
	} else {
		q->r.command = checked_string(L, -1, fname, "command");
		if (!q->r.command[0])
			luaL_error(L, "%s: 'command' must not be empty", fname);
	}
	if (lua_getfield(L, 2, "cwd") != LUA_TNIL) {
		q->r.cwd = checked_string(L, -1, fname, "cwd");
		if (!q->r.cwd[0])
			luaL_error(L, "%s: 'cwd' must be a non-empty path", fname);
	}
	lua_pop(L, 1);

	/* env: { NAME = value | false } -> "NAME=value" / "NAME" */
	int t = lua_getfield(L, 2, "env");
	if (t == LUA_TTABLE) {
		int envi = lua_gettop(L);
		lua_newtable(L);
		int anchors = lua_gettop(L);
		int n = 0;
		lua_pushnil(L);
		while (lua_next(L, envi)) {
			size_t kl = 0;
			const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &kl) : NULL;
			if (!k || kl == 0 || memchr(k, '=', kl) || strlen(k) != kl)
				luaL_error(L, "%s: 'env' keys must be variable names (non-empty, no '=')", fname);
			int vt = lua_type(L, -1);
			if (vt == LUA_TSTRING || vt == LUA_TNUMBER) {
				size_t vl;
				const char *v = lua_tolstring(L, -1, &vl);
				if (strlen(v) != vl)
					luaL_error(L, "%s: 'env.%s' contains a NUL byte", fname, k);
				lua_pushfstring(L, "%s=%s", k, v);
			} else if (vt == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
				lua_pushvalue(L, -2);
			} else {
				luaL_error(L, "%s: 'env.%s' must be a string or false", fname, k);
			}
			lua_rawseti(L, anchors, ++n);
			lua_pop(L, 1);
		}
		char **env = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *env, 0);
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, anchors, i);
			env[i - 1] = (char *)lua_tostring(L, -1);
			lua_pop(L, 1);
		}
		env[n] = NULL;
		q->r.env = env;
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'env' must be a table", fname);
	}

	t = lua_getfield(L, 2, "timeout");
	if (t == LUA_TNUMBER) {
		double v = lua_tonumber(L, -1);
		if (!(v > 0) || v > 1e9)
			luaL_error(L, "%s: 'timeout' must be a positive number of seconds", fname);
		q->r.timeout = v;
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'timeout' must be a number", fname);
	}
	lua_pop(L, 1);

	t = lua_getfield(L, 2, "stdin");
	if (t == LUA_TSTRING) {
		size_t len;
		const char *s = lua_tolstring(L, -1, &len);
		if (!is_run && strcmp(s, "pipe") == 0) {
			q->stdin_pipe = 1;
		} else {
			q->r.stdin_data = s; /* anchored by the options table */
			q->r.stdin_len = len;
		}
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'stdin' must be a string", fname);
	}
	lua_pop(L, 1);

	if (is_run) {
		q->r.output_limit = RUN_OUTPUT_LIMIT;
		t = lua_getfield(L, 2, "output_limit");
		if (t != LUA_TNIL) {
			int isint;
			lua_Integer v = lua_tointegerx(L, -1, &isint);
			if (t != LUA_TNUMBER || !isint || v < 1)
				luaL_error(L, "%s: 'output_limit' must be a positive integer", fname);
			q->r.output_limit = (size_t)v;
		}
		lua_pop(L, 1);
	} else {
		q->stdio[1] = lr__proc_stdio_mode(L, 2, fname, "stdout");
		q->stdio[2] = lr__proc_stdio_mode(L, 2, fname, "stderr");
	}

	/* network: a list of "host:port", or false for none */
	t = lua_getfield(L, 2, "network");
	if (t == LUA_TTABLE) {
		q->r.network = string_list(L, lua_gettop(L), fname, "network", 0);
	} else if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
		char **none = lua_newuserdatauv(L, sizeof *none, 0);
		none[0] = NULL;
		q->r.network = none;
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'network' must be a list of \"host:port\" or false", fname);
	}

	/* grants: { { token =, kind =, target = }, ... } */
	t = lua_getfield(L, 2, "grants");
	if (t == LUA_TTABLE) {
		int gi = lua_gettop(L);
		lua_Unsigned n = lua_rawlen(L, gi);
		if (n > 64)
			luaL_error(L, "%s: 'grants' has too many entries", fname);
		struct lr_exec_grant *g = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *g, 0);
		for (lua_Unsigned i = 1; i <= n; i++) {
			if (lua_rawgeti(L, gi, (lua_Integer)i) != LUA_TTABLE)
				luaL_error(L, "%s: 'grants[%d]' must be a table {token, kind, target}", fname, (int)i);
			int e = lua_gettop(L);
			lua_pushnil(L);
			while (lua_next(L, e)) {
				lua_pop(L, 1);
				const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
				if (!k || (strcmp(k, "token") && strcmp(k, "kind") && strcmp(k, "target")))
					luaL_error(L, "%s: unknown option 'grants[%d].%s'", fname, (int)i,
						   luaL_tolstring(L, -1, NULL));
			}
			char name[48];
			lua_getfield(L, e, "token");
			snprintf(name, sizeof name, "grants[%d].token", (int)i);
			g[i - 1].token = checked_string(L, -1, fname, name);
			lua_getfield(L, e, "kind");
			snprintf(name, sizeof name, "grants[%d].kind", (int)i);
			const char *kind = checked_string(L, -1, fname, name);
			g[i - 1].cls = grant_kind(kind);
			if (g[i - 1].cls < 0)
				luaL_error(L, "%s: 'grants[%d].kind' must be filesystem.read, filesystem.write, "
					      "network or command.execute", fname, (int)i);
			if (lua_getfield(L, e, "target") != LUA_TNIL) {
				snprintf(name, sizeof name, "grants[%d].target", (int)i);
				g[i - 1].target = checked_string(L, -1, fname, name);
			}
			lua_pop(L, 4); /* token kind target entry; strings stay anchored by the entry */
		}
		q->r.grants = g;
		q->r.ngrants = (size_t)n;
	} else if (t != LUA_TNIL) {
		luaL_error(L, "%s: 'grants' must be a list", fname);
	}
}

/* ---- run ---- */

struct runop {
	struct lr_wait wait;
	struct lr_exec *x;
};

static void run_done(struct lr_exec *x, void *arg)
{
	(void)x;
	struct runop *op = arg;
	lr_sched_wake(&op->wait);
}

static void run_cancel(struct lr_wait *w)
{
	struct runop *op = (struct runop *)w;
	lr_exec_free(op->x); /* kills the helper's group: the whole tree */
	op->x = NULL;
}

static int runop_gc(lua_State *L)
{
	struct runop *op = lua_touserdata(L, 1);
	lr_exec_free(op->x);
	op->x = NULL;
	return 0;
}

static int run_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct runop *op = (struct runop *)ctx;
	lr_sched_resumed(L, &op->wait); /* raises "cancelled"; run_cancel freed the run */
	struct lr_exec *x = op->x;
	const struct lr_exec_result *r = lr_exec_result(x);
	if (r->setup_failed || r->aborted) {
		int rc = r->aborted ? LR_ECLOSED : LR_EREFUSED;
		lua_pushstring(L, r->err.msg);
		op->x = NULL;
		lr_exec_free(x);
		return lr_pushfail(L, rc, "%s", lua_tostring(L, -1));
	}
	lua_createtable(L, 0, 8);
	if (r->code >= 0) {
		lua_pushinteger(L, r->code);
		lua_setfield(L, -2, "code");
	}
	if (r->signo) {
		char buf[32];
		lua_pushstring(L, lr__signal_name(r->signo, buf, sizeof buf));
		lua_setfield(L, -2, "signal");
	}
	lua_pushlstring(L, r->out.len ? r->out.data : "", r->out.len);
	lua_setfield(L, -2, "stdout");
	lua_pushlstring(L, r->err_out.len ? r->err_out.data : "", r->err_out.len);
	lua_setfield(L, -2, "stderr");
	lua_pushboolean(L, r->truncated);
	lua_setfield(L, -2, "truncated");
	if (r->net_log.len) {
		lua_pushlstring(L, r->net_log.data, r->net_log.len);
		lua_setfield(L, -2, "net_log");
	}
	lua_pushboolean(L, r->timed_out);
	lua_setfield(L, -2, "timed_out");
	if (r->moved.len) { /* the check after the run: one line per entry moved aside */
		lua_newtable(L);
		lua_Integer n = 0;
		for (const char *l = r->moved.data; *l;) {
			const char *nl = strchr(l, '\n');
			size_t k = nl ? (size_t)(nl - l) : strlen(l);
			lua_pushlstring(L, l, k);
			lua_rawseti(L, -2, ++n);
			l += k + (nl != NULL);
		}
		lua_setfield(L, -2, "moved_aside");
	}
	op->x = NULL;
	lr_exec_free(x);
	push_exec_report(L, lua_touserdata(L, 1));
	lua_setfield(L, -2, "report");
	return 1;
}

/* executor:run{...} -> result | nil, message, code */
static int exec_run(lua_State *L)
{
	struct execud *u = check_exec(L, 1);
	struct req q;
	parse_req(L, 1, &q);
	lr_sched_enter(L);
	struct runop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, RUNOP_MT);
	struct lr_err err = { "" };
	int rc = lr_executor_run(u->e, &q.r, run_done, op, &op->x, &err);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	op->wait.cancel = run_cancel;
	return lr_sched_await(L, &op->wait, (lua_KContext)op, run_k);
}

/* What a spawned process leaves when it is gone: the check after it, its proxy. */
struct spawned {
	struct lr_exec_after *after;
	struct lr_exec_proxy *proxy;
};

static void spawn_after(void *arg)
{
	struct spawned *sp = arg;
	struct lr_err err = { "" };
	if (sp->after)
		lr_exec_after_finish(sp->after, NULL, &err);
	lr_exec_proxy_free(sp->proxy);
	free(sp);
}

/* executor:spawn{...} -> rig.process handle | nil, message, code */
static int exec_spawn(lua_State *L)
{
	struct execud *u = check_exec(L, 1);
	struct req q;
	parse_req(L, 0, &q);
	struct lr_exec_launch l;
	struct lr_err err = { "" };
	int rc = lr_executor_launch_init(u->e, &q.r, &l, &err);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	/* the egress proxy (network targets) lives as long as the process: spawn_after ends it */
	struct spawned *sp = calloc(1, sizeof *sp);
	if (!sp) {
		lr_executor_launch_release(&l);
		return luaL_error(L, "out of memory");
	}
	rc = lr_exec_proxy_take(u->e, &l, &sp->proxy, &err);
	if (rc) {
		free(sp);
		lr_executor_launch_release(&l);
		return lr_pushfail(L, rc, "%s", err.msg);
	}
	sp->after = l.after;
	l.proc.stdio[0] = (q.r.stdin_data || q.stdin_pipe) ? LR_PROC_PIPE : LR_PROC_NULL;
	l.proc.stdio[1] = q.stdio[1];
	l.proc.stdio[2] = q.stdio[2];
	l.proc.out_cap[1] = l.proc.out_cap[2] = SPAWN_BUFFER;
	l.proc.out_drop = 0;
	l.proc.timeout = q.r.timeout;
	/* the check after the run happens when the process is gone (or its handle closed) */
	int n = lr__proc_spawn_handle(L, &l.proc, q.r.stdin_data, q.r.stdin_len, spawn_after, sp);
	if (n == 1) {
		l.after = NULL; /* the handle's now, with the proxy */
	} else {
		lr_exec_proxy_free(sp->proxy); /* the launch keeps l.after: its release finishes it */
		free(sp);
	}
	lr_executor_launch_release(&l);
	if (n == 1) { /* remember it, so closing the executor or the set ends it */
		lua_getiuservalue(L, 1, 2);
		lua_pushvalue(L, -2);
		lua_pushboolean(L, 1);
		lua_rawset(L, -3);
		lua_pop(L, 1);
	}
	return n;
}

/* Closes every handle in the weak table that is uservalue n of the userdata at idx. */
static void close_handles(lua_State *L, int idx, int n)
{
	idx = lua_absindex(L, idx);
	if (lua_getiuservalue(L, idx, n) != LUA_TTABLE) {
		lua_pop(L, 1);
		return;
	}
	int t = lua_gettop(L);
	lua_pushnil(L);
	while (lua_next(L, t)) {
		lua_pop(L, 1);
		if (luaL_getmetafield(L, -1, "__close") != LUA_TNIL) {
			lua_pushvalue(L, -2);
			lua_call(L, 1, 0);
		}
	}
	lua_pop(L, 1);
}

/* executor:grant{kind=, target=, command=, cwd=, ttl=} -> token | nil, message, code */
static int exec_grant(lua_State *L)
{
	struct execud *u = check_exec(L, 1);
	const char *fname = "executor:grant";
	luaL_checktype(L, 2, LUA_TTABLE);
	lua_settop(L, 2);
	lua_pushnil(L);
	while (lua_next(L, 2)) {
		lua_pop(L, 1);
		const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
		if (!k || (strcmp(k, "kind") && strcmp(k, "target") && strcmp(k, "command") &&
			   strcmp(k, "cwd") && strcmp(k, "ttl")))
			luaL_error(L, "%s: unknown option '%s'", fname, luaL_tolstring(L, -1, NULL));
	}
	struct lr_grant_req r = { .exec_id = lr_executor_id(u->e),
				  .fingerprint = lr_executor_fingerprint(u->e),
				  .ttl = 60 };
	lua_getfield(L, 2, "kind");
	int cls = grant_kind(checked_string(L, -1, fname, "kind"));
	if (cls < 0)
		luaL_error(L, "%s: 'kind' must be filesystem.read, filesystem.write, network or command.execute",
			   fname);
	r.cls = (enum lr_grant_class)cls;
	lua_getfield(L, 2, "command");
	r.command = checked_string(L, -1, fname, "command");
	lua_getfield(L, 2, "target");
	r.target = lua_isnil(L, -1) ? "" : checked_string(L, -1, fname, "target");
	lua_getfield(L, 2, "cwd");
	r.cwd = lua_isnil(L, -1) ? lr_executor_set_profile(u->set->s)->workspace_root
				 : checked_string(L, -1, fname, "cwd");
	if (!r.cwd)
		r.cwd = "";
	if (lua_getfield(L, 2, "ttl") != LUA_TNIL) {
		r.ttl = luaL_checknumber(L, -1);
		if (!(r.ttl > 0))
			luaL_error(L, "%s: 'ttl' must be a positive number of seconds", fname);
	}
	char token[33];
	struct lr_err err = { "" };
	int rc = lr_grant_mint(lr_executor_set_grants(u->set->s), &r, token, &err);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	lua_pushstring(L, token);
	return 1;
}

static int exec_report(lua_State *L)
{
	struct execud *u = check_exec(L, 1);
	push_exec_report(L, u);
	return 1;
}

static int exec_close(lua_State *L)
{
	struct execud *u = luaL_checkudata(L, 1, EXEC_MT);
	if (u->closed)
		return 0;
	u->closed = 1;
	close_handles(L, 1, 2);
	if (u->set->s && u->e)
		lr_executor_abort(u->e);
	return 0;
}

static int exec_index(lua_State *L)
{
	struct execud *u = luaL_checkudata(L, 1, EXEC_MT);
	const char *k = lua_tostring(L, 2);
	if (k && u->set->s && !u->closed) {
		if (strcmp(k, "key") == 0) {
			lua_pushstring(L, lr_executor_key(u->e));
			return 1;
		}
		if (strcmp(k, "home") == 0) {
			lua_pushstring(L, lr_executor_home(u->e));
			return 1;
		}
		if (strcmp(k, "tmpdir") == 0) {
			lua_pushstring(L, lr_executor_tmpdir(u->e));
			return 1;
		}
		if (strcmp(k, "id") == 0) {
			lua_pushinteger(L, (lua_Integer)lr_executor_id(u->e));
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static int exec_tostring(lua_State *L)
{
	struct execud *u = luaL_checkudata(L, 1, EXEC_MT);
	int open = !u->closed && u->set->s;
	lua_pushfstring(L, "rig.sandbox.executor %s (%s)", open ? lr_executor_key(u->e) : "?",
			open ? "open" : "closed");
	return 1;
}

/* ---- the set ---- */

/* set:get(key) -> executor | nil, message, code */
static int set_get(lua_State *L)
{
	struct setud *su = check_set(L, 1);
	const char *key = luaL_checkstring(L, 2);
	lua_getiuservalue(L, 1, 1);
	if (lua_getfield(L, -1, key) != LUA_TNIL) {
		struct execud *u = lua_touserdata(L, -1);
		if (!u->closed)
			return 1;
	}
	lua_pop(L, 1);
	struct lr_executor *e;
	struct lr_err err = { "" };
	int rc = lr_executor_get(su->s, key, &e, &err);
	if (rc == -EINVAL)
		return luaL_error(L, "rig.sandbox: %s", err.msg);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	struct execud *u = lua_newuserdatauv(L, sizeof *u, 2);
	u->e = e;
	u->set = su;
	u->closed = 0;
	luaL_setmetatable(L, EXEC_MT);
	lua_pushvalue(L, 1);
	lua_setiuservalue(L, -2, 1);
	lua_newtable(L);
	lua_newtable(L);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	lua_setiuservalue(L, -2, 2);
	lua_pushvalue(L, -1);
	lua_setfield(L, -3, key); /* stack: set executors u */
	return 1;
}

static int set_report(lua_State *L)
{
	struct setud *su = check_set(L, 1);
	const struct lr_profile *p = lr_executor_set_profile(su->s);
	push_report(L, lr_executor_set_report(su->s), p->isolation == LR_ISO_UNCONFINED);
	return 1;
}

static int set_root(lua_State *L)
{
	struct setud *su = check_set(L, 1);
	lua_pushstring(L, lr_executor_set_root(su->s));
	return 1;
}

static int set_close(lua_State *L)
{
	struct setud *su = luaL_checkudata(L, 1, SET_MT);
	if (!su->s)
		return 0;
	/* Spawned handles first (they kill their groups), then the runs and the scratch root. */
	if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE) {
		int t = lua_gettop(L);
		lua_pushnil(L);
		while (lua_next(L, t)) {
			struct execud *u = luaL_testudata(L, -1, EXEC_MT);
			if (u && !u->closed) {
				close_handles(L, -1, 2);
				u->closed = 1;
			}
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	struct lr_executor_set *s = su->s;
	su->s = NULL;
	lr_executor_set_free(s);
	return 0;
}

static int set_tostring(lua_State *L)
{
	struct setud *su = luaL_checkudata(L, 1, SET_MT);
	lua_pushfstring(L, "rig.sandbox.executors (%s)", su->s ? "open" : "closed");
	return 1;
}

/* rig.core.sandbox_executors(profile, {scratch_root=, max=}) -> set | nil, message, code */
static int sandbox_executors(lua_State *L)
{
	const char *fname = "rig.sandbox.executors";
	const struct lr_profile *p = lr__sandbox_check_profile(L, 1);
	const char *root = NULL;
	size_t max = 0;
	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		lua_pushnil(L);
		while (lua_next(L, 2)) {
			lua_pop(L, 1);
			const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
			if (!k || (strcmp(k, "scratch_root") && strcmp(k, "max")))
				luaL_error(L, "%s: unknown option '%s'", fname, luaL_tolstring(L, -1, NULL));
		}
		if (lua_getfield(L, 2, "scratch_root") != LUA_TNIL)
			root = checked_string(L, -1, fname, "scratch_root");
		if (lua_getfield(L, 2, "max") != LUA_TNIL) {
			int isint;
			lua_Integer v = lua_tointegerx(L, -1, &isint);
			if (!isint || v < 1 || v > 100000)
				luaL_error(L, "%s: 'max' must be a positive integer", fname);
			max = (size_t)v;
		}
	}
	struct setud *su = lua_newuserdatauv(L, sizeof *su, 1);
	su->s = NULL;
	luaL_setmetatable(L, SET_MT);
	lua_newtable(L);
	lua_setiuservalue(L, -2, 1);
	struct lr_err err = { "" };
	int rc = lr_executor_set_new(lr_state_of(L)->loop, p, root, max, &su->s, &err);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	return 1;
}

void lr__executor_open(lua_State *L)
{
	luaL_newmetatable(L, RUNOP_MT);
	lua_pushcfunction(L, runop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg exec_methods[] = {
		{ "run", exec_run },       { "spawn", exec_spawn }, { "report", exec_report },
		{ "grant", exec_grant },   { "close", exec_close }, { NULL, NULL },
	};
	luaL_newmetatable(L, EXEC_MT);
	luaL_newlib(L, exec_methods);
	lua_pushcclosure(L, exec_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, exec_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, exec_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	static const luaL_Reg set_methods[] = {
		{ "get", set_get },   { "report", set_report }, { "root", set_root },
		{ "close", set_close }, { NULL, NULL },
	};
	luaL_newmetatable(L, SET_MT);
	luaL_newlib(L, set_methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, set_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, set_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, set_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	lua_pushcfunction(L, sandbox_executors);
	lua_setfield(L, -2, "sandbox_executors");
}
