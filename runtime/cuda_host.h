/* cuda_host.h - the host-side decisions of the CUDA device, as pure
 * functions: launch shapes, the cuBLAS call a row-major GEMM action becomes,
 * which action waits for which on the two streams, the NCCL communicators a
 * plan needs, the GPU a rank takes, the NVRTC target and the on-disk cubin
 * cache's key and path.
 *
 * Nothing here includes a CUDA header or calls CUDA, so it is compiled into
 * dtm_runtime on every machine and unit-tested without a GPU
 * (tests/unit/test_cuda_host.c); runtime/dev_cuda.c turns these decisions
 * into CUDA, cuBLAS, NCCL and NVRTC calls.
 *
 * Errors: functions returning int give 0, or -1 with a message in err
 * (RT_ERR_LEN bytes).
 */
#ifndef DTM_CUDA_HOST_H
#define DTM_CUDA_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/plan.h"

/* ---- kernel launches ---- */

/* What the device allows (cudaDeviceProp). */
typedef struct RtCudaLimits {
	int max_block;       /* maxThreadsPerBlock */
	int64_t max_grid;    /* maxGridSize[0] */
	int smem_default;    /* sharedMemPerBlock: usable without opting in */
	int smem_optin;      /* sharedMemPerBlockOptin */
} RtCudaLimits;

typedef struct RtCudaLaunch {
	unsigned grid, block, smem;
	bool smem_optin;     /* smem above smem_default: set the kernel's max first */
	bool skip;           /* nothing to launch (threads == 0) */
} RtCudaLaunch;

/* grid = ceil(threads / block); block 0 means 256. */
int rt_cuda_launch_config(const DtmCudaKernel *k, const RtCudaLimits *lim, RtCudaLaunch *out,
			  char *err);

/* ---- GEMM ----
 *
 * A plan's GEMM is row-major: C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C.
 * cuBLAS is column-major, and a row-major matrix is its transpose in
 * column-major, so the call computes C^T = op(B)^T op(A)^T: cuBLAS's first
 * operand is the plan's B, its second the plan's A, and the transposes stay
 * as they are (folded into the call, never materialised). */
typedef struct RtCudaGemm {
	bool trans_first, trans_second; /* cuBLAS transa, transb */
	int rows, cols, k;              /* cuBLAS m (= plan n), n (= plan m), k */
	int ld_first, ld_second, ldc;
	long long stride_first, stride_second, stride_c;
	int batch;
	/* stride_c == 0 with several items: every item writes the same C (an
	 * accumulation), which a batched call would race on, so the items run
	 * one after another */
	bool sequential;
} RtCudaGemm;

int rt_cuda_gemm_desc(const DtmAction *a, RtCudaGemm *g, char *err);

/* The operand types cuBLAS takes with f32 compute: A and B of one type
 * (f32, bf16 or f16), C of that type or f32.  bf16/f16 run on tensor
 * cores with f32 accumulation; f32 stays f32 (no TF32). */
int rt_cuda_gemm_types(DtmDtype a, DtmDtype b, DtmDtype c, const char *label, char *err);

/* ---- --calibrate-gemm on the device ----
 *
 * The shapes `dtmc calibrate --device cuda` times cuBLAS at, through the
 * runtime's own GEMM call: m (rows of C) 1 to 16384, n 256 to 16384, k 64
 * to 16384, row-major, no transposes: what data, tensor and sequence
 * parallelism and micro-batches cut a transformer's GEMMs into, from a
 * few rows (launch-bound) to the sizes where the tensor cores saturate.
 * Writes the (m, n, k) of each into mnk (at most max); returns how many. */
#define RT_CUDA_CAL_SHAPES 120
int rt_cuda_cal_shapes(int64_t mnk[][3], int max);
/* Calls in one timed batch, given one call's seconds: enough for about
 * RT_CUDA_CAL_BATCH_S (a batch's events resolve to ~0.5 us), 1 to
 * RT_CUDA_CAL_MAX_REPS; one call when call_s is not a positive time. */
