/* fsdp_units.h - pass "fsdp_units": ZeRO-3's param all_gathers per FSDP
 * unit (block instance), gathered again for the backward pass under
 * reshard_after_forward, each group issued `prefetch` units ahead.  After
 * partition (see fsdp_units.c); nothing to do below stage 3.
 */
#ifndef DTM_PASSES_FSDP_UNITS_H
#define DTM_PASSES_FSDP_UNITS_H

#include "passes/passes.h"

bool pass_fsdp_units(IrModule *m, Diag *d, const PassOptions *opt);

/* FSDP prefetch of depth n over L units (REFERENCE.md, "Worked layouts"):
 * writes to out the units that unit i prefetches and returns how many.
 * Units are numbered in order of first forward use.  Forward, unit i
 * prefetches i+1..i+n, none once i >= L-n; backward (unit L-1 runs
 * first) i-1..i-n, none for i < n.  n above L-1 counts as L-1, n <= 0 is
 * no prefetch.  L = 4, n = 2: forward 0 -> [1, 2], 1 -> [2, 3]; backward
 * 3 -> [2, 1], 2 -> [1, 0].  out holds at least min(n, L-1) ints. */
int pass_fsdp_prefetch(int L, int n, int i, bool backward, int *out);

#endif
