/*
 * journal_test.c — the session journal on the memory backend: frame
 * round trip and strictness, fences, idempotency, blob offload, stale
 * writers, corrupted records, replay from any sequence, concurrency.
 */
#include "../../storage/internal.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SID "4f2a9c1e-7b3d-4e8f-9a0b-1c2d3e4f5a6b"
#define LEDGER "sessions/" SID

static struct lr_store *mem(void)
{
	struct lr_store *s = NULL;
	struct lr_err e;
	if (lr_store_memory_open(&s, &e) != 0)
		abort();
	return s;
}

/* Keeps every record a replay gives, copied. */
struct got {
	int n;
	uint64_t seq[64];
	int kind[64];
	int offloaded[64];
	char id[64][LR_JOURNAL_ID_MAX + 1];
	char *body[64];
	size_t len[64];
	uint64_t epoch[64];
};

static int keep(void *arg, const struct lr_journal_rec *r)
{
	struct got *g = arg;
	if (g->n == 64)
		return 0;
	int i = g->n++;
	g->seq[i] = r->seq;
	g->kind[i] = r->kind;
	g->offloaded[i] = r->offloaded;
	memcpy(g->id[i], r->id, r->id_len + 1);
	g->body[i] = malloc(r->len + 1);
	memcpy(g->body[i], r->body, r->len);
	g->body[i][r->len] = '\0';
	g->len[i] = r->len;
	g->epoch[i] = r->epoch;
	return 0;
}

static void got_release(struct got *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->body[i]);
	g->n = 0;
}

TEST(crc32c_known_vectors)
{
	CHECK_EQ_INT(lr_crc32c(0, "123456789", 9), 0xE3069283u);
	CHECK_EQ_INT(lr_crc32c(0, "", 0), 0);
	unsigned char zeros[32] = { 0 };
	CHECK_EQ_INT(lr_crc32c(0, zeros, 32), 0x8A9136AAu);
	/* Incremental over an unaligned split equals one pass. */
	const char *t = "The quick brown fox jumps over the lazy dog, twice over";
	size_t n = strlen(t);
	CHECK_EQ_INT(lr_crc32c(lr_crc32c(0, t, 5), t + 5, n - 5), lr_crc32c(0, t, n));
	/* The hardware path and the tables agree on every length and alignment. */
	unsigned char buf[600];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	int same = 1;
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len + off <= sizeof buf; len += 7)
			same &= lr_crc32c(0x1234, buf + off, len) == lr__crc32c_sw(0x1234, buf + off, len);
	CHECK(same);
	CHECK_EQ_INT(lr__crc32c_sw(0, "123456789", 9), 0xE3069283u);
}

TEST(session_ids)
{
	char a[37], b[37];
	CHECK_EQ_INT(lr_journal_new_id(a), 0);
	CHECK_EQ_INT(lr_journal_new_id(b), 0);
	CHECK_EQ_INT(strlen(a), 36);
	CHECK(strcmp(a, b) != 0);
	CHECK(a[14] == '4');
	CHECK(strchr("89ab", a[19]) != NULL);
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_id_check(a, &e), 0);
	CHECK_EQ_INT(lr_journal_id_check("4F2A9C1E-7B3D-4E8F-9A0B-1C2D3E4F5A6B", &e), -EINVAL);
	CHECK(strstr(e.msg, "invalid session id") != NULL);
	CHECK_EQ_INT(lr_journal_id_check("4f2a9c1e7b3d-4e8f-9a0b-1c2d3e4f5a6b0", &e), -EINVAL);
	CHECK_EQ_INT(lr_journal_id_check("", &e), -EINVAL);
	CHECK_EQ_INT(lr_journal_id_check(NULL, &e), -EINVAL);
}

