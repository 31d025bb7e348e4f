/* eval_spmd.c - every rank of a partitioned module, in f64, in lockstep.
 *
 * Local ops go through ir_eval_node on each rank's own interpreter; the
 * collectives (and shard_slice, the one local op whose result depends on
 * the rank) are implemented here over the ranks' buffers, with the groups
 * of mesh_group (members in row-major order of the group's axes, which is
 * also the order of the shards a gather concatenates).
 */
#include "interp/eval_spmd.h"
#include "interp/eval_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool ir_spmd_init(IrSpmd *s, const IrModule *m)
{
	memset(s, 0, sizeof *s);
	s->m = m;
	s->nranks = mesh_size(&m->mesh);
	s->rank = calloc((size_t)s->nranks, sizeof *s->rank);
	if (!s->rank)
		return false;
	for (int64_t r = 0; r < s->nranks; r++)
	{
		if (!ir_eval_init(&s->rank[r], m)) {
			ir_spmd_free(s);
			return false;
		}
		mesh_coords(&m->mesh, r, s->rank[r].coords);
		s->rank[r].partitioned = true;
	}
	return true;
}

void ir_spmd_free(IrSpmd *s)
{
	if (s->rank)
		for (int64_t r = 0; r < s->nranks; r++)
			if (s->rank[r].val)
				ir_eval_free(&s->rank[r]);
	free(s->rank);
	s->rank = NULL;
}

int ir_spmd_global_shape(const IrSpmd *s, int n, int64_t *shape)
{
	const IrNode *x = s->m->nodes[n];
	for (int d = 0; d < x->rank; d++)
		shape[d] = ir_global_dim(s->m, x, d);
	return x->rank;
}

/* Rank r's shard offsets of node x's global value. */
static void shard_offsets(const IrSpmd *s, const IrNode *x, int64_t r, const int64_t *g,
                          int64_t *off)
{
	const Mesh *mesh = &s->m->mesh;
	int64_t coords[IR_MAX_AXES] = {0};
	mesh_coords(mesh, r, coords);
	for (int d = 0; d < x->rank; d++) {
		int64_t parts = 1, idx = 0;
		for (int k = 0; ir_place(s->m, x)->known && d < ir_place(s->m, x)->ndims && k < ir_place(s->m, x)->naxes[d]; k++) {
			int a = ir_place(s->m, x)->axes[d][k];
			parts *= mesh->sizes[a];
			idx = idx * mesh->sizes[a] + coords[a];
		}
		off[d] = chunk_offset(g[d], parts, idx);
	}
}

/* Calls fn(local flat index, global flat index) for each element of rank
 * r's shard of x; the global index is -1 for the padding of an uneven
 * shard (local rows past the global extent). */
typedef void (*ElemFn)(double *loc, double *glob, int64_t li, int64_t gi, int mode);

