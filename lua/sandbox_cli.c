/*
 * sandbox_cli.c — `luarig sandbox …` from the shell. Plain C over
 * sandbox/: no Lua state is opened.
 *
 *   luarig sandbox check   the machine's tier and, for the default
 *                          sandboxed profile on the current directory, one
 *                          line per guarantee: enforced and how, or missing
 *                          and why. Exit 0 on tier A or B, 1 on none.
 *
 * Exit codes: 0 ok, 1 the work failed ("luarig: message"), 2 usage.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../sandbox/sandbox.h"

static const char usage_text[] =
	"usage: luarig sandbox check   the tier and guarantees of this machine for the\n"
	"                              default sandboxed profile on the current directory\n"
	"       luarig sandbox run [--profile readonly|trusted|unconfined] [--workspace DIR]\n"
	"                [--allow-net HOST:PORT]... [--timeout S] [--protect NAME]... [--git-readonly]\n"
	"                [--ack-unconfined] -- CMD ARGS...\n"
	"                              one command, confined (see 'luarig help')\n";

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("luarig: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nluarig: try 'luarig sandbox help'\n", stderr);
	return 2;
}

static int cmd_check(void)
{
	char cwd[PATH_MAX], err[LR_SBX_ERRLEN] = "";
	if (!getcwd(cwd, sizeof cwd)) {
		fprintf(stderr, "luarig: no current directory: %s\n", strerror(errno));
		return 1;
	}
	struct lr_profile p;
	lr_profile_init(&p);
	p.workspace_root = cwd;
	const struct lr_sbx_caps *c = lr_sbx_probe_fresh();
	struct lr_sbx_report r;
	int rc = lr_sbx_report(&p, c, &r, err);
	printf("tier: %s\n", c->tier == LR_TIER_A ? "A" : c->tier == LR_TIER_B ? "B" : "none");
	for (int g = 0; g < LR_G_COUNT; g++)
		printf("%-17s %-9s %s\n", lr_guarantee_name((enum lr_guarantee)g),
		       r.enforced[g] ? "enforced" : "missing", r.enforced[g] ? r.how[g] : r.missing[g]);
	printf("protected names: %s (and in every repository: the git files that run code)\n",
	       r.protected_names);
	printf("landlock: %s%d\n", c->landlock_abi ? "ABI " : "none ", c->landlock_abi);
	printf("cgroup: %s\n", c->cgroup_note);
	if (c->why[0])
		printf("why: %s\n", c->why);
	if (rc)
		printf("refused: %s\n", err);
	if (fflush(stdout) != 0) {
		fputs("luarig: cannot write to standard output\n", stderr);
		return 1;
	}
	return c->tier == LR_TIER_NONE ? 1 : 0;
}

int lr_sandbox_cli(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("%s", "sandbox needs a command (check)");
	const char *sub = argv[0];
	if (strcmp(sub, "help") == 0 || strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (strcmp(sub, "check") == 0) {
		if (argc > 1)
			return usage_error("unexpected argument '%s'", argv[1]);
		return cmd_check();
	}
	return usage_error("unknown sandbox command '%s'", sub);
}
