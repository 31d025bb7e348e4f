/* partition_rules.c - each op's local rule, for passes/partition.c.
 *
 * A rule reads the node's target placement T (what propagate chose; when
 * unknown it follows its operands' current placements instead) and says
 * which placement every operand must have for the op, run on local shards,
 * to compute a shard of the global result, and what that result's
 * placement is.  The driver inserts the resharding.  The rules, by family:
 *
 *   elementwise and the ops that act along some dims only (softmax, norms,
 *   attention, concat, slice and their gradients): result dims follow T;
 *   an operand dim follows its result dim unless it broadcasts; the dims
 *   an op normalises or indexes along are unsplit ("pinned").  Attention
 *   may split its feature dim by whole heads (head parallel).
 *   matmul: batch and free dims follow T, the contraction keeps the split
 *   the operands already share; a split contraction gives Partial.
 *   reductions (sum, mean, max, sum_to, the gamma gradients, embed_bwd,
 *   cross_entropy, mse): reduced dims keep their split and the result is
 *   Partial over those axes (max: a max-partial); means and the losses
 *   are local means scaled by 1/(group size), exact for even shards (an
 *   uneven mean by ceil(n / parts) / n; partition.c gathers the losses'
 *   uneven positions and max's uneven dims whole first).
 *   embed: a table split on V becomes embed_vp (masked lookup, the result
 *   partial over V's axes); embed_bwd split on V as its target wants
 *   becomes embed_bwd_vp.  cross_entropy with vocab-split logits is
 *   partition.c's (part_xent_vp).
 *
 * Partial operands pass through ops that are linear in them (add of two
 * equally partial values, scale, the gradient ops in dy, ...) when T keeps
 * the partial; otherwise they are resolved first (Megatron: all_reduce,
 * then add the bias once).
 */
#include "passes/partition_impl.h"
#include "passes/propagate.h"
#include "passes/reshard.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum { LIN_NONE, LIN_FIRST, LIN_ONE, LIN_ALL };

/* placement_replicated, here where it inlines: the rules start every
 * placement they build from it, several per node. */
static inline void replicated(Placement *p, int ndims)
{
	memset(p, 0, sizeof *p);
	p->known = true;
	p->ndims = (uint8_t)(ndims < 0 ? 0 : ndims > IR_MAX_RANK ? IR_MAX_RANK : ndims);
}

static uint32_t dim_mask(const Placement *p, int d)
{
	uint32_t u = 0;
	for (int j = 0; j < p->naxes[d]; j++)
		u |= 1u << p->axes[d][j];
	return u;
}

static uint32_t dims_mask(const Placement *p)
{
	uint32_t u = 0;
	for (int d = 0; d < p->ndims; d++)
		u |= dim_mask(p, d);
	return u;
}

static void copy_dim(Placement *dst, int dd, const Placement *src, int sd)
{
	dst->naxes[dd] = src->naxes[sd];
	memcpy(dst->axes[dd], src->axes[sd], sizeof dst->axes[dd]);
}

static const IrNode *opnd(const IrModule *m, const IrNode *n, int i)
{
	return m->nodes[n->ops[i]];
}

/* Takes src's dim sd into dst's dim dd when it is split and shares no axis
 * with *used; returns whether it did. */
static bool follow(Placement *dst, int dd, const Placement *src, int sd, uint32_t *used)
{
	uint32_t a = dim_mask(src, sd);
	if (!a || (a & *used))
		return false;
	copy_dim(dst, dd, src, sd);
	*used |= a;
	return true;
}

/* The partial axes that survive the op, and which operands keep them. */
static uint32_t lin_partial(int lin, const Placement *T, const Placement *cur, int nops,
                            uint32_t exclude, uint32_t *keep)
{
	*keep = 0;
	if (lin == LIN_NONE || nops == 0)
		return 0;
	int first = 0;
	if (lin == LIN_ONE)
		while (first < nops && !cur[first].partial)
			first++;
	if (first == nops || cur[first].partial_op != IR_RED_SUM)
		return 0;
	uint32_t q = cur[first].partial;
	if (lin == LIN_ALL) {
		for (int i = 0; i < nops; i++)
			if (cur[i].partial != q || cur[i].partial_op != IR_RED_SUM)
				return 0;
		*keep = nops >= 32 ? ~0u : (1u << nops) - 1;
	} else {
		*keep = 1u << first;
	}
	if (T->known)
		q &= T->partial;
	q &= ~exclude;
	if (!q)
		*keep = 0;
	return q;
}

/* Elementwise-like: result dims from T (or the operands), pinned dims
 * unsplit, operands aligned right with broadcasting. */
