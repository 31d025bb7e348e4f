/* dtmk.h - the calling convention of dtm's CPU kernels.
 *
 * The training binary's C file (written by codegen/emit_c.c) includes the
 * kernel headers of this folder.  Each non-elementwise IR op NAME (the name
 * in ir/ops.def) has one kernel
 *
 *     static void dtmk_NAME(const DtmCtx *ctx, const DtmkArgs *a);
 *
 * that reads a->in[0..nin) and writes a->out, with the op's attributes in
 * a->ints / a->f etc. (at the positions cg_kernel_attrs, codegen/emit_common.c,
 * gives each op family's IrAttr fields).  The kernels are compiled once,
 * into the dtm_kernels library (dtmk_lib.c: dtmk_op_NAME runs dtmk_NAME for
 * each op of dtmk_ops.def).  The emitter writes one small wrapper per
 * distinct kernel (same op, shapes and attributes) that fills a DtmkArgs
 * with those constants and the buffer pointers of its Plan action and
 * calls dtmk_op_NAME; the shapes are data, not compiled in.
 *
 * Elementwise ops are not called through here: the emitter fuses chains of
 * them into loops of its own.  Matmuls become GEMM actions of the Plan.
 *
 * Files: dtmk.h (this: types and helpers), dtmk_fwd.h (forward ops),
 * dtmk_bwd.h (gradient ops), dtmk_optim.h (optimizer ops).  Kernels compute
 * in f32 (accumulating reductions in f32 or f64) and load/store bf16/f16
 * through dtmk_load/dtmk_store.
 */
#ifndef DTMK_H
#define DTMK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan.h"
#include "support/float16.h"

#define DTMK_MAX_IN 8

typedef struct DtmkTensor {
	void *p;
	DtmDtype dtype;
	int rank;
	int64_t shape[DTM_MAX_RANK];
	int64_t numel;
} DtmkTensor;

/* DtmkArgs.mesh_axes: the low 16 bits the group, the high 16 the axes
 * numbered last (DTM_MAX_AXES of each at most) */
#define DTMK_AXES_MINOR 16

typedef struct DtmkArgs {
	int nin;
	DtmkTensor in[DTMK_MAX_IN];
	DtmkTensor out;
	int64_t ints[9]; /* an attention ring block's 9 (dtmk_ring.h) */
	int nints;
	double f[2];
	double fx[6]; /* optimizer hyperparameters (DTMK_OPT_*, dtmk_optim.h) */
	/* a group of mesh axes (bit k: axis k); attention's head_minor in
	 * the bits from DTMK_AXES_MINOR up (dtmk_group_index) */
	uint32_t mesh_axes;
	int red;
	int flag;
} DtmkArgs;

/* The generated kernels' names for support/float16.h's conversions (the
 * fused loops emit_c.c writes call these). */
static inline float dtmk_bf16_to_f32(uint16_t h)
{
	return bf16_to_f32(h);
}

static inline uint16_t dtmk_f32_to_bf16(float f)
{
	return bf16_from_f32(f);
}

static inline float dtmk_f16_to_f32(uint16_t h)
{
	return f16_to_f32(h);
}

static inline uint16_t dtmk_f32_to_f16(float f)
{
	return f16_from_f32(f);
}

