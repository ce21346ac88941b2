/*
 * storage.h — the storage contract every backend implements (memory, LMDB,
 * NATS JetStream), and the layers built on it: the session journal,
 * the catalog and workspace snapshots.
 *
 * C, no Lua; includable by host/, lua/ and tests. It includes only util/.
 * Storage sits below host/: it never touches the event loop. Calls block
 * the calling thread; the Lua layer runs them on worker threads, except
 * lr_store_append_async, whose completion arrives on a backend thread and
 * which the Lua layer forwards to the loop.
 *
 * Four primitives (docs/storage.md), all named with one grammar:
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
/* One compare-and-swap put of lr_store_kv_put_many. */
struct lr_kv_put {
	const char *key;
	uint64_t expected_rev;
	const void *val;
	size_t len;
	uint64_t new_rev; /* out */
	int rc;           /* out: 0, LR_ECONFLICT, ... */
	struct lr_err err;
};

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
	/* Optional: n puts submitted together (one commit where the backend
	 * groups writes); each item's rc, err and new_rev are set. NULL: the
	 * store calls kv_put n times. */
	void (*kv_put_many)(struct lr_store *s, size_t n, struct lr_kv_put *puts);

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

/* A store handle: opaque, its head is in storage/internal.h. */
struct lr_store;
/* The backend's name ("memory", "lmdb", "nats"); static. */
const char *lr_store_kind(const struct lr_store *s);

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
	const char *boot_id;     /* tests only: stands for this boot's id (NULL: the kernel's);
	                          * a log written under another id is replayed at open */
};
int lr_store_lmdb_open(const struct lr_lmdb_opts *o, struct lr_store **out, struct lr_err *e);

/*
 * NATS JetStream (storage/nats.c; libnats is opened on first use:
 * LR_EUNAVAILABLE without it). Exactly one of url and embedded_dir.
 * Embedded mode starts and owns `nats-server -js` on a private loopback
 * port with its store in embedded_dir (absolute; a second owner of the
 * directory gets -EBUSY) and stops it on close. Credentials are passed to
 * the client and never appear in messages. On a cluster, streams this
 * creates have `replicas` copies; when a stream has more than one (made
 * here or by hand), every read goes to its leader (the message-get API)
 * rather than to any replica (direct get), so a read never misses an
 * acknowledged record. Leases live lease_ttl_ms
 * without a renewal (a heartbeat thread renews them every third of it); a
 * holder that cannot renew in time marks its lease lost.
 */
struct lr_nats_opts {
	const char *url;            /* "nats://host:port" (several: comma-separated) */
	const char *embedded_dir;
	const char *user, *password, *token;
	const char *creds_file;     /* a .creds file (JWT and NKey seed) */
	const char *nkey, *nkey_seed_file; /* together: a public NKey and its seed file */
	const char *ns;             /* NULL or "": the default names; else [A-Za-z0-9_-]{1,32} */
	int64_t lease_ttl_ms;       /* 0: 10 s */
	int64_t timeout_ms;         /* connect and request timeout; 0: 5 s */
	const char *server_bin;     /* embedded: the server to run; NULL: "nats-server" on PATH */
	int replicas;               /* the streams' replicas when this creates them; 0: 1 */
};
int lr_store_nats_open(const struct lr_nats_opts *o, struct lr_store **out, struct lr_err *e);

/* The wrappers: check arguments, then call the backend. */
int lr_store_append(struct lr_store *s, const char *name, uint64_t expected_tip,
		    const void *rec, size_t len, struct lr_err *e);
void lr_store_append_async(struct lr_store *s, const char *name, uint64_t expected_tip,
			   const void *rec, size_t len, lr_append_cb cb, void *arg);
