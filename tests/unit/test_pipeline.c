/* test_pipeline.c - passes "stages" and "pipeline" (passes/pipeline.c):
 * chunks from annotations and by compute, the per-rank programs in the
 * schedule's order, the send/recv between stages, the loss on every
 * rank, and the errors a bad schedule gets.  That pipelined training
 * equals one device is tests/e2e/equiv.sh's `pipeline` set. */
#include "check.h"
#include "testlib_lower.h"
#include "frontend/lower.h"
#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/schedule.h"

#include <stdlib.h>

/* Four blocks on `stage i * pp / layers`; a tied first/last weight
 * (wt used at the start and, transposed, at the end) as GPT's wte. */
static const char *src_fmt =
        "model pipe\n"
        "let batch = 24, d = 16, layers = 4\n"
        "mesh (pp = %d, dp = 1)\n"
        "input x : f32[batch, d] @ [dp, _]\n"
        "input y : f32[batch, d] @ [dp, _]\n"
        "param wt : f32[d, d] init normal(0, 0.1)\n"
        "block layer(h) {\n"
        "  param w : f32[d, d] init normal(0, 0.1)\n"
        "  return gelu(h @ w)\n"
        "}\n"
        "forward {\n"
        "  h = x @ wt\n"
        "  for i in 0 .. layers %s {\n"
        "    h = layer(h)\n"
        "  }\n"
        "  loss = mse(h @ transpose(wt), y)\n"
        "}\n"
        "train {\n"
        "  optimizer sgd(lr = 0.1, momentum = 0.9)\n"
        "  microbatches %d\n"
        "  schedule %s\n"
        "}\n";

static IrModule *compile(Arena *a, Diag *d, int P, const char *stage, int M, const char *sched,
                         const char *upto)
{
	IrModule *m = test_lower(a, d, arena_printf(a, src_fmt, P, stage, M, sched), NULL, NULL,
	                         NULL);
	return m && pass_run_until(m, d, NULL, upto) ? m : NULL;
}

static int count(const IrModule *m, int stage, IrOp op, int phase)
{
	int c = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (ir_stage(m, n) == stage && n->op == op && (phase < 0 || ir_phase(m, n) == phase))
			c++;
	}
	return c;
}

/* Rank r's program, as the sequence of its (work, micro-batch) items: the
 * nodes of one micro-batch in the forward or backward phase, consecutive
 * repeats merged. */
static int items_of(const IrModule *m, int r, SchedItem *out, int cap)
{
	int n = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *x = m->nodes[i];
		if (ir_stage(m, x) != r || ir_mb(m, x) < 0 || ir_phase(m, x) > IR_PHASE_BACKWARD)
			continue;
		SchedWork w = ir_phase(m, x) == IR_PHASE_FORWARD ? SCHED_F : SCHED_B;
		if (n > 0 && out[n - 1].work == w && out[n - 1].mb == ir_mb(m, x))
			continue;
		if (n < cap)
			out[n] = (SchedItem){ w, ir_mb(m, x), 0 };
		n++;
	}
	return n;
}

