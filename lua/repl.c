/*
 * repl.c — the interactive prompt: `luarig repl [SCRIPT]`, and plain
 * `luarig` on a terminal.
 *
 * The host loop never stops while the prompt waits: libedit's callback
 * interface (rl_callback_handler_install / rl_callback_read_char) is fed
 * by a watch on standard input, so timers, tasks and HTTP keep running
 * and background output is drawn above the line being typed. Each entered
 * chunk runs as a task; the prompt returns when that task ends. Ctrl-C
 * cancels the chunk and the tasks it started (a busy loop is interrupted
 * through the async signal hook); at the prompt it clears the line.
 *
 * What libedit 3.1-20221030 does, and how it is used here:
 *  - rl_callback_handler_install enters raw mode and prints the prompt;
 *    rl_callback_handler_remove returns to cooked mode. The line handler
 *    runs inside rl_callback_read_char, and some libedit versions re-enter
 *    raw mode right after it returns, so the handler only records the line;
 *    it is acted on after rl_callback_read_char has returned.
 *  - rl_forced_update_display redraws prompt and line from scratch at the
 *    cursor (EL_REFRESH), which is what redrawing after output needs.
 *  - In callback mode rl_point and rl_end are never updated (only around
 *    functions bound with rl_add_defun, and in readline()). To wipe a line
 *    that wraps, the cursor row is needed: a private key bound to a no-op
 *    is fed through rl_getc_function, which refreshes them.
 *  - The terminal's ISIG stays on in libedit's raw mode: Ctrl-C at the
 *    prompt arrives as SIGINT, through the loop's signal pipe.
 *  - Signals stay ours (rl_catch_signals = 0): libedit's own handlers
 *    would re-raise SIGINT to the whole process group.
 *
 * Without a terminal the same engine reads standard input line by line,
 * with no prompt and no line editing (scripted sessions and tests).
 */
#include "internal.h"

#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * libedit is opened on first use (util/lazy.c), not linked: only an
 * interactive REPL needs it, and linking it (with libtinfo, libbsd and
 * libmd) cost every `luarig -e ''` about 0.3 ms and 600 KiB of RSS. Each
 * name below becomes a pointer in `ed`, and a macro of the same name
 * dereferences it, so the code reads as if linked.
 */
#define EDIT_SYMBOLS(X)                                                              \
	X(add_history) X(history_get) X(rl_add_defun) X(rl_callback_handler_install) \
	X(rl_callback_handler_remove) X(rl_callback_read_char) X(rl_completion_matches) \
	X(rl_forced_update_display) X(rl_get_screen_size) X(rl_initialize)              \
	X(rl_resize_terminal) X(rl_set_prompt) X(stifle_history) X(history_base) X(history_length)       \
	X(rl_attempted_completion_function) X(rl_attempted_completion_over)             \
	X(rl_basic_word_break_characters) X(rl_catch_signals)                          \
	X(rl_completer_word_break_characters) X(rl_completion_append_character)        \
	X(rl_getc_function) X(rl_line_buffer) X(rl_point) X(rl_readline_name)
static struct {
#define EDIT_SLOT(n) __typeof__(n) *n;
	EDIT_SYMBOLS(EDIT_SLOT)
#undef EDIT_SLOT
} ed;
static const char *const ed_names[] = {
#define EDIT_NAME(n) #n,
	EDIT_SYMBOLS(EDIT_NAME)
#undef EDIT_NAME
	NULL
};
static const char *const ed_sonames[] = { "libedit.so.2", "libedit.so", NULL };
static struct lr_lazy ed_lazy = { .sonames = ed_sonames, .names = ed_names, .slots = (void **)&ed };
#define add_history (*ed.add_history)
#define history_get (*ed.history_get)
#define rl_add_defun (*ed.rl_add_defun)
#define rl_callback_handler_install (*ed.rl_callback_handler_install)
#define rl_callback_handler_remove (*ed.rl_callback_handler_remove)
#define rl_callback_read_char (*ed.rl_callback_read_char)
#define rl_completion_matches (*ed.rl_completion_matches)
#define rl_forced_update_display (*ed.rl_forced_update_display)
#define rl_get_screen_size (*ed.rl_get_screen_size)
#define rl_initialize (*ed.rl_initialize)
#define rl_resize_terminal (*ed.rl_resize_terminal)
#define rl_set_prompt (*ed.rl_set_prompt)
#define stifle_history (*ed.stifle_history)
#define history_base (*ed.history_base)
#define history_length (*ed.history_length)
#define rl_attempted_completion_function (*ed.rl_attempted_completion_function)
#define rl_attempted_completion_over (*ed.rl_attempted_completion_over)
#define rl_basic_word_break_characters (*ed.rl_basic_word_break_characters)
#define rl_catch_signals (*ed.rl_catch_signals)
#define rl_completer_word_break_characters (*ed.rl_completer_word_break_characters)
#define rl_completion_append_character (*ed.rl_completion_append_character)
#define rl_getc_function (*ed.rl_getc_function)
#define rl_line_buffer (*ed.rl_line_buffer)
#define rl_point (*ed.rl_point)
#define rl_readline_name (*ed.rl_readline_name)

