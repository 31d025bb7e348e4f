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
 * its placement from producers first and its users refine it.  A choice
 * depends only on the placements around the node and on its op and
 * shapes, which repeat from layer to layer and micro-batch to micro-batch:
 * choices and users' requirements are memoised on those, behind the memo
 * seam (propagate_memo.c: memo_choose, memo_requirement), so each
 * distinct context is worked out once.
 *
 * Partials resolve at their users: a node keeps the partial its op
 * produces (the row-parallel matmul's partial(tp)), and every user needs a
 * non-partial operand, so partition reduces on that edge (all_reduce, or
 * reduce_scatter when the user wants the value split) -- except the linear
 * ops add, sub, neg, scale, dropout (every rank holding a partial draws
 * the same mask), cast (a gradient term cast to reduce_dtype, autodiff.c,
 * is reduced in it), permute and reshape, through which operands partial
 * (sum) over the same axes pass the partial on (gradient contributions add
 * up, and a weight gradient is transposed, before one reduction).  Three
 * kinds of node are resolved at the node itself, their placement never partial:
 * scalars (the loss, grad_norm: replicated), a param's gradient grad.P
 * (P's placement: the DP all_reduce or ZeRO reduce_scatter follows the op
 * that makes it) and optimizer steps and state (their param's).  Mesh axes
 * of size 1 are dropped everywhere, user annotations included, so a
 * single-device mesh leaves every value replicated.
 */
#include "passes/propagate_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PR_MAXSRC 32 /* merge sources per node */
#define PR_SWEEPS 8

enum { K_FREE, K_USER, K_TIED, K_SCALAR };

typedef struct Prop {
	IrModule *m;
	Arena *ar;
	/* [nnodes]: the node's signature: nodes with equal ones have equal
	 * rules and read equal shapes and bytes (see sig_key) */
	int *sig;
	Rule *rules; /* [signatures] */
	int nsig;
	int *shape; /* [nnodes]: build_sigs' scratch */
	int *kbuf;  /* room for the longest signature key */
	/* the memo seam (propagate_memo.c), off with pass_propagate_memo's
	 * memo false; the pass reads nothing of it, only asks and tells it */
	PropMemo *memo;
	/* choose()'s question to the memo: its users' requirements as
	 * placement ids, -1: none */
	int *req_id;
	uint8_t *kind; /* [nnodes] */
	int *tie;      /* [nnodes]: K_TIED: the param whose placement it takes */
	int *ostart;   /* [nnodes + 1]: operands of node i are opv[ostart[i] ..) */
	int *opv;
	int *ustart;   /* [nnodes + 1]: uses of node i are uses[ustart[i] ..) */
	Use *uses;
	uint32_t live; /* mesh axes of size > 1 */
	/* [nnodes]: something choose() reads changed since the node's last
	 * visit (see visit): the node, its operands or users (dirty), or an
	 * operand of a user: that user's opchange stamp is later than the
	 * node's visit stamp.  Stamps, not marks on every operand of the user,
	 * so a user of n operands (the grad norm over every grad) costs O(1)
	 * per change, not O(n): propagation stays linear in the program. */
	uint8_t *dirty;
	unsigned *opchange, *visited;
	unsigned clock;
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

/* Node id's placement, and its id (0: not decided yet). */
static const Placement *pl(const Prop *P, int id)
{
	return ir_place(P->m, P->m->nodes[id]);
}

static int pid(const Prop *P, int id)
{
	return (int)P->m->nodes[id]->place;
}

static const Rule *rule_of(const Prop *P, int id)
{
	return &P->rules[P->sig[id]];
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

/* The module's id of p, or -1 when out of memory.  The memo's contexts
 * are made of these (propagate_memo.c): the module's own interning, none
 * of the pass's. */
static int place_id(Prop *P, const Placement *p)
{
	uint32_t id = ir_place_intern(P->m, p);
	return id || !p->known ? (int)id : -1;
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
	/* the same placement costs 0 below: every axis stays, nothing is
	 * reduced, sliced or gathered */
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

/* ---- signatures ---- */

/* v as one int when it fits in 30 bits, else a marker and two. */
static int put_i64(int *k, int n, int64_t v)
{
	if (v >= 0 && v < (1 << 30)) {
		k[n++] = (int)v;
	} else {
		k[n++] = -1;
		k[n++] = (int)(uint32_t)v;
		k[n++] = (int)(uint32_t)((uint64_t)v >> 32);
	}
	return n;
}

/* The longest sig_key of a node with nops operands. */
static size_t sig_key_len(int nops)
{
	return (size_t)(3 + 3 * IR_ATTR_WORDS + 3 * IR_MAX_RANK + nops);
}

/* Everything rule_build, repair and cand_cost read of node n but
 * placements: its op, attributes and kind, and the dtypes and shapes of
 * it and its operands (as shape ids, P->sig holding them when this
 * runs). */
static int sig_key(const Prop *P, const IrNode *n, int *k)
{
	int len = 0;
	bool resolved = P->kind[n->id] == K_TIED || P->kind[n->id] == K_SCALAR;
	k[len++] = (int)n->op * 2 + resolved;
	k[len++] = n->nops;
	int64_t w[IR_ATTR_WORDS];
	int nw = ir_attr_words(n, w);
	for (int i = 0; i < nw; i++)
		len = put_i64(k, len, w[i]);
	k[len++] = P->sig[n->id];
	for (int i = 0; i < n->nops; i++)
		k[len++] = P->sig[n->ops[i]];
	return len;
}

/* Gives every node its signature, and every signature its rule: first
 * every node's dtype and shape an id (in P->sig), then (in node order, an
 * operand's shape id read before it is replaced) the signature. */
static bool build_sigs(Prop *P)
{
	IrModule *m = P->m;
	PropTab shapes = {0}, sigs = {0};
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int *k = P->kbuf, len = 0;
		k[len++] = (int)n->dtype;
		k[len++] = n->rank;
		for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++)
			len = put_i64(k, len, n->shape[d]);
		bool found;
		PropTabEnt *e = prop_tab_get(P->ar, &shapes, k, len, &found);
		if (!e)
			return false;
		if (!found)
			e->val = shapes.n - 1;
		P->sig[i] = e->val;
		P->bytes[i] = node_bytes(n);
	}
	/* the signatures go to P->sig while sig_key reads the shape ids from
	 * a copy */
	int *shape = P->shape;
	memcpy(shape, P->sig, sizeof(int) * (size_t)m->nnodes);
	int *save = P->sig;
	P->sig = shape;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int len = sig_key(P, n, P->kbuf);
		bool found;
		PropTabEnt *e = prop_tab_get(P->ar, &sigs, P->kbuf, len, &found);
		if (!e) {
			P->sig = save;
			return false;
		}
		if (!found) {
			e->val = P->nsig++;
			prop_rule_build(P->m, n, &P->rules[e->val]);
		}
		save[i] = e->val;
	}
	P->sig = save;
	return true;
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
		const Placement *q = pl(P, n->ops[i]);
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
		*out = *pl(P, cn->ops[0]);
		out->partial = 0;
		return out->known;
	}
	const Rule *r = rule_of(P, c);
	if (!r->ok || slot >= r->nops)
		return false;
	const Placement *cp = ir_place(P->m, cn);
	if (!cp->known)
		return false; /* c's own turn decides */
	/* c's placement fixes the factors it shows; a contracted one may
	 * take the axes c is partial over (any, when c resolves its partial
	 * itself) from c's operands, this one last */
	Assign a, s;
	bool resolved = resolved_kind(P, c);
	prop_assign_from(r, -1, cp, &a);
	uint32_t allow = resolved ? ~0u : cp->partial;
	for (int k = 0; k <= r->nops; k++) {
		int i = k < r->nops ? r->order[k] : slot;
		const Placement *q = pl(P, cn->ops[i]);
		if ((k < r->nops && i == slot) || !q->known)
			continue;
		prop_assign_from(r, i, q, &s);
		prop_merge(r, &a, &s, true, allow);
	}
	if (r->linear) {
		bool all;
		a.partial = resolved ? common_partial(P, cn, slot, &all) : cp->partial;
		/* a cast that resolves its own partial (a gradient's to
		 * reduce_dtype, autodiff.c) reduces after it, in its dtype:
		 * the operand may stay partial (partition.c, grad_natural) */
		const Placement *q = pl(P, cn->ops[slot]);
		if (resolved && cn->op == IR_OP_CAST && q->known && q->partial_op == IR_RED_SUM)
			a.partial = q->partial;
	}
	prop_project(r, &a, slot, o->rank, false, out);
	return true;
}

/* ---- choosing a node's placement ---- */

/* Operand and user edges of n placed by candidate a; *res gets n's
 * placement. */
static double cand_cost(const Prop *P, const IrNode *n, const Assign *a, Placement *res)
{
	const Rule *r = rule_of(P, n->id);
	const Mesh *mesh = &P->m->mesh;
	prop_project(r, a, -1, n->rank, false, res);
	double cost = 0;
	for (int i = 0; i < r->nops; i++) {
		const IrNode *o = nd(P, n->ops[i]);
		const Placement *op = ir_place(P->m, o);
		if (!op->known)
			continue;
		Placement q;
		prop_project(r, a, i, o->rank, false, &q);
		cost += pass_propagate_cost(mesh, op, &q, nbytes(P, o->id));
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

/* n's placement becomes id's. */
static void set_place(Prop *P, IrNode *n, uint32_t id, int from, SrcLoc loc)
{
	n->place = id;
	ir_set_place_from(P->m, n, from);
	ir_set_place_loc(P->m, n, from >= 0 ? (SrcLoc){0} : loc);
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

/* choose() for node n, its users' requirements in P->has_req / P->req:
 * the placement of least cost in *best, and the index in its list of
 * sources of the one it is from (-1: the first known operand). */
static int choose_eval(Prop *P, const IrNode *n, Placement *best_p)
{
	const Rule *r = rule_of(P, n->id);
	Assign src[PR_MAXSRC];
	int ns = 0;
	for (int k = 0; k < r->nops && ns < PR_MAXSRC; k++) {
		const Placement *op = pl(P, n->ops[r->order[k]]);
		if (!op->known)
			continue;
		prop_assign_from(r, r->order[k], op, &src[ns++]);
	}
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1] && ns < PR_MAXSRC;
	     u++, k++) {
		if (!P->has_req[k])
			continue;
		prop_assign_from(r, -1, &P->req[k], &src[ns++]);
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
	const Placement *np = ir_place(P->m, n);
	bool have = np->known;
	double best = INFINITY;
	int best_from = -1;
	if (have) {
		Assign cur;
		prop_assign_from(r, -1, np, &cur);
		for (int s = 0; s < ns; s++)
			prop_merge(r, &cur, &src[s], true, np->partial);
		cur.partial = lp;
		cur.used |= lp;
		best = cand_cost(P, n, &cur, best_p);
		if (ir_places_find(P->m->places, best_p) != n->place)
			best = INFINITY; /* the old one is not reachable any more */
	}
	Assign seen[2 * PR_MAXSRC + 2];
	int nseen = 0;
	for (int c = 0; c <= 2 * ns + 1; c++) {
		Assign a;
		prop_assign_clear(&a);
		a.partial = lp;
		a.used = lp;
		int origin = -1, lead = c > ns ? c - ns - 1 : c - 1;
		if (c <= 2 * ns) {
			if (lead >= 0 && prop_merge(r, &a, &src[lead], false, 0))
				origin = lead;
			for (int f = 0; c > ns && f < r->nf; f++)
				a.lock[f] = src[lead].cover[f] && !a.n[f];
			if (c > ns && origin < 0)
				origin = lead;
			for (int s = 0; s < ns; s++)
				if (s != lead && prop_merge(r, &a, &src[s], false, 0) && origin < 0)
					origin = s;
		}
		prop_repair(P->m, n, r, &a);
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
			*best_p = p;
			best_from = origin;
			have = true;
		}
	}
	return best_from;
}

/* set_place, telling the memo (without it, memoising stops); id: the
 * placement's id. */
static void place_node(Prop *P, IrNode *n, uint32_t id, int from, SrcLoc loc)
{
	uint32_t old = n->place;
	set_place(P, n, id, from, loc);
	if (id != old)
		memo_placed(P->memo, n->id);
}

/* What the user of use u needs its operand in, as a placement id in *req
 * (-1: nothing): the memo's answer, else requirement() told to it.
 * False: out of memory, the memo is off. */
static bool req_id(Prop *P, int u, int *req)
{
	int c = P->uses[u].node;
	if (!pid(P, c) && rule_of(P, c)->ok) {
		*req = -1; /* requirement(): c's own turn decides */
		return true;
	}
	switch (memo_requirement(P->memo, u, req)) {
	case MEMO_HIT:
		return true;
	case MEMO_OFF:
		return false;
	case MEMO_MISS:
		break;
	}
	Placement q;
	*req = -1;
	if (requirement(P, c, P->uses[u].slot, &q) && (*req = place_id(P, &q)) < 0) {
		memo_off(P->memo);
		return false;
	}
	memo_requirement_keep(P->memo, u, *req);
	return true;
}

/* The node source s of choose_eval's list is from (its users'
 * requirements in P->has_req); s < 0: the first known operand (or -1). */
static int src_origin(const Prop *P, const IrNode *n, int s)
{
	const Rule *r = rule_of(P, n->id);
	int ns = 0;
	for (int k = 0; k < r->nops && ns < PR_MAXSRC; k++) {
		int o = P->opv[P->ostart[n->id] + r->order[k]];
		if (!pid(P, o))
			continue;
		if (s < 0 || ns == s)
			return o;
		ns++;
	}
	if (s < 0)
		return -1;
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1] && ns < PR_MAXSRC;
	     u++, k++) {
		if (!P->has_req[k])
			continue;
		if (ns == s)
			return P->uses[u].node;
		ns++;
	}
	return -1;
}

