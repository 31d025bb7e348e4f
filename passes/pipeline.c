/* pipeline.c - passes "stages" and "pipeline": pipeline parallelism.
 *
 * P = the size of mesh axis `pp`, v = the virtual stages per rank of an
 * interleaved schedule (1 otherwise), K = P * v model chunks; chunk k runs
 * on pp coordinate k mod P (Megatron's layout).
 *
 * "stages" runs first, on the forward program.  Chunks come from the
 * `stage` annotations when the annotated values are exactly 0..K-1;
 * otherwise (none, or as many as P while an interleaved schedule needs K)
 * the non-leaf forward nodes are cut, in program order, where the running
 * sum of estimated FLOPs crosses multiples of total/K.  A node without a
 * chunk takes the largest of its non-leaf operands' (the head after the
 * last block lands on the last chunk), or, when it reads leaves only
 * (transpose(wte)), the smallest of its users'.  Leaves (params, inputs)
 * take the smallest chunk that uses them: a param used on several chunks
 * (a tied embedding) is owned there, and its gradient terms and optimizer
 * step follow it.  The micro-batch, autodiff, optimizer and partition
 * passes copy the chunk to everything they derive.
 *
 * "pipeline" runs after `bucket`, on the per-rank program.  Each node has
 * a chunk (rank = chunk mod P), or none (the global grad norm, which every
 * rank computes), or is *leafy*: a leaf, or a view (reshape, slice,
 * permute, cast) or a collective within the stage (ZeRO-3's all_gather of
 * a param shard) of leafy values outside the optimizer step (input
 * micro-batch slices, transpose(wte)), cloned into every rank that uses it
 * and placed where that rank first needs it.  The output module is the concatenation of P
 * programs, one per pp coordinate (IrNode.stage = that coordinate), each in
 * its schedule's order:
 *   - the schedule (passes/schedule.h) lists, per rank, the forward and
 *     backward work items (micro-batch, chunk); a node belongs to the item
 *     of its phase, micro-batch and chunk (ZB-H1 splits a backward item
 *     into B, what leads to a value another rank or item reads, and W, the
 *     rest: the weight gradients); nodes of no item (gradient
 *     accumulation, bucket reductions, the optimizer) run as soon as their
 *     operands are there, or at the end of the step when they read another
 *     rank's value or are a collective over pp; those of leaves only
 *     (ZeRO-3's param all_gathers) run where first needed;
 *   - a value used on another rank is sent right after it is computed and
 *     received where it is first needed (send is buffered, recv blocks);
 *     per pair of ranks, sends are ordered as the receiver receives;
 *   - grad_norm keeps on each rank the gradients that rank owns and its
 *     squares are all_reduced over pp as well (partition adds pp to the
 *     groups): every rank clips with the global norm;
 *   - the loss (on the last chunk's rank) is all_reduced over pp with
 *     zeros elsewhere, so every rank logs it;
 *   - a param used on ranks other than its owner's (the tied embedding)
 *     is sent, after the owner's optimizer step, to those ranks, which
 *     assign it to their copy.
 * The finished programs are simulated against each other (sends buffered,
 * receives and pp collectives blocking) so a schedule that would deadlock
 * or mismatch is a compile-time error, never a hang.
 */
#include "pipeline.h"
#include "schedule.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pipeline_axis(const IrModule *m)
{
	int a = mesh_axis_index(&m->mesh, "pp");
	return a >= 0 && m->mesh.sizes[a] > 1 ? a : -1;
}

static bool is_leaf_op(IrOp op)
{
	return op == IR_OP_PARAM || op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_STATE;
}

/* Cheap enough to recompute on every rank that reads it. */
static bool is_view_op(IrOp op)
{
	return op == IR_OP_RESHAPE || op == IR_OP_SLICE || op == IR_OP_PERMUTE || op == IR_OP_CAST;
}

static int virtual_stages(const IrModule *m)
{
	const char *s = m->train.schedule;
	if (s && strcmp(s, "interleaved") == 0 && m->train.virtual_stages > 1)
		return (int)m->train.virtual_stages;
	return 1;
}

/* FLOPs, roughly: the auto split only needs proportions. */
static double node_cost(const IrModule *m, const IrNode *n)
{
	double out = (double)ir_node_numel(n);
	if (n->op == IR_OP_MATMUL && n->nops == 2) {
		const IrNode *a = m->nodes[n->ops[0]];
		return 2.0 * out * (double)(a->rank ? a->shape[a->rank - 1] : 1);
	}
	if (n->op == IR_OP_ATTENTION && n->nops >= 1) {
		const IrNode *q = m->nodes[n->ops[0]];
		double t = q->rank >= 2 ? (double)q->shape[q->rank - 2] : 1;
		return 4.0 * (double)ir_node_numel(q) * t;
	}
	return out;
}

