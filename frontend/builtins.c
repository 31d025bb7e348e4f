/* builtins.c - lowering calls of the builtin tensor functions.
 *
 * One table lists every builtin with its positional arity and keyword
 * arguments; lower_builtin checks a call against it, evaluates the keyword
 * arguments, normalises axes and fills the node's attrs as ops.def
 * describes them.  Shapes are left to ir_infer, except where the frontend
 * must know them first (reshape's -1, split's parts, slice bounds).
 */
#include "frontend/lower_impl.h"

#include <math.h>
#include <string.h>

typedef enum BKind {
	BK_UNARY,
	BK_SCALE,
	BK_REDUCE,
	BK_SOFTMAX,
	BK_NORM,
	BK_PLAIN,
	BK_TRANSPOSE,
	BK_PERMUTE,
	BK_RESHAPE,
	BK_SPLIT,
	BK_CONCAT,
	BK_SLICE,
	BK_ATTENTION,
	BK_ROPE,
	BK_DROPOUT,
	BK_COLL,
	BK_CAST,
	BK_ROUTE,
	BK_SCATTER,
} BKind;

struct Builtin {
	const char *name;
	BKind kind;
	IrOp op;
	int minpos, maxpos; /* maxpos -1: variadic */
	const char *kw[6];  /* NULL-ended */
};

static const Builtin builtins[] = {
        {"neg", BK_UNARY, IR_OP_NEG, 1, 1, {0}},
        {"exp", BK_UNARY, IR_OP_EXP, 1, 1, {0}},
        {"log", BK_UNARY, IR_OP_LOG, 1, 1, {0}},
        {"sqrt", BK_UNARY, IR_OP_SQRT, 1, 1, {0}},
        {"rsqrt", BK_UNARY, IR_OP_RSQRT, 1, 1, {0}},
        {"tanh", BK_UNARY, IR_OP_TANH, 1, 1, {0}},
        {"relu", BK_UNARY, IR_OP_RELU, 1, 1, {0}},
        {"gelu", BK_UNARY, IR_OP_GELU, 1, 1, {0}},
        {"silu", BK_UNARY, IR_OP_SILU, 1, 1, {0}},
        {"sigmoid", BK_UNARY, IR_OP_SIGMOID, 1, 1, {0}},
        {"scale", BK_SCALE, IR_OP_SCALE, 2, 2, {0}},
        {"cast", BK_CAST, IR_OP_CAST, 2, 2, {0}},
        {"sum", BK_REDUCE, IR_OP_SUM, 1, 1, {"axis", "axes", "keepdims"}},
        {"mean", BK_REDUCE, IR_OP_MEAN, 1, 1, {"axis", "axes", "keepdims"}},
        {"max", BK_REDUCE, IR_OP_MAX, 1, 1, {"axis", "axes", "keepdims"}},
        {"softmax", BK_SOFTMAX, IR_OP_SOFTMAX, 1, 1, {"axis"}},
        {"log_softmax", BK_SOFTMAX, IR_OP_LOG_SOFTMAX, 1, 1, {"axis"}},
        {"layernorm", BK_NORM, IR_OP_LAYERNORM, 3, 3, {"eps"}},
        {"rmsnorm", BK_NORM, IR_OP_RMSNORM, 2, 2, {"eps"}},
        {"embed", BK_PLAIN, IR_OP_EMBED, 2, 2, {0}},
        {"cross_entropy", BK_PLAIN, IR_OP_CROSS_ENTROPY, 2, 2, {0}},
        {"mse", BK_PLAIN, IR_OP_MSE, 2, 2, {0}},
        {"transpose", BK_TRANSPOSE, IR_OP_PERMUTE, 1, 1, {0}},
        {"permute", BK_PERMUTE, IR_OP_PERMUTE, 2, 2, {0}},
        {"reshape", BK_RESHAPE, IR_OP_RESHAPE, 2, 2, {0}},
        {"split", BK_SPLIT, IR_OP_SLICE, 2, 2, {"axis"}},
        {"concat", BK_CONCAT, IR_OP_CONCAT, 1, -1, {"axis"}},
        {"slice", BK_SLICE, IR_OP_SLICE, 4, 4, {0}},
        {"attention", BK_ATTENTION, IR_OP_ATTENTION, 3, 3,
         {"heads", "causal", "kv_heads", "window", "segments"}},
        {"rope", BK_ROPE, IR_OP_ROPE, 1, 1, {"heads", "theta"}},
        {"dropout", BK_DROPOUT, IR_OP_DROPOUT, 1, 1, {"rate"}},
        {"topk", BK_ROUTE, IR_OP_TOPK, 1, 1, {"k"}},
        {"one_hot", BK_ROUTE, IR_OP_ONE_HOT, 1, 1, {"n"}},
        {"moe_slot", BK_ROUTE, IR_OP_MOE_SLOT, 1, 1, {"experts", "capacity"}},
        {"moe_token", BK_ROUTE, IR_OP_MOE_TOKEN, 1, 1, {"experts", "capacity"}},
        {"gather", BK_PLAIN, IR_OP_GATHER, 2, 2, {0}},
        {"scatter_add", BK_SCATTER, IR_OP_SCATTER_ADD, 2, 2, {"size"}},
        {"all_gather", BK_COLL, IR_OP_ALL_GATHER, 2, 2, {"axes"}},
        {"reduce_scatter", BK_COLL, IR_OP_REDUCE_SCATTER, 2, 2, {"axes", "op"}},
        {"all_reduce", BK_COLL, IR_OP_ALL_REDUCE, 1, 1, {"axes", "op"}},
        {"all_to_all", BK_COLL, IR_OP_ALL_TO_ALL, 3, 3, {"axes"}},
        {"broadcast", BK_COLL, IR_OP_BROADCAST, 1, 1, {"axes", "root"}},
        {"send", BK_COLL, IR_OP_SEND, 1, 1, {"axes", "offset"}},
};
#define NBUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

