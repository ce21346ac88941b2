/*
 * mcp_frame_test.c — the MCP stdio line framer: line ends, empty lines,
 * lines split everywhere, the line cap (head, tail and length of an
 * oversized line, and the stream going on after it), the end of stream and
 * a callback's sticky status.
 */
#include "../../host/host.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>

/* Lines rendered as text, one per line: "L:<bytes>" or "O:<total>:<head>|<tail>". */
struct rec {
	struct lr_buf out;
	int count;
	int stop_after;
};

static int rec_cb(void *arg, const struct lr_mcp_line *l)
{
	struct rec *r = arg;
	r->count++;
	if (l->oversized) {
		lr_buf_printf(&r->out, "O:%zu:", l->total);
		lr_buf_add(&r->out, l->data, l->len);
		lr_buf_addstr(&r->out, "|");
		lr_buf_add(&r->out, l->tail, l->tail_len);
	} else {
		lr_buf_addstr(&r->out, "L:");
		lr_buf_add(&r->out, l->data, l->len);
		if (l->total != l->len)
			lr_buf_addstr(&r->out, "<bad total>");
	}
	lr_buf_addstr(&r->out, "\n");
	if (r->stop_after && r->count >= r->stop_after)
		return -ECANCELED;
	return 0;
}

/* Feeds s in pieces of `step` bytes (0: whole), then finishes; returns the rendering. */
static char *frame(const char *s, size_t n, size_t max_line, size_t step, int *rc_out)
{
	struct rec r;
	memset(&r, 0, sizeof r);
	lr_buf_init(&r.out, 1 << 24);
	struct lr_mcp_frame f;
	lr_mcp_frame_init(&f, max_line);
	int rc = 0;
	if (!step)
		step = n ? n : 1;
	for (size_t off = 0; off < n && !rc; off += step)
		rc = lr_mcp_frame_feed(&f, s + off, off + step > n ? n - off : step, rec_cb, &r);
	if (!rc)
		rc = lr_mcp_frame_finish(&f, rec_cb, &r);
	lr_mcp_frame_release(&f);
	if (rc_out)
		*rc_out = rc;
	lr_buf_addstr(&r.out, "");
	return lr_buf_take(&r.out, NULL);
}

static void check_all_splits(const char *s, size_t max_line, const char *want)
{
	size_t n = strlen(s);
	for (size_t step = 0; step <= n + 1; step++) {
		int rc = -1;
		char *got = frame(s, n, max_line, step, &rc);
		if (strcmp(got, want) != 0 || rc != 0) {
			fprintf(stderr, "step %zu: got\n%s\nwant\n%s\n", step, got, want);
			CHECK(0);
		}
		free(got);
	}
}

TEST(lines_and_line_ends)
{
	check_all_splits("{\"a\":1}\n{\"b\":2}\r\n", 64, "L:{\"a\":1}\nL:{\"b\":2}\n");
	/* empty lines (also CRLF ones) are skipped; a CR inside a line stays */
	check_all_splits("\n\r\n{}\n\n", 64, "L:{}\n");
	check_all_splits("a\rb\n", 64, "L:a\rb\n");
	/* a last line without LF is reported at the end, a last CR dropped */
	check_all_splits("x\ny", 64, "L:x\nL:y\n");
	check_all_splits("x\r", 64, "L:x\n");
	check_all_splits("", 64, "");
}

TEST(line_cap)
{
	/* exactly max_line fits; one more is oversized; the stream goes on */
	check_all_splits("abcd\nabcde\nok\n", 4, "L:abcd\nO:5:abcde|abcde\nL:ok\n");
	/* the CR of a CRLF counts towards the cap but not towards the line */
	check_all_splits("abc\r\nabcd\r\n", 4, "L:abc\nO:4:abcd|abcd\n");
	/* an oversized last line without LF */
	check_all_splits("ok\nabcdef", 4, "L:ok\nO:6:abcdef|abcdef\n");
}

TEST(oversized_keeps_head_and_tail)
{
	size_t n = 100000;
	char *s = malloc(n + 2);
	for (size_t i = 0; i < n; i++)
		s[i] = (char)('a' + i % 26);
	memcpy(s, "{\"result\":", 10);
	memcpy(s + n - 9, "\"id\":42}", 8);
	s[n - 1] = '}';
	s[n] = '\n';
	s[n + 1] = '\0';
	size_t steps[] = { 0, 1, 7, 511, 512, 513, 4096 };
	for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
		struct rec r;
		memset(&r, 0, sizeof r);
		lr_buf_init(&r.out, 1 << 20);
		struct lr_mcp_frame f;
		lr_mcp_frame_init(&f, 1000);
		size_t step = steps[k] ? steps[k] : n + 1;
		for (size_t off = 0; off < n + 1; off += step)
			CHECK_EQ_INT(lr_mcp_frame_feed(&f, s + off, off + step > n + 1 ? n + 1 - off : step,
						       rec_cb, &r), 0);
		CHECK_EQ_INT(r.count, 1);
		char want[64];
		snprintf(want, sizeof want, "O:%zu:{\"result\":", n);
		CHECK(strncmp(r.out.data, want, strlen(want)) == 0);
		/* head is exactly LR_MCP_FRAME_KEEP bytes, tail the last ones */
		const char *bar = strchr(r.out.data, '|');
		CHECK(bar && (size_t)(bar - r.out.data) == strlen(want) - 10 + LR_MCP_FRAME_KEEP);
		CHECK(bar && strlen(bar + 1) == LR_MCP_FRAME_KEEP + 1);
		CHECK(bar && memcmp(bar + 1 + LR_MCP_FRAME_KEEP - 9, "\"id\":42}}", 9) == 0);
		/* nothing of it was buffered */
		CHECK(f.line.alloc <= 2 * 1000 + 64);
		lr_mcp_frame_release(&f);
		lr_buf_release(&r.out);
	}
	free(s);
}

TEST(callback_status_sticks)
{
	struct rec r;
	memset(&r, 0, sizeof r);
	lr_buf_init(&r.out, 1 << 20);
	r.stop_after = 2;
	struct lr_mcp_frame f;
	lr_mcp_frame_init(&f, 64);
	CHECK_EQ_INT(lr_mcp_frame_feed(&f, "a\nb\nc\n", 6, rec_cb, &r), -ECANCELED);
	CHECK_EQ_INT(r.count, 2);
	CHECK_EQ_INT(lr_mcp_frame_feed(&f, "d\n", 2, rec_cb, &r), -ECANCELED);
	CHECK_EQ_INT(lr_mcp_frame_finish(&f, rec_cb, &r), -ECANCELED);
	CHECK_EQ_INT(r.count, 2);
	lr_mcp_frame_release(&f);
	lr_buf_release(&r.out);
}

int main(void)
{
	RUN(lines_and_line_ends);
	RUN(line_cap);
	RUN(oversized_keeps_head_and_tail);
	RUN(callback_status_sticks);
	return test_summary();
}
