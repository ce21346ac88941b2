/*
 * lmdb.c — the LMDB backend, the embedded default (docs/storage.md, docs/decisions/0003-lmdb-group-commit.md).
 *
 * One environment under the state root (root/data.mdb, root/lock.mdb),
 * opened MDB_NOTLS | MDB_WRITEMAP, with five named databases:
 *
 *   ledger  key name '\0' be64(seq)      value: the record bytes
 *   tip     key name                     value: be64(tip)
 *   kv      key name                     value: be64(rev) [long-name header] bytes
 *   blob    key name                     value: [long-name header] bytes
 *   epoch   key name                     value: be64(last granted epoch)
 *
 * LMDB keys hold at most 511 bytes and names up to 512, so a name longer
 * than SHORT_MAX is keyed by 0x01 + its SHA-256 (0x01 cannot start a name,
 * so the two key spaces never meet) and, where it must be listed (kv,
 * blob), carries be16(len) + name at the start of its value.
 *
 * Every write — appends, deletes, kv puts, blob puts, epoch bumps — goes
 * through one writer thread, which takes everything queued (up to
 * max_batch) into ONE write transaction, checks each job inside it in
 * queue order (so two appends to one ledger in a batch see each other),
 * commits, makes the commit durable (unless no_sync) and only then
 * acknowledges each job. A job that fails its check (stale tip, stale
 * revision, different blob bytes) reports its error while the rest of the
 * batch commits. One exception, the same otherwise: a blocking call
 * (submit) that finds nothing queued, nobody committing and the last batch
 * a single job commits its job on its own thread, sparing the hand-off to
 * the writer and back; only one batch is ever being committed (busy).
 *
 * Durable by one sync of a log; LMDB synced at checkpoints
 * (docs/decisions/0009-lmdb-checkpoints.md). The environment is opened
 * MDB_NOSYNC: a commit writes its pages and its meta into the map and
 * syncs nothing. A group made only of appends, kv puts and epoch bumps
 * that fits in WAL_SLOT bytes is written, outcome by outcome, to this
 * process's log (root/wal/<pid>.<ns>.log, OFD-locked while it lives), after
 * the groups before it, and fdatasync'ed by the syncer thread while the
 * writer commits; the group is acknowledged once both are done. Any other
 * group (a delete, a blob, a larger group) is committed and then
 * checkpointed before it is acknowledged.
 *
 * A checkpoint pins the last commit (a read transaction held on it, so
 * that LMDB reuses none of its pages until the next checkpoint; nothing is
 * ever read through it, so the map may be remapped under it), syncs the
 * map, and records the commit's txnid and meta page (read back from the
 * file, checked against LMDB's layout) in root/wal/checkpoint, two slots
 * with a CRC, under that file's lock: every process writing to the root
 * records there. Only then does the previous pin go and the log start
 * again from 0. One runs after CKPT_GROUPS logged groups (on the writer,
 * after the acknowledgements), when the log is full, before a non-logged
 * group is acknowledged, after a recovery, at open unless this boot's
 * record is the current commit, and at a clean close (which then removes
 * the log). So the recorded checkpoint's tree is always whole on disk:
 * synced, and its pages pinned by whoever recorded it (or by an older pin
 * of another process) until a later one is recorded.
 *
 * What a power loss may leave: the checkpoint's tree, any subset of the
 * pages written after it, and meta pages that may point at pages the disk
 * never got. So after a reboot (the record's boot id is not this boot's),
 * the first open, before LMDB reads the file, writes the recorded meta
 * over both meta pages (meta_restore): LMDB starts from the checkpoint.
 *
 * Recovery, at open (one process at a time, under root/wal/recover.lock;
 * other opens of the root wait for it): a log whose lock is free belongs
 * to a dead process.
 * If it was written in this boot (boot_id), the page cache survived and
 * LMDB holds every commit: a checkpoint makes them durable, then the log
 * is removed. After a reboot, each whole group (CRC32C) in a row with
 * growing transaction ids whose id is above the checkpoint's is replayed
 * in id order, each write only where it still fits (a record at tip + 1, a
 * revision at the current one + 1, a higher epoch); then a checkpoint and
 * the log removed. A log of the previous format (two slots, LMDB's data
 * synced at every commit) is replayed above LMDB's meta as found.
 *
 * Without a boot id a reboot cannot be told from a crash: LMDB is then
 * opened to sync every commit itself (data, then meta), with no log.
 *
 * MDB_WRITEMAP: dirty pages live in the file mapping, not on the heap, so
 * a 64 MiB blob is streamed from its fd straight into the map. The file is
 * posix_fallocate'd to the map size, so a full disk is an ENOSPC when the
 * map grows rather than a SIGBUS on a write into a hole.
 *
 * Written ahead, so that a commit's sync is data and a flush: a
 * posix_fallocate'd block is an unwritten extent until its first write,
 * and the sync that writes it must also write the extent's change (ext4
 * without a journal writes the inode's table block synchronously, and the
 * log's fdatasync then waits for the same block). So the writer keeps the
 * WRITE_AHEAD bytes past LMDB's last page written with zeros (only where
 * FIEMAP reports a hole or an unwritten extent, inside a write transaction
 * so that no other process's writer is using them, synced), at open and
 * after an acknowledged batch has used half of them; a log is created
 * written in full.
 *
 * The map grows when full: the writer aborts, takes the resize lock
 * exclusively (readers hold it shared for the life of each read
 * transaction, and the writer for its write transaction), doubles the map
 * and retries the batch. MDB_MAP_RESIZED (another process grew it) is
 * adopted the same way, at the file's size (every map is reserved in the
 * file first, so the file is never smaller than any process's map; a map
 * set smaller would truncate it under the others).
 *
 * LMDB forbids opening one environment twice in a process (closing either
 * drops the process's fcntl locks on lock.mdb), so handles on the same
 * root share one refcounted core; leases stay per handle.
 *
 * Leases: root/leases/<sha256 hex of name>.lock locked with an OFD lock
 * (F_OFD_SETLK: per open file description, released by the kernel when
 * the holder dies), plus an epoch per name in LMDB bumped in a write
 * transaction while the lock is held, so epochs only grow.
 *
 * Reads never block on writers (MVCC). A read copies a chunk of records
 * out under a short read transaction and calls back without holding it,
 * so a callback may use the store (even append).
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <lmdb.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHORT_MAX 480            /* longer names are keyed by their SHA-256 */
#define LONG_TAG 0x01
#define DEFAULT_MAP ((size_t)64 << 20)
#define MAX_MAP ((size_t)1 << 40) /* 1 TiB: beyond this the map stops growing */
#define BATCH_BYTES ((size_t)64 << 20)
#define READ_CHUNK_BYTES ((size_t)1 << 20)
#define READ_CHUNK_RECS 512
#define FD_CHUNK ((size_t)8 << 20)
#define WAL_SLOT ((size_t)1 << 20) /* a logged group's bytes at most */
#define WAL_BYTES ((size_t)2 << 20) /* a log's size: the groups since its last checkpoint */
#define WAL_ALIGN ((size_t)4096)    /* each group starts on its own page of the log */
#define CKPT_GROUPS 64              /* logged groups between two checkpoints, at most */
#define CKPT_SLOT 512               /* root/wal/checkpoint: two slots of this size */
#define META_AT 16      /* LMDB's MDB_meta in a meta page, after the page header (0.9, format 1) */
#define META_LEN 136    /* sizeof(MDB_meta) */
#define META_TXNID 128  /* mm_txnid in MDB_meta */
#define META_MAGIC 0xBEEFC0DEu
#define WAL_HDR 72
#define WAL_ENT 15
#define BOOT_LEN 40
#define WRITE_AHEAD ((size_t)4 << 20) /* the map's bytes past LMDB's last page kept written */

/*
 * A logged group: magic[8] "LRWAL2\n", crc32c[4] of bytes 12..end, len[4]
 * of the entries, boot[40] (the boot id, NUL-padded), txnid[8], count[4],
 * zero[4], then count entries: kind[1] (J_APPEND, J_KVPUT, J_EPOCH),
 * name_len[2], value[8] (seq, revision or epoch), data_len[4], name, data.
 * Integers big-endian. Groups follow each other from offset 0, each on a
 * WAL_ALIGN boundary, with growing transaction ids; a checkpoint starts
 * the log again at 0. A log of the previous format ("LRWAL1\n": two slots
 * of WAL_SLOT bytes, LMDB's data synced at every commit) is still read.
 *
 * A checkpoint slot: magic[8] "LRCKPT1", crc32c[4] of bytes 12..CKPT_SLOT,
 * psize[4], boot[40], txnid[8], meta[META_LEN] (LMDB's meta as it was
 * synced); zeros to CKPT_SLOT. The slot with the higher txnid holds.
 */
static const char wal_magic[8] = "LRWAL2\n";
static const char wal1_magic[8] = "LRWAL1\n";
static const char ckpt_magic[8] = "LRCKPT1";

enum { DB_REC, DB_TIP, DB_KV, DB_BLOB, DB_EPOCH, DB_N };
static const char *const db_names[DB_N] = { "ledger", "tip", "kv", "blob", "epoch" };

/* An encoded name: the key bytes (short: the name; long: 0x01 + SHA-256). */
struct key {
	unsigned char b[SHORT_MAX + 1];
	size_t len;
	int lng;
};

enum job_kind { J_APPEND, J_LDELETE, J_KVPUT, J_KVDEL, J_BLOBPUT, J_BLOBFD, J_BLOBDEL, J_EPOCH };

struct job {
	enum job_kind kind;
	struct job *next;
	const char *name;
	struct key key;
	uint64_t expected;
	const void *data;
	size_t len;
	int fd;
	off_t fd_start; /* -1: not seekable */
	int fd_used;    /* bytes were consumed from fd in this attempt */
	uint64_t out;   /* seq, revision or epoch */
	int rc;
	struct lr_err err;
	/* completion: async callback, or a waiting thread */
	lr_append_cb cb;
	void *cbarg;
	void *owned; /* heap copy (async): freed after the callback */
	pthread_cond_t cond;
	int done;
};

/* One environment per root per process, shared by every handle on it. */
struct core {
	struct core *next;
	dev_t dev;
	ino_t ino;
	int refs;
	char *root;
	MDB_env *env;
	MDB_dbi dbi[DB_N];
	int no_sync;
	int deferred;  /* MDB_NOSYNC: the log makes a commit durable, a checkpoint syncs LMDB */
	size_t max_batch;
	size_t ahead;  /* the map is written up to here (past LMDB's last page; busy's holder's) */
	int ahead_off; /* writing ahead is unsupported here or failed: not tried again */
	char boot[BOOT_LEN];
	/* the log (the writer's; -1 until the first logged group, -2 when unusable) */
	int wal_fd, wal_dead;
	char *wal_path;
	unsigned char *wal_buf;
	off_t wal_off;       /* where the next group goes */
	unsigned wal_groups; /* groups logged since the last checkpoint */
	/* the last checkpoint: recorded in root/wal/checkpoint, its pages pinned */
	MDB_txn *pin;        /* a read transaction on it: LMDB never reuses its pages */
	uint64_t ckpt_txnid;
	int ckpt_fd;         /* root/wal/checkpoint, -1 until opened */
	int map_fd;          /* data.mdb, locked (OFD) by whoever sets a map size */
	/* the syncer: writes and fdatasyncs a slot while the writer commits */
	sem_t s_go, s_done; /* a slot posted; its write and sync done (one of each a group) */
	int s_stop, s_started;
	size_t s_len; /* set before s_go is posted */
	off_t s_off;
	int s_rc;     /* set before s_done is posted */
	pthread_t syncer;
	pthread_rwlock_t resize;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct job *head, *tail;
	struct job **batch; /* max_batch slots, the writer's */
	int busy;      /* a batch is being committed (by the writer or by a caller, see submit) */
	pthread_mutex_t commit_mu; /* held by whoever commits: the log and ahead state are its */
	size_t last_n; /* jobs in the last batch committed (a caller commits its own only after 1) */
	int ahead_due; /* a caller's commit found map_ahead due: the writer does it */
	int ckpt_due;  /* CKPT_GROUPS groups were logged: the writer checkpoints */
	int stopping;
	pthread_t writer;
};

struct lm {
	LR_STORE_HEAD;
	struct core *c;
};

struct lm_lease {
	struct lr_lease pub;
	int fd;
};

static pthread_mutex_t cores_mu = PTHREAD_MUTEX_INITIALIZER;
static struct core *cores;

