/* test_recompute.c - activation checkpointing (passes/recompute.c).
 *
 * On models/gpt.dtm: after the pass no backward node reads a value
 * computed inside a block instance other than the instance's inputs and
 * outputs (without recompute many do), the recomputed clones carry the
 * stage and micro-batch of the backward nodes that read them, and the
 * planned ACT peak drops (the numbers are printed: about 3x on one device
 * and under DP x TP).  recompute layer (Megatron-LM's full recomputation)
 * clones every forward node of each block instance computed from its
 * inputs, once per micro-batch: the outputs too, which nothing reads. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend/lower.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/passes.h"

static IrModule *build(Arena *a, const char *mesh, const char *train1, const char *train2,
                       const char *after)
{
	Diag d;
	diag_init(&d, stderr);
	LowerOptions lo = {.mesh = mesh, .ndefines = 1};
	lo.define_names[0] = "layers";
	lo.define_values[0] = "4";
	if (train1)
		lo.train[lo.ntrain++] = train1;
	if (train2)
		lo.train[lo.ntrain++] = train2;
	IrModule *m = lower_path(a, &d, "models/gpt.dtm", &lo);
	CHECK(m != NULL);
	if (!m || !pass_run_until(m, &d, NULL, after)) {
		CHECK(0);
		return NULL;
	}
	return m;
}

static bool is_leaf(IrOp op)
{
	return op == IR_OP_PARAM || op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_STATE;
}

/* Backward reads of forward values that are internal to a block: computed
 * in it from the data (not from params alone) and read by no forward node
 * outside it. */
static int internal_reads(const IrModule *m)
{
	int n = m->nnodes, L = m->loss, count = 0;
	bool *act = calloc((size_t)n, sizeof(bool)), *outside = calloc((size_t)n, sizeof(bool));
	for (int i = 0; i <= L; i++) {
		const IrNode *x = m->nodes[i];
		act[i] = x->op == IR_OP_INPUT;
		for (int k = 0; k < x->nops; k++) {
			act[i] = act[i] || act[x->ops[k]];
			if (ir_block(m, m->nodes[x->ops[k]]) != ir_block(m, x))
				outside[x->ops[k]] = true;
		}
	}
	for (int i = L + 1; i < n; i++)
		for (int k = 0; k < m->nodes[i]->nops; k++) {
			int v = m->nodes[i]->ops[k];
			const IrNode *x = m->nodes[v];
			if (v < L && ir_block(m, x) >= 0 && act[v] && !outside[v] && !is_leaf(x->op))
				count++;
		}
	free(act);
	free(outside);
	return count;
}

/* Alike but for the operands: what recompute leaves of a backward node
 * (it only rewires operands). */
static bool alike(const IrModule *ma, const IrNode *a, const IrModule *mb, const IrNode *b)
{
	return a->op == b->op && a->nops == b->nops && ir_block(ma, a) == ir_block(mb, b) &&
	       ir_mb(ma, a) == ir_mb(mb, b) && ir_stage(ma, a) == ir_stage(mb, b) &&
	       a->rank == b->rank && a->loc.line == b->loc.line &&
	       a->loc.col == b->loc.col &&
	       memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* Clones: the nodes after the loss of m (recompute on) that are not in
 * off's backward (the same module without recompute, whose backward
 * recompute keeps in order, inserting clones): how many, and how many
 * have a reader with another stage or micro-batch.  (Backward nodes
 * carry their block too, so the block does not tell a clone.) */
static void clones(const IrModule *m, const IrModule *off, int *nclones, int *mismatched)
{
	*nclones = *mismatched = 0;
	int j = off->loss + 1;
	for (int i = m->loss + 1; i < m->nnodes; i++) {
		const IrNode *c = m->nodes[i];
		if (j < off->nnodes && alike(m, c, off, off->nodes[j])) {
			j++;
			continue;
		}
		(*nclones)++;
		for (int j = i + 1; j < m->nnodes; j++) {
			const IrNode *u = m->nodes[j];
			for (int k = 0; k < u->nops; k++)
				if (u->ops[k] == i && (ir_stage(m, u) != ir_stage(m, c) || ir_mb(m, u) != ir_mb(m, c))) {
					(*mismatched)++;
					k = u->nops;
				}
		}
	}
}

static void test_reads(const char *mesh, const char *train)
{
	Arena a;
	arena_init(&a);
	IrModule *off = build(&a, mesh, train, NULL, "recompute");
	IrModule *on = build(&a, mesh, train, "recompute=true", "recompute");
	if (off && on) {
		int before = internal_reads(off), after = internal_reads(on), nc, bad;
		clones(on, off, &nc, &bad);
		fprintf(stderr,
		        "recompute (%s%s%s): %d backward reads of block internals -> %d; "
		        "%d nodes recomputed\n",
		        mesh, train ? ", " : "", train ? train : "", before, after, nc);
		CHECK(before > 0);
		CHECK_EQ_INT(after, 0);
		CHECK(nc > 0);
		CHECK_EQ_INT(nc, on->nnodes - off->nnodes); /* recompute adds clones only */
		CHECK_EQ_INT(bad, 0);
		/* the forward is untouched: same nodes up to the loss */
		CHECK_EQ_INT(on->loss, off->loss);
		for (int i = 0; i <= on->loss && i <= off->loss; i++)
			CHECK_EQ_INT(on->nodes[i]->op, off->nodes[i]->op);
	}
	arena_free(&a);
}

