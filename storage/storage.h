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
/* Releases and frees the lease: call it once per lease (NULL is accepted). */
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


#endif
