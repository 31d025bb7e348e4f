/* propagate_rules.c - each op's factor view, for passes/propagate.c, and
 * the factor shardings (Assign) read from and projected onto placements
 * through it.
 *
 * Every dim of every operand and of the result names a factor or must
 * stay unsplit (a normalised dim, a broadcast dim of size 1, a
 * concatenated dim); a factor absent from the result is contracted, and
 * splitting it leaves the result partial over those axes (matmul's k, a
 * reduced dim, embed's vocab).  See propagate.c for how candidates are
 * merged and chosen.
 */
#include "passes/propagate_impl.h"

/* ---- op rules ---- */

static int newf(Rule *r)
{
	return r->nf < PR_MAXF ? r->nf++ : -1;
}

/* Result dims get fresh factors; operands first..first+count-1 line up
 * with its trailing dims, numpy style (a size-1 dim broadcast stays
 * unsplit). */
static void rule_bcast(Rule *r, const IrModule *m, const IrNode *n, int first, int count)
{
	for (int d = 0; d < n->rank; d++)
		r->resf[d] = (int8_t)newf(r);
	for (int i = first; i < first + count && i < r->nops; i++) {
		const IrNode *o = m->nodes[n->ops[i]];
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

static void rule_matmul(Rule *r, const IrModule *m, const IrNode *n)
{
	const IrNode *a = m->nodes[n->ops[0]], *b = m->nodes[n->ops[1]];
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

/* matmul_wgrad(x [..., k], dy [..., n]) -> [k, n]: each leading dim a
 * factor of both operands, contracted (the result partial over its
 * axes); k follows x's last dim, n dy's. */
static void rule_wgrad(Rule *r, const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[0]], *dy = m->nodes[n->ops[1]];
	if (x->rank < 2 || x->rank != dy->rank) {
		r->ok = false;
		return;
	}
	for (int j = 0; j < x->rank - 1; j++) {
		int f = newf(r);
		if (f >= 0)
			r->reduce[f] = true;
		r->opf[0][j] = r->opf[1][j] = (int8_t)f;
	}
	int fk = newf(r), fn = newf(r);
	r->resf[0] = r->opf[0][x->rank - 1] = (int8_t)fk;
	r->resf[1] = r->opf[1][dy->rank - 1] = (int8_t)fn;
}

/* sum, mean, max; and max_bwd's x (axes reduced = unsplit there). */
static bool reduced_axis(const IrNode *n, int d)
{
	const IrAttrAxes *a = ir_attr_axes(n);
	for (int k = 0; k < a->n && k < IR_MAX_INTS; k++)
		if (a->axes[k] == d)
			return true;
	return false;
}

static void rule_reduce(Rule *r, const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[0]];
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
		else if (ir_attr_axes(n)->keepdims)
			r->resf[out++] = -1;
	}
}

static void rule_max_bwd(Rule *r, const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[1]];
	int out = 0;
	for (int j = 0; j < x->rank; j++) {
		bool red = reduced_axis(n, j);
		int f = red ? -1 : newf(r);
		r->opf[1][j] = r->resf[j] = (int8_t)f;
		if (!red || ir_attr_axes(n)->keepdims) {
			r->opf[0][out] = r->opf[2][out] = (int8_t)f;
			out++;
		}
	}
}

/* Groups of dims with equal products map onto each other; a group's major
 * dims share a factor (a split of the major dim is a contiguous block of
 * the merged one), its other dims stay unsplit. */
static void rule_reshape(Rule *r, const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[0]];
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
static void rule_embed(Rule *r, const IrModule *m, const IrNode *n, bool bwd)
{
	const IrNode *ids = m->nodes[n->ops[1]];
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
static void rule_same(Rule *r, const IrModule *m, const IrNode *n, int first, const IrNode *like,
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
		const IrNode *o = m->nodes[n->ops[i]];
		for (int j = 0; j < o->rank; j++) {
			int d = j + like->rank - o->rank;
			if (d >= 0 && !(o->shape[j] == 1 && like->shape[d] != 1))
				r->opf[i][j] = (int8_t)fs[d];
		}
	}
}

/* Grouped-query attention's k and v share q's head factor only where
 * every mesh axis that can split the query heads splits the kv heads too;
 * elsewhere they have their own (partition keeps them whole, each rank
 * reading the kv heads its query heads need, as Megatron does). */
static bool kv_follows_heads(const IrModule *m, const IrAttrAttn *at)
{
	int64_t H = at->heads, G = ir_attn_kv_heads(at);
	for (int k = 0; k < m->mesh.naxes; k++)
		if (H % m->mesh.sizes[k] == 0 && G % m->mesh.sizes[k] != 0)
			return false;
	return true;
}

