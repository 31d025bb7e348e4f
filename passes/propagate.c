/* propagate.c - gives every value a placement.
 *
 * Consumes the global IR after optim (forward, backward and optimizer
 * nodes; placements known only where the user annotated them and where
 * optim copied a param's onto its state).  Produces the same nodes, every
 * one with a known placement and its origin: place_from = the node it was
 * propagated from, or -1 with place_loc = the annotation (or, for a leaf
 * nothing constrains, its declaration).  Nothing is inserted: partition
 * turns placement differences into collectives.
 *
 * Each op is seen through factors, as in Shardy: every dim of every
 * operand and of the result names a factor or must stay unsplit (a
 * normalised dim, a broadcast dim of size 1, a concatenated dim); a factor
 * absent from the result is contracted, and splitting it leaves the result
 * partial over those axes (matmul's k, a reduced dim, embed's vocab).  A
 * node's candidate factor shardings are merges of what its operands and
 * its users' requirements say, in the op's priority order; the candidate
 * of least estimated resharding cost (pass_propagate_cost, summed over its
 * operand and user edges) wins.  Sweeps run forward then backward until
 * nothing changes (at most PR_SWEEPS), so a value nothing annotated gets
 * its placement from producers first and its users refine it.
 *
 * Partials resolve at their users: a node keeps the partial its op
 * produces (the row-parallel matmul's partial(tp)), and every user needs a
 * non-partial operand, so partition reduces on that edge (all_reduce, or
 * reduce_scatter when the user wants the value split) -- except the linear
 * ops add, sub, neg, scale, permute and reshape, through which operands
 * partial (sum) over the same axes pass the partial on (gradient
 * contributions add up, and a weight gradient is transposed, before one
 * reduction).  Three kinds of
 * node are resolved at the node itself, their placement never partial:
 * scalars (the loss, grad_norm: replicated), a param's gradient grad.P
 * (P's placement: the DP all_reduce or ZeRO reduce_scatter follows the op
 * that makes it) and optimizer steps and state (their param's).  Mesh axes
 * of size 1 are dropped everywhere, user annotations included, so a
 * single-device mesh leaves every value replicated.
 */
#include "propagate.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PR_MAXF (3 * IR_MAX_RANK) /* factors of one op */
#define PR_MAXOPS 16              /* operands a rule describes; more: unconstrained */
#define PR_MAXSRC 32              /* merge sources per node */
#define PR_SWEEPS 8

/* An op's factor view.  opf/resf: the factor of each operand / result dim,
 * -1 = must stay unsplit. */
typedef struct Rule {
	bool ok;                 /* false: no rule; the node is not a free one */
	int nf, nops;
	int8_t opf[PR_MAXOPS][IR_MAX_RANK];
	int8_t resf[IR_MAX_RANK];
	bool reduce[PR_MAXF];    /* contracted: split -> result partial */
	bool strict[PR_MAXF];    /* must divide evenly (reshape groups) */
	IrRed red;
	int heads_f;             /* attention: its parts must divide heads */
	int64_t heads;
	bool linear;             /* add, sub, neg, scale, permute, reshape: operands
	                          * partial (sum) over the same axes pass it through */
	uint8_t order[PR_MAXOPS]; /* operand priority when merging */
} Rule;

/* A factor sharding: the mesh axes of each factor. */
typedef struct Assign {
	uint8_t n[PR_MAXF];
	uint32_t used;    /* axes taken, partial ones included */
	uint32_t partial; /* add/sub: the pass-through partial (sum) */
	bool cover[PR_MAXF]; /* assign_from: the placement names this factor */
	bool lock[PR_MAXF];  /* unsplit on purpose: merges leave it alone */
	/* last: only ax[f][0 .. n[f]) is ever read, so assign_clear leaves
	 * it as it is (choose clears an Assign per candidate) */
	uint8_t ax[PR_MAXF][IR_MAX_AXES];
} Assign;

static void assign_clear(Assign *a)
{
	memset(a, 0, offsetof(Assign, ax));
}

typedef struct Use {
	int node, slot;
} Use;

enum { K_FREE, K_USER, K_TIED, K_SCALAR };

typedef struct Prop {
	IrModule *m;
	Rule *rules;   /* [nnodes] */
	uint8_t *kind; /* [nnodes] */
	int *tie;      /* [nnodes]: K_TIED: the param whose placement it takes */
	int *ustart;   /* [nnodes + 1]: uses of node i are uses[ustart[i] ..) */
	Use *uses;
	uint32_t live; /* mesh axes of size > 1 */
	/* [nnodes]: something choose() reads changed since the node's last
	 * visit (see visit) */
	uint8_t *dirty;
	/* choose()'s users' requirements, one per use of the node it is
	 * choosing for (room for the most uses of any node): they read the
	 * node's current placement, not the candidate, so every candidate's
	 * cand_cost shares them */
	Placement *req;
	bool *has_req;
	double *bytes; /* [nnodes]: node_bytes, computed once */
} Prop;

static IrNode *nd(const Prop *P, int id)
{
	return P->m->nodes[id];
}

static double node_bytes(const IrNode *n)
{
	int64_t e = ir_node_numel(n);
	return (double)(e < 0 ? 0 : e) * ir_dtype_size(n->dtype);
}

/* node_bytes of node id, from the table (shapes do not change here). */
static double nbytes(const Prop *P, int id)
{
	return P->bytes[id];
}

/* ---- the cost of resharding ---- */

static uint32_t dim_axes(const Placement *p)
{
	uint32_t s = 0;
	for (int d = 0; d < p->ndims && d < IR_MAX_RANK; d++)
		for (int k = 0; k < p->naxes[d] && k < IR_MAX_AXES; k++)
			s |= 1u << p->axes[d][k];
	return s;
}

/* Axis a stays where it is: same dim, same axes before it. */
static bool stays(const Placement *from, const Placement *to, int d, int k)
{
	if (d >= to->ndims || k >= to->naxes[d])
		return false;
	for (int j = 0; j <= k; j++)
		if (from->axes[d][j] != to->axes[d][j])
			return false;
	return true;
}

static double axis_size(const Mesh *mesh, int a)
{
	return a < mesh->naxes && mesh->sizes[a] > 1 ? (double)mesh->sizes[a] : 1.0;
}

