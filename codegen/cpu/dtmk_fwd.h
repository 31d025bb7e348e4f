/* dtmk_fwd.h - CPU kernels of the forward ops (see dtmk.h for the calling
 * convention).
 *
 * Each kernel reads a->in[..] and writes a->out, computing in f32 (row
 * statistics and losses accumulate in f64).  Hot kernels (layernorm,
 * softmax, attention, cross_entropy, embed) have f32 fast paths with
 * contiguous inner loops and split rows over the runtime's thread pool;
 * reductions that produce one number split into fixed-size chunks summed
 * in order, so results do not depend on the thread count (a resumed or
 * re-threaded run must print the same losses).
 *
 * The elementwise kernels here are fallbacks: the emitter normally writes
 * elementwise ops as fused loops of its own, with the scalar helpers below
 * (dtmk_gelu_f etc.) as their building blocks.
 */
#ifndef DTMK_FWD_H
#define DTMK_FWD_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"
#include "support/philox.h"

/* ---- scalar helpers (also used by the emitter's fused loops) ---- */

static inline float dtmk_relu_f(float x)
{
	return x > 0 ? x : 0.0f;
}

/* GPT-2's tanh approximation. */
static inline float dtmk_gelu_f(float x)
{
	return 0.5f * x * (1.0f + dtmk_tanh_gelu(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* exp of -|x| only, so it never overflows: 1 / (1 + z) for x >= 0, else
 * z / (1 + z); a select and dtmk_expf, no branch or call, so SiLU's loops
 * vectorise (libm's expf per element was 90% of a LLaMA step's SiLU). */
static inline __attribute__((always_inline)) float dtmk_sigmoid_f(float x)
{
	float z = dtmk_expf(-fabsf(x)), d = 1.0f + z;
	return x >= 0 ? 1.0f / d : z / d;
}

static inline __attribute__((always_inline)) float dtmk_silu_f(float x)
{
	return x * dtmk_sigmoid_f(x);
}

static inline float dtmk_round_bf16_f(float x)
{
	return dtmk_bf16_to_f32(dtmk_f32_to_bf16(x));
}

static inline float dtmk_round_f16_f(float x)
{
	return dtmk_f16_to_f32(dtmk_f32_to_f16(x));
}

/* Kept elements are scaled by 1 / (1 - rate); the mask is the runtime's
 * Philox stream at index i, the element's index in the full-batch global
 * operand (ir/dropout.c: the emitter computes it for a shard or a
 * micro-batch; the fallback kernel below passes the flat index, right for
 * a whole tensor with one micro-batch). */
static inline float dtmk_dropout_f(const DtmCtx *ctx, float x, float rate, uint32_t salt,
				   int64_t i)
{
	if (rate <= 0)
		return x;
	if (rate >= 1)
		return 0.0f;
	return philox_dropout_keep(ctx->seed, salt, (uint32_t)ctx->step, (uint64_t)i, rate) ?
		       x * (1.0f / (1.0f - rate)) : 0.0f;
}

static inline int dtmk_all_f32(const DtmkArgs *a)
{
	for (int i = 0; i < a->nin; i++)
		if (a->in[i].dtype != DTM_F32)
			return 0;
	return a->out.dtype == DTM_F32;
}

/* Strides of t broadcast (numpy, right-aligned) onto a tensor of rank r
 * and shape `shape`: 0 along broadcast dims. */
static inline void dtmk_bcast_strides(const DtmkTensor *t, int r, const int64_t *shape,
				      int64_t *st)
{
	int64_t s = 1;
	for (int d = r - 1; d >= 0; d--) {
		int j = d - (r - t->rank);
		int64_t n = j >= 0 ? t->shape[j] : 1;
		st[d] = n == 1 && shape[d] != 1 ? 0 : s;
		s *= n;
	}
}

/* ---- elementwise fallbacks ---- */

#define DTMK_UNARY(name, expr)                                                           \
	static inline void dtmk_##name(const DtmCtx *ctx, const DtmkArgs *a)             \
	{                                                                                \
		(void)ctx;                                                               \
		float s = (float)a->f[0];                                                \
		(void)s;                                                                 \
		for (int64_t i = 0; i < a->out.numel; i++) {                             \
			float v = dtmk_load(&a->in[0], i);                               \
			dtmk_store(&a->out, i, (expr));                                  \
		}                                                                        \
	}
DTMK_UNARY(neg, -v)
DTMK_UNARY(exp, expf(v))
DTMK_UNARY(log, logf(v))
DTMK_UNARY(sqrt, sqrtf(v))
DTMK_UNARY(rsqrt, 1.0f / sqrtf(v))
DTMK_UNARY(tanh, tanhf(v))
DTMK_UNARY(relu, dtmk_relu_f(v))
DTMK_UNARY(gelu, dtmk_gelu_f(v))
DTMK_UNARY(silu, dtmk_silu_f(v))
DTMK_UNARY(sigmoid, dtmk_sigmoid_f(v))
DTMK_UNARY(scale, v * s)
DTMK_UNARY(cast, v)
DTMK_UNARY(dropout, dtmk_dropout_f(ctx, v, s, (uint32_t)a->ints[0], i))
#undef DTMK_UNARY

#define DTMK_BINARY(name, expr)                                                          \
	static inline void dtmk_##name(const DtmCtx *ctx, const DtmkArgs *a)             \
	{                                                                                \
		(void)ctx;                                                               \
		int r = a->out.rank;                                                     \
		int64_t sa[DTM_MAX_RANK + 1], sb[DTM_MAX_RANK + 1];                      \
		int64_t idx[DTM_MAX_RANK + 1] = { 0 }, oa = 0, ob = 0;                   \
		dtmk_bcast_strides(&a->in[0], r, a->out.shape, sa);                      \
		dtmk_bcast_strides(&a->in[1], r, a->out.shape, sb);                      \
		for (int64_t i = 0; i < a->out.numel; i++) {                             \
			float u = dtmk_load(&a->in[0], oa), v = dtmk_load(&a->in[1], ob); \
			dtmk_store(&a->out, i, (expr));                                  \
			for (int d = r - 1; d >= 0; d--) {                               \
				oa += sa[d];                                             \
				ob += sb[d];                                             \
				if (++idx[d] < a->out.shape[d])                          \
					break;                                           \
				oa -= sa[d] * a->out.shape[d];                           \
				ob -= sb[d] * a->out.shape[d];                           \
				idx[d] = 0;                                              \
			}                                                                \
		}                                                                        \
	}
DTMK_BINARY(add, u + v)
DTMK_BINARY(sub, u - v)
DTMK_BINARY(mul, u * v)
DTMK_BINARY(div, u / v)
#undef DTMK_BINARY

/* const: the scalar attrs.f[0] in every element. */
static inline void dtmk_const(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	for (int64_t i = 0; i < a->out.numel; i++)
		dtmk_store(&a->out, i, (float)a->f[0]);
}

/* ---- matmul (fallback: batch dims that one strided GEMM cannot express) ---- */

static inline void dtmk_matmul(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *A = &a->in[0], *B = &a->in[1], *C = &a->out;
	int r = C->rank, nb = r - 2;
	int64_t M = C->shape[r - 2], N = C->shape[r - 1], K = A->shape[A->rank - 1];
	int64_t sa[DTM_MAX_RANK], sb[DTM_MAX_RANK], s;
	s = M * K;
	for (int i = nb - 1, j = A->rank - 3; i >= 0; i--, j--) {
		int64_t n = j >= 0 ? A->shape[j] : 1;
		sa[i] = n == 1 ? 0 : s;
		s *= n;
	}
	s = K * N;
	for (int i = nb - 1, j = B->rank - 3; i >= 0; i--, j--) {
		int64_t n = j >= 0 ? B->shape[j] : 1;
		sb[i] = n == 1 ? 0 : s;
		s *= n;
	}
	int64_t nbatch = dtmk_span(C, 0, nb);
	for (int64_t bi = 0; bi < nbatch; bi++) {
		int64_t oa = 0, ob = 0, rem = bi;
		for (int i = nb - 1; i >= 0; i--) {
			int64_t ix = rem % C->shape[i];
			rem /= C->shape[i];
			oa += ix * sa[i];
			ob += ix * sb[i];
		}
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				float acc = 0;
				for (int64_t p = 0; p < K; p++)
					acc += dtmk_load(A, oa + i * K + p) * dtmk_load(B, ob + p * N + j);
				dtmk_store(C, bi * M * N + i * N + j, acc);
			}
	}
}

/* ---- reductions: sum, mean, max over attrs.ints (keepdims = flag) ---- */

/* Row maxima of [rows, len] (max over trailing axes): the rows over the
 * pool, each in chunks of DTMK_ROW_CHUNK widened on the stack. */
struct dtmk_rowmax_job {
	const DtmkTensor *x, *out;
	int64_t len;
};

static void dtmk_rowmax_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_rowmax_job *j = arg;
	float buf[DTMK_ROW_CHUNK];
	for (int64_t i = lo; i < hi; i++) {
		float m[2] = {-INFINITY, -INFINITY};
		for (int64_t c = 0; c < j->len; c += DTMK_ROW_CHUNK) {
			int64_t n = j->len - c < DTMK_ROW_CHUNK ? j->len - c : DTMK_ROW_CHUNK;
			m[1] = dtmk_maxf_how(dtmk_chunk_in(j->x, i * j->len + c, n, buf), n, true);
			m[0] = dtmk_maxf_how(m, 2, true);
		}
		dtmk_store(j->out, i, m[0]);
	}
}

/* Reduces a [outer, len, inner] view when the reduced axes are one
 * contiguous run; else walks the input with output strides. */
/* A reduction over contiguous dims: x as [outer, len, inner], out as
 * [outer, inner]. */
struct dtmk_reduce_job {
	const DtmkTensor *x, *y;
	int op;
	int64_t count, outer, len, inner;
};

#define DTMK_REDUCE_CHUNK 256

/* outer rows [lo, hi): each output accumulated in double over len in
 * order, DTMK_REDUCE_CHUNK of the inner dim at a time (the inner loop
 * contiguous: a GQA gradient's sum over the query heads sharing a kv
 * head, inner = the head dim, vectorises) */
static void dtmk_reduce_outer(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_reduce_job *j = arg;
	int64_t len = j->len, inner = j->inner;
	bool f32 = j->x->dtype == DTM_F32;
	double acc[DTMK_REDUCE_CHUNK];
	for (int64_t o = lo; o < hi; o++)
		for (int64_t i0 = 0; i0 < inner; i0 += DTMK_REDUCE_CHUNK) {
			int64_t n = inner - i0 < DTMK_REDUCE_CHUNK ? inner - i0 : DTMK_REDUCE_CHUNK;
			for (int64_t k = 0; k < n; k++)
				acc[k] = j->op == 2 ? -INFINITY : 0.0;
			for (int64_t l = 0; l < len; l++) {
				int64_t b = (o * len + l) * inner + i0;
				const float *xp = f32 ? (const float *)j->x->p + b : NULL;
				for (int64_t k = 0; k < n; k++) {
					double v = xp ? xp[k] : dtmk_load(j->x, b + k);
					if (j->op == 2)
						acc[k] = v > acc[k] || isnan(v) ? v : acc[k];
					else
						acc[k] += v;
				}
			}
			for (int64_t k = 0; k < n; k++)
				dtmk_store(j->y, o * inner + i0 + k,
					   (float)(j->op == 1 ? acc[k] / (double)j->count : acc[k]));
		}
}

static inline void dtmk_reduce(const DtmCtx *ctx, const DtmkArgs *a,
			       int op /* 0 sum, 1 mean, 2 max */)
{
	const DtmkTensor *X = &a->in[0];
	int r = X->rank;
	int red[DTM_MAX_RANK] = { 0 };
	for (int k = 0; k < a->nints; k++) {
		int64_t ax = a->ints[k] < 0 ? a->ints[k] + r : a->ints[k];
		if (ax >= 0 && ax < r)
			red[ax] = 1;
	}
	int first = -1, last = -1, contiguous = 1;
	for (int d = 0; d < r; d++)
		if (red[d]) {
			if (first < 0)
				first = d;
			else if (last != d - 1)
				contiguous = 0;
			last = d;
		}
	int64_t count = 1;
	for (int d = 0; d < r; d++)
		if (red[d])
			count *= X->shape[d];
	if (op == 2 && first >= 0 && contiguous && last == r - 1) {
		/* rows (the logits' max over the vocab) in parallel, in chunks */
		struct dtmk_rowmax_job j = {X, &a->out, dtmk_span(X, first, r)};
		dtmk_par(ctx, dtmk_span(X, 0, first), 1, dtmk_rowmax_rows, &j);
		return;
	}
	if (first < 0 || contiguous) {
		struct dtmk_reduce_job j = {X, &a->out, op, count,
					    first < 0 ? X->numel : dtmk_span(X, 0, first),
					    first < 0 ? 1 : dtmk_span(X, first, last + 1),
					    first < 0 ? 1 : dtmk_span(X, last + 1, r)};
		dtmk_par(ctx, j.outer, 1 + 4096 / (j.len * j.inner + 1), dtmk_reduce_outer, &j);
		return;
	}
	int64_t st[DTM_MAX_RANK], s = 1, idx[DTM_MAX_RANK] = { 0 }, off = 0;
	for (int d = r - 1; d >= 0; d--) {
		st[d] = red[d] ? 0 : s;
		s *= red[d] ? 1 : X->shape[d];
	}
	for (int64_t i = 0; i < a->out.numel; i++)
		dtmk_store(&a->out, i, op == 2 ? -INFINITY : 0.0f);
	for (int64_t i = 0; i < X->numel; i++) {
		float v = dtmk_load(X, i), y = dtmk_load(&a->out, off);
		dtmk_store(&a->out, off, op == 2 ? (v > y || isnan(v) ? v : y) : y + v);
		for (int d = r - 1; d >= 0; d--) {
			off += st[d];
			if (++idx[d] < X->shape[d])
				break;
			off -= st[d] * X->shape[d];
			idx[d] = 0;
		}
	}
	if (op == 1)
		for (int64_t i = 0; i < a->out.numel; i++)
			dtmk_store(&a->out, i, dtmk_load(&a->out, i) / (float)count);
}

static inline void dtmk_sum(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_reduce(ctx, a, 0);
}

static inline void dtmk_mean(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_reduce(ctx, a, 1);
}

static inline void dtmk_max(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_reduce(ctx, a, 2);
}

/* ---- softmax / log_softmax along attrs.ints[0] ---- */

struct dtmk_rows_job {
	const DtmkArgs *a;
	int64_t len, inner;
	int flag;
};

static inline void dtmk_softmax_rows(void *argp, int64_t lo, int64_t hi)
{
	struct dtmk_rows_job *j = argp;
	const DtmkArgs *a = j->a;
	int64_t len = j->len, inner = j->inner;
	int lg = j->flag, f32 = dtmk_all_f32(a) && inner == 1;
	for (int64_t row = lo; row < hi; row++) {
		int64_t o = row / inner, in = row % inner, base = o * len * inner + in;
		if (f32) {
			const float *x = (const float *)a->in[0].p + base;
			float *y = (float *)a->out.p + base;
			float mx = dtmk_maxf(x, len);
			double sum = 0;
			for (int64_t l = 0; l < len; l++)
				sum += dtmk_expf(x[l] - mx);
			float lse = mx + (float)log(sum);
			if (lg)
				for (int64_t l = 0; l < len; l++)
					y[l] = x[l] - lse;
			else
				for (int64_t l = 0; l < len; l++)
					y[l] = dtmk_expf(x[l] - lse);
			continue;
		}
		float mx = -INFINITY;
		for (int64_t l = 0; l < len; l++) {
			float v = dtmk_load(&a->in[0], base + l * inner);
			mx = v > mx ? v : mx;
		}
		double sum = 0;
		for (int64_t l = 0; l < len; l++)
			sum += expf(dtmk_load(&a->in[0], base + l * inner) - mx);
		float lse = mx + (float)log(sum);
		for (int64_t l = 0; l < len; l++) {
			float v = dtmk_load(&a->in[0], base + l * inner) - lse;
			dtmk_store(&a->out, base + l * inner, lg ? v : expf(v));
		}
	}
}

static inline void dtmk_softmax_any(const DtmCtx *ctx, const DtmkArgs *a, int lg)
{
	const DtmkTensor *X = &a->in[0];
	int ax = (int)(a->ints[0] < 0 ? a->ints[0] + X->rank : a->ints[0]);
	struct dtmk_rows_job j = { a, X->shape[ax], dtmk_span(X, ax + 1, X->rank), lg };
	int64_t rows = dtmk_span(X, 0, ax) * j.inner;
	dtmk_par(ctx, rows, 64, dtmk_softmax_rows, &j);
}

static inline void dtmk_softmax(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_softmax_any(ctx, a, 0);
}

static inline void dtmk_log_softmax(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_softmax_any(ctx, a, 1);
}

/* ---- layernorm(x, g, b) / rmsnorm(x, g) over the last dim ---- */

/* One row of layernorm (ln) or rmsnorm, in f32. */
static inline void dtmk_norm_row(const float *restrict x, const float *restrict g,
				 const float *restrict b, float *restrict y, int64_t D, int ln,
				 float eps)
{
	float mu = 0, var = 0;
	if (ln) {
		for (int64_t k = 0; k < D; k++)
			mu += x[k];
		mu /= (float)D;
	}
	for (int64_t k = 0; k < D; k++)
		var += (x[k] - mu) * (x[k] - mu);
	float inv = 1.0f / sqrtf(var / (float)D + eps);
	if (ln)
		for (int64_t k = 0; k < D; k++)
			y[k] = (x[k] - mu) * inv * g[k] + b[k];
	else
		for (int64_t k = 0; k < D; k++)
			y[k] = x[k] * inv * g[k];
}

static inline void dtmk_norm_rows(void *argp, int64_t lo, int64_t hi)
{
	struct dtmk_rows_job *j = argp;
	const DtmkArgs *a = j->a;
	int64_t D = j->len;
	int ln = j->flag;
	float eps = (float)a->f[0];
	if (!dtmk_all_f32(a)) {
		/* bf16 / f16: each row widened, normalised in f32, narrowed */
		float *buf = malloc(sizeof(float) * (size_t)(4 * D + 1));
		if (!buf)
			return;
		float *g = buf, *b = g + D, *x = b + D, *y = x + D;
		DtmkTensor row = a->in[1];
		row.numel = D;
		dtmk_widen(&row, g);
		if (ln) {
			row = a->in[2];
			row.numel = D;
			dtmk_widen(&row, b);
		}
		for (int64_t r = lo; r < hi; r++) {
			row = a->in[0];
			row.p = (char *)row.p + (size_t)(r * D) * dtmk_esize(row.dtype);
			row.numel = D;
			dtmk_widen(&row, x);
			dtmk_norm_row(x, g, b, y, D, ln, eps);
			row = a->out;
			row.p = (char *)row.p + (size_t)(r * D) * dtmk_esize(row.dtype);
			row.numel = D;
			dtmk_narrow(&row, y);
		}
		free(buf);
		return;
	}
	const float *g = a->in[1].p, *b = ln ? a->in[2].p : NULL;
	for (int64_t r = lo; r < hi; r++)
		dtmk_norm_row((const float *)a->in[0].p + r * D, g, b, (float *)a->out.p + r * D, D,
			      ln, eps);
}

static inline void dtmk_layernorm(const DtmCtx *ctx, const DtmkArgs *a)
{
	int64_t D = a->in[0].shape[a->in[0].rank - 1];
	struct dtmk_rows_job j = { a, D, 1, 1 };
	dtmk_par(ctx, D ? a->in[0].numel / D : 0, 64, dtmk_norm_rows, &j);
}

static inline void dtmk_rmsnorm(const DtmCtx *ctx, const DtmkArgs *a)
{
	int64_t D = a->in[0].shape[a->in[0].rank - 1];
	struct dtmk_rows_job j = { a, D, 1, 0 };
	dtmk_par(ctx, D ? a->in[0].numel / D : 0, 64, dtmk_norm_rows, &j);
}

/* ---- data movement ---- */

/* embed(table [V, D], ids [...]): out-of-range ids give a zero row rather
 * than a clamped (silently wrong) one; the data loader guarantees range. */
static inline void dtmk_embed(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *T = &a->in[0], *I = &a->in[1];
	int64_t V = T->shape[0], D = T->shape[1], N = I->numel;
	size_t es = dtmk_esize(T->dtype);
	for (int64_t i = 0; i < N; i++) {
		int32_t id = dtmk_load_i32(I, i);
		char *dst = (char *)a->out.p + (size_t)(i * D) * dtmk_esize(a->out.dtype);
		if (id < 0 || id >= V) {
			memset(dst, 0, (size_t)D * dtmk_esize(a->out.dtype));
		} else if (T->dtype == a->out.dtype) {
			memcpy(dst, (const char *)T->p + (size_t)((int64_t)id * D) * es, (size_t)D * es);
		} else {
			for (int64_t k = 0; k < D; k++)
				dtmk_store(&a->out, i * D + k, dtmk_load(T, (int64_t)id * D + k));
		}
	}
}

/* permute: output dim i is input dim ints[i].  Same-dtype permutes (all
 * the compiler emits) copy elements as bits, output rows split over the
 * pool; a row whose elements are strided in x (a transpose: GPT-2's tied
 * [vocab, d] head weight is 38.6M elements) is copied DTMK_PERM_G rows at
 * a time in blocks of DTMK_PERM_K columns, so each cache line of x read
 * serves G rows.  A pure copy: the cut changes no bit. */
#define DTMK_PERM_G 16
#define DTMK_PERM_K 64

struct dtmk_perm_job {
	const DtmkArgs *a;
	int64_t st[DTM_MAX_RANK]; /* x's stride along each output dim */
	int64_t inner, si;
};

/* x's offset of output row `row` (the output's dims but the last). */
static inline int64_t dtmk_perm_off(const struct dtmk_perm_job *j, int64_t row)
{
	const DtmkTensor *y = &j->a->out;
	int64_t off = 0;
	for (int d = y->rank - 2; d >= 0; d--) {
		off += row % y->shape[d] * j->st[d];
		row /= y->shape[d];
	}
	return off;
}

#define DTMK_PERM_COPY(T)                                                                      \
	do {                                                                                   \
		const T *restrict x = j->a->in[0].p;                                            \
		T *restrict y = j->a->out.p;                                                   \
		for (int64_t r0 = lo; r0 < hi; r0 += DTMK_PERM_G) {                            \
			int g = hi - r0 < DTMK_PERM_G ? (int)(hi - r0) : DTMK_PERM_G;          \
			int64_t off[DTMK_PERM_G];                                              \
			for (int q = 0; q < g; q++)                                            \
				off[q] = dtmk_perm_off(j, r0 + q);                             \
			if (si == 1) {                                                         \
				for (int q = 0; q < g; q++)                                    \
					memcpy(y + (r0 + q) * n, x + off[q], sizeof(T) * (size_t)n); \
				continue;                                                      \
			}                                                                      \
			for (int64_t k0 = 0; k0 < n; k0 += DTMK_PERM_K) {                      \
				int64_t k1 = k0 + DTMK_PERM_K < n ? k0 + DTMK_PERM_K : n;      \
				for (int q = 0; q < g; q++) {                                  \
					T *restrict yr = y + (r0 + q) * n;                     \
					const T *restrict xr = x + off[q];                     \
					for (int64_t k = k0; k < k1; k++)                      \
						yr[k] = xr[k * si];                            \
				}                                                              \
			}                                                                      \
		}                                                                              \
	} while (0)

static void dtmk_perm_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_perm_job *j = arg;
	int64_t n = j->inner, si = j->si;
	if (dtmk_esize(j->a->out.dtype) == 2)
		DTMK_PERM_COPY(uint16_t);
	else
		DTMK_PERM_COPY(uint32_t);
}
#undef DTMK_PERM_COPY