TEST(frame_round_trip_and_strictness)
{
	struct lr_buf b;
	lr_buf_init(&b, 1 << 20);
	const char *body = "{\"type\":\"TurnStarted\",\"v\":1}";
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "ev-1", 4, body, strlen(body)), 0);
	CHECK_EQ_INT(b.len, LR_JOURNAL_OVERHEAD + 4 + strlen(body));
	struct lr_journal_rec r;
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "sessions/x", 7, &r, &e), 0);
	CHECK_EQ_INT(r.seq, 7);
	CHECK_EQ_INT(r.kind, LR_JOURNAL_EVENT);
	CHECK_EQ_STR(r.id, "ev-1");
	CHECK_EQ_INT(r.len, strlen(body));
	CHECK(memcmp(r.body, body, r.len) == 0);

	/* Every single-byte flip anywhere is caught. */
	int caught = 0;
	for (size_t i = 0; i < b.len; i++) {
		for (int bit = 0; bit < 8; bit++) {
			b.data[i] ^= (char)(1 << bit);
			if (lr_journal_decode(b.data, b.len, "sessions/x", 7, &r, &e) == LR_ECORRUPT &&
			    strstr(e.msg, "record 7 of 'sessions/x'"))
				caught++;
			b.data[i] ^= (char)(1 << bit);
		}
	}
	CHECK_EQ_INT(caught, (int)b.len * 8);
	/* Truncation and trailing bytes. */
	for (size_t n = 0; n < b.len; n++)
		CHECK_EQ_INT(lr_journal_decode(b.data, n, "l", 1, &r, &e), LR_ECORRUPT);
	CHECK_EQ_INT(lr_buf_add(&b, "x", 1), 0);
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "l", 1, &r, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "trailing") != NULL);

	/* A bad CRC says so. */
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_COMMAND, "", 0, "{}", 2), 0);
	b.data[b.len - 1] ^= 1;
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "sessions/y", 42, &r, &e), LR_ECORRUPT);
	CHECK_EQ_STR(e.msg, "journal: record 42 of 'sessions/y' fails its checksum");

	/* Unknown kind with a valid CRC (a future version's record) is refused by name. */
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "", 0, "{}", 2), 0);
	b.data[2] = 9;
	uint32_t c = lr_crc32c(0, b.data, b.len - 4);
	memcpy(b.data + b.len - 4, &c, 4);
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "l", 3, &r, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "unknown kind 9") != NULL);

	/* Encode refuses bad kinds, long or unprintable ids. */
	char id[300];
	memset(id, 'a', sizeof id);
	CHECK_EQ_INT(lr_journal_encode(&b, 0, "", 0, "", 0), -EINVAL);
	CHECK_EQ_INT(lr_journal_encode(&b, 6, "", 0, "", 0), -EINVAL);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, id, 257, "", 0), -EINVAL);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, id, 256, "", 0), 0);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "a\nb", 3, "", 0), -EINVAL);

	/* A fence whose id is not its epoch is refused. */
	unsigned char fb[8] = { 3, 0, 0, 0, 0, 0, 0, 0 };
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, "3", 1, fb, 8), 0);
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "l", 1, &r, &e), 0);
	CHECK_EQ_INT(r.epoch, 3);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, "4", 1, fb, 8), 0);
	CHECK_EQ_INT(lr_journal_decode(b.data, b.len, "l", 1, &r, &e), LR_ECORRUPT);
	lr_buf_release(&b);
}

static void acquire(struct lr_store *s, struct lr_lease **l)
{
	struct lr_err e;
	if (lr_store_acquire(s, LEDGER, l, &e) != 0) {
		fprintf(stderr, "acquire: %s\n", e.msg);
		abort();
	}
}

TEST(open_fences_append_replay)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	acquire(s, &l);
	struct lr_journal *j = NULL;
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	CHECK_EQ_INT(lr_journal_tip(j), 1);
	CHECK_EQ_INT(lr_journal_epoch(j), l->epoch);
	uint64_t seq = 0;
	int appended = -1;
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "e1", "{\"a\":1}", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 2);
	CHECK_EQ_INT(appended, 1);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_COMMAND, "c1", "{}", 2, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 3);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_GATE_PREPARED, "", "", 0, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 4);
	/* Only event, command and gate_prepared may be appended. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_FENCE, "9", "12345678", 8, &seq, NULL, &e), -EINVAL);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_BLOBPTR, "x", "", 0, &seq, NULL, &e), -EINVAL);
	CHECK_EQ_INT(lr_journal_tip(j), 4);

	struct got g = { 0 };
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 4);
	CHECK_EQ_INT(g.kind[0], LR_JOURNAL_FENCE);
	CHECK_EQ_INT(g.epoch[0], l->epoch);
	CHECK_EQ_INT(g.kind[1], LR_JOURNAL_EVENT);
	CHECK_EQ_STR(g.id[1], "e1");
	CHECK_EQ_STR(g.body[1], "{\"a\":1}");
	CHECK_EQ_INT(g.kind[2], LR_JOURNAL_COMMAND);
	CHECK_EQ_INT(g.kind[3], LR_JOURNAL_GATE_PREPARED);
	CHECK_EQ_INT(g.seq[3], 4);
	got_release(&g);
	/* From the middle, and past the tip. */
	CHECK_EQ_INT(lr_journal_replay(s, SID, 3, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 2);
	CHECK_EQ_INT(g.seq[0], 3);
	got_release(&g);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 99, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 0);
	/* A session never written replays nothing. */
	CHECK_EQ_INT(lr_journal_replay(s, "00000000-0000-4000-8000-000000000000", 0, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 0);
	CHECK_EQ_INT(lr_journal_replay(s, "nope", 0, keep, &g, &e), -EINVAL);

	/* Reopen with a new lease: a second fence with a greater epoch. */
	lr_journal_close(j);
	uint64_t first = l->epoch;
	lr_store_release(l, &e);
	acquire(s, &l);
	CHECK(l->epoch > first);
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	CHECK_EQ_INT(lr_journal_tip(j), 5);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 5, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 1);
	CHECK_EQ_INT(g.kind[0], LR_JOURNAL_FENCE);
	CHECK_EQ_INT(g.epoch[0], l->epoch);
	got_release(&g);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

