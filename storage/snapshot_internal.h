/*
 * snapshot_internal.h — shared between storage/snapshot.c and storage/tar.c
 * only: the decoded manifest, the snapshotter's fields, and the helpers the
 * tar importer and exporter use to read and write trees.
 */
#ifndef LR_STORAGE_SNAPSHOT_INTERNAL_H
#define LR_STORAGE_SNAPSHOT_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

#define LR__SNAP_NAME_MAX 255
#define LR__SNAP_TARGET_MAX 4095

/* One manifest entry; name and target are NUL-terminated copies (owned). */
struct lr__snap_ent {
	char *name;
	size_t nlen;
	char type; /* 'd', 'f', 'l' */
	uint16_t mode;
	uint64_t size;
	unsigned char hash[LR_SHA256_LEN];
	char *target;
};

struct lr__snap_tree {
	struct lr__snap_ent *e;
	size_t n, cap;
};

/* qsort that accepts an empty (NULL) array, which qsort itself may not be given. */
static inline void sort_n(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
	if (n > 1)
		qsort(base, n, size, cmp);
}

struct lr__statcache;

struct lr_snap {
	struct lr_store *store;
	char *cache_dir;
	int threads;
	uint64_t racy_ns;
	uint64_t import_max_entries, import_max_bytes;
	pthread_mutex_t mu;           /* guards mem_caches */
	struct lr__statcache *mem_caches; /* when cache_dir is NULL */
};

void lr__snap_tree_release(struct lr__snap_tree *t);
/* Appends an entry (copies name/target); the tree is sorted at put time. */
int lr__snap_tree_add(struct lr__snap_tree *t, const struct lr__snap_ent *src);
/* Sorts, encodes and stores t; hash receives the manifest's SHA-256. */
int lr__snap_tree_put(struct lr_store *s, struct lr__snap_tree *t,
		      unsigned char hash[LR_SHA256_LEN], struct lr_err *e);
/* Reads, verifies (hash and format) and decodes a manifest. */
int lr__snap_tree_get(struct lr_store *s, const unsigned char hash[LR_SHA256_LEN],
		      struct lr__snap_tree *t, struct lr_err *e);
void lr__snap_ref_format(const unsigned char hash[LR_SHA256_LEN], char ref[LR_SNAP_REF_MAX]);
void lr__snap_blob_key(char *key, const char *kind, const unsigned char hash[LR_SHA256_LEN]);
/* Records ref in the index (best effort is the caller's choice). */
int lr__snap_index_put(struct lr_snap *sn, const unsigned char root[LR_SHA256_LEN],
		       uint64_t files, uint64_t bytes, struct lr_err *e);
/* Makes sure libcrypto is loaded before threads race to load it. */
int lr__snap_crypto_ready(struct lr_err *e);
/* A file/manifest name is 1..255 bytes without '/' or NUL and not "." or "..". */
int lr__snap_name_ok(const char *p, size_t n);

#endif
