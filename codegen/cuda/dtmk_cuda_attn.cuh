/* dtmk_cuda_attn.cuh - fused attention, forward and backward, in the
 * flash-attention manner (see dtmk_cuda.cuh for the conventions), and
 * ring attention's block ops (ir/ops.def: attn_block, attn_merge,
 * attn_block_bwd), which are the same loops with other positions.
 *
 * q is [B, T, D] with H heads of HD = D / H columns, k and v [B, T, Dk]
 * with Dk / HD heads, never repeated: query head h reads kv head
 * (h0 + h) / g (grouped-query: g query heads per kv head; h0 is this
 * rank's first query head when the query heads are split over tp and k, v
 * kept whole, else 0).  Scores are scaled by 1/sqrt(HD) and masked as
 * ir/ops.def says (DtmcAttn): causal and window compare global positions,
 * segment ids local rows; a query that sees no key outputs 0.  Blocks of
 * 128 threads: each row (a query, or a key in the backward's dk/dv items)
 * is held by P neighbouring threads, each owning C = HD / P of its columns
 * (interleaved: column c * P + p, so the P threads read neighbouring
 * shared-memory words), and dot products meet by shuffles.  R = 128 / P
 * rows per block; the other side streams through shared memory in tiles
 * of BK rows (f32, converted once on load), so the T x T score matrix is
 * never stored.
 *
 * Forward: one block per (batch, head, tile of R queries), the causal
 * heaviest tiles first; an online softmax (running max m, sum l, output
 * rescaled once per key tile).  attn_block is the forward with its
 * log-sum-exp m + log l written after the output's D columns.
 *
 * With attn.lse (pass attn_stats) the forward also writes each row's
 * log-sum-exp, f32 [B, H, T], after its output's B T D elements.
 *
 * Backward, one launch in two phases (dtmk_cuda.cuh's tickets):
 *   0. per query tile: the row statistics L = m + log l (logsumexp of the
 *      scaled scores) and Dr = sum_j P_ij dP_ij = dy_i . o_i, into a
 *      scratch array [B, H, T, 2] (attn_block_bwd reads both off the
 *      merged output and log-sum-exp it is given, attention_bwd with
 *      attn.lse off its forward's output and log-sum-exps);
 *   1. per query tile: dq_i = scale * sum_j dS_ij k_j; and per key tile:
 *      dv_j = sum_i P_ij dy_i, dk_j = scale * sum_i dS_ij q_i; with
 *      P_ij = exp(s_ij - L_i), dP_ij = dy_i . v_j, dS = P (dP - Dr).
 * Every output element is written once, by one thread: no atomics, and
 * the result does not depend on timing.  The output is [3, B, T, D]:
 * dq, dk, dv, dk and dv per query head (autodiff sums each group's).
 */

#define DTMC_ATTN_THREADS 128

/* int min and max (CUDA's overloads are not in the host emulator). */
__device__ __forceinline__ int dtmc_imin(int a, int b)
{
	return a < b ? a : b;
}

__device__ __forceinline__ int dtmc_imax(int a, int b)
{
	return a > b ? a : b;
}

/* The global position of local row r: r + o0 for r < c, else r + o1 (a
 * balanced ring block is two chunks of c rows; otherwise c = T). */
struct DtmcAttnPos {
	int c, o0, o1;
};

/* One attention's shapes and mask, as the emitter writes them. */
struct DtmcAttn {
	int B, T, H;
	int D, Dk, Dy;    /* row widths: q (dy, dq, dk, dv), k and v, the output */
	int g, h0;        /* query heads per kv head; this rank's first query head */
	float scale;      /* 1 / sqrt(HD) */
	int window;       /* keys within window positions of the query; 0: all */
	const int *seg;   /* the query rows' segment ids [B, T], or null */
	const int *kseg;  /* the key rows' (seg, but for a ring block's) */
	DtmcAttnPos q, k; /* where the query and key rows are */
	int lse;          /* attn.lse: the forward's log-sum-exps after its output */
	int len;          /* attn.seq: keys at or past it pad an uneven ring block; 0: none */
};

