/*
 * mcp_frame.c — newline-delimited JSON-RPC framing for the MCP stdio
 * transport (mcp_frame.h says the rules).
 *
 * Speed matters a little (a tools/call round trip is benchmarked against
 * the official SDK): line ends are found with memchr, a line lying whole
 * inside a chunk is handed out in place, and only a line split across
 * chunks is copied into f->line. An oversized line is never buffered: only
 * its head and its tail are kept, so a server that writes 1 GiB on one
 * line costs 1 KiB of memory here.
 */
#include "mcp_frame.h"

#include <errno.h>
#include <string.h>

void lr_mcp_frame_init(struct lr_mcp_frame *f, size_t max_line)
{
	memset(f, 0, sizeof *f);
	f->max_line = max_line ? max_line : 1;
	lr_buf_init(&f->line, f->max_line);
}

void lr_mcp_frame_release(struct lr_mcp_frame *f)
{
	if (!f)
		return;
	lr_buf_release(&f->line);
}

/* Keeps the last LR_MCP_FRAME_KEEP bytes of an oversized line. */
static void keep_tail(struct lr_mcp_frame *f, const char *p, size_t n)
{
	if (n >= LR_MCP_FRAME_KEEP) {
		memcpy(f->tail, p + n - LR_MCP_FRAME_KEEP, LR_MCP_FRAME_KEEP);
		f->tail_len = LR_MCP_FRAME_KEEP;
		return;
	}
	size_t keep = f->tail_len + n > LR_MCP_FRAME_KEEP ? LR_MCP_FRAME_KEEP - n : f->tail_len;
	memmove(f->tail, f->tail + f->tail_len - keep, keep);
	memcpy(f->tail + keep, p, n);
	f->tail_len = keep + n;
}

/* Bytes of an oversized line: counted, head and tail kept, the rest dropped. */
static void over_add(struct lr_mcp_frame *f, const char *p, size_t n)
{
	if (f->head_len < LR_MCP_FRAME_KEEP) {
		size_t h = LR_MCP_FRAME_KEEP - f->head_len;
		if (h > n)
			h = n;
		memcpy(f->head + f->head_len, p, h);
		f->head_len += h;
	}
	keep_tail(f, p, n);
	f->over += n;
}

/* Turns the partial line into an oversized one (it just outgrew max_line). */
static void go_over(struct lr_mcp_frame *f)
{
	f->over = 0;
	f->head_len = f->tail_len = 0;
	over_add(f, f->line.data ? f->line.data : "", f->line.len);
	lr_buf_reset(&f->line);
}

static int emit_line(const char *p, size_t n, lr_mcp_frame_cb cb, void *arg)
{
	if (n && p[n - 1] == '\r')
		n--;
	if (n == 0)
		return 0;
	struct lr_mcp_line l = { .data = p, .len = n, .total = n };
	return cb(arg, &l);
}

static int emit_over(struct lr_mcp_frame *f, lr_mcp_frame_cb cb, void *arg)
{
	/* A trailing CR belongs to the line end, not the line. */
	size_t tail_len = f->tail_len, total = f->over;
	if (tail_len && f->tail[tail_len - 1] == '\r') {
		tail_len--;
		total--;
	}
	size_t head_len = f->head_len < total ? f->head_len : total;
	struct lr_mcp_line l = { .data = f->head, .len = head_len, .tail = f->tail,
				 .tail_len = tail_len, .total = total, .oversized = 1 };
	f->over = 0;
	f->head_len = f->tail_len = 0;
	return cb(arg, &l);
}

int lr_mcp_frame_feed(struct lr_mcp_frame *f, const void *buf, size_t len, lr_mcp_frame_cb cb,
		      void *arg)
{
	const char *p = buf, *end = p + len;
	if (f->status)
		return f->status;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		int rc = 0;
		if (f->over) {
			over_add(f, p, n);
			if (nl)
				rc = emit_over(f, cb, arg);
		} else if (f->line.len + n > f->max_line) {
			go_over(f);
			over_add(f, p, n);
			if (nl)
				rc = emit_over(f, cb, arg);
		} else if (f->line.len) {
			rc = lr_buf_add(&f->line, p, n);
			if (!rc && nl) {
				rc = emit_line(f->line.data, f->line.len, cb, arg);
				lr_buf_reset(&f->line);
			}
		} else if (nl) {
			rc = emit_line(p, n, cb, arg); /* in place: no copy */
		} else {
			rc = lr_buf_add(&f->line, p, n);
		}
		if (rc) {
			f->status = rc;
			return rc;
		}
		p += n + (nl ? 1 : 0);
	}
	return 0;
}

int lr_mcp_frame_finish(struct lr_mcp_frame *f, lr_mcp_frame_cb cb, void *arg)
{
	int rc = f->status;
	if (rc)
		return rc;
	if (f->over)
		rc = emit_over(f, cb, arg);
	else if (f->line.len)
		rc = emit_line(f->line.data, f->line.len, cb, arg);
	lr_buf_reset(&f->line);
	if (rc)
		f->status = rc;
	return rc;
}
