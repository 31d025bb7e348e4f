/* recompute.c - pass "recompute": activation checkpointing per block
 * instance (train { recompute true }).
 *
 * Consumes the global module after `propagate`: forward, backward and
 * optimizer nodes, every value placed.  Without recompute the backward
 * reads the forward's activations, so every block's internals stay live
 * from its forward to its backward.  With it, the backward of each block
 * instance (IrNode.block, which lowering sets: layer.3 is one instance)
 * reads only the instance's inputs and outputs and recomputes the rest:
 *
 *   - a forward value is *internal* to instance b when it is computed in b
 *     (block == b), is not a leaf (param, input, const, state), depends on
 *     an input (an activation; values of params only, such as a cast or a
 *     transpose of a weight, are kept as they are, once per step) and no
 *     forward node outside b, or in another pipeline stage, reads it (a
 *     block's output is the next block's input and stays live anyway; a
 *     value another stage's chunk of the block reads is sent there, and a
 *     clone made in that stage would read this stage's params);
 *   - a backward node R reading an internal value v reads instead a clone
 *     of v, made for the key (b, R's micro-batch, R's stage); the clone
 *     reads clones of v's internal operands (same key) and the originals
 *     of the rest: the instance's inputs, params and constants.  Clones
 *     are placed right before the first backward node that needs them and
 *     carry R's stage and micro-batch, so the pipeline pass puts them in
 *     R's backward work item; one clone per key serves every reader.
 *
 * It runs after `propagate` so a clone takes its original's placement as
 * it is: partition then gives it the same local op and the same
 * collectives (Megatron's recompute re-runs the block's tensor-parallel
 * all-reduce too), and the forward keeps the placements it has without
 * recompute.  Before propagate the clones, whose users differ, could be
 * placed differently, and the forward with them.  Dropout masks are keyed
 * by the node's attributes (the salt) and element index, so a clone draws
 * the original's mask.  Results equal the run without recompute: the same
 * ops on the same operands.
 *
 * `recompute layer` (IrTrain.recompute_scope) re-runs each block
 * instance's whole forward instead, as Megatron-LM's full recomputation
 * does (torch.utils.checkpoint of each layer: the layer's forward again
 * from its checkpointed input, then its backward): when a key's first
 * clone is made, every forward node of the instance in the key's
 * micro-batch and stage computed from the data is cloned, in id order,
 * its outputs too (the last GEMM, its tensor-parallel all-reduce, the
 * residual add), though no backward node reads those.  The results are
 * the same; the time is Megatron's (bench/cost/published.sh compares
 * with its published runs), the memory peak barely moves.
 *
 * Cost: each block's forward runs twice (about a third more compute for a
 * transformer).  Memory: from forward to backward only the block inputs
 * (and values outside blocks) stay live; during a block's backward its
 * recomputed internals live instead.
 */
#include "passes/recompute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One set of clones: block instance b recomputed for micro-batch mb on
 * stage `stage`.  clone[pos] is the temporary id of the clone of the
 * block's pos-th node (see Rc.pos), or -1. */
typedef struct Key {
	int b, mb, stage;
	int *clone;
	bool whole;       /* recompute layer: the block's whole forward cloned */
	struct Key *next; /* the block's other keys */
} Key;

typedef struct Rc {
	IrModule *m;
	Diag *d;
	int n, L;       /* nodes before the pass; the loss */
	bool *internal; /* [n] */
	bool *redo;     /* [n] recompute layer: forward nodes the layer re-runs */
	int *boff;      /* [nb + 1] recompute layer: block b's nodes are */
	int *bnode;     /* bnode[boff[b] .. boff[b + 1]), in id order */
	int *pos;       /* [n]: index of a forward node among its block's, or -1 */
	int *blk;       /* [n]: IrNode.block, read without the ~500-byte node */
	int *bsize;     /* [blocks] */
	Key **keys;     /* [nb]: the block's keys */
	int nb, nkeys;
	/* temporary ids >= n are clones: ckey[id - n] is the clone's key */
	Key **ckey;
	int ccap;
	int *order; /* temporary ids in the final order */
	int norder, ocap;
	int *stack; /* [n] */
	bool *mark; /* [n] */
	int nclones;
	bool failed;
} Rc;

