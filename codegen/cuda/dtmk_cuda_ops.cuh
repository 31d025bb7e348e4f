/* dtmk_cuda_ops.cuh - CUDA kernels of the row and reduction ops: softmax,
 * layernorm/rmsnorm and their gradients, reductions, losses, embedding
 * gradients, the routing ops, optimizer steps (see dtmk_cuda.cuh for the
 * conventions; the semantics are codegen/cpu/dtmk_*.h's, op by op).
 *
 * Row kernels take TPO threads per row (a warp, or the whole block for long
 * rows) in blocks of DTMC_BLOCK: the emitter launches rows * TPO threads.
 * Kernels that reduce over many rows run in phases (partial sums, then
 * their totals in a fixed order), so results do not depend on timing.
 */

/* ---- softmax / log_softmax ---- */

/* The max of a row of len (held by TPO threads, this one at lane) and the
 * sum of exp(x - max): every thread of the row gets both. */
template <int TPO, typename T>
__device__ __forceinline__ void dtmc_row_sumexp(const T *x, int lane, dtmc_i64 len, float *mx_,
                                                float *s_)
{
	float mx = -DTMC_INF;
	for (dtmc_i64 l = lane; l < len; l += TPO)
		mx = dtmc_max(mx, dtmc_ld(x, l));
	mx = dtmc_group_max<TPO>(mx);
	float s = 0;
	for (dtmc_i64 l = lane; l < len; l += TPO)
		s += expf(dtmc_ld(x, l) - mx);
	*mx_ = mx;
	*s_ = dtmc_group_sum<TPO>(s);
}

/* Rows of len (the axis is the last, or inner = 1). */
template <int TPO, typename TI, typename TO>
__device__ __forceinline__ void dtmc_softmax_rows(const TI *x, TO *y, dtmc_i64 rows, dtmc_i64 len,
                                                  bool lg)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= rows)
		return;
	x += r * len;
	y += r * len;
	float mx, s;
	dtmc_row_sumexp<TPO>(x, lane, len, &mx, &s);
	float lse = mx + logf(s);
	for (dtmc_i64 l = lane; l < len; l += TPO) {
		float v = dtmc_ld(x, l) - lse;
		dtmc_st(y, l, lg ? v : expf(v));
	}
}

/* Any axis: one thread per (outer, inner) column of [outer, len, inner]. */
template <typename TI, typename TO>
__device__ __forceinline__ void dtmc_softmax_cols(const TI *x, TO *y, dtmc_i64 outer, dtmc_i64 len,
                                                  dtmc_i64 inner, bool lg)
{
	dtmc_i64 t = dtmc_tid();
	if (t >= outer * inner)
		return;
	dtmc_i64 base = t / inner * len * inner + t % inner;
	float mx = -DTMC_INF;
	for (dtmc_i64 l = 0; l < len; l++)
		mx = dtmc_max(mx, dtmc_ld(x, base + l * inner));
	float s = 0;
	for (dtmc_i64 l = 0; l < len; l++)
		s += expf(dtmc_ld(x, base + l * inner) - mx);
	float lse = mx + logf(s);
	for (dtmc_i64 l = 0; l < len; l++) {
		float v = dtmc_ld(x, base + l * inner) - lse;
		dtmc_st(y, base + l * inner, lg ? v : expf(v));
	}
}

/* softmax_bwd: y * (dy - sum(dy * y)); log_softmax_bwd: dy - exp(y) * sum(dy). */
template <int TPO, typename TD, typename TY, typename TO>
__device__ __forceinline__ void dtmc_softmax_bwd_rows(const TD *dy, const TY *y, TO *dx,
                                                      dtmc_i64 rows, dtmc_i64 len, bool lg)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= rows)
		return;
	dy += r * len;
	y += r * len;
	dx += r * len;
	float s = 0;
	for (dtmc_i64 l = lane; l < len; l += TPO)
		s += lg ? dtmc_ld(dy, l) : dtmc_ld(dy, l) * dtmc_ld(y, l);
	s = dtmc_group_sum<TPO>(s);
	for (dtmc_i64 l = lane; l < len; l += TPO) {
		float g = dtmc_ld(dy, l), v = dtmc_ld(y, l);
		dtmc_st(dx, l, lg ? g - expf(v) * s : v * (g - s));
	}
}

