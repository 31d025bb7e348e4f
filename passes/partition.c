/* partition.c - pass "partition": the global program becomes the per-rank
 * program.
 *
 * Consumes a module after `propagate`: global shapes, every value with a
 * known placement (its target).  Produces the SPMD program: nodes in the
 * same order, each running on local shard shapes, with the collectives
 * that DESIGN.md section 4 prescribes inserted in front of a node whose
 * operand is not placed as the node's local rule needs (the rules are in
 * partition_rules.c, the plans in reshard.c), and behind a node whose
 * natural result differs from its target.  Placements stay global in
 * meaning: a node's placement and local shape say which shard of which
 * global value it holds.
 *
 * Leaves keep their placement (params and optimizer state are stored as
 * shards); an optimizer step runs on its param's shard with the gradient
 * resharded to the param's placement (DDP: all_reduce of a dp-partial
 * gradient), or on the finer shard its own placement names (ZeRO-1/2,
 * passes/zero.c: then the result is gathered and assigned back); a
 * gradient split over axes its op leaves it partial over is computed as
 * the op gives it and reduce_scattered; grad_norm adds up local sums of
 * squares per group of gradients split over the same axes and all_reduces
 * each over those axes only, so a replicated gradient is counted once.
 * cross_entropy and its backward on logits split on the vocab dim are
 * vocab parallel (part_xent_vp): only per-row statistics are reduced;
 * ring attention is expanded into block ops in partition_ring.c.  A partial target the
 * op cannot produce is dropped (the consumers reduce it), never faked.
 *
 * Uneven (torch.chunk) shards are padded, see partition.h and "uneven
 * shards" below; a one-rank mesh is left as it is, and axes of size 1 are
 * dropped from every placement.
 *
 * Most nodes repeat an earlier one (layers, micro-batches): those copy
 * what partitioning it made, through the twins seam (partition_twin.c:
 * twin_replay, off with it NULL); the rest come here (part_node), whose
 * part_emit() and reshard_slow() tell the seam what they made (twin_rec_*).
 */
#include "passes/partition_impl.h"
#include "passes/reshard.h"
#include "passes/pipeline.h"
#include "support/hash.h"
#include "ir/optim_ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A memo of pass_reshard_plan, which is a pure function of the value's
 * dtype and shape and the two placements (the mesh is the module's; the
 * placements by id): the same reshard recurs per layer and micro-batch.
 * Keys compare bytewise, so a hit is the very call made before. */
struct PlanMemo {
	uint64_t hash;
	IrDtype dt;
	int rank;
	int64_t shape[IR_MAX_RANK];
	uint32_t from, to;
	ReshardPlan *plan; /* NULL: an empty slot */
};

/* The vocab-parallel loss's per-logits memo (part_xent_vp): a handful per
 * module (one logits per micro-batch), so a short list rather than three
 * arrays over every node. */
struct CeMemo {
	int lg;     /* global logits id */
	int mx, se; /* its row stats, or -1 */
	int lm;     /* its uneven vocab's padding masked, or -1 */
};

/* A word-at-a-time hash of n bytes (n a multiple of 8), in four
 * independent lanes so the multiplies overlap rather than wait on each
 * other (the key is some 30 words). */
static uint64_t hash_words(const void *data, size_t n)
{
	const unsigned char *b = data;
	uint64_t h0 = 0x9e3779b97f4a7c15ull, h1 = 0xc2b2ae3d27d4eb4full;
	uint64_t h2 = 0x165667b19e3779f9ull, h3 = 0x27d4eb2f165667c5ull;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		uint64_t w[4];
		memcpy(w, b + i, sizeof w);
		h0 = hash_mix64(h0, w[0]);
		h1 = hash_mix64(h1, w[1]);
		h2 = hash_mix64(h2, w[2]);
		h3 = hash_mix64(h3, w[3]);
	}
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		h0 = hash_mix64(h0, w);
	}
	return hash_fin64(h0 ^ (h1 >> 17 | h1 << 47) ^ (h2 >> 31 | h2 << 33) ^ (h3 >> 45 | h3 << 19));
}

/* The memo's key: PlanMemo from dt up to plan, compared bytewise. */
#define MEMO_KEY(e) ((const unsigned char *)&(e)->dt)
#define MEMO_KEY_BYTES (offsetof(PlanMemo, plan) - offsetof(PlanMemo, dt))

/* pass_reshard_plan through the memo (failures are not kept: their
 * reason is reported once anyway).  Returns the plan: the memo's own on a
 * hit (a plan is some 4 KB, not worth copying), else *plan; NULL when
 * there is none. */
static const ReshardPlan *reshard_plan_memo(Part *p, const IrNode *g, uint32_t from,
                                            uint32_t to, ReshardPlan *plan, char *why,
                                            size_t cap)
{
	PlanMemo key;
	memset(&key, 0, sizeof key);
	key.dt = g->dtype;
	key.rank = g->rank < IR_MAX_RANK ? g->rank : IR_MAX_RANK;
	memcpy(key.shape, g->shape, sizeof key.shape[0] * (size_t)key.rank);
	key.from = from;
	key.to = to;
	uint64_t h = hash_words(MEMO_KEY(&key), MEMO_KEY_BYTES & ~(size_t)7);
	key.hash = h;
	size_t slot = 0;
	if (p->capmemo) {
		for (slot = h & (size_t)(p->capmemo - 1); p->memo[slot].plan;
		     slot = (slot + 1) & (size_t)(p->capmemo - 1)) {
			const PlanMemo *e = &p->memo[slot];
			if (e->hash == h && !memcmp(MEMO_KEY(e), MEMO_KEY(&key), MEMO_KEY_BYTES))
				return e->plan;
		}
	}
	if (!pass_reshard_plan(&p->m->mesh, g->dtype, g->rank, g->shape, ir_place_get(p->out, from),
	                       ir_place_get(p->out, to), plan, why, cap))
		return NULL;
	/* keep it; grow at half full (on failure, just do not keep it) */
	if (2 * (p->nmemo + 1) > p->capmemo) {
		int ncap = p->capmemo ? 2 * p->capmemo : 256;
		PlanMemo *nm = arena_alloc(&p->scratch, sizeof *nm * (size_t)ncap);
		if (!nm)
			return plan;
		for (int i = 0; i < p->capmemo; i++) {
			if (!p->memo[i].plan)
				continue;
			size_t j = p->memo[i].hash & (size_t)(ncap - 1);
			while (nm[j].plan)
				j = (j + 1) & (size_t)(ncap - 1);
			nm[j] = p->memo[i];
		}
		p->memo = nm;
		p->capmemo = ncap;
		for (slot = h & (size_t)(ncap - 1); nm[slot].plan; slot = (slot + 1) & (size_t)(ncap - 1))
			;
	}
	key.plan = arena_alloc_raw(&p->scratch, sizeof *key.plan);
	if (!key.plan)
		return plan;
	*key.plan = *plan;
	p->memo[slot] = key;
	p->nmemo++;
	return key.plan;
}

