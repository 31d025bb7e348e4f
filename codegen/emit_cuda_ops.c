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
 * semantics are the C kernels' (codegen/cpu/), op by op.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emit_cuda_impl.h"

/* ---- fused elementwise groups ---- */

typedef enum BcastKind { BC_FULL, BC_SCALAR, BC_SUFFIX, BC_PREFIX, BC_OTHER } BcastKind;

/* How x (broadcast onto s) is indexed from s's flat index (emit_c.c's). */
static BcastKind bcast_kind(const IrNode *x, const IrNode *s, int64_t *period)
{
	int R = s->rank;
	int64_t xs[IR_MAX_RANK];
	for (int d = 0; d < R; d++) {
		int j = d - (R - x->rank);
		xs[d] = j >= 0 ? x->shape[j] : 1;
	}
	int64_t nx = ir_node_numel(x), ns = ir_node_numel(s);
	*period = 1;
	if (nx == ns)
		return BC_FULL;
	if (nx == 1)
		return BC_SCALAR;
	int k = 0;
	while (k < R && xs[k] == 1)
		k++;
	bool suffix = true;
	for (int d = k; d < R; d++)
		suffix &= xs[d] == s->shape[d];
	if (suffix) {
		*period = nx;
		return BC_SUFFIX;
	}
	int p = R;
	while (p > 0 && xs[p - 1] == 1)
		p--;
	bool prefix = true;
	for (int d = 0; d < p; d++)
		prefix &= xs[d] == s->shape[d];
	if (prefix) {
		*period = ns / nx;
		return BC_PREFIX;
	}
	return BC_OTHER;
}

/* Declares `dtmc_i64 NAME` = x's index for s's flat index i. */
static void put_bcast_index(FILE *out, const IrNode *x, const IrNode *s, const char *name)
{
	int64_t per;
	switch (bcast_kind(x, s, &per)) {
	case BC_FULL:
		fprintf(out, "\tconst dtmc_i64 %s = i;\n", name);
		return;
	case BC_SCALAR:
		fprintf(out, "\tconst dtmc_i64 %s = 0;\n", name);
		return;
	case BC_SUFFIX:
		fprintf(out, "\tconst dtmc_i64 %s = i %% %lldLL;\n", name, (long long)per);
		return;
	case BC_PREFIX:
		fprintf(out, "\tconst dtmc_i64 %s = i / %lldLL;\n", name, (long long)per);
		return;
	case BC_OTHER:
		break;
	}
	int R = s->rank;
	int64_t xs[IR_MAX_RANK], st[IR_MAX_RANK], acc = 1;
	for (int d = R - 1; d >= 0; d--) {
		int j = d - (R - x->rank);
		xs[d] = j >= 0 ? x->shape[j] : 1;
		st[d] = xs[d] == 1 ? 0 : acc;
		acc *= xs[d];
	}
	fprintf(out, "\tdtmc_i64 %s = 0;\n", name);
	cg_cu_put_decompose(out, "i", s->shape, st, R, name, "\t");
}

/* The member's f32 expression (emit_c.c's put_member, in CUDA). */
static bool put_member(CudaEmit *e, const IrNode *n, int root, const int *ext, int next)
{
	FILE *out = e->out;
	char a[2][32];
	for (int k = 0; k < n->nops && k < 2; k++) {
		int o = n->ops[k];
		if (root >= 0 && e->fp->root[o] == root && e->fp->internal[o]) {
			snprintf(a[k], sizeof a[k], "t%d", o);
			continue;
		}
		int j = 0;
		while (j < next && ext[j] != o)
			j++;
		snprintf(a[k], sizeof a[k], "x%d", j);
	}
	fprintf(out, "\tconst float t%d = ", n->id);
	switch (n->op) {
	case IR_OP_ADD:
		fprintf(out, "%s + %s", a[0], a[1]);
		break;
	case IR_OP_SUB:
		fprintf(out, "%s - %s", a[0], a[1]);
		break;
	case IR_OP_MUL:
		fprintf(out, "%s * %s", a[0], a[1]);
		break;
	case IR_OP_DIV:
		fprintf(out, "%s / %s", a[0], a[1]);
		break;
	case IR_OP_NEG:
		fprintf(out, "-%s", a[0]);
		break;
	case IR_OP_EXP:
		fprintf(out, "expf(%s)", a[0]);
		break;
	case IR_OP_LOG:
		fprintf(out, "logf(%s)", a[0]);
		break;
	case IR_OP_SQRT:
		fprintf(out, "sqrtf(%s)", a[0]);
		break;
	case IR_OP_RSQRT:
		fprintf(out, "1.0f / sqrtf(%s)", a[0]);
		break;
	case IR_OP_TANH:
		fprintf(out, "tanhf(%s)", a[0]);
		break;
	case IR_OP_RELU:
		fprintf(out, "dtmc_relu(%s)", a[0]);
		break;
	case IR_OP_GELU:
		fprintf(out, "dtmc_gelu(%s)", a[0]);
		break;
	case IR_OP_SILU:
		fprintf(out, "dtmc_silu(%s)", a[0]);
		break;
	case IR_OP_SIGMOID:
		fprintf(out, "dtmc_sigmoid(%s)", a[0]);
		break;
	case IR_OP_SCALE:
		fprintf(out, "%s * ", a[0]);
		cg_cu_put_f32(out, n->attrs.f[0]);
		break;
	case IR_OP_CAST:
		if (n->dtype == IR_BF16)
			fprintf(out, "dtmc_round_bf16(%s)", a[0]);
		else if (n->dtype == IR_F16)
			fprintf(out, "dtmc_round_f16(%s)", a[0]);
		else if (n->dtype == IR_I32)
			fprintf(out, "(float)(int)%s", a[0]);
		else
			fprintf(out, "%s", a[0]);
		break;
	case IR_OP_DROPOUT:
		fprintf(out, "dtmc_dropout(a, %s, ", a[0]);
		cg_cu_put_f32(out, n->attrs.f[0]);
		fprintf(out, ", %uu, i)", (unsigned)(uint32_t)n->attrs.ints[0]);
		break;
	default:
		diag_error(e->d, n->loc, "internal: no CUDA expression for elementwise op '%s'",
		           ir_op_name(n->op));
		return false;
	}
	fputs(";\n", out);
	return true;
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
		put_bcast_index(out, cg_cu_node(e, ext[k]), res, nm);
		fprintf(out, "\tconst float x%d = dtmc_ld(", k);
		cg_cu_put_ptr(e, k, true);
		fprintf(out, ", j%d);\n", k);
	}
	for (int x = 0; x <= self; x++)
		if (x == self || (r >= 0 && e->fp->root[x] == r))
			if (!put_member(e, cg_cu_node(e, x), r, ext, next))
				return false;
	fputs("\tdtmc_st(", out);
	cg_cu_put_out(e);
	fprintf(out, ", i, t%d);\n", self);
	cg_cu_end_kernel(e);
	return true;
}

