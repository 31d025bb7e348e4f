/* test_kernels_bwd.c - the CPU kernels of the gradient ops against the
 * reference interpreter.
 *
 * Each case builds a tiny module by hand (leaves, maybe a forward op whose
 * result a backward op needs, then the backward op), evaluates it in f64,
 * then calls the op's dtmk_ kernel on the same operand values stored as
 * f32 (or bf16) and compares every element: 1e-5 relative in f32, 1e-2 in
 * bf16 (whose leaves are rounded to bf16 before the reference runs).
 */
#include "check.h"
#include "codegen/emit_common.h"
#include "testlib_attr.h"
#include "interp/eval.h"
#include "ir/ir.h"
#include "runtime/plan.h"
#include "codegen/cpu/dtmk_bwd.h"
#include "codegen/cpu/dtmk_fwd.h"
#include "codegen/cpu/dtmk_ring.h"
#include "codegen/cpu/dtmk_rope.h"
#include "codegen/cpu/dtmk_vp.h"

#include <stdlib.h>

typedef void (*KernelFn)(const DtmCtx *, const DtmkArgs *);

static Arena arena;
static Diag diag;
static uint64_t rng_state;
static bool quantize; /* leaves from {-1, -0.5, 0, 0.5, 1}: ties for max */
/* attention operands (attn.lse): their log-sum-exps moved by this after
 * the forward kernel wrote them, and the kernel's result then expected to
 * differ from the reference (it reads them) */
static float lse_shift;

static double rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	double v = (double)(z >> 11) / (double)(1ull << 52) - 1.0;
	return quantize ? round(v * 2) / 2 : v;
}

static IrModule *mod(void)
{
	arena_free(&arena);
	arena_init(&arena);
	rng_state = 99;
	return ir_module_new(&arena, "k");
}

static int leaf(IrModule *m, IrDtype t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
	IrNode *n = ir_node_new(m, IR_OP_INPUT, NULL, 0, (SrcLoc){0});
	int64_t dims[3] = {d0, d1, d2};
	n->dtype = t;
	n->rank = rank;
	for (int i = 0; i < rank; i++)
		n->shape[i] = dims[i];
	n->role = IR_ROLE_INPUT;
	CHECK(ir_infer(m, n, &diag));
	return n->id;
}

/* op(ops){ints, f0, flag}; `type` (may be NULL) presets the result type. */
static int node(IrModule *m, IrOp op, int nops, const int *ops, int nints, const int64_t *ints,
                double f0, bool flag, const IrNode *type)
{
	IrNode *n = ir_node_new(m, op, ops, nops, (SrcLoc){0});
	test_set_attrs(m, n, nints, ints, f0, flag);
	if (type) {
		n->dtype = type->dtype;
		n->rank = type->rank;
		memcpy(n->shape, type->shape, sizeof n->shape);
	}
	bool ok = ir_infer(m, n, &diag);
	CHECK(ok);
	return n->id;
}

static IrNode shape_of(IrDtype t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
	IrNode n = {.dtype = t, .rank = rank, .shape = {d0, d1, d2}};
	return n;
}

static DtmDtype dtm_dtype(IrDtype t)
{
	switch (t) {
	case IR_BF16: return DTM_BF16;
	case IR_F16: return DTM_F16;
	case IR_I32: return DTM_I32;
	default: return DTM_F32;
	}
}

static void tensor(DtmkTensor *t, const IrNode *n)
{
	t->dtype = dtm_dtype(n->dtype);
	t->rank = n->rank;
	for (int i = 0; i < n->rank; i++)
		t->shape[i] = n->shape[i];
	t->numel = ir_node_numel(n);
	/* an attention's (attn.lse) log-sum-exps after it */
	int64_t tail = n->op == IR_OP_ATTENTION ? ir_attn_lse_count(n) : 0;
	t->p = calloc((size_t)(t->numel + tail ? t->numel + tail : 1), 4);
}

/* Operand node o an attention with attn.lse: t (o's) as the forward
 * kernel leaves it, its result and the rows' log-sum-exps, from o's
 * operands' values in e (lse_shift added to the finite log-sum-exps). */