static bool internal(Part *p, const IrNode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool internal(Part *p, const IrNode *n, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pass_fault(p->m, p->d, n->loc, "partition: %%%d (%s): %s", n->id, ir_op_name(n->op), msg);
	return false;
}

IrNode *part_loc_node(Part *p, int id)
{
	return p->out->nodes[id];
}

/* placement_dim_parts, here where the compiler can inline it: the
 * partitioner asks it for every dim of every node it makes. */
static inline int64_t dim_parts(const Placement *pl, const Mesh *m, int d)
{
	if (!pl->known || d < 0 || d >= pl->ndims || d >= IR_MAX_RANK)
		return 1;
	int64_t parts = 1;
	for (int k = 0; k < pl->naxes[d] && k < IR_MAX_AXES; k++)
		if (pl->axes[d][k] < m->naxes)
			parts *= m->sizes[pl->axes[d][k]];
	return parts;
}

/* The id of pl in the module's table (0: out of memory, which the
 * verifier reports, or not known). */
static uint32_t intern(Part *p, const Placement *pl)
{
	return ir_place_intern(p->out, pl);
}

static const Placement *place_of(const Part *p, uint32_t id)
{
	return ir_place_get(p->out, id);
}

/* pass_placement_canon(mesh, pl), in place. */
static void canon(const Part *p, Placement *pl)
{
	pass_placement_canon(&p->m->mesh, pl);
}

/* The id of id's placement made canonical, worked out once per id. */
static uint32_t canon_id(Part *p, uint32_t id)
{
	if (!id)
		return 0;
	if (id < p->ncanon && p->canon[id])
		return p->canon[id];
	Placement c = *place_of(p, id);
	canon(p, &c);
	uint32_t r = intern(p, &c);
	if (id >= p->ncanon) {
		uint32_t n = 2 * id + 64;
		uint32_t *v = arena_alloc(&p->scratch, sizeof *v * n);
		if (!v)
			return r;
		if (p->ncanon)
			memcpy(v, p->canon, sizeof *v * p->ncanon);
		p->canon = v;
		p->ncanon = n;
	}
	p->canon[id] = r;
	return r;
}

static const char *fmt_pl(Part *p, const Placement *pl)
{
	char buf[256];
	placement_format(pl, &p->m->mesh, buf, sizeof buf);
	return arena_printf(&p->scratch, "%s", buf);
}

/* at as node n's attributes: like's own when they are the same (most
 * local nodes keep their global node's), none when all zero. */
static void set_attr(Part *p, IrNode *n, const IrAttr *at, const IrNode *like)
{
	if (!at || !memcmp(at, &ir_attr_zero[at->kind], sizeof *at))
		n->attr = NULL;
	else if (like->attr && !memcmp(at, like->attr, sizeof *at))
		n->attr = like->attr;
	else
		ir_attr_set(p->out, n, at); /* out of memory: the verifier says */
}

/* A new local node holding a shard, under pl, of a value shaped like
 * `like` (global), with attributes at (NULL: none).  Its local type is
 * inferred and checked against pl. */
int part_emit(Part *p, IrOp op, const int *ops, int nops, const IrAttr *at,
              const IrNode *like, const Placement *pl, int origin)
{
	IrNode *n = ir_node_new(p->out, op, ops, nops, like->loc);
	if (!n) {
		diag_error(p->d, like->loc, "partition: out of memory");
		return -1;
	}
	set_attr(p, n, at, like);
	n->dtype = like->dtype;
	n->rank = like->rank;
	ir_place_set(p->out, n, pl); /* out of memory: the verifier says */
	/* like is a global node (or a copy of one, its id kept) */
	ir_set_stage(p->out, n, ir_stage(p->m, like));
	ir_set_mb(p->out, n, ir_mb(p->m, like));
	ir_set_block(p->out, n, ir_block(p->m, like));
	if (op == IR_OP_PARAM)
		ir_set_unit(p->out, n, ir_unit(p->m, like));
	ir_set_place_from(p->out, n, origin);
	/* The shard shape: every rank stores rank 0's, the largest chunk
	 * (placement_shard_shape for rank 0, without its mesh_coords: this
	 * runs for every node made), and the global extent where it pads.
	 * want keeps it for the check below, element by element: a block
	 * copy of n->shape just stored would stall on store forwarding. */
	int64_t want[IR_MAX_RANK] = {0};
	for (int d = 0; d < like->rank && d < IR_MAX_RANK; d++) {
		int64_t parts = dim_parts(pl, &p->m->mesh, d), g = like->shape[d];
		int64_t chunk = parts > 1 ? g / parts + (g % parts != 0) : g;
		want[d] = parts <= 1 ? g : g < 0 ? 0 : chunk < g ? chunk : g;
		n->shape[d] = want[d];
		if (parts > 1 && g % parts)
			ir_set_padded(p->out, n, d, g); /* else it stays 0 */
	}
	char msg[512];
	if (!ir_infer_msg(p->out, n, msg, sizeof msg)) {
		internal(p, like, "the local op does not type: %s", msg);
		return -1;
	}
	bool same = n->rank == like->rank;
	for (int d = 0; same && d < n->rank && d < IR_MAX_RANK; d++)
		same = want[d] == n->shape[d];
	if (!same) {
		char t1[96], t2[96];
		ir_format_type(t1, sizeof t1, n->dtype, n->rank, n->shape);
		ir_format_type(t2, sizeof t2, n->dtype, like->rank, want);
		internal(p, like, "local %s gives %s, its placement %s needs %s", ir_op_name(op), t1,
		         fmt_pl(p, pl), t2);
		return -1;
	}
	twin_rec_node(p->tw, like->id, origin);
	return n->id;
}

/* Local node id (a shard of global g) with dim d, whole here and uneven
 * over a group of G, padded with zeros to G chunks, so that a collective
 * can cut it evenly; id itself where there is nothing to pad (d < 0: no
 * dim). */
static int pad_to_group(Part *p, int id, const IrNode *g, int d, int64_t G)
{
	const Placement *from = ir_place(p->out, part_loc_node(p, id));
	if (d < 0 || d >= g->rank || G < 2 || g->shape[d] % G == 0 ||
	    placement_dim_parts(from, &p->m->mesh, d) != 1)
		return id;
	IrNode big = *g;
	IrAttr sl = {.kind = IR_ATTR_SLICE, .slice = {d, 0, g->shape[d]}};
	big.shape[d] = G * (g->shape[d] / G + 1);
	return part_emit(p, IR_OP_PAD, &id, 1, &sl, &big, from, id);
}

/* One planned step on local node id, a shard of global g.  The steps are
 * even collectives: an uneven dim cut whole (reduce_scatter, shard_slice,
 * all_to_all's split dim) is padded with zeros to a multiple of the group
 * first, and one gathered whole (all_gather, all_to_all's concat dim) is
 * trimmed back to its extent after; between two uneven cuts the planner
 * only steps where the chunks tile (passes/reshard.c), which needs
 * neither. */
static int reshard_step(Part *p, int id, const IrNode *g, const ReshardStep *s)
{
	IrAttr at = {.kind = IR_ATTR_COLL, .coll = {.axes = s->axes, .red = s->red}};
	int cut = -1, gather = -1; /* the dims padded before, trimmed after */
	if (s->op == IR_OP_ALL_TO_ALL) {
		at.coll.n = 2;
		at.coll.a2a.split = cut = s->dim;
		at.coll.a2a.concat = gather = s->dim2;
	} else if (s->op != IR_OP_ALL_REDUCE) {
		at.coll.n = 1;
		at.coll.dim = s->dim;
		if (s->op == IR_OP_ALL_GATHER)
			gather = s->dim;
		else
			cut = s->dim; /* reduce_scatter, shard_slice */
	}
	int64_t G = mesh_axes_size(&p->m->mesh, s->axes);
	if ((id = pad_to_group(p, id, g, cut, G)) < 0)
		return -1;
	if (gather < 0 || gather >= g->rank || G < 2 || g->shape[gather] % G == 0 ||
	    placement_dim_parts(&s->after, &p->m->mesh, gather) != 1)
		return part_emit(p, s->op, &id, 1, &at, g, &s->after, id);
	IrNode big = *g; /* the gathered value with its zero rows */
	IrAttr sl = {.kind = IR_ATTR_SLICE, .slice = {gather, 0, g->shape[gather]}};
	big.shape[gather] = G * part_loc_node(p, id)->shape[gather];
	int c = part_emit(p, s->op, &id, 1, &at, &big, &s->after, id);
	return c < 0 ? -1 : part_emit(p, IR_OP_SLICE, &c, 1, &sl, g, &s->after, c);
}

/* Local node `id` holds a shard of global g under its placement; returns
 * a node holding it under placement `to` (cached per global value). */
static int reshard_slow(Part *p, int id, const IrNode *g, uint32_t to)
{
	IrNode *x = part_loc_node(p, id);
	for (Cached *c = p->cache[g->id]; c; c = c->next)
		if (c->p == to) {
			twin_rec_event(p->tw, g->id, c, true);
			return c->id;
		}
	ReshardPlan buf;
	char why[512];
	const ReshardPlan *plan = reshard_plan_memo(p, g, x->place, to, &buf, why, sizeof why);
	if (!plan) {
		const Mesh *mesh = &p->m->mesh;
		const Placement *xp = place_of(p, x->place), *tp = place_of(p, to);
		if (pass_placement_even(mesh, xp, g->rank, g->shape) &&
		    pass_placement_even(mesh, tp, g->rank, g->shape)) {
			internal(p, g, "cannot reshard %s to %s: %s", fmt_pl(p, xp), fmt_pl(p, tp),
			         why);
			return -1;
		}
		/* a dim cut unevenly over several axes gathers one axis at a
		 * time, which only works where the chunks tile */
		diag_error(p->d, g->loc, "partition: %s cannot move from %s to %s: uneven "
		           "(torch.chunk) shards of a dim split over several mesh axes are not "
		           "supported yet", g->name ? g->name : ir_op_name(g->op), fmt_pl(p, xp),
		           fmt_pl(p, tp));
		return -1;
	}
	int cur = id;
	for (int k = 0; k < plan->nsteps; k++)
		if ((cur = reshard_step(p, cur, g, &plan->steps[k])) < 0)
			return -1;
	Cached *c = arena_alloc(&p->scratch, sizeof *c);
	if (c) {
		*c = (Cached){to, cur, p->cache[g->id]};
		p->cache[g->id] = c;
	}
	twin_rec_event(p->tw, g->id, c, false);
	return cur;
}

/* Mostly the value is placed as wanted already: that test inline, the
 * search (and its 4 KB plan buffer) out of line. */
static inline int reshard(Part *p, int id, const IrNode *g, uint32_t to)
{
	if (part_loc_node(p, id)->place == to)
		return id;
	return reshard_slow(p, id, g, to);
}

/* Operand i of global node n, resharded to placement id pl. */
static int operand(Part *p, const IrNode *n, int i, uint32_t pl)
{
	int gid = n->ops[i];
	if (p->mplace[gid] == pl)
		return p->map[gid];
	return reshard_slow(p, p->map[gid], p->m->nodes[gid], pl);
}

/* The id of the param placement global value id is wanted in, or 0. */
static uint32_t want_of(const Part *p, int id)
{
	return p->wantix[id] >= 0 ? p->wants[p->wantix[id]] : 0;
}

/* The id of n's target placement, canonical. */
static uint32_t target(Part *p, const IrNode *n)
{
	uint32_t src = n->place;
	if (!src && p->fill)
		src = want_of(p, n->id);
	if (!src && p->fill && (ir_op_flags(n->op) & OPF_LEAF)) {
		Placement t;
		placement_replicated(&t, n->rank);
		canon(p, &t);
		return intern(p, &t);
	}
	return canon_id(p, src);
}

/* Records the node holding n's value: it takes n's name, label and role. */
bool part_finish(Part *p, const IrNode *n, int id)
{
	if (id < 0)
		return false;
	IrNode *x = part_loc_node(p, id);
	x->name = n->name;
	ir_set_label(p->out, x, ir_label(p->m, n));
	x->role = n->role;
	ir_set_choose(p->out, x, ir_choose(p->m, n));
	ir_set_place_loc(p->out, x, ir_place_loc(p->m, n));
	int pf = ir_place_from(p->m, n), lp = ir_link_param(p->m, n);
	if (pf >= 0 && pf < n->id && p->map[pf] != id)
		ir_set_place_from(p->out, x, p->map[pf]);
	/* the param comes first (a leaf before what reads it) */
	ir_set_link(p->out, x, ir_link(p->m, n), lp >= 0 && lp < n->id ? p->map[lp] : -1);
	p->map[n->id] = id;
	p->mplace[n->id] = x->place;
	return true;
}

/* ---- uneven (torch.chunk) shards ----
 * One program serves every rank, so a dim of n rows cut in `parts` is
 * stored as ceil(n / parts) rows on every rank, the rows past n (the tail
 * chunks' padding) zero.  Zero padding is what most ops need of their
 * operands (a matmul contracting over it, a sum over it) and what
 * zero-preserving ops keep; every other op's padded result is masked
 * (pad_mask).  Ops that compare across their rows (max) see their uneven
 * operands gathered whole; a mean over a padded dim, and mse's, is
 * rescaled (partition_rules.c); cross_entropy over uneven positions runs
 * as the vocab-parallel loss's per-position ops (part_xent_vp), the
 * padding positions' losses and gradients masked to zero, and that loss
 * masks its logits' vocab padding to the lowest value so the row max and
 * sum of exp ignore it. */

/* The dims a value of global shape like->shape has padded under pl. */
static uint32_t padded_dims(const Part *p, const IrNode *like, const Placement *pl)
{
	uint32_t u = 0;
	for (int d = 0; d < like->rank && d < pl->ndims; d++) {
		int64_t parts = dim_parts(pl, &p->m->mesh, d);
		if (parts > 1 && like->shape[d] % parts != 0)
			u |= 1u << d;
	}
	return u;
}

/* Local node id holds a shard of a value shaped like `like`, placed pl:
 * its padding set to zero (low: the lowest value), one pad_mask per padded
 * dim.  Returns the masked node, or -1. */
static int mask_padding(Part *p, const IrNode *like, int id, const Placement *pl, bool low)
{
	uint32_t pd = padded_dims(p, like, pl);
	for (int d = 0; id >= 0 && d < like->rank; d++) {
		if (!(pd >> d & 1))
			continue;
		IrAttr at = {.kind = IR_ATTR_COLL, .coll = {.n = 3}};
		at.coll.pad.dim = d;
		at.coll.pad.size = like->shape[d];
		at.coll.pad.low = low;
		for (int k = 0; k < pl->naxes[d]; k++) {
			/* pad_mask numbers shards in mesh order, as the placement
			 * does when its axes are listed in that order */
			if (k && pl->axes[d][k] <= pl->axes[d][k - 1]) {
				diag_error(p->d, like->loc, "partition: %s is split unevenly as %s; "
				           "uneven (torch.chunk) shards over several mesh axes must "
				           "list them in mesh order", like->name ? like->name :
				           ir_op_name(like->op), fmt_pl(p, pl));
				return -1;
			}
			at.coll.axes |= 1u << pl->axes[d][k];
		}
		id = part_emit(p, IR_OP_PAD_MASK, &id, 1, &at, like, pl, id);
	}
	return id;
}

/* Whether local op `op` for n, placed res, leaves zero wherever its
 * operands' padding is (so needs no mask): zero-preserving ops, and add,
 * sub (every operand) and mul (one operand) that have each padded dim
 * rather than broadcast along it (a bias of the padded dim: yes; one
 * added across it: no). */
static bool keeps_zero_padding(const Part *p, const IrNode *n, IrOp op, const Placement *res)
{
	switch (op) {
	case IR_OP_MATMUL: case IR_OP_MATMUL_WGRAD: case IR_OP_SCALE: case IR_OP_NEG: case IR_OP_CAST:
	case IR_OP_RELU: case IR_OP_GELU: case IR_OP_TANH: case IR_OP_SILU:
	case IR_OP_PERMUTE: case IR_OP_RESHAPE: case IR_OP_SUM: case IR_OP_SUM_TO:
	case IR_OP_MEAN: case IR_OP_RELU_BWD: case IR_OP_GELU_BWD: case IR_OP_SILU_BWD:
	case IR_OP_EMBED_BWD_VP: case IR_OP_ROPE:
		return true;
	case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: {
		uint32_t pd = padded_dims(p, n, res);
		for (int d = 0; d < n->rank; d++) {
			int have = 0;
			for (int i = 0; (pd >> d & 1) && i < n->nops; i++) {
				const IrNode *o = p->m->nodes[n->ops[i]];
				int j = d - (n->rank - o->rank);
				have += j >= 0 && o->shape[j] == n->shape[d];
			}
			if ((pd >> d & 1) && (op == IR_OP_MUL ? have == 0 : have < n->nops))
				return false;
		}
		return true;
	}
	default:
		return false;
	}
}

/* Ops that count or compare their rows: their operands' uneven dims are
 * gathered whole first (cross_entropy only where part_xent_vp cannot
 * number the padding: axes out of mesh order).  mse is not one: both its
 * operands' padding is zero, which adds nothing to its sum. */
static bool counts_rows(IrOp op)
{
	return op == IR_OP_CROSS_ENTROPY || op == IR_OP_CROSS_ENTROPY_BWD || op == IR_OP_MAX;
}

/* pl without the splits of the dims it cuts unevenly (of a value shaped
 * like g), from dim `from` to `to`. */
static void drop_uneven(const Part *p, const IrNode *g, Placement *pl, int from, int to)
{
	uint32_t pd = padded_dims(p, g, pl);
	for (int d = from; d < to && d < pl->ndims; d++)
		if (pd >> d & 1) {
			pl->naxes[d] = 0;
			memset(pl->axes[d], 0, sizeof pl->axes[d]);
		}
}

static bool part_leaf(Part *p, const IrNode *n, uint32_t Tid)
{
	const Placement *T = place_of(p, Tid);
	if (n->op == IR_OP_RECV)
		return internal(p, n, "%s is not supported yet (pipeline stages)", "recv");
	Placement t = *T;
	if (n->op == IR_OP_CONST || n->op == IR_OP_LOSS_SCALE)
		placement_replicated(&t, n->rank);
	t.partial = 0;
	t.partial_op = IR_RED_SUM;
	/* uneven: the runtime and the interpreter start the padding at zero */
	return part_finish(p, n, part_emit(p, n->op, NULL, 0, n->attr, n, &t, -1));
}

/* The placement an optimizer step runs in: the step's own when it has
 * one (passes/zero.c splits it over the ZeRO axes), else its param's. */
static Placement step_place(const Part *p, const IrNode *n, const IrNode *param)
{
	Placement P = *ir_place(p->m, n->place ? n : param);
	if (!P.known)
		placement_replicated(&P, param->rank);
	canon(p, &P);
	P.partial = 0;
	P.partial_op = IR_RED_SUM;
	return P;
}

/* adamw_step / sgd_step: on the step's shard (its param's, or a split of
 * a replicated param under ZeRO-1/2); state must be placed as the step (it
 * is updated in place), the gradient is resharded to it.  When the param
 * is stored in another placement than the step's, the step updates a
 * slice of the param and the updated shards, resharded back (all_gather),
 * are assigned to the param. */
static bool part_step(Part *p, const IrNode *n)
{
	IrOptimOps ix;
	if (!ir_optim_ops(n, &ix))
		return internal(p, n, "%s", "operands do not match the attributes");
	const IrNode *param = p->m->nodes[n->ops[ix.p]];
	int pnode = p->map[param->id];
	Placement P = step_place(p, n, param), rep;
	placement_replicated(&rep, 0);
	uint32_t Pid = intern(p, &P), repid = intern(p, &rep);
	int *ops = arena_alloc(&p->scratch, sizeof(int) * (size_t)n->nops);
	if (!ops)
		return false;
	for (int i = 0; i < n->nops; i++) {
		int gid = n->ops[i];
		if (i == ix.norm) {
			ops[i] = operand(p, n, i, repid);
		} else if (i == ix.g || i == ix.p) {
			ops[i] = operand(p, n, i, Pid);
		} else {
			ops[i] = p->map[gid];
			if (part_loc_node(p, ops[i])->place != Pid) {
				return internal(p, n, "%s is placed %s but its param %s is %s",
				                p->m->nodes[gid]->name ? p->m->nodes[gid]->name : "state",
				                fmt_pl(p, ir_place(p->out, part_loc_node(p, ops[i]))),
				                param->name ? param->name : "?", fmt_pl(p, &P));
			}
		}
		if (ops[i] < 0)
			return false;
	}
	int id = part_emit(p, n->op, ops, n->nops, n->attr, n, &P, ops[ix.p]);
	if (id >= 0 && ops[ix.p] != pnode) {
		uint32_t stored = part_loc_node(p, pnode)->place;
		int back = reshard(p, id, n, stored);
		id = back < 0 ? -1 : part_emit(p, IR_OP_ASSIGN, (int[]){pnode, back}, 2, NULL, n,
		                               place_of(p, stored), back);
	}
	return part_finish(p, n, id);
}

/* grad_norm: the local norm of each group of gradients split over the
 * same axes, squared, all_reduced over those axes; the groups summed. */
static bool part_grad_norm(Part *p, const IrNode *n)
{
	int pp = pipeline_axis(p->m);
	int *ops = arena_alloc(&p->scratch, sizeof(int) * (size_t)n->nops);
	uint32_t *split = arena_alloc(&p->scratch, sizeof(uint32_t) * (size_t)n->nops);
	if (!ops || !split)
		return false;
	for (int i = 0; i < n->nops; i++) {
		const IrNode *g = p->m->nodes[n->ops[i]];
		uint32_t w = want_of(p, g->id);
		Placement want;
		if (w) {
			want = *place_of(p, w);
		} else {
			want = *place_of(p, p->mplace[g->id]);
			want.partial = 0;
			want.partial_op = IR_RED_SUM;
		}
		ops[i] = operand(p, n, i, intern(p, &want));
		if (ops[i] < 0)
			return false;
		/* under a pipeline each rank keeps the gradients of its own
		 * stages (passes/pipeline.c): the squares are summed over pp too */
		split[i] = pp >= 0 ? 1u << pp : 0;
		for (int d = 0; d < want.ndims; d++)
			for (int k = 0; k < want.naxes[d]; k++)
				split[i] |= 1u << want.axes[d][k];
	}
	Placement rep;
	placement_replicated(&rep, 0);
	int total = -1;
	bool *done = arena_alloc(&p->scratch, sizeof(bool) * (size_t)n->nops);
	if (!done)
		return false;
	memset(done, 0, sizeof(bool) * (size_t)n->nops);
	int ngroups = 0;
	for (int i = 0; i < n->nops; i++)
		if (!done[i]) {
			ngroups++;
			for (int j = i; j < n->nops; j++)
				done[j] = done[j] || split[j] == split[i];
		}
	if (ngroups == 1 && split[0] == 0)
		return part_finish(p, n, part_emit(p, IR_OP_GRAD_NORM, ops, n->nops, NULL, n, &rep, -1));
	memset(done, 0, sizeof(bool) * (size_t)n->nops);
	int *grp = arena_alloc(&p->scratch, sizeof(int) * (size_t)n->nops);
	if (!grp)
		return false;
	for (int i = 0; i < n->nops; i++) {
		if (done[i])
			continue;
		int ng = 0;
		for (int j = i; j < n->nops; j++)
			if (!done[j] && split[j] == split[i]) {
				grp[ng++] = ops[j];
				done[j] = true;
			}
		int gn = part_emit(p, IR_OP_GRAD_NORM, grp, ng, NULL, n, &rep, -1);
		int sq = gn < 0 ? -1 : part_emit(p, IR_OP_MUL, (int[]){gn, gn}, 2, NULL, n, &rep, gn);
		if (sq >= 0 && split[i]) {
			Placement part = rep;
			part.partial = split[i];
			ir_place_set(p->out, part_loc_node(p, sq), &part);
			IrAttr at = {.kind = IR_ATTR_COLL, .coll = {.axes = split[i], .red = IR_RED_SUM}};
			sq = part_emit(p, IR_OP_ALL_REDUCE, &sq, 1, &at, n, &rep, sq);
		}
		if (sq < 0)
			return false;
		total = total < 0 ? sq : part_emit(p, IR_OP_ADD, (int[]){total, sq}, 2, NULL, n, &rep, sq);
		if (total < 0)
			return false;
	}
	return part_finish(p, n, part_emit(p, IR_OP_SQRT, &total, 1, NULL, n, &rep, total));
}

/* Whether `from` reaches `to` by a reduce_scatter: to splits each dim as
 * from does, then over more axes, all of which from is partial over.
 * With `any`, by a reduction of from's partial of any kind (an all_reduce
 * too, to splitting as from does). */
static bool reduces_to(const Placement *from, const Placement *to, bool any)
{
	if (!from->known || !to->known || from->ndims != to->ndims ||
	    (from->partial_op != IR_RED_SUM && from->partial))
		return false;
	bool more = false;
	for (int d = 0; d < to->ndims; d++) {
		if (from->naxes[d] > to->naxes[d])
			return false;
		for (int k = 0; k < to->naxes[d]; k++) {
			int a = to->axes[d][k];
			if (k < from->naxes[d] ? from->axes[d][k] != a : !(from->partial & (1u << a)))
				return false;
			more = more || k >= from->naxes[d];
		}
	}
	return more || (any && from->partial);
}

/* Whether `to` only adds splits to `from` (a slice, no communication). */
static bool slices_of(const Placement *from, const Placement *to)
{
	if (from->partial || from->ndims != to->ndims)
		return false;
	for (int d = 0; d < from->ndims; d++) {
		if (from->naxes[d] > to->naxes[d])
			return false;
		for (int k = 0; k < from->naxes[d]; k++)
			if (from->axes[d][k] != to->axes[d][k])
				return false;
	}
	return true;
}

/* Whether rule r's operands come without communication: as they are,
 * already made (the reshard cache), or sliced from what they are. */
static bool operands_free(Part *p, const IrNode *n, const PartRule *r, const Placement *cur)
{
	for (int i = 0; i < n->nops; i++) {
		int gid = n->ops[i];
		uint32_t want = intern(p, &r->req[i]);
		bool made = p->mplace[gid] == want;
		for (Cached *c = p->cache[gid]; c && !made; c = c->next)
			made = c->p == want;
		if (!made && !slices_of(&cur[i], &r->req[i]))
			return false;
	}
	return true;
}

/* A gradient split over axes its op leaves it partial over (ZeRO-2/3,
 * passes/zero.c) is computed as the op gives it and reduce_scattered,
 * rather than gathering the activations that make it to compute the
 * split directly.  Not a weight gradient whose operands are at hand as
 * the split needs them (sequence parallelism's dy, gathered for dx
 * already): reduce_scattering that would only add a collective.  A
 * gradient that is a cast (autodiff's, to reduce_dtype: a bf16 bias's sum
 * to f32, matmul_wgrad's f32 to a bf16 reduce_dtype) casts the partial
 * sums and is reduced after, in reduce_dtype, whatever the reduction: as
 * the terms of micro-batches are, so one micro-batch or many reduce in
 * the same dtype. */
static bool grad_natural(Part *p, const IrNode *n, const Placement *T, const Placement *cur,
                         PartRule *r)
{
	if (n->op == IR_OP_MATMUL_WGRAD && operands_free(p, n, r, cur))
		return true;
	PartRule r0 = {.req = arena_alloc(&p->scratch, sizeof *r0.req * (size_t)n->nops)};
	Placement none = {0};
	char why[512];
	if (!r0.req)
		return false;
	if (!part_rule(p->m, n, &none, cur, &r0, why, sizeof why))
		return true;
	Placement from = r0.res;
	canon(p, &from);
	if (reduces_to(&from, T, n->op == IR_OP_CAST))
		*r = r0;
	return true;
}

/* ---- vocab-parallel cross_entropy ---- */

static uint32_t pl_dim_axes(const Placement *pl, int d)
{
	uint32_t u = 0;
	for (int k = 0; d < pl->ndims && k < pl->naxes[d]; k++)
		u |= 1u << pl->axes[d][k];
	return u;
}

/* The axes logits placed `L` split their vocab (last) dim over, when the
 * vocab-parallel path applies: split in group order, nothing partial. */
static uint32_t vocab_axes(const Placement *L, int rank)
{
	if (!L->known || rank < 1 || L->ndims != rank)
		return 0;
	int v = rank - 1;
	for (int k = 1; k < L->naxes[v]; k++)
		if (L->axes[v][k] <= L->axes[v][k - 1])
			return 0;
	return pl_dim_axes(L, v);
}

/* The positions' placement: the logits' without the vocab dim. */
static Placement rows_place(const Placement *L, int rank)
{
	Placement P;
	placement_replicated(&P, rank - 1);
	for (int d = 0; d < rank - 1 && d < IR_MAX_RANK; d++) {
		P.naxes[d] = L->naxes[d];
		memcpy(P.axes[d], L->axes[d], sizeof P.axes[d]);
	}
	return P;
}

/* The memo of logits lg, made empty on first use; NULL: out of memory. */
static CeMemo *ce_memo(Part *p, int lg)
{
	for (int i = 0; i < p->nce; i++)
		if (p->ce[i].lg == lg)
			return &p->ce[i];
	if (p->nce == p->capce) {
		int ncap = p->capce ? 2 * p->capce : 8;
		CeMemo *nc = arena_alloc_raw(&p->scratch, sizeof *nc * (size_t)ncap);
		if (!nc)
			return NULL;
		if (p->nce)
			memcpy(nc, p->ce, sizeof *nc * (size_t)p->nce);
		p->ce = nc;
		p->capce = ncap;
	}
	p->ce[p->nce] = (CeMemo){.lg = lg, .mx = -1, .se = -1, .lm = -1};
	return &p->ce[p->nce++];
}

/* Row max (all_reduce max) and sum of exp(logits - max) (all_reduce sum)
 * of vocab-split logits lid (global lg), over axes A; cached per logits.
 * Both are f32 whatever the logits' dtype, as cross_entropy's kernel keeps
 * them on one device (and Megatron's vocab-parallel loss in fp32): the
 * local max of bf16 logits is exact, so it is cast to f32 before its
 * all_reduce; ce_sumexp sums in f32 and stores f32. */
static bool ce_stats(Part *p, const IrNode *n, const IrNode *lg, const IrNode *tg, int lid,
                     uint32_t A, const Placement *P, int *mx, int *se)
{
	CeMemo *cm = ce_memo(p, lg->id);
	if (!cm)
		return false;
	if (cm->mx >= 0) {
		*mx = cm->mx;
		*se = cm->se;
		return true;
	}
	IrNode rows = *tg;
	rows.dtype = IR_F32;
	rows.loc = n->loc;
	Placement part = *P;
	part.partial = A;
	part.partial_op = IR_RED_MAX;
	IrAttr red = {.kind = IR_ATTR_AXES, .axes = {.n = 1, .axes = {lg->rank - 1}}};
	IrAttr armax = {.kind = IR_ATTR_COLL, .coll = {.axes = A, .red = IR_RED_MAX}};
	IrAttr arsum = {.kind = IR_ATTR_COLL, .coll = {.axes = A, .red = IR_RED_SUM}};
	if (!A) /* the vocab whole here (its rows split unevenly): nothing to reduce */
		part = *P;
	int m0 = part_emit(p, IR_OP_MAX, &lid, 1, &red, &rows, &part, lid);
	if (m0 >= 0 && part_loc_node(p, m0)->dtype != IR_F32)
		m0 = part_emit(p, IR_OP_CAST, &m0, 1, NULL, &rows, &part, m0);
	*mx = m0 < 0 || !A ? m0 : part_emit(p, IR_OP_ALL_REDUCE, &m0, 1, &armax, &rows, P, m0);
	if (*mx < 0)
		return false;
	part.partial_op = IR_RED_SUM;
	int s0 = part_emit(p, IR_OP_CE_SUMEXP, (int[]){lid, *mx}, 2, NULL, &rows, &part, lid);
	*se = s0 < 0 || !A ? s0 : part_emit(p, IR_OP_ALL_REDUCE, &s0, 1, &arsum, &rows, P, s0);
	if (*se < 0)
		return false;
	cm->mx = *mx;
	cm->se = *se;
	return true;
}

/* Resolves local id (placed res) to n's target, as part_node does. */
static bool finish_target(Part *p, const IrNode *n, int id, const Placement *res)
{
	Placement t = *place_of(p, target(p, n));
	if (!t.known || (p->fill && n->role == IR_ROLE_LOSS && !n->place)) {
		t = *res;
		if (n->role == IR_ROLE_LOSS)
			t.partial = 0;
	}
	t.partial &= res->partial;
	t.partial_op = t.partial ? res->partial_op : IR_RED_SUM;
	return part_finish(p, n, reshard(p, id, n, intern(p, &t)));
}

/* Whether each dim of pl that `like` pads lists its axes in mesh order
 * (what pad_mask numbers shards by). */
static bool padding_in_order(const Part *p, const IrNode *like, const Placement *pl)
{
	uint32_t pd = padded_dims(p, like, pl);
	for (int d = 0; d < like->rank && d < pl->ndims; d++)
		for (int k = 1; (pd >> d & 1) && k < pl->naxes[d]; k++)
			if (pl->axes[d][k] <= pl->axes[d][k - 1])
				return false;
	return true;
}

/* cross_entropy_bwd's local dl operand (local id dl) times s, the 1 /
 * positions' group size its result would be multiplied by: the op is
 * linear in dl, and a 16-bit result is then rounded once, as on one
 * device, not once by the op and again by the scale (PartRule.scale_dl). */
static int scale_dl(Part *p, const IrNode *n, int dl, double s)
{
	if (dl < 0 || s == 0 || s == 1)
		return dl;
	IrAttr sc = {.kind = IR_ATTR_SCALAR, .scalar = {s}};
	return part_emit(p, IR_OP_SCALE, &dl, 1, &sc, p->m->nodes[n->ops[0]],
	                 ir_place(p->out, part_loc_node(p, dl)), dl);
}

/* cross_entropy / cross_entropy_bwd with logits split on the vocab dim
 * (Megatron's vocab-parallel loss; the logits are never gathered): the
 * row max and the sum of exp(logits - max) are all_reduced over the vocab
 * axes, and so is the target's logit, picked where the target falls;
 * loss = mean(log(sum) + max - target logit), a local mean over the
 * positions here scaled by (local positions) / (all positions), partial
 * over their axes; the backward is local, (softmax - onehot) on the shard
 * from the forward's statistics.  The same ops, with nothing to reduce,
 * where the vocab is whole but the positions are split unevenly (a batch
 * or sequence the ranks do not divide): the padding positions' losses and
 * gradients are masked to zero, so the logits stay split instead of being
 * gathered whole for the fused op.  *done = false: neither, the generic
 * rule applies. */
static bool part_xent_vp(Part *p, const IrNode *n, bool *done)
{
	bool bwd = n->op == IR_OP_CROSS_ENTROPY_BWD;
	const IrNode *lg = p->m->nodes[n->ops[bwd ? 1 : 0]];
	const IrNode *tg = p->m->nodes[n->ops[bwd ? 2 : 1]];
	Placement L = *place_of(p, p->mplace[lg->id]);
	canon(p, &L);
	L.partial = 0;
	L.partial_op = IR_RED_SUM;
	/* uneven positions whose padding pad_mask cannot number: gathered */
	if (!padding_in_order(p, lg, &L))
		drop_uneven(p, lg, &L, 0, lg->rank - 1);
	uint32_t A = vocab_axes(&L, lg->rank);
	uint32_t padrows = padded_dims(p, lg, &L) & ((1u << (lg->rank - 1)) - 1);
	*done = false;
	if (!A && !padrows)
		return true;
	*done = true;
	Placement P = rows_place(&L, lg->rank), rep;
	placement_replicated(&rep, 0);
	uint32_t pos = 0;
	for (int d = 0; d < P.ndims; d++)
		pos |= pl_dim_axes(&P, d);
	uint32_t Lid = intern(p, &L);
	int lid = reshard(p, p->map[lg->id], lg, Lid);
	/* an uneven vocab's padding at the lowest value: exp() makes it 0
	 * (padding positions need no fill: their losses are masked) */
	CeMemo *cm = ce_memo(p, lg->id);
	if (!cm)
		return false;
	if (lid >= 0 && cm->lm >= 0 && part_loc_node(p, cm->lm)->place == Lid)
		lid = cm->lm;
	else if (lid >= 0 && A && (lid = mask_padding(p, lg, lid, &L, true)) >= 0)
		cm->lm = lid;
	int tid = lid < 0 ? -1 : operand(p, n, bwd ? 2 : 1, intern(p, &P));
	int mx, se;
	if (tid < 0 || !ce_stats(p, n, lg, tg, lid, A, &P, &mx, &se))
		return false;
	IrAttr vp = {.kind = IR_ATTR_COLL, .coll = {.axes = A}};
	/* local positions (padding included) over all of them: 1 / (their
	 * group size) where they split evenly */
	double scale = pos ? part_positions_scale(&p->m->mesh, &P, tg, tg->rank) : 0;
	if (bwd) {
		int dl = scale_dl(p, n, operand(p, n, 0, intern(p, &rep)), scale);
		int id = dl < 0 ? -1 : part_emit(p, IR_OP_CE_BWD_VP, (int[]){dl, lid, tid, mx, se},
		                                 5, &vp, n, &L, lid);
		if (id >= 0 && padrows) /* the padding positions' gradient: 0 */
			id = mask_padding(p, lg, id, &L, false);
		return id >= 0 && finish_target(p, n, id, &L);
	}
	/* the target logit and everything after it in f32: the loss, and
	 * its all_reduce over the positions' axes, are one device's f32 */
	IrNode rows = *tg;
	rows.dtype = IR_F32;
	rows.loc = n->loc;
	Placement part = P;
	part.partial = A;
	int t0 = part_emit(p, IR_OP_CE_TARGET, (int[]){lid, tid}, 2, &vp, &rows, &part, lid);
	IrAttr arsum = {.kind = IR_ATTR_COLL, .coll = {.axes = A, .red = IR_RED_SUM}};
	int tl = t0 < 0 || !A ? t0 : part_emit(p, IR_OP_ALL_REDUCE, &t0, 1, &arsum, &rows, &P, t0);
	int ls = tl < 0 ? -1 : part_emit(p, IR_OP_LOG, &se, 1, NULL, &rows, &P, se);
	int a = ls < 0 ? -1 : part_emit(p, IR_OP_ADD, (int[]){ls, mx}, 2, NULL, &rows, &P, ls);
	int b = a < 0 ? -1 : part_emit(p, IR_OP_SUB, (int[]){a, tl}, 2, NULL, &rows, &P, a);
	if (b >= 0 && padrows) /* the padding positions' losses: 0 */
		b = mask_padding(p, &rows, b, &P, false);
	IrAttr all = {.kind = IR_ATTR_AXES, .axes = {.n = tg->rank}};
	for (int d = 0; d < tg->rank && d < IR_MAX_INTS; d++)
		all.axes.axes[d] = d;
	Placement res = rep;
	res.partial = pos;
	int id = b < 0 ? -1 : part_emit(p, IR_OP_MEAN, &b, 1, &all, n, &res, b);
	if (id >= 0 && scale != 0) {
		IrAttr sc = {.kind = IR_ATTR_SCALAR, .scalar = {scale}};
		id = part_emit(p, IR_OP_SCALE, &id, 1, &sc, n, &res, id);
	}
	return id >= 0 && finish_target(p, n, id, &res);
}

bool part_node(Part *p, const IrNode *n)
{
	uint32_t Tid = target(p, n);
	Placement T = *place_of(p, Tid);
	if (!T.known && !p->fill)
		return internal(p, n, "%s", "its placement is not known (run propagate first)");
	if (ir_op_flags(n->op) & OPF_LEAF)
		return part_leaf(p, n, Tid);
	if (ir_op_flags(n->op) & OPF_COLL || n->op == IR_OP_SHARD_SLICE)
		return internal(p, n, "%s", "explicit collectives before partition are not supported");
	if (n->op == IR_OP_ADAMW_STEP || n->op == IR_OP_SGD_STEP)
		return part_step(p, n);
	if (n->op == IR_OP_GRAD_NORM)
		return part_grad_norm(p, n);
	if (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_BWD) {
		bool done;
		if (!part_xent_vp(p, n, &done))
			return false;
		if (done)
			return true;
	}

	/* on the stack for the usual few operands (the scratch arena is never
	 * reset during the pass, so it would grow by this per node); the rule
	 * sets every field of r but req, which starts zeroed as it did */
	enum { FEW = 8 };
	Placement cur_few[FEW], req_few[FEW];
	int ops_few[FEW];
	bool few = n->nops <= FEW;
	size_t np = (size_t)n->nops;
	Placement *cur = few ? cur_few : arena_alloc_raw(&p->scratch, sizeof *cur * np);
	PartRule r;
	r.req = few ? req_few : arena_alloc_raw(&p->scratch, sizeof *r.req * np);
	int *ops = few ? ops_few : arena_alloc_raw(&p->scratch, sizeof *ops * np);
	if (!cur || !r.req || !ops)
		return false;
	if (np)
		memset(r.req, 0, sizeof *r.req * np);
	Placement Tr = T; /* what the rule reads: T, or T gathered (counts_rows) */
	for (int i = 0; i < n->nops; i++) {
		cur[i] = *place_of(p, p->mplace[n->ops[i]]);
		if (counts_rows(n->op))
			drop_uneven(p, p->m->nodes[n->ops[i]], &cur[i], 0, IR_MAX_RANK);
	}
	if (counts_rows(n->op) && Tr.known)
		drop_uneven(p, n, &Tr, 0, IR_MAX_RANK);
	char why[512];
	if (!part_rule(p->m, n, &Tr, cur, &r, why, sizeof why)) {
		if (!r.user)
			return internal(p, n, "%s", why);
		diag_error(p->d, n->loc, "%s", why);
		return false;
	}
	if (n->role == IR_ROLE_GRAD && Tr.known && !grad_natural(p, n, &Tr, cur, &r))
		return false;
	for (int i = 0; i < n->nops; i++)
		if ((ops[i] = operand(p, n, i, intern(p, &r.req[i]))) < 0)
			return false;
	if (r.scale_dl) {
		if ((ops[0] = scale_dl(p, n, ops[0], r.scale)) < 0)
			return false;
		r.scale = 0;
	}
	int id = r.at.kind == IR_ATTR_ATTN && r.at.attn.ring ?
	                 part_ring(p, n, ops, &r) :
	                 part_emit(p, r.op ? r.op : n->op, ops, n->nops, &r.at, n, &r.res,
	                           n->nops ? ops[0] : -1);
	if (id >= 0 && r.scale != 0) {
		IrAttr sc = {.kind = IR_ATTR_SCALAR, .scalar = {r.scale}};
		id = part_emit(p, IR_OP_SCALE, &id, 1, &sc, n, &r.res, id);
	}
	if (id >= 0 && !keeps_zero_padding(p, n, r.op ? r.op : n->op, &r.res))
		id = mask_padding(p, n, id, &r.res, false);
	if (id < 0)
		return false;
	/* to the target, less any partial the op did not produce */
	Placement t = T;
	if (!t.known || (p->fill && n->role == IR_ROLE_LOSS && !n->place)) {
		t = r.res;
		if (n->role == IR_ROLE_LOSS)
			t.partial = 0;
	}
	t.partial &= r.res.partial;
	t.partial_op = t.partial ? r.res.partial_op : IR_RED_SUM;
	return part_finish(p, n, reshard(p, id, n, intern(p, &t)));
}

/* The param placement each gradient and optimizer state is wanted in. */
static bool find_wants(Part *p)
{
	for (int i = 0; i < p->m->nnodes; i++) {
		const IrNode *n = p->m->nodes[i];
		IrOptimOps ix;
		if ((n->op != IR_OP_ADAMW_STEP && n->op != IR_OP_SGD_STEP) || !ir_optim_ops(n, &ix))
			continue;
		if (p->nwants == p->capwants) {
			int ncap = p->capwants ? 2 * p->capwants : 64;
			uint32_t *nw = arena_alloc_raw(&p->scratch, sizeof *nw * (size_t)ncap);
			if (!nw)
				return false;
			if (p->nwants)
				memcpy(nw, p->wants, sizeof *nw * (size_t)p->nwants);
			p->wants = nw;
			p->capwants = ncap;
		}
		Placement w = step_place(p, n, p->m->nodes[n->ops[ix.p]]);
		p->wants[p->nwants] = intern(p, &w);
		for (int k = 0; k < n->nops; k++)
			if (k != ix.norm && k != ix.p)
				p->wantix[n->ops[k]] = p->nwants;
		p->nwants++;
	}
	return true;
}

/* Partitions global node n: replayed by the twins seam when it can, else
 * the normal way, which the seam records. */
static bool part_one(Part *p, const IrNode *n)
{
	switch (twin_replay(p->tw, p, n)) {
	case TWIN_DONE:
		return true;
	case TWIN_FAILED:
		return false;
	case TWIN_MISS:
		break;
	}
	if (!part_node(p, n))
		return false;
	twin_record(p->tw, p, n);
	return true;
}

bool pass_partition_ex(IrModule *m, Diag *d, bool fill_unknown)
{
	return pass_partition_replay(m, d, fill_unknown, !fill_unknown, NULL);
}

/* The sparse all_to_all (ir.h, IrAttrColl a2a.rows): an all_to_all of
 * routed tokens moves only the used rows of each expert's capacity
 * (runtime/comm.c, comm_all_to_all_rows).  Routed: a dispatch (a gather
 * by moe_token), a combine's gradient (a scatter_add by moe_slot), another
 * routed all_to_all, and what ops that keep an empty row empty make of
 * them (reshape, permute, a matmul's rows, products, silu, all_reduce;
 * sums of routed values).  The rows dim is the one before the last (the
 * capacity of [experts, groups, C, d]).  A hint: the runtime moves the
 * same values either way, and a dense row costs a scan. */
static bool routed_index(const IrModule *m, int id, IrOp want)
{
	while (m->nodes[id]->op == IR_OP_RESHAPE)
		id = m->nodes[id]->ops[0];
	return m->nodes[id]->op == want;
}

static void mark_sparse_a2a(IrModule *m)
{
	bool *routed = calloc((size_t)(m->nnodes ? m->nnodes : 1), sizeof *routed);
	if (!routed)
		return; /* the dense form, which is always right */
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		bool r = false, all = n->nops > 0;
		switch (n->op) {
		case IR_OP_GATHER:
			r = routed_index(m, n->ops[1], IR_OP_MOE_TOKEN) || routed[n->ops[0]];
			break;
		case IR_OP_SCATTER_ADD:
			r = routed_index(m, n->ops[1], IR_OP_MOE_SLOT);
			break;
		case IR_OP_RESHAPE: case IR_OP_PERMUTE: case IR_OP_SILU: case IR_OP_GELU:
		case IR_OP_RELU: case IR_OP_CAST: case IR_OP_SCALE: case IR_OP_NEG:
		case IR_OP_ALL_REDUCE: case IR_OP_MATMUL:
			r = routed[n->ops[0]];
			break;
		case IR_OP_MUL: case IR_OP_SILU_BWD: case IR_OP_GELU_BWD: case IR_OP_RELU_BWD:
			for (int k = 0; k < n->nops; k++)
				r |= routed[n->ops[k]];
			break;
		case IR_OP_ADD:
			for (int k = 0; k < n->nops; k++)
				all &= routed[n->ops[k]];
			r = all;
			break;
		case IR_OP_ALL_TO_ALL: {
			const IrAttrColl *c = ir_attr_coll(n);
			int v = n->rank - 2;
			r = routed[n->ops[0]];
			if (r && c->n >= 2 && v > c->args[0] && v > c->args[1]) {
				IrAttrColl *w = &ir_attr_mut(m, n, IR_ATTR_COLL)->coll;
				w->n = 3;
				w->args[2] = v;
			}
			break;
		}
		default:
			break;
		}
		routed[i] = r;
	}
	free(routed);
}

