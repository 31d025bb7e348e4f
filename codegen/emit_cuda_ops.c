/* emit_cuda_ops.c - the CUDA code generator's op emitters (see
 * emit_cuda.c for the file they go into and emit_cuda_impl.h for the
 * writers they use).
 *
 * One function per op, or family of ops, each writing one extern "C"
 * kernel for the plan kernel e->pk (its args: the action's buffers, the
 * output last) and setting its launch e->k from the same shapes: a loop
 * body of its own for fused elementwise groups, index arithmetic with
 * constant shapes for data movement, and otherwise a call of a template
 * of codegen/cuda/ (dtmk_cuda_ops.cuh, dtmk_cuda_attn.cuh).  The
 * semantics are the C kernels' (codegen/cpu/), op by op.  The code is
 * written with cg_cu_printf, whose %I, %O and %T name the kernel's args.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit_cuda_impl.h"

/* The kernel's arg j (a node), and the node it computes (its last arg). */
static const IrNode *arg(const CudaEmit *e, int j)
{
	return cg_cu_node(e, e->pk->args[j]);
}

static const IrNode *node(const CudaEmit *e)
{
	return cg_cu_node(e, e->pk->node);
}

/* The extent of x's last dim: the vocabulary of a loss's logits. */
static int64_t last_dim(const IrNode *x)
{
	return x->shape[x->rank - 1];
}

/* Every arg as a typed pointer, each followed by ", ": the inputs const,
 * the output last. */
static void put_args(CudaEmit *e)
{
	for (int j = 0; j < e->pk->nargs; j++)
		cg_cu_printf(e, j < cg_cu_out_arg(e) ? "%I, " : "%W, ", j);
}

/* ---- fused elementwise groups ---- */

/* The CUDA spelling of a fused member's expression (dtmk_cuda.cuh). */
static const CgExprDialect cuda_dialect = {
	.name = "CUDA", .prefix = "dtmc_", .suffix = "", .ctx = "a",
	.to_int = "(int)", .i64 = "dtmc_i64", .coords = "a.coords",
	.put_f32 = cg_cu_put_f32,
};

/* Declares `dtmc_i64 NAME` = x's index for s's flat index i. */
static void put_bcast_index(CudaEmit *e, const IrNode *x, const IrNode *s, const char *name)
{
	int64_t per;
	switch (cg_bcast_kind(x, s, &per)) {
	case CG_BC_FULL: cg_cu_printf(e, "\tconst dtmc_i64 %s = i;\n", name); return;
	case CG_BC_SCALAR: cg_cu_printf(e, "\tconst dtmc_i64 %s = 0;\n", name); return;
	case CG_BC_SUFFIX: cg_cu_printf(e, "\tconst dtmc_i64 %s = i %% %L;\n", name, per); return;
	case CG_BC_PREFIX: cg_cu_printf(e, "\tconst dtmc_i64 %s = i / %L;\n", name, per); return;
	case CG_BC_OTHER: break;
	}
	int R = s->rank;
	int64_t xs[IR_MAX_RANK], st[IR_MAX_RANK], acc = 1;
	cg_bcast_shape(x, s, xs);
	for (int d = R - 1; d >= 0; d--) {
		st[d] = xs[d] == 1 ? 0 : acc;
		acc *= xs[d];
	}
	cg_cu_printf(e, "\tdtmc_i64 %s = 0;\n", name);
	cg_cu_put_decompose(e->out, "i", s->shape, st, R, name, "\t");
}

/* A fused group (root r; members: the nodes whose root is r) or a lone
 * elementwise op (root -1, the member is the node itself): one thread per
 * element of the result. */
static bool emit_elementwise(CudaEmit *e, int r, int self)
{
	FILE *out = e->out;
	const IrNode *res = cg_cu_node(e, self);
	int next = e->pk->nargs - 1;
	const int *ext = e->pk->args;
	fputs("/* ", out);
	for (int x = 0; x <= self; x++)
		if (x == self || (r >= 0 && e->fp->root[x] == r))
			fprintf(out, "%s%%%d ", ir_op_name(cg_cu_node(e, x)->op), x);
	fputs("*/\n", out);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(res));
	for (int k = 0; k < next; k++) {
		char nm[16];
		snprintf(nm, sizeof nm, "j%d", k);
		put_bcast_index(e, arg(e, k), res, nm);
		cg_cu_printf(e, "\tconst float x%d = dtmc_ld(%I, j%d);\n", k, k, k);
	}
	for (int x = 0; x <= self; x++)
		if (x == self || (r >= 0 && e->fp->root[x] == r))
			if (!cg_put_ew_member(out, "\t", &cuda_dialect, e->m, e->fp,
			                      cg_cu_node(e, x), r, ext, next, e->d))
				return false;
	cg_cu_printf(e, "\tdtmc_st(%O, i, t%d);\n", self);
	cg_cu_end_kernel(e);
	return true;
}

/* ---- reductions ---- */

/* The [outer, len, inner] view of a reduction of x over the dims marked
 * in red (dims of extent 1 ignored), when those dims are one contiguous
 * run; false otherwise. */
static bool red_view(const IrNode *x, const bool *red, int64_t *outer, int64_t *len, int64_t *inner)
{
	int first = -1, last = -1;
	bool contiguous = true;
	for (int d = 0; d < x->rank; d++) {
		if (!red[d] || x->shape[d] == 1)
			continue;
		if (first < 0)
			first = d;
		else
			for (int k = last + 1; k < d; k++)
				contiguous &= x->shape[k] == 1;
		last = d;
	}
	if (first < 0) {
		*outer = ir_node_numel(x);
		*len = *inner = 1;
		return true;
	}
	*outer = cg_cu_span(x, 0, first);
	*len = cg_cu_span(x, first, last + 1);
	*inner = cg_cu_span(x, last + 1, x->rank);
	return contiguous;
}

/* x's dims split into the kept ones and the reduced ones (extents and
 * row-major strides, each in order), and the number of elements reduced:
 * the general reduction walks them with cg_cu_put_decompose. */
typedef struct DimSplit {
	int nk, nr;
	int64_t kext[IR_MAX_RANK], kst[IR_MAX_RANK];
	int64_t rext[IR_MAX_RANK], rst[IR_MAX_RANK];
	int64_t count;
} DimSplit;

static void split_dims(const IrNode *x, const bool *red, DimSplit *sp)
{
	int64_t s = 1, xst[IR_MAX_RANK];
	for (int d = x->rank - 1; d >= 0; d--) {
		xst[d] = s;
		s *= x->shape[d];
	}
	sp->nk = sp->nr = 0;
	sp->count = 1;
	for (int d = 0; d < x->rank; d++) {
		if (red[d]) {
			sp->rext[sp->nr] = x->shape[d];
			sp->rst[sp->nr++] = xst[d];
			sp->count *= x->shape[d];
		} else {
			sp->kext[sp->nk] = x->shape[d];
			sp->kst[sp->nk++] = xst[d];
		}
	}
}