__device__ __forceinline__ int dtmc_attn_pos(const DtmcAttnPos &p, int r)
{
	return r + (r < p.c ? p.o0 : p.o1);
}

/* Ring block blk of n (the rank's, or the key block step places before
 * it) of T rows: rows [blk T, blk T + T), or balanced, chunks blk and
 * 2n - 1 - blk of c = T / 2 rows (each rank a light and a heavy chunk of
 * the causal triangle). */
__device__ __forceinline__ DtmcAttnPos dtmc_attn_ring_pos(int blk, int n, int T_, bool balanced)
{
	if (!balanced)
		return DtmcAttnPos{T_, blk * T_, blk * T_};
	int c = T_ / 2;
	return DtmcAttnPos{c, 2 * blk * c, (2 * n - 1 - 2 * blk) * c - c};
}

/* Row r's segment id in ids (a.seg: query rows; a.kseg: key rows), 0
 * without ids. */
__device__ __forceinline__ int dtmc_attn_seg(const DtmcAttn &a, const int *ids, int b, int r)
{
	return ids ? ids[(dtmc_i64)b * a.T + r] : 0;
}

/* Whether query row i (segment si) sees key row j (segment sj). */
template <bool CAUSAL>
__device__ __forceinline__ bool dtmc_attn_sees(const DtmcAttn &a, int i, int j, int si, int sj)
{
	int gi = dtmc_attn_pos(a.q, i), gj = dtmc_attn_pos(a.k, j);
	if ((a.len > 0 && gj >= a.len) || (CAUSAL && gj > gi))
		return false;
	if (a.window && (gi - gj >= a.window || gj - gi >= a.window))
		return false;
	return !a.seg || (si >= 0 && si == sj);
}

/* Whether rows are one run each (positions row + offset): then the
 * causal and window masks bound the rows worth visiting. */
__device__ __forceinline__ bool dtmc_attn_affine(const DtmcAttn &a)
{
	return a.q.c >= a.T && a.k.c >= a.T;
}

/* The keys [*lo, *hi) query rows [i0, i1] may see (all, unless affine). */
template <bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_keys(const DtmcAttn &a, int i0, int i1, int *lo, int *hi)
{
	*lo = 0;
	*hi = a.T;
	if (!dtmc_attn_affine(a))
		return;
	int d = a.q.o0 - a.k.o0; /* query row i is at key row i + d */
	if (a.len > 0)
		*hi = dtmc_imin(*hi, a.len - a.k.o0);
	if (CAUSAL)
		*hi = dtmc_imin(*hi, i1 + d + 1);
	if (a.window) {
		*lo = dtmc_imax(0, i0 + d - a.window + 1);
		*hi = dtmc_imin(*hi, i1 + d + a.window);
	}
	*lo = dtmc_imin(*lo, dtmc_imax(*hi, 0));
	*hi = dtmc_imax(*hi, *lo);
}

/* The queries [*lo, *hi) that may see key rows [j0, j1]. */
template <bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_queries(const DtmcAttn &a, int j0, int j1, int *lo,
                                                  int *hi)
{
	*lo = 0;
	*hi = a.T;
	if (!dtmc_attn_affine(a))
		return;
	int d = a.q.o0 - a.k.o0;
	if (CAUSAL)
		*lo = dtmc_imax(0, j0 - d);
	if (a.window) {
		*lo = dtmc_imax(*lo, j0 - d - a.window + 1);
		*hi = dtmc_imin(*hi, j1 - d + a.window);
	}
	*lo = dtmc_imin(*lo, dtmc_imax(*hi, 0));
	*hi = dtmc_imax(*hi, *lo);
}

/* Loads rows [r0, r0 + n) of head h's columns of x (batch b, rows of D)
 * into dst[n][HD] as f32 times mul, zero past T. */
