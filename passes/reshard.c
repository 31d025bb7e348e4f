/* reshard.c - the cheapest sequence of collectives between two placements.
 *
 * Consumes two canonical placements of one value (global shape, dtype) and
 * produces a ReshardPlan; the partitioner (partition.c) turns each step
 * into one IR node.  The search is Dijkstra over placements: a state is a
 * placement, an edge is one step of DESIGN.md section 4's table applied to
 * one mesh axis, its weight the step's ring alpha-beta time (REFERENCE.md
 * "Collectives": alpha = 5 us, beta = 50 GB/s; all_gather and
 * reduce_scatter N-1 steps of D/N, all_reduce 2(N-1), all_to_all N-1,
 * plus 10 us per collective launched, so two collectives must save more
 * than that to beat one; a shard_slice is a local copy).  Only axes named by the source or the
 * target take part, so the state space stays small (a few hundred
 * placements for two tensor dims and three axes).
 *
 * Steps act on the minor end of a dim's axis list, which is what keeps each
 * one a single collective: the ranks that differ only in a dim's last axis
 * hold adjacent chunks, so gathering over that axis concatenates them in
 * group order.  Popping a major axis would need a permutation as well.
 */
#include "passes/reshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_ALPHA 5e-6
#define RS_BETA 50e9
#define RS_COPY_BW 500e9 /* a local slice: a copy, far cheaper than a link */
#define RS_LAUNCH 10e-6  /* per collective: launch and synchronisation */
#define RS_MAX_STATES 4096

void pass_placement_canon(const Mesh *m, Placement *p)
{
	if (!p->known)
		return;
	/* the axes that stay: in the mesh and of more than one rank (one
	 * mask, not a test per axis and partial bit) */
	uint32_t live = 0;
	for (int a = 0; a < m->naxes && a < IR_MAX_AXES; a++)
		if (m->sizes[a] > 1)
			live |= 1u << a;
	int nd = p->ndims < IR_MAX_RANK ? p->ndims : IR_MAX_RANK;
	for (int d = 0; d < IR_MAX_RANK; d++) {
		/* built in a zeroed row and stored whole: the unused tail must
		 * be zero too */
		uint8_t row[IR_MAX_AXES] = {0};
		int n = d < nd ? p->naxes[d] : 0, k = 0;
		if (n > IR_MAX_AXES)
			n = IR_MAX_AXES;
		for (int j = 0; j < n; j++) {
			int a = p->axes[d][j];
			if (a < 32 && (live >> a & 1))
				row[k++] = (uint8_t)a;
		}
		memcpy(p->axes[d], row, sizeof row);
		p->naxes[d] = (uint8_t)k;
	}
	p->partial &= live;
	if (!p->partial)
		p->partial_op = IR_RED_SUM;
}

uint32_t pass_placement_split_axes(const Placement *p)
{
	uint32_t u = 0;
	for (int d = 0; p->known && d < p->ndims; d++)
		for (int k = 0; k < p->naxes[d]; k++)
			u |= 1u << p->axes[d][k];
	return u;
}

bool pass_placement_even(const Mesh *m, const Placement *p, int rank, const int64_t *shape)
{
	for (int d = 0; d < rank && d < p->ndims; d++) {
		int64_t parts = placement_dim_parts(p, m, d);
		if (parts > 1 && shape[d] % parts != 0)
			return false;
	}
	return true;
}

static uint32_t used_axes(const Placement *p)
{
	uint32_t u = 0;
	for (int d = 0; d < p->ndims; d++)
		for (int j = 0; j < p->naxes[d]; j++)
			u |= 1u << p->axes[d][j];
	return u;
}

/* Bytes of one rank's shard under p. */
static double local_bytes(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                          const Placement *p)
{
	double b = ir_dtype_size(dt);
	for (int d = 0; d < rank; d++)
		b *= (double)shape[d] / (double)placement_dim_parts(p, m, d);
	return b;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
	return a / b + (a % b != 0);
}

/* Can dim d of the value under p, now cut in `parts`, be cut g more ways
 * (and, read backwards, can an all_gather over those g undo it)?  Evenly;
 * or, with uneven (padded torch.chunk) shards, when the dim is whole (the
 * partitioner pads it to g * ceil(n / g) rows first, and trims an
 * all_gather's result back to n) or when the g finer chunks tile a coarser
 * one exactly (6 rows over 4 parts: chunks of 2, which pairs of do not
 * make the chunks of 3 that 2 parts have, so that needs a detour through
 * the whole dim). */
