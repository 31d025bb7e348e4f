/* sema.c - the checks of lowering that are not expressions: constant
 * arithmetic, `let` with -D overrides, the mesh with --mesh, placement
 * annotations and the train section with --train overrides.
 *
 * Consumes the AST (through the Lower context of lower.c) and fills the
 * module's mesh, train configuration and global constants.  Every problem is
 * a diagnostic; the caller keeps going so one run reports many.
 */
#include "frontend/sema.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const SrcLoc cmdline = {"<command line>", 0, 0, 0};

Value sema_err(void)
{
	Value v = {0};
	v.k = V_ERR;
	return v;
}

Value sema_int(int64_t i)
{
	Value v = {0};
	v.k = V_NUM;
	v.is_int = true;
	v.i = i;
	v.f = (double)i;
	return v;
}

Value sema_float(double f)
{
	Value v = {0};
	v.k = V_NUM;
	v.f = f;
	return v;
}

double sema_num(Value v)
{
	return v.is_int ? (double)v.i : v.f;
}

const char *sema_type_str(Lower *L, const IrNode *n)
{
	char buf[256];
	int k = snprintf(buf, sizeof buf, "%s[", ir_dtype_name(n->dtype));
	for (int i = 0; i < n->rank && k < (int)sizeof buf - 32; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "",
		              (long long)n->shape[i]);
	snprintf(buf + k, sizeof buf - k, "]");
	return arena_strdup(L->a, buf);
}

const char *sema_name(Lower *L, const char *s)
{
	if (!s)
		return "?";
	/* as the parser does: a megabyte identifier must not make a megabyte
	 * message */
	if (strlen(s) > 40)
		return arena_printf(L->a, "%.36s...", s);
	return s;
}

const char *sema_describe(Lower *L, Value v)
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
		return arena_printf(L->a, "a tensor %s", sema_type_str(L, L->m->nodes[v.i]));
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
		return sema_err();
	}
	return sema_float(r);
}

Value sema_arith(Lower *L, int op, Value a, Value b, SrcLoc loc)
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
				return sema_err();
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
			return sema_err();
		}
		return sema_int(r);
	}
	double x = sema_num(a), y = sema_num(b), r = 0;
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
			return sema_err();
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

bool sema_is_const_func(const char *name)
{
	for (int i = 0; const_funcs[i]; i++)
		if (strcmp(name, const_funcs[i]) == 0)
			return true;
	return false;
}

Value sema_const_call(Lower *L, const char *name, const Value *args, int n, SrcLoc loc)
{
	bool minmax = strcmp(name, "min") == 0 || strcmp(name, "max") == 0;
	if (minmax && n < 2) {
		diag_error(L->d, loc, "%s takes at least 2 arguments, got %d", sema_name(L, name),
		           n);
		return sema_err();
	}
	if (!minmax && n != 1) {
		diag_error(L->d, loc, "%s takes 1 argument, got %d", sema_name(L, name), n);
		return sema_err();
	}
	if (minmax) {
		Value best = args[0];
		bool all_int = true;
		for (int i = 0; i < n; i++) {
			all_int &= args[i].is_int;
			bool less = sema_num(args[i]) < sema_num(best);
			if (i > 0 && (name[1] == 'i' ? less : sema_num(args[i]) > sema_num(best)))
				best = args[i];
		}
		return all_int ? best : sema_float(sema_num(best));
	}
	double x = sema_num(args[0]);
	if (strcmp(name, "sqrt") == 0) {
		if (x < 0) {
			diag_error(L->d, loc, "sqrt of a negative number (%g)", x);
			return sema_err();
		}
		return sema_float(sqrt(x));
	}
	if (strcmp(name, "exp") == 0)
		return finite_or_err(L, exp(x), loc);
	if (strcmp(name, "log") == 0) {
		if (x <= 0) {
			diag_error(L->d, loc, "log of a non-positive number (%g)", x);
			return sema_err();
		}
		return sema_float(log(x));
	}
	/* ceil and floor give integers, so `ceil(d / 3)` can size a tensor */
	if (args[0].is_int)
		return args[0];
	double r = name[0] == 'c' ? ceil(x) : floor(x);
	if (!(r > -9.2e18 && r < 9.2e18)) {
		diag_error(L->d, loc, "%s(%g) does not fit in an integer", sema_name(L, name), x);
		return sema_err();
	}
	return sema_int((int64_t)r);
}

bool sema_const_int(Lower *L, Scope *s, const AstNode *e, const char *what, int64_t *out)
{
	Value v = lower_expr(L, s, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_NUM || !v.is_int) {
		diag_error(L->d, e->loc, "%s must be an integer, got %s", what,
		           sema_describe(L, v));
		return false;
	}
	*out = v.i;
	return true;
}

