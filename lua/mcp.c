/*
 * mcp.c — rig.core.mcp_framer(max_line): the Lua face of host/mcp_frame.c,
 * used by rig.mcp's stdio transport (a server's stdout, or a server's own
 * stdin on the server side).
 *
 *   local fr = rig.core.mcp_framer(16 << 20)
 *   fr:feed(chunk) -> n        frames queued now
 *   fr:finish() -> n           end of stream: a last line without its LF
 *   fr:pop() -> line           the oldest complete line
 *            | false, total, head, tail   an oversized line: its length and ends
 *            | nil             nothing queued
 *
 * Frames wait in one contiguous queue (no allocation per line), so a feed
 * of many small messages costs one copy each and no Lua table.
 */
#include "internal.h"

#include <string.h>

#define FRAMER_MT "rig.mcp.framer"
/* A queue above this (lines nobody popped) is a caller's bug: feed raises. */
#define QUEUE_CAP ((size_t)1 << 30)

struct framer {
	struct lr_mcp_frame f;
	struct lr_buf q;   /* records: struct qrec, then head bytes, then tail bytes */
	size_t q_off;      /* read offset */
	size_t queued;
	int open;
};

struct qrec {
	size_t len, tail_len, total;
	int oversized;
};

static int queue_line(void *arg, const struct lr_mcp_line *l)
{
	struct framer *fr = arg;
	struct qrec r = { l->len, l->oversized ? l->tail_len : 0, l->total, l->oversized };
	int rc = lr_buf_add(&fr->q, &r, sizeof r);
	if (!rc)
		rc = lr_buf_add(&fr->q, l->data, l->len);
	if (!rc && r.tail_len)
		rc = lr_buf_add(&fr->q, l->tail, l->tail_len);
	if (!rc)
		fr->queued++;
	return rc;
}

static struct framer *check_framer(lua_State *L)
{
	struct framer *fr = luaL_checkudata(L, 1, FRAMER_MT);
	if (!fr->open)
		luaL_error(L, "rig.mcp.framer: the framer is closed");
	return fr;
}

/* Drops what was read when the queue is empty or mostly read. */
static void compact(struct framer *fr)
{
	if (fr->q_off == fr->q.len) {
		lr_buf_reset(&fr->q);
		fr->q_off = 0;
	} else if (fr->q_off > (64u << 10) && fr->q_off * 2 > fr->q.len) {
		lr_buf_consume(&fr->q, fr->q_off);
		fr->q_off = 0;
	}
}

static int push_status(lua_State *L, struct framer *fr, int rc)
{
	if (rc)
		return luaL_error(L, "rig.mcp.framer: %s", lr_strerror(rc));
	lua_pushinteger(L, (lua_Integer)fr->queued);
	return 1;
}

static int framer_feed(lua_State *L)
{
	struct framer *fr = check_framer(L);
	size_t n;
	const char *s = luaL_checklstring(L, 2, &n);
	compact(fr);
	return push_status(L, fr, lr_mcp_frame_feed(&fr->f, s, n, queue_line, fr));
}

static int framer_finish(lua_State *L)
{
	struct framer *fr = check_framer(L);
	compact(fr);
	return push_status(L, fr, lr_mcp_frame_finish(&fr->f, queue_line, fr));
}

static int framer_pop(lua_State *L)
{
	struct framer *fr = check_framer(L);
	if (!fr->queued) {
		lua_pushnil(L);
		return 1;
	}
	struct qrec r;
	memcpy(&r, fr->q.data + fr->q_off, sizeof r);
	const char *p = fr->q.data + fr->q_off + sizeof r;
	fr->q_off += sizeof r + r.len + r.tail_len;
	fr->queued--;
	if (!r.oversized) {
		lua_pushlstring(L, p, r.len);
		return 1;
	}
	lua_pushboolean(L, 0);
	lua_pushinteger(L, (lua_Integer)r.total);
	lua_pushlstring(L, p, r.len);
	lua_pushlstring(L, p + r.len, r.tail_len);
	return 4;
}

static int framer_close(lua_State *L)
{
	struct framer *fr = luaL_checkudata(L, 1, FRAMER_MT);
	if (fr->open) {
		fr->open = 0;
		lr_mcp_frame_release(&fr->f);
		lr_buf_release(&fr->q);
	}
	return 0;
}

/* rig.core.mcp_framer(max_line) -> framer */
static int core_mcp_framer(lua_State *L)
{
	lua_Integer max = luaL_checkinteger(L, 1);
	luaL_argcheck(L, max >= 1 && (lua_Unsigned)max <= QUEUE_CAP, 1,
		      "max_line must be 1 to 2^30 bytes");
	struct framer *fr = lua_newuserdatauv(L, sizeof *fr, 0);
	memset(fr, 0, sizeof *fr);
	luaL_setmetatable(L, FRAMER_MT);
	lr_mcp_frame_init(&fr->f, (size_t)max);
	lr_buf_init(&fr->q, QUEUE_CAP);
	fr->open = 1;
	return 1;
}

void lr__mcp_open(lua_State *L)
{
	/* stack: core */
	luaL_newmetatable(L, FRAMER_MT);
	static const luaL_Reg methods[] = {
		{ "feed", framer_feed }, { "finish", framer_finish }, { "pop", framer_pop },
		{ "close", framer_close }, { NULL, NULL },
	};
	luaL_newlib(L, methods);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, framer_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, framer_close);
	lua_setfield(L, -2, "__close");
	lua_pop(L, 1);

	lua_pushcfunction(L, core_mcp_framer);
	lua_setfield(L, -2, "mcp_framer");
}
