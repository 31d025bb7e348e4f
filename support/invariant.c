/* invariant.c - DTM_ASSERT's failure report (see invariant.h). */
#include "support/invariant.h"

#include <stdio.h>
#include <stdlib.h>

void dtm_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", file, line, expr);
	abort();
}
