/* test_parse.c - the front end's syntax layer: lexer.l, parser.y, ast.c.
 *
 * Parses the example models, checks the tree through ast_dump and a few
 * fields and locations, the exact text of representative syntax errors,
 * and that hostile inputs (random bytes, deep nesting, huge lines) end in
 * errors rather than crashes, hangs or unbounded memory.
 */
#include "frontend/ast.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

/* One parse of a string, its tree dump and its diagnostics. */
typedef struct Parsed {
	Arena arena;
	AstFile file;
	SrcFile src;
	bool ok;
	int nerr;
	char *diag; /* everything printed to the Diag */
	char *dump;
} Parsed;

static void parse_buf(Parsed *r, const char *text, size_t len)
{
	memset(r, 0, sizeof *r);
	arena_init(&r->arena);
	r->src.name = "t.dtm";
	r->src.text = text;
	r->src.len = len;
	size_t dlen = 0, tlen = 0;
	FILE *df = open_memstream(&r->diag, &dlen);
	Diag d;
	diag_init(&d, df);
	r->ok = ast_parse(&r->arena, &d, &r->src, &r->file);
	r->nerr = d.nerr;
	fclose(df);
	FILE *tf = open_memstream(&r->dump, &tlen);
	ast_dump(tf, &r->file);
	fclose(tf);
}

static void parse_str(Parsed *r, const char *text)
{
	parse_buf(r, text, strlen(text));
}

static void parsed_free(Parsed *r)
{
	free(r->diag);
	free(r->dump);
	arena_free(&r->arena);
}

static bool parse_file(Parsed *r, const char *path)
{
	memset(r, 0, sizeof *r);
	arena_init(&r->arena);
	Diag d;
	diag_init(&d, stderr);
	if (!src_read_file(&r->arena, &d, path, &r->src))
		return false;
	r->ok = ast_parse(&r->arena, &d, &r->src, &r->file);
	r->nerr = d.nerr;
	return true;
}

static int count_kind(const AstList *l, AstKind k)
{
	int n = 0;
	for (int i = 0; i < l->n; i++)
		n += l->items[i]->kind == k;
	return n;
}

static const AstNode *find_item(const AstFile *f, AstKind k, const char *name)
{
	for (int i = 0; i < f->items.n; i++) {
		const AstNode *n = f->items.items[i];
		if (n->kind != k)
			continue;
		const char *nm = k == AST_INPUT || k == AST_PARAM ? n->decl->name : n->name;
		if (!name || (nm && strcmp(nm, name) == 0))
			return n;
	}
	return NULL;
}

/* The dump of `let x = EXPR`, i.e. the expression's S-expression. */
static void check_expr(const char *expr, const char *want, int line)
{
	char text[512], exp[600];
	snprintf(text, sizeof text, "let x = %s\n", expr);
	snprintf(exp, sizeof exp, "(let x %s)\n", want);
	Parsed r;
	parse_str(&r, text);
	check_count++;
	if (!r.ok || strcmp(r.dump, exp) != 0) {
		check_failures++;
		fprintf(stderr, "test_parse.c:%d: `%s` dumps as %s(want %s)%s\n", line, expr,
		        r.dump, exp, r.diag);
	}
	parsed_free(&r);
}
#define CHECK_EXPR(e, w) check_expr(e, w, __LINE__)

/* The first line of the diagnostics for a bad input. */
static void check_error(const char *text, const char *want, int line)
{
	Parsed r;
	parse_str(&r, text);
	char *nl = strchr(r.diag, '\n');
	if (nl)
		*nl = 0;
	check_count++;
	if (r.ok || strcmp(r.diag, want) != 0) {
		check_failures++;
		fprintf(stderr, "test_parse.c:%d: error is\n  %s\nwant\n  %s\n", line, r.diag,
		        want);
	}
	parsed_free(&r);
}
#define CHECK_ERROR(t, w) check_error(t, w, __LINE__)

