/*
 * store_memory_test.c — the conformance suite on the memory backend.
 */
#include <stdlib.h>

#include "test.h"
#include "store_conformance.h"

static int mem_open(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	return lr_store_memory_open(out, e);
}

int main(void)
{
	struct conformance h = { "memory", mem_open, NULL, NULL, NULL,
				 getenv("ASAN_OPTIONS") != NULL, NULL };
	conformance_run(&h);
	return test_summary();
}
