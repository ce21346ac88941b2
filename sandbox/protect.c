/*
 * protect.c — files in a writable root that the host interprets later
 * (git directories, the editor/agent/CI names): the scan that finds them
 * before a run, the placeholders that hold missing ones, the check after a
 * run that moves aside repositories that appeared inside repositories, and
 * the same answer for the host's own writers (the file tools). sandbox.h
 * says what each part promises; the mount view that applies a plan is
 * sandbox/build.c (spec) and sandbox/helper.c (binds).
 *
 * Everything here walks with directory fds and O_NOFOLLOW: a symbolic link
 * is never followed, only named (and refused where a protected entry is).
 */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
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

/* Sets the message and returns LR_EREFUSED. */
#define refuse(e, ...) lr_err_fail((e), LR_EREFUSED, __VA_ARGS__)

/* 1 when path is dir or below it (both canonical). */
static int within(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int strs_add(char ***v, size_t *n, size_t *cap, const char *s)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*v)[i], s) == 0)
			return 0;
	if (lr_grow((void **)v, cap, *n + 1, sizeof **v) < 0)
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

/*
 * A reader of git's config format for the few keys that name files git
 * runs or reads as config: core.hooksPath, include.path and
 * includeIf.<condition>.path. Sections and keys are case-insensitive; a
 * value may be quoted in parts, hold \" \\ \n \t \b escapes, end in a
 * comment (# or ; outside quotes) and go on after a backslash at the end of
 * a line. A line git would refuse ends the reading (git refuses the whole
 * file then, and runs nothing from it).
 */
