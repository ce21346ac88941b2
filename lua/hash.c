/*
 * hash.c — hashing for the Lua library.
 *
 *   core.sha256_hex(s) -> 64 lower-case hex digits
 *
 * Uses the built-in SHA-256 (util/sha256.c), never libcrypto: definitions
 * (rig.loop revisions, rig fingerprints) are hashed at start-up, where
 * opening libcrypto would cost more than the hashing itself.
 */
#include "internal.h"

static int hash_sha256_hex(lua_State *L)
{
	size_t n;
	const char *s = luaL_checklstring(L, 1, &n);
	unsigned char d[LR_SHA256_LEN];
	char hex[2 * LR_SHA256_LEN + 1];
	lr_sha256_builtin(s, n, d);
	lr_hex(d, sizeof d, hex);
	lua_pushlstring(L, hex, 2 * LR_SHA256_LEN);
	return 1;
}

void lr__hash_open(lua_State *L)
{
	lua_pushcfunction(L, hash_sha256_hex);
	lua_setfield(L, -2, "sha256_hex");
}
