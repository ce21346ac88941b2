/*
 * model_gemini_fuzz.c — arbitrary response bodies through the gemini decoder
 * (the harness is model_fuzz.h).
 */
#include "model_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_L)
		fuzz_setup("rig.model.gemini", "gemini");
	fuzz_run("rig.model.gemini", "gemini", data, size);
	return 0;
}