bool sema_const_num(Lower *L, Scope *s, const AstNode *e, const char *what, double *out)
{
	Value v = lower_expr(L, s, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_NUM) {
		diag_error(L->d, e->loc, "%s must be a number, got %s", what, sema_describe(L, v));
		return false;
	}
	*out = sema_num(v);
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

const char *sema_suggest(const char *name, const char *const *cands, int n)
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

bool sema_define_global(Lower *L, const char *name, Value v, SrcLoc loc)
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
		diag_error(L->d, loc, "duplicate name '%s'", sema_name(L, name));
		diag_note(L->d, first, "'%s' was first defined here", sema_name(L, name));
		return false;
	}
	lower_bind(L, &L->globals, name, v, loc);
	return true;
}

const AstNode *sema_kwarg(const AstNode *call, const char *name)
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

bool sema_check_kwargs(Lower *L, const AstNode *call, const char *const *known, const char *fn)
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
				           sema_name(L, a->name), fn, join_or(L, known));
			else
				diag_error(L->d, a->loc,
				           "unknown keyword argument '%s' for %s (it takes none)",
				           sema_name(L, a->name), fn);
			ok = false;
			continue;
		}
		for (int j = 0; j < i; j++) {
			const AstNode *b = call->args.items[j];
			if (b && b->kind == AST_KWARG && b->name && strcmp(b->name, a->name) == 0) {
				diag_error(L->d, a->loc, "keyword argument '%s' given twice",
				           sema_name(L, a->name));
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
		*out = sema_int(i);
		return true;
	}
	errno = 0;
	double f = strtod(s, &end);
	if (*end == 0 && errno == 0 && isfinite(f)) {
		*out = sema_float(f);
		return true;
	}
	return false;
}

void sema_lets(Lower *L)
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
			diag_error(L->d, cmdline, "-D %s=%s: bad value (expected a number)",
			           sema_name(L, name), val);
		bool found = false;
		for (int i = 0; i < L->f->items.n; i++) {
			const AstNode *it = L->f->items.items[i];
			found |= it && it->kind == AST_LET && it->name &&
			         strcmp(it->name, name) == 0;
		}
		if (!found) {
			diag_error(L->d, cmdline, "-D %s=%s: the model has no constant '%s'",
			           sema_name(L, name), val, sema_name(L, name));
			dok[j] = false;
		}
	}
	for (int i = 0; i < L->f->items.n; i++) {
		const AstNode *it = L->f->items.items[i];
		if (!it || it->kind != AST_LET || !it->name)
			continue;
		Value v = sema_err();
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
				           sema_name(L, it->name), sema_describe(L, v));
				v = sema_err();
			}
		}
		sema_define_global(L, it->name, v, it->loc);
	}
}

/* ---- mesh and --mesh ---- */

static const char *axes_list(Lower *L, const Mesh *m)
{
	if (m->naxes == 0)
		return "none";
	char buf[256];
	int k = 0;
	for (int i = 0; i < m->naxes && k < (int)sizeof buf - 40; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", m->names[i]);
	return arena_strdup(L->a, buf);
}

/* --mesh "dp=4,tp=2": every listed axis must be declared; declared axes not
 * listed get size 1 (the text describes the whole mesh). */
static void apply_mesh_opt(Lower *L, const char *text)
{
	Mesh *m = &L->m->mesh;
	int64_t sizes[IR_MAX_AXES];
	bool seen[IR_MAX_AXES] = {0};
	for (int i = 0; i < IR_MAX_AXES; i++)
		sizes[i] = 1;
	const char *p = text;
	bool ok = true;
	while (ok) {
		const char *name = p;
		while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		       (*p >= '0' && *p <= '9'))
			p++;
		size_t nl = (size_t)(p - name);
		if (nl == 0 || *p != '=') {
			diag_error(L->d, cmdline, "--mesh '%s': expected NAME=SIZE[,NAME=SIZE...]",
			           text);
			return;
		}
		char *nm = arena_strndup(L->a, name, nl);
		p++;
		char *end;
		errno = 0;
		long long sz = strtoll(p, &end, 10);
		if (end == p || errno || (*end && *end != ',') || *p == '-' || *p == '+') {
			diag_error(L->d, cmdline, "--mesh '%s': expected NAME=SIZE[,NAME=SIZE...]",
			           text);
			return;
		}
		p = end;
		int ax = mesh_axis_index(m, nm);
		if (ax < 0) {
			diag_error(L->d, cmdline,
			           "--mesh: the model declares no mesh axis '%s' (axes: %s)",
			           sema_name(L, nm), axes_list(L, m));
			ok = false;
		} else if (seen[ax]) {
			diag_error(L->d, cmdline, "--mesh: axis '%s' is given twice",
			           sema_name(L, nm));
			ok = false;
		} else if (sz < 1) {
			diag_error(L->d, cmdline, "--mesh: axis '%s' must have size >= 1, got %lld",
			           sema_name(L, nm), sz);
			ok = false;
		} else {
			seen[ax] = true;
			sizes[ax] = sz;
		}
		if (*p == 0)
			break;
		p++; /* ',' */
	}
	if (ok)
		for (int i = 0; i < m->naxes; i++)
			m->sizes[i] = sizes[i];
}

