/* test_irtext.c - the textual IR: print -> parse -> print is byte-identical
 * for a module holding every op and attribute kind; the verifier accepts it
 * and names what a broken module breaks; bad and random text never crashes
 * the parser and gets a located message. */
#include "ir/ir.h"
#include "check.h"

#include <stdlib.h>

static Arena arena;
static IrModule *M;
static Diag D;

static char *print_str(const IrModule *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ir_print(f, m);
	fclose(f);
	return buf;
}

/* Parses text; the messages (if any) go to *errs (caller frees). */
static IrModule *parse_str(Arena *a, const char *text, size_t len, char **errs, int *nerr)
{
	size_t elen = 0;
	FILE *f = open_memstream(errs, &elen);
	Diag d;
	diag_init(&d, f);
	SrcFile src = {"t.ir", text, len};
	IrModule *m = ir_parse(a, &d, &src);
	fclose(f);
	if (nerr)
		*nerr = d.nerr;
	return m;
}

static SrcLoc at(int line, int col, int end)
{
	return (SrcLoc){"models/\"all\".dtm", line, col, end};
}

static IrNode *add(IrOp op, int nops, const int *ops)
{
	IrNode *n = ir_node_new(M, op, ops, nops, at(M->nnodes + 1, 3, 9));
	return n;
}

static int done(IrNode *n)
{
	if (!ir_infer(M, n, &D))
		fprintf(stderr, "building %%%d (%s) failed\n", n->id, ir_op_name(n->op));
	return n->id;
}

static int leaf(IrOp op, IrDtype t, const char *name, int rank, const int64_t *dims)
{
	IrNode *n = add(op, 0, NULL);
	n->dtype = t;
	n->rank = rank;
	memcpy(n->shape, dims, (size_t)rank * sizeof *dims);
	n->name = name;
	n->role = op == IR_OP_PARAM ? IR_ROLE_PARAM : IR_ROLE_INPUT;
	return done(n);
}
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static int un(IrOp op, int x)
{
	return done(add(op, 1, &x));
}

static int bin(IrOp op, int x, int y)
{
	int o[2] = {x, y};
	return done(add(op, 2, o));
}

