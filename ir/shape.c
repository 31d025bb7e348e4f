/* shape.c - type and shape rules for every op in ops.def.
 *
 * ir_infer computes a node's dtype and shape from its operands and attrs
 * (or, for ops whose type the caller fixes, checks it).  The same rules
 * serve the lowering (each node as it is built), the textual IR parser and
 * the verifier (on a scratch copy), so a message here is what a user sees
 * for a bad .dtm program: it names the op, the operand and the shapes.
 *
 * Every product of dims is guarded against int64 overflow and against
 * IR_MAX_ELEMS, because shapes come straight from user arithmetic.
 */
#include "ir/ir.h"
#include "ir/optim_ops.h"
#include "ir/shape_grad.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

/* Where errors go: a Diag at the node's location, or (for the verifier
 * and the IR parser, which add their own context) a message buffer. */
typedef struct Infer {
	IrModule *m;
	IrNode *n;
	Diag *d;
	char *msg;
	size_t cap;
} Infer;

/* An operand as a user sees it: its variable or parameter name when it has
 * one, else its IR id.  Rotating buffers: up to 4 per message, per thread
 * (`dtmc sweep` compiles on several). */
static const char *vn(const IrNode *n)
{
	static _Thread_local char buf[4][64];
	static _Thread_local int k;
	char *b = buf[k++ & 3];
	if (n->name)
		snprintf(b, sizeof buf[0], "'%.40s'", n->name);
	else
		snprintf(b, sizeof buf[0], "%%%d", n->id);
	return b;
}

static bool fail(Infer *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Infer *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (c->msg) {
		if (c->cap)
			vsnprintf(c->msg, c->cap, fmt, ap);
	} else if (c->d) {
		diag_verror(c->d, c->n->loc, fmt, ap);
	}
	va_end(ap);
	return false;
}

/* "[8, 32, 64]"; returned by value so several fit in one printf. */
typedef struct ShapeStr {
	char s[IR_MAX_RANK * 22 + 4];
} ShapeStr;

static ShapeStr shape_str(int rank, const int64_t *shape)
{
	ShapeStr r;
	size_t len = 0;
	r.s[len++] = '[';
	for (int i = 0; i < rank && i < IR_MAX_RANK; i++)
		len += (size_t)snprintf(r.s + len, sizeof r.s - len, "%s%" PRId64,
		                        i ? ", " : "", shape[i]);
	r.s[len++] = ']';
	r.s[len] = 0;
	return r;
}

static ShapeStr shp(const IrNode *n)
{
	return shape_str(n->rank, n->shape);
}

/* The type as the IR text writes it: f32[8, 32]. */
typedef struct TypeStr {
	char s[sizeof(ShapeStr) + 8];
} TypeStr;

