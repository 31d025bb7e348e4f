/* dtmk_bwd.h - CPU kernels of the gradient ops (ops.def's "gradient ops";
 * see dtmk.h for the calling convention and interp/eval_grad.c for the f64
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
#include "codegen/cpu/dtmk_fwd.h" /* dtmk_attention: an attention_bwd without its y */

/* ---- f32 views of operands and results ---- */

typedef struct DtmkbBuf {
	float *p;
	int owned;
} DtmkbBuf;

/* Operand t as contiguous f32 (i32 ids are not passed through here). */
/* Conversions of whole operands, on the pool (the element order does not
 * matter: each element is converted on its own). */
struct dtmkb_cvt_job {
	const DtmkTensor *t;
	float *f;
};

static void dtmkb_widen_range(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_cvt_job *j = arg;
	DtmkTensor v = dtmk_view(j->t, lo, hi - lo);
	dtmk_widen(&v, j->f + lo);
}

static void dtmkb_narrow_range(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_cvt_job *j = arg;
	DtmkTensor v = dtmk_view(j->t, lo, hi - lo);
	dtmk_narrow(&v, j->f + lo);
}

#define DTMKB_CVT_GRAIN (1 << 15)

static inline DtmkbBuf dtmkb_in(const DtmCtx *ctx, const DtmkTensor *t)
{
	DtmkbBuf b = {(float *)t->p, 0};
	if (t->dtype == DTM_F32)
		return b;
	b.p = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
	b.owned = 1;
	if (b.p) {
		struct dtmkb_cvt_job j = {t, b.p};
		dtmk_par(ctx, t->numel, DTMKB_CVT_GRAIN, dtmkb_widen_range, &j);
	}
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
static inline void dtmkb_done(const DtmCtx *ctx, const DtmkTensor *t, DtmkbBuf b)
{
	if (b.owned && b.p) {
		struct dtmkb_cvt_job j = {t, b.p};
		dtmk_par(ctx, t->numel, DTMKB_CVT_GRAIN, dtmkb_narrow_range, &j);
	}
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
	DtmkbBuf x = dtmkb_in(ctx, &a->in[0]), y = dtmkb_out(&a->out);
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
	dtmkb_done(ctx, &a->out, y);
}

/* The common sum_to, a bias gradient: out's no elements are x's trailing
 * ones, summed over the leading rows.  Split over the pool by chunks of
 * DTMKB_SUM_W columns, each summed over all rows in row order (f64), so the
 * result is the serial one whatever the threads; a bf16 / f16 x is widened
 * a row's chunk at a time, never whole. */
#define DTMKB_SUM_W 256

struct dtmkb_sum_job {
	const DtmkTensor *x, *out;
	int64_t rows, no;
};

static void dtmkb_sum_cols(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_sum_job *j = arg;
	double acc[DTMKB_SUM_W];
	float seg[DTMKB_SUM_W];
	for (int64_t c = lo; c < hi; c++) {
		int64_t c0 = c * DTMKB_SUM_W, w = j->no - c0 < DTMKB_SUM_W ? j->no - c0 : DTMKB_SUM_W;
		memset(acc, 0, sizeof acc);
		for (int64_t r = 0; r < j->rows; r++) {
			const float *xr = seg;
			if (j->x->dtype == DTM_F32) {
				xr = (const float *)j->x->p + r * j->no + c0;
			} else {
				DtmkTensor v = dtmk_view(j->x, r * j->no + c0, w);
				dtmk_widen(&v, seg);
			}
			for (int64_t k = 0; k < w; k++)
				acc[k] += xr[k];
		}
		for (int64_t k = 0; k < w; k++)
			dtmk_store(j->out, c0 + k, (float)acc[k]);
	}
}

/* sum_to(x): out = x summed over the dims out is broadcast along (f64). */
static void dtmk_sum_to(const DtmCtx *ctx, const DtmkArgs *a)
{
	int64_t st[DTM_MAX_RANK];
	int64_t no = a->out.numel;
	int lead = a->in[0].rank >= a->out.rank;
	for (int d = 0; lead && d < a->in[0].rank; d++) {
		int k = d - (a->in[0].rank - a->out.rank);
		int64_t n = k >= 0 ? a->out.shape[k] : 1;
		if (k >= 0 && n != a->in[0].shape[d])
			lead = 0;
	}
	if (lead && no > 0) {
		struct dtmkb_sum_job j = {&a->in[0], &a->out, a->in[0].numel / no, no};
		int64_t chunks = (no + DTMKB_SUM_W - 1) / DTMKB_SUM_W;
		int64_t per = j.rows * DTMKB_SUM_W; /* elements a chunk reads */
		dtmk_par(ctx, chunks, per >= (1 << 15) ? 1 : ((1 << 15) + per - 1) / per,
			 dtmkb_sum_cols, &j);
		return;
	}
	DtmkbBuf x = dtmkb_in(ctx, &a->in[0]);
	double stackacc[256];
	double *acc = no <= 256 ? stackacc : malloc(sizeof(double) * (size_t)(no ? no : 1));
	if (!x.p || !acc)
		goto out;
	memset(acc, 0, sizeof(double) * (size_t)no);
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
	if (acc != stackacc)
		free(acc);
}

/* ---- activations: (dy, x) -> dx ---- */

static inline __attribute__((always_inline)) float dtmkb_gelu_grad(float x)
{
	const float c = 0.7978845608028654f, k = 0.044715f;
	float t = dtmk_tanh_gelu(c * (x + k * x * x * x));
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
}

static inline __attribute__((always_inline)) float dtmkb_silu_grad(float x)
{
	float s = dtmk_sigmoid_f(x);
	return s * (1.0f + x * (1.0f - s));
}

struct dtmkb_act_job {
	const DtmkTensor *dy, *x, *y;
};

/* Elementwise gradients split over the pool above this many elements;
 * bf16 / f16 operands are widened and the result narrowed a chunk at a
 * time, on the thread that computes it. */
#define DTMKB_ACT_GRAIN 16384
#define DTMKB_ACT_CHUNK 512

#define DTMKB_ACT(name, expr)                                                                   \
	static inline void dtmkb_##name##_f32(const float *restrict dy, const float *restrict x, \
					      float *restrict y, int64_t n)                     \
	{                                                                                       \
		for (int64_t i = 0; i < n; i++) {                                               \
			float v = x[i], g = dy[i];                                              \
			y[i] = (expr);                                                          \
		}                                                                               \
	}                                                                                       \
	static void dtmkb_##name##_range(void *arg, int64_t lo, int64_t hi)                     \
	{                                                                                       \
		const struct dtmkb_act_job *j = arg;                                            \
		if (j->dy->dtype == DTM_F32 && j->x->dtype == DTM_F32 &&                        \
		    j->y->dtype == DTM_F32) {                                                   \
			dtmkb_##name##_f32((const float *)j->dy->p + lo,                       \
					   (const float *)j->x->p + lo, (float *)j->y->p + lo,  \
					   hi - lo);                                            \
			return;                                                                 \
		}                                                                               \
		if (j->dy->dtype == DTM_BF16 && j->x->dtype == DTM_BF16 &&                      \
		    j->y->dtype == DTM_BF16) { /* one loop, conversions in registers */         \
			const uint16_t *restrict dy16 = j->dy->p, *restrict x16 = j->x->p;      \
			uint16_t *restrict y16 = j->y->p;                                       \
			for (int64_t i = lo; i < hi; i++) {                                     \
				float g = dtmk_bf16_to_f32(dy16[i]), v = dtmk_bf16_to_f32(x16[i]); \
				y16[i] = dtmk_f32_to_bf16(expr);                                \
			}                                                                       \
			return;                                                                 \
		}                                                                               \
		float b[3][DTMKB_ACT_CHUNK];                                                    \
		for (int64_t s = lo; s < hi; s += DTMKB_ACT_CHUNK) {                            \
			int64_t n = hi - s < DTMKB_ACT_CHUNK ? hi - s : DTMKB_ACT_CHUNK;        \
			DtmkTensor dv = dtmk_view(j->dy, s, n), xv = dtmk_view(j->x, s, n);     \
			DtmkTensor yv = dtmk_view(j->y, s, n);                                  \
			dtmk_widen(&dv, b[0]);                                                  \
			dtmk_widen(&xv, b[1]);                                                  \
			dtmkb_##name##_f32(b[0], b[1], b[2], n);                                \
			dtmk_narrow(&yv, b[2]);                                                 \
		}                                                                               \
	}                                                                                       \
	static void dtmk_##name(const DtmCtx *ctx, const DtmkArgs *a)                           \
	{                                                                                       \
		struct dtmkb_act_job j = {&a->in[0], &a->in[1], &a->out};                       \
		if (a->in[0].p && a->in[1].p && a->out.p)                                       \
			dtmk_par(ctx, a->out.numel, DTMKB_ACT_GRAIN, dtmkb_##name##_range, &j); \
	}

/* expr: the gradient from v = x[i] and g = dy[i] */
DTMKB_ACT(relu_bwd, v > 0 ? g : 0.0f)
DTMKB_ACT(gelu_bwd, g * dtmkb_gelu_grad(v))
DTMKB_ACT(silu_bwd, g * dtmkb_silu_grad(v))
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
	DtmkbBuf dy = dtmkb_in(ctx, &a->in[0]), x = dtmkb_in(ctx, X), y = dtmkb_in(ctx, &a->in[2]);
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
	dtmkb_done(ctx, &a->out, dx);
}

