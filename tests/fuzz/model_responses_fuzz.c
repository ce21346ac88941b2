/*
 * model_responses_fuzz.c — arbitrary response bodies through the openai-responses decoder
 * (the harness is model_fuzz.h).
 */
#include "model_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_L)
		fuzz_setup("rig.model.responses", "openai-responses");
	fuzz_run("rig.model.responses", "openai-responses", data, size);
	return 0;
}
