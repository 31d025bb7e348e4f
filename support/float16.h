/* float16.h - bf16 and f16 (IEEE binary16) to and from f32: the one copy
 * of the rounding rules in C (header-only: the runtime, the reference
 * interpreter, the checkpoint reader and the generated programs' kernels,
 * codegen/cpu/dtmk.h, include it).  The CUDA kernels have their own, in
 * codegen/cuda (NVRTC compiles them without an include path).
 *
 * To f32 is exact.  From f32 rounds to nearest, ties to even; NaN stays a
 * quiet NaN (it would round to infinity), values past the largest finite
 * number become infinity, and f16's subnormals are produced exactly.
 *
 * The generated kernels are compiled with -fassociative-math, so how gcc
 * vectorises a fused loop (and so the last bits of an f16 sum) depends on
 * the exact form of these functions: an integer-only f16_from_f32 that
 * gives the same bits for every input still moved an f16 model's grad
 * norm in the 6th digit.  Change them only with the e2e tests' f16 runs.
 */
#ifndef DTM_SUPPORT_FLOAT16_H
#define DTM_SUPPORT_FLOAT16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* A select, not an early return for NaN, so loops over it vectorise (the
 * GEMMs' bf16 results are narrowed through it: scalar, that pass was 9% of
 * a bf16 GPT step). */
static inline uint16_t bf16_from_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, q = (u >> 16) | 0x40; /* quiet NaN */
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float f16_to_f32(uint16_t h)
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

static inline uint16_t f16_from_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00); /* NaN */
	if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(s | 0x7c00);
	if (a < 0x38800000u) { /* subnormal or zero in f16 */
		float af;
		memcpy(&af, &a, 4);
		/* scale so the f16 subnormal step (2^-24) becomes 1, round to
		 * nearest even by the FPU (the default rounding mode, which dtm
		 * never changes) */
		return (uint16_t)(s | (uint32_t)nearbyintf(af * 16777216.0f));
	}
	/* rebias the exponent (127 -> 15) and round off 13 bits, ties to
	 * even; a mantissa carry bumps the exponent, as it should */
	uint32_t r = a + 0xfffu + ((a >> 13) & 1) - ((uint32_t)(127 - 15) << 23);
	return (uint16_t)(s | (r >> 13));
}

#endif