/* ---- reductions ---- */

/* The [outer, len, inner] view of a reduction of x over the dims marked
 * in red (dims of extent 1 ignored), when those dims are one contiguous
 * run; false otherwise.  *count is the number of elements reduced. */
static bool red_view(const IrNode *x, const bool *red, int64_t *outer, int64_t *len, int64_t *inner,
                     int64_t *count)
{
	int first = -1, last = -1;
	bool contiguous = true;
	*count = 1;
	for (int d = 0; d < x->rank; d++) {
		if (!red[d])
			continue;
		*count *= x->shape[d];
		if (x->shape[d] == 1)
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
	FILE *out = e->out;
	const IrNode *x = cg_cu_node(e, e->pk->args[0]);
	const char *tx = cg_cu_ctype(x->dtype),
	           *to = cg_cu_ctype(cg_cu_node(e, e->pk->args[cg_cu_out_arg(e)])->dtype);
	int64_t outer, len, inner, count,
	        nout = ir_node_numel(cg_cu_node(e, e->pk->args[cg_cu_out_arg(e)]));
	bool contig = red_view(x, red, &outer, &len, &inner, &count);
	if (contig && inner == 1 && (outer >= 128 || len <= 8192)) {
		int tpo = cg_cuda_row_tpo(len);
		cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
		fprintf(out, "\tdtmc_reduce_rows<%d, %d, %s, %s>(", tpo, op, tx, to);
		cg_cu_put_ptr(e, 0, true);
		fputs(", ", out);
		cg_cu_put_out(e);
		fprintf(out, ", %lldLL, %lldLL);\n", (long long)outer, (long long)len);
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
		fprintf(out, "\tdtmc_reduce_phased<%d, %d, %s, %s>(", op, cw, tx, to);
		cg_cu_put_ptr(e, 0, true);
		fputs(", ", out);
		cg_cu_put_out(e);
		fputs(", ", out);
		cg_cu_put_parts_ptr(e, nparts);
		fprintf(out, ", &dtmc_sync_%s, %lldLL, %lldLL, %lldLL, %lldLL);\n", e->name,
		        (long long)outer, (long long)len, (long long)inner, (long long)rb);
		cg_cu_end_kernel(e);
		int64_t items =
		        outer * nch + (nch > 1 ? outer * cg_cu_cdiv(inner, CG_CUDA_BLOCK) : 0);
		e->k = cg_cuda_launch_phased(items, CG_CUDA_BLOCK, 0);
		return;
	}
	/* one thread per output: its base offset from the kept dims, then a
	 * walk over the reduced ones */
	int R = x->rank;
	int64_t kext[IR_MAX_RANK], kst[IR_MAX_RANK], rext[IR_MAX_RANK], rst[IR_MAX_RANK];
	int nk = 0, nr = 0;
	int64_t s = 1, xst[IR_MAX_RANK];
	for (int d = R - 1; d >= 0; d--) {
		xst[d] = s;
		s *= x->shape[d];
	}
	for (int d = 0; d < R; d++) {
		if (red[d]) {
			rext[nr] = x->shape[d];
			rst[nr++] = xst[d];
		} else {
			kext[nk] = x->shape[d];
			kst[nk++] = xst[d];
		}
	}
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out,
	        "\tconst dtmc_i64 o = dtmc_tid();\n\tif (o >= %lldLL)\n\t\treturn;\n"
	        "\tconst %s *x = (const %s *)a.p[0];\n\tdtmc_i64 base = 0;\n",
	        (long long)nout, tx, tx);
	cg_cu_put_decompose(out, "o", kext, kst, nk, "base", "\t");
	fprintf(out,
	        "\tfloat acc = dtmc_red_init<%d>();\n"
	        "\tfor (dtmc_i64 r = 0; r < %lldLL; r++) {\n\t\tdtmc_i64 off = base;\n",
	        op, (long long)count);
	cg_cu_put_decompose(out, "r", rext, rst, nr, "off", "\t\t");
	fprintf(out, "\t\tacc = dtmc_red<%d>(acc, dtmc_ld(x, off));\n\t}\n\tdtmc_st(", op);
	cg_cu_put_out(e);
	if (op == 1)
		fprintf(out, ", o, acc / %lld.0f);\n", (long long)count);
	else
		fputs(", o, acc);\n", out);
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
	const IrNode *x = cg_cu_node(e, e->pk->args[1]);
	int R = x->rank;
	int64_t kext[IR_MAX_RANK], kst[IR_MAX_RANK], rext[IR_MAX_RANK], rst[IR_MAX_RANK], count = 1;
	int nk = 0, nr = 0;
	int64_t s = 1, xst[IR_MAX_RANK];
	for (int d = R - 1; d >= 0; d--) {
		xst[d] = s;
		s *= x->shape[d];
	}
	for (int d = 0; d < R; d++) {
		if (red[d]) {
			rext[nr] = x->shape[d];
			rst[nr++] = xst[d];
			count *= x->shape[d];
		} else {
			kext[nk] = x->shape[d];
			kst[nk++] = xst[d];
		}
	}
	int64_t ny = ir_node_numel(cg_cu_node(e, e->pk->args[2]));
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out,
	        "\tint lane;\n\tconst dtmc_i64 g = dtmc_row<32>(&lane);\n"
	        "\tif (g >= %lldLL)\n\t\treturn;\n\tdtmc_i64 base = 0;\n",
	        (long long)ny);
	cg_cu_put_decompose(out, "g", kext, kst, nk, "base", "\t");
	fputs("\tconst float yv = dtmc_ld(", out);
	cg_cu_put_ptr(e, 2, true);
	fputs(", g), dyv = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out,
	        ", g);\n\tfloat cnt = 0;\n\tfor (dtmc_i64 r = lane; r < %lldLL; r += 32) {\n"
	        "\t\tdtmc_i64 off = base;\n",
	        (long long)count);
	cg_cu_put_decompose(out, "r", rext, rst, nr, "off", "\t\t");
	fputs("\t\tcnt += dtmc_ld(", out);
	cg_cu_put_ptr(e, 1, true);
	fprintf(out,
	        ", off) == yv ? 1.0f : 0.0f;\n\t}\n\tcnt = dtmc_warp_sum(cnt);\n"
	        "\tfor (dtmc_i64 r = lane; r < %lldLL; r += 32) {\n\t\tdtmc_i64 off = base;\n",
	        (long long)count);
	cg_cu_put_decompose(out, "r", rext, rst, nr, "off", "\t\t");
	fputs("\t\tdtmc_st(", out);
	cg_cu_put_out(e);
	fputs(", off, dtmc_ld(", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", off) == yv ? dyv / cnt : 0.0f);\n\t}\n", out);
	cg_cu_end_kernel(e);
	e->k = (CgCudaKernel){.threads = ny * 32, .block = CG_CUDA_BLOCK};
}