/* mesh (pp = 1, dp = 2, tp = 2); B = 4, T = 8, D = 16, V = 32 */
static void build(void)
{
	M = ir_module_new(&arena, "all ops");
	M->after = "partition"; /* it holds every op, the per-rank ones too */
	M->mesh.naxes = 3;
	M->mesh.names[0] = "pp";
	M->mesh.sizes[0] = 1;
	M->mesh.names[1] = "dp";
	M->mesh.sizes[1] = 2;
	M->mesh.names[2] = "tp";
	M->mesh.sizes[2] = 2;
	IrTrain *t = &M->train;
	t->optimizer = IR_OPTIMIZER_SGD;
	t->lr = 0.1;
	t->beta2 = 0.95;
	t->weight_decay = 1e-300;
	t->clip = 1.0 / 3.0;
	t->momentum = 0.9;
	t->nesterov = true;
	t->lr_schedule = IR_LR_COSINE;
	t->warmup = 20;
	t->min_lr = 1e-4;
	t->zero = 3;
	t->zero_axes = 1u << 1;
	t->reshard_after_forward = false;
	t->microbatches = 8;
	t->schedule = IR_PIPE_INTERLEAVED;
	t->virtual_stages = 2;
	t->precision = IR_BF16;
	t->reduce_dtype = IR_F32;
	t->master_dtype = IR_BF16;
	t->steps = 300;
	t->data = NULL;
	t->sequence_parallel = true;
	t->recompute = true;
	t->bucket_bytes = 1 << 20;
	t->prefetch = 2;
	t->seed = 42;
	t->loss_scale = IR_LOSS_SCALE_FIXED;
	t->init_scale = 1024;
	t->growth_factor = 4;
	t->backoff_factor = 0.25;
	t->growth_interval = 50;
	t->context_parallel = IR_CP_RING;
	t->recompute_scope = IR_RECOMPUTE_LAYER;

	int tok = leaf(IR_OP_INPUT, IR_I32, "tokens", DIMS(4, 8));
	IrNode *n = M->nodes[tok];
	Placement pl = {.known = true, .ndims = 2};
	pl.naxes[0] = 1;
	pl.axes[0][0] = 1;
	ir_place_set(M, n, &pl);
	int wte = leaf(IR_OP_PARAM, IR_F32, "wte", DIMS(32, 16));
	*ir_attr_init_mut(M, M->nodes[wte]) = (IrAttrInit){.kind = IR_INIT_NORMAL, .std = 0.02};
	int g = leaf(IR_OP_PARAM, IR_F32, "layer.0.ln1", DIMS(16));
	ir_attr_init_mut(M, M->nodes[g])->kind = IR_INIT_ONES;
	ir_set_stage(M, M->nodes[g], 0);
	int b = leaf(IR_OP_PARAM, IR_F32, "weird \"name\"\\\n\t\x01", DIMS(16));
	*ir_attr_init_mut(M, M->nodes[b]) = (IrAttrInit){.kind = IR_INIT_UNIFORM, .lo = -0.5, .hi = 0.5};
	int w = leaf(IR_OP_PARAM, IR_F32, "w", DIMS(16, 16));
	ir_attr_init_mut(M, M->nodes[w])->kind = IR_INIT_ZEROS;
	M->nodes[w]->loc.file = NULL; /* no location */
	int c = done(add(IR_OP_CONST, 0, NULL));
	ir_attr_scalar_mut(M, M->nodes[c])->value = 0.125;

	int x = bin(IR_OP_EMBED, wte, tok);                    /* [4, 8, 16] */
	x = bin(IR_OP_ADD, x, g);
	x = bin(IR_OP_SUB, x, b);
	x = bin(IR_OP_MUL, x, c);
	x = bin(IR_OP_DIV, x, g);
	IrOp unary[] = {IR_OP_NEG, IR_OP_EXP, IR_OP_LOG, IR_OP_SQRT, IR_OP_RSQRT, IR_OP_TANH,
	                IR_OP_RELU, IR_OP_GELU, IR_OP_SILU, IR_OP_SIGMOID};
	for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
		x = un(unary[i], x);
	n = add(IR_OP_SCALE, 1, &x);
	ir_attr_scalar_mut(M, n)->value = -2.5e-7;
	x = done(n);
	n = add(IR_OP_CAST, 1, &x);
	n->dtype = IR_BF16;
	int xb = done(n);
	n = add(IR_OP_CAST, 1, &xb);
	n->dtype = IR_F32;
	x = done(n);
	int o3[3] = {x, g, b};
	n = add(IR_OP_LAYERNORM, 3, o3);
	ir_attr_eps_mut(M, n)->eps = 1e-5;
	int h = done(n);
	n = add(IR_OP_RMSNORM, 2, o3);
	ir_attr_eps_mut(M, n)->eps = 1e-6;
	h = bin(IR_OP_ADD, h, done(n));
	int q = bin(IR_OP_MATMUL, h, w);                     /* [4, 8, 16] */
	pl = (Placement){.known = true, .ndims = 3, .partial = 1u << 1, .partial_op = IR_RED_MAX};
	pl.naxes[2] = 1;
	pl.axes[2][0] = 2;
	ir_place_set(M, M->nodes[q], &pl);
	M->nodes[q]->name = "q";
	int a3[3] = {q, h, h};
	n = add(IR_OP_ATTENTION, 3, a3);
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4, .causal = 1};
	int att = done(n);
	n = add(IR_OP_ROPE, 1, &att);
	*ir_attr_rope_mut(M, n) = (IrAttrRope){.heads = 4, .theta = 500000.0};
	att = done(n);
	n = add(IR_OP_ROPE, 1, &att); /* a backward's, on a sequence split over axis 1 */
	*ir_attr_rope_mut(M, n) =
	        (IrAttrRope){.heads = 2, .theta = 1e4, .inverse = true, .axes = 1u << 1};
	att = done(n);
	n = add(IR_OP_DROPOUT, 1, &att);
	*ir_attr_dropout_mut(M, n) = (IrAttrDropout){.rate = 0.1, .salt = 7};
	att = done(n);
	n = add(IR_OP_DROPOUT, 1, &att); /* micro-batch 1 of 3's copy (ir/dropout.c) */
	*ir_attr_dropout_mut(M, n) = (IrAttrDropout){
		.rate = 0.1, .salt = 7, .has_mb = true, .mbs = 3, .mb = 1, .bdim = 1, .binner = 2};
	att = done(n);
	n = add(IR_OP_SOFTMAX, 1, &att);
	ir_attr_axis_mut(M, n)->axis = 2;
	int sm = done(n);
	n = add(IR_OP_LOG_SOFTMAX, 1, &sm);
	ir_attr_axis_mut(M, n)->axis = 1;
	sm = done(n);
	n = add(IR_OP_SUM, 1, &sm);
	*ir_attr_axes_mut(M, n) = (IrAttrAxes){.n = 2, .axes = {0, 2}, .keepdims = true};
	done(n);
	n = add(IR_OP_MEAN, 1, &sm);
	*ir_attr_axes_mut(M, n) = (IrAttrAxes){.n = 1, .axes = {1}};
	done(n);
	n = add(IR_OP_MAX, 1, &sm);
	done(n);
	/* routing: topk, gather by value and by row, scatter_add, one_hot,
	 * moe_slot and moe_token over sm [4, 8, 16] */
	n = add(IR_OP_TOPK, 1, &sm);
	*ir_attr_route_mut(M, n) = (IrAttrRoute){.k = 3};
	int tk = done(n);                                    /* i32[4, 8, 3] */
	int gs[2] = {sm, tk};
	int gv = done(add(IR_OP_GATHER, 2, gs));             /* [4, 8, 3] */
	int sa[2] = {gv, tk};
	n = add(IR_OP_SCATTER_ADD, 2, sa);
	n->rank = 3;
	n->shape[0] = 4;
	n->shape[1] = 8;
	n->shape[2] = 16;
	done(n);
	n = add(IR_OP_ONE_HOT, 1, &tk);
	*ir_attr_route_mut(M, n) = (IrAttrRoute){.n = 16};
	done(n);
	n = add(IR_OP_MOE_SLOT, 1, &tk);
	*ir_attr_route_mut(M, n) = (IrAttrRoute){.n = 16, .capacity = 2};
	done(n);
	n = add(IR_OP_MOE_TOKEN, 1, &tk);
	*ir_attr_route_mut(M, n) = (IrAttrRoute){.n = 16, .capacity = 2};
	int mt = done(n);                                    /* i32[4, 32] */
	int gr[2] = {sm, mt};
	done(add(IR_OP_GATHER, 2, gr));                      /* [4, 32, 16] */
	n = add(IR_OP_PERMUTE, 1, &sm);
	*ir_attr_perm_mut(M, n) = (IrAttrPerm){.n = 3, .perm = {1, 0, 2}};
	int pm = done(n);                                    /* [8, 4, 16] */
	n = add(IR_OP_RESHAPE, 1, &pm);
	n->rank = 2;
	n->shape[0] = 32;
	n->shape[1] = 16;
	int rs = done(n);
	int c3[3] = {rs, rs, rs};
	n = add(IR_OP_CONCAT, 3, c3);
	ir_attr_axis_mut(M, n)->axis = 0;
	int cc = done(n);                                    /* [96, 16] */
	n = add(IR_OP_SLICE, 1, &cc);
	*ir_attr_slice_mut(M, n) = (IrAttrSlice){.axis = 0, .start = 32, .end = 64};
	int sl = done(n);                                    /* [32, 16] */

	/* collectives over (dp), (tp), (dp, tp) */
	n = add(IR_OP_ALL_GATHER, 1, &sl);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 1, .n = 1, .dim = 1};
	int ag = done(n);                                    /* [32, 32] */
	n = add(IR_OP_REDUCE_SCATTER, 1, &ag);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 3u << 1, .red = IR_RED_AVG, .n = 1, .dim = 0};
	int rsc = done(n);                                   /* [8, 32] */
	n = add(IR_OP_ALL_REDUCE, 1, &rsc);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 2, .red = IR_RED_SUM};
	int ar = done(n);
	n = add(IR_OP_ALL_TO_ALL, 1, &ar);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 2, .n = 2, .a2a = {.split = 1, .concat = 0}};
	int a2a = done(n);                                   /* [16, 16] */
	n = add(IR_OP_SHARD_SLICE, 1, &a2a);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 1, .n = 1, .dim = 0};
	done(n);                                             /* [8, 16] */
	n = add(IR_OP_BROADCAST, 1, &a2a);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 1, .n = 1, .root = 1};
	int bc = done(n);
	n = add(IR_OP_SEND, 1, &bc);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 0, .n = 1, .shift = 1};
	ir_set_stage(M, n, 0);
	done(n);
	/* ring attention's load balancing: to member (shift - g) mod n */
	n = add(IR_OP_SEND, 1, &bc);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 1, .n = 2, .args = {1, 1}};
	done(n);
	n = add(IR_OP_RECV, 0, NULL);
	/* an odd count prints as ints = (...) */
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 0, .n = 3, .args = {-1, 5}};
	n->rank = 2;
	n->shape[0] = 16;
	n->shape[1] = 16;
	n->dtype = IR_BF16;
	ir_set_stage(M, n, 1);
	int rv = done(n);
	n = add(IR_OP_ALL_REDUCE, 1, &rv);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 1, .red = IR_RED_MAX, .n = 1, .args = {9}};
	done(n);

	/* gradient ops (passes/autodiff.c); h is [4, 8, 16] */
	n = add(IR_OP_EXPAND, 1, &g);
	n->rank = 3;
	memcpy(n->shape, (int64_t[]){4, 8, 16}, 3 * sizeof(int64_t));
	done(n);
	n = add(IR_OP_SUM_TO, 1, &h);
	n->rank = 1;
	n->shape[0] = 16;
	done(n);
	bin(IR_OP_RELU_BWD, h, h);
	bin(IR_OP_GELU_BWD, h, h);
	bin(IR_OP_SILU_BWD, h, h);
	n = add(IR_OP_MAX, 1, &h);
	*ir_attr_axes_mut(M, n) = (IrAttrAxes){.n = 1, .axes = {1}};
	int hm = done(n);                                    /* [4, 16] */
	int mb[3] = {hm, h, hm};
	n = add(IR_OP_MAX_BWD, 3, mb);
	*ir_attr_axes_mut(M, n) = (IrAttrAxes){.n = 1, .axes = {1}};
	done(n);
	for (int k = 0; k < 2; k++) {
		n = add(k ? IR_OP_LOG_SOFTMAX_BWD : IR_OP_SOFTMAX_BWD, 2, (int[]){h, h});
		ir_attr_axis_mut(M, n)->axis = 2 - k;
		done(n);
	}
	IrOp nb[4] = {IR_OP_LAYERNORM_BWD, IR_OP_LAYERNORM_BWD_GAMMA, IR_OP_RMSNORM_BWD,
	              IR_OP_RMSNORM_BWD_GAMMA};
	for (int k = 0; k < 4; k++) {
		n = add(nb[k], 3 - (k & 1), (int[]){h, h, g});
		ir_attr_eps_mut(M, n)->eps = 1e-5;
		done(n);
	}
	n = add(IR_OP_EMBED_BWD, 2, (int[]){h, tok});
	n->rank = 2;
	n->shape[0] = 32;
	n->shape[1] = 16;
	done(n);
	n = add(IR_OP_PAD, 1, &h);
	*ir_attr_slice_mut(M, n) = (IrAttrSlice){.axis = 1, .start = 2, .end = 10};
	n->rank = 3;
	memcpy(n->shape, (int64_t[]){4, 12, 16}, 3 * sizeof(int64_t));
	done(n);
	n = add(IR_OP_ATTENTION_BWD, 4, (int[]){h, h, h, h});
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4, .causal = 1};
	done(n);
	done(add(IR_OP_CROSS_ENTROPY_BWD, 3, (int[]){c, h, tok}));
	/* Ulysses with k and v whole: the query heads numbered over (tp, dp) */
	n = add(IR_OP_ATTENTION, 3, (int[]){h, h, h});
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){
	        .heads = 4, .causal = 1, .kv_heads = 4, .head_axes = 1u << 1 | 1u << 2,
	        .head_minor = 1u << 1};
	done(n);
	/* ring attention's blocks (passes/partition.c) */
	n = add(IR_OP_ATTN_BLOCK, 3, (int[]){h, h, h});
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4, .causal = 1, .ring = 1u << 1, .step = 3};
	int blk = done(n);
	n = add(IR_OP_ATTN_BLOCK, 3, (int[]){h, h, h}); /* uneven blocks: attn.seq */
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4, .ring = 1u << 1, .step = 2, .seq = 30};
	done(n);
	n = add(IR_OP_ATTN_MERGE, 2, (int[]){blk, blk});
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4};
	blk = done(n);
	n = add(IR_OP_ATTN_BLOCK_BWD, 5, (int[]){h, h, h, h, blk});
	*ir_attr_attn_mut(M, n) = (IrAttrAttn){.heads = 4, .causal = 1, .ring = 1u << 1, .step = 1,
	                                       .balanced = 1};
	done(n);
	/* autodiff's weight gradient, and one summed onto it in place
	 * (passes/accumulate.c) */
	int wg = done(add(IR_OP_MATMUL_WGRAD, 2, (int[]){h, h}));
	done(add(IR_OP_MATMUL_WGRAD_ACC, 3, (int[]){wg, h, h}));
	/* vocab-parallel ops (passes/partition.c) */
	n = add(IR_OP_EMBED_VP, 2, (int[]){wte, tok});
	ir_attr_coll_mut(M, n)->axes = 1u << 2;
	done(n);
	n = add(IR_OP_EMBED_BWD_VP, 2, (int[]){h, tok});
	ir_attr_coll_mut(M, n)->axes = 1u << 2;
	n->rank = 2;
	n->shape[0] = 16;
	n->shape[1] = 16;
	done(n);
	n = add(IR_OP_CE_TARGET, 2, (int[]){h, tok});
	ir_attr_coll_mut(M, n)->axes = 1u << 2;
	int rows = done(n);
	int se = done(add(IR_OP_CE_SUMEXP, 2, (int[]){h, rows}));
	n = add(IR_OP_CE_BWD_VP, 5, (int[]){c, h, tok, rows, se});
	ir_attr_coll_mut(M, n)->axes = 1u << 2;
	done(n);
	/* uneven shards' padding (passes/partition.c) */
	n = add(IR_OP_PAD_MASK, 1, &h);
	*ir_attr_coll_mut(M, n) = (IrAttrColl){.axes = 1u << 2, .n = 3, .pad = {2, 30, 1}};
	done(n);

	/* optimizer ops (passes/optim.c): g and b stand in for a gradient */
	{
		int st[3];
		for (int k = 0; k < 3; k++) {
			st[k] = leaf(IR_OP_STATE, IR_F32, k < 2 ? "opt.m.g" : "opt.master.g", DIMS(16));
			M->nodes[st[k]]->role = IR_ROLE_OPT_STATE;
			ir_attr_init_mut(M, M->nodes[st[k]])->kind = k < 2 ? IR_INIT_ZEROS : IR_INIT_ONES;
		}
		int gn = done(add(IR_OP_GRAD_NORM, 2, (int[]){b, h}));
		done(add(IR_OP_LOSS_SCALE, 0, NULL));
		n = add(IR_OP_ADAMW_STEP, 6, (int[]){g, b, st[0], st[1], st[2], gn});
		*ir_attr_optim_mut(M, n) = (IrAttrOptim){.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
		                                        .weight_decay = 0.1, .clip = 1.0, .master = true};
		done(n);
		n = add(IR_OP_SGD_STEP, 4, (int[]){g, b, st[0], gn});
		*ir_attr_optim_mut(M, n) = (IrAttrOptim){.momentum = 0.9, .weight_decay = 1e-4,
		                                        .nesterov = true};
		done(n);
		done(add(IR_OP_ASSIGN, 2, (int[]){g, b})); /* ZeRO-1/2 write-back */
	}

	/* losses */
	int wt = wte;
	n = add(IR_OP_PERMUTE, 1, &wt);
	*ir_attr_perm_mut(M, n) = (IrAttrPerm){.n = 2, .perm = {1, 0}};
	int wtt = done(n);                                   /* [16, 32] */
	int logits = bin(IR_OP_MATMUL, h, wtt);              /* [4, 8, 32] */
	int ce = bin(IR_OP_CROSS_ENTROPY, logits, tok);
	int ms = bin(IR_OP_MSE, h, h);
	int loss = bin(IR_OP_ADD, ce, ms);
	M->nodes[loss]->role = IR_ROLE_LOSS;
	M->nodes[loss]->name = "loss";
	M->loss = loss;
	M->nodes[ce]->role = IR_ROLE_GRAD;
	M->nodes[ms]->role = IR_ROLE_OPT_STATE;

	Placement opts[3];
	placement_replicated(&opts[0], 2);
	opts[0].naxes[1] = 1;
	opts[0].axes[1][0] = 2;
	placement_replicated(&opts[1], 2);
	opts[1].naxes[0] = 2;
	opts[1].axes[0][0] = 2;
	opts[1].axes[0][1] = 1;
	placement_replicated(&opts[2], 2);
	opts[2].partial = 3u << 1;
	int ci = ir_choose_add(M, w, opts, 3, at(40, 7, 13));
	M->chooses[ci].selected = 1;
	ir_place_set(M, M->nodes[w], &opts[1]);
}