static void test_gpt(void)
{
	Parsed r;
	CHECK(parse_file(&r, "models/gpt.dtm"));
	CHECK(r.ok);
	CHECK_EQ_INT(r.nerr, 0);
	const AstList *it = &r.file.items;
	CHECK_EQ_INT(it->n, 18);
	CHECK_EQ_INT(count_kind(it, AST_MODEL), 1);
	CHECK_EQ_INT(count_kind(it, AST_LET), 7);
	CHECK_EQ_INT(count_kind(it, AST_MESH), 1);
	CHECK_EQ_INT(count_kind(it, AST_INPUT), 2);
	CHECK_EQ_INT(count_kind(it, AST_PARAM), 4);
	CHECK_EQ_INT(count_kind(it, AST_BLOCK), 1);
	CHECK_EQ_INT(count_kind(it, AST_FORWARD), 1);
	CHECK_EQ_INT(count_kind(it, AST_TRAIN), 1);

	const AstNode *m = find_item(&r.file, AST_MODEL, NULL);
	CHECK_EQ_STR(m->name, "gpt");
	CHECK_EQ_STR(m->loc.file, "models/gpt.dtm");
	CHECK_EQ_INT(m->loc.line, 11);
	CHECK_EQ_INT(m->loc.col, 1);
	CHECK_EQ_INT(m->loc.end_col, 10);

	const AstNode *mesh = find_item(&r.file, AST_MESH, NULL);
	CHECK_EQ_INT(mesh->nnames, 3);
	CHECK_EQ_INT(mesh->args.n, 3);
	CHECK_EQ_STR(mesh->names[1].name, "dp");
	CHECK_EQ_INT(mesh->names[1].loc.line, 16);
	CHECK_EQ_INT(mesh->names[1].loc.col, 15);
	CHECK_EQ_INT(mesh->names[1].loc.end_col, 17);
	CHECK_EQ_INT(mesh->args.items[2]->ival, 2);

	/* input tokens  : i32[batch, ctx] @ [dp, _] */
	const AstNode *in = find_item(&r.file, AST_INPUT, "tokens");
	CHECK(in != NULL);
	if (in) {
		const AstDecl *d = in->decl;
		CHECK_EQ_INT(d->name_loc.line, 18);
		CHECK_EQ_INT(d->name_loc.col, 7);
		CHECK_EQ_INT(d->name_loc.end_col, 13);
		CHECK_EQ_STR(d->dtype, "i32");
		CHECK_EQ_INT(d->dtype_loc.col, 17);
		CHECK_EQ_INT(d->dims.n, 2);
		CHECK_EQ_INT(d->dims.items[1]->loc.col, 28);
		CHECK_EQ_INT(d->dims.items[1]->loc.end_col, 31);
		CHECK(d->annot && !d->annot->is_choose && d->annot->nopts == 1);
		const AstPlacement *pl = d->annot->opts[0];
		CHECK_EQ_INT(pl->ndims, 2);
		CHECK_EQ_INT(pl->naxes[0], 1);
		CHECK_EQ_STR(pl->axes[0][0].name, "dp");
		CHECK_EQ_INT(pl->naxes[1], 0);
		CHECK_EQ_INT(pl->loc.col, 35);
		CHECK_EQ_INT(pl->loc.end_col, 42);
		CHECK(d->init == NULL);
		CHECK_EQ_INT(in->loc.col, 1);
		CHECK_EQ_INT(in->loc.end_col, 42);
	}
	const AstNode *wte = find_item(&r.file, AST_PARAM, "wte");
	CHECK(wte && wte->decl->init && wte->decl->init->kind == AST_CALL);
	if (wte) {
		CHECK_EQ_STR(wte->decl->init->name, "normal");
		CHECK_NEAR(wte->decl->init->args.items[1]->num, 0.02, 1e-12);
		CHECK(!wte->decl->init->args.items[1]->is_int);
	}

	const AstNode *blk = find_item(&r.file, AST_BLOCK, "layer");
	CHECK(blk != NULL);
	if (blk) {
		CHECK_EQ_INT(blk->nnames, 1);
		CHECK_EQ_STR(blk->names[0].name, "x");
		CHECK_EQ_INT(blk->body.n, 24);
		CHECK_EQ_INT(count_kind(&blk->body, AST_PARAM), 16);
		CHECK_EQ_INT(count_kind(&blk->body, AST_ASSIGN), 7);
		CHECK_EQ_INT(blk->body.items[23]->kind, AST_RETURN);
		/* line 48: x = x + attention(...) @ wo + bo: the '+'s span the line */
		const AstNode *a = blk->body.items[20];
		CHECK_EQ_INT(a->kind, AST_ASSIGN);
		CHECK_EQ_INT(a->loc.line, 48);
		CHECK_EQ_INT(a->loc.col, 3);
		CHECK_EQ_INT(a->lhs->loc.col, 7);
		CHECK_EQ_INT(a->lhs->loc.end_col, 69);
		CHECK_EQ_INT(a->lhs->op, '+');
		CHECK_EQ_INT(a->lhs->depth, 6);
	}

	const AstNode *fw = find_item(&r.file, AST_FORWARD, NULL);
	CHECK(fw && fw->body.n == 4);
	if (fw && fw->body.n == 4) {
		const AstNode *loop = fw->body.items[1];
		CHECK_EQ_INT(loop->kind, AST_FOR);
		CHECK_EQ_STR(loop->name, "i");
		CHECK_EQ_INT(loop->lhs->ival, 0);
		CHECK_EQ_STR(loop->rhs->name, "layers");
		CHECK(loop->stage && loop->stage->op == '/');
		CHECK_EQ_INT(loop->body.n, 1);
		CHECK_EQ_INT(loop->loc.line, 56);
		CHECK_EQ_INT(loop->loc.col, 3);
		CHECK_EQ_INT(loop->loc.end_col, 45);
	}

	const AstNode *tr = find_item(&r.file, AST_TRAIN, NULL);
	CHECK(tr && tr->body.n == 9);
	if (tr && tr->body.n == 8) {
		const AstNode *z = tr->body.items[2];
		CHECK_EQ_STR(z->name, "zero");
		CHECK_EQ_INT(z->args.n, 1);
		CHECK_EQ_INT(z->args.items[0]->ival, 0);
		CHECK_EQ_INT(z->nnames, 1);
		CHECK_EQ_STR(z->names[0].name, "dp");
		CHECK_EQ_INT(z->names[0].loc.line, 66);
		CHECK_EQ_INT(z->names[0].loc.col, 15);
		const AstNode *s = tr->body.items[4];
		CHECK_EQ_STR(s->name, "schedule");
		CHECK_EQ_INT(s->args.items[0]->kind, AST_IDENT);
		CHECK_EQ_STR(s->args.items[0]->name, "1f1b");
		const AstNode *opt = tr->body.items[0]->args.items[0];
		CHECK_EQ_INT(opt->kind, AST_CALL);
		CHECK_EQ_INT(opt->args.items[1]->kind, AST_KWARG);
		CHECK_EQ_STR(opt->args.items[1]->name, "betas");
		CHECK_EQ_INT(opt->args.items[1]->lhs->kind, AST_TUPLE);
	}
	parsed_free(&r);
}

