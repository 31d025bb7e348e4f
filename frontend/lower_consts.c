/* lower_consts.c - the constants of lowering: values and their constant
 * arithmetic, the constant functions, `let` with -D overrides, and the
 * helpers every checker of lower*.c shares (names for messages, "did you
 * mean" suggestions, keyword arguments).
 *
 * Part of lowering (lower.c calls into it; lower_impl.h is the shared
 * state), not a phase of its own: it fills the module's global constants
 * as lower_file walks the AST.  Every problem is a diagnostic; the caller
 * keeps going so one run reports many.
 */
#include "frontend/lower_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const SrcLoc lower_cmdline = {"<command line>", 0, 0, 0};

Value lower_err(void)
{
	Value v = {0};
	v.k = V_ERR;
	return v;
}

Value lower_int(int64_t i)
{
	Value v = {0};
	v.k = V_NUM;
	v.is_int = true;
	v.i = i;
	v.f = (double)i;
	return v;
}

Value lower_float(double f)
{
	Value v = {0};
	v.k = V_NUM;
	v.f = f;
	return v;
}

double lower_num(Value v)
{
	return v.is_int ? (double)v.i : v.f;
}

const char *lower_type_str(Lower *L, const IrNode *n)
{
	char buf[256];
	int k = snprintf(buf, sizeof buf, "%s[", ir_dtype_name(n->dtype));
	for (int i = 0; i < n->rank && k < (int)sizeof buf - 32; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "",
		              (long long)n->shape[i]);
	snprintf(buf + k, sizeof buf - k, "]");
	return arena_strdup(L->a, buf);
}

const char *lower_name(Lower *L, const char *s)
{
	if (!s)
		return "?";
	/* as the parser does: a megabyte identifier must not make a megabyte
	 * message */
	if (strlen(s) > 40)
		return arena_printf(L->a, "%.36s...", s);
	return s;
}

const char *lower_describe(Lower *L, Value v)
{
	switch (v.k) {
	case V_NUM:
		if (v.is_int)
			return arena_printf(L->a, "%lld", (long long)v.i);
		return arena_printf(L->a, "%g", v.f);
	case V_BOOL:
		return v.i ? "true" : "false";
	case V_STR:
		return "a string";
	case V_NODE:
		return arena_printf(L->a, "a tensor %s", lower_type_str(L, L->m->nodes[v.i]));
	case V_TUPLE:
		return arena_printf(L->a, "a tuple of %d values", v.n);
	case V_ERR:
		break;
	}
	return "an invalid value";
}

/* ---- constant arithmetic ---- */

static Value finite_or_err(Lower *L, double r, SrcLoc loc)
{
	if (!isfinite(r)) {
		diag_error(L->d, loc, "constant expression is not finite");
		return lower_err();
	}
	return lower_float(r);
}

Value lower_arith(Lower *L, int op, Value a, Value b, SrcLoc loc)
{
	if (a.is_int && b.is_int) {
		int64_t r = 0;
		bool ovf = false;
		switch (op) {
		case '+':
			ovf = __builtin_add_overflow(a.i, b.i, &r);
			break;
		case '-':
			ovf = __builtin_sub_overflow(a.i, b.i, &r);
			break;
		case '*':
			ovf = __builtin_mul_overflow(a.i, b.i, &r);
			break;
		case '/':
		case '%':
			if (b.i == 0) {
				diag_error(L->d, loc, "division by zero");
				return lower_err();
			}
			if (a.i == INT64_MIN && b.i == -1) {
				ovf = true;
				break;
			}
			/* C semantics: truncation toward zero */
			r = op == '/' ? a.i / b.i : a.i % b.i;
			break;
		default:
			DTM_ASSERT(0);
		}
		if (ovf) {
			diag_error(L->d, loc, "integer overflow in constant expression");
			return lower_err();
		}
		return lower_int(r);
	}
	double x = lower_num(a), y = lower_num(b), r = 0;
	switch (op) {
	case '+':
		r = x + y;
		break;
	case '-':
		r = x - y;
		break;
	case '*':
		r = x * y;
		break;
	case '/':
	case '%':
		if (y == 0) {
			diag_error(L->d, loc, "division by zero");
			return lower_err();
		}
		r = op == '/' ? x / y : fmod(x, y);
		break;
	default:
		DTM_ASSERT(0);
	}
	return finite_or_err(L, r, loc);
}

static const char *const const_funcs[] = {"sqrt", "exp",  "log",   "min",
                                          "max",  "ceil", "floor", NULL};

