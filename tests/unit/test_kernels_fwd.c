/* test_kernels_fwd.c - each forward CPU kernel (codegen/cpu/dtmk_fwd.h)
 * against the f64 reference interpreter (interp/eval.c) on small random inputs.
 *
 * Each case builds a one-op module (leaves typed by hand, the op typed by
 * ir_infer), evaluates it with ir_eval, runs the kernel on the same values
 * in f32 and compares every element to 1e-5 (relative above 1).  Kernels
 * run with a context whose parallel_for splits into uneven ranges, so range
 * bookkeeping bugs show up without the runtime's pool. */
#include <stdlib.h>

#include "check.h"
#include "codegen/emit_common.h"
#include "testlib_attr.h"
#include "codegen/cpu/dtmk_fwd.h"
#include "codegen/cpu/dtmk_rope.h"
#include "codegen/cpu/dtmk_vp.h"
#include "interp/eval.h"
#include "ir/ir.h"
#include "support/philox.h"

static Arena arena;
static Diag diag;

/* Calls fn over [0, n) in ranges of 3 items, in reverse order: results
 * must not depend on how the pool splits the work. */
static int cut_calls;

static void split_for(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	(void)ctx;
	(void)grain;
	cut_calls++;
	for (int64_t hi = n; hi > 0; hi -= 3)
		fn(arg, hi - 3 > 0 ? hi - 3 : 0, hi);
}

static DtmCtx ctx = { .step = 3, .seed = 11, .nthreads = 4, .parallel_for = split_for };

static IrModule *mod(void)
{
	arena_free(&arena);
	arena_init(&arena);
	return ir_module_new(&arena, "t");
}

static int leaf(IrModule *m, IrDtype t, int rank, const int64_t *shape)
{
	IrNode *n = ir_node_new(m, IR_OP_INPUT, NULL, 0, (SrcLoc){0});
	n->dtype = t;
	n->rank = rank;
	for (int i = 0; i < rank; i++)
		n->shape[i] = shape[i];
	n->role = IR_ROLE_INPUT;
	CHECK(ir_infer(m, n, &diag));
	return n->id;
}

static IrNode *node(IrModule *m, IrOp op, int nops, const int *ops)
{
	return ir_node_new(m, op, ops, nops, (SrcLoc){0});
}

typedef void (*Kern)(const DtmCtx *, const DtmkArgs *);

static void fill_tensor(DtmkTensor *t, const IrNode *n, void *p)
{
	memset(t, 0, sizeof *t);
	t->p = p;
	t->dtype = n->dtype == IR_I32 ? DTM_I32 : n->dtype == IR_BF16 ? DTM_BF16 : DTM_F32;
	t->rank = n->rank;
	for (int i = 0; i < n->rank; i++)
		t->shape[i] = n->shape[i];
	t->numel = ir_node_numel(n);
}

/* The coordinates the next run_case gives the interpreter and the kernel
 * (rank-dependent ops: rope over a split sequence), on m's mesh. */
static int64_t case_coords[IR_MAX_AXES];

/* Types `op`, evaluates the module with random leaves (ids in [0, lim)
 * for i32 leaves), runs kern and compares. */
