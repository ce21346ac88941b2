/*
 * sse_test.c — the event-stream framer: every parsing rule, the recorded
 * provider fixtures split every way, and the caps.
 */
#include "../../host/host.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>

#define FIXTURES "tests/fixtures/"

/* Events rendered as text: "type|id|retry|data" per event, one a line. */
struct rec {
	struct lr_buf out;
	int count;
	int stop_after; /* return an error from the callback after this many; 0 never */
	int unterminated; /* events dispatched by lr_sse_finish; last_cut: the last one was */
	int last_cut;
};

static int rec_cb(void *arg, const struct lr_sse_event *ev)
{
	struct rec *r = arg;
	r->count++;
	r->unterminated += ev->unterminated;
	r->last_cut = ev->unterminated;
	lr_buf_add(&r->out, ev->type, ev->type_len);
	lr_buf_addstr(&r->out, "|");
	if (ev->id)
		lr_buf_add(&r->out, ev->id, ev->id_len);
	else
		lr_buf_addstr(&r->out, "<nil>");
	lr_buf_printf(&r->out, "|%ld|", ev->retry);
	lr_buf_add(&r->out, ev->data, ev->data_len);
	lr_buf_addstr(&r->out, "\n");
	if (r->stop_after && r->count >= r->stop_after)
		return -ECANCELED;
	return 0;
}

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof *r);
	lr_buf_init(&r->out, 1 << 26);
	lr_buf_addstr(&r->out, "");
}

/* Parses s fed in the given chunk sizes (0-terminated list; the rest whole). */
static int parse_split(const char *s, size_t n, const size_t *cuts, size_t ncuts, struct rec *r,
		       size_t max_line, size_t max_event)
{
	struct lr_sse p;
	lr_sse_init(&p, max_line, max_event);
	rec_init(r);
	size_t off = 0;
	int rc = 0;
	for (size_t i = 0; i < ncuts && !rc; i++) {
		size_t c = cuts[i] > n - off ? n - off : cuts[i];
		rc = lr_sse_feed(&p, s + off, c, rec_cb, r);
		off += c;
	}
	if (!rc)
		rc = lr_sse_feed(&p, s + off, n - off, rec_cb, r);
	if (!rc)
		rc = lr_sse_finish(&p, rec_cb, r);
	lr_sse_release(&p);
	return rc;
}

static int parse_bytes(const char *s, size_t n, struct rec *r)
{
	struct lr_sse p;
	lr_sse_init(&p, 1 << 20, 1 << 24);
	rec_init(r);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		rc = lr_sse_feed(&p, s + i, 1, rec_cb, r);
	if (!rc)
		rc = lr_sse_finish(&p, rec_cb, r);
	lr_sse_release(&p);
	return rc;
}

/*
 * Pulled the way the HTTP client reads: bytes arrive step at a time into
 * one buffer, events are taken one per lr_sse_next, and the used bytes are
 * dropped by moving the rest to the front (the same bytes, moved).
 */
static int parse_pull(const char *s, size_t n, size_t step, struct rec *r)
{
	struct lr_sse p;
	lr_sse_init(&p, 1 << 20, 1 << 24);
	rec_init(r);
	char *buf = malloc(n + 1);
	size_t have = 0, fed = 0;
	int rc = 0;
	struct lr_sse_event last;
	while (!rc) {
		struct lr_sse_event ev;
		size_t used;
		rc = lr_sse_next(&p, buf, have, &used, &ev);
		if (rc < 0)
			break;
		int got = rc == 1;
		if (got)
			rc = rec_cb(r, &ev); /* ev borrows buf: use it before moving */
		memmove(buf, buf + used, have - used);
		have -= used;
		if (rc || (got && have))
			continue; /* more events may wait in what is left */
		if (fed == n)
			break;
		size_t c = n - fed < step ? n - fed : step;
		memcpy(buf + have, s + fed, c);
		have += c;
		fed += c;
	}
	while (!rc && (rc = lr_sse_end(&p, &last)) == 1)
		rc = rec_cb(r, &last);
	free(buf);
	lr_sse_release(&p);
	return rc;
}

