/* test_lower.c - lowering: the example models, GPT-2 small's parameter
 * count, block instancing and stages, constants with -D and --mesh, train
 * settings with --train, and the exact diagnostics of each error class.  Runs from the repo root. */
#include "check.h"
#include "frontend/lower.h"

#include <stdlib.h>
#include <string.h>

/* Lowers `src` (or the file at `path` when src is NULL); returns the module
 * and the whole diagnostic output in *out (malloc'd). */
static IrModule *run(Arena *a, const char *path, const char *src, const LowerOptions *opt,
                     char **out, int *nerr)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, f);
	IrModule *m = NULL;
	if (!src) {
		m = lower_path(a, &d, path, opt);
	} else {
		SrcFile *sf = arena_alloc(a, sizeof *sf);
		sf->name = path;
		sf->text = src;
		sf->len = strlen(src);
		diag_add_file(&d, sf);
		AstFile af;
		if (ast_parse(a, &d, sf, &af))
			m = lower_file(a, &d, &af, opt);
	}
	fclose(f);
	if (nerr)
		*nerr = d.nerr;
	if (out)
		*out = buf;
	else
		free(buf);
	return m;
}

/* Checks that the diagnostics `got` of case `what` are `want`, printing
 * both when not; frees got. */
static void check_diags(const char *what, char *got, const char *want)
{
	if (strcmp(got, want) != 0) {
		check_failures++;
		fprintf(stderr, "%s: got\n%s---- want\n%s----\n", what, got, want);
	}
	check_count++;
	free(got);
}

static IrNode *find(IrModule *m, const char *name)
{
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->name && strcmp(m->nodes[i]->name, name) == 0)
			return m->nodes[i];
	return NULL;
}

static int64_t param_numel(IrModule *m)
{
	int64_t s = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_PARAM)
			s += ir_node_numel(m->nodes[i]);
	return s;
}

static void define(LowerOptions *o, const char *name, const char *val)
{
	o->define_names[o->ndefines] = name;
	o->define_values[o->ndefines++] = val;
}

static void test_gpt(void)
{
	Arena a;
	arena_init(&a);
	char *out;
	LowerOptions o = {0};
	o.mesh = "pp=2,dp=2,tp=2";
	IrModule *m = run(&a, "models/gpt.dtm", NULL, &o, &out, NULL);
	CHECK(m != NULL);
	if (!m) {
		fprintf(stderr, "%s", out);
		free(out);
		arena_free(&a);
		return;
	}
	free(out);
	CHECK_EQ_STR(m->name, "gpt");
	CHECK_EQ_INT(m->mesh.naxes, 3);
	CHECK_EQ_INT(m->mesh.sizes[0], 2);
	CHECK(m->loss >= 0 && m->nodes[m->loss]->role == IR_ROLE_LOSS);
	IrNode *wq0 = find(m, "layer.0.wq"), *wq1 = find(m, "layer.1.wq");
	IrNode *wp1 = find(m, "layer.1.wproj"), *wte = find(m, "wte");
	CHECK(wq0 && wq1 && wp1 && wte);
	if (wq0 && wq1 && wp1 && wte) {
		/* stage i * pp / layers with pp = 2, layers = 2 */
		CHECK_EQ_INT(ir_stage(m, wq0), 0);
		CHECK_EQ_INT(ir_stage(m, wq1), 1);
		CHECK_EQ_INT(ir_stage(m, wte), -1);
		CHECK_EQ_INT(wp1->shape[0], 256); /* ffn = 4 * d */
		CHECK_EQ_INT(wp1->shape[1], 64);
		CHECK(ir_place(m, wq0)->known && ir_place(m, wq0)->naxes[1] == 1 && ir_place(m, wq0)->axes[1][0] == 2);
		CHECK_EQ_INT(ir_attr_init(wq0)->kind, IR_INIT_NORMAL);
		CHECK_NEAR(ir_attr_init(find(m, "layer.0.wo"))->std, 0.02 / 2, 1e-12);
		CHECK_EQ_INT(ir_attr_init(find(m, "layer.0.ln1"))->kind, IR_INIT_ONES);
	}
	/* every node made inside the loop carries its iteration's stage */
	int staged[2] = {0, 0};
	for (int i = 0; i < m->nnodes; i++)
		if (ir_stage(m, m->nodes[i]) >= 0 && ir_stage(m, m->nodes[i]) < 2)
			staged[ir_stage(m, m->nodes[i])]++;
	CHECK(staged[0] > 20 && staged[0] == staged[1]);
	CHECK_EQ_INT(m->train.optimizer, IR_OPTIMIZER_ADAMW);
	CHECK_NEAR(m->train.beta2, 0.95, 1e-12);
	CHECK_EQ_INT(m->train.schedule, IR_PIPE_1F1B);
	CHECK_EQ_INT(m->train.steps, 300);
	CHECK_EQ_INT(m->train.warmup, 20);
	CHECK_EQ_INT(m->train.zero_axes, 1u << 1);
	CHECK_EQ_INT(m->pp_axis, mesh_axis_index(&m->mesh, "pp")); /* gpt's mesh has pp */
	CHECK(m->pp_axis >= 0);
	arena_free(&a);
}

static void test_gpt2_small(void)
{
	Arena a;
	arena_init(&a);
	LowerOptions o = {0};
	define(&o, "vocab", "50257");
	define(&o, "ctx", "1024");
	define(&o, "d", "768");
	define(&o, "heads", "12");
	define(&o, "layers", "12");
	/* 50257 rows do not divide over tp = 2: gpt.dtm asks for uneven
	 * (torch.chunk) shards in its train section, so wte splits 25129 +
	 * 25128 rows */
	char *out;
	IrModule *m = run(&a, "models/gpt.dtm", NULL, &o, &out, NULL);
	CHECK(m != NULL && m->train.uneven_shards);
	if (m) {
		IrNode *wte = find(m, "wte");
		int64_t local[IR_MAX_RANK];
		CHECK(wte != NULL);
		placement_shard_shape(ir_place(m, wte), &m->mesh, 0, wte->rank, wte->shape, local);
		CHECK_EQ_INT(local[0], 25129);
		placement_shard_shape(ir_place(m, wte), &m->mesh, 1, wte->rank, wte->shape, local);
		CHECK_EQ_INT(local[0], 25128);
	}
	free(out);
	o.mesh = "dp=2";
	m = run(&a, "models/gpt.dtm", NULL, &o, &out, NULL);
	CHECK(m != NULL);
	if (m) {
		CHECK_EQ_INT(param_numel(m), 124439808);
		CHECK(find(m, "layer.11.bproj") != NULL);
		CHECK(find(m, "layer.12.bproj") == NULL);
	} else {
		fprintf(stderr, "%s", out);
	}
	free(out);
	arena_free(&a);
}

