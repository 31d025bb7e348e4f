/* dtmk_ring.h - CPU kernels of ring attention's block ops (ir/ops.def:
 * attn_block, attn_merge, attn_block_bwd; semantics: interp/eval_ring.c).
 * Attributes as cg_kernel_attrs writes them: ints = {heads, causal,
 * kv_heads, window, ring, step, balanced}, mesh_axes = head_axes; when
 * balanced, member g's block is chunks 2g and 2n-1-2g of T/2 rows.  The query block
 * is the rank's index in the group ring (ctx->coords), the key block step
 * places before it; masks compare global positions.  Plain loops with
 * double accumulators: correctness first, not yet tuned. */
#ifndef DTMK_RING_H
#define DTMK_RING_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"

struct dtmk_ring_job {
	const DtmkArgs *a;
	int64_t H, T, D, Dk, h0, group, qoff, koff, half, qoff2, koff2;
	int bwd;
	const DtmkTensor *qseg, *kseg; /* [B, T] i32 segment ids, or NULL */
};

/* Rank's (query, key) block offsets along the sequence of T rows a block. */
static inline void dtmk_ring_pos(const DtmCtx *ctx, const DtmkArgs *a, struct dtmk_ring_job *j)
{
	int64_t T = j->T;
	uint32_t ring = a->nints > 4 ? (uint32_t)a->ints[4] : 0;
	int64_t step = a->nints > 5 ? a->ints[5] : 0, idx = 0, n = 1;
	for (int k = 0; ctx && k < ctx->mesh_naxes; k++)
		if (ring >> k & 1) {
			idx = idx * ctx->mesh_sizes[k] + ctx->coords[k];
			n *= ctx->mesh_sizes[k];
		}
	int64_t kb = ((idx - step) % n + n) % n;
	j->qoff = idx * T;
	j->koff = kb * T;
	if (a->nints > 6 && a->ints[6]) {
		int64_t c = j->half = T / 2;
		j->qoff = 2 * idx * c, j->qoff2 = (2 * n - 1 - 2 * idx) * c;
		j->koff = 2 * kb * c, j->koff2 = (2 * n - 1 - 2 * kb) * c;
	}
}

static inline int64_t dtmk_ring_at(const struct dtmk_ring_job *j, int64_t i, int64_t off,
                                   int64_t off2)
{
	return j->half && i >= j->half ? off2 + (i - j->half) : off + i;
}

static inline int dtmk_ring_sees(const struct dtmk_ring_job *j, int64_t b, int64_t i, int64_t k)
{
	if (j->qseg) {
		int32_t si = dtmk_load_i32(j->qseg, b * j->T + i);
		if (si < 0 || si != dtmk_load_i32(j->kseg, b * j->T + k))
			return 0;
	}
	int64_t gi = dtmk_ring_at(j, i, j->qoff, j->qoff2);
	int64_t gk = dtmk_ring_at(j, k, j->koff, j->koff2), W = j->a->ints[3];
	if (j->a->ints[1] && gk > gi)
		return 0;
	return W <= 0 || (gi - gk < W && gk - gi < W);
}