static void be64_put(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (unsigned char)v;
		v >>= 8;
	}
}

static void be32_put(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t be32_get(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64_get(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static int key_make(const char *name, struct key *k, struct lr_err *e)
{
	size_t n = strlen(name);
	if (n <= SHORT_MAX) {
		memcpy(k->b, name, n);
		k->len = n;
		k->lng = 0;
		return 0;
	}
	k->b[0] = LONG_TAG;
	int rc = lr_sha256(name, n, k->b + 1);
	if (rc) {
		lr_err_set(e, "storage: cannot key the long name '%.40s…': %s", name,
			   lr_strerror(rc));
		return rc;
	}
	k->len = 1 + LR_SHA256_LEN;
	k->lng = 1;
	return 0;
}

/* The ledger key prefix of a name: short names get a '\0' separator. */
static size_t rec_prefix(const struct key *k, unsigned char *out)
{
	memcpy(out, k->b, k->len);
	if (k->lng)
		return k->len;
	out[k->len] = 0;
	return k->len + 1;
}

/* Bytes of the long-name header at the start of a kv/blob value. */
static size_t name_hdr_len(const struct key *k, const char *name)
{
	return k->lng ? 2 + strlen(name) : 0;
}

static void name_hdr_put(unsigned char *p, const char *name)
{
	size_t n = strlen(name);
	p[0] = (unsigned char)(n >> 8);
	p[1] = (unsigned char)n;
	memcpy(p + 2, name, n);
}

/* Validates a long-name header; returns its size or 0 when malformed. */
static size_t name_hdr_check(const unsigned char *p, size_t len, const char *name)
{
	if (len < 2)
		return 0;
	size_t n = (size_t)p[0] << 8 | p[1];
	if (n == 0 || n > LR_STORE_NAME_MAX || len < 2 + n)
		return 0;
	if (name && (strlen(name) != n || memcmp(p + 2, name, n) != 0))
		return 0;
	return 2 + n;
}

/*
 * LMDB has no page checksums; on a damaged page it may trip one of its
 * internal assertions, which would abort the process. The assert hook
 * jumps back to the innermost guarded call on this thread, which reports
 * MDB_CORRUPTED (the transaction is then only aborted, never used again).
 */
static _Thread_local sigjmp_buf *guard_jb;
static _Thread_local char guard_msg[200];

static void on_assert(MDB_env *env, const char *msg)
{
	(void)env;
	if (guard_jb) {
		snprintf(guard_msg, sizeof guard_msg, "%s", msg);
		siglongjmp(*guard_jb, 1);
	}
}

#define GUARDED(call)                                          \
	do {                                                   \
		sigjmp_buf jb_, *prev_ = guard_jb;             \
		if (sigsetjmp(jb_, 0)) {                       \
			guard_jb = prev_;                      \
			return MDB_CORRUPTED;                  \
		}                                              \
		guard_jb = &jb_;                               \
		int rc_ = (call);                              \
		guard_jb = prev_;                              \
		return rc_;                                    \
	} while (0)

static int g_get(MDB_txn *t, MDB_dbi d, MDB_val *k, MDB_val *v)
{
	GUARDED(mdb_get(t, d, k, v));
}

static int g_put(MDB_txn *t, MDB_dbi d, MDB_val *k, MDB_val *v, unsigned flags)
{
	GUARDED(mdb_put(t, d, k, v, flags));
}

static int g_del(MDB_txn *t, MDB_dbi d, MDB_val *k)
{
	GUARDED(mdb_del(t, d, k, NULL));
}

static int g_cget(MDB_cursor *c, MDB_val *k, MDB_val *v, MDB_cursor_op op)
{
	GUARDED(mdb_cursor_get(c, k, v, op));
}

static int g_cdel(MDB_cursor *c)
{
	GUARDED(mdb_cursor_del(c, 0));
}

static int g_commit(MDB_txn *t)
{
	GUARDED(mdb_txn_commit(t));
}

/* LMDB's codes: corruption of any sort is LR_ECORRUPT, with LMDB's message. */
static int lm_fail(int rc, struct lr_err *e, const char *what, const char *name)
{
	int out;
	switch (rc) {
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_BAD_TXN:
	case MDB_INCOMPATIBLE:
	case MDB_PANIC:
	case MDB_BAD_DBI:
	case MDB_BAD_VALSIZE:
		out = LR_ECORRUPT;
		break;
	case MDB_NOTFOUND:
		out = LR_ENOTFOUND;
		break;
	case MDB_MAP_FULL:
		out = -ENOSPC;
		break;
	case MDB_TXN_FULL:
		out = LR_ETOOBIG;
		break;
	case MDB_READERS_FULL:
	case MDB_TLS_FULL:
		out = -EAGAIN;
		break;
	default:
		out = rc > 0 ? -rc : -EIO;
	}
	if (rc == MDB_CORRUPTED && guard_msg[0]) {
		lr_err_set(e, "storage: %s '%s': %s (%s)", what, name, mdb_strerror(rc), guard_msg);
		guard_msg[0] = 0;
	} else {
		lr_err_set(e, "storage: %s '%s': %s", what, name, mdb_strerror(rc));
	}
	return out;
}

static int corrupt(struct lr_err *e, const char *what, const char *name, size_t len)
{
	lr_err_set(e, "storage: %s of '%s' is corrupt (%zu bytes)", what, name, len);
	return LR_ECORRUPT;
}

/* ---- map size ---- */

/* Reserves the disk space under the map (see the header comment). */
static int back_map(struct core *c, size_t size)
{
	int fd;
	if (mdb_env_get_fd(c->env, &fd))
		return 0;
	int rc = posix_fallocate(fd, 0, (off_t)size);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		return 0;
	return -rc;
}

/*
 * data.mdb's size: at least every process's map (each one reserves the
 * file to its map's size before it maps it), 0 when unknown.
 */
static size_t file_size(struct core *c)
{
	struct stat st;
	if (c->map_fd < 0 || fstat(c->map_fd, &st) < 0 || st.st_size < 0)
		return 0;
	return (size_t)st.st_size;
}

/*
 * Every process sets its map's size under this lock (F_WRLCK) or after it
 * (F_UNLCK): with MDB_WRITEMAP, LMDB truncates data.mdb to the size it is
 * given, so reading the file's size and setting a map at least that large
 * must not interleave with another process's growth.
 */
static void map_lock(struct core *c, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	while (c->map_fd >= 0 && fcntl(c->map_fd, F_OFD_SETLKW, &fl) < 0 && errno == EINTR)
		;
}

/*
 * Grows the map to hold at least need more bytes; no transaction of ours
 * is open. Never below the file's size: with MDB_WRITEMAP, LMDB truncates
 * the file to the map's size, and a smaller map would cut off pages
 * another process, whose map has grown further, is writing (SIGBUS).
 */
static int grow_map(struct core *c, size_t need, struct lr_err *e)
{
	pthread_rwlock_wrlock(&c->resize);
	map_lock(c, F_WRLCK);
	MDB_envinfo info;
	mdb_env_info(c->env, &info);
	size_t cur = info.me_mapsize, size = cur * 2, fsz = file_size(c);
	while (size < cur + need + (cur >> 3) && size < MAX_MAP)
		size *= 2;
	if (size < fsz)
		size = fsz;
	int rc = 0;
	if (size > MAX_MAP) {
		lr_err_set(e, "storage: the map of '%s' cannot grow past %zu bytes", c->root,
			   (size_t)MAX_MAP);
		rc = -ENOSPC;
	} else if ((rc = back_map(c, size)) != 0) {
		lr_err_set(e, "storage: growing '%s' to %zu bytes: %s", c->root, size,
			   strerror(-rc));
	} else if ((rc = mdb_env_set_mapsize(c->env, size)) != 0) {
		rc = lm_fail(rc, e, "growing the map of", c->root);
	}
	map_lock(c, F_UNLCK);
	pthread_rwlock_unlock(&c->resize);
	return rc;
}

/*
 * Another process grew the map: adopt its size, which the file's size
 * holds (the meta page's may be a smaller map's, written by a process that
 * had not grown yet, and LMDB would truncate the file to it).
 */
static int adopt_map(struct core *c, struct lr_err *e)
{
	pthread_rwlock_wrlock(&c->resize);
	map_lock(c, F_WRLCK);
	int rc = mdb_env_set_mapsize(c->env, file_size(c));
	map_lock(c, F_UNLCK);
	pthread_rwlock_unlock(&c->resize);
	return rc ? lm_fail(rc, e, "adopting the map size of", c->root) : 0;
}

/* ---- writing ahead (see the header comment) ---- */

static unsigned char zeros[1 << 16];

static int zero_range(int fd, off_t from, off_t to)
{
	struct iovec iov[16];
	for (size_t i = 0; i < 16; i++)
		iov[i] = (struct iovec){ zeros, sizeof zeros };
	while (from < to) {
		off_t left = to - from;
		int n = 0;
		for (; n < 16 && left > 0; n++) {
			iov[n].iov_len = left < (off_t)sizeof zeros ? (size_t)left : sizeof zeros;
			left -= (off_t)iov[n].iov_len;
		}
		ssize_t w = pwritev(fd, iov, n, from);
		for (int i = 0; i < n; i++)
			iov[i].iov_len = sizeof zeros;
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		from += w;
	}
	return 0;
}

/*
 * Writes zeros over what in [from, to) of fd is not written data (a hole,
 * an unwritten or delayed extent) and syncs them. The caller makes sure
 * nothing in the range is in use. 0, 1 when the file system cannot say
 * (no FIEMAP: nothing written), or -errno.
 */
static int write_ahead(int fd, off_t from, off_t to)
{
	union {
		struct fiemap fm;
		char b[sizeof(struct fiemap) + 32 * sizeof(struct fiemap_extent)];
	} u;
	const unsigned not_data = FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_DELALLOC |
				  FIEMAP_EXTENT_UNKNOWN;
	off_t pos = from;
	int rc = 0, wrote = 0;
	while (pos < to && rc == 0) {
		memset(&u, 0, sizeof u);
		u.fm.fm_start = (uint64_t)pos;
		u.fm.fm_length = (uint64_t)(to - pos);
		u.fm.fm_extent_count = 32;
		if (ioctl(fd, FS_IOC_FIEMAP, &u.fm) < 0) {
			if (!wrote)
				return 1;
			rc = -errno;
			break;
		}
		unsigned n = u.fm.fm_mapped_extents, last = n == 0;
		off_t was = pos;
		for (unsigned i = 0; i < n && rc == 0 && pos < to; i++) {
			const struct fiemap_extent *x = &u.fm.fm_extents[i];
			off_t a = (off_t)x->fe_logical, b = a + (off_t)x->fe_length;
			if (b > to)
				b = to;
			if (a > pos) { /* a hole */
				rc = zero_range(fd, pos, a < to ? a : to);
				wrote = 1;
			}
			if (rc == 0 && (x->fe_flags & not_data) && b > (a > pos ? a : pos)) {
				rc = zero_range(fd, a > pos ? a : pos, b);
				wrote = 1;
			}
			if (b > pos)
				pos = b;
			if (x->fe_flags & FIEMAP_EXTENT_LAST)
				last = 1;
		}
		if (rc == 0 && (last || n < 32) && pos < to) { /* a hole to the end */
			rc = zero_range(fd, pos, to);
			wrote = 1;
			pos = to;
		}
		if (pos == was && rc == 0)
			rc = -EIO; /* FIEMAP went nowhere */
	}
	if (rc == 0 && wrote && fdatasync(fd) < 0)
		rc = -errno;
	return rc;
}

/*
 * Whether writing ahead is due, and the range it would write: from what is
 * written already (or LMDB's last page) to WRITE_AHEAD past that page, at
 * most the map's end. Read from LMDB's current state each time (another
 * process's writer may have grown it).
 */
static int ahead_range(struct core *c, size_t *from, size_t *to)
{
	MDB_envinfo info;
	MDB_stat st;
	if (c->ahead_off || c->no_sync || mdb_env_info(c->env, &info) ||
	    mdb_env_stat(c->env, &st))
		return 0;
	size_t end = ((size_t)info.me_last_pgno + 1) * st.ms_psize;
	*to = end + WRITE_AHEAD < info.me_mapsize ? end + WRITE_AHEAD : info.me_mapsize;
	*from = c->ahead > end ? c->ahead : end;
	return c->ahead < end + WRITE_AHEAD / 2 && *from < *to;
}

/* Whether map_ahead is due (the writer's, or busy's holder's). */
static int ahead_wanted(struct core *c)
{
	size_t from, to;
	return ahead_range(c, &from, &to);
}

/*
 * Keeps WRITE_AHEAD bytes past LMDB's last page written. t is a write
 * transaction that has not written yet: LMDB's writer lock keeps every
 * other process's writer out of the range. Failure only stops writing
 * ahead (the syncs then write the extents again).
 */
static void map_ahead(struct core *c, MDB_txn *t)
{
	size_t from, to;
	int fd;
	(void)t;
	if (!ahead_range(c, &from, &to) || mdb_env_get_fd(c->env, &fd))
		return;
	if (write_ahead(fd, (off_t)from, (off_t)to) == 0)
		c->ahead = to;
	else
		c->ahead_off = 1;
}

/* map_ahead between batches, when due, in a transaction of its own. */
static void map_ahead_idle(struct core *c)
{
	if (!ahead_wanted(c))
		return;
	pthread_rwlock_rdlock(&c->resize);
	MDB_txn *t;
	if (mdb_txn_begin(c->env, NULL, 0, &t) == 0) {
		map_ahead(c, t);
		mdb_txn_abort(t);
	}
	pthread_rwlock_unlock(&c->resize);
}

/* ---- read transactions ---- */

static int rtxn_begin(struct core *c, MDB_txn **t, const char *name, struct lr_err *e)
{
	for (;;) {
		pthread_rwlock_rdlock(&c->resize);
		int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, t);
		if (rc == 0)
			return 0;
		pthread_rwlock_unlock(&c->resize);
		if (rc != MDB_MAP_RESIZED)
			return lm_fail(rc, e, "reading", name);
		if ((rc = adopt_map(c, e)) != 0)
			return rc;
	}
}

static void rtxn_end(struct core *c, MDB_txn *t)
{
	mdb_txn_abort(t);
	pthread_rwlock_unlock(&c->resize);
}

static int get_tip(struct core *c, MDB_txn *t, const struct key *k, const char *name,
		   uint64_t *tip, struct lr_err *e)
{
	MDB_val kv = { k->len, (void *)k->b }, v;
	int rc = g_get(t, c->dbi[DB_TIP], &kv, &v);
	if (rc == MDB_NOTFOUND) {
		*tip = 0;
		return 0;
	}
	if (rc)
		return lm_fail(rc, e, "reading the tip of", name);
	if (v.mv_size != 8)
		return corrupt(e, "the tip entry", name, v.mv_size);
	*tip = be64_get(v.mv_data);
	return 0;
}

static int get_u64(struct core *c, MDB_txn *t, int db, const struct key *k, const char *name,
		   uint64_t *out, struct lr_err *e)
{
	MDB_val kv = { k->len, (void *)k->b }, v;
	int rc = g_get(t, c->dbi[db], &kv, &v);
	if (rc == MDB_NOTFOUND) {
		*out = 0;
		return 0;
	}
	if (rc)
		return lm_fail(rc, e, "reading", name);
	if (v.mv_size != 8)
		return corrupt(e, db == DB_EPOCH ? "the lease epoch" : "the entry", name, v.mv_size);
	*out = be64_get(v.mv_data);
	return 0;
}

/* ---- the writer: one job at a time inside the batch transaction ---- */

/*
 * Each apply returns 0 with the job's own outcome in j->rc, or an LMDB
 * code that concerns the whole transaction (map full, txn full, corrupt):
 * the batch is then aborted and retried or failed.
 */
static int apply_append(struct core *c, MDB_txn *t, struct job *j)
{
	uint64_t tip;
	int rc = get_tip(c, t, &j->key, j->name, &tip, &j->err);
	if (rc) {
		j->rc = rc;
		return 0;
	}
	if (tip != j->expected) {
		lr_err_set(&j->err, "storage: append to '%s' conflicts at expected tip %llu "
				   "(tip is %llu)", j->name, (unsigned long long)j->expected,
			   (unsigned long long)tip);
		j->rc = LR_ECONFLICT;
		return 0;
	}
	unsigned char kb[SHORT_MAX + 16];
	size_t n = rec_prefix(&j->key, kb);
	be64_put(kb + n, tip + 1);
	MDB_val k = { n + 8, kb }, v = { j->len, (void *)j->data };
	rc = g_put(t, c->dbi[DB_REC], &k, &v, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST) {
		lr_err_set(&j->err, "storage: ledger '%s' is corrupt: record %llu exists beyond "
				    "its tip", j->name, (unsigned long long)tip + 1);
		j->rc = LR_ECORRUPT;
		return 0;
	}
	if (rc)
		return rc;
	unsigned char tb[8];
	be64_put(tb, tip + 1);
	MDB_val tk = { j->key.len, j->key.b }, tv = { 8, tb };
	if ((rc = g_put(t, c->dbi[DB_TIP], &tk, &tv, 0)) != 0)
		return rc;
	j->out = tip + 1;
	j->rc = 0;
	return 0;
}

static int apply_ldelete(struct core *c, MDB_txn *t, struct job *j)
{
	unsigned char kb[SHORT_MAX + 16];
	size_t n = rec_prefix(&j->key, kb);
	MDB_cursor *cur;
	int rc = mdb_cursor_open(t, c->dbi[DB_REC], &cur);
	if (rc)
		return rc;
	MDB_val k = { n, kb }, v;
	rc = g_cget(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size == n + 8 && memcmp(k.mv_data, kb, n) == 0) {
		if ((rc = g_cdel(cur)) != 0)
			break;
		/* after a delete, NEXT yields the entry that took its place */
		rc = g_cget(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	if (rc && rc != MDB_NOTFOUND)
		return rc;
	MDB_val tk = { j->key.len, j->key.b };
	rc = g_del(t, c->dbi[DB_TIP], &tk);
	if (rc && rc != MDB_NOTFOUND)
		return rc;
	j->rc = 0;
	return 0;
}

static int apply_kvput(struct core *c, MDB_txn *t, struct job *j)
{
	MDB_val k = { j->key.len, j->key.b }, v;
	size_t hl = name_hdr_len(&j->key, j->name);
	uint64_t cur = 0;
	int rc = g_get(t, c->dbi[DB_KV], &k, &v);
	if (rc == 0) {
		if (v.mv_size < 8 + hl || (hl && !name_hdr_check((unsigned char *)v.mv_data + 8,
								  v.mv_size - 8, j->name))) {
			j->rc = corrupt(&j->err, "the kv entry", j->name, v.mv_size);
			return 0;
		}
		cur = be64_get(v.mv_data);
	} else if (rc != MDB_NOTFOUND) {
		return rc;
	}
	if (cur != j->expected) {
		lr_err_set(&j->err, "storage: put of '%s' conflicts: expected revision %llu, "
				    "found %llu", j->name, (unsigned long long)j->expected,
			   (unsigned long long)cur);
		j->rc = LR_ECONFLICT;
		return 0;
	}
	v.mv_size = 8 + hl + j->len;
	if ((rc = g_put(t, c->dbi[DB_KV], &k, &v, MDB_RESERVE)) != 0)
		return rc;
	unsigned char *p = v.mv_data;
	be64_put(p, cur + 1);
	if (hl)
		name_hdr_put(p + 8, j->name);
	if (j->len)
		memcpy(p + 8 + hl, j->data, j->len);
	j->out = cur + 1;
	j->rc = 0;
	return 0;
}

static int apply_del(struct core *c, MDB_txn *t, struct job *j, int db)
{
	MDB_val k = { j->key.len, j->key.b };
	int rc = g_del(t, c->dbi[db], &k);
	if (rc && rc != MDB_NOTFOUND)
		return rc;
	j->rc = 0;
	return 0;
}

static int apply_epoch(struct core *c, MDB_txn *t, struct job *j)
{
	uint64_t ep;
	int rc = get_u64(c, t, DB_EPOCH, &j->key, j->name, &ep, &j->err);
	if (rc) {
		j->rc = rc;
		return 0;
	}
	unsigned char b[8];
	be64_put(b, ep + 1);
	MDB_val k = { j->key.len, j->key.b }, v = { 8, b };
	if ((rc = g_put(t, c->dbi[DB_EPOCH], &k, &v, 0)) != 0)
		return rc;
	j->out = ep + 1;
	j->rc = 0;
	return 0;
}

/* Reads exactly n bytes; 0, -errno, or LR_ECORRUPT when the source ends early. */
static int read_full(int fd, void *buf, size_t n, size_t *got)
{
	*got = 0;
	while (*got < n) {
		ssize_t r = read(fd, (char *)buf + *got, n - *got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return LR_ECORRUPT;
		*got += (size_t)r;
	}
	return 0;
}

/* The existing blob against the fd's bytes, chunk by chunk. */
static int blob_same_fd(struct job *j, const unsigned char *have, uint64_t len)
{
	unsigned char buf[65536];
	uint64_t off = 0;
	j->fd_used = 1;
	while (off < len) {
		size_t n = len - off < sizeof buf ? (size_t)(len - off) : sizeof buf, got;
		int rc = read_full(j->fd, buf, n, &got);
		if (rc)
			return rc;
		if (memcmp(buf, have + off, n) != 0)
			return 1;
		off += n;
	}
	return 0;
}

static int apply_blobput(struct core *c, MDB_txn *t, struct job *j)
{
	MDB_val k = { j->key.len, j->key.b }, v;
	size_t hl = name_hdr_len(&j->key, j->name);
	size_t len = j->len;
	if (j->kind == J_BLOBFD && j->fd_used) {
		/* A retry of the batch (the map grew): the source is read again. */
		if (j->fd_start < 0 || lseek(j->fd, j->fd_start, SEEK_SET) < 0) {
			lr_err_set(&j->err, "storage: blob '%s': its source cannot be re-read "
					    "after the store grew", j->name);
			j->rc = -ESPIPE;
			return 0;
		}
		j->fd_used = 0;
	}
	int rc = g_get(t, c->dbi[DB_BLOB], &k, &v);
	if (rc == 0) {
		if (v.mv_size < hl || (hl && !name_hdr_check(v.mv_data, v.mv_size, j->name))) {
			j->rc = corrupt(&j->err, "the blob", j->name, v.mv_size);
			return 0;
		}
		const unsigned char *have = (const unsigned char *)v.mv_data + hl;
		int differ = v.mv_size - hl != len;
		if (!differ && j->kind == J_BLOBPUT) {
			differ = len && memcmp(have, j->data, len) != 0;
		} else if (!differ) {
			int r = blob_same_fd(j, have, len);
			if (r < 0 || r == LR_ECORRUPT) {
				lr_err_set(&j->err, "storage: blob '%s': reading its source failed",
					   j->name);
				j->rc = r;
				return 0;
			}
			differ = r;
		}
		if (differ) {
			lr_err_set(&j->err, "storage: blob '%s' exists with different bytes",
				   j->name);
			j->rc = LR_EBLOBCONFLICT;
		} else {
			j->rc = 0;
		}
		return 0;
	}
	if (rc != MDB_NOTFOUND)
		return rc;
	v.mv_size = hl + len;
	if ((rc = g_put(t, c->dbi[DB_BLOB], &k, &v, MDB_RESERVE)) != 0)
		return rc;
	unsigned char *p = v.mv_data;
	if (hl)
		name_hdr_put(p, j->name);
	if (j->kind == J_BLOBPUT) {
		if (len)
			memcpy(p + hl, j->data, len);
	} else {
		size_t got;
		j->fd_used = 1;
		int r = read_full(j->fd, p + hl, len, &got);
		if (r) {
			lr_err_set(&j->err, "storage: blob '%s': reading its source failed after "
					    "%zu of %zu bytes", j->name, got, (size_t)len);
			j->rc = r;
			if ((rc = g_del(t, c->dbi[DB_BLOB], &k)) != 0)
				return rc;
			return 0;
		}
	}
	j->rc = 0;
	return 0;
}

static int apply(struct core *c, MDB_txn *t, struct job *j)
{
	switch (j->kind) {
	case J_APPEND:
		return apply_append(c, t, j);
	case J_LDELETE:
		return apply_ldelete(c, t, j);
	case J_KVPUT:
		return apply_kvput(c, t, j);
	case J_KVDEL:
		return apply_del(c, t, j, DB_KV);
	case J_BLOBPUT:
	case J_BLOBFD:
		return apply_blobput(c, t, j);
	case J_BLOBDEL:
		return apply_del(c, t, j, DB_BLOB);
	case J_EPOCH:
		return apply_epoch(c, t, j);
	}
	return EINVAL;
}

/* ---- the log ahead of the meta sync (see the header comment) ---- */

static int pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = pwrite(fd, (const char *)buf + done, n - done, off + (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		done += (size_t)w;
	}
	return 0;
}

/*
 * Semaphores, not a mutex and a condition: a post with nobody waiting and
 * a wait for what was already posted make no system call, and neither
 * side wakes the other only to make it wait for a lock (the writer's
 * msync is usually the slower, so it seldom sleeps in wal_wait at all).
 */
static void *syncer_main(void *arg)
{
	struct core *c = arg;
	for (;;) {
		while (sem_wait(&c->s_go) < 0 && errno == EINTR)
			;
		if (c->s_stop)
			break;
		int rc = pwrite_full(c->wal_fd, c->wal_buf, c->s_len, c->s_off);
		if (rc == 0 && fdatasync(c->wal_fd) < 0)
			rc = -errno;
		c->s_rc = rc;
		sem_post(&c->s_done);
	}
	return NULL;
}

static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

/* Creates this process's log on the first logged group; 0, or -1: sync LMDB twice instead. */
static int wal_open(struct core *c)
{
	if (c->wal_dead)
		return -1;
	if (c->wal_fd >= 0)
		return 0;
	if (c->wal_fd == -2)
		return -1;
	c->wal_fd = -2;
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/wal", c->root) >= sizeof path ||
	    (mkdir(path, 0700) < 0 && errno != EEXIST))
		return -1;
	size_t n = strlen(path);
	if ((size_t)snprintf(path + n, sizeof path - n, "/%ld.%llu.log", (long)getpid(),
			     (unsigned long long)lr_now_ns()) >= sizeof path - n)
		return -1;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0 || !(c->wal_buf = malloc(WAL_SLOT)) ||
	    !(c->wal_path = strdup(path))) {
		free(c->wal_buf);
		c->wal_buf = NULL;
		unlink(path);
		close(fd);
		return -1;
	}
	/*
	 * Written in full now, so that a group's fdatasync is its data and a
	 * flush: no size or extent change to write with it. Then the new name
	 * and the folder's, durable before anything relies on the log.
	 */
	path[n] = 0;
	if (zero_range(fd, 0, (off_t)WAL_BYTES) || fdatasync(fd) || sync_dir(path) ||
	    sync_dir(c->root) ||
	    pthread_create(&c->syncer, NULL, syncer_main, c) != 0) {
		unlink(c->wal_path);
		close(fd);
		return -1;
	}
	c->wal_fd = fd;
	c->s_started = 1;
	return 0;
}

/*
 * The slot of a group whose outcomes are known (applied, not committed):
 * its length, or 0 when the group cannot go through the log (another kind
 * of job, or more than WAL_SLOT bytes).
 */
static size_t wal_build(struct core *c, MDB_txn *t, struct job **jobs, size_t n)
{
	size_t off = WAL_HDR;
	uint32_t count = 0;
	for (size_t i = 0; i < n; i++) {
		struct job *j = jobs[i];
		if (j->kind != J_APPEND && j->kind != J_KVPUT && j->kind != J_EPOCH)
			return 0;
		if (j->rc)
			continue;
		size_t nl = strlen(j->name), dl = j->kind == J_EPOCH ? 0 : j->len;
		if (off + WAL_ENT + nl + dl > WAL_SLOT)
			return 0;
		unsigned char *p = c->wal_buf + off;
		p[0] = (unsigned char)j->kind;
		p[1] = (unsigned char)(nl >> 8);
		p[2] = (unsigned char)nl;
		be64_put(p + 3, j->out);
		be32_put(p + 11, (uint32_t)dl);
		memcpy(p + WAL_ENT, j->name, nl);
		if (dl)
			memcpy(p + WAL_ENT + nl, j->data, dl);
		off += WAL_ENT + nl + dl;
		count++;
	}
	unsigned char *h = c->wal_buf;
	memcpy(h, wal_magic, 8);
	be32_put(h + 12, (uint32_t)(off - WAL_HDR));
	memcpy(h + 16, c->boot, BOOT_LEN);
	be64_put(h + 56, (uint64_t)mdb_txn_id(t));
	be32_put(h + 64, count);
	be32_put(h + 68, 0);
	be32_put(h + 8, lr_crc32c(0, h + 12, off - 12));
	return off;
}

static void wal_post(struct core *c, size_t len)
{
	c->s_len = len;
	c->s_off = c->wal_off;
	sem_post(&c->s_go);
}

static int wal_wait(struct core *c)
{
	while (sem_wait(&c->s_done) < 0 && errno == EINTR)
		;
	return c->s_rc;
}

/* The commit of a logged group failed: it must not be replayed (the next one goes there). */
static void wal_void(struct core *c)
{
	unsigned char zero[WAL_HDR] = { 0 };
	if (pwrite_full(c->wal_fd, zero, sizeof zero, c->wal_off) || fdatasync(c->wal_fd) < 0)
		c->wal_dead = 1; /* no more logging: every later commit is a checkpoint */
}

/* ---- checkpoints (see the header comment) ---- */

struct ckpt {
	uint64_t txnid;
	uint32_t psize;
	char boot[BOOT_LEN];
	unsigned char meta[META_LEN];
};

/* The valid slot of fd with the higher txnid: 0, 1 when there is none. which: its index. */
static int ckpt_read(int fd, struct ckpt *out, int *which)
{
	int found = 1;
	for (int i = 0; i < 2; i++) {
		unsigned char b[CKPT_SLOT];
		if (pread(fd, b, sizeof b, (off_t)i * CKPT_SLOT) != (ssize_t)sizeof b ||
		    memcmp(b, ckpt_magic, 8) != 0 || lr_crc32c(0, b + 12, CKPT_SLOT - 12) != be32_get(b + 8))
			continue;
		uint64_t txnid = be64_get(b + 56);
		if (found == 0 && txnid <= out->txnid)
			continue;
		out->txnid = txnid;
		out->psize = be32_get(b + 12);
		memcpy(out->boot, b + 16, BOOT_LEN);
		memcpy(out->meta, b + 64, META_LEN);
		if (which)
			*which = i;
		found = 0;
	}
	return found;
}

/* Opens root/wal/checkpoint, creating it (both slots written, synced, and its name). */
static int ckpt_open(struct core *c)
{
	if (c->ckpt_fd >= 0)
		return 0;
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/wal", c->root) >= sizeof path - 16 ||
	    (mkdir(path, 0700) < 0 && errno != EEXIST))
		return -EIO;
	size_t n = strlen(path);
	snprintf(path + n, sizeof path - n, "/checkpoint");
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
		if (errno != EINTR) {
			close(fd);
			return -EIO;
		}
	}
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0 && st.st_size < (off_t)(2 * CKPT_SLOT)) {
		path[n] = 0;
		if (zero_range(fd, 0, (off_t)(2 * CKPT_SLOT)) || fdatasync(fd) < 0 || sync_dir(path) ||
		    sync_dir(c->root))
			rc = -EIO;
	}
	fl.l_type = F_UNLCK;
	fcntl(fd, F_OFD_SETLK, &fl);
	if (rc) {
		close(fd);
		return rc;
	}
	c->ckpt_fd = fd;
	return 0;
}

