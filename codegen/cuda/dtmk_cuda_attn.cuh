/* dtmk_cuda_attn.cuh - fused attention, forward and backward, in the
 * flash-attention manner (see dtmk_cuda.cuh for the conventions).
 *
 * q is [B, T, D] with H heads of HD = D / H columns, k and v [B, T, D / g]
 * with H / g heads (grouped-query: query head h reads kv head h / g; g = 1
 * is multi-head, g = H multi-query), never repeated; scores are
 * scaled by 1/sqrt(HD), causal masks keys after the query.  Blocks of 128
 * threads: each row (a query, or a key in the backward's dk/dv items) is
 * held by P neighbouring threads, each owning C = HD / P of its columns
 * (interleaved: column c * P + p, so the P threads read neighbouring
 * shared-memory words), and dot products meet by shuffles.  R = 128 / P
 * rows per block; the other side streams through shared memory in tiles
 * of BK rows (f32, converted once on load), so the T x T score matrix is
 * never stored.
 *
 * Forward: one block per (batch, head, tile of R queries), the causal
 * heaviest tiles first; an online softmax (running max m, sum l, output
 * rescaled once per key tile).
 *
 * Backward, one launch in two phases (dtmk_cuda.cuh's tickets):
 *   0. per query tile: the row statistics L = m + log l (logsumexp of the
 *      scaled scores) and Dr = sum_j P_ij dP_ij = dy_i . o_i, into a
 *      scratch array [B, H, T, 2];
 *   1. per query tile: dq_i = scale * sum_j dS_ij k_j; and per key tile:
 *      dv_j = sum_i P_ij dy_i, dk_j = scale * sum_i dS_ij q_i; with
 *      P_ij = exp(s_ij - L_i), dP_ij = dy_i . v_j, dS = P (dP - Dr).
 * Every output element is written once, by one thread: no atomics, and
 * the result does not depend on timing.  The output is [3, B, T, D]:
 * dq, dk, dv, dk and dv per query head (autodiff sums each group's).
 */

#define DTMC_ATTN_THREADS 128

/* Loads rows [r0, r0 + n) of head h's columns of x (batch b) into
 * dst[n][HD] as f32 times mul, zero past T. */
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

/* The last key query tile qt (of R queries) sees. */
template <int R, bool CAUSAL> __device__ __forceinline__ int dtmc_attn_last(int qt, int T_)
{
	return CAUSAL ? (qt * R + R < T_ ? qt * R + R : T_) - 1 : T_ - 1;
}

/* Keys and values of rows [k0, k0 + BK) into the shared tiles ks and vs,
 * once every thread is done with the previous ones. */
template <int HD, int BK, typename T>
__device__ __forceinline__ void dtmc_attn_kv(float *ks, float *vs, const T *k, const T *v, int k0,
                                             int b, int h, int T_, int D)
{
	__syncthreads();
	dtmc_attn_tile<HD>(ks, k, BK, k0, b, h, T_, D, 1.0f);
	dtmc_attn_tile<HD>(vs, v, BK, k0, b, h, T_, D, 1.0f);
	__syncthreads();
}

/* Shared memory: 2 * BK * HD floats. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_fwd(const T *q, const T *k, const T *v, TO *y, int B,
                                              int T_, int D, int H, float scale, int g)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int nqt = (T_ + R - 1) / R;
	int bh = blockIdx.x / nqt, qt = nqt - 1 - (int)(blockIdx.x % nqt);
	int b = bh / H, h = bh % H;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1; /* rows past T compute row T-1, unstored */
	dtmc_i64 row = dtmc_attn_row<HD>(b, iv, h, T_, D);
	float qv[C], acc[C] = {};
	dtmc_attn_ld_row<HD, P>(qv, q, row, p, scale);
	float m = -DTMC_INF, l = 0;
	int last = dtmc_attn_last<R, CAUSAL>(qt, T_);
	for (int k0 = 0; k0 <= last; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, k, v, k0, b, h / g, T_, D / g);
		float s[BK], mt = -DTMC_INF;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			bool ok = k0 + j < T_ && (!CAUSAL || k0 + j <= iv);
			s[j] = ok ? t : -DTMC_INF;
			mt = fmaxf(mt, s[j]);
		}
		/* the first tile always has a key in range: mn is finite */
		float mn = fmaxf(m, mt), corr = expf(m - mn);
		l *= corr;