/* Cheapest order: reduce partials (into a split where `to` wants one),
 * slice locally, move axes between dims, gather last. */
double pass_propagate_cost(const Mesh *mesh, const Placement *from, const Placement *to,
                           double bytes)
{
	if (!from->known || !to->known)
		return 0;
	/* the same placement (most edges, once things settle): nothing moves */
	if (from->ndims == to->ndims && from->partial == to->partial) {
		bool same = true;
		for (int d = 0; d < from->ndims && d < IR_MAX_RANK && same; d++) {
			same = from->naxes[d] == to->naxes[d];
			for (int k = 0; same && k < from->naxes[d] && k < IR_MAX_AXES; k++)
				same = from->axes[d][k] == to->axes[d][k];
		}
		if (same)
			return 0;
	}
	uint32_t fdims = dim_axes(from), tdims = dim_axes(to);
	double local = bytes;
	for (int a = 0; a < IR_MAX_AXES; a++)
		if (fdims & (1u << a))
			local /= axis_size(mesh, a);
	double cost = 0;
	uint32_t sliced = 0;
	for (int a = 0; a < IR_MAX_AXES; a++) {
		double n = axis_size(mesh, a);
		if (!(from->partial & (1u << a)) || (to->partial & (1u << a)) || n <= 1)
			continue;
		if ((tdims & (1u << a)) && !(fdims & (1u << a))) {
			cost += (n - 1) / n * local; /* reduce_scatter */
			local /= n;
			sliced |= 1u << a;
		} else {
			cost += 2 * (n - 1) / n * local; /* all_reduce */
		}
	}
	for (int a = 0; a < IR_MAX_AXES; a++)
		if ((tdims & ~fdims & ~sliced) & (1u << a))
			local /= axis_size(mesh, a); /* Replicate -> Shard: free */
	double gather = 1;
	for (int d = 0; d < from->ndims && d < IR_MAX_RANK; d++)
		for (int k = 0; k < from->naxes[d] && k < IR_MAX_AXES; k++) {
			int a = from->axes[d][k];
			double n = axis_size(mesh, a);
			if (n <= 1 || stays(from, to, d, k))
				continue;
			if (tdims & (1u << a))
				cost += (n - 1) / n * local; /* all_to_all */
			else
				gather *= n;
		}
	/* all_gather from `local` to local * gather, one axis at a time */
	cost += (gather - 1) * local;
	return cost;
}

/* ---- op rules ---- */

static int newf(Rule *r)
{
	return r->nf < PR_MAXF ? r->nf++ : -1;
}

/* Result dims get fresh factors; operands first..first+count-1 line up
 * with its trailing dims, numpy style (a size-1 dim broadcast stays
 * unsplit). */
static void rule_bcast(Rule *r, const Prop *P, const IrNode *n, int first, int count)
{
	for (int d = 0; d < n->rank; d++)
		r->resf[d] = (int8_t)newf(r);
	for (int i = first; i < first + count && i < r->nops; i++) {
		const IrNode *o = nd(P, n->ops[i]);
		for (int j = 0; j < o->rank; j++) {
			int d = j + n->rank - o->rank;
			if (d < 0 || (o->shape[j] == 1 && n->shape[d] != 1))
				continue;
			r->opf[i][j] = r->resf[d];
		}
	}
}

static void rule_unsplit(Rule *r, int slot, int d)
{
	if (d < 0 || d >= IR_MAX_RANK)
		return;
	if (slot < 0)
		r->resf[d] = -1;
	else
		r->opf[slot][d] = -1;
}

static void rule_matmul(Rule *r, const Prop *P, const IrNode *n)
{
	const IrNode *a = nd(P, n->ops[0]), *b = nd(P, n->ops[1]);
	int br = n->rank - 2;
	if (br < 0 || a->rank < 2 || b->rank < 2) {
		r->ok = false;
		return;
	}
	for (int d = 0; d < br; d++)
		r->resf[d] = (int8_t)newf(r);
	int fm = newf(r), fn = newf(r), fk = newf(r);
	if (fk >= 0)
		r->reduce[fk] = true;
	r->resf[br] = (int8_t)fm;
	r->resf[br + 1] = (int8_t)fn;
	const IrNode *opn[2] = {a, b};
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < opn[i]->rank - 2; j++) {
			int d = j + br - (opn[i]->rank - 2);
			if (d >= 0 && !(opn[i]->shape[j] == 1 && n->shape[d] != 1))
				r->opf[i][j] = r->resf[d];
		}
	r->opf[0][a->rank - 2] = (int8_t)fm;
	r->opf[0][a->rank - 1] = (int8_t)fk;
	r->opf[1][b->rank - 2] = (int8_t)fk;
	r->opf[1][b->rank - 1] = (int8_t)fn;
}

/* sum, mean, max; and max_bwd's x (axes reduced = unsplit there). */
static bool reduced_axis(const IrNode *n, int d)
{
	for (int k = 0; k < n->attrs.nints && k < IR_MAX_INTS; k++)
		if (n->attrs.ints[k] == d)
			return true;
	return false;
}

static void rule_reduce(Rule *r, const Prop *P, const IrNode *n)
{
	const IrNode *x = nd(P, n->ops[0]);
	int out = 0;
	r->red = n->op == IR_OP_MAX ? IR_RED_MAX : IR_RED_SUM;
	for (int j = 0; j < x->rank; j++) {
		int f = newf(r);
		r->opf[0][j] = (int8_t)f;
		bool red = reduced_axis(n, j);
		if (red && f >= 0)
			r->reduce[f] = true;
		if (!red)
			r->resf[out++] = (int8_t)f;
		else if (n->attrs.flag)
			r->resf[out++] = -1;
	}
}

static void rule_max_bwd(Rule *r, const Prop *P, const IrNode *n)
{
	const IrNode *x = nd(P, n->ops[1]);
	int out = 0;
	for (int j = 0; j < x->rank; j++) {
		bool red = reduced_axis(n, j);
		int f = red ? -1 : newf(r);
		r->opf[1][j] = r->resf[j] = (int8_t)f;
		if (!red || n->attrs.flag) {
			r->opf[0][out] = r->opf[2][out] = (int8_t)f;
			out++;
		}
	}
}

/* Groups of dims with equal products map onto each other; a group's major
 * dims share a factor (a split of the major dim is a contiguous block of
 * the merged one), its other dims stay unsplit. */
