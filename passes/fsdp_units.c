/* fsdp_units.c - pass "fsdp_units": ZeRO-3's param all_gathers per FSDP
 * unit, with prefetch (train { zero 3; reshard_after_forward B; prefetch
 * n }).
 *
 * zero.c places stage 3's params split, so partition all_gathers each in
 * front of its uses.  This pass runs after partition, because which
 * all_gather serves which use only exists there (partition gathers a value
 * once and reuses it).  Under stage 3 it moves the param all_gathers of a unit (a block
 * instance, IrModule.unit: layer.3.*; the top-level params together form one unit) to the
 * front of the unit's first use, and with reshard_after_forward it gives
 * the backward uses their own copies, gathered together in front of the
 * unit's first backward use, so each forward copy dies with the forward
 * pass: ZeRO-3's 1.5x of DDP's communication (1x without resharding, at
 * the cost of keeping every gathered param live).
 *
 * Prefetch (train { prefetch n }, default 1, PyTorch FSDP's one unit
 * ahead) then moves those groups earlier by REFERENCE.md's rule
 * (pass_fsdp_prefetch): with the L units numbered in order of first
 * forward use, forward unit i prefetches i+1..i+n, so unit j's forward
 * gathers are issued in front of unit max(j-n, 0)'s first use, while that
 * unit computes; numbered so that unit L-1 is the first to start its
 * backward (order of first backward use, from the end), backward unit i
 * prefetches i-1..i-n, so unit j's backward gathers go in front of unit
 * min(j+n, L-1)'s first backward use.  (On gpt the top-level unit is the
 * first forward, for the embedding, and the first backward, for the head.)
 * A prefetched unit's params move up with its gathers: they are leaves
 * declared next to their block.  n = 0 gathers just in time.  Memory
 * follows from the order: memplan keeps each gathered copy live from
 * where it now is, so n more units are live at the peak.  The moved
 * nodes keep their stage and micro-batch (a gather is its param's: mb
 * -1, shared by the micro-batches); under a pipeline, passes/pipeline.c
 * re-places such shared nodes by its schedule.
 *
 * DDP's gradient buckets are passes/bucket.c's (after this pass), gradient
 * accumulation passes/microbatch.c's (before autodiff); a unit's gathers
 * become one collective over a flat buffer in passes/coalesce.c.
 */
#include "passes/fsdp_units.h"
#include "passes/reshard.h"
#include "passes/zero.h"

#include <stdio.h>
#include <string.h>

typedef struct Units {
	IrModule *m;
	int n, L;
	int *unit;   /* a split param: its unit (the id of the unit's first param); else -1 */
	int *root;   /* a gather of a split param (through collectives): the param; else -1 */
	bool *bwd;   /* a chain node with a user after the loss */
	bool *need;  /* a forward chain node the backward pass gathers again */
	bool *moved; /* a chain node emitted at its unit's point */
	int *fpoint, *bpoint; /* per unit (indexed by unit id): where its gathers go */
	int *ford, nford;     /* units with forward gathers, in order of fpoint */
	int *bord, nbord;     /* units with backward gathers, in order of bpoint */
	int *map, *cmap;      /* old id -> new id of the node, of its backward copy */
	int *units, nunits;   /* the unit ids */
	/* per unit (by its index in units, uix[unit id]), in node order:
	 * its params pv[ps[x] .. ps[x + 1]), its forward chain nodes fv[..]
	 * (before the loss) and its backward ones lv[..] (after it) */
	int *uix, *ps, *pv, *fs, *fv, *ls, *lv;
	/* ford and bord sorted (stably) by their points, and the next of
	 * each that emit_groups has to emit */
	int *fq, *bq, fnext, bnext;
	IrNode **out;
	int nout;
	IrModule *ann; /* the new ids' annotations (ir_module_derive of m) */
} Units;

/* The unit of a param: the block instance that declared it (IrModule.unit:
 * layer.3.wq is in layer.3); the top-level params (-1) share one. */
