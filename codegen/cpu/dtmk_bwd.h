/* dtmk_bwd.h - CPU kernels of the gradient ops (ops.def's "gradient ops";
 * see dtmk.h for the calling convention and ir/eval_grad.c for the f64
 * reference each one is tested against).
 *
 * Every kernel works on contiguous f32 arrays: an operand that is already
 * f32 is read in place, any other dtype is converted once into a
 * temporary (dtmkb_in), and a non-f32 result is written through one
 * (dtmkb_out).  Row statistics and sums over many rows accumulate in f64,
 * so a bias gradient summed over B*T rows does not drift.  attention_bwd,
 * the hot one, splits (batch, head) pairs over the runtime's thread pool:
 * each pair writes disjoint columns of dq, dk and dv.
 */
#ifndef DTMK_BWD_H
#define DTMK_BWD_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"

/* ---- f32 views of operands and results ---- */

typedef struct DtmkbBuf {
	float *p;
	int owned;
} DtmkbBuf;

/* Operand t as contiguous f32 (i32 ids are not passed through here). */
static inline DtmkbBuf dtmkb_in(const DtmkTensor *t)
{
	DtmkbBuf b = {(float *)t->p, 0};
	if (t->dtype == DTM_F32)
		return b;
	b.p = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
	b.owned = 1;
	if (b.p)
		for (int64_t i = 0; i < t->numel; i++)
			b.p[i] = dtmk_load(t, i);
	return b;
}

static inline DtmkbBuf dtmkb_out(const DtmkTensor *t)
{
	DtmkbBuf b = {(float *)t->p, 0};
	if (t->dtype == DTM_F32)
		return b;
	b.p = calloc((size_t)(t->numel ? t->numel : 1), sizeof(float));
	b.owned = 1;
	return b;
}

/* Stores a dtmkb_out buffer into t (when it was a temporary) and frees. */
static inline void dtmkb_done(const DtmkTensor *t, DtmkbBuf b)
{
	if (b.owned && b.p)
		for (int64_t i = 0; i < t->numel; i++)
			dtmk_store(t, i, b.p[i]);
	if (b.owned)
		free(b.p);
}

static inline void dtmkb_free(DtmkbBuf b)
{
	if (b.owned)
		free(b.p);
}

/* Strides of `small` (numpy-aligned to the right) over `big`'s dims: 0
 * along the dims small is broadcast over. */
static inline void dtmkb_strides(const DtmkTensor *small, const DtmkTensor *big, int64_t *st)
{
	int64_t s = 1;
	for (int d = big->rank - 1; d >= 0; d--) {
		int j = d - (big->rank - small->rank);
		int64_t n = j >= 0 ? small->shape[j] : 1;
		st[d] = n == 1 ? 0 : s;
		s *= n;
	}
}

/* Walks big row-major: calls body(row offset in big, offset in small,
 * inner length, inner stride in small) once per innermost row. */
#define DTMKB_WALK(big, st, body)                                                               \
	do {                                                                                    \
		int r_ = (big)->rank;                                                           \
		int64_t idx_[DTM_MAX_RANK] = {0}, so_ = 0;                                      \
		int64_t in_ = r_ ? (big)->shape[r_ - 1] : 1, si_ = r_ ? (st)[r_ - 1] : 0;       \
		for (int64_t bo_ = 0; in_ > 0 && bo_ < (big)->numel; bo_ += in_) {              \
			body(bo_, so_, in_, si_);                                               \
			for (int d_ = r_ - 2; d_ >= 0; d_--) {                                  \
				so_ += (st)[d_];                                                \
				if (++idx_[d_] < (big)->shape[d_])                              \
					break;                                                  \
				so_ -= (st)[d_] * (big)->shape[d_];                             \
				idx_[d_] = 0;                                                   \
			}                                                                       \
		}                                                                               \
	} while (0)

/* ---- expand / sum_to ---- */

/* expand(x): out[i] = x[broadcast index of i]. */
static void dtmk_expand(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t st[DTM_MAX_RANK];
	DtmkbBuf x = dtmkb_in(&a->in[0]), y = dtmkb_out(&a->out);
	if (!x.p || !y.p)
		goto out;
	dtmkb_strides(&a->in[0], &a->out, st);
#define EXPAND_ROW(bo, so, n, s)                                                                \
	for (int64_t j = 0; j < (n); j++)                                                       \
		y.p[(bo) + j] = x.p[(so) + j * (s)];
	DTMKB_WALK(&a->out, st, EXPAND_ROW);
#undef EXPAND_ROW
out:
	dtmkb_free(x);
	dtmkb_done(&a->out, y);
}

