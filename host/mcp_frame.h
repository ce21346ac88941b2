/*
 * mcp_frame.h — MCP stdio framing (host/mcp_frame.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_MCP_FRAME_H
#define LR_HOST_MCP_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

/*
 * A push parser for the Model Context Protocol's stdio transport: JSON-RPC
 * messages as newline-delimited lines. Feed it chunks split anywhere; it
 * calls back once per line. No JSON is parsed here (rig.json decodes the
 * line above), no Lua, no I/O: the client (a server's stdout) and the
 * server side (its own stdin) share it, and so does the fuzz target.
 *
 * A line ends in LF; one CR before the LF is dropped (CRLF writers); empty
 * lines (after that) are skipped. A line longer than max_line bytes (a CR
 * before its LF counted) is not
 * an error of the stream: its bytes are dropped as they come, and at its LF
 * the callback gets one oversized report holding the first and the last
 * LR_MCP_FRAME_KEEP bytes and the full length, so the reader can still
 * name the request it answered (an "id" usually sits at either end) and the
 * stream goes on with the next line. lr_mcp_frame_finish, at the end of the
 * stream, reports a last line that lacked its LF.
 */
#define LR_MCP_FRAME_KEEP 512

struct lr_mcp_line {
	const char *data;    /* the line (no LF, no trailing CR), or an oversized line's head */
	size_t len;
	const char *tail;    /* oversized: its last bytes (may overlap the head's range) */
	size_t tail_len;
	size_t total;        /* the line's length in bytes (oversized: all of it) */
	int oversized;
};

/* Called per line; pointers are borrowed until it returns. Non-zero stops the parser (sticky). */
typedef int (*lr_mcp_frame_cb)(void *arg, const struct lr_mcp_line *line);

struct lr_mcp_frame {
	struct lr_buf line;   /* a line split across chunks (at most max_line bytes) */
	size_t max_line;
	size_t over;          /* bytes of the current oversized line seen, 0 when none */
	char head[LR_MCP_FRAME_KEEP];
	size_t head_len;
	char tail[LR_MCP_FRAME_KEEP]; /* the last bytes seen, oldest first */
	size_t tail_len;
	int status;
};

/* max_line: 1 or more bytes (the caller's cap: a client takes 16 MiB by default). */
void lr_mcp_frame_init(struct lr_mcp_frame *f, size_t max_line);
void lr_mcp_frame_release(struct lr_mcp_frame *f);
/* Returns 0, -ENOMEM or the callback's non-zero status (then sticky). */
int lr_mcp_frame_feed(struct lr_mcp_frame *f, const void *buf, size_t len, lr_mcp_frame_cb cb,
		      void *arg);
/* End of stream: reports a last line without its LF (oversized or not). */
int lr_mcp_frame_finish(struct lr_mcp_frame *f, lr_mcp_frame_cb cb, void *arg);

#endif
