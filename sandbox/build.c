/*
 * build.c — the spec of one confined run: a profile, the machine's caps,
 * a request and the executor's dirs and grants (lr_exec_ctx) become an
 * lr_sbx_spec, the mount view, Landlock rules, scrubbed environment,
 * resolved argv[0] and limits that the helper (helper.c) sets up.
 *
 * Pure mapping of sandbox types: files are only looked at (stat, a bounded
 * walk for protected paths and for /etc's private files, the PATH search),
 * apart from the resolv.conf written into the executor's TMPDIR with a
 * proxy, so it is unit-tested directly. host/executor.c seals what it
 * builds and runs the helper on the loop.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/landlock.h>

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

extern char **environ;

/* Rights for read-only roots and for writable ones (the helper masks them by the kernel's ABI). */
#define ACC_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define ACC_EXEC LANDLOCK_ACCESS_FS_EXECUTE
#define ACC_WRITE                                                                          \
	(LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |                   \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |                    \
	 LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |                      \
	 LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SYM |                      \
	 LANDLOCK_ACCESS_FS_REFER | LANDLOCK_ACCESS_FS_TRUNCATE)

static const char *const host_roots[] = { "/usr", "/bin", "/sbin", "/lib", "/lib32",
					  "/lib64", "/libx32", "/etc", "/opt", "/srv", NULL };
static const char *const env_allow[] = { "PATH", "LANG", "TERM", "TZ", "USER",
					 "LOGNAME", "SHELL", NULL };
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

/* 1 when path is root or below it (both canonical, absolute). */
static int path_within(const char *path, const char *root)
{
	size_t n = strlen(root);
	if (n == 1 && root[0] == '/')
		return path[0] == '/';
	return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- the spec under construction ---- */

struct build {
	struct lr_sbx_spec *s;
	size_t mcap, rcap, rocap;
	struct lr_strv writable; /* canonical writable roots, for the protected walk */
	const struct lr_exec_ctx *ctx;
	const struct lr_sbx_caps *caps;
	struct lr_err *err;
};

/* Adds a bind (same path inside) and its Landlock rule; a later bind of the same path wins. */
static int add_root(struct build *b, const char *path, int writable, int exec)
{
	struct lr_sbx_spec *s = b->s;
	if (lr_grow((void **)&s->mounts, &b->mcap, s->nmounts, sizeof *s->mounts) < 0 ||
	    lr_grow((void **)&s->rules, &b->rcap, s->nrules, sizeof *s->rules) < 0)
		return -ENOMEM;
	char *src = strdup(path), *dst = strdup(path), *rp = strdup(path);
	if (!src || !dst || !rp) {
		free(src);
		free(dst);
		free(rp);
		return -ENOMEM;
	}
	s->mounts[s->nmounts++] = (struct lr_sbx_mount){ .src = src, .dst = dst, .writable = writable };
	uint64_t acc = ACC_READ | (exec ? ACC_EXEC : 0) | (writable ? ACC_WRITE : 0);
	s->rules[s->nrules++] = (struct lr_sbx_path_rule){ .path = rp, .access = acc };
	if (writable)
		return lr_strv_add(&b->writable, strdup(path));
	return 0;
}

/*
 * Root's secrets in a read-only host root. The target runs with the real
 * uid mapped, so when luarig runs as root it owns /etc/shadow and every
 * other root-only file of the roots it is given; capabilities are dropped
 * but ownership is not. So the view shows /etc as others see it: each
 * regular file there that others may not read (/etc/shadow, /etc/gshadow,
 * ssh host keys, sudoers, ...) gets /dev/null bound over it, and each
 * directory others may not search (/etc/ssl/private, polkit rules) is
 * covered whole by an empty read-only tmpfs (the spec says "src /dev/null"
 * for both; the helper picks by what dst is). A walk of /etc only: other
 * host roots hold programs and libraries, not secrets.
 *
 * The walk is dirfd-relative (no path is resolved twice) and trusts d_type
 * to skip symlinks without a stat (most of /etc: alternatives, rc.d);
 * DT_UNKNOWN gets an fstatat. It fails closed: a directory at the depth
 * limit is masked whole rather than left unchecked, and more than
 * MASK_MAX masks refuses the run instead of leaving the rest readable.
 */
#define MASK_MAX 128 /* the spec holds at most LR_SBX_MAX_MOUNTS (256) binds */
#define MASK_DEPTH 8

static int add_mask(struct build *b, const char *path)
{
	struct lr_sbx_spec *s = b->s;
	if (lr_grow((void **)&s->mounts, &b->mcap, s->nmounts, sizeof *s->mounts) < 0)
		return -ENOMEM;
	char *src = strdup("/dev/null"), *dst = strdup(path);
	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	s->mounts[s->nmounts++] = (struct lr_sbx_mount){ .src = src, .dst = dst, .writable = 0 };
	return 0;
}

static int mask_private(struct build *b, int dfd, char *path, size_t plen, int depth, int *left)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		unsigned char t = e->d_type;
		if (t != DT_REG && t != DT_DIR && t != DT_UNKNOWN)
			continue; /* symlinks, devices, fifos, sockets: nothing to read through */
		size_t n = strlen(e->d_name);
		if (plen + 1 + n >= PATH_MAX)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		int mask = 0, descend = 0;
		if (S_ISREG(st.st_mode))
			mask = !(st.st_mode & S_IROTH);
		else if (S_ISDIR(st.st_mode)) {
			mask = !(st.st_mode & S_IXOTH) || depth + 1 >= MASK_DEPTH;
			descend = !mask;
		}
		if (!mask && !descend)
			continue;
		path[plen] = '/';
		memcpy(path + plen + 1, e->d_name, n + 1);
		if (mask) {
			if (--*left < 0)
				rc = -E2BIG;
			else
				rc = add_mask(b, path);
		} else {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				rc = mask_private(b, sub, path, plen + 1 + n, depth + 1, left);
		}
		path[plen] = '\0';
	}
	closedir(d);
	return rc;
}

