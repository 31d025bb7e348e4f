/* parser.y - the grammar of .dtm files (bison 3.8, pure, with locations).
 *
 * Consumes tokens from lexer.l and builds the AST of ast.h in the caller's
 * arena.  It checks syntax only: names, dtypes, shapes and placements are
 * checked by lower.c.
 *
 * Robustness rules (the front end must survive any input):
 *  - expressions deeper than AST_MAX_DEPTH (counting parentheses) are refused
 *    with one error and not built deeper, so every later recursive pass is
 *    safe; nodes thrown away that way are recycled, so `a+a+a+...` of any
 *    length parses in constant memory;
 *  - `for` loops nest at most AST_MAX_DEPTH deep, for the same reason;
 *  - the parser stack is bounded (YYMAXDEPTH); running out is reported as
 *    the same nesting error;
 *  - errors recover at statement and item boundaries (the `error` token in
 *    the three lists), and parsing stops after PARSE_MAX_ERRORS errors.
 */

%code requires {
#include "frontend/ast.h"

typedef struct ParseCtx ParseCtx;

/* A growable list of names in the arena (mesh axes, targets, formals). */
typedef struct NameList {
	AstName *v;
	int n, cap;
} NameList;

/* The axes of one placement entry: `dp`, `(dp, tp)` or `partial(tp)`. */
typedef struct AxisList {
	AstName ax[8];
	int n;
	bool over;    /* more than 8 were written */
	bool partial; /* partial(...) rather than a dim */
} AxisList;
}

