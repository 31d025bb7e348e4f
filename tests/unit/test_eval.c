/* test_eval.c - the reference interpreter against hand-computed values.
 *
 * Each test builds a tiny module by hand (shapes from ir_infer), feeds its
 * leaves and compares every element with numbers worked out on paper (or
 * with an independent formula where paper would be tedious).  The last
 * tests check the finite-difference helper against a hand-derived gradient
 * of a small MLP, since later autodiff tests lean on it. */
#include "check.h"
#include "testlib_attr.h"
#include "interp/eval.h"
#include "ir/ir.h"
#include "support/philox.h"

#include <stdlib.h>

static Arena arena;
static Diag diag;
static FILE *devnull;

static IrModule *mod(void)
{
	arena_free(&arena);
	arena_init(&arena);
	return ir_module_new(&arena, "t");
}

/* A param or input of the given type. */
static int leaf(IrModule *m, IrOp op, IrDtype t, int rank, const int64_t *shape)
{
	IrNode *n = ir_node_new(m, op, NULL, 0, (SrcLoc){0});
	n->dtype = t;
	n->rank = rank;
	for (int i = 0; i < rank; i++)
		n->shape[i] = shape[i];
	n->role = op == IR_OP_PARAM ? IR_ROLE_PARAM : IR_ROLE_INPUT;
	CHECK(ir_infer(m, n, &diag));
	return n->id;
}

/* An op node; attrs are set by `ints`/`f0`/`flag`; its type comes from
 * ir_infer. */
static IrNode *opn(IrModule *m, IrOp op, int nops, const int *ops)
{
	return ir_node_new(m, op, ops, nops, (SrcLoc){0});
}

static int fin(IrModule *m, IrNode *n)
{
	bool ok = ir_infer(m, n, &diag);
	CHECK(ok);
	return n->id;
}

static int op1(IrModule *m, IrOp op, int a)
{
	return fin(m, opn(m, op, 1, &a));
}

static int op2(IrModule *m, IrOp op, int a, int b)
{
	int o[2] = {a, b};
	return fin(m, opn(m, op, 2, o));
}

static void set_ints(IrModule *m, IrNode *n, int k, const int64_t *v)
{
	test_set_attrs(m, n, k, v, 0, false);
}

static int opi(IrModule *m, IrOp op, int a, int k, const int64_t *ints, bool flag)
{
	IrNode *n = opn(m, op, 1, &a);
	test_set_attrs(m, n, k, ints, 0, flag);
	return fin(m, n);
}

static void check_vals(const double *got, const double *want, int n, double tol, int line)
{
	for (int i = 0; i < n; i++) {
		check_count++;
		if (!(fabs(got[i] - want[i]) <= tol)) {
			check_failures++;
			fprintf(stderr, "%s:%d: element %d: got %.10g, want %.10g\n", __FILE__,
			        line, i, got[i], want[i]);
		}
	}
}
#define CHECK_VALS(got, ...)                                                                       \
	do {                                                                                       \
		const double want_[] = {__VA_ARGS__};                                              \
		check_vals((got), want_, (int)(sizeof want_ / sizeof want_[0]), 1e-7, __LINE__);   \
	} while (0)

static bool run(IrEval *e)
{
	return ir_eval_run(e, &diag, 1234, 0);
}

static void test_matmul(void)
{
	IrModule *m = mod();
	int a = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int b = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){3, 2});
	int c = op2(m, IR_OP_MATMUL, a, b);
	/* batched: [2, 2, 2] @ [2, 2], the right operand broadcast over the batch */
	int p = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 2, 2});
	int q = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 2});
	int r = op2(m, IR_OP_MATMUL, p, q);
	/* and the left one broadcast: [1, 2, 2] @ [3, 2, 1] -> [3, 2, 1] */
	int u = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 2});
	int v = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){3, 2, 1});
	int w = op2(m, IR_OP_MATMUL, u, v);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, a, (double[]){1, 2, 3, 4, 5, 6});
	ir_eval_set(&e, b, (double[]){7, 8, 9, 10, 11, 12});
	ir_eval_set(&e, p, (double[]){1, 0, 0, 1, 2, 0, 0, 2});
	ir_eval_set(&e, q, (double[]){1, 2, 3, 4});
	ir_eval_set(&e, u, (double[]){1, 2, 3, 4});
	ir_eval_set(&e, v, (double[]){1, 0, 0, 1, 1, 1});
	CHECK(run(&e));
	CHECK_VALS(e.val[c], 58, 64, 139, 154);
	CHECK_VALS(e.val[r], 1, 2, 3, 4, 2, 4, 6, 8);
	CHECK_VALS(e.val[w], 1, 3, 2, 4, 3, 7);
	ir_eval_free(&e);
}