static void run_case(const char *what, IrModule *m, IrNode *op, Kern kern, int lim)
{
	bool typed = ir_infer(m, op, &diag);
	CHECK(typed);
	if (!typed)
		return;
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	memcpy(e.coords, case_coords, sizeof e.coords);
	void *bufs[DTMK_MAX_IN];
	for (int k = 0; k < op->nops; k++) {
		const IrNode *x = m->nodes[op->ops[k]];
		int64_t n = ir_node_numel(x);
		double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
		bufs[k] = malloc(4 * (size_t)(n ? n : 1));
		for (int64_t i = 0; i < n; i++) {
			uint32_t r = philox_rand_u32(5, (uint64_t)(op->id * 8 + k), (uint64_t)i);
			if (x->dtype == IR_I32) {
				v[i] = (double)(r % (uint32_t)lim);
				((int32_t *)bufs[k])[i] = (int32_t)v[i];
			} else if (x->dtype == IR_BF16) { /* bf16 values exactly */
				uint16_t h = dtmk_f32_to_bf16(philox_unit(r) * 4.0f - 2.0f);
				v[i] = dtmk_bf16_to_f32(h);
				((uint16_t *)bufs[k])[i] = h;
			} else {
				/* values of f32 exactly, so both sides start equal */
				v[i] = (float)(philox_unit(r) * 4.0f - 2.0f);
				((float *)bufs[k])[i] = (float)v[i];
			}
		}
		ir_eval_set(&e, x->id, v);
		free(v);
	}
	CHECK(ir_eval_run(&e, &diag, ctx.seed, ctx.step));
	CgKernelAttrs ka;
	cg_kernel_attrs(op, &ka);
	DtmkArgs a = { .nin = op->nops, .nints = ka.nints, .flag = ka.flag,
		       .f = { ka.f[0], ka.f[1] }, .mesh_axes = ka.mesh_axes };
	DtmCtx c = ctx;
	c.coords = case_coords;
	c.mesh_naxes = m->mesh.naxes;
	c.mesh_sizes = m->mesh.sizes;
	for (int k = 0; k < IR_MAX_INTS; k++)
		a.ints[k] = ka.ints[k];
	for (int k = 0; k < op->nops; k++)
		fill_tensor(&a.in[k], m->nodes[op->ops[k]], bufs[k]);
	int64_t n = ir_node_numel(op);
	float *out = calloc((size_t)(n ? n : 1), 4);
	fill_tensor(&a.out, op, out);
	kern(&c, &a);
	/* a bf16 output: the kernel and the interpreter may round a value to
	 * neighbouring bf16 values (2^-7 apart in [1, 2)), and bf16 kernels
	 * round intermediates (attention's probabilities) too */
	double rel = op->dtype == IR_BF16 ? 2e-2 : 1e-5;
	int bad = 0;
	for (int64_t i = 0; i < n; i++) {
		double want = e.val[op->id][i], got = dtmk_load(&a.out, i);
		double tol = rel * (fabs(want) > 1 ? fabs(want) : 1);
		if (!(fabs(got - want) <= tol) && bad++ < 3)
			fprintf(stderr, "%s: element %lld: got %.9g, want %.9g\n", what, (long long)i,
			        got, want);
	}
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %d of %lld elements differ\n", what, bad, (long long)n);
	}
	free(out);
	for (int k = 0; k < op->nops; k++)
		free(bufs[k]);
	ir_eval_free(&e);
}

#define SHAPE(...) (int64_t[]){ __VA_ARGS__ }

static void test_unary(void)
{
	static const struct { IrOp op; Kern k; } t[] = {
		{ IR_OP_NEG, dtmk_neg }, { IR_OP_EXP, dtmk_exp }, { IR_OP_TANH, dtmk_tanh },
		{ IR_OP_RELU, dtmk_relu }, { IR_OP_GELU, dtmk_gelu }, { IR_OP_SILU, dtmk_silu },
		{ IR_OP_SIGMOID, dtmk_sigmoid }, { IR_OP_SCALE, dtmk_scale },
		{ IR_OP_DROPOUT, dtmk_dropout },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		IrModule *m = mod();
		int x = leaf(m, IR_F32, 2, SHAPE(5, 7));
		IrNode *n = node(m, t[i].op, 1, &x);
		test_set_attrs(m, n, t[i].op == IR_OP_DROPOUT, (int64_t[]){77},
		               t[i].op == IR_OP_DROPOUT ? 0.25 : 0.5, false);
		run_case(ir_op_name(t[i].op), m, n, t[i].k, 0);
	}
}

static void test_binary(void)
{
	static const struct { IrOp op; Kern k; } t[] = {
		{ IR_OP_ADD, dtmk_add }, { IR_OP_SUB, dtmk_sub }, { IR_OP_MUL, dtmk_mul },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		IrModule *m = mod();
		int o[2] = { leaf(m, IR_F32, 3, SHAPE(2, 1, 4)), leaf(m, IR_F32, 2, SHAPE(3, 1)) };
		run_case(ir_op_name(t[i].op), m, node(m, t[i].op, 2, o), t[i].k, 0);
	}
}

