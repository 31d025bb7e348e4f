/* test_propagate.c - placement propagation: Megatron DP x TP on the MLP
 * and GPT, pure DP, a single device, the choice between two conflicting
 * candidates, the cost formulas, and the text form with origins.  Runs
 * from the repo root. */
#include "check.h"
#include "frontend/lower.h"
#include "passes/passes.h"
#include "passes/propagate.h"

#include <stdlib.h>
#include <string.h>

/* Lowers a model and runs the pipeline through propagate (the verifier
 * runs after each pass). */
static IrModule *compile(Arena *a, const char *path, const char *mesh)
{
	Diag d;
	diag_init(&d, stderr);
	LowerOptions o = {0};
	o.mesh = mesh;
	IrModule *m = lower_path(a, &d, path, &o);
	CHECK(m != NULL);
	if (!m)
		return NULL;
	bool ok = pass_run_until(m, &d, NULL, "propagate");
	CHECK(ok);
	CHECK_EQ_INT(d.nerr, 0);
	return ok ? m : NULL;
}

static IrNode *named(IrModule *m, const char *name)
{
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->name && strcmp(m->nodes[i]->name, name) == 0)
			return m->nodes[i];
	fprintf(stderr, "no node named %s\n", name);
	return NULL;
}

/* The first node with op `op` whose operand `slot` is `id`, or NULL. */
static IrNode *user(IrModule *m, IrOp op, int slot, int id)
{
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op == op && slot < n->nops && n->ops[slot] == id)
			return n;
	}
	return NULL;
}

static const char *place(IrModule *m, const IrNode *n)
{
	static char buf[8][128];
	static int k;
	char *b = buf[k++ % 8];
	if (!n)
		return "(no node)";
	placement_format(ir_place(m, n), &m->mesh, b, 128);
	return b;
}

static void check_all_known(IrModule *m)
{
	int unknown = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (!ir_place(m, m->nodes[i])->known)
			unknown++;
	CHECK_EQ_INT(unknown, 0);
}

