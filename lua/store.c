/*
 * store.c — rig.store: a storage backend with workspace snapshots, bound
 * for Lua. Every snapshot call runs on host's worker pool and the task
 * waits through the coroutine bridge, so the loop keeps running.
 *
 * A call's operation lives on the C heap, not in Lua: when the waiting
 * task is cancelled the worker cannot be stopped, so the operation is
 * abandoned (its result is discarded and freed by the completion on the
 * loop). The backend is reference-counted by the handle and by every
 * operation in flight, so closing a store while a worker uses it defers
 * the real close to the last completion.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../storage/storage.h"

#define STORE_MT "rig.store"
#define STOREOP_MT "rig.op.store"

/* The backend and snapshotter, shared by the handle and operations (loop thread only). */
struct shared {
	struct lr_store *s;
	struct lr_snap *sn;
	int refs;
	char *root; /* an lmdb store's state root (NULL for memory) */
};

static void shared_unref(struct shared *sh)
{
	if (sh && --sh->refs == 0) {
		lr_snap_free(sh->sn);
		lr_store_close(sh->s);
		free(sh->root);
		free(sh);
	}
}

enum kind { K_SNAPSHOT, K_RESTORE, K_REWIND, K_DIFF, K_EXPORT, K_IMPORT, K_GC, K_LIST,
	     K_BLOB_PUT, K_BLOB_GET };

struct opud;

struct sop {
	struct lr_work work;
	struct opud *ud;  /* NULL once abandoned */
	int pending;
	struct shared *sh;
	enum kind kind;
	char *a, *b;
	char **live;
	size_t nlive;
	int rc;
	struct lr_err e;
	struct lr_snap_result res;
	struct lr_snap_rewind_stats rw;
	struct lr_snap_diff diff;
	struct lr_snap_gc_stats gc;
	struct lr_snap_info *info;
	size_t ninfo;
	char ref[LR_SNAP_REF_MAX];
	struct lr_bytes bytes; /* blob_put's copy of the data, blob_get's result */
	int existed;           /* blob_put: the key held a blob already (not rewritten) */
};

struct opud {
	struct lr_wait wait;
	struct sop *op;
};

static void sop_free(struct sop *op)
{
	lr_snap_result_release(&op->res);
	lr_snap_diff_release(&op->diff);
	for (size_t i = 0; i < op->nlive; i++)
		free(op->live[i]);
	free(op->live);
	free(op->info);
	lr_bytes_release(&op->bytes);
	free(op->a);
	free(op->b);
	shared_unref(op->sh);
	free(op);
}

/* On a pool thread: only C, only the op's own fields. */
static void sop_work(struct lr_work *w)
{
	struct sop *op = (struct sop *)w;
	struct lr_snap *sn = op->sh->sn;
	op->e.msg[0] = 0;
	switch (op->kind) {
	case K_SNAPSHOT:
		op->rc = lr_snap_capture(sn, op->a, &op->res, &op->e);
		break;
	case K_RESTORE:
		op->rc = lr_snap_restore(sn, op->a, op->b, &op->e);
		break;
	case K_REWIND:
		op->rc = lr_snap_rewind(sn, op->a, op->b, &op->rw, &op->e);
		break;
	case K_DIFF:
		op->rc = lr_snap_diff(sn, op->a, op->b, &op->diff, &op->e);
		break;
	case K_EXPORT:
		op->rc = lr_snap_export(sn, op->a, op->b, &op->e);
		break;
	case K_IMPORT:
		op->rc = lr_snap_import(sn, op->a, op->ref, &op->e);
		break;
	case K_GC:
		op->rc = lr_snap_gc(sn, (const char *const *)op->live, op->nlive, &op->gc, &op->e);
		break;
	case K_LIST:
		op->rc = lr_snap_list(sn, &op->info, &op->ninfo, &op->e);
		break;
	case K_BLOB_PUT: {
		/* content-addressed keys: a blob already there is the same bytes */
		uint64_t have = 0;
		op->rc = lr_store_blob_stat(op->sh->s, op->a, &have, &op->e);
		if (op->rc == 0) {
			op->existed = 1;
			break;
		}
		op->e.msg[0] = 0;
		op->rc = lr_store_blob_put(op->sh->s, op->a, op->bytes.data, op->bytes.len, &op->e);
		break;
	}
	case K_BLOB_GET:
		op->rc = lr_store_blob_get(op->sh->s, op->a, &op->bytes, &op->e);
		break;
	}
}

