/* diag.c - diagnostics (see diag.h). */
#include "support/diag.h"

#include <string.h>

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
