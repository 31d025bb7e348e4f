/* bucket.c - pass "bucket": DDP gradient buckets (train { bucket_mb N }).
 *
 * Runs after `coalesce`, on the per-rank program.  `partition` leaves
 * one all_reduce per param gradient (the node named grad.P, role grad, linked to P,
 * reducing the partial sums the backward pass produced).  Small
 * collectives waste the link's latency, so, as PyTorch DDP does, the
 * gradients are grouped into buckets of about IrTrain.bucket_bytes (25 MB
 * by default) and each bucket is reduced by one all_reduce over a flat
 * buffer:
 *   pack    each gradient flattened (reshape to [n]) and concatenated
 *           along dim 0 (a tree of concats of at most PASS_MAX_ACTION_ARGS - 1
 *           operands, the most a runtime action takes);
 *   reduce  one all_reduce over the same mesh axes with the same reduction;
 *   unpack  per gradient a slice [off, off + n) of the reduced buffer,
 *           reshaped back; the last node takes the gradient's name, role
 *           and placement, so the optimizer, grad_norm, checkpoints and the
 *           tests see the same grad.P.
 * Buckets are filled in the reverse order of the params' first use (the
 * last layers' gradients first, as the backward pass produces them) and
 * closed once they hold bucket_bytes or more (PyTorch's rule); only
 * gradients reduced over the same mesh axes with the same reduction and
 * dtype, on the same pipeline stage, share a bucket.  A gradient reduced
 * and then cast (grad.P = cast(all_reduce(g)): IR text may hold one;
 * partition casts a 16-bit gradient to reduce_dtype before it reduces)
 * has the all_reduce bucketed and the cast made again after the unpack
 * (recast).  A bucket's pack and all_reduce are placed right
 * after the last of its gradients is produced, so a runtime with a
 * communication stream can overlap it with the rest of the backward pass.
 * A bucket of one gradient keeps its own all_reduce.  bucket_mb 0 turns
 * bucketing off (one all_reduce per gradient).
 *
 * A batch split over two axes is bucketed as one over one axis is: a
 * gradient reduced by a chain of all_reduces (with sequence parallelism a
 * norm's gradient is partial over (rep, dp, tp), which partition reduces
 * over rep, then over (dp, tp)) counts as one all_reduce over their union,
 * and ZeRO-1 over dp on a (rep, dp) split leaves, after each gradient's
 * reduce_scatter over dp, an all_reduce over rep for the optimizer: those
 * are bucketed like DDP's, the reduce_scatters being the terms.
 *
 * Cost: the pack and the unpack copy each gradient once more (and the
 * concat tree copies again past PASS_MAX_ACTION_ARGS - 1 gradients a bucket); the
 * flat buffer and its reduced copy are a bucket's size each, live only
 * between the bucket's last gradient and the unpack.
 */
#include "passes/bucket.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"
#include "support/hash.h"
#include "passes/target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PACK_FANIN (PASS_MAX_ACTION_ARGS - 1)

#define MAX_SRC 8

/* A gradient: g = all_reduce(s), or, for a param with several uses (a
 * tied embedding), the sum of such all_reduces, which partition reduces
 * one by one: the partial terms are added first and reduced once.  An
 * all_reduce may be a chain of sum all_reduces over disjoint axes (a
 * partial over (rep, dp, tp) that partition reduced over rep, then over
 * (dp, tp)): one all_reduce over their union.  ZeRO-1 on a batch split
 * over two axes (HSDP: zero 1 over dp, the batch over (rep, dp)) leaves
 * g = all_reduce(reduce_scatter(grad.P)) unnamed for the optimizer: the
 * reduce_scatter is the term, the all_reduces over rep are bucketed as
 * DDP's are. */
typedef struct Cand {
	int g;         /* the gradient (all_reduce or add, or a cast of one) */
	int inner;     /* g, or the all_reduce or add g casts (bf16 grads to f32) */
	const char *gname; /* grad.P: g's name, or (ZeRO-1) the scattered grad's */
	int ar;        /* one of its all_reduces: the reduction, dtype, stage */
	uint32_t axes; /* the mesh axes reduced: the union of a chain's */
	bool chain;    /* an all_reduce of it is a chain (one all_reduce saved) */
	int src[MAX_SRC], nsrc; /* the partial terms */
	int skip[2 * MAX_SRC], nskip; /* the nodes it replaces (g included) */
	int last;      /* the last term produced */
	int first_use; /* its param's first use; the sort key */
	int bucket;    /* index into the bucket list, or -1 */
} Cand;