static void attn_operand(const IrModule *m, const IrEval *e, const IrNode *o, DtmkTensor *t)
{
	CgKernelAttrs ka;
	cg_kernel_attrs(o, &ka);
	DtmkArgs a = {.nin = o->nops, .nints = ka.nints, .out = *t};
	for (int i = 0; i < IR_MAX_INTS; i++)
		a.ints[i] = ka.ints[i];
	for (int k = 0; k < o->nops; k++) {
		const IrNode *x = m->nodes[o->ops[k]];
		tensor(&a.in[k], x);
		for (int64_t j = 0; j < a.in[k].numel; j++) {
			if (x->dtype == IR_I32)
				((int32_t *)a.in[k].p)[j] = (int32_t)e->val[x->id][j];
			else
				dtmk_store(&a.in[k], j, (float)e->val[x->id][j]);
		}
	}
	DtmCtx ctx = {0};
	dtmk_attention(&ctx, &a);
	float *lse = (float *)((char *)t->p + t->numel * (int64_t)dtmk_esize(t->dtype));
	/* the log-sum-exps against f64 sums over the keys each row sees */
	const IrAttrAttn *at = ir_attr_attn(o);
	int64_t B = o->shape[0], T = o->shape[1], D = o->shape[2], H = at->heads, hd = D / H;
	int64_t G = ir_attn_kv_heads(at), Dk = G * hd;
	const DtmkTensor *seg = o->nops > 3 ? &a.in[3] : NULL;
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < T; i++) {
				double mx = -INFINITY, s[2048], sum = 0;
				for (int64_t j = 0; j < T && j < 2048; j++) {
					int32_t si = seg ? dtmk_load_i32(seg, b * T + i) : 0;
					bool sees = (!at->causal || j <= i) &&
					            (at->window <= 0 || (i - j < at->window &&
					                                 j - i < at->window)) &&
					            si >= 0 && (!seg || dtmk_load_i32(seg, b * T + j) == si);
					double dot = 0;
					for (int64_t c = 0; sees && c < hd; c++)
						dot += (double)dtmk_load(&a.in[0], (b * T + i) * D + h * hd + c) *
						       dtmk_load(&a.in[1], (b * T + j) * Dk + h / (H / G) * hd + c);
					s[j] = sees ? dot / sqrt((double)hd) : -INFINITY;
					mx = s[j] > mx ? s[j] : mx;
				}
				for (int64_t j = 0; j < T && j < 2048 && mx > -INFINITY; j++)
					sum += exp(s[j] - mx);
				double want = mx > -INFINITY ? mx + log(sum) : -INFINITY;
				double got = lse[(b * H + h) * T + i];
				check_count++;
				if (!(got == want || fabs(got - want) <= 1e-4 * (1 + fabs(want)))) {
					check_failures++;
					fprintf(stderr, "attention lse [%lld, %lld, %lld]: %.9g, want %.9g\n",
					        (long long)b, (long long)h, (long long)i, got, want);
				}
			}
	for (int64_t i = 0; i < ir_attn_lse_count(o); i++)
		if (isfinite(lse[i]))
			lse[i] += lse_shift;
	for (int k = 0; k < o->nops; k++)
		free(a.in[k].p);
}

/* Fills the leaves (ids in [0, idlim)), evaluates, runs fn on node `id`
 * and compares. */
static void run(const char *what, IrModule *m, int id, KernelFn fn, int idlim, double tol)
{
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	for (int i = 0; i < m->nnodes; i++) {
		IrNode *n = m->nodes[i];
		if (n->op != IR_OP_INPUT)
			continue;
		for (int64_t j = 0; j < ir_node_numel(n); j++)
			e.val[i][j] = n->dtype == IR_I32 ? (double)((j * 3 + 1) % idlim)
			                                 : ir_eval_round(n->dtype, rnd());
	}
	CHECK(ir_eval_run(&e, &diag, 1, 1));
	const IrNode *n = m->nodes[id];
	CgKernelAttrs ka;
	cg_kernel_attrs(n, &ka);
	DtmkArgs a = {.nin = n->nops, .nints = ka.nints, .flag = ka.flag};
	for (int i = 0; i < IR_MAX_INTS; i++)
		a.ints[i] = ka.ints[i];
	a.f[0] = ka.f[0];
	for (int k = 0; k < n->nops; k++) {
		const IrNode *o = m->nodes[n->ops[k]];
		tensor(&a.in[k], o);
		if (o->op == IR_OP_ATTENTION && ir_attr_attn(o)->lse) {
			attn_operand(m, &e, o, &a.in[k]);
			continue;
		}
		for (int64_t j = 0; j < a.in[k].numel; j++) {
			if (o->dtype == IR_I32)
				((int32_t *)a.in[k].p)[j] = (int32_t)e.val[o->id][j];
			else
				dtmk_store(&a.in[k], j, (float)e.val[o->id][j]);
		}
	}
	tensor(&a.out, n);
	DtmCtx ctx = {0};
	fn(&ctx, &a);
	int bad = 0;
	for (int64_t j = 0; j < a.out.numel; j++) {
		double got = dtmk_load(&a.out, j), want = e.val[id][j];
		check_count++;
		if (!(fabs(got - want) <= tol * (1 + fabs(want)))) {
			check_failures += lse_shift == 0;
			if (bad++ < 5 && lse_shift == 0)
				fprintf(stderr, "%s[%lld]: kernel %.9g, reference %.9g\n", what,
				        (long long)j, got, want);
		}
	}
	if (lse_shift != 0) { /* the kernel read the moved statistics */
		check_count++;
		if (bad == 0) {
			check_failures++;
			fprintf(stderr, "%s: unchanged with its log-sum-exps moved\n", what);
		}
	}
	for (int k = 0; k < n->nops; k++)
		free(a.in[k].p);
	free(a.out.p);
	ir_eval_free(&e);
}

static const double F32 = 1e-5, BF16 = 1e-2;

static void test_expand_sum_to(IrDtype t, double tol)
{
	IrModule *m = mod();
	int x = leaf(m, t, 2, 3, 1, 0);
	IrNode big = shape_of(t, 3, 2, 3, 4);
	run("expand", m, node(m, IR_OP_EXPAND, 1, &x, 0, NULL, 0, false, &big), dtmk_expand, 1, tol);
	m = mod();
	int y = leaf(m, t, 3, 2, 3, 4);
	IrNode s1 = shape_of(t, 2, 3, 1, 0), s2 = shape_of(t, 1, 4, 0, 0);
	run("sum_to [3, 1]", m, node(m, IR_OP_SUM_TO, 1, &y, 0, NULL, 0, false, &s1), dtmk_sum_to,
	    1, tol);
	run("sum_to [4]", m, node(m, IR_OP_SUM_TO, 1, &y, 0, NULL, 0, false, &s2), dtmk_sum_to, 1,
	    tol);
	/* a bias gradient wider than a column chunk (256), the last one
	 * partial, read in place (f32) or a row's chunk at a time (bf16) */
	m = mod();
	int z = leaf(m, t, 3, 3, 7, 600);
	IrNode s3 = shape_of(t, 1, 600, 0, 0);
	run("sum_to [600]", m, node(m, IR_OP_SUM_TO, 1, &z, 0, NULL, 0, false, &s3), dtmk_sum_to, 1,
	    tol);
}

