/* fuzz_hw.c - libFuzzer target for the hardware override file parser
 * (tools/hw.c, `key = value` lines): any bytes must parse or be rejected
 * with counted errors, never crash, and a rejected file must leave the
 * profile unchanged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *sink;
	if (!sink)
		sink = fopen("/dev/null", "w");
	HwProfile h = *hw_builtin("h100"), keep = h;
	int nerr = hw_parse_overrides(&h, (const char *)data, size, "fuzz.hw", sink);
	if (nerr < 0 || (nerr > 0 && memcmp(&h, &keep, sizeof h) != 0))
		abort();
	return 0;
}
