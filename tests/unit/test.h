/*
 * test.h — the C unit test harness: TAP-style lines that tests/run.sh counts.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ_INT(a, b); }
 *   int main(void) { RUN(name); return test_summary(); }
 */
#ifndef LR_TEST_H
#define LR_TEST_H

#include <stdio.h>
#include <string.h>

static int test_failed_now, test_failures, test_count, test_skipped_now, test_skips;
static char test_skip_reason[256];

#define TEST(name) static void name(void)
/* Ends the current test as skipped: tests/run.sh counts it apart, never as passed. */
#define SKIP(reason)                                                                 \
	do {                                                                         \
		snprintf(test_skip_reason, sizeof test_skip_reason, "%s", (reason)); \
		test_skipped_now = 1;                                                \
		return;                                                              \
	} while (0)
#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                              \
			test_failed_now = 1;                                         \
		}                                                                    \
	} while (0)
#define CHECK_EQ_INT(a, b)                                                           \
	do {                                                                         \
		long long a_ = (long long)(a), b_ = (long long)(b);                  \
		if (a_ != b_) {                                                      \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n",  \
				__FILE__, __LINE__, #a, a_, #b, b_);                 \
			test_failed_now = 1;                                         \
		}                                                                    \
	} while (0)
#define CHECK_EQ_STR(a, b)                                                           \
	do {                                                                         \
		const char *a_ = (a), *b_ = (b);                                     \
		if (!a_ || !b_ || strcmp(a_, b_) != 0) {                             \
			fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n",    \
				__FILE__, __LINE__, #a, a_ ? a_ : "(null)",          \
				b_ ? b_ : "(null)");                                 \
			test_failed_now = 1;                                         \
		}                                                                    \
	} while (0)

static inline void test_run(const char *name, void (*fn)(void))
{
	test_failed_now = 0;
	test_skipped_now = 0;
	fn();
	test_count++;
	if (test_failed_now)
		test_failures++;
	if (test_skipped_now && !test_failed_now) {
		test_skips++;
		printf("ok - %s # SKIP %s\n", name, test_skip_reason);
	} else {
		printf("%s - %s\n", test_failed_now ? "not ok" : "ok", name);
	}
	fflush(stdout);
}
#define RUN(name) test_run(#name, name)

static inline int test_summary(void)
{
	printf("# %d tests, %d failed, %d skipped\n", test_count, test_failures, test_skips);
	return test_failures ? 1 : 0;
}

#endif
