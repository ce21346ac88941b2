/*
 * snapshot.c — content-addressed workspace snapshots (docs/storage.md): capture
 * with a stat cache and worker threads, restore, rewind in place, diff,
 * garbage collection and the ref index. The format is documented in
 * storage.h; tar import and export live in tar.c.
 */
#include "snapshot_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SMALL_FILE ((uint64_t)1 << 20) /* read whole, hash and put from memory */
#define IO_CHUNK ((size_t)1 << 20)
#define DEPTH_MAX 256
#define MAGIC "lrtree1\n"
#define MAGIC_LEN 8
#define CACHE_MAGIC "lrstat3\n" /* lrstat2 had no directory records */
/* kv key of the GC generation: bumped by every GC before it deletes anything. */
#define GC_KEY "workspaces/gc"

/* ---- small helpers ---- */

static void put_u16(unsigned char *p, unsigned v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static void put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (56 - 8 * i));
}

static uint64_t get_be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static int unhex(const char *s, unsigned char *out, size_t n)
{
	for (size_t i = 0; i < 2 * n; i++) {
		char c = s[i];
		int v;
		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else
			return -1;
		if (i % 2 == 0)
			out[i / 2] = (unsigned char)(v << 4);
		else
			out[i / 2] |= (unsigned char)v;
	}
	return 0;
}

void lr__snap_blob_key(char *key, const char *kind, const unsigned char hash[LR_SHA256_LEN])
{
	size_t n = (size_t)sprintf(key, "workspaces/%s/", kind);
	lr_hex(hash, LR_SHA256_LEN, key + n);
	key[n + 2 * LR_SHA256_LEN] = 0;
}

void lr__snap_ref_format(const unsigned char hash[LR_SHA256_LEN], char ref[LR_SNAP_REF_MAX])
{
	memcpy(ref, "v1:sha256:", 10);
	lr_hex(hash, LR_SHA256_LEN, ref + 10);
	ref[10 + 2 * LR_SHA256_LEN] = 0;
}

int lr_snap_ref_parse(const char *ref, unsigned char hash[LR_SHA256_LEN])
{
	if (!ref || strncmp(ref, "v1:sha256:", 10) != 0 || strlen(ref) != 10 + 2 * LR_SHA256_LEN ||
	    unhex(ref + 10, hash, LR_SHA256_LEN))
		return LR_EPARSE;
	return 0;
}

static int bad_ref(const char *ref, struct lr_err *e)
{
	lr_err_set(e, "snapshot: invalid ref '%.100s' (want v1:sha256:<64 hex>)", ref ? ref : "");
	return LR_EPARSE;
}

static uint64_t ts_ns(const struct timespec *t)
{
	return (uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_nsec;
}

static uint64_t wall_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return ts_ns(&t);
}

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;
static int crypto_rc;

static void crypto_init(void)
{
	unsigned char h[LR_SHA256_LEN];
	crypto_rc = lr_sha256("", 0, h);
}

int lr__snap_crypto_ready(struct lr_err *e)
{
	pthread_once(&crypto_once, crypto_init);
	if (crypto_rc)
		lr_err_set(e, "snapshot: sha-256 is unavailable (libcrypto)");
	return crypto_rc;
}

int lr__snap_name_ok(const char *p, size_t n)
{
	if (n == 0 || n > LR__SNAP_NAME_MAX)
		return 0;
	if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
		return 0;
	return memchr(p, '/', n) == NULL && memchr(p, 0, n) == NULL;
}

static char *path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		return NULL;
	if (a) {
		memcpy(p, dir, a);
		p[a++] = '/';
	}
	memcpy(p + a, name, b + 1);
	return p;
}

/* ---- manifests ---- */

static void ent_release(struct lr__snap_ent *en)
{
	free(en->name);
	free(en->target);
}

void lr__snap_tree_release(struct lr__snap_tree *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		ent_release(&t->e[i]);
	free(t->e);
	t->e = NULL;
	t->n = t->cap = 0;
}

int lr__snap_tree_add(struct lr__snap_tree *t, const struct lr__snap_ent *src)
{
	if (t->n == t->cap) {
		size_t nc = t->cap ? 2 * t->cap : 8;
		void *p = realloc(t->e, nc * sizeof *t->e);
		if (!p)
			return -ENOMEM;
		t->e = p;
		t->cap = nc;
	}
	struct lr__snap_ent *en = &t->e[t->n];
	*en = *src;
	en->name = strndup(src->name, src->nlen);
	en->target = src->target ? strdup(src->target) : NULL;
	if (!en->name || (src->target && !en->target)) {
		ent_release(en);
		return -ENOMEM;
	}
	t->n++;
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lr__snap_ent *)a)->name, ((const struct lr__snap_ent *)b)->name);
}

static size_t ent_size(char type, size_t nlen, size_t tlen)
{
	return 4 + nlen + (type == 'f' ? 8 + LR_SHA256_LEN : type == 'd' ? LR_SHA256_LEN : 2 + tlen);
}

/* Writes one manifest entry at p (ent_size bytes); returns the end. */
static unsigned char *ent_put(unsigned char *p, char type, unsigned mode, const char *name,
			      size_t nlen, uint64_t size, const unsigned char *hash,
			      const char *target, size_t tlen)
{
	p[0] = (unsigned char)type;
	put_u16(p + 1, type == 'l' ? 0 : mode & 0777);
	p[3] = (unsigned char)nlen;
	memcpy(p + 4, name, nlen);
	p += 4 + nlen;
	if (type == 'f') {
		put_u64(p, size);
		memcpy(p + 8, hash, LR_SHA256_LEN);
		return p + 8 + LR_SHA256_LEN;
	}
	if (type == 'd') {
		memcpy(p, hash, LR_SHA256_LEN);
		return p + LR_SHA256_LEN;
	}
	put_u16(p, (unsigned)tlen);
	memcpy(p + 2, target, tlen);
	return p + 2 + tlen;
}

/* Gives b an exact allocation of n bytes (plus a NUL, as lr_buf keeps) and the header. */
static unsigned char *manifest_begin(struct lr_buf *b, size_t n, size_t count)
{
	lr_buf_init(b, SIZE_MAX / 2);
	unsigned char *p = malloc(n + 1);
	if (!p)
		return NULL;
	p[n] = 0;
	b->data = (char *)p;
	b->len = n;
	b->alloc = n + 1;
	memcpy(p, MAGIC, MAGIC_LEN);
	put_u32(p + MAGIC_LEN, (uint32_t)count);
	return p + MAGIC_LEN + 4;
}

static int tree_encode(const struct lr__snap_tree *t, struct lr_buf *b)
{
	size_t n = MAGIC_LEN + 4;
	for (size_t i = 0; i < t->n; i++)
		n += ent_size(t->e[i].type, t->e[i].nlen,
			      t->e[i].type == 'l' ? strlen(t->e[i].target) : 0);
	unsigned char *p = manifest_begin(b, n, t->n);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < t->n; i++) {
		const struct lr__snap_ent *en = &t->e[i];
		p = ent_put(p, en->type, en->mode, en->name, en->nlen, en->size, en->hash,
			    en->target, en->type == 'l' ? strlen(en->target) : 0);
	}
	return 0;
}

/*
 * The strict decoder. With t NULL it only validates. Every rule of the
 * format is checked, so a manifest that decodes re-encodes to the same
 * bytes.
 */
static int tree_decode(const unsigned char *p, size_t n, struct lr__snap_tree *t, size_t *count)
{
	if (n < MAGIC_LEN + 4 || memcmp(p, MAGIC, MAGIC_LEN) != 0)
		return LR_ECORRUPT;
	uint64_t cnt = get_be(p + MAGIC_LEN, 4);
	size_t off = MAGIC_LEN + 4;
	/* The smallest entry is a symlink with 1-byte name and target: 4+1+2+1. */
	if (cnt > (n - off) / 8)
		return LR_ECORRUPT;
	const unsigned char *prev = NULL;
	size_t prevlen = 0;
	for (uint64_t i = 0; i < cnt; i++) {
		if (n - off < 4)
			return LR_ECORRUPT;
		char type = (char)p[off];
		unsigned mode = (unsigned)get_be(p + off + 1, 2);
		size_t nl = p[off + 3];
		off += 4;
		if (type != 'd' && type != 'f' && type != 'l')
			return LR_ECORRUPT;
		if (mode > 0777 || (type == 'l' && mode != 0))
			return LR_ECORRUPT;
		if (n - off < nl || !lr__snap_name_ok((const char *)p + off, nl))
			return LR_ECORRUPT;
		const unsigned char *name = p + off;
		if (prev) {
			size_t m = prevlen < nl ? prevlen : nl;
			int c = memcmp(prev, name, m);
			if (c > 0 || (c == 0 && prevlen >= nl))
				return LR_ECORRUPT;
		}
		prev = name;
		prevlen = nl;
		off += nl;
		struct lr__snap_ent en = { 0 };
		en.type = type;
		en.mode = (uint16_t)mode;
		en.nlen = nl;
		const unsigned char *target = NULL;
		size_t tl = 0;
		if (type == 'f') {
			if (n - off < 8 + LR_SHA256_LEN)
				return LR_ECORRUPT;
			en.size = get_be(p + off, 8);
			memcpy(en.hash, p + off + 8, LR_SHA256_LEN);
			off += 8 + LR_SHA256_LEN;
		} else if (type == 'd') {
			if (n - off < LR_SHA256_LEN)
				return LR_ECORRUPT;
			memcpy(en.hash, p + off, LR_SHA256_LEN);
			off += LR_SHA256_LEN;
		} else {
			if (n - off < 2)
				return LR_ECORRUPT;
			tl = (size_t)get_be(p + off, 2);
			off += 2;
			if (tl == 0 || tl > LR__SNAP_TARGET_MAX || n - off < tl ||
			    memchr(p + off, 0, tl))
				return LR_ECORRUPT;
			target = p + off;
			en.size = tl;
			off += tl;
		}
		if (t) {
			struct lr__snap_ent tmp = en;
			char namebuf[LR__SNAP_NAME_MAX + 1], tbuf[LR__SNAP_TARGET_MAX + 1];
			memcpy(namebuf, name, nl);
			namebuf[nl] = 0;
			tmp.name = namebuf;
			if (target) {
				memcpy(tbuf, target, tl);
				tbuf[tl] = 0;
				tmp.target = tbuf;
			}
			if (lr__snap_tree_add(t, &tmp))
				return -ENOMEM;
		}
	}
	if (off != n)
		return LR_ECORRUPT;
	if (count)
		*count = (size_t)cnt;
	return 0;
}

int lr_snap_manifest_check(const void *p, size_t n, size_t *count)
{
	return tree_decode(p, n, NULL, count);
}