/* Re-chooses free node n's placement without the memo. */
static bool choose_direct(Prop *P, IrNode *n)
{
	for (int u = P->ustart[n->id], k = 0; u < P->ustart[n->id + 1]; u++, k++)
		P->has_req[k] = requirement(P, P->uses[u].node, P->uses[u].slot, &P->req[k]);
	Placement best;
	int s = choose_eval(P, n, &best);
	uint32_t id = ir_place_intern(P->m, &best);
	if (id == n->place)
		return false;
	set_place(P, n, id, src_origin(P, n, s), n->loc);
	return true;
}

/* Re-chooses free node n's placement; returns whether it changed.  The
 * memo is asked for its users' requirements, then for the choice, keyed
 * on all that choose_eval reads; what it does not know is worked out here
 * and told to it. */
static bool choose(Prop *P, IrNode *n)
{
	if (!memo_on(P->memo))
		return choose_direct(P, n);
	int id = n->id, nu = P->ustart[id + 1] - P->ustart[id];
	for (int u = P->ustart[id], k = 0; k < nu; u++, k++)
		if (!req_id(P, u, &P->req_id[k]))
			return choose_direct(P, n);
	Choice c;
	switch (memo_choose(P->memo, id, P->req_id, &c)) {
	case MEMO_OFF:
		return choose_direct(P, n);
	case MEMO_HIT:
		for (int k = 0; k < nu; k++)
			P->has_req[k] = P->req_id[k] >= 0; /* src_origin reads them */
		break;
	case MEMO_MISS: {
		for (int k = 0; k < nu; k++) {
			P->has_req[k] = P->req_id[k] >= 0;
			if (P->has_req[k])
				P->req[k] = *ir_place_get(P->m, (uint32_t)P->req_id[k]);
		}
		Placement best;
		c.src = choose_eval(P, n, &best);
		int bid = place_id(P, &best);
		if (bid < 0) {
			memo_off(P->memo);
			return choose_direct(P, n);
		}
		c.pid = (uint32_t)bid;
		memo_choose_keep(P->memo, &c);
		break;
	}
	}
	if (c.pid == n->place)
		return false;
	place_node(P, n, c.pid, src_origin(P, n, c.src), n->loc);
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

static void classify(Prop *P)
{
	IrModule *m = P->m;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		P->tie[i] = -1;
		if (n->op == IR_OP_STATE || n->op == IR_OP_ADAMW_STEP || n->op == IR_OP_SGD_STEP ||
		    n->op == IR_OP_GRAD_NORM)
			n->place = 0; /* optim's copies: redone below */
		if (n->place) {
			P->kind[i] = K_USER;
			Placement p = *ir_place(m, n);
			strip_dead_axes(P, &p);
			ir_place_set(m, n, &p); /* out of memory: the verifier says */
			if (ir_place_from(P->m, n) < 0 && !ir_place_loc(P->m, n).file)
				ir_set_place_loc(P->m, n, n->loc);
		} else if (n->rank == 0) {
			P->kind[i] = K_SCALAR;
		} else if (n->role == IR_ROLE_GRAD && ir_link(m, n) == IR_LINK_GRAD &&
		           (P->tie[i] = ir_link_param(m, n)) >= 0) {
			P->kind[i] = K_TIED;
		} else {
			P->kind[i] = K_FREE;
		}
	}
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
	/* nothing else places n: what it read last time (0 for a scalar, 1 +
	 * the placement id of a tied node's param) gives the same */
	int seen = P->kind[n->id] == K_SCALAR ? 0 : 1 + pid(P, P->tie[n->id]);
	if (memo_fix(P->memo, n->id, seen))
		return false;
	Placement p;
	int from = -1;
	if (P->kind[n->id] == K_SCALAR) {
		placement_replicated(&p, 0);
		from = n->nops ? n->ops[0] : -1;
	} else {
		const IrNode *t = nd(P, P->tie[n->id]);
		if (!t->place)
			return false;
		p = *ir_place(P->m, t);
		p.partial = 0;
		p.partial_op = IR_RED_SUM;
		from = t->id;
	}
	uint32_t id = ir_place_intern(P->m, &p);
	if (id == n->place && ir_place_from(P->m, n) == from)
		return false;
	place_node(P, n, id, from, n->loc);
	return true;
}