/*
 * With the proxy, names resolve through the DNS stub on the sandbox's own
 * loopback: a resolv.conf saying so (written into the executor's TMPDIR)
 * is bound over /etc/resolv.conf when that is a plain file in the view.
 */
static int in_view(const struct lr_sbx_spec *s, const char *path);

static int point_resolver(struct build *b, const struct lr_exec_ctx *ctx)
{
	struct stat st;
	if (!ctx->tmpdir || lstat("/etc/resolv.conf", &st) < 0 || !S_ISREG(st.st_mode) ||
	    !in_view(b->s, "/etc/resolv.conf"))
		return 0;
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/.resolv.conf", ctx->tmpdir) >= (int)sizeof path)
		return -ENAMETOOLONG;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	static const char text[] = "# luarig sandbox: the egress proxy's DNS stub\nnameserver 127.0.0.1\n";
	ssize_t w = write(fd, text, sizeof text - 1);
	close(fd);
	if (w != (ssize_t)(sizeof text - 1))
		return -EIO;
	struct lr_sbx_spec *s = b->s;
	if (lr_grow((void **)&s->mounts, &b->mcap, s->nmounts, sizeof *s->mounts) < 0)
		return -ENOMEM;
	char *src = strdup(path), *dst = strdup("/etc/resolv.conf");
	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	s->mounts[s->nmounts++] = (struct lr_sbx_mount){ .src = src, .dst = dst, .writable = 0 };
	return 0;
}

/* A Landlock rule without a bind (the helper's own /dev, /proc, /tmp). */
static int add_rule(struct build *b, const char *path, uint64_t acc)
{
	struct lr_sbx_spec *s = b->s;
	if (lr_grow((void **)&s->rules, &b->rcap, s->nrules, sizeof *s->rules) < 0)
		return -ENOMEM;
	char *rp = strdup(path);
	if (!rp)
		return -ENOMEM;
	s->rules[s->nrules++] = (struct lr_sbx_path_rule){ .path = rp, .access = acc };
	return 0;
}