static void test_reduce(void)
{
	static const struct { IrOp op; Kern k; } t[] = {
		{ IR_OP_SUM, dtmk_sum }, { IR_OP_MEAN, dtmk_mean }, { IR_OP_MAX, dtmk_max },
	};
	static const int64_t axes[][3] = { { 1, 2, -1 }, { 0, 2, -1 }, { 2, -1, -1 } };
	for (size_t i = 0; i < 3; i++)
		for (int c = 0; c < 3; c++)
			for (int keep = 0; keep < 2; keep++) {
				IrModule *m = mod();
				int x = leaf(m, IR_F32, 3, SHAPE(3, 4, 5));
				IrNode *n = node(m, t[i].op, 1, &x);
				IrAttrAxes *ra = ir_attr_axes_mut(m, n);
				for (int k = 0; k < 3 && axes[c][k] >= 0; k++)
					ra->axes[ra->n++] = axes[c][k];
				ra->keepdims = keep;
				run_case(ir_op_name(t[i].op), m, n, t[i].k, 0);
			}
	/* an inner dim of 300 (two chunks of the accumulators); bf16 */
	for (size_t i = 0; i < 3; i++)
		for (int bf = 0; bf < 2; bf++) {
			IrModule *m = mod();
			int x = leaf(m, bf ? IR_BF16 : IR_F32, 3, SHAPE(2, 3, 300));
			IrNode *n = node(m, t[i].op, 1, &x);
			IrAttrAxes *ra = ir_attr_axes_mut(m, n);
			ra->axes[ra->n++] = 1;
			run_case(ir_op_name(t[i].op), m, n, t[i].k, 0);
		}
}

static void test_softmax_norms(void)
{
	for (int ax = 0; ax < 3; ax++)
		for (int lg = 0; lg < 2; lg++) {
			IrModule *m = mod();
			int x = leaf(m, IR_F32, 3, SHAPE(3, 4, 6));
			IrNode *n = node(m, lg ? IR_OP_LOG_SOFTMAX : IR_OP_SOFTMAX, 1, &x);
			ir_attr_axis_mut(m, n)->axis = ax;
			run_case(lg ? "log_softmax" : "softmax", m, n, lg ? dtmk_log_softmax : dtmk_softmax,
			         0);
		}
	IrModule *m = mod();
	int o[3] = { leaf(m, IR_F32, 3, SHAPE(2, 5, 16)), leaf(m, IR_F32, 1, SHAPE(16)),
		     leaf(m, IR_F32, 1, SHAPE(16)) };
	IrNode *n = node(m, IR_OP_LAYERNORM, 3, o);
	ir_attr_eps_mut(m, n)->eps = 1e-5;
	run_case("layernorm", m, n, dtmk_layernorm, 0);
	m = mod();
	o[0] = leaf(m, IR_F32, 2, SHAPE(7, 16));
	o[1] = leaf(m, IR_F32, 1, SHAPE(16));
	n = node(m, IR_OP_RMSNORM, 2, o);
	ir_attr_eps_mut(m, n)->eps = 1e-6;
	run_case("rmsnorm", m, n, dtmk_rmsnorm, 0);
}

/* rope, forward and inverse, on a whole sequence and on rank 1's shard
 * of one split over a mesh axis of 3 (its positions start at 3 * T). */
static void test_rope(void)
{
	for (int k = 0; k < 4; k++) {
		IrModule *m = mod();
		m->mesh = (Mesh){.naxes = 2, .names = {"dp", "cp"}, .sizes = {2, 3}};
		int x = leaf(m, IR_F32, 3, SHAPE(2, 5, 12));
		IrNode *n = node(m, IR_OP_ROPE, 1, &x);
		*ir_attr_rope_mut(m, n) = (IrAttrRope){.heads = 3, .theta = k & 2 ? 500000.0 : 10.0,
		                                       .inverse = k & 1, .axes = k & 2 ? 2u : 0};
		case_coords[0] = 1;
		case_coords[1] = 1;
		run_case(k & 1 ? "rope inverse" : "rope", m, n, dtmk_rope, 0);
		memset(case_coords, 0, sizeof case_coords);
	}
	/* a head of 264 dims: its 132 pairs' angles in two chunks; bf16 */
	for (int bf = 0; bf < 2; bf++) {
		IrModule *m = mod();
		int x = leaf(m, bf ? IR_BF16 : IR_F32, 3, SHAPE(2, 3, 264));
		IrNode *n = node(m, IR_OP_ROPE, 1, &x);
		*ir_attr_rope_mut(m, n) = (IrAttrRope){.heads = 1, .theta = 10000.0};
		run_case(bf ? "rope bf16" : "rope 264", m, n, dtmk_rope, 0);
	}
}