/* sum_to(x): out = x summed over the dims out is broadcast along (f64). */
static void dtmk_sum_to(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t st[DTM_MAX_RANK];
	DtmkbBuf x = dtmkb_in(&a->in[0]);
	double *acc = calloc((size_t)(a->out.numel ? a->out.numel : 1), sizeof(double));
	if (!x.p || !acc)
		goto out;
	dtmkb_strides(&a->out, &a->in[0], st);
#define SUM_ROW(bo, so, n, s)                                                                   \
	if ((s) == 0) {                                                                         \
		double t_ = 0;                                                                  \
		for (int64_t j = 0; j < (n); j++)                                               \
			t_ += x.p[(bo) + j];                                                    \
		acc[so] += t_;                                                                  \
	} else {                                                                                \
		for (int64_t j = 0; j < (n); j++)                                               \
			acc[(so) + j * (s)] += x.p[(bo) + j];                                   \
	}
	DTMKB_WALK(&a->in[0], st, SUM_ROW);
#undef SUM_ROW
	for (int64_t i = 0; i < a->out.numel; i++)
		dtmk_store(&a->out, i, (float)acc[i]);
out:
	dtmkb_free(x);
	free(acc);
}

/* ---- activations: (dy, x) -> dx ---- */

static inline float dtmkb_gelu_grad(float x)
{
	const float c = 0.7978845608028654f, k = 0.044715f;
	float t = dtmk_tanh_gelu(c * (x + k * x * x * x));
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
}

static inline float dtmkb_silu_grad(float x)
{
	float s = x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
	return s * (1.0f + x * (1.0f - s));
}

#define DTMKB_ACT(name, expr)                                                                   \
	static void dtmk_##name(const DtmCtx *ctx, const DtmkArgs *a)                           \
	{                                                                                       \
		(void)ctx;                                                                      \
		DtmkbBuf dy = dtmkb_in(&a->in[0]), x = dtmkb_in(&a->in[1]);                     \
		DtmkbBuf y = dtmkb_out(&a->out);                                                \
		if (dy.p && x.p && y.p)                                                         \
			for (int64_t i = 0; i < a->out.numel; i++) {                            \
				float v = x.p[i];                                               \
				y.p[i] = (expr);                                                \
			}                                                                       \
		dtmkb_free(dy);                                                                 \
		dtmkb_free(x);                                                                  \
		dtmkb_done(&a->out, y);                                                         \
	}

DTMKB_ACT(relu_bwd, v > 0 ? dy.p[i] : 0.0f)
DTMKB_ACT(gelu_bwd, dy.p[i] * dtmkb_gelu_grad(v))
DTMKB_ACT(silu_bwd, dy.p[i] * dtmkb_silu_grad(v))
#undef DTMKB_ACT

/* ---- max_bwd(dy, x, y){axes}: ties share dy evenly ---- */

static void dtmk_max_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *X = &a->in[1];
	int64_t st[DTM_MAX_RANK], s = 1, ny = a->in[2].numel;
	int red[DTM_MAX_RANK] = {0};
	for (int k = 0; k < a->nints; k++)
		if (a->ints[k] >= 0 && a->ints[k] < X->rank)
			red[a->ints[k]] = 1;
	for (int d = X->rank - 1; d >= 0; d--) {
		st[d] = red[d] ? 0 : s;
		s *= red[d] ? 1 : X->shape[d];
	}
	DtmkbBuf dy = dtmkb_in(&a->in[0]), x = dtmkb_in(X), y = dtmkb_in(&a->in[2]);
	DtmkbBuf dx = dtmkb_out(&a->out);
	float *cnt = calloc((size_t)(ny ? ny : 1), sizeof(float));
	if (!dy.p || !x.p || !y.p || !dx.p || !cnt)
		goto out;
