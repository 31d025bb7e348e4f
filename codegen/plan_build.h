/* plan_build.h - the Plan as data: what `dtmc build` emits, in memory.
 *
 * cg_plan_build turns the final IR with its fuse and memory plans into the
 * DtmPlan (runtime/plan.h) that the generated C file spells out as tables:
 * codegen/emit_c.c prints this structure, and the tools (`dtmc inspect`,
 * `dtmc sweep`) read it, so they see exactly what the runtime runs.  Only
 * the kernels' code stays with the emitters (kernels[] entries are NULL).
 */
#ifndef DTM_PLAN_BUILD_H
#define DTM_PLAN_BUILD_H

#include "../ir/ir.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../runtime/plan.h"

/* The Plan `dtmc build` emits, built in memory from the final IR and its
 * fuse and memory plans: buffers, stages with their actions, arenas, inputs,
 * loss, train config; kernels[] entries NULL, kernel_names set.  All memory
 * from the arena.  Returns NULL after reporting to d. */
DtmPlan *cg_plan_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, Arena *a, Diag *d);
/* The same plan without the text only reports and checkpoints read:
 * buffers' placement NULL, actions' label the op name, buffers' name
 * borrowed from m (valid while m is).  For costing many candidates
 * (`dtmc sweep`), where formatting them was a tenth of the plan's time. */
DtmPlan *cg_plan_build_lean(const IrModule *m, const FusePlan *fp, const MemPlan *mp, Arena *a,
                            Diag *d);

/* lower + every pass + fuse + memplan + cg_plan_build for a model file with
 * dtmc's options (mesh, -D defines, --train overrides); *mout gets the final
 * IR.  NULL after reporting to d. */
typedef struct CgCompileOptions {
	const char *mesh;
	int ndefines;
	const char *define_names[32];
	const char *define_values[32];
	int ntrain;
	const char *train[32];
} CgCompileOptions;
DtmPlan *cg_compile(const char *path, const CgCompileOptions *o, Arena *a, Diag *d, IrModule **mout);

#endif