template <typename TD, typename TY, typename TO>
__device__ __forceinline__ void dtmc_softmax_bwd_cols(const TD *dy, const TY *y, TO *dx,
                                                      dtmc_i64 outer, dtmc_i64 len, dtmc_i64 inner,
                                                      bool lg)
{
	dtmc_i64 t = dtmc_tid();
	if (t >= outer * inner)
		return;
	dtmc_i64 base = t / inner * len * inner + t % inner;
	float s = 0;
	for (dtmc_i64 l = 0; l < len; l++) {
		dtmc_i64 o = base + l * inner;
		s += lg ? dtmc_ld(dy, o) : dtmc_ld(dy, o) * dtmc_ld(y, o);
	}
	for (dtmc_i64 l = 0; l < len; l++) {
		dtmc_i64 o = base + l * inner;
		float g = dtmc_ld(dy, o), v = dtmc_ld(y, o);
		dtmc_st(dx, o, lg ? g - expf(v) * s : v * (g - s));
	}
}

/* ---- layernorm(x, g, b) / rmsnorm(x, g) over rows of D ---- */

/* The mean (0 for rmsnorm) and 1 / sqrt(var + eps) of a row, two-pass as
 * the CPU kernel. */
template <int TPO, typename TX>
__device__ __forceinline__ void dtmc_row_stats(const TX *x, int lane, dtmc_i64 D, float eps,
                                               bool ln, float *mu, float *rstd)
{
	float m = 0;
	if (ln) {
		for (dtmc_i64 k = lane; k < D; k += TPO)
			m += dtmc_ld(x, k);
		m = dtmc_group_sum<TPO>(m) / (float)D;
	}
	float var = 0;
	for (dtmc_i64 k = lane; k < D; k += TPO) {
		float c = dtmc_ld(x, k) - m;
		var += c * c;
	}
	var = dtmc_group_sum<TPO>(var);
	*mu = m;
	*rstd = 1.0f / sqrtf(var / (float)D + eps);
}

template <int TPO, typename TX, typename TG, typename TB, typename TO>
__device__ __forceinline__ void dtmc_norm_rows(const TX *x, const TG *g, const TB *b, TO *y,
                                               dtmc_i64 rows, dtmc_i64 D, float eps, bool ln)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= rows)
		return;
	x += r * D;
	y += r * D;
	float mu, inv;
	dtmc_row_stats<TPO>(x, lane, D, eps, ln, &mu, &inv);
	for (dtmc_i64 k = lane; k < D; k += TPO) {
		float v = (dtmc_ld(x, k) - mu) * inv * dtmc_ld(g, k);
		dtmc_st(y, k, ln ? v + dtmc_ld(b, k) : v);
	}
}

/* dx = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g * xhat)) (no mean(dy*g)
 * term for rmsnorm). */
template <int TPO, typename TD, typename TX, typename TG, typename TO>
__device__ __forceinline__ void dtmc_norm_bwd_rows(const TD *dy, const TX *x, const TG *g, TO *dx,
                                                   dtmc_i64 rows, dtmc_i64 D, float eps, bool ln)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= rows)
		return;
	dy += r * D;
	x += r * D;
	dx += r * D;
	float mu, rstd;
	dtmc_row_stats<TPO>(x, lane, D, eps, ln, &mu, &rstd);
	float mg = 0, mgx = 0;
	for (dtmc_i64 k = lane; k < D; k += TPO) {
		float gk = dtmc_ld(dy, k) * dtmc_ld(g, k);
		mg += gk;
		mgx += gk * (dtmc_ld(x, k) - mu) * rstd;
	}
	mg = ln ? dtmc_group_sum<TPO>(mg) / (float)D : 0.0f;
	mgx = dtmc_group_sum<TPO>(mgx) / (float)D;
	for (dtmc_i64 k = lane; k < D; k += TPO) {
		float xh = (dtmc_ld(x, k) - mu) * rstd;
		dtmc_st(dx, k, rstd * (dtmc_ld(dy, k) * dtmc_ld(g, k) - mg - xh * mgx));
	}
}