/* Encodes t (sorting it) into b and hashes the bytes. */
static int tree_seal(struct lr__snap_tree *t, struct lr_buf *b, unsigned char hash[LR_SHA256_LEN],
		     struct lr_err *e)
{
	if (t->n > 1)
		sort_n(t->e, t->n, sizeof *t->e, ent_cmp);
	lr_buf_init(b, SIZE_MAX / 2);
	int rc = tree_encode(t, b);
	if (!rc)
		rc = lr_sha256(b->data, b->len, hash);
	if (rc) {
		lr_err_set(e, "snapshot: encoding a manifest failed: %s", lr_strerror(rc));
		lr_buf_release(b);
	}
	return rc;
}

/* Stores a sealed manifest unless it is there already (an unchanged directory). */
static int tree_store(struct lr_store *s, const unsigned char hash[LR_SHA256_LEN],
		      const struct lr_buf *b, struct lr_err *e)
{
	char key[128];
	lr__snap_blob_key(key, "trees", hash);
	uint64_t have;
	int rc = lr_store_blob_stat(s, key, &have, e);
	if (rc == LR_ENOTFOUND || (rc == 0 && have != b->len)) {
		e->msg[0] = 0;
		rc = lr_store_blob_put(s, key, b->data, b->len, e);
	}
	return rc;
}

int lr__snap_tree_put(struct lr_store *s, struct lr__snap_tree *t,
		      unsigned char hash[LR_SHA256_LEN], struct lr_err *e)
{
	struct lr_buf b;
	int rc = tree_seal(t, &b, hash, e);
	if (rc)
		return rc;
	rc = tree_store(s, hash, &b, e);
	lr_buf_release(&b);
	return rc;
}

int lr__snap_tree_get(struct lr_store *s, const unsigned char hash[LR_SHA256_LEN],
		      struct lr__snap_tree *t, struct lr_err *e)
{
	char key[128];
	lr__snap_blob_key(key, "trees", hash);
	struct lr_bytes b;
	int rc = lr_store_blob_get(s, key, &b, e);
	if (rc) {
		if (rc == LR_ENOTFOUND)
			lr_err_set(e, "snapshot: tree '%s' not found", key + 17);
		return rc;
	}
	unsigned char h[LR_SHA256_LEN];
	rc = lr_sha256(b.data, b.len, h);
	if (!rc && memcmp(h, hash, LR_SHA256_LEN) != 0)
		rc = LR_ECORRUPT;
	if (!rc)
		rc = tree_decode(b.data, b.len, t, NULL);
	lr_bytes_release(&b);
	if (rc) {
		lr__snap_tree_release(t);
		lr_err_set(e, "snapshot: tree '%s' is corrupt", key + 17);
	}
	return rc;
}

static int load_ref(struct lr_snap *sn, const char *ref, unsigned char root[LR_SHA256_LEN],
		    struct lr__snap_tree *t, struct lr_err *e)
{
	if (lr_snap_ref_parse(ref, root))
		return bad_ref(ref, e);
	int rc = lr__snap_crypto_ready(e);
	if (rc)
		return rc;
	rc = lr__snap_tree_get(sn->store, root, t, e);
	if (rc == LR_ENOTFOUND)
		lr_err_set(e, "snapshot: ref '%s' not found", ref);
	return rc;
}

/* ---- the stat cache ---- */

/*
 * One record: a file (path, stat fields, content hash), or a directory
 * (path + "/", its manifest's length in size, the manifest's hash and its
 * bytes in man).
 */
struct sc_ent {
	const char *path; /* NUL-terminated, in the cache file's mapping or the arena */
	const unsigned char *man; /* a directory: its manifest, size bytes; else NULL */
	uint64_t dev, ino, size, mtime, ctime;
	unsigned char hash[LR_SHA256_LEN];
};

struct chunk {
	struct chunk *next;
	size_t used, cap;
	char data[];
};

struct lr__statcache {
	char *key; /* canonical workspace path */
	struct sc_ent *e;
	size_t n, cap;
	uint64_t gen; /* the GC generation the cached hashes were seen in */
	uint32_t *idx; /* open addressing over e by path hash: i + 1, 0 = empty */
	size_t idxcap;  /* a power of two, or 0 before sc_index */
	struct chunk *strs; /* copies of paths and manifests: few allocations, not n */
	void *map;          /* the cache file, mapped: loaded records point into it */
	size_t maplen;
	struct lr__statcache *next;
};

#define CHUNK_SIZE ((size_t)64 << 10)

/* A NUL-terminated copy of p[0..n) in the arena *a. */
static char *arena_dup(struct chunk **a, const void *p, size_t n)
{
	struct chunk *k = *a;
	if (!k || k->cap - k->used < n + 1) {
		size_t cap = n + 1 > CHUNK_SIZE - sizeof *k ? n + 1 : CHUNK_SIZE - sizeof *k;
		k = malloc(sizeof *k + cap);
		if (!k)
			return NULL;
		k->next = *a;
		k->used = 0;
		k->cap = cap;
		*a = k;
	}
	char *d = k->data + k->used;
	memcpy(d, p, n);
	d[n] = 0;
	k->used += n + 1;
	return d;
}

static void arena_free(struct chunk *k)
{
	while (k) {
		struct chunk *next = k->next;
		free(k);
		k = next;
	}
}

static void sc_free(struct lr__statcache *c)
{
	if (!c)
		return;
	arena_free(c->strs);
	if (c->map)
		munmap(c->map, c->maplen);
	free(c->e);
	free(c->idx);
	free(c->key);
	free(c);
}

static uint64_t path_hash(const char *p)
{
	uint64_t h = 1469598103934665603u; /* FNV-1a */
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211u;
	return h;
}

/*
 * Builds the lookup index: a capture looks up every file once, and a hash
 * probe costs one string compare where a binary search costs ~14. Failing
 * to allocate leaves the binary search in place.
 */
static void sc_index(struct lr__statcache *c)
{
	if (c->n == 0 || c->n > UINT32_MAX / 2)
		return;
	size_t cap = 16;
	while (cap < 2 * c->n)
		cap *= 2;
	c->idx = calloc(cap, sizeof *c->idx);
	if (!c->idx)
		return;
	c->idxcap = cap;
	for (size_t i = 0; i < c->n; i++) {
		size_t j = (size_t)path_hash(c->e[i].path) & (cap - 1);
		while (c->idx[j])
			j = (j + 1) & (cap - 1);
		c->idx[j] = (uint32_t)i + 1;
	}
}

static int sc_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sc_ent *)a)->path, ((const struct sc_ent *)b)->path);
}

static int sc_grow(struct lr__statcache *c)
{
	if (c->n < c->cap)
		return 0;
	size_t nc = c->cap ? 2 * c->cap : 64;
	void *p = realloc(c->e, nc * sizeof *c->e);
	if (!p)
		return -ENOMEM;
	c->e = p;
	c->cap = nc;
	return 0;
}

/* Appends a copy of src (its path and manifest copied into the arena). */
static int sc_add(struct lr__statcache *c, const struct sc_ent *src)
{
	if (sc_grow(c))
		return -ENOMEM;
	struct sc_ent *en = &c->e[c->n];
	*en = *src;
	en->path = arena_dup(&c->strs, src->path, strlen(src->path));
	if (!en->path)
		return -ENOMEM;
	if (src->man && !(en->man = (unsigned char *)arena_dup(&c->strs, src->man, src->size)))
		return -ENOMEM;
	c->n++;
	return 0;
}

static const struct sc_ent *sc_find(const struct lr__statcache *c, const char *path)
{
	if (!c || !c->n)
		return NULL;
	if (c->idxcap) {
		size_t j = (size_t)path_hash(path) & (c->idxcap - 1);
		for (; c->idx[j]; j = (j + 1) & (c->idxcap - 1))
			if (strcmp(c->e[c->idx[j] - 1].path, path) == 0)
				return &c->e[c->idx[j] - 1];
		return NULL;
	}
	struct sc_ent k = { .path = path };
	return bsearch(&k, c->e, c->n, sizeof *c->e, sc_cmp);
}

static void cache_file_path(const struct lr_snap *sn, const char *canon, char *out, size_t cap)
{
	char hex[2 * LR_SHA256_LEN + 1];
	lr_sha256_hex(canon, strlen(canon), hex);
	snprintf(out, cap, "%s/%s", sn->cache_dir, hex);
}

static uint64_t be64(const unsigned char *p)
{
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t v;
	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
#else
	return get_be(p, 8);
#endif
}

/*
 * A copy of the cache for canon, or an empty one. A damaged cache file is
 * ignored from its first damage on. The file (CACHE_MAGIC, u32 count, u64
 * GC generation, then records of u16 path length, path, NUL, u64 dev, ino,
 * size, mtime, ctime, the 32-byte hash and, for a directory, size bytes of
 * manifest) is mapped, and the records point into the mapping: loading
 * copies nothing.
 */
static struct lr__statcache *sc_load(struct lr_snap *sn, const char *canon)
{
	struct lr__statcache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	if (!sn->cache_dir) {
		pthread_mutex_lock(&sn->mu);
		struct lr__statcache *m = sn->mem_caches;
		while (m && strcmp(m->key, canon) != 0)
			m = m->next;
		for (size_t i = 0; m && i < m->n; i++)
			if (sc_add(c, &m->e[i]))
				break;
		if (m)
			c->gen = m->gen;
		pthread_mutex_unlock(&sn->mu);
		return c;
	}
	char path[PATH_MAX];
	cache_file_path(sn, canon, path, sizeof path);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return c;
	struct stat st;
	void *map = MAP_FAILED;
	if (fstat(fd, &st) == 0 && st.st_size >= 20 && st.st_size < ((off_t)1 << 32))
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return c;
	c->map = map;
	c->maplen = (size_t)st.st_size;
	const unsigned char *buf = map;
	size_t len = c->maplen;
	if (memcmp(buf, CACHE_MAGIC, 8) != 0)
		return c;
	uint64_t cnt = get_be(buf + 8, 4);
	c->gen = be64(buf + 12);
	size_t at = 20;
	int sorted = 1;
	enum { FIXED = 1 + 40 + LR_SHA256_LEN };
	size_t most = (len - 20) / (2 + 1 + FIXED); /* what the file can hold at most */
	if (cnt && most && (c->e = malloc((cnt < most ? cnt : most) * sizeof *c->e)))
		c->cap = cnt < most ? cnt : most;
	for (uint64_t i = 0; i < cnt; i++) {
		if (len - at < 2)
			break;
		size_t pl = (size_t)get_be(buf + at, 2);
		if (pl == 0 || pl >= PATH_MAX || len - at - 2 < pl + FIXED)
			break;
		const char *p = (const char *)buf + at + 2;
		if (p[pl] != 0 || memchr(p, 0, pl))
			break;
		const unsigned char *rec = buf + at + 2 + pl + 1;
		struct sc_ent en = { .path = p };
		en.dev = be64(rec);
		en.ino = be64(rec + 8);
		en.size = be64(rec + 16);
		en.mtime = be64(rec + 24);
		en.ctime = be64(rec + 32);
		memcpy(en.hash, rec + 40, LR_SHA256_LEN);
		at += 2 + pl + FIXED;
		if (p[pl - 1] == '/') {
			if (len - at < en.size)
				break;
			en.man = buf + at;
			at += (size_t)en.size;
		}
		if (sc_grow(c))
			break;
		c->e[c->n++] = en;
		if (c->n > 1 && strcmp(c->e[c->n - 2].path, c->e[c->n - 1].path) >= 0)
			sorted = 0;
	}
	if (!sorted)
		sort_n(c->e, c->n, sizeof *c->e, sc_cmp);
	return c;
}