static void test_mlp(void)
{
	Arena a;
	arena_init(&a);
	IrModule *m = compile(&a, "models/mlp.dtm", NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	check_all_known(m);
	IrNode *h = named(m, "h"), *w2 = named(m, "w2");
	CHECK_EQ_STR(place(m, h), "[dp, tp]");
	/* the row-parallel matmul leaves a partial sum; the bias add is
	 * where it resolves */
	IrNode *mm = w2 ? user(m, IR_OP_MATMUL, 1, w2->id) : NULL;
	CHECK_EQ_STR(place(m, mm), "[dp, _] partial(tp)");
	IrNode *add = mm ? user(m, IR_OP_ADD, 0, mm->id) : NULL;
	CHECK_EQ_STR(place(m, add), "[dp, _]");
	CHECK(add && ir_place_from(m, add) == mm->id);
	CHECK_EQ_STR(place(m, named(m, "grad.w1")), "[_, tp]");
	CHECK_EQ_STR(place(m, named(m, "grad.w2")), "[tp, _]");
	CHECK_EQ_STR(place(m, named(m, "grad.b1")), "[tp]");
	CHECK_EQ_STR(place(m, named(m, "grad.b2")), "[_]");
	CHECK_EQ_STR(place(m, named(m, "loss")), "[]");
	CHECK_EQ_STR(place(m, named(m, "opt.mom.w1")), "[_, tp]");
	/* origins: an annotation keeps its location, a grad names its param */
	CHECK(h && ir_place_from(m, h) == -1 && ir_place_loc(m, h).file &&
	      strcmp(ir_place_loc(m, h).file, "models/mlp.dtm") == 0 && ir_place_loc(m, h).line == 19);
	IrNode *g = named(m, "grad.w2");
	CHECK(g && w2 && ir_place_from(m, g) == w2->id);
	arena_free(&a);
}

static void test_gpt_tp(void)
{
	Arena a;
	arena_init(&a);
	IrModule *m = compile(&a, "models/gpt.dtm", NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	check_all_known(m);
	const char *qkv[] = {"layer.0.q", "layer.0.k", "layer.0.v", "layer.1.q"};
	for (int i = 0; i < 4; i++)
		CHECK_EQ_STR(place(m, named(m, qkv[i])), "[dp, _, tp]");
	IrNode *q = named(m, "layer.0.q");
	IrNode *att = q ? user(m, IR_OP_ATTENTION, 0, q->id) : NULL;
	CHECK_EQ_STR(place(m, att), "[dp, _, tp]");
	IrNode *wo = named(m, "layer.0.wo");
	IrNode *mm = att ? user(m, IR_OP_MATMUL, 0, att->id) : NULL;
	CHECK(mm && wo && mm->ops[1] == wo->id);
	CHECK_EQ_STR(place(m, mm), "[dp, _, _] partial(tp)");
	CHECK_EQ_STR(place(m, named(m, "x")), "[dp, _, _]");
	CHECK_EQ_STR(place(m, named(m, "layer.1.x")), "[dp, _, _]");
	CHECK_EQ_STR(place(m, named(m, "grad.layer.0.wq")), "[_, tp]");
	CHECK_EQ_STR(place(m, named(m, "grad.layer.0.wo")), "[tp, _]");
	CHECK_EQ_STR(place(m, named(m, "grad.wte")), "[tp, _]");
	CHECK_EQ_STR(place(m, named(m, "grad.wpe")), "[_, _]");
	CHECK_EQ_STR(place(m, named(m, "opt.v.layer.1.wfc")), "[_, tp]");
	CHECK_EQ_STR(place(m, named(m, "grad_norm")), "[]");
	arena_free(&a);
}

/* Pure DP: activations split over dp, every gradient replicated like its
 * param. */
static void test_gpt_dp(void)
{
	Arena a;
	arena_init(&a);
	IrModule *m = compile(&a, "models/gpt.dtm", "dp=4");
	if (!m) {
		arena_free(&a);
		return;
	}
	check_all_known(m);
	int acts = 0, bad = 0;
	for (int i = 0; i < m->loss; i++) {
		IrNode *n = m->nodes[i];
		if (n->role != IR_ROLE_ACT || n->rank < 2 || n->shape[0] != 8)
			continue;
		acts++;
		const Placement *np = ir_place(m, n);
		if (np->naxes[0] != 1 || np->axes[0][0] != 1 || np->partial) {
			bad++;
			fprintf(stderr, "%%%d: %s\n", i, place(m, n));
		}
	}
	CHECK(acts > 20);
	CHECK_EQ_INT(bad, 0);
	int grads = 0;
	bad = 0;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *g = m->nodes[i];
		if (g->role != IR_ROLE_GRAD)
			continue;
		grads++;
		IrNode *p = named(m, g->name + 5);
		Placement r;
		placement_replicated(&r, g->rank);
		if (!p || g->place != p->place || g->place != ir_place_intern(m, &r))
			bad++;
	}
	CHECK(grads > 20);
	CHECK_EQ_INT(bad, 0);
	arena_free(&a);
}

/* One device (every axis of size 1): nothing is split, nothing partial. */
static void test_single_device(void)
{
	const char *models[] = {"models/mlp.dtm", "models/gpt.dtm"};
	for (int k = 0; k < 2; k++) {
		Arena a;
		arena_init(&a);
		IrModule *m = compile(&a, models[k], "dp=1");
		if (!m) {
			arena_free(&a);
			continue;
		}
		int bad = 0;
		for (int i = 0; i < m->nnodes; i++) {
			IrNode *n = m->nodes[i];
			Placement r;
			placement_replicated(&r, n->rank);
			if (n->place != ir_place_intern(m, &r))
				bad++;
		}
		CHECK_EQ_INT(bad, 0);
		arena_free(&a);
	}
}

static IrModule *parse_text(Arena *a, const char *text)
{
	Diag d;
	diag_init(&d, stderr);
	SrcFile *sf = arena_alloc(a, sizeof *sf);
	sf->name = "test.ir";
	sf->text = text;
	sf->len = strlen(text);
	diag_add_file(&d, sf);
	IrModule *m = ir_parse(a, &d, sf);
	CHECK(m != NULL && d.nerr == 0);
	return d.nerr ? NULL : m;
}

/* x [dp, _] @ w [_, dp]: dp cannot split both m and n, so one operand is
 * gathered; the cheaper one (the smaller) must be. */
static void test_conflict(void)
{
	static const char *const cases[][2] = {
		{"%0 = input \"x\" : f32[1024, 64] @ [dp, _] role input\n"
		 "%1 = param {init = zeros} \"w\" : f32[64, 64] @ [_, dp] role param\n",
		 "[dp, _]"},
		{"%0 = input \"x\" : f32[64, 64] @ [dp, _] role input\n"
		 "%1 = param {init = zeros} \"w\" : f32[64, 1024] @ [_, dp] role param\n",
		 "[_, dp]"},
	};
	for (int k = 0; k < 2; k++) {
		Arena a;
		arena_init(&a);
		char text[1024];
		snprintf(text, sizeof text, "module t\nmesh (dp = 4)\n%s%s", cases[k][0],
		         k ? "%2 = matmul %0, %1 : f32[64, 1024] @ ?\n"
		           : "%2 = matmul %0, %1 : f32[1024, 64] @ ?\n");
		IrModule *m = parse_text(&a, text);
		if (m) {
			Diag d;
			diag_init(&d, stderr);
			CHECK(pass_propagate(m, &d, NULL));
			CHECK(ir_verify(m, &d, "propagate"));
			CHECK_EQ_STR(place(m, m->nodes[2]), cases[k][1]);
			CHECK_EQ_INT(ir_place_from(m, m->nodes[2]), k ? 1 : 0);
		}
		arena_free(&a);
	}
}

static Placement pl(const char *spec)
{
	/* "d0" = dim 0 over axis 0, "d1" = dim 1 over axis 0, "p" = partial */
	Placement p;
	placement_replicated(&p, 2);
	if (strchr(spec, '0'))
		p.axes[0][p.naxes[0]++] = 0;
	if (strchr(spec, '1'))
		p.axes[1][p.naxes[1]++] = 0;
	if (strchr(spec, 'p'))
		p.partial = 1;
	return p;
}

static void test_cost(void)
{
	Mesh mesh = {1, {"dp"}, {4}};
	Placement r = pl(""), s0 = pl("0"), s1 = pl("1"), p = pl("p");
	CHECK_NEAR(pass_propagate_cost(&mesh, &s0, &r, 1024), 768, 1e-9);  /* all_gather */
	CHECK_NEAR(pass_propagate_cost(&mesh, &p, &r, 1024), 1536, 1e-9);  /* all_reduce */
	CHECK_NEAR(pass_propagate_cost(&mesh, &p, &s0, 1024), 768, 1e-9);  /* reduce_scatter */
	CHECK_NEAR(pass_propagate_cost(&mesh, &s0, &s1, 1024), 192, 1e-9); /* all_to_all */
	CHECK_NEAR(pass_propagate_cost(&mesh, &r, &s1, 1024), 0, 1e-9);    /* a local slice */
	CHECK_NEAR(pass_propagate_cost(&mesh, &s0, &s0, 1024), 0, 1e-9);
	Mesh one = {1, {"dp"}, {1}};
	CHECK_NEAR(pass_propagate_cost(&one, &p, &r, 1024), 0, 1e-9);
}

/* print -> parse -> print is byte-identical with origins in it. */
static void test_roundtrip(void)
{
	Arena a;
	arena_init(&a);
	IrModule *m = compile(&a, "models/mlp.dtm", NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	char *t1 = NULL, *t2 = NULL;
	size_t n1 = 0, n2 = 0;
	FILE *f = open_memstream(&t1, &n1);
	ir_print(f, m);
	fclose(f);
	CHECK(strstr(t1, "@ [dp, tp] from \"models/mlp.dtm\":19:") != NULL);
	CHECK(strstr(t1, "@ [dp, _] partial(tp) from %8 ") != NULL);
	IrModule *m2 = parse_text(&a, t1);
	if (m2) {
		f = open_memstream(&t2, &n2);
		ir_print(f, m2);
		fclose(f);
		CHECK(n1 == n2 && memcmp(t1, t2, n1) == 0);
		Diag d;
		diag_init(&d, stderr);
		CHECK(ir_verify(m2, &d, "parse"));
	}
	/* a bad origin is the verifier's to catch */
	ir_set_place_from(m, m->nodes[3], m->nnodes);
	Diag d;
	char *msg = NULL;
	size_t len = 0;
	FILE *mf = open_memstream(&msg, &len);
	diag_init(&d, mf);
	CHECK(!ir_verify(m, &d, "test"));
	fclose(mf);
	CHECK(msg && strstr(msg, "placement origin") != NULL);
	free(msg);
	free(t1);
	free(t2);
	arena_free(&a);
}

/* The memo seam (passes/propagate_memo.c) is only a shortcut: with it
 * and without, every node's placement and origin, printed, is the same,
 * on layouts whose layers and micro-batches repeat, and the memo did
 * answer. */
static void test_memo_identity(void)
{
	static const struct {
		const char *mesh, *train;
	} cases[] = {
	        {"pp=1,dp=2,tp=2", "microbatches=2"},
	        {"pp=1,dp=1,tp=4", "sequence_parallel=true"},
	        {"pp=2,dp=2,tp=2", "microbatches=4"},
	        {"pp=1,dp=4,tp=1", "zero=3"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		char *text[2] = {NULL, NULL};
		size_t len[2] = {0, 0};
		for (int memo = 0; memo < 2; memo++) {
			Arena a;
			arena_init(&a);
			Diag d;
			diag_init(&d, stderr);
			LowerOptions o = {.mesh = cases[k].mesh, .ntrain = 1};
			o.train[0] = cases[k].train;
			static const char *const defs[] = {"layers", "3", "vocab", "15"};
			for (int i = 0; i < 2; i++) {
				o.define_names[o.ndefines] = defs[2 * i];
				o.define_values[o.ndefines++] = defs[2 * i + 1];
			}
			IrModule *m = lower_path(&a, &d, "models/gpt.dtm", &o);
			long hits = -1;
			bool ok = m && pass_run_until(m, &d, NULL, "optim") &&
			          pass_propagate_memo(m, &d, NULL, memo, &hits) &&
			          ir_verify(m, &d, "propagate");
			CHECK(ok);
			/* off: the seam answers nothing; on: it answers */
			CHECK(memo ? hits > 0 : hits == 0);
			FILE *f = open_memstream(&text[memo], &len[memo]);
			if (ok && f)
				ir_print(f, m);
			if (f)
				fclose(f);
			arena_free(&a);
		}
		bool same = text[0] && text[1] && len[0] == len[1] && !memcmp(text[0], text[1], len[0]);
		CHECK(same);
		CHECK(len[0] > 20000);
		if (!same)
			fprintf(stderr, "the memo changed propagation on %s (%s)\n", cases[k].mesh,
			        cases[k].train);
		free(text[0]);
		free(text[1]);
	}
}

int main(void)
{
	test_memo_identity();
	test_mlp();
	test_gpt_tp();
	test_gpt_dp();
	test_single_device();
	test_conflict();
	test_cost();
	test_roundtrip();
	return check_report();
}