/*
 * Resolves the tri-state of an append into a definite answer: on
 * LR_EAMBIGUOUS it retries once; on LR_ECONFLICT it reads the record at
 * expected_tip + 1 and compares bytes: equal means ours landed (0), else
 * LR_ECONFLICT. A retry that fails otherwise (ambiguous again, a timeout,
 * no connection) stays LR_EAMBIGUOUS.
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
/* The puts of lr_store_kv_put, each checked on its own, submitted together:
 * a backend with a group commit (LMDB) makes them one durable commit
 * instead of n. Returns once every put is settled (each item's rc). */
void lr_store_kv_put_many(struct lr_store *s, size_t n, struct lr_kv_put *puts);
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

/*
 * Tests only: after `after` more ledger appends through this handle
 * (lr_store_append, lr_store_append_async, lr_store_append_definitely:
 * each call counts once) every append fails with -EIO ("injected
 * failure") without reaching the backend. after < 0 turns it off.
 */
void lr_store_inject_failure(struct lr_store *s, long after);

/* ---- session journal (storage/journal.c) ---- */

/*
 * One ledger per session, named "sessions/<uuid>" (a lower-case, hyphenated
 * uuid), with one writer at a time fenced by the session lease of the same
 * name.
 *
 * Record frame (version 1), every integer little-endian:
 *
 *   0   u8   magic 0xEB
 *   1   u8   version 1
 *   2   u8   kind (enum lr_journal_kind)
 *   3   u8   flags, 0 (reserved)
 *   4   u16  id length, 0..256
 *   6   u32  body length
 *   10  id bytes (printable ASCII 0x20..0x7e), then body bytes
 *   end u32  CRC32C (Castagnoli) of every byte before it
 *
 * Body by kind: event, command, gate_prepared: opaque bytes (the runtime's
 * JSON), at most LR_JOURNAL_INLINE_MAX; fence: u64 lease epoch (8 bytes),
 * and the id is that epoch in decimal; blobptr: u8 kind of the offloaded
 * record, three zero bytes, u64 body size, 32-byte SHA-256 of the body
 * (44 bytes); the body itself is the blob "sessions/<uuid>/blobs/<sha256
 * hex>", written before the pointer record.
 *
 * The decoder is strict: a wrong magic, version, kind or flags, an id
 * outside the charset, a length that overruns or leaves trailing bytes, a
 * fence or blobptr body of the wrong shape and a checksum mismatch are all
 * LR_ECORRUPT with a message naming the ledger and the sequence. Nothing is
 * ever skipped.
 */
enum lr_journal_kind {
	LR_JOURNAL_EVENT = 1,
	LR_JOURNAL_COMMAND = 2,
	LR_JOURNAL_FENCE = 3,
	LR_JOURNAL_BLOBPTR = 4,       /* on the wire only: replay resolves it */
	LR_JOURNAL_GATE_PREPARED = 5, /* private records the runtime keeps from subscribers */
	LR_JOURNAL_KIND_MAX = 5       /* a new kind is a deliberate change of the decoder */
};

#define LR_JOURNAL_MAGIC 0xEB
#define LR_JOURNAL_VERSION 1
#define LR_JOURNAL_ID_MAX 256
#define LR_JOURNAL_HEADER 10
#define LR_JOURNAL_OVERHEAD 14                     /* header + CRC */
#define LR_JOURNAL_INLINE_MAX ((size_t)512 << 10)   /* larger bodies go to a blob */
#define LR_JOURNAL_BODY_MAX ((size_t)64 << 20)      /* no record body is larger */
#define LR_JOURNAL_BLOBPTR_LEN 44

/* "sessions/" + 36 + NUL */
#define LR_JOURNAL_NAME_LEN 46

/*
 * One record as seen by a reader. id is NUL-terminated (id_len bytes
 * before the NUL); id and body are borrowed until the callback returns.
 * For a record whose body was offloaded, kind is the original kind,
 * offloaded is 1 and body is the verified blob. For a fence, epoch is the
 * fence's lease epoch (0 otherwise).
 */
