/* test_autodiff.c - every gradient rule against central finite differences.
 *
 * Each test lowers a tiny .dtm program whose loss goes through the op under
 * test (usually sum(op(x) * w) with w a fixed random input, so the
 * gradient is not all ones), runs the autodiff pass and the verifier, and
 * evaluates the whole module with the f64 reference interpreter.  Every
 * element of every grad.<param> (a spread sample for big params) must match
 * ir_eval_loss_fd's central difference with h = 1e-6.  Two derivations
 * meeting (eval_grad.c's calculus and eval.c's forward) is the check;
 * casts are checked with the interpreter's exact_casts.  The last tests
 * cover what finite differences cannot: collectives, casts' dtypes,
 * unused params, a missing rule, and the text form of the new ops.
 */
#include "check.h"
#include "testlib_lower.h"
#include "frontend/lower.h"
#include "interp/eval.h"
#include "passes/autodiff.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

/* Casts are the identity in the interpreter for the next gradchecks
 * (IrEval.exact_casts): their rounding would swamp a difference of h. */
static bool exact_casts;

/* A fixed pseudo-random sequence in [-1, 1) (splitmix64). */
static double rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

/* ndef -D pairs of defs (a list that need not end in NULL). */
static IrModule *lower_src(Arena *a, const char *src, const char *mesh, int ndef,
                           const char *const *defs)
{
	Diag d;
	diag_init(&d, stderr);
	const char *ds[2 * 8 + 1] = {0};
	for (int i = 0; i < 2 * ndef && i < 2 * 8; i++)
		ds[i] = defs[i];
	return test_lower(a, &d, src, mesh, ds, NULL);
}

static IrNode *find(IrModule *m, const char *name)
{
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->name && strcmp(m->nodes[i]->name, name) == 0)
			return m->nodes[i];
	return NULL;
}

static bool run_autodiff(IrModule *m)
{
	Diag d;
	diag_init(&d, stderr);
	bool ok = pass_autodiff(m, &d, NULL) && ir_verify(m, &d, "autodiff");
	CHECK(ok);
	return ok;
}

/* Each param has exactly one grad node, of its type, named grad.<name>
 * and linked to it. */
static void check_grad_nodes(IrModule *m, const char *what)
{
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *p = m->nodes[i];
		if (p->op != IR_OP_PARAM)
			continue;
		char name[256];
		snprintf(name, sizeof name, "grad.%s", p->name);
		int count = 0;
		IrNode *g = NULL;
		for (int j = 0; j < m->nnodes; j++)
			if (m->nodes[j]->role == IR_ROLE_GRAD && m->nodes[j]->name &&
			    strcmp(m->nodes[j]->name, name) == 0) {
				g = m->nodes[j];
				count++;
			}
		CHECK_EQ_INT(count, 1);
		CHECK(g && ir_link(m, g) == IR_LINK_GRAD && ir_link_param(m, g) == p->id);
		/* a param narrower than reduce_dtype: its gradient is in that */
		IrDtype want =
		        ir_dtype_promote(p->dtype, m->train.reduce_dtype) == m->train.reduce_dtype
		                ? m->train.reduce_dtype
		                : p->dtype;
		if (!g || g->dtype != want || g->rank != p->rank ||
		    memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->rank) != 0) {
			check_failures++;
			fprintf(stderr, "%s: %s is missing or has the wrong type\n", what, name);
		}
	}
}

/* Lowers src, differentiates it and compares every param's gradient with
 * central differences.  i32 inputs get ids in [0, idlim); at most `sample`
 * elements of each param are checked. */
