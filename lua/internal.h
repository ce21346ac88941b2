/*
 * internal.h — shared between lua/ files: the process-wide state, the
 * scheduler that runs Lua tasks as coroutines over the host loop, and the
 * helpers every binding uses. lua/ is the only folder that includes lua.h.
 *
 * How a binding waits (the coroutine bridge):
 *
 *   static int sleep_k(lua_State *L, int status, lua_KContext ctx)
 *   {
 *       struct op *op = (struct op *)ctx;
 *       lr_sched_resumed(L, &op->wait);   raises "cancelled" if cancelled
 *       ... push results from op (never from the completion callback) ...
 *       return nresults;
 *   }
 *   static int f_sleep(lua_State *L)
 *   {
 *       struct lr_task *t = lr_sched_enter(L);   raises outside a task / when cancelled
 *       struct op *op = lua_newuserdatauv(L, sizeof *op, 0);  stays on the
 *           coroutine stack, so it is anchored while the task waits
 *       op->wait.cancel = op_cancel;   aborts the operation synchronously
 *       ... start the operation; its callback calls lr_sched_wake(&op->wait) ...
 *       return lr_sched_await(L, &op->wait, (lua_KContext)op, sleep_k);
 *   }
 *
 * Completion callbacks run on the loop, outside Lua: they record C results
 * in the op and call lr_sched_wake. The continuation converts them into Lua
 * values inside the coroutine, so an allocation failure there is an
 * ordinary error of that task, never a panic.
 */
#ifndef LR_LUA_INTERNAL_H
#define LR_LUA_INTERNAL_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stddef.h>
#include <stdint.h>

#include "../host/host.h"

#define LR_VERSION "0.1.0"

struct lr_task;
struct lr_sched;

/*
 * What a task waits on. The owner embeds it in its operation. cancel, when
 * set, aborts the pending operation at once (remove the transfer, kill the
 * process group, stop the timer); the operation's callback must then not
 * call lr_sched_wake. status is LR_ECANCELLED after a cancellation.
 */
struct lr_wait {
	struct lr_task *task;
	void (*cancel)(struct lr_wait *w);
	int status;
	struct lr_wait *next; /* free for the owner's lists */
};

/*
 * Things to close when the process shuts down (servers, listeners): each
 * registers a closer while open, so SIGINT/SIGTERM can end a run that would
 * otherwise wait on them forever.
 */
struct lr_closer {
	void (*close)(struct lr_closer *c);
	struct lr_closer *next, *prev;
};

/* The process-wide host state: one lua_State, one loop, one scheduler. */
struct lr_state {
	lua_State *L;
	struct lr_loop *loop;
	struct lr_sched *sched;

	/* Budgets for untrusted code; 0 means unlimited. */
	size_t mem_used;
	size_t mem_max;
	uint64_t instr_max;
	uint64_t instr_used;
	int hook_count;

	/* A kill latches: once set, every Lua instruction raises it again. */
	volatile int killed;
	const char *kill_msg;
	/* Ctrl-C or SIGTERM while Lua runs: raise in the running chunk. */
	volatile int interrupt;
	volatile int interrupt_armed;
	/* The interrupt is a shutdown signal's: the running task ends cancelled, as every other. */
	volatile int interrupt_cancels;
	lua_State *volatile running;

	int repl;               /* the REPL owns the terminal */
	int bundle;             /* a bundle runs: code comes from its archive and the
				 * binary only, LUARIG_PATH is ignored (bundle.c) */
	int unhandled;          /* task errors nobody retrieved */
	int debug;              /* --debug or LUARIG_DEBUG: every error with its traceback */
	int exit_signal;        /* the signal that asked for shutdown */
	volatile int pending_signal; /* set inside the signal handler */
	void (*print_hook)(const char *s, size_t n); /* the REPL redraws around output */
	struct lr_closer *closers;
	struct lr_pool *pool;    /* small blocks of the Lua allocator (state.c) */
};

/* The state stored in every thread's extra space. */
static inline struct lr_state *lr_state_of(lua_State *L)
{
	return *(struct lr_state **)lua_getextraspace(L);
}

