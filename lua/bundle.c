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
#include <stdlib.h>
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
 * While a bundle runs, every way Lua loads code by name resolves in the
 * verified archive, the embedded rig library or the C modules built into
 * luarig, never on the disk: package.searchers is preload, the bundle and
 * the embedded library (no package.path or package.cpath searcher, both
 * paths empty); loadfile and dofile read the archive; package.loadlib
 * loads nothing. load() of a string the bundle holds is its own code. The
 * closures below share two upvalues: 1 the bundle userdata, 2 the bundle's
 * path as given on the command line, used in chunk names so tracebacks say
 * "app.rig/lib/util.lua:3:".
 */
static struct lr_bundle *up_bundle(lua_State *L, const char **where)
{
	struct lr_bundle **p = lua_touserdata(L, lua_upvalueindex(1));
	*where = lua_tostring(L, lua_upvalueindex(2));
	if (!p || !*p)
		luaL_error(L, "bundle '%s' is closed", *where);
	return *p;
}

/*
 * The searcher. The "rig" namespace belongs to luarig's own library: a
 * bundle cannot shadow it by accident.
 */
static int bundle_searcher(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	const char *where;
	struct lr_bundle *b = up_bundle(L, &where);
	if (strcmp(name, "rig") == 0 || strncmp(name, "rig.", 4) == 0) {
		lua_pushfstring(L, "bundle '%s' does not serve the 'rig' namespace", where);
		return 1;
	}
	const struct lr_bundle_file *f = lr_bundle_module(b, name);
	if (!f) {
		luaL_Buffer path;
		luaL_buffinit(L, &path);
		for (const char *c = name; *c; c++)
			luaL_addchar(&path, *c == '.' ? '/' : *c);
		luaL_pushresult(&path);
		const char *base = lua_tostring(L, -1);
		lua_pushfstring(L, "no module '%s' in bundle '%s' (no %s.lua or %s/init.lua)", name,
				where, base, base);
		return 1;
	}
	lua_pushfstring(L, "@%s/%s", where, f->path);
	if (luaL_loadbufferx(L, (const char *)f->data, f->size, lua_tostring(L, -1), "t") != LUA_OK)
		return luaL_error(L, "error loading module '%s' from bundle '%s':\n\t%s", name,
				  where, lua_tostring(L, -1));
	lua_pushfstring(L, "%s/%s", where, f->path); /* stack: chunkname, loader, file */
	return 2;
}

