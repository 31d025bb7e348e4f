/* emit_c.h - the C code generator for CPUs.
 *
 * Writes one C file that includes runtime/plan.h and the CPU kernel headers
 * (codegen/cpu/dtmk*.h), defines one kernel per action that needs one (a
 * fused elementwise loop, or a wrapper calling dtmk_OP with the node's
 * constant shapes and attributes), the Plan's buffer and action tables and
 * `main`, which calls dtm_main.  The tables are printed from the DtmPlan of
 * codegen/plan_build.h, the one `dtmc inspect` reads.
 */
#ifndef DTM_EMIT_C_H
#define DTM_EMIT_C_H

#include <stdio.h>

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "runtime/plan.h"

typedef struct CgEmitOptions {
	/* The repository root: the emitter includes every
	 * codegen/cpu/dtmk_*.h found there. */
	const char *src_dir;
	/* Also embed the CUDA kernels (codegen/emit_cuda.h) in the plan:
	 * DtmPlan.cuda_source and cuda_kernels. */
	bool cuda;
} CgEmitOptions;

/* Writes the program for the final IR m (the per-rank program after
 * partition; on one rank the whole one) with its fusion and memory plans
 * and the Plan built from them (codegen/plan_build.h), whose tables it
 * prints.  Returns false after reporting to d (an op the CPU back end
 * cannot express, a write error). */
bool cg_emit_c(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
               const DtmPlan *p, const CgEmitOptions *opt, Diag *d);

/* One kernel of the plan (DtmPlan.kernels[k]): the node it computes, and
 * the node ids of its action's args (inputs, then the output), so other
 * back ends emit kernels with the C back end's numbering and calling
 * convention.  A grad_norm over more operands than one action carries is
 * nchunks kernels (chunk 0, 1, ...) over consecutive slices of them. */
typedef struct CgPlanKernel {
	int node;
	bool fused;      /* the root of a fused elementwise group */
	int chunk, nchunks;
	int nargs;
	int args[DTM_MAX_ARGS];
} CgPlanKernel;

/* Writes up to cap of the plan's kernels, in order, to out (which may be
 * NULL) and returns how many there are (codegen/plan_build.c: the numbering
 * DtmAction.kernel uses). */
int cg_plan_kernels(const IrModule *m, const FusePlan *fp, const MemPlan *mp, CgPlanKernel *out,
                    int cap);

#endif