/* gamma gradient: out[c] = sum over rows of dy * xhat.  Phase 0: chunks
 * of RB rows (row statistics by warps into shared memory, then per column
 * a sum over the chunk) into part[chunk][D]; phase 1: the chunks' sums in
 * order.  With one chunk, phase 0 writes out directly.  Shared memory:
 * 2 * RB floats. */
template <typename TD, typename TX, typename TO>
__device__ __forceinline__ void dtmc_norm_gamma(const TD *dy, const TX *x, TO *out, float *part,
                                                DtmcSync *sync, dtmc_i64 rows, dtmc_i64 D, int RB,
                                                float eps, bool ln)
{
	extern __shared__ float dtmc_smem[];
	float *smu = dtmc_smem, *srs = dtmc_smem + RB;
	unsigned nch = (unsigned)((rows + RB - 1) / RB);
	unsigned n1 = nch > 1 ? (unsigned)((D + DTMC_BLOCK - 1) / DTMC_BLOCK) : 0;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	for (;;) {
		unsigned it = dtmc_next_item(sync);
		if (it >= nch + n1)
			break;
		if (it < nch) {
			dtmc_i64 r0 = (dtmc_i64)it * RB;
			int nr = rows - r0 < RB ? (int)(rows - r0) : RB;
			for (int rr = warp; rr < nr; rr += DTMC_BLOCK / 32) {
				float mu, rs;
				dtmc_row_stats<32>(x + (r0 + rr) * D, lane, D, eps, ln, &mu, &rs);
				if (lane == 0) {
					smu[rr] = mu;
					srs[rr] = rs;
				}
			}
			__syncthreads();
			for (dtmc_i64 c = threadIdx.x; c < D; c += DTMC_BLOCK) {
				float acc = 0;
				for (int rr = 0; rr < nr; rr++) {
					dtmc_i64 o = (r0 + rr) * D + c;
					acc += dtmc_ld(dy, o) * (dtmc_ld(x, o) - smu[rr]) * srs[rr];
				}
				if (nch == 1)
					dtmc_st(out, c, acc);
				else
					part[(dtmc_i64)it * D + c] = acc;
			}
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, nch);
		dtmc_i64 c = (dtmc_i64)(it - nch) * DTMC_BLOCK + threadIdx.x;
		if (c < D) {
			float acc = 0;
			for (unsigned k = 0; k < nch; k++)
				acc += __ldcg(&part[(dtmc_i64)k * D + c]);
			dtmc_st(out, c, acc);
		}
	}
	dtmc_sync_exit(sync);
}

/* ---- reductions: sum (OP 0), mean (1), max (2) ---- */

template <int OP> __device__ __forceinline__ float dtmc_red_init()
{
	return OP == 2 ? -DTMC_INF : 0.0f;
}

template <int OP> __device__ __forceinline__ float dtmc_red(float a, float b)
{
	return OP == 2 ? dtmc_max(a, b) : a + b;
}

template <int OP, int TPO> __device__ __forceinline__ float dtmc_group_red(float v)
{
	return OP == 2 ? dtmc_group_max<TPO>(v) : dtmc_group_sum<TPO, float>(v);
}

/* Rows of len reduced to one value each ([rows, len] -> [rows]). */
template <int TPO, int OP, typename TI, typename TO>
__device__ __forceinline__ void dtmc_reduce_rows(const TI *x, TO *out, dtmc_i64 rows, dtmc_i64 len)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= rows)
		return;
	float acc = dtmc_red_init<OP>();
	for (dtmc_i64 l = lane; l < len; l += TPO)
		acc = dtmc_red<OP>(acc, dtmc_ld(x, r * len + l));
	acc = dtmc_group_red<OP, TPO>(acc);
	if (lane == 0)
		dtmc_st(out, r, OP == 1 ? acc / (float)len : acc);
}

