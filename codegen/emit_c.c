/* emit_c.c - writes the training program's C file (see emit_c.h).
 *
 * Consumes the final IR (one rank's program: after `partition` shapes are
 * shards), its FusePlan and its MemPlan; produces C text.  Node by node,
 * in order:
 *   matmul that one strided GEMM expresses -> a DTM_ACT_GEMM action
 *     (transposes folded into trans flags; a batch over A's rows with a
 *     shared B becomes one tall GEMM, which BLAS runs far faster than a
 *     loop of small ones);
 *   root of a fused elementwise group -> a generated loop kernel, one C
 *     statement per member (so nothing is evaluated twice);
 *   collective -> a DTM_ACT_COLL action (runtime/comm.c's conventions);
 *   shard_slice -> a dtmk_shard_slice wrapper (this rank's chunk, from
 *     ctx->coords);
 *   any other op NAME -> a wrapper that fills a DtmkArgs with constant
 *     shapes and attributes and calls dtmk_NAME: generic, so an op added to
 *     ops.def needs only its kernel in codegen/cpu/;
 *   leaves -> nothing (const: a dtmk_const wrapper).
 * Phases: nodes up to the loss are forward (what --eval-every runs), from
 * the first optimizer node (in-place update or grad_norm) on they are
 * optimizer, the rest backward.
 */
#include "emit_c.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Emit {
	FILE *out;
	const IrModule *m;
	const FusePlan *fp;
	const MemPlan *mp;
	Diag *d;
	int *bufid;      /* per node: its buffer (its storage owner's), or -1 */
	int nbuf;
	int *kernel;     /* per node: kernel index, or -1 */
	int nkernels;
	int opt_start;   /* first optimizer node */
} Emit;

/* ---- small writers ---- */

/* A float literal C accepts as float: always with a '.' or exponent. */
static void put_float(FILE *out, double v, bool f32)
{
	if (isnan(v)) {
		fputs("NAN", out);
		return;
	}
	if (isinf(v)) {
		fputs(v > 0 ? "INFINITY" : "-INFINITY", out);
		return;
	}
	char buf[64];
	snprintf(buf, sizeof buf, f32 ? "%.9g" : "%.17g", v);
	fputs(buf, out);
	if (!strpbrk(buf, ".eE"))
		fputs(".0", out);
	if (f32)
		fputc('f', out);
}

