/* test_plan_build.c - the in-memory Plan (codegen/plan_build.c).
 *
 * The driver's compile (drv_compile) of the repository's models: the plan has the shape the C back
 * end prints and the runtime validates (buffers inside their arenas, every
 * action's buffer ids and kernel indices in range, kernel names set and
 * kernel functions NULL), the collectives the placements imply, pipelined
 * plans with per-stage arenas, and errors reported rather than a plan.
 */
#include <stdlib.h>

#include "check.h"
#include "codegen/emit_c.h"
#include "codegen/plan_build.h"
#include "driver/driver.h"
#include "tools/cost.h"
#include "tools/hw.h"

static DtmPlan *compile(Arena *a, Diag *d, const char *path, const char *mesh, int ntrain,
                        const char *const *train, IrModule **m)
{
	DrvOptions o = {.lower = {.mesh = mesh, .ntrain = ntrain}};
	for (int i = 0; i < ntrain; i++)
		o.lower.train[i] = train[i];
	Compiled c;
	if (!drv_compile(&c, a, d, path, &o))
		return NULL;
	if (m)
		*m = c.m;
	return c.plan;
}

/* What rt_plan_validate checks, less the kernel functions (NULL here). */
static void check_consistent(const DtmPlan *p)
{
	CHECK(p->version == DTM_PLAN_VERSION);
	CHECK(p->nstages >= 1 && p->stages);
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		const int64_t *ab = p->nstages > 1 ? p->stages[b->stage].arena_bytes : p->arena_bytes;
		CHECK(b->arena >= 0 && b->arena < DTM_ARENA_COUNT);
		CHECK(b->offset >= 0 && b->offset + b->bytes <= ab[b->arena]);
		CHECK(b->placement != NULL);
	}
	for (int k = 0; k < p->nkernels; k++) {
		CHECK(p->kernels[k] == NULL);
		CHECK(p->kernel_names[k] && p->kernel_names[k][0]);
	}
	for (int s = 0; s < p->nstages; s++)
		for (int i = 0; i < p->stages[s].nactions; i++) {
			const DtmAction *a = &p->stages[s].actions[i];
			CHECK(a->label != NULL);
			for (int j = 0; j < a->nargs; j++)
				CHECK(a->args[j] >= 0 && a->args[j] < p->nbuffers);
			if (a->kind == DTM_ACT_KERNEL)
				CHECK(a->kernel >= 0 && a->kernel < p->nkernels);
		}
	CHECK(p->loss >= 0 && p->loss < p->nbuffers);
}

static int count_coll(const DtmPlan *p, int s, DtmColl c, uint32_t axes)
{
	int n = 0;
	for (int i = 0; i < p->stages[s].nactions; i++) {
		const DtmAction *a = &p->stages[s].actions[i];
		n += a->kind == DTM_ACT_COLL && a->coll == c && a->axes == axes;
	}
	return n;
}