static int granted(const char *const *list, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i], path) == 0)
			return 1;
	return 0;
}

/*
 * Files the host interprets later (sandbox/protect.c): the writable roots a
 * command may leave such files in are the workspace, extra roots and
 * granted paths; not the host's own roots (a profile that writes /usr has
 * given that up) nor the executor's scratch HOME and TMPDIR (nothing on the
 * host reads them). The plan becomes binds (pins, read-only directories)
 * and read-only paths of the spec; its placeholders are made at launch.
 */
static const char *env_get(char *const *env, const char *name);

static int is_host_root(const char *path)
{
	for (int i = 0; host_roots[i]; i++)
		if (strcmp(path, host_roots[i]) == 0)
			return 1;
	return 0;
}

static int apply_plan(struct build *b, const struct lr_protect_plan *plan)
{
	struct lr_sbx_spec *s = b->s;
	for (size_t i = 0; i < plan->nbinds; i++) {
		const struct lr_protect_bind *pb = &plan->binds[i];
		int have = 0;
		for (size_t j = 0; j < s->nmounts && !have; j++)
			have = strcmp(s->mounts[j].dst, pb->path) == 0;
		if (have)
			continue;
		if (lr_grow((void **)&s->mounts, &b->mcap, s->nmounts, sizeof *s->mounts) < 0)
			return -ENOMEM;
		char *src = strdup(pb->path), *dst = strdup(pb->path);
		if (!src || !dst) {
			free(src);
			free(dst);
			return -ENOMEM;
		}
		s->mounts[s->nmounts++] = (struct lr_sbx_mount){ .src = src, .dst = dst,
								 .writable = pb->writable };
	}
	for (size_t i = 0; i < plan->nitems; i++) {
		if (lr_grow((void **)&s->readonly, &b->rocap, s->nreadonly, sizeof *s->readonly) < 0)
			return -ENOMEM;
		if (!(s->readonly[s->nreadonly] = strdup(plan->items[i].path)))
			return -ENOMEM;
		s->nreadonly++;
	}
	/* a few binds of the helper's own (/dev nodes, /tmp, /run, /proc) come on top */
	if (s->nmounts + 16 > LR_SBX_MAX_MOUNTS || s->nreadonly > LR_SBX_MAX_RULES) {
		lr_err_set(b->err, "executor: keeping the workspace's git directories and protected names "
		       "as they are needs %zu binds and %zu read-only paths, more than the sandbox's %d "
		       "and %d (too many repositories in the writable roots): refusing rather than "
		       "leaving some unprotected", s->nmounts, s->nreadonly, LR_SBX_MAX_MOUNTS - 16,
			   LR_SBX_MAX_RULES);
		return LR_EREFUSED;
	}
	return 0;
}

