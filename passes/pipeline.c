/* pipeline.c - passes "stages" and "pipeline": pipeline parallelism.
 *
 * P = the size of mesh axis `pp`, v = the virtual stages per rank of an
 * interleaved schedule (1 otherwise), K = P * v model chunks; chunk k runs
 * on pp coordinate k mod P (Megatron's layout).
 *
 * "stages" runs first, on the forward program.  Chunks come from the
 * `stage` annotations when the annotated values are exactly 0..K-1, or,
 * under interleaved(v), when they go round the P stages v times in program
 * order (`stage i % pp`): round r's stage s is chunk r * P + s, on rank s.
 * Annotations must follow the data flow: a node annotated with an earlier
 * stage than a value it reads is an error at the annotation, naming the
 * value, never a silent re-assignment; so is going round the stages a
 * number of times other than v.  Otherwise (none, or annotations that
 * follow the data but name another number of stages: P in order while an
 * interleaved schedule needs K, or fewer than P for a short model) the
 * non-leaf forward nodes are cut, in program order, where the running
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
 *
 * The output takes the input's nodes over where it can (materialise) and
 * rewrites their heads (the fields before IrNode.shape) and operand lists:
 * the input module is consumed (`dtmc sweep` copies it first for all but
 * its last schedule).
 */
#include "passes/pipeline.h"
#include "passes/schedule.h"

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

/* Where the schedule was chosen, else the micro-batch count: what the
 * schedule's errors point at. */
static SrcLoc schedule_loc(const IrModule *m)
{
	const SrcLoc *loc = m->train.loc;
	return loc[IR_TRAIN_SCHEDULE].file ? loc[IR_TRAIN_SCHEDULE] : loc[IR_TRAIN_MICROBATCHES];
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

/* How many times the annotated nodes, in program order, go round the
 * stages 0, 1, ..., P-1 (a run of nodes on one stage counts once): 1 for
 * a plain cut (0, 0, 1, 1), 2 for `stage i % pp` over 2P layers; 0 when
 * they do not (2, 1, 0; a stage left out; a round cut short). */
static int stage_rounds(const IrModule *m, int P)
{
	int prev = -1, rounds = 1;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *x = m->nodes[i];
		if (is_leaf_op(x->op) || x->stage < 0 || x->stage == prev)
			continue;
		if (x->stage == prev + 1)
			prev = x->stage;
		else if (x->stage == 0 && prev == P - 1)
			prev = 0, rounds++;
		else
			return 0;
	}
	return prev == P - 1 ? rounds : 0;
}

/* The annotated plan must follow the data flow: an annotated node reads
 * values of its own chunk or earlier ones (ann[]: its chunk, -1 when not
 * annotated; a value of a node that is not is of its latest non-leaf
 * operand's chunk).  Reports, once per annotation, the first value that
 * would flow back, at the annotation; false if any. */
static bool stages_follow_data(IrModule *m, Diag *d, const int *ann, int *eff, int rounds,
                               int V)
{
	enum { MAX_SEEN = 16 };
	SrcLoc seen[MAX_SEEN];
	int nseen = 0, bad = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *x = m->nodes[i];
		eff[i] = -1;
		if (is_leaf_op(x->op))
			continue;
		int mx = -1, from = -1;
		for (int k = 0; k < x->nops; k++) {
			int o = x->ops[k];
			if (!is_leaf_op(m->nodes[o]->op) && eff[o] > mx)
				mx = eff[o], from = o;
		}
		eff[i] = ann[i] >= 0 ? ann[i] : mx;
		if (ann[i] < 0 || mx <= ann[i])
			continue;
		SrcLoc at = ir_stage_note_loc(m, i);
		bool dup = false;
		for (int k = 0; k < nseen && !dup; k++)
			dup = seen[k].file == at.file && seen[k].line == at.line &&
			      seen[k].col == at.col;
		if (dup)
			continue;
		if (nseen < MAX_SEEN)
			seen[nseen++] = at;
		char what[256];
		ir_value_label(m, from, what, sizeof what);
		diag_error(d, at, "stage %d reads %s from stage %d: values flow only to the same "
		           "or a later pipeline stage", ann[i], what, mx);
		if (!bad++ && rounds > 1 && V == 1)
			diag_note(d, schedule_loc(m),
			          "stages that go round the pipeline %d times (layer i on stage "
			          "i %% pp) are virtual stages: schedule interleaved(%d)",
			          rounds, rounds);
	}
	return bad == 0;
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
	int *ann = malloc(sizeof(int) * (size_t)n);
	if (!chunk || !umin || !ann) {
		free(chunk);
		free(umin);
		free(ann);
		diag_error(d, (SrcLoc){0}, "stages: out of memory");
		return false;
	}
	int amax = -1, first = -1;
	double total = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		if (is_leaf_op(x->op))
			continue;
		if (x->stage > amax)
			amax = x->stage;
		if (x->stage >= 0 && first < 0)
			first = i;
		total += node_cost(m, x);
	}
	/* Annotations naming the P stages round and round are, under an
	 * interleaved schedule, virtual stages as Megatron lays them out:
	 * round r's stage s is model chunk r * P + s (on rank s). */
	int rounds = amax + 1 == P ? stage_rounds(m, P) : 0;
	bool virt = V > 1 && rounds == V;
	if (V > 1 && rounds > 1 && rounds != V) {
		diag_error(d, ir_stage_note_loc(m, first),
		           "the stages go round the %d pipeline ranks %d times: %d virtual stages "
		           "per rank, but the schedule is interleaved(%d)",
		           P, rounds, rounds, V);
		diag_note(d, schedule_loc(m), "schedule interleaved(%d) runs these as written",
		          rounds);
		free(chunk);
		free(umin);
		free(ann);
		return false;
	}
	for (int i = 0, r = 0, prev = -1; i < n; i++) {
		const IrNode *x = m->nodes[i];
		ann[i] = -1;
		if (is_leaf_op(x->op) || x->stage < 0)
			continue;
		if (virt && x->stage < prev)
			r++;
		prev = x->stage;
		ann[i] = virt ? r * P + x->stage : x->stage;
	}
	/* umin doubles as the walk's scratch */
	if (amax >= 0 && !stages_follow_data(m, d, ann, umin, rounds, V)) {
		free(chunk);
		free(umin);
		free(ann);
		return false;
	}
	bool annotated = virt || amax + 1 == K;
	double cum = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		chunk[i] = -1;
		umin[i] = INT_MAX;
		if (is_leaf_op(x->op))
			continue;
		if (annotated) {
			chunk[i] = ann[i];
		} else {
			double c = node_cost(m, x);
			int k = total > 0 ? (int)((cum + c / 2) * K / total) : 0;
			chunk[i] = k < 0 ? 0 : k >= K ? K - 1 : k;
			cum += c;
		}
	}
	/* a node without a chunk: the largest of its non-leaf operands'
	 * (forward edges only go to later chunks: stages_follow_data saw to
	 * it for the annotated ones) */
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
		        K == 1 ? "" : "s", P,
		        virt ? "the stage annotations as virtual stages, round-robin" :
		        annotated ? "from the stage annotations" : "split by estimated compute");
	free(chunk);
	free(umin);
	free(ann);
	return true;
}

