/*
 * flow.c — the store's kv primitive for Lua, which rig.flow
 * (stdlib/rig/flow.lua) indexes its runs with:
 *
 *   core.kv_get(store, key) -> value, rev | nil, msg, "not_found" | ...
 *   core.kv_put(store, key, expected_rev, value) -> new_rev | nil, msg, "conflict" | ...
 *     (compare-and-swap: expected_rev 0 creates)
 *   core.kv_keys(store, prefix) -> { key, ... } ascending | nil, msg, code
 *
 * Every call runs on host's worker pool and the task waits through the
 * coroutine bridge, as rig.store's calls do (a NATS kv call is a network
 * round trip). The operation lives on the C heap: a cancelled task
 * abandons it and its completion frees it.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../storage/storage.h"

#define KVOP_MT "rig.op.kv"

enum kvkind { KV_GET, KV_PUT, KV_KEYS };

struct kvop {
	struct lr_work work;
	struct kvud *ud; /* NULL once abandoned */
	int pending;
	enum kvkind kind;
	struct lr_store *st;
	void *storeref;
	char key[LR_STORE_NAME_MAX + 1];
	uint64_t rev;
	void *val;
	size_t len;
	struct lr_bytes got;
	char **keys;
	size_t nkeys, capkeys;
	int oom;
	int rc;
	struct lr_err e;
};

struct kvud {
	struct lr_wait wait;
	struct kvop *op;
};

static void kvop_free(struct kvop *op)
{
	lr_bytes_release(&op->got);
	for (size_t i = 0; i < op->nkeys; i++)
		free(op->keys[i]);
	free(op->keys);
	free(op->val);
	lr__store_unref(op->storeref);
	free(op);
}

/* Collects one key (on the pool thread); a full list past 1M keys stops. */
static int keep_key(void *arg, const char *name)
{
	struct kvop *op = arg;
	if (op->nkeys == op->capkeys) {
		size_t cap = op->capkeys ? op->capkeys * 2 : 64;
		if (cap > ((size_t)1 << 20))
			return 1;
		char **n = realloc(op->keys, cap * sizeof *n);
		if (!n) {
			op->oom = 1;
			return 1;
		}
		op->keys = n;
		op->capkeys = cap;
	}
	char *k = strdup(name);
	if (!k) {
		op->oom = 1;
		return 1;
	}
	op->keys[op->nkeys++] = k;
	return 0;
}

static void kv_work(struct lr_work *w)
{
	struct kvop *op = (struct kvop *)w;
	op->e.msg[0] = 0;
	switch (op->kind) {
	case KV_GET:
		op->rc = lr_store_kv_get(op->st, op->key, &op->got, &op->rev, &op->e);
		break;
	case KV_PUT: {
		uint64_t nrev = 0;
		op->rc = lr_store_kv_put(op->st, op->key, op->rev, op->val, op->len, &nrev, &op->e);
		op->rev = nrev;
		break;
	}
	case KV_KEYS:
		op->rc = lr_store_kv_keys(op->st, op->key, keep_key, op, &op->e);
		if (op->rc > 0)
			op->rc = 0; /* stopped early: the list is cut */
		if (op->oom)
			op->rc = -ENOMEM;
		break;
	}
}

static void kv_done(struct lr_work *w)
{
	struct kvop *op = (struct kvop *)w;
	op->pending = 0;
	if (!op->ud) {
		kvop_free(op);
		return;
	}
	lr_sched_wake(&op->ud->wait);
}

static void kv_cancel(struct lr_wait *w)
{
	struct kvud *ud = (struct kvud *)w;
	if (ud->op && ud->op->pending) {
		ud->op->ud = NULL;
		ud->op = NULL;
	}
}

static int kvud_gc(lua_State *L)
{
	struct kvud *ud = lua_touserdata(L, 1);
	struct kvop *op = ud->op;
	ud->op = NULL;
	if (op) {
		if (op->pending)
			op->ud = NULL;
		else
			kvop_free(op);
	}
	return 0;
}

