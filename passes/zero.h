/* zero.h - pass "zero": ZeRO stages and HSDP as placements (train { zero N
 * over AXES }), and what model state costs per rank.
 *
 * After propagate, before partition (see zero.c): the ZeRO stage becomes
 * placements of optimizer steps, optimizer state, gradients and (stage 3)
 * params, so partition inserts the reduce_scatters and all_gathers they
 * imply.  fsdp_units.h then groups stage 3's all_gathers per unit.
 */
#ifndef DTM_PASSES_ZERO_H
#define DTM_PASSES_ZERO_H

#include "passes/passes.h"

bool pass_zero(IrModule *m, Diag *d, const PassOptions *opt);

/* The axes ZeRO shards over (train zero_axes) that have more than one
 * rank on m's mesh: 0 means ZeRO changes nothing. */
uint32_t pass_zero_axes(const IrModule *m);

/* Per-rank resident bytes of model state in a partitioned module (local
 * shard shapes times dtype sizes): params, the gradient buffers (the nodes
 * named grad.P, at the placement they are kept in), the f32 master copies
 * (opt.master.P) and the other optimizer state (moments, momentum): what
 * REFERENCE.md's "Memory per parameter" predicts per ZeRO stage. */
typedef struct StateMem {
	int64_t param, grad, master, optim;
} StateMem;

void pass_state_memory(const IrModule *m, StateMem *out);

#endif