static bool cuttable(const Mesh *m, const int64_t *shape, const Placement *p, int d, int64_t g,
                     bool uneven)
{
	int64_t parts = placement_dim_parts(p, m, d), n = shape[d];
	if (n % (parts * g) == 0)
		return true;
	return uneven && (parts == 1 || ceil_div(n, parts) == g * ceil_div(n, parts * g));
}

/* cuttable for an all_to_all's two dims: where the chunks only tile, the
 * padding would sit mid-buffer, so uneven only through the whole dim. */
static bool a2a_fits(const Mesh *m, const int64_t *shape, const Placement *p, int d, int64_t g,
                     bool uneven)
{
	return cuttable(m, shape, p, d, g, false) ||
	       (uneven && placement_dim_parts(p, m, d) == 1);
}

static double step_cost(IrOp op, int64_t n, double bytes_in, double bytes_out)
{
	double nn = (double)n, t = op == IR_OP_SHARD_SLICE ? 0 : RS_LAUNCH;
	switch (op) {
	case IR_OP_ALL_GATHER:
		return t + RS_ALPHA * (nn - 1) + (nn - 1) / nn * bytes_out / RS_BETA;
	case IR_OP_REDUCE_SCATTER:
	case IR_OP_ALL_TO_ALL:
		return t + RS_ALPHA * (nn - 1) + (nn - 1) / nn * bytes_in / RS_BETA;
	case IR_OP_ALL_REDUCE:
		return t + RS_ALPHA * 2 * (nn - 1) + 2 * (nn - 1) / nn * bytes_in / RS_BETA;
	default:
		return bytes_out / RS_COPY_BW;
	}
}

/* Fills s->after and s->cost from `from` and s's kind; false when the step
 * does not apply (dims that do not divide; with uneven, see cuttable). */
static bool apply(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                  const Placement *from, ReshardStep *s, bool uneven)
{
	Placement p = *from;
	int64_t g = mesh_axes_size(m, s->axes);
	int a = __builtin_ctz(s->axes);
	switch (s->op) {
	case IR_OP_ALL_GATHER:
		/* one axis, or (uneven) every axis of the dim at once */
		for (uint32_t u = s->axes; u; u &= u - 1) {
			p.naxes[s->dim]--;
			p.axes[s->dim][p.naxes[s->dim]] = 0;
		}
		if (!cuttable(m, shape, &p, s->dim, g, uneven))
			return false;
		break;
	case IR_OP_ALL_REDUCE:
		s->red = p.partial_op;
		p.partial &= ~s->axes;
		break;
	case IR_OP_REDUCE_SCATTER:
		if (p.partial_op == IR_RED_MAX || !cuttable(m, shape, &p, s->dim, g, uneven))
			return false;
		s->red = p.partial_op;
		p.partial &= ~s->axes;
		p.axes[s->dim][p.naxes[s->dim]++] = (uint8_t)a;
		break;
	case IR_OP_ALL_TO_ALL:
		/* even on both dims; or (uneven) the dim it cuts is whole
		 * before (partition pads it to g chunks first) and the dim it
		 * gathers is whole after (trimmed back to its extent after) */
		if (!a2a_fits(m, shape, &p, s->dim, g, uneven))
			return false;
		p.naxes[s->dim2]--;
		p.axes[s->dim2][p.naxes[s->dim2]] = 0;
		if (!a2a_fits(m, shape, &p, s->dim2, g, uneven))
			return false;
		p.axes[s->dim][p.naxes[s->dim]++] = (uint8_t)a;
		break;
	case IR_OP_SHARD_SLICE:
		/* one axis, or (uneven) several in mesh order at once */
		if (!cuttable(m, shape, &p, s->dim, g, uneven))
			return false;
		for (int b = a; b < m->naxes; b++)
			if (s->axes >> b & 1)
				p.axes[s->dim][p.naxes[s->dim]++] = (uint8_t)b;
		break;
	default:
		return false;
	}
	if (!p.partial)
		p.partial_op = IR_RED_SUM;
	s->after = p;
	s->cost = step_cost(s->op, g, local_bytes(m, dt, rank, shape, from),
	                    local_bytes(m, dt, rank, shape, &p));
	return true;
}

