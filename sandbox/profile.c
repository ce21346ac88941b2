/*
 * profile.c — profiles: validation, the fingerprint grants are bound to,
 * the gate's access_for, and restrict (the intersection that never widens).
 *
 * A place is the workspace, an extra root or the host (everything else).
 * Roots never overlap the workspace but may nest inside each other: a path
 * takes the states of the longest root that contains it. restrict keeps
 * that rule exact: for every path, its state in the result is the lower of
 * its states in the two inputs (see restrict_roots).
 */
#include "sandbox.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const cap_names[] = { "deny", "gated", "allow" };

const char *lr_cap_name(enum lr_cap c)
{
	return (unsigned)c <= LR_CAP_ALLOW ? cap_names[c] : "invalid";
}

int lr_cap_parse(const char *s, enum lr_cap *out)
{
	for (int i = 0; s && i < 3; i++)
		if (strcmp(s, cap_names[i]) == 0) {
			*out = (enum lr_cap)i;
			return 0;
		}
	return -EINVAL;
}

void lr_profile_init(struct lr_profile *p)
{
	memset(p, 0, sizeof *p);
	p->workspace_read = LR_CAP_ALLOW;
	p->workspace_write = LR_CAP_GATED;
	p->host_read = LR_CAP_ALLOW;
	p->host_write = LR_CAP_DENY;
	p->network = LR_CAP_GATED;
	p->command = LR_CAP_GATED;
	p->delegate = LR_CAP_GATED;
	p->mcp = LR_CAP_GATED;
	p->home = LR_HOME_ISOLATED;
	p->isolation = LR_ISO_SANDBOXED;
}

/* ------------------------------------------------------------------ */
/* paths                                                                */