#define PROMPT "> "
#define PROMPT_MORE ">> "
#define HISTORY_MAX 1000
#define INPUT_CAP (1u << 20)  /* the longest line read without a terminal */
#define CHUNK_CAP (16u << 20) /* the longest statement, across lines */

struct repl {
	struct lr_state *S;
	int tty;
	int prompt_on; /* the libedit handler is installed: a prompt is showing */
	int in_editor; /* inside rl_callback_read_char (completion runs Lua there) */
	const char *prompt;
	int quit;
	int code;

	struct lr_watch in;
	int watching;
	int pollable;          /* stdin works with the loop (not a regular file) */
	struct lr_defer kick;  /* reads or processes input on the next round */
	struct lr_buf inbuf;   /* without a terminal: bytes not yet used */
	int in_eof;

	struct lr_buf chunk;   /* the statement typed so far */
	char *line;            /* handed over by the libedit line handler */
	int line_ready;

	struct lr_task *task;  /* the running chunk */
	int task_ref;
	volatile sig_atomic_t chunk_running;
	volatile sig_atomic_t interrupted;
	volatile sig_atomic_t chunk_sigints; /* SIGINTs that hit a chunk, not yet seen on the loop */

	/* The workbench (rig.repl_bench): a session turn Ctrl-C interrupts, a gate's key. */
	volatile sig_atomic_t turn_busy;   /* the attached session runs a turn */
	volatile sig_atomic_t turn_sigints; /* SIGINTs meant for that turn, not yet seen on the loop */
	struct timespec turn_sig_at;       /* when the last one came */
	int key_mode;                      /* the next key goes to rig.repl.on_key */
	int key_prompt;                    /* the handler was installed only to read that key */
	char *main_prompt;                 /* set_prompt's prefix + PROMPT, or NULL for PROMPT */

	int mod_ref;           /* rig.repl */
	char *hist_path;
	char *hist_last;

	char **cand;           /* completion candidates */
	size_t ncand, cand_next;
};

/* libedit's callbacks and the signal hook carry no argument. */
static struct repl *g_repl;

/*
 * Input goes through our getc so that a key can be fed to libedit
 * without the terminal: libedit's readline layer updates rl_point and
 * rl_end only around bound functions, so feeding SYNC_KEY (bound to a
 * function that does nothing) refreshes them. Bytes pass through as they
 * are, as libedit does in the C locale main.c runs in.
 */
#define SYNC_KEY 0x1e /* Ctrl-^ */
#define END_KEY 0x05  /* Ctrl-E: em-move-to-end */
static int g_pushed = -1;

static int repl_getc(FILE *f)
{
	(void)f;
	if (g_pushed >= 0) {
		int c = g_pushed;
		g_pushed = -1;
		return c;
	}
	unsigned char b;
	for (;;) {
		ssize_t n = read(0, &b, 1);
		if (n == 1)
			return b;
		if (n < 0 && errno == EINTR)
			continue;
		return -1;
	}
}

static int sync_key(int count, int key)
{
	(void)count;
	(void)key;
	return 0;
}

static void editor_read(void)
{
	g_repl->in_editor = 1;
	rl_callback_read_char();
	g_repl->in_editor = 0;
}

/* Runs one key through libedit as if typed (the prompt is showing). */
static void feed_key(int key)
{
	g_pushed = key;
	editor_read();
	g_pushed = -1;
}

static const char *main_prompt(const struct repl *r)
{
	return r->main_prompt ? r->main_prompt : PROMPT;
}

/* Terminal output around the prompt. */