static void test_acts(void)
{
	static const struct {
		IrOp op;
		KernelFn fn;
		const char *name;
	} acts[] = {{IR_OP_RELU_BWD, dtmk_relu_bwd, "relu_bwd"},
	            {IR_OP_GELU_BWD, dtmk_gelu_bwd, "gelu_bwd"},
	            {IR_OP_SILU_BWD, dtmk_silu_bwd, "silu_bwd"}};
	/* f32, and bf16 (dy, x and dx: the one-loop path) */
	for (int bf = 0; bf < 2; bf++)
		for (int i = 0; i < 3; i++) {
			IrModule *m = mod();
			IrDtype t = bf ? IR_BF16 : IR_F32;
			int o[2] = {leaf(m, t, 2, 3, 5, 0), leaf(m, t, 2, 3, 5, 0)};
			char what[64];
			snprintf(what, sizeof what, "%s%s", acts[i].name, bf ? " bf16" : "");
			run(what, m, node(m, acts[i].op, 2, o, 0, NULL, 0, false, NULL), acts[i].fn, 1,
			    bf ? BF16 : F32);
		}
}

static void test_max_bwd(void)
{
	for (int q = 0; q < 2; q++) {
		quantize = q;
		for (int keep = 0; keep < 2; keep++) {
			IrModule *m = mod();
			int x = leaf(m, IR_F32, 3, 2, 3, 4);
			int64_t ax[2] = {0, 2};
			int y = node(m, IR_OP_MAX, 1, &x, 2, ax, 0, keep, NULL);
			const IrNode *Y = m->nodes[y];
			int dy = leaf(m, IR_F32, Y->rank, Y->shape[0], Y->shape[1], Y->shape[2]);
			int o[3] = {dy, x, y};
			run(q ? "max_bwd ties" : "max_bwd", m,
			    node(m, IR_OP_MAX_BWD, 3, o, 2, ax, 0, keep, NULL), dtmk_max_bwd, 1, F32);
		}
	}
	quantize = false;
}

static void test_softmax_bwd(void)
{
	for (int64_t axis = 1; axis <= 2; axis++)
		for (int lg = 0; lg < 2; lg++) {
			IrModule *m = mod();
			int x = leaf(m, IR_F32, 3, 2, 5, 3), dy = leaf(m, IR_F32, 3, 2, 5, 3);
			int y = node(m, lg ? IR_OP_LOG_SOFTMAX : IR_OP_SOFTMAX, 1, &x, 1, &axis, 0, false,
			             NULL);
			int o[2] = {dy, y};
			run(lg ? "log_softmax_bwd" : "softmax_bwd", m,
			    node(m, lg ? IR_OP_LOG_SOFTMAX_BWD : IR_OP_SOFTMAX_BWD, 2, o, 1, &axis, 0, false,
			         NULL),
			    lg ? dtmk_log_softmax_bwd : dtmk_softmax_bwd, 1, F32);
		}
}

static void test_norm_bwd(IrDtype t, double tol)
{
	for (int ln = 0; ln < 2; ln++) {
		IrModule *m = mod();
		int o[3] = {leaf(m, t, 3, 2, 3, 8), leaf(m, t, 3, 2, 3, 8), leaf(m, t, 1, 8, 0, 0)};
		IrOp dx = ln ? IR_OP_LAYERNORM_BWD : IR_OP_RMSNORM_BWD;
		IrOp dg = ln ? IR_OP_LAYERNORM_BWD_GAMMA : IR_OP_RMSNORM_BWD_GAMMA;
		run(ln ? "layernorm_bwd" : "rmsnorm_bwd", m, node(m, dx, 3, o, 0, NULL, 1e-5, false, NULL),
		    ln ? dtmk_layernorm_bwd : dtmk_rmsnorm_bwd, 1, tol);
		run(ln ? "layernorm_bwd_gamma" : "rmsnorm_bwd_gamma", m,
		    node(m, dg, 2, o, 0, NULL, 1e-5, false, NULL),
		    ln ? dtmk_layernorm_bwd_gamma : dtmk_rmsnorm_bwd_gamma, 1, tol);
		/* rows past the kernels' stack scratch (4 rows of 1024 floats) */
		m = mod();
		int w[3] = {leaf(m, t, 2, 3, 1100, 0), leaf(m, t, 2, 3, 1100, 0), leaf(m, t, 1, 1100, 0, 0)};
		run(ln ? "layernorm_bwd D=1100" : "rmsnorm_bwd D=1100", m,
		    node(m, dx, 3, w, 0, NULL, 1e-5, false, NULL),
		    ln ? dtmk_layernorm_bwd : dtmk_rmsnorm_bwd, 1, tol);
		run(ln ? "layernorm_bwd_gamma D=1100" : "rmsnorm_bwd_gamma D=1100", m,
		    node(m, dg, 2, w, 0, NULL, 1e-5, false, NULL),
		    ln ? dtmk_layernorm_bwd_gamma : dtmk_rmsnorm_bwd_gamma, 1, tol);
	}
}

