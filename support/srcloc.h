/* srcloc.h - source locations and the source files diagnostics quote. */
#ifndef DTM_SUPPORT_SRCLOC_H
#define DTM_SUPPORT_SRCLOC_H

#include <stdbool.h>
#include <stddef.h>

#include "support/arena.h"

/* A range on one line: line and col are 1-based; end_col is one past the
 * last column (end_col == col means a zero-width point).  file == NULL means
 * "no location" (e.g. a node created by a pass). */
typedef struct SrcLoc {
	const char *file;
	int line, col, end_col;
} SrcLoc;

/* One source file's text, so diagnostics can quote the offending line. */
typedef struct SrcFile {
	const char *name;
	const char *text;
	size_t len;
} SrcFile;

typedef struct Diag Diag;

/* Reads a whole file into memory from the arena (NUL-terminated; embedded
 * NULs are kept and counted in len); "-" reads standard input.  Returns
 * false and reports through d (with no location) when it cannot be read. */
bool src_read_file(Arena *a, Diag *d, const char *path, SrcFile *out);

#endif
