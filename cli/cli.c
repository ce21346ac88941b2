/*
 * cli.c — what every command of cli/ shares: its messages and exit
 * statuses, and the store it opens.
 */
#include "cli.h"

#include "../storage/storage.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const struct lr_cli lr_cli_plain = { NULL, NULL, LR_CLI_USAGE, LR_CLI_FAILED };

static void vsay(const struct lr_cli *c, const char *fmt, va_list ap)
{
	fputs("luarig: ", stderr);
	if (c->prefix)
		fputs(c->prefix, stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int lr_cli_usage(const struct lr_cli *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(c, fmt, ap);
	va_end(ap);
	if (c->after)
		fputs(c->after, stderr);
	return c->usage_status;
}

int lr_cli_fail(const struct lr_cli *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(c, fmt, ap);
	va_end(ap);
	return c->fail_status;
}

int lr_cli_state_root(const char *opt, char *out, size_t cap)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	if (opt)
		snprintf(out, cap, "%s", opt);
	else if (xdg && xdg[0] == '/')
		snprintf(out, cap, "%s/luarig", xdg);
	else if (home && home[0] == '/')
		snprintf(out, cap, "%s/.local/state/luarig", home);
	else
		return -1;
	if (out[0] != '/') {
		char cwd[PATH_MAX], rel[PATH_MAX];
		snprintf(rel, sizeof rel, "%s", out);
		if (!getcwd(cwd, sizeof cwd))
			return -1;
		if (snprintf(out, cap, "%s/%s", cwd, rel) >= (int)cap)
			return -1;
	}
	return 0;
}

int lr_cli_store_open(const char *state, const char *url, int create, struct lr_store **out,
		      char *cache, size_t cap)
{
	struct lr_err e;
	if (url) {
		struct lr_nats_opts no = { .url = url };
		if (cache && cap)
			cache[0] = 0;
		/* the message names the URL with any credentials redacted */
		if (lr_store_nats_open(&no, out, &e) != 0)
			return lr_cli_fail(&lr_cli_plain, "%s", e.msg);
		return 0;
	}
	char root[PATH_MAX];
	if (lr_cli_state_root(state, root, sizeof root))
		return lr_cli_fail(&lr_cli_plain, "no state directory: pass --state DIR or --store "
				   "URL, or set XDG_STATE_HOME or HOME");
	if (create) {
		int rc = lr_mkdirs(root, 0700, NULL);
		if (rc) {
			return lr_cli_fail(&lr_cli_plain, "cannot create state directory '%s': %s",
					   root, lr_strerror(rc));
		}
	} else {
		/*
		 * A read never creates state: opening LMDB would make the root and an
		 * empty store in it, so a typo in --state would print "no sessions".
		 */
		char data[PATH_MAX + 16];
		struct stat st;
		snprintf(data, sizeof data, "%s/data.mdb", root);
		if (stat(data, &st) != 0) {
			return lr_cli_fail(&lr_cli_plain, "no store at '%s'%s", root,
					   state ? ""
						 : " (nothing has been saved there yet; --state DIR names another)");
		}
	}
	if (cache && cap)
		snprintf(cache, cap, "%s/statcache", root);
	struct lr_lmdb_opts o = { .root = root };
	if (lr_store_lmdb_open(&o, out, &e) != 0)
		return lr_cli_fail(&lr_cli_plain, "%s", e.msg);
	return 0;
}
