/* testlib.h - helpers the unit tests share: reading a file whole, and
 * lowering a model given as text.  static inline, so a test that uses
 * neither pays nothing (and -Wunused-function stays quiet). */
#ifndef DTM_TESTLIB_H
#define DTM_TESTLIB_H

#include "frontend/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file, NUL-terminated (malloc'ed), or NULL. */
static inline char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

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

/* Diagnostics written to memory, for tests that check a message:
 *   TestCapture c; diag_init(&d, capture_open(&c)); ...;
 *   CHECK(strstr(capture_text(&c), "...")); capture_free(&c); */
typedef struct TestCapture {
	char *buf;
	size_t len;
	FILE *f;
} TestCapture;

static inline FILE *capture_open(TestCapture *c)
{
	c->buf = NULL;
	c->len = 0;
	c->f = open_memstream(&c->buf, &c->len);
	return c->f ? c->f : stderr;
}

/* What was written so far ("" when nothing); closes the stream. */
static inline const char *capture_text(TestCapture *c)
{
	if (c->f) {
		fclose(c->f);
		c->f = NULL;
	}
	return c->buf ? c->buf : "";
}

static inline void capture_free(TestCapture *c)
{
	capture_text(c);
	free(c->buf);
	c->buf = NULL;
}

#endif