static void test_mlp(void)
{
	Arena a;
	arena_init(&a);
	char *out;
	IrModule *m = run(&a, "models/mlp.dtm", NULL, NULL, &out, NULL);
	CHECK(m != NULL);
	if (!m)
		fprintf(stderr, "%s", out);
	free(out);
	if (m) {
		CHECK_EQ_INT(m->train.optimizer, IR_OPTIMIZER_SGD);
		CHECK_NEAR(m->train.momentum, 0.9, 1e-12);
		CHECK(find(m, "h") && find(m, "h")->place);
		CHECK_EQ_INT(param_numel(m), 32 * 64 + 64 + 64 * 8 + 8);
	}
	arena_free(&a);
}

#define HEAD "model t\n"
#define TAIL "forward {\n  loss = mse(x, x)\n}\n"
#define X "input x : f32[4, 8]\n"

/* Lowers src and returns its first param/input node of that name. */
static IrNode *lower_ok(Arena *a, const char *src, const LowerOptions *o, const char *name)
{
	char *out;
	IrModule *m = run(a, "t.dtm", src, o, &out, NULL);
	if (!m)
		fprintf(stderr, "unexpected errors:\n%s", out);
	free(out);
	return m ? find(m, name) : NULL;
}

static void test_constants(void)
{
	Arena a;
	arena_init(&a);
	const char *src = HEAD
	        "let d = 12, ffn = 4 * d, h = -7 / 2, r = 7 % 3, c = ceil(d / 5.0) + max(1, 2)\n"
	        "input x : f32[2, d]\n"
	        "param w : f32[ffn, h * -1, r, c] init uniform(-1, 1)\n"
	        "param v : f32[ffn]\n" TAIL;
	IrNode *w = lower_ok(&a, src, NULL, "w");
	CHECK(w != NULL);
	if (w) {
		CHECK_EQ_INT(w->shape[0], 48);
		CHECK_EQ_INT(w->shape[1], 3); /* C truncation: -7 / 2 == -3 */
		CHECK_EQ_INT(w->shape[2], 1);
		CHECK_EQ_INT(w->shape[3], 5);
		CHECK_EQ_INT(ir_attr_init(w)->kind, IR_INIT_UNIFORM);
		CHECK_NEAR(ir_attr_init(w)->lo, -1, 0);
	}
	IrNode *v = lower_ok(&a, src, NULL, "v");
	CHECK(v && ir_attr_init(v)->kind == IR_INIT_ZEROS); /* default for rank 1 */
	LowerOptions o = {0};
	define(&o, "d", "768");
	w = lower_ok(&a, src, &o, "w");
	CHECK(w && w->shape[0] == 4 * 768);
	arena_free(&a);
}

/* Most builtins, tuples, block returns, choose, collectives. */
static void test_features(void)
{
	Arena a;
	arena_init(&a);
	const char *src =
	        HEAD "let b = 2, t = 4, d = 8\n"
	             "mesh (pp = 2, dp = 2, tp = 2)\n"
	             "input x : f32[b, t, d] @ [dp, _, _]\n"
	             "input ids : i32[b, t]\n"
	             "param emb : f32[16, d] init normal(mean = 0, std = 0.1)\n"
	             "param wqkv : f32[d, 3 * d] @ choose([_, tp], [tp, _])\n"
	             "param g : f32[d] init ones\n"
	             "block two(h) {\n"
	             "  param w : f32[d, d]\n"
	             "  return h @ w, h\n"
	             "}\n"
	             "forward {\n"
	             "  e = embed(emb, ids) + x / 2 - 1\n"
	             "  a = attention(split(e @ wqkv, 3), heads = 2, causal = true) @ [dp, _, tp]\n"
	             "  p, q = two(rmsnorm(a, g))\n"
	             "  r = concat(p, q, axis = -1)\n"
	             "  r = reshape(r, (b * t, -1))\n"
	             "  s = slice(transpose(r), 0, 0, d)\n"
	             "  u = permute(reshape(s, (d, b, t)), (1, 2, 0))\n"
	             "  v = dropout(gelu(u), rate = 0.1) * 0.5 + dropout(u, rate = 0.2)\n"
	             "  w = v\n"
	             "  for i in 0 .. 2 stage i {\n"
	             "    w = tanh(w)\n"
	             "  }\n"
	             "  m = mean(softmax(w), axes = (0, -1), keepdims = true)\n"
	             "  loss = sum(m) + mse(v, v)\n"
	             "}\n";
	char *out;
	IrModule *m = run(&a, "t.dtm", src, NULL, &out, NULL);
	CHECK(m != NULL);
	if (!m)
		fprintf(stderr, "%s", out);
	free(out);
	if (m) {
		CHECK_EQ_INT(m->nchooses, 1);
		IrNode *wq = find(m, "wqkv");
		CHECK(wq && ir_choose(m, wq) == 0 && ir_place(m, wq)->known && ir_place(m, wq)->naxes[1] == 1);
		IrNode *an = find(m, "a");
		CHECK(an && an->op == IR_OP_ATTENTION && ir_place(m, an)->known);
		CHECK(find(m, "two.0.w") != NULL);
		IrNode *u = find(m, "u");
		CHECK(u && u->rank == 3 && u->shape[0] == 2 && u->shape[1] == 4 &&
		      u->shape[2] == 8);
		int drop = 0, staged = 0, salts = 0;
		for (int i = 0; i < m->nnodes; i++) {
			IrNode *n = m->nodes[i];
			if (n->op == IR_OP_DROPOUT)
				salts += (int)ir_attr_dropout(n)->salt, drop++;
			if (n->op == IR_OP_TANH)
				CHECK_EQ_INT(ir_stage(m, n), staged++);
			if (n->op == IR_OP_SCALE)
				CHECK(ir_attr_scalar(n)->value == 0.5);
		}
		CHECK_EQ_INT(drop, 2);
		CHECK_EQ_INT(salts, 1); /* 0 and 1 */
		CHECK_EQ_INT(staged, 2);
		IrNode *mn = find(m, "m");
		CHECK(mn && ir_attr_axes(mn)->n == 2 && ir_attr_axes(mn)->axes[1] == 2 &&
		      ir_attr_axes(mn)->keepdims);
	}
	/* --mesh: unlisted axes get size 1; no mesh at all is one device */
	LowerOptions o = {0};
	o.mesh = "tp=2";
	m = run(&a, "t.dtm", src, &o, NULL, NULL);
	CHECK(m && m->mesh.sizes[0] == 1 && m->mesh.sizes[1] == 1 && m->mesh.sizes[2] == 2);
	m = run(&a, "t.dtm", HEAD X TAIL, NULL, NULL, NULL);
	CHECK(m && m->mesh.naxes == 0 && m->train.zero_axes == 0);
	/* ZeRO without dp shards over the first axis that is not pp (over
	 * pp, the pipeline's axis, the stage programs deadlocked); over
	 * nothing where pp is the only one */
	m = run(&a, "t.dtm", HEAD "mesh (pp = 2, tp = 2)\n" X TAIL, NULL, NULL, NULL);
	CHECK(m && m->pp_axis == 0 && m->train.zero_axes == 1u << 1);
	m = run(&a, "t.dtm", HEAD "mesh (tp = 2, pp = 2)\n" X TAIL, NULL, NULL, NULL);
	CHECK(m && m->train.zero_axes == 1u << 0);
	m = run(&a, "t.dtm", HEAD "mesh (pp = 2)\n" X TAIL, NULL, NULL, NULL);
	CHECK(m && m->train.zero_axes == 0);
	m = run(&a, "t.dtm",
	        HEAD "mesh (tp = 4)\n" X "param w : f32[6, 4] @ [tp, _]\n" TAIL
	             "train {\n  uneven_shards true\n}\n",
	        NULL, NULL, NULL);
	CHECK(m && m->train.uneven_shards);
	arena_free(&a);
}

