/* emit_c.c - writes the training program's C file (see emit_c.h).
 *
 * Consumes the final IR (one rank's program: after `partition` shapes are
 * shards), its FusePlan and its MemPlan; produces C text.  The Plan's
 * tables (buffers, per-stage actions, stages, the plan itself) are printed
 * from the DtmPlan codegen/plan_build.c builds, the one the tools read, so
 * what `dtmc inspect` reports is what the binary runs.  This file adds the
 * kernels' code, one per plan kernel (cg_plan_kernels' numbering):
 *   root of a fused elementwise group -> a generated loop kernel, one C
 *     statement per member (so nothing is evaluated twice);
 *   shard_slice -> a dtmk_shard_slice wrapper (this rank's chunk, from
 *     ctx->coords);
 *   any other op NAME -> a wrapper that fills a DtmkArgs with constant
 *     shapes and attributes and calls dtmk_NAME: generic, so an op added to
 *     ops.def needs only its kernel in codegen/cpu/;
 *   a grad_norm over more gradients than one action carries -> a chain of
 *     kernels, one per chunk;
 *   const -> a dtmk_const wrapper.
 */
#include "codegen/emit_c.h"

#include "codegen/emit_common.h"
#include "codegen/emit_cuda.h"
#include "codegen/plan_build.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A kernel's name while its text is written: replaced by its number among
 * the distinct kernels once the text is known (see emit_kernels). */
#define CG_KID "@K"

typedef struct Emit {
	FILE *out;
	const IrModule *m;
	const FusePlan *fp;
	Diag *d;
} Emit;

/* ---- small writers ---- */

/* A float literal C accepts as float: always with a '.' or exponent. */
static void put_float(FILE *out, double v, bool f32)
{
	cg_put_float(out, v, f32, "NAN", "INFINITY");
}