#define COUNT_ROW(bo, so, n, s_)                                                                \
	for (int64_t j = 0; j < (n); j++)                                                       \
		cnt[(so) + j * (s_)] += x.p[(bo) + j] == y.p[(so) + j * (s_)];
	DTMKB_WALK(X, st, COUNT_ROW);
#undef COUNT_ROW
#define GRAD_ROW(bo, so, n, s_)                                                                 \
	for (int64_t j = 0; j < (n); j++) {                                                     \
		int64_t g_ = (so) + j * (s_);                                                   \
		dx.p[(bo) + j] = x.p[(bo) + j] == y.p[g_] ? dy.p[g_] / cnt[g_] : 0.0f;          \
	}
	DTMKB_WALK(X, st, GRAD_ROW);
#undef GRAD_ROW
out:
	free(cnt);
	dtmkb_free(dy);
	dtmkb_free(x);
	dtmkb_free(y);
	dtmkb_done(&a->out, dx);
}

/* ---- softmax_bwd / log_softmax_bwd (dy, y){axis} ---- */

/* Viewed as [outer, len, inner]; the sums run over len with the inner
 * dim contiguous (inner = 1 for the usual last axis). */
static void dtmkb_softmax_bwd(const DtmkArgs *a, int lg)
{
	const DtmkTensor *Y = &a->in[1];
	int ax = (int)a->ints[0];
	int64_t outer = dtmk_span(Y, 0, ax), len = Y->shape[ax], inner = dtmk_span(Y, ax + 1, Y->rank);
	DtmkbBuf dy = dtmkb_in(&a->in[0]), y = dtmkb_in(Y), dx = dtmkb_out(&a->out);
	double *s = malloc(sizeof(double) * (size_t)(inner ? inner : 1));
	if (!dy.p || !y.p || !dx.p || !s)
		goto out;
	for (int64_t o = 0; o < outer; o++) {
		int64_t base = o * len * inner;
		for (int64_t c = 0; c < inner; c++)
			s[c] = 0;
		for (int64_t l = 0; l < len; l++) {
			const float *pdy = dy.p + base + l * inner, *py = y.p + base + l * inner;
			for (int64_t c = 0; c < inner; c++)
				s[c] += lg ? pdy[c] : (double)pdy[c] * py[c];
		}
		for (int64_t l = 0; l < len; l++) {
			int64_t r = base + l * inner;
			for (int64_t c = 0; c < inner; c++)
				dx.p[r + c] = lg ? dy.p[r + c] - expf(y.p[r + c]) * (float)s[c]
				                 : y.p[r + c] * (dy.p[r + c] - (float)s[c]);
		}
	}
out:
	free(s);
	dtmkb_free(dy);
	dtmkb_free(y);
	dtmkb_done(&a->out, dx);
}

static void dtmk_softmax_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_softmax_bwd(a, 0);
}

static void dtmk_log_softmax_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_softmax_bwd(a, 1);
}

/* ---- layernorm / rmsnorm backward (dy, x[, gamma]){eps} ---- */

