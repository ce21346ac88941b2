/*
 * storage.h — the storage contract every backend implements (memory, LMDB,
 * later NATS JetStream), and the layers built on it: the session journal,
 * the catalog and workspace snapshots.
 *
 * C, no Lua; includable by host/, lua/ and tests. It includes only util/.
 * Storage sits below host/: it never touches the event loop. Calls block
 * the calling thread; the Lua layer runs them on worker threads, except
 * lr_store_append_async, whose completion arrives on a backend thread and
 * which the Lua layer forwards to the loop.
 *
 * Four primitives (DESIGN §6), all named with one grammar:
 *
 *   ledger  many named append-only logs; sequences 1, 2, 3 … with no gaps;
 *           append commits at expected_tip + 1 or reports LR_ECONFLICT;
 *           a networked backend may report LR_EAMBIGUOUS (outcome unknown);
 *   leaser  exclusive, epoch-fenced leases: a later grant of a name always
 *           has a strictly greater epoch; a dead holder's lease is
 *           recoverable;
 *   kv      small values with per-key revisions; put is compare-and-swap
 *           only (expected revision 0 means create);
 *   blobs   immutable bytes under caller-chosen keys: the same bytes again
 *           is a no-op, different bytes under an existing key is
 *           LR_EBLOBCONFLICT.
 *
 * Errors are the util.h codes: LR_ECONFLICT, LR_EAMBIGUOUS, LR_ELEASEHELD,
 * LR_ELEASELOST, LR_ENOTFOUND, LR_EBLOBCONFLICT, LR_ETOOBIG, LR_ECORRUPT;
 * -EINVAL for a name outside the grammar; -errno for system failures.
 * Every function that can fail also fills an lr_err with a message that
 * names its subject ("storage: append to 'sessions/4f…' conflicts at
 * expected tip 41").
 *
 * Thread safety: a store handle may be used from any number of threads at
 * once. Leases and cursors belong to one thread at a time.
 */
#ifndef LR_STORAGE_H
#define LR_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* Every backend accepts ledger records and kv values of at least this size. */
#define LR_STORE_MIN_VALUE_MAX ((size_t)1 << 20)
/* Names: 1..512 bytes. */
#define LR_STORE_NAME_MAX 512