void sema_mesh(Lower *L, const AstNode *mesh)
{
	Mesh *m = &L->m->mesh;
	SrcLoc firstloc[IR_MAX_AXES];
	m->naxes = 0;
	SrcLoc where = mesh ? mesh->loc : cmdline;
	if (mesh) {
		int n = mesh->nnames < mesh->args.n ? mesh->nnames : mesh->args.n;
		for (int i = 0; i < n; i++) {
			const AstName *an = &mesh->names[i];
			if (!an->name)
				continue;
			int prev = mesh_axis_index(m, an->name);
			if (prev >= 0) {
				diag_error(L->d, an->loc, "mesh axis '%s' is declared twice",
				           sema_name(L, an->name));
				diag_note(L->d, firstloc[prev], "first declared here");
				continue;
			}
			if (m->naxes == IR_MAX_AXES) {
				diag_error(L->d, an->loc, "too many mesh axes (at most %d)",
				           IR_MAX_AXES);
				break;
			}
			int64_t sz = 1;
			const AstNode *e = mesh->args.items[i];
			const char *what = arena_printf(L->a, "the size of mesh axis '%s'",
			                                sema_name(L, an->name));
			if (e && sema_const_int(L, &L->globals, e, what, &sz) && sz < 1) {
				diag_error(L->d, e->loc, "%s must be >= 1, got %lld", what,
				           (long long)sz);
				sz = 1;
			}
			firstloc[m->naxes] = an->loc;
			m->names[m->naxes] = an->name;
			m->sizes[m->naxes] = sz < 1 ? 1 : sz;
			m->naxes++;
		}
	}
	if (L->opt && L->opt->mesh) {
		apply_mesh_opt(L, L->opt->mesh);
		where = cmdline;
	}
	/* checked product: each size is tested first, so it cannot overflow */
	int64_t total = 1;
	bool big = false;
	for (int i = 0; i < m->naxes; i++) {
		if (m->sizes[i] > ((int64_t)1 << 20))
			big = true;
		else
			total *= m->sizes[i];
		if (total > ((int64_t)1 << 20))
			big = true;
	}
	if (big) {
		diag_error(L->d, where, "the mesh has more than %d ranks", 1 << 20);
		for (int i = 0; i < m->naxes; i++)
			m->sizes[i] = 1;
	}
	/* axis names are integer constants (their sizes), as in
	 * `stage i * pp / layers` */
	for (int i = 0; i < m->naxes; i++)
		sema_define_global(L, m->names[i], sema_int(m->sizes[i]), firstloc[i]);
}

/* ---- placements ---- */

bool sema_axes_mask(Lower *L, const AstName *names, int n, uint32_t *mask)
{
	bool ok = true;
	*mask = 0;
	for (int i = 0; i < n; i++) {
		if (!names[i].name) {
			ok = false;
			continue;
		}
		int ax = mesh_axis_index(&L->m->mesh, names[i].name);
		if (ax < 0) {
			diag_error(L->d, names[i].loc, "unknown mesh axis '%s'",
			           sema_name(L, names[i].name));
			const char *s =
			        sema_suggest(names[i].name, L->m->mesh.names, L->m->mesh.naxes);
			if (s)
				diag_note(L->d, names[i].loc, "did you mean '%s'?",
				          sema_name(L, s));
			ok = false;
		} else if (*mask & (1u << ax)) {
			diag_error(L->d, names[i].loc, "mesh axis '%s' appears more than once",
			           sema_name(L, names[i].name));
			ok = false;
		} else {
			*mask |= 1u << ax;
		}
	}
	return ok;
}