/* [outer, len, inner] -> [outer, inner] in phases.  Phase 0 items are
 * (o, chunk of RB rows); a block is CW columns x (DTMC_BLOCK / CW) row
 * lanes, walking the columns CW at a time; lanes meet in shared memory
 * (DTMC_BLOCK floats).  Phase 1 items are (o, DTMC_BLOCK columns): the
 * chunks' values in order.  One chunk: phase 0 writes out. */
template <int OP, int CW, typename TI, typename TO>
__device__ __forceinline__ void dtmc_reduce_phased(const TI *x, TO *out, float *part,
                                                   DtmcSync *sync, dtmc_i64 outer, dtmc_i64 len,
                                                   dtmc_i64 inner, dtmc_i64 RB)
{
	constexpr int RL = DTMC_BLOCK / CW;
	__shared__ float sh[DTMC_BLOCK];
	dtmc_i64 nch = (len + RB - 1) / RB;
	dtmc_i64 n0 = outer * nch;
	dtmc_i64 nct1 = (inner + DTMC_BLOCK - 1) / DTMC_BLOCK;
	dtmc_i64 n1 = nch > 1 ? outer * nct1 : 0;
	int cw = threadIdx.x % CW, rl = threadIdx.x / CW;
	for (;;) {
		dtmc_i64 it = dtmc_next_item(sync);
		if (it >= n0 + n1)
			break;
		if (it < n0) {
			dtmc_i64 o = it / nch, ch = it % nch;
			dtmc_i64 r0 = ch * RB, r1 = r0 + RB < len ? r0 + RB : len;
			for (dtmc_i64 c0 = 0; c0 < inner; c0 += CW) {
				dtmc_i64 c = c0 + cw;
				float acc = dtmc_red_init<OP>();
				if (c < inner)
					for (dtmc_i64 r = r0 + rl; r < r1; r += RL)
						acc = dtmc_red<OP>(
						        acc, dtmc_ld(x, (o * len + r) * inner + c));
				__syncthreads();
				sh[threadIdx.x] = acc;
				__syncthreads();
				if (rl == 0 && c < inner) {
					for (int k = 1; k < RL; k++)
						acc = dtmc_red<OP>(acc, sh[k * CW + cw]);
					if (nch == 1)
						dtmc_st(out, o * inner + c,
						        OP == 1 ? acc / (float)len : acc);
					else
						part[it * inner + c] = acc;
				}
			}
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, (unsigned)n0);
		it -= n0;
		dtmc_i64 o = it / nct1, c = it % nct1 * DTMC_BLOCK + threadIdx.x;
		if (c < inner) {
			float acc = dtmc_red_init<OP>();
			for (dtmc_i64 k = 0; k < nch; k++)
				acc = dtmc_red<OP>(acc, __ldcg(&part[(o * nch + k) * inner + c]));
			dtmc_st(out, o * inner + c, OP == 1 ? acc / (float)len : acc);
		}
	}
	dtmc_sync_exit(sync);
}

/* ---- losses ---- */

/* The loss of one row: logsumexp(row) - row[target] (NaN for a target
 * out of range, as the CPU kernel). */
template <int TPO, typename TL>
__device__ __forceinline__ float dtmc_ce_row(const TL *x, int t, int lane, dtmc_i64 V)
{
	float mx, s;
	dtmc_row_sumexp<TPO>(x, lane, V, &mx, &s);
	float xt = t >= 0 && t < V ? dtmc_ld(x, t) : DTMC_NAN;
	return mx + logf(s) - xt;
}

/* The last phase of a mean over N elements: the sum of the n f64 partial
 * sums of part, in order, over N, into out[0]. */
template <typename TO>
__device__ __forceinline__ void dtmc_mean_of_parts(const double *part, dtmc_i64 n, dtmc_i64 N,
                                                   TO *out)
{
	double s = 0;
	for (dtmc_i64 k = threadIdx.x; k < n; k += DTMC_BLOCK)
		s += __ldcg(&part[k]);
	s = dtmc_block_sum(s);
	if (threadIdx.x == 0)
		dtmc_st(out, 0, (float)(s / (double)(N ? N : 1)));
}

