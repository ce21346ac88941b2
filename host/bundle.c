/*
 * bundle.c — script bundles: one gzip-compressed tar with a JSON manifest.
 *
 * Reading is the dangerous half: a bundle comes from anywhere. The whole
 * archive is decompressed into memory under caps (entry size, total size,
 * entry count, compression ratio checked while decompressing), every name
 * is checked before it is used, and every file is matched against the
 * manifest by size and SHA-256 before the caller sees any of it. Nothing
 * ever touches the disk, so there is no extraction to escape from.
 *
 * libarchive is opened lazily (util/lazy.c): `luarig -e ''` never loads it.
 */
#include "bundle.h"
#include "../util/libarchive.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define PATH_CAP 1024   /* bytes of one path inside a bundle */
#define AUTHOR_CAP MIB  /* bytes of an author's rig.json */

void lr_bundle_limits_default(struct lr_bundle_limits *lim)
{
	lim->max_entry = 16 * MIB;
	lim->max_total = 64 * MIB;
	lim->max_entries = 10000;
	lim->max_ratio = 100;
	lim->ratio_after = MIB;
	lim->version = NULL;
}

/* Sets the message and returns LR_EREFUSED. */
#define refuse(e, ...) lr_err_fail((e), LR_EREFUSED, __VA_ARGS__)

/*
 * Outside bytes made safe to print into buf (cap bytes): control bytes as
 * \xNN; past about cut bytes (0: no cut) the rest is "...". Returns buf.
 */
static const char *show_cut(const char *s, char *buf, size_t cap, size_t cut)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; s[i] && o + 5 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (cut && o > cut) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c < 0x20 || c == 0x7f) {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		} else {
			buf[o++] = (char)c;
		}
	}
	buf[o] = '\0';
	return buf;
}

/* A name from outside for a message: at most about 100 bytes. */
#define SHOW_LEN 512
static const char *show(const char *s, char buf[SHOW_LEN])
{
	return show_cut(s, buf, SHOW_LEN, 100);
}

/* A cap for messages: "16 MiB", "64 KiB" or "1000 bytes". buf holds 32 bytes. */
static const char *show_size(size_t n, char buf[32])
{
	if (n && n % MIB == 0)
		snprintf(buf, 32, "%zu MiB", n / MIB);
	else if (n && n % 1024 == 0)
		snprintf(buf, 32, "%zu KiB", n / 1024);
	else
		snprintf(buf, 32, "%zu-byte", n);
	return buf;
}

/* Why path cannot name a file in a bundle, or NULL when it can. */
static const char *path_problem(const char *p)
{
	if (!*p)
		return "has an empty path";
	if (strlen(p) > PATH_CAP)
		return "has a path over 1024 bytes";
	if (p[0] == '/')
		return "escapes the bundle";
	const char *invalid = NULL;
	const char *c = p;
	for (;;) {
		const char *end = strchr(c, '/');
		size_t n = end ? (size_t)(end - c) : strlen(c);
		if (n == 2 && c[0] == '.' && c[1] == '.')
			return "escapes the bundle";
		if (n == 0 || (n == 1 && c[0] == '.'))
			invalid = "has an invalid path";
		if (!end)
			break;
		c = end + 1;
	}
	for (c = p; *c; c++) {
		unsigned char u = (unsigned char)*c;
		if (u < 0x20 || u == 0x7f || u == '\\')
			invalid = "has an invalid path";
	}
	return invalid;
}

/* Bundle names become file names: letters, digits, '.', '_', '-'. */
static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

/* A module name: identifiers joined by single dots. */
static int valid_module(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 256)
		return 0;
	int start = 1;
	for (; *s; s++) {
		if (*s == '.') {
			if (start)
				return 0;
			start = 1;
			continue;
		}
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' ||
		      (!start && *s >= '0' && *s <= '9')))
			return 0;
		start = 0;
	}
	return !start;
}

/*
 * Semantic versions: MAJOR.MINOR.PATCH with an optional -prerelease and
 * +build. Pre-releases sort before their release and among themselves by
 * byte order (a simplification of semver's rule, enough for luarig's own
 * versions); build metadata is ignored.
 */
struct ver {
	unsigned long n[3];
	const char *pre;
	size_t prelen;
};

static int parse_ver(const char *s, struct ver *v)
{
	if (strlen(s) > 64)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
			return -1;
		unsigned long x = 0;
		for (int d = 0; *s >= '0' && *s <= '9'; s++, d++) {
			if (d >= 9)
				return -1;
			x = x * 10 + (unsigned long)(*s - '0');
		}
		v->n[i] = x;
		if (i < 2 && *s++ != '.')
			return -1;
	}
	v->pre = NULL;
	v->prelen = 0;
	if (*s == '-') {
		v->pre = ++s;
		while (*s && *s != '+')
			s++;
		v->prelen = (size_t)(s - v->pre);
		if (!v->prelen)
			return -1;
	}
	if (*s == '+' && !*++s)
		return -1;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '-'))
			return -1;
	if (v->pre)
		for (size_t i = 0; i < v->prelen; i++) {
			char c = v->pre[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '.' || c == '-'))
				return -1;
		}
	return 0;
}

int lr_bundle_vercmp(const char *a, const char *b, int *ok)
{
	struct ver x, y;
	*ok = parse_ver(a, &x) == 0 && parse_ver(b, &y) == 0;
	if (!*ok)
		return -2;
	for (int i = 0; i < 3; i++)
		if (x.n[i] != y.n[i])
			return x.n[i] < y.n[i] ? -1 : 1;
	if (!x.pre || !y.pre)
		return x.pre ? -1 : y.pre ? 1 : 0;
	size_t n = x.prelen < y.prelen ? x.prelen : y.prelen;
	int c = memcmp(x.pre, y.pre, n);
	if (c)
		return c < 0 ? -1 : 1;
	return x.prelen == y.prelen ? 0 : x.prelen < y.prelen ? -1 : 1;
}

