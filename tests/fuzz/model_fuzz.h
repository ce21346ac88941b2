/*
 * model_fuzz.h — the harness shared by the model decoder fuzz targets
 * (model_openai_fuzz.c, model_anthropic_fuzz.c, model_responses_fuzz.c,
 * model_gemini_fuzz.c).
 *
 * The input is an HTTP response body: the C framer (host/sse.c) splits it
 * into events exactly as a live stream would, and each event goes to the
 * provider's Lua decoder (stdlib/rig/model/<codec>.lua) and into the
 * accumulator. A decoder must answer every input with chunks or a typed
 * failure (nil, message, code); raising, a malformed chunk, or a final
 * message that cannot be built or encoded aborts.
 */
#include "../../host/host.h"
#include "../../lua/internal.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The library's bundle runner calls into lua/main.c, which a fuzz binary
 * does not link; a decoder never runs bundles, so these are never reached.
 */
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
	"local codec_name, provider = ...\n"
	"local codec = require(codec_name)\n"
	"local accum = require 'rig.model.accum'\n"
	"local json = require 'rig.json'\n"
	"local model = { provider = provider, name = 'fuzz-model', max_tokens = 4096, tools = true,\n"
	"  thinking = true, effort = 'medium', headers = {}, base_url = 'http://127.0.0.1' }\n"
	"local kinds = { text = true, thinking = true, tool_use = true, refusal = true }\n"
	"local reasons = { stop = true, length = true, tool_use = true, content_filter = true, refusal = true }\n"
	"local dec, acc, failed\n"
	"local H = {}\n"
	"function H.begin()\n"
	"  acc, failed = accum.new(), nil\n"
	"  dec = codec.decoder(model, function(c)\n"
	"    assert(type(c) == 'table' and kinds[c.type], 'a chunk of an unknown type')\n"
	"    acc:add(c)\n"
	"  end)\n"
	"end\n"
	"function H.feed(data, ev)\n"
	"  if failed then return end\n"
	"  local ok, msg, code = dec:feed(data, ev)\n"
	"  if not ok then\n"
	"    assert(ok == nil and type(msg) == 'string' and type(code) == 'string', 'an untyped failure')\n"
	"    failed = code\n"
	"  end\n"
	"end\n"
	"function H.finish()\n"
	"  local m = acc:message(dec.finish_reason == 'length')\n"
	"  assert(json.encode(m))\n"
	"  assert(dec.finish_reason == nil or reasons[dec.finish_reason], 'an unknown finish reason')\n"
	"  for k, v in pairs(dec.usage or {}) do\n"
	"    assert(math.type(v) == 'integer' and v >= 0, 'usage ' .. k .. ' is not a count')\n"
	"  end\n"
	"end\n"
	"return H\n";

static lua_State *fuzz_L;
static int fuzz_ok;

static void fuzz_setup(const char *codec, const char *provider)
{
	static struct lr_state S;
	if (lr_state_open(&S, 0, 0))
		abort();
	fuzz_L = S.L;
	luaL_openlibs(fuzz_L);
	lr_searchers_install(fuzz_L);
	if (luaL_loadstring(fuzz_L, HARNESS) != LUA_OK)
		abort();
	lua_pushstring(fuzz_L, codec);
	lua_pushstring(fuzz_L, provider);
	if (lua_pcall(fuzz_L, 2, 1, 0) != LUA_OK) {
		fprintf(stderr, "model fuzz: %s\n", lua_tostring(fuzz_L, -1));
		abort();
	}
	lua_setglobal(fuzz_L, "H");
}

static void fuzz_call(const char *fn, const struct lr_sse_event *ev)
{
	lua_State *L = fuzz_L;
	lua_getglobal(L, "H");
	lua_getfield(L, -1, fn);
	int n = 0;
	if (ev) {
		lua_pushlstring(L, ev->data, ev->data_len);
		lua_pushlstring(L, ev->type, ev->type_len);
		n = 2;
	}
	if (lua_pcall(L, n, 0, 0) != LUA_OK) {
		fprintf(stderr, "model fuzz: H.%s raised: %s\n", fn, lua_tostring(L, -1));
		abort();
	}
	lua_pop(L, 1);
}

static int fuzz_event(void *arg, const struct lr_sse_event *ev)
{
	(void)arg;
	fuzz_call("feed", ev);
	return 0;
}

static void fuzz_run(const char *codec, const char *provider, const uint8_t *data, size_t size)
{
	(void)codec;
	(void)provider;
	fuzz_call("begin", NULL);
	struct lr_sse p;
	lr_sse_init(&p, 1 << 20, 16 << 20);
	if (lr_sse_feed(&p, data, size, fuzz_event, NULL) == 0)
		lr_sse_finish(&p, fuzz_event, NULL);
	lr_sse_release(&p);
	fuzz_call("finish", NULL);
	lua_settop(fuzz_L, 0);
	/* keep memory flat across millions of inputs */
	if (++fuzz_ok % 256 == 0)
		lua_gc(fuzz_L, LUA_GCCOLLECT);
}