static void put_string(FILE *out, const char *s)
{
	if (!s) {
		fputs("NULL", out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 32 || c >= 127)
			fprintf(out, "\\%03o", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

static const char *dtype_enum(IrDtype t)
{
	switch (t) {
	case IR_F32: return "DTM_F32";
	case IR_BF16: return "DTM_BF16";
	case IR_F16: return "DTM_F16";
	case IR_I32: return "DTM_I32";
	default: return "DTM_F32";
	}
}

static const char *ctype(IrDtype t)
{
	switch (t) {
	case IR_BF16:
	case IR_F16: return "uint16_t";
	case IR_I32: return "int32_t";
	default: return "float";
	}
}

static const char *role_enum(IrRole r)
{
	switch (r) {
	case IR_ROLE_PARAM: return "DTM_ROLE_PARAM";
	case IR_ROLE_INPUT: return "DTM_ROLE_INPUT";
	case IR_ROLE_LOSS: return "DTM_ROLE_LOSS";
	case IR_ROLE_GRAD: return "DTM_ROLE_GRAD";
	case IR_ROLE_OPT_STATE: return "DTM_ROLE_OPT_STATE";
	default: return "DTM_ROLE_ACT";
	}
}

static const char *arena_enum(int a)
{
	static const char *names[DTM_ARENA_COUNT] = { "DTM_ARENA_PARAM", "DTM_ARENA_OPT",
						      "DTM_ARENA_GRAD", "DTM_ARENA_ACT",
						      "DTM_ARENA_INPUT" };
	return a >= 0 && a < DTM_ARENA_COUNT ? names[a] : "DTM_ARENA_ACT";
}

static void put_shape(FILE *out, const IrNode *n)
{
	fputc('{', out);
	for (int i = 0; i < n->rank; i++)
		fprintf(out, "%s%lld", i ? ", " : " ", (long long)n->shape[i]);
	fputs(n->rank ? " }" : "0 }", out);
}

/* After `partition` shapes are this rank's shards; shards are even
 * (partition refuses uneven ones), so a dim's global extent is the local
 * one times the number of shards.  One rank: the local shape. */
static int64_t global_dim(const IrModule *m, const IrNode *n, int d)
{
	return n->shape[d] * placement_dim_parts(&n->place, &m->mesh, d);
}

static void put_global_shape(FILE *out, const IrModule *m, const IrNode *n)
{
	fputc('{', out);
	for (int i = 0; i < n->rank; i++)
		fprintf(out, "%s%lld", i ? ", " : " ", (long long)global_dim(m, n, i));
	fputs(n->rank ? " }" : "0 }", out);
}

/* The split layout the runtime's init, data feed and checkpoints index by
 * (DtmBuffer.split_axes): per dim, the mesh axes cutting it, major first.
 * Axes of size 1 cut nothing and are left out, so a one-rank plan's
 * tables stay as they were. */
static void put_split(FILE *out, const IrModule *m, const IrNode *n)
{
	const Placement *p = &n->place;
	if (!p->known)
		return;
	bool any = false;
	for (int d = 0; d < n->rank && d < p->ndims; d++)
		for (int k = 0; k < p->naxes[d]; k++)
			any |= m->mesh.sizes[p->axes[d][k]] > 1;
	if (!any)
		return;
	fputs(",\n\t\t.split_naxes = {", out);
	for (int d = 0; d < n->rank; d++) {
		int c = 0;
		for (int k = 0; d < p->ndims && k < p->naxes[d]; k++)
			c += m->mesh.sizes[p->axes[d][k]] > 1;
		fprintf(out, "%s%d", d ? ", " : " ", c);
	}
	fputs(" }, .split_axes = {", out);
	for (int d = 0; d < n->rank; d++) {
		fputs(d ? ", {" : " {", out);
		int c = 0;
		for (int k = 0; d < p->ndims && k < p->naxes[d]; k++)
			if (m->mesh.sizes[p->axes[d][k]] > 1)
				fprintf(out, "%s%d", c++ ? ", " : " ", (int)p->axes[d][k]);
		fputs(c ? " }" : "0 }", out);
	}
	fputs(" }", out);
}

static bool is_grad_norm(const IrNode *n)
{
	return (n->name && strcmp(n->name, "grad_norm") == 0) || strcmp(ir_op_name(n->op), "grad_norm") == 0;
}

static const char *phase_enum(const Emit *e, int id)
{
	if (e->m->loss < 0 || id <= e->m->loss)
		return "DTM_PHASE_FORWARD";
	return id >= e->opt_start ? "DTM_PHASE_OPTIMIZER" : "DTM_PHASE_BACKWARD";
}

static void put_label(FILE *out, const IrNode *n)
{
	char buf[512];
	if (n->name)
		snprintf(buf, sizeof buf, "%s %s", ir_op_name(n->op), n->name);
	else
		snprintf(buf, sizeof buf, "%s %%%d", ir_op_name(n->op), n->id);
	put_string(out, buf);
}

/* ---- what each node becomes ---- */

typedef enum NodeKind { NK_NONE, NK_GEMM, NK_FUSED, NK_COLL, NK_KERNEL, NK_GNORM } NodeKind;

/* Gradients per action of a chunked grad_norm (plus its output). */
#define GNORM_CHUNK (DTM_MAX_ARGS - 2)

static int gnorm_chunks(const IrNode *n)
{
	return (n->nops + GNORM_CHUNK - 1) / GNORM_CHUNK;
}

static NodeKind node_kind(const Emit *e, int i)
{
	const IrNode *n = e->m->nodes[i];
	if (e->fp->internal[i] || e->fp->folded[i])
		return NK_NONE;
	/* a copy-free reshape shares its operand's bytes: nothing to run */
	if (e->mp->buf[i].owner >= 0 && e->mp->buf[i].owner != i &&
	    !(ir_op_flags(n->op) & OPF_INPLACE))
		return NK_NONE;
	unsigned fl = ir_op_flags(n->op);
	if (fl & OPF_LEAF)
		return n->op == IR_OP_CONST ? NK_KERNEL : NK_NONE;
	if (fl & OPF_COLL)
		return NK_COLL;
	if (n->op == IR_OP_GRAD_NORM && n->nops > DTM_MAX_ARGS - 1)
		return NK_GNORM;
	if (n->op == IR_OP_MATMUL && pass_matmul_is_gemm(e->m, n))
		return NK_GEMM;
	if (e->fp->root[i] == i)
		return NK_FUSED;
	return NK_KERNEL;
}

/* ---- fused elementwise loops ---- */

/* Index into external input X (broadcast onto the root's shape S) for
 * flat output index i, written as C. */
/* How operand x is indexed inside a fused loop over s's elements. */
typedef enum BcastKind {
	BC_FULL,   /* x[i] */
	BC_SCALAR, /* x[0] */
	BC_SUFFIX, /* x[i % period]: x is s's trailing dims */
	BC_PREFIX, /* x[i / period]: x is s's leading dims */
	BC_OTHER,  /* the general strided index */
} BcastKind;

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

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static void put_bcast_index(FILE *out, const IrNode *x, const IrNode *s)
{
	int64_t per;
	switch (bcast_kind(x, s, &per)) {
	case BC_FULL: fputs("i", out); return;
	case BC_SCALAR: fputs("0", out); return;
	case BC_SUFFIX: fprintf(out, "i %% %lld", (long long)per); return;
	case BC_PREFIX: fprintf(out, "i / %lld", (long long)per); return;
	case BC_OTHER: break;
	}
	int R = s->rank;
	int64_t xs[IR_MAX_RANK];
	for (int d = 0; d < R; d++) {
		int j = d - (R - x->rank);
		xs[d] = j >= 0 ? x->shape[j] : 1;
	}
	int64_t ss = 1, sx = 1, sst[IR_MAX_RANK], sxt[IR_MAX_RANK];
	for (int d = R - 1; d >= 0; d--) {
		sst[d] = ss;
		sxt[d] = sx;
		ss *= s->shape[d];
		sx *= xs[d];
	}
	bool first = true;
	for (int d = 0; d < R; d++) {
		if (xs[d] == 1)
			continue;
		fprintf(out, "%s(i / %lld %% %lld) * %lld", first ? "" : " + ", (long long)sst[d],
		        (long long)s->shape[d], (long long)sxt[d]);
		first = false;
	}
	if (first)
		fputs("0", out);
}

/* runs: the loop is split into runs that cross no multiple of the
 * broadcast periods, where suffix operands read b<k> + c (c counts from
 * the run's start) and prefix operands read b<k>: contiguous or constant,
 * so the inner loop vectorises (x[i % 64] did not). */
static void put_load(FILE *out, int k, const IrNode *x, const IrNode *s, bool runs)
{
	const char *pre = "", *post = "";
	switch (x->dtype) {
	case IR_BF16: pre = "dtmk_bf16_to_f32("; post = ")"; break;
	case IR_F16: pre = "dtmk_f16_to_f32("; post = ")"; break;
	case IR_I32: pre = "(float)"; break;
	default: break;
	}
	fprintf(out, "\t\tconst float x%d = %sin%d[", k, pre, k);
	int64_t per;
	BcastKind bk = bcast_kind(x, s, &per);
	if (runs && bk == BC_SUFFIX)
		fprintf(out, "b%d + (i - s)", k);
	else if (runs && bk == BC_PREFIX)
		fprintf(out, "b%d", k);
	else
		put_bcast_index(out, x, s);
	fprintf(out, "]%s;\n", post);
}

/* One member's statement: `const float tID = EXPR;`. */
static bool put_member(Emit *e, const IrNode *n, const int *ext, int next)
{
	FILE *out = e->out;
	char a[2][32];
	for (int k = 0; k < n->nops && k < 2; k++) {
		int o = n->ops[k];
		if (e->fp->root[o] == e->fp->root[n->id] && e->fp->internal[o]) {
			snprintf(a[k], sizeof a[k], "t%d", o);
			continue;
		}
		int j = 0;
		while (j < next && ext[j] != o)
			j++;
		snprintf(a[k], sizeof a[k], "x%d", j);
	}
	fprintf(out, "\t\tconst float t%d = ", n->id);
	switch (n->op) {
	case IR_OP_ADD: fprintf(out, "%s + %s", a[0], a[1]); break;
	case IR_OP_SUB: fprintf(out, "%s - %s", a[0], a[1]); break;
	case IR_OP_MUL: fprintf(out, "%s * %s", a[0], a[1]); break;
	case IR_OP_DIV: fprintf(out, "%s / %s", a[0], a[1]); break;
	case IR_OP_NEG: fprintf(out, "-%s", a[0]); break;
	case IR_OP_EXP: fprintf(out, "expf(%s)", a[0]); break;
	case IR_OP_LOG: fprintf(out, "logf(%s)", a[0]); break;
	case IR_OP_SQRT: fprintf(out, "sqrtf(%s)", a[0]); break;
	case IR_OP_RSQRT: fprintf(out, "1.0f / sqrtf(%s)", a[0]); break;
	case IR_OP_TANH: fprintf(out, "tanhf(%s)", a[0]); break;
	case IR_OP_RELU: fprintf(out, "dtmk_relu_f(%s)", a[0]); break;
	case IR_OP_GELU: fprintf(out, "dtmk_gelu_f(%s)", a[0]); break;
	case IR_OP_SILU: fprintf(out, "dtmk_silu_f(%s)", a[0]); break;
	case IR_OP_SIGMOID: fprintf(out, "dtmk_sigmoid_f(%s)", a[0]); break;
	case IR_OP_SCALE:
		fprintf(out, "%s * ", a[0]);
		put_float(out, n->attrs.f[0], true);
		break;
	case IR_OP_CAST:
		if (n->dtype == IR_BF16)
			fprintf(out, "dtmk_round_bf16_f(%s)", a[0]);
		else if (n->dtype == IR_F16)
			fprintf(out, "dtmk_round_f16_f(%s)", a[0]);
		else if (n->dtype == IR_I32)
			fprintf(out, "(float)(int32_t)%s", a[0]);
		else
			fprintf(out, "%s", a[0]);
		break;
	case IR_OP_DROPOUT:
		fprintf(out, "dtmk_dropout_f(ctx, %s, ", a[0]);
		put_float(out, n->attrs.f[0], true);
		fprintf(out, ", %uu, i)", (unsigned)(uint32_t)n->attrs.ints[0]);
		break;
	default:
		diag_error(e->d, n->loc, "internal: no C expression for elementwise op '%s'",
		           ir_op_name(n->op));
		return false;
	}
	fputs(";\n", out);
	return true;
}

static bool emit_fused(Emit *e, int r)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	const IrNode *root = m->nodes[r];
	int ext[FUSE_MAX_INPUTS + 8], next = 0;
	for (int x = 0; x <= r; x++) {
		if (e->fp->root[x] != r)
			continue;
		const IrNode *n = m->nodes[x];
		for (int k = 0; k < n->nops; k++) {
			int o = n->ops[k];
			if (e->fp->root[o] == r && e->fp->internal[o])
				continue;
			bool seen = false;
			for (int j = 0; j < next; j++)
				seen |= ext[j] == o;
			if (!seen) {
				if (next >= DTM_MAX_ARGS - 1) {
					diag_error(e->d, root->loc,
					           "internal: fused group of %%%d has too many inputs", r);
					return false;
				}
				ext[next++] = o;
			}
		}
	}
	fprintf(out, "/* fused: ");
	for (int x = 0; x <= r; x++)
		if (e->fp->root[x] == r)
			fprintf(out, "%s%%%d ", ir_op_name(m->nodes[x]->op), x);
	fprintf(out, "*/\nstatic void fb_%d(void *argp, int64_t lo, int64_t hi)\n{\n", r);
	fputs("\tconst struct dtm_fuse_job *j = argp;\n\tconst DtmCtx *ctx = j->ctx;\n\t(void)ctx;\n",
	      out);
	for (int k = 0; k < next; k++)
		fprintf(out, "\tconst %s *restrict in%d = j->args[%d];\n",
		        ctype(m->nodes[ext[k]]->dtype), k, k);
	fprintf(out, "\t%s *restrict out = j->args[%d];\n", ctype(root->dtype), next);
	/* the run length: the gcd of the broadcast periods */
	int64_t run = 0;
	for (int k = 0; k < next; k++) {
		int64_t per;
		BcastKind bk = bcast_kind(m->nodes[ext[k]], root, &per);
		if (bk == BC_SUFFIX || bk == BC_PREFIX)
			run = gcd64(run, per);
	}
	bool runs = run >= 8;
	if (runs) {
		fprintf(out, "\tfor (int64_t s = lo, e; s < hi; s = e) {\n"
		             "\t\te = s - s %% %lld + %lld;\n\t\tif (e > hi)\n\t\t\te = hi;\n",
		        (long long)run, (long long)run);
		for (int k = 0; k < next; k++) {
			int64_t per;
			BcastKind bk = bcast_kind(m->nodes[ext[k]], root, &per);
			if (bk == BC_SUFFIX)
				fprintf(out, "\t\tconst int64_t b%d = s %% %lld;\n", k, (long long)per);
			else if (bk == BC_PREFIX)
				fprintf(out, "\t\tconst int64_t b%d = s / %lld;\n", k, (long long)per);
		}
		fputs("\tfor (int64_t i = s; i < e; i++) {\n", out);
	} else {
		fputs("\tfor (int64_t i = lo; i < hi; i++) {\n", out);
	}
	for (int k = 0; k < next; k++)
		put_load(out, k, m->nodes[ext[k]], root, runs);
	for (int x = 0; x <= r; x++)
		if (e->fp->root[x] == r && !put_member(e, m->nodes[x], ext, next))
			return false;
	switch (root->dtype) {
	case IR_BF16: fprintf(out, "\t\tout[i] = dtmk_f32_to_bf16(t%d);\n", r); break;
	case IR_F16: fprintf(out, "\t\tout[i] = dtmk_f32_to_f16(t%d);\n", r); break;
	case IR_I32: fprintf(out, "\t\tout[i] = (int32_t)t%d;\n", r); break;
	default: fprintf(out, "\t\tout[i] = t%d;\n", r); break;
	}
	fputs(runs ? "\t}\n\t}\n}\n\n" : "\t}\n}\n\n", out);
	fprintf(out, "static void k_%d(const DtmCtx *ctx, void *const *args)\n{\n"
	             "\tstruct dtm_fuse_job j = { ctx, args };\n"
	             "\tdtmk_par(ctx, %lld, DTMK_EW_GRAIN, fb_%d, &j);\n}\n\n",
	        r, (long long)ir_node_numel(root), r);
	return true;
}

/* ---- generic wrappers ---- */

static void put_tensor(FILE *out, const IrNode *n)
{
	fprintf(out, "{ NULL, %s, %d, ", dtype_enum(n->dtype), n->rank);
	put_shape(out, n);
	fprintf(out, ", %lld }", (long long)ir_node_numel(n));
}

static bool emit_wrapper(Emit *e, int i)
{
	FILE *out = e->out;
	const IrNode *n = e->m->nodes[i];
	if (n->nops + 1 > DTM_MAX_ARGS) {
		diag_error(e->d, n->loc, "%s with %d operands: the CPU back end takes at most %d",
		           ir_op_name(n->op), n->nops, DTM_MAX_ARGS - 1);
		return false;
	}
	fprintf(out, "static void k_%d(const DtmCtx *ctx, void *const *args)\n{\n", i);
	fprintf(out, "\tstatic const DtmkArgs t = {\n\t\t.nin = %d,\n\t\t.in = {", n->nops);
	for (int k = 0; k < n->nops; k++) {
		fputs(k ? ",\n\t\t\t" : "\n\t\t\t", out);
		put_tensor(out, e->m->nodes[n->ops[k]]);
	}
	fputs(" },\n\t\t.out = ", out);
	put_tensor(out, n);
	fputs(",\n\t\t.ints = {", out);
	for (int k = 0; k < IR_MAX_INTS && k < 8; k++)
		fprintf(out, "%s%lld", k ? ", " : " ", (long long)n->attrs.ints[k]);
	fprintf(out, " },\n\t\t.nints = %d,\n\t\t.f = { ", n->attrs.nints);
	put_float(out, n->attrs.f[0], false);
	fputs(", ", out);
	put_float(out, n->attrs.f[1], false);
	fputs(" },\n\t\t.fx = { ", out);
	for (int k = 0; k < 6; k++) {
		if (k)
			fputs(", ", out);
		put_float(out, n->attrs.fx[k], false);
	}
	fprintf(out, " },\n\t\t.mesh_axes = %uu,\n\t\t.red = %d,\n\t\t.flag = %d,\n\t\t.node = %d,\n\t};\n",
	        (unsigned)n->attrs.mesh_axes, (int)n->attrs.red, n->attrs.flag ? 1 : 0, i);
	fputs("\tDtmkArgs a = t;\n", out);
	for (int k = 0; k < n->nops; k++)
		fprintf(out, "\ta.in[%d].p = args[%d];\n", k, k);
	fprintf(out, "\ta.out.p = args[%d];\n\tdtmk_%s(ctx, &a);\n}\n\n", n->nops,
	        ir_op_name(n->op));
	return true;
}

/* grad_norm over more gradients than one action carries: a chain of
 * kernels, each adding its gradients' sums of squares (dtmk_sumsq, f64,
 * operand order) to an f64 running sum kept in the output buffer past the
 * f32 result (memplan reserves it), the last writing the square root.  The
 * sum's order is the single kernel's, so the norm is the same. */
static void emit_gnorm(Emit *e, int i)
{
	FILE *out = e->out;
	const IrNode *n = e->m->nodes[i];
	int nc = gnorm_chunks(n);
	for (int c = 0; c < nc; c++) {
		int lo = c * GNORM_CHUNK, hi = lo + GNORM_CHUNK < n->nops ? lo + GNORM_CHUNK : n->nops;
		fprintf(out, "static void k_%d_%d(const DtmCtx *ctx, void *const *args)\n{\n", i, c);
		fprintf(out, "\tstatic const DtmkTensor t[] = {");
		for (int k = lo; k < hi; k++) {
			fputs(k > lo ? ",\n\t\t" : "\n\t\t", out);
			put_tensor(out, e->m->nodes[n->ops[k]]);
		}
		fprintf(out, " };\n\tdouble *acc = (double *)((char *)args[%d] + %d);\n", hi - lo,
		        MEMPLAN_GNORM_ACC);
		fprintf(out, "\tdouble s = %s;\n", c ? "*acc" : "0.0");
		fprintf(out, "\tfor (int k = 0; k < %d; k++) {\n\t\tDtmkTensor x = t[k];\n"
		             "\t\tx.p = args[k];\n\t\ts += dtmk_sumsq(ctx, &x);\n\t}\n\t*acc = s;\n",
		        hi - lo);
		if (c == nc - 1)
			fprintf(out, "\t*(float *)args[%d] = (float)sqrt(s);\n", hi - lo);
		fputs("}\n\n", out);
	}
}

/* ---- the file ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* dtmk.h first, then every other dtmk_*.h in name order: kernel headers
 * of ops added later are picked up without touching the emitter. */
static void emit_includes(Emit *e, const char *src_dir)
{
	FILE *out = e->out;
	fputs("#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
	      "#include \"runtime/plan.h\"\n#include \"codegen/cpu/dtmk.h\"\n",
	      out);
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/codegen/cpu", src_dir ? src_dir : ".");
	DIR *dp = opendir(dir);
	char *names[64];
	int nn = 0;
	bool have_fwd = false;
	if (dp) {
		for (struct dirent *de; (de = readdir(dp)) && nn < 64;) {
			size_t len = strlen(de->d_name);
			if (strncmp(de->d_name, "dtmk_", 5) == 0 && len > 2 &&
			    strcmp(de->d_name + len - 2, ".h") == 0) {
				names[nn++] = strdup(de->d_name);
				have_fwd |= strcmp(de->d_name, "dtmk_fwd.h") == 0;
			}
		}
		closedir(dp);
	}
	qsort(names, (size_t)nn, sizeof names[0], cmp_str);
	/* the forward kernels first: the others may build on its helpers */
	if (have_fwd)
		fputs("#include \"codegen/cpu/dtmk_fwd.h\"\n", out);
	for (int i = 0; i < nn; i++) {
		if (names[i] && strcmp(names[i], "dtmk_fwd.h") != 0)
			fprintf(out, "#include \"codegen/cpu/%s\"\n", names[i]);
		free(names[i]);
	}
	fputs("\nstruct dtm_fuse_job {\n\tconst DtmCtx *ctx;\n\tvoid *const *args;\n};\n\n", out);
}

static void emit_buffers(Emit *e)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	fputs("static const DtmBuffer buffers[] = {\n", out);
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const MemPlanBuf *b = &e->mp->buf[i];
		if (b->owner != i)
			continue;
		IrRole role = i == m->loss ? IR_ROLE_LOSS : n->role;
		fprintf(out, "\t[%d] = { .name = ", e->bufid[i]);
		put_string(out, n->name);
		fprintf(out, ", .role = %s, .dtype = %s, .rank = %d, .shape = ", role_enum(role),
		        dtype_enum(n->dtype), n->rank);
		put_shape(out, n);
		fputs(", .global_shape = ", out);
		put_global_shape(out, m, n);
		put_split(out, m, n);
		char pl[256];
		placement_format(&n->place, &m->mesh, pl, sizeof pl);
		fputs(", .placement = ", out);
		put_string(out, pl);
		fprintf(out, ",\n\t\t.arena = %s, .offset = %lld, .bytes = %lld", arena_enum(b->arena),
		        (long long)b->offset, (long long)b->bytes);
		if (ir_op_attr_kind(n->op) == IR_ATTR_INIT) {
			static const char *inits[] = { "DTM_INIT_NONE", "DTM_INIT_ZEROS",
						       "DTM_INIT_ONES", "DTM_INIT_NORMAL",
						       "DTM_INIT_UNIFORM" };
			int k = (int)n->attrs.init;
			fprintf(out, ", .init = %s, .init_a = ", inits[k >= 0 && k < 5 ? k : 0]);
			put_float(out, n->attrs.f[0], true);
			fputs(", .init_b = ", out);
			put_float(out, n->attrs.f[1], true);
		}
		fputs(" },\n", out);
	}
	fputs("};\n\n", out);
}

