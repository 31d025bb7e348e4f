/* coalesce.c - pass "coalesce": ZeRO's all_gathers and reduce_scatters
 * one collective per unit or bucket, over one flat buffer (FSDP2's
 * copy-in / copy-out).
 *
 * Runs after `fsdp_units` and before `bucket`, on the per-rank program.
 * `partition` leaves one collective per parameter: under ZeRO-3 an
 * all_gather of each split
 * param in front of its uses (grouped per unit by fsdp_units.c) and a
 * reduce_scatter of each gradient; under ZeRO-1/2 a reduce_scatter of each
 * gradient and, after each param's step, an all_gather of the updated
 * shards into the param.  Small collectives pay the link's latency each
 * (a 4-layer GPT at dp=4 issues 68 of each kind), so, as FSDP2 does per
 * unit and DeepSpeed per bucket, the collectives of one group become one:
 *
 *   all_gather of shards x_1..x_n along dims k_j over axes A (N ranks):
 *     copy-in   each shard, its dim k_j moved first (permute, only when
 *               k_j > 0) and flattened to a row [1, n_j]; concatenated
 *               along dim 1: [1, S], S = sum n_j, split over A on dim 0;
 *     gather    one all_gather over A along dim 0: [N, S], rank r's row r;
 *     copy-out  per shard the columns [off_j, off_j + n_j): [N, n_j], which
 *               is the gathered value with dim k_j first, reshaped and
 *               permuted back.
 *   reduce_scatter of full values y_1..y_n along dims k_j: the mirror
 *     image: each y_j with k_j first reshaped to [N, n_j] (row r: rank
 *     r's chunk), concatenated along dim 1 to [N, S], one reduce_scatter
 *     along dim 0 to [1, S], and per gradient its columns reshaped back.
 *
 * Rows of N chunks are what make one collective serve shards of any
 * shape: each rank's row holds its chunk of every member, so the
 * collective moves exactly the bytes the separate ones moved (padding
 * included: partition pads an uneven dim before the collective, and the
 * slice after it stays where it was).  The copies cost one pass over the
 * group's bytes each way, FSDP2's copy-in and copy-out.
 *
 * Groups.  Members share the op, the mesh axes, the reduction, the dtype,
 * the pipeline stage (under a pipeline), the micro-batch and the side of
 * the loss (so ZeRO-3's forward gathers and its reshard_after_forward backward copies
 * stay apart).  Under ZeRO-3 a group is a unit (IrModule.unit: the block
 * instance whose params they are, fsdp_units.c's unit), under ZeRO-1/2 a
 * bucket closed once it holds train.bucket_bytes (of the unsharded
 * tensors; bucket_mb 0: none coalesced).  A group is issued right after
 * the last of its members' inputs is produced, and never before its first
 * member was (fsdp_units.c's prefetch order holds); a member whose value
 * is read before that point keeps its own collective.  ZeRO-1/2's
 * post-step gathers are each read by the assign that writes the param
 * (through a slice when padded): the two are moved to after the group's
 * copy-out when nothing reads the param after the assign (a later step
 * reads its own shard, not the param).
 *
 * A gradient partial over more axes than the ZeRO ones is reduce_scattered
 * over those and all_reduced over the rest (HSDP's replica axis; tp for a
 * param replicated over tp, the norms under FSDP x TP): such all_reduces
 * are folded into the group, one all_reduce over the columns of the members
 * that have one (packed last), between the reduce_scatter and the
 * copy-out, as FSDP2's HSDP all-reduces its reduce-scattered buffer.
 * DDP's buckets (passes/bucket.c, next) get the all_reduces not folded.
 *
 * The members are recognized by what they carry: a gather of a param (or
 * of its cast) or a gather that ends in an assign into a param (through
 * the slice that drops a padded dim's zero rows), and a reduce_scatter
 * that is a gradient (grad.P), or scatters one (ZeRO-1, padded or not), or
 * is all_reduced into one.  Activations' collectives are left alone.
 */