static TypeStr ty(const IrNode *n)
{
	TypeStr t;
	snprintf(t.s, sizeof t.s, "%s%s", ir_dtype_name(n->dtype), shp(n).s);
	return t;
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static const char *opname(const IrNode *n)
{
	return ir_op_name(n->op);
}

/* Checks a rank and dims that came from outside (preset types and results)
 * and the element count against IR_MAX_ELEMS. */
static bool check_shape(Infer *c, int rank, const int64_t *shape, const char *what)
{
	if (rank < 0 || rank > IR_MAX_RANK)
		return fail(c, "%s: %s has rank %d (at most %d supported)", opname(c->n), what,
		            rank, IR_MAX_RANK);
	int64_t p = 1;
	bool too_large = false;
	for (int i = 0; i < rank; i++) {
		if (shape[i] < 0)
			return fail(c, "%s: %s has a negative dimension: %s", opname(c->n), what,
			            shape_str(rank, shape).s);
		/* p * shape[i] > IR_MAX_ELEMS, without a division (this runs for
		 * every node every pass builds) */
		int64_t q;
		if (shape[i] > IR_MAX_ELEMS || __builtin_mul_overflow(p, shape[i], &q) ||
		    q > IR_MAX_ELEMS)
			too_large = true;
		else
			p = q;
	}
	/* a zero dim does not make a dim of 2^60 acceptable: shard shapes
	 * computed from it would still overflow */
	if (too_large)
		return fail(c, "%s: tensor too large: %s (more than 2^48 elements)", opname(c->n),
		            shape_str(rank, shape).s);
	return true;
}

static bool set_out(Infer *c, IrDtype t, int rank, const int64_t *shape)
{
	int64_t tmp[IR_MAX_RANK] = {0};
	if (rank < 0 || rank > IR_MAX_RANK)
		return fail(c, "%s: the result would have rank %d (at most %d supported)",
		            opname(c->n), rank, IR_MAX_RANK);
	if (rank > 0)
		memcpy(tmp, shape, (size_t)rank * sizeof *tmp);
	if (!check_shape(c, rank, tmp, "the result"))
		return false;
	c->n->dtype = t;
	c->n->rank = rank;
	memset(c->n->shape, 0, sizeof c->n->shape);
	if (rank > 0)
		memcpy(c->n->shape, tmp, (size_t)rank * sizeof *tmp);
	return true;
}

static bool same_as(Infer *c, const IrNode *x)
{
	return set_out(c, x->dtype, x->rank, x->shape);
}

/* Ordinal names for messages: "the first operand". */
static const char *nth(int i)
{
	static const char *const names[] = {"first", "second", "third", "fourth", "fifth"};
	return i < 5 ? names[i] : "next";
}

static bool need_float(Infer *c, const IrNode *x, int i)
{
	if (is_float(x->dtype))
		return true;
	return fail(c, "%s: the %s operand (%s) must be a float tensor (f32, bf16 or f16), got %s",
	            opname(c->n), nth(i), vn(x), ty(x).s);
}

static bool same_dtype(Infer *c, const IrNode *a, const IrNode *b)
{
	if (a->dtype == b->dtype)
		return true;
	return fail(c, "%s: operand dtypes differ: %s (%s) vs %s (%s)", opname(c->n),
	            ty(a).s, vn(a), ty(b).s, vn(b));
}

/* numpy broadcasting: right-aligned, a dim of 1 stretches. */
static bool broadcast(Infer *c, const IrNode *a, const IrNode *b, int *rank, int64_t *out)
{
	int r = a->rank > b->rank ? a->rank : b->rank;
	for (int i = 0; i < r; i++) {
		int ia = a->rank - r + i, ib = b->rank - r + i;
		int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
		if (da == db || db == 1)
			out[i] = da;
		else if (da == 1)
			out[i] = db;
		else
			return fail(c, "%s: shapes do not broadcast: %s and %s (dim %d: %" PRId64
			            " vs %" PRId64 ")", opname(c->n), shp(a).s, shp(b).s, i, da, db);
	}
	*rank = r;
	return true;
}

/* ---- the rules, one function per family ---- */

static bool infer_preset(Infer *c)
{
	IrNode *n = c->n;
	if ((unsigned)n->dtype >= IR_DTYPE_COUNT)
		return fail(c, "%s: invalid dtype %d", opname(n), (int)n->dtype);
	if (!check_shape(c, n->rank, n->shape, "the declared type"))
		return false;
	if (n->op == IR_OP_PARAM && !is_float(n->dtype))
		return fail(c, "param: a parameter must be a float tensor (f32, bf16 or f16), got %s",
		            ty(n).s);
	char why[128];
	if ((n->op == IR_OP_PARAM || n->op == IR_OP_STATE) &&
	    ir_init_problem(ir_attr_init(n)->kind, ir_attr_init(n)->arg[0], ir_attr_init(n)->arg[1],
	                    why, sizeof why))
		return fail(c, "%s: init: %s", opname(n), why);
	if (n->op == IR_OP_CONST && n->rank != 0)
		return fail(c, "const: a constant is a scalar (shape []), got %s", ty(n).s);
	return true;
}

static bool infer_matmul(Infer *c, const IrNode *a, const IrNode *b)
{
	if (!need_float(c, a, 0) || !need_float(c, b, 1) || !same_dtype(c, a, b))
		return false;
	if (a->rank < 2 || b->rank < 2)
		return fail(c, "matmul: both operands need rank >= 2 (use reshape): %s @ %s",
		            shp(a).s, shp(b).s);
	int64_t k1 = a->shape[a->rank - 1], k2 = b->shape[b->rank - 2];
	if (k1 != k2)
		return fail(c, "matmul: inner dimensions differ: %s @ %s (%" PRId64 " vs %" PRId64 ")",
		            shp(a).s, shp(b).s, k1, k2);
	int ba = a->rank - 2, bb = b->rank - 2, r = ba > bb ? ba : bb;
	int64_t out[IR_MAX_RANK];
	for (int i = 0; i < r; i++) {
		int ia = ba - r + i, ib = bb - r + i;
		int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
		if (da == db || db == 1)
			out[i] = da;
		else if (da == 1)
			out[i] = db;
		else
			return fail(c, "matmul: batch dimensions do not broadcast: %s @ %s (%" PRId64
			            " vs %" PRId64 ")", shp(a).s, shp(b).s, da, db);
	}
	out[r] = a->shape[a->rank - 2];
	out[r + 1] = b->shape[b->rank - 1];
	return set_out(c, a->dtype, r + 2, out);
}

/* matmul_wgrad(x, dy); with acc, matmul_wgrad_acc(acc, x, dy), whose acc
 * has the result's type. */
static bool infer_wgrad(Infer *c, const IrNode *acc, const IrNode *x, const IrNode *dy)
{
	int i = acc ? 1 : 0;
	if (!need_float(c, x, i) || !need_float(c, dy, i + 1) || !same_dtype(c, x, dy))
		return false;
	bool same = x->rank >= 2 && x->rank == dy->rank;
	for (int d = 0; same && d < x->rank - 1; d++)
		same = x->shape[d] == dy->shape[d];
	if (!same)
		return fail(c, "%s: x and dy need rank >= 2 and the same leading dims: %s, %s",
		            opname(c->n), shp(x).s, shp(dy).s);
	int64_t out[2] = {x->shape[x->rank - 1], dy->shape[dy->rank - 1]};
	IrDtype t = ir_dtype_accum(x->dtype);
	if (acc && (acc->dtype != t || acc->rank != 2 || acc->shape[0] != out[0] ||
	            acc->shape[1] != out[1]))
		return fail(c, "%s: the accumulator %s is %s, the gradient %s[%lld, %lld]",
		            opname(c->n), vn(acc), ty(acc).s, ir_dtype_name(t), (long long)out[0],
		            (long long)out[1]);
	return set_out(c, t, 2, out);
}

static bool infer_binary(Infer *c, const IrNode *a, const IrNode *b)
{
	int64_t out[IR_MAX_RANK];
	int r = 0;
	if (!need_float(c, a, 0) || !need_float(c, b, 1) || !same_dtype(c, a, b))
		return false;
	if (!broadcast(c, a, b, &r, out))
		return false;
	return set_out(c, a->dtype, r, out);
}

static bool infer_reduce(Infer *c, const IrNode *x)
{
	const IrAttrAxes *at = ir_attr_axes(c->n);
	if (!need_float(c, x, 0))
		return false;
	if (at->n < 0 || at->n > IR_MAX_INTS)
		return fail(c, "%s: invalid number of axes %d", opname(c->n), at->n);
	int64_t out[IR_MAX_RANK];
	int r = 0, k = 0;
	for (int i = 0; i < at->n; i++) {
		int64_t a = at->axes[i];
		if (a < 0 || a >= x->rank)
			return fail(c, "%s: axis %" PRId64 " is out of range for %s (rank %d)",
			            opname(c->n), a, shp(x).s, x->rank);
		if (i > 0 && a <= at->axes[i - 1])
			return fail(c, "%s: axes must be sorted and unique, got %" PRId64 " after %" PRId64,
			            opname(c->n), a, at->axes[i - 1]);
	}
	for (int d = 0; d < x->rank; d++) {
		bool reduced = k < at->n && at->axes[k] == d;
		if (reduced)
			k++;
		if (!reduced)
			out[r++] = x->shape[d];
		else if (at->keepdims)
			out[r++] = 1;
	}
	return set_out(c, x->dtype, r, out);
}

static bool infer_softmax(Infer *c, const IrNode *x)
{
	int64_t axis = ir_attr_axis(c->n)->axis;
	if (!need_float(c, x, 0))
		return false;
	if (axis < 0 || axis >= x->rank)
		return fail(c, "%s: axis %" PRId64 " is out of range for %s (rank %d)", opname(c->n),
		            axis, shp(x).s, x->rank);
	return same_as(c, x);
}

static bool check_eps(Infer *c)
{
	double e = ir_attr_eps(c->n)->eps;
	if (!(e >= 0) || isinf(e))
		return fail(c, "%s: eps must be finite and >= 0, got %g", opname(c->n), e);
	return true;
}

/* layernorm(x, g, b) and rmsnorm(x, g): g and b are [last dim of x]. */
static bool infer_norm(Infer *c, IrNode **o, int nops)
{
	const IrNode *x = o[0];
	if (!check_eps(c))
		return false;
	for (int i = 0; i < nops; i++)
		if (!need_float(c, o[i], i) || !same_dtype(c, x, o[i]))
			return false;
	if (x->rank < 1)
		return fail(c, "%s: the input must have rank >= 1, got %s", opname(c->n), shp(x).s);
	int64_t dlast = x->shape[x->rank - 1];
	static const char *const what[] = {"input", "gamma", "beta"};
	for (int i = 1; i < nops; i++)
		if (o[i]->rank != 1 || o[i]->shape[0] != dlast)
			return fail(c, "%s: %s (%s) must be [%" PRId64 "] (the last dim of %s), got %s",
			            opname(c->n), what[i], vn(o[i]), dlast, shp(x).s, shp(o[i]).s);
	return same_as(c, x);
}

static bool infer_embed(Infer *c, const IrNode *tab, const IrNode *ids)
{
	if (!need_float(c, tab, 0))
		return false;
	if (tab->rank != 2)
		return fail(c, "embed: the table (%s) must be [vocab, dim], got %s", vn(tab),
		            shp(tab).s);
	if (ids->dtype != IR_I32)
		return fail(c, "embed: the ids (%s) must be i32, got %s", vn(ids), ty(ids).s);
	if (ids->rank + 1 > IR_MAX_RANK)
		return fail(c, "embed: the result would have rank %d (at most %d supported)",
		            ids->rank + 1, IR_MAX_RANK);
	int64_t out[IR_MAX_RANK];
	memcpy(out, ids->shape, (size_t)ids->rank * sizeof *out);
	out[ids->rank] = tab->shape[1];
	return set_out(c, tab->dtype, ids->rank + 1, out);
}

static bool infer_permute(Infer *c, const IrNode *x)
{
	const IrAttrPerm *at = ir_attr_perm(c->n);
	if (at->n != x->rank)
		return fail(c, "permute: the permutation has %d entries but the operand is %s (rank %d)",
		            at->n, shp(x).s, x->rank);
	int64_t out[IR_MAX_RANK];
	bool seen[IR_MAX_RANK] = {false};
	for (int i = 0; i < x->rank; i++) {
		int64_t p = at->perm[i];
		if (p < 0 || p >= x->rank || seen[p])
			return fail(c, "permute: not a permutation of 0..%d: entry %d is %" PRId64,
			            x->rank - 1, i, p);
		seen[p] = true;
		out[i] = x->shape[p];
	}
	return set_out(c, x->dtype, x->rank, out);
}

static bool infer_reshape(Infer *c, const IrNode *x)
{
	IrNode *n = c->n;
	if (!check_shape(c, n->rank, n->shape, "the target shape"))
		return false;
	int64_t a = ir_node_numel(x), b = ir_node_numel(n);
	if (a != b)
		return fail(c, "reshape: element counts differ: %s (%" PRId64 ") to %s (%" PRId64 ")",
		            shp(x).s, a, shp(n).s, b);
	n->dtype = x->dtype;
	return true;
}

/* The routing ops (ops.def): topk, one_hot, gather, scatter_add, moe_slot,
 * moe_token. */
static bool need_i32(Infer *c, const IrNode *x, const char *what)
{
	if (x->dtype == IR_I32)
		return true;
	return fail(c, "%s: %s (%s) must be i32, got %s", opname(c->n), what, vn(x), ty(x).s);
}

static bool infer_route(Infer *c, IrNode **o)
{
	IrNode *n = c->n;
	const IrNode *x = o[0];
	static const IrAttrRoute none;
	const IrAttrRoute *ra = ir_op_attr_kind(n->op) == IR_ATTR_ROUTE ? ir_attr_route(n) : &none;
	int64_t out[IR_MAX_RANK];
	memcpy(out, x->shape, sizeof out);
	switch (n->op) {
	case IR_OP_TOPK:
		if (!need_float(c, x, 0))
			return false;
		if (x->rank < 1 || ra->k < 1 || ra->k > x->shape[x->rank - 1])
			return fail(c, "topk: k = %" PRId64 " must be in [1, %" PRId64 "] (the last dim of %s)",
			            ra->k, x->rank ? x->shape[x->rank - 1] : 0, shp(x).s);
		out[x->rank - 1] = ra->k;
		return set_out(c, IR_I32, x->rank, out);
	case IR_OP_ONE_HOT:
		if (!need_i32(c, x, "the ids"))
			return false;
		if (ra->n < 1 || x->rank + 1 > IR_MAX_RANK)
			return fail(c, "one_hot: n = %" PRId64 " must be >= 1 and the rank at most %d",
			            ra->n, IR_MAX_RANK);
		out[x->rank] = ra->n;
		return set_out(c, IR_F32, x->rank + 1, out);
	case IR_OP_MOE_SLOT:
	case IR_OP_MOE_TOKEN:
		if (!need_i32(c, x, "the expert ids"))
			return false;
		if (x->rank < 2 || ra->n < 1 || ra->capacity < 1)
			return fail(c, "%s: the expert ids must be [..., tokens, k] (got %s), experts and "
			            "capacity >= 1", opname(n), shp(x).s);
		if (n->op == IR_OP_MOE_SLOT)
			return set_out(c, IR_I32, x->rank, out);
		if (__builtin_mul_overflow(ra->n, ra->capacity, &out[x->rank - 2]))
			return fail(c, "moe_token: experts x capacity overflows");
		return set_out(c, IR_I32, x->rank - 1, out);
	case IR_OP_GATHER:
	case IR_OP_SCATTER_ADD: {
		const IrNode *idx = o[1];
		bool g = n->op == IR_OP_GATHER;
		if (!need_float(c, x, 0) || !need_i32(c, idx, "the indices"))
			return false;
		int b = idx->rank - 1; /* the indexed dim */
		if (!g && !check_shape(c, n->rank, n->shape, "the target shape"))
			return false;
		if (idx->rank < 1 || x->rank < idx->rank || (!g && n->rank != x->rank) ||
		    memcmp(x->shape, idx->shape, (size_t)b * sizeof x->shape[0]) != 0 ||
		    (!g && x->shape[b] != idx->shape[b]))
			return fail(c, "%s: %s [B..., %s, R...] and the indices %s [B..., m] do not agree",
			            opname(n), shp(x).s, g ? "n" : "m", shp(idx).s);
		if (!g) {
			for (int d = 0; d < n->rank; d++)
				if (d != b && n->shape[d] != x->shape[d])
					return fail(c, "scatter_add: the result %s and %s differ outside dim %d",
					            shp(n).s, shp(x).s, b);
			n->dtype = x->dtype;
			return true;
		}
		out[b] = idx->shape[b];
		return set_out(c, x->dtype, x->rank, out);
	}
	default:
		return fail(c, "%s: not a routing op", opname(n));
	}
}

static bool infer_concat(Infer *c, IrNode **o, int nops)
{
	const IrNode *x = o[0];
	int64_t axis = ir_attr_axis(c->n)->axis;
	if (axis < 0 || axis >= x->rank)
		return fail(c, "concat: axis %" PRId64 " is out of range for %s (rank %d)", axis,
		            shp(x).s, x->rank);
	int64_t out[IR_MAX_RANK];
	memcpy(out, x->shape, (size_t)x->rank * sizeof *out);
	for (int i = 1; i < nops; i++) {
		const IrNode *y = o[i];
		if (!same_dtype(c, x, y))
			return false;
		if (y->rank != x->rank)
			return fail(c, "concat: operand ranks differ: %s (%s) and %s (%s)", shp(x).s,
			            vn(x), shp(y).s, vn(y));
		for (int d = 0; d < x->rank; d++)
			if (d != axis && y->shape[d] != x->shape[d])
				return fail(c, "concat: dim %d differs: %s (%s) and %s (%s) (only axis %"
				            PRId64 " may differ)", d, shp(x).s, vn(x), shp(y).s, vn(y), axis);
		if (out[axis] > IR_MAX_ELEMS - y->shape[axis])
			return fail(c, "concat: tensor too large along axis %" PRId64, axis);
		out[axis] += y->shape[axis];
	}
	return set_out(c, x->dtype, x->rank, out);
}

static bool infer_slice(Infer *c, const IrNode *x)
{
	const IrAttrSlice *at = ir_attr_slice(c->n);
	int64_t axis = at->axis, s = at->start, e = at->end;
	if (axis < 0 || axis >= x->rank)
		return fail(c, "slice: axis %" PRId64 " is out of range for %s (rank %d)", axis,
		            shp(x).s, x->rank);
	if (s < 0 || s > e || e > x->shape[axis])
		return fail(c, "slice: range %" PRId64 ":%" PRId64 " is not within 0..%" PRId64
		            " (dim %" PRId64 " of %s)", s, e, x->shape[axis], axis, shp(x).s);
	int64_t out[IR_MAX_RANK];
	memcpy(out, x->shape, (size_t)x->rank * sizeof *out);
	out[axis] = e - s;
	return set_out(c, x->dtype, x->rank, out);
}

static bool infer_attention(Infer *c, IrNode **o)
{
	static const char *const what[] = {"q", "k", "v"};
	for (int i = 0; i < 3; i++)
		if (!need_float(c, o[i], i) || !same_dtype(c, o[0], o[i]))
			return false;
	for (int i = 0; i < 3; i++)
		if (o[i]->rank != 3)
			return fail(c, "attention: %s (%s) must be [batch, seq, dim], got %s", what[i],
			            vn(o[i]), shp(o[i]).s);
	char msg[256];
	if (!ir_attn_check("attention", ir_attr_attn(c->n), o[0], o[1], o[2],
	                   c->n->nops > 3 ? o[3] : NULL, msg, sizeof msg))
		return fail(c, "%s", msg);
	return same_as(c, o[0]);
}

/* rope(x [..., T, D]): whole heads of an even head dim. */
static bool infer_rope(Infer *c, const IrNode *x)
{
	const IrAttrRope *at = ir_attr_rope(c->n);
	if (!need_float(c, x, 0))
		return false;
	if (x->rank < 2)
		return fail(c, "rope: the input (%s) must be [..., seq, dim], got %s", vn(x), shp(x).s);
	if (at->heads < 1)
		return fail(c, "rope: heads must be >= 1, got %" PRId64, at->heads);
	if (!(at->theta > 0) || isinf(at->theta))
		return fail(c, "rope: theta must be finite and > 0, got %g", at->theta);
	int64_t dim = x->shape[x->rank - 1];
	if (dim % at->heads != 0 || (dim / at->heads) % 2 != 0)
		return fail(c, "rope: dim %" PRId64 " is not heads = %" PRId64
		            " heads of an even head dim (the input is %s)", dim, at->heads, shp(x).s);
	return same_as(c, x);
}

static bool infer_cross_entropy(Infer *c, const IrNode *lg, const IrNode *tg)
{
	if (!need_float(c, lg, 0))
		return false;
	if (lg->rank < 1)
		return fail(c, "cross_entropy: logits (%s) must be [..., vocab], got %s", vn(lg),
		            shp(lg).s);
	if (tg->dtype != IR_I32)
		return fail(c, "cross_entropy: targets (%s) must be i32, got %s", vn(tg), ty(tg).s);
	if (tg->rank != lg->rank - 1 ||
	    memcmp(tg->shape, lg->shape, (size_t)tg->rank * sizeof tg->shape[0]) != 0)
		return fail(c, "cross_entropy: targets %s must match the leading dims of logits %s",
		            shp(tg).s, shp(lg).s);
	return set_out(c, IR_F32, 0, NULL);
}

static bool infer_mse(Infer *c, const IrNode *a, const IrNode *b)
{
	if (!need_float(c, a, 0) || !need_float(c, b, 1) || !same_dtype(c, a, b))
		return false;
	if (a->rank != b->rank ||
	    memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) != 0)
		return fail(c, "mse: operand shapes differ: %s vs %s", shp(a).s, shp(b).s);
	return set_out(c, IR_F32, 0, NULL); /* losses are kept in f32 */
}