/* cross_entropy(logits [N, V], targets [N]) -> mean loss.  Phase 0: rows
 * (DTMC_BLOCK / TPO per item) into part[N] (f64); phase 1: their sum in
 * order, divided by N. */
template <int TPO, typename TL, typename TO>
__device__ __forceinline__ void dtmc_cross_entropy(const TL *x, const int *tg, TO *out,
                                                   double *part, DtmcSync *sync, dtmc_i64 N,
                                                   dtmc_i64 V)
{
	constexpr int RPI = DTMC_BLOCK / TPO;
	dtmc_i64 n0 = (N + RPI - 1) / RPI;
	int lane = threadIdx.x % TPO;
	for (;;) {
		dtmc_i64 it = dtmc_next_item(sync);
		if (it >= n0 + 1)
			break;
		if (it < n0) {
			dtmc_i64 r = it * RPI + threadIdx.x / TPO;
			if (TPO == DTMC_BLOCK || r < N) {
				float l = dtmc_ce_row<TPO>(x + r * V, tg[r], lane, V);
				if (lane == 0)
					part[r] = (double)l;
			}
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, (unsigned)n0);
		dtmc_mean_of_parts(part, N, N, out);
	}
	dtmc_sync_exit(sync);
}

/* cross_entropy_bwd: (softmax(row) - onehot(target)) * dl / N. */
template <int TPO, typename TG, typename TL, typename TO>
__device__ __forceinline__ void dtmc_cross_entropy_bwd(const TG *dl, const TL *x, const int *tg,
                                                       TO *dx, dtmc_i64 N, dtmc_i64 V)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= N)
		return;
	x += r * V;
	dx += r * V;
	float d = dtmc_ld(dl, 0) / (float)(N ? N : 1);
	float mx, s;
	dtmc_row_sumexp<TPO>(x, lane, V, &mx, &s);
	float sc = d / s;
	int t = tg[r];
	for (dtmc_i64 k = lane; k < V; k += TPO)
		dtmc_st(dx, k, expf(dtmc_ld(x, k) - mx) * sc - (k == t ? d : 0.0f));
}

/* ce_sumexp(logits [N, V], mx [N]) -> [N]: sum of exp(logits - mx). */
template <int TPO, typename TL, typename TM, typename TO>
__device__ __forceinline__ void dtmc_ce_sumexp(const TL *x, const TM *mx, TO *out, dtmc_i64 N,
                                               dtmc_i64 V)
{
	int lane;
	dtmc_i64 r = dtmc_row<TPO>(&lane);
	if (r >= N)
		return;
	float m = dtmc_ld(mx, r), s = 0;
	for (dtmc_i64 k = lane; k < V; k += TPO)
		s += expf(dtmc_ld(x + r * V, k) - m);
	s = dtmc_group_sum<TPO>(s);
	if (lane == 0)
		dtmc_st(out, r, s);
}

/* Sum of squares (or of squared differences with y) of x[lo, hi) over
 * the block, in f64; every thread gets it. */
template <typename TX, typename TY>
__device__ __forceinline__ double dtmc_sumsq_range(const TX *x, const TY *y, dtmc_i64 lo,
                                                   dtmc_i64 hi)
{
	double s = 0;
	for (dtmc_i64 i = lo + threadIdx.x; i < hi; i += DTMC_BLOCK) {
		double v = dtmc_ld(x, i);
		if (y)
			v -= dtmc_ld(y, i);
		s += v * v;
	}
	return dtmc_block_sum(s);
}

/* mse(a, b) -> mean of (a - b)^2: chunks of CH into part (f64), then the
 * sum in order. */