/* ---- pass "pipeline" ---- */

enum { RANK_ALL = -1 };

/* Pl.home: a value's rank; or every rank's (RANK_ALL), or leafy. */
enum { HOME_ALL = RANK_ALL, HOME_LEAFY = -2 };

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

/* What building the ranks asks of a node over and over, a byte a node:
 * the walks over every node (one per rank) then read a few compact
 * arrays, not one ~500-byte IrNode each. */
enum {
	NF_PPCOLL = 1 << 0,   /* a pp collective: every rank runs it at the same point */
	NF_GNORM = 1 << 1,    /* grad_norm on every rank: see reads() */
	NF_ITEM = 1 << 2,     /* of a schedule item (else free): see the walk */
	NF_COMPUTED = 1 << 3, /* has an operand that is not leafy */
};

typedef struct Pl {
	IrModule *m;
	Diag *d;
	int P, V, M, ax, nn;
	int *rank;       /* [nn]: rank of the node, or RANK_ALL */
	int *phase;      /* [nn] */
	int8_t *home;    /* [nn]: the node's rank, or HOME_ALL, or HOME_LEAFY */
	uint64_t *dest;  /* [nn]: ranks that receive the value */
	uint64_t *users; /* [nn]: ranks using a leafy value */
	int *upd;        /* [nn]: per param, its last in-place update, or -1 */
	uint64_t *sync;  /* [nn]: per param, ranks its update is sent to */
	int *syncof;     /* [nn]: per last update, the param, or -1 */
	uint8_t *nf;     /* [nn]: NF_* */
	int *mb;         /* [nn]: node_mb() */
	int *stage;      /* [nn]: IrNode.stage, the model chunk */
	int *opstart;    /* [nn + 1]: node i's operands are opv[opstart[i] ..
	                  * opstart[i + 1]) */
	int *opv;
	/* onv[onstart[r] .. onstart[r + 1]): the nodes on rank r (not
	 * leafy; its own or every rank's), in node order */
	int *onstart, *onv;
	int *inputs, ninputs; /* the inputs, in node order */
	int *syncp, nsyncp;   /* the params whose update is sent somewhere */
	/* per rank being built: placed[i] == stamp (r + 1) when i is placed
	 * there, recvd[u] == stamp when it receives u; no clearing between
	 * ranks */
	uint8_t *placed, *recvd, stamp;
	int *htouch, nhtouch; /* the u with head[u] set, to reset */
	int *lastr;      /* [nn]: the last rank that placed the node (ranks
	                  * are built in order); unset for nodes none places */
	/* The free nodes that may run ahead of the end of the step (see
	 * build_rank) wait for their local operands: cnt[i] of those are not
	 * placed yet; the users waiting on u are euser[e] for e = head[u],
	 * enext[e], ... (-1 ends); the ones waiting for nothing more are on a
	 * min-heap of ids, heap[0 .. nheap). */
	int *cnt, *head, *enext, *euser, nedge;
	int *heap, nheap;
	EntList *list;   /* [P] */
	/* per (a, b), at a * P + b: ns the sends rank a's list has for b,
	 * nq the values b's list receives from a (E_RECV, E_SYNC) */
	int *ns, *nq;
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

static __attribute__((noinline)) bool grow(Pl *p, EntList *l)
{
	int cap = l->cap ? 2 * l->cap : 256;
	Ent *e = realloc(l->e, sizeof(Ent) * (size_t)cap);
	if (!e)
		return oom(p);
	l->e = e;
	l->cap = cap;
	return true;
}

static inline bool push(Pl *p, EntList *l, EntKind k, int node, int peer)
{
	if (l->n == l->cap && !grow(p, l))
		return false;
	l->e[l->n++] = (Ent){ k, node, peer };
	return true;
}

/* Is value u on another rank than r (so r receives it)? */
static bool remote(const Pl *p, int u, int r)
{
	int h = p->home[u];
	return h >= 0 && h != r;
}

/* Operand u of node i read on rank r: false when the pipeline drops it
 * (grad_norm keeps the gradients its rank owns). */
static bool reads(const Pl *p, int i, int u, int r)
{
	return !(p->nf[i] & NF_GNORM) || !remote(p, u, r);
}

/* A node's micro-batch from its IrNode.mb; with one micro-batch (nothing
 * unrolled) every node is micro-batch 0's. */
static int node_mb(const Pl *p, int mb)
{
	return mb >= 0 ? mb : p->M == 1 ? 0 : -1;
}

/* The schedule work a node of an item belongs to. */
static int work_of(const Pl *p, int i)
{
	if (p->phase[i] == IR_PHASE_FORWARD)
		return SCHED_F;
	return p->wgrad && p->wgrad[i] ? SCHED_W : SCHED_B;
}

static void heap_push(Pl *p, int i)
{
	int *h = p->heap, k = p->nheap++;
	while (k > 0 && h[(k - 1) / 2] > i) {
		h[k] = h[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	h[k] = i;
}

static int heap_pop(Pl *p)
{
	int *h = p->heap, top = h[0], n = --p->nheap, last = h[n], k = 0;
	for (;;) {
		int c = 2 * k + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h[c + 1] < h[c])
			c++;
		if (h[c] >= last)
			break;
		h[k] = h[c];
		k = c;
	}
	h[k] = last;
	return top;
}

static bool place(Pl *p, int r, int i)
{
	if (p->placed[i] == p->stamp || p->failed)
		return !p->failed;
	if (p->nf[i] & NF_ITEM) {
		int work = work_of(p, i);
		if (p->cur_mb != p->mb[i] || p->cur_work != work || p->cur_chunk != p->stage[i]) {
			const IrNode *n = p->m->nodes[i];
			pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d (micro-batch %d, chunk "
			           "%d) is needed before the schedule runs it", ir_op_name(n->op), i,
			           p->mb[i], p->stage[i]);
			p->failed = true;
			return false;
		}
	}
	p->placed[i] = p->stamp; /* a cycle cannot happen: operands have smaller ids */
	for (int e = p->head[i]; e >= 0; e = p->enext[e])
		if (--p->cnt[p->euser[e]] == 0)
			heap_push(p, p->euser[e]);
	EntList *l = &p->list[r];
	bool gnorm = p->nf[i] & NF_GNORM;
	for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
		int u = p->opv[k], h = p->home[u];
		if (h >= 0 && h != r) { /* remote(u, r) */
			if (gnorm || p->recvd[u] == p->stamp)
				continue;
			p->recvd[u] = p->stamp;
			if (!push(p, l, E_RECV, u, h))
				return false;
			p->nq[h * p->P + r]++;
		} else if (p->placed[u] != p->stamp && !place(p, r, u)) {
			return false;
		}
	}
	if (!push(p, l, E_NODE, i, -1))
		return false;
	p->lastr[i] = r;
	/* the sends, to the ranks in order */
	for (uint64_t to = p->dest[i]; to; to &= to - 1) {
		if (!push(p, l, E_SEND, i, __builtin_ctzll(to)))
			return false;
		p->ns[r * p->P + __builtin_ctzll(to)]++;
	}
	if (p->syncof[i] >= 0)
		for (uint64_t to = p->sync[p->syncof[i]]; to; to &= to - 1) {
			if (!push(p, l, E_SEND, i, __builtin_ctzll(to)))
				return false;
			p->ns[r * p->P + __builtin_ctzll(to)]++;
		}
	return true;
}

/* The item key of node i (micro-batch, model chunk, work), or -1 for a
 * node of no item of this pipeline. */
static int item_key(const Pl *p, int i)
{
	int K = p->P * p->V;
	int mb = p->mb[i];
	if (mb < 0 || mb >= p->M || p->stage[i] < 0 || p->stage[i] >= K)
		return -1;
	return (mb * K + p->stage[i]) * 3 + work_of(p, i);
}

/* Which nodes each item places, found once for every rank (an item's
 * nodes are all on the rank of its chunk): byitem[start[key] ..
 * start[key + 1]) lists item key's nodes in node order. */
typedef struct Items {
	int *start, *byitem;
} Items;

/* May free node i ever run on rank r ahead of the end of the step (what
 * eager placement asks besides its operands being placed)?  Not a pp
 * collective, which every rank runs at the end; not of leaves only
 * (ZeRO-3's param all_gathers): those run when first needed, so a
 * gathered unit lives from its use, not from the step's start; and no
 * operand from another rank.  *wait gets the operands it waits for. */
static bool eager_free(const Pl *p, int i, int r, int *wait)
{
	if ((p->nf[i] & NF_PPCOLL) || !(p->nf[i] & NF_COMPUTED))
		return false;
	int c = 0;
	for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
		int u = p->opv[k];
		if (!reads(p, i, u, r))
			continue;
		if (remote(p, u, r))
			return false;
		c += p->home[u] != HOME_LEAFY;
	}
	*wait = c;
	return true;
}