template <int HD, typename T>
__device__ __forceinline__ void dtmc_attn_tile(float *dst, const T *x, int n, int r0, int b, int h,
                                               int T_, int D, float mul)
{
	for (int e = threadIdx.x; e < n * HD; e += DTMC_ATTN_THREADS) {
		int j = e / HD, col = e % HD, row = r0 + j;
		dst[e] = row < T_ ? dtmc_ld(x,
		                            ((dtmc_i64)b * T_ + row) * D + (dtmc_i64)h * HD + col) *
		                            mul
		                  : 0.0f;
	}
}

/* The segment ids (ids: a.seg or a.kseg) of rows [r0, r0 + n) (batch b)
 * into dst, -1 past T. */
__device__ __forceinline__ void dtmc_attn_seg_tile(int *dst, const int *ids, const DtmcAttn &a,
                                                   int n, int r0, int b)
{
	for (int e = threadIdx.x; ids && e < n; e += DTMC_ATTN_THREADS)
		dst[e] = r0 + e < a.T ? ids[(dtmc_i64)b * a.T + r0 + e] : -1;
}

/* The dot product of a row's registers with shared row j, summed over
 * the row's P threads. */
template <int HD, int P>
__device__ __forceinline__ float dtmc_attn_dot(const float *reg, const float *tile, int j, int p)
{
	constexpr int C = HD / P;
	float t = 0;
#pragma unroll
	for (int c = 0; c < C; c++)
		t += reg[c] * tile[j * HD + c * P + p];
#pragma unroll
	for (int o = P / 2; o; o >>= 1)
		t += __shfl_xor_sync(0xffffffffu, t, o);
	return t;
}

/* The offset of row t of head h (batch b) in a [B, T, D] tensor. */
template <int HD>
__device__ __forceinline__ dtmc_i64 dtmc_attn_row(int b, int t, int h, int T_, int D)
{
	return ((dtmc_i64)b * T_ + t) * D + (dtmc_i64)h * HD;
}

/* A row's C = HD / P columns of this thread (p of the row's P) into
 * registers, times mul; and back, times mul. */
template <int HD, int P, typename T>
__device__ __forceinline__ void dtmc_attn_ld_row(float *reg, const T *x, dtmc_i64 row, int p,
                                                 float mul)
{
#pragma unroll
	for (int c = 0; c < HD / P; c++)
		reg[c] = dtmc_ld(x, row + c * P + p) * mul;
}

template <int HD, int P, typename T>
__device__ __forceinline__ void dtmc_attn_st_row(T *x, dtmc_i64 row, int p, const float *reg,
                                                 float mul)
{
#pragma unroll
	for (int c = 0; c < HD / P; c++)
		dtmc_st(x, row + c * P + p, reg[c] * mul);
}

/* Keys and values of rows [k0, k0 + BK) of kv head kh, and their segment
 * ids, into the shared tiles ks, vs and ss, once every thread is done
 * with the previous ones. */
template <int HD, int BK, typename T>
__device__ __forceinline__ void dtmc_attn_kv(float *ks, float *vs, int *ss, const T *k, const T *v,
                                             const DtmcAttn &a, int k0, int b, int kh)
{
	__syncthreads();
	dtmc_attn_tile<HD>(ks, k, BK, k0, b, kh, a.T, a.Dk, 1.0f);
	dtmc_attn_tile<HD>(vs, v, BK, k0, b, kh, a.T, a.Dk, 1.0f);
	dtmc_attn_seg_tile(ss, a.kseg, a, BK, k0, b);
	__syncthreads();
}

/* The online softmax's reference for a running max mn: 0 while no key
 * is seen (mn = -inf), so exp(s - ref) is 0 for masked keys, never NaN. */
__device__ __forceinline__ float dtmc_attn_ref(float mn)
{
	return mn == -DTMC_INF ? 0.0f : mn;
}