int lower_builtin_names(const char **out, int cap)
{
	int n = 0;
	for (int i = 0; i < NBUILTINS && n < cap; i++)
		out[n++] = builtins[i].name;
	return n;
}

const Builtin *lower_find_builtin(const char *name)
{
	for (int i = 0; i < NBUILTINS; i++)
		if (strcmp(builtins[i].name, name) == 0)
			return &builtins[i];
	return NULL;
}

bool lower_builtin_word_arg(const Builtin *bi, int i)
{
	return bi->kind == BK_CAST && i == 1;
}

/* cast(x, dtype): dtype is a word, f32, bf16 or f16.  The node is made
 * even when x has that dtype already (lower_cast). */
static Value lower_cast_call(Lower *L, const Args *a, Value xv, SrcLoc loc)
{
	static const char *const names[] = {"f32", "bf16", "f16"};
	static const IrDtype vals[] = {IR_F32, IR_BF16, IR_F16};
	Value w = a->v[1];
	for (int i = 0; w.k == V_STR && i < 3; i++)
		if (!strcmp(w.s, names[i]))
			return lower_cast(L, xv, vals[i], loc);
	if (w.k == V_STR)
		diag_error(L->d, a->loc[1], "cast: unknown dtype '%s' (expected f32, bf16 or f16)",
		           lower_name(L, w.s));
	else if (w.k != V_ERR)
		diag_error(L->d, a->loc[1],
		           "argument 2 of cast must be a dtype (f32, bf16 or f16), got %s",
		           lower_describe(L, w));
	return lower_err();
}

static IrNode *want_tensor(Lower *L, const Args *a, int i, const char *fn)
{
	Value v = a->v[i];
	if (v.k == V_NODE)
		return L->m->nodes[v.i];
	if (v.k != V_ERR)
		diag_error(L->d, a->loc[i], "argument %d of %s must be a tensor, got %s", i + 1, fn,
		           lower_describe(L, v));
	return NULL;
}

static bool want_int(Lower *L, const Args *a, int i, const char *what, int64_t *out)
{
	Value v = a->v[i];
	if (v.k == V_NUM && v.is_int) {
		*out = v.i;
		return true;
	}
	if (v.k != V_ERR)
		diag_error(L->d, a->loc[i], "%s must be an integer, got %s", what,
		           lower_describe(L, v));
	return false;
}

/* kw_* return 0 when the keyword is absent, 1 when *out was set, -1 after
 * reporting a bad value. */
static int kw_value(Lower *L, Scope *s, const AstNode *call, const char *name, Value *out,
                    const AstNode **kw)
{
	*kw = lower_kwarg(call, name);
	if (!*kw)
		return 0;
	*out = lower_expr(L, s, (*kw)->lhs);
	return out->k == V_ERR ? -1 : 1;
}

