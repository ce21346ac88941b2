/*
 * manifest_fuzz.c — the strict tree-manifest decoder on arbitrary bytes.
 *
 * Invariant: whatever decodes re-encodes to exactly the same bytes (the
 * format has one encoding per tree), and the validating decoder agrees
 * with the decoding one.
 */
#include "../../storage/snapshot_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct lr_store *s;
	struct lr_err e;
	if (!s && lr_store_memory_open(&s, &e))
		abort();
	size_t n;
	int rc = lr_snap_manifest_check(data, size, &n);
	unsigned char h[LR_SHA256_LEN];
	if (lr_sha256(data, size, h))
		abort();
	char key[128];
	lr__snap_blob_key(key, "trees", h);
	if (lr_store_blob_put(s, key, data, size, &e))
		abort();
	struct lr__snap_tree t = { 0 };
	int rc2 = lr__snap_tree_get(s, h, &t, &e);
	if ((rc == 0) != (rc2 == 0))
		abort();
	if (rc == 0) {
		if (t.n != n)
			abort();
		/* Re-encode: the same hash means the same bytes. */
		unsigned char h2[LR_SHA256_LEN];
		if (lr__snap_tree_put(s, &t, h2, &e) || memcmp(h, h2, sizeof h))
			abort();
	}
	lr__snap_tree_release(&t);
	lr_store_blob_delete(s, key, &e);
	return 0;
}
