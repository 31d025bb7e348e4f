/* test_pass_reads.c - what each pass declares it reads (passes/passes.c's
 * Pass.reads) is all it reads of the train settings.
 *
 * `dtmc sweep` shares the prefix of the pipeline that reads none of the
 * settings its candidates differ in (tools/sweep.c), so a pass reading a
 * setting it does not declare would make candidates share work they must
 * not.  For each pass on several layouts (DP, TP with SP and recompute,
 * ZeRO-3, a 2-stage pipeline with micro-batches, bf16): the pass runs on
 * its input, then on copies of that input with one undeclared setting
 * changed to another valid value, and the IR it leaves (printed with the
 * input's settings, and the analyses' plans after fuse and memplan) must
 * be the same.  A schedule change among gpipe, 1f1b and zb leaves the
 * model chunks as they are; interleaved(2) changes them too
 * (PASS_READS_CHUNKS), for the passes that read none of the three (no
 * setting changes the chunks alone, so a pass reading the schedule is not
 * checked for them).
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "driver/driver.h"

typedef struct Layout {
	const char *file, *mesh;
	const char *defines[12]; /* name, value, ..., NULL */
	const char *train[6];    /* --train, NULL-terminated */
} Layout;

static const Layout layouts[] = {
	{"tests/passes/tiny.dtm", "dp=2", {NULL}, {NULL}},
	{"tests/passes/tiny.dtm", "pp=2,dp=1", {NULL}, {"microbatches=2", NULL}},
	{"tests/passes/tiny.dtm", "dp=2", {NULL}, {"zero=3", "optimizer=adamw(lr = 1e-3, clip = 1.0)", NULL}},
	{"models/gpt.dtm", "dp=1,tp=2",
	 {"vocab", "8", "ctx", "4", "d", "8", "heads", "2", "layers", "1", NULL},
	 {"sequence_parallel=true", "recompute=true", "zero=1", NULL}},
	{"models/mlp.dtm", "dp=2,tp=2", {NULL}, {"precision=bf16", "microbatches=2", NULL}},
	/* uneven: the vocab of 9 over tp = 2 (the model says uneven_shards) */
	{"models/gpt.dtm", "dp=1,tp=2",
	 {"vocab", "9", "ctx", "4", "d", "8", "heads", "2", "layers", "1", NULL},
	 {"zero=3", NULL}},
};

/* Another valid value of setting f than t has, written into t; false when
 * the test has none to offer (the setting is then not varied). */
