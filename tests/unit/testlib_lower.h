/* testlib_lower.h - testlib.h, and lowering a model given as text (for the
 * tests that link the front end). */
#ifndef DTM_TESTLIB_LOWER_H
#define DTM_TESTLIB_LOWER_H

#include <string.h>

#include "frontend/lower.h"
#include "testlib.h"

/* src (named t.dtm in messages) lowered as dtmc would with --mesh mesh,
 * -D NAME=VALUE for each pair of the NULL-terminated defs and, when not
 * NULL, one --train override; NULL after reporting to d. */
/* As test_lower, with a NULL-terminated list of --train overrides. */
static inline IrModule *test_lower_trains(Arena *a, Diag *d, const char *src, const char *mesh,
                                          const char *const *defs, const char *const *train)
{
	SrcFile *sf = arena_alloc(a, sizeof *sf);
	if (!sf)
		return NULL;
	sf->name = "t.dtm";
	sf->text = src;
	sf->len = strlen(src);
	diag_add_file(d, sf);
	LowerOptions o = {.mesh = mesh};
	for (int i = 0; train && train[i] && o.ntrain < LOWER_MAX_TRAIN; i++)
		o.train[o.ntrain++] = train[i];
	for (int i = 0; defs && defs[2 * i]; i++) {
		o.define_names[o.ndefines] = defs[2 * i];
		o.define_values[o.ndefines++] = defs[2 * i + 1];
	}
	AstFile af;
	if (!ast_parse(a, d, sf, &af))
		return NULL;
	return lower_file(a, d, &af, &o);
}

static inline IrModule *test_lower(Arena *a, Diag *d, const char *src, const char *mesh,
                                   const char *const *defs, const char *train)
{
	const char *tr[2] = {train, NULL};
	return test_lower_trains(a, d, src, mesh, defs, tr);
}

#endif