bool sema_placement(Lower *L, const AstPlacement *ap, int rank, const int64_t *shape,
                    const char *what, bool allow_partial, Placement *out)
{
	const Mesh *mesh = &L->m->mesh;
	memset(out, 0, sizeof *out);
	if (ap->too_many) {
		diag_error(L->d, ap->loc,
		           "placement has too many dims or axes (at most %d dims, %d axes)",
		           IR_MAX_RANK, IR_MAX_AXES);
		return false;
	}
	bool ok = true;
	uint32_t used = 0;
	int nd = ap->ndims < AST_MAX_PDIMS ? ap->ndims : AST_MAX_PDIMS;
	for (int d = 0; d < nd; d++) {
		int na = ap->naxes[d] < 8 ? ap->naxes[d] : 8;
		for (int j = 0; j < na; j++) {
			uint32_t bit;
			if (!sema_axes_mask(L, &ap->axes[d][j], 1, &bit)) {
				ok = false;
			} else if (used & bit) {
				diag_error(L->d, ap->axes[d][j].loc,
				           "mesh axis '%s' appears more than once in the placement",
				           ap->axes[d][j].name);
				ok = false;
			} else {
				used |= bit;
				if (d < IR_MAX_RANK)
					out->axes[d][out->naxes[d]++] =
					        (uint8_t)mesh_axis_index(mesh, ap->axes[d][j].name);
			}
		}
	}
	int np = ap->npartial < 8 ? ap->npartial : 8;
	if (np > 0 && !allow_partial) {
		diag_error(L->d, ap->partial[0].loc,
		           "%s cannot be partial (only intermediate values can)", what);
		ok = false;
	}
	for (int j = 0; j < np && allow_partial; j++) {
		uint32_t bit;
		if (!sema_axes_mask(L, &ap->partial[j], 1, &bit)) {
			ok = false;
		} else if (used & bit) {
			diag_error(L->d, ap->partial[j].loc,
			           "mesh axis '%s' appears more than once in the placement",
			           sema_name(L, ap->partial[j].name));
			ok = false;
		} else {
			used |= bit;
			out->partial |= bit;
		}
	}
	out->partial_op = IR_RED_SUM;
	if (!ok)
		return false;
	if (nd != rank) {
		diag_error(L->d, ap->loc, "placement has %d dims but %s has rank %d", nd, what,
		           rank);
		return false;
	}
	out->known = true;
	out->ndims = (uint8_t)nd;
	for (int d = 0; d < nd; d++) {
		int64_t parts = 1;
		for (int j = 0; j < out->naxes[d]; j++)
			parts *= mesh->sizes[out->axes[d][j]];
		/* torch.chunk shards only when the program asks for them: the
		 * default would let a typo in a size pass silently */
		if (parts <= 1 || shape[d] % parts == 0 ||
		    L->m->train.uneven_shards)
			continue;
		if (out->naxes[d] == 1) {
			diag_error(L->d, ap->axes[d][0].loc,
			           "dim %d of %s (size %lld) is not divisible by mesh axis '%s' "
			           "(size %lld)",
			           d, what, (long long)shape[d], mesh->names[out->axes[d][0]],
			           (long long)parts);
		} else {
			char buf[128];
			int k = 0;
			for (int j = 0; j < out->naxes[d] && k < 100; j++)
				k += snprintf(buf + k, sizeof buf - k, "%s%s", j ? ", " : "",
				              mesh->names[out->axes[d][j]]);
			diag_error(L->d, ap->axes[d][0].loc,
			           "dim %d of %s (size %lld) is not divisible by mesh axes (%s) "
			           "(size %lld)",
			           d, what, (long long)shape[d], buf, (long long)parts);
		}
		if (L->uneven_loc.file)
			diag_note(L->d, L->uneven_loc, "uneven shards are refused here");
		else
			diag_note(L->d, ap->axes[d][0].loc,
			          "'uneven_shards true' in the train section "
			          "allows uneven (torch.chunk) shards");
		ok = false;
	}
	if (!ok)
		out->known = false;
	return ok;
}

bool sema_annotate(Lower *L, const AstAnnot *an, IrNode *n, const char *what, bool allow_partial)
{
	if (!an || an->nopts < 1 || !an->opts)
		return false;
	Placement *opts = arena_alloc(L->a, sizeof(Placement) * (size_t)an->nopts);
	if (!opts)
		return false;
	bool ok = true;
	for (int i = 0; i < an->nopts; i++) {
		if (!an->opts[i] || !sema_placement(L, an->opts[i], n->rank, n->shape, what,
		                                    allow_partial, &opts[i]))
			ok = false;
	}
	if (!ok)
		return false;
	n->place = opts[0];
	n->place_from = -1;
	n->place_loc = an->loc; /* the origin that propagate and print report */
	if (an->is_choose) {
		int c = ir_choose_add(L->m, n->id, opts, an->nopts, an->loc);
		if (c >= 0)
			n->choose = c;
	}
	return true;
}

/* ---- the train section ---- */

static const char *const train_keys[] = {
        "optimizer",    "lr_schedule",       "zero",      "reshard_after_forward",
        "microbatches", "schedule",          "precision", "steps",
        "data",         "sequence_parallel", "recompute", "uneven_shards",
        "bucket_mb",    "prefetch",          "seed",      NULL,
};

/* The word of a keyword-valued setting: `precision bf16`, `schedule 1f1b`. */
static const char *word_of(const AstNode *e)
{
	if (e && (e->kind == AST_IDENT || e->kind == AST_STR))
		return e->name;
	return NULL;
}