typedef struct Bucket {
	int *members; /* indices into the candidate list, in bucket order */
	int n;
	int point;    /* the node after which the bucket is reduced */
	bool open;
} Bucket;

static int cmp_cand(const void *a, const void *b)
{
	const Cand *x = a, *y = b;
	if (x->first_use != y->first_use)
		return y->first_use - x->first_use;
	return y->last - x->last;
}

static int64_t bytes_of(const IrNode *n)
{
	return ir_node_numel(n) * ir_dtype_size(n->dtype);
}

/* Set while bucketing a pipelined program: stages never share a bucket.
 * Per thread: `dtmc sweep` runs the pass on several modules at once. */
static _Thread_local bool by_stage;

static bool same_group(const IrModule *m, const IrNode *a, uint32_t a_axes, const IrNode *b,
                       uint32_t b_axes)
{
	return a_axes == b_axes && ir_attr_coll(a)->red == ir_attr_coll(b)->red &&
	       a->dtype == b->dtype && (!by_stage || ir_stage(m, a) == ir_stage(m, b));
}

/* Chains: while every term of c is a sum all_reduce over the same axes,
 * disjoint from c's, that only c reads, its operand becomes the term and
 * c reduces over both (with micro-batches a term is often a sum of such
 * all_reduces, one per micro-batch: those stay). */
static void extend_chain(const IrModule *m, const int *users, Cand *c)
{
	const IrNode *ar = m->nodes[c->ar];
	while (ir_attr_coll(ar)->red == IR_RED_SUM && c->nskip + c->nsrc <= 2 * MAX_SRC) {
		uint32_t inner = 0;
		bool ok = true;
		for (int t = 0; t < c->nsrc && ok; t++) {
			const IrNode *y = m->nodes[c->src[t]];
			ok = y->op == IR_OP_ALL_REDUCE && y->nops == 1 && users[c->src[t]] == 1;
			const IrAttrColl *ya = ok ? ir_attr_coll(y) : NULL;
			ok = ok && ya->red == IR_RED_SUM && y->dtype == ar->dtype &&
			     !(ya->axes & c->axes) && (t == 0 || ya->axes == inner);
			inner = ok ? ya->axes : 0;
		}
		if (!ok || !inner)
			return;
		c->last = -1;
		for (int t = 0; t < c->nsrc; t++) {
			c->skip[c->nskip++] = c->src[t];
			c->src[t] = m->nodes[c->src[t]]->ops[0];
			c->last = c->src[t] > c->last ? c->src[t] : c->last;
		}
		c->axes |= inner;
		c->chain = true;
	}
}

/* Collects the terms of gradient node x into c: an all_reduce of a value
 * nothing else reads, or (sum reductions) an add of such; false when x is
 * not of that form.  users[i]: the number of operand slots reading i. */
static bool collect(const IrModule *m, const int *users, int x, bool root, Cand *c)
{
	const IrNode *n = m->nodes[x];
	if (!root && users[x] != 1)
		return false;
	if (c->nskip >= 2 * MAX_SRC)
		return false;
	if (n->op == IR_OP_ALL_REDUCE && n->nops == 1 && n->rank > 0) {
		const IrNode *ar = c->ar >= 0 ? m->nodes[c->ar] : n;
		int s = n->ops[0];
		if (!same_group(m, ar, ir_attr_coll(ar)->axes, n, ir_attr_coll(n)->axes) ||
		    users[s] != 1 || c->nsrc >= MAX_SRC ||
		    (c->ar >= 0 && ir_attr_coll(ar)->red != IR_RED_SUM))
			return false;
		if (c->ar < 0) {
			c->ar = x;
			c->axes = ir_attr_coll(n)->axes;
		}
		c->skip[c->nskip++] = x;
		c->src[c->nsrc++] = s;
		c->last = s > c->last ? s : c->last;
		return true;
	}
	if (n->op == IR_OP_ADD && n->nops == 2 && n->rank > 0 &&
	    m->nodes[n->ops[0]]->rank == n->rank && m->nodes[n->ops[1]]->rank == n->rank &&
	    !memcmp(m->nodes[n->ops[0]]->shape, n->shape, sizeof(int64_t) * (size_t)n->rank) &&
	    !memcmp(m->nodes[n->ops[1]]->shape, n->shape, sizeof(int64_t) * (size_t)n->rank) &&
	    n->ops[0] != n->ops[1]) {
		c->skip[c->nskip++] = x;
		return collect(m, users, n->ops[0], false, c) &&
		       collect(m, users, n->ops[1], false, c) &&
		       ir_attr_coll(m->nodes[c->ar])->red == IR_RED_SUM;
	}
	return false;
}