static void gradcheck(const char *what, const char *src, const char *mesh, int ndef,
                      const char *const *defs, int idlim, int sample)
{
	Arena a;
	arena_init(&a);
	rng_state = 12345;
	IrModule *m = lower_src(&a, src, mesh, ndef, defs);
	CHECK(m != NULL);
	if (!m || !run_autodiff(m)) {
		fprintf(stderr, "%s: lowering or autodiff failed\n", what);
		arena_free(&a);
		return;
	}
	check_grad_nodes(m, what);
	IrEval e;
	Diag d;
	diag_init(&d, stderr);
	CHECK(ir_eval_init(&e, m));
	e.exact_casts = exact_casts;
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op != IR_OP_PARAM && n->op != IR_OP_INPUT)
			continue;
		int64_t N = ir_node_numel(n);
		for (int64_t j = 0; j < N; j++)
			e.val[i][j] = n->dtype == IR_I32 ? (double)((j * 7 + 3 + i) % idlim) : rnd();
	}
	bool ok = ir_eval_run(&e, &d, 7, 3);
	CHECK(ok);
	int worst_fail = 0;
	for (int i = 0; ok && i < m->nnodes; i++) {
		IrNode *p = m->nodes[i];
		if (p->op != IR_OP_PARAM)
			continue;
		char name[256];
		snprintf(name, sizeof name, "grad.%s", p->name);
		IrNode *g = find(m, name);
		if (!g)
			continue;
		int64_t N = ir_node_numel(p);
		double *got = malloc(sizeof(double) * (size_t)N);
		memcpy(got, e.val[g->id], sizeof(double) * (size_t)N);
		int64_t step = N > sample ? N / sample : 1;
		for (int64_t j = 0; j < N; j += step) {
			double fd = ir_eval_loss_fd(&e, &d, i, j, 1e-6);
			double tol = 1e-6 * (1.0 + fabs(fd));
			check_count++;
			if (!(fabs(got[j] - fd) <= tol)) {
				check_failures++;
				if (worst_fail++ < 8)
					fprintf(stderr, "%s: %s[%lld] = %.12g, finite difference %.12g\n",
					        what, name, (long long)j, got[j], fd);
			}
		}
		free(got);
	}
	ir_eval_free(&e);
	arena_free(&a);
}

#define ALL 1000000

static void t(const char *what, const char *src)
{
	gradcheck(what, src, NULL, 0, NULL, 5, ALL);
}

static void test_unary(void)
{
	static const char *const exprs[][2] = {
	        {"neg", "neg(x)"},
	        {"exp", "exp(x)"},
	        {"log", "log(x * x + 0.5)"},
	        {"sqrt", "sqrt(x * x + 0.5)"},
	        {"rsqrt", "rsqrt(x * x + 0.5)"},
	        {"tanh", "tanh(x)"},
	        {"sigmoid", "sigmoid(x)"},
	        {"relu", "relu(x)"},
	        {"gelu", "gelu(x)"},
	        {"silu", "silu(x)"},
	        {"scale", "scale(x, 2.5)"},
	        {"const", "1 - x / 3"},
	};
	for (size_t i = 0; i < sizeof exprs / sizeof exprs[0]; i++) {
		char src[512];
		snprintf(src, sizeof src,
		         "model t\ninput w : f32[3, 4]\nparam x : f32[3, 4]\n"
		         "forward {\n  loss = sum(%s * w)\n}\n", exprs[i][1]);
		t(exprs[i][0], src);
	}
}

static void test_binary_broadcast(void)
{
	t("binary", "model t\n"
	            "input w : f32[2, 3, 4]\n"
	            "param a : f32[2, 3, 4]\nparam b : f32[4]\nparam c : f32[3, 1]\n"
	            "forward {\n"
	            "  loss = sum((a + b) * w) + sum((a - c) * (a * b)) + sum(a / (c * c + 1))\n"
	            "       + sum(c / (b * b + 2) * w) + sum((b - a) * w)\n"
	            "}\n");
}

