/*
 * http.c — placeholder until the http binding lands in this session.
 */
#include "internal.h"

void lr__http_open(lua_State *L)
{
	(void)L;
}