static void test_roundtrip(void)
{
	diag_init(&D, stderr);
	build();
	CHECK_EQ_INT(D.nerr, 0);
	bool seen[IR_OP_COUNT] = {false};
	for (int i = 0; i < M->nnodes; i++)
		seen[M->nodes[i]->op] = true;
	for (int i = 0; i < IR_OP_COUNT; i++)
		if (!seen[i])
			fprintf(stderr, "op %s is not in the round-trip module\n", ir_op_name((IrOp)i));
	for (int i = 0; i < IR_OP_COUNT; i++)
		CHECK(seen[i]);
	CHECK(ir_verify(M, &D, "build"));
	/* a loss that is not a float scalar is refused (a pass that made
	 * one; IR text's `loss` line is refused by the parser) */
	{
		int keep = M->loss, nerr0 = D.nerr;
		for (int i = 0; i < M->nnodes && M->loss == keep; i++)
			if (M->nodes[i]->rank == 2)
				M->loss = i;
		Diag q;
		char *msg = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&msg, &len);
		diag_init(&q, f);
		CHECK(M->loss != keep && !ir_verify(M, &q, "build"));
		fclose(f);
		CHECK(msg && strstr(msg, "a loss is a float scalar"));
		free(msg);
		M->loss = keep;
		CHECK(ir_verify(M, &D, "build") && D.nerr == nerr0);
	}

	char *t1 = print_str(M);
	char *errs = NULL;
	int nerr = 0;
	Arena a2;
	arena_init(&a2);
	IrModule *m2 = parse_str(&a2, t1, strlen(t1), &errs, &nerr);
	CHECK(m2 != NULL);
	CHECK_EQ_INT(nerr, 0);
	if (nerr)
		fprintf(stderr, "%s", errs);
	free(errs);
	if (m2) {
		char *t2 = print_str(m2);
		CHECK_EQ_STR(t2, t1);
		CHECK(ir_verify(m2, &D, "parse"));
		CHECK_EQ_INT(m2->nnodes, M->nnodes);
		CHECK_EQ_INT(m2->loss, M->loss);
		CHECK_EQ_INT(m2->pp_axis, 0); /* the axis named pp */
		CHECK(m2->train.lr == 0.1 && m2->train.clip == 1.0 / 3.0);
		CHECK(m2->train.weight_decay == 1e-300);
		CHECK(m2->train.data == NULL);
		CHECK_EQ_STR(m2->nodes[3]->name, M->nodes[3]->name);
		CHECK_EQ_INT(ir_choose(m2, m2->nodes[M->chooses[0].node]), 0);
		for (int i = 0; i < M->nnodes; i++)
			CHECK(ir_place_intern(m2, ir_place(M, M->nodes[i])) == m2->nodes[i]->place);
		/* every attribute field, not only what prints: a field the
		 * printer leaves out reads back as 0 and prints the same */
		int attr_diff = -1;
		for (int i = 0; i < M->nnodes && i < m2->nnodes && attr_diff < 0; i++) {
			int64_t wa[IR_ATTR_WORDS], wb[IR_ATTR_WORDS];
			int na = ir_attr_words(M->nodes[i], wa), nb = ir_attr_words(m2->nodes[i], wb);
			if (na != nb || memcmp(wa, wb, sizeof wa[0] * (size_t)na))
				attr_diff = i;
		}
		CHECK_EQ_INT(attr_diff, -1);
		if (attr_diff >= 0)
			fprintf(stderr, "node %d (%s): its attribute reads back otherwise\n", attr_diff,
			        ir_op_name(M->nodes[attr_diff]->op));
		free(t2);
	}
	/* a few lines, exactly */
	CHECK(strstr(t1, "module \"all ops\"\nmesh (pp = 1, dp = 2, tp = 2)\n"
	                 "train optimizer = \"sgd\", lr = 0.1, beta1 = 0.9, beta2 = 0.95, ") != NULL);
	CHECK(strstr(t1, "\n%0 = input \"tokens\" : i32[4, 8] @ [dp, _] role input loc "
	                 "\"models/\\\"all\\\".dtm\":1:3-9\n") != NULL);
	CHECK(strstr(t1, "param {init = normal(0, 0.02)} \"wte\" : f32[32, 16] @ ? role param") != NULL);
	CHECK(strstr(t1, "\"weird \\\"name\\\"\\\\\\n\\t\\x01\"") != NULL);
	CHECK(strstr(t1, "param {init = zeros} \"w\" : f32[16, 16] @ [(tp, dp), _] role param\n") != NULL);
	CHECK(strstr(t1, "matmul %26, %4 \"q\" : f32[4, 8, 16] @ [_, _, tp] partial(dp, max) loc") != NULL);
	CHECK(strstr(t1, "= all_to_all %") != NULL && strstr(t1, "{axes = (tp), split = 1, concat = 0}") != NULL);
	CHECK(strstr(t1, "{axes = (dp, tp), red = avg, dim = 0}") != NULL);
	CHECK(strstr(t1, "{axes = (pp), ints = (-1, 5, 0)} : bf16[16, 16] @ ? stage 1") != NULL);
	CHECK(strstr(t1, "{axes = (dp), red = max, ints = (9)}") != NULL);
	CHECK(strstr(t1, "{axes = (0, 2), keepdims = true}") != NULL);
	CHECK(strstr(t1, "{heads = 4, causal = true}") != NULL);
	CHECK(strstr(t1, "choose 0 node %4 options [_, tp] | [(tp, dp), _] | [_, _] partial(dp, tp) "
	                 "selected 1 loc") != NULL);
	CHECK(strstr(t1, "train zero = 3, zero_axes = (dp), reshard_after_forward = false\n") != NULL);
	CHECK(strstr(t1, "precision = bf16, reduce_dtype = f32, master_dtype = bf16\n") != NULL);
	if (m2)
		CHECK(m2->train.precision == IR_BF16 && m2->train.reduce_dtype == IR_F32 &&
		      m2->train.master_dtype == IR_BF16);
	CHECK(strstr(t1, "data = none, seed = 42\n") != NULL);
	free(t1);
	arena_free(&a2);
}

