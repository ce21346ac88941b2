/*
 * server.c — placeholder until the server binding lands in this session.
 */
#include "internal.h"

void lr__server_open(lua_State *L)
{
	(void)L;
}
