/*
 * proxy_head_fuzz.c — the egress proxy's request-head parser and the
 * forwarded head it builds, on arbitrary bytes.
 *
 * Invariants: a parsed head lies inside the input and the cap, its
 * header offsets too; the head alone parses the same and one byte less is
 * incomplete; the forwarded head is well-formed CRLF text ending in a blank
 * line. The input, cut at 300 bytes, is also tried as an allow-list rule.
 */
#include "../../host/host.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	static struct lr_egress_head h, h2;
	int rc = lr_egress_head_parse(buf, size, &h);
	if (rc != 0 && rc != -EAGAIN && rc != LR_EPARSE && rc != LR_ETOOBIG)
		abort();
	if (rc == 0) {
		if (h.len > size || h.len > LR_EGRESS_HEAD_MAX || !h.host[0] || !h.port ||
		    h.nhdr > LR_EGRESS_HEADERS_MAX)
			abort();
		for (int i = 0; i < h.nhdr; i++)
			if (!h.hdr[i].nlen || (size_t)h.hdr[i].name + h.hdr[i].nlen > h.len ||
			    (size_t)h.hdr[i].value + h.hdr[i].vlen > h.len)
				abort();
		if (lr_egress_head_parse(buf, h.len, &h2) != 0 || h2.len != h.len ||
		    strcmp(h2.host, h.host) != 0 || h2.port != h.port || h2.nhdr != h.nhdr)
			abort();
		if (lr_egress_head_parse(buf, h.len - 1, &h2) != -EAGAIN)
			abort();
		if (!h.connect) {
			struct lr_buf out;
			lr_buf_init(&out, 64 * 1024);
			if (lr_egress_head_forward(buf, &h, &out) != 0)
				abort();
			if (out.len < 4 || memcmp(out.data + out.len - 4, "\r\n\r\n", 4) != 0)
				abort();
			for (size_t i = 0; i < out.len; i++) {
				char c = out.data[i];
				if (c == '\0' || (c == '\n' && (i == 0 || out.data[i - 1] != '\r')) ||
				    (c == '\r' && (i + 1 == out.len || out.data[i + 1] != '\n')))
					abort();
			}
			lr_buf_release(&out);
		}
	}
	char rule[301];
	size_t n = size < 300 ? size : 300;
	memcpy(rule, buf, n);
	rule[n] = '\0';
	struct lr_err err;
	rc = lr_egress_rule_check(rule, &err);
	if (rc != 0 && rc != -EINVAL)
		abort();
	return 0;
}