/* Stores c, sorted by path, as the cache of canon (takes c). Failure to save only costs speed. */
static void sc_save(struct lr_snap *sn, const char *canon, struct lr__statcache *c)
{
	if (!sn->cache_dir) {
		c->key = strdup(canon);
		if (!c->key) {
			sc_free(c);
			return;
		}
		pthread_mutex_lock(&sn->mu);
		struct lr__statcache **pp = &sn->mem_caches;
		while (*pp && strcmp((*pp)->key, canon) != 0)
			pp = &(*pp)->next;
		struct lr__statcache *old = *pp;
		c->next = old ? old->next : NULL;
		*pp = c;
		pthread_mutex_unlock(&sn->mu);
		sc_free(old);
		return;
	}
	char path[PATH_MAX], tmp[PATH_MAX + 64];
	cache_file_path(sn, canon, path, sizeof path);
	mkdir(sn->cache_dir, 0700);
	static atomic_uint seq;
	snprintf(tmp, sizeof tmp, "%s.tmp%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
	FILE *f = fopen(tmp, "wbe");
	if (!f) {
		sc_free(c);
		return;
	}
	size_t n = 0;
	for (size_t i = 0; i < c->n; i++)
		n += strlen(c->e[i].path) < PATH_MAX;
	unsigned char h[12];
	put_u32(h, (uint32_t)n);
	put_u64(h + 4, c->gen);
	int ok = fwrite(CACHE_MAGIC, 1, 8, f) == 8 && fwrite(h, 1, 12, f) == 12;
	for (size_t i = 0; ok && i < c->n; i++) {
		const struct sc_ent *en = &c->e[i];
		unsigned char rec[2 + 1 + 40 + LR_SHA256_LEN];
		size_t pl = strlen(en->path);
		if (pl >= PATH_MAX)
			continue;
		put_u16(rec, (unsigned)pl);
		rec[2] = 0;
		put_u64(rec + 3, en->dev);
		put_u64(rec + 11, en->ino);
		put_u64(rec + 19, en->size);
		put_u64(rec + 27, en->mtime);
		put_u64(rec + 35, en->ctime);
		memcpy(rec + 43, en->hash, LR_SHA256_LEN);
		ok = fwrite(rec, 1, 2, f) == 2 && fwrite(en->path, 1, pl, f) == pl &&
		     fwrite(rec + 2, 1, sizeof rec - 2, f) == sizeof rec - 2;
		if (ok && en->man)
			ok = fwrite(en->man, 1, (size_t)en->size, f) == en->size;
	}
	if (fclose(f) != 0)
		ok = 0;
	if (!ok || rename(tmp, path) != 0)
		unlink(tmp);
	sc_free(c);
}

/* ---- a small pool: n jobs over a few threads, first error wins ---- */

struct par {
	size_t n;
	atomic_size_t next;
	atomic_int stop;
	int (*fn)(void *ctx, size_t i, struct lr_err *e);
	void *ctx;
	pthread_mutex_t mu;
	int rc;
	struct lr_err err;
};

static void *par_main(void *arg)
{
	struct par *p = arg;
	struct lr_err e;
	for (;;) {
		if (atomic_load(&p->stop))
			break;
		size_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			break;
		int rc = p->fn(p->ctx, i, &e);
		if (rc) {
			pthread_mutex_lock(&p->mu);
			if (!p->rc) {
				p->rc = rc;
				p->err = e;
			}
			pthread_mutex_unlock(&p->mu);
			atomic_store(&p->stop, 1);
		}
	}
	return NULL;
}

static int par_run(int threads, size_t n, int (*fn)(void *, size_t, struct lr_err *), void *ctx,
		   struct lr_err *e)
{
	struct par p = { .n = n, .fn = fn, .ctx = ctx };
	atomic_init(&p.next, 0);
	atomic_init(&p.stop, 0);
	pthread_mutex_init(&p.mu, NULL);
	pthread_t th[64];
	int nt = 0;
	if (threads > 64)
		threads = 64;
	if ((size_t)threads > n)
		threads = (int)n;
	for (; nt < threads - 1; nt++)
		if (pthread_create(&th[nt], NULL, par_main, &p) != 0)
			break;
	par_main(&p); /* the calling thread works too */
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&p.mu);
	if (p.rc && e)
		*e = p.err;
	return p.rc;
}

/* ---- capture ---- */

struct node {
	char *name;
	size_t nlen;
	char type;
	uint16_t mode;
	uint64_t size;
	unsigned char hash[LR_SHA256_LEN];
	char *target;
	struct node *kids;
	size_t nkids;
	char *path;
	uint64_t dev, ino, mtime, ctime;
	uint64_t dsize; /* a directory: its manifest's length */
	char *man;      /* a directory: its manifest, dsize bytes (owned) */
	char *strs;     /* a directory: one block with its kids' names and paths */
};

struct cap {
	struct lr_snap *sn;
	int rootfd;
	uint64_t start_ns;
	struct lr__statcache *old;
	struct node **files;
	size_t nfiles, capfiles;
	struct lr_snap_result *r;
	size_t skipcap;
	atomic_ullong hashed, written;
	uint64_t gen;  /* the store's GC generation at the start */
	int gen_same;  /* the old cache was written in this generation */
	pthread_mutex_t mu; /* files and skipped, while subtrees are walked in parallel */
	/*
	 * Two files with the same bytes hash to one blob key on two threads: the
	 * check, the write and (for a file that changed while it was stored) the
	 * delete of a key happen under one of these, so a blob is written once
	 * and never deleted under a file that still needs it.
	 */
	pthread_mutex_t blob_mu[64];
	struct node *par_dir; /* the directory whose subdirectories walk_job walks */
	int par_dirfd;
	size_t *par_sub;
	struct node **todo; /* files the stat cache cannot vouch for */
	size_t ntodo;
	struct sealed *trees; /* the manifests to store after the walk */
	size_t ntrees, captrees;
	struct node **dirs; /* every directory, for the new stat cache */
	size_t ndirs, capdirs;
	size_t dirs_same;  /* directories whose manifest the cache vouched for */
	size_t files_same; /* files whose hash the cache vouched for (before any thread) */
};

static void node_release(struct node *nd)
{
	for (size_t i = 0; i < nd->nkids; i++)
		node_release(&nd->kids[i]);
	free(nd->kids);
	free(nd->target);
	free(nd->strs);
	free(nd->man);
}

static int add_skip_locked(struct cap *c, const char *path, const char *reason);

static int add_skip(struct cap *c, const char *path, const char *reason)
{
	pthread_mutex_lock(&c->mu);
	int rc = add_skip_locked(c, path, reason);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int add_skip_locked(struct cap *c, const char *path, const char *reason)
{
	struct lr_snap_result *r = c->r;
	if (r->nskipped == c->skipcap) {
		size_t nc = c->skipcap ? 2 * c->skipcap : 8;
		void *p = realloc(r->skipped, nc * sizeof *r->skipped);
		if (!p)
			return -ENOMEM;
		r->skipped = p;
		c->skipcap = nc;
	}
	char *dup = strdup(path);
	if (!dup)
		return -ENOMEM;
	r->skipped[r->nskipped].path = dup;
	r->skipped[r->nskipped].reason = reason;
	r->nskipped++;
	return 0;
}

/* Reads the names in dirfd (without "." and ".."); *names is a NULL-terminated array. */
static int list_names(int dirfd, char ***names, size_t *count)
{
	int fd = dup(dirfd);
	if (fd < 0)
		return -errno;
	/* fdopendir shares the offset with dirfd: start from the beginning. */
	lseek(fd, 0, SEEK_SET);
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	rewinddir(d);
	char **v = NULL;
	size_t n = 0, capn = 0;
	int rc = 0;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n + 1 >= capn) {
			size_t nc = capn ? 2 * capn : 16;
			void *p = realloc(v, nc * sizeof *v);
			if (!p) {
				rc = -ENOMEM;
				break;
			}
			v = p;
			capn = nc;
		}
		if (!(v[n] = strdup(de->d_name))) {
			rc = -ENOMEM;
			break;
		}
		n++;
		errno = 0;
	}
	if (!rc && errno)
		rc = -errno;
	closedir(d);
	if (rc) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return rc;
	}
	if (!v)
		v = calloc(1, sizeof *v);
	if (!v)
		return -ENOMEM;
	v[n] = NULL;
	*names = v;
	*count = n;
	return 0;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static int walk_sub(struct cap *c, int dirfd, struct node *nd, int depth, struct lr_err *e);
static int walk_job(void *ctx, size_t i, struct lr_err *e);

/* The names in a directory, as read by getdents64 into one buffer. */
struct dents {
	char *buf;     /* the names, each NUL-terminated */
	size_t len, cap;
	char **v;      /* into buf once the reading is done, sorted */
	size_t n, capn;
};

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Reads dirfd's names (without "." and "..") in big getdents64 batches,
 * copying them into one buffer: a directory of n entries costs a few
 * allocations, not n, and they come out sorted by name.
 */