static bool oom(Rc *r)
{
	if (!r->failed)
		diag_error(r->d, (SrcLoc){0}, "recompute: out of memory or too many nodes");
	r->failed = true;
	return false;
}

static bool is_leaf(IrOp op)
{
	return op == IR_OP_PARAM || op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_STATE ||
	       op == IR_OP_LOSS_SCALE;
}

static bool push_order(Rc *r, int id)
{
	if (r->norder == r->ocap) {
		int cap = r->ocap ? 2 * r->ocap : 1024;
		int *o = realloc(r->order, sizeof(int) * (size_t)cap);
		if (!o)
			return oom(r);
		r->order = o;
		r->ocap = cap;
	}
	r->order[r->norder++] = id;
	return true;
}

static Key *find_key(Rc *r, int b, int mb, int stage)
{
	for (Key *k = r->keys[b]; k; k = k->next)
		if (k->mb == mb && k->stage == stage)
			return k;
	Key *k = calloc(1, sizeof *k);
	int *c = malloc(sizeof(int) * (size_t)(r->bsize[b] ? r->bsize[b] : 1));
	if (!k || !c) {
		free(k);
		free(c);
		oom(r);
		return NULL;
	}
	for (int i = 0; i < r->bsize[b]; i++)
		c[i] = -1;
	*k = (Key){.b = b, .mb = mb, .stage = stage, .clone = c, .next = r->keys[b]};
	r->keys[b] = k;
	r->nkeys++;
	return k;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Appends the clone of original node v for key k. */
static int clone_one(Rc *r, Key *k, int v)
{
	IrModule *m = r->m;
	const IrNode *o = m->nodes[v];
	IrNode *c = ir_node_copy(m, m, o, o->ops, o->nops);
	if (!c) {
		oom(r);
		return -1;
	}
	if (c->op == IR_OP_MOE_SLOT) /* the load is counted once, by the original */
		ir_attr_route_mut(m, c)->stats = 0;
	int id = c->id;
	if (id - r->n >= r->ccap) {
		int cap = r->ccap ? 2 * r->ccap : 1024;
		Key **ck = realloc(r->ckey, sizeof(Key *) * (size_t)cap);
		if (!ck) {
			oom(r);
			return -1;
		}
		r->ckey = ck;
		r->ccap = cap;
	}
	for (int j = 0; j < c->nops; j++) {
		int u = o->ops[j];
		if (r->internal[u])
			c->ops[j] = k->clone[r->pos[u]];
	}
	/* the original keeps the name; the clone is the same value */
	ir_set_label(m, c, o->name ? o->name : ir_label(m, o));
	c->name = NULL;
	ir_set_choose(m, c, -1);
	ir_set_stage(m, c, k->stage);
	ir_set_mb(m, c, k->mb);
	r->ckey[id - r->n] = k;
	k->clone[r->pos[v]] = id;
	r->nclones++;
	return push_order(r, id) ? id : -1;
}

/* The clone of internal node v for key k, made (with the clones it
 * reads that key k lacks) if needed: the missing ones in id order, which
 * is a topological order. */
static int clone_of(Rc *r, Key *k, int v)
{
	if (k->clone[r->pos[v]] >= 0)
		return k->clone[r->pos[v]];
	int ns = 0, nmarked = 0;
	r->stack[ns++] = v;
	r->mark[v] = true;
	/* the marked nodes collect at the top of the same array, growing
	 * down: each is on the stack or in got[], so n entries suffice */
	int *got = r->stack + r->n;
	while (ns > 0) {
		int x = r->stack[--ns];
		*--got = x;
		nmarked++;
		const IrNode *xn = r->m->nodes[x];
		for (int j = 0; j < xn->nops; j++) {
			int u = xn->ops[j];
			if (r->internal[u] && !r->mark[u] && k->clone[r->pos[u]] < 0) {
				r->mark[u] = true;
				r->stack[ns++] = u;
			}
		}
	}
	qsort(got, (size_t)nmarked, sizeof(int), cmp_int);
	int id = -1;
	for (int j = 0; j < nmarked; j++) {
		r->mark[got[j]] = false;
		if (!r->failed)
			id = clone_one(r, k, got[j]);
	}
	return r->failed ? -1 : id;
}

/* recompute layer: clones of every forward node of key k's block
 * instance in k's micro-batch and stage that the layer computes from its
 * inputs, in id order, made when the key is: Megatron-LM's full
 * recomputation runs the layer's forward again from its checkpointed
 * input, the outputs too (the last GEMM, its tensor-parallel all-reduce,
 * the residual add), though no backward node reads those clones. */
static bool clone_whole(Rc *r, Key *k)
{
	IrModule *m = r->m;
	k->whole = true;
	for (int j = r->boff[k->b]; j < r->boff[k->b + 1] && !r->failed; j++) {
		int v = r->bnode[j];
		const IrNode *x = m->nodes[v];
		int mb = ir_mb(m, x);
		if (!r->redo[v] || k->clone[r->pos[v]] >= 0 || ir_stage(m, x) != k->stage ||
		    (mb >= 0 && mb != k->mb))
			continue;
		if (r->internal[v]) {
			clone_of(r, k, v);
			continue;
		}
		for (int o = 0; o < x->nops && !r->failed; o++)
			if (r->internal[x->ops[o]])
				clone_of(r, k, x->ops[o]);
		if (!r->failed)
			clone_one(r, k, v);
	}
	return !r->failed;
}

/* internal[], pos[] and bsize[]; returns the number of block instances. */
static int classify(Rc *r)
{
	IrModule *m = r->m;
	int nb = 0;
	bool *act = calloc((size_t)r->n, sizeof(bool));
	bool *outside = calloc((size_t)r->n, sizeof(bool));
	if (!act || !outside) {
		free(act);
		free(outside);
		oom(r);
		return 0;
	}
	for (int i = 0; i <= r->L; i++) {
		const IrNode *x = m->nodes[i];
		act[i] = x->op == IR_OP_INPUT;
		for (int j = 0; j < x->nops; j++) {
			int u = x->ops[j];
			act[i] = act[i] || act[u];
			/* read by another block, or by another pipeline stage's
			 * chunk of this one (interleaved stages cut through
			 * blocks): that stage receives it, so it stays */
			if (r->blk[u] != ir_block(m, x) ||
			    ir_stage(m, m->nodes[u]) != ir_stage(m, x))
				outside[u] = true;
		}
		if (ir_block(m, x) >= nb)
			nb = ir_block(m, x) + 1;
	}
	for (int i = 0; i < r->L; i++) {
		const IrNode *x = m->nodes[i];
		r->internal[i] = ir_block(m, x) >= 0 && act[i] && !outside[i] && !is_leaf(x->op);
		if (r->redo)
			r->redo[i] = ir_block(m, x) >= 0 && act[i] && !is_leaf(x->op);
	}
	free(act);
	free(outside);
	return nb;
}

static bool run(Rc *r)
{
	IrModule *m = r->m;
	int n = r->n;
	r->internal = calloc((size_t)n, sizeof(bool));
	r->pos = malloc(sizeof(int) * (size_t)n);
	r->stack = malloc(sizeof(int) * (size_t)n);
	r->mark = calloc((size_t)n, sizeof(bool));
	r->blk = malloc(sizeof(int) * (size_t)n);
	if (!r->internal || !r->pos || !r->stack || !r->mark || !r->blk)
		return oom(r);
	for (int i = 0; i < n; i++)
		r->blk[i] = ir_block(m, m->nodes[i]);
	bool layer = m->train.recompute_scope == IR_RECOMPUTE_LAYER;
	if (layer && !(r->redo = calloc((size_t)n, sizeof(bool))))
		return oom(r);
	int nb = r->nb = classify(r);
	if (r->failed)
		return false;
	r->bsize = calloc((size_t)(nb ? nb : 1), sizeof(int));
	r->keys = calloc((size_t)(nb ? nb : 1), sizeof(Key *));
	if (!r->bsize || !r->keys)
		return oom(r);
	/* forward nodes only: the backward carries its blocks too (autodiff),
	 * but only forward values are cloned */
	for (int i = 0; i < n; i++) {
		int b = r->blk[i];
		r->pos[i] = i <= r->L && b >= 0 && b < nb ? r->bsize[b]++ : -1;
	}
	if (layer) {
		r->boff = calloc((size_t)nb + 1, sizeof(int));
		r->bnode = malloc(sizeof(int) * (size_t)(n ? n : 1));
		if (!r->boff || !r->bnode)
			return oom(r);
		for (int b = 0; b < nb; b++)
			r->boff[b + 1] = r->boff[b] + r->bsize[b];
		for (int i = 0; i < n; i++)
			if (r->pos[i] >= 0)
				r->bnode[r->boff[r->blk[i]] + r->pos[i]] = i;
	}
	for (int i = 0; i < n && !r->failed; i++) {
		IrNode *x = m->nodes[i];
		for (int j = 0; i > r->L && j < x->nops && !r->failed; j++) {
			int v = x->ops[j];
			if (v >= n || !r->internal[v])
				continue;
			Key *k = find_key(r, r->blk[v], ir_mb(m, x), ir_stage(m, x));
			if (k && layer && !k->whole && !clone_whole(r, k))
				break;
			int c = k ? clone_of(r, k, v) : -1;
			if (c >= 0)
				x->ops[j] = c;
		}
		push_order(r, i);
	}
	if (r->failed)
		return false;

	/* renumber: temporary ids -> final positions */
	int total = m->nnodes;
	int *to = malloc(sizeof(int) * (size_t)total);
	IrNode **nodes = arena_alloc(m->arena, sizeof(IrNode *) * (size_t)total);
	IrModule *ann = ir_module_derive(m); /* the annotations by the final ids */
	if (!to || !nodes || !ann) {
		free(to);
		return oom(r);
	}
	for (int j = 0; j < r->norder; j++)
		to[r->order[j]] = j;
	for (int t = 0; t < total; t++) {
		IrNode *x = m->nodes[t];
		int pf = ir_place_from(m, x);
		if (t >= n && pf >= 0 && pf < n && r->pos[pf] >= 0 && r->blk[pf] == r->ckey[t - n]->b) {
			int c = r->ckey[t - n]->clone[r->pos[pf]];
			pf = c >= 0 ? c : pf;
		}
		pf = pf >= 0 && pf < total ? to[pf] : -1;
		ir_annots_copy(ann, to[t], m, t);
		ir_int_set(ann, &ann->place_from, to[t], pf == to[t] ? -1 : pf);
		int lp = ir_link_param(m, x);
		if (lp >= 0)
			ir_int_set(ann, &ann->link_param, to[t], to[lp]);
		for (int j = 0; j < x->nops; j++)
			x->ops[j] = to[x->ops[j]];
		nodes[to[t]] = x;
	}
	for (int t = 0; t < total; t++)
		nodes[t]->id = t;
	m->loss = to[m->loss];
	for (int c = 0; c < m->nchooses; c++)
		m->chooses[c].node = to[m->chooses[c].node];
	ann->nodes = nodes;
	ann->nnodes = total;
	ann->cap = total;
	ir_module_take_nodes(m, ann);
	free(to);
	return true;
}

bool pass_recompute(IrModule *m, Diag *d, const PassOptions *opt)
{
	if (!m->train.recompute || m->loss < 0 || m->nnodes == 0)
		return true;
	Rc r = {.m = m, .d = d, .n = m->nnodes, .L = m->loss};
	bool ok = run(&r);
	if (ok && !r.failed && r.nclones == 0)
		diag_warning(d, m->train.loc[IR_TRAIN_RECOMPUTE], "recompute true has no effect: %s",
		             r.nb == 0 ? "the model has no blocks, and recompute re-runs each block "
		                         "instance's forward in its backward"
		                       : "no block keeps an activation from its forward to its "
		                         "backward");
	if (ok && opt && opt->verbose)
		fprintf(stderr,
		        "dtmc: recompute: %d forward nodes recomputed in the backward "
		        "(%d block instance x micro-batch x stage sets)\n",
		        r.nclones, r.nkeys);
	for (int b = 0; r.keys && b < r.nb; b++) {
		for (Key *k = r.keys[b]; k;) {
			Key *next = k->next;
			free(k->clone);
			free(k);
			k = next;
		}
	}
	free(r.internal);
	free(r.redo);
	free(r.boff);
	free(r.bnode);
	free(r.pos);
	free(r.blk);
	free(r.bsize);
	free(r.keys);
	free(r.ckey);
	free(r.order);
	free(r.stack);
	free(r.mark);
	return ok && !r.failed;
}