static void test_order(const char *sched, SchedKind k, int P, int M)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = compile(&a, &d, P, "stage i * pp / layers", M, sched, "pipeline");
	CHECK(m != NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	for (int r = 0; r < P; r++) {
		SchedItem want[64], got[256];
		int nw = sched_build(k, P, M, 1, r, want, 64, NULL, 0);
		int ng = items_of(m, r, got, 256);
		CHECK_EQ_INT(ng, nw);
		int same = ng == nw;
		for (int t = 0; same && t < nw; t++)
			same = got[t].work == want[t].work && got[t].mb == want[t].mb;
		if (!same)
			fprintf(stderr, "%s P=%d M=%d: rank %d runs its items out of the schedule's "
			        "order\n", sched, P, M, r);
		CHECK(same);
		/* one activation forward and one gradient back per micro-batch
		 * and neighbour */
		CHECK_EQ_INT(count(m, r, IR_OP_SEND, IR_PHASE_FORWARD), r < P - 1 ? M : 0);
		CHECK_EQ_INT(count(m, r, IR_OP_RECV, IR_PHASE_FORWARD), r > 0 ? M : 0);
		/* the loss on every rank: one all_reduce over pp named loss */
		int losses = 0;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (ir_stage(m, n) == r && n->role == IR_ROLE_LOSS) {
				losses++;
				CHECK(n->op == IR_OP_ALL_REDUCE);
			}
		}
		CHECK_EQ_INT(losses, 1);
	}
	/* every node belongs to one rank and one phase */
	for (int i = 0; i < m->nnodes; i++) {
		CHECK(ir_stage(m, m->nodes[i]) >= 0 && ir_stage(m, m->nodes[i]) < P);
		CHECK(ir_phase(m, m->nodes[i]) >= 0);
		for (int k = 0; k < m->nodes[i]->nops; k++)
			CHECK(ir_stage(m, m->nodes[m->nodes[i]->ops[k]]) == ir_stage(m, m->nodes[i]));
	}
	/* the text form round-trips exactly (stage, mb, phase, block) */
	char *t1 = NULL, *t2 = NULL;
	size_t n1 = 0, n2 = 0;
	FILE *f1 = open_memstream(&t1, &n1);
	ir_print(f1, m);
	fclose(f1);
	SrcFile txt = { .name = "p.ir", .text = t1, .len = n1 };
	IrModule *back = ir_parse(&a, &d, &txt);
	CHECK(back != NULL);
	if (back) {
		FILE *f2 = open_memstream(&t2, &n2);
		ir_print(f2, back);
		fclose(f2);
		CHECK(n1 == n2 && memcmp(t1, t2, n1) == 0);
	}
	free(t1);
	free(t2);
	/* activations held between a micro-batch's forward and backward:
	 * M micro-batches under GPipe, P - r under 1F1B (M >= P) */
	FusePlan fp;
	MemPlan mp;
	CHECK(pass_fuse_plan(m, &a, &d, &fp) && pass_memplan(m, &fp, &a, &d, &mp));
	CHECK_EQ_INT(mp.nstages, P);
	for (int r = 0; r < P; r++) {
		int want = k == SCHED_GPIPE ? M : (P - r < M ? P - r : M);
		CHECK_EQ_INT(pass_memplan_inflight(m, &mp, r), want);
	}
	/* the tied weight: its owner (rank 0) sends it after the update, the
	 * last rank receives it into its copy */
	CHECK_EQ_INT(count(m, 0, IR_OP_SEND, IR_PHASE_OPTIMIZER), 1);
	CHECK_EQ_INT(count(m, P - 1, IR_OP_RECV, IR_PHASE_OPTIMIZER), 1);
	CHECK_EQ_INT(count(m, P - 1, IR_OP_ASSIGN, IR_PHASE_OPTIMIZER), 1);
	arena_free(&a);
}

/* Without annotations the program is cut by compute: six equal matmuls
 * (the first, four blocks, the head) over four chunks, in order, every
 * chunk used. */
static void test_auto_split(void)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = compile(&a, &d, 4, "", 4, "1f1b", "stages");
	CHECK(m != NULL);
	int last = 0, used = 0;
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		CHECK(ir_stage(m, n) >= 0 && ir_stage(m, n) < 4);
		if (n->op != IR_OP_MATMUL)
			continue;
		CHECK(ir_stage(m, n) >= last);
		last = ir_stage(m, n);
		used |= 1 << ir_stage(m, n);
	}
	CHECK_EQ_INT(used, 15);
	arena_free(&a);
}