static bool same_unit(const IrModule *m, const IrNode *a, const IrNode *b)
{
	return ir_unit(m, a) == ir_unit(m, b);
}

static void find_chains(Units *u, uint32_t Z)
{
	IrModule *m = u->m;
	for (int i = 0; i < u->n; i++) {
		IrNode *x = m->nodes[i];
		u->unit[i] = u->root[i] = -1;
		if (x->op == IR_OP_PARAM && (pass_placement_split_axes(ir_place(m, x)) & Z)) {
			u->unit[i] = i;
			for (int j = 0; j < u->nunits; j++)
				if (same_unit(m, m->nodes[u->units[j]], x)) {
					u->unit[i] = u->units[j];
					break;
				}
			if (u->unit[i] == i)
				u->units[u->nunits++] = i;
		} else if (x->nops == 1 && ((ir_op_flags(x->op) & OPF_COLL) || x->op == IR_OP_CAST ||
		                            x->op == IR_OP_SHARD_SLICE || x->op == IR_OP_PERMUTE ||
		                            x->op == IR_OP_RESHAPE || x->op == IR_OP_SLICE)) {
			/* a gather, or a view of one the backward pass reads
			 * (transpose(wte) for a tied head; the slice that drops a
			 * padded shard's zero rows) */
			int o = x->ops[0];
			u->root[i] = u->unit[o] >= 0 ? o : u->root[o];
		}
	}
	for (int i = 0; i < u->n; i++) {
		IrNode *x = m->nodes[i];
		for (int k = 0; k < x->nops; k++)
			if (i > u->L && u->root[x->ops[k]] >= 0 && x->ops[k] < u->L)
				u->bwd[x->ops[k]] = true;
	}
}

static int uof(const Units *u, int c)
{
	return u->unit[u->root[c]];
}

static void find_points(Units *u, bool reshard)
{
	IrModule *m = u->m;
	for (int i = 0; i < u->n; i++)
		u->fpoint[i] = u->bpoint[i] = -1;
	/* descending, so a chain node's users are decided first */
	for (int c = u->n - 1; reshard && c >= 0; c--) {
		if (u->root[c] < 0 || c > u->L)
			continue;
		u->need[c] = u->need[c] || u->bwd[c];
		if (u->need[c] && u->root[m->nodes[c]->ops[0]] >= 0)
			u->need[m->nodes[c]->ops[0]] = true;
	}
	for (int c = 0; c < u->n; c++) {
		if (u->root[c] < 0)
			continue;
		int k = uof(u, c);
		if (c < u->L) {
			if (u->fpoint[k] < 0)
				u->fpoint[k] = c;
			continue;
		}
		if (u->bpoint[k] < 0 || c < u->bpoint[k])
			u->bpoint[k] = c;
	}
	/* the backward copies go in front of the first backward use */
	for (int i = u->L + 1; reshard && i < u->n; i++) {
		IrNode *x = m->nodes[i];
		for (int j = 0; j < x->nops; j++) {
			int o = x->ops[j];
			if (u->root[o] >= 0 && o < u->L && u->need[o]) {
				int k = uof(u, o);
				if (u->bpoint[k] < 0 || i < u->bpoint[k])
					u->bpoint[k] = i;
			}
		}
	}
}

int pass_fsdp_prefetch(int L, int n, int i, bool backward, int *out)
{
	if (n > L - 1)
		n = L - 1; /* deeper than the units: all of them ahead */
	if (n <= 0 || i < 0 || i >= L || (backward ? i < n : i >= L - n))
		return 0;
	for (int k = 1; k <= n; k++)
		out[k - 1] = backward ? i - k : i + k;
	return n;
}

/* Units with a point (fpoint or bpoint), sorted by it: the order of first
 * use.  Insertion sort: a model has tens of units. */