#include "passes/coalesce.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"
#include "passes/target.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PACK_FANIN (PASS_MAX_ACTION_ARGS - 1)

typedef struct Key {
	IrOp op;
	uint32_t axes;
	IrRed red;
	IrDtype dtype;
	int stage, mb, side, unit;
	uint32_t fold; /* a reduce_scatter's: the axes of its all_reduce folded in */
} Key;

typedef struct Group {
	Key key;
	int point;   /* emitted after this node */
	int minuser; /* the first node that reads a member (its deferred tail aside) */
	int64_t bytes;
	int n, first, last; /* members: a list through Coal.next, in node order */
	uint32_t fold; /* the axes of the members' folded all_reduces (one set) */
	bool open;
	int next_at; /* the next group emitted at the same point, or -1 */
} Group;

typedef struct Coal {
	IrModule *m;
	int nn;
	int *first_user, *nusers, *last_reader; /* last_reader: assigns' targets aside */
	int *user;     /* a node read once: its user, else -1 */
	int *group;    /* a member: its group, else -1 */
	int *next;     /* the next member of its group, or -1 */
	/* per candidate: a gather's tail (the slice dropping padding, or -1,
	 * and the assign into its param) when it may follow the copy-out, and
	 * a reduce_scatter's all_reduce folded into the group (or -1) */
	int *tail;     /* 2 per node */
	int *fold;
	const char **label; /* a candidate: the tensor it carries (param or grad.P) */
	bool *skip;    /* nodes the rebuild does not adopt in place */
	Group *g;
	int ng;
	int *at;       /* node -> the first group emitted after it, or -1 */
} Coal;

static bool is_grad(const IrModule *m, const IrNode *n)
{
	return n->role == IR_ROLE_GRAD && ir_link(m, n) == IR_LINK_GRAD;
}

/* A gather's tail into its param: all_gather -> [slice ->] assign(P, .),
 * nothing else reading either.  Sets tail[0..1] (the slice or -1, the
 * assign) and returns P, or -1. */
static int gather_tail(const Coal *c, const IrNode *x, int *tail)
{
	const IrModule *m = c->m;
	int v = x->id, u = c->user[v], s = -1;
	if (u >= 0 && m->nodes[u]->op == IR_OP_SLICE && m->nodes[u]->nops == 1) {
		s = v = u;
		u = c->user[u];
	}
	if (u < 0)
		return -1;
	const IrNode *a = m->nodes[u];
	if (a->op != IR_OP_ASSIGN || a->nops != 2 || a->ops[1] != v ||
	    m->nodes[a->ops[0]]->op != IR_OP_PARAM)
		return -1;
	tail[0] = s;
	tail[1] = u;
	return a->ops[0];
}

/* The param an all_gather carries: its operand is the param, or a cast of
 * it (ZeRO-3), or it ends in an assign into the param (ZeRO-1/2's update).
 * -1: none. */
static int gather_param(const Coal *c, const IrNode *x, int *tail)
{
	const IrModule *m = c->m;
	const IrNode *o = m->nodes[x->ops[0]];
	if (o->op == IR_OP_CAST && o->nops == 1)
		o = m->nodes[o->ops[0]];
	tail[0] = tail[1] = -1;
	if (o->op == IR_OP_PARAM)
		return o->id;
	return gather_tail(c, x, tail);
}

/* A reduce_scatter's one user when it is an all_reduce of the rest of the
 * partial sum (over other axes, the same reduction: HSDP's over the
 * replica axis, TP's for a param replicated over tp), else -1. */
static int fold_of(const Coal *c, const IrNode *x)
{
	const IrModule *m = c->m;
	int u = c->user[x->id];
	if (u < 0)
		return -1;
	const IrNode *a = m->nodes[u];
	if (a->op != IR_OP_ALL_REDUCE || a->nops != 1 || a->dtype != x->dtype ||
	    ir_attr_coll(a)->red != ir_attr_coll(x)->red ||
	    (ir_attr_coll(a)->axes & ir_attr_coll(x)->axes))
		return -1;
	return u;
}

