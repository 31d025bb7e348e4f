/* eval_spmd.h - the f64 interpreter for a partitioned (per-rank) module.
 *
 * Runs every rank of the mesh at once, in lockstep, node by node: local
 * ops through the single-device interpreter (ir_eval_node on each rank's
 * IrEval), collectives and shard_slice here, across the ranks' buffers,
 * over the groups of ir/mesh.c.  It is the compiler's own equivalence
 * oracle: a partitioned program must give, gathered, what ir_eval gives on
 * the global program.
 *
 * Placements after `partition` say which shard of which global value a node
 * holds, so params start as the shards of the global init (the same
 * Philox keying as ir_eval_init_params), inputs are scattered from global
 * arrays, and any value can be gathered back.  Uneven shards are padded
 * (IrNode.padded): the padding is zero when scattered and skipped when
 * gathered; the collectives themselves are even (partition pads first).
 *
 * Usage:
 *     IrSpmd s;
 *     ir_spmd_init(&s, m);              // m after partition
 *     ir_spmd_init_params(&s, seed);
 *     ir_spmd_set_global(&s, x, data);  // each input, global row-major
 *     ir_spmd_run(&s, d, seed, step);
 *     ir_spmd_gather(&s, node, out);    // the global value
 *     ir_spmd_free(&s);
 */
#ifndef DTM_INTERP_EVAL_SPMD_H
#define DTM_INTERP_EVAL_SPMD_H

#include "interp/eval.h"

typedef struct IrSpmd {
	const IrModule *m;
	int64_t nranks;
	IrEval *rank; /* one interpreter per rank; rank[r].val[n] is r's shard */
} IrSpmd;

bool ir_spmd_init(IrSpmd *s, const IrModule *m);
void ir_spmd_free(IrSpmd *s);
/* Each param and state leaf gets its rank's shard of the global init. */
void ir_spmd_init_params(IrSpmd *s, uint64_t seed);
/* The global shape of node n (ir_global_dim); returns the rank. */
int ir_spmd_global_shape(const IrSpmd *s, int n, int64_t *shape);
/* Its element count. */
int64_t ir_spmd_global_numel(const IrSpmd *s, int n);
/* Scatters a global value (row-major, ir_spmd_global_shape) to every
 * rank's shard of node n. */
void ir_spmd_set_global(IrSpmd *s, int n, const double *global);
/* Reassembles node n's global value: shards concatenated, partial values
 * reduced, each replica counted once. */
void ir_spmd_gather(const IrSpmd *s, int n, double *global);
/* Runs every node on every rank; reports the first failure to d. */
bool ir_spmd_run(IrSpmd *s, Diag *d, uint64_t seed, int64_t step);

#endif