/* Element i of t as f32, whatever t's dtype. */
static inline size_t dtmk_esize(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

static inline float dtmk_load(const DtmkTensor *t, int64_t i)
{
	switch (t->dtype) {
	case DTM_F32: return ((const float *)t->p)[i];
	case DTM_BF16: return dtmk_bf16_to_f32(((const uint16_t *)t->p)[i]);
	case DTM_F16: return dtmk_f16_to_f32(((const uint16_t *)t->p)[i]);
	case DTM_I32: return (float)((const int32_t *)t->p)[i];
	}
	return 0;
}

/* Elements [off, off + n) of t as a tensor of their own (flat). */
static inline DtmkTensor dtmk_view(const DtmkTensor *t, int64_t off, int64_t n)
{
	DtmkTensor v = *t;
	size_t es = t->dtype == DTM_BF16 || t->dtype == DTM_F16 ? 2 : 4;
	v.p = (char *)t->p + (size_t)off * es;
	v.numel = n;
	v.rank = 1;
	v.shape[0] = n;
	return v;
}

/* All of t as f32 into dst, and dst's f32 values into t: one loop per
 * dtype (bf16's vectorises), not a switch per element. */
static inline __attribute__((always_inline)) void dtmk_widen(const DtmkTensor *t, float *restrict dst)
{
	int64_t n = t->numel;
	if (t->dtype == DTM_BF16) {
		const uint16_t *restrict s = t->p;
		for (int64_t i = 0; i < n; i++)
			dst[i] = dtmk_bf16_to_f32(s[i]);
	} else if (t->dtype == DTM_F32) {
		memcpy(dst, t->p, sizeof(float) * (size_t)n);
	} else {
		for (int64_t i = 0; i < n; i++)
			dst[i] = dtmk_load(t, i);
	}
}

static inline void dtmk_store(const DtmkTensor *t, int64_t i, float v);

static inline __attribute__((always_inline)) void dtmk_narrow(const DtmkTensor *t, const float *restrict src)
{
	int64_t n = t->numel;
	if (t->dtype == DTM_BF16) {
		uint16_t *restrict d = t->p;
		for (int64_t i = 0; i < n; i++)
			d[i] = dtmk_f32_to_bf16(src[i]);
	} else if (t->dtype == DTM_F32) {
		memcpy(t->p, src, sizeof(float) * (size_t)n);
	} else {
		for (int64_t i = 0; i < n; i++)
			dtmk_store(t, i, src[i]);
	}
}

static inline void dtmk_store(const DtmkTensor *t, int64_t i, float v)
{
	switch (t->dtype) {
	case DTM_F32: ((float *)t->p)[i] = v; break;
	case DTM_BF16: ((uint16_t *)t->p)[i] = dtmk_f32_to_bf16(v); break;
	case DTM_F16: ((uint16_t *)t->p)[i] = dtmk_f32_to_f16(v); break;
	case DTM_I32: ((int32_t *)t->p)[i] = (int32_t)v; break;
	}
}

static inline int32_t dtmk_load_i32(const DtmkTensor *t, int64_t i)
{
	return ((const int32_t *)t->p)[i];
}

/* exp(x) without branches or calls, so loops over it vectorise (libm's
 * expf is a call per element; GELU, softmax and attention spend most of
 * their time there).  Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * in two FMA steps (fmaf, not a*b + c: the reassociation the generated C
 * is compiled with could merge the two halves of ln2), Cephes' degree-6
 * polynomial for exp(r) (relative error ~2e-7, about 1.5 ulp), then 2^n
 * put into the exponent bits.  Below -87 (where 2^n would leave the
 * normal range) the result is 0, above 88.72 +inf, and a NaN stays NaN. */
static inline __attribute__((always_inline)) float dtmk_expf(float x)
{
	float xc = x < -87.0f ? -87.0f : x;
	xc = xc > 88.0f ? 88.0f : xc;
	/* rintf, not (int)(kf + copysign(0.5, kf)): gcc vectorises the
	 * former but not the branches it makes of the latter */
	float nf = rintf(xc * 1.44269504088896341f);
	int32_t n = (int32_t)nf;
	float r = fmaf(nf, -0.693359375f, xc);
	r = fmaf(nf, 2.12194440e-4f, r);
	float q = 1.9875691500e-4f;
	q = fmaf(q, r, 1.3981999507e-3f);
	q = fmaf(q, r, 8.3334519073e-3f);
	q = fmaf(q, r, 4.1665795894e-2f);
	q = fmaf(q, r, 1.6666665459e-1f);
	q = fmaf(q, r, 5.0000001201e-1f);
	float e = fmaf(q * r, r, r) + 1.0f;
	uint32_t u = (uint32_t)(n + 127) << 23;
	float sc;
	memcpy(&sc, &u, 4);
	float y = x < -87.0f ? 0.0f : e * sc;
	y = x > 88.72f ? INFINITY : y;
	return x != x ? x : y;
}

/* tanh for GELU: (1 - e)/(1 + e) with e = exp(-2|x|) through dtmk_expf,
 * branch-free so GELU's loops vectorise (libm's tanhf goes through
 * expm1f, several times slower; GELU was a third of a GPT step).  Absolute
 * error ~2e-7 (relative error grows for |x| below ~1e-2, which GELU does
 * not see: it uses 0.5*x*(1 + tanh)), so the TANH op itself keeps tanhf.
 * |x| >= 9 gives +-1 exactly (tanh(9) rounds to 1 in f32). */
static inline __attribute__((always_inline)) float dtmk_tanh_gelu(float x)
{
	float ax = fabsf(x);
	ax = ax < 9.0f ? ax : 9.0f;
	float e = dtmk_expf(-2.0f * ax);
	return copysignf((1.0f - e) / (1.0f + e), x);
}

/* dst[c * ldd + t] = the 32-bit element (t, c) of src (row stride lds
 * elements), for t in [0, nt) and c in [0, nc): attention's k (and v)
 * staged transposed, as f32 or as words of two bf16 values.  In 16 x 16
 * tiles through a buffer: a store per element straight down a column of
 * dst lands on lines ldd apart (4 KB at T = 1024, all in one L1 set), and
 * that staging was 16% of the f32 forward's time. */
static inline void dtmk_transpose32(void *restrict dst, int64_t ldd, const void *restrict src,
				    int64_t lds, int64_t nt, int64_t nc)
{
	uint32_t *restrict d = dst;
	const char *restrict s = src;
	for (int64_t t0 = 0; t0 < nt; t0 += 16) {
		int tn = nt - t0 < 16 ? (int)(nt - t0) : 16;
		/* the next 16 rows, lds apart: the hardware prefetcher does not
		 * follow the stride (the row loads were 7% of the f32 kernels) */
		for (int64_t t = t0 + 16; t < t0 + 32 && t < nt; t++)
			for (int64_t c = 0; c < nc; c += 16)
				__builtin_prefetch(s + 4 * (size_t)(t * lds + c));
		for (int64_t c0 = 0; c0 < nc; c0 += 16) {
			int cn = nc - c0 < 16 ? (int)(nc - c0) : 16;
			uint32_t tile[16][16];
			for (int t = 0; t < tn; t++)
				memcpy(tile[t], s + 4 * (size_t)((t0 + t) * lds + c0), 4 * (size_t)cn);
			for (int c = 0; c < cn; c++)
				for (int t = 0; t < tn; t++)
					d[(c0 + c) * ldd + t0 + t] = tile[t][c];
		}
	}
}

/* y[0, n) += sum over r in [0, m) of a[r] * x[r * ldx + (0, n)]: rows of
 * x weighted by a, four rows per pass over y so its update is not one
 * long add chain through memory (attention's small products; hd and T
 * are only known at run time, so the compiler cannot keep y in
 * registers). */
static inline __attribute__((always_inline)) void
dtmk_axpy_rows(float *restrict y, const float *restrict a,
				  const float *restrict x, int64_t ldx, int64_t m, int64_t n)
{
	int64_t r = 0;
	for (; r + 4 <= m; r += 4) {
		const float *x0 = x + r * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
		float a0 = a[r], a1 = a[r + 1], a2 = a[r + 2], a3 = a[r + 3];
		for (int64_t k = 0; k < n; k++)
			y[k] += (a0 * x0[k] + a1 * x1[k]) + (a2 * x2[k] + a3 * x3[k]);
	}
	for (; r < m; r++) {
		const float *x0 = x + r * ldx;
		float a0 = a[r];
		for (int64_t k = 0; k < n; k++)
			y[k] += a0 * x0[k];
	}
}

/* GCC/clang vector types: 16 floats, one AVX-512 register (lowered to
 * narrower registers on other targets).  Memory is accessed through
 * DTMK_V16(p), an unaligned, may-alias view (the idiom of the intrinsics'
 * __m512_u), never through functions taking or returning vectors, whose
 * ABI would depend on the target flags. */
typedef float DtmkV16 __attribute__((vector_size(64)));
typedef int32_t DtmkV16i __attribute__((vector_size(64)));
typedef float DtmkV16u __attribute__((vector_size(64), aligned(4), may_alias));
#define DTMK_V16(p) (*(DtmkV16u *)(p))

/* y[0, 16 * nt) = sum over r in [0, m) of a[r] * x[r * ldx + (0, 16 * nt)]
 * for nt <= 4 tiles of 16, the tiles held in registers through the whole
 * sum (attention's scores of one query over up to 64 keys). */
static inline __attribute__((always_inline)) void
dtmk_rows_dot_tiles(float *y, const float *a, const float *x, int64_t ldx, int64_t m, int nt)
{
	DtmkV16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	for (int64_t r = 0; r < m; r++) {
		const float *xr = x + r * ldx;
		float ar = a[r];
		s0 += ar * DTMK_V16(xr);
		if (nt > 1)
			s1 += ar * DTMK_V16(xr + 16);
		if (nt > 2)
			s2 += ar * DTMK_V16(xr + 32);
		if (nt > 3)
			s3 += ar * DTMK_V16(xr + 48);
	}
	DTMK_V16(y) = s0;
	if (nt > 1)
		DTMK_V16(y + 16) = s1;
	if (nt > 2)
		DTMK_V16(y + 32) = s2;
	if (nt > 3)
		DTMK_V16(y + 48) = s3;
}

/* y[0, n) = sum over r in [0, m) of a[r] * x[r * ldx + (0, n)] for n a
 * multiple of 16: per 16 columns, four accumulators in registers over
 * the rows. */
static inline __attribute__((always_inline)) void
dtmk_rows_sum16(float *y, const float *a, const float *x, int64_t ldx, int64_t m, int64_t n)
{
	for (int64_t c = 0; c < n; c += 16) {
		DtmkV16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
		const float *xc = x + c;
		int64_t r = 0;
		for (; r + 4 <= m; r += 4) {
			s0 += a[r] * DTMK_V16(xc + r * ldx);
			s1 += a[r + 1] * DTMK_V16(xc + (r + 1) * ldx);
			s2 += a[r + 2] * DTMK_V16(xc + (r + 2) * ldx);
			s3 += a[r + 3] * DTMK_V16(xc + (r + 3) * ldx);
		}
		for (; r < m; r++)
			s0 += a[r] * DTMK_V16(xc + r * ldx);
		DTMK_V16(y + c) = (s0 + s1) + (s2 + s3);
	}
}

/* The largest of x[0, n) (-inf for n = 0).  NaNs are skipped unless they
 * come first, as with the scalar `x > m ? x : m`, which gcc leaves as a
 * scalar maxss chain (it vectorises a max reduction only under
 * -ffinite-math-only); this keeps sixteen running maxima in one vector.
 * With nan (a constant where called), NaN if any x is: the order-free
 * form of the max op's `v > acc || isnan(v)`. */
static inline __attribute__((always_inline)) float dtmk_maxf_how(const float *x, int64_t n,
								 bool nan)
{
	DtmkV16 m;
	for (int l = 0; l < 16; l++)
		m[l] = -INFINITY;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		DtmkV16 v = DTMK_V16(x + i);
		DtmkV16i take = v > m;
		if (nan)
			take |= v != v;
		m = (DtmkV16)((take & (DtmkV16i)v) | (~take & (DtmkV16i)m));
	}
	float mx = -INFINITY;
	for (; i < n; i++)
		mx = x[i] > mx || (nan && x[i] != x[i]) ? x[i] : mx;
	for (int l = 0; l < 16; l++)
		mx = m[l] > mx || (nan && m[l] != m[l]) ? m[l] : mx;
	return mx;
}

