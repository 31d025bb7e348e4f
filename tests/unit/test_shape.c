/* test_shape.c - ir_infer: each op's rule with good and bad inputs, and the
 * exact wording of the messages users see most. */
#include "ir/ir.h"
#include "check.h"

#include <stdlib.h>

static Arena arena;
static IrModule *M;
static char msg[512];

static void reset(void)
{
	arena_free(&arena);
	arena_init(&arena);
	M = ir_module_new(&arena, "t");
	M->mesh.naxes = 2;
	M->mesh.names[0] = "dp";
	M->mesh.sizes[0] = 2;
	M->mesh.names[1] = "tp";
	M->mesh.sizes[1] = 4;
}

/* An input of the given type: L(IR_F32, 8, 32) */
static int leaf(IrDtype t, int rank, const int64_t *dims)
{
	IrNode *n = ir_node_new(M, IR_OP_INPUT, NULL, 0, (SrcLoc){0});
	n->dtype = t;
	n->rank = rank;
	for (int i = 0; i < rank; i++)
		n->shape[i] = dims[i];
	if (!ir_infer_msg(M, n, msg, sizeof msg))
		fprintf(stderr, "leaf: %s\n", msg);
	return n->id;
}
#define L(t, ...) \
	leaf(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static IrNode *mk(IrOp op, int nops, int a, int b, int c)
{
	int ops[3] = {a, b, c};
	return ir_node_new(M, op, ops, nops, (SrcLoc){0});
}

/* Runs inference; returns success and leaves the message in msg. */
static bool run(IrNode *n)
{
	return ir_infer_msg(M, n, msg, sizeof msg);
}

static bool is_shape(const IrNode *n, IrDtype t, int rank, const int64_t *s)
{
	if (n->dtype != t || n->rank != rank)
		return false;
	for (int i = 0; i < rank; i++)
		if (n->shape[i] != s[i])
			return false;
	return true;
}
#define SHAPE(n, t, ...) \
	is_shape(n, t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static void test_matmul(void)
{
	reset();
	int a = L(IR_F32, 8, 32, 64), b = L(IR_F32, 64, 16), c = L(IR_F32, 32, 16);
	IrNode *n = mk(IR_OP_MATMUL, 2, a, b, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 8, 32, 16));
	n = mk(IR_OP_MATMUL, 2, a, c, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: inner dimensions differ: [8, 32, 64] @ [32, 16] (64 vs 32)");
	/* batch broadcast: [1, 4, 2, 3] @ [5, 1, 3, 7] -> [5, 4, 2, 7] */
	int x = L(IR_F32, 1, 4, 2, 3), y = L(IR_F32, 5, 1, 3, 7);
	n = mk(IR_OP_MATMUL, 2, x, y, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 5, 4, 2, 7));
	int z = L(IR_F32, 3, 4, 3, 7);
	n = mk(IR_OP_MATMUL, 2, x, z, 0);
	CHECK(run(n)); /* 1 vs 3 and 4 vs 4 */
	int w = L(IR_F32, 3, 5, 3, 7);
	n = mk(IR_OP_MATMUL, 2, x, w, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: batch dimensions do not broadcast: [1, 4, 2, 3] @ [3, 5, 3, 7] (4 vs 5)");
	int v = L(IR_F32, 64);
	n = mk(IR_OP_MATMUL, 2, a, v, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: both operands need rank >= 2 (use reshape): [8, 32, 64] @ [64]");
	int h = L(IR_BF16, 64, 16);
	n = mk(IR_OP_MATMUL, 2, a, h, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: operand dtypes differ: f32[8, 32, 64] (%0) vs bf16[64, 16] (%14)");
	int ids = L(IR_I32, 4, 4);
	n = mk(IR_OP_MATMUL, 2, ids, ids, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: the first operand (%16) must be a float tensor (f32, bf16 or f16), "
	             "got i32[4, 4]");
	/* wrong arity and forward references */
	n = mk(IR_OP_MATMUL, 1, a, 0, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: expects 2 operands, got 1");
	n = mk(IR_OP_MATMUL, 2, a, 999, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: operand %999 is not defined before %19");
	/* matmul_wgrad: x^T dy over the leading dims, f32 whatever the
	 * operands (ops.def: a 16-bit weight's gradient is not rounded) */
	int xb = L(IR_BF16, 8, 32, 64), dyb = L(IR_BF16, 8, 32, 16), dyh = L(IR_F16, 8, 32, 16);
	n = mk(IR_OP_MATMUL_WGRAD, 2, xb, dyb, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 64, 16));
	n = mk(IR_OP_MATMUL_WGRAD, 2, a, c, 0);
	CHECK(!run(n)); /* [8, 32, 64] and [32, 16]: leading dims differ */
	n = mk(IR_OP_MATMUL_WGRAD, 2, xb, dyh, 0);
	CHECK(!run(n)); /* bf16 with f16 */
	/* sum_to and the norms' gamma gradients are f32 for 16-bit operands
	 * too; f32 stays f32 */
	n = mk(IR_OP_SUM_TO, 1, dyb, 0, 0);
	n->rank = 1;
	n->shape[0] = 16;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 16));
	n = mk(IR_OP_SUM_TO, 1, dyh, 0, 0);
	n->rank = 2;
	n->shape[0] = 1, n->shape[1] = 16;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 1, 16));
	IrOp gam[2] = {IR_OP_LAYERNORM_BWD_GAMMA, IR_OP_RMSNORM_BWD_GAMMA};
	int xf = L(IR_F32, 8, 32, 16);
	for (int i = 0; i < 2; i++) {
		n = mk(gam[i], 2, dyb, dyb, 0);
		ir_attr_eps_mut(M, n)->eps = 1e-5;
		CHECK(run(n));
		CHECK(SHAPE(n, IR_F32, 16));
		n = mk(gam[i], 2, xf, xf, 0);
		ir_attr_eps_mut(M, n)->eps = 1e-5;
		CHECK(run(n));
		CHECK(SHAPE(n, IR_F32, 16));
	}
	/* so is embed's table gradient, whole and vocab-parallel: [V, D] of
	 * dy [8, 32, 16] at ids [8, 32] */
	int eids = L(IR_I32, 8, 32);
	for (int vp = 0; vp < 2; vp++)
		for (int k = 0; k < 3; k++) {
			int dy = k == 0 ? dyb : k == 1 ? dyh : L(IR_F32, 8, 32, 16);
			n = mk(vp ? IR_OP_EMBED_BWD_VP : IR_OP_EMBED_BWD, 2, dy, eids, 0);
			n->dtype = M->nodes[dy]->dtype; /* the table's */
			n->rank = 2;
			n->shape[0] = 50, n->shape[1] = 16;
			if (vp)
				ir_attr_coll_mut(M, n)->axes = 2;
			CHECK(run(n));
			CHECK(SHAPE(n, IR_F32, 50, 16));
		}
}

static void test_elementwise(void)
{
	reset();
	int a = L(IR_F32, 8, 1, 64), b = L(IR_F32, 32, 1), c = L(IR_F32, 8, 3, 64);
	IrNode *n = mk(IR_OP_ADD, 2, a, b, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 8, 32, 64));
	n = mk(IR_OP_MUL, 2, b, c, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "mul: shapes do not broadcast: [32, 1] and [8, 3, 64] (dim 1: 32 vs 3)");
	IrNode *k = ir_node_new(M, IR_OP_CONST, NULL, 0, (SrcLoc){0});
	ir_attr_scalar_mut(M, k)->value = 2.0;
	CHECK(run(k));
	CHECK(SHAPE(k, IR_F32, 0) || (k->rank == 0 && k->dtype == IR_F32));
	n = mk(IR_OP_DIV, 2, a, k->id, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 8, 1, 64));
	IrOp unary[] = {IR_OP_NEG, IR_OP_EXP, IR_OP_LOG, IR_OP_SQRT, IR_OP_RSQRT, IR_OP_TANH,
	                IR_OP_RELU, IR_OP_GELU, IR_OP_SILU, IR_OP_SIGMOID, IR_OP_SCALE};
	for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
		n = mk(unary[i], 1, c, 0, 0);
		CHECK(run(n));
		CHECK(SHAPE(n, IR_F32, 8, 3, 64));
	}
	int ids = L(IR_I32, 3);
	n = mk(IR_OP_EXP, 1, ids, 0, 0);
	CHECK(!run(n));
	n = mk(IR_OP_CAST, 1, c, 0, 0);
	n->dtype = IR_BF16;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_BF16, 8, 3, 64));
	n = mk(IR_OP_DROPOUT, 1, c, 0, 0);
	ir_attr_dropout_mut(M, n)->rate = 0.1;
	CHECK(run(n));
	ir_attr_dropout_mut(M, n)->rate = 1.0;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "dropout: rate must be in [0, 1), got 1");
	/* const: a scalar; its dtype may be set by the caller */
	k->rank = 1;
	k->shape[0] = 2;
	CHECK(!run(k));
	CHECK_EQ_STR(msg, "const: a constant is a scalar (shape []), got f32[2]");
}

