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
 * Where the parts do not divide dim 0, the shards are torch.chunk's,
 * padded to equal size (FSDP2's rule; partition pads them as it pads any
 * uneven placement): every param with a dim is sharded at any group size.
 * A param that Z already splits keeps its placement (it is sharded
 * already); a scalar, which has no dim to split, stays whole over Z with a
 * warning naming it, never silently.  HSDP
 * is the same rule with Z one axis of a 2-D data mesh: gradients are
 * partial over both axes and the planner turns P(rep, dp) -> S(dp) into a
 * reduce_scatter over dp and an all_reduce over rep.
 *
 * Which collective reshards each value is then partition's (reshard.c
 * plans it); ZeRO-3's all_gathers are grouped and placed per unit by
 * fsdp_units.c, after partition, and coalesce.c makes each unit's (or
 * ZeRO-1/2 bucket's) gathers and reduce_scatters one collective.
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

/* Why zero_split keeps a param whole. */
typedef enum { SPLIT_OK, KEEP_SPLIT_ALREADY, KEEP_SCALAR, KEEP_UNEVEN } SplitWhy;

/* P with the axes `add` appended to dim d; false when they do not fit. */
static bool with_axes(const Mesh *mesh, Placement P, int d, uint32_t add, Placement *out)
{
	for (int a = 0; a < mesh->naxes; a++)
		if (add & (1u << a)) {
			if (P.naxes[d] >= IR_MAX_AXES)
				return false;
			P.axes[d][P.naxes[d]++] = (uint8_t)a;
		}
	*out = P;
	return true;
}

/* Partition pads a dim the parts do not divide (torch.chunk shards) when
 * one mesh axis splits it and no other dim is padded (partition.h). */
static bool uneven_ok(const Mesh *mesh, const Placement *P, const IrNode *n)
{
	int padded = 0;
	for (int d = 0; d < n->rank && d < P->ndims; d++) {
		int64_t parts = placement_dim_parts(P, mesh, d);
		if (parts > 1 && n->shape[d] % parts != 0) {
			if (P->naxes[d] > 1)
				return false;
			padded++;
		}
	}
	return padded <= 1;
}

/* S: the param's placement with the axes of Z it does not use yet added
 * to one dim: dim 0, as FSDP2 shards, where the parts divide it; else the
 * first dim they divide (a vocab-parallel embedding [vocab over tp, d]
 * takes dp on d); else dim 0 or the first dim that partition can pad
 * (torch.chunk shards, padded to equal size).  KEEP_UNEVEN where none
 * can: each dim would be cut unevenly over several axes. */
static SplitWhy zero_split(const IrModule *m, const IrNode *param, uint32_t Z, Placement *S)
{
	Placement P = param_place(m, param);
	uint32_t add = Z & ~pass_placement_split_axes(&P);
	if (!add)
		return KEEP_SPLIT_ALREADY;
	if (param->rank == 0 || P.ndims < 1)
		return KEEP_SCALAR;
	for (int even = 1; even >= 0; even--)
		for (int d = 0; d < param->rank && d < P.ndims; d++) {
			Placement T;
			if (!with_axes(&m->mesh, P, d, add, &T))
				continue;
			if (even ? pass_placement_even(&m->mesh, &T, param->rank, param->shape)
			         : uneven_ok(&m->mesh, &T, param)) {
				*S = T;
				return SPLIT_OK;
			}
		}
	return KEEP_UNEVEN;
}

/* The zero axes' names, "dp" or "(rep, dp)". */
static void axes_text(const Mesh *mesh, uint32_t Z, char *buf, size_t cap)
{
	int n = 0;
	size_t k = 0;
	for (int a = 0; a < mesh->naxes; a++)
		n += (Z >> a) & 1;
	buf[0] = 0;
	for (int a = 0, i = 0; a < mesh->naxes && k < cap; a++) {
		if (!((Z >> a) & 1))
			continue;
		k += (size_t)snprintf(buf + k, cap - k, "%s%s%s%s", i == 0 && n > 1 ? "(" : "",
		                      i ? ", " : "", mesh->names[a] ? mesh->names[a] : "?",
		                      i == n - 1 && n > 1 ? ")" : "");
		i++;
	}
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
	if (stage > 0 && !Z) {
		char ax[64];
		axes_text(&m->mesh, m->train.zero_axes, ax, sizeof ax);
		bool one = !(m->train.zero_axes & (m->train.zero_axes - 1));
		diag_warning(d, m->train.loc[IR_TRAIN_ZERO], "zero %d has no effect: its %s %s %s one "
		             "rank%s, so every rank holds all model state (zero 0)", stage,
		             one ? "axis" : "axes", ax[0] ? ax : "(none)", one ? "has" : "have",
		             one ? "" : " each");
	}
	if (stage <= 0 || !Z)
		return true;
	int nsplit = 0, nkept = 0, nalready = 0;
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
		SplitWhy why = zero_split(m, param, Z, &S);
		if (why == KEEP_SPLIT_ALREADY) {
			nalready++;
			continue;
		}
		if (why != SPLIT_OK) {
			char ax[64];
			axes_text(&m->mesh, Z, ax, sizeof ax);
			diag_warning(d, param->loc, "zero %d: param '%s' stays whole over %s: %s", stage,
			             param->name ? param->name : "?", ax,
			             why == KEEP_SCALAR
			                     ? "a scalar has no dim to shard"
			                     : "every dim would be cut unevenly over several mesh "
			                       "axes, whose shards move only through the whole dim, "
			                       "costing more than the memory it would save");
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
		fprintf(stderr, "dtmc: zero: stage %d: %d param%s split, %d already split over the "
		        "zero axes, %d kept whole\n", stage, nsplit, nsplit == 1 ? "" : "s", nalready,
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