/* ---- softmax_bwd / log_softmax_bwd (dy, y){axis} ---- */

/* Viewed as [outer, len, inner]; the sums run over len with the inner
 * dim contiguous (inner = 1 for the usual last axis). */
static void dtmkb_softmax_bwd(const DtmCtx *ctx, const DtmkArgs *a, int lg)
{
	const DtmkTensor *Y = &a->in[1];
	int ax = (int)a->ints[0];
	int64_t outer = dtmk_span(Y, 0, ax), len = Y->shape[ax], inner = dtmk_span(Y, ax + 1, Y->rank);
	DtmkbBuf dy = dtmkb_in(ctx, &a->in[0]), y = dtmkb_in(ctx, Y), dx = dtmkb_out(&a->out);
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
				dx.p[r + c] = lg ? dy.p[r + c] - dtmk_expf(y.p[r + c]) * (float)s[c]
				                 : y.p[r + c] * (dy.p[r + c] - (float)s[c]);
		}
	}
out:
	free(s);
	dtmkb_free(dy);
	dtmkb_free(y);
	dtmkb_done(ctx, &a->out, dx);
}

static void dtmk_softmax_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_softmax_bwd(ctx, a, 0);
}

static void dtmk_log_softmax_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmkb_softmax_bwd(ctx, a, 1);
}

/* ---- layernorm / rmsnorm backward (dy, x[, gamma]){eps} ---- */

struct dtmkb_norm_job {
	const DtmkTensor *dy, *x, *out; /* out: [rows, D] dx, or gamma's [D] */
	const float *g;                 /* gamma as f32, for dx */
	double *part;                   /* gamma: [nchunks, D] partial sums */
	int64_t D, rows;
	float eps;
	int ln;
};

/* Rows per gamma chunk: partial sums per fixed chunk of rows, added in
 * chunk order, so the result does not depend on the thread count. */
#define DTMKB_NORM_CHUNK 64

/* Row statistics of row px: xh = (x - mean) * rstd; returns rstd. */
static inline float dtmkb_norm_xhat(const struct dtmkb_norm_job *w, const float *restrict px,
				   float *restrict xh)
{
	int64_t D = w->D;
	double mu = 0, var = 0;
	if (w->ln) {
		for (int64_t j = 0; j < D; j++)
			mu += px[j];
		mu /= (double)D;
	}
	for (int64_t j = 0; j < D; j++)
		var += (px[j] - mu) * (px[j] - mu);
	float rstd = (float)(1.0 / sqrt(var / (double)D + w->eps)), fmu = (float)mu;
	for (int64_t j = 0; j < D; j++)
		xh[j] = (px[j] - fmu) * rstd;
	return rstd;
}

/* Four rows of D floats: xh, then staging for dy, x and the result. */
static inline float *dtmkb_norm_scratch(int64_t D, float *stack, int64_t nstack)
{
	return 4 * D <= nstack ? stack : malloc(sizeof(float) * (size_t)(4 * D));
}

/* dx rows [lo, hi): out = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * g = dy * gamma. */
static void dtmkb_norm_dx_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_norm_job *w = arg;
	int64_t D = w->D;
	float stack[4096];
	float *xh = dtmkb_norm_scratch(D, stack, 4096);
	if (!xh)
		return;
	float *bdy = xh + D, *bx = bdy + D, *bo = bx + D;
	int f32 = w->out->dtype == DTM_F32;
	for (int64_t r = lo; r < hi; r++) {
		const float *restrict pdy = dtmk_chunk_in(w->dy, r * D, D, bdy), *restrict g = w->g;
		float rstd = dtmkb_norm_xhat(w, dtmk_chunk_in(w->x, r * D, D, bx), xh);
		double mg = 0, mgx = 0;
		for (int64_t j = 0; j < D; j++) {
			float gj = pdy[j] * g[j];
			mg += gj;
			mgx += gj * xh[j];
		}
		float fmg = w->ln ? (float)(mg / (double)D) : 0.0f, fmgx = (float)(mgx / (double)D);
		float *restrict po = f32 ? (float *)w->out->p + r * D : bo;
		for (int64_t j = 0; j < D; j++)
			po[j] = rstd * (pdy[j] * g[j] - fmg - xh[j] * fmgx);
		if (!f32) {
			DtmkTensor v = dtmk_view(w->out, r * D, D);
			dtmk_narrow(&v, bo);
		}
	}
	if (xh != stack)
		free(xh);
}

/* gamma: chunk c sums dy * xhat over its rows into part[c * D, +D). */
static void dtmkb_norm_gamma_chunks(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_norm_job *w = arg;
	int64_t D = w->D;
	float stack[4096];
	float *xh = dtmkb_norm_scratch(D, stack, 4096);
	if (!xh)
		return;
	float *bdy = xh + D, *bx = bdy + D;
	for (int64_t c = lo; c < hi; c++) {
		double *restrict acc = w->part + c * D;
		for (int64_t j = 0; j < D; j++)
			acc[j] = 0;
		int64_t end = (c + 1) * DTMKB_NORM_CHUNK < w->rows ? (c + 1) * DTMKB_NORM_CHUNK : w->rows;
		for (int64_t r = c * DTMKB_NORM_CHUNK; r < end; r++) {
			const float *restrict pdy = dtmk_chunk_in(w->dy, r * D, D, bdy);
			dtmkb_norm_xhat(w, dtmk_chunk_in(w->x, r * D, D, bx), xh);
			for (int64_t j = 0; j < D; j++)
				acc[j] += pdy[j] * xh[j];
		}
	}
	if (xh != stack)
		free(xh);
}