static void map_rule(const IrModule *m, const IrNode *n, const Placement *T,
                     const Placement *cur, PartRule *r, uint32_t pinned, int lin)
{
	Placement *R = &r->res;
	replicated(R, n->rank);
	uint32_t used = 0;
	for (int k = 0; k < n->rank; k++) {
		if (pinned & (1u << k))
			continue;
		if (T->known) {
			if (!(dim_mask(T, k) & used))
				follow(R, k, T, k, &used);
			continue;
		}
		for (int i = 0; i < n->nops; i++) {
			const IrNode *o = opnd(m, n, i);
			int j = k - (n->rank - o->rank);
			if (j >= 0 && o->shape[j] == n->shape[k] && follow(R, k, &cur[i], j, &used))
				break;
		}
	}
	uint32_t keep;
	uint32_t q = lin_partial(lin, T, cur, n->nops, dims_mask(R), &keep);
	R->partial = q;
	for (int i = 0; i < n->nops; i++) {
		const IrNode *o = opnd(m, n, i);
		int off = n->rank - o->rank;
		replicated(&r->req[i], o->rank);
		for (int j = 0; j < o->rank; j++)
			if (j + off >= 0 && o->shape[j] == n->shape[j + off])
				copy_dim(&r->req[i], j, R, j + off);
		if (keep & (1u << i))
			r->req[i].partial = q;
	}
}

/* Reductions.  red[j]: input dim j is reduced; out[j]: the result dim
 * input dim j becomes, or -1.  Reduced dims keep their split, which makes
 * the result partial (kind max: a max-partial). */
static void reduce_rule(const IrModule *m, const IrNode *n, const Placement *T,
                        const Placement *cur, PartRule *r, uint32_t red, const int *out,
                        IrOp kind)
{
	const IrNode *x = opnd(m, n, 0);
	Placement *R = &r->res, *X = &r->req[0];
	replicated(R, n->rank);
	replicated(X, x->rank);
	uint32_t used = 0;
	for (int j = 0; j < x->rank; j++) {
		if ((red & (1u << j)) || out[j] < 0)
			continue;
		const Placement *src = T->known ? T : &cur[0];
		int sd = T->known ? out[j] : j;
		if (follow(R, out[j], src, sd, &used))
			copy_dim(X, j, R, out[j]);
	}
	uint32_t redax = 0;
	for (int j = 0; j < x->rank; j++)
		if ((red & (1u << j)) && follow(X, j, &cur[0], j, &used))
			redax |= dim_mask(X, j);
	uint32_t keep = 0, q = 0;
	if (kind != IR_OP_MAX) {
		/* sequence parallel: a sum of a partial activation gradient
		 * (a bias or norm-shift gradient) sums the local part and
		 * reduces the small result, rather than all_reducing the
		 * activation the norm's backward reduce_scatters */
		Placement Tk = *T;
		if (m->train.sequence_parallel && T->known && red && x->rank >= 3 &&
		    cur[0].partial_op == IR_RED_SUM)
			Tk.partial |= cur[0].partial;
		q = lin_partial(LIN_FIRST, &Tk, cur, 1, used, &keep);
	}
	X->partial = q;
	R->partial = redax | q;
	R->partial_op = kind == IR_OP_MAX && redax ? IR_RED_MAX : IR_RED_SUM;
	if (kind == IR_OP_MEAN && redax) {
		r->scale = 1.0 / (double)mesh_axes_size(&m->mesh, redax);
		if (!pass_placement_even(&m->mesh, X, x->rank, x->shape)) {
			/* uneven: a local mean over c = ceil(n / parts) rows,
			 * the padding zero, times c / n */
			r->scale = 1;
			for (int j = 0; j < x->rank; j++) {
				int64_t parts = placement_dim_parts(X, &m->mesh, j), nj = x->shape[j];
				if ((red & (1u << j)) && parts > 1)
					r->scale *= (double)(nj / parts + (nj % parts != 0)) / (double)nj;
			}
		}
	}
}

/* matmul [..., m, k] x [..., k, n]: batch and free dims follow T; the
 * contraction keeps a split both operands can share. */
static void matmul_rule(const IrModule *m, const IrNode *n, const Placement *T,
                        const Placement *cur, PartRule *r)
{
	const IrNode *a = opnd(m, n, 0), *b = opnd(m, n, 1);
	int rr = n->rank, ra = a->rank, rb = b->rank;
	Placement *R = &r->res;
	replicated(R, rr);
	uint32_t used = 0;
	for (int k = 0; k < rr; k++) {
		if (T->known) {
			follow(R, k, T, k, &used);
			continue;
		}
		int ja = k == rr - 1 ? -1 : k - (rr - ra);
		int jb = k == rr - 2 ? -1 : k - (rr - rb);
		if (ja >= 0 && a->shape[ja] == n->shape[k] && follow(R, k, &cur[0], ja, &used))
			continue;
		if (jb >= 0 && b->shape[jb] == n->shape[k])
			follow(R, k, &cur[1], jb, &used);
	}
	/* the contraction: a's last dim, b's second to last */
	Placement K;
	replicated(&K, 1);
	uint32_t ka = dim_mask(&cur[0], ra - 1), kb = dim_mask(&cur[1], rb - 2);
	uint32_t u = used;
	if (ka && !(ka & used) && (ka == kb || !kb))
		follow(&K, 0, &cur[0], ra - 1, &u);
	else if (kb && !(kb & used))
		follow(&K, 0, &cur[1], rb - 2, &u);
	else if (ka && !(ka & used))
		follow(&K, 0, &cur[0], ra - 1, &u);
	uint32_t kax = dim_mask(&K, 0), keep;
	uint32_t q = lin_partial(LIN_ONE, T, cur, 2, used | kax, &keep);
	R->partial = kax | q;
	Placement *A = &r->req[0], *B = &r->req[1];
	replicated(A, ra);
	replicated(B, rb);
	for (int j = 0; j < ra - 2; j++)
		if (a->shape[j] == n->shape[j + rr - ra])
			copy_dim(A, j, R, j + rr - ra);
	for (int j = 0; j < rb - 2; j++)
		if (b->shape[j] == n->shape[j + rr - rb])
			copy_dim(B, j, R, j + rr - rb);
	copy_dim(A, ra - 2, R, rr - 2);
	copy_dim(A, ra - 1, &K, 0);
	copy_dim(B, rb - 2, &K, 0);
	copy_dim(B, rb - 1, R, rr - 1);
	A->partial = (keep & 1) ? q : 0;
	B->partial = (keep & 2) ? q : 0;
}

