/*
 * sandbox.c — rig.sandbox's profiles and the guarantee report, bound for
 * Lua (the C is sandbox/profile.c and sandbox/probe.c).
 *
 *   core.sandbox_profile{...}      -> a frozen profile (fields readable)
 *   profile:fingerprint()          -> 64 hex digits
 *   profile:access_for(kind, scope)-> "deny" | "gated" | "allow"
 *   core.sandbox_restrict(a, b)    -> a profile never wider than a or b
 *   core.sandbox_check([profile])  -> the report as a table
 *
 * A profile is a value, not a resource: it holds memory only, so it has
 * __gc but no close(). Everything wrong in a profile table is misuse and
 * raises with the field named.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "../sandbox/sandbox.h"

#define PROFILE_MT "rig.sandbox.profile"

struct profile_ud {
	struct lr_profile p;
	char fp[65];
};

static struct profile_ud *check_ud(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, PROFILE_MT);
}

const struct lr_profile *lr__sandbox_check_profile(lua_State *L, int idx)
{
	return &check_ud(L, idx)->p;
}

/* A new, empty (already collectable) profile on the stack. */
static struct profile_ud *push_ud(lua_State *L)
{
	struct profile_ud *u = lua_newuserdatauv(L, sizeof *u, 0);
	memset(u, 0, sizeof *u);
	lr_profile_init(&u->p);
	luaL_setmetatable(L, PROFILE_MT);
	return u;
}

/* Raises a C message ("profile: field ...") under the Lua function's name. */
static int raise_c(lua_State *L, const char *fn, const char *msg)
{
	static const char pre[] = "profile: ";
	if (strncmp(msg, pre, sizeof pre - 1) == 0)
		msg += sizeof pre - 1;
	return luaL_error(L, "%s: %s", fn, msg);
}

static void finish(lua_State *L, struct profile_ud *u, const char *fn)
{
	struct lr_err err = { "" };
	if (lr_profile_validate(&u->p, &err))
		raise_c(L, fn, err.msg);
	lr_profile_fingerprint(&u->p, u->fp);
	if (!u->fp[0])
		luaL_error(L, "%s: cannot compute the fingerprint (libcrypto missing)", fn);
}

/* ------------------------------------------------------------------ */
/* rig.sandbox.profile{...}                                             */

static const char FN[] = "rig.sandbox.profile";

static enum lr_cap opt_cap(lua_State *L, int idx, const char *field)
{
	enum lr_cap c;
	const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
	if (lr_cap_parse(s, &c))
		luaL_error(L, "%s: field '%s' must be deny, gated or allow", FN, field);
	return c;
}

/* realpath of the string at idx, strdup'ed; raises naming field. */
static char *canonical(lua_State *L, int idx, const char *field)
{
	char real[PATH_MAX];
	if (lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "%s: field '%s' must be a path", FN, field);
	const char *s = lua_tostring(L, idx);
	if (!realpath(s, real))
		luaL_error(L, "%s: field '%s': no such directory '%s'", FN, field, s);
	char *d = strdup(real);
	if (!d)
		luaL_error(L, "%s: out of memory", FN);
	return d;
}

/* stack: ..., roots table at idx */
static void read_roots(lua_State *L, int idx, struct lr_profile *p)
{
	if (!lua_istable(L, idx))
		luaL_error(L, "%s: field 'roots' must be a list of tables", FN);
	lua_Integer n = luaL_len(L, idx);
	if (n <= 0)
		return;
	if (n > 256)
		luaL_error(L, "%s: field 'roots' has more than 256 entries", FN);
	p->roots = calloc((size_t)n, sizeof *p->roots);
	if (!p->roots)
		luaL_error(L, "%s: out of memory", FN);
	for (lua_Integer i = 1; i <= n; i++) {
		char field[48];
		struct lr_sbx_root *r = &p->roots[i - 1];
		r->read = LR_CAP_ALLOW;
		r->write = LR_CAP_DENY;
		p->nroots = (size_t)i;
		if (lua_geti(L, idx, i) != LUA_TTABLE)
			luaL_error(L, "%s: field 'roots[%d]' must be a table", FN, (int)i);
		int t = lua_gettop(L);
		lua_pushnil(L);
		while (lua_next(L, t)) {
			const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
			snprintf(field, sizeof field, "roots[%d].%.16s", (int)i, k);
			if (strcmp(k, "path") == 0)
				r->path = canonical(L, -1, field);
			else if (strcmp(k, "read") == 0)
				r->read = opt_cap(L, -1, field);
			else if (strcmp(k, "write") == 0)
				r->write = opt_cap(L, -1, field);
			else
				luaL_error(L, "%s: unknown field '%s'", FN, field);
			lua_pop(L, 1);
		}
		if (!r->path)
			luaL_error(L, "%s: field 'roots[%d].path' is required", FN, (int)i);
		lua_pop(L, 1);
	}
}


