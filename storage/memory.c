/*
 * memory.c — the memory backend: the contract's reference behaviour, for
 * tests and throwaway sessions. One mutex guards everything; entries are
 * kept in arrays sorted by name (binary search), which is plenty for the
 * sizes a process keeps in memory.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rec {
	void *data;
	size_t len;
};

struct ledger {
	char *name;
	struct rec *recs;
	uint64_t n, cap;
};

struct kv {
	char *key;
	void *val;
	size_t len;
	uint64_t rev;
};

struct blob {
	char *key;
	void *data;
	size_t len;
};

struct leaseent {
	char *name;
	uint64_t epoch;  /* last granted; never reset */
	struct lr_lease *holder;
};

/* A growable array of entries sorted by their first member, a char *. */
struct table {
	void *items;
	size_t n, cap, size;
};

struct mem {
	LR_STORE_HEAD;
	pthread_mutex_t mu;
	struct table ledgers, kvs, blobs, leases;
};

/* Binary search: the index of name, or where it would go (*found = 0). */
static size_t table_find(const struct table *t, const char *name, int *found)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *k = *(char **)((char *)t->items + mid * t->size);
		int c = strcmp(k, name);
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = 0;
	return lo;
}

static void *table_at(const struct table *t, size_t i)
{
	return (char *)t->items + i * t->size;
}

/* Inserts a zeroed entry with a copy of name at i; returns it or NULL. */
static void *table_insert(struct table *t, size_t i, const char *name)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		void *p = realloc(t->items, cap * t->size);
		if (!p)
			return NULL;
		t->items = p;
		t->cap = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return NULL;
	memmove(table_at(t, i + 1), table_at(t, i), (t->n - i) * t->size);
	memset(table_at(t, i), 0, t->size);
	*(char **)table_at(t, i) = copy;
	t->n++;
	return table_at(t, i);
}

static void table_remove(struct table *t, size_t i)
{
	free(*(char **)table_at(t, i));
	memmove(table_at(t, i), table_at(t, i + 1), (t->n - i - 1) * t->size);
	t->n--;
}

/* A heap copy of n bytes (never NULL for n == 0 unless out of memory). */
static void *copy_bytes(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	if (q && n)
		memcpy(q, p, n);
	return q;
}

static struct ledger *ledger_find(struct mem *m, const char *name)
{
	int found;
	size_t i = table_find(&m->ledgers, name, &found);
	return found ? table_at(&m->ledgers, i) : NULL;
}

static uint64_t ledger_tip(struct mem *m, const char *name)
{
	struct ledger *l = ledger_find(m, name);
	return l ? l->n : 0;
}

static int mem_append(struct lr_store *s, const char *name, uint64_t expected,
		      const void *data, size_t len, struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	int rc = 0;
	void *copy = copy_bytes(data, len);
	if (!copy) {
		lr_err_set(e, "storage: append to '%s': out of memory", name);
		return -ENOMEM;
	}
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->ledgers, name, &found);
	struct ledger *l = found ? table_at(&m->ledgers, i) : NULL;
	uint64_t tip = l ? l->n : 0;
	if (tip != expected) {
		lr_err_set(e, "storage: append to '%s' conflicts at expected tip %llu (tip is %llu)",
			   name, (unsigned long long)expected, (unsigned long long)tip);
		rc = LR_ECONFLICT;
		goto out;
	}
	if (!l && !(l = table_insert(&m->ledgers, i, name))) {
		rc = -ENOMEM;
		goto out;
	}
	if (l->n == l->cap) {
		uint64_t cap = l->cap ? l->cap * 2 : 16;
		struct rec *r = realloc(l->recs, cap * sizeof *r);
		if (!r) {
			rc = -ENOMEM;
			goto out;
		}
		l->recs = r;
		l->cap = cap;
	}
	l->recs[l->n].data = copy;
	l->recs[l->n].len = len;
	l->n++;
	copy = NULL;
out:
	pthread_mutex_unlock(&m->mu);
	free(copy);
	if (rc == -ENOMEM)
		lr_err_set(e, "storage: append to '%s': out of memory", name);
	return rc;
}

