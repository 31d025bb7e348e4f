/* emit_c.h - the C code generator for CPUs.
 *
 * Writes one C file that includes runtime/plan.h and the CPU kernel headers
 * (codegen/cpu/dtmk*.h), defines one kernel per action that needs one (a
 * fused elementwise loop, or a wrapper calling dtmk_OP with the node's
 * constant shapes and attributes), the Plan's buffer and action tables and
 * `main`, which calls dtm_main.
 */
#ifndef DTM_EMIT_C_H
#define DTM_EMIT_C_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"

typedef struct CgEmitOptions {
	/* The repository root: the emitter includes every
	 * codegen/cpu/dtmk_*.h found there. */
	const char *src_dir;
} CgEmitOptions;

/* Writes the program for the final IR m (the per-rank program after
 * partition; on one rank the whole one) with its fusion and memory plans.
 * Returns false after reporting to d (an op the CPU back end cannot
 * express, a write error). */
bool cg_emit_c(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
               const CgEmitOptions *opt, Diag *d);

#endif