/*
 * protect = { names = { ".tool-versions", ... }, git = "protected" | "readonly",
 * max_entries = N } (stack: the table at idx).
 */
static void read_protect(lua_State *L, int idx, struct lr_profile *p)
{
	if (!lua_istable(L, idx))
		luaL_error(L, "%s: field 'protect' must be a table", FN);
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
		if (strcmp(k, "names") == 0) {
			if (!lua_istable(L, -1))
				luaL_error(L, "%s: field 'protect.names' must be a list of strings", FN);
			lua_Integer n = luaL_len(L, -1);
			if (n > LR_PROTECT_MAX_NAMES)
				luaL_error(L, "%s: field 'protect.names' has more than %d entries", FN,
					   LR_PROTECT_MAX_NAMES);
			if (n > 0 && !(p->protect_names = calloc((size_t)n, sizeof *p->protect_names)))
				luaL_error(L, "%s: out of memory", FN);
			for (lua_Integer i = 1; i <= n; i++) {
				if (lua_geti(L, -1, i) != LUA_TSTRING ||
				    lr_protect_name_check(lua_tostring(L, -1)) != 0)
					luaL_error(L, "%s: field 'protect.names[%d]' must be a relative path "
						   "without '.' or '..' components (printable, at most %d bytes)",
						   FN, (int)i, LR_PROTECT_NAME_MAX);
				if (!(p->protect_names[i - 1] = strdup(lua_tostring(L, -1))))
					luaL_error(L, "%s: out of memory", FN);
				p->nprotect_names = (size_t)i;
				lua_pop(L, 1);
			}
		} else if (strcmp(k, "git") == 0) {
			const char *g = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
			if (strcmp(g, "protected") && strcmp(g, "readonly"))
				luaL_error(L, "%s: field 'protect.git' must be protected or readonly", FN);
			p->git_readonly = strcmp(g, "readonly") == 0;
		} else if (strcmp(k, "max_entries") == 0) {
			if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
				luaL_error(L, "%s: field 'protect.max_entries' must be a positive integer", FN);
			p->protect_max_entries = (size_t)lua_tointeger(L, -1);
		} else {
			luaL_error(L, "%s: unknown field 'protect.%s'", FN, k);
		}
		lua_pop(L, 1);
	}
}

/* The capability state a field name stands for, or NULL. */
static enum lr_cap *cap_field(struct lr_profile *p, const char *k)
{
	static const struct {
		const char *name;
		size_t off;
	} caps[] = {
		{ "workspace_read", offsetof(struct lr_profile, workspace_read) },
		{ "workspace_write", offsetof(struct lr_profile, workspace_write) },
		{ "host_read", offsetof(struct lr_profile, host_read) },
		{ "host_write", offsetof(struct lr_profile, host_write) },
		{ "network", offsetof(struct lr_profile, network) },
		{ "command", offsetof(struct lr_profile, command) },
		{ "delegate", offsetof(struct lr_profile, delegate) },
		{ "mcp", offsetof(struct lr_profile, mcp) },
	};
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
		if (strcmp(k, caps[i].name) == 0)
			return (enum lr_cap *)((char *)p + caps[i].off);
	return NULL;
}