static void test_matmul(void)
{
	t("matmul", "model t\n"
	            "input w : f32[2, 3, 5]\n"
	            "param x : f32[2, 3, 4]\nparam m : f32[4, 5]\n"
	            "forward {\n  loss = sum(x @ m * w)\n}\n");
	t("matmul batch broadcast", "model t\n"
	            "input w : f32[2, 3, 3, 2]\n"
	            "param a : f32[2, 1, 3, 4]\nparam b : f32[3, 4, 2]\n"
	            "param c : f32[3, 4]\nparam e : f32[2, 4, 5]\n"
	            "forward {\n  loss = sum(a @ b * w) + sum(c @ e)\n}\n");
}

static void test_reduce(void)
{
	t("reduce", "model t\n"
	            "input w1 : f32[1, 3, 1]\ninput w2 : f32[2, 4]\ninput w3 : f32[2, 3]\n"
	            "param x : f32[2, 3, 4]\n"
	            "forward {\n"
	            "  loss = sum(mean(x, axes = (0, 2), keepdims = true) * w1)\n"
	            "       + sum(max(x, axis = 1) * w2) + sum(sum(x, axis = -1) * w3)\n"
	            "       + mean(x) + max(x * 0.7 + 1)\n"
	            "}\n");
}

static void test_softmax(void)
{
	t("softmax", "model t\n"
	             "input w : f32[3, 5]\nparam x : f32[3, 5]\n"
	             "forward {\n"
	             "  loss = sum(softmax(x, axis = 0) * w) + sum(log_softmax(x, axis = -1) * w)\n"
	             "       + sum(softmax(x, axis = 1) * w)\n"
	             "}\n");
}

static void test_norms(void)
{
	t("norms", "model t\n"
	           "input w : f32[2, 3, 8]\nparam x : f32[2, 3, 8]\n"
	           "param g : f32[8]\nparam b : f32[8]\nparam g2 : f32[8]\n"
	           "forward {\n"
	           "  loss = sum(layernorm(x, g, b) * w) + sum(rmsnorm(x, g2) * w)\n"
	           "}\n");
}

static void test_rope(void)
{
	t("rope", "model t\n"
	          "input w : f32[2, 5, 12]\nparam x : f32[2, 5, 12]\n"
	          "forward {\n"
	          "  loss = sum(rope(x, heads = 3, theta = 10.0) * w)\n"
	          "       + sum(rope(rope(x, heads = 2) * w, heads = 6, theta = 500000.0) * w)\n"
	          "}\n");
}

static void test_cross_entropy(void)
{
	t("cross_entropy", "model t\n"
	                   "input tg : i32[2, 3]\nparam x : f32[2, 3, 7]\nparam m : f32[7, 5]\n"
	                   "forward {\n  loss = cross_entropy(x @ m, tg) * 3\n}\n");
}

static void test_embed(void)
{
	/* ids (j*7 + 3 + i) % 5 over 12 positions: every row repeats */
	t("embed", "model t\n"
	           "input ids : i32[2, 6]\ninput w : f32[2, 6, 4]\nparam tab : f32[5, 4]\n"
	           "forward {\n  loss = sum(embed(tab, ids) * w)\n}\n");
}

static void test_routing(void)
{
	/* gather by value (the gates) and by row (a dispatch, empty slots -1),
	 * scatter_add of rows (repeated indices add up); topk, moe_slot and
	 * moe_token only route */
	t("gather/scatter_add", "model t\n"
	                        "input w : f32[2, 5, 2]\ninput w2 : f32[2, 6, 3]\n"
	                        "input w3 : f32[2, 5, 3]\n"
	                        "param x : f32[2, 5, 4]\nparam y : f32[2, 5, 3]\n"
	                        "forward {\n"
	                        "  e = topk(x, k = 2)\n"
	                        "  loss = sum(gather(x, e) * w)\n"
	                        "       + sum(gather(y, moe_token(e, experts = 3, capacity = 2)) * w2)\n"
	                        "       + sum(scatter_add(gather(y, reshape(moe_slot(e, experts = 4, "
	                        "capacity = 2), (2, 10))), reshape(e, (2, 10)), size = 5) * w3)\n"
	                        "}\n");
	char *moe = slurp("models/moe.dtm");
	CHECK(moe != NULL);
	if (moe) {
		/* capacity 3 of 4 tokens per sequence at 2 choices of 4 experts:
		 * drops; the aux and z losses through the router */
		static const char *const defs[] = {"vocab", "11", "ctx", "4", "d", "8", "heads", "2",
		                                   "kv_heads", "1", "layers", "1", "batch", "2",
		                                   "experts", "4", "aux_weight", "0.5",
		                                   "z_weight", "0.25"};
		gradcheck("moe.dtm", moe, "pp=1,dp=1,ep=1,tp=1", 10, defs, 11, 12);
	}
	free(moe);
}

