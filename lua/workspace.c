/*
 * workspace.c — what rig.workspace (stdlib/rig/workspace.lua) needs below
 * Lua: a named lease on a store (the exclusive root's fence) and a few
 * directory calls for placing and swapping a workspace root.
 *
 *   core.lease_acquire(store, name) -> lease | nil, msg, code ("lease_held", ...)
 *     waits on a worker thread (an LMDB grant commits its epoch);
 *     lease:epoch() -> n, lease:lost() -> boolean, lease:release() -> true
 *     (also on collection and with <close>; use after release raises).
 *     The lease keeps its store open until it is released.
 *   core.ws_realpath(path) -> canonical path | nil, msg, code
 *   core.ws_mkdirs(path) -> true | nil, msg, code      (mkdir -p, mode 0700 for new ones)
 *   core.ws_rename(from, to) -> true | nil, msg, code  (rename(2), then fsync of to's directory)
 *   core.ws_remove_tree(path) -> true | nil, msg, code (never follows a symlink; absent is fine)
 *   core.ws_dir_empty(path) -> boolean | nil, msg, code ("ENOENT" when absent)
 *
 * The directory calls block the loop for as long as the filesystem takes:
 * they run at session creation and restore, never on a turn's path.
 */
#define _XOPEN_SOURCE 700
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../storage/storage.h"

#define LEASE_MT "rig.lease"
#define ACQOP_MT "rig.op.lease_acquire"

struct leaseud {
	struct lr_lease *l; /* first, for lr_checkhandle; NULL once released */
	void *storeref;
};
LR_HANDLE_FIRST(struct leaseud, l);

struct acqop {
	struct lr_work work;
	struct acqud *ud; /* NULL once abandoned */
	int pending;
	struct lr_store *st;
	void *storeref;
	char name[LR_STORE_NAME_MAX + 1];
	struct lr_lease *l;
	int rc;
	struct lr_err e;
};

struct acqud {
	struct lr_wait wait;
	struct acqop *op;
};

static void acqop_free(struct acqop *op)
{
	if (op->l) {
		struct lr_err e;
		lr_store_release(op->l, &e);
	}
	lr__store_unref(op->storeref);
	free(op);
}

static void acq_work(struct lr_work *w)
{
	struct acqop *op = (struct acqop *)w;
	op->e.msg[0] = 0;
	op->rc = lr_store_acquire(op->st, op->name, &op->l, &op->e);
	if (op->rc)
		op->l = NULL;
}

static void acq_done(struct lr_work *w)
{
	struct acqop *op = (struct acqop *)w;
	op->pending = 0;
	if (!op->ud) {
		acqop_free(op); /* abandoned: a granted lease is released again */
		return;
	}
	lr_sched_wake(&op->ud->wait);
}

static void acq_cancel(struct lr_wait *w)
{
	struct acqud *ud = (struct acqud *)w;
	if (ud->op && ud->op->pending) {
		ud->op->ud = NULL;
		ud->op = NULL;
	}
}

static int acqud_gc(lua_State *L)
{
	struct acqud *ud = lua_touserdata(L, 1);
	struct acqop *op = ud->op;
	ud->op = NULL;
	if (op) {
		if (op->pending)
			op->ud = NULL;
		else
			acqop_free(op);
	}
	return 0;
}

static int acq_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct acqud *ud = (struct acqud *)ctx;
	lr_sched_resumed(L, &ud->wait);
	struct acqop *op = ud->op;
	ud->op = NULL;
	if (op->rc) {
		char msg[sizeof op->e.msg];
		int rc = op->rc;
		snprintf(msg, sizeof msg, "%s", op->e.msg[0] ? op->e.msg : lr_strerror(rc));
		acqop_free(op);
		return lr_pushfail(L, rc, "%s", msg);
	}
	/* allocated "released" first, so a raise here leaves nothing half-made */
	struct leaseud *u = lua_newuserdatauv(L, sizeof *u, 0);
	u->l = NULL;
	u->storeref = NULL;
	luaL_setmetatable(L, LEASE_MT);
	u->l = op->l;
	u->storeref = op->storeref;
	free(op);
	return 1;
}

/* core.lease_acquire(store, name) -> lease | nil, msg, code */
static int workspace_lease_acquire(lua_State *L)
{
	struct lr_store *st;
	luaL_checkudata(L, 1, "rig.store");
	size_t n;
	const char *name = luaL_checklstring(L, 2, &n);
	if (n == 0 || n > LR_STORE_NAME_MAX)
		return luaL_error(L, "rig.core.lease_acquire: invalid lease name '%s'", name);
	lr_sched_enter(L);
	struct acqud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
	memset(ud, 0, sizeof *ud);
	luaL_setmetatable(L, ACQOP_MT);
	struct acqop *op = calloc(1, sizeof *op);
	if (!op)
		return luaL_error(L, "rig.core.lease_acquire: out of memory");
	op->storeref = lr__store_ref(L, 1, &st);
	op->st = st;
	memcpy(op->name, name, n + 1);
	op->work.work = acq_work;
	op->work.done = acq_done;
	op->pending = 1;
	op->ud = ud;
	ud->op = op;
	ud->wait.cancel = acq_cancel;
	int rc = lr_pool_submit(lr_state_of(L)->loop, &op->work);
	if (rc) {
		op->pending = 0;
		ud->op = NULL;
		acqop_free(op);
		return lr_pushfail(L, rc, "rig.core.lease_acquire: cannot start a worker: %s",
				   lr_strerror(rc));
	}
	return lr_sched_await(L, &ud->wait, (lua_KContext)ud, acq_k);
}