static void test_movement(void)
{
	IrModule *m = mod();
	int o[3] = { leaf(m, IR_F32, 2, SHAPE(11, 6)), leaf(m, IR_I32, 2, SHAPE(3, 4)) };
	run_case("embed", m, node(m, IR_OP_EMBED, 2, o), dtmk_embed, 11);
	m = mod();
	int x = leaf(m, IR_F32, 4, SHAPE(2, 3, 4, 5));
	IrNode *n = node(m, IR_OP_PERMUTE, 1, &x);
	int64_t perm[4] = { 2, 0, 3, 1 };
	ir_attr_perm_mut(m, n)->n = 4;
	memcpy(ir_attr_perm_mut(m, n)->perm, perm, sizeof perm);
	run_case("permute", m, n, dtmk_permute, 0);
	/* bf16 and i32 (copied as bits), a transpose with partial blocks of
	 * rows and columns, and a permute keeping the last dim (rows copied
	 * whole); the context cuts the rows into uneven ranges */
	static const struct {
		IrDtype t;
		int rank;
		int64_t shape[4], perm[4];
	} pc[] = {
		{ IR_BF16, 4, { 2, 3, 4, 5 }, { 2, 0, 3, 1 } },
		{ IR_F32, 2, { 300, 70 }, { 1, 0 } },
		{ IR_BF16, 2, { 300, 70 }, { 1, 0 } },
		{ IR_I32, 2, { 37, 130 }, { 1, 0 } },
		{ IR_BF16, 3, { 5, 7, 33 }, { 1, 0, 2 } },
	};
	for (size_t c = 0; c < sizeof pc / sizeof pc[0]; c++) {
		m = mod();
		x = leaf(m, pc[c].t, pc[c].rank, pc[c].shape);
		n = node(m, IR_OP_PERMUTE, 1, &x);
		ir_attr_perm_mut(m, n)->n = pc[c].rank;
		memcpy(ir_attr_perm_mut(m, n)->perm, pc[c].perm, sizeof(int64_t) * (size_t)pc[c].rank);
		run_case("permute (dtypes, transposes)", m, n, dtmk_permute, 1000);
	}
	m = mod();
	x = leaf(m, IR_F32, 3, SHAPE(2, 3, 4));
	n = node(m, IR_OP_RESHAPE, 1, &x);
	n->dtype = IR_F32;
	n->rank = 2;
	n->shape[0] = 6;
	n->shape[1] = 4;
	run_case("reshape", m, n, dtmk_reshape, 0);
	m = mod();
	o[0] = leaf(m, IR_F32, 3, SHAPE(2, 3, 4));
	o[1] = leaf(m, IR_F32, 3, SHAPE(2, 5, 4));
	o[2] = leaf(m, IR_F32, 3, SHAPE(2, 1, 4));
	n = node(m, IR_OP_CONCAT, 3, o);
	ir_attr_axis_mut(m, n)->axis = 1;
	run_case("concat", m, n, dtmk_concat, 0);
	m = mod();
	x = leaf(m, IR_F32, 3, SHAPE(2, 7, 3));
	n = node(m, IR_OP_SLICE, 1, &x);
	ir_attr_slice_mut(m, n)->axis = 1;
	ir_attr_slice_mut(m, n)->start = 2;
	ir_attr_slice_mut(m, n)->end = 6;
	run_case("slice", m, n, dtmk_slice, 0);
}

