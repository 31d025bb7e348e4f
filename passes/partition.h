/* partition.h - the global program becomes the per-rank (SPMD) program.
 *
 * Consumes a module after `propagate` (every value has a known placement)
 * and rewrites it in place: every node runs on its rank's shard (shapes
 * become local shard shapes), and collectives (all_gather, reduce_scatter,
 * all_reduce, all_to_all) and shard_slice nodes are inserted where an
 * operand's placement differs from what the op's local rule needs.  After
 * the pass each node's placement still describes the global value it holds
 * a shard of, so the global shape is recoverable and tools can report it.
 *
 * Uneven shards (torch.chunk with a short tail, train { uneven_shards
 * true }) are padded: one program serves every rank, so every rank stores
 * ceil(n / parts) rows of such a dim, the rows past n zero, and the node
 * records n (IrNode.padded).  Collectives stay even: a dim cut whole is
 * padded to a multiple of the group first and one gathered whole is
 * trimmed back (an all_to_all does both, on its two dims); ops whose
 * result would not be zero in the padding are followed by pad_mask.  A
 * dim split unevenly over several mesh axes moves one axis at a time where
 * its chunks tile, else through the whole dim, gathered or cut over all
 * its axes at once, which needs them listed in mesh order (the order a
 * group numbers its members; out of it an error says so).
 *
 * On a mesh of one rank the pass changes nothing.
 */
#ifndef DTM_PARTITION_H
#define DTM_PARTITION_H

#include "passes/passes.h"

bool pass_partition(IrModule *m, Diag *d, const PassOptions *opt);

/* As pass_partition; with fill_unknown, a value whose placement is not
 * known gets what its op's local rule produces from its operands (leaves:
 * replicated; optimizer state: its param's placement; the loss:
 * replicated), a stand-in for `propagate` in tests. */
bool pass_partition_ex(IrModule *m, Diag *d, bool fill_unknown);
/* As pass_partition_ex, with the replay of repeated nodes (the twins
 * seam, passes/partition_twin.c) on or off: off is the reference replay
 * must equal exactly (test_partition).  *replays (when not NULL): how many
 * nodes were replayed. */
bool pass_partition_replay(IrModule *m, Diag *d, bool fill_unknown, bool replay, int *replays);

#endif