/* matmul_wgrad(x [..., k], dy [..., n]) -> [k, n]: the result follows T
 * (else x's last dim and dy's); each leading dim is contracted, split on
 * both operands as x has it where dy agrees or is whole (else as dy has
 * it), so a batch and sequence split stays local and the result is
 * partial over their axes: matmul_rule's contraction, dim by dim. */
static void wgrad_rule(const IrModule *m, const IrNode *n, const Placement *T,
                       const Placement *cur, PartRule *r)
{
	int rx = opnd(m, n, 0)->rank;
	Placement *R = &r->res;
	replicated(R, 2);
	uint32_t used = 0;
	for (int k = 0; k < 2; k++)
		follow(R, k, T->known ? T : &cur[k], T->known ? k : rx - 1, &used);
	Placement K;
	replicated(&K, rx);
	uint32_t u = used;
	for (int j = 0; j < rx - 1; j++) {
		uint32_t ka = dim_mask(&cur[0], j), kb = dim_mask(&cur[1], j);
		if (ka && !(ka & u) && (ka == kb || !kb))
			follow(&K, j, &cur[0], j, &u);
		else if (kb && !(kb & u))
			follow(&K, j, &cur[1], j, &u);
		else if (ka && !(ka & u))
			follow(&K, j, &cur[0], j, &u);
	}
	uint32_t kax = dims_mask(&K), keep;
	uint32_t q = lin_partial(LIN_ONE, T, cur, 2, used | kax, &keep);
	R->partial = kax | q;
	Placement *X = &r->req[0], *DY = &r->req[1];
	*X = K;
	*DY = K;
	copy_dim(X, rx - 1, R, 0);
	copy_dim(DY, rx - 1, R, 1);
	X->partial = (keep & 1) ? q : 0;
	DY->partial = (keep & 2) ? q : 0;
}

/* permute: output dim i is input dim p[i]. */
static void permute_rule(const IrModule *m, const IrNode *n, const Placement *T,
                         const Placement *cur, PartRule *r)
{
	Placement *R = &r->res, *X = &r->req[0];
	replicated(R, n->rank);
	replicated(X, n->rank);
	uint32_t used = 0;
	for (int i = 0; i < n->rank; i++) {
		int pi = (int)ir_attr_perm(n)->perm[i];
		if (T->known ? follow(R, i, T, i, &used) : follow(R, i, &cur[0], pi, &used))
			copy_dim(X, pi, R, i);
	}
	uint32_t keep;
	R->partial = X->partial = lin_partial(LIN_FIRST, T, cur, 1, used, &keep);
	(void)m;
}

/* reshape: dims group into blocks of equal products (unsplit dims of
 * size 1 left out); within a block only the major dims may be split, by the same axes, and only when both divide
 * (then the local block is one contiguous run of the global one) or the
 * block is one dim on both sides (uneven shards keep their padding). */
static bool dim_split(const Placement *p, int d)
{
	return d < p->ndims && p->naxes[d] > 0;
}

static void reshape_rule(const IrModule *m, const IrNode *n, const Placement *T,
                         const Placement *cur, PartRule *r)
{
	const IrNode *x = opnd(m, n, 0);
	const Mesh *mesh = &m->mesh;
	Placement *R = &r->res, *X = &r->req[0];
	replicated(R, n->rank);
	replicated(X, x->rank);
	int i = 0, o = 0;
	uint32_t used = 0;
	while (i < x->rank && o < n->rank) {
		/* unsplit dims of size 1 map to nothing (a slice of a stacked
		 * [3, B, ...] dropping its 1): the block starts after them */
		while (i < x->rank - 1 && x->shape[i] == 1 && !dim_split(&cur[0], i))
			i++;
		while (o < n->rank - 1 && n->shape[o] == 1 && !(T->known && dim_split(T, o)))
			o++;
		int i0 = i, o0 = o;
		int64_t pi = x->shape[i++], po = n->shape[o++];
		while (pi != po) {
			if (pi < po && i < x->rank)
				pi *= x->shape[i++];
			else if (po < pi && o < n->rank)
				po *= n->shape[o++];
			else
				break;
		}
		if (pi != po)
			break;
		Placement A;
		replicated(&A, 1);
		uint32_t u = used;
		if (!(T->known ? follow(&A, 0, T, o0, &u) : follow(&A, 0, &cur[0], i0, &u)))
			continue;
		int64_t parts = placement_dim_parts(&A, mesh, 0);
		/* a dim that is a block by itself may be cut unevenly: its
		 * padded rows stay where they are */
		bool alone = i - i0 == 1 && o - o0 == 1;
		if (!alone && (x->shape[i0] % parts || n->shape[o0] % parts))
			continue;
		used = u;
		copy_dim(R, o0, &A, 0);
		copy_dim(X, i0, &A, 0);
	}
	uint32_t keep;
	R->partial = X->partial = lin_partial(LIN_FIRST, T, cur, 1, used, &keep);
}

