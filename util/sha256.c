/*
 * sha256.c — SHA-256 through libcrypto's EVP interface, opened lazily.
 */
#include <string.h>
#include "internal.h"

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

/*
 * A plain SHA-256 (FIPS 180-4) for small one-shot inputs: profile
 * fingerprints and keys hash a few hundred bytes, and opening libcrypto for
 * them cost a confined run ~2 ms of dynamic linking. Bulk hashing (files,
 * blobs) stays with libcrypto's SHA extensions.
 */
#define SMALL_MAX 4096

static const uint32_t K256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

static void block256(uint32_t st[8], const unsigned char *b)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 |
		       (uint32_t)b[4 * i + 2] << 8 | (uint32_t)b[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = st[0], b2 = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6],
		 h = st[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
			      K256[i] + w[i];
		uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b2) ^ (a & c) ^ (b2 & c));
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b2;
		b2 = a;
		a = t1 + t2;
	}
	st[0] += a;
	st[1] += b2;
	st[2] += c;
	st[3] += d;
	st[4] += e;
	st[5] += f;
	st[6] += g;
	st[7] += h;
}

void lr__sha256_small(const void *p, size_t n, unsigned char out[LR_SHA256_LEN])
{
	uint32_t st[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
			   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	const unsigned char *in = p;
	size_t left = n;
	for (; left >= 64; left -= 64, in += 64)
		block256(st, in);
	unsigned char last[128] = { 0 };
	memcpy(last, in, left);
	last[left] = 0x80;
	size_t tail = left < 56 ? 64 : 128;
	uint64_t bits = (uint64_t)n * 8;
	for (int i = 0; i < 8; i++)
		last[tail - 1 - i] = (unsigned char)(bits >> (8 * i));
	block256(st, last);
	if (tail == 128)
		block256(st, last + 64);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(st[i] >> 24);
		out[4 * i + 1] = (unsigned char)(st[i] >> 16);
		out[4 * i + 2] = (unsigned char)(st[i] >> 8);
		out[4 * i + 3] = (unsigned char)st[i];
	}
}

void lr_sha256_builtin(const void *p, size_t n, unsigned char out[LR_SHA256_LEN])
{
	lr__sha256_small(p, n, out);
}

int lr_sha256(const void *p, size_t n, unsigned char out[LR_SHA256_LEN])
{
	if (n <= SMALL_MAX) {
		lr__sha256_small(p, n, out);
		return 0;
	}
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
