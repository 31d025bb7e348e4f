/* eval_grad.c - f64 semantics of the gradient ops, for the reference
 * interpreter.
 *
 * These are written straight from the calculus (recomputing what the
 * forward computed rather than sharing code with it), since the autodiff
 * tests compare them with finite differences of eval.c's forward ops: two
 * independent derivations agreeing is the point.  Shapes were checked by
 * ir_infer; the few relations the loops index by are re-checked so an
 * inconsistent node is a diagnostic, not an overrun.
 */
#include "interp/eval_grad.h"
#include "interp/eval_impl.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* For each element of the big tensor B (row-major), the index of the
 * element of S it maps to, where S is B with the dims in `red` reduced to
 * one (kept or dropped: only the order of the rest matters).  Written to
 * map[numel(B)], malloc'd; NULL when out of memory. */
static int64_t *group_map(int rank, const int64_t *shape, const bool *red)
{
	int64_t N = prod(shape, 0, rank), st[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, s = 1;
	int64_t *map = malloc(sizeof(int64_t) * (size_t)(N ? N : 1));
	if (!map)
		return NULL;
	for (int i = rank - 1; i >= 0; i--) {
		st[i] = red[i] ? 0 : s;
		s *= red[i] ? 1 : shape[i];
	}
	int64_t off = 0;
	for (int64_t i = 0; i < N; i++) {
		map[i] = off;
		for (int d = rank - 1; d >= 0; d--) {
			idx[d]++;
			off += st[d];
			if (idx[d] < shape[d])
				break;
			off -= st[d] * shape[d];
			idx[d] = 0;
		}
	}
	return map;
}

/* The dims of big (rank br) that a broadcast from small (rank sr) spans. */
static void bcast_dims(int sr, const int64_t *small, int br, const int64_t *big, bool *red)
{
	for (int i = 0; i < br; i++) {
		int j = i - (br - sr);
		red[i] = j < 0 || (small[j] == 1 && big[i] != 1);
	}
}

/* expand (small -> node) and sum_to (big operand -> node). */
static bool ev_expand(IrEval *e, const IrNode *n, Diag *d, bool sum)
{
	const IrNode *X = arg(e, n, 0);
	const IrNode *big = sum ? X : n, *small = sum ? n : X;
	bool red[IR_MAX_RANK];
	if (small->rank > big->rank)
		return ir_eval_bad(d, n, "shapes do not broadcast");
	bcast_dims(small->rank, small->shape, big->rank, big->shape, red);
	int64_t *map = group_map(big->rank, big->shape, red);
	if (!map)
		return ir_eval_bad(d, n, "out of memory");
	int64_t NB = ir_node_numel(big), NS = ir_node_numel(small);
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	bool ok = true;
	for (int64_t i = 0; i < NB; i++)
		if (map[i] >= NS)
			ok = false;
	if (ok && sum) {
		memset(y, 0, sizeof(double) * (size_t)NS);
		for (int64_t i = 0; i < NB; i++)
			y[map[i]] += x[i];
	} else if (ok) {
		for (int64_t i = 0; i < NB; i++)
			y[i] = x[map[i]];
	}
	free(map);
	return ok || ir_eval_bad(d, n, "shapes do not broadcast");
}

static double gelu_grad(double x)
{
	const double c = 0.7978845608028654, a = 0.044715;
	double t = tanh(c * (x + a * x * x * x));
	return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
}

static double sigm(double x)
{
	if (x >= 0)
		return 1.0 / (1.0 + exp(-x));
	double z = exp(x);
	return z / (1.0 + z);
}

static bool ev_act(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t N = ir_node_numel(n);
	if (ir_node_numel(arg(e, n, 0)) != N || ir_node_numel(arg(e, n, 1)) != N)
		return ir_eval_bad(d, n, "operands differ in size");
	const double *dy = in(e, n, 0), *x = in(e, n, 1);
	double *y = e->val[n->id];
	for (int64_t i = 0; i < N; i++) {
		double v = x[i], s;
		switch (n->op) {
		case IR_OP_RELU_BWD:
			y[i] = v > 0 ? dy[i] : 0.0;
			break;
		case IR_OP_GELU_BWD:
			y[i] = dy[i] * gelu_grad(v);
			break;
		default:
			s = sigm(v);
			y[i] = dy[i] * s * (1 + v * (1 - s));
			break;
		}
	}
	return true;
}

/* max_bwd(dy, x, y): ties share the gradient evenly. */
static bool ev_max_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 1);
	bool red[IR_MAX_RANK] = {false};
	const IrAttrAxes *at = ir_attr_axes(n);
	for (int k = 0; k < at->n; k++) {
		if (at->axes[k] < 0 || at->axes[k] >= X->rank)
			return ir_eval_bad(d, n, "axis out of range");
		red[at->axes[k]] = true;
	}
	int64_t NX = ir_node_numel(X), NY = ir_node_numel(arg(e, n, 2));
	int64_t *map = group_map(X->rank, X->shape, red);
	double *cnt = calloc((size_t)(NY ? NY : 1), sizeof(double));
	if (!map || !cnt) {
		free(map);
		free(cnt);
		return ir_eval_bad(d, n, "out of memory");
	}
	const double *dy = in(e, n, 0), *x = in(e, n, 1), *y = in(e, n, 2);
	double *dx = e->val[n->id];
	for (int64_t i = 0; i < NX; i++)
		if (x[i] == y[map[i]])
			cnt[map[i]] += 1;
	for (int64_t i = 0; i < NX; i++)
		dx[i] = x[i] == y[map[i]] ? dy[map[i]] / cnt[map[i]] : 0.0;
	free(map);
	free(cnt);
	return true;
}

