/* dtmk_cuda.cuh - the base of dtm's CUDA kernels: types, conversions,
 * reductions and the work-ticket scheme of multi-phase kernels.
 *
 * codegen/emit_cuda.c pastes this file and then the other
 * codegen/cuda/dtmk_cuda_*.cuh (in name order) into the CUDA source of a
 * training binary, after its definition of DtmCudaArgs, and writes one
 * extern "C" kernel per plan kernel that calls the templates here with
 * the node's shapes as constants.  NVRTC compiles the source as it is:
 * it includes nothing, so no include path is needed, and bf16/f16 are
 * converted here bit for bit as codegen/cpu/dtmk.h does (the CPU and GPU
 * round the same way).  Only CUDA built-ins are used, no inline PTX, so
 * tests/cuda's host emulator runs the same text.  Everything computes in
 * f32 (row statistics and losses in f32 or f64, as the CPU kernels do).
 *
 * Multi-phase kernels: one launch whose work is a list of items in
 * phases, where phase p's items need every item of phase p - 1 done (a
 * partial sum, then its total).  Blocks take items in order from an
 * atomic ticket (dtmc_next_item) and wait for the previous phase's count
 * (dtmc_wait_phase).  A block waits only on items with lower tickets,
 * which blocks already running hold, so this cannot deadlock whatever the
 * number of resident blocks.  The ticket and counters are __device__
 * globals of the module (DtmcSync, one per kernel); the last block out
 * zeroes them (dtmc_sync_exit), so the next launch starts clean.
 */

typedef long long dtmc_i64;
typedef unsigned long long dtmc_u64;

/* bf16 and f16 storage: distinct types so loads and stores overload. */
struct dtmc_bf16 {
	unsigned short x;
};
struct dtmc_f16 {
	unsigned short x;
};

#define DTMC_BLOCK 256
#define DTMC_INF __int_as_float(0x7f800000)
#define DTMC_NAN __int_as_float(0x7fc00000)

/* ---- conversions (codegen/cpu/dtmk.h's rounding) ---- */

__device__ __forceinline__ float dtmc_bf16_to_f32(unsigned short h)
{
	return __uint_as_float((unsigned)h << 16);
}

__device__ __forceinline__ unsigned short dtmc_f32_to_bf16(float f)
{
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
		return (unsigned short)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
	return (unsigned short)(u >> 16);
}

/* f16 as codegen/cpu/dtmk.h converts it (round to nearest even; plain C,
 * so the kernels also run under the host emulator of tests/cuda). */
__device__ __forceinline__ float dtmc_f16_to_f32(unsigned short h)
{
	unsigned s = (unsigned)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
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
	return __uint_as_float(u);
}

__device__ __forceinline__ unsigned short dtmc_f32_to_f16(float f)
{
	unsigned u = __float_as_uint(f);
	unsigned s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (unsigned short)(s | 0x7e00);
	if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (unsigned short)(s | 0x7c00);
	if (a < 0x38800000u) /* subnormal or zero: steps of 2^-24, rounded to even */
		return (unsigned short)(s | (unsigned)rintf(__uint_as_float(a) * 16777216.0f));
	unsigned r = a + 0xfffu + ((a >> 13) & 1) - ((unsigned)(127 - 15) << 23);
	return (unsigned short)(s | (r >> 13));
}

__device__ __forceinline__ float dtmc_round_bf16(float x)
{
	return dtmc_bf16_to_f32(dtmc_f32_to_bf16(x));
}

__device__ __forceinline__ float dtmc_round_f16(float x)
{
	return dtmc_f16_to_f32(dtmc_f32_to_f16(x));
}

/* ---- loads and stores as f32, whatever the storage ---- */

__device__ __forceinline__ float dtmc_ld(const float *p, dtmc_i64 i)
{
	return p[i];
}
__device__ __forceinline__ float dtmc_ld(const dtmc_bf16 *p, dtmc_i64 i)
{
	return dtmc_bf16_to_f32(p[i].x);
}
__device__ __forceinline__ float dtmc_ld(const dtmc_f16 *p, dtmc_i64 i)
{
	return dtmc_f16_to_f32(p[i].x);
}
__device__ __forceinline__ float dtmc_ld(const int *p, dtmc_i64 i)
{
	return (float)p[i];
}

__device__ __forceinline__ void dtmc_st(float *p, dtmc_i64 i, float v)
{
	p[i] = v;
}
__device__ __forceinline__ void dtmc_st(dtmc_bf16 *p, dtmc_i64 i, float v)
{
	p[i].x = dtmc_f32_to_bf16(v);
}
__device__ __forceinline__ void dtmc_st(dtmc_f16 *p, dtmc_i64 i, float v)
{
	p[i].x = dtmc_f32_to_f16(v);
}
__device__ __forceinline__ void dtmc_st(int *p, dtmc_i64 i, float v)
{
	p[i] = (int)v;
}

/* ---- scalar functions (codegen/cpu/dtmk_fwd.h's) ---- */

__device__ __forceinline__ float dtmc_relu(float x)
{
	return x > 0 ? x : 0.0f;
}

/* GPT-2's tanh approximation. */
__device__ __forceinline__ float dtmc_gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float dtmc_gelu_grad(float x)
{
	const float c = 0.7978845608028654f, k = 0.044715f;
	float t = tanhf(c * (x + k * x * x * x));
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
}

/* Two branches so exp never overflows. */
__device__ __forceinline__ float dtmc_sigmoid(float x)
{
	if (x >= 0)
		return 1.0f / (1.0f + expf(-x));
	float z = expf(x);
	return z / (1.0f + z);
}

__device__ __forceinline__ float dtmc_silu(float x)
{
	return x * dtmc_sigmoid(x);
}