/* package.preload, as Lua's own first searcher (which cannot be named from C). */
static int searcher_preload(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	lua_getfield(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
	if (lua_getfield(L, -1, name) == LUA_TNIL) {
		lua_pushfstring(L, "no field package.preload['%s']", name);
		return 1;
	}
	lua_pushliteral(L, ":preload:");
	return 2;
}

static const char *skip_dots(const char *p)
{
	while (p[0] == '.' && p[1] == '/')
		p += 2;
	return p;
}

/*
 * The file a name given to loadfile, dofile or rig.bundle.read means:
 * names are relative to the bundle's root ("lib/x.lua" or "./lib/x.lua");
 * the chunk-name prefix "app.rig/" (what debug.getinfo reports as the
 * source) is accepted too. NULL when there is none, with the message
 * pushed and *rc set: -ENOENT, or LR_EREFUSED for a name outside the
 * bundle. The disk is never consulted.
 */

static const struct lr_bundle_file *bundle_file(lua_State *L, const struct lr_bundle *b,
						 const char *where, const char *name, int *rc)
{
	const char *rel = skip_dots(name);
	const struct lr_bundle_file *f = lr_bundle_find(b, rel);
	size_t wn = strlen(where);
	if (!f && strncmp(name, where, wn) == 0 && name[wn] == '/') {
		rel = skip_dots(name + wn + 1);
		f = lr_bundle_find(b, rel);
	}
	if (f)
		return f;
	int outside = rel[0] == '/';
	for (const char *c = rel; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
		if (c[0] == '.' && c[1] == '.' && (c[2] == '/' || c[2] == '\0'))
			outside = 1;
	if (outside) {
		*rc = LR_EREFUSED;
		lua_pushfstring(L, "'%s' is outside bundle '%s': a bundle loads only the files it ships",
				name, where);
	} else {
		*rc = -ENOENT;
		lua_pushfstring(L, "no file '%s' in bundle '%s'", name, where);
	}
	return NULL;
}

/* Pushes the chunk of a bundle file, or the message; returns a lua_load status. */
static int load_file(lua_State *L, const struct lr_bundle *b, const char *where,
		     const char *name, const char *mode)
{
	if (!name) {
		lua_pushfstring(L, "bundle '%s' loads no code from standard input", where);
		return LUA_ERRFILE;
	}
	int rc;
	const struct lr_bundle_file *f = bundle_file(L, b, where, name, &rc);
	if (!f)
		return LUA_ERRFILE;
	lua_pushfstring(L, "@%s/%s", where, f->path);
	int st = luaL_loadbufferx(L, (const char *)f->data, f->size, lua_tostring(L, -1), mode);
	lua_remove(L, -2); /* stack: chunk or message */
	return st;
}

/* loadfile([name [, mode [, env]]]): Lua's contract, the archive's files. */
static int bundle_loadfile(lua_State *L)
{
	const char *where;
	struct lr_bundle *b = up_bundle(L, &where);
	const char *name = luaL_optstring(L, 1, NULL);
	const char *mode = luaL_optstring(L, 2, "t");
	int env = !lua_isnone(L, 3) ? 3 : 0;
	if (load_file(L, b, where, name, mode) != LUA_OK) {
		luaL_pushfail(L);
		lua_insert(L, -2);
		return 2; /* nil, message */
	}
	if (env) {
		lua_pushvalue(L, env);
		if (!lua_setupvalue(L, -2, 1)) /* the chunk's _ENV */
			lua_pop(L, 1);
	}
	return 1;
}

static int dofile_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	(void)ctx;
	return lua_gettop(L) - 1;
}

/* dofile([name]): raises what loadfile would return; yieldable, as Lua's own. */
static int bundle_dofile(lua_State *L)
{
	const char *where;
	struct lr_bundle *b = up_bundle(L, &where);
	const char *name = luaL_optstring(L, 1, NULL);
	lua_settop(L, 1);
	if (load_file(L, b, where, name, "t") != LUA_OK)
		return lua_error(L);
	lua_callk(L, 0, LUA_MULTRET, 0, dofile_k);
	return dofile_k(L, LUA_OK, 0);
}

/* package.loadlib: a bundle ships no native code, and loads none from the disk. */
static int bundle_loadlib(lua_State *L)
{
	const char *where = lua_tostring(L, lua_upvalueindex(2));
	const char *lib = luaL_checkstring(L, 1);
	luaL_checkstring(L, 2);
	luaL_pushfail(L);
	lua_pushfstring(L, "bundle '%s' loads no C library ('%s'): a bundle runs only the code it ships",
			where, lib);
	lua_pushliteral(L, "absent"); /* Lua's code when dynamic libraries are off */
	return 3;
}

/* rig.bundle.read(name) -> the bytes of a file the bundle ships, or nil, message, code. */
static int bundle_read(lua_State *L)
{
	const char *where;
	struct lr_bundle *b = up_bundle(L, &where);
	if (lua_type(L, 1) != LUA_TSTRING)
		return luaL_error(L, "bad argument #1 to 'rig.bundle.read' (string expected, got %s)",
				  luaL_typename(L, 1));
	const char *name = lua_tostring(L, 1);
	int rc;
	const struct lr_bundle_file *f = bundle_file(L, b, where, name, &rc);
	if (!f) {
		luaL_pushfail(L);
		lua_insert(L, -2);
		lua_pushstring(L, lr_errcode(rc));
		return 3;
	}
	lua_pushlstring(L, (const char *)f->data, f->size);
	return 1;
}

/* The manifest as a table: format, name, version, entry, luarig, description, files. */
static void push_manifest(lua_State *L, const struct lr_bundle *b)
{
	lua_createtable(L, 0, 10);
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
}

/*
 * Protected part of run: seals code loading to the bundle (above), sets
 * rig.bundle and pushes the entry module's function. Argument 1 is a light
 * userdata: a struct handoff, whose bundle passes to a userdata here.
 */
struct handoff {
	struct lr_bundle *b;
	int owned; /* set once a userdata owns b */
};

static void push_closure(lua_State *L, lua_CFunction fn)
{
	/* stack: ..., ud, path (at 3 and 2 of run_setup) */
	lua_pushvalue(L, 3);
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, fn, 2);
}

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

	lua_getglobal(L, "package"); /* stack: h, path, ud, package */
	lua_pushliteral(L, "");
	lua_setfield(L, -2, "path");
	lua_pushliteral(L, "");
	lua_setfield(L, -2, "cpath");
	push_closure(L, bundle_loadlib);
	lua_setfield(L, -2, "loadlib");
	lua_getfield(L, -1, "searchers");
	for (lua_Integer i = (lua_Integer)lua_rawlen(L, -1); i >= 1; i--) {
		lua_pushnil(L);
		lua_rawseti(L, -2, i);
	}
	lua_pushcfunction(L, searcher_preload);
	lua_rawseti(L, -2, 1);
	push_closure(L, bundle_searcher);
	lua_rawseti(L, -2, 2);
	lua_pushcfunction(L, lr__searcher_stdlib);
	lua_rawseti(L, -2, 3);
	lua_pop(L, 2);
	push_closure(L, bundle_loadfile);
	lua_setglobal(L, "loadfile");
	push_closure(L, bundle_dofile);
	lua_setglobal(L, "dofile");

	lua_getglobal(L, "rig");
	if (lua_istable(L, -1)) {
		push_manifest(L, b);
		lua_pushvalue(L, 2);
		lua_setfield(L, -2, "path");
		push_closure(L, bundle_read);
		lua_setfield(L, -2, "read");
		lua_setfield(L, -2, "bundle");
	}
	lua_pop(L, 1);

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
	struct lr_err err;
	S->bundle = 1; /* main.c set it before the library loaded; this keeps it */
	if (lr_bundle_load(path, &lim, &b, &err) != 0) {
		fprintf(stderr, "luarig: bundle '%s': %s\n", path, err.msg);
		return 1;
	}
	const char *dev = getenv("LUARIG_PATH");
	if (dev && *dev)
		fprintf(stderr, "luarig: bundle '%s': LUARIG_PATH is ignored; a bundle runs the rig library built into luarig\n",
			path);
	lua_pushcfunction(L, lr_traceback);
	lua_pushcfunction(L, run_setup);
	struct handoff h = { .b = b };
	lua_pushlightuserdata(L, &h);
	lua_pushstring(L, path);
	if (lua_pcall(L, 2, 1, -4) != LUA_OK) {
		if (!h.owned)
			lr_bundle_free(b);
		lr__report_error(S, NULL, lua_tostring(L, -1));
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
			struct lr_err *why)
{
	lua_State **Lp = arg;
	if (!*Lp && !(*Lp = luaL_newstate())) {
		lr_err_set(why, "%s: cannot create a Lua state to compile it", name);
		return -1;
	}
	lua_State *L = *Lp;
	char chunk[4096];
	snprintf(chunk, sizeof chunk, "@%s", name);
	int rc = luaL_loadbufferx(L, data, size, chunk, "t");
	if (rc != LUA_OK)
		lr_err_set(why, "%s", lua_tostring(L, -1));
	lua_settop(L, 0);
	return rc;
}