/* cast(x, dtype): a cast node of x's shape in that dtype, even to x's own
 * dtype (precision bf16 runs after lowering); + - * /, mse and concat of
 * different float dtypes promote to f32 (torch's rule) with casts; a
 * number takes its tensor's dtype; matmul does not promote. */
static void test_cast(void)
{
	Arena a;
	arena_init(&a);
	const char *src = HEAD "input x : f32[4, 8]\ninput ids : i32[4]\n"
	                       "forward {\n"
	                       "  b = cast(x, bf16)\n"
	                       "  f = cast(x, f32)\n"
	                       "  h = cast(b, f16) * 2\n"
	                       "  i = cast(ids, bf16)\n"
	                       "  s = b + x\n"
	                       "  t = b - 1\n"
	                       "  u = concat(b, h, axis = 0)\n"
	                       "  loss = mse(s, f) + mse(b, h) + mean(u) + mean(t) + mean(i)\n"
	                       "}\n";
	char *out;
	IrModule *m = run(&a, "t.dtm", src, NULL, &out, NULL);
	CHECK(m != NULL);
	if (!m)
		fprintf(stderr, "%s", out);
	free(out);
	if (m) {
		IrNode *x = find(m, "x"), *b = find(m, "b"), *f = find(m, "f"), *h = find(m, "h");
		IrNode *i = find(m, "i"), *s = find(m, "s"), *t = find(m, "t"), *u = find(m, "u");
		CHECK(x && b && f && h && i && s && t && u);
		if (x && b && f && h && i && s && t && u) {
			CHECK(b->op == IR_OP_CAST && b->dtype == IR_BF16 && b->ops[0] == x->id);
			CHECK(b->rank == 2 && b->shape[0] == 4 && b->shape[1] == 8);
			CHECK(f->op == IR_OP_CAST && f->dtype == IR_F32 && f->ops[0] == x->id);
			CHECK(h->op == IR_OP_SCALE && h->dtype == IR_F16);
			CHECK(i->op == IR_OP_CAST && i->dtype == IR_BF16 && i->rank == 1);
			/* b + x: b cast up to f32 */
			CHECK(s->op == IR_OP_ADD && s->dtype == IR_F32 && s->ops[1] == x->id);
			IrNode *s0 = m->nodes[s->ops[0]];
			CHECK(s0->op == IR_OP_CAST && s0->dtype == IR_F32 && s0->ops[0] == b->id);
			/* b - 1: the 1 is bf16 */
			CHECK(t->op == IR_OP_SUB && t->dtype == IR_BF16 &&
			      m->nodes[t->ops[1]]->op == IR_OP_CONST &&
			      m->nodes[t->ops[1]]->dtype == IR_BF16);
			/* bf16 with f16: f32, both cast */
			CHECK(u->op == IR_OP_CONCAT && u->dtype == IR_F32 && u->shape[0] == 8);
			for (int k = 0; k < 2; k++)
				CHECK(m->nodes[u->ops[k]]->op == IR_OP_CAST &&
				      m->nodes[u->ops[k]]->dtype == IR_F32);
			IrNode *l = m->nodes[m->loss];
			CHECK(l->dtype == IR_F32);
		}
	}
	/* matmul does not promote (torch neither): cast the operand */
	m = run(&a, "t.dtm",
	        HEAD X "param w : f32[8, 2]\nforward {\n  loss = mean(cast(x, bf16) @ w)\n}\n",
	        NULL, &out, NULL);
	CHECK(m == NULL && strstr(out, "matmul: operand dtypes differ: bf16[4, 8]"));
	free(out);
	arena_free(&a);
}