static int ci_eq(const char *a, size_t n, const char *b)
{
	return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

int lr_protect_config_paths(const char *buf, size_t len,
			    void (*found)(void *arg, enum lr_protect_key key, const char *value),
			    void *arg)
{
	char sect[64] = "", sub[256] = "";
	size_t i = 0;
	char val[PATH_MAX];
	while (i < len) {
		while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
			i++;
		if (i >= len)
			break;
		char c = buf[i];
		if (c == '#' || c == ';') {
			while (i < len && buf[i] != '\n')
				i++;
			continue;
		}
		if (c == '[') {
			/* [section] [section "sub"] [section.sub] */
			i++;
			size_t n = 0;
			while (i < len && (isalnum((unsigned char)buf[i]) || buf[i] == '-' || buf[i] == '.')) {
				if (n + 1 >= sizeof sect)
					return -EINVAL;
				sect[n++] = buf[i++];
			}
			sect[n] = '\0';
			sub[0] = '\0';
			char *dot = strchr(sect, '.');
			if (dot) { /* the old [section.sub] form */
				snprintf(sub, sizeof sub, "%s", dot + 1);
				*dot = '\0';
			}
			if (i < len && buf[i] == ' ') {
				while (i < len && buf[i] == ' ')
					i++;
				if (i >= len || buf[i] != '"' || dot)
					return -EINVAL;
				i++;
				size_t m = 0;
				while (i < len && buf[i] != '"' && buf[i] != '\n') {
					if (buf[i] == '\\' && i + 1 < len)
						i++;
					if (m + 1 >= sizeof sub)
						return -EINVAL;
					sub[m++] = buf[i++];
				}
				sub[m] = '\0';
				if (i >= len || buf[i] != '"')
					return -EINVAL;
				i++;
			}
			if (i >= len || buf[i] != ']' || n == 0)
				return -EINVAL;
			i++;
			continue; /* the rest of the line may hold a variable: read on */
		}
		if (!isalpha((unsigned char)c))
			return -EINVAL;
		size_t k0 = i;
		while (i < len && (isalnum((unsigned char)buf[i]) || buf[i] == '-'))
			i++;
		size_t klen = i - k0;
		while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
			i++;
		size_t vn = 0;
		int has_value = i < len && buf[i] == '=';
		if (has_value) {
			i++;
			int quoted = 0;
			size_t keep = 0; /* length of the value without trailing blanks outside quotes */
			while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
				i++;
			for (; i < len; i++) {
				char ch = buf[i];
				if (ch == '\n') {
					if (quoted)
						return -EINVAL;
					break;
				}
				if (!quoted && (ch == '#' || ch == ';')) {
					while (i < len && buf[i] != '\n')
						i++;
					break;
				}
				if (ch == '"') {
					quoted = !quoted;
					keep = vn;
					continue;
				}
				if (ch == '\\') {
					if (i + 1 >= len)
						return -EINVAL;
					char e = buf[++i];
					if (e == '\n')
						continue; /* continued on the next line */
					if (e == '\r' && i + 1 < len && buf[i + 1] == '\n') {
						i++;
						continue;
					}
					ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'b' ? '\b'
					   : e == '"' || e == '\\'	       ? e
									       : 0;
					if (!ch)
						return -EINVAL;
					if (vn + 1 >= sizeof val)
						return -EINVAL;
					val[vn++] = ch;
					keep = vn;
					continue;
				}
				if (ch == '\r' && i + 1 < len && buf[i + 1] == '\n' && !quoted)
					continue;
				if (vn + 1 >= sizeof val)
					return -EINVAL;
				val[vn++] = ch;
				if (quoted || (ch != ' ' && ch != '\t'))
					keep = vn;
			}
			if (quoted)
				return -EINVAL;
			vn = keep;
		} else {
			/* a key alone (true) or followed by a comment */
			if (i < len && buf[i] != '\n' && buf[i] != '\r' && buf[i] != '#' && buf[i] != ';')
				return -EINVAL;
			while (i < len && buf[i] != '\n')
				i++;
		}
		val[vn] = '\0';
		if (!has_value || !sect[0] || memchr(val, '\0', vn))
			continue;
		enum lr_protect_key key;
		if (ci_eq(sect, strlen(sect), "core") && !sub[0] && ci_eq(buf + k0, klen, "hookspath"))
			key = LR_PROTECT_HOOKSPATH;
		else if (ci_eq(buf + k0, klen, "path") &&
			 ((ci_eq(sect, strlen(sect), "include") && !sub[0]) ||
			  (ci_eq(sect, strlen(sect), "includeif") && sub[0])))
			key = LR_PROTECT_INCLUDE;
		else
			continue;
		if (vn)
			found(arg, key, val);
	}
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
	struct lr_err *err;
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
	if (lr_grow((void **)&p->binds, &p->bcap, p->nbinds + 1, sizeof *p->binds) < 0)
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
	if (lr_grow((void **)&p->items, &p->icap, p->nitems + 1, sizeof *p->items) < 0)
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
	/* a link on the way could be replaced as well as one at the end */
	char way[PATH_MAX];
	snprintf(way, sizeof way, "%s", path);
	const char *wr = root_of(s, path);
	for (char *c = way + (strcmp(wr, "/") ? strlen(wr) : 0) + 1; (c = strchr(c, '/')) != NULL; c++) {
		*c = '\0';
		int bad = lstat(way, &st) == 0 && S_ISLNK(st.st_mode);
		if (bad)
			return refuse(s->err, "executor: '%s' (on the way to %s) is a symbolic link, which a "
				      "command could replace; make it a real directory, or grant writes to it",
				      way, what);
		*c = '/';
	}
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

/* "." and ".." of an absolute path folded lexically (the file may not exist yet). */
static int fold(const char *in, char out[PATH_MAX])
{
	size_t n = 0;
	for (const char *c = in; *c;) {
		while (*c == '/')
			c++;
		if (!*c)
			break;
		const char *e = strchr(c, '/');
		size_t k = e ? (size_t)(e - c) : strlen(c);
		if (k == 2 && c[0] == '.' && c[1] == '.') {
			while (n > 0 && out[n - 1] != '/')
				n--;
			if (n > 0)
				n--;
		} else if (!(k == 1 && c[0] == '.')) {
			if (n + 1 + k >= PATH_MAX)
				return -ENAMETOOLONG;
			out[n++] = '/';
			memcpy(out + n, c, k);
			n += k;
		}
		c += k;
	}
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return 0;
}

struct cfg {
	struct scan *s;
	const char *gitdir;
	const char *base; /* the directory of the config file read */
	char worktree[PATH_MAX]; /* where hooks run: a .git's parent, a bare repository itself */
	int depth;
	int rc;
};

static int protect_config(struct scan *s, const char *gitdir, const char *file, int depth);

/* A key of a repository's config that names a file: an include inside a writable root is kept
   as it is (read-only; watched when missing), a hooks directory inside the git directory too. */
static void on_config_key(void *arg, enum lr_protect_key key, const char *value)
{
	struct cfg *f = arg;
	if (f->rc || value[0] == '~')
		return; /* the home's: not in a writable root */
	char joined[PATH_MAX], path[PATH_MAX];
	const char *base = key == LR_PROTECT_HOOKSPATH ? f->worktree : f->base;
	if (value[0] == '/')
		snprintf(joined, sizeof joined, "%s", value);
	else if (snprintf(joined, sizeof joined, "%s/%s", base, value) >= (int)sizeof joined)
		return;
	if (fold(joined, path) != 0)
		return;
	char real[PATH_MAX];
	if (realpath(path, real)) /* an existing one by its canonical path (links resolved) */
		snprintf(path, sizeof path, "%s", real);
	if (!root_of(f->s, path))
		return;
	if (key == LR_PROTECT_HOOKSPATH) {
		/* hooks kept in the git directory: the same as hooks/ (hooks in the worktree are
		   files of the project, like any other a command may change) */
		if (within(path, f->gitdir))
			f->rc = protect_leaf(f->s, path, path, LR_PROTECT_DIR, NULL, 1,
					     "the hooks directory the repository's config names");
		return;
	}
	struct stat st;
	int exists = lstat(path, &st) == 0;
	f->rc = protect_leaf(f->s, path, path, LR_PROTECT_RO, NULL, 0,
			     "a file the repository's config includes");
	if (!f->rc && exists && S_ISREG(st.st_mode) && f->depth < 8)
		f->rc = protect_config(f->s, f->gitdir, path, f->depth + 1);
}

static int protect_config(struct scan *s, const char *gitdir, const char *file, int depth)
{
	char *buf = malloc(1 << 20);
	size_t len = 0;
	if (!buf)
		return -ENOMEM;
	if (read_small(file, buf, 1 << 20, &len) != 0) {
		free(buf);
		return 0;
	}
	char base[PATH_MAX];
	snprintf(base, sizeof base, "%s", file);
	char *slash = strrchr(base, '/');
	if (slash)
		*slash = '\0';
	struct cfg f = { .s = s, .gitdir = gitdir, .base = base, .depth = depth };
	snprintf(f.worktree, sizeof f.worktree, "%s", gitdir);
	size_t gl = strlen(f.worktree);
	if (gl > 5 && strcmp(f.worktree + gl - 5, "/.git") == 0)
		f.worktree[gl - 5] = '\0';
	lr_protect_config_paths(buf, len, on_config_key, &f);
	free(buf);
	return f.rc;
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
		if ((rc = add_bind(s, g, 0)) != 0 || (rc = pin_parents(s, g)) != 0 ||
		    (rc = follow_commondir(s, g)) != 0)
			return rc;
		snprintf(path, sizeof path, "%s/config", g);
		return protect_config(s, g, path, 0);
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
	if (!rc && !worktree_gitdir) {
		char cfgpath[PATH_MAX];
		if (snprintf(cfgpath, sizeof cfgpath, "%s/config", g) < (int)sizeof cfgpath)
			rc = protect_config(s, g, cfgpath, 0);
	}
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

/*
 * The directories of the writable roots, as a tree of nodes: each knows its
 * device, inode, ctime, how many entries it has, whether it holds a .git
 * (and of what type) and whether it is a git directory (HEAD, objects/,
 * refs/). A later walk reuses a node whose directory still has the same
 * device, inode and ctime (any entry made, removed or renamed in a
 * directory changes its ctime, and nothing can set a ctime back): it costs
 * an open and an fstat instead of reading the directory. Not trusted: a
 * directory changed in the two seconds before the walk began (timestamps
 * can be coarser than a walk), and one on a network or FUSE file system
 * (ctimes there may be cached or made up).
 */
#define NONE UINT32_MAX
#define F_GITDIR 0x1  /* HEAD, objects/ and refs/ */
#define F_DIRTY 0x2   /* changed too recently to reuse */
#define F_NOREUSE 0x4 /* on a file system whose ctimes are not trusted */
#define RECENT_NS 2000000000LL
/* (folder-internal) the margin, for tests that cannot wait for it */
int64_t lr__protect_recent_ns = RECENT_NS;

struct node {
	uint32_t first, next; /* children, siblings */
	uint32_t name;        /* offset into names (a root: its whole path) */
	uint32_t nent;        /* entries in the directory */
	uint16_t len;
	uint8_t flags;
	uint8_t dotgit;       /* the type of its .git: 0 none, DT_DIR, DT_REG, DT_LNK, DT_UNKNOWN */
	dev_t dev;
	ino_t ino;
	int64_t ctime;
};

struct lr_protect_tree {
	struct node *v;
	size_t n, cap;
	char *names;
	size_t nlen, ncap;
	uint32_t *roots; /* the root nodes, in the order of the roots given */
	size_t nroots;
	int *outer;      /* per root: inside a repository above it */
};

void lr_protect_tree_free(struct lr_protect_tree *t)
{
	if (!t)
		return;
	free(t->v);
	free(t->names);
	free(t->roots);
	free(t->outer);
	free(t);
}

static int tree_add(struct lr_protect_tree *t, uint32_t parent, const char *name, size_t len,
		    uint32_t *out)
{
	if (t->n >= NONE - 1 || len > UINT16_MAX || t->nlen + len + 1 > UINT32_MAX)
		return -E2BIG;
	if (lr_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v) < 0)
		return -ENOMEM;
	while (t->nlen + len + 1 > t->ncap) {
		size_t nc = t->ncap ? t->ncap * 2 : 4096;
		char *p = realloc(t->names, nc);
		if (!p)
			return -ENOMEM;
		t->names = p;
		t->ncap = nc;
	}
	uint32_t i = (uint32_t)t->n++;
	memcpy(t->names + t->nlen, name, len);
	t->names[t->nlen + len] = '\0';
	t->v[i] = (struct node){ .first = NONE, .next = NONE, .name = (uint32_t)t->nlen,
				 .len = (uint16_t)len };
	t->nlen += len + 1;
	if (parent != NONE) {
		t->v[i].next = t->v[parent].first;
		t->v[parent].first = i;
	}
	*out = i;
	return 0;
}

static const char *node_name(const struct lr_protect_tree *t, uint32_t i)
{
	return t->names + t->v[i].name;
}

/* File systems whose ctimes a cache cannot trust. */
static int untrusted_fs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return 1;
	switch ((unsigned long)sf.f_type) {
	case 0x6969UL:     /* NFS */
	case 0x517BUL:     /* SMB */
	case 0xFF534D42UL: /* CIFS */
	case 0xFE534D42UL: /* SMB2 */
	case 0x65735546UL: /* FUSE */
	case 0x01021997UL: /* 9p */
	case 0x00C36400UL: /* Ceph */
	case 0x5346414FUL: /* AFS */
	case 0x73757245UL: /* Coda */
	case 0x564C0000UL: /* vboxsf */
		return 1;
	}
	return 0;
}

struct after;

struct walker {
	const struct lr_protect_tree *old; /* the last walk's tree, or NULL */
	struct lr_protect_tree *t;
	size_t entries, max;
	size_t read;     /* directories read (not reused) */
	int64_t started; /* coarse wall clock when the walk began, ns */
	struct lr_err *err;
	struct after *a; /* the check after a run; NULL for the scan */
	/* a shared buffer for getdents64 and a stack of the subdirectory names read */
	char dents[32768];
	char *stack;
	size_t slen, scap;
};

struct linux_dirent64_ {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int walk_dir(struct walker *w, int fd, uint32_t parent, const char *name, size_t nlen,
		    uint32_t old, char *path, size_t plen, int depth, int in_zone, int in_git,
		    int noreuse);

static int too_many(struct walker *w)
{
	if (w->entries <= w->max)
		return 0;
	if (w->a)
		return LR_ETOOBIG;
	return refuse(w->err, "executor: more than %zu entries in the writable roots: the "
		      "protected-path walk cannot finish, so the run is refused (raise the "
		      "profile's protect.max_entries)", w->max);
}

/* What a git directory holds that holds no repository (and may be large). */
static int is_gitdir_part(const char *nm)
{
	return strcmp(nm, "objects") == 0 || strcmp(nm, "refs") == 0 || strcmp(nm, "logs") == 0 ||
	       strcmp(nm, "lfs") == 0;
}

/* A child of dir fd named nm: opened without following a link, walked. */
static int walk_child(struct walker *w, int fd, uint32_t me, const char *nm, size_t k, uint32_t oc,
		      char *path, size_t plen, int depth, int in_zone, int in_git, int noreuse)
{
	if (plen + 1 + k >= PATH_MAX)
		return w->a ? 0 : refuse(w->err, "executor: a path in the writable roots is longer "
					 "than %d bytes", PATH_MAX);
	if (depth + 1 > LR_PROTECT_MAX_DEPTH)
		return w->a ? 0 : refuse(w->err, "executor: the writable roots are more than %d "
					 "directories deep (the protected-path walk stops there, so the "
					 "run is refused): '%.160s…'", LR_PROTECT_MAX_DEPTH, path);
	/* a directory without subdirectories that has not changed: one fstatat */
	const struct node *o = oc != NONE ? &w->old->v[oc] : NULL;
	struct stat st;
	if (o && o->first == NONE && !noreuse && !(o->flags & (F_DIRTY | F_NOREUSE)) &&
	    fstatat(fd, nm, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_dev == w->t->v[me].dev && st.st_dev == o->dev && st.st_ino == o->ino &&
	    (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec == o->ctime) {
		uint32_t c;
		int rc = tree_add(w->t, me, nm, k, &c);
		if (rc)
			return rc;
		struct node *n = &w->t->v[c];
		n->dev = o->dev;
		n->ino = o->ino;
		n->ctime = o->ctime;
		n->nent = o->nent;
		n->dotgit = o->dotgit;
		n->flags = o->flags & F_GITDIR;
		if (n->ctime + lr__protect_recent_ns > w->started)
			n->flags |= F_DIRTY;
		w->entries += n->nent;
		return too_many(w);
	}
	int sub = openat(fd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return 0; /* gone, or a link now: its parent was read again */
	path[plen] = '/';
	memcpy(path + plen + 1, nm, k + 1);
	int rc = walk_dir(w, sub, me, nm, k, oc, path, plen + 1 + k, depth + 1, in_zone, in_git, noreuse);
	path[plen] = '\0';
	return rc;
}

static void after_saw(struct walker *w, int fd, uint32_t me, uint32_t old, const char *path,
		      int in_zone, int in_git);

struct kid {
	const char *name;
	uint32_t idx;
};

static int by_kid(const void *a, const void *b)
{
	return strcmp(((const struct kid *)a)->name, ((const struct kid *)b)->name);
}

/* Room for need bytes in a growable buffer. */
static int reserve(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap : 4096;
	while (nc < need)
		nc *= 2;
	char *p = realloc(*buf, nc);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = nc;
	return 0;
}

static int walk_dir(struct walker *w, int fd, uint32_t parent, const char *name, size_t nlen,
		    uint32_t old, char *path, size_t plen, int depth, int in_zone, int in_git,
		    int noreuse)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return 0;
	}
	if (parent != NONE && st.st_dev != w->t->v[parent].dev)
		noreuse = untrusted_fs(fd); /* another file system below */
	uint32_t me;
	int rc = tree_add(w->t, parent, name, nlen, &me);
	if (rc) {
		close(fd);
		return rc;
	}
	struct node *n = &w->t->v[me];
	n->dev = st.st_dev;
	n->ino = st.st_ino;
	n->ctime = (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
	if (n->ctime + lr__protect_recent_ns > w->started)
		n->flags |= F_DIRTY;
	if (noreuse)
		n->flags |= F_NOREUSE;
	const struct node *o = old != NONE ? &w->old->v[old] : NULL;
	int reuse = o && o->dev == n->dev && o->ino == n->ino && o->ctime == n->ctime &&
		    !(o->flags & (F_DIRTY | F_NOREUSE)) && !noreuse;
	if (reuse) {
		n->nent = o->nent;
		n->dotgit = o->dotgit;
		n->flags |= o->flags & F_GITDIR;
		w->entries += n->nent;
		if ((rc = too_many(w)) != 0) {
			close(fd);
			return rc;
		}
		int gitdir = n->flags & F_GITDIR;
		int zone = in_zone || n->dotgit;
		for (uint32_t c = o->first; c != NONE && !rc; c = w->old->v[c].next) {
			const char *cn = node_name(w->old, c);
			int cgit = in_git || gitdir || strcmp(cn, ".git") == 0;
			rc = walk_child(w, fd, me, cn, w->old->v[c].len, c, path, plen, depth,
					zone && !cgit, cgit, noreuse);
		}
		close(fd);
		return rc;
	}
	/* read it: the names of its subdirectories go on the stack */
	w->read++;
	size_t base = w->slen, count = 0, nsub = 0;
	int head = 0, objects = 0, refs = 0;
	unsigned char dotgit = 0;
	for (;;) {
		long r = syscall(SYS_getdents64, fd, w->dents, sizeof w->dents);
		if (r <= 0)
			break;
		for (long off = 0; off < r;) {
			struct linux_dirent64_ *d = (struct linux_dirent64_ *)(w->dents + off);
			off += d->d_reclen;
			const char *nm = d->d_name;
			if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
				continue;
			count++;
			unsigned char t = d->d_type;
			if (t == DT_UNKNOWN) {
				struct stat cs;
				if (fstatat(fd, nm, &cs, AT_SYMLINK_NOFOLLOW) != 0)
					continue;
				t = S_ISDIR(cs.st_mode) ? DT_DIR : S_ISREG(cs.st_mode) ? DT_REG
				    : S_ISLNK(cs.st_mode)			       ? DT_LNK
										       : DT_UNKNOWN;
			}
			if (strcmp(nm, "HEAD") == 0 && (t == DT_REG || t == DT_LNK))
				head = 1;
			else if (strcmp(nm, "objects") == 0 && t == DT_DIR)
				objects = 1;
			else if (strcmp(nm, "refs") == 0 && t == DT_DIR)
				refs = 1;
			if (strcmp(nm, ".git") == 0)
				dotgit = t ? t : DT_UNKNOWN;
			if (t != DT_DIR)
				continue;
			size_t k = strlen(nm) + 1;
			if (reserve(&w->stack, &w->scap, w->slen + k) < 0) {
				close(fd);
				return -ENOMEM;
			}
			memcpy(w->stack + w->slen, nm, k);
			w->slen += k;
			nsub++;
		}
	}
	n = &w->t->v[me];
	n->nent = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
	n->dotgit = dotgit;
	if (head && objects && refs)
		n->flags |= F_GITDIR;
	w->entries += count;
	if ((rc = too_many(w)) != 0) {
		w->slen = base;
		close(fd);
		return rc;
	}
	if (w->a)
		after_saw(w, fd, me, old, path, in_zone, in_git);
	n = &w->t->v[me];
	int gitdir = n->flags & F_GITDIR;
	/* the last walk's children, by name, to reuse theirs */
	struct kid *kids = NULL;
	size_t nold = 0;
	if (o && o->first != NONE) {
		for (uint32_t c = o->first; c != NONE; c = w->old->v[c].next)
			nold++;
		kids = malloc(nold * sizeof *kids);
		if (kids) {
			size_t i = 0;
			for (uint32_t c = o->first; c != NONE; c = w->old->v[c].next)
				kids[i++] = (struct kid){ node_name(w->old, c), c };
			qsort(kids, nold, sizeof *kids, by_kid);
		}
	}
	/* the old zone decides: a .git made by the command does not make one */
	int zone = in_zone || (o ? o->dotgit : w->a ? 0 : dotgit);
	const char *nm = w->stack + base;
	for (size_t i = 0; i < nsub && !rc; i++) {
		size_t k = strlen(nm);
		if (!(gitdir && is_gitdir_part(nm)) &&
		    !(w->a && strcmp(nm, ".git") == 0 && !w->t->v[me].dotgit)) {
			uint32_t oc = NONE;
			if (kids) {
				struct kid key = { nm, NONE };
				const struct kid *hit = bsearch(&key, kids, nold, sizeof *kids, by_kid);
				if (hit)
					oc = hit->idx;
			}
			int cgit = in_git || gitdir || strcmp(nm, ".git") == 0;
			rc = walk_child(w, fd, me, nm, k, oc, path, plen, depth, zone && !cgit, cgit, noreuse);
		}
		nm += k + 1;
	}
	free(kids);
	w->slen = base;
	close(fd);
	return rc;
}

/*
 * 1 when a directory above root (not root itself) holds a .git or is a git
 * directory; gitdir gets that repository's git directory ("" when a .git
 * file there cannot be read).
 */
static int inside_repository(const char *root, char gitdir[PATH_MAX])
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", root);
	gitdir[0] = '\0';
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
		const char *dir = strcmp(buf, "/") ? buf : "";
		snprintf(p, sizeof p, "%s/.git", dir);
		if (lstat(p, &st) == 0) {
			char data[LR_PROTECT_GITFILE_MAX], target[PATH_MAX];
			size_t len;
			if (S_ISDIR(st.st_mode))
				snprintf(gitdir, PATH_MAX, "%.4000s", p);
			else if (read_small(p, data, sizeof data, &len) == 0 &&
				 lr_protect_gitfile(data, len, target, sizeof target) == 0)
				resolve_pointer(buf, target, gitdir) == 0 ? (void)0 : (void)(gitdir[0] = '\0');
			return 1;
		}
		int g = 1;
		static const char *const parts[] = { "HEAD", "objects", "refs" };
		for (int i = 0; i < 3 && g; i++) {
			snprintf(p, sizeof p, "%s/%s", dir, parts[i]);
			g = lstat(p, &st) == 0;
		}
		if (g) {
			snprintf(gitdir, PATH_MAX, "%s", buf);
			return 1;
		}
		if (strcmp(buf, "/") == 0)
			return 0;
	}
}

static int64_t coarse_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The old tree's node for root i (same path), or NONE. */
static uint32_t old_root(const struct lr_protect_tree *old, const char *root)
{
	for (size_t i = 0; old && i < old->nroots; i++)
		if (old->roots[i] != NONE && strcmp(node_name(old, old->roots[i]), root) == 0)
			return old->roots[i];
	return NONE;
}

/* Walks every root into a new tree (w->t), reusing w->old where it still holds. */
static int walk_roots(struct walker *w, const char *const *roots, size_t nroots, const int *outer)
{
	struct lr_protect_tree *t = calloc(1, sizeof *t);
	if (!t || !(t->roots = calloc(nroots ? nroots : 1, sizeof *t->roots)) ||
	    !(t->outer = calloc(nroots ? nroots : 1, sizeof *t->outer))) {
		lr_protect_tree_free(t);
		return -ENOMEM;
	}
	w->t = t;
	w->started = coarse_now();
	char path[PATH_MAX];
	int rc = 0;
	for (size_t i = 0; i < nroots && !rc; i++) {
		int fd = open(roots[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		t->outer[t->nroots] = outer[i];
		if (fd < 0) {
			t->roots[t->nroots++] = NONE;
			continue;
		}
		size_t before = t->n;
		snprintf(path, sizeof path, "%s", strcmp(roots[i], "/") ? roots[i] : "");
		rc = walk_dir(w, fd, NONE, roots[i], strlen(roots[i]), old_root(w->old, roots[i]), path,
			      strlen(path), 0, outer[i], 0, untrusted_fs(fd));
		t->roots[t->nroots++] = t->n > before ? (uint32_t)before : NONE;
	}
	free(w->stack);
	w->stack = NULL;
	w->slen = w->scap = 0;
	return rc;
}

/* What the tree says, turned into the plan (the scan's second half). */
static int derive(struct scan *s, const struct lr_protect_tree *t, uint32_t i, char *path,
		  size_t plen)
{
	const struct node *n = &t->v[i];
	int rc = 0;
	if (n->dotgit) {
		char dir[PATH_MAX], dg[PATH_MAX];
		snprintf(dir, sizeof dir, "%s", plen ? path : "/");
		if (snprintf(dg, sizeof dg, "%s/.git", path) >= (int)sizeof dg)
			return refuse(s->err, "executor: a path in the writable roots is longer than %d "
				      "bytes", PATH_MAX);
		rc = strs_add(&s->p->dotgits, &s->p->ndotgits, &s->p->dcap, dg);
		if (!rc)
			rc = strs_add(&s->p->zones, &s->p->nzones, &s->p->zcap, dir);
		if (!rc && n->dotgit == DT_LNK && root_of(s, dg) && !granted(s, dg, dg))
			rc = refuse(s->err, "executor: '%s' is a symbolic link, which a command could "
				    "repoint; make it a directory or a .git file (gitdir: ...), or grant "
				    "writes to it", dg);
		else if (!rc && n->dotgit == DT_REG)
			rc = gitfile(s, dir, dg);
		else if (!rc && n->dotgit == DT_DIR)
			rc = protect_gitdir(s, dg, 0);
		/* the names at the top of a repository below a writable root: watched */
		const char *r = root_of(s, dir);
		if (!rc && !(r && strcmp(r, dir) == 0))
			rc = protect_names(s, dir, 0);
	}
	if (!rc && (n->flags & F_GITDIR)) {
		rc = protect_gitdir(s, path, 0);
		if (!rc)
			rc = open_module(s, path);
		if (!rc)
			rc = protect_worktrees(s, path);
	}
	for (uint32_t c = n->first; c != NONE && !rc; c = t->v[c].next) {
		size_t k = t->v[c].len;
		if (plen + 1 + k >= PATH_MAX)
			continue;
		path[plen] = '/';
		memcpy(path + plen + 1, node_name(t, c), k + 1);
		rc = derive(s, t, c, path, plen + 1 + k);
		path[plen] = '\0';
	}
	return rc;
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
	lr_protect_tree_free(p->tree);
	memset(p, 0, sizeof *p);
}

int lr_protect_scan(const char *const *roots, size_t nroots, const struct lr_protect_opts *o,
		    struct lr_protect_plan *plan, struct lr_err *err)
{
	memset(plan, 0, sizeof *plan);
	lr_err_clear(err);
	struct scan s = { .o = o, .p = plan, .roots = roots, .nroots = nroots, .err = err,
			  .max = o->max_entries ? o->max_entries : LR_PROTECT_MAX_ENTRIES };
	/* a root inside another root is walked with it */
	const char **top = calloc(nroots ? nroots : 1, sizeof *top);
	int *outer = calloc(nroots ? nroots : 1, sizeof *outer);
	struct walker *w = calloc(1, sizeof *w);
	int rc = top && outer && w ? 0 : -ENOMEM;
	size_t ntop = 0;
	for (size_t i = 0; i < nroots && !rc; i++) {
		int nested = 0;
		for (size_t j = 0; j < nroots; j++)
			nested |= j != i && within(roots[i], roots[j]) && strcmp(roots[i], roots[j]) != 0;
		for (size_t j = 0; j < ntop; j++)
			nested |= strcmp(top[j], roots[i]) == 0;
		if (nested)
			continue;
		char og[PATH_MAX];
		outer[ntop] = inside_repository(roots[i], og);
		if (outer[ntop])
			rc = strs_add(&plan->zones, &plan->nzones, &plan->zcap, roots[i]);
		if (!rc && outer[ntop] && og[0]) { /* what its config includes from the root */
			char cp[PATH_MAX + 8];
			snprintf(cp, sizeof cp, "%s/config", og);
			rc = protect_config(&s, og, cp, 0);
		}
		if (!rc)
			rc = protect_names(&s, roots[i], 1);
		top[ntop++] = roots[i];
	}
	if (!rc) {
		*w = (struct walker){ .old = o->cache, .max = s.max, .err = err };
		rc = walk_roots(w, top, ntop, outer);
		plan->tree = w->t;
		plan->entries = w->entries;
		plan->dirs_read = w->read;
	}
	char path[PATH_MAX];
	for (size_t i = 0; !rc && plan->tree && i < plan->tree->nroots; i++) {
		uint32_t r = plan->tree->roots[i];
		if (r == NONE)
			continue;
		snprintf(path, sizeof path, "%s", strcmp(top[i], "/") ? top[i] : "");
		rc = derive(&s, plan->tree, r, path, strlen(path));
	}
	free(top);
	free(outer);
	free(w);
	if (!rc && plan->ngitdirs)
		qsort(plan->gitdirs, plan->ngitdirs, sizeof *plan->gitdirs, by_str);
	if (!rc && plan->ndotgits)
		qsort(plan->dotgits, plan->ndotgits, sizeof *plan->dotgits, by_str);
	if (rc) {
		if (!err->msg[0])
			lr_err_set(err, "executor: the protected-path walk: %s", lr_strerror(rc));
		lr_protect_plan_release(plan);
	}
	return rc;
}

struct lr_protect_tree *lr_protect_plan_take_tree(struct lr_protect_plan *p)
{
	struct lr_protect_tree *t = p->tree;
	p->tree = NULL;
	return t;
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

/*
 * The spare: empty placeholder directories kept between runs, so that a
 * run renames one into place and back (two renames) instead of mkdir,
 * chmod and rmdir. Making and removing a directory allocates and frees an
 * inode and a block; on this ext4 a placeholder made, held and removed
 * costs ~185 us, lent and given back ~27 us (a run of the default names
 * holds 8).
 *
 * Where: "spare" in the user's runtime directory (lr__sbx_runtime_dir:
 * root's /run/luarig, or $XDG_RUNTIME_DIR/luarig, or /tmp/luarig-UID), so
 * one per user. Only a spare on the same file system as a placeholder can
 * lend it (rename); elsewhere placeholders are made and removed as before.
 *
 * Why another user cannot plant something through it: the runtime
 * directory and the spare are opened with O_NOFOLLOW and used only when
 * they are directories owned by our euid with no group or other bits (the
 * spare: 0700 exactly), so nobody else can add, rename or replace an entry
 * (a planted or foreign-owned one, or a link, is refused and never written
 * to: placeholders are then made as before). All later use goes through the
 * spare's fd (openat, renameat2), never its path, so renaming the path away
 * and planting another directory there changes nothing for this process.
 *
 * Why a confined command of ours cannot either: tier A views mount a
 * private tmpfs on /tmp and /run, so the spare is out of reach unless a
 * writable root is one of its parents below them (a workspace of /run or
 * /tmp itself). Against that, an entry is lent only after its fd shows an
 * empty directory of mode 0555 owned by our euid, and after the rename the
 * inode at the placeholder's path must be that one and still empty;
 * anything else that arrived there (an entry swapped in under the name) is
 * renamed back out of the workspace at once, under a name never lent, and
 * the placeholder is made afresh. An entry is given back only when it is
 * still an empty 0555 directory no run holds (so what a command of another
 * run put at its path between our check and the rename can reach the spare,
 * as rmdir would have removed an empty directory put there, but is never
 * lent). Renames use RENAME_NOREPLACE: a name that appeared meanwhile is
 * never replaced. Files (git's placeholders) are not lent: their bytes
 * differ.
 */
#define SPARE_NAMES 64

static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static int spare_fd = -1;
static int spare_tried;
static dev_t spare_dev;
static unsigned spare_next;
const char *lr__protect_spare_parent;
void (*lr__protect_spare_hook)(const char *name);

void lr__protect_spare_reset(void)
{
	pthread_mutex_lock(&spare_lock);
	if (spare_fd >= 0)
		close(spare_fd);
	spare_fd = -1;
	spare_tried = 0;
	pthread_mutex_unlock(&spare_lock);
}

/* Whether fd is a directory holding nothing (reads it from its start). */
static int dir_empty(int fd)
{
	char buf[512];
	if (lseek(fd, 0, SEEK_SET) < 0)
		return 0;
	long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
	for (long off = 0; n > 0 && off < n;) {
		unsigned short reclen;
		memcpy(&reclen, buf + off + 16, sizeof reclen);
		const char *name = buf + off + 19;
		if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
			return 0;
		off += reclen;
	}
	return n >= 0;
}

/* An empty 0555 directory of ours: what a placeholder directory is when lent or given back. */
static int spare_worthy(int fd, struct stat *st)
{
	return fstat(fd, st) == 0 && S_ISDIR(st->st_mode) && (st->st_mode & 07777) == PH_DIR_MODE &&
	       st->st_uid == geteuid() && st->st_nlink == 2 && dir_empty(fd);
}

/* The spare directory's fd (a dup the caller closes), or -1: none usable. */
static int spare_get(dev_t *dev)
{
	pthread_mutex_lock(&spare_lock);
	if (!spare_tried) {
		spare_tried = 1;
		char name[64];
		struct stat st;
		int base = -1;
		if (lr__protect_spare_parent) {
			base = open(lr__protect_spare_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			snprintf(name, sizeof name, "luarig-spare-%lu", (unsigned long)geteuid());
		} else {
			base = lr__sbx_runtime_dir();
			snprintf(name, sizeof name, "spare");
		}
		if (base >= 0) {
			if (mkdirat(base, name, 0700) == 0)
				(void)fchmodat(base, name, 0700, 0); /* against the umask */
			int fd = openat(base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
			    (st.st_mode & 07777) == 0700) {
				spare_fd = fd;
				spare_dev = st.st_dev;
			} else if (fd >= 0) {
				close(fd); /* planted, another user's, or open to others: not used */
			}
			close(base);
		}
	}
	int fd = spare_fd >= 0 ? fcntl(spare_fd, F_DUPFD_CLOEXEC, 0) : -1;
	*dev = spare_dev;
	pthread_mutex_unlock(&spare_lock);
	return fd;
}

/* The spare's entry names (d0 ... d63) as read once per lr_protect_place; next: the first not tried. */
struct spare_list {
	unsigned char k[SPARE_NAMES];
	int n, next;
};

static void spare_list(int sfd, struct spare_list *l)
{
	l->n = l->next = 0;
	int lfd = openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lfd < 0)
		return;
	char buf[4096];
	long n = syscall(SYS_getdents64, lfd, buf, sizeof buf);
	close(lfd);
	for (long off = 0; n > 0 && off < n && l->n < SPARE_NAMES;) {
		unsigned short reclen;
		memcpy(&reclen, buf + off + 16, sizeof reclen);
		const char *name = buf + off + 19;
		off += reclen;
		char *end;
		unsigned long k = name[0] == 'd' && isdigit((unsigned char)name[1]) ? strtoul(name + 1, &end, 10) : SPARE_NAMES;
		if (k < SPARE_NAMES && *end == '\0')
			l->k[l->n++] = (unsigned char)k;
	}
}

/*
 * Lends a spare directory at path: its fd (holding the placed inode), -1
 * (none lent; make one), or -2 (something unchecked arrived at path and
 * could not be moved out: refuse). *xdev is set when the spare is on another file
 * system than path's parent, so the caller stops asking in this run.
 */
static int spare_lend(int sfd, struct spare_list *l, const char *path, int *xdev)
{
	while (l->next < l->n) {
		char name[16];
		snprintf(name, sizeof name, "d%u", (unsigned)l->k[l->next++]);
		int fd = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (fd < 0)
			continue; /* lent meanwhile to another run */
		if (!spare_worthy(fd, &st)) {
			close(fd); /* not one we gave back: left alone */
			continue;
		}
		if (lr__protect_spare_hook)
			lr__protect_spare_hook(name);
		if (renameat2(sfd, name, AT_FDCWD, path, RENAME_NOREPLACE) == 0) {
			struct stat now;
			if (lstat(path, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino &&
			    spare_worthy(fd, &st))
				return fd;
			/* not what was checked (swapped in under the name, or written into): out again */
			close(fd);
			char away[32];
			int out = -1;
			for (int k = 0; k < 8 && out; k++) {
				snprintf(away, sizeof away, "x%ld.%d.%d", (long)getpid(), l->next, k);
				out = renameat2(AT_FDCWD, path, sfd, away, RENAME_NOREPLACE);
			}
			if (out && rmdir(path) < 0 && errno != ENOENT)
				return -2; /* still there: the caller refuses the run */
			return -1;
		}
		int e = errno;
		close(fd);
		if (e == EXDEV)
			*xdev = 1;
		if (e != ENOENT) {
			l->next--; /* still there: another path may take it */
			return -1; /* EEXIST: something is there now; the caller opens it */
		}
	}
	return -1;
}

/* Gives a held, emptied placeholder directory back to the spare: 0, or -1 (remove it instead). */
static int spare_give(const struct held *x)
{
	dev_t dev;
	int sfd = spare_get(&dev);
	struct stat st;
	int rc = -1;
	if (sfd < 0)
		return -1;
	if (dev == x->dev && spare_worthy(x->fd, &st) && st.st_ino == x->ino) {
		for (int tries = 0; tries < 4 && rc; tries++) {
			pthread_mutex_lock(&spare_lock);
			unsigned k = spare_next++ % SPARE_NAMES;
			pthread_mutex_unlock(&spare_lock);
			char name[16];
			snprintf(name, sizeof name, "d%u", k);
			if (renameat2(AT_FDCWD, x->path, sfd, name, RENAME_NOREPLACE) == 0)
				rc = 0;
			else if (errno != EEXIST)
				break;
		}
	}
	close(sfd);
	return rc;
}

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
		     struct lr_err *err)
{
	*out = NULL;
	struct lr_protect_hold *h = calloc(1, sizeof *h);
	size_t want = 0;
	for (size_t i = 0; i < p->nitems; i++)
		want += p->items[i].kind != LR_PROTECT_RO;
	if (!h || (want && !(h->v = calloc(want, sizeof *h->v)))) {
		free(h);
		lr_err_set(err, "executor: out of memory");
		return -ENOMEM;
	}
	int rc = 0;
	dev_t sdev;
	int sfd = -1, xdev = 0;
	struct spare_list sl = { .n = 0 };
	for (size_t i = 0; i < p->nitems && !rc; i++) {
		const struct lr_protect_item *it = &p->items[i];
		if (it->kind == LR_PROTECT_RO)
			continue;
		int dir = it->kind == LR_PROTECT_DIR;
		int tries = 0;
		for (;;) {
			int fd = -1;
			if (dir && !xdev && tries == 0) {
				if (sfd < 0 && (sfd = spare_get(&sdev)) >= 0)
					spare_list(sfd, &sl);
				if (sfd >= 0)
					fd = spare_lend(sfd, &sl, it->path, &xdev);
				if (fd == -2) {
					rc = refuse(err, "executor: '%s' changed while a spare placeholder was "
						    "put there and cannot be moved out", it->path);
					break;
				}
			}
			if (fd < 0 && (rc = make_placeholder(it)) != 0) {
				lr_err_set(err, "executor: cannot make the placeholder '%s' "
					 "that holds a protected path: %s", it->path, lr_strerror(rc));
				break;
			}
			if (fd < 0)
				fd = open(it->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
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
	if (sfd >= 0)
		close(sfd);
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
				if (spare_give(x) != 0)
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
	struct lr_err *err;
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
		lr_err_set(a->err, "executor: cannot move '%s/%s' aside: %s", dir, name,
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

/*
 * A directory read again after the run, inside a repository that existed
 * before it (and outside any git directory): a .git or a git directory that
 * the last walk did not see there is moved aside.
 */
static void after_saw(struct walker *w, int fd, uint32_t me, uint32_t old, const char *path,
		      int in_zone, int in_git)
{
	struct after *a = w->a;
	struct node *n = &w->t->v[me];
	const struct node *o = old != NONE ? &w->old->v[old] : NULL;
	if (!in_zone || in_git)
		return;
	if (n->dotgit && !(o && o->dotgit)) {
		char dg[PATH_MAX];
		if (snprintf(dg, sizeof dg, "%s/.git", path) < (int)sizeof dg && !granted_path(a, dg) &&
		    quarantine(a, fd, path, ".git", "a .git the command made inside a repository, which "
			       "git on the host would enter (its config and hooks run as you)") == 0)
			w->t->v[me].dotgit = 0;
	}
	n = &w->t->v[me];
	if ((n->flags & F_GITDIR) && !(o && (o->flags & F_GITDIR)) &&
	    quarantine(a, fd, path, "HEAD", "a repository the command made inside a repository "
		       "(HEAD, objects, refs), which git run in that directory on the host would use") == 0)
		w->t->v[me].flags &= (uint8_t)~F_GITDIR;
}

int lr_protect_after(struct lr_protect_plan *p, const struct lr_protect_opts *o,
		     struct lr_buf *moved, struct lr_err *err)
{
	lr_err_clear(err);
	struct after a = { .p = p, .o = o, .moved = moved, .err = err };
	size_t max = o->max_entries ? o->max_entries : LR_PROTECT_MAX_ENTRIES;
	const struct lr_protect_tree *old = p->tree;
	if (old && old->nroots) {
		struct walker *w = calloc(1, sizeof *w);
		const char **roots = calloc(old->nroots, sizeof *roots);
		if (!w || !roots) {
			free(w);
			free(roots);
			lr_err_set(err, "executor: the check after the run: out of memory");
			return -ENOMEM;
		}
		size_t nr = 0;
		int *outer = calloc(old->nroots, sizeof *outer);
		for (size_t i = 0; outer && i < old->nroots; i++) {
			if (old->roots[i] == NONE)
				continue;
			outer[nr] = old->outer[i];
			roots[nr++] = node_name(old, old->roots[i]);
		}
		*w = (struct walker){ .old = old, .max = max * 4, .err = err, .a = &a };
		int rc = outer ? walk_roots(w, roots, nr, outer) : -ENOMEM;
		if (rc == LR_ETOOBIG && !a.rc) {
			a.rc = LR_ETOOBIG;
			lr_err_set(err, "executor: the check after the run stopped after %zu "
				 "entries: a repository made in the writable roots may be left", max * 4);
		} else if (rc && !a.rc) {
			a.rc = rc;
			lr_err_set(err, "executor: the check after the run: %s", lr_strerror(rc));
		}
		p->dirs_read = w->read;
		/* the new tree is what the next run may reuse */
		if (!rc) {
			lr_protect_tree_free(p->tree);
			p->tree = w->t;
		} else {
			lr_protect_tree_free(w->t);
			lr_protect_tree_free(p->tree);
			p->tree = NULL;
		}
		free(roots);
		free(outer);
		free(w);
	}
	char path[PATH_MAX];
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
		close(fd); /* (that directory's ctime moved: the next walk reads it again) */
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

struct incl {
	const char *target;
	char base[PATH_MAX];
	int depth, hit;
};

static void incl_key(void *arg, enum lr_protect_key key, const char *value);

/* 1 when the config file at file (or one it includes) includes target. */
static int includes(const char *file, const char *target, int depth)
{
	char *buf = malloc(1 << 20);
	size_t len = 0;
	if (!buf)
		return 0;
	struct incl in = { .target = target, .depth = depth };
	if (read_small(file, buf, 1 << 20, &len) == 0) {
		snprintf(in.base, sizeof in.base, "%s", file);
		char *slash = strrchr(in.base, '/');
		if (slash)
			*slash = '\0';
		lr_protect_config_paths(buf, len, incl_key, &in);
	}
	free(buf);
	return in.hit;
}

static void incl_key(void *arg, enum lr_protect_key key, const char *value)
{
	struct incl *in = arg;
	char joined[PATH_MAX], path[PATH_MAX];
	if (in->hit || key != LR_PROTECT_INCLUDE || value[0] == '~')
		return;
	if (value[0] == '/')
		snprintf(joined, sizeof joined, "%s", value);
	else if (snprintf(joined, sizeof joined, "%s/%s", in->base, value) >= (int)sizeof joined)
		return;
	if (fold(joined, path) != 0)
		return;
	if (strcmp(path, in->target) == 0)
		in->hit = 1;
	else if (in->depth < 8)
		in->hit = includes(path, in->target, in->depth + 1);
}

int lr_protect_path(const char *root, const char *rel, const struct lr_protect_opts *o,
		    struct lr_err *why)
{
	lr_err_clear(why);
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
			lr_err_set(why, "%s '%s', which git on the host reads (a git "
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
			lr_err_set(why, "it is inside '%s', a git directory (git on the host "
				   "runs its config and hooks as you)", pre);
			rc = 1;
			break;
		}
		struct stat st;
		int project = i == 0 || fstatat(dfd, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0;
		if (fstatat(dfd, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
			/* a config file this repository's config includes */
			char cfgfile[PATH_MAX], target[PATH_MAX], joined[PATH_MAX];
			const char *dirrel = i == 0 ? "" : pre;
			snprintf(cfgfile, sizeof cfgfile, "%s%s%s/.git/config", root, i ? "/" : "", dirrel);
			if (snprintf(joined, sizeof joined, "%s/%s", root, rel) < (int)sizeof joined &&
			    fold(joined, target) == 0 && includes(cfgfile, target, 0)) {
				lr_err_set(why, "the config of the repository at '%s' includes it "
					   "(git on the host reads it as that repository's config)",
					   i == 0 ? "." : pre);
				rc = 1;
				break;
			}
		}
		for (int pass = 0; project && pass < 2 && !rc; pass++) {
			const char *const *v = pass ? o->names : lr_protect_default_names;
			size_t nv = pass ? o->nnames : SIZE_MAX;
			for (size_t k = 0; k < nv && v && v[k] && !rc; k++)
				if (starts_with_name(c, n, i, v[k])) {
					lr_err_set(why, "'%s' at the top of %s is on the protected "
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
					lr_err_set(why, "a HEAD beside objects/ and refs/ makes a "
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