/* The param whose gradient a reduce_scatter is, scatters (through a pad)
 * or is reduced further into (its folded all_reduce); *name: the
 * gradient's name.  -1: none. */
static int scatter_param(const Coal *c, const IrNode *x, int fold, const char **name)
{
	const IrModule *m = c->m;
	const IrNode *o = m->nodes[x->ops[0]];
	if (o->op == IR_OP_PAD && o->nops == 1)
		o = m->nodes[o->ops[0]];
	const IrNode *g = is_grad(m, x) ? x : is_grad(m, o) ? o :
	                  fold >= 0 && is_grad(m, m->nodes[fold]) ? m->nodes[fold] : NULL;
	*name = g ? g->name : NULL;
	return g ? ir_link_param(m, g) : -1;
}

static bool same_key(const Key *a, const Key *b)
{
	return a->op == b->op && a->axes == b->axes && a->red == b->red && a->dtype == b->dtype &&
	       a->stage == b->stage && a->mb == b->mb && a->side == b->side && a->unit == b->unit;
}

/* The group's members into v (n ints), in node order, those with a
 * folded all_reduce last (their columns of the buffer are the all_reduce's
 * slice); returns how many come first. */
static int members(const Coal *c, const Group *g, int *v)
{
	int k = 0;
	for (int x = g->first; x >= 0; x = c->next[x])
		if (c->fold[x] < 0)
			v[k++] = x;
	int nf = k;
	for (int x = g->first; x >= 0; x = c->next[x])
		if (c->fold[x] >= 0)
			v[k++] = x;
	return nf;
}

/* The placement of a [rows, cols] pack node: dim 0 split over `rows`
 * axes (a rank's own row), pending `partial`. */
static void rows_place(IrModule *out, IrNode *x, uint32_t rows, uint32_t partial, IrRed op)
{
	Placement p;
	placement_replicated(&p, x->rank);
	for (int a = 0; a < IR_MAX_AXES; a++)
		if (rows & (1u << a))
			p.axes[0][p.naxes[0]++] = (uint8_t)a;
	p.partial = partial;
	p.partial_op = partial ? op : IR_RED_SUM;
	ir_place_set(out, x, &p);
}

/* A new node in out like old node like_id, in group g's micro-batch. */
static IrNode *add(Rebuild *rb, const Group *g, IrOp op, const int *ops, int nops, int like_id)
{
	IrNode *n = rb_add(rb, op, ops, nops, like_id, false);
	if (n)
		ir_set_mb(rb->out, n, g->key.mb);
	return n;
}

/* perm moving dim k of a rank-r value first (inv: its inverse). */
static void first_perm(int r, int k, int64_t *perm, int64_t *inv)
{
	int j = 0;
	perm[j++] = k;
	for (int d = 0; d < r; d++)
		if (d != k)
			perm[j++] = d;
	for (int d = 0; d < r; d++)
		inv[perm[d]] = d;
}

static IrNode *permute(Rebuild *rb, const Group *g, int id, int like, int r, const int64_t *perm)
{
	IrNode *p = add(rb, g, IR_OP_PERMUTE, &id, 1, like);
	if (!p)
		return NULL;
	IrAttrPerm *pa = ir_attr_perm_mut(rb->out, p);
	pa->n = r;
	memcpy(pa->perm, perm, sizeof(int64_t) * (size_t)r);
	/* the operand's placement, its dims permuted */
	const Placement *in = ir_place(rb->out, rb->out->nodes[id]);
	Placement q = *in;
	for (int d = 0; in->known && d < r && d < in->ndims; d++) {
		q.naxes[d] = in->naxes[perm[d]];
		memcpy(q.axes[d], in->axes[perm[d]], sizeof q.axes[d]);
	}
	if (in->known)
		ir_place_set(rb->out, p, &q);
	return rb_infer(rb, p, p->loc) ? p : NULL;
}