/* The mixed-precision policy (issue 16.3): param_dtype is precision's
 * other name, reduce_dtype and master_dtype default to f32 and are each f32
 * or param_dtype, checked once the section and --train are read, at the
 * setting's location (the param dtype's when the other is a default). */
static void test_precision_policy(void)
{
	Arena a;
	arena_init(&a);
	char *out;
	IrModule *m =
	        run(&a, "t.dtm", HEAD X TAIL "train {\n  param_dtype bf16\n}\n", NULL, &out, NULL);
	CHECK(m && m->train.precision == IR_BF16 && m->train.reduce_dtype == IR_F32 &&
	      m->train.master_dtype == IR_F32);
	free(out);
	LowerOptions o = {0};
	o.train[o.ntrain++] = "reduce_dtype=bf16";
	o.train[o.ntrain++] = "master_dtype = bf16";
	m = run(&a, "t.dtm", HEAD X TAIL "train {\n  precision bf16\n}\n", &o, &out, NULL);
	CHECK(m && m->train.precision == IR_BF16 && m->train.reduce_dtype == IR_BF16 &&
	      m->train.master_dtype == IR_BF16);
	free(out);
	/* f16 params with f32 gradients and master: fine */
	m = run(&a, "t.dtm", HEAD X TAIL "train {\n  precision f16\n  reduce_dtype f32\n}\n", NULL,
	        &out, NULL);
	CHECK(m && m->train.precision == IR_F16 && m->train.reduce_dtype == IR_F32);
	free(out);
	arena_free(&a);

	static const struct {
		const char *train, *arg, *want;
	} bad[] = {
	        {"  reduce_dtype bf16\n", NULL,
	         "t.dtm:7:16: error: reduce_dtype bf16 with param_dtype f32: gradients would be "
	         "rounded below the params' precision (use f32)\n"
	         "    reduce_dtype bf16\n"
	         "                 ^~~~\n"},
	        {"  param_dtype bf16\n  master_dtype f16\n", NULL,
	         "t.dtm:8:16: error: master_dtype f16 with param_dtype bf16: the update would run "
	         "on weights rounded below the params' (use f32 or bf16)\n"
	         "    master_dtype f16\n"
	         "                 ^~~\n"},
	        /* the override makes the file's reduce_dtype narrower */
	        {"  precision bf16\n  reduce_dtype bf16\n", "precision=f32",
	         "t.dtm:8:16: error: reduce_dtype bf16 with param_dtype f32: gradients would be "
	         "rounded below the params' precision (use f32)\n"
	         "    reduce_dtype bf16\n"
	         "                 ^~~~\n"},
	        {"  precision bf16\n  param_dtype bf16\n", NULL,
	         "t.dtm:8:3: error: duplicate train setting 'param_dtype'\n"
	         "    param_dtype bf16\n"
	         "    ^~~~~~~~~~~~~~~~\n"
	         "t.dtm:7:3: note: first set here\n"
	         "    precision bf16\n"
	         "    ^~~~~~~~~~~~~~\n"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		arena_init(&a);
		char src[256];
		snprintf(src, sizeof src, HEAD X TAIL "train {\n%s}\n", bad[i].train);
		LowerOptions ob = {0};
		if (bad[i].arg)
			ob.train[ob.ntrain++] = bad[i].arg;
		int nerr = 0;
		m = run(&a, "t.dtm", src, &ob, &out, &nerr);
		CHECK(m == NULL);
		CHECK_EQ_INT(nerr, 1);
		char what[64];
		snprintf(what, sizeof what, "policy case %zu", i);
		check_diags(what, out, bad[i].want);
		arena_free(&a);
	}
}

/* --train KEY=VALUE: applied after the file's train section with the same
 * checks; each replaces the file's setting, the last for a key wins. */
static void test_train_override(void)
{
	static const char src[] =
	        HEAD "mesh (rep = 2, dp = 2)\n" X TAIL "train {\n  zero 1 over dp\n  steps 7\n}\n";
	Arena a;
	arena_init(&a);
	LowerOptions o = {0};
	o.train[o.ntrain++] = "zero=3 over rep";
	o.train[o.ntrain++] = "reshard_after_forward=false";
	o.train[o.ntrain++] = "steps = 2 * 5";
	o.train[o.ntrain++] = "optimizer=adamw(lr = 3e-4, betas = (0.9, 0.95))";
	o.train[o.ntrain++] = "steps=12";
	char *out;
	IrModule *m = run(&a, "t.dtm", src, &o, &out, NULL);
	CHECK(m != NULL);
	CHECK_EQ_STR(out ? out : "(null)", "");
	free(out);
	if (m) {
		CHECK_EQ_INT(m->train.zero, 3);
		CHECK_EQ_INT(m->train.zero_axes, 1u << 0); /* rep */
		CHECK(!m->train.reshard_after_forward);
		CHECK_EQ_INT(m->train.steps, 12);
		CHECK_EQ_INT(m->train.optimizer, IR_OPTIMIZER_ADAMW);
		CHECK(fabs(m->train.lr - 3e-4) < 1e-12);
		CHECK(fabs(m->train.beta2 - 0.95) < 1e-12);
	}
	/* zero=N without `over` keeps the file's axes */
	LowerOptions o2 = {0};
	o2.train[o2.ntrain++] = "zero=2";
	m = run(&a, "t.dtm", src, &o2, NULL, NULL);
	CHECK(m && m->train.zero == 2 && m->train.zero_axes == 1u << 1 && m->train.steps == 7);
	arena_free(&a);

	static const struct {
		const char *arg, *want;
	} bad[] = {
	        {"zero=5", "<command line>: error: --train zero=5: zero must be between 0 and 3, "
	                   "got 5\n"},
	        {"zreo=3",
	         "<command line>: error: --train zreo=3: unknown train setting 'zreo' (known: "
	         "optimizer, lr_schedule, zero, reshard_after_forward, microbatches, schedule, "
	         "precision, steps, data, sequence_parallel, recompute, uneven_shards, "
	         "bucket_mb, prefetch, seed, param_dtype, reduce_dtype, master_dtype, loss_scale, "
	         "init_scale, growth_factor, backoff_factor, growth_interval, context_parallel)\n"
	         "<command line>: note: did you mean 'zero'?\n"},
	        {"zero 3", "<command line>: error: --train zero 3: expected KEY=VALUE, VALUE as "
	                   "in the train section (--train zero=3, --train \"zero=3 over dp\")\n"},
	        {"steps=", "<command line>: error: --train steps=: train setting 'steps' needs "
	                   "a value\n"},
	        {"zero=3 over xx", "<command line>: error: --train zero=3 over xx: unknown mesh "
	                           "axis 'xx'\n"},
	        {"steps=4 over dp", "<command line>: error: --train steps=4 over dp: 'over' is "
	                            "only allowed after 'zero'\n"},
	        {"reshard_after_forward=1",
	         "<command line>: error: --train reshard_after_forward=1: reshard_after_forward "
	         "must be true or false, got 1\n"},
	        {"precision=f8", "<command line>: error: --train precision=f8: unknown precision "
	                         "'f8' (expected f32, bf16 or f16)\n"},
	        {"param_dtype=f8", "<command line>: error: --train param_dtype=f8: unknown "
	                           "param_dtype 'f8' (expected f32, bf16 or f16)\n"},
	        {"reduce_dtype=i32", "<command line>: error: --train reduce_dtype=i32: unknown "
	                             "reduce_dtype 'i32' (expected f32, bf16 or f16)\n"},
	        {"master_dtype=fp32", "<command line>: error: --train master_dtype=fp32: unknown "
	                              "master_dtype 'fp32' (expected f32, bf16 or f16)\n"},
	        {"steps=3; zero 2", "<command line>: error: --train steps=3; zero 2: expected "
	                            "one setting\n"},
	        {"steps=nope",
	         "<command line>: error: --train steps=nope: undefined name 'nope'\n"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		arena_init(&a);
		LowerOptions ob = {0};
		ob.train[ob.ntrain++] = bad[i].arg;
		int nerr = 0;
		m = run(&a, "t.dtm", src, &ob, &out, &nerr);
		CHECK(m == NULL);
		CHECK_EQ_INT(nerr, 1);
		char what[256];
		snprintf(what, sizeof what, "--train %s", bad[i].arg);
		check_diags(what, out, bad[i].want);
		arena_free(&a);
	}
}

/* Each error class: the source, the options, the whole expected output. */
typedef struct Case {
	const char *src;
	const char *mesh, *dname, *dval;
	const char *want;
} Case;

static const Case cases[] = {
        /* 0 */ {"let a = 1\n" X TAIL, NULL, NULL, NULL,
                 "t.dtm:1:1: error: missing 'model NAME' declaration\n"
                 "  let a = 1\n"
                 "  ^\n"},
        /* 1 */
        {HEAD "let d = 4\n" X TAIL, NULL, "foo", "3",
         "<command line>: error: -D foo=3: the model has no constant 'foo'\n"},
        /* 2 */
        {HEAD "let d = 4\n" X TAIL, NULL, "d", "4x",
         "<command line>: error: -D d=4x: bad value (expected a number)\n"},
        /* 3 */
        {HEAD "mesh (dp = 2, tp = 2)\n" X TAIL, "dp=4,xx=2", NULL, NULL,
         "<command line>: error: --mesh: the model declares no mesh axis 'xx' (axes: dp, tp)\n"},
        /* 4 */
        {HEAD "mesh (dp = 2, tp = 2)\n" X TAIL, "dp=4;tp", NULL, NULL,
         "<command line>: error: --mesh 'dp=4;tp': expected NAME=SIZE[,NAME=SIZE...]\n"},
        /* 5 */
        {HEAD "mesh (dp = 2, dp = 2)\n" X TAIL, NULL, NULL, NULL,
         "t.dtm:2:15: error: mesh axis 'dp' is declared twice\n"
         "  mesh (dp = 2, dp = 2)\n"
         "                ^~\n"
         "t.dtm:2:7: note: first declared here\n"
         "  mesh (dp = 2, dp = 2)\n"
         "        ^~\n"},
        /* 6 */
        {HEAD "let a = 3 / (2 - 2)\n" X TAIL, NULL, NULL, NULL,
         "t.dtm:2:9: error: division by zero\n"
         "  let a = 3 / (2 - 2)\n"
         "          ^~~~~~~~~~~\n"},
        /* 7 */
        {HEAD "mesh (tp = 4)\n" X "param w : f33[6, 4] @ [xp, _]\n" TAIL, NULL, NULL, NULL,
         "t.dtm:4:11: error: unknown dtype 'f33' (expected f32, bf16, f16 or i32)\n"
         "  param w : f33[6, 4] @ [xp, _]\n"
         "            ^~~\n"
         "t.dtm:4:24: error: unknown mesh axis 'xp'\n"
         "  param w : f33[6, 4] @ [xp, _]\n"
         "                         ^~\n"
         "t.dtm:4:24: note: did you mean 'tp'?\n"
         "  param w : f33[6, 4] @ [xp, _]\n"
         "                         ^~\n"},
        /* 8 */
        {HEAD "mesh (tp = 4)\n" X "param w : f32[6, 4] @ [tp, _, _]\n" TAIL, NULL, NULL, NULL,
         "t.dtm:4:23: error: placement has 3 dims but 'w' has rank 2\n"
         "  param w : f32[6, 4] @ [tp, _, _]\n"
         "                        ^~~~~~~~~~\n"},
        /* 9 */
        {HEAD "mesh (tp = 4)\n" X "param w : f32[6, 4] @ [tp, _]\n" TAIL
              "train {\n  uneven_shards false\n}\n",
         NULL, NULL, NULL,
         "t.dtm:4:24: error: dim 0 of 'w' (size 6) is not divisible by mesh axis 'tp' (size 4)\n"
         "  param w : f32[6, 4] @ [tp, _]\n"
         "                         ^~\n"
         "t.dtm:9:3: note: uneven shards are refused here\n"
         "    uneven_shards false\n"
         "    ^~~~~~~~~~~~~~~~~~~\n"},
        /* 10 */
        {HEAD X "block layer(h) {\n  y = mlp(h)\n  return y\n}\n"
                "block mlp(h) {\n  return layer(h)\n}\n"
                "forward {\n  z = layer(x)\n  loss = mse(z, x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:8:10: error: recursive block call: layer -> mlp -> layer\n"
         "    return layer(h)\n"
         "           ^~~~~~~~\n"},
        /* 11 */
        {HEAD X "forward {\n  h = gelo(x)\n  loss = mse(h, y)\n}\n", NULL, NULL, NULL,
         "t.dtm:4:7: error: undefined function 'gelo'\n"
         "    h = gelo(x)\n"
         "        ^~~~~~~\n"
         "t.dtm:4:7: note: did you mean 'gelu'?\n"
         "    h = gelo(x)\n"
         "        ^~~~~~~\n"
         "t.dtm:5:17: error: undefined name 'y'\n"
         "    loss = mse(h, y)\n"
         "                  ^\n"},
        /* 12 */
        {HEAD X "forward {\n  loss = x * 2\n}\n", NULL, NULL, NULL,
         "t.dtm:4:3: error: 'loss' must be a scalar, got f32[4, 8]\n"
         "    loss = x * 2\n"
         "    ^~~~\n"},
        /* 13 */
        {HEAD X TAIL "train {\n  steps 10\n  stepz 3\n  steps 20\n}\n", NULL, NULL, NULL,
         "t.dtm:8:3: error: unknown train setting 'stepz' (known: optimizer, lr_schedule, zero, "
         "reshard_after_forward, microbatches, schedule, precision, steps, data, "
         "sequence_parallel, recompute, uneven_shards, bucket_mb, prefetch, seed, param_dtype, "
         "reduce_dtype, master_dtype, loss_scale, init_scale, growth_factor, backoff_factor, "
         "growth_interval, context_parallel)\n"
         "    stepz 3\n"
         "    ^~~~~~~\n"
         "t.dtm:8:3: note: did you mean 'steps'?\n"
         "    stepz 3\n"
         "    ^~~~~~~\n"
         "t.dtm:9:3: error: duplicate train setting 'steps'\n"
         "    steps 20\n"
         "    ^~~~~~~~\n"
         "t.dtm:7:3: note: first set here\n"
         "    steps 10\n"
         "    ^~~~~~~~\n"},
        /* 14 */
        {HEAD X "block b(h) {\n  y = h\n}\n"
                "forward {\n  loss = mse(b(x, x), x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:3:1: error: block 'b' has no return statement\n"
         "  block b(h) {\n"
         "  ^~~~~~~~~~\n"
         "t.dtm:7:14: error: block 'b' takes 1 argument, got 2\n"
         "    loss = mse(b(x, x), x)\n"
         "               ^~~~~~~\n"},
        /* 15 */
        {HEAD X "forward {\n  a, b = split(x, 3, axis = 0)\n  c, d, e = split(x, 2)\n  loss = "
                "mse(a, x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:4:19: error: cannot split dim 0 (size 4) of f32[4, 8] into 3 equal parts\n"
         "    a, b = split(x, 3, axis = 0)\n"
         "                    ^\n"
         "t.dtm:5:3: error: cannot unpack a tuple of 2 values into 3 names\n"
         "    c, d, e = split(x, 2)\n"
         "    ^~~~~~~~~~~~~~~~~~~~~\n"},
        /* 16 */
        {HEAD X "forward {\n  for i in 0 .. 1000 {\n    for j in 0 .. 1001 {\n      x = x + 1\n    "
                "}\n  }\n  loss = mse(x, x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:5:5: error: program too large after unrolling (more than 1000000 loop iterations "
         "and block calls)\n"
         "      for j in 0 .. 1001 {\n"
         "      ^~~~~~~~~~~~~~~~~~\n"},
        /* 17 */
        {HEAD X "forward {\n  h = sum(x, axs = 1)\n  g = layernorm(x, x)\n  loss = mse(h, x @ [dp, "
                "_])\n}\n",
         NULL, NULL, NULL,
         "t.dtm:4:14: error: unknown keyword argument 'axs' for sum (expected axis, axes or "
         "keepdims)\n"
         "    h = sum(x, axs = 1)\n"
         "               ^~~~~~~\n"
         "t.dtm:5:7: error: layernorm takes 3 arguments, got 2\n"
         "    g = layernorm(x, x)\n"
         "        ^~~~~~~~~~~~~~~\n"
         "t.dtm:6:22: error: unknown mesh axis 'dp'\n"
         "    loss = mse(h, x @ [dp, _])\n"
         "                       ^~\n"},
        /* 18 */
        {HEAD X "param k : i32[4]\nforward {\n  h = recv(x)\n  loss = mean(x, axis = 2)\n}\n", NULL,
         NULL, NULL,
         "t.dtm:3:11: error: param 'k' cannot be i32 (params are trained; use f32, bf16 or f16)\n"
         "  param k : i32[4]\n"
         "            ^~~\n"
         "t.dtm:5:7: error: recv cannot be called; the compiler pairs each send with its recv\n"
         "    h = recv(x)\n"
         "        ^~~~~~~\n"
         "t.dtm:6:18: error: axis 2 is out of range for a tensor of rank 2\n"
         "    loss = mean(x, axis = 2)\n"
         "                   ^~~~~~~~\n"},
        /* 19 */
        {HEAD X "block b(h) {\n  y = h @ h\n  return y\n}\n"
                "forward {\n  for i in 0 .. 12 {\n    y = b(x)\n  }\n  z = b(x, x)\n  loss = "
                "mse(x, x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:4:7: error: matmul: inner dimensions differ: [4, 8] @ [4, 8] (8 vs 4)\n"
         "    y = h @ h\n"
         "        ^~~~~\n"
         "t.dtm:9:9: note: in the instance of block 'b' called here\n"
         "      y = b(x)\n"
         "          ^~~~\n"
         "t.dtm:11:7: error: block 'b' takes 1 argument, got 2\n"
         "    z = b(x, x)\n"
         "        ^~~~~~~\n"},
        /* 20 */
        {HEAD "mesh (dp = 2, tp = 2)\n" X TAIL, "dp=2048,tp=1024", NULL, NULL,
         "<command line>: error: the mesh has more than 1048576 ranks\n"},
        /* 21 */
        {HEAD "mesh (dp = 2, tp = 2)\n" X "param w : f32[4, 4] @ [(dp, tp), tp] init normal(0)\n"
              "param w : f32[4] init xavier\n" TAIL,
         NULL, NULL, NULL,
         "t.dtm:4:43: error: normal takes 2 arguments (mean, std)\n"
         "  param w : f32[4, 4] @ [(dp, tp), tp] init normal(0)\n"
         "                                            ^~~~~~~~~\n"
         "t.dtm:4:34: error: mesh axis 'tp' appears more than once in the placement\n"
         "  param w : f32[4, 4] @ [(dp, tp), tp] init normal(0)\n"
         "                                   ^~\n"
         "t.dtm:5:7: error: duplicate name 'w'\n"
         "  param w : f32[4] init xavier\n"
         "        ^\n"
         "t.dtm:4:7: note: 'w' was first defined here\n"
         "  param w : f32[4, 4] @ [(dp, tp), tp] init normal(0)\n"
         "        ^\n"},
        /* 22 */
        {HEAD "mesh (dp = 2)\n" X
              "forward {\n  a = all_gather(x, 0)\n"
              "  for i in 3 .. 1 {\n    x = x\n  }\n}\n",
         NULL, NULL, NULL,
         "t.dtm:5:7: error: all_gather cannot be called in a model: a model is the global "
         "program, whose collectives come from placements (`@ [...]`); explicit collectives "
         "exist only in the per-rank IR after partition\n"
         "    a = all_gather(x, 0)\n"
         "        ^~~~~~~~~~~~~~~~\n"
         "t.dtm:5:7: note: to gather a dim that is split over a mesh axis, place the value "
         "with `_` in that dim, e.g. `y = x @ [_, _]`: partition inserts the all_gather\n"
         "    a = all_gather(x, 0)\n"
         "        ^~~~~~~~~~~~~~~~\n"
         "t.dtm:6:17: error: the loop end (1) is before its start (3)\n"
         "    for i in 3 .. 1 {\n"
         "                  ^\n"
         "t.dtm:4:1: error: the forward section must assign 'loss'\n"
         "  forward {\n"
         "  ^~~~~~~\n"},
        /* 23 */
        {HEAD X TAIL "train {\n  optimizer adamw(lr = 0, betas = (0.9, 1.5), beta = 2)\n"
                     "  schedule interleaved\n  zero 4 over xp\n  precision f8\n}\n",
         NULL, NULL, NULL,
         "t.dtm:7:47: error: unknown keyword argument 'beta' for adamw (expected lr, betas, eps, "
         "weight_decay or clip)\n"
         "    optimizer adamw(lr = 0, betas = (0.9, 1.5), beta = 2)\n"
         "                                                ^~~~~~~~\n"
         "t.dtm:7:19: error: lr must be > 0, got 0\n"
         "    optimizer adamw(lr = 0, betas = (0.9, 1.5), beta = 2)\n"
         "                    ^~~~~~\n"
         "t.dtm:7:27: error: betas must be in [0, 1), got 1.5\n"
         "    optimizer adamw(lr = 0, betas = (0.9, 1.5), beta = 2)\n"
         "                            ^~~~~~~~~~~~~~~~~~\n"
         "t.dtm:8:12: error: interleaved needs the number of virtual stages per rank: "
         "interleaved(2)\n"
         "    schedule interleaved\n"
         "             ^~~~~~~~~~~\n"
         "t.dtm:9:8: error: zero must be between 0 and 3, got 4\n"
         "    zero 4 over xp\n"
         "         ^\n"
         "t.dtm:9:15: error: unknown mesh axis 'xp'\n"
         "    zero 4 over xp\n"
         "                ^~\n"
         "t.dtm:10:13: error: unknown precision 'f8' (expected f32, bf16 or f16)\n"
         "    precision f8\n"
         "              ^~\n"},
        /* 24 */
        {HEAD X "param x : f32[2]\nlet d = 3\nlet d = 4\n" TAIL, NULL, NULL, NULL,
         "t.dtm:5:5: error: duplicate name 'd'\n"
         "  let d = 4\n"
         "      ^~~~~\n"
         "t.dtm:4:5: note: 'd' was first defined here\n"
         "  let d = 3\n"
         "      ^~~~~\n"
         "t.dtm:3:7: error: duplicate name 'x'\n"
         "  param x : f32[2]\n"
         "        ^\n"
         "t.dtm:2:7: note: 'x' was first defined here\n"
         "  input x : f32[4, 8]\n"
         "        ^\n"},
        /* 25: cast's dtype is one of the float dtypes, a word */
        {HEAD X "forward {\n  a = cast(x, f64)\n  b = cast(x, 2)\n  c = cast(x, i32)\n"
                "  loss = mse(cast(x), x)\n}\n",
         NULL, NULL, NULL,
         "t.dtm:4:15: error: cast: unknown dtype 'f64' (expected f32, bf16 or f16)\n"
         "    a = cast(x, f64)\n"
         "                ^~~\n"
         "t.dtm:5:15: error: argument 2 of cast must be a dtype (f32, bf16 or f16), got 2\n"
         "    b = cast(x, 2)\n"
         "                ^\n"
         "t.dtm:6:15: error: cast: unknown dtype 'i32' (expected f32, bf16 or f16)\n"
         "    c = cast(x, i32)\n"
         "                ^~~\n"
         "t.dtm:7:14: error: cast takes 2 arguments, got 1\n"
         "    loss = mse(cast(x), x)\n"
         "               ^~~~~~~\n"},
};

static void test_errors(void)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		Arena a;
		arena_init(&a);
		LowerOptions o = {0};
		o.mesh = cases[i].mesh;
		if (cases[i].dname)
			define(&o, cases[i].dname, cases[i].dval);
		char *out;
		IrModule *m = run(&a, "t.dtm", cases[i].src, &o, &out, NULL);
		CHECK(m == NULL);
		char what[64];
		snprintf(what, sizeof what, "case %zu", i);
		check_diags(what, out, cases[i].want);
		arena_free(&a);
	}
}