/* ---- row ops ---- */

/* softmax / log_softmax (bwd: their gradients) along attrs.ints[0]. */
static void emit_softmax(CudaEmit *e, bool lg, bool bwd)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[bwd ? 1 : 0]);
	int ax = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + x->rank : n->attrs.ints[0]);
	int64_t outer = cg_cu_span(x, 0, ax), len = x->shape[ax],
	        inner = cg_cu_span(x, ax + 1, x->rank);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	int tpo = cg_cuda_row_tpo(len);
	if (inner == 1)
		fprintf(out, "\tdtmc_softmax%s_rows<%d, ", bwd ? "_bwd" : "", tpo);
	else
		fprintf(out, "\tdtmc_softmax%s_cols<", bwd ? "_bwd" : "");
	for (int j = 0; j < e->pk->nargs; j++)
		fprintf(out, "%s%s", j ? ", " : "",
		        cg_cu_ctype(cg_cu_node(e, e->pk->args[j])->dtype));
	fputs(">(", out);
	for (int j = 0; j < e->pk->nargs; j++) {
		cg_cu_put_ptr(e, j, j < cg_cu_out_arg(e));
		fputs(", ", out);
	}
	if (inner == 1)
		fprintf(out, "%lldLL, %lldLL, %s);\n", (long long)outer, (long long)len,
		        lg ? "true" : "false");
	else
		fprintf(out, "%lldLL, %lldLL, %lldLL, %s);\n", (long long)outer, (long long)len,
		        (long long)inner, lg ? "true" : "false");
	cg_cu_end_kernel(e);
	e->k = inner == 1 ? cg_cuda_launch_rows(outer, len)
	                  : cg_cuda_launch_elementwise(outer * inner);
}

/* layernorm(x, g, b) / rmsnorm(x, g), forward or dx (bwd: args dy, x, g). */
static void emit_norm(CudaEmit *e, bool ln, bool bwd)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[bwd ? 1 : 0]);
	int64_t D = x->rank ? x->shape[x->rank - 1] : 1, rows = D ? ir_node_numel(x) / D : 0;
	int tpo = cg_cuda_row_tpo(D);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (bwd) {
		fprintf(out, "\tdtmc_norm_bwd_rows<%d, %s, %s, %s, %s>(", tpo,
		        cg_cu_ctype(cg_cu_node(e, e->pk->args[0])->dtype), cg_cu_ctype(x->dtype),
		        cg_cu_ctype(cg_cu_node(e, e->pk->args[2])->dtype), cg_cu_ctype(n->dtype));
		for (int j = 0; j < 3; j++) {
			cg_cu_put_ptr(e, j, true);
			fputs(", ", out);
		}
	} else {
		const char *tb = ln ? cg_cu_ctype(cg_cu_node(e, e->pk->args[2])->dtype) : "float";
		fprintf(out, "\tdtmc_norm_rows<%d, %s, %s, %s, %s>(", tpo, cg_cu_ctype(x->dtype),
		        cg_cu_ctype(cg_cu_node(e, e->pk->args[1])->dtype), tb,
		        cg_cu_ctype(n->dtype));
		cg_cu_put_ptr(e, 0, true);
		fputs(", ", out);
		cg_cu_put_ptr(e, 1, true);
		fputs(", ", out);
		if (ln)
			cg_cu_put_ptr(e, 2, true);
		else
			fputs("(const float *)0", out);
		fputs(", ", out);
	}
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, %lldLL, ", (long long)rows, (long long)D);
	cg_cu_put_f32(out, n->attrs.f[0]);
	fprintf(out, ", %s);\n", ln ? "true" : "false");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(rows, D);
}

/* layernorm_bwd_gamma / rmsnorm_bwd_gamma (dy, x) -> [D]. */
static void emit_norm_gamma(CudaEmit *e, bool ln)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[1]);
	int64_t D = x->rank ? x->shape[x->rank - 1] : 1, rows = D ? ir_node_numel(x) / D : 0;
	/* at most about 128 chunks of at least 32 rows (the row statistics
	 * of a chunk stay in shared memory: 2 * rb floats) */
	int64_t rb = cg_cu_cdiv(rows, 128);
	rb = rb < 32 ? 32 : rb > 6144 ? 6144 : rb;
	int64_t nch = cg_cu_cdiv(rows, rb), nparts = nch > 1 ? nch * D : 0;
	cg_cu_put_scratch(e, "float", nparts);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out, "\tdtmc_norm_gamma<%s, %s, %s>(",
	        cg_cu_ctype(cg_cu_node(e, e->pk->args[0])->dtype), cg_cu_ctype(x->dtype),
	        cg_cu_ctype(n->dtype));
	cg_cu_put_ptr(e, 0, true);
	fputs(", ", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", ", out);
	cg_cu_put_out(e);
	fputs(", ", out);
	cg_cu_put_parts_ptr(e, nparts);
	fprintf(out, ", &dtmc_sync_%s, %lldLL, %lldLL, %d, ", e->name, (long long)rows,
	        (long long)D, (int)rb);
	cg_cu_put_f32(out, n->attrs.f[0]);
	fprintf(out, ", %s);\n", ln ? "true" : "false");
	cg_cu_end_kernel(e);
	int64_t items = nch + (nch > 1 ? cg_cu_cdiv(D, CG_CUDA_BLOCK) : 0);
	e->k = cg_cuda_launch_phased(items, CG_CUDA_BLOCK, (int)(2 * rb * 4));
}