static IrNode *reshape(Rebuild *rb, const Group *g, int id, int like, int r, const int64_t *shape)
{
	IrNode *p = add(rb, g, IR_OP_RESHAPE, &id, 1, like);
	if (!p)
		return NULL;
	p->rank = r;
	memset(p->shape, 0, sizeof p->shape);
	memcpy(p->shape, shape, sizeof(int64_t) * (size_t)r);
	return p;
}

/* A collective over the flat buffer at id, its attributes like old node
 * like's but along dim 0. */
static IrNode *collective(Rebuild *rb, const Group *g, IrOp op, int id, int like, int block)
{
	IrNode *n = add(rb, g, op, &id, 1, like);
	if (!n)
		return NULL;
	IrAttrColl *ca = ir_attr_coll_mut(rb->out, n);
	*ca = *ir_attr_coll(rb->m->nodes[like]);
	if (op != IR_OP_ALL_REDUCE)
		ca->dim = 0;
	ir_set_block(rb->out, n, block);
	return rb_infer(rb, n, n->loc) ? n : NULL;
}

/* Emits group g: copy-in, one collective (and the all_reduce folded in),
 * copy-out; then the tails that wait for the copy-out.  Members are not
 * in out: their operand ids are m's (an adopted node's ->id is out's). */
static bool emit_group(Rebuild *rb, const Coal *c, const Group *g)
{
	const IrModule *m = c->m;
	bool gather = g->key.op == IR_OP_ALL_GATHER;
	int *mem = malloc(sizeof(int) * (size_t)g->n * 2);
	if (!mem) {
		diag_error(rb->d, (SrcLoc){0}, "coalesce: out of memory");
		return false;
	}
	int *lvl = mem + g->n;
	int nplain = members(c, g, mem);
	IrNode x0_old = {.id = mem[0]};
	int64_t N = 1;
	for (int a = 0; a < m->mesh.naxes; a++)
		if (g->key.axes & (1u << a))
			N *= m->mesh.sizes[a];
	/* the pending reductions of the values scattered (the placement table
	 * is out's too), and what is left after the reduce_scatter */
	uint32_t pre = 0;
	IrRed pop = IR_RED_SUM;
	for (int k = 0; !gather && k < g->n; k++) {
		const Placement *pk = ir_place(m, m->nodes[m->nodes[mem[k]]->ops[0]]);
		pre |= pk->partial;
		pop = pk->partial ? pk->partial_op : pop;
	}
	uint32_t mid = pre & ~g->key.axes;
	int block = ir_block(m, &x0_old);
	for (int k = 1; k < g->n; k++) {
		IrNode xk = {.id = mem[k]};
		if (ir_block(m, &xk) != block)
			block = -1;
	}
	bool ok = true;
	/* copy-in */
	for (int k = 0; ok && k < g->n; k++) {
		const IrNode *x = m->nodes[mem[k]], *in = m->nodes[x->ops[0]];
		int dim = (int)ir_attr_coll(x)->dim, r = in->rank;
		int id = rb->map[x->ops[0]];
		int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
		first_perm(r, dim, perm, inv);
		if (dim > 0) {
			IrNode *p = permute(rb, g, id, x->id, r, perm);
			ok = p != NULL;
			id = p ? p->id : -1;
		}
		int64_t shape[2] = {gather ? 1 : N, ir_node_numel(gather ? in : x)};
		IrNode *f = ok ? reshape(rb, g, id, x->id, 2, shape) : NULL;
		ok = f != NULL;
		if (ok) {
			/* for people: inspect lists the group's tensors from here */
			if (c->label[mem[k]])
				ir_set_label(rb->out, f, c->label[mem[k]]);
			if (gather)
				rows_place(rb->out, f, g->key.axes, 0, IR_RED_SUM);
			else
				rb_flat_place(rb->out, f, pre, pop);
			lvl[k] = f->id;
		}
	}
	/* the concat tree, along dim 1 */
	int n = g->n;
	while (ok && n > 1) {
		int nn = 0;
		for (int k = 0; ok && k < n; k += PACK_FANIN) {
			int cnt = n - k < PACK_FANIN ? n - k : PACK_FANIN;
			if (cnt == 1) {
				lvl[nn++] = lvl[k];
				continue;
			}
			IrNode *cc = add(rb, g, IR_OP_CONCAT, lvl + k, cnt, mem[0]);
			ok = cc != NULL;
			if (!ok)
				break;
			ir_attr_axis_mut(rb->out, cc)->axis = 1;
			ir_set_block(rb->out, cc, block);
			ok = rb_infer(rb, cc, cc->loc);
			if (gather)
				rows_place(rb->out, cc, g->key.axes, 0, IR_RED_SUM);
			else
				rb_flat_place(rb->out, cc, pre, pop);
			lvl[nn++] = cc->id;
		}
		n = nn;
	}
	/* one collective; the folded all_reduce over the columns of the
	 * members that have one (the last ones) */
	IrNode *coll = ok ? collective(rb, g, g->key.op, lvl[0], mem[0], block) : NULL;
	ok = coll != NULL;
	if (ok && gather)
		rb_flat_place(rb->out, coll, 0, IR_RED_SUM);
	else if (ok)
		rows_place(rb->out, coll, g->key.axes, mid, pop);
	int ared = -1;   /* the all_reduce's output */
	int64_t off0 = 0; /* where its columns start */
	for (int k = 0; k < nplain; k++)
		off0 += ir_node_numel(m->nodes[mem[k]]);
	if (ok && nplain < g->n) {
		int src = coll->id;
		if (nplain > 0) {
			IrNode *s = add(rb, g, IR_OP_SLICE, &src, 1, mem[nplain]);
			ok = s != NULL;
			if (ok) {
				*ir_attr_slice_mut(rb->out, s) = (IrAttrSlice){1, off0, coll->shape[1]};
				ok = rb_infer(rb, s, s->loc);
				rows_place(rb->out, s, g->key.axes, mid, pop);
				src = s->id;
			}
		}
		IrNode *ar = ok ? collective(rb, g, IR_OP_ALL_REDUCE, src, c->fold[mem[nplain]], block)
		                : NULL;
		ok = ar != NULL;
		if (ok) {
			rows_place(rb->out, ar, g->key.axes, mid & ~g->fold, pop);
			ared = ar->id;
		}
	}
	/* copy-out */
	int64_t off = 0;
	for (int k = 0; ok && k < g->n; k++) {
		const IrNode *x = m->nodes[mem[k]];
		int dim = (int)ir_attr_coll(x)->dim, r = x->rank;
		int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK], shape[IR_MAX_RANK];
		first_perm(r, dim, perm, inv);
		int64_t nj = ir_node_numel(gather ? m->nodes[x->ops[0]] : x);
		bool folded = k >= nplain;
		int cid = folded ? ared : coll->id;
		int64_t at = folded ? off - off0 : off;
		IrNode *s = add(rb, g, IR_OP_SLICE, &cid, 1, x->id);
		ok = s != NULL;
		if (!ok)
			break;
		*ir_attr_slice_mut(rb->out, s) = (IrAttrSlice){1, at, at + nj};
		off += nj;
		ok = rb_infer(rb, s, s->loc);
		if (gather)
			rb_flat_place(rb->out, s, 0, IR_RED_SUM);
		else
			rows_place(rb->out, s, g->key.axes, ir_place(m, m->nodes[x->ops[0]])->partial &
			           ~g->key.axes & ~(folded ? g->fold : 0), pop);
		for (int d = 0; d < r; d++)
			shape[d] = x->shape[perm[d]];
		int sid = s->id;
		IrNode *last = ok ? reshape(rb, g, sid, x->id, r, shape) : NULL;
		ok = last != NULL;
		if (ok && dim > 0) {
			int lid = last->id;
			last = permute(rb, g, lid, x->id, r, inv);
			ok = last != NULL;
		}
		if (ok)
			rb_take(rb, last, c->fold[x->id] >= 0 ? c->fold[x->id] : x->id);
	}
	/* the tails that wait for the copy-out */
	for (int k = 0; ok && k < g->n; k++)
		for (int t = 0; ok && t < 2; t++) {
			int y = c->tail[2 * mem[k] + t];
			if (y >= 0 && y <= g->point)
				ok = rb_adopt(rb, y);
		}
	free(mem);
	return ok;
}