/*
 * Records a checkpoint at txnid, synced, in the slot that does not hold
 * the latest, under the file's lock (other processes record theirs).
 * Nothing to do when a later one (or this one, in this boot) is there.
 */
static int ckpt_write(struct core *c, uint64_t txnid, const unsigned char *meta, uint32_t psize)
{
	int rc = ckpt_open(c);
	if (rc)
		return rc;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	while (fcntl(c->ckpt_fd, F_OFD_SETLKW, &fl) < 0) {
		if (errno != EINTR)
			return -EIO;
	}
	struct ckpt cur;
	int which = 1;
	int none = ckpt_read(c->ckpt_fd, &cur, &which);
	if (!none && (cur.txnid > txnid ||
		      (cur.txnid == txnid && memcmp(cur.boot, c->boot, BOOT_LEN) == 0))) {
		c->ckpt_txnid = cur.txnid;
	} else {
		unsigned char b[CKPT_SLOT] = { 0 };
		memcpy(b, ckpt_magic, 8);
		be32_put(b + 12, psize);
		memcpy(b + 16, c->boot, BOOT_LEN);
		be64_put(b + 56, txnid);
		memcpy(b + 64, meta, META_LEN);
		be32_put(b + 8, lr_crc32c(0, b + 12, CKPT_SLOT - 12));
		int slot = none ? 0 : which ^ 1;
		rc = pwrite_full(c->ckpt_fd, b, sizeof b, (off_t)slot * CKPT_SLOT);
		if (rc == 0 && fdatasync(c->ckpt_fd) < 0)
			rc = -errno;
		if (rc == 0)
			c->ckpt_txnid = txnid;
	}
	fl.l_type = F_UNLCK;
	fcntl(c->ckpt_fd, F_OFD_SETLK, &fl);
	return rc;
}

