/* plan_build.h - the Plan as data: what `dtmc build` emits, in memory.
 *
 * cg_plan_build turns the final IR with its fuse and memory plans into the
 * DtmPlan (runtime/plan.h) that the generated C file spells out as tables:
 * codegen/emit_c.c prints this structure, and the tools (`dtmc inspect`,
 * `dtmc sweep`) read it, so they see exactly what the runtime runs.  Only
 * the kernels' code stays with the emitters (kernels[] entries are NULL).
 * driver/driver.h builds it once per compile (drv_plan) and hands it to
 * the emitters.
 */
#ifndef DTM_PLAN_BUILD_H
#define DTM_PLAN_BUILD_H

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "runtime/plan.h"

/* The Plan `dtmc build` emits, built in memory from the final IR and its
 * fuse and memory plans: buffers, stages with their actions, arenas, inputs,
 * loss, train config; kernels[] entries NULL, kernel_names set.  All memory
 * from the arena.  Returns NULL after reporting to d. */
DtmPlan *cg_plan_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, Arena *a, Diag *d);
/* Buffer tables kept from one lean plan to the next (`dtmc sweep` builds
 * one per candidate): zeroed when allocated, after which lean builds write
 * only the fields a lean buffer has, so the lines of the rest are never
 * touched again.  Zero-initialise; cg_plan_lean_store_free frees it. */
typedef struct CgLeanStore {
	DtmBuffer *bufs;
	int cap;
} CgLeanStore;
void cg_plan_lean_store_free(CgLeanStore *s);

/* The plan for costing many candidates (`dtmc sweep`): what cost_plan_step
 * reads, without the text only reports and checkpoints read (formatting it
 * was a tenth of the plan's time) or the shapes, split layouts and init
 * that would read most of each IrNode.  Buffers have name (borrowed from
 * m, valid while m is), role, dtype, arena, offset, bytes and stage (the
 * inputs also rank, shape and global shape: the feed's cost), the rest
 * zero; actions' label is the op name.  With `keep` the buffer table
 * is keep's (valid until the next build with it), else from `a`. */
DtmPlan *cg_plan_build_lean(const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                            CgLeanStore *keep, Arena *a, Diag *d);

#endif