/* GEMM fields for matmul n: see the file comment for the batch folding. */
static void emit_gemm(Emit *e, int i)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	const IrNode *n = m->nodes[i];
	bool ta, tb;
	int A = pass_fuse_operand(m, e->fp, i, 0, &ta), B = pass_fuse_operand(m, e->fp, i, 1, &tb);
	const IrNode *an = m->nodes[n->ops[0]], *bn = m->nodes[n->ops[1]];
	int r = n->rank;
	int64_t M = n->shape[r - 2], N = n->shape[r - 1], K = an->shape[an->rank - 1];
	int64_t batch = 1;
	for (int d = 0; d < r - 2; d++)
		batch *= n->shape[d];
	int64_t abat = M * K > 0 ? ir_node_numel(an) / (M * K) : 1;
	int64_t bbat = K * N > 0 ? ir_node_numel(bn) / (K * N) : 1;
	int64_t sa = abat > 1 ? M * K : 0, sb = bbat > 1 ? K * N : 0, sc = M * N;
	if (batch > 1 && abat > 1 && bbat <= 1 && !ta) {
		M *= batch;
		batch = 1;
		sa = sb = sc = 0;
	}
	fprintf(out, "\t{ .kind = DTM_ACT_GEMM, .phase = %s, .node = %d, .label = ", phase_enum(e, i),
	        i);
	put_label(out, n);
	fprintf(out, ",\n\t  .nargs = 3, .args = { %d, %d, %d }, .m = %lld, .n = %lld, .k = %lld, "
	             ".batch = %lld,\n\t  .stride_a = %lld, .stride_b = %lld, .stride_c = %lld, "
	             ".trans_a = %s, .trans_b = %s, .alpha = 1.0f, .beta = 0.0f, .flops = %lld },\n",
	        e->bufid[A], e->bufid[B], e->bufid[i], (long long)M, (long long)N, (long long)K,
	        (long long)batch, (long long)sa, (long long)sb, (long long)sc, ta ? "true" : "false",
	        tb ? "true" : "false", (long long)(2 * M * N * K * batch));
}