static int protect_roots(struct build *b, const struct lr_profile *p)
{
	const struct lr_exec_ctx *ctx = b->ctx;
	const char **roots = calloc(b->writable.n + 1, sizeof *roots);
	if (!roots)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < b->writable.n; i++) {
		const char *w = b->writable.v[i];
		if (is_host_root(w) || (ctx->home && strcmp(w, ctx->home) == 0) ||
		    (ctx->tmpdir && strcmp(w, ctx->tmpdir) == 0))
			continue;
		if (p->home == LR_HOME_REAL && p->host_write == LR_CAP_ALLOW &&
		    !(p->workspace_root && strcmp(w, p->workspace_root) == 0) &&
		    !granted(ctx->granted_write, ctx->ngranted_write, w)) {
			/* the real home, writable with the host: not a workspace */
			const char *h = env_get(ctx->host_env ? ctx->host_env : environ, "HOME");
			char real[PATH_MAX];
			if (h && realpath(h, real) && strcmp(real, w) == 0)
				continue;
		}
		roots[n++] = w;
	}
	int rc = 0;
	if (n && (!b->caps || b->caps->tier != LR_TIER_A)) {
		lr_err_set(b->err, "executor: '%s' is writable for this run, but without a mount namespace "
			   "the git directories and protected names in it cannot be kept read-only "
			   "(protected_files is not enforced on this machine)", roots[0]);
		rc = LR_EREFUSED;
	}
	struct lr_protect_plan plan;
	struct lr_protect_opts o = {
		.names = (const char *const *)p->protect_names,
		.nnames = p->nprotect_names,
		.git_readonly = p->git_readonly,
		.max_entries = p->protect_max_entries,
		.granted = ctx->granted_write,
		.ngranted = ctx->ngranted_write,
		.cache = ctx->protect_cache,
	};
	struct lr_err perr = { "" };
	if (!rc && n) {
		rc = lr_protect_scan(roots, n, &o, &plan, &perr);
		if (rc)
			lr_err_set(b->err, "%s", perr.msg);
		else if ((rc = apply_plan(b, &plan)) != 0 || !ctx->plan)
			lr_protect_plan_release(&plan);
		else
			*ctx->plan = plan;
	}
	free(roots);
	return rc;
}

/* ---- the environment ---- */

static int ends_with(const char *name, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);
	return n >= k && memcmp(name + n - k, suffix, k) == 0;
}

static int starts_with(const char *name, size_t n, const char *prefix)
{
	size_t k = strlen(prefix);
	return n >= k && memcmp(name, prefix, k) == 0;
}

/* Names that look like credentials: never inherited, only passed explicitly. */
static int secret_name(const char *name, size_t n)
{
	if (ends_with(name, n, "_TOKEN") || ends_with(name, n, "_KEY") ||
	    ends_with(name, n, "_SECRET") || starts_with(name, n, "AWS_") ||
	    starts_with(name, n, "GITHUB_") || starts_with(name, n, "OPENAI_") ||
	    starts_with(name, n, "ANTHROPIC_") || (n == 13 && memcmp(name, "SSH_AUTH_SOCK", 13) == 0))
		return 1;
	for (size_t i = 0; i + 8 <= n; i++)
		if (memcmp(name + i, "PASSWORD", 8) == 0)
			return 1;
	return 0;
}

static int allowed_name(const char *name, size_t n)
{
	if (starts_with(name, n, "LC_"))
		return 1;
	for (int i = 0; env_allow[i]; i++)
		if (strlen(env_allow[i]) == n && memcmp(env_allow[i], name, n) == 0)
			return 1;
	return 0;
}

