/* lower.c - check a parsed .dtm file and build the global IR.
 *
 * Consumes an AstFile; produces an IrModule whose nodes are in topological
 * order with global shapes: top-level inputs and params first, then the
 * forward program with every block call inlined (its params named
 * BLOCK.INDEX.PARAM, its nodes numbered by outermost instance in
 * IrNode.block) and every `for` unrolled (nodes of a staged iteration
 * carry that pipeline stage).  Constants fold while lowering, so
 * `x * (1 / sqrt(d))` is one scale node.  Shapes come from ir_infer, run on
 * each node as it is made.
 *
 * Errors do not stop lowering: a failed expression yields V_ERR, which is
 * bound to the assignment's targets and silently propagates, so each mistake
 * is reported once.  lower_consts.c holds constants, lower_mesh.c the
 * mesh and placements, lower_train.c the train section (lower_impl.h).
 */
#include "frontend/lower_impl.h"
#include "support/hash.h"

#include <math.h>
#include <string.h>

/* ---- scopes ---- */

Value lower_node_val(int id)
{
	Value v = {0};
	v.k = V_NODE;
	v.i = id;
	return v;
}

#define SCOPE_INDEX_MIN 16 /* bindings before a scope gets its hash index */

/* The index slot of name, or of the empty slot where it would go. */
static int *index_find(const Scope *s, const char *name)
{
	uint32_t mask = (uint32_t)s->nslot - 1, i = hash_fnv1a32(name) & mask;
	int *tomb = NULL;
	for (;; i = (i + 1) & mask) {
		int v = s->slot[i];
		if (v == 0)
			return tomb ? tomb : &s->slot[i];
		if (v < 0) {
			if (!tomb)
				tomb = &s->slot[i];
		} else if (strcmp(s->b[v - 1].name, name) == 0) {
			return &s->slot[i];
		}
	}
}

static bool index_rebuild(Lower *L, Scope *s)
{
	int n = 64;
	while (n < 4 * s->cap)
		n *= 2;
	int *slot = arena_alloc(L->a, sizeof(int) * (size_t)n);
	if (!slot)
		return false;
	s->slot = slot;
	s->nslot = n;
	s->ntomb = 0;
	for (int i = 0; i < s->n; i++)
		*index_find(s, s->b[i].name) = i + 1;
	return true;
}

Binding *lower_lookup_local(Scope *s, const char *name)
{
	if (s->nslot) {
		int v = *index_find(s, name);
		return v > 0 ? &s->b[v - 1] : NULL;
	}
	for (int i = s->n - 1; i >= 0; i--)
		if (strcmp(s->b[i].name, name) == 0)
			return &s->b[i];
	return NULL;
}

Binding *lower_lookup(Scope *s, const char *name)
{
	for (; s; s = s->parent) {
		Binding *b = lower_lookup_local(s, name);
		if (b)
			return b;
	}
	return NULL;
}

void lower_bind(Lower *L, Scope *s, const char *name, Value v, SrcLoc loc)
{
	Binding *b = lower_lookup_local(s, name);
	if (!b) {
		if (s->n == s->cap) {
			int cap = s->cap ? 2 * s->cap : 16;
			Binding *nb = arena_alloc(L->a, sizeof(Binding) * (size_t)cap);
			if (!nb)
				return;
			if (s->n)
				memcpy(nb, s->b, sizeof(Binding) * (size_t)s->n);
			s->b = nb;
			s->cap = cap;
		}
		b = &s->b[s->n++];
		b->name = name;
		/* the index keeps under a quarter full (deleted slots count) */
		if (s->n > SCOPE_INDEX_MIN && (!s->nslot || 4 * (s->n + s->ntomb) > s->nslot)) {
			if (!index_rebuild(L, s))
				s->nslot = 0; /* out of memory: linear lookups still work */
		} else if (s->nslot) {
			*index_find(s, name) = s->n;
		}
	}
	b->v = v;
	b->loc = loc;
}

/* Removes name's binding: the last binding takes its place. */
static void unbind(Scope *s, const char *name)
{
	Binding *b = lower_lookup_local(s, name);
	if (!b)
		return;
	if (s->nslot) {
		*index_find(s, name) = -1;
		s->ntomb++;
		if (b != &s->b[s->n - 1])
			*index_find(s, s->b[s->n - 1].name) = (int)(b - s->b) + 1;
	}
	*b = s->b[--s->n];
}

/* ---- nodes ---- */

void lower_too_large(Lower *L, SrcLoc loc, const char *why)
{
	if (!L->fatal)
		diag_error(L->d, loc, "program too large after unrolling (%s)", why);
	L->fatal = true;
}

IrNode *lower_new_node(Lower *L, IrOp op, const int *ops, int nops, SrcLoc loc)
{
	if (L->fatal)
		return NULL;
	IrNode *n = ir_node_new(L->m, op, ops, nops, loc);
	if (!n) {
		lower_too_large(L, loc, arena_printf(L->a, "more than %d nodes", IR_MAX_NODES));
		return NULL;
	}
	ir_set_stage(L->m, n, L->stage);
	ir_set_block(L->m, n, L->block);
	n->role = IR_ROLE_ACT;
	n->place = 0; /* not known */
	return n;
}

/* Runs shape inference on a node whose operands and attrs are set. */
Value lower_finish(Lower *L, IrNode *n)
{
	if (!n || !ir_infer(L->m, n, L->d))
		return lower_err();
	return lower_node_val(n->id);
}

static IrNode *node_of(Lower *L, Value v)
{
	return v.k == V_NODE ? L->m->nodes[v.i] : NULL;
}

/* A scalar constant of dtype t: a number in arithmetic with a tensor
 * takes the tensor's float dtype (as a Python scalar does in torch), so it
 * never promotes the tensor. */