__device__ __forceinline__ float dtmc_silu_grad(float x)
{
	float s = dtmc_sigmoid(x);
	return s * (1.0f + x * (1.0f - s));
}

/* The larger, NaN winning (the CPU's `v > m || isnan(v) ? v : m`). */
__device__ __forceinline__ float dtmc_max(float a, float b)
{
	return a > b || a != a ? a : b;
}

/* ---- Philox4x32-10, as runtime/philox.h: dropout masks ---- */

__device__ __forceinline__ void dtmc_philox(unsigned c[4], unsigned k0, unsigned k1)
{
	for (int r = 0; r < 10; r++) {
		unsigned hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
		unsigned hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
		unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
		c[0] = n0;
		c[1] = lo1;
		c[2] = n2;
		c[3] = lo0;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
}

/* dtm_dropout_keep: the DROP domain, counter = (index, step | salt << 32);
 * i is the element's index in the full-batch global operand (ir/dropout.c). */
__device__ __forceinline__ float dtmc_dropout(const DtmCudaArgs &a, float x, float rate,
                                              unsigned salt, dtmc_i64 i)
{
	if (rate <= 0)
		return x;
	if (rate >= 1)
		return 0.0f;
	unsigned c[4] = {(unsigned)i, (unsigned)((dtmc_u64)i >> 32), (unsigned)a.step, salt};
	dtmc_philox(c, (unsigned)a.seed, (unsigned)(a.seed >> 32) ^ 0x44524f50u);
	float u = (float)(c[0] >> 8) * (1.0f / 16777216.0f);
	return u >= rate ? x * (1.0f / (1.0f - rate)) : 0.0f;
}

/* ---- reductions within a warp and a block ---- */

template <typename T> __device__ __forceinline__ T dtmc_warp_sum(T v)
{
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float dtmc_warp_max(float v)
{
	for (int o = 16; o; o >>= 1)
		v = dtmc_max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sum over the TPO threads of a row group: a warp (TPO = 32) or the whole
 * block (TPO = blockDim.x, a multiple of 32).  Every thread of the group
 * gets the total, added in a fixed order. */
template <int TPO, typename T> __device__ __forceinline__ T dtmc_group_sum(T v)
{
	v = dtmc_warp_sum(v);
	if (TPO <= 32)
		return v;
	__shared__ T sh[32];
	__syncthreads(); /* an earlier call may still be reading sh */
	if ((threadIdx.x & 31) == 0)
		sh[threadIdx.x >> 5] = v;
	__syncthreads();
	T t = 0;
	for (int w = 0; w < TPO / 32; w++)
		t += sh[w];
	return t;
}

template <int TPO> __device__ __forceinline__ float dtmc_group_max(float v)
{
	v = dtmc_warp_max(v);
	if (TPO <= 32)
		return v;
	__shared__ float sh[32];
	__syncthreads();
	if ((threadIdx.x & 31) == 0)
		sh[threadIdx.x >> 5] = v;
	__syncthreads();
	float t = -DTMC_INF;
	for (int w = 0; w < TPO / 32; w++)
		t = dtmc_max(t, sh[w]);
	return t;
}

/* The row a thread works on and its lane in the row's group, for kernels
 * launched with TPO threads per row in blocks of DTMC_BLOCK. */
template <int TPO> __device__ __forceinline__ dtmc_i64 dtmc_row(int *lane)
{
	*lane = (int)(threadIdx.x % TPO);
	return (dtmc_i64)blockIdx.x * (DTMC_BLOCK / TPO) + threadIdx.x / TPO;
}

/* The flat index of an elementwise kernel's thread. */
__device__ __forceinline__ dtmc_i64 dtmc_tid()
{
	return (dtmc_i64)blockIdx.x * blockDim.x + threadIdx.x;
}

/* ---- multi-phase kernels (see the top of this file) ---- */

#define DTMC_MAX_PHASES 4

struct DtmcSync {
	unsigned ticket;
	unsigned exited;
	unsigned done[DTMC_MAX_PHASES];
};

/* The block's next item (the same for all its threads). */
__device__ __forceinline__ unsigned dtmc_next_item(DtmcSync *s)
{
	__shared__ unsigned item;
	__syncthreads(); /* everyone has read the previous item */
	if (threadIdx.x == 0)
		item = atomicAdd(&s->ticket, 1u);
	__syncthreads();
	return item;
}

/* Waits until `need` items of phase p are done; what they wrote is then
 * visible (read it with __ldcg: another SM wrote it). */
__device__ __forceinline__ void dtmc_wait_phase(DtmcSync *s, int p, unsigned need)
{
	if (threadIdx.x == 0) {
		volatile unsigned *d = &s->done[p];
		while (*d < need)
			__nanosleep(64);
		__threadfence();
	}
	__syncthreads();
}

/* Marks one item of phase p done after the block's writes: each thread
 * fences its own writes, then one thread counts the item. */
__device__ __forceinline__ void dtmc_item_done(DtmcSync *s, int p)
{
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0)
		atomicAdd(&s->done[p], 1u);
}

/* Called by every block once it has no more items: the last one zeroes
 * the counters for the next launch. */
__device__ __forceinline__ void dtmc_sync_exit(DtmcSync *s)
{
	if (threadIdx.x != 0)
		return;
	__threadfence();
	if (atomicAdd(&s->exited, 1u) == gridDim.x - 1) {
		s->ticket = 0;
		for (int p = 0; p < DTMC_MAX_PHASES; p++)
			s->done[p] = 0;
		s->exited = 0;
		__threadfence();
	}
}

/* Sum over the block (DTMC_BLOCK threads) in a fixed order. */
template <typename T> __device__ __forceinline__ T dtmc_block_sum(T v)
{
	return dtmc_group_sum<DTMC_BLOCK, T>(v);
}
