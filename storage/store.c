/*
 * store.c — the contract's front door: argument and name checks, messages,
 * and the append-definitely helper. Backends live in their own files.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lr_bytes_release(struct lr_bytes *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
}

static int seg_first(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int seg_rest(unsigned char c)
{
	return seg_first(c) || c == '_' || c == '.' || c == '-';
}

int lr_store_name_check(const char *name, struct lr_err *e)
{
	if (!name || !*name) {
		lr_err_set(e, "storage: empty name");
		return -EINVAL;
	}
	size_t n = strnlen(name, LR_STORE_NAME_MAX + 1);
	if (n > LR_STORE_NAME_MAX) {
		lr_err_set(e, "storage: name '%.40s…' is longer than %d bytes", name,
			   LR_STORE_NAME_MAX);
		return -EINVAL;
	}
	int start = 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c == '/') {
			if (start)
				goto bad;
			start = 1;
			continue;
		}
		if (start ? !seg_first(c) : !seg_rest(c))
			goto bad;
		start = 0;
	}
	if (start)
		goto bad;
	return 0;
bad:
	lr_err_set(e, "storage: invalid name '%.*s' (lower-case segments [a-z0-9][a-z0-9_.-]* "
		      "joined by '/')", (int)(n > 200 ? 200 : n), name);
	return -EINVAL;
}

#define CHECK_NAME(name)                                        \
	do {                                                    \
		int rc_ = lr_store_name_check((name), e);       \
		if (rc_)                                        \
			return rc_;                             \
	} while (0)

const char *lr_store_kind(const struct lr_store *s)
{
	return s->ops->kind;
}

void lr_store_inject_failure(struct lr_store *s, long after)
{
	__atomic_store_n(&s->inject_append, after < 0 ? 0 : after + 1, __ATOMIC_SEQ_CST);
}

/* 1 when this append must fail: inject_append is 0 (off), 1 (failing) or n + 1 (n to go). */
static int injected(struct lr_store *s, const char *name, struct lr_err *e)
{
	long v = __atomic_load_n(&s->inject_append, __ATOMIC_SEQ_CST);
	while (v > 1 && !__atomic_compare_exchange_n(&s->inject_append, &v, v - 1, 0,
						     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (v != 1)
		return 0;
	lr_err_set(e, "storage: append to '%s': injected failure", name);
	return 1;
}

int lr_store_append(struct lr_store *s, const char *name, uint64_t expected_tip,
		    const void *rec, size_t len, struct lr_err *e)
{
	CHECK_NAME(name);
	if (injected(s, name, e))
		return -EIO;
	return s->ops->append(s, name, expected_tip, rec, len, e);
}

void lr_store_append_async(struct lr_store *s, const char *name, uint64_t expected_tip,
			   const void *rec, size_t len, lr_append_cb cb, void *arg)
{
	struct lr_err e;
	int rc = lr_store_name_check(name, &e);
	if (rc) {
		cb(arg, rc, 0, &e);
		return;
	}
	if (injected(s, name, &e)) {
		cb(arg, -EIO, 0, &e);
		return;
	}
	s->ops->append_async(s, name, expected_tip, rec, len, cb, arg);
}

struct same_ctx {
	const void *rec;
	size_t len;
	int found, equal;
};

static int same_cb(void *arg, const struct lr_record *r)
{
	struct same_ctx *c = arg;
	c->found = 1;
	c->equal = r->len == c->len && (c->len == 0 || memcmp(r->data, c->rec, c->len) == 0);
	return 1;
}

int lr_store_append_definitely(struct lr_store *s, const char *name, uint64_t expected_tip,
			       const void *rec, size_t len, struct lr_err *e)
{
	CHECK_NAME(name);
	if (injected(s, name, e))
		return -EIO;
	int rc = s->ops->append(s, name, expected_tip, rec, len, e);
	struct lr_err first;
	if (rc == LR_EAMBIGUOUS) {
		first = *e;
		rc = s->ops->append(s, name, expected_tip, rec, len, e);
		/* the retry failing before it learnt anything (a timeout, no connection) leaves
		 * the first attempt's outcome unknown: still ambiguous, not that failure */
		if (rc && rc != LR_ECONFLICT) {
			*e = first;
			return LR_EAMBIGUOUS;
		}
	}
	if (rc != LR_ECONFLICT)
		return rc;
	/* Did our bytes land at expected_tip + 1 (an ambiguous first try that succeeded)? */
	struct same_ctx c = { rec, len, 0, 0 };
	struct lr_err re;
	int r2 = s->ops->read(s, name, expected_tip + 1, 1, same_cb, &c, &re);
	if (r2 < 0) {
		lr_err_set(e, "storage: append to '%s' at %llu: cannot verify: %s", name,
			   (unsigned long long)expected_tip + 1, re.msg);
		return r2;
	}
	if (c.found && c.equal)
		return 0;
	lr_err_set(e, "storage: append to '%s' conflicts at expected tip %llu", name,
		   (unsigned long long)expected_tip);
	return LR_ECONFLICT;
}

int lr_store_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		  lr_record_cb cb, void *arg, struct lr_err *e)
{
	CHECK_NAME(name);
	return s->ops->read(s, name, from ? from : 1, limit, cb, arg, e);
}

int lr_store_tip(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e)
{
	CHECK_NAME(name);
	return s->ops->tip(s, name, tip, e);
}

int lr_store_ledger_delete(struct lr_store *s, const char *name, struct lr_err *e)
{
	CHECK_NAME(name);
	return s->ops->ledger_delete(s, name, e);
}

int lr_store_acquire(struct lr_store *s, const char *name, struct lr_lease **out,
		     struct lr_err *e)
{
	*out = NULL;
	CHECK_NAME(name);
	return s->ops->acquire(s, name, out, e);
}

int lr_store_release(struct lr_lease *l, struct lr_err *e)
{
	if (!l)
		return 0;
	return l->store->ops->release(l, e);
}

int lr_store_kv_get(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		    struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->kv_get(s, key, val, rev, e);
}

int lr_store_kv_put(struct lr_store *s, const char *key, uint64_t expected_rev,
		    const void *val, size_t len, uint64_t *new_rev, struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->kv_put(s, key, expected_rev, val, len, new_rev, e);
}

void lr_store_kv_put_many(struct lr_store *s, size_t n, struct lr_kv_put *puts)
{
	if (n == 0)
		return;
	size_t ok = 0;
	for (size_t i = 0; i < n; i++) {
		puts[i].err.msg[0] = 0;
		puts[i].rc = lr_store_name_check(puts[i].key, &puts[i].err);
		ok += puts[i].rc == 0;
	}
	if (s->ops->kv_put_many && ok == n) {
		s->ops->kv_put_many(s, n, puts);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (puts[i].rc == 0)
			puts[i].rc = s->ops->kv_put(s, puts[i].key, puts[i].expected_rev, puts[i].val,
						    puts[i].len, &puts[i].new_rev, &puts[i].err);
}

int lr_store_kv_keys(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		     struct lr_err *e)
{
	return s->ops->kv_keys(s, prefix ? prefix : "", cb, arg, e);
}

int lr_store_kv_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->kv_delete(s, key, e);
}

int lr_store_blob_put(struct lr_store *s, const char *key, const void *data, size_t len,
		      struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->blob_put(s, key, data, len, e);
}

int lr_store_blob_put_fd(struct lr_store *s, const char *key, int fd, uint64_t len,
			 struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->blob_put_fd(s, key, fd, len, e);
}

int lr_store_blob_get(struct lr_store *s, const char *key, struct lr_bytes *out,
		      struct lr_err *e)
{
	out->data = NULL;
	out->len = 0;
	CHECK_NAME(key);
	return s->ops->blob_get(s, key, out, e);
}

int lr_store_blob_get_fd(struct lr_store *s, const char *key, int fd, uint64_t *len,
			 struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->blob_get_fd(s, key, fd, len, e);
}

int lr_store_blob_stat(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->blob_stat(s, key, len, e);
}

int lr_store_blob_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	CHECK_NAME(key);
	return s->ops->blob_delete(s, key, e);
}

int lr_store_blob_list(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		       struct lr_err *e)
{
	return s->ops->blob_list(s, prefix ? prefix : "", cb, arg, e);
}

void lr_store_close(struct lr_store *s)
{
	if (s)
		s->ops->close(s);
}

/* ---- lease loss notification ---- */

static pthread_mutex_t lost_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void lr__lease_fire_lost(struct lr_lease *l)
{
	if (__atomic_exchange_n(&l->lost, 1, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&lost_mu);
	if (l->on_lost)
		l->on_lost(l, l->on_lost_arg);
	pthread_mutex_unlock(&lost_mu);
}

void lr__lease_hook(struct lr_lease *l, void (*fn)(struct lr_lease *, void *), void *arg,
		    void (**prev_fn)(struct lr_lease *, void *), void **prev_arg)
{
	pthread_mutex_lock(&lost_mu);
	*prev_fn = l->on_lost;
	*prev_arg = l->on_lost_arg;
	l->on_lost_arg = arg;
	l->on_lost = fn;
	pthread_mutex_unlock(&lost_mu);
}

void lr__lease_lost_lock(void)
{
	pthread_mutex_lock(&lost_mu);
}

void lr__lease_lost_unlock(void)
{
	pthread_mutex_unlock(&lost_mu);
}