#pragma unroll
		for (int c = 0; c < C; c++)
			acc[c] *= corr;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float pj = expf(s[j] - mn);
			l += pj;
#pragma unroll
			for (int c = 0; c < C; c++)
				acc[c] += pj * vs[j * HD + c * P + p];
		}
		m = mn;
	}
	if (i < T_)
		dtmc_attn_st_row<HD, P>(y, row, p, acc, 1.0f / l);
}

/* Phase 0 item: L and Dr of query tile qt of head (b, h). */
template <typename T, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_stats(const T *dy, const T *q, const T *k, const T *v,
                                                float *stats, int b, int h, int qt, int T_, int D,
                                                int H, float scale, int g)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1;
	dtmc_i64 row = dtmc_attn_row<HD>(b, iv, h, T_, D);
	float qv[C], gv[C];
	dtmc_attn_ld_row<HD, P>(qv, q, row, p, scale);
	dtmc_attn_ld_row<HD, P>(gv, dy, row, p, 1.0f);
	float m = -DTMC_INF, l = 0, dacc = 0;
	int last = dtmc_attn_last<R, CAUSAL>(qt, T_);
	for (int k0 = 0; k0 <= last; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, k, v, k0, b, h / g, T_, D / g);
		float s[BK], u[BK], mt = -DTMC_INF;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			u[j] = dtmc_attn_dot<HD, P>(gv, vs, j, p);
			bool ok = k0 + j < T_ && (!CAUSAL || k0 + j <= iv);
			s[j] = ok ? t : -DTMC_INF;
			mt = fmaxf(mt, s[j]);
		}
		float mn = fmaxf(m, mt), corr = expf(m - mn);
		l *= corr;
		dacc *= corr;
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float pj = expf(s[j] - mn);
			l += pj;
			dacc += pj * u[j];
		}
		m = mn;
	}
	if (p == 0 && i < T_) {
		dtmc_i64 o = (((dtmc_i64)b * H + h) * T_ + i) * 2;
		stats[o] = m + logf(l);
		stats[o + 1] = dacc / l;
	}
}