struct lr_journal_rec {
	uint64_t seq;
	int kind;
	int offloaded;
	char id[LR_JOURNAL_ID_MAX + 1];
	size_t id_len;
	const void *body;
	size_t len;
	uint64_t epoch;
};
/* Return 0 to go on; a non-zero value stops replay and is returned by it. */
typedef int (*lr_journal_cb)(void *arg, const struct lr_journal_rec *r);

/* A fresh random (v4) session id from getrandom(): 36 characters and a NUL. */
int lr_journal_new_id(char out[37]);
/* 0 if sid is a lower-case hyphenated uuid, else -EINVAL with a message. */
int lr_journal_id_check(const char *sid, struct lr_err *e);

/* CRC32C (Castagnoli, reflected, as in iSCSI/ext4). */
uint32_t lr_crc32c(uint32_t crc, const void *p, size_t n);

/*
 * Frames one record into out (reset first; the caller owns it). kind is
 * any kind; the body is taken as it is (the caller builds fence and
 * blobptr bodies). LR_ETOOBIG if the body is over LR_JOURNAL_BODY_MAX,
 * -EINVAL for a bad kind or id.
 */
int lr_journal_encode(struct lr_buf *out, int kind, const char *id, size_t id_len,
		      const void *body, size_t len);
/*
 * Decodes one frame strictly. On success r->seq = seq and id, body
 * point into buf (body) or r->id (a copy); blobptrs are NOT resolved
 * (kind LR_JOURNAL_BLOBPTR). ledger and seq only name the record in the
 * message of an LR_ECORRUPT.
 */
int lr_journal_decode(const void *buf, size_t len, const char *ledger, uint64_t seq,
		      struct lr_journal_rec *r, struct lr_err *e);

struct lr_journal;

/*
 * Opens session sid for writing. lease must be held, come from
 * lr_store_acquire(store, "sessions/<sid>") and outlive the journal or be
 * released before lr_journal_close (not concurrently with it): the journal
 * chains itself into lease->on_lost (keeping a holder's callback) to learn
 * of a loss. Appends a fence record carrying lease->epoch at the tip
 * (retrying up to 8 times when the tip moves), then reads the whole ledger
 * to build the idempotency index (every record must decode: else
 * LR_ECORRUPT naming the sequence; a fence with a greater epoch than ours
 * is LR_ELEASELOST). *out is freed with lr_journal_close.
 */
int lr_journal_open(struct lr_store *store, const char *sid, struct lr_lease *lease,
		    struct lr_journal **out, struct lr_err *e);
/*
 * Appends one record of kind event, command or gate_prepared (-EINVAL
 * otherwise). id (NUL-terminated, printable ASCII, at most 256 bytes; ""
 * for no idempotency) keys deduplication: an id already in the ledger with
 * the same kind and body returns its original sequence and *appended = 0;
 * with other bytes it is LR_ECONFLICT ("idempotency collision" naming the
 * id and the original sequence) and nothing is written. Bodies over
 * LR_JOURNAL_INLINE_MAX go to a blob first, then a pointer record;
 * LR_ETOOBIG over LR_JOURNAL_BODY_MAX.
 *
 * Every append is conditional on the writer's tip (through
 * lr_store_append_definitely). When the ledger moved under the writer it
 * was fenced: LR_ELEASELOST ("journal: writer for 'sessions/…' was fenced
 * by epoch 3"), and the journal refuses every later append. The same after
 * the lease is lost. LR_EAMBIGUOUS (a networked backend could not tell
 * whether the record landed) also latches: the runtime must reopen the
 * journal, which reads the truth back. Other failures (-errno) leave the
 * tip where it was and the journal usable.
 *
 * The journal never touches the catalog: the runtime calls
 * lr_catalog_note_append (or lr_catalog_update) after a successful append
 * and only logs its failure, so a catalog failure never fails an append.
 * seq and appended may be NULL. Thread-safe (one mutex per journal).
 */
int lr_journal_append(struct lr_journal *j, int kind, const char *id, const void *body,
		      size_t len, uint64_t *seq, int *appended, struct lr_err *e);