static inline void dtmk_permute(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *X = &a->in[0];
	int r = a->out.rank;
	int64_t xs[DTM_MAX_RANK], st[DTM_MAX_RANK], idx[DTM_MAX_RANK] = { 0 }, s = 1, off = 0;
	for (int d = r - 1; d >= 0; d--) {
		xs[d] = s;
		s *= X->shape[d];
	}
	for (int d = 0; d < r; d++)
		st[d] = xs[a->ints[d]];
	if (r == 0) {
		dtmk_store(&a->out, 0, dtmk_load(X, 0));
		return;
	}
	int64_t inner = a->out.shape[r - 1], si = st[r - 1];
	if (X->dtype == a->out.dtype && inner > 0) {
		struct dtmk_perm_job j = { a, { 0 }, inner, si };
		memcpy(j.st, st, sizeof st);
		int64_t rows = a->out.numel / inner;
		dtmk_par(ctx, rows, (1 << 16) / inner + 1, dtmk_perm_rows, &j);
		return;
	}
	for (int64_t o = 0; o < a->out.numel; o += inner) {
		for (int64_t k = 0; k < inner; k++)
			dtmk_store(&a->out, o + k, dtmk_load(X, off + k * si));
		for (int d = r - 2; d >= 0; d--) {
			off += st[d];
			if (++idx[d] < a->out.shape[d])
				break;
			off -= st[d] * a->out.shape[d];
			idx[d] = 0;
		}
	}
}

