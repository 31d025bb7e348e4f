/* fuse.h - which nodes the code generator computes together.
 *
 * An analysis over the final IR (it does not change the module): chains of
 * elementwise ops become one loop, and transposes feeding matmuls become a
 * GEMM's trans flag.  passes/memplan.c and codegen read the same FusePlan,
 * so a node that is fused away gets neither a buffer nor an action.  The
 * pipeline's `fuse` entry computes it once per compile and keeps it beside
 * the module (passes.h's PassAnalyses), not on it.
 */
#ifndef DTM_FUSE_H
#define DTM_FUSE_H

#include "ir/ir.h"

typedef struct FusePlan {
	int n;
	/* Per node: the node whose kernel computes it (itself when it is the
	 * last of its group or runs alone); -1 for nodes outside any group
	 * (leaves, non-elementwise ops). */
	int *root;
	/* Computed inside a later node's loop: no buffer, no action. */
	bool *internal;
	/* A transpose of the last two dims whose every use is a GEMM that
	 * reads the source with its trans flag: no buffer, no action. */
	bool *folded;
	/* Per group root: its lowest member (every member x has
	 * first[root[x]] <= x <= root[x]), so readers list a group's members
	 * without scanning the whole module. */
	int *first;
} FusePlan;

/* Groups larger than this are split: the loop's argument list is bounded
 * by PASS_MAX_ACTION_ARGS (passes/target.h: inputs plus the output). */
#define FUSE_MAX_INPUTS 7
#define FUSE_MAX_MEMBERS 24

/* Computes the plan into memory from `a`.  Returns false when out of
 * memory (reported to d). */
bool pass_fuse_plan(const IrModule *m, Arena *a, Diag *d, FusePlan *fp);
/* The ops the fused-loop generator has a C expression for. */
bool pass_fuse_op_ok(IrOp op);
/* True when the matmul maps onto one strided, batched GEMM: each
 * operand's batch dims either equal the result's or are all 1. */
bool pass_matmul_is_gemm(const IrModule *m, const IrNode *mm);
/* True when n is a permute swapping the last two dims (batch dims kept). */
bool pass_is_last2_transpose(const IrNode *n);
/* Operand i of node id as the kernel reads it: a folded transpose resolves
 * to its source with *trans set. */
int pass_fuse_operand(const IrModule *m, const FusePlan *fp, int id, int i, bool *trans);

#endif