/*
 * Asynchronous appends. The caller fills kind, id, body, len, cb and arg
 * of an lr_journal_op it owns and keeps (with id and body) until the
 * final completion. One journal has one append in flight at a time:
 * others queue in submission order behind it (many journals' appends
 * meet in the backend's group commit). The guarantees are those of
 * lr_journal_append: idempotency, the fence, latching on a lost lease,
 * a fence or an ambiguous outcome.
 *
 * cb(op) runs once, on a backend thread or inline inside this call, and
 * never blocks the backend: when the work needs blocking calls (a body
 * over LR_JOURNAL_INLINE_MAX, an id already in the index that must be
 * compared, an ambiguous or conflicting result to resolve) cb runs with
 * op->slow = 1 and the append is NOT finished: the caller must then call
 * lr_journal_append_slow(op) on a thread that may block (a worker pool),
 * which finishes it and fills the results without calling cb again. The
 * journal's later appends wait until it has. Otherwise op->rc, seq,
 * appended and err hold the result (err only when rc != 0).
 * Sync appends on the same journal wait for the async ones in flight.
 */
struct lr_journal_op {
	int kind;
	const char *id;           /* NULL or "": no idempotency */
	const void *body;
	size_t len;
	void (*cb)(struct lr_journal_op *op);
	void *arg;
	/* results */
	int rc;
	int slow;
	int appended;
	uint64_t seq;
	struct lr_err err;
	/* the journal's */
	struct lr_journal *j;
	struct lr_journal_op *next;
	int resolve; /* slow: 0 the whole append, 1 resolve the frame's outcome (2: it was ambiguous) */
};
void lr_journal_append_async(struct lr_journal *j, struct lr_journal_op *op);
void lr_journal_append_slow(struct lr_journal_op *op);
/* The sequence of the writer's last record (its opening fence at least). */
uint64_t lr_journal_tip(struct lr_journal *j);
/* The lease epoch the journal was opened with. */
uint64_t lr_journal_epoch(struct lr_journal *j);
/* The highest epoch of any fence in session sid's journal (0: none). */
int lr_journal_top_epoch(struct lr_store *store, const char *sid, uint64_t *epoch,
			 struct lr_err *e);
/*
 * Accepts NULL. Does not release the lease (the caller owns it). Waits
 * for an async append in flight (a slow one must be finished by its
 * caller first); queued ones complete with LR_ECLOSED.
 */
void lr_journal_close(struct lr_journal *j);

/*
 * Replays session sid from sequence from (0 or 1: the start) to the tip
 * as it is when the read reaches it, resolving blobptrs (a missing blob,
 * a size or SHA-256 mismatch is LR_ECORRUPT naming the sequence and the
 * key). Fences are passed on (kind LR_JOURNAL_FENCE). Needs no lease. A
 * gap in the sequences or any decode error is LR_ECORRUPT naming the
 * sequence; records before it have been passed to cb. A ledger that does
 * not exist replays nothing.
 */
int lr_journal_replay(struct lr_store *store, const char *sid, uint64_t from,
		      lr_journal_cb cb, void *arg, struct lr_err *e);

/* ---- catalog (storage/catalog.c) ---- */

/*
 * Per-session metadata in kv under "catalog/sessions/<uuid>", as a JSON
 * object (version field "v": 1; the decoder refuses unknown members and
 * values of the wrong type: LR_ECORRUPT naming the key). Updates are
 * read-modify-write with compare-and-swap, retried up to 8 times.
 *
 * Best effort by contract: the journal never calls the catalog, and the
 * runtime calls it after a successful append and swallows (logs) its
 * failure. lr_catalog_repair rebuilds last_seq from the journal tip when
 * the runtime suspects the entry lags.
 */
enum lr_catalog_status { LR_CATALOG_ACTIVE = 0, LR_CATALOG_STOPPED };
enum lr_catalog_state {
	LR_CATALOG_IDLE = 0,
	LR_CATALOG_RUNNING,
	LR_CATALOG_WAITING_ON_GATE,
	LR_CATALOG_FAILED,
	LR_CATALOG_INTERRUPTED,
	LR_CATALOG_STATE_STOPPED
};

