/* dtmk.h - the calling convention of dtm's CPU kernels.
 *
 * The training binary's C file (written by codegen/emit_c.c) includes the
 * kernel headers of this folder.  Each non-elementwise IR op NAME (the name
 * in ir/ops.def) has one kernel
 *
 *     static void dtmk_NAME(const DtmCtx *ctx, const DtmkArgs *a);
 *
 * that reads a->in[0..nin) and writes a->out, with the op's attributes in
 * a->ints / a->f etc. (the same fields as IrAttrs).  The emitter writes one
 * small wrapper per node that fills a DtmkArgs with the node's constant
 * shapes and attributes and the buffer pointers of its Plan action, so each
 * call is specialised to its shapes once the compiler inlines it.
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
#include <string.h>

#include "runtime/plan.h"

#define DTMK_MAX_IN 8

typedef struct DtmkTensor {
	void *p;
	DtmDtype dtype;
	int rank;
	int64_t shape[DTM_MAX_RANK];
	int64_t numel;
} DtmkTensor;

typedef struct DtmkArgs {
	int nin;
	DtmkTensor in[DTMK_MAX_IN];
	DtmkTensor out;
	int64_t ints[8];
	int nints;
	double f[2];
	double fx[6]; /* optimizer hyperparameters (IR_ATTR_OPTIM, ir/optim.h) */
	uint32_t mesh_axes;
	int red;
	int flag;
	int node; /* IR node id, for messages */
} DtmkArgs;

static inline float dtmk_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t dtmk_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static inline float dtmk_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	if (e == 0) {
		if (m == 0) {
			u = s;
		} else { /* subnormal: renormalise */
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			u = s | (e << 23) | ((m & 0x3ff) << 13);
		}
	} else if (e == 31) {
		u = s | 0x7f800000u | (m << 13);
	} else {
		u = s | ((e + 127 - 15) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t dtmk_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00);
	if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(s | 0x7c00);
	if (a < 0x38800000u) { /* subnormal or zero in f16 */
		float af;
		memcpy(&af, &a, 4);
		/* scale so the f16 subnormal step (2^-24) becomes 1, round to
		 * nearest even by the FPU */
		return (uint16_t)(s | (uint32_t)nearbyintf(af * 16777216.0f));
	}
	uint32_t r = a + 0xfffu + ((a >> 13) & 1) - ((uint32_t)(127 - 15) << 23);
	return (uint16_t)(s | (r >> 13));
}

/* Element i of t as f32, whatever t's dtype. */
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

/* tanh for GELU: (1 - e)/(1 + e) with e = exp(-2|x|) costs one expf where
 * libm's tanhf goes through expm1f, several times slower; GELU was a third
 * of a GPT step.  Absolute error ~1e-7 (relative error grows for |x| below
 * ~1e-2, which GELU does not see: it uses 0.5*x*(1 + tanh)), so the TANH
 * op itself keeps tanhf. */
static inline float dtmk_tanh_gelu(float x)
{
	float ax = fabsf(x);
	if (ax > 9.0f) /* tanh(9) rounds to 1 in f32 */
		return copysignf(1.0f, x);
	float e = expf(-2.0f * ax);
	return copysignf((1.0f - e) / (1.0f + e), x);
}

/* The product of dims [from, to) of t. */
static inline int64_t dtmk_span(const DtmkTensor *t, int from, int to)
{
	int64_t n = 1;
	for (int d = from; d < to; d++)
		n *= t->shape[d];
	return n;
}

#endif
