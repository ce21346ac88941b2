/*
 * sha256_test.c — the built-in SHA-256 used for small inputs: the FIPS
 * 180-4 example vectors, and agreement with libcrypto's streaming path for
 * every length up to two blocks past the padding boundaries and beyond.
 */
#include "test.h"

#include "../../util/internal.h"

#include <stdlib.h>
#include <string.h>

static void hex(const unsigned char *d, char *out)
{
	lr_hex(d, LR_SHA256_LEN, out);
}

TEST(known_vectors)
{
	unsigned char d[LR_SHA256_LEN];
	char h[65];
	lr__sha256_small("", 0, d);
	hex(d, h);
	CHECK_EQ_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	lr__sha256_small("abc", 3, d);
	hex(d, h);
	CHECK_EQ_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	lr__sha256_small(m, strlen(m), d);
	hex(d, h);
	CHECK_EQ_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(agrees_with_libcrypto)
{
	unsigned char buf[5000];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	int bad = 0;
	for (size_t n = 0; n <= sizeof buf; n += (n < 300 ? 1 : 97)) {
		unsigned char a[LR_SHA256_LEN], b[LR_SHA256_LEN];
		lr__sha256_small(buf, n, a);
		struct lr_sha256 h;
		CHECK_EQ_INT(lr_sha256_begin(&h), 0);
		CHECK_EQ_INT(lr_sha256_update(&h, buf, n), 0);
		CHECK_EQ_INT(lr_sha256_end(&h, b), 0);
		if (memcmp(a, b, sizeof a) != 0)
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
}

int main(void)
{
	RUN(known_vectors);
	RUN(agrees_with_libcrypto);
	return test_summary();
}