static void test_verify(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, f);
	/* a pass that broke a shape, a placement and an operand order */
	IrNode *mm = NULL;
	for (int i = 0; i < M->nnodes; i++)
		if (M->nodes[i]->op == IR_OP_MATMUL && !mm)
			mm = M->nodes[i];
	mm->shape[2] = 17;
	CHECK(!ir_verify(M, &d, "partition"));
	mm->shape[2] = 16;
	Placement pl = *ir_place(M, mm);
	Placement bad = pl;
	bad.axes[2][0] = 1; /* dp: also partial over dp */
	ir_place_set(M, mm, &bad);
	CHECK(!ir_verify(M, &d, "propagate"));
	bad = pl;
	bad.ndims = 2;
	ir_place_set(M, mm, &bad);
	CHECK(!ir_verify(M, &d, "propagate"));
	ir_place_set(M, mm, &pl);
	int save = mm->ops[0];
	mm->ops[0] = mm->id;
	CHECK(!ir_verify(M, &d, "schedule"));
	mm->ops[0] = save;
	CHECK(ir_verify(M, &d, "fixed"));
	fclose(f);
	CHECK_EQ_INT(d.nerr, 5); /* the bad shape also breaks its user */
	if (d.nerr != 5)
		fprintf(stderr, "%s", buf);
	char want[256];
	CHECK(strstr(buf, "error: verifier failed after pass 'partition': %") != NULL);
	CHECK(strstr(buf, "(matmul): recorded type f32[4, 8, 17] but the operands give f32[4, 8, 16]") != NULL);
	CHECK(strstr(buf, "'propagate': %") != NULL &&
	      strstr(buf, "mesh axis 'dp' both splits and is partial in the placement") != NULL);
	CHECK(strstr(buf, "%28 (attention): q and k shapes differ: [4, 8, 17] vs [4, 8, 16]") != NULL);
	CHECK(strstr(buf, "placement has 2 dims but the value has rank 3") != NULL);
	snprintf(want, sizeof want, "(matmul): operand %%%d is not defined before %%%d", mm->id, mm->id);
	CHECK(strstr(buf, want) != NULL);
	free(buf);
}