/* Puts candidate x (its key k; fu: the first node reading what it
 * carries) in a group: the open one of its key if the group can take it,
 * else a new one. */
static void place(Coal *c, int x, const Key *k, int fu, int64_t bytes, int64_t cap)
{
	const IrNode *n = c->m->nodes[x];
	int q = n->ops[0];
	int gi = -1;
	for (int j = c->ng - 1; j >= 0; j--)
		if (c->g[j].open && same_key(&c->g[j].key, k)) {
			gi = j;
			break;
		}
	if (gi >= 0) {
		Group *g = &c->g[gi];
		int p = q > g->point ? q : g->point;
		if (p < g->minuser && p < fu && (!k->fold || !g->fold || k->fold == g->fold)) {
			g->point = p;
			g->fold |= k->fold;
			g->minuser = fu < g->minuser ? fu : g->minuser;
			g->bytes += bytes;
			c->next[g->last] = x;
			g->last = x;
			g->n++;
			c->group[x] = gi;
			if (g->bytes >= cap)
				g->open = false;
			return;
		}
		g->open = false;
	}
	Group *g = &c->g[c->ng];
	*g = (Group){.key = *k, .point = q > x - 1 ? q : x - 1, .minuser = fu, .bytes = bytes,
	             .n = 1, .first = x, .last = x, .fold = k->fold, .open = bytes < cap,
	             .next_at = -1};
	c->group[x] = c->ng++;
}