static inline __attribute__((always_inline)) float dtmk_maxf(const float *x, int64_t n)
{
	return dtmk_maxf_how(x, n, false);
}

#define DTMK_ROW_CHUNK 512

/* n values of t from element off as f32: in place when t is f32, else
 * widened into buf (the norms' backward a row at a time; the loss's row
 * kernels in chunks of DTMK_ROW_CHUNK: a 16-bit operand is never widened
 * whole). */
static inline const float *dtmk_chunk_in(const DtmkTensor *t, int64_t off, int64_t n, float *buf)
{
	if (t->dtype == DTM_F32)
		return (const float *)t->p + off;
	DtmkTensor v = dtmk_view(t, off, n);
	dtmk_widen(&v, buf);
	return buf;
}

/* n rounded up to a multiple of 16 floats (one AVX-512 vector): attention
 * works on whole tiles of keys so its loops have no remainders. */
#define DTMK_PAD16(n) (((n) + 15) & ~(int64_t)15)

/* The row stride of a key-major staging buffer of Tp (a multiple of 16)
 * columns: an odd number of 64-byte lines, so that the head dim's rows a
 * register tile reads down (64 of them at hd = 64) fall in 64 different
 * L1 sets.  At Tp = 1024 a stride of Tp is 4 KB: every row in one set,
 * 12 ways for 64 rows, and each tile's loads went to L2. */
static inline int64_t dtmk_attn_ld(int64_t Tp)
{
	return (Tp / 16) % 2 ? Tp : Tp + 16;
}

/* Attention's scratch (forward and backward) lives on the stack up to this
 * many floats; larger heads or sequences take one malloc per range call. */
#define DTMK_ATTN_STACK 4096

/* Elements per range of the emitter's fused elementwise loops: a range
 * costs about a microsecond to hand to a spinning pool thread. */
#define DTMK_EW_GRAIN 8192

/* Runs fn over [0, n) on the pool when there is one (tests call kernels
 * with a bare context).  The cut into ranges follows the thread count, so
 * fn must give the same bytes for any cut: items independent, or partial
 * sums per chunk of a size fixed by the shape (never per range), added
 * in chunk order afterwards. */