static int order_units(const Units *u, const int *point, int *ord)
{
	int n = 0;
	for (int j = 0; j < u->nunits; j++) {
		int k = u->units[j], at = n;
		if (point[k] < 0)
			continue;
		n++;
		while (at > 0 && point[ord[at - 1]] > point[k]) {
			ord[at] = ord[at - 1];
			at--;
		}
		ord[at] = k;
	}
	return n;
}

/* Moves each of the L units of ord (in running order) to the first point
 * of a unit that prefetches it.  The rule's index of ord[t] is t forward
 * and L-1-t backward, so walking t upwards visits the units as they run
 * either way.  win and at: L ints of scratch. */
static void prefetch_points(int *point, const int *ord, int L, int n, bool backward, int *win,
                            int *at)
{
	for (int t = 0; t < L; t++)
		at[t] = point[ord[t]];
	for (int t = 0; t < L; t++) {
		int w = pass_fsdp_prefetch(L, n, backward ? L - 1 - t : t, backward, win);
		for (int q = 0; q < w; q++) {
			int tj = backward ? L - 1 - win[q] : win[q];
			if (at[tj] > point[ord[t]])
				at[tj] = point[ord[t]];
		}
	}
	for (int t = 0; t < L; t++)
		point[ord[t]] = at[t];
}

static bool push(Units *u, int old, bool copy)
{
	IrNode *x = u->m->nodes[old];
	const char *label = x->name ? x->name : ir_label(u->m, x);
	if (copy) {
		IrNode *c = arena_alloc(u->m->arena, sizeof *c);
		int *ops = arena_alloc(u->m->arena, sizeof(int) * (size_t)(x->nops ? x->nops : 1));
		if (!c || !ops)
			return false;
		*c = *x;
		memcpy(ops, x->ops, sizeof(int) * (size_t)x->nops);
		c->ops = ops;
		c->name = NULL;
		x = c;
		u->cmap[old] = u->nout;
	} else {
		u->map[old] = u->nout;
	}
	/* the annotations go by the new id; a copy is labelled by what it
	 * copies */
	int id = u->nout;
	ir_annots_copy(u->ann, id, u->m, old);
	if (copy)
		ir_set_label(u->ann, &(IrNode){.id = id}, label);
	u->out[u->nout++] = x;
	return true;
}

/* A unit's params not emitted yet, in front of its gathers moved up to
 * another unit's point. */
static bool push_params(Units *u, int x, int i)
{
	bool ok = true;
	for (int j = u->ps[x]; ok && j < u->ps[x + 1]; j++) {
		int p = u->pv[j];
		if (p >= i && !u->moved[p]) {
			ok = push(u, p, false);
			u->moved[p] = true;
		}
	}
	return ok;
}

/* Emits the gathers that units move to node i: the forward gathers of
 * those whose fpoint it is, then the backward copies and gathers of those
 * whose bpoint it is, unit by unit in running order.  Called for every i
 * in order. */
static bool emit_groups(Units *u, int i)
{
	bool ok = true;
	for (; ok && u->fnext < u->nford && u->fpoint[u->fq[u->fnext]] == i; u->fnext++) {
		int x = u->uix[u->fq[u->fnext]];
		ok = push_params(u, x, i);
		for (int j = u->fs[x]; ok && j < u->fs[x + 1]; j++) {
			ok = push(u, u->fv[j], false);
			u->moved[u->fv[j]] = true;
		}
	}
	for (; ok && u->bnext < u->nbord && u->bpoint[u->bq[u->bnext]] == i; u->bnext++) {
		int x = u->uix[u->bq[u->bnext]];
		for (int j = u->fs[x]; ok && j < u->fs[x + 1]; j++)
			if (u->need[u->fv[j]])
				ok = push(u, u->fv[j], true);
		for (int j = u->ls[x]; ok && j < u->ls[x + 1]; j++) {
			ok = push(u, u->lv[j], false);
			u->moved[u->lv[j]] = true;
		}
	}
	return ok;
}