static bool build_rank(Pl *p, int r, const SchedItem *items, int nitems, const int *loss_rank,
                       const Items *it)
{
	p->stamp = (uint8_t)(r + 1);
	/* room for about what the rank runs (its nodes and the leaves and
	 * messages around them), so the list is seldom grown */
	EntList *l = &p->list[r];
	int guess = p->onstart[r + 1] - p->onstart[r] + p->ninputs + 256;
	if (l->cap < guess) {
		Ent *e = realloc(l->e, sizeof(Ent) * (size_t)guess);
		if (!e)
			return oom(p);
		l->e = e;
		l->cap = guess;
	}
	/* The rank's free nodes (of no item) run as soon as their operands
	 * are here: after each item, every free node whose operands all are
	 * is placed, in node order.  Rather than testing every free node
	 * after every item, each waits on a count of its operands not placed
	 * yet (place() counts down) and joins a min-heap of ids when none is
	 * left.  A node placed frees only nodes after it, so taking the heap
	 * in order places what one walk of the free nodes in order would. */
	p->nheap = 0;
	p->nedge = 0;
	/* head[] is all -1 here: set so once, and reset below */
	for (int j = 0; j < p->nhtouch; j++)
		p->head[p->htouch[j]] = -1;
	p->nhtouch = 0;
	const int *on = p->onv + p->onstart[r];
	int non = p->onstart[r + 1] - p->onstart[r];
	for (int j = 0; j < non; j++) {
		int i = on[j], wait;
		if ((p->nf[i] & NF_ITEM) || i == p->m->loss || !eager_free(p, i, r, &wait))
			continue;
		p->cnt[i] = wait;
		if (!wait) {
			heap_push(p, i);
			continue;
		}
		for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
			int u = p->opv[k];
			if (!reads(p, i, u, r) || p->home[u] == HOME_LEAFY)
				continue;
			if (p->head[u] < 0)
				p->htouch[p->nhtouch++] = u;
			p->euser[p->nedge] = i;
			p->enext[p->nedge] = p->head[u];
			p->head[u] = p->nedge++;
		}
	}
	/* every input on every rank, in order: the data feed fills the
	 * same inputs everywhere */
	for (int j = 0; j < p->ninputs && !p->failed; j++)
		place(p, r, p->inputs[j]);
	int K = p->P * p->V;
	for (int t = 0; t < nitems && !p->failed; t++) {
		p->cur_work = items[t].work;
		p->cur_mb = items[t].mb;
		p->cur_chunk = items[t].chunk * p->P + r;
		if (p->cur_mb >= 0 && p->cur_mb < p->M && p->cur_chunk >= 0 && p->cur_chunk < K) {
			int key = (p->cur_mb * K + p->cur_chunk) * 3 + p->cur_work;
			for (int j = it->start[key]; j < it->start[key + 1] && !p->failed; j++)
				place(p, r, it->byitem[j]);
		}
		/* free nodes whose operands are all here */
		while (p->nheap > 0 && !p->failed) {
			int i = heap_pop(p);
			if (p->placed[i] != p->stamp)
				place(p, r, i);
		}
	}
	p->cur_mb = -1;
	/* the end of the step: the loss, then the rest in program order */
	if (!p->failed && r == *loss_rank)
		place(p, r, p->m->loss);
	if (!p->failed && !push(p, &p->list[r], E_LOSS, p->m->loss, -1))
		return false;
	for (int j = 0; j < non && !p->failed; j++) {
		int i = on[j];
		if (p->placed[i] != p->stamp) {
			if (p->nf[i] & NF_ITEM) {
				const IrNode *n = p->m->nodes[i];
				pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d (micro-batch %d, "
				           "chunk %d) is in no schedule item", ir_op_name(n->op), i, p->mb[i],
				           p->stage[i]);
				p->failed = true;
				break;
			}
			place(p, r, i);
		}
	}
	for (int j = 0; j < p->nsyncp && !p->failed; j++) {
		int i = p->syncp[j];
		if ((p->sync[i] >> r) & 1) {
			if (!push(p, &p->list[r], E_SYNC, i, p->rank[p->upd[i]]))
				return false;
			p->nq[p->rank[p->upd[i]] * p->P + r]++;
		}
	}
	return !p->failed;
}