static inline void dtmk_par(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	if (n <= 0)
		return;
	if (ctx && ctx->parallel_for && n > grain)
		ctx->parallel_for(ctx, n, grain, fn, arg);
	else
		fn(arg, 0, n);
}

/* out [V, D] = the sum of dy's rows ([N, D]) by row ids[i] - off, ids
 * outside [0, V) skipped (embed's gradient, whole or a vocab shard): the
 * positions sorted by row (a stable counting sort), then the rows over
 * the pool, each one's sum in f32 in the order of its positions (the
 * serial scatter-add's order: the same bits), in column chunks widened on
 * the stack.  Was a serial loop into an f32 [V, D] staging buffer
 * (GPT-2 small in bf16: 154 MB cleared and narrowed every step). */
struct dtmk_scatter_job {
	const DtmkTensor *dy, *out;
	int64_t D;
	const int64_t *start, *pos;
};

static void dtmk_scatter_range(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_scatter_job *j = arg;
	float acc[DTMK_ROW_CHUNK], buf[DTMK_ROW_CHUNK];
	int64_t D = j->D;
	for (int64_t v = lo; v < hi; v++)
		for (int64_t c = 0; c < D; c += DTMK_ROW_CHUNK) {
			int64_t n = D - c < DTMK_ROW_CHUNK ? D - c : DTMK_ROW_CHUNK;
			bool f32 = j->out->dtype == DTM_F32;
			float *y = f32 ? (float *)j->out->p + v * D + c : acc;
			memset(y, 0, sizeof(float) * (size_t)n);
			for (int64_t k = j->start[v]; k < j->start[v + 1]; k++) {
				const float *x = dtmk_chunk_in(j->dy, j->pos[k] * D + c, n, buf);
				for (int64_t q = 0; q < n; q++)
					y[q] += x[q];
			}
			if (!f32) {
				DtmkTensor o = dtmk_view(j->out, v * D + c, n);
				dtmk_narrow(&o, acc);
			}
		}
}

static inline void dtmk_scatter_rows(const DtmCtx *ctx, const DtmkTensor *dy,
				     const DtmkTensor *ids, const DtmkTensor *out, int64_t off)
{
	int64_t V = out->shape[0], D = out->shape[1], N = ids->numel;
	int64_t *start = calloc((size_t)V + 1, sizeof *start);
	int64_t *pos = malloc(sizeof *pos * (size_t)(N > 0 ? N : 1));
	if (start && pos) {
		for (int64_t i = 0; i < N; i++) {
			int64_t r = (int64_t)dtmk_load_i32(ids, i) - off;
			if (r >= 0 && r < V)
				start[r + 1]++;
		}
		for (int64_t v = 0; v < V; v++)
			start[v + 1] += start[v];
		for (int64_t i = 0; i < N; i++) { /* start[r] ends at row r + 1's */
			int64_t r = (int64_t)dtmk_load_i32(ids, i) - off;
			if (r >= 0 && r < V)
				pos[start[r]++] = i;
		}
		for (int64_t v = V; v > 0; v--)
			start[v] = start[v - 1];
		start[0] = 0;
		struct dtmk_scatter_job j = {dy, out, D, start, pos};
		dtmk_par(ctx, V, 64, dtmk_scatter_range, &j);
	}
	free(start);
	free(pos);
}

/* The product of dims [from, to) of t. */
static inline int64_t dtmk_span(const DtmkTensor *t, int from, int to)
{
	int64_t n = 1;
	for (int d = from; d < to; d++)
		n *= t->shape[d];
	return n;
}

/* This rank's position in the group of mesh axes a->mesh_axes: mixed
 * radix over the group's axes, the lowest-numbered axis major
 * (runtime/comm.h's group order), except that the axes also set in the
 * bits from DTMK_AXES_MINOR up (attention's head_minor) come last. */
static inline int64_t dtmk_group_index(const DtmCtx *ctx, const DtmkArgs *a)
{
	uint32_t minor = a->mesh_axes >> DTMK_AXES_MINOR;
	int64_t idx = 0;
	for (uint32_t last = 0; last < 2; last++)
		for (int k = 0; k < ctx->mesh_naxes; k++)
			if ((a->mesh_axes >> k & 1) && (minor >> k & 1) == last)
				idx = idx * ctx->mesh_sizes[k] + ctx->coords[k];
	return idx;
}

/* attention's head grouping (ir/ops.def; ints = {heads, causal, kv_heads,
 * window}, mesh_axes = head_axes): *h0 = this rank's first query head,
 * *group = query heads per kv head, so query head h here reads kv head
 * (*h0 + h) / *group. */
static inline void dtmk_attn_heads(const DtmCtx *ctx, const DtmkArgs *a, int64_t *h0,
                                   int64_t *group)
{
	int64_t H = a->ints[0], G = a->nints > 2 && a->ints[2] > 0 ? a->ints[2] : H, parts = 1;
	*h0 = 0;
	if (a->mesh_axes && ctx) {
		for (int k = 0; k < ctx->mesh_naxes; k++)
			if (a->mesh_axes >> k & 1)
				parts *= ctx->mesh_sizes[k];
		*h0 = dtmk_group_index(ctx, a) * H;
	}
	*group = G > 0 && H * parts >= G ? H * parts / G : 1;
}

/* The keys [*lo, *hi) query i may attend under the causal and window
 * masks (segment ids are checked key by key). */
static inline void dtmk_attn_range(const DtmkArgs *a, int64_t i, int64_t Tk, int64_t *lo,
                                   int64_t *hi)
{
	int64_t W = a->nints > 3 ? a->ints[3] : 0;
	*hi = a->ints[1] ? (i + 1 < Tk ? i + 1 : Tk) : Tk;
	*lo = 0;
	if (W > 0) {
		*lo = i - W + 1 > 0 ? i - W + 1 : 0;
		if (i + W < *hi)
			*hi = i + W;
	}
	if (*lo > *hi)
		*lo = *hi;
}