bool lower_is_const_func(const char *name)
{
	for (int i = 0; const_funcs[i]; i++)
		if (strcmp(name, const_funcs[i]) == 0)
			return true;
	return false;
}

Value lower_const_call(Lower *L, const char *name, const Value *args, int n, SrcLoc loc)
{
	bool minmax = strcmp(name, "min") == 0 || strcmp(name, "max") == 0;
	if (minmax && n < 2) {
		diag_error(L->d, loc, "%s takes at least 2 arguments, got %d", lower_name(L, name),
		           n);
		return lower_err();
	}
	if (!minmax && n != 1) {
		diag_error(L->d, loc, "%s takes 1 argument, got %d", lower_name(L, name), n);
		return lower_err();
	}
	if (minmax) {
		Value best = args[0];
		bool all_int = true;
		for (int i = 0; i < n; i++) {
			all_int &= args[i].is_int;
			bool less = lower_num(args[i]) < lower_num(best);
			if (i > 0 && (name[1] == 'i' ? less : lower_num(args[i]) > lower_num(best)))
				best = args[i];
		}
		return all_int ? best : lower_float(lower_num(best));
	}
	double x = lower_num(args[0]);
	if (strcmp(name, "sqrt") == 0) {
		if (x < 0) {
			diag_error(L->d, loc, "sqrt of a negative number (%g)", x);
			return lower_err();
		}
		return lower_float(sqrt(x));
	}
	if (strcmp(name, "exp") == 0)
		return finite_or_err(L, exp(x), loc);
	if (strcmp(name, "log") == 0) {
		if (x <= 0) {
			diag_error(L->d, loc, "log of a non-positive number (%g)", x);
			return lower_err();
		}
		return lower_float(log(x));
	}
	/* ceil and floor give integers, so `ceil(d / 3)` can size a tensor */
	if (args[0].is_int)
		return args[0];
	double r = name[0] == 'c' ? ceil(x) : floor(x);
	if (!(r > -9.2e18 && r < 9.2e18)) {
		diag_error(L->d, loc, "%s(%g) does not fit in an integer", lower_name(L, name), x);
		return lower_err();
	}
	return lower_int((int64_t)r);
}

bool lower_const_int(Lower *L, Scope *s, const AstNode *e, const char *what, int64_t *out)
{
	Value v = lower_expr(L, s, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_NUM || !v.is_int) {
		diag_error(L->d, e->loc, "%s must be an integer, got %s", what,
		           lower_describe(L, v));
		return false;
	}
	*out = v.i;
	return true;
}

bool lower_const_num(Lower *L, Scope *s, const AstNode *e, const char *what, double *out)
{
	Value v = lower_expr(L, s, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_NUM) {
		diag_error(L->d, e->loc, "%s must be a number, got %s", what, lower_describe(L, v));
		return false;
	}
	*out = lower_num(v);
	return true;
}

/* ---- names ---- */

static int edit_distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b);
	if (la > 64 || lb > 64)
		return 99;
	int row[65];
	for (int j = 0; j <= lb; j++)
		row[j] = j;
	for (int i = 1; i <= la; i++) {
		int prev = row[0];
		row[0] = i;
		for (int j = 1; j <= lb; j++) {
			int cur = row[j];
			int best = prev + (a[i - 1] != b[j - 1]);
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			prev = cur;
		}
	}
	return row[lb];
}

const char *lower_suggest(const char *name, const char *const *cands, int n)
{
	const char *best = NULL;
	int bestd = 3, len = (int)strlen(name);
	for (int i = 0; i < n; i++) {
		if (!cands[i] || strcmp(cands[i], name) == 0)
			continue;
		int dist = edit_distance(name, cands[i]);
		/* a one-letter name is "close" to every other short name: only
		 * suggest when the distance is smaller than the name */
		if (dist < bestd && dist < len) {
			bestd = dist;
			best = cands[i];
		}
	}
	return best;
}

bool lower_define_global(Lower *L, const char *name, Value v, SrcLoc loc)
{
	Binding *old = lower_lookup_local(&L->globals, name);
	SrcLoc first = {0};
	bool dup = old != NULL;
	if (old)
		first = old->loc;
	for (int i = 0; !dup && i < L->nblocks; i++)
		if (L->blocks[i].ast->name && strcmp(L->blocks[i].ast->name, name) == 0) {
			dup = true;
			first = L->blocks[i].ast->loc;
		}
	if (dup) {
		diag_error(L->d, loc, "duplicate name '%s'", lower_name(L, name));
		diag_note(L->d, first, "'%s' was first defined here", lower_name(L, name));
		return false;
	}
	lower_bind(L, &L->globals, name, v, loc);
	return true;
}