static void test_embed_pad(void)
{
	IrModule *m = mod();
	int o[2] = {leaf(m, IR_F32, 3, 2, 3, 4), leaf(m, IR_I32, 2, 2, 3, 0)};
	IrNode tab = shape_of(IR_F32, 2, 5, 4, 0);
	/* ids (3j + 1) % 4 over 6 positions: rows repeat, row 4 stays zero */
	run("embed_bwd", m, node(m, IR_OP_EMBED_BWD, 2, o, 0, NULL, 0, false, &tab), dtmk_embed_bwd,
	    4, F32);
	/* rows wider than a chunk (DTMK_ROW_CHUNK = 512: 600 is one and a
	 * partial one), f32 and bf16 (each row's sum in f32, rounded once);
	 * ids (3j + 1) % 9 over 30 positions into 11 rows: rows 9 and 10
	 * stay zero; the vocab-parallel form on a shard of 5 rows (rank 0:
	 * ids 5 to 8 are another rank's) */
	for (int bf = 0; bf < 2; bf++) {
		IrDtype t = bf ? IR_BF16 : IR_F32;
		for (int vp = 0; vp < 2; vp++) {
			m = mod();
			int e[2] = {leaf(m, t, 3, 2, 15, 600), leaf(m, IR_I32, 2, 2, 15, 0)};
			IrNode et = shape_of(t, 2, vp ? 5 : 11, 600, 0);
			char what[64];
			snprintf(what, sizeof what, "%s D=600%s", vp ? "embed_bwd_vp" : "embed_bwd",
			         bf ? " bf16" : "");
			run(what, m,
			    node(m, vp ? IR_OP_EMBED_BWD_VP : IR_OP_EMBED_BWD, 2, e, 0, NULL, 0, false,
			         &et),
			    vp ? dtmk_embed_bwd_vp : dtmk_embed_bwd, 9, bf ? BF16 : F32);
		}
	}
	m = mod();
	int x = leaf(m, IR_F32, 3, 2, 2, 3);
	int64_t sl[3] = {1, 1, 3};
	IrNode big = shape_of(IR_F32, 3, 2, 5, 3);
	run("pad", m, node(m, IR_OP_PAD, 1, &x, 3, sl, 0, false, &big), dtmk_pad, 1, F32);
}

static void test_attention_bwd(void)
{
	for (int64_t causal = 0; causal < 2; causal++) {
		IrModule *m = mod();
		int o[4];
		for (int i = 0; i < 4; i++)
			o[i] = leaf(m, IR_F32, 3, 2, 4, 6);
		int64_t at[2] = {2, causal};
		run(causal ? "attention_bwd causal" : "attention_bwd", m,
		    node(m, IR_OP_ATTENTION_BWD, 4, o, 2, at, 0, false, NULL), dtmk_attention_bwd, 1,
		    F32);
	}
	/* grouped-query and multi-query, windows and segment ids ((3j + 1) % 2:
	 * interleaved), odd sizes; 70 positions take the untiled loops */
	static const int64_t gq[][6] = {
	        /* T, heads, kv_heads, hd, causal, window */
	        {7, 4, 2, 3, 1, 0}, {19, 4, 1, 16, 1, 5}, {19, 4, 2, 3, 0, 4},
	        {70, 2, 1, 16, 1, 20}, {9, 3, 3, 5, 0, 0},
	        /* head sizes the 4-row blocks take (16 above, 64 and 32
	         * here), T not a multiple of 4 */
	        {70, 2, 2, 64, 1, 0}, {37, 4, 2, 32, 0, 9},
	        /* 48 and 80: the register tiles' 32- and 16-column rests
	         * (dk, dv in tiles of 4 keys: 33 and 23 leave some over) */
	        {33, 2, 1, 48, 1, 0}, {23, 2, 2, 80, 0, 6},
	};
	/* and all of it in bf16: the AVX512-BF16 products where the CPU has
	 * them and the head size is a multiple of 16, the f32 kernels on the
	 * widened operands otherwise */
	for (int bf = 0; bf < 2; bf++)
	for (size_t c = 0; c < sizeof gq / sizeof gq[0]; c++)
		for (int useseg = 0; useseg < 2; useseg++) {
			const int64_t *g = gq[c];
			IrDtype t = bf ? IR_BF16 : IR_F32;
			IrModule *m = mod();
			int o[5] = {leaf(m, t, 3, 2, g[0], g[1] * g[3]),
			            leaf(m, t, 3, 2, g[0], g[1] * g[3]),
			            leaf(m, t, 3, 2, g[0], g[2] * g[3]),
			            leaf(m, t, 3, 2, g[0], g[2] * g[3]),
			            leaf(m, IR_I32, 2, 2, g[0], 0)};
			IrNode *n = ir_node_new(m, IR_OP_ATTENTION_BWD, o, 4 + useseg, (SrcLoc){0});
			*ir_attr_attn_mut(m, n) = (IrAttrAttn){.heads = g[1], .causal = g[4],
			                                        .kv_heads = g[2], .window = g[5]};
			CHECK(ir_infer(m, n, &diag));
			char what[64];
			snprintf(what, sizeof what, "attention_bwd gqa case %zu%s%s", c,
			         useseg ? " segments" : "", bf ? " bf16" : "");
			run(what, m, n->id, dtmk_attention_bwd, 2, bf ? BF16 : F32);
		}
}