/* Ops that sum over "position" dims of operand 0 (all but its last
 * `tail` dims) into a result without them: the positions keep their split
 * and the result is partial over it.  tail_out: the result's dims are
 * operand 0's last ones (embed_bwd: [V, D] from dy [..., D]).  Operand i's
 * leading dims are positions too. */
static uint32_t positions(const IrModule *m, const IrNode *n, const Placement *cur,
                          PartRule *r, int npos, uint32_t used, int nopnds)
{
	uint32_t pos = 0;
	Placement P;
	replicated(&P, npos);
	for (int j = 0; j < npos; j++)
		for (int i = 0; i < nopnds; i++)
			if (opnd(m, n, i)->rank >= npos && follow(&P, j, &cur[i], j, &used))
				break;
	for (int j = 0; j < npos; j++)
		pos |= dim_mask(&P, j);
	for (int i = 0; i < nopnds; i++)
		for (int j = 0; j < npos && j < r->req[i].ndims; j++)
			copy_dim(&r->req[i], j, &P, j);
	return pos;
}

double part_positions_scale(const Mesh *mesh, const Placement *pl, const IrNode *like, int npos)
{
	double local = 1, all = 1; /* exact below 2^53: one rounding */
	for (int d = 0; d < npos && d < like->rank && d < pl->ndims; d++) {
		int64_t parts = placement_dim_parts(pl, mesh, d), g = like->shape[d];
		local *= (double)(g / parts + (g % parts != 0));
		all *= (double)g;
	}
	return all > 0 ? local / all : 1;
}

static void init_reqs(const IrModule *m, const IrNode *n, PartRule *r)
{
	for (int i = 0; i < n->nops; i++)
		replicated(&r->req[i], opnd(m, n, i)->rank);
}

/* The axes dim d of p is split over, when they are in group order (the
 * order the vocab-parallel ops and attention's head_axes number shards
 * in), else 0. */
static uint32_t group_axes(const Placement *p, int d)
{
	if (!p->known || d >= p->ndims)
		return 0;
	for (int k = 1; k < p->naxes[d]; k++)
		if (p->axes[d][k] <= p->axes[d][k - 1])
			return 0;
	return dim_mask(p, d);
}

/* Attention (lin = LIN_NONE) and attention_bwd (result [3, B, T, D]):
 * splits the head dim ddim only by whole heads.  Grouped-query k and v
 * split with q when their kv heads divide as evenly; otherwise they stay
 * whole and the local op reads the kv heads of its query heads
 * (head_axes; Megatron's rule).  Segment ids follow batch and sequence. */
static void heads_rule(const IrModule *m, const IrNode *n, const Placement *T,
                       const Placement *cur, PartRule *r, uint32_t pinned, int ddim, int lin)
{
	map_rule(m, n, T, cur, r, pinned, lin);
	int64_t parts = placement_dim_parts(&r->res, &m->mesh, ddim);
	int64_t heads = ir_attr_attn(n)->heads, G = ir_attn_kv_heads(ir_attr_attn(n));
	bool split_kv = G % parts == 0;
	if (parts > 1 && (heads % parts != 0 || (!split_kv && !group_axes(&r->res, ddim)))) {
		map_rule(m, n, T, cur, r, pinned | (1u << ddim), lin);
		parts = 1;
	}
	int k0 = lin == LIN_NONE ? 1 : 2, b0 = ddim - 2; /* k, v: operands k0, k0 + 1 */
	for (int i = k0; i < k0 + 2 && G != heads; i++) {
		replicated(&r->req[i], 3);
		copy_dim(&r->req[i], 0, &r->res, b0);
		copy_dim(&r->req[i], 1, &r->res, b0 + 1);
		if (parts > 1 && split_kv)
			copy_dim(&r->req[i], 2, &r->res, ddim);
	}
	if (n->nops > k0 + 2) { /* the segment ids */
		replicated(&r->req[k0 + 2], 2);
		copy_dim(&r->req[k0 + 2], 0, &r->res, b0);
		copy_dim(&r->req[k0 + 2], 1, &r->res, b0 + 1);
	}
	r->at.attn.heads = heads / parts;
	if (parts > 1 && G != heads && split_kv)
		r->at.attn.kv_heads = G / parts;
	else if (parts > 1 && G != heads)
		r->at.attn.head_axes = group_axes(&r->res, ddim);
}

/* The names of the mesh axes T splits dim d over, in its order, as "cp" or
 * "(tp, cp)". */
static void axes_str(const Mesh *mesh, const Placement *T, int d, char *buf, size_t cap)
{
	size_t n = 0;
	int k = 0;
	buf[0] = 0;
	for (int j = 0; j < T->naxes[d] && n < cap; j++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s", k++ ? ", " : "",
		                      mesh->names[T->axes[d][j]]);
	if (k > 1 && n + 2 < cap) {
		memmove(buf + 1, buf, n + 1);
		buf[0] = '(';
		buf[n + 1] = ')';
		buf[n + 2] = 0;
	}
}

