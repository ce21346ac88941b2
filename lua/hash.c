/*
 * hash.c — hashing for the Lua library.
 *
 *   core.sha256_hex(s) -> 64 lower-case hex digits
 *   core.base64_encode(s) -> standard base64 (RFC 4648 §4, padded)
 *   core.base64_decode(s) -> bytes | nil, message: strict (the standard
 *     alphabet, padding required, no whitespace), for media from outside
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

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int hash_base64_encode(lua_State *L)
{
	size_t n;
	const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
	if (n > ((size_t)-1 / 4) * 3 - 3)
		return luaL_error(L, "core.base64_encode: input too long");
	size_t m = (n + 2) / 3 * 4;
	luaL_Buffer b;
	char *o = luaL_buffinitsize(L, &b, m);
	size_t j = 0;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)s[i] << 16;
		if (i + 1 < n)
			v |= (unsigned)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		o[j++] = B64[(v >> 18) & 63];
		o[j++] = B64[(v >> 12) & 63];
		o[j++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
		o[j++] = i + 2 < n ? B64[v & 63] : '=';
	}
	luaL_pushresultsize(&b, m);
	return 1;
}

static int b64_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

static int hash_base64_decode(lua_State *L)
{
	size_t n;
	const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
	if (n % 4 != 0) {
		luaL_pushfail(L);
		lua_pushfstring(L, "base64: length %d is not a multiple of 4", (int)(n > 0x7fffffff ? -1 : (int)n));
		return 2;
	}
	size_t m = n / 4 * 3;
	luaL_Buffer b;
	char *o = luaL_buffinitsize(L, &b, m ? m : 1);
	size_t j = 0;
	for (size_t i = 0; i < n; i += 4) {
		int last = i + 4 == n;
		int v[4];
		for (int k = 0; k < 4; k++) {
			v[k] = b64_val(s[i + k]);
			if (v[k] < 0 && !(last && k >= 2 && s[i + k] == '=' && (k == 3 || s[i + 3] == '='))) {
				luaL_pushfail(L);
				lua_pushfstring(L, "base64: bad byte at offset %d", (int)(i + k));
				return 2;
			}
		}
		unsigned w = ((unsigned)v[0] << 18) | ((unsigned)v[1] << 12);
		o[j++] = (char)((w >> 16) & 255);
		if (v[2] >= 0) {
			w |= (unsigned)v[2] << 6;
			o[j++] = (char)((w >> 8) & 255);
			if (v[3] >= 0) {
				w |= (unsigned)v[3];
				o[j++] = (char)(w & 255);
			}
		}
	}
	luaL_pushresultsize(&b, j);
	return 1;
}

void lr__hash_open(lua_State *L)
{
	lua_pushcfunction(L, hash_base64_encode);
	lua_setfield(L, -2, "base64_encode");
	lua_pushcfunction(L, hash_base64_decode);
	lua_setfield(L, -2, "base64_decode");
	lua_pushcfunction(L, hash_sha256_hex);
	lua_setfield(L, -2, "sha256_hex");
}
