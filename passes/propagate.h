/* propagate.h - placement propagation: every value gets a known placement.
 *
 * Runs after optim and before partition.  User annotations (params,
 * inputs, annotated values, choose() points) are kept; every other value
 * gets the placement its op rules and its users make cheapest, with its
 * origin in IrNode.place_from / place_loc (see propagate.c).
 */
#ifndef DTM_PROPAGATE_H
#define DTM_PROPAGATE_H

#include "passes/passes.h"

bool pass_propagate(IrModule *m, Diag *d, const PassOptions *opt);
/* As pass_propagate, with its memo seam (passes/propagate_memo.c) on or
 * off: off decides every node afresh, the reference the memo must equal
 * exactly (test_propagate).  *hits (when not NULL): the questions the
 * memo answered. */
bool pass_propagate_memo(IrModule *m, Diag *d, const PassOptions *opt, bool memo, long *hits);

/* Estimated bytes one rank sends to turn a value of `bytes` global bytes
 * placed `from` into `to`, under the ring formulas (all_gather,
 * reduce_scatter and all_to_all (N-1)/N of the data, all_reduce 2(N-1)/N;
 * Replicate -> Shard and Replicate -> Partial free).  Mesh axes of size 1
 * cost nothing. */
double pass_propagate_cost(const Mesh *mesh, const Placement *from, const Placement *to,
                           double bytes);

/* The routing ops' leading group dims (propagate_rules.c), which a split
 * leaves local; partition_rules.c reads them too. */
int prop_route_groups(const IrModule *m, const IrNode *n);

#endif
