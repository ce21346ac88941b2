/*
 * protect.c — files in a writable root that the host interprets later
 * (git directories, the editor/agent/CI names): the scan that finds them
 * before a run, the placeholders that hold missing ones, the check after a
 * run that moves aside repositories that appeared inside repositories, and
 * the same answer for the host's own writers (the file tools). sandbox.h
 * says what each part promises; the mount view that applies a plan is
 * host/executor.c (spec) and sandbox/helper.c (binds).
 *
 * Everything here walks with directory fds and O_NOFOLLOW: a symbolic link
 * is never followed, only named (and refused where a protected entry is).
 */
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const lr_protect_default_names[] = {
	".vscode", ".idea", ".devcontainer", ".cursor", ".claude", ".mcp.json", ".envrc",
	".github/workflows", NULL
};

const char *const lr_protect_git_files[] = {
	"config", "config.worktree", "commondir", "hooks", "info/attributes",
	"objects/info/alternates", "modules", NULL
};

/* What a missing interpreted file is held by: its kind and bytes. */
static const struct {
	const char *name;
	enum lr_protect_kind kind;
	const char *content;
	int main_only; /* not in a linked worktree's git directory (git reads the common one) */
} git_leaves[] = {
	{ "config", LR_PROTECT_FILE, "", 1 },
	{ "config.worktree", LR_PROTECT_FILE, "", 0 },
	/* "." names the git directory itself: the same as no commondir */
	{ "commondir", LR_PROTECT_FILE, ".\n", 0 },
	{ "hooks", LR_PROTECT_DIR, NULL, 1 },
	{ "info/attributes", LR_PROTECT_FILE, "", 1 },
	{ "objects/info/alternates", LR_PROTECT_FILE, "", 1 },
	{ "modules", LR_PROTECT_DIR, NULL, 1 },
};
#define NLEAVES (sizeof git_leaves / sizeof git_leaves[0])

#define PH_FILE_MODE 0444
#define PH_DIR_MODE 0555
#define QUARANTINE ".luarig-quarantine"

__attribute__((format(printf, 2, 3)))
static int refuse(char *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, LR_SBX_ERRLEN, fmt, ap);
	va_end(ap);
	return LR_EREFUSED;
}

/* 1 when path is dir or below it (both canonical). */
static int within(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	void *p = realloc(*arr, nc * size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

static int strs_add(char ***v, size_t *n, size_t *cap, const char *s)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*v)[i], s) == 0)
			return 0;
	if (grow((void **)v, cap, *n + 1, sizeof **v) < 0)
		return -ENOMEM;
	char *d = strdup(s);
	if (!d)
		return -ENOMEM;
	(*v)[(*n)++] = d;
	return 0;
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int sorted_has(char *const *v, size_t n, const char *s)
{
	return n && bsearch(&s, v, n, sizeof *v, by_str) != NULL;
}

int lr_protect_name_check(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > LR_PROTECT_NAME_MAX || name[0] == '/' || name[n - 1] == '/')
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
			return -EINVAL;
	for (const char *c = name; c;) {
		const char *e = strchr(c, '/');
		size_t k = e ? (size_t)(e - c) : strlen(c);
		if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.'))
			return -EINVAL;
		c = e ? e + 1 : NULL;
	}
	return 0;
}

int lr_protect_gitfile(const char *buf, size_t len, char *out, size_t outlen)
{
	static const char pre[] = "gitdir: ";
	if (len < sizeof pre || memcmp(buf, pre, sizeof pre - 1) != 0)
		return -EINVAL;
	const char *p = buf + sizeof pre - 1;
	size_t n = len - (sizeof pre - 1);
	while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
		n--;
	if (n == 0 || n >= outlen || memchr(p, '\0', n) || memchr(p, '\n', n))
		return -EINVAL;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* ------------------------------------------------------------------ */
/* the scan                                                             */

struct scan {
	const struct lr_protect_opts *o;
	struct lr_protect_plan *p;
	const char *const *roots;
	size_t nroots;
	size_t max;
	char *err;
};

/* The writable root holding path, or NULL. */
static const char *root_of(const struct scan *s, const char *path)
{
	const char *best = NULL;
	for (size_t i = 0; i < s->nroots; i++)
		if (within(path, s->roots[i]) && (!best || strlen(s->roots[i]) > strlen(best)))
			best = s->roots[i];
	return best;
}

/*
 * A grant drops the protection of path when it names path, a place inside
 * it, or a place above it that is still inside unit (the git directory, or
 * the protected name): a grant on the workspace keeps every protection, a
 * grant on .git or on .git/hooks opens what it names.
 */
static int granted(const struct scan *s, const char *unit, const char *path)
{
	for (size_t i = 0; i < s->o->ngranted; i++) {
		const char *g = s->o->granted[i];
		if ((within(path, g) || within(g, path)) && within(g, unit))
			return 1;
	}
	return 0;
}

static int add_bind(struct scan *s, const char *path, int writable)
{
	struct lr_protect_plan *p = s->p;
	for (size_t i = 0; i < p->nbinds; i++)
		if (strcmp(p->binds[i].path, path) == 0) {
			if (!writable)
				p->binds[i].writable = 0; /* read-only wins over a pin */
			return 0;
		}
	if (grow((void **)&p->binds, &p->bcap, p->nbinds + 1, sizeof *p->binds) < 0)
		return -ENOMEM;
	char *d = strdup(path);
	if (!d)
		return -ENOMEM;
	p->binds[p->nbinds++] = (struct lr_protect_bind){ d, writable };
	return 0;
}

/* Pins every directory strictly between path's writable root and path. */
static int pin_parents(struct scan *s, const char *path)
{
	const char *root = root_of(s, path);
	if (!root || strcmp(root, path) == 0)
		return 0;
	size_t rl = strlen(root) == 1 ? 0 : strlen(root);
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *c = buf + rl + 1; (c = strchr(c, '/')) != NULL; c++) {
		*c = '\0';
		int rc = add_bind(s, buf, 1);
		*c = '/';
		if (rc)
			return rc;
	}
	return 0;
}