/* Whole, byte by byte and every 2-way split must agree; returns the events. */
static void check_all_splits(const char *s, size_t n, const char *want)
{
	struct rec whole, r;
	CHECK_EQ_INT(parse_split(s, n, NULL, 0, &whole, 1 << 20, 1 << 24), 0);
	if (want)
		CHECK_EQ_STR(whole.out.data, want);
	CHECK_EQ_INT(parse_bytes(s, n, &r), 0);
	CHECK_EQ_STR(r.out.data, whole.out.data);
	lr_buf_release(&r.out);
	for (size_t step = 1; step <= n + 1; step++) {
		CHECK_EQ_INT(parse_pull(s, n, step, &r), 0);
		if (strcmp(r.out.data, whole.out.data) != 0) {
			fprintf(stderr, "pulled %zu bytes at a time differs\n", step);
			CHECK_EQ_STR(r.out.data, whole.out.data);
		}
		lr_buf_release(&r.out);
	}
	for (size_t cut = 0; cut <= n; cut++) {
		CHECK_EQ_INT(parse_split(s, n, &cut, 1, &r, 1 << 20, 1 << 24), 0);
		if (strcmp(r.out.data, whole.out.data) != 0) {
			fprintf(stderr, "split at %zu differs\n", cut);
			CHECK_EQ_STR(r.out.data, whole.out.data);
			lr_buf_release(&r.out);
			break;
		}
		lr_buf_release(&r.out);
	}
	lr_buf_release(&whole.out);
}

static void expect_events(const char *s, const char *want)
{
	check_all_splits(s, strlen(s), want);
}

TEST(basic_event)
{
	expect_events("data: hello\n\n", "message|<nil>|-1|hello\n");
}

TEST(multi_line_data_joined)
{
	expect_events("data: a\ndata: b\ndata:c\n\n", "message|<nil>|-1|a\nb\nc\n");
}

TEST(line_endings_lf_crlf_cr)
{
	expect_events("data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\ndata: e\r\r\n",
		      "message|<nil>|-1|a\nmessage|<nil>|-1|b\nmessage|<nil>|-1|c\n"
		      "message|<nil>|-1|d\ne\n");
}

TEST(one_space_stripped)
{
	expect_events("data:  two\n\ndata:none\n\n", "message|<nil>|-1| two\nmessage|<nil>|-1|none\n");
}

TEST(comments_ignored)
{
	expect_events(": ping\ndata: x\n: mid\ndata: y\n\n:only comment\n\n",
		      "message|<nil>|-1|x\ny\n");
}

TEST(event_name_and_reset)
{
	expect_events("event: add\ndata: 1\n\ndata: 2\n\nevent: lost\n\ndata: 3\n\n",
		      "add|<nil>|-1|1\nmessage|<nil>|-1|2\nmessage|<nil>|-1|3\n");
}

TEST(id_persists_and_clears)
{
	expect_events("id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 9\n\ndata: d\n\n",
		      "message|7|-1|a\nmessage|7|-1|b\nmessage|<nil>|-1|c\nmessage|9|-1|d\n");
}

TEST(id_with_nul_ignored)
{
	const char s[] = "id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n";
	check_all_splits(s, sizeof s - 1, "message|1|-1|a\nmessage|1|-1|b\n");
}

TEST(retry_digits_only)
{
	expect_events("retry: 1500\ndata: a\n\nretry: 15x\ndata: b\n\nretry:\ndata: c\n\n",
		      "message|<nil>|1500|a\nmessage|<nil>|-1|b\nmessage|<nil>|-1|c\n");
}

TEST(unknown_fields_and_no_colon)
{
	/* "data" without a colon is data with an empty value. */
	expect_events("foo: bar\ndata\ndata\n\nevent\ndata: z\n\n",
		      "message|<nil>|-1|\n\nmessage|<nil>|-1|z\n");
}

TEST(empty_data_dispatches_empty_string)
{
	expect_events("data:\n\n", "message|<nil>|-1|\n");
}