static Value make_const(Lower *L, double c, IrDtype t, SrcLoc loc)
{
	IrNode *n = lower_new_node(L, IR_OP_CONST, NULL, 0, loc);
	if (!n)
		return lower_err();
	n->dtype = t;
	n->rank = 0;
	ir_attr_scalar_mut(L->m, n)->value = c;
	return lower_finish(L, n);
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

Value lower_cast(Lower *L, Value x, IrDtype t, SrcLoc loc)
{
	IrNode *n;
	if (lower_make1(L, IR_OP_CAST, x, loc, &n).k == V_ERR)
		return lower_err();
	n->dtype = t;
	return lower_finish(L, n);
}

bool lower_promote(Lower *L, Value *v, int n, SrcLoc loc)
{
	IrDtype t = IR_F32;
	bool any = false, mixed = false;
	for (int i = 0; i < n; i++) {
		IrNode *x = v[i].k == V_NODE ? L->m->nodes[v[i].i] : NULL;
		if (!x || !is_float(x->dtype))
			continue;
		mixed |= any && x->dtype != t;
		t = any ? ir_dtype_promote(t, x->dtype) : x->dtype;
		any = true;
	}
	for (int i = 0; mixed && i < n; i++) {
		IrNode *x = v[i].k == V_NODE ? L->m->nodes[v[i].i] : NULL;
		if (x && is_float(x->dtype) && x->dtype != t &&
		    (v[i] = lower_cast(L, v[i], t, loc)).k == V_ERR)
			return false;
	}
	return true;
}

Value lower_make1(Lower *L, IrOp op, Value x, SrcLoc loc, IrNode **out)
{
	int id = (int)x.i;
	IrNode *n = lower_new_node(L, op, &id, 1, loc);
	if (out)
		*out = n;
	return n ? lower_node_val(n->id) : lower_err();
}

Value lower_make2(Lower *L, IrOp op, Value a, Value b, SrcLoc loc)
{
	int ops[2] = {(int)a.i, (int)b.i};
	return lower_finish(L, lower_new_node(L, op, ops, 2, loc));
}

Value lower_make_scale(Lower *L, Value x, double c, SrcLoc loc)
{
	IrNode *n;
	if (lower_make1(L, IR_OP_SCALE, x, loc, &n).k == V_ERR)
		return lower_err();
	ir_attr_scalar_mut(L->m, n)->value = c;
	return lower_finish(L, n);
}

static BlockDef *find_block(Lower *L, const char *name)
{
	for (int i = 0; i < L->nblocks; i++)
		if (L->blocks[i].ast->name && strcmp(L->blocks[i].ast->name, name) == 0)
			return &L->blocks[i];
	return NULL;
}

/* Evaluates the positional arguments of a call (see Args). */
static void args_push(Lower *L, Args *a, Value v, SrcLoc loc)
{
	if (a->n == a->cap) {
		int cap = a->cap ? 2 * a->cap : 8;
		Value *nv = arena_alloc(L->a, sizeof(Value) * (size_t)cap);
		SrcLoc *nl = arena_alloc(L->a, sizeof(SrcLoc) * (size_t)cap);
		if (!nv || !nl) {
			a->ok = false;
			return;
		}
		if (a->n) {
			memcpy(nv, a->v, sizeof(Value) * (size_t)a->n);
			memcpy(nl, a->loc, sizeof(SrcLoc) * (size_t)a->n);
		}
		a->v = nv;
		a->loc = nl;
		a->cap = cap;
	}
	a->v[a->n] = v;
	a->loc[a->n++] = loc;
}

static void gather_args(Lower *L, Scope *s, const AstNode *call, const Builtin *bi, Args *out)
{
	memset(out, 0, sizeof *out);
	out->ok = true;
	bool kw_seen = false;
	for (int i = 0; i < call->args.n; i++) {
		const AstNode *a = call->args.items[i];
		if (!a) {
			out->ok = false;
			continue;
		}
		if (a->kind == AST_KWARG) {
			kw_seen = true;
			continue;
		}
		if (kw_seen) {
			diag_error(L->d, a->loc, "positional argument after keyword arguments");
			out->ok = false;
		}
		/* a word the builtin reads as a name (cast's dtype), not a variable */
		if (bi && lower_builtin_word_arg(bi, out->n) && a->kind == AST_IDENT && a->name) {
			Value w = {0};
			w.k = V_STR;
			w.s = a->name;
			args_push(L, out, w, a->loc);
			continue;
		}
		Value v = lower_expr(L, s, a);
		if (v.k == V_ERR)
			out->ok = false;
		bool spread = v.k == V_TUPLE && a->kind != AST_TUPLE;
		for (int j = 0; spread && j < v.n; j++)
			spread = v.items[j].k == V_NODE;
		if (spread)
			for (int j = 0; j < v.n; j++)
				args_push(L, out, v.items[j], a->loc);
		else
			args_push(L, out, v, a->loc);
	}
}

static bool has_kwargs(const AstNode *call)
{
	for (int i = 0; i < call->args.n; i++)
		if (call->args.items[i] && call->args.items[i]->kind == AST_KWARG)
			return true;
	return false;
}

/* ---- blocks ---- */

static void lower_stmts(Lower *L, Scope *s, const AstList *body, Value *ret);

static Value call_block(Lower *L, BlockDef *b, const Args *a, SrcLoc loc)
{
	const AstNode *blk = b->ast;
	if (b->active) {
		char buf[512];
		int k = 0, from = 0;
		for (int i = 0; i < L->nstack; i++)
			if (L->stack[i] == b)
				from = i;
		for (int i = from; i < L->nstack && k < 400; i++)
			k += snprintf(buf + k, sizeof buf - k, "%s -> ",
			              lower_name(L, L->stack[i]->ast->name));
		if (k < 400)
			snprintf(buf + k, sizeof buf - k, "%s", lower_name(L, blk->name));
		diag_error(L->d, loc, "recursive block call: %s", buf);
		L->recursion = true;
		return lower_err();
	}
	if (a->n != blk->nnames && a->ok) {
		diag_error(L->d, loc, "block '%s' takes %d argument%s, got %d",
		           lower_name(L, blk->name), blk->nnames, blk->nnames == 1 ? "" : "s",
		           a->n);
		return lower_err();
	}
	if (b->bad || !a->ok)
		return lower_err();
	if (L->nstack >= LOWER_MAX_NEST) {
		diag_error(L->d, loc, "block calls nested too deeply (more than %d)",
		           LOWER_MAX_NEST);
		L->fatal = true;
		return lower_err();
	}
	if (++L->iters > LOWER_MAX_ITERS) {
		lower_too_large(L, loc,
		                arena_printf(L->a, "more than %d loop iterations and block calls",
		                             LOWER_MAX_ITERS));
		return lower_err();
	}
	Scope sc = {0};
	sc.parent = &L->globals;
	for (int i = 0; i < blk->nnames; i++)
		lower_bind(L, &sc, blk->names[i].name, a->v[i], blk->names[i].loc);
	const char *saved_prefix = L->prefix;
	int saved_depth = L->depth, saved_unit = L->unit;
	if (L->nstack == 0)
		L->block = L->nblock++;
	L->unit = L->nunit++;
	L->prefix = arena_printf(L->a, "%s.%d.", blk->name, b->ncalls++);
	L->stack[L->nstack++] = b;
	b->active = true;
	int nerr0 = L->d->nerr;
	Value ret = lower_err();
	lower_stmts(L, &sc, &blk->body, &ret);
	b->active = false;
	L->nstack--;
	if (L->nstack == 0)
		L->block = -1;
	L->prefix = saved_prefix;
	L->depth = saved_depth;
	L->unit = saved_unit;
	/* a block that failed once would fail the same way at every call:
	 * report it once */
	if (L->d->nerr > nerr0) {
		b->bad = true;
		if (!L->recursion)
			diag_note(L->d, loc, "in the instance of block '%s' called here",
			          lower_name(L, blk->name));
		if (L->nstack == 0)
			L->recursion = false;
		return lower_err();
	}
	return ret;
}

/* Checks, once per definition, what every instance would get wrong. */
static bool check_returns(Lower *L, const AstList *body, bool top)
{
	bool ok = true;
	for (int i = 0; i < body->n; i++) {
		const AstNode *st = body->items[i];
		if (!st)
			continue;
		if (st->kind == AST_RETURN && (!top || i != body->n - 1)) {
			diag_error(L->d, st->loc, "return must be the last statement of a block");
			ok = false;
		} else if (st->kind == AST_RETURN && st->args.n == 0) {
			diag_error(L->d, st->loc, "return needs a value");
			ok = false;
		} else if (st->kind == AST_FOR) {
			ok &= check_returns(L, &st->body, false);
		}
	}
	return ok;
}

static void define_block(Lower *L, const AstNode *it)
{
	BlockDef *prev = find_block(L, it->name);
	BlockDef *b = &L->blocks[L->nblocks++];
	b->ast = it;
	if (prev) {
		diag_error(L->d, it->loc, "duplicate block '%s'", lower_name(L, it->name));
		diag_note(L->d, prev->ast->loc, "'%s' was first defined here",
		          lower_name(L, it->name));
		b->bad = true;
		return;
	}
	if (lower_find_builtin(it->name) || lower_is_const_func(it->name) ||
	    !strcmp(it->name, "recv")) {
		diag_error(L->d, it->loc, "block '%s' has the name of a builtin function",
		           lower_name(L, it->name));
		b->bad = true;
	}
	for (int i = 0; i < it->nnames; i++)
		for (int j = 0; j < i; j++)
			if (it->names[i].name && it->names[j].name &&
			    !strcmp(it->names[i].name, it->names[j].name)) {
				diag_error(L->d, it->names[i].loc,
				           "duplicate argument '%s' in block '%s'",
				           lower_name(L, it->names[i].name),
				           lower_name(L, it->name));
				b->bad = true;
			}
	const AstNode *last = it->body.n ? it->body.items[it->body.n - 1] : NULL;
	if (!last || last->kind != AST_RETURN) {
		diag_error(L->d, it->loc, "block '%s' has no return statement",
		           lower_name(L, it->name));
		b->bad = true;
	}
	if (!check_returns(L, &it->body, true))
		b->bad = true;
}

/* ---- expressions ---- */

static void undefined(Lower *L, Scope *s, const AstNode *e, bool call)
{
	const char *cands[512];
	int n = 0;
	if (call) {
		n = lower_builtin_names(cands, 400);
		static const char *const cf[] = {"sqrt", "exp",  "log",  "min",
		                                 "max",  "ceil", "floor"};
		for (int i = 0; i < 7; i++)
			cands[n++] = cf[i];
		for (int i = 0; i < L->nblocks && n < 512; i++)
			cands[n++] = L->blocks[i].ast->name;
	} else {
		for (Scope *p = s; p; p = p->parent)
			for (int i = 0; i < p->n && n < 512; i++)
				cands[n++] = p->b[i].name;
	}
	diag_error(L->d, e->loc, "undefined %s '%s'", call ? "function" : "name",
	           lower_name(L, e->name));
	const char *sug = lower_suggest(e->name, cands, n);
	if (sug)
		diag_note(L->d, e->loc, "did you mean '%s'?", lower_name(L, sug));
}

static Value lower_ident(Lower *L, Scope *s, const AstNode *e)
{
	Binding *b = lower_lookup(s, e->name);
	if (b)
		return b->v;
	if (find_block(L, e->name))
		diag_error(L->d, e->loc, "'%s' is a block; call it: %s(...)",
		           lower_name(L, e->name), lower_name(L, e->name));
	else if (lower_find_builtin(e->name) || lower_is_const_func(e->name))
		diag_error(L->d, e->loc, "'%s' is a function; call it: %s(...)",
		           lower_name(L, e->name), lower_name(L, e->name));
	else {
		undefined(L, s, e, false);
		/* one report per name and body, not one per use */
		if (s != &L->globals)
			lower_bind(L, s, e->name, lower_err(), e->loc);
	}
	return lower_err();
}

static Value lower_call(Lower *L, Scope *s, const AstNode *e)
{
	const char *name = e->name;
	BlockDef *b = find_block(L, name);
	const Builtin *bi = lower_find_builtin(name);
	bool cf = lower_is_const_func(name);
	if (!strcmp(name, "recv")) {
		diag_error(L->d, e->loc,
		           "recv cannot be called; the compiler pairs each send with its recv");
		return lower_err();
	}
	if (!b && !bi && !cf) {
		if (lower_lookup(s, name))
			diag_error(L->d, e->loc, "'%s' is not a function", lower_name(L, name));
		else
			undefined(L, s, e, true);
		return lower_err();
	}
	Args a;
	gather_args(L, s, e, b ? NULL : bi, &a);
	if (b) {
		if (has_kwargs(e)) {
			diag_error(L->d, e->loc, "block '%s' takes no keyword arguments",
			           lower_name(L, name));
			return lower_err();
		}
		return call_block(L, b, &a, e->loc);
	}
	if (!a.ok)
		return lower_err();
	bool all_num = a.n > 0;
	for (int i = 0; i < a.n; i++)
		all_num &= a.v[i].k == V_NUM;
	if (cf && (!bi || (all_num && !has_kwargs(e)))) {
		for (int i = 0; i < a.n; i++)
			if (a.v[i].k != V_NUM) {
				diag_error(L->d, a.loc[i], "%s works on numbers only, got %s",
				           lower_name(L, name), lower_describe(L, a.v[i]));
				return lower_err();
			}
		if (has_kwargs(e)) {
			diag_error(L->d, e->loc, "%s takes no keyword arguments",
			           lower_name(L, name));
			return lower_err();
		}
		return lower_const_call(L, name, a.v, a.n, e->loc);
	}
	return lower_builtin(L, s, e, bi, &a);
}

static Value lower_binary(Lower *L, Scope *s, const AstNode *e)
{
	Value a = lower_expr(L, s, e->lhs), b = lower_expr(L, s, e->rhs);
	if (a.k == V_ERR || b.k == V_ERR)
		return lower_err();
	int op = e->op;
	if (op == '@') {
		if (a.k != V_NODE || b.k != V_NODE) {
			const AstNode *bad = a.k != V_NODE ? e->lhs : e->rhs;
			diag_error(L->d, bad->loc, "'@' needs two tensors, got %s",
			           lower_describe(L, a.k != V_NODE ? a : b));
			return lower_err();
		}
		return lower_make2(L, IR_OP_MATMUL, a, b, e->loc);
	}
	for (int i = 0; i < 2; i++) {
		Value v = i ? b : a;
		if (v.k != V_NUM && v.k != V_NODE) {
			diag_error(L->d, (i ? e->rhs : e->lhs)->loc, "cannot use %s in arithmetic",
			           lower_describe(L, v));
			return lower_err();
		}
	}
	if (a.k == V_NUM && b.k == V_NUM)
		return lower_arith(L, op, a, b, e->loc);
	if (op == '%') {
		diag_error(L->d, e->loc, "'%%' is only defined for constants");
		return lower_err();
	}
	static const IrOp ops[128] = {
	        ['+'] = IR_OP_ADD, ['-'] = IR_OP_SUB, ['*'] = IR_OP_MUL, ['/'] = IR_OP_DIV};
	if (op != '+' && op != '-' && op != '*' && op != '/')
		return lower_err();
	if (a.k == V_NODE && b.k == V_NODE) {
		Value ab[2] = {a, b};
		if (!lower_promote(L, ab, 2, e->loc))
			return lower_err();
		return lower_make2(L, ops[op], ab[0], ab[1], e->loc);
	}
	/* a number and a tensor: multiplying and dividing by a number is a
	 * scale; anything else gets a scalar const operand (it broadcasts) */
	if (op == '*')
		return lower_make_scale(L, a.k == V_NODE ? a : b, lower_num(a.k == V_NUM ? a : b),
		                        e->loc);
	if (op == '/' && b.k == V_NUM) {
		if (lower_num(b) == 0) {
			diag_error(L->d, e->loc, "division by zero");
			return lower_err();
		}
		return lower_make_scale(L, a, 1.0 / lower_num(b), e->loc);
	}
	IrDtype t = node_of(L, a.k == V_NODE ? a : b)->dtype;
	Value c = make_const(L, lower_num(a.k == V_NUM ? a : b), is_float(t) ? t : IR_F32, e->loc);
	if (c.k == V_ERR)
		return c;
	return a.k == V_NUM ? lower_make2(L, ops[op], c, b, e->loc)
	                    : lower_make2(L, ops[op], a, c, e->loc);
}

static Value lower_annot(Lower *L, Scope *s, const AstNode *e)
{
	Value v = lower_expr(L, s, e->lhs);
	if (v.k == V_ERR || !e->annot)
		return v;
	if (v.k != V_NODE) {
		diag_error(L->d, e->annot->loc, "only a tensor can have a placement, not %s",
		           lower_describe(L, v));
		return lower_err();
	}
	IrNode *n = node_of(L, v);
	if ((n->role == IR_ROLE_PARAM || n->role == IR_ROLE_INPUT) && n->place) {
		diag_error(L->d, e->annot->loc, "'%s' already has a placement from its declaration",
		           lower_name(L, n->name));
		return lower_err();
	}
	const char *what = L->annot_expr == e && L->annot_target
	                           ? arena_printf(L->a, "'%s'", L->annot_target)
	                           : "the value";
	/* A value placed already (`h = f(x) @ [dp, _]`, then `g = h @ [_, dp]`,
	 * or `f(x) @ [dp, _] @ [_, dp]`): both hold.  The second annotation
	 * places a new value, a view of the first with the same shape, and
	 * partition reshards between them; h keeps its placement. */
	if (n->place) {
		IrNode *r;
		if (lower_make1(L, IR_OP_RESHAPE, v, e->annot->loc, &r).k == V_ERR)
			return lower_err();
		r->dtype = n->dtype;
		r->rank = n->rank;
		memcpy(r->shape, n->shape, sizeof(int64_t) * (size_t)n->rank);
		v = lower_finish(L, r);
		if (v.k == V_ERR)
			return v;
		n = node_of(L, v);
	}
	if (!lower_annotate(L, e->annot, n, what, true))
		return lower_err();
	return v;
}

Value lower_expr(Lower *L, Scope *s, const AstNode *e)
{
	if (!e || L->fatal)
		return lower_err();
	switch (e->kind) {
	case AST_NUM:
		return e->is_int ? lower_int(e->ival) : lower_float(e->num);
	case AST_BOOL: {
		Value v = {0};
		v.k = V_BOOL;
		v.i = e->ival != 0;
		return v;
	}
	case AST_STR: {
		Value v = {0};
		v.k = V_STR;
		v.s = e->name ? e->name : "";
		return v;
	}
	case AST_IDENT:
		return e->name ? lower_ident(L, s, e) : lower_err();
	case AST_BINARY:
		return lower_binary(L, s, e);
	case AST_NEG: {
		Value v = lower_expr(L, s, e->lhs);
		if (v.k == V_NUM)
			return lower_arith(L, '-', lower_int(0), v, e->loc);
		if (v.k == V_NODE) {
			IrNode *n;
			lower_make1(L, IR_OP_NEG, v, e->loc, &n);
			return lower_finish(L, n);
		}
		if (v.k != V_ERR)
			diag_error(L->d, e->loc, "cannot negate %s", lower_describe(L, v));
		return lower_err();
	}
	case AST_CALL:
		return e->name ? lower_call(L, s, e) : lower_err();
	case AST_TUPLE: {
		Value t = {0};
		t.k = V_TUPLE;
		t.n = e->args.n;
		t.items = arena_alloc(L->a, sizeof(Value) * (size_t)(e->args.n + 1));
		if (!t.items)
			return lower_err();
		for (int i = 0; i < e->args.n; i++) {
			t.items[i] = lower_expr(L, s, e->args.items[i]);
			if (t.items[i].k == V_ERR)
				return lower_err();
		}
		return t;
	}
	case AST_ANNOT:
		return lower_annot(L, s, e);
	case AST_KWARG:
		diag_error(L->d, e->loc, "keyword argument '%s' outside a call",
		           lower_name(L, e->name));
		return lower_err();
	default:
		diag_error(L->d, e->loc, "expected an expression");
		return lower_err();
	}
}

/* ---- declarations ---- */

/* normal(mean, std) / uniform(lo, hi) / zeros / ones.  A param without an
 * init gets normal(0, 0.02) when it is a matrix (GPT-2's init) and zeros
 * when it is a vector or scalar (biases); norm gains must say `init ones`. */
static bool lower_init(Lower *L, Scope *s, const AstDecl *dc, int rank, IrAttrInit *at)
{
	const AstNode *e = dc->init;
	if (!e) {
		at->kind = rank >= 2 ? IR_INIT_NORMAL : IR_INIT_ZEROS;
		at->mean = 0;
		at->std = rank >= 2 ? 0.02 : 0;
		return true;
	}
	const char *w = e->kind == AST_IDENT || e->kind == AST_CALL ? e->name : NULL;
	if (w && e->kind == AST_IDENT && !strcmp(w, "zeros")) {
		at->kind = IR_INIT_ZEROS;
		return true;
	}
	if (w && e->kind == AST_IDENT && !strcmp(w, "ones")) {
		at->kind = IR_INIT_ONES;
		return true;
	}
	bool normal = w && !strcmp(w, "normal"), uniform = w && !strcmp(w, "uniform");
	if (!normal && !uniform) {
		diag_error(L->d, e->loc,
		           "unknown init '%s' (expected zeros, ones, normal(mean, std) "
		           "or uniform(lo, hi))",
		           lower_name(L, w));
		return false;
	}
	if (e->kind != AST_CALL) {
		diag_error(L->d, e->loc, "%s needs arguments: %s", w,
		           normal ? "normal(mean, std)" : "uniform(lo, hi)");
		return false;
	}
	static const char *const nkw[] = {"mean", "std", NULL}, *const ukw[] = {"lo", "hi", NULL};
	const char *const *kw = normal ? nkw : ukw;
	if (!lower_check_kwargs(L, e, kw, w))
		return false;
	const AstNode *argv[2] = {0};
	int npos = 0;
	for (int i = 0; i < e->args.n; i++) {
		const AstNode *x = e->args.items[i];
		if (x && x->kind != AST_KWARG) {
			if (npos < 2)
				argv[npos] = x;
			npos++;
		}
	}
	for (int i = 0; i < 2; i++) {
		const AstNode *k = lower_kwarg(e, kw[i]);
		if (k && argv[i]) {
			diag_error(L->d, k->loc, "%s given twice", kw[i]);
			return false;
		}
		if (k)
			argv[i] = k->lhs;
	}
	if (npos > 2 || !argv[0] || !argv[1]) {
		diag_error(L->d, e->loc, "%s takes 2 arguments (%s, %s)", lower_name(L, w), kw[0],
		           kw[1]);
		return false;
	}
	double v[2];
	for (int i = 0; i < 2; i++)
		if (!lower_const_num(L, s, argv[i], kw[i], &v[i]))
			return false;
	/* the check IR text's inits get too (ir/validate.c) */
	const SrcLoc where[3] = {argv[0]->loc, argv[1]->loc, e->loc};
	if (!ir_init_check(normal ? IR_INIT_NORMAL : IR_INIT_UNIFORM, v[0], v[1], where, L->d))
		return false;
	at->kind = normal ? IR_INIT_NORMAL : IR_INIT_UNIFORM;
	at->arg[0] = v[0];
	at->arg[1] = v[1];
	return true;
}

static const char *const dtype_names[] = {"f32", "bf16", "f16", "i32"};
static const IrDtype dtype_vals[] = {IR_F32, IR_BF16, IR_F16, IR_I32};

/* Builds the param or input node of a declaration; returns V_ERR after
 * reporting (the name is still bound, so uses do not cascade). */
static Value lower_decl(Lower *L, Scope *s, const AstNode *st, bool param)
{
	const AstDecl *dc = st->decl;
	const char *what = arena_printf(L->a, "'%s'", lower_name(L, dc->name));
	bool ok = true, dims_ok = true;
	int dt = -1;
	for (int i = 0; i < 4 && dc->dtype; i++)
		if (!strcmp(dc->dtype, dtype_names[i]))
			dt = i;
	if (dt < 0) {
		diag_error(L->d, dc->dtype_loc,
		           "unknown dtype '%s' (expected f32, bf16, f16 or i32)",
		           lower_name(L, dc->dtype));
		ok = false;
	} else if (param && dtype_vals[dt] == IR_I32) {
		diag_error(L->d, dc->dtype_loc,
		           "param %s cannot be i32 (params are trained; use f32, "
		           "bf16 or f16)",
		           what);
		ok = false;
	}
	if (dc->dims.n > IR_MAX_RANK) {
		diag_error(L->d, st->loc, "%s has rank %d (at most %d)", what, dc->dims.n,
		           IR_MAX_RANK);
		return lower_err();
	}
	int64_t shape[IR_MAX_RANK], numel = 1;
	for (int i = 0; i < dc->dims.n; i++) {
		const AstNode *de = dc->dims.items[i];
		const char *dw = arena_printf(L->a, "dim %d of %s", i, what);
		shape[i] = 1;
		if (!de || !lower_const_int(L, s, de, dw, &shape[i])) {
			ok = dims_ok = false;
		} else if (shape[i] < 1) {
			diag_error(L->d, de->loc, "%s must be >= 1, got %lld", dw,
			           (long long)shape[i]);
			ok = dims_ok = false;
		} else if (__builtin_mul_overflow(numel, shape[i], &numel) ||
		           numel > IR_MAX_ELEMS) {
			diag_error(L->d, de->loc,
			           "tensor %s is too large (more than 2^48 elements)", what);
			return lower_err();
		}
	}
	IrAttr at = {.kind = IR_ATTR_INIT};
	if (!param && dc->init) {
		diag_error(L->d, dc->init->loc,
		           "input %s cannot have an init (the data loader fills it)", what);
		ok = false;
	} else if (param && !lower_init(L, s, dc, dc->dims.n, &at.init)) {
		ok = false;
	}
	/* the placement is checked even when the type or init is bad, for
	 * more errors per run; it needs the dims */
	if (!ok && dims_ok && dc->annot)
		for (int i = 0; i < dc->annot->nopts; i++) {
			Placement pl;
			if (dc->annot->opts && dc->annot->opts[i])
				lower_placement(L, dc->annot->opts[i], dc->dims.n, shape, what,
				                false, &pl);
		}
	if (!ok)
		return lower_err();
	IrNode *n = lower_new_node(L, param ? IR_OP_PARAM : IR_OP_INPUT, NULL, 0, dc->name_loc);
	if (!n)
		return lower_err();
	n->dtype = dtype_vals[dt];
	n->rank = dc->dims.n;
	memcpy(n->shape, shape, sizeof(int64_t) * (size_t)n->rank);
	if (param) {
		ir_attr_set(L->m, n, &at); /* out of memory: the verifier says */
		ir_set_unit(L->m, n, L->unit);
	}
	n->role = param ? IR_ROLE_PARAM : IR_ROLE_INPUT;
	n->name = arena_printf(L->a, "%s%s", L->prefix, dc->name);
	if (dc->annot && !lower_annotate(L, dc->annot, n, what, false))
		return lower_err();
	return lower_finish(L, n);
}

/* ---- statements ---- */

static void bind_target(Lower *L, Scope *s, const AstName *t, Value v)
{
	if (!t->name)
		return;
	IrNode *n = node_of(L, v);
	if (n && n->role == IR_ROLE_ACT && !n->name)
		n->name = arena_printf(L->a, "%s%s", L->prefix, t->name);
	lower_bind(L, s, t->name, v, t->loc);
}

static void lower_assign(Lower *L, Scope *s, const AstNode *st)
{
	if (st->nnames < 1 || !st->names)
		return;
	const char *saved_t = L->annot_target;
	const AstNode *saved_e = L->annot_expr;
	L->annot_target = st->nnames == 1 ? st->names[0].name : NULL;
	L->annot_expr = st->lhs;
	Value v = lower_expr(L, s, st->lhs);
	L->annot_target = saved_t;
	L->annot_expr = saved_e;
	if (st->nnames == 1) {
		bind_target(L, s, &st->names[0], v);
		return;
	}
	if (v.k != V_ERR && (v.k != V_TUPLE || v.n != st->nnames)) {
		if (v.k == V_TUPLE)
			diag_error(L->d, st->loc,
			           "cannot unpack a tuple of %d values into %d names", v.n,
			           st->nnames);
		else
			diag_error(L->d, st->loc, "cannot unpack %s into %d names",
			           lower_describe(L, v), st->nnames);
		v = lower_err();
	}
	for (int i = 0; i < st->nnames; i++)
		bind_target(L, s, &st->names[i], v.k == V_ERR ? v : v.items[i]);
}

static void lower_for(Lower *L, Scope *s, const AstNode *st)
{
	int64_t lo, hi;
	bool ok = st->lhs && lower_const_int(L, s, st->lhs, "the loop start", &lo);
	ok = st->rhs && lower_const_int(L, s, st->rhs, "the loop end", &hi) && ok;
	if (!ok || !st->name)
		return;
	if (hi < lo) {
		diag_error(L->d, st->rhs->loc, "the loop end (%lld) is before its start (%lld)",
		           (long long)hi, (long long)lo);
		return;
	}
	/* the product of the trip counts of the loop nest, checked before
	 * running it, so a huge nest fails at once */
	int64_t trips;
	if (__builtin_mul_overflow(hi - lo, L->trips, &trips) || trips > LOWER_MAX_ITERS ||
	    hi - lo > LOWER_MAX_ITERS - L->iters) {
		lower_too_large(L, st->loc,
		                arena_printf(L->a, "more than %d loop iterations and block calls",
		                             LOWER_MAX_ITERS));
		return;
	}
	Binding *old = lower_lookup_local(s, st->name);
	Binding saved = old ? *old : (Binding){0};
	int saved_stage = L->stage;
	int64_t saved_trips = L->trips;
	L->trips = trips > 0 ? trips : 1;
	for (int64_t i = lo; i < hi && !L->fatal; i++) {
		L->iters++;
		lower_bind(L, s, st->name, lower_int(i), st->loc);
		L->stage = saved_stage;
		int64_t stage;
		if (st->stage && lower_const_int(L, s, st->stage, "the stage", &stage)) {
			if (stage < 0 || stage >= (1 << 20)) {
				diag_error(L->d, st->stage->loc,
				           "the stage must be in [0, 2^20), got %lld",
				           (long long)stage);
				break;
			}
			L->stage = (int)stage;
		}
		int nerr0 = L->d->nerr, first = L->m->nnodes;
		lower_stmts(L, s, &st->body, NULL);
		if (st->stage && !ir_stage_note_add(L->m, first, L->m->nnodes, st->stage->loc))
			lower_too_large(L, st->stage->loc, "out of memory");
		/* every later iteration would repeat the same errors */
		if (L->d->nerr > nerr0)
			break;
	}
	L->stage = saved_stage;
	L->trips = saved_trips;
	if (old)
		lower_bind(L, s, st->name, saved.v, saved.loc);
	else
		unbind(s, st->name);
}

static void lower_param_stmt(Lower *L, Scope *s, const AstNode *st)
{
	const AstDecl *dc = st->decl;
	if (!dc || !dc->name)
		return;
	Binding *prev = lower_lookup_local(s, dc->name);
	if (prev) {
		diag_error(L->d, dc->name_loc, "duplicate name '%s'", lower_name(L, dc->name));
		diag_note(L->d, prev->loc, "'%s' was first defined here", lower_name(L, dc->name));
		return;
	}
	Value v = lower_decl(L, s, st, true);
	if (s == &L->globals)
		lower_define_global(L, dc->name, v, dc->name_loc);
	else
		lower_bind(L, s, dc->name, v, dc->name_loc);
}

static void lower_stmts(Lower *L, Scope *s, const AstList *body, Value *ret)
{
	if (L->depth >= LOWER_MAX_NEST) {
		if (!L->fatal)
			diag_error(L->d, body->n ? body->items[0]->loc : (SrcLoc){0},
			           "statements nested too deeply (more than %d)", LOWER_MAX_NEST);
		L->fatal = true;
		return;
	}
	L->depth++;
	for (int i = 0; i < body->n && !L->fatal; i++) {
		const AstNode *st = body->items[i];
		if (!st)
			continue;
		switch (st->kind) {
		case AST_ASSIGN:
			lower_assign(L, s, st);
			break;
		case AST_FOR:
			lower_for(L, s, st);
			break;
		case AST_PARAM:
			lower_param_stmt(L, s, st);
			break;
		case AST_RETURN:
			/* misplaced returns were reported by check_returns */
			if (ret && i == body->n - 1) {
				if (st->args.n == 1) {
					*ret = lower_expr(L, s, st->args.items[0]);
				} else if (st->args.n > 1) {
					Value t = {0};
					t.k = V_TUPLE;
					t.n = st->args.n;
					t.items = arena_alloc(L->a, sizeof(Value) * (size_t)t.n);
					for (int j = 0; t.items && j < t.n; j++) {
						t.items[j] = lower_expr(L, s, st->args.items[j]);
						if (t.items[j].k == V_ERR)
							t.k = V_ERR;
					}
					*ret = t.items ? t : lower_err();
				}
			} else if (!L->nstack) {
				diag_error(L->d, st->loc,
				           "return is only allowed at the end of a block");
			}
			break;
		case AST_INPUT:
			diag_error(L->d, st->loc, "inputs must be declared at the top level");
			break;
		default:
			diag_error(L->d, st->loc, "expected a statement");
			break;
		}
	}
	L->depth--;
}

/* ---- the file ---- */

static const AstNode *single(Lower *L, const AstNode *prev, const AstNode *it, const char *what)
{
	if (prev) {
		diag_error(L->d, it->loc, "duplicate %s", what);
		diag_note(L->d, prev->loc, "first declared here");
		return prev;
	}
	return it;
}

/* A batch split unevenly (uneven_shards true: torch.chunk rows, the last
 * ranks with fewer or none): every rank computes ceil(batch / parts) rows,
 * the padding rows' work wasted (dp = 4 on a batch of 6: 8 rows' work);
 * the losses leave the padding out of their means, but a max over the
 * rows compares them, so partition all_gathers its operand whole over the
 * split every step.  Worth a warning where the split is written, once per
 * batch size and split, naming the inputs; an uneven param (a vocab over
 * tp) is what uneven_shards is for and is padded. */
static void warn_uneven_batch(Lower *L)
{
	IrModule *m = L->m;
	bool *done = arena_alloc(L->a, (size_t)m->nnodes + 1);
	if (!done)
		return;
	bool max = false; /* partition's counts_rows, less cross_entropy */
	for (int i = 0; i < m->nnodes; i++)
		max = max || m->nodes[i]->op == IR_OP_MAX;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const Placement *np = ir_place(m, n);
		if (n->op != IR_OP_INPUT || !np->known || done[i] || n->rank < 1 || np->ndims < 1)
			continue;
		int64_t parts = 1, size = n->shape[0];
		int na = np->naxes[0];
		char axes[128] = "";
		for (int j = 0, k = 0; j < na; j++) {
			int a = np->axes[0][j];
			parts *= m->mesh.sizes[a];
			if (k >= 0 && k < (int)sizeof axes)
				k += snprintf(axes + k, sizeof axes - (size_t)k, "%s%s", j ? ", " : "",
				              m->mesh.names[a]);
		}
		if (parts <= 1 || size % parts == 0)
			continue;
		/* the other inputs with the same batch and split */
		char names[256];
		int w = snprintf(names, sizeof names, "%s", n->name ? n->name : "?");
		int count = 1;
		for (int o = i + 1; o < m->nnodes; o++) {
			const IrNode *x = m->nodes[o];
			const Placement *xp = ir_place(m, x);
			if (x->op != IR_OP_INPUT || !xp->known || x->rank < 1 || xp->ndims < 1 ||
			    x->shape[0] != size || xp->naxes[0] != na ||
			    memcmp(xp->axes[0], np->axes[0], (size_t)na))
				continue;
			done[o] = true;
			count++;
			if (w > 0 && w < (int)sizeof names)
				w += snprintf(names + w, sizeof names - (size_t)w, ", %s",
				              x->name ? x->name : "?");
		}
		/* torch.chunk: ceil(size / parts) rows a rank while they last */
		int64_t chunk = (size + parts - 1) / parts, full = size / chunk;
		int64_t rest = size - full * chunk, empty = parts - full - (rest > 0);
		char rows[160];
		int r = snprintf(rows, sizeof rows, "%lld on %lld rank%s", (long long)chunk,
		                 (long long)full, full == 1 ? "" : "s");
		if (rest > 0)
			r += snprintf(rows + r, sizeof rows - (size_t)r, ", %lld on 1", (long long)rest);
		if (empty > 0)
			snprintf(rows + r, sizeof rows - (size_t)r, ", 0 on %lld", (long long)empty);
		const char *lp = na > 1 ? "(" : "", *rp = na > 1 ? ")" : "";
		const char *gather = !max ? "" :
		        arena_printf(L->a, "; max then needs the rows whole, so its operand is "
		                     "all_gathered over %s%s%s every step (dtmc inspect lists it)", lp,
		                     axes, rp);
		diag_warning(L->d, ir_place_loc(m, n),
		             "batch %lld of input%s %s splits unevenly over %s%s%s = %lld (rows: %s): "
		             "every rank computes %lld rows, %lld in all, the padding's work "
		             "wasted%s",
		             (long long)size, count == 1 ? "" : "s", names, lp, axes, rp,
		             (long long)parts, rows, (long long)chunk, (long long)(chunk * parts),
		             gather ? gather : "");
		int64_t lo = size / parts * parts;
		diag_note(L->d, ir_place_loc(m, n), "a batch divisible by %lld (such as %s%lld) splits evenly",
		          (long long)parts, lo > 0 ? arena_printf(L->a, "%lld or ", (long long)lo) : "",
		          (long long)(lo + parts));
	}
}

