/*
 * tar.c — snapshots to and from tar archives, through libarchive opened
 * lazily (util/libarchive.h, the table host/bundle.c uses too).
 *
 * Import treats the archive as hostile: it builds the tree in memory and
 * writes only blobs into the store, never the file system, and refuses
 * anything that could not be restored safely inside one directory
 * (absolute paths, "..", links, devices, duplicates, size bombs).
 */
#include "snapshot_internal.h"
#include "../util/libarchive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SMALL_FILE ((uint64_t)1 << 20)
#define CHUNK ((size_t)1 << 16)
#define DEPTH_MAX 256
#define HOPS_MAX 40

static int la_open(struct lr_err *e)
{
	struct lr_err why;
	int rc = lr_libarchive_open(&why);
	if (rc)
		lr_err_set(e, "snapshot: libarchive is unavailable: %s", why.msg);
	return rc ? rc : lr__snap_crypto_ready(e);
}

/* A name from outside, safe to print: control bytes as '?', at most 200 bytes. */
static const char *show(const char *s, char buf[256])
{
	size_t i = 0;
	for (; s && s[i] && i < 200; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = 0;
	if (s && s[i])
		strcpy(buf + i, "...");
	return buf;
}

/* ---- import ---- */

struct inode {
	char *name;
	char type;
	uint16_t mode;
	int explicit;
	uint64_t size;
	unsigned char hash[LR_SHA256_LEN];
	char *target;
	struct inode **kids;
	size_t nkids, cap;
	struct inode *parent;
};

/* Full normalized path -> node, open addressing. */
struct pmap {
	struct {
		char *path;
		struct inode *node;
	} *v;
	size_t n, cap;
};

struct imp {
	struct lr_snap *sn;
	struct archive *a;
	struct inode root;
	struct pmap map;
	uint64_t entries, bytes, files;
	char *buf;
};

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct inode *pmap_get(const struct pmap *m, const char *path)
{
	if (!m->cap)
		return NULL;
	size_t i = (size_t)fnv(path) & (m->cap - 1);
	while (m->v[i].path) {
		if (strcmp(m->v[i].path, path) == 0)
			return m->v[i].node;
		i = (i + 1) & (m->cap - 1);
	}
	return NULL;
}

static int pmap_put(struct pmap *m, char *path, struct inode *node)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t nc = m->cap ? 2 * m->cap : 256;
		struct pmap nm = { calloc(nc, sizeof *m->v), 0, nc };
		if (!nm.v)
			return -ENOMEM;
		for (size_t i = 0; i < m->cap; i++)
			if (m->v[i].path)
				pmap_put(&nm, m->v[i].path, m->v[i].node);
		free(m->v);
		*m = nm;
	}
	size_t i = (size_t)fnv(path) & (m->cap - 1);
	while (m->v[i].path)
		i = (i + 1) & (m->cap - 1);
	m->v[i].path = path;
	m->v[i].node = node;
	m->n++;
	return 0;
}

static void inode_release(struct inode *nd)
{
	for (size_t i = 0; i < nd->nkids; i++) {
		inode_release(nd->kids[i]);
		free(nd->kids[i]);
	}
	free(nd->kids);
	free(nd->name);
	free(nd->target);
}

static struct inode *add_child(struct inode *dir, const char *name, size_t nl)
{
	if (dir->nkids == dir->cap) {
		size_t nc = dir->cap ? 2 * dir->cap : 8;
		void *p = realloc(dir->kids, nc * sizeof *dir->kids);
		if (!p)
			return NULL;
		dir->kids = p;
		dir->cap = nc;
	}
	struct inode *nd = calloc(1, sizeof *nd);
	if (!nd || !(nd->name = strndup(name, nl))) {
		free(nd);
		return NULL;
	}
	nd->parent = dir;
	dir->kids[dir->nkids++] = nd;
	return nd;
}