static int pow2_at_least(int64_t n, int cap)
{
	int p = 1;
	while (p < n && p < cap)
		p *= 2;
	return p;
}

/* A reduction (op 0 sum, 1 mean, 2 max) of arg 0 over the dims in red,
 * into the output (whose flat order is x's kept dims in order). */
static void emit_reduce(CudaEmit *e, int op, const bool *red)
{
	const IrNode *x = arg(e, 0);
	const char *tx = cg_cu_ctype(x->dtype), *to = cg_cu_ctype(node(e)->dtype);
	int64_t outer, len, inner, nout = ir_node_numel(node(e));
	bool contig = red_view(x, red, &outer, &len, &inner);
	if (contig && inner == 1 && (outer >= 128 || len <= 8192)) {
		cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
		cg_cu_printf(e, "\tdtmc_reduce_rows<%d, %d, %s, %s>(%I, %O, %L, %L);\n",
		             cg_cuda_row_tpo(len), op, tx, to, 0, outer, len);
		cg_cu_end_kernel(e);
		e->k = cg_cuda_launch_rows(outer, len);
		return;
	}
	if (contig && outer * inner < 65536 && len > 1) {
		int cw = inner == 1 ? 1 : pow2_at_least(inner, CG_CUDA_BLOCK);
		int rl = CG_CUDA_BLOCK / cw;
		/* chunks of at least 32 rows per lane, at most 128 of them (the
		 * second phase adds each column's chunks one by one) and about
		 * 2048 items in all */
		int64_t cap = 2048 / outer > 1 ? 2048 / outer : 1;
		cap = cap < 128 ? cap : 128;
		int64_t nch = cg_cu_cdiv(len, (int64_t)rl * 32);
		nch = nch < 1 ? 1 : nch > cap ? cap : nch;
		int64_t rb = cg_cu_cdiv(len, nch);
		nch = cg_cu_cdiv(len, rb);
		int64_t nparts = nch > 1 ? outer * nch * inner : 0;
		cg_cu_put_scratch(e, "float", nparts);
		cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
		cg_cu_printf(e, "\tdtmc_reduce_phased<%d, %d, %s, %s>(%I, %O, ", op, cw, tx, to, 0);
		cg_cu_put_parts_ptr(e, nparts);
		cg_cu_printf(e, ", &dtmc_sync_%N, %L, %L, %L, %L);\n", outer, len, inner, rb);
		cg_cu_end_kernel(e);
		int64_t items =
		        outer * nch + (nch > 1 ? outer * cg_cu_cdiv(inner, CG_CUDA_BLOCK) : 0);
		e->k = cg_cuda_launch_phased(items, CG_CUDA_BLOCK, 0);
		return;
	}
	/* one thread per output: its base offset from the kept dims, then a
	 * walk over the reduced ones */
	DimSplit sp;
	split_dims(x, red, &sp);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 o = dtmc_tid();\n\tif (o >= %L)\n\t\treturn;\n"
	             "\tconst %s *x = (const %s *)a.p[0];\n\tdtmc_i64 base = 0;\n",
	             nout, tx, tx);
	cg_cu_put_decompose(e->out, "o", sp.kext, sp.kst, sp.nk, "base", "\t");
	cg_cu_printf(e,
	             "\tfloat acc = dtmc_red_init<%d>();\n"
	             "\tfor (dtmc_i64 r = 0; r < %L; r++) {\n\t\tdtmc_i64 off = base;\n",
	             op, sp.count);
	cg_cu_put_decompose(e->out, "r", sp.rext, sp.rst, sp.nr, "off", "\t\t");
	cg_cu_printf(e, "\t\tacc = dtmc_red<%d>(acc, dtmc_ld(x, off));\n\t}\n", op);
	if (op == 1)
		cg_cu_printf(e, "\tdtmc_st(%O, o, acc / %D.0f);\n", sp.count);
	else
		cg_cu_printf(e, "\tdtmc_st(%O, o, acc);\n");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(nout);
}

/* The dims of x that sum_to sums over to reach shape of out. */
static void sum_to_dims(const IrNode *x, const IrNode *o, bool *red)
{
	for (int d = 0; d < x->rank; d++) {
		int j = d - (x->rank - o->rank);
		int64_t n = j >= 0 ? o->shape[j] : 1;
		red[d] = n == 1 && x->shape[d] != 1;
	}
}

/* max_bwd(dy, x, y){axes}: a warp per output group. */
static void emit_max_bwd(CudaEmit *e, const bool *red)
{
	FILE *out = e->out;
	DimSplit sp;
	split_dims(arg(e, 1), red, &sp);
	int64_t ny = ir_node_numel(arg(e, 2));
	const char *loop =
	        "\tfor (dtmc_i64 r = lane; r < %L; r += 32) {\n\t\tdtmc_i64 off = base;\n";
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tint lane;\n\tconst dtmc_i64 g = dtmc_row<32>(&lane);\n"
	             "\tif (g >= %L)\n\t\treturn;\n\tdtmc_i64 base = 0;\n",
	             ny);
	cg_cu_put_decompose(out, "g", sp.kext, sp.kst, sp.nk, "base", "\t");
	cg_cu_printf(e,
	             "\tconst float yv = dtmc_ld(%I, g), dyv = dtmc_ld(%I, g);\n\tfloat cnt = 0;\n",
	             2, 0);
	cg_cu_printf(e, loop, sp.count);
	cg_cu_put_decompose(out, "r", sp.rext, sp.rst, sp.nr, "off", "\t\t");
	cg_cu_printf(e,
	             "\t\tcnt += dtmc_ld(%I, off) == yv ? 1.0f : 0.0f;\n\t}\n"
	             "\tcnt = dtmc_warp_sum(cnt);\n",
	             1);
	cg_cu_printf(e, loop, sp.count);
	cg_cu_put_decompose(out, "r", sp.rext, sp.rst, sp.nr, "off", "\t\t");
	cg_cu_printf(e, "\t\tdtmc_st(%O, off, dtmc_ld(%I, off) == yv ? dyv / cnt : 0.0f);\n\t}\n",
	             1);
	cg_cu_end_kernel(e);
	e->k = (CgCudaKernel){.threads = ny * 32, .block = CG_CUDA_BLOCK};
}

/* ---- row ops ---- */

/* softmax / log_softmax (bwd: their gradients) along their axis. */
static void emit_softmax(CudaEmit *e, bool lg, bool bwd)
{
	const IrNode *n = node(e), *x = arg(e, bwd ? 1 : 0);
	int64_t a0 = ir_attr_axis(n)->axis;
	int ax = (int)(a0 < 0 ? a0 + x->rank : a0);
	int64_t outer = cg_cu_span(x, 0, ax), len = x->shape[ax],
	        inner = cg_cu_span(x, ax + 1, x->rank);
	const char *b = bwd ? "_bwd" : "", *l = lg ? "true" : "false";
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (inner == 1)
		cg_cu_printf(e, "\tdtmc_softmax%s_rows<%d, ", b, cg_cuda_row_tpo(len));
	else
		cg_cu_printf(e, "\tdtmc_softmax%s_cols<", b);
	for (int j = 0; j < e->pk->nargs; j++)
		cg_cu_printf(e, j ? ", %T" : "%T", j);
	fputs(">(", e->out);
	put_args(e);
	if (inner == 1)
		cg_cu_printf(e, "%L, %L, %s);\n", outer, len, l);
	else
		cg_cu_printf(e, "%L, %L, %L, %s);\n", outer, len, inner, l);
	cg_cu_end_kernel(e);
	e->k = inner == 1 ? cg_cuda_launch_rows(outer, len)
	                  : cg_cuda_launch_elementwise(outer * inner);
}