static void test_data_movement(void)
{
	t("concat/slice/split", "model t\n"
	                        "input w : f32[2, 7]\ninput w2 : f32[2, 3]\n"
	                        "param x : f32[2, 6]\nparam y : f32[2, 3]\n"
	                        "forward {\n"
	                        "  p, q, r = split(x, 3, axis = 1)\n"
	                        "  loss = sum(concat(r, y, p, axis = 1) * w) + sum(slice(x, 1, 1, 4) * w2)\n"
	                        "       + sum(q * q)\n"
	                        "}\n");
	t("reshape/permute", "model t\n"
	                     "input w : f32[4, 3, 2]\ninput w2 : f32[6, 4]\n"
	                     "param x : f32[2, 3, 4]\nparam y : f32[4, 6]\n"
	                     "forward {\n"
	                     "  loss = sum(permute(reshape(x, (3, 2, 4)), (2, 0, 1)) * w)\n"
	                     "       + sum(transpose(y) * w2)\n"
	                     "}\n");
}

static void test_attention(void)
{
	t("attention", "model t\n"
	               "input w : f32[2, 4, 6]\n"
	               "param q : f32[2, 4, 6]\nparam k : f32[2, 4, 6]\nparam v : f32[2, 4, 6]\n"
	               "forward {\n"
	               "  loss = sum(attention(q, k, v, heads = 2, causal = true) * w)\n"
	               "       + sum(attention(q, k, v, heads = 2) * w * w)\n"
	               "       + sum(attention(q, q, q, heads = 2, causal = true) * w)\n"
	               "}\n");
	/* grouped-query (4 query heads on 2 kv heads), multi-query (on 1), odd
	 * sizes (head dim 3, 5 positions), sliding windows causal and not */
	t("attention gqa", "model t\n"
	                   "input w : f32[2, 5, 12]\n"
	                   "param q : f32[2, 5, 12]\nparam k : f32[2, 5, 6]\nparam v : f32[2, 5, 6]\n"
	                   "param k1 : f32[2, 5, 3]\nparam v1 : f32[2, 5, 3]\n"
	                   "forward {\n"
	                   "  loss = sum(attention(q, k, v, heads = 4, kv_heads = 2, causal = true) * w)\n"
	                   "       + sum(attention(q, k, v, heads = 4, kv_heads = 2) * w * w)\n"
	                   "       + sum(attention(q, k1, v1, heads = 4, kv_heads = 1, causal = true) * w)\n"
	                   "}\n");
	t("attention window", "model t\n"
	                      "input w : f32[2, 5, 6]\n"
	                      "param q : f32[2, 5, 6]\nparam k : f32[2, 5, 2]\nparam v : f32[2, 5, 2]\n"
	                      "forward {\n"
	                      "  loss = sum(attention(q, k, v, heads = 3, kv_heads = 1, causal = true,\n"
	                      "                      window = 2) * w)\n"
	                      "       + sum(attention(q, k, v, heads = 3, kv_heads = 1, window = 3) * w * w)\n"
	                      "}\n");
	/* segment ids (j * 7 + 3 + i) % 2: interleaved documents */
	gradcheck("attention segments", "model t\n"
	                                "input w : f32[2, 5, 8]\ninput seg : i32[2, 5]\n"
	                                "param q : f32[2, 5, 8]\nparam k : f32[2, 5, 4]\n"
	                                "param v : f32[2, 5, 4]\n"
	                                "forward {\n"
	                                "  loss = sum(attention(q, k, v, heads = 2, kv_heads = 1,\n"
	                                "                      causal = true, segments = seg) * w)\n"
	                                "       + sum(attention(q, k, v, heads = 2, kv_heads = 1,\n"
	                                "                      window = 2, segments = seg) * w * w)\n"
	                                "}\n",
	          NULL, 0, NULL, 2, ALL);
}