bool pass_partition_replay(IrModule *m, Diag *d, bool fill_unknown, bool replay, int *replays)
{
	if (replays)
		*replays = 0;
	if (mesh_size(&m->mesh) <= 1)
		return true;
	Part p = {.m = m, .out = ir_module_derive(m), .d = d, .fill = fill_unknown};
	arena_init(&p.scratch);
	for (int a = 0; a < m->mesh.naxes && a < IR_MAX_AXES; a++)
		if (m->mesh.sizes[a] > 1)
			p.live |= 1u << a;
	size_t nn = (size_t)(m->nnodes ? m->nnodes : 1);
	/* map is written (finish) before it is read: nodes come in order and
	 * operands before their users */
	p.map = arena_alloc_raw(&p.scratch, nn * sizeof *p.map);
	p.mplace = arena_alloc_raw(&p.scratch, nn * sizeof *p.mplace);
	p.wantix = arena_alloc_raw(&p.scratch, nn * sizeof *p.wantix);
	p.cache = arena_alloc(&p.scratch, nn * sizeof *p.cache);
	/* fill_unknown decides placements as it goes, which a twin's class
	 * (computed from the global placements) cannot see */
	bool twins = replay && !fill_unknown;
	if (twins)
		p.tw = twin_new(m->nnodes);
	bool ok = p.out && p.map && p.mplace && p.wantix && p.cache && (p.tw || !twins);
	/* room for the local nodes up front: some 1.2 per global one, and
	 * growing by doubling would copy the array a dozen times */
	size_t cap = nn + nn / 2 + 64;
	if (cap > IR_MAX_NODES)
		cap = IR_MAX_NODES;
	if (ok && (p.out->nodes = arena_alloc_raw(m->arena, cap * sizeof *p.out->nodes)))
		p.out->cap = (int)cap;
	if (ok) {
		memset(p.wantix, 0xff, nn * sizeof *p.wantix);
		ok = find_wants(&p);
	}
	if (!ok)
		diag_error(d, (SrcLoc){0}, "partition: out of memory");
	for (int i = 0; ok && i < m->nnodes; i++)
		ok = part_one(&p, m->nodes[i]);
	if (ok) {
		m->loss = m->loss >= 0 ? p.map[m->loss] : -1;
		for (int c = 0; c < m->nchooses; c++)
			m->chooses[c].node = p.map[m->chooses[c].node];
		ir_module_take_nodes(m, p.out);
		mark_sparse_a2a(m);
	}
	if (replays)
		*replays = twin_replays(p.tw);
	twin_free(p.tw);
	arena_free(&p.scratch);
	return ok;
}

