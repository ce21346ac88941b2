/*
 * term.c — the terminal, from a task: core.isatty(fd) and core.read_line(),
 * a waiting read of one line from standard input that leaves the event loop
 * running (sessions, timers and other tasks go on while a person types).
 *
 *   core.isatty(fd)        -> true | false   (fd 0, 1 or 2)
 *   core.stdin_read([max]) -> chunk | nil at end of input | nil, message, code;
 *                             what one read(2) of fd 0 gives once it is ready,
 *                             at most max bytes (65536; 1..16 MiB): a stdio MCP
 *                             server's input (rig.mcp.server), framed in C
 *   core.read_line([max])  -> line (without "\n") | nil at end of input |
 *                             nil, message, code; max = 4096 bytes (1..65536):
 *                             a longer line comes back in max-byte pieces
 *
 * read_line watches fd 0 on the loop and reads one byte at a time while
 * poll says more is ready, so it never reads past the newline (what follows
 * stays in the fd for the next reader, a child process included) and never
 * blocks. A regular file or a device other than a terminal (/dev/null)
 * never blocks either and the loop cannot watch it: it is read directly. Cancelling the task stops the watch.
 */
#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define READOP_MT "rig.op.read_line"
#define LINE_MAX_DEFAULT 4096
#define LINE_MAX_LIMIT 65536

struct readop {
	struct lr_wait wait;
	struct lr_watch watch;
	int watching;
	int rc;     /* 0, or -errno */
	int eof;
	size_t max; /* bytes the line may hold */
	struct lr_buf line;
};

/* Reads bytes while they are ready; returns 1 when the line is complete. */
static int readop_pump(struct readop *op, int blocking)
{
	for (;;) {
		if (!blocking) {
			struct pollfd p = { .fd = 0, .events = POLLIN };
			int n = poll(&p, 1, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return 0;
		}
		char c;
		ssize_t r = read(0, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r < 0) {
			op->rc = -errno;
			return 1;
		}
		if (r == 0) {
			op->eof = 1;
			return 1;
		}
		if (c == '\n')
			return 1;
		int rc = lr_buf_add(&op->line, &c, 1);
		if (rc) {
			op->rc = rc;
			return 1;
		}
		if (op->line.len >= op->max)
			return 1;
	}
}

static void readop_ready(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct readop *op = arg;
	if (readop_pump(op, 0)) {
		lr_watch_stop(&op->watch);
		lr_sched_wake(&op->wait);
	}
}

static void readop_cancel(struct lr_wait *w)
{
	struct readop *op = (struct readop *)w;
	if (op->watching)
		lr_watch_stop(&op->watch);
}

static void readop_unwatch(struct readop *op)
{
	if (op->watching) {
		lr_watch_release(&op->watch);
		op->watching = 0;
	}
}

static void readop_free(struct readop *op)
{
	readop_unwatch(op);
	lr_buf_release(&op->line);
}

static int readop_gc(lua_State *L)
{
	readop_free(lua_touserdata(L, 1));
	return 0;
}

/* Pushes the outcome; the op is freed first (Lua may raise while pushing). */
static int readop_push(lua_State *L, struct readop *op)
{
	if (op->rc && op->line.len == 0) {
		int rc = op->rc;
		readop_free(op);
		return lr_pushfail(L, rc, "read_line: cannot read standard input: %s", lr_strerror(rc));
	}
	if (op->eof && op->line.len == 0) {
		readop_free(op);
		lua_pushnil(L);
		return 1;
	}
	/* stack: op; the string copies the bytes before they are released */
	lua_pushlstring(L, op->line.data ? op->line.data : "", op->line.len);
	readop_free(op);
	return 1;
}

static int read_line_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct readop *op = (struct readop *)ctx;
	lr_sched_resumed(L, &op->wait);
	return readop_push(L, op);
}

/* rig.core.read_line([max]) */
static int term_read_line(lua_State *L)
{
	lua_Integer max = luaL_optinteger(L, 1, LINE_MAX_DEFAULT);
	luaL_argcheck(L, max >= 1 && max <= LINE_MAX_LIMIT, 1, "must be between 1 and 65536");
	lr_sched_enter(L);
	struct readop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	lr_buf_init(&op->line, (size_t)max);
	luaL_setmetatable(L, READOP_MT);
	op->max = (size_t)max;
	op->wait.cancel = readop_cancel;
	/* epoll refuses regular files and /dev/null, which never block: read them directly */
	struct stat st;
	if (fstat(0, &st) == 0 && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) && !isatty(0)) {
		readop_pump(op, 1);
		return readop_push(L, op);
	}
	int rc = lr_watch_init(lr_state_of(L)->loop, &op->watch, 0, readop_ready, op);
	if (rc)
		return luaL_error(L, "out of memory");
	op->watching = 1;
	if (lr_watch_start(&op->watch, LR_READ)) {
		readop_unwatch(op);
		readop_pump(op, 1);
		return readop_push(L, op);
	}
	return lr_sched_await(L, &op->wait, (lua_KContext)op, read_line_k);
}