TEST(open_needs_the_right_lease)
{
	struct lr_store *s = mem();
	struct lr_journal *j = NULL;
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_open(s, SID, NULL, &j, &e), -EINVAL);
	CHECK(strstr(e.msg, "needs its lease") != NULL);
	struct lr_lease *other;
	CHECK_EQ_INT(lr_store_acquire(s, "sessions/00000000-0000-4000-8000-000000000000", &other, &e), 0);
	CHECK_EQ_INT(lr_journal_open(s, SID, other, &j, &e), -EINVAL);
	CHECK(j == NULL);
	lr_store_release(other, &e);
	CHECK_EQ_INT(lr_journal_open(s, "Not-A-Uuid", NULL, &j, &e), -EINVAL);
	lr_store_close(s);
}

TEST(idempotent_appends)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	acquire(s, &l);
	struct lr_journal *j;
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	uint64_t seq;
	int appended;
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-a", "{\"x\":1}", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 2);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-b", "{\"x\":2}", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 3);
	/* The same id and bytes: the original sequence, nothing appended. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-a", "{\"x\":1}", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 2);
	CHECK_EQ_INT(appended, 0);
	CHECK_EQ_INT(lr_journal_tip(j), 3);
	/* The same id, other bytes or another kind: a collision naming the id and seq. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-a", "{\"x\":9}", 7, &seq, &appended, &e), LR_ECONFLICT);
	CHECK(strstr(e.msg, "idempotency collision") != NULL);
	CHECK(strstr(e.msg, "'ev-a'") != NULL);
	CHECK(strstr(e.msg, "at 2") != NULL);
	CHECK_EQ_INT(appended, 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_COMMAND, "ev-a", "{\"x\":1}", 7, &seq, NULL, &e), LR_ECONFLICT);
	CHECK_EQ_INT(lr_journal_tip(j), 3);
	/* An empty id never deduplicates. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 5);
	/* The index survives a reopen (hydrated from the ledger). */
	lr_journal_close(j);
	lr_store_release(l, &e);
	acquire(s, &l);
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	CHECK_EQ_INT(lr_journal_tip(j), 6);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-b", "{\"x\":2}", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 3);
	CHECK_EQ_INT(appended, 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ev-b", "{\"x\":3}", 7, &seq, &appended, &e), LR_ECONFLICT);
	/* Many ids (the index grows). */
	char id[32];
	for (int i = 0; i < 500; i++) {
		snprintf(id, sizeof id, "bulk-%d", i);
		CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, id, id, strlen(id), &seq, &appended, &e), 0);
	}
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "bulk-17", "bulk-17", 7, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 7 + 17);
	CHECK_EQ_INT(appended, 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

struct blobkeys {
	int n;
	char key[4][200];
};

static int note_key(void *arg, const char *name)
{
	struct blobkeys *k = arg;
	if (k->n < 4)
		snprintf(k->key[k->n++], sizeof k->key[0], "%s", name);
	return 0;
}

TEST(large_bodies_go_to_blobs)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	acquire(s, &l);
	struct lr_journal *j;
	struct lr_err e;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	size_t n = LR_JOURNAL_INLINE_MAX + 1;
	char *big = malloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 26);
	uint64_t seq;
	int appended;
	/* Exactly at the threshold stays inline. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "inline", big, n - 1, &seq, &appended, &e), 0);
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "big", big, n, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 3);
	struct blobkeys k = { 0 };
	CHECK_EQ_INT(lr_store_blob_list(s, LEDGER "/blobs/", note_key, &k, &e), 0);
	CHECK_EQ_INT(k.n, 1);
	char hex[65];
	lr_sha256_hex(big, n, hex);
	CHECK(strstr(k.key[0], hex) != NULL);
	/* The raw record is a small pointer. */
	struct got g = { 0 };
	CHECK_EQ_INT(lr_journal_replay(s, SID, 2, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 2);
	CHECK_EQ_INT(g.offloaded[0], 0);
	CHECK_EQ_INT(g.offloaded[1], 1);
	CHECK_EQ_INT(g.kind[1], LR_JOURNAL_EVENT);
	CHECK_EQ_STR(g.id[1], "big");
	CHECK_EQ_INT(g.len[1], n);
	CHECK(memcmp(g.body[1], big, n) == 0);
	got_release(&g);
	/* Dedup of a pointer record compares size and SHA-256. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "big", big, n, &seq, &appended, &e), 0);
	CHECK_EQ_INT(seq, 3);
	CHECK_EQ_INT(appended, 0);
	big[100] = '!';
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "big", big, n, &seq, &appended, &e), LR_ECONFLICT);
	big[100] = 'w';
	/* A blob with other bytes under the key: SHA-256 mismatch naming seq and key. */
	CHECK_EQ_INT(lr_store_blob_delete(s, k.key[0], &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, k.key[0], big, n - 1, &e), 0);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, keep, &g, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "record 3 of '" LEDGER "'") != NULL);
	CHECK(strstr(e.msg, k.key[0]) != NULL);
	CHECK_EQ_INT(g.n, 2); /* the records before it were delivered */
	got_release(&g);
	big[n - 1] ^= 1;
	CHECK_EQ_INT(lr_store_blob_delete(s, k.key[0], &e), 0);
	CHECK_EQ_INT(lr_store_blob_put(s, k.key[0], big, n, &e), 0);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 3, keep, &g, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "fails its SHA-256") != NULL);
	/* A missing blob. */
	CHECK_EQ_INT(lr_store_blob_delete(s, k.key[0], &e), 0);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 3, keep, &g, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "missing blob") != NULL);
	CHECK(strstr(e.msg, "record 3") != NULL);
	CHECK_EQ_INT(g.n, 0);
	/* Over the body maximum. */
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "huge", big, LR_JOURNAL_BODY_MAX + 1, &seq, NULL, &e), LR_ETOOBIG);
	free(big);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