static void test_mlp(void)
{
	Parsed r;
	CHECK(parse_file(&r, "models/mlp.dtm"));
	CHECK(r.ok);
	const AstList *it = &r.file.items;
	CHECK_EQ_INT(it->n, 14);
	CHECK_EQ_INT(count_kind(it, AST_LET), 4);
	CHECK_EQ_INT(count_kind(it, AST_PARAM), 4);
	const AstNode *fw = find_item(&r.file, AST_FORWARD, NULL);
	CHECK(fw && fw->body.n == 2);
	if (fw && fw->body.n == 2) {
		const AstNode *h = fw->body.items[0]->lhs;
		CHECK_EQ_INT(h->kind, AST_ANNOT);
		CHECK_EQ_INT(h->lhs->kind, AST_CALL);
		CHECK_EQ_INT(h->annot->opts[0]->ndims, 2);
	}
	parsed_free(&r);
}

static void test_tokens_and_exprs(void)
{
	CHECK_EXPR("1f1b", "1f1b");
	CHECK_EXPR("3e-4", "0.0003");
	CHECK_EXPR("1e5", "100000.0");
	CHECK_EXPR("2.5 * .5", "(* 2.5 0.5)");
	CHECK_EXPR("9223372036854775807", "9223372036854775807");
	CHECK_EXPR("\"run/ckpt\"", "\"run/ckpt\"");
	CHECK_EXPR("true - false", "(- true false)");
	CHECK_EXPR("a + b * c - d % e / f", "(- (+ a (* b c)) (/ (% d e) f))");
	CHECK_EXPR("a * b @ c @ d", "(* a (@ (@ b c) d))");
	CHECK_EXPR("-a @ b", "(@ (neg a) b)");
	CHECK_EXPR("(a + b) * c", "(* (+ a b) c)");
	CHECK_EXPR("f(a, k = (1, 2), g())", "(call f a (kw k (tuple 1 2)) (call g))");
	/* the annotation binds loosest: it annotates the whole left side */
	CHECK_EXPR("a + b @ [dp]", "(annot (+ a b) [dp])");
	CHECK_EXPR("x @ w @ [dp, _, tp]", "(annot (@ x w) [dp _ tp])");
	CHECK_EXPR("x @ # comment\n  [dp]", "(annot x [dp])");
	CHECK_EXPR("(a @ [dp]) + b", "(+ (annot a [dp]) b)");
	CHECK_EXPR("x @ choose([_, tp], [tp, _])", "(annot x (choose [_ tp] [tp _]))");
	CHECK_EXPR("x @ [(dp, tp), _, partial(tp, ep)]", "(annot x [(dp tp) _ partial(tp ep)])");
	CHECK_EXPR("x @ []", "(annot x [])");

	Parsed r;
	parse_str(&r, "forward {\n  for i in 0 .. 4 { a, b, c = split(x, 3) }\n  return a, b\n}\n");
	CHECK(r.ok);
	CHECK_EQ_STR(r.dump, "(forward\n  (for i 0 4\n    (= (a b c) (call split x 3)))\n"
	                     "  (return a b))\n");
	const AstNode *loop = r.file.items.items[0]->body.items[0];
	const AstNode *as = loop->body.items[0];
	CHECK_EQ_INT(as->nnames, 3);
	CHECK_EQ_INT(as->names[2].loc.line, 2);
	CHECK_EQ_INT(as->names[2].loc.col, 27);
	CHECK_EQ_INT(loop->rhs->loc.col, 17);
	parsed_free(&r);

	/* 0..4 without spaces is still 0 .. 4, and ';' separates optionally */
	parse_str(&r, "forward { for j in 0..4 stage j { y = 1; z = 2 } ; }");
	CHECK(r.ok);
	CHECK_EQ_STR(r.dump, "(forward\n  (for j 0 4 stage j\n    (= (y) 1)\n    (= (z) 2)))\n");
	parsed_free(&r);

	parse_str(&r, "model m; let a = 1, b = a * 2\nmesh (dp = 4)\n"
	              "param s : f32 init zeros\ninput t : bf16[] @ [dp]\n"
	              "train { checkpoint \"ck\" over dp, tp\n precision bf16 }\n");
	CHECK(r.ok);
	CHECK_EQ_STR(r.dump, "(model m)\n(let a 1)\n(let b (* a 2))\n(mesh (dp 4))\n"
	                     "(param s f32 [] init zeros)\n(input t bf16 [] @[dp])\n"
	                     "(train\n  (setting checkpoint \"ck\" over (dp tp))\n"
	                     "  (setting precision bf16))\n");
	parsed_free(&r);

	/* overflowing the placement arrays is flagged, never written past */
	parse_str(&r, "input x : f32[a] @ [a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r]\n"
	              "input y : f32[a] @ [(a,b,c,d,e,f,g,h,i), partial(a,b,c,d,e,f,g,h,i)]\n"
	              "input z : f32[a] @ [(a,b,c,d,e,f,g,h)]\n");
	CHECK(r.ok);
	CHECK(r.file.items.n == 3);
	if (r.file.items.n == 3) {
		const AstPlacement *p0 = r.file.items.items[0]->decl->annot->opts[0];
		const AstPlacement *p1 = r.file.items.items[1]->decl->annot->opts[0];
		const AstPlacement *p2 = r.file.items.items[2]->decl->annot->opts[0];
		CHECK(p0->too_many && p0->ndims == AST_MAX_PDIMS);
		CHECK(p1->too_many && p1->naxes[0] == 8 && p1->npartial == 8);
		CHECK(!p2->too_many && p2->naxes[0] == 8);
	}
	parsed_free(&r);
}