/* layernorm(x, g, b) / rmsnorm(x, g), forward or dx (bwd: args dy, x, g). */
static void emit_norm(CudaEmit *e, bool ln, bool bwd)
{
	const IrNode *n = node(e), *x = arg(e, bwd ? 1 : 0);
	int64_t D = x->rank ? x->shape[x->rank - 1] : 1, rows = D ? ir_node_numel(x) / D : 0;
	int tpo = cg_cuda_row_tpo(D), o = cg_cu_out_arg(e);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (bwd || ln) /* (dy, x, g) or (x, g, b) */
		cg_cu_printf(e, "\tdtmc_norm%s_rows<%d, %T, %T, %T, %T>(%I, %I, %I, ",
		             bwd ? "_bwd" : "", tpo, 0, 1, 2, o, 0, 1, 2);
	else /* rmsnorm: no b */
		cg_cu_printf(e,
		             "\tdtmc_norm_rows<%d, %T, %T, float, %T>(%I, %I, (const float *)0, ",
		             tpo, 0, 1, o, 0, 1);
	cg_cu_printf(e, "%O, %L, %L, %F, %s);\n", rows, D, ir_attr_eps(n)->eps, ln ? "true" : "false");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(rows, D);
}

/* layernorm_bwd_gamma / rmsnorm_bwd_gamma (dy, x) -> [D]. */
static void emit_norm_gamma(CudaEmit *e, bool ln)
{
	const IrNode *n = node(e), *x = arg(e, 1);
	int64_t D = x->rank ? x->shape[x->rank - 1] : 1, rows = D ? ir_node_numel(x) / D : 0;
	/* at most about 128 chunks of at least 32 rows (the row statistics
	 * of a chunk stay in shared memory: 2 * rb floats) */
	int64_t rb = cg_cu_cdiv(rows, 128);
	rb = rb < 32 ? 32 : rb > 6144 ? 6144 : rb;
	int64_t nch = cg_cu_cdiv(rows, rb), nparts = nch > 1 ? nch * D : 0;
	cg_cu_put_scratch(e, "float", nparts);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_norm_gamma<%T, %T, %T>(%I, %I, %O, ", 0, 1, cg_cu_out_arg(e), 0, 1);
	cg_cu_put_parts_ptr(e, nparts);
	cg_cu_printf(e, ", &dtmc_sync_%N, %L, %L, %d, %F, %s);\n", rows, D, (int)rb, ir_attr_eps(n)->eps,
	             ln ? "true" : "false");
	cg_cu_end_kernel(e);
	int64_t items = nch + (nch > 1 ? cg_cu_cdiv(D, CG_CUDA_BLOCK) : 0);
	e->k = cg_cuda_launch_phased(items, CG_CUDA_BLOCK, (int)(2 * rb * 4));
}

/* ---- losses ---- */

static void emit_cross_entropy(CudaEmit *e)
{
	int64_t V = last_dim(arg(e, 0)), N = ir_node_numel(arg(e, 1));
	int tpo = cg_cuda_row_tpo(V);
	cg_cu_put_scratch(e, "double", N > 0 ? N : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tdtmc_cross_entropy<%d, %T, %T>(%I, (const int *)a.p[1], %O, dtmc_part_%N, "
	             "&dtmc_sync_%N, %L, %L);\n",
	             tpo, 0, cg_cu_out_arg(e), 0, N, V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(cg_cu_cdiv(N, CG_CUDA_BLOCK / tpo) + 1, CG_CUDA_BLOCK, 0);
}

static void emit_cross_entropy_bwd(CudaEmit *e)
{
	int64_t V = last_dim(arg(e, 1)), N = ir_node_numel(arg(e, 2));
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(
	        e,
	        "\tdtmc_cross_entropy_bwd<%d, %T, %T, %T>(%I, %I, (const int *)a.p[2], %O, %L, "
	        "%L);\n",
	        cg_cuda_row_tpo(V), 0, 1, cg_cu_out_arg(e), 0, 1, N, V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(N, V);
}

#define SUMSQ_CHUNK 8192

static void emit_mse(CudaEmit *e)
{
	int64_t N = ir_node_numel(arg(e, 0)), n0 = cg_cu_cdiv(N, SUMSQ_CHUNK);
	cg_cu_put_scratch(e, "double", n0 > 0 ? n0 : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_mse(%I, %I, %O, dtmc_part_%N, &dtmc_sync_%N, %L, %dLL);\n", 0, 1, N,
	             SUMSQ_CHUNK);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(n0 + 1, CG_CUDA_BLOCK, 0);
}

/* grad_norm over this kernel's args (all but the output): sums of squares
 * of SUMSQ_CHUNK-element chunks into parts, then their sum in order; a
 * chunked grad_norm keeps its running sum in f64 at MEMPLAN_GNORM_ACC of
 * the output, as the C kernels do. */
static void emit_grad_norm(CudaEmit *e)
{
	int ng = e->pk->nargs - 1, o = cg_cu_out_arg(e);
	int64_t base[DTM_MAX_ARGS + 1];
	base[0] = 0;
	for (int k = 0; k < ng; k++)
		base[k + 1] = base[k] + cg_cu_cdiv(ir_node_numel(arg(e, k)), SUMSQ_CHUNK);
	int64_t n0 = base[ng];
	cg_cu_put_scratch(e, "double", n0 > 0 ? n0 : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tDtmcSync *s = &dtmc_sync_%N;\n\tfor (;;) {\n"
	             "\t\tconst unsigned it = dtmc_next_item(s);\n\t\tif (it >= %U)\n\t\t\tbreak;\n"
	             "\t\tif (it < %U) {\n\t\t\tdouble v = 0;\n",
	             n0 + 1, n0);
	for (int k = 0; k < ng; k++) {
		if (base[k + 1] == base[k])
			continue;
		int64_t nel = ir_node_numel(arg(e, k));
		if (base[k])
			cg_cu_printf(e, "\t\t\tif (it >= %U && it < %U) {\n", base[k], base[k + 1]);
		else
			cg_cu_printf(e, "\t\t\tif (it < %U) {\n", base[k + 1]);
		cg_cu_printf(e,
		             "\t\t\t\tconst dtmc_i64 lo = (dtmc_i64)(it - %U) * %d;\n"
		             "\t\t\t\tv = dtmc_sumsq_range(%I, (const float *)0, lo, "
		             "lo + %d < %L ? lo + %d : %L);\n\t\t\t}\n",
		             base[k], SUMSQ_CHUNK, k, SUMSQ_CHUNK, nel, SUMSQ_CHUNK, nel);
	}
	cg_cu_printf(e,
	             "\t\t\tif (threadIdx.x == 0)\n\t\t\t\tdtmc_part_%N[it] = v;\n"
	             "\t\t\tdtmc_item_done(s, 0);\n\t\t\tcontinue;\n\t\t}\n"
	             "\t\tdtmc_wait_phase(s, 0, %U);\n\t\tdouble t = 0;\n"
	             "\t\tfor (unsigned k = threadIdx.x; k < %U; k += DTMC_BLOCK)\n"
	             "\t\t\tt += __ldcg(&dtmc_part_%N[k]);\n\t\tt = dtmc_block_sum(t);\n"
	             "\t\tif (threadIdx.x == 0) {\n",
	             n0, n0);
	if (e->pk->nchunks > 1) {
		cg_cu_printf(e, "\t\t\tdouble *acc = (double *)((char *)a.p[%d] + %d);\n", o,
		             MEMPLAN_GNORM_ACC);
		cg_cu_printf(e, "\t\t\tconst double sum = %s + t;\n\t\t\t*acc = sum;\n",
		             e->pk->chunk ? "*acc" : "0.0");
		if (e->pk->chunk == e->pk->nchunks - 1)
			cg_cu_printf(e, "\t\t\t*(float *)a.p[%d] = (float)(sqrt(sum) * "
			             "dtmc_inv_scale(a));\n", o);
	} else {
		cg_cu_printf(e, "\t\t\t*(float *)a.p[%d] = (float)(sqrt(t) * dtmc_inv_scale(a));\n",
		             o);
	}
	fputs("\t\t}\n\t}\n\tdtmc_sync_exit(s);\n", e->out);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(n0 + 1, CG_CUDA_BLOCK, 0);
}

/* ---- attention ---- */

/* The number of ranks in the group of mesh axes `axes` (1 for none). */
static int64_t group_size(const CudaEmit *e, uint32_t axes)
{
	int64_t n = 1;
	for (int k = 0; k < e->m->mesh.naxes; k++)
		if (axes >> k & 1)
			n *= e->m->mesh.sizes[k];
	return n;
}

/* Declares `at`, the DtmcAttn (dtmk_cuda_attn.cuh) of attention, its
 * backward or a ring block op: q and k its operands, Dy the output's row
 * width, seg and kseg the args of the query and key rows' segment ids or
 * -1 (attention: the same arg).  The attributes are the C
 * kernels' (cg_kernel_attrs: ints = {heads, causal, kv_heads, window,
 * ring, step, balanced[, lse, seq]}, mesh_axes = head_axes), so both back ends read
 * the same numbers; this rank's first query head and ring blocks come
 * from its coordinates at run time. */
static void put_attn(CudaEmit *e, const IrNode *q, const IrNode *k, int64_t Dy, int seg,
                     int kseg)
{
	CgKernelAttrs ka;
	cg_kernel_attrs(node(e), &ka);
	int64_t B = q->shape[0], T = q->shape[1], D = q->shape[2], H = ka.ints[0];
	int64_t hd = H > 0 ? D / H : D, G = ka.ints[2] > 0 ? ka.ints[2] : H;
	int64_t parts = group_size(e, ka.mesh_axes);
	int64_t g = G > 0 && H * parts >= G ? H * parts / G : 1;
	uint32_t ring = ka.nints > 4 ? (uint32_t)ka.ints[4] : 0;
	int lse = ka.nints > 7 && ka.ints[7] ? 1 : 0; /* attn.lse */
	cg_cu_put_group_var(e, "hidx", ka.mesh_axes);
	if (ring)
		cg_cu_put_group_var(e, "ridx", ring);
	cg_cu_printf(
	        e, "\tconst DtmcAttn at = {%d, %d, %d, %d, %d, %d, %d, (int)(hidx * %L), %F, %d, ",
	        (int)B, (int)T, (int)H, (int)D, (int)k->shape[2], (int)Dy, (int)g, H,
	        1.0 / sqrt((double)hd), (int)ka.ints[3]);
	if (seg >= 0)
		cg_cu_printf(e, "(const int *)a.p[%d], (const int *)a.p[%d], ", seg, kseg);
	else
		cg_cu_printf(e, "(const int *)0, (const int *)0, ");
	if (!ring) { /* attention: local rows are positions */
		cg_cu_printf(e, "{%d, 0, 0}, {%d, 0, 0}, %d};\n", (int)T, (int)T, lse);
		return;
	}
	int64_t n = group_size(e, ring), step = ka.ints[5];
	const char *bal = ka.nints > 6 && ka.ints[6] ? "true" : "false";
	int64_t len = ka.nints > 8 ? ka.ints[8] : 0; /* attn.seq: uneven blocks */
	cg_cu_printf(e,
	             "dtmc_attn_ring_pos((int)ridx, %d, %d, %s), "
	             "dtmc_attn_ring_pos((int)(((ridx - %L) %% %L + %L) %% %L), %d, %d, %s), 0",
	             (int)n, (int)T, bal, step, n, n, n, (int)n, (int)T, bal);
	if (len)
		cg_cu_printf(e, ", %d", (int)len);
	cg_cu_printf(e, "};\n");
}

/* attention / attn_block (q, k, v[, seg] / [, qseg, kseg]) and
 * attention_bwd / attn_block_bwd (dy, q, k, v[, seg] / ol[, qseg, kseg]). */
static void emit_attention(CudaEmit *e, bool bwd, bool ring)
{
	const IrNode *n = node(e), *q = arg(e, bwd ? 1 : 0), *k = arg(e, bwd ? 2 : 1);
	int64_t B = q->shape[0], T = q->shape[1], D = q->shape[2], H = ir_attr_attn(n)->heads;
	int64_t hd = H > 0 ? D / H : D;
	bool causal = ir_attr_attn(n)->causal != 0;
	int extra = bwd ? 4 : 3; /* seg (attention) or ol (attn_block_bwd) */
	bool has_extra = cg_cu_out_arg(e) > extra;
	int s0 = ring ? (bwd ? 5 : 3) : extra; /* the segment ids' args */
	int seg = ring ? (cg_cu_out_arg(e) > s0 + 1 ? s0 : -1) : has_extra ? extra : -1;
	int yi = bwd && !ring ? ir_attn_bwd_y(n) : -1; /* attn.lse: the forward */
	if (bwd && !ring)
		seg = ir_attn_bwd_seg(n);
	if (bwd) /* the row statistics: [B, H, T, 2] */
		cg_cu_put_scratch(e, "float", B * H * T * 2 > 0 ? B * H * T * 2 : 1);
	cg_cu_begin_kernel(e, CG_CUDA_ATTN_BLOCK);
	put_attn(e, q, k, ring && !bwd ? D + H : D, seg, seg >= 0 && ring ? seg + 1 : seg);
	int o = cg_cu_out_arg(e), hp = cg_cuda_attn_parts(hd), bk = cg_cuda_attn_tile(hd);
	const char *c = causal ? "true" : "false";
	if (!bwd) {
		cg_cu_printf(e, "\tdtmc_attn_fwd<%T, %T, %D, %d, %d, %s>(%I, %I, %I, %O, at);\n", 0,
		             o, hd, hp, bk, c, 0, 1, 2);
	} else if (ring) {
		cg_cu_printf(e,
		             "\tdtmc_attn_bwd<%T, %T, %T, %D, %d, %d, %s>(%I, %I, %I, %I, %I, %O, ",
		             1, 4, o, hd, hp, bk, c, 0, 1, 2, 3, 4);
	} else if (yi >= 0) { /* the forward's output and log-sum-exps (at.lse) */
		cg_cu_printf(e,
		             "\tdtmc_attn_bwd<%T, %T, %T, %D, %d, %d, %s>(%I, %I, %I, %I, %I, %O, ",
		             1, yi, o, hd, hp, bk, c, 0, 1, 2, 3, yi);
	} else {
		cg_cu_printf(e,
		             "\tdtmc_attn_bwd<%T, float, %T, %D, %d, %d, %s>(%I, %I, %I, %I, "
		             "(const float *)0, %O, ",
		             1, o, hd, hp, bk, c, 0, 1, 2, 3);
	}
	if (bwd)
		cg_cu_printf(e, "dtmc_part_%N, &dtmc_sync_%N, at);\n");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_attention(B, T, D, H, bwd);
}

/* attn_merge(x1, x2 [B, T, D + H]): a thread per (row, head). */
static void emit_attn_merge(CudaEmit *e)
{
	const IrNode *n = node(e);
	int64_t H = ir_attr_attn(n)->heads, rows = n->shape[0] * n->shape[1];
	int64_t hd = H > 0 ? (n->shape[2] - H) / H : 0;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_attn_merge(%I, %I, %O, %L, %d, %d);\n", 0, 1, rows, (int)H,
	             (int)hd);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(rows * H);
}

/* ---- data movement ---- */

/* One thread per output element (i), with this rank's group index (idx)
 * first when `group`: the caller writes the lines computing `v` (a
 * float) between the two, end_ew stores it. */
static void begin_ew(CudaEmit *e, bool group)
{
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (group)
		cg_cu_put_group_index(e, ir_attr_coll(node(e))->axes);
	cg_cu_put_ew_head(e, ir_node_numel(node(e)));
}

static void end_ew(CudaEmit *e)
{
	cg_cu_printf(e, "\tdtmc_st(%O, i, v);\n");
	cg_cu_end_kernel(e);
}

static void emit_permute(CudaEmit *e)
{
	const IrNode *n = node(e), *x = arg(e, 0);
	int r = n->rank;
	int64_t xs[IR_MAX_RANK], st[IR_MAX_RANK], s = 1;
	for (int d = r - 1; d >= 0; d--) {
		xs[d] = s;
		s *= x->shape[d];
	}
	for (int d = 0; d < r; d++)
		st[d] = xs[ir_attr_perm(n)->perm[d]];
	begin_ew(e, false);
	fputs("\tdtmc_i64 off = 0;\n", e->out);
	cg_cu_put_decompose(e->out, "i", n->shape, st, r, "off", "\t");
	cg_cu_printf(e, "\tconst float v = dtmc_ld(%I, off);\n", 0);
	end_ew(e);
}

/* reshape: a copy, none when it shares its operand's bytes. */
static void emit_copy(CudaEmit *e)
{
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tif (a.p[0] == a.p[%d])\n\t\treturn;\n", cg_cu_out_arg(e));
	cg_cu_put_ew_head(e, ir_node_numel(node(e)));
	cg_cu_printf(e, "\tconst float v = dtmc_ld(%I, i);\n", 0);
	end_ew(e);
}

/* slice (lo from the attrs) or shard_slice (lo = this rank's chunk):
 * [outer, len, inner] -> [outer, c, inner]. */
static void emit_slice(CudaEmit *e, bool shard)
{
	const IrNode *n = node(e), *x = arg(e, 0);
	int64_t a0 = shard ? ir_attr_coll(n)->dim : ir_attr_slice(n)->axis;
	int ax = (int)(a0 < 0 ? a0 + x->rank : a0);
	int64_t inner = cg_cu_span(x, ax + 1, x->rank), len = x->shape[ax], c = n->shape[ax];
	begin_ew(e, shard);
	cg_cu_printf(e, "\tconst dtmc_i64 o = i / %L, rem = i %% %L;\n", c * inner, c * inner);
	if (shard)
		cg_cu_printf(e, "\tconst dtmc_i64 lo = idx * %L;\n", c);
	else
		cg_cu_printf(e, "\tconst dtmc_i64 lo = %L;\n", ir_attr_slice(n)->start);
	cg_cu_printf(e, "\tconst float v = dtmc_ld(%I, (o * %L + lo) * %L + rem);\n", 0, len,
	             inner);
	end_ew(e);
}

/* pad(x){axis, start, end}: zeros of the output's shape, x at [start, end). */
static void emit_pad(CudaEmit *e)
{
	const IrNode *n = node(e), *x = arg(e, 0);
	int ax = (int)ir_attr_slice(n)->axis;
	int64_t lo = ir_attr_slice(n)->start, len = n->shape[ax], xl = x->shape[ax];
	int64_t inner = cg_cu_span(n, ax + 1, n->rank);
	begin_ew(e, false);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 o = i / %L, pos = i / %L %% %L - %L;\n"
	             "\tconst float v = pos >= 0 && pos < %L ? "
	             "dtmc_ld(%I, (o * %L + pos) * %L + i %% %L) : 0.0f;\n",
	             len * inner, inner, len, lo, xl, 0, xl, inner, inner);
	end_ew(e);
}

/* pad_mask(x){dim, extent, low}: the padding rows of this rank's uneven
 * shard become 0 or the dtype's lowest finite value (dtmk_pad.h's). */
static void emit_pad_mask(CudaEmit *e)
{
	const IrNode *n = node(e), *x = arg(e, 0);
	const IrAttrColl *pm = ir_attr_coll(n);
	int ax = (int)pm->pad.dim;
	int64_t c = x->shape[ax], inner = cg_cu_span(x, ax + 1, x->rank), ext = pm->pad.size;
	double low = n->dtype == IR_F16    ? -65504.0
	             : n->dtype == IR_BF16 ? -3.38953139e38
	                                   : -3.40282347e38;
	begin_ew(e, true);
	cg_cu_printf(
	        e,
	        "\tconst dtmc_i64 pos = i / %L %% %L;\n"
	        "\tif (idx * %L + pos < %L) {\n\t\tif (a.p[0] != a.p[%d])\n\t\t\t%O[i] = %I[i];\n"
	        "\t\treturn;\n\t}\n\tconst float v = %F;\n",
	        inner, c, c, ext, cg_cu_out_arg(e), 0, pm->pad.low ? low : 0.0);
	end_ew(e);
}

/* concat(x0, x1, ...) along its axis. */
static void emit_concat(CudaEmit *e)
{
	const IrNode *n = node(e);
	int64_t a0 = ir_attr_axis(n)->axis;
	int ax = (int)(a0 < 0 ? a0 + n->rank : a0);
	int64_t inner = cg_cu_span(n, ax + 1, n->rank), len = n->shape[ax];
	begin_ew(e, false);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 o = i / %L, pos = i / %L %% %L, in = i %% %L;\n\tfloat v;\n",
	             len * inner, inner, len, inner);
	int64_t at = 0;
	for (int k = 0; k < cg_cu_out_arg(e); k++) {
		int64_t l = arg(e, k)->shape[ax];
		cg_cu_printf(
		        e,
		        "\t%sif (pos < %L)\n\t\tv = dtmc_ld(%I, (o * %L + pos - %L) * %L + in);\n",
		        k ? "else " : "", at + l, k, l, at, inner);
		at += l;
	}
	fputs("\telse\n\t\tv = 0.0f;\n", e->out);
	end_ew(e);
}

/* expand(x): x broadcast to the output's shape. */
static void emit_expand(CudaEmit *e)
{
	begin_ew(e, false);
	put_bcast_index(e, arg(e, 0), node(e), "j");
	cg_cu_printf(e, "\tconst float v = dtmc_ld(%I, j);\n", 0);
	end_ew(e);
}

/* rope(x [..., T, D]): a thread per element, which loads its pair's other
 * half; positions start at idx * T (idx: the rank's index in rope.axes,
 * 0 when T is whole); the angle, cos and sin in double, as the C kernel. */
static void emit_rope(CudaEmit *e)
{
	const IrNode *n = node(e);
	const IrAttrRope *ra = ir_attr_rope(n);
	int64_t D = last_dim(n), T = n->shape[n->rank - 2];
	int64_t hd = ra->heads > 0 ? D / ra->heads : D, half = hd / 2;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_group_index(e, ra->axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	cg_cu_printf(e,
	             "	const dtmc_i64 j = i %% %L, p = idx * %L + i / %L %% %L;\n"
	             "	const bool lo = j < %L;\n"
	             "	const double ang = (double)p * pow(%G, -2.0 * (double)(lo ? j : j - %L) / %G);\n"
	             "	const float c = (float)cos(ang), s = (float)(%G * sin(ang));\n"
	             "	const float x0 = dtmc_ld(%I, i), x1 = dtmc_ld(%I, lo ? i + %L : i - %L);\n"
	             "	const float v = lo ? x0 * c - x1 * s : x0 * c + x1 * s;\n",
	             hd, T, D, T, half, ra->theta, half, (double)hd, ra->inverse ? -1.0 : 1.0, 0, 0,
	             half, half);
	end_ew(e);
}

/* embed(table [V, D], ids) / embed_vp (rows idx * V + [0, V)). */
static void emit_embed(CudaEmit *e, bool vp)
{
	const IrNode *t = arg(e, 0);
	int64_t V = t->shape[0], D = t->shape[1];
	begin_ew(e, vp);
	cg_cu_printf(e, "\tconst dtmc_i64 r = (dtmc_i64)((const int *)a.p[1])[i / %L]", D);
	if (vp)
		cg_cu_printf(e, " - idx * %L", V);
	cg_cu_printf(
	        e,
	        ";\n\tconst float v = r >= 0 && r < %L ? dtmc_ld(%I, r * %L + i %% %L) : 0.0f;\n",
	        V, 0, D, D);
	end_ew(e);
}

static void emit_embed_bwd(CudaEmit *e, bool vp)
{
	const IrNode *n = node(e);
	int64_t V = n->shape[0], D = n->shape[1], N = ir_node_numel(arg(e, 1));
	int64_t nc = cg_cu_cdiv(D, 32);
	nc = nc < 1 ? 1 : nc > 16 ? 16 : nc;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (vp)
		cg_cu_put_group_index(e, ir_attr_coll(n)->axes);
	cg_cu_printf(e, "\tdtmc_embed_bwd<%d, %T, %T>(%I, (const int *)a.p[1], %O, %L, %L, %L, ",
	             (int)nc, 0, cg_cu_out_arg(e), 0, V, D, N);
	if (vp)
		cg_cu_printf(e, "idx * %L);\n", V);
	else
		cg_cu_printf(e, "0);\n");
	cg_cu_end_kernel(e);
	e->k = (CgCudaKernel){.threads = V * 32, .block = CG_CUDA_BLOCK};
}

/* ---- routing (ops.def; the C kernels: codegen/cpu/dtmk_route.h) ---- */

/* topk(x [rows, n]) -> i32[rows, k]: a thread per row. */
static void emit_topk(CudaEmit *e)
{
	const IrNode *n = node(e);
	int64_t k = ir_attr_route(n)->k, rows = k > 0 ? ir_node_numel(n) / k : 0;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_topk<%T>(%I, %O, %L, %L, %L);\n", 0, 0, rows, last_dim(arg(e, 0)),
	             k);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(rows);
}

/* one_hot(ids) -> [..., n]: elementwise. */
static void emit_one_hot(CudaEmit *e)
{
	int64_t n = ir_attr_route(node(e))->n;
	begin_ew(e, false);
	cg_cu_printf(e,
	             "\tconst float v = i %% %L == (dtmc_i64)((const int *)a.p[0])[i / %L] ? "
	             "1.0f : 0.0f;\n",
	             n, n);
	end_ew(e);
}

/* gather and scatter_add's index space: G groups of m indices (idx's
 * leading dims, then its last) into an extent n of rows of r elements in
 * big, the indexed operand (gather's x, scatter_add's result). */
static void route_dims(const IrNode *idx, const IrNode *big, int64_t *G, int64_t *m, int64_t *n,
                       int64_t *r)
{
	int b = idx->rank - 1;
	*G = cg_cu_span(idx, 0, b);
	*m = idx->shape[b];
	*n = big->shape[b];
	*r = cg_cu_span(big, b + 1, big->rank);
}

/* gather(x [G, n, r], idx [G, m]) -> [G, m, r]: elementwise, 0 for an
 * index outside [0, n). */
static void emit_gather(CudaEmit *e)
{
	int64_t G, m, n, r;
	route_dims(arg(e, 1), arg(e, 0), &G, &m, &n, &r);
	begin_ew(e, false);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 g = i / %L, c = i %% %L;\n"
	             "\tconst dtmc_i64 j = ((const int *)a.p[1])[i / %L];\n"
	             "\tconst float v = j >= 0 && j < %L ? dtmc_ld(%I, (g * %L + j) * %L + c) : "
	             "0.0f;\n",
	             m * r, r, r, n, 0, n, r);
	end_ew(e);
}

/* scatter_add(y [G, m, r], idx [G, m]) -> [G, n, r]: a warp per row. */
static void emit_scatter_add(CudaEmit *e)
{
	int64_t G, m, n, r;
	route_dims(arg(e, 1), node(e), &G, &m, &n, &r);
	int64_t nc = cg_cu_cdiv(r, 32);
	nc = nc < 1 ? 1 : nc > 16 ? 16 : nc;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tdtmc_scatter_add<%d, %T, %T>(%I, (const int *)a.p[1], %O, %L, %L, %L, "
	             "%L);\n",
	             (int)nc, 0, cg_cu_out_arg(e), 0, G, m, n, r);
	cg_cu_end_kernel(e);
	e->k = (CgCudaKernel){.threads = G * n * 32, .block = CG_CUDA_BLOCK};
}

/* moe_slot / moe_token(e [G, S, k]): a thread per group and expert. */
static void emit_moe_route(CudaEmit *e, bool slot)
{
	const IrNode *x = arg(e, 0);
	const IrAttrRoute *ra = ir_attr_route(node(e));
	int64_t S = x->shape[x->rank - 2], k = x->shape[x->rank - 1];
	int64_t G = S * k > 0 ? ir_node_numel(x) / (S * k) : 0;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_moe_route(%I, %s%O%s, %L, %L, %L, %L, %L);\n", 0,
	             slot ? "" : "(int *)0, ", slot ? ", (int *)0" : "", G, S, k, ra->n,
	             ra->capacity);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(G * ra->n);
}