static int holder_calls;
static void holder_on_lost(struct lr_lease *l, void *arg)
{
	(void)l;
	(void)arg;
	holder_calls++;
}

TEST(stale_writer_released_lease)
{
	struct lr_store *s = mem();
	struct lr_lease *la, *lb;
	struct lr_err e;
	acquire(s, &la);
	la->on_lost = holder_on_lost; /* the holder's own callback keeps working */
	struct lr_journal *ja, *jb;
	CHECK_EQ_INT(lr_journal_open(s, SID, la, &ja, &e), 0);
	uint64_t seq;
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a1", "{}", 2, &seq, NULL, &e), 0);
	holder_calls = 0;
	lr_store_release(la, &e);
	CHECK_EQ_INT(holder_calls, 1);
	acquire(s, &lb);
	CHECK_EQ_INT(lr_journal_open(s, SID, lb, &jb, &e), 0);
	CHECK_EQ_INT(lr_journal_tip(jb), 3);
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a2", "{}", 2, &seq, NULL, &e), LR_ELEASELOST);
	CHECK(strstr(e.msg, "lost its lease") != NULL);
	CHECK_EQ_INT(lr_journal_append(jb, LR_JOURNAL_EVENT, "b1", "{}", 2, &seq, NULL, &e), 0);
	CHECK_EQ_INT(seq, 4);
	struct got g = { 0 };
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 4);
	for (int i = 0; i < g.n; i++)
		CHECK(strcmp(g.id[i], "a2") != 0);
	got_release(&g);
	lr_journal_close(ja); /* after its lease was released: must not touch it */
	lr_journal_close(jb);
	lr_store_release(lb, &e);
	lr_store_close(s);
}

/*
 * A writer that does not know its lease is gone (a partition, an expiry
 * not yet noticed): the next writer's fence lands first, so A's
 * conditional append conflicts and A finds the greater epoch.
 */