static void put_float_f32(FILE *out, double v)
{
	put_float(out, v, true);
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


static void put_shape(FILE *out, const IrNode *n)
{
	fputc('{', out);
	for (int i = 0; i < n->rank; i++)
		fprintf(out, "%s%lld", i ? ", " : " ", (long long)n->shape[i]);
	fputs(n->rank ? " }" : "0 }", out);
}


/* ---- fused elementwise loops ---- */

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Index into external input x (broadcast onto the root's shape s) for
 * flat output index i, written as C. */
static void put_bcast_index(FILE *out, const IrNode *x, const IrNode *s)
{
	int64_t per;
	switch (cg_bcast_kind(x, s, &per)) {
	case CG_BC_FULL: fputs("i", out); return;
	case CG_BC_SCALAR: fputs("0", out); return;
	case CG_BC_SUFFIX: fprintf(out, "i %% %lld", (long long)per); return;
	case CG_BC_PREFIX: fprintf(out, "i / %lld", (long long)per); return;
	case CG_BC_OTHER: break;
	}
	int R = s->rank;
	int64_t xs[IR_MAX_RANK];
	cg_bcast_shape(x, s, xs);
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
	CgBcast bk = cg_bcast_kind(x, s, &per);
	if (runs && bk == CG_BC_SUFFIX)
		fprintf(out, "b%d + (i - s)", k);
	else if (runs && bk == CG_BC_PREFIX)
		fprintf(out, "b%d", k);
	else
		put_bcast_index(out, x, s);
	fprintf(out, "]%s;\n", post);
}

/* The C spelling of a fused member's expression (codegen/cpu/dtmk_fwd.h). */
static const CgExprDialect c_dialect = {
	.name = "C", .prefix = "dtmk_", .suffix = "_f", .ctx = "ctx",
	.to_int = "(int32_t)", .i64 = "int64_t", .coords = "ctx->coords",
	.put_f32 = put_float_f32,
};

/* The loop of fused group pk (root r): its external inputs in0.. are the
 * plan kernel's args (cg_plan_kernels lists them in the order the
 * members read them), the output last. */
static bool emit_fused(Emit *e, const CgPlanKernel *pk)
{
	FILE *out = e->out;
	const IrModule *m = e->m;
	int r = pk->node;
	const IrNode *root = m->nodes[r];
	const int *ext = pk->args;
	int next = pk->nargs - 1;
	fprintf(out, "/* fused:");
	for (int x = 0; x <= r; x++)
		if (e->fp->root[x] == r)
			fprintf(out, " %s", ir_op_name(m->nodes[x]->op));
	fputs(" */\nstatic void fb_" CG_KID "(void *argp, int64_t lo, int64_t hi)\n{\n", out);
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
		CgBcast bk = cg_bcast_kind(m->nodes[ext[k]], root, &per);
		if (bk == CG_BC_SUFFIX || bk == CG_BC_PREFIX)
			run = gcd64(run, per);
	}
	bool runs = run >= 8;
	if (runs) {
		fprintf(out, "\tfor (int64_t s = lo, e; s < hi; s = e) {\n"
		             "\t\te = s - s %% %lld + %lld;\n\t\tif (e > hi)\n\t\t\te = hi;\n",
		        (long long)run, (long long)run);
		for (int k = 0; k < next; k++) {
			int64_t per;
			CgBcast bk = cg_bcast_kind(m->nodes[ext[k]], root, &per);
			if (bk == CG_BC_SUFFIX)
				fprintf(out, "\t\tconst int64_t b%d = s %% %lld;\n", k, (long long)per);
			else if (bk == CG_BC_PREFIX)
				fprintf(out, "\t\tconst int64_t b%d = s / %lld;\n", k, (long long)per);
		}
		fputs("\tfor (int64_t i = s; i < e; i++) {\n", out);
	} else {
		fputs("\tfor (int64_t i = lo; i < hi; i++) {\n", out);
	}
	for (int k = 0; k < next; k++)
		put_load(out, k, m->nodes[ext[k]], root, runs);
	for (int x = 0; x <= r; x++)
		if (e->fp->root[x] == r && !cg_put_ew_member(out, "\t\t", &c_dialect, m, e->fp,
		                                             m->nodes[x], r, ext, next, e->d))
			return false;
	switch (root->dtype) {
	case IR_BF16: fprintf(out, "\t\tout[i] = dtmk_f32_to_bf16(t%d);\n", r); break;
	case IR_F16: fprintf(out, "\t\tout[i] = dtmk_f32_to_f16(t%d);\n", r); break;
	case IR_I32: fprintf(out, "\t\tout[i] = (int32_t)t%d;\n", r); break;
	default: fprintf(out, "\t\tout[i] = t%d;\n", r); break;
	}
	fputs(runs ? "\t}\n\t}\n}\n\n" : "\t}\n}\n\n", out);
	fprintf(out, "static void k_" CG_KID "(const DtmCtx *ctx, void *const *args)\n{\n"
	             "\tstruct dtm_fuse_job j = { ctx, args };\n"
	             "\tdtmk_par(ctx, %lld, DTMK_EW_GRAIN, fb_" CG_KID ", &j);\n}\n\n",
	        (long long)ir_node_numel(root));
	return true;
}

/* ---- generic wrappers ---- */

static void put_tensor(FILE *out, const IrNode *n)
{
	fprintf(out, "{ NULL, %s, %d, ", dtype_enum(n->dtype), n->rank);
	put_shape(out, n);
	fprintf(out, ", %lld }", (long long)ir_node_numel(n));
}

/* The kernels of the library codegen/cpu/dtmk_lib.c. */
static const char *const lib_ops[] = {
#define DTMK_OP(name) #name,
#include "codegen/cpu/dtmk_ops.def"
#undef DTMK_OP
};

static bool emit_wrapper(Emit *e, int i)
{
	FILE *out = e->out;
	const IrNode *n = e->m->nodes[i];
	bool have = false;
	for (size_t k = 0; k < sizeof lib_ops / sizeof lib_ops[0] && !have; k++)
		have = strcmp(lib_ops[k], ir_op_name(n->op)) == 0;
	if (!have) {
		diag_internal(e->d, n->loc, "no CPU kernel for op '%s' (codegen/cpu/dtmk_ops.def)",
		              ir_op_name(n->op));
		return false;
	}
	if (n->nops + 1 > DTM_MAX_ARGS) {
		diag_error(e->d, n->loc, "%s with %d operands: the CPU back end takes at most %d",
		           ir_op_name(n->op), n->nops, DTM_MAX_ARGS - 1);
		return false;
	}
	fputs("static void k_" CG_KID "(const DtmCtx *ctx, void *const *args)\n{\n", out);
	fprintf(out, "\tstatic const DtmkArgs t = {\n\t\t.nin = %d,\n\t\t.in = {", n->nops);
	for (int k = 0; k < n->nops; k++) {
		fputs(k ? ",\n\t\t\t" : "\n\t\t\t", out);
		put_tensor(out, e->m->nodes[n->ops[k]]);
	}
	fputs(" },\n\t\t.out = ", out);
	put_tensor(out, n);
	CgKernelAttrs ka;
	cg_kernel_attrs(n, &ka);
	fputs(",\n\t\t.ints = {", out);
	for (int k = 0; k < (ka.nints > 8 ? ka.nints : 8); k++) /* the 9th: ring blocks' seq */
		fprintf(out, "%s%lld", k ? ", " : " ", (long long)ka.ints[k]);
	fprintf(out, " },\n\t\t.nints = %d,\n\t\t.f = { ", ka.nints);
	put_float(out, ka.f[0], false);
	fputs(", ", out);
	put_float(out, ka.f[1], false);
	fputs(" },\n\t\t.fx = { ", out);
	for (int k = 0; k < 6; k++) {
		if (k)
			fputs(", ", out);
		put_float(out, ka.fx[k], false);
	}
	fprintf(out, " },\n\t\t.mesh_axes = %uu,\n\t\t.red = %d,\n\t\t.flag = %d,\n\t};\n",
	        (unsigned)ka.mesh_axes, (int)ka.red, ka.flag ? 1 : 0);
	fputs("\tDtmkArgs a = t;\n", out);
	for (int k = 0; k < n->nops; k++)
		fprintf(out, "\ta.in[%d].p = args[%d];\n", k, k);
	fprintf(out, "\ta.out.p = args[%d];\n\tdtmk_op_%s(ctx, &a);\n}\n\n", n->nops,
	        ir_op_name(n->op));
	return true;
}

/* grad_norm over more gradients than one action carries: a chain of
 * kernels (one per chunk k of the plan), each adding its gradients' sums
 * of squares (dtmk_sumsq, f64, operand order) to an f64 running sum kept in
 * the output buffer past the f32 result (memplan reserves it), the last
 * writing the square root.  The sum's order is the single kernel's, so the
 * norm is the same. */
static void emit_gnorm(Emit *e, const CgPlanKernel *k)
{
	FILE *out = e->out;
	int c = k->chunk, nin = k->nargs - 1;
	fputs("static void k_" CG_KID "(const DtmCtx *ctx, void *const *args)\n{\n", out);
	fprintf(out, "\tstatic const DtmkTensor t[] = {");
	for (int q = 0; q < nin; q++) {
		fputs(q ? ",\n\t\t" : "\n\t\t", out);
		put_tensor(out, e->m->nodes[k->args[q]]);
	}
	fprintf(out, " };\n\tdouble *acc = (double *)((char *)args[%d] + %d);\n", nin,
	        MEMPLAN_GNORM_ACC);
	fprintf(out, "\tdouble s = %s;\n", c ? "*acc" : "0.0");
	fprintf(out, "\tfor (int k = 0; k < %d; k++) {\n\t\tDtmkTensor x = t[k];\n"
	             "\t\tx.p = args[k];\n\t\ts += dtmk_sumsq(ctx, &x);\n\t}\n\t*acc = s;\n",
	        nin);
	if (c == k->nchunks - 1)
		fprintf(out, "\t*(float *)args[%d] = (float)(sqrt(s) * dtmk_inv_scale(ctx));\n", nin);
	fputs("}\n\n", out);
}

/* ---- the file ---- */

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
	char *names[64];
	int nn = cg_list_dir(dir, "dtmk_", ".h", names, 64);
	bool have_fwd = false;
	for (int i = 0; i < nn; i++)
		have_fwd |= names[i] && strcmp(names[i], "dtmk_fwd.h") == 0;
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

/* ---- the Plan's tables, printed from the DtmPlan ---- */

/* An f32 as a C float literal: the shortest decimal that reads back as
 * the same float. */
static void put_f32(FILE *out, float v)
{
	if (isnan(v) || isinf(v)) {
		put_float(out, v, true);
		return;
	}
	char buf[64];
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
		if (strtof(buf, NULL) == v)
			break;
	}
	fputs(buf, out);
	if (!strpbrk(buf, ".eE"))
		fputs(".0", out);
	fputc('f', out);
}

