/*
 * state.c — the lua_State: a capped allocator, the instruction budget and
 * interrupt hook, the traceback handler, module searchers for the embedded
 * standard library, and the one status-to-Lua conversion.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lua-cjson.h>
extern int luaopen_cjson_safe(lua_State *L);

/* Headroom granted once a kill latched, so that unwinding and reporting can allocate. */
#define KILL_SLACK (1u << 20)
#define HOOK_COUNT 1000

/*
 * Small blocks. Lua allocates and frees a great many small objects (a
 * streamed model reply makes about ten per chunk: tables, their parts,
 * strings, closures) and always tells the allocator a block's size, so
 * blocks up to POOL_MAX bytes come from per-size free lists carved from
 * 64 KiB slabs: a pop or a push instead of malloc's bins (a third of the
 * instructions of decoding a chunk went to malloc and free). POOL_MAX
 * covers a provider's SSE event as a Lua string (st:batch: ~300 bytes of
 * data and the string's header, one per event, dead by the next batch);
 * at 256 each went through malloc and the collector's free. The state is
 * used by one thread. Freed blocks stay in their lists until the state
 * closes. Sanitizer builds keep plain malloc so that ASan sees every block.
 */
#define POOL_STEP 16
#define POOL_MAX 512
#define POOL_CLASSES (POOL_MAX / POOL_STEP)
#define SLAB_SIZE ((size_t)64 << 10)

struct lr_pool {
	void *free[POOL_CLASSES];
	char *cur, *end;  /* the unused rest of the newest slab */
	void *slabs;      /* each slab's first 16 bytes link to the previous one */
};

#if defined(__SANITIZE_ADDRESS__)
#define POOL_ON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ON 0
#endif
#endif
#ifndef POOL_ON
#define POOL_ON 1
#endif

static inline size_t pool_class(size_t n)
{
	return (n - 1) / POOL_STEP;
}

static void *pool_alloc(struct lr_pool *P, size_t n)
{
	size_t c = pool_class(n);
	void *p = P->free[c];
	if (p) {
		void *next = *(void **)p;
		P->free[c] = next;
		if (next)
			__builtin_prefetch(next, 1, 3);
		return p;
	}
	size_t size = (c + 1) * POOL_STEP;
	if ((size_t)(P->end - P->cur) < size) {
		char *slab = malloc(SLAB_SIZE);
		if (!slab)
			return NULL;
		*(void **)slab = P->slabs;
		P->slabs = slab;
		P->cur = slab + POOL_STEP;
		P->end = slab + SLAB_SIZE;
	}
	p = P->cur;
	P->cur += size;
	return p;
}

static inline void pool_free(struct lr_pool *P, void *p, size_t n)
{
	size_t c = pool_class(n);
	*(void **)p = P->free[c];
	P->free[c] = p;
}

static void pool_release(struct lr_pool *P)
{
	if (!P)
		return;
	for (void *s = P->slabs; s;) {
		void *next = *(void **)s;
		free(s);
		s = next;
	}
	free(P);
}

/*
 * The allocator. With a cap, a request that would pass it fails and
 * latches a kill: Lua raises "not enough memory" at once, and the hook
 * re-raises at every later instruction so that pcall cannot swallow it.
 */
static void *state_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct lr_state *S = ud;
	struct lr_pool *P = S->pool;
	if (!ptr)
		osize = 0;
	if (nsize == 0) {
		if (P && ptr && osize <= POOL_MAX)
			pool_free(P, ptr, osize);
		else
			free(ptr);
		S->mem_used -= osize;
		return NULL;
	}
	if (S->mem_max && nsize > osize) {
		size_t limit = S->killed ? S->mem_max + KILL_SLACK : S->mem_max;
		if (S->mem_used + (nsize - osize) > limit) {
			if (!S->killed)
				lr_state_kill(S, "memory cap exceeded");
			return NULL;
		}
	}
	void *p;
	if (!P) {
		p = realloc(ptr, nsize);
	} else if (!ptr) {
		p = nsize <= POOL_MAX ? pool_alloc(P, nsize) : malloc(nsize);
	} else if (osize > POOL_MAX && nsize > POOL_MAX) {
		p = realloc(ptr, nsize);
	} else if (osize <= POOL_MAX && nsize <= POOL_MAX && pool_class(osize) == pool_class(nsize)) {
		p = ptr;
	} else {
		p = nsize <= POOL_MAX ? pool_alloc(P, nsize) : malloc(nsize);
		if (p) {
			memcpy(p, ptr, osize < nsize ? osize : nsize);
			if (osize <= POOL_MAX)
				pool_free(P, ptr, osize);
			else
				free(ptr);
		}
	}
	if (!p)
		return NULL;
	S->mem_used = S->mem_used - osize + nsize;
	return p;
}

