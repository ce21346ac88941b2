/*
 * catalog.c — per-session metadata in kv ("catalog/sessions/<uuid>"), one
 * JSON object per session, updated by compare-and-swap. Best effort: the
 * journal never waits on it, the runtime swallows its failures.
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CATALOG_PREFIX "catalog/sessions/"
#define CATALOG_RETRIES 8

static const char *const status_names[] = { "active", "stopped" };
static const char *const state_names[] = { "idle", "running", "waiting_on_gate",
					    "failed", "interrupted", "stopped" };

const char *lr_catalog_status_name(enum lr_catalog_status s)
{
	return (unsigned)s < 2 ? status_names[s] : NULL;
}

const char *lr_catalog_state_name(enum lr_catalog_state s)
{
	return (unsigned)s < 6 ? state_names[s] : NULL;
}

static int name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

static int catalog_key(char out[64], const char *sid, struct lr_err *e)
{
	int rc = lr_journal_id_check(sid, e);
	if (!rc)
		snprintf(out, 64, CATALOG_PREFIX "%s", sid);
	return rc;
}

/*
 * The entry's JSON, written directly: the same bytes as jansson's
 * json_dumps(JSON_COMPACT | JSON_SORT_KEYS) of the object (keys sorted,
 * reals as "%.17g" with ".0" or a bare exponent, jansson's string escapes;
 * tests/unit/catalog_test.c compares the two), without building and
 * sorting a tree: every turn of a session writes its entry twice. NULL
 * for a string that is not UTF-8 or a number that is not finite, as
 * jansson refused them.
 */
struct wr {
	char *p;
	size_t n, cap;
	int bad;
};

static void wr_add(struct wr *w, const char *s, size_t n)
{
	if (w->bad || n > w->cap - w->n) {
		w->bad = 1;
		return;
	}
	memcpy(w->p + w->n, s, n);
	w->n += n;
}

static void wr_lit(struct wr *w, const char *s)
{
	wr_add(w, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_seq(const unsigned char *s)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	if (c < 0xC2)
		return 0;
	if (c < 0xE0)
		return (s[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c < 0xF0) {
		unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
		return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
	}
	if (c < 0xF5) {
		unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
		return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ?
			4 : 0;
	}
	return 0;
}

static void wr_str(struct wr *w, const char *str)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str;
	wr_add(w, "\"", 1);
	while (*s) {
		int k = utf8_seq(s);
		if (!k) {
			w->bad = 1;
			return;
		}
		unsigned c = s[0];
		char esc[6] = { '\\', 0 };
		size_t en = 2;
		if (k > 1 || (c >= 0x20 && c != '"' && c != '\\')) {
			wr_add(w, (const char *)s, (size_t)k);
			s += k;
			continue;
		}
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			en = 6;
		}
		wr_add(w, esc, en);
		s++;
	}
	wr_add(w, "\"", 1);
}

static void wr_int(struct wr *w, long long v)
{
	char t[24];
	int n = snprintf(t, sizeof t, "%lld", v);
	wr_add(w, t, (size_t)n);
}

/* jansson's jsonp_dtostr with precision 17. */
static void wr_real(struct wr *w, double v)
{
	if (!isfinite(v)) {
		w->bad = 1;
		return;
	}
	char t[40];
	int n = snprintf(t, sizeof t - 2, "%.17g", v);
	for (int i = 0; i < n; i++)
		if (t[i] == ',')
			t[i] = '.'; /* a locale's decimal point */
	if (!strchr(t, '.') && !strchr(t, 'e')) {
		t[n++] = '.';
		t[n++] = '0';
		t[n] = 0;
	}
	char *e = strchr(t, 'e');
	if (e) {
		char *start = e + 1, *end = start + 1;
		if (*start == '-')
			start++;
		while (*end == '0')
			end++;
		if (end != start) {
			memmove(start, end, (size_t)(t + n + 1 - end));
			n -= (int)(end - start);
		}
	}
	wr_add(w, t, (size_t)n);
}