static void rule_reshape(Rule *r, const Prop *P, const IrNode *n)
{
	const IrNode *x = nd(P, n->ops[0]);
	if (ir_node_numel(x) <= 0)
		return;
	int i = 0, j = 0;
	while (i < x->rank && j < n->rank) {
		if (x->shape[i] == 1) {
			i++;
			continue;
		}
		if (n->shape[j] == 1) {
			j++;
			continue;
		}
		int i0 = i, j0 = j;
		int64_t pa = x->shape[i++], pb = n->shape[j++];
		while (pa != pb) {
			if (pa < pb && i < x->rank)
				pa *= x->shape[i++];
			else if (pb < pa && j < n->rank)
				pb *= n->shape[j++];
			else
				return;
		}
		int f = newf(r);
		r->opf[0][i0] = r->resf[j0] = (int8_t)f;
		if (f >= 0 && (i - i0 > 1 || j - j0 > 1))
			r->strict[f] = true;
	}
}

/* dy [..., D] with ids [...] (embed_bwd), or table [V, D] with ids
 * (embed): the batch dims of ids line up with dy's / the result's. */
static void rule_embed(Rule *r, const Prop *P, const IrNode *n, bool bwd)
{
	const IrNode *ids = nd(P, n->ops[1]);
	int fv = newf(r), fd = newf(r);
	for (int j = 0; j < ids->rank; j++) {
		int f = newf(r);
		r->opf[1][j] = (int8_t)f;
		if (bwd) {
			r->opf[0][j] = (int8_t)f;
			if (f >= 0)
				r->reduce[f] = true;
		} else {
			r->resf[j] = (int8_t)f;
		}
	}
	if (bwd) {
		r->opf[0][ids->rank] = (int8_t)fd;
		r->resf[0] = (int8_t)fv; /* the table's rows: split by the user alone */
		r->resf[1] = (int8_t)fd;
	} else {
		if (fv >= 0)
			r->reduce[fv] = true; /* vocab parallel: masked lookup, partial */
		r->opf[0][0] = (int8_t)fv;
		r->opf[0][1] = (int8_t)fd;
		r->resf[ids->rank] = (int8_t)fd;
	}
}

/* Operand `first` and the rest line up dim for dim with the result or, when
 * to_scalar, with each other and are contracted into a scalar. */
static void rule_same(Rule *r, const Prop *P, const IrNode *n, int first, const IrNode *like,
                      bool to_scalar)
{
	int fs[IR_MAX_RANK];
	for (int d = 0; d < like->rank; d++) {
		fs[d] = newf(r);
		if (to_scalar && fs[d] >= 0)
			r->reduce[fs[d]] = true;
		else
			r->resf[d] = (int8_t)fs[d];
	}
	for (int i = first; i < r->nops; i++) {
		const IrNode *o = nd(P, n->ops[i]);
		for (int j = 0; j < o->rank; j++) {
			int d = j + like->rank - o->rank;
			if (d >= 0 && !(o->shape[j] == 1 && like->shape[d] != 1))
				r->opf[i][j] = (int8_t)fs[d];
		}
	}
}

static void rule_attention(Rule *r, const IrNode *n, bool bwd)
{
	int fb = newf(r), fd = newf(r);
	r->heads_f = fd;
	r->heads = n->attrs.ints[0];
	for (int i = 0; i < r->nops; i++) {
		r->opf[i][0] = (int8_t)fb;
		r->opf[i][2] = (int8_t)fd; /* the sequence dim stays whole */
	}
	int o = bwd ? 1 : 0; /* attention_bwd stacks dq, dk, dv on dim 0 */
	r->resf[o] = (int8_t)fb;
	r->resf[o + 2] = (int8_t)fd;
}

/* logits [..., V] (operand li) and targets [...] (operand ti): the batch
 * dims are shared; to_scalar: contracted into the loss.  V may split
 * (vocab parallel: partition reduces the row max, the sum of exps and the
 * target logit, never the logits): a contracted factor of the loss, the
 * gradient's own dim in the backward. */
static void rule_xent(Rule *r, const Prop *P, const IrNode *n, int li, int ti, bool to_scalar)
{
	const IrNode *t = nd(P, n->ops[ti]);
	int fv = newf(r);
	r->opf[li][t->rank] = (int8_t)fv;
	if (to_scalar && fv >= 0)
		r->reduce[fv] = true;
	else
		r->resf[t->rank] = (int8_t)fv;
	for (int j = 0; j < t->rank; j++) {
		int f = newf(r);
		r->opf[li][j] = r->opf[ti][j] = (int8_t)f;
		if (to_scalar && f >= 0)
			r->reduce[f] = true;
		else
			r->resf[j] = (int8_t)f;
	}
	r->order[0] = (uint8_t)ti; /* batch dims follow the targets */
	r->order[1] = (uint8_t)li;
	if (n->nops == 3)
		r->order[2] = 0;
}

/* Layer norms: x (operand xi) and dy line up with the result but for the
 * normalised last dim; gamma and beta stay whole. */
static void rule_norm(Rule *r, const Prop *P, const IrNode *n, int xi, bool has_dy, bool gamma)
{
	const IrNode *x = nd(P, n->ops[xi]);
	int last = x->rank - 1;
	for (int j = 0; j < last; j++) {
		int f = newf(r);
		r->opf[xi][j] = (int8_t)f;
		if (has_dy)
			r->opf[0][j] = (int8_t)f;
		if (gamma) {
			if (f >= 0)
				r->reduce[f] = true;
		} else {
			r->resf[j] = (int8_t)f;
		}
	}
}