#define LR_CATALOG_TITLE_MAX 320 /* bytes (80 runes of UTF-8) */
#define LR_CATALOG_REF_MAX 128

struct lr_catalog_entry {
	char id[37];
	char title[LR_CATALOG_TITLE_MAX + 1];
	double created_at;     /* seconds since the epoch */
	double last_active_at;
	enum lr_catalog_status status;
	enum lr_catalog_state state;
	uint64_t loop_count;
	uint64_t last_seq;     /* the highest journal sequence noted */
	uint64_t input_tokens, output_tokens, cache_read_tokens;
	double cost;
	char workspace_ref[LR_CATALOG_REF_MAX + 1]; /* "" when none */
	char forked_from[37];  /* the session this one was forked from; "" when none */
	uint64_t forked_at;    /* the origin's journal seq the fork starts after (0: none) */
};

/* "active"/"stopped" and "idle"/"running"/…; NULL for an out-of-range value. */
const char *lr_catalog_status_name(enum lr_catalog_status s);
const char *lr_catalog_state_name(enum lr_catalog_state s);

/*
 * Changes entry in place. exists is 0 for a new entry (pre-filled: id,
 * created_at = last_active_at = now, active, idle). Return 0 to write, 1 to
 * leave the entry as it is (update returns 0), or an error code (returned
 * by update). It may run more than once (after a lost race).
 */
typedef int (*lr_catalog_fn)(void *arg, struct lr_catalog_entry *entry, int exists);
int lr_catalog_update(struct lr_store *store, const char *sid, lr_catalog_fn fn, void *arg,
		      struct lr_err *e);
/* n updates of lr_catalog_update at once: the entries read, changed and
 * written back with one lr_store_kv_put_many (an update that loses its race
 * goes on alone, as lr_catalog_update). Each job's rc and err are set. */
struct lr_catalog_job {
	const char *sid;
	lr_catalog_fn fn;
	void *arg;
	/* Optional: the entry as this caller last wrote it, at rev known_rev
	 * (not 0): fn starts from it instead of the stored entry read and
	 * decoded again; if the rev moved meanwhile the put conflicts and the
	 * update is redone from the store. */
	const struct lr_catalog_entry *known;
	uint64_t known_rev;
	/* Optional: filled with the entry written, and wrote_rev with its rev
	 * (0 when the batch did not write it: fn left it, a conflict, an error). */
	struct lr_catalog_entry *wrote;
	uint64_t wrote_rev;
	int rc;
	struct lr_err err;
};
void lr_catalog_update_many(struct lr_store *store, size_t n, struct lr_catalog_job *jobs);
/* The common update after an append: last_seq = max(last_seq, seq), last_active_at = now. */
int lr_catalog_note_append(struct lr_store *store, const char *sid, uint64_t seq,
			   struct lr_err *e);
/* LR_ENOTFOUND when the session has no entry. */
int lr_catalog_get(struct lr_store *store, const char *sid, struct lr_catalog_entry *out,
		   struct lr_err *e);
/* Every entry, ascending by id; entries deleted meanwhile are left out. cb's entry is borrowed. */
typedef int (*lr_catalog_cb)(void *arg, const struct lr_catalog_entry *entry);
int lr_catalog_list(struct lr_store *store, lr_catalog_cb cb, void *arg, struct lr_err *e);
/* Sets last_seq to the journal's tip (creating the entry if absent). */
int lr_catalog_repair(struct lr_store *store, const char *sid, struct lr_err *e);
int lr_catalog_delete(struct lr_store *store, const char *sid, struct lr_err *e);

/* ---- workspace snapshots (storage/snapshot.c) ---- */

/*
 * Content-addressed snapshots of a directory tree (docs/storage.md), stored in
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