/* Where a block's rows sit in the whole sequence: ring attention's query
 * and key blocks (dtmk_ring.h).  Row i is at off + i, or when balanced
 * (half > 0: the block is two chunks of half rows) rows [half, 2 half) at
 * off2 + i - half.  Keys at or past len (> 0: a padded, uneven block's
 * tail) are seen by no query.  The attention kernels take NULL: row i at
 * i. */
typedef struct DtmkAttnPos {
	int64_t qoff, qoff2, koff, koff2, half, len;
} DtmkAttnPos;

static inline int64_t dtmk_attn_at(int64_t half, int64_t i, int64_t off, int64_t off2)
{
	return half && i >= half ? off2 + (i - half) : off + i;
}

/* The keys of a chunk of n rows at global koff (local lbase ..) that a
 * query at global gi sees, [*lo, *hi) in local indices (empty: lo = hi):
 * causal gk <= gi, a window W > 0 |gi - gk| < W. */
static inline void dtmk_attn_chunk(int64_t gi, int64_t koff, int64_t lbase, int64_t n, int causal,
                                   int64_t W, int64_t *lo, int64_t *hi)
{
	int64_t l = W > 0 ? gi - W + 1 - koff : 0;
	int64_t h = causal ? gi + 1 - koff : W > 0 ? gi + W - koff : n;
	l = l < 0 ? 0 : l > n ? n : l;
	h = h < l ? l : h > n ? n : h;
	*lo = lbase + l;
	*hi = lbase + h;
}

/* How many of a chunk's n keys at global koff are real: those before
 * pos->len (the rest pad an uneven block). */
static inline int64_t dtmk_attn_real(const DtmkAttnPos *pos, int64_t koff, int64_t n)
{
	int64_t r = pos->len > 0 ? pos->len - koff : n;
	return r < 0 ? 0 : r < n ? r : n;
}

/* dtmk_attn_range for a block at pos (NULL: dtmk_attn_range itself):
 * query row i's keys as one range [lo, hi) of the Tk keys; false when
 * they are two (a window over balanced chunks), which the block kernels
 * do not take. */
static inline bool dtmk_attn_range_pos(const DtmkArgs *a, const DtmkAttnPos *pos, int64_t i,
                                       int64_t Tk, int64_t *lo, int64_t *hi)
{
	if (!pos) {
		dtmk_attn_range(a, i, Tk, lo, hi);
		return true;
	}
	int causal = a->ints[1] != 0;
	int64_t W = a->nints > 3 ? a->ints[3] : 0;
	int64_t gi = dtmk_attn_at(pos->half, i, pos->qoff, pos->qoff2);
	if (!pos->half) {
		dtmk_attn_chunk(gi, pos->koff, 0, dtmk_attn_real(pos, pos->koff, Tk), causal, W, lo,
		                hi);
		return true;
	}
	int64_t l1, h1, l2, h2;
	dtmk_attn_chunk(gi, pos->koff, 0, dtmk_attn_real(pos, pos->koff, pos->half), causal, W, &l1,
	                &h1);
	dtmk_attn_chunk(gi, pos->koff2, pos->half, dtmk_attn_real(pos, pos->koff2, Tk - pos->half),
	                causal, W, &l2, &h2);
	*lo = l1 < h1 ? l1 : l2 < h2 ? l2 : 0;
	*hi = l2 < h2 ? h2 : l1 < h1 ? h1 : 0;
	return l1 == h1 || l2 == h2 || (h1 == pos->half && l2 == pos->half);
}

/* ---- attention in blocks of 8 query rows ----
 *
 * A query row at a time reads every key and value once per row (a GEMV:
 * ~26 GFLOP/s a thread here, against 130-150 for sgemm).  Blocks of query
 * rows hold 4 x 64 scores (dtmk_rows8_scores: two tiles per block) and 8 x 32
 * outputs (dtmk_rows8_pv) in registers and read each key and value vector
 * once per block: the same arithmetic per score (over the head dim, in
 * order) and per output (over the keys, in order), with a fraction of the
 * loads.  For head sizes that are multiples of 16; the rest take the row
 * kernels. */
#define DTMK_AR 8 /* query rows per block: dtmk_rows8_scores */

/* DTMK_IN_REG(x): x kept in a register (with AVX-512: the 16-float vector
 * is one register there): a vector loaded once and used by several FMAs
 * is otherwise folded by gcc into each FMA as a memory operand (the
 * score tile's k: 16 loads per head-dim step instead of 4, and the tile
 * load-bound, ~25% of the f32 forward's time). */
#ifdef __AVX512F__
#define DTMK_IN_REG(x)                         \
	({                                     \
		DtmkV16 in_reg_ = (x);         \
		__asm__("" : "+v"(in_reg_));   \
		in_reg_;                       \
	})
#else
#define DTMK_IN_REG(x) (x)
#endif

/* One register tile of scores: S[r * ls + t + (0, 16 nv)] = sum over c
 * in [0, hd) of q[r * lq + c] * kt[c * ldk + t + (0, 16 nv)] for the 4
 * rows r; nv (1, 2 or 4 vectors) is a constant where it is called, so
 * (with the loops over rows and vectors unrolled: gcc's own heuristics
 * left them rolled, 5% slower) the 4 x nv accumulators stay in registers. */