static size_t name_len(const char *entry)
{
	const char *eq = strchr(entry, '=');
	return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* Removes NAME from the list (all occurrences). */
static void env_unset(struct lr_strv *env, const char *name, size_t n)
{
	size_t j = 0;
	for (size_t i = 0; i < env->n; i++) {
		if (name_len(env->v[i]) == n && memcmp(env->v[i], name, n) == 0 &&
		    env->v[i][n] == '=')
			free(env->v[i]);
		else
			env->v[j++] = env->v[i];
	}
	env->n = j;
	if (env->v)
		env->v[j] = NULL;
}

static int env_set(struct lr_strv *env, const char *name, const char *value)
{
	env_unset(env, name, strlen(name));
	return lr_strv_add(env, lr_asprintf("%s=%s", name, value));
}

static const char *env_get(char *const *env, const char *name)
{
	size_t n = strlen(name);
	for (; env && *env; env++)
		if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

/*
 * The child's environment: the allow-listed names from the host (never a
 * secret-looking one), then what the request passes explicitly, then the
 * forced HOME, TMPDIR and, with a proxy, the proxy variables.
 */
static int build_env(const struct lr_exec_request *r, const struct lr_exec_ctx *ctx,
		     const char *home, uint16_t proxy_port, struct lr_strv *env)
{
	int rc = 0;
	char *const *host = ctx->host_env ? ctx->host_env : environ;
	for (char *const *e = host; *e && !rc; e++) {
		size_t n = name_len(*e);
		if ((*e)[n] != '=' || !allowed_name(*e, n) || secret_name(*e, n))
			continue;
		env_unset(env, *e, n);
		rc = lr_strv_add(env, strdup(*e));
	}
	for (char *const *e = r->env; e && *e && !rc; e++) {
		size_t n = name_len(*e);
		if (n == 0)
			continue;
		env_unset(env, *e, n);
		if ((*e)[n] == '=')
			rc = lr_strv_add(env, strdup(*e));
	}
	if (rc)
		return rc;
	if (!env_get(env->v, "PATH") && (rc = env_set(env, "PATH", DEFAULT_PATH)))
		return rc;
	if ((rc = env_set(env, "HOME", home)) || (rc = env_set(env, "TMPDIR", ctx->tmpdir)))
		return rc;
	if (proxy_port) {
		char url[64];
		snprintf(url, sizeof url, "http://127.0.0.1:%u", (unsigned)proxy_port);
		static const char *const names[] = {
			"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
			"all_proxy", "npm_config_proxy", "npm_config_https_proxy", "PIP_PROXY", NULL
		};
		for (int i = 0; names[i] && !rc; i++)
			rc = env_set(env, names[i], url);
		if (!rc)
			rc = env_set(env, "NO_PROXY", "localhost,127.0.0.1");
		if (!rc)
			rc = env_set(env, "no_proxy", "localhost,127.0.0.1");
		if (!rc)
			rc = env_set(env, "NODE_USE_ENV_PROXY", "1");
	}
	if (!env->v)
		rc = lr_grow((void **)&env->v, &env->cap, 1, sizeof *env->v);
	if (!rc)
		env->v[env->n] = NULL;
	return rc;
}

/* ---- the command ---- */

int lr_sbx_command_line(const struct lr_exec_request *r, struct lr_buf *out)
{
	if (r->command)
		return lr_buf_addstr(out, r->command);
	int rc = 0;
	for (char *const *a = r->argv; a && *a && !rc; a++) {
		if (a != r->argv)
			rc = lr_buf_add(out, " ", 1);
		if (!rc)
			rc = lr_buf_addstr(out, *a);
	}
	return rc;
}

/* 1 when dir is visible in the view (inside a bind). */
static int in_view(const struct lr_sbx_spec *s, const char *path)
{
	for (size_t i = 0; i < s->nmounts; i++)
		if (path_within(path, s->mounts[i].dst))
			return 1;
	return 0;
}

/*
 * argv[0] as an absolute path: a name is searched in the view's PATH
 * (directories visible in the view only; unconfined: all of them), a
 * relative path is taken from cwd.
 */
static int resolve_argv0(const struct lr_sbx_spec *s, const char *name, const char *path_var,
			 const char *cwd, char **out, struct lr_err *err)
{
	if (strchr(name, '/')) {
		*out = name[0] == '/' ? strdup(name) : lr_asprintf("%s/%s", cwd, name);
		return *out ? 0 : -ENOMEM;
	}
	const char *p = path_var ? path_var : DEFAULT_PATH;
	while (*p) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		if (n > 0 && p[0] == '/') {
			char *cand = lr_asprintf("%.*s/%s", (int)n, p, name);
			if (!cand)
				return -ENOMEM;
			struct stat st;
			if ((s->unconfined || in_view(s, cand)) && stat(cand, &st) == 0 &&
			    S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
				*out = cand;
				return 0;
			}
			free(cand);
		}
		p += n;
		if (*p == ':')
			p++;
	}
	lr_err_set(err, "executor: command '%s' not found in the sandbox's PATH", name);
	return LR_ENOTFOUND;
}

/* ---- the spec ---- */

static int cap_open(enum lr_cap c, int grant)
{
	return c == LR_CAP_ALLOW || (c == LR_CAP_GATED && grant);
}

static int net_target_ok(const struct lr_profile *p, const struct lr_exec_ctx *ctx, const char *t)
{
	return p->network == LR_CAP_ALLOW ||
	       (p->network == LR_CAP_GATED && granted(ctx->granted_net, ctx->ngranted_net, t));
}

static int build_view(struct build *b, const struct lr_profile *p)
{
	const struct lr_exec_ctx *ctx = b->ctx;
	int rc = 0;
	if (p->host_read == LR_CAP_ALLOW) {
		for (int i = 0; host_roots[i] && !rc; i++) {
			/* A symlinked root (/bin -> usr/bin) is bound at its own path, as what it points at. */
			if (is_dir(host_roots[i]))
				rc = add_root(b, host_roots[i], p->host_write == LR_CAP_ALLOW, 1);
		}
		int left = MASK_MAX;
		/* As root, /etc as others see it: one idmapped mount when the helper
		   can make it (tier A, /etc read-only), else the walk's masks. */
		if (!rc && getuid() == 0 && b->caps && b->caps->tier == LR_TIER_A &&
		    b->caps->etc_idmap && p->host_write != LR_CAP_ALLOW) {
			b->s->etc_idmap = 1;
		} else if (!rc && getuid() == 0) {
			char path[PATH_MAX] = "/etc";
			int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0)
				rc = mask_private(b, fd, path, strlen(path), 0, &left);
			if (rc == -E2BIG)
				lr_err_set(b->err, "executor: more than %d files of /etc are private to root; "
					   "refusing rather than leaving some readable", MASK_MAX);
		}
	}
	for (size_t i = 0; i < p->nroots && !rc; i++) {
		const struct lr_sbx_root *x = &p->roots[i];
		int gw = granted(ctx->granted_write, ctx->ngranted_write, x->path);
		int gr = gw || granted(ctx->granted_read, ctx->ngranted_read, x->path);
		if (!is_dir(x->path))
			continue;
		if (cap_open(x->write, gw) && cap_open(x->read, 1))
			rc = add_root(b, x->path, 1, 1);
		else if (cap_open(x->read, gr))
			rc = add_root(b, x->path, 0, 1);
	}
	if (!rc && p->home == LR_HOME_REAL) {
		const char *h = env_get(ctx->host_env ? ctx->host_env : environ, "HOME");
		char real[PATH_MAX];
		if (h && realpath(h, real) && is_dir(real)) {
			if (cap_open(p->host_write, 0) && cap_open(p->host_read, 0))
				rc = add_root(b, real, 1, 1);
			else if (cap_open(p->host_read, 0))
				rc = add_root(b, real, 0, 1);
		}
	}
	if (!rc && p->workspace_root) {
		const char *ws = p->workspace_root;
		int gw = granted(ctx->granted_write, ctx->ngranted_write, ws);
		int gr = gw || granted(ctx->granted_read, ctx->ngranted_read, ws);
		if (cap_open(p->workspace_write, gw) && cap_open(p->workspace_read, 1))
			rc = add_root(b, ws, 1, 1);
		else if (cap_open(p->workspace_read, gr))
			rc = add_root(b, ws, 0, 1);
	}
	/* Granted paths not already covered as they were granted. */
	for (size_t i = 0; i < ctx->ngranted_read && !rc; i++) {
		const char *g = ctx->granted_read[i];
		if (!in_view(b->s, g))
			rc = add_root(b, g, 0, 1);
	}
	for (size_t i = 0; i < ctx->ngranted_write && !rc; i++) {
		const char *g = ctx->granted_write[i];
		int covered = 0;
		for (size_t j = 0; j < b->writable.n; j++)
			if (path_within(g, b->writable.v[j]))
				covered = 1;
		if (!covered)
			rc = add_root(b, g, 1, 1);
	}
	if (!rc && ctx->home && p->home == LR_HOME_ISOLATED)
		rc = add_root(b, ctx->home, 1, 1);
	if (!rc && ctx->tmpdir)
		rc = add_root(b, ctx->tmpdir, 1, 1);
	/* What the helper itself puts in the view: /dev, a fresh /proc, tmpfs /tmp. */
	if (!rc)
		rc = add_rule(b, "/dev", ACC_READ | LANDLOCK_ACCESS_FS_WRITE_FILE |
					   LANDLOCK_ACCESS_FS_IOCTL_DEV | LANDLOCK_ACCESS_FS_TRUNCATE);
	if (!rc)
		rc = add_rule(b, "/proc", ACC_READ);
	if (!rc)
		rc = add_rule(b, "/tmp", ACC_READ | ACC_WRITE);
	if (!rc)
		rc = protect_roots(b, p);
	return rc;
}