static int read_names(int dirfd, struct dents *d)
{
	memset(d, 0, sizeof *d);
	if (lseek(dirfd, 0, SEEK_SET) < 0)
		return -errno;
	size_t *off = NULL;
	int rc = 0;
	union {
		char b[32768];
		struct dirent64 align;
	} raw;
	for (;;) {
		ssize_t got = getdents64(dirfd, raw.b, sizeof raw.b);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			break;
		}
		if (got == 0)
			break;
		for (ssize_t at = 0; at < got;) {
			struct dirent64 *de = (struct dirent64 *)(raw.b + at);
			at += de->d_reclen;
			const char *nm = de->d_name;
			if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
				continue;
			size_t nl = strlen(nm) + 1;
			if (d->len + nl > d->cap) {
				size_t nc = d->cap ? 2 * d->cap : 4096;
				while (nc < d->len + nl)
					nc *= 2;
				char *p = realloc(d->buf, nc);
				if (!p) {
					rc = -ENOMEM;
					break;
				}
				d->buf = p;
				d->cap = nc;
			}
			if (d->n == d->capn) {
				size_t nc = d->capn ? 2 * d->capn : 64;
				void *p = realloc(off, nc * sizeof *off);
				if (!p) {
					rc = -ENOMEM;
					break;
				}
				off = p;
				d->capn = nc;
			}
			memcpy(d->buf + d->len, nm, nl);
			off[d->n++] = d->len;
			d->len += nl;
		}
		if (rc)
			break;
	}
	/* The offsets become pointers in place (a size_t holds a pointer here). */
	_Static_assert(sizeof(size_t) == sizeof(char *), "offsets are reused as pointers");
	d->v = (char **)off;
	for (size_t i = 0; !rc && i < d->n; i++)
		d->v[i] = d->buf + off[i];
	if (rc) {
		free(d->buf);
		free(d->v);
		memset(d, 0, sizeof *d);
		return rc;
	}
	sort_n(d->v, d->n, sizeof *d->v, name_cmp);
	return 0;
}

static int walk(struct cap *c, int dirfd, const char *rel, struct node *dir, int depth,
		struct lr_err *e)
{
	if (depth > DEPTH_MAX) {
		lr_err_set(e, "snapshot: '%s' is nested deeper than %d levels", rel, DEPTH_MAX);
		return LR_ETOOBIG;
	}
	struct dents d;
	int rc = read_names(dirfd, &d);
	if (rc) {
		lr_err_set(e, "snapshot: cannot read directory '%s': %s", *rel ? rel : ".",
			   lr_strerror(rc));
		return rc;
	}
	size_t n = d.n, rl = strlen(rel);
	/* Each kid's name and path ("rel/name") in one block the directory owns. */
	dir->kids = calloc(n ? n : 1, sizeof *dir->kids);
	dir->strs = malloc(d.len + n * (rl + 1) + d.len + 1);
	if (!dir->kids || !dir->strs) {
		free(d.buf);
		free(d.v);
		return -ENOMEM;
	}
	char *sp = dir->strs;
	for (size_t i = 0; i < n && !rc; i++) {
		struct stat st;
		const char *name = d.v[i];
		size_t nl = strlen(name);
		char *nm = sp, *path = sp + nl + 1;
		memcpy(nm, name, nl + 1);
		if (rl) {
			memcpy(path, rel, rl);
			path[rl] = '/';
			memcpy(path + rl + 1, name, nl + 1);
		} else {
			memcpy(path, name, nl + 1);
		}
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = errno == ENOENT ? 0 : -errno; /* vanished since readdir: not there */
			if (rc)
				lr_err_set(e, "snapshot: cannot stat '%s': %s", path, lr_strerror(rc));
			continue;
		}
		if (nl > LR__SNAP_NAME_MAX)
			continue;
		const char *skip = S_ISSOCK(st.st_mode) ? "socket" : S_ISFIFO(st.st_mode) ? "fifo"
				 : (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) ? "device" : NULL;
		if (skip || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) {
			rc = add_skip(c, path, skip ? skip : "unknown type");
			continue;
		}
		struct node *nd = &dir->kids[dir->nkids];
		memset(nd, 0, sizeof *nd);
		nd->name = nm;
		nd->nlen = nl;
		nd->path = path;
		nd->mode = (uint16_t)(st.st_mode & 0777);
		if (S_ISLNK(st.st_mode)) {
			nd->type = 'l';
			nd->mode = 0;
			char buf[LR__SNAP_TARGET_MAX + 2];
			ssize_t tl = readlinkat(dirfd, nd->name, buf, sizeof buf);
			if (tl <= 0 || tl > LR__SNAP_TARGET_MAX) {
				rc = tl < 0 ? -errno : LR_ETOOBIG;
				lr_err_set(e, "snapshot: cannot read symlink '%s': %s", path,
					   tl < 0 ? strerror(errno) : "target too long");
				continue;
			}
			buf[tl] = 0;
			nd->target = strdup(buf);
			nd->size = (uint64_t)tl;
			if (!nd->target)
				rc = -ENOMEM;
		} else if (S_ISDIR(st.st_mode)) {
			nd->type = 'd';
		} else {
			nd->type = 'f';
			nd->size = (uint64_t)st.st_size;
			nd->dev = (uint64_t)st.st_dev;
			nd->ino = (uint64_t)st.st_ino;
			nd->mtime = ts_ns(&st.st_mtim);
			nd->ctime = ts_ns(&st.st_ctim);
		}
		sp = path + rl + (rl ? 1 : 0) + nl + 1; /* kept: the block holds this kid's strings */
		dir->nkids++;
	}
	free(d.buf);
	free(d.v);
	if (rc)
		return rc;

	size_t nsub = 0;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < dir->nkids && !rc; i++) {
		struct node *nd = &dir->kids[i];
		nsub += nd->type == 'd';
		if (nd->type != 'f')
			continue;
		if (c->nfiles == c->capfiles) {
			size_t nc = c->capfiles ? 2 * c->capfiles : 256;
			void *p = realloc(c->files, nc * sizeof *c->files);
			if (!p) {
				rc = -ENOMEM;
				break;
			}
			c->files = p;
			c->capfiles = nc;
		}
		c->files[c->nfiles++] = nd;
	}
	pthread_mutex_unlock(&c->mu);
	if (rc || !nsub)
		return rc;
	/*
	 * The top level's subtrees are walked on the capture threads: an
	 * unchanged tree costs one lstat per entry, and those are what an
	 * unchanged capture spends its time on.
	 */
	if (depth == 0 && nsub >= 2 && c->sn->threads > 1) {
		/*
		 * A walk is lstat calls, CPU in the kernel once the tree is in
		 * the page cache: threads beyond a few per core only cost their
		 * creation (the many threads are for the puts of a capture).
		 */
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		int nt = cpus > 0 && cpus < 64 ? 4 * (int)cpus : 64;
		if (nt > c->sn->threads)
			nt = c->sn->threads;
		size_t *sub = malloc(nsub * sizeof *sub), k = 0;
		if (!sub)
			return -ENOMEM;
		for (size_t i = 0; i < dir->nkids; i++)
			if (dir->kids[i].type == 'd')
				sub[k++] = i;
		c->par_dir = dir;
		c->par_dirfd = dirfd;
		c->par_sub = sub;
		rc = par_run(nt, nsub, walk_job, c, e);
		free(sub);
		return rc;
	}
	for (size_t i = 0; i < dir->nkids && !rc; i++) {
		struct node *nd = &dir->kids[i];
		if (nd->type == 'd')
			rc = walk_sub(c, dirfd, nd, depth + 1, e);
	}
	return rc;
}

static int walk_sub(struct cap *c, int dirfd, struct node *nd, int depth, struct lr_err *e)
{
	int fd = openat(dirfd, nd->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(e, "snapshot: cannot open directory '%s': %s", nd->path, lr_strerror(rc));
		return rc;
	}
	int rc = walk(c, fd, nd->path, nd, depth, e);
	close(fd);
	return rc;
}

static int walk_job(void *ctx, size_t i, struct lr_err *e)
{
	struct cap *c = ctx;
	return walk_sub(c, c->par_dirfd, &c->par_dir->kids[c->par_sub[i]], 1, e);
}

static int stat_changed(const struct stat *a, const struct stat *b)
{
	return a->st_size != b->st_size || ts_ns(&a->st_mtim) != ts_ns(&b->st_mtim) ||
	       ts_ns(&a->st_ctim) != ts_ns(&b->st_ctim) || a->st_ino != b->st_ino ||
	       a->st_dev != b->st_dev;
}

/* Streams fd from its current offset to EOF through SHA-256; *total receives the byte count. */
static int hash_stream(int fd, unsigned char hash[LR_SHA256_LEN], uint64_t *total)
{
	struct lr_sha256 h;
	int rc = lr_sha256_begin(&h);
	if (rc)
		return rc;
	char *buf = malloc(IO_CHUNK);
	if (!buf) {
		lr_sha256_abort(&h);
		return -ENOMEM;
	}
	*total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, IO_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		*total += (uint64_t)n;
		if ((rc = lr_sha256_update(&h, buf, (size_t)n)))
			break;
	}
	free(buf);
	if (rc) {
		lr_sha256_abort(&h);
		return rc;
	}
	return lr_sha256_end(&h, hash);
}

#define CHANGED 1 /* internal: the file changed while it was read */

/* Reads whole a file of at most SMALL_FILE bytes; CHANGED when the size is not expected. */
static int read_small(int fd, uint64_t expect, char **out)
{
	char *buf = malloc(expect + 1);
	if (!buf)
		return -ENOMEM;
	uint64_t got = 0;
	while (got <= expect) {
		ssize_t n = read(fd, buf + got, expect + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int rc = -errno;
			free(buf);
			return rc;
		}
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	if (got != expect) {
		free(buf);
		return CHANGED;
	}
	*out = buf;
	return 0;
}

static int hash_once(struct cap *c, struct node *nd, struct lr_err *e)
{
	struct lr_store *s = c->sn->store;
	int fd = openat(c->rootfd, nd->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ELOOP)
			return CHANGED;
		int rc = -errno;
		lr_err_set(e, "snapshot: cannot open '%s': %s", nd->path, lr_strerror(rc));
		return rc;
	}
	struct stat b, a;
	int rc = 0;
	char key[128];
	char *buf = NULL;
	if (fstat(fd, &b) != 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(b.st_mode)) {
		rc = CHANGED;
		goto out;
	}
	uint64_t size = (uint64_t)b.st_size;
	if (size <= SMALL_FILE) {
		rc = read_small(fd, size, &buf);
		if (rc)
			goto out;
		if ((rc = lr_sha256(buf, (size_t)size, nd->hash)))
			goto out;
	} else {
		uint64_t total;
		if ((rc = hash_stream(fd, nd->hash, &total)))
			goto out;
		if (total != size) {
			rc = CHANGED;
			goto out;
		}
	}
	if (fstat(fd, &a) != 0) {
		rc = -errno;
		goto out;
	}
	if (stat_changed(&b, &a)) {
		rc = CHANGED;
		goto out;
	}
	atomic_fetch_add(&c->hashed, 1);
	lr__snap_blob_key(key, "blobs", nd->hash);
	pthread_mutex_t *bmu = &c->blob_mu[nd->hash[0] % 64];
	pthread_mutex_lock(bmu);
	uint64_t have;
	rc = lr_store_blob_stat(s, key, &have, e);
	if (rc == LR_ENOTFOUND) {
		if (buf) {
			rc = lr_store_blob_put(s, key, buf, (size_t)size, e);
		} else if (lseek(fd, 0, SEEK_SET) != 0) {
			rc = -errno;
		} else {
			rc = lr_store_blob_put_fd(s, key, fd, size, e);
			/* The bytes just stored must be the ones hashed. */
			if (fstat(fd, &a) != 0 || stat_changed(&b, &a)) {
				struct lr_err ign;
				lr_store_blob_delete(s, key, &ign);
				rc = CHANGED;
			}
		}
		if (!rc)
			atomic_fetch_add(&c->written, 1);
	}
	pthread_mutex_unlock(bmu);
	if (!rc) {
		nd->size = size;
		nd->mode = (uint16_t)(b.st_mode & 0777);
		nd->dev = (uint64_t)b.st_dev;
		nd->ino = (uint64_t)b.st_ino;
		nd->mtime = ts_ns(&b.st_mtim);
		nd->ctime = ts_ns(&b.st_ctim);
	}
out:
	if (rc < 0 && rc != LR_ENOTFOUND && !e->msg[0])
		lr_err_set(e, "snapshot: reading '%s' failed: %s", nd->path, lr_strerror(rc));
	free(buf);
	close(fd);
	return rc;
}

