/* ast.c - AST nodes, the parser's entry point and the tree dump.
 *
 * ast_parse runs lexer.l and parser.y over one source buffer; the grammar
 * and the error recovery live in parser.y.  ast_dump prints the tree as
 * S-expressions, which is what the parser's unit tests compare.
 */
#include "frontend/ast.h"
#include "frontend/parser.h"
/* flex's header names bison's types without the dtm_yy prefix */
#define YYSTYPE DTM_YYSTYPE
#define YYLTYPE DTM_YYLTYPE
#include "frontend/lexer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

AstNode *ast_new(Arena *a, AstKind kind, SrcLoc loc)
{
	AstNode *n = arena_alloc(a, sizeof *n);
	if (!n)
		return NULL;
	n->kind = kind;
	n->loc = loc;
	n->depth = 1;
	return n;
}

/* Grows by doubling; when the arena refuses, the node is not added (the
 * parser checks n to notice). */
void ast_list_push(Arena *a, AstList *l, AstNode *n)
{
	if (l->n == l->cap) {
		if (l->cap > INT_MAX / 2)
			return;
		int cap = l->cap ? 2 * l->cap : 4;
		AstNode **v = arena_alloc(a, (size_t)cap * sizeof *v);
		if (!v)
			return;
		if (l->n)
			memcpy(v, l->items, (size_t)l->n * sizeof *v);
		l->items = v;
		l->cap = cap;
	}
	l->items[l->n++] = n;
}

/* Bytes per line, so that a range over several lines can be clamped to the
 * end of its first line. */
static int *line_lengths(const SrcFile *src, int *nlines)
{
	size_t n = 1;
	for (size_t i = 0; i < src->len; i++)
		n += src->text[i] == '\n';
	if (n > INT_MAX)
		return NULL;
	int *len = malloc(n * sizeof *len);
	if (!len)
		return NULL;
	size_t line = 0, start = 0;
	for (size_t i = 0; i <= src->len; i++)
		if (i == src->len || src->text[i] == '\n') {
			size_t l = i - start;
			len[line++] = l > INT_MAX - 1 ? INT_MAX - 1 : (int)l;
			start = i + 1;
		}
	*nlines = (int)n;
	return len;
}

bool ast_parse(Arena *a, Diag *d, const SrcFile *src, AstFile *out)
{
	memset(out, 0, sizeof *out);
	out->path = src->name;
	diag_add_file(d, src);
	SrcLoc file_loc = {src->name, 0, 0, 0};
	if (src->len > INT_MAX / 2) {
		diag_error(d, file_loc, "file too large to parse (%zu bytes)", src->len);
		return false;
	}

	ParseCtx *p = calloc(1, sizeof *p);
	int nlines = 0;
	int *lens = line_lengths(src, &nlines);
	yyscan_t scanner = NULL;
	if (!p || !lens || dtm_yylex_init_extra(p, &scanner) != 0) {
		diag_error(d, file_loc, "out of memory while parsing");
		free(p);
		free(lens);
		return false;
	}
	p->arena = a;
	p->diag = d;
	p->src = src;
	p->file = out;
	p->scanner = scanner;
	p->line = 1;
	p->col = 1;
	p->at_bol = true;
	p->end_line = 1;
	p->end_col = 1;
	p->line_len = lens;
	p->nlines = nlines;

	YY_BUFFER_STATE buf = dtm_yy_scan_bytes(src->text, (int)src->len, scanner);
	int rc = dtm_yyparse(p);
	dtm_yy_delete_buffer(buf, scanner);
	dtm_yylex_destroy(scanner);

	bool ok = rc == 0 && p->nerr == 0 && !p->oom;
	if (p->oom) {
		/* the tree may hold the stand-in nodes: nobody may walk it */
		memset(&out->items, 0, sizeof out->items);
		if (p->nerr == 0)
			diag_error(d, file_loc, "out of memory while parsing");
	} else if (rc != 0 && p->nerr == 0) {
		/* cannot happen (bison reports before it aborts); never return
		 * false without a diagnostic */
		diag_error(d, file_loc, "syntax error");
	}
	free(p->itab);
	free(lens);
	free(p);
	return ok;
}