/*
 * A checkpoint: pins the last commit (a read transaction on it, so that
 * LMDB never reuses its pages), syncs the map, records the commit and its
 * meta page in root/wal/checkpoint, then lets the previous pin go and
 * starts the log again. The committer's (commit_mu), outside a write
 * transaction. The meta page is read back from the map and checked
 * against LMDB's layout (magic, txnid): a different layout is an error.
 */
static int checkpoint(struct core *c, struct lr_err *e)
{
	for (int tries = 0;; tries++) {
		MDB_txn *pin;
		pthread_rwlock_rdlock(&c->resize);
		int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &pin);
		if (rc == MDB_MAP_RESIZED) {
			pthread_rwlock_unlock(&c->resize);
			if ((rc = adopt_map(c, e)) != 0)
				return rc;
			continue;
		}
		if (rc) {
			pthread_rwlock_unlock(&c->resize);
			return lm_fail(rc, e, "checkpointing", c->root);
		}
		uint64_t txnid = (uint64_t)mdb_txn_id(pin);
		MDB_stat st;
		unsigned char meta[META_LEN];
		uint32_t magic = 0;
		uint64_t at = 0;
		int fd;
		rc = mdb_env_sync(c->env, 1);
		/* the file and LMDB's shared map are one page cache */
		if (rc == 0 && mdb_env_stat(c->env, &st) == 0 && mdb_env_get_fd(c->env, &fd) == 0 &&
		    pread(fd, meta, META_LEN, (off_t)(txnid & 1) * st.ms_psize + META_AT) == META_LEN) {
			memcpy(&magic, meta, 4);
			memcpy(&at, meta + META_TXNID, 8);
		}
		pthread_rwlock_unlock(&c->resize);
		if (rc) {
			mdb_txn_abort(pin);
			return lm_fail(rc, e, "syncing", c->root);
		}
		if (magic != META_MAGIC || at != txnid) {
			mdb_txn_abort(pin);
			if (magic == META_MAGIC && at > txnid && tries < 8)
				continue; /* other processes committed twice since the pin: again */
			lr_err_set(e, "storage: checkpointing '%s': LMDB's meta page is not as expected",
				   c->root);
			return LR_ECORRUPT;
		}
		if ((rc = ckpt_write(c, txnid, meta, st.ms_psize)) != 0) {
			mdb_txn_abort(pin);
			lr_err_set(e, "storage: recording a checkpoint of '%s': %s", c->root, strerror(-rc));
			return rc;
		}
		if (c->pin)
			mdb_txn_abort(c->pin);
		c->pin = pin;
		c->wal_off = 0;
		c->wal_groups = 0;
		return 0;
	}
}

/*
 * After a reboot, puts the meta of the last checkpoint back in both meta
 * pages of data.mdb, before LMDB opens it: a meta page written after the
 * checkpoint may have reached the disk ahead of the pages it points at.
 * The checkpoint's pages were pinned until a later checkpoint was
 * recorded, so its tree is whole; the logs replay what followed it.
 */