bool pass_stages(IrModule *m, Diag *d, const PassOptions *opt)
{
	int ax = pipeline_axis(m);
	if (ax < 0 || m->nnodes == 0)
		return true;
	int P = (int)m->mesh.sizes[ax], V = virtual_stages(m), K = P * V;
	if (m->loss < 0) {
		diag_error(d, (SrcLoc){0}, "pp = %d: pipeline stages need a loss", P);
		return false;
	}
	int n = m->nnodes;
	int *chunk = malloc(sizeof(int) * (size_t)n);
	int *umin = malloc(sizeof(int) * (size_t)n);
	if (!chunk || !umin) {
		free(chunk);
		free(umin);
		diag_error(d, (SrcLoc){0}, "stages: out of memory");
		return false;
	}
	int amax = -1;
	double total = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		if (is_leaf_op(x->op))
			continue;
		if (x->stage > amax)
			amax = x->stage;
		total += node_cost(m, x);
	}
	bool annotated = amax + 1 == K;
	double cum = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		chunk[i] = -1;
		umin[i] = INT_MAX;
		if (is_leaf_op(x->op))
			continue;
		if (annotated) {
			chunk[i] = x->stage;
		} else {
			double c = node_cost(m, x);
			int k = total > 0 ? (int)((cum + c / 2) * K / total) : 0;
			chunk[i] = k < 0 ? 0 : k >= K ? K - 1 : k;
			cum += c;
		}
	}
	/* the largest non-leaf operand's chunk, never less (forward edges
	 * only go to later chunks) */
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		if (is_leaf_op(x->op))
			continue;
		int mx = -1;
		for (int k = 0; k < x->nops; k++)
			if (!is_leaf_op(m->nodes[x->ops[k]]->op) && chunk[x->ops[k]] > mx)
				mx = chunk[x->ops[k]];
		if (chunk[i] < 0 || mx > chunk[i])
			chunk[i] = mx;
	}
	/* nodes of leaves only, and leaves: their users' smallest chunk */
	for (int i = n - 1; i >= 0; i--) {
		const IrNode *x = m->nodes[i];
		if (chunk[i] < 0)
			chunk[i] = umin[i] == INT_MAX ? 0 : umin[i];
		for (int k = 0; k < x->nops; k++)
			if (chunk[i] < umin[x->ops[k]])
				umin[x->ops[k]] = chunk[i];
	}
	for (int i = 0; i < n; i++)
		m->nodes[i]->stage = chunk[i];
	if (opt && opt->verbose)
		fprintf(stderr, "dtmc: stages: %d model chunk%s on pp = %d (%s)\n", K,
		        K == 1 ? "" : "s", P, annotated ? "from the stage annotations" :
		                                          "split by estimated compute");
	free(chunk);
	free(umin);
	return true;
}

/* ---- pass "pipeline" ---- */

enum { RANK_ALL = -1 };

typedef enum EntKind { E_NODE, E_SEND, E_RECV, E_LOSS, E_SYNC } EntKind;

/* One step of a rank's program before it becomes nodes. */
typedef struct Ent {
	EntKind kind;
	int node;  /* E_NODE: the node; E_SEND/E_RECV: the value moved (for a
	            * param sync: its last update); E_SYNC: the param */
	int peer;  /* E_SEND: to; E_RECV/E_SYNC: from */
} Ent;

typedef struct EntList {
	Ent *e;
	int n, cap;
} EntList;

typedef struct Pl {
	IrModule *m;
	Diag *d;
	int P, V, M, ax, nn;
	int *rank;       /* [nn]: rank of the node, or RANK_ALL */
	int *phase;      /* [nn] */
	bool *leafy;     /* [nn] */
	uint64_t *dest;  /* [nn]: ranks that receive the value */
	uint64_t *users; /* [nn]: ranks using a leafy value */
	int *upd;        /* [nn]: per param, its last in-place update, or -1 */
	uint64_t *sync;  /* [nn]: per param, ranks its update is sent to */
	int *syncof;     /* [nn]: per last update, the param, or -1 */
	/* per rank being built */
	bool *placed;
	bool *recvd;
	EntList *list;   /* [P] */
	int cur_work, cur_mb, cur_chunk; /* the item being placed, or cur_mb -1 */
	bool *wgrad;     /* [nn]: ZB-H1: backward work only param gradients need */
	bool failed;
} Pl;

static bool oom(Pl *p)
{
	if (!p->failed)
		diag_error(p->d, (SrcLoc){0}, "pipeline: out of memory");
	p->failed = true;
	return false;
}

static bool push(Pl *p, EntList *l, EntKind k, int node, int peer)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 256;
		Ent *e = realloc(l->e, sizeof(Ent) * (size_t)cap);
		if (!e)
			return oom(p);
		l->e = e;
		l->cap = cap;
	}
	l->e[l->n++] = (Ent){ k, node, peer };
	return true;
}

/* A pp collective: every rank runs it at the same point. */
static bool pp_coll(const Pl *p, const IrNode *n)
{
	return (ir_op_flags(n->op) & OPF_COLL) && n->op != IR_OP_SEND && n->op != IR_OP_RECV &&
	       (n->attrs.mesh_axes & (1u << p->ax));
}

