/*
 * serve_body_fuzz.c — rig.serve's request parsing (stdlib/rig/serve_req.lua,
 * over rig.json's C decoder) on arbitrary bytes: every request body kind
 * and the sequence-number parser behind Last-Event-ID, ?from and ?limit.
 *
 * Invariants: nothing raises; a refusal is nil, "invalid_json" or
 * "invalid_request", and a message; an accepted input is a string or a
 * non-empty list of text blocks and image/document blocks that name no
 * path and carry no raw data; an accepted upload is an image or document
 * with base64; an accepted gate answer is one of the three actions, an
 * accepted answer to a question (an MCP server's) one of its three with a
 * table or no content; an accepted integer is in range and spelled as given.
 */
#include "../../lua/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lua_State *L;

static const char check[] =
	"local req, bytes = ...\n"
	"for _, kind in ipairs({ 'create', 'input', 'gate', 'answer', 'media' }) do\n"
	"  local v, code, msg = req.body(kind, bytes)\n"
	"  if v == nil then\n"
	"    assert(code == 'invalid_json' or code == 'invalid_request', 'bad code')\n"
	"    assert(type(msg) == 'string' and #msg > 0, 'no message')\n"
	"  elseif kind == 'media' then\n"
	"    assert((v.type == 'image' or v.type == 'document') and type(v.base64) == 'string')\n"
	"  elseif kind == 'gate' then\n"
	"    assert(v.action == 'approve' or v.action == 'approve_always' or v.action == 'deny')\n"
	"  elseif kind == 'answer' then\n"
	"    assert(v.action == 'accept' or v.action == 'decline' or v.action == 'cancel')\n"
	"    assert(v.content == nil or type(v.content) == 'table')\n"
	"  else\n"
	"    local m = v.message\n"
	"    assert(m ~= nil or kind == 'create', 'input without a message')\n"
	"    if type(m) == 'table' then\n"
	"      assert(#m > 0)\n"
	"      for _, b in ipairs(m) do\n"
	"        if b.type == 'image' or b.type == 'document' then\n"
	"          assert(b.path == nil and b.data == nil, 'a path or raw data from outside')\n"
	"          for k, x in pairs(b) do assert(k == 'size' or type(x) == 'string') end\n"
	"        else assert(b.type == 'text' and type(b.text) == 'string') end\n"
	"      end\n"
	"    else\n"
	"      assert(m == nil or type(m) == 'string')\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local n = req.integer(bytes, 1, 1000)\n"
	"if n then assert(math.type(n) == 'integer' and n >= 1 and n <= 1000 and tostring(n) == bytes:gsub('^0+', '')) end\n"
	"n = req.integer(bytes, 0, math.maxinteger)\n"
	"if n then assert(n >= 0 and bytes:find('^%d+$')) end\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!L) {
		L = luaL_newstate();
		luaL_openlibs(L);
		/* rig.json needs only the codec of rig.core; the two modules come embedded */
		lua_getglobal(L, "package");
		lua_getfield(L, -1, "loaded");
		lua_newtable(L);
		lr__json_open(L);
		lua_setfield(L, -2, "rig.core");
		lua_getfield(L, -2, "preload"); /* stack: package loaded preload */
		for (size_t i = 0; i < lr_stdlib_count; i++) {
			const struct lr_embedded *e = &lr_stdlib[i];
			if (strcmp(e->name, "rig.json") && strcmp(e->name, "rig.serve_req"))
				continue;
			if (luaL_loadbufferx(L, (const char *)e->data, e->len, e->name, "t") != LUA_OK)
				abort();
			lua_setfield(L, -2, e->name);
		}
		lua_pop(L, 3);
	}
	lua_settop(L, 0);
	if (luaL_loadbufferx(L, check, sizeof check - 1, "=serve_body_fuzz", "t") != LUA_OK)
		abort();
	lua_getglobal(L, "require");
	lua_pushliteral(L, "rig.serve_req");
	if (lua_pcall(L, 1, 1, 0) != LUA_OK)
		abort();
	lua_pushlstring(L, (const char *)data, size);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		abort();
	}
	return 0;
}