/* Links (IrLink) have no syntax: printing drops them, and the parser
 * derives them from the names the passes that make them give; the
 * verifier checks a link names a param. */
static void test_links(void)
{
	IrModule *keep = M;
	M = ir_module_new(&arena, "links");
	int w = leaf(IR_OP_PARAM, IR_F32, "w", DIMS(4));
	int u = leaf(IR_OP_PARAM, IR_F32, "u", DIMS(2));
	int g = leaf(IR_OP_INPUT, IR_F32, "grad.w", DIMS(4));
	M->nodes[g]->role = IR_ROLE_GRAD;
	int st = leaf(IR_OP_STATE, IR_F32, "opt.master.w", DIMS(4));
	M->nodes[st]->role = IR_ROLE_OPT_STATE;
	int gn = done(add(IR_OP_GRAD_NORM, 1, &g));
	M->nodes[gn]->name = "grad_norm";
	CHECK(ir_set_link(M, M->nodes[g], IR_LINK_GRAD, w));
	CHECK(ir_set_link(M, M->nodes[st], IR_LINK_OPT_MASTER, w));
	CHECK(ir_set_link(M, M->nodes[gn], IR_LINK_GRAD_NORM, -1));
	CHECK(ir_verify(M, &D, "build"));

	char *t1 = print_str(M), *errs = NULL;
	int nerr = 0;
	Arena a2;
	arena_init(&a2);
	IrModule *m2 = parse_str(&a2, t1, strlen(t1), &errs, &nerr);
	CHECK(m2 != NULL && nerr == 0);
	free(errs);
	if (m2) {
		char *t2 = print_str(m2);
		CHECK_EQ_STR(t2, t1);
		free(t2);
		for (int i = 0; i < M->nnodes; i++) {
			CHECK_EQ_INT(ir_link(m2, m2->nodes[i]), ir_link(M, M->nodes[i]));
			CHECK_EQ_INT(ir_link_param(m2, m2->nodes[i]), ir_link_param(M, M->nodes[i]));
		}
	}
	free(t1);
	arena_free(&a2);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, f);
	ir_set_link(M, M->nodes[st], IR_LINK_OPT_MASTER, g); /* no param */
	CHECK(!ir_verify(M, &d, "optim"));
	ir_set_link(M, M->nodes[st], IR_LINK_OPT_MASTER, u); /* another shape */
	CHECK(!ir_verify(M, &d, "optim"));
	ir_set_link(M, M->nodes[st], IR_LINK_GRAD, w); /* a state is no gradient */
	CHECK(!ir_verify(M, &d, "optim"));
	ir_set_link(M, M->nodes[st], IR_LINK_OPT_MASTER, w);
	CHECK(ir_verify(M, &d, "fixed"));
	fclose(f);
	CHECK_EQ_INT(d.nerr, 3);
	char want[128];
	snprintf(want, sizeof want, "an optimizer state linked to %%%d, which is no param", g);
	CHECK(strstr(buf, want) != NULL);
	CHECK(strstr(buf, "of param %1 f32[2]: another shape") != NULL);
	CHECK(strstr(buf, "linked as a gradient of %0, but it is a state of role opt_state") != NULL);
	if (d.nerr != 3)
		fprintf(stderr, "%s", buf);
	free(buf);
	M = keep;
}