static int add_item(struct scan *s, const char *path, enum lr_protect_kind kind, const char *content)
{
	struct lr_protect_plan *p = s->p;
	for (size_t i = 0; i < p->nitems; i++)
		if (strcmp(p->items[i].path, path) == 0)
			return 0;
	if (grow((void **)&p->items, &p->icap, p->nitems + 1, sizeof *p->items) < 0)
		return -ENOMEM;
	char *d = strdup(path);
	if (!d)
		return -ENOMEM;
	p->items[p->nitems++] = (struct lr_protect_item){ d, kind, content };
	return pin_parents(s, path);
}

/* One of our placeholders (left by a run that could not remove it): held and removed like ours. */
static int looks_placeholder(const struct stat *st, const char *content)
{
	if (S_ISDIR(st->st_mode))
		return !content && (st->st_mode & 07777) == PH_DIR_MODE;
	return S_ISREG(st->st_mode) && content && (st->st_mode & 07777) == PH_FILE_MODE &&
	       (size_t)st->st_size == strlen(content);
}

/*
 * path (below a writable root) must stay as it is: an existing file or
 * directory is bound read-only; a missing one is held by a placeholder at
 * its first missing component (a directory, or at the leaf the kind given);
 * a symbolic link refuses the run. place 0: a missing one is only watched
 * (checked after the run) instead.
 */
static int protect_leaf(struct scan *s, const char *unit, const char *path,
			enum lr_protect_kind kind, const char *content, int place, const char *what)
{
	if (!root_of(s, path) || granted(s, unit, path))
		return 0;
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (S_ISLNK(st.st_mode))
			return refuse(s->err, "executor: '%s' (%s) is a symbolic link, which a command could "
				      "replace; make it a real file or directory, or grant writes to it",
				      path, what);
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			return 0; /* a device or fifo: nothing git or an editor reads code from */
		if (looks_placeholder(&st, kind == LR_PROTECT_DIR ? NULL : content))
			return add_item(s, path, S_ISDIR(st.st_mode) ? LR_PROTECT_DIR : LR_PROTECT_FILE,
					S_ISDIR(st.st_mode) ? NULL : content);
		return add_item(s, path, LR_PROTECT_RO, NULL);
	}
	if (errno != ENOENT)
		return 0; /* ENOTDIR: a file is in the way, nothing can be created there */
	/* the first missing component */
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	const char *root = root_of(s, path);
	size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
	char *leaf = NULL;
	for (char *c = buf + rl + 1;; c++) {
		char *slash = strchr(c, '/');
		if (slash)
			*slash = '\0';
		if (lstat(buf, &st) != 0) {
			if (errno != ENOENT)
				return 0;
			leaf = buf;
			break;
		}
		if (S_ISLNK(st.st_mode))
			return refuse(s->err, "executor: '%s' (on the way to %s) is a symbolic link, which "
				      "a command could replace", buf, what);
		if (!S_ISDIR(st.st_mode) || !slash)
			return 0;
		if (looks_placeholder(&st, NULL)) /* another run's placeholder holds it already */
			return place ? add_item(s, buf, LR_PROTECT_DIR, NULL) : 0;
		*slash = '/';
		c = slash;
	}
	int is_leaf = strcmp(leaf, path) == 0;
	if (!place)
		return strs_add(&s->p->watch, &s->p->nwatch, &s->p->wcap, leaf);
	if (is_leaf && kind == LR_PROTECT_FILE)
		return add_item(s, leaf, LR_PROTECT_FILE, content);
	return add_item(s, leaf, LR_PROTECT_DIR, NULL);
}