static int cache_trusted(const struct cap *c, const struct sc_ent *ce, const struct node *nd)
{
	return ce && ce->dev == nd->dev && ce->ino == nd->ino && ce->size == nd->size &&
	       ce->mtime == nd->mtime && ce->ctime == nd->ctime &&
	       nd->mtime + c->sn->racy_ns < c->start_ns && nd->ctime + c->sn->racy_ns < c->start_ns;
}

static int hash_job(void *ctx, size_t i, struct lr_err *e)
{
	struct cap *c = ctx;
	struct node *nd = c->todo[i];
	e->msg[0] = 0;
	const struct sc_ent *ce = sc_find(c->old, nd->path);
	if (cache_trusted(c, ce, nd)) {
		char key[128];
		uint64_t have;
		lr__snap_blob_key(key, "blobs", ce->hash);
		int rc = lr_store_blob_stat(c->sn->store, key, &have, e);
		if (rc == 0 && have == nd->size) {
			memcpy(nd->hash, ce->hash, LR_SHA256_LEN);
			return 0;
		}
		if (rc && rc != LR_ENOTFOUND)
			return rc;
		e->msg[0] = 0;
	}
	int rc = hash_once(c, nd, e);
	if (rc == CHANGED) {
		e->msg[0] = 0;
		rc = hash_once(c, nd, e);
	}
	if (rc == CHANGED) {
		lr_err_set(e, "snapshot: '%s' changed while it was read", nd->path);
		rc = LR_ECONFLICT;
	}
	return rc;
}

struct sealed {
	unsigned char hash[LR_SHA256_LEN];
	struct lr_buf bytes; /* borrowed from the directory's node */
};

static int tree_job(void *ctx, size_t i, struct lr_err *e)
{
	struct cap *c = ctx;
	e->msg[0] = 0;
	return tree_store(c->sn->store, c->trees[i].hash, &c->trees[i].bytes, e);
}

/*
 * The directory's manifest as the stat cache remembers it: when the store
 * holds, under the hash the cache names for this directory, exactly the
 * bytes just encoded, that hash is the manifest's (it was stored under its
 * SHA-256) and the manifest need not be hashed or stored again.
 */
static int dir_cached(struct cap *c, struct node *dir, const struct lr_buf *b)
{
	char key[PATH_MAX];
	size_t pl = strlen(dir->path);
	if (!c->old || pl + 2 > sizeof key)
		return 0;
	memcpy(key, dir->path, pl);
	key[pl] = '/';
	key[pl + 1] = 0;
	const struct sc_ent *ce = sc_find(c->old, key);
	if (!ce || ce->size != b->len)
		return 0;
	/*
	 * With no GC since the cache was written, the tree it names is still
	 * stored (as a file's blob is) and the cache's copy of the manifest
	 * stands for the stored bytes.
	 */
	if (ce->man && c->gen_same) {
		if (memcmp(ce->man, b->data, b->len) != 0)
			return 0;
		memcpy(dir->hash, ce->hash, LR_SHA256_LEN);
		return 1;
	}
	char bkey[128];
	lr__snap_blob_key(bkey, "trees", ce->hash);
	struct lr_bytes have;
	struct lr_err ign;
	if (lr_store_blob_get(c->sn->store, bkey, &have, &ign))
		return 0;
	int same = have.len == b->len && memcmp(have.data, b->data, b->len) == 0;
	lr_bytes_release(&have);
	if (same)
		memcpy(dir->hash, ce->hash, LR_SHA256_LEN);
	return same;
}

/*
 * Seals every directory's manifest bottom-up (a parent needs its children's
 * hashes, not their storage), straight from the walk's nodes (sorted by
 * name, as a manifest is). A manifest the stat cache vouches for is taken
 * as it is; the others are hashed and collected in c->trees, to be stored
 * afterwards on the capture threads, so that the LMDB writer commits the
 * new ones of a capture together instead of one durable commit each.
 */
static int put_dir(struct cap *c, struct node *dir, struct lr_err *e)
{
	int rc = 0;
	size_t n = MAGIC_LEN + 4;
	for (size_t i = 0; i < dir->nkids && !rc; i++) {
		struct node *nd = &dir->kids[i];
		if (nd->type == 'd') {
			rc = put_dir(c, nd, e);
			c->r->dirs++;
		} else if (nd->type == 'f') {
			c->r->files++;
			c->r->bytes += nd->size;
		} else {
			c->r->symlinks++;
		}
		n += ent_size(nd->type, nd->nlen, nd->type == 'l' ? nd->size : 0);
	}
	if (rc)
		return rc;
	if (c->ndirs == c->capdirs) {
		size_t nc = c->capdirs ? 2 * c->capdirs : 64;
		void *p = realloc(c->dirs, nc * sizeof *c->dirs);
		if (!p)
			return -ENOMEM;
		c->dirs = p;
		c->capdirs = nc;
	}
	c->dirs[c->ndirs++] = dir;
	dir->dsize = n;
	struct lr_buf b;
	unsigned char *p = manifest_begin(&b, n, dir->nkids);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < dir->nkids; i++) {
		const struct node *nd = &dir->kids[i];
		p = ent_put(p, nd->type, nd->mode, nd->name, nd->nlen, nd->size, nd->hash,
			    nd->target, nd->type == 'l' ? nd->size : 0);
	}
	dir->man = b.data; /* the new stat cache's copy; trees[] only borrow it */
	if (dir_cached(c, dir, &b)) {
		c->dirs_same++;
		return 0;
	}
	if (c->ntrees == c->captrees) {
		size_t nc = c->captrees ? 2 * c->captrees : 64;
		void *q = realloc(c->trees, nc * sizeof *c->trees);
		if (!q)
			return -ENOMEM;
		c->trees = q;
		c->captrees = nc;
	}
	struct sealed *sd = &c->trees[c->ntrees];
	rc = lr__snap_crypto_ready(e);
	if (!rc && (rc = lr_sha256(b.data, b.len, sd->hash)))
		lr_err_set(e, "snapshot: hashing a manifest failed: %s", lr_strerror(rc));
	if (rc)
		return rc;
	sd->bytes = b;
	memcpy(dir->hash, sd->hash, LR_SHA256_LEN);
	c->ntrees++;
	return 0;
}

static int skip_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lr_snap_skip *)a)->path, ((const struct lr_snap_skip *)b)->path);
}

void lr_snap_result_release(struct lr_snap_result *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nskipped; i++)
		free(r->skipped[i].path);
	free(r->skipped);
	r->skipped = NULL;
	r->nskipped = 0;
}

/* The GC generation: 0 until the first GC. */
static int gc_generation(struct lr_snap *sn, uint64_t *gen, uint64_t *rev, struct lr_err *e)
{
	struct lr_bytes b;
	*gen = 0;
	*rev = 0;
	int rc = lr_store_kv_get(sn->store, GC_KEY, &b, rev, e);
	if (rc == LR_ENOTFOUND) {
		e->msg[0] = 0;
		return 0;
	}
	if (rc)
		return rc;
	char buf[24];
	size_t n = b.len < sizeof buf - 1 ? b.len : sizeof buf - 1;
	memcpy(buf, b.data, n);
	buf[n] = 0;
	lr_bytes_release(&b);
	char *end;
	*gen = strtoull(buf, &end, 10);
	if (!n || *end) {
		lr_err_set(e, "snapshot: the GC generation under '%s' is corrupt", GC_KEY);
		return LR_ECORRUPT;
	}
	return 0;
}

/* Moves to a new GC generation, so no stat cache trusts blobs without checking. */
static int gc_bump(struct lr_snap *sn, struct lr_err *e)
{
	int rc = 0;
	for (int attempt = 0; attempt < 8; attempt++) {
		uint64_t gen, rev;
		rc = gc_generation(sn, &gen, &rev, e);
		if (rc)
			return rc;
		char val[24];
		int n = snprintf(val, sizeof val, "%llu", (unsigned long long)gen + 1);
		rc = lr_store_kv_put(sn->store, GC_KEY, rev, val, (size_t)n, NULL, e);
		if (rc != LR_ECONFLICT)
			return rc;
	}
	return rc;
}

/* Whether a new cache says exactly what the old one said (then it need not be written). */
static int sc_same(const struct lr__statcache *a, const struct lr__statcache *b)
{
	if (a->n == 0 || a->n != b->n || a->gen != b->gen)
		return 0;
	for (size_t i = 0; i < a->n; i++) {
		const struct sc_ent *x = &a->e[i], *y = &b->e[i];
		if (x->dev != y->dev || x->ino != y->ino || x->size != y->size ||
		    x->mtime != y->mtime || x->ctime != y->ctime ||
		    memcmp(x->hash, y->hash, LR_SHA256_LEN) != 0 || strcmp(x->path, y->path) != 0)
			return 0;
	}
	return 1;
}