/* Attention with its sequence dim (tdim; the heads' dim follows it) split
 * as T says: context parallelism.  Ulysses (DeepSpeed-Ulysses): the
 * operands are wanted head-split over the sequence's axes besides their
 * own head split (the driver's reshard is an all_to_all from sequence to
 * heads), the local op runs on the whole sequence of heads / (cp x tp)
 * heads, and its head-split result goes back to T's sequence split (the
 * all_to_all back).  The backward is the same rule on attention_bwd: dy
 * goes to heads, dq, dk, dv back to the sequence; q, k and v are the
 * forward's head-split copies.  Ring: q, k, v and the result keep the
 * sequence split and attn.ring names its axes; partition_ring.c's part_ring
 * expands the op into the ring of block ops.  Where Ulysses does not apply (context_
 * parallel none and heads not dividing) the sequence is gathered whole.
 * Returns false with why set (a user error) where the setting asked for
 * what cannot apply. */
static bool attention_rule(const IrModule *m, const IrNode *n, const Placement *T,
                           const Placement *cur, PartRule *r, int tdim, int lin, char *why,
                           size_t cap)
{
	int ddim = tdim + 1;
	uint32_t seq = T->known ? dim_mask(T, tdim) : 0;
	IrContextParallel mode = m->train.context_parallel;
	heads_rule(m, n, T, cur, r, 1u << tdim | (tdim == 2 ? 1u : 0), ddim, lin);
	if (!seq)
		return true;
	int64_t heads = ir_attr_attn(n)->heads, G = ir_attn_kv_heads(ir_attr_attn(n));
	int64_t hparts = placement_dim_parts(&r->res, &m->mesh, ddim);
	int64_t sparts = mesh_axes_size(&m->mesh, seq);
	if (sparts <= 1)
		return true;
	char axes[128];
	axes_str(&m->mesh, T, tdim, axes, sizeof axes);
	int k0 = lin == LIN_NONE ? 1 : 2; /* k, v: operands k0, k0 + 1; then the segment ids */
	if (mode == IR_CP_RING) {
		/* ring attention (partition_ring.c, part_ring): q, k, v and the
		 * result stay sequence-split; the local program passes K/V */
		if (!group_axes(T, tdim)) {
			r->user = true;
			snprintf(why, cap,
			         "context_parallel ring: ring attention does not support a sequence "
			         "split over axes out of mesh order yet; the sequence of attention's "
			         "inputs is split over %s (use context_parallel ulysses, or leave the "
			         "sequence whole)",
			         axes);
			return false;
		}
		Placement *R = &r->res;
		copy_dim(R, tdim, T, tdim);
		for (int i = 0; i < n->nops; i++) {
			/* the segment ids [B, T] split as the sequence: they go
			 * round the ring with their K/V block */
			int off = n->rank - opnd(m, n, i)->rank;
			copy_dim(&r->req[i], i == k0 + 2 ? 1 : tdim - off, R, tdim);
		}
		r->at.attn.ring = seq;
		/* causal: rank i's block would see i + 1 of the N key blocks;
		 * two chunks i, 2N-1-i each see N (part_ring's ring_balance) */
		/* a sequence its ranks do not divide: padded blocks of
		 * ceil(T / N) rows (partition.c's uneven shards), whose keys
		 * past T the block ops leave out; balanced as the blocks of the
		 * padded sequence, where those split in two chunks */
		int64_t Tg = n->shape[tdim], Tl = (Tg + sparts - 1) / sparts;
		r->at.attn.balanced = ir_attr_attn(n)->causal && Tl % 2 == 0;
		r->at.attn.seq = Tg % sparts ? Tg : 0;
		return true;
	}
	int nax = r->res.naxes[ddim] + T->naxes[tdim];
	int64_t parts = hparts * sparts;
	/* grouped-query k and v go head-split with q where their kv heads
	 * divide as well.  Where they divide the head split's own axes but not
	 * the sequence's too (llama's 2 kv heads on cp = 2 x tp = 2), k and v
	 * keep their own head split and gather the sequence over its axes
	 * instead: each rank's query heads, a 1/cp of its own split's, read kv
	 * heads of that split, the sequence axes numbering them (head_axes;
	 * DeepSpeed-Ulysses' GQA) */
	bool kv_split = G == heads || (G % parts == 0 && !r->at.attn.head_axes);
	bool kv_gather = !kv_split && !r->at.attn.head_axes && G % hparts == 0 &&
	                 group_axes(T, tdim);
	/* k and v kept whole over the head split (heads_rule's head_axes: tp
	 * outnumbering the kv heads) gather the sequence too: every rank
	 * reads every kv head, its query heads split over the own axes, then
	 * the sequence's, which number them minor (head_minor) */
	bool kv_whole = r->at.attn.head_axes && group_axes(T, tdim);
	if (heads % parts != 0 || !(kv_split || kv_gather || kv_whole) || nax > IR_MAX_AXES) {
		if (mode != IR_CP_ULYSSES)
			return true; /* gathered: heads_rule's pinned sequence */
		r->user = true;
		const char *fix = "; use context_parallel ring (no head split), or leave "
		                  "context_parallel unset to gather the sequence for attention";
		if (heads % parts != 0)
			snprintf(why, cap,
			         "context_parallel ulysses: attention's %" PRId64 " heads are not "
			         "divisible by %" PRId64 " (the %" PRId64 " ranks of %s, over which its "
			         "sequence is split, times the %" PRId64 " its heads are split over)%s",
			         heads, parts, sparts, axes, hparts, fix);
		else /* k and v gather the sequence, in group order */
			snprintf(why, cap,
			         "context_parallel ulysses: grouped-query attention (%" PRId64
			         " kv heads for %" PRId64 " query heads) gathers the sequence "
			         "for k and v, which does not support a sequence split over axes "
			         "out of mesh order yet; the sequence of attention's inputs is "
			         "split over %s (split it over the axes in mesh order, or leave "
			         "context_parallel unset to gather the sequence for attention)",
			         G, heads, axes);
		return false;
	}
	/* heads split over the result's own axes, then the sequence's */
	Placement *R = &r->res, own = *R;
	for (int j = 0; j < T->naxes[tdim]; j++)
		R->axes[ddim][R->naxes[ddim]++] = T->axes[tdim][j];
	for (int i = 0; i < n->nops; i++) {
		if (i == k0 + 2) { /* [B, T]: every rank reads the whole sequence's */
			replicated(&r->req[i], 2);
			copy_dim(&r->req[i], 0, R, ddim - 2);
			continue;
		}
		int off = n->rank - opnd(m, n, i)->rank;
		bool kv = i == k0 || i == k0 + 1;
		if (kv && kv_whole)
			continue; /* heads_rule's: heads and sequence whole */
		copy_dim(&r->req[i], ddim - off, kv && kv_gather ? &own : R, ddim);
	}
	r->at.attn.heads = heads / parts;
	if (G != heads && !kv_whole)
		r->at.attn.kv_heads = G / (kv_gather ? hparts : parts);
	if (kv_gather)
		r->at.attn.head_axes = seq;
	if (kv_whole) {
		r->at.attn.head_axes |= seq;
		r->at.attn.head_minor = seq;
	}
	return true;
}