static void each_elem(const IrSpmd *s, const IrNode *x, int64_t r, double *loc, double *glob,
                      ElemFn fn, int mode)
{
	int64_t g[IR_MAX_RANK], off[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
	ir_spmd_global_shape(s, x->id, g);
	shard_offsets(s, x, r, g, off);
	int64_t N = ir_node_numel(x);
	for (int64_t li = 0; li < N; li++) {
		int64_t gi = 0;
		for (int d = 0; d < x->rank && gi >= 0; d++)
			gi = off[d] + idx[d] < g[d] ? gi * g[d] + off[d] + idx[d] : -1;
		fn(loc, glob, li, gi, mode);
		for (int d = x->rank - 1; d >= 0; d--) {
			if (++idx[d] < x->shape[d])
				break;
			idx[d] = 0;
		}
	}
}

enum { EL_SCATTER, EL_SUM, EL_MAX, EL_SET };

static void elem(double *loc, double *glob, int64_t li, int64_t gi, int mode)
{
	if (gi < 0) { /* padding: zero, never gathered */
		if (mode == EL_SCATTER)
			loc[li] = 0;
		return;
	}
	switch (mode) {
	case EL_SCATTER:
		loc[li] = glob[gi];
		break;
	case EL_SUM:
		glob[gi] += loc[li];
		break;
	case EL_MAX:
		glob[gi] = loc[li] > glob[gi] ? loc[li] : glob[gi];
		break;
	default:
		glob[gi] = loc[li];
		break;
	}
}

int64_t ir_spmd_global_numel(const IrSpmd *s, int n)
{
	int64_t g[IR_MAX_RANK], N = 1;
	int rk = ir_spmd_global_shape(s, n, g);
	for (int d = 0; d < rk; d++)
		N *= g[d];
	return N;
}

void ir_spmd_set_global(IrSpmd *s, int n, const double *global)
{
	for (int64_t r = 0; r < s->nranks; r++)
		each_elem(s, s->m->nodes[n], r, s->rank[r].val[n], (double *)global, elem,
		          EL_SCATTER);
}

void ir_spmd_init_params(IrSpmd *s, uint64_t seed)
{
	for (int i = 0; i < s->m->nnodes; i++) {
		const IrNode *n = s->m->nodes[i];
		if ((n->op != IR_OP_PARAM && n->op != IR_OP_STATE) || ir_attr_init(n)->kind == IR_INIT_NONE)
			continue;
		int64_t N = ir_spmd_global_numel(s, i);
		double *g = malloc(sizeof(double) * (size_t)(N ? N : 1));
		if (!g)
			continue;
		ir_eval_fill_init(s->m, n, seed, N, g);
		ir_spmd_set_global(s, i, g);
		free(g);
	}
}

void ir_spmd_gather(const IrSpmd *s, int n, double *global)
{
	const IrNode *x = s->m->nodes[n];
	const Mesh *mesh = &s->m->mesh;
	int64_t N = ir_spmd_global_numel(s, n);
	bool max = ir_place(s->m, x)->partial && ir_place(s->m, x)->partial_op == IR_RED_MAX;
	for (int64_t i = 0; i < N; i++)
		global[i] = max ? -INFINITY : 0;
	uint32_t split = 0;
	for (int d = 0; d < ir_place(s->m, x)->ndims; d++)
		for (int k = 0; k < ir_place(s->m, x)->naxes[d]; k++)
			split |= 1u << ir_place(s->m, x)->axes[d][k];
	for (int64_t r = 0; r < s->nranks; r++) {
		/* one replica: coordinate 0 on the axes that neither split nor
		 * hold partial sums */
		int64_t c[IR_MAX_AXES] = {0};
		mesh_coords(mesh, r, c);
		bool skip = false;
		for (int a = 0; a < mesh->naxes; a++)
			if (!((split | ir_place(s->m, x)->partial) & (1u << a)) && c[a] != 0)
				skip = true;
		if (skip)
			continue;
		each_elem(s, x, r, s->rank[r].val[n], global, elem,
		          max ? EL_MAX : ir_place(s->m, x)->partial ? EL_SUM : EL_SET);
	}
	if (ir_place(s->m, x)->partial && ir_place(s->m, x)->partial_op == IR_RED_AVG) {
		double inv = 1.0 / (double)mesh_axes_size(mesh, ir_place(s->m, x)->partial);
		for (int64_t i = 0; i < N; i++)
			global[i] *= inv;
	}
}

/* ---- collectives ---- */

/* Copies `count` rows (of `inner` elements) along dim d, for each of
 * `outer` leading blocks: dst rows [doff, doff+count) of a dim of size
 * dn from src rows [soff, ...) of a dim of size sn. */
static void copy_rows(double *dst, int64_t dn, int64_t doff, const double *src, int64_t sn,
                      int64_t soff, int64_t count, int64_t outer, int64_t inner)
{
	for (int64_t o = 0; o < outer; o++)
		memcpy(dst + (o * dn + doff) * inner, src + (o * sn + soff) * inner,
		       sizeof(double) * (size_t)(count * inner));
}

static void reduce_into(double *acc, const double *x, int64_t N, IrRed red, bool first)
{
	for (int64_t i = 0; i < N; i++) {
		if (first)
			acc[i] = x[i];
		else if (red == IR_RED_MAX)
			acc[i] = x[i] > acc[i] ? x[i] : acc[i];
		else
			acc[i] += x[i];
	}
}

static bool ev_coll(IrSpmd *s, const IrNode *n, Diag *d)
{
	const IrModule *m = s->m;
	const IrNode *x = m->nodes[n->ops[0]];
	int64_t G = mesh_axes_size(&m->mesh, ir_attr_coll(n)->axes);
	int64_t *mem = malloc(sizeof(int64_t) * (size_t)G);
	int64_t Nx = ir_node_numel(x), Nn = ir_node_numel(n);
	double *acc = malloc(sizeof(double) * (size_t)(Nx ? Nx : 1));
	if (!mem || !acc) {
		free(mem);
		free(acc);
		return ir_eval_bad(d, n, "out of memory");
	}
	const IrAttrColl *ca = ir_attr_coll(n);
	int dim = ca->n > 0 ? (int)ca->args[0] : 0;
	int dim2 = ca->n > 1 ? (int)ca->args[1] : 0;
	/* results go to fresh buffers first: a rank's operand is read by its
	 * whole group */
	double **out = calloc((size_t)s->nranks, sizeof *out);
	bool ok = out != NULL;
	for (int64_t r = 0; ok && r < s->nranks; r++) {
		int64_t idx;
		mesh_group(&m->mesh, r, ir_attr_coll(n)->axes, mem, G, &idx);
		double *o = calloc((size_t)(Nn ? Nn : 1), sizeof *o);
		if (!(out[r] = o)) {
			ok = false;
			break;
		}
		const double *xr = s->rank[r].val[x->id];
		int64_t outer = prod(x->shape, 0, dim), inner = prod(x->shape, dim + 1, x->rank);
		switch (n->op) {
		case IR_OP_ALL_REDUCE:
		case IR_OP_REDUCE_SCATTER:
			for (int64_t k = 0; k < G; k++)
				reduce_into(acc, s->rank[mem[k]].val[x->id], Nx, ir_attr_coll(n)->red, k == 0);
			if (ir_attr_coll(n)->red == IR_RED_AVG)
				for (int64_t i = 0; i < Nx; i++)
					acc[i] /= (double)G;
			if (n->op == IR_OP_ALL_REDUCE)
				memcpy(o, acc, sizeof(double) * (size_t)Nx);
			else
				copy_rows(o, n->shape[dim], 0, acc, x->shape[dim], idx * n->shape[dim],
				          n->shape[dim], outer, inner);
			break;
		case IR_OP_ALL_GATHER:
			for (int64_t k = 0; k < G; k++)
				copy_rows(o, n->shape[dim], k * x->shape[dim], s->rank[mem[k]].val[x->id],
				          x->shape[dim], 0, x->shape[dim], outer, inner);
			break;
		case IR_OP_SHARD_SLICE:
			copy_rows(o, n->shape[dim], 0, xr, x->shape[dim], idx * n->shape[dim],
			          n->shape[dim], outer, inner);
			break;
		case IR_OP_ALL_TO_ALL: {
			/* member k's chunk idx of dim `dim` lands at block k of dim2 */
			int64_t c = n->shape[dim], b = x->shape[dim2];
			int lo = dim < dim2 ? dim : dim2, hi = dim < dim2 ? dim2 : dim;
			int64_t i0 = prod(x->shape, 0, lo), i1 = prod(x->shape, lo + 1, hi);
			int64_t i2 = prod(x->shape, hi + 1, x->rank);
			for (int64_t k = 0; k < G; k++) {
				const double *src = s->rank[mem[k]].val[x->id];
				/* walk (outer lo, lo, mid, hi, inner) with both shapes */
				int64_t xs_lo = x->shape[lo], xs_hi = x->shape[hi];
				int64_t ns_lo = n->shape[lo], ns_hi = n->shape[hi];
				for (int64_t a0 = 0; a0 < i0; a0++)
					for (int64_t l = 0; l < ns_lo; l++)
						for (int64_t a1 = 0; a1 < i1; a1++)
							for (int64_t h = 0; h < ns_hi; h++) {
								/* the output's (l, h) from the source */
								int64_t sl = l, sh = h, dl = l, dh = h;
								if (lo == dim) { /* lo split, hi gathered */
									sl = idx * c + l;
									if (h / b != k)
										continue;
									sh = h % b;
								} else { /* hi split, lo gathered */
									sh = idx * c + h;
									if (l / b != k)
										continue;
									sl = l % b;
								}
								const double *sp = src + (((a0 * xs_lo + sl) * i1 + a1) *
								                           xs_hi + sh) * i2;
								double *dp = o + (((a0 * ns_lo + dl) * i1 + a1) * ns_hi +
								                  dh) * i2;
								memcpy(dp, sp, sizeof(double) * (size_t)i2);
							}
			}
			break;
		}
		case IR_OP_BROADCAST:
			memcpy(o, s->rank[mem[ca->root]].val[x->id], sizeof(double) * (size_t)Nx);
			break;
		default:
			ok = false;
			break;
		}
	}
	if (ok)
		for (int64_t r = 0; r < s->nranks; r++) {
			memcpy(s->rank[r].val[n->id], out[r], sizeof(double) * (size_t)Nn);
		}
	for (int64_t r = 0; out && r < s->nranks; r++)
		free(out[r]);
	free(out);
	free(mem);
	free(acc);
	if (!ok)
		return ir_eval_bad(d, n, "not supported by the SPMD interpreter");
	return true;
}

/* A send/recv's mirror flag (ir.h: to and from member shift - g). */
static bool p2p_mirror(const IrAttrColl *a)
{
	return a->n > 1 && a->args[1];
}

/* send and recv pair in program order (the runtime's per-peer FIFO): a
 * recv takes the oldest unmatched send of its axes, shift and size; a
 * send's value is its operand, and rank r's recv gets what the member
 * shift places before it in the group sent. */
static bool ev_p2p(IrSpmd *s, const IrNode *n, int *pending, int *npending, Diag *d)
{
	const IrModule *m = s->m;
	const IrAttrColl *ca = ir_attr_coll(n);
	int64_t Nn = ir_node_numel(n);
	if (n->op == IR_OP_SEND) {
		for (int64_t r = 0; r < s->nranks; r++)
			memcpy(s->rank[r].val[n->id], s->rank[r].val[n->ops[0]],
			       sizeof(double) * (size_t)Nn);
		pending[(*npending)++] = n->id;
		return true;
	}
	int k = 0;
	for (; k < *npending; k++) {
		const IrNode *x = m->nodes[pending[k]];
		const IrAttrColl *xa = ir_attr_coll(x);
		if (xa->axes == ca->axes && xa->shift == ca->shift && p2p_mirror(xa) == p2p_mirror(ca) &&
		    ir_node_numel(x) == Nn)
			break;
	}
	if (k == *npending)
		return ir_eval_bad(d, n, "recv with no matching send before it");
	int sid = pending[k];
	memmove(pending + k, pending + k + 1, sizeof(int) * (size_t)(*npending - k - 1));
	(*npending)--;
	int64_t G = mesh_axes_size(&m->mesh, ca->axes);
	int64_t *mem = malloc(sizeof(int64_t) * (size_t)(G ? G : 1));
	if (!mem)
		return ir_eval_bad(d, n, "out of memory");
	for (int64_t r = 0; r < s->nranks; r++) {
		int64_t idx;
		mesh_group(&m->mesh, r, ca->axes, mem, G, &idx);
		int64_t k = p2p_mirror(ca) ? ca->shift - idx : idx - ca->shift;
		int64_t from = mem[(k % G + G) % G];
		memcpy(s->rank[r].val[n->id], s->rank[from].val[sid], sizeof(double) * (size_t)Nn);
	}
	free(mem);
	return true;
}

bool ir_spmd_run(IrSpmd *s, Diag *d, uint64_t seed, int64_t step)
{
	for (int64_t r = 0; r < s->nranks; r++) {
		s->rank[r].seed = seed;
		s->rank[r].step = step;
	}
	int *pending = malloc(sizeof(int) * (size_t)(s->m->nnodes ? s->m->nnodes : 1));
	int npending = 0;
	if (!pending)
		return false;
	bool ok = true;
	for (int i = 0; ok && i < s->m->nnodes; i++) {
		const IrNode *n = s->m->nodes[i];
		if (n->op == IR_OP_SEND || n->op == IR_OP_RECV) {
			ok = ev_p2p(s, n, pending, &npending, d);
			continue;
		}
		if ((ir_op_flags(n->op) & OPF_COLL) || n->op == IR_OP_SHARD_SLICE) {
			ok = ev_coll(s, n, d);
			continue;
		}
		for (int64_t r = 0; ok && r < s->nranks; r++)
			ok = ir_eval_node(&s->rank[r], i, d);
	}
	free(pending);
	return ok;
}
