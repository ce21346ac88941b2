/*
 * journal_fuzz.c — the journal record decoder on arbitrary bytes.
 *
 * Two invariants. Whatever the input, decoding never crashes, and a frame
 * the strict decoder accepts is canonical: encoding what it decoded gives
 * the input back byte for byte. And a record built from the input (kind
 * from the first byte, id length from the second, printable id bytes, the
 * rest the body) survives encode then decode unchanged.
 */
#include "../../storage/storage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lr_journal_rec r;
	struct lr_err e;
	struct lr_buf b;
	lr_buf_init(&b, (size_t)4 << 20);
	if (lr_journal_decode(data, size, "sessions/fuzz", 1, &r, &e) == 0) {
		if (lr_journal_encode(&b, r.kind, r.id, r.id_len, r.body, r.len) != 0)
			abort();
		if (b.len != size || memcmp(b.data, data, size) != 0)
			abort();
	}
	if (size >= 2) {
		int kind = data[0] % LR_JOURNAL_KIND_MAX + 1;
		size_t idl = data[1];
		if (idl > size - 2)
			idl = size - 2;
		char id[LR_JOURNAL_ID_MAX + 1];
		for (size_t i = 0; i < idl; i++)
			id[i] = (char)(0x20 + data[2 + i] % 95);
		const uint8_t *body = data + 2 + idl;
		size_t len = size - 2 - idl;
		if (lr_journal_encode(&b, kind, id, idl, body, len) != 0)
			abort();
		int rc = lr_journal_decode(b.data, b.len, "sessions/fuzz", 9, &r, &e);
		/* Fences and blob pointers have shapes; other kinds take any body. */
		if (rc && kind != LR_JOURNAL_FENCE && kind != LR_JOURNAL_BLOBPTR)
			abort();
		if (!rc && (r.kind != kind || r.id_len != idl || memcmp(r.id, id, idl) != 0 ||
			    r.len != len || (len && memcmp(r.body, body, len) != 0) || r.seq != 9))
			abort();
	}
	lr_buf_release(&b);
	return 0;
}