/*
 * stdin_read: one read of fd 0 once the loop says it is ready, so a server
 * reading its client's messages leaves every other task running. Unlike
 * read_line it takes what is there in one call (a pipe gives at most what was
 * written), which is what a framer wants; it is for a process whose whole
 * standard input is one protocol stream.
 */
struct chunkop {
	struct lr_wait wait;
	struct lr_watch watch;
	int watching;
	int rc;
	size_t max, len;
	char *buf;
};

#define CHUNKOP_MT "rig.op.stdin_read"
#define CHUNK_DEFAULT 65536
#define CHUNK_LIMIT ((lua_Integer)16 << 20)

static void chunkop_read(struct chunkop *op)
{
	for (;;) {
		ssize_t r = read(0, op->buf, op->max);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			op->rc = -errno;
		else
			op->len = (size_t)r;
		return;
	}
}

static void chunkop_unwatch(struct chunkop *op)
{
	if (op->watching) {
		lr_watch_release(&op->watch);
		op->watching = 0;
	}
}

static void chunkop_free(struct chunkop *op)
{
	chunkop_unwatch(op);
	free(op->buf);
	op->buf = NULL;
}

static int chunkop_gc(lua_State *L)
{
	chunkop_free(lua_touserdata(L, 1));
	return 0;
}

static void chunkop_ready(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct chunkop *op = arg;
	struct pollfd p = { .fd = 0, .events = POLLIN };
	if (poll(&p, 1, 0) == 0)
		return; /* woken for nothing: wait on */
	chunkop_read(op);
	lr_watch_stop(&op->watch);
	lr_sched_wake(&op->wait);
}

static void chunkop_cancel(struct lr_wait *w)
{
	struct chunkop *op = (struct chunkop *)w;
	if (op->watching)
		lr_watch_stop(&op->watch);
}

static int chunkop_push(lua_State *L, struct chunkop *op)
{
	if (op->rc) {
		int rc = op->rc;
		chunkop_free(op);
		return lr_pushfail(L, rc, "stdin_read: cannot read standard input: %s", lr_strerror(rc));
	}
	if (op->len == 0) {
		chunkop_free(op);
		lua_pushnil(L);
		return 1;
	}
	lua_pushlstring(L, op->buf, op->len);
	chunkop_free(op);
	return 1;
}

static int stdin_read_k(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	struct chunkop *op = (struct chunkop *)ctx;
	lr_sched_resumed(L, &op->wait);
	return chunkop_push(L, op);
}

/* rig.core.stdin_read([max]) */
static int term_stdin_read(lua_State *L)
{
	lua_Integer max = luaL_optinteger(L, 1, CHUNK_DEFAULT);
	luaL_argcheck(L, max >= 1 && max <= CHUNK_LIMIT, 1, "must be between 1 and 16 MiB");
	lr_sched_enter(L);
	struct chunkop *op = lua_newuserdatauv(L, sizeof *op, 0);
	memset(op, 0, sizeof *op);
	luaL_setmetatable(L, CHUNKOP_MT);
	op->max = (size_t)max;
	op->buf = malloc(op->max);
	if (!op->buf)
		return luaL_error(L, "out of memory");
	op->wait.cancel = chunkop_cancel;
	struct stat st;
	if (fstat(0, &st) == 0 && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) && !isatty(0)) {
		chunkop_read(op);
		return chunkop_push(L, op);
	}
	if (lr_watch_init(lr_state_of(L)->loop, &op->watch, 0, chunkop_ready, op))
		return luaL_error(L, "out of memory");
	op->watching = 1;
	if (lr_watch_start(&op->watch, LR_READ)) {
		chunkop_unwatch(op);
		chunkop_read(op);
		return chunkop_push(L, op);
	}
	return lr_sched_await(L, &op->wait, (lua_KContext)op, stdin_read_k);
}

/* rig.core.isatty(fd) */
static int term_isatty(lua_State *L)
{
	lua_Integer fd = luaL_checkinteger(L, 1);
	luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "must be 0, 1 or 2");
	lua_pushboolean(L, isatty((int)fd));
	return 1;
}

void lr__term_open(lua_State *L)
{
	luaL_newmetatable(L, READOP_MT);
	lua_pushcfunction(L, readop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	luaL_newmetatable(L, CHUNKOP_MT);
	lua_pushcfunction(L, chunkop_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);
	static const luaL_Reg fns[] = {
		{ "read_line", term_read_line },
		{ "stdin_read", term_stdin_read },
		{ "isatty", term_isatty },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