/* Per row of the last dim: xhat = (x - mean) * rstd (mean = 0 for
 * rmsnorm).  gamma mode sums dy * xhat over rows into out[D]; otherwise
 * out is dx.  Rows split over the pool (gamma in fixed chunks). */
static void dtmkb_norm_bwd(const DtmCtx *ctx, const DtmkArgs *a, int ln, int gamma)
{
	const DtmkTensor *X = &a->in[1];
	int64_t D = X->rank ? X->shape[X->rank - 1] : 1, rows = D ? X->numel / D : 0;
	DtmkbBuf g = gamma ? (DtmkbBuf){NULL, 0} : dtmkb_in(ctx, &a->in[2]);
	int64_t nch = (rows + DTMKB_NORM_CHUNK - 1) / DTMKB_NORM_CHUNK;
	double *part = gamma ? malloc(sizeof(double) * (size_t)((nch ? nch : 1) * (D ? D : 1))) : NULL;
	if ((gamma ? !part : !g.p) || D <= 0)
		goto out;
	struct dtmkb_norm_job w = {&a->in[0], X, &a->out, g.p, part, D, rows, (float)a->f[0], ln};
	if (!gamma) {
		dtmk_par(ctx, rows, 4096 / D + 1, dtmkb_norm_dx_rows, &w);
		goto out;
	}
	dtmk_par(ctx, nch, 1, dtmkb_norm_gamma_chunks, &w);
	for (int64_t j = 0; j < D; j++) {
		double t = 0;
		for (int64_t c = 0; c < nch; c++)
			t += part[c * D + j];
		dtmk_store(&a->out, j, (float)t);
	}
out:
	free(part);
	dtmkb_free(g);
}

static void dtmk_layernorm_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmkb_norm_bwd(ctx, a, 1, 0);
}

static void dtmk_layernorm_bwd_gamma(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmkb_norm_bwd(ctx, a, 1, 1);
}

static void dtmk_rmsnorm_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmkb_norm_bwd(ctx, a, 0, 0);
}

static void dtmk_rmsnorm_bwd_gamma(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmkb_norm_bwd(ctx, a, 0, 1);
}

/* ---- embed_bwd(dy, ids) -> [V, D]: scatter-add of rows ---- */

static void dtmk_embed_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	/* ids outside [0, V): the forward embed already reported them */
	dtmk_scatter_rows(ctx, &a->in[0], &a->in[1], &a->out, 0);
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
	if (X->dtype == DTM_I32) { /* token ids: copied as they are */
		int32_t *yi = a->out.p;
		const int32_t *xi = X->p;
		memset(yi, 0, sizeof *yi * (size_t)a->out.numel);
		for (int64_t o = 0; o < outer; o++)
			memcpy(yi + (o * len + lo) * inner, xi + o * blk, sizeof *yi * (size_t)blk);
		return;
	}
	DtmkbBuf x = dtmkb_in(ctx, X), y = dtmkb_out(&a->out);
	if (x.p && y.p) {
		memset(y.p, 0, sizeof(float) * (size_t)a->out.numel);
		for (int64_t o = 0; o < outer; o++)
			memcpy(y.p + (o * len + lo) * inner, x.p + o * blk, sizeof(float) * (size_t)blk);
	}
	dtmkb_free(x);
	dtmkb_done(ctx, &a->out, y);
}

/* ---- attention_bwd(dy, q, k, v[, seg]) -> [3, B, T, D]: attributes as
 * attention's; dk, dv per query head (ir/ops.def) ---- */

typedef struct DtmkbAttn {
	const DtmkArgs *a;
	const float *dy, *q, *k, *v;
	const uint16_t *bdy, *bq, *bk, *bv; /* the bf16 inputs (dtmkb_attn_block_lse_bf16) */
	float *dq, *dk, *dv;
	uint16_t *bout; /* a bf16 result [3, B, T, D] the bf16 kernel writes (dq, dk, dv NULL) */
	int64_t T, D, H, hd, Dk, h0, group;
	float scale;
	const DtmkTensor *seg; /* the segment ids, or NULL */
	/* attn.lse: the forward's output (f32) and its rows' log-sum-exps
	 * ([B, H, T]); else NULL (dtmkb_attn_block_lse) */
	const float *y, *lse;
	const uint16_t *by; /* the bf16 kernel's y */
	/* the block kernels': the keys' segment ids
	 * (seg those of the queries; attention: the same), y's row stride
	 * (D), and where row i of head h of batch b keeps its log-sum-exp:
	 * lse[b ls_b + h ls_h + i ls_i] (attention [B, H, T]); ring
	 * attention's blocks (dtmk_ring.h): the rows' places (else NULL), y
	 * and the log-sum-exps both in its ol [B, T, D + H] */
	const DtmkTensor *kseg;
	int64_t ly, ls_b, ls_h, ls_i;
	const DtmkAttnPos *pos;
} DtmkbAttn;

/* n values of dq (which 0), dk (1) or dv (2) from element o: f32, or
 * rounded into the bf16 result; src NULL: zeros. */
static inline void dtmkb_attn_put(const DtmkbAttn *w, int which, int64_t o, const float *src,
				  int64_t n)
{
	if (w->bout) {
		uint16_t *restrict d = w->bout + which * w->a->out.numel / 3 + o;
		if (!src)
			memset(d, 0, 2 * (size_t)n);
		else
			for (int64_t c = 0; c < n; c++)
				d[c] = dtmk_f32_to_bf16(src[c]);
		return;
	}
	float *d = (which == 0 ? w->dq : which == 1 ? w->dk : w->dv) + o;
	if (src)
		memcpy(d, src, sizeof(float) * (size_t)n);
	else
		memset(d, 0, sizeof(float) * (size_t)n);
}

/* An item's k ([T, hd]) and k, v transposed ([hd, Tp] in rows
 * dtmk_attn_ld(Tp) apart, zero past T) of
 * batch b, kv head g; dk and dv's scratch (2 T hd after dkb) cleared. */
static inline __attribute__((always_inline)) void
dtmkb_attn_stage(const DtmkbAttn *w, int64_t b, int64_t g, float *restrict kb, float *restrict kt,
		 float *restrict vt, float *restrict dkb, int64_t hd)
{
	int64_t T = w->T, Tp = DTMK_PAD16(T), Tl = dtmk_attn_ld(Tp);
	for (int64_t t = 0; t < T; t++) {
		int64_t ko = (b * T + t) * w->Dk + g * hd;
		memcpy(kb + t * hd, w->k + ko, sizeof(float) * (size_t)hd);
	}
	dtmk_transpose32(kt, Tl, w->k + b * T * w->Dk + g * hd, w->Dk, T, hd);
	dtmk_transpose32(vt, Tl, w->v + b * T * w->Dk + g * hd, w->Dk, T, hd);
	for (int64_t c = 0; c < hd; c++)
		for (int64_t t = T; t < Tp; t++)
			kt[c * Tl + t] = vt[c * Tl + t] = 0;
	memset(dkb, 0, sizeof(float) * (size_t)(2 * T * hd));
}

/* An item's dk and dv (per query head h) from the scratch. */
static inline __attribute__((always_inline)) void
dtmkb_attn_store(const DtmkbAttn *w, int64_t b, int64_t h, const float *dkb, const float *dvb,
		 int64_t hd)
{
	for (int64_t t = 0; t < w->T; t++) {
		int64_t o = (b * w->T + t) * w->D + h * hd;
		dtmkb_attn_put(w, 1, o, dkb + t * hd, hd);
		dtmkb_attn_put(w, 2, o, dvb + t * hd, hd);
	}
}

