/*
 * repl.c — placeholder until the REPL lands in this session.
 */
#include "internal.h"

int lr_repl_run(struct lr_state *S, const char *script)
{
	(void)S; (void)script;
	return -1;
}