%code provides {
#define PARSE_MAX_ERRORS 50
#define PARSE_MAX_OPEN 256

/* One open bracket, remembered by the lexer so a syntax error can say which
 * construct was left unclosed and where it began. */
typedef struct ParseOpen {
	int ch;           /* '(', '[' or '{' */
	const char *what; /* "placement", "argument list", ... */
	DTM_YYLTYPE loc;
} ParseOpen;

struct ParseCtx {
	Arena *arena;
	Diag *diag;
	const SrcFile *src;
	AstFile *file;
	void *scanner;

	/* lexer position: next byte, its line and column (1-based, bytes) */
	size_t off;
	int line, col;
	size_t tok_off, tok_len; /* the last token's bytes */
	bool at_bol;             /* nothing but blanks since the last newline */
	bool tok_first;          /* the last token was first on its line */
	int prev_tok, prev2_tok; /* the last two tokens, to name brackets */
	int end_line, end_col;   /* end of the last token, for `end of input` */

	ParseOpen open[PARSE_MAX_OPEN];
	int nopen;        /* may exceed PARSE_MAX_OPEN: deeper ones are counted only */
	int nopen_before; /* nopen before the lookahead token was read */

	const int *line_len; /* bytes in each line, for clamping ranges */
	int nlines;

	int nerr;
	bool stop;           /* too many errors: the lexer reports end of input */
	bool depth_reported; /* the nesting error is reported once */
	bool oom;
	bool skipping;       /* after a syntax error: see recover_brackets */
	int skip_base;       /* open brackets before the broken statement */

	/* stand-ins returned once the arena is exhausted: parsing stops then
	 * and the tree is thrown away */
	AstNode sink_node;
	AstDecl sink_decl;
	AxisList sink_axes;

	AstNode *free_nodes; /* nodes dropped by the depth rule, for reuse */

	char **itab;         /* interned identifier strings (open addressing) */
	size_t icap, icount;
};

SrcLoc ast_ploc(ParseCtx *p, const DTM_YYLTYPE *l);
void ast_perror(ParseCtx *p, const DTM_YYLTYPE *l, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
AstNode *ast_pnode(ParseCtx *p, AstKind kind, const DTM_YYLTYPE *l);
char *ast_intern(ParseCtx *p, const char *s, size_t n);
int ast_lex(DTM_YYSTYPE *lval, DTM_YYLTYPE *lloc, void *scanner);
}

%code {
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Deep enough for 10,000 nested calls; the depth rule refuses far less, so
 * this only bounds memory for garbage like a megabyte of '('. */
#define YYMAXDEPTH 100000

static int yylex(DTM_YYSTYPE *lval, DTM_YYLTYPE *lloc, ParseCtx *p);
static void yyerror(DTM_YYLTYPE *l, ParseCtx *p, const char *msg);
static void recover_brackets(ParseCtx *p, yysymbol_kind_t tok);

static void names_push(ParseCtx *p, NameList *l, const char *name, const DTM_YYLTYPE *loc);
static void axes_push(ParseCtx *p, AxisList *l, const char *name, const DTM_YYLTYPE *loc);
static AxisList *axes_new(ParseCtx *p);
static void place_add(AstPlacement *pl, const AxisList *a);
static void annot_add(ParseCtx *p, AstAnnot *an, AstPlacement *pl);
static void push(ParseCtx *p, AstList *l, AstNode *n);
static void item(ParseCtx *p, AstNode *n);
static AstNode *binary(ParseCtx *p, int op, AstNode *l, AstNode *r, const DTM_YYLTYPE *loc);
static AstNode *unary(ParseCtx *p, AstKind k, AstNode *e, const DTM_YYLTYPE *loc);
static AstNode *group(ParseCtx *p, AstNode *e, const DTM_YYLTYPE *loc);
static AstNode *with_args(ParseCtx *p, AstNode *n, AstList args);
static AstNode *leaf(ParseCtx *p, AstKind k, const char *name, const DTM_YYLTYPE *loc);
static void set_names(AstNode *n, NameList l);
static AstNode *for_loop(ParseCtx *p, AstNode *n, AstList body);
}

%define api.pure full
%define api.prefix {dtm_yy}
%define api.token.prefix {TK_}
%define parse.error custom
%define parse.lac full
%locations
%param {ParseCtx *p}

%union {
	AstNode *node;
	AstList list;
	char *str;
	NameList names;
	AxisList *axes;
	AstPlacement *place;
	AstAnnot *annot;
	AstDecl *decl;
}

%token <str> IDENT STR
%token <node> NUM
%token MODEL LET MESH INPUT PARAM BLOCK RETURN FOR IN STAGE FORWARD TRAIN
%token INIT CHOOSE PARTIAL OVER TRUE FALSE
%token UNDERSCORE DOTDOT ANNOT_AT AT LPAREN RPAREN LBRACK RBRACK LBRACE RBRACE
%token COMMA COLON SEMI ASSIGN PLUS MINUS STAR SLASH PERCENT

%type <node> expr primary call arg init_opt stmt setting mesh_list stage_opt
%type <list> args arg_list expr_list dims_opt stmts settings
%type <names> targets name_list names_opt over_opt
%type <axes> axes pdim
%type <place> placement pdims
%type <annot> annot annot_opt choose_opts
%type <decl> decl

/* `x @ [..]` binds loosest: it annotates the whole expression to its left. */
%precedence ANNOT_AT
%left PLUS MINUS
%left STAR SLASH PERCENT
%left AT
%precedence UMINUS

%%

file:
	  items
	;

/* items: (item | ';' | error)*  -- an error skips to the next item */
items:
	  %empty
	| items item
	| items SEMI
	| items error
	;

item:
	  MODEL IDENT
		{ AstNode *n = leaf(p, AST_MODEL, $2, &@$); item(p, n); }
	| LET let_list
	| MESH LPAREN mesh_list RPAREN
		{ $3->loc = ast_ploc(p, &@$); item(p, $3); }
	| INPUT decl
		{ AstNode *n = ast_pnode(p, AST_INPUT, &@$); n->decl = $2; item(p, n); }
	| PARAM decl
		{ AstNode *n = ast_pnode(p, AST_PARAM, &@$); n->decl = $2; item(p, n); }
	| BLOCK IDENT LPAREN names_opt RPAREN LBRACE stmts RBRACE
		{
			YYLTYPE hl = @1;
			hl.last_line = @5.last_line;
			hl.last_column = @5.last_column;
			AstNode *n = leaf(p, AST_BLOCK, $2, &hl);
			set_names(n, $4);
			n->body = $7;
			item(p, n);
		}
	| FORWARD LBRACE stmts RBRACE
		{ AstNode *n = ast_pnode(p, AST_FORWARD, &@1); n->body = $3; item(p, n); }
	| TRAIN LBRACE settings RBRACE
		{ AstNode *n = ast_pnode(p, AST_TRAIN, &@1); n->body = $3; item(p, n); }
	;

/* let_list: IDENT '=' expr (',' IDENT '=' expr)*  -- one AST_LET each */
let_list:
	  let_one
	| let_list COMMA let_one
	;

let_one:
	  IDENT ASSIGN expr
		{ AstNode *n = leaf(p, AST_LET, $1, &@$); n->lhs = $3; item(p, n); }
	;

/* mesh_list: IDENT '=' expr (',' IDENT '=' expr)*  -- one AST_MESH holds all */
mesh_list:
	  IDENT ASSIGN expr
		{
			$$ = ast_pnode(p, AST_MESH, &@$);
			NameList l = {0};
			names_push(p, &l, $1, &@1);
			set_names($$, l);
			push(p, &$$->args, $3);
		}
	| mesh_list COMMA IDENT ASSIGN expr
		{
			$$ = $1;
			NameList l = {$$->names, $$->nnames, $$->nnames};
			names_push(p, &l, $3, &@3);
			set_names($$, l);
			push(p, &$$->args, $5);
		}
	;

/* decl: IDENT ':' DTYPE ['[' exprs ']'] ['@' annot] ['init' init] */
decl:
	  IDENT COLON IDENT dims_opt annot_opt init_opt
		{
			AstDecl *d = arena_alloc(p->arena, sizeof *d);
			if (!d) {
				p->oom = true;
				d = &p->sink_decl;
			} else {
				d->name = $1;
				d->name_loc = ast_ploc(p, &@1);
				d->dtype = $3;
				d->dtype_loc = ast_ploc(p, &@3);
				d->dims = $4;
				d->annot = $5;
				d->init = $6;
			}
			$$ = d;
		}
	;

dims_opt:
	  %empty                      { $$ = (AstList){0}; }
	| LBRACK RBRACK               { $$ = (AstList){0}; }
	| LBRACK expr_list RBRACK     { $$ = $2; }
	;

annot_opt:
	  %empty                      { $$ = NULL; }
	| ANNOT_AT annot              { $$ = $2; }
	;

/* init: IDENT | IDENT '(' args ')' */
init_opt:
	  %empty                      { $$ = NULL; }
	| INIT IDENT                  { $$ = leaf(p, AST_IDENT, $2, &@2); }
	| INIT call                   { $$ = $2; }
	;

names_opt:
	  %empty                      { $$ = (NameList){0}; }
	| name_list
	;

name_list:
	  IDENT                       { $$ = (NameList){0}; names_push(p, &$$, $1, &@1); }
	| name_list COMMA IDENT       { $$ = $1; names_push(p, &$$, $3, &@3); }
	;

/* stmts: (stmt | ';' | error)*  -- an error skips to the next statement */
stmts:
	  %empty                      { $$ = (AstList){0}; }
	| stmts stmt                  { $$ = $1; push(p, &$$, $2); }
	| stmts SEMI                  { $$ = $1; }
	| stmts error                 { $$ = $1; }
	;

/* stmt: targets '=' expr
 *     | 'for' IDENT 'in' expr '..' expr ['stage' expr] '{' stmts '}'
 *     | 'return' expr (',' expr)*
 *     | 'param' decl */
stmt:
	  targets ASSIGN expr
		{ $$ = ast_pnode(p, AST_ASSIGN, &@$); set_names($$, $1); $$->lhs = $3; }
	| FOR IDENT IN expr DOTDOT expr stage_opt LBRACE stmts RBRACE
		{
			/* the loop's location is its header */
			YYLTYPE hl = @1;
			hl.last_line = @7.last_line;
			hl.last_column = @7.last_column;
			if (!$7) {
				hl.last_line = @6.last_line;
				hl.last_column = @6.last_column;
			}
			$$ = leaf(p, AST_FOR, $2, &hl);
			$$->lhs = $4;
			$$->rhs = $6;
			$$->stage = $7;
			$$ = for_loop(p, $$, $9);
		}
	| RETURN expr_list
		{ $$ = ast_pnode(p, AST_RETURN, &@$); $$->args = $2; }
	| PARAM decl
		{ $$ = ast_pnode(p, AST_PARAM, &@$); $$->decl = $2; }
	;

stage_opt:
	  %empty                      { $$ = NULL; }
	| STAGE expr                  { $$ = $2; }
	;

targets:
	  IDENT                       { $$ = (NameList){0}; names_push(p, &$$, $1, &@1); }
	| targets COMMA IDENT         { $$ = $1; names_push(p, &$$, $3, &@3); }
	;

/* settings: (IDENT expr ['over' IDENT (',' IDENT)*] | ';' | error)* */
settings:
	  %empty                      { $$ = (AstList){0}; }
	| settings setting            { $$ = $1; push(p, &$$, $2); }
	| settings SEMI               { $$ = $1; }
	| settings error              { $$ = $1; }
	;

setting:
	  IDENT expr over_opt
		{
			$$ = leaf(p, AST_SETTING, $1, &@$);
			push(p, &$$->args, $2);
			set_names($$, $3);
		}
	;

over_opt:
	  %empty                      { $$ = (NameList){0}; }
	| OVER name_list              { $$ = $2; }
	;

/* expr: expr ('+'|'-'|'*'|'/'|'%'|'@') expr | '-' expr | expr '@' annot | primary
 * with the precedence declared above (annotation loosest). */
expr:
	  expr PLUS expr              { $$ = binary(p, '+', $1, $3, &@$); }
	| expr MINUS expr             { $$ = binary(p, '-', $1, $3, &@$); }
	| expr STAR expr              { $$ = binary(p, '*', $1, $3, &@$); }
	| expr SLASH expr             { $$ = binary(p, '/', $1, $3, &@$); }
	| expr PERCENT expr           { $$ = binary(p, '%', $1, $3, &@$); }
	| expr AT expr                { $$ = binary(p, '@', $1, $3, &@$); }
	| MINUS expr %prec UMINUS     { $$ = unary(p, AST_NEG, $2, &@$); }
	| expr ANNOT_AT annot
		{
			$$ = unary(p, AST_ANNOT, $1, &@$);
			if ($$ != $1)
				$$->annot = $3;
		}
	| primary
	;

/* primary: NUM | STR | 'true' | 'false' | IDENT | call | '(' expr ')'
 *        | '(' expr ',' expr (',' expr)* ')' */
primary:
	  NUM
	| STR                         { $$ = leaf(p, AST_STR, $1, &@$); }
	| TRUE                        { $$ = leaf(p, AST_BOOL, NULL, &@$); $$->ival = 1; }
	| FALSE                       { $$ = leaf(p, AST_BOOL, NULL, &@$); $$->ival = 0; }
	| IDENT                       { $$ = leaf(p, AST_IDENT, $1, &@$); }
	| call
	| LPAREN expr RPAREN          { $$ = group(p, $2, &@$); }
	| LPAREN expr COMMA expr_list RPAREN
		{
			AstList l = {0};
			push(p, &l, $2);
			for (int i = 0; i < $4.n; i++)
				push(p, &l, $4.items[i]);
			$$ = with_args(p, ast_pnode(p, AST_TUPLE, &@$), l);
		}
	;

/* call: IDENT '(' [arg (',' arg)*] ')'   where arg: expr | IDENT '=' expr */
call:
	  IDENT LPAREN args RPAREN
		{ $$ = with_args(p, leaf(p, AST_CALL, $1, &@$), $3); }
	;

args:
	  %empty                      { $$ = (AstList){0}; }
	| arg_list
	;

arg_list:
	  arg                         { $$ = (AstList){0}; push(p, &$$, $1); }
	| arg_list COMMA arg          { $$ = $1; push(p, &$$, $3); }
	;

arg:
	  expr
	| IDENT ASSIGN expr
		{
			$$ = unary(p, AST_KWARG, $3, &@$);
			if ($$ != $3)
				$$->name = $1;
		}
	;

expr_list:
	  expr                        { $$ = (AstList){0}; push(p, &$$, $1); }
	| expr_list COMMA expr        { $$ = $1; push(p, &$$, $3); }
	;

/* annot: placement | 'choose' '(' placement (',' placement)* ')' */
annot:
	  placement
		{
			$$ = arena_alloc(p->arena, sizeof *$$);
			if (!$$) {
				p->oom = true;
				YYABORT;
			}
			$$->loc = ast_ploc(p, &@$);
			annot_add(p, $$, $1);
		}
	| CHOOSE LPAREN choose_opts RPAREN
		{ $$ = $3; $$->loc = ast_ploc(p, &@$); $$->is_choose = true; }
	;

choose_opts:
	  placement
		{
			$$ = arena_alloc(p->arena, sizeof *$$);
			if (!$$) {
				p->oom = true;
				YYABORT;
			}
			annot_add(p, $$, $1);
		}
	| choose_opts COMMA placement  { $$ = $1; annot_add(p, $$, $3); }
	;

/* placement: '[' [pdim (',' pdim)*] ']'
 * pdim: '_' | IDENT | '(' IDENT (',' IDENT)* ')' | 'partial' '(' IDENT (',' IDENT)* ')' */
placement:
	  LBRACK RBRACK
		{
			$$ = arena_alloc(p->arena, sizeof *$$);
			if (!$$) {
				p->oom = true;
				YYABORT;
			}
			$$->loc = ast_ploc(p, &@$);
		}
	| LBRACK pdims RBRACK         { $$ = $2; $$->loc = ast_ploc(p, &@$); }
	;

pdims:
	  pdim
		{
			$$ = arena_alloc(p->arena, sizeof *$$);
			if (!$$) {
				p->oom = true;
				YYABORT;
			}
			place_add($$, $1);
		}
	| pdims COMMA pdim            { $$ = $1; place_add($$, $3); }
	;

pdim:
	  UNDERSCORE                  { $$ = axes_new(p); }
	| IDENT                       { $$ = axes_new(p); axes_push(p, $$, $1, &@1); }
	| LPAREN axes RPAREN          { $$ = $2; }
	| PARTIAL LPAREN axes RPAREN  { $$ = $3; $$->partial = true; }
	;

axes:
	  IDENT                       { $$ = axes_new(p); axes_push(p, $$, $1, &@1); }
	| axes COMMA IDENT            { $$ = $1; axes_push(p, $$, $3, &@3); }
	;

%%

/* ---- locations and errors ---- */

SrcLoc ast_ploc(ParseCtx *p, const YYLTYPE *l)
{
	SrcLoc s = {p->src->name, l->first_line, l->first_column, l->last_column};
	if (l->last_line != l->first_line) {
		/* a range over several lines is clamped to the end of its first */
		int len = l->first_line >= 1 && l->first_line <= p->nlines ?
			p->line_len[l->first_line - 1] : 0;
		s.end_col = len + 1;
	}
	if (s.end_col < s.col)
		s.end_col = s.col;
	return s;
}

static void count_error(ParseCtx *p, SrcLoc loc)
{
	if (++p->nerr >= PARSE_MAX_ERRORS && !p->stop) {
		p->stop = true;
		diag_note(p->diag, loc, "too many errors; giving up on this file");
	}
}

void ast_perror(ParseCtx *p, const YYLTYPE *l, const char *fmt, ...)
{
	if (p->stop)
		return;
	SrcLoc loc = ast_ploc(p, l);
	va_list ap;
	va_start(ap, fmt);
	diag_verror(p->diag, loc, fmt, ap);
	va_end(ap);
	count_error(p, loc);
}

static void depth_error(ParseCtx *p, const YYLTYPE *l)
{
	if (p->depth_reported)
		return;
	p->depth_reported = true;
	ast_perror(p, l, "expression nested too deeply (more than %d levels)", AST_MAX_DEPTH);
}

/* Bison calls this only for what parse.error custom does not cover: the
 * parser stack running out, which only absurd nesting can cause. */
static void yyerror(YYLTYPE *l, ParseCtx *p, const char *msg)
{
	if (strcmp(msg, "memory exhausted") == 0)
		depth_error(p, l);
	else
		ast_perror(p, l, "%s", msg);
}

/* How an expected token is named in messages. */
static const char *sym_desc(yysymbol_kind_t s)
{
	switch (s) {
	case YYSYMBOL_YYEOF: return "end of input";
	case YYSYMBOL_IDENT: return "a name";
	case YYSYMBOL_STR: return "a string";
	case YYSYMBOL_NUM: return "a number";
	case YYSYMBOL_MODEL: return "'model'";
	case YYSYMBOL_LET: return "'let'";
	case YYSYMBOL_MESH: return "'mesh'";
	case YYSYMBOL_INPUT: return "'input'";
	case YYSYMBOL_PARAM: return "'param'";
	case YYSYMBOL_BLOCK: return "'block'";
	case YYSYMBOL_RETURN: return "'return'";
	case YYSYMBOL_FOR: return "'for'";
	case YYSYMBOL_IN: return "'in'";
	case YYSYMBOL_STAGE: return "'stage'";
	case YYSYMBOL_FORWARD: return "'forward'";
	case YYSYMBOL_TRAIN: return "'train'";
	case YYSYMBOL_INIT: return "'init'";
	case YYSYMBOL_CHOOSE: return "'choose'";
	case YYSYMBOL_PARTIAL: return "'partial'";
	case YYSYMBOL_OVER: return "'over'";
	case YYSYMBOL_TRUE: return "'true'";
	case YYSYMBOL_FALSE: return "'false'";
	case YYSYMBOL_UNDERSCORE: return "'_'";
	case YYSYMBOL_DOTDOT: return "'..'";
	case YYSYMBOL_ANNOT_AT: return "'@'";
	case YYSYMBOL_AT: return "'@'";
	case YYSYMBOL_LPAREN: return "'('";
	case YYSYMBOL_RPAREN: return "')'";
	case YYSYMBOL_LBRACK: return "'['";
	case YYSYMBOL_RBRACK: return "']'";
	case YYSYMBOL_LBRACE: return "'{'";
	case YYSYMBOL_RBRACE: return "'}'";
	case YYSYMBOL_COMMA: return "','";
	case YYSYMBOL_COLON: return "':'";
	case YYSYMBOL_SEMI: return "';'";
	case YYSYMBOL_ASSIGN: return "'='";
	case YYSYMBOL_PLUS: return "'+'";
	case YYSYMBOL_MINUS: return "'-'";
	case YYSYMBOL_STAR: return "'*'";
	case YYSYMBOL_SLASH: return "'/'";
	case YYSYMBOL_PERCENT: return "'%'";
	default: return NULL;
	}
}

static int closer_sym(int ch)
{
	return ch == '(' ? YYSYMBOL_RPAREN : ch == '[' ? YYSYMBOL_RBRACK : YYSYMBOL_RBRACE;
}

/* Appends the unexpected token's text, quoted, non-printables as \xNN and
 * long tokens cut short. */
static void quote_token(ParseCtx *p, yysymbol_kind_t tok, char *buf, size_t cap)
{
	if (tok == YYSYMBOL_YYEOF) {
		snprintf(buf, cap, "end of input");
		return;
	}
	size_t n = 0;
	buf[n++] = '\'';
	const unsigned char *s = (const unsigned char *)p->src->text + p->tok_off;
	size_t len = p->tok_len;
	for (size_t i = 0; i < len && n + 8 < cap; i++) {
		if (i == 32) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		if (s[i] >= 32 && s[i] < 127)
			buf[n++] = (char)s[i];
		else
			n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", s[i]);
	}
	buf[n++] = '\'';
	buf[n] = 0;
}

/* Reports "unexpected X; expected Y" where Y summarises bison's expected
 * set in the user's terms ("an expression", "a statement"), names the
 * bracket it would close, and points a note at where that bracket opened. */
static int yyreport_syntax_error(const yypcontext_t *ctx, ParseCtx *p)
{
	if (p->stop)
		return 0;
	yysymbol_kind_t exp[YYNTOKENS];
	bool want[YYNTOKENS] = {false};
	int nexp = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
	for (int i = 0; i < nexp; i++)
		if (exp[i] >= 0 && exp[i] < YYNTOKENS)
			want[exp[i]] = true;
	yysymbol_kind_t tok = yypcontext_token(ctx);

	const char *parts[YYNTOKENS + 4];
	int np = 0;
	if (want[YYSYMBOL_MODEL] && want[YYSYMBOL_FORWARD]) {
		parts[np++] = "a top-level item ('model', 'let', 'mesh', 'input', 'param', "
			      "'block', 'forward' or 'train')";
		static const yysymbol_kind_t k[] = {YYSYMBOL_MODEL, YYSYMBOL_LET, YYSYMBOL_MESH,
			YYSYMBOL_INPUT, YYSYMBOL_PARAM, YYSYMBOL_BLOCK, YYSYMBOL_FORWARD, YYSYMBOL_TRAIN};
		for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
			want[k[i]] = false;
	}
	if (want[YYSYMBOL_FOR] && want[YYSYMBOL_RETURN]) {
		parts[np++] = "a statement";
		want[YYSYMBOL_FOR] = want[YYSYMBOL_RETURN] = want[YYSYMBOL_PARAM] = false;
		want[YYSYMBOL_IDENT] = false;
	}
	if (want[YYSYMBOL_IDENT] && want[YYSYMBOL_NUM] && want[YYSYMBOL_MINUS] &&
	    want[YYSYMBOL_LPAREN]) {
		parts[np++] = "an expression";
		want[YYSYMBOL_IDENT] = want[YYSYMBOL_NUM] = want[YYSYMBOL_STR] = false;
		want[YYSYMBOL_TRUE] = want[YYSYMBOL_FALSE] = false;
		want[YYSYMBOL_MINUS] = want[YYSYMBOL_LPAREN] = false;
	}
	if (want[YYSYMBOL_UNDERSCORE] && want[YYSYMBOL_PARTIAL]) {
		parts[np++] = "a mesh axis name, '_', '(axes)' or 'partial(axes)'";
		want[YYSYMBOL_IDENT] = want[YYSYMBOL_UNDERSCORE] = false;
		want[YYSYMBOL_LPAREN] = want[YYSYMBOL_PARTIAL] = false;
	}
	/* after a complete expression every operator could follow; naming them
	 * all hides the ',' or ')' the user most likely forgot */
	bool ops = want[YYSYMBOL_PLUS] && want[YYSYMBOL_STAR];
	if (ops) {
		want[YYSYMBOL_PLUS] = want[YYSYMBOL_MINUS] = want[YYSYMBOL_STAR] = false;
		want[YYSYMBOL_SLASH] = want[YYSYMBOL_PERCENT] = want[YYSYMBOL_AT] = false;
		want[YYSYMBOL_ANNOT_AT] = false;
		/* a call or a keyword argument after a name */
		want[YYSYMBOL_LPAREN] = want[YYSYMBOL_ASSIGN] = false;
	}
	want[YYSYMBOL_ANNOT_AT] = want[YYSYMBOL_ANNOT_AT] && !want[YYSYMBOL_AT];
	bool semi_only = want[YYSYMBOL_SEMI];
	want[YYSYMBOL_SEMI] = false; /* an optional separator: never the fix */

	/* the innermost bracket open before the lookahead */
	const ParseOpen *open = NULL;
	if (p->nopen_before > 0 && p->nopen_before <= PARSE_MAX_OPEN)
		open = &p->open[p->nopen_before - 1];
	int close = open ? closer_sym(open->ch) : -1;
	bool closes = close >= 0 && want[close];
	if (closes)
		want[close] = false;
	if (np > 0 || closes)
		want[YYSYMBOL_YYEOF] = false; /* "or end of input" only adds noise */
	for (int s = 0; s < YYNTOKENS; s++)
		if (want[s] && sym_desc((yysymbol_kind_t)s))
			parts[np++] = sym_desc((yysymbol_kind_t)s);
	if (closes)
		parts[np++] = sym_desc((yysymbol_kind_t)close);
	if (np == 0 && ops)
		parts[np++] = "an operator";
	if (np == 0 && semi_only)
		parts[np++] = "';'";

	char got[160], list[1024];
	quote_token(p, tok, got, sizeof got);
	size_t n = 0;
	list[0] = 0;
	for (int i = 0; i < np && n < sizeof list - 64; i++) {
		const char *sep = i == 0 ? "" : i == np - 1 ? " or " : ", ";
		n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", sep, parts[i]);
	}
	const YYLTYPE *loc = yypcontext_location(ctx);
	if (np == 0)
		ast_perror(p, loc, "unexpected %s", got);
	else if (closes)
		ast_perror(p, loc, "unexpected %s; expected %s to close the %s", got, list,
			   open->what);
	else
		ast_perror(p, loc, "unexpected %s; expected %s", got, list);
	if (closes && !p->stop)
		diag_note(p->diag, ast_ploc(p, &open->loc), "the %s opened here", open->what);

	recover_brackets(p, tok);
	return 0;
}

/* Recovery resumes at a statement, so the brackets opened inside the broken
 * one are forgotten, and the lexer skips what is left of it: the rest of the
 * line, and any braces opened there up to their '}' (so a broken loop header
 * does not turn the loop's body into outer statements).  Skipping stops at
 * a ';' or at a '}' that closes a brace opened before the error.  When the
 * bad token began a line, the line before was the broken one: no skip. */
static void recover_brackets(ParseCtx *p, yysymbol_kind_t tok)
{
	bool opener = tok == YYSYMBOL_LPAREN || tok == YYSYMBOL_LBRACK || tok == YYSYMBOL_LBRACE;
	int base = tok == YYSYMBOL_RBRACE ? p->nopen : p->nopen_before;
	if (base > p->nopen && !opener)
		base = p->nopen;
	if (base > PARSE_MAX_OPEN)
		base = PARSE_MAX_OPEN;
	while (base > 0 && p->open[base - 1].ch != '{')
		base--;
	if (opener && p->nopen_before < PARSE_MAX_OPEN) {
		/* the bad token's own bracket opens the region to skip */
		p->open[base] = p->open[p->nopen_before];
		p->nopen = base + 1;
	} else {
		p->nopen = base;
	}
	p->skip_base = base;
	p->skipping = tok != YYSYMBOL_YYEOF && tok != YYSYMBOL_RBRACE && tok != YYSYMBOL_SEMI &&
		      (!p->tok_first || opener);
}

/* Whether the token just read is still part of what recovery skips. */
static bool skipped(ParseCtx *p, int t)
{
	if (t == TK_YYEOF)
		return false;
	if (t == TK_RBRACE && p->nopen < p->skip_base)
		return false;
	int top = p->nopen < PARSE_MAX_OPEN ? p->nopen : PARSE_MAX_OPEN;
	for (int i = p->skip_base; i < top; i++)
		if (p->open[i].ch == '{')
			return true;
	if (p->tok_first)
		return false;
	return !(t == TK_SEMI && p->nopen == p->skip_base);
}

static int yylex(YYSTYPE *lval, YYLTYPE *lloc, ParseCtx *p)
{
	for (;;) {
		if (p->stop || p->oom)
			return TK_YYEOF;
		p->nopen_before = p->nopen;
		int t = ast_lex(lval, lloc, p->scanner);
		if (p->stop || p->oom)
			return TK_YYEOF;
		if (p->skipping && skipped(p, t))
			continue;
		p->skipping = false;
		return t;
	}
}

/* ---- building nodes ---- */

AstNode *ast_pnode(ParseCtx *p, AstKind kind, const YYLTYPE *l)
{
	AstNode *n = p->free_nodes;
	if (n) {
		p->free_nodes = n->lhs;
		memset(n, 0, sizeof *n);
		n->kind = kind;
		n->loc = ast_ploc(p, l);
	} else {
		n = ast_new(p->arena, kind, ast_ploc(p, l));
	}
	if (!n) {
		/* the arena's limit: stop parsing; the result is discarded, so a
		 * shared placeholder keeps the actions simple */
		if (!p->oom)
			ast_perror(p, l, "out of memory while parsing");
		p->oom = true;
		n = &p->sink_node;
		memset(n, 0, sizeof *n);
	}
	n->depth = 1;
	return n;
}

/* Returns a dropped expression's nodes to the free list.  The tree is a
 * tree (nothing shared) and at most AST_MAX_DEPTH deep, so the recursion is
 * bounded. */
static void recycle(ParseCtx *p, AstNode *n)
{
	if (!n || p->oom)
		return;
	recycle(p, n->lhs);
	recycle(p, n->rhs);
	for (int i = 0; i < n->args.n; i++)
		recycle(p, n->args.items[i]);
	n->lhs = p->free_nodes;
	p->free_nodes = n;
}

static AstNode *leaf(ParseCtx *p, AstKind k, const char *name, const YYLTYPE *loc)
{
	AstNode *n = ast_pnode(p, k, loc);
	n->name = name;
	return n;
}

static AstNode *binary(ParseCtx *p, int op, AstNode *l, AstNode *r, const YYLTYPE *loc)
{
	int d = 1 + (l->depth > r->depth ? l->depth : r->depth);
	if (d > AST_MAX_DEPTH) {
		depth_error(p, loc);
		if (l->depth >= r->depth) {
			recycle(p, r);
			return l;
		}
		recycle(p, l);
		return r;
	}
	AstNode *n = ast_pnode(p, AST_BINARY, loc);
	n->op = op;
	n->lhs = l;
	n->rhs = r;
	n->depth = d;
	return n;
}

/* A node with one child in lhs (NEG, ANNOT, KWARG); the child itself when
 * that would nest too deeply. */
static AstNode *unary(ParseCtx *p, AstKind k, AstNode *e, const YYLTYPE *loc)
{
	if (e->depth + 1 > AST_MAX_DEPTH) {
		depth_error(p, loc);
		return e;
	}
	AstNode *n = ast_pnode(p, k, loc);
	n->lhs = e;
	n->depth = e->depth + 1;
	return n;
}

/* `(e)` builds no node but counts as a level, so that 10,000 parentheses
 * are refused like any other deep nesting. */
static AstNode *group(ParseCtx *p, AstNode *e, const YYLTYPE *loc)
{
	if (e->depth + 1 > AST_MAX_DEPTH)
		depth_error(p, loc);
	else
		e->depth++;
	return e;
}

/* Gives a call or tuple its arguments; past the depth limit, the deepest
 * argument stands in for the whole. */
static AstNode *with_args(ParseCtx *p, AstNode *n, AstList args)
{
	int d = 0, deepest = -1;
	for (int i = 0; i < args.n; i++)
		if (args.items[i]->depth > d) {
			d = args.items[i]->depth;
			deepest = i;
		}
	if (d + 1 > AST_MAX_DEPTH) {
		YYLTYPE l = {n->loc.line, n->loc.col, n->loc.line, n->loc.end_col};
		depth_error(p, &l);
		AstNode *keep = args.items[deepest];
		for (int i = 0; i < args.n; i++)
			if (i != deepest)
				recycle(p, args.items[i]);
		recycle(p, n);
		return keep;
	}
	n->args = args;
	n->depth = d + 1;
	return n;
}

/* Loops nest at most AST_MAX_DEPTH deep; the depth of a loop counts loops
 * only (expressions inside have their own limit). */
static AstNode *for_loop(ParseCtx *p, AstNode *n, AstList body)
{
	int d = 0;
	for (int i = 0; i < body.n; i++)
		if (body.items[i]->kind == AST_FOR && body.items[i]->depth > d)
			d = body.items[i]->depth;
	if (d + 1 > AST_MAX_DEPTH) {
		if (!p->depth_reported) {
			p->depth_reported = true;
			YYLTYPE l = {n->loc.line, n->loc.col, n->loc.line, n->loc.end_col};
			ast_perror(p, &l, "'for' loops nested too deeply (more than %d levels)",
				   AST_MAX_DEPTH);
		}
		return n; /* without its body */
	}
	n->body = body;
	n->depth = d + 1;
	return n;
}

static void push(ParseCtx *p, AstList *l, AstNode *n)
{
	int before = l->n;
	ast_list_push(p->arena, l, n);
	if (l->n == before && !p->oom) {
		p->oom = true;
		diag_error(p->diag, n->loc, "out of memory while parsing");
		p->nerr++;
	}
}

static void item(ParseCtx *p, AstNode *n)
{
	push(p, &p->file->items, n);
}

static void names_push(ParseCtx *p, NameList *l, const char *name, const YYLTYPE *loc)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 4;
		AstName *v = cap > l->cap ? arena_alloc(p->arena, (size_t)cap * sizeof *v) : NULL;
		if (!v) {
			p->oom = true;
			return;
		}
		if (l->n)
			memcpy(v, l->v, (size_t)l->n * sizeof *v);
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].name = name;
	l->v[l->n].loc = ast_ploc(p, loc);
	l->n++;
}