static bool set_bool(Lower *L, const AstNode *e, const char *key, bool *out)
{
	Value v = lower_expr(L, &L->globals, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_BOOL) {
		diag_error(L->d, e->loc, "%s must be true or false, got %s", key,
		           sema_describe(L, v));
		return false;
	}
	*out = v.i != 0;
	return true;
}

static bool set_int(Lower *L, const AstNode *e, const char *key, int64_t lo, int64_t hi,
                    int64_t *out)
{
	int64_t v;
	if (!sema_const_int(L, &L->globals, e, key, &v))
		return false;
	if (v < lo || v > hi) {
		if (hi == INT64_MAX)
			diag_error(L->d, e->loc, "%s must be >= %lld, got %lld", key, (long long)lo,
			           (long long)v);
		else
			diag_error(L->d, e->loc, "%s must be between %lld and %lld, got %lld", key,
			           (long long)lo, (long long)hi, (long long)v);
		return false;
	}
	*out = v;
	return true;
}

/* The settings' values are evaluated here (they are expressions of the
 * language) and checked and stored by ir/validate.c, which IR text's
 * settings go through too: one range per setting (ir/train.def). */

/* An integer setting; `key` as the message names it (NULL: the setting's). */
static bool train_int(Lower *L, const AstNode *e, IrTrainField f, const char *key)
{
	int64_t v;
	if (!sema_const_int(L, &L->globals, e, key ? key : ir_train_key(f), &v))
		return false;
	return ir_train_set_int(&L->m->train, f, v, key, e->loc, L->d);
}

/* A real option such as lr = x, reported at the keyword argument. */
static void train_real(Lower *L, const AstNode *kw, IrTrainField f, const char *key)
{
	double v;
	if (!kw || !sema_const_num(L, &L->globals, kw->lhs, key, &v))
		return;
	ir_train_set_real(&L->m->train, f, v, key, kw->loc, L->d);
}

static void train_bool(Lower *L, const AstNode *e, IrTrainField f)
{
	bool b;
	if (set_bool(L, e, ir_train_key(f), &b))
		ir_train_set_int(&L->m->train, f, b, NULL, e->loc, L->d);
}

static void train_optimizer(Lower *L, const AstNode *e)
{
	IrTrain *t = &L->m->train;
	const char *name = e && (e->kind == AST_CALL || e->kind == AST_IDENT) ? e->name : NULL;
	static const char *const opts[] = {"adamw", "sgd", NULL};
	if (!ir_train_set_word(t, IR_TRAIN_OPTIMIZER, arena_strdup(L->a, sema_name(L, name)), NULL,
	                       e->loc, L->d)) {
		const char *s = name ? sema_suggest(name, opts, 2) : NULL;
		if (s)
			diag_note(L->d, e->loc, "did you mean '%s'?", sema_name(L, s));
		return;
	}
	if (e->kind != AST_CALL)
		return;
	bool adam = name[0] == 'a';
	static const char *const adam_kw[] = {"lr", "betas", "eps", "weight_decay", "clip", NULL};
	static const char *const sgd_kw[] = {"lr",           "momentum", "nesterov",
	                                     "weight_decay", "clip",     NULL};
	sema_check_kwargs(L, e, adam ? adam_kw : sgd_kw, name);
	int npos = 0;
	for (int i = 0; i < e->args.n; i++) {
		const AstNode *a = e->args.items[i];
		if (!a || a->kind == AST_KWARG)
			continue;
		/* the learning rate may be given positionally: adamw(3e-4) */
		if (npos++ == 0) {
			AstNode kw = *a;
			kw.kind = AST_KWARG;
			kw.lhs = (AstNode *)a;
			if (sema_kwarg(e, "lr"))
				diag_error(L->d, a->loc, "lr given twice");
			else
				train_real(L, &kw, IR_TRAIN_LR, "lr");
		} else {
			diag_error(L->d, a->loc,
			           "%s takes one positional argument (lr); name the others",
			           sema_name(L, name));
		}
	}
	train_real(L, sema_kwarg(e, "lr"), IR_TRAIN_LR, "lr");
	train_real(L, sema_kwarg(e, "weight_decay"), IR_TRAIN_WEIGHT_DECAY, "weight_decay");
	train_real(L, sema_kwarg(e, "clip"), IR_TRAIN_CLIP, "clip");
	if (adam) {
		train_real(L, sema_kwarg(e, "eps"), IR_TRAIN_EPS, "eps");
		const AstNode *kb = sema_kwarg(e, "betas");
		if (kb) {
			Value v = lower_expr(L, &L->globals, kb->lhs);
			if (v.k == V_ERR)
				return;
			if (v.k != V_TUPLE || v.n != 2 || v.items[0].k != V_NUM ||
			    v.items[1].k != V_NUM) {
				diag_error(L->d, kb->loc,
				           "betas must be a pair of numbers (b1, b2), got %s",
				           sema_describe(L, v));
				return;
			}
			if (ir_train_set_real(t, IR_TRAIN_BETA1, sema_num(v.items[0]), "betas", kb->loc,
			                      L->d))
				ir_train_set_real(t, IR_TRAIN_BETA2, sema_num(v.items[1]), "betas",
				                  kb->loc, L->d);
		}
	} else {
		train_real(L, sema_kwarg(e, "momentum"), IR_TRAIN_MOMENTUM, "momentum");
		const AstNode *kn = sema_kwarg(e, "nesterov");
		if (kn)
			train_bool(L, kn->lhs, IR_TRAIN_NESTEROV);
	}
}