template <typename TA, typename TB, typename TO>
__device__ __forceinline__ void dtmc_mse(const TA *x, const TB *y, TO *out, double *part,
                                         DtmcSync *sync, dtmc_i64 N, dtmc_i64 CH)
{
	dtmc_i64 n0 = (N + CH - 1) / CH;
	for (;;) {
		dtmc_i64 it = dtmc_next_item(sync);
		if (it >= n0 + 1)
			break;
		if (it < n0) {
			dtmc_i64 hi = (it + 1) * CH < N ? (it + 1) * CH : N;
			double s = dtmc_sumsq_range(x, y, it * CH, hi);
			if (threadIdx.x == 0)
				part[it] = s;
			dtmc_item_done(sync, 0);
			continue;
		}
		dtmc_wait_phase(sync, 0, (unsigned)n0);
		dtmc_mean_of_parts(part, n0, N, out);
	}
	dtmc_sync_exit(sync);
}

/* ---- embedding gradient ---- */

/* embed_bwd(dy [N, D], ids [N]) -> [V, D] (embed_bwd_vp: rows off +
 * [0, V) of the vocab).  A warp per output row scans the ids 32 at a
 * time and adds the dy rows of the matches in position order (the CPU's
 * order, and deterministic); every row is written, zero when no id hits
 * it.  NC * 32 columns per pass. */
template <int NC, typename TD, typename TO>
__device__ __forceinline__ void dtmc_embed_bwd(const TD *dy, const int *ids, TO *out, dtmc_i64 V,
                                               dtmc_i64 D, dtmc_i64 N, dtmc_i64 off)
{
	int lane;
	dtmc_i64 v = dtmc_row<32>(&lane);
	if (v >= V)
		return;
	dtmc_i64 want = v + off;
	for (dtmc_i64 cb = 0; cb < D; cb += NC * 32) {
		float acc[NC];
#pragma unroll
		for (int c = 0; c < NC; c++)
			acc[c] = 0;
		for (dtmc_i64 base = 0; base < N; base += 32) {
			dtmc_i64 i = base + lane;
			bool hit = i < N && (dtmc_i64)ids[i] == want;
			unsigned mk = __ballot_sync(0xffffffffu, hit);
			while (mk) {
				dtmc_i64 row = base + __ffs(mk) - 1;
				mk &= mk - 1;
#pragma unroll
				for (int c = 0; c < NC; c++) {
					dtmc_i64 col = cb + c * 32 + lane;
					if (col < D)
						acc[c] += dtmc_ld(dy, row * D + col);
				}
			}
		}
#pragma unroll
		for (int c = 0; c < NC; c++) {
			dtmc_i64 col = cb + c * 32 + lane;
			if (col < D)
				dtmc_st(out, v * D + col, acc[c]);
		}
	}
}

/* ---- routing (codegen/cpu/dtmk_route.h, support/route.h) ---- */

/* v rounded to T's precision: the CPU's store and reload. */
template <typename T> __device__ __forceinline__ float dtmc_round_as(float v)
{
	T t[1];
	dtmc_st(t, 0, v);
	return dtmc_ld((const T *)t, 0);
}

/* topk(x [rows, n]) -> [rows, k]: a thread per row, dtm_topk_next's
 * order (largest first, ties to the lower index, a NaN never beats a
 * value it follows), so the CPU's indices exactly. */
template <typename TX>
__device__ __forceinline__ void dtmc_topk(const TX *x, int *y, dtmc_i64 rows, dtmc_i64 n,
                                          dtmc_i64 k)
{
	dtmc_i64 r = dtmc_tid();
	if (r >= rows)
		return;
	const TX *xr = x + r * n;
	int *yr = y + r * k;
	for (dtmc_i64 t = 0; t < k; t++) {
		dtmc_i64 best = -1;
		float bv = 0;
		for (dtmc_i64 i = 0; i < n; i++) {
			bool used = false;
			for (dtmc_i64 u = 0; u < t && !used; u++)
				used = yr[u] == i;
			float v = dtmc_ld(xr, i);
			if (!used && (best < 0 || v > bv)) {
				best = i;
				bv = v;
			}
		}
		yr[t] = (int)best;
	}
}