IrModule *lower_file(Arena *a, Diag *d, const AstFile *f, const LowerOptions *opt)
{
	Lower Lv = {0}, *L = &Lv;
	int nerr0 = d->nerr;
	L->a = a;
	L->d = d;
	L->f = f;
	L->opt = opt;
	L->stage = -1;
	L->block = -1;
	L->unit = -1;
	L->trips = 1;
	L->prefix = "";
	SrcLoc top = {f->path, 1, 1, 1};
	const AstNode *model = NULL, *mesh = NULL, *fwd = NULL, *train = NULL;
	L->blocks = arena_alloc(a, sizeof(BlockDef) * (size_t)(f->items.n + 1));
	L->stack = arena_alloc(a, sizeof(BlockDef *) * (LOWER_MAX_NEST + 1));
	if (!L->blocks || !L->stack)
		return NULL;
	for (int i = 0; i < f->items.n; i++) {
		const AstNode *it = f->items.items[i];
		if (!it)
			continue;
		switch (it->kind) {
		case AST_MODEL:
			if (it->name)
				model = single(L, model, it, "model declaration");
			break;
		case AST_MESH:
			mesh = single(L, mesh, it, "mesh declaration");
			break;
		case AST_FORWARD:
			fwd = single(L, fwd, it, "forward section");
			break;
		case AST_TRAIN:
			train = single(L, train, it, "train section");
			break;
		case AST_BLOCK:
			if (it->name)
				define_block(L, it);
			break;
		case AST_LET:
		case AST_INPUT:
		case AST_PARAM:
			break;
		default:
			diag_error(d, it->loc, "expected a top-level declaration");
			break;
		}
	}
	if (!model)
		diag_error(d, top, "missing 'model NAME' declaration");
	IrModule *m = ir_module_new(a, model ? model->name : "unnamed");
	if (!m)
		return NULL;
	L->m = m;
	ir_train_defaults(&m->train);
	m->loss = -1;
	lower_lets(L);
	lower_mesh(L, mesh);
	lower_train(L, train);
	for (int i = 0; i < f->items.n && !L->fatal; i++) {
		const AstNode *it = f->items.items[i];
		if (!it || !it->decl || !it->decl->name)
			continue;
		if (it->kind == AST_PARAM) {
			lower_param_stmt(L, &L->globals, it);
		} else if (it->kind == AST_INPUT) {
			Value v = lower_decl(L, &L->globals, it, false);
			lower_define_global(L, it->decl->name, v, it->decl->name_loc);
		}
	}
	if (!fwd) {
		diag_error(d, top, "missing 'forward' section");
	} else if (!L->fatal) {
		Scope sc = {0};
		sc.parent = &L->globals;
		lower_stmts(L, &sc, &fwd->body, NULL);
		Binding *lb = lower_lookup_local(&sc, "loss");
		IrNode *ln = lb ? node_of(L, lb->v) : NULL;
		if (!lb && !L->fatal) {
			diag_error(d, fwd->loc, "the forward section must assign 'loss'");
		} else if (lb && lb->v.k != V_ERR && !ln) {
			diag_error(d, lb->loc, "'loss' must be a scalar, got %s",
			           lower_describe(L, lb->v));
		} else if (ln && (ln->rank != 0 || ln->dtype != IR_F32)) {
			diag_error(d, lb->loc, "'loss' must be a scalar%s, got %s",
			           ln->rank == 0 ? " f32" : "", lower_type_str(L, ln));
		} else if (ln) {
			ln->role = IR_ROLE_LOSS;
			m->loss = ln->id;
		}
	}
	/* after the forward: which of its ops count rows decides the cost */
	if (d->nerr == nerr0)
		warn_uneven_batch(L);
	return d->nerr > nerr0 ? NULL : m;
}

IrModule *lower_path(Arena *a, Diag *d, const char *path, const LowerOptions *opt)
{
	SrcFile *src = arena_alloc(a, sizeof *src);
	if (!src || !src_read_file(a, d, path, src))
		return NULL;
	diag_add_file(d, src);
	AstFile f = {0};
	/* a phase that saw errors stops at its boundary: lowering a recovered
	 * tree would mostly report the parser's errors again */
	if (!ast_parse(a, d, src, &f))
		return NULL;
	return lower_file(a, d, &f, opt);
}