/* cast(x, dtype) and the casts lowering adds to promote bf16 with f16 or
 * f32 operands: each gradient is the incoming one cast back to the
 * operand's dtype.  In f64 with exact casts (the function they compute
 * before rounding), so central differences apply. */
static void test_cast(void)
{
	exact_casts = true;
	t("cast", "model t\n"
	          "input w : f32[3, 4]\nparam x : f32[3, 4]\nparam b : f32[4]\n"
	          "forward {\n"
	          "  y = cast(cast(x, bf16) * cast(b, bf16), f32) * w\n"
	          "  z = cast(x, f16) * b + cast(exp(cast(b, bf16)), f16)\n"
	          "  loss = sum(y * x) + sum(z * w) + mean(cast(x * x, bf16)) + sum(cast(b, f32))\n"
	          "}\n");
	exact_casts = false;
}

static void test_mse_dropout(void)
{
	t("mse", "model t\n"
	         "param a : f32[3, 4]\nparam b : f32[4]\n"
	         "forward {\n  loss = mse(a, a * b + 1)\n}\n");
	t("dropout", "model t\n"
	             "input w : f32[4, 6]\nparam x : f32[4, 6]\n"
	             "forward {\n  loss = sum(dropout(x, rate = 0.3) * w) + sum(dropout(x * x, rate = 0.5))\n}\n");
}


static void test_models(void)
{
	char *gpt = slurp("models/gpt.dtm"), *mlp = slurp("models/mlp.dtm");
	CHECK(gpt && mlp);
	if (gpt) {
		static const char *const defs[] = {"vocab", "11", "ctx", "4", "d", "8", "heads", "2",
		                                   "layers", "2", "batch", "2"};
		gradcheck("gpt.dtm", gpt, "pp=1,dp=1,tp=1", 6, defs, 11, 10);
	}
	if (mlp) {
		static const char *const defs[] = {"batch", "4", "din", "5", "hidden", "6", "dout", "3"};
		gradcheck("mlp.dtm", mlp, "dp=1", 4, defs, 1, ALL);
	}
	free(gpt);
	free(mlp);
}

/* The text form of the backward graph parses back to the same text. */
static void test_text_roundtrip(void)
{
	Arena a;
	arena_init(&a);
	char *mlp = slurp("models/mlp.dtm"), *gpt = slurp("models/gpt.dtm");
	const char *srcs[2] = {mlp, gpt};
	for (int k = 0; k < 2; k++) {
		if (!srcs[k])
			continue;
		static const char *const defs[] = {"layers", "1"};
		IrModule *m = lower_src(&a, srcs[k], k ? "pp=1,dp=1,tp=1" : "dp=1", k, defs);
		CHECK(m && run_autodiff(m));
		if (!m)
			continue;
		char *t1 = NULL, *t2 = NULL;
		size_t l1 = 0, l2 = 0;
		FILE *f = open_memstream(&t1, &l1);
		ir_print(f, m);
		fclose(f);
		Diag d;
		diag_init(&d, stderr);
		SrcFile sf = {"roundtrip.ir", t1, l1};
		diag_add_file(&d, &sf);
		IrModule *m2 = ir_parse(&a, &d, &sf);
		CHECK(m2 != NULL);
		if (m2) {
			CHECK(ir_verify(m2, &d, "parse"));
			f = open_memstream(&t2, &l2);
			ir_print(f, m2);
			fclose(f);
			CHECK_EQ_STR(t1, t2);
		}
		free(t1);
		free(t2);
	}
	free(mlp);
	free(gpt);
	arena_free(&a);
}