/* Every step that applies to p, using only axes in `axes`. */
static int moves(const Mesh *m, IrDtype dt, int rank, const int64_t *shape, const Placement *p,
                 const Placement *to, uint32_t axes, bool uneven, ReshardStep *out, int cap)
{
	int n = 0;
	uint32_t used = used_axes(p);
#define PUSH(...)                                                             \
	do {                                                                  \
		ReshardStep s_ = {__VA_ARGS__};                               \
		if (n < cap && apply(m, dt, rank, shape, p, &s_, uneven))     \
			out[n++] = s_;                                        \
	} while (0)
	/* partial axes: reduce them away, alone or all the dropped ones at
	 * once (one all_reduce over the joint group is cheaper than two) */
	uint32_t drop = p->partial & ~to->partial;
	for (int a = 0; a < m->naxes; a++) {
		if (!(p->partial & (1u << a)))
			continue;
		PUSH(.op = IR_OP_ALL_REDUCE, .axes = 1u << a);
		for (int d = 0; d < rank; d++)
			PUSH(.op = IR_OP_REDUCE_SCATTER, .axes = 1u << a, .dim = d);
	}
	if (drop && (drop & (drop - 1)))
		PUSH(.op = IR_OP_ALL_REDUCE, .axes = drop);
	for (int d = 0; d < rank; d++) {
		if (p->naxes[d] == 0)
			continue;
		int a = p->axes[d][p->naxes[d] - 1];
		PUSH(.op = IR_OP_ALL_GATHER, .axes = 1u << a, .dim = d);
		for (int j = 0; j < rank; j++)
			if (j != d && p->naxes[j] < IR_MAX_AXES)
				PUSH(.op = IR_OP_ALL_TO_ALL, .axes = 1u << a, .dim = j, .dim2 = d);
	}
	for (int a = 0; a < m->naxes; a++) {
		if (!(axes & (1u << a)) || (used & (1u << a)) || (p->partial & (1u << a)))
			continue;
		for (int d = 0; d < rank; d++)
			if (p->naxes[d] < IR_MAX_AXES)
				PUSH(.op = IR_OP_SHARD_SLICE, .axes = 1u << a, .dim = d);
	}
	/* an uneven dim over several axes whose chunks do not tile one axis
	 * at a time: gathered whole, or cut from whole, over all its axes at
	 * once (in mesh order, the order a group numbers its members) */
	for (int d = 0; uneven && d < rank; d++) {
		const Placement *q = p->naxes[d] >= 2 ? p : to;
		if (q->naxes[d] < 2 || (q == to && p->naxes[d]))
			continue;
		uint32_t all = 0;
		bool order = true;
		for (int k = 0; k < q->naxes[d]; k++) {
			order = order && (k == 0 || q->axes[d][k] > q->axes[d][k - 1]);
			all |= 1u << q->axes[d][k];
		}
		if (!order)
			continue;
		if (q == p)
			PUSH(.op = IR_OP_ALL_GATHER, .axes = all, .dim = d);
		else if (!(all & (used | p->partial)))
			PUSH(.op = IR_OP_SHARD_SLICE, .axes = all, .dim = d);
	}
#undef PUSH
	return n;
}

static bool fail(char *why, size_t cap, const char *msg)
{
	if (why && cap)
		snprintf(why, cap, "%s", msg);
	return false;
}

static bool check_args(const Placement *from, const Placement *to, int rank, char *why,
                       size_t cap)
{
	if (!from->known || !to->known)
		return fail(why, cap, "a placement is not known");
	if (from->ndims != rank || to->ndims != rank)
		return fail(why, cap, "placement ranks differ from the value's");
	if (to->partial & ~from->partial)
		return fail(why, cap, "Replicate -> Partial is not planned");
	if (to->partial && from->partial_op != to->partial_op)
		return fail(why, cap, "partial reductions differ");
	return true;
}

/* A state of the search: a placement (its id in the search's own table,
 * State.id) and the cheapest way found to it. */
typedef struct State {
	uint32_t id;
	double dist;
	int prev;
	ReshardStep via;
	bool done;
} State;