static void test_reduce_norm(void)
{
	reset();
	int x = L(IR_F32, 4, 5, 6);
	IrNode *n = mk(IR_OP_SUM, 1, x, 0, 0);
	ir_attr_axes_mut(M, n)->n = 2;
	ir_attr_axes_mut(M, n)->axes[0] = 0;
	ir_attr_axes_mut(M, n)->axes[1] = 2;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 5));
	ir_attr_axes_mut(M, n)->keepdims = true;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 1, 5, 1));
	n = mk(IR_OP_MEAN, 1, x, 0, 0);
	ir_attr_axes_mut(M, n)->n = 3;
	ir_attr_axes_mut(M, n)->axes[0] = 0;
	ir_attr_axes_mut(M, n)->axes[1] = 1;
	ir_attr_axes_mut(M, n)->axes[2] = 2;
	CHECK(run(n));
	CHECK(n->rank == 0);
	n = mk(IR_OP_MAX, 1, x, 0, 0);
	ir_attr_axes_mut(M, n)->n = 1;
	ir_attr_axes_mut(M, n)->axes[0] = 3;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "max: axis 3 is out of range for [4, 5, 6] (rank 3)");
	ir_attr_axes_mut(M, n)->n = 2;
	ir_attr_axes_mut(M, n)->axes[0] = 1;
	ir_attr_axes_mut(M, n)->axes[1] = 1;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "max: axes must be sorted and unique, got 1 after 1");

	n = mk(IR_OP_SOFTMAX, 1, x, 0, 0);
	ir_attr_axis_mut(M, n)->axis = 2;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 4, 5, 6));
	n = mk(IR_OP_LOG_SOFTMAX, 1, x, 0, 0);
	ir_attr_axis_mut(M, n)->axis = -1;
	CHECK(!run(n));

	int g = L(IR_F32, 6), b = L(IR_F32, 6), bad = L(IR_F32, 5);
	n = mk(IR_OP_LAYERNORM, 3, x, g, b);
	ir_attr_eps_mut(M, n)->eps = 1e-5;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 4, 5, 6));
	n = mk(IR_OP_LAYERNORM, 3, x, g, bad);
	ir_attr_eps_mut(M, n)->eps = 1e-5;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "layernorm: beta (%8) must be [6] (the last dim of [4, 5, 6]), got [5]");
	n = mk(IR_OP_RMSNORM, 2, x, g, 0);
	ir_attr_eps_mut(M, n)->eps = 1e-6;
	CHECK(run(n));
	n = mk(IR_OP_RMSNORM, 2, x, bad, 0);
	CHECK(!run(n));
	n = mk(IR_OP_RMSNORM, 2, x, g, 0);
	ir_attr_eps_mut(M, n)->eps = -1;
	CHECK(!run(n));
}

