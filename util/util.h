/*
 * util.h — the bottom layer every C folder may include: status codes and
 * their messages, bounded growable buffers, lazily loaded shared libraries
 * and SHA-256.
 *
 * Nothing here includes lua.h or any header above it. Heavy libraries
 * (libcurl, libarchive, libcrypto) are not linked into the binary: they are
 * opened with dlopen on first use, so `luarig -e ''` pays neither their
 * relocation cost nor their memory.
 */
#ifndef LR_UTIL_H
#define LR_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Status codes. Functions return 0 on success, a negative errno value
 * (-ENOMEM, -ETIMEDOUT, ...) or one of the LR_E* codes below, which live in
 * a reserved range far from errno values.
 */
enum {
	LR_EBASE = -30900,
	LR_ECANCELLED = LR_EBASE, /* the operation was cancelled */
	LR_ETOOBIG,               /* a size cap was hit */
	LR_EPARSE,                /* malformed input from outside */
	LR_ECORRUPT,              /* stored or packaged bytes fail verification */
	LR_ECONFLICT,             /* compare-and-swap or expected-tip mismatch */
	LR_EAMBIGUOUS,            /* outcome unknown (networked backends) */
	LR_ELEASEHELD,            /* a lease is held by someone else */
	LR_ELEASELOST,            /* our lease was taken or expired */
	LR_ENOTFOUND,             /* no such record, key, blob, route */
	LR_EBLOBCONFLICT,         /* different bytes under an existing blob key */
	LR_ENETWORK,              /* transport failure (connect, reset, TLS) */
	LR_ETIMEOUT,              /* a deadline passed */
	LR_EHTTPSTATUS,           /* an HTTP response with a non-success status */
	LR_ECLOSED,               /* the peer or handle is closed */
	LR_EREFUSED,              /* refused by policy (bundles, sandbox) */
	LR_EUNAVAILABLE,          /* a library or facility is missing */
	LR_ELAST
};

/*
 * lr_strerror returns a static description of rc (an errno value negated or
 * an LR_E* code). lr_errcode returns the short stable code string that Lua
 * sees as the third return value ("timeout", "cancelled", "ENOENT", ...).
 */
const char *lr_strerror(int rc);
const char *lr_errcode(int rc);

/*
 * The message that goes with a failure, in every layer: the caller owns
 * the struct (on its stack, or in a result), a function that fails fills
 * it and returns the status code; fixed size, never allocated, always
 * NUL-terminated once set. The message says what failed first and quotes
 * the subject ("profile: field 'workspace_write' must be deny, gated or
 * allow"). A NULL e is accepted and ignored; lr_err_clear empties it.
 */