/* On the loop thread. */
static void sop_done(struct lr_work *w)
{
	struct sop *op = (struct sop *)w;
	op->pending = 0;
	if (!op->ud) {
		sop_free(op);
		return;
	}
	lr_sched_wake(&op->ud->wait);
}

static void sop_cancel(struct lr_wait *w)
{
	struct opud *ud = (struct opud *)w;
	if (ud->op && ud->op->pending) {
		ud->op->ud = NULL; /* the worker finishes; sop_done frees */
		ud->op = NULL;
	}
}

static int opud_gc(lua_State *L)
{
	struct opud *ud = lua_touserdata(L, 1);
	struct sop *op = ud->op;
	ud->op = NULL;
	if (op) {
		if (op->pending)
			op->ud = NULL;
		else
			sop_free(op);
	}
	return 0;
}

static void push_strv(lua_State *L, char **v, size_t n)
{
	lua_createtable(L, (int)(n > INT_MAX ? 0 : n), 0);
	for (size_t i = 0; i < n; i++) {
		lua_pushstring(L, v[i]);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

static void set_int(lua_State *L, const char *k, uint64_t v)
{
	lua_pushinteger(L, (lua_Integer)v);
	lua_setfield(L, -2, k);
}

static int sop_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct opud *ud = (struct opud *)ctx;
	lr_sched_resumed(L, &ud->wait);
	struct sop *op = ud->op;
	int n;
	if (op->rc) {
		n = lr_pushfail(L, op->rc, "%s", op->e.msg[0] ? op->e.msg : lr_strerror(op->rc));
		goto out;
	}
	switch (op->kind) {
	case K_SNAPSHOT:
		lua_pushstring(L, op->res.ref);
		lua_createtable(L, (int)op->res.nskipped, 0);
		for (size_t i = 0; i < op->res.nskipped; i++) {
			lua_createtable(L, 0, 2);
			lua_pushstring(L, op->res.skipped[i].path);
			lua_setfield(L, -2, "path");
			lua_pushstring(L, op->res.skipped[i].reason);
			lua_setfield(L, -2, "reason");
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		lua_createtable(L, 0, 6);
		set_int(L, "files", op->res.files);
		set_int(L, "dirs", op->res.dirs);
		set_int(L, "symlinks", op->res.symlinks);
		set_int(L, "bytes", op->res.bytes);
		set_int(L, "files_hashed", op->res.files_hashed);
		set_int(L, "blobs_written", op->res.blobs_written);
		n = 3;
		break;
	case K_RESTORE:
	case K_EXPORT:
		lua_pushboolean(L, 1);
		n = 1;
		break;
	case K_REWIND:
		lua_createtable(L, 0, 2);
		set_int(L, "written", op->rw.written);
		set_int(L, "removed", op->rw.removed);
		n = 1;
		break;
	case K_DIFF:
		lua_createtable(L, 0, 3);
		push_strv(L, op->diff.added, op->diff.nadded);
		lua_setfield(L, -2, "added");
		push_strv(L, op->diff.removed, op->diff.nremoved);
		lua_setfield(L, -2, "removed");
		push_strv(L, op->diff.modified, op->diff.nmodified);
		lua_setfield(L, -2, "modified");
		n = 1;
		break;
	case K_IMPORT:
		lua_pushstring(L, op->ref);
		n = 1;
		break;
	case K_BLOB_PUT:
		lua_pushboolean(L, 1);
		lua_pushboolean(L, op->existed);
		n = 2;
		break;
	case K_BLOB_GET:
		lua_pushlstring(L, op->bytes.data ? op->bytes.data : "", op->bytes.len);
		n = 1;
		break;
	case K_GC:
		lua_createtable(L, 0, 2);
		set_int(L, "kept", op->gc.kept);
		set_int(L, "deleted", op->gc.deleted);
		n = 1;
		break;
	default:
		lua_createtable(L, (int)op->ninfo, 0);
		for (size_t i = 0; i < op->ninfo; i++) {
			lua_createtable(L, 0, 4);
			lua_pushstring(L, op->info[i].ref);
			lua_setfield(L, -2, "ref");
			lua_pushnumber(L, op->info[i].time);
			lua_setfield(L, -2, "time");
			set_int(L, "files", op->info[i].files);
			set_int(L, "bytes", op->info[i].bytes);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		n = 1;
		break;
	}
out:
	ud->op = NULL;
	sop_free(op);
	return n;
}

static struct shared *check_store(lua_State *L)
{
	struct shared **p = lr_checkhandle(L, 1, STORE_MT);
	return *p;
}

/* Starts op (already filled) and waits; raises on misuse before anything is submitted. */
/* The op made by sop_new, its userdata on top of the stack, goes to the pool. */
static int sop_start(lua_State *L, struct shared *sh, struct sop *op)
{
	/* stack: ... ud; the op userdata anchors the wait on the coroutine stack */
	struct opud *ud = op->ud;
	op->sh = sh;
	sh->refs++;
	op->work.work = sop_work;
	op->work.done = sop_done;
	op->pending = 1;
	ud->wait.cancel = sop_cancel;
	int rc = lr_pool_submit(lr_state_of(L)->loop, &op->work);
	if (rc) {
		op->pending = 0;
		ud->op = NULL;
		sop_free(op);
		return lr_pushfail(L, rc, "rig.store: cannot start a worker: %s", lr_strerror(rc));
	}
	return lr_sched_await(L, &ud->wait, (lua_KContext)ud, sop_k);
}

/*
 * An op and its userdata, pushed: the userdata first (closed), then the op
 * it owns from here on, so a raise anywhere after (out of memory, a
 * --max-memory stop) leaves the op to the userdata's __gc. Callers add to
 * the op, push nothing that stays, and hand it to sop_start.
 */
static struct sop *sop_new(lua_State *L, enum kind kind, int nstr)
{
	const char *a = nstr >= 1 ? luaL_checkstring(L, 2) : NULL;
	const char *b = nstr >= 2 ? luaL_checkstring(L, 3) : NULL;
	struct opud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
	memset(ud, 0, sizeof *ud);
	luaL_setmetatable(L, STOREOP_MT);
	/* stack: ... ud */
	struct sop *op = calloc(1, sizeof *op);
	if (!op)
		luaL_error(L, "rig.store: out of memory");
	ud->op = op;
	op->ud = ud;
	op->kind = kind;
	if ((a && !(op->a = strdup(a))) || (b && !(op->b = strdup(b))))
		luaL_error(L, "rig.store: out of memory");
	return op;
}

#define SIMPLE(fname, kind, nstr)                                   \
	static int fname(lua_State *L)                              \
	{                                                           \
		struct shared *sh = check_store(L);                 \
		lr_sched_enter(L);                                  \
		struct sop *op = sop_new(L, kind, nstr);            \
		return sop_start(L, sh, op);                        \
	}

/* store:snapshot(dir) -> ref, skipped, stats | nil, msg, code */
SIMPLE(store_snapshot, K_SNAPSHOT, 1)
/* store:restore(ref, dir) -> true | nil, msg, code */
SIMPLE(store_restore, K_RESTORE, 2)
/* store:rewind(ref, dir) -> { written, removed } | nil, msg, code */
SIMPLE(store_rewind, K_REWIND, 2)
/* store:diff(a, b) -> { added, removed, modified } | nil, msg, code */
SIMPLE(store_diff, K_DIFF, 2)
/* store:export(ref, file) -> true | nil, msg, code */
SIMPLE(store_export, K_EXPORT, 2)
/* store:import(file) -> ref | nil, msg, code */
SIMPLE(store_import, K_IMPORT, 1)
/* store:list() -> { { ref, time, files, bytes }, ... } newest first */
SIMPLE(store_list, K_LIST, 0)

/* store:blob_get(key) -> bytes | nil, msg, code ("not_found") */
SIMPLE(store_blob_get, K_BLOB_GET, 1)

/* store:blob_put(key, bytes) -> true, existed | nil, msg, code. For
 * content-addressed keys (the session's media): a key that holds a blob
 * already is not written again. */
static int store_blob_put(lua_State *L)
{
	struct shared *sh = check_store(L);
	size_t n;
	luaL_checkstring(L, 2);
	const char *data = luaL_checklstring(L, 3, &n);
	lr_sched_enter(L);
	struct sop *op = sop_new(L, K_BLOB_PUT, 1);
	op->bytes.data = malloc(n ? n : 1);
	if (!op->bytes.data)
		return luaL_error(L, "rig.store: out of memory"); /* the op goes with its userdata */
	memcpy(op->bytes.data, data, n);
	op->bytes.len = n;
	return sop_start(L, sh, op);
}

/* store:gc{ live refs } -> { kept, deleted } | nil, msg, code */
static int store_gc(lua_State *L)
{
	struct shared *sh = check_store(L);
	luaL_checktype(L, 2, LUA_TTABLE);
	lr_sched_enter(L);
	lua_Integer n = luaL_len(L, 2);
	for (lua_Integer i = 1; i <= n; i++)
		if (lua_geti(L, 2, i) != LUA_TSTRING)
			luaL_error(L, "rig.store.gc: live ref %d is not a string", (int)i);
	lua_pop(L, (int)n);
	struct sop *op = sop_new(L, K_GC, 0);
	op->live = calloc((size_t)n + 1, sizeof *op->live);
	if (!op->live)
		return luaL_error(L, "rig.store: out of memory"); /* the op goes with its userdata */
	for (lua_Integer i = 1; i <= n; i++) {
		lua_geti(L, 2, i);
		op->live[op->nlive] = strdup(lua_tostring(L, -1));
		lua_pop(L, 1);
		/* a live ref left out would be collected: never go on without it */
		if (!op->live[op->nlive])
			return luaL_error(L, "rig.store: out of memory");
		op->nlive++;
	}
	return sop_start(L, sh, op);
}

void *lr__store_ref(lua_State *L, int idx, struct lr_store **out)
{
	struct shared **p = lr_checkhandle(L, idx, STORE_MT), *sh = *p;
	sh->refs++;
	*out = sh->s;
	return sh;
}

void lr__store_unref(void *ref)
{
	shared_unref(ref);
}

static int store_close(lua_State *L)
{
	struct shared **p = luaL_checkudata(L, 1, STORE_MT);
	shared_unref(*p);
	*p = NULL;
	return 0;
}

static int store_tostring(lua_State *L)
{
	struct shared **p = luaL_checkudata(L, 1, STORE_MT);
	if (*p)
		lua_pushfstring(L, "rig.store (%s): %p", lr_store_kind((*p)->s), (void *)*p);
	else
		lua_pushliteral(L, "rig.store (closed)");
	return 1;
}

/* store:root() -> the lmdb state root | nil (a memory store) */
static int store_root(lua_State *L)
{
	struct shared *sh = check_store(L);
	if (sh->root)
		lua_pushstring(L, sh->root);
	else
		lua_pushnil(L);
	return 1;
}

static int store_kind(lua_State *L)
{
	lua_pushstring(L, lr_store_kind(check_store(L)->s));
	return 1;
}

/* Wraps an open backend in a handle; takes s (and closes it on failure). */
/*
 * A store handle is made closed (*p NULL) before the store it will own is
 * opened, as Lua's own io library does: raising (out of memory, a
 * --max-memory stop) while the userdata is made then leaks nothing, and
 * once the store is open only C runs until the handle owns it.
 */
static struct shared **store_new_closed(lua_State *L)
{
	struct shared **p = lua_newuserdatauv(L, sizeof *p, 0);
	*p = NULL;
	luaL_setmetatable(L, STORE_MT);
	return p; /* stack: ... ud */
}

/* Gives s (open) to the closed handle p; on failure s is closed, then the error raised. */
static int store_adopt(lua_State *L, struct shared **p, struct lr_store *s, const char *cache_dir,
		       int threads)
{
	struct shared *sh = calloc(1, sizeof *sh);
	struct lr_err e;
	struct lr_snap_opts o = { .cache_dir = cache_dir, .threads = threads };
	if (!sh || lr_snap_new(s, &o, &sh->sn, &e)) {
		free(sh);
		lr_store_close(s);
		return luaL_error(L, "rig.store: out of memory");
	}
	sh->s = s;
	sh->refs = 1;
	*p = sh;
	return 1;
}

/* rig.core.store_memory() */
static int core_store_memory(lua_State *L)
{
	struct shared **p = store_new_closed(L);
	struct lr_store *s;
	struct lr_err e;
	int rc = lr_store_memory_open(&s, &e);
	if (rc)
		return lr_pushfail(L, rc, "%s", e.msg);
	return store_adopt(L, p, s, NULL, 0);
}

/* rig.core.store_lmdb{ root = "/abs/dir" } */
static int core_store_lmdb(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		if (lua_type(L, -2) != LUA_TSTRING || strcmp(lua_tostring(L, -2), "root") != 0)
			return luaL_error(L, "rig.store.lmdb: unknown option '%s'",
					  lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?");
		lua_pop(L, 1);
	}
	lua_getfield(L, 1, "root");
	const char *root = lua_tostring(L, -1);
	if (lua_type(L, -1) != LUA_TSTRING || root[0] != '/')
		return luaL_error(L, "rig.store.lmdb: option 'root' must be an absolute path");
	char cache[PATH_MAX];
	snprintf(cache, sizeof cache, "%s/statcache", root);
	struct lr_lmdb_opts o = { .root = root };
	struct shared **p = store_new_closed(L);
	struct lr_store *s;
	struct lr_err e;
	int rc = lr_store_lmdb_open(&o, &s, &e);
	if (rc)
		return lr_pushfail(L, rc, "%s", e.msg);
	/* Many puts in flight let the LMDB writer group them into few commits. */
	store_adopt(L, p, s, cache, 32);
	(*p)->root = strdup(root);
	if (!(*p)->root)
		return luaL_error(L, "rig.store: out of memory");
	return 1;
}

/* An optional string field of the options table at 1; raises if it is not one. */
static const char *opt_string(lua_State *L, const char *api, const char *field)
{
	lua_getfield(L, 1, field);
	const char *v = NULL;
	if (lua_type(L, -1) == LUA_TSTRING)
		v = lua_tostring(L, -1); /* anchored by the options table */
	else if (!lua_isnil(L, -1))
		luaL_error(L, "%s: option '%s' must be a string", api, field);
	lua_pop(L, 1);
	return v;
}

static int64_t opt_ms(lua_State *L, const char *api, const char *field)
{
	lua_getfield(L, 1, field);
	int64_t v = 0;
	if (lua_type(L, -1) == LUA_TNUMBER) {
		lua_Number x = lua_tonumber(L, -1);
		if (!(x > 0 && x < 86400))
			luaL_error(L, "%s: option '%s' must be seconds in (0, 86400)", api, field);
		v = (int64_t)(x * 1000);
		if (v < 1)
			v = 1;
	} else if (!lua_isnil(L, -1)) {
		luaL_error(L, "%s: option '%s' must be a number", api, field);
	}
	lua_pop(L, 1);
	return v;
}

/*
 * rig.core.store_nats{ url = "nats://…" | embedded_dir = "/abs/dir", user, password,
 * token, creds_file, nkey, nkey_seed_file, namespace, lease_ttl, timeout (seconds),
 * replicas (1..5) }
 */
static int core_store_nats(lua_State *L)
{
	static const char *const known[] = { "url", "embedded_dir", "user", "password", "token",
					     "creds_file", "nkey", "nkey_seed_file", "namespace",
					     "lease_ttl", "timeout", "replicas", NULL };
	const char *api = "rig.store.nats";
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		int ok = 0;
		if (lua_type(L, -2) == LUA_TSTRING)
			for (size_t i = 0; known[i] && !ok; i++)
				ok = strcmp(lua_tostring(L, -2), known[i]) == 0;
		if (!ok)
			return luaL_error(L, "%s: unknown option '%s'", api,
					  lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?");
		lua_pop(L, 1);
	}
	struct lr_nats_opts o = { 0 };
	o.url = opt_string(L, api, "url");
	o.embedded_dir = opt_string(L, api, "embedded_dir");
	if (!o.url == !o.embedded_dir)
		return luaL_error(L, "%s: give exactly one of 'url' and 'embedded_dir'", api);
	if (o.embedded_dir && o.embedded_dir[0] != '/')
		return luaL_error(L, "%s: option 'embedded_dir' must be an absolute path", api);
	o.user = opt_string(L, api, "user");
	o.password = opt_string(L, api, "password");
	o.token = opt_string(L, api, "token");
	o.creds_file = opt_string(L, api, "creds_file");
	o.nkey = opt_string(L, api, "nkey");
	o.nkey_seed_file = opt_string(L, api, "nkey_seed_file");
	o.ns = opt_string(L, api, "namespace");
	o.lease_ttl_ms = opt_ms(L, api, "lease_ttl");
	o.timeout_ms = opt_ms(L, api, "timeout");
	lua_getfield(L, 1, "replicas");
	if (!lua_isnil(L, -1)) {
		int isint = 0;
		lua_Integer r = lua_tointegerx(L, -1, &isint);
		if (!isint || r < 1 || r > 5)
			return luaL_error(L, "%s: option 'replicas' must be an integer from 1 to 5", api);
		o.replicas = (int)r;
	}
	lua_pop(L, 1);
	if (!o.nkey != !o.nkey_seed_file)
		return luaL_error(L, "%s: options 'nkey' and 'nkey_seed_file' go together", api);
	char cache[PATH_MAX];
	if (o.embedded_dir)
		snprintf(cache, sizeof cache, "%s/statcache", o.embedded_dir);
	struct shared **p = store_new_closed(L);
	struct lr_store *s;
	struct lr_err e;
	int rc = lr_store_nats_open(&o, &s, &e);
	if (rc)
		return lr_pushfail(L, rc, "%s", e.msg);
	return store_adopt(L, p, s, o.embedded_dir ? cache : NULL, 32);
}

void lr__store_open(lua_State *L)
{
	luaL_newmetatable(L, STOREOP_MT);
	lua_pushcfunction(L, opud_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg methods[] = {
		{ "snapshot", store_snapshot },
		{ "restore", store_restore },
		{ "rewind", store_rewind },
		{ "diff", store_diff },
		{ "export", store_export },
		{ "import", store_import },
		{ "gc", store_gc },
		{ "blob_put", store_blob_put },
		{ "blob_get", store_blob_get },
		{ "list", store_list },
		{ "kind", store_kind },
		{ "root", store_root },
		{ "close", store_close },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, STORE_MT); /* stack: core mt */
	luaL_newlib(L, methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, store_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, store_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, store_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	lua_pushcfunction(L, core_store_memory);
	lua_setfield(L, -2, "store_memory");
	lua_pushcfunction(L, core_store_lmdb);
	lua_setfield(L, -2, "store_lmdb");
	lua_pushcfunction(L, core_store_nats);
	lua_setfield(L, -2, "store_nats");
}