static void rule_build(const Prop *P, const IrNode *n, Rule *r)
{
	memset(r, 0, sizeof *r);
	memset(r->opf, -1, sizeof r->opf);
	memset(r->resf, -1, sizeof r->resf);
	r->ok = true;
	r->heads_f = -1;
	r->red = IR_RED_SUM;
	r->nops = n->nops < PR_MAXOPS ? n->nops : PR_MAXOPS;
	for (int i = 0; i < r->nops; i++)
		r->order[i] = (uint8_t)i;
	unsigned fl = ir_op_flags(n->op);
	switch (n->op) {
	case IR_OP_PARAM:
	case IR_OP_INPUT:
	case IR_OP_CONST:
		for (int d = 0; d < n->rank; d++)
			r->resf[d] = (int8_t)newf(r);
		return;
	case IR_OP_MATMUL:
		rule_matmul(r, P, n);
		return;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		rule_reduce(r, P, n);
		return;
	case IR_OP_SOFTMAX:
	case IR_OP_LOG_SOFTMAX:
	case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD:
		rule_bcast(r, P, n, 0, r->nops);
		for (int i = -1; i < r->nops; i++)
			rule_unsplit(r, i, (int)n->attrs.ints[0]);
		return;
	case IR_OP_LAYERNORM:
	case IR_OP_RMSNORM:
		rule_norm(r, P, n, 0, false, false);
		return;
	case IR_OP_LAYERNORM_BWD:
	case IR_OP_RMSNORM_BWD:
		rule_norm(r, P, n, 1, true, false);
		return;
	case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD_GAMMA:
		rule_norm(r, P, n, 1, true, true);
		return;
	case IR_OP_EMBED:
		rule_embed(r, P, n, false);
		return;
	case IR_OP_EMBED_BWD:
		rule_embed(r, P, n, true);
		return;
	case IR_OP_PERMUTE:
		r->linear = true;
		for (int d = 0; d < n->rank && d < n->attrs.nints; d++) {
			int64_t s = n->attrs.ints[d];
			r->resf[d] = (int8_t)newf(r);
			if (s >= 0 && s < IR_MAX_RANK)
				r->opf[0][s] = r->resf[d];
		}
		return;
	case IR_OP_RESHAPE:
		r->linear = true;
		rule_reshape(r, P, n);
		return;
	case IR_OP_CONCAT:
	case IR_OP_SLICE:
	case IR_OP_PAD:
		rule_same(r, P, n, 0, n, false);
		for (int i = -1; i < r->nops; i++)
			rule_unsplit(r, i, (int)n->attrs.ints[0]);
		return;
	case IR_OP_ATTENTION:
		rule_attention(r, n, false);
		return;
	case IR_OP_ATTENTION_BWD:
		rule_attention(r, n, true);
		return;
	case IR_OP_CROSS_ENTROPY:
		rule_xent(r, P, n, 0, 1, true);
		return;
	case IR_OP_CROSS_ENTROPY_BWD:
		rule_xent(r, P, n, 1, 2, false);
		return;
	case IR_OP_MSE:
		rule_same(r, P, n, 0, nd(P, n->ops[0]), true);
		return;
	case IR_OP_EXPAND:
	case IR_OP_RELU_BWD:
	case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD:
		rule_bcast(r, P, n, 0, r->nops);
		return;
	case IR_OP_SUM_TO: {
		/* x's dims that the result keeps line up with its trailing
		 * dims; the others are summed away */
		const IrNode *x = nd(P, n->ops[0]);
		for (int j = 0; j < x->rank; j++) {
			int f = newf(r), d = j - (x->rank - n->rank);
			r->opf[0][j] = (int8_t)f;
			if (d >= 0 && !(n->shape[d] == 1 && x->shape[j] != 1))
				r->resf[d] = (int8_t)f;
			else if (f >= 0)
				r->reduce[f] = true;
		}
		return;
	}
	case IR_OP_MAX_BWD:
		rule_max_bwd(r, P, n);
		return;
	default:
		break;
	}
	if ((fl & OPF_ELEMWISE) && !(fl & OPF_COLL)) {
		rule_bcast(r, P, n, 0, r->nops);
		r->linear = n->op == IR_OP_ADD || n->op == IR_OP_SUB || n->op == IR_OP_NEG ||
		            n->op == IR_OP_SCALE;
		return;
	}
	r->ok = false; /* collectives, optimizer ops, grad_norm */
}

/* ---- factor shardings ---- */

static const int8_t *fmap(const Rule *r, int slot)
{
	return slot < 0 ? r->resf : r->opf[slot];
}

/* What placement p of operand `slot` (-1: the result) says of the
 * factors. */
static void assign_from(const Rule *r, int slot, const Placement *p, Assign *a)
{
	assign_clear(a);
	const int8_t *fm = fmap(r, slot);
	for (int d = 0; d < p->ndims && d < IR_MAX_RANK; d++) {
		int f = fm[d];
		if (f >= 0)
			a->cover[f] = true;
		if (f < 0 || a->n[f] || !p->naxes[d])
			continue;
		for (int k = 0; k < p->naxes[d] && k < IR_MAX_AXES; k++) {
			a->ax[f][a->n[f]++] = p->axes[d][k];
			a->used |= 1u << p->axes[d][k];
		}
	}
}

/* Takes src's axes for each factor dst leaves unsplit, unless an axis is
 * taken already.  only_reduce: contracted factors only, and only axes in
 * `allow`.  Returns whether anything was taken. */
static bool merge(const Rule *r, Assign *dst, const Assign *src, bool only_reduce,
                  uint32_t allow)
{
	bool took = false;
	for (int f = 0; f < r->nf; f++) {
		if (dst->n[f] || dst->lock[f] || !src->n[f] || (only_reduce && !r->reduce[f]))
			continue;
		uint32_t s = 0;
		for (int k = 0; k < src->n[f]; k++)
			s |= 1u << src->ax[f][k];
		if ((s & dst->used) || (only_reduce && (s & ~allow)))
			continue;
		memcpy(dst->ax[f], src->ax[f], src->n[f]);
		dst->n[f] = src->n[f];
		dst->used |= s;
		took = true;
	}
	return took;
}

static void project(const Rule *r, const Assign *a, int slot, int rank, bool resolved,
                    Placement *out)
{
	placement_replicated(out, rank);
	const int8_t *fm = fmap(r, slot);
	for (int d = 0; d < rank && d < IR_MAX_RANK; d++) {
		int f = fm[d];
		if (f < 0)
			continue;
		memcpy(out->axes[d], a->ax[f], a->n[f]);
		out->naxes[d] = a->n[f];
	}
	out->partial = a->partial;
	if (slot >= 0 || resolved) {
		if (resolved)
			out->partial = 0;
		return;
	}
	for (int f = 0; f < r->nf; f++)
		for (int k = 0; r->reduce[f] && k < a->n[f]; k++) {
			out->partial |= 1u << a->ax[f][k];
			out->partial_op = r->red;
		}
}