static int kw_int(Lower *L, Scope *s, const AstNode *call, const char *name, int64_t *out)
{
	const AstNode *kw;
	Value v;
	int r = kw_value(L, s, call, name, &v, &kw);
	if (r <= 0)
		return r;
	if (v.k != V_NUM || !v.is_int) {
		diag_error(L->d, kw->loc, "%s must be an integer, got %s", lower_name(L, name),
		           lower_describe(L, v));
		return -1;
	}
	*out = v.i;
	return 1;
}

static int kw_num(Lower *L, Scope *s, const AstNode *call, const char *name, double *out)
{
	const AstNode *kw;
	Value v;
	int r = kw_value(L, s, call, name, &v, &kw);
	if (r <= 0)
		return r;
	if (v.k != V_NUM) {
		diag_error(L->d, kw->loc, "%s must be a number, got %s", lower_name(L, name),
		           lower_describe(L, v));
		return -1;
	}
	*out = lower_num(v);
	return 1;
}

static int kw_bool(Lower *L, Scope *s, const AstNode *call, const char *name, bool *out)
{
	const AstNode *kw;
	Value v;
	int r = kw_value(L, s, call, name, &v, &kw);
	if (r <= 0)
		return r;
	if (v.k != V_BOOL) {
		diag_error(L->d, kw->loc, "%s must be true or false, got %s", lower_name(L, name),
		           lower_describe(L, v));
		return -1;
	}
	*out = v.i != 0;
	return 1;
}

/* Normalises a possibly negative axis against a rank. */
static bool norm_axis(Lower *L, SrcLoc loc, int64_t ax, int rank, int64_t *out)
{
	int64_t a = ax < 0 ? ax + rank : ax;
	if (a < 0 || a >= rank) {
		diag_error(L->d, loc, "axis %lld is out of range for a tensor of rank %d",
		           (long long)ax, rank);
		return false;
	}
	*out = a;
	return true;
}

static int kw_axis(Lower *L, Scope *s, const AstNode *call, int rank, int64_t *out)
{
	int64_t ax = -1;
	int r = kw_int(L, s, call, "axis", &ax);
	if (r < 0)
		return -1;
	const AstNode *kw = lower_kwarg(call, "axis");
	return norm_axis(L, kw ? kw->loc : call->loc, ax, rank, out) ? 1 : -1;
}

/* A value that lists integers: `(a, b)` or a single `a`. */
static bool int_list(Lower *L, Value v, SrcLoc loc, const char *what, int64_t *out, int *n, int cap)
{
	const Value *items = v.k == V_TUPLE ? v.items : &v;
	int cnt = v.k == V_TUPLE ? v.n : 1;
	if (cnt > cap) {
		diag_error(L->d, loc, "%s: too many entries (%d, at most %d)", what, cnt, cap);
		return false;
	}
	for (int i = 0; i < cnt; i++) {
		if (items[i].k == V_ERR)
			return false;
		if (items[i].k != V_NUM || !items[i].is_int) {
			diag_error(L->d, loc, "%s must be integers, got %s", what,
			           lower_describe(L, items[i]));
			return false;
		}
		out[i] = items[i].i;
	}
	*n = cnt;
	return true;
}

static Value lower_reduce(Lower *L, Scope *s, const AstNode *call, const Builtin *bi, IrNode *x,
                          Value xv)
{
	IrAttr at = {.kind = IR_ATTR_AXES};
	const AstNode *kaxis = lower_kwarg(call, "axis"), *kaxes = lower_kwarg(call, "axes");
	int64_t ax[IR_MAX_RANK];
	int n = 0;
	if (kaxis && kaxes) {
		diag_error(L->d, kaxes->loc, "give axis or axes, not both");
		return lower_err();
	}
	const AstNode *k = kaxis ? kaxis : kaxes;
	if (k) {
		Value v = lower_expr(L, s, k->lhs);
		if (v.k == V_ERR || !int_list(L, v, k->loc, k->name, ax, &n, IR_MAX_RANK))
			return lower_err();
		if (kaxis && v.k == V_TUPLE) {
			diag_error(L->d, k->loc,
			           "axis takes one integer; use axes = (...) for several");
			return lower_err();
		}
	} else {
		for (int i = 0; i < x->rank; i++)
			ax[n++] = i; /* default: reduce everything */
	}
	bool seen[IR_MAX_RANK] = {0};
	for (int i = 0; i < n; i++) {
		int64_t a;
		if (!norm_axis(L, k ? k->loc : call->loc, ax[i], x->rank, &a))
			return lower_err();
		if (seen[a]) {
			diag_error(L->d, k->loc, "axis %lld appears more than once",
			           (long long)ax[i]);
			return lower_err();
		}
		seen[a] = true;
	}
	for (int a = 0; a < x->rank; a++)
		if (seen[a])
			at.axes.axes[at.axes.n++] = a;
	if (kw_bool(L, s, call, "keepdims", &at.axes.keepdims) < 0)
		return lower_err();
	IrNode *n1;
	if (lower_make1(L, bi->op, xv, call->loc, &n1).k == V_ERR)
		return lower_err();
	ir_attr_set(L->m, n1, &at); /* out of memory: the verifier says */
	return lower_finish(L, n1);
}

