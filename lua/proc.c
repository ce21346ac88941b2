/*
 * proc.c — placeholder until the proc binding lands in this session.
 */
#include "internal.h"

void lr__proc_open(lua_State *L)
{
	(void)L;
}