/* Finds the candidates and puts each in a group, in node order. */
static void find_groups(Coal *c, int zero, int64_t cap)
{
	IrModule *m = c->m;
	int loss = m->loss;
	bool staged = pipeline_axis(m) >= 0; /* else stages are labels only */
	for (int i = 0; i < c->nn; i++) {
		const IrNode *x = m->nodes[i];
		if ((x->op != IR_OP_ALL_GATHER && x->op != IR_OP_REDUCE_SCATTER) || x->nops != 1 ||
		    x->rank < 1)
			continue;
		bool gather = x->op == IR_OP_ALL_GATHER;
		int *tail = c->tail + 2 * i, p, fu = c->first_user[i];
		if (gather) {
			p = gather_param(c, x, tail);
			c->label[i] = p >= 0 ? m->nodes[p]->name : NULL;
			/* an assign that may wait: nothing reads the param after it */
			if (tail[1] >= 0 && c->last_reader[m->nodes[tail[1]]->ops[0]] < tail[1])
				fu = INT_MAX;
			else
				tail[0] = tail[1] = -1;
		} else {
			c->fold[i] = fold_of(c, x);
			p = scatter_param(c, x, c->fold[i], &c->label[i]);
			if (c->fold[i] >= 0)
				fu = c->first_user[c->fold[i]];
		}
		if (p < 0)
			continue;
		const IrAttrColl *ca = ir_attr_coll(x);
		Key k = {.op = x->op, .axes = ca->axes, .red = ca->red, .dtype = x->dtype,
		         .stage = staged ? ir_stage(m, x) : -1, .mb = ir_mb(m, x),
		         .side = loss >= 0 && i > loss,
		         .unit = zero >= 3 ? ir_unit(m, m->nodes[p]) : -2,
		         .fold = c->fold[i] >= 0 ? ir_attr_coll(m->nodes[c->fold[i]])->axes : 0};
		int64_t bytes = ir_node_numel(gather ? x : m->nodes[x->ops[0]]) *
		                ir_dtype_size(x->dtype);
		place(c, i, &k, fu, bytes, cap);
	}
}