static bool perturb(IrTrain *t, IrTrainField f, uint32_t live_axes)
{
	switch (f) {
	case IR_TRAIN_OPTIMIZER:
		t->optimizer = t->optimizer == IR_OPTIMIZER_SGD ? IR_OPTIMIZER_ADAMW : IR_OPTIMIZER_SGD;
		if (t->optimizer == IR_OPTIMIZER_SGD)
			t->nesterov = false;
		return true;
	case IR_TRAIN_LR: t->lr *= 2; return true;
	case IR_TRAIN_BETA1: t->beta1 = t->beta1 == 0.5 ? 0.8 : 0.5; return true;
	case IR_TRAIN_BETA2: t->beta2 = t->beta2 == 0.9 ? 0.99 : 0.9; return true;
	case IR_TRAIN_EPS: t->eps = t->eps == 1e-6 ? 1e-5 : 1e-6; return true;
	case IR_TRAIN_WEIGHT_DECAY: t->weight_decay = t->weight_decay == 0 ? 0.1 : 0; return true;
	case IR_TRAIN_CLIP: t->clip = t->clip == 0 ? 1.0 : 0; return true;
	case IR_TRAIN_MOMENTUM:
		t->momentum = t->momentum == 0.5 ? 0.9 : 0.5;
		return true;
	case IR_TRAIN_NESTEROV:
		if (!(t->momentum > 0))
			return false;
		t->nesterov = !t->nesterov;
		return true;
	case IR_TRAIN_LR_SCHEDULE:
		t->lr_schedule = t->lr_schedule == IR_LR_COSINE ? IR_LR_CONSTANT : IR_LR_COSINE;
		return true;
	case IR_TRAIN_WARMUP: t->warmup += 5; return true;
	case IR_TRAIN_MIN_LR: t->min_lr = t->min_lr == 0 ? 1e-5 : 0; return true;
	case IR_TRAIN_ZERO: t->zero = (t->zero + 1) % 4; return true;
	case IR_TRAIN_ZERO_AXES:
		if (t->zero_axes == live_axes || !live_axes)
			return false;
		t->zero_axes = live_axes;
		return true;
	case IR_TRAIN_RESHARD_AFTER_FORWARD:
		t->reshard_after_forward = !t->reshard_after_forward;
		return true;
	case IR_TRAIN_MICROBATCHES: t->microbatches = t->microbatches == 1 ? 2 : 1; return true;
	case IR_TRAIN_SCHEDULE:
		/* among the schedules of one model chunk per rank */
		if (t->schedule == IR_PIPE_INTERLEAVED)
			return false;
		t->schedule = t->schedule == IR_PIPE_GPIPE ? IR_PIPE_ZB : IR_PIPE_GPIPE;
		return true;
	case IR_TRAIN_VIRTUAL_STAGES:
		/* under a schedule of one chunk per rank: the chunks stay 1 */
		if (t->schedule == IR_PIPE_INTERLEAVED)
			return false;
		t->virtual_stages = t->virtual_stages == 1 ? 2 : 1;
		return true;
	case IR_TRAIN_PRECISION:
		/* the policy's other dtypes stay valid: f32 */
		t->precision = t->precision == IR_F32 ? IR_BF16 : IR_F32;
		t->reduce_dtype = t->master_dtype = IR_F32;
		return true;
	/* f32 or the params' dtype: another value only under bf16 or f16 */
	case IR_TRAIN_REDUCE_DTYPE:
		if (t->precision == IR_F32)
			return false;
		t->reduce_dtype = t->reduce_dtype == IR_F32 ? t->precision : IR_F32;
		return true;
	case IR_TRAIN_MASTER_DTYPE:
		if (t->precision == IR_F32)
			return false;
		t->master_dtype = t->master_dtype == IR_F32 ? t->precision : IR_F32;
		return true;
	case IR_TRAIN_STEPS: t->steps += 7; return true;
	case IR_TRAIN_DATA: t->data = "data/x.bin"; return true;
	case IR_TRAIN_SEED: t->seed += 3; return true;
	case IR_TRAIN_SEQUENCE_PARALLEL: t->sequence_parallel = !t->sequence_parallel; return true;
	case IR_TRAIN_RECOMPUTE: t->recompute = !t->recompute; return true;
	case IR_TRAIN_UNEVEN_SHARDS: t->uneven_shards = !t->uneven_shards; return true;
	case IR_TRAIN_BUCKET_BYTES: t->bucket_bytes = t->bucket_bytes == 200 ? 4096 : 200; return true;
	case IR_TRAIN_PREFETCH: t->prefetch = t->prefetch == 0 ? 2 : 0; return true;
	case IR_TRAIN_CONTEXT_PARALLEL:
		t->context_parallel = t->context_parallel == IR_CP_ULYSSES ? IR_CP_NONE : IR_CP_ULYSSES;
		return true;
	case IR_TRAIN_RECOMPUTE_SCOPE:
		t->recompute_scope = t->recompute_scope == IR_RECOMPUTE_LAYER ? IR_RECOMPUTE_READ
		                                                              : IR_RECOMPUTE_LAYER;
		return true;
	default: return false;
	}
}

/* Pass i on a copy of x (its settings `train` when not NULL): the IR it
 * leaves with x's settings, and the analyses it kept, as text (malloc'd);
 * NULL when the pass failed. */