static void test_errors(void)
{
	CHECK_ERROR(
	        "model m\ninput x : f32[b] @ [dp tp]\n",
	        "t.dtm:2:24: error: unexpected 'tp'; expected ',' or ']' to close the placement");
	CHECK_ERROR("forward {\n  x = a +\n}\n",
	            "t.dtm:3:1: error: unexpected '}'; expected an expression");
	CHECK_ERROR("param w f32[d]\n", "t.dtm:1:9: error: unexpected 'f32'; expected ':'");
	CHECK_ERROR("let a = 1 \x01 + 2\n", "t.dtm:1:11: error: invalid character '\\x01'");
	CHECK_ERROR("let a = 1 \xc3\xa9\n", "t.dtm:1:11: error: invalid character '\\xc3\\xa9'");
	CHECK_ERROR("let s = \"abc\n", "t.dtm:1:9: error: unterminated string: expected '\"' "
	                               "before the end of the line");
	CHECK_ERROR("let n = 99999999999999999999\n",
	            "t.dtm:1:9: error: integer '99999999999999999999' does not fit in 64 bits");
	CHECK_ERROR("input x : f32[b] @ [dp, 3]\n",
	            "t.dtm:1:25: error: unexpected '3'; expected a mesh axis name, '_', "
	            "'(axes)' or 'partial(axes)'");
	CHECK_ERROR("block f(x) {\n  return x\n\nforward { }\n",
	            "t.dtm:4:1: error: unexpected 'forward'; expected a statement, ',' or '}' "
	            "to close the block");
	CHECK_ERROR("forward { x = 1 } }",
	            "t.dtm:1:19: error: unexpected '}'; expected a top-level item ('model', "
	            "'let', 'mesh', 'input', 'param', 'block', 'forward' or 'train')");
	CHECK_ERROR("let x = (1, 2", "t.dtm:1:14: error: unexpected end of input; expected "
	                             "',' or ')' to close the parenthesis");

	/* the note points at the unclosed bracket */
	Parsed r;
	parse_str(&r, "forward {\n  h = f(x, y\n  z = 2\n}\n");
	CHECK(strstr(r.diag, "t.dtm:3:3: error: unexpected 'z'; expected ',' or ')' to "
	                     "close the argument list\n") != NULL);
	CHECK(strstr(r.diag, "t.dtm:2:8: note: the argument list opened here\n") != NULL);
	/* recovery: `z = 2` on the next line is still parsed */
	CHECK_EQ_STR(r.dump, "(forward\n  (= (z) 2))\n");
	parsed_free(&r);

	/* several errors in one run, one per broken statement */
	parse_str(&r, "model m\nforward {\n  h = f(x, y\n  z = 2\n  w = g(x]\n  for i in 0 .. { "
	              "x = 1 }\n  ok = 1\n}\ntrain {\n  optimizer adamw(lr = )\n  steps 3\n}\n"
	              "param w f32\nlet a = 1 \x01 + $ 2\nlet b = 2\n");
	CHECK_EQ_INT(r.nerr, 7);
	CHECK_EQ_STR(r.dump, "(model m)\n(forward\n  (= (z) 2)\n  (= (ok) 1))\n"
	                     "(train\n  (setting steps 3))\n(let a (+ 1 2))\n(let b 2)\n");
	parsed_free(&r);

	/* errors are bounded: a long run of bad lines stops after ~50 */
	size_t n = 0;
	char *many = malloc(20000 * 10 + 1);
	for (int i = 0; i < 20000; i++)
		n += (size_t)sprintf(many + n, "let a = )\n");
	parse_buf(&r, many, n);
	CHECK(!r.ok);
	CHECK(r.nerr >= 20 && r.nerr <= 60);
	parsed_free(&r);
	free(many);
}

