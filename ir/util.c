/* util.c - arenas and diagnostics (see util.h). */
#include "ir/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dtm_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", file, line, expr);
	abort();
}

/* ---- arena ---- */

#define ARENA_BLOCK (64 * 1024)

struct ArenaBlock {
	ArenaBlock *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

void arena_init(Arena *a)
{
	a->head = NULL;
	a->used = 0;
	a->limit = 0;
}

void arena_free(Arena *a)
{
	ArenaBlock *b = a->head;
	while (b) {
		ArenaBlock *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->used = 0;
}

void *arena_alloc_raw(Arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (a->limit && a->used + n > a->limit)
		return NULL;
	ArenaBlock *b = a->head;
	if (!b || b->size - b->used < n) {
		size_t sz = n > ARENA_BLOCK ? n : ARENA_BLOCK;
		b = malloc(sizeof(ArenaBlock) + sz);
		if (!b)
			return NULL;
		b->size = sz;
		b->used = 0;
		/* a big allocation gets its own block behind the current one, so
		 * the current block's free space is not wasted */
		if (a->head && n > ARENA_BLOCK) {
			b->next = a->head->next;
			a->head->next = b;
		} else {
			b->next = a->head;
			a->head = b;
		}
	}
	void *p = b->data + b->used;
	b->used += n;
	a->used += n;
	return p;
}

void *arena_alloc(Arena *a, size_t n)
{
	void *p = arena_alloc_raw(a, n);
	size_t z = (n + 15) & ~(size_t)15;
	if (p)
		memset(p, 0, z ? z : 16);
	return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
	char *p = arena_alloc_raw(a, n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *p = n >= 0 ? arena_alloc_raw(a, (size_t)n + 1) : NULL;
	if (p)
		vsnprintf(p, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return p;
}

/* ---- diagnostics ---- */

void diag_init(Diag *d, FILE *out)
{
	memset(d, 0, sizeof *d);
	d->out = out ? out : stderr;
	d->max_errors = 20;
	d->color = false;
}

void diag_add_file(Diag *d, const SrcFile *f)
{
	for (int i = 0; i < d->nfiles; i++)
		if (d->files[i] == f)
			return;
	if (d->nfiles < (int)(sizeof d->files / sizeof d->files[0]))
		d->files[d->nfiles++] = f;
}

static const SrcFile *find_file(Diag *d, const char *name)
{
	for (int i = 0; i < d->nfiles; i++)
		if (d->files[i]->name == name || strcmp(d->files[i]->name, name) == 0)
			return d->files[i];
	return NULL;
}

/* Prints the source line of loc with a caret range under it.  Long lines
 * are shown as a window around the column; control bytes print as '?'. */
static void show_line(Diag *d, SrcLoc loc)
{
	if (!loc.file)
		return;
	const SrcFile *f = find_file(d, loc.file);
	if (!f || loc.line <= 0)
		return;
	const char *p = f->text, *end = f->text + f->len;
	for (int l = 1; l < loc.line && p < end; p++)
		if (*p == '\n')
			l++;
	if (p > end)
		return;
	const char *e = p;
	while (e < end && *e != '\n')
		e++;
	long len = e - p;
	long col = loc.col > 0 ? loc.col - 1 : 0;
	long ecol = loc.end_col > loc.col ? loc.end_col - 1 : col + 1;
	if (col > len)
		col = len;
	if (ecol > len + 1)
		ecol = len + 1;
	long from = 0, to = len;
	const long window = 100;
	if (len > window) {
		from = col > window / 2 ? col - window / 2 : 0;
		to = from + window < len ? from + window : len;
		if (ecol > to + 1)
			ecol = to + 1;
	}
	fputs("  ", d->out);
	if (from > 0)
		fputs("...", d->out);
	for (long i = from; i < to; i++) {
		unsigned char c = (unsigned char)p[i];
		fputc(c == '\t' ? ' ' : (c < 32 || c >= 127) ? '?' : c, d->out);
	}
	if (to < len)
		fputs("...", d->out);
	fputc('\n', d->out);
	fputs("  ", d->out);
	if (from > 0)
		fputs("   ", d->out);
	for (long i = from; i < col; i++)
		fputc(' ', d->out);
	fputc('^', d->out);
	for (long i = col + 1; i < ecol; i++)
		fputc('~', d->out);
	fputc('\n', d->out);
}

static void report(Diag *d, const char *kind, SrcLoc loc, const char *fmt, va_list ap)
{
	if (loc.file && loc.line > 0)
		fprintf(d->out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
	else if (loc.file)
		fprintf(d->out, "%s: %s: ", loc.file, kind);
	else
		fprintf(d->out, "dtmc: %s: ", kind);
	vfprintf(d->out, fmt, ap);
	fputc('\n', d->out);
	show_line(d, loc);
}

void diag_verror(Diag *d, SrcLoc loc, const char *fmt, va_list ap)
{
	d->nerr++;
	d->mute_notes = d->nerr > d->max_errors;
	if (d->mute_notes)
		return;
	report(d, "error", loc, fmt, ap);
	if (d->nerr == d->max_errors)
		fprintf(d->out, "dtmc: note: too many errors; stopping reports here\n");
}

void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror(d, loc, fmt, ap);
	va_end(ap);
}

void diag_internal(Diag *d, SrcLoc loc, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	d->ninternal++;
	diag_error(d, loc, "internal error: %s", msg);
}

void diag_warning(Diag *d, SrcLoc loc, const char *fmt, ...)
{
	va_list ap;
	d->nwarn++;
	d->mute_notes = d->no_warnings;
	if (d->no_warnings)
		return;
	va_start(ap, fmt);
	report(d, "warning", loc, fmt, ap);
	va_end(ap);
}

void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...)
{
	if (d->mute_notes)
		return;
	va_list ap;
	va_start(ap, fmt);
	report(d, "note", loc, fmt, ap);
	va_end(ap);
}

void diag_summary(Diag *d)
{
	if (d->nerr > 0)
		fprintf(d->out, "%d error%s generated.\n", d->nerr, d->nerr == 1 ? "" : "s");
}

bool src_read_file(Arena *a, Diag *d, const char *path, SrcFile *out)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	SrcLoc none = {0};
	if (!f) {
		diag_error(d, none, "cannot open '%s': %s", path, strerror(errno));
		return false;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	bool ok = buf != NULL;
	while (ok) {
		if (len + 1 >= cap) {
			char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				diag_error(d, none, "'%s' is too large (over 1 GiB) or memory ran out", path);
				ok = false;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
		if (got == 0) {
			if (ferror(f)) {
				diag_error(d, none, "cannot read '%s': %s", path, strerror(errno));
				ok = false;
			}
			break;
		}
	}
	if (f != stdin)
		fclose(f);
	if (ok) {
		char *text = arena_alloc(a, len + 1);
		if (!text) {
			diag_error(d, none, "out of memory reading '%s'", path);
			ok = false;
		} else {
			memcpy(text, buf, len);
			text[len] = 0;
			out->name = arena_strdup(a, strcmp(path, "-") == 0 ? "<stdin>" : path);
			out->text = text;
			out->len = len;
		}
	}
	free(buf);
	return ok;
}