/* ---- losses ---- */

static void emit_cross_entropy(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *lg = cg_cu_node(e, e->pk->args[0]), *tg = cg_cu_node(e, e->pk->args[1]);
	int64_t V = lg->shape[lg->rank - 1], N = ir_node_numel(tg);
	int tpo = cg_cuda_row_tpo(V);
	cg_cu_put_scratch(e, "double", N > 0 ? N : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out, "\tdtmc_cross_entropy<%d, %s, %s>(", tpo, cg_cu_ctype(lg->dtype),
	        cg_cu_ctype(cg_cu_node(e, e->pk->node)->dtype));
	cg_cu_put_ptr(e, 0, true);
	fputs(", (const int *)a.p[1], ", out);
	cg_cu_put_out(e);
	fprintf(out, ", dtmc_part_%s, &dtmc_sync_%s, %lldLL, %lldLL);\n", e->name, e->name,
	        (long long)N, (long long)V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(cg_cu_cdiv(N, CG_CUDA_BLOCK / tpo) + 1, CG_CUDA_BLOCK, 0);
}

static void emit_cross_entropy_bwd(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *lg = cg_cu_node(e, e->pk->args[1]), *tg = cg_cu_node(e, e->pk->args[2]);
	int64_t V = lg->shape[lg->rank - 1], N = ir_node_numel(tg);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out, "\tdtmc_cross_entropy_bwd<%d, %s, %s, %s>(", cg_cuda_row_tpo(V),
	        cg_cu_ctype(cg_cu_node(e, e->pk->args[0])->dtype), cg_cu_ctype(lg->dtype),
	        cg_cu_ctype(cg_cu_node(e, e->pk->node)->dtype));
	cg_cu_put_ptr(e, 0, true);
	fputs(", ", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", (const int *)a.p[2], ", out);
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, %lldLL);\n", (long long)N, (long long)V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(N, V);
}

#define SUMSQ_CHUNK 8192

static void emit_mse(CudaEmit *e)
{
	FILE *out = e->out;
	int64_t N = ir_node_numel(cg_cu_node(e, e->pk->args[0])), n0 = cg_cu_cdiv(N, SUMSQ_CHUNK);
	cg_cu_put_scratch(e, "double", n0 > 0 ? n0 : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out, "\tdtmc_mse(");
	cg_cu_put_ptr(e, 0, true);
	fputs(", ", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", ", out);
	cg_cu_put_out(e);
	fprintf(out, ", dtmc_part_%s, &dtmc_sync_%s, %lldLL, %dLL);\n", e->name, e->name,
	        (long long)N, SUMSQ_CHUNK);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(n0 + 1, CG_CUDA_BLOCK, 0);
}

/* grad_norm over this kernel's args (all but the output): sums of squares
 * of SUMSQ_CHUNK-element chunks into parts, then their sum in order; a
 * chunked grad_norm keeps its running sum in f64 at MEMPLAN_GNORM_ACC of
 * the output, as the C kernels do. */
static void emit_grad_norm(CudaEmit *e)
{
	FILE *out = e->out;
	int ng = e->pk->nargs - 1;
	int64_t base[DTM_MAX_ARGS + 1];
	base[0] = 0;
	for (int k = 0; k < ng; k++)
		base[k + 1] = base[k] +
		              cg_cu_cdiv(ir_node_numel(cg_cu_node(e, e->pk->args[k])), SUMSQ_CHUNK);
	int64_t n0 = base[ng];
	cg_cu_put_scratch(e, "double", n0 > 0 ? n0 : 1);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out,
	        "\tDtmcSync *s = &dtmc_sync_%s;\n\tfor (;;) {\n"
	        "\t\tconst unsigned it = dtmc_next_item(s);\n\t\tif (it >= %lldu)\n\t\t\tbreak;\n"
	        "\t\tif (it < %lldu) {\n\t\t\tdouble v = 0;\n",
	        e->name, (long long)n0 + 1, (long long)n0);
	for (int k = 0; k < ng; k++) {
		if (base[k + 1] == base[k])
			continue;
		int64_t nel = ir_node_numel(cg_cu_node(e, e->pk->args[k]));
		if (base[k])
			fprintf(out, "\t\t\tif (it >= %lldu && it < %lldu) {\n", (long long)base[k],
			        (long long)base[k + 1]);
		else
			fprintf(out, "\t\t\tif (it < %lldu) {\n", (long long)base[k + 1]);
		fprintf(out,
		        "\t\t\t\tconst dtmc_i64 lo = (dtmc_i64)(it - %lldu) * %d;\n"
		        "\t\t\t\tv = dtmc_sumsq_range(",
		        (long long)base[k], SUMSQ_CHUNK);
		cg_cu_put_ptr(e, k, true);
		fprintf(out,
		        ", (const float *)0, lo, lo + %d < %lldLL ? lo + %d : %lldLL);\n\t\t\t}\n",
		        SUMSQ_CHUNK, (long long)nel, SUMSQ_CHUNK, (long long)nel);
	}
	fprintf(out,
	        "\t\t\tif (threadIdx.x == 0)\n\t\t\t\tdtmc_part_%s[it] = v;\n"
	        "\t\t\tdtmc_item_done(s, 0);\n\t\t\tcontinue;\n\t\t}\n"
	        "\t\tdtmc_wait_phase(s, 0, %lldu);\n\t\tdouble t = 0;\n"
	        "\t\tfor (unsigned k = threadIdx.x; k < %lldu; k += DTMC_BLOCK)\n"
	        "\t\t\tt += __ldcg(&dtmc_part_%s[k]);\n\t\tt = dtmc_block_sum(t);\n"
	        "\t\tif (threadIdx.x == 0) {\n",
	        e->name, (long long)n0, (long long)n0, e->name);
	int o = cg_cu_out_arg(e);
	if (e->pk->nchunks > 1) {
		fprintf(out, "\t\t\tdouble *acc = (double *)((char *)a.p[%d] + %d);\n", o,
		        MEMPLAN_GNORM_ACC);
		fprintf(out, "\t\t\tconst double sum = %s + t;\n\t\t\t*acc = sum;\n",
		        e->pk->chunk ? "*acc" : "0.0");
		if (e->pk->chunk == e->pk->nchunks - 1)
			fprintf(out, "\t\t\t*(float *)a.p[%d] = (float)sqrt(sum);\n", o);
	} else {
		fprintf(out, "\t\t\t*(float *)a.p[%d] = (float)sqrt(t);\n", o);
	}
	fputs("\t\t}\n\t}\n\tdtmc_sync_exit(s);\n", out);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_phased(n0 + 1, CG_CUDA_BLOCK, 0);
}

