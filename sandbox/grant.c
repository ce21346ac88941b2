/*
 * grant.c — single-use grants: the host mints one after a gate approval,
 * the executor redeems it when it builds the spawn.
 *
 * A grant is bound to the execution id, the exact command line, the
 * working directory, the profile's fingerprint, the class and target of
 * access, and an expiry on the monotonic clock. A path target is pinned at
 * mint time by lstat (device, inode and file type; for a path that does
 * not exist yet, its absence and its parent's device and inode), so a
 * file replaced or a symlink planted between approval and spawn is caught.
 * The token is 128 bits from getrandom; it is consumed by the first
 * redemption that names it, whether that succeeds or not.
 */
#include "sandbox.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

/* Live and used grants kept at once; minting past it fails (LR_ETOOBIG). */
#define GRANTS_MAX 4096
/* The longest ttl accepted: a grant is for one imminent spawn. */
#define TTL_MAX (24.0 * 3600.0)

struct grant {
	char token[33];
	uint64_t exec_id;
	char *command, *cwd, *fingerprint, *target;
	enum lr_grant_class cls;
	uint64_t expires_ns;
	int used;
	int pinned;  /* a path target: 1 it existed, 2 it did not (parent pinned) */
	dev_t dev;
	ino_t ino;
	mode_t type; /* S_IFMT bits of the target */
};

struct lr_grants {
	pthread_mutex_t mu;
	struct grant *v;
	size_t n, alloc;
};

int lr_grants_new(struct lr_grants **out)
{
	struct lr_grants *g = calloc(1, sizeof *g);
	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	*out = g;
	return 0;
}

static void grant_release(struct grant *e)
{
	free(e->command);
	free(e->cwd);
	free(e->fingerprint);
	free(e->target);
}

void lr_grants_free(struct lr_grants *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		grant_release(&g->v[i]);
	free(g->v);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

static int is_path_class(enum lr_grant_class c)
{
	return c == LR_GRANT_FS_READ || c == LR_GRANT_FS_WRITE;
}

/* The parent directory of an absolute path, in buf. */
static void parent_of(const char *path, char *buf, size_t len)
{
	snprintf(buf, len, "%s", path);
	char *slash = strrchr(buf, '/');
	while (slash && slash > buf && slash[1] == '\0') { /* trailing slashes */
		*slash = '\0';
		slash = strrchr(buf, '/');
	}
	if (slash == buf || !slash)
		buf[1] = '\0';
	else
		*slash = '\0';
}

/*
 * Pins a path target: its own identity when it exists, else its absence
 * and its parent's identity. lstat never follows a final symlink, so a
 * symlink planted in place of the file has another inode and type.
 */
static int pin(const char *target, int *pinned, dev_t *dev, ino_t *ino, mode_t *type)
{
	struct stat st;
	if (lstat(target, &st) == 0) {
		*pinned = 1;
	} else if (errno == ENOENT) {
		char parent[PATH_MAX];
		parent_of(target, parent, sizeof parent);
		if (lstat(parent, &st) != 0)
			return -errno;
		*pinned = 2;
	} else {
		return -errno;
	}
	*dev = st.st_dev;
	*ino = st.st_ino;
	*type = st.st_mode & S_IFMT;
	return 0;
}

static void purge(struct lr_grants *g, uint64_t now)
{
	size_t k = 0;
	for (size_t i = 0; i < g->n; i++) {
		if (g->v[i].expires_ns <= now) {
			grant_release(&g->v[i]);
			continue;
		}
		g->v[k++] = g->v[i];
	}
	g->n = k;
}

static char *dup_or_null(const char *s, int *oom)
{
	char *d = strdup(s);
	if (!d)
		*oom = 1;
	return d;
}

int lr_grant_mint(struct lr_grants *g, const struct lr_grant_req *r, char token[33],
		  struct lr_err *err)
{
	token[0] = '\0';
	if (!r->command || !*r->command) {
		lr_err_set(err, "grant: no command to bind to");
		return -EINVAL;
	}
	if (!r->cwd || r->cwd[0] != '/') {
		lr_err_set(err, "grant: the working directory must be an absolute path");
		return -EINVAL;
	}
	if (!r->fingerprint || strlen(r->fingerprint) != 64) {
		lr_err_set(err, "grant: no profile fingerprint to bind to");
		return -EINVAL;
	}
	if ((unsigned)r->cls > LR_GRANT_COMMAND) {
		lr_err_set(err, "grant: unknown class %d", (int)r->cls);
		return -EINVAL;
	}
	if (!r->target || !*r->target || (is_path_class(r->cls) && r->target[0] != '/')) {
		lr_err_set(err, "grant: %s", is_path_class(r->cls)
			   ? "a filesystem grant needs an absolute target path"
			   : "no target to bind to");
		return -EINVAL;
	}
	if (!(r->ttl > 0) || !isfinite(r->ttl) || r->ttl > TTL_MAX) {
		lr_err_set(err, "grant: ttl must be between 0 and %.0f seconds", TTL_MAX);
		return -EINVAL;
	}
	struct grant e = { .exec_id = r->exec_id, .cls = r->cls };
	if (is_path_class(r->cls)) {
		int rc = pin(r->target, &e.pinned, &e.dev, &e.ino, &e.type);
		if (rc) {
			lr_err_set(err, "grant: cannot pin target '%.200s': %s", r->target,
				   lr_strerror(rc));
			return rc;
		}
	}
	unsigned char raw[16];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		lr_err_set(err, "grant: no randomness for a token");
		return -EIO;
	}
	lr_hex(raw, sizeof raw, e.token);
	e.token[32] = '\0';
	int oom = 0;
	e.command = dup_or_null(r->command, &oom);
	e.cwd = dup_or_null(r->cwd, &oom);
	e.fingerprint = dup_or_null(r->fingerprint, &oom);
	e.target = dup_or_null(r->target, &oom);
	uint64_t now = lr_now_ns();
	e.expires_ns = now + (uint64_t)(r->ttl * 1e9);

	int rc = 0;
	pthread_mutex_lock(&g->mu);
	purge(g, now);
	if (oom) {
		rc = -ENOMEM;
	} else if (g->n >= GRANTS_MAX) {
		rc = LR_ETOOBIG;
	} else if (g->n == g->alloc) {
		size_t na = g->alloc ? 2 * g->alloc : 16;
		struct grant *nv = realloc(g->v, na * sizeof *nv);
		if (!nv)
			rc = -ENOMEM;
		else {
			g->v = nv;
			g->alloc = na;
		}
	}
	if (!rc)
		g->v[g->n++] = e;
	pthread_mutex_unlock(&g->mu);
	if (rc) {
		grant_release(&e);
		lr_err_set(err, "grant: %s", rc == LR_ETOOBIG ? "too many live grants"
			   : lr_strerror(rc));
		return rc;
	}
	memcpy(token, e.token, 33);
	return 0;
}