void lr_bundle_free(struct lr_bundle *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nfiles; i++) {
		free(b->files[i].path);
		free(b->files[i].data);
	}
	free(b->files);
	free(b->name);
	free(b->version);
	free(b->entry);
	free(b->luarig);
	free(b->description);
	free(b->manifest);
	free(b);
}

static int file_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lr_bundle_file *)a)->path,
		      ((const struct lr_bundle_file *)b)->path);
}

const struct lr_bundle_file *lr_bundle_find(const struct lr_bundle *b, const char *path)
{
	struct lr_bundle_file key = { .path = (char *)path };
	if (!b->nfiles)
		return NULL;
	return bsearch(&key, b->files, b->nfiles, sizeof key, file_cmp);
}

const struct lr_bundle_file *lr_bundle_module(const struct lr_bundle *b, const char *name)
{
	char path[PATH_CAP + 16];
	size_t n = strlen(name);
	if (n > PATH_CAP)
		return NULL;
	for (size_t i = 0; i <= n; i++)
		path[i] = name[i] == '.' ? '/' : name[i];
	memcpy(path + n, ".lua", 5);
	const struct lr_bundle_file *f = lr_bundle_find(b, path);
	if (f)
		return f;
	memcpy(path + n, "/init.lua", 10);
	return lr_bundle_find(b, path);
}

/* ---- the manifest ---- */