static inline void dtmk_reshape(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	if (a->in[0].p == a->out.p)
		return;
	if (a->in[0].dtype == a->out.dtype) {
		memmove(a->out.p, a->in[0].p, (size_t)a->out.numel * dtmk_esize(a->out.dtype));
		return;
	}
	for (int64_t i = 0; i < a->out.numel; i++)
		dtmk_store(&a->out, i, dtmk_load(&a->in[0], i));
}

/* Copies an [outer, n] block grid with element conversion when needed. */
static inline void dtmk_copy_rows(const DtmkTensor *src, int64_t soff, const DtmkTensor *dst,
				  int64_t doff, int64_t n)
{
	if (src->dtype == dst->dtype) {
		size_t es = dtmk_esize(src->dtype);
		memcpy((char *)dst->p + (size_t)doff * es, (const char *)src->p + (size_t)soff * es,
		       (size_t)n * es);
		return;
	}
	for (int64_t k = 0; k < n; k++)
		dtmk_store(dst, doff + k, dtmk_load(src, soff + k));
}

/* concat along ints[0]. */
static inline void dtmk_concat(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int r = a->out.rank;
	int ax = (int)(a->ints[0] < 0 ? a->ints[0] + r : a->ints[0]);
	int64_t outer = dtmk_span(&a->out, 0, ax), inner = dtmk_span(&a->out, ax + 1, r);
	int64_t off = 0;
	for (int64_t o = 0; o < outer; o++)
		for (int k = 0; k < a->nin; k++) {
			int64_t blk = a->in[k].shape[ax] * inner;
			dtmk_copy_rows(&a->in[k], o * blk, &a->out, off, blk);
			off += blk;
		}
}

