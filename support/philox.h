/* philox.h - the counter-based RNG behind initialisation, dropout and
 * synthetic data (header-only: the compiler's reference interpreter includes
 * it too, so both produce bit-identical values).
 *
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11).  A counter-based generator is a pure function
 * (key, counter) -> 128 random bits, so any rank can compute element i of a
 * tensor without generating elements 0..i-1 first.  That is what makes the
 * initial weights independent of the mesh, the dtype and the parameter order:
 * an element's value depends only on (seed, hash(tensor name), global index).
 *
 * Key and counter layout used throughout dtm:
 *   key     = { seed lo32, seed hi32 ^ domain }     domain 0 = init
 *   counter = { a lo32, a hi32, b lo32, b hi32 }
 * init:    a = global element index, b = FNV-1a 64 hash of the tensor name
 * dropout: a = the element's index in the full-batch global operand
 *          (ir/dropout.c), b = step | salt << 32
 * data:    see runtime/data.c (domains PHILOX_DOMAIN_*).
 */
#ifndef DTM_SUPPORT_PHILOX_H
#define DTM_SUPPORT_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "support/hash.h" /* hash_fnv1a64: a tensor name's stream */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* Domains keep the streams of different consumers apart even when their
 * counters coincide (they are XORed into the high key word). */
#define PHILOX_DOMAIN_INIT 0u
#define PHILOX_DOMAIN_DROPOUT 0x44524f50u /* "DROP" */
#define PHILOX_DOMAIN_MARKOV 0x4d41524bu  /* "MARK": chain transition table */
#define PHILOX_DOMAIN_SEQ 0x53455153u     /* "SEQS": sampled sequences */
#define PHILOX_DOMAIN_REGX 0x52454758u    /* "REGX": regression inputs */
#define PHILOX_DOMAIN_REGW 0x52454757u    /* "REGW": regression weights */

static inline void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                     uint32_t out[4])
{
	uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
	uint32_t k0 = key_in[0], k1 = key_in[1];
	for (int r = 0; r < 10; r++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
		uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		/* Random123 bumps the key after every round; the bump after the
		 * last round is never used. */
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

/* One 128-bit block for (seed, domain, a, b) in the layout described above. */
static inline void philox_block(uint64_t seed, uint32_t domain, uint64_t a, uint64_t b,
                                    uint32_t out[4])
{
	uint32_t ctr[4] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32)};
	uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ domain};
	philox4x32_10(ctr, key, out);
}

/* Uniform in [0, 1) with 24 random bits: exactly representable in f32, so
 * the result never rounds up to 1.0f. */
static inline float philox_unit(uint32_t x)
{
	return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* 32 raw random bits for (seed, stream, index) in the init domain. */
static inline uint32_t philox_rand_u32(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	philox_block(seed, PHILOX_DOMAIN_INIT, index, stream, o);
	return o[0];
}

/* Uniform float in [0, 1) for (seed, stream, index). */
static inline float philox_rand_f32(uint64_t seed, uint64_t stream, uint64_t index)
{
	return philox_unit(philox_rand_u32(seed, stream, index));
}

/* Standard normal from two words of a block (Box-Muller, cosine branch).
 * u1 is in (0, 1] so log never sees 0; computed in double so the float
 * result is the same on every libm that rounds log/cos/sqrt correctly to a
 * few ulps of double. */
static inline double philox_box_muller(uint32_t w0, uint32_t w1)
{
	double u1 = ((double)(w0 >> 8) + 1.0) * (1.0 / 16777216.0);
	double u2 = (double)(w1 >> 8) * (1.0 / 16777216.0);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

/* Element `index` (global, row-major) of the tensor whose name hashes to
 * name_hash, drawn from N(mean, std^2). */
static inline float philox_init_normal(uint64_t seed, uint64_t name_hash, uint64_t index, float mean,
                                    float std)
{
	uint32_t o[4];
	philox_block(seed, PHILOX_DOMAIN_INIT, index, name_hash, o);
	return (float)((double)mean + (double)std * philox_box_muller(o[0], o[1]));
}

/* Element `index` drawn uniformly from [lo, hi). */
static inline float philox_init_uniform(uint64_t seed, uint64_t name_hash, uint64_t index, float lo,
                                     float hi)
{
	uint32_t o[4];
	philox_block(seed, PHILOX_DOMAIN_INIT, index, name_hash, o);
	float r = lo + (hi - lo) * philox_unit(o[2]);
	return r < hi ? r : lo; /* guard the rounding of lo + (hi-lo)*u up to hi */
}

/* 1 if element `index` of the dropout mask for (salt, step) is kept, else 0.
 * salt names the dropout site (the lowering's count of dropout calls); the
 * index is the element's in the one-device, one-micro-batch operand, so
 * the mask is the same on every mesh and micro-batch count. */
static inline int philox_dropout_keep(uint64_t seed, uint32_t salt, uint32_t step, uint64_t index,
                                   float rate)
{
	uint32_t o[4];
	philox_block(seed, PHILOX_DOMAIN_DROPOUT, index, (uint64_t)step | (uint64_t)salt << 32,
	                 o);
	return philox_unit(o[0]) >= rate;
}

#endif
