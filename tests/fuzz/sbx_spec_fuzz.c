/*
 * sbx_spec_fuzz.c — the confinement spec decoder on arbitrary bytes.
 *
 * Invariant: whatever decodes re-encodes, the encoding decodes again, and
 * its encoding is the same bytes (the encoding is canonical).
 */
#include "../../sandbox/sandbox.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lr_sbx_spec s, t;
	struct lr_err err = { "" };
	if (lr_sbx_spec_decode((const char *)data, size, &s, &err) != 0) {
		if (!err.msg[0])
			abort(); /* a refusal always says why */
		return 0;
	}
	char *e1, *e2;
	size_t n1, n2;
	if (lr_sbx_spec_encode(&s, &e1, &n1) != 0)
		abort();
	if (lr_sbx_spec_decode(e1, n1, &t, &err) != 0)
		abort();
	if (lr_sbx_spec_encode(&t, &e2, &n2) != 0)
		abort();
	if (n1 != n2 || memcmp(e1, e2, n1) != 0)
		abort();
	free(e1);
	free(e2);
	lr_sbx_spec_release(&s);
	lr_sbx_spec_release(&t);
	return 0;
}
