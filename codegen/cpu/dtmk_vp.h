/* dtmk_vp.h - CPU kernels of the vocab-parallel ops (ir/ops.def): local ops
 * on this rank's shard [off, off + Vl) of a vocab dim split over the group
 * a->mesh_axes, off = Vl * (the rank's position in the group, the
 * lowest-numbered axis major, from ctx->coords, as dtmk_shard_slice).
 * Semantics: interp/eval_grad.c. */
#ifndef DTMK_VP_H
#define DTMK_VP_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"

static inline int64_t dtmk_vp_offset(const DtmCtx *ctx, const DtmkArgs *a, int64_t local)
{
	return dtmk_group_index(ctx, a) * local;
}

/* embed_vp(table [Vl, D], ids) -> [..., D]: zero rows for ids elsewhere. */
static inline void dtmk_embed_vp(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *T = &a->in[0], *I = &a->in[1];
	int64_t V = T->shape[0], D = T->shape[1], N = I->numel;
	int64_t off = dtmk_vp_offset(ctx, a, V);
	for (int64_t i = 0; i < N; i++) {
		int64_t r = (int64_t)dtmk_load_i32(I, i) - off;
		for (int64_t k = 0; k < D; k++)
			dtmk_store(&a->out, i * D + k, r >= 0 && r < V ? dtmk_load(T, r * D + k) : 0.0f);
	}
}

/* embed_bwd_vp(dy [..., D], ids) -> [Vl, D]: this shard's rows. */
static inline void dtmk_embed_bwd_vp(const DtmCtx *ctx, const DtmkArgs *a)
{
	int64_t V = a->out.shape[0], D = a->out.shape[1], N = a->in[1].numel;
	int64_t off = dtmk_vp_offset(ctx, a, V);
	float *acc = calloc((size_t)(V * D > 0 ? V * D : 1), sizeof *acc);
	if (!acc)
		return;
	for (int64_t i = 0; i < N; i++) {
		int64_t r = (int64_t)dtmk_load_i32(&a->in[1], i) - off;
		if (r < 0 || r >= V)
			continue;
		for (int64_t k = 0; k < D; k++)
			acc[r * D + k] += dtmk_load(&a->in[0], i * D + k);
	}
	for (int64_t j = 0; j < V * D; j++)
		dtmk_store(&a->out, j, acc[j]);
	free(acc);
}

/* ce_target(logits [..., Vl], targets) -> [...]: the target's logit here, else 0. */
static inline void dtmk_ce_target(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *L = &a->in[0];
	int64_t V = L->shape[L->rank - 1], N = a->out.numel;
	int64_t off = dtmk_vp_offset(ctx, a, V);
	for (int64_t i = 0; i < N; i++) {
		int64_t r = (int64_t)dtmk_load_i32(&a->in[1], i) - off;
		dtmk_store(&a->out, i, r >= 0 && r < V ? dtmk_load(L, i * V + r) : 0.0f);
	}
}

/* ce_sumexp(logits [..., V], mx [...]) -> [...]: sum of exp(logits - mx). */
static inline void dtmk_ce_sumexp(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *L = &a->in[0];
	int64_t V = L->shape[L->rank - 1], N = a->out.numel;
	for (int64_t i = 0; i < N; i++) {
		double s = 0, m = dtmk_load(&a->in[1], i);
		for (int64_t j = 0; j < V; j++)
			s += exp((double)dtmk_load(L, i * V + j) - m);
		dtmk_store(&a->out, i, (float)s);
	}
}

/* ce_bwd_vp(dl, logits [..., Vl], targets, mx, se) -> like logits:
 * (exp(logits - mx) / se - onehot here) * dl / positions. */
static inline void dtmk_ce_bwd_vp(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *L = &a->in[1];
	int64_t V = L->shape[L->rank - 1], N = a->in[2].numel;
	int64_t off = dtmk_vp_offset(ctx, a, V);
	float dl = dtmk_load(&a->in[0], 0) / (float)(N ? N : 1);
	for (int64_t i = 0; i < N; i++) {
		float m = dtmk_load(&a->in[3], i), s = dtmk_load(&a->in[4], i);
		int64_t r = (int64_t)dtmk_load_i32(&a->in[2], i) - off;
		for (int64_t j = 0; j < V; j++) {
			float p = expf(dtmk_load(L, i * V + j) - m) / s * dl;
			dtmk_store(&a->out, i * V + j, j == r ? p - dl : p);
		}
	}
}

#endif