static const char *dtm_dtype_enum(DtmDtype t)
{
	switch (t) {
	case DTM_BF16: return "DTM_BF16";
	case DTM_F16: return "DTM_F16";
	case DTM_I32: return "DTM_I32";
	default: return "DTM_F32";
	}
}

static const char *role_enum(DtmRole r)
{
	switch (r) {
	case DTM_ROLE_PARAM: return "DTM_ROLE_PARAM";
	case DTM_ROLE_INPUT: return "DTM_ROLE_INPUT";
	case DTM_ROLE_LOSS: return "DTM_ROLE_LOSS";
	case DTM_ROLE_GRAD: return "DTM_ROLE_GRAD";
	case DTM_ROLE_OPT_STATE: return "DTM_ROLE_OPT_STATE";
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

static const char *phase_enum(DtmPhase p)
{
	return p == DTM_PHASE_FORWARD ? "DTM_PHASE_FORWARD"
	       : p == DTM_PHASE_BACKWARD ? "DTM_PHASE_BACKWARD" : "DTM_PHASE_OPTIMIZER";
}

static const char *coll_enum(DtmColl c)
{
	switch (c) {
	case DTM_COLL_ALL_GATHER: return "DTM_COLL_ALL_GATHER";
	case DTM_COLL_REDUCE_SCATTER: return "DTM_COLL_REDUCE_SCATTER";
	case DTM_COLL_ALL_TO_ALL: return "DTM_COLL_ALL_TO_ALL";
	case DTM_COLL_BROADCAST: return "DTM_COLL_BROADCAST";
	default: return "DTM_COLL_ALL_REDUCE";
	}
}

static const char *red_enum(DtmRed r)
{
	switch (r) {
	case DTM_RED_AVG: return "DTM_RED_AVG";
	case DTM_RED_MAX: return "DTM_RED_MAX";
	default: return "DTM_RED_SUM";
	}
}

/* `{ a, b, c }`; n == 0 prints `{0 }` (a zero-length list is not C). */
static void put_i64s(FILE *out, const int64_t *v, int n)
{
	fputc('{', out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%lld", i ? ", " : " ", (long long)v[i]);
	fputs(n ? " }" : "0 }", out);
}

static void put_arena_bytes(FILE *out, const int64_t *bytes)
{
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		fprintf(out, "%s[%s] = %lld", a ? ", " : " ", arena_enum(a), (long long)bytes[a]);
}

static void put_buffers(FILE *out, const DtmPlan *p)
{
	fputs("static const DtmBuffer buffers[] = {\n", out);
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		fprintf(out, "\t[%d] = { .name = ", i);
		put_string(out, b->name);
		fprintf(out, ", .role = %s, .dtype = %s, .rank = %d, .shape = ", role_enum(b->role),
		        dtm_dtype_enum(b->dtype), b->rank);
		put_i64s(out, b->shape, b->rank);
		fputs(", .global_shape = ", out);
		put_i64s(out, b->global_shape, b->rank);
		bool split = false;
		for (int d = 0; d < b->rank; d++)
			split |= b->split_naxes[d] > 0;
		if (split) {
			fputs(",\n\t\t.split_naxes = {", out);
			for (int d = 0; d < b->rank; d++)
				fprintf(out, "%s%d", d ? ", " : " ", b->split_naxes[d]);
			fputs(" }, .split_axes = {", out);
			for (int d = 0; d < b->rank; d++) {
				fputs(d ? ", {" : " {", out);
				for (int k = 0; k < b->split_naxes[d]; k++)
					fprintf(out, "%s%d", k ? ", " : " ", b->split_axes[d][k]);
				fputs(b->split_naxes[d] ? " }" : "0 }", out);
			}
			fputs(" }", out);
		}
		fputs(", .placement = ", out);
		put_string(out, b->placement);
		fprintf(out, ",\n\t\t.arena = %s, .offset = %lld, .bytes = %lld", arena_enum(b->arena),
		        (long long)b->offset, (long long)b->bytes);
		if (p->nstages > 1)
			fprintf(out, ", .stage = %d", b->stage);
		if (b->role == DTM_ROLE_PARAM || b->init != DTM_INIT_NONE) {
			static const char *inits[] = { "DTM_INIT_NONE", "DTM_INIT_ZEROS",
						       "DTM_INIT_ONES", "DTM_INIT_NORMAL",
						       "DTM_INIT_UNIFORM" };
			int k = (int)b->init;
			fprintf(out, ", .init = %s, .init_a = ", inits[k >= 0 && k < 5 ? k : 0]);
			put_f32(out, b->init_a);
			fputs(", .init_b = ", out);
			put_f32(out, b->init_b);
		}
		fputs(" },\n", out);
	}
	fputs("};\n\n", out);
}

static void put_args(FILE *out, const DtmAction *a)
{
	fprintf(out, ".nargs = %d, .args = {", a->nargs);
	for (int j = 0; j < a->nargs; j++)
		fprintf(out, "%s%d", j ? ", " : " ", a->args[j]);
	fputs(" }", out);
}

static void put_action(FILE *out, const DtmAction *a)
{
	static const char *kinds[] = { "DTM_ACT_KERNEL", "DTM_ACT_GEMM", "DTM_ACT_COLL",
				       "DTM_ACT_SEND", "DTM_ACT_RECV", "DTM_ACT_WAIT" };
	if (a->kind == DTM_ACT_WAIT) {
		fputs("\t{ .kind = DTM_ACT_WAIT, .label = ", out);
		put_string(out, a->label);
		fputs(" },\n", out);
		return;
	}
	bool p2p = a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV;
	fprintf(out, "\t{ .kind = %s, .phase = %s", kinds[a->kind], phase_enum(a->phase));
	if (p2p || a->microbatch)
		fprintf(out, ", .microbatch = %d", a->microbatch);
	fprintf(out, ", .node = %d, .label = ", a->node);
	put_string(out, a->label);
	switch (a->kind) {
	case DTM_ACT_SEND:
	case DTM_ACT_RECV:
		fputs(", ", out);
		put_args(out, a);
		fprintf(out, ", .axes = %uu, .peer_offset = %d", (unsigned)a->axes, a->peer_offset);
		if (a->peer_mirror)
			fputs(", .peer_mirror = true", out);
		fprintf(out, ", .bytes = %lld, .stream = %d },\n", (long long)a->bytes, a->stream);
		return;
	case DTM_ACT_GEMM:
		fputs(",\n\t  ", out);
		put_args(out, a);
		fprintf(out, ", .m = %lld, .n = %lld, .k = %lld, .batch = %lld,\n\t  .stride_a = %lld, "
		             ".stride_b = %lld, .stride_c = %lld, .trans_a = %s, .trans_b = %s, "
		             ".alpha = ",
		        (long long)a->m, (long long)a->n, (long long)a->k, (long long)a->batch,
		        (long long)a->stride_a, (long long)a->stride_b, (long long)a->stride_c,
		        a->trans_a ? "true" : "false", a->trans_b ? "true" : "false");
		put_f32(out, a->alpha);
		fputs(", .beta = ", out);
		put_f32(out, a->beta);
		fprintf(out, ", .flops = %lld },\n", (long long)a->flops);
		return;
	case DTM_ACT_COLL:
		fputs(", ", out);
		put_args(out, a);
		fprintf(out, ",\n\t  .coll = %s, .axes = %uu, .red = %s, .dim = %d, .dim2 = %d",
		        coll_enum(a->coll), (unsigned)a->axes, red_enum(a->red), a->dim, a->dim2);
		if (a->vdim)
			fprintf(out, ", .vdim = %d", a->vdim);
		if (a->coll == DTM_COLL_BROADCAST)
			fprintf(out, ", .peer_offset = %d", a->peer_offset);
		fprintf(out, ", .bytes = %lld, .stream = %d },\n", (long long)a->bytes, a->stream);
		return;
	default:
		fputs(", ", out);
		put_args(out, a);
		fprintf(out, ", .kernel = %d", a->kernel);
		/* the cost model's inputs, so the binary's plan is dtmc's
		 * (--profile-actions reports them) */
		if (a->flops)
			fprintf(out, ", .flops = %lld", (long long)a->flops);
		if (a->mem_bytes)
			fprintf(out, ", .mem_bytes = %lld", (long long)a->mem_bytes);
		fputs(" },\n", out);
		return;
	}
}

/* The stage table.  Pipelined: per stage its arenas and its copies of the
 * inputs, the loss and the grad norm (a one-stage plan has them in the
 * plan). */
static void put_stages(FILE *out, const DtmPlan *p)
{
	for (int s = 0; s < p->nstages; s++) {
		fprintf(out, "static const DtmAction actions_%d[] = {\n", s);
		for (int i = 0; i < p->stages[s].nactions; i++)
			put_action(out, &p->stages[s].actions[i]);
		fputs("};\n\n", out);
	}
	fputs("static const DtmStage stages[] = {\n", out);
	for (int s = 0; s < p->nstages; s++) {
		const DtmStage *st = &p->stages[s];
		fprintf(out, "\t{ .nactions = (int)(sizeof actions_%d / sizeof actions_%d[0]), "
		        ".actions = actions_%d", s, s, s);
		if (p->nstages > 1) {
			fputs(",\n\t  .arena_bytes = {", out);
			put_arena_bytes(out, st->arena_bytes);
			fprintf(out, " },\n\t  .ninputs = %d, .inputs = {", st->ninputs);
			for (int k = 0; k < st->ninputs; k++)
				fprintf(out, "%s%d", k ? ", " : " ", st->inputs[k]);
			fprintf(out, "%s}, .loss = %d, .grad_norm = %d", st->ninputs ? " " : "0 ",
			        st->loss, st->grad_norm);
		}
		fputs(" },\n", out);
	}
	fputs("};\n\n", out);
}

static void put_plan(FILE *out, const DtmPlan *p, bool cuda)
{
	const DtmTrainCfg *t = &p->train;
	fputs("static const DtmPlan plan = {\n\t.version = DTM_PLAN_VERSION,\n\t.model = ", out);
	put_string(out, p->model);
	fprintf(out, ",\n\t.mesh_naxes = %d,\n\t.mesh_names = {", p->mesh_naxes);
	for (int a = 0; a < p->mesh_naxes; a++) {
		fputs(a ? ", " : " ", out);
		put_string(out, p->mesh_names[a]);
	}
	fputs(" },\n\t.mesh_sizes = {", out);
	for (int a = 0; a < p->mesh_naxes; a++)
		fprintf(out, "%s%lld", a ? ", " : " ", (long long)p->mesh_sizes[a]);
	fprintf(out, " },\n\t.pp_axis = %d,\n\t.nbuffers = %d,\n\t.buffers = buffers,\n\t.arena_bytes = {",
	        p->pp_axis, p->nbuffers);
	put_arena_bytes(out, p->arena_bytes);
	fprintf(out, " },\n\t.nstages = %d,\n\t.stages = stages,\n\t.nkernels = %d,\n"
	             "\t.kernels = kernels,\n\t.kernel_names = kernel_names,\n\t.ninputs = %d,\n"
	             "\t.inputs = {",
	        p->nstages, p->nkernels, p->ninputs);
	for (int k = 0; k < p->ninputs; k++)
		fprintf(out, "%s%d", k ? ", " : " ", p->inputs[k]);
	fprintf(out, " },\n\t.loss = %d,\n\t.grad_norm = %d,\n", p->loss, p->grad_norm);
	if (p->moe_sites)
		fprintf(out, "\t.moe_sites = %d,\n\t.moe_experts = %d,\n", p->moe_sites,
		        p->moe_experts);
	fputs("\t.train = {\n\t\t.optimizer = ", out);
	fputs(t->optimizer == DTM_OPTIMIZER_ADAMW ? "DTM_OPTIMIZER_ADAMW" : "DTM_OPTIMIZER_SGD", out);
	fputs(", .lr = ", out);
	put_f32(out, t->lr);
	fputs(", .beta1 = ", out);
	put_f32(out, t->beta1);
	fputs(", .beta2 = ", out);
	put_f32(out, t->beta2);
	fputs(", .eps = ", out);
	put_f32(out, t->eps);
	fputs(",\n\t\t.weight_decay = ", out);
	put_f32(out, t->weight_decay);
	fputs(", .clip = ", out);
	put_f32(out, t->clip);
	fputs(", .momentum = ", out);
	put_f32(out, t->momentum);
	fprintf(out, ", .nesterov = %s,\n\t\t.lr_schedule = ", t->nesterov ? "true" : "false");
	fputs(t->lr_schedule == DTM_LR_COSINE ? "DTM_LR_COSINE" : "DTM_LR_CONSTANT", out);
	fprintf(out, ", .warmup = %lld, .min_lr = ", (long long)t->warmup);
	put_f32(out, t->min_lr);
	fprintf(out, ",\n\t\t.steps = %lld, .data = ", (long long)t->steps);
	put_string(out, t->data);
	fprintf(out, ", .seed = %lld,\n\t\t.tokens_per_step = %lld, .batch = %lld, .seq = %lld, "
	             ".vocab = %lld,\n\t\t.data_kind = %s, .microbatches = %d, .precision = %s,\n"
	             "\t\t.schedule = ",
	        (long long)t->seed, (long long)t->tokens_per_step, (long long)t->batch,
	        (long long)t->seq, (long long)t->vocab,
	        t->data_kind == DTM_DATA_TOKENS ? "DTM_DATA_TOKENS" : "DTM_DATA_REGRESSION",
	        t->microbatches, dtm_dtype_enum(t->precision));
	static const char *const sched[] = {
		[DTM_PIPE_1F1B] = "DTM_PIPE_1F1B", [DTM_PIPE_GPIPE] = "DTM_PIPE_GPIPE",
		[DTM_PIPE_INTERLEAVED] = "DTM_PIPE_INTERLEAVED", [DTM_PIPE_ZB] = "DTM_PIPE_ZB",
	};
	fputs(sched[t->schedule], out);
	fprintf(out, ", .virtual_stages = %d,\n", t->virtual_stages);
	if (t->loss_scale != DTM_LOSS_SCALE_OFF) {
		fprintf(out, "\t\t.loss_scale = %s, .init_scale = ",
		        t->loss_scale == DTM_LOSS_SCALE_FIXED ? "DTM_LOSS_SCALE_FIXED"
		                                              : "DTM_LOSS_SCALE_DYNAMIC");
		put_f32(out, t->init_scale);
		fputs(", .growth_factor = ", out);
		put_f32(out, t->growth_factor);
		fputs(", .backoff_factor = ", out);
		put_f32(out, t->backoff_factor);
		fprintf(out, ",\n\t\t.growth_interval = %lld,\n", (long long)t->growth_interval);
	}
	fputs("\t},\n", out);
	if (cuda)
		fputs("\t.cuda_source = dtm_cuda_source,\n\t.cuda_kernels = dtm_cuda_kernels,\n", out);
	fputs("};\n\n", out);
}

/* ---- one function per distinct kernel ---- */

/* Writes text with every CG_KID replaced by id. */
static void put_named(FILE *out, const char *s, int id)
{
	size_t lk = strlen(CG_KID);
	for (const char *p; (p = strstr(s, CG_KID)); s = p + lk) {
		fwrite(s, 1, (size_t)(p - s), out);
		fprintf(out, "%d", id);
	}
	fputs(s, out);
}

/* Writes each distinct kernel once and fills kid[k], the function plan
 * kernel k calls: the C grows with the distinct kernels (a layer's, a
 * micro-batch's), not with layers x micro-batches x stages. */
static bool emit_kernels(Emit *e, Arena *a, const CgPlanKernel *ks, int nk, int *kid, int *ndistinct)
{
	FILE *out = e->out;
	CgKeySet *set = cg_keyset_new(a, nk);
	if (!set) {
		diag_error(e->d, (SrcLoc){0}, "out of memory generating C");
		return false;
	}
	int nd = 0;
	bool ok = true;
	for (int k = 0; k < nk && ok; k++) {
		char *buf = NULL;
		size_t len = 0;
		FILE *ms = open_memstream(&buf, &len);
		if (!ms) {
			diag_error(e->d, (SrcLoc){0}, "out of memory generating C");
			return false;
		}
		e->out = ms;
		if (ks[k].nchunks > 1)
			emit_gnorm(e, &ks[k]);
		else if (ks[k].fused)
			ok = emit_fused(e, &ks[k]);
		else
			ok = emit_wrapper(e, ks[k].node);
		e->out = out;
		if (fclose(ms) != 0 || !buf) {
			free(buf);
			diag_error(e->d, (SrcLoc){0}, "out of memory generating C");
			return false;
		}
		size_t cn = 0;
		char *ct = ok ? cg_canon_text(a, buf, len, NULL, &cn) : NULL;
		free(buf);
		if (ok && !ct) {
			diag_error(e->d, (SrcLoc){0}, "out of memory generating C");
			return false;
		}
		if (!ok)
			break;
		bool added;
		kid[k] = cg_keyset_add(set, ct, cn, &added);
		if (added) {
			put_named(out, ct, kid[k]);
			nd++;
		}
	}
	*ndistinct = nd;
	return ok;
}

bool cg_emit_c(FILE *out, const IrModule *m, const FusePlan *fp, const MemPlan *mp,
               const DtmPlan *p, const CgEmitOptions *opt, Diag *d)
{
	Arena a;
	arena_init(&a);
	Emit e = { out, m, fp, d };
	bool cuda = opt && opt->cuda;
	int nk = p->nkernels;
	CgPlanKernel *ks = arena_alloc(&a, sizeof *ks * (size_t)(nk ? nk : 1));
	if (!ks) {
		diag_error(d, (SrcLoc){0}, "out of memory generating C");
		arena_free(&a);
		return false;
	}
	cg_plan_kernels(m, fp, mp, ks, nk);
	fprintf(out, "/* Generated by dtmc from model '%s': the kernels and the Plan of one\n"
	             " * training step.  Do not edit. */\n",
	        m->name ? m->name : "?");
	emit_includes(&e, opt ? opt->src_dir : NULL);
	int *kid = arena_alloc(&a, sizeof *kid * (size_t)(nk ? nk : 1));
	int ndistinct = 0;
	bool ok = kid != NULL;
	if (!ok)
		diag_error(d, (SrcLoc){0}, "out of memory generating C");
	ok = ok && emit_kernels(&e, &a, ks, nk, kid, &ndistinct);
	if (ok) {
		fprintf(out, "/* %d plan kernels call %d distinct functions (node: function) */\n",
		        nk, ndistinct);
		fputs("static const DtmKernelFn kernels[] = {", out);
		for (int k = 0; k < nk; k++)
			fprintf(out, "\n\tk_%d, /* %%%d */", kid[k], ks[k].node);
		fputs(nk ? "\n};\n\n" : " NULL };\n\n", out);
		fputs("static const char *const kernel_names[] = {", out);
		for (int k = 0; k < nk; k++) {
			fputs("\n\t", out);
			put_string(out, p->kernel_names[k]);
			fputc(',', out);
		}
		fputs(nk ? "\n};\n\n" : " NULL };\n\n", out);
		put_buffers(out, p);
		put_stages(out, p);
		if (cuda && !cg_emit_cuda_tables(out, m, fp, mp, opt->src_dir, d))
			ok = false;
	}
	if (ok) {
		put_plan(out, p, cuda);
		fputs("int main(int argc, char **argv)\n{\n\treturn dtm_main(&plan, argc, argv);\n}\n",
		      out);
	}
	arena_free(&a);
	if (ok && (fflush(out) != 0 || ferror(out))) {
		diag_error(d, (SrcLoc){0}, "error writing the generated C");
		ok = false;
	}
	return ok;
}
