/*
 * model_openai_fuzz.c — arbitrary response bodies through the openai decoder
 * (the harness is model_fuzz.h).
 */
#include "model_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_L)
		fuzz_setup("rig.model.openai", "openai");
	fuzz_run("rig.model.openai", "openai", data, size);
	return 0;
}