/* The operand k of node i read on rank r: false when the pipeline drops
 * it (grad_norm keeps the gradients its rank owns). */
static bool reads(const Pl *p, int i, int k, int r)
{
	const IrNode *n = p->m->nodes[i];
	int u = n->ops[k];
	if (n->op == IR_OP_GRAD_NORM && p->rank[i] == RANK_ALL && !p->leafy[u] &&
	    p->rank[u] != RANK_ALL && p->rank[u] != r)
		return false;
	return true;
}

static bool remote(const Pl *p, int u, int r)
{
	return !p->leafy[u] && p->rank[u] != RANK_ALL && p->rank[u] != r;
}

/* Node i's micro-batch; with one micro-batch (nothing unrolled) every
 * node is micro-batch 0's. */
static int node_mb(const Pl *p, int i)
{
	int mb = p->m->nodes[i]->mb;
	return mb >= 0 ? mb : p->M == 1 ? 0 : -1;
}

/* Does node i belong to a schedule item (else it is free)? */
static bool in_item(const Pl *p, int i)
{
	return !p->leafy[i] && p->rank[i] != RANK_ALL && node_mb(p, i) >= 0 &&
	       (p->phase[i] == IR_PHASE_FORWARD || p->phase[i] == IR_PHASE_BACKWARD);
}

/* The schedule work a node of an item belongs to. */
static int work_of(const Pl *p, int i)
{
	if (p->phase[i] == IR_PHASE_FORWARD)
		return SCHED_F;
	return p->wgrad && p->wgrad[i] ? SCHED_W : SCHED_B;
}

static bool place(Pl *p, int r, int i)
{
	if (p->placed[i] || p->failed)
		return !p->failed;
	const IrNode *n = p->m->nodes[i];
	if (in_item(p, i)) {
		int work = work_of(p, i);
		if (p->cur_mb != node_mb(p, i) || p->cur_work != work || p->cur_chunk != n->stage) {
			diag_error(p->d, n->loc, "internal: pipeline: %s %%%d (micro-batch %d, chunk "
			           "%d) is needed before the schedule runs it", ir_op_name(n->op), i,
			           node_mb(p, i), n->stage);
			p->failed = true;
			return false;
		}
	}
	p->placed[i] = true; /* a cycle cannot happen: operands have smaller ids */
	EntList *l = &p->list[r];
	for (int k = 0; k < n->nops; k++) {
		int u = n->ops[k];
		if (!reads(p, i, k, r))
			continue;
		if (remote(p, u, r)) {
			if (!p->recvd[u]) {
				p->recvd[u] = true;
				if (!push(p, l, E_RECV, u, p->rank[u]))
					return false;
			}
		} else if (!place(p, r, u)) {
			return false;
		}
	}
	if (!push(p, l, E_NODE, i, -1))
		return false;
	for (int q = 0; q < p->P; q++)
		if ((p->dest[i] >> q) & 1)
			if (!push(p, l, E_SEND, i, q))
				return false;
	if (p->syncof[i] >= 0)
		for (int q = 0; q < p->P; q++)
			if ((p->sync[p->syncof[i]] >> q) & 1)
				if (!push(p, l, E_SEND, i, q))
					return false;
	return true;
}

/* May node i run now on rank r, ahead of the end of the step? */
static bool eager_ok(const Pl *p, int i, int r)
{
	const IrNode *n = p->m->nodes[i];
	if (pp_coll(p, n))
		return false;
	/* of leaves only (ZeRO-3's param all_gathers): when first needed,
	 * so a gathered unit lives from its use, not from the step's start */
	bool computed = false;
	for (int k = 0; k < n->nops; k++)
		computed |= !p->leafy[n->ops[k]];
	if (!computed)
		return false;
	for (int k = 0; k < n->nops; k++) {
		int u = n->ops[k];
		if (!reads(p, i, k, r))
			continue;
		if (remote(p, u, r))
			return false;
		if (!p->leafy[u] && !p->placed[u])
			return false;
	}
	return true;
}

static bool on_rank(const Pl *p, int i, int r)
{
	return !p->leafy[i] && (p->rank[i] == r || p->rank[i] == RANK_ALL);
}

/* The item key of node i (micro-batch, model chunk, work), or -1 for a
 * node of no item of this pipeline. */
static int item_key(const Pl *p, int i)
{
	const IrNode *n = p->m->nodes[i];
	int K = p->P * p->V;
	int mb = node_mb(p, i);
	if (mb < 0 || mb >= p->M || n->stage < 0 || n->stage >= K)
		return -1;
	return (mb * K + n->stage) * 3 + work_of(p, i);
}