/* softmax_bwd / log_softmax_bwd along the axis attribute, viewed as
 * [outer, len, inner]. */
static bool ev_softmax_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t ax = ir_attr_axis(n)->axis;
	if (ax < 0 || ax >= n->rank)
		return ir_eval_bad(d, n, "axis out of range");
	int64_t outer = prod(n->shape, 0, (int)ax), len = n->shape[ax];
	int64_t inner = prod(n->shape, (int)ax + 1, n->rank);
	const double *dy = in(e, n, 0), *y = in(e, n, 1);
	double *dx = e->val[n->id];
	bool lg = n->op == IR_OP_LOG_SOFTMAX_BWD;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t c = 0; c < inner; c++) {
			int64_t base = o * len * inner + c;
			double s = 0;
			for (int64_t l = 0; l < len; l++) {
				int64_t i = base + l * inner;
				s += lg ? dy[i] : dy[i] * y[i];
			}
			for (int64_t l = 0; l < len; l++) {
				int64_t i = base + l * inner;
				dx[i] = lg ? dy[i] - exp(y[i]) * s : y[i] * (dy[i] - s);
			}
		}
	return true;
}

/* layernorm/rmsnorm backward, per row of the last dim; gamma variants sum
 * dy * xhat over rows. */
static bool ev_norm_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 1);
	bool ln = n->op == IR_OP_LAYERNORM_BWD || n->op == IR_OP_LAYERNORM_BWD_GAMMA;
	bool gam = n->op == IR_OP_LAYERNORM_BWD_GAMMA || n->op == IR_OP_RMSNORM_BWD_GAMMA;
	if (X->rank < 1)
		return ir_eval_bad(d, n, "x must have rank >= 1");
	int64_t D = X->shape[X->rank - 1], rows = D ? ir_node_numel(X) / D : 0;
	if (ir_node_numel(arg(e, n, 0)) != rows * D || (!gam && ir_node_numel(arg(e, n, 2)) != D))
		return ir_eval_bad(d, n, "operands do not agree");
	const double *dy = in(e, n, 0), *x = in(e, n, 1), *g = gam ? NULL : in(e, n, 2);
	double *out = e->val[n->id], eps = ir_attr_eps(n)->eps;
	double *xh = malloc(sizeof(double) * (size_t)(D ? D : 1));
	if (!xh)
		return ir_eval_bad(d, n, "out of memory");
	if (gam)
		memset(out, 0, sizeof(double) * (size_t)D);
	for (int64_t r = 0; r < rows; r++) {
		const double *px = x + r * D, *pdy = dy + r * D;
		double mu = 0, var = 0;
		if (ln) {
			for (int64_t j = 0; j < D; j++)
				mu += px[j];
			mu /= (double)D;
		}
		for (int64_t j = 0; j < D; j++)
			var += (px[j] - mu) * (px[j] - mu);
		double rstd = 1.0 / sqrt(var / (double)D + eps);
		for (int64_t j = 0; j < D; j++)
			xh[j] = (px[j] - mu) * rstd;
		if (gam) {
			for (int64_t j = 0; j < D; j++)
				out[j] += pdy[j] * xh[j];
			continue;
		}
		double mg = 0, mgx = 0;
		for (int64_t j = 0; j < D; j++) {
			mg += pdy[j] * g[j];
			mgx += pdy[j] * g[j] * xh[j];
		}
		mg = ln ? mg / (double)D : 0.0;
		mgx /= (double)D;
		for (int64_t j = 0; j < D; j++)
			out[r * D + j] = rstd * (pdy[j] * g[j] - mg - xh[j] * mgx);
	}
	free(xh);
	return true;
}