static void train_lr_schedule(Lower *L, const AstNode *e)
{
	const char *name = e && (e->kind == AST_CALL || e->kind == AST_IDENT) ? e->name : NULL;
	if (!ir_train_set_word(&L->m->train, IR_TRAIN_LR_SCHEDULE,
	                       arena_strdup(L->a, sema_name(L, name)), NULL, e->loc, L->d))
		return;
	if (e->kind != AST_CALL)
		return;
	static const char *const none[] = {NULL};
	static const char *const cos_kw[] = {"warmup", "min_lr", NULL};
	bool cos = name[1] == 'o' && name[2] == 's';
	sema_check_kwargs(L, e, cos ? cos_kw : none, name);
	for (int i = 0; i < e->args.n; i++) {
		const AstNode *a = e->args.items[i];
		if (a && a->kind != AST_KWARG)
			diag_error(L->d, a->loc, "%s takes only keyword arguments",
			           sema_name(L, name));
	}
	if (!cos)
		return;
	const AstNode *kw = sema_kwarg(e, "warmup");
	if (kw)
		train_int(L, kw->lhs, IR_TRAIN_WARMUP, NULL);
	train_real(L, sema_kwarg(e, "min_lr"), IR_TRAIN_MIN_LR, "min_lr");
}

static void train_schedule(Lower *L, const AstNode *e)
{
	IrTrain *t = &L->m->train;
	const char *w = word_of(e);
	if (e->kind == AST_CALL && e->name && strcmp(e->name, "interleaved") == 0) {
		static const char *const none[] = {NULL};
		sema_check_kwargs(L, e, none, "interleaved");
		int npos = 0;
		const AstNode *arg = NULL;
		for (int i = 0; i < e->args.n; i++)
			if (e->args.items[i] && e->args.items[i]->kind != AST_KWARG && npos++ == 0)
				arg = e->args.items[i];
		if (npos != 1) {
			diag_error(L->d, e->loc,
			           "interleaved takes 1 argument (virtual stages per rank), got %d",
			           npos);
			return;
		}
		if (train_int(L, arg, IR_TRAIN_VIRTUAL_STAGES, "the number of virtual stages"))
			ir_train_set_word(t, IR_TRAIN_SCHEDULE, "interleaved", NULL, e->loc, L->d);
		return;
	}
	if (w && strcmp(w, "interleaved") == 0) {
		diag_error(
		        L->d, e->loc,
		        "interleaved needs the number of virtual stages per rank: interleaved(2)");
		return;
	}
	/* a call other than interleaved(v) names no schedule */
	const char *name = w ? w : e->kind == AST_CALL ? e->name : NULL;
	if (w && ir_train_set_word(t, IR_TRAIN_SCHEDULE, arena_strdup(L->a, w), NULL, e->loc,
	                           L->d)) {
		ir_train_set_int(t, IR_TRAIN_VIRTUAL_STAGES, 1, NULL, e->loc, L->d);
		return;
	}
	if (!w)
		diag_error(L->d, e->loc,
		           "unknown schedule '%s' (expected gpipe, 1f1b, interleaved(v) or zb)",
		           sema_name(L, name));
}

