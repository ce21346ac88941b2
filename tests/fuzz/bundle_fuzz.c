/*
 * bundle_fuzz.c — arbitrary bytes into the bundle reader, with small caps
 * so that the caps and the ratio check are reached quickly. A bundle that
 * verifies must be self-consistent: every manifest file present with its
 * bytes, and the entry module findable.
 */
#include "../../host/host.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lr_bundle_limits lim;
	lr_bundle_limits_default(&lim);
	lim.max_entry = 256 << 10;
	lim.max_total = 1 << 20;
	lim.max_entries = 64;
	lim.ratio_after = 16 << 10;
	lim.version = "0.1.0";
	struct lr_bundle *b = NULL;
	struct lr_err err;
	lr_err_clear(&err);
	int rc = lr_bundle_read(data, size, &lim, &b, &err);
	if (rc == 0) {
		if (!b || !lr_bundle_module(b, b->entry) || b->nfiles >= lim.max_entries)
			abort();
		size_t total = 0;
		for (size_t i = 0; i < b->nfiles; i++) {
			const struct lr_bundle_file *f = lr_bundle_find(b, b->files[i].path);
			if (f != &b->files[i] || !f->data || f->size > lim.max_entry ||
			    (f->size >= 4 && memcmp(f->data, "\x1bLua", 4) == 0))
				abort();
			total += f->size;
		}
		if (total > lim.max_total)
			abort();
		lr_bundle_free(b);
	} else if (b || !err.msg[0] || strlen(err.msg) >= sizeof err.msg) {
		abort();
	}
	return 0;
}
