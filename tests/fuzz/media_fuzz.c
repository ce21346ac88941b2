/*
 * media_fuzz.c — arbitrary bytes as media from outside: through the strict
 * base64 decoder (serve's JSON blocks) and rig.media's checks of bytes,
 * base64 and a declared type. Each must answer with a block or nil and a
 * message, never raise; a decoded input encodes back to itself, and a block
 * that passes has an allowed type and a size within its limit.
 */
#include "../../host/host.h"
#include "../../lua/internal.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* lua/main.c is not linked into a fuzz binary; the media code never runs bundles. */
void lr_set_arg(lua_State *L, const char *script, int argc, char **argv)
{
	(void)L, (void)script, (void)argc, (void)argv;
	abort();
}

int lr_main_task(struct lr_state *S, int nargs)
{
	(void)S, (void)nargs;
	abort();
}

static const char HARNESS[] =
	"local core = require 'rig.core'\n"
	"local media = require 'rig.media'\n"
	"local ALLOWED = { ['image/png'] = 'image', ['image/jpeg'] = 'image', ['image/webp'] = 'image',\n"
	"  ['image/gif'] = 'image', ['application/pdf'] = 'document', ['text/plain'] = 'document' }\n"
	"local function check(spec)\n"
	"  local b, err = media.check(spec, 'fuzz')\n"
	"  if b == nil then assert(type(err) == 'string', 'an untyped failure') return end\n"
	"  assert(ALLOWED[b.media_type] == b.type, 'a block of a type it does not take')\n"
	"  if b.data then\n"
	"    local cap = b.type == 'image' and media.LIMITS.image or (b.media_type == 'text/plain'\n"
	"      and media.LIMITS.text or media.LIMITS.document)\n"
	"    assert(b.size == #b.data and b.size > 0 and b.size <= cap, 'a size out of bounds')\n"
	"  end\n"
	"end\n"
	"return function(s)\n"
	"  local d, err = core.base64_decode(s)\n"
	"  if d then assert(core.base64_encode(d) == s, 'base64 does not round-trip') else\n"
	"    assert(type(err) == 'string') end\n"
	"  assert(core.base64_decode(core.base64_encode(s)) == s, 'encode then decode differs')\n"
	"  check({ type = 'image', data = s })\n"
	"  check({ type = 'document', data = s })\n"
	"  check({ type = 'document', data = s, media_type = 'text/plain' })\n"
	"  check({ type = 'image', base64 = s })\n"
	"  check({ type = 'image', url = s })\n"
	"  check({ type = 'document', blob = s, media_type = 'application/pdf' })\n"
	"end\n";

static lua_State *fuzz_L;
static int fuzz_n;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_L) {
		static struct lr_state S;
		if (lr_state_open(&S, 0, 0))
			abort();
		fuzz_L = S.L;
		luaL_openlibs(fuzz_L);
		lr_searchers_install(fuzz_L);
		if (luaL_loadstring(fuzz_L, HARNESS) != LUA_OK || lua_pcall(fuzz_L, 0, 1, 0) != LUA_OK) {
			fprintf(stderr, "media fuzz: %s\n", lua_tostring(fuzz_L, -1));
			abort();
		}
		lua_setglobal(fuzz_L, "CHECK");
	}
	lua_getglobal(fuzz_L, "CHECK");
	lua_pushlstring(fuzz_L, (const char *)data, size);
	if (lua_pcall(fuzz_L, 1, 0, 0) != LUA_OK) {
		fprintf(stderr, "media fuzz: %s\n", lua_tostring(fuzz_L, -1));
		abort();
	}
	if (++fuzz_n % 256 == 0)
		lua_gc(fuzz_L, LUA_GCCOLLECT);
	return 0;
}
