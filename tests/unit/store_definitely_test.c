/*
 * store_definitely_test.c — lr_store_append_definitely against a backend
 * whose appends are scripted (a memory store underneath): an ambiguous
 * attempt that landed or did not, and a retry that cannot even read.
 */
#include "test.h"

#include "../../storage/internal.h"

/* Script letters: 'L' store it and say LR_EAMBIGUOUS (the ack was lost), 'A' ambiguous and
 * not stored, 'T' LR_ETIMEOUT before sending, '.' (or the end) the real append. */
struct fake {
	struct lr_store base;
	struct lr_store *inner;
	const char *script;
};

static int f_append(struct lr_store *s, const char *name, uint64_t tip, const void *rec,
		    size_t len, struct lr_err *e)
{
	struct fake *f = (struct fake *)s;
	char c = *f->script ? *f->script++ : '.';
	switch (c) {
	case 'L':
		CHECK_EQ_INT(lr_store_append(f->inner, name, tip, rec, len, e), 0);
		lr_err_set(e, "ack lost");
		return LR_EAMBIGUOUS;
	case 'A':
		lr_err_set(e, "ack lost");
		return LR_EAMBIGUOUS;
	case 'T':
		lr_err_set(e, "timeout");
		return LR_ETIMEOUT;
	}
	return lr_store_append(f->inner, name, tip, rec, len, e);
}

static int f_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		  lr_record_cb cb, void *arg, struct lr_err *e)
{
	return lr_store_read(((struct fake *)s)->inner, name, from, limit, cb, arg, e);
}

static struct lr_store_ops fake_ops;

static uint64_t tip_of(struct fake *f)
{
	uint64_t t = 99;
	struct lr_err e;
	CHECK_EQ_INT(lr_store_tip(f->inner, "l", &t, &e), 0);
	return t;
}

static int run_script(const char *script, uint64_t *tip)
{
	struct fake f = { { &fake_ops, 0 }, NULL, script };
	struct lr_err e;
	CHECK_EQ_INT(lr_store_memory_open(&f.inner, &e), 0);
	int rc = lr_store_append_definitely(&f.base, "l", 0, "rec", 3, &e);
	*tip = tip_of(&f);
	lr_store_close(f.inner);
	return rc;
}

TEST(ambiguous_that_landed_resolves_to_appended_once)
{
	uint64_t tip;
	CHECK_EQ_INT(run_script("L.", &tip), 0);
	CHECK_EQ_INT((int)tip, 1);
}

TEST(ambiguous_that_did_not_land_is_appended_by_the_retry)
{
	uint64_t tip;
	CHECK_EQ_INT(run_script("A.", &tip), 0);
	CHECK_EQ_INT((int)tip, 1);
}

TEST(ambiguous_then_a_retry_that_cannot_read_stays_ambiguous)
{
	uint64_t tip;
	CHECK_EQ_INT(run_script("LT", &tip), LR_EAMBIGUOUS);
	CHECK_EQ_INT((int)tip, 1);
	CHECK_EQ_INT(run_script("AT", &tip), LR_EAMBIGUOUS);
	CHECK_EQ_INT((int)tip, 0);
	CHECK_EQ_INT(run_script("LA", &tip), LR_EAMBIGUOUS);
	/* a timeout with no ambiguity before it is that timeout */
	CHECK_EQ_INT(run_script("T", &tip), LR_ETIMEOUT);
}

int main(void)
{
	struct lr_store *m;
	struct lr_err e;
	if (lr_store_memory_open(&m, &e))
		return 1;
	fake_ops = *m->ops;
	lr_store_close(m);
	fake_ops.append = f_append;
	fake_ops.read = f_read;
	fake_ops.close = NULL;
	RUN(ambiguous_that_landed_resolves_to_appended_once);
	RUN(ambiguous_that_did_not_land_is_appended_by_the_retry);
	RUN(ambiguous_then_a_retry_that_cannot_read_stays_ambiguous);
	return test_summary();
}