static int kv_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct kvud *ud = (struct kvud *)ctx;
	lr_sched_resumed(L, &ud->wait);
	struct kvop *op = ud->op;
	ud->op = NULL;
	int n;
	if (op->rc) {
		char msg[sizeof op->e.msg];
		memcpy(msg, op->e.msg, sizeof msg);
		int rc = op->rc;
		kvop_free(op);
		return lr_pushfail(L, rc, "%s", msg[0] ? msg : lr_strerror(rc));
	}
	switch (op->kind) {
	case KV_GET:
		lua_pushlstring(L, op->got.data ? op->got.data : "", op->got.len);
		lua_pushinteger(L, (lua_Integer)op->rev);
		n = 2;
		break;
	case KV_PUT:
		lua_pushinteger(L, (lua_Integer)op->rev);
		n = 1;
		break;
	default:
		lua_createtable(L, (int)(op->nkeys > INT_MAX ? 0 : op->nkeys), 0);
		for (size_t i = 0; i < op->nkeys; i++) {
			lua_pushstring(L, op->keys[i]);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		n = 1;
		break;
	}
	kvop_free(op);
	return n;
}

/* stack: store key ... ; starts op on the pool and waits. */
static int kv_start(lua_State *L, const char *fn, enum kvkind kind)
{
	struct lr_store *st;
	luaL_checkudata(L, 1, "rig.store");
	size_t kl;
	const char *key = luaL_checklstring(L, 2, &kl);
	if (kl > LR_STORE_NAME_MAX || (kind != KV_KEYS && kl == 0))
		return luaL_error(L, "%s: invalid key '%s'", fn, key);
	uint64_t rev = 0;
	size_t vl = 0;
	const char *val = NULL;
	if (kind == KV_PUT) {
		lua_Integer r = luaL_checkinteger(L, 3);
		if (r < 0)
			return luaL_error(L, "%s: expected revision must be >= 0", fn);
		rev = (uint64_t)r;
		val = luaL_checklstring(L, 4, &vl);
	}
	lr_sched_enter(L);
	struct kvud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
	memset(ud, 0, sizeof *ud);
	luaL_setmetatable(L, KVOP_MT);
	struct kvop *op = calloc(1, sizeof *op);
	if (!op)
		return luaL_error(L, "%s: out of memory", fn);
	if (kind == KV_PUT) {
		op->val = malloc(vl ? vl : 1);
		if (!op->val) {
			free(op);
			return luaL_error(L, "%s: out of memory", fn);
		}
		memcpy(op->val, val, vl);
		op->len = vl;
	}
	op->storeref = lr__store_ref(L, 1, &st);
	op->st = st;
	op->kind = kind;
	op->rev = rev;
	memcpy(op->key, key, kl + 1);
	op->work.work = kv_work;
	op->work.done = kv_done;
	op->pending = 1;
	op->ud = ud;
	ud->op = op;
	ud->wait.cancel = kv_cancel;
	int rc = lr_pool_submit(lr_state_of(L)->loop, &op->work);
	if (rc) {
		op->pending = 0;
		ud->op = NULL;
		kvop_free(op);
		return lr_pushfail(L, rc, "%s: cannot start a worker: %s", fn, lr_strerror(rc));
	}
	return lr_sched_await(L, &ud->wait, (lua_KContext)ud, kv_k);
}

static int flow_kv_get(lua_State *L)
{
	return kv_start(L, "rig.core.kv_get", KV_GET);
}

static int flow_kv_put(lua_State *L)
{
	return kv_start(L, "rig.core.kv_put", KV_PUT);
}

static int flow_kv_keys(lua_State *L)
{
	return kv_start(L, "rig.core.kv_keys", KV_KEYS);
}

void lr__flow_open(lua_State *L)
{
	luaL_newmetatable(L, KVOP_MT);
	lua_pushcfunction(L, kvud_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	lua_pushcfunction(L, flow_kv_get);
	lua_setfield(L, -2, "kv_get");
	lua_pushcfunction(L, flow_kv_put);
	lua_setfield(L, -2, "kv_put");
	lua_pushcfunction(L, flow_kv_keys);
	lua_setfield(L, -2, "kv_keys");
}