static bool infer_dropout(Infer *c, const IrNode *x)
{
	const IrAttrDropout *at = ir_attr_dropout(c->n);
	double r = at->rate;
	if (!need_float(c, x, 0))
		return false;
	if (!(r >= 0 && r < 1))
		return fail(c, "dropout: rate must be in [0, 1), got %g", r);
	if (at->has_mb && (at->mbs < 1 || at->mb < 0 || at->mb >= at->mbs || at->bdim < 0 ||
	                   at->bdim >= x->rank || at->binner < 1))
		return fail(c, "dropout: micro-batch %lld of %lld, batch dim %lld of rank %d, "
		            "%lld per row is not a micro-batch's mask", (long long)at->mb,
		            (long long)at->mbs, (long long)at->bdim, x->rank, (long long)at->binner);
	return same_as(c, x);
}

/* Collectives: the local (per-rank) result given the group's size. */
static bool infer_coll(Infer *c, const IrNode *x)
{
	IrNode *n = c->n;
	const IrAttrColl *at = ir_attr_coll(n);
	const Mesh *mesh = &c->m->mesh;
	uint32_t valid = mesh->naxes >= 32 ? ~0u : (1u << mesh->naxes) - 1;
	if (at->axes == 0)
		return fail(c, "%s: names no mesh axes", opname(n));
	if (at->axes & ~valid)
		return fail(c, "%s: names mesh axis %d but the mesh has %d axes", opname(n),
		            __builtin_ctz(at->axes & ~valid), mesh->naxes);
	if ((unsigned)at->red >= IR_RED_COUNT)
		return fail(c, "%s: invalid reduction %d", opname(n), (int)at->red);
	if (at->n < 0 || at->n > IR_MAX_INTS)
		return fail(c, "%s: invalid attribute count %d", opname(n), at->n);
	int64_t g = mesh_axes_size(mesh, at->axes);
	if (g < 1)
		return fail(c, "%s: the group has %" PRId64 " ranks", opname(n), g);
	if (n->op == IR_OP_RECV)
		return infer_preset(c);
	if (n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_SEND)
		return same_as(c, x);
	if (n->op == IR_OP_BROADCAST) {
		if (at->n >= 1 && (at->root < 0 || at->root >= g))
			return fail(c, "broadcast: root %" PRId64 " is not in a group of %" PRId64,
			            at->root, g);
		return same_as(c, x);
	}
	int need = n->op == IR_OP_ALL_TO_ALL ? 2 : 1;
	if (at->n < need)
		return fail(c, "%s: needs %d dim attribute%s, got %d", opname(n), need,
		            need > 1 ? "s" : "", at->n);
	for (int i = 0; i < need; i++)
		if (at->args[i] < 0 || at->args[i] >= x->rank)
			return fail(c, "%s: dim %" PRId64 " is out of range for %s (rank %d)", opname(n),
			            at->args[i], shp(x).s, x->rank);
	int64_t out[IR_MAX_RANK];
	memcpy(out, x->shape, (size_t)x->rank * sizeof *out);
	int64_t d0 = at->dim; /* all_to_all: its split */
	if (n->op == IR_OP_ALL_GATHER) {
		if (out[d0] > IR_MAX_ELEMS / g)
			return fail(c, "all_gather: tensor too large: dim %" PRId64 " of %s times %" PRId64,
			            d0, shp(x).s, g);
		out[d0] *= g;
	} else {
		/* reduce_scatter, all_to_all and shard_slice cut dim d0
		 * evenly: the partitioner pads an uneven dim to a multiple
		 * of the group first (passes/partition.c) */
		if (out[d0] % g != 0)
			return fail(c, "%s: dim %" PRId64 " of %s (%" PRId64 ") is not divisible by the "
			            "group size %" PRId64, opname(n), d0, shp(x).s, out[d0], g);
		out[d0] /= g;
		if (n->op == IR_OP_ALL_TO_ALL) {
			int64_t d1 = at->a2a.concat;
			if (out[d1] > IR_MAX_ELEMS / g)
				return fail(c, "all_to_all: tensor too large: dim %" PRId64 " of %s times %"
				            PRId64, d1, shp(x).s, g);
			out[d1] *= g;
		}
	}
	return set_out(c, x->dtype, x->rank, out);
}