int lr_sbx_build_spec(const struct lr_profile *p, const struct lr_sbx_caps *caps,
			   const struct lr_exec_request *r, const struct lr_exec_ctx *ctx,
			   struct lr_sbx_spec *out, struct lr_err *err)
{
	memset(out, 0, sizeof *out);
	lr_err_clear(err);
	if ((!r->argv || !r->argv[0] || !r->argv[0][0]) && !r->command) {
		lr_err_set(err, "executor: the request needs argv or command");
		return -EINVAL;
	}
	if (p->command == LR_CAP_DENY || (p->command == LR_CAP_GATED && !ctx->command_granted)) {
		lr_err_set(err, "executor: running commands is %s by the profile%s",
			   p->command == LR_CAP_DENY ? "denied" : "gated",
			   p->command == LR_CAP_DENY ? "" : " and no grant was given");
		return LR_EREFUSED;
	}
	struct build b = { .s = out, .ctx = ctx, .caps = caps, .err = err };
	struct lr_strv env = { 0 }, argv = { 0 };
	int rc = 0;
	out->exec_id = ctx->exec_id;
	out->tier = caps ? caps->tier : LR_TIER_NONE;
	out->unconfined = p->isolation == LR_ISO_UNCONFINED;
	out->uid = getuid();
	out->gid = getgid();
	lr_sbx_default_limits(&out->limits);