static bool ev_embed_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t V = n->shape[0], D = n->shape[1], N = ir_node_numel(arg(e, n, 1));
	if (ir_node_numel(arg(e, n, 0)) != N * D)
		return ir_eval_bad(d, n, "dy does not match ids x dim");
	const double *dy = in(e, n, 0), *ids = in(e, n, 1);
	double *t = e->val[n->id];
	memset(t, 0, sizeof(double) * (size_t)(V * D));
	for (int64_t i = 0; i < N; i++) {
		if (!(ids[i] >= 0 && ids[i] < (double)V && ids[i] == floor(ids[i])))
			return ir_eval_bad(d, n, "id out of range");
		double *row = t + (int64_t)ids[i] * D;
		for (int64_t j = 0; j < D; j++)
			row[j] += dy[i * D + j];
	}
	return true;
}

static bool ev_pad(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	int64_t ax = ir_attr_slice(n)->axis, lo = ir_attr_slice(n)->start;
	if (ax < 0 || ax >= n->rank || X->rank != n->rank ||
	    lo + X->shape[ax] > n->shape[ax] || lo < 0)
		return ir_eval_bad(d, n, "range does not fit");
	int64_t outer = prod(n->shape, 0, (int)ax), inner = prod(n->shape, (int)ax + 1, n->rank);
	int64_t len = n->shape[ax], blk = X->shape[ax] * inner;
	double *y = e->val[n->id];
	memset(y, 0, sizeof(double) * (size_t)ir_node_numel(n));
	for (int64_t o = 0; o < outer; o++)
		memcpy(y + (o * len + lo) * inner, in(e, n, 0) + o * blk, sizeof(double) * (size_t)blk);
	return true;
}

/* attention_bwd: per batch, head and query row, recompute the
 * probabilities p over the keys it attends, then dv += p dy,
 * dp = dy . v, ds = p (dp - p . dp), dq += scale ds k, dk += scale ds q;
 * dk and dv in query head h's columns (per query head, ops.def). */
static bool ev_attention_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *Q = arg(e, n, 1), *K = arg(e, n, 2);
	int64_t B = Q->shape[0], T = Q->shape[1], D = Q->shape[2], Dk = K->shape[2];
	EvAttn at = ev_attn(e, n, ir_attn_bwd_seg(n), T);
	int64_t H = at.H;
	if (Q->rank != 3 || H < 1 || D % H || ir_node_numel(n) != 3 * B * T * D ||
	    Dk % (D / H) || ev_attn_kv(&at, H - 1) >= Dk / (D / H))
		return ir_eval_bad(d, n, "shapes do not agree");
	int64_t hd = D / H, S = B * T * D;
	double scale = 1.0 / sqrt((double)hd);
	double *p = malloc(sizeof(double) * (size_t)(2 * T + 1));
	if (!p)
		return ir_eval_bad(d, n, "out of memory");
	double *dp = p + T;
	const double *dy = in(e, n, 0), *q = in(e, n, 1), *k = in(e, n, 2), *v = in(e, n, 3);
	double *dq = e->val[n->id], *dk = dq + S, *dv = dk + S;
	memset(dq, 0, sizeof(double) * (size_t)(3 * S));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < T; i++) {
				int64_t qi = (b * T + i) * D + h * hd, g = ev_attn_kv(&at, h);
				double sum = 0, pdp = 0;
				double mx = ev_attn_scores(&at, q, k, b, h, i, T, T, D, Dk, hd, p);
				if (mx == -INFINITY)
					continue;
				for (int64_t j = 0; j < T; j++) {
					p[j] = exp(p[j] - mx);
					sum += p[j];
				}
				for (int64_t j = 0; j < T; j++) {
					int64_t vj = (b * T + j) * Dk + g * hd, oj = (b * T + j) * D + h * hd;
					p[j] /= sum;
					dp[j] = 0;
					for (int64_t c = 0; c < hd; c++) {
						dv[oj + c] += p[j] * dy[qi + c];
						dp[j] += dy[qi + c] * v[vj + c];
					}
					pdp += p[j] * dp[j];
				}
				for (int64_t j = 0; j < T; j++) {
					int64_t kj = (b * T + j) * Dk + g * hd, oj = (b * T + j) * D + h * hd;
					double ds = p[j] * (dp[j] - pdp) * scale;
					for (int64_t c = 0; c < hd; c++) {
						dq[qi + c] += ds * k[kj + c];
						dk[oj + c] += ds * q[qi + c];
					}
				}
			}
	free(p);
	return true;
}