/* pad_mask: x's type; pad = {dim, the dim's global extent, fill}. */
static bool infer_pad_mask(Infer *c, const IrNode *x)
{
	IrNode *n = c->n;
	const IrAttrColl *at = ir_attr_coll(n);
	const Mesh *mesh = &c->m->mesh;
	uint32_t valid = mesh->naxes >= 32 ? ~0u : (1u << mesh->naxes) - 1;
	if (at->axes == 0 || (at->axes & ~valid))
		return fail(c, "pad_mask: names no mesh axes, or one the mesh lacks");
	if (at->n != 3)
		return fail(c, "pad_mask: needs 3 integer attributes (dim, size, low), got %d",
		            at->n);
	if (at->pad.dim < 0 || at->pad.dim >= x->rank)
		return fail(c, "pad_mask: dim %" PRId64 " is out of range for %s (rank %d)",
		            at->pad.dim, shp(x).s, x->rank);
	if (at->pad.size < 0 || at->pad.low < 0 || at->pad.low > 1)
		return fail(c, "pad_mask: invalid size %" PRId64 " or fill %" PRId64, at->pad.size,
		            at->pad.low);
	if (at->pad.low && !need_float(c, x, 0))
		return false;
	return same_as(c, x);
}

/* Operands exist, precede the node and have sane types. */
static bool fetch_operands(Infer *c, IrNode **o)
{
	IrNode *n = c->n;
	int mn = ir_op_min_operands(n->op), mx = ir_op_max_operands(n->op);
	if (n->nops < mn || (mx >= 0 && n->nops > mx)) {
		if (mx < 0)
			return fail(c, "%s: expects at least %d operand%s, got %d", opname(n), mn,
			            mn == 1 ? "" : "s", n->nops);
		if (mn == mx)
			return fail(c, "%s: expects %d operand%s, got %d", opname(n), mn,
			            mn == 1 ? "" : "s", n->nops);
		return fail(c, "%s: expects %d to %d operands, got %d", opname(n), mn, mx, n->nops);
	}
	for (int i = 0; i < n->nops; i++) {
		int id = n->ops[i];
		if (id < 0 || id >= c->m->nnodes || id >= n->id || !c->m->nodes[id])
			return fail(c, "%s: operand %%%d is not defined before %%%d", opname(n), id, n->id);
		o[i] = c->m->nodes[id];
		if (o[i]->rank < 0 || o[i]->rank > IR_MAX_RANK ||
		    (unsigned)o[i]->dtype >= IR_DTYPE_COUNT)
			return fail(c, "%s: operand %%%d has an invalid type", opname(n), id);
	}
	return true;
}