/* Hostile inputs: each ends in errors (except the empty file), quickly and
 * without crashing; the depth rule refuses deep nesting with one error. */
static void check_hostile(const char *what, char *text, size_t len, int want_errors)
{
	Parsed r;
	parse_buf(&r, text, len);
	check_count++;
	if ((want_errors && (r.ok || r.nerr < 1)) || (!want_errors && !r.ok)) {
		check_failures++;
		fprintf(stderr, "test_parse.c: hostile input '%s': ok=%d nerr=%d\n", what, r.ok,
		        r.nerr);
	}
	parsed_free(&r);
	free(text);
}

static char *repeat(const char *pre, const char *unit, int times, const char *mid,
                    const char *unit2, int times2, size_t *len)
{
	size_t lp = strlen(pre), lu = strlen(unit), lm = strlen(mid), lu2 = strlen(unit2);
	char *s = malloc(lp + lu * (size_t)times + lm + lu2 * (size_t)times2 + 1);
	size_t n = 0;
	memcpy(s, pre, lp);
	n += lp;
	for (int i = 0; i < times; i++, n += lu)
		memcpy(s + n, unit, lu);
	memcpy(s + n, mid, lm);
	n += lm;
	for (int i = 0; i < times2; i++, n += lu2)
		memcpy(s + n, unit2, lu2);
	s[n] = 0;
	*len = n;
	return s;
}