TEST(no_data_no_dispatch)
{
	expect_events("event: x\nid: 3\n\n\n\n", "");
}

TEST(bom_stripped_once)
{
	expect_events("\xEF\xBB\xBF" "data: a\n\n", "message|<nil>|-1|a\n");
	/* A second BOM is part of the field name: an unknown field. */
	expect_events("\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\ndata: b\n\n", "message|<nil>|-1|b\n");
	/* A partial BOM is data of the first line. */
	expect_events("\xEF\xBB" "data: a\n\ndata: b\n\n", "message|<nil>|-1|b\n");
}

TEST(finish_dispatches_last_event)
{
	expect_events("data: a\n\ndata: last", "message|<nil>|-1|a\nmessage|<nil>|-1|last\n");
	expect_events("event: e\ndata: last\n", "e|<nil>|-1|last\n");
	expect_events("data: a\r", "message|<nil>|-1|a\n");
}

/* An event the end of the stream cut short says so (a model stream cut mid-event). */
TEST(finish_marks_unterminated)
{
	struct rec r;
	const char *cut = "data: a\n\ndata: {\"half\":";
	CHECK_EQ_INT(parse_split(cut, strlen(cut), NULL, 0, &r, 100, 100), 0);
	CHECK_EQ_INT(r.count, 2);
	CHECK_EQ_INT(r.unterminated, 1);
	CHECK_EQ_INT(r.last_cut, 1);
	lr_buf_release(&r.out);
	const char *whole = "data: a\n\ndata: b\n\n";
	CHECK_EQ_INT(parse_bytes(whole, strlen(whole), &r), 0);
	CHECK_EQ_INT(r.count, 2);
	CHECK_EQ_INT(r.unterminated, 0);
	lr_buf_release(&r.out);
}

TEST(data_with_nul_bytes)
{
	const char s[] = "data: a\0b\n\n";
	struct rec r;
	CHECK_EQ_INT(parse_split(s, sizeof s - 1, NULL, 0, &r, 100, 100), 0);
	CHECK_EQ_INT(r.out.len, strlen("message|<nil>|-1|") + 4);
	lr_buf_release(&r.out);
}

TEST(line_cap)
{
	struct rec r;
	const char *s = "data: 0123456789\n\n";
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 16, 100), 0);
	lr_buf_release(&r.out);
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 15, 100), LR_ETOOBIG);
	lr_buf_release(&r.out);
	/* The same when the line arrives in pieces. */
	size_t cuts[] = { 3, 3, 3, 3 };
	CHECK_EQ_INT(parse_split(s, strlen(s), cuts, 4, &r, 15, 100), LR_ETOOBIG);
	CHECK_EQ_INT(r.count, 0);
	lr_buf_release(&r.out);
	/* An unterminated line that only grows is capped too. */
	struct lr_sse p;
	lr_sse_init(&p, 8, 100);
	rec_init(&r);
	CHECK_EQ_INT(lr_sse_feed(&p, "data: 12", 8, rec_cb, &r), 0);
	CHECK_EQ_INT(lr_sse_feed(&p, "3", 1, rec_cb, &r), LR_ETOOBIG);
	/* Sticky. */
	CHECK_EQ_INT(lr_sse_feed(&p, "\n\n", 2, rec_cb, &r), LR_ETOOBIG);
	CHECK_EQ_INT(lr_sse_finish(&p, rec_cb, &r), LR_ETOOBIG);
	CHECK_EQ_INT(r.count, 0);
	lr_sse_release(&p);
	lr_buf_release(&r.out);
}

