/* state.h - ZeRO stages and FSDP units (train { zero N over AXES }).
 *
 * Two passes around `partition` (see state.c for why two):
 *   pass_state        after propagate: the ZeRO stage becomes placements
 *                     of optimizer steps, optimizer state, gradients and
 *                     (stage 3) params, so partition inserts the
 *                     reduce_scatters and all_gathers it implies.
 *   pass_state_units  after partition: ZeRO-3's param all_gathers grouped
 *                     per unit (block instance), and gathered again for the
 *                     backward pass under reshard_after_forward, each group
 *                     issued `prefetch` units ahead.
 * And an analysis of the per-rank program: the resident bytes of model
 * state by role, which REFERENCE.md's "Memory per parameter" predicts.
 */
#ifndef DTM_STATE_H
#define DTM_STATE_H

#include "passes/passes.h"

bool pass_state(IrModule *m, Diag *d, const PassOptions *opt);
bool pass_state_units(IrModule *m, Diag *d, const PassOptions *opt);

/* FSDP prefetch of depth n over L units (REFERENCE.md, "Worked layouts"):
 * writes to out the units that unit i prefetches and returns how many.
 * Units are numbered in order of first forward use.  Forward, unit i
 * prefetches i+1..i+n, none once i >= L-n; backward (unit L-1 runs
 * first) i-1..i-n, none for i < n.  n above L-1 counts as L-1, n <= 0 is
 * no prefetch.  L = 4, n = 2: forward 0 -> [1, 2], 1 -> [2, 3]; backward
 * 3 -> [2, 1], 2 -> [1, 0].  out holds at least min(n, L-1) ints. */
int pass_state_prefetch(int L, int n, int i, bool backward, int *out);

/* Per-rank resident bytes of model state in a partitioned module (local
 * shard shapes times dtype sizes): params, the gradient buffers (the nodes
 * named grad.P, at the placement they are kept in), the f32 master copies
 * (opt.master.P) and the other optimizer state (moments, momentum). */
typedef struct StateMem {
	int64_t param, grad, master, optim;
} StateMem;

void pass_state_memory(const IrModule *m, StateMem *out);

#endif