/* ---- attention ---- */

static void emit_attention(CudaEmit *e, bool bwd)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *q = cg_cu_node(e, e->pk->args[bwd ? 1 : 0]);
	int64_t B = q->shape[0], T = q->shape[1], D = q->shape[2], H = n->attrs.ints[0];
	int64_t hd = H > 0 ? D / H : D;
	int P = cg_cuda_attn_parts(hd), bk = cg_cuda_attn_tile(hd);
	bool causal = n->attrs.nints > 1 && n->attrs.ints[1] != 0;
	double scale = 1.0 / sqrt((double)hd);
	if (bwd)
		fprintf(out,
		        "__device__ DtmcSync dtmc_sync_%s;\n__device__ float dtmc_part_%s[%lld];\n",
		        e->name, e->name, (long long)(B * H * T * 2 > 0 ? B * H * T * 2 : 1));
	cg_cu_begin_kernel(e, CG_CUDA_ATTN_BLOCK);
	fprintf(out, "\tdtmc_attn_%s<%s, %s, %lld, %d, %d, %s>(", bwd ? "bwd" : "fwd",
	        cg_cu_ctype(q->dtype), cg_cu_ctype(n->dtype), (long long)hd, P, bk,
	        causal ? "true" : "false");
	for (int j = 0; j < e->pk->nargs; j++) {
		cg_cu_put_ptr(e, j, j < cg_cu_out_arg(e));
		fputs(", ", out);
	}
	if (bwd)
		fprintf(out, "dtmc_part_%s, &dtmc_sync_%s, ", e->name, e->name);
	fprintf(out, "%d, %d, %d, %d, ", (int)B, (int)T, (int)D, (int)H);
	cg_cu_put_f32(out, scale);
	fputs(");\n", out);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_attention(B, T, D, H, bwd);
}

/* ---- data movement ---- */

/* out[i] = EXPR of the flat index i, one thread per output element: the
 * caller writes the lines computing `v` (a float) after this, then calls
 * put_store. */
static void put_store(CudaEmit *e)
{
	fputs("\tdtmc_st(", e->out);
	cg_cu_put_out(e);
	fputs(", i, v);\n", e->out);
}

static void emit_permute(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[0]);
	int r = n->rank;
	int64_t xs[IR_MAX_RANK], st[IR_MAX_RANK], s = 1;
	for (int d = r - 1; d >= 0; d--) {
		xs[d] = s;
		s *= x->shape[d];
	}
	for (int d = 0; d < r; d++)
		st[d] = xs[n->attrs.ints[d]];
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fputs("\tdtmc_i64 off = 0;\n", out);
	cg_cu_put_decompose(out, "i", n->shape, st, r, "off", "\t");
	fputs("\tconst float v = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fputs(", off);\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

static void emit_copy(CudaEmit *e, bool skip_same)
{
	FILE *out = e->out;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (skip_same)
		fprintf(out, "\tif (a.p[0] == a.p[%d])\n\t\treturn;\n", cg_cu_out_arg(e));
	cg_cu_put_ew_head(e, ir_node_numel(cg_cu_node(e, e->pk->node)));
	fputs("\tconst float v = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fputs(", i);\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* slice (lo from the attrs) or shard_slice (lo = this rank's chunk):
 * [outer, len, inner] -> [outer, c, inner]. */
static void emit_slice(CudaEmit *e, bool shard)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[0]);
	int ax = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + x->rank : n->attrs.ints[0]);
	int64_t inner = cg_cu_span(x, ax + 1, x->rank), len = x->shape[ax], c = n->shape[ax];
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (shard)
		cg_cu_put_group_index(e, n->attrs.mesh_axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out, "\tconst dtmc_i64 o = i / %lldLL, rem = i %% %lldLL;\n",
	        (long long)(c * inner), (long long)(c * inner));
	if (shard)
		fprintf(out, "\tconst dtmc_i64 lo = idx * %lldLL;\n", (long long)c);
	else
		fprintf(out, "\tconst dtmc_i64 lo = %lldLL;\n", (long long)n->attrs.ints[1]);
	fputs("\tconst float v = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", (o * %lldLL + lo) * %lldLL + rem);\n", (long long)len, (long long)inner);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* pad(x){axis, start, end}: zeros of the output's shape, x at [start, end). */
static void emit_pad(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[0]);
	int ax = (int)n->attrs.ints[0];
	int64_t lo = n->attrs.ints[1], len = n->shape[ax], xl = x->shape[ax];
	int64_t inner = cg_cu_span(n, ax + 1, n->rank);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out,
	        "\tconst dtmc_i64 o = i / %lldLL, pos = i / %lldLL %% %lldLL - %lldLL;\n"
	        "\tconst float v = pos >= 0 && pos < %lldLL ? dtmc_ld(",
	        (long long)(len * inner), (long long)inner, (long long)len, (long long)lo,
	        (long long)xl);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", (o * %lldLL + pos) * %lldLL + i %% %lldLL) : 0.0f;\n", (long long)xl,
	        (long long)inner, (long long)inner);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* pad_mask(x){dim, extent, low}: the padding rows of this rank's uneven
 * shard become 0 or the dtype's lowest finite value (dtmk_pad.h's). */