/* The value an entry receives, as the sender names it. */
static int recv_key(const Pl *p, const Ent *e)
{
	return e->kind == E_SYNC ? p->upd[e->node] : e->node;
}

/* Per pair of ranks, the sender's sends in the order the receiver
 * receives: a send may move later, never before its value.
 *
 * For sender a and receiver b, a's sends to b are taken out and put back,
 * in b's order, each right after the node that makes it (and the ones
 * queued behind it) available.  Pairs do not interact -- only nodes make
 * values available, and a pair moves only its own sends -- so one walk of
 * a's list does every b: after a node, the sends to the largest b first,
 * where doing the pairs one by one, b ascending, would have put them (a
 * later pair's sends go right after the node, in front of an earlier
 * pair's). */
static bool order_sends(Pl *p)
{
	int P = p->P;
	size_t np = (size_t)P * (size_t)P;
	/* per (a, b), at a * P + b: want[woff[a * P + b] ..) the values b
	 * receives from a, in b's order (ns and nq: see Pl) */
	const int *ns = p->ns, *nq = p->nq;
	int *woff = calloc(np + 1, sizeof(int));
	int *cur = calloc(np, sizeof(int));
	bool *have = calloc((size_t)p->nn, sizeof(bool));
	uint64_t *waiting = calloc((size_t)p->nn, sizeof(uint64_t));
	int *want = NULL;
	Ent *out = NULL;
	bool ok = woff && cur && have && waiting;
	int maxn = 1;
	if (ok) {
		for (size_t k = 0; k < np; k++)
			woff[k + 1] = woff[k] + nq[k];
		/* a's list plus every value it is asked for: room for a list
		 * whose sends and receives do not match, before that is
		 * reported */
		for (int a = 0; a < P; a++) {
			int n = p->list[a].n + woff[(size_t)(a + 1) * P] - woff[(size_t)a * P];
			if (n > maxn)
				maxn = n;
		}
		want = malloc(sizeof(int) * (size_t)(woff[np] ? woff[np] : 1));
		out = malloc(sizeof(Ent) * (size_t)maxn);
		ok = want && out;
	}
	if (ok) {
		memcpy(cur, woff, sizeof(int) * np);
		for (int b = 0; b < P; b++) {
			const EntList *lb = &p->list[b];
			for (int j = 0; j < lb->n; j++) {
				const Ent *e = &lb->e[j];
				if (e->kind == E_RECV || e->kind == E_SYNC)
					want[cur[(size_t)e->peer * P + b]++] = recv_key(p, e);
			}
		}
	}
	for (int a = 0; ok && a < P && !p->failed; a++) {
		EntList *la = &p->list[a];
		const size_t row = (size_t)a * P;
		memcpy(cur + row, woff + row, sizeof(int) * (size_t)P);
		/* Only a node can make a queue's front available, and it makes
		 * available only the queues whose front it is: waiting[v] has
		 * bit b when queue (a, b)'s front is v, not had yet. */
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (b != a && cur[k] < woff[k + 1])
				waiting[want[cur[k]]] |= 1ull << b;
		}
		int no = 0;
		for (int j = 0; j < la->n; j++) {
			Ent e = la->e[j];
			if (e.kind == E_SEND && e.peer != a)
				continue;
			out[no++] = e;
			if (e.kind != E_NODE)
				continue;
			have[e.node] = true;
			uint64_t wake = waiting[e.node];
			if (!wake)
				continue;
			waiting[e.node] = 0;
			/* the largest b first, as above */
			while (wake) {
				int b = 63 - __builtin_clzll(wake);
				wake &= ~(1ull << b);
				size_t k = row + (size_t)b;
				while (cur[k] < woff[k + 1] && have[want[cur[k]]])
					out[no++] = (Ent){ E_SEND, want[cur[k]++], b };
				if (cur[k] < woff[k + 1])
					waiting[want[cur[k]]] |= 1ull << b;
			}
		}
		/* what no node of a's made available (an error below) */
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (b != a && cur[k] < woff[k + 1])
				waiting[want[cur[k]]] = 0;
		}
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (a == b)
				continue;
			if (ns[k] != nq[k]) {
				pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank %d sends %d "
				           "values to rank %d, which receives %d", a, ns[k], b, nq[k]);
				p->failed = true;
				break;
			}
			if (cur[k] < woff[k + 1]) {
				pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank %d receives "
				           "%%%d from rank %d, which never computes it", b, want[cur[k]], a);
				p->failed = true;
				break;
			}
		}
		if (!p->failed)
			memcpy(la->e, out, sizeof(Ent) * (size_t)no);
		for (int j = 0; j < no; j++)
			if (out[j].kind == E_NODE)
				have[out[j].node] = false;
	}
	free(woff);
	free(cur);
	free(have);
	free(waiting);
	free(want);
	free(out);
	if (!ok)
		return oom(p);
	return !p->failed;
}