/* slice: ints = {axis, start, end}. */
static inline void dtmk_slice(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *X = &a->in[0];
	int ax = (int)(a->ints[0] < 0 ? a->ints[0] + X->rank : a->ints[0]);
	int64_t lo = a->ints[1], hi = a->ints[2];
	int64_t outer = dtmk_span(X, 0, ax), inner = dtmk_span(X, ax + 1, X->rank);
	int64_t len = X->shape[ax], blk = (hi - lo) * inner;
	for (int64_t o = 0; o < outer; o++)
		dtmk_copy_rows(X, (o * len + lo) * inner, &a->out, o * blk, blk);
}

/* shard_slice(x): this rank's chunk of dim ints[0] over the group of mesh
 * axes mesh_axes (Replicate -> Shard, no communication).  The position in
 * the group is mixed-radix over the group's axes, the lowest-numbered
 * axis major (runtime/comm.h's group order, which is also the order an
 * all_gather concatenates in); shards are even (partition refuses uneven
 * ones), so the chunk is out's extent of the dim. */
static inline void dtmk_shard_slice(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *X = &a->in[0];
	int ax = (int)a->ints[0];
	int64_t idx = dtmk_group_index(ctx, a);
	int64_t outer = dtmk_span(X, 0, ax), inner = dtmk_span(X, ax + 1, X->rank);
	int64_t len = X->shape[ax], c = a->out.shape[ax], blk = c * inner;
	for (int64_t o = 0; o < outer; o++)
		dtmk_copy_rows(X, (o * len + idx * c) * inner, &a->out, o * blk, blk);
}