/* A batch split unevenly over its ranks (uneven_shards true) compiles to
 * gathers of the loss's and the weight gradients' operands: a warning at
 * the first input's placement naming every input split so, with the rows
 * per rank, and a note with the batches that split evenly.  An even split
 * or an uneven param warns of nothing; a Diag with no_warnings counts the
 * warning and prints neither it nor its note. */
static void test_uneven_batch_warning(void)
{
	static const char *fmt = "model m\n"
	                         "let batch = %d, d = 6\n"
	                         "mesh (dp = 4)\n"
	                         "input x : f32[batch, 4] @ [dp, _]\n"
	                         "input y : f32[batch, 4] @ [dp, _]\n"
	                         "param w : f32[4, d] @ [_, dp] init normal(0, 0.1)\n"
	                         "forward {\n"
	                         "  loss = mse(x @ w @ transpose(w), y)\n"
	                         "}\n"
	                         "train {\n"
	                         "  optimizer sgd(lr = 0.1)\n"
	                         "  uneven_shards true\n"
	                         "}\n";
	static const char *want =
	        "t.dtm:4:27: warning: batch 6 of inputs x, y splits unevenly over dp = 4 (rows: 2 "
	        "on 3 ranks, 0 on 1): every rank computes 2 rows, 8 in all, the padding's work "
	        "wasted\n"
	        "  input x : f32[batch, 4] @ [dp, _]\n"
	        "                            ^~~~~~~\n"
	        "t.dtm:4:27: note: a batch divisible by 4 (such as 4 or 8) splits evenly\n"
	        "  input x : f32[batch, 4] @ [dp, _]\n"
	        "                            ^~~~~~~\n";
	for (int batch = 6; batch <= 8; batch += 2) {
		Arena a;
		arena_init(&a);
		char src[1024];
		snprintf(src, sizeof src, fmt, batch);
		LowerOptions o = {0};
		char *out;
		IrModule *m = run(&a, "t.dtm", src, &o, &out, NULL);
		CHECK(m != NULL);
		/* w's dim 1 (6 over 4) is uneven too: no warning of its own */
		CHECK_EQ_STR(out, batch == 6 ? want : "");
		free(out);
		/* muted: counted, nothing printed */
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		Diag d;
		diag_init(&d, f);
		d.no_warnings = true;
		SrcFile sf = {.name = "t.dtm", .text = src, .len = strlen(src)};
		diag_add_file(&d, &sf);
		AstFile af;
		CHECK(ast_parse(&a, &d, &sf, &af) && lower_file(&a, &d, &af, &o) != NULL);
		fclose(f);
		CHECK_EQ_INT(d.nwarn, batch == 6 ? 1 : 0);
		CHECK_EQ_INT((int)len, 0);
		free(buf);
		arena_free(&a);
	}
}