/* Items are (batch, head) pairs; each writes all T rows of its head's
 * columns of dq, dk and dv (so the output needs no clearing).  The item's
 * q, k, dy are gathered contiguous ([T, hd]) and k, v also transposed
 * ([hd, T]), with dk and dv accumulated in scratch, so every inner loop is
 * contiguous and vectorises: over keys for the scores and dy.v, over the
 * head dim for the dq, dk, dv updates. */
static inline __attribute__((always_inline)) void
dtmkb_attn_item(const DtmkbAttn *w, int64_t bh, float *buf, int64_t hd)
{
	int64_t T = w->T, D = w->D;
	int64_t Tp = DTMK_PAD16(T), Tl = dtmk_attn_ld(Tp);
	float *restrict qb = buf, *restrict kb = qb + T * hd, *restrict dyb = kb + T * hd;
	float *restrict kt = dyb + T * hd, *restrict vt = kt + Tl * hd;
	float *restrict dkb = vt + Tl * hd, *restrict dvb = dkb + T * hd;
	float *restrict p = dvb + T * hd, *restrict dp = p + Tp, *restrict ds = dp + Tp;
	int64_t b = bh / w->H, h = bh % w->H, g = (w->h0 + h) / w->group;
	const DtmkTensor *seg = w->seg;
	for (int64_t t = 0; t < T; t++) {
		int64_t o = (b * T + t) * D + h * hd;
		memcpy(qb + t * hd, w->q + o, sizeof(float) * (size_t)hd);
		memcpy(dyb + t * hd, w->dy + o, sizeof(float) * (size_t)hd);
	}
	dtmkb_attn_stage(w, b, g, kb, kt, vt, dkb, hd);
	for (int64_t i = 0; i < T; i++) {
		int64_t lo, nk;
		dtmk_attn_range(w->a, i, T, &lo, &nk);
		const float *q = qb + i * hd, *dy = dyb + i * hd;
		float *dq = w->dq + (b * T + i) * D + h * hd;
		int32_t si = seg ? dtmk_load_i32(seg, b * T + i) : 0;
		if (nk <= lo || si < 0) { /* attends nothing: no gradient */
			memset(dq, 0, sizeof(float) * (size_t)hd);
			continue;
		}
		int64_t np = DTMK_PAD16(nk);
		if (np <= 64 && np <= Tp) {
			dtmk_rows_dot_tiles(p, q, kt, Tl, hd, (int)(np / 16));
			dtmk_rows_dot_tiles(dp, dy, vt, Tl, hd, (int)(np / 16));
		} else {
			for (int64_t j = 0; j < nk; j++) {
				p[j] = 0;
				dp[j] = 0;
			}
			dtmk_axpy_rows(p, q, kt, Tl, hd, nk);
			dtmk_axpy_rows(dp, dy, vt, Tl, hd, nk);
		}
		for (int64_t j = 0; j < nk; j++)
			p[j] *= w->scale;
		for (int64_t j = 0; j < lo; j++)
			p[j] = -INFINITY;
		for (int64_t j = lo; seg && j < nk; j++)
			if (dtmk_load_i32(seg, b * T + j) != si)
				p[j] = -INFINITY;
		float mx = dtmk_maxf(p, nk);
		if (mx == -INFINITY) {
			memset(dq, 0, sizeof(float) * (size_t)hd);
			continue;
		}
		float sum = 0;
		for (int64_t j = 0; j < nk; j++) {
			p[j] = dtmk_expf(p[j] - mx);
			sum += p[j];
		}
		float inv = 1.0f / sum, pdp = 0;
		for (int64_t j = 0; j < nk; j++) {
			p[j] *= inv;
			pdp += p[j] * dp[j];
		}
		for (int64_t j = 0; j < nk; j++)
			ds[j] = p[j] * (dp[j] - pdp) * w->scale;
		if (hd % 16 == 0) {
			dtmk_rows_sum16(dq, ds, kb, hd, nk, hd);
		} else {
			for (int64_t c = 0; c < hd; c++)
				dq[c] = 0;
			dtmk_axpy_rows(dq, ds, kb, hd, nk, hd);
		}
		for (int64_t j = 0; j < nk; j++) {
			float *dk = dkb + j * hd, *dv = dvb + j * hd, pj = p[j], dsj = ds[j];
			if (hd % 16 == 0) { /* gcc leaves the plain loop scalar here */
				for (int64_t c = 0; c < hd; c += 16) {
					DTMK_V16(dv + c) += pj * DTMK_V16(dy + c);
					DTMK_V16(dk + c) += dsj * DTMK_V16(q + c);
				}
				continue;
			}
			for (int64_t c = 0; c < hd; c++) {
				dv[c] += pj * dy[c];
				dk[c] += dsj * q[c];
			}
		}
	}
	dtmkb_attn_store(w, b, h, dkb, dvb, hd);
}

/* The backward's blocks: 8 query rows (dtmk_rows8_scores). */
#define DTMKB_AR DTMK_AR

/* A block's rows of dq (from dq4; zero for rows that attend nothing). */
static inline __attribute__((always_inline)) void
dtmkb_attn_store_dq(const DtmkbAttn *w, int64_t b, int64_t h, int64_t i0, const bool *live,
		    int64_t kmax, const float *dq4, int64_t hd)
{
	for (int r = 0; r < DTMKB_AR && i0 + r < w->T; r++)
		dtmkb_attn_put(w, 0, (b * w->T + i0 + r) * w->D + h * hd,
			       live[r] && kmax > 0 ? dq4 + r * hd : NULL, hd);
}

/* One register tile of a block's dk or dv: Y[(t + i) * ly + c + (0, 16
 * nv)] += sum over the 8 rows r of A[r * la + t + i] * X[r * lx + c + (0,
 * 16 nv)], for the R keys i; R (1 or 4) and nv (1, 2 or 4) constants
 * where called.  The R x nv outputs stay in registers through the 8 rows:
 * each X vector loaded once per R keys and each A value once per nv
 * vectors (a key at a time with its 8 FMAs in one chain, the update was
 * load-bound: ~10% of the backward). */