static void test_binary(void)
{
	IrModule *m = mod();
	int a = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int b = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){3});
	int col = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 1});
	int s = leaf(m, IR_OP_INPUT, IR_F32, 0, NULL);
	int add = op2(m, IR_OP_ADD, a, b);
	int sub = op2(m, IR_OP_SUB, col, b); /* both sides broadcast: [2,1] - [3] */
	int mul = op2(m, IR_OP_MUL, a, s);
	int div = op2(m, IR_OP_DIV, b, a);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, a, (double[]){1, 2, 3, 4, 5, 6});
	ir_eval_set(&e, b, (double[]){10, 20, 30});
	ir_eval_set(&e, col, (double[]){100, 200});
	ir_eval_set(&e, s, (double[]){-2});
	CHECK(run(&e));
	CHECK_EQ_INT(m->nodes[sub]->rank, 2);
	CHECK_VALS(e.val[add], 11, 22, 33, 14, 25, 36);
	CHECK_VALS(e.val[sub], 90, 80, 70, 190, 180, 170);
	CHECK_VALS(e.val[mul], -2, -4, -6, -8, -10, -12);
	CHECK_VALS(e.val[div], 10, 10, 10, 2.5, 4, 5);
	ir_eval_free(&e);
}

static void test_unary(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){3});
	int ids[12];
	IrOp ops[] = {IR_OP_NEG,  IR_OP_EXP,  IR_OP_LOG,  IR_OP_SQRT,    IR_OP_RSQRT, IR_OP_TANH,
	              IR_OP_RELU, IR_OP_GELU, IR_OP_SILU, IR_OP_SIGMOID, IR_OP_SCALE};
	for (int i = 0; i < 11; i++) {
		IrNode *n = opn(m, ops[i], 1, &x);
		if (ops[i] == IR_OP_SCALE)
			ir_attr_scalar_mut(m, n)->value = 0.5;
		ids[i] = fin(m, n);
	}
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, x, (double[]){1, 4, -1});
	CHECK(run(&e));
	CHECK_VALS(e.val[ids[0]], -1, -4, 1);
	CHECK_VALS(e.val[ids[1]], 2.718281828459045, 54.598150033144236, 0.36787944117144233);
	CHECK_VALS(e.val[ids[2]], 0, 1.3862943611198906);
	CHECK(isnan(e.val[ids[2]][2]));
	CHECK_VALS(e.val[ids[3]], 1, 2);
	CHECK_VALS(e.val[ids[4]], 1, 0.5);
	CHECK_VALS(e.val[ids[5]], 0.7615941559557649, 0.999329299739067, -0.7615941559557649);
	CHECK_VALS(e.val[ids[6]], 1, 4, 0);
	CHECK_VALS(e.val[ids[7]], 0.8411919906, 3.9999297540, -0.1588080094);
	CHECK_VALS(e.val[ids[8]], 0.7310585786300049, 3.928055160151634, -0.2689414213699951);
	CHECK_VALS(e.val[ids[9]], 0.7310585786300049, 0.9820137900379085, 0.2689414213699951);
	CHECK_VALS(e.val[ids[10]], 0.5, 2, -0.5);
	ir_eval_free(&e);
}

static void test_cast(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){8});
	IrDtype ts[] = {IR_F32, IR_BF16, IR_F16, IR_I32};
	int c[4];
	for (int i = 0; i < 4; i++) {
		IrNode *n = opn(m, IR_OP_CAST, 1, &x);
		n->dtype = ts[i];
		c[i] = fin(m, n);
	}
	double u = ldexp(1, -8), h = ldexp(1, -11);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	/* ties to even at 1 + half an ulp, away at 1 + 3/2 ulp, per dtype */
	ir_eval_set(&e, x, (double[]){0.1, 1 + u, 1 + 3 * u, 1 + h, 1 + 3 * h, 65519, 65520, -2.7});
	CHECK(run(&e));
	CHECK(e.val[c[0]][0] == (double)0.1f);
	CHECK_VALS(e.val[c[1]], 0.10009765625, 1, 1 + 4 * u, 1, 1, 65536, 65536, -2.703125);
	CHECK(e.val[c[2]][0] == 0.0999755859375);
	CHECK(e.val[c[2]][1] == 1 + u && e.val[c[2]][2] == 1 + 3 * u);
	CHECK(e.val[c[2]][3] == 1 && e.val[c[2]][4] == 1 + 4 * h);
	CHECK(e.val[c[2]][5] == 65504);
	CHECK(isinf(e.val[c[2]][6]));
	CHECK(e.val[c[2]][7] == -2.69921875);
	CHECK_VALS(e.val[c[3]], 0, 1, 1, 1, 1, 65519, 65520, -2);
	ir_eval_free(&e);
	/* f16 subnormals: 2^-24 is the smallest; 2^-25 ties to zero; 1.5 *
	 * 2^-25 rounds up to 2^-24; 3 * 2^-24 stays */
	CHECK(ir_eval_round(IR_F16, ldexp(1, -24)) == ldexp(1, -24));
	CHECK(ir_eval_round(IR_F16, ldexp(1, -25)) == 0);
	CHECK(ir_eval_round(IR_F16, ldexp(3, -26)) == ldexp(1, -24));
	CHECK(ir_eval_round(IR_F16, ldexp(3, -24)) == ldexp(3, -24));
	CHECK(ir_eval_round(IR_F16, -ldexp(1023, -24)) == -ldexp(1023, -24));
	CHECK(ir_eval_round(IR_F16, ldexp(2047, -25)) == ldexp(1, -14)); /* carries */
	CHECK(isnan(ir_eval_round(IR_F16, NAN)) && isnan(ir_eval_round(IR_BF16, NAN)));
	CHECK(ir_eval_round(IR_BF16, ldexp(1021, 118)) == ldexp(255, 120)); /* to the largest */
	CHECK(isinf(ir_eval_round(IR_BF16, 3.4e38))); /* past the largest bf16 */
}

