/*
 * spec.c — the spec the host seals for the confinement helper: a strict,
 * versioned JSON encoding (jansson) and the sealed memfd that carries it.
 *
 * The decoder runs in the helper on bytes the host wrote, but it is still
 * strict: the helper is the last place a bug in the executor can turn into a
 * wider sandbox, so an unknown key, a wrong type, a missing field, a relative
 * path or a size above the caps refuses the whole spec with a message
 * naming the field. The encoding is canonical (fixed key order, every field
 * written), so decode -> encode -> decode -> encode is the identity.
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Every Landlock filesystem right up to ABI 7 (bits 0..15). */
#define ACCESS_KNOWN ((UINT64_C(1) << 16) - 1)

__attribute__((format(printf, 2, 3)))
static int fail(struct lr_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char msg[LR_ERR_LEN];
	vsnprintf(msg, sizeof msg, fmt, ap);
	lr_err_set(err, "spec: %s", msg);
	va_end(ap);
	return LR_EPARSE;
}

/* ---- the limits ---- */

void lr_sbx_default_limits(struct lr_sbx_limits *l)
{
	*l = (struct lr_sbx_limits){
		.fsize_bytes = 1ull << 30,
		.nproc = 512,
		.nofile = 1024,
		.memory_bytes = 2ull << 30,
	};
	lr_sbx_tmpfs_limits(l, &l->tmpfs_bytes, &l->tmpfs_inodes);
}

void lr_sbx_tmpfs_limits(const struct lr_sbx_limits *l, uint64_t *bytes, uint64_t *inodes)
{
	uint64_t b = l->tmpfs_bytes;
	if (!b) {
		b = l->memory_bytes ? l->memory_bytes / 4 : 512ull << 20;
		if (l->fsize_bytes && l->fsize_bytes < b)
			b = l->fsize_bytes;
	}
	if (b < (1ull << 20))
		b = 1ull << 20;
	uint64_t n = l->tmpfs_inodes ? l->tmpfs_inodes : b / 8192;
	*bytes = b;
	*inodes = n < 1024 ? 1024 : n;
}

/* ---- encoding ---- */

static int set_new(json_t *o, const char *k, json_t *v)
{
	return v && json_object_set_new(o, k, v) == 0 ? 0 : -ENOMEM;
}

static json_t *uint_json(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? NULL : json_integer((json_int_t)v);
}

