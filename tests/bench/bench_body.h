/*
 * bench_body.h — a realistic enduring event for journal benchmarks: a
 * StepDone-like JSON object of 200–500 bytes with some text, from a fixed
 * pseudo-random sequence (set rng to restart it). Shared by journal_bench.c
 * and nats_bench.c.
 */
#ifndef LR_BENCH_BODY_H
#define LR_BENCH_BODY_H

#include <stdio.h>
#include <string.h>

static unsigned rng = 12345;
static unsigned rnd(void)
{
	rng = rng * 1103515245u + 12345u;
	return rng >> 8;
}

static size_t make_body(char *out, size_t cap, unsigned i, const char *sid)
{
	static const char *words[] = { "the", "file", "compiles", "now", "and", "tests",
				       "pass", "except", "one", "in", "storage", "journal" };
	char text[400];
	size_t tl = 0, want = 60 + rnd() % 280;
	while (tl < want) {
		const char *w = words[rnd() % 12];
		size_t wl = strlen(w);
		memcpy(text + tl, w, wl);
		tl += wl;
		text[tl++] = ' ';
	}
	text[tl] = '\0';
	int n = snprintf(out, cap,
			 "{\"type\":\"StepDone\",\"v\":1,\"session_id\":\"%s\","
			 "\"loop_id\":\"main\",\"turn_id\":\"t%u\",\"step_id\":\"s%u\","
			 "\"event_id\":\"ev-%08u\",\"created_at\":\"2026-11-29T10:%02u:%02u.%03uZ\","
			 "\"cause\":{\"command_id\":\"cmd-%u\"},\"text\":\"%s\"}",
			 sid, i / 10, i, i, (i / 60) % 60, i % 60, i % 1000, i / 10, text);
	return (size_t)n;
}

#endif