static const char *coll_enum(IrOp op)
{
	switch (op) {
	case IR_OP_ALL_GATHER: return "DTM_COLL_ALL_GATHER";
	case IR_OP_REDUCE_SCATTER: return "DTM_COLL_REDUCE_SCATTER";
	case IR_OP_ALL_TO_ALL: return "DTM_COLL_ALL_TO_ALL";
	case IR_OP_BROADCAST: return "DTM_COLL_BROADCAST";
	default: return "DTM_COLL_ALL_REDUCE";
	}
}

static const char *red_enum(IrRed r)
{
	switch (r) {
	case IR_RED_AVG: return "DTM_RED_AVG";
	case IR_RED_MAX: return "DTM_RED_MAX";
	default: return "DTM_RED_SUM";
	}
}

/* A collective's fields, in runtime/comm.c's conventions (above
 * comm_run_action): dim and dim2 are dims of the input's shape (the IR's
 * ints[0], ints[1]: the gather/scatter dim, or all_to_all's split and
 * concat dims), bytes the input's local bytes, a broadcast's root
 * (ints[0], a group index) in peer_offset. */
static void put_coll(FILE *out, const IrModule *m, const IrNode *n)
{
	const IrNode *x = m->nodes[n->ops[0]];
	int i0 = n->attrs.nints > 0 ? (int)n->attrs.ints[0] : 0;
	int i1 = n->attrs.nints > 1 ? (int)n->attrs.ints[1] : 0;
	bool dims = n->op != IR_OP_BROADCAST && n->op != IR_OP_ALL_REDUCE;
	fprintf(out, ",\n\t  .coll = %s, .axes = %uu, .red = %s, .dim = %d, .dim2 = %d",
	        coll_enum(n->op), (unsigned)n->attrs.mesh_axes, red_enum(n->attrs.red),
	        dims ? i0 : 0, n->op == IR_OP_ALL_TO_ALL ? i1 : 0);
	if (n->op == IR_OP_BROADCAST)
		fprintf(out, ", .peer_offset = %d", i0);
	fprintf(out, ", .bytes = %lld, .stream = 1",
	        (long long)(ir_node_numel(x) * ir_dtype_size(x->dtype)));
}

