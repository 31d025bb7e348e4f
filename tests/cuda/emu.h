/* emu.h - just enough of CUDA to run dtm's generated kernels on the host.
 *
 * The kernel check (tests/cuda/kcheck.sh) compiles `dtmc cuda-src` output
 * as C++ after this header, so every generated kernel can be run on a
 * machine without a GPU and compared with the C back end's kernel on the
 * same random buffers.  Each CUDA thread is a fiber (emu.cpp); blocks run
 * one after another, their threads interleaved at __syncthreads and at
 * warp operations, which are real barriers here.  Blocks in sequence are
 * enough for dtm's multi-phase kernels (dtmk_cuda.cuh: a block only ever
 * waits on work with earlier tickets), and make `static` a faithful
 * __shared__.  Not emulated: concurrency between blocks, memory ordering
 * (fences are no-ops), timing.
 */
#ifndef DTM_TESTS_CUDA_EMU_H
#define DTM_TESTS_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct emu_dim3 {
	unsigned x, y, z;
};

emu_dim3 emu_thread_idx();
emu_dim3 emu_block_idx();
emu_dim3 emu_block_dim();
emu_dim3 emu_grid_dim();
#define threadIdx emu_thread_idx()
#define blockIdx emu_block_idx()
#define blockDim emu_block_dim()
#define gridDim emu_grid_dim()

/* The dynamic shared memory (`extern __shared__` is rewritten to this). */
extern float emu_dyn_smem[];

void __syncthreads();
void __nanosleep(unsigned ns);
inline void __threadfence()
{
}

/* Deposits this lane's value and returns all 32 lanes' of its warp. */
void emu_warp_exchange(uint64_t v, uint64_t *all);
int emu_lane();

template <typename T> T __shfl_xor_sync(unsigned mask, T v, int o)
{
	(void)mask;
	uint64_t bits = 0, all[32];
	memcpy(&bits, &v, sizeof v);
	emu_warp_exchange(bits, all);
	T r;
	memcpy(&r, &all[(emu_lane() ^ o) & 31], sizeof r);
	return r;
}

inline unsigned __ballot_sync(unsigned mask, int pred)
{
	(void)mask;
	uint64_t all[32];
	emu_warp_exchange(pred != 0, all);
	unsigned m = 0;
	for (int l = 0; l < 32; l++)
		m |= all[l] ? 1u << l : 0u;
	return m;
}

inline unsigned atomicAdd(unsigned *p, unsigned v)
{
	unsigned o = *p;
	*p += v;
	return o;
}

inline double atomicAdd(double *p, double v)
{
	double o = *p;
	*p += v;
	return o;
}

template <typename T> T __ldcg(const T *p)
{
	return *p;
}

inline float __int_as_float(int i)
{
	float f;
	memcpy(&f, &i, 4);
	return f;
}

inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}

inline unsigned __umulhi(unsigned a, unsigned b)
{
	return (unsigned)(((uint64_t)a * b) >> 32);
}

inline int __ffs(unsigned x)
{
	return __builtin_ffs((int)x);
}

/* The registry the generated table fills (tests/cuda/kcheck.sh). */
struct DtmCudaArgs;
struct EmuKernel {
	const char *name;
	void (*fn)(DtmCudaArgs);
};

#endif