/* rope [..., T, D]: linear, any split; D by whole heads, T in group order
 * (the local op starts its positions at the shard's offset, rope.axes),
 * else that dim stays whole. */
static void rope_rule(const IrModule *m, const IrNode *n, const Placement *T,
                      const Placement *cur, PartRule *r)
{
	int dd = n->rank - 1, td = n->rank - 2;
	int64_t heads = ir_attr_rope(n)->heads;
	uint32_t pinned = 0;
	for (;;) {
		map_rule(m, n, T, cur, r, pinned, LIN_FIRST);
		int64_t parts = placement_dim_parts(&r->res, &m->mesh, dd);
		uint32_t t = dim_mask(&r->res, td);
		if (parts > 1 && heads % parts != 0 && !(pinned >> dd & 1)) {
			pinned |= 1u << dd;
		} else if (t && !group_axes(&r->res, td) && !(pinned >> td & 1)) {
			pinned |= 1u << td;
		} else {
			r->at.rope.heads = heads / (parts > 0 ? parts : 1);
			r->at.rope.axes = t;
			return;
		}
	}
}

/* The routing ops: the result's group dims (and gather's and
 * scatter_add's rows) follow T, or operand 0, or the indices; the dims
 * they index, rank or count along stay whole.  Gather and scatter_add are
 * linear in operand 0, so a partial passes through when T keeps it. */
static void route_rule(const IrModule *m, const IrNode *n, const Placement *T,
                       const Placement *cur, PartRule *r)
{
	int nb = prop_route_groups(m, n), rk = n->rank;
	bool rows = n->op == IR_OP_GATHER || n->op == IR_OP_SCATTER_ADD;
	Placement *R = &r->res;
	replicated(R, rk);
	uint32_t used = 0;
	for (int k = 0; k < rk; k++) {
		if (k >= nb && !(rows && k > nb))
			continue;
		if (T->known) {
			follow(R, k, T, k, &used);
			continue;
		}
		for (int i = 0; i < n->nops; i++)
			if ((k < nb || i == 0) && follow(R, k, &cur[i], k, &used))
				break;
	}
	for (int i = 0; i < n->nops; i++) {
		const IrNode *o = opnd(m, n, i);
		replicated(&r->req[i], o->rank);
		for (int k = 0; k < o->rank && k < rk; k++)
			if (k < nb || (i == 0 && rows && k > nb))
				copy_dim(&r->req[i], k, R, k);
	}
	uint32_t keep;
	R->partial = rows ? lin_partial(LIN_FIRST, T, cur, 1, dims_mask(R), &keep) : 0;
	if (R->partial && keep) {
		r->req[0].partial = R->partial;
		r->req[0].partial_op = IR_RED_SUM;
	}
	if (R->partial)
		R->partial_op = IR_RED_SUM;
	if (n->op == IR_OP_MOE_SLOT) { /* the live axes that do not split it */
		uint32_t rep = 0;
		for (int a = 0; a < m->mesh.naxes; a++)
			if (m->mesh.sizes[a] > 1 && a != m->pp_axis)
				rep |= 1u << a;
		r->at.route.replicas = rep & ~dims_mask(R);
	}
}