static void emit_actions(Emit *e)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	fputs("static const DtmAction actions[] = {\n", out);
	int count = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		NodeKind k = node_kind(e, i);
		if (k == NK_NONE)
			continue;
		count++;
		if (k == NK_GEMM) {
			emit_gemm(e, i);
			continue;
		}
		if (k == NK_GNORM) {
			for (int c = 0; c < gnorm_chunks(n); c++) {
				int lo = c * GNORM_CHUNK;
				int hi = lo + GNORM_CHUNK < n->nops ? lo + GNORM_CHUNK : n->nops;
				fprintf(out, "\t{ .kind = DTM_ACT_KERNEL, .phase = %s, .node = %d, .label = ",
				        phase_enum(e, i), i);
				put_label(out, n);
				fprintf(out, ", .nargs = %d, .args = {", hi - lo + 1);
				for (int q = lo; q < hi; q++)
					fprintf(out, " %d,", e->bufid[n->ops[q]]);
				fprintf(out, " %d }, .kernel = %d },\n", e->bufid[i], e->kernel[i] + c);
			}
			continue;
		}
		/* args: the kernel's inputs (a fused group's externals in the
		 * order emit_fused numbered them), then the output */
		int args[DTM_MAX_ARGS], na = 0;
		if (k == NK_FUSED) {
			for (int x = 0; x <= i; x++) {
				if (e->fp->root[x] != i)
					continue;
				const IrNode *mx = m->nodes[x];
				for (int q = 0; q < mx->nops; q++) {
					int o = mx->ops[q];
					if (e->fp->root[o] == i && e->fp->internal[o])
						continue;
					bool seen = false;
					for (int j = 0; j < na; j++)
						seen |= args[j] == o;
					if (!seen && na < DTM_MAX_ARGS - 1)
						args[na++] = o;
				}
			}
		} else {
			for (int q = 0; q < n->nops && na < DTM_MAX_ARGS - 1; q++)
				args[na++] = n->ops[q];
		}
		args[na++] = i;
		fprintf(out, "\t{ .kind = %s, .phase = %s, .node = %d, .label = ",
		        k == NK_COLL ? "DTM_ACT_COLL" : "DTM_ACT_KERNEL", phase_enum(e, i), i);
		put_label(out, n);
		fprintf(out, ", .nargs = %d, .args = {", na);
		for (int j = 0; j < na; j++)
			fprintf(out, "%s%d", j ? ", " : " ", e->bufid[args[j]]);
		fputs(" }", out);
		if (k == NK_COLL)
			put_coll(out, m, n);
		else
			fprintf(out, ", .kernel = %d", e->kernel[i]);
		fputs(" },\n", out);
	}
	if (!count)
		fputs("\t{ .kind = DTM_ACT_WAIT, .label = \"empty\" },\n", out);
	fputs("};\n\n", out);
}