static int meta_restore(struct core *c, struct lr_err *e)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/wal/checkpoint", c->root);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct ckpt k;
	int none = ckpt_read(fd, &k, NULL);
	close(fd);
	if (none || memcmp(k.boot, c->boot, BOOT_LEN) == 0)
		return 0; /* this boot: the page cache is the file */
	snprintf(path, sizeof path, "%s/data.mdb", c->root);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		lr_err_set(e, "storage: '%s' has a checkpoint but no data.mdb", c->root);
		return LR_ECORRUPT;
	}
	/*
	 * The file the checkpoint was taken of has both metas at its txnid or
	 * after (the sync wrote txnid - 1 and txnid; later commits only move
	 * them on). Metas before it: data.mdb was put back from elsewhere
	 * (a copy), and is left as it is.
	 */
	int rc = 0;
	uint64_t txn[2] = { 0, 0 };
	for (int p = 0; p < 2 && rc == 0; p++) {
		unsigned char m[META_LEN];
		uint32_t magic = 0;
		off_t at = (off_t)p * (off_t)k.psize + META_AT;
		if (k.psize < 512 || pread(fd, m, META_LEN, at) != META_LEN)
			rc = LR_ECORRUPT;
		memcpy(&magic, m, 4);
		memcpy(&txn[p], m + META_TXNID, 8);
		if (rc == 0 && magic != META_MAGIC)
			rc = LR_ECORRUPT;
	}
	uint64_t lo = txn[0] < txn[1] ? txn[0] : txn[1], hi = txn[0] ^ txn[1] ^ lo;
	int fits = hi >= k.txnid && lo + 1 >= k.txnid;
	for (int p = 0; p < 2 && rc == 0 && fits; p++)
		if (pwrite_full(fd, k.meta, META_LEN, (off_t)p * (off_t)k.psize + META_AT) != 0)
			rc = -EIO;
	if (rc == 0 && fits && fsync(fd) < 0)
		rc = -EIO;
	close(fd);
	if (rc)
		lr_err_set(e, "storage: restoring the checkpoint of '%s' after a reboot: %s", c->root,
			   rc == LR_ECORRUPT ? "its meta pages are not LMDB's" : strerror(EIO));
	return rc;
}

static size_t job_bytes(const struct job *j)
{
	return j->len + 64;
}

/*
 * Commits jobs[0..n) in one transaction. Returns how many were settled
 * (n, or fewer when the transaction grew too large and was split); each
 * settled job has rc and err filled.
 */
static size_t run_batch(struct core *c, struct job **jobs, size_t n)
{
	struct lr_err e;
	int rc;
	for (;;) {
		for (size_t i = 0; i < n; i++) {
			jobs[i]->rc = 0;
			jobs[i]->err.msg[0] = 0;
		}
		/* a full log: the checkpoint first, which starts it again */
		if (c->deferred && c->wal_fd >= 0 && !c->wal_dead &&
		    (size_t)c->wal_off + WAL_SLOT > WAL_BYTES && (rc = checkpoint(c, &e)) != 0)
			goto fail;
		pthread_rwlock_rdlock(&c->resize);
		MDB_txn *t;
		rc = mdb_txn_begin(c->env, NULL, 0, &t);
		if (rc == MDB_MAP_RESIZED) {
			pthread_rwlock_unlock(&c->resize);
			if ((rc = adopt_map(c, &e)) == 0)
				continue;
			goto fail;
		}
		if (rc) {
			pthread_rwlock_unlock(&c->resize);
			rc = lm_fail(rc, &e, "beginning a write in", c->root);
			goto fail;
		}
		size_t i;
		for (i = 0; i < n && rc == 0; i++)
			rc = apply(c, t, jobs[i]);
		size_t slot = 0;
		if (rc == 0 && c->deferred && wal_open(c) == 0 &&
		    (slot = wal_build(c, t, jobs, n)) != 0)
			wal_post(c, slot); /* written and synced while LMDB commits */
		if (rc == 0)
			rc = g_commit(t);
		else
			mdb_txn_abort(t);
		pthread_rwlock_unlock(&c->resize);
		if (slot) {
			int wrc = wal_wait(c);
			if (rc == 0 && wrc == 0) {
				c->wal_off += (off_t)((slot + WAL_ALIGN - 1) / WAL_ALIGN * WAL_ALIGN);
				c->wal_groups++;
				return n;
			}
			if (rc == 0)
				c->wal_dead = 1; /* the log failed: a checkpoint below, from now on */
			else
				wal_void(c);
		}
		if (rc == 0 && c->deferred) {
			/* not logged: durable by a checkpoint (LMDB synced, then recorded) */
			if ((rc = checkpoint(c, &e)) == 0)
				return n;
			goto fail;
		}
		if (rc == 0)
			return n;
		if (rc == MDB_MAP_FULL) {
			size_t need = 0;
			for (i = 0; i < n; i++)
				need += job_bytes(jobs[i]);
			if ((rc = grow_map(c, need, &e)) == 0)
				continue;
			goto fail;
		}
		if (rc == MDB_TXN_FULL && n > 1) {
			n /= 2;
			continue;
		}
		if (rc == MDB_TXN_FULL) {
			lr_err_set(&e, "storage: write of '%s' is too large for one transaction",
				   jobs[0]->name);
			rc = LR_ETOOBIG;
			goto fail;
		}
		rc = lm_fail(rc, &e, "writing", n == 1 ? jobs[0]->name : c->root);
		goto fail;
	}
fail:
	for (size_t i = 0; i < n; i++) {
		jobs[i]->rc = rc;
		jobs[i]->err = e;
	}
	return n;
}

static void settle(struct core *c, struct job **jobs, size_t n)
{
	struct job *async = NULL, **tail = &async;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < n; i++) {
		struct job *j = jobs[i];
		if (j->cb) {
			*tail = j;
			tail = &j->next;
			j->next = NULL;
		} else {
			j->done = 1;
			pthread_cond_signal(&j->cond);
			/* j may be gone as soon as the lock drops */
		}
	}
	pthread_mutex_unlock(&c->mu);
	while (async) {
		struct job *j = async;
		async = j->next;
		j->cb(j->cbarg, j->rc, j->rc ? 0 : j->out, &j->err);
		free(j->owned);
		free(j);
	}
}

/*
 * The writer thread: commits what is queued while no caller is committing
 * on its own thread (busy; see submit), and writes the map ahead when a
 * caller's commit found it due.
 */
static void *writer_main(void *arg)
{
	struct core *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (c->busy || (!c->head && !c->ahead_due && !c->ckpt_due && !c->stopping))
			pthread_cond_wait(&c->wake, &c->mu);
		if (!c->head && (c->stopping || (!c->ahead_due && !c->ckpt_due)))
			break;
		c->busy = 1;
		c->ahead_due = 0;
		c->ckpt_due = 0;
		size_t n = 0, bytes = 0;
		while (c->head && n < c->max_batch && (n == 0 || bytes < BATCH_BYTES)) {
			struct job *j = c->head;
			c->head = j->next;
			if (!c->head)
				c->tail = NULL;
			bytes += job_bytes(j);
			c->batch[n++] = j;
		}
		pthread_mutex_unlock(&c->mu);
		pthread_mutex_lock(&c->commit_mu);
		size_t done = 0;
		while (done < n) {
			size_t k = run_batch(c, c->batch + done, n - done);
			settle(c, c->batch + done, k);
			done += k;
		}
		map_ahead_idle(c); /* acknowledged: the next batch may wait for it, none before */
		if (c->deferred && c->wal_groups >= CKPT_GROUPS) {
			struct lr_err e;
			checkpoint(c, &e); /* failing, the next batch checkpoints when the log is full */
		}
		pthread_mutex_unlock(&c->commit_mu);
		pthread_mutex_lock(&c->mu);
		c->busy = 0;
		if (n)
			c->last_n = n;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void enqueue(struct core *c, struct job *j)
{
	j->next = NULL;
	if (c->tail)
		c->tail->next = j;
	else
		c->head = j;
	c->tail = j;
	pthread_cond_signal(&c->wake);
}

/*
 * Submits a job and waits for its transaction to commit. When nothing is
 * queued, nobody is committing and the last batch held one job (one
 * writer at a time, so there is nothing to group), the caller commits its
 * job itself, on its own thread, with the same syncs before it returns:
 * two thread hand-offs fewer (to the writer and back). Otherwise the job
 * queues for the writer, in order, and is grouped with the others.
 */
static int submit(struct core *c, struct job *j, struct lr_err *e)
{
	j->done = 0;
	j->cb = NULL;
	pthread_mutex_lock(&c->mu);
	if (!c->head && !c->busy && !c->stopping && c->last_n <= 1) {
		c->busy = 1;
		pthread_mutex_unlock(&c->mu);
		struct job *one[1] = { j };
		pthread_mutex_lock(&c->commit_mu);
		run_batch(c, one, 1); /* one job: never split, always settled */
		int due = ahead_wanted(c);
		int ckpt = c->deferred && c->wal_groups >= CKPT_GROUPS;
		pthread_mutex_unlock(&c->commit_mu);
		pthread_mutex_lock(&c->mu);
		c->busy = 0;
		c->last_n = 1;
		c->ahead_due |= due;
		c->ckpt_due |= ckpt;
		if (c->head || c->ahead_due || c->ckpt_due)
			pthread_cond_signal(&c->wake);
		pthread_mutex_unlock(&c->mu);
	} else {
		pthread_cond_init(&j->cond, NULL);
		enqueue(c, j);
		while (!j->done)
			pthread_cond_wait(&j->cond, &c->mu);
		pthread_mutex_unlock(&c->mu);
		pthread_cond_destroy(&j->cond);
	}
	if (j->rc)
		*e = j->err;
	return j->rc;
}

static int job_init(struct job *j, enum job_kind kind, const char *name, struct lr_err *e)
{
	memset(j, 0, sizeof *j);
	j->kind = kind;
	j->name = name;
	j->fd = -1;
	return key_make(name, &j->key, e);
}

/* ---- ledger ---- */

static int lm_append(struct lr_store *s, const char *name, uint64_t expected, const void *rec,
		     size_t len, struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_APPEND, name, e);
	if (rc)
		return rc;
	j.expected = expected;
	j.data = rec;
	j.len = len;
	return submit(((struct lm *)s)->c, &j, e);
}

static void lm_append_async(struct lr_store *s, const char *name, uint64_t expected,
			    const void *rec, size_t len, lr_append_cb cb, void *arg)
{
	struct core *c = ((struct lm *)s)->c;
	struct lr_err e;
	size_t nlen = strlen(name);
	struct job *j = malloc(sizeof *j);
	char *copy = malloc(nlen + 1 + len);
	int rc = -ENOMEM;
	if (!j || !copy) {
		lr_err_set(&e, "storage: append to '%s': out of memory", name);
		goto fail;
	}
	if ((rc = job_init(j, J_APPEND, name, &e)) != 0)
		goto fail;
	memcpy(copy, name, nlen + 1);
	if (len)
		memcpy(copy + nlen + 1, rec, len);
	j->name = copy;
	j->data = copy + nlen + 1;
	j->len = len;
	j->expected = expected;
	j->owned = copy;
	j->cb = cb;
	j->cbarg = arg;
	pthread_mutex_lock(&c->mu);
	enqueue(c, j);
	pthread_mutex_unlock(&c->mu);
	return;
fail:
	free(j);
	free(copy);
	cb(arg, rc, 0, &e);
}

/* Records copied out of one read transaction, handed out without it. */
struct chunk {
	unsigned char *buf;
	size_t len, cap;
	size_t off[READ_CHUNK_RECS + 1];
	uint64_t first;
	size_t n;
};

static int chunk_add(struct chunk *ch, const void *p, size_t n)
{
	if (ch->len + n > ch->cap) {
		size_t cap = ch->cap ? ch->cap : 65536;
		while (cap < ch->len + n)
			cap *= 2;
		unsigned char *b = realloc(ch->buf, cap);
		if (!b)
			return -ENOMEM;
		ch->buf = b;
		ch->cap = cap;
	}
	if (n)
		memcpy(ch->buf + ch->len, p, n);
	ch->len += n;
	ch->off[++ch->n] = ch->len;
	return 0;
}

/*
 * Fills ch with records seq..last; *gone is set when the ledger was
 * deleted (its tip fell below seq) since the read began.
 */