static void test_reduce(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int s1 = opi(m, IR_OP_SUM, x, 1, (int64_t[]){1}, true);
	int m01 = opi(m, IR_OP_MEAN, x, 2, (int64_t[]){0, 1}, false);
	int x0 = opi(m, IR_OP_MAX, x, 1, (int64_t[]){0}, false);
	int s0k = opi(m, IR_OP_SUM, x, 1, (int64_t[]){0}, true);
	CHECK_EQ_INT(m->nodes[s1]->rank, 2);
	CHECK_EQ_INT(m->nodes[s1]->shape[1], 1);
	CHECK_EQ_INT(m->nodes[m01]->rank, 0);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, x, (double[]){1, 5, 3, 4, 2, 6});
	CHECK(run(&e));
	CHECK_VALS(e.val[s1], 9, 12);
	CHECK_VALS(e.val[m01], 3.5);
	CHECK_VALS(e.val[x0], 4, 5, 6);
	CHECK_VALS(e.val[s0k], 5, 7, 9);
	ir_eval_free(&e);
}

static void test_softmax(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){3});
	int sm = opi(m, IR_OP_SOFTMAX, x, 1, (int64_t[]){0}, false);
	int ls = opi(m, IR_OP_LOG_SOFTMAX, x, 1, (int64_t[]){0}, false);
	/* along axis 0 of [2, 2]: columns normalise; huge logits must not overflow */
	int y = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 2});
	int sy = opi(m, IR_OP_SOFTMAX, y, 1, (int64_t[]){0}, false);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, x, (double[]){1, 2, 3});
	ir_eval_set(&e, y, (double[]){1000, 0, 1000, 0});
	CHECK(run(&e));
	CHECK_VALS(e.val[sm], 0.09003057317038046, 0.24472847105479764, 0.6652409557748219);
	CHECK_VALS(e.val[ls], -2.4076059644443806, -1.4076059644443806, -0.4076059644443806);
	CHECK_VALS(e.val[sy], 0.5, 0.5, 0.5, 0.5);
	ir_eval_free(&e);
}

static void test_norms(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 4});
	int g = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){4});
	int b = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){4});
	int g2 = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){4});
	IrNode *n = opn(m, IR_OP_LAYERNORM, 3, (int[]){x, g, b});
	int ln = fin(m, n);
	n = opn(m, IR_OP_RMSNORM, 2, (int[]){x, g2});
	int rms = fin(m, n);
	n = opn(m, IR_OP_LAYERNORM, 3, (int[]){x, g2, g2});
	ir_attr_eps_mut(m, n)->eps = 1.75; /* var 1.25 + eps 1.75 = 3: checks eps is inside */
	int lne = fin(m, n);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, x, (double[]){1, 2, 3, 4, 2, 4, 6, 8});
	ir_eval_set(&e, g, (double[]){1, 1, 1, 1});
	ir_eval_set(&e, b, (double[]){0, 0, 0, 0});
	ir_eval_set(&e, g2, (double[]){1, 1, 1, 2});
	CHECK(run(&e));
	/* mean 2.5, biased var 1.25: (x - 2.5) / sqrt(1.25); the second row is
	 * the first doubled plus 0, so normalises to the same values */
	CHECK_VALS(e.val[ln], -1.3416407864998738, -0.4472135954999579, 0.4472135954999579,
	           1.3416407864998738, -1.3416407864998738, -0.4472135954999579, 0.4472135954999579,
	           1.3416407864998738);
	/* mean squares 7.5 and 30: again the same values */
	CHECK_VALS(e.val[rms], 0.3651483716701107, 0.7302967433402214, 1.0954451150103321,
	           2.9211869733608857, 0.3651483716701107, 0.7302967433402214, 1.0954451150103321,
	           2.9211869733608857);
	/* variances 1.25 and 5 plus eps 1.75 */
	double s3 = 1 / sqrt(3.0), s6 = 1 / sqrt(6.75);
	CHECK_VALS(e.val[lne], -1.5 * s3 + 1, -0.5 * s3 + 1, 0.5 * s3 + 1, 2 * 1.5 * s3 + 2,
	           -3 * s6 + 1, -1 * s6 + 1, 1 * s6 + 1, 2 * 3 * s6 + 2);
	ir_eval_free(&e);
}