static void expect_error(int P, int M, const char *sched, const char *want, int line)
{
	Arena a;
	arena_init(&a);
	TestCapture c;
	Diag d;
	diag_init(&d, capture_open(&c));
	IrModule *m = compile(&a, &d, P, "stage i * pp / layers", M, sched, NULL);
	const char *buf = capture_text(&c);
	CHECK(m == NULL);
	CHECK(strstr(buf, want));
	char at[32];
	snprintf(at, sizeof at, "t.dtm:%d:", line);
	CHECK(strstr(buf, at));
	if (!strstr(buf, want) || !strstr(buf, at))
		fprintf(stderr, "want '%s' at %s in:\n%s\n", want, at, buf);
	capture_free(&c);
	arena_free(&a);
}

/* Stage annotations against the data flow are errors at the annotation
 * (line 13, the `stage` expression), naming the value that would flow
 * back, with a note where one helps: never a silent re-assignment (which
 * put every layer on one stage). */
static void expect_stage_error(int P, const char *stage, const char *sched, const char *want,
                               const char *note)
{
	Arena a;
	arena_init(&a);
	TestCapture c;
	Diag d;
	diag_init(&d, capture_open(&c));
	IrModule *m = compile(&a, &d, P, stage, 4, sched, "stages");
	const char *buf = capture_text(&c);
	CHECK(m == NULL);
	CHECK(strstr(buf, want) != NULL);
	CHECK(!note || strstr(buf, note) != NULL);
	CHECK_EQ_INT(d.nerr, 1);
	if (m || !strstr(buf, want) || (note && !strstr(buf, note)))
		fprintf(stderr, "P = %d, %s, %s: want '%s' in:\n%s\n", P, stage, sched, want, buf);
	capture_free(&c);
	arena_free(&a);
}

static void test_stage_errors(void)
{
	/* layers on stages 1, 1, 0, 0 and 3, 2, 1, 0 */
	expect_stage_error(2, "stage (pp - 1 - i * pp / layers)", "1f1b",
	                   "t.dtm:13:31: error: stage 0 reads h from stage 1: values flow only "
	                   "to the same or a later pipeline stage\n",
	                   NULL);
	expect_stage_error(4, "stage (pp - 1 - i * pp / layers)", "gpipe",
	                   "t.dtm:13:31: error: stage 2 reads h from stage 3: values flow only "
	                   "to the same or a later pipeline stage\n",
	                   NULL);
	/* round-robin (0, 1, 0, 1) is an interleaved schedule's layout */
	expect_stage_error(2, "stage i % pp", "1f1b",
	                   "t.dtm:13:30: error: stage 0 reads h from stage 1: values flow only "
	                   "to the same or a later pipeline stage\n",
	                   "t.dtm:21:12: note: stages that go round the pipeline 2 times (layer i "
	                   "on stage i % pp) are virtual stages: schedule interleaved(2)\n");
	expect_stage_error(2, "stage i % pp", "interleaved(4)",
	                   "t.dtm:13:30: error: the stages go round the 2 pipeline ranks 2 times: "
	                   "2 virtual stages per rank, but the schedule is interleaved(4)\n",
	                   "t.dtm:21:12: note: schedule interleaved(2) runs these as written\n");
}

/* Round-robin stages under interleaved(2) are Megatron's virtual stages:
 * layer i is model chunk i (round i / P, stage i % P) on rank i % P,
 * where a cut by compute would have put layer 0 on chunk 1 (the first
 * matmul and the head are a block's worth each); the pipeline builds. */
static void test_round_robin(void)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = compile(&a, &d, 2, "stage i % pp", 4, "interleaved(2)", "stages");
	CHECK(m != NULL);
	int seen = 0;
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_MATMUL)
			continue;
		int want = ir_block(m, n) >= 0 ? ir_block(m, n) : seen ? 3 : 0;
		if (ir_stage(m, n) != want)
			fprintf(stderr, "matmul %%%d (block %d) on chunk %d, want %d\n", i, ir_block(m, n),
			        ir_stage(m, n), want);
		CHECK_EQ_INT(ir_stage(m, n), want);
		seen++;
	}
	CHECK_EQ_INT(seen, 6);
	arena_free(&a);
	arena_init(&a);
	m = compile(&a, &d, 2, "stage i % pp", 4, "interleaved(2)", "pipeline");
	CHECK(m != NULL);
	/* after `pipeline` a node's stage is its rank: block b's on b % 2 */
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_MATMUL && ir_block(m, n) >= 0 && ir_phase(m, n) == IR_PHASE_FORWARD)
			CHECK_EQ_INT(ir_stage(m, n), ir_block(m, n) % 2);
	}
	arena_free(&a);
}