	/* The network: none unless the profile or a grant opens the targets asked for. */
	int want_proxy = 0;
	if (out->unconfined) {
		out->net = LR_SBX_NET_HOST;
	} else if (r->network && r->network[0]) {
		for (char *const *t = r->network; *t; t++) {
			if (!net_target_ok(p, ctx, *t)) {
				lr_err_set(err, "executor: network target '%s' is %s", *t,
					   p->network == LR_CAP_DENY ? "denied by the profile"
					   : "gated and not granted");
				rc = LR_EREFUSED;
				goto fail;
			}
		}
		want_proxy = 1;
	} else if (!r->network && p->network == LR_CAP_ALLOW) {
		want_proxy = 1;
	}
	if (want_proxy) {
		if (!ctx->proxy_port) {
			lr_err_set(err, "executor: network access needs the egress proxy, which is not available");
			rc = LR_EUNAVAILABLE;
			goto fail;
		}
		out->net = LR_SBX_NET_PROXY;
		out->proxy_port = ctx->proxy_port;
		out->dns_port = ctx->dns_port;
	}

	if (!out->unconfined && (rc = build_view(&b, p)) != 0) {
		if (!err->msg[0])
			lr_err_set(err, "executor: cannot build the view: %s", lr_strerror(rc));
		goto fail;
	}
	if (out->net == LR_SBX_NET_PROXY && (rc = point_resolver(&b, ctx)) != 0) {
		lr_err_set(err, "executor: cannot point the resolver at the DNS stub: %s", lr_strerror(rc));
		goto fail;
	}