/* 1 when path is dir or below it (both canonical). */
static int path_inside(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Appends the components of tail to out (a canonical directory), folding "." and "..". */
static int fold_tail(char *out, size_t outlen, const char *tail)
{
	size_t len = strlen(out);
	while (*tail) {
		while (*tail == '/')
			tail++;
		const char *end = strchr(tail, '/');
		size_t n = end ? (size_t)(end - tail) : strlen(tail);
		if (n == 0)
			break;
		if (n == 1 && tail[0] == '.') {
			/* nothing */
		} else if (n == 2 && tail[0] == '.' && tail[1] == '.') {
			while (len > 1 && out[len - 1] != '/')
				len--;
			if (len > 1)
				len--;
			out[len] = '\0';
		} else {
			int slash = !(len == 1 && out[0] == '/');
			if (len + slash + n + 1 > outlen)
				return -ENAMETOOLONG;
			if (slash)
				out[len++] = '/';
			memcpy(out + len, tail, n);
			len += n;
			out[len] = '\0';
		}
		tail += n;
	}
	return 0;
}

int lr_profile_resolve(const struct lr_profile *p, const char *path, char *out, size_t outlen)
{
	char abs[PATH_MAX], real[PATH_MAX];
	if (!path || !*path)
		return -EINVAL;
	int n;
	if (path[0] == '/')
		n = snprintf(abs, sizeof abs, "%s", path);
	else if (p && p->workspace_root)
		n = snprintf(abs, sizeof abs, "%s/%s", p->workspace_root, path);
	else
		return -EINVAL;
	if (n < 0 || (size_t)n >= sizeof abs)
		return -ENAMETOOLONG;
	/* The longest prefix that exists is resolved by the kernel's rules
	 * (symlinks, ".."); what does not exist yet is folded lexically. */
	size_t cut = strlen(abs);
	for (;;) {
		char save = abs[cut];
		abs[cut] = '\0';
		const char *ok = realpath(cut ? abs : "/", real);
		abs[cut] = save;
		if (ok)
			break;
		if (errno != ENOENT && errno != ENOTDIR)
			return -errno;
		while (cut > 0 && abs[cut - 1] != '/')
			cut--;
		while (cut > 0 && abs[cut - 1] == '/')
			cut--;
	}
	if (strlen(real) + 1 > outlen)
		return -ENAMETOOLONG;
	strcpy(out, real);
	return fold_tail(out, outlen, abs + cut);
}

/* ------------------------------------------------------------------ */
/* validation                                                           */

/* Sets the message and returns -EINVAL. */
#define bad(e, ...) lr_err_fail((e), -EINVAL, __VA_ARGS__)

/* An existing directory whose canonical path is exactly path. */
static int check_canonical(const char *field, const char *path, struct lr_err *err)
{
	char real[PATH_MAX];
	struct stat st;
	if (!path || !*path)
		return bad(err, "profile: field '%s' is required%s", field, "");
	if (path[0] != '/')
		return bad(err, "profile: field '%s' must be an absolute path, not '%s'", field, path);
	if (!realpath(path, real) || stat(real, &st) != 0)
		return bad(err, "profile: field '%s': no such directory '%s'", field, path);
	if (!S_ISDIR(st.st_mode))
		return bad(err, "profile: field '%s': '%s' is not a directory", field, path);
	if (strcmp(real, path) != 0)
		return bad(err, "profile: field '%s' must be canonical: '%s' is not", field, path);
	return 0;
}

static int check_cap(const char *field, enum lr_cap c, struct lr_err *err)
{
	if ((unsigned)c > LR_CAP_ALLOW)
		return bad(err, "profile: field '%s' must be deny, gated or allow%s", field, "");
	return 0;
}

/* Write may not be wider than read for the same place. */
static int check_order(const char *wfield, enum lr_cap w, const char *rfield, enum lr_cap r,
		       struct lr_err *err)
{
	if (w > r)
		return bad(err, "profile: field '%s' is wider than '%s'", wfield, rfield);
	return 0;
}

int lr_profile_validate(const struct lr_profile *p, struct lr_err *err)
{
	static const char *const names[] = { "workspace_read", "workspace_write", "host_read",
					     "host_write", "network", "command", "delegate", "mcp" };
	const enum lr_cap caps[] = { p->workspace_read, p->workspace_write, p->host_read,
				     p->host_write, p->network, p->command, p->delegate, p->mcp };
	char field[48];
	int rc;
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
		if ((rc = check_cap(names[i], caps[i], err)))
			return rc;
	if ((unsigned)p->home > LR_HOME_REAL)
		return bad(err, "profile: field '%s' must be isolated or real%s", "home", "");
	if ((unsigned)p->isolation > LR_ISO_UNCONFINED)
		return bad(err, "profile: field '%s' must be sandboxed or unconfined%s", "isolation", "");
	if ((rc = check_order("workspace_write", p->workspace_write, "workspace_read",
			      p->workspace_read, err)) ||
	    (rc = check_order("host_write", p->host_write, "host_read", p->host_read, err)))
		return rc;
	if ((rc = check_canonical("workspace_root", p->workspace_root, err)))
		return rc;
	if (p->nroots && !p->roots)
		return bad(err, "profile: field '%s' is missing%s", "roots", "");
	for (size_t i = 0; i < p->nroots; i++) {
		const struct lr_sbx_root *r = &p->roots[i];
		snprintf(field, sizeof field, "roots[%zu].path", i + 1);
		if ((rc = check_canonical(field, r->path, err)))
			return rc;
		if (path_inside(r->path, p->workspace_root) || path_inside(p->workspace_root, r->path))
			return bad(err, "profile: field '%s' overlaps the workspace '%s'", field,
				   p->workspace_root);
		for (size_t j = 0; j < i; j++)
			if (strcmp(p->roots[j].path, r->path) == 0)
				return bad(err, "profile: field '%s' repeats '%s'", field, r->path);
		snprintf(field, sizeof field, "roots[%zu].read", i + 1);
		if ((rc = check_cap(field, r->read, err)))
			return rc;
		char wfield[48];
		snprintf(wfield, sizeof wfield, "roots[%zu].write", i + 1);
		if ((rc = check_cap(wfield, r->write, err)) ||
		    (rc = check_order(wfield, r->write, field, r->read, err)))
			return rc;
	}
	if (p->nprotect_names && !p->protect_names)
		return bad(err, "profile: field '%s' is missing%s", "protect.names", "");
	if (p->nprotect_names > LR_PROTECT_MAX_NAMES)
		return bad(err, "profile: field 'protect.names' has more than %d entries", LR_PROTECT_MAX_NAMES);
	for (size_t i = 0; i < p->nprotect_names; i++) {
		if (lr_protect_name_check(p->protect_names[i]) != 0)
			return bad(err, "profile: field 'protect.names[%zu]' must be a relative path of "
				   "printable characters without '.' or '..' components (at most %d bytes)",
				   i + 1, LR_PROTECT_NAME_MAX);
	}
	if (p->isolation == LR_ISO_UNCONFINED) {
		/* Unconfined runs the command as it is: nothing would enforce a
		 * narrower filesystem or network state, so none may be claimed. */
		for (size_t i = 0; i < 5; i++)
			if (caps[i] != LR_CAP_ALLOW)
				return bad(err, "profile: isolation 'unconfined' needs field '%s' to be allow%s",
					   names[i], "");
		for (size_t i = 0; i < p->nroots; i++)
			if (p->roots[i].read != LR_CAP_ALLOW || p->roots[i].write != LR_CAP_ALLOW) {
				snprintf(field, sizeof field, "roots[%zu]", i + 1);
				return bad(err, "profile: isolation 'unconfined' needs field '%s' to be allow%s",
					   field, "");
			}
		if (!p->ack_unconfined)
			return bad(err, "profile: isolation 'unconfined' needs field '%s'%s",
				   "ack_unconfined", "");
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* fingerprint                                                          */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_root(const void *a, const void *b)
{
	return strcmp(((const struct lr_sbx_root *)a)->path, ((const struct lr_sbx_root *)b)->path);
}

/*
 * The canonical encoding: a version line, then one line per field in a
 * fixed order; paths are length-prefixed so no path can forge a line;
 * roots sorted by path. Any change to a state, a path or the set of roots
 * changes the text, and so the digest.
 */
void lr_profile_fingerprint(const struct lr_profile *p, char out[65])
{
	struct lr_buf b;
	struct lr_sbx_root *sorted = NULL;
	const char *ws = p->workspace_root ? p->workspace_root : "";
	out[0] = '\0';
	lr_buf_init(&b, 1 << 20);
	int rc = lr_buf_printf(&b, "luarig-profile-v1\nworkspace_root %zu:%s\n", strlen(ws), ws);
	rc = rc ? rc : lr_buf_printf(&b, "workspace_read %s\nworkspace_write %s\n",
				     lr_cap_name(p->workspace_read), lr_cap_name(p->workspace_write));
	rc = rc ? rc : lr_buf_printf(&b, "host_read %s\nhost_write %s\nnetwork %s\ncommand %s\n",
				     lr_cap_name(p->host_read), lr_cap_name(p->host_write),
				     lr_cap_name(p->network), lr_cap_name(p->command));
	rc = rc ? rc : lr_buf_printf(&b, "delegate %s\n", lr_cap_name(p->delegate));
	rc = rc ? rc : lr_buf_printf(&b, "mcp %s\n", lr_cap_name(p->mcp));
	rc = rc ? rc : lr_buf_printf(&b, "home %d\nisolation %d\nack_unconfined %d\nroots %zu\n",
				     (int)p->home, (int)p->isolation, p->ack_unconfined ? 1 : 0,
				     p->nroots);
	if (!rc && p->nroots) {
		sorted = malloc(p->nroots * sizeof *sorted);
		if (!sorted)
			rc = -ENOMEM;
		else {
			memcpy(sorted, p->roots, p->nroots * sizeof *sorted);
			for (size_t i = 0; i < p->nroots; i++)
				if (!sorted[i].path)
					sorted[i].path = (char *)"";
			qsort(sorted, p->nroots, sizeof *sorted, cmp_root);
		}
	}
	for (size_t i = 0; !rc && sorted && i < p->nroots; i++)
		rc = lr_buf_printf(&b, "root %zu:%s %s %s\n", strlen(sorted[i].path), sorted[i].path,
				   lr_cap_name(sorted[i].read), lr_cap_name(sorted[i].write));
	/* The protect options only when set, so a profile without them keeps its digest. */
	if (!rc && (p->nprotect_names || p->git_readonly || p->protect_max_entries)) {
		char **names = p->nprotect_names ? malloc(p->nprotect_names * sizeof *names) : NULL;
		if (p->nprotect_names && !names) {
			rc = -ENOMEM;
		} else {
			for (size_t i = 0; i < p->nprotect_names; i++)
				names[i] = p->protect_names[i] ? p->protect_names[i] : (char *)"";
			if (names)
				qsort(names, p->nprotect_names, sizeof *names, cmp_str);
			rc = lr_buf_printf(&b, "protect git_readonly %d max_entries %zu names %zu\n",
					   p->git_readonly ? 1 : 0, p->protect_max_entries, p->nprotect_names);
			for (size_t i = 0; !rc && i < p->nprotect_names; i++)
				rc = lr_buf_printf(&b, "protect %zu:%s\n", strlen(names[i]), names[i]);
			free(names);
		}
	}
	/* On failure out stays "": grants refuse an empty fingerprint. */
	if (!rc)
		lr_sha256_hex(b.data, b.len, out);
	free(sorted);
	lr_buf_release(&b);
}

/* ------------------------------------------------------------------ */
/* access_for                                                           */

/* The longest root containing path, or NULL. */
static const struct lr_sbx_root *root_for(const struct lr_profile *p, const char *path)
{
	const struct lr_sbx_root *best = NULL;
	for (size_t i = 0; i < p->nroots; i++)
		if (p->roots[i].path && path_inside(path, p->roots[i].path) &&
		    (!best || strlen(p->roots[i].path) > strlen(best->path)))
			best = &p->roots[i];
	return best;
}

/* The state of a canonical path for reading (write = 0) or writing. */
static enum lr_cap state_for_path(const struct lr_profile *p, const char *path, int write)
{
	const struct lr_sbx_root *r = root_for(p, path);
	if (r)
		return write ? r->write : r->read;
	if (p->workspace_root && path_inside(path, p->workspace_root))
		return write ? p->workspace_write : p->workspace_read;
	return write ? p->host_write : p->host_read;
}

int lr_profile_access_for(const struct lr_profile *p, const char *kind, const char *scope,
			  enum lr_cap *out, struct lr_err *err)
{
	*out = LR_CAP_DENY;
	if (!kind) {
		lr_err_set(err, "profile: access kind missing");
		return -EINVAL;
	}
	int write = strcmp(kind, "filesystem.write") == 0;
	if (write || strcmp(kind, "filesystem.read") == 0) {
		char path[PATH_MAX];
		int rc = lr_profile_resolve(p, scope, path, sizeof path);
		if (rc) {
			lr_err_set(err, "profile: '%s' needs a path, cannot resolve '%.200s': %s",
				   kind, scope ? scope : "", lr_strerror(rc));
			return rc;
		}
		*out = state_for_path(p, path, write);
		return 0;
	}
	if (strcmp(kind, "network") == 0) {
		*out = p->network;
		return 0;
	}
	if (strcmp(kind, "command.execute") == 0) {
		*out = p->command;
		return 0;
	}
	if (strcmp(kind, "delegate") == 0) {
		*out = p->delegate;
		return 0;
	}
	if (strcmp(kind, "mcp") == 0) {
		*out = p->mcp;
		return 0;
	}
	lr_err_set(err, "profile: unknown access kind '%.200s'", kind);
	return -EINVAL;
}

/* ------------------------------------------------------------------ */
/* copy, restrict, release                                              */

void lr_profile_release(struct lr_profile *p)
{
	if (!p)
		return;
	free(p->workspace_root);
	for (size_t i = 0; i < p->nroots; i++)
		free(p->roots ? p->roots[i].path : NULL);
	free(p->roots);
	p->workspace_root = NULL;
	p->roots = NULL;
	p->nroots = 0;
	for (size_t i = 0; i < p->nprotect_names; i++)
		free(p->protect_names ? p->protect_names[i] : NULL);
	free(p->protect_names);
	p->protect_names = NULL;
	p->nprotect_names = 0;
}

/* Adds the names of src (not already in out) to out's. */
static int merge_names(struct lr_profile *out, char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int dup = 0;
		for (size_t j = 0; j < out->nprotect_names && !dup; j++)
			dup = strcmp(out->protect_names[j], names[i]) == 0;
		if (dup)
			continue;
		char **v = realloc(out->protect_names, (out->nprotect_names + 1) * sizeof *v);
		if (!v)
			return -ENOMEM;
		out->protect_names = v;
		if (!(v[out->nprotect_names] = strdup(names[i])))
			return -ENOMEM;
		out->nprotect_names++;
	}
	return 0;
}

int lr_profile_copy(const struct lr_profile *src, struct lr_profile *out)
{
	*out = *src;
	out->workspace_root = NULL;
	out->roots = NULL;
	out->nroots = 0;
	out->protect_names = NULL;
	out->nprotect_names = 0;
	if (merge_names(out, src->protect_names, src->nprotect_names))
		goto oom;
	if (src->workspace_root && !(out->workspace_root = strdup(src->workspace_root)))
		goto oom;
	if (src->nroots) {
		out->roots = calloc(src->nroots, sizeof *out->roots);
		if (!out->roots)
			goto oom;
		for (size_t i = 0; i < src->nroots; i++) {
			out->roots[i] = src->roots[i];
			out->roots[i].path = NULL;
			out->nroots = i + 1;
			if (src->roots[i].path && !(out->roots[i].path = strdup(src->roots[i].path)))
				goto oom;
		}
	}
	return 0;
oom:
	lr_profile_release(out);
	return -ENOMEM;
}

static enum lr_cap cap_min(enum lr_cap a, enum lr_cap b)
{
	return a < b ? a : b;
}

/*
 * The result's roots are the union of both sets of root paths, each with
 * the lower of the states the two profiles give that path (a root of one
 * profile falls under a root or the host of the other). For any path, its
 * longest result root R comes from one of the inputs, and neither input
 * has a root between R and the path, so its state is the lower of its
 * states in the inputs: nothing widens, not even outside the roots.
 */
static int restrict_roots(const struct lr_profile *a, const struct lr_profile *b,
			  struct lr_profile *out)
{
	size_t cap = a->nroots + b->nroots;
	if (!cap)
		return 0;
	out->roots = calloc(cap, sizeof *out->roots);
	if (!out->roots)
		return -ENOMEM;
	for (int side = 0; side < 2; side++) {
		const struct lr_profile *p = side ? b : a;
		for (size_t i = 0; i < p->nroots; i++) {
			const char *path = p->roots[i].path;
			int dup = 0;
			for (size_t j = 0; j < out->nroots; j++)
				dup |= strcmp(out->roots[j].path, path) == 0;
			if (dup)
				continue;
			struct lr_sbx_root *r = &out->roots[out->nroots];
			r->read = cap_min(state_for_path(a, path, 0), state_for_path(b, path, 0));
			r->write = cap_min(state_for_path(a, path, 1), state_for_path(b, path, 1));
			if (!(r->path = strdup(path)))
				return -ENOMEM;
			out->nroots++;
		}
	}
	return 0;
}

int lr_profile_restrict(const struct lr_profile *base, const struct lr_profile *ceiling,
			struct lr_profile *out, struct lr_err *err)
{
	memset(out, 0, sizeof *out);
	if (!base->workspace_root || !ceiling->workspace_root ||
	    strcmp(base->workspace_root, ceiling->workspace_root) != 0) {
		lr_err_set(err, "restrict: the profiles have different workspaces ('%.120s' and '%.120s')",
			   base->workspace_root ? base->workspace_root : "",
			   ceiling->workspace_root ? ceiling->workspace_root : "");
		return -EINVAL;
	}
	for (size_t i = 0; i < base->nroots + ceiling->nroots; i++) {
		const struct lr_profile *p = i < base->nroots ? base : ceiling;
		if (!p->roots[i < base->nroots ? i : i - base->nroots].path) {
			lr_err_set(err, "restrict: a root without a path");
			return -EINVAL;
		}
	}
	out->workspace_read = cap_min(base->workspace_read, ceiling->workspace_read);
	out->workspace_write = cap_min(base->workspace_write, ceiling->workspace_write);
	out->host_read = cap_min(base->host_read, ceiling->host_read);
	out->host_write = cap_min(base->host_write, ceiling->host_write);
	out->network = cap_min(base->network, ceiling->network);
	out->command = cap_min(base->command, ceiling->command);
	out->delegate = cap_min(base->delegate, ceiling->delegate);
	out->mcp = cap_min(base->mcp, ceiling->mcp);
	out->home = base->home == LR_HOME_REAL && ceiling->home == LR_HOME_REAL ? LR_HOME_REAL
										 : LR_HOME_ISOLATED;
	out->isolation = base->isolation == LR_ISO_UNCONFINED &&
					 ceiling->isolation == LR_ISO_UNCONFINED
				 ? LR_ISO_UNCONFINED
				 : LR_ISO_SANDBOXED;
	out->ack_unconfined = base->ack_unconfined && ceiling->ack_unconfined;
	/* protection is the union: every name of either, read-only git if either, the lower cap */
	out->git_readonly = base->git_readonly || ceiling->git_readonly;
	size_t ma = base->protect_max_entries, mb = ceiling->protect_max_entries;
	out->protect_max_entries = !ma ? mb : !mb ? ma : ma < mb ? ma : mb;
	int rc = -ENOMEM;
	if (!(out->workspace_root = strdup(base->workspace_root)) ||
	    (rc = merge_names(out, base->protect_names, base->nprotect_names)) ||
	    (rc = merge_names(out, ceiling->protect_names, ceiling->nprotect_names)) ||
	    (rc = restrict_roots(base, ceiling, out))) {
		lr_profile_release(out);
		lr_err_set(err, "restrict: %s", lr_strerror(rc));
		return rc;
	}
	return 0;
}