static char *entry_encode(const struct lr_catalog_entry *c, size_t *len)
{
	const char *status = lr_catalog_status_name(c->status);
	const char *state = lr_catalog_state_name(c->state);
	if (!status || !state)
		return NULL;
	char buf[4096];
	struct wr w = { buf, 0, sizeof buf, 0 };
	wr_lit(&w, "{\"created_at\":");
	wr_real(&w, c->created_at);
	if (c->forked_from[0]) {
		wr_lit(&w, ",\"forked_from\":{\"at\":");
		wr_int(&w, (long long)c->forked_at);
		wr_lit(&w, ",\"session\":");
		wr_str(&w, c->forked_from);
		wr_lit(&w, "}");
	}
	wr_lit(&w, ",\"id\":");
	wr_str(&w, c->id);
	wr_lit(&w, ",\"last_active_at\":");
	wr_real(&w, c->last_active_at);
	wr_lit(&w, ",\"last_seq\":");
	wr_int(&w, (long long)c->last_seq);
	wr_lit(&w, ",\"loop_count\":");
	wr_int(&w, (long long)c->loop_count);
	wr_lit(&w, ",\"state\":");
	wr_str(&w, state);
	wr_lit(&w, ",\"status\":");
	wr_str(&w, status);
	wr_lit(&w, ",\"title\":");
	wr_str(&w, c->title);
	wr_lit(&w, ",\"usage\":{\"cache_read_tokens\":");
	wr_int(&w, (long long)c->cache_read_tokens);
	wr_lit(&w, ",\"cost\":");
	wr_real(&w, c->cost);
	wr_lit(&w, ",\"input_tokens\":");
	wr_int(&w, (long long)c->input_tokens);
	wr_lit(&w, ",\"output_tokens\":");
	wr_int(&w, (long long)c->output_tokens);
	wr_lit(&w, "},\"v\":1,\"workspace_ref\":");
	wr_str(&w, c->workspace_ref);
	wr_lit(&w, "}");
	if (w.bad)
		return NULL;
	char *s = malloc(w.n + 1);
	if (!s)
		return NULL;
	memcpy(s, buf, w.n);
	s[w.n] = 0;
	*len = w.n;
	return s;
}

static int copy_str(char *dst, size_t cap, json_t *v)
{
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return -1;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int get_u64(uint64_t *dst, json_t *v)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*dst = (uint64_t)json_integer_value(v);
	return 0;
}

static int get_num(double *dst, json_t *v)
{
	if (!json_is_number(v))
		return -1;
	*dst = json_number_value(v);
	return 0;
}

/* Strict: every member known, each of its type, none missing. */
static int entry_decode(const void *data, size_t len, const char *key,
			struct lr_catalog_entry *c, struct lr_err *e)
{
	json_error_t je;
	json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
	const char *bad = NULL;
	memset(c, 0, sizeof *c);
	if (!o || !json_is_object(o)) {
		bad = "is not a JSON object";
		goto out;
	}
	json_t *usage = json_object_get(o, "usage");
	json_t *fork = json_object_get(o, "forked_from"); /* optional */
	if (json_object_size(o) != (fork ? 12u : 11u) || !json_is_object(usage) ||
	    json_object_size(usage) != 4 ||
	    (fork && (!json_is_object(fork) || json_object_size(fork) != 2))) {
		bad = "has missing or unknown members";
		goto out;
	}
	json_t *v = json_object_get(o, "v");
	if (!json_is_integer(v) || json_integer_value(v) != 1) {
		bad = "has an unknown version";
		goto out;
	}
	char status[16], state[32];
	if (copy_str(c->id, sizeof c->id, json_object_get(o, "id")) ||
	    lr_journal_id_check(c->id, NULL) ||
	    copy_str(c->title, sizeof c->title, json_object_get(o, "title")) ||
	    get_num(&c->created_at, json_object_get(o, "created_at")) ||
	    get_num(&c->last_active_at, json_object_get(o, "last_active_at")) ||
	    copy_str(status, sizeof status, json_object_get(o, "status")) ||
	    copy_str(state, sizeof state, json_object_get(o, "state")) ||
	    get_u64(&c->loop_count, json_object_get(o, "loop_count")) ||
	    get_u64(&c->last_seq, json_object_get(o, "last_seq")) ||
	    get_u64(&c->input_tokens, json_object_get(usage, "input_tokens")) ||
	    get_u64(&c->output_tokens, json_object_get(usage, "output_tokens")) ||
	    get_u64(&c->cache_read_tokens, json_object_get(usage, "cache_read_tokens")) ||
	    get_num(&c->cost, json_object_get(usage, "cost")) ||
	    copy_str(c->workspace_ref, sizeof c->workspace_ref, json_object_get(o, "workspace_ref"))) {
		bad = "has a member of the wrong type or size";
		goto out;
	}
	if (fork && (copy_str(c->forked_from, sizeof c->forked_from,
			      json_object_get(fork, "session")) ||
		     lr_journal_id_check(c->forked_from, NULL) ||
		     get_u64(&c->forked_at, json_object_get(fork, "at")) || c->forked_at == 0)) {
		bad = "has a malformed forked_from";
		goto out;
	}
	int st = name_index(status_names, 2, status), sa = name_index(state_names, 6, state);
	if (st < 0 || sa < 0) {
		bad = "has an unknown status or state";
		goto out;
	}
	c->status = (enum lr_catalog_status)st;
	c->state = (enum lr_catalog_state)sa;
	if (strcmp(key + strlen(CATALOG_PREFIX), c->id) != 0)
		bad = "names another session";
out:
	json_decref(o);
	if (bad) {
		lr_err_set(e, "catalog: entry '%s' %s", key, bad);
		return LR_ECORRUPT;
	}
	return 0;
}