static bool build_rank(Pl *p, int r, const SchedItem *items, int nitems, const int *loss_rank)
{
	memset(p->placed, 0, sizeof(bool) * (size_t)p->nn);
	memset(p->recvd, 0, sizeof(bool) * (size_t)p->nn);
	int nn = p->nn;
	/* Which nodes each item places, and the free ones, found in one pass
	 * rather than one per item (the module grows with M, and so does the
	 * number of items): byitem[start[key] ..) lists an item's nodes in
	 * node order, freel the rank's free nodes not placed yet. */
	int nkeys = p->M * p->P * p->V * 3;
	int *start = calloc((size_t)nkeys + 2, sizeof(int));
	int *byitem = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
	int *freel = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
	if (!start || !byitem || !freel) {
		free(start);
		free(byitem);
		free(freel);
		return oom(p);
	}
	int nfree = 0;
	for (int i = 0; i < nn; i++) {
		if (!on_rank(p, i, r))
			continue;
		if (in_item(p, i)) {
			int key = item_key(p, i);
			if (key >= 0)
				start[key + 2]++;
		} else if (i != p->m->loss) {
			freel[nfree++] = i;
		}
	}
	for (int k = 0; k < nkeys; k++)
		start[k + 2] += start[k + 1];
	for (int i = 0; i < nn; i++) {
		int key = on_rank(p, i, r) && in_item(p, i) ? item_key(p, i) : -1;
		if (key >= 0)
			byitem[start[key + 1]++] = i;
	}
	/* every input on every rank, in order: the data feed fills the
	 * same inputs everywhere */
	for (int i = 0; i < nn && !p->failed; i++)
		if (p->m->nodes[i]->op == IR_OP_INPUT)
			place(p, r, i);
	for (int t = 0; t < nitems && !p->failed; t++) {
		p->cur_work = items[t].work;
		p->cur_mb = items[t].mb;
		p->cur_chunk = items[t].chunk * p->P + r;
		int K = p->P * p->V;
		if (p->cur_mb >= 0 && p->cur_mb < p->M && p->cur_chunk >= 0 && p->cur_chunk < K) {
			int key = (p->cur_mb * K + p->cur_chunk) * 3 + p->cur_work;
			for (int j = start[key]; j < start[key + 1] && !p->failed; j++)
				place(p, r, byitem[j]);
		}
		/* free nodes whose operands are all here (the placed ones leave
		 * the list) */
		int k = 0;
		for (int j = 0; j < nfree; j++) {
			int i = freel[j];
			if (!p->failed && !p->placed[i] && eager_ok(p, i, r))
				place(p, r, i);
			if (!p->placed[i])
				freel[k++] = i;
		}
		nfree = k;
	}
	free(start);
	free(byitem);
	free(freel);
	p->cur_mb = -1;
	/* the end of the step: the loss, then the rest in program order */
	if (!p->failed && r == *loss_rank)
		place(p, r, p->m->loss);
	if (!p->failed && !push(p, &p->list[r], E_LOSS, p->m->loss, -1))
		return false;
	for (int i = 0; i < nn && !p->failed; i++)
		if (on_rank(p, i, r) && !p->placed[i]) {
			if (in_item(p, i)) {
				const IrNode *n = p->m->nodes[i];
				diag_error(p->d, n->loc, "internal: pipeline: %s %%%d (micro-batch %d, "
				           "chunk %d) is in no schedule item", ir_op_name(n->op), i, node_mb(p, i),
				           n->stage);
				p->failed = true;
				break;
			}
			place(p, r, i);
		}
	for (int i = 0; i < nn && !p->failed; i++)
		if (p->m->nodes[i]->op == IR_OP_PARAM && ((p->sync[i] >> r) & 1))
			if (!push(p, &p->list[r], E_SYNC, i, p->rank[p->upd[i]]))
				return false;
	return !p->failed;
}

/* The value an entry receives, as the sender names it. */
static int recv_key(const Pl *p, const Ent *e)
{
	return e->kind == E_SYNC ? p->upd[e->node] : e->node;
}

/* Per pair of ranks, the sender's sends in the order the receiver
 * receives: a send may move later, never before its value. */
