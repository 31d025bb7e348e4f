/* ast.h - the syntax tree of a .dtm file, as the parser builds it.
 *
 * Everything is allocated from one arena.  Lists are (pointer, count) pairs
 * built by ast_list_push.  Each AstNode's kind says which fields are valid
 * (see the table beside AstKind).  The tree is checked and lowered to IR by
 * lower.c; the parser only checks syntax.
 */
#ifndef DTM_AST_H
#define DTM_AST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/arena.h"
#include "support/diag.h"

#define AST_MAX_DEPTH 512 /* deeper expressions are refused by the parser */

typedef struct AstNode AstNode;

typedef struct AstList {
	AstNode **items;
	int n, cap;
} AstList;

/* One name with its location (mesh axis, dim entry, target). */
typedef struct AstName {
	const char *name;
	SrcLoc loc;
} AstName;

/* A placement literal `[dp, (dp, tp), _, partial(tp)]`. */
#define AST_MAX_PDIMS 16
typedef struct AstPlacement {
	SrcLoc loc;
	int ndims;
	int naxes[AST_MAX_PDIMS];       /* 0 for `_` */
	AstName axes[AST_MAX_PDIMS][8];
	int npartial;
	AstName partial[8];
	bool too_many; /* more dims or axes than the arrays hold: an error */
} AstPlacement;

/* `@ [..]` or `@ choose([..], [..], ...)` */
typedef struct AstAnnot {
	SrcLoc loc;
	bool is_choose;
	int nopts;           /* 1 when not a choose */
	AstPlacement **opts;
} AstAnnot;

typedef enum AstKind {
	/* expressions */
	AST_NUM,     /* num, is_int, ival */
	AST_BOOL,    /* ival (0/1) */
	AST_STR,     /* name = the string's contents */
	AST_IDENT,   /* name */
	AST_BINARY,  /* op ('+', '-', '*', '/', '%', '@'), lhs, rhs */
	AST_NEG,     /* lhs */
	AST_CALL,    /* name (callee), args (positional and AST_KWARG) */
	AST_KWARG,   /* name = lhs */
	AST_TUPLE,   /* args: (a, b, ...) */
	AST_ANNOT,   /* lhs annotated with annot */
	/* statements */
	AST_ASSIGN,  /* targets (AstName list in names/nnames), lhs = value */
	AST_FOR,     /* name = loop var, lhs = lo, rhs = hi, stage (may be NULL), body */
	AST_RETURN,  /* args = returned exprs */
	AST_PARAM,   /* a decl: see AstDecl in decl */
	/* top-level items */
	AST_MODEL,   /* name */
	AST_LET,     /* name = lhs (one per constant) */
	AST_MESH,    /* names/nnames = axes, args = sizes (exprs) */
	AST_INPUT,   /* decl */
	AST_BLOCK,   /* name, names/nnames = formal args, body */
	AST_FORWARD, /* body */
	AST_TRAIN,   /* body = AST_SETTING list */
	AST_SETTING, /* name = key, args = values (exprs), names/nnames = `over` axes */
} AstKind;

/* input / param declaration: `param w : f32[d, 3*d] @ [_, tp] init normal(0, 0.02)` */
typedef struct AstDecl {
	const char *name;
	SrcLoc name_loc;
	const char *dtype;  /* as written; checked by lower */
	SrcLoc dtype_loc;
	AstList dims;       /* shape exprs; empty for a scalar */
	AstAnnot *annot;    /* may be NULL */
	AstNode *init;      /* AST_IDENT (zeros/ones) or AST_CALL (normal/uniform); may be NULL */
} AstDecl;

struct AstNode {
	AstKind kind;
	SrcLoc loc;
	int depth;          /* expression nesting depth (1 for a leaf) */
	const char *name;
	double num;
	int64_t ival;
	bool is_int;
	int op;
	AstNode *lhs, *rhs, *stage;
	AstList args;
	AstList body;
	AstName *names;
	int nnames;
	AstAnnot *annot;
	AstDecl *decl;
};

typedef struct AstFile {
	const char *path;
	AstList items; /* top-level items in source order */
} AstFile;

void ast_list_push(Arena *a, AstList *l, AstNode *n);
AstNode *ast_new(Arena *a, AstKind kind, SrcLoc loc);

/* Parses src into *out.  Syntax errors go to d (file:line:col, several per
 * run, with recovery at statement boundaries); returns false if any. */
bool ast_parse(Arena *a, Diag *d, const SrcFile *src, AstFile *out);

/* Prints the tree (for debugging and the parser's unit tests). */
void ast_dump(FILE *out, const AstFile *f);

#endif