static void hide_line(struct repl *r)
{
	int rows = 0, cols = 0;
	feed_key(SYNC_KEY); /* rl_point is current from here */
	rl_get_screen_size(&rows, &cols);
	size_t at = strlen(r->prompt) + (rl_point > 0 ? (size_t)rl_point : 0);
	int row = cols > 0 ? (int)(at / (size_t)cols) : 0;
	fputs("\r", stdout);
	if (row > 0)
		fprintf(stdout, "\033[%dA", row);
	fputs("\033[J", stdout);
}

/*
 * All REPL output goes through here (print, S->print_hook): while the
 * prompt shows, the partial line is wiped, the text written, and prompt
 * and line drawn again below it.
 */
static void repl_output(const char *s, size_t n)
{
	struct repl *r = g_repl;
	if (r && r->prompt_on && !r->in_editor) {
		hide_line(r);
		fwrite(s, 1, n, stdout);
		if (n && s[n - 1] != '\n')
			fputc('\n', stdout);
		fflush(stdout);
		rl_forced_update_display();
		return;
	}
	fwrite(s, 1, n, stdout);
	fflush(stdout);
}

static void say(const char *s)
{
	repl_output(s, strlen(s));
}

/* print, routed through repl_output. */
static int repl_print(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	for (int i = 1; i <= n; i++) {
		luaL_tolstring(L, i, NULL); /* stack: args buffer s */
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_addvalue(&b);
	}
	luaL_addchar(&b, '\n');
	luaL_pushresult(&b);
	size_t len;
	const char *s = lua_tolstring(L, -1, &len);
	repl_output(s, len);
	return 0;
}

/* rig.repl's interrupting(): true once Ctrl-C hit the running chunk. */
static int repl_interrupting(lua_State *L)
{
	lua_pushboolean(L, g_repl && g_repl->interrupted);
	return 1;
}

static void prompt_show(struct repl *r);
static void prompt_hide(struct repl *r);
static void watch_set(struct repl *r, int on);
static void on_line(char *line);

/*
 * rig.repl's key_mode(on): while on, each key typed goes to rig.repl.on_key
 * instead of the line editor (a gate's one-key answer). Without a showing
 * prompt (a chunk runs) the handler is installed with an empty prompt just
 * for the raw terminal. Returns false without a terminal.
 */
static int repl_key_mode(lua_State *L)
{
	struct repl *r = g_repl;
	int on = lua_toboolean(L, 1);
	if (!r || !r->tty) {
		lua_pushboolean(L, 0);
		return 1;
	}
	if (on && !r->key_mode) {
		r->key_mode = 1;
		if (!r->prompt_on && !r->quit) {
			rl_callback_handler_install("", on_line);
			r->prompt_on = 1;
			r->key_prompt = 1;
			r->prompt = "";
			watch_set(r, 1);
		}
	} else if (!on && r->key_mode) {
		r->key_mode = 0;
		if (r->key_prompt) {
			r->key_prompt = 0;
			prompt_hide(r);
			if (!r->task)
				prompt_show(r);
		}
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* rig.repl's columns(): the terminal's width, or nil. */
static int repl_columns(lua_State *L)
{
	struct winsize ws;
	if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
		lua_pushinteger(L, ws.ws_col);
		return 1;
	}
	lua_pushnil(L);
	return 1;
}

/* rig.repl's turn_busy(on): Ctrl-C goes to the attached session's turn while on. */
static int repl_turn_busy(lua_State *L)
{
	if (g_repl)
		g_repl->turn_busy = lua_toboolean(L, 1);
	return 0;
}

/* rig.repl's rows(): the terminal's height, or nil. */
static int repl_rows(lua_State *L)
{
	struct winsize ws;
	if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
		lua_pushinteger(L, ws.ws_row);
		return 1;
	}
	lua_pushnil(L);
	return 1;
}

/*
 * rig.repl's set_prompt([prefix]): the main prompt becomes prefix .. "> "
 * (nil or "": "> "); a showing main prompt is drawn again with it, the
 * typed line kept. The workbench shows the attached session's budget there.
 */
static int repl_set_prompt(lua_State *L)
{
	struct repl *r = g_repl;
	size_t n = 0;
	const char *prefix = luaL_optlstring(L, 1, "", &n);
	if (!r)
		return 0;
	if (n > 200)
		luaL_error(L, "rig.repl.set_prompt: prefix longer than 200 bytes");
	char *next = NULL;
	if (n > 0) {
		next = malloc(n + sizeof PROMPT);
		if (!next)
			return luaL_error(L, "out of memory");
		memcpy(next, prefix, n);
		memcpy(next + n, PROMPT, sizeof PROMPT);
	}
	int showing = r->tty && r->prompt_on && !r->key_prompt && !r->chunk.len &&
		      r->prompt == main_prompt(r);
	if (showing && !r->in_editor)
		hide_line(r);
	int was_main = r->prompt == main_prompt(r);
	free(r->main_prompt);
	r->main_prompt = next;
	if (was_main)
		r->prompt = main_prompt(r); /* never left pointing at the freed one */
	if (showing) {
		rl_set_prompt(r->prompt);
		if (!r->in_editor) {
			rl_forced_update_display();
			fflush(stdout);
		}
	}
	return 0;
}