TEST(event_cap)
{
	struct rec r;
	const char *s = "data: 12345\ndata: 67890\n\n";
	/* 11 data bytes: 5 + "\n" + 5. */
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 100, 11), 0);
	CHECK_EQ_STR(r.out.data, "message|<nil>|-1|12345\n67890\n");
	lr_buf_release(&r.out);
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 100, 10), LR_ETOOBIG);
	CHECK_EQ_INT(r.count, 0);
	lr_buf_release(&r.out);
	/* A one-line event lying whole in the input is capped alike. */
	s = "data: 12345\n\n";
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 100, 5), 0);
	CHECK_EQ_STR(r.out.data, "message|<nil>|-1|12345\n");
	lr_buf_release(&r.out);
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 100, 4), LR_ETOOBIG);
	CHECK_EQ_INT(r.count, 0);
	lr_buf_release(&r.out);
	/* The cap is per event: many small events pass. */
	struct lr_buf many;
	lr_buf_init(&many, 1 << 20);
	for (int i = 0; i < 1000; i++)
		lr_buf_addstr(&many, "data: 12345\n\n");
	CHECK_EQ_INT(parse_split(many.data, many.len, NULL, 0, &r, 100, 5), 0);
	CHECK_EQ_INT(r.count, 1000);
	lr_buf_release(&r.out);
	lr_buf_release(&many);
}

/*
 * An event that is one "data:" line and its blank line, whole in the input,
 * is handed out at once; the fields before it, the id after it and a CR
 * further on still count.
 */
TEST(one_line_events_whole)
{
	struct rec r;
	const char *s = "event: a\ndata: x\n\ndata:\n\nid: 7\ndata:  y\n\ndata: z\r\n\r\ndata: w\n\n";
	CHECK_EQ_INT(parse_split(s, strlen(s), NULL, 0, &r, 100, 100), 0);
	CHECK_EQ_STR(r.out.data, "a|<nil>|-1|x\nmessage|<nil>|-1|\nmessage|7|-1| y\n"
				 "message|7|-1|z\nmessage|7|-1|w\n");
	lr_buf_release(&r.out);
}

TEST(callback_status_stops)
{
	struct rec r;
	struct lr_sse p;
	lr_sse_init(&p, 100, 100);
	rec_init(&r);
	r.stop_after = 2;
	const char *s = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
	CHECK_EQ_INT(lr_sse_feed(&p, s, strlen(s), rec_cb, &r), -ECANCELED);
	CHECK_EQ_INT(r.count, 2);
	CHECK_EQ_INT(lr_sse_finish(&p, rec_cb, &r), -ECANCELED);
	lr_sse_release(&p);
	lr_buf_release(&r.out);
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct lr_buf b;
	lr_buf_init(&b, 1 << 24);
	char tmp[4096];
	size_t k;
	while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
		lr_buf_add(&b, tmp, k);
	fclose(f);
	return lr_buf_take(&b, n);
}

static void check_fixture(const char *name, int want_count, const char *first_type,
			  const char *last_data_prefix)
{
	size_t n;
	char *s = read_file(name, &n);
	CHECK(s != NULL);
	if (!s)
		return;
	check_all_splits(s, n, NULL);
	struct rec r;
	CHECK_EQ_INT(parse_split(s, n, NULL, 0, &r, 1 << 20, 1 << 24), 0);
	CHECK_EQ_INT(r.count, want_count);
	CHECK(strncmp(r.out.data, first_type, strlen(first_type)) == 0);
	/* The last event line. */
	char *last = r.out.data + r.out.len - 1;
	while (last > r.out.data && last[-1] != '\n')
		last--;
	const char *d = strstr(last, "|-1|");
	CHECK(d && strncmp(d + 4, last_data_prefix, strlen(last_data_prefix)) == 0);
	lr_buf_release(&r.out);
	free(s);
}

TEST(fixture_anthropic_tool_use)
{
	/* Ends without a trailing newline: the last event is still delivered. */
	check_fixture(FIXTURES "anthropic_tool_use.sse", 15, "message_start|",
		      "{\"type\":\"message_stop\"}");
}

TEST(fixture_openai_parallel_tool_calls)
{
	check_fixture(FIXTURES "openai_chat_parallel_tool_calls.sse", 26, "message|", "[DONE]");
}

TEST(fixture_openai_length_truncated)
{
	check_fixture(FIXTURES "openai_chat_length_truncated.sse", 5, "message|", "[DONE]");
}