static bool ev_ce_bwd(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *L = arg(e, n, 1);
	int64_t V = L->shape[L->rank - 1], N = ir_node_numel(arg(e, n, 2));
	if (ir_node_numel(L) != N * V)
		return ir_eval_bad(d, n, "logits do not match targets");
	double dl = in(e, n, 0)[0] / (double)(N ? N : 1);
	const double *x = in(e, n, 1), *t = in(e, n, 2);
	double *dx = e->val[n->id];
	for (int64_t i = 0; i < N; i++) {
		const double *row = x + i * V;
		double *drow = dx + i * V, mx = -INFINITY, sum = 0;
		if (!(t[i] >= 0 && t[i] < (double)V && t[i] == floor(t[i])))
			return ir_eval_bad(d, n, "target out of range");
		for (int64_t j = 0; j < V; j++)
			mx = fmax(mx, row[j]);
		for (int64_t j = 0; j < V; j++)
			sum += exp(row[j] - mx);
		for (int64_t j = 0; j < V; j++)
			drow[j] = exp(row[j] - mx) / sum * dl;
		drow[(int64_t)t[i]] -= dl;
	}
	return true;
}

/* ---- vocab-parallel ops: this rank's vocab shard starts at off ---- */

static int64_t vp_offset(const IrEval *e, const IrNode *n, int64_t local)
{
	int64_t idx = 0;
	const Mesh *mesh = &e->m->mesh;
	for (int k = 0; k < mesh->naxes; k++)
		if (ir_attr_coll(n)->axes >> k & 1)
			idx = idx * mesh->sizes[k] + e->coords[k];
	return idx * local;
}

static bool ev_embed_vp(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *tab = arg(e, n, 0);
	int64_t V = tab->shape[0], D = tab->shape[1], N = ir_node_numel(arg(e, n, 1));
	int64_t off = vp_offset(e, n, V);
	const double *t = in(e, n, 0), *ids = in(e, n, 1);
	double *y = e->val[n->id];
	for (int64_t i = 0; i < N; i++) {
		if (ids[i] != floor(ids[i]))
			return ir_eval_bad(d, n, "id out of range");
		int64_t r = (int64_t)ids[i] - off;
		for (int64_t j = 0; j < D; j++)
			y[i * D + j] = r >= 0 && r < V ? t[r * D + j] : 0;
	}
	return true;
}

static bool ev_embed_bwd_vp(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t V = n->shape[0], D = n->shape[1], N = ir_node_numel(arg(e, n, 1));
	int64_t off = vp_offset(e, n, V);
	const double *dy = in(e, n, 0), *ids = in(e, n, 1);
	double *t = e->val[n->id];
	(void)d;
	memset(t, 0, sizeof(double) * (size_t)(V * D));
	for (int64_t i = 0; i < N; i++) {
		int64_t r = (int64_t)ids[i] - off;
		if (r < 0 || r >= V)
			continue;
		for (int64_t j = 0; j < D; j++)
			t[r * D + j] += dy[i * D + j];
	}
	return true;
}