static inline __attribute__((always_inline)) void
dtmk_scores_tile(float *S, int64_t ls, const float *q, int64_t lq, const float *kt, int64_t ldk,
		 int64_t hd, int64_t t, int nv)
{
	DtmkV16 a[4][4];
	_Pragma("GCC unroll 8")
	for (int r = 0; r < 4; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			a[r][v] = (DtmkV16){ 0 };
	for (int64_t c = 0; c < hd; c++) {
		DtmkV16 k[4];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++) {
			k[v] = DTMK_IN_REG(DTMK_V16(kt + c * ldk + t + 16 * v));
		}
		_Pragma("GCC unroll 8")
		for (int r = 0; r < 4; r++) {
			float qr = q[r * lq + c];
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				a[r][v] += qr * k[v];
		}
	}
	_Pragma("GCC unroll 8")
	for (int r = 0; r < 4; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			DTMK_V16(S + r * ls + t + 16 * v) = a[r][v];
}

/* S[r * ls + (0, np)] for the 8 rows, np a multiple of 16: tiles of 64
 * keys, then of 32 and 16 (fewer accumulators: latency-bound, so only for
 * the rest), each tile for both halves of the rows before the next, so
 * the second reads kt's tile (64 hd-rows of 256 bytes: 16 KB at hd = 64)
 * from L1 (with dtmk_attn_ld's stride), not again from L2. */
static inline __attribute__((always_inline)) void
dtmk_rows8_scores(float *S, int64_t ls, const float *q, int64_t lq, const float *kt, int64_t ldk,
		  int64_t hd, int64_t np)
{
	int64_t t = 0;
	for (; t + 64 <= np; t += 64)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 4);
	for (; t + 32 <= np; t += 32)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 2);
	for (; t < np; t += 16)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 1);
}

/* One register tile of outputs: O[r * lo + c + (0, 16 nv)] = sum over t
 * in [t0, t1), in order, of P[r * lp + t] * x[t * ldx + c + (0, 16 nv)]
 * for the R rows r; R (4 or 8) and nv (1 or 2) constants where called. */
static inline __attribute__((always_inline)) void
dtmk_pv_tile(float *O, int64_t lo, const float *P, int64_t lp, const float *x, int64_t ldx,
	     int64_t t0, int64_t t1, int64_t c, int R, int nv)
{
	DtmkV16 a[8][2];
	_Pragma("GCC unroll 8")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			a[r][v] = (DtmkV16){ 0 };
	for (int64_t t = t0; t < t1; t++) {
		DtmkV16 xv[2];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			xv[v] = DTMK_V16(x + t * ldx + c + 16 * v);
		_Pragma("GCC unroll 8")
		for (int r = 0; r < R; r++) {
			float pr = P[r * lp + t];
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				a[r][v] += pr * xv[v];
		}
	}
	_Pragma("GCC unroll 8")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			DTMK_V16(O + r * lo + c + 16 * v) = a[r][v];
}

/* O[r * lo + (0, n)] = sum over t in [t0, t1) of P[r * lp + t] *
 * x[t * ldx + (0, n)], for the 8 rows r, n a multiple of 16: 8 x 32
 * outputs in registers, each x vector loaded once per 8 rows; a last 16
 * columns as two tiles of 4 rows. */
static inline __attribute__((always_inline)) void
dtmk_rows8_pv(float *O, int64_t lo, const float *P, int64_t lp, const float *x, int64_t ldx,
	      int64_t t0, int64_t t1, int64_t n)
{
	int64_t c = 0;
	for (; c + 32 <= n; c += 32)
		dtmk_pv_tile(O, lo, P, lp, x, ldx, t0, t1, c, 8, 2);
	if (c < n) {
		dtmk_pv_tile(O, lo, P, lp, x, ldx, t0, t1, c, 4, 1);
		dtmk_pv_tile(O + 4 * lo, lo, P + 4 * lp, lp, x, ldx, t0, t1, c, 4, 1);
	}
}

/* Row r of a block: masks row i's scores S[0, np) (keys outside [lo, nk),
 * other segments) and exponentiates them; with norm, divides them by their
 * sum (probabilities), else leaves that to the caller (*inv = 1 / sum).
 * False when the row attends nothing (its scores are then zeros). */
static inline __attribute__((always_inline)) bool
dtmk_attn_softmax_row(float *S, int64_t np, int64_t lo, int64_t nk, const DtmkTensor *seg,
		      int64_t segrow, int32_t si, bool norm, float *invp)
{
	for (int64_t t = 0; t < lo; t++)
		S[t] = -INFINITY;
	for (int64_t t = nk; t < np; t++)
		S[t] = -INFINITY;
	for (int64_t t = lo; seg && t < nk; t++)
		if (dtmk_load_i32(seg, segrow + t) != si)
			S[t] = -INFINITY;
	float mx = dtmk_maxf(S, np);
	if (mx == -INFINITY) {
		memset(S, 0, sizeof(float) * (size_t)np);
		return false;
	}
	float sum = 0;
	for (int64_t t = 0; t < np; t++) {
		S[t] = dtmk_expf(S[t] - mx);
		sum += S[t];
	}
	float inv = 1.0f / sum;
	*invp = inv;
	if (norm)
		for (int64_t t = 0; t < nk; t++)
			S[t] *= inv;
	return true;
}

/* Keys per tile of the forward's online softmax: a block's 8 rows of
 * scores are held for DTMK_ATTN_KT keys at a time (16 KB, in L1), not for
 * the whole key range (T = 8192: 256 KB). */
#define DTMK_ATTN_KT 512

/* The scores' row length in a block (DTMK_ATTN_KT keys, or fewer). */
static inline int64_t dtmk_attn_st(int64_t Tp)
{
	return Tp < DTMK_ATTN_KT ? Tp : DTMK_ATTN_KT;
}

/* One step of the online softmax (FlashAttention's) for one row: s[0, w)
 * are its scores against keys [t0, t0 + w); keys outside [lo, nk) and of
 * other segments are masked, the rest exponentiated against the running
 * max *m (raised to the tile's) and their sum added to *l, which is first
 * rescaled by exp(old max - new max).  Returns that factor, by which the
 * caller rescales the row's running output before adding this tile's
 * (0 while no key was seen; 1 for a tile with none of the row's keys, whose
 * s is then zeros).  With a single tile this is dtmk_attn_softmax_row's
 * arithmetic exactly. */
