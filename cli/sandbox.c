/*
 * sandbox.c — `luarig sandbox …` from the shell. Plain C over
 * sandbox/: no Lua state is opened.
 *
 *   luarig sandbox check   the machine's tier and, for the default
 *                          sandboxed profile on the current directory, one
 *                          line per guarantee: enforced and how, or missing
 *                          and why. Exit 0 on tier A or B, 1 on none.
 *
 * Exit codes: 0 ok, 1 the work failed ("luarig: message"), 2 usage.
 */
#include "cli.h"

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

static const struct lr_cli sandbox_cli = { NULL, "luarig: try 'luarig sandbox help'\n",
					     LR_CLI_USAGE, LR_CLI_FAILED };

static int cmd_check(void)
{
	char cwd[PATH_MAX];
	struct lr_err err = { "" };
	if (!getcwd(cwd, sizeof cwd)) {
		return lr_cli_fail(&sandbox_cli, "no current directory: %s", strerror(errno));
	}
	struct lr_profile p;
	lr_profile_init(&p);
	p.workspace_root = cwd;
	const struct lr_sbx_caps *c = lr_sbx_probe_fresh();
	struct lr_sbx_report r;
	int rc = lr_sbx_report(&p, c, &r, &err);
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
		printf("refused: %s\n", err.msg);
	if (fflush(stdout) != 0) {
		return lr_cli_fail(&sandbox_cli, "cannot write to standard output");
	}
	return c->tier == LR_TIER_NONE ? 1 : 0;
}

int lr_sandbox_cli(int argc, char **argv)
{
	if (argc < 1)
		return lr_cli_usage(&sandbox_cli, "%s", "sandbox needs a command (check)");
	const char *sub = argv[0];
	if (strcmp(sub, "help") == 0 || strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (strcmp(sub, "check") == 0) {
		if (argc > 1)
			return lr_cli_usage(&sandbox_cli, "unexpected argument '%s'", argv[1]);
		return cmd_check();
	}
	return lr_cli_usage(&sandbox_cli, "unknown sandbox command '%s'", sub);
}