/* Runs the P programs against each other: sends are buffered, a receive
 * waits for its message (which must be the one it expects), a pp
 * collective waits for every rank.  Reports a deadlock as an error. */
static bool simulate(Pl *p)
{
	int P = p->P;
	size_t np = P > 0 && P <= 64 ? (size_t)P : 1;
	int *pc = calloc(np, sizeof(int));
	/* per (from, to) a FIFO of values in flight, q[qoff[k] ..) with
	 * room for the pair's sends (not for every entry of every rank per
	 * pair: P * P times the whole program) */
	int *qh = calloc(np * np, sizeof(int));
	int *qt = calloc(np * np, sizeof(int));
	size_t *qoff = calloc(np * np + 1, sizeof(size_t));
	int *q = NULL;
	if (qoff) {
		/* order_sends left as many sends per pair as it counted */
		for (size_t k = 0; k < np * np; k++)
			qoff[k + 1] = qoff[k] + (size_t)(P > 0 ? p->ns[k] : 0);
		q = malloc(sizeof(int) * (qoff[np * np] ? qoff[np * np] : 1));
	}
	if (!pc || !qh || !qt || !qoff || !q) {
		free(pc);
		free(qh);
		free(qt);
		free(qoff);
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
					q[qoff[k] + (size_t)qt[k]++] = e->node;
				} else if (e->kind == E_RECV || e->kind == E_SYNC) {
					int k = e->peer * P + r;
					if (qh[k] == qt[k])
						break;
					int v = q[qoff[k] + (size_t)qh[k]++];
					if (v != recv_key(p, e)) {
						pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank "
						           "%d expects %%%d from rank %d but gets %%%d", r,
						           recv_key(p, e), e->peer, v);
						ok = false;
						goto out;
					}
				} else if (e->kind == E_LOSS ||
				           (e->kind == E_NODE && (p->nf[e->node] & NF_PPCOLL))) {
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
			pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: the stage programs "
			           "deadlock (%s)", where);
			ok = false;
			break;
		}
	}
out:
	free(pc);
	free(qh);
	free(qt);
	free(qoff);
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
	n->block = like->block;
	n->phase = phase;
	n->place_from = -1;
	return n;
}

/* ir_node_copy without the copy: n itself becomes out's next node, with
 * the operands ops[0 .. nops), nops at most n's own (written over them). */
static IrNode *adopt(IrModule *out, IrNode *n, const int *ops, int nops)
{
	if (out->nnodes >= IR_MAX_NODES)
		return NULL;
	if (out->nnodes == out->cap) {
		/* room was made for every node; grown as ir_node_new would */
		int cap = out->cap ? 2 * out->cap : 64;
		IrNode **v = arena_alloc_raw(out->arena, sizeof *v * (size_t)cap);
		if (!v)
			return NULL;
		if (out->nnodes)
			memcpy(v, out->nodes, sizeof *v * (size_t)out->nnodes);
		out->nodes = v;
		out->cap = cap;
	}
	if (nops > 0)
		memcpy(n->ops, ops, sizeof(int) * (size_t)nops);
	else
		n->ops = NULL;
	n->id = out->nnodes;
	n->nops = nops;
	out->nodes[out->nnodes++] = n;
	return n;
}

/* The lines of node n that materialise reads and writes.  It visits the
 * nodes in schedule order, not memory order, and a module is megabytes:
 * fetched some entries ahead, their misses overlap. */
static void prefetch_node(const IrNode *n)
{
	/* the head: one line, or two where the node straddles them */
	__builtin_prefetch(&n->id, 1);
	__builtin_prefetch(&n->name, 1);
}

/* Turns the entry lists into out's nodes, rank by rank.  mr: room for nn
 * ids, the node each of m's stands for on the rank being made. */