/* Per row of the last dim: xhat = (x - mean) * rstd (mean = 0 for
 * rmsnorm).  gamma mode sums dy * xhat over rows into out[D]; otherwise
 * out = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
static void dtmkb_norm_bwd(const DtmkArgs *a, int ln, int gamma)
{
	const DtmkTensor *X = &a->in[1];
	int64_t D = X->rank ? X->shape[X->rank - 1] : 1, rows = D ? X->numel / D : 0;
	float eps = (float)a->f[0];
	DtmkbBuf dy = dtmkb_in(&a->in[0]), x = dtmkb_in(X), out = dtmkb_out(&a->out);
	DtmkbBuf g = gamma ? (DtmkbBuf){NULL, 0} : dtmkb_in(&a->in[2]);
	double *acc = gamma ? calloc((size_t)(D ? D : 1), sizeof(double)) : NULL;
	float *xh = malloc(sizeof(float) * (size_t)(D ? D : 1));
	if (!dy.p || !x.p || !out.p || !xh || (gamma ? !acc : !g.p))
		goto out;
	for (int64_t r = 0; r < rows; r++) {
		const float *px = x.p + r * D, *pdy = dy.p + r * D;
		double mu = 0, var = 0;
		if (ln) {
			for (int64_t j = 0; j < D; j++)
				mu += px[j];
			mu /= (double)D;
		}
		for (int64_t j = 0; j < D; j++)
			var += (px[j] - mu) * (px[j] - mu);
		float rstd = (float)(1.0 / sqrt(var / (double)D + eps)), fmu = (float)mu;
		for (int64_t j = 0; j < D; j++)
			xh[j] = (px[j] - fmu) * rstd;
		if (gamma) {
			for (int64_t j = 0; j < D; j++)
				acc[j] += pdy[j] * xh[j];
			continue;
		}
		double mg = 0, mgx = 0;
		for (int64_t j = 0; j < D; j++) {
			float gj = pdy[j] * g.p[j];
			mg += gj;
			mgx += gj * xh[j];
		}
		float fmg = ln ? (float)(mg / (double)D) : 0.0f, fmgx = (float)(mgx / (double)D);
		float *po = out.p + r * D;
		for (int64_t j = 0; j < D; j++)
			po[j] = rstd * (pdy[j] * g.p[j] - fmg - xh[j] * fmgx);
	}
	if (gamma)
		for (int64_t j = 0; j < D; j++)
			out.p[j] = (float)acc[j];
out:
	free(acc);
	free(xh);
	dtmkb_free(dy);
	dtmkb_free(x);
	dtmkb_free(g);
	dtmkb_done(&a->out, out);
}

static void dtmk_layernorm_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_norm_bwd(a, 1, 0);
}

static void dtmk_layernorm_bwd_gamma(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_norm_bwd(a, 1, 1);
}

static void dtmk_rmsnorm_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_norm_bwd(a, 0, 0);
}

static void dtmk_rmsnorm_bwd_gamma(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_norm_bwd(a, 0, 1);
}

/* ---- embed_bwd(dy, ids) -> [V, D]: scatter-add of rows ---- */

static void dtmk_embed_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t V = a->out.shape[0], D = a->out.shape[1], N = a->in[1].numel;
	DtmkbBuf dy = dtmkb_in(&a->in[0]), t = dtmkb_out(&a->out);
	if (!dy.p || !t.p)
		goto out;
	memset(t.p, 0, sizeof(float) * (size_t)(V * D));
	for (int64_t i = 0; i < N; i++) {
		int64_t id = dtmk_load_i32(&a->in[1], i);
		if (id < 0 || id >= V)
			continue; /* the forward embed already reported it */
		float *row = t.p + id * D;
		const float *src = dy.p + i * D;
		for (int64_t j = 0; j < D; j++)
			row[j] += src[j];
	}
out:
	dtmkb_free(dy);
	dtmkb_done(&a->out, t);
}

/* ---- pad(x){axis, start, end}: zeros with x at [start, end) ---- */

static void dtmk_pad(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *X = &a->in[0];
	int ax = (int)a->ints[0];
	int64_t lo = a->ints[1], len = a->out.shape[ax];
	int64_t outer = dtmk_span(&a->out, 0, ax), inner = dtmk_span(&a->out, ax + 1, a->out.rank);
	int64_t blk = X->shape[ax] * inner;
	DtmkbBuf x = dtmkb_in(X), y = dtmkb_out(&a->out);
	if (x.p && y.p) {
		memset(y.p, 0, sizeof(float) * (size_t)a->out.numel);
		for (int64_t o = 0; o < outer; o++)
			memcpy(y.p + (o * len + lo) * inner, x.p + o * blk, sizeof(float) * (size_t)blk);
	}
	dtmkb_free(x);
	dtmkb_done(&a->out, y);
}

/* ---- attention_bwd(dy, q, k, v){heads, causal} -> [3, B, T, D] ---- */

typedef struct DtmkbAttn {
	const float *dy, *q, *k, *v;
	float *dq, *dk, *dv;
	int64_t T, D, H, hd;
	int causal;
	float scale;
} DtmkbAttn;