static void rule_attention(Rule *r, const IrModule *m, const IrNode *n, bool bwd)
{
	const IrAttrAttn *at = ir_attr_attn(n);
	/* the sequence dim may split too (context parallelism): partition
	 * runs it as Ulysses, or gathers it */
	int fb = newf(r), ft = newf(r), fd = newf(r);
	r->heads_f = fd;
	r->heads = at->heads;
	int fk = fd, k0 = bwd ? 2 : 1; /* k, v: operands k0, k0 + 1 */
	if (ir_attn_kv_heads(at) != at->heads && !kv_follows_heads(m, at)) {
		fk = newf(r);
		r->kv_f = fk;
		r->kv_heads = ir_attn_kv_heads(at);
	}
	for (int i = 0; i < r->nops; i++) {
		r->opf[i][0] = (int8_t)fb;
		r->opf[i][1] = (int8_t)ft; /* segment ids [B, T] split with the sequence */
		r->opf[i][2] = (int8_t)(i == k0 || i == k0 + 1 ? fk : fd);
	}
	int o = bwd ? 1 : 0; /* attention_bwd stacks dq, dk, dv on dim 0 */
	r->resf[o] = (int8_t)fb;
	r->resf[o + 1] = (int8_t)ft;
	r->resf[o + 2] = (int8_t)fd;
}

/* logits [..., V] (operand li) and targets [...] (operand ti): the batch
 * dims are shared; to_scalar: contracted into the loss.  V may split
 * (vocab parallel: partition reduces the row max, the sum of exps and the
 * target logit, never the logits): a contracted factor of the loss, the
 * gradient's own dim in the backward. */
