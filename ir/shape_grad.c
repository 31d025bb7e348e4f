/* shape_grad.c - type and shape rules of the gradient ops.
 *
 * passes/autodiff.c builds these nodes and always types them through
 * ir_infer, so a rule here is what catches a wrong backward rule; the IR
 * text parser and the verifier run the same rules on hand-written or
 * transformed IR.  Ops whose result shape cannot be derived from the
 * operands (expand, sum_to, embed_bwd, pad) carry their shape like reshape
 * and are checked instead.
 */
#include "ir/shape_grad.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

typedef struct G {
	IrNode *n;
	char *msg;
	size_t cap;
} G;

static bool fail(G *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(G *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (g->cap)
		vsnprintf(g->msg, g->cap, fmt, ap);
	va_end(ap);
	return false;
}

typedef struct Shp {
	char s[IR_MAX_RANK * 22 + 4];
} Shp;

static Shp shp(int rank, const int64_t *shape)
{
	Shp r;
	size_t len = 0;
	r.s[len++] = '[';
	for (int i = 0; i < rank && i < IR_MAX_RANK; i++)
		len += (size_t)snprintf(r.s + len, sizeof r.s - len, "%s%" PRId64, i ? ", " : "",
		                        shape[i]);
	r.s[len++] = ']';
	r.s[len] = 0;
	return r;
}

#define SH(x) shp((x)->rank, (x)->shape).s

static const char *name(const G *g)
{
	return ir_op_name(g->n->op);
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static bool same_shape(const IrNode *a, const IrNode *b)
{
	return a->rank == b->rank &&
	       memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0;
}

static void set(IrNode *n, IrDtype t, int rank, const int64_t *shape)
{
	n->dtype = t;
	n->rank = rank;
	memset(n->shape, 0, sizeof n->shape);
	if (rank > 0)
		memcpy(n->shape, shape, (size_t)rank * sizeof *shape);
}

/* Operands 0..k are float tensors of one dtype. */
static bool floats(G *g, IrNode **o, int k)
{
	for (int i = 0; i < k; i++) {
		if (!is_float(o[i]->dtype))
			return fail(g, "%s: operand %d (%%%d) must be a float tensor, got %s", name(g), i,
			            o[i]->id, ir_dtype_name(o[i]->dtype));
		if (o[i]->dtype != o[0]->dtype)
			return fail(g, "%s: operand dtypes differ: %s (%%%d) vs %s (%%%d)", name(g),
			            ir_dtype_name(o[0]->dtype), o[0]->id, ir_dtype_name(o[i]->dtype),
			            o[i]->id);
	}
	return true;
}

/* Operands 0..k have one shape; the result is that shape. */
static bool alike(G *g, IrNode **o, int k)
{
	if (!floats(g, o, k))
		return false;
	for (int i = 1; i < k; i++)
		if (!same_shape(o[0], o[i]))
			return fail(g, "%s: operand shapes differ: %s (%%%d) vs %s (%%%d)", name(g),
			            SH(o[0]), o[0]->id, SH(o[i]), o[i]->id);
	set(g->n, o[0]->dtype, o[0]->rank, o[0]->shape);
	return true;
}

/* The node's own shape: sane dims, at most IR_MAX_ELEMS elements. */
static bool own_shape(G *g)
{
	IrNode *n = g->n;
	if (n->rank < 0 || n->rank > IR_MAX_RANK)
		return fail(g, "%s: invalid rank %d", name(g), n->rank);
	int64_t p = 1;
	for (int i = 0; i < n->rank; i++) {
		if (n->shape[i] < 0 || (n->shape[i] && p > IR_MAX_ELEMS / n->shape[i]))
			return fail(g, "%s: invalid or too large shape %s", name(g), SH(n));
		p *= n->shape[i];
	}
	return true;
}

/* `small` broadcasts to `big` (numpy rules). */
static bool broadcasts(int sr, const int64_t *small, int br, const int64_t *big)
{
	if (sr > br)
		return false;
	for (int i = 0; i < sr; i++) {
		int64_t s = small[sr - 1 - i], b = big[br - 1 - i];
		if (s != b && s != 1)
			return false;
	}
	return true;
}

static bool infer_expand(G *g, IrNode *x, bool sum_to)
{
	IrNode *n = g->n;
	if (!floats(g, &x, 1) || !own_shape(g))
		return false;
	if (!sum_to && !broadcasts(x->rank, x->shape, n->rank, n->shape))
		return fail(g, "expand: %s (%%%d) does not broadcast to %s", SH(x), x->id, SH(n));
	if (sum_to && !broadcasts(n->rank, n->shape, x->rank, x->shape))
		return fail(g, "sum_to: %s does not broadcast to the operand's %s (%%%d)", SH(n),
		            SH(x), x->id);
	n->dtype = sum_to ? ir_dtype_accum(x->dtype) : x->dtype;
	return true;
}

static bool infer_max_bwd(G *g, IrNode **o)
{
	const IrAttrAxes *at = ir_attr_axes(g->n);
	IrNode *dy = o[0], *x = o[1], *y = o[2];
	if (!floats(g, o, 3))
		return false;
	if (!same_shape(dy, y))
		return fail(g, "max_bwd: dy %s and y %s differ", SH(dy), SH(y));
	int64_t want[IR_MAX_RANK];
	int r = 0, k = 0;
	for (int i = 0; i < at->n; i++)
		if (at->axes[i] < 0 || at->axes[i] >= x->rank ||
		    (i > 0 && at->axes[i] <= at->axes[i - 1]))
			return fail(g, "max_bwd: axes must be sorted, unique and within rank %d",
			            x->rank);
	for (int d = 0; d < x->rank; d++) {
		bool red = k < at->n && at->axes[k] == d;
		k += red;
		if (!red)
			want[r++] = x->shape[d];
		else if (at->keepdims)
			want[r++] = 1;
	}
	if (y->rank != r || memcmp(y->shape, want, (size_t)r * sizeof want[0]) != 0)
		return fail(g, "max_bwd: y %s is not the reduction of x %s", SH(y), SH(x));
	set(g->n, x->dtype, x->rank, x->shape);
	return true;
}

static bool infer_softmax_bwd(G *g, IrNode **o)
{
	if (!alike(g, o, 2))
		return false;
	int64_t ax = ir_attr_axis(g->n)->axis;
	if (ax < 0 || ax >= o[0]->rank)
		return fail(g, "%s: axis %" PRId64 " is out of range for %s", name(g), ax, SH(o[0]));
	return true;
}

static bool check_eps(G *g)
{
	double e = ir_attr_eps(g->n)->eps;
	if (!(e >= 0) || isinf(e))
		return fail(g, "%s: eps must be finite and >= 0, got %g", name(g), e);
	return true;
}

/* *_bwd(dy, x, gamma) -> like x; *_bwd_gamma(dy, x) -> [D]. */
static bool infer_norm_bwd(G *g, IrNode **o, bool gamma)
{
	int k = gamma ? 2 : 3;
	if (!check_eps(g) || !floats(g, o, k))
		return false;
	if (!same_shape(o[0], o[1]))
		return fail(g, "%s: dy %s and x %s differ", name(g), SH(o[0]), SH(o[1]));
	if (o[1]->rank < 1)
		return fail(g, "%s: x must have rank >= 1", name(g));
	int64_t D = o[1]->shape[o[1]->rank - 1];
	if (gamma) {
		set(g->n, ir_dtype_accum(o[1]->dtype), 1, &D);
		return true;
	}
	if (o[2]->rank != 1 || o[2]->shape[0] != D)
		return fail(g, "%s: gamma must be [%" PRId64 "], got %s", name(g), D, SH(o[2]));
	set(g->n, o[1]->dtype, o[1]->rank, o[1]->shape);
	return true;
}

static bool infer_embed_bwd(G *g, IrNode *dy, IrNode *ids)
{
	IrNode *n = g->n;
	if (!floats(g, &dy, 1) || !own_shape(g))
		return false;
	if (ids->dtype != IR_I32)
		return fail(g, "embed_bwd: the ids (%%%d) must be i32", ids->id);
	if (n->rank != 2 || dy->rank != ids->rank + 1 || dy->shape[dy->rank - 1] != n->shape[1] ||
	    memcmp(dy->shape, ids->shape, (size_t)ids->rank * sizeof ids->shape[0]) != 0)
		return fail(g, "embed_bwd: dy %s, ids %s and table %s do not agree", SH(dy), SH(ids),
		            SH(n));
	n->dtype = ir_dtype_accum(dy->dtype); /* positions summed in f32, stored so */
	return true;
}

static bool infer_pad(G *g, IrNode *x)
{
	IrNode *n = g->n;
	const IrAttrSlice *at = ir_attr_slice(n);
	/* token ids too: a micro-batch of them split unevenly is padded */
	if ((x->dtype != IR_I32 && !floats(g, &x, 1)) || !own_shape(g))
		return false;
	int64_t ax = at->axis, s = at->start, e = at->end;
	if (x->rank != n->rank || ax < 0 || ax >= n->rank)
		return fail(g, "pad: axis %" PRId64 " invalid for %s padded to %s", ax, SH(x), SH(n));
	for (int d = 0; d < n->rank; d++)
		if (d != ax && x->shape[d] != n->shape[d])
			return fail(g, "pad: %s and %s differ in dim %d", SH(x), SH(n), d);
	if (s < 0 || e < s || e > n->shape[ax] || e - s != x->shape[ax])
		return fail(g, "pad: range %" PRId64 ":%" PRId64 " does not fit %s into %s", s, e,
		            SH(x), SH(n));
	n->dtype = x->dtype;
	return true;
}

bool ir_attn_check(const char *what, const IrAttrAttn *a, const IrNode *q, const IrNode *k,
                   const IrNode *v, const IrNode *seg, char *msg, size_t cap)
{
	G gg = {NULL, msg, cap}, *g = &gg;
	int64_t H = a->heads, G = ir_attn_kv_heads(a);
	const IrNode *kv[2] = {k, v};
	for (int i = 0; i < 2 && G == H && !a->head_axes; i++)
		if (!same_shape(q, kv[i]))
			return fail(g, "%s: q and %s shapes differ: %s vs %s", what, i ? "v" : "k", SH(q),
			            SH(kv[i]));
	if (H < 1)
		return fail(g, "%s: heads must be >= 1, got %" PRId64, what, H);
	if (a->causal != 0 && a->causal != 1)
		return fail(g, "%s: causal must be 0 or 1, got %" PRId64, what, a->causal);
	if (a->lse != 0 && a->lse != 1)
		return fail(g, "%s: lse must be 0 or 1, got %" PRId64, what, a->lse);
	if (q->shape[2] % H != 0)
		return fail(g, "%s: dim %" PRId64 " is not divisible by heads = %" PRId64 " (q is %s)",
		            what, q->shape[2], H, SH(q));
	/* split heads (head_axes) may hold fewer query heads than a kv group */
	if (G < 1 || (!a->head_axes && H % G != 0))
		return fail(g, "%s: kv_heads = %" PRId64 " must divide heads = %" PRId64, what, G, H);
	if (a->window < 0)
		return fail(g, "%s: window must be >= 0, got %" PRId64, what, a->window);
	if (a->seq < 0)
		return fail(g, "%s: seq must be >= 0, got %" PRId64, what, a->seq);
	if (a->head_minor & ~a->head_axes)
		return fail(g, "%s: head_minor must name axes of head_axes", what);
	int64_t want[3] = {q->shape[0], q->shape[1], G * (q->shape[2] / H)};
	for (int i = 0; i < 2; i++) {
		if (kv[i]->rank == 3 && memcmp(kv[i]->shape, want, sizeof want) == 0)
			continue;
		return fail(g, "%s: %s must be %s (kv_heads = %" PRId64 " heads of %" PRId64
		            "), got %s", what, i ? "v" : "k", shp(3, want).s, G, want[2] / G,
		            SH(kv[i]));
	}
	if (seg && (seg->dtype != IR_I32 || seg->rank != 2 || memcmp(seg->shape, want,
	                                                              sizeof want[0] * 2) != 0))
		return fail(g, "%s: segment ids must be i32%s (q's batch and sequence), got %s%s",
		            what, shp(2, want).s, ir_dtype_name(seg->dtype), SH(seg));
	return true;
}

static bool infer_attention_bwd(G *g, IrNode **o)
{
	const IrAttrAttn *at = ir_attr_attn(g->n);
	if (!alike(g, o, 2) || !floats(g, o, 4))
		return false;
	if (o[0]->rank != 3)
		return fail(g, "attention_bwd: operands must be [batch, seq, dim], got %s", SH(o[0]));
	for (int i = 2; i < 4; i++)
		if (o[i]->dtype != o[0]->dtype)
			return fail(g, "attention_bwd: operand dtypes differ");
	int si = ir_attn_bwd_seg(g->n), yi = ir_attn_bwd_y(g->n);
	if (at->lse && yi < 0)
		return fail(g, "attention_bwd: lse = 1 needs the forward attention as the last operand");
	if (!at->lse && g->n->nops > 5)
		return fail(g, "attention_bwd: takes (dy, q, k, v[, seg]) without lse = 1");
	if (!ir_attn_check("attention_bwd", at, o[1], o[2], o[3], si >= 0 ? o[si] : NULL,
	                   g->msg, g->cap))
		return false;
	if (yi >= 0 && (o[yi]->op != IR_OP_ATTENTION || !ir_attr_attn(o[yi])->lse ||
	                !same_shape(o[yi], o[0]) || o[yi]->dtype != o[0]->dtype))
		return fail(g, "attention_bwd: its last operand must be an attention with lse = 1 "
		            "shaped like dy, got %s %s%s", ir_op_name(o[yi]->op),
		            ir_dtype_name(o[yi]->dtype), SH(o[yi]));
	int64_t out[4] = {3, o[0]->shape[0], o[0]->shape[1], o[0]->shape[2]};
	set(g->n, o[0]->dtype, 4, out);
	return true;
}

static bool infer_ce_bwd(G *g, IrNode **o)
{
	IrNode *dl = o[0], *lg = o[1], *tg = o[2];
	if (!is_float(dl->dtype) || dl->rank != 0)
		return fail(g, "cross_entropy_bwd: dl (%%%d) must be a float scalar, got %s", dl->id,
		            SH(dl));
	if (!floats(g, o + 1, 1))
		return false;
	if (tg->dtype != IR_I32 || lg->rank < 1 || tg->rank != lg->rank - 1 ||
	    memcmp(tg->shape, lg->shape, (size_t)tg->rank * sizeof tg->shape[0]) != 0)
		return fail(g, "cross_entropy_bwd: targets %s must be i32 and match logits %s",
		            SH(tg), SH(lg));
	set(g->n, lg->dtype, lg->rank, lg->shape);
	return true;
}

/* ce_target(logits, targets), ce_sumexp(logits, mx): per-row values
 * shaped like the targets / mx (logits less the last dim), f32 whatever
 * the logits' dtype: the loss's statistics (mx f32 too). */
static bool infer_ce_rows(G *g, IrNode **o)
{
	IrNode *lg = o[0], *tg = o[1];
	bool tgt = g->n->op == IR_OP_CE_TARGET;
	if (!floats(g, o, 1))
		return false;
	if ((tgt ? tg->dtype != IR_I32 : tg->dtype != IR_F32) || lg->rank < 1 ||
	    tg->rank != lg->rank - 1 ||
	    memcmp(tg->shape, lg->shape, (size_t)tg->rank * sizeof tg->shape[0]) != 0)
		return fail(g, "%s: %s %s must be %s and match logits %s", name(g),
		            tgt ? "targets" : "mx", SH(tg), tgt ? "i32" : "f32", SH(lg));
	set(g->n, IR_F32, tg->rank, tg->shape);
	return true;
}

/* ce_bwd_vp(dl, logits, targets, mx, se): cross_entropy_bwd's operands
 * plus two per-row statistics, f32. */
static bool infer_ce_bwd_vp(G *g, IrNode **o)
{
	if (!infer_ce_bwd(g, o))
		return false;
	for (int i = 3; i < 5; i++)
		if (o[i]->dtype != IR_F32 || !same_shape(o[i], o[2]))
			return fail(g,
			            "ce_bwd_vp: operand %d %s must be f32, shaped like the targets %s",
			            i, SH(o[i]), SH(o[2]));
	return true;
}

/* The ring attention blocks (ops.def): q, k, v as attention's; ol and
 * attn_block's result [B, T, D + H] (output, then a log-sum-exp per head). */
static bool infer_attn_ring(G *g, IrNode **o)
{
	const IrAttrAttn *at = ir_attr_attn(g->n);
	IrOp op = g->n->op;
	const char *what = ir_op_name(op);
	int q0 = op == IR_OP_ATTN_BLOCK_BWD ? 1 : 0;
	if (op == IR_OP_ATTN_MERGE) {
		if (!alike(g, o, 2))
			return false;
		if (o[0]->rank != 3 || at->heads < 1 || o[0]->shape[2] <= at->heads ||
		    (o[0]->shape[2] - at->heads) % at->heads)
			return fail(g, "attn_merge: operands must be [batch, seq, dim + heads] with "
			            "heads = %" PRId64 ", got %s", at->heads, SH(o[0]));
		set(g->n, o[0]->dtype, 3, o[0]->shape);
		return true;
	}
	if (!floats(g, o, q0 + 3))
		return false;
	for (int i = 0; i < q0 + 3; i++)
		if (o[i]->rank != 3 || o[i]->dtype != o[0]->dtype)
			return fail(g, "%s: operands must be [batch, seq, dim] of one dtype, got %s",
			            what, SH(o[i]));
	/* the segment ids of the query block, then of the key block */
	int s0 = op == IR_OP_ATTN_BLOCK_BWD ? 5 : 3, ns = g->n->nops - s0;
	if (ns != 0 && ns != 2)
		return fail(g, "%s: give the segment ids of both blocks (qseg, kseg) or neither",
		            what);
	for (int i = 0; i < ns; i++)
		if (!ir_attn_check(what, at, o[q0], o[q0 + 1], o[q0 + 2], o[s0 + i], g->msg, g->cap))
			return false;
	if (!ir_attn_check(what, at, o[q0], o[q0 + 1], o[q0 + 2], NULL, g->msg, g->cap))
		return false;
	const IrNode *q = o[q0];
	if (op == IR_OP_ATTN_BLOCK) {
		int64_t out[3] = {q->shape[0], q->shape[1], q->shape[2] + at->heads};
		set(g->n, q->dtype, 3, out);
		return true;
	}
	int64_t ol[3] = {q->shape[0], q->shape[1], q->shape[2] + at->heads};
	if (o[4]->rank != 3 || memcmp(o[4]->shape, ol, sizeof ol) || o[4]->dtype != q->dtype ||
	    o[0]->shape[2] != q->shape[2] || o[0]->shape[1] != q->shape[1])
		return fail(g, "attn_block_bwd: dy must be like q and ol [batch, seq, dim + heads], "
		            "got %s and %s", SH(o[0]), SH(o[4]));
	int64_t out[4] = {3, q->shape[0], q->shape[1], q->shape[2]};
	set(g->n, q->dtype, 4, out);
	return true;
}

bool ir_infer_grad(IrModule *m, IrNode *n, IrNode **o, char *msg, size_t cap)
{
	(void)m;
	G g = {n, msg, msg ? cap : 0};
	switch (n->op) {
	case IR_OP_EXPAND:
		return infer_expand(&g, o[0], false);
	case IR_OP_SUM_TO:
		return infer_expand(&g, o[0], true);
	case IR_OP_RELU_BWD:
	case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD:
		return alike(&g, o, 2);
	case IR_OP_MAX_BWD:
		return infer_max_bwd(&g, o);
	case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD:
		return infer_softmax_bwd(&g, o);
	case IR_OP_LAYERNORM_BWD:
	case IR_OP_RMSNORM_BWD:
		return infer_norm_bwd(&g, o, false);
	case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD_GAMMA:
		return infer_norm_bwd(&g, o, true);
	case IR_OP_EMBED_BWD:
		return infer_embed_bwd(&g, o[0], o[1]);
	case IR_OP_PAD:
		return infer_pad(&g, o[0]);
	case IR_OP_ATTENTION_BWD:
		return infer_attention_bwd(&g, o);
	case IR_OP_ATTN_BLOCK:
	case IR_OP_ATTN_MERGE:
	case IR_OP_ATTN_BLOCK_BWD:
		return infer_attn_ring(&g, o);
	case IR_OP_CROSS_ENTROPY_BWD:
		return infer_ce_bwd(&g, o);
	case IR_OP_EMBED_BWD_VP:
		return infer_embed_bwd(&g, o[0], o[1]);
	case IR_OP_CE_TARGET:
	case IR_OP_CE_SUMEXP:
		return infer_ce_rows(&g, o);
	case IR_OP_CE_BWD_VP:
		return infer_ce_bwd_vp(&g, o);
	default:
		break;
	}
	return fail(&g, "%s: not a gradient op", name(&g));
}