static int read_chunk(struct core *c, const char *name, const struct key *k, uint64_t seq,
		      uint64_t last, struct chunk *ch, int *gone, struct lr_err *e)
{
	MDB_txn *t;
	int rc = rtxn_begin(c, &t, name, e);
	if (rc)
		return rc;
	ch->n = 0;
	ch->len = 0;
	ch->off[0] = 0;
	ch->first = seq;
	*gone = 0;
	unsigned char kb[SHORT_MAX + 16];
	size_t pn = rec_prefix(k, kb);
	be64_put(kb + pn, seq);
	MDB_cursor *cur;
	if ((rc = mdb_cursor_open(t, c->dbi[DB_REC], &cur)) != 0) {
		rc = lm_fail(rc, e, "reading", name);
		goto out;
	}
	MDB_val kv = { pn + 8, kb }, v;
	int op = MDB_SET_KEY;
	while (seq <= last && ch->n < READ_CHUNK_RECS && (ch->n == 0 || ch->len < READ_CHUNK_BYTES)) {
		rc = g_cget(cur, &kv, &v, op);
		op = MDB_NEXT;
		if (rc == 0 && (kv.mv_size != pn + 8 || memcmp(kv.mv_data, kb, pn) != 0 ||
				be64_get((unsigned char *)kv.mv_data + pn) != seq))
			rc = MDB_NOTFOUND;
		if (rc == MDB_NOTFOUND) {
			uint64_t tip;
			rc = get_tip(c, t, k, name, &tip, e);
			if (rc)
				break;
			if (tip < seq) {
				*gone = 1;
				break;
			}
			lr_err_set(e, "storage: ledger '%s' is corrupt: record %llu is missing "
				      "(tip %llu)", name, (unsigned long long)seq,
				   (unsigned long long)tip);
			rc = LR_ECORRUPT;
			break;
		}
		if (rc) {
			char what[64];
			snprintf(what, sizeof what, "reading record %llu of", (unsigned long long)seq);
			rc = lm_fail(rc, e, what, name);
			break;
		}
		if ((rc = chunk_add(ch, v.mv_data, v.mv_size)) != 0) {
			lr_err_set(e, "storage: read of '%s': out of memory", name);
			break;
		}
		seq++;
	}
	mdb_cursor_close(cur);
out:
	rtxn_end(c, t);
	return rc;
}

static int lm_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		   lr_record_cb cb, void *arg, struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(name, &k, e);
	if (rc)
		return rc;
	MDB_txn *t;
	uint64_t tip;
	if ((rc = rtxn_begin(c, &t, name, e)) != 0)
		return rc;
	rc = get_tip(c, t, &k, name, &tip, e);
	rtxn_end(c, t);
	if (rc)
		return rc;
	if (from > tip)
		return 0;
	uint64_t last = limit && limit - 1 < tip - from ? from + limit - 1 : tip;
	struct chunk *ch = calloc(1, sizeof *ch);
	if (!ch)
		return -ENOMEM;
	uint64_t seq = from;
	while (seq <= last && rc == 0) {
		int gone;
		rc = read_chunk(c, name, &k, seq, last, ch, &gone, e);
		for (size_t i = 0; i < ch->n && rc == 0; i++) {
			struct lr_record r = { ch->first + i, ch->buf + ch->off[i],
					       ch->off[i + 1] - ch->off[i] };
			rc = cb(arg, &r);
		}
		if (gone)
			break;
		seq += ch->n;
	}
	free(ch->buf);
	free(ch);
	return rc;
}

static int lm_tip(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(name, &k, e);
	if (rc)
		return rc;
	MDB_txn *t;
	if ((rc = rtxn_begin(c, &t, name, e)) != 0)
		return rc;
	rc = get_tip(c, t, &k, name, tip, e);
	rtxn_end(c, t);
	return rc;
}

static int lm_ledger_delete(struct lr_store *s, const char *name, struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_LDELETE, name, e);
	return rc ? rc : submit(((struct lm *)s)->c, &j, e);
}

/* ---- leases ---- */

static int lease_path(struct core *c, const char *name, char *path, size_t cap,
		      struct lr_err *e)
{
	char hex[2 * LR_SHA256_LEN + 1];
	int rc = lr_sha256_hex(name, strlen(name), hex);
	if (rc) {
		lr_err_set(e, "storage: lease '%s': cannot hash its name: %s", name,
			   lr_strerror(rc));
		return rc;
	}
	if ((size_t)snprintf(path, cap, "%s/leases/%s.lock", c->root, hex) >= cap) {
		lr_err_set(e, "storage: lease '%s': the state root path is too long", name);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int lm_acquire(struct lr_store *s, const char *name, struct lr_lease **out,
		      struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	char path[4096];
	int rc = lease_path(c, name, path, sizeof path, e);
	if (rc)
		return rc;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		lr_err_set(e, "storage: lease '%s': cannot open '%s': %s", name, path,
			   strerror(errno));
		return rc;
	}
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		rc = -errno;
		close(fd);
		if (rc != -EAGAIN && rc != -EACCES) {
			lr_err_set(e, "storage: lease '%s': locking '%s': %s", name, path,
				   strerror(-rc));
			return rc;
		}
		struct key k;
		uint64_t ep = 0;
		MDB_txn *t;
		if (key_make(name, &k, e) == 0 && rtxn_begin(c, &t, name, e) == 0) {
			get_u64(c, t, DB_EPOCH, &k, name, &ep, e);
			rtxn_end(c, t);
		}
		lr_err_set(e, "storage: lease '%s' is held (epoch %llu)", name,
			   (unsigned long long)ep);
		return LR_ELEASEHELD;
	}
	struct job j;
	if ((rc = job_init(&j, J_EPOCH, name, e)) != 0 || (rc = submit(c, &j, e)) != 0) {
		close(fd);
		return rc;
	}
	struct lm_lease *l = calloc(1, sizeof *l);
	if (!l) {
		close(fd);
		lr_err_set(e, "storage: lease '%s': out of memory", name);
		return -ENOMEM;
	}
	l->pub.store = s;
	snprintf(l->pub.name, sizeof l->pub.name, "%s", name);
	l->pub.epoch = j.out;
	l->fd = fd;
	*out = &l->pub;
	return 0;
}

static int lm_release(struct lr_lease *pub, struct lr_err *e)
{
	(void)e;
	struct lm_lease *l = (struct lm_lease *)pub;
	close(l->fd); /* drops the OFD lock */
	lr__lease_fire_lost(pub);
	free(l);
	return 0;
}

/* ---- kv ---- */

static int lm_kv_get(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		     struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(key, &k, e);
	if (rc)
		return rc;
	MDB_txn *t;
	if ((rc = rtxn_begin(c, &t, key, e)) != 0)
		return rc;
	MDB_val kv = { k.len, k.b }, v;
	size_t hl = name_hdr_len(&k, key);
	rc = g_get(t, c->dbi[DB_KV], &kv, &v);
	if (rc == MDB_NOTFOUND) {
		lr_err_set(e, "storage: key '%s' not found", key);
		rc = LR_ENOTFOUND;
	} else if (rc) {
		rc = lm_fail(rc, e, "reading", key);
	} else if (v.mv_size < 8 + hl ||
		   (hl && !name_hdr_check((unsigned char *)v.mv_data + 8, v.mv_size - 8, key))) {
		rc = corrupt(e, "the kv entry", key, v.mv_size);
	} else {
		size_t n = v.mv_size - 8 - hl;
		val->data = malloc(n ? n : 1);
		if (!val->data) {
			lr_err_set(e, "storage: key '%s': out of memory", key);
			rc = -ENOMEM;
		} else {
			memcpy(val->data, (unsigned char *)v.mv_data + 8 + hl, n);
			val->len = n;
			if (rev)
				*rev = be64_get(v.mv_data);
		}
	}
	rtxn_end(c, t);
	return rc;
}

static int lm_kv_put(struct lr_store *s, const char *key, uint64_t expected, const void *val,
		     size_t len, uint64_t *new_rev, struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_KVPUT, key, e);
	if (rc)
		return rc;
	j.expected = expected;
	j.data = val;
	j.len = len;
	rc = submit(((struct lm *)s)->c, &j, e);
	if (rc == 0 && new_rev)
		*new_rev = j.out;
	return rc;
}

/* Every put queued at once, so the writer takes them into one transaction. */
static void lm_kv_put_many(struct lr_store *s, size_t n, struct lr_kv_put *puts)
{
	struct core *c = ((struct lm *)s)->c;
	struct job *jobs = calloc(n, sizeof *jobs);
	if (!jobs) {
		for (size_t i = 0; i < n; i++)
			puts[i].rc = lm_kv_put(s, puts[i].key, puts[i].expected_rev, puts[i].val,
					       puts[i].len, &puts[i].new_rev, &puts[i].err);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		puts[i].rc = job_init(j, J_KVPUT, puts[i].key, &puts[i].err);
		j->done = puts[i].rc != 0;
		if (puts[i].rc)
			continue;
		j->expected = puts[i].expected_rev;
		j->data = puts[i].val;
		j->len = puts[i].len;
		pthread_cond_init(&j->cond, NULL);
	}
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < n; i++)
		if (!jobs[i].done)
			enqueue(c, &jobs[i]);
	for (size_t i = 0; i < n; i++) /* settle() signals each under c->mu */
		while (!jobs[i].done)
			pthread_cond_wait(&jobs[i].cond, &c->mu);
	pthread_mutex_unlock(&c->mu);
	for (size_t i = 0; i < n; i++) {
		if (puts[i].rc)
			continue;
		pthread_cond_destroy(&jobs[i].cond);
		puts[i].rc = jobs[i].rc;
		if (jobs[i].rc)
			puts[i].err = jobs[i].err;
		else
			puts[i].new_rev = jobs[i].out;
	}
	free(jobs);
}

static int lm_kv_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_KVDEL, key, e);
	return rc ? rc : submit(((struct lm *)s)->c, &j, e);
}

/* Names as found in a listing, sorted before they are handed out. */
struct names {
	char **v;
	size_t n, cap;
};