/* ce_target(logits [N, Vl], targets) -> [N]: the target's logit here, else 0. */
static void emit_ce_target(CudaEmit *e)
{
	int64_t V = last_dim(arg(e, 0));
	begin_ew(e, true);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 r = (dtmc_i64)((const int *)a.p[1])[i] - idx * %L;\n"
	             "\tconst float v = r >= 0 && r < %L ? dtmc_ld(%I, i * %L + r) : 0.0f;\n",
	             V, V, 0, V);
	end_ew(e);
}

static void emit_ce_sumexp(CudaEmit *e)
{
	int64_t V = last_dim(arg(e, 0)), N = ir_node_numel(node(e));
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_ce_sumexp<%d, %T, %T, %T>(%I, %I, %O, %L, %L);\n",
	             cg_cuda_row_tpo(V), 0, 1, cg_cu_out_arg(e), 0, 1, N, V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(N, V);
}

/* ce_bwd_vp(dl, logits [N, Vl], targets, mx, se): elementwise. */
static void emit_ce_bwd_vp(CudaEmit *e)
{
	int64_t V = last_dim(arg(e, 1)), N = ir_node_numel(arg(e, 2));
	begin_ew(e, true);
	cg_cu_printf(
	        e,
	        "\tconst dtmc_i64 r = i / %L, j = i %% %L;\n"
	        "\tconst float dl = dtmc_ld(%I, 0) / %D.0f;\n"
	        "\tconst float p = expf(dtmc_ld(%I, i) - dtmc_ld(%I, r)) / dtmc_ld(%I, r) * dl;\n"
	        "\tconst float v = j == (dtmc_i64)((const int *)a.p[2])[r] - idx * %L ? p - dl : "
	        "p;\n",
	        V, V, 0, N ? N : 1, 1, 3, 4, V);
	end_ew(e);
}