static void train_setting(Lower *L, const AstNode *s, const AstNode **seen)
{
	IrTrain *t = &L->m->train;
	int key = -1;
	for (int i = 0; train_keys[i]; i++)
		if (strcmp(train_keys[i], s->name) == 0)
			key = i;
	if (key < 0) {
		diag_error(
		        L->d, s->loc,
		        "unknown train setting '%s' (known: optimizer, lr_schedule, "
		        "zero, reshard_after_forward, microbatches, schedule, precision, steps, "
		        "data, "
		        "sequence_parallel, recompute, uneven_shards, bucket_mb, prefetch, seed)",
		        sema_name(L, s->name));
		int n = 0;
		while (train_keys[n])
			n++;
		const char *sug = sema_suggest(s->name, train_keys, n);
		if (sug)
			diag_note(L->d, s->loc, "did you mean '%s'?", sug);
		return;
	}
	if (seen[key]) {
		diag_error(L->d, s->loc, "duplicate train setting '%s'", sema_name(L, s->name));
		diag_note(L->d, seen[key]->loc, "first set here");
		return;
	}
	seen[key] = s;
	const char *k = s->name;
	if (s->args.n != 1 || !s->args.items[0]) {
		if (s->args.n == 0)
			diag_error(L->d, s->loc, "train setting '%s' needs a value", k);
		else
			diag_error(L->d, s->loc, "train setting '%s' takes one value, got %d", k,
			           s->args.n);
		return;
	}
	if (s->nnames > 0 && strcmp(k, "zero") != 0) {
		diag_error(L->d, s->names[0].loc, "'over' is only allowed after 'zero'");
		return;
	}
	const AstNode *e = s->args.items[0];
	const char *w = word_of(e);
	int64_t iv;
	if (!strcmp(k, "optimizer")) {
		train_optimizer(L, e);
	} else if (!strcmp(k, "lr_schedule")) {
		train_lr_schedule(L, e);
	} else if (!strcmp(k, "zero")) {
		train_int(L, e, IR_TRAIN_ZERO, NULL);
		if (s->nnames > 0) {
			uint32_t mask;
			if (sema_axes_mask(L, s->names, s->nnames, &mask))
				ir_train_set_int(t, IR_TRAIN_ZERO_AXES, mask, NULL, s->names[0].loc, L->d);
		}
	} else if (!strcmp(k, "reshard_after_forward")) {
		train_bool(L, e, IR_TRAIN_RESHARD_AFTER_FORWARD);
	} else if (!strcmp(k, "microbatches")) {
		train_int(L, e, IR_TRAIN_MICROBATCHES, NULL);
	} else if (!strcmp(k, "schedule")) {
		train_schedule(L, e);
	} else if (!strcmp(k, "precision")) {
		ir_train_set_word(t, IR_TRAIN_PRECISION, arena_strdup(L->a, sema_name(L, w)), NULL,
		                  e->loc, L->d);
	} else if (!strcmp(k, "steps")) {
		train_int(L, e, IR_TRAIN_STEPS, NULL);
	} else if (!strcmp(k, "data")) {
		/* synthetic, or a string (a path); the check refuses the empty one */
		if (e->kind == AST_IDENT && w && !strcmp(w, "synthetic"))
			ir_train_set_word(t, IR_TRAIN_DATA, "synthetic", NULL, e->loc, L->d);
		else if (e->kind == AST_STR && w)
			ir_train_set_word(t, IR_TRAIN_DATA, arena_strdup(L->a, w), NULL, e->loc, L->d);
		else
			diag_error(L->d, e->loc, "data must be synthetic or a \"path\"");
	} else if (!strcmp(k, "sequence_parallel")) {
		train_bool(L, e, IR_TRAIN_SEQUENCE_PARALLEL);
		/* its warning (it changes nothing) points at the whole setting */
		if (t->loc[IR_TRAIN_SEQUENCE_PARALLEL].file)
			t->loc[IR_TRAIN_SEQUENCE_PARALLEL] = s->loc;
	} else if (!strcmp(k, "recompute")) {
		train_bool(L, e, IR_TRAIN_RECOMPUTE);
		if (t->loc[IR_TRAIN_RECOMPUTE].file)
			t->loc[IR_TRAIN_RECOMPUTE] = s->loc;
	} else if (!strcmp(k, "uneven_shards")) {
		train_bool(L, e, IR_TRAIN_UNEVEN_SHARDS);
		L->uneven_loc = s->loc;
	} else if (!strcmp(k, "bucket_mb")) {
		/* the .dtm's unit: MB, up to bucket_bytes' 2^40 */
		if (set_int(L, e, k, 0, (int64_t)1 << 20, &iv))
			ir_train_set_int(t, IR_TRAIN_BUCKET_BYTES, iv << 20, k, e->loc, L->d);
	} else if (!strcmp(k, "prefetch")) {
		train_int(L, e, IR_TRAIN_PREFETCH, NULL);
	} else if (!strcmp(k, "seed")) {
		train_int(L, e, IR_TRAIN_SEED, NULL);
	}
}

/* Re-reports the diagnostics a --train override produced into a private
 * Diag (printed there without a location: the setting's text has no file)
 * as `<command line>: error: --train TEXT: message`. */