static void emit_pad_mask(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *x = cg_cu_node(e, e->pk->args[0]);
	int ax = (int)n->attrs.ints[0];
	int64_t c = x->shape[ax], inner = cg_cu_span(x, ax + 1, x->rank), ext = n->attrs.ints[1];
	double low = n->dtype == IR_F16    ? -65504.0
	             : n->dtype == IR_BF16 ? -3.38953139e38
	                                   : -3.40282347e38;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_group_index(e, n->attrs.mesh_axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out,
	        "\tconst dtmc_i64 pos = i / %lldLL %% %lldLL;\n"
	        "\tif (idx * %lldLL + pos < %lldLL) {\n\t\tif (a.p[0] != a.p[%d])\n\t\t\t",
	        (long long)inner, (long long)c, (long long)c, (long long)ext, cg_cu_out_arg(e));
	cg_cu_put_out(e);
	fputs("[i] = ", out);
	cg_cu_put_ptr(e, 0, true);
	fputs("[i];\n\t\treturn;\n\t}\n\tconst float v = ", out);
	if (n->attrs.ints[2])
		cg_cu_put_f32(out, low);
	else
		fputs("0.0f", out);
	fputs(";\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* concat(x0, x1, ...) along ints[0]. */
static void emit_concat(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	int ax = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + n->rank : n->attrs.ints[0]);
	int64_t inner = cg_cu_span(n, ax + 1, n->rank), len = n->shape[ax];
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out,
	        "\tconst dtmc_i64 o = i / %lldLL, pos = i / %lldLL %% %lldLL, in = i %% %lldLL;\n"
	        "\tfloat v;\n",
	        (long long)(len * inner), (long long)inner, (long long)len, (long long)inner);
	int64_t at = 0;
	for (int k = 0; k < cg_cu_out_arg(e); k++) {
		int64_t l = cg_cu_node(e, e->pk->args[k])->shape[ax];
		fprintf(out, "\t%sif (pos < %lldLL)\n\t\tv = dtmc_ld(", k ? "else " : "",
		        (long long)(at + l));
		cg_cu_put_ptr(e, k, true);
		fprintf(out, ", (o * %lldLL + pos - %lldLL) * %lldLL + in);\n", (long long)l,
		        (long long)at, (long long)inner);
		at += l;
	}
	fputs("\telse\n\t\tv = 0.0f;\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* expand(x): x broadcast to the output's shape. */
static void emit_expand(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	put_bcast_index(out, cg_cu_node(e, e->pk->args[0]), n, "j");
	fputs("\tconst float v = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fputs(", j);\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* embed(table [V, D], ids) / embed_vp (rows idx * V + [0, V)). */
static void emit_embed(CudaEmit *e, bool vp)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *t = cg_cu_node(e, e->pk->args[0]);
	int64_t V = t->shape[0], D = t->shape[1];
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (vp)
		cg_cu_put_group_index(e, n->attrs.mesh_axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out, "\tconst dtmc_i64 r = (dtmc_i64)((const int *)a.p[1])[i / %lldLL]",
	        (long long)D);
	if (vp)
		fprintf(out, " - idx * %lldLL", (long long)V);
	fprintf(out, ";\n\tconst float v = r >= 0 && r < %lldLL ? dtmc_ld(", (long long)V);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", r * %lldLL + i %% %lldLL) : 0.0f;\n", (long long)D, (long long)D);
	put_store(e);
	cg_cu_end_kernel(e);
}

static void emit_embed_bwd(CudaEmit *e, bool vp)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	int64_t V = n->shape[0], D = n->shape[1], N = ir_node_numel(cg_cu_node(e, e->pk->args[1]));
	int64_t nc = cg_cu_cdiv(D, 32);
	nc = nc < 1 ? 1 : nc > 16 ? 16 : nc;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	if (vp)
		cg_cu_put_group_index(e, n->attrs.mesh_axes);
	fprintf(out, "\tdtmc_embed_bwd<%d, %s, %s>(", (int)nc,
	        cg_cu_ctype(cg_cu_node(e, e->pk->args[0])->dtype), cg_cu_ctype(n->dtype));
	cg_cu_put_ptr(e, 0, true);
	fputs(", (const int *)a.p[1], ", out);
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, %lldLL, %lldLL, ", (long long)V, (long long)D, (long long)N);
	if (vp)
		fprintf(out, "idx * %lldLL);\n", (long long)V);
	else
		fputs("0);\n", out);
	cg_cu_end_kernel(e);
	e->k = (CgCudaKernel){.threads = V * 32, .block = CG_CUDA_BLOCK};
}

/* ce_target(logits [N, Vl], targets) -> [N]: the target's logit here, else 0. */
static void emit_ce_target(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *l = cg_cu_node(e, e->pk->args[0]);
	int64_t V = l->shape[l->rank - 1];
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_group_index(e, n->attrs.mesh_axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out,
	        "\tconst dtmc_i64 r = (dtmc_i64)((const int *)a.p[1])[i] - idx * %lldLL;\n"
	        "\tconst float v = r >= 0 && r < %lldLL ? dtmc_ld(",
	        (long long)V, (long long)V);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", i * %lldLL + r) : 0.0f;\n", (long long)V);
	put_store(e);
	cg_cu_end_kernel(e);
}

static void emit_ce_sumexp(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *l = cg_cu_node(e, e->pk->args[0]);
	int64_t V = l->shape[l->rank - 1], N = ir_node_numel(n);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fprintf(out, "\tdtmc_ce_sumexp<%d, %s, %s, %s>(", cg_cuda_row_tpo(V), cg_cu_ctype(l->dtype),
	        cg_cu_ctype(cg_cu_node(e, e->pk->args[1])->dtype), cg_cu_ctype(n->dtype));
	cg_cu_put_ptr(e, 0, true);
	fputs(", ", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", ", out);
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, %lldLL);\n", (long long)N, (long long)V);
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_rows(N, V);
}