static void mem_append_async(struct lr_store *s, const char *name, uint64_t expected,
			     const void *data, size_t len, lr_append_cb cb, void *arg)
{
	struct lr_err e;
	int rc = mem_append(s, name, expected, data, len, &e);
	cb(arg, rc, rc ? 0 : expected + 1, &e);
}

/*
 * Reads copy each record out under the lock, then call back without it, so
 * a callback may use the store (the journal appends while replaying).
 */
static int mem_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		    lr_record_cb cb, void *arg, struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	pthread_mutex_lock(&m->mu);
	uint64_t tip = ledger_tip(m, name);
	pthread_mutex_unlock(&m->mu);
	if (from > tip)
		return 0;
	/* from + limit - 1 would wrap for a huge limit */
	uint64_t last = limit && limit - 1 < tip - from ? from + limit - 1 : tip;
	for (uint64_t seq = from; seq <= last; seq++) {
		pthread_mutex_lock(&m->mu);
		struct ledger *l = ledger_find(m, name);
		if (!l || seq > l->n) { /* deleted meanwhile */
			pthread_mutex_unlock(&m->mu);
			break;
		}
		size_t len = l->recs[seq - 1].len;
		void *copy = copy_bytes(l->recs[seq - 1].data, len);
		pthread_mutex_unlock(&m->mu);
		if (!copy) {
			lr_err_set(e, "storage: read of '%s': out of memory", name);
			return -ENOMEM;
		}
		struct lr_record r = { seq, copy, len };
		int stop = cb(arg, &r);
		free(copy);
		if (stop)
			return stop;
	}
	return 0;
}

static int mem_tip(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e)
{
	(void)e;
	struct mem *m = (struct mem *)s;
	pthread_mutex_lock(&m->mu);
	*tip = ledger_tip(m, name);
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static void ledger_free(struct ledger *l)
{
	for (uint64_t i = 0; i < l->n; i++)
		free(l->recs[i].data);
	free(l->recs);
}

static int mem_ledger_delete(struct lr_store *s, const char *name, struct lr_err *e)
{
	(void)e;
	struct mem *m = (struct mem *)s;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->ledgers, name, &found);
	if (found) {
		ledger_free(table_at(&m->ledgers, i));
		table_remove(&m->ledgers, i);
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

/* Leases: one holder per name in this process; epochs per name only grow. */
static int mem_acquire(struct lr_store *s, const char *name, struct lr_lease **out,
		       struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	struct lr_lease *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->leases, name, &found);
	struct leaseent *le = found ? table_at(&m->leases, i) : table_insert(&m->leases, i, name);
	if (!le) {
		rc = -ENOMEM;
	} else if (le->holder) {
		lr_err_set(e, "storage: lease '%s' is held (epoch %llu)", name,
			   (unsigned long long)le->epoch);
		rc = LR_ELEASEHELD;
	} else {
		le->epoch++;
		le->holder = l;
		l->store = s;
		snprintf(l->name, sizeof l->name, "%s", name);
		l->epoch = le->epoch;
	}
	pthread_mutex_unlock(&m->mu);
	if (rc) {
		free(l);
		return rc;
	}
	*out = l;
	return 0;
}

static int mem_release(struct lr_lease *l, struct lr_err *e)
{
	(void)e;
	struct mem *m = (struct mem *)l->store;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->leases, l->name, &found);
	if (found) {
		struct leaseent *le = table_at(&m->leases, i);
		if (le->holder == l)
			le->holder = NULL;
	}
	pthread_mutex_unlock(&m->mu);
	lr__lease_fire_lost(l);
	free(l);
	return 0;
}