static void forward_train_diags(Lower *L, const char *text, const char *buf, int nerr)
{
	static const char err[] = "dtmc: error: ", note[] = "dtmc: note: ";
	int forwarded = 0;
	for (const char *p = buf; p && *p;) {
		const char *e = strchr(p, '\n');
		int n = e ? (int)(e - p) : (int)strlen(p);
		if (!strncmp(p, err, sizeof err - 1)) {
			diag_error(L->d, cmdline, "--train %s: %.*s", text,
			           n - (int)(sizeof err - 1), p + sizeof err - 1);
			forwarded++;
		} else if (!strncmp(p, note, sizeof note - 1) && forwarded > 0 &&
		           !strstr(p, "too many errors")) {
			diag_note(L->d, cmdline, "%.*s", n - (int)(sizeof note - 1),
			          p + sizeof note - 1);
		}
		p = e ? e + 1 : NULL;
	}
	if (nerr > 0 && forwarded == 0)
		diag_error(L->d, cmdline, "--train %s: bad setting", text);
}

static bool is_ident(const char *s, size_t n)
{
	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* --train KEY=VALUE: parsed as the one-setting section `train { KEY VALUE }`
 * with the parser, then checked by train_setting exactly like a setting of
 * the file, so the keys, value syntax and limits are the same.  The setting
 * replaces the file's (each override gets a fresh `seen`). */
static void train_override(Lower *L, const char *text)
{
	const char *eq = strchr(text, '='), *key = text;
	while (*key == ' ' || *key == '\t')
		key++;
	size_t kn = eq && eq > key ? (size_t)(eq - key) : 0;
	while (kn > 0 && (key[kn - 1] == ' ' || key[kn - 1] == '\t'))
		kn--;
	if (!eq || !is_ident(key, kn)) {
		diag_error(L->d, cmdline,
		           "--train %s: expected KEY=VALUE, VALUE as in the train section "
		           "(--train zero=3, --train \"zero=3 over dp\")",
		           text);
		return;
	}
	const char *v = eq + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (!*v) {
		diag_error(L->d, cmdline, "--train %s: train setting '%.*s' needs a value", text,
		           (int)kn, key);
		return;
	}
	SrcFile *src = arena_alloc(L->a, sizeof *src);
	char *body = arena_printf(L->a, "train {\n%.*s %s\n}\n", (int)kn, key, v);
	char *buf = NULL;
	size_t blen = 0;
	FILE *mem = src && body ? open_memstream(&buf, &blen) : NULL;
	if (!mem) {
		diag_error(L->d, cmdline, "--train %s: out of memory", text);
		return;
	}
	src->name = NULL; /* locations print as none: forward_train_diags names the text */
	src->text = body;
	src->len = strlen(body);
	Diag sub;
	diag_init(&sub, mem);
	AstFile f;
	if (ast_parse(L->a, &sub, src, &f)) {
		const AstNode *t = f.items.n == 1 ? f.items.items[0] : NULL;
		const AstNode *s =
		        t && t->kind == AST_TRAIN && t->body.n == 1 ? t->body.items[0] : NULL;
		if (!s || s->kind != AST_SETTING || !s->name) {
			diag_error(&sub, (SrcLoc){0}, "expected one setting");
		} else {
			const AstNode *seen[sizeof train_keys / sizeof train_keys[0]] = {0};
			Diag *saved = L->d;
			SrcLoc before[IR_TRAIN_COUNT];
			memcpy(before, L->m->train.loc, sizeof before);
			L->d = &sub;
			train_setting(L, s, seen);
			L->d = saved;
			/* what the override set was given on the command line */
			for (int f = 0; f < IR_TRAIN_COUNT; f++)
				if (memcmp(&before[f], &L->m->train.loc[f], sizeof before[f]) != 0)
					L->m->train.loc[f] = cmdline;
			if (!strcmp(s->name, "uneven_shards"))
				L->uneven_loc = cmdline;
		}
	}
	fclose(mem);
	forward_train_diags(L, text, buf, sub.nerr);
	free(buf);
}

void sema_train(Lower *L, const AstNode *train)
{
	IrTrain *t = &L->m->train;
	int nerr0 = L->d->nerr;
	const Mesh *mesh = &L->m->mesh;
	/* ZeRO shards over dp when there is one, else over the first axis */
	int dp = mesh_axis_index(mesh, "dp");
	t->zero_axes = dp >= 0 ? 1u << dp : mesh->naxes > 0 ? 1u : 0u;
	const AstNode *seen[sizeof train_keys / sizeof train_keys[0]] = {0};
	for (int i = 0; train && i < train->body.n; i++) {
		const AstNode *s = train->body.items[i];
		if (!s || s->kind != AST_SETTING || !s->name) {
			if (s)
				diag_error(L->d, s->loc, "expected a train setting");
			continue;
		}
		train_setting(L, s, seen);
	}
	for (int i = 0; L->opt && i < L->opt->ntrain && i < LOWER_MAX_TRAIN; i++)
		train_override(L, L->opt->train[i] ? L->opt->train[i] : "");
	/* what the settings ask of each other, as IR text's are checked */
	if (L->d->nerr == nerr0)
		ir_train_check(t, L->d);
	L->train_seen = true;
}