static int count_op(IrModule *m, int from, IrOp op)
{
	int c = 0;
	for (int i = from; i < m->nnodes; i++)
		c += m->nodes[i]->op == op;
	return c;
}

/* DESIGN.md section 4's table (the interpreter cannot run collectives).
 * Collectives are per-rank ops, which a model cannot call, so the program
 * is IR text. */
static void test_collectives(void)
{
	Arena a;
	arena_init(&a);
	static const char text[] =
	        "module t\nmesh (pp = 2, dp = 2, tp = 2)\nafter partition\n"
	        "%0 = param {init = normal(0, 0.02)} \"x\" : f32[4, 8] @ ? role param\n"
	        "%1 = all_gather %0 {axes = (tp), dim = 1} \"g\" : f32[4, 16] @ ?\n"
	        "%2 = all_to_all %1 {axes = (dp), split = 0, concat = 1} \"b\" : f32[2, 32] @ ?\n"
	        "%3 = reduce_scatter %2 {axes = (tp), red = sum, dim = 1} \"r\" : f32[2, 16] @ ?\n"
	        "%4 = send %3 {axes = (pp), shift = 1} \"s\" : f32[2, 16] @ ?\n"
	        "%5 = all_reduce %4 {axes = (dp), red = avg} : f32[2, 16] @ ?\n"
	        "%6 = sum %5 {axes = (0, 1)} \"loss\" : f32[] @ ? role loss\n"
	        "loss %6\n";
	SrcFile sf = {.name = "t.ir", .text = text, .len = sizeof text - 1};
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = ir_parse(&a, &d, &sf);
	CHECK(m != NULL);
	if (!m || !run_autodiff(m)) {
		arena_free(&a);
		return;
	}
	check_grad_nodes(m, "collectives");
	int n0 = 0;
	while (n0 < m->nnodes && m->nodes[n0]->op != IR_OP_CONST)
		n0++; /* the seed is the first backward node */
	CHECK_EQ_INT(count_op(m, n0, IR_OP_RECV), 1);
	CHECK_EQ_INT(count_op(m, n0, IR_OP_REDUCE_SCATTER), 1);
	CHECK_EQ_INT(count_op(m, n0, IR_OP_ALL_GATHER), 1);
	CHECK_EQ_INT(count_op(m, n0, IR_OP_ALL_TO_ALL), 1);
	CHECK_EQ_INT(count_op(m, n0, IR_OP_ALL_REDUCE), 0); /* all_reduce: identity */
	for (int i = n0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op == IR_OP_ALL_TO_ALL)
			CHECK(ir_attr_coll(n)->a2a.split == 1 && ir_attr_coll(n)->a2a.concat == 0);
		if (n->op == IR_OP_REDUCE_SCATTER || n->op == IR_OP_ALL_GATHER)
			CHECK(ir_attr_coll(n)->dim == 1 && ir_attr_coll(n)->red == IR_RED_SUM);
		if (n->op == IR_OP_RECV)
			CHECK(ir_attr_coll(n)->shift == 1 && n->rank == 2);
		if (n->op == IR_OP_SCALE)
			CHECK_NEAR(ir_attr_scalar(n)->value, 0.5, 0); /* avg over dp = 2 */
	}
	arena_free(&a);
}

/* Hand-built: a bf16 param cast up, an unused param, a value used twice.
 * With reduce_dtype bf16 the gradient of p is the cast back to bf16; with
 * the default f32 it is the f32 gradient of cast(p) itself, unrounded. */