static void set_names(AstNode *n, NameList l)
{
	n->names = l.v;
	n->nnames = l.n;
}

static AxisList *axes_new(ParseCtx *p)
{
	AxisList *a = arena_alloc(p->arena, sizeof *a);
	if (!a) {
		p->oom = true;
		a = &p->sink_axes;
		memset(a, 0, sizeof *a);
	}
	return a;
}

static void axes_push(ParseCtx *p, AxisList *l, const char *name, const YYLTYPE *loc)
{
	if (l->n >= 8) {
		l->over = true;
		return;
	}
	l->ax[l->n].name = name;
	l->ax[l->n].loc = ast_ploc(p, loc);
	l->n++;
}

/* Adds one entry to a placement; overflow only sets too_many (lower says
 * what the limits are), it never writes past the arrays. */
static void place_add(AstPlacement *pl, const AxisList *a)
{
	if (a->over)
		pl->too_many = true;
	if (a->partial) {
		for (int i = 0; i < a->n; i++) {
			if (pl->npartial >= 8) {
				pl->too_many = true;
				break;
			}
			pl->partial[pl->npartial++] = a->ax[i];
		}
		return;
	}
	if (pl->ndims >= AST_MAX_PDIMS) {
		pl->too_many = true;
		return;
	}
	pl->naxes[pl->ndims] = a->n;
	for (int i = 0; i < a->n; i++)
		pl->axes[pl->ndims][i] = a->ax[i];
	pl->ndims++;
}

/* opts grows by doubling: its capacity is the next power of two. */
static void annot_add(ParseCtx *p, AstAnnot *an, AstPlacement *pl)
{
	int n = an->nopts;
	if ((n & (n - 1)) == 0) {
		int cap = n ? 2 * n : 1;
		AstPlacement **v = n < (1 << 28) ? arena_alloc(p->arena, (size_t)cap * sizeof *v) : NULL;
		if (!v) {
			p->oom = true;
			return;
		}
		if (n)
			memcpy(v, an->opts, (size_t)n * sizeof *v);
		an->opts = v;
	}
	an->opts[an->nopts++] = pl;
}