/* A param's FSDP unit (IrModule.unit) is the block instance that declared
 * it, the innermost: an inner block's params are a unit of their own
 * inside the outer instance's block.  The IR text drops units; the parser
 * gives the params of one name prefix one unit, the same partition. */
static void test_units(void)
{
	static const char src[] = HEAD X
		"block inner(h) {\n  param w : f32[8, 8] init zeros\n  return h @ w\n}\n"
		"block outer(h) {\n  param v : f32[8, 8] init zeros\n  a = inner(h)\n"
		"  return inner(a) @ v\n}\n"
		"param top : f32[8, 8] init zeros\n"
		"forward {\n  h = outer(x) @ top\n  h = outer(h)\n  loss = mse(h, x)\n}\n";
	static const char *const names[] = {"top", "outer.0.v", "inner.0.w", "inner.1.w",
	                                    "outer.1.v", "inner.2.w", "inner.3.w"};
	enum { NN = sizeof names / sizeof names[0] };
	Arena a;
	arena_init(&a);
	char *out;
	LowerOptions o = {0};
	IrModule *m = run(&a, "t.dtm", src, &o, &out, NULL);
	if (!m)
		fprintf(stderr, "unexpected errors:\n%s", out);
	free(out);
	CHECK(m != NULL);
	IrNode *p[NN];
	for (int i = 0; m && i < NN; i++) {
		p[i] = find(m, names[i]);
		CHECK(p[i] != NULL);
		if (!p[i])
			m = NULL;
	}
	if (m) {
		CHECK_EQ_INT(ir_unit(m, p[0]), -1);
		for (int i = 1; i < NN; i++) {
			CHECK(ir_unit(m, p[i]) >= 0);
			for (int j = 1; j < i; j++)
				CHECK(ir_unit(m, p[i]) != ir_unit(m, p[j]));
		}
		CHECK(ir_block(m, p[1]) == 0 && ir_block(m, p[2]) == 0 && ir_block(m, p[3]) == 0);
		CHECK(ir_block(m, p[4]) == 1 && ir_block(m, p[6]) == 1);

		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);
		ir_print(f, m);
		fclose(f);
		Diag d;
		diag_init(&d, stderr);
		SrcFile sf = {"t.ir", text, len};
		IrModule *q = ir_parse(&a, &d, &sf);
		CHECK(q != NULL);
		CHECK(m->pp_axis == -1 && (!q || q->pp_axis == -1)); /* no pp axis */
		for (int i = 0; q && i < NN; i++)
			for (int j = 0; j < NN; j++)
				CHECK((ir_unit(q, q->nodes[p[i]->id]) == ir_unit(q, q->nodes[p[j]->id])) ==
				      (ir_unit(m, p[i]) == ir_unit(m, p[j])));
		free(text);
	}
	arena_free(&a);
}

int main(void)
{
	test_uneven_batch_warning();
	test_gpt();
	test_gpt2_small();
	test_mlp();
	test_constants();
	test_features();
	test_cast();
	test_errors();
	test_train_override();
	test_precision_policy();
	test_units();
	return check_report();
}