__attribute__((format(printf, 3, 4)))
static int refuse(struct lr_err *e, int rc, const char *fmt, ...)
{
	char msg[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	lr_err_set(e, "snapshot: import refused: %s", msg);
	return rc;
}

/*
 * Normalizes an archive path into '/'-joined segments: "./" and "." and
 * empty segments dropped; absolute paths and ".." refused. out holds the
 * result ("" for the root).
 */
static int normalize(const char *p, char *out, size_t cap, int *depth, struct lr_err *e)
{
	char sb[256];
	if (p[0] == '/')
		return refuse(e, LR_EREFUSED, "absolute path '%s'", show(p, sb));
	size_t o = 0;
	*depth = 0;
	while (*p) {
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - s);
		while (*p == '/')
			p++;
		if (n == 0 || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return refuse(e, LR_EREFUSED, "'..' in path '%s'", show(s, sb));
		if (n > LR__SNAP_NAME_MAX)
			return refuse(e, LR_EREFUSED, "a name longer than %d bytes", LR__SNAP_NAME_MAX);
		if (o + n + 2 > cap)
			return refuse(e, LR_EREFUSED, "path too long");
		if (o)
			out[o++] = '/';
		memcpy(out + o, s, n);
		o += n;
		if (++*depth > DEPTH_MAX)
			return refuse(e, LR_EREFUSED, "path nested deeper than %d levels", DEPTH_MAX);
	}
	out[o] = 0;
	return 0;
}

/* The directory node for path (creating implicit directories), or a refusal. */
static int dir_of(struct imp *im, char *path, size_t len, struct inode **out, struct lr_err *e)
{
	if (len == 0) {
		*out = &im->root;
		return 0;
	}
	char saved = path[len];
	path[len] = 0;
	struct inode *nd = pmap_get(&im->map, path);
	int rc = 0;
	if (nd) {
		if (nd->type != 'd') {
			char sb[256];
			rc = refuse(e, LR_EREFUSED, "path through a non-directory '%s'", show(path, sb));
		}
	} else {
		char *slash = strrchr(path, '/');
		size_t plen = slash ? (size_t)(slash - path) : 0;
		const char *name = slash ? slash + 1 : path;
		struct inode *parent;
		rc = dir_of(im, path, plen, &parent, e);
		if (!rc) {
			nd = add_child(parent, name, strlen(name));
			char *key = nd ? strdup(path) : NULL;
			if (!key)
				rc = -ENOMEM;
			else if ((rc = pmap_put(&im->map, key, nd)))
				free(key);
			if (nd) {
				nd->type = 'd';
				nd->mode = 0755;
			}
		}
	}
	path[len] = saved;
	*out = nd;
	return rc;
}

/* Reads the entry's data, hashes it and stores it as a blob. */
static int import_data(struct imp *im, struct inode *nd, const char *path, uint64_t declared,
		       struct lr_err *e)
{
	char sb[256];
	struct lr_sha256 h;
	int rc = lr_sha256_begin(&h);
	if (rc)
		return rc;
	struct lr_buf mem;
	lr_buf_init(&mem, SMALL_FILE);
	int tmpfd = -1;
	if (declared > SMALL_FILE) {
		const char *dir = getenv("TMPDIR");
		tmpfd = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (tmpfd < 0) {
			rc = -errno;
			lr_err_set(e, "snapshot: import: cannot make a temporary file: %s",
				   lr_strerror(rc));
			goto out;
		}
	}
	uint64_t got = 0;
	for (;;) {
		la_ssize_t n = lr_la.read_data(im->a, im->buf, CHUNK);
		if (n < 0) {
			rc = LR_EPARSE;
			lr_err_set(e, "snapshot: import: reading '%s' failed: %s", show(path, sb),
				   lr_la.error_string(im->a));
			goto out;
		}
		if (n == 0)
			break;
		got += (uint64_t)n;
		if (got > declared || im->bytes + got > im->sn->import_max_bytes) {
			rc = refuse(e, LR_EREFUSED, "more than %llu bytes of file data",
				    (unsigned long long)im->sn->import_max_bytes);
			goto out;
		}
		if ((rc = lr_sha256_update(&h, im->buf, (size_t)n)))
			goto out;
		if (tmpfd >= 0) {
			size_t off = 0;
			while (off < (size_t)n) {
				ssize_t w = write(tmpfd, im->buf + off, (size_t)n - off);
				if (w < 0 && errno == EINTR)
					continue;
				if (w < 0) {
					rc = -errno;
					lr_err_set(e, "snapshot: import: temporary file: %s",
						   lr_strerror(rc));
					goto out;
				}
				off += (size_t)w;
			}
		} else if ((rc = lr_buf_add(&mem, im->buf, (size_t)n))) {
			goto out;
		}
	}
	if (got != declared) {
		rc = LR_EPARSE;
		lr_err_set(e, "snapshot: import: '%s' is truncated", show(path, sb));
		goto out;
	}
	rc = lr_sha256_end(&h, nd->hash);
	h.ctx = NULL;
	if (rc)
		goto out;
	im->bytes += got;
	nd->size = got;
	char key[128];
	lr__snap_blob_key(key, "blobs", nd->hash);
	uint64_t have;
	rc = lr_store_blob_stat(im->sn->store, key, &have, e);
	if (rc == LR_ENOTFOUND) {
		if (tmpfd >= 0)
			rc = lseek(tmpfd, 0, SEEK_SET) == 0
				     ? lr_store_blob_put_fd(im->sn->store, key, tmpfd, got, e)
				     : -errno;
		else
			rc = lr_store_blob_put(im->sn->store, key, mem.data ? mem.data : "", mem.len, e);
	}
out:
	if (h.ctx)
		lr_sha256_abort(&h);
	lr_buf_release(&mem);
	if (tmpfd >= 0)
		close(tmpfd);
	return rc;
}

static int import_entry(struct imp *im, struct archive_entry *ae, struct lr_err *e)
{
	char sb[256];
	const char *raw = lr_la.e_pathname(ae);
	if (!raw || !*raw)
		return refuse(e, LR_EREFUSED, "an entry without a path");
	if (++im->entries > im->sn->import_max_entries)
		return refuse(e, LR_EREFUSED, "more than %llu entries",
			      (unsigned long long)im->sn->import_max_entries);
	if (lr_la.e_hardlink(ae))
		return refuse(e, LR_EREFUSED, "hard link '%s'", show(raw, sb));
	unsigned ft = lr_la.e_filetype(ae);
	if (ft == AE_IFCHR || ft == AE_IFBLK)
		return refuse(e, LR_EREFUSED, "device '%s'", show(raw, sb));
	if (ft == AE_IFIFO)
		return refuse(e, LR_EREFUSED, "fifo '%s'", show(raw, sb));
	if (ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK)
		return refuse(e, LR_EREFUSED, "unsupported entry type of '%s'", show(raw, sb));
	char path[4096];
	int depth;
	int rc = normalize(raw, path, sizeof path, &depth, e);
	if (rc)
		return rc;
	if (!*path) {
		if (ft != AE_IFDIR)
			return refuse(e, LR_EREFUSED, "a non-directory at the root");
		return 0;
	}
	struct inode *nd = pmap_get(&im->map, path);
	if (nd) {
		if (ft != AE_IFDIR || nd->type != 'd' || nd->explicit)
			return refuse(e, LR_EREFUSED, "duplicate entry '%s'", show(path, sb));
	} else {
		char *slash = strrchr(path, '/');
		size_t plen = slash ? (size_t)(slash - path) : 0;
		const char *name = slash ? slash + 1 : path;
		struct inode *parent;
		if ((rc = dir_of(im, path, plen, &parent, e)))
			return rc;
		nd = add_child(parent, name, strlen(name));
		char *key = nd ? strdup(path) : NULL;
		if (!key)
			return -ENOMEM;
		if ((rc = pmap_put(&im->map, key, nd))) {
			free(key);
			return rc;
		}
	}
	nd->explicit = 1;
	nd->mode = (uint16_t)(lr_la.e_perm(ae) & 0777);
	if (ft == AE_IFDIR) {
		nd->type = 'd';
		return 0;
	}
	if (ft == AE_IFLNK) {
		nd->type = 'l';
		nd->mode = 0;
		const char *t = lr_la.e_symlink(ae);
		size_t tl = t ? strlen(t) : 0;
		if (tl == 0 || tl > LR__SNAP_TARGET_MAX)
			return refuse(e, LR_EREFUSED, "symlink '%s' with an empty or long target",
				      show(path, sb));
		if (t[0] == '/')
			return refuse(e, LR_EREFUSED, "symlink '%s' to an absolute path",
				      show(path, sb));
		nd->target = strdup(t);
		nd->size = tl;
		return nd->target ? 0 : -ENOMEM;
	}
	nd->type = 'f';
	im->files++;
	uint64_t declared = lr_la.e_size_is_set(ae) ? (uint64_t)lr_la.e_size(ae) : 0;
	if (lr_la.e_size(ae) < 0 || declared > im->sn->import_max_bytes - im->bytes)
		return refuse(e, LR_EREFUSED, "'%s' would exceed %llu bytes of file data",
			      show(path, sb), (unsigned long long)im->sn->import_max_bytes);
	return import_data(im, nd, path, declared, e);
}

static int inode_cmp(const void *a, const void *b)
{
	return strcmp((*(struct inode *const *)a)->name, (*(struct inode *const *)b)->name);
}

static void sort_all(struct inode *dir)
{
	if (dir->nkids > 1)
		sort_n(dir->kids, dir->nkids, sizeof *dir->kids, inode_cmp);
	for (size_t i = 0; i < dir->nkids; i++)
		if (dir->kids[i]->type == 'd')
			sort_all(dir->kids[i]);
}

static struct inode *child(struct inode *dir, const char *name, size_t nl)
{
	char key[LR__SNAP_NAME_MAX + 1];
	if (!dir || !dir->nkids || nl > LR__SNAP_NAME_MAX)
		return NULL;
	memcpy(key, name, nl);
	key[nl] = 0;
	struct inode k = { .name = key }, *kp = &k;
	struct inode **f = bsearch(&kp, dir->kids, dir->nkids, sizeof *dir->kids, inode_cmp);
	return f ? *f : NULL;
}

/*
 * Resolves target from directory cur the way the kernel would, following
 * symlinks inside the tree; 1 if it ever climbs above the root. A missing
 * component (or a file) is followed lexically: *virt counts the levels
 * below the last real directory *at.
 */
static int resolve(struct inode *cur, const char *target, int *hops, struct inode **at,
		   int *virt)
{
	if (++*hops > HOPS_MAX)
		return 1;
	int v = 0;
	const char *p = target;
	while (*p) {
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - s);
		while (*p == '/')
			p++;
		if (n == 0 || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			if (v)
				v--;
			else if (!cur->parent)
				return 1;
			else
				cur = cur->parent;
			continue;
		}
		if (v) {
			v++;
			continue;
		}
		struct inode *c = child(cur, s, n);
		if (!c || c->type == 'f') {
			v++;
		} else if (c->type == 'd') {
			cur = c;
		} else if (resolve(cur, c->target, hops, &cur, &v)) {
			return 1;
		}
	}
	*at = cur;
	*virt = v;
	return 0;
}

