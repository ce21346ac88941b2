/*
 * bundle.c — placeholder until the bundle binding lands in this session.
 */
#include "internal.h"

void lr__bundle_open(lua_State *L)
{
	(void)L;
}

int lr_bundle_run(struct lr_state *S, const char *path, int argc, char **argv)
{
	(void)S; (void)path; (void)argc; (void)argv;
	return -1;
}

int lr_bundle_pack(const char *dir, const char *out)
{
	(void)dir; (void)out;
	return -1;
}

int lr_bundle_inspect(const char *path)
{
	(void)path;
	return -1;
}