TEST(stale_writer_fenced_by_epoch)
{
	struct lr_store *s = mem();
	struct lr_lease *la;
	struct lr_err e;
	acquire(s, &la);
	struct lr_journal *ja;
	CHECK_EQ_INT(lr_journal_open(s, SID, la, &ja, &e), 0);
	uint64_t seq;
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a1", "{}", 2, &seq, NULL, &e), 0);
	/* B's fence at epoch la->epoch + 5, written as B would. */
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	unsigned char body[8] = { 0 };
	uint64_t ep = la->epoch + 5;
	for (int i = 0; i < 8; i++)
		body[i] = (unsigned char)(ep >> (8 * i));
	char fid[24];
	snprintf(fid, sizeof fid, "%llu", (unsigned long long)ep);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, fid, strlen(fid), body, 8), 0);
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 2, b.data, b.len, &e), 0);
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a2", "{\"n\":2}", 7, &seq, NULL, &e), LR_ELEASELOST);
	char want[200];
	snprintf(want, sizeof want, "journal: writer for '%s' was fenced by epoch %llu", LEDGER,
		 (unsigned long long)ep);
	CHECK(strncmp(e.msg, want, strlen(want)) == 0);
	/* Every later append is refused too, even one that would not conflict. */
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a3", "{}", 2, &seq, NULL, &e), LR_ELEASELOST);
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a1", "{}", 2, &seq, NULL, &e), LR_ELEASELOST);
	uint64_t tip;
	CHECK_EQ_INT(lr_store_tip(s, LEDGER, &tip, &e), 0);
	CHECK_EQ_INT(tip, 3);
	/* A foreign non-fence record fences as well. */
	lr_journal_close(ja);
	lr_store_release(la, &e);
	lr_buf_release(&b);
	lr_store_close(s);

	s = mem();
	acquire(s, &la);
	CHECK_EQ_INT(lr_journal_open(s, SID, la, &ja, &e), 0);
	lr_buf_init(&b, 4096);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "x", 1, "{}", 2), 0);
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 1, b.data, b.len, &e), 0);
	CHECK_EQ_INT(lr_journal_append(ja, LR_JOURNAL_EVENT, "a2", "{}", 2, &seq, NULL, &e), LR_ELEASELOST);
	CHECK(strstr(e.msg, "foreign record at 2") != NULL);
	lr_buf_release(&b);
	lr_journal_close(ja);
	lr_store_release(la, &e);
	lr_store_close(s);
}

TEST(open_refuses_a_greater_fence)
{
	/* The ledger holds a fence newer than our lease: the lease system is broken or we are stale. */
	struct lr_store *s = mem();
	struct lr_err e;
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	unsigned char body[8] = { 99 };
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, "99", 2, body, 8), 0);
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 0, b.data, b.len, &e), 0);
	struct lr_lease *l;
	acquire(s, &l);
	struct lr_journal *j = NULL;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), LR_ELEASELOST);
	CHECK(strstr(e.msg, "fenced by epoch 99") != NULL);
	CHECK(j == NULL);
	lr_buf_release(&b);
	lr_store_release(l, &e);
	lr_store_close(s);
}

TEST(corrupted_records_are_reported)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	uint64_t seq;
	CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "ok1", "{\"a\":1}", 7, &seq, NULL, &e), 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	/* Record 3: a valid frame with one flipped byte, written straight to the ledger. */
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "bad", 3, "{\"a\":2}", 7), 0);
	b.data[LR_JOURNAL_HEADER + 3 + 2] ^= 0x20;
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 2, b.data, b.len, &e), 0);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_EVENT, "ok2", 3, "{}", 2), 0);
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 3, b.data, b.len, &e), 0);
	struct got g = { 0 };
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, keep, &g, &e), LR_ECORRUPT);
	CHECK_EQ_STR(e.msg, "journal: record 3 of '" LEDGER "' fails its checksum");
	CHECK_EQ_INT(g.n, 2);
	got_release(&g);
	/* Replay from after it works; from it fails. */
	CHECK_EQ_INT(lr_journal_replay(s, SID, 4, keep, &g, &e), 0);
	CHECK_EQ_INT(g.n, 1);
	got_release(&g);
	/* Not JSON, not a frame at all: refused by name. */
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 4, "{\"v\":1}", 7, &e), 0);
	CHECK_EQ_INT(lr_journal_replay(s, SID, 5, keep, &g, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "record 5") != NULL);
	/* A writer cannot open over a corrupt ledger. */
	acquire(s, &l);
	j = NULL;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "record 3") != NULL);
	CHECK(j == NULL);
	lr_store_release(l, &e);
	lr_buf_release(&b);
	lr_store_close(s);
}