/* relu_bwd, gelu_bwd, silu_bwd (dy, x). */
static void emit_act_bwd(CudaEmit *e, const char *expr)
{
	begin_ew(e, false);
	cg_cu_printf(
	        e, "\tconst float g = dtmc_ld(%I, i), x = dtmc_ld(%I, i);\n\tconst float v = %s;\n",
	        0, 1, expr);
	end_ew(e);
}

static void emit_const(CudaEmit *e)
{
	begin_ew(e, false);
	cg_cu_printf(e, "\tconst float v = %F;\n", ir_attr_scalar(node(e))->value);
	end_ew(e);
}

/* loss_scale: the runtime's scale S (1 when off), the backward's seed. */
static void emit_loss_scale(CudaEmit *e)
{
	begin_ew(e, false);
	cg_cu_printf(e, "\tconst float v = a.loss_scale > 0.0f ? a.loss_scale : 1.0f;\n");
	end_ew(e);
}

/* The strides of x's batch dims (the nb dims before the last two of the
 * output, right-aligned; 0 where x has extent 1 and broadcasts) for
 * matrices of s elements. */
static void batch_strides(const IrNode *x, int nb, int64_t s, int64_t *st)
{
	for (int i = nb - 1, j = x->rank - 3; i >= 0; i--, j--) {
		int64_t n = j >= 0 ? x->shape[j] : 1;
		st[i] = n == 1 ? 0 : s;
		s *= n;
	}
}

