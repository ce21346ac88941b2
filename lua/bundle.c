/*
 * bundle.c — `luarig pack`, `luarig inspect` and `luarig run FILE.rig`, and
 * rig.core.bundle_read. The archive work (reading, verifying, writing) is
 * host/bundle.c; this file turns a verified bundle into a package searcher
 * that serves modules from memory, and runs the entry module as the main
 * task.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define BUNDLE_MT "rig.bundle"

static void limits(struct lr_bundle_limits *lim)
{
	lr_bundle_limits_default(lim);
	lim->version = LR_VERSION;
}

/* The bundle as a full userdata, so the searcher's upvalue owns it. */
static int bundle_gc(lua_State *L)
{
	struct lr_bundle **p = luaL_checkudata(L, 1, BUNDLE_MT);
	lr_bundle_free(*p);
	*p = NULL;
	return 0;
}

/*
 * The searcher: upvalue 1 is the bundle userdata, upvalue 2 the bundle's
 * path as given on the command line, used in chunk names so tracebacks say
 * "app.rig/lib/util.lua:3:". The "rig" namespace belongs to luarig's own
 * library: a bundle cannot shadow it by accident.
 */
static int bundle_searcher(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	struct lr_bundle **p = lua_touserdata(L, lua_upvalueindex(1));
	const char *where = lua_tostring(L, lua_upvalueindex(2));
	if (!p || !*p)
		return luaL_error(L, "bundle '%s' is closed", where);
	if (strcmp(name, "rig") == 0 || strncmp(name, "rig.", 4) == 0) {
		lua_pushfstring(L, "bundle '%s' does not serve the 'rig' namespace", where);
		return 1;
	}
	const struct lr_bundle_file *f = lr_bundle_module(*p, name);
	if (!f) {
		lua_pushfstring(L, "no module '%s' in bundle '%s'", name, where);
		return 1;
	}
	lua_pushfstring(L, "@%s/%s", where, f->path);
	if (luaL_loadbufferx(L, (const char *)f->data, f->size, lua_tostring(L, -1), "t") != LUA_OK)
		return luaL_error(L, "error loading module '%s' from bundle '%s':\n\t%s", name,
				  where, lua_tostring(L, -1));
	lua_pushfstring(L, "%s/%s", where, f->path); /* stack: chunkname, loader, file */
	return 2;
}

/*
 * Protected part of run: installs the searcher at position 2 (after
 * preload) and pushes the entry module's function. Argument 1 is a light
 * userdata: a struct handoff, whose bundle passes to a userdata here.
 */
struct handoff {
	struct lr_bundle *b;
	int owned; /* set once a userdata owns b */
};

static int run_setup(lua_State *L)
{
	struct handoff *h = lua_touserdata(L, 1);
	struct lr_bundle *b = h->b;
	const char *path = lua_tostring(L, 2);
	struct lr_bundle **p = lua_newuserdatauv(L, sizeof *p, 0);
	*p = NULL;
	if (luaL_newmetatable(L, BUNDLE_MT)) {
		lua_pushcfunction(L, bundle_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_setmetatable(L, -2);
	*p = b; /* from here the userdata owns the bundle */
	h->owned = 1;
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "searchers"); /* stack: b, path, ud, package, searchers */
	int n = (int)lua_rawlen(L, -1);
	for (int i = n; i >= 2; i--) {
		lua_rawgeti(L, -1, i);
		lua_rawseti(L, -2, i + 1);
	}
	lua_pushvalue(L, 3);
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, bundle_searcher, 2);
	lua_rawseti(L, -2, 2);
	lua_pop(L, 2);

	const struct lr_bundle_file *f = lr_bundle_module(b, b->entry);
	if (!f) /* verified by the reader; kept for safety */
		return luaL_error(L, "bundle '%s': entry module '%s' is missing", path, b->entry);
	lua_pushfstring(L, "@%s/%s", path, f->path);
	if (luaL_loadbufferx(L, (const char *)f->data, f->size, lua_tostring(L, -1), "t") != LUA_OK)
		return lua_error(L);
	return 1;
}

int lr_bundle_run(struct lr_state *S, const char *path, int argc, char **argv)
{
	lua_State *L = S->L;
	struct lr_bundle_limits lim;
	limits(&lim);
	struct lr_bundle *b;
	char err[1024];
	if (lr_bundle_load(path, &lim, &b, err, sizeof err) != 0) {
		fprintf(stderr, "luarig: bundle '%s': %s\n", path, err);
		return 1;
	}
	lua_pushcfunction(L, lr_traceback);
	lua_pushcfunction(L, run_setup);
	struct handoff h = { .b = b };
	lua_pushlightuserdata(L, &h);
	lua_pushstring(L, path);
	if (lua_pcall(L, 2, 1, -4) != LUA_OK) {
		if (!h.owned)
			lr_bundle_free(b);
		fprintf(stderr, "luarig: %s\n", lua_tostring(L, -1));
		lua_pop(L, 2);
		return 1;
	}
	lua_remove(L, -2); /* stack: entry function */
	lr_set_arg(L, path, argc, argv);
	luaL_checkstack(L, argc + 1, "too many arguments");
	for (int i = 0; i < argc; i++)
		lua_pushstring(L, argv[i]);
	return lr_main_task(S, argc);
}

static void pack_notice(void *arg, const char *msg)
{
	(void)arg; /* the compiler's state, see pack_compile */
	fprintf(stderr, "luarig: %s\n", msg);
}