/* Each bad text must fail with this exact first message. */
static void test_bad_text(void)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{"mesh (dp = 2)\n%0 = input : f32[2] @ ?\n%1 = foo %0 : f32[2] @ ?\n",
		 "t.ir:3:6: error: unknown op 'foo'"},
		{"mesh (dp = 2)\n%0 = input : f32[2] @ ?\n%1 = neg %0 f32[2] @ ?\n",
		 "t.ir:3:13: error: expected ':' after the operands, found 'f32'"},
		{"mesh (dp = 2)\n%0 = input : f32[2] @ ?\n%1 = add %0, %9 : f32[2] @ ?\n",
		 "t.ir:3:14: error: operand %9 is not defined before %1"},
		{"mesh (dp = 2)\n%0 = input : f32[2] @ [tp]\n",
		 "t.ir:2:24: error: unknown mesh axis 'tp'"},
		{"mesh (dp = 2)\n%0 = input : f32[2, 3] @ ?\n%1 = matmul %0, %0 : f32[2, 3] @ ?\n",
		 "t.ir:3:1: error: %1 (matmul): inner dimensions differ: [2, 3] @ [2, 3] (3 vs 2)"},
		{"mesh ()\n%0 = input : f32[2] @ ?\n%1 = exp %0 : f32[3] @ ?\n",
		 "t.ir:3:1: error: %1 (exp): the text says f32[3] but the operands give f32[2]"},
		{"%1 = input : f32[2] @ ?\n",
		 "t.ir:1:2: error: expected node %0 here (nodes are numbered in order), found %1"},
		{"train lr = 0.1, speed = 3\n", "t.ir:1:17: error: unknown train setting 'speed'"},
		/* the mixed-precision policy: each f32 or the params' dtype */
		{"train reduce_dtype = i32\n",
		 "t.ir:1:22: error: unknown reduce_dtype 'i32' (expected f32, bf16 or f16)"},
		{"train param_dtype = bf16, master_dtype = f16\n",
		 "t.ir:1:42: error: master_dtype f16 with param_dtype bf16: the update would run on "
		 "weights rounded below the params' (use f32 or bf16)"},
		{"train precision = f32, reduce_dtype = bf16\n",
		 "t.ir:1:39: error: reduce_dtype bf16 with param_dtype f32: gradients would be rounded "
		 "below the params' precision (use f32)"},
		{"mesh (dp = 2)\n%0 = input : f32[2] @ ?\n%1 = softmax %0 {axes = (0)} : f32[2] @ ?\n",
		 "t.ir:3:18: error: unknown attribute 'axes' for softmax"},
		{"%0 = input \"abc : f32[2] @ ?\n", "t.ir:1:12: error: expected ':' after the operands, found an unterminated string"},
		{"%0 = input : f32[2] @ ? loc \"a\\q\":1:2-3\n", "t.ir:1:29: error: unknown escape '\\q' in a string"},
		{"%0 = input : f32[99999999999999999999] @ ?\n", "t.ir:1:18: error: integer 99999999999999999999 out of range"},
		{"mesh (dp = 2)\nmesh (tp = 2)\n", "t.ir:2:1: error: the mesh is declared twice"},
		{"%0 = input : f32[2] @ ?\nloss %3\n", "t.ir:2:6: error: node %3 is not defined"},
		{"hello\n", "t.ir:1:1: error: expected a node, 'module', 'mesh', 'train', 'after', 'loss' or 'choose' at the start of a line, found 'hello'"},
		{"%0 = input : f32[-2] @ ?\n", "t.ir:1:1: error: %0 (input): the declared type has a negative dimension: [-2]"},
		/* the pipeline position: per-rank ops and padded shards need one */
		{"mesh (dp = 2)\n%0 = input : f32[2] @ ?\n%1 = all_reduce %0 {axes = (dp), red = sum} : f32[2] @ ?\n",
		 "t.ir:3:6: error: all_reduce is a per-rank op, which only the IR after partition holds, but "
		 "this IR has no `after PASS` line before its first node (IR printed after a pass has one)"},
		{"mesh (dp = 2)\n%0 = input : f32[3] @ [dp] of [5]\n",
		 "t.ir:2:28: error: a padded shard ('of'), which only the IR after partition holds, but this IR "
		 "has no `after PASS` line before its first node"},
		{"after partition\nafter bucket\n", "t.ir:2:1: error: 'after' is given twice"},
		/* a ring block's global length (uneven blocks) */
		{"mesh (cp = 2)\nafter partition\n%0 = input : f32[1, 4, 8] @ ?\n"
		 "%1 = attn_block %0, %0, %0 {heads = 2, causal = true, ring = (cp), step = 0, "
		 "seq = -1} : f32[1, 4, 10] @ ?\n",
		 "t.ir:4:1: error: %1 (attn_block): seq must be >= 0, got -1"},
		/* the axes numbered last must be of the group */
		{"mesh (cp = 2, tp = 2)\n%0 = input : f32[1, 4, 8] @ ?\n"
		 "%1 = attention %0, %0, %0 {heads = 2, causal = true, head_axes = (tp), "
		 "head_minor = (cp)} : f32[1, 4, 8] @ ?\n",
		 "t.ir:3:1: error: %1 (attention): head_minor must name axes of head_axes"},
		{"%0 = input : f32[2] @ ?\nafter partition\n",
		 "t.ir:2:1: error: 'after' must come before the first node"},
		{"after 3\n", "t.ir:1:7: error: expected a pass name after 'after', found '3'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		Arena a;
		arena_init(&a);
		char *errs = NULL;
		int nerr = 0;
		IrModule *m = parse_str(&a, cases[i].text, strlen(cases[i].text), &errs, &nerr);
		CHECK(m == NULL);
		CHECK(nerr >= 1);
		char *nl = errs ? strchr(errs, '\n') : NULL;
		if (nl)
			*nl = 0;
		CHECK_EQ_STR(errs, cases[i].msg);
		free(errs);
		arena_free(&a);
	}
}