bool pass_coalesce(IrModule *m, Diag *d, const PassOptions *opt)
{
	int zero = m->train.zero;
	if (zero <= 0 || m->nnodes == 0)
		return true;
	int64_t cap = zero >= 3 ? INT64_MAX : m->train.bucket_bytes;
	if (cap <= 0)
		return true; /* bucket_mb 0: a collective per tensor */
	int nn = m->nnodes;
	Coal c = {.m = m, .nn = nn};
	c.first_user = malloc(sizeof(int) * (size_t)nn);
	c.nusers = calloc((size_t)nn, sizeof(int));
	c.last_reader = malloc(sizeof(int) * (size_t)nn);
	c.user = malloc(sizeof(int) * (size_t)nn);
	c.group = malloc(sizeof(int) * (size_t)nn);
	c.next = malloc(sizeof(int) * (size_t)nn);
	c.tail = malloc(sizeof(int) * 2 * (size_t)nn);
	c.fold = malloc(sizeof(int) * (size_t)nn);
	c.label = calloc((size_t)nn, sizeof *c.label);
	c.skip = calloc((size_t)nn, sizeof(bool));
	c.g = malloc(sizeof(Group) * (size_t)nn);
	c.at = malloc(sizeof(int) * (size_t)nn);
	bool ok = c.first_user && c.nusers && c.last_reader && c.user && c.group && c.next &&
	          c.tail && c.fold && c.label && c.skip && c.g && c.at;
	if (!ok) {
		diag_error(d, (SrcLoc){0}, "coalesce: out of memory");
		goto done;
	}
	for (int i = 0; i < nn; i++) {
		c.first_user[i] = INT_MAX;
		c.last_reader[i] = -1;
		c.user[i] = c.group[i] = c.next[i] = c.at[i] = c.fold[i] = -1;
		c.tail[2 * i] = c.tail[2 * i + 1] = -1;
	}
	for (int i = 0; i < nn; i++) {
		const IrNode *x = m->nodes[i];
		for (int k = 0; k < x->nops; k++) {
			int o = x->ops[k];
			if (c.first_user[o] > i)
				c.first_user[o] = i;
			c.user[o] = c.nusers[o]++ ? -1 : i;
			if (!(x->op == IR_OP_ASSIGN && k == 0))
				c.last_reader[o] = i;
		}
	}
	find_groups(&c, zero, cap);
	/* the groups of two or more, each at its point; what they move */
	int ngroups = 0, ncoll = 0;
	size_t room = (size_t)nn;
	for (int j = 0; j < c.ng; j++) {
		Group *g = &c.g[j];
		if (g->n < 2) {
			c.group[g->first] = -1;
			g->n = 0;
			continue;
		}
		/* appended: groups at one point are emitted in the order opened */
		int *t = &c.at[g->point];
		while (*t >= 0)
			t = &c.g[*t].next_at;
		*t = j;
		for (int x = g->first; x >= 0; x = c.next[x]) {
			c.skip[x] = true;
			if (c.fold[x] >= 0)
				c.skip[c.fold[x]] = true;
			for (int k = 0; k < 2; k++)
				if (c.tail[2 * x + k] >= 0 && c.tail[2 * x + k] <= g->point)
					c.skip[c.tail[2 * x + k]] = true;
		}
		ngroups++;
		ncoll += g->n;
		room += (size_t)g->n * 6 + 3;
	}
	if (ngroups) {
		Rebuild rb;
		ok = rb_begin(&rb, m, d, "coalesce", room);
		for (int i = 0; ok && i < nn; i++) {
			if (!c.skip[i])
				ok = rb_adopt(&rb, i);
			for (int j = c.at[i]; ok && j >= 0; j = c.g[j].next_at)
				ok = emit_group(&rb, &c, &c.g[j]);
		}
		ok = rb_finish(&rb, ok);
	}
	if (ok && opt && opt->verbose)
		fprintf(stderr, "dtmc: coalesce: %d all_gathers and reduce_scatters in %d "
		        "collective%s\n", ncoll, ngroups, ngroups == 1 ? "" : "s");
done:
	free(c.first_user);
	free(c.nusers);
	free(c.last_reader);
	free(c.user);
	free(c.group);
	free(c.next);
	free(c.tail);
	free(c.fold);
	free(c.label);
	free(c.skip);
	free(c.g);
	free(c.at);
	return ok;
}
