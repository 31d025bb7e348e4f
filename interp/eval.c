/* eval.c - the reference interpreter: runs the global IR in double precision.
 *
 * Consumes a typed module (ir_infer has set every node's dtype and shape) and
 * values for its params and inputs; produces one row-major buffer of doubles
 * per node.  It trusts the shapes on the nodes but re-checks, per op, the
 * few relations its loops index by, so an inconsistent module is a
 * diagnostic rather than a buffer overrun.  Data errors a user can cause
 * (an id or target out of range) are diagnostics too.
 *
 * Loops walk the output (or input) row-major with the innermost dimension
 * contiguous; broadcast operands are followed with per-dimension strides
 * that are 0 where the operand has size 1.
 */
#include "interp/eval.h"
#include "interp/eval_impl.h"
#include "interp/eval_grad.h"
#include "ir/optim_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/float16.h"
#include "support/philox.h"

/* ---- small helpers ---- */

bool ir_eval_bad(Diag *d, const IrNode *n, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_error(d, n->loc, "%s %%%d: %s", ir_op_name(n->op), n->id, msg);
	return false;
}

/* A node's shape with scalars seen as [1], so every walk has an innermost
 * dimension.  Returns the rank used (>= 1). */
static int dims_of(const IrNode *x, int64_t *shape)
{
	if (x->rank == 0) {
		shape[0] = 1;
		return 1;
	}
	memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
	return x->rank;
}

/* Strides of operand x as seen from an output of shape oshape[r], numpy
 * style: dims aligned from the right, missing or size-1 dims get stride 0.
 * Returns false when x does not broadcast to the output. */
static bool bcast_strides(int r, const int64_t *oshape, const IrNode *x, int64_t *st)
{
	int off = r - x->rank;
	int64_t s = 1;
	if (off < 0)
		return false;
	for (int i = r - 1; i >= 0; i--) {
		int j = i - off;
		if (j < 0) {
			st[i] = 0;
			continue;
		}
		if (x->shape[j] != 1 && x->shape[j] != oshape[i])
			return false;
		st[i] = x->shape[j] == 1 ? 0 : s;
		s *= x->shape[j];
	}
	return true;
}

/* Advances the odometer idx over dims [0, r-1) (the caller's inner loop
 * walks dim r-1) and keeps k offsets in step: off[t] = sum idx[i]*st[t][i]. */
static void walk_next(int r, const int64_t *shape, int64_t *idx, int k, int64_t *off,
                      int64_t (*st)[IR_MAX_RANK])
{
	for (int i = r - 2; i >= 0; i--) {
		idx[i]++;
		for (int t = 0; t < k; t++)
			off[t] += st[t][i];
		if (idx[i] < shape[i])
			return;
		for (int t = 0; t < k; t++)
			off[t] -= st[t][i] * shape[i];
		idx[i] = 0;
	}
}

/* ---- rounding to storage dtypes ---- */

double ir_eval_round(IrDtype t, double x)
{
	switch (t) {
	case IR_F32:
		return (float)x;
	case IR_BF16:
		return bf16_to_f32(bf16_from_f32((float)x));
	case IR_F16:
		return f16_to_f32(f16_from_f32((float)x));
	case IR_I32:
		/* C's conversion: toward zero, saturating so it stays defined */
		if (isnan(x))
			return 0;
		if (x >= 2147483647.0)
			return 2147483647.0;
		if (x <= -2147483648.0)
			return -2147483648.0;
		return trunc(x);
	case IR_DTYPE_COUNT:
		break;
	}
	return x;
}

/* ---- elementwise ---- */