static void test_data_movement(void)
{
	reset();
	int tab = L(IR_F32, 256, 64), ids = L(IR_I32, 8, 32), fids = L(IR_F32, 8, 32);
	IrNode *n = mk(IR_OP_EMBED, 2, tab, ids, 0);
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 8, 32, 64));
	n = mk(IR_OP_EMBED, 2, tab, fids, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "embed: the ids (%2) must be i32, got f32[8, 32]");

	int x = L(IR_F32, 2, 3, 4);
	n = mk(IR_OP_PERMUTE, 1, x, 0, 0);
	ir_attr_perm_mut(M, n)->n = 3;
	ir_attr_perm_mut(M, n)->perm[0] = 2;
	ir_attr_perm_mut(M, n)->perm[1] = 0;
	ir_attr_perm_mut(M, n)->perm[2] = 1;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 4, 2, 3));
	ir_attr_perm_mut(M, n)->perm[2] = 0;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "permute: not a permutation of 0..2: entry 2 is 0");
	ir_attr_perm_mut(M, n)->n = 2;
	CHECK(!run(n));

	n = mk(IR_OP_RESHAPE, 1, x, 0, 0);
	n->rank = 2;
	n->shape[0] = 6;
	n->shape[1] = 4;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 6, 4));
	n->shape[1] = 5;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "reshape: element counts differ: [2, 3, 4] (24) to [6, 5] (30)");

	int y = L(IR_F32, 2, 5, 4), z = L(IR_F32, 2, 5, 3);
	int ops[3] = {x, y, x};
	n = ir_node_new(M, IR_OP_CONCAT, ops, 3, (SrcLoc){0});
	ir_attr_axis_mut(M, n)->axis = 1;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 2, 11, 4));
	ops[1] = z;
	n = ir_node_new(M, IR_OP_CONCAT, ops, 3, (SrcLoc){0});
	ir_attr_axis_mut(M, n)->axis = 1;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "concat: dim 2 differs: [2, 3, 4] (%5) and [2, 5, 3] (%9) (only axis 1 may differ)");

	n = mk(IR_OP_SLICE, 1, x, 0, 0);
	ir_attr_slice_mut(M, n)->axis = 2;
	ir_attr_slice_mut(M, n)->start = 1;
	ir_attr_slice_mut(M, n)->end = 3;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 2, 3, 2));
	ir_attr_slice_mut(M, n)->end = 5;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "slice: range 1:5 is not within 0..4 (dim 2 of [2, 3, 4])");
	ir_attr_slice_mut(M, n)->start = 4;
	ir_attr_slice_mut(M, n)->end = 4;
	CHECK(run(n)); /* empty slices are allowed */
	CHECK(SHAPE(n, IR_F32, 2, 3, 0));
}