static bool materialise(Pl *p, IrModule *out, int *mr, int *loss_out)
{
	IrModule *m = p->m;
	int nn = p->nn;
	uint32_t ppm = 1u << p->ax;
	/* A node runs on every rank that places it, a copy each, but the
	 * last of those can have the node itself (lastr: that rank): most
	 * nodes run on one rank, and copying ~500 bytes a node was most of
	 * this pass's time.  Past that point nothing reads what the rank's
	 * version changes (id, operands, stage, phase, choose, place_from):
	 * sends, receives and syncs of the value copy its type, place, mb and
	 * location; the loss's name and role, which the rank holding the
	 * loss clears, are kept aside here. */
	const int *lastr = p->lastr;
	int *ops = malloc(sizeof(int) * (size_t)(nn + 2));
	/* at most two nodes an entry (a param sync's recv and assign, the
	 * loss's zero and all_reduce): room in out for them all, made once */
	size_t room = 0;
	for (int r = 0; r < p->P; r++)
		room += 2 * (size_t)p->list[r].n;
	if (room > IR_MAX_NODES)
		room = IR_MAX_NODES;
	out->nodes = arena_alloc_raw(m->arena, sizeof *out->nodes * (room ? room : 1));
	out->cap = (int)room;
	if (!ops || !out->nodes) {
		free(ops);
		return oom(p);
	}
	/* mr[i] stands for i on rank r when it is at least base, the first
	 * id of r's nodes: -1 (or an earlier rank's) otherwise */
	for (int i = 0; i < nn; i++)
		mr[i] = -1;
	const char *loss_name = m->nodes[m->loss]->name;
	IrRole loss_role = m->nodes[m->loss]->role;
	for (int r = 0; r < p->P && !p->failed; r++) {
		const int base = out->nnodes;
#define MR(x) (mr[x] >= base ? mr[x] : -1)
		const EntList *l = &p->list[r];
		for (int j = 0; j < l->n && !p->failed; j++) {
			const Ent *e = &l->e[j];
			IrNode *n = m->nodes[e->node];
			if (j + 8 < l->n)
				prefetch_node(m->nodes[l->e[j + 8].node]);
			if (j + 4 < l->n && l->e[j + 4].kind == E_NODE)
				__builtin_prefetch(m->nodes[l->e[j + 4].node]->ops, 1);
			if (e->kind == E_NODE) {
				int no = 0;
				for (int k = p->opstart[e->node]; k < p->opstart[e->node + 1]; k++)
					if (reads(p, e->node, p->opv[k], r))
						ops[no++] = MR(p->opv[k]);
				for (int k = 0; k < no; k++)
					if (ops[k] < 0) {
						pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d reads a "
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
					c = lastr[e->node] == r ? adopt(out, n, ops, no)
					                        : ir_node_copy(out, n, ops, no);
					if (!c) {
						oom(p);
						break;
					}
					int id = c->id;
					c->stage = r;
					c->phase = p->phase[e->node];
					c->choose = -1;
					c->place_from = c->place_from >= 0 ? MR(c->place_from) : -1;
					if (c->place_from == id)
						c->place_from = -1;
				}
				if (!c)
					break;
				mr[e->node] = c->id;
			} else if (e->kind == E_SEND) {
				int x = MR(e->node);
				IrNode *c = x < 0 ? NULL : new_node(p, out, IR_OP_SEND, &x, 1, n, r,
				                                    p->syncof[e->node] >= 0
				                                        ? IR_PHASE_OPTIMIZER
				                                        : p->phase[e->node]);
				if (!c) {
					if (x < 0)
						pass_fault(p->m, p->d, n->loc, "pipeline: a send of %%%d "
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
				int ab[2] = { MR(e->node), c->id };
				if (ab[0] < 0)
					continue; /* the param is not on this rank after all */
				IrNode *a = new_node(p, out, IR_OP_ASSIGN, ab, 2, n, r, IR_PHASE_OPTIMIZER);
				if (!a)
					break;
				a->role = n->role;
				a->name = NULL;
			} else { /* E_LOSS */
				int x = MR(m->loss);
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
					out->nodes[x]->label = out->nodes[x]->name;
					out->nodes[x]->name = NULL;
					out->nodes[x]->role = IR_ROLE_ACT;
				}
				IrNode *c = new_node(p, out, IR_OP_ALL_REDUCE, &x, 1, n, r, IR_PHASE_FORWARD);
				if (!c)
					break;
				c->attrs.mesh_axes = ppm;
				c->attrs.red = IR_RED_SUM;
				c->name = loss_name;
				c->role = loss_role;
				c->mb = -1;
				*loss_out = c->id;
			}
		}
	}
#undef MR
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
	SrcLoc sl = schedule_loc(m);
	if (sched_parse(sname, &kind) != 0) {
		diag_error(d, sl, "schedule %s: pipelines run gpipe, 1f1b, "
		           "interleaved(v) or zb", sname);
		return false;
	}
	if (kind == SCHED_INTERLEAVED && p.V < 2) {
		diag_error(d, sl, "schedule interleaved needs 2 or more virtual stages: "
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
			diag_error(d, sl, "schedule %s with pp = %d and microbatches "
			           "%d: %s (set microbatches in the train section or with --train "
			           "microbatches=M)", sname, P, p.M, err);
			ok = false;
			break;
		}
		items[r] = malloc(sizeof(SchedItem) * (size_t)(cnt ? cnt : 1));
		ok = items[r] && sched_build(kind, P, p.M, p.V, r, items[r], cnt, err, sizeof err) == cnt;
		nitems[r] = cnt;
		if (!ok && items[r])
			diag_internal(d, (SrcLoc){0}, "schedule: %s", err);
	}
	/* operand slots: grown in the walk below */
	size_t nops = 2 * (size_t)nn + 16;
	p.rank = malloc(sizeof(int) * (size_t)nn);
	p.phase = malloc(sizeof(int) * (size_t)nn);
	p.home = malloc((size_t)nn);
	p.dest = calloc((size_t)nn, sizeof(uint64_t));
	p.users = calloc((size_t)nn, sizeof(uint64_t));
	p.upd = malloc(sizeof(int) * (size_t)nn);
	p.sync = calloc((size_t)nn, sizeof(uint64_t));
	p.syncof = malloc(sizeof(int) * (size_t)nn);
	p.nf = malloc((size_t)nn);
	p.mb = malloc(sizeof(int) * (size_t)nn);
	p.stage = malloc(sizeof(int) * (size_t)nn);
	p.opstart = malloc(sizeof(int) * ((size_t)nn + 1));
	p.opv = malloc(sizeof(int) * nops);
	p.placed = calloc((size_t)nn, 1);
	p.recvd = calloc((size_t)nn, 1);
	p.htouch = malloc(sizeof(int) * (size_t)nn);
	p.lastr = malloc(sizeof(int) * (size_t)nn);
	p.cnt = malloc(sizeof(int) * (size_t)nn);
	p.head = malloc(sizeof(int) * (size_t)nn);
	if (p.head)
		memset(p.head, 0xff, sizeof(int) * (size_t)nn);
	p.heap = malloc(sizeof(int) * (size_t)nn);
	p.onstart = malloc(sizeof(int) * ((size_t)P + 1));
	p.inputs = malloc(sizeof(int) * (size_t)nn);
	p.syncp = malloc(sizeof(int) * (size_t)nn);
	p.list = calloc((size_t)P, sizeof(EntList));
	p.ns = calloc((size_t)P * (size_t)P, sizeof(int));
	p.nq = calloc((size_t)P * (size_t)P, sizeof(int));
	int *map = malloc(sizeof(int) * (size_t)nn);
	Items it = { .start = NULL, .byitem = NULL };
	if (ok && (!p.rank || !p.phase || !p.home || !p.dest || !p.users || !p.upd ||
	           !p.sync || !p.syncof || !p.nf || !p.mb || !p.stage || !p.opstart || !p.opv ||
	           !p.placed || !p.recvd || !p.htouch || !p.lastr || !p.cnt || !p.head || !p.heap ||
	           !p.onstart || !p.inputs || !p.syncp || !p.list || !p.ns || !p.nq || !map))
		ok = oom(&p);
	if (!ok)
		goto done;
	/* The one walk over the nodes themselves, the nodes fetched some
	 * ahead, so that the cache misses of many nodes overlap (a node is
	 * ~500 bytes, the module megabytes, and nodes next in id order are
	 * not always next in memory): everything later reads arrays.  What
	 * it finds of node i needs only operands', which come before it. */
	unsigned opfl[IR_OP_COUNT];
	for (int o = 0; o < IR_OP_COUNT; o++)
		opfl[o] = ir_op_flags((IrOp)o);
	uint8_t *op = malloc((size_t)nn);
	if (!op) {
		ok = oom(&p);
		goto done;
	}
	_Static_assert(IR_OP_COUNT <= 256, "ops fit a byte");
	uint64_t all = P == 64 ? ~0ull : (1ull << P) - 1;
	/* the optimizer step starts at the first in-place update or
	 * grad_norm after the loss */
	bool opt_started = false;
	p.ninputs = 0;
	size_t nop = 0;
	int *lfv = malloc(sizeof(int) * (size_t)nn), nlf = 0; /* the leafy nodes */
	int nall = 0; /* nodes on every rank */
	int nkeys = p.M * p.P * p.V * 3;
	it.start = calloc((size_t)nkeys + 2, sizeof(int));
	it.byitem = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
	if (!lfv || !it.start || !it.byitem) {
		free(op);
		free(lfv);
		ok = oom(&p);
		goto done;
	}
	for (int r = 0; r <= P; r++)
		p.onstart[r] = 0;
	const int loss = m->loss;
	for (int i = 0; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		/* the head (one or two lines) well ahead, the operands (and a
		 * collective's mesh axes) when it is in */
		if (i + 16 < nn) {
			__builtin_prefetch(&m->nodes[i + 16]->id);
			__builtin_prefetch(&m->nodes[i + 16]->name);
		}
		if (i + 6 < nn) {
			const IrNode *x = m->nodes[i + 6];
			__builtin_prefetch(x->ops);
			if ((unsigned)x->op < IR_OP_COUNT && (opfl[x->op] & OPF_COLL))
				__builtin_prefetch(&x->attrs.mesh_axes);
		}
		IrOp o = n->op;
		unsigned fl = (unsigned)o < IR_OP_COUNT ? opfl[o] : 0;
		op[i] = (uint8_t)o;
		int stage = n->stage;
		p.stage[i] = stage;
		p.opstart[i] = (int)nop;
		int nops_i = n->nops;
		if (nop + (size_t)nops_i > nops) {
			while (nop + (size_t)nops_i > nops)
				nops *= 2;
			int *v = realloc(p.opv, sizeof(int) * nops);
			if (!v) {
				free(op);
				free(lfv);
				ok = oom(&p);
				goto done;
			}
			p.opv = v;
		}
		int *ops = p.opv + nop;
		for (int j = 0; j < nops_i; j++)
			ops[j] = n->ops[j];
		nop += (size_t)nops_i;
		if (i > loss && !opt_started && ((fl & OPF_INPLACE) || o == IR_OP_GRAD_NORM))
			opt_started = true;
		int phase = i <= loss ? IR_PHASE_FORWARD
		            : !opt_started ? IR_PHASE_BACKWARD : IR_PHASE_OPTIMIZER;
		p.phase[i] = phase;
		int rank = stage < 0 ? RANK_ALL : stage < P ? stage : stage % P;
		p.rank[i] = rank;
		int mb = node_mb(&p, n->mb);
		p.mb[i] = mb;
		p.upd[i] = p.syncof[i] = -1;
		bool lf = is_leaf_op(o);
		/* views of leaves, and collectives within a stage of leaves
		 * (ZeRO-3's param all_gathers): each rank that reads one makes
		 * its own, where it first needs it */
		bool coll = (fl & OPF_COLL) && o != IR_OP_SEND && o != IR_OP_RECV;
		bool ppc = coll && (n->attrs.mesh_axes & (1u << ax));
		bool gather = coll && !ppc;
		if (!lf && phase != IR_PHASE_OPTIMIZER && (is_view_op(o) || gather)) {
			lf = true;
			for (int k = 0; k < nops_i && lf; k++)
				lf = p.home[ops[k]] == HOME_LEAFY;
		}
		p.home[i] = (int8_t)(lf ? HOME_LEAFY : rank);
		uint8_t f = 0;
		if (ppc)
			f |= NF_PPCOLL;
		if (o == IR_OP_GRAD_NORM && rank == RANK_ALL)
			f |= NF_GNORM;
		if (o == IR_OP_INPUT)
			p.inputs[p.ninputs++] = i;
		map[i] = -1; /* the item key */
		/* in a schedule item, or free? */
		if (!lf && rank != RANK_ALL && mb >= 0 &&
		    (phase == IR_PHASE_FORWARD || phase == IR_PHASE_BACKWARD)) {
			f |= NF_ITEM;
			if (kind != SCHED_ZBH1) { /* else known below */
				map[i] = item_key(&p, i);
				if (map[i] >= 0)
					it.start[map[i] + 2]++;
			}
		}
		if (fl & OPF_INPLACE) {
			int b = ops[0];
			while (!is_leaf_op(op[b]) && (opfl[op[b]] & OPF_INPLACE))
				b = p.opv[p.opstart[b]];
			if (op[b] == IR_OP_PARAM)
				p.upd[b] = i;
		}
		p.nf[i] = f;
		if (lf) {
			lfv[nlf++] = i;
			continue; /* a leafy node's operands are leafy */
		}
		/* who uses what: the ranks reading each leafy value, and the
		 * ranks each computed value is sent to (those that read it and
		 * do not compute it; grad_norm on every rank reads no other
		 * rank's); the users of leafy values are added below */
		uint64_t mine = rank == RANK_ALL ? all : 1ull << rank;
		bool gn = f & NF_GNORM;
		for (int k = 0; k < nops_i; k++) {
			int u = ops[k];
			int h = p.home[u];
			if (h == HOME_LEAFY) {
				p.users[u] |= mine;
				continue;
			}
			f |= NF_COMPUTED;
			if (h != HOME_ALL && !gn)
				p.dest[u] |= mine & ~(1ull << h);
		}
		p.nf[i] = f;
		if (rank == RANK_ALL)
			nall++;
		else
			p.onstart[rank + 1]++;
	}
	p.opstart[nn] = (int)nop;
	free(op);
	p.enext = malloc(sizeof(int) * (nop ? nop : 1));
	p.euser = malloc(sizeof(int) * (nop ? nop : 1));
	if (!p.enext || !p.euser) {
		free(lfv);
		ok = oom(&p);
		goto done;
	}
	/* the users of leafy values, which read leafy values only: a
	 * node's users come after it, so walking back finds them all */
	for (int j = nlf - 1; j >= 0; j--) {
		int i = lfv[j];
		for (int k = p.opstart[i]; k < p.opstart[i + 1]; k++)
			p.users[p.opv[k]] |= p.users[i];
	}
	/* upd is set for params only */
	p.nsyncp = 0;
	for (int j = 0; j < nlf; j++) {
		int i = lfv[j];
		if (p.upd[i] >= 0 && p.rank[p.upd[i]] >= 0) {
			p.sync[i] = p.users[i] & ~(1ull << p.rank[p.upd[i]]);
			if (p.sync[i]) {
				p.syncof[p.upd[i]] = i;
				p.syncp[p.nsyncp++] = i;
			}
		}
	}
	free(lfv);
	/* the nodes on each rank (counted above) */
	for (int r = 0; r < P; r++)
		p.onstart[r + 1] += p.onstart[r] + nall;
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
			bool bw = (p.nf[j] & NF_ITEM) && p.phase[j] == IR_PHASE_BACKWARD;
			if (bw)
				p.wgrad[j] = !(need[j] || p.dest[j] != 0);
			for (int k = p.opstart[j]; bw && k < p.opstart[j + 1]; k++) {
				int o = p.opv[k];
				if (!(p.nf[o] & NF_ITEM) || p.phase[o] != IR_PHASE_BACKWARD)
					continue;
				bool same = p.mb[o] == p.mb[j] && p.stage[o] == p.stage[j];
				need[o] = need[o] || !same || !p.wgrad[j];
			}
		}
		free(need);
	}
	/* the nodes of each item, in node order (a counting sort by key;
	 * the keys and their counts are found above, but ZB-H1's only
	 * now), and the nodes on each rank */
	if (kind == SCHED_ZBH1)
		for (int i = 0; i < nn; i++) {
			map[i] = p.nf[i] & NF_ITEM ? item_key(&p, i) : -1;
			if (map[i] >= 0)
				it.start[map[i] + 2]++;
		}
	for (int k = 0; k < nkeys; k++)
		it.start[k + 2] += it.start[k + 1];
	p.onv = malloc(sizeof(int) * (size_t)(p.onstart[P] ? p.onstart[P] : 1));
	int *oncur = malloc(sizeof(int) * (size_t)P);
	if (!p.onv || !oncur) {
		free(oncur);
		ok = oom(&p);
		goto done;
	}
	memcpy(oncur, p.onstart, sizeof(int) * (size_t)P);
	for (int i = 0; i < nn; i++) {
		if (p.home[i] == HOME_LEAFY)
			continue;
		if (map[i] >= 0)
			it.byitem[it.start[map[i] + 1]++] = i;
		if (p.rank[i] != RANK_ALL)
			p.onv[oncur[p.rank[i]]++] = i;
		else
			for (int r = 0; r < P; r++)
				p.onv[oncur[r]++] = i;
	}
	free(oncur);
	int loss_rank = p.rank[m->loss] == RANK_ALL ? P - 1 : p.rank[m->loss];
	for (int r = 0; ok && r < P; r++)
		ok = build_rank(&p, r, items[r], nitems[r], &loss_rank, &it);
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
	free(p.ns);
	free(p.nq);
	free(p.rank);
	free(p.phase);
	free(p.home);
	free(p.dest);
	free(p.users);
	free(p.upd);
	free(p.sync);
	free(p.syncof);
	free(p.nf);
	free(p.mb);
	free(p.stage);
	free(p.opstart);
	free(p.opv);
	free(p.placed);
	free(p.recvd);
	free(p.htouch);
	free(p.lastr);
	free(p.cnt);
	free(p.head);
	free(p.heap);
	free(p.enext);
	free(p.euser);
	free(p.onstart);
	free(p.onv);
	free(p.inputs);
	free(p.syncp);
	free(p.wgrad);
	free(it.start);
	free(it.byitem);
	free(map);
	return ok && !p.failed;
}