static void test_model_ops(void)
{
	for (int causal = 0; causal < 2; causal++) {
		IrModule *m = mod();
		int o[3] = { leaf(m, IR_F32, 3, SHAPE(2, 5, 8)), leaf(m, IR_F32, 3, SHAPE(2, 5, 8)),
			     leaf(m, IR_F32, 3, SHAPE(2, 5, 8)) };
		IrNode *n = node(m, IR_OP_ATTENTION, 3, o);
		ir_attr_attn_mut(m, n)->heads = 2;
		ir_attr_attn_mut(m, n)->causal = causal;
		run_case("attention", m, n, dtmk_attention, 0);
	}
	/* grouped-query and multi-query, windows and segment ids (random in
	 * [0, 3)), odd sizes; 70 positions take the untiled score loop; head
	 * sizes that are multiples of 16 the 4-row blocks */
	static const int64_t gq[][6] = {
	        /* T, heads, kv_heads, hd, causal, window */
	        {19, 4, 2, 3, 1, 0}, {19, 4, 1, 16, 1, 5}, {19, 4, 2, 3, 0, 4},
	        {70, 2, 1, 16, 1, 20}, {70, 3, 3, 5, 0, 0},
	        /* head sizes the 4-row blocks take: 64 (score tiles of 64
	         * keys and a remainder), 32 with a window, T not a multiple of 4 */
	        {70, 2, 2, 64, 1, 0}, {37, 4, 2, 32, 0, 9},
	        /* 48 and 80: the register tiles' 32- and 16-column rests */
	        {33, 2, 1, 48, 1, 0}, {23, 2, 2, 80, 0, 6},
	        /* more keys than a tile of the online softmax (DTMK_ATTN_KT,
	         * 512): causal, a window whose blocks start past the first
	         * tile, a last tile of 18 keys */
	        {600, 2, 1, 16, 1, 0}, {600, 2, 2, 32, 0, 150}, {530, 1, 1, 64, 1, 0},
	};
	/* and all of it in bf16: the AVX512-BF16 products where the CPU has
	 * them and the head sizes are multiples of 16 (stack and heap scratch),
	 * dtmk_load's widening otherwise */
	for (int bf = 0; bf < 2; bf++)
	for (size_t c = 0; c < sizeof gq / sizeof gq[0]; c++)
		for (int useseg = 0; useseg < 2; useseg++) {
			const int64_t *g = gq[c];
			IrDtype t = bf ? IR_BF16 : IR_F32;
			IrModule *m = mod();
			int o[4] = { leaf(m, t, 3, SHAPE(2, g[0], g[1] * g[3])),
				     leaf(m, t, 3, SHAPE(2, g[0], g[2] * g[3])),
				     leaf(m, t, 3, SHAPE(2, g[0], g[2] * g[3])),
				     leaf(m, IR_I32, 2, SHAPE(2, g[0])) };
			IrNode *n = node(m, IR_OP_ATTENTION, 3 + useseg, o);
			*ir_attr_attn_mut(m, n) = (IrAttrAttn){.heads = g[1], .causal = g[4],
			                                        .kv_heads = g[2], .window = g[5]};
			char what[64];
			snprintf(what, sizeof what, "attention gqa case %zu%s%s", c,
			         useseg ? " segments" : "", bf ? " bf16" : "");
			run_case(what, m, n, dtmk_attention, 3);
		}
	IrModule *m = mod();
	int o[2] = { leaf(m, IR_F32, 3, SHAPE(3, 50, 13)), leaf(m, IR_I32, 2, SHAPE(3, 50)) };
	run_case("cross_entropy", m, node(m, IR_OP_CROSS_ENTROPY, 2, o), dtmk_cross_entropy, 13);
	/* bf16 logits: each row widened, then the f32 loop */
	m = mod();
	o[0] = leaf(m, IR_BF16, 3, SHAPE(3, 50, 13));
	o[1] = leaf(m, IR_I32, 2, SHAPE(3, 50));
	run_case("cross_entropy bf16", m, node(m, IR_OP_CROSS_ENTROPY, 2, o), dtmk_cross_entropy, 13);
	m = mod();
	o[0] = leaf(m, IR_F32, 2, SHAPE(4, 6));
	o[1] = leaf(m, IR_F32, 2, SHAPE(4, 6));
	run_case("mse", m, node(m, IR_OP_MSE, 2, o), dtmk_mse, 0);
	/* a matmul whose batch dims broadcast from both sides */
	m = mod();
	o[0] = leaf(m, IR_F32, 4, SHAPE(2, 1, 3, 4));
	o[1] = leaf(m, IR_F32, 4, SHAPE(1, 3, 4, 5));
	run_case("matmul", m, node(m, IR_OP_MATMUL, 2, o), dtmk_matmul, 0);
	m = mod();
	IrNode *c = ir_node_new(m, IR_OP_CONST, NULL, 0, (SrcLoc){0});
	c->dtype = IR_F32;
	ir_attr_scalar_mut(m, c)->value = 2.5;
	run_case("const", m, c, dtmk_const, 0);
}