/* Is some attention's sequence (dim 1 of its [B, T, D] result) split over
 * mesh axes of more than one rank?  *any: does the module have attention
 * at all.  Read off the placements propagate gave, before partition. */
static bool attention_seq_split(const IrModule *m, bool *any)
{
	*any = false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ATTENTION)
			continue;
		*any = true;
		const Placement *p = ir_place(m, n);
		if (!p->known || p->ndims < 2)
			continue;
		uint32_t seq = 0;
		for (int k = 0; k < p->naxes[1]; k++)
			seq |= 1u << p->axes[1][k];
		if (mesh_axes_size(&m->mesh, seq) > 1)
			return true;
	}
	return false;
}

/* context_parallel ulysses or ring acts only on an attention whose
 * sequence is split (partition_rules.c's attention_rule); elsewhere it
 * does nothing, which a user who set it would not expect. */
static void warn_idle_cp(const IrModule *m, Diag *d)
{
	IrContextParallel mode = m->train.context_parallel;
	bool any;
	if (mode == IR_CP_NONE || attention_seq_split(m, &any))
		return;
	const char *w = ir_train_word(IR_TRAIN_CONTEXT_PARALLEL, mode);
	SrcLoc at = m->train.loc[IR_TRAIN_CONTEXT_PARALLEL];
	if (!any) {
		diag_warning(d, at, "context_parallel %s has no effect: the model has no attention",
		             w);
		return;
	}
	diag_warning(d, at,
	             "context_parallel %s has no effect: no attention's sequence is split over a "
	             "mesh axis of more than one rank (place the inputs' sequence dim over a mesh "
	             "axis, as `input tokens : i32[batch, ctx] @ [dp, cp]`, and give the axis "
	             "ranks: --mesh cp=2)",
	             w);
}

bool pass_partition(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	warn_idle_cp(m, d);
	return pass_partition_ex(m, d, false);
}
