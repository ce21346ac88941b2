/*
 * json_fuzz.c — rig.json's decoder on arbitrary bytes, and the encoder on
 * whatever it accepts.
 *
 * Invariants: json.raw accepts exactly what decode accepts and encodes as
 * the input verbatim; a decoded value encodes (unless it nests deeper than
 * the encoder's 200 levels), and encode(decode(encode(x))) == encode(x),
 * compact and indented alike.
 */
#include "../../lua/internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lua_State *L;

/* Calls rig.core.json_<name> with nargs arguments on top; keeps nret results; 0 or the pcall status. */
static int call(const char *name, int nargs, int nret)
{
	lua_getfield(L, 1, name);
	lua_insert(L, -1 - nargs);
	return lua_pcall(L, nargs, nret, 0);
}

/* encode(value at idx [, indent]) -> pushes the text or nil; aborts on an unexplained failure. */
static void encode(int idx, int indent)
{
	lua_pushvalue(L, idx);
	if (indent) {
		lua_createtable(L, 0, 1);
		lua_pushinteger(L, indent);
		lua_setfield(L, -2, "indent");
	}
	if (call("json_encode", indent ? 2 : 1, 2) != LUA_OK)
		abort();
	if (lua_isnil(L, -2)) {
		const char *msg = lua_tostring(L, -1);
		if (!msg || !strstr(msg, "nesting deeper than 200"))
			abort();
	}
	lua_pop(L, 1); /* stack: ... text|nil */
}

static void same(int a, int b)
{
	size_t la, lb;
	const char *sa = lua_tolstring(L, a, &la), *sb = lua_tolstring(L, b, &lb);
	if (!sa || !sb || la != lb || memcmp(sa, sb, la) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!L) {
		L = luaL_newstate();
		luaL_openlibs(L);
	}
	lua_settop(L, 0);
	lua_newtable(L);
	lr__json_open(L); /* stack: core */

	lua_pushlstring(L, (const char *)data, size);                   /* 2: input */
	lua_pushvalue(L, 2);
	if (call("json_decode", 1, 1) != LUA_OK)                        /* 3: x */
		abort();
	int decoded = !lua_isnil(L, 3);
	lua_pushvalue(L, 2);
	int raw_ok = call("json_raw", 1, 1) == LUA_OK;                  /* 4: raw or message */
	if (raw_ok != decoded)
		abort();
	if (!decoded)
		return 0;
	encode(4, 0);                                                   /* 5: encode(raw) */
	same(2, 5);

	encode(3, 0);                                                   /* 6: e1 */
	if (lua_isnil(L, 6))
		return 0; /* too deep for the encoder */
	lua_pushvalue(L, 6);
	if (call("json_decode", 1, 1) != LUA_OK || lua_isnil(L, 7))     /* 7: y */
		abort();
	encode(7, 0);                                                   /* 8: e2 */
	same(6, 8);

	encode(3, 2);                                                   /* 9: pretty */
	lua_pushvalue(L, 9);
	if (call("json_decode", 1, 1) != LUA_OK || lua_isnil(L, 10))    /* 10 */
		abort();
	encode(10, 0);                                                  /* 11 */
	same(6, 11);
	lua_settop(L, 0);
	return 0;
}