/* scatter_add(y [G, m, r], idx [G, m]) -> [G, n, r]: a warp per output
 * row (g, j) scans its group's indices 32 at a time and adds the y rows
 * of the matches in index order, rounding each sum to TO as the CPU's
 * load-add-store does: deterministic, and the C kernel's bits.  Every row
 * is written, zero when nothing hits it.  NC * 32 columns per pass. */
template <int NC, typename TY, typename TO>
__device__ __forceinline__ void dtmc_scatter_add(const TY *y, const int *idx, TO *out, dtmc_i64 G,
                                                 dtmc_i64 m, dtmc_i64 n, dtmc_i64 r)
{
	int lane;
	dtmc_i64 row = dtmc_row<32>(&lane);
	if (row >= G * n)
		return;
	dtmc_i64 g = row / n, j = row % n;
	const int *ig = idx + g * m;
	for (dtmc_i64 cb = 0; cb < r; cb += NC * 32) {
		float acc[NC];
#pragma unroll
		for (int c = 0; c < NC; c++)
			acc[c] = 0;
		for (dtmc_i64 base = 0; base < m; base += 32) {
			dtmc_i64 i = base + lane;
			bool hit = i < m && (dtmc_i64)ig[i] == j;
			unsigned mk = __ballot_sync(0xffffffffu, hit);
			while (mk) {
				dtmc_i64 src = (g * m + base + __ffs(mk) - 1) * r;
				mk &= mk - 1;
#pragma unroll
				for (int c = 0; c < NC; c++) {
					dtmc_i64 col = cb + c * 32 + lane;
					if (col < r)
						acc[c] = dtmc_round_as<TO>(acc[c] +
						                           dtmc_ld(y, src + col));
				}
			}
		}
#pragma unroll
		for (int c = 0; c < NC; c++) {
			dtmc_i64 col = cb + c * 32 + lane;
			if (col < r)
				dtmc_st(out, row * r + col, acc[c]);
		}
	}
}

/* moe_slot (tok == 0) or moe_token (slot == 0) of e [G, S, k]: a thread
 * per (group, expert) walks the group's choices in token order and
 * queues its expert's, which is dtm_moe_route's queue without a shared
 * count; expert 0's thread also drops the out-of-range choices, and each
 * thread marks its expert's unfilled slots empty. */
__device__ __forceinline__ void dtmc_moe_route(const int *e, int *slot, int *tok, dtmc_i64 G,
                                               dtmc_i64 S, dtmc_i64 k, dtmc_i64 E, dtmc_i64 C)
{
	dtmc_i64 t = dtmc_tid();
	if (t >= G * E)
		return;
	dtmc_i64 g = t / E, x = t % E, p = 0;
	const int *eg = e + g * S * k;
	for (dtmc_i64 i = 0; i < S * k; i++) {
		dtmc_i64 ex = eg[i];
		bool out = ex < 0 || ex >= E;
		if (ex != x && !(x == 0 && out))
			continue;
		dtmc_i64 at = out || p >= C ? -1 : x * C + p;
		p += !out;
		if (slot)
			slot[g * S * k + i] = (int)at;
		else if (at >= 0)
			tok[g * E * C + at] = (int)(i / k);
	}
	if (tok)
		for (; p < C; p++)
			tok[g * E * C + x * C + p] = -1;
}

/* ---- optimizer steps (codegen/cpu/dtmk_optim.h's math) ---- */

/* Loss scaling (a.loss_scale = S > 0): 1/S as the C kernels compute it,
 * and whether a step is skipped (its global norm is not finite). */
__device__ __forceinline__ float dtmc_inv_scale(const DtmCudaArgs &a)
{
	return a.loss_scale > 0.0f ? (float)(1.0 / (double)a.loss_scale) : 1.0f;
}

__device__ __forceinline__ bool dtmc_opt_skip(const DtmCudaArgs &a, float norm)
{
	/* an all-ones exponent: inf or NaN (the bits, whatever the math flags) */
	return a.loss_scale > 0.0f && (__float_as_uint(norm) & 0x7f800000u) == 0x7f800000u;
}

