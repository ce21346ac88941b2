/*
 * tar_fuzz.c — the snapshot tar importer on arbitrary bytes, in memory,
 * with small caps. Whatever it accepts must be a readable snapshot whose
 * diff against itself is empty; it never touches the file system.
 */
#include "../../storage/storage.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lr_err e;
	struct lr_store *s;
	struct lr_snap *sn;
	if (lr_store_memory_open(&s, &e))
		abort();
	struct lr_snap_opts o = { .import_max_entries = 64, .import_max_bytes = 1 << 16 };
	if (lr_snap_new(s, &o, &sn, &e))
		abort();
	char ref[LR_SNAP_REF_MAX];
	int rc = lr_snap_import_mem(sn, data, size, ref, &e);
	if (rc == 0) {
		struct lr_snap_diff d;
		if (lr_snap_diff(sn, ref, ref, &d, &e) || d.nadded || d.nremoved || d.nmodified)
			abort();
		lr_snap_diff_release(&d);
		const char *live[] = { ref };
		struct lr_snap_gc_stats st;
		if (lr_snap_gc(sn, live, 1, &st, &e) || st.deleted)
			abort();
	} else if (rc != LR_EREFUSED && rc != LR_EPARSE && rc != LR_EUNAVAILABLE) {
		abort();
	}
	lr_snap_free(sn);
	lr_store_close(s);
	return 0;
}