/* rig.repl's quit(): the REPL ends once the running chunk returns, as after Ctrl-D (:quit). */
static int repl_quit(lua_State *L)
{
	(void)L;
	if (g_repl)
		g_repl->quit = 1;
	return 0;
}

/* Calls rig.repl[name] on the main thread with nargs arguments; 0 or -1 after printing the error. */
static int call_mod(struct repl *r, const char *name, int nargs, int nres)
{
	lua_State *L = r->S->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->mod_ref);
	lua_getfield(L, -1, name);
	lua_remove(L, -2);
	lua_insert(L, -1 - nargs); /* stack: f args */
	lua_pushcfunction(L, lr_traceback);
	lua_insert(L, -2 - nargs); /* stack: handler f args */
	int base = lua_gettop(L) - nargs - 1;
	if (lua_pcall(L, nargs, nres, base) != LUA_OK) {
		const char *msg = lua_tostring(L, -1);
		char *copy = strdup(msg ? msg : "error");
		lua_pop(L, 2);
		say("error: ");
		say(copy ? copy : "out of memory");
		say("\n");
		free(copy);
		return -1;
	}
	lua_remove(L, base); /* stack: results */
	return 0;
}

/* History: one entry per line, "\n" and "\\" escaped, so a multi-line statement stays one entry. */

static char *history_path(void)
{
	const char *base = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	char *path = NULL;
	int n;
	if (base && base[0] == '/')
		n = asprintf(&path, "%s/luarig/history", base);
	else if (home && home[0] == '/')
		n = asprintf(&path, "%s/.local/state/luarig/history", home);
	else
		return NULL;
	if (n < 0)
		return NULL;
	/* the directories above the file, 0700 */
	char *slash = strrchr(path, '/');
	*slash = '\0';
	int rc = lr_mkdirs(path, 0700, NULL);
	*slash = '/';
	if (rc < 0) {
		free(path);
		return NULL;
	}
	return path;
}

static char *history_escape(const char *s)
{
	size_t n = 0;
	for (const char *p = s; *p; p++)
		n += (*p == '\n' || *p == '\\') ? 2 : 1;
	char *out = malloc(n + 2);
	if (!out)
		return NULL;
	char *o = out;
	for (const char *p = s; *p; p++) {
		if (*p == '\n') {
			*o++ = '\\';
			*o++ = 'n';
		} else if (*p == '\\') {
			*o++ = '\\';
			*o++ = '\\';
		} else {
			*o++ = *p;
		}
	}
	*o++ = '\n';
	*o = '\0';
	return out;
}

static void history_unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (*p == '\\' && p[1] == 'n') {
			*o++ = '\n';
			p++;
		} else if (*p == '\\' && p[1] == '\\') {
			*o++ = '\\';
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

/* Rewrites the file with the entries now in memory (already capped), atomically. */
static void history_rewrite(struct repl *r)
{
	char *tmp = NULL;
	if (asprintf(&tmp, "%s.tmp", r->hist_path) < 0)
		return;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		free(tmp);
		return;
	}
	for (int i = 0; i < history_length; i++) {
		HIST_ENTRY *h = history_get(history_base + i);
		char *e = h ? history_escape(h->line) : NULL;
		if (e)
			fputs(e, f);
		free(e);
	}
	if (fclose(f) == 0)
		rename(tmp, r->hist_path);
	else
		unlink(tmp);
	free(tmp);
}

static void history_load(struct repl *r)
{
	stifle_history(HISTORY_MAX);
	r->hist_path = history_path();
	if (!r->hist_path)
		return;
	FILE *f = fopen(r->hist_path, "re");
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int count = 0;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[n - 1] = '\0';
		history_unescape(line);
		if (line[0]) {
			add_history(line);
			count++;
		}
	}
	free(line);
	fclose(f);
	if (history_length > 0) {
		HIST_ENTRY *h = history_get(history_base + history_length - 1);
		if (h)
			r->hist_last = strdup(h->line);
	}
	if (count > HISTORY_MAX)
		history_rewrite(r);
}