static void test_embed(void)
{
	IrModule *m = mod();
	int t = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){3, 2});
	int ids = leaf(m, IR_OP_INPUT, IR_I32, 2, (int64_t[]){2, 2});
	int y = op2(m, IR_OP_EMBED, t, ids);
	CHECK_EQ_INT(m->nodes[y]->rank, 3);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, t, (double[]){0, 1, 10, 11, 20, 21});
	ir_eval_set(&e, ids, (double[]){2, 0, 1, 1});
	CHECK(run(&e));
	CHECK_VALS(e.val[y], 20, 21, 0, 1, 10, 11, 10, 11);
	/* an id out of range is a diagnostic, not a crash */
	int before = diag.nerr;
	ir_eval_set(&e, ids, (double[]){0, 3, 1, 1});
	CHECK(!run(&e));
	CHECK_EQ_INT(diag.nerr, before + 1);
	ir_eval_set(&e, ids, (double[]){0, -1, 1, 1});
	CHECK(!run(&e));
	ir_eval_free(&e);
}

static void test_movement(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int tr = opi(m, IR_OP_PERMUTE, x, 2, (int64_t[]){1, 0}, false);
	int z = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 3, 4});
	int pz = opi(m, IR_OP_PERMUTE, z, 3, (int64_t[]){2, 0, 1}, false);
	int c1 = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 1});
	IrNode *n = opn(m, IR_OP_CONCAT, 3, (int[]){c1, x, c1});
	set_ints(m, n, 1, (int64_t[]){1});
	int cat = fin(m, n);
	n = opn(m, IR_OP_CONCAT, 2, (int[]){x, x});
	set_ints(m, n, 1, (int64_t[]){0});
	int cat0 = fin(m, n);
	int sl = opi(m, IR_OP_SLICE, cat, 3, (int64_t[]){1, 1, 3}, false);
	int sl0 = opi(m, IR_OP_SLICE, z, 3, (int64_t[]){0, 1, 2}, false);
	n = opn(m, IR_OP_RESHAPE, 1, &x);
	n->rank = 3;
	n->shape[0] = 3, n->shape[1] = 1, n->shape[2] = 2;
	int rs = fin(m, n);
	CHECK_EQ_INT(m->nodes[pz]->shape[0], 4);
	CHECK_EQ_INT(m->nodes[cat]->shape[1], 5);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, x, (double[]){1, 2, 3, 4, 5, 6});
	double zv[24];
	for (int i = 0; i < 24; i++)
		zv[i] = i;
	ir_eval_set(&e, z, zv);
	ir_eval_set(&e, c1, (double[]){-1, -2});
	CHECK(run(&e));
	CHECK_VALS(e.val[tr], 1, 4, 2, 5, 3, 6);
	/* out[i][j][k] = z[j][k][i] = 12j + 4k + i */
	int bad = 0;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			for (int k = 0; k < 3; k++)
				bad += e.val[pz][(i * 2 + j) * 3 + k] != 12 * j + 4 * k + i;
	CHECK_EQ_INT(bad, 0);
	CHECK_VALS(e.val[cat], -1, 1, 2, 3, -1, -2, 4, 5, 6, -2);
	CHECK_VALS(e.val[cat0], 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6);
	CHECK_VALS(e.val[sl], 1, 2, 4, 5);
	CHECK_EQ_INT(ir_node_numel(m->nodes[sl0]), 12);
	CHECK_VALS(e.val[sl0], 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
	CHECK_VALS(e.val[rs], 1, 2, 3, 4, 5, 6);
	ir_eval_free(&e);
}

