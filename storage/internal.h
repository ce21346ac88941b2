/*
 * internal.h — shared between storage/ files only.
 */
#ifndef LR_STORAGE_INTERNAL_H
#define LR_STORAGE_INTERNAL_H

#include "storage.h"

/* The common head of every backend's handle (backends calloc it: zero is the default). */
struct lr_store {
	const struct lr_store_ops *ops;
	long inject_append; /* atomic; tests only: see lr_store_inject_failure */
};

/* Backends embed this at the start of their handle. */
#define LR_STORE_HEAD struct lr_store base

/* nats.c: url with any user information replaced by "***" (for messages). */
void lr__nats_redact(const char *url, char *out, size_t cap);

/*
 * nats.c: a JetStream message-get reply ($JS.API.STREAM.MSG.GET), bytes
 * from the server. body is NUL-terminated and rewritten in place: the
 * subject is NUL-terminated there, data and hdrs base64-decoded there (all
 * pointers into body, NULL when absent). Returns 0 (a message), 1 (no
 * message found), 2 (another error: err/err_len, maybe NULL, its
 * description; busy set for a 503, which passes: no leader this moment)
 * or LR_ECORRUPT (a reply this cannot read).
 */
struct lr__msgget {
	int busy;
	char *subject;
	uint64_t seq;
	char *data, *hdrs;
	size_t data_len, hdrs_len;
	const char *err;
	size_t err_len;
};
int lr__nats_msgget_parse(char *body, struct lr__msgget *out);

/*
 * nats.c: the headers of a message-get reply, "NATS/1.0\r\n" then
 * "Key: value\r\n" lines, rewritten in place: cb(arg, key, value) for
 * each, both NUL-terminated in h. A non-zero return from cb stops and is
 * returned.
 */
int lr__nats_hdrs_each(char *h, size_t len, int (*cb)(void *arg, const char *key,
							 const char *val), void *arg);

/*
 * store.c: a lease's loss notification. Backends call lr__lease_fire_lost
 * (once per lease: the first call wins) from whichever thread noticed; the
 * callback runs under one process-wide (recursive) lock, and
 * lr__lease_hook swaps the callback under the same lock, so a callback
 * never runs on a hook its owner has already removed (the journal frees
 * itself right after unhooking).
 */
void lr__lease_fire_lost(struct lr_lease *l);
void lr__lease_hook(struct lr_lease *l, void (*fn)(struct lr_lease *, void *), void *arg,
		    void (**prev_fn)(struct lr_lease *, void *), void **prev_arg);
/* The lock itself, for an owner that must check its own state before unhooking. */
void lr__lease_lost_lock(void);
void lr__lease_lost_unlock(void);

/* journal.c: CRC32C through slice-by-8 tables only (lr_crc32c uses SSE4.2 when the CPU has it). */
uint32_t lr__crc32c_sw(uint32_t crc, const void *p, size_t n);

#endif