int lr_snap_capture(struct lr_snap *sn, const char *dir, struct lr_snap_result *r,
		    struct lr_err *e)
{
	memset(r, 0, sizeof *r);
	int rc = 0;
	/* libcrypto is opened only when something is hashed: an unchanged tree needs none. */
	struct cap c = { .sn = sn, .r = r, .start_ns = wall_ns() };
	pthread_mutex_init(&c.mu, NULL);
	for (int i = 0; i < 64; i++)
		pthread_mutex_init(&c.blob_mu[i], NULL);
	atomic_init(&c.hashed, 0);
	atomic_init(&c.written, 0);
	struct node root = { 0 };
	char *canon = realpath(dir, NULL);
	if (!canon) {
		rc = -errno;
		lr_err_set(e, "snapshot: cannot open '%s': %s", dir, lr_strerror(rc));
		return rc;
	}
	c.rootfd = open(canon, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c.rootfd < 0) {
		rc = -errno;
		lr_err_set(e, "snapshot: cannot open '%s': %s", dir, lr_strerror(rc));
		free(canon);
		return rc;
	}
	root.path = (char *)""; /* the root's strings are nobody's block: not freed */
	c.old = sc_load(sn, canon);
	if (!c.old) {
		rc = -ENOMEM;
		goto out;
	}
	sc_index(c.old);
	uint64_t gen_rev;
	rc = gc_generation(sn, &c.gen, &gen_rev, e);
	if (rc)
		goto out;
	c.gen_same = c.old->n > 0 && c.old->gen == c.gen;
	rc = walk(&c, c.rootfd, "", &root, 0, e);
	/*
	 * Files the cache vouches for (unchanged stat, no GC since) take their
	 * hash here; only the rest go to the threads, so an unchanged tree
	 * starts no thread for hashing at all.
	 */
	if (!rc && c.nfiles && !(c.todo = malloc(c.nfiles * sizeof *c.todo)))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < c.nfiles; i++) {
		struct node *nd = c.files[i];
		const struct sc_ent *ce = c.gen_same ? sc_find(c.old, nd->path) : NULL;
		if (ce && cache_trusted(&c, ce, nd)) {
			memcpy(nd->hash, ce->hash, LR_SHA256_LEN);
			c.files_same++;
		} else {
			c.todo[c.ntodo++] = nd;
		}
	}
	if (!rc && c.ntodo && !(rc = lr__snap_crypto_ready(e)))
		rc = par_run(sn->threads, c.ntodo, hash_job, &c, e);
	if (!rc)
		rc = put_dir(&c, &root, e);
	if (!rc && c.ntrees)
		rc = par_run(c.ntrees > 1 ? sn->threads : 1, c.ntrees, tree_job, &c, e);
	if (rc)
		goto out;
	lr__snap_ref_format(root.hash, r->ref);
	r->files_hashed = atomic_load(&c.hashed);
	r->blobs_written = atomic_load(&c.written);
	if (r->nskipped > 1)
		sort_n(r->skipped, r->nskipped, sizeof *r->skipped, skip_cmp);
	rc = lr__snap_index_put(sn, root.hash, r->files, r->bytes, e);
	if (rc)
		goto out;
	/*
	 * Every file and directory as the old cache had them: the new cache
	 * would be the same, so it is neither built nor written.
	 */
	if (c.gen_same && c.files_same == c.nfiles && c.dirs_same == c.ndirs &&
	    c.old->n == c.nfiles + c.ndirs)
		goto out;
	/* The new cache: every file but the racily clean ones, and every directory. */
	struct lr__statcache *nc = calloc(1, sizeof *nc);
	for (size_t i = 0; nc && i < c.nfiles; i++) {
		struct node *nd = c.files[i];
		if (nd->mtime + sn->racy_ns >= c.start_ns || nd->ctime + sn->racy_ns >= c.start_ns)
			continue;
		struct sc_ent en = { .path = nd->path, .dev = nd->dev, .ino = nd->ino,
				     .size = nd->size, .mtime = nd->mtime, .ctime = nd->ctime };
		memcpy(en.hash, nd->hash, LR_SHA256_LEN);
		if (sc_add(nc, &en)) {
			sc_free(nc);
			nc = NULL;
		}
	}
	/* A directory's record: its path and '/', its manifest's length and hash. */
	for (size_t i = 0; nc && i < c.ndirs; i++) {
		struct node *nd = c.dirs[i];
		char key[PATH_MAX];
		size_t pl = strlen(nd->path);
		if (pl + 2 > sizeof key)
			continue;
		memcpy(key, nd->path, pl);
		key[pl] = '/';
		key[pl + 1] = 0;
		struct sc_ent en = { .path = key, .size = nd->dsize,
				     .man = (const unsigned char *)nd->man };
		memcpy(en.hash, nd->hash, LR_SHA256_LEN);
		if (sc_add(nc, &en)) {
			sc_free(nc);
			nc = NULL;
		}
	}
	if (nc) {
		nc->gen = c.gen;
		sort_n(nc->e, nc->n, sizeof *nc->e, sc_cmp);
		if (sc_same(nc, c.old))
			sc_free(nc); /* unchanged: skip rewriting the cache */
		else
			sc_save(sn, canon, nc);
	}
out:
	if (rc)
		r->ref[0] = 0;
	if (rc == -ENOMEM && !e->msg[0])
		lr_err_set(e, "snapshot: out of memory");
	node_release(&root);
	free(c.trees); /* their bytes are the directories' (node_release) */
	free(c.dirs);
	free(c.files);
	free(c.todo);
	sc_free(c.old);
	close(c.rootfd);
	free(canon);
	pthread_mutex_destroy(&c.mu);
	for (int i = 0; i < 64; i++)
		pthread_mutex_destroy(&c.blob_mu[i]);
	return rc;
}

/* ---- restore and rewind ---- */

struct rw {
	struct lr_snap *sn;
	struct lr__statcache *cache;
	uint64_t start_ns;
	struct lr_snap_rewind_stats st;
	unsigned tmpseq;
};

static int remove_entry(struct rw *w, int dirfd, const char *name, const char *path, int depth,
			struct lr_err *e)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : -errno;
	int rc = 0;
	if (S_ISDIR(st.st_mode)) {
		if (depth > DEPTH_MAX)
			return LR_ETOOBIG;
		int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			lr_err_set(e, "snapshot: cannot open '%s': %s", path, lr_strerror(rc));
			return rc;
		}
		if ((st.st_mode & 0700) != 0700)
			fchmod(fd, (st.st_mode & 07777) | 0700);
		char **names = NULL;
		size_t n = 0;
		rc = list_names(fd, &names, &n);
		for (size_t i = 0; !rc && i < n; i++) {
			char *sub = path_join(path, names[i]);
			rc = sub ? remove_entry(w, fd, names[i], sub, depth + 1, e) : -ENOMEM;
			free(sub);
		}
		free_names(names, n);
		close(fd);
		if (!rc && unlinkat(dirfd, name, AT_REMOVEDIR) != 0)
			rc = -errno;
	} else if (unlinkat(dirfd, name, 0) != 0) {
		rc = -errno;
	}
	if (rc && !e->msg[0])
		lr_err_set(e, "snapshot: cannot remove '%s': %s", path, lr_strerror(rc));
	if (!rc)
		w->st.removed++;
	return rc;
}

/* Writes the blob of en into dirfd/name (through a temporary name when replacing). */
static int write_file(struct rw *w, int dirfd, const struct lr__snap_ent *en, const char *path,
		      int replace, struct lr_err *e)
{
	struct lr_store *s = w->sn->store;
	char tmp[64];
	const char *target = en->name;
	if (replace) {
		snprintf(tmp, sizeof tmp, ".lrtmp-%ld-%u", (long)getpid(), w->tmpseq++);
		target = tmp;
	}
	int fd = openat(dirfd, target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(e, "snapshot: cannot create '%s': %s", path, lr_strerror(rc));
		return rc;
	}
	char key[128];
	lr__snap_blob_key(key, "blobs", en->hash);
	int rc;
	if (en->size <= SMALL_FILE) {
		struct lr_bytes b;
		rc = lr_store_blob_get(s, key, &b, e);
		if (!rc) {
			unsigned char h[LR_SHA256_LEN];
			rc = lr_sha256(b.data, b.len, h);
			if (!rc && (b.len != en->size || memcmp(h, en->hash, LR_SHA256_LEN) != 0)) {
				rc = LR_ECORRUPT;
				lr_err_set(e, "snapshot: the blob of '%s' is corrupt", path);
			}
			if (!rc && (rc = lr_write_all(fd, b.data, b.len)))
				lr_err_set(e, "snapshot: writing '%s' failed: %s", path,
					   lr_strerror(rc));
			lr_bytes_release(&b);
		}
	} else {
		uint64_t len = 0;
		rc = lr_store_blob_get_fd(s, key, fd, &len, e);
		if (!rc && len != en->size) {
			rc = LR_ECORRUPT;
			lr_err_set(e, "snapshot: the blob of '%s' has %llu bytes, not %llu", path,
				   (unsigned long long)len, (unsigned long long)en->size);
		}
	}
	if (rc == LR_ENOTFOUND)
		lr_err_set(e, "snapshot: the blob of '%s' is missing", path);
	if (!rc && fchmod(fd, en->mode) != 0)
		rc = -errno;
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && replace && renameat(dirfd, tmp, dirfd, en->name) != 0)
		rc = -errno;
	if (rc) {
		if (!e->msg[0])
			lr_err_set(e, "snapshot: writing '%s' failed: %s", path, lr_strerror(rc));
		unlinkat(dirfd, target, 0);
		return rc;
	}
	w->st.written++;
	return 0;
}

/* Does dirfd/name (a regular file, stat st) hold en's contents? */
static int same_contents(struct rw *w, int dirfd, const struct lr__snap_ent *en, const char *path,
			 const struct stat *st, int *same, struct lr_err *e)
{
	*same = 0;
	if ((uint64_t)st->st_size != en->size)
		return 0;
	const struct sc_ent *ce = sc_find(w->cache, path);
	uint64_t mt = ts_ns(&st->st_mtim), ct = ts_ns(&st->st_ctim);
	if (ce && ce->dev == (uint64_t)st->st_dev && ce->ino == (uint64_t)st->st_ino &&
	    ce->size == en->size && ce->mtime == mt && ce->ctime == ct &&
	    mt + w->sn->racy_ns < w->start_ns && ct + w->sn->racy_ns < w->start_ns) {
		*same = memcmp(ce->hash, en->hash, LR_SHA256_LEN) == 0;
		return 0;
	}
	int fd = openat(dirfd, en->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		lr_err_set(e, "snapshot: cannot read '%s': %s", path, lr_strerror(rc));
		return rc;
	}
	unsigned char h[LR_SHA256_LEN];
	uint64_t total;
	int rc = hash_stream(fd, h, &total);
	close(fd);
	if (rc) {
		lr_err_set(e, "snapshot: cannot read '%s': %s", path, lr_strerror(rc));
		return rc;
	}
	*same = total == en->size && memcmp(h, en->hash, LR_SHA256_LEN) == 0;
	return 0;
}

static int type_matches(char type, mode_t m)
{
	return (type == 'd' && S_ISDIR(m)) || (type == 'f' && S_ISREG(m)) ||
	       (type == 'l' && S_ISLNK(m));
}

