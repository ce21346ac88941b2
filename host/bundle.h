/*
 * bundle.h — bundles (host/bundle.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_BUNDLE_H
#define LR_HOST_BUNDLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

/*
 * A bundle is one gzip-compressed POSIX tar archive: `rig.json` (the
 * manifest) first, then every file sorted by path, regular files only,
 * mtime 0, owner 0, no user or group names, so packing the same tree twice
 * gives the same bytes. The manifest holds format (1), name, version, entry
 * (a module name), description, luarig (the version that packed it) and
 * files: [{path, size, sha256}] sorted by path.
 *
 * Everything read from a bundle is untrusted. lr_bundle_read verifies the
 * whole archive in memory before anyone may use it, and refuses with a
 * message naming the entry: unsafe paths, links, devices, duplicates, files
 * missing from or extra to the manifest, size or SHA-256 mismatches,
 * precompiled Lua bytecode, entries or totals over their caps, and
 * compression-ratio bombs (checked while decompressing).
 * libarchive and libcrypto are opened on first use.
 */
struct lr_bundle_limits {
	size_t max_entry;   /* bytes of one entry (16 MiB) */
	size_t max_total;   /* bytes of all entries together (64 MiB) */
	size_t max_entries; /* entries, directories included (10000) */
	unsigned max_ratio; /* decompressed:compressed over any prefix (100) */
	size_t ratio_after; /* the ratio is checked past this much output (1 MiB) */
	const char *version; /* this luarig: a bundle needing a newer one is refused; NULL: no check */
};
void lr_bundle_limits_default(struct lr_bundle_limits *lim);

struct lr_bundle_file {
	char *path;          /* "lib/util.lua" */
	unsigned char *data; /* size bytes, NUL-terminated */
	size_t size;
	char sha256[65];     /* lower-case hex */
};

/* A verified bundle, owned by the caller: free with lr_bundle_free. */
struct lr_bundle {
	int format;
	char *name, *version, *entry, *luarig;
	char *description;   /* NULL when absent */
	struct lr_bundle_file *files; /* sorted by path */
	size_t nfiles;
	char *manifest;      /* the rig.json bytes as stored */
	size_t manifest_len;
};

/*
 * Reads and verifies a bundle from memory (data, len). On success *out is
 * a bundle that owns copies of everything. On failure returns LR_EREFUSED
 * (the bundle is hostile or broken), LR_EUNAVAILABLE (libarchive or
 * libcrypto missing) or -ENOMEM, and e holds a message like
 * "entry '../x.lua' escapes the bundle".
 */
int lr_bundle_read(const void *data, size_t len, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, struct lr_err *e);
/* Reads the file at path (at most max_total bytes) and verifies it as above. */
int lr_bundle_load(const char *path, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, struct lr_err *e);
void lr_bundle_free(struct lr_bundle *b);
/* The file at path, or NULL. Borrowed: lives as long as b. */
const struct lr_bundle_file *lr_bundle_find(const struct lr_bundle *b, const char *path);
/*
 * The file that serves module name ("app.cli" -> "app/cli.lua", then
 * "app/cli/init.lua"), or NULL.
 */
const struct lr_bundle_file *lr_bundle_module(const struct lr_bundle *b, const char *name);

/*
 * Writes the raw archive bytes of a list of entries to out (appended). The
 * packer uses it for real bundles; tests use it to build hostile ones, so
 * it writes whatever it is given, links and devices included.
 */
enum { LR_BUNDLE_REG, LR_BUNDLE_DIR, LR_BUNDLE_SYMLINK, LR_BUNDLE_HARDLINK,
       LR_BUNDLE_CHR, LR_BUNDLE_FIFO };
struct lr_bundle_entry {
	const char *path;
	int type;
	const void *data;  /* LR_BUNDLE_REG */
	size_t size;
	const char *link;  /* symlink or hardlink target */
};
int lr_bundle_archive(const struct lr_bundle_entry *ent, size_t n, struct lr_buf *out,
		      struct lr_err *e);

/*
 * Packs directory dir into a bundle at out, or NAME-VERSION.rig in the
 * current directory when out is NULL; the file is written to a temporary
 * name and renamed. dir may hold a rig.json with name, version, entry and
 * description. version is this luarig's, recorded in the manifest. notice
 * (may be NULL) hears about skipped dot-directories and files that do not
 * compile. compile (may be NULL) is called for every file whose name ends
 * in ".lua", with its name as "DIR/lib/x.lua" and its bytes; it returns 0
 * when the file compiles, nonzero otherwise with a message such as
 * "DIR/lib/x.lua:3: unexpected symbol near 'x'" in why.
 * Every file is tried; any failure refuses the pack and nothing is written.
 * notice and compile get arg. The path written is copied to written
 * (writtenlen bytes). Returns 0, LR_EREFUSED with e naming the path (a
 * link, a device, a bad rig.json, no entry module, a cap exceeded, Lua that
 * does not compile), LR_EUNAVAILABLE or -errno.
 */
int lr_bundle_write(const char *dir, const char *out, const char *version,
		    void (*notice)(void *arg, const char *msg),
		    int (*compile)(void *arg, const char *name, const void *data, size_t size,
				   struct lr_err *why),
		    void *arg, char *written, size_t writtenlen, struct lr_err *e);

/* Compares two versions "MAJOR.MINOR.PATCH[-pre]": <0, 0, >0; -2 with ok=0 when either is malformed. */
int lr_bundle_vercmp(const char *a, const char *b, int *ok);

#endif