/* ---- dump ---- */

static const char *axis(const AstName *n)
{
	return n->name ? n->name : "?";
}

static void dump_placement(FILE *f, const AstPlacement *pl)
{
	fputc('[', f);
	for (int i = 0; i < pl->ndims; i++) {
		if (i)
			fputc(' ', f);
		if (pl->naxes[i] == 0)
			fputc('_', f);
		else if (pl->naxes[i] == 1)
			fputs(axis(&pl->axes[i][0]), f);
		else {
			fputc('(', f);
			for (int j = 0; j < pl->naxes[i] && j < 8; j++)
				fprintf(f, "%s%s", j ? " " : "", axis(&pl->axes[i][j]));
			fputc(')', f);
		}
	}
	if (pl->npartial) {
		fprintf(f, "%spartial(", pl->ndims ? " " : "");
		for (int j = 0; j < pl->npartial; j++)
			fprintf(f, "%s%s", j ? " " : "", axis(&pl->partial[j]));
		fputc(')', f);
	}
	if (pl->too_many)
		fputs(" !too-many", f);
	fputc(']', f);
}

static void dump_annot(FILE *f, const AstAnnot *an)
{
	if (!an) {
		fputs("?", f);
		return;
	}
	if (an->is_choose)
		fputs("(choose", f);
	for (int i = 0; i < an->nopts; i++) {
		if (an->is_choose || i)
			fputc(' ', f);
		dump_placement(f, an->opts[i]);
	}
	if (an->is_choose)
		fputc(')', f);
}

static void dump_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 32 || c >= 127)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void dump_names(FILE *f, const AstNode *n)
{
	fputc('(', f);
	for (int i = 0; i < n->nnames; i++)
		fprintf(f, "%s%s", i ? " " : "", axis(&n->names[i]));
	fputc(')', f);
}

/* Expressions print on one line: (+ a b), (@ a b) for matmul, (neg a),
 * (call f a (kw k v)), (tuple a b), (annot e [dp _]). */
static void dump_expr(FILE *f, const AstNode *n)
{
	if (!n) {
		fputs("nil", f);
		return;
	}
	switch (n->kind) {
	case AST_NUM:
		if (n->is_int)
			fprintf(f, "%lld", (long long)n->ival);
		else {
			/* a float always shows a '.' or exponent, unlike an int */
			char buf[40];
			snprintf(buf, sizeof buf, "%.9g", n->num);
			fprintf(f, "%s%s", buf, strpbrk(buf, ".eEni") ? "" : ".0");
		}
		break;
	case AST_BOOL:
		fputs(n->ival ? "true" : "false", f);
		break;
	case AST_STR:
		dump_str(f, n->name ? n->name : "");
		break;
	case AST_IDENT:
		fputs(n->name ? n->name : "?", f);
		break;
	case AST_BINARY:
		fprintf(f, "(%c ", n->op);
		dump_expr(f, n->lhs);
		fputc(' ', f);
		dump_expr(f, n->rhs);
		fputc(')', f);
		break;
	case AST_NEG:
		fputs("(neg ", f);
		dump_expr(f, n->lhs);
		fputc(')', f);
		break;
	case AST_CALL:
	case AST_TUPLE:
		if (n->kind == AST_CALL)
			fprintf(f, "(call %s", n->name ? n->name : "?");
		else
			fputs("(tuple", f);
		for (int i = 0; i < n->args.n; i++) {
			fputc(' ', f);
			dump_expr(f, n->args.items[i]);
		}
		fputc(')', f);
		break;
	case AST_KWARG:
		fprintf(f, "(kw %s ", n->name ? n->name : "?");
		dump_expr(f, n->lhs);
		fputc(')', f);
		break;
	case AST_ANNOT:
		fputs("(annot ", f);
		dump_expr(f, n->lhs);
		fputc(' ', f);
		dump_annot(f, n->annot);
		fputc(')', f);
		break;
	default:
		fprintf(f, "<kind %d>", (int)n->kind);
		break;
	}
}