/* T = 2, D = 2, one head, worked by hand:
 *   q = [[1,0],[0,1]], k = [[1,0],[1,1]], v = [[1,2],[3,4]]
 *   causal, query 0 sees key 0 only: out0 = v0 = [1, 2]
 *   query 1: scores [0, 1] / sqrt(2), p1 = sigmoid(1/sqrt 2) = 0.6697615493266569,
 *   out1 = v0 + p1 (v1 - v0) = [1 + 2 p1, 2 + 2 p1]
 *   not causal, query 0: scores [1, 1] / sqrt 2, equal: out0 = [2, 3]
 * Two heads with the same q, k and v shifted by 10 in head 1 give the
 * same weights, so head 1's output is head 0's plus 10. */
static void test_attention(void)
{
	IrModule *m = mod();
	int q = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 2});
	int k = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 2});
	int v = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 2});
	IrNode *n = opn(m, IR_OP_ATTENTION, 3, (int[]){q, k, v});
	set_ints(m, n, 2, (int64_t[]){1, 1});
	int ac = fin(m, n);
	n = opn(m, IR_OP_ATTENTION, 3, (int[]){q, k, v});
	set_ints(m, n, 2, (int64_t[]){1, 0});
	int an = fin(m, n);
	int q2 = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 4});
	int k2 = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 4});
	int v2 = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){1, 2, 4});
	n = opn(m, IR_OP_ATTENTION, 3, (int[]){q2, k2, v2});
	set_ints(m, n, 2, (int64_t[]){2, 1});
	int a2 = fin(m, n);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_set(&e, q, (double[]){1, 0, 0, 1});
	ir_eval_set(&e, k, (double[]){1, 0, 1, 1});
	ir_eval_set(&e, v, (double[]){1, 2, 3, 4});
	ir_eval_set(&e, q2, (double[]){1, 0, 1, 0, 0, 1, 0, 1});
	ir_eval_set(&e, k2, (double[]){1, 0, 1, 0, 1, 1, 1, 1});
	ir_eval_set(&e, v2, (double[]){1, 2, 11, 12, 3, 4, 13, 14});
	CHECK(run(&e));
	double p1 = 0.6697615493266569;
	CHECK_VALS(e.val[ac], 1, 2, 1 + 2 * p1, 2 + 2 * p1);
	/* not causal, query 1 is as before (it saw both keys already) */
	CHECK_VALS(e.val[an], 2, 3, 1 + 2 * p1, 2 + 2 * p1);
	CHECK_VALS(e.val[a2], 1, 2, 11, 12, 1 + 2 * p1, 2 + 2 * p1, 11 + 2 * p1, 12 + 2 * p1);
	ir_eval_free(&e);
}

/* Grouped-query attention with masks against a plain reference written
 * here: K and V repeated to one head per query head, the mask applied to
 * the scores, softmax over what is left (a row with nothing left is 0).
 * q [2, 6, 8] has 4 heads of 2 on k, v [2, 6, 4] (2 kv heads); the
 * segment ids hold two documents, padding (-1) and a lone position. */
static void attn_reference(const double *q, const double *k, const double *v, const double *seg,
                           bool causal, int64_t W, double *y)
{
	enum { B = 2, T = 6, H = 4, G = 2, hd = 2, D = H * hd, Dk = G * hd };
	double kr[B * T * D], vr[B * T * D]; /* repeated */
	for (int64_t r = 0; r < B * T; r++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t c = 0; c < hd; c++) {
				kr[r * D + h * hd + c] = k[r * Dk + h / (H / G) * hd + c];
				vr[r * D + h * hd + c] = v[r * Dk + h / (H / G) * hd + c];
			}
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < T; i++) {
				double s[T], mx = -INFINITY, sum = 0;
				for (int64_t j = 0; j < T; j++) {
					bool on = (!causal || j <= i) && (!W || (i - j < W && j - i < W)) &&
					          (!seg || (seg[b * T + i] >= 0 && seg[b * T + i] == seg[b * T + j]));
					s[j] = -INFINITY;
					if (!on)
						continue;
					s[j] = 0;
					for (int64_t c = 0; c < hd; c++)
						s[j] += q[(b * T + i) * D + h * hd + c] * kr[(b * T + j) * D + h * hd + c];
					s[j] /= sqrt((double)hd);
					mx = fmax(mx, s[j]);
				}
				for (int64_t j = 0; j < T; j++)
					sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
				for (int64_t c = 0; c < hd; c++) {
					double acc = 0;
					for (int64_t j = 0; j < T; j++)
						if (s[j] != -INFINITY)
							acc += exp(s[j] - mx) / sum * vr[(b * T + j) * D + h * hd + c];
					y[(b * T + i) * D + h * hd + c] = acc;
				}
			}
}

