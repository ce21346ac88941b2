/*
 * main.c — the luarig executable: argument parsing, the main task, exit
 * codes (0 ok, 1 the script or the work failed, 2 usage) and signals.
 * docs/cli.md and share/man/man1/luarig.1 document every command, option,
 * variable and status here: change them together.
 */
#include "internal.h"
#include "../sandbox/sandbox.h"
#include "../cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct lr_state *g_state;

static void usage(FILE *f)
{
	fputs("usage: luarig [OPTIONS] SCRIPT [ARGS...]   run a Lua script\n"
	      "       luarig [OPTIONS] -e CHUNK [ARGS...]  run a chunk of Lua\n"
	      "       luarig [OPTIONS] run SCRIPT|BUNDLE [ARGS...]\n"
	      "       luarig [OPTIONS] repl [SCRIPT]       the interactive prompt\n"
	      "       luarig pack DIR [-o FILE.rig]        package a directory as a bundle\n"
	      "       luarig inspect FILE.rig              print and verify a bundle's manifest\n"
	      "       luarig snapshot [--state DIR] capture DIR | restore REF DIR | rewind REF DIR\n"
	      "                | diff A B | export REF FILE.tar | import FILE.tar | list\n"
	      "                                            workspace snapshots (state default\n"
	      "                                            $XDG_STATE_HOME/luarig)\n"
	      "       luarig serve RIG.lua [--listen HOST:PORT] [--auth-token-file FILE]\n"
	      "                [--insecure-public-bind] [--allow-host NAME]...\n"
	      "                                            serve the rig's sessions over HTTP\n"
	      "                                            (listen default 127.0.0.1:8080)\n"
	      "       luarig mcp serve RIG.lua [--http HOST:PORT] [--auth-token-file FILE]\n"
	      "                [--insecure-public-bind] [--allow-host NAME]... [--name NAME]\n"
	      "                                            the rig as an MCP server: its primer\n"
	      "                                            loops as tools (stdio by default)\n"
	      "       luarig sessions [--state DIR] [--json]  the session catalog\n"
	      "       luarig show [--state DIR] ID         one session's catalog entry and tip\n"
	      "       luarig log [--state DIR] ID [--from N] [--follow]\n"
	      "                                            a session's journal, one JSON per line\n"
	      "       luarig flow runs|show ID|log ID [--state DIR] [--json]\n"
	      "                                            workflow runs (rig.flow); flow dot|mermaid\n"
	      "                                            FLOW.lua renders a graph\n"
	      "       luarig sandbox run [--profile readonly|trusted|unconfined] [--workspace DIR]\n"
	      "                [--allow-net HOST:PORT]... [--timeout S] [--protect NAME]... [--git-readonly]\n"
	      "                [--ack-unconfined] -- CMD ARGS...\n"
	      "                                            run one command confined (exit: the\n"
	      "                                            command's; 124 timeout, 125 luarig failed,\n"
	      "                                            126 no confinement, 127 not found)\n"
	      "       luarig sandbox check                 this machine's confinement tier and\n"
	      "                                            guarantees\n"
	      "       luarig version | --version | -V\n"
	      "       luarig help | --help | -h\n"
	      "\n"
	      "With no arguments, luarig starts the REPL on a terminal and runs\n"
	      "standard input as a script otherwise. ID: a session id or the start of\n"
	      "one no other session shares. Reads (sessions, show, log, snapshot list...)\n"
	      "never create a store.\n"
	      "\n"
	      "options:\n"
	      "  --max-memory SIZE        cap Lua memory (bytes; K, M, G suffixes)\n"
	      "  --max-instructions N     cap executed Lua instructions\n"
	      "  --debug                  print every error with its Lua traceback\n"
	      "\n"
	      "environment:\n"
	      "  LUARIG_PATH              load the rig library from this directory\n"
	      "                           (stdlib/ of a checkout) instead of the binary;\n"
	      "                           ignored while a bundle runs\n"
	      "  LUARIG_DEBUG=1           as --debug\n"
	      "  XDG_STATE_HOME, HOME     the state root: $XDG_STATE_HOME/luarig, else\n"
	      "                           ~/.local/state/luarig\n"
	      "\n"
	      "exit: 0 ok, 1 the script or the work failed, 2 usage, 128+N after signal N.\n"
	      "More in luarig(1): man luarig.\n",
	      f);
}

/* A usage error: "luarig: MESSAGE" and the hint, exit 2 (cli/cli.h). */
static const struct lr_cli main_cli = { NULL, "luarig: try 'luarig help'\n", LR_CLI_USAGE,
					LR_CLI_FAILED };