/* Token ids are zero-padded as float rows are: micro-batches whose rows do
 * not split evenly over dp (1 row over 2 ranks; 2 over 3, the batch of 4
 * itself uneven) compile through every pass (they were refused at the
 * input; tests/e2e/equiv.sh runs such layouts, where the ids take an i32
 * pad, against one device). */
static void test_int_rows(void)
{
	static const char *tok =
	        "model tok\n"
	        "let vocab = 16, ctx = 4, d = 8, batch = 4\n"
	        "mesh (dp = 2)\n"
	        "input tokens : i32[batch, ctx] @ [dp, _]\n"
	        "input targets : i32[batch, ctx] @ [dp, _]\n"
	        "param wte : f32[vocab, d] init normal(0, 0.02)\n"
	        "forward {\n"
	        "  logits = embed(wte, tokens) @ transpose(wte)\n"
	        "  loss = cross_entropy(logits, targets)\n"
	        "}\n"
	        "train {\n"
	        "  optimizer sgd(lr = 0.1)\n"
	        "}\n";
	static const struct {
		const char *mesh, *train[3];
	} cases[] = {
	        {"dp=2", {"microbatches=2", NULL, NULL}},
	        {"dp=2", {"microbatches=4", NULL, NULL}},
	        {"dp=3", {"uneven_shards=true", "microbatches=2", NULL}},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Arena a;
		arena_init(&a);
		TestCapture c;
		Diag d;
		diag_init(&d, capture_open(&c));
		IrModule *m = test_lower_trains(&a, &d, tok, cases[k].mesh, NULL, cases[k].train);
		bool ok = m && pass_run_until(m, &d, NULL, NULL);
		CHECK(ok);
		if (!ok)
			fprintf(stderr, "%s %s: %s", cases[k].mesh, cases[k].train[0], capture_text(&c));
		capture_free(&c);
		arena_free(&a);
	}
}

/* ZeRO-3 gathers a unit's params as one coalesced all_gather (a concat of
 * the shards); GPT's embedding unit (wte, wpe) is stage 0's, but the head
 * on the last chunk reads the tied wte too.  The concat was not a view,
 * so the gathered unit lived on stage 0 and went to the head's rank by a
 * send placed where the interleaved schedule deadlocked (pp = 4 x dp = 2,
 * 2 layers over 8 chunks: "internal error: the stage programs deadlock");
 * now each rank that reads it gathers its own. */
static void test_tied_zero3_interleaved(void)
{
	static const char *const train[] = {"zero=3", "microbatches=4", "schedule=interleaved(2)",
	                                    NULL};
	char *src = slurp("models/gpt.dtm");
	CHECK(src != NULL);
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = src ? test_lower_trains(&a, &d, src, "pp=4,dp=2,tp=1", NULL, train) : NULL;
	CHECK(m && pass_run_until(m, &d, NULL, "pipeline"));
	/* the head's rank gathers the unit itself: an all_gather over dp on
	 * more than stage 0 */
	int gathers[4] = {0};
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int r = ir_stage(m, n);
		if (n->op == IR_OP_ALL_GATHER && r >= 0 && r < 4)
			gathers[r]++;
	}
	CHECK(gathers[0] > 0);
	CHECK(gathers[1] + gathers[2] + gathers[3] > 0);
	arena_free(&a);
	free(src);
}

/* Sends and recvs within a stage (context parallelism's ring and its
 * load-balancing swap, over cp) keep their order in every schedule: each
 * rank of a stage runs the same program, so a recv must come after the
 * send that feeds its peer's (per channel: axes, shift, mirror).  ZB-H1
 * once put the backward's sends, which no node of their rank reads, in
 * the W passes and their recvs in B: both ranks waited in B for the
 * other's W.  models/llama.dtm on pp = 2 x cp = 2, ring attention. */
