/* reshard.h - plans the collectives that turn one placement into another.
 *
 * A plan is a list of steps, each changing one mesh axis (DESIGN.md
 * section 4): all_gather pops the last (minor) axis of a dim, shard_slice
 * appends a replicated axis to a dim, all_to_all moves the last axis of one
 * dim to the end of another, reduce_scatter turns a partial axis into the
 * minor split of a dim, and all_reduce clears partial axes (one axis, or
 * every partial axis the target drops at once).  Replicate -> Partial is
 * never planned: the partitioner does not ask for it.
 *
 * pass_reshard_plan searches those steps for the cheapest sequence
 * (Dijkstra over placements, ring alpha-beta time of REFERENCE.md
 * "Collectives"), so a multi-axis change need not detour through
 * Replicate; pass_reshard_greedy is that detour (gather everything, reduce
 * partials, slice to the target), kept as the baseline tests compare with.
 *
 * Shapes are global; every step cuts its dims evenly, except for a value
 * that is uneven (torch.chunk) at either end: then a dim may be cut from
 * whole or gathered whole (partition.c pads and trims), or cut where the
 * finer chunks tile the coarser ones.
 */
#ifndef DTM_RESHARD_H
#define DTM_RESHARD_H

#include "ir/ir.h"

#define RESHARD_MAX_STEPS 32

typedef struct ReshardStep {
	IrOp op;          /* ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, ALL_TO_ALL, SHARD_SLICE */
	uint32_t axes;    /* the group (one axis, or several for all_reduce) */
	int dim;          /* gather/scatter/slice dim; all_to_all: the dim that gets split */
	int dim2;         /* all_to_all: the dim that is concatenated (loses the axis) */
	IrRed red;        /* all_reduce, reduce_scatter */
	Placement after;  /* the value's placement after this step */
	double cost;      /* estimated seconds */
} ReshardStep;

typedef struct ReshardPlan {
	int nsteps;
	ReshardStep steps[RESHARD_MAX_STEPS];
	double cost;
} ReshardPlan;

/* Drops mesh axes of size 1 (a no-op split or partial) from p. */
void pass_placement_canon(const Mesh *m, Placement *p);

/* True when every split dim of `shape` divides evenly under p. */
bool pass_placement_even(const Mesh *m, const Placement *p, int rank, const int64_t *shape);
/* The mesh axes p splits any dim over, as a mask (none when unknown). */
uint32_t pass_placement_split_axes(const Placement *p);

/* The cheapest plan from `from` to `to` (both canonical, same rank) for a
 * value of global `shape` and dtype `dt`.  Returns false, with the reason
 * in why, when no plan exists (a partial target the source lacks, or dims
 * that do not divide). */
bool pass_reshard_plan(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                       const Placement *from, const Placement *to, ReshardPlan *out,
                       char *why, size_t cap);

/* The plan through Replicate, for comparison. */
bool pass_reshard_greedy(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                         const Placement *from, const Placement *to, ReshardPlan *out,
                         char *why, size_t cap);

#endif