bool pass_reshard_plan(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                       const Placement *from, const Placement *to, ReshardPlan *out,
                       char *why, size_t cap)
{
	memset(out, 0, sizeof *out);
	if (!check_args(from, to, rank, why, cap))
		return false;
	/* the placements met, interned: a state is found by its id */
	Arena a;
	arena_init(&a);
	IrPlaces *pl = ir_places_new(&a);
	uint32_t to_id = pl ? ir_places_intern(pl, to) : 0;
	uint32_t from_id = to_id ? ir_places_intern(pl, from) : 0;
	State *st = from_id ? malloc(RS_MAX_STATES * sizeof *st) : NULL;
	/* [ids]: the state of each, -1 none (ids are at most the states and
	 * the target) */
	int *state_of = st ? malloc((RS_MAX_STATES + 2) * sizeof *state_of) : NULL;
	if (!state_of) {
		free(st);
		arena_free(&a);
		return fail(why, cap, "out of memory");
	}
	if (from_id == to_id) {
		free(st);
		free(state_of);
		arena_free(&a);
		return true;
	}
	uint32_t axes = used_axes(from) | used_axes(to) | from->partial;
	/* uneven steps only for a value that is uneven at either end, so
	 * an even value never detours through padded shards */
	bool uneven = !pass_placement_even(m, from, rank, shape) ||
	              !pass_placement_even(m, to, rank, shape);
	int ns = 1, goal = -1;
	state_of[to_id] = -1;
	state_of[from_id] = 0;
	st[0] = (State){from_id, 0, -1, {0}, false};
	ReshardStep mv[256];
	for (;;) {
		int best = -1;
		for (int i = 0; i < ns; i++)
			if (!st[i].done && (best < 0 || st[i].dist < st[best].dist))
				best = i;
		if (best < 0)
			break;
		st[best].done = true;
		if (st[best].id == to_id) {
			goal = best;
			break;
		}
		Placement cur = *ir_places_get(pl, st[best].id);
		int nm = moves(m, dt, rank, shape, &cur, to, axes, uneven, mv, 256);
		for (int k = 0; k < nm; k++) {
			/* never drop a partial axis the target keeps */
			if (mv[k].after.partial != (mv[k].after.partial | (to->partial & cur.partial)))
				continue;
			double nd = st[best].dist + mv[k].cost;
			uint32_t id = ir_places_find(pl, &mv[k].after);
			int j = id ? state_of[id] : -1;
			if (j < 0) {
				if (ns == RS_MAX_STATES)
					continue;
				if (!id && !(id = ir_places_intern(pl, &mv[k].after)))
					continue; /* out of memory: a path not taken */
				state_of[id] = ns;
				st[ns++] = (State){id, nd, best, mv[k], false};
			} else if (!st[j].done && nd < st[j].dist) {
				st[j].dist = nd;
				st[j].prev = best;
				st[j].via = mv[k];
			}
		}
	}
	free(state_of);
	arena_free(&a);
	if (goal < 0) {
		free(st);
		return fail(why, cap, "no sequence of collectives reaches the target "
		                      "(a dim does not divide by its mesh axes)");
	}
	int len = 0;
	for (int i = goal; st[i].prev >= 0; i = st[i].prev)
		len++;
	if (len > RESHARD_MAX_STEPS) {
		free(st);
		return fail(why, cap, "the plan is too long");
	}
	out->nsteps = len;
	out->cost = st[goal].dist;
	for (int i = goal, k = len - 1; st[i].prev >= 0; i = st[i].prev, k--)
		out->steps[k] = st[i].via;
	free(st);
	return true;
}

static bool greedy_push(ReshardPlan *out, const Mesh *m, IrDtype dt, int rank,
                        const int64_t *shape, Placement *cur, ReshardStep s)
{
	/* through Replicate every step cuts or restores a whole dim */
	if (out->nsteps == RESHARD_MAX_STEPS || !apply(m, dt, rank, shape, cur, &s, true))
		return false;
	out->steps[out->nsteps++] = s;
	out->cost += s.cost;
	*cur = s.after;
	return true;
}

bool pass_reshard_greedy(const Mesh *m, IrDtype dt, int rank, const int64_t *shape,
                         const Placement *from, const Placement *to, ReshardPlan *out,
                         char *why, size_t cap)
{
	memset(out, 0, sizeof *out);
	if (!check_args(from, to, rank, why, cap))
		return false;
	Arena a;
	arena_init(&a);
	IrPlaces *pl = ir_places_new(&a);
	if (!pl) {
		arena_free(&a);
		return fail(why, cap, "out of memory");
	}
	bool same = ir_places_intern(pl, from) == ir_places_intern(pl, to);
	arena_free(&a);
	if (same)
		return true;
	Placement cur = *from;
	for (int d = 0; d < rank; d++)
		while (cur.naxes[d] > 0) {
			ReshardStep s = {.op = IR_OP_ALL_GATHER,
			                 .axes = 1u << cur.axes[d][cur.naxes[d] - 1], .dim = d};
			if (!greedy_push(out, m, dt, rank, shape, &cur, s))
				return fail(why, cap, "greedy: a step does not apply");
		}
	uint32_t drop = cur.partial & ~to->partial;
	if (drop && !greedy_push(out, m, dt, rank, shape, &cur,
	                         (ReshardStep){.op = IR_OP_ALL_REDUCE, .axes = drop}))
		return fail(why, cap, "greedy: a step does not apply");
	for (int d = 0; d < rank; d++)
		for (int j = 0; j < to->naxes[d]; j++) {
			ReshardStep s = {.op = IR_OP_SHARD_SLICE, .axes = 1u << to->axes[d][j], .dim = d};
			if (!greedy_push(out, m, dt, rank, shape, &cur, s))
				return fail(why, cap, "greedy: a dim does not divide");
		}
	return true;
}