bool part_rule(const IrModule *m, const IrNode *n, const Placement *T, const Placement *cur,
               PartRule *r, char *why, size_t cap)
{
	IrAttrKind ak = ir_op_attr_kind(n->op);
	r->at = *ir_attr_get(n, ak);
	r->scale = 0;
	r->scale_dl = false;
	r->op = 0;
	r->user = false;
	int rk = n->rank;
	uint32_t all = rk >= 32 ? ~0u : (1u << rk) - 1;
	uint32_t last = rk ? 1u << (rk - 1) : 0;
	int64_t ax = ak == IR_ATTR_AXIS ? r->at.axis.axis : ak == IR_ATTR_SLICE ? r->at.slice.axis : -1;
	uint32_t axis = ax >= 0 && ax < 32 ? 1u << ax : 0;
	switch (n->op) {
	case IR_OP_ADD: case IR_OP_SUB:
		map_rule(m, n, T, cur, r, 0, LIN_ALL);
		return true;
	case IR_OP_MUL:
		map_rule(m, n, T, cur, r, 0, LIN_ONE);
		return true;
	case IR_OP_DIV:
	case IR_OP_NEG: case IR_OP_SCALE: case IR_OP_CAST: case IR_OP_EXPAND:
	case IR_OP_DROPOUT: /* each rank draws its shard's mask (ir/dropout.c) */
	case IR_OP_RELU_BWD: case IR_OP_GELU_BWD: case IR_OP_SILU_BWD:
		map_rule(m, n, T, cur, r, 0, LIN_FIRST);
		return true;
	case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT: case IR_OP_TANH:
	case IR_OP_RELU: case IR_OP_GELU: case IR_OP_SILU: case IR_OP_SIGMOID:
		map_rule(m, n, T, cur, r, 0, LIN_NONE);
		return true;
	case IR_OP_MAX_BWD:
		/* max_bwd splits ties across the whole group: run replicated */
		map_rule(m, n, T, cur, r, all, LIN_NONE);
		return true;
	case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX:
		map_rule(m, n, T, cur, r, axis, LIN_NONE);
		return true;
	case IR_OP_SOFTMAX_BWD: case IR_OP_LOG_SOFTMAX_BWD:
		map_rule(m, n, T, cur, r, axis, LIN_FIRST);
		return true;
	case IR_OP_CONCAT:
		map_rule(m, n, T, cur, r, axis, LIN_ALL);
		return true;
	case IR_OP_SLICE: case IR_OP_PAD:
		map_rule(m, n, T, cur, r, axis, LIN_FIRST);
		return true;
	case IR_OP_LAYERNORM: case IR_OP_RMSNORM:
		map_rule(m, n, T, cur, r, last, LIN_NONE);
		return true;
	case IR_OP_LAYERNORM_BWD: case IR_OP_RMSNORM_BWD:
		map_rule(m, n, T, cur, r, last, LIN_FIRST);
		return true;
	case IR_OP_ATTENTION:
		/* [B, T, D]: D splits by heads, T by context parallelism */
		return attention_rule(m, n, T, cur, r, 1, LIN_NONE, why, cap);
	case IR_OP_ATTENTION_BWD:
		/* [3, B, T, D] from dy, q, k, v [B, T, D] */
		return attention_rule(m, n, T, cur, r, 2, LIN_FIRST, why, cap);
	case IR_OP_ROPE:
		rope_rule(m, n, T, cur, r);
		return true;
	case IR_OP_MATMUL:
		matmul_rule(m, n, T, cur, r);
		return true;
	case IR_OP_MATMUL_WGRAD:
		wgrad_rule(m, n, T, cur, r);
		return true;
	case IR_OP_TOPK: case IR_OP_ONE_HOT: case IR_OP_GATHER: case IR_OP_SCATTER_ADD:
	case IR_OP_MOE_SLOT: case IR_OP_MOE_TOKEN:
		route_rule(m, n, T, cur, r);
		return true;
	case IR_OP_PERMUTE:
		permute_rule(m, n, T, cur, r);
		return true;
	case IR_OP_RESHAPE:
		reshape_rule(m, n, T, cur, r);
		return true;
	case IR_OP_SUM: case IR_OP_MEAN: case IR_OP_MAX: {
		const IrNode *x = opnd(m, n, 0);
		int out[IR_MAX_RANK];
		uint32_t red = 0;
		const IrAttrAxes *ra = ir_attr_axes(n);
		for (int i = 0; i < ra->n; i++)
			red |= 1u << ra->axes[i];
		for (int j = 0, k = 0; j < x->rank; j++) {
			out[j] = (red & (1u << j)) ? -1 : k;
			if (!(red & (1u << j)) || ra->keepdims)
				k++;
		}
		reduce_rule(m, n, T, cur, r, red, out, n->op);
		return true;
	}
	case IR_OP_SUM_TO: {
		const IrNode *x = opnd(m, n, 0);
		int out[IR_MAX_RANK], off = x->rank - rk;
		uint32_t red = 0;
		for (int j = 0; j < x->rank; j++) {
			bool gone = j < off || (n->shape[j - off] == 1 && x->shape[j] != 1);
			red |= gone ? 1u << j : 0;
			out[j] = gone ? -1 : j - off;
		}
		reduce_rule(m, n, T, cur, r, red, out, IR_OP_SUM);
		return true;
	}
	case IR_OP_EMBED: {
		/* table [V, D], ids [...] -> [..., D]; V stays whole */
		const IrNode *ids = opnd(m, n, 1);
		init_reqs(m, n, r);
		map_rule(m, n, T, cur, r, 0, LIN_NONE);
		if (!T->known) {
			Placement *R = &r->res;
			replicated(R, rk);
			uint32_t used = 0;
			for (int k = 0; k < ids->rank; k++)
				follow(R, k, &cur[1], k, &used);
			follow(R, rk - 1, &cur[0], 1, &used);
		}
		replicated(&r->req[0], 2);
		replicated(&r->req[1], ids->rank);
		copy_dim(&r->req[0], 1, &r->res, rk - 1);
		for (int k = 0; k < ids->rank; k++)
			copy_dim(&r->req[1], k, &r->res, k);
		r->res.partial = 0;
		/* vocab parallel: a table split on V looks up its own rows
		 * (embed_vp, the others zero), the result partial over V's axes */
		uint32_t v = group_axes(&cur[0], 0);
		if (v && !(v & dims_mask(&r->res))) {
			copy_dim(&r->req[0], 0, &cur[0], 0);
			r->res.partial = v;
			r->res.partial_op = IR_RED_SUM;
			r->op = IR_OP_EMBED_VP;
			r->at = (IrAttr){.kind = IR_ATTR_COLL, .coll = {.axes = v}};
		}
		return true;
	}
	case IR_OP_EMBED_BWD: {
		/* dy [..., D], ids [...] -> [V, D]: positions are summed */
		const IrNode *dy = opnd(m, n, 0);
		init_reqs(m, n, r);
		Placement *R = &r->res;
		replicated(R, 2);
		uint32_t used = 0;
		follow(R, 1, T->known ? T : &cur[0], T->known ? 1 : dy->rank - 1, &used);
		/* rows split as the target wants: this shard's ids only */
		uint32_t v = T->known ? group_axes(T, 0) : 0;
		if (v && !(v & used)) {
			follow(R, 0, T, 0, &used);
			r->op = IR_OP_EMBED_BWD_VP;
			r->at = (IrAttr){.kind = IR_ATTR_COLL, .coll = {.axes = v}};
		}
		uint32_t pos = positions(m, n, cur, r, dy->rank - 1, used, 2);
		copy_dim(&r->req[0], dy->rank - 1, R, 1);
		uint32_t keep;
		uint32_t q = lin_partial(LIN_FIRST, T, cur, 1, used | pos, &keep);
		r->req[0].partial = q;
		R->partial = pos | q;
		return true;
	}
	case IR_OP_LAYERNORM_BWD_GAMMA: case IR_OP_RMSNORM_BWD_GAMMA: {
		/* dy, x [..., D] -> [D]: rows are summed, D stays whole */
		const IrNode *dy = opnd(m, n, 0);
		init_reqs(m, n, r);
		replicated(&r->res, 1);
		uint32_t pos = positions(m, n, cur, r, dy->rank - 1, 0, 2);
		uint32_t keep;
		uint32_t q = lin_partial(LIN_FIRST, T, cur, 1, pos, &keep);
		r->req[0].partial = q;
		r->res.partial = pos | q;
		return true;
	}
	case IR_OP_CROSS_ENTROPY: case IR_OP_MSE: {
		/* the mean over positions: a local mean, scaled by the local
		 * positions over all of them (1 / their group size where they
		 * split evenly), then partial.  Uneven (mse; cross_entropy goes
		 * through partition.c's part_xent_vp): the padding positions of
		 * both operands are zero, so they add nothing to the sum */
		const IrNode *x = opnd(m, n, 0);
		int npos = n->op == IR_OP_MSE ? x->rank : x->rank - 1;
		init_reqs(m, n, r);
		replicated(&r->res, 0);
		uint32_t pos = positions(m, n, cur, r, npos, 0, 2);
		r->res.partial = pos;
		if (pos)
			r->scale = part_positions_scale(&m->mesh, &r->req[0], x, npos);
		return true;
	}
	case IR_OP_CROSS_ENTROPY_BWD: {
		/* (softmax - onehot) * dl / positions, and the local op divides
		 * by its local positions: scaled back by the group size */
		init_reqs(m, n, r);
		replicated(&r->res, rk);
		uint32_t used = 0;
		if (T->known) {
			for (int k = 0; k < rk - 1; k++)
				follow(&r->res, k, T, k, &used);
		} else {
			for (int k = 0; k < rk - 1; k++)
				if (!follow(&r->res, k, &cur[1], k, &used))
					follow(&r->res, k, &cur[2], k, &used);
		}
		for (int k = 0; k < rk - 1; k++) {
			copy_dim(&r->req[1], k, &r->res, k);
			copy_dim(&r->req[2], k, &r->res, k);
		}
		if (used)
			r->scale = 1.0 / (double)mesh_axes_size(&m->mesh, used);
		r->scale_dl = true; /* on the f32 seed, not the 16-bit result */
		return true;
	}
	default:
		break;
	}
	snprintf(why, cap, "no partition rule for op '%s'", ir_op_name(n->op));
	return false;
}
