/*
 * host.h — the runtime under the Lua layer: one libevent loop on the main
 * thread with timers, fd watches, signals and a worker pool; the HTTP
 * client and server; process supervision; the bundle reader.
 *
 * Included by lua/ and tests. Never includes lua.h. Everything here runs on
 * the loop's thread except a work item's work() function, which runs on a
 * pool thread and must not touch anything but its own item.
 */
#ifndef LR_HOST_H
#define LR_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

struct event;
struct event_base;
struct lr_loop;

/*
 * The loop. lr_loop_run runs until lr_loop_stop is called or nothing holds
 * a reference (lr_loop_ref): tasks, servers and in-flight work hold one
 * each, so the process ends when its work is done.
 */
int lr_loop_new(struct lr_loop **out);
void lr_loop_free(struct lr_loop *loop);
int lr_loop_run(struct lr_loop *loop);
/* Runs at most one round of ready events without blocking when nowait. */
int lr_loop_once(struct lr_loop *loop, int nowait);
void lr_loop_stop(struct lr_loop *loop);
int lr_loop_stopped(struct lr_loop *loop);
void lr_loop_ref(struct lr_loop *loop);
void lr_loop_unref(struct lr_loop *loop);
int lr_loop_refs(struct lr_loop *loop);
/* The libevent base, for host/ and lua/ code that builds on libevent. */
struct event_base *lr_loop_base(struct lr_loop *loop);
/* The loop's cached clock, in seconds (monotonic, from an arbitrary origin). */
double lr_loop_now(struct lr_loop *loop);

/*
 * Timers. A timer is embedded by its owner: init, start any number of
 * times, release. The callback runs on the loop; starting an armed timer
 * re-arms it.
 */
struct lr_timer {
	struct event *ev;
	void (*cb)(struct lr_timer *t, void *arg);
	void *arg;
};
int lr_timer_init(struct lr_loop *loop, struct lr_timer *t,
		  void (*cb)(struct lr_timer *t, void *arg), void *arg);
void lr_timer_start(struct lr_timer *t, double seconds);
void lr_timer_stop(struct lr_timer *t);
int lr_timer_pending(const struct lr_timer *t);
void lr_timer_release(struct lr_timer *t);

/* File descriptor watches; events is LR_READ | LR_WRITE, persistent. */
enum { LR_READ = 1, LR_WRITE = 2 };
struct lr_watch {
	struct event *ev;
	int fd;
	void (*cb)(struct lr_watch *w, int events, void *arg);
	void *arg;
};
int lr_watch_init(struct lr_loop *loop, struct lr_watch *w, int fd,
		  void (*cb)(struct lr_watch *w, int events, void *arg), void *arg);
int lr_watch_start(struct lr_watch *w, int events);
void lr_watch_stop(struct lr_watch *w);
void lr_watch_release(struct lr_watch *w);

/*
 * Deferred calls: cb runs on the next loop round, never inside the caller.
 * One lr_defer is one pending call at most; scheduling it again while
 * pending is a no-op.
 */
struct lr_defer {
	struct event *ev;
	void (*cb)(struct lr_defer *d, void *arg);
	void *arg;
};
int lr_defer_init(struct lr_loop *loop, struct lr_defer *d,
		  void (*cb)(struct lr_defer *d, void *arg), void *arg);
void lr_defer_schedule(struct lr_defer *d);
void lr_defer_release(struct lr_defer *d);

/*
 * Signals. lr_loop_on_signal makes cb run on the loop after signo arrives.
 * The async hook, if set, is called inside the real signal handler and must
 * be async-signal-safe: lua/ uses it to set a Lua hook so that a busy Lua
 * chunk notices Ctrl-C without returning to the loop.
 */
int lr_loop_on_signal(struct lr_loop *loop, int signo,
		      void (*cb)(int signo, void *arg), void *arg);
void lr_loop_set_async_signal_hook(void (*hook)(int signo));

/*
 * The worker pool. work() runs on a pool thread; done() runs afterwards on
 * the loop thread. A submitted item holds a loop reference until done().
 * Workers never touch a lua_State.
 */
struct lr_work {
	void (*work)(struct lr_work *w);
	void (*done)(struct lr_work *w);
	struct lr_work *next; /* owned by the pool while submitted */
};
int lr_pool_submit(struct lr_loop *loop, struct lr_work *w);

/* ---- SSE framing (host/sse.c) ---- */


/* ---- HTTP client (host/http_client.c) ---- */


/* ---- HTTP server (host/http_server.c) ---- */


/* ---- processes (host/proc.c) ---- */


/* ---- bundles (host/bundle.c) ---- */

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
 * libcrypto missing) or -ENOMEM, and err (errlen bytes) holds a message
 * like "entry '../x.lua' escapes the bundle".
 */
int lr_bundle_read(const void *data, size_t len, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, char *err, size_t errlen);
/* Reads the file at path (at most max_total bytes) and verifies it as above. */
int lr_bundle_load(const char *path, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, char *err, size_t errlen);
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
int lr_bundle_archive(const struct lr_bundle_entry *e, size_t n, struct lr_buf *out,
		      char *err, size_t errlen);

/*
 * Packs directory dir into a bundle at out, or NAME-VERSION.rig in the
 * current directory when out is NULL; the file is written to a temporary
 * name and renamed. dir may hold a rig.json with name, version, entry and
 * description. version is this luarig's, recorded in the manifest. notice
 * (may be NULL) hears about skipped dot-directories. The path written is
 * copied to written (writtenlen bytes). Returns 0, LR_EREFUSED with err
 * naming the path (a link, a device, a bad rig.json, no entry module, a cap
 * exceeded), LR_EUNAVAILABLE or -errno.
 */
int lr_bundle_write(const char *dir, const char *out, const char *version,
		    void (*notice)(void *arg, const char *msg), void *arg,
		    char *written, size_t writtenlen, char *err, size_t errlen);

/* Compares two versions "MAJOR.MINOR.PATCH[-pre]": <0, 0, >0; -2 with ok=0 when either is malformed. */
int lr_bundle_vercmp(const char *a, const char *b, int *ok);


#endif