static int rewind_dir(struct rw *w, int dirfd, const char *rel, const struct lr__snap_tree *t,
		      int depth, struct lr_err *e)
{
	if (depth > DEPTH_MAX) {
		lr_err_set(e, "snapshot: '%s' is nested deeper than %d levels", rel, DEPTH_MAX);
		return LR_ETOOBIG;
	}
	char **names;
	size_t n;
	int rc = list_names(dirfd, &names, &n);
	if (rc) {
		lr_err_set(e, "snapshot: cannot read directory '%s': %s", *rel ? rel : ".",
			   lr_strerror(rc));
		return rc;
	}
	/* What the ref does not have goes first. */
	for (size_t i = 0; i < n && !rc; i++) {
		struct lr__snap_ent k = { .name = names[i] };
		if (t->n && bsearch(&k, t->e, t->n, sizeof *t->e, ent_cmp))
			continue;
		char *path = path_join(rel, names[i]);
		rc = path ? remove_entry(w, dirfd, names[i], path, depth, e) : -ENOMEM;
		free(path);
	}
	free_names(names, n);
	for (size_t i = 0; i < t->n && !rc; i++) {
		const struct lr__snap_ent *en = &t->e[i];
		char *path = path_join(rel, en->name);
		if (!path)
			return -ENOMEM;
		struct stat st;
		int exists = fstatat(dirfd, en->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
		if (!exists && errno != ENOENT) {
			rc = -errno;
			lr_err_set(e, "snapshot: cannot stat '%s': %s", path, lr_strerror(rc));
		} else if (exists && !type_matches(en->type, st.st_mode)) {
			rc = remove_entry(w, dirfd, en->name, path, depth, e);
			exists = 0;
		}
		if (rc) {
			free(path);
			break;
		}
		if (en->type == 'l') {
			if (exists) {
				char buf[LR__SNAP_TARGET_MAX + 2];
				ssize_t tl = readlinkat(dirfd, en->name, buf, sizeof buf);
				if (tl >= 0 && (size_t)tl == strlen(en->target) &&
				    memcmp(buf, en->target, (size_t)tl) == 0) {
					free(path);
					continue;
				}
				unlinkat(dirfd, en->name, 0);
			}
			if (symlinkat(en->target, dirfd, en->name) != 0) {
				rc = -errno;
				lr_err_set(e, "snapshot: cannot create symlink '%s': %s", path,
					   lr_strerror(rc));
			} else {
				w->st.written++;
			}
		} else if (en->type == 'f') {
			int same = 0;
			if (exists)
				rc = same_contents(w, dirfd, en, path, &st, &same, e);
			if (!rc && same) {
				if ((st.st_mode & 07777) != en->mode) {
					if (fchmodat(dirfd, en->name, en->mode, 0) != 0) {
						rc = -errno;
						lr_err_set(e, "snapshot: cannot chmod '%s': %s", path,
							   lr_strerror(rc));
					} else {
						w->st.written++;
					}
				}
			} else if (!rc) {
				rc = write_file(w, dirfd, en, path, exists, e);
			}
		} else {
			if (!exists) {
				if (mkdirat(dirfd, en->name, 0700) != 0) {
					rc = -errno;
					lr_err_set(e, "snapshot: cannot create directory '%s': %s",
						   path, lr_strerror(rc));
					free(path);
					break;
				}
				w->st.written++;
			}
			int fd = openat(dirfd, en->name,
					O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				rc = -errno;
				lr_err_set(e, "snapshot: cannot open '%s': %s", path, lr_strerror(rc));
				free(path);
				break;
			}
			if (exists && (st.st_mode & 0700) != 0700)
				fchmod(fd, (st.st_mode & 07777) | 0700);
			struct lr__snap_tree sub = { 0 };
			rc = lr__snap_tree_get(w->sn->store, en->hash, &sub, e);
			if (!rc)
				rc = rewind_dir(w, fd, path, &sub, depth + 1, e);
			lr__snap_tree_release(&sub);
			/* Modes last: a read-only directory is filled first. */
			if (!rc && fchmod(fd, en->mode) != 0)
				rc = -errno;
			if (!rc && exists && (st.st_mode & 07777) != en->mode)
				w->st.written++;
			close(fd);
		}
		free(path);
	}
	return rc;
}

static int rewind_into(struct lr_snap *sn, const char *ref, const char *dir, int must_be_empty,
		       struct lr_snap_rewind_stats *stats, struct lr_err *e)
{
	unsigned char root[LR_SHA256_LEN];
	struct lr__snap_tree t = { 0 };
	int rc = load_ref(sn, ref, root, &t, e);
	if (rc)
		return rc;
	struct rw w = { .sn = sn, .start_ns = wall_ns() };
	int fd = -1;
	char *canon = NULL;
	if (must_be_empty && mkdir(dir, 0755) != 0 && errno != EEXIST) {
		rc = -errno;
		lr_err_set(e, "snapshot: cannot create '%s': %s", dir, lr_strerror(rc));
		goto out;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		lr_err_set(e, "snapshot: cannot open '%s': %s", dir, lr_strerror(rc));
		goto out;
	}
	if (must_be_empty) {
		char **names;
		size_t n;
		rc = list_names(fd, &names, &n);
		if (!rc) {
			free_names(names, n);
			if (n) {
				rc = -ENOTEMPTY;
				lr_err_set(e, "snapshot: restore into '%s': the directory is not empty",
					   dir);
			}
		}
		if (rc)
			goto out;
	} else {
		canon = realpath(dir, NULL);
		w.cache = canon ? sc_load(sn, canon) : NULL;
	}
	e->msg[0] = 0;
	rc = rewind_dir(&w, fd, "", &t, 0, e);
	if (rc && !e->msg[0])
		lr_err_set(e, "snapshot: writing into '%s' failed: %s", dir, lr_strerror(rc));
out:
	if (fd >= 0)
		close(fd);
	lr__snap_tree_release(&t);
	sc_free(w.cache);
	free(canon);
	if (stats)
		*stats = w.st;
	return rc;
}

int lr_snap_restore(struct lr_snap *sn, const char *ref, const char *dir, struct lr_err *e)
{
	return rewind_into(sn, ref, dir, 1, NULL, e);
}

int lr_snap_rewind(struct lr_snap *sn, const char *ref, const char *dir,
		   struct lr_snap_rewind_stats *st, struct lr_err *e)
{
	return rewind_into(sn, ref, dir, 0, st, e);
}

/* ---- diff ---- */

struct strv {
	char **v;
	size_t n, cap;
};

static int strv_add(struct strv *s, const char *rel, const char *name)
{
	if (s->n == s->cap) {
		size_t nc = s->cap ? 2 * s->cap : 16;
		void *p = realloc(s->v, nc * sizeof *s->v);
		if (!p)
			return -ENOMEM;
		s->v = p;
		s->cap = nc;
	}
	char *p = path_join(rel, name);
	if (!p)
		return -ENOMEM;
	s->v[s->n++] = p;
	return 0;
}

struct dctx {
	struct lr_snap *sn;
	struct strv added, removed, modified;
};

/* Lists en and, for a directory, everything below it. */
static int diff_all(struct dctx *d, struct strv *to, const char *rel,
		    const struct lr__snap_ent *en, int depth, struct lr_err *e)
{
	int rc = strv_add(to, rel, en->name);
	if (rc || en->type != 'd')
		return rc;
	if (depth > DEPTH_MAX)
		return LR_ETOOBIG;
	struct lr__snap_tree t = { 0 };
	rc = lr__snap_tree_get(d->sn->store, en->hash, &t, e);
	char *path = rc ? NULL : path_join(rel, en->name);
	if (!rc && !path)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < t.n; i++)
		rc = diff_all(d, to, path, &t.e[i], depth + 1, e);
	free(path);
	lr__snap_tree_release(&t);
	return rc;
}

static int diff_trees(struct dctx *d, const char *rel, const unsigned char ha[LR_SHA256_LEN],
		      const unsigned char hb[LR_SHA256_LEN], int depth, struct lr_err *e)
{
	if (depth > DEPTH_MAX)
		return LR_ETOOBIG;
	struct lr__snap_tree a = { 0 }, b = { 0 };
	int rc = lr__snap_tree_get(d->sn->store, ha, &a, e);
	if (!rc)
		rc = lr__snap_tree_get(d->sn->store, hb, &b, e);
	size_t i = 0, j = 0;
	while (!rc && (i < a.n || j < b.n)) {
		int c = i == a.n ? 1 : j == b.n ? -1 : strcmp(a.e[i].name, b.e[j].name);
		if (c < 0) {
			rc = diff_all(d, &d->removed, rel, &a.e[i++], depth, e);
			continue;
		}
		if (c > 0) {
			rc = diff_all(d, &d->added, rel, &b.e[j++], depth, e);
			continue;
		}
		const struct lr__snap_ent *x = &a.e[i++], *y = &b.e[j++];
		if (x->type != y->type) {
			rc = diff_all(d, &d->removed, rel, x, depth, e);
			if (!rc)
				rc = diff_all(d, &d->added, rel, y, depth, e);
			continue;
		}
		int modified = x->mode != y->mode;
		if (x->type == 'f')
			modified |= x->size != y->size || memcmp(x->hash, y->hash, LR_SHA256_LEN);
		else if (x->type == 'l')
			modified |= strcmp(x->target, y->target) != 0;
		if (modified)
			rc = strv_add(&d->modified, rel, x->name);
		if (!rc && x->type == 'd' && memcmp(x->hash, y->hash, LR_SHA256_LEN) != 0) {
			char *path = path_join(rel, x->name);
			rc = path ? diff_trees(d, path, x->hash, y->hash, depth + 1, e) : -ENOMEM;
			free(path);
		}
	}
	lr__snap_tree_release(&a);
	lr__snap_tree_release(&b);
	return rc;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strv_release(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

int lr_snap_diff(struct lr_snap *sn, const char *a, const char *b, struct lr_snap_diff *out,
		 struct lr_err *e)
{
	memset(out, 0, sizeof *out);
	unsigned char ha[LR_SHA256_LEN], hb[LR_SHA256_LEN];
	if (lr_snap_ref_parse(a, ha))
		return bad_ref(a, e);
	if (lr_snap_ref_parse(b, hb))
		return bad_ref(b, e);
	int rc = lr__snap_crypto_ready(e);
	if (rc)
		return rc;
	struct dctx d = { .sn = sn };
	if (memcmp(ha, hb, LR_SHA256_LEN) != 0) {
		/* Both refs must exist even when only one subtree differs. */
		rc = diff_trees(&d, "", ha, hb, 0, e);
	} else {
		struct lr__snap_tree t = { 0 };
		rc = lr__snap_tree_get(sn->store, ha, &t, e);
		lr__snap_tree_release(&t);
	}
	if (rc) {
		if (rc == -ENOMEM)
			lr_err_set(e, "snapshot: out of memory");
		strv_release(&d.added);
		strv_release(&d.removed);
		strv_release(&d.modified);
		return rc;
	}
	sort_n(d.added.v, d.added.n, sizeof(char *), str_cmp);
	sort_n(d.removed.v, d.removed.n, sizeof(char *), str_cmp);
	sort_n(d.modified.v, d.modified.n, sizeof(char *), str_cmp);
	out->added = d.added.v;
	out->nadded = d.added.n;
	out->removed = d.removed.v;
	out->nremoved = d.removed.n;
	out->modified = d.modified.v;
	out->nmodified = d.modified.n;
	return 0;
}

void lr_snap_diff_release(struct lr_snap_diff *d)
{
	if (!d)
		return;
	struct strv a = { d->added, d->nadded, 0 }, r = { d->removed, d->nremoved, 0 },
		    m = { d->modified, d->nmodified, 0 };
	strv_release(&a);
	strv_release(&r);
	strv_release(&m);
	memset(d, 0, sizeof *d);
}

/* ---- garbage collection ---- */

/* An open-addressing set of hashes (the first 8 bytes index it). */
struct hset {
	unsigned char (*v)[LR_SHA256_LEN + 1]; /* last byte: occupied */
	size_t n, cap;
};

static int hset_add(struct hset *s, const unsigned char h[LR_SHA256_LEN], int *added)
{
	if ((s->n + 1) * 2 > s->cap) {
		size_t nc = s->cap ? 2 * s->cap : 1024;
		void *nv = calloc(nc, sizeof *s->v);
		if (!nv)
			return -ENOMEM;
		struct hset ns = { nv, 0, nc };
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i][LR_SHA256_LEN]) {
				int dummy;
				hset_add(&ns, s->v[i], &dummy);
			}
		free(s->v);
		*s = ns;
	}
	size_t i = (size_t)get_be(h, 8) & (s->cap - 1);
	while (s->v[i][LR_SHA256_LEN]) {
		if (memcmp(s->v[i], h, LR_SHA256_LEN) == 0) {
			*added = 0;
			return 0;
		}
		i = (i + 1) & (s->cap - 1);
	}
	memcpy(s->v[i], h, LR_SHA256_LEN);
	s->v[i][LR_SHA256_LEN] = 1;
	s->n++;
	*added = 1;
	return 0;
}