static void history_add(struct repl *r, const char *entry)
{
	if (!r->tty || !entry[strspn(entry, " \t\r\n")])
		return;
	if (r->hist_last && strcmp(r->hist_last, entry) == 0)
		return;
	free(r->hist_last);
	r->hist_last = strdup(entry);
	add_history(entry);
	if (!r->hist_path)
		return;
	char *e = history_escape(entry);
	if (!e)
		return;
	int fd = open(r->hist_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		size_t len = strlen(e), off = 0;
		while (off < len) {
			ssize_t w = write(fd, e + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		close(fd);
	}
	free(e);
}

/* Completion: rig.repl.complete(word) gives the full replacements. */

static void cand_clear(struct repl *r)
{
	for (size_t i = 0; i < r->ncand; i++)
		free(r->cand[i]);
	free(r->cand);
	r->cand = NULL;
	r->ncand = r->cand_next = 0;
}

static char *complete_next(const char *text, int state)
{
	(void)text;
	struct repl *r = g_repl;
	if (state == 0)
		r->cand_next = 0;
	if (r->cand_next < r->ncand)
		return strdup(r->cand[r->cand_next++]);
	return NULL;
}

static char **complete(const char *text, int start, int end)
{
	struct repl *r = g_repl;
	lua_State *L = r->S->L;
	rl_attempted_completion_over = 1;
	cand_clear(r);
	lua_pushstring(L, text);
	/*
	 * What comes before the word: a ':' command's arguments complete from
	 * it. libedit refreshes rl_line_buffer only around bound functions, so
	 * it is passed only when the word is where start says it is.
	 */
	const char *line = rl_line_buffer;
	size_t tlen = strlen(text);
	if (line && start >= 0 && end >= start && strlen(line) >= (size_t)end &&
	    (size_t)(end - start) == tlen && strncmp(line + start, text, tlen) == 0)
		lua_pushlstring(L, line, (size_t)start);
	else
		lua_pushnil(L);
	if (call_mod(r, "complete", 2, 1) < 0) {
		rl_forced_update_display();
		return NULL;
	}
	size_t n = lua_istable(L, -1) ? lua_rawlen(L, -1) : 0;
	if (n > 0 && (r->cand = calloc(n, sizeof *r->cand))) {
		for (size_t i = 0; i < n; i++) {
			lua_rawgeti(L, -1, (lua_Integer)i + 1);
			const char *s = lua_tostring(L, -1);
			if (s && (r->cand[r->ncand] = strdup(s)))
				r->ncand++;
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	if (!r->ncand)
		return NULL;
	return rl_completion_matches(text, complete_next);
}

/* The prompt. */

static void on_line(char *line)
{
	struct repl *r = g_repl;
	free(r->line);
	r->line = line;
	r->line_ready = 1;
}

static void watch_set(struct repl *r, int on)
{
	if (!r->pollable) {
		if (on)
			lr_defer_schedule(&r->kick);
		return;
	}
	if (on && !r->watching)
		r->watching = lr_watch_start(&r->in, LR_READ) == 0;
	else if (!on && r->watching) {
		lr_watch_stop(&r->in);
		r->watching = 0;
	}
}

static void prompt_show(struct repl *r)
{
	if (r->quit)
		return;
	if (r->tty && !r->prompt_on) {
		r->prompt = r->chunk.len ? PROMPT_MORE : main_prompt(r);
		rl_callback_handler_install(r->prompt, on_line);
		r->prompt_on = 1;
		fflush(stdout);
	}
	watch_set(r, 1);
	if (!r->tty)
		lr_defer_schedule(&r->kick); /* lines may wait in the buffer */
}

static void prompt_hide(struct repl *r)
{
	if (r->tty && r->prompt_on) {
		rl_callback_handler_remove();
		r->prompt_on = 0;
	}
	watch_set(r, 0);
}

/* Running a chunk. */

/* stack: fn → starts M.run(fn, quiet) as the chunk's task. */
static void chunk_start(struct repl *r, int quiet)
{
	lua_State *L = r->S->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->mod_ref);
	lua_getfield(L, -1, "run");
	lua_remove(L, -2);
	lua_insert(L, -2); /* stack: run fn */
	lua_pushboolean(L, quiet);
	r->interrupted = 0;
	r->chunk_sigints = 0;
	r->task = lr_sched_spawn(L, 2); /* stack: task */
	r->task_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	r->chunk_running = 1;
	prompt_hide(r);
}

static void chunk_done(struct repl *r)
{
	r->chunk_running = 0;
	luaL_unref(r->S->L, LUA_REGISTRYINDEX, r->task_ref);
	r->task_ref = LUA_NOREF;
	r->task = NULL;
	if (r->interrupted)
		say("interrupted\n");
	r->interrupted = 0;
	prompt_show(r);
}

/* One line of input: complete a statement, run it, or wait for more. */
static void handle_line(struct repl *r, const char *line, size_t len)
{
	lua_State *L = r->S->L;
	if (r->chunk.len && lr_buf_add(&r->chunk, "\n", 1) != 0)
		goto too_big;
	if (lr_buf_add(&r->chunk, line, len) != 0)
		goto too_big;
	if (!r->chunk.data[strspn(r->chunk.data, " \t\r\n")]) {
		lr_buf_reset(&r->chunk); /* an empty line */
		return;
	}
	lua_pushlstring(L, r->chunk.data, r->chunk.len);
	if (call_mod(r, "compile", 1, 2) < 0) {
		lr_buf_reset(&r->chunk);
		return;
	}
	/* stack: fn|nil nil|message */
	if (lua_isnil(L, -2) && lua_isnil(L, -1)) {
		lua_pop(L, 2); /* incomplete: the next line continues it */
		return;
	}
	history_add(r, r->chunk.data);
	lr_buf_reset(&r->chunk);
	if (lua_isnil(L, -2)) {
		lua_pushfstring(L, "error: %s\n", lua_tostring(L, -1));
		say(lua_tostring(L, -1));
		lua_pop(L, 3);
		return;
	}
	lua_pop(L, 1);
	chunk_start(r, 0);
	return;
too_big:
	lr_buf_reset(&r->chunk);
	say("error: input too long\n");
}

/* Without a terminal: split what was read into lines, one chunk at a time. */
static void process_input(struct repl *r)
{
	while (!r->task && !r->quit) {
		char *nl = r->inbuf.len ? memchr(r->inbuf.data, '\n', r->inbuf.len) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - r->inbuf.data);
			size_t used = n + 1;
			if (n && r->inbuf.data[n - 1] == '\r')
				n--;
			r->inbuf.data[n] = '\0';
			handle_line(r, r->inbuf.data, n);
			lr_buf_consume(&r->inbuf, used);
			continue;
		}
		if (!r->in_eof)
			return;
		if (r->inbuf.len) {
			char *rest = lr_buf_take(&r->inbuf, NULL);
			handle_line(r, rest ? rest : "", rest ? strlen(rest) : 0);
			free(rest);
			continue;
		}
		if (r->chunk.len) { /* an unfinished statement at the end */
			lua_State *L = r->S->L;
			if (luaL_loadbufferx(L, r->chunk.data, r->chunk.len, "=stdin", "t") != LUA_OK) {
				lua_pushfstring(L, "error: %s\n", lua_tostring(L, -1));
				say(lua_tostring(L, -1));
				lua_pop(L, 1);
			}
			lua_pop(L, 1);
			lr_buf_reset(&r->chunk);
		}
		r->quit = 1;
	}
}

static void read_input(struct repl *r)
{
	char tmp[4096];
	ssize_t n = read(0, tmp, sizeof tmp);
	if (n > 0) {
		if (lr_buf_add(&r->inbuf, tmp, (size_t)n) != 0) {
			say("error: input line too long\n");
			r->quit = 1;
			r->code = 1;
			return;
		}
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		r->in_eof = 1;
	}
	process_input(r);
	if (!r->pollable && !r->task && !r->quit)
		lr_defer_schedule(&r->kick);
}

static void on_stdin(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct repl *r = arg;
	if (!r->tty) {
		read_input(r);
		return;
	}
	if (!r->prompt_on)
		return;
	if (r->key_mode) {
		unsigned char b;
		ssize_t n = read(0, &b, 1);
		if (n == 1) {
			char k[2] = { (char)b, 0 };
			lua_pushlstring(r->S->L, k, 1);
			if (call_mod(r, "on_key", 1, 0) < 0) {
				r->key_mode = 0; /* never stuck on a broken handler */
				if (r->key_prompt) {
					r->key_prompt = 0;
					prompt_hide(r);
					if (!r->task)
						prompt_show(r);
				}
			}
		}
		return;
	}
	editor_read();
	if (!r->line_ready)
		return;
	r->line_ready = 0;
	char *line = r->line;
	r->line = NULL;
	prompt_hide(r);
	if (!line) { /* Ctrl-D */
		fputs("\n", stdout);
		fflush(stdout);
		r->quit = 1;
		return;
	}
	handle_line(r, line, strlen(line));
	free(line);
	if (!r->task)
		prompt_show(r);
}

static void on_kick(struct lr_defer *d, void *arg)
{
	(void)d;
	struct repl *r = arg;
	if (r->tty || r->task || r->quit)
		return;
	if (r->pollable)
		process_input(r);
	else
		read_input(r);
}

/* Signals. */

/* Inside the signal handler: only flags and lr_state_interrupt. */
static void repl_async_signal(int signo)
{
	struct repl *r = g_repl;
	if (!r || (signo != SIGINT && signo != SIGTERM))
		return;
	if (signo == SIGINT && r->turn_busy) {
		/* For the session's turn, unless a chunk runs and this is a second Ctrl-C within 1 s. */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		double dt = (double)(now.tv_sec - r->turn_sig_at.tv_sec) +
			    (double)(now.tv_nsec - r->turn_sig_at.tv_nsec) / 1e9;
		int second = r->turn_sig_at.tv_sec != 0 && dt < 1.0;
		if (!(second && r->chunk_running)) {
			r->turn_sig_at = now;
			r->turn_sigints++;
			return;
		}
	}
	if (signo == SIGINT && r->chunk_running) {
		r->interrupted = 1;
		r->chunk_sigints++;
	}
	if (r->S->running)
		lr_state_interrupt(r->S);
}

static void on_sigint(int signo, void *arg)
{
	(void)signo;
	struct repl *r = arg;
	if (r->turn_sigints > 0) {
		r->turn_sigints--;
		if (call_mod(r, "interrupt_turn", 0, 1) == 0) {
			int done = lua_toboolean(r->S->L, -1);
			lua_pop(r->S->L, 1);
			if (done)
				return;
		}
	}
	if (r->task || r->chunk_sigints > 0) {
		/* Meant for a chunk, which may have ended already (a busy loop interrupted). */
		if (r->chunk_sigints > 0)
			r->chunk_sigints--;
		if (r->task) {
			r->interrupted = 1;
			lr_task_cancel(r->task);
		}
		return;
	}
	if (r->tty && r->prompt_on) {
		/* Like a shell: abandon the line (and any unfinished statement). */
		feed_key(END_KEY);
		fputs("^C\n", stdout);
		lr_buf_reset(&r->chunk);
		rl_callback_handler_remove();
		r->prompt_on = 0;
		prompt_show(r);
		return;
	}
	if (!r->tty) {
		r->quit = 1;
		r->code = 128 + SIGINT;
	}
}

static void on_sigterm(int signo, void *arg)
{
	struct repl *r = arg;
	r->quit = 1;
	r->code = 128 + signo;
	if (r->task)
		lr_task_cancel(r->task);
}

static void on_sigwinch(int signo, void *arg)
{
	(void)signo;
	struct repl *r = arg;
	if (r->prompt_on)
		rl_resize_terminal();
}

/* Set-up and the loop. */

static int repl_setup(struct repl *r)
{
	lua_State *L = r->S->L;
	lua_pushcfunction(L, lr_traceback);
	lua_getglobal(L, "require");
	lua_pushliteral(L, "rig.repl");
	if (lua_pcall(L, 1, 1, -3) != LUA_OK) {
		fprintf(stderr, "luarig: %s\n", lua_tostring(L, -1));
		lua_pop(L, 2);
		return -1;
	}
	lua_pushcfunction(L, repl_interrupting);
	lua_setfield(L, -2, "interrupting");
	lua_pushcfunction(L, repl_key_mode);
	lua_setfield(L, -2, "key_mode");
	lua_pushcfunction(L, repl_columns);
	lua_setfield(L, -2, "columns");
	lua_pushcfunction(L, repl_turn_busy);
	lua_setfield(L, -2, "turn_busy");
	lua_pushcfunction(L, repl_rows);
	lua_setfield(L, -2, "rows");
	lua_pushcfunction(L, repl_set_prompt);
	lua_setfield(L, -2, "set_prompt");
	lua_pushcfunction(L, repl_quit);
	lua_setfield(L, -2, "quit");
	lua_pushboolean(L, r->S->debug);
	lua_setfield(L, -2, "debug");
	r->mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_pop(L, 1);
	lua_pushcfunction(L, repl_print);
	lua_setglobal(L, "print");
	r->S->print_hook = repl_output;
	return 0;
}

static void editor_setup(struct repl *r)
{
	rl_readline_name = "luarig";
	rl_catch_signals = 0;
	rl_attempted_completion_function = complete;
	rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{}(),+-*/%^~#[]!";
	rl_completer_word_break_characters = (char *)rl_basic_word_break_characters;
	rl_completion_append_character = '\0';
	rl_getc_function = repl_getc;
	rl_initialize();
	rl_add_defun("luarig-sync", sync_key, SYNC_KEY);
	history_load(r);
	r->prompt = PROMPT;
}

int lr_repl_run(struct lr_state *S, const char *script)
{
	struct repl rs, *r = &rs;
	memset(r, 0, sizeof *r);
	r->S = S;
	r->mod_ref = r->task_ref = LUA_NOREF;
	r->tty = isatty(0) && isatty(1);
	if (r->tty && lr_lazy_open(&ed_lazy) != 0) {
		fprintf(stderr, "luarig: no line editing (%s)\n", ed_lazy.err.msg);
		r->tty = 0;
	}
	r->prompt = PROMPT;
	lr_buf_init(&r->chunk, CHUNK_CAP);
	lr_buf_init(&r->inbuf, INPUT_CAP);
	g_repl = r;

	if (repl_setup(r) < 0) {
		g_repl = NULL;
		return 1;
	}
	lr_loop_set_async_signal_hook(repl_async_signal);
	lr_loop_on_signal(S->loop, SIGINT, on_sigint, r);
	lr_loop_on_signal(S->loop, SIGTERM, on_sigterm, r);
	if (r->tty)
		lr_loop_on_signal(S->loop, SIGWINCH, on_sigwinch, r);
	if (lr_watch_init(S->loop, &r->in, 0, on_stdin, r) != 0 ||
	    lr_defer_init(S->loop, &r->kick, on_kick, r) != 0) {
		fprintf(stderr, "luarig: out of memory\n");
		r->quit = 1;
		r->code = 1;
	}
	/* A regular file cannot be watched: it is always readable, so read it on deferred rounds. */
	r->pollable = 1;
	if (!r->quit) {
		if (lr_watch_start(&r->in, LR_READ) == 0)
			lr_watch_stop(&r->in);
		else
			r->pollable = 0;
	}
	if (r->tty && !r->quit)
		editor_setup(r);

	if (script && !r->quit) {
		lua_State *L = S->L;
		lr_set_arg(L, script, 0, NULL);
		if (lr_load_file(L, script) != LUA_OK) {
			lua_pushfstring(L, "error: %s\n", lua_tostring(L, -1));
			say(lua_tostring(L, -1));
			lua_pop(L, 2);
		} else {
			chunk_start(r, 1);
		}
	}
	if (!r->task)
		prompt_show(r);

	while (!r->quit && !S->killed) {
		if (r->task && lr_task_done(r->task)) {
			chunk_done(r);
			continue;
		}
		if (lr_loop_once(S->loop, 0) < 0)
			break;
	}

	if (r->prompt_on) {
		fputs("\n", stdout); /* leave the shell a clean line */
		fflush(stdout);
	}
	prompt_hide(r);
	if (S->killed) {
		fprintf(stderr, "luarig: %s\n", S->kill_msg);
		r->code = 1;
	}
	if (r->task) {
		if (lr_task_outcome(r->task) == 1) {
			lr_task_push_error(S->L, r->task); /* a kill, reported just above */
			lua_pop(S->L, 1);
		}
		lr_task_cancel(r->task);
		luaL_unref(S->L, LUA_REGISTRYINDEX, r->task_ref);
		r->task = NULL;
	}
	/* Cancel what still runs in the background; cancelled tasks finish on the next rounds. */
	lr_state_shutdown(S);
	for (int i = 0; i < 100 && lr_sched_live(S) > 0 && !S->killed; i++)
		lr_loop_once(S->loop, 1);

	lr_loop_set_async_signal_hook(NULL);
	S->print_hook = NULL;
	lr_watch_release(&r->in);
	lr_defer_release(&r->kick);
	luaL_unref(S->L, LUA_REGISTRYINDEX, r->mod_ref);
	lr_buf_release(&r->chunk);
	lr_buf_release(&r->inbuf);
	free(r->line);
	free(r->hist_path);
	free(r->hist_last);
	free(r->main_prompt);
	cand_clear(r);
	g_repl = NULL;
	return r->code;
}