/* Phase 1 item: dq of query tile qt. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_dq(const T *dy, const T *q, const T *k, const T *v,
                                             TO *dq, const float *stats, int b, int h, int qt,
                                             int T_, int D, int H, float scale, int g)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *ks = dtmc_smem, *vs = dtmc_smem + BK * HD;
	int p = threadIdx.x % P, i = qt * R + threadIdx.x / P;
	int iv = i < T_ ? i : T_ - 1;
	dtmc_i64 row = dtmc_attn_row<HD>(b, iv, h, T_, D);
	float qv[C], gv[C], dqv[C] = {};
	dtmc_attn_ld_row<HD, P>(qv, q, row, p, scale);
	dtmc_attn_ld_row<HD, P>(gv, dy, row, p, 1.0f);
	dtmc_i64 so = (((dtmc_i64)b * H + h) * T_ + iv) * 2;
	float L = __ldcg(&stats[so]), Dr = __ldcg(&stats[so + 1]);
	int last = dtmc_attn_last<R, CAUSAL>(qt, T_);
	for (int k0 = 0; k0 <= last; k0 += BK) {
		dtmc_attn_kv<HD, BK>(ks, vs, k, v, k0, b, h / g, T_, D / g);
#pragma unroll
		for (int j = 0; j < BK; j++) {
			float t = dtmc_attn_dot<HD, P>(qv, ks, j, p);
			float u = dtmc_attn_dot<HD, P>(gv, vs, j, p);
			bool ok = k0 + j < T_ && (!CAUSAL || k0 + j <= iv);
			float pj = ok ? expf(t - L) : 0.0f, ds = pj * (u - Dr);
#pragma unroll
			for (int c = 0; c < C; c++)
				dqv[c] += ds * ks[j * HD + c * P + p];
		}
	}
	if (i < T_)
		dtmc_attn_st_row<HD, P>(dq, row, p, dqv, scale);
}

/* Phase 1 item: dk and dv of key tile kt (R keys); queries stream through
 * shared memory BK at a time, scaled, with their L and Dr.  Shared
 * memory: 2 * BK * HD + 2 * BK floats. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_dkv(const T *dy, const T *q, const T *k, const T *v,
                                              TO *dk, TO *dv, const float *stats, int b, int h,
                                              int kt, int T_, int D, int H, float scale, int g)
{
	constexpr int C = HD / P, R = DTMC_ATTN_THREADS / P;
	extern __shared__ float dtmc_smem[];
	float *qs = dtmc_smem, *gs = dtmc_smem + BK * HD, *ls = gs + BK * HD, *ds_ = ls + BK;
	int p = threadIdx.x % P, j = kt * R + threadIdx.x / P;
	int jv = j < T_ ? j : T_ - 1;
	/* k, v: kv head h / g of D / g columns; dk, dv: per query head h */
	dtmc_i64 row = dtmc_attn_row<HD>(b, jv, h, T_, D);
	dtmc_i64 krow = dtmc_attn_row<HD>(b, jv, h / g, T_, D / g);
	float kv[C], vv[C], dkv[C] = {}, dvv[C] = {};
	dtmc_attn_ld_row<HD, P>(kv, k, krow, p, 1.0f);
	dtmc_attn_ld_row<HD, P>(vv, v, krow, p, 1.0f);
	int first = CAUSAL ? kt * R / BK * BK : 0;
	for (int q0 = first; q0 < T_; q0 += BK) {
		__syncthreads();
		dtmc_attn_tile<HD>(qs, q, BK, q0, b, h, T_, D, scale);
		dtmc_attn_tile<HD>(gs, dy, BK, q0, b, h, T_, D, 1.0f);
		for (int e = threadIdx.x; e < BK; e += DTMC_ATTN_THREADS) {
			int qi = q0 + e < T_ ? q0 + e : T_ - 1;
			dtmc_i64 so = (((dtmc_i64)b * H + h) * T_ + qi) * 2;
			ls[e] = __ldcg(&stats[so]);
			ds_[e] = __ldcg(&stats[so + 1]);
		}
		__syncthreads();
#pragma unroll
		for (int ii = 0; ii < BK; ii++) {
			float t = dtmc_attn_dot<HD, P>(kv, qs, ii, p);
			float u = dtmc_attn_dot<HD, P>(vv, gs, ii, p);
			bool ok = q0 + ii < T_ && (!CAUSAL || jv <= q0 + ii);
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

/* attention_bwd(dy, q, k, v) -> out [3, B, T, D]; stats: [B, H, T, 2]
 * floats of scratch.  Shared memory: (2 * BK * HD + 2 * BK) floats. */
template <typename T, typename TO, int HD, int P, int BK, bool CAUSAL>
__device__ __forceinline__ void dtmc_attn_bwd(const T *dy, const T *q, const T *k, const T *v,
                                              TO *out, float *stats, DtmcSync *sync, int B, int T_,
                                              int D, int H, float scale, int g)
{
	constexpr int R = DTMC_ATTN_THREADS / P;
	unsigned nt = (unsigned)((T_ + R - 1) / R), nbh = (unsigned)(B * H);
	unsigned n0 = nbh * nt, n1 = 2 * nbh * nt;
	dtmc_i64 S = (dtmc_i64)B * T_ * D;
	for (;;) {
		unsigned it = dtmc_next_item(sync);
		if (it >= n0 + n1)
			break;
		if (it < n0) {
			/* causal: the longest rows first */
			int bh = (int)(it / nt), t = (int)(nt - 1 - it % nt);
			dtmc_attn_stats<T, HD, P, BK, CAUSAL>(dy, q, k, v, stats, bh / H, bh % H, t,
			                                      T_, D, H, scale, g);
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, n0);
		it -= n0;
		if (it < n0) {
			int bh = (int)(it / nt), t = (int)(nt - 1 - it % nt);
			dtmc_attn_dq<T, TO, HD, P, BK, CAUSAL>(dy, q, k, v, out, stats, bh / H,
			                                       bh % H, t, T_, D, H, scale, g);
		} else {
			it -= n0;
			int bh = (int)(it / nt), t = (int)(it % nt);
			dtmc_attn_dkv<T, TO, HD, P, BK, CAUSAL>(dy, q, k, v, out + S, out + 2 * S,
			                                        stats, bh / H, bh % H, t, T_, D, H,
			                                        scale, g);
		}
	}
	dtmc_sync_exit(sync);
}