static int sandbox_profile(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	struct profile_ud *u = push_ud(L); /* stack: opts, ud */
	struct lr_profile *p = &u->p;
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		if (lua_type(L, -2) != LUA_TSTRING)
			return luaL_error(L, "%s: field names must be strings", FN);
		const char *k = lua_tostring(L, -2);
		enum lr_cap *cap = cap_field(p, k);
		if (cap) {
			*cap = opt_cap(L, -1, k);
		} else if (strcmp(k, "workspace_root") == 0) {
			free(p->workspace_root);
			p->workspace_root = NULL;
			p->workspace_root = canonical(L, -1, k);
		} else if (strcmp(k, "home") == 0) {
			const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
			if (strcmp(s, "isolated") && strcmp(s, "real"))
				return luaL_error(L, "%s: field 'home' must be isolated or real", FN);
			p->home = strcmp(s, "real") == 0 ? LR_HOME_REAL : LR_HOME_ISOLATED;
		} else if (strcmp(k, "isolation") == 0) {
			const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
			if (strcmp(s, "sandboxed") && strcmp(s, "unconfined"))
				return luaL_error(L, "%s: field 'isolation' must be sandboxed or unconfined", FN);
			p->isolation = strcmp(s, "unconfined") == 0 ? LR_ISO_UNCONFINED : LR_ISO_SANDBOXED;
		} else if (strcmp(k, "ack_unconfined") == 0) {
			if (!lua_isboolean(L, -1))
				return luaL_error(L, "%s: field 'ack_unconfined' must be a boolean", FN);
			p->ack_unconfined = lua_toboolean(L, -1);
		} else if (strcmp(k, "roots") == 0) {
			if (p->roots)
				return luaL_error(L, "%s: field 'roots' given twice", FN);
			read_roots(L, lua_gettop(L), p);
		} else if (strcmp(k, "protect") == 0) {
			read_protect(L, lua_gettop(L), p);
		} else {
			return luaL_error(L, "%s: unknown field '%s'", FN, k);
		}
		lua_pop(L, 1);
	}
	finish(L, u, FN);
	return 1;
}

/* ------------------------------------------------------------------ */
/* the profile object                                                   */

static int profile_gc(lua_State *L)
{
	struct profile_ud *u = check_ud(L, 1);
	lr_profile_release(&u->p);
	return 0;
}

static int profile_fingerprint(lua_State *L)
{
	lua_pushstring(L, check_ud(L, 1)->fp);
	return 1;
}

static int profile_access_for(lua_State *L)
{
	struct profile_ud *u = check_ud(L, 1);
	const char *kind = luaL_checkstring(L, 2);
	const char *scope = luaL_optstring(L, 3, NULL);
	enum lr_cap c;
	struct lr_err err = { "" };
	if (lr_profile_access_for(&u->p, kind, scope, &c, &err))
		return raise_c(L, "profile:access_for", err.msg);
	lua_pushstring(L, lr_cap_name(c));
	return 1;
}

