/* diag.h - diagnostics: user errors counted in a context.
 *
 * A user error is a diagnostic ("file:line:col: error: message", the source
 * line and a caret range) counted in a Diag.  A phase that sees errors
 * stops at its boundary; several errors are reported in one run; library
 * code never calls exit().
 */
#ifndef DTM_SUPPORT_DIAG_H
#define DTM_SUPPORT_DIAG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "support/srcloc.h"

struct Diag {
	FILE *out; /* where messages go (stderr by default) */
	const SrcFile *files[8]; /* files we can quote lines from */
	int nfiles;
	int nerr, nwarn;
	int ninternal; /* of nerr: diag_internal's, the compiler's own faults */
	int max_errors; /* after this many, further errors are counted, not printed */
	bool color;
	bool no_warnings; /* warnings are counted, not printed (dtmc sweep's
	                   * candidates: its report says what they cost) */
	bool mute_notes;  /* the last error or warning was not printed */
};

void diag_init(Diag *d, FILE *out);
void diag_add_file(Diag *d, const SrcFile *f);
void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, SrcLoc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A note attached to the previous error or warning (no counting). */
void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void diag_verror(Diag *d, SrcLoc loc, const char *fmt, va_list ap);
/* An invariant of the compiler that failed on this input: an error reading
 * "internal error: ...", counted in nerr and in ninternal, so tests and the
 * fuzzer tell a compiler bug from a user error.  For invariants a phase can
 * report and back off from (DTM_ASSERT for the rest); never for anything
 * the input can cause, which is a user error saying what to change. */
void diag_internal(Diag *d, SrcLoc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prints "N errors generated" style summary when there were errors. */
void diag_summary(Diag *d);

#endif