static int escapes(struct inode *dir, const char *target)
{
	int hops = 0, virt;
	struct inode *at;
	return resolve(dir, target, &hops, &at, &virt);
}

static int check_links(struct inode *dir, const char *rel, struct lr_err *e)
{
	for (size_t i = 0; i < dir->nkids; i++) {
		struct inode *nd = dir->kids[i];
		char sb[256], path[4096];
		snprintf(path, sizeof path, "%s%s%s", rel, *rel ? "/" : "", nd->name);
		if (nd->type == 'l' && escapes(dir, nd->target))
			return refuse(e, LR_EREFUSED, "symlink '%s' escapes the tree", show(path, sb));
		if (nd->type == 'd') {
			int rc = check_links(nd, path, e);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int put_tree(struct imp *im, struct inode *dir, struct lr_err *e)
{
	struct lr__snap_tree t = { 0 };
	int rc = 0;
	for (size_t i = 0; i < dir->nkids && !rc; i++) {
		struct inode *nd = dir->kids[i];
		if (nd->type == 'd' && (rc = put_tree(im, nd, e)))
			break;
		struct lr__snap_ent en = { .name = nd->name, .nlen = strlen(nd->name),
					   .type = nd->type, .mode = nd->mode, .size = nd->size,
					   .target = nd->target };
		if (en.type == 'd')
			en.size = 0;
		memcpy(en.hash, nd->hash, LR_SHA256_LEN);
		rc = lr__snap_tree_add(&t, &en);
	}
	if (!rc)
		rc = lr__snap_tree_put(im->sn->store, &t, dir->hash, e);
	lr__snap_tree_release(&t);
	return rc;
}

static int import_archive(struct lr_snap *sn, const char *file, const void *data, size_t len,
			  char ref[LR_SNAP_REF_MAX], struct lr_err *e)
{
	ref[0] = 0;
	int rc = la_open(e);
	if (rc)
		return rc;
	struct imp im = { .sn = sn };
	im.root.type = 'd';
	im.buf = malloc(CHUNK);
	im.a = lr_la.read_new();
	if (!im.buf || !im.a) {
		rc = -ENOMEM;
		goto out;
	}
	lr_la.read_tar(im.a);
	lr_la.read_gzip(im.a);
	int r = file ? lr_la.read_open_filename(im.a, file, 1 << 16)
		     : lr_la.read_open_memory(im.a, data, len);
	if (r != ARCHIVE_OK) {
		rc = file && access(file, R_OK) != 0 ? -errno : LR_EPARSE;
		lr_err_set(e, "snapshot: import: cannot open '%s': %s", file ? file : "(memory)",
			   lr_la.error_string(im.a));
		goto out;
	}
	for (;;) {
		struct archive_entry *ae;
		r = lr_la.next_header(im.a, &ae);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			rc = LR_EPARSE;
			lr_err_set(e, "snapshot: import: malformed archive: %s",
				   lr_la.error_string(im.a) ? lr_la.error_string(im.a) : "unknown error");
			goto out;
		}
		if ((rc = import_entry(&im, ae, e)))
			goto out;
	}
	sort_all(&im.root);
	if ((rc = check_links(&im.root, "", e)))
		goto out;
	if ((rc = put_tree(&im, &im.root, e)))
		goto out;
	lr__snap_ref_format(im.root.hash, ref);
	rc = lr__snap_index_put(sn, im.root.hash, im.files, im.bytes, e);
out:
	if (rc == -ENOMEM)
		lr_err_set(e, "snapshot: import: out of memory");
	if (rc)
		ref[0] = 0;
	if (im.a)
		lr_la.read_free(im.a);
	for (size_t i = 0; i < im.map.cap; i++)
		free(im.map.v[i].path);
	free(im.map.v);
	inode_release(&im.root);
	free(im.buf);
	return rc;
}

int lr_snap_import(struct lr_snap *sn, const char *file, char ref[LR_SNAP_REF_MAX],
		   struct lr_err *e)
{
	return import_archive(sn, file, NULL, 0, ref, e);
}

int lr_snap_import_mem(struct lr_snap *sn, const void *data, size_t len,
		       char ref[LR_SNAP_REF_MAX], struct lr_err *e)
{
	return import_archive(sn, NULL, data, len, ref, e);
}

/* ---- export ---- */

struct exp {
	struct lr_snap *sn;
	struct archive *a;
	struct archive_entry *ae;
	char *buf;
};

static int ar_fail(struct exp *x, const char *path, struct lr_err *e)
{
	lr_err_set(e, "snapshot: export: writing '%s' failed: %s", path,
		   lr_la.error_string(x->a) ? lr_la.error_string(x->a) : "unknown error");
	return -EIO;
}

static int export_file(struct exp *x, const struct lr__snap_ent *en, const char *path,
		       struct lr_err *e)
{
	char key[128];
	lr__snap_blob_key(key, "blobs", en->hash);
	if (en->size <= SMALL_FILE) {
		struct lr_bytes b;
		int rc = lr_store_blob_get(x->sn->store, key, &b, e);
		if (rc)
			return rc;
		if (b.len != en->size) {
			lr_bytes_release(&b);
			lr_err_set(e, "snapshot: export: the blob of '%s' is corrupt", path);
			return LR_ECORRUPT;
		}
		la_ssize_t w = b.len ? lr_la.write_data(x->a, b.data, b.len) : 0;
		lr_bytes_release(&b);
		return w < 0 || (size_t)w != en->size ? ar_fail(x, path, e) : 0;
	}
	/* Large: through a temporary file, never whole in memory. */
	const char *dir = getenv("TMPDIR");
	int fd = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(e, "snapshot: export: cannot make a temporary file: %s", lr_strerror(rc));
		return rc;
	}
	uint64_t len = 0;
	int rc = lr_store_blob_get_fd(x->sn->store, key, fd, &len, e);
	if (!rc && len != en->size) {
		rc = LR_ECORRUPT;
		lr_err_set(e, "snapshot: export: the blob of '%s' is corrupt", path);
	}
	if (!rc && lseek(fd, 0, SEEK_SET) != 0)
		rc = -errno;
	while (!rc) {
		ssize_t n = read(fd, x->buf, CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = -errno;
		if (n <= 0)
			break;
		if (lr_la.write_data(x->a, x->buf, (size_t)n) != n)
			rc = ar_fail(x, path, e);
	}
	close(fd);
	return rc;
}

static int export_tree(struct exp *x, const unsigned char hash[LR_SHA256_LEN], const char *rel,
		       int depth, struct lr_err *e)
{
	if (depth > DEPTH_MAX)
		return LR_ETOOBIG;
	struct lr__snap_tree t = { 0 };
	int rc = lr__snap_tree_get(x->sn->store, hash, &t, e);
	for (size_t i = 0; !rc && i < t.n; i++) {
		const struct lr__snap_ent *en = &t.e[i];
		size_t pl = strlen(rel) + en->nlen + 3;
		char *path = malloc(pl);
		if (!path) {
			rc = -ENOMEM;
			break;
		}
		snprintf(path, pl, "%s%s%s%s", rel, *rel ? "/" : "", en->name,
			 en->type == 'd' ? "/" : "");
		lr_la.e_clear(x->ae);
		lr_la.e_set_pathname(x->ae, path);
		lr_la.e_set_mtime(x->ae, 0, 0);
		if (en->type == 'd') {
			lr_la.e_set_filetype(x->ae, AE_IFDIR);
			lr_la.e_set_perm(x->ae, en->mode);
		} else if (en->type == 'l') {
			lr_la.e_set_filetype(x->ae, AE_IFLNK);
			lr_la.e_set_perm(x->ae, 0777);
			lr_la.e_set_symlink(x->ae, en->target);
		} else {
			lr_la.e_set_filetype(x->ae, AE_IFREG);
			lr_la.e_set_perm(x->ae, en->mode);
			lr_la.e_set_size(x->ae, (la_int64_t)en->size);
		}
		if (lr_la.write_header(x->a, x->ae) < ARCHIVE_WARN)
			rc = ar_fail(x, path, e);
		else if (en->type == 'f')
			rc = export_file(x, en, path, e);
		else if (en->type == 'd') {
			path[strlen(path) - 1] = 0;
			rc = export_tree(x, en->hash, path, depth + 1, e);
		}
		free(path);
	}
	lr__snap_tree_release(&t);
	return rc;
}

int lr_snap_export(struct lr_snap *sn, const char *ref, const char *file, struct lr_err *e)
{
	unsigned char root[LR_SHA256_LEN];
	if (lr_snap_ref_parse(ref, root)) {
		lr_err_set(e, "snapshot: invalid ref '%.100s' (want v1:sha256:<64 hex>)", ref);
		return LR_EPARSE;
	}
	int rc = la_open(e);
	if (rc)
		return rc;
	/* The ref must exist before anything is created. */
	struct lr__snap_tree t = { 0 };
	rc = lr__snap_tree_get(sn->store, root, &t, e);
	lr__snap_tree_release(&t);
	if (rc) {
		if (rc == LR_ENOTFOUND)
			lr_err_set(e, "snapshot: ref '%s' not found", ref);
		return rc;
	}
	size_t tl = strlen(file) + 32;
	char *tmp = malloc(tl);
	struct exp x = { .sn = sn };
	x.buf = malloc(CHUNK);
	x.a = lr_la.write_new();
	x.ae = lr_la.e_new();
	if (!tmp || !x.buf || !x.a || !x.ae) {
		rc = -ENOMEM;
		lr_err_set(e, "snapshot: export: out of memory");
		goto out;
	}
	snprintf(tmp, tl, "%s.tmp%ld", file, (long)getpid());
	lr_la.write_gnutar(x.a);
	if (lr_la.write_open_filename(x.a, tmp) != ARCHIVE_OK) {
		rc = -EIO;
		lr_err_set(e, "snapshot: export: cannot create '%s': %s", file,
			   lr_la.error_string(x.a));
		goto out;
	}
	rc = export_tree(&x, root, "", 0, e);
	if (lr_la.write_close(x.a) != ARCHIVE_OK && !rc)
		rc = ar_fail(&x, file, e);
	if (!rc && rename(tmp, file) != 0) {
		rc = -errno;
		lr_err_set(e, "snapshot: export: cannot rename to '%s': %s", file, lr_strerror(rc));
	}
	if (rc)
		unlink(tmp);
out:
	if (x.ae)
		lr_la.e_free(x.ae);
	if (x.a)
		lr_la.write_free(x.a);
	free(x.buf);
	free(tmp);
	return rc;
}