/* Forward nodes of block instances computed from the data: what
 * recompute layer runs again, once each (each belongs to one micro-batch
 * and one stage). */
static int block_forward(const IrModule *m)
{
	int n = 0, L = m->loss;
	bool *act = calloc((size_t)L + 1, sizeof(bool));
	for (int i = 0; i <= L; i++) {
		const IrNode *x = m->nodes[i];
		act[i] = x->op == IR_OP_INPUT;
		for (int k = 0; k < x->nops; k++)
			act[i] = act[i] || act[x->ops[k]];
		n += i < L && ir_block(m, x) >= 0 && act[i] && !is_leaf(x->op);
	}
	free(act);
	return n;
}

static int unread_after_loss(const IrModule *m)
{
	bool *read = calloc((size_t)m->nnodes, sizeof(bool));
	int n = 0;
	for (int j = 0; j < m->nnodes; j++)
		for (int k = 0; k < m->nodes[j]->nops; k++)
			read[m->nodes[j]->ops[k]] = true;
	for (int i = m->loss + 1; i < m->nnodes; i++)
		n += !read[i];
	free(read);
	return n;
}

static void test_layer(const char *mesh, const char *train)
{
	Arena a;
	arena_init(&a);
	IrModule *off = build(&a, mesh, train, NULL, "recompute");
	IrModule *rd = build(&a, mesh, train, "recompute=true", "recompute");
	IrModule *on = build(&a, mesh, train, "recompute=layer", "recompute");
	if (off && rd && on) {
		int nrd, nc, bad;
		clones(rd, off, &nrd, &bad);
		clones(on, off, &nc, &bad);
		/* the clones nothing reads (the rest unread are the updates) */
		int unread = unread_after_loss(on) - unread_after_loss(off);
		CHECK_EQ_INT(unread_after_loss(rd), unread_after_loss(off));
		int want = block_forward(off);
		fprintf(stderr,
		        "recompute layer (%s%s%s): %d nodes recomputed (recompute true: %d), "
		        "%d of them read by nothing; %d forward nodes in blocks\n",
		        mesh, train ? ", " : "", train ? train : "", nc, nrd, unread, want);
		CHECK_EQ_INT(internal_reads(on), 0);
		CHECK_EQ_INT(bad, 0);
		CHECK_EQ_INT(nc, on->nnodes - off->nnodes);
		CHECK_EQ_INT(nc, want); /* the whole forward of every block, once */
		CHECK(nc > nrd);
		CHECK(unread > 0); /* the outputs: the last GEMM, the residual add */
		CHECK_EQ_INT(on->loss, off->loss);
	}
	arena_free(&a);
}

static int64_t act_peak(const char *mesh, const char *t1, const char *t2)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	int64_t peak = -1;
	IrModule *m = build(&a, mesh, t1, t2, NULL);
	FusePlan fp;
	MemPlan mp;
	if (m && pass_fuse_plan(m, &a, &d, &fp) && pass_memplan(m, &fp, &a, &d, &mp))
		peak = mp.arena_bytes[MEMPLAN_ARENA_ACT];
	CHECK(peak > 0);
	arena_free(&a);
	return peak;
}

/* cut: the ACT peak must fall by at least a quarter (where the block
 * internals are most of it); otherwise only never rise. */
static void test_peak(const char *mesh, const char *train, bool cut)
{
	int64_t off = act_peak(mesh, train, NULL), on = act_peak(mesh, train, "recompute=true");
	fprintf(stderr,
	        "recompute: gpt layers=4 (%s%s%s): ACT peak %lld bytes without, %lld "
	        "with (%.0f%%)\n",
	        mesh, train ? ", " : "", train ? train : "", (long long)off, (long long)on,
	        off > 0 ? 100.0 * (double)on / (double)off : 0.0);
	CHECK(on > 0 && on <= off);
	if (cut)
		CHECK(on * 4 < off * 3);
}

int main(void)
{
	test_reads("dp=1", NULL);
	test_reads("pp=2,dp=1,tp=1", "microbatches=4");
	test_reads("dp=2,tp=2", "zero=3");
	test_layer("dp=1", NULL);
	test_layer("pp=2,dp=1,tp=1", "microbatches=4");
	test_layer("dp=2,tp=2", "zero=3");
	test_peak("dp=1", NULL, true);
	/* DP x TP without DDP buckets: with them (bucket_mb 25, the default)
	 * the peak is the bucket concats after the backward, which recompute
	 * leaves as they are */
	test_peak("dp=2,tp=2", "bucket_mb=0", true);
	/* 1F1B: each micro-batch's weight-gradient terms stay live until the
	 * last backward sums them, and dominate the peak */
	test_peak("pp=2,dp=1,tp=1", "microbatches=4", false);
	return check_report();
}