/* A string field of o: *out = copy (or NULL when absent and optional). */
static int get_string(json_t *o, const char *key, int required, char **out,
		      struct lr_err *e)
{
	json_t *v = json_object_get(o, key);
	*out = NULL;
	if (!v) {
		if (required)
			return refuse(e, "manifest 'rig.json' lacks the field '%s'", key);
		return 0;
	}
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return refuse(e, "manifest 'rig.json': field '%s' must be a string", key);
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

static int is_hex64(const char *s)
{
	size_t i = 0;
	for (; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return i == 64;
}

static int parse_manifest(struct lr_bundle *b, const struct lr_bundle_limits *lim,
			  struct lr_err *e)
{
	char q[SHOW_LEN];
	char sz[32];
	json_error_t jerr;
	json_t *root = json_loadb(b->manifest, b->manifest_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return refuse(e, "manifest 'rig.json' is not valid JSON: %s at line %d",
			      jerr.text, jerr.line);
	int rc = 0;
	if (!json_is_object(root)) {
		rc = refuse(e, "manifest 'rig.json' is not a JSON object");
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		if (strcmp(key, "format") && strcmp(key, "name") && strcmp(key, "version") &&
		    strcmp(key, "entry") && strcmp(key, "description") &&
		    strcmp(key, "luarig") && strcmp(key, "files")) {
			rc = refuse(e, "manifest 'rig.json' has an unknown field '%s'",
				    show(key, q));
			goto out;
		}
	}
	json_t *fmt = json_object_get(root, "format");
	if (!fmt) {
		rc = refuse(e, "manifest 'rig.json' lacks the field 'format'");
		goto out;
	}
	if (!json_is_integer(fmt) || json_integer_value(fmt) != 1) {
		if (json_is_integer(fmt))
			rc = refuse(e, "manifest 'rig.json' has format %lld, this luarig reads format 1",
				    (long long)json_integer_value(fmt));
		else
			rc = refuse(e, "manifest 'rig.json': field 'format' must be an integer");
		goto out;
	}
	b->format = 1;
	if ((rc = get_string(root, "name", 1, &b->name, e)) ||
	    (rc = get_string(root, "version", 1, &b->version, e)) ||
	    (rc = get_string(root, "entry", 1, &b->entry, e)) ||
	    (rc = get_string(root, "luarig", 1, &b->luarig, e)) ||
	    (rc = get_string(root, "description", 0, &b->description, e)))
		goto out;
	if (!valid_name(b->name)) {
		rc = refuse(e, "manifest 'rig.json': name '%s' is not letters, digits, '.', '_', '-'",
			    show(b->name, q));
		goto out;
	}
	struct ver ver;
	if (parse_ver(b->version, &ver)) {
		rc = refuse(e, "manifest 'rig.json': version '%s' is not MAJOR.MINOR.PATCH",
			    show(b->version, q));
		goto out;
	}
	if (!valid_module(b->entry)) {
		rc = refuse(e, "manifest 'rig.json': entry '%s' is not a module name",
			    show(b->entry, q));
		goto out;
	}
	if (parse_ver(b->luarig, &ver)) {
		rc = refuse(e, "manifest 'rig.json': luarig '%s' is not MAJOR.MINOR.PATCH",
			    show(b->luarig, q));
		goto out;
	}
	int ok;
	if (lim->version && lr_bundle_vercmp(b->luarig, lim->version, &ok) > 0) {
		rc = refuse(e, "manifest 'rig.json' needs luarig %s or newer, this is %s",
			    b->luarig, lim->version);
		goto out;
	}
	json_t *files = json_object_get(root, "files");
	if (!files) {
		rc = refuse(e, "manifest 'rig.json' lacks the field 'files'");
		goto out;
	}
	if (!json_is_array(files)) {
		rc = refuse(e, "manifest 'rig.json': field 'files' must be an array");
		goto out;
	}
	size_t n = json_array_size(files);
	if (n + 1 > lim->max_entries) {
		rc = refuse(e, "manifest 'rig.json' lists %zu files, over the %zu entry cap",
			    n, lim->max_entries);
		goto out;
	}
	b->files = calloc(n ? n : 1, sizeof *b->files);
	if (!b->files) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *f = json_array_get(files, i);
		json_t *p = json_object_get(f, "path"), *jsz = json_object_get(f, "size"),
		       *h = json_object_get(f, "sha256");
		if (!json_is_object(f) || json_object_size(f) != 3 || !json_is_string(p) ||
		    !json_is_integer(jsz) || !json_is_string(h) ||
		    strlen(json_string_value(p)) != json_string_length(p)) {
			rc = refuse(e, "manifest 'rig.json': files[%zu] is not {path, size, sha256}",
				    i + 1);
			goto out;
		}
		const char *path = json_string_value(p);
		const char *why = path_problem(path);
		if (why) {
			rc = refuse(e, "entry '%s' in the manifest %s", show(path, q), why);
			goto out;
		}
		if (strcmp(path, "rig.json") == 0) {
			rc = refuse(e, "entry 'rig.json' is listed in its own manifest");
			goto out;
		}
		if (json_integer_value(jsz) < 0 || (uint64_t)json_integer_value(jsz) > lim->max_entry) {
			rc = refuse(e, "entry '%s' in the manifest is over the %s entry cap",
				    show(path, q), show_size(lim->max_entry, sz));
			goto out;
		}
		if (!is_hex64(json_string_value(h))) {
			rc = refuse(e, "entry '%s' in the manifest has a malformed sha256",
				    show(path, q));
			goto out;
		}
		b->files[i].path = strdup(path);
		if (!b->files[i].path) {
			rc = -ENOMEM;
			goto out;
		}
		b->nfiles = i + 1;
		b->files[i].size = (size_t)json_integer_value(jsz);
		memcpy(b->files[i].sha256, json_string_value(h), 65);
	}
	qsort(b->files, b->nfiles, sizeof *b->files, file_cmp);
	for (size_t i = 1; i < b->nfiles; i++)
		if (strcmp(b->files[i - 1].path, b->files[i].path) == 0) {
			rc = refuse(e, "entry '%s' is listed twice in the manifest",
				    show(b->files[i].path, q));
			goto out;
		}
	if (!lr_bundle_module(b, b->entry))
		rc = refuse(e, "entry module '%s' is not in the bundle", b->entry);
out:
	json_decref(root);
	return rc;
}

/* ---- reading ---- */

/*
 * The input is handed to libarchive in small blocks so that
 * archive_filter_bytes(a, -1) tells how much compressed input produced the
 * output so far: the ratio is then measured over every prefix, not over the
 * whole file.
 */
struct source {
	const unsigned char *data;
	size_t len, pos;
};

static la_ssize_t source_read(struct archive *a, void *arg, const void **buf)
{
	(void)a;
	struct source *s = arg;
	size_t n = s->len - s->pos;
	if (n > 16384)
		n = 16384;
	*buf = s->data + s->pos;
	s->pos += n;
	return (la_ssize_t)n;
}

struct reading {
	struct archive *a;
	const struct lr_bundle_limits *lim;
	size_t total;  /* entry bytes so far */
	struct lr_err *e;
};

static int check_ratio(struct reading *r, const char *name, size_t produced)
{
	char q[SHOW_LEN];
	la_int64_t out = lr_la.filter_bytes(r->a, 0), in = lr_la.filter_bytes(r->a, -1);
	if (out < 0 || (uint64_t)out < produced)
		out = (la_int64_t)produced;
	if (in < 1)
		in = 1;
	if ((uint64_t)out > r->lim->ratio_after &&
	    (uint64_t)out / (uint64_t)in > r->lim->max_ratio)
		return refuse(r->e,
			      "entry '%s' is a compression-ratio bomb (over %u:1)",
			      show(name, q), r->lim->max_ratio);
	return 0;
}

/* Reads the current entry's bytes into body, enforcing every cap as it goes. */
static int read_body(struct reading *r, const char *name, struct lr_buf *body)
{
	char q[SHOW_LEN];
	char sz[32];
	char chunk[65536];
	for (;;) {
		la_ssize_t n = lr_la.read_data(r->a, chunk, sizeof chunk);
		if (n < 0)
			return refuse(r->e, "entry '%s' is damaged: %s", show(name, q),
				      lr_la.error_string(r->a) ? lr_la.error_string(r->a) : "read error");
		if (n == 0)
			return 0;
		if (body->len + (size_t)n > r->lim->max_entry)
			return refuse(r->e, "entry '%s' is over the %s entry cap",
				      show(name, q), show_size(r->lim->max_entry, sz));
		r->total += (size_t)n;
		if (r->total > r->lim->max_total)
			return refuse(r->e,
				      "entry '%s' takes the bundle over the %s total cap",
				      show(name, q), show_size(r->lim->max_total, sz));
		int rc = check_ratio(r, name, r->total);
		if (rc)
			return rc;
		if ((rc = lr_buf_add(body, chunk, (size_t)n)))
			return rc == LR_ETOOBIG ? refuse(r->e,
				"entry '%s' is over the %s entry cap", show(name, q),
				show_size(r->lim->max_entry, sz)) : rc;
	}
}

static const char *type_problem(struct archive_entry *ae)
{
	if (lr_la.e_hardlink(ae))
		return "is a hard link";
	switch (lr_la.e_filetype(ae)) {
	case AE_IFREG:
	case AE_IFDIR:
		return NULL;
	case AE_IFLNK:
		return "is a symbolic link";
	case AE_IFCHR:
	case AE_IFBLK:
		return "is a device";
	case AE_IFIFO:
		return "is a fifo";
	case AE_IFSOCK:
		return "is a socket";
	default:
		return "has an unsupported type";
	}
}

static int read_entries(struct reading *r, struct lr_bundle *b, struct lr_err *e)
{
	char q[SHOW_LEN];
	char sz[32];
	char name[PATH_CAP + 2];
	unsigned char *seen = NULL;
	struct lr_buf body;
	lr_buf_init(&body, r->lim->max_entry + 1);
	size_t count = 0;
	int have_manifest = 0, rc = 0;
	for (;;) {
		struct archive_entry *ae;
		int h = lr_la.next_header(r->a, &ae);
		if (h == ARCHIVE_EOF)
			break;
		if (h < ARCHIVE_WARN) {
			const char *msg = lr_la.error_string(r->a) ? lr_la.error_string(r->a) : "read error";
			if (count)
				rc = refuse(e, "archive is damaged after entry '%s': %s",
					    show(name, q), msg);
			else
				rc = refuse(e, "not a bundle (gzip tar): %s", msg);
			goto out;
		}
		const char *p = lr_la.e_pathname(ae);
		if (!p) {
			rc = refuse(e, "entry %zu has no readable name", count + 1);
			goto out;
		}
		size_t plen = strlen(p);
		if (plen > PATH_CAP) {
			rc = refuse(e, "entry '%s' has a path over 1024 bytes", show(p, q));
			goto out;
		}
		memcpy(name, p, plen + 1);
		if ((rc = check_ratio(r, name, r->total)))
			goto out;
		if (++count > r->lim->max_entries) {
			rc = refuse(e, "entry '%s' is over the %zu entry cap", show(name, q),
				    r->lim->max_entries);
			goto out;
		}
		const char *why = type_problem(ae);
		if (why) {
			rc = refuse(e, "entry '%s' %s", show(name, q), why);
			goto out;
		}
		int dir = lr_la.e_filetype(ae) == AE_IFDIR;
		if (dir && plen > 1 && name[plen - 1] == '/')
			name[plen - 1] = '\0';
		if ((why = path_problem(name))) {
			rc = refuse(e, "entry '%s' %s", show(name, q), why);
			goto out;
		}
		if (lr_la.e_size_is_set(ae) && lr_la.e_size(ae) > (la_int64_t)r->lim->max_entry) {
			rc = refuse(e, "entry '%s' is over the %s entry cap",
				    show(name, q), show_size(r->lim->max_entry, sz));
			goto out;
		}
		lr_buf_reset(&body);
		if ((rc = read_body(r, name, &body)))
			goto out;
		if (dir)
			continue; /* allowed, ignored: files carry their own paths */
		if (!body.data && (rc = lr_buf_add(&body, "", 0)))
			goto out;
		if (body.len >= 4 && memcmp(body.data, "\x1bLua", 4) == 0) {
			rc = refuse(e, "entry '%s' is precompiled Lua bytecode", show(name, q));
			goto out;
		}
		if (!have_manifest) {
			if (strcmp(name, "rig.json") != 0) {
				rc = refuse(e, "entry '%s' comes before the manifest 'rig.json'",
					    show(name, q));
				goto out;
			}
			b->manifest = lr_buf_take(&body, &b->manifest_len);
			lr_buf_init(&body, r->lim->max_entry + 1);
			if (!b->manifest) {
				rc = -ENOMEM;
				goto out;
			}
			if ((rc = parse_manifest(b, r->lim, e)))
				goto out;
			seen = calloc(b->nfiles + 1, 1);
			if (!seen) {
				rc = -ENOMEM;
				goto out;
			}
			have_manifest = 1;
			continue;
		}
		if (strcmp(name, "rig.json") == 0) {
			rc = refuse(e, "entry 'rig.json' appears twice");
			goto out;
		}
		struct lr_bundle_file *f = (struct lr_bundle_file *)lr_bundle_find(b, name);
		if (!f) {
			rc = refuse(e, "entry '%s' is not in the manifest", show(name, q));
			goto out;
		}
		size_t i = (size_t)(f - b->files);
		if (seen[i]) {
			rc = refuse(e, "entry '%s' appears twice", show(name, q));
			goto out;
		}
		seen[i] = 1;
		if (body.len != f->size) {
			rc = refuse(e, "entry '%s' is %zu bytes, the manifest says %zu",
				    show(name, q), body.len, f->size);
			goto out;
		}
		char hex[65];
		if ((rc = lr_sha256_hex(body.data, body.len, hex))) {
			lr_err_set(e, "cannot hash entry '%s': %s", show(name, q), lr_strerror(rc));
			goto out;
		}
		if (strcmp(hex, f->sha256) != 0) {
			rc = refuse(e, "entry '%s' fails its SHA-256 check", show(name, q));
			goto out;
		}
		f->data = (unsigned char *)lr_buf_take(&body, &f->size);
		lr_buf_init(&body, r->lim->max_entry + 1);
		if (!f->data) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (!have_manifest) {
		rc = refuse(e, "the archive has no manifest 'rig.json'");
		goto out;
	}
	for (size_t i = 0; i < b->nfiles; i++)
		if (!seen[i]) {
			rc = refuse(e, "entry '%s' is in the manifest but missing from the archive",
				    show(b->files[i].path, q));
			goto out;
		}
out:
	free(seen);
	lr_buf_release(&body);
	return rc;
}

int lr_bundle_read(const void *data, size_t len, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, struct lr_err *e)
{
	struct lr_bundle_limits dl;
	if (!lim) {
		lr_bundle_limits_default(&dl);
		lim = &dl;
	}
	*out = NULL;
	int rc = lr_libarchive_open(e);
	if (rc)
		return rc;
	struct lr_bundle *b = calloc(1, sizeof *b);
	struct archive *a = lr_la.read_new();
	if (!b || !a) {
		rc = -ENOMEM;
		lr_err_set(e, "%s", lr_strerror(rc));
		goto out;
	}
	lr_la.read_gzip(a);
	lr_la.read_tar(a);
	struct source src = { .data = data, .len = len };
	if (lr_la.read_open(a, &src, NULL, source_read, NULL) != ARCHIVE_OK) {
		rc = refuse(e, "not a bundle (gzip tar): %s",
			    lr_la.error_string(a) ? lr_la.error_string(a) : "unreadable");
		goto out;
	}
	struct reading r = { .a = a, .lim = lim, .e = e };
	rc = read_entries(&r, b, e);
	if (rc == -ENOMEM)
		lr_err_set(e, "%s", lr_strerror(rc));
out:
	if (a)
		lr_la.read_free(a);
	if (rc) {
		lr_bundle_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

/* Reads a whole file of at most cap bytes; *data is NUL-terminated. */
static int slurp_fd(int fd, size_t cap, char **data, size_t *len)
{
	struct lr_buf buf;
	lr_buf_init(&buf, cap);
	int rc = lr_read_fd(fd, &buf, 0);
	if (!rc && !buf.data)
		rc = lr_buf_add(&buf, "", 0);
	if (rc) {
		lr_buf_release(&buf);
		return rc;
	}
	*data = lr_buf_take(&buf, len);
	return 0;
}

int lr_bundle_load(const char *path, const struct lr_bundle_limits *lim,
		   struct lr_bundle **out, struct lr_err *e)
{
	struct lr_bundle_limits dl;
	if (!lim) {
		lr_bundle_limits_default(&dl);
		lim = &dl;
	}
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(e, "cannot open: %s", strerror(errno));
		return rc;
	}
	/* Compressed bytes are bounded too: gzip never grows data by a quarter. */
	size_t cap = lim->max_total + lim->max_total / 4 + MIB;
	char *data;
	size_t len;
	int rc = slurp_fd(fd, cap, &data, &len);
	close(fd);
	if (rc == LR_ETOOBIG)
		return refuse(e, "the file is over the %zu-byte cap", cap);
	if (rc) {
		lr_err_set(e, "cannot read: %s", lr_strerror(rc));
		return rc;
	}
	rc = lr_bundle_read(data, len, lim, out, e);
	free(data);
	return rc;
}

/* ---- writing ---- */

struct sink {
	struct lr_buf *out;
	int rc;
};

static la_ssize_t sink_write(struct archive *a, void *arg, const void *p, size_t n)
{
	(void)a;
	struct sink *s = arg;
	if ((s->rc = lr_buf_add(s->out, p, n)))
		return -1;
	return (la_ssize_t)n;
}

int lr_bundle_archive(const struct lr_bundle_entry *ent, size_t n, struct lr_buf *out,
		      struct lr_err *e)
{
	int rc = lr_libarchive_open(e);
	if (rc)
		return rc;
	struct archive *a = lr_la.write_new();
	struct archive_entry *ae = lr_la.e_new();
	struct sink sink = { .out = out };
	if (!a || !ae) {
		rc = -ENOMEM;
		goto fail;
	}
	/* No timestamp in the gzip header and no padding: the same tree gives the same bytes. */
	if (lr_la.write_gzip(a) != ARCHIVE_OK || lr_la.write_pax(a) != ARCHIVE_OK ||
	    lr_la.write_filter_option(a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
	    lr_la.write_last_block(a, 1) != ARCHIVE_OK ||
	    lr_la.write_open(a, &sink, NULL, sink_write, NULL) != ARCHIVE_OK)
		goto archive_fail;
	for (size_t i = 0; i < n; i++) {
		static const unsigned types[] = { AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFREG,
						  AE_IFCHR, AE_IFIFO };
		lr_la.e_free(ae);
		if (!(ae = lr_la.e_new())) {
			rc = -ENOMEM;
			goto fail;
		}
		int t = ent[i].type >= 0 && ent[i].type <= LR_BUNDLE_FIFO ? ent[i].type : LR_BUNDLE_REG;
		lr_la.e_set_pathname(ae, ent[i].path);
		lr_la.e_set_filetype(ae, types[t]);
		lr_la.e_set_perm(ae, t == LR_BUNDLE_DIR ? 0755 : t == LR_BUNDLE_SYMLINK ? 0777 : 0644);
		lr_la.e_set_mtime(ae, 0, 0);
		lr_la.e_set_size(ae, t == LR_BUNDLE_REG ? (la_int64_t)ent[i].size : 0);
		if (t == LR_BUNDLE_SYMLINK)
			lr_la.e_set_symlink(ae, ent[i].link);
		if (t == LR_BUNDLE_HARDLINK)
			lr_la.e_set_hardlink(ae, ent[i].link);
		if (lr_la.write_header(a, ae) < ARCHIVE_WARN)
			goto archive_fail;
		if (t == LR_BUNDLE_REG && ent[i].size &&
		    lr_la.write_data(a, ent[i].data, ent[i].size) != (la_ssize_t)ent[i].size)
			goto archive_fail;
	}
	if (lr_la.write_close(a) != ARCHIVE_OK)
		goto archive_fail;
	lr_la.e_free(ae);
	lr_la.write_free(a);
	return 0;
archive_fail:
	if (sink.rc) {
		rc = sink.rc;
		lr_err_set(e, "archive: %s", lr_strerror(rc));
	} else {
		rc = LR_EREFUSED;
		lr_err_set(e, "archive: %s",
			 lr_la.error_string(a) ? lr_la.error_string(a) : "write error");
	}
	goto out;
fail:
	lr_err_set(e, "%s", lr_strerror(rc));
out:
	if (ae)
		lr_la.e_free(ae);
	if (a)
		lr_la.write_free(a);
	return rc;
}

/* ---- packing ---- */

struct packfile {
	char *path;
	char *data;
	size_t size;
	char sha256[65];
};

struct packing {
	const char *dir;
	int rootfd;
	struct lr_bundle_limits lim;
	struct packfile *files;
	size_t n, alloc;
	size_t total;
	dev_t out_dev;
	ino_t out_ino;
	int have_out;
	void (*notice)(void *arg, const char *msg);
	int (*compile)(void *arg, const char *name, const void *data, size_t size,
		       struct lr_err *why);
	void *arg;
	struct lr_err *e;
};

static int pack_add(struct packing *p, const char *rel)
{
	char q[SHOW_LEN];
	if (p->n + 1 >= p->lim.max_entries)
		return refuse(p->e, "'%s/%s' is over the %zu entry cap", p->dir,
			      show(rel, q), p->lim.max_entries);
	if (p->n == p->alloc) {
		size_t na = p->alloc ? 2 * p->alloc : 64;
		struct packfile *nf = realloc(p->files, na * sizeof *nf);
		if (!nf)
			return -ENOMEM;
		p->files = nf;
		p->alloc = na;
	}
	struct packfile *f = &p->files[p->n];
	memset(f, 0, sizeof *f);
	if (!(f->path = strdup(rel)))
		return -ENOMEM;
	p->n++;
	return 0;
}

/* Walks a directory (fd, owned) whose path inside the bundle is prefix ("" at the top). */
static int pack_walk(struct packing *p, int fd, const char *prefix, int depth)
{
	char q[SHOW_LEN];
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		lr_err_set(p->e, "cannot read '%s/%s': %s", p->dir, prefix, strerror(-rc));
		return rc;
	}
	if (depth > 64) {
		closedir(d);
		return refuse(p->e, "'%s/%s' is nested too deeply", p->dir, show(prefix, q));
	}
	int rc = 0;
	struct dirent *de;
	char rel[PATH_CAP + 300];
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name);
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = -errno;
			lr_err_set(p->e, "cannot stat '%s/%s': %s", p->dir, show(rel, q),
				 strerror(errno));
			break;
		}
		if (S_ISDIR(st.st_mode) && de->d_name[0] == '.') {
			if (p->notice) {
				char msg[PATH_CAP + 400];
				snprintf(msg, sizeof msg, "pack: skipping the directory '%s/%s'",
					 p->dir, show(rel, q));
				p->notice(p->arg, msg);
			}
			continue;
		}
		const char *why = path_problem(rel);
		if (why) {
			rc = refuse(p->e, "'%s/%s' has a name a bundle cannot hold",
				    p->dir, show(rel, q));
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				rc = -errno;
				lr_err_set(p->e, "cannot open '%s/%s': %s", p->dir,
					 show(rel, q), strerror(errno));
				break;
			}
			if ((rc = pack_walk(p, sub, rel, depth + 1)))
				break;
		} else if (S_ISREG(st.st_mode)) {
			if (!*prefix && strcmp(de->d_name, "rig.json") == 0)
				continue; /* the author's manifest: its fields, not a file */
			if (p->have_out && st.st_dev == p->out_dev && st.st_ino == p->out_ino) {
				if (p->notice) {
					char msg[PATH_CAP + 400];
					snprintf(msg, sizeof msg, "pack: skipping the output '%s/%s'",
						 p->dir, show(rel, q));
					p->notice(p->arg, msg);
				}
				continue;
			}
			if ((rc = pack_add(p, rel)))
				break;
		} else {
			const char *what = S_ISLNK(st.st_mode) ? "a symbolic link" :
					   S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" :
					   S_ISFIFO(st.st_mode) ? "a fifo" :
					   S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
			rc = refuse(p->e, "'%s/%s' is %s; a bundle holds regular files only",
				    p->dir, show(rel, q), what);
			break;
		}
	}
	closedir(d);
	return rc;
}