static Value lower_reshape(Lower *L, const Args *a, IrNode *x, SrcLoc loc)
{
	int64_t dims[IR_MAX_RANK];
	int n;
	if (a->v[1].k == V_ERR ||
	    !int_list(L, a->v[1], a->loc[1], "reshape's dims", dims, &n, IR_MAX_RANK))
		return lower_err();
	int infer = -1;
	int64_t known = 1;
	char buf[200];
	int k = 0;
	for (int i = 0; i < n && k < (int)sizeof buf - 48; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
	for (int i = 0; i < n; i++) {
		if (dims[i] == -1 && infer < 0) {
			infer = i;
		} else if (dims[i] == -1) {
			diag_error(L->d, a->loc[1], "reshape: only one dim may be -1");
			return lower_err();
		} else if (dims[i] < 1) {
			diag_error(L->d, a->loc[1],
			           "reshape: dims must be >= 1 (or one -1), got %lld",
			           (long long)dims[i]);
			return lower_err();
		} else if (__builtin_mul_overflow(known, dims[i], &known) || known > IR_MAX_ELEMS) {
			diag_error(L->d, a->loc[1], "reshape: tensor too large");
			return lower_err();
		}
	}
	int64_t numel = ir_node_numel(x);
	if (infer >= 0 && numel % known == 0)
		dims[infer] = numel / known;
	else if (infer >= 0)
		known = -1;
	if (infer < 0 ? known != numel : known < 0) {
		diag_error(L->d, loc, "cannot reshape %s (%lld elements) to (%s)",
		           lower_type_str(L, x), (long long)numel, buf);
		return lower_err();
	}
	IrNode *r;
	if (lower_make1(L, IR_OP_RESHAPE, lower_node_val(x->id), loc, &r).k == V_ERR)
		return lower_err();
	r->dtype = x->dtype;
	r->rank = n;
	memcpy(r->shape, dims, sizeof(int64_t) * (size_t)n);
	return lower_finish(L, r);
}

static Value lower_split(Lower *L, Scope *s, const AstNode *call, const Args *a, IrNode *x)
{
	int64_t parts, ax;
	if (!want_int(L, a, 1, "the number of parts", &parts) ||
	    kw_axis(L, s, call, x->rank, &ax) < 0)
		return lower_err();
	if (parts < 1 || x->shape[ax] % parts != 0) {
		diag_error(L->d, a->loc[1],
		           "cannot split dim %lld (size %lld) of %s into %lld equal parts",
		           (long long)ax, (long long)x->shape[ax], lower_type_str(L, x),
		           (long long)parts);
		return lower_err();
	}
	Value t = {0};
	t.k = V_TUPLE;
	t.n = (int)parts;
	t.items = arena_alloc(L->a, sizeof(Value) * (size_t)parts);
	if (!t.items || parts > IR_MAX_NODES) {
		lower_too_large(L, call->loc, "split into too many parts");
		return lower_err();
	}
	int64_t sz = x->shape[ax] / parts;
	for (int64_t i = 0; i < parts; i++) {
		IrNode *n;
		if (lower_make1(L, IR_OP_SLICE, lower_node_val(x->id), call->loc, &n).k == V_ERR)
			return lower_err();
		*ir_attr_slice_mut(L->m, n) = (IrAttrSlice){ax, i * sz, (i + 1) * sz};
		t.items[i] = lower_finish(L, n);
		if (t.items[i].k == V_ERR)
			return lower_err();
	}
	return t;
}

/* How a model gets each collective: from placements (and pipeline stages),
 * which `partition` and `pipeline` turn into the collectives. */
static const char *coll_hint(IrOp op)
{
	switch (op) {
	case IR_OP_ALL_REDUCE:
		return "to sum a value that is partial over a mesh axis (the product of a "
		       "column-split and a row-split matrix), place it without the partial, e.g. "
		       "`h = x @ w @ [dp, _]`: partition inserts the all_reduce";
	case IR_OP_ALL_GATHER:
		return "to gather a dim that is split over a mesh axis, place the value with `_` "
		       "in that dim, e.g. `y = x @ [_, _]`: partition inserts the all_gather";
	case IR_OP_REDUCE_SCATTER:
		return "to sum a partial value and split the result, place it split, e.g. "
		       "`h = x @ w @ [dp, tp]`: partition inserts the reduce_scatter";
	case IR_OP_ALL_TO_ALL:
		return "to move a split from one dim to another, place the value split on the "
		       "new dim, e.g. `y = x @ [_, tp]`: partition inserts the all_to_all";
	case IR_OP_BROADCAST:
		return "a value whose placement does not name a mesh axis is replicated over it "
		       "(the same on every rank): nothing needs broadcasting";
	default:
		return "pipeline stages pass activations by themselves: with a mesh axis pp, "
		       "`for i in A .. B stage EXPR { ... }` assigns stages and the pipeline pass "
		       "inserts the send and recv";
	}
}

Value lower_builtin(Lower *L, Scope *s, const AstNode *call, const Builtin *bi, const Args *a)
{
	const char *fn = bi->name;
	/* The explicit collectives are per-rank (local) operations: they exist in
	 * the IR after `partition`, where shapes are shards.  A model is the
	 * global program, whose values are whole; there a collective has no
	 * meaning of its own (all_reduce of a whole value would sum copies of
	 * it), so the call is refused here rather than by a pass later. */
	if (bi->kind == BK_COLL) {
		diag_error(L->d, call->loc,
		           "%s cannot be called in a model: a model is the global program, whose "
		           "collectives come from placements (`@ [...]`); explicit collectives "
		           "exist only in the per-rank IR after partition",
		           fn);
		diag_note(L->d, call->loc, "%s", coll_hint(bi->op));
		return lower_err();
	}
	bool ok = lower_check_kwargs(L, call, bi->kw, fn);
	if (a->n < bi->minpos || (bi->maxpos >= 0 && a->n > bi->maxpos)) {
		if (bi->maxpos < 0)
			diag_error(L->d, call->loc, "%s takes at least %d argument%s, got %d", fn,
			           bi->minpos, bi->minpos == 1 ? "" : "s", a->n);
		else
			diag_error(L->d, call->loc, "%s takes %d argument%s, got %d", fn,
			           bi->minpos, bi->minpos == 1 ? "" : "s", a->n);
		return lower_err();
	}
	if (!ok || !a->ok)
		return lower_err();
	IrNode *x = want_tensor(L, a, 0, fn);
	if (!x)
		return lower_err();
	Value xv = lower_node_val(x->id);
	SrcLoc loc = call->loc;
	IrNode *n;
	int64_t iv;
	switch (bi->kind) {
	case BK_UNARY:
		lower_make1(L, bi->op, xv, loc, &n);
		return lower_finish(L, n);
	case BK_SCALE:
		if (a->v[1].k != V_NUM) {
			diag_error(L->d, a->loc[1], "argument 2 of scale must be a number, got %s",
			           lower_describe(L, a->v[1]));
			return lower_err();
		}
		return lower_make_scale(L, xv, lower_num(a->v[1]), loc);
	case BK_REDUCE:
		return lower_reduce(L, s, call, bi, x, xv);
	case BK_SOFTMAX:
		if (kw_axis(L, s, call, x->rank, &iv) < 0 ||
		    lower_make1(L, bi->op, xv, loc, &n).k == V_ERR)
			return lower_err();
		ir_attr_axis_mut(L->m, n)->axis = iv;
		return lower_finish(L, n);
	case BK_NORM: {
		double eps = bi->op == IR_OP_LAYERNORM ? 1e-5 : 1e-6;
		int r = kw_num(L, s, call, "eps", &eps);
		if (r < 0)
			return lower_err();
		if (!(eps > 0)) {
			diag_error(L->d, lower_kwarg(call, "eps")->loc, "eps must be > 0, got %g",
			           eps);
			return lower_err();
		}
		int ops[3];
		for (int i = 0; i < a->n; i++) {
			IrNode *o = want_tensor(L, a, i, fn);
			if (!o)
				return lower_err();
			ops[i] = o->id;
		}
		n = lower_new_node(L, bi->op, ops, a->n, loc);
		if (n)
			ir_attr_eps_mut(L->m, n)->eps = eps;
		return lower_finish(L, n);
	}
	case BK_PLAIN: {
		IrNode *y = want_tensor(L, a, 1, fn);
		if (!y)
			return lower_err();
		/* mse promotes as arithmetic does; embed's and cross_entropy's
		 * second operand is i32 */
		Value xy[2] = {xv, lower_node_val(y->id)};
		if (bi->op == IR_OP_MSE && !lower_promote(L, xy, 2, loc))
			return lower_err();
		return lower_make2(L, bi->op, xy[0], xy[1], loc);
	}
	case BK_CAST:
		return lower_cast_call(L, a, xv, loc);
	case BK_TRANSPOSE:
		if (x->rank < 2) {
			diag_error(L->d, a->loc[0], "transpose needs a tensor of rank >= 2, got %s",
			           lower_type_str(L, x));
			return lower_err();
		}
		if (lower_make1(L, IR_OP_PERMUTE, xv, loc, &n).k == V_ERR)
			return lower_err();
		IrAttrPerm *tp = ir_attr_perm_mut(L->m, n);
		for (int i = 0; i < x->rank; i++)
			tp->perm[i] = i;
		tp->perm[x->rank - 2] = x->rank - 1;
		tp->perm[x->rank - 1] = x->rank - 2;
		tp->n = x->rank;
		return lower_finish(L, n);
	case BK_PERMUTE: {
		int64_t p[IR_MAX_RANK];
		int np;
		bool seen[IR_MAX_RANK] = {0};
		if (!int_list(L, a->v[1], a->loc[1], "permute's axes", p, &np, IR_MAX_RANK))
			return lower_err();
		if (np != x->rank) {
			diag_error(L->d, a->loc[1], "permute: %d axes given for %s", np,
			           lower_type_str(L, x));
			return lower_err();
		}
		for (int i = 0; i < np; i++) {
			if (!norm_axis(L, a->loc[1], p[i], x->rank, &p[i]))
				return lower_err();
			if (seen[p[i]]) {
				diag_error(L->d, a->loc[1],
				           "permute: axis %lld appears more than once",
				           (long long)p[i]);
				return lower_err();
			}
			seen[p[i]] = true;
		}
		if (lower_make1(L, IR_OP_PERMUTE, xv, loc, &n).k == V_ERR)
			return lower_err();
		IrAttrPerm *pa = ir_attr_perm_mut(L->m, n);
		memcpy(pa->perm, p, sizeof(int64_t) * (size_t)np);
		pa->n = np;
		return lower_finish(L, n);
	}
	case BK_RESHAPE:
		return lower_reshape(L, a, x, loc);
	case BK_SPLIT:
		return lower_split(L, s, call, a, x);
	case BK_CONCAT: {
		int *ops = arena_alloc(L->a, sizeof(int) * (size_t)a->n);
		Value *vs = arena_alloc(L->a, sizeof(Value) * (size_t)a->n);
		if (!ops || !vs || kw_axis(L, s, call, x->rank, &iv) < 0)
			return lower_err();
		for (int i = 0; i < a->n; i++) {
			IrNode *o = want_tensor(L, a, i, fn);
			if (!o)
				return lower_err();
			vs[i] = lower_node_val(o->id);
		}
		if (!lower_promote(L, vs, a->n, loc)) /* as torch.cat */
			return lower_err();
		for (int i = 0; i < a->n; i++)
			ops[i] = (int)vs[i].i;
		n = lower_new_node(L, IR_OP_CONCAT, ops, a->n, loc);
		if (n)
			ir_attr_axis_mut(L->m, n)->axis = iv;
		return lower_finish(L, n);
	}
	case BK_SLICE: {
		int64_t ax, st, en;
		if (!want_int(L, a, 1, "the slice axis", &ax) ||
		    !norm_axis(L, a->loc[1], ax, x->rank, &ax) ||
		    !want_int(L, a, 2, "the slice start", &st) ||
		    !want_int(L, a, 3, "the slice end", &en))
			return lower_err();
		int64_t dim = x->shape[ax];
		/* negative bounds count from the end, as in Python */
		int64_t s0 = st < 0 ? st + dim : st, e0 = en < 0 ? en + dim : en;
		if (s0 < 0 || e0 > dim || s0 >= e0) {
			diag_error(L->d, loc,
			           "slice [%lld, %lld) is empty or outside dim %lld (size %lld)",
			           (long long)st, (long long)en, (long long)ax, (long long)dim);
			return lower_err();
		}
		if (lower_make1(L, IR_OP_SLICE, xv, loc, &n).k == V_ERR)
			return lower_err();
		*ir_attr_slice_mut(L->m, n) = (IrAttrSlice){ax, s0, e0};
		return lower_finish(L, n);
	}
	case BK_ATTENTION: {
		int64_t heads = 0, kv_heads = 0, window = 0;
		bool causal = false;
		int r = kw_int(L, s, call, "heads", &heads);
		if (r == 0)
			diag_error(L->d, loc, "attention needs the number of heads: heads = N");
		if (r <= 0 || kw_bool(L, s, call, "causal", &causal) < 0 ||
		    kw_int(L, s, call, "kv_heads", &kv_heads) < 0 ||
		    kw_int(L, s, call, "window", &window) < 0)
			return lower_err();
		if (heads < 1 || (x->rank > 0 && x->shape[x->rank - 1] % heads != 0)) {
			diag_error(L->d, lower_kwarg(call, "heads")->loc,
			           "heads = %lld does not divide the model dim of %s",
			           (long long)heads, lower_type_str(L, x));
			return lower_err();
		}
		if (lower_kwarg(call, "kv_heads") && (kv_heads < 1 || heads % kv_heads != 0)) {
			diag_error(L->d, lower_kwarg(call, "kv_heads")->loc,
			           "kv_heads = %lld must divide heads = %lld", (long long)kv_heads,
			           (long long)heads);
			return lower_err();
		}
		if (lower_kwarg(call, "window") && window < 1) {
			diag_error(L->d, lower_kwarg(call, "window")->loc,
			           "window must be >= 1 (the keys a query sees, itself included), got %lld",
			           (long long)window);
			return lower_err();
		}
		int ops[4], nops = 3;
		for (int i = 0; i < 3; i++) {
			IrNode *o = want_tensor(L, a, i, fn);
			if (!o)
				return lower_err();
			ops[i] = o->id;
		}
		const AstNode *kseg = NULL;
		Value seg;
		r = kw_value(L, s, call, "segments", &seg, &kseg);
		if (r < 0)
			return lower_err();
		if (r > 0) {
			if (seg.k != V_NODE) {
				diag_error(L->d, kseg->loc, "segments must be a tensor (i32 segment ids "
				           "[batch, seq]), got %s", lower_describe(L, seg));
				return lower_err();
			}
			ops[nops++] = (int)seg.i;
		}
		n = lower_new_node(L, IR_OP_ATTENTION, ops, nops, loc);
		if (n)
			*ir_attr_attn_mut(L->m, n) =
			        (IrAttrAttn){.heads = heads, .causal = causal,
			                     .kv_heads = kv_heads == heads ? 0 : kv_heads, .window = window};
		return lower_finish(L, n);
	}
	case BK_ROPE: {
		/* rope(x, heads = H, theta = 10000.0): theta defaults to
		 * RoFormer's and HF LlamaConfig's base; LLaMA 3 uses 500000 */
		int64_t heads = 0;
		double theta = 10000.0;
		int r = kw_int(L, s, call, "heads", &heads);
		if (r == 0)
			diag_error(L->d, loc, "rope needs the number of heads: heads = N");
		if (r <= 0 || kw_num(L, s, call, "theta", &theta) < 0)
			return lower_err();
		int64_t dim = x->rank > 0 ? x->shape[x->rank - 1] : 0;
		if (heads < 1 || dim % heads != 0 || (dim / heads) % 2 != 0) {
			diag_error(L->d, lower_kwarg(call, "heads")->loc,
			           "heads = %lld does not split the last dim of %s into heads of an "
			           "even size", (long long)heads, lower_type_str(L, x));
			return lower_err();
		}
		if (!(theta > 0) || isinf(theta)) {
			diag_error(L->d, lower_kwarg(call, "theta")->loc,
			           "theta must be finite and > 0, got %g", theta);
			return lower_err();
		}
		if (lower_make1(L, IR_OP_ROPE, xv, loc, &n).k == V_ERR)
			return lower_err();
		*ir_attr_rope_mut(L->m, n) = (IrAttrRope){.heads = heads, .theta = theta};
		return lower_finish(L, n);
	}
	case BK_DROPOUT: {
		double rate = 0;
		int r = kw_num(L, s, call, "rate", &rate);
		if (r == 0)
			diag_error(L->d, loc, "dropout needs a rate: dropout(x, rate = 0.1)");
		if (r <= 0)
			return lower_err();
		if (rate < 0 || rate >= 1) {
			diag_error(L->d, lower_kwarg(call, "rate")->loc,
			           "rate must be in [0, 1), got %g", rate);
			return lower_err();
		}
		if (lower_make1(L, IR_OP_DROPOUT, xv, loc, &n).k == V_ERR)
			return lower_err();
		IrAttrDropout *da = ir_attr_dropout_mut(L->m, n);
		da->rate = rate;
		da->salt = L->dropout_salt++;
		return lower_finish(L, n);
	}
	case BK_ROUTE: {
		/* topk(x, k = K), one_hot(ids, n = N), moe_slot(e, experts = E,
		 * capacity = C), moe_token(e, experts = E, capacity = C) */
		IrAttrRoute ra = {0};
		const char *k1 = bi->kw[0], *k2 = bi->kw[1];
		int64_t v1 = 0, v2 = 0;
		int r1 = kw_int(L, s, call, k1, &v1);
		int r2 = k2 ? kw_int(L, s, call, k2, &v2) : 1;
		if (r1 == 0 || r2 == 0)
			diag_error(L->d, loc, "%s needs %s: %s(x, %s = N%s)", fn, r1 == 0 ? k1 : k2, fn, k1,
			           k2 ? ", capacity = C" : "");
		if (r1 <= 0 || r2 <= 0)
			return lower_err();
		if (v1 < 1 || (k2 && v2 < 1)) {
			const char *bad = v1 < 1 ? k1 : k2;
			diag_error(L->d, lower_kwarg(call, bad)->loc, "%s must be >= 1, got %lld", bad,
			           (long long)(v1 < 1 ? v1 : v2));
			return lower_err();
		}
		if (bi->op == IR_OP_TOPK)
			ra.k = v1;
		else
			ra.n = v1;
		ra.capacity = v2;
		if (bi->op == IR_OP_MOE_SLOT)
			ra.stats = ++L->moe_sites;
		if (lower_make1(L, bi->op, xv, loc, &n).k == V_ERR)
			return lower_err();
		*ir_attr_route_mut(L->m, n) = ra;
		return lower_finish(L, n);
	}
	case BK_SCATTER: {
		/* scatter_add(y, idx, size = n): the indexed dim's extent */
		IrNode *idx = want_tensor(L, a, 1, fn);
		int64_t size = 0;
		int r = kw_int(L, s, call, "size", &size);
		if (r == 0)
			diag_error(L->d, loc, "scatter_add needs the result's extent of the indexed dim: "
			                      "scatter_add(y, idx, size = N)");
		if (!idx || r <= 0)
			return lower_err();
		if (size < 1 || idx->rank < 1 || x->rank < idx->rank) {
			diag_error(L->d, loc, "scatter_add: size must be >= 1 and the indices %s no "
			                      "larger in rank than y %s", lower_type_str(L, idx),
			           lower_type_str(L, x));
			return lower_err();
		}
		int ops[2] = {(int)xv.i, idx->id};
		n = lower_new_node(L, IR_OP_SCATTER_ADD, ops, 2, loc);
		if (!n)
			return lower_err();
		n->rank = x->rank;
		memcpy(n->shape, x->shape, sizeof n->shape);
		n->shape[idx->rank - 1] = size;
		return lower_finish(L, n);
	}
	case BK_COLL:
		break; /* refused above */
	}
	return lower_err();
}