static void test_hostile(void)
{
	size_t len;
	check_hostile("empty", calloc(1, 1), 0, 0);

	char *rnd = malloc(1 << 20);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 1 << 20; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rnd[i] = (char)(x >> 24);
	}
	check_hostile("1 MB of random bytes", rnd, 1 << 20, 1);

	char *s = repeat("let x = a", "+a", 500000, "\n", "", 0, &len);
	check_hostile("a+a+a... 500k terms", s, len, 1);
	s = repeat("let x = ", "(", 10000, "a", ")", 10000, &len);
	check_hostile("10,000 parentheses", s, len, 1);
	s = repeat("let x = ", "-", 10000, "a", "", 0, &len);
	check_hostile("10,000 unary minuses", s, len, 1);
	s = repeat("let x = ", "f(", 10000, "a", ")", 10000, &len);
	check_hostile("10,000 nested calls", s, len, 1);
	s = repeat("let x = ", "(", 1 << 20, "", "", 0, &len);
	check_hostile("1 MB of '('", s, len, 1);
	s = repeat("forward {\n", "for i in 0 .. 2 {\n", 10000, "x = 1\n", "}\n", 10001, &len);
	check_hostile("10,000 nested loops", s, len, 1);
	s = repeat("", "}", 1 << 20, "", "", 0, &len);
	check_hostile("1 MB of '}'", s, len, 1);
	s = repeat("let x = a", "+(a", 100000, "", ")", 100000, &len);
	check_hostile("right-nested a+(a+(...", s, len, 1);

	/* the depth limit itself: 511 parentheses around a leaf are fine */
	s = repeat("let x = ", "(", AST_MAX_DEPTH - 1, "a", ")", AST_MAX_DEPTH - 1, &len);
	check_hostile("511 parentheses", s, len, 0);

	/* one error for the whole chain, not one per term */
	Parsed r;
	s = repeat("let x = a", "+a", 5000, "\n", "", 0, &len);
	parse_buf(&r, s, len);
	CHECK_EQ_INT(r.nerr, 1);
	CHECK(strstr(r.diag, "t.dtm:1:9: error: expression nested too deeply (more than 512 "
	                     "levels)\n") != NULL);
	CHECK(r.file.items.n == 1 && r.file.items.items[0]->lhs->depth <= AST_MAX_DEPTH);
	parsed_free(&r);
	free(s);
}

int main(void)
{
	test_gpt();
	test_mlp();
	test_tokens_and_exprs();
	test_errors();
	test_hostile();
	return check_report();
}