static json_t *strv_json(char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (!v[i] || json_array_append_new(a, json_string(v[i])) != 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static size_t strv_len(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

static const char *net_name(enum lr_sbx_net n)
{
	switch (n) {
	case LR_SBX_NET_NONE: return "none";
	case LR_SBX_NET_PROXY: return "proxy";
	case LR_SBX_NET_HOST: return "host";
	}
	return NULL;
}

int lr_sbx_spec_encode(const struct lr_sbx_spec *s, char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (!s->argv || !s->argv[0] || !s->envp || !s->cwd || !net_name(s->net) ||
	    (s->tier != LR_TIER_A && s->tier != LR_TIER_B))
		return -EINVAL;
	if (s->exec_id > (uint64_t)INT64_MAX)
		return -ERANGE;
	json_t *o = json_object(), *a;
	int rc = o ? 0 : -ENOMEM;
	if (!rc) rc = set_new(o, "v", json_integer(1));
	if (!rc) rc = set_new(o, "exec_id", uint_json(s->exec_id));
	if (!rc) rc = set_new(o, "tier", json_string(s->tier == LR_TIER_A ? "A" : "B"));
	if (!rc) rc = set_new(o, "unconfined", json_boolean(s->unconfined));
	if (!rc && s->etc_idmap) rc = set_new(o, "etc_idmap", json_true());
	if (!rc) rc = set_new(o, "argv", strv_json(s->argv, strv_len(s->argv)));
	if (!rc) rc = set_new(o, "envp", strv_json(s->envp, strv_len(s->envp)));
	if (!rc) rc = set_new(o, "cwd", json_string(s->cwd));
	if (!rc) rc = set_new(o, "mounts", a = json_array());
	for (size_t i = 0; !rc && i < s->nmounts; i++) {
		const struct lr_sbx_mount *m = &s->mounts[i];
		json_t *mo = m->src && m->dst ? json_pack("{s:s,s:s,s:b}", "src", m->src, "dst",
							  m->dst, "writable", m->writable)
					      : NULL;
		rc = mo && json_array_append_new(a, mo) == 0 ? 0 : -EINVAL;
	}
	if (!rc) rc = set_new(o, "rules", a = json_array());
	for (size_t i = 0; !rc && i < s->nrules; i++) {
		const struct lr_sbx_path_rule *r = &s->rules[i];
		json_t *ro = r->path && r->access <= ACCESS_KNOWN
				     ? json_pack("{s:s,s:I}", "path", r->path, "access",
						 (json_int_t)r->access)
				     : NULL;
		rc = ro && json_array_append_new(a, ro) == 0 ? 0 : -EINVAL;
	}
	if (!rc) rc = set_new(o, "readonly", strv_json(s->readonly, s->nreadonly));
	if (!rc) {
		const struct lr_sbx_limits *l = &s->limits;
		json_t *lo = json_object();
		rc = set_new(o, "limits", lo);
		if (!rc) rc = set_new(lo, "as", uint_json(l->as_bytes));
		if (!rc) rc = set_new(lo, "fsize", uint_json(l->fsize_bytes));
		if (!rc) rc = set_new(lo, "nproc", uint_json(l->nproc));
		if (!rc) rc = set_new(lo, "nofile", uint_json(l->nofile));
		if (!rc) rc = set_new(lo, "cpu", uint_json(l->cpu_seconds));
		if (!rc) rc = set_new(lo, "memory", uint_json(l->memory_bytes));
		if (!rc) rc = set_new(lo, "tmpfs", uint_json(l->tmpfs_bytes));
		if (!rc) rc = set_new(lo, "tmpfs_inodes", uint_json(l->tmpfs_inodes));
	}
	if (!rc) rc = set_new(o, "net", json_string(net_name(s->net)));
	if (!rc) rc = set_new(o, "proxy_port", json_integer(s->proxy_port));
	if (!rc) rc = set_new(o, "dns_port", json_integer(s->dns_port));
	if (!rc) rc = set_new(o, "cgroup", s->cgroup ? json_string(s->cgroup) : json_null());
	if (!rc) rc = set_new(o, "uid", json_integer((json_int_t)s->uid));
	if (!rc) rc = set_new(o, "gid", json_integer((json_int_t)s->gid));
	if (!rc && s->seccomp_len) {
		if (s->seccomp_len % 8 || s->seccomp_len > LR_SBX_SECCOMP_MAX)
			rc = -EINVAL;
		char *hex = rc ? NULL : malloc(2 * s->seccomp_len + 1);
		if (!rc && !hex)
			rc = -ENOMEM;
		for (size_t i = 0; !rc && i < s->seccomp_len; i++)
			snprintf(hex + 2 * i, 3, "%02x", s->seccomp_bpf[i]);
		if (!rc)
			rc = set_new(o, "seccomp", json_string(hex));
		free(hex);
	}
	if (!rc) {
		/* JSON_PRESERVE_ORDER: the insertion order above is the canonical one. */
		*out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (!*out)
			rc = -ENOMEM;
		else
			*len = strlen(*out);
	}
	json_decref(o);
	return rc;
}

/* ---- decoding ---- */

/*
 * A path the helper acts on: absolute, no empty, "." or ".." component, no
 * trailing slash (except "/" itself), no NUL, shorter than PATH_MAX.
 */
static int path_ok(const char *p, size_t len)
{
	if (len == 0 || len >= PATH_MAX || p[0] != '/' || strlen(p) != len)
		return 0;
	if (len == 1)
		return 1;
	if (p[len - 1] == '/')
		return 0;
	for (const char *c = p + 1;;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		if (!e)
			return 1;
		c = e + 1;
	}
}

static char *dup_string(json_t *v, size_t max, int as_path, const char *what,
			struct lr_err *err, int *rc)
{
	if (!json_is_string(v)) {
		*rc = fail(err, "%s must be a string", what);
		return NULL;
	}
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (strlen(s) != n) {
		*rc = fail(err, "%s contains a NUL byte", what);
		return NULL;
	}
	if (n > max) {
		*rc = fail(err, "%s is longer than %zu bytes", what, max);
		return NULL;
	}
	if (as_path && !path_ok(s, n)) {
		*rc = fail(err, "%s must be an absolute, normalized path", what);
		return NULL;
	}
	char *d = strdup(s);
	if (!d)
		*rc = -ENOMEM;
	return d;
}

static int get_uint(json_t *v, uint64_t max, const char *what, uint64_t *out,
		    struct lr_err *err)
{
	if (!json_is_integer(v))
		return fail(err, "%s must be an integer", what);
	json_int_t i = json_integer_value(v);
	if (i < 0 || (uint64_t)i > max)
		return fail(err, "%s is out of range", what);
	*out = (uint64_t)i;
	return 0;
}

/* Checks that every key of o is one of keys (NULL-terminated). */
static int known_keys(json_t *o, const char *const *keys, const char *where,
		      struct lr_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], k) != 0)
			i++;
		if (!keys[i])
			return fail(err, "unknown key '%.64s'%s", k, where);
	}
	return 0;
}