static void test_stage_p2p(void)
{
	static const char *const scheds[] = {"gpipe", "1f1b", "zb", "interleaved(2)"};
	static const char *const defs[] = {"layers", "4", NULL};
	char *src = slurp("models/llama.dtm");
	CHECK(src != NULL);
	for (int s = 0; src && s < 4; s++) {
		Arena a;
		arena_init(&a);
		Diag d;
		diag_init(&d, stderr);
		const char *train[] = {"microbatches=2", arena_printf(&a, "schedule=%s", scheds[s]),
		                       "context_parallel=ring", NULL};
		IrModule *m = test_lower_trains(&a, &d, src, "pp=2,dp=1,cp=2,tp=1", defs, train);
		/* the pass ends with pipeline_check_p2p: zb failed it (recv %463
		 * on stage 1 before its send) until its sends and recvs were B */
		CHECK(m && pass_run_until(m, &d, NULL, "pipeline"));
		int pp = m ? m->pp_axis : 0, sends = 0;
		for (int i = 0; m && i < m->nnodes; i++)
			sends += m->nodes[i]->op == IR_OP_SEND &&
			         !(ir_attr_coll(m->nodes[i])->axes & (1u << pp));
		CHECK(sends > 0); /* the ring's and the swap's, on both stages */
		/* the check fails a program with a send moved after its recv
		 * (partition emits each pair adjacent: send, then recv) */
		int i = 0;
		while (m && i + 1 < m->nnodes &&
		       !(m->nodes[i]->op == IR_OP_SEND && m->nodes[i + 1]->op == IR_OP_RECV &&
		         !(ir_attr_coll(m->nodes[i])->axes & (1u << pp))))
			i++;
		CHECK(m && i + 1 < m->nnodes);
		if (m && i + 1 < m->nnodes) {
			IrNode *t = m->nodes[i];
			m->nodes[i] = m->nodes[i + 1];
			m->nodes[i + 1] = t;
			TestCapture cap;
			Diag d2;
			diag_init(&d2, capture_open(&cap));
			CHECK(!pipeline_check_p2p(m, &d2, 2, pp));
			CHECK(strstr(capture_text(&cap), "comes before the send its peer makes"));
			capture_free(&cap);
		}
		arena_free(&a);
	}
	free(src);
}

int main(void)
{
	test_int_rows();
	test_order("gpipe", SCHED_GPIPE, 2, 4);
	test_order("1f1b", SCHED_1F1B, 2, 4);
	test_order("1f1b", SCHED_1F1B, 4, 8);
	test_order("gpipe", SCHED_GPIPE, 4, 4);
	test_order("1f1b", SCHED_1F1B, 4, 2); /* M < P: a longer bubble, still valid */
	test_auto_split();
	test_stage_errors();
	test_round_robin();
	test_stage_p2p();
	test_tied_zero3_interleaved();
	/* one micro-batch: nothing unrolled (no node has an mb), every node
	 * is micro-batch 0's: one activation each way */
	{
		Arena a;
		arena_init(&a);
		Diag d;
		diag_init(&d, stderr);
		IrModule *m = compile(&a, &d, 2, "stage i * pp / layers", 1, "1f1b", "pipeline");
		CHECK(m != NULL);
		if (m) {
			CHECK_EQ_INT(count(m, 0, IR_OP_SEND, IR_PHASE_FORWARD), 1);
			CHECK_EQ_INT(count(m, 1, IR_OP_RECV, IR_PHASE_FORWARD), 1);
		}
		arena_free(&a);
	}
	/* schedule errors point at the train section's schedule line */
	expect_error(2, 3, "interleaved(2)", "multiple of P = 2", 21);
	expect_error(4, 2, "interleaved(2)", "M < P", 21);
	return check_report();
}