/* ce_bwd_vp(dl, logits [N, Vl], targets, mx, se): elementwise. */
static void emit_ce_bwd_vp(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node), *l = cg_cu_node(e, e->pk->args[1]);
	int64_t V = l->shape[l->rank - 1], N = ir_node_numel(cg_cu_node(e, e->pk->args[2]));
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_group_index(e, n->attrs.mesh_axes);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fprintf(out,
	        "\tconst dtmc_i64 r = i / %lldLL, j = i %% %lldLL;\n\tconst float dl = dtmc_ld(",
	        (long long)V, (long long)V);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", 0) / %lld.0f;\n\tconst float p = expf(dtmc_ld(", (long long)(N ? N : 1));
	cg_cu_put_ptr(e, 1, true);
	fputs(", i) - dtmc_ld(", out);
	cg_cu_put_ptr(e, 3, true);
	fputs(", r)) / dtmc_ld(", out);
	cg_cu_put_ptr(e, 4, true);
	fprintf(out,
	        ", r) * dl;\n\tconst float v = j == (dtmc_i64)((const int *)a.p[2])[r] - idx * "
	        "%lldLL ? p - dl : p;\n",
	        (long long)V);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* relu_bwd, gelu_bwd, silu_bwd (dy, x). */
static void emit_act_bwd(CudaEmit *e, const char *expr)
{
	FILE *out = e->out;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(cg_cu_node(e, e->pk->node)));
	fputs("\tconst float g = dtmc_ld(", out);
	cg_cu_put_ptr(e, 0, true);
	fputs(", i), x = dtmc_ld(", out);
	cg_cu_put_ptr(e, 1, true);
	fprintf(out, ", i);\n\tconst float v = %s;\n", expr);
	put_store(e);
	cg_cu_end_kernel(e);
}

static void emit_const(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(n));
	fputs("\tconst float v = ", out);
	cg_cu_put_f32(out, n->attrs.f[0]);
	fputs(";\n", out);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* A matmul one strided GEMM cannot express (batch dims that broadcast
 * unevenly): one thread per output element, f32 accumulation. */
static void emit_matmul(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *C = cg_cu_node(e, e->pk->node), *A = cg_cu_node(e, e->pk->args[0]),
	             *B = cg_cu_node(e, e->pk->args[1]);
	int r = C->rank, nb = r - 2;
	int64_t M = C->shape[r - 2], N = C->shape[r - 1], K = A->shape[A->rank - 1];
	int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK], s = M * K;
	for (int i = nb - 1, j = A->rank - 3; i >= 0; i--, j--) {
		int64_t n = j >= 0 ? A->shape[j] : 1;
		sa[i] = n == 1 ? 0 : s;
		s *= n;
	}
	s = K * N;
	for (int i = nb - 1, j = B->rank - 3; i >= 0; i--, j--) {
		int64_t n = j >= 0 ? B->shape[j] : 1;
		sb[i] = n == 1 ? 0 : s;
		s *= n;
	}
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(C));
	fprintf(out,
	        "\tconst dtmc_i64 bi = i / %lldLL, row = i / %lldLL %% %lldLL, col = i %% %lldLL;\n"
	        "\tdtmc_i64 oa = 0, ob = 0;\n",
	        (long long)(M * N), (long long)N, (long long)M, (long long)N);
	cg_cu_put_decompose(out, "bi", C->shape, sa, nb, "oa", "\t");
	cg_cu_put_decompose(out, "bi", C->shape, sb, nb, "ob", "\t");
	fprintf(out, "\tfloat v = 0;\n\tfor (dtmc_i64 p = 0; p < %lldLL; p++)\n\t\tv += dtmc_ld(",
	        (long long)K);
	cg_cu_put_ptr(e, 0, true);
	fprintf(out, ", oa + row * %lldLL + p) * dtmc_ld(", (long long)K);
	cg_cu_put_ptr(e, 1, true);
	fprintf(out, ", ob + p * %lldLL + col);\n", (long long)N);
	put_store(e);
	cg_cu_end_kernel(e);
}

/* ---- optimizer ---- */

static void emit_adamw(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	bool master = n->attrs.flag;
	int w = master ? 4 : 0, nrm = master ? 5 : 4;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fputs("\tdtmc_adamw(a, ", out);
	cg_cu_put_ptr(e, 0, false);
	for (int j = 1; j < 4; j++) {
		fputs(", ", out);
		cg_cu_put_ptr(e, j, j == 1);
	}
	fputs(", ", out);
	cg_cu_put_ptr(e, w, false);
	fprintf(out, ", %s, ", master ? "true" : "false");
	cg_cu_put_ptr(e, nrm, true);
	fputs(", ", out);
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, ", (long long)ir_node_numel(cg_cu_node(e, e->pk->args[0])));
	for (int k = 0; k < 5; k++) { /* beta1, beta2, eps, weight_decay, clip */
		cg_cu_put_f64(out, n->attrs.fx[k]);
		fputs(k < 4 ? ", " : ");\n", out);
	}
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(ir_node_numel(cg_cu_node(e, e->pk->args[0])));
}

static void emit_sgd(CudaEmit *e)
{
	FILE *out = e->out;
	const IrNode *n = cg_cu_node(e, e->pk->node);
	bool mom = n->attrs.fx[0] != 0, master = n->attrs.flag;
	int w = master ? 2 + mom : 0, nrm = 2 + mom + master;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	fputs("\tdtmc_sgd(a, ", out);
	cg_cu_put_ptr(e, 0, false);
	fputs(", ", out);
	cg_cu_put_ptr(e, 1, true);
	fputs(", ", out);
	if (mom)
		cg_cu_put_ptr(e, 2, false);
	else
		fputs("(float *)0", out);
	fputs(", ", out);
	cg_cu_put_ptr(e, w, false);
	fprintf(out, ", %s, ", master ? "true" : "false");
	cg_cu_put_ptr(e, nrm, true);
	fputs(", ", out);
	cg_cu_put_out(e);
	fprintf(out, ", %lldLL, ", (long long)ir_node_numel(cg_cu_node(e, e->pk->args[0])));
	cg_cu_put_f64(out, n->attrs.fx[0]);
	fputs(", ", out);
	cg_cu_put_f64(out, n->attrs.fx[3]);
	fputs(", ", out);
	cg_cu_put_f64(out, n->attrs.fx[4]);
	fprintf(out, ", %s);\n", n->attrs.nints > 0 && n->attrs.ints[0] ? "true" : "false");
	cg_cu_end_kernel(e);
	e->k = cg_cuda_launch_elementwise(ir_node_numel(cg_cu_node(e, e->pk->args[0])));
}