/* attention_bwd given its forward (attn.lse, pass attn_stats): the kernel
 * that tiles the keys (dtmkb_attn_block_lse) against the reference, which
 * recomputes the rows' statistics; T past a key tile (512), odd T,
 * windows, segment ids, grouped heads, f32, f16 and bf16 (the AVX512-BF16
 * products where the CPU has them).  attn_operand checks
 * the forward's log-sum-exps; moved by 1, the result must change (the
 * kernel reads them). */
static void test_attention_bwd_lse(void)
{
	static const int64_t gq[][6] = {
	        /* T, heads, kv_heads, hd, causal, window */
	        {19, 4, 1, 16, 1, 5},  {70, 2, 2, 64, 1, 0},  {37, 4, 2, 32, 0, 9},
	        {33, 2, 1, 48, 1, 0},  {23, 2, 2, 80, 0, 6},  {600, 2, 1, 16, 1, 0},
	        {530, 2, 2, 32, 0, 300}, {1100, 1, 1, 16, 1, 700},
	};
	static const IrDtype types[] = {IR_F32, IR_F16, IR_BF16};
	for (int ti = 0; ti < 3; ti++)
		for (size_t c = 0; c < sizeof gq / sizeof gq[0]; c++)
			for (int useseg = 0; useseg < 2; useseg++)
				for (int shift = 0; shift < 2; shift++) {
					const int64_t *g = gq[c];
					IrDtype t = types[ti];
					IrModule *m = mod();
					int dy = leaf(m, t, 3, 2, g[0], g[1] * g[3]);
					int fo[4] = {leaf(m, t, 3, 2, g[0], g[1] * g[3]),
					             leaf(m, t, 3, 2, g[0], g[2] * g[3]),
					             leaf(m, t, 3, 2, g[0], g[2] * g[3]),
					             leaf(m, IR_I32, 2, 2, g[0], 0)};
					IrAttrAttn at = {.heads = g[1], .causal = g[4], .kv_heads = g[2],
					                 .window = g[5], .lse = 1};
					IrNode *y = ir_node_new(m, IR_OP_ATTENTION, fo, 3 + useseg,
					                        (SrcLoc){0});
					*ir_attr_attn_mut(m, y) = at;
					CHECK(ir_infer(m, y, &diag));
					int bo[6] = {dy, fo[0], fo[1], fo[2], fo[3], y->id};
					bo[4 + useseg] = y->id;
					IrNode *n = ir_node_new(m, IR_OP_ATTENTION_BWD, bo, 5 + useseg,
					                        (SrcLoc){0});
					*ir_attr_attn_mut(m, n) = at;
					CHECK(ir_infer(m, n, &diag));
					char what[80];
					snprintf(what, sizeof what, "attention_bwd lse case %zu%s %s%s", c,
					         useseg ? " segments" : "", ir_dtype_name(t),
					         shift ? " (moved)" : "");
					lse_shift = shift ? 1.0f : 0.0f;
					run(what, m, n->id, dtmk_attention_bwd, 2, ti ? BF16 : F32);
				}
	lse_shift = 0;
}

static void test_cross_entropy_bwd(void)
{
	/* f32, and bf16 logits and result (widened and narrowed a row at a
	 * time) */
	for (int bf = 0; bf < 2; bf++) {
		IrDtype t = bf ? IR_BF16 : IR_F32;
		IrModule *m = mod();
		int o[3] = {leaf(m, t, 0, 0, 0, 0), leaf(m, t, 3, 2, 3, 7),
		            leaf(m, IR_I32, 2, 2, 3, 0)};
		run(bf ? "cross_entropy_bwd bf16" : "cross_entropy_bwd", m,
		    node(m, IR_OP_CROSS_ENTROPY_BWD, 3, o, 0, NULL, 0, false, NULL),
		    dtmk_cross_entropy_bwd, 7, bf ? BF16 : F32);
	}
}

/* ---- the way a kernel's work is cut changes no bit (issue 13 point 9) ----
 *
 * As in test_kernels_fwd.c: the hot gradient kernels on shapes big enough
 * that they call parallel_for, run serially and cut in 2, 3 and 4
 * contiguous ranges (the pool's cut, last range first) and in ranges of
 * one item; the outputs must be the same bytes. */

static int parts_n, cut_calls;

static void parts_for(const DtmCtx *c, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	(void)c;
	(void)grain;
	cut_calls++;
	int64_t np = parts_n ? parts_n : n; /* 0: one item per range */
	for (int64_t i = np - 1; i >= 0; i--) {
		int64_t lo = n * i / np, hi = n * (i + 1) / np;
		if (lo < hi)
			fn(arg, lo, hi);
	}
}

static DtmkTensor ten(DtmDtype t, int rank, int64_t d0, int64_t d1, int64_t d2, int lim)
{
	IrNode n = shape_of(IR_F32, rank, d0, d1, d2);
	DtmkTensor x;
	memset(&x, 0, sizeof x);
	tensor(&x, &n);
	x.dtype = t;
	for (int64_t i = 0; i < x.numel; i++) {
		if (t == DTM_I32)
			((int32_t *)x.p)[i] = (int32_t)((i * 7 + 3) % lim);
		else
			((float *)x.p)[i] = (float)rnd();
	}
	return x;
}