static void test_model_ops(void)
{
	reset();
	int q = L(IR_F32, 2, 16, 64), k = L(IR_F32, 2, 16, 64), v = L(IR_F32, 2, 8, 64);
	IrNode *n = mk(IR_OP_ATTENTION, 3, q, k, k);
	ir_attr_attn_mut(M, n)->heads = 4;
	ir_attr_attn_mut(M, n)->causal = 1;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 2, 16, 64));
	ir_attr_attn_mut(M, n)->heads = 5;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "attention: dim 64 is not divisible by heads = 5 (q is [2, 16, 64])");
	n = mk(IR_OP_ATTENTION, 3, q, k, v);
	ir_attr_attn_mut(M, n)->heads = 4;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "attention: q and v shapes differ: [2, 16, 64] vs [2, 8, 64]");

	int lg = L(IR_F32, 8, 32, 256), tg = L(IR_I32, 8, 32), tb = L(IR_I32, 8, 31);
	n = mk(IR_OP_CROSS_ENTROPY, 2, lg, tg, 0);
	CHECK(run(n));
	CHECK(n->rank == 0 && n->dtype == IR_F32);
	n = mk(IR_OP_CROSS_ENTROPY, 2, lg, tb, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "cross_entropy: targets [8, 31] must match the leading dims of logits [8, 32, 256]");
	n = mk(IR_OP_CROSS_ENTROPY, 2, lg, lg, 0);
	CHECK(!run(n));

	int a = L(IR_F32, 4, 8), b = L(IR_F32, 4, 8), c = L(IR_F32, 8, 4);
	n = mk(IR_OP_MSE, 2, a, b, 0);
	CHECK(run(n));
	CHECK(n->rank == 0);
	n = mk(IR_OP_MSE, 2, a, c, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "mse: operand shapes differ: [4, 8] vs [8, 4]");
}

