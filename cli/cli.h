/*
 * cli.h — the commands of `luarig` that run no Lua: `snapshot`,
 * `sessions` / `show` / `log`, `sandbox check`, `sandbox run`. Plain C
 * over storage/, sandbox/ and host/; lua/main.c dispatches to them.
 *
 * cli/ sits above host/ and below lua/: it may include util/, storage/,
 * sandbox/ and host/, and never a Lua header.
 *
 * Every command reports the same way (docs/cli.md): a message on stderr as
 * "luarig: MESSAGE", and an exit status of 0 (ok), 1 (the work failed) or
 * 2 (usage); `sandbox run` keeps its own (125 when luarig itself failed,
 * usage included), since the command's own status is its exit status.
 */
#ifndef LR_CLI_H
#define LR_CLI_H

#include <stddef.h>

struct lr_store;

/* The commands: argv after the command's name; each returns the exit status. */
int lr_snapshot_cli(int argc, char **argv);
/* cmd: "sessions", "show" or "log". */
int lr_session_cli(const char *cmd, int argc, char **argv);
int lr_sandbox_cli(int argc, char **argv);
/* argv after "sandbox run". */
int lr_sandbox_run_cli(int argc, char **argv);

enum { LR_CLI_OK = 0, LR_CLI_FAILED = 1, LR_CLI_USAGE = 2 };

/*
 * How one command reports. prefix follows "luarig: " in every message
 * ("sandbox run: ", or NULL); after is printed after a usage error's
 * message (a hint such as "luarig: try 'luarig help'\n", or the whole
 * usage text; NULL: nothing); usage_status and fail_status are the exit
 * statuses (LR_CLI_USAGE and LR_CLI_FAILED for every command but one).
 */
struct lr_cli {
	const char *prefix;
	const char *after;
	int usage_status;
	int fail_status;
};
/* The plain form: no prefix, no text after a usage error, statuses 2 and 1. */
extern const struct lr_cli lr_cli_plain;

/* "luarig: [prefix]MESSAGE\n" and c->after on stderr; returns c->usage_status. */
int lr_cli_usage(const struct lr_cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* "luarig: [prefix]MESSAGE\n" on stderr; returns c->fail_status. */
int lr_cli_fail(const struct lr_cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The state root: opt, else $XDG_STATE_HOME/luarig, else ~/.local/state/luarig
   (made absolute). 0, or -1 when there is none. */
int lr_cli_state_root(const char *opt, char *out, size_t cap);
/*
 * The store a command works on: NATS at url when given, else LMDB under
 * the state root (state or its default; created first when create, else
 * it must hold a store already: a read never creates one). cache (cap
 * bytes, or NULL) receives the snapshot stat-cache directory ("" for
 * NATS). 0, or the message printed (lr_cli_fail) and 1.
 */
int lr_cli_store_open(const char *state, const char *url, int create, struct lr_store **out,
		      char *cache, size_t cap);

#endif
