/* util.h - arenas, source locations and diagnostics shared by every phase.
 *
 * Memory: the compiler allocates AST and IR from an Arena that is freed in
 * one call at the end; scratch memory comes from a second arena that a pass
 * may reset.  Nothing allocated from an arena is freed on its own.
 *
 * Errors: user errors are diagnostics ("file:line:col: error: message", the
 * source line and a caret range) counted in a Diag context.  A phase that sees
 * errors stops at its boundary; library code never calls exit().
 */
#ifndef DTM_UTIL_H
#define DTM_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Internal invariant: names file and line, then aborts.  Never used for
 * anything a user can trigger. */
#define DTM_ASSERT(c)                                                          \
	((c) ? (void)0 : dtm_assert_fail(#c, __FILE__, __LINE__))
void dtm_assert_fail(const char *expr, const char *file, int line);

/* ---- arena ---- */

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
	ArenaBlock *head;
	size_t used; /* bytes handed out, for limits and reports */
	size_t limit; /* 0 = unlimited; arena_alloc returns NULL past it */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a); /* frees every block; the arena can be reused */
/* Zeroed, 16-byte aligned.  Returns NULL only when a->limit is exceeded or
 * the system is out of memory. */
void *arena_alloc(Arena *a, size_t n);
/* As arena_alloc, but the bytes are not zeroed: for memory the caller
 * overwrites in full at once (copies, strings), where the memset is waste. */
void *arena_alloc_raw(Arena *a, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- source locations ---- */

/* A range on one line: line and col are 1-based; end_col is one past the
 * last column (end_col == col means a zero-width point).  file == NULL means
 * "no location" (e.g. a node created by a pass). */
typedef struct SrcLoc {
	const char *file;
	int line, col, end_col;
} SrcLoc;

/* ---- diagnostics ---- */

/* One source file's text, so diagnostics can quote the offending line. */
typedef struct SrcFile {
	const char *name;
	const char *text;
	size_t len;
} SrcFile;

typedef struct Diag {
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
} Diag;

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

/* Reads a whole file into memory from the arena (NUL-terminated; embedded
 * NULs are kept and counted in len).  Returns false and reports through d
 * (with no location) when it cannot be read. */
bool src_read_file(Arena *a, Diag *d, const char *path, SrcFile *out);

#endif