static int packfile_cmp(const void *a, const void *b)
{
	return strcmp(((const struct packfile *)a)->path, ((const struct packfile *)b)->path);
}

static int pack_read(struct packing *p, struct packfile *f)
{
	char q[SHOW_LEN];
	char sz[32];
	int fd = openat(p->rootfd, f->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(p->e, "cannot open '%s/%s': %s", p->dir, show(f->path, q),
			 strerror(errno));
		return rc;
	}
	int rc = slurp_fd(fd, p->lim.max_entry, &f->data, &f->size);
	close(fd);
	if (rc == LR_ETOOBIG)
		return refuse(p->e, "'%s/%s' is over the %s entry cap", p->dir,
			      show(f->path, q), show_size(p->lim.max_entry, sz));
	if (rc) {
		lr_err_set(p->e, "cannot read '%s/%s': %s", p->dir, show(f->path, q),
			 lr_strerror(rc));
		return rc;
	}
	p->total += f->size;
	if (p->total > p->lim.max_total)
		return refuse(p->e, "'%s/%s' takes the bundle over the %s total cap",
			      p->dir, show(f->path, q), show_size(p->lim.max_total, sz));
	if (f->size >= 4 && memcmp(f->data, "\x1bLua", 4) == 0)
		return refuse(p->e, "'%s/%s' is precompiled Lua bytecode", p->dir,
			      show(f->path, q));
	if ((rc = lr_sha256_hex(f->data, f->size, f->sha256))) {
		lr_err_set(p->e, "cannot hash '%s/%s': %s", p->dir, show(f->path, q),
			 lr_strerror(rc));
		return rc;
	}
	return 0;
}