/* assign(dst, src) -> dst. */
static void emit_assign(CudaEmit *e)
{
	FILE *out = e->out;
	cg_cu_begin_kernel(e, CG_CUDA_BLOCK);
	cg_cu_put_ew_head(e, ir_node_numel(cg_cu_node(e, e->pk->args[0])));
	fputs("\t", out);
	cg_cu_put_ptr(e, 0, false);
	fputs("[i] = ", out);
	cg_cu_put_ptr(e, 1, true);
	fprintf(out, "[i];\n\tif (a.p[%d] != a.p[0])\n\t\t", cg_cu_out_arg(e));
	cg_cu_put_out(e);
	fputs("[i] = ", out);
	cg_cu_put_ptr(e, 0, true);
	fputs("[i];\n", out);
	cg_cu_end_kernel(e);
}

/* ---- dispatch ---- */

bool cg_cu_emit_kernel(CudaEmit *e)
{
	const CgPlanKernel *pk = e->pk;
	const IrNode *n = cg_cu_node(e, pk->node);
	FILE *out = e->out;
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
	fprintf(out, "/* %s: %s */\n", e->name, label);
	if (pk->fused)
		return emit_elementwise(e, pk->node, pk->node);
	if (ir_op_flags(n->op) & OPF_ELEMWISE)
		return emit_elementwise(e, -1, pk->node);
	bool red[IR_MAX_RANK] = {false};
	switch (n->op) {
	case IR_OP_CONST:
		emit_const(e);
		break;
	case IR_OP_MATMUL:
		emit_matmul(e);
		break;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX: {
		const IrNode *x = cg_cu_node(e, pk->args[0]);
		for (int k = 0; k < n->attrs.nints; k++) {
			int64_t ax = n->attrs.ints[k] < 0 ? n->attrs.ints[k] + x->rank
			                                  : n->attrs.ints[k];
			if (ax >= 0 && ax < x->rank)
				red[ax] = true;
		}
		emit_reduce(e, n->op == IR_OP_SUM ? 0 : n->op == IR_OP_MEAN ? 1 : 2, red);
		break;
	}
	case IR_OP_SUM_TO:
		sum_to_dims(cg_cu_node(e, pk->args[0]), n, red);
		emit_reduce(e, 0, red);
		break;
	case IR_OP_MAX_BWD: {
		const IrNode *x = cg_cu_node(e, pk->args[1]);
		for (int k = 0; k < n->attrs.nints; k++)
			if (n->attrs.ints[k] >= 0 && n->attrs.ints[k] < x->rank)
				red[n->attrs.ints[k]] = true;
		emit_max_bwd(e, red);
		break;
	}
	case IR_OP_SOFTMAX:
		emit_softmax(e, false, false);
		break;
	case IR_OP_LOG_SOFTMAX:
		emit_softmax(e, true, false);
		break;
	case IR_OP_SOFTMAX_BWD:
		emit_softmax(e, false, true);
		break;
	case IR_OP_LOG_SOFTMAX_BWD:
		emit_softmax(e, true, true);
		break;
	case IR_OP_LAYERNORM:
		emit_norm(e, true, false);
		break;
	case IR_OP_RMSNORM:
		emit_norm(e, false, false);
		break;
	case IR_OP_LAYERNORM_BWD:
		emit_norm(e, true, true);
		break;
	case IR_OP_RMSNORM_BWD:
		emit_norm(e, false, true);
		break;
	case IR_OP_LAYERNORM_BWD_GAMMA:
		emit_norm_gamma(e, true);
		break;
	case IR_OP_RMSNORM_BWD_GAMMA:
		emit_norm_gamma(e, false);
		break;
	case IR_OP_EMBED:
		emit_embed(e, false);
		break;
	case IR_OP_EMBED_VP:
		emit_embed(e, true);
		break;
	case IR_OP_EMBED_BWD:
		emit_embed_bwd(e, false);
		break;
	case IR_OP_EMBED_BWD_VP:
		emit_embed_bwd(e, true);
		break;
	case IR_OP_PERMUTE:
		emit_permute(e);
		break;
	case IR_OP_RESHAPE:
		emit_copy(e, true);
		break;
	case IR_OP_CONCAT:
		emit_concat(e);
		break;
	case IR_OP_SLICE:
		emit_slice(e, false);
		break;
	case IR_OP_SHARD_SLICE:
		emit_slice(e, true);
		break;
	case IR_OP_PAD:
		emit_pad(e);
		break;
	case IR_OP_PAD_MASK:
		emit_pad_mask(e);
		break;
	case IR_OP_EXPAND:
		emit_expand(e);
		break;
	case IR_OP_ATTENTION:
		emit_attention(e, false);
		break;
	case IR_OP_ATTENTION_BWD:
		emit_attention(e, true);
		break;
	case IR_OP_CROSS_ENTROPY:
		emit_cross_entropy(e);
		break;
	case IR_OP_CROSS_ENTROPY_BWD:
		emit_cross_entropy_bwd(e);
		break;
	case IR_OP_CE_TARGET:
		emit_ce_target(e);
		break;
	case IR_OP_CE_SUMEXP:
		emit_ce_sumexp(e);
		break;
	case IR_OP_CE_BWD_VP:
		emit_ce_bwd_vp(e);
		break;
	case IR_OP_MSE:
		emit_mse(e);
		break;
	case IR_OP_RELU_BWD:
		emit_act_bwd(e, "x > 0 ? g : 0.0f");
		break;
	case IR_OP_GELU_BWD:
		emit_act_bwd(e, "g * dtmc_gelu_grad(x)");
		break;
	case IR_OP_SILU_BWD:
		emit_act_bwd(e, "g * dtmc_silu_grad(x)");
		break;
	case IR_OP_GRAD_NORM:
		emit_grad_norm(e);
		break;
	case IR_OP_ADAMW_STEP:
		emit_adamw(e);
		break;
	case IR_OP_SGD_STEP:
		emit_sgd(e);
		break;
	case IR_OP_ASSIGN:
		emit_assign(e);
		break;
	default:
		diag_error(e->d, n->loc, "%s: no CUDA kernel for this op", ir_op_name(n->op));
		return false;
	}
	return true;
}
