/*
 * err_test.c — util/err.c: the one error type (struct lr_err) and the
 * status codes' words.
 */
#include "test.h"

#include "../../util/util.h"

#include <errno.h>
#include <string.h>

TEST(fail_sets_the_message_and_returns_the_code)
{
	struct lr_err e;
	lr_err_clear(&e);
	CHECK_EQ_STR(e.msg, "");
	CHECK_EQ_INT(lr_err_fail(&e, LR_EREFUSED, "entry '%s' is %d bytes", "a.lua", 7), LR_EREFUSED);
	CHECK_EQ_STR(e.msg, "entry 'a.lua' is 7 bytes");
	CHECK_EQ_INT(lr_err_fail(&e, -EINVAL, "again"), -EINVAL);
	CHECK_EQ_STR(e.msg, "again");
	/* a NULL e is accepted: the code still comes back */
	CHECK_EQ_INT(lr_err_fail(NULL, -ENOENT, "nobody reads this"), -ENOENT);
	lr_err_set(NULL, "nor this");
	lr_err_clear(NULL);
}

TEST(a_long_message_is_cut_and_terminated)
{
	char big[2 * LR_ERR_LEN];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	struct lr_err e;
	CHECK_EQ_INT(lr_err_fail(&e, LR_ETOOBIG, "%s", big), LR_ETOOBIG);
	CHECK_EQ_INT(strlen(e.msg), LR_ERR_LEN - 1);
}

TEST(codes_have_words)
{
	CHECK_EQ_STR(lr_errcode(LR_EREFUSED), "refused");
	CHECK_EQ_STR(lr_strerror(LR_EREFUSED), "refused");
	CHECK_EQ_STR(lr_errcode(-ETIMEDOUT), "timeout");
	CHECK_EQ_STR(lr_errcode(-ENOENT), "ENOENT");
	CHECK_EQ_STR(lr_strerror(0), "ok");
}

int main(void)
{
	RUN(fail_sets_the_message_and_returns_the_code);
	RUN(a_long_message_is_cut_and_terminated);
	RUN(codes_have_words);
	return test_summary();
}