static inline __attribute__((always_inline)) float
dtmk_attn_online_tile(float *S, int64_t t0, int64_t w, int64_t lo, int64_t nk,
		      const DtmkTensor *seg, int64_t segrow, int32_t si, float *m, float *l)
{
	int64_t a = lo - t0 < 0 ? 0 : lo - t0 < w ? lo - t0 : w;
	int64_t e = nk - t0 < a ? a : nk - t0 < w ? nk - t0 : w;
	for (int64_t t = 0; t < a; t++)
		S[t] = -INFINITY;
	for (int64_t t = e; t < w; t++)
		S[t] = -INFINITY;
	for (int64_t t = a; seg && t < e; t++)
		if (dtmk_load_i32(seg, segrow + t0 + t) != si)
			S[t] = -INFINITY;
	float mt = dtmk_maxf(S, w);
	if (mt == -INFINITY) {
		memset(S, 0, sizeof(float) * (size_t)w);
		return 1.0f;
	}
	float mn = mt > *m ? mt : *m, alpha = dtmk_expf(*m - mn), sum = 0;
	for (int64_t t = 0; t < w; t++) {
		S[t] = dtmk_expf(S[t] - mn);
		sum += S[t];
	}
	*l = *l * alpha + sum;
	*m = mn;
	return alpha;
}

/* A block's rows over one key tile (scores S, rows St apart, keys [t0, t0
 * + w)): each live row's online-softmax step (al[r] its output's rescale
 * factor), a dead row's scores zeroed. */
static inline __attribute__((always_inline)) void
dtmk_attn_block_tile(float *S, int64_t St, int64_t t0, int64_t w, const int64_t *lo,
		     const int64_t *nk, const DtmkTensor *seg, int64_t segrow, const int32_t *si,
		     const bool *live, float *m, float *l, float *al)
{
	for (int r = 0; r < DTMK_AR; r++) {
		al[r] = 1.0f;
		if (live[r])
			al[r] = dtmk_attn_online_tile(S + r * St, t0, w, lo[r], nk[r], seg, segrow,
						      si[r], &m[r], &l[r]);
		else
			memset(S + r * St, 0, sizeof(float) * (size_t)w);
	}
}

/* A block's online-softmax state before its first tile: no max, no sum,
 * a zero running output (rows hv apart). */
static inline __attribute__((always_inline)) void
dtmk_attn_block_start(float *ob, float *m, float *l, int64_t hv)
{
	for (int r = 0; r < DTMK_AR; r++)
		m[r] = -INFINITY, l[r] = 0;
	memset(ob, 0, sizeof(float) * (size_t)(DTMK_AR * hv));
}

/* The block's running output ob (rows hv apart) rescaled and the tile's
 * weighted sum pv added; at the end (ob, m, l then final), divided by the
 * rows' sums, and a row that saw no key marked dead. */
static inline __attribute__((always_inline)) void
dtmk_attn_block_acc(float *restrict ob, const float *restrict pv, const float *al, int64_t hv)
{
	for (int r = 0; r < DTMK_AR; r++)
		for (int64_t c = 0; c < hv; c++)
			ob[r * hv + c] = ob[r * hv + c] * al[r] + pv[r * hv + c];
}

static inline __attribute__((always_inline)) void
dtmk_attn_block_finish(float *ob, const float *m, const float *l, bool *live, int64_t hv)
{
	for (int r = 0; r < DTMK_AR; r++) {
		live[r] = live[r] && m[r] != -INFINITY;
		float inv = live[r] ? 1.0f / l[r] : 0.0f;
		for (int64_t c = 0; live[r] && c < hv; c++)
			ob[r * hv + c] *= inv;
	}
}

/* Rows i0 .. i0 + DTMK_AR - 1 of a block of query rows (of Tq, keys Tk,
 * batch b; at pos, NULL: their indices): each row's keys [lo, nk),
 * segment si (seg: the queries' ids) and whether it attends anything
 * (live); over the live rows the least lo and greatest nk in *kmin and
 * *kmax (Tk and 0 when no row is live). */
static inline __attribute__((always_inline)) void
dtmk_attn_block_rows(const DtmkArgs *a, const DtmkAttnPos *pos, const DtmkTensor *seg, int64_t b,
		     int64_t i0, int64_t Tq, int64_t Tk, int64_t *lo, int64_t *nk, int32_t *si,
		     bool *live, int64_t *kmin, int64_t *kmax)
{
	*kmin = Tk;
	*kmax = 0;
	for (int r = 0; r < DTMK_AR; r++) {
		int64_t i = i0 + r;
		lo[r] = nk[r] = 0;
		si[r] = 0;
		live[r] = false;
		if (i < Tq) {
			dtmk_attn_range_pos(a, pos, i, Tk, &lo[r], &nk[r]);
			si[r] = seg ? dtmk_load_i32(seg, b * Tq + i) : 0;
			live[r] = nk[r] > lo[r] && si[r] >= 0;
		}
		if (live[r]) {
			*kmin = lo[r] < *kmin ? lo[r] : *kmin;
			*kmax = nk[r] > *kmax ? nk[r] : *kmax;
		}
	}
}

/* ---- attention's products on bf16 operands (AVX512-BF16) ----
 *
 * With bf16 q, k, v (`precision bf16`) the products run as vdpbf16ps:
 * bf16 x bf16 products summed in pairs into f32 accumulators, twice the
 * multiply-adds of an f32 FMA per instruction and half the bytes loaded.
 * q.k and dy.v take the inputs' bf16 values as they are, so those sums
 * equal f32 ones up to order; the probabilities P and the score gradients
 * dS are rounded to bf16 for their products (P v, dS k, dS^T q, P^T dy) as
 * FlashAttention and PyTorch's autocast do on GPUs.  An operand word holds
 * two bf16 values that a product sums over, the first in the low half. */
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define DTMK_ATTN_BF16 1

/* The 32-bit word of bf16 values lo, hi (a product's pair). */
static inline uint32_t dtmk_bf16_word(uint16_t lo, uint16_t hi)
{
	return (uint32_t)lo | (uint32_t)hi << 16;
}