static void emit_plan(Emit *e)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	const IrTrain *t = &m->train;
	int inputs[4], ninputs = 0, loss = -1, gnorm = -1;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_INPUT && ninputs < 4 && e->bufid[i] >= 0)
			inputs[ninputs++] = i;
		if (gnorm < 0 && is_grad_norm(n) && e->bufid[i] >= 0)
			gnorm = i;
	}
	/* partitioned: the grad_norm ops are per-group partial norms, the
	 * global norm is the value named grad_norm that combines them */
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->name && strcmp(n->name, "grad_norm") == 0 && e->bufid[i] >= 0) {
			gnorm = i;
			break;
		}
	}
	if (m->loss >= 0)
		loss = m->loss;
	/* tokens when the first two inputs are i32 (tokens, targets), else
	 * regression on (x, y) */
	bool tokens = ninputs >= 2 && m->nodes[inputs[0]]->dtype == IR_I32 &&
	              m->nodes[inputs[1]]->dtype == IR_I32;
	/* global sizes: the data feed draws from the global batch and vocab */
	const IrNode *in0 = ninputs ? m->nodes[inputs[0]] : NULL;
	int64_t B = in0 ? global_dim(m, in0, 0) : 0;
	int64_t T = tokens && in0->rank > 1 ? global_dim(m, in0, 1) : 1;
	int64_t vocab = 0;
	for (int i = 0; tokens && i < m->nnodes && !vocab; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_EMBED || n->op == IR_OP_EMBED_VP)
			vocab = global_dim(m, m->nodes[n->ops[0]], 0);
		else if (n->op == IR_OP_CROSS_ENTROPY)
			vocab = global_dim(m, m->nodes[n->ops[0]], m->nodes[n->ops[0]]->rank - 1);
	}
	fputs("static const DtmStage stages[] = { { (int)(sizeof actions / sizeof actions[0]), "
	      "actions } };\n\n",
	      out);
	fputs("static const DtmPlan plan = {\n\t.version = DTM_PLAN_VERSION,\n\t.model = ", out);
	put_string(out, m->name);
	fprintf(out, ",\n\t.mesh_naxes = %d,\n\t.mesh_names = {", m->mesh.naxes);
	for (int a = 0; a < m->mesh.naxes; a++) {
		fputs(a ? ", " : " ", out);
		put_string(out, m->mesh.names[a]);
	}
	fputs(" },\n\t.mesh_sizes = {", out);
	for (int a = 0; a < m->mesh.naxes; a++)
		fprintf(out, "%s%lld", a ? ", " : " ", (long long)m->mesh.sizes[a]);
	fprintf(out, " },\n\t.nbuffers = %d,\n\t.buffers = buffers,\n\t.arena_bytes = {", e->nbuf);
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		fprintf(out, "%s[%s] = %lld", a ? ", " : " ", arena_enum(a),
		        (long long)e->mp->arena_bytes[a]);
	fprintf(out, " },\n\t.nstages = 1,\n\t.stages = stages,\n\t.nkernels = %d,\n"
	             "\t.kernels = kernels,\n\t.kernel_names = kernel_names,\n\t.ninputs = %d,\n"
	             "\t.inputs = {",
	        e->nkernels, ninputs);
	for (int k = 0; k < ninputs; k++)
		fprintf(out, "%s%d", k ? ", " : " ", e->bufid[inputs[k]]);
	fprintf(out, " },\n\t.loss = %d,\n\t.grad_norm = %d,\n\t.train = {\n\t\t.optimizer = ",
	        loss >= 0 ? e->bufid[loss] : -1, gnorm >= 0 ? e->bufid[gnorm] : -1);
	put_string(out, t->optimizer ? t->optimizer : "sgd");
	fputs(", .lr = ", out);
	put_float(out, t->lr, true);
	fputs(", .beta1 = ", out);
	put_float(out, t->beta1, true);
	fputs(", .beta2 = ", out);
	put_float(out, t->beta2, true);
	fputs(", .eps = ", out);
	put_float(out, t->eps, true);
	fputs(",\n\t\t.weight_decay = ", out);
	put_float(out, t->weight_decay, true);
	fputs(", .clip = ", out);
	put_float(out, t->clip, true);
	fputs(", .momentum = ", out);
	put_float(out, t->momentum, true);
	fprintf(out, ", .nesterov = %s,\n\t\t.lr_schedule = ", t->nesterov ? "true" : "false");
	put_string(out, t->lr_schedule ? t->lr_schedule : "constant");
	fprintf(out, ", .warmup = %lld, .min_lr = ", (long long)t->warmup);
	put_float(out, t->min_lr, true);
	fprintf(out, ",\n\t\t.steps = %lld, .data = ", (long long)t->steps);
	put_string(out, t->data ? t->data : "synthetic");
	fprintf(out, ", .seed = %lld,\n\t\t.tokens_per_step = %lld, .batch = %lld, .seq = %lld, "
	             ".vocab = %lld,\n\t\t.data_kind = %s, .microbatches = %lld, .precision = %s,\n"
	             "\t},\n};\n\n",
	        (long long)t->seed, (long long)(B * T), (long long)B, (long long)(tokens ? T : 0),
	        (long long)vocab, tokens ? "DTM_DATA_TOKENS" : "DTM_DATA_REGRESSION",
	        (long long)(t->microbatches > 0 ? t->microbatches : 1), dtype_enum(t->precision));
	fputs("int main(int argc, char **argv)\n{\n\treturn dtm_main(&plan, argc, argv);\n}\n", out);
}