static double gelu(double x)
{
	const double c = 0.7978845608028654; /* sqrt(2/pi) */
	return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double sigmoid(double x)
{
	/* two branches so exp never overflows */
	if (x >= 0)
		return 1.0 / (1.0 + exp(-x));
	double z = exp(x);
	return z / (1.0 + z);
}

static bool ev_unary(IrEval *e, const IrNode *n, Diag *d)
{
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	int64_t N = ir_node_numel(n);
	if (ir_node_numel(arg(e, n, 0)) != N)
		return ir_eval_bad(d, n, "operand has %lld elements, result %lld",
		           (long long)ir_node_numel(arg(e, n, 0)), (long long)N);
	double s = n->op == IR_OP_SCALE ? ir_attr_scalar(n)->value : 0;
	/* one loop per op so the switch is outside the loop */
#define MAP(expr)                                                                                  \
	for (int64_t i = 0; i < N; i++) {                                                          \
		double v = x[i];                                                                   \
		y[i] = (expr);                                                                     \
	}                                                                                          \
	break
	switch (n->op) {
	case IR_OP_NEG:
		MAP(-v);
	case IR_OP_EXP:
		MAP(exp(v));
	case IR_OP_LOG:
		MAP(log(v));
	case IR_OP_SQRT:
		MAP(sqrt(v));
	case IR_OP_RSQRT:
		MAP(1.0 / sqrt(v));
	case IR_OP_TANH:
		MAP(tanh(v));
	case IR_OP_RELU:
		MAP(v > 0 ? v : 0.0);
	case IR_OP_GELU:
		MAP(gelu(v));
	case IR_OP_SILU:
		MAP(v * sigmoid(v));
	case IR_OP_SIGMOID:
		MAP(sigmoid(v));
	case IR_OP_SCALE:
		MAP(v * s);
	case IR_OP_CAST: {
		bool exact = e->exact_casts && n->dtype != IR_I32;
		MAP(exact ? v : ir_eval_round(n->dtype, v));
	}
	default:
		return ir_eval_bad(d, n, "not a unary op");
	}
#undef MAP
	return true;
}

static bool ev_binary(IrEval *e, const IrNode *n, Diag *d)
{
	const double *a = in(e, n, 0), *b = in(e, n, 1);
	double *y = e->val[n->id];
	int64_t shape[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, off[2] = {0, 0};
	int64_t st[2][IR_MAX_RANK];
	int r = dims_of(n, shape);
	if (!bcast_strides(n->rank, n->shape, arg(e, n, 0), st[0]) ||
	    !bcast_strides(n->rank, n->shape, arg(e, n, 1), st[1]))
		return ir_eval_bad(d, n, "operands do not broadcast to the result shape");
	if (n->rank == 0)
		st[0][0] = st[1][0] = 0;
	int64_t inner = shape[r - 1], N = ir_node_numel(n);
	if (N == 0)
		return true;
	int64_t sa = st[0][r - 1], sb = st[1][r - 1];
#define ROWS(expr)                                                                                 \
	for (int64_t o = 0; o < N; o += inner) {                                                   \
		const double *pa = a + off[0], *pb = b + off[1];                                   \
		double *py = y + o;                                                                \
		for (int64_t j = 0; j < inner; j++) {                                              \
			double u = pa[j * sa], v = pb[j * sb];                                     \
			py[j] = (expr);                                                            \
		}                                                                                  \
		walk_next(r, shape, idx, 2, off, st);                                              \
	}                                                                                          \
	break
	switch (n->op) {
	case IR_OP_ADD:
		ROWS(u + v);
	case IR_OP_SUB:
		ROWS(u - v);
	case IR_OP_MUL:
		ROWS(u * v);
	case IR_OP_DIV:
		ROWS(u / v);
	default:
		return ir_eval_bad(d, n, "not a binary op");
	}
#undef ROWS
	return true;
}

/* ---- matmul ---- */

/* matmul_wgrad: x [..., K], dy [..., N] -> [K, N], x^T dy over every
 * leading row; matmul_wgrad_acc(acc, x, dy): acc + that, the sum made
 * after the product's as add(acc, matmul_wgrad(x, dy)) makes it, so the
 * two forms agree to the last bit here. */
static bool ev_wgrad(IrEval *e, const IrNode *n, Diag *d)
{
	int o = n->op == IR_OP_MATMUL_WGRAD_ACC;
	const IrNode *X = arg(e, n, o), *DY = arg(e, n, o + 1);
	int64_t K = n->shape[0], Nn = n->shape[1];
	int64_t rows = K > 0 ? ir_node_numel(X) / K : 0;
	if (n->rank != 2 || X->shape[X->rank - 1] != K || DY->shape[DY->rank - 1] != Nn ||
	    rows * Nn != ir_node_numel(DY))
		return ir_eval_bad(d, n, "operands do not match the result");
	const double *x = in(e, n, o), *dy = in(e, n, o + 1);
	double *c = e->val[n->id];
	memset(c, 0, sizeof(double) * (size_t)(K * Nn));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < K; k++) {
			double xv = x[r * K + k];
			for (int64_t j = 0; xv != 0 && j < Nn; j++)
				c[k * Nn + j] += xv * dy[r * Nn + j];
		}
	if (o) {
		const double *acc = in(e, n, 0);
		for (int64_t i = 0; i < K * Nn; i++)
			c[i] = acc[i] + c[i];
	}
	return true;
}

/* [..., m, k] x [..., k, n] -> [..., m, n]; the batch dims broadcast. */
static bool ev_matmul(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *A = arg(e, n, 0), *B = arg(e, n, 1);
	int r = n->rank;
	if (r < 2 || A->rank < 2 || B->rank < 2 || A->rank > r || B->rank > r)
		return ir_eval_bad(d, n, "operands and result must have rank >= 2");
	int64_t M = A->shape[A->rank - 2], K = A->shape[A->rank - 1];
	int64_t Nn = B->shape[B->rank - 1];
	if (B->shape[B->rank - 2] != K || n->shape[r - 2] != M || n->shape[r - 1] != Nn)
		return ir_eval_bad(d, n, "inner or outer dimensions do not match the result");
	/* batch strides in units of whole matrices, broadcast-aware */
	int nb = r - 2;
	int64_t sa[IR_MAX_RANK] = {0}, sb[IR_MAX_RANK] = {0};
	int64_t s = 1;
	for (int i = nb - 1, j = A->rank - 3; i >= 0; i--, j--) {
		if (j < 0)
			break;
		if (A->shape[j] != 1 && A->shape[j] != n->shape[i])
			return ir_eval_bad(d, n, "batch dims of the left operand do not broadcast");
		sa[i] = A->shape[j] == 1 ? 0 : s;
		s *= A->shape[j];
	}
	s = 1;
	for (int i = nb - 1, j = B->rank - 3; i >= 0; i--, j--) {
		if (j < 0)
			break;
		if (B->shape[j] != 1 && B->shape[j] != n->shape[i])
			return ir_eval_bad(d, n, "batch dims of the right operand do not broadcast");
		sb[i] = B->shape[j] == 1 ? 0 : s;
		s *= B->shape[j];
	}
	int64_t nbatch = prod(n->shape, 0, nb);
	const double *a = in(e, n, 0), *b = in(e, n, 1);
	double *c = e->val[n->id];
	memset(c, 0, sizeof(double) * (size_t)(nbatch * M * Nn));
	for (int64_t bi = 0; bi < nbatch; bi++) {
		int64_t oa = 0, ob = 0, rem = bi;
		for (int i = nb - 1; i >= 0; i--) {
			int64_t ix = rem % n->shape[i];
			rem /= n->shape[i];
			oa += ix * sa[i];
			ob += ix * sb[i];
		}
		const double *pa = a + oa * M * K, *pb = b + ob * K * Nn;
		double *pc = c + bi * M * Nn;
		/* i-p-j order: the inner loop runs along rows of b and c */
		for (int64_t i = 0; i < M; i++)
			for (int64_t p = 0; p < K; p++) {
				double aip = pa[i * K + p];
				const double *brow = pb + p * Nn;
				double *crow = pc + i * Nn;
				for (int64_t j = 0; j < Nn; j++)
					crow[j] += aip * brow[j];
			}
	}
	return true;
}

/* ---- reductions ---- */

/* sum/mean/max over the axes attribute; as in ir_infer, an empty list reduces
 * nothing (list every axis to reduce to a scalar). */
static bool ev_reduce(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	bool red[IR_MAX_RANK] = {false};
	int64_t shape[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, off[1] = {0};
	int64_t st[1][IR_MAX_RANK];
	int r = dims_of(X, shape);
	const IrAttrAxes *at = ir_attr_axes(n);
	for (int k = 0; k < at->n; k++) {
		int64_t ax = at->axes[k];
		if (ax < 0)
			ax += X->rank;
		if (ax < 0 || ax >= X->rank)
			return ir_eval_bad(d, n, "axis %lld out of range for rank %d",
			           (long long)at->axes[k], X->rank);
		red[ax] = true;
	}
	/* where each input element lands: row-major over the kept dims */
	int64_t s = 1, count = 1;
	for (int i = r - 1; i >= 0; i--) {
		if (red[i]) {
			st[0][i] = 0;
			count *= shape[i];
		} else {
			st[0][i] = s;
			s *= shape[i];
		}
	}
	int64_t N = ir_node_numel(n), NX = ir_node_numel(X);
	if (s != N)
		return ir_eval_bad(d, n, "result has %lld elements, the kept dims %lld", (long long)N,
		           (long long)s);
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	double init = n->op == IR_OP_MAX ? -INFINITY : 0.0;
	for (int64_t i = 0; i < N; i++)
		y[i] = init;
	int64_t inner = shape[r - 1], si = st[0][r - 1];
	for (int64_t o = 0; NX > 0 && o < NX; o += inner) {
		const double *px = x + o;
		double *py = y + off[0];
		if (n->op == IR_OP_MAX) {
			for (int64_t j = 0; j < inner; j++)
				if (px[j] > py[j * si] || isnan(px[j]))
					py[j * si] = px[j];
		} else {
			for (int64_t j = 0; j < inner; j++)
				py[j * si] += px[j];
		}
		walk_next(r, shape, idx, 1, off, st);
	}
	if (n->op == IR_OP_MEAN)
		for (int64_t i = 0; i < N; i++)
			y[i] /= (double)count;
	return true;
}

/* ---- normalisation ---- */

/* softmax / log_softmax along the axis attribute, max-subtracted so large logits
 * do not overflow.  The tensor is viewed as [outer, len, inner]. */
static bool ev_softmax(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	int64_t ax = ir_attr_axis(n)->axis;
	if (ax < 0)
		ax += X->rank;
	if (X->rank == 0 || ax < 0 || ax >= X->rank || ir_node_numel(n) != ir_node_numel(X))
		return ir_eval_bad(d, n, "axis %lld invalid for rank %d", (long long)ir_attr_axis(n)->axis,
		           X->rank);
	int64_t outer = prod(X->shape, 0, (int)ax), len = X->shape[ax];
	int64_t inner = prod(X->shape, (int)ax + 1, X->rank);
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	bool lg = n->op == IR_OP_LOG_SOFTMAX;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t in = 0; in < inner; in++) {
			const double *px = x + o * len * inner + in;
			double *py = y + o * len * inner + in;
			double mx = -INFINITY, sum = 0;
			for (int64_t l = 0; l < len; l++)
				mx = fmax(mx, px[l * inner]);
			for (int64_t l = 0; l < len; l++)
				sum += exp(px[l * inner] - mx);
			double lse = mx + log(sum);
			for (int64_t l = 0; l < len; l++)
				py[l * inner] = lg ? px[l * inner] - lse : exp(px[l * inner] - lse);
		}
	return true;
}

/* layernorm(x, g, b) and rmsnorm(x, g) over the last dim; biased variance. */
static bool ev_norm(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	bool ln = n->op == IR_OP_LAYERNORM;
	if (X->rank == 0 || ir_node_numel(n) != ir_node_numel(X))
		return ir_eval_bad(d, n, "input must have rank >= 1 and match the result");
	int64_t D = X->shape[X->rank - 1], rows = D ? ir_node_numel(X) / D : 0;
	if (ir_node_numel(arg(e, n, 1)) != D || (ln && ir_node_numel(arg(e, n, 2)) != D))
		return ir_eval_bad(d, n, "gain and bias must have %lld elements", (long long)D);
	const double *x = in(e, n, 0), *g = in(e, n, 1), *b = ln ? in(e, n, 2) : NULL;
	double *y = e->val[n->id], eps = ir_attr_eps(n)->eps;
	for (int64_t r = 0; r < rows; r++) {
		const double *px = x + r * D;
		double *py = y + r * D;
		double mu = 0, var = 0;
		if (ln) {
			for (int64_t j = 0; j < D; j++)
				mu += px[j];
			mu /= (double)D;
		}
		for (int64_t j = 0; j < D; j++)
			var += (px[j] - mu) * (px[j] - mu);
		double inv = 1.0 / sqrt(var / (double)D + eps);
		for (int64_t j = 0; j < D; j++)
			py[j] = (px[j] - mu) * inv * g[j] + (ln ? b[j] : 0.0);
	}
	return true;
}

/* ---- data movement ---- */

/* An i32 value held as a double must be a whole number in [0, lim). */
static bool index_ok(double v, int64_t lim)
{
	return v >= 0 && v < (double)lim && v == floor(v);
}

/* embed(table [V, D], ids [...]) -> [..., D]. */
static bool ev_embed(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *T = arg(e, n, 0), *I = arg(e, n, 1);
	if (T->rank != 2)
		return ir_eval_bad(d, n, "table must have rank 2");
	int64_t V = T->shape[0], D = T->shape[1], N = ir_node_numel(I);
	if (ir_node_numel(n) != N * D)
		return ir_eval_bad(d, n, "result must have %lld x %lld elements", (long long)N,
		           (long long)D);
	const double *t = in(e, n, 0), *ids = in(e, n, 1);
	double *y = e->val[n->id];
	for (int64_t i = 0; i < N; i++) {
		if (!index_ok(ids[i], V))
			return ir_eval_bad(d, n, "id %g at position %lld is out of range [0, %lld)", ids[i],
			           (long long)i, (long long)V);
		memcpy(y + i * D, t + (int64_t)ids[i] * D, sizeof(double) * (size_t)D);
	}
	return true;
}

/* permute: output dim i is input dim perm[i]. */
static bool ev_permute(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	int r = n->rank;
	bool seen[IR_MAX_RANK] = {false};
	const IrAttrPerm *pa = ir_attr_perm(n);
	if (pa->n != r || X->rank != r)
		return ir_eval_bad(d, n, "permutation has %d entries for rank %d", pa->n, r);
	int64_t xst[IR_MAX_RANK], st[1][IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, off[1] = {0};
	int64_t s = 1;
	for (int i = r - 1; i >= 0; i--) {
		xst[i] = s;
		s *= X->shape[i];
	}
	for (int i = 0; i < r; i++) {
		int64_t p = pa->perm[i];
		if (p < 0 || p >= r || seen[p] || X->shape[p] != n->shape[i])
			return ir_eval_bad(d, n, "not a permutation matching the shapes");
		seen[p] = true;
		st[0][i] = xst[p];
	}
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	int64_t N = ir_node_numel(n);
	if (r == 0 || N == 0) {
		if (N)
			y[0] = x[0];
		return true;
	}
	int64_t inner = n->shape[r - 1], si = st[0][r - 1];
	for (int64_t o = 0; o < N; o += inner) {
		const double *px = x + off[0];
		for (int64_t j = 0; j < inner; j++)
			y[o + j] = px[j * si];
		walk_next(r, n->shape, idx, 1, off, st);
	}
	return true;
}

static bool ev_reshape(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t N = ir_node_numel(n);
	if (ir_node_numel(arg(e, n, 0)) != N)
		return ir_eval_bad(d, n, "element counts differ");
	memcpy(e->val[n->id], in(e, n, 0), sizeof(double) * (size_t)N);
	return true;
}

/* concat along its axis: each input contributes a block of
 * shape[axis] * inner elements to every outer row. */
static bool ev_concat(IrEval *e, const IrNode *n, Diag *d)
{
	int r = n->rank;
	int64_t ax = ir_attr_axis(n)->axis;
	if (ax < 0)
		ax += r;
	if (ax < 0 || ax >= r)
		return ir_eval_bad(d, n, "axis %lld out of range", (long long)ir_attr_axis(n)->axis);
	int64_t outer = prod(n->shape, 0, (int)ax), inner = prod(n->shape, (int)ax + 1, r);
	int64_t total = 0;
	for (int k = 0; k < n->nops; k++) {
		const IrNode *X = arg(e, n, k);
		if (X->rank != r || ir_node_numel(X) != outer * X->shape[ax] * inner)
			return ir_eval_bad(d, n, "operand %d does not match the result", k);
		total += X->shape[ax];
	}
	if (total != n->shape[ax])
		return ir_eval_bad(d, n, "operands sum to %lld along the axis, result has %lld",
		           (long long)total, (long long)n->shape[ax]);
	double *y = e->val[n->id];
	for (int64_t o = 0; o < outer; o++)
		for (int k = 0; k < n->nops; k++) {
			int64_t blk = arg(e, n, k)->shape[ax] * inner;
			memcpy(y, in(e, n, k) + o * blk, sizeof(double) * (size_t)blk);
			y += blk;
		}
	return true;
}

/* slice: {axis, start, end}, end exclusive. */
static bool ev_slice(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	const IrAttrSlice *sa = ir_attr_slice(n);
	int64_t ax = sa->axis, lo = sa->start, hi = sa->end;
	if (ax < 0)
		ax += X->rank;
	if (ax < 0 || ax >= X->rank || X->rank != n->rank)
		return ir_eval_bad(d, n, "axis %lld out of range", (long long)sa->axis);
	if (lo < 0 || hi < lo || hi > X->shape[ax] || n->shape[ax] != hi - lo)
		return ir_eval_bad(d, n, "range [%lld, %lld) invalid for a dim of %lld", (long long)lo,
		           (long long)hi, (long long)X->shape[ax]);
	int64_t outer = prod(X->shape, 0, (int)ax), inner = prod(X->shape, (int)ax + 1, X->rank);
	int64_t len = X->shape[ax], blk = (hi - lo) * inner;
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	for (int64_t o = 0; o < outer; o++)
		memcpy(y + o * blk, x + (o * len + lo) * inner, sizeof(double) * (size_t)blk);
	return true;
}

/* ---- fused model ops ---- */

/* attention(q [.., Tq, D], k [.., Tk, G*hd], v [.., Tk, G*hv][, seg]):
 * query head h uses columns h*hd .. (h+1)*hd of q and those of its kv
 * head's of k and v; scores q.k / sqrt(hd) over the keys it attends
 * (ev_attn_sees), softmax, weighted sum of v, written back to head h's
 * columns; a query attending nothing gets 0. */
/* rope(x [..., T, D]) (ops.def): pairs (j, j + hd/2) of each head rotate
 * by p * theta^(-2j/hd), p the global position (the rank's shard of T
 * starts at T * its index in the group rope.axes). */
static bool ev_rope(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	const IrAttrRope *ra = ir_attr_rope(n);
	if (X->rank < 2 || ir_node_numel(n) != ir_node_numel(X) || ra->heads < 1)
		return ir_eval_bad(d, n, "input must be [..., seq, dim] and match the result");
	int64_t D = X->shape[X->rank - 1], T = X->shape[X->rank - 2], hd = D / ra->heads;
	int64_t half = hd / 2, rows = D ? ir_node_numel(X) / D : 0, idx = 0;
	const Mesh *mesh = &e->m->mesh;
	for (int k = 0; k < mesh->naxes; k++)
		if (ra->axes >> k & 1)
			idx = idx * mesh->sizes[k] + e->coords[k];
	const double *x = in(e, n, 0);
	double *y = e->val[n->id], sgn = ra->inverse ? -1.0 : 1.0;
	for (int64_t r = 0; r < rows; r++) {
		double p = (double)(idx * T + r % T);
		for (int64_t j = 0; j < half; j++) {
			double ang = p * pow(ra->theta, -2.0 * (double)j / (double)hd);
			double c = cos(ang), sn = sgn * sin(ang);
			for (int64_t h = 0; h < ra->heads; h++) {
				int64_t i0 = r * D + h * hd + j, i1 = i0 + half;
				double x0 = x[i0], x1 = x[i1];
				y[i0] = x0 * c - x1 * sn;
				y[i1] = x1 * c + x0 * sn;
			}
		}
	}
	return true;
}

static bool ev_attention(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *Q = arg(e, n, 0), *K = arg(e, n, 1), *V = arg(e, n, 2);
	int r = Q->rank;
	if (r < 2 || K->rank != r || V->rank != r || n->rank != r)
		return ir_eval_bad(d, n, "q, k, v and the result must have the same rank >= 2");
	int64_t Tq = Q->shape[r - 2], D = Q->shape[r - 1], Dv = n->shape[r - 1];
	int64_t Tk = K->shape[r - 2], Dk = K->shape[r - 1], Dkv = V->shape[r - 1];
	int64_t B = prod(Q->shape, 0, r - 2);
	EvAttn at = ev_attn(e, n, 3, Tq);
	int64_t H = at.H;
	if (H <= 0 || D % H || Dv % H)
		return ir_eval_bad(d, n, "%lld heads do not divide the model dim %lld", (long long)H,
		           (long long)D);
	int64_t hd = D / H, hv = Dv / H;
	if (V->shape[r - 2] != Tk || prod(K->shape, 0, r - 2) != B ||
	    prod(V->shape, 0, r - 2) != B || Dk % hd || Dkv % hv || Dk / hd != Dkv / hv ||
	    ev_attn_kv(&at, H - 1) >= Dk / hd || (at.seg && Tq != Tk))
		return ir_eval_bad(d, n, "q, k, v shapes do not agree");
	double *p = malloc(sizeof(double) * (size_t)(Tk ? Tk : 1));
	if (!p)
		return ir_eval_bad(d, n, "out of memory");
	const double *q = in(e, n, 0), *k = in(e, n, 1), *v = in(e, n, 2);
	double *y = e->val[n->id];
	memset(y, 0, sizeof(double) * (size_t)(B * Tq * Dv));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < Tq; i++) {
				int64_t g = ev_attn_kv(&at, h);
				double sum = 0;
				double mx = ev_attn_scores(&at, q, k, b, h, i, Tq, Tk, D, Dk, hd, p);
				if (mx == -INFINITY)
					continue; /* attends nothing: 0 */
				for (int64_t j = 0; j < Tk; j++) {
					p[j] = exp(p[j] - mx);
					sum += p[j];
				}
				double *yi = y + (b * Tq + i) * Dv + h * hv;
				for (int64_t j = 0; j < Tk; j++) {
					const double *vj = v + (b * Tk + j) * Dkv + g * hv;
					double w = p[j] / sum;
					for (int64_t c = 0; w != 0 && c < hv; c++)
						yi[c] += w * vj[c];
				}
			}
	free(p);
	return true;
}

/* cross_entropy(logits [..., V], targets [...]): the mean over positions of
 * logsumexp(row) - row[target]. */
static bool ev_cross_entropy(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *L = arg(e, n, 0), *T = arg(e, n, 1);
	if (L->rank == 0)
		return ir_eval_bad(d, n, "logits must have rank >= 1");
	int64_t V = L->shape[L->rank - 1], N = ir_node_numel(T);
	if (ir_node_numel(L) != N * V)
		return ir_eval_bad(d, n, "logits have %lld elements, targets %lld x %lld classes",
		           (long long)ir_node_numel(L), (long long)N, (long long)V);
	const double *x = in(e, n, 0), *t = in(e, n, 1);
	double total = 0;
	for (int64_t i = 0; i < N; i++) {
		const double *row = x + i * V;
		if (!index_ok(t[i], V))
			return ir_eval_bad(d, n, "target %g at position %lld is out of range [0, %lld)",
			           t[i], (long long)i, (long long)V);
		double mx = -INFINITY, sum = 0;
		for (int64_t j = 0; j < V; j++)
			mx = fmax(mx, row[j]);
		for (int64_t j = 0; j < V; j++)
			sum += exp(row[j] - mx);
		total += mx + log(sum) - row[(int64_t)t[i]];
	}
	e->val[n->id][0] = total / (double)N;
	return true;
}

static bool ev_mse(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t N = ir_node_numel(arg(e, n, 0));
	if (ir_node_numel(arg(e, n, 1)) != N)
		return ir_eval_bad(d, n, "operands have different element counts");
	const double *a = in(e, n, 0), *b = in(e, n, 1);
	double total = 0;
	for (int64_t i = 0; i < N; i++)
		total += (a[i] - b[i]) * (a[i] - b[i]);
	e->val[n->id][0] = total / (double)N;
	return true;
}

/* Keeps each element with probability 1 - rate and scales survivors by
 * 1 / (1 - rate); the mask is the runtime's, keyed by the element's index
 * in the full-batch global operand (ir/dropout.c), so every layout and
 * micro-batch count drops the same elements. */
static bool ev_dropout(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t N = ir_node_numel(n);
	double rate = ir_attr_dropout(n)->rate;
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	if (ir_node_numel(arg(e, n, 0)) != N)
		return ir_eval_bad(d, n, "operand and result differ in size");
	if (rate < 0 || rate > 1)
		return ir_eval_bad(d, n, "rate %g is not in [0, 1]", rate);
	if (!e->training || rate == 0) {
		memcpy(y, x, sizeof(double) * (size_t)N);
		return true;
	}
	double keep_scale = rate < 1 ? 1.0 / (1.0 - rate) : 0.0;
	IrDropKey key;
	bool mapped = ir_dropout_key(e->m, n, e->partitioned, e->coords, &key);
	for (int64_t i = 0; i < N; i++)
		y[i] = philox_dropout_keep(e->seed, (uint32_t)ir_attr_dropout(n)->salt, (uint32_t)e->step,
		                        mapped ? ir_dropout_index(&key, i) : (uint64_t)i, (float)rate)
		               ? x[i] * keep_scale
		               : 0.0;
	return true;
}

static bool ev_const(IrEval *e, const IrNode *n)
{
	int64_t N = ir_node_numel(n);
	for (int64_t i = 0; i < N; i++)
		e->val[n->id][i] = ir_attr_scalar(n)->value;
	return true;
}

/* ---- driver ---- */

static bool eval_node(IrEval *e, const IrNode *n, Diag *d)
{
	if ((unsigned)n->op >= IR_OP_COUNT)
		return ir_eval_bad(d, n, "invalid op %d", (int)n->op);
	if (ir_op_flags(n->op) & OPF_COLL)
		return ir_eval_bad(d, n, "collectives cannot be evaluated on the global program");
	switch (n->op) {
	case IR_OP_PARAM:
	case IR_OP_INPUT:
		return true; /* set by the caller */
	case IR_OP_CONST:
		return ev_const(e, n);
	case IR_OP_LOSS_SCALE:
	case IR_OP_STATE:
		return ir_eval_optim(e, n, d);
	case IR_OP_MATMUL:
		return ev_matmul(e, n, d);
	case IR_OP_MATMUL_WGRAD:
	case IR_OP_MATMUL_WGRAD_ACC:
		return ev_wgrad(e, n, d);
	case IR_OP_ADD:
	case IR_OP_SUB:
	case IR_OP_MUL:
	case IR_OP_DIV:
		return ev_binary(e, n, d);
	case IR_OP_NEG:
	case IR_OP_EXP:
	case IR_OP_LOG:
	case IR_OP_SQRT:
	case IR_OP_RSQRT:
	case IR_OP_TANH:
	case IR_OP_RELU:
	case IR_OP_GELU:
	case IR_OP_SILU:
	case IR_OP_SIGMOID:
	case IR_OP_SCALE:
	case IR_OP_CAST:
		return ev_unary(e, n, d);
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		return ev_reduce(e, n, d);
	case IR_OP_SOFTMAX:
	case IR_OP_LOG_SOFTMAX:
		return ev_softmax(e, n, d);
	case IR_OP_LAYERNORM:
	case IR_OP_RMSNORM:
		return ev_norm(e, n, d);
	case IR_OP_EMBED:
		return ev_embed(e, n, d);
	case IR_OP_PERMUTE:
		return ev_permute(e, n, d);
	case IR_OP_RESHAPE:
		return ev_reshape(e, n, d);
	case IR_OP_CONCAT:
		return ev_concat(e, n, d);
	case IR_OP_SLICE:
		return ev_slice(e, n, d);
	case IR_OP_ATTENTION:
		return ev_attention(e, n, d);
	case IR_OP_ROPE:
		return ev_rope(e, n, d);
	case IR_OP_TOPK: case IR_OP_ONE_HOT: case IR_OP_GATHER: case IR_OP_SCATTER_ADD:
	case IR_OP_MOE_SLOT: case IR_OP_MOE_TOKEN:
		return ir_eval_route(e, n, d);
	case IR_OP_CROSS_ENTROPY:
		return ev_cross_entropy(e, n, d);
	case IR_OP_MSE:
		return ev_mse(e, n, d);
	case IR_OP_DROPOUT:
		return ev_dropout(e, n, d);
	case IR_OP_GRAD_NORM:
	case IR_OP_ADAMW_STEP:
	case IR_OP_SGD_STEP:
	case IR_OP_ASSIGN:
		return ir_eval_optim(e, n, d);
	case IR_OP_EXPAND:
	case IR_OP_SUM_TO:
	case IR_OP_RELU_BWD:
	case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD:
	case IR_OP_MAX_BWD:
	case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD:
	case IR_OP_LAYERNORM_BWD:
	case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD:
	case IR_OP_RMSNORM_BWD_GAMMA:
	case IR_OP_EMBED_BWD:
	case IR_OP_PAD:
	case IR_OP_ATTENTION_BWD:
	case IR_OP_CROSS_ENTROPY_BWD:
	case IR_OP_EMBED_VP:
	case IR_OP_EMBED_BWD_VP:
	case IR_OP_CE_TARGET:
	case IR_OP_CE_SUMEXP:
	case IR_OP_CE_BWD_VP:
	case IR_OP_PAD_MASK:
		return ir_eval_grad(e, n, d);
	case IR_OP_ATTN_BLOCK:
	case IR_OP_ATTN_MERGE:
	case IR_OP_ATTN_BLOCK_BWD:
		return ir_eval_ring(e, n, d);
	/* no default: a new op in ops.def should fail to compile here until
	 * it has a rule (-Wswitch) */
	case IR_OP_ALL_GATHER:
	case IR_OP_REDUCE_SCATTER:
	case IR_OP_ALL_REDUCE:
	case IR_OP_ALL_TO_ALL:
	case IR_OP_BROADCAST:
	case IR_OP_SEND:
	case IR_OP_RECV:
	case IR_OP_COUNT:
		break;
	case IR_OP_SHARD_SLICE:
		return ir_eval_bad(d, n, "rank-dependent ops run in the SPMD interpreter (eval_spmd.h)");
	}
	return ir_eval_bad(d, n, "no evaluation rule");
}

bool ir_eval_init(IrEval *e, const IrModule *m)
{
	memset(e, 0, sizeof *e);
	e->m = m;
	e->training = true;
	e->val = calloc((size_t)(m->nnodes ? m->nnodes : 1), sizeof(double *));
	if (!e->val)
		return false;
	for (int i = 0; i < m->nnodes; i++) {
		int64_t N = ir_node_numel(m->nodes[i]);
		if (N < 0 || N > IR_MAX_ELEMS) {
			ir_eval_free(e);
			return false;
		}
		/* at least one element so scalars and empty tensors need no
		 * special case and calloc(0) never returns NULL */
		e->val[i] = calloc((size_t)(N ? N : 1), sizeof(double));
		if (!e->val[i]) {
			ir_eval_free(e);
			return false;
		}
	}
	return true;
}

void ir_eval_set(IrEval *e, int node, const double *data)
{
	DTM_ASSERT(node >= 0 && node < e->m->nnodes);
	memcpy(e->val[node], data, sizeof(double) * (size_t)ir_node_numel(e->m->nodes[node]));
}

void ir_eval_init_params(IrEval *e, uint64_t seed)
{
	for (int i = 0; i < e->m->nnodes; i++) {
		const IrNode *n = e->m->nodes[i];
		if ((n->op != IR_OP_PARAM && n->op != IR_OP_STATE) || ir_attr_init(n)->kind == IR_INIT_NONE)
			continue;
		ir_eval_fill_init(e->m, n, seed, ir_node_numel(n), e->val[i]);
	}
}

void ir_eval_fill_init(const IrModule *m, const IrNode *n, uint64_t seed, int64_t N, double *v)
{
	/* a master copy starts from its param's unrounded values, so it is
	 * keyed by the param's name (as the runtime does) */
	const char *key = n->name ? n->name : "";
	int p = ir_link_param(m, n);
	if (n->op == IR_OP_STATE && ir_link(m, n) == IR_LINK_OPT_MASTER && p >= 0 &&
	    m->nodes[p]->name)
		key = m->nodes[p]->name;
	uint64_t hash = hash_fnv1a64(key);
	const IrAttrInit *init = ir_attr_init(n);
	float a = (float)init->arg[0], b = (float)init->arg[1];
	for (int64_t j = 0; j < N; j++) {
		switch (init->kind) {
		case IR_INIT_ZEROS:
			v[j] = 0;
			break;
		case IR_INIT_ONES:
			v[j] = 1;
			break;
		case IR_INIT_NORMAL:
			v[j] = philox_init_normal(seed, hash, (uint64_t)j, a, b);
			break;
		case IR_INIT_UNIFORM:
			v[j] = philox_init_uniform(seed, hash, (uint64_t)j, a, b);
			break;
		case IR_INIT_NONE:
			break;
		}
	}
}

bool ir_eval_node(IrEval *e, int i, Diag *d)
{
	const IrNode *n = e->m->nodes[i];
	for (int k = 0; k < n->nops; k++)
		DTM_ASSERT(n->ops[k] >= 0 && n->ops[k] < i);
	return eval_node(e, n, d);
}

bool ir_eval_run(IrEval *e, Diag *d, uint64_t seed, int64_t step)
{
	e->seed = seed;
	e->step = step;
	for (int i = 0; i < e->m->nnodes; i++) {
		const IrNode *n = e->m->nodes[i];
		for (int k = 0; k < n->nops; k++)
			DTM_ASSERT(n->ops[k] >= 0 && n->ops[k] < i);
		if (!eval_node(e, n, d))
			return false;
	}
	return true;
}

double ir_eval_loss(const IrEval *e)
{
	if (e->m->loss < 0)
		return NAN;
	return e->val[e->m->loss][0];
}

void ir_eval_free(IrEval *e)
{
	if (e->val) {
		for (int i = 0; i < e->m->nnodes; i++)
			free(e->val[i]);
		free(e->val);
	}
	e->val = NULL;
}

double ir_eval_loss_fd(IrEval *e, Diag *d, int param, int64_t elem, double h)
{
	const IrModule *m = e->m;
	SrcLoc none = {0};
	if (m->loss < 0) {
		diag_error(d, none, "finite difference: the module has no loss");
		return NAN;
	}
	if (param < 0 || param >= m->nnodes || !(ir_op_flags(m->nodes[param]->op) & OPF_LEAF) ||
	    elem < 0 || elem >= ir_node_numel(m->nodes[param])) {
		diag_error(d, none, "finite difference: %%%d[%lld] is not a leaf element", param,
		           (long long)elem);
		return NAN;
	}
	double *p = &e->val[param][elem], p0 = *p;
	/* divide by the step actually taken, which rounding may have changed */
	double hi = p0 + h, lo = p0 - h;
	*p = hi;
	if (!ir_eval_run(e, d, e->seed, e->step)) {
		*p = p0;
		return NAN;
	}
	double lhi = ir_eval_loss(e);
	*p = lo;
	bool ok = ir_eval_run(e, d, e->seed, e->step);
	*p = p0;
	if (!ok)
		return NAN;
	return (lhi - ir_eval_loss(e)) / (hi - lo);
}