const AstNode *lower_kwarg(const AstNode *call, const char *name)
{
	for (int i = 0; i < call->args.n; i++) {
		const AstNode *a = call->args.items[i];
		if (a && a->kind == AST_KWARG && a->name && strcmp(a->name, name) == 0)
			return a;
	}
	return NULL;
}

/* "a, b or c" */
static const char *join_or(Lower *L, const char *const *names)
{
	char buf[512];
	int k = 0, n = 0;
	while (names[n])
		n++;
	buf[0] = 0;
	for (int i = 0; i < n && k < (int)sizeof buf - 64; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%s",
		              i == 0       ? ""
		              : i == n - 1 ? " or "
		                           : ", ",
		              names[i]);
	return arena_strdup(L->a, buf);
}

bool lower_check_kwargs(Lower *L, const AstNode *call, const char *const *known, const char *fn)
{
	bool ok = true;
	for (int i = 0; i < call->args.n; i++) {
		const AstNode *a = call->args.items[i];
		if (!a || a->kind != AST_KWARG || !a->name)
			continue;
		bool found = false;
		for (int j = 0; known[j]; j++)
			found |= strcmp(known[j], a->name) == 0;
		if (!found) {
			if (known[0])
				diag_error(L->d, a->loc,
				           "unknown keyword argument '%s' for %s (expected %s)",
				           lower_name(L, a->name), fn, join_or(L, known));
			else
				diag_error(L->d, a->loc,
				           "unknown keyword argument '%s' for %s (it takes none)",
				           lower_name(L, a->name), fn);
			ok = false;
			continue;
		}
		for (int j = 0; j < i; j++) {
			const AstNode *b = call->args.items[j];
			if (b && b->kind == AST_KWARG && b->name && strcmp(b->name, a->name) == 0) {
				diag_error(L->d, a->loc, "keyword argument '%s' given twice",
				           lower_name(L, a->name));
				ok = false;
				break;
			}
		}
	}
	return ok;
}

/* ---- let and -D ---- */

static bool parse_number(const char *s, Value *out)
{
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	long long i = strtoll(s, &end, 10);
	if (*end == 0 && errno == 0) {
		*out = lower_int(i);
		return true;
	}
	errno = 0;
	double f = strtod(s, &end);
	if (*end == 0 && errno == 0 && isfinite(f)) {
		*out = lower_float(f);
		return true;
	}
	return false;
}

void lower_lets(Lower *L)
{
	const LowerOptions *o = L->opt;
	int nd = o ? o->ndefines : 0;
	Value dval[LOWER_MAX_DEFINES];
	bool dok[LOWER_MAX_DEFINES];
	for (int j = 0; j < nd && j < LOWER_MAX_DEFINES; j++) {
		const char *name = o->define_names[j] ? o->define_names[j] : "";
		const char *val = o->define_values[j] ? o->define_values[j] : "";
		dok[j] = parse_number(val, &dval[j]);
		if (!dok[j])
			diag_error(L->d, lower_cmdline, "-D %s=%s: bad value (expected a number)",
			           lower_name(L, name), val);
		bool found = false;
		for (int i = 0; i < L->f->items.n; i++) {
			const AstNode *it = L->f->items.items[i];
			found |= it && it->kind == AST_LET && it->name &&
			         strcmp(it->name, name) == 0;
		}
		if (!found) {
			diag_error(L->d, lower_cmdline, "-D %s=%s: the model has no constant '%s'",
			           lower_name(L, name), val, lower_name(L, name));
			dok[j] = false;
		}
	}
	for (int i = 0; i < L->f->items.n; i++) {
		const AstNode *it = L->f->items.items[i];
		if (!it || it->kind != AST_LET || !it->name)
			continue;
		Value v = lower_err();
		int over = -1;
		/* the last -D for a name wins, as with a C compiler */
		for (int j = 0; j < nd && j < LOWER_MAX_DEFINES; j++)
			if (o->define_names[j] && strcmp(o->define_names[j], it->name) == 0)
				over = j;
		if (over >= 0) {
			if (dok[over])
				v = dval[over];
		} else if (it->lhs) {
			v = lower_expr(L, &L->globals, it->lhs);
			if (v.k != V_NUM && v.k != V_ERR) {
				diag_error(L->d, it->lhs->loc,
				           "constant '%s' must be a number, got %s",
				           lower_name(L, it->name), lower_describe(L, v));
				v = lower_err();
			}
		}
		lower_define_global(L, it->name, v, it->loc);
	}
}