/* Mutations of a valid text: parse must return (NULL or a module) without
 * crashing, under ASan in the sanitizer build. */
static void test_garbage(void)
{
	build();
	char *good = print_str(M);
	size_t len = strlen(good);
	char *buf = malloc(len + 64);
	uint64_t s = 0x9e3779b97f4a7c15ull;
	int parsed = 0;
	static const char bytes[] = "%=:@[](){},|-?\"\\#_ \n0123456789abcxyz\x00\x7f\xff";
	for (int it = 0; it < 3000; it++) {
		memcpy(buf, good, len + 1);
		size_t n = len;
		int muts = 1 + (int)(s % 4);
		for (int k = 0; k < muts; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			size_t pos = (size_t)(s >> 33) % (n ? n : 1);
			switch ((s >> 20) % 4) {
			case 0: /* replace */
				buf[pos] = bytes[(s >> 8) % (sizeof bytes - 1)];
				break;
			case 1: /* truncate */
				n = pos;
				break;
			case 2: /* delete */
				memmove(buf + pos, buf + pos + 1, n - pos);
				n--;
				break;
			case 3: /* duplicate a byte */
				if (n + 1 < len + 64) {
					memmove(buf + pos + 1, buf + pos, n - pos);
					n++;
				}
				break;
			}
		}
		Arena a;
		arena_init(&a);
		char *errs = NULL;
		if (parse_str(&a, buf, n, &errs, NULL))
			parsed++;
		free(errs);
		arena_free(&a);
	}
	CHECK(parsed < 3000); /* most mutations are caught */
	/* degenerate inputs */
	const char *odd[] = {"", "\n\n\n", "%", "%0", "%0 =", "mesh (", "train", "choose 0 node %0",
	                     "\"", "#only a comment", "%0 = input : f32[", "module"};
	for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
		Arena a;
		arena_init(&a);
		char *errs = NULL;
		parse_str(&a, odd[i], strlen(odd[i]), &errs, NULL);
		free(errs);
		arena_free(&a);
	}
	free(buf);
	free(good);
}

int main(void)
{
	arena_init(&arena);
	test_roundtrip();
	test_verify();
	test_links();
	test_bad_text();
	test_garbage();
	arena_free(&arena);
	return check_report();
}