bool cg_emit_c(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
               const CgEmitOptions *opt, Diag *d)
{
	Emit e = { out, m, fp, mp, d, NULL, 0, NULL, 0, m->nnodes };
	e.bufid = calloc((size_t)m->nnodes + 1, sizeof(int));
	e.kernel = calloc((size_t)m->nnodes + 1, sizeof(int));
	if (!e.bufid || !e.kernel) {
		free(e.bufid);
		free(e.kernel);
		diag_error(d, (SrcLoc){0}, "out of memory generating C");
		return false;
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (i < e.opt_start && ((ir_op_flags(n->op) & OPF_INPLACE) || is_grad_norm(n)))
			e.opt_start = i;
		e.bufid[i] = mp->buf[i].owner == i ? e.nbuf++ : -1;
	}
	for (int i = 0; i < m->nnodes; i++)
		if (mp->buf[i].owner >= 0 && mp->buf[i].owner != i)
			e.bufid[i] = e.bufid[mp->buf[i].owner];
	fprintf(out, "/* Generated by dtmc from model '%s': the kernels and the Plan of one\n"
	             " * training step.  Do not edit. */\n",
	        m->name ? m->name : "?");
	emit_includes(&e, opt ? opt->src_dir : NULL);
	bool ok = true;
	for (int i = 0; i < m->nnodes && ok; i++) {
		e.kernel[i] = -1;
		IrOp op = m->nodes[i]->op;
		if (op == IR_OP_SEND || op == IR_OP_RECV) {
			/* pipeline stages need one program per stage first */
			diag_error(d, m->nodes[i]->loc, "%s: the CPU back end has no pipeline "
			           "send/recv yet", ir_op_name(op));
			ok = false;
			break;
		}
		NodeKind k = node_kind(&e, i);
		int nk = 1;
		if (k == NK_FUSED)
			ok = emit_fused(&e, i);
		else if (k == NK_KERNEL)
			ok = emit_wrapper(&e, i);
		else if (k == NK_GNORM)
			emit_gnorm(&e, i), nk = gnorm_chunks(m->nodes[i]);
		else
			continue;
		e.kernel[i] = e.nkernels;
		e.nkernels += nk;
	}
	if (ok) {
		fputs("static const DtmKernelFn kernels[] = {", out);
		for (int i = 0; i < m->nnodes; i++) {
			if (e.kernel[i] < 0)
				continue;
			if (node_kind(&e, i) == NK_GNORM)
				for (int c = 0; c < gnorm_chunks(m->nodes[i]); c++)
					fprintf(out, "\n\tk_%d_%d,", i, c);
			else
				fprintf(out, "\n\tk_%d,", i);
		}
		fputs(e.nkernels ? "\n};\n\n" : " NULL };\n\n", out);
		fputs("static const char *const kernel_names[] = {", out);
		for (int i = 0; i < m->nnodes; i++) {
			if (e.kernel[i] < 0)
				continue;
			NodeKind k = node_kind(&e, i);
			int nk = k == NK_GNORM ? gnorm_chunks(m->nodes[i]) : 1;
			for (int c = 0; c < nk; c++)
				fprintf(out, "\n\t\"%s\",", k == NK_FUSED ? "fused" :
				                               ir_op_name(m->nodes[i]->op));
		}
		fputs(e.nkernels ? "\n};\n\n" : " NULL };\n\n", out);
		emit_buffers(&e);
		emit_actions(&e);
		emit_plan(&e);
	}
	free(e.bufid);
	free(e.kernel);
	if (ok && (fflush(out) != 0 || ferror(out))) {
		diag_error(d, (SrcLoc){0}, "error writing the generated C");
		ok = false;
	}
	return ok;
}