static struct leaseud *check_lease(lua_State *L)
{
	return lr_checkhandle(L, 1, LEASE_MT);
}

static int lease_release(lua_State *L)
{
	struct leaseud *u = luaL_checkudata(L, 1, LEASE_MT);
	if (u->l) {
		struct lr_err e;
		lr_store_release(u->l, &e);
		u->l = NULL;
		lr__store_unref(u->storeref);
		u->storeref = NULL;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int lease_epoch(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)check_lease(L)->l->epoch);
	return 1;
}

static int lease_lost(lua_State *L)
{
	struct leaseud *u = check_lease(L);
	lua_pushboolean(L, __atomic_load_n(&u->l->lost, __ATOMIC_SEQ_CST) != 0);
	return 1;
}

static int lease_tostring(lua_State *L)
{
	struct leaseud *u = luaL_checkudata(L, 1, LEASE_MT);
	if (u->l)
		lua_pushfstring(L, "rig.lease (%s, epoch %I)", u->l->name, (lua_Integer)u->l->epoch);
	else
		lua_pushliteral(L, "rig.lease (released)");
	return 1;
}

/* ---- directories ---- */

static int workspace_realpath(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char *r = realpath(path, NULL);
	if (!r)
		return lr_pushfail(L, -errno, "'%s': %s", path, strerror(errno));
	lua_pushstring(L, r);
	free(r);
	return 1;
}

static int workspace_mkdirs(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	size_t n = strlen(path);
	if (n == 0 || n >= PATH_MAX)
		return lr_pushfail(L, -ENAMETOOLONG, "'%s': %s", path, strerror(ENAMETOOLONG));
	struct lr_err e;
	int rc = lr_mkdirs(path, 0700, &e);
	if (rc)
		return lr_pushfail(L, rc, "%s", e.msg);
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return lr_pushfail(L, -ENOTDIR, "'%s' is not a directory", path);
	lua_pushboolean(L, 1);
	return 1;
}

static int sync_parent(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) != 0 ? -errno : 0;
	close(fd);
	return rc;
}

static int workspace_rename(lua_State *L)
{
	const char *from = luaL_checkstring(L, 1);
	const char *to = luaL_checkstring(L, 2);
	if (rename(from, to) != 0) {
		int e = errno;
		return lr_pushfail(L, -e, "cannot rename '%s' to '%s': %s", from, to, strerror(e));
	}
	int rc = sync_parent(to);
	if (rc)
		return lr_pushfail(L, rc, "cannot sync the directory of '%s': %s", to, lr_strerror(rc));
	lua_pushboolean(L, 1);
	return 1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	/* a directory we could not read (FTW_DNR) still gets its rmdir tried */
	int rc = (flag == FTW_DP || flag == FTW_DNR) ? rmdir(p) : unlink(p);
	return rc != 0 && errno != ENOENT ? errno : 0;
}

static int workspace_remove_tree(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct stat st;
	if (lstat(path, &st) != 0) {
		if (errno == ENOENT) {
			lua_pushboolean(L, 1);
			return 1;
		}
		return lr_pushfail(L, -errno, "'%s': %s", path, strerror(errno));
	}
	int e = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
	if (e != 0) {
		int err = e > 0 ? e : errno;
		return lr_pushfail(L, -err, "cannot remove '%s': %s", path, strerror(err));
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int workspace_dir_empty(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	DIR *d = opendir(path);
	if (!d)
		return lr_pushfail(L, -errno, "'%s': %s", path, strerror(errno));
	int empty = 1;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			empty = 0;
			break;
		}
	}
	closedir(d);
	lua_pushboolean(L, empty);
	return 1;
}

void lr__workspace_open(lua_State *L)
{
	luaL_newmetatable(L, ACQOP_MT);
	lua_pushcfunction(L, acqud_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg methods[] = {
		{ "release", lease_release },
		{ "epoch", lease_epoch },
		{ "lost", lease_lost },
		{ NULL, NULL },
	};
	luaL_newmetatable(L, LEASE_MT);
	luaL_newlib(L, methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, lease_release);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, lease_release);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, lease_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);

	static const luaL_Reg fns[] = {
		{ "lease_acquire", workspace_lease_acquire },
		{ "ws_realpath", workspace_realpath },
		{ "ws_mkdirs", workspace_mkdirs },
		{ "ws_rename", workspace_rename },
		{ "ws_remove_tree", workspace_remove_tree },
		{ "ws_dir_empty", workspace_dir_empty },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