static bool order_sends(Pl *p)
{
	for (int a = 0; a < p->P; a++)
		for (int b = 0; b < p->P; b++) {
			if (a == b)
				continue;
			EntList *la = &p->list[a], *lb = &p->list[b];
			int nq = 0;
			for (int j = 0; j < lb->n; j++)
				if ((lb->e[j].kind == E_RECV || lb->e[j].kind == E_SYNC) &&
				    lb->e[j].peer == a)
					nq++;
			int ns = 0;
			for (int j = 0; j < la->n; j++)
				if (la->e[j].kind == E_SEND && la->e[j].peer == b)
					ns++;
			if (ns != nq) {
				diag_error(p->d, (SrcLoc){0}, "internal: pipeline: pp rank %d sends %d "
				           "values to rank %d, which receives %d", a, ns, b, nq);
				p->failed = true;
				return false;
			}
			if (!nq)
				continue;
			int *want = malloc(sizeof(int) * (size_t)nq);
			Ent *out = malloc(sizeof(Ent) * (size_t)la->n);
			bool *have = calloc((size_t)p->nn, sizeof(bool));
			if (!want || !out || !have) {
				free(want);
				free(out);
				free(have);
				return oom(p);
			}
			nq = 0;
			for (int j = 0; j < lb->n; j++)
				if ((lb->e[j].kind == E_RECV || lb->e[j].kind == E_SYNC) &&
				    lb->e[j].peer == a)
					want[nq++] = recv_key(p, &lb->e[j]);
			int no = 0, q = 0;
			for (int j = 0; j < la->n; j++) {
				Ent e = la->e[j];
				if (e.kind == E_SEND && e.peer == b)
					continue;
				out[no++] = e;
				if (e.kind == E_NODE)
					have[e.node] = true;
				while (q < nq && have[want[q]])
					out[no++] = (Ent){ E_SEND, want[q++], b };
			}
			bool ok = q == nq;
			if (ok)
				memcpy(la->e, out, sizeof(Ent) * (size_t)no);
			else
				diag_error(p->d, (SrcLoc){0}, "internal: pipeline: pp rank %d receives "
				           "%%%d from rank %d, which never computes it", b, want[q], a);
			free(want);
			free(out);
			free(have);
			if (!ok) {
				p->failed = true;
				return false;
			}
		}
	return true;
}

/* Runs the P programs against each other: sends are buffered, a receive
 * waits for its message (which must be the one it expects), a pp
 * collective waits for every rank.  Reports a deadlock as an error. */
static bool simulate(Pl *p)
{
	int P = p->P;
	size_t np = P > 0 && P <= 64 ? (size_t)P : 1;
	int *pc = calloc(np, sizeof(int));
	/* per (from, to) a FIFO of values in flight */
	int *qh = calloc(np * np, sizeof(int));
	int *qt = calloc(np * np, sizeof(int));
	size_t total = 0;
	for (int r = 0; r < P; r++)
		total += (size_t)p->list[r].n;
	int *q = malloc(sizeof(int) * np * np * (total + 1));
	if (!pc || !qh || !qt || !q) {
		free(pc);
		free(qh);
		free(qt);
		free(q);
		return oom(p);
	}
	bool ok = true;
	for (;;) {
		bool moved = false, done = true;
		for (int r = 0; r < P; r++) {
			EntList *l = &p->list[r];
			while (pc[r] < l->n) {
				Ent *e = &l->e[pc[r]];
				if (e->kind == E_SEND) {
					int k = r * P + e->peer;
					q[(size_t)k * (total + 1) + (size_t)qt[k]++] = e->node;
				} else if (e->kind == E_RECV || e->kind == E_SYNC) {
					int k = e->peer * P + r;
					if (qh[k] == qt[k])
						break;
					int v = q[(size_t)k * (total + 1) + (size_t)qh[k]++];
					if (v != recv_key(p, e)) {
						diag_error(p->d, (SrcLoc){0}, "internal: pipeline: pp rank "
						           "%d expects %%%d from rank %d but gets %%%d", r,
						           recv_key(p, e), e->peer, v);
						ok = false;
						goto out;
					}
				} else if (e->kind == E_LOSS ||
				           (e->kind == E_NODE && pp_coll(p, p->m->nodes[e->node]))) {
					/* every rank at this same collective? */
					bool all = true;
					for (int s = 0; s < P && all; s++) {
						const EntList *ls = &p->list[s];
						all = pc[s] < ls->n && ls->e[pc[s]].kind == e->kind &&
						      ls->e[pc[s]].node == e->node;
					}
					if (!all)
						break;
					for (int s = 0; s < P; s++)
						if (s != r)
							pc[s]++;
				}
				pc[r]++;
				moved = true;
			}
			if (pc[r] < l->n)
				done = false;
		}
		if (done)
			break;
		if (!moved) {
			char where[1024];
			int w = 0;
			for (int r = 0; r < P && w < (int)sizeof where - 64; r++) {
				const EntList *l = &p->list[r];
				const Ent *e = pc[r] < l->n ? &l->e[pc[r]] : NULL;
				const IrNode *x = e ? p->m->nodes[recv_key(p, e)] : NULL;
				w += snprintf(where + w, sizeof where - (size_t)w,
				              "%s pp rank %d at %s %%%d (%s%s%s, micro-batch %d)",
				              r ? ";" : "", r, !e ? "the end" : e->kind == E_RECV ||
				              e->kind == E_SYNC ? "the recv of" : "the pp collective",
				              x ? x->id : -1, x ? ir_op_name(x->op) : "", x && x->name ? " " : "",
				              x && x->name ? x->name : "", x ? x->mb : -1);
			}
			diag_error(p->d, (SrcLoc){0}, "internal: pipeline: the stage programs "
			           "deadlock (%s)", where);
			ok = false;
			break;
		}
	}
out:
	free(pc);
	free(qh);
	free(qt);
	free(q);
	if (!ok)
		p->failed = true;
	return ok;
}