/* Items are (batch, head) pairs; each writes only its head's columns. */
static void dtmkb_attn_range(void *arg, int64_t lo, int64_t hi)
{
	const DtmkbAttn *w = arg;
	int64_t T = w->T, D = w->D, hd = w->hd;
	float *p = malloc(sizeof(float) * (size_t)(2 * T + 1));
	if (!p)
		return;
	float *dp = p + T;
	for (int64_t bh = lo; bh < hi; bh++) {
		int64_t b = bh / w->H, h = bh % w->H;
		for (int64_t i = 0; i < T; i++) {
			int64_t qi = (b * T + i) * D + h * hd, nk = w->causal ? i + 1 : T;
			const float *q = w->q + qi, *dy = w->dy + qi;
			float mx = -INFINITY, pdp = 0;
			double sum = 0;
			for (int64_t j = 0; j < nk; j++) {
				const float *k = w->k + (b * T + j) * D + h * hd;
				float s = 0;
				for (int64_t c = 0; c < hd; c++)
					s += q[c] * k[c];
				p[j] = s * w->scale;
				mx = p[j] > mx ? p[j] : mx;
			}
			for (int64_t j = 0; j < nk; j++) {
				p[j] = expf(p[j] - mx);
				sum += p[j];
			}
			float inv = (float)(1.0 / sum);
			for (int64_t j = 0; j < nk; j++) {
				int64_t vj = (b * T + j) * D + h * hd;
				const float *v = w->v + vj;
				float *dv = w->dv + vj, pj = p[j] * inv, d = 0;
				p[j] = pj;
				for (int64_t c = 0; c < hd; c++) {
					dv[c] += pj * dy[c];
					d += dy[c] * v[c];
				}
				dp[j] = d;
				pdp += pj * d;
			}
			float *dq = w->dq + qi;
			for (int64_t j = 0; j < nk; j++) {
				int64_t kj = (b * T + j) * D + h * hd;
				const float *k = w->k + kj;
				float *dk = w->dk + kj, ds = p[j] * (dp[j] - pdp) * w->scale;
				for (int64_t c = 0; c < hd; c++) {
					dq[c] += ds * k[c];
					dk[c] += ds * q[c];
				}
			}
		}
	}
	free(p);
}

static void dtmk_attention_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *Q = &a->in[1];
	int64_t B = Q->shape[0], T = Q->shape[1], D = Q->shape[2], H = a->ints[0];
	DtmkbBuf dy = dtmkb_in(&a->in[0]), q = dtmkb_in(Q), k = dtmkb_in(&a->in[2]);
	DtmkbBuf v = dtmkb_in(&a->in[3]), out = dtmkb_out(&a->out);
	if (dy.p && q.p && k.p && v.p && out.p && H > 0) {
		int64_t S = B * T * D;
		memset(out.p, 0, sizeof(float) * (size_t)(3 * S));
		DtmkbAttn w = {dy.p, q.p, k.p, v.p, out.p, out.p + S, out.p + 2 * S,
		               T, D, H, D / H, a->ints[1] != 0, (float)(1.0 / sqrt((double)(D / H)))};
		if (ctx && ctx->parallel_for)
			ctx->parallel_for(ctx, B * H, 1, dtmkb_attn_range, &w);
		else
			dtmkb_attn_range(&w, 0, B * H);
	}
	dtmkb_free(dy);
	dtmkb_free(q);
	dtmkb_free(k);
	dtmkb_free(v);
	dtmkb_done(&a->out, out);
}

/* ---- cross_entropy_bwd(dl, logits, targets) ---- */

/* (softmax(row) - onehot(target)) * dl / positions, per row. */
static void dtmk_cross_entropy_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *L = &a->in[1];
	int64_t V = L->shape[L->rank - 1], N = a->in[2].numel;
	float dl = dtmk_load(&a->in[0], 0) / (float)(N ? N : 1);
	DtmkbBuf x = dtmkb_in(L), dx = dtmkb_out(&a->out);
	if (!x.p || !dx.p)
		goto out;
	for (int64_t i = 0; i < N; i++) {
		const float *row = x.p + i * V;
		float *drow = dx.p + i * V, mx = -INFINITY;
		double sum = 0;
		for (int64_t j = 0; j < V; j++)
			mx = row[j] > mx ? row[j] : mx;
		for (int64_t j = 0; j < V; j++) {
			drow[j] = expf(row[j] - mx);
			sum += drow[j];
		}
		float sc = (float)(dl / sum);
		for (int64_t j = 0; j < V; j++)
			drow[j] *= sc;
		int64_t t = dtmk_load_i32(&a->in[2], i);
		if (t >= 0 && t < V)
			drow[t] -= dl;
	}
out:
	dtmkb_free(x);
	dtmkb_done(&a->out, dx);
}

#endif
