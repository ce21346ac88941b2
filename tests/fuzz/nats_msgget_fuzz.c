/*
 * nats_msgget_fuzz.c — the reader of JetStream message-get replies (what a
 * stream leader answers luarig's reads on a cluster) on arbitrary bytes.
 *
 * Two invariants. Whatever the input, parsing never crashes and whatever it
 * points at lies inside the input, as do the header keys and values it
 * yields. And a reply built from the input (its bytes split into a data
 * part and a header value, both base64-encoded as the server does) parses
 * back to the same data, subject, sequence and header.
 */
#include "../../storage/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct span {
	const char *lo, *hi;
	int n;
	char key[64], val[256];
};

static int inside(void *arg, const char *key, const char *val)
{
	struct span *s = arg;
	if (key < s->lo || key >= s->hi || val < s->lo || val > s->hi ||
	    key + strlen(key) >= s->hi || val + strlen(val) > s->hi)
		abort();
	if (s->n++ == 0) {
		snprintf(s->key, sizeof s->key, "%s", key);
		snprintf(s->val, sizeof s->val, "%s", val);
	}
	return 0;
}

static size_t b64(char *out, const uint8_t *in, size_t n)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);
		out[o++] = t[v >> 18 & 63];
		out[o++] = t[v >> 12 & 63];
		out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? t[v & 63] : '=';
	}
	out[o] = 0;
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* 1: the input as a reply */
	char *body = malloc(size + 1);
	if (!body)
		return 0;
	memcpy(body, data, size);
	body[size] = 0;
	size_t len = strlen(body); /* the reply ends at a NUL, as the caller's copy does */
	struct lr__msgget g;
	int rc = lr__nats_msgget_parse(body, &g);
	if (rc == 0) {
		if (!g.subject || g.subject < body || g.subject > body + len ||
		    (g.data && (g.data < body || g.data + g.data_len > body + len)) ||
		    (g.hdrs && (g.hdrs < body || g.hdrs + g.hdrs_len > body + len)))
			abort();
		struct span s = { body, body + len + 1, 0, "", "" };
		lr__nats_hdrs_each(g.hdrs, g.hdrs_len, inside, &s);
	} else if (rc != 1 && rc != 2 && rc != LR_ECORRUPT) {
		abort();
	}
	free(body);

	/* 2: a reply made from the input parses back */
	size_t cut = size ? data[0] % (size < 64 ? size : 64) : 0;
	const uint8_t *val = data, *payload = data + cut;
	size_t vlen = cut, plen = size - cut;
	char hv[64];
	size_t k = 0;
	for (size_t i = 0; i < vlen && k < sizeof hv - 1; i++)
		if (val[i] > ' ' && val[i] < 0x7f)
			hv[k++] = (char)val[i]; /* a header value: printable, no spaces */
	hv[k] = 0;
	char hdr[128];
	int hn = snprintf(hdr, sizeof hdr, "NATS/1.0\r\nLr-Seq: %s\r\n\r\n", hv);
	char *hb = malloc(((size_t)hn + 2) / 3 * 4 + 1), *db = malloc((plen + 2) / 3 * 4 + 1);
	char *reply = malloc((size_t)hn * 2 + plen * 2 + 256);
	if (hb && db && reply) {
		b64(hb, (const uint8_t *)hdr, (size_t)hn);
		b64(db, payload, plen);
		sprintf(reply, "{\"type\":\"io.nats.jetstream.api.v1.stream_msg_get_response\","
			       "\"message\":{\"subject\":\"lr.x.ledger.s\",\"seq\":%zu,\"hdrs\":\"%s\","
			       "\"data\":\"%s\",\"time\":\"2026-12-01T00:00:00Z\"}}",
			size, hb, db);
		if (lr__nats_msgget_parse(reply, &g) != 0 || strcmp(g.subject, "lr.x.ledger.s") ||
		    g.seq != size || g.data_len != plen || (plen && memcmp(g.data, payload, plen)))
			abort();
		struct span s = { reply, reply + strlen(reply) + 1, 0, "", "" };
		s.hi = g.hdrs + g.hdrs_len + 1;
		s.lo = g.hdrs;
		lr__nats_hdrs_each(g.hdrs, g.hdrs_len, inside, &s);
		if (s.n != 1 || strcmp(s.key, "Lr-Seq") || strcmp(s.val, hv))
			abort();
	}
	free(hb);
	free(db);
	free(reply);
	return 0;
}