static void copy_type(IrNode *to, const IrNode *from)
{
	to->dtype = from->dtype;
	to->rank = from->rank;
	memcpy(to->shape, from->shape, sizeof to->shape);
	to->place = from->place;
}

static IrNode *new_node(Pl *p, IrModule *out, IrOp op, const int *ops, int nops,
                        const IrNode *like, int r, int phase)
{
	IrNode *n = ir_node_new(out, op, ops, nops, like->loc);
	if (!n) {
		oom(p);
		return NULL;
	}
	copy_type(n, like);
	n->stage = r;
	n->mb = like->mb;
	n->phase = phase;
	n->place_from = -1;
	return n;
}

static bool materialise(Pl *p, IrModule *out, int *map, int *loss_out)
{
	IrModule *m = p->m;
	int nn = p->nn;
	uint32_t ppm = 1u << p->ax;
	int *ops = malloc(sizeof(int) * (size_t)(nn + 2));
	if (!ops)
		return oom(p);
	for (int r = 0; r < p->P && !p->failed; r++) {
		int *mr = map + (size_t)r * (size_t)nn;
		for (int i = 0; i < nn; i++)
			mr[i] = -1;
		const EntList *l = &p->list[r];
		for (int j = 0; j < l->n && !p->failed; j++) {
			const Ent *e = &l->e[j];
			const IrNode *n = m->nodes[e->node];
			if (e->kind == E_NODE) {
				int no = 0;
				for (int k = 0; k < n->nops; k++)
					if (reads(p, e->node, k, r))
						ops[no++] = mr[n->ops[k]];
				for (int k = 0; k < no; k++)
					if (ops[k] < 0) {
						diag_error(p->d, n->loc, "internal: pipeline: %s %%%d reads a "
						           "value not on pp rank %d", ir_op_name(n->op),
						           e->node, r);
						p->failed = true;
						break;
					}
				if (p->failed)
					break;
				IrNode *c;
				if (n->op == IR_OP_GRAD_NORM && no == 0) {
					/* this rank owns no gradient of the group */
					c = new_node(p, out, IR_OP_CONST, NULL, 0, n, r, p->phase[e->node]);
					if (c)
						c->name = NULL;
				} else {
					c = ir_node_copy(out, n, ops, no);
					if (!c) {
						oom(p);
						break;
					}
					int id = c->id;
					c->stage = r;
					c->phase = p->phase[e->node];
					c->choose = -1;
					c->place_from = n->place_from >= 0 ? mr[n->place_from] : -1;
					if (c->place_from == id)
						c->place_from = -1;
				}
				if (!c)
					break;
				mr[e->node] = c->id;
			} else if (e->kind == E_SEND) {
				int x = mr[e->node];
				IrNode *c = x < 0 ? NULL : new_node(p, out, IR_OP_SEND, &x, 1, n, r,
				                                    p->syncof[e->node] >= 0
				                                        ? IR_PHASE_OPTIMIZER
				                                        : p->phase[e->node]);
				if (!c) {
					if (x < 0)
						diag_error(p->d, n->loc, "internal: pipeline: a send of %%%d "
						           "before it is computed", e->node);
					p->failed = true;
					break;
				}
				c->attrs.mesh_axes = ppm;
				c->attrs.nints = 1;
				c->attrs.ints[0] = e->peer - r;
			} else if (e->kind == E_RECV) {
				IrNode *c = new_node(p, out, IR_OP_RECV, NULL, 0, n, r, p->phase[e->node]);
				if (!c)
					break;
				c->attrs.mesh_axes = ppm;
				c->attrs.nints = 1;
				c->attrs.ints[0] = r - e->peer;
				mr[e->node] = c->id;
			} else if (e->kind == E_SYNC) {
				IrNode *c = new_node(p, out, IR_OP_RECV, NULL, 0, n, r, IR_PHASE_OPTIMIZER);
				if (!c)
					break;
				c->attrs.mesh_axes = ppm;
				c->attrs.nints = 1;
				c->attrs.ints[0] = r - e->peer;
				int ab[2] = { mr[e->node], c->id };
				if (ab[0] < 0)
					continue; /* the param is not on this rank after all */
				IrNode *a = new_node(p, out, IR_OP_ASSIGN, ab, 2, n, r, IR_PHASE_OPTIMIZER);
				if (!a)
					break;
				a->role = n->role;
				a->name = NULL;
			} else { /* E_LOSS */
				int x = mr[m->loss];
				IrNode *src = NULL;
				if (x < 0) {
					src = new_node(p, out, IR_OP_CONST, NULL, 0, n, r, IR_PHASE_FORWARD);
					if (!src)
						break;
					src->attrs.f[0] = 0;
					src->name = NULL;
					src->role = IR_ROLE_ACT;
					x = src->id;
				} else {
					out->nodes[x]->name = NULL;
					out->nodes[x]->role = IR_ROLE_ACT;
				}
				IrNode *c = new_node(p, out, IR_OP_ALL_REDUCE, &x, 1, n, r, IR_PHASE_FORWARD);
				if (!c)
					break;
				c->attrs.mesh_axes = ppm;
				c->attrs.red = IR_RED_SUM;
				c->name = n->name;
				c->role = n->role;
				c->mb = -1;
				*loss_out = c->id;
			}
		}
	}
	free(ops);
	return !p->failed;
}