static void test_attention_gqa_masks(void)
{
	static const double seg[12] = {0, 0, 0, 1, 1, 1, 5, 5, -1, 5, 2, -1};
	double q[96], k[48], v[48];
	for (int i = 0; i < 96; i++)
		q[i] = sin(1.7 * i + 0.3) * 1.5;
	for (int i = 0; i < 48; i++) {
		k[i] = cos(0.9 * i - 0.2) * 1.5;
		v[i] = sin(0.37 * i) + 0.1 * i;
	}
	for (int variant = 0; variant < 8; variant++) {
		bool causal = variant & 1, useseg = variant & 2;
		int64_t W = variant & 4 ? 2 : 0;
		IrModule *m = mod();
		int qi = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 6, 8});
		int ki = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 6, 4});
		int vi = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 6, 4});
		int si = leaf(m, IR_OP_INPUT, IR_I32, 2, (int64_t[]){2, 6});
		IrNode *n = opn(m, IR_OP_ATTENTION, useseg ? 4 : 3, (int[]){qi, ki, vi, si});
		*ir_attr_attn_mut(m, n) =
		        (IrAttrAttn){.heads = 4, .causal = causal, .kv_heads = 2, .window = W};
		int a = fin(m, n);
		IrEval e;
		CHECK(ir_eval_init(&e, m));
		ir_eval_set(&e, qi, q);
		ir_eval_set(&e, ki, k);
		ir_eval_set(&e, vi, v);
		ir_eval_set(&e, si, seg);
		CHECK(run(&e));
		double want[96];
		attn_reference(q, k, v, useseg ? seg : NULL, causal, W, want);
		int bad = 0;
		for (int i = 0; i < 96; i++)
			if (!(fabs(e.val[a][i] - want[i]) <= 1e-12) && bad++ < 3)
				fprintf(stderr, "attention variant %d: [%d] = %.15g, want %.15g\n", variant,
				        i, e.val[a][i], want[i]);
		CHECK(bad == 0);
		/* padding queries (segment -1) output exactly 0 */
		for (int c = 0; useseg && c < 8; c++)
			CHECK(e.val[a][8 * 8 + c] == 0 && e.val[a][11 * 8 + c] == 0);
		ir_eval_free(&e);
	}
}

static void test_losses(void)
{
	IrModule *m = mod();
	int lg = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 3, 5});
	int tg = leaf(m, IR_OP_INPUT, IR_I32, 2, (int64_t[]){2, 3});
	int ce = op2(m, IR_OP_CROSS_ENTROPY, lg, tg);
	int l1 = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int t1 = leaf(m, IR_OP_INPUT, IR_I32, 1, (int64_t[]){2});
	int ce1 = op2(m, IR_OP_CROSS_ENTROPY, l1, t1);
	int a = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){3});
	int b = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){3});
	int ms = op2(m, IR_OP_MSE, a, b);
	m->loss = ms;
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	/* uniform logits (any constant) give log V whatever the targets */
	double z[30], t[6] = {0, 1, 2, 3, 4, 0};
	for (int i = 0; i < 30; i++)
		z[i] = 7;
	ir_eval_set(&e, lg, z);
	ir_eval_set(&e, tg, t);
	/* row [1,2,3] target 2: -log softmax = 0.4076...; row [1,2,3] target 0 */
	ir_eval_set(&e, l1, (double[]){1, 2, 3, 1, 2, 3});
	ir_eval_set(&e, t1, (double[]){2, 0});
	ir_eval_set(&e, a, (double[]){1, 2, 3});
	ir_eval_set(&e, b, (double[]){1, 0, 0});
	CHECK(run(&e));
	CHECK_VALS(e.val[ce], log(5.0));
	CHECK_VALS(e.val[ce1], (0.4076059644443806 + 2.4076059644443806) / 2);
	CHECK_VALS(e.val[ms], 13.0 / 3);
	CHECK_NEAR(ir_eval_loss(&e), 13.0 / 3, 1e-12);
	int before = diag.nerr;
	ir_eval_set(&e, t1, (double[]){2, 3});
	CHECK(!run(&e));
	CHECK_EQ_INT(diag.nerr, before + 1);
	ir_eval_free(&e);
}

