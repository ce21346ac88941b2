/*
 * core.c — the bound module rig.core: one table holding every C function
 * the Lua library builds on. Each binding file contributes its part.
 */
#include "internal.h"

int luaopen_rig_core(lua_State *L)
{
	lua_newtable(L);
	lua_pushliteral(L, LR_VERSION);
	lua_setfield(L, -2, "version");
	lr__sched_open(L);
	lr__http_open(L);
	lr__server_open(L);
	lr__proc_open(L);
	lr__bundle_open(L);
	lr__store_open(L);
	lr__json_open(L);
	lr__executor_open(L);
	lr__sandbox_open(L);
	lr__hash_open(L);
	lr__fs_open(L);
	lr__session_open(L);
	lr__workspace_open(L);
	lr__flow_open(L);
	lr__term_open(L);
	lr__mcp_open(L);
	return 1;
}