/* ce_target, ce_sumexp */
static bool ev_ce_rows(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *L = arg(e, n, 0);
	int64_t V = L->shape[L->rank - 1], N = ir_node_numel(n);
	const double *x = in(e, n, 0), *b = in(e, n, 1);
	double *y = e->val[n->id];
	int64_t off = n->op == IR_OP_CE_TARGET ? vp_offset(e, n, V) : 0;
	(void)d;
	for (int64_t i = 0; i < N; i++) {
		const double *row = x + i * V;
		if (n->op == IR_OP_CE_TARGET) {
			int64_t r = (int64_t)b[i] - off;
			y[i] = r >= 0 && r < V ? row[r] : 0;
		} else {
			double s = 0;
			for (int64_t j = 0; j < V; j++)
				s += exp(row[j] - b[i]);
			y[i] = s;
		}
	}
	return true;
}

static bool ev_ce_bwd_vp(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *L = arg(e, n, 1);
	int64_t V = L->shape[L->rank - 1], N = ir_node_numel(arg(e, n, 2));
	int64_t off = vp_offset(e, n, V);
	double dl = in(e, n, 0)[0] / (double)(N ? N : 1);
	const double *x = in(e, n, 1), *t = in(e, n, 2), *mx = in(e, n, 3), *se = in(e, n, 4);
	double *dx = e->val[n->id];
	(void)d;
	for (int64_t i = 0; i < N; i++) {
		for (int64_t j = 0; j < V; j++)
			dx[i * V + j] = exp(x[i * V + j] - mx[i]) / se[i] * dl;
		int64_t r = (int64_t)t[i] - off;
		if (r >= 0 && r < V)
			dx[i * V + r] -= dl;
	}
	return true;
}

/* pad_mask: the rows of this rank's chunk past the global extent set to
 * 0, or (low) the lowest finite double. */
static bool ev_pad_mask(IrEval *e, const IrNode *n, Diag *d)
{
	const IrAttrColl *pm = ir_attr_coll(n);
	int ax = (int)pm->pad.dim;
	int64_t c = n->shape[ax], real = pm->pad.size - vp_offset(e, n, c);
	real = real < 0 ? 0 : real > c ? c : real;
	int64_t outer = prod(n->shape, 0, ax), inner = prod(n->shape, ax + 1, n->rank);
	const double *x = in(e, n, 0);
	double *y = e->val[n->id], low = pm->pad.low ? -DBL_MAX : 0;
	(void)d;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t j = 0; j < c; j++)
			for (int64_t k = 0; k < inner; k++) {
				int64_t i = (o * c + j) * inner + k;
				y[i] = j < real ? x[i] : low;
			}
	return true;
}

bool ir_eval_grad(IrEval *e, const IrNode *n, Diag *d)
{
	switch (n->op) {
	case IR_OP_EXPAND:
		return ev_expand(e, n, d, false);
	case IR_OP_SUM_TO:
		return ev_expand(e, n, d, true);
	case IR_OP_RELU_BWD:
	case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD:
		return ev_act(e, n, d);
	case IR_OP_MAX_BWD:
		return ev_max_bwd(e, n, d);
	case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD:
		return ev_softmax_bwd(e, n, d);
	case IR_OP_LAYERNORM_BWD:
	case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD:
	case IR_OP_RMSNORM_BWD_GAMMA:
		return ev_norm_bwd(e, n, d);
	case IR_OP_EMBED_BWD:
		return ev_embed_bwd(e, n, d);
	case IR_OP_PAD:
		return ev_pad(e, n, d);
	case IR_OP_ATTENTION_BWD:
		return ev_attention_bwd(e, n, d);
	case IR_OP_CROSS_ENTROPY_BWD:
		return ev_ce_bwd(e, n, d);
	case IR_OP_EMBED_VP:
		return ev_embed_vp(e, n, d);
	case IR_OP_EMBED_BWD_VP:
		return ev_embed_bwd_vp(e, n, d);
	case IR_OP_CE_TARGET:
	case IR_OP_CE_SUMEXP:
		return ev_ce_rows(e, n, d);
	case IR_OP_CE_BWD_VP:
		return ev_ce_bwd_vp(e, n, d);
	case IR_OP_PAD_MASK:
		return ev_pad_mask(e, n, d);
	default:
		break;
	}
	return ir_eval_bad(d, n, "not a gradient op");
}