/* attention(q, k, v[, seg]) -> y [B, T, D]; or attn_block -> y [B, T, D
 * + H], the log-sum-exp of head h in column D + h (-inf where the row
 * sees no key), when a.Dy > a.D.  Shared memory: 2 * BK * HD + BK
 * floats. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_fwd(const T *q, const T *k, const T *v, TO *y, DtmcAttn a)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int *ss = (int *)(vs + BK * HD);
	int T_ = a.T, nqt = (T_ + R - 1) / R;
	int bh = blockIdx.x / nqt, qt = nqt - 1 - (int)(blockIdx.x % nqt);
	int b = bh / a.H, h = bh % a.H, kh = (a.h0 + h) / a.g;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1; /* rows past T compute row T-1, unstored */
	int si = dtmc_attn_seg(a, a.seg, b, iv);
	float qv[C], acc[C] = {};
	dtmc_attn_ld_row<HD, P>(qv, q, dtmc_attn_row<HD>(b, iv, h, T_, a.D), p, a.scale);
	float m = -DTMC_INF, l = 0;
	int lo, hi;
	dtmc_attn_keys<CAUSAL>(a, qt * R, dtmc_imin(qt * R + R, T_) - 1, &lo, &hi);
	for (int k0 = lo; k0 < hi; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, ss, k, v, a, k0, b, kh);
		float s[BK], mt = -DTMC_INF;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			bool ok = k0 + j < hi && dtmc_attn_sees<CAUSAL>(a, iv, k0 + j, si, ss[j]);
			s[j] = ok ? t : -DTMC_INF;
			mt = fmaxf(mt, s[j]);
		}
		float mn = fmaxf(m, mt), ref = dtmc_attn_ref(mn), corr = expf(m - ref);
		l *= corr;
#pragma unroll
		for (int c = 0; c < C; c++)
			acc[c] *= corr;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float pj = expf(s[j] - ref);
			l += pj;
#pragma unroll
			for (int c = 0; c < C; c++)
				acc[c] += pj * vs[j * HD + c * P + p];
		}
		m = mn;
	}
	if (i >= T_)
		return;
	dtmc_attn_st_row<HD, P>(y, dtmc_attn_row<HD>(b, i, h, T_, a.Dy), p, acc,
	                        l > 0 ? 1.0f / l : 0.0f);
	if (a.Dy > a.D && p == 0)
		dtmc_st(y, ((dtmc_i64)b * T_ + i) * a.Dy + a.D + h,
		        l > 0 ? m + logf(l) : -DTMC_INF);
	if (a.lse && p == 0) /* after the output (attention: Dy = D) */
		((float *)(y + (dtmc_i64)a.B * T_ * a.Dy))[((dtmc_i64)b * a.H + h) * T_ + i] =
		        l > 0 ? m + logf(l) : -DTMC_INF;
}

/* A row's statistics into stats [B, H, T, 2]: L = +inf where it sees
 * nothing, so every P_ij is 0, and Dr finite, so dS is 0 too. */
__device__ __forceinline__ void dtmc_attn_put_stats(float *stats, const DtmcAttn &a, int b, int h,
                                                    int i, float L, float Dr)
{
	dtmc_i64 o = (((dtmc_i64)b * a.H + h) * a.T + i) * 2;
	stats[o] = L == -DTMC_INF ? DTMC_INF : L;
	stats[o + 1] = L == -DTMC_INF ? 0.0f : Dr;
}