static bool visit_node(Prop *P, int i)
{
	IrNode *n = nd(P, i);
	switch (P->kind[i]) {
	case K_USER:
		return false;
	case K_FREE:
		if (!rule_of(P, i)->ok) {
			if (n->place)
				return false;
			Placement p;
			placement_replicated(&p, n->rank);
			place_node(P, n, ir_place_intern(P->m, &p), n->nops ? n->ops[0] : -1, n->loc);
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
	P->dirty[i] = 1;
	for (int k = P->ostart[i]; k < P->ostart[i + 1]; k++)
		P->dirty[P->opv[k]] = 1;
	for (int u = P->ustart[i]; u < P->ustart[i + 1]; u++) {
		int c = P->uses[u].node;
		P->dirty[c] = 1;
		P->opchange[c] = ++P->clock; /* c's operands: see stale() */
	}
}

/* Whether an operand of one of i's users changed since i's last visit. */
static bool stale(const Prop *P, int i)
{
	for (int u = P->ustart[i]; u < P->ustart[i + 1]; u++)
		if (P->opchange[P->uses[u].node] > P->visited[i])
			return true;
	return false;
}

/* A sweep's visit.  choose() is a pure function of the placements of the
 * node, its operands, its users and its users' operands, so a free node
 * none of those changed for since its last visit would choose the same
 * again: it is skipped (ties and scalars are visited, fix() skipping
 * itself).  The sweeps give what visiting everything gives. */
static bool visit(Prop *P, int i)
{
	if (P->kind[i] == K_FREE && rule_of(P, i)->ok && !P->dirty[i] && !stale(P, i))
		return false;
	P->dirty[i] = 0;
	P->visited[i] = P->clock;
	bool changed = visit_node(P, i);
	if (changed)
		mark_changed(P, i);
	return changed;
}

/* The operands (ostart / opv) and uses (ustart / uses) of every node, in
 * flat arrays the sweeps read instead of the nodes. */
static bool build_uses(Prop *P, Arena *a)
{
	IrModule *m = P->m;
	size_t n1 = (size_t)m->nnodes + 1;
	P->ostart = arena_alloc_raw(a, sizeof(int) * n1);
	P->ustart = arena_alloc(a, sizeof(int) * n1);
	if (!P->ostart || !P->ustart)
		return false;
	P->ostart[0] = 0;
	for (int i = 0; i < m->nnodes; i++)
		P->ostart[i + 1] = P->ostart[i] + m->nodes[i]->nops;
	int total = P->ostart[m->nnodes];
	P->opv = arena_alloc_raw(a, sizeof(int) * (size_t)(total ? total : 1));
	if (!P->opv)
		return false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int *o = P->opv + P->ostart[i];
		for (int k = 0; k < n->nops; k++) {
			o[k] = n->ops[k];
			P->ustart[o[k] + 1]++;
		}
	}
	for (int i = 0; i < m->nnodes; i++)
		P->ustart[i + 1] += P->ustart[i];
	P->uses = arena_alloc_raw(a, sizeof(Use) * (size_t)(total ? total : 1));
	int *fill = arena_alloc_raw(a, sizeof(int) * n1);
	int most = 1;
	for (int i = 0; i < m->nnodes; i++)
		if (P->ustart[i + 1] - P->ustart[i] > most)
			most = P->ustart[i + 1] - P->ustart[i];
	P->req = arena_alloc(a, sizeof(Placement) * (size_t)most);
	P->has_req = arena_alloc(a, sizeof(bool) * (size_t)most);
	if (!P->uses || !fill || !P->req || !P->has_req)
		return false;
	memcpy(fill, P->ustart, sizeof(int) * n1);
	for (int i = 0; i < m->nnodes; i++)
		for (int k = P->ostart[i]; k < P->ostart[i + 1]; k++) {
			Use *u = &P->uses[fill[P->opv[k]]++];
			u->node = i;
			u->slot = k - P->ostart[i];
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
		const Placement *q = ir_place(m, w);
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
	const Placement *p = ir_place(P->m, o);
	if ((p->partial >> ax) & 1u)
		return p->partial_op == IR_RED_SUM;
	if (p->partial || sp_uses_axis(p, ax) || o->nops < 2)
		return false;
	if (o->op == IR_OP_MATMUL) {
		const IrNode *w = nd(P, o->ops[1]);
		const Placement *q = ir_place(P->m, w);
		if (w->rank != 2 || !q->known)
			return false;
		for (int k = 0; k < q->naxes[0]; k++)
			if (q->axes[0][k] == ax)
				return true;
	} else if (o->op == IR_OP_EMBED) {
		const Placement *q = pl(P, o->ops[0]);
		for (int k = 0; q->known && k < q->naxes[0]; k++)
			if (q->axes[0][k] == ax)
				return true;
	}
	return false;
}

/* False when nothing was split, with *why set when that is the model's
 * doing (the warning's reason), NULL when out of memory. */
static bool sp_apply(Prop *P, Arena *ar, const char **why)
{
	IrModule *m = P->m;
	int ax = sp_axis(P);
	*why = NULL;
	if (ax < 0 || m->loss < 0) {
		*why = "no column-parallel weight (a [_, tp] param that a matmul multiplies by) "
		       "is split over a mesh axis of more than one rank";
		return false;
	}
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
		const Placement *p = ir_place(m, n);
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
	if (!count) {
		*why = arena_printf(ar, "no residual stream (a [batch, seq, ...] value added to "
		                    "a row-parallel result) to split along its sequence over %s",
		                    m->mesh.names[ax]);
		return false;
	}
	/* the backward mirrors: layernorm_bwd of a sequence-split x and the
	 * adds of such gradients run on T shards, their partial dy left
	 * partial (reduce_scattered in) */
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		const Placement *p = ir_place(m, n);
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
		if (P->kind[i] != K_FREE || !n->place)
			continue;
		P->kind[i] = K_USER; /* pinned */
		if (!src[i] && !sp[i])
			continue;
		Placement p = *ir_place(m, n);
		if (src[i]) { /* left partial: reduce_scattered into the add */
			p.partial |= 1u << ax;
			p.partial_op = IR_RED_SUM;
		}
		if (sp[i]) {
			int d = n->rank - 2;
			p.axes[d][0] = (uint8_t)ax;
			p.naxes[d] = 1;
		}
		ir_place_set(m, n, &p); /* out of memory: the verifier says */
	}
	return true;
}

bool pass_propagate(IrModule *m, Diag *d, const PassOptions *opt)
{
	return pass_propagate_memo(m, d, opt, true, NULL);
}

bool pass_propagate_memo(IrModule *m, Diag *d, const PassOptions *opt, bool memo, long *hits)
{
	if (hits)
		*hits = 0;
	Arena a;
	arena_init(&a);
	Prop P = {.m = m, .ar = &a};
	for (int i = 0; i < m->mesh.naxes && i < IR_MAX_AXES; i++)
		if (m->mesh.sizes[i] > 1)
			P.live |= 1u << i;
	size_t nn = (size_t)(m->nnodes ? m->nnodes : 1);
	/* one rule per signature, written by build_sigs */
	P.rules = arena_alloc_raw(&a, sizeof(Rule) * nn);
	P.sig = arena_alloc_raw(&a, sizeof(int) * nn);
	P.shape = arena_alloc_raw(&a, sizeof(int) * nn);
	P.kind = arena_alloc(&a, nn);
	P.tie = arena_alloc(&a, sizeof(int) * nn);
	P.dirty = arena_alloc_raw(&a, nn);
	P.opchange = arena_alloc(&a, sizeof(unsigned) * nn);
	P.visited = arena_alloc(&a, sizeof(unsigned) * nn);
	P.bytes = arena_alloc_raw(&a, sizeof(double) * nn);
	bool ok = P.rules && P.sig && P.shape && P.kind && P.tie && P.dirty && P.bytes &&
	          P.opchange && P.visited && build_uses(&P, &a);
	if (ok) {
		int most_ops = 0, most_uses = 0;
		for (int i = 0; i < m->nnodes; i++) {
			if (m->nodes[i]->nops > most_ops)
				most_ops = m->nodes[i]->nops;
			if (P.ustart[i + 1] - P.ustart[i] > most_uses)
				most_uses = P.ustart[i + 1] - P.ustart[i];
		}
		P.kbuf = arena_alloc_raw(&a, sizeof(int) * sig_key_len(most_ops));
		P.req_id = arena_alloc_raw(&a, sizeof(int) * (size_t)(most_uses ? most_uses : 1));
		ok = P.kbuf && P.req_id;
	}
	if (ok) {
		classify(&P);
		ok = build_sigs(&P);
	}
	if (ok) {
		PropGraph g = {m, P.sig, P.ostart, P.opv, P.ustart, P.uses};
		ok = (P.memo = memo_new(&a, &g, memo)) != NULL;
	}
	if (!ok) {
		arena_free(&a);
		diag_error(d, (SrcLoc){0}, "propagate: out of memory");
		return false;
	}
	memset(P.dirty, 1, nn);
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
	const char *sp_why = NULL;
	if (m->train.sequence_parallel && sp_apply(&P, &a, &sp_why)) {
		changed = true;
		/* sp_apply moved placements behind visit's and the memo's back */
		memset(P.dirty, 1, nn);
		memo_forget(P.memo);
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
		if (!n->place) {
			Placement p;
			placement_replicated(&p, n->rank);
			set_place(&P, n, ir_place_intern(m, &p), -1, n->loc);
		}
	}
	if (opt && opt->verbose)
		fprintf(stderr, "dtmc: propagate: %d sweep%s%s\n", sweeps, sweeps == 1 ? "" : "s",
		        changed ? " (stopped before a fixpoint)" : "");
	if (sp_why)
		diag_warning(d, m->train.loc[IR_TRAIN_SEQUENCE_PARALLEL], "sequence_parallel true has no effect: %s",
		             sp_why);
	if (hits)
		*hits = memo_hits(P.memo);
	arena_free(&a);
	return true;
}