/* A message about the last failure; fixed size, never allocated. */
struct lr_err {
	char msg[384];
};
void lr_err_set(struct lr_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The name grammar: 1..512 bytes, segments joined by single '/', each
 * segment [a-z0-9][a-z0-9_.-]* — so empty, "." and ".." segments cannot
 * be written. Returns 0 or -EINVAL (with a message naming the problem).
 * Prefixes given to kv_keys and blob_list are plain byte prefixes, not
 * names.
 */
int lr_store_name_check(const char *name, struct lr_err *e);

/* Bytes a backend returns: the caller frees data with free(). */
struct lr_bytes {
	void *data;
	size_t len;
};
void lr_bytes_release(struct lr_bytes *b);

/* One ledger record seen by a reader; borrowed until the callback returns. */
struct lr_record {
	uint64_t seq;
	const void *data;
	size_t len;
};
/* Return 0 to go on, non-zero to stop (that value is returned by read). */
typedef int (*lr_record_cb)(void *arg, const struct lr_record *rec);
/* Names listed by kv_keys / blob_list, ascending; same stop rule. */
typedef int (*lr_name_cb)(void *arg, const char *name);
/* Completion of an asynchronous append, on a backend thread (or inline). */
typedef void (*lr_append_cb)(void *arg, int rc, uint64_t seq, const struct lr_err *e);

struct lr_store;
struct lr_lease;

/*
 * The backend table. Backends fill every entry; the lr_store_* wrappers
 * below check names and arguments before calling them, so a backend may
 * assume valid names.
 */
struct lr_store_ops {
	const char *kind; /* "memory", "lmdb", "nats" */

	int (*append)(struct lr_store *s, const char *name, uint64_t expected_tip,
		      const void *rec, size_t len, struct lr_err *e);
	/* Completion may run inline, on the caller's thread, before this returns. */
	void (*append_async)(struct lr_store *s, const char *name, uint64_t expected_tip,
			     const void *rec, size_t len, lr_append_cb cb, void *arg);
	int (*read)(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		    lr_record_cb cb, void *arg, struct lr_err *e);
	int (*tip)(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e);
	int (*ledger_delete)(struct lr_store *s, const char *name, struct lr_err *e);

	int (*acquire)(struct lr_store *s, const char *name, struct lr_lease **out,
		       struct lr_err *e);
	int (*release)(struct lr_lease *l, struct lr_err *e);

	int (*kv_get)(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		      struct lr_err *e);
	int (*kv_put)(struct lr_store *s, const char *key, uint64_t expected_rev,
		      const void *val, size_t len, uint64_t *new_rev, struct lr_err *e);
	int (*kv_keys)(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		       struct lr_err *e);
	int (*kv_delete)(struct lr_store *s, const char *key, struct lr_err *e);

	int (*blob_put)(struct lr_store *s, const char *key, const void *data, size_t len,
			struct lr_err *e);
	/* Streams a blob of len bytes from fd (read sequentially, never whole in memory where the backend can avoid it). */
	int (*blob_put_fd)(struct lr_store *s, const char *key, int fd, uint64_t len,
			   struct lr_err *e);
	int (*blob_get)(struct lr_store *s, const char *key, struct lr_bytes *out, struct lr_err *e);
	/* Writes a blob to fd; *len receives its size. */
	int (*blob_get_fd)(struct lr_store *s, const char *key, int fd, uint64_t *len,
			   struct lr_err *e);
	int (*blob_stat)(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e);
	int (*blob_delete)(struct lr_store *s, const char *key, struct lr_err *e);
	int (*blob_list)(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
			 struct lr_err *e);

	void (*close)(struct lr_store *s);
};

/* The common head of every backend's handle. */
struct lr_store {
	const struct lr_store_ops *ops;
};

/*
 * A held lease. epoch is fixed at grant. lost becomes non-zero (atomically)
 * once the lease is released, taken over or expired; on_lost, if set by the
 * holder, is then called once from whichever thread noticed.
 */
struct lr_lease {
	struct lr_store *store;
	char name[LR_STORE_NAME_MAX + 1];
	uint64_t epoch;
	volatile int lost;
	void (*on_lost)(struct lr_lease *l, void *arg);
	void *on_lost_arg;
};

/* Backends. Each returns 0 and a handle, or an error with a message. */
int lr_store_memory_open(struct lr_store **out, struct lr_err *e);

struct lr_lmdb_opts {
	const char *root;        /* the state root directory; created 0700 if absent */
	size_t initial_map;      /* bytes; the map grows by doubling when full (default 64 MiB) */
	int max_batch;           /* appends per group commit at most (default 1024) */
	int no_sync;             /* tests only: skip fsync (never durable) */
};
int lr_store_lmdb_open(const struct lr_lmdb_opts *o, struct lr_store **out, struct lr_err *e);

/* The wrappers: check arguments, then call the backend. */
int lr_store_append(struct lr_store *s, const char *name, uint64_t expected_tip,
		    const void *rec, size_t len, struct lr_err *e);
void lr_store_append_async(struct lr_store *s, const char *name, uint64_t expected_tip,
			   const void *rec, size_t len, lr_append_cb cb, void *arg);
/*
 * Resolves the tri-state of an append into a definite answer: on
 * LR_EAMBIGUOUS it retries once; on LR_ECONFLICT it reads the record at
 * expected_tip + 1 and compares bytes: equal means ours landed (0), else
 * LR_ECONFLICT. A second ambiguity stays LR_EAMBIGUOUS.
 */
int lr_store_append_definitely(struct lr_store *s, const char *name, uint64_t expected_tip,
			       const void *rec, size_t len, struct lr_err *e);
/* Calls cb for records from..min(tip, from + limit - 1); limit 0 means no limit. */
int lr_store_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		  lr_record_cb cb, void *arg, struct lr_err *e);
int lr_store_tip(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e);
int lr_store_ledger_delete(struct lr_store *s, const char *name, struct lr_err *e);

int lr_store_acquire(struct lr_store *s, const char *name, struct lr_lease **out,
		     struct lr_err *e);
/* Idempotent; frees the lease. Accepts NULL. */
int lr_store_release(struct lr_lease *l, struct lr_err *e);

int lr_store_kv_get(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		    struct lr_err *e);
int lr_store_kv_put(struct lr_store *s, const char *key, uint64_t expected_rev,
		    const void *val, size_t len, uint64_t *new_rev, struct lr_err *e);
int lr_store_kv_keys(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		     struct lr_err *e);
int lr_store_kv_delete(struct lr_store *s, const char *key, struct lr_err *e);

int lr_store_blob_put(struct lr_store *s, const char *key, const void *data, size_t len,
		      struct lr_err *e);
int lr_store_blob_put_fd(struct lr_store *s, const char *key, int fd, uint64_t len,
			 struct lr_err *e);
int lr_store_blob_get(struct lr_store *s, const char *key, struct lr_bytes *out,
		      struct lr_err *e);