/* ---- attention(q, k, v[, seg]) [.., T, D]: ints = {heads, causal,
 * kv_heads, window}, mesh_axes = head_axes (dtmk_attn_heads) ---- */

struct dtmk_attn_job {
	const DtmkArgs *a;
	int64_t H, Tq, Tk, D, Dv, Dk, Dkv, h0, group;
	/* attn.lse: each row's log-sum-exp, [B, H, Tq] after the result
	 * (ir/ops.def), -inf for a row attending nothing; else NULL */
	float *lse;
	/* the query and key segment ids (attention: its seg for both, or
	 * NULL); the result's row stride (Dv); ring attention's blocks
	 * (dtmk_ring.h): their rows' places (else NULL), and ring set: the
	 * result [B, T, D + H] (ldo D + H) holds each row's log-sum-exps
	 * after its D values */
	const DtmkTensor *qseg, *kseg;
	int64_t ldo;
	const DtmkAttnPos *pos;
	int ring;
};

/* Row i of item it's log-sum-exp, where the job keeps them. */
static inline void dtmk_attn_put_lse(const struct dtmk_attn_job *j, int64_t it, int64_t i, float v)
{
	if (j->ring)
		dtmk_store(&j->a->out, (it / j->H * j->Tq + i) * j->ldo + j->Dv + it % j->H, v);
	else if (j->lse)
		j->lse[it * j->Tq + i] = v;
}

/* The item's k transposed ([hd, Tp], zero past Tk) and v ([Tk, hv]) of
 * batch b, kv head g, as f32. */
static inline __attribute__((always_inline)) void
dtmk_attn_stage_kv(const struct dtmk_attn_job *j, int64_t b, int64_t g, float *restrict kt,
		   float *restrict vb, int64_t hd, int64_t hv, int f32)
{
	const DtmkArgs *a = j->a;
	int64_t Tk = j->Tk, Tp = DTMK_PAD16(Tk), Tl = dtmk_attn_ld(Tp);
	if (f32)
		dtmk_transpose32(kt, Tl, (const float *)a->in[1].p + b * Tk * j->Dk + g * hd, j->Dk,
				 Tk, hd);
	for (int64_t t = 0; t < Tk; t++) {
		int64_t ko = (b * Tk + t) * j->Dk + g * hd, vo = (b * Tk + t) * j->Dkv + g * hv;
		if (f32) {
			memcpy(vb + t * hv, (const float *)a->in[2].p + vo, sizeof(float) * (size_t)hv);
			continue;
		}
		for (int64_t c = 0; c < hd; c++)
			kt[c * Tl + t] = dtmk_load(&a->in[1], ko + c);
		for (int64_t c = 0; c < hv; c++)
			vb[t * hv + c] = dtmk_load(&a->in[2], vo + c);
	}
	for (int64_t c = 0; c < hd; c++)
		for (int64_t t = Tk; t < Tp; t++)
			kt[c * Tl + t] = 0;
}

/* One (batch, head) item.  The item's k is copied transposed ([hd, Tk])
 * and its v contiguous ([Tk, hv]), both as f32, so every inner loop runs
 * over contiguous memory and vectorises: the scores of a query row over
 * keys, the softmax over keys, the weighted sum over v's columns.  Always
 * inlined so the caller can specialise it to common head sizes. */