static void dump_decl(FILE *f, const char *what, const AstDecl *d)
{
	fprintf(f, "(%s %s %s [", what, d->name ? d->name : "?", d->dtype ? d->dtype : "?");
	for (int i = 0; i < d->dims.n; i++) {
		if (i)
			fputc(' ', f);
		dump_expr(f, d->dims.items[i]);
	}
	fputc(']', f);
	if (d->annot) {
		fputs(" @", f);
		dump_annot(f, d->annot);
	}
	if (d->init) {
		fputs(" init ", f);
		dump_expr(f, d->init);
	}
	fputc(')', f);
}

static void dump_stmts(FILE *f, const AstList *l, int indent);

static void dump_stmt(FILE *f, const AstNode *n, int indent)
{
	fprintf(f, "%*s", 2 * indent, "");
	switch (n->kind) {
	case AST_ASSIGN:
		fputs("(= ", f);
		dump_names(f, n);
		fputc(' ', f);
		dump_expr(f, n->lhs);
		fputc(')', f);
		break;
	case AST_FOR:
		fprintf(f, "(for %s ", n->name ? n->name : "?");
		dump_expr(f, n->lhs);
		fputc(' ', f);
		dump_expr(f, n->rhs);
		if (n->stage) {
			fputs(" stage ", f);
			dump_expr(f, n->stage);
		}
		dump_stmts(f, &n->body, indent + 1);
		fputc(')', f);
		break;
	case AST_RETURN:
		fputs("(return", f);
		for (int i = 0; i < n->args.n; i++) {
			fputc(' ', f);
			dump_expr(f, n->args.items[i]);
		}
		fputc(')', f);
		break;
	case AST_PARAM:
	case AST_INPUT:
		if (n->decl)
			dump_decl(f, n->kind == AST_PARAM ? "param" : "input", n->decl);
		break;
	case AST_SETTING:
		fprintf(f, "(setting %s", n->name ? n->name : "?");
		for (int i = 0; i < n->args.n; i++) {
			fputc(' ', f);
			dump_expr(f, n->args.items[i]);
		}
		if (n->nnames) {
			fputs(" over ", f);
			dump_names(f, n);
		}
		fputc(')', f);
		break;
	default:
		dump_expr(f, n);
		break;
	}
}

static void dump_stmts(FILE *f, const AstList *l, int indent)
{
	for (int i = 0; i < l->n; i++) {
		fputc('\n', f);
		dump_stmt(f, l->items[i], indent);
	}
}

void ast_dump(FILE *out, const AstFile *f)
{
	for (int i = 0; i < f->items.n; i++) {
		const AstNode *n = f->items.items[i];
		switch (n->kind) {
		case AST_MODEL:
			fprintf(out, "(model %s)", n->name ? n->name : "?");
			break;
		case AST_LET:
			fprintf(out, "(let %s ", n->name ? n->name : "?");
			dump_expr(out, n->lhs);
			fputc(')', out);
			break;
		case AST_MESH:
			fputs("(mesh", out);
			for (int j = 0; j < n->nnames && j < n->args.n; j++) {
				fprintf(out, " (%s ", axis(&n->names[j]));
				dump_expr(out, n->args.items[j]);
				fputc(')', out);
			}
			fputc(')', out);
			break;
		case AST_BLOCK:
			fprintf(out, "(block %s ", n->name ? n->name : "?");
			dump_names(out, n);
			dump_stmts(out, &n->body, 1);
			fputc(')', out);
			break;
		case AST_FORWARD:
			fputs("(forward", out);
			dump_stmts(out, &n->body, 1);
			fputc(')', out);
			break;
		case AST_TRAIN:
			fputs("(train", out);
			dump_stmts(out, &n->body, 1);
			fputc(')', out);
			break;
		default:
			dump_stmt(out, n, 0);
			break;
		}
		fputc('\n', out);
	}
}