/*
 * Compiles one Lua file of the packed tree in a bare state of its own (the
 * parser needs no library): arg points to that state, made on first use.
 */
static int pack_compile(void *arg, const char *name, const void *data, size_t size,
			char *msg, size_t msglen)
{
	lua_State **Lp = arg;
	if (!*Lp && !(*Lp = luaL_newstate())) {
		snprintf(msg, msglen, "%s: cannot create a Lua state to compile it", name);
		return -1;
	}
	lua_State *L = *Lp;
	char chunk[4096];
	snprintf(chunk, sizeof chunk, "@%s", name);
	int rc = luaL_loadbufferx(L, data, size, chunk, "t");
	if (rc != LUA_OK)
		snprintf(msg, msglen, "%s", lua_tostring(L, -1));
	lua_settop(L, 0);
	return rc;
}

int lr_bundle_pack(const char *dir, const char *out)
{
	char written[4096], err[1024];
	lua_State *cl = NULL;
	int rc = lr_bundle_write(dir, out, LR_VERSION, pack_notice, pack_compile, &cl, written,
				 sizeof written, err, sizeof err);
	if (cl)
		lua_close(cl);
	if (rc != 0) {
		fprintf(stderr, "luarig: pack '%s': %s\n", dir, err);
		return 1;
	}
	/* Read it back: what we print is what a reader will see. */
	struct lr_bundle_limits lim;
	limits(&lim);
	struct lr_bundle *b;
	if (lr_bundle_load(written, &lim, &b, err, sizeof err) != 0) {
		fprintf(stderr, "luarig: pack '%s': the written bundle '%s' does not verify: %s\n",
			dir, written, err);
		return 1;
	}
	printf("packed '%s': %s %s, entry '%s', %zu file%s\n", written, b->name, b->version,
	       b->entry, b->nfiles, b->nfiles == 1 ? "" : "s");
	lr_bundle_free(b);
	return 0;
}

int lr_bundle_inspect(const char *path)
{
	struct lr_bundle_limits lim;
	limits(&lim);
	struct lr_bundle *b;
	char err[1024];
	if (lr_bundle_load(path, &lim, &b, err, sizeof err) != 0) {
		fprintf(stderr, "luarig: bundle '%s': %s\n", path, err);
		return 1;
	}
	printf("bundle: %s\n", path);
	printf("name: %s\n", b->name);
	printf("version: %s\n", b->version);
	printf("entry: %s\n", b->entry);
	if (b->description)
		printf("description: %s\n", b->description);
	printf("luarig: %s\n", b->luarig);
	printf("format: %d\n", b->format);
	printf("files:\n");
	size_t total = 0;
	for (size_t i = 0; i < b->nfiles; i++) {
		printf("  %s  %8zu  %s\n", b->files[i].sha256, b->files[i].size, b->files[i].path);
		total += b->files[i].size;
	}
	printf("verified: %zu file%s, %zu bytes, all hashes match\n", b->nfiles,
	       b->nfiles == 1 ? "" : "s", total);
	lr_bundle_free(b);
	return 0;
}

/*
 * rig.core.bundle_read(path) -> manifest table, or nil, message, code.
 * Reads and verifies the whole bundle (synchronously: bundles are capped
 * at 64 MiB and this is meant for tools and tests, not hot paths).
 */
static int core_bundle_read(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct lr_bundle_limits lim;
	limits(&lim);
	struct lr_bundle *b;
	char err[1024];
	int rc = lr_bundle_load(path, &lim, &b, err, sizeof err);
	if (rc)
		return lr_pushfail(L, rc, "bundle '%s': %s", path, err);
	/* Anchor b in a userdata first, so an allocation error below cannot leak it. */
	struct lr_bundle **p = lua_newuserdatauv(L, sizeof *p, 0);
	*p = NULL;
	luaL_setmetatable(L, BUNDLE_MT);
	*p = b;
	lua_createtable(L, 0, 8); /* stack: ud, manifest */
	lua_pushinteger(L, b->format);
	lua_setfield(L, -2, "format");
	lua_pushstring(L, b->name);
	lua_setfield(L, -2, "name");
	lua_pushstring(L, b->version);
	lua_setfield(L, -2, "version");
	lua_pushstring(L, b->entry);
	lua_setfield(L, -2, "entry");
	lua_pushstring(L, b->luarig);
	lua_setfield(L, -2, "luarig");
	if (b->description) {
		lua_pushstring(L, b->description);
		lua_setfield(L, -2, "description");
	}
	lua_createtable(L, (int)b->nfiles, 0);
	for (size_t i = 0; i < b->nfiles; i++) {
		lua_createtable(L, 0, 3);
		lua_pushstring(L, b->files[i].path);
		lua_setfield(L, -2, "path");
		lua_pushinteger(L, (lua_Integer)b->files[i].size);
		lua_setfield(L, -2, "size");
		lua_pushstring(L, b->files[i].sha256);
		lua_setfield(L, -2, "sha256");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "files");
	lr_bundle_free(b);
	*p = NULL;
	return 1;
}

void lr__bundle_open(lua_State *L)
{
	/* stack: core */
	if (luaL_newmetatable(L, BUNDLE_MT)) {
		lua_pushcfunction(L, bundle_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_pop(L, 1);
	lua_pushcfunction(L, core_bundle_read);
	lua_setfield(L, -2, "bundle_read");
}