/* The lists emit_groups walks (see Units), in a (scratch). */
static bool unit_lists(Units *u, Arena *a)
{
	int nu = u->nunits, n = u->n;
	u->uix = arena_alloc_raw(a, sizeof(int) * (size_t)n);
	u->ps = arena_alloc(a, sizeof(int) * (size_t)(nu + 2));
	u->fs = arena_alloc(a, sizeof(int) * (size_t)(nu + 2));
	u->ls = arena_alloc(a, sizeof(int) * (size_t)(nu + 2));
	u->pv = arena_alloc_raw(a, sizeof(int) * (size_t)n);
	u->fv = arena_alloc_raw(a, sizeof(int) * (size_t)n);
	u->lv = arena_alloc_raw(a, sizeof(int) * (size_t)n);
	u->fq = arena_alloc_raw(a, sizeof(int) * (size_t)(u->nford + 1));
	u->bq = arena_alloc_raw(a, sizeof(int) * (size_t)(u->nbord + 1));
	if (!u->uix || !u->ps || !u->fs || !u->ls || !u->pv || !u->fv || !u->lv || !u->fq || !u->bq)
		return false;
	for (int x = 0; x < nu; x++)
		u->uix[u->units[x]] = x;
	/* counting sorts by unit, node order kept: counts at [x + 2] */
	for (int c = 0; c < n; c++) {
		if (u->unit[c] >= 0)
			u->ps[u->uix[u->unit[c]] + 2]++;
		if (u->root[c] >= 0 && c < u->L)
			u->fs[u->uix[uof(u, c)] + 2]++;
		else if (u->root[c] >= 0 && c > u->L)
			u->ls[u->uix[uof(u, c)] + 2]++;
	}
	for (int x = 0; x < nu; x++) {
		u->ps[x + 2] += u->ps[x + 1];
		u->fs[x + 2] += u->fs[x + 1];
		u->ls[x + 2] += u->ls[x + 1];
	}
	for (int c = 0; c < n; c++) {
		if (u->unit[c] >= 0)
			u->pv[u->ps[u->uix[u->unit[c]] + 1]++] = c;
		if (u->root[c] >= 0 && c < u->L)
			u->fv[u->fs[u->uix[uof(u, c)] + 1]++] = c;
		else if (u->root[c] >= 0 && c > u->L)
			u->lv[u->ls[u->uix[uof(u, c)] + 1]++] = c;
	}
	/* by point, stably: insertion sorts of tens of units */
	const int *pt[2] = {u->fpoint, u->bpoint}, *src[2] = {u->ford, u->bord};
	int *dst[2] = {u->fq, u->bq}, cnt[2] = {u->nford, u->nbord};
	for (int s = 0; s < 2; s++)
		for (int j = 0; j < cnt[s]; j++) {
			int k = src[s][j], at = j;
			while (at > 0 && pt[s][dst[s][at - 1]] > pt[s][k]) {
				dst[s][at] = dst[s][at - 1];
				at--;
			}
			dst[s][at] = k;
		}
	u->fnext = u->bnext = 0;
	return true;
}

static void remap(Units *u)
{
	for (int i = 0; i < u->n; i++) {
		bool is_copy = u->cmap[i] >= 0;
		for (int pass = 0; pass < 1 + is_copy; pass++) {
			int nid = pass ? u->cmap[i] : u->map[i];
			IrNode *x = u->out[nid];
			bool late = pass || i > u->L;
			for (int k = 0; k < x->nops; k++) {
				int o = x->ops[k];
				x->ops[k] = late && u->root[o] >= 0 && o < u->L && u->cmap[o] >= 0
				                    ? u->cmap[o] : u->map[o];
			}
			int pf = ir_int_at(&u->ann->place_from, nid);
			int lp = ir_int_at(&u->ann->link_param, nid);
			if (pf >= 0 && pf < u->n)
				ir_int_set(u->ann, &u->ann->place_from, nid, u->map[pf]);
			if (lp >= 0 && lp < u->n)
				ir_int_set(u->ann, &u->ann->link_param, nid, u->map[lp]);
		}
	}
	for (int i = 0; i < u->nout; i++)
		u->out[i]->id = i;
}