static inline __attribute__((always_inline)) void
dtmk_attention_item(const struct dtmk_attn_job *j, int64_t it, float *buf, int64_t hd, int64_t hv)
{
	const DtmkArgs *a = j->a;
	int64_t H = j->H, Tq = j->Tq, Tk = j->Tk, D = j->D, Dv = j->Dv, Tp = DTMK_PAD16(Tk);
	float scale = 1.0f / sqrtf((float)hd);
	float *restrict kt = buf, *restrict vb = kt + hd * dtmk_attn_ld(Tp), *restrict p = vb + Tp * hv;
	float *restrict qrow = p + Tp, *restrict acc = qrow + hd;
	int64_t b = it / H, h = it % H, g = (j->h0 + h) / j->group;
	const DtmkTensor *seg = j->qseg;
	int f32 = dtmk_all_f32(a);
	dtmk_attn_stage_kv(j, b, g, kt, vb, hd, hv, f32);
	for (int64_t i = 0; i < Tq; i++) {
		int64_t lo, nk;
		dtmk_attn_range(a, i, Tk, &lo, &nk);
		int64_t np = DTMK_PAD16(nk), yo = (b * Tq + i) * Dv + h * hv;
		int32_t si = seg ? dtmk_load_i32(seg, b * Tq + i) : 0;
		if (nk <= lo || si < 0) { /* attends nothing: 0 */
			for (int64_t c = 0; c < hv; c++)
				dtmk_store(&a->out, yo + c, 0.0f);
			dtmk_attn_put_lse(j, it, i, -INFINITY);
			continue;
		}
		int64_t qo = (b * Tq + i) * D + h * hd;
		for (int64_t c = 0; c < hd; c++)
			qrow[c] = (f32 ? ((const float *)a->in[0].p)[qo + c] :
					 dtmk_load(&a->in[0], qo + c)) * scale;
		/* whole 16-key tiles; keys outside [lo, nk) are masked out */
		if (np <= 64) {
			dtmk_rows_dot_tiles(p, qrow, kt, dtmk_attn_ld(Tp), hd, (int)(np / 16));
		} else {
			for (int64_t t = 0; t < np; t++)
				p[t] = 0;
			dtmk_axpy_rows(p, qrow, kt, dtmk_attn_ld(Tp), hd, np);
		}
		for (int64_t t = 0; t < lo; t++)
			p[t] = -INFINITY;
		for (int64_t t = nk; t < np; t++)
			p[t] = -INFINITY;
		for (int64_t t = lo; seg && t < nk; t++)
			if (dtmk_load_i32(seg, b * Tk + t) != si)
				p[t] = -INFINITY;
		float mx = dtmk_maxf(p, np);
		if (mx == -INFINITY) {
			for (int64_t c = 0; c < hv; c++)
				dtmk_store(&a->out, yo + c, 0.0f);
			dtmk_attn_put_lse(j, it, i, -INFINITY);
			continue;
		}
		float sum = 0;
		for (int64_t t = 0; t < np; t++) {
			p[t] = dtmk_expf(p[t] - mx);
			sum += p[t];
		}
		dtmk_attn_put_lse(j, it, i, mx + logf(sum));
		float inv = 1.0f / sum;
		for (int64_t t = 0; t < nk; t++)
			p[t] *= inv;
		if (hv % 16 == 0) {
			dtmk_rows_sum16(acc, p, vb, hv, nk, hv);
		} else {
			for (int64_t c = 0; c < hv; c++)
				acc[c] = 0;
			dtmk_axpy_rows(acc, p, vb, hv, nk, hv);
		}
		if (f32)
			memcpy((float *)a->out.p + yo, acc, sizeof(float) * (size_t)hv);
		else
			for (int64_t c = 0; c < hv; c++)
				dtmk_store(&a->out, yo + c, acc[c]);
	}
}

/* One (batch, head) item in blocks of DTMK_AR query rows (hd, hv multiples
 * of 16): the item's k transposed and v as in dtmk_attention_item; the
 * block's keys in tiles of DTMK_ATTN_KT with an online softmax
 * (dtmk_attn_online_tile): each tile's weighted sum of v is added to the
 * rows' running output, rescaled when a row's max rises, and divided by
 * the sum of the exponentials at the end. */
static inline __attribute__((always_inline)) void
dtmk_attention_block(const struct dtmk_attn_job *j, int64_t it, float *buf, int64_t hd, int64_t hv)
{
	const DtmkArgs *a = j->a;
	int64_t H = j->H, Tq = j->Tq, Tk = j->Tk, D = j->D, Tp = DTMK_PAD16(Tk);
	float scale = 1.0f / sqrtf((float)hd);
	int64_t St = dtmk_attn_st(Tp);
	float *restrict kt = buf, *restrict vb = kt + hd * dtmk_attn_ld(Tp), *restrict S = vb + Tp * hv;
	float *restrict qb = S + DTMK_AR * St, *restrict ob = qb + DTMK_AR * hd;
	float *restrict pv = ob + DTMK_AR * hv;
	int64_t b = it / H, h = it % H, g = (j->h0 + h) / j->group;
	const DtmkTensor *seg = j->qseg, *kseg = j->kseg;
	int f32 = dtmk_all_f32(a);
	dtmk_attn_stage_kv(j, b, g, kt, vb, hd, hv, f32);
	for (int64_t t = Tk; t < Tp; t++) /* read by rows whose keys end past Tk: never */
		memset(vb + t * hv, 0, sizeof(float) * (size_t)hv);
	for (int64_t i0 = 0; i0 < Tq; i0 += DTMK_AR) {
		int64_t lo[DTMK_AR], nk[DTMK_AR], kmin, kmax;
		int32_t si[DTMK_AR];
		bool live[DTMK_AR];
		dtmk_attn_block_rows(a, j->pos, seg, b, i0, Tq, Tk, lo, nk, si, live, &kmin, &kmax);
		for (int r = 0; r < DTMK_AR; r++) {
			float *restrict q = qb + r * hd;
			int64_t qo = (b * Tq + i0 + r) * D + h * hd;
			const float *restrict src = (const float *)a->in[0].p + qo;
			if (!live[r])
				memset(q, 0, sizeof(float) * (size_t)hd);
			else if (f32)
				for (int64_t c = 0; c < hd; c++)
					q[c] = src[c] * scale;
			else
				for (int64_t c = 0; c < hd; c++)
					q[c] = dtmk_load(&a->in[0], qo + c) * scale;
		}
		float m[DTMK_AR], l[DTMK_AR], al[DTMK_AR];
		if (kmax > 0) {
			dtmk_attn_block_start(ob, m, l, hv);
			int64_t te = DTMK_PAD16(kmax);
			for (int64_t t0 = kmin & ~(int64_t)15; t0 < te; t0 += St) {
				int64_t w = te - t0 < St ? te - t0 : St;
				dtmk_rows8_scores(S, St, qb, hd, kt + t0, dtmk_attn_ld(Tp), hd, w);
				dtmk_attn_block_tile(S, St, t0, w, lo, nk, kseg, b * Tk, si, live, m,
						     l, al);
				/* the tile's weighted sum of v by exp(s - max) */
				dtmk_rows8_pv(pv, hv, S, St, vb + t0 * hv, hv, 0, w, hv);
				dtmk_attn_block_acc(ob, pv, al, hv);
			}
			dtmk_attn_block_finish(ob, m, l, live, hv);
		}
		for (int r = 0; r < DTMK_AR && i0 + r < Tq; r++) {
			int64_t yo = (b * Tq + i0 + r) * j->ldo + h * hv;
			dtmk_attn_put_lse(j, it, i0 + r, live[r] && kmax > 0 ? m[r] + logf(l[r])
									: -INFINITY);
			const float *o = ob + r * hv;
			if (!live[r] || kmax == 0) {
				for (int64_t c = 0; c < hv; c++)
					dtmk_store(&a->out, yo + c, 0.0f);
			} else if (f32) {
				memcpy((float *)a->out.p + yo, o, sizeof(float) * (size_t)hv);
			} else {
				for (int64_t c = 0; c < hv; c++)
					dtmk_store(&a->out, yo + c, o[c]);
			}
		}
	}
}