int lr_store_blob_get_fd(struct lr_store *s, const char *key, int fd, uint64_t *len,
			 struct lr_err *e);
int lr_store_blob_stat(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e);
int lr_store_blob_delete(struct lr_store *s, const char *key, struct lr_err *e);
int lr_store_blob_list(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		       struct lr_err *e);

/* Accepts NULL. Every lease must have been released first. */
void lr_store_close(struct lr_store *s);

/* ---- session journal (storage/journal.c) ---- */


/* ---- catalog (storage/catalog.c) ---- */


/* ---- workspace snapshots (storage/snapshot.c) ---- */

/*
 * Content-addressed snapshots of a directory tree (DESIGN §7), stored in
 * any backend:
 *
 *   workspaces/blobs/<hex>  a regular file's bytes; hex = SHA-256 of them
 *   workspaces/trees/<hex>  a directory's manifest (format below); hex =
 *                           SHA-256 of the manifest bytes
 *   workspaces/refs/<hex>   kv: the index of captured refs, a JSON object
 *                           {"time": wall seconds, "files": n, "bytes": n}
 *
 * A ref is "v1:sha256:<hex of the root tree>". The same tree always gives
 * the same ref: it depends on names, types, permission bits (mode & 0777;
 * setuid, setgid and sticky are dropped), contents and symlink targets,
 * never on times, owners or inode numbers. The root directory's own mode
 * is not part of the ref. Hard links are captured as separate files (and
 * restored as separate files); sockets, fifos and devices are skipped and
 * reported. Names are arbitrary bytes except '/' and NUL, 1..255 bytes.
 *
 * Manifest ("tree") format, all integers big-endian:
 *
 *   "lrtree1\n"                       8 bytes of magic
 *   u32 count
 *   count entries, names strictly ascending (memcmp, a prefix sorts first):
 *     u8  type   'd' directory, 'f' regular file, 'l' symlink
 *     u16 mode   permission bits <= 0777 (0 for a symlink)
 *     u8  nlen   1..255, then nlen name bytes (no '/', no NUL, not "." or "..")
 *     'f': u64 size, 32-byte SHA-256 of the contents
 *     'd': 32-byte SHA-256 of the child manifest
 *     'l': u16 tlen 1..4095, then tlen target bytes (no NUL)
 *
 * Nothing may follow the last entry. The decoder is strict (a fuzz target):
 * any other byte string is LR_ECORRUPT.
 *
 * Stat cache: for each workspace (by its canonical path) a map of relative
 * path -> (device, inode, size, mtime ns, ctime ns, hash), kept in memory
 * (cache_dir NULL) or in <cache_dir>/<sha256 hex of the canonical path>,
 * written atomically. A file whose stat matches is not read. Entries whose
 * mtime or ctime is within racy_ns of the capture's start are never saved
 * (git's "racy clean" rule), so an edit in the same timestamp tick as a
 * capture is never missed.
 *
 * Capture hashes files on its own worker threads. A file that changes
 * while it is read (size, mtime or ctime differ before and after, or it
 * vanishes) is read again once; if it changes again the capture fails with
 * LR_ECONFLICT naming the file. Large files are streamed (blob_put_fd);
 * restore writes them densely (holes are not recreated).
 *
 * Every function is thread-safe on one lr_snap (the stat cache is locked),
 * except lr_snap_gc, which must not run concurrently with a capture or an
 * import on the same store (it could delete blobs a capture has put but
 * not yet referenced).
 */
#define LR_SNAP_REF_MAX 80 /* "v1:sha256:" + 64 hex + NUL fits */

struct lr_snap;

struct lr_snap_opts {
	const char *cache_dir;      /* stat cache files; NULL keeps the cache in memory */
	int threads;                /* hashing workers; 0 means 4 */
	uint64_t racy_ns;           /* the racy window; 0 means 2 s (tests may set 1) */
	uint64_t import_max_entries; /* 0 means 1 << 20 */
	uint64_t import_max_bytes;   /* file bytes in one import; 0 means 8 GiB */
};

/* A snapshotter over s (borrowed: s must outlive it). */
int lr_snap_new(struct lr_store *s, const struct lr_snap_opts *o, struct lr_snap **out,
		struct lr_err *e);
void lr_snap_free(struct lr_snap *sn); /* accepts NULL */

/* One skipped entry: path relative to the captured directory, reason "socket", "fifo", "device". */
struct lr_snap_skip {
	char *path;
	const char *reason; /* static */
};