/* Drops the axes of a factor, minor first, until every dim it names
 * divides evenly (or, with uneven shards, unless strict, has a row per
 * shard at most ragged) and attention's heads split whole. */
static void repair(const Prop *P, const IrNode *n, const Rule *r, Assign *a)
{
	const Mesh *mesh = &P->m->mesh;
	bool uneven = P->m->train.uneven_shards;
	for (int f = 0; f < r->nf; f++) {
		while (a->n[f]) {
			int64_t parts = 1;
			for (int k = 0; k < a->n[f]; k++)
				parts *= mesh->sizes[a->ax[f][k]];
			bool ok = r->heads_f != f || r->heads % parts == 0;
			for (int s = -1; ok && s < r->nops; s++) {
				const IrNode *t = s < 0 ? n : nd(P, n->ops[s]);
				const int8_t *fm = fmap(r, s);
				for (int d = 0; d < t->rank && ok; d++)
					if (fm[d] == f && t->shape[d] % parts != 0)
						ok = uneven && !r->strict[f];
			}
			if (ok)
				break;
			a->n[f]--;
			a->used &= ~(1u << a->ax[f][a->n[f]]);
		}
	}
}

/* ---- users' requirements ---- */

static bool resolved_kind(const Prop *P, int id)
{
	return P->kind[id] == K_TIED || P->kind[id] == K_SCALAR;
}

/* The common partial of n's known operands other than `skip`, when all are
 * known and agree (add/sub pass it through). */
static uint32_t common_partial(const Prop *P, const IrNode *n, int skip, bool *all_known)
{
	uint32_t p = 0;
	bool first = true;
	*all_known = true;
	for (int i = 0; i < n->nops; i++) {
		const Placement *q = &nd(P, n->ops[i])->place;
		if (i == skip)
			continue;
		if (!q->known) {
			*all_known = false;
			return 0;
		}
		if (q->partial && q->partial_op != IR_RED_SUM)
			return 0;
		if (!first && q->partial != p)
			return 0;
		p = q->partial;
		first = false;
	}
	return p;
}

/* The placement user c needs operand `slot` in, given c's placement (or,
 * when c has none yet, its other operands').  False: no requirement. */
static bool requirement(const Prop *P, int c, int slot, Placement *out)
{
	const IrNode *cn = nd(P, c);
	const IrNode *o = nd(P, cn->ops[slot]);
	if (cn->op == IR_OP_ADAMW_STEP || cn->op == IR_OP_SGD_STEP) {
		if (slot == cn->nops - 1) /* the global norm */
			return false;
		*out = nd(P, cn->ops[0])->place;
		out->partial = 0;
		return out->known;
	}
	const Rule *r = &P->rules[c];
	if (!r->ok || slot >= r->nops)
		return false;
	if (!cn->place.known)
		return false; /* c's own turn decides */
	/* c's placement fixes the factors it shows; a contracted one may
	 * take the axes c is partial over (any, when c resolves its partial
	 * itself) from c's operands, this one last */
	Assign a, s;
	bool resolved = resolved_kind(P, c);
	assign_from(r, -1, &cn->place, &a);
	uint32_t allow = resolved ? ~0u : cn->place.partial;
	for (int k = 0; k <= r->nops; k++) {
		int i = k < r->nops ? r->order[k] : slot;
		const Placement *q = &nd(P, cn->ops[i])->place;
		if ((k < r->nops && i == slot) || !q->known)
			continue;
		assign_from(r, i, q, &s);
		merge(r, &a, &s, true, allow);
	}
	if (r->linear) {
		bool all;
		a.partial = resolved ? common_partial(P, cn, slot, &all) : cn->place.partial;
	}
	project(r, &a, slot, o->rank, false, out);
	return true;
}

/* ---- choosing a node's placement ---- */

typedef struct Src {
	Assign a;
	int origin;
} Src;

/* Operand and user edges of n placed by candidate a; *res gets n's
 * placement. */
static double cand_cost(const Prop *P, const IrNode *n, const Assign *a, Placement *res)
{
	const Rule *r = &P->rules[n->id];
	const Mesh *mesh = &P->m->mesh;
	project(r, a, -1, n->rank, false, res);
	double cost = 0;
	for (int i = 0; i < r->nops; i++) {
		const IrNode *o = nd(P, n->ops[i]);
		if (!o->place.known)
			continue;
		Placement q;
		project(r, a, i, o->rank, false, &q);
		cost += pass_propagate_cost(mesh, &o->place, &q, nbytes(P, o->id));
	}
	double nb = nbytes(P, n->id);
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1]; u++, k++)
		if (P->has_req[k])
			cost += pass_propagate_cost(mesh, res, &P->req[k], nb);
	if (n->op == IR_OP_EMBED_BWD) {
		/* ties (a slice is free) go to the smaller table gradient: a
		 * vocab split computes only this shard's rows (embed_bwd_vp) */
		double local = node_bytes(n);
		for (int d = 0; d < res->ndims; d++)
			for (int k = 0; k < res->naxes[d]; k++)
				local /= axis_size(mesh, res->axes[d][k]);
		cost += 1e-3 * local;
	}
	return cost;
}

static void set_place(IrNode *n, const Placement *p, int from, SrcLoc loc)
{
	n->place = *p;
	n->place_from = from;
	n->place_loc = from >= 0 ? (SrcLoc){0} : loc;
}

/* Do a and b split every factor alike (all cand_cost reads of them)? */
static bool same_split(const Rule *r, const Assign *a, const Assign *b)
{
	if (a->partial != b->partial)
		return false;
	for (int f = 0; f < r->nf; f++) {
		if (a->n[f] != b->n[f])
			return false;
		for (int k = 0; k < a->n[f]; k++)
			if (a->ax[f][k] != b->ax[f][k])
				return false;
	}
	return true;
}