static int names_add(struct names *ns, const void *p, size_t n)
{
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		char **v = realloc(ns->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		ns->v = v;
		ns->cap = cap;
	}
	char *s = malloc(n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, p, n);
	s[n] = 0;
	ns->v[ns->n++] = s;
	return 0;
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Short names are their own keys (one range scan from the prefix); long
 * names sort under 0x01 with the name in their value (hdr_at bytes in).
 */
static int list_db(struct core *c, int db, size_t hdr_at, const char *prefix, lr_name_cb cb,
		   void *arg, struct lr_err *e)
{
	struct names ns = { 0 };
	size_t plen = strlen(prefix);
	unsigned char tag2 = LONG_TAG + 1;
	MDB_txn *t;
	int rc = rtxn_begin(c, &t, prefix, e);
	if (rc)
		return rc;
	MDB_cursor *cur;
	if ((rc = mdb_cursor_open(t, c->dbi[db], &cur)) != 0) {
		rtxn_end(c, t);
		return lm_fail(rc, e, "listing", prefix);
	}
	MDB_val k = { plen, (void *)prefix }, v;
	rc = g_cget(cur, &k, &v, plen ? MDB_SET_RANGE : MDB_FIRST);
	if (rc == 0 && !plen && k.mv_size && *(unsigned char *)k.mv_data == LONG_TAG) {
		k.mv_size = 1;
		k.mv_data = &tag2;
		rc = g_cget(cur, &k, &v, MDB_SET_RANGE);
	}
	while (rc == 0 && k.mv_size >= plen && memcmp(k.mv_data, prefix, plen) == 0 &&
	       *(unsigned char *)k.mv_data != LONG_TAG) {
		if ((rc = names_add(&ns, k.mv_data, k.mv_size)) != 0)
			break;
		rc = g_cget(cur, &k, &v, MDB_NEXT);
	}
	unsigned char tag = LONG_TAG;
	k.mv_size = 1;
	k.mv_data = &tag;
	if (rc == MDB_NOTFOUND || rc == 0)
		rc = g_cget(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && *(unsigned char *)k.mv_data == LONG_TAG) {
		size_t h = v.mv_size >= hdr_at ? name_hdr_check((unsigned char *)v.mv_data + hdr_at,
								  v.mv_size - hdr_at, NULL) : 0;
		if (!h) {
			rc = corrupt(e, "a long-name entry", prefix, v.mv_size);
			break;
		}
		const unsigned char *nm = (unsigned char *)v.mv_data + hdr_at + 2;
		if (h - 2 >= plen && memcmp(nm, prefix, plen) == 0 &&
		    (rc = names_add(&ns, nm, h - 2)) != 0)
			break;
		rc = g_cget(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	rtxn_end(c, t);
	if (rc == MDB_NOTFOUND)
		rc = 0;
	else if (rc == -ENOMEM)
		lr_err_set(e, "storage: listing '%s': out of memory", prefix);
	else if (rc > 0 || (rc < 0 && rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE))
		rc = lm_fail(rc, e, "listing", prefix);
	if (rc == 0 && ns.n)
		qsort(ns.v, ns.n, sizeof *ns.v, names_cmp);
	for (size_t i = 0; i < ns.n; i++) {
		if (rc == 0)
			rc = cb(arg, ns.v[i]);
		free(ns.v[i]);
	}
	free(ns.v);
	return rc;
}

static int lm_kv_keys(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		      struct lr_err *e)
{
	return list_db(((struct lm *)s)->c, DB_KV, 8, prefix, cb, arg, e);
}

/* ---- blobs ---- */

static int lm_blob_put(struct lr_store *s, const char *key, const void *data, size_t len,
		       struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_BLOBPUT, key, e);
	if (rc)
		return rc;
	j.data = data;
	j.len = len;
	return submit(((struct lm *)s)->c, &j, e);
}

static int lm_blob_put_fd(struct lr_store *s, const char *key, int fd, uint64_t len,
			  struct lr_err *e)
{
	if (len > MAX_MAP / 2) {
		lr_err_set(e, "storage: blob '%s' of %llu bytes is too large", key,
			   (unsigned long long)len);
		return LR_ETOOBIG;
	}
	struct job j;
	int rc = job_init(&j, J_BLOBFD, key, e);
	if (rc)
		return rc;
	j.fd = fd;
	j.len = (size_t)len;
	j.fd_start = lseek(fd, 0, SEEK_CUR);
	return submit(((struct lm *)s)->c, &j, e);
}

/* The blob's bytes inside t, header skipped. */
static int blob_find(struct core *c, MDB_txn *t, const struct key *k, const char *key,
		     MDB_val *v, struct lr_err *e)
{
	MDB_val kv = { k->len, (void *)k->b };
	int rc = g_get(t, c->dbi[DB_BLOB], &kv, v);
	if (rc == MDB_NOTFOUND) {
		lr_err_set(e, "storage: blob '%s' not found", key);
		return LR_ENOTFOUND;
	}
	if (rc)
		return lm_fail(rc, e, "reading blob", key);
	size_t hl = name_hdr_len(k, key);
	if (v->mv_size < hl || (hl && !name_hdr_check(v->mv_data, v->mv_size, key)))
		return corrupt(e, "the blob", key, v->mv_size);
	v->mv_data = (unsigned char *)v->mv_data + hl;
	v->mv_size -= hl;
	return 0;
}

static int lm_blob_get(struct lr_store *s, const char *key, struct lr_bytes *out,
		       struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(key, &k, e);
	if (rc)
		return rc;
	MDB_txn *t;
	if ((rc = rtxn_begin(c, &t, key, e)) != 0)
		return rc;
	MDB_val v;
	if ((rc = blob_find(c, t, &k, key, &v, e)) == 0) {
		out->data = malloc(v.mv_size ? v.mv_size : 1);
		if (!out->data) {
			lr_err_set(e, "storage: blob '%s': out of memory", key);
			rc = -ENOMEM;
		} else {
			memcpy(out->data, v.mv_data, v.mv_size);
			out->len = v.mv_size;
		}
	}
	rtxn_end(c, t);
	return rc;
}

/*
 * Writes straight from the map, FD_CHUNK bytes per read transaction, so a
 * slow fd does not hold the resize lock for the whole blob.
 */
static int lm_blob_get_fd(struct lr_store *s, const char *key, int fd, uint64_t *len,
			  struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(key, &k, e);
	if (rc)
		return rc;
	size_t off = 0, total = 0;
	do {
		MDB_txn *t;
		if ((rc = rtxn_begin(c, &t, key, e)) != 0)
			return rc;
		MDB_val v;
		if ((rc = blob_find(c, t, &k, key, &v, e)) != 0) {
			rtxn_end(c, t);
			return rc;
		}
		if (off == 0)
			total = v.mv_size;
		if (v.mv_size != total) {
			rtxn_end(c, t);
			lr_err_set(e, "storage: blob '%s' changed while it was read", key);
			return LR_ECONFLICT;
		}
		size_t end = total - off > FD_CHUNK ? off + FD_CHUNK : total;
		while (off < end) {
			ssize_t n = write(fd, (char *)v.mv_data + off, end - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rc = -errno;
				lr_err_set(e, "storage: blob '%s': writing it out failed: %s", key,
					   strerror(errno));
				break;
			}
			off += (size_t)n;
		}
		rtxn_end(c, t);
	} while (rc == 0 && off < total);
	if (len)
		*len = total;
	return rc;
}

static int lm_blob_stat(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e)
{
	struct core *c = ((struct lm *)s)->c;
	struct key k;
	int rc = key_make(key, &k, e);
	if (rc)
		return rc;
	MDB_txn *t;
	if ((rc = rtxn_begin(c, &t, key, e)) != 0)
		return rc;
	MDB_val v;
	if ((rc = blob_find(c, t, &k, key, &v, e)) == 0)
		*len = v.mv_size;
	rtxn_end(c, t);
	return rc;
}

static int lm_blob_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	struct job j;
	int rc = job_init(&j, J_BLOBDEL, key, e);
	return rc ? rc : submit(((struct lm *)s)->c, &j, e);
}

static int lm_blob_list(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
			struct lr_err *e)
{
	return list_db(((struct lm *)s)->c, DB_BLOB, 0, prefix, cb, arg, e);
}

/* ---- recovery of the logs of dead processes ---- */

struct wal_rec {
	uint64_t txnid;
	unsigned char *buf; /* the slot, header included */
	size_t len;
};

static int wal_rec_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct wal_rec *)a)->txnid, y = ((const struct wal_rec *)b)->txnid;
	return x < y ? -1 : x > y;
}

/*
 * The group at off of fd, whole (its CRC holds), written in another boot:
 * 0 with *out (malloc'd) and its length and txnid; 1 when there is none
 * there (torn, voided, never written, or of this boot: the page cache kept
 * every commit of this boot); -ENOMEM.
 */
static int wal_read_at(struct core *c, int fd, off_t off, const char *magic,
		       unsigned char **out, size_t *len, uint64_t *txnid)
{
	unsigned char h[WAL_HDR];
	if (pread(fd, h, sizeof h, off) != (ssize_t)sizeof h || memcmp(h, magic, 8) != 0)
		return 1;
	size_t n = be32_get(h + 12);
	if (n > WAL_SLOT - WAL_HDR)
		return 1;
	if (memcmp(h + 16, c->boot, BOOT_LEN) == 0)
		return 1;
	unsigned char *b = malloc(WAL_HDR + n);
	if (!b)
		return -ENOMEM;
	memcpy(b, h, WAL_HDR);
	if (pread(fd, b + WAL_HDR, n, off + WAL_HDR) != (ssize_t)n ||
	    lr_crc32c(0, b + 12, WAL_HDR + n - 12) != be32_get(h + 8)) {
		free(b); /* torn: its group was never acknowledged */
		return 1;
	}
	*out = b;
	*len = WAL_HDR + n;
	*txnid = be64_get(h + 56);
	return 0;
}

static int wal_rec_add(struct wal_rec **recs, size_t *nrec, size_t *cap, unsigned char *b,
		       size_t len, uint64_t txnid)
{
	if (*nrec == *cap) {
		size_t ncap = *cap ? *cap * 2 : 8;
		struct wal_rec *nr = realloc(*recs, ncap * sizeof **recs);
		if (!nr) {
			free(b);
			return -ENOMEM;
		}
		*recs = nr;
		*cap = ncap;
	}
	(*recs)[(*nrec)++] = (struct wal_rec){ txnid, b, len };
	return 0;
}

/* Replays one slot's writes where they still fit; an LMDB code stops the replay. */
static int wal_replay(struct core *c, MDB_txn *t, const unsigned char *b, size_t len)
{
	uint32_t count = be32_get(b + 64);
	size_t off = WAL_HDR;
	for (uint32_t i = 0; i < count; i++) {
		if (len - off < WAL_ENT)
			return 0;
		const unsigned char *p = b + off;
		size_t nl = (size_t)p[1] << 8 | p[2], dl = be32_get(p + 11);
		uint64_t v = be64_get(p + 3);
		if (nl == 0 || nl > LR_STORE_NAME_MAX || dl > len - off - WAL_ENT - nl || v == 0)
			return 0;
		char name[LR_STORE_NAME_MAX + 1];
		memcpy(name, p + WAL_ENT, nl);
		name[nl] = 0;
		struct job j;
		struct lr_err e;
		if (job_init(&j, p[0] == J_APPEND ? J_APPEND : p[0] == J_KVPUT ? J_KVPUT : J_EPOCH,
			     name, &e) != 0)
			return 0;
		j.expected = v - 1;
		j.data = p + WAL_ENT + nl;
		j.len = dl;
		int rc = 0;
		if (p[0] == J_APPEND) {
			rc = apply_append(c, t, &j);
		} else if (p[0] == J_KVPUT) {
			rc = apply_kvput(c, t, &j);
		} else if (p[0] == J_EPOCH) {
			uint64_t ep;
			if (get_u64(c, t, DB_EPOCH, &j.key, name, &ep, &e) == 0 && ep < v) {
				unsigned char eb[8];
				be64_put(eb, v);
				MDB_val k = { j.key.len, j.key.b }, ev = { 8, eb };
				rc = g_put(t, c->dbi[DB_EPOCH], &k, &ev, 0);
			}
		} else {
			return 0;
		}
		if (rc)
			return rc;
		off += WAL_ENT + nl + dl;
	}
	return 0;
}

/*
 * The logs under root/wal whose lock is free: their owner died. Replays
 * what a reboot lost (see the header comment), checkpoints, removes them.
 * durable: LMDB's last transaction id as found at open (after a reboot,
 * the checkpoint's). The caller holds root/wal/recover.lock.
 */
static int wal_recover(struct core *c, uint64_t durable, struct lr_err *e)
{
	char dir[4096];
	if ((size_t)snprintf(dir, sizeof dir, "%s/wal", c->root) >= sizeof dir)
		return 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct wal_rec *recs = NULL;
	size_t nrec = 0, cap = 0, nfiles = 0, total = 0;
	char **paths = NULL;
	int *fds = NULL;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		size_t nl = strlen(de->d_name);
		if (nl < 5 || strcmp(de->d_name + nl - 4, ".log") != 0)
			continue;
		char path[4400];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		struct stat st;
		if (fd < 0)
			continue;
		if (fcntl(fd, F_OFD_SETLK, &fl) < 0 || fstat(fd, &st) < 0 || st.st_nlink == 0) {
			close(fd); /* alive, or already recovered by another process */
			continue;
		}
		char **np = realloc(paths, (nfiles + 1) * sizeof *paths);
		int *nf = np ? realloc(fds, (nfiles + 1) * sizeof *fds) : NULL;
		if (np)
			paths = np;
		if (nf)
			fds = nf;
		if (!np || !nf || !(paths[nfiles] = strdup(path))) {
			close(fd);
			rc = -ENOMEM;
			break;
		}
		fds[nfiles++] = fd;
		char magic[8] = { 0 };
		if (pread(fd, magic, 8, 0) != 8)
			continue;
		if (memcmp(magic, wal1_magic, 8) == 0) {
			/* the previous format: two slots, each a group after the last durable one */
			for (int s = 0; s < 2 && rc == 0; s++) {
				unsigned char *b;
				size_t len;
				uint64_t txnid;
				int r = wal_read_at(c, fd, (off_t)s * (off_t)WAL_SLOT, wal1_magic, &b, &len,
						    &txnid);
				if (r < 0)
					rc = r;
				else if (r == 0 && txnid <= durable)
					free(b);
				else if (r == 0 && (rc = wal_rec_add(&recs, &nrec, &cap, b, len, txnid)) == 0)
					total += len;
			}
			continue;
		}
		/* groups in a row, txnids growing, up to the first that is not one of them */
		uint64_t prev = 0;
		for (off_t off = 0; rc == 0 && off + WAL_HDR <= st.st_size;) {
			unsigned char *b;
			size_t len;
			uint64_t txnid;
			int r = wal_read_at(c, fd, off, wal_magic, &b, &len, &txnid);
			if (r < 0)
				rc = r;
			if (r || txnid <= prev) {
				if (r == 0)
					free(b); /* a group of before the last checkpoint */
				break;
			}
			prev = txnid;
			off += (off_t)((len + WAL_ALIGN - 1) / WAL_ALIGN * WAL_ALIGN);
			if (txnid <= durable)
				free(b);
			else if ((rc = wal_rec_add(&recs, &nrec, &cap, b, len, txnid)) == 0)
				total += len;
		}
	}
	closedir(d);
	if (rc) {
		lr_err_set(e, "storage: recovering the logs of '%s': out of memory", c->root);
	} else if (nrec) {
		qsort(recs, nrec, sizeof *recs, wal_rec_cmp);
		for (;;) {
			MDB_txn *t;
			if ((rc = mdb_txn_begin(c->env, NULL, 0, &t)) != 0)
				break;
			for (size_t i = 0; i < nrec && rc == 0; i++)
				rc = wal_replay(c, t, recs[i].buf, recs[i].len);
			if (rc == 0)
				rc = g_commit(t);
			else
				mdb_txn_abort(t);
			if (rc == MDB_MAP_FULL && (rc = grow_map(c, total, e)) == 0)
				continue;
			break;
		}
	}
	if (rc > 0 || (rc < 0 && rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE))
		rc = lm_fail(rc, e, "recovering the logs of", c->root);
	/*
	 * A dead writer's commits are not synced, even in this boot: durable
	 * and recorded before the logs that hold them go.
	 */
	if (rc == 0 && nfiles)
		rc = checkpoint(c, e);
	for (size_t i = 0; i < nrec; i++)
		free(recs[i].buf);
	free(recs);
	for (size_t i = 0; i < nfiles; i++) {
		if (rc == 0)
			unlink(paths[i]);
		free(paths[i]);
		close(fds[i]);
	}
	free(paths);
	free(fds);
	return rc;
}