/* Phase 0 item: L and Dr of query tile qt of head (b, h). */
template <typename T, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_stats(const T *dy, const T *q, const T *k, const T *v,
                                                float *stats, const DtmcAttn &a, int b, int h,
                                                int qt)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int *ss = (int *)(vs + BK * HD);
	int T_ = a.T, kh = (a.h0 + h) / a.g;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1;
	int si = dtmc_attn_seg(a, a.seg, b, iv);
	dtmc_i64 row = dtmc_attn_row<HD>(b, iv, h, T_, a.D);
	float qv[C], gv[C];
	dtmc_attn_ld_row<HD, P>(qv, q, row, p, a.scale);
	dtmc_attn_ld_row<HD, P>(gv, dy, row, p, 1.0f);
	float m = -DTMC_INF, l = 0, dacc = 0;
	int lo, hi;
	dtmc_attn_keys<CAUSAL>(a, qt * R, dtmc_imin(qt * R + R, T_) - 1, &lo, &hi);
	for (int k0 = lo; k0 < hi; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, ss, k, v, a, k0, b, kh);
		float s[BK], u[BK], mt = -DTMC_INF;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			u[j] = dtmc_attn_dot<HD, P>(gv, vs, j, p);
			bool ok = k0 + j < hi && dtmc_attn_sees<CAUSAL>(a, iv, k0 + j, si, ss[j]);
			s[j] = ok ? t : -DTMC_INF;
			mt = fmaxf(mt, s[j]);
		}
		float mn = fmaxf(m, mt), ref = dtmc_attn_ref(mn), corr = expf(m - ref);
		l *= corr;
		dacc *= corr;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float pj = expf(s[j] - ref);
			l += pj;
			dacc += pj * u[j];
		}
		m = mn;
	}
	if (p == 0 && i < T_)
		dtmc_attn_put_stats(stats, a, b, h, i, l > 0 ? m + logf(l) : -DTMC_INF,
		                    l > 0 ? dacc / l : 0.0f);
}

/* Phase 0 item given the rows' outputs and log-sum-exps: L and Dr = dy . o
 * of query tile qt of head (b, h), from attn_block_bwd's ol [B, T, D + H]
 * (the whole rows' merged output, then each head's log-sum-exp) or, with
 * a.lse, from attention_bwd's forward y [B, T, D] and the log-sum-exps
 * after it (f32 [B, H, T]). */
template <typename T, typename TL, int HD, int P>
__device__ __forceinline__ void dtmc_attn_stats_ol(const T *dy, const TL *ol, float *stats,
                                                   const DtmcAttn &a, int b, int h, int qt)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	int T_ = a.T, p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1;
	dtmc_i64 orow = ((dtmc_i64)b * T_ + iv) * (a.lse ? a.D : a.D + a.H);
	float gv[C], ov[C], t = 0;
	dtmc_attn_ld_row<HD, P>(gv, dy, dtmc_attn_row<HD>(b, iv, h, T_, a.D), p, 1.0f);
	dtmc_attn_ld_row<HD, P>(ov, ol, orow + (dtmc_i64)h * HD, p, 1.0f);
#pragma unroll
	for (int c = 0; c < C; c++)
		t += gv[c] * ov[c];
#pragma unroll
	for (int o = P / 2; o; o >>= 1)
		t += __shfl_xor_sync(0xffffffffu, t, o);
	const float *lse = (const float *)(ol + (dtmc_i64)a.B * T_ * a.D);
	if (p == 0 && i < T_)
		dtmc_attn_put_stats(stats, a, b, h, i,
		                    a.lse ? lse[((dtmc_i64)b * a.H + h) * T_ + i]
		                          : dtmc_ld(ol, orow + a.D + h),
		                    t);
}