/* state.c */
int lr_state_open(struct lr_state *S, size_t mem_max, uint64_t instr_max);
void lr_state_close(struct lr_state *S);
/* Latch a kill (budget exceeded): the running chunk and every later one fail. */
void lr_state_kill(struct lr_state *S, const char *msg);
/* Ask the running Lua code to raise "interrupted" at its next instruction. */
void lr_state_interrupt(struct lr_state *S);
void lr_closer_add(struct lr_state *S, struct lr_closer *c);
void lr_closer_remove(struct lr_state *S, struct lr_closer *c);
/* Cancels every task and closes every closer: a graceful shutdown. */
void lr_state_shutdown(struct lr_state *S);
/* The message handler used for every pcall: appends a traceback. */
int lr_traceback(lua_State *L);
/*
 * Prints "luarig: " lead msg to stderr, msg being an error as the handlers
 * above made it ("message\nstack traceback:\n…"). The traceback is kept
 * only with S->debug, or when the error is a bug: its message starts at a
 * line of the rig library (stdlib/rig/…, or $LUARIG_PATH/rig/…). A user's
 * mistake — a usage or definition error, an error in their own script —
 * is the message alone: one line (docs/cli.md "Errors").
 */
void lr__report_error(struct lr_state *S, const char *lead, const char *msg);
/* Loads a chunk from a file ("-" is stdin), text only. Pushes the function or returns nil+msg. */
int lr_load_file(lua_State *L, const char *path);

/* sched.c */
int lr_sched_open(struct lr_state *S);
void lr_sched_close(struct lr_state *S);
/*
 * Spawns the function at idx (with nargs arguments above it, popped) as a
 * task and pushes the task object. The task starts on the next loop round.
 */
struct lr_task *lr_sched_spawn(lua_State *L, int nargs);
/* The running task, or raises when L is not inside one (or the task is cancelled). */
struct lr_task *lr_sched_enter(lua_State *L);
struct lr_task *lr_sched_current(lua_State *L);
int lr_sched_await(lua_State *L, struct lr_wait *w, lua_KContext ctx, lua_KFunction k);
void lr_sched_wake(struct lr_wait *w);
/* First call in a continuation: raises when the wait was cancelled. */
void lr_sched_resumed(lua_State *L, struct lr_wait *w);
/* Cancels a task and everything it started; returns 1 if it was still running. */
int lr_task_cancel(struct lr_task *t);
int lr_task_done(const struct lr_task *t);
/* 0 done, 1 failed, 2 cancelled; -1 while running. */
int lr_task_outcome(const struct lr_task *t);
/* Pushes the error message (with traceback) of a failed task and marks it retrieved. */
void lr_task_push_error(lua_State *L, struct lr_task *t);
/* Cancels every live task (shutdown). */
void lr_sched_cancel_all(struct lr_state *S);
int lr_sched_live(struct lr_state *S);
/* Pushes the scheduler marker that a task yields with; used by the coroutine wrappers. */
void lr_sched_push_marker(lua_State *L);

/* The one conversion of a C status into Lua's nil, message, code. */
int lr_pushfail(lua_State *L, int rc, const char *fmt, ...);

/*
 * A typed, closable handle: a userdata of metatable tname whose first
 * field is a pointer to what it owns, NULL once closed (or before it owns
 * anything: the userdata is made closed, then the resource acquired).
 * Returns the userdata; raises "bad argument" when idx is no tname, and
 * "attempt to use a closed <tname>" when it is closed. Every binding
 * checks its handles with this, not with luaL_checkudata and a test of
 * its own.
 */