static void cast_and_unused(IrDtype reduce)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = ir_module_new(&a, "t");
	m->train.precision = IR_BF16;
	m->train.reduce_dtype = reduce;
	IrNode *p = ir_node_new(m, IR_OP_PARAM, NULL, 0, (SrcLoc){0});
	p->dtype = IR_BF16;
	p->rank = 1;
	p->shape[0] = 4;
	p->role = IR_ROLE_PARAM;
	p->name = "p";
	IrNode *z = ir_node_new(m, IR_OP_PARAM, NULL, 0, (SrcLoc){0});
	z->rank = 2;
	z->shape[0] = z->shape[1] = 2;
	z->role = IR_ROLE_PARAM;
	z->name = "z";
	int id = p->id;
	IrNode *c = ir_node_new(m, IR_OP_CAST, &id, 1, (SrcLoc){0});
	c->dtype = IR_F32;
	CHECK(ir_infer(m, c, &d));
	int two[2] = {c->id, c->id};
	IrNode *mu = ir_node_new(m, IR_OP_MUL, two, 2, (SrcLoc){0});
	CHECK(ir_infer(m, mu, &d));
	id = mu->id;
	IrNode *s = ir_node_new(m, IR_OP_SUM, &id, 1, (SrcLoc){0});
	ir_attr_axes_mut(m, s)->n = 1;
	CHECK(ir_infer(m, s, &d));
	s->role = IR_ROLE_LOSS;
	m->loss = s->id;
	CHECK(run_autodiff(m));
	check_grad_nodes(m, "cast");
	IrNode *gp = find(m, "grad.p"), *gz = find(m, "grad.z");
	if (reduce == IR_BF16)
		CHECK(gp && gp->op == IR_OP_CAST && gp->dtype == IR_BF16);
	else
		CHECK(gp && gp->op != IR_OP_CAST && gp->dtype == IR_F32);
	CHECK(gz && gz->op == IR_OP_EXPAND);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	double pv[4] = {0.5, -1.25, 2, 3};
	ir_eval_set(&e, p->id, pv);
	CHECK(ir_eval_run(&e, &d, 1, 0));
	for (int i = 0; gp && gz && i < 4; i++) {
		CHECK_NEAR(e.val[gp->id][i], 2 * pv[i], 0); /* d(p^2)/dp, exact in bf16 */
		CHECK_NEAR(e.val[gz->id][i], 0, 0);
	}
	ir_eval_free(&e);
	arena_free(&a);
}

static void test_cast_and_unused(void)
{
	cast_and_unused(IR_BF16);
	cast_and_unused(IR_F32);
}

/* The first backward node labelled lbl (IrNode.label), or NULL. */
static IrNode *labelled(IrModule *m, const char *lbl)
{
	for (int i = 0; i < m->nnodes; i++)
		if (ir_label(m, m->nodes[i]) && strcmp(ir_label(m, m->nodes[i]), lbl) == 0)
			return m->nodes[i];
	return NULL;
}

/* Labels for people (ir/label.c): a gradient term or sum is labelled with
 * the value it is the gradient of, by name or by expression, never by an
 * SSA id; a name (grad.w) wins over a label; expressions nest to a depth. */