/* One (batch, head) item: forward (output and log-sum-exp) or backward. */
static inline void dtmk_ring_items(void *argp, int64_t lo, int64_t hi)
{
	const struct dtmk_ring_job *j = argp;
	const DtmkArgs *a = j->a;
	int q0 = j->bwd ? 1 : 0;
	const DtmkTensor *Q = &a->in[q0], *K = &a->in[q0 + 1], *V = &a->in[q0 + 2];
	int64_t H = j->H, T = j->T, D = j->D, Dk = j->Dk, hd = D / H, Wd = D + H;
	int64_t S = Q->numel;
	double scale = 1.0 / sqrt((double)hd);
	double *p = malloc(sizeof(double) * (size_t)(2 * T + 1));
	if (!p)
		return;
	double *dp = p + T;
	for (int64_t it = lo; it < hi; it++) {
		int64_t b = it / H, h = it % H, g = (j->h0 + h) / j->group;
		if (j->bwd)
			for (int64_t t = 0; t < T; t++)
				for (int64_t c = 0; c < hd; c++) {
					int64_t o = (b * T + t) * D + h * hd + c;
					dtmk_store(&a->out, o, 0);
					dtmk_store(&a->out, S + o, 0);
					dtmk_store(&a->out, 2 * S + o, 0);
				}
		for (int64_t i = 0; i < T; i++) {
			int64_t row = b * T + i, qi = row * D + h * hd;
			double mx = -INFINITY;
			for (int64_t k = 0; k < T; k++) {
				p[k] = -INFINITY;
				if (!dtmk_ring_sees(j, b, i, k))
					continue;
				double s = 0;
				for (int64_t c = 0; c < hd; c++)
					s += (double)dtmk_load(Q, qi + c) *
					     dtmk_load(K, (b * T + k) * Dk + g * hd + c);
				p[k] = s * scale;
				mx = p[k] > mx ? p[k] : mx;
			}
			if (!j->bwd) {
				double sum = 0;
				for (int64_t k = 0; mx != -INFINITY && k < T; k++)
					sum += p[k] = exp(p[k] - mx);
				for (int64_t c = 0; c < hd; c++) {
					double acc = 0;
					for (int64_t k = 0; mx != -INFINITY && k < T; k++)
						if (p[k] != 0)
							acc += p[k] * dtmk_load(V, (b * T + k) * Dk + g * hd + c);
					dtmk_store(&a->out, row * Wd + h * hd + c,
					           mx == -INFINITY ? 0.0f : (float)(acc / sum));
				}
				dtmk_store(&a->out, row * Wd + D + h,
				           mx == -INFINITY ? -INFINITY : (float)(mx + log(sum)));
				continue;
			}
			const DtmkTensor *dy = &a->in[0], *ol = &a->in[4];
			double lse = dtmk_load(ol, row * Wd + D + h), pdo = 0;
			if (mx == -INFINITY || lse == -INFINITY)
				continue;
			for (int64_t c = 0; c < hd; c++)
				pdo += (double)dtmk_load(dy, qi + c) * dtmk_load(ol, row * Wd + h * hd + c);
			for (int64_t k = 0; k < T; k++) {
				p[k] = exp(p[k] - lse);
				int64_t vk = (b * T + k) * Dk + g * hd, ok = (b * T + k) * D + h * hd;
				dp[k] = 0;
				for (int64_t c = 0; c < hd; c++) {
					double dyc = dtmk_load(dy, qi + c);
					float dv = dtmk_load(&a->out, 2 * S + ok + c);
					dtmk_store(&a->out, 2 * S + ok + c, (float)(dv + p[k] * dyc));
					dp[k] += dyc * dtmk_load(V, vk + c);
				}
			}
			for (int64_t c = 0; c < hd; c++) {
				double dq = 0;
				for (int64_t k = 0; k < T; k++) {
					double ds = p[k] * (dp[k] - pdo) * scale;
					int64_t ok = (b * T + k) * D + h * hd + c;
					dq += ds * dtmk_load(K, (b * T + k) * Dk + g * hd + c);
					float dk = dtmk_load(&a->out, S + ok);
					dtmk_store(&a->out, S + ok, (float)(dk + ds * dtmk_load(Q, qi + c)));
				}
				dtmk_store(&a->out, qi + c, (float)dq);
			}
		}
	}
	free(p);
}

static inline void dtmk_ring_run(const DtmCtx *ctx, const DtmkArgs *a, int bwd)
{
	const DtmkTensor *Q = &a->in[bwd ? 1 : 0], *K = &a->in[bwd ? 2 : 1];
	struct dtmk_ring_job j = {.a = a, .H = a->ints[0], .T = Q->shape[1], .D = Q->shape[2],
	                          .Dk = K->shape[2], .group = 1, .bwd = bwd};
	if (j.H <= 0)
		return;
	dtmk_attn_heads(ctx, a, &j.h0, &j.group);
	dtmk_ring_pos(ctx, a, &j);
	int s0 = bwd ? 5 : 3;
	if (a->nin > s0 + 1) {
		j.qseg = &a->in[s0];
		j.kseg = &a->in[s0 + 1];
	}
	dtmk_par(ctx, Q->shape[0] * j.H, 1, dtmk_ring_items, &j);
}

/* attn_block(q, k, v [B, T, D][, qseg, kseg [B, T]]) -> [B, T, D + H]. */
static inline void dtmk_attn_block(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_ring_run(ctx, a, 0);
}

/* attn_block_bwd(dy, q, k, v, ol[, qseg, kseg]) -> [3, B, T, D]. */
static inline void dtmk_attn_block_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_ring_run(ctx, a, 1);
}

/* attn_merge(a, b [B, T, D + H]) -> like a (online softmax); y may alias
 * either operand: each row's values are read before written. */
static inline void dtmk_attn_merge(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t H = a->ints[0], Wd = a->out.shape[2], D = Wd - H;
	if (H <= 0 || D % H)
		return;
	int64_t hd = D / H, rows = a->out.shape[0] * a->out.shape[1];
	for (int64_t r = 0; r < rows; r++)
		for (int64_t h = 0; h < H; h++) {
			double l1 = dtmk_load(&a->in[0], r * Wd + D + h);
			double l2 = dtmk_load(&a->in[1], r * Wd + D + h);
			double m = l1 > l2 ? l1 : l2;
			double w1 = m == -INFINITY ? 0 : exp(l1 - m), w2 = m == -INFINITY ? 0 : exp(l2 - m);
			double s = w1 + w2;
			for (int64_t c = 0; c < hd; c++) {
				int64_t o = r * Wd + h * hd + c;
				double y = s > 0 ? (dtmk_load(&a->in[0], o) * w1 +
				                    dtmk_load(&a->in[1], o) * w2) / s : 0;
				dtmk_store(&a->out, o, (float)y);
			}
			dtmk_store(&a->out, r * Wd + D + h, m == -INFINITY ? -INFINITY : (float)(m + log(s)));
		}
}

#endif