static void state_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	struct lr_state *S = lr_state_of(L);
	if (S->killed) {
		lua_sethook(L, state_hook, LUA_MASKCOUNT, 1);
		luaL_error(L, "%s", S->kill_msg);
	}
	if (S->interrupt) {
		S->interrupt = 0;
		S->interrupt_armed = 0;
		lua_sethook(L, S->instr_max ? state_hook : NULL,
			    S->instr_max ? LUA_MASKCOUNT : 0, S->hook_count);
		/*
		 * A shutdown signal cancels every task; the one running Lua right
		 * now is cancelled here, so it ends "cancelled" like the others
		 * (never an unhandled "interrupted" error with a traceback).
		 */
		struct lr_task *t = S->interrupt_cancels ? lr_sched_current(L) : NULL;
		if (t) {
			lr_task_cancel(t);
			luaL_error(L, "cancelled");
		}
		luaL_error(L, "interrupted");
	}
	if (S->instr_max) {
		S->instr_used += (uint64_t)S->hook_count;
		if (S->instr_used > S->instr_max) {
			lr_state_kill(S, "instruction budget exceeded");
			lua_sethook(L, state_hook, LUA_MASKCOUNT, 1);
			luaL_error(L, "%s", S->kill_msg);
		}
	}
}

void lr_state_kill(struct lr_state *S, const char *msg)
{
	if (S->killed)
		return;
	S->kill_msg = msg;
	S->killed = 1;
	lua_State *run = S->running;
	if (run)
		lua_sethook(run, state_hook, LUA_MASKCOUNT, 1);
	lua_sethook(S->L, state_hook, LUA_MASKCOUNT, 1);
	if (S->loop)
		lr_loop_stop(S->loop);
}

/* Safe inside a signal handler: lua_sethook is documented as such. */
void lr_state_interrupt(struct lr_state *S)
{
	lua_State *run = S->running;
	if (!run)
		return;
	S->interrupt = 1;
	S->interrupt_armed = 1;
	lua_sethook(run, state_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

void lr_closer_add(struct lr_state *S, struct lr_closer *c)
{
	c->prev = NULL;
	c->next = S->closers;
	if (S->closers)
		S->closers->prev = c;
	S->closers = c;
}

void lr_closer_remove(struct lr_state *S, struct lr_closer *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else if (S->closers == c)
		S->closers = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

void lr_state_shutdown(struct lr_state *S)
{
	lr_sched_cancel_all(S);
	while (S->closers) {
		struct lr_closer *c = S->closers;
		lr_closer_remove(S, c);
		c->close(c);
	}
}

int lr_traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);
	if (!msg) {
		if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
			return 1;
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	}
	struct lr_state *S = lr_state_of(L);
	if (S->killed && S->kill_msg)
		msg = S->kill_msg;
	luaL_traceback(L, L, msg, 1);
	return 1;
}

/* 1 when msg (an error message) starts at a line of the rig library (rig.repl says the same). */
static int error_is_internal(const char *msg)
{
	if (!msg)
		return 0;
	if (strncmp(msg, "stdlib/rig/", 11) == 0)
		return 1; /* an embedded module's chunk name */
	const char *dir = getenv("LUARIG_PATH");
	size_t n = dir ? strlen(dir) : 0;
	while (n > 1 && dir[n - 1] == '/')
		n--;
	return n > 0 && strncmp(msg, dir, n) == 0 && strncmp(msg + n, "/rig/", 5) == 0;
}

void lr__report_error(struct lr_state *S, const char *lead, const char *msg)
{
	if (!msg)
		msg = "(no message)";
	const char *tb = strstr(msg, "\nstack traceback:\n");
	size_t n = strlen(msg);
	if (tb && !(S && S->debug) && !error_is_internal(msg))
		n = (size_t)(tb - msg);
	fprintf(stderr, "luarig: %s%.*s\n", lead ? lead : "", (int)n, msg);
}

int lr_pushfail(lua_State *L, int rc, const char *fmt, ...)
{
	luaL_pushfail(L);
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		lua_pushvfstring(L, fmt, ap);
		va_end(ap);
	} else {
		lua_pushstring(L, lr_strerror(rc));
	}
	lua_pushstring(L, lr_errcode(rc));
	return 3;
}

void *lr_checkhandle(lua_State *L, int idx, const char *tname)
{
	void **p = luaL_checkudata(L, idx, tname);
	if (!*p)
		luaL_error(L, "attempt to use a closed %s", tname);
	return p;
}

int lr_load_file(lua_State *L, const char *path)
{
	if (strcmp(path, "-") == 0)
		path = NULL;
	int rc = luaL_loadfilex(L, path, "t");
	if (rc != LUA_OK)
		return rc;
	return LUA_OK;
}

static const struct lr_embedded *embedded_find(const char *name)
{
	for (size_t i = 0; i < lr_stdlib_count; i++) {
		const struct lr_embedded *e = &lr_stdlib[i];
		size_t n = strlen(e->path);
		/* the console's files are embedded too; they are not modules */
		if (n > 4 && strcmp(e->path + n - 4, ".lua") == 0 && strcmp(e->name, name) == 0)
			return e;
	}
	return NULL;
}