static int hset_has(const struct hset *s, const unsigned char h[LR_SHA256_LEN])
{
	if (!s->cap)
		return 0;
	size_t i = (size_t)get_be(h, 8) & (s->cap - 1);
	while (s->v[i][LR_SHA256_LEN]) {
		if (memcmp(s->v[i], h, LR_SHA256_LEN) == 0)
			return 1;
		i = (i + 1) & (s->cap - 1);
	}
	return 0;
}

static int mark(struct lr_snap *sn, struct hset *trees, struct hset *blobs,
		const unsigned char h[LR_SHA256_LEN], int depth, struct lr_err *e)
{
	int added;
	int rc = hset_add(trees, h, &added);
	if (rc || !added)
		return rc;
	if (depth > DEPTH_MAX)
		return LR_ETOOBIG;
	struct lr__snap_tree t = { 0 };
	rc = lr__snap_tree_get(sn->store, h, &t, e);
	for (size_t i = 0; !rc && i < t.n; i++) {
		if (t.e[i].type == 'f')
			rc = hset_add(blobs, t.e[i].hash, &added);
		else if (t.e[i].type == 'd')
			rc = mark(sn, trees, blobs, t.e[i].hash, depth + 1, e);
	}
	lr__snap_tree_release(&t);
	return rc;
}

static int collect_cb(void *arg, const char *name)
{
	return strv_add(arg, "", name) ? 1 : 0;
}

static int sweep(struct lr_snap *sn, const char *prefix, int kv, const struct hset *live,
		 struct lr_snap_gc_stats *st, struct lr_err *e)
{
	struct strv names = { 0 };
	int rc = kv ? lr_store_kv_keys(sn->store, prefix, collect_cb, &names, e)
		    : lr_store_blob_list(sn->store, prefix, collect_cb, &names, e);
	if (rc == 1)
		rc = -ENOMEM;
	size_t pl = strlen(prefix);
	for (size_t i = 0; !rc && i < names.n; i++) {
		unsigned char h[LR_SHA256_LEN];
		const char *hex = names.v[i] + pl;
		if (strlen(hex) != 2 * LR_SHA256_LEN || unhex(hex, h, LR_SHA256_LEN))
			continue; /* not ours */
		if (hset_has(live, h)) {
			if (!kv)
				st->kept++;
			continue;
		}
		rc = kv ? lr_store_kv_delete(sn->store, names.v[i], e)
			: lr_store_blob_delete(sn->store, names.v[i], e);
		if (!rc && !kv)
			st->deleted++;
	}
	strv_release(&names);
	return rc;
}

int lr_snap_gc(struct lr_snap *sn, const char *const *live, size_t nlive,
	       struct lr_snap_gc_stats *st, struct lr_err *e)
{
	struct lr_snap_gc_stats dummy;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof *st);
	int rc = lr__snap_crypto_ready(e);
	if (rc)
		return rc;
	struct hset trees = { 0 }, blobs = { 0 }, roots = { 0 };
	rc = gc_bump(sn, e);
	for (size_t i = 0; !rc && i < nlive; i++) {
		unsigned char h[LR_SHA256_LEN];
		int added;
		if (lr_snap_ref_parse(live[i], h)) {
			rc = bad_ref(live[i], e);
			break;
		}
		rc = hset_add(&roots, h, &added);
		if (!rc)
			rc = mark(sn, &trees, &blobs, h, 0, e);
		if (rc == LR_ENOTFOUND)
			lr_err_set(e, "snapshot: gc: live ref '%s' not found", live[i]);
	}
	if (!rc)
		rc = sweep(sn, "workspaces/blobs/", 0, &blobs, st, e);
	if (!rc)
		rc = sweep(sn, "workspaces/trees/", 0, &trees, st, e);
	if (!rc)
		rc = sweep(sn, "workspaces/refs/", 1, &roots, st, e);
	if (rc == -ENOMEM)
		lr_err_set(e, "snapshot: gc: out of memory");
	free(trees.v);
	free(blobs.v);
	free(roots.v);
	return rc;
}

/* ---- the ref index ---- */

int lr__snap_index_put(struct lr_snap *sn, const unsigned char root[LR_SHA256_LEN],
		       uint64_t files, uint64_t bytes, struct lr_err *e)
{
	char key[128];
	lr__snap_blob_key(key, "refs", root);
	char val[256];
	int n = snprintf(val, sizeof val, "{\"time\":%.6f,\"files\":%llu,\"bytes\":%llu}",
			 (double)wall_ns() / 1e9, (unsigned long long)files,
			 (unsigned long long)bytes);
	int rc = 0;
	for (int attempt = 0; attempt < 5; attempt++) {
		struct lr_bytes old;
		uint64_t rev = 0;
		rc = lr_store_kv_get(sn->store, key, &old, &rev, e);
		if (rc == 0) {
			/* Indexed already: keep the first capture's entry, spare a durable commit. */
			lr_bytes_release(&old);
			return 0;
		} else if (rc != LR_ENOTFOUND)
			return rc;
		else
			rev = 0;
		rc = lr_store_kv_put(sn->store, key, rev, val, (size_t)n, NULL, e);
		if (rc != LR_ECONFLICT)
			return rc;
	}
	return rc;
}

static int info_cmp(const void *a, const void *b)
{
	const struct lr_snap_info *x = a, *y = b;
	if (x->time != y->time)
		return x->time < y->time ? 1 : -1;
	return strcmp(x->ref, y->ref);
}

int lr_snap_list(struct lr_snap *sn, struct lr_snap_info **out, size_t *count, struct lr_err *e)
{
	*out = NULL;
	*count = 0;
	struct strv keys = { 0 };
	int rc = lr_store_kv_keys(sn->store, "workspaces/refs/", collect_cb, &keys, e);
	if (rc == 1)
		rc = -ENOMEM;
	struct lr_snap_info *v = rc ? NULL : calloc(keys.n ? keys.n : 1, sizeof *v);
	if (!rc && !v)
		rc = -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; !rc && i < keys.n; i++) {
		unsigned char h[LR_SHA256_LEN];
		const char *hex = keys.v[i] + strlen("workspaces/refs/");
		if (strlen(hex) != 2 * LR_SHA256_LEN || unhex(hex, h, LR_SHA256_LEN))
			continue;
		struct lr_bytes b;
		uint64_t rev;
		rc = lr_store_kv_get(sn->store, keys.v[i], &b, &rev, e);
		if (rc == LR_ENOTFOUND) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		json_t *j = json_loadb(b.data, b.len, 0, NULL);
		lr_bytes_release(&b);
		struct lr_snap_info *in = &v[n++];
		lr__snap_ref_format(h, in->ref);
		if (j) {
			in->time = json_number_value(json_object_get(j, "time"));
			in->files = (uint64_t)json_integer_value(json_object_get(j, "files"));
			in->bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
			json_decref(j);
		}
	}
	strv_release(&keys);
	if (rc) {
		free(v);
		if (rc == -ENOMEM)
			lr_err_set(e, "snapshot: out of memory");
		return rc;
	}
	sort_n(v, n, sizeof *v, info_cmp);
	*out = v;
	*count = n;
	return 0;
}

/* ---- the handle ---- */

int lr_snap_new(struct lr_store *s, const struct lr_snap_opts *o, struct lr_snap **out,
		struct lr_err *e)
{
	struct lr_snap_opts def = { 0 };
	if (!o)
		o = &def;
	struct lr_snap *sn = calloc(1, sizeof *sn);
	if (!sn || (o->cache_dir && !(sn->cache_dir = strdup(o->cache_dir)))) {
		free(sn);
		lr_err_set(e, "snapshot: out of memory");
		return -ENOMEM;
	}
	sn->store = s;
	sn->threads = o->threads > 0 ? o->threads : 4;
	sn->racy_ns = o->racy_ns ? o->racy_ns : 2000000000ull;
	sn->import_max_entries = o->import_max_entries ? o->import_max_entries : (uint64_t)1 << 20;
	sn->import_max_bytes = o->import_max_bytes ? o->import_max_bytes : (uint64_t)8 << 30;
	pthread_mutex_init(&sn->mu, NULL);
	*out = sn;
	return 0;
}

void lr_snap_free(struct lr_snap *sn)
{
	if (!sn)
		return;
	while (sn->mem_caches) {
		struct lr__statcache *c = sn->mem_caches;
		sn->mem_caches = c->next;
		sc_free(c);
	}
	pthread_mutex_destroy(&sn->mu);
	free(sn->cache_dir);
	free(sn);
}