static void test_collectives(void)
{
	reset(); /* mesh (dp = 2, tp = 4) */
	int x = L(IR_F32, 8, 6);
	IrNode *n = mk(IR_OP_ALL_GATHER, 1, x, 0, 0);
	ir_attr_coll_mut(M, n)->axes = 3; /* dp and tp: 8 ranks */
	ir_attr_coll_mut(M, n)->n = 1;
	ir_attr_coll_mut(M, n)->args[0] = 1;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 8, 48));
	n = mk(IR_OP_REDUCE_SCATTER, 1, x, 0, 0);
	ir_attr_coll_mut(M, n)->axes = 2;
	ir_attr_coll_mut(M, n)->n = 1;
	ir_attr_coll_mut(M, n)->args[0] = 0;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 2, 6));
	ir_attr_coll_mut(M, n)->args[0] = 1;
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "reduce_scatter: dim 1 of [8, 6] (6) is not divisible by the group size 4");
	n = mk(IR_OP_ALL_TO_ALL, 1, x, 0, 0);
	ir_attr_coll_mut(M, n)->axes = 1;
	ir_attr_coll_mut(M, n)->n = 2;
	ir_attr_coll_mut(M, n)->args[0] = 0;
	ir_attr_coll_mut(M, n)->args[1] = 1;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 4, 12));
	IrOp keep[] = {IR_OP_ALL_REDUCE, IR_OP_BROADCAST, IR_OP_SEND};
	for (int i = 0; i < 3; i++) {
		n = mk(keep[i], 1, x, 0, 0);
		ir_attr_coll_mut(M, n)->axes = 2;
		CHECK(run(n));
		CHECK(SHAPE(n, IR_F32, 8, 6));
	}
	ir_attr_coll_mut(M, n)->axes = 4; /* axis 2 of a 2-axis mesh */
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "send: names mesh axis 2 but the mesh has 2 axes");
	ir_attr_coll_mut(M, n)->axes = 0;
	CHECK(!run(n));
	n = mk(IR_OP_RECV, 0, 0, 0, 0);
	ir_attr_coll_mut(M, n)->axes = 1;
	n->rank = 2;
	n->shape[0] = 3;
	n->shape[1] = 3;
	CHECK(run(n));
	CHECK(SHAPE(n, IR_F32, 3, 3));
}

static void test_limits(void)
{
	reset();
	int a = L(IR_F32, (int64_t)1 << 30, 1), b = L(IR_F32, 1, (int64_t)1 << 30);
	IrNode *n = mk(IR_OP_MATMUL, 2, a, b, 0);
	CHECK(!run(n));
	CHECK_EQ_STR(msg, "matmul: tensor too large: [1073741824, 1073741824] (more than 2^48 elements)");
	IrNode *p = ir_node_new(M, IR_OP_PARAM, NULL, 0, (SrcLoc){0});
	p->rank = 3;
	p->shape[0] = INT64_MAX;
	p->shape[1] = INT64_MAX;
	p->shape[2] = 0;
	CHECK(!run(p));
	p->shape[0] = -1;
	CHECK(!run(p));
	p->rank = 9;
	CHECK(!run(p));
	p->rank = 1;
	p->shape[0] = 4;
	p->dtype = IR_I32;
	CHECK(!run(p)); /* params are floats */
	int big = L(IR_F32, (int64_t)1 << 47, 1);
	n = mk(IR_OP_ALL_GATHER, 1, big, 0, 0);
	ir_attr_coll_mut(M, n)->axes = 3;
	ir_attr_coll_mut(M, n)->n = 1;
	ir_attr_coll_mut(M, n)->args[0] = 0;
	CHECK(!run(n));
	CHECK(ir_node_numel(M->nodes[a]) == (int64_t)1 << 30);

	/* through a Diag: the message lands at the node's location */
	reset();
	int x = L(IR_F32, 8, 32, 64), y = L(IR_F32, 32, 16);
	SrcFile f = {"m.dtm", "loss = x @ y\n", 13};
	IrNode *mm = mk(IR_OP_MATMUL, 2, x, y, 0);
	mm->loc = (SrcLoc){"m.dtm", 1, 8, 13};
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, out);
	diag_add_file(&d, &f);
	CHECK(!ir_infer(M, mm, &d));
	fclose(out);
	CHECK_EQ_INT(d.nerr, 1);
	CHECK_EQ_STR(buf, "m.dtm:1:8: error: matmul: inner dimensions differ: [8, 32, 64] @ [32, 16] "
	             "(64 vs 32)\n  loss = x @ y\n         ^~~~~\n");
	free(buf);
}

int main(void)
{
	arena_init(&arena);
	test_matmul();
	test_elementwise();
	test_reduce_norm();
	test_data_movement();
	test_model_ops();
	test_collectives();
	test_limits();
	arena_free(&arena);
	return check_report();
}