static void same_bits(const char *what, KernelFn fn, DtmkArgs *a)
{
	size_t bytes = 4 * (size_t)a->out.numel;
	char *ref = malloc(bytes);
	DtmCtx serial = {0};
	memset(a->out.p, 0xff, bytes);
	fn(&serial, a);
	memcpy(ref, a->out.p, bytes);
	for (int np = 0; np <= 4; np++) {
		if (np == 1)
			continue;
		DtmCtx c = {.nthreads = 4, .parallel_for = parts_for};
		parts_n = np;
		cut_calls = 0;
		memset(a->out.p, 0xff, bytes);
		fn(&c, a);
		CHECK(cut_calls > 0); /* the shapes are big enough to be cut */
		check_count++;
		if (memcmp(ref, a->out.p, bytes) != 0) {
			check_failures++;
			fprintf(stderr, "%s: the output cut in %d range(s) is not the serial one\n",
			        what, np);
		}
	}
	free(ref);
	for (int k = 0; k < a->nin; k++)
		free(a->in[k].p);
	free(a->out.p);
}

static void test_cut_bits(void)
{
	rng_state = 5;
	for (int ln = 0; ln < 2; ln++)
		for (int gamma = 0; gamma < 2; gamma++) {
			DtmkArgs a = {.nin = gamma ? 2 : 3, .f = {1e-5}};
			a.in[0] = ten(DTM_F32, 2, 300, 48, 0, 0);
			a.in[1] = ten(DTM_F32, 2, 300, 48, 0, 0);
			if (!gamma)
				a.in[2] = ten(DTM_F32, 1, 48, 0, 0, 0);
			a.out = gamma ? ten(DTM_F32, 1, 48, 0, 0, 0)
			              : ten(DTM_F32, 2, 300, 48, 0, 0);
			KernelFn fn = ln ? (gamma ? dtmk_layernorm_bwd_gamma : dtmk_layernorm_bwd)
			                 : (gamma ? dtmk_rmsnorm_bwd_gamma : dtmk_rmsnorm_bwd);
			same_bits(ln ? (gamma ? "layernorm_bwd_gamma" : "layernorm_bwd")
			             : (gamma ? "rmsnorm_bwd_gamma" : "rmsnorm_bwd"),
			          fn, &a);
		}
	DtmkArgs g = {.nin = 2};
	g.in[0] = ten(DTM_F32, 2, 300, 64, 0, 0);
	g.in[1] = ten(DTM_F32, 2, 300, 64, 0, 0);
	g.out = ten(DTM_F32, 2, 300, 64, 0, 0);
	same_bits("gelu_bwd", dtmk_gelu_bwd, &g);
	DtmkArgs st = {.nin = 1};
	st.in[0] = ten(DTM_F32, 2, 300, 600, 0, 0);
	st.out = ten(DTM_F32, 1, 600, 0, 0, 0);
	same_bits("sum_to", dtmk_sum_to, &st);
	/* rope's positions and a contiguous sum's rows over the pool (a GQA
	 * gradient's sum over the query heads of a kv head: inner 64) */
	for (int inv = 0; inv < 2; inv++) {
		DtmkArgs r = {.nin = 1, .nints = 2, .ints = {2, inv}, .f = {10000.0f}};
		r.in[0] = ten(DTM_F32, 3, 3, 40, 64, 0);
		r.out = ten(DTM_F32, 3, 3, 40, 64, 0);
		same_bits(inv ? "rope inverse" : "rope", dtmk_rope, &r);
	}
	DtmkArgs sm = {.nin = 1, .nints = 1, .ints = {1}};
	sm.in[0] = ten(DTM_F32, 3, 300, 4, 64, 0);
	sm.out = ten(DTM_F32, 2, 300, 64, 0, 0);
	same_bits("sum", dtmk_sum, &sm);
	for (int causal = 0; causal < 2; causal++) {
		DtmkArgs a = {.nin = 4, .nints = 2, .ints = {3, causal}};
		for (int k = 0; k < 4; k++)
			a.in[k] = ten(DTM_F32, 3, 3, 20, 24, 0);
		IrNode out = {.dtype = IR_F32, .rank = 4, .shape = {3, 3, 20, 24}};
		tensor(&a.out, &out);
		same_bits("attention_bwd", dtmk_attention_bwd, &a);
	}
	DtmkArgs eb = {.nin = 2};
	eb.in[0] = ten(DTM_F32, 2, 300, 40, 0, 0);
	eb.in[1] = ten(DTM_I32, 1, 300, 0, 0, 97);
	eb.out = ten(DTM_F32, 2, 100, 40, 0, 0);
	same_bits("embed_bwd", dtmk_embed_bwd, &eb);
	DtmkArgs c = {.nin = 3};
	c.in[0] = ten(DTM_F32, 0, 0, 0, 0, 0);
	c.in[1] = ten(DTM_F32, 3, 5, 140, 13, 0);
	c.in[2] = ten(DTM_I32, 2, 5, 140, 0, 13);
	c.out = ten(DTM_F32, 3, 5, 140, 13, 0);
	same_bits("cross_entropy_bwd", dtmk_cross_entropy_bwd, &c);
}

/* ---- ring attention's blocks (codegen/cpu/dtmk_ring.h) ----
 *
 * attn_block and attn_block_bwd run attention's tiled kernels where every
 * query row's keys are one range (dtmk_ring_run); their results must be
 * the scalar item's (dtmk_ring_scalar, which takes every block and the
 * interpreter checks through the e2e ring layouts): outputs and
 * log-sum-exps within 1e-5 (bf16 operands: 1e-2) relative, the same rows
 * attending nothing.  Cases: the ring's steps on cp = 2, 3 and 4, causal
 * or not, balanced chunks (the key blocks whose second chunk comes first
 * rotated), windows over them, segment ids with padding, grouped-query
 * heads, head sizes 16, 32 and 64, T not a multiple of 8 or 16. */