/* A matmul one strided GEMM cannot express (batch dims that broadcast
 * unevenly): one thread per output element, f32 accumulation. */
static void emit_matmul(CudaEmit *e)
{
	const IrNode *C = node(e), *A = arg(e, 0), *B = arg(e, 1);
	int r = C->rank, nb = r - 2;
	int64_t M = C->shape[r - 2], N = C->shape[r - 1], K = A->shape[A->rank - 1];
	int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
	batch_strides(A, nb, M * K, sa);
	batch_strides(B, nb, K * N, sb);
	begin_ew(e, false);
	cg_cu_printf(e,
	             "\tconst dtmc_i64 bi = i / %L, row = i / %L %% %L, col = i %% %L;\n"
	             "\tdtmc_i64 oa = 0, ob = 0;\n",
	             M * N, N, M, N);
	cg_cu_put_decompose(e->out, "bi", C->shape, sa, nb, "oa", "\t");
	cg_cu_put_decompose(e->out, "bi", C->shape, sb, nb, "ob", "\t");
	cg_cu_printf(e,
	             "\tfloat v = 0;\n\tfor (dtmc_i64 p = 0; p < %L; p++)\n"
	             "\t\tv += dtmc_ld(%I, oa + row * %L + p) * dtmc_ld(%I, ob + p * %L + col);\n",
	             K, 0, K, 1, N);
	end_ew(e);
}