/* With LUARIG_PATH set, rig and rig.* come from that directory first. */
static int search_disk(lua_State *L, const char *dir, const char *name)
{
	if (strcmp(name, "rig") != 0 && strncmp(name, "rig.", 4) != 0)
		return 0;
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	luaL_addstring(&b, dir);
	luaL_addchar(&b, '/');
	for (const char *c = name; *c; c++)
		luaL_addchar(&b, *c == '.' ? '/' : *c);
	luaL_pushresult(&b); /* stack: base */
	const char *base = lua_tostring(L, -1);
	const char *file = lua_pushfstring(L, strcmp(name, "rig") == 0 ? "%s/init.lua" : "%s.lua", base);
	FILE *f = fopen(file, "r");
	if (!f) {
		lua_pop(L, 1);
		file = lua_pushfstring(L, "%s/init.lua", base);
		f = fopen(file, "r");
	}
	if (!f) {
		lua_pop(L, 2);
		return 0;
	}
	fclose(f);
	lua_remove(L, -2); /* stack: file */
	if (luaL_loadfilex(L, file, "t") != LUA_OK)
		return luaL_error(L, "error loading module '%s' from '%s':\n\t%s", name, file,
				  lua_tostring(L, -1));
	lua_insert(L, -2); /* stack: loader, file */
	return 2;
}

const char *lr__stdlib_dir(lua_State *L)
{
	if (lr_state_of(L)->bundle)
		return NULL;
	const char *dir = getenv("LUARIG_PATH");
	return dir && *dir ? dir : NULL;
}

/*
 * The embedded standard library. With LUARIG_PATH set (the stdlib/ folder
 * of a checkout), modules are read from there first, so the library can be
 * edited without rebuilding; not while a bundle runs (lr__stdlib_dir).
 */
int lr__searcher_stdlib(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	const char *dir = lr__stdlib_dir(L);
	if (dir) {
		int n = search_disk(L, dir, name);
		if (n)
			return n;
	}
	const struct lr_embedded *e = embedded_find(name);
	if (!e) {
		lua_pushfstring(L, "no embedded module '%s'", name);
		return 1;
	}
	lua_pushfstring(L, "@%s", e->path);
	if (luaL_loadbufferx(L, (const char *)e->data, e->len, lua_tostring(L, -1), "t") != LUA_OK)
		return luaL_error(L, "error loading embedded module '%s':\n\t%s", name,
				  lua_tostring(L, -1));
	lua_pushstring(L, e->path);
	return 2;
}

void lr_searchers_install(lua_State *L)
{
	/* stack: */
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "searchers");
	/* Insert at position 2, after the preload searcher. */
	int n = (int)lua_rawlen(L, -1);
	for (int i = n; i >= 2; i--) {
		lua_rawgeti(L, -1, i);
		lua_rawseti(L, -2, i + 1);
	}
	lua_pushcfunction(L, lr__searcher_stdlib);
	lua_rawseti(L, -2, 2);
	lua_pop(L, 1);

	lua_getfield(L, -1, "preload"); /* stack: package preload */
	lua_pushcfunction(L, luaopen_rig_core);
	lua_setfield(L, -2, "rig.core");
	lua_pushcfunction(L, luaopen_cjson);
	lua_setfield(L, -2, "cjson");
	lua_pushcfunction(L, luaopen_cjson_safe);
	lua_setfield(L, -2, "cjson.safe");
	lua_pop(L, 2);
}

static void state_warn(void *ud, const char *msg, int tocont)
{
	(void)ud;
	static int cont;
	if (!cont && msg[0] == '@')
		return; /* control messages */
	fprintf(stderr, "%s%s", cont ? "" : "luarig: warning: ", msg);
	cont = tocont;
	if (!tocont)
		fputc('\n', stderr);
}

int lr_state_open(struct lr_state *S, size_t mem_max, uint64_t instr_max)
{
	int rc = lr_loop_new(&S->loop);
	if (rc)
		return rc;
	S->mem_max = mem_max;
	S->instr_max = instr_max;
	S->pool = POOL_ON ? calloc(1, sizeof *S->pool) : NULL;
	S->hook_count = HOOK_COUNT;
	S->L = lua_newstate(state_alloc, S);
	if (!S->L) {
		pool_release(S->pool);
		S->pool = NULL;
		lr_loop_free(S->loop);
		S->loop = NULL;
		return -ENOMEM;
	}
	*(struct lr_state **)lua_getextraspace(S->L) = S;
	lua_setwarnf(S->L, state_warn, S);
	if (instr_max)
		lua_sethook(S->L, state_hook, LUA_MASKCOUNT, S->hook_count);
	rc = lr_sched_open(S);
	if (rc) {
		lr_state_close(S);
		return rc;
	}
	return 0;
}

void lr_state_close(struct lr_state *S)
{
	if (S->L) {
		lua_close(S->L);
		S->L = NULL;
	}
	pool_release(S->pool);
	S->pool = NULL;
	lr_sched_close(S);
	lr_loop_free(S->loop);
	S->loop = NULL;
}