#define RT_CUDA_CAL_BATCH_S 0.005
#define RT_CUDA_CAL_MAX_REPS 1000
int rt_cuda_cal_reps(double call_s);

/* ---- streams and events ----
 *
 * Actions run on the stream DtmAction.stream names (0 compute, 1
 * communication).  An action waits for an action of the other stream when
 * their memory overlaps and one of them writes it (read after write, write
 * after read, write after write), by byte ranges of the arenas, since the
 * memory plan reuses activation space.  Only the latest such action needs
 * an event: a stream runs in order, and once stream s waited for action j
 * it is ordered after everything before j on the other stream too (so a
 * wait already covering j is not repeated).
 *
 * Consecutive SEND/RECV actions on one stream that do not touch each
 * other's memory form one NCCL group (ncclGroupStart/End), so a pair of
 * ranks that both send and then receive does not deadlock. */
typedef struct RtCudaSched {
	int n;               /* actions in the stage */
	signed char *stream; /* per action: 0, 1, or -1 when it does not run */
	int *wait;           /* the other stream's action to wait for, or -1 */
	bool *record;        /* some later action waits for this one */
	int *group_len;      /* first of a SEND/RECV group: its size; later
			      * members 0; every other action 1 */
	int nwaits;
} RtCudaSched;

/* forward_only: only DTM_PHASE_FORWARD actions run (evaluation). */
int rt_cuda_schedule(const DtmPlan *p, int stage, bool forward_only, RtCudaSched *s, char *err);
void rt_cuda_sched_free(RtCudaSched *s);

/* The distinct mesh-axes groups of the plan's communication actions over
 * its stages, in order of first use (at most max; returns the count).
 * ncclCommSplit is collective, so every rank must split the same groups in
 * the same order: a pipeline stage's rank sees only its stage, and
 * dev_cuda.c sums these over the ranks before splitting. */
int rt_cuda_comm_axes(const DtmPlan *p, uint32_t *axes, int max);

/* ---- devices ---- */

/* The GPU of a rank.  The local backend runs every rank as a thread of
 * this process and needs a GPU each (rank r takes GPU r); under mpirun a
 * process takes the GPU of its local rank (-1: unknown, taken as 0). */
int rt_cuda_pick_device(int ndev, bool local_backend, int rank, int world, int local_rank,
			char *err);

/* ---- NVRTC ---- */

/* The target for compute capability major.minor, given the SASS targets
 * this NVRTC supports (nvrtcGetSupportedArchs: 75, 80, 86, 90, ...):
 * sm_XY when supported (a cubin); else the newest supported one below it
 * as compute_XY PTX, which the driver compiles for the GPU; -1 when the
 * GPU is older than all of them. */
int rt_cuda_pick_arch(int major, int minor, const int *supported, int nsupported, int *arch,
		      bool *ptx, char *err);

#define RT_CUDA_MAX_OPTS 4
#define RT_CUDA_OPT_LEN 48

/* NVRTC's options for arch: --gpu-architecture=sm_XY (or compute_XY) and
 * the language level.  Never fast math: CUDA must match the CPU's losses
 * to 1e-5.  Returns the count. */
int rt_cuda_nvrtc_options(int arch, bool ptx, char opts[RT_CUDA_MAX_OPTS][RT_CUDA_OPT_LEN]);

/* The cache key of a compiled module: 32 hex digits of FNV-1a 128 over
 * the source, the options and the NVRTC version, each length-prefixed. */
void rt_cuda_cache_key(const char *src, size_t len, char opts[][RT_CUDA_OPT_LEN], int nopts,
		       int nvrtc_major, int nvrtc_minor, char out[33]);

/* The cache directory: $XDG_CACHE_HOME/dtm/cubin (an absolute path), else
 * $HOME/.cache/dtm/cubin; -1 when neither is set (no caching). */
int rt_cuda_cache_dir(const char *xdg_cache_home, const char *home, char *out, size_t n);

#endif