/* ---- the way a kernel's work is cut changes no bit (issue 13 point 9) ----
 *
 * The pool cuts a kernel's items into as many ranges as there are
 * threads, and the default thread count follows the host's cores, so a
 * kernel whose result depended on the cut would train differently on
 * another machine.  Each hot kernel runs on shapes big enough that it
 * calls parallel_for, serially and cut three ways (ranges of 3 items last
 * first; 2, 3 and 4 contiguous ranges like the pool's, last first); the
 * outputs must be the same bytes. */

static int parts_n;

static void parts_for(const DtmCtx *c, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	(void)c;
	(void)grain;
	cut_calls++;
	for (int i = parts_n - 1; i >= 0; i--) {
		int64_t lo = n * i / parts_n, hi = n * (i + 1) / parts_n;
		if (lo < hi)
			fn(arg, lo, hi);
	}
}

static DtmkTensor ten(DtmDtype t, int rank, const int64_t *shape, uint64_t stream, int lim)
{
	DtmkTensor x = { .dtype = t, .rank = rank, .numel = 1 };
	for (int i = 0; i < rank; i++) {
		x.shape[i] = shape[i];
		x.numel *= shape[i];
	}
	x.p = malloc(4 * (size_t)x.numel);
	for (int64_t i = 0; i < x.numel; i++) {
		if (t == DTM_I32)
			((int32_t *)x.p)[i] =
			        (int32_t)(philox_rand_u32(6, stream, (uint64_t)i) % (uint32_t)lim);
		else
			((float *)x.p)[i] = philox_rand_f32(6, stream, (uint64_t)i) * 4.0f - 2.0f;
	}
	return x;
}

/* Runs kern on a (inputs filled, out allocated) serially and cut; frees. */
static void same_bits(const char *what, Kern kern, DtmkArgs *a)
{
	size_t bytes = 4 * (size_t)a->out.numel;
	char *ref = malloc(bytes);
	DtmCtx serial = ctx;
	serial.parallel_for = NULL;
	memset(a->out.p, 0xff, bytes);
	kern(&serial, a);
	memcpy(ref, a->out.p, bytes);
	static const char *cuts[] = { "by 3 items", "in 2", "in 3", "in 4" };
	for (int cut = 0; cut < 4; cut++) {
		DtmCtx c = ctx;
		c.parallel_for = cut ? parts_for : split_for;
		parts_n = cut + 1;
		cut_calls = 0;
		memset(a->out.p, 0xff, bytes);
		kern(&c, a);
		/* the shapes are big enough that the kernel cuts its work */
		CHECK(cut_calls > 0);
		check_count++;
		if (memcmp(ref, a->out.p, bytes) != 0) {
			check_failures++;
			fprintf(stderr, "%s: the output cut %s is not the serial one\n", what,
			        cuts[cut]);
		}
	}
	free(ref);
	for (int k = 0; k < a->nin; k++)
		free(a->in[k].p);
	free(a->out.p);
}

/* The row kernels of the loss over a vocabulary: max over the last dim,
 * and the vocab-parallel ce_sumexp and ce_bwd_vp, on rows longer than a
 * chunk (DTMK_ROW_CHUNK = 512: 1100 is two chunks and a partial one),
 * f32 and bf16 logits; ce_bwd_vp as rank 1 of a 2-way vocab split (its
 * targets land here and on the other shard, one in the last chunk). */
