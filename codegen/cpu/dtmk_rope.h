/* dtmk_rope.h - the CPU kernel of rope (ir/ops.def; semantics:
 * interp/eval.c's ev_rope).  Attributes as cg_kernel_attrs writes them:
 * ints[0] heads, ints[1] inverse, f[0] theta, mesh_axes the group the
 * position dim is split over (its shard starts at T * the rank's index in
 * it, from ctx->coords, as the vocab-parallel ops' offsets). */
#ifndef DTMK_ROPE_H
#define DTMK_ROPE_H

#include "codegen/cpu/dtmk.h"

/* the pairs whose angles a thread holds at once */
#define DTMK_ROPE_CHUNK 128

struct dtmk_rope_job {
	const DtmkTensor *x, *y;
	int64_t T, D, H, hd, half, off;
	double theta, sgn;
};

/* positions [lo, hi) of the shard: each one's angles, then every row at
 * that position (one per batch item) rotated by them */
static void dtmk_rope_range(void *arg, int64_t lo, int64_t hi)
{
	const struct dtmk_rope_job *j = arg;
	int64_t T = j->T, D = j->D, hd = j->hd, half = j->half;
	int64_t nb = D > 0 && T > 0 ? j->x->numel / D / T : 0;
	bool f32 = j->x->dtype == DTM_F32 && j->y->dtype == DTM_F32;
	float c[DTMK_ROPE_CHUNK], s[DTMK_ROPE_CHUNK];
	for (int64_t t = lo; t < hi; t++) {
		double p = (double)(j->off + t);
		for (int64_t k0 = 0; k0 < half; k0 += DTMK_ROPE_CHUNK) {
			int64_t n = half - k0 < DTMK_ROPE_CHUNK ? half - k0 : DTMK_ROPE_CHUNK;
			for (int64_t k = 0; k < n; k++) {
				double ang = p * pow(j->theta, -2.0 * (double)(k0 + k) / (double)hd);
				c[k] = (float)cos(ang);
				s[k] = (float)(j->sgn * sin(ang));
			}
			for (int64_t b = 0; b < nb; b++)
				for (int64_t h = 0; h < j->H; h++) {
					int64_t i = (b * T + t) * D + h * hd + k0;
					if (f32) { /* contiguous: vectorises */
						const float *x0 = (const float *)j->x->p + i, *x1 = x0 + half;
						float *y0 = (float *)j->y->p + i, *y1 = y0 + half;
						for (int64_t k = 0; k < n; k++) {
							float a0 = x0[k], a1 = x1[k];
							y0[k] = a0 * c[k] - a1 * s[k];
							y1[k] = a1 * c[k] + a0 * s[k];
						}
						continue;
					}
					for (int64_t k = 0; k < n; k++) {
						float a0 = dtmk_load(j->x, i + k);
						float a1 = dtmk_load(j->x, i + k + half);
						dtmk_store(j->y, i + k, a0 * c[k] - a1 * s[k]);
						dtmk_store(j->y, i + k + half, a1 * c[k] + a0 * s[k]);
					}
				}
		}
	}
}

/* rope(x [..., T, D]) -> like x: in each head of hd = D / heads dims,
 * dims j and j + hd/2 rotate by p * theta^(-2j/hd) (by minus that when
 * inverse).  The angle and its cos and sin are computed in double, then
 * rounded to f32 (what the PyTorch oracle does), once per position and
 * pair (the batch and the heads share them: per row and pair, sin and cos
 * in double were 94% of the kernel), positions split over the pool.
 * Each pair is read before it is written, so y may be x's buffer. */
static inline void dtmk_rope(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *X = &a->in[0];
	int64_t D = X->shape[X->rank - 1], T = X->shape[X->rank - 2], H = a->ints[0];
	int64_t hd = H > 0 ? D / H : 0;
	struct dtmk_rope_job job = {X, &a->out, T, D, H, hd, hd / 2,
				    dtmk_group_index(ctx, a) * T, a->f[0],
				    a->ints[1] ? -1.0 : 1.0};
	if (job.half > 0)
		dtmk_par(ctx, T, 4, dtmk_rope_range, &job);
}

#endif