static void test_mlp_dp_tp(void)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	IrModule *m = NULL;
	DtmPlan *p = compile(&a, &d, "models/mlp.dtm", "dp=2,tp=2", 0, NULL, &m);
	CHECK(p != NULL && m != NULL);
	if (p) {
		check_consistent(p);
		CHECK_EQ_STR(p->model, "mlp");
		CHECK_EQ_INT(p->mesh_naxes, 2);
		CHECK_EQ_INT(p->nstages, 1);
		CHECK_EQ_INT(p->pp_axis, -1);
		CHECK_EQ_INT(p->train.lr_schedule, DTM_LR_CONSTANT);
		CHECK_EQ_INT(p->train.optimizer, DTM_OPTIMIZER_SGD);
		CHECK_EQ_INT(p->train.batch, 16);
		CHECK_EQ_INT(p->train.data_kind, DTM_DATA_REGRESSION);
		/* Megatron MLP: the row-parallel output all-reduced over tp;
		 * the gradients (one bucket) and the loss over dp */
		CHECK(count_coll(p, 0, DTM_COLL_ALL_REDUCE, 2u) >= 1);
		CHECK(count_coll(p, 0, DTM_COLL_ALL_REDUCE, 1u) >= 2);
		/* w1 [32, 64] split over tp on dim 1: this rank's [32, 32] */
		bool found = false;
		for (int i = 0; i < p->nbuffers; i++) {
			const DtmBuffer *b = &p->buffers[i];
			if (b->name && !strcmp(b->name, "w1")) {
				found = true;
				CHECK_EQ_INT(b->role, DTM_ROLE_PARAM);
				CHECK_EQ_INT(b->shape[1], 32);
				CHECK_EQ_INT(b->global_shape[1], 64);
				CHECK_EQ_INT(b->split_naxes[1], 1);
				CHECK_EQ_INT(b->split_axes[1][0], 1);
				CHECK_EQ_INT(b->bytes, 32 * 32 * 4);
			}
		}
		CHECK(found);
		/* the gradient bucket's unpack slices: each charged what it
		 * copies (read and write), not the whole bucket it reads from
		 * (the cost model sums the arguments' bytes otherwise) */
		int slices = 0;
		for (int i = 0; i < p->stages[0].nactions; i++) {
			const DtmAction *x = &p->stages[0].actions[i];
			if (x->kind != DTM_ACT_KERNEL || strcmp(p->kernel_names[x->kernel], "slice"))
				continue;
			const DtmBuffer *in = &p->buffers[x->args[0]];
			const DtmBuffer *out = &p->buffers[x->args[x->nargs - 1]];
			CHECK_EQ_INT(x->mem_bytes, 2 * out->bytes);
			slices += in->bytes > out->bytes;
		}
		CHECK(slices >= 2);
	}
	CHECK_EQ_INT(d.nerr, 0);
	arena_free(&a);
}

static void test_gpt_pipeline(void)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	const char *train[] = {"microbatches=4", "schedule=1f1b"};
	IrModule *m = NULL;
	DtmPlan *p = compile(&a, &d, "models/gpt.dtm", "pp=2,dp=1,tp=1", 2, train, &m);
	CHECK(p != NULL);
	if (p) {
		check_consistent(p);
		CHECK_EQ_INT(p->nstages, 2);
		CHECK_EQ_INT(p->pp_axis, 0); /* gpt.dtm's mesh (pp, dp, tp) */
		CHECK_EQ_INT(p->train.optimizer, DTM_OPTIMIZER_ADAMW);
		CHECK_EQ_INT(p->train.lr_schedule, DTM_LR_COSINE);
		CHECK_EQ_INT(p->train.schedule, DTM_PIPE_1F1B);
		CHECK_EQ_INT(p->train.microbatches, 4);
		CHECK_EQ_INT(p->train.data_kind, DTM_DATA_TOKENS);
		for (int s = 0; s < 2; s++) {
			int64_t sum = 0, sends = 0, recvs = 0;
			for (int k = 0; k < DTM_ARENA_COUNT; k++)
				sum += p->stages[s].arena_bytes[k];
			CHECK(sum > 0);
			CHECK(p->stages[s].loss >= 0);
			for (int i = 0; i < p->stages[s].nactions; i++) {
				sends += p->stages[s].actions[i].kind == DTM_ACT_SEND;
				recvs += p->stages[s].actions[i].kind == DTM_ACT_RECV;
			}
			/* activations forward, their gradients back: both ways */
			CHECK(sends > 0 && recvs > 0);
		}
		/* the plan's inputs are stage 0's copies */
		CHECK_EQ_INT(p->inputs[0], p->stages[0].inputs[0]);
	}
	arena_free(&a);
}

static void test_errors(void)
{
	Arena a;
	Diag d;
	arena_init(&a);
	FILE *sink = fopen("/dev/null", "w");
	diag_init(&d, sink ? sink : stderr);
	const char *train[] = {"zero=5"};
	CHECK(compile(&a, &d, "models/mlp.dtm", NULL, 1, train, NULL) == NULL);
	CHECK(d.nerr > 0);
	arena_free(&a);
	arena_init(&a);
	diag_init(&d, sink ? sink : stderr);
	CHECK(compile(&a, &d, "models/no_such_model.dtm", NULL, 0, NULL, NULL) == NULL);
	CHECK(d.nerr > 0);
	arena_free(&a);
	if (sink)
		fclose(sink);
}