/* Re-chooses free node n's placement; returns whether it changed. */
static bool choose(Prop *P, IrNode *n)
{
	const Rule *r = &P->rules[n->id];
	Src src[PR_MAXSRC];
	int ns = 0, first_op = -1;
	for (int k = 0; k < r->nops && ns < PR_MAXSRC; k++) {
		const IrNode *o = nd(P, n->ops[r->order[k]]);
		if (!o->place.known)
			continue;
		assign_from(r, r->order[k], &o->place, &src[ns].a);
		src[ns++].origin = o->id;
		if (first_op < 0)
			first_op = o->id;
	}
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1]; u++, k++)
		P->has_req[k] = requirement(P, P->uses[u].node, P->uses[u].slot, &P->req[k]);
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1] && ns < PR_MAXSRC; u++, k++) {
		if (!P->has_req[k])
			continue;
		assign_from(r, -1, &P->req[k], &src[ns].a);
		src[ns++].origin = P->uses[u].node;
	}
	uint32_t lp = 0;
	if (r->linear) {
		bool all;
		lp = common_partial(P, n, -1, &all);
		if (!all)
			lp = 0;
	}
	/* candidate 0 merges every source in order; candidates 1 + s put
	 * source s first, and 1 + ns + s do too with the factors s leaves
	 * unsplit kept so (a user that wants a dim whole); the last one
	 * splits nothing */
	bool have = n->place.known;
	double best = INFINITY;
	Placement best_p;
	int best_from = -1;
	if (have) {
		Assign cur;
		assign_from(r, -1, &n->place, &cur);
		for (int s = 0; s < ns; s++)
			merge(r, &cur, &src[s].a, true, n->place.partial);
		cur.partial = lp;
		cur.used |= lp;
		best = cand_cost(P, n, &cur, &best_p);
		if (!placement_equal(&best_p, &n->place))
			best = INFINITY; /* the old one is not reachable any more */
	}
	Assign seen[2 * PR_MAXSRC + 2];
	int nseen = 0;
	for (int c = 0; c <= 2 * ns + 1; c++) {
		Assign a;
		assign_clear(&a);
		a.partial = lp;
		a.used = lp;
		int origin = -1, lead = c > ns ? c - ns - 1 : c - 1;
		if (c <= 2 * ns) {
			if (lead >= 0 && merge(r, &a, &src[lead].a, false, 0))
				origin = src[lead].origin;
			for (int f = 0; c > ns && f < r->nf; f++)
				a.lock[f] = src[lead].a.cover[f] && !a.n[f];
			if (c > ns && origin < 0)
				origin = src[lead].origin;
			for (int s = 0; s < ns; s++)
				if (s != lead && merge(r, &a, &src[s].a, false, 0) && origin < 0)
					origin = src[s].origin;
		}
		repair(P, n, r, &a);
		/* a candidate equal to an earlier one of this loop costs the same
		 * and cannot beat it: skip its cand_cost (c = 0 is never one) */
		bool dup = false;
		for (int q = 0; q < nseen && !dup; q++)
			dup = same_split(r, &seen[q], &a);
		if (dup)
			continue;
		seen[nseen++] = a;
		Placement p;
		double cost = cand_cost(P, n, &a, &p);
		if (cost < best - 1e-9 * (best > 1 ? best : 1) || (!have && c == 0)) {
			best = cost;
			best_p = p;
			best_from = origin >= 0 ? origin : first_op;
			have = true;
		}
	}
	if (placement_equal(&best_p, &n->place))
		return false;
	set_place(n, &best_p, best_from, n->loc);
	return true;
}

/* ---- kinds, ties and sweeps ---- */

static void strip_dead_axes(const Prop *P, Placement *p)
{
	for (int d = 0; d < p->ndims && d < IR_MAX_RANK; d++) {
		int k2 = 0;
		for (int k = 0; k < p->naxes[d] && k < IR_MAX_AXES; k++)
			if (P->live & (1u << p->axes[d][k]))
				p->axes[d][k2++] = p->axes[d][k];
		p->naxes[d] = (uint8_t)k2;
	}
	p->partial &= P->live;
	if (!p->partial)
		p->partial_op = IR_RED_SUM;
}

/* The first param called name (params sorted by ir_params_by_name, np of
 * them; np < 0: no index, scan). */
static int find_param(const IrModule *m, const int *params, int np, const char *name)
{
	if (np >= 0) {
		int k = ir_param_lookup(m, params, np, name);
		return k >= 0 ? params[k] : -1;
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_PARAM && n->name && strcmp(n->name, name) == 0)
			return i;
	}
	return -1;
}

static void classify(Prop *P)
{
	IrModule *m = P->m;
	int *params = malloc(sizeof(int) * (size_t)(m->nnodes ? m->nnodes : 1));
	int np = params ? ir_params_by_name(m, params) : -1;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		P->tie[i] = -1;
		if (n->op == IR_OP_STATE || n->op == IR_OP_ADAMW_STEP || n->op == IR_OP_SGD_STEP ||
		    n->op == IR_OP_GRAD_NORM)
			n->place.known = false; /* optim's copies: redone below */
		if (n->place.known) {
			P->kind[i] = K_USER;
			strip_dead_axes(P, &n->place);
			if (n->place_from < 0 && !n->place_loc.file)
				n->place_loc = n->loc;
		} else if (n->rank == 0) {
			P->kind[i] = K_SCALAR;
		} else if (n->role == IR_ROLE_GRAD && n->name && strncmp(n->name, "grad.", 5) == 0 &&
		           (P->tie[i] = find_param(m, params, np, n->name + 5)) >= 0) {
			P->kind[i] = K_TIED;
		} else {
			P->kind[i] = K_FREE;
		}
	}
	free(params);
	/* a step and its state take the param's placement */
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ADAMW_STEP && n->op != IR_OP_SGD_STEP)
			continue;
		P->kind[i] = K_TIED;
		P->tie[i] = n->ops[0];
		for (int k = 1; k < n->nops; k++) {
			int o = n->ops[k];
			if (m->nodes[o]->op == IR_OP_STATE) {
				P->kind[o] = K_TIED;
				P->tie[o] = n->ops[0];
			}
		}
	}
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_STATE && P->kind[i] != K_TIED)
			P->kind[i] = K_FREE; /* an unused state: whatever its users say */
}

/* Scalars are replicated, resolved at the node; tied nodes copy their
 * param's placement without its partial. */