static inline __attribute__((always_inline)) void
dtmkb_outer_tile(float *Y, int64_t ly, const float *A, int64_t la, const float *X, int64_t lx,
		 int64_t t, int64_t c, int R, int nv)
{
	DtmkV16 y[4][4];
	_Pragma("GCC unroll 4")
	for (int i = 0; i < R; i++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			y[i][v] = DTMK_V16(Y + (t + i) * ly + c + 16 * v);
	_Pragma("GCC unroll 8")
	for (int r = 0; r < DTMKB_AR; r++) {
		DtmkV16 x[4];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			x[v] = DTMK_IN_REG(DTMK_V16(X + r * lx + c + 16 * v));
		_Pragma("GCC unroll 4")
		for (int i = 0; i < R; i++) {
			float ar = A[r * la + t + i];
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				y[i][v] += ar * x[v];
		}
	}
	_Pragma("GCC unroll 4")
	for (int i = 0; i < R; i++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			DTMK_V16(Y + (t + i) * ly + c + 16 * v) = y[i][v];
}

/* The keys [t0, t1) of dtmkb_outer_tile's columns c .. c + 16 nv. */
static inline __attribute__((always_inline)) void
dtmkb_outer_cols(float *Y, int64_t ly, const float *A, int64_t la, const float *X, int64_t lx,
		 int64_t t0, int64_t t1, int64_t c, int nv)
{
	int64_t t = t0;
	for (; t + 4 <= t1; t += 4)
		dtmkb_outer_tile(Y, ly, A, la, X, lx, t, c, 4, nv);
	for (; t < t1; t++)
		dtmkb_outer_tile(Y, ly, A, la, X, lx, t, c, 1, nv);
}

/* Y[t * ly + (0, n)] += sum over r = 0..7 of A[r * la + t] * X[r * lx +
 * (0, n)] for t in [t0, t1), n a multiple of 16: a block's dk and dv, in
 * register tiles of 4 keys x 64 columns (then 32, 16). */
static inline __attribute__((always_inline)) void
dtmkb_rows8_outer(float *Y, int64_t ly, const float *A, int64_t la, const float *X, int64_t lx,
		  int64_t t0, int64_t t1, int64_t n)
{
	int64_t c = 0;
	for (; c + 64 <= n; c += 64)
		dtmkb_outer_cols(Y, ly, A, la, X, lx, t0, t1, c, 4);
	for (; c + 32 <= n; c += 32)
		dtmkb_outer_cols(Y, ly, A, la, X, lx, t0, t1, c, 2);
	for (; c < n; c += 16)
		dtmkb_outer_cols(Y, ly, A, la, X, lx, t0, t1, c, 1);
}

/* One row of a key tile given its log-sum-exp lse and dd = rowsum(dy *
 * y): p[0, w) holds the row's scaled scores against keys [t0, t0 + w),
 * ds their dy.v; p becomes the probabilities exp(s - lse), ds the score
 * gradients p (dP - dd) before the scale, both 0 for masked keys (outside
 * [lo, nk), other segments) and for a dead row. */
static inline __attribute__((always_inline)) void
dtmkb_attn_lse_row(float *restrict p, float *restrict ds, int64_t t0, int64_t w, bool live,
		   int64_t lo, int64_t nk, const DtmkTensor *seg, int64_t segrow, int32_t si,
		   float lse, float dd)
{
	int64_t a = lo - t0 < 0 ? 0 : lo - t0 < w ? lo - t0 : w;
	int64_t e = nk - t0 < a ? a : nk - t0 < w ? nk - t0 : w;
	if (!live)
		a = e = w;
	for (int64_t t = 0; t < a; t++)
		p[t] = ds[t] = 0;
	for (int64_t t = a; t < e; t++) {
		p[t] = dtmk_expf(p[t] - lse);
		ds[t] = p[t] * (ds[t] - dd);
	}
	for (int64_t t = e; t < w; t++)
		p[t] = ds[t] = 0;
	for (int64_t t = a; seg && t < e; t++)
		if (dtmk_load_i32(seg, segrow + t0 + t) != si)
			p[t] = ds[t] = 0;
}

/* attention's backward in blocks of 8 query rows, given the forward's
 * output y and its rows' log-sum-exps (attn.lse; without them
 * dtmk_attention_bwd runs the forward again): FlashAttention-2's
 * backward.  A row's probabilities are exp(s - lse) without a pass over
 * its keys first, and rowsum(P * dP) is rowsum(dy * y), so the keys run in tiles of
 * DTMK_ATTN_KT as in the forward: per tile, the block's scores and dy.v
 * (dtmk_rows8_scores), P and dS, and the tile's share of dq
 * (dtmk_rows8_pv, added up), dk and dv (dtmkb_rows8_outer).  The block's
 * scratch is two tiles of scores (32 KB), whatever T; q is scaled as the
 * forward scales it, so the scores are the forward's. */
static inline __attribute__((always_inline)) void
dtmkb_attn_block_lse(const DtmkbAttn *w, int64_t bh, float *buf, int64_t hd)
{
	int64_t T = w->T, D = w->D, Tp = DTMK_PAD16(T);
	int64_t Tl = dtmk_attn_ld(Tp), St = dtmk_attn_st(Tp);
	float *restrict kb = buf, *restrict kt = kb + T * hd, *restrict vt = kt + Tl * hd;
	float *restrict dkb = vt + Tl * hd, *restrict dvb = dkb + T * hd;
	float *restrict P = dvb + T * hd, *restrict dS = P + DTMKB_AR * St;
	float *restrict q4 = dS + DTMKB_AR * St, *restrict dy4 = q4 + DTMKB_AR * hd;
	float *restrict dq4 = dy4 + DTMKB_AR * hd, *restrict dqt = dq4 + DTMKB_AR * hd;
	int64_t b = bh / w->H, h = bh % w->H, g = (w->h0 + h) / w->group;
	const DtmkTensor *seg = w->seg;
	dtmkb_attn_stage(w, b, g, kb, kt, vt, dkb, hd);
	for (int64_t i0 = 0; i0 < T; i0 += DTMKB_AR) {
		int64_t lo[DTMKB_AR], nk[DTMKB_AR], kmin, kmax;
		int32_t si[DTMKB_AR];
		bool live[DTMKB_AR];
		float lse[DTMKB_AR], dd[DTMKB_AR];
		dtmk_attn_block_rows(w->a, w->pos, seg, b, i0, T, T, lo, nk, si, live, &kmin, &kmax);
		for (int r = 0; r < DTMKB_AR; r++) {
			int64_t o = (b * T + i0 + r) * D + h * hd, yo = (b * T + i0 + r) * w->ly + h * hd;
			float *restrict q = q4 + r * hd, *restrict dy = dy4 + r * hd;
			lse[r] = live[r] ? w->lse[b * w->ls_b + h * w->ls_h + (i0 + r) * w->ls_i]
					 : -INFINITY;
			live[r] = live[r] && lse[r] != -INFINITY;
			float s = 0;
			if (!live[r]) {
				memset(q, 0, sizeof(float) * (size_t)hd);
				memset(dy, 0, sizeof(float) * (size_t)hd);
			}
			/* a branch per row, not per element: gcc made the loop
			 * masked gathers (8% of the backward) */
			for (int64_t c = 0; live[r] && c < hd; c++) {
				q[c] = w->q[o + c] * w->scale;
				dy[c] = w->dy[o + c];
				s += dy[c] * w->y[yo + c];
			}
			dd[r] = s;
		}
		memset(dq4, 0, sizeof(float) * (size_t)(DTMKB_AR * hd));
		int64_t te = DTMK_PAD16(kmax);
		for (int64_t t0 = kmin & ~(int64_t)15; kmax > 0 && t0 < te; t0 += St) {
			int64_t wd = te - t0 < St ? te - t0 : St;
			dtmk_rows8_scores(P, St, q4, hd, kt + t0, Tl, hd, wd);
			dtmk_rows8_scores(dS, St, dy4, hd, vt + t0, Tl, hd, wd);
			for (int r = 0; r < DTMKB_AR; r++)
				dtmkb_attn_lse_row(P + r * St, dS + r * St, t0, wd, live[r], lo[r], nk[r],
						   w->kseg, b * T, si[r], lse[r], dd[r]);
			/* the tile's keys some row sees: [a0, a1) of it */
			int64_t a0 = (kmin > t0 ? kmin : t0) - t0;
			int64_t a1 = (kmax < t0 + wd ? kmax : t0 + wd) - t0;
			dtmk_rows8_pv(dqt, hd, dS, St, kb + t0 * hd, hd, a0, a1, hd);
			for (int64_t e = 0; e < DTMKB_AR * hd; e++)
				dq4[e] += dqt[e];
			dtmkb_rows8_outer(dkb + t0 * hd, hd, dS, St, q4, hd, a0, a1, hd);
			dtmkb_rows8_outer(dvb + t0 * hd, hd, P, St, dy4, hd, a0, a1, hd);
		}
		for (int64_t e = 0; e < DTMKB_AR * hd; e++)
			dq4[e] *= w->scale;
		dtmkb_attn_store_dq(w, b, h, i0, live, kmax, dq4, hd);
	}
	dtmkb_attn_store(w, b, h, dkb, dvb, hd);
}

#ifdef DTMK_ATTN_BF16
/* dtmkb_outer_tile on bf16 operands, the 8 rows in pairs: At[t * 4 + p]
 * the word of A[2p][t] and A[2p + 1][t], Xp[p * n + c] that of X[2p][c]
 * and X[2p + 1][c]. */
static inline __attribute__((always_inline)) void
dtmkb_outer_tile_bf16(float *Y, int64_t ly, const uint32_t *At, const uint32_t *Xp, int64_t n,
		      int64_t t, int64_t c, int R, int nv)
{
	__m512 y[4][4];
	_Pragma("GCC unroll 4")
	for (int i = 0; i < R; i++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			y[i][v] = _mm512_loadu_ps(Y + (t + i) * ly + c + 16 * v);
	_Pragma("GCC unroll 4")
	for (int p = 0; p < DTMKB_AR / 2; p++) {
		__m512bh x[4];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			x[v] = (__m512bh)_mm512_loadu_si512(Xp + p * n + c + 16 * v);
		_Pragma("GCC unroll 4")
		for (int i = 0; i < R; i++) {
			__m512bh a = (__m512bh)_mm512_set1_epi32((int)At[(t + i) * 4 + p]);
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				y[i][v] = _mm512_dpbf16_ps(y[i][v], a, x[v]);
		}
	}
	_Pragma("GCC unroll 4")
	for (int i = 0; i < R; i++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			_mm512_storeu_ps(Y + (t + i) * ly + c + 16 * v, y[i][v]);
}

static inline __attribute__((always_inline)) void
dtmkb_outer_cols_bf16(float *Y, int64_t ly, const uint32_t *At, const uint32_t *Xp, int64_t n,
		      int64_t t0, int64_t t1, int64_t c, int nv)
{
	int64_t t = t0;
	for (; t + 4 <= t1; t += 4)
		dtmkb_outer_tile_bf16(Y, ly, At, Xp, n, t, c, 4, nv);
	for (; t < t1; t++)
		dtmkb_outer_tile_bf16(Y, ly, At, Xp, n, t, c, 1, nv);
}

/* Y[t * ly + (0, n)] += sum over r of A[r][t] * X[r][(0, n)] for t in
 * [t0, t1), n a multiple of 16: dtmkb_rows8_outer on bf16 operands, in
 * the same register tiles. */
static inline __attribute__((always_inline)) void
dtmkb_rows8_outer_bf16(float *Y, int64_t ly, const uint32_t *At, const uint32_t *Xp, int64_t t0,
		       int64_t t1, int64_t n)
{
	int64_t c = 0;
	for (; c + 64 <= n; c += 64)
		dtmkb_outer_cols_bf16(Y, ly, At, Xp, n, t0, t1, c, 4);
	for (; c + 32 <= n; c += 32)
		dtmkb_outer_cols_bf16(Y, ly, At, Xp, n, t0, t1, c, 2);
	for (; c < n; c += 16)
		dtmkb_outer_cols_bf16(Y, ly, At, Xp, n, t0, t1, c, 1);
}

/* The words of rows 2p and 2p + 1 of the 8 bf16 rows R (lr apart) over
 * [t0, t1), by t (At[t * 4 + p]) or, with byrow, by column of the pair
 * (At[p * (t1 - t0) + t - t0], t0 = 0 there). */
static inline void dtmkb_pair_rows(uint32_t *At, const uint16_t *R, int64_t lr, int64_t t0,
				   int64_t t1, bool byrow)
{
	for (int p = 0; p < DTMKB_AR / 2; p++) {
		const uint16_t *r0 = R + 2 * p * lr, *r1 = r0 + lr;
		for (int64_t t = t0; t < t1; t++)
			At[byrow ? p * (t1 - t0) + t - t0 : t * 4 + p] =
				dtmk_bf16_word(r0[t], r1[t]);
	}
}

/* Bytes of dtmkb_attn_block_lse_bf16's scratch (Tp: the staged rows'
 * stride; its score tiles of St keys). */
static inline size_t dtmkb_attn_bf16_bytes(int64_t T, int64_t Tp, int64_t hd)
{
	int64_t St = dtmk_attn_st(DTMK_PAD16(T));
	return sizeof(uint32_t) * (size_t)(3 * hd / 2 * Tp + 2 * 4 * St + 2 * 4 * hd) +
	       sizeof(float) * (size_t)(2 * T * hd + 2 * DTMKB_AR * St + 2 * DTMKB_AR * hd) +
	       sizeof(uint16_t) * (size_t)(2 * DTMKB_AR * St + 2 * DTMKB_AR * hd);
}

/* The bf16 kernels' staging of batch b, kv head g: k and v as words of
 * two head-dim values, transposed ([hd/2, Tp], rows dtmk_attn_ld(Tp)
 * apart, zero past T), k as words of two keys per column ([Tp/2, hd]);
 * dk and dv's scratch (2 T hd floats from dkb) cleared. */
static inline __attribute__((always_inline)) void
dtmkb_attn_stage_bf16(const DtmkbAttn *w, int64_t b, int64_t g, uint32_t *restrict kt,
		      uint32_t *restrict vt, uint32_t *restrict kp, float *restrict dkb, int64_t hd)
{
	int64_t T = w->T, Tp = DTMK_PAD16(T), Tl = dtmk_attn_ld(Tp);
	dtmk_transpose32(kt, Tl, w->bk + b * T * w->Dk + g * hd, w->Dk / 2, T, hd / 2);
	dtmk_transpose32(vt, Tl, w->bv + b * T * w->Dk + g * hd, w->Dk / 2, T, hd / 2);
	for (int64_t c = 0; c < hd / 2; c++)
		for (int64_t t = T; t < Tp; t++)
			kt[c * Tl + t] = vt[c * Tl + t] = 0;
	for (int64_t t = 0; t < Tp; t++) {
		int64_t ko = (b * T + t) * w->Dk + g * hd;
		for (int64_t c = 0; c < hd; c++) /* little-endian: the even key low */
			((uint16_t *)(kp + t / 2 * hd + c))[t & 1] = t < T ? w->bk[ko + c] : 0;
	}
	memset(dkb, 0, sizeof(float) * (size_t)(2 * T * hd));
}

/* A block's bf16 q and dy rows (from row i0 of batch b, head h) into q4
 * and dy4 (hd apart), zeros for a dead row. */
static inline __attribute__((always_inline)) void
dtmkb_attn_rows_bf16(const DtmkbAttn *w, int64_t b, int64_t h, int64_t i0, const bool *live,
		     uint16_t *restrict q4, uint16_t *restrict dy4, int64_t hd)
{
	for (int r = 0; r < DTMKB_AR; r++) {
		int64_t o = (b * w->T + i0 + r) * w->D + h * hd;
		if (live[r]) {
			memcpy(q4 + r * hd, w->bq + o, 2 * (size_t)hd);
			memcpy(dy4 + r * hd, w->bdy + o, 2 * (size_t)hd);
		} else {
			memset(q4 + r * hd, 0, 2 * (size_t)hd);
			memset(dy4 + r * hd, 0, 2 * (size_t)hd);
		}
	}
}

/* dtmkb_attn_block_lse on bf16 dy, q, k, v, y (hd a multiple of 16):
 * the scores and dy.v from the inputs' bf16 values, P and dS rounded to
 * bf16 for dq, dk and dv (dtmk.h, "attention's products on bf16
 * operands"), k and v as words of two head-dim elements per key
 * ([hd/2, Tp]) for the scores and dy.v, k as words of two keys per
 * column ([Tp/2, hd]) for dq; the keys in tiles of DTMK_ATTN_KT, the
 * probabilities from the forward's log-sum-exps and rowsum(dy * y) from
 * its bf16 output. */
static inline __attribute__((always_inline)) void
dtmkb_attn_block_lse_bf16(const DtmkbAttn *w, int64_t bh, void *buf, int64_t hd)
{
	int64_t T = w->T, D = w->D, Tp = DTMK_PAD16(T);
	int64_t Tl = dtmk_attn_ld(Tp), St = dtmk_attn_st(Tp);
	uint32_t *restrict kt = buf, *restrict vt = kt + hd / 2 * Tl;
	uint32_t *restrict kp = vt + hd / 2 * Tl;
	uint32_t *restrict Pt = kp + Tl / 2 * hd, *restrict dSt = Pt + 4 * St;
	uint32_t *restrict qx = dSt + 4 * St, *restrict dyx = qx + 4 * hd;
	float *restrict dkb = (float *)(dyx + 4 * hd), *restrict dvb = dkb + T * hd;
	float *restrict P = dvb + T * hd, *restrict dS = P + DTMKB_AR * St;
	float *restrict dq4 = dS + DTMKB_AR * St, *restrict dqt = dq4 + DTMKB_AR * hd;
	uint16_t *restrict Pb = (uint16_t *)(dqt + DTMKB_AR * hd);
	uint16_t *restrict dSb = Pb + DTMKB_AR * St;
	uint16_t *restrict q4 = dSb + DTMKB_AR * St, *restrict dy4 = q4 + DTMKB_AR * hd;
	int64_t b = bh / w->H, h = bh % w->H, g = (w->h0 + h) / w->group;
	const DtmkTensor *seg = w->seg;
	dtmkb_attn_stage_bf16(w, b, g, kt, vt, kp, dkb, hd);
	for (int64_t i0 = 0; i0 < T; i0 += DTMKB_AR) {
		int64_t lo[DTMKB_AR], nk[DTMKB_AR], kmin, kmax;
		int32_t si[DTMKB_AR];
		bool live[DTMKB_AR];
		float lse[DTMKB_AR], dd[DTMKB_AR];
		dtmk_attn_block_rows(w->a, w->pos, seg, b, i0, T, T, lo, nk, si, live, &kmin, &kmax);
		for (int r = 0; r < DTMKB_AR; r++) {
			int64_t o = (b * T + i0 + r) * D + h * hd, yo = (b * T + i0 + r) * w->ly + h * hd;
			lse[r] = live[r] ? w->lse[b * w->ls_b + h * w->ls_h + (i0 + r) * w->ls_i]
					 : -INFINITY;
			live[r] = live[r] && lse[r] != -INFINITY;
			float s = 0;
			for (int64_t c = 0; live[r] && c < hd; c++)
				s += dtmk_bf16_to_f32(w->bdy[o + c]) * dtmk_bf16_to_f32(w->by[yo + c]);
			dd[r] = s;
		}
		dtmkb_attn_rows_bf16(w, b, h, i0, live, q4, dy4, hd);
		dtmkb_pair_rows(qx, q4, hd, 0, hd, true);
		dtmkb_pair_rows(dyx, dy4, hd, 0, hd, true);
		memset(dq4, 0, sizeof(float) * (size_t)(DTMKB_AR * hd));
		int64_t te = DTMK_PAD16(kmax);
		for (int64_t t0 = kmin & ~(int64_t)15; kmax > 0 && t0 < te; t0 += St) {
			int64_t wd = te - t0 < St ? te - t0 : St;
			dtmk_rows8_scores_bf16(P, St, q4, hd, kt + t0, Tl, hd, wd, w->scale);
			dtmk_rows8_scores_bf16(dS, St, dy4, hd, vt + t0, Tl, hd, wd, 1.0f);
			for (int r = 0; r < DTMKB_AR; r++) {
				float *p = P + r * St, *ds = dS + r * St;
				dtmkb_attn_lse_row(p, ds, t0, wd, live[r], lo[r], nk[r], w->kseg, b * T,
						   si[r], lse[r], dd[r]);
				for (int64_t t = 0; t < wd; t++)
					ds[t] *= w->scale;
				dtmk_bf16_row(Pb + r * St, p, wd);
				dtmk_bf16_row(dSb + r * St, ds, wd);
			}
			int64_t a0 = (kmin > t0 ? kmin : t0) - t0;
			int64_t a1 = (kmax < t0 + wd ? kmax : t0 + wd) - t0;
			/* dq: keys in pairs (the pair's other key has dS 0), t0 even */
			dtmk_rows8_pv_bf16(dqt, hd, dSb, St, kp + t0 / 2 * hd, hd, a0 & ~(int64_t)1,
					   (a1 + 1) & ~(int64_t)1, hd);
			for (int64_t e = 0; e < DTMKB_AR * hd; e++)
				dq4[e] += dqt[e];
			/* dk, dv: query rows in pairs */
			dtmkb_pair_rows(dSt, dSb, St, a0, a1, false);
			dtmkb_pair_rows(Pt, Pb, St, a0, a1, false);
			dtmkb_rows8_outer_bf16(dkb + t0 * hd, hd, dSt, qx, a0, a1, hd);
			dtmkb_rows8_outer_bf16(dvb + t0 * hd, hd, Pt, dyx, a0, a1, hd);
		}
		dtmkb_attn_store_dq(w, b, h, i0, live, kmax, dq4, hd);
	}
	dtmkb_attn_store(w, b, h, dkb, dvb, hd);
}
#endif

/* Items [lo, hi) with their scratch; the usual head sizes get copies of
 * the item compiled for that constant. */
static void dtmkb_attn_range(void *arg, int64_t lo, int64_t hi)
{
	const DtmkbAttn *w = arg;
	int64_t T = w->T, hd = w->hd;
	int64_t Tl = dtmk_attn_ld(DTMK_PAD16(T)); /* >= Tp: the staged rows' stride */
	size_t need = (size_t)(5 * T * hd + 2 * Tl * hd + 3 * DTMKB_AR * (Tl + hd));
	if (w->lse) /* dtmkb_attn_block_lse's */
		need = (size_t)(3 * T * hd + 2 * Tl * hd +
				2 * DTMKB_AR * (dtmk_attn_st(DTMK_PAD16(T)) + 2 * hd));
#ifdef DTMK_ATTN_BF16
	if (w->bq)
		need = (dtmkb_attn_bf16_bytes(T, Tl, hd) + sizeof(float) - 1) / sizeof(float);
#endif
	float stackbuf[DTMK_ATTN_STACK];
	float *buf = need <= DTMK_ATTN_STACK ? stackbuf : malloc(sizeof(float) * need);
	if (!buf)
		return;
	for (int64_t bh = lo; bh < hi; bh++) {
#ifdef DTMK_ATTN_BF16
		if (w->bq && hd == 64) {
			dtmkb_attn_block_lse_bf16(w, bh, buf, 64);
			continue;
		}
		if (w->bq) {
			dtmkb_attn_block_lse_bf16(w, bh, buf, hd);
			continue;
		}
#endif
		if (w->lse && hd == 64)
			dtmkb_attn_block_lse(w, bh, buf, 64);
		else if (w->lse)
			dtmkb_attn_block_lse(w, bh, buf, hd);
		else
			dtmkb_attn_item(w, bh, buf, hd);
	}
	if (buf != stackbuf)
		free(buf);
}

/* attention(q, k, v[, seg]) of attention_bwd a's operands, its output
 * (q's type) and the rows' log-sum-exps after it, into *fy (malloc'd);
 * fy, or NULL when out of memory. */
static inline const DtmkTensor *dtmkb_attn_forward(const DtmCtx *ctx, const DtmkArgs *a,
						    const DtmkTensor *seg, DtmkTensor *fy)
{
	const DtmkTensor *Q = &a->in[1];
	int64_t H = a->ints[0], B = Q->shape[0], T = Q->shape[1];
	DtmkArgs f = {.nin = seg ? 4 : 3, .nints = 8, .mesh_axes = a->mesh_axes};
	memcpy(f.ints, a->ints, sizeof f.ints);
	f.ints[7] = 1; /* attn.lse */
	f.in[0] = *Q;
	f.in[1] = a->in[2];
	f.in[2] = a->in[3];
	if (seg)
		f.in[3] = *seg;
	*fy = *Q;
	fy->p = malloc((size_t)Q->numel * dtmk_esize(Q->dtype) + sizeof(float) * (size_t)(B * H * T));
	if (!fy->p)
		return NULL;
	f.out = *fy;
	dtmk_attention(ctx, &f);
	return fy;
}

static void dtmk_attention_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *Q = &a->in[1];
	int64_t B = Q->shape[0], T = Q->shape[1], D = Q->shape[2], H = a->ints[0];
	/* bf16 operands the bf16 products take are read as they are */
	bool bf = H > 0 && a->in[0].dtype == DTM_BF16 &&
		  dtmk_attn_bf16(Q, &a->in[2], &a->in[3], D / H, D / H);
	/* the bf16 kernel rounds its rows into a bf16 result as they are done */
	bool bout = bf && a->out.dtype == DTM_BF16;
	DtmkbBuf none = {NULL, 0}, out = bout ? none : dtmkb_out(&a->out);
	DtmkbBuf dy = bf ? none : dtmkb_in(ctx, &a->in[0]), q = bf ? none : dtmkb_in(ctx, Q);
	DtmkbBuf k = bf ? none : dtmkb_in(ctx, &a->in[2]), v = bf ? none : dtmkb_in(ctx, &a->in[3]);
	/* attn.lse: the forward attention y last (ir_attn_bwd_y), read by the
	 * block kernels (dtmkb_attn_block_lse, _bf16) */
	bool has_y = a->nints > 7 && a->ints[7] && a->nin > 4;
	const DtmkTensor *Y = has_y ? &a->in[a->nin - 1] : NULL;
	const DtmkTensor *seg = a->nin - (has_y ? 1 : 0) > 4 ? &a->in[4] : NULL;
	bool blocks = H > 0 && (D / H) % 16 == 0; /* else the row kernel, no y */
	/* an attention_bwd without its forward's y (IR written by hand): the
	 * forward again, with its log-sum-exps, into fy for the same kernels */
	DtmkTensor fy = {0};
	if (blocks && (!Y || (bf && Y->dtype != DTM_BF16)))
		Y = dtmkb_attn_forward(ctx, a, seg, &fy);
	bool use_y = blocks && Y;
	DtmkbBuf y = use_y && !bf ? dtmkb_in(ctx, Y) : none;
	if ((bf || (dy.p && q.p && k.p && v.p)) && (out.p || bout) && H > 0 &&
	    (!blocks || use_y) && (!use_y || bf || y.p)) {
		int64_t S = B * T * D;
		DtmkbAttn w = {.a = a, .dy = dy.p, .q = q.p, .k = k.p, .v = v.p, .dq = out.p,
			       .dk = out.p ? out.p + S : NULL, .dv = out.p ? out.p + 2 * S : NULL,
			       .bout = bout ? a->out.p : NULL, .T = T, .D = D, .H = H,
			       .hd = D / H, .Dk = a->in[2].shape[2], .h0 = 0, .group = 1,
			       .scale = (float)(1.0 / sqrt((double)(D / H))),
			       .ly = D, .ls_b = H * T, .ls_h = T, .ls_i = 1};
		w.seg = w.kseg = seg;
		if (use_y) {
			w.y = y.p;
			w.by = bf ? Y->p : NULL;
			w.lse = (const float *)((const char *)Y->p +
						Y->numel * (int64_t)dtmk_esize(Y->dtype));
		}
		if (bf) {
			w.bdy = a->in[0].p;
			w.bq = Q->p;
			w.bk = a->in[2].p;
			w.bv = a->in[3].p;
		}
		dtmk_attn_heads(ctx, a, &w.h0, &w.group);
		if (ctx && ctx->parallel_for)
			ctx->parallel_for(ctx, B * H, 1, dtmkb_attn_range, &w);
		else
			dtmkb_attn_range(&w, 0, B * H);
	}
	dtmkb_free(dy);
	dtmkb_free(q);
	dtmkb_free(k);
	dtmkb_free(v);
	dtmkb_free(y);
	free(fy.p);
	dtmkb_done(ctx, &a->out, out);
}

/* ---- cross_entropy_bwd(dl, logits, targets) ---- */

struct dtmkb_ce_job {
	const DtmkArgs *a;
	const float *x; /* f32 logits, or NULL: a->in[1] row by row */
	float *dx;      /* f32 result, or NULL: into a->out row by row */
	int64_t V;
	float dl;
};

/* (softmax(row) - onehot(target)) * dl / positions, per row.  16-bit
 * logits or results go through a row of f32 scratch each (a GPT-2 sized
 * vocabulary's bf16 logits widened whole were 1.6 GB allocated, filled and
 * narrowed every step: 4.5 s of an 18 s step). */
static void dtmkb_ce_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmkb_ce_job *w = arg;
	int64_t V = w->V;
	float dl = w->dl;
	float *scratch = NULL;
	if (!w->x || !w->dx) {
		scratch = malloc(sizeof(float) * (size_t)(2 * V));
		if (!scratch)
			return; /* the output keeps its NaN poison or zeros */
	}
	for (int64_t i = lo; i < hi; i++) {
		const float *restrict row = w->x ? w->x + i * V : scratch;
		float *restrict drow = w->dx ? w->dx + i * V : scratch + V;
		if (!w->x) {
			DtmkTensor v = dtmk_view(&w->a->in[1], i * V, V);
			dtmk_widen(&v, scratch);
		}
		float mx = dtmk_maxf(row, V);
		double sum = 0;
		for (int64_t j = 0; j < V; j++) {
			drow[j] = dtmk_expf(row[j] - mx);
			sum += drow[j];
		}
		float sc = (float)(dl / sum);
		for (int64_t j = 0; j < V; j++)
			drow[j] *= sc;
		int64_t t = dtmk_load_i32(&w->a->in[2], i);
		if (t >= 0 && t < V)
			drow[t] -= dl;
		if (!w->dx) {
			DtmkTensor v = dtmk_view(&w->a->out, i * V, V);
			dtmk_narrow(&v, drow);
		}
	}
	free(scratch);
}

static void dtmk_cross_entropy_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *L = &a->in[1];
	int64_t V = L->shape[L->rank - 1], N = a->in[2].numel;
	float dl = dtmk_load(&a->in[0], 0) / (float)(N ? N : 1);
	if (V > 0) {
		struct dtmkb_ce_job w = {a, L->dtype == DTM_F32 ? L->p : NULL,
		                         a->out.dtype == DTM_F32 ? a->out.p : NULL, V, dl};
		dtmk_par(ctx, N, 8192 / V + 1, dtmkb_ce_rows, &w);
	}
}

#endif
