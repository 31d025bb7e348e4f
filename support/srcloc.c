/* srcloc.c - reading a source file whole (see srcloc.h). */
#include "support/srcloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/diag.h"

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