/* The names of the list at the top of a project root (a writable root: placeholders; a repository's worktree: watched). */
static int protect_names(struct scan *s, const char *dir, int place)
{
	char path[PATH_MAX], unit[PATH_MAX];
	for (int pass = 0; pass < 2; pass++) {
		const char *const *v = pass ? s->o->names : lr_protect_default_names;
		size_t n = pass ? s->o->nnames : SIZE_MAX;
		for (size_t i = 0; i < n && v && v[i]; i++) {
			snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "", v[i]);
			snprintf(unit, sizeof unit, "%s", path);
			char *first = strchr(unit + strlen(dir) + 1, '/');
			if (first)
				*first = '\0'; /* a grant on .github opens .github/workflows */
			char what[LR_PROTECT_NAME_MAX + 32];
			snprintf(what, sizeof what, "the protected name '%s'", v[i]);
			int rc = protect_leaf(s, unit, path, LR_PROTECT_DIR, NULL, place, what);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int read_small(const char *path, char *buf, size_t cap, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	ssize_t r = read(fd, buf, cap);
	int e = errno;
	close(fd);
	if (r < 0)
		return -e;
	*len = (size_t)r;
	return 0;
}

/* The directory a .git file or commondir names (relative to base), canonical, or -errno. */
static int resolve_pointer(const char *base, const char *target, char out[PATH_MAX])
{
	char joined[PATH_MAX];
	if (target[0] == '/')
		snprintf(joined, sizeof joined, "%s", target);
	else if (snprintf(joined, sizeof joined, "%s/%s", base, target) >= (int)sizeof joined)
		return -ENAMETOOLONG;
	if (!realpath(joined, out))
		return -errno;
	struct stat st;
	if (stat(out, &st) < 0 || !S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return 0;
}

static int protect_gitdir(struct scan *s, const char *g, int worktree_gitdir);

/* A git directory's commondir, when it names a directory inside a writable root: protected too. */
static int follow_commondir(struct scan *s, const char *g)
{
	char path[PATH_MAX], buf[PATH_MAX], target[PATH_MAX];
	size_t len;
	snprintf(path, sizeof path, "%s/commondir", g);
	if (read_small(path, buf, sizeof buf - 1, &len) != 0)
		return 0;
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	buf[len] = '\0';
	if (!len || memchr(buf, '\0', len) || resolve_pointer(g, buf, target) != 0)
		return 0;
	return root_of(s, target) ? protect_gitdir(s, target, 0) : 0;
}

static int protect_gitdir(struct scan *s, const char *g, int worktree_gitdir)
{
	struct lr_protect_plan *p = s->p;
	for (size_t i = 0; i < p->ngitdirs; i++)
		if (strcmp(p->gitdirs[i], g) == 0)
			return 0;
	int rc = strs_add(&p->gitdirs, &p->ngitdirs, &p->gcap, g);
	if (rc || !root_of(s, g))
		return rc;
	char path[PATH_MAX];
	if (s->o->git_readonly) {
		if (granted(s, g, g) || strcmp(root_of(s, g), g) == 0)
			return 0;
		if ((rc = add_bind(s, g, 0)) != 0 || (rc = pin_parents(s, g)) != 0)
			return rc;
		return follow_commondir(s, g);
	}
	for (size_t i = 0; i < NLEAVES && !rc; i++) {
		if (worktree_gitdir && git_leaves[i].main_only)
			continue;
		snprintf(path, sizeof path, "%s/%s", g, git_leaves[i].name);
		char what[64];
		snprintf(what, sizeof what, "a git directory's %s", git_leaves[i].name);
		struct stat st;
		if (strcmp(git_leaves[i].name, "modules") == 0 && lstat(path, &st) == 0 &&
		    S_ISDIR(st.st_mode) && !looks_placeholder(&st, NULL)) {
			/* no new submodule git directory: the whole of modules/ read-only, the ones
			   inside re-bound writable (found by the walk, protected each) */
			if (!granted(s, g, path) && !(rc = add_bind(s, path, 0)))
				rc = pin_parents(s, path);
			continue;
		}
		rc = protect_leaf(s, g, path, git_leaves[i].kind, git_leaves[i].content, 1, what);
	}
	if (!rc)
		rc = follow_commondir(s, g);
	return rc;
}

/* modules/<name>/ (a submodule's git directory) inside a read-only modules/: writable, pinned. */
static int open_module(struct scan *s, const char *g)
{
	const char *m = strstr(g, "/modules/");
	if (!m || s->o->git_readonly)
		return 0;
	/* only when some enclosing git directory's modules/ is a read-only bind */
	for (size_t i = 0; i < s->p->nbinds; i++)
		if (!s->p->binds[i].writable && within(g, s->p->binds[i].path) &&
		    strcmp(g, s->p->binds[i].path) != 0) {
			int rc = add_bind(s, g, 1);
			return rc ? rc : pin_parents(s, g);
		}
	return 0;
}

/* Linked worktrees' git directories: worktrees/<name>/ with a commondir. */
static int protect_worktrees(struct scan *s, const char *g)
{
	char dir[PATH_MAX], sub[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/worktrees", g);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		if (++s->p->entries > s->max) {
			rc = refuse(s->err, "executor: more than %zu entries in the writable roots: the "
				    "protected-path walk cannot finish, so the run is refused (raise the "
				    "profile's protect.max_entries)", s->max);
			break;
		}
		struct stat st;
		if (snprintf(sub, sizeof sub, "%s/%s/commondir", dir, e->d_name) >= (int)sizeof sub ||
		    lstat(sub, &st) != 0)
			continue;
		if (snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < (int)sizeof sub)
			rc = protect_gitdir(s, sub, 1);
	}
	closedir(d);
	return rc;
}

/* A .git file: itself read-only, and the git directory it names when that is in a writable root. */
static int gitfile(struct scan *s, const char *dir, const char *path)
{
	int rc = protect_leaf(s, path, path, LR_PROTECT_RO, NULL, 1, "a .git file");
	if (rc)
		return rc;
	char buf[LR_PROTECT_GITFILE_MAX], target[PATH_MAX], real[PATH_MAX];
	size_t len;
	if (read_small(path, buf, sizeof buf, &len) != 0 ||
	    lr_protect_gitfile(buf, len, target, sizeof target) != 0 ||
	    resolve_pointer(dir, target, real) != 0 || !root_of(s, real))
		return 0;
	return protect_gitdir(s, real, 0);
}

struct entry {
	char *name;
	unsigned char type;
};

static int visit(struct scan *s, int dfd, char *path, size_t plen, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	struct entry *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0, head = 0, objects = 0, refs = 0, have_dotgit = 0;
	unsigned char dotgit = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		const char *nm = e->d_name;
		if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
			continue;
		if (++s->p->entries > s->max) {
			rc = refuse(s->err, "executor: more than %zu entries in the writable roots: the "
				    "protected-path walk cannot finish, so the run is refused (raise the "
				    "profile's protect.max_entries)", s->max);
			break;
		}
		unsigned char t = e->d_type;
		if (t == DT_UNKNOWN) {
			struct stat st;
			if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) != 0)
				continue;
			t = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG
			    : S_ISLNK(st.st_mode)			      ? DT_LNK
									      : DT_UNKNOWN;
		}
		if (strcmp(nm, "HEAD") == 0 && (t == DT_REG || t == DT_LNK))
			head = 1;
		else if (strcmp(nm, "objects") == 0 && t == DT_DIR)
			objects = 1;
		else if (strcmp(nm, "refs") == 0 && t == DT_DIR)
			refs = 1;
		if (strcmp(nm, ".git") == 0) {
			have_dotgit = 1;
			dotgit = t;
			continue;
		}
		if (t != DT_DIR)
			continue;
		if (grow((void **)&v, &cap, n + 1, sizeof *v) < 0 || !(v[n].name = strdup(nm))) {
			rc = -ENOMEM;
			break;
		}
		v[n++].type = t;
	}
	int gitdir = head && objects && refs;
	if (!rc && have_dotgit) {
		/* a worktree root: a zone, and what its .git is */
		char dir[PATH_MAX], dg[PATH_MAX];
		snprintf(dir, sizeof dir, "%s", plen ? path : "/");
		if (snprintf(dg, sizeof dg, "%s/.git", path) >= (int)sizeof dg)
			rc = refuse(s->err, "executor: a path in the writable roots is longer than %d bytes",
				    PATH_MAX);
		if (!rc)
			rc = strs_add(&s->p->dotgits, &s->p->ndotgits, &s->p->dcap, dg);
		if (!rc)
			rc = strs_add(&s->p->zones, &s->p->nzones, &s->p->zcap, dir);
		if (!rc && dotgit == DT_LNK && root_of(s, dg) && !granted(s, dg, dg))
			rc = refuse(s->err, "executor: '%s' is a symbolic link, which a command could "
				    "repoint; make it a directory or a .git file (gitdir: ...), or grant "
				    "writes to it", dg);
		else if (!rc && dotgit == DT_REG)
			rc = gitfile(s, dir, dg);
		else if (!rc && dotgit == DT_DIR)
			rc = protect_gitdir(s, dg, 0);
		/* the names at the top of a repository below a writable root: watched */
		const char *r = root_of(s, dir);
		if (!rc && !(r && strcmp(r, dir) == 0))
			rc = protect_names(s, dir, 0);
		if (!rc && dotgit == DT_DIR) {
			if (grow((void **)&v, &cap, n + 1, sizeof *v) < 0 || !(v[n].name = strdup(".git")))
				rc = -ENOMEM;
			else
				v[n++].type = DT_DIR;
		}
	}
	if (!rc && gitdir) {
		rc = protect_gitdir(s, path, 0);
		if (!rc)
			rc = open_module(s, path);
		if (!rc)
			rc = protect_worktrees(s, path);
	}
	for (size_t i = 0; i < n; i++) {
		/* a git directory's objects, refs and logs hold no repository */
		int skip = gitdir && (strcmp(v[i].name, "objects") == 0 || strcmp(v[i].name, "refs") == 0 ||
				      strcmp(v[i].name, "logs") == 0);
		if (!rc && !skip) {
			size_t k = strlen(v[i].name);
			if (plen + 1 + k >= PATH_MAX) {
				rc = refuse(s->err, "executor: a path in the writable roots is longer than %d "
					    "bytes", PATH_MAX);
			} else if (depth + 1 > LR_PROTECT_MAX_DEPTH) {
				rc = refuse(s->err, "executor: the writable roots are more than %d directories "
					    "deep (the protected-path walk stops there, so the run is "
					    "refused): '%.160s…'", LR_PROTECT_MAX_DEPTH, path);
			} else {
				int sub = openat(dirfd(d), v[i].name,
						 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (sub >= 0) {
					path[plen] = '/';
					memcpy(path + plen + 1, v[i].name, k + 1);
					rc = visit(s, sub, path, plen + 1 + k, depth + 1);
					path[plen] = '\0';
				}
			}
		}
		free(v[i].name);
	}
	free(v);
	closedir(d);
	return rc;
}

