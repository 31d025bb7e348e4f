/* dtmk_rope.h - the CPU kernel of rope (ir/ops.def; semantics:
 * interp/eval.c's ev_rope).  Attributes as cg_kernel_attrs writes them:
 * ints[0] heads, ints[1] inverse, f[0] theta, mesh_axes the group the
 * position dim is split over (its shard starts at T * the rank's index in
 * it, from ctx->coords, as the vocab-parallel ops' offsets). */
#ifndef DTMK_ROPE_H
#define DTMK_ROPE_H

#include "codegen/cpu/dtmk.h"

/* rope(x [..., T, D]) -> like x: in each head of hd = D / heads dims,
 * dims j and j + hd/2 rotate by p * theta^(-2j/hd) (by minus that when
 * inverse).  The angle and its cos and sin are computed in double, then
 * rounded to f32 (what the PyTorch oracle does).  Each pair is read
 * before it is written, so y may be x's buffer. */
static inline void dtmk_rope(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *X = &a->in[0];
	int64_t D = X->shape[X->rank - 1], T = X->shape[X->rank - 2], H = a->ints[0];
	int64_t hd = H > 0 ? D / H : 0, half = hd / 2, rows = D ? X->numel / D : 0;
	int64_t off = dtmk_group_index(ctx, a) * T;
	double sgn = a->ints[1] ? -1.0 : 1.0;
	for (int64_t r = 0; r < rows; r++) {
		double p = (double)(off + r % T);
		for (int64_t j = 0; j < half; j++) {
			double ang = p * pow(a->f[0], -2.0 * (double)j / (double)hd);
			float c = (float)cos(ang), s = (float)(sgn * sin(ang));
			for (int64_t h = 0; h < H; h++) {
				int64_t i0 = r * D + h * hd + j, i1 = i0 + half;
				float x0 = dtmk_load(X, i0), x1 = dtmk_load(X, i1);
				dtmk_store(&a->out, i0, x0 * c - x1 * s);
				dtmk_store(&a->out, i1, x1 * c + x0 * s);
			}
		}
	}
}

#endif
