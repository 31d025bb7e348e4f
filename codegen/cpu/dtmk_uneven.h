/* dtmk_uneven.h - CPU kernel of pad_mask (ir/ops.def): the padding of an
 * uneven (torch.chunk) shard overwritten.  Every rank stores c rows of a
 * dim of n cut unevenly (passes/partition.c); this rank's chunk starts at
 * row idx * c, idx its position in the group a->mesh_axes (the
 * lowest-numbered axis major, from ctx->coords, as dtmk_shard_slice), and
 * its rows at or past n are the padding.  Semantics: interp/eval_grad.c. */
#ifndef DTMK_UNEVEN_H
#define DTMK_UNEVEN_H

#include "codegen/cpu/dtmk.h"
#include "codegen/cpu/dtmk_fwd.h" /* dtmk_copy_rows */

/* The lowest finite value a tensor of this dtype holds exactly. */
static inline float dtmk_lowest(DtmDtype t)
{
	switch (t) {
	case DTM_F16: return -65504.0f;
	case DTM_BF16: return -3.38953139e38f; /* 0xff7f: rounds to itself */
	default: return -3.40282347e38f;
	}
}

/* pad_mask(x): ints = {dim, global extent, low}: the padding becomes 0,
 * or with low the dtype's lowest finite value. */
static inline void dtmk_pad_mask(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *X = &a->in[0];
	int ax = (int)a->ints[0];
	int64_t idx = dtmk_group_index(ctx, a);
	int64_t c = X->shape[ax], real = a->ints[1] - idx * c;
	real = real < 0 ? 0 : real > c ? c : real;
	int64_t outer = dtmk_span(X, 0, ax), inner = dtmk_span(X, ax + 1, X->rank);
	float fill = a->ints[2] ? dtmk_lowest(a->out.dtype) : 0.0f;
	for (int64_t o = 0; o < outer; o++) {
		int64_t base = o * c * inner;
		if (X->p != a->out.p)
			dtmk_copy_rows(X, base, &a->out, base, real * inner);
		for (int64_t k = real * inner; k < c * inner; k++)
			dtmk_store(&a->out, base + k, fill);
	}
}

#endif