/* The .jsonl fixtures framed as "data: <line>\n\n" give one event per line. */
static void check_jsonl(const char *name)
{
	size_t n;
	char *s = read_file(name, &n);
	CHECK(s != NULL);
	if (!s)
		return;
	struct lr_buf framed;
	lr_buf_init(&framed, 1 << 24);
	int lines = 0;
	for (char *p = s, *nl; p < s + n; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(s + n - p));
		if (!nl)
			nl = s + n;
		if (nl == p)
			continue;
		lr_buf_addstr(&framed, "data: ");
		lr_buf_add(&framed, p, (size_t)(nl - p));
		lr_buf_addstr(&framed, "\r\n\r\n");
		lines++;
	}
	check_all_splits(framed.data, framed.len, NULL);
	struct rec r;
	CHECK_EQ_INT(parse_split(framed.data, framed.len, NULL, 0, &r, 1 << 20, 1 << 24), 0);
	CHECK_EQ_INT(r.count, lines);
	CHECK(lines > 5);
	lr_buf_release(&r.out);
	lr_buf_release(&framed);
	free(s);
}

TEST(fixture_jsonl)
{
	check_jsonl(FIXTURES "anthropic_thinking_signature.jsonl");
	check_jsonl(FIXTURES "openai_responses_function_call.jsonl");
}

/* Throughput on ~100 MB of ~200-byte events; printed, never asserted. */
static int count_cb(void *arg, const struct lr_sse_event *ev)
{
	(void)ev;
	(*(long *)arg)++;
	return 0;
}

TEST(throughput)
{
	const char *big = getenv("SSE_BENCH_MB");
	size_t mb = big ? (size_t)atoi(big) : 8;
	struct lr_buf ev;
	lr_buf_init(&ev, 1 << 20);
	lr_buf_addstr(&ev, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
			   "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"");
	while (ev.len < 190)
		lr_buf_addstr(&ev, "x");
	lr_buf_addstr(&ev, "\"}}\n\n");
	size_t total = mb << 20, per = ev.len;
	size_t nev = total / per;
	struct lr_buf stream;
	lr_buf_init(&stream, total + per);
	for (size_t i = 0; i < nev; i++)
		lr_buf_add(&stream, ev.data, ev.len);
	struct lr_sse p;
	lr_sse_init(&p, 1 << 20, 16 << 20);
	long count = 0;
	uint64_t t0 = lr_now_ns();
	/* 16 KiB chunks, as libcurl hands them over. */
	for (size_t off = 0; off < stream.len; off += 16384) {
		size_t c = stream.len - off < 16384 ? stream.len - off : 16384;
		lr_sse_feed(&p, stream.data + off, c, count_cb, &count);
	}
	lr_sse_finish(&p, count_cb, &count);
	double secs = (double)(lr_now_ns() - t0) / 1e9;
	CHECK_EQ_INT(count, (long)nev);
	printf("# sse: %zu MB of %zu-byte events in %.3f s = %.0f MB/s\n", mb, per, secs,
	       (double)stream.len / (1 << 20) / secs);
	lr_sse_release(&p);
	lr_buf_release(&stream);
	lr_buf_release(&ev);
}

int main(void)
{
	RUN(basic_event);
	RUN(multi_line_data_joined);
	RUN(line_endings_lf_crlf_cr);
	RUN(one_space_stripped);
	RUN(comments_ignored);
	RUN(event_name_and_reset);
	RUN(id_persists_and_clears);
	RUN(id_with_nul_ignored);
	RUN(retry_digits_only);
	RUN(unknown_fields_and_no_colon);
	RUN(empty_data_dispatches_empty_string);
	RUN(no_data_no_dispatch);
	RUN(bom_stripped_once);
	RUN(finish_dispatches_last_event);
	RUN(finish_marks_unterminated);
	RUN(data_with_nul_bytes);
	RUN(line_cap);
	RUN(event_cap);
	RUN(one_line_events_whole);
	RUN(callback_status_stops);
	RUN(fixture_anthropic_tool_use);
	RUN(fixture_openai_parallel_tool_calls);
	RUN(fixture_openai_length_truncated);
	RUN(fixture_jsonl);
	RUN(throughput);
	return test_summary();
}
