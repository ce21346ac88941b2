/*
 * snapshot.c — `luarig snapshot …`: workspace snapshots from the shell,
 * on the LMDB store under the state root (--state DIR, default
 * $XDG_STATE_HOME/luarig, else ~/.local/state/luarig) or on NATS
 * JetStream (--store nats://HOST:PORT). Plain C over storage/: no Lua
 * state is opened.
 *
 * Exit codes: 0 ok, 1 the work failed ("luarig: message"), 2 usage.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../storage/storage.h"

static const char usage_text[] =
	"usage: luarig snapshot [--state DIR | --store URL] capture DIR\n"
	"       luarig snapshot [--state DIR | --store URL] restore REF DIR\n"
	"       luarig snapshot [--state DIR | --store URL] rewind REF DIR\n"
	"       luarig snapshot [--state DIR | --store URL] diff A B\n"
	"       luarig snapshot [--state DIR | --store URL] export REF FILE.tar\n"
	"       luarig snapshot [--state DIR | --store URL] import FILE.tar\n"
	"       luarig snapshot [--state DIR | --store URL] list\n";

static const struct lr_cli snapshot_cli = { NULL, "luarig: try 'luarig snapshot help'\n",
					      LR_CLI_USAGE, LR_CLI_FAILED };

/* A path printed on one line: quoted with C escapes when it has odd bytes (as git does). */
static void print_path(FILE *f, const char *p)
{
	int plain = 1;
	for (const unsigned char *c = (const unsigned char *)p; *c; c++)
		if (*c < 0x20 || *c == 0x7f || *c == '"' || *c == '\\')
			plain = 0;
	if (plain) {
		fputs(p, f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)p; *c; c++) {
		if (*c == '\n')
			fputs("\\n", f);
		else if (*c == '\t')
			fputs("\\t", f);
		else if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(f, "\\%03o", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

static int cmd_diff(struct lr_snap *sn, const char *a, const char *b)
{
	struct lr_snap_diff d;
	struct lr_err e;
	if (lr_snap_diff(sn, a, b, &d, &e))
		return lr_cli_fail(&snapshot_cli, "%s", e.msg);
	/* One sorted listing: merge the three sorted lists by path. */
	size_t i = 0, j = 0, k = 0;
	for (;;) {
		const char *best = NULL;
		char tag = 0;
		if (i < d.nadded)
			best = d.added[i], tag = 'A';
		if (j < d.nremoved && (!best || strcmp(d.removed[j], best) < 0))
			best = d.removed[j], tag = 'D';
		if (k < d.nmodified && (!best || strcmp(d.modified[k], best) < 0))
			best = d.modified[k], tag = 'M';
		if (!best)
			break;
		if (tag == 'A')
			i++;
		else if (tag == 'D')
			j++;
		else
			k++;
		printf("%c ", tag);
		print_path(stdout, best);
		putchar('\n');
	}
	lr_snap_diff_release(&d);
	return 0;
}

static int cmd_list(struct lr_snap *sn)
{
	struct lr_snap_info *v;
	size_t n;
	struct lr_err e;
	if (lr_snap_list(sn, &v, &n, &e))
		return lr_cli_fail(&snapshot_cli, "%s", e.msg);
	for (size_t i = 0; i < n; i++) {
		time_t t = (time_t)v[i].time;
		struct tm tm;
		char when[32];
		gmtime_r(&t, &tm);
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
		printf("%s  %s  %llu files  %llu bytes\n", v[i].ref, when,
		       (unsigned long long)v[i].files, (unsigned long long)v[i].bytes);
	}
	free(v);
	return 0;
}

static int run(struct lr_snap *sn, const char *sub, char **args)
{
	struct lr_err e;
	e.msg[0] = 0;
	if (strcmp(sub, "capture") == 0) {
		struct lr_snap_result r;
		int rc = lr_snap_capture(sn, args[0], &r, &e);
		for (size_t i = 0; !rc && i < r.nskipped; i++) {
			fprintf(stderr, "luarig: notice: skipped %s '", r.skipped[i].reason);
			print_path(stderr, r.skipped[i].path);
			fputs("'\n", stderr);
		}
		if (!rc)
			printf("%s\n", r.ref);
		lr_snap_result_release(&r);
		return rc ? lr_cli_fail(&snapshot_cli, "%s", e.msg) : 0;
	}
	if (strcmp(sub, "restore") == 0)
		return lr_snap_restore(sn, args[0], args[1], &e) ? lr_cli_fail(&snapshot_cli, "%s", e.msg)
								  : 0;
	if (strcmp(sub, "rewind") == 0) {
		struct lr_snap_rewind_stats st;
		if (lr_snap_rewind(sn, args[0], args[1], &st, &e))
			return lr_cli_fail(&snapshot_cli, "%s", e.msg);
		printf("written %llu, removed %llu\n", (unsigned long long)st.written,
		       (unsigned long long)st.removed);
		return 0;
	}
	if (strcmp(sub, "diff") == 0)
		return cmd_diff(sn, args[0], args[1]);
	if (strcmp(sub, "export") == 0)
		return lr_snap_export(sn, args[0], args[1], &e) ? lr_cli_fail(&snapshot_cli, "%s", e.msg) : 0;
	if (strcmp(sub, "import") == 0) {
		char ref[LR_SNAP_REF_MAX];
		if (lr_snap_import(sn, args[0], ref, &e))
			return lr_cli_fail(&snapshot_cli, "%s", e.msg);
		printf("%s\n", ref);
		return 0;
	}
	return cmd_list(sn);
}

int lr_snapshot_cli(int argc, char **argv)
{
	static const struct {
		const char *name;
		int nargs;
	} subs[] = { { "capture", 1 }, { "restore", 2 }, { "rewind", 2 }, { "diff", 2 },
		     { "export", 2 }, { "import", 1 }, { "list", 0 } };
	const char *state = NULL, *store = NULL, *sub = NULL;
	char *args[2] = { NULL, NULL };
	int nargs = 0, want = -1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--state") == 0) {
			if (++i == argc)
				return lr_cli_usage(&snapshot_cli, "'%s' needs a directory", "--state");
			state = argv[i];
		} else if (strncmp(a, "--state=", 8) == 0) {
			state = a + 8;
		} else if (strcmp(a, "--store") == 0) {
			if (++i == argc)
				return lr_cli_usage(&snapshot_cli, "'%s' needs a url (nats://HOST:PORT)", "--store");
			store = argv[i];
		} else if (strncmp(a, "--store=", 8) == 0) {
			store = a + 8;
		} else if (!sub && (strcmp(a, "help") == 0 || strcmp(a, "--help") == 0 ||
				    strcmp(a, "-h") == 0)) {
			fputs(usage_text, stdout);
			return 0;
		} else if (a[0] == '-' && a[1] && !(sub && nargs < want)) {
			return lr_cli_usage(&snapshot_cli, "unknown option '%s'", a);
		} else if (!sub) {
			for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++)
				if (strcmp(a, subs[k].name) == 0)
					want = subs[k].nargs;
			if (want < 0)
				return lr_cli_usage(&snapshot_cli, "unknown snapshot command '%s'", a);
			sub = a;
		} else if (nargs < want) {
			args[nargs++] = argv[i];
		} else {
			return lr_cli_usage(&snapshot_cli, "unexpected argument '%s'", a);
		}
	}
	if (!sub)
		return lr_cli_usage(&snapshot_cli, "%s",
				    "snapshot needs a command (capture, restore, rewind, diff, "
				    "export, import, list)");
	if (nargs != want)
		return lr_cli_usage(&snapshot_cli, "snapshot %s needs %d argument%s", sub, want,
				    want == 1 ? "" : "s");

	if (state && store)
		return lr_cli_usage(&snapshot_cli, "%s", "give one of '--state' and '--store'");
	if (store && strncmp(store, "nats://", 7) != 0)
		return lr_cli_usage(&snapshot_cli, "%s", "'--store' needs a url (nats://HOST:PORT)");
	char cache[PATH_MAX + 16];
	struct lr_store *s;
	struct lr_snap *sn;
	struct lr_err e;
	/* only capture and import write a store; the others read one that exists */
	int writes = strcmp(sub, "capture") == 0 || strcmp(sub, "import") == 0;
	if (lr_cli_store_open(state, store, writes, &s, cache, sizeof cache))
		return LR_CLI_FAILED;
	/* Many puts in flight let the LMDB writer commit them in few transactions. */
	struct lr_snap_opts so = { .cache_dir = cache[0] ? cache : NULL, .threads = 32 };
	if (lr_snap_new(s, &so, &sn, &e)) {
		lr_store_close(s);
		return lr_cli_fail(&snapshot_cli, "%s", e.msg);
	}
	int code = run(sn, sub, args);
	lr_snap_free(sn);
	lr_store_close(s);
	if (fflush(stdout) != 0 && code == 0)
		code = lr_cli_fail(&snapshot_cli, "%s", "cannot write to standard output");
	return code;
}
