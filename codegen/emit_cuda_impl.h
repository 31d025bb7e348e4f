/* emit_cuda_impl.h - what codegen/emit_cuda.c (the driver: launch shapes,
 * writers, the file) and codegen/emit_cuda_ops.c (one emitter per op) share.
 * Internal to the CUDA code generator; emit_cuda.h is its interface.
 */
#ifndef DTM_EMIT_CUDA_IMPL_H
#define DTM_EMIT_CUDA_IMPL_H

#include "codegen/emit_c.h"
#include "codegen/emit_common.h"
#include "codegen/emit_cuda.h"

/* The kernel being written: the plan's kernel, its name, and its launch,
 * which the op's emitter sets next to the code it writes. */
typedef struct CudaEmit {
	FILE *out;
	const IrModule *m;
	const FusePlan *fp;
	const MemPlan *mp;
	Diag *d;
	const CgPlanKernel *pk; /* the kernel being written */
	char name[32];          /* its name */
	CgCudaKernel k;         /* its launch (the emitters set it) */
} CudaEmit;

/* ---- writers (emit_cuda.c) ---- */

/* printf for kernel code, as QBE's emitf: besides %d (int), %u
 * (unsigned), %s and %%, it takes
 *   %D  an int64_t, as "%lld"         %L  an int64_t literal: "%lldLL"
 *   %U  an int64_t as "%lldu"         %F  a double, an f32 literal
 *   %G  a double, an f64 literal      %N  the kernel's name (no argument)
 *   %I  an int j: the kernel's arg j as a const typed pointer (an input)
 *   %W  an int j: arg j as a writable typed pointer
 *   %O  the output, the last arg, as a typed pointer (no argument)
 *   %T  an int j: the CUDA type of arg j (dtmc_bf16, float, ...) */
void cg_cu_printf(CudaEmit *e, const char *fmt, ...);

int64_t cg_cu_cdiv(int64_t a, int64_t b);
/* The CUDA storage type of a dtype: float, dtmc_bf16, dtmc_f16, int. */
const char *cg_cu_ctype(IrDtype t);
const IrNode *cg_cu_node(const CudaEmit *e, int id);
/* ((const T *)a.p[j]): the kernel's arg j as a typed pointer. */
void cg_cu_put_ptr(const CudaEmit *e, int j, bool in);
/* The output, the last arg, and its index. */
void cg_cu_put_out(const CudaEmit *e);
int cg_cu_out_arg(const CudaEmit *e);
/* Float literals: f32 (DTMC_INF/NAN for the non-finite) and f64. */
void cg_cu_put_f32(FILE *out, double v);
void cg_cu_put_f64(FILE *out, double v);
/* The product of dims [from, to) of n. */
int64_t cg_cu_span(const IrNode *n, int from, int to);
/* extern "C" __global__ void __launch_bounds__(block) NAME(DtmCudaArgs a) {
 * ... }. */
void cg_cu_begin_kernel(CudaEmit *e, int block);
void cg_cu_end_kernel(CudaEmit *e);
/* A multi-phase kernel's __device__ DtmcSync and nparts partial sums of
 * type t; the parts' name (or 0 without parts). */
void cg_cu_put_scratch(CudaEmit *e, const char *t, int64_t nparts);
void cg_cu_put_parts_ptr(CudaEmit *e, int64_t nparts);
/* An elementwise kernel's `i` and early return; sets the launch. */
void cg_cu_put_ew_head(CudaEmit *e, int64_t n);
/* `target += ...`: flat index idx over dims ext[0..n) (row-major) as an
 * offset with strides st. */
void cg_cu_put_decompose(FILE *out, const char *idx, const int64_t *ext, const int64_t *st, int n,
                         const char *target, const char *indent);
/* This rank's position in the group of mesh axes `axes`, as `idx`, or
 * as a local of another name. */
void cg_cu_put_group_index(CudaEmit *e, uint32_t axes);
void cg_cu_put_group_var(CudaEmit *e, const char *name, uint32_t axes);

/* ---- the op emitters (emit_cuda_ops.c) ---- */

/* Writes the kernel of e->pk (named e->name) and sets e->k; false after
 * reporting an op without a CUDA kernel. */
bool cg_cu_emit_kernel(CudaEmit *e);

#endif