/* The word at bf16 element i of p (i even): elements i and i + 1. */
static inline uint32_t dtmk_bf16_word_at(const uint16_t *p, int64_t i)
{
	uint32_t w;
	memcpy(&w, p + i, sizeof w);
	return w;
}

/* x[0, n) as bf16 (n a multiple of 16, rounding to nearest even). */
static inline void dtmk_bf16_row(uint16_t *restrict y, const float *restrict x, int64_t n)
{
	for (int64_t i = 0; i < n; i += 16)
		_mm256_storeu_si256((__m256i *)(y + i),
				    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
}

/* One register tile of scores: S[r * ls + t + (0, 16 nv)] = scale * sum
 * over c in [0, hd) of q[r * lq + c] * k[t + (0, 16 nv)][c] for the 4
 * rows r, q in bf16 rows, k as words kt[c/2 * ldk + t] (keys' pairs of
 * the head dim, dtmk_scores_tile's layout in words). */
static inline __attribute__((always_inline)) void
dtmk_scores_tile_bf16(float *S, int64_t ls, const uint16_t *q, int64_t lq, const uint32_t *kt,
		      int64_t ldk, int64_t hd, int64_t t, int nv, float scale)
{
	__m512 a[4][4];
	_Pragma("GCC unroll 8")
	for (int r = 0; r < 4; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			a[r][v] = _mm512_setzero_ps();
	for (int64_t c = 0; c < hd; c += 2) {
		__m512bh k[4];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			k[v] = (__m512bh)_mm512_loadu_si512(kt + c / 2 * ldk + t + 16 * v);
		_Pragma("GCC unroll 8")
		for (int r = 0; r < 4; r++) {
			uint32_t qw = dtmk_bf16_word_at(q + r * lq, c);
			__m512bh qr = (__m512bh)_mm512_set1_epi32((int)qw);
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				a[r][v] = _mm512_dpbf16_ps(a[r][v], qr, k[v]);
		}
	}
	__m512 sc = _mm512_set1_ps(scale);
	_Pragma("GCC unroll 8")
	for (int r = 0; r < 4; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			_mm512_storeu_ps(S + r * ls + t + 16 * v, _mm512_mul_ps(a[r][v], sc));
}

/* dtmk_rows8_scores on bf16 operands (hd even, np a multiple of 16). */
static inline __attribute__((always_inline)) void
dtmk_rows8_scores_bf16(float *S, int64_t ls, const uint16_t *q, int64_t lq, const uint32_t *kt,
		       int64_t ldk, int64_t hd, int64_t np, float scale)
{
	int64_t t = 0;
	for (; t + 64 <= np; t += 64)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile_bf16(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 4,
					      scale);
	for (; t + 32 <= np; t += 32)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile_bf16(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 2,
					      scale);
	for (; t < np; t += 16)
		for (int r = 0; r < 8; r += 4)
			dtmk_scores_tile_bf16(S + r * ls, ls, q + r * lq, lq, kt, ldk, hd, t, 1,
					      scale);
}

/* One register tile of outputs: O[r * lo + c + (0, 16 nv)] = sum over t
 * in [t0, t1) (both even) of P[r * lp + t] * x[t][c + (0, 16 nv)], P in
 * bf16 rows, x as words xp[t/2 * ldx + c] (pairs of keys per column). */
static inline __attribute__((always_inline)) void
dtmk_pv_tile_bf16(float *O, int64_t lo, const uint16_t *P, int64_t lp, const uint32_t *xp,
		  int64_t ldx, int64_t t0, int64_t t1, int64_t c, int R, int nv)
{
	__m512 a[8][2];
	_Pragma("GCC unroll 8")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			a[r][v] = _mm512_setzero_ps();
	for (int64_t t = t0; t < t1; t += 2) {
		__m512bh xv[2];
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			xv[v] = (__m512bh)_mm512_loadu_si512(xp + t / 2 * ldx + c + 16 * v);
		_Pragma("GCC unroll 8")
		for (int r = 0; r < R; r++) {
			uint32_t pw = dtmk_bf16_word_at(P + r * lp, t);
			__m512bh pr = (__m512bh)_mm512_set1_epi32((int)pw);
			_Pragma("GCC unroll 4")
			for (int v = 0; v < nv; v++)
				a[r][v] = _mm512_dpbf16_ps(a[r][v], pr, xv[v]);
		}
	}
	_Pragma("GCC unroll 8")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int v = 0; v < nv; v++)
			_mm512_storeu_ps(O + r * lo + c + 16 * v, a[r][v]);
}

/* dtmk_rows8_pv on bf16 operands: 8 rows, n a multiple of 16. */
static inline __attribute__((always_inline)) void
dtmk_rows8_pv_bf16(float *O, int64_t lo, const uint16_t *P, int64_t lp, const uint32_t *xp,
		   int64_t ldx, int64_t t0, int64_t t1, int64_t n)
{
	int64_t c = 0;
	for (; c + 32 <= n; c += 32)
		dtmk_pv_tile_bf16(O, lo, P, lp, xp, ldx, t0, t1, c, 8, 2);
	if (c < n) {
		dtmk_pv_tile_bf16(O, lo, P, lp, xp, ldx, t0, t1, c, 4, 1);
		dtmk_pv_tile_bf16(O + 4 * lo, lo, P + 4 * lp, lp, xp, ldx, t0, t1, c, 4, 1);
	}
}
#endif

/* Whether attention on q, k, v takes the bf16 products (the CPU has
 * AVX512-BF16, the operands are bf16, head sizes multiples of 16). */
static inline bool dtmk_attn_bf16(const DtmkTensor *q, const DtmkTensor *k, const DtmkTensor *v,
				  int64_t hd, int64_t hv)
{
#ifdef DTMK_ATTN_BF16
	return q->dtype == DTM_BF16 && k->dtype == DTM_BF16 && v->dtype == DTM_BF16 &&
	       hd % 16 == 0 && hv % 16 == 0;
#else
	(void)q, (void)k, (void)v, (void)hd, (void)hv;
	return false;
#endif
}

#endif