static void report_memory(const IrModule *m)
{
	StateMem s;
	pass_state_memory(m, &s);
	fprintf(stderr, "dtmc: fsdp_units: per-rank resident bytes: params %lld, grads %lld, master "
	        "%lld, optimizer state %lld, total %lld\n", (long long)s.param, (long long)s.grad,
	        (long long)s.master, (long long)s.optim,
	        (long long)(s.param + s.grad + s.master + s.optim));
}

bool pass_fsdp_units(IrModule *m, Diag *d, const PassOptions *opt)
{
	if (opt && opt->verbose)
		report_memory(m);
	uint32_t Z = pass_zero_axes(m);
	if (m->train.zero < 3 || !Z || m->loss < 0)
		return true;
	Arena a;
	arena_init(&a);
	size_t nn = (size_t)m->nnodes;
	Units u = {.m = m, .n = m->nnodes, .L = m->loss, .ann = ir_module_derive(m)};
	u.unit = arena_alloc(&a, nn * sizeof(int));
	u.root = arena_alloc(&a, nn * sizeof(int));
	u.fpoint = arena_alloc(&a, nn * sizeof(int));
	u.bpoint = arena_alloc(&a, nn * sizeof(int));
	u.map = arena_alloc(&a, nn * sizeof(int));
	u.cmap = arena_alloc(&a, nn * sizeof(int));
	u.units = arena_alloc(&a, nn * sizeof(int));
	u.ford = arena_alloc(&a, nn * sizeof(int));
	u.bord = arena_alloc(&a, nn * sizeof(int));
	int *win = arena_alloc(&a, nn * sizeof(int)), *at = arena_alloc(&a, nn * sizeof(int));
	u.bwd = arena_alloc(&a, nn);
	u.need = arena_alloc(&a, nn);
	u.moved = arena_alloc(&a, nn);
	u.out = arena_alloc(m->arena, 2 * nn * sizeof(IrNode *));
	bool ok = u.unit && u.root && u.fpoint && u.bpoint && u.map && u.cmap && u.units &&
	          u.ford && u.bord && win && at && u.bwd && u.need && u.moved && u.out && u.ann;
	if (!ok) {
		arena_free(&a);
		diag_error(d, (SrcLoc){0}, "fsdp_units: out of memory");
		return false;
	}
	memset(u.bwd, 0, nn);
	memset(u.need, 0, nn);
	memset(u.moved, 0, nn);
	for (size_t i = 0; i < nn; i++)
		u.map[i] = u.cmap[i] = -1;
	find_chains(&u, Z);
	find_points(&u, m->train.reshard_after_forward);
	int depth = m->train.prefetch > (int64_t)nn ? (int)nn : (int)m->train.prefetch;
	u.nford = order_units(&u, u.fpoint, u.ford);
	u.nbord = order_units(&u, u.bpoint, u.bord);
	prefetch_points(u.fpoint, u.ford, u.nford, depth, false, win, at);
	prefetch_points(u.bpoint, u.bord, u.nbord, depth, true, win, at);
	ok = unit_lists(&u, &a);
	for (int i = 0; ok && i < u.n; i++) {
		ok = emit_groups(&u, i);
		if (ok && !u.moved[i])
			ok = push(&u, i, false);
	}
	if (!ok) {
		arena_free(&a);
		diag_error(d, (SrcLoc){0}, "fsdp_units: out of memory");
		return false;
	}
	remap(&u);
	m->loss = u.map[m->loss];
	for (int c = 0; c < m->nchooses; c++)
		m->chooses[c].node = u.map[m->chooses[c].node];
	u.ann->nodes = u.out;
	u.ann->nnodes = u.nout;
	u.ann->cap = (int)(2 * nn);
	ir_module_take_nodes(m, u.ann);
	arena_free(&a);
	return true;
}