/* The author's rig.json, if any: name, version, entry, description. */
struct author {
	char *name, *version, *entry, *description;
};

static int author_string(struct packing *p, json_t *o, const char *key, char **out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return refuse(p->e, "'%s/rig.json': field '%s' must be a string",
			      p->dir, key);
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

static int read_author(struct packing *p, struct author *au)
{
	char q[SHOW_LEN];
	int fd = openat(p->rootfd, "rig.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ELOOP)
			return refuse(p->e, "'%s/rig.json' is a symbolic link; a bundle holds regular files only",
				      p->dir);
		int rc = -errno;
		lr_err_set(p->e, "cannot open '%s/rig.json': %s", p->dir, strerror(errno));
		return rc;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return refuse(p->e, "'%s/rig.json' is not a regular file", p->dir);
	}
	char *data;
	size_t len;
	int rc = slurp_fd(fd, AUTHOR_CAP, &data, &len);
	close(fd);
	if (rc) {
		lr_err_set(p->e, "cannot read '%s/rig.json': %s", p->dir, lr_strerror(rc));
		return rc;
	}
	json_error_t jerr;
	json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	free(data);
	if (!root)
		return refuse(p->e, "'%s/rig.json' is not valid JSON: %s at line %d",
			      p->dir, jerr.text, jerr.line);
	if (!json_is_object(root)) {
		json_decref(root);
		return refuse(p->e, "'%s/rig.json' is not a JSON object", p->dir);
	}
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		/* format, luarig and files are what pack writes: a re-pack ignores them. */
		if (strcmp(key, "name") && strcmp(key, "version") && strcmp(key, "entry") &&
		    strcmp(key, "description") && strcmp(key, "format") &&
		    strcmp(key, "luarig") && strcmp(key, "files")) {
			rc = refuse(p->e, "'%s/rig.json' has an unknown field '%s'",
				    p->dir, show(key, q));
			break;
		}
	}
	if (!rc && !(rc = author_string(p, root, "name", &au->name)) &&
	    !(rc = author_string(p, root, "version", &au->version)) &&
	    !(rc = author_string(p, root, "entry", &au->entry)))
		rc = author_string(p, root, "description", &au->description);
	json_decref(root);
	return rc;
}