static int entry_load(struct lr_store *s, const char *key, struct lr_catalog_entry *c,
		      uint64_t *rev, struct lr_err *e)
{
	struct lr_bytes b = { NULL, 0 };
	int rc = lr_store_kv_get(s, key, &b, rev, e);
	if (rc)
		return rc;
	rc = entry_decode(b.data, b.len, key, c, e);
	lr_bytes_release(&b);
	return rc;
}

/* One attempt's read and change: 0 with *json (to put at *rev), 1 when fn
 * leaves the entry as it is, or an error. known (at known_rev, not 0): the
 * entry as the caller last wrote it, used instead of reading and decoding
 * the stored one (a put at a rev that moved meanwhile conflicts). out (if
 * set): the entry *json holds. */
static int prepare(struct lr_store *store, const char *key, const char *sid, lr_catalog_fn fn,
		   void *arg, const struct lr_catalog_entry *known, uint64_t known_rev,
		   uint64_t *rev, char **json, size_t *len, struct lr_catalog_entry *out,
		   struct lr_err *e)
{
	struct lr_catalog_entry c;
	*rev = 0;
	*json = NULL;
	int rc;
	if (known && known_rev) {
		c = *known;
		*rev = known_rev;
		rc = 0;
	} else {
		rc = entry_load(store, key, &c, rev, e);
	}
	int exists = rc == 0;
	if (rc == LR_ENOTFOUND) {
		memset(&c, 0, sizeof c);
		snprintf(c.id, sizeof c.id, "%s", sid);
		c.created_at = c.last_active_at = lr_wall_seconds();
		*rev = 0;
	} else if (rc) {
		return rc;
	}
	rc = fn(arg, &c, exists);
	if (rc)
		return rc;
	snprintf(c.id, sizeof c.id, "%s", sid); /* fn may not move the entry */
	if (!lr_catalog_status_name(c.status) || !lr_catalog_state_name(c.state)) {
		lr_err_set(e, "catalog: update of '%s' gave an invalid status or state", key);
		return -EINVAL;
	}
	*json = entry_encode(&c, len);
	if (!*json) {
		lr_err_set(e, "catalog: cannot encode '%s' (invalid UTF-8 in a string?)", key);
		return -EINVAL;
	}
	if (out)
		*out = c;
	return 0;
}

int lr_catalog_update(struct lr_store *store, const char *sid, lr_catalog_fn fn, void *arg,
		      struct lr_err *e)
{
	char key[64];
	int rc = catalog_key(key, sid, e);
	if (rc)
		return rc;
	for (int attempt = 0; attempt < CATALOG_RETRIES; attempt++) {
		uint64_t rev;
		char *json;
		size_t len = 0;
		rc = prepare(store, key, sid, fn, arg, NULL, 0, &rev, &json, &len, NULL, e);
		if (rc == 1)
			return 0;
		if (rc)
			return rc;
		rc = lr_store_kv_put(store, key, rev, json, len, NULL, e);
		free(json);
		if (rc != LR_ECONFLICT)
			return rc;
	}
	lr_err_set(e, "catalog: update of '%s' lost %d races in a row", key, CATALOG_RETRIES);
	return LR_ECONFLICT;
}