struct lr_snap_result {
	char ref[LR_SNAP_REF_MAX];
	struct lr_snap_skip *skipped; /* nskipped entries, sorted by path */
	size_t nskipped;
	uint64_t files, dirs, symlinks, bytes;
	uint64_t files_hashed;  /* files read (stat cache misses) */
	uint64_t blobs_written; /* file blobs that were not in the store yet */
};
void lr_snap_result_release(struct lr_snap_result *r);

/*
 * Captures dir (absolute or relative; symlinks are not followed below it)
 * into the store and records the ref in the index. Fills r (release it
 * with lr_snap_result_release, also after a failure).
 */
int lr_snap_capture(struct lr_snap *sn, const char *dir, struct lr_snap_result *r,
		    struct lr_err *e);

/* Materializes ref into dir, which must be absent (it is created, 0755 less umask) or empty (-ENOTEMPTY). */
int lr_snap_restore(struct lr_snap *sn, const char *ref, const char *dir, struct lr_err *e);

/*
 * Makes dir equal to ref in place: writes only files whose contents
 * differ (by the stat cache, else by hashing them), fixes modes, replaces
 * symlinks and entries of the wrong type, creates directories and removes
 * what the ref does not have. written counts entries created or changed
 * (files, symlinks, directories, mode fixes); removed counts every entry
 * deleted (recursively). A file is replaced by renaming a complete copy
 * over it.
 */
struct lr_snap_rewind_stats {
	uint64_t written, removed;
};
int lr_snap_rewind(struct lr_snap *sn, const char *ref, const char *dir,
		   struct lr_snap_rewind_stats *st, struct lr_err *e);

/*
 * Paths (relative, '/'-joined, sorted by bytes) added, removed and
 * modified from a to b. Directories are listed too: a new directory and
 * everything below it are "added". A changed type is a removal plus an
 * addition; a changed mode, contents or target is "modified". Only
 * subtrees whose hashes differ are read.
 */
struct lr_snap_diff {
	char **added, **removed, **modified;
	size_t nadded, nremoved, nmodified;
};
int lr_snap_diff(struct lr_snap *sn, const char *a, const char *b, struct lr_snap_diff *d,
		 struct lr_err *e);
void lr_snap_diff_release(struct lr_snap_diff *d);

/*
 * Writes ref as a GNU tar file (deterministic: mtime 0, uid/gid 0, names
 * as raw bytes, sorted), through libarchive opened lazily
 * (LR_EUNAVAILABLE without it). The file is written to FILE.tmp… then
 * renamed.
 */
int lr_snap_export(struct lr_snap *sn, const char *ref, const char *file, struct lr_err *e);

/*
 * Imports a tar file (plain or gzip) into the store; ref receives its ref.
 * Only directories, regular files and symlinks are accepted; absolute
 * paths, "..", symlinks that are absolute or resolve outside the tree,
 * hard links, devices, fifos, duplicate entries, paths through a
 * non-directory and more than import_max_entries entries or
 * import_max_bytes bytes are LR_EREFUSED (with the path in the message);
 * a malformed archive is LR_EPARSE. Nothing is written to the file system.
 * lr_snap_import_mem reads an archive held in memory.
 */
int lr_snap_import(struct lr_snap *sn, const char *file, char ref[LR_SNAP_REF_MAX],
		   struct lr_err *e);
int lr_snap_import_mem(struct lr_snap *sn, const void *data, size_t len,
		       char ref[LR_SNAP_REF_MAX], struct lr_err *e);

/*
 * Deletes every workspaces/blobs and workspaces/trees blob not reachable
 * from the live refs, and the index entries of refs not live. An
 * unreadable live ref fails the whole collection before anything is
 * deleted.
 */
struct lr_snap_gc_stats {
	uint64_t kept, deleted; /* blobs (files and trees) */
};
int lr_snap_gc(struct lr_snap *sn, const char *const *live, size_t nlive,
	       struct lr_snap_gc_stats *st, struct lr_err *e);

/* The index, newest first. */
struct lr_snap_info {
	char ref[LR_SNAP_REF_MAX];
	double time;
	uint64_t files, bytes;
};
int lr_snap_list(struct lr_snap *sn, struct lr_snap_info **out, size_t *n, struct lr_err *e);

/* Parses "v1:sha256:<64 lower-case hex>" into the root hash; LR_EPARSE otherwise. */
int lr_snap_ref_parse(const char *ref, unsigned char hash[LR_SHA256_LEN]);

/* The strict manifest decoder on its own (the fuzz target): 0 or LR_ECORRUPT; *count entries. */
int lr_snap_manifest_check(const void *p, size_t n, size_t *count);


#endif