/* The cast of a gradient reduced in its compute dtype (bf16) to its own
 * (f32), g = cast(all_reduce(...)), again after the unpack: out's node x
 * cast as old node g was, taking g's identity. */
static bool recast(Rebuild *o, const IrModule *m, int x, int g)
{
	const IrNode *old = m->nodes[g];
	IrNode *c = rb_add(o, IR_OP_CAST, &x, 1, g, false);
	if (!c)
		return false;
	c->rank = old->rank;
	memcpy(c->shape, old->shape, sizeof old->shape);
	rb_take(o, c, g);
	return true;
}

/* Emits bucket b: pack, all_reduce, unpack. */
static bool emit_bucket(Rebuild *o, const Cand *cands, const Bucket *b)
{
	const IrModule *m = o->m;
	int ar0_id = cands[b->members[0]].ar, src0_id = cands[b->members[0]].src[0];
	const IrNode *ar0 = m->nodes[ar0_id], *src0 = m->nodes[src0_id];
	IrNode ar0_old = {.id = ar0_id}, src0_old = {.id = src0_id};
	uint32_t pre = ir_place(m, src0)->partial;
	IrRed pop = ir_place(m, src0)->partial_op;
	uint32_t axes = cands[b->members[0]].axes;
	uint32_t post = pre & ~axes;
	/* the block instance the members share, or -1 (a bucket across blocks) */
	int block = ir_block(m, &ar0_old);
	for (int k = 1; k < b->n; k++) {
		IrNode ark = {.id = cands[b->members[k]].ar};
		if (ir_block(m, &ark) != block)
			block = -1;
	}
	int *lvl = malloc(sizeof(int) * (size_t)b->n);
	if (!lvl)
		return false;
	/* sum the terms of each gradient, flatten */
	for (int k = 0; k < b->n; k++) {
		const Cand *c = &cands[b->members[k]];
		const IrNode *s = m->nodes[c->src[0]];
		int id = o->map[c->src[0]]; /* s->id: s may be out's node now */
		for (int t = 1; t < c->nsrc; t++) {
			int ab[2] = {id, o->map[c->src[t]]};
			IrNode *a = rb_add(o, IR_OP_ADD, ab, 2, c->src[0], true);
			if (!a) {
				free(lvl);
				return false;
			}
			a->place = s->place;
			id = a->id;
		}
		/* the local sum is the gradient before its reduction (for
		 * people: inspect lists a bucket's gradients from its pack) */
		IrNode *sum = o->out->nodes[id];
		if (!sum->name && !ir_label(o->out, sum))
			ir_set_label(o->out, sum, c->gname);
		if (b->n == 1) {
			lvl[0] = id;
			break;
		}
		if (s->rank != 1) {
			IrNode *r = rb_add(o, IR_OP_RESHAPE, &id, 1, c->src[0], false);
			if (!r) {
				free(lvl);
				return false;
			}
			r->rank = 1;
			r->shape[0] = ir_node_numel(s);
			rb_flat_place(o->out, r, pre, pop);
			id = r->id;
		}
		lvl[k] = id;
	}
	/* concat tree */
	int n = b->n;
	while (n > 1) {
		int nn = 0;
		for (int k = 0; k < n; k += PACK_FANIN) {
			int cnt = n - k < PACK_FANIN ? n - k : PACK_FANIN;
			if (cnt == 1) {
				lvl[nn++] = lvl[k];
				continue;
			}
			IrNode *c = ir_node_new(o->out, IR_OP_CONCAT, lvl + k, cnt, src0->loc);
			if (!c) {
				free(lvl);
				diag_error(o->d, src0->loc, "bucket: out of memory");
				return false;
			}
			ir_attr_axis_mut(o->out, c)->axis = 0;
			c->dtype = src0->dtype;
			ir_set_stage(o->out, c, ir_stage(m, &src0_old));
			ir_set_block(o->out, c, block);
			ir_set_place_from(o->out, c, lvl[k]);
			if (!rb_infer(o, c, src0->loc)) {
				free(lvl);
				return false;
			}
			rb_flat_place(o->out, c, pre, pop);
			lvl[nn++] = c->id;
		}
		n = nn;
	}
	int flat = lvl[0];
	free(lvl);
	/* one all_reduce */
	IrNode *red = ir_node_new(o->out, IR_OP_ALL_REDUCE, &flat, 1, ar0->loc);
	if (!red) {
		diag_error(o->d, ar0->loc, "bucket: out of memory");
		return false;
	}
	IrAttrColl *ra = ir_attr_coll_mut(o->out, red);
	*ra = *ir_attr_coll(ar0);
	ra->axes = axes;
	red->dtype = ar0->dtype;
	ir_set_stage(o->out, red, ir_stage(m, &ar0_old));
	ir_set_block(o->out, red, block);
	ir_set_place_from(o->out, red, flat);
	if (!rb_infer(o, red, ar0->loc))
		return false;
	rb_flat_place(o->out, red, post, pop);
	int rid = red->id;
	if (b->n == 1) {
		/* one gradient: its terms reduced together, no pack */
		const Cand *c = &cands[b->members[0]];
		const IrNode *g = m->nodes[c->g];
		memcpy(red->shape, g->shape, sizeof g->shape);
		red->rank = g->rank;
		rb_take(o, red, c->inner);
		return c->inner == c->g || recast(o, m, rid, c->g);
	}
	/* unpack */
	int64_t off = 0;
	for (int k = 0; k < b->n; k++) {
		const Cand *c = &cands[b->members[k]];
		int gid = c->inner;
		const IrNode *ar = m->nodes[gid];
		int64_t len = ir_node_numel(ar);
		IrNode *s = rb_add(o, IR_OP_SLICE, &rid, 1, gid, false);
		if (!s)
			return false;
		*ir_attr_slice_mut(o->out, s) = (IrAttrSlice){0, off, off + len};
		if (!rb_infer(o, s, ar->loc))
			return false;
		rb_flat_place(o->out, s, post, pop);
		off += len;
		IrNode *last = s;
		if (ar->rank != 1) {
			int sid = s->id;
			last = rb_add(o, IR_OP_RESHAPE, &sid, 1, gid, false);
			if (!last)
				return false;
			last->rank = ar->rank;
			memcpy(last->shape, ar->shape, sizeof ar->shape);
		}
		rb_take(o, last, gid);
		if (c->g != gid && !recast(o, m, last->id, c->g))
			return false;
	}
	return true;
}

