/*
 * sha256.c — SHA-256 through libcrypto's EVP interface, opened lazily.
 */
#include "util.h"

#include <errno.h>
#include <openssl/evp.h>
#include <time.h>

static const char *const crypto_sonames[] = { "libcrypto.so.3", "libcrypto.so", NULL };
static const char *const crypto_names[] = {
	"EVP_MD_CTX_new", "EVP_MD_CTX_free", "EVP_sha256",
	"EVP_DigestInit_ex", "EVP_DigestUpdate", "EVP_DigestFinal_ex", NULL
};
static struct {
	__typeof__(EVP_MD_CTX_new) *ctx_new;
	__typeof__(EVP_MD_CTX_free) *ctx_free;
	__typeof__(EVP_sha256) *sha256;
	__typeof__(EVP_DigestInit_ex) *init;
	__typeof__(EVP_DigestUpdate) *update;
	__typeof__(EVP_DigestFinal_ex) *final;
} evp;
static struct lr_lazy crypto = {
	.sonames = crypto_sonames, .names = crypto_names, .slots = (void **)&evp,
};

int lr_sha256_begin(struct lr_sha256 *h)
{
	h->ctx = NULL;
	int rc = lr_lazy_open(&crypto);
	if (rc)
		return rc;
	EVP_MD_CTX *c = evp.ctx_new();
	if (!c)
		return -ENOMEM;
	if (evp.init(c, evp.sha256(), NULL) != 1) {
		evp.ctx_free(c);
		return LR_EUNAVAILABLE;
	}
	h->ctx = c;
	return 0;
}

int lr_sha256_update(struct lr_sha256 *h, const void *p, size_t n)
{
	return evp.update(h->ctx, p, n) == 1 ? 0 : LR_EUNAVAILABLE;
}

int lr_sha256_end(struct lr_sha256 *h, unsigned char out[LR_SHA256_LEN])
{
	unsigned int n = 0;
	int ok = evp.final(h->ctx, out, &n) == 1 && n == LR_SHA256_LEN;
	evp.ctx_free(h->ctx);
	h->ctx = NULL;
	return ok ? 0 : LR_EUNAVAILABLE;
}

void lr_sha256_abort(struct lr_sha256 *h)
{
	if (h->ctx)
		evp.ctx_free(h->ctx);
	h->ctx = NULL;
}

int lr_sha256(const void *p, size_t n, unsigned char out[LR_SHA256_LEN])
{
	struct lr_sha256 h;
	int rc = lr_sha256_begin(&h);
	if (rc)
		return rc;
	rc = lr_sha256_update(&h, p, n);
	if (rc) {
		lr_sha256_abort(&h);
		return rc;
	}
	return lr_sha256_end(&h, out);
}

void lr_hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int lr_sha256_hex(const void *p, size_t n, char out[2 * LR_SHA256_LEN + 1])
{
	unsigned char d[LR_SHA256_LEN];
	int rc = lr_sha256(p, n, d);
	if (rc)
		return rc;
	lr_hex(d, sizeof d, out);
	return 0;
}

uint64_t lr_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double lr_wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
