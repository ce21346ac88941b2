/*
 * model_anthropic_fuzz.c — arbitrary response bodies through the anthropic decoder
 * (the harness is model_fuzz.h).
 */
#include "model_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_L)
		fuzz_setup("rig.model.anthropic", "anthropic");
	fuzz_run("rig.model.anthropic", "anthropic", data, size);
	return 0;
}