/* 1 when a directory above root (not root itself) holds a .git or is a git directory. */
static int inside_repository(const char *root)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", root);
	struct stat st;
	for (;;) {
		char *slash = strrchr(buf, '/');
		if (!slash)
			return 0;
		if (slash == buf) {
			if (buf[1] == '\0')
				return 0;
			buf[1] = '\0';
		} else {
			*slash = '\0';
		}
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/.git", strcmp(buf, "/") ? buf : "");
		if (lstat(p, &st) == 0)
			return 1;
		int g = 1;
		static const char *const parts[] = { "HEAD", "objects", "refs" };
		for (int i = 0; i < 3 && g; i++) {
			snprintf(p, sizeof p, "%s/%s", strcmp(buf, "/") ? buf : "", parts[i]);
			g = lstat(p, &st) == 0;
		}
		if (g)
			return 1;
		if (strcmp(buf, "/") == 0)
			return 0;
	}
}

void lr_protect_plan_release(struct lr_protect_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nitems; i++)
		free(p->items[i].path);
	for (size_t i = 0; i < p->nbinds; i++)
		free(p->binds[i].path);
	char **lists[] = { p->gitdirs, p->dotgits, p->zones, p->watch };
	size_t ns[] = { p->ngitdirs, p->ndotgits, p->nzones, p->nwatch };
	for (int l = 0; l < 4; l++) {
		for (size_t i = 0; i < ns[l]; i++)
			free(lists[l][i]);
		free(lists[l]);
	}
	free(p->items);
	free(p->binds);
	memset(p, 0, sizeof *p);
}