static void test_dropout_const(void)
{
	enum { N = 20000 };
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){100, 200});
	IrNode *n = opn(m, IR_OP_DROPOUT, 1, &x);
	*ir_attr_dropout_mut(m, n) = (IrAttrDropout){.rate = 0.25, .salt = 7};
	int dr = fin(m, n);
	n = opn(m, IR_OP_DROPOUT, 1, &x);
	int d0 = fin(m, n); /* rate 0 */
	n = opn(m, IR_OP_CONST, 0, NULL);
	ir_attr_scalar_mut(m, n)->value = 2.5;
	int c = fin(m, n);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	double *ones = malloc(sizeof(double) * N);
	for (int i = 0; i < N; i++)
		ones[i] = 1;
	ir_eval_set(&e, x, ones);
	CHECK(ir_eval_run(&e, &diag, 42, 3));
	int kept = 0, wrong = 0;
	for (int i = 0; i < N; i++) {
		double y = e.val[dr][i];
		bool keep = philox_dropout_keep(42, 7, 3, (uint64_t)i, 0.25f);
		kept += keep;
		wrong += keep ? fabs(y - 1 / 0.75) > 1e-12 : y != 0;
	}
	CHECK_EQ_INT(wrong, 0);
	CHECK(kept > N * 0.73 && kept < N * 0.77);
	CHECK_VALS(e.val[d0], 1, 1, 1);
	CHECK_VALS(e.val[c], 2.5);
	/* another step draws another mask; evaluation mode is the identity */
	double first = 0;
	for (int i = 0; i < 64; i++)
		first += e.val[dr][i] * (i + 1);
	CHECK(ir_eval_run(&e, &diag, 42, 4));
	double second = 0;
	for (int i = 0; i < 64; i++)
		second += e.val[dr][i] * (i + 1);
	CHECK(first != second);
	e.training = false;
	CHECK(ir_eval_run(&e, &diag, 42, 4));
	CHECK_VALS(e.val[dr], 1, 1, 1, 1);
	free(ones);
	ir_eval_free(&e);
}

static void test_collective_refused(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 1, (int64_t[]){4});
	IrNode *n = opn(m, IR_OP_ALL_REDUCE, 1, &x);
	n->rank = 1, n->shape[0] = 4; /* set by hand: no mesh here */
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	/* capture the message: it must say why, not just fail */
	Diag d;
	char buf[512] = "";
	FILE *f = tmpfile();
	diag_init(&d, f ? f : devnull);
	CHECK(!ir_eval_run(&e, &d, 0, 0));
	CHECK_EQ_INT(d.nerr, 1);
	if (f) {
		rewind(f);
		size_t k = fread(buf, 1, sizeof buf - 1, f);
		buf[k] = 0;
		fclose(f);
	}
	CHECK(strstr(buf, "collectives cannot be evaluated on the global program") != NULL);
	CHECK(strstr(buf, "all_reduce") != NULL);
	ir_eval_free(&e);
}

static void test_init_params(void)
{
	IrModule *m = mod();
	int w = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){3, 4});
	int g = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){4});
	m->nodes[w]->name = "layer.0.w";
	*ir_attr_init_mut(m, m->nodes[w]) = (IrAttrInit){.kind = IR_INIT_NORMAL, .mean = 0, .std = 0.02};
	ir_attr_init_mut(m, m->nodes[g])->kind = IR_INIT_ONES;
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_init_params(&e, 5);
	CHECK_VALS(e.val[g], 1, 1, 1, 1);
	uint64_t h = hash_fnv1a64("layer.0.w");
	CHECK(e.val[w][0] == philox_init_normal(5, h, 0, 0, 0.02f));
	CHECK(e.val[w][11] == philox_init_normal(5, h, 11, 0, 0.02f));
	CHECK(e.val[w][0] != e.val[w][1]);
	ir_eval_free(&e);
}

/* A tiny MLP: loss = mse(tanh(x @ W1) @ W2, t), x [2, 3], W1 [3, 4],
 * W2 [4, 1].  By hand, with N = 2 outputs and y = h @ W2:
 *   dL/dy = 2 (y - t) / N,   dW2 = h^T dy,
 *   dz = (dy W2^T) * (1 - h^2),  dW1 = x^T dz. */