static DtmkTensor ring_ten(DtmDtype t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
	DtmkTensor x = ten(DTM_F32, rank, d0, d1, d2, 0);
	if (t == DTM_BF16) {
		uint16_t *h = (uint16_t *)x.p; /* in place: element i's 2 bytes */
		for (int64_t i = 0; i < x.numel; i++)
			h[i] = bf16_from_f32(((float *)x.p)[i]);
		x.dtype = DTM_BF16;
	}
	return x;
}

static DtmkTensor ring_seg(int64_t B, int64_t T, int salt)
{
	DtmkTensor x = ten(DTM_I32, 2, B, T, 0, 7);
	for (int64_t i = 0; i < x.numel; i++) /* runs of 3 to 5 rows, some padding (-1) */
		((int32_t *)x.p)[i] = (i + salt) % 11 == 0 ? -1 : (int32_t)((i + salt) / 4 % 3);
	return x;
}

/* y against x element by element: |x - y| / (1 + |x|) within rel, infinities
 * alike; a failure names what and counts the elements that differ. */
static bool ring_close(const char *what, const DtmkTensor *x, const DtmkTensor *y, double rel)
{
	int64_t bad = 0;
	double worst = 0;
	for (int64_t i = 0; i < x->numel; i++) {
		double u = dtmk_load(x, i), v = dtmk_load(y, i);
		if (isinf(u) || isinf(v)) {
			bad += u != v;
			continue;
		}
		double d = fabs(u - v) / (1 + fabs(u));
		worst = d > worst ? d : worst;
		bad += !(d <= rel);
	}
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %lld of %lld elements differ (worst %.3g)\n", what,
		        (long long)bad, (long long)x->numel, worst);
	}
	return bad == 0;
}

static int ring_rotated; /* cases whose key block is rotated */

static void ring_case(int64_t n, int64_t idx, int64_t step, int64_t T, int64_t H, int64_t G,
                      int64_t hd, int causal, int64_t W, int balanced, int segs, int64_t seq,
                      DtmDtype dt)
{
	int64_t B = 2, D = H * hd, Dk = G * hd, coords[1] = {idx}, sizes[1] = {n};
	DtmCtx ctx = {.coords = coords, .mesh_naxes = 1, .mesh_sizes = sizes};
	char what[160];
	snprintf(what, sizeof what,
	         "ring n=%lld idx=%lld step=%lld T=%lld H=%lld G=%lld hd=%lld causal=%d W=%lld "
	         "balanced=%d segs=%d seq=%lld %s",
	         (long long)n, (long long)idx, (long long)step, (long long)T, (long long)H,
	         (long long)G, (long long)hd, causal, (long long)W, balanced, segs, (long long)seq,
	         dt == DTM_BF16 ? "bf16" : "f32");
	/* the case takes the path it is meant to */
	int nints = seq ? 9 : 7; /* attn.seq: an uneven ring's padded blocks */
	DtmkArgs probe = {.nints = nints, .ints = {H, causal, G, W, 1, step, balanced, 0, seq}};
	struct dtmk_ring_job pj;
	probe.in[0] = (DtmkTensor){.rank = 3, .shape = {B, T, D}};
	probe.in[1] = (DtmkTensor){.rank = 3, .shape = {B, T, Dk}};
	CHECK(dtmk_ring_setup(&ctx, &probe, 0, &pj));
	/* keys in the order of their places (rotated where they are not) */
	DtmkAttnPos pos = {pj.qoff, pj.qoff2, pj.koff < pj.koff2 || !pj.half ? pj.koff : pj.koff2,
	                   pj.koff < pj.koff2 || !pj.half ? pj.koff2 : pj.koff, pj.half, pj.len};
	CHECK(dtmk_ring_ranges(&pj, &pos));
	ring_rotated += pj.half && pj.koff2 < pj.koff;
	rng_state = (uint64_t)(n * 131 + idx * 17 + step * 7 + T + hd);
	double rel = dt == DTM_BF16 ? 1e-2 : 1e-5;
	DtmkArgs f = {.nin = segs ? 5 : 3, .nints = nints,
	              .ints = {H, causal, G, W, 1, step, balanced, 0, seq}};
	f.in[0] = ring_ten(dt, 3, B, T, D);
	f.in[1] = ring_ten(dt, 3, B, T, Dk);
	f.in[2] = ring_ten(dt, 3, B, T, Dk);
	if (segs) {
		f.in[3] = ring_seg(B, T, 0);
		f.in[4] = ring_seg(B, T, 5);
	}
	DtmkTensor ref = ring_ten(dt, 3, B, T, D + H), got = ring_ten(dt, 3, B, T, D + H);
	f.out = ref;
	dtmk_ring_scalar(&ctx, &f, 0);
	f.out = got;
	dtmk_attn_block(&ctx, &f);
	char w2[200];
	snprintf(w2, sizeof w2, "%s: attn_block", what);
	ring_close(w2, &ref, &got, rel);
	/* the backward given that forward's output as ol */
	DtmkArgs bw = {.nin = segs ? 7 : 5, .nints = nints,
	               .ints = {H, causal, G, W, 1, step, balanced, 0, seq}};
	bw.in[0] = ring_ten(dt, 3, B, T, D);
	bw.in[1] = f.in[0];
	bw.in[2] = f.in[1];
	bw.in[3] = f.in[2];
	bw.in[4] = ref;
	if (segs) {
		bw.in[5] = f.in[3];
		bw.in[6] = f.in[4];
	}
	IrNode o3 = {.dtype = dt == DTM_BF16 ? IR_BF16 : IR_F32, .rank = 4, .shape = {3, B, T, D}};
	DtmkTensor bref, bgot;
	tensor(&bref, &o3);
	tensor(&bgot, &o3);
	bw.out = bref;
	dtmk_ring_scalar(&ctx, &bw, 1);
	bw.out = bgot;
	dtmk_attn_block_bwd(&ctx, &bw);
	snprintf(w2, sizeof w2, "%s: attn_block_bwd", what);
	ring_close(w2, &bref, &bgot, rel);
	for (int k = 0; k < f.nin; k++)
		free(f.in[k].p);
	free(bw.in[0].p);
	free(ref.p);
	free(got.p);
	free(bref.p);
	free(bgot.p);
}