static int refuse(struct lr_err *err, const char *msg)
{
	lr_err_set(err, "grant: %s", msg);
	return LR_EREFUSED;
}

static int same(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* Checks the bindings of e against r in a fixed order; the first that fails is named. */
static int check(const struct grant *e, const struct lr_grant_req *r, uint64_t now,
		 struct lr_err *err)
{
	if (e->used)
		return refuse(err, "already used");
	if (now >= e->expires_ns)
		return refuse(err, "expired");
	if (e->exec_id != r->exec_id)
		return refuse(err, "for another execution");
	if (!same(e->fingerprint, r->fingerprint))
		return refuse(err, "for another profile");
	if (!same(e->command, r->command))
		return refuse(err, "for another command");
	if (!same(e->cwd, r->cwd))
		return refuse(err, "for another directory");
	if (e->cls != r->cls)
		return refuse(err, "for another class of access");
	if (!same(e->target, r->target))
		return refuse(err, "for another target");
	if (e->pinned) {
		int pinned = 0;
		dev_t dev = 0;
		ino_t ino = 0;
		mode_t type = 0;
		if (pin(e->target, &pinned, &dev, &ino, &type) != 0 || pinned != e->pinned ||
		    dev != e->dev || ino != e->ino || type != e->type)
			return refuse(err, "the target changed since approval");
	}
	return 0;
}

int lr_grant_redeem(struct lr_grants *g, const char *token, const struct lr_grant_req *r,
		    struct lr_err *err)
{
	if (!token || strlen(token) != 32)
		return refuse(err, "malformed token");
	uint64_t now = lr_now_ns();
	int rc = LR_EREFUSED;
	pthread_mutex_lock(&g->mu);
	struct grant *e = NULL;
	for (size_t i = 0; i < g->n && !e; i++)
		if (strcmp(g->v[i].token, token) == 0)
			e = &g->v[i];
	if (!e) {
		refuse(err, "unknown token");
	} else {
		rc = check(e, r, now, err);
		e->used = 1;
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}