static bool infer_op(Infer *c, IrNode **o);

static bool infer(Infer *c)
{
	IrNode *n = c->n;
	if ((unsigned)n->op >= IR_OP_COUNT)
		return fail(c, "invalid op %d", (int)n->op);
	/* the verifier calls this for every node after every pass, so big
	 * operand lists (concat) must not grow the module's arena */
	IrNode *stack[8], **o = stack;
	if (n->nops > 8) {
		o = malloc((size_t)n->nops * sizeof *o);
		if (!o)
			return fail(c, "%s: out of memory", opname(n));
	}
	bool ok = fetch_operands(c, o) && infer_op(c, o);
	if (o != stack)
		free(o);
	return ok;
}

/* The rule for n's op, its operands fetched and checked. */
static bool infer_op(Infer *c, IrNode **o)
{
	IrNode *n = c->n;
	IrAttrKind ak = ir_op_attr_kind(n->op);
	if (n->attr && n->attr->kind != ak)
		return fail(c, "%s: attributes of another kind (%d)", opname(n), (int)n->attr->kind);
	int cnt = ak == IR_ATTR_AXES ? ir_attr_axes(n)->n : ak == IR_ATTR_PERM ? ir_attr_perm(n)->n
	        : ak == IR_ATTR_COLL ? ir_attr_coll(n)->n : 0;
	if (cnt < 0 || cnt > IR_MAX_INTS)
		return fail(c, "%s: invalid attribute count %d", opname(n), cnt);

	switch (n->op) {
	case IR_OP_PARAM:
	case IR_OP_INPUT:
	case IR_OP_CONST:
		return infer_preset(c);
	case IR_OP_MATMUL:
		return infer_matmul(c, o[0], o[1]);
	case IR_OP_MATMUL_WGRAD:
		return infer_wgrad(c, NULL, o[0], o[1]);
	case IR_OP_MATMUL_WGRAD_ACC:
		return infer_wgrad(c, o[0], o[1], o[2]);
	case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV:
		return infer_binary(c, o[0], o[1]);
	case IR_OP_NEG: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT:
	case IR_OP_RSQRT: case IR_OP_TANH: case IR_OP_RELU: case IR_OP_GELU:
	case IR_OP_SILU: case IR_OP_SIGMOID: case IR_OP_SCALE:
		if (!need_float(c, o[0], 0))
			return false;
		return same_as(c, o[0]);
	case IR_OP_CAST:
		if ((unsigned)n->dtype >= IR_DTYPE_COUNT)
			return fail(c, "cast: invalid target dtype %d", (int)n->dtype);
		return set_out(c, n->dtype, o[0]->rank, o[0]->shape);
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		return infer_reduce(c, o[0]);
	case IR_OP_SOFTMAX:
	case IR_OP_LOG_SOFTMAX:
		return infer_softmax(c, o[0]);
	case IR_OP_LAYERNORM:
	case IR_OP_RMSNORM:
		return infer_norm(c, o, n->nops);
	case IR_OP_EMBED:
	case IR_OP_EMBED_VP:
		return infer_embed(c, o[0], o[1]);
	case IR_OP_PERMUTE:
		return infer_permute(c, o[0]);
	case IR_OP_RESHAPE:
		return infer_reshape(c, o[0]);
	case IR_OP_CONCAT:
		return infer_concat(c, o, n->nops);
	case IR_OP_SLICE:
		return infer_slice(c, o[0]);
	case IR_OP_ATTENTION:
		return infer_attention(c, o);
	case IR_OP_ROPE:
		return infer_rope(c, o[0]);
	case IR_OP_TOPK: case IR_OP_ONE_HOT: case IR_OP_GATHER: case IR_OP_SCATTER_ADD:
	case IR_OP_MOE_SLOT: case IR_OP_MOE_TOKEN:
		return infer_route(c, o);
	case IR_OP_CROSS_ENTROPY:
		return infer_cross_entropy(c, o[0], o[1]);
	case IR_OP_MSE:
		return infer_mse(c, o[0], o[1]);
	case IR_OP_DROPOUT:
		return infer_dropout(c, o[0]);
	case IR_OP_ALL_GATHER:
	case IR_OP_REDUCE_SCATTER:
	case IR_OP_ALL_REDUCE:
	case IR_OP_ALL_TO_ALL:
	case IR_OP_BROADCAST:
	case IR_OP_SEND:
	case IR_OP_RECV:
	case IR_OP_SHARD_SLICE:
		return infer_coll(c, n->nops ? o[0] : NULL);
	case IR_OP_PAD_MASK:
		return infer_pad_mask(c, o[0]);
	case IR_OP_STATE:
		/* the declared type, then the optimizer rules */
		if (!infer_preset(c))
			return false;
		/* fall through */
	case IR_OP_GRAD_NORM:
	case IR_OP_ADAMW_STEP:
	case IR_OP_SGD_STEP:
	case IR_OP_ASSIGN: {
		char msg[256];
		if (!ir_infer_optim(c->m, n, o, msg, sizeof msg))
			return fail(c, "%s", msg);
		return true;
	}
	case IR_OP_EXPAND: case IR_OP_SUM_TO: case IR_OP_RELU_BWD: case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD: case IR_OP_MAX_BWD: case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD: case IR_OP_LAYERNORM_BWD: case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD: case IR_OP_RMSNORM_BWD_GAMMA: case IR_OP_EMBED_BWD:
	case IR_OP_PAD: case IR_OP_ATTENTION_BWD: case IR_OP_CROSS_ENTROPY_BWD:
	case IR_OP_EMBED_BWD_VP: case IR_OP_CE_TARGET: case IR_OP_CE_SUMEXP: case IR_OP_CE_BWD_VP:
	case IR_OP_ATTN_BLOCK: case IR_OP_ATTN_MERGE: case IR_OP_ATTN_BLOCK_BWD: {
		char msg[512];
		return ir_infer_grad(c->m, n, o, msg, sizeof msg) || fail(c, "%s", msg);
	}
	case IR_OP_LOSS_SCALE:
		n->dtype = IR_F32;
		n->rank = 0;
		memset(n->shape, 0, sizeof n->shape);
		return true;
	case IR_OP_COUNT:
		break;
	}
	return fail(c, "%s: no shape rule", opname(n));
}

bool ir_infer(IrModule *m, IrNode *n, Diag *d)
{
	Infer c = {m, n, d, NULL, 0};
	return infer(&c);
}

bool ir_infer_msg(IrModule *m, IrNode *n, char *msg, size_t cap)
{
	static char dummy[1];
	Infer c = {m, n, NULL, msg ? msg : dummy, msg ? cap : 0};
	if (msg && cap)
		msg[0] = 0;
	return infer(&c);
}
