/* parse.c - reads the textual IR that print.c writes.
 *
 * A line-oriented recursive-descent parser over a small lexer; no global
 * state, every loop consumes input, so garbage ends in a diagnostic, never
 * a crash or a hang (it is fuzzed).  The first syntax error stops the
 * parse (later lines would only cascade); each parsed node is then
 * type-checked with ir_infer so a hand-edited IR whose declared type
 * disagrees with its operands is reported at the line that says it.
 *
 *   file    := { line NEWLINE }
 *   line    := 'module' (IDENT | STRING)
 *            | 'mesh' '(' [ IDENT '=' INT { ',' IDENT '=' INT } ] ')'
 *            | 'train' key '=' value { ',' key '=' value }
 *            | 'after' IDENT                  (the last pass that ran)
 *            | node
 *            | 'loss' '%' INT
 *            | 'choose' INT 'node' '%' INT 'options' place { '|' place }
 *              'selected' INT [ loc ]
 *   node    := '%' INT '=' OP [ operand { ',' operand } ] [ '{' attrs '}' ]
 *              [ STRING ] ':' type '@' place [ 'of' shape ] [ 'from' origin ]
 *              [ 'role' IDENT ]
 *              [ 'stage' INT ] [ 'mb' INT ] [ 'block' INT ]
 *              [ 'phase' ('forward'|'backward'|'optimizer') ] [ loc ]
 *   origin  := '%' INT | STRING ':' INT ':' INT '-' INT
 *   type    := DTYPE shape
 *   shape   := '[' [ INT { ',' INT } ] ']'
 *   place   := '?' | '[' [ pdim { ',' pdim } ] ']' [ 'partial' '(' axes [',' RED] ')' ]
 *   pdim    := '_' | IDENT | '(' IDENT { ',' IDENT } ')'
 *   loc     := 'loc' STRING ':' INT ':' INT '-' INT
 *   '#' starts a comment that runs to the end of the line.
 */
#include "ir/irtext.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef enum TokKind { T_EOF, T_NL, T_IDENT, T_INT, T_NUM, T_STR, T_PUNCT, T_BAD } TokKind;

typedef struct Tok {
	TokKind kind;
	const char *p; /* start in the source */
	size_t len;
	int line, col;
	char c; /* T_PUNCT: the character */
} Tok;

typedef struct Parser {
	const SrcFile *src;
	Diag *d;
	Arena *a;
	IrModule *m;
	size_t pos;
	int line, col;
	Tok tok;
	bool failed; /* a syntax error: stop */
	bool seen_node;
	bool seen_mesh;
} Parser;

/* ---- lexer ---- */