/* ---- optimizer ---- */

/* adamw_step(p, g, m, v[, master], norm) -> p. */
static void emit_adamw(CudaEmit *e)
{
	const IrNode *n = node(e);
	const IrAttrOptim *o = ir_attr_optim(n);
	bool master = o->master;
	int w = master ? 4 : 0, nrm = master ? 5 : 4;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e,
	             "\tdtmc_adamw(a, %W, %I, %W, %W, %W, %s, %I, %O, %L, %G, %G, %G, %G, %G);\n",
	             0, 1, 2, 3, w, master ? "true" : "false", nrm, ir_node_numel(arg(e, 0)), o->beta1,
	             o->beta2, o->eps, o->weight_decay, o->clip);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(ir_node_numel(arg(e, 0)));
}

/* sgd_step(p, g[, mom][, master], norm) -> p. */
static void emit_sgd(CudaEmit *e)
{
	const IrNode *n = node(e);
	const IrAttrOptim *o = ir_attr_optim(n);
	bool mom = o->momentum != 0, master = o->master;
	int w = master ? 2 + mom : 0, nrm = 2 + mom + master;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_printf(e, "\tdtmc_sgd(a, %W, %I, ", 0, 1);
	if (mom)
		cg_cu_printf(e, "%W", 2);
	else
		fputs("(float *)0", e->out);
	cg_cu_printf(e, ", %W, %s, %I, %O, %L, %G, %G, %G, %s);\n", w, master ? "true" : "false",
	             nrm, ir_node_numel(arg(e, 0)), o->momentum, o->weight_decay, o->clip,
	             o->nesterov ? "true" : "false");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(ir_node_numel(arg(e, 0)));
}