static void push_roots(lua_State *L, const struct lr_profile *p)
{
	lua_createtable(L, (int)p->nroots, 0);
	for (size_t i = 0; i < p->nroots; i++) {
		lua_createtable(L, 0, 3);
		lua_pushstring(L, p->roots[i].path);
		lua_setfield(L, -2, "path");
		lua_pushstring(L, lr_cap_name(p->roots[i].read));
		lua_setfield(L, -2, "read");
		lua_pushstring(L, lr_cap_name(p->roots[i].write));
		lua_setfield(L, -2, "write");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/* { names = { the profile's }, git = "protected" | "readonly", max_entries = N, defaults = {...} } */
static void push_protect(lua_State *L, const struct lr_profile *p)
{
	lua_createtable(L, 0, 4);
	lua_createtable(L, (int)p->nprotect_names, 0);
	for (size_t i = 0; i < p->nprotect_names; i++) {
		lua_pushstring(L, p->protect_names[i]);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "names");
	lua_pushstring(L, p->git_readonly ? "readonly" : "protected");
	lua_setfield(L, -2, "git");
	lua_pushinteger(L, (lua_Integer)(p->protect_max_entries ? p->protect_max_entries
								 : LR_PROTECT_MAX_ENTRIES));
	lua_setfield(L, -2, "max_entries");
	lua_newtable(L);
	for (int i = 0; lr_protect_default_names[i]; i++) {
		lua_pushstring(L, lr_protect_default_names[i]);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "defaults");
}

/* Fields read as values; methods from the metatable's "methods". */
static int profile_index(lua_State *L)
{
	struct profile_ud *u = check_ud(L, 1);
	const struct lr_profile *p = &u->p;
	const char *k = luaL_checkstring(L, 2);
	const enum lr_cap *cap = cap_field((struct lr_profile *)p, k);
	if (cap)
		lua_pushstring(L, lr_cap_name(*cap));
	else if (strcmp(k, "workspace_root") == 0)
		lua_pushstring(L, p->workspace_root);
	else if (strcmp(k, "home") == 0)
		lua_pushstring(L, p->home == LR_HOME_REAL ? "real" : "isolated");
	else if (strcmp(k, "isolation") == 0)
		lua_pushstring(L, p->isolation == LR_ISO_UNCONFINED ? "unconfined" : "sandboxed");
	else if (strcmp(k, "ack_unconfined") == 0)
		lua_pushboolean(L, p->ack_unconfined);
	else if (strcmp(k, "roots") == 0)
		push_roots(L, p);
	else if (strcmp(k, "protect") == 0)
		push_protect(L, p);
	else if (strcmp(k, "fingerprint") == 0)
		lua_pushcfunction(L, profile_fingerprint);
	else if (strcmp(k, "access_for") == 0)
		lua_pushcfunction(L, profile_access_for);
	else
		lua_pushnil(L);
	return 1;
}

static int profile_newindex(lua_State *L)
{
	check_ud(L, 1);
	return luaL_error(L, "rig.sandbox: a profile is frozen (cannot set field '%s')",
			  luaL_tolstring(L, 2, NULL));
}

static int profile_tostring(lua_State *L)
{
	struct profile_ud *u = check_ud(L, 1);
	lua_pushfstring(L, "rig.sandbox.profile (%s, %s)", u->p.workspace_root, u->fp);
	return 1;
}

/* Two profiles are equal when they have the same fingerprint. */
static int profile_eq(lua_State *L)
{
	struct profile_ud *a = luaL_testudata(L, 1, PROFILE_MT), *b = luaL_testudata(L, 2, PROFILE_MT);
	lua_pushboolean(L, a && b && strcmp(a->fp, b->fp) == 0);
	return 1;
}

/* ------------------------------------------------------------------ */
/* restrict and check                                                   */

static int sandbox_restrict(lua_State *L)
{
	struct profile_ud *a = check_ud(L, 1), *b = check_ud(L, 2);
	struct profile_ud *u = push_ud(L);
	struct lr_err err = { "" };
	if (lr_profile_restrict(&a->p, &b->p, &u->p, &err))
		return luaL_error(L, "rig.sandbox.%s", err.msg);
	finish(L, u, "rig.sandbox.restrict");
	return 1;
}

static const char *tier_name(enum lr_tier t)
{
	return t == LR_TIER_A ? "A" : t == LR_TIER_B ? "B" : "none";
}

static void set_bool(lua_State *L, const char *k, int v)
{
	lua_pushboolean(L, v);
	lua_setfield(L, -2, k);
}

/*
 * rig.sandbox.check([profile]) -> { tier, why, cgroup, ok, error,
 * guarantees = { name = { enforced, required, how | missing } }, order,
 * caps }. Without a profile: the defaults on the current directory.
 */
static int sandbox_check(lua_State *L)
{
	struct lr_profile def, *p = &def;
	struct lr_err err = { "" };
	char cwd[PATH_MAX];
	lr_profile_init(&def);
	if (!lua_isnoneornil(L, 1)) {
		p = &check_ud(L, 1)->p;
	} else {
		if (!getcwd(cwd, sizeof cwd))
			return lr_pushfail(L, -errno, "rig.sandbox.check: no current directory");
		def.workspace_root = cwd;
	}
	const struct lr_sbx_caps *c = lr_sbx_probe();
	struct lr_sbx_report r;
	int rc = lr_sbx_report(p, c, &r, &err);

	lua_createtable(L, 0, 8);
	lua_pushstring(L, tier_name(c->tier));
	lua_setfield(L, -2, "tier");
	lua_pushstring(L, c->why);
	lua_setfield(L, -2, "why");
	lua_pushstring(L, c->cgroup_note);
	lua_setfield(L, -2, "cgroup");
	set_bool(L, "ok", rc == 0);
	if (rc) {
		lua_pushstring(L, err.msg);
		lua_setfield(L, -2, "error");
	}
	lua_createtable(L, LR_G_COUNT, 0);
	lua_createtable(L, 0, LR_G_COUNT);
	for (int g = 0; g < LR_G_COUNT; g++) {
		const char *name = lr_guarantee_name((enum lr_guarantee)g);
		lua_pushstring(L, name);
		lua_rawseti(L, -3, g + 1);
		lua_createtable(L, 0, 3);
		set_bool(L, "enforced", r.enforced[g]);
		set_bool(L, "required", r.required[g]);
		lua_pushstring(L, r.enforced[g] ? r.how[g] : r.missing[g]);
		lua_setfield(L, -2, r.enforced[g] ? "how" : "missing");
		lua_setfield(L, -2, name);
	}
	lua_setfield(L, -3, "guarantees");
	lua_setfield(L, -2, "order");
	lua_createtable(L, 0, 9);
	set_bool(L, "userns", c->userns);
	set_bool(L, "mountns", c->mountns);
	set_bool(L, "pidns", c->pidns);
	set_bool(L, "netns", c->netns);
	set_bool(L, "mount_api", c->mount_api);
	set_bool(L, "seccomp", c->seccomp);
	set_bool(L, "cgroup", c->cgroup);
	lua_pushinteger(L, c->landlock_abi);
	lua_setfield(L, -2, "landlock_abi");
	if (c->cgroup) {
		lua_pushstring(L, c->cgroup_path);
		lua_setfield(L, -2, "cgroup_path");
	}
	lua_setfield(L, -2, "caps");
	return 1;
}

/*
 * core.protect_path(root, rel[, names]) -> nil | why: whether a host-side
 * write of rel (relative, no "." or "..") beneath root touches what the
 * sandbox protects (sandbox/protect.c, the same rules as the mount view).
 * names: extra protected names (a profile's protect.names). A failed
 * lookup is nil, message, code.
 */
static int protect_path(lua_State *L)
{
	const char *root = luaL_checkstring(L, 1);
	const char *rel = luaL_checkstring(L, 2);
	const char *names[LR_PROTECT_MAX_NAMES];
	size_t n = 0;
	if (!lua_isnoneornil(L, 3)) {
		luaL_checktype(L, 3, LUA_TTABLE);
		lua_Integer len = luaL_len(L, 3);
		if (len > LR_PROTECT_MAX_NAMES)
			return luaL_error(L, "protect_path: more than %d names", LR_PROTECT_MAX_NAMES);
		for (lua_Integer i = 1; i <= len; i++) {
			lua_geti(L, 3, i);
			const char *nm = lua_tostring(L, -1);
			if (lua_type(L, -1) != LUA_TSTRING || lr_protect_name_check(nm) != 0)
				return luaL_error(L, "protect_path: name %d must be a relative path without "
						  "'.' or '..' components", (int)i);
			names[n++] = nm; /* kept alive by the table at 3 */
			lua_pop(L, 1);
		}
	}
	struct lr_protect_opts o = { .names = names, .nnames = n };
	struct lr_err why = { "" };
	int rc = lr_protect_path(root, rel, &o, &why);
	if (rc < 0)
		return lr_pushfail(L, rc, "protect_path: '%s': %s", root, lr_strerror(rc));
	if (rc == 0)
		lua_pushnil(L);
	else
		lua_pushstring(L, why.msg);
	return 1;
}

void lr__sandbox_open(lua_State *L)
{
	luaL_newmetatable(L, PROFILE_MT);
	lua_pushcfunction(L, profile_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, profile_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, profile_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushcfunction(L, profile_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushcfunction(L, profile_eq);
	lua_setfield(L, -2, "__eq");
	lua_pushliteral(L, "rig.sandbox.profile");
	lua_setfield(L, -2, "__name");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 1);

	static const luaL_Reg fns[] = {
		{ "sandbox_profile", sandbox_profile },
		{ "sandbox_restrict", sandbox_restrict },
		{ "sandbox_check", sandbox_check },
		{ "protect_path", protect_path },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