static bool fix(Prop *P, IrNode *n)
{
	Placement p;
	int from = -1;
	if (P->kind[n->id] == K_SCALAR) {
		placement_replicated(&p, 0);
		from = n->nops ? n->ops[0] : -1;
	} else {
		const IrNode *t = nd(P, P->tie[n->id]);
		if (!t->place.known)
			return false;
		p = t->place;
		p.partial = 0;
		p.partial_op = IR_RED_SUM;
		from = t->id;
	}
	if (placement_equal(&p, &n->place) && n->place_from == from)
		return false;
	set_place(n, &p, from, n->loc);
	return true;
}

static bool visit_node(Prop *P, int i)
{
	IrNode *n = nd(P, i);
	switch (P->kind[i]) {
	case K_USER:
		return false;
	case K_FREE:
		if (!P->rules[i].ok) {
			if (n->place.known)
				return false;
			Placement p;
			placement_replicated(&p, n->rank);
			set_place(n, &p, n->nops ? n->ops[0] : -1, n->loc);
			return true;
		}
		return choose(P, n);
	default:
		return fix(P, n);
	}
}

/* Node i's placement changed: everything whose choice reads it must be
 * visited again -- i itself, its operands and users (cand_cost's edges)
 * and its users' other operands (requirement reads them). */
static void mark_changed(Prop *P, int i)
{
	const IrNode *n = nd(P, i);
	P->dirty[i] = 1;
	for (int k = 0; k < n->nops; k++)
		P->dirty[n->ops[k]] = 1;
	for (int u = P->ustart[i]; u < P->ustart[i + 1]; u++) {
		const IrNode *c = nd(P, P->uses[u].node);
		P->dirty[c->id] = 1;
		for (int k = 0; k < c->nops; k++)
			P->dirty[c->ops[k]] = 1;
	}
}

/* A sweep's visit.  choose() is a pure function of the placements of the
 * node, its operands, its users and its users' operands, so a free node
 * none of those changed for since its last visit would choose the same
 * again: it is skipped (the expensive case; ties and scalars are cheap
 * and always visited).  The sweeps give what visiting everything gives. */
static bool visit(Prop *P, int i)
{
	if (P->kind[i] == K_FREE && P->rules[i].ok && !P->dirty[i])
		return false;
	P->dirty[i] = 0;
	bool changed = visit_node(P, i);
	if (changed)
		mark_changed(P, i);
	return changed;
}

static bool build_uses(Prop *P, Arena *a)
{
	IrModule *m = P->m;
	P->ustart = arena_alloc(a, sizeof(int) * (size_t)(m->nnodes + 1));
	if (!P->ustart)
		return false;
	memset(P->ustart, 0, sizeof(int) * (size_t)(m->nnodes + 1));
	for (int i = 0; i < m->nnodes; i++)
		for (int k = 0; k < m->nodes[i]->nops; k++)
			P->ustart[m->nodes[i]->ops[k] + 1]++;
	for (int i = 0; i < m->nnodes; i++)
		P->ustart[i + 1] += P->ustart[i];
	int total = P->ustart[m->nnodes];
	P->uses = arena_alloc(a, sizeof(Use) * (size_t)(total ? total : 1));
	int *fill = arena_alloc(a, sizeof(int) * (size_t)(m->nnodes + 1));
	int most = 1;
	for (int i = 0; i < m->nnodes; i++)
		if (P->ustart[i + 1] - P->ustart[i] > most)
			most = P->ustart[i + 1] - P->ustart[i];
	P->req = arena_alloc(a, sizeof(Placement) * (size_t)most);
	P->has_req = arena_alloc(a, sizeof(bool) * (size_t)most);
	if (!P->uses || !fill || !P->req || !P->has_req)
		return false;
	memcpy(fill, P->ustart, sizeof(int) * (size_t)(m->nnodes + 1));
	for (int i = 0; i < m->nnodes; i++)
		for (int k = 0; k < m->nodes[i]->nops; k++) {
			Use *u = &P->uses[fill[m->nodes[i]->ops[k]]++];
			u->node = i;
			u->slot = k;
		}
	return true;
}

/* ---- sequence parallelism (train: sequence_parallel true) ----
 *
 * Megatron SP as a placement preference, applied after a first
 * propagation: the tp-like axis is the one splitting the last dim of a
 * column-parallel weight (a [_, tp] param feeding a matmul as its right
 * operand).  The residual stream -- a forward add whose operand is partial
 * over that axis (a row-parallel result, the vocab-parallel embedding),
 * and adds, dropouts and layernorms fed from such values -- gets its
 * sequence dim (rank - 2) split over the axis too; every other forward
 * value keeps its first placement.  Partition then reduce_scatters the
 * partial along T into the add and all_gathers T into the column-parallel
 * matmuls.  The backward is propagated again from there, so its
 * collectives mirror (the gradient of the all_gather is a reduce_scatter). */
static int sp_axis(const Prop *P)
{
	IrModule *m = P->m;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_MATMUL || n->nops < 2)
			continue;
		const IrNode *w = nd(P, n->ops[1]);
		const Placement *q = &w->place;
		if (w->op != IR_OP_PARAM || w->rank != 2 || !q->known || q->naxes[0] ||
		    q->naxes[1] != 1 || !(P->live & (1u << q->axes[1][0])))
			continue;
		return q->axes[1][0];
	}
	return -1;
}

static bool sp_uses_axis(const Placement *p, int ax)
{
	for (int d = 0; d < p->ndims && d < IR_MAX_RANK; d++)
		for (int k = 0; k < p->naxes[d]; k++)
			if (p->axes[d][k] == ax)
				return true;
	return (p->partial >> ax) & 1u;
}

/* o's result is, or can be left, partial (sum) over ax: a row-parallel
 * matmul, the vocab-parallel embedding. */
static bool sp_partial_source(const Prop *P, const IrNode *o, int ax)
{
	const Placement *p = &o->place;
	if ((p->partial >> ax) & 1u)
		return p->partial_op == IR_RED_SUM;
	if (p->partial || sp_uses_axis(p, ax) || o->nops < 2)
		return false;
	if (o->op == IR_OP_MATMUL) {
		const IrNode *w = nd(P, o->ops[1]);
		const Placement *q = &w->place;
		if (w->rank != 2 || !q->known)
			return false;
		for (int k = 0; k < q->naxes[0]; k++)
			if (q->axes[0][k] == ax)
				return true;
	} else if (o->op == IR_OP_EMBED) {
		const Placement *q = &nd(P, o->ops[0])->place;
		for (int k = 0; q->known && k < q->naxes[0]; k++)
			if (q->axes[0][k] == ax)
				return true;
	}
	return false;
}

