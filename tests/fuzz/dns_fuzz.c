/*
 * dns_fuzz.c — the DNS stub's query parser and reply builder on arbitrary
 * datagrams.
 *
 * Invariants: a parsed query has a short lower-case name of the allowed
 * characters and a question inside the datagram; the reply echoes id and
 * question, is a response, and has exactly one 16-byte A record when asked;
 * a refused datagram with a header still gets a 12-byte FORMERR.
 */
#include "../../host/host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lr_egress_dns_query q;
	uint8_t out[4200];
	int rc = lr_egress_dns_parse(data, size, &q);
	if (rc != 0 && rc != LR_EPARSE && rc != LR_ETOOBIG)
		abort();
	if (rc == 0) {
		size_t nl = strlen(q.name);
		if (nl > 253 || q.qend < 17 || q.qend > size)
			abort();
		for (size_t i = 0; i < nl; i++) {
			char c = q.name[i];
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
			      c == '_' || c == '.'))
				abort();
		}
		for (int a = 0; a <= 1; a++) {
			int len = lr_egress_dns_reply(data, &q, a ? 0 : 3, a, out, sizeof out);
			if (len != (int)q.qend + (a ? 16 : 0) || !(out[2] & 0x80) ||
			    memcmp(out, data, 2) != 0 || memcmp(out + 12, data + 12, q.qend - 12) != 0 ||
			    out[7] != a)
				abort();
		}
	} else if (size >= 12) {
		q.qend = 0;
		if (lr_egress_dns_reply(data, &q, 1, 0, out, sizeof out) != 12 ||
		    memcmp(out, data, 2) != 0 || (out[3] & 0xf) != 1)
			abort();
	}
	return 0;
}
