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
	int64_t V = a->out.shape[0];
	dtmk_scatter_rows(ctx, &a->in[0], &a->in[1], &a->out, dtmk_vp_offset(ctx, a, V));
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

/* ce_sumexp and ce_bwd_vp work on rows of the logits (V values each:
 * GPT-2's 50304) over the pool, a row in chunks of DTMK_ROW_CHUNK widened
 * on the stack; exp is dtmk_expf, vectorised (libm's exp per element in
 * double and a dtype test per load made these two 14% of a GPT-2 small
 * bf16 step). */
struct dtmk_ce_vp_job {
	const DtmkArgs *a;
	int64_t V, off;
	float dl;
};

/* ce_sumexp(logits [..., V], mx [...]) -> [...]: sum of exp(logits - mx),
 * each chunk's in f32, the chunks' in double. */
static void dtmk_ce_sumexp_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_ce_vp_job *j = arg;
	const DtmkArgs *a = j->a;
	float buf[DTMK_ROW_CHUNK];
	for (int64_t i = lo; i < hi; i++) {
		double s = 0;
		float m = dtmk_load(&a->in[1], i);
		for (int64_t c = 0; c < j->V; c += DTMK_ROW_CHUNK) {
			int64_t n = j->V - c < DTMK_ROW_CHUNK ? j->V - c : DTMK_ROW_CHUNK;
			const float *x = dtmk_chunk_in(&a->in[0], i * j->V + c, n, buf);
			float cs = 0;
			for (int64_t k = 0; k < n; k++)
				cs += dtmk_expf(x[k] - m);
			s += cs;
		}
		dtmk_store(&a->out, i, (float)s);
	}
}

static inline void dtmk_ce_sumexp(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *L = &a->in[0];
	struct dtmk_ce_vp_job j = {a, L->shape[L->rank - 1], 0, 0};
	dtmk_par(ctx, a->out.numel, 1, dtmk_ce_sumexp_rows, &j);
}

/* ce_bwd_vp(dl, logits [..., Vl], targets, mx, se) -> like logits:
 * (exp(logits - mx) / se - onehot here) * dl / positions. */
static void dtmk_ce_bwd_vp_rows(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_ce_vp_job *j = arg;
	const DtmkArgs *a = j->a;
	const DtmkTensor *L = &a->in[1];
	float buf[DTMK_ROW_CHUNK], ob[DTMK_ROW_CHUNK];
	bool f32 = a->out.dtype == DTM_F32;
	for (int64_t i = lo; i < hi; i++) {
		float m = dtmk_load(&a->in[3], i), s = dtmk_load(&a->in[4], i), dl = j->dl;
		int64_t r = (int64_t)dtmk_load_i32(&a->in[2], i) - j->off;
		for (int64_t c = 0; c < j->V; c += DTMK_ROW_CHUNK) {
			int64_t n = j->V - c < DTMK_ROW_CHUNK ? j->V - c : DTMK_ROW_CHUNK;
			const float *x = dtmk_chunk_in(L, i * j->V + c, n, buf);
			float *y = f32 ? (float *)a->out.p + i * j->V + c : ob;
			for (int64_t k = 0; k < n; k++)
				y[k] = dtmk_expf(x[k] - m) / s * dl;
			if (r >= c && r < c + n)
				y[r - c] -= dl;
			if (!f32) {
				DtmkTensor v = dtmk_view(&a->out, i * j->V + c, n);
				dtmk_narrow(&v, ob);
			}
		}
	}
}

static inline void dtmk_ce_bwd_vp(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *L = &a->in[1];
	int64_t V = L->shape[L->rank - 1], N = a->in[2].numel;
	struct dtmk_ce_vp_job j = {a, V, dtmk_vp_offset(ctx, a, V),
				   dtmk_load(&a->in[0], 0) / (float)(N ? N : 1)};
	dtmk_par(ctx, N, 1, dtmk_ce_bwd_vp_rows, &j);
}

#endif