/* A backend that loses record 3 on read: replay must notice the gap. */
static struct lr_store_ops gappy_ops;
static const struct lr_store_ops *mem_ops_saved;
struct skip_ctx {
	lr_record_cb cb;
	void *arg;
};
static int skip3(void *arg, const struct lr_record *r)
{
	struct skip_ctx *c = arg;
	return r->seq == 3 ? 0 : c->cb(c->arg, r);
}
static int gappy_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		      lr_record_cb cb, void *arg, struct lr_err *e)
{
	struct skip_ctx c = { cb, arg };
	return mem_ops_saved->read(s, name, from, limit, skip3, &c, e);
}

TEST(replay_notices_a_gap)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, NULL, NULL, &e), 0);
	lr_journal_close(j);
	lr_store_release(l, &e);
	mem_ops_saved = s->ops;
	gappy_ops = *s->ops;
	gappy_ops.read = gappy_read;
	s->ops = &gappy_ops;
	struct got g = { 0 };
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, keep, &g, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "record 3 of '" LEDGER "' is missing") != NULL);
	CHECK_EQ_INT(g.n, 2);
	got_release(&g);
	s->ops = mem_ops_saved;
	lr_store_close(s);
}

static int stop_at_3(void *arg, const struct lr_journal_rec *r)
{
	(*(int *)arg)++;
	return r->seq == 3 ? 77 : 0;
}

TEST(replay_callback_stops)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(lr_journal_append(j, LR_JOURNAL_EVENT, "", "{}", 2, NULL, NULL, &e), 0);
	int calls = 0;
	CHECK_EQ_INT(lr_journal_replay(s, SID, 1, stop_at_3, &calls, &e), 77);
	CHECK_EQ_INT(calls, 3);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

struct th {
	struct lr_journal *j;
	int k;
	int fails;
};

static void *appender(void *arg)
{
	struct th *t = arg;
	char id[32];
	struct lr_err e;
	for (int i = 0; i < 300; i++) {
		snprintf(id, sizeof id, "t%d-%d", t->k, i);
		if (lr_journal_append(t->j, LR_JOURNAL_EVENT, id, id, strlen(id), NULL, NULL, &e))
			t->fails++;
	}
	return NULL;
}

static int count_ids(void *arg, const struct lr_journal_rec *r)
{
	if (r->kind == LR_JOURNAL_EVENT)
		(*(int *)arg)++;
	return 0;
}