static void test_finite_difference(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 3});
	int w1 = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){3, 4});
	int w2 = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){4, 1});
	int t = leaf(m, IR_OP_INPUT, IR_F32, 2, (int64_t[]){2, 1});
	int h = op1(m, IR_OP_TANH, op2(m, IR_OP_MATMUL, x, w1));
	int y = op2(m, IR_OP_MATMUL, h, w2);
	m->loss = op2(m, IR_OP_MSE, y, t);
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	double xv[6] = {0.5, -1, 2, 1.5, 0.25, -0.75};
	double w1v[12], w2v[4] = {0.3, -0.2, 0.5, 0.1};
	for (int i = 0; i < 12; i++)
		w1v[i] = 0.1 * (i % 5) - 0.2;
	ir_eval_set(&e, x, xv);
	ir_eval_set(&e, w1, w1v);
	ir_eval_set(&e, w2, w2v);
	ir_eval_set(&e, t, (double[]){1, -1});
	CHECK(run(&e));
	double hv[8], dy[2], dw2[4] = {0}, dw1[12] = {0};
	for (int i = 0; i < 8; i++)
		hv[i] = e.val[h][i];
	for (int i = 0; i < 2; i++)
		dy[i] = (e.val[y][i] - (i ? -1 : 1)); /* 2 (y - t) / 2 */
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 4; j++) {
			dw2[j] += hv[i * 4 + j] * dy[i];
			double dz = dy[i] * w2v[j] * (1 - hv[i * 4 + j] * hv[i * 4 + j]);
			for (int p = 0; p < 3; p++)
				dw1[p * 4 + j] += xv[i * 3 + p] * dz;
		}
	int bad = 0;
	for (int j = 0; j < 4; j++) {
		double fd = ir_eval_loss_fd(&e, &diag, w2, j, 1e-5);
		bad += !(fabs(fd - dw2[j]) < 1e-8);
	}
	for (int j = 0; j < 12; j++) {
		double fd = ir_eval_loss_fd(&e, &diag, w1, j, 1e-5);
		bad += !(fabs(fd - dw1[j]) < 1e-8);
	}
	CHECK_EQ_INT(bad, 0);
	/* the parameter is restored afterwards */
	CHECK(e.val[w1][3] == w1v[3]);
	/* and misuse is a diagnostic: a non-leaf, an element out of range */
	CHECK(isnan(ir_eval_loss_fd(&e, &diag, h, 0, 1e-5)));
	CHECK(isnan(ir_eval_loss_fd(&e, &diag, w2, 4, 1e-5)));
	ir_eval_free(&e);
}

/* A GPT-sized block (d = 64, T = 32, 4 heads) runs and gives finite values:
 * a smoke test for the loop nests at the sizes the oracle tests use. */
static void test_block_smoke(void)
{
	IrModule *m = mod();
	int x = leaf(m, IR_OP_INPUT, IR_F32, 3, (int64_t[]){2, 32, 64});
	int w = leaf(m, IR_OP_PARAM, IR_F32, 2, (int64_t[]){64, 192});
	int g = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){64});
	int b = leaf(m, IR_OP_PARAM, IR_F32, 1, (int64_t[]){64});
	m->nodes[w]->name = "w";
	*ir_attr_init_mut(m, m->nodes[w]) = (IrAttrInit){.kind = IR_INIT_NORMAL, .std = 0.02};
	ir_attr_init_mut(m, m->nodes[g])->kind = IR_INIT_ONES;
	IrNode *n = opn(m, IR_OP_LAYERNORM, 3, (int[]){x, g, b});
	ir_attr_eps_mut(m, n)->eps = 1e-5;
	int qkv = op2(m, IR_OP_MATMUL, fin(m, n), w);
	int q = opi(m, IR_OP_SLICE, qkv, 3, (int64_t[]){2, 0, 64}, false);
	int k = opi(m, IR_OP_SLICE, qkv, 3, (int64_t[]){2, 64, 128}, false);
	int v = opi(m, IR_OP_SLICE, qkv, 3, (int64_t[]){2, 128, 192}, false);
	n = opn(m, IR_OP_ATTENTION, 3, (int[]){q, k, v});
	set_ints(m, n, 2, (int64_t[]){4, 1});
	int a = op1(m, IR_OP_GELU, op2(m, IR_OP_ADD, x, fin(m, n)));
	int s = opi(m, IR_OP_SUM, a, 3, (int64_t[]){0, 1, 2}, false);
	m->loss = s;
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_init_params(&e, 1);
	double *xv = malloc(sizeof(double) * 2 * 32 * 64);
	for (int i = 0; i < 2 * 32 * 64; i++)
		xv[i] = sin(0.37 * i);
	ir_eval_set(&e, x, xv);
	CHECK(run(&e));
	CHECK(isfinite(ir_eval_loss(&e)));
	free(xv);
	ir_eval_free(&e);
}

int main(void)
{
	/* the refused cases print diagnostics; keep the test output quiet */
	devnull = fopen("/dev/null", "w");
	diag_init(&diag, devnull ? devnull : stderr);
	arena_init(&arena);
	test_matmul();
	test_binary();
	test_unary();
	test_cast();
	test_reduce();
	test_softmax();
	test_norms();
	test_embed();
	test_movement();
	test_attention();
	test_attention_gqa_masks();
	test_losses();
	test_dropout_const();
	test_collective_refused();
	test_init_params();
	test_finite_difference();
	test_block_smoke();
	arena_free(&arena);
	if (devnull)
		fclose(devnull);
	return check_report();
}