static int need(json_t *o, const char *k, json_t **v, struct lr_err *err)
{
	*v = json_object_get(o, k);
	return *v ? 0 : fail(err, "missing field '%s'", k);
}

static int decode_strv(json_t *a, size_t maxn, size_t maxlen, int as_path, const char *what,
		       char ***out, size_t *n, struct lr_err *err)
{
	if (!json_is_array(a))
		return fail(err, "'%s' must be an array", what);
	size_t cnt = json_array_size(a);
	if (cnt > maxn)
		return fail(err, "'%s' has more than %zu entries", what, maxn);
	char **v = calloc(cnt + 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	*out = v; /* released by the caller's spec release, even half filled */
	*n = cnt;
	int rc = 0;
	char name[48];
	for (size_t i = 0; i < cnt; i++) {
		snprintf(name, sizeof name, "'%s[%zu]'", what, i);
		v[i] = dup_string(json_array_get(a, i), maxlen, as_path, name, err, &rc);
		if (!v[i])
			return rc;
	}
	return 0;
}

static int decode_mounts(json_t *a, struct lr_sbx_spec *s, struct lr_err *err)
{
	static const char *const keys[] = { "src", "dst", "writable", NULL };
	if (!json_is_array(a))
		return fail(err, "'mounts' must be an array");
	size_t n = json_array_size(a);
	if (n > LR_SBX_MAX_MOUNTS)
		return fail(err, "'mounts' has more than %d entries", LR_SBX_MAX_MOUNTS);
	if (n && !(s->mounts = calloc(n, sizeof *s->mounts)))
		return -ENOMEM;
	s->nmounts = n; /* zeroed entries: a failure half way releases cleanly */
	int rc = 0;
	char name[48];
	for (size_t i = 0; i < n; i++) {
		struct lr_sbx_mount *m = &s->mounts[i];
		json_t *o = json_array_get(a, i), *v;
		if (!json_is_object(o))
			return fail(err, "'mounts[%zu]' must be an object", i);
		if ((rc = known_keys(o, keys, " in a mount", err)))
			return rc;
		if ((rc = need(o, "src", &v, err)))
			return rc;
		snprintf(name, sizeof name, "'mounts[%zu].src'", i);
		if (!(m->src = dup_string(v, PATH_MAX, 1, name, err, &rc)))
			return rc;
		if ((rc = need(o, "dst", &v, err)))
			return rc;
		snprintf(name, sizeof name, "'mounts[%zu].dst'", i);
		if (!(m->dst = dup_string(v, PATH_MAX, 1, name, err, &rc)))
			return rc;
		if (strcmp(m->dst, "/") == 0)
			return fail(err, "'mounts[%zu].dst' must not be '/'", i);
		if ((rc = need(o, "writable", &v, err)))
			return rc;
		if (!json_is_boolean(v))
			return fail(err, "'mounts[%zu].writable' must be a boolean", i);
		m->writable = json_is_true(v);
	}
	return 0;
}

static int decode_rules(json_t *a, struct lr_sbx_spec *s, struct lr_err *err)
{
	static const char *const keys[] = { "path", "access", NULL };
	if (!json_is_array(a))
		return fail(err, "'rules' must be an array");
	size_t n = json_array_size(a);
	if (n > LR_SBX_MAX_RULES)
		return fail(err, "'rules' has more than %d entries", LR_SBX_MAX_RULES);
	if (n && !(s->rules = calloc(n, sizeof *s->rules)))
		return -ENOMEM;
	s->nrules = n;
	int rc = 0;
	char name[48];
	for (size_t i = 0; i < n; i++) {
		struct lr_sbx_path_rule *r = &s->rules[i];
		json_t *o = json_array_get(a, i), *v;
		if (!json_is_object(o))
			return fail(err, "'rules[%zu]' must be an object", i);
		if ((rc = known_keys(o, keys, " in a rule", err)))
			return rc;
		if ((rc = need(o, "path", &v, err)))
			return rc;
		snprintf(name, sizeof name, "'rules[%zu].path'", i);
		if (!(r->path = dup_string(v, PATH_MAX, 1, name, err, &rc)))
			return rc;
		if ((rc = need(o, "access", &v, err)))
			return rc;
		snprintf(name, sizeof name, "'rules[%zu].access'", i);
		if ((rc = get_uint(v, ACCESS_KNOWN, name, &r->access, err)))
			return rc;
		if (r->access == 0)
			return fail(err, "'rules[%zu].access' must not be empty", i);
	}
	return 0;
}

static int decode_limits(json_t *o, struct lr_sbx_limits *l, struct lr_err *err)
{
	static const char *const keys[] = { "as", "fsize", "nproc", "nofile", "cpu", "memory",
					    "tmpfs", "tmpfs_inodes", NULL };
	uint64_t *const slots[] = { &l->as_bytes, &l->fsize_bytes, &l->nproc,
				    &l->nofile, &l->cpu_seconds, &l->memory_bytes,
				    &l->tmpfs_bytes, &l->tmpfs_inodes };
	if (!json_is_object(o))
		return fail(err, "'limits' must be an object");
	int rc = known_keys(o, keys, " in 'limits'", err);
	char name[32];
	for (size_t i = 0; !rc && keys[i]; i++) {
		json_t *v = json_object_get(o, keys[i]);
		snprintf(name, sizeof name, "'limits.%s'", keys[i]);
		if (v)
			rc = get_uint(v, (uint64_t)INT64_MAX, name, slots[i], err);
	}
	return rc;
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "seccomp": the filter as lower-case hex, whole instructions, at most LR_SBX_SECCOMP_MAX bytes. */
static int decode_bpf(json_t *v, struct lr_sbx_spec *s, struct lr_err *err)
{
	const char *hex = json_string_value(v);
	size_t n = hex ? json_string_length(v) : 0;
	if (!hex || n == 0 || n % 16 || n / 2 > LR_SBX_SECCOMP_MAX)
		return fail(err, "'seccomp' must be hex of 1 to %d whole instructions",
			    LR_SBX_SECCOMP_MAX / 8);
	if (!(s->seccomp_bpf = malloc(n / 2)))
		return -ENOMEM;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return fail(err, "'seccomp' must be lower-case hex");
		s->seccomp_bpf[i] = (unsigned char)(hi << 4 | lo);
	}
	s->seccomp_len = n / 2;
	return 0;
}

static int decode_object(json_t *o, struct lr_sbx_spec *s, struct lr_err *err)
{
	static const char *const keys[] = {
		"v", "exec_id", "tier", "unconfined", "argv", "envp", "cwd", "mounts", "rules",
		"readonly", "limits", "net", "proxy_port", "dns_port", "cgroup", "uid", "gid",
		"etc_idmap", "seccomp", NULL
	};
	json_t *v;
	uint64_t u;
	size_t n;
	int rc;
	if (!json_is_object(o))
		return fail(err, "not a JSON object");
	if ((rc = known_keys(o, keys, "", err)))
		return rc;
	if ((rc = need(o, "v", &v, err)))
		return rc;
	if (!json_is_integer(v) || json_integer_value(v) != 1)
		return fail(err, "unsupported version (want 'v': 1)");
	if ((rc = need(o, "exec_id", &v, err)) ||
	    (rc = get_uint(v, (uint64_t)INT64_MAX, "'exec_id'", &s->exec_id, err)))
		return rc;
	if ((rc = need(o, "tier", &v, err)))
		return rc;
	const char *t = json_string_value(v);
	if (t && strcmp(t, "A") == 0)
		s->tier = LR_TIER_A;
	else if (t && strcmp(t, "B") == 0)
		s->tier = LR_TIER_B;
	else
		return fail(err, "'tier' must be \"A\" or \"B\"");
	if ((v = json_object_get(o, "unconfined"))) {
		if (!json_is_boolean(v))
			return fail(err, "'unconfined' must be a boolean");
		s->unconfined = json_is_true(v);
	}
	if ((v = json_object_get(o, "etc_idmap"))) {
		if (!json_is_boolean(v))
			return fail(err, "'etc_idmap' must be a boolean");
		s->etc_idmap = json_is_true(v);
	}
	if ((rc = need(o, "argv", &v, err)) ||
	    (rc = decode_strv(v, LR_SBX_MAX_ARGS, LR_SBX_MAX_ARG, 0, "argv", &s->argv, &n, err)))
		return rc;
	if (n == 0)
		return fail(err, "'argv' must not be empty");
	if (!path_ok(s->argv[0], strlen(s->argv[0])))
		return fail(err, "'argv[0]' must be an absolute, normalized path");
	if ((rc = need(o, "envp", &v, err)) ||
	    (rc = decode_strv(v, LR_SBX_MAX_ARGS, LR_SBX_MAX_ARG, 0, "envp", &s->envp, &n, err)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(s->envp[i], '=');
		if (!eq || eq == s->envp[i])
			return fail(err, "'envp[%zu]' must be NAME=VALUE", i);
	}
	if ((rc = need(o, "cwd", &v, err)))
		return rc;
	if (!(s->cwd = dup_string(v, PATH_MAX, 1, "'cwd'", err, &rc)))
		return rc;
	if ((rc = need(o, "mounts", &v, err)) || (rc = decode_mounts(v, s, err)))
		return rc;
	if ((rc = need(o, "rules", &v, err)) || (rc = decode_rules(v, s, err)))
		return rc;
	if ((rc = need(o, "readonly", &v, err)) ||
	    (rc = decode_strv(v, LR_SBX_MAX_RULES, PATH_MAX, 1, "readonly", &s->readonly,
			      &s->nreadonly, err)))
		return rc;
	if ((rc = need(o, "limits", &v, err)) || (rc = decode_limits(v, &s->limits, err)))
		return rc;
	if ((rc = need(o, "net", &v, err)))
		return rc;
	const char *nn = json_string_value(v);
	if (nn && strcmp(nn, "none") == 0)
		s->net = LR_SBX_NET_NONE;
	else if (nn && strcmp(nn, "proxy") == 0)
		s->net = LR_SBX_NET_PROXY;
	else if (nn && strcmp(nn, "host") == 0)
		s->net = LR_SBX_NET_HOST;
	else
		return fail(err, "'net' must be \"none\", \"proxy\" or \"host\"");
	if ((v = json_object_get(o, "proxy_port"))) {
		if ((rc = get_uint(v, 65535, "'proxy_port'", &u, err)))
			return rc;
		s->proxy_port = (uint16_t)u;
	}
	if ((v = json_object_get(o, "dns_port"))) {
		if ((rc = get_uint(v, 65535, "'dns_port'", &u, err)))
			return rc;
		s->dns_port = (uint16_t)u;
	}
	if (s->net == LR_SBX_NET_PROXY && (!s->proxy_port || !s->dns_port))
		return fail(err, "'net' \"proxy\" needs 'proxy_port' and 'dns_port'");
	if (s->net == LR_SBX_NET_HOST && !s->unconfined)
		return fail(err, "'net' \"host\" needs 'unconfined'");
	if ((v = json_object_get(o, "cgroup")) && !json_is_null(v)) {
		if (!(s->cgroup = dup_string(v, PATH_MAX, 1, "'cgroup'", err, &rc)))
			return rc;
		if (strncmp(s->cgroup, "/sys/fs/cgroup/", 15) != 0)
			return fail(err, "'cgroup' must be under /sys/fs/cgroup/");
	}
	if ((rc = need(o, "uid", &v, err)) || (rc = get_uint(v, 0xfffffffeu, "'uid'", &u, err)))
		return rc;
	s->uid = (uid_t)u;
	if ((rc = need(o, "gid", &v, err)) || (rc = get_uint(v, 0xfffffffeu, "'gid'", &u, err)))
		return rc;
	s->gid = (gid_t)u;
	if ((v = json_object_get(o, "seccomp")))
		return decode_bpf(v, s, err);
	return 0;
}

int lr_sbx_spec_decode(const char *buf, size_t len, struct lr_sbx_spec *out,
		       struct lr_err *err)
{
	memset(out, 0, sizeof *out);
	lr_err_clear(err);
	if (len > LR_SBX_SPEC_MAX)
		return fail(err, "larger than %d bytes", LR_SBX_SPEC_MAX);
	json_error_t je;
	json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return fail(err, "invalid JSON at byte %d: %.120s", je.position, je.text);
	int rc = decode_object(o, out, err);
	json_decref(o);
	if (rc) {
		if (rc == -ENOMEM)
			fail(err, "out of memory");
		lr_sbx_spec_release(out);
	}
	return rc;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void lr_sbx_spec_release(struct lr_sbx_spec *s)
{
	if (!s)
		return;
	free_strv(s->argv, strv_len(s->argv));
	free_strv(s->envp, strv_len(s->envp));
	free(s->cwd);
	for (size_t i = 0; i < s->nmounts; i++) {
		free(s->mounts[i].src);
		free(s->mounts[i].dst);
	}
	free(s->mounts);
	for (size_t i = 0; i < s->nrules; i++)
		free(s->rules[i].path);
	free(s->rules);
	free_strv(s->readonly, s->nreadonly);
	free(s->cgroup);
	free(s->seccomp_bpf);
	memset(s, 0, sizeof *s);
}

/* ---- the sealed memfd ---- */

int lr_sbx_seal(const char *buf, size_t len)
{
	int fd = memfd_create("luarig-sandbox-spec", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			return -e;
		}
		off += (size_t)w;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0 ||
	    lseek(fd, 0, SEEK_SET) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}