TEST(concurrent_appends_one_journal)
{
	struct lr_store *s = mem();
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	pthread_t t[4];
	struct th a[4];
	for (int i = 0; i < 4; i++) {
		a[i] = (struct th){ j, i, 0 };
		pthread_create(&t[i], NULL, appender, &a[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ_INT(a[i].fails, 0);
	}
	CHECK_EQ_INT(lr_journal_tip(j), 1 + 4 * 300);
	int n = 0;
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, count_ids, &n, &e), 0);
	CHECK_EQ_INT(n, 1200);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

/* ---- async appends, on both backends ---- */

static char lmdb_base[256];
static int lmdb_n;

/* A fresh store: the memory backend, or LMDB in a new directory (no fsync). */
static struct lr_store *fresh(int lmdb)
{
	if (!lmdb)
		return mem();
	char root[300];
	snprintf(root, sizeof root, "%s/r%d", lmdb_base, lmdb_n++);
	struct lr_lmdb_opts o = { root, 0, 0, 1, NULL };
	struct lr_store *s = NULL;
	struct lr_err e;
	if (lr_store_lmdb_open(&o, &s, &e) != 0) {
		fprintf(stderr, "lmdb: %s\n", e.msg);
		abort();
	}
	return s;
}

#define NOPS 200

struct acb {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	struct lr_journal_op *slow[NOPS];
	int nslow;
};

static void acb_init(struct acb *a)
{
	memset(a, 0, sizeof *a);
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
}

static void acb_release(struct acb *a)
{
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
}

static void op_cb(struct lr_journal_op *op)
{
	struct acb *a = op->arg;
	pthread_mutex_lock(&a->mu);
	if (op->slow)
		a->slow[a->nslow++] = op;
	else
		a->done++;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* Waits for n completions, finishing slow ones on this thread (as a pool would). */
static void acb_wait(struct acb *a, int n)
{
	pthread_mutex_lock(&a->mu);
	while (a->done < n) {
		if (a->nslow) {
			struct lr_journal_op *op = a->slow[--a->nslow];
			pthread_mutex_unlock(&a->mu);
			lr_journal_append_slow(op);
			pthread_mutex_lock(&a->mu);
			a->done++;
			continue;
		}
		pthread_cond_wait(&a->cv, &a->mu);
	}
	pthread_mutex_unlock(&a->mu);
}

static void async_order_on(int lmdb)
{
	struct lr_store *s = fresh(lmdb);
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	static struct lr_journal_op ops[NOPS];
	static char ids[NOPS][16], bodies[NOPS][32];
	struct acb a;
	acb_init(&a);
	for (int i = 0; i < NOPS; i++) {
		snprintf(ids[i], sizeof ids[i], "e%d", i);
		snprintf(bodies[i], sizeof bodies[i], "{\"n\":%d}", i);
		ops[i] = (struct lr_journal_op){ .kind = LR_JOURNAL_EVENT, .id = ids[i],
						 .body = bodies[i], .len = strlen(bodies[i]),
						 .cb = op_cb, .arg = &a };
		lr_journal_append_async(j, &ops[i]);
	}
	acb_wait(&a, NOPS);
	int ok = 1;
	for (int i = 0; i < NOPS; i++)
		ok &= ops[i].rc == 0 && ops[i].seq == (uint64_t)i + 2 && ops[i].appended;
	CHECK(ok);
	CHECK_EQ_INT(lr_journal_tip(j), NOPS + 1);
	/* The same id and bytes again: the slow path (a compare) gives the original seq. */
	struct acb b;
	acb_init(&b);
	struct lr_journal_op dup = { .kind = LR_JOURNAL_EVENT, .id = ids[5], .body = bodies[5],
				     .len = strlen(bodies[5]), .cb = op_cb, .arg = &b };
	lr_journal_append_async(j, &dup);
	acb_wait(&b, 1);
	CHECK_EQ_INT(dup.rc, 0);
	CHECK_EQ_INT(dup.seq, 7);
	CHECK_EQ_INT(dup.appended, 0);
	/* Other bytes: a collision, nothing written. */
	struct lr_journal_op col = { .kind = LR_JOURNAL_EVENT, .id = ids[5], .body = "{}",
				     .len = 2, .cb = op_cb, .arg = &b };
	lr_journal_append_async(j, &col);
	acb_wait(&b, 2);
	CHECK_EQ_INT(col.rc, LR_ECONFLICT);
	CHECK(strstr(col.err.msg, "idempotency collision") != NULL);
	/* A body over the inline limit goes to a blob through the slow path. */
	size_t big = LR_JOURNAL_INLINE_MAX + 10;
	char *bb = malloc(big);
	memset(bb, 'x', big);
	struct lr_journal_op large = { .kind = LR_JOURNAL_COMMAND, .id = "big", .body = bb,
				       .len = big, .cb = op_cb, .arg = &b };
	struct lr_journal_op after = { .kind = LR_JOURNAL_EVENT, .id = "after", .body = "{}",
				       .len = 2, .cb = op_cb, .arg = &b };
	lr_journal_append_async(j, &large);
	lr_journal_append_async(j, &after); /* queued behind the slow one */
	acb_wait(&b, 4);
	CHECK_EQ_INT(large.rc, 0);
	CHECK_EQ_INT(large.seq, NOPS + 2);
	CHECK_EQ_INT(after.rc, 0);
	CHECK_EQ_INT(after.seq, NOPS + 3);
	free(bb);
	/* An injected failure fails one append and leaves the journal usable. */
	lr_store_inject_failure(s, 0);
	struct lr_journal_op f = { .kind = LR_JOURNAL_EVENT, .id = "f", .body = "{}", .len = 2,
				   .cb = op_cb, .arg = &b };
	lr_journal_append_async(j, &f);
	acb_wait(&b, 5);
	CHECK_EQ_INT(f.rc, -EIO);
	CHECK(strstr(f.err.msg, "injected failure") != NULL);
	lr_store_inject_failure(s, -1);
	lr_journal_append_async(j, &f);
	acb_wait(&b, 6);
	CHECK_EQ_INT(f.rc, 0);
	CHECK_EQ_INT(f.seq, NOPS + 4);
	int n = 0;
	CHECK_EQ_INT(lr_journal_replay(s, SID, 0, count_ids, &n, &e), 0);
	CHECK_EQ_INT(n, NOPS + 2);
	acb_release(&a);
	acb_release(&b);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

TEST(async_appends_in_order_memory)
{
	async_order_on(0);
}

TEST(async_appends_in_order_lmdb)
{
	async_order_on(1);
}

/* A stale async writer: the conflict is resolved on the slow path and latches. */
static void async_fenced_on(int lmdb)
{
	struct lr_store *s = fresh(lmdb);
	struct lr_lease *l;
	struct lr_err e;
	acquire(s, &l);
	struct lr_journal *j;
	CHECK_EQ_INT(lr_journal_open(s, SID, l, &j, &e), 0);
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	unsigned char body[8] = { 0 };
	uint64_t ep = l->epoch + 1;
	for (int i = 0; i < 8; i++)
		body[i] = (unsigned char)(ep >> (8 * i));
	char fid[24];
	snprintf(fid, sizeof fid, "%llu", (unsigned long long)ep);
	CHECK_EQ_INT(lr_journal_encode(&b, LR_JOURNAL_FENCE, fid, strlen(fid), body, 8), 0);
	CHECK_EQ_INT(lr_store_append(s, LEDGER, 1, b.data, b.len, &e), 0);
	struct acb a;
	acb_init(&a);
	struct lr_journal_op x = { .kind = LR_JOURNAL_EVENT, .id = "x", .body = "{}", .len = 2,
				   .cb = op_cb, .arg = &a };
	struct lr_journal_op y = { .kind = LR_JOURNAL_EVENT, .id = "y", .body = "{}", .len = 2,
				   .cb = op_cb, .arg = &a };
	lr_journal_append_async(j, &x);
	lr_journal_append_async(j, &y);
	acb_wait(&a, 2);
	CHECK_EQ_INT(x.rc, LR_ELEASELOST);
	CHECK(strstr(x.err.msg, "was fenced by epoch") != NULL);
	CHECK_EQ_INT(y.rc, LR_ELEASELOST);
	uint64_t tip;
	CHECK_EQ_INT(lr_store_tip(s, LEDGER, &tip, &e), 0);
	CHECK_EQ_INT(tip, 2);
	acb_release(&a);
	lr_buf_release(&b);
	lr_journal_close(j);
	lr_store_release(l, &e);
	lr_store_close(s);
}

TEST(async_stale_writer_memory)
{
	async_fenced_on(0);
}

TEST(async_stale_writer_lmdb)
{
	async_fenced_on(1);
}

/* Many journals' async appends in one store: every one lands, each journal gap-free. */
TEST(async_many_journals_lmdb)
{
	struct lr_store *s = fresh(1);
	struct lr_err e;
	enum { NJ = 16, PER = 20 };
	char sids[NJ][37];
	struct lr_lease *ls[NJ];
	struct lr_journal *js[NJ];
	static struct lr_journal_op ops[NJ][PER];
	struct acb a;
	acb_init(&a);
	for (int k = 0; k < NJ; k++) {
		CHECK_EQ_INT(lr_journal_new_id(sids[k]), 0);
		char name[64];
		snprintf(name, sizeof name, "sessions/%.36s", sids[k]);
		CHECK_EQ_INT(lr_store_acquire(s, name, &ls[k], &e), 0);
		CHECK_EQ_INT(lr_journal_open(s, sids[k], ls[k], &js[k], &e), 0);
	}
	for (int i = 0; i < PER; i++)
		for (int k = 0; k < NJ; k++) {
			ops[k][i] = (struct lr_journal_op){ .kind = LR_JOURNAL_EVENT, .body = "{}",
							    .len = 2, .cb = op_cb, .arg = &a, .id = "" };
			lr_journal_append_async(js[k], &ops[k][i]);
		}
	acb_wait(&a, NJ * PER);
	int ok = 1;
	for (int k = 0; k < NJ; k++) {
		for (int i = 0; i < PER; i++)
			ok &= ops[k][i].rc == 0 && ops[k][i].seq == (uint64_t)i + 2;
		ok &= lr_journal_tip(js[k]) == PER + 1;
		lr_journal_close(js[k]);
		lr_store_release(ls[k], &e);
	}
	CHECK(ok);
	acb_release(&a);
	lr_store_close(s);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(lmdb_base, sizeof lmdb_base, "%s/lr-journal-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(lmdb_base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(crc32c_known_vectors);
	RUN(session_ids);
	RUN(frame_round_trip_and_strictness);
	RUN(open_fences_append_replay);
	RUN(open_needs_the_right_lease);
	RUN(idempotent_appends);
	RUN(large_bodies_go_to_blobs);
	RUN(stale_writer_released_lease);
	RUN(stale_writer_fenced_by_epoch);
	RUN(open_refuses_a_greater_fence);
	RUN(corrupted_records_are_reported);
	RUN(replay_notices_a_gap);
	RUN(replay_callback_stops);
	RUN(concurrent_appends_one_journal);
	RUN(async_appends_in_order_memory);
	RUN(async_appends_in_order_lmdb);
	RUN(async_stale_writer_memory);
	RUN(async_stale_writer_lmdb);
	RUN(async_many_journals_lmdb);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", lmdb_base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", lmdb_base);
	return test_summary();
}