int lr_bundle_pack(const char *dir, const char *out)
{
	char written[4096];
	struct lr_err err;
	lua_State *cl = NULL;
	int rc = lr_bundle_write(dir, out, LR_VERSION, pack_notice, pack_compile, &cl, written,
				 sizeof written, &err);
	if (cl)
		lua_close(cl);
	if (rc != 0) {
		fprintf(stderr, "luarig: pack '%s': %s\n", dir, err.msg);
		return 1;
	}
	/* Read it back: what we print is what a reader will see. */
	struct lr_bundle_limits lim;
	limits(&lim);
	struct lr_bundle *b;
	if (lr_bundle_load(written, &lim, &b, &err) != 0) {
		fprintf(stderr, "luarig: pack '%s': the written bundle '%s' does not verify: %s\n",
			dir, written, err.msg);
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
	struct lr_err err;
	if (lr_bundle_load(path, &lim, &b, &err) != 0) {
		fprintf(stderr, "luarig: bundle '%s': %s\n", path, err.msg);
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
	struct lr_err err;
	int rc = lr_bundle_load(path, &lim, &b, &err);
	if (rc)
		return lr_pushfail(L, rc, "bundle '%s': %s", path, err.msg);
	/* Anchor b in a userdata first, so an allocation error below cannot leak it. */
	struct lr_bundle **p = lua_newuserdatauv(L, sizeof *p, 0);
	*p = NULL;
	luaL_setmetatable(L, BUNDLE_MT);
	*p = b;
	push_manifest(L, b); /* stack: ud, manifest */
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