/* The IR text of c's module and the program for its plan: every field of
 * the plan, as `dtmc build --keep-c` writes it (src_dir "." : the tests
 * run in the repository root). */
static char *program_text(const Compiled *c, Diag *d)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ir_print(f, c->m);
	CgEmitOptions eo = {.src_dir = "."};
	CHECK(cg_emit_c(f, c->m, c->an.fuse, c->an.mem, c->plan, &eo, d));
	fclose(f);
	return buf;
}

/* The same model compiled twice gives the same IR and plan, a clone of
 * the final module prints the same, and the lean plan sweep costs is the
 * full one less its text: what the passes decide depends on the program,
 * not on where the nodes or their tables happen to sit. */
static void test_repeatable(void)
{
	static const char *const train[] = {"microbatches=4", "zero=1", "recompute=true"};
	DrvOptions o = {.lower = {.mesh = "pp=2,dp=2,tp=1", .ntrain = 3}};
	for (int i = 0; i < 3; i++)
		o.lower.train[i] = train[i];
	Arena a[2];
	Diag d;
	diag_init(&d, stderr);
	Compiled c[2];
	char *text[2] = {NULL, NULL};
	bool ok = true;
	for (int k = 0; k < 2; k++) {
		arena_init(&a[k]);
		ok = ok && drv_compile(&c[k], &a[k], &d, "models/gpt.dtm", &o);
		text[k] = ok ? program_text(&c[k], &d) : NULL;
	}
	CHECK(ok && text[0] && text[1]);
	if (ok && text[0] && text[1]) {
		CHECK(strcmp(text[0], text[1]) == 0);
		IrModule *cl = ir_module_clone(&a[1], c[0].m);
		CHECK(cl != NULL);
		if (cl) {
			Compiled cc = c[0];
			cc.m = cl;
			char *t = program_text(&cc, &d);
			CHECK(t && strcmp(t, text[0]) == 0);
			free(t);
		}
		const DtmPlan *p = c[0].plan;
		DtmPlan *l = cg_plan_build_lean(c[0].m, c[0].an.fuse, c[0].an.mem, NULL, &a[0], &d);
		CHECK(l != NULL);
		if (l) {
			CHECK_EQ_INT(l->nbuffers, p->nbuffers);
			CHECK_EQ_INT(l->nstages, p->nstages);
			CHECK_EQ_INT(l->loss, p->loss);
			for (int i = 0; i < l->nbuffers && i < p->nbuffers; i++) {
				const DtmBuffer *x = &l->buffers[i], *y = &p->buffers[i];
				CHECK((!x->name && !y->name) || (x->name && y->name && !strcmp(x->name, y->name)));
				CHECK(x->role == y->role && x->dtype == y->dtype && x->arena == y->arena);
				CHECK(x->offset == y->offset && x->bytes == y->bytes && x->stage == y->stage);
			}
			for (int s = 0; s < l->nstages && s < p->nstages; s++) {
				const DtmStage *ls = &l->stages[s], *ps = &p->stages[s];
				CHECK_EQ_INT(ls->nactions, ps->nactions);
				CHECK(memcmp(ls->arena_bytes, ps->arena_bytes, sizeof ls->arena_bytes) == 0);
				for (int i = 0; i < ls->nactions && i < ps->nactions; i++) {
					const DtmAction *x = &ls->actions[i], *y = &ps->actions[i];
					CHECK(x->kind == y->kind && x->phase == y->phase &&
					      x->microbatch == y->microbatch && x->nargs == y->nargs);
					CHECK(memcmp(x->args, y->args, sizeof x->args) == 0);
					CHECK(x->coll == y->coll && x->axes == y->axes && x->bytes == y->bytes);
					CHECK(x->m == y->m && x->n == y->n && x->k == y->k && x->batch == y->batch);
				}
			}
		}
	}
	CHECK_EQ_INT(d.nerr, 0);
	free(text[0]);
	free(text[1]);
	arena_free(&a[0]);
	arena_free(&a[1]);
}