static int mem_kv_get(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		      struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->kvs, key, &found);
	if (!found) {
		lr_err_set(e, "storage: key '%s' not found", key);
		rc = LR_ENOTFOUND;
	} else {
		struct kv *k = table_at(&m->kvs, i);
		val->data = copy_bytes(k->val, k->len);
		if (!val->data) {
			rc = -ENOMEM;
		} else {
			val->len = k->len;
			if (rev)
				*rev = k->rev;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int mem_kv_put(struct lr_store *s, const char *key, uint64_t expected, const void *val,
		      size_t len, uint64_t *new_rev, struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	void *copy = copy_bytes(val, len);
	if (!copy)
		return -ENOMEM;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->kvs, key, &found);
	uint64_t cur = found ? ((struct kv *)table_at(&m->kvs, i))->rev : 0;
	if (cur != expected) {
		lr_err_set(e, "storage: put of '%s' conflicts: expected revision %llu, found %llu",
			   key, (unsigned long long)expected, (unsigned long long)cur);
		rc = LR_ECONFLICT;
	} else {
		struct kv *k = found ? table_at(&m->kvs, i) : table_insert(&m->kvs, i, key);
		if (!k) {
			rc = -ENOMEM;
		} else {
			free(k->val);
			k->val = copy;
			k->len = len;
			k->rev = cur + 1;
			copy = NULL;
			if (new_rev)
				*new_rev = k->rev;
		}
	}
	pthread_mutex_unlock(&m->mu);
	free(copy);
	return rc;
}

/* Names under a prefix are copied out first, so the callback may use the store. */
static int list_prefix(struct mem *m, struct table *t, const char *prefix, lr_name_cb cb,
		       void *arg, struct lr_err *e)
{
	pthread_mutex_lock(&m->mu);
	size_t plen = strlen(prefix), n = 0;
	int found;
	size_t start = table_find(t, prefix, &found), end = start;
	while (end < t->n && strncmp(*(char **)table_at(t, end), prefix, plen) == 0)
		end++;
	char **names = malloc((end - start + 1) * sizeof *names);
	if (names) {
		for (size_t i = start; i < end; i++) {
			names[n] = strdup(*(char **)table_at(t, i));
			if (!names[n])
				break;
			n++;
		}
	}
	pthread_mutex_unlock(&m->mu);
	int rc = 0;
	if (!names || n < end - start) {
		lr_err_set(e, "storage: listing '%s': out of memory", prefix);
		rc = -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (!rc)
			rc = cb(arg, names[i]);
		free(names[i]);
	}
	free(names);
	return rc;
}

static int mem_kv_keys(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		       struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	return list_prefix(m, &m->kvs, prefix, cb, arg, e);
}

static int mem_kv_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	(void)e;
	struct mem *m = (struct mem *)s;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->kvs, key, &found);
	if (found) {
		free(((struct kv *)table_at(&m->kvs, i))->val);
		table_remove(&m->kvs, i);
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static int mem_blob_put(struct lr_store *s, const char *key, const void *data, size_t len,
			struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->blobs, key, &found);
	if (found) {
		struct blob *b = table_at(&m->blobs, i);
		if (b->len != len || (len && memcmp(b->data, data, len) != 0)) {
			lr_err_set(e, "storage: blob '%s' exists with different bytes", key);
			rc = LR_EBLOBCONFLICT;
		}
	} else {
		void *copy = copy_bytes(data, len);
		struct blob *b = copy ? table_insert(&m->blobs, i, key) : NULL;
		if (!b) {
			free(copy);
			rc = -ENOMEM;
		} else {
			b->data = copy;
			b->len = len;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int mem_blob_put_fd(struct lr_store *s, const char *key, int fd, uint64_t len,
			   struct lr_err *e)
{
	if (len > SIZE_MAX / 2)
		return LR_ETOOBIG;
	char *buf = malloc(len ? (size_t)len : 1);
	if (!buf)
		return -ENOMEM;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, buf + got, (size_t)len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : LR_ECORRUPT;
			lr_err_set(e, "storage: blob '%s': reading its source failed after %zu of "
				      "%llu bytes", key, got, (unsigned long long)len);
			free(buf);
			return rc;
		}
		got += (size_t)n;
	}
	int rc = mem_blob_put(s, key, buf, (size_t)len, e);
	free(buf);
	return rc;
}

static int mem_blob_get(struct lr_store *s, const char *key, struct lr_bytes *out,
			struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->blobs, key, &found);
	if (!found) {
		lr_err_set(e, "storage: blob '%s' not found", key);
		rc = LR_ENOTFOUND;
	} else {
		struct blob *b = table_at(&m->blobs, i);
		out->data = copy_bytes(b->data, b->len);
		if (!out->data) {
			rc = -ENOMEM;
		} else {
			out->len = b->len;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int mem_blob_get_fd(struct lr_store *s, const char *key, int fd, uint64_t *len,
			   struct lr_err *e)
{
	struct lr_bytes b;
	int rc = mem_blob_get(s, key, &b, e);
	if (rc)
		return rc;
	size_t off = 0;
	while (off < b.len) {
		ssize_t n = write(fd, (char *)b.data + off, b.len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			lr_err_set(e, "storage: blob '%s': writing it out failed", key);
			break;
		}
		off += (size_t)n;
	}
	if (len)
		*len = b.len;
	lr_bytes_release(&b);
	return rc;
}

static int mem_blob_stat(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->blobs, key, &found);
	if (!found) {
		lr_err_set(e, "storage: blob '%s' not found", key);
		rc = LR_ENOTFOUND;
	} else {
		*len = ((struct blob *)table_at(&m->blobs, i))->len;
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int mem_blob_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	(void)e;
	struct mem *m = (struct mem *)s;
	pthread_mutex_lock(&m->mu);
	int found;
	size_t i = table_find(&m->blobs, key, &found);
	if (found) {
		free(((struct blob *)table_at(&m->blobs, i))->data);
		table_remove(&m->blobs, i);
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static int mem_blob_list(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
			 struct lr_err *e)
{
	struct mem *m = (struct mem *)s;
	return list_prefix(m, &m->blobs, prefix, cb, arg, e);
}

static void mem_close(struct lr_store *s)
{
	struct mem *m = (struct mem *)s;
	for (size_t i = 0; i < m->ledgers.n; i++) {
		struct ledger *l = table_at(&m->ledgers, i);
		ledger_free(l);
		free(l->name);
	}
	for (size_t i = 0; i < m->kvs.n; i++) {
		struct kv *k = table_at(&m->kvs, i);
		free(k->key);
		free(k->val);
	}
	for (size_t i = 0; i < m->blobs.n; i++) {
		struct blob *b = table_at(&m->blobs, i);
		free(b->key);
		free(b->data);
	}
	for (size_t i = 0; i < m->leases.n; i++)
		free(((struct leaseent *)table_at(&m->leases, i))->name);
	free(m->ledgers.items);
	free(m->kvs.items);
	free(m->blobs.items);
	free(m->leases.items);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static const struct lr_store_ops mem_ops = {
	.kind = "memory",
	.append = mem_append,
	.append_async = mem_append_async,
	.read = mem_read,
	.tip = mem_tip,
	.ledger_delete = mem_ledger_delete,
	.acquire = mem_acquire,
	.release = mem_release,
	.kv_get = mem_kv_get,
	.kv_put = mem_kv_put,
	.kv_keys = mem_kv_keys,
	.kv_delete = mem_kv_delete,
	.blob_put = mem_blob_put,
	.blob_put_fd = mem_blob_put_fd,
	.blob_get = mem_blob_get,
	.blob_get_fd = mem_blob_get_fd,
	.blob_stat = mem_blob_stat,
	.blob_delete = mem_blob_delete,
	.blob_list = mem_blob_list,
	.close = mem_close,
};

int lr_store_memory_open(struct lr_store **out, struct lr_err *e)
{
	struct mem *m = calloc(1, sizeof *m);
	if (!m) {
		lr_err_set(e, "storage: out of memory");
		return -ENOMEM;
	}
	m->base.ops = &mem_ops;
	pthread_mutex_init(&m->mu, NULL);
	m->ledgers.size = sizeof(struct ledger);
	m->kvs.size = sizeof(struct kv);
	m->blobs.size = sizeof(struct blob);
	m->leases.size = sizeof(struct leaseent);
	*out = &m->base;
	return 0;
}