static bool is_alpha(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char peekc(Parser *p, size_t k)
{
	return p->pos + k < p->src->len ? p->src->text[p->pos + k] : 0;
}

static void advance(Parser *p, size_t k)
{
	for (size_t i = 0; i < k && p->pos < p->src->len; i++) {
		if (p->src->text[p->pos] == '\n') {
			p->line++;
			p->col = 1;
		} else {
			p->col++;
		}
		p->pos++;
	}
}

static void next(Parser *p)
{
	for (;;) {
		char c = peekc(p, 0);
		if (p->pos < p->src->len && (c == ' ' || c == '\t' || c == '\r')) {
			advance(p, 1);
		} else if (p->pos < p->src->len && c == '#') {
			while (p->pos < p->src->len && peekc(p, 0) != '\n')
				advance(p, 1);
		} else {
			break;
		}
	}
	Tok *t = &p->tok;
	t->p = p->src->text + p->pos;
	t->line = p->line;
	t->col = p->col;
	t->len = 0;
	t->c = 0;
	if (p->pos >= p->src->len) {
		t->kind = T_EOF;
		return;
	}
	char c = peekc(p, 0);
	size_t n = 1;
	if (c == '\n') {
		t->kind = T_NL;
	} else if (is_alpha(c)) {
		while (is_alpha(peekc(p, n)) || is_digit(peekc(p, n)))
			n++;
		t->kind = T_IDENT;
	} else if (is_digit(c)) {
		t->kind = T_INT;
		while (is_digit(peekc(p, n)))
			n++;
		if (peekc(p, n) == '.') {
			t->kind = T_NUM;
			n++;
			while (is_digit(peekc(p, n)))
				n++;
		}
		if (peekc(p, n) == 'e' || peekc(p, n) == 'E') {
			size_t k = n + 1;
			if (peekc(p, k) == '+' || peekc(p, k) == '-')
				k++;
			if (is_digit(peekc(p, k))) {
				t->kind = T_NUM;
				n = k;
				while (is_digit(peekc(p, n)))
					n++;
			}
		}
	} else if (c == '"') {
		/* the closing quote; escapes are decoded by str_value */
		while (p->pos + n < p->src->len && peekc(p, n) != '"' && peekc(p, n) != '\n') {
			if (peekc(p, n) == '\\' && p->pos + n + 1 < p->src->len &&
			    peekc(p, n + 1) != '\n')
				n++;
			n++;
		}
		if (peekc(p, n) == '"' && p->pos + n < p->src->len) {
			n++;
			t->kind = T_STR;
		} else {
			t->kind = T_BAD;
		}
	} else if (c != 0 && strchr("%=:@[](){},|-?", c)) {
		t->kind = T_PUNCT;
		t->c = c;
	} else {
		t->kind = T_BAD;
	}
	t->len = n;
	advance(p, n);
}

/* ---- errors ---- */

static SrcLoc tok_loc(Parser *p)
{
	SrcLoc l = {p->src->name, p->tok.line, p->tok.col, p->tok.col + (int)p->tok.len};
	return l;
}

static const char *tok_desc(Parser *p, char *buf, size_t cap)
{
	switch (p->tok.kind) {
	case T_EOF:
		return "the end of the file";
	case T_NL:
		return "the end of the line";
	case T_BAD:
		if (p->tok.p[0] == '"')
			return "an unterminated string";
		snprintf(buf, cap, "a stray character (byte 0x%02x)", (unsigned char)p->tok.p[0]);
		return buf;
	default:
		snprintf(buf, cap, "'%.*s'", p->tok.len > 40 ? 40 : (int)p->tok.len, p->tok.p);
		return buf;
	}
}

static bool error_v(Parser *p, SrcLoc at, const char *fmt, va_list ap)
{
	if (!p->failed)
		diag_verror(p->d, at, fmt, ap);
	p->failed = true;
	return false;
}

/* At the current token. */
static bool error(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool error(Parser *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_v(p, tok_loc(p), fmt, ap);
	va_end(ap);
	return false;
}

/* At an earlier token (a name already consumed). */
static bool error_at(Parser *p, SrcLoc at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool error_at(Parser *p, SrcLoc at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_v(p, at, fmt, ap);
	va_end(ap);
	return false;
}

/* "expected X after Y, found Z" */
static bool expected(Parser *p, const char *what, const char *after)
{
	char buf[64];
	return error(p, "expected %s %s, found %s", what, after, tok_desc(p, buf, sizeof buf));
}

/* ---- token helpers ---- */

static bool is_punct(Parser *p, char c)
{
	return p->tok.kind == T_PUNCT && p->tok.c == c;
}

static bool is_word(Parser *p, const char *w)
{
	return p->tok.kind == T_IDENT && p->tok.len == strlen(w) &&
	       memcmp(p->tok.p, w, p->tok.len) == 0;
}

static bool accept(Parser *p, char c)
{
	if (!is_punct(p, c))
		return false;
	next(p);
	return true;
}

static bool expect(Parser *p, char c, const char *after)
{
	char what[8];
	if (accept(p, c))
		return true;
	snprintf(what, sizeof what, "'%c'", c);
	return expected(p, what, after);
}

static bool expect_word(Parser *p, const char *w, const char *after)
{
	char what[40];
	if (is_word(p, w)) {
		next(p);
		return true;
	}
	snprintf(what, sizeof what, "'%s'", w);
	return expected(p, what, after);
}

/* IDENT into a fixed buffer (names we look up, never store). */
static bool ident(Parser *p, char *buf, size_t cap, const char *what, const char *after)
{
	if (p->tok.kind != T_IDENT)
		return expected(p, what, after);
	if (p->tok.len >= cap)
		return error(p, "name '%.40s...' is too long", p->tok.p);
	memcpy(buf, p->tok.p, p->tok.len);
	buf[p->tok.len] = 0;
	next(p);
	return true;
}

/* [-] INT */
static bool int_value(Parser *p, int64_t *out, const char *after)
{
	bool neg = accept(p, '-');
	if (p->tok.kind != T_INT)
		return expected(p, "an integer", after);
	char buf[32];
	if (p->tok.len >= sizeof buf)
		return error(p, "integer out of range");
	memcpy(buf, p->tok.p, p->tok.len);
	buf[p->tok.len] = 0;
	errno = 0;
	unsigned long long v = strtoull(buf, NULL, 10);
	if (errno || v > (unsigned long long)INT64_MAX + (neg ? 1 : 0))
		return error(p, "integer %s%s out of range", neg ? "-" : "", buf);
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	next(p);
	return true;
}

static bool int32_value(Parser *p, int *out, const char *after)
{
	int64_t v = 0;
	if (!int_value(p, &v, after))
		return false;
	if (v < INT32_MIN || v > INT32_MAX)
		return error(p, "integer %" PRId64 " out of range", v);
	*out = (int)v;
	return true;
}

/* [-] (INT | NUM | inf | nan | infinity) */
static bool double_value(Parser *p, double *out, const char *after)
{
	bool neg = accept(p, '-');
	char buf[64];
	if (p->tok.kind == T_INT || p->tok.kind == T_NUM || is_word(p, "inf") ||
	    is_word(p, "nan") || is_word(p, "infinity")) {
		if (p->tok.len >= sizeof buf)
			return error(p, "number too long");
		memcpy(buf, p->tok.p, p->tok.len);
		buf[p->tok.len] = 0;
		double v = strtod(buf, NULL);
		*out = neg ? -v : v;
		next(p);
		return true;
	}
	return expected(p, "a number", after);
}

static bool bool_value(Parser *p, bool *out, const char *after)
{
	if (is_word(p, "true") || is_word(p, "false")) {
		*out = is_word(p, "true");
		next(p);
		return true;
	}
	return expected(p, "true or false", after);
}

/* STRING, unescaped into the arena. */
static bool str_value(Parser *p, const char **out, const char *after)
{
	if (p->tok.kind != T_STR)
		return expected(p, "a string", after);
	const char *s = p->tok.p + 1, *e = p->tok.p + p->tok.len - 1;
	char *buf = arena_alloc(p->a, (size_t)(e - s) + 1);
	if (!buf)
		return error(p, "out of memory");
	size_t n = 0;
	while (s < e) {
		if (*s != '\\') {
			buf[n++] = *s++;
			continue;
		}
		s++;
		char c = *s++;
		if (c == 'n') {
			buf[n++] = '\n';
		} else if (c == 't') {
			buf[n++] = '\t';
		} else if (c == '"' || c == '\\') {
			buf[n++] = c;
		} else if (c == 'x' && e - s >= 2 && strchr("0123456789abcdefABCDEF", s[0]) &&
		           strchr("0123456789abcdefABCDEF", s[1]) && s[0] && s[1]) {
			char hex[3] = {s[0], s[1], 0};
			long v = strtol(hex, NULL, 16);
			if (v == 0)
				return error(p, "a string cannot hold a NUL byte");
			buf[n++] = (char)v;
			s += 2;
		} else {
			return error(p, "unknown escape '\\%c' in a string", c ? c : '0');
		}
	}
	buf[n] = 0;
	*out = buf;
	next(p);
	return true;
}

static bool axis_value(Parser *p, int *out, const char *after)
{
	char name[128];
	SrcLoc l = tok_loc(p);
	if (!ident(p, name, sizeof name, "a mesh axis", after))
		return false;
	int a = mesh_axis_index(&p->m->mesh, name);
	if (a < 0)
		return error_at(p, l, "unknown mesh axis '%s'", name);
	*out = a;
	return true;
}

/* '(' [ axis { ',' axis } ] ')' into a mask */
static bool axes_value(Parser *p, uint32_t *out, const char *after)
{
	*out = 0;
	if (!expect(p, '(', after))
		return false;
	if (accept(p, ')'))
		return true;
	do {
		int a = 0;
		if (!axis_value(p, &a, "in the axis list"))
			return false;
		if (*out & (1u << a))
			return error(p, "mesh axis '%s' is listed twice", p->m->mesh.names[a]);
		*out |= 1u << a;
	} while (accept(p, ','));
	return expect(p, ')', "after the axis list");
}

/* '(' [ INT { ',' INT } ] ')' */
static bool ints_value(Parser *p, int64_t *v, int *n, int cap, const char *after)
{
	*n = 0;
	if (!expect(p, '(', after))
		return false;
	if (accept(p, ')'))
		return true;
	do {
		if (*n >= cap)
			return error(p, "at most %d integers fit here", cap);
		if (!int_value(p, &v[(*n)++], "in the list"))
			return false;
	} while (accept(p, ','));
	return expect(p, ')', "after the list");
}

static bool loc_value_after(Parser *p, SrcLoc *l, const char *after)
{
	int64_t v[3] = {0};
	if (!str_value(p, &l->file, after) || !expect(p, ':', "after the file name") ||
	    !int_value(p, &v[0], "for the line") || !expect(p, ':', "after the line") ||
	    !int_value(p, &v[1], "for the column") || !expect(p, '-', "after the column") ||
	    !int_value(p, &v[2], "for the end column"))
		return false;
	for (int i = 0; i < 3; i++)
		if (v[i] < INT32_MIN || v[i] > INT32_MAX)
			return error(p, "location number %" PRId64 " out of range", v[i]);
	l->line = (int)v[0];
	l->col = (int)v[1];
	l->end_col = (int)v[2];
	return true;
}

static bool loc_value(Parser *p, SrcLoc *l)
{
	return loc_value_after(p, l, "after 'loc'");
}

/* ---- placements and types ---- */

static bool placement_value(Parser *p, Placement *pl, const char *after)
{
	memset(pl, 0, sizeof *pl);
	if (accept(p, '?'))
		return true;
	if (!expect(p, '[', after))
		return false;
	pl->known = true;
	uint32_t used = 0;
	if (!is_punct(p, ']')) {
		do {
			if (pl->ndims >= IR_MAX_RANK)
				return error(p, "a placement has at most %d dims", IR_MAX_RANK);
			int d = pl->ndims++;
			bool group = accept(p, '(');
			if (!group && is_word(p, "_")) {
				next(p);
				continue;
			}
			do {
				int a = 0;
				if (pl->naxes[d] >= IR_MAX_AXES)
					return error(p, "too many axes on one dim");
				if (!axis_value(p, &a, "in the placement"))
					return false;
				if (used & (1u << a))
					return error(p, "mesh axis '%s' appears twice in a placement",
					             p->m->mesh.names[a]);
				used |= 1u << a;
				pl->axes[d][pl->naxes[d]++] = (uint8_t)a;
			} while (group && accept(p, ','));
			if (group && !expect(p, ')', "after the axis group"))
				return false;
		} while (accept(p, ','));
	}
	if (!expect(p, ']', "after the placement dims"))
		return false;
	if (!is_word(p, "partial"))
		return true;
	next(p);
	if (!expect(p, '(', "after 'partial'"))
		return false;
	pl->partial_op = IR_RED_SUM;
	do {
		char name[128];
		SrcLoc l = tok_loc(p);
		if (!ident(p, name, sizeof name, "a mesh axis", "in partial(...)"))
			return false;
		int a = mesh_axis_index(&p->m->mesh, name);
		IrRed r;
		/* the reduction comes last; an axis with a reduction's name
		 * is an axis unless it is already listed */
		bool is_red = ir_red_lookup(name, &r) && is_punct(p, ')') &&
		              (a < 0 || (pl->partial & (1u << a)));
		if (is_red && pl->partial) {
			pl->partial_op = r;
			break;
		}
		if (a < 0)
			return error_at(p, l, "unknown mesh axis '%s'", name);
		if ((used | pl->partial) & (1u << a))
			return error(p, "mesh axis '%s' appears twice in a placement", name);
		pl->partial |= 1u << a;
	} while (accept(p, ','));
	return expect(p, ')', "after partial(...)");
}

static bool type_value(Parser *p, IrNode *n)
{
	char name[16];
	SrcLoc nl = tok_loc(p);
	if (!ident(p, name, sizeof name, "a dtype", "after ':'"))
		return false;
	IrDtype t;
	if (!ir_dtype_lookup(name, &t))
		return error_at(p, nl, "unknown dtype '%s'", name);
	n->dtype = t;
	if (!expect(p, '[', "after the dtype"))
		return false;
	n->rank = 0;
	if (accept(p, ']'))
		return true;
	do {
		if (n->rank >= IR_MAX_RANK)
			return error(p, "a tensor has at most %d dims", IR_MAX_RANK);
		if (!int_value(p, &n->shape[n->rank++], "in the shape"))
			return false;
	} while (accept(p, ','));
	return expect(p, ']', "after the shape");
}

/* ---- attributes ---- */

/* key -> the field it sets; kinds = the IrAttrKinds that take it. */
enum { F_INIT, F_VALUE, F_EPS, F_RATE, F_AXES, F_PERM, F_INTS, F_GROUP, F_KEEPDIMS, F_AXIS,
       F_START, F_END, F_HEADS, F_CAUSAL, F_KV_HEADS, F_WINDOW, F_HEAD_AXES, F_HEAD_MINOR,
       F_RING, F_STEP, F_BALANCED, F_SEQ, F_LSE, F_SALT, F_MBS, F_MB, F_BDIM, F_BINNER, F_RED,
       F_ARG0, F_ARG1, F_ARG2, F_BETA1, F_MOMENTUM, F_BETA2, F_OEPS, F_WD, F_CLIP, F_NESTEROV,
       F_MASTER, F_RHEADS, F_THETA, F_INVERSE, F_RAXES,
       F_RK, F_RN, F_RCAP, F_RSTATS, F_RREPL };
typedef struct AttrKey {
	const char *name;
	unsigned kinds;
	int field;
} AttrKey;
#define K(x) (1u << IR_ATTR_##x)
static const AttrKey attr_keys[] = {
	{"init", K(INIT), F_INIT},
	{"value", K(SCALAR), F_VALUE},
	{"eps", K(EPS), F_EPS},
	{"rate", K(DROPOUT), F_RATE},
	{"axes", K(AXES), F_AXES},
	{"perm", K(PERM), F_PERM},
	{"ints", K(COLL), F_INTS},
	{"axes", K(COLL), F_GROUP},
	{"keepdims", K(AXES), F_KEEPDIMS},
	{"axis", K(AXIS) | K(SLICE), F_AXIS},
	{"start", K(SLICE), F_START},
	{"end", K(SLICE), F_END},
	{"heads", K(ATTN), F_HEADS},
	{"causal", K(ATTN), F_CAUSAL},
	{"kv_heads", K(ATTN), F_KV_HEADS},
	{"window", K(ATTN), F_WINDOW},
	{"head_axes", K(ATTN), F_HEAD_AXES},
	{"head_minor", K(ATTN), F_HEAD_MINOR},
	{"ring", K(ATTN), F_RING},
	{"step", K(ATTN), F_STEP},
	{"balanced", K(ATTN), F_BALANCED},
	{"seq", K(ATTN), F_SEQ},
	{"lse", K(ATTN), F_LSE},
	{"salt", K(DROPOUT), F_SALT},
	{"mbs", K(DROPOUT), F_MBS},
	{"mb", K(DROPOUT), F_MB},
	{"bdim", K(DROPOUT), F_BDIM},
	{"binner", K(DROPOUT), F_BINNER},
	{"red", K(COLL), F_RED},
	/* a collective's dims by the op's names (irtext_coll_names) */
	{"dim", K(COLL), F_ARG0},
	{"split", K(COLL), F_ARG0},
	{"root", K(COLL), F_ARG0},
	{"shift", K(COLL), F_ARG0},
	{"concat", K(COLL), F_ARG1},
	{"mirror", K(COLL), F_ARG1},
	{"size", K(COLL), F_ARG1},
	{"low", K(COLL), F_ARG2},
	{"rows", K(COLL), F_ARG2},
	/* optimizer steps */
	{"beta1", K(OPTIM), F_BETA1},
	{"momentum", K(OPTIM), F_MOMENTUM},
	{"beta2", K(OPTIM), F_BETA2},
	{"eps", K(OPTIM), F_OEPS},
	{"weight_decay", K(OPTIM), F_WD},
	{"clip", K(OPTIM), F_CLIP},
	{"nesterov", K(OPTIM), F_NESTEROV},
	{"master", K(OPTIM), F_MASTER},
	/* rope */
	{"heads", K(ROPE), F_RHEADS},
	{"theta", K(ROPE), F_THETA},
	{"inverse", K(ROPE), F_INVERSE},
	{"axes", K(ROPE), F_RAXES},
	/* routing */
	{"k", K(ROUTE), F_RK},
	{"n", K(ROUTE), F_RN},
	{"capacity", K(ROUTE), F_RCAP},
	{"stats", K(ROUTE), F_RSTATS},
	{"replicas", K(ROUTE), F_RREPL},
};
/* parse_attrs marks the keys it has seen in a uint64_t */
_Static_assert(sizeof attr_keys / sizeof attr_keys[0] <= 64, "attr_keys: too many keys");
#undef K
#define NKEYS ((int)(sizeof attr_keys / sizeof attr_keys[0]))

/* The keys each kind must have (the printer always writes them). */
static const char *const required[][3] = {
	[IR_ATTR_NONE] = {NULL},
	[IR_ATTR_INIT] = {"init"},
	[IR_ATTR_SCALAR] = {"value"},
	[IR_ATTR_AXES] = {"axes"},
	[IR_ATTR_AXIS] = {"axis"},
	[IR_ATTR_EPS] = {"eps"},
	[IR_ATTR_PERM] = {"perm"},
	[IR_ATTR_SLICE] = {"axis", "start", "end"},
	[IR_ATTR_ATTN] = {"heads", "causal"},
	[IR_ATTR_DROPOUT] = {"rate", "salt"},
	[IR_ATTR_COLL] = {"axes"},
	[IR_ATTR_OPTIM] = {"master"},
	[IR_ATTR_ROPE] = {"heads", "theta"},
	[IR_ATTR_ROUTE] = {"k", "n", "capacity"},
	[IR_ATTR_KIND_COUNT] = {NULL},
};

/* Each optimizer step accepts only its own keys. */
static bool optim_key_ok(IrOp op, const char *key)
{
	static const char *const adamw_only[] = {"beta1", "beta2", "eps"};
	static const char *const sgd_only[] = {"momentum", "nesterov"};
	const char *const *other = op == IR_OP_SGD_STEP ? adamw_only : sgd_only;
	int n = op == IR_OP_SGD_STEP ? 3 : 2;
	for (int i = 0; i < n; i++)
		if (strcmp(key, other[i]) == 0)
			return false;
	return true;
}

static bool init_value(Parser *p, IrAttrInit *a)
{
	char name[16];
	SrcLoc nl = tok_loc(p);
	if (!ident(p, name, sizeof name, "an init kind", "after 'init ='"))
		return false;
	for (int i = IR_INIT_NONE; i <= IR_INIT_UNIFORM; i++)
		if (strcmp(name, ir_init_name((IrInit)i)) == 0)
			a->kind = (IrInit)i;
	if (strcmp(name, ir_init_name(a->kind)) != 0)
		return error_at(p, nl, "unknown init '%s'", name);
	if (a->kind != IR_INIT_NORMAL && a->kind != IR_INIT_UNIFORM)
		return true;
	return expect(p, '(', "after the init kind") && double_value(p, &a->arg[0], "in the init") &&
	       expect(p, ',', "between the init arguments") &&
	       double_value(p, &a->arg[1], "in the init") && expect(p, ')', "after the init");
}

/* A bool, or for causal (which the printer writes as a number when it is
 * neither) an integer. */
static bool boolint_value(Parser *p, int64_t *out)
{
	if (p->tok.kind != T_IDENT)
		return int_value(p, out, "for the attribute");
	bool b = false;
	if (!bool_value(p, &b, "for the attribute"))
		return false;
	*out = b;
	return true;
}

/* The value of key k into a (of the node's kind). */
static bool attr_field(Parser *p, IrAttr *a, int k, int *nnamed)
{
	const char *after = "for the attribute";
	int f = attr_keys[k].field;
	switch (f) {
	case F_INIT:
		return init_value(p, &a->init);
	case F_VALUE:
		return double_value(p, &a->scalar.value, after);
	case F_EPS:
		return double_value(p, &a->eps.eps, after);
	case F_RATE:
		return double_value(p, &a->dropout.rate, after);
	case F_AXES:
		return ints_value(p, a->axes.axes, &a->axes.n, IR_MAX_INTS, after);
	case F_PERM:
		return ints_value(p, a->perm.perm, &a->perm.n, IR_MAX_INTS, after);
	case F_INTS:
		return ints_value(p, a->coll.args, &a->coll.n, IR_MAX_INTS, after);
	case F_GROUP:
		return axes_value(p, &a->coll.axes, "after 'axes ='");
	case F_KEEPDIMS:
		return bool_value(p, &a->axes.keepdims, after);
	case F_AXIS:
		return int_value(p, a->kind == IR_ATTR_SLICE ? &a->slice.axis : &a->axis.axis, after);
	case F_START:
		return int_value(p, &a->slice.start, after);
	case F_END:
		return int_value(p, &a->slice.end, after);
	case F_HEADS:
		return int_value(p, &a->attn.heads, after);
	case F_CAUSAL:
		return boolint_value(p, &a->attn.causal);
	case F_KV_HEADS:
		return int_value(p, &a->attn.kv_heads, after);
	case F_WINDOW:
		return int_value(p, &a->attn.window, after);
	case F_HEAD_AXES:
		return axes_value(p, &a->attn.head_axes, "after 'head_axes ='");
	case F_HEAD_MINOR:
		return axes_value(p, &a->attn.head_minor, "after 'head_minor ='");
	case F_RING:
		return axes_value(p, &a->attn.ring, "after 'ring ='");
	case F_STEP:
		return int_value(p, &a->attn.step, after);
	case F_BALANCED:
		return boolint_value(p, &a->attn.balanced);
	case F_SEQ:
		return int_value(p, &a->attn.seq, after);
	case F_LSE:
		return boolint_value(p, &a->attn.lse);
	case F_SALT:
		return int_value(p, &a->dropout.salt, after);
	case F_MBS:
		return int_value(p, &a->dropout.mbs, after);
	case F_MB:
		return int_value(p, &a->dropout.mb, after);
	case F_BDIM:
		return int_value(p, &a->dropout.bdim, after);
	case F_BINNER:
		return int_value(p, &a->dropout.binner, after);
	case F_RED: {
		char r[16];
		SrcLoc rl = tok_loc(p);
		if (!ident(p, r, sizeof r, "a reduction", "after 'red ='"))
			return false;
		if (!ir_red_lookup(r, &a->coll.red))
			return error_at(p, rl, "unknown reduction '%s' (sum, avg or max)", r);
		return true;
	}
	case F_ARG0:
	case F_ARG1:
	case F_ARG2: {
		int i = f - F_ARG0;
		if (*nnamed < i + 1)
			*nnamed = i + 1;
		return int_value(p, &a->coll.args[i], after);
	}
	case F_BETA1:
		return double_value(p, &a->optim.beta1, after);
	case F_MOMENTUM:
		return double_value(p, &a->optim.momentum, after);
	case F_BETA2:
		return double_value(p, &a->optim.beta2, after);
	case F_OEPS:
		return double_value(p, &a->optim.eps, after);
	case F_WD:
		return double_value(p, &a->optim.weight_decay, after);
	case F_CLIP:
		return double_value(p, &a->optim.clip, after);
	case F_NESTEROV:
		return bool_value(p, &a->optim.nesterov, after);
	case F_MASTER:
		return bool_value(p, &a->optim.master, after);
	case F_RHEADS:
		return int_value(p, &a->rope.heads, after);
	case F_THETA:
		return double_value(p, &a->rope.theta, after);
	case F_INVERSE:
		return bool_value(p, &a->rope.inverse, after);
	case F_RAXES:
		return axes_value(p, &a->rope.axes, "after 'axes ='");
	case F_RK:
		return int_value(p, &a->route.k, after);
	case F_RN:
		return int_value(p, &a->route.n, after);
	case F_RCAP:
		return int_value(p, &a->route.capacity, after);
	case F_RSTATS:
		return int_value(p, &a->route.stats, after);
	case F_RREPL:
		return axes_value(p, &a->route.replicas, "after 'replicas ='");
	}
	return false;
}

static bool attrs_value(Parser *p, IrNode *n)
{
	IrAttrKind kind = ir_op_attr_kind(n->op);
	IrAttr *a = ir_attr_mut(p->m, n, kind);
	uint64_t seen = 0;
	int nnamed = 0; /* collectives: dims set by name (dim, split, ...) */
	bool list = false;
	do {
		char key[32];
		SrcLoc kl = tok_loc(p);
		if (!ident(p, key, sizeof key, "an attribute name", "in '{...}'"))
			return false;
		int k;
		for (k = 0; k < NKEYS; k++)
			if (strcmp(attr_keys[k].name, key) == 0 && (attr_keys[k].kinds & (1u << kind)))
				break;
		if (k == NKEYS || (kind == IR_ATTR_OPTIM && !optim_key_ok(n->op, key)))
			return error_at(p, kl, "unknown attribute '%s' for %s", key, ir_op_name(n->op));
		if (seen & ((uint64_t)1 << k))
			return error(p, "attribute '%s' given twice", key);
		seen |= (uint64_t)1 << k;
		if (!expect(p, '=', "after the attribute name"))
			return false;
		list |= attr_keys[k].field == F_INTS;
		if (!attr_field(p, a, k, &nnamed))
			return false;
	} while (accept(p, ','));
	if (!expect(p, '}', "after the attributes"))
		return false;
	for (int r = 0; r < 3 && required[kind][r]; r++) {
		bool have = false;
		for (int k = 0; k < NKEYS; k++)
			if ((seen & ((uint64_t)1 << k)) && strcmp(attr_keys[k].name, required[kind][r]) == 0)
				have = true;
		if (!have)
			return error(p, "%s: missing attribute '%s'", ir_op_name(n->op), required[kind][r]);
	}
	if (kind == IR_ATTR_DROPOUT) {
		/* a micro-batch's copy has all four of mbs, mb, bdim, binner */
		int nmb = 0;
		for (int k = 0; k < NKEYS; k++)
			nmb += (seen >> k & 1) && attr_keys[k].field >= F_MBS &&
			       attr_keys[k].field <= F_BINNER;
		if (nmb != 0 && nmb != 4)
			return error(p, "dropout: give all of mbs, mb, bdim and binner, or none");
		a->dropout.has_mb = nmb != 0;
	} else if (kind == IR_ATTR_COLL) {
		if (list && nnamed)
			return error(p, "%s: give either 'ints' or named dims, not both",
			             ir_op_name(n->op));
		if (!list)
			a->coll.n = nnamed;
	}
	return true;
}

/* ---- lines ---- */

static bool end_of_line(Parser *p, const char *after)
{
	if (p->tok.kind == T_NL || p->tok.kind == T_EOF)
		return true;
	return expected(p, "the end of the line", after);
}

/* '%' INT that names an existing node (before `before`, or any when -1). */
static bool node_ref(Parser *p, int *out, int before, const char *after)
{
	int64_t v = 0;
	if (!expect(p, '%', after))
		return false;
	SrcLoc l = tok_loc(p);
	if (!int_value(p, &v, "after '%'"))
		return false;
	if (v < 0 || v >= p->m->nnodes || (before >= 0 && v >= before)) {
		l.col--; /* include the '%' */
		l.end_col = p->tok.col;
		if (before >= 0)
			return error_at(p, l, "operand %%%" PRId64 " is not defined before %%%d", v,
			                before);
		return error_at(p, l, "node %%%" PRId64 " is not defined", v);
	}
	*out = (int)v;
	return true;
}

static void check_types(Parser *p, IrNode *n, SrcLoc at)
{
	char msg[512];
	IrNode s = *n;
	if (!ir_infer_msg(p->m, &s, msg, sizeof msg)) {
		diag_error(p->d, at, "%%%d (%s): %s", n->id, ir_op_name(n->op), ir_strip_op_name(msg, n->op));
		return;
	}
	if (s.dtype != n->dtype || s.rank != n->rank ||
	    memcmp(s.shape, n->shape, (size_t)n->rank * sizeof n->shape[0]) != 0) {
		/* print both types through the printer's own spelling */
		char want[200], got[200];
		ir_format_type(want, sizeof want, n->dtype, n->rank, n->shape);
		ir_format_type(got, sizeof got, s.dtype, s.rank, s.shape);
		diag_error(p->d, at, "%%%d (%s): the text says %s but the operands give %s", n->id,
		           ir_op_name(n->op), want, got);
	}
}

/* origin := '%' INT | STRING ':' INT ':' INT '-' INT, after 'from'.  The
 * node may come later (propagation also runs backward from users), so it is
 * checked against the module by the verifier, not here. */
/* 'of' '[' INT { ',' INT } ']' after the placement: the global shape of a
 * node holding padded (uneven) shards; a dim whose extent is its shard's
 * times the parts is not padded. */
static bool padded_value(Parser *p, IrNode *n)
{
	next(p); /* 'of' */
	SrcLoc l = tok_loc(p);
	if (!expect(p, '[', "after 'of'"))
		return false;
	int nd = 0;
	do {
		int64_t g = 0;
		if (nd >= n->rank)
			return error_at(p, l, "'of' lists more dims than the type's %d", n->rank);
		if (!int_value(p, &g, "in the global shape"))
			return false;
		int64_t parts = placement_dim_parts(ir_place(p->m, n), &p->m->mesh, nd);
		int64_t c = parts > 0 ? g / parts + (g % parts != 0) : g;
		if (g == n->shape[nd] * parts)
			ir_set_padded(p->m, n, nd, 0);
		else if (parts > 1 && g > 0 && c == n->shape[nd])
			ir_set_padded(p->m, n, nd, g);
		else
			return error_at(p, l, "dim %d: a global extent of %" PRId64 " does not have "
			                "shards of %" PRId64 " over %" PRId64 " parts", nd, g,
			                n->shape[nd], parts);
		nd++;
	} while (accept(p, ','));
	if (nd != n->rank)
		return error_at(p, l, "'of' lists %d dims, the type %d", nd, n->rank);
	return expect(p, ']', "after the global shape");
}

static bool origin_value(Parser *p, IrNode *n)
{
	next(p); /* 'from' */
	if (!n->place)
		return error(p, "a placement that is not known ('?') has no origin");
	if (!accept(p, '%')) {
		SrcLoc at = {0};
		ir_set_place_from(p->m, n, -1);
		if (!loc_value_after(p, &at, "after 'from'"))
			return false;
		return ir_set_place_loc(p->m, n, at) || error(p, "out of memory");
	}
	int64_t v = 0;
	SrcLoc l = tok_loc(p);
	if (!int_value(p, &v, "after '%'"))
		return false;
	if (v < 0 || v >= IR_MAX_NODES)
		return error_at(p, l, "origin %%%" PRId64 " out of range", v);
	ir_set_place_from(p->m, n, (int)v);
	return true;
}

static bool node_line(Parser *p)
{
	SrcLoc at = tok_loc(p);
	int64_t id = 0;
	next(p); /* '%' */
	SrcLoc il = tok_loc(p);
	if (!int_value(p, &id, "after '%'"))
		return false;
	if (id != p->m->nnodes)
		return error_at(p, il, "expected node %%%d here (nodes are numbered in order), found %%%" PRId64,
		             p->m->nnodes, id);
	if (p->m->nnodes >= IR_MAX_NODES)
		return error(p, "too many nodes (at most %d)", IR_MAX_NODES);
	if (!expect(p, '=', "after the node id"))
		return false;
	char opname[32];
	SrcLoc ol = tok_loc(p);
	if (!ident(p, opname, sizeof opname, "an op name", "after '='"))
		return false;
	IrOp op;
	if (!ir_op_lookup(opname, &op))
		return error_at(p, ol, "unknown op '%s'", opname);
	/* IR without an `after` line is the program as lowered, global: the
	 * per-rank ops come with partition (OPF_LOCAL, ops.def) */
	if ((ir_op_flags(op) & OPF_LOCAL) && !p->m->after)
		return error_at(p, ol, "%s is a per-rank op, which only the IR after partition "
		                "holds, but this IR has no `after PASS` line before its first node "
		                "(IR printed after a pass has one)", opname);
	/* operands: grown in the arena; garbage cannot loop since each one
	 * consumes tokens */
	int cap = 4, nops = 0;
	int *ops = arena_alloc(p->a, (size_t)cap * sizeof *ops);
	if (!ops)
		return error(p, "out of memory");
	if (is_punct(p, '%')) {
		do {
			if (nops == cap) {
				int *nb = arena_alloc(p->a, (size_t)cap * 2 * sizeof *nb);
				if (!nb)
					return error(p, "out of memory");
				memcpy(nb, ops, (size_t)nops * sizeof *nb);
				ops = nb;
				cap *= 2;
			}
			if (!node_ref(p, &ops[nops++], (int)id, "for an operand"))
				return false;
		} while (accept(p, ','));
	}
	int mn = ir_op_min_operands(op), mx = ir_op_max_operands(op);
	if (nops < mn || (mx >= 0 && nops > mx)) {
		if (mx < 0)
			return error(p, "%s takes at least %d operand%s, got %d", opname, mn,
			             mn == 1 ? "" : "s", nops);
		if (mn == mx)
			return error(p, "%s takes %d operand%s, got %d", opname, mn, mn == 1 ? "" : "s",
			             nops);
		return error(p, "%s takes %d to %d operands, got %d", opname, mn, mx, nops);
	}
	IrNode *n = ir_node_new(p->m, op, ops, nops, (SrcLoc){0});
	if (!n)
		return error(p, "out of memory");
	if (accept(p, '{')) {
		if (ir_op_attr_kind(op) == IR_ATTR_NONE)
			return error(p, "%s takes no attributes", opname);
		if (!attrs_value(p, n))
			return false;
	} else if (ir_op_attr_kind(op) != IR_ATTR_NONE) {
		return expected(p, "'{' with the attributes", "after the operands");
	}
	if (p->tok.kind == T_STR && !str_value(p, &n->name, "for the name"))
		return false;
	Placement pl;
	if (!expect(p, ':', "after the operands") || !type_value(p, n) ||
	    !expect(p, '@', "after the type") || !placement_value(p, &pl, "after '@'"))
		return false;
	if (!ir_place_set(p->m, n, &pl))
		return error(p, "out of memory");
	if (is_word(p, "of") && !p->m->after)
		return error(p, "a padded shard ('of'), which only the IR after partition holds, "
		             "but this IR has no `after PASS` line before its first node");
	if (is_word(p, "of") && !padded_value(p, n))
		return false;
	if (is_word(p, "from") && !origin_value(p, n))
		return false;
	if (is_word(p, "role")) {
		char r[32];
		next(p);
		SrcLoc rl = tok_loc(p);
		if (!ident(p, r, sizeof r, "a role", "after 'role'"))
			return false;
		IrRole role;
		if (!ir_role_lookup(r, &role))
			return error_at(p, rl, "unknown role '%s'", r);
		n->role = role;
	}
	if (is_word(p, "stage")) {
		next(p);
		int v = -1;
		if (!int32_value(p, &v, "after 'stage'"))
			return false;
		if (!ir_set_stage(p->m, n, v))
			return error(p, "out of memory");
	}
	if (is_word(p, "mb")) {
		next(p);
		int v = -1;
		if (!int32_value(p, &v, "after 'mb'"))
			return false;
		if (!ir_set_mb(p->m, n, v))
			return error(p, "out of memory");
	}
	if (is_word(p, "block")) {
		next(p);
		int v = -1;
		if (!int32_value(p, &v, "after 'block'"))
			return false;
		if (!ir_set_block(p->m, n, v))
			return error(p, "out of memory");
	}
	if (is_word(p, "phase")) {
		next(p);
		char w[16];
		SrcLoc pl = tok_loc(p);
		if (!ident(p, w, sizeof w, "a phase", "after 'phase'"))
			return false;
		if (strcmp(w, "forward") == 0)
			ir_set_phase(p->m, n, IR_PHASE_FORWARD);
		else if (strcmp(w, "backward") == 0)
			ir_set_phase(p->m, n, IR_PHASE_BACKWARD);
		else if (strcmp(w, "optimizer") == 0)
			ir_set_phase(p->m, n, IR_PHASE_OPTIMIZER);
		else
			return error_at(p, pl, "unknown phase '%s' (forward, backward or optimizer)", w);
	}
	if (is_word(p, "loc")) {
		next(p);
		if (!loc_value(p, &n->loc))
			return false;
	}
	if (!end_of_line(p, "after the node"))
		return false;
	p->seen_node = true;
	check_types(p, n, at);
	return true;
}

static bool mesh_line(Parser *p)
{
	Mesh *mesh = &p->m->mesh;
	if (p->seen_mesh)
		return error(p, "the mesh is declared twice");
	if (p->seen_node)
		return error(p, "the mesh must be declared before the first node");
	p->seen_mesh = true;
	next(p);
	if (!expect(p, '(', "after 'mesh'"))
		return false;
	if (accept(p, ')'))
		return end_of_line(p, "after the mesh");
	do {
		if (mesh->naxes >= IR_MAX_AXES)
			return error(p, "a mesh has at most %d axes", IR_MAX_AXES);
		char name[128];
		int64_t size = 0;
		if (!ident(p, name, sizeof name, "an axis name", "in the mesh"))
			return false;
		if (mesh_axis_index(mesh, name) >= 0)
			return error(p, "mesh axis '%s' is declared twice", name);
		if (!expect(p, '=', "after the axis name") ||
		    !int_value(p, &size, "for the axis size"))
			return false;
		if (size < 1 || size > (1 << 24))
			return error(p, "mesh axis '%s' has size %" PRId64 " (1 to 2^24)", name, size);
		if (mesh_size(mesh) * size > ((int64_t)1 << 31))
			return error(p, "the mesh has more than 2^31 ranks");
		mesh->names[mesh->naxes] = arena_strdup(p->a, name);
		mesh->sizes[mesh->naxes++] = size;
	} while (accept(p, ','));
	/* the text has no syntax for it: the axis named pp, as lowering
	 * decides (frontend/lower_mesh.c) */
	p->m->pp_axis = mesh_axis_index(mesh, "pp");
	return expect(p, ')', "after the mesh axes") && end_of_line(p, "after the mesh");
}

static bool train_line(Parser *p)
{
	char *base = (char *)&p->m->train;
	next(p);
	do {
		char key[64];
		SrcLoc kl = tok_loc(p);
		if (!ident(p, key, sizeof key, "a train setting", "in 'train'"))
			return false;
		const IrTextField *f = NULL;
		int fi = 0; /* the IrTrainField: the table is train.def's order */
		/* the train section's other name of precision */
		const char *name = strcmp(key, "param_dtype") == 0 ? "precision" : key;
		for (int i = 0; i < irtext_ntrain_fields; i++)
			if (strcmp(irtext_train_fields[i].name, name) == 0)
				f = &irtext_train_fields[fi = i];
		if (!f)
			return error_at(p, kl, "unknown train setting '%s'", key);
		if (!expect(p, '=', "after the setting name"))
			return false;
		SrcLoc vl = tok_loc(p);
		void *v = base + f->off;
		const char *word = NULL; /* TF_ENUM's, set below */
		bool ok = true;
		switch (f->kind) {
		case TF_STR:
			if (is_word(p, "none")) {
				*(const char **)v = NULL;
				next(p);
			} else {
				ok = str_value(p, (const char **)v, "for the setting");
			}
			break;
		case TF_F64:
			ok = double_value(p, (double *)v, "for the setting");
			break;
		case TF_I64:
			ok = int_value(p, (int64_t *)v, "for the setting");
			break;
		case TF_INT:
			ok = int32_value(p, (int *)v, "for the setting");
			break;
		case TF_BOOL:
			ok = bool_value(p, (bool *)v, "for the setting");
			break;
		case TF_AXES:
			ok = axes_value(p, (uint32_t *)v, "for the setting");
			break;
		case TF_ENUM:
			if (is_word(p, "none"))
				next(p);
			else
				ok = str_value(p, &word, "for the setting");
			break;
		case TF_DTYPE: {
			char t[16];
			SrcLoc tl = tok_loc(p);
			ok = ident(p, t, sizeof t, "a dtype", "for the setting");
			if (ok && !ir_dtype_lookup(t, (IrDtype *)v))
				return error_at(p, tl, "unknown dtype '%s'", t);
			break;
		}
		}
		if (!ok)
			return false;
		/* the value's extent, to the token after it on its line */
		if (p->tok.line == vl.line && p->tok.col > vl.col)
			vl.end_col = p->tok.col;
		/* the same check as the train section's (validate.c), before any
		 * pass sizes anything by the value */
		p->m->train.loc[fi] = vl;
		if (f->kind == TF_ENUM ? !ir_train_set_word(&p->m->train, (IrTrainField)fi, word, NULL,
		                                             vl, p->d)
		                       : !ir_train_check_field(&p->m->train, (IrTrainField)fi, NULL,
		                                               vl, p->d)) {
			p->failed = true;
			return false;
		}
	} while (accept(p, ','));
	return end_of_line(p, "after the train settings");
}

/* 'after' IDENT: which pass names are known is the pipeline's business
 * (pass_check_input), the parser keeps the name and where it was. */
static bool after_line(Parser *p)
{
	if (p->m->after)
		return error(p, "'after' is given twice");
	if (p->seen_node)
		return error(p, "'after' must come before the first node");
	next(p);
	char name[64];
	SrcLoc nl = tok_loc(p);
	if (!ident(p, name, sizeof name, "a pass name", "after 'after'"))
		return false;
	p->m->after = arena_strdup(p->a, name);
	p->m->after_loc = nl;
	if (!p->m->after)
		return error(p, "out of memory");
	return end_of_line(p, "after the pass name");
}

static bool choose_line(Parser *p)
{
	int64_t idx = 0;
	int node = 0, sel = 0;
	SrcLoc loc = {0};
	next(p);
	SrcLoc cl = tok_loc(p);
	if (!int_value(p, &idx, "after 'choose'"))
		return false;
	if (idx != p->m->nchooses)
		return error_at(p, cl, "expected choose %d here (chooses are numbered in order)",
		             p->m->nchooses);
	if (!expect_word(p, "node", "after the choose index") ||
	    !node_ref(p, &node, -1, "after 'node'") ||
	    !expect_word(p, "options", "after the node"))
		return false;
	int cap = 4, n = 0;
	Placement *opts = arena_alloc(p->a, (size_t)cap * sizeof *opts);
	if (!opts)
		return error(p, "out of memory");
	do {
		if (n == cap) {
			Placement *nb = arena_alloc(p->a, (size_t)cap * 2 * sizeof *nb);
			if (!nb)
				return error(p, "out of memory");
			memcpy(nb, opts, (size_t)n * sizeof *nb);
			opts = nb;
			cap *= 2;
		}
		if (!placement_value(p, &opts[n++], "for an option"))
			return false;
	} while (accept(p, '|'));
	if (!expect_word(p, "selected", "after the options") ||
	    !int32_value(p, &sel, "after 'selected'"))
		return false;
	if (sel < 0 || sel >= n)
		return error(p, "selected option %d is not one of the %d options", sel, n);
	if (is_word(p, "loc")) {
		next(p);
		if (!loc_value(p, &loc))
			return false;
	}
	if (!end_of_line(p, "after the choose"))
		return false;
	int c = ir_choose_add(p->m, node, opts, n, loc);
	if (c < 0)
		return error(p, "out of memory");
	p->m->chooses[c].selected = sel;
	return true;
}

static bool line(Parser *p)
{
	if (p->tok.kind == T_NL || p->tok.kind == T_EOF)
		return true;
	if (is_punct(p, '%'))
		return node_line(p);
	if (is_word(p, "module")) {
		next(p);
		if (p->tok.kind == T_IDENT) {
			p->m->name = arena_strndup(p->a, p->tok.p, p->tok.len);
			next(p);
		} else if (!str_value(p, &p->m->name, "after 'module'")) {
			return false;
		}
		return end_of_line(p, "after the module name");
	}
	if (is_word(p, "mesh"))
		return mesh_line(p);
	if (is_word(p, "train"))
		return train_line(p);
	if (is_word(p, "loss")) {
		next(p);
		SrcLoc l = tok_loc(p);
		if (!node_ref(p, &p->m->loss, -1, "after 'loss'"))
			return false;
		char msg[256];
		if (ir_loss_not_scalar(p->m, msg, sizeof msg)) {
			l.end_col = p->tok.col;
			return error_at(p, l, "%s", msg);
		}
		return end_of_line(p, "after the loss");
	}
	if (is_word(p, "choose"))
		return choose_line(p);
	if (is_word(p, "after"))
		return after_line(p);
	return expected(p, "a node, 'module', 'mesh', 'train', 'after', 'loss' or 'choose'",
	                "at the start of a line");
}

/* The links of m's nodes (IrLink).  The text form has no syntax for
 * them: what the passes that make the nodes name them is what says it
 * here, and here only (grad.P of role grad: P's gradient, the first param
 * so named; opt.WORD.P of op state: its optimizer state; grad_norm: the
 * global norm).  False when out of memory. */
static bool link_by_names(IrModule *m)
{
	int *params = malloc(sizeof(int) * (size_t)(m->nnodes ? m->nnodes : 1));
	int np = params ? ir_params_by_name(m, params) : -1;
	bool ok = np >= 0;
	for (int i = 0; ok && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const char *s = n->name, *pname = NULL;
		IrLink k = IR_LINK_NONE;
		if (!s)
			continue;
		if (strcmp(s, "grad_norm") == 0) {
			ok = ir_set_link(m, n, IR_LINK_GRAD_NORM, -1);
			continue;
		}
		if (n->role == IR_ROLE_GRAD && strncmp(s, "grad.", 5) == 0) {
			k = IR_LINK_GRAD;
			pname = s + 5;
		} else if (n->op == IR_OP_STATE && strncmp(s, "opt.", 4) == 0 && strchr(s + 4, '.')) {
			const char *dot = strchr(s + 4, '.');
			k = ir_link_state_lookup(s + 4, (size_t)(dot - (s + 4)));
			pname = dot + 1;
		}
		int at = k == IR_LINK_NONE ? -1 : ir_param_lookup(m, params, np, pname);
		if (at >= 0)
			ok = ir_set_link(m, n, k, params[at]);
	}
	free(params);
	return ok;
}

/* The params' FSDP units (IrModule.unit), which the text form has no
 * syntax for either: lowering names a block's params by the instance
 * (layer.3.wq), so the params of one prefix up to the last '.' are one
 * unit, numbered by its first param; a name without a '.' is top level
 * (-1).  False when out of memory. */
static bool units_by_names(IrModule *m)
{
	int *first = malloc(sizeof(int) * (size_t)(m->nnodes ? m->nnodes : 1));
	int nu = 0;
	bool ok = first != NULL;
	for (int i = 0; ok && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const char *dot = n->op == IR_OP_PARAM && n->name ? strrchr(n->name, '.') : NULL;
		if (!dot)
			continue;
		size_t len = (size_t)(dot - n->name);
		int u = 0;
		while (u < nu && !(strncmp(m->nodes[first[u]]->name, n->name, len) == 0 &&
		                   m->nodes[first[u]]->name[len] == '.' &&
		                   !strchr(m->nodes[first[u]]->name + len + 1, '.')))
			u++;
		if (u == nu)
			first[nu++] = i;
		ok = ir_set_unit(m, n, u);
	}
	free(first);
	return ok;
}

IrModule *ir_parse(Arena *a, Diag *d, const SrcFile *src)
{
	Parser p = {.src = src, .d = d, .a = a, .line = 1, .col = 1};
	int errs = d->nerr;
	diag_add_file(d, src);
	p.m = ir_module_new(a, NULL);
	if (!p.m) {
		diag_error(d, (SrcLoc){src->name, 0, 0, 0}, "out of memory");
		return NULL;
	}
	p.m->from_text = true;
	next(&p);
	while (p.tok.kind != T_EOF && !p.failed) {
		if (!line(&p))
			break;
		if (p.tok.kind == T_NL)
			next(&p);
	}
	/* what the settings ask of each other, once all are read */
	if (d->nerr == errs)
		ir_train_check(&p.m->train, d);
	if (d->nerr == errs && (!link_by_names(p.m) || !units_by_names(p.m)))
		diag_error(d, (SrcLoc){src->name, 0, 0, 0}, "out of memory");
	return d->nerr > errs ? NULL : p.m;
}