void *lr_checkhandle(lua_State *L, int idx, const char *tname);
/* Put after the handle's struct: the build fails when field is not first. */
#define LR_HANDLE_FIRST(type, field) \
	_Static_assert(offsetof(type, field) == 0, #type " starts with its handle pointer")

/* core.c: the bound module rig.core */
int luaopen_rig_core(lua_State *L);
/* Each binding file adds its functions and metatables to the table on top. */
void lr__sched_open(lua_State *L);
void lr__http_open(lua_State *L);
void lr__server_open(lua_State *L);
void lr__proc_open(lua_State *L);
void lr__bundle_open(lua_State *L);
void lr__store_open(lua_State *L);
void lr__json_open(lua_State *L);
/*
 * rig.json.encode's text of the value at idx, made in the shared encode
 * buffer instead of a Lua string. Returns 0 with out->text and out->len
 * (borrowed: valid until lr__json_encode_end, which the caller must call
 * before anything can encode again, and which may free it), or -1 with the
 * encoder's message pushed ("json: ... at $.path") and nothing to end.
 * Pushes the buffer either way (anchored while the caller's frame lives),
 * and on -1 the message above it. Raises only on out-of-memory (the buffer stays marked busy:
 * later encodes take buffers of their own).
 */
struct lr__json_text {
	const char *text;
	size_t len;
	void *buf;
};
int lr__json_encode_begin(lua_State *L, int idx, struct lr__json_text *out);
void lr__json_encode_end(struct lr__json_text *t);
void lr__sandbox_open(lua_State *L);
/* hash.c: core.sha256_hex; fs.c: core.fs_* (policy files: lstat, private read, atomic write). */
void lr__hash_open(lua_State *L);
void lr__fs_open(lua_State *L);
/*
 * store.c: the backend of the rig.store at idx (raises when it is not one
 * or closed) with a reference that keeps it open: drop it with
 * lr__store_unref (loop thread only).
 */
struct lr_store;
void *lr__store_ref(lua_State *L, int idx, struct lr_store **out);
void lr__store_unref(void *ref);
/* session.c: sessions, the journal and the catalog (rig.core.session_open, ...). */
void lr__session_open(lua_State *L);
/* workspace.c: core.lease_acquire (a named lease on a store) and core.ws_* directory calls. */
void lr__workspace_open(lua_State *L);
/* flow.c: core.kv_get, core.kv_put and core.kv_keys (the store's kv, on the pool). */
void lr__flow_open(lua_State *L);
/* term.c: core.isatty(fd) and core.read_line([max]), a waiting read of one stdin line. */
void lr__term_open(lua_State *L);
/* mcp.c: core.mcp_framer(max_line), the MCP stdio line framer (host/mcp_frame.c). */
void lr__mcp_open(lua_State *L);
/* sandbox.c: the profile held by the rig.sandbox.profile userdata at idx
 * (raises when it is not one); borrowed, valid while the userdata lives. */
struct lr_profile;
const struct lr_profile *lr__sandbox_check_profile(lua_State *L, int idx);

/* stdlib.c (generated) and the module searchers. */
struct lr_embedded {
	const char *name; /* module name, "rig.http" */
	const char *path; /* "stdlib/rig/http.lua" */
	const unsigned char *data;
	size_t len;
};
extern const struct lr_embedded lr_stdlib[];
extern const size_t lr_stdlib_count;
void lr_searchers_install(lua_State *L);
/* The searcher for the embedded library (and LUARIG_PATH), as installed. */
int lr__searcher_stdlib(lua_State *L);
/* LUARIG_PATH when set, not empty and no bundle runs; NULL otherwise. */
const char *lr__stdlib_dir(lua_State *L);

/* main.c: opens the libraries, installs the searchers, binds the global rig. */
int lr_state_prepare(struct lr_state *S);
/*
 * Runs the function on top of S->L (with nargs arguments above it) as the
 * main task, drives the loop until nothing is pending, reports a failure as
 * "luarig: message" and returns the exit code (0, 1, or 128+signal).
 */
int lr_main_task(struct lr_state *S, int nargs);
/* Sets the global arg table: arg[0] = script, arg[1..] = args. */
void lr_set_arg(lua_State *L, const char *script, int argc, char **argv);

/* bundle.c: running a packaged bundle; repl.c: the REPL. */
int lr_bundle_run(struct lr_state *S, const char *path, int argc, char **argv);
int lr_bundle_pack(const char *dir, const char *out);
int lr_bundle_inspect(const char *path);
int lr_repl_run(struct lr_state *S, const char *script);

/*
 * proc.c, for the sandbox executor: spawn o as a rig.process handle (pushes
 * it or nil, msg, code). on_end(arg), when given, runs once when the process
 * is over or the handle is closed (only when the spawn succeeded).
 */
int lr__proc_spawn_handle(lua_State *L, const struct lr_proc_opts *o, const char *stdin_data,
			  size_t stdin_len, void (*on_end)(void *arg), void *arg);
/* proc.c: a "pipe" | "inherit" | "null" option of the table at idx (pipe when absent; raises otherwise). */
int lr__proc_stdio_mode(lua_State *L, int idx, const char *fname, const char *field);
/* proc.c: "SIGTERM", "SIGRTMIN+2", "SIG99" */
const char *lr__signal_name(int signo, char *buf, size_t n);
/* executor.c: rig.sandbox executor sets (rig.core.sandbox_executors). */
void lr__executor_open(lua_State *L);
/*
 * server.c: graceful shutdown. take_signal hands a SIGINT/SIGTERM to the
 * task waiting in rig.core.await_shutdown_signal (1) or finds none (0);
 * graceful says whether one is waiting (then a busy chunk is not interrupted).
 */
int lr__server_take_signal(int signo);
int lr__server_graceful(void);
/*
 * server.c, for a C writer of a streamed response (rig.session's sub:pipe):
 * the request behind the response userdata at idx, which must be started and
 * not finished (raises naming fn otherwise), and in *res a handle for
 * lr__server_hook. While a hook is set the request's drain notifications
 * go to drained(arg) and res:write/event/comment raise; NULL unhooks. The
 * caller keeps the userdata anchored while hooked.
 */
struct lr_httpd_req *lr__server_stream(lua_State *L, int idx, const char *fn, void **res);
void lr__server_hook(void *res, void (*drained)(void *arg), void *arg);

#endif