/* clip_grad_norm_'s factor in f32; 1 when clipping is off. */
__device__ __forceinline__ float dtmc_clip_coef(double clip, float norm)
{
	if (!(clip > 0))
		return 1.0f;
	float c = (1.0f / (norm + 1e-6f)) * (float)clip;
	return c < 1.0f ? c : 1.0f;
}

/* adamw_step(p, g, m, v[, master], norm) -> p; w is the master copy or p. */
template <typename TP, typename TG, typename TM, typename TV, typename TW, typename TN>
__device__ __forceinline__ void dtmc_adamw(const DtmCudaArgs &a, TP *p, const TG *g, TM *m, TV *v,
                                           TW *w, bool master, const TN *norm, TP *out, dtmc_i64 n,
                                           double b1, double b2, double eps, double wd, double clip)
{
	__shared__ float k[8];
	if (threadIdx.x == 0) {
		double lr = a.lr, t = (double)(a.step - a.skipped);
		k[0] = dtmc_clip_coef(clip, dtmc_ld(norm, 0));
		k[6] = dtmc_inv_scale(a);
		k[7] = dtmc_opt_skip(a, dtmc_ld(norm, 0)) ? 1.0f : 0.0f;
		k[1] = (float)(1.0 - lr * wd);
		k[2] = (float)(1.0 - b1);
		k[3] = (float)(1.0 - b2);
		k[4] = (float)sqrt(1.0 - pow(b2, t));
		k[5] = (float)-(lr / (1.0 - pow(b1, t)));
	}
	__syncthreads();
	dtmc_i64 i = dtmc_tid();
	if (i >= n)
		return;
	if (k[7] != 0.0f) { /* skipped: nothing changes */
		if (out != p)
			out[i] = p[i];
		return;
	}
	float coef = k[0], gi = dtmc_ld(g, i);
	if (k[6] != 1.0f)
		gi *= k[6];
	if (coef != 1.0f)
		gi *= coef;
	float wi = dtmc_ld(w, i) * k[1];
	float mi = dtmc_ld(m, i) * (float)b1 + k[2] * gi;
	float vi = dtmc_ld(v, i) * (float)b2 + k[3] * gi * gi;
	dtmc_st(m, i, mi);
	dtmc_st(v, i, vi);
	wi = wi + k[5] * (mi / (sqrtf(vi) / k[4] + (float)eps));
	dtmc_st(w, i, wi);
	if (master)
		dtmc_st(p, i, wi);
	if (out != p)
		out[i] = p[i];
}

/* sgd_step(p, g[, mom][, master], norm) -> p. */
template <typename TP, typename TG, typename TM, typename TW, typename TN>
__device__ __forceinline__ void dtmc_sgd(const DtmCudaArgs &a, TP *p, const TG *g, TM *mom, TW *w,
                                         bool master, const TN *norm, TP *out, dtmc_i64 n,
                                         double mu, double wd, double clip, bool nesterov)
{
	dtmc_i64 i = dtmc_tid();
	if (i >= n)
		return;
	if (dtmc_opt_skip(a, dtmc_ld(norm, 0))) { /* skipped: nothing changes */
		if (out != p)
			out[i] = p[i];
		return;
	}
	float coef = dtmc_clip_coef(clip, dtmc_ld(norm, 0)), gi = dtmc_ld(g, i);
	float wi = dtmc_ld(w, i);
	const float inv = dtmc_inv_scale(a);
	if (inv != 1.0f)
		gi *= inv;
	if (coef != 1.0f)
		gi *= coef;
	if ((float)wd != 0.0f)
		gi = gi + (float)wd * wi;
	if (mom) {
		/* torch's buffer starts as a copy of the first gradient */
		float b = a.step - a.skipped <= 1 ? gi : dtmc_ld(mom, i) * (float)mu + gi;
		dtmc_st(mom, i, b);
		gi = nesterov ? gi + (float)mu * b : b;
	}
	wi = wi + -a.lr * gi;
	dtmc_st(w, i, wi);
	if (master)
		dtmc_st(p, i, wi);
	if (out != p)
		out[i] = p[i];
}