#define LR_ERR_LEN 384
struct lr_err {
	char msg[LR_ERR_LEN];
};
void lr_err_set(struct lr_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lr_err_vset(struct lr_err *e, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
void lr_err_clear(struct lr_err *e);
/* Sets e's message and returns rc: `return lr_err_fail(e, LR_EREFUSED, "…", …);`. */
int lr_err_fail(struct lr_err *e, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * A growable byte buffer with a hard cap given at init (curl's dynbuf).
 * The bytes are always NUL-terminated so text can be used in place.
 */
struct lr_buf {
	char *data;
	size_t len;
	size_t alloc;
	size_t cap; /* appends that would exceed this fail with LR_ETOOBIG */
};

void lr_buf_init(struct lr_buf *b, size_t cap);
void lr_buf_release(struct lr_buf *b);       /* frees data; b may be reused after init */
void lr_buf_reset(struct lr_buf *b);         /* len = 0, keeps the allocation */
int lr_buf_add(struct lr_buf *b, const void *p, size_t n);
/* Room for n more bytes (and the NUL) past len, appended by the caller: 0, LR_ETOOBIG, -ENOMEM. */
int lr_buf_reserve(struct lr_buf *b, size_t n);
int lr_buf_addstr(struct lr_buf *b, const char *s);
int lr_buf_printf(struct lr_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Drops the first n bytes (n <= len). */
void lr_buf_consume(struct lr_buf *b, size_t n);
/* Hands the bytes to the caller (free() them); b is left empty. */
char *lr_buf_take(struct lr_buf *b, size_t *len);

/*
 * Arrays that grow by doubling: makes room for index n (so n + 1 entries)
 * in *arr of *cap entries of size bytes, reallocating when n >= *cap. 0 or
 * -ENOMEM (*arr unchanged).
 */
int lr_grow(void **arr, size_t *cap, size_t n, size_t size);
/*
 * A NULL-terminated vector of owned strings (argv, envp). Zero it to
 * init. add takes owned (free()d on failure; NULL counts as -ENOMEM, so
 * lr_strv_add(sv, strdup(s)) needs no check of its own); v stays
 * NULL-terminated once it has an entry. release frees every entry and
 * zeroes sv.
 */
struct lr_strv {
	char **v;
	size_t n, cap;
};
int lr_strv_add(struct lr_strv *sv, char *owned);
void lr_strv_release(struct lr_strv *sv);
/* vasprintf into a fresh string (free() it), or NULL when out of memory. */
char *lr_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * I/O loops (io.c), EINTR retried. lr_read_fd appends to b what fd holds
 * until end of file, or until limit bytes were appended when limit is not
 * 0 (then nothing more is read); 0, -errno, or LR_ETOOBIG when b's cap is
 * hit. lr_write_all writes all n bytes; 0 or -errno. lr_mkdirs makes path
 * and every missing parent with mode (mkdir -p; existing ones are fine);
 * 0, or -errno with e naming the component that failed ("cannot create
 * 'PATH': why").
 */
int lr_read_fd(int fd, struct lr_buf *b, size_t limit);
int lr_write_all(int fd, const void *p, size_t n);
int lr_mkdirs(const char *path, mode_t mode, struct lr_err *e);

/*
 * Lazily opened libraries. lr_lazy_open dlopens the first soname that loads
 * and resolves every name in names (NULL-terminated) into slots[i]. The
 * result is cached: later calls return the first outcome. Safe from any
 * thread: callers need no lock or pthread_once of their own. On failure
 * err says which library or symbol is missing and the return value is
 * LR_EUNAVAILABLE; err and slots are written before the outcome is
 * returned to anyone and never after.
 */
struct lr_lazy {
	const char *const *sonames; /* NULL-terminated, tried in order */
	const char *const *names;   /* NULL-terminated symbol names */
	void **slots;               /* one per name */
	int state;                  /* 0 untried, 1 loaded, -1 failed */
	struct lr_err err;
};
int lr_lazy_open(struct lr_lazy *lz);

/*
 * SHA-256 through libcrypto, opened on first use. lr_sha256 writes the
 * 32-byte digest; lr_sha256_hex writes 64 lower-case hex digits and a NUL.
 * The incremental form hashes streams without holding them whole.
 */
#define LR_SHA256_LEN 32
struct lr_sha256 {
	void *ctx;
};
int lr_sha256_begin(struct lr_sha256 *h);
int lr_sha256_update(struct lr_sha256 *h, const void *p, size_t n);
int lr_sha256_end(struct lr_sha256 *h, unsigned char out[LR_SHA256_LEN]);
void lr_sha256_abort(struct lr_sha256 *h);
int lr_sha256(const void *p, size_t n, unsigned char out[LR_SHA256_LEN]);
int lr_sha256_hex(const void *p, size_t n, char out[2 * LR_SHA256_LEN + 1]);
/*
 * The same built-in SHA-256 for any length, never opening libcrypto: for
 * callers that hash definitions (a rig's revision) at start-up, where
 * dynamic linking would cost more than the hashing.
 */
void lr_sha256_builtin(const void *p, size_t n, unsigned char out[LR_SHA256_LEN]);
void lr_hex(const unsigned char *in, size_t n, char *out);

/*
 * Starts a program from a multi-threaded process without fork() (spawn.c
 * says why), for the folders below host/ (host/ uses lr_proc_spawn). file
 * is searched on PATH unless it holds a '/'; envp NULL is the host's
 * environment. fd[i] (-1: the host's own) becomes fd i of the child; give
 * descriptors above 2 (close-on-exec is fine) or i itself. pdeathsig,
 * when not 0, is sent to the child when the thread that spawned it ends
 * (so spawn from a thread that lives as long as the child should: the main
 * thread). The child starts with an empty signal mask and default
 * dispositions. 0 and *pid (the caller reaps it), or -errno: -ENOENT when
 * there is no such program, the exec's errno when it failed.
 */
struct lr_spawn_opts {
	const char *file;
	char *const *argv;
	char *const *envp;
	int fd[3];
	int pdeathsig;
};
int lr_spawn(const struct lr_spawn_opts *o, pid_t *pid);

/* Monotonic and wall clocks. */
uint64_t lr_now_ns(void);     /* CLOCK_MONOTONIC */
double lr_wall_seconds(void); /* CLOCK_REALTIME, seconds since the epoch */

#endif