static void test_labels(void)
{
	Arena a;
	arena_init(&a);
	IrModule *m = lower_src(&a,
	                        "model t\n"
	                        "input x : f32[2, 4]\n"
	                        "param w : f32[4, 4]\nparam v : f32[4, 4]\n"
	                        "forward {\n"
	                        "  h = x @ w\n"
	                        "  loss = sum(tanh(exp(h @ v)) * h)\n"
	                        "}\n",
	                        NULL, 0, NULL);
	CHECK(m != NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	int mm = -1, th = -1;
	for (int i = 0; i < m->nnodes; i++) {
		if (m->nodes[i]->op == IR_OP_MATMUL && !m->nodes[i]->name)
			mm = i;
		if (m->nodes[i]->op == IR_OP_TANH)
			th = i;
	}
	CHECK(mm >= 0 && th >= 0);
	char buf[256];
	if (mm >= 0) {
		ir_value_label(m, mm, buf, sizeof buf);
		CHECK_EQ_STR(buf, "matmul(h, v) at t.dtm:7:23");
	}
	if (th >= 0) {
		ir_value_label(m, th, buf, sizeof buf);
		CHECK_EQ_STR(buf, "tanh(exp(matmul(...))) at t.dtm:7:14");
		ir_grad_label(m, th, buf, sizeof buf);
		CHECK_EQ_STR(buf, "grad(tanh(exp(matmul(...)))) at t.dtm:7:14");
	}
	ir_value_label(m, m->loss, buf, sizeof buf);
	CHECK_EQ_STR(buf, "loss");
	int n0 = m->nnodes;
	CHECK(run_autodiff(m));
	/* h is used twice: both terms and their sum are h's gradient */
	IrNode *gh = labelled(m, "grad.h");
	CHECK(gh != NULL);
	int sums = 0;
	for (int i = n0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		sums += n->op == IR_OP_ADD && ir_label(m, n) && strcmp(ir_label(m, n), "grad.h") == 0;
		CHECK(!ir_label(m, n) || !strchr(ir_label(m, n), '%'));
	}
	CHECK_EQ_INT(sums, 1);
	CHECK(labelled(m, "grad(matmul(h, v)) at t.dtm:7:23") != NULL);
	CHECK(labelled(m, "grad(tanh(exp(matmul(...)))) at t.dtm:7:14") != NULL);
	/* w's one term became grad.w: the name is what it is called */
	IrNode *gw = find(m, "grad.w");
	CHECK(gw != NULL);
	if (gw) {
		ir_value_label(m, gw->id, buf, sizeof buf);
		CHECK_EQ_STR(buf, "grad.w");
	}
	arena_free(&a);
}

/* An op with no rule between a param and the loss is an internal error
 * naming the op, never a silent zero. */
static void test_missing_rule(void)
{
	Arena a;
	arena_init(&a);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, f);
	IrModule *m = ir_module_new(&a, "t");
	IrNode *p = ir_node_new(m, IR_OP_PARAM, NULL, 0, (SrcLoc){0});
	p->rank = 1;
	p->shape[0] = 3;
	p->role = IR_ROLE_PARAM;
	p->name = "p";
	int id = p->id;
	IrNode *x = ir_node_new(m, IR_OP_EXPAND, &id, 1, (SrcLoc){0});
	x->rank = 2;
	x->shape[0] = 2;
	x->shape[1] = 3;
	CHECK(ir_infer(m, x, &d));
	id = x->id;
	IrNode *s = ir_node_new(m, IR_OP_SUM, &id, 1, (SrcLoc){0});
	ir_attr_axes_mut(m, s)->n = 2;
	ir_attr_axes_mut(m, s)->axes[1] = 1;
	CHECK(ir_infer(m, s, &d));
	m->loss = s->id;
	CHECK(!pass_autodiff(m, &d, NULL));
	fclose(f);
	CHECK(buf && strstr(buf, "no gradient rule for op 'expand'"));
	free(buf);
	arena_free(&a);
}

int main(void)
{
	test_unary();
	test_binary_broadcast();
	test_matmul();
	test_reduce();
	test_softmax();
	test_norms();
	test_cross_entropy();
	test_embed();
	test_data_movement();
	test_routing();
	test_attention();
	test_rope();
	test_cast();
	test_mse_dropout();
	test_models();
	test_text_roundtrip();
	test_collectives();
	test_cast_and_unused();
	test_labels();
	test_missing_rule();
	return check_report();
}
