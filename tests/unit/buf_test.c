/*
 * buf_test.c — util/buf.c: the bounded growable buffer every layer uses.
 */
#include "../../util/util.h"
#include "test.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TEST(empty_buffer_is_usable)
{
	struct lr_buf b;
	lr_buf_init(&b, 16);
	CHECK(b.data == NULL);
	CHECK_EQ_INT(b.len, 0);
	lr_buf_reset(&b); /* no allocation yet: must not touch data */
	size_t n = 99;
	char *p = lr_buf_take(&b, &n); /* an empty take is a valid empty string */
	CHECK(p != NULL);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_STR(p, "");
	free(p);
	lr_buf_release(&b);
	lr_buf_release(&b); /* twice is harmless */
}

TEST(appends_keep_a_terminating_nul)
{
	struct lr_buf b;
	lr_buf_init(&b, 1024);
	CHECK_EQ_INT(lr_buf_add(&b, "ab", 2), 0);
	CHECK_EQ_INT(lr_buf_addstr(&b, "cd"), 0);
	CHECK_EQ_INT(lr_buf_printf(&b, "-%d-%s", 42, "x"), 0);
	CHECK_EQ_INT(b.len, 9);
	CHECK_EQ_STR(b.data, "abcd-42-x");
	CHECK_EQ_INT(lr_buf_add(&b, NULL, 0), 0); /* zero bytes from NULL is fine */
	CHECK_EQ_INT(b.len, 9);
	/* embedded NUL bytes are data, not ends */
	CHECK_EQ_INT(lr_buf_add(&b, "\0z", 2), 0);
	CHECK_EQ_INT(b.len, 11);
	CHECK(b.data[9] == '\0' && b.data[10] == 'z' && b.data[11] == '\0');
	lr_buf_release(&b);
}

TEST(growth_over_many_appends)
{
	struct lr_buf b;
	lr_buf_init(&b, 1 << 20);
	for (int i = 0; i < 10000; i++)
		CHECK_EQ_INT(lr_buf_add(&b, "0123456789", 10), 0);
	CHECK_EQ_INT(b.len, 100000);
	CHECK(b.alloc > b.len);
	int ok = 1;
	for (size_t i = 0; i < b.len; i++)
		ok &= b.data[i] == (char)('0' + i % 10);
	CHECK(ok);
	CHECK(b.data[b.len] == '\0');
	lr_buf_release(&b);
}

TEST(the_cap_is_exact_and_a_refused_append_changes_nothing)
{
	struct lr_buf b;
	lr_buf_init(&b, 8);
	CHECK_EQ_INT(lr_buf_add(&b, "12345678", 8), 0); /* exactly the cap */
	CHECK_EQ_INT(lr_buf_add(&b, "9", 1), LR_ETOOBIG);
	CHECK_EQ_INT(b.len, 8);
	CHECK_EQ_STR(b.data, "12345678");
	CHECK_EQ_INT(lr_buf_printf(&b, "%s", "x"), LR_ETOOBIG);
	CHECK_EQ_STR(b.data, "12345678");
	/* a length that would overflow len + n is refused, not wrapped */
	CHECK_EQ_INT(lr_buf_add(&b, "x", SIZE_MAX), LR_ETOOBIG);
	CHECK_EQ_INT(b.len, 8);
	lr_buf_release(&b);

	struct lr_buf z;
	lr_buf_init(&z, 0); /* cap 0: only empty appends */
	CHECK_EQ_INT(lr_buf_add(&z, "", 0), 0);
	CHECK_EQ_INT(lr_buf_addstr(&z, "a"), LR_ETOOBIG);
	lr_buf_release(&z);
}

TEST(printf_of_a_long_string)
{
	struct lr_buf b;
	lr_buf_init(&b, 1 << 16);
	char big[5000];
	memset(big, 'q', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	CHECK_EQ_INT(lr_buf_printf(&b, "<%s>", big), 0);
	CHECK_EQ_INT(b.len, sizeof big + 1);
	CHECK(b.data[0] == '<' && b.data[b.len - 1] == '>' && b.data[b.len] == '\0');
	lr_buf_release(&b);
}

TEST(consume_moves_the_rest_to_the_front)
{
	struct lr_buf b;
	lr_buf_init(&b, 64);
	CHECK_EQ_INT(lr_buf_addstr(&b, "hello world"), 0);
	lr_buf_consume(&b, 6);
	CHECK_EQ_INT(b.len, 5);
	CHECK_EQ_STR(b.data, "world");
	lr_buf_consume(&b, 0);
	CHECK_EQ_STR(b.data, "world");
	lr_buf_consume(&b, 100); /* more than len: empties */
	CHECK_EQ_INT(b.len, 0);
	CHECK_EQ_STR(b.data, "");
	/* the cap counts what is held now, not what was ever added */
	CHECK_EQ_INT(lr_buf_add(&b, "0123456789012345678901234567890123456789012345678901234567890123", 64), 0);
	lr_buf_consume(&b, 60);
	CHECK_EQ_INT(lr_buf_addstr(&b, "abc"), 0);
	CHECK_EQ_STR(b.data, "0123abc");
	lr_buf_release(&b);
}

TEST(reset_keeps_the_allocation)
{
	struct lr_buf b;
	lr_buf_init(&b, 4096);
	CHECK_EQ_INT(lr_buf_printf(&b, "%0512d", 7), 0);
	size_t alloc = b.alloc;
	char *data = b.data;
	lr_buf_reset(&b);
	CHECK_EQ_INT(b.len, 0);
	CHECK_EQ_STR(b.data, "");
	CHECK(b.alloc == alloc && b.data == data);
	CHECK_EQ_INT(lr_buf_addstr(&b, "again"), 0);
	CHECK_EQ_STR(b.data, "again");
	lr_buf_release(&b);
}

TEST(take_hands_over_the_bytes)
{
	struct lr_buf b;
	lr_buf_init(&b, 64);
	CHECK_EQ_INT(lr_buf_addstr(&b, "mine"), 0);
	size_t n = 0;
	char *p = lr_buf_take(&b, &n);
	CHECK_EQ_INT(n, 4);
	CHECK_EQ_STR(p, "mine");
	CHECK(b.data == NULL && b.len == 0 && b.alloc == 0);
	CHECK_EQ_INT(b.cap, 64); /* the cap survives: the buffer can be reused */
	CHECK_EQ_INT(lr_buf_addstr(&b, "next"), 0);
	CHECK_EQ_STR(b.data, "next");
	free(p);
	p = lr_buf_take(&b, NULL);
	CHECK_EQ_STR(p, "next");
	free(p);
	lr_buf_release(&b);
}

int main(void)
{
	RUN(empty_buffer_is_usable);
	RUN(appends_keep_a_terminating_nul);
	RUN(growth_over_many_appends);
	RUN(the_cap_is_exact_and_a_refused_append_changes_nothing);
	RUN(printf_of_a_long_string);
	RUN(consume_moves_the_rest_to_the_front);
	RUN(reset_keeps_the_allocation);
	RUN(take_hands_over_the_bytes);
	return test_summary();
}