/* Phase 1 item: dq of query tile qt. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_dq(const T *dy, const T *q, const T *k, const T *v,
                                             TO *dq, const float *stats, const DtmcAttn &a, int b,
                                             int h, int qt)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int *ss = (int *)(vs + BK * HD);
	int T_ = a.T, kh = (a.h0 + h) / a.g;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1;
	int si = dtmc_attn_seg(a, a.seg, b, iv);
	dtmc_i64 row = dtmc_attn_row<HD>(b, iv, h, T_, a.D);
	float qv[C], gv[C], dqv[C] = {};
	dtmc_attn_ld_row<HD, P>(qv, q, row, p, a.scale);
	dtmc_attn_ld_row<HD, P>(gv, dy, row, p, 1.0f);
	dtmc_i64 so = (((dtmc_i64)b * a.H + h) * T_ + iv) * 2;
	float L = __ldcg(&stats[so]), Dr = __ldcg(&stats[so + 1]);
	int lo, hi;
	dtmc_attn_keys<CAUSAL>(a, qt * R, dtmc_imin(qt * R + R, T_) - 1, &lo, &hi);
	for (int k0 = lo; k0 < hi; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, ss, k, v, a, k0, b, kh);
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			float u = dtmc_attn_dot<HD, P>(gv, vs, j, p);
			bool ok = k0 + j < hi && dtmc_attn_sees<CAUSAL>(a, iv, k0 + j, si, ss[j]);
			float pj = ok ? expf(t - L) : 0.0f, ds = pj * (u - Dr);
#pragma unroll
			for (int c = 0; c < C; c++)
				dqv[c] += ds * ks[j * HD + c * P + p];
		}
	}
	if (i < T_)
		dtmc_attn_st_row<HD, P>(dq, row, p, dqv, a.scale);
}

/* Phase 1 item: dk and dv of key tile kt (R keys); queries stream through
 * shared memory BK at a time, scaled, with their L, Dr and segment ids.
 * Shared memory: 2 * BK * HD + 3 * BK floats. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_dkv(const T *dy, const T *q, const T *k, const T *v,
                                              TO *dk, TO *dv, const float *stats, const DtmcAttn &a,
                                              int b, int h, int kt)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *qs = dtmc_smem, *gs = dtmc_smem + BK * HD, *ls = gs + BK * HD, *ds_ = ls + BK;
	int *ss = (int *)(ds_ + BK);
	int T_ = a.T, p = threadIdx.x % P, j = kt * R + threadIdx.x / P;
	int jv = j < T_ ? j : T_ - 1;
	int sj = dtmc_attn_seg(a, a.kseg, b, jv);
	/* k, v: kv head (h0 + h) / g of Dk columns; dk, dv: per query head h */
	dtmc_i64 row = dtmc_attn_row<HD>(b, jv, h, T_, a.D);
	dtmc_i64 krow = dtmc_attn_row<HD>(b, jv, (a.h0 + h) / a.g, T_, a.Dk);
	float kv[C], vv[C], dkv[C] = {}, dvv[C] = {};
	dtmc_attn_ld_row<HD, P>(kv, k, krow, p, 1.0f);
	dtmc_attn_ld_row<HD, P>(vv, v, krow, p, 1.0f);
	int lo, hi;
	dtmc_attn_queries<CAUSAL>(a, kt * R, dtmc_imin(kt * R + R, T_) - 1, &lo, &hi);
	for (int q0 = lo; q0 < hi; q0 += BK) {
		__syncthreads();
		dtmc_attn_tile<HD>(qs, q, BK, q0, b, h, T_, a.D, a.scale);
		dtmc_attn_tile<HD>(gs, dy, BK, q0, b, h, T_, a.D, 1.0f);
		dtmc_attn_seg_tile(ss, a.seg, a, BK, q0, b);
		for (int e = threadIdx.x; e < BK; e += DTMC_ATTN_THREADS) {
			int qi = q0 + e < T_ ? q0 + e : T_ - 1;
			dtmc_i64 so = (((dtmc_i64)b * a.H + h) * T_ + qi) * 2;
			ls[e] = __ldcg(&stats[so]);
			ds_[e] = __ldcg(&stats[so + 1]);
		}
		__syncthreads();
#pragma unroll
		for (int ii = 0; ii < BK; ii++) {
			float t = dtmc_attn_dot<HD, P>(kv, qs, ii, p);
			float u = dtmc_attn_dot<HD, P>(vv, gs, ii, p);
			bool ok =
			        q0 + ii < hi && dtmc_attn_sees<CAUSAL>(a, q0 + ii, jv, ss[ii], sj);
			float pij = ok ? expf(t - ls[ii]) : 0.0f, dsv = pij * (u - ds_[ii]);
#pragma unroll
			for (int c = 0; c < C; c++) {
				dvv[c] += pij * gs[ii * HD + c * P + p];
				dkv[c] += dsv * qs[ii * HD + c * P + p];
			}
		}
	}
	if (j < T_) {
		dtmc_attn_st_row<HD, P>(dk, row, p, dkv, 1.0f);
		dtmc_attn_st_row<HD, P>(dv, row, p, dvv, 1.0f);
	}
}