void lr_catalog_update_many(struct lr_store *store, size_t n, struct lr_catalog_job *jobs)
{
	struct lr_kv_put *puts = calloc(n ? n : 1, sizeof *puts);
	char (*keys)[64] = calloc(n ? n : 1, sizeof *keys);
	size_t *of = calloc(n ? n : 1, sizeof *of);
	if (!puts || !keys || !of) {
		free(puts);
		free(keys);
		free(of);
		for (size_t i = 0; i < n; i++)
			jobs[i].rc = lr_catalog_update(store, jobs[i].sid, jobs[i].fn, jobs[i].arg,
						       &jobs[i].err);
		return;
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		struct lr_catalog_job *j = &jobs[i];
		j->err.msg[0] = 0;
		j->wrote_rev = 0;
		if ((j->rc = catalog_key(keys[i], j->sid, &j->err)) != 0)
			continue;
		char *json;
		size_t len = 0;
		uint64_t rev;
		j->rc = prepare(store, keys[i], j->sid, j->fn, j->arg, j->known, j->known_rev, &rev,
				&json, &len, j->wrote, &j->err);
		if (j->rc == 1)
			j->rc = 0;
		if (j->rc || !json)
			continue;
		puts[m] = (struct lr_kv_put){ .key = keys[i], .expected_rev = rev, .val = json,
					      .len = len };
		of[m++] = i;
	}
	lr_store_kv_put_many(store, m, puts);
	for (size_t k = 0; k < m; k++) {
		struct lr_catalog_job *j = &jobs[of[k]];
		free((void *)puts[k].val);
		j->rc = puts[k].rc;
		if (j->rc == 0 && j->wrote)
			j->wrote_rev = puts[k].new_rev;
		if (j->rc == LR_ECONFLICT) /* lost a race: on its own, as one update */
			j->rc = lr_catalog_update(store, j->sid, j->fn, j->arg, &j->err);
		else if (j->rc)
			j->err = puts[k].err;
	}
	free(puts);
	free(keys);
	free(of);
}

struct note {
	uint64_t seq;
	int set; /* repair: set exactly, not the maximum */
};

static int note_fn(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	const struct note *n = arg;
	if (n->set || n->seq > c->last_seq)
		c->last_seq = n->seq;
	c->last_active_at = lr_wall_seconds();
	return 0;
}

int lr_catalog_note_append(struct lr_store *store, const char *sid, uint64_t seq,
			   struct lr_err *e)
{
	struct note n = { seq, 0 };
	return lr_catalog_update(store, sid, note_fn, &n, e);
}

static int repair_fn(void *arg, struct lr_catalog_entry *c, int exists)
{
	(void)exists;
	const struct note *n = arg;
	if (exists && c->last_seq == n->seq)
		return 1;
	c->last_seq = n->seq;
	return 0;
}

int lr_catalog_repair(struct lr_store *store, const char *sid, struct lr_err *e)
{
	char key[64];
	int rc = catalog_key(key, sid, e);
	if (rc)
		return rc;
	struct note n = { 0, 1 };
	rc = lr_store_tip(store, key + strlen("catalog/"), &n.seq, e);
	if (rc)
		return rc;
	return lr_catalog_update(store, sid, repair_fn, &n, e);
}

int lr_catalog_get(struct lr_store *store, const char *sid, struct lr_catalog_entry *out,
		   struct lr_err *e)
{
	char key[64];
	int rc = catalog_key(key, sid, e);
	if (rc)
		return rc;
	rc = entry_load(store, key, out, NULL, e);
	if (rc == LR_ENOTFOUND)
		lr_err_set(e, "catalog: no entry for session '%s'", sid);
	return rc;
}

int lr_catalog_delete(struct lr_store *store, const char *sid, struct lr_err *e)
{
	char key[64];
	int rc = catalog_key(key, sid, e);
	if (rc)
		return rc;
	return lr_store_kv_delete(store, key, e);
}

struct list_ctx {
	struct lr_store *store;
	lr_catalog_cb cb;
	void *arg;
	int rc;
	struct lr_err err;
};

static int list_one(void *arg, const char *key)
{
	struct list_ctx *l = arg;
	struct lr_catalog_entry c;
	int rc = entry_load(l->store, key, &c, NULL, &l->err);
	if (rc == LR_ENOTFOUND) /* deleted meanwhile */
		return 0;
	if (rc) {
		l->rc = rc;
		return 1;
	}
	return l->cb(l->arg, &c);
}

int lr_catalog_list(struct lr_store *store, lr_catalog_cb cb, void *arg, struct lr_err *e)
{
	struct list_ctx l = { store, cb, arg, 0, { "" } };
	int rc = lr_store_kv_keys(store, CATALOG_PREFIX, list_one, &l, e);
	if (l.rc) {
		*e = l.err;
		return l.rc;
	}
	return rc;
}
