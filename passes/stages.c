/* stages.c - pass "stages": each forward node's pipeline model chunk.
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
 */
#include "passes/stages.h"
#include "passes/pipeline_impl.h"

#include <limits.h>
#include <stdio.h>

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
		if (pl_is_leaf_op(x->op) || ir_stage(m, x) < 0 || ir_stage(m, x) == prev)
			continue;
		if (ir_stage(m, x) == prev + 1)
			prev = ir_stage(m, x);
		else if (ir_stage(m, x) == 0 && prev == P - 1)
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
		if (pl_is_leaf_op(x->op))
			continue;
		int mx = -1, from = -1;
		for (int k = 0; k < x->nops; k++) {
			int o = x->ops[k];
			if (!pl_is_leaf_op(m->nodes[o]->op) && eff[o] > mx)
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
			diag_note(d, pl_schedule_loc(m),
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
	int P = (int)m->mesh.sizes[ax], V = pl_virtual_stages(m), K = P * V;
	if (m->loss < 0) {
		diag_error(d, (SrcLoc){0}, "pp = %d: pipeline stages need a loss", P);
		return false;
	}
	int n = m->nnodes;
	Arena a; /* the pass's scratch, freed at its end */
	arena_init(&a);
	int *chunk = arena_alloc_raw(&a, sizeof(int) * (size_t)n);
	int *umin = arena_alloc_raw(&a, sizeof(int) * (size_t)n);
	int *ann = arena_alloc_raw(&a, sizeof(int) * (size_t)n);
	if (!chunk || !umin || !ann) {
		arena_free(&a);
		diag_error(d, (SrcLoc){0}, "stages: out of memory");
		return false;
	}
	int amax = -1, first = -1;
	double total = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		if (pl_is_leaf_op(x->op))
			continue;
		if (ir_stage(m, x) > amax)
			amax = ir_stage(m, x);
		if (ir_stage(m, x) >= 0 && first < 0)
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
		diag_note(d, pl_schedule_loc(m), "schedule interleaved(%d) runs these as written",
		          rounds);
		arena_free(&a);
		return false;
	}
	for (int i = 0, r = 0, prev = -1; i < n; i++) {
		const IrNode *x = m->nodes[i];
		ann[i] = -1;
		if (pl_is_leaf_op(x->op) || ir_stage(m, x) < 0)
			continue;
		if (virt && ir_stage(m, x) < prev)
			r++;
		prev = ir_stage(m, x);
		ann[i] = virt ? r * P + ir_stage(m, x) : ir_stage(m, x);
	}
	/* umin doubles as the walk's scratch */
	if (amax >= 0 && !stages_follow_data(m, d, ann, umin, rounds, V)) {
		arena_free(&a);
		return false;
	}
	bool annotated = virt || amax + 1 == K;
	double cum = 0;
	for (int i = 0; i < n; i++) {
		const IrNode *x = m->nodes[i];
		chunk[i] = -1;
		umin[i] = INT_MAX;
		if (pl_is_leaf_op(x->op))
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
		if (pl_is_leaf_op(x->op))
			continue;
		int mx = -1;
		for (int k = 0; k < x->nops; k++)
			if (!pl_is_leaf_op(m->nodes[x->ops[k]]->op) && chunk[x->ops[k]] > mx)
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
		ir_set_stage(m, m->nodes[i], chunk[i]);
	if (opt && opt->verbose)
		fprintf(stderr, "dtmc: stages: %d model chunk%s on pp = %d (%s)\n", K,
		        K == 1 ? "" : "s", P,
		        virt ? "the stage annotations as virtual stages, round-robin" :
		        annotated ? "from the stage annotations" : "split by estimated compute");
	arena_free(&a);
	return true;
}