static bool sp_apply(Prop *P, Arena *ar)
{
	IrModule *m = P->m;
	int ax = sp_axis(P);
	if (ax < 0 || m->loss < 0)
		return false;
	int64_t parts = m->mesh.sizes[ax];
	size_t nn = (size_t)m->nnodes;
	bool *fwd = arena_alloc(ar, nn), *sp = arena_alloc(ar, nn), *src = arena_alloc(ar, nn);
	if (!fwd || !sp || !src)
		return false;
	memset(fwd, 0, nn);
	memset(sp, 0, nn);
	memset(src, 0, nn);
	fwd[m->loss] = true;
	for (int i = m->loss; i >= 0; i--)
		for (int k = 0; fwd[i] && k < m->nodes[i]->nops; k++)
			fwd[m->nodes[i]->ops[k]] = true;
	int count = 0;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		const Placement *p = &n->place;
		if (!fwd[i] || P->kind[i] != K_FREE || n->rank < 3 || !p->known || p->partial ||
		    p->naxes[n->rank - 2] || p->naxes[n->rank - 1] || sp_uses_axis(p, ax) ||
		    n->shape[n->rank - 2] % parts)
			continue;
		bool ok = false;
		if (n->op == IR_OP_ADD) {
			for (int k = 0; k < n->nops; k++) {
				const IrNode *o = nd(P, n->ops[k]);
				if (sp[o->id])
					ok = true;
				else if (fwd[o->id] && o->rank == n->rank && P->kind[o->id] == K_FREE &&
				         sp_partial_source(P, o, ax))
					ok = src[o->id] = true;
			}
		} else if (n->op == IR_OP_LAYERNORM || n->op == IR_OP_DROPOUT) {
			ok = sp[n->ops[0]];
		}
		if (!ok)
			continue;
		sp[i] = true;
		count++;
	}
	if (!count)
		return false;
	/* the backward mirrors: layernorm_bwd of a sequence-split x and the
	 * adds of such gradients run on T shards, their partial dy left
	 * partial (reduce_scattered in) */
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		const Placement *p = &n->place;
		if (fwd[i] || P->kind[i] != K_FREE || n->rank < 3 || !p->known || p->partial ||
		    p->naxes[n->rank - 2] || p->naxes[n->rank - 1] || sp_uses_axis(p, ax) ||
		    n->shape[n->rank - 2] % parts)
			continue;
		bool ok = false;
		if (n->op == IR_OP_LAYERNORM_BWD && n->nops >= 2 && sp[n->ops[1]]) {
			const IrNode *o = nd(P, n->ops[0]);
			ok = true;
			if (!fwd[o->id] && P->kind[o->id] == K_FREE && o->rank == n->rank &&
			    sp_partial_source(P, o, ax))
				src[o->id] = true;
		} else if (n->op == IR_OP_ADD) {
			for (int k = 0; k < n->nops; k++)
				ok |= !fwd[n->ops[k]] && sp[n->ops[k]];
		}
		sp[i] = ok;
	}
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (P->kind[i] != K_FREE || !n->place.known)
			continue;
		P->kind[i] = K_USER; /* pinned */
		if (src[i]) { /* left partial: reduce_scattered into the add */
			n->place.partial |= 1u << ax;
			n->place.partial_op = IR_RED_SUM;
		}
		if (sp[i]) {
			int d = n->rank - 2;
			n->place.axes[d][0] = (uint8_t)ax;
			n->place.naxes[d] = 1;
		}
	}
	return true;
}

bool pass_propagate(IrModule *m, Diag *d, const PassOptions *opt)
{
	Arena a;
	arena_init(&a);
	Prop P = {.m = m};
	for (int i = 0; i < m->mesh.naxes && i < IR_MAX_AXES; i++)
		if (m->mesh.sizes[i] > 1)
			P.live |= 1u << i;
	size_t nn = (size_t)(m->nnodes ? m->nnodes : 1);
	P.rules = arena_alloc(&a, sizeof(Rule) * nn);
	P.kind = arena_alloc(&a, nn);
	P.tie = arena_alloc(&a, sizeof(int) * nn);
	P.dirty = arena_alloc(&a, nn);
	P.bytes = arena_alloc(&a, sizeof(double) * nn);
	if (!P.rules || !P.kind || !P.tie || !P.dirty || !P.bytes || !build_uses(&P, &a)) {
		arena_free(&a);
		diag_error(d, (SrcLoc){0}, "propagate: out of memory");
		return false;
	}
	classify(&P);
	for (int i = 0; i < m->nnodes; i++)
		rule_build(&P, m->nodes[i], &P.rules[i]);
	memset(P.dirty, 1, nn);
	for (int i = 0; i < m->nnodes; i++)
		P.bytes[i] = node_bytes(m->nodes[i]);
	int sweeps = 0;
	bool changed = true;
	while (changed && sweeps < PR_SWEEPS) {
		changed = false;
		for (int i = 0; i < m->nnodes; i++)
			changed |= visit(&P, i);
		for (int i = m->nnodes - 1; i >= 0; i--)
			changed |= visit(&P, i);
		sweeps++;
	}
	if (m->train.sequence_parallel && sp_apply(&P, &a)) {
		changed = true;
		memset(P.dirty, 1, nn); /* sp_apply moved placements behind visit's back */
		for (int s = 0; changed && s < PR_SWEEPS; s++, sweeps++) {
			changed = false;
			for (int i = 0; i < m->nnodes; i++)
				changed |= visit(&P, i);
			for (int i = m->nnodes - 1; i >= 0; i--)
				changed |= visit(&P, i);
		}
	}
	/* a tie whose param came late, and anything still open */
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (P.kind[i] == K_TIED || P.kind[i] == K_SCALAR)
			fix(&P, n);
		if (!n->place.known) {
			Placement p;
			placement_replicated(&p, n->rank);
			set_place(n, &p, -1, n->loc);
		}
	}
	if (opt && opt->verbose)
		fprintf(stderr, "dtmc: propagate: %d sweep%s%s\n", sweeps, sweeps == 1 ? "" : "s",
		        changed ? " (stopped before a fixpoint)" : "");
	arena_free(&a);
	return true;
}