static void test_ring_blocks(void)
{
	/* every step of a balanced causal ring on cp = 2, 3 and 4 */
	for (int64_t n = 2; n <= 4; n++)
		for (int64_t idx = 0; idx < n; idx++)
			for (int64_t step = 0; step < n; step++)
				ring_case(n, idx, step, 20, 2, 2, 16, 1, 0, 1, 0, 0, DTM_F32);
	/* unbalanced, not causal, odd T, segments, GQA, head sizes */
	ring_case(3, 1, 2, 13, 4, 2, 32, 1, 0, 0, 0, 0, DTM_F32);
	ring_case(3, 2, 1, 13, 2, 1, 16, 0, 0, 0, 1, 0, DTM_F32);
	ring_case(2, 1, 1, 24, 2, 2, 64, 1, 0, 1, 1, 0, DTM_F32);
	ring_case(4, 3, 0, 40, 3, 3, 16, 1, 0, 1, 1, 0, DTM_F32);
	/* windows, on one chunk and over balanced chunks (rotated keys
	 * among them: a row's keys one range only in their places' order) */
	ring_case(2, 1, 0, 30, 2, 2, 16, 1, 8, 0, 0, 0, DTM_F32);
	ring_case(2, 0, 1, 30, 2, 2, 16, 0, 8, 0, 1, 0, DTM_F32);
	for (int64_t idx = 0; idx < 3; idx++)
		for (int64_t step = 0; step < 3; step++)
			ring_case(3, idx, step, 24, 2, 2, 16, 1, 6, 1, 1, 0, DTM_F32);
	ring_case(2, 1, 0, 24, 2, 2, 16, 0, 5, 1, 0, 0, DTM_F32);
	/* bf16 operands and results (attention's bf16 products where the CPU
	 * has them: P and dS rounded to bf16, against the scalar item's f32) */
	ring_case(2, 1, 0, 20, 2, 2, 16, 1, 0, 1, 1, 0, DTM_BF16);
	ring_case(3, 0, 2, 15, 4, 2, 32, 1, 0, 0, 0, 0, DTM_BF16); /* every row masked */
	ring_case(3, 2, 1, 15, 4, 2, 32, 0, 0, 0, 0, 0, DTM_BF16);
	ring_case(3, 2, 0, 24, 2, 2, 16, 1, 6, 1, 1, 0, DTM_BF16);
	/* uneven (attn.seq): blocks of ceil(seq / n) rows, keys at or past seq
	 * padding; key blocks partly and (seq 5 on 4 x 2: the last) wholly
	 * padding, causal or not, windows, segments, bf16 */
	for (int64_t idx = 0; idx < 4; idx++)
		for (int64_t step = 0; step < 4; step++)
			ring_case(4, idx, step, 2, 2, 2, 16, 1, 0, 0, 0, 5, DTM_F32);
	/* ... balanced (the padded sequence's chunks: the padding in the
	 * last, member 0's second) */
	for (int64_t idx = 0; idx < 3; idx++)
		for (int64_t step = 0; step < 3; step++) {
			ring_case(3, idx, step, 10, 2, 2, 16, 1, 0, 1, 0, 27, DTM_F32);
			ring_case(3, idx, step, 24, 2, 2, 16, 1, 6, 1, 1, 70, DTM_F32);
		}
	ring_case(4, 0, 1, 4, 2, 2, 16, 1, 0, 1, 1, 13, DTM_BF16);
	for (int64_t step = 0; step < 3; step++) {
		ring_case(3, 2, step, 13, 4, 2, 32, 0, 0, 0, 1, 37, DTM_F32);
		ring_case(3, 1, step, 13, 2, 2, 16, 1, 6, 0, 0, 35, DTM_F32);
		ring_case(3, 0, step, 13, 2, 1, 16, 1, 0, 0, 1, 38, DTM_BF16);
	}
	CHECK(ring_rotated >= 10);
}

int main(void)
{
	diag_init(&diag, stderr);
	arena_init(&arena);
	test_expand_sum_to(IR_F32, F32);
	test_expand_sum_to(IR_BF16, BF16);
	test_acts();
	test_max_bwd();
	test_softmax_bwd();
	test_norm_bwd(IR_F32, F32);
	test_norm_bwd(IR_BF16, BF16);
	test_embed_pad();
	test_attention_bwd();
	test_attention_bwd_lse();
	test_ring_blocks();
	test_cross_entropy_bwd();
	test_cut_bits();
	arena_free(&arena);
	return check_report();
}