static void rule_xent(Rule *r, const IrModule *m, const IrNode *n, int li, int ti, bool to_scalar)
{
	const IrNode *t = m->nodes[n->ops[ti]];
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
static void rule_norm(Rule *r, const IrModule *m, const IrNode *n, int xi, bool has_dy, bool gamma)
{
	const IrNode *x = m->nodes[n->ops[xi]];
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

/* The routing ops (ops.def): each leading group dim is a factor shared by
 * every operand and the result, as are gather's and scatter_add's row dims
 * after the indexed one; the dims they index, rank or count along stay
 * whole.  Gather and scatter_add are linear in their first operand. */
int prop_route_groups(const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[0]];
	switch (n->op) {
	case IR_OP_TOPK:
		return x->rank - 1;
	case IR_OP_ONE_HOT:
		return x->rank;
	case IR_OP_MOE_SLOT:
	case IR_OP_MOE_TOKEN:
		return x->rank - 2;
	default: /* gather, scatter_add: the indices' leading dims */
		return n->nops > 1 ? m->nodes[n->ops[1]]->rank - 1 : 0;
	}
}

static void rule_route(Rule *r, const IrModule *m, const IrNode *n)
{
	int nb = prop_route_groups(m, n);
	bool rows = n->op == IR_OP_GATHER || n->op == IR_OP_SCATTER_ADD;
	for (int d = 0; d < nb && d < n->rank; d++) {
		int8_t f = (int8_t)newf(r);
		r->resf[d] = f;
		for (int i = 0; i < r->nops; i++)
			r->opf[i][d] = f;
	}
	if (!rows)
		return;
	r->linear = true;
	for (int d = nb + 1; d < n->rank; d++)
		r->resf[d] = r->opf[0][d] = (int8_t)newf(r);
}

void prop_rule_build(const IrModule *m, const IrNode *n, Rule *r)
{
	memset(r, 0, sizeof *r);
	memset(r->opf, -1, sizeof r->opf);
	memset(r->resf, -1, sizeof r->resf);
	r->ok = true;
	r->heads_f = r->kv_f = -1;
	r->red = IR_RED_SUM;
	r->nops = n->nops < PR_MAXOPS ? n->nops : PR_MAXOPS;
	for (int i = 0; i < r->nops; i++)
		r->order[i] = (uint8_t)i;
	unsigned fl = ir_op_flags(n->op);
	switch (n->op) {
	case IR_OP_PARAM:
	case IR_OP_INPUT:
	case IR_OP_CONST:
	case IR_OP_LOSS_SCALE:
		for (int d = 0; d < n->rank; d++)
			r->resf[d] = (int8_t)newf(r);
		return;
	case IR_OP_MATMUL:
		rule_matmul(r, m, n);
		return;
	case IR_OP_MATMUL_WGRAD:
		rule_wgrad(r, m, n);
		return;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		rule_reduce(r, m, n);
		return;
	case IR_OP_SOFTMAX:
	case IR_OP_LOG_SOFTMAX:
	case IR_OP_SOFTMAX_BWD:
	case IR_OP_LOG_SOFTMAX_BWD:
		rule_bcast(r, m, n, 0, r->nops);
		for (int i = -1; i < r->nops; i++)
			rule_unsplit(r, i, (int)ir_attr_axis(n)->axis);
		return;
	case IR_OP_LAYERNORM:
	case IR_OP_RMSNORM:
		rule_norm(r, m, n, 0, false, false);
		return;
	case IR_OP_LAYERNORM_BWD:
	case IR_OP_RMSNORM_BWD:
		rule_norm(r, m, n, 1, true, false);
		return;
	case IR_OP_LAYERNORM_BWD_GAMMA:
	case IR_OP_RMSNORM_BWD_GAMMA:
		rule_norm(r, m, n, 1, true, true);
		return;
	case IR_OP_EMBED:
		rule_embed(r, m, n, false);
		return;
	case IR_OP_EMBED_BWD:
		rule_embed(r, m, n, true);
		return;
	case IR_OP_PERMUTE:
		r->linear = true;
		for (int d = 0; d < n->rank && d < ir_attr_perm(n)->n; d++) {
			int64_t s = ir_attr_perm(n)->perm[d];
			r->resf[d] = (int8_t)newf(r);
			if (s >= 0 && s < IR_MAX_RANK)
				r->opf[0][s] = r->resf[d];
		}
		return;
	case IR_OP_RESHAPE:
		r->linear = true;
		rule_reshape(r, m, n);
		return;
	case IR_OP_CONCAT:
	case IR_OP_SLICE:
	case IR_OP_PAD:
		rule_same(r, m, n, 0, n, false);
		for (int i = -1; i < r->nops; i++)
			rule_unsplit(r, i, (int)(n->op == IR_OP_CONCAT ? ir_attr_axis(n)->axis
			                                               : ir_attr_slice(n)->axis));
		return;
	case IR_OP_ATTENTION:
		rule_attention(r, m, n, false);
		return;
	case IR_OP_ROPE:
		/* linear; any dim splits, D by whole heads (a split T reads
		 * its global positions, partition_rules.c) */
		rule_bcast(r, m, n, 0, 1);
		r->linear = true;
		r->heads_f = r->resf[n->rank - 1];
		r->heads = ir_attr_rope(n)->heads;
		return;
	case IR_OP_ATTENTION_BWD:
		rule_attention(r, m, n, true);
		return;
	case IR_OP_CROSS_ENTROPY:
		rule_xent(r, m, n, 0, 1, true);
		return;
	case IR_OP_CROSS_ENTROPY_BWD:
		rule_xent(r, m, n, 1, 2, false);
		return;
	case IR_OP_MSE:
		rule_same(r, m, n, 0, m->nodes[n->ops[0]], true);
		return;
	case IR_OP_EXPAND:
	case IR_OP_RELU_BWD:
	case IR_OP_GELU_BWD:
	case IR_OP_SILU_BWD:
		rule_bcast(r, m, n, 0, r->nops);
		return;
	case IR_OP_SUM_TO: {
		/* x's dims that the result keeps line up with its trailing
		 * dims; the others are summed away */
		const IrNode *x = m->nodes[n->ops[0]];
		for (int j = 0; j < x->rank && j < IR_MAX_RANK; j++) {
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
		rule_max_bwd(r, m, n);
		return;
	case IR_OP_TOPK: case IR_OP_ONE_HOT: case IR_OP_GATHER: case IR_OP_SCATTER_ADD:
	case IR_OP_MOE_SLOT: case IR_OP_MOE_TOKEN:
		rule_route(r, m, n);
		return;
	default:
		break;
	}
	if ((fl & OPF_ELEMWISE) && !(fl & OPF_COLL)) {
		rule_bcast(r, m, n, 0, r->nops);
		r->linear = n->op == IR_OP_ADD || n->op == IR_OP_SUB || n->op == IR_OP_NEG ||
		            n->op == IR_OP_SCALE || n->op == IR_OP_DROPOUT || n->op == IR_OP_CAST;
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
void prop_assign_from(const Rule *r, int slot, const Placement *p, Assign *a)
{
	prop_assign_clear(a);
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
bool prop_merge(const Rule *r, Assign *dst, const Assign *src, bool only_reduce, uint32_t allow)
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

void prop_project(const Rule *r, const Assign *a, int slot, int rank, bool resolved, Placement *out)
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
void prop_repair(const IrModule *m, const IrNode *n, const Rule *r, Assign *a)
{
	const Mesh *mesh = &m->mesh;
	bool uneven = m->train.uneven_shards;
	for (int f = 0; f < r->nf; f++) {
		while (a->n[f]) {
			int64_t parts = 1;
			for (int k = 0; k < a->n[f]; k++)
				parts *= mesh->sizes[a->ax[f][k]];
			bool ok = (r->heads_f != f || r->heads % parts == 0) &&
			          (r->kv_f != f || r->kv_heads % parts == 0);
			for (int s = -1; ok && s < r->nops; s++) {
				const IrNode *t = s < 0 ? n : m->nodes[n->ops[s]];
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