bool pass_pipeline(IrModule *m, Diag *d, const PassOptions *opt)
{
	int ax = pipeline_axis(m);
	if (ax < 0 || m->nnodes == 0)
		return true;
	if (m->loss < 0) {
		diag_error(d, (SrcLoc){0}, "pipeline: the program has no loss");
		return false;
	}
	Pl p = { .m = m, .d = d, .ax = ax, .nn = m->nnodes };
	p.P = (int)m->mesh.sizes[ax];
	p.V = virtual_stages(m);
	p.M = m->train.microbatches > 1 ? (int)m->train.microbatches : 1;
	if (p.P > 64) {
		diag_error(d, (SrcLoc){0}, "pp = %d: at most 64 pipeline stages", p.P);
		return false;
	}
	SchedKind kind = SCHED_1F1B;
	const char *sname = m->train.schedule ? m->train.schedule : "1f1b";
	if (sched_parse(sname, &kind) != 0) {
		diag_error(d, m->train.schedule_loc, "schedule %s: pipelines run gpipe, 1f1b, "
		           "interleaved(v) or zb", sname);
		return false;
	}
	if (kind == SCHED_INTERLEAVED && p.V < 2) {
		diag_error(d, m->train.schedule_loc, "schedule interleaved needs 2 or more virtual stages: "
		           "interleaved(2)");
		return false;
	}
	int nn = p.nn, P = p.P;
	/* every rank's schedule first: its errors are the user's */
	SchedItem **items = calloc((size_t)P, sizeof *items);
	int *nitems = calloc((size_t)P, sizeof(int));
	bool ok = items && nitems;
	for (int r = 0; ok && r < P; r++) {
		char err[256];
		int cnt = sched_build(kind, P, p.M, p.V, r, NULL, 0, err, sizeof err);
		if (cnt < 0) {
			diag_error(d, m->train.schedule_loc, "schedule %s with pp = %d and microbatches "
			           "%d: %s (set microbatches in the train section or with --train "
			           "microbatches=M)", sname, P, p.M, err);
			ok = false;
			break;
		}
		items[r] = malloc(sizeof(SchedItem) * (size_t)(cnt ? cnt : 1));
		ok = items[r] && sched_build(kind, P, p.M, p.V, r, items[r], cnt, err, sizeof err) == cnt;
		nitems[r] = cnt;
		if (!ok && items[r])
			diag_error(d, (SrcLoc){0}, "internal: schedule: %s", err);
	}
	p.rank = malloc(sizeof(int) * (size_t)nn);
	p.phase = malloc(sizeof(int) * (size_t)nn);
	p.leafy = calloc((size_t)nn, sizeof(bool));
	p.dest = calloc((size_t)nn, sizeof(uint64_t));
	p.users = calloc((size_t)nn, sizeof(uint64_t));
	p.upd = malloc(sizeof(int) * (size_t)nn);
	p.sync = calloc((size_t)nn, sizeof(uint64_t));
	p.syncof = malloc(sizeof(int) * (size_t)nn);
	p.placed = calloc((size_t)nn, sizeof(bool));
	p.recvd = calloc((size_t)nn, sizeof(bool));
	p.list = calloc((size_t)P, sizeof(EntList));
	int *map = malloc(sizeof(int) * (size_t)nn * (size_t)P);
	if (ok && (!p.rank || !p.phase || !p.leafy || !p.dest || !p.users || !p.upd || !p.sync ||
	           !p.syncof || !p.placed || !p.recvd || !p.list || !map))
		ok = oom(&p);
	if (!ok)
		goto done;
	int opt_start = nn;
	for (int i = m->loss + 1; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		if ((ir_op_flags(n->op) & OPF_INPLACE) || n->op == IR_OP_GRAD_NORM) {
			opt_start = i;
			break;
		}
	}
	uint64_t all = P == 64 ? ~0ull : (1ull << P) - 1;
	for (int i = 0; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		p.phase[i] = i <= m->loss ? IR_PHASE_FORWARD
		             : i < opt_start ? IR_PHASE_BACKWARD : IR_PHASE_OPTIMIZER;
		p.rank[i] = n->stage >= 0 ? n->stage % P : RANK_ALL;
		p.upd[i] = p.syncof[i] = -1;
		bool lf = is_leaf_op(n->op);
		/* views of leaves, and collectives within a stage of leaves
		 * (ZeRO-3's param all_gathers): each rank that reads one makes
		 * its own, where it first needs it */
		bool gather = (ir_op_flags(n->op) & OPF_COLL) && !pp_coll(&p, n) &&
		              n->op != IR_OP_SEND && n->op != IR_OP_RECV &&
		              !(n->attrs.mesh_axes & (1u << ax));
		if (!lf && p.phase[i] != IR_PHASE_OPTIMIZER && (is_view_op(n->op) || gather)) {
			lf = true;
			for (int k = 0; k < n->nops && lf; k++)
				lf = p.leafy[n->ops[k]];
		}
		p.leafy[i] = lf;
		if (ir_op_flags(n->op) & OPF_INPLACE) {
			int b = n->ops[0];
			while (!is_leaf_op(m->nodes[b]->op) && (ir_op_flags(m->nodes[b]->op) & OPF_INPLACE))
				b = m->nodes[b]->ops[0];
			if (m->nodes[b]->op == IR_OP_PARAM)
				p.upd[b] = i;
		}
	}
	/* who uses what */
	for (int i = nn - 1; i >= 0; i--) {
		const IrNode *n = m->nodes[i];
		uint64_t mine = p.leafy[i] ? p.users[i] : p.rank[i] == RANK_ALL ? all : 1ull << p.rank[i];
		for (int k = 0; k < n->nops; k++) {
			int u = n->ops[k];
			if (p.leafy[u]) {
				p.users[u] |= mine;
				continue;
			}
			for (int r = 0; r < P; r++)
				if (((mine >> r) & 1) && remote(&p, u, r) && reads(&p, i, k, r))
					p.dest[u] |= 1ull << r;
		}
	}
	for (int i = 0; i < nn; i++)
		if (m->nodes[i]->op == IR_OP_PARAM && p.upd[i] >= 0 && p.rank[p.upd[i]] >= 0) {
			p.sync[i] = p.users[i] & ~(1ull << p.rank[p.upd[i]]);
			if (p.sync[i])
				p.syncof[p.upd[i]] = i;
		}
	/* ZB-H1 splits each micro-batch's backward into B, the work the
	 * previous stage waits for (what leads to a value another rank reads,
	 * or to another item's work), and W, the rest (weight gradients) */
	if (kind == SCHED_ZBH1) {
		p.wgrad = calloc((size_t)nn, sizeof(bool));
		if (!p.wgrad) {
			ok = oom(&p);
			goto done;
		}
		/* users come after their operands: walk back, so a node's
		 * users are classified before it */
		bool *need = calloc((size_t)nn, sizeof(bool));
		if (!need) {
			ok = oom(&p);
			goto done;
		}
		for (int j = nn - 1; j >= 0; j--) {
			const IrNode *u = m->nodes[j];
			bool bw = in_item(&p, j) && p.phase[j] == IR_PHASE_BACKWARD;
			if (bw)
				p.wgrad[j] = !(need[j] || p.dest[j] != 0);
			for (int k = 0; bw && k < u->nops; k++) {
				int o = u->ops[k];
				const IrNode *x = m->nodes[o];
				if (!in_item(&p, o) || p.phase[o] != IR_PHASE_BACKWARD)
					continue;
				bool same = node_mb(&p, o) == node_mb(&p, j) && x->stage == u->stage;
				need[o] = need[o] || !same || !p.wgrad[j];
			}
		}
		free(need);
	}
	int loss_rank = p.rank[m->loss] == RANK_ALL ? P - 1 : p.rank[m->loss];
	for (int r = 0; ok && r < P; r++)
		ok = build_rank(&p, r, items[r], nitems[r], &loss_rank);
	ok = ok && order_sends(&p) && simulate(&p);
	IrModule *out = ok ? ir_module_new(m->arena, m->name) : NULL;
	if (ok && !out)
		ok = oom(&p);
	int loss_out = -1;
	if (ok) {
		out->mesh = m->mesh;
		out->train = m->train;
		ok = materialise(&p, out, map, &loss_out);
	}
	if (ok) {
		m->nodes = out->nodes;
		m->nnodes = out->nnodes;
		m->cap = out->cap;
		m->loss = loss_out;
		m->nchooses = 0;
		if (opt && opt->verbose)
			for (int r = 0; r < P; r++)
				fprintf(stderr, "dtmc: pipeline: pp rank %d runs %d nodes (%s, %d "
				        "micro-batches)\n", r, p.list[r].n, sname, p.M);
	}
done:
	for (int r = 0; items && r < P; r++)
		free(items[r]);
	free(items);
	free(nitems);
	for (int r = 0; p.list && r < P; r++)
		free(p.list[r].e);
	free(p.list);
	free(p.rank);
	free(p.phase);
	free(p.leafy);
	free(p.dest);
	free(p.users);
	free(p.upd);
	free(p.sync);
	free(p.syncof);
	free(p.placed);
	free(p.recvd);
	free(p.wgrad);
	free(map);
	return ok && !p.failed;
}
