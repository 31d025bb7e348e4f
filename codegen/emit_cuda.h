/* emit_cuda.h - the CUDA code generator.
 *
 * Writes CUDA C++ for every kernel of the plan (DtmPlan.kernels, in the C
 * back end's order: codegen/emit_c.h's cg_plan_kernels): fused
 * elementwise groups and every other op that becomes a DTM_ACT_KERNEL,
 * for f32, bf16 and f16 with f32 arithmetic.  GEMMs and collectives are
 * not kernels (the runtime calls cuBLAS and NCCL).  The source is
 * self-contained: the device library in codegen/cuda/ (*.cuh) is pasted in,
 * shapes are constants, and NVRTC compiles it without an include path.
 * runtime/plan.h's DtmCudaArgs and DtmCudaKernel are the calling
 * convention and launch shape.
 */
#ifndef DTM_EMIT_CUDA_H
#define DTM_EMIT_CUDA_H

#include <stdio.h>

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"

/* One kernel's launch, with its name's storage. */
typedef struct CgCudaKernel {
	char name[32];
	int64_t threads; /* total threads (0: nothing to launch) */
	int block;
	int smem_bytes; /* dynamic shared memory, at most CG_CUDA_MAX_SMEM */
} CgCudaKernel;

#define CG_CUDA_BLOCK 256       /* threads per block of most kernels */
#define CG_CUDA_ATTN_BLOCK 128  /* attention's blocks */
#define CG_CUDA_MAX_SMEM 49152  /* no kernel needs the opt-in beyond 48 KiB */
#define CG_CUDA_MAX_BLOCKS 1024 /* blocks of a multi-phase kernel (they loop) */

/* Writes the CUDA source for m's plan kernels to out.  src_dir is the
 * repository root (for codegen/cuda/).  When table is not NULL it gets
 * the kernels' names and launches (cap entries at most).  *nkernels (when
 * not NULL) gets the number of kernels.  Returns false after reporting to
 * d: an op without a CUDA kernel, codegen/cuda/ unreadable. */
bool cg_emit_cuda(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                  const char *src_dir, CgCudaKernel *table, int cap, int *nkernels, Diag *d);

/* Writes, as C for the training binary's file, `static const char
 * dtm_cuda_source[]` (the source above) and `static const DtmCudaKernel
 * dtm_cuda_kernels[]` (one per plan kernel). */
bool cg_emit_cuda_tables(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                         const char *src_dir, Diag *d);

/* `dtmc cuda-src`: writes the CUDA source of m (which has been through the
 * pass pipeline) with its fusion and memory plans to path ("-": standard
 * output). */
bool cg_write_cuda_source(const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                          const char *path, const char *src_dir, Diag *d);

/* ---- launch shapes (pure functions of the shapes; unit-tested) ---- */

/* One thread per element. */
CgCudaKernel cg_cuda_launch_elementwise(int64_t n);
/* Threads per row of a row kernel over rows of len: a warp, or a whole
 * block for long rows. */
int cg_cuda_row_tpo(int64_t len);
/* rows * tpo threads in blocks of CG_CUDA_BLOCK. */
CgCudaKernel cg_cuda_launch_rows(int64_t rows, int64_t len);
/* Attention on [B, T, D] with H heads: P threads per row (a power of two
 * dividing the head dim, so each holds at most 16 columns where it can),
 * and BK rows per shared-memory tile. */
int cg_cuda_attn_parts(int64_t hd);
int cg_cuda_attn_tile(int64_t hd);
CgCudaKernel cg_cuda_launch_attention(int64_t B, int64_t T, int64_t D, int64_t H, bool bwd);
/* A multi-phase kernel of `items` work items. */
CgCudaKernel cg_cuda_launch_phased(int64_t items, int block, int smem_bytes);

#endif