static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	unsigned long long mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v == 0 || v > (unsigned long long)SIZE_MAX / mul)
		return -1;
	*out = (size_t)(v * mul);
	return 0;
}

static int state_init(lua_State *L)
{
	luaL_openlibs(L);
	lr_searchers_install(L);
	lua_getglobal(L, "require");
	lua_pushliteral(L, "rig");
	lua_call(L, 1, 1);
	lua_setglobal(L, "rig");
	return 0;
}

int lr_state_prepare(struct lr_state *S)
{
	lua_State *L = S->L;
	lua_pushcfunction(L, lr_traceback);
	lua_pushcfunction(L, state_init);
	if (lua_pcall(L, 0, 0, -2) != LUA_OK) {
		lr__report_error(S, NULL, lua_tostring(L, -1));
		lua_pop(L, 2);
		return -1;
	}
	lua_pop(L, 1);
	return 0;
}

void lr_set_arg(lua_State *L, const char *script, int argc, char **argv)
{
	lua_createtable(L, argc, 1);
	lua_pushstring(L, script);
	lua_rawseti(L, -2, 0);
	for (int i = 0; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setglobal(L, "arg");
}

static const char *signal_name(int signo)
{
	return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "a signal";
}

/* The one line a shutdown by signal prints (once), instead of any task's error. */
static void say_interrupted(struct lr_state *S, int signo)
{
	static int said;
	if (said || S->repl)
		return;
	said = 1;
	fprintf(stderr, "luarig: interrupted by %s\n", signal_name(signo));
}

static void on_shutdown_signal(int signo, void *arg)
{
	struct lr_state *S = arg;
	if (S->exit_signal)
		_exit(128 + signo); /* a second signal: stop now */
	S->exit_signal = signo;
	if (lr__server_take_signal(signo))
		return; /* a server shuts down gracefully (rig.serve) */
	say_interrupted(S, signo);
	lr_state_shutdown(S);
}

static void async_signal_hook(int signo)
{
	(void)signo;
	struct lr_state *S = g_state;
	if (S && !S->repl && !lr__server_graceful()) {
		S->pending_signal = signo;
		S->interrupt_cancels = 1;
		lr_state_interrupt(S);
	}
}

/* Protected: stack: f a1..an -> task. */
static int main_spawn(lua_State *L)
{
	lr_sched_spawn(L, lua_gettop(L) - 1);
	return 1;
}

int lr_main_task(struct lr_state *S, int nargs)
{
	lua_State *L = S->L;
	g_state = S;
	lr_loop_set_async_signal_hook(async_signal_hook);
	lr_loop_on_signal(S->loop, SIGINT, on_shutdown_signal, S);
	lr_loop_on_signal(S->loop, SIGTERM, on_shutdown_signal, S);

	/* Making the task allocates: protected, as everything Lua does here. */
	luaL_checkstack(L, 1, NULL); /* callers leave room: no error */
	lua_pushcfunction(L, main_spawn);
	lua_insert(L, -2 - nargs);
	if (lua_pcall(L, nargs + 1, 1, 0) != LUA_OK) {
		fprintf(stderr, "luarig: %s\n", lua_tostring(L, -1));
		lua_pop(L, 1);
		return 1;
	}
	struct lr_task *t = lua_touserdata(L, -1);
	/* stack: task (kept on the main stack, so it stays reachable) */
	int rc = lr_loop_run(S->loop);
	int code = 0;
	if (S->killed) {
		fprintf(stderr, "luarig: %s\n", S->kill_msg);
		if (lr_task_done(t)) {
			lr_task_push_error(L, t); /* reported just above */
			lua_pop(L, 1);
		}
		code = 1;
	} else if (rc == -EDEADLK) {
		fprintf(stderr, "luarig: tasks are waiting but nothing can wake them\n");
		code = 1;
	} else {
		switch (lr_task_outcome(t)) {
		case 0:
			break;
		case 1:
			lr_task_push_error(L, t);
			lr__report_error(S, NULL, lua_tostring(L, -1));
			lua_pop(L, 1);
			code = 1;
			break;
		default:
			lr_task_push_error(L, t);
			lua_pop(L, 1);
			if (!S->exit_signal && !S->pending_signal)
				fprintf(stderr, "luarig: the main task was cancelled\n");
			code = 1;
			break;
		}
	}
	lua_pop(L, 1);
	if (!S->exit_signal && S->pending_signal) {
		/* The run ended before the loop handled the signal (it cancelled the last task). */
		say_interrupted(S, S->pending_signal);
		S->exit_signal = S->pending_signal;
	}
	if (S->exit_signal)
		code = 128 + S->exit_signal;
	if (!S->killed) {
		/* Unretrieved task errors are reported when their task is collected. */
		lua_gc(L, LUA_GCCOLLECT);
	}
	if (S->unhandled && code == 0)
		code = 1;
	return code;
}

struct script {
	const char *script, *chunk;
	int argc;
	char **argv;
};

/* Protected (it allocates): stack: -> the chunk and its arguments. */
static int script_load(lua_State *L)
{
	struct script *a = lua_touserdata(L, 1);
	lua_pop(L, 1);
	int rc;
	if (a->chunk) {
		rc = luaL_loadbufferx(L, a->chunk, strlen(a->chunk), "=(command line)", "t");
		lr_set_arg(L, "-e", a->argc, a->argv);
	} else {
		rc = lr_load_file(L, a->script);
		lr_set_arg(L, a->script, a->argc, a->argv);
	}
	if (rc != LUA_OK)
		return lua_error(L);
	luaL_checkstack(L, a->argc + 2, "too many arguments");
	for (int i = 0; i < a->argc; i++)
		lua_pushstring(L, a->argv[i]);
	return a->argc + 1;
}

/* Runs a script file, "-" for standard input, or a chunk string. */
static int run_script(struct lr_state *S, const char *script, const char *chunk,
		      int argc, char **argv)
{
	lua_State *L = S->L;
	struct script a = { script, chunk, argc, argv };
	lua_pushcfunction(L, script_load);
	lua_pushlightuserdata(L, &a);
	if (lua_pcall(L, 1, LUA_MULTRET, 0) != LUA_OK) {
		fprintf(stderr, "luarig: %s\n", lua_tostring(L, -1));
		lua_pop(L, 1);
		return 1;
	}
	return lr_main_task(S, argc);
}

static int is_bundle(const char *path)
{
	size_t n = strlen(path);
	return n > 4 && strcmp(path + n - 4, ".rig") == 0;
}

int main(int argc, char **argv)
{
	/* The confinement helper: before any Lua state, thread or loop exists. */
	if (argc >= 2 && strcmp(argv[1], "__sandbox-helper") == 0)
		return lr_sbx_helper_main(argc, argv);

	size_t max_mem = 0;
	uint64_t max_instr = 0;
	const char *dbg = getenv("LUARIG_DEBUG");
	int debug = dbg && dbg[0] && strcmp(dbg, "0") != 0;
	int i = 1;

	/* Options come first. */
	for (; i < argc; i++) {
		const char *a = argv[i];
		const char *val = NULL;
		if (strncmp(a, "--max-memory", 12) == 0) {
			if (a[12] == '=')
				val = a + 13;
			else if (a[12] == '\0' && i + 1 < argc)
				val = argv[++i];
			else if (a[12] == '\0')
				return lr_cli_usage(&main_cli, "'%s' needs a value", a);
			else
				return lr_cli_usage(&main_cli, "unknown option '%s'", a);
			if (parse_size(val, &max_mem) < 0)
				return lr_cli_usage(&main_cli, "invalid size '%s' for --max-memory", val);
		} else if (strncmp(a, "--max-instructions", 18) == 0) {
			if (a[18] == '=')
				val = a + 19;
			else if (a[18] == '\0' && i + 1 < argc)
				val = argv[++i];
			else if (a[18] == '\0')
				return lr_cli_usage(&main_cli, "'%s' needs a value", a);
			else
				return lr_cli_usage(&main_cli, "unknown option '%s'", a);
			size_t n;
			if (parse_size(val, &n) < 0)
				return lr_cli_usage(&main_cli, "invalid count '%s' for --max-instructions", val);
			max_instr = n;
		} else if (strcmp(a, "--debug") == 0) {
			debug = 1;
		} else if (strcmp(a, "--") == 0) {
			i++;
			break;
		} else if (a[0] == '-' && a[1] == '-' && strcmp(a, "--help") && strcmp(a, "--version")) {
			return lr_cli_usage(&main_cli, "unknown option '%s'", a);
		} else {
			break;
		}
	}

	const char *cmd = i < argc ? argv[i] : NULL;
	if (cmd && (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (cmd && (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0 ||
		    strcmp(cmd, "-V") == 0)) {
		printf("luarig %s (%s)\n", LR_VERSION, LUA_RELEASE);
		return 0;
	}
	if (cmd && strcmp(cmd, "pack") == 0) {
		const char *dir = NULL, *out = NULL;
		for (int j = i + 1; j < argc; j++) {
			if (strcmp(argv[j], "-o") == 0 && j + 1 < argc)
				out = argv[++j];
			else if (strcmp(argv[j], "-o") == 0)
				return lr_cli_usage(&main_cli, "'%s' needs a file name", "-o");
			else if (!dir && argv[j][0] != '-')
				dir = argv[j];
			else
				return lr_cli_usage(&main_cli, "unexpected argument '%s'", argv[j]);
		}
		if (!dir)
			return lr_cli_usage(&main_cli, "%s", "pack needs a directory");
		return lr_bundle_pack(dir, out);
	}
	if (cmd && strcmp(cmd, "snapshot") == 0)
		return lr_snapshot_cli(argc - i - 1, argv + i + 1);
	if (cmd && (strcmp(cmd, "sessions") == 0 || strcmp(cmd, "show") == 0 ||
		    strcmp(cmd, "log") == 0))
		return lr_session_cli(cmd, argc - i - 1, argv + i + 1);
	if (cmd && strcmp(cmd, "sandbox") == 0 && i + 1 < argc && strcmp(argv[i + 1], "run") == 0)
		return lr_sandbox_run_cli(argc - i - 2, argv + i + 2);
	if (cmd && strcmp(cmd, "sandbox") == 0)
		return lr_sandbox_cli(argc - i - 1, argv + i + 1);
	if (cmd && strcmp(cmd, "inspect") == 0) {
		if (i + 2 != argc)
			return lr_cli_usage(&main_cli, "%s", "inspect needs exactly one bundle");
		return lr_bundle_inspect(argv[i + 1]);
	}

	const char *chunk = NULL, *script = NULL;
	int repl = 0, run = 0;
	if (cmd && strcmp(cmd, "-e") == 0) {
		if (i + 1 >= argc)
			return lr_cli_usage(&main_cli, "'%s' needs a chunk", "-e");
		chunk = argv[i + 1];
		i += 2;
	} else if (cmd && strcmp(cmd, "repl") == 0) {
		repl = 1;
		if (i + 1 < argc)
			script = argv[i + 1];
		if (i + 2 < argc)
			return lr_cli_usage(&main_cli, "unexpected argument '%s'", argv[i + 2]);
		i = argc;
	} else if (cmd && strcmp(cmd, "serve") == 0) {
		/* rig.serve parses its own arguments (usage errors exit 2) */
		chunk = "return require('rig.serve').cli(...)";
		i++;
	} else if (cmd && strcmp(cmd, "flow") == 0) {
		/* rig.flow.cli parses its own arguments (usage errors exit 2) */
		chunk = "return require('rig.flow.cli').cli(...)";
		i++;
	} else if (cmd && strcmp(cmd, "mcp") == 0) {
		/* rig.mcp.serve parses its own arguments (usage errors exit 2) */
		chunk = "return require('rig.mcp.serve').cli(...)";
		i++;
	} else if (cmd && strcmp(cmd, "run") == 0) {
		if (i + 1 >= argc)
			return lr_cli_usage(&main_cli, "%s", "run needs a script or a bundle");
		run = 1;
		script = argv[i + 1];
		i += 2;
	} else if (cmd && cmd[0] == '-' && cmd[1] != '\0') {
		return lr_cli_usage(&main_cli, "unknown option '%s'", cmd);
	} else if (cmd) {
		script = cmd;
		run = 1; /* a .rig path runs as a bundle, like `luarig run` */
		i++;
	} else if (isatty(0)) {
		repl = 1;
	} else {
		script = "-";
	}

	struct lr_state S;
	memset(&S, 0, sizeof S);
	int rc = lr_state_open(&S, max_mem, max_instr);
	if (rc != 0) {
		fprintf(stderr, "luarig: cannot create the Lua state: %s\n", lr_strerror(rc));
		return 1;
	}
	/* Before the library loads: a bundle runs the rig library built in (bundle.c). */
	S.bundle = run && is_bundle(script);
	S.debug = debug;
	int code;
	if (lr_state_prepare(&S) != 0) {
		code = 1;
	} else if (repl) {
		S.repl = 1;
		code = lr_repl_run(&S, script);
	} else if (run && is_bundle(script)) {
		code = lr_bundle_run(&S, script, argc - i, argv + i);
	} else {
		code = run_script(&S, script, chunk, argc - i, argv + i);
	}
	int unhandled = S.unhandled;
	lr_state_close(&S);
	if (S.unhandled > unhandled && code == 0)
		code = 1;
	return code;
}