/* The lean plan sweep ranks by costs what the full plan inspect reports
 * does, the regression feed included (it reads the inputs' shapes: the
 * lean plan once had none, and sweep ranked the mlp on tp=2, which makes
 * the whole batch on each rank, above dp=2 by 11 ms of feed). */
static void test_lean_cost(void)
{
	static const char *const meshes[] = {"dp=1,tp=2", "dp=2,tp=1"};
	for (int k = 0; k < 2; k++) {
		Arena a;
		Diag d;
		arena_init(&a);
		diag_init(&d, stderr);
		DrvOptions o = {.lower = {.mesh = meshes[k]}};
		Compiled c;
		bool ok = drv_compile(&c, &a, &d, "models/mlp.dtm", &o);
		CHECK(ok);
		DtmPlan *l = ok ? cg_plan_build_lean(c.m, c.an.fuse, c.an.mem, NULL, &a, &d) : NULL;
		CHECK(l != NULL);
		if (l) {
			const HwProfile *cpu = hw_builtin("cpu");
			CHECK(cpu != NULL);
			HwProfile hw = *cpu;
			hw.feed_rate = 1e9;
			hw.feed_x_rate = 1e8;
			CostReport rf, rl;
			CHECK(cost_plan_step(c.plan, &hw, 1, &rf) == 0);
			CHECK(cost_plan_step(l, &hw, 1, &rl) == 0);
			double feed = cost_feed_seconds(c.plan, &hw);
			fprintf(stderr, "lean cost: mlp on %s: step %.6g s (full) %.6g s (lean), feed %.3g s\n",
			        meshes[k], rf.step_s, rl.step_s, feed);
			CHECK(feed > 0);
			CHECK_NEAR(cost_feed_seconds(l, &hw), feed, 0.0);
			CHECK_NEAR(rl.step_s, rf.step_s, 1e-12 * rf.step_s);
			cost_report_free(&rf);
			cost_report_free(&rl);
		}
		arena_free(&a);
	}
}

/* The FLOPs of the attention kernels on rank 0 of LLaMA (batch 8, ctx 32,
 * d 64, 2 layers, causal), summed per op, into f[op]. */
static void attn_flops_of(const char *model, const char *mesh, const char *train, int64_t *f)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	IrModule *m = NULL;
	const char *tr[1] = {train};
	DtmPlan *p = compile(&a, &d, model, mesh, train ? 1 : 0, tr, &m);
	CHECK(p != NULL && m != NULL);
	for (int s = 0; p && s < p->nstages; s++)
		for (int i = 0; i < p->stages[s].nactions; i++) {
			const DtmAction *act = &p->stages[s].actions[i];
			if (act->kind == DTM_ACT_KERNEL && act->node >= 0 && p->nstages > 0 &&
			    act->node < m->nnodes)
				f[m->nodes[act->node]->op] += act->flops;
		}
	CHECK_EQ_INT(d.nerr, 0);
	arena_free(&a);
}

/* Attention's kernels carry FLOPs for the cost model (plan_build.c's
 * attn_flops): one rank, 4 B T T D per layer halved by the causal mask
 * = 4 * 8 * 32 * 32 * 64 / 2 = 1,048,576, the backward twice that.  Ring
 * on cp = 4 (Tl = 8), load-balanced (2 chunks of 4 rows a rank): per
 * layer every block half of 4 * 8 * 8 * 8 * 64 = 131,072, 4 x 65,536 =
 * 262,144, a quarter of one device's; the backward's blocks twice that,
 * and it runs the forward's blocks again (for the merged output its
 * blocks read); the merge is bytes only. */