/* This boot's id (a power loss or a crash of the kernel changes it); "" when unknown. */
static void read_boot_id(struct core *c, const char *given)
{
	memset(c->boot, 0, sizeof c->boot);
	if (given) {
		snprintf(c->boot, sizeof c->boot, "%s", given);
		return;
	}
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, c->boot, sizeof c->boot - 1);
	close(fd);
	if (n <= 0) {
		memset(c->boot, 0, sizeof c->boot);
		return;
	}
	while (n > 0 && (c->boot[n - 1] == '\n' || c->boot[n - 1] == 0))
		c->boot[--n] = 0;
}

/* ---- open and close ---- */

static void core_free(struct core *c)
{
	if (c->pin)
		mdb_txn_abort(c->pin);
	if (c->ckpt_fd >= 0)
		close(c->ckpt_fd);
	if (c->map_fd >= 0)
		close(c->map_fd);
	if (c->env)
		mdb_env_close(c->env);
	pthread_rwlock_destroy(&c->resize);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->commit_mu);
	pthread_cond_destroy(&c->wake);
	sem_destroy(&c->s_go);
	sem_destroy(&c->s_done);
	free(c->wal_buf);
	free(c->wal_path);
	free(c->batch);
	free(c->root);
	free(c);
}

/* Flushes what is queued, stops the writer, closes the environment. */
static void core_close(struct core *c)
{
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->writer, NULL);
	if (c->s_started) {
		c->s_stop = 1;
		sem_post(&c->s_go);
		pthread_join(c->syncer, NULL);
	}
	if (c->deferred) {
		/* the last commits synced and recorded, then the log is no longer needed */
		struct lr_err e;
		MDB_envinfo info;
		int done = c->pin && mdb_env_info(c->env, &info) == 0 &&
			   (uint64_t)info.me_last_txnid == c->ckpt_txnid;
		if ((done || checkpoint(c, &e) == 0) && c->wal_fd >= 0)
			unlink(c->wal_path);
	}
	if (c->wal_fd >= 0)
		close(c->wal_fd);
	core_free(c);
}

static int mkdir_p(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n >= sizeof buf)
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char saved = buf[i];
		buf[i] = 0;
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = saved;
	}
	return 0;
}

static int core_open(const struct lr_lmdb_opts *o, const struct stat *st, struct core **out,
		     struct lr_err *e)
{
	struct core *c = calloc(1, sizeof *c);
	if (!c || !(c->root = strdup(o->root))) {
		free(c);
		lr_err_set(e, "storage: out of memory");
		return -ENOMEM;
	}
	c->dev = st->st_dev;
	c->ino = st->st_ino;
	c->refs = 1;
	c->no_sync = o->no_sync;
	c->wal_fd = -1;
	c->ckpt_fd = -1;
	c->map_fd = -1;
	read_boot_id(c, o->boot_id);
	/* without a boot id a reboot cannot be told from a crash: LMDB syncs each commit */
	c->deferred = !o->no_sync && c->boot[0];
	sem_init(&c->s_go, 0, 0);
	sem_init(&c->s_done, 0, 0);
	c->max_batch = o->max_batch > 0 ? (size_t)o->max_batch : 1024;
	c->batch = malloc(c->max_batch * sizeof *c->batch);
	pthread_rwlock_init(&c->resize, NULL);
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->commit_mu, NULL);
	pthread_cond_init(&c->wake, NULL);
	size_t map = o->initial_map ? o->initial_map : DEFAULT_MAP;
	unsigned flags = MDB_NOTLS | MDB_WRITEMAP | (o->no_sync || c->deferred ? MDB_NOSYNC : 0);
	MDB_txn *t = NULL;
	int rc, lfd = -1;
	if (!c->batch) {
		lr_err_set(e, "storage: out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = mdb_env_create(&c->env)) != 0)
		goto lmfail;
	mdb_env_set_assert(c->env, on_assert);
	if (c->deferred) {
		/*
		 * One recovery at a time, and no open of this root goes on before
		 * the one in progress is done: a writer must not fence a ledger
		 * (append at its tip) before the record the log holds for that tip
		 * is back, nor commit before the checkpoint it builds on is recorded.
		 */
		char lpath[4200];
		snprintf(lpath, sizeof lpath, "%s/wal", o->root);
		mkdir(lpath, 0700);
		snprintf(lpath, sizeof lpath, "%s/wal/recover.lock", o->root);
		lfd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		struct flock lfl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		while (lfd >= 0 && fcntl(lfd, F_OFD_SETLKW, &lfl) < 0 && errno == EINTR)
			;
		if ((rc = meta_restore(c, e)) != 0)
			goto fail;
	}
	/*
	 * After the recovery lock (an open holding it may grow the map). Not
	 * below the file: LMDB truncates data.mdb to the map it opens with
	 * (MDB_WRITEMAP), which would cut off the pages of a process whose map
	 * has grown past ours.
	 */
	char dpath[4200];
	snprintf(dpath, sizeof dpath, "%s/data.mdb", o->root);
	c->map_fd = open(dpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	map_lock(c, F_WRLCK); /* to the end of the open's map sizing, below */
	if (file_size(c) > map)
		map = file_size(c);
	if ((rc = mdb_env_set_maxdbs(c->env, DB_N + 2)) != 0 ||
	    (rc = mdb_env_set_maxreaders(c->env, 1024)) != 0 ||
	    (rc = mdb_env_set_mapsize(c->env, map)) != 0)
		goto lmfail;
	if ((rc = mdb_env_open(c->env, o->root, flags, 0600)) != 0)
		goto lmfail;
	/* Reader slots of processes that died inside a read pin old pages. */
	int dead;
	mdb_reader_check(c->env, &dead);
	/* the map was set to the file's size at least, above, under the lock */
	MDB_envinfo info;
	mdb_env_info(c->env, &info);
	map_lock(c, F_UNLCK);
	uint64_t durable = (uint64_t)info.me_last_txnid; /* what a reboot kept, after one */
	if ((rc = back_map(c, info.me_mapsize)) != 0) {
		lr_err_set(e, "storage: reserving %zu bytes for '%s': %s", info.me_mapsize,
			   o->root, strerror(-rc));
		goto fail;
	}
	for (;;) {
		rc = mdb_txn_begin(c->env, NULL, 0, &t);
		if (rc != MDB_MAP_RESIZED)
			break;
		if ((rc = adopt_map(c, e)) != 0)
			goto fail;
	}
	if (rc)
		goto lmfail;
	map_ahead(c, t); /* before the transaction writes: the range is unused */
	for (int i = 0; i < DB_N; i++)
		if ((rc = mdb_dbi_open(t, db_names[i], MDB_CREATE, &c->dbi[i])) != 0)
			goto lmfail;
	rc = mdb_txn_commit(t);
	t = NULL;
	if (rc == 0 && !c->no_sync && !c->deferred && mdb_env_info(c->env, &info) == 0 &&
	    (uint64_t)info.me_last_txnid != durable)
		rc = mdb_env_sync(c->env, 1); /* the databases were created: durably */
	if (rc)
		goto lmfail;
	if (c->deferred) {
		if ((rc = wal_recover(c, durable, e)) != 0)
			goto fail;
		/*
		 * The pin on the last checkpoint: taken on the current commit when
		 * that is the one recorded in this boot, else a checkpoint now.
		 */
		char kpath[4200];
		snprintf(kpath, sizeof kpath, "%s/wal/checkpoint", o->root);
		int kfd = open(kpath, O_RDONLY | O_CLOEXEC);
		struct ckpt k;
		int have = kfd >= 0 && ckpt_read(kfd, &k, NULL) == 0 &&
			   memcmp(k.boot, c->boot, BOOT_LEN) == 0;
		if (kfd >= 0)
			close(kfd);
		if (!c->pin && have && mdb_txn_begin(c->env, NULL, MDB_RDONLY, &c->pin) == 0 &&
		    (uint64_t)mdb_txn_id(c->pin) != k.txnid) {
			mdb_txn_abort(c->pin);
			c->pin = NULL;
		}
		if (c->pin && have)
			c->ckpt_txnid = k.txnid;
		else if (!c->pin && (rc = checkpoint(c, e)) != 0)
			goto fail;
		close(lfd);
		lfd = -1;
	}
	if ((rc = pthread_create(&c->writer, NULL, writer_main, c)) != 0) {
		lr_err_set(e, "storage: cannot start the writer of '%s': %s", o->root, strerror(rc));
		rc = -rc;
		goto fail;
	}
	*out = c;
	return 0;
lmfail:
	rc = lm_fail(rc, e, "opening the store", o->root);
fail:
	if (t)
		mdb_txn_abort(t);
	if (lfd >= 0)
		close(lfd);
	core_free(c);
	return rc;
}

static void lm_close(struct lr_store *s)
{
	struct lm *m = (struct lm *)s;
	struct core *c = m->c;
	pthread_mutex_lock(&cores_mu);
	int last = --c->refs == 0;
	if (last) {
		for (struct core **p = &cores; *p; p = &(*p)->next) {
			if (*p == c) {
				*p = c->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&cores_mu);
	if (last)
		core_close(c);
	free(m);
}

static const struct lr_store_ops lm_ops = {
	.kind = "lmdb",
	.append = lm_append,
	.append_async = lm_append_async,
	.read = lm_read,
	.tip = lm_tip,
	.ledger_delete = lm_ledger_delete,
	.acquire = lm_acquire,
	.release = lm_release,
	.kv_get = lm_kv_get,
	.kv_put = lm_kv_put,
	.kv_put_many = lm_kv_put_many,
	.kv_keys = lm_kv_keys,
	.kv_delete = lm_kv_delete,
	.blob_put = lm_blob_put,
	.blob_put_fd = lm_blob_put_fd,
	.blob_get = lm_blob_get,
	.blob_get_fd = lm_blob_get_fd,
	.blob_stat = lm_blob_stat,
	.blob_delete = lm_blob_delete,
	.blob_list = lm_blob_list,
	.close = lm_close,
};

int lr_store_lmdb_open(const struct lr_lmdb_opts *o, struct lr_store **out, struct lr_err *e)
{
	*out = NULL;
	if (!o || !o->root || !*o->root) {
		lr_err_set(e, "storage: lmdb needs a state root");
		return -EINVAL;
	}
	int rc = mkdir_p(o->root);
	char leases[4096];
	if (rc == 0 && (size_t)snprintf(leases, sizeof leases, "%s/leases", o->root) >= sizeof leases)
		rc = -ENAMETOOLONG;
	if (rc == 0 && mkdir(leases, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	struct stat st;
	if (rc == 0 && stat(o->root, &st) < 0)
		rc = -errno;
	if (rc) {
		lr_err_set(e, "storage: cannot create the state root '%s': %s", o->root,
			   strerror(-rc));
		return rc;
	}
	struct lm *m = calloc(1, sizeof *m);
	if (!m) {
		lr_err_set(e, "storage: out of memory");
		return -ENOMEM;
	}
	m->base.ops = &lm_ops;
	pthread_mutex_lock(&cores_mu);
	struct core *c;
	for (c = cores; c; c = c->next)
		if (c->dev == st.st_dev && c->ino == st.st_ino)
			break;
	if (c) {
		c->refs++;
	} else if ((rc = core_open(o, &st, &c, e)) == 0) {
		c->next = cores;
		cores = c;
	}
	pthread_mutex_unlock(&cores_mu);
	if (rc) {
		free(m);
		return rc;
	}
	m->c = c;
	*out = &m->base;
	return 0;
}