static void test_vocab_rows(void)
{
	for (int bf = 0; bf < 2; bf++) {
		IrDtype t = bf ? IR_BF16 : IR_F32;
		char what[64];
		IrModule *m = mod();
		int x = leaf(m, t, 2, SHAPE(3, 1100));
		IrNode *n = node(m, IR_OP_MAX, 1, &x);
		IrAttrAxes *ra = ir_attr_axes_mut(m, n);
		ra->axes[ra->n++] = 1;
		snprintf(what, sizeof what, "max over 1100%s", bf ? " bf16" : "");
		run_case(what, m, n, dtmk_max, 0);

		m = mod();
		int o[2] = { leaf(m, t, 2, SHAPE(4, 1100)), leaf(m, IR_F32, 1, SHAPE(4)) };
		snprintf(what, sizeof what, "ce_sumexp%s", bf ? " bf16" : "");
		run_case(what, m, node(m, IR_OP_CE_SUMEXP, 2, o), dtmk_ce_sumexp, 0);

		m = mod();
		m->mesh = (Mesh){.naxes = 1, .names = {"tp"}, .sizes = {2}};
		int b[5] = { leaf(m, IR_F32, 0, NULL), leaf(m, t, 2, SHAPE(6, 1100)),
			     leaf(m, IR_I32, 1, SHAPE(6)), leaf(m, IR_F32, 1, SHAPE(6)),
			     leaf(m, IR_F32, 1, SHAPE(6)) };
		n = node(m, IR_OP_CE_BWD_VP, 5, b);
		ir_attr_coll_mut(m, n)->axes = 1;
		case_coords[0] = 1;
		snprintf(what, sizeof what, "ce_bwd_vp%s", bf ? " bf16" : "");
		run_case(what, m, n, dtmk_ce_bwd_vp, 2200);
		memset(case_coords, 0, sizeof case_coords);
	}
	/* a NaN anywhere in a row is its max (max's rule, `v > acc ||
	 * isnan(v)`), in the first chunk, a middle one or the partial last */
	IrModule *m = mod();
	int x = leaf(m, IR_F32, 2, SHAPE(3, 1100));
	IrNode *n = node(m, IR_OP_MAX, 1, &x);
	ir_attr_axes_mut(m, n)->axes[ir_attr_axes_mut(m, n)->n++] = 1;
	CHECK(ir_infer(m, n, &diag));
	static float in[3 * 1100], out[3];
	for (int i = 0; i < 3 * 1100; i++)
		in[i] = (float)(i % 97) - 50.0f;
	in[3] = in[1100 + 700] = in[2200 + 1099] = NAN;
	DtmkArgs a = { .nin = 1, .nints = 1, .ints = { 1 } };
	fill_tensor(&a.in[0], m->nodes[x], in);
	fill_tensor(&a.out, n, out);
	dtmk_max(&ctx, &a);
	for (int i = 0; i < 3; i++)
		CHECK(isnan(out[i]));
}

static void test_cut_bits(void)
{
	for (int ln = 0; ln < 2; ln++) {
		DtmkArgs a = { .nin = ln ? 3 : 2, .f = { 1e-5 } };
		a.in[0] = ten(DTM_F32, 2, SHAPE(300, 48), 1, 0);
		a.in[1] = ten(DTM_F32, 1, SHAPE(48), 2, 0);
		if (ln)
			a.in[2] = ten(DTM_F32, 1, SHAPE(48), 3, 0);
		a.out = ten(DTM_F32, 2, SHAPE(300, 48), 4, 0);
		same_bits(ln ? "layernorm" : "rmsnorm", ln ? dtmk_layernorm : dtmk_rmsnorm, &a);
	}
	for (int ax = 0; ax < 2; ax++)
		for (int lg = 0; lg < 2; lg++) {
			const int64_t *sh = ax ? SHAPE(40, 200) : SHAPE(200, 40);
			DtmkArgs a = { .nin = 1, .nints = 1, .ints = { ax ? 0 : 1 } };
			a.in[0] = ten(DTM_F32, 2, sh, 5, 0);
			a.out = ten(DTM_F32, 2, sh, 6, 0);
			same_bits(lg ? "log_softmax" : "softmax",
			          lg ? dtmk_log_softmax : dtmk_softmax, &a);
		}
	for (int causal = 0; causal < 2; causal++) {
		DtmkArgs a = { .nin = 3, .nints = 2, .ints = { 3, causal } };
		for (int k = 0; k < 3; k++)
			a.in[k] = ten(DTM_F32, 3, SHAPE(3, 20, 24), 7 + (uint64_t)k, 0);
		a.out = ten(DTM_F32, 3, SHAPE(3, 20, 24), 10, 0);
		same_bits("attention", dtmk_attention, &a);
	}
	DtmkArgs a = { .nin = 2 };
	a.in[0] = ten(DTM_F32, 3, SHAPE(5, 70, 13), 11, 0);
	a.in[1] = ten(DTM_I32, 2, SHAPE(5, 70), 12, 13);
	a.out = ten(DTM_F32, 0, NULL, 13, 0);
	same_bits("cross_entropy", dtmk_cross_entropy, &a);
}

int main(void)
{
	diag_init(&diag, stderr);
	arena_init(&arena);
	test_unary();
	test_binary();
	test_reduce();
	test_softmax_norms();
	test_movement();
	test_rope();
	test_model_ops();
	test_vocab_rows();
	test_cut_bits();
	arena_free(&arena);
	return check_report();
}