#ifdef DTMK_ATTN_BF16
/* Bytes of dtmk_attention_block_bf16's scratch. */
static inline size_t dtmk_attn_bf16_bytes(int64_t Tp, int64_t hd, int64_t hv)
{
	int64_t St = dtmk_attn_st(Tp);
	return sizeof(uint32_t) * (size_t)(hd / 2 * dtmk_attn_ld(Tp) + Tp / 2 * hv) +
	       sizeof(float) * (size_t)(DTMK_AR * (St + 2 * hv)) +
	       sizeof(uint16_t) * (size_t)(DTMK_AR * (St + hd));
}

/* dtmk_attention_block on bf16 q, k, v (hd, hv multiples of 16): k as
 * words of two head-dim elements per key ([hd/2, Tp]), v as words of two
 * keys per column ([Tp/2, hv]), zero past Tk; the scores scaled after the
 * product; each block's exponentials rounded to bf16 for the product with
 * v (dtmk.h, "attention's products on bf16 operands"). */
static inline __attribute__((always_inline)) void
dtmk_attention_block_bf16(const struct dtmk_attn_job *j, int64_t it, void *buf, int64_t hd,
			  int64_t hv)
{
	const DtmkArgs *a = j->a;
	int64_t H = j->H, Tq = j->Tq, Tk = j->Tk, D = j->D, Tp = DTMK_PAD16(Tk);
	int64_t Tl = dtmk_attn_ld(Tp);
	float scale = 1.0f / sqrtf((float)hd);
	int64_t St = dtmk_attn_st(Tp);
	uint32_t *restrict kt = buf, *restrict vp = kt + hd / 2 * Tl;
	float *restrict S = (float *)(vp + Tp / 2 * hv), *restrict ob = S + DTMK_AR * St;
	float *restrict pv = ob + DTMK_AR * hv;
	uint16_t *restrict Sb = (uint16_t *)(pv + DTMK_AR * hv), *restrict qb = Sb + DTMK_AR * St;
	int64_t b = it / H, h = it % H, g = (j->h0 + h) / j->group;
	const DtmkTensor *seg = j->qseg, *kseg = j->kseg;
	const uint16_t *Q = a->in[0].p, *K = a->in[1].p, *V = a->in[2].p;
	dtmk_transpose32(kt, Tl, K + b * Tk * j->Dk + g * hd, j->Dk / 2, Tk, hd / 2);
	for (int64_t c = 0; c < hd / 2; c++)
		for (int64_t t = Tk; t < Tp; t++)
			kt[c * Tl + t] = 0;
	for (int64_t t = 0; t < Tp; t++)
		for (int64_t c = 0; c < hv; c++) {
			uint16_t x = t < Tk ? V[(b * Tk + t) * j->Dkv + g * hv + c] : 0;
			uint16_t *w = (uint16_t *)(vp + t / 2 * hv + c);
			w[t & 1] = x; /* little-endian: the even key in the low half */
		}
	for (int64_t i0 = 0; i0 < Tq; i0 += DTMK_AR) {
		int64_t lo[DTMK_AR], nk[DTMK_AR], kmin, kmax;
		int32_t si[DTMK_AR];
		bool live[DTMK_AR];
		dtmk_attn_block_rows(a, j->pos, seg, b, i0, Tq, Tk, lo, nk, si, live, &kmin, &kmax);
		for (int r = 0; r < DTMK_AR; r++)
			if (live[r])
				memcpy(qb + r * hd, Q + (b * Tq + i0 + r) * D + h * hd, 2 * (size_t)hd);
			else
				memset(qb + r * hd, 0, 2 * (size_t)hd);
		float m[DTMK_AR], l[DTMK_AR], al[DTMK_AR];
		if (kmax > 0) {
			dtmk_attn_block_start(ob, m, l, hv);
			int64_t te = DTMK_PAD16(kmax);
			for (int64_t t0 = kmin & ~(int64_t)15; t0 < te; t0 += St) {
				int64_t w = te - t0 < St ? te - t0 : St;
				dtmk_rows8_scores_bf16(S, St, qb, hd, kt + t0, Tl, hd, w, scale);
				dtmk_attn_block_tile(S, St, t0, w, lo, nk, kseg, b * Tk, si, live, m, l,
						     al);
				for (int r = 0; r < DTMK_AR; r++)
					dtmk_bf16_row(Sb + r * St, S + r * St, w);
				/* v's words hold keys in pairs, t0 even: the tile's rows */
				dtmk_rows8_pv_bf16(pv, hv, Sb, St, vp + t0 / 2 * hv, hv, 0, w, hv);
				dtmk_attn_block_acc(ob, pv, al, hv);
			}
			dtmk_attn_block_finish(ob, m, l, live, hv);
		}
		for (int r = 0; r < DTMK_AR && i0 + r < Tq; r++) {
			int64_t yo = (b * Tq + i0 + r) * j->ldo + h * hv;
			dtmk_attn_put_lse(j, it, i0 + r, live[r] && kmax > 0 ? m[r] + logf(l[r])
									: -INFINITY);
			if (!live[r] || kmax == 0)
				memset(ob + r * hv, 0, sizeof(float) * (size_t)hv);
			DtmkTensor v = dtmk_view(&a->out, yo, hv);
			dtmk_narrow(&v, ob + r * hv); /* a row at once: it vectorises */
		}
	}
}
#endif

/* Items [lo, hi) with their scratch; the usual head sizes get copies of
 * the item compiled for that constant (whole-vector loops over the head
 * dim, no remainders). */