/* assign(dst, src) -> dst. */
static void emit_assign(CudaEmit *e)
{
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(arg(e, 0)));
	cg_cu_printf(e, "\t%W[i] = %I[i];\n\tif (a.p[%d] != a.p[0])\n\t\t%O[i] = %I[i];\n", 0, 1,
	             cg_cu_out_arg(e), 0);
	cg_cu_end_kernel(e);
}

/* ---- dispatch ---- */

bool cg_cu_emit_kernel(CudaEmit *e)
{
	const CgPlanKernel *pk = e->pk;
	const IrNode *n = node(e);
	if (pk->nchunks > 1)
		snprintf(e->name, sizeof e->name, "k_%d_%d", pk->node, pk->chunk);
	else
		snprintf(e->name, sizeof e->name, "k_%d", pk->node);
	char label[256];
	snprintf(label, sizeof label, "%s %%%d%s%s", ir_op_name(n->op), n->id, n->name ? " " : "",
	         n->name ? n->name : "");
	for (char *c = label; *c; c++)
		if (*c == '*' || *c == '/' || *c < 32 || *c > 126)
			*c = '_';
	fprintf(e->out, "/* %s: %s */\n", e->name, label);
	if (pk->fused)
		return emit_elementwise(e, pk->node, pk->node);
	if (ir_op_flags(n->op) & OPF_ELEMWISE)
		return emit_elementwise(e, -1, pk->node);
	bool red[IR_MAX_RANK] = {false};
	switch (n->op) {
	case IR_OP_CONST: emit_const(e); break;
	case IR_OP_LOSS_SCALE: emit_loss_scale(e); break;
	case IR_OP_MATMUL: emit_matmul(e); break;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX: {
		const IrNode *x = arg(e, 0);
		const IrAttrAxes *ra = ir_attr_axes(n);
		for (int k = 0; k < ra->n; k++) {
			int64_t ax = ra->axes[k] < 0 ? ra->axes[k] + x->rank : ra->axes[k];
			if (ax >= 0 && ax < x->rank)
				red[ax] = true;
		}
		emit_reduce(e, n->op == IR_OP_SUM ? 0 : n->op == IR_OP_MEAN ? 1 : 2, red);
		break;
	}
	case IR_OP_SUM_TO:
		sum_to_dims(arg(e, 0), n, red);
		emit_reduce(e, 0, red);
		break;
	case IR_OP_MAX_BWD: {
		const IrNode *x = arg(e, 1);
		const IrAttrAxes *ra = ir_attr_axes(n);
		for (int k = 0; k < ra->n; k++)
			if (ra->axes[k] >= 0 && ra->axes[k] < x->rank)
				red[ra->axes[k]] = true;
		emit_max_bwd(e, red);
		break;
	}
	case IR_OP_SOFTMAX: emit_softmax(e, false, false); break;
	case IR_OP_LOG_SOFTMAX: emit_softmax(e, true, false); break;
	case IR_OP_SOFTMAX_BWD: emit_softmax(e, false, true); break;
	case IR_OP_LOG_SOFTMAX_BWD: emit_softmax(e, true, true); break;
	case IR_OP_LAYERNORM: emit_norm(e, true, false); break;
	case IR_OP_RMSNORM: emit_norm(e, false, false); break;
	case IR_OP_LAYERNORM_BWD: emit_norm(e, true, true); break;
	case IR_OP_RMSNORM_BWD: emit_norm(e, false, true); break;
	case IR_OP_LAYERNORM_BWD_GAMMA: emit_norm_gamma(e, true); break;
	case IR_OP_RMSNORM_BWD_GAMMA: emit_norm_gamma(e, false); break;
	case IR_OP_EMBED: emit_embed(e, false); break;
	case IR_OP_EMBED_VP: emit_embed(e, true); break;
	case IR_OP_EMBED_BWD: emit_embed_bwd(e, false); break;
	case IR_OP_EMBED_BWD_VP: emit_embed_bwd(e, true); break;
	case IR_OP_TOPK: emit_topk(e); break;
	case IR_OP_ONE_HOT: emit_one_hot(e); break;
	case IR_OP_GATHER: emit_gather(e); break;
	case IR_OP_SCATTER_ADD: emit_scatter_add(e); break;
	case IR_OP_MOE_SLOT: emit_moe_route(e, true); break;
	case IR_OP_MOE_TOKEN: emit_moe_route(e, false); break;
	case IR_OP_PERMUTE: emit_permute(e); break;
	case IR_OP_RESHAPE: emit_copy(e); break;
	case IR_OP_CONCAT: emit_concat(e); break;
	case IR_OP_SLICE: emit_slice(e, false); break;
	case IR_OP_SHARD_SLICE: emit_slice(e, true); break;
	case IR_OP_PAD: emit_pad(e); break;
	case IR_OP_PAD_MASK: emit_pad_mask(e); break;
	case IR_OP_EXPAND: emit_expand(e); break;
	case IR_OP_ATTENTION: emit_attention(e, false, false); break;
	case IR_OP_ATTENTION_BWD: emit_attention(e, true, false); break;
	case IR_OP_ATTN_BLOCK: emit_attention(e, false, true); break;
	case IR_OP_ATTN_BLOCK_BWD: emit_attention(e, true, true); break;
	case IR_OP_ATTN_MERGE: emit_attn_merge(e); break;
	case IR_OP_ROPE: emit_rope(e); break;
	case IR_OP_CROSS_ENTROPY: emit_cross_entropy(e); break;
	case IR_OP_CROSS_ENTROPY_BWD: emit_cross_entropy_bwd(e); break;
	case IR_OP_CE_TARGET: emit_ce_target(e); break;
	case IR_OP_CE_SUMEXP: emit_ce_sumexp(e); break;
	case IR_OP_CE_BWD_VP: emit_ce_bwd_vp(e); break;
	case IR_OP_MSE: emit_mse(e); break;
	case IR_OP_RELU_BWD: emit_act_bwd(e, "x > 0 ? g : 0.0f"); break;
	case IR_OP_GELU_BWD: emit_act_bwd(e, "g * dtmc_gelu_grad(x)"); break;
	case IR_OP_SILU_BWD: emit_act_bwd(e, "g * dtmc_silu_grad(x)"); break;
	case IR_OP_GRAD_NORM: emit_grad_norm(e); break;
	case IR_OP_ADAMW_STEP: emit_adamw(e); break;
	case IR_OP_SGD_STEP: emit_sgd(e); break;
	case IR_OP_ASSIGN: emit_assign(e); break;
	default:
		diag_error(e->d, n->loc, "%s: no CUDA kernel for this op", ir_op_name(n->op));
		return false;
	}
	return true;
}