static char *run_pass(const IrModule *x, int i, const IrTrain *train)
{
	Arena a;
	arena_init(&a);
	Compiled c = {.arena = &a, .an = {.arena = &a}};
	c.m = ir_module_clone(&a, x);
	char *buf = NULL;
	size_t len = 0;
	FILE *sink = open_memstream(&buf, &len); /* warnings and errors */
	Diag d;
	diag_init(&d, sink);
	if (train)
		c.m->train = *train;
	DrvOptions o = {.stop_after = pass_list()[i].name, .no_verify = true};
	bool ok = c.m && drv_run(&c, &d, &o);
	fclose(sink);
	char *out = NULL;
	if (ok) {
		free(buf);
		c.m->train = x->train;
		FILE *f = open_memstream(&out, &len);
		ir_print(f, c.m);
		drv_print_analyses(f, &c, true, true);
		fclose(f);
	} else {
		fprintf(stderr, "pass '%s' failed: %s", pass_list()[i].name, buf ? buf : "");
		free(buf);
	}
	arena_free(&a);
	return out;
}

static uint32_t live_axes(const Mesh *mesh)
{
	uint32_t m = 0;
	for (int k = 0; k < mesh->naxes; k++)
		if (mesh->sizes[k] > 1)
			m |= 1u << k;
	return m;
}

static void test_layout(const Layout *l)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	d.no_warnings = true;
	DrvOptions o = {.lower = {.mesh = l->mesh}};
	for (int k = 0; l->defines[2 * k]; k++) {
		o.lower.define_names[o.lower.ndefines] = l->defines[2 * k];
		o.lower.define_values[o.lower.ndefines++] = l->defines[2 * k + 1];
	}
	for (int k = 0; l->train[k]; k++)
		o.lower.train[o.lower.ntrain++] = l->train[k];
	Compiled c;
	bool ok = drv_load(&c, &a, &d, l->file, &o);
	CHECK(ok);
	int varied = 0;
	for (int i = 0; ok && i < pass_count(); i++) {
		const Pass *p = &pass_list()[i];
		char *want = run_pass(c.m, i, NULL);
		CHECK(want != NULL);
		for (int f = 0; want && f < IR_TRAIN_COUNT; f++) {
			if (p->reads & PASS_READS(f))
				continue;
			IrTrain t = c.m->train;
			if (!perturb(&t, (IrTrainField)f, live_axes(&c.m->mesh)))
				continue;
			char *got = run_pass(c.m, i, &t);
			bool same = got && !strcmp(got, want);
			if (!same)
				fprintf(stderr, "%s --mesh %s: pass '%s' changes with %s, which it does "
				        "not declare\n", l->file, l->mesh, p->name,
				        ir_train_key((IrTrainField)f));
			CHECK(same);
			varied++;
			free(got);
		}
		/* the model chunks (interleaved(2)), for a pass reading none of
		 * the schedule, its virtual stages and the chunks */
		uint64_t sched = PASS_READS(IR_TRAIN_SCHEDULE) | PASS_READS(IR_TRAIN_VIRTUAL_STAGES) |
		                 PASS_READS_CHUNKS;
		if (want && !(p->reads & sched)) {
			IrTrain t = c.m->train;
			t.schedule = IR_PIPE_INTERLEAVED;
			t.virtual_stages = 2;
			char *got = run_pass(c.m, i, &t);
			bool same = got && !strcmp(got, want);
			if (!same)
				fprintf(stderr, "%s --mesh %s: pass '%s' changes with the model chunks, "
				        "which it does not declare\n", l->file, l->mesh, p->name);
			CHECK(same);
			free(got);
		}
		free(want);
		/* on to the next pass's input */
		DrvOptions step = {.stop_after = p->name};
		ok = drv_run(&c, &d, &step);
		CHECK(ok);
	}
	CHECK(varied > 100);
	arena_free(&a);
}

int main(void)
{
	for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++)
		test_layout(&layouts[k]);
	return check_report();
}