/* ZeRO-1's all_reduce of a reduce_scatter of a gradient (see Cand): the
 * gradient, else NULL. */
static const IrNode *scattered_grad(const IrModule *m, const IrNode *x)
{
	if (x->op != IR_OP_ALL_REDUCE || x->nops != 1 || x->role == IR_ROLE_GRAD || x->name)
		return NULL;
	const IrNode *rs = m->nodes[x->ops[0]];
	if (rs->op != IR_OP_REDUCE_SCATTER || rs->nops != 1)
		return NULL;
	const IrNode *g = m->nodes[rs->ops[0]];
	return g->role == IR_ROLE_GRAD ? g : NULL;
}

/* The param gradient x (a candidate: see grads[] below) is of, by its
 * link, or -1; *g: the gradient node, whose name labels the sum. */
static int grad_param(const IrModule *m, const IrNode *x, const IrNode **g)
{
	*g = x->role == IR_ROLE_GRAD ? x : scattered_grad(m, x);
	return *g && ir_link(m, *g) == IR_LINK_GRAD ? ir_link_param(m, *g) : -1;
}

bool pass_bucket(IrModule *m, Diag *d, const PassOptions *opt)
{
	int64_t cap = m->train.bucket_bytes;
	if (m->nnodes == 0)
		return true;
	by_stage = pipeline_axis(m) >= 0;
	if (cap <= 0)
		cap = 1; /* off: a bucket per gradient */
	int nn = m->nnodes;
	int *first_user = malloc(sizeof(int) * (size_t)nn); /* nn: none */
	Cand *cands = malloc(sizeof(Cand) * (size_t)nn);
	Bucket *bks = malloc(sizeof(Bucket) * (size_t)nn);
	int *members = NULL; /* nc ints per bucket */
	int *point_of = malloc(sizeof(int) * (size_t)nn); /* node -> bucket emitted after it */
	int *nusers = calloc((size_t)nn, sizeof(int));

	int *grads = malloc(sizeof(int) * (size_t)nn);  /* what may be a candidate */
	int *fix = malloc(sizeof(int) * (size_t)nn);    /* place_from to clear */
	bool ok = first_user && cands && bks && point_of && nusers && grads && fix;
	int nc = 0, nb = 0, ng = 0, nfix = 0;
	if (!ok) {
		diag_error(d, (SrcLoc){0}, "bucket: out of memory");
		goto done;
	}
	for (int i = 0; i < nn; i++) {
		first_user[i] = nn;
		point_of[i] = -1;
	}
	/* One walk over the nodes for what the rest needs of them all: the
	 * first user and the number of uses of each (a param's first user is
	 * its first use, the sort key), the named params, the gradients that
	 * may be candidates, and the place_from the pass clears. */
	for (int i = 0; i < nn; i++) {
		const IrNode *x = m->nodes[i];
		for (int k = 0; k < x->nops; k++) {
			int o = x->ops[k];
			if (first_user[o] > i)
				first_user[o] = i;
			nusers[o]++;
		}
		if (((x->op == IR_OP_ALL_REDUCE || x->op == IR_OP_ADD || x->op == IR_OP_CAST) &&
		     x->role == IR_ROLE_GRAD && x->rank != 0) || (x->rank != 0 && scattered_grad(m, x)))
			grads[ng++] = i;
		int pf = ir_place_from(m, x);
		if (pf < -1 || pf == x->id)
			fix[nfix++] = i;
	}
	/* candidates: gradients that are all_reduces (or sums of them) of
	 * partial terms nothing else reads */
	for (int j = 0; j < ng; j++) {
		int i = grads[j];
		const IrNode *x = m->nodes[i];
		const IrNode *gn;
		int p = grad_param(m, x, &gn);
		/* a bf16 gradient reduced in bf16, then cast to f32: the cast
		 * is re-made after the unpack (recast) */
		int inner = i;
		if (x->op == IR_OP_CAST) {
			inner = x->nops == 1 ? x->ops[0] : -1;
			const IrNode *y = inner >= 0 ? m->nodes[inner] : NULL;
			if (!y || nusers[inner] != 1 || y->role == IR_ROLE_GRAD || y->name ||
			    (y->op != IR_OP_ALL_REDUCE && y->op != IR_OP_ADD) ||
			    y->rank != x->rank ||
			    memcmp(y->shape, x->shape, sizeof(int64_t) * (size_t)x->rank) != 0)
				continue;
		}
		Cand c = {.g = i, .inner = inner, .gname = gn ? gn->name : NULL, .ar = -1,
		          .last = -1, .bucket = -1};
		if (p < 0 || !collect(m, nusers, inner, true, &c) ||
		    (inner != i && c.nskip >= 2 * MAX_SRC))
			continue;
		if (inner != i)
			c.skip[c.nskip++] = i;
		extend_chain(m, nusers, &c);
		c.first_use = first_user[p];
		cands[nc++] = c;
	}
	qsort(cands, (size_t)nc, sizeof *cands, cmp_cand);
	/* fill buckets per group (mesh axes, reduction, dtype), in order; at
	 * most one bucket of a group is open */
	int *open = malloc(sizeof(int) * ((size_t)nc + 1)), nopen = 0;
	int64_t *bbytes = malloc(sizeof(int64_t) * ((size_t)nc + 1));
	members = malloc(sizeof(int) * ((size_t)nc + 1));
	if (!open || !bbytes || !members) {
		free(open);
		free(bbytes);
		ok = false;
		diag_error(d, (SrcLoc){0}, "bucket: out of memory");
		goto done;
	}
	for (int c = 0; c < nc; c++) {
		const IrNode *ar = m->nodes[cands[c].ar];
		int j = 0;
		/* bucket_mb 0: every gradient its own bucket */
		while (j < nopen && !same_group(m, m->nodes[cands[bks[open[j]].point].ar],
		                                cands[bks[open[j]].point].axes, ar, cands[c].axes))
			j++;
		if (j == nopen) {
			bks[nb] = (Bucket){.members = NULL, .n = 0, .point = -1};
			bbytes[nb] = 0;
			open[nopen++] = nb++;
		}
		int b = open[j];
		/* for now point is the bucket's first member (the group test) */
		if (!bks[b].n++)
			bks[b].point = c;
		cands[c].bucket = b;
		bbytes[b] += bytes_of(m->nodes[cands[c].inner]);
		if (bbytes[b] >= cap)
			open[j] = open[--nopen];
	}
	free(open);
	free(bbytes);
	{
		int off = 0;
		for (int b = 0; b < nb; b++) {
			bks[b].members = members + off;
			off += bks[b].n;
			bks[b].n = 0;
		}
		for (int c = 0; c < nc; c++) {
			Bucket *B = &bks[cands[c].bucket];
			B->members[B->n++] = c;
		}
	}
	/* the point of each bucket: after its last gradient; a member read
	 * before that point keeps its own all_reduce */
	for (int b = 0; b < nb; b++) {
		Bucket *B = &bks[b];
		for (bool changed = true; changed;) {
			changed = false;
			B->point = -1;
			for (int k = 0; k < B->n; k++)
				if (cands[B->members[k]].last > B->point)
					B->point = cands[B->members[k]].last;
			for (int k = 0; k < B->n; k++) {
				int g = cands[B->members[k]].g;
				if (first_user[g] <= B->point) {
					cands[B->members[k]].bucket = -1;
					memmove(B->members + k, B->members + k + 1,
					        sizeof(int) * (size_t)(B->n - k - 1));
					B->n--;
					changed = true;
					break;
				}
			}
		}
		/* one gradient of one term: its all_reduce stays (a chain of
		 * them becomes one) */
		if (B->n < 2 && (B->n == 0 || (cands[B->members[0]].nsrc < 2 &&
		                               !cands[B->members[0]].chain))) {
			for (int k = 0; k < B->n; k++)
				cands[B->members[k]].bucket = -1;
			B->n = 0;
			continue;
		}
		if (point_of[B->point] >= 0) {
			/* two buckets end at the same node (cannot happen: a node is
			 * one gradient's source); keep the second's all_reduces */
			for (int k = 0; k < B->n; k++)
				cands[B->members[k]].bucket = -1;
			B->n = 0;
			continue;
		}
		point_of[B->point] = b;
	}
	bool any = false;
	for (int b = 0; b < nb && !any; b++)
		any = bks[b].n > 0;
	if (!any) {
		/* nothing to bucket (no DDP all_reduce, or each alone): what the
		 * copy below would make, without making it */
		for (int j = 0; j < nfix; j++)
			ir_set_place_from(m, m->nodes[fix[j]], -1);
		if (opt && opt->verbose)
			fprintf(stderr, "dtmc: bucket: 0 gradient all_reduces in 0 buckets of up to "
			        "%lld bytes\n", (long long)cap);
	} else {
		bool *skip = calloc((size_t)nn, sizeof(bool));
		ok = skip != NULL;
		int nbuckets = 0, nreduced = 0;
		/* out's node array once, not grown: the nodes kept, and per
		 * bucket at most an add per extra term, a reshape, a concat, a
		 * slice and a reshape per gradient and the all_reduce */
		size_t room = (size_t)nn;
		for (int c = 0; ok && c < nc; c++)
			if (cands[c].bucket >= 0 && bks[cands[c].bucket].n > 0) {
				room += (size_t)cands[c].nsrc + 5;
				for (int k = 0; k < cands[c].nskip; k++)
					skip[cands[c].skip[k]] = true;
			}
		room += (size_t)nb;
		Rebuild o;
		if (!ok) {
			diag_error(d, (SrcLoc){0}, "bucket: out of memory");
		} else if ((ok = rb_begin(&o, m, d, "bucket", room))) {
			for (int i = 0; ok && i < nn; i++) {
				if (!skip[i])
					ok = rb_adopt(&o, i);
				if (ok && point_of[i] >= 0 && bks[point_of[i]].n > 0) {
					ok = emit_bucket(&o, cands, &bks[point_of[i]]);
					nbuckets++;
					nreduced += bks[point_of[i]].n;
				}
			}
			ok = rb_finish(&o, ok);
			if (ok && opt && opt->verbose)
				fprintf(stderr, "dtmc: bucket: %d gradient all_reduce%s in %d bucket%s of up "
				        "to %lld bytes\n", nreduced, nreduced == 1 ? "" : "s", nbuckets,
				        nbuckets == 1 ? "" : "s", (long long)cap);
		}
		free(skip);
	}
done:
	free(first_user);
	free(cands);
	free(bks);
	free(members);
	free(point_of);
	free(nusers);
	free(grads);
	free(fix);
	return ok;
}