	/* cwd: absolute, or relative to the workspace; it must exist and be in the view. */
	const char *home = p->home == LR_HOME_REAL ? env_get(ctx->host_env ? ctx->host_env : environ, "HOME")
						    : ctx->home;
	if (!home)
		home = ctx->home ? ctx->home : "/";
	const char *base = p->workspace_root && (out->unconfined || in_view(out, p->workspace_root))
				   ? p->workspace_root
				   : home;
	char cwd[PATH_MAX];
	if (r->cwd) {
		char *joined = r->cwd[0] == '/' ? strdup(r->cwd) : lr_asprintf("%s/%s", base, r->cwd);
		if (!joined) {
			rc = -ENOMEM;
			goto fail;
		}
		char *ok = realpath(joined, cwd);
		if (!ok || !is_dir(cwd)) {
			lr_err_set(err, "executor: cannot use directory '%s': %s", r->cwd,
				   ok ? "not a directory" : strerror(errno));
			free(joined);
			rc = LR_ENOTFOUND;
			goto fail;
		}
		free(joined);
	} else {
		snprintf(cwd, sizeof cwd, "%s", base);
	}
	if (!out->unconfined && !in_view(out, cwd)) {
		lr_err_set(err, "executor: directory '%s' is outside the sandbox's view", cwd);
		rc = LR_EREFUSED;
		goto fail;
	}
	if (!(out->cwd = strdup(cwd))) {
		rc = -ENOMEM;
		goto fail;
	}

	if ((rc = build_env(r, ctx, home, out->net == LR_SBX_NET_PROXY ? out->proxy_port : 0, &env)) != 0)
		goto fail;

	/* argv: the command through /bin/sh -c, or the list with argv[0] resolved. */
	char *first = NULL;
	if (r->command) {
		if ((rc = lr_strv_add(&argv, strdup("/bin/sh"))) || (rc = lr_strv_add(&argv, strdup("-c"))) ||
		    (rc = lr_strv_add(&argv, strdup(r->command))))
			goto fail;
	} else {
		if ((rc = resolve_argv0(out, r->argv[0], env_get(env.v, "PATH"), cwd, &first, err)))
			goto fail;
		if ((rc = lr_strv_add(&argv, first)))
			goto fail;
		for (char *const *a = r->argv + 1; *a; a++)
			if ((rc = lr_strv_add(&argv, strdup(*a))))
				goto fail;
	}
	out->argv = argv.v;
	out->envp = env.v;
	if (caps && caps->cgroup && caps->cgroup_path[0] && !out->unconfined) {
		static unsigned long seq;
		out->cgroup = lr_asprintf("%s/luarig-%ld-%llu-%lu", caps->cgroup_path, (long)getpid(),
					(unsigned long long)ctx->exec_id, ++seq);
		if (!out->cgroup) {
			rc = -ENOMEM;
			out->argv = NULL;
			out->envp = NULL;
			goto fail;
		}
	}
	if (!out->unconfined) {
		/* compiled once per process; a host that cannot leaves it to the helper,
		   which then builds it or fails the run saying why */
		const unsigned char *bpf;
		size_t n;
		const char *why = "";
		if (lr__seccomp_bpf(out->tier == LR_TIER_A, &bpf, &n, &why) == 0 &&
		    (out->seccomp_bpf = malloc(n)) != NULL) {
			memcpy(out->seccomp_bpf, bpf, n);
			out->seccomp_len = n;
		}
	}
	lr_strv_release(&b.writable);
	return 0;
fail:
	if (!err->msg[0])
		lr_err_set(err, "executor: %s", lr_strerror(rc));
	if (ctx->plan)
		lr_protect_plan_release(ctx->plan);
	lr_strv_release(&b.writable);
	lr_strv_release(&env);
	lr_strv_release(&argv);
	out->argv = out->envp = NULL;
	lr_sbx_spec_release(out);
	memset(out, 0, sizeof *out);
	return rc;
}