static inline void dtmk_attention_items(void *argp, int64_t lo, int64_t hi)
{
	const struct dtmk_attn_job *j = argp;
	int64_t hd = j->D / j->H, hv = j->Dv / j->H, Tp = DTMK_PAD16(j->Tk);
	/* the blocks' (dtmk_attention_block) or a row's (dtmk_attention_item) */
	int64_t blk = DTMK_AR * (dtmk_attn_st(Tp) + hd + 2 * hv), row = Tp + hd + hv;
	size_t need = (size_t)(hd * dtmk_attn_ld(Tp) + Tp * hv + (blk > row ? blk : row));
#ifdef DTMK_ATTN_BF16
	bool bf = dtmk_attn_bf16(&j->a->in[0], &j->a->in[1], &j->a->in[2], hd, hv);
	if (bf)
		need = (dtmk_attn_bf16_bytes(Tp, hd, hv) + sizeof(float) - 1) / sizeof(float);
#endif
	float stackbuf[DTMK_ATTN_STACK];
	float *buf = need <= DTMK_ATTN_STACK ? stackbuf : malloc(sizeof(float) * need);
	if (!buf)
		return;
	for (int64_t it = lo; it < hi; it++) {
#ifdef DTMK_ATTN_BF16
		if (bf && hd == 64 && hv == 64) {
			dtmk_attention_block_bf16(j, it, buf, 64, 64);
			continue;
		}
		if (bf) {
			dtmk_attention_block_bf16(j, it, buf, hd, hv);
			continue;
		}
#endif
		if (hd == 64 && hv == 64)
			dtmk_attention_block(j, it, buf, 64, 64);
		else if (hd % 16 == 0 && hv % 16 == 0)
			dtmk_attention_block(j, it, buf, hd, hv);
		else if (hd == 16 && hv == 16)
			dtmk_attention_item(j, it, buf, 16, 16);
		else if (hd == 32 && hv == 32)
			dtmk_attention_item(j, it, buf, 32, 32);
		else if (hd == 64 && hv == 64)
			dtmk_attention_item(j, it, buf, 64, 64);
		else
			dtmk_attention_item(j, it, buf, hd, hv);
	}
	if (buf != stackbuf)
		free(buf);
}

static inline void dtmk_attention(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *Q = &a->in[0], *K = &a->in[1], *V = &a->in[2];
	int r = Q->rank;
	struct dtmk_attn_job j = { .a = a, .H = a->ints[0], .Tq = Q->shape[r - 2],
				   .Tk = K->shape[r - 2], .D = Q->shape[r - 1],
				   .Dv = a->out.shape[r - 1], .Dk = K->shape[r - 1],
				   .Dkv = V->shape[r - 1], .h0 = 0, .group = 1 };
	if (j.H <= 0)
		return;
	if (a->nints > 7 && a->ints[7])
		j.lse = (float *)((char *)a->out.p + a->out.numel * (int64_t)dtmk_esize(a->out.dtype));
	j.qseg = j.kseg = a->nin > 3 ? &a->in[3] : NULL;
	j.ldo = j.Dv;
	dtmk_attn_heads(ctx, a, &j.h0, &j.group);
	dtmk_par(ctx, dtmk_span(Q, 0, r - 2) * j.H, 1, dtmk_attention_items, &j);
}

/* ---- losses: chunked so the sum's order is fixed ---- */

#define DTMK_LOSS_CHUNK 64

struct dtmk_ce_job {
	const DtmkArgs *a;
	int64_t N, V;
	double *part;
};

static inline void dtmk_ce_chunks(void *argp, int64_t lo, int64_t hi)
{
	struct dtmk_ce_job *j = argp;
	const DtmkArgs *a = j->a;
	int64_t V = j->V;
	int f32 = a->in[0].dtype == DTM_F32;
	/* 16-bit logits: each row widened into f32 scratch, then the f32
	 * loop (per element through dtmk_load and libm's expf it was 0.72 s
	 * of GPT-2 small's bf16 step) */
	float *row = f32 ? NULL : malloc(sizeof(float) * (size_t)V);
	for (int64_t c = lo; c < hi; c++) {
		double tot = 0;
		int64_t end = (c + 1) * DTMK_LOSS_CHUNK < j->N ? (c + 1) * DTMK_LOSS_CHUNK : j->N;
		for (int64_t i = c * DTMK_LOSS_CHUNK; i < end; i++) {
			int32_t t = dtmk_load_i32(&a->in[1], i);
			float mx = -INFINITY;
			double sum = 0;
			if (f32 || row) {
				if (row) {
					DtmkTensor v = dtmk_view(&a->in[0], i * V, V);
					dtmk_widen(&v, row);
				}
				const float *x = row ? row : (const float *)a->in[0].p + i * V;
				mx = dtmk_maxf(x, V);
				float s = 0;
				for (int64_t k = 0; k < V; k++)
					s += dtmk_expf(x[k] - mx);
				sum = s;
			} else {
				for (int64_t k = 0; k < V; k++) {
					float v = dtmk_load(&a->in[0], i * V + k);
					mx = v > mx ? v : mx;
				}
				for (int64_t k = 0; k < V; k++)
					sum += expf(dtmk_load(&a->in[0], i * V + k) - mx);
			}
			float xt = t >= 0 && t < V ? dtmk_load(&a->in[0], i * V + t) : NAN;
			tot += (double)mx + log(sum) - (double)xt;
		}
		j->part[c] = tot;
	}
	free(row);
}

/* cross_entropy(logits [..., V], targets i32[...]) -> mean over positions
 * of logsumexp(row) - row[target]; a target out of range gives NaN (the
 * runtime stops on a non-finite loss). */
static inline void dtmk_cross_entropy(const DtmCtx *ctx, const DtmkArgs *a)
{
	int64_t V = a->in[0].shape[a->in[0].rank - 1], N = a->in[1].numel;
	int64_t nc = (N + DTMK_LOSS_CHUNK - 1) / DTMK_LOSS_CHUNK;
	double *part = calloc((size_t)(nc ? nc : 1), sizeof(double));
	if (!part) {
		dtmk_store(&a->out, 0, NAN);
		return;
	}
	struct dtmk_ce_job j = { a, N, V, part };
	dtmk_par(ctx, nc, 1, dtmk_ce_chunks, &j);
	double tot = 0;
	for (int64_t c = 0; c < nc; c++)
		tot += part[c];
	free(part);
	dtmk_store(&a->out, 0, (float)(tot / (double)(N ? N : 1)));
}

static inline void dtmk_mse(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t N = a->in[0].numel;
	double tot = 0;
	for (int64_t i = 0; i < N; i++) {
		double d = (double)dtmk_load(&a->in[0], i) - (double)dtmk_load(&a->in[1], i);
		tot += d * d;
	}
	dtmk_store(&a->out, 0, (float)(tot / (double)(N ? N : 1)));
}

#endif