/* attention_bwd(dy, q, k, v[, seg]) -> out [3, B, T, D], or, given ol
 * (not null), attn_block_bwd(dy, q, k, v, ol), or with a.lse, ol the
 * forward attention (attention_bwd's last operand); stats: [B, H, T, 2]
 * floats of scratch.  Shared memory: (2 * BK * HD + 3 * BK) floats. */
template <typename T, typename TL, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_bwd(const T *dy, const T *q, const T *k, const T *v,
                                              const TL *ol, TO *out, float *stats, DtmcSync *sync,
                                              DtmcAttn a)
{
	constexpr int R = DTMC_ATTN_THREADS / P;
	unsigned nt = (unsigned)((a.T + R - 1) / R), nbh = (unsigned)(a.B * a.H);
	unsigned n0 = nbh * nt, n1 = 2 * nbh * nt;
	dtmc_i64 S = (dtmc_i64)a.B * a.T * a.D;
	for (;;) {
		unsigned it = dtmc_next_item(sync);
		if (it >= n0 + n1)
			break;
		if (it < n0) {
			/* causal: the longest rows first */
			int bh = (int)(it / nt), t = (int)(nt - 1 - it % nt);
			if (ol)
				dtmc_attn_stats_ol<T, TL, HD, P>(dy, ol, stats, a, bh / a.H,
				                                 bh % a.H, t);
			else
				dtmc_attn_stats<T, HD, P, BK, CAUSAL>(dy, q, k, v, stats, a,
				                                      bh / a.H, bh % a.H, t);
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, n0);
		it -= n0;
		if (it < n0) {
			int bh = (int)(it / nt), t = (int)(nt - 1 - it % nt);
			dtmc_attn_dq<T, TO, HD, P, BK, CAUSAL>(dy, q, k, v, out, stats, a, bh / a.H,
			                                       bh % a.H, t);
		} else {
			it -= n0;
			int bh = (int)(it / nt), t = (int)(it % nt);
			dtmc_attn_dkv<T, TO, HD, P, BK, CAUSAL>(dy, q, k, v, out + S, out + 2 * S,
			                                        stats, a, bh / a.H, bh % a.H, t);
		}
	}
	dtmc_sync_exit(sync);
}

/* attn_merge(x1, x2 [B, T, D + H]) -> y: one thread per (row, head).  y
 * may be x1's or x2's buffer: a thread reads its row's head before it
 * writes it, and no other thread touches them. */
template <typename T1, typename T2, typename TO>
__device__ __forceinline__ void dtmc_attn_merge(const T1 *x1, const T2 *x2, TO *y, dtmc_i64 rows,
                                                int H, int HD)
{
	dtmc_i64 t = dtmc_tid();
	if (t >= rows * H)
		return;
	dtmc_i64 D = (dtmc_i64)H * HD, r = (t / H) * (D + H);
	int h = (int)(t % H);
	float l1 = dtmc_ld(x1, r + D + h), l2 = dtmc_ld(x2, r + D + h), m = fmaxf(l1, l2);
	float w1 = m == -DTMC_INF ? 0.0f : expf(l1 - m), w2 = m == -DTMC_INF ? 0.0f : expf(l2 - m);
	float s = w1 + w2, inv = s > 0 ? 1.0f / s : 0.0f;
	for (int c = 0; c < HD; c++) {
		dtmc_i64 o = r + (dtmc_i64)h * HD + c;
		dtmc_st(y, o, (dtmc_ld(x1, o) * w1 + dtmc_ld(x2, o) * w2) * inv);
	}
	dtmc_st(y, r + D + h, m == -DTMC_INF ? -DTMC_INF : m + logf(s));
}