static void test_attention_flops(void)
{
	int64_t one[IR_OP_COUNT] = {0}, ring[IR_OP_COUNT] = {0};
	attn_flops_of("models/llama.dtm", "pp=1,dp=1,cp=1,tp=1", NULL, one);
	CHECK_EQ_INT(one[IR_OP_ATTENTION], 2 * 1048576);
	CHECK_EQ_INT(one[IR_OP_ATTENTION_BWD], 2 * 2 * 1048576);
	/* GPT's attention is the root of a fused group (its output's permute
	 * and reshape ride along): its kernel carries the FLOPs too (it had
	 * none, so the cost model priced it by its bytes: 3-5x too fast) */
	int64_t gpt[IR_OP_COUNT] = {0};
	attn_flops_of("models/gpt.dtm", "pp=1,dp=1,tp=1", NULL, gpt);
	CHECK_EQ_INT(gpt[IR_OP_ATTENTION], 2 * 1048576);
	CHECK_EQ_INT(gpt[IR_OP_ATTENTION_BWD], 2 * 2 * 1048576);
	attn_flops_of("models/llama.dtm", "pp=1,dp=1,cp=4,tp=1", "context_parallel=ring", ring);
	CHECK_EQ_INT(ring[IR_OP_ATTENTION] + ring[IR_OP_ATTENTION_BWD], 0);
	CHECK_EQ_INT(ring[IR_OP_ATTN_BLOCK], 2 * 2 * 4 * 65536);
	CHECK_EQ_INT(ring[IR_OP_ATTN_BLOCK_BWD], 2 * 2 * 4 * 65536);
	CHECK_EQ_INT(ring[IR_OP_ATTN_MERGE], 0);
}

/* The generated C holds each distinct kernel once (codegen/emit_c.c,
 * emit_kernels), and every plan kernel calls a function it defines.  GPT
 * at 6 layers has the 2-layer model's functions plus only what depends on
 * the parameter count (grad_norm's chunks: 4 more here), and under half
 * as many functions as plan kernels.  (What else grows: a DDP bucket's
 * unpacking slices and each micro-batch's input slice carry their offsets
 * as constants, so they are distinct kernels.) */
static int kernel_functions(const char *layers, int *nplan)
{
	static const char *const train[] = {"microbatches=2"};
	DrvOptions o = {.lower = {.mesh = "pp=1,dp=1,tp=1", .ntrain = 1, .ndefines = 1}};
	o.lower.train[0] = train[0];
	o.lower.define_names[0] = "layers";
	o.lower.define_values[0] = layers;
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	Compiled c;
	int n = -1;
	if (drv_compile(&c, &a, &d, "models/gpt.dtm", &o)) {
		char *t = program_text(&c, &d);
		*nplan = c.plan->nkernels;
		n = 0;
		for (const char *p = t; p && (p = strstr(p, "\nstatic void k_")); p++)
			n++;
		/* the table names a defined function for every plan kernel */
		int bad = 0;
		const char *tab = t ? strstr(t, "static const DtmKernelFn kernels[] = {") : NULL;
		for (const char *p = tab; p && (p = strstr(p, "\n\tk_")) && p < strstr(tab, "};"); p++) {
			char def[48];
			snprintf(def, sizeof def, "\nstatic void k_%d(", atoi(p + 4));
			bad += strstr(t, def) == NULL;
		}
		CHECK_EQ_INT(bad, 0);
		free(t);
	}
	arena_free(&a);
	return n;
}

static void test_distinct_kernels(void)
{
	int p2 = 0, p6 = 0;
	int k2 = kernel_functions("2", &p2), k6 = kernel_functions("6", &p6);
	CHECK(k2 > 0);
	CHECK(k6 >= k2 && k6 <= k2 + 4);
	CHECK(p6 > p2 && 2 * k6 < p6);
}

int main(void)
{
	test_mlp_dp_tp();
	test_gpt_pipeline();
	test_errors();
	test_repeatable();
	test_lean_cost();
	test_attention_flops();
	test_distinct_kernels();
	return check_report();
}
