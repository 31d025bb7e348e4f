/* dropout.c - which mask element each element of a dropout draws.
 *
 * A dropout mask is Philox keyed by (seed, site, step, index)
 * (support/philox.h, philox_dropout_keep).  The site is its salt, the
 * lowering's count of dropout calls in source order: the same for every
 * layout, and shared by a backward dropout with its forward and by a
 * recompute clone with its original.  The index is the element's flat
 * row-major index in the dropout's operand as the one-device program with
 * one micro-batch holds it: the full batch.  So a sample draws the same
 * mask whatever the micro-batch count, the data split, the tensor split or
 * the pipeline, and each rank draws the mask of its own shard, with no
 * communication.
 *
 * From a node's element to that index, two maps:
 *  - the shard: after `partition`, local coordinate l of dim j is global
 *    coordinate off_j + l, off_j = (the rank's position along the axes
 *    splitting j, the first axis major) * (the local extent).  That is
 *    chunk_offset for every element a global one lies behind; local rows
 *    past the global extent (uneven padding) get indexes past it too,
 *    computed the same way by every implementation;
 *  - the micro-batch: passes/microbatch.c gives micro-batch k of M the
 *    batch rows r with r mod M = k, row r' of the micro-batch being full
 *    row r' M + k.  It records on each dropout copy (IrAttrDropout) M,
 *    k, the dim of the operand holding the batch (bdim) and how many
 *    elements of that dim each batch row spans (inner: 1 for [B, T, D],
 *    T for a [B*T, D] reshape); coordinate c of bdim is full coordinate
 *    ((c / inner) M + k) inner + c mod inner, and the full tensor's bdim
 *    is M times longer.
 * The reference interpreters (interp/eval.c, interp/eval_spmd.c) compute the index
 * with ir_dropout_index; the code generators (codegen/emit_common.c) write
 * the same arithmetic into the kernel, with the offsets read from the
 * rank's mesh coordinates at run time.
 */
#include "ir/ir.h"

#include <string.h>

bool ir_dropout_has_mb(const IrNode *n)
{
	return n->op == IR_OP_DROPOUT && ir_attr_dropout(n)->has_mb && ir_attr_dropout(n)->mbs > 1;
}

bool ir_dropout_key(const IrModule *m, const IrNode *n, bool partitioned, const int64_t *coords,
                    IrDropKey *k)
{
	memset(k, 0, sizeof *k);
	k->rank = n->rank;
	k->bdim = -1;
	k->mbs = 1;
	k->inner = 1;
	bool ident = true;
	int64_t g[IR_MAX_RANK];
	const Placement *pl = ir_place(m, n);
	for (int j = 0; j < n->rank; j++) {
		k->local[j] = n->shape[j];
		k->parts[j] = partitioned ? placement_dim_parts(pl, &m->mesh, j) : 1;
		g[j] = partitioned ? ir_global_dim(m, n, j) : n->shape[j];
		if (k->parts[j] > 1) {
			ident = false;
			int64_t idx = 0;
			for (int a = 0; coords && a < pl->naxes[j]; a++) {
				int ax = pl->axes[j][a];
				if (ax < m->mesh.naxes)
					idx = idx * m->mesh.sizes[ax] + coords[ax];
			}
			k->off[j] = idx * k->local[j];
		}
	}
	const IrAttrDropout *at = ir_attr_dropout(n);
	if (ir_dropout_has_mb(n) && at->bdim >= 0 && at->bdim < n->rank) {
		ident = false;
		k->mbs = at->mbs;
		k->mb = at->mb;
		k->bdim = (int)at->bdim;
		k->inner = at->binner > 0 ? at->binner : 1;
		g[k->bdim] *= k->mbs;
	}
	int64_t s = 1;
	for (int j = n->rank - 1; j >= 0; j--) {
		k->stride[j] = s;
		s *= g[j];
	}
	return !ident;
}

uint64_t ir_dropout_index(const IrDropKey *k, int64_t i)
{
	uint64_t g = 0;
	for (int j = k->rank - 1; j >= 0; j--) {
		int64_t c = i % k->local[j] + k->off[j];
		i /= k->local[j];
		if (j == k->bdim)
			c = (c / k->inner * k->mbs + k->mb) * k->inner + c % k->inner;
		g += (uint64_t)c * (uint64_t)k->stride[j];
	}
	return g;
}