int lr_protect_scan(const char *const *roots, size_t nroots, const struct lr_protect_opts *o,
		    struct lr_protect_plan *plan, char err[LR_SBX_ERRLEN])
{
	memset(plan, 0, sizeof *plan);
	err[0] = '\0';
	struct scan s = { .o = o, .p = plan, .roots = roots, .nroots = nroots, .err = err,
			  .max = o->max_entries ? o->max_entries : LR_PROTECT_MAX_ENTRIES };
	int rc = 0;
	char path[PATH_MAX];
	for (size_t i = 0; i < nroots && !rc; i++) {
		/* a root inside another root is walked with it */
		int nested = 0;
		for (size_t j = 0; j < nroots; j++)
			nested |= j != i && within(roots[i], roots[j]) && strcmp(roots[i], roots[j]) != 0;
		if (nested)
			continue;
		if (inside_repository(roots[i]))
			rc = strs_add(&plan->zones, &plan->nzones, &plan->zcap, roots[i]);
		if (!rc)
			rc = protect_names(&s, roots[i], 1);
		if (rc)
			break;
		int fd = open(roots[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		snprintf(path, sizeof path, "%s", strcmp(roots[i], "/") ? roots[i] : "");
		rc = visit(&s, fd, path, strlen(path), 0);
	}
	if (!rc) {
		qsort(plan->gitdirs, plan->ngitdirs, sizeof *plan->gitdirs, by_str);
		qsort(plan->dotgits, plan->ndotgits, sizeof *plan->dotgits, by_str);
	}
	if (rc) {
		if (!err[0])
			snprintf(err, LR_SBX_ERRLEN, "executor: the protected-path walk: %s", lr_strerror(rc));
		lr_protect_plan_release(plan);
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* placeholders                                                         */

struct held {
	int fd;
	char *path;
	dev_t dev;
	ino_t ino;
	int dir;
	const char *content;
};

struct lr_protect_hold {
	struct held *v;
	size_t n;
};

static int make_placeholder(const struct lr_protect_item *it)
{
	if (it->kind == LR_PROTECT_DIR) {
		if (mkdir(it->path, PH_DIR_MODE) == 0)
			return chmod(it->path, PH_DIR_MODE) == 0 ? 0 : -errno; /* against the umask */
		return errno == EEXIST ? 0 : -errno;
	}
	int fd = open(it->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, PH_FILE_MODE);
	if (fd < 0)
		return errno == EEXIST ? 0 : -errno;
	size_t n = strlen(it->content);
	int rc = 0;
	if (write(fd, it->content, n) != (ssize_t)n)
		rc = -EIO;
	else if (fchmod(fd, PH_FILE_MODE) < 0) /* against a umask that took bits */
		rc = -errno;
	close(fd);
	if (rc)
		unlink(it->path);
	return rc;
}

int lr_protect_place(const struct lr_protect_plan *p, struct lr_protect_hold **out,
		     char err[LR_SBX_ERRLEN])
{
	*out = NULL;
	struct lr_protect_hold *h = calloc(1, sizeof *h);
	size_t want = 0;
	for (size_t i = 0; i < p->nitems; i++)
		want += p->items[i].kind != LR_PROTECT_RO;
	if (!h || (want && !(h->v = calloc(want, sizeof *h->v)))) {
		free(h);
		snprintf(err, LR_SBX_ERRLEN, "executor: out of memory");
		return -ENOMEM;
	}
	int rc = 0;
	for (size_t i = 0; i < p->nitems && !rc; i++) {
		const struct lr_protect_item *it = &p->items[i];
		if (it->kind == LR_PROTECT_RO)
			continue;
		int dir = it->kind == LR_PROTECT_DIR;
		int tries = 0;
		for (;;) {
			if ((rc = make_placeholder(it)) != 0) {
				snprintf(err, LR_SBX_ERRLEN, "executor: cannot make the placeholder '%s' "
					 "that holds a protected path: %s", it->path, lr_strerror(rc));
				break;
			}
			int fd = open(it->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
			struct stat st, now;
			if (fd < 0 && errno == ENOENT && ++tries < 8)
				continue; /* removed by the run that made it: make it again */
			if (fd < 0 && errno == ELOOP) {
				rc = refuse(err, "executor: '%s' became a symbolic link", it->path);
				break;
			}
			if (fd < 0)
				break; /* something else is there now (bound read-only as it is) */
			if (fstat(fd, &st) < 0 || !looks_placeholder(&st, dir ? NULL : it->content)) {
				close(fd); /* not a placeholder: someone's own file, bound read-only */
				break;
			}
			flock(fd, LOCK_SH); /* waits out a run removing it */
			if (fstat(fd, &st) == 0 && st.st_nlink > 0 && lstat(it->path, &now) == 0 &&
			    now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
				h->v[h->n++] = (struct held){ fd, strdup(it->path), st.st_dev, st.st_ino, dir,
							      it->content };
				break;
			}
			close(fd);
			if (++tries >= 8) {
				rc = refuse(err, "executor: the placeholder '%s' keeps being removed", it->path);
				break;
			}
		}
	}
	if (rc) {
		lr_protect_unplace(h);
		return rc;
	}
	*out = h;
	return 0;
}

void lr_protect_unplace(struct lr_protect_hold *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++) {
		struct held *x = &h->v[i];
		struct stat now;
		/* no other run holds it: it goes when it is still ours and untouched */
		if (x->path && flock(x->fd, LOCK_EX | LOCK_NB) == 0 && lstat(x->path, &now) == 0 &&
		    now.st_dev == x->dev && now.st_ino == x->ino) {
			if (x->dir) {
				rmdir(x->path); /* fails when something is inside: then it stays */
			} else {
				char buf[8];
				size_t n = strlen(x->content);
				if (n < sizeof buf && pread(x->fd, buf, sizeof buf, 0) == (ssize_t)n &&
				    memcmp(buf, x->content, n) == 0)
					unlink(x->path);
			}
		}
		close(x->fd);
		free(x->path);
	}
	free(h->v);
	free(h);
}

/* ------------------------------------------------------------------ */
/* after the run                                                        */

struct after {
	const struct lr_protect_plan *p;
	const struct lr_protect_opts *o;
	struct lr_buf *moved;
	size_t entries, max;
	char *err;
	int rc; /* the first failure; the check goes on */
};

/* Renames name in dirfd to name.luarig-quarantine (or -2, -3 …), never over an existing one. */
static int quarantine(struct after *a, int dfd, const char *dir, const char *name, const char *why)
{
	char to[NAME_MAX + 1];
	for (int k = 1; k <= 100; k++) {
		if (k == 1)
			snprintf(to, sizeof to, "%.200s%s", name, QUARANTINE);
		else
			snprintf(to, sizeof to, "%.200s%s-%d", name, QUARANTINE, k);
		if (renameat2(dfd, name, dfd, to, RENAME_NOREPLACE) == 0) {
			lr_buf_printf(a->moved, "'%s/%s' moved to '%s/%s': %s\n", dir, name, dir, to, why);
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	int e = errno;
	lr_buf_printf(a->moved, "'%s/%s' could not be moved aside (%s): %s\n", dir, name, strerror(e), why);
	if (!a->rc) {
		a->rc = -e;
		snprintf(a->err, LR_SBX_ERRLEN, "executor: cannot move '%s/%s' aside: %s", dir, name,
			 strerror(e));
	}
	return -e;
}

static int granted_path(const struct after *a, const char *path)
{
	for (size_t i = 0; i < a->o->ngranted; i++)
		if (within(path, a->o->granted[i]) && within(a->o->granted[i], path))
			return 1;
	return 0;
}

static void after_walk(struct after *a, int dfd, char *path, size_t plen, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	char **subs = NULL;
	size_t n = 0, cap = 0;
	int head = 0, objects = 0, refs = 0, dotgit = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		const char *nm = e->d_name;
		if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
			continue;
		if (++a->entries > a->max) {
			if (a->rc != LR_ETOOBIG) {
				a->rc = LR_ETOOBIG;
				snprintf(a->err, LR_SBX_ERRLEN, "executor: the check after the run stopped "
					 "after %zu entries: a repository made below '%s' may be left", a->max,
					 path);
			}
			break;
		}
		unsigned char t = e->d_type;
		if (t == DT_UNKNOWN) {
			struct stat st;
			if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) != 0)
				continue;
			t = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
		}
		if (strcmp(nm, ".git") == 0) {
			dotgit = 1;
			continue;
		}
		if (strcmp(nm, "HEAD") == 0 && t != DT_DIR)
			head = 1;
		else if (strcmp(nm, "objects") == 0 && t == DT_DIR)
			objects = 1;
		else if (strcmp(nm, "refs") == 0 && t == DT_DIR)
			refs = 1;
		if (t == DT_DIR && grow((void **)&subs, &cap, n + 1, sizeof *subs) == 0 &&
		    (subs[n] = strdup(nm)) != NULL)
			n++;
	}
	int known_gitdir = sorted_has(a->p->gitdirs, a->p->ngitdirs, path);
	if (dotgit && plen + 5 < PATH_MAX) {
		memcpy(path + plen, "/.git", 6);
		int known = sorted_has(a->p->dotgits, a->p->ndotgits, path) || granted_path(a, path);
		path[plen] = '\0';
		if (!known)
			quarantine(a, dirfd(d), path, ".git",
				   "a .git the command made inside a repository, which git on the host "
				   "would enter (its config and hooks run as you)");
	}
	if (head && objects && refs && !known_gitdir)
		quarantine(a, dirfd(d), path, "HEAD",
			   "a repository the command made inside a repository (HEAD, objects, refs), "
			   "which git run in that directory on the host would use");
	for (size_t i = 0; i < n; i++) {
		int skip = known_gitdir && (strcmp(subs[i], "objects") == 0 || strcmp(subs[i], "refs") == 0 ||
					    strcmp(subs[i], "logs") == 0);
		size_t k = strlen(subs[i]);
		if (!skip && depth < LR_PROTECT_MAX_DEPTH * 4 && plen + 1 + k < PATH_MAX &&
		    a->rc != LR_ETOOBIG) {
			int sub = openat(dirfd(d), subs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				path[plen] = '/';
				memcpy(path + plen + 1, subs[i], k + 1);
				after_walk(a, sub, path, plen + 1 + k, depth + 1);
				path[plen] = '\0';
			}
		}
		free(subs[i]);
	}
	free(subs);
	closedir(d);
}

int lr_protect_after(const struct lr_protect_plan *p, const struct lr_protect_opts *o,
		     struct lr_buf *moved, char err[LR_SBX_ERRLEN])
{
	err[0] = '\0';
	size_t max = o->max_entries ? o->max_entries : LR_PROTECT_MAX_ENTRIES;
	struct after a = { .p = p, .o = o, .moved = moved, .max = max * 4, .err = err };
	char path[PATH_MAX];
	for (size_t i = 0; i < p->nzones; i++) {
		int nested = 0;
		for (size_t j = 0; j < p->nzones && !nested; j++)
			nested = j != i && within(p->zones[i], p->zones[j]);
		if (nested)
			continue;
		int fd = open(p->zones[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		snprintf(path, sizeof path, "%s", p->zones[i]);
		after_walk(&a, fd, path, strlen(path), 0);
	}
	for (size_t i = 0; i < p->nwatch; i++) {
		struct stat st;
		if (lstat(p->watch[i], &st) != 0)
			continue;
		snprintf(path, sizeof path, "%s", p->watch[i]);
		char *slash = strrchr(path, '/');
		if (!slash || slash == path)
			continue;
		*slash = '\0';
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		quarantine(&a, fd, path, slash + 1,
			   "a protected name the command made at the top of a repository (editors, "
			   "agents and CI on the host read it)");
		close(fd);
	}
	return a.rc;
}

/* ------------------------------------------------------------------ */
/* the host's own writers                                               */

static int is_gitdir_at(int dfd)
{
	struct stat st;
	return fstatat(dfd, "HEAD", &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	       fstatat(dfd, "objects", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	       fstatat(dfd, "refs", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* 1 when the components of rel from index at on begin with name's components. */
static int starts_with_name(char *const *c, size_t n, size_t at, const char *name)
{
	size_t i = at;
	for (const char *p = name; p;) {
		const char *e = strchr(p, '/');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (i >= n || strlen(c[i]) != k || memcmp(c[i], p, k) != 0)
			return 0;
		i++;
		p = e ? e + 1 : NULL;
	}
	return 1;
}

int lr_protect_path(const char *root, const char *rel, const struct lr_protect_opts *o,
		    char why[LR_SBX_ERRLEN])
{
	why[0] = '\0';
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
		return -ENAMETOOLONG;
	char *c[PATH_MAX / 2];
	size_t n = 0;
	for (char *save = NULL, *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save))
		c[n++] = t;
	if (n == 0)
		return 0;
	/* a .git at any depth: writing it makes or repoints a repository; below it is a git directory */
	for (size_t i = 0; i < n; i++)
		if (strcmp(c[i], ".git") == 0) {
			char pre[PATH_MAX] = "";
			for (size_t j = 0; j <= i; j++)
				snprintf(pre + strlen(pre), sizeof pre - strlen(pre), "%s%s", j ? "/" : "", c[j]);
			snprintf(why, LR_SBX_ERRLEN, "%s '%s', which git on the host reads (a git "
				 "directory's config and hooks run as you, a .git file says where they are)",
				 i + 1 == n ? "it is the git entry" : "it is inside the git entry", pre);
			return 1;
		}
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = 0;
	char pre[PATH_MAX] = ".";
	for (size_t i = 0; i < n && !rc; i++) {
		/* dfd is the directory holding c[i] (root, then root/c[0] …) */
		if (is_gitdir_at(dfd)) {
			snprintf(why, LR_SBX_ERRLEN, "it is inside '%s', a git directory (git on the host "
				 "runs its config and hooks as you)", pre);
			rc = 1;
			break;
		}
		struct stat st;
		int project = i == 0 || fstatat(dfd, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0;
		for (int pass = 0; project && pass < 2 && !rc; pass++) {
			const char *const *v = pass ? o->names : lr_protect_default_names;
			size_t nv = pass ? o->nnames : SIZE_MAX;
			for (size_t k = 0; k < nv && v && v[k] && !rc; k++)
				if (starts_with_name(c, n, i, v[k])) {
					snprintf(why, LR_SBX_ERRLEN, "'%s' at the top of %s is on the protected "
						 "list (editors, agents and CI on the host run what it says)",
						 v[k], i == 0 ? "the workspace" : "a repository");
					rc = 1;
				}
		}
		if (rc || i + 1 == n)
			break;
		/* HEAD next to objects/ and refs/ would make this directory a repository */
		if (i + 2 == n && strcmp(c[i + 1], "HEAD") == 0) {
			int sub = openat(dfd, c[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				int ob = fstatat(sub, "objects", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
				int rf = fstatat(sub, "refs", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
				close(sub);
				if (ob && rf) {
					snprintf(why, LR_SBX_ERRLEN, "a HEAD beside objects/ and refs/ makes a "
						 "git directory, which git on the host would use");
					rc = 1;
					break;
				}
			}
		}
		int sub = openat(dfd, c[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0)
			break; /* missing (or not a directory): nothing deeper exists to check */
		close(dfd);
		dfd = sub;
		snprintf(pre + (i == 0 ? 0 : strlen(pre)), sizeof pre - (i == 0 ? 0 : strlen(pre)), "%s%s",
			 i == 0 ? "" : "/", c[i]);
	}
	close(dfd);
	return rc;
}
