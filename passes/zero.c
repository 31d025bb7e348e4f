/* zero.c - pass "zero": ZeRO stages 0-3 and HSDP as placements
 * (train { zero N over AXES }), and what model state then costs per rank.
 *
 * A ZeRO stage says where model state lives, and where a value lives is
 * what a placement says.  So "zero" runs after `propagate` (which has tied
 * every gradient, optimizer step and optimizer state to its param) and
 * before `partition`, and only rewrites placements; partition then inserts
 * the collectives they imply with the same planner as for any layout (P ->
 * S is a reduce_scatter, S -> R an all_gather), and the SPMD interpreter
 * checks the result like any other.  Before propagate the choice would be
 * undone (propagate re-ties state to its param); after partition it would
 * have to redo the shard shapes and collectives partition already makes.
 * Over the axes Z (m->train.zero_axes, dp by default), with S = the
 * param's placement plus the Z axes on dim 0 (FSDP2's per-parameter dim-0
 * sharding, after any tp axis already there):
 *   0  nothing: gradients follow their params (all_reduce: DDP).
 *   1  the step and its state (m, v, mom, master) placed S; the gradient
 *      keeps its partial sums (a full-size buffer), which the step reshards
 *      to S: a reduce_scatter.  Partition hands the step a slice of the
 *      replicated param and all_gathers the updated shards back into it.
 *   2  as 1, and the gradient itself placed S: reduce_scattered where it is
 *      produced, only the shard kept.
 *   3  as 2, and the param stored as S: partition all_gathers it in front
 *      of its uses.
 * A param that Z already splits, or that would be split unevenly (uneven
 * torch.chunk shards: dim 0 not divided by the parts, or another dim
 * already padded), is left as stage 0 leaves it: whole over Z.  HSDP
 * is the same rule with Z one axis of a 2-D data mesh: gradients are
 * partial over both axes and the planner turns P(rep, dp) -> S(dp) into a
 * reduce_scatter over dp and an all_reduce over rep.
 *
 * Which collective reshards each value is then partition's (reshard.c
 * plans it); ZeRO-3's all_gathers are grouped and placed per unit by
 * fsdp_units.c, after partition.
 */
#include "passes/zero.h"
#include "passes/reshard.h"
#include "ir/optim_ops.h"

#include <stdio.h>
#include <string.h>

static uint32_t live_axes(const Mesh *m)
{
	uint32_t u = 0;
	for (int a = 0; a < m->naxes && a < IR_MAX_AXES; a++)
		if (m->sizes[a] > 1)
			u |= 1u << a;
	return u;
}

/* The param's own placement, canonical, without partial sums. */
static Placement param_place(const IrModule *m, const IrNode *param)
{
	Placement P = *ir_place(m, param);
	if (!P.known)
		placement_replicated(&P, param->rank);
	pass_placement_canon(&m->mesh, &P);
	P.partial = 0;
	P.partial_op = IR_RED_SUM;
	return P;
}

/* S: the param's placement with the axes of Z it does not use yet appended
 * to dim 0.  False when there is nothing to add or dim 0 would not divide. */
static bool zero_split(const IrModule *m, const IrNode *param, uint32_t Z, Placement *S)
{
	Placement P = param_place(m, param);
	uint32_t add = Z & ~pass_placement_split_axes(&P);
	if (param->rank == 0 || P.ndims < 1 || !add)
		return false;
	for (int a = 0; a < m->mesh.naxes; a++)
		if (add & (1u << a)) {
			if (P.naxes[0] >= IR_MAX_AXES)
				return false;
			P.axes[0][P.naxes[0]++] = (uint8_t)a;
		}
	if (!pass_placement_even(&m->mesh, &P, param->rank, param->shape))
		return false;
	*S = P;
	return true;
}

static void set_place(IrModule *m, IrNode *n, const Placement *p, int from)
{
	ir_place_set(m, n, p); /* out of memory: the verifier says */
	ir_set_place_from(m, n, from);
	if (from < 0)
		ir_set_place_loc(m, n, (SrcLoc){0});
}

uint32_t pass_zero_axes(const IrModule *m)
{
	return m->train.zero_axes & live_axes(&m->mesh);
}

/* Writes only the placements (place, place_from, place_loc) of the
 * optimizer steps and their operands. */
bool pass_zero(IrModule *m, Diag *d, const PassOptions *opt)
{
	int stage = m->train.zero;
	uint32_t live = live_axes(&m->mesh), Z = m->train.zero_axes & live;
	if (stage <= 0 || !Z)
		return true;
	int nsplit = 0, nkept = 0;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ADAMW_STEP && n->op != IR_OP_SGD_STEP)
			continue;
		IrOptimOps ix;
		if (!ir_optim_ops(n, &ix)) {
			pass_fault(m, d, n->loc, "zero: %%%d: operands do not match the "
			           "attributes", n->id);
			return false;
		}
		IrNode *param = m->nodes[n->ops[ix.p]];
		Placement S;
		if (!zero_split(m, param, Z, &S)) {
			nkept++;
			continue;
		}
		nsplit++;
		set_place(m, n, &S, param->id);
		const int st[4] = {ix.m, ix.v, ix.mom, ix.master};
		for (int k = 0; k < 4; k++)
			if (st[k] >= 0)
				set_place(m, m->nodes[n->ops[st[k]]], &S, param->id);
		IrNode *g = m->nodes[n->ops[ix.g]];
		if (stage == 1) {
			/* kept whole and unreduced; partition drops the partial axes
			 * the gradient's op does not produce */
			Placement G = param_place(m, param);
			G.partial = live & ~pass_placement_split_axes(&G);
			set_place(m, g, &G, param->id);
		} else {
			set_place(m, g, &S, param->id);
		}
		if (stage == 3)
			set_place(m, param, &S, -1);
	}
	if (opt && opt->verbose)
		fprintf(stderr, "dtmc: zero: stage %d: %d param%s split, %d kept whole (already "
		        "split over the zero axes, or uneven)\n", stage, nsplit, nsplit == 1 ? "" : "s",
		        nkept);
	return true;
}

/* ---- memory ---- */

static int64_t local_bytes(const IrNode *n)
{
	return ir_node_numel(n) * ir_dtype_size(n->dtype);
}

void pass_state_memory(const IrModule *m, StateMem *out)
{
	memset(out, 0, sizeof *out);
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_PARAM)
			out->param += local_bytes(n);
		else if (n->op == IR_OP_STATE && ir_link(m, n) == IR_LINK_OPT_MASTER)
			out->master += local_bytes(n);
		else if (n->op == IR_OP_STATE)
			out->optim += local_bytes(n);
		else if (n->role == IR_ROLE_GRAD && ir_link(m, n) == IR_LINK_GRAD)
			out->grad += local_bytes(n);
	}
}