static int write_atomic(const char *path, const void *data, size_t len, struct lr_err *e)
{
	size_t n = strlen(path);
	char *tmp = malloc(n + 16);
	if (!tmp)
		return -ENOMEM;
	snprintf(tmp, n + 16, "%s.tmp-XXXXXX", path);
	int fd = mkostemp(tmp, O_CLOEXEC);
	int rc = 0;
	if (fd < 0) {
		rc = -errno;
		lr_err_set(e, "cannot create '%s': %s", path, strerror(errno));
		free(tmp);
		return rc;
	}
	rc = lr_write_all(fd, data, len);
	if (!rc && (fchmod(fd, 0644) != 0 || fsync(fd) != 0))
		rc = -errno;
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc) {
		lr_err_set(e, "cannot write '%s': %s", path, strerror(-rc));
		unlink(tmp);
	}
	free(tmp);
	return rc;
}

/* The default bundle name: the directory's own name. */
static char *dir_basename(const char *dir)
{
	char *real = realpath(dir, NULL);
	if (!real)
		return NULL;
	const char *slash = strrchr(real, '/');
	char *name = strdup(slash && slash[1] ? slash + 1 : real);
	free(real);
	return name;
}

int lr_bundle_write(const char *dir, const char *out, const char *version,
		    void (*notice)(void *arg, const char *msg),
		    int (*compile)(void *arg, const char *name, const void *data, size_t size,
				   struct lr_err *why),
		    void *arg, char *written, size_t writtenlen, struct lr_err *e)
{
	char q[SHOW_LEN];
	struct packing p = { .dir = dir, .rootfd = -1, .notice = notice, .compile = compile,
			     .arg = arg, .e = e };
	struct author au = { 0 };
	struct lr_bundle_entry *entries = NULL;
	struct lr_buf arc;
	json_t *man = NULL;
	char *text = NULL, *outname = NULL;
	lr_bundle_limits_default(&p.lim);
	lr_buf_init(&arc, p.lim.max_total + p.lim.max_total / 4 + MIB);
	int rc = lr_libarchive_open(e);
	if (rc)
		goto out;

	p.rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p.rootfd < 0) {
		rc = -errno;
		lr_err_set(e, "cannot open the directory '%s': %s", dir, strerror(errno));
		goto out;
	}
	if ((rc = read_author(&p, &au)))
		goto out;
	if (!au.name && !(au.name = dir_basename(dir))) {
		rc = errno == ENOMEM ? -ENOMEM : -EINVAL;
		lr_err_set(e, "cannot resolve the name of '%s': %s", dir, strerror(errno));
		goto out;
	}
	if (!au.version && !(au.version = strdup("0.0.0"))) {
		rc = -ENOMEM;
		goto out;
	}
	if (!au.entry && !(au.entry = strdup("main"))) {
		rc = -ENOMEM;
		goto out;
	}
	struct ver ver;
	if (!valid_name(au.name)) {
		rc = refuse(e, "bundle name '%s' is not letters, digits, '.', '_', '-' (set 'name' in '%s/rig.json')",
			    show(au.name, q), dir);
		goto out;
	}
	if (parse_ver(au.version, &ver)) {
		rc = refuse(e, "'%s/rig.json': version '%s' is not MAJOR.MINOR.PATCH",
			    dir, show(au.version, q));
		goto out;
	}
	if (!valid_module(au.entry)) {
		rc = refuse(e, "'%s/rig.json': entry '%s' is not a module name", dir,
			    show(au.entry, q));
		goto out;
	}

	if (out) {
		outname = strdup(out);
	} else {
		size_t n = strlen(au.name) + strlen(au.version) + 6;
		if ((outname = malloc(n)))
			snprintf(outname, n, "%s-%s.rig", au.name, au.version);
	}
	if (!outname) {
		rc = -ENOMEM;
		goto out;
	}
	struct stat ost;
	if (stat(outname, &ost) == 0) {
		p.have_out = 1;
		p.out_dev = ost.st_dev;
		p.out_ino = ost.st_ino;
	}

	int fd = dup(p.rootfd);
	if (fd < 0) {
		rc = -errno;
		lr_err_set(e, "cannot read '%s': %s", dir, strerror(errno));
		goto out;
	}
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	if ((rc = pack_walk(&p, fd, "", 0)))
		goto out;
	qsort(p.files, p.n, sizeof *p.files, packfile_cmp);
	for (size_t i = 0; i < p.n; i++)
		if ((rc = pack_read(&p, &p.files[i])))
			goto out;

	/* The entry module must be there: "app.cli" is app/cli.lua or app/cli/init.lua. */
	{
		struct lr_bundle probe = { .files = NULL, .nfiles = 0 };
		struct lr_bundle_file *pf = calloc(p.n ? p.n : 1, sizeof *pf);
		if (!pf) {
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < p.n; i++)
			pf[i].path = p.files[i].path;
		probe.files = pf;
		probe.nfiles = p.n;
		int found = lr_bundle_module(&probe, au.entry) != NULL;
		free(pf);
		if (!found) {
			char path[600];
			size_t k = 0;
			for (const char *c = au.entry; *c && k < 500; c++)
				path[k++] = *c == '.' ? '/' : *c;
			path[k] = '\0';
			rc = refuse(e, "entry module '%s' is not in '%s' (no %s.lua or %s/init.lua)",
				    au.entry, dir, path, path);
			goto out;
		}
	}

	/* Every Lua file compiles, or nothing is written: syntax errors surface here, not at run. */
	if (p.compile) {
		size_t bad = 0;
		struct lr_err msg;
		char shown[2048], note[2200];
		for (size_t i = 0; i < p.n; i++) {
			size_t k = strlen(p.files[i].path);
			if (k < 4 || strcmp(p.files[i].path + k - 4, ".lua") != 0)
				continue;
			char name[PATH_CAP + 600];
			snprintf(name, sizeof name, "%s/%s", dir, p.files[i].path);
			lr_err_clear(&msg);
			if (p.compile(arg, name, p.files[i].data, p.files[i].size, &msg) == 0)
				continue;
			bad++;
			if (notice) {
				snprintf(note, sizeof note, "pack: %s",
					 show_cut(msg.msg[0] ? msg.msg : name, shown, sizeof shown, 0));
				notice(arg, note);
			}
		}
		if (bad) {
			rc = refuse(e, "%zu Lua file%s not compile; nothing was written", bad,
				    bad == 1 ? " does" : "s do");
			goto out;
		}
	}

	man = json_object();
	json_t *files = json_array();
	if (!man || !files) {
		json_decref(files);
		rc = -ENOMEM;
		goto out;
	}
	json_object_set_new(man, "format", json_integer(1));
	json_object_set_new(man, "name", json_string(au.name));
	json_object_set_new(man, "version", json_string(au.version));
	json_object_set_new(man, "entry", json_string(au.entry));
	if (au.description)
		json_object_set_new(man, "description", json_string(au.description));
	json_object_set_new(man, "luarig", json_string(version));
	for (size_t i = 0; i < p.n; i++) {
		json_t *f = json_object();
		if (!f) {
			json_decref(files);
			rc = -ENOMEM;
			goto out;
		}
		json_object_set_new(f, "path", json_string(p.files[i].path));
		json_object_set_new(f, "size", json_integer((json_int_t)p.files[i].size));
		json_object_set_new(f, "sha256", json_string(p.files[i].sha256));
		json_array_append_new(files, f);
	}
	json_object_set_new(man, "files", files);
	char *body = json_dumps(man, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!body || asprintf(&text, "%s\n", body) < 0) {
		free(body);
		text = NULL;
		rc = -ENOMEM;
		goto out;
	}
	free(body);

	entries = calloc(p.n + 1, sizeof *entries);
	if (!entries) {
		rc = -ENOMEM;
		goto out;
	}
	entries[0] = (struct lr_bundle_entry){ .path = "rig.json", .type = LR_BUNDLE_REG,
					       .data = text, .size = strlen(text) };
	for (size_t i = 0; i < p.n; i++)
		entries[i + 1] = (struct lr_bundle_entry){ .path = p.files[i].path,
			.type = LR_BUNDLE_REG, .data = p.files[i].data, .size = p.files[i].size };
	if ((rc = lr_bundle_archive(entries, p.n + 1, &arc, e)))
		goto out;
	if ((rc = write_atomic(outname, arc.data, arc.len, e)))
		goto out;
	snprintf(written, writtenlen, "%s", outname);
out:
	if (rc == -ENOMEM)
		lr_err_set(e, "%s", lr_strerror(rc));
	for (size_t i = 0; i < p.n; i++) {
		free(p.files[i].path);
		free(p.files[i].data);
	}
	free(p.files);
	if (p.rootfd >= 0)
		close(p.rootfd);
	free(au.name);
	free(au.version);
	free(au.entry);
	free(au.description);
	free(entries);
	free(text);
	free(outname);
	json_decref(man);
	lr_buf_release(&arc);
	return rc;
}
