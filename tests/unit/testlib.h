/* testlib.h - helpers the unit tests share: reading a file whole,
 * replacing text in it, and
 * capturing diagnostics (lowering a model given as text: testlib_lower.h,
 * for the tests of layers above the front end).  static inline, so a test
 * that uses none pays nothing (and -Wunused-function stays quiet). */
#ifndef DTM_TESTLIB_H
#define DTM_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file, NUL-terminated (malloc'ed), its size in *size when
 * size is non-NULL; NULL when it cannot be read. */
static inline char *slurp_size(const char *path, size_t *size)
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
	if (s) {
		s[n] = 0;
		if (size)
			*size = (size_t)n;
	}
	fclose(f);
	return s;
}

static inline char *slurp(const char *path)
{
	return slurp_size(path, NULL);
}

/* s with every `from` replaced by `to` (malloc'd; s is freed); NULL when
 * s is NULL or out of memory, so replace(slurp(path), ...) chains. */
static inline char *replace(char *s, const char *from, const char *to)
{
	if (!s)
		return NULL;
	size_t lf = strlen(from), lt = strlen(to), n = 0;
	for (const char *p = strstr(s, from); p; p = strstr(p + lf, from))
		n++;
	char *r = malloc(strlen(s) + n * lt + 1), *w = r;
	const char *p = s, *q;
	if (!r) {
		free(s);
		return NULL;
	}
	while ((q = strstr(p, from))) {
		memcpy(w, p, (size_t)(q - p));
		w += q - p;
		memcpy(w, to, lt);
		w += lt;
		p = q + lf;
	}
	strcpy(w, p);
	free(s);
	return r;
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
