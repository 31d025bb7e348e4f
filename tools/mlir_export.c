/* mlir_export.c - dtm's global program as MLIR text (`dtmc export-mlir`).
 *
 * One module: `mesh.mesh @mesh` with every mesh axis (size 1 included;
 * the names in the module's dtm.mesh_axes), and `func.func @forward` whose
 * arguments are the params and inputs in node order (dtm.name, dtm.role,
 * dtm.init as argument attributes) and whose result is the loss.  Every
 * placement dtm knows before propagate (a param's, an input's, an
 * annotation's) is a `mesh.shard` of the value, the users reading the
 * sharded value.  Ops map to the upstream dialects where MLIR has them:
 *   add sub mul div  -> arith.addf/subf/mulf/divf (a broadcast operand is
 *                       linalg.broadcast first, size-1 dims collapsed)
 *   neg exp log sqrt rsqrt tanh -> arith.negf, math.*; scale -> arith.mulf
 *                       by a splat; cast -> arith.extf/truncf
 *   matmul           -> linalg.matmul (2-D) or linalg.generic (batched,
 *                       broadcast batch dims), accumulating into zeros
 *   sum mean max     -> linalg.reduce (mean: times 1/count; keepdims:
 *                       tensor.expand_shape)
 *   softmax          -> linalg.softmax; permute -> linalg.transpose;
 *   reshape          -> tensor.reshape; concat -> tensor.concat; slice ->
 *                       tensor.extract_slice
 * and the rest (embed, norms, attention, rope, the losses, dropout, the
 * routing ops, gelu, silu, sigmoid, relu, log_softmax) are calls of
 * declared functions `@dtm.OP.N` (one per signature) with dtm's own
 * attributes as the call's dtm.attr string: their semantics are
 * ir/ops.def's.  The module carries the mesh axes' names and the train
 * section (dtm.mesh_axes, dtm.train), the arguments their names, roles
 * and inits; not yet the names of other values, the stage and block
 * annotations or source locations (what `dtmc import-mlir` will need to
 * give back the same program: issue 19).  The arguments' mesh.shard come
 * first, in argument order, the others right after the value they shard.
 *
 * The text is parsed and verified by MLIR itself (tools/mlir_capi.c,
 * through the C API) before it is written.
 */
#include "tools/mlir.h"
#include "tools/mlir_text.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *elt(IrDtype t)
{
	switch (t) {
	case IR_F32: return "f32";
	case IR_BF16: return "bf16";
	case IR_F16: return "f16";
	case IR_I32: return "i32";
	default: return "f32";
	}
}

/* tensor<AxBxf32>, tensor<f32> */
void put_type(FILE *f, int rank, const int64_t *shape, IrDtype t)
{
	fputs("tensor<", f);
	for (int d = 0; d < rank; d++)
		fprintf(f, "%" PRId64 "x", shape[d]);
	fprintf(f, "%s>", elt(t));
}

void ntype(FILE *f, const IrNode *n)
{
	put_type(f, n->rank, n->shape, n->dtype);
}

/* A float literal MLIR parses: always with a point or an exponent; the
 * non-finite ones as f32 bit patterns. */
static void put_fp(FILE *f, double v)
{
	if (isnan(v)) {
		fputs("0x7FC00000", f);
		return;
	}
	if (isinf(v)) {
		fputs(v > 0 ? "0x7F800000" : "0xFF800000", f);
		return;
	}
	char b[40];
	snprintf(b, sizeof b, "%.17g", v);
	fputs(b, f);
	if (!strpbrk(b, ".e"))
		fputs(".0", f);
}

/* The SSA name of node i as its users read it. */
static void val(Ex *e, FILE *f, int i)
{
	fprintf(f, "%%%c%d", e->sharded[i] ? 's' : 'v', i);
}

static int tmp(Ex *e)
{
	return e->tmp++;
}

/* A string attribute's body, escaped for MLIR. */
void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\%02X", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* dtm's text of node n's attributes, without the braces' leading blank. */
char *attr_text(const IrModule *m, const IrNode *n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	ir_print_attrs(f, m, n);
	fclose(f);
	if (buf && buf[0] == ' ')
		memmove(buf, buf + 1, strlen(buf));
	return buf;
}

/* The attributes that carry what MLIR's ops do not: ` {dtm.attr = "..",
 * dtm.block = B, dtm.name = "..", dtm.stage = S}` (each when set; attr
 * only for calls), on the op that defines node n's value, so that
 * `dtmc import-mlir` gives back the same program. */
static void tags(Ex *e, FILE *f, const IrNode *n, bool with_attr)
{
	char *a = with_attr ? attr_text(e->m, n) : NULL;
	int stage = ir_stage(e->m, n), block = ir_block(e->m, n);
	const char *sep = " {";
	if (a && *a) {
		fputs(" {dtm.attr = ", f);
		put_str(f, a);
		sep = ", ";
	}
	free(a);
	if (block >= 0) {
		fprintf(f, "%sdtm.block = %d : i64", sep, block);
		sep = ", ";
	}
	if (n->name) {
		fprintf(f, "%sdtm.name = ", sep);
		put_str(f, n->name);
		sep = ", ";
	}
	if (stage >= 0) {
		fprintf(f, "%sdtm.stage = %d : i64", sep, stage);
		sep = ", ";
	}
	if (sep[0] == ',')
		fputc('}', f);
}

/* ` {dtm.attr = "...", ...}`: n's attributes and tags, for a call. */
void put_dtm_attr(Ex *e, FILE *f, const IrNode *n)
{
	tags(e, f, n, true);
}

/* A zero- (or value-) filled tensor of n's type into %tK: tensor.empty and
 * linalg.fill.  Returns K. */
static int filled(Ex *e, int rank, const int64_t *shape, IrDtype t, const char *value)
{
	int c = tmp(e), em = tmp(e), k = tmp(e);
	fprintf(e->body, "    %%t%d = arith.constant %s : %s\n", c, value, elt(t));
	fprintf(e->body, "    %%t%d = tensor.empty() : ", em);
	put_type(e->body, rank, shape, t);
	fprintf(e->body, "\n    %%t%d = linalg.fill ins(%%t%d : %s) outs(%%t%d : ", k, c, elt(t), em);
	put_type(e->body, rank, shape, t);
	fputs(") -> ", e->body);
	put_type(e->body, rank, shape, t);
	fputc('\n', e->body);
	return k;
}

static int empty(Ex *e, int rank, const int64_t *shape, IrDtype t)
{
	int k = tmp(e);
	fprintf(e->body, "    %%t%d = tensor.empty() : ", k);
	put_type(e->body, rank, shape, t);
	fputc('\n', e->body);
	return k;
}

/* Operand o of a broadcasting op, as a value of the result's shape: the
 * operand itself, or (size-1 dims collapsed away) linalg.broadcast to it.
 * Writes the SSA name into name. */
static void bcast(Ex *e, int o, const IrNode *res, char *name, size_t cap)
{
	const IrNode *x = e->m->nodes[o];
	bool same = x->rank == res->rank;
	for (int d = 0; same && d < x->rank; d++)
		same = x->shape[d] == res->shape[d];
	if (same) {
		snprintf(name, cap, "%%%c%d", e->sharded[o] ? 's' : 'v', o);
		return;
	}
	/* keep: x's dims that are not broadcast (aligned right); collapse the
	 * others (size 1) into a neighbour */
	int off = res->rank - x->rank, kept[IR_MAX_RANK], nk = 0;
	int64_t ks[IR_MAX_RANK];
	for (int j = 0; j < x->rank; j++)
		if (!(x->shape[j] == 1 && res->shape[j + off] != 1)) {
			kept[nk] = j + off;
			ks[nk++] = x->shape[j];
		}
	char src[32];
	snprintf(src, sizeof src, "%%%c%d", e->sharded[o] ? 's' : 'v', o);
	if (nk != x->rank) {
		/* reassociation: each kept dim takes the size-1 dims before it; the
		 * trailing ones join the last group (all-1: collapse to rank 0) */
		int c = tmp(e);
		fprintf(e->body, "    %%t%d = tensor.collapse_shape %s [", c, src);
		int j = 0;
		for (int g = 0; g < nk; g++) {
			fputs(g ? ", [" : "[", e->body);
			int last = g == nk - 1 ? x->rank - 1 : kept[g] - off;
			for (bool first = true; j <= last; j++, first = false)
				fprintf(e->body, "%s%d", first ? "" : ", ", j);
			fputc(']', e->body);
		}
		fputs("] : ", e->body);
		ntype(e->body, x);
		fputs(" into ", e->body);
		put_type(e->body, nk, ks, x->dtype);
		fputc('\n', e->body);
		snprintf(src, sizeof src, "%%t%d", c);
	}
	int init = empty(e, res->rank, res->shape, x->dtype), b = tmp(e);
	fprintf(e->body, "    %%t%d = linalg.broadcast ins(%s : ", b, src);
	put_type(e->body, nk, ks, x->dtype);
	fprintf(e->body, ") outs(%%t%d : ", init);
	put_type(e->body, res->rank, res->shape, x->dtype);
	fputs(") dimensions = [", e->body);
	for (int d = 0, first = 1, k = 0; d < res->rank; d++) {
		if (k < nk && kept[k] == d) {
			k++;
			continue;
		}
		fprintf(e->body, "%s%d", first ? "" : ", ", d);
		first = 0;
	}
	fputs("]\n", e->body);
	snprintf(name, cap, "%%t%d", b);
}

/* The callee for op `op` and the call's types: @dtm.OP.N, declared once
 * per distinct signature. */
void mlir_callee(Ex *e, const IrNode *n, char *name, size_t cap)
{
	char *sig = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sig, &len);
	if (!f) {
		e->ok = false;
		return;
	}
	fprintf(f, "%s|(", ir_op_name(n->op));
	for (int i = 0; i < n->nops; i++) {
		if (i)
			fputs(", ", f);
		ntype(f, e->m->nodes[n->ops[i]]);
	}
	fputs(") -> ", f);
	ntype(f, n);
	fclose(f);
	int k = 0, same = 0;
	for (int i = 0; i < e->nsigs; i++) {
		const char *bar = strchr(e->sigs[i], '|');
		if ((size_t)(bar - e->sigs[i]) == strlen(ir_op_name(n->op)) &&
		    !strncmp(e->sigs[i], ir_op_name(n->op), (size_t)(bar - e->sigs[i]))) {
			if (!strcmp(e->sigs[i], sig))
				same = 1;
			if (!same)
				k++;
			if (same)
				break;
		}
	}
	snprintf(name, cap, "@dtm.%s.%d", ir_op_name(n->op), k);
	if (same) {
		free(sig);
		return;
	}
	if (e->nsigs == e->capsigs) {
		int c = e->capsigs ? 2 * e->capsigs : 16;
		char **s = realloc(e->sigs, sizeof *s * (size_t)c);
		if (!s) {
			free(sig);
			e->ok = false;
			return;
		}
		e->sigs = s;
		e->capsigs = c;
	}
	e->sigs[e->nsigs++] = sig;
	fprintf(e->decls, "  func.func private %s%s\n", name, strchr(sig, '|') + 1);
}

void call_op(Ex *e, const IrNode *n)
{
	char name[96];
	mlir_callee(e, n, name, sizeof name);
	fprintf(e->body, "    %%v%d = func.call %s(", n->id, name);
	for (int i = 0; i < n->nops; i++) {
		if (i)
			fputs(", ", e->body);
		val(e, e->body, n->ops[i]);
	}
	fputc(')', e->body);
	tags(e, e->body, n, true);
	fputs(" : (", e->body);
	for (int i = 0; i < n->nops; i++) {
		if (i)
			fputs(", ", e->body);
		ntype(e->body, e->m->nodes[n->ops[i]]);
	}
	fputs(") -> ", e->body);
	ntype(e->body, n);
	fputc('\n', e->body);
}

static bool is_floatt(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static void binary(Ex *e, const IrNode *n, const char *op)
{
	char a[32], b[32];
	bcast(e, n->ops[0], n, a, sizeof a);
	bcast(e, n->ops[1], n, b, sizeof b);
	fprintf(e->body, "    %%v%d = %s %s, %s", n->id, op, a, b);
	tags(e, e->body, n, false);
	fputs(" : ", e->body);
	ntype(e->body, n);
	fputc('\n', e->body);
}

static void unary(Ex *e, const IrNode *n, const char *op)
{
	fprintf(e->body, "    %%v%d = %s ", n->id, op);
	val(e, e->body, n->ops[0]);
	tags(e, e->body, n, false);
	fputs(" : ", e->body);
	ntype(e->body, n);
	fputc('\n', e->body);
}

/* A splat constant of n's type: %tK. */
static int splat(Ex *e, const IrNode *n, double v)
{
	int k = tmp(e);
	fprintf(e->body, "    %%t%d = arith.constant dense<", k);
	put_fp(e->body, v);
	fputs("> : ", e->body);
	ntype(e->body, n);
	fputc('\n', e->body);
	return k;
}

static void matmul(Ex *e, const IrNode *n)
{
	const IrNode *a = e->m->nodes[n->ops[0]], *b = e->m->nodes[n->ops[1]];
	int init = filled(e, n->rank, n->shape, n->dtype, "0.0");
	if (n->rank == 2 && a->rank == 2 && b->rank == 2) {
		fprintf(e->body, "    %%v%d = linalg.matmul", n->id);
		tags(e, e->body, n, false);
		fputs(" ins(", e->body);
		val(e, e->body, a->id);
		fputs(", ", e->body);
		val(e, e->body, b->id);
		fputs(" : ", e->body);
		ntype(e->body, a);
		fputs(", ", e->body);
		ntype(e->body, b);
		fprintf(e->body, ") outs(%%t%d : ", init);
		ntype(e->body, n);
		fputs(") -> ", e->body);
		ntype(e->body, n);
		fputc('\n', e->body);
		return;
	}
	/* loops: the result's dims d0..d(r-1), then k = d(r) */
	int r = n->rank, br = r - 2;
	FILE *f = e->body;
	fprintf(f, "    %%v%d = linalg.generic {indexing_maps = [", n->id);
	const IrNode *in[2] = {a, b};
	for (int s = 0; s < 2; s++) {
		fputs("affine_map<(", f);
		for (int d = 0; d <= r; d++)
			fprintf(f, "%sd%d", d ? ", " : "", d);
		fputs(") -> (", f);
		int ob = in[s]->rank - 2;
		bool first = true;
		for (int j = 0; j < ob; j++) {
			int d = j + br - ob;
			if (in[s]->shape[j] == 1 && n->shape[d] != 1)
				fprintf(f, "%s0", first ? "" : ", ");
			else
				fprintf(f, "%sd%d", first ? "" : ", ", d);
			first = false;
		}
		if (s == 0)
			fprintf(f, "%sd%d, d%d)>, ", first ? "" : ", ", br, r);
		else
			fprintf(f, "%sd%d, d%d)>, ", first ? "" : ", ", r, br + 1);
	}
	fputs("affine_map<(", f);
	for (int d = 0; d <= r; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(") -> (", f);
	for (int d = 0; d < r; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(")>], iterator_types = [", f);
	for (int d = 0; d < r; d++)
		fputs("\"parallel\", ", f);
	fputs("\"reduction\"]} ins(", f);
	val(e, f, a->id);
	fputs(", ", f);
	val(e, f, b->id);
	fputs(" : ", f);
	ntype(f, a);
	fputs(", ", f);
	ntype(f, b);
	fprintf(f, ") outs(%%t%d : ", init);
	ntype(f, n);
	fputc(')', f);
	if (n->name || ir_stage(e->m, n) >= 0 || ir_block(e->m, n) >= 0) {
		fputs(" attrs = ", f);
		tags(e, f, n, false);
	}
	fprintf(f, " {\n    ^bb0(%%a: %s, %%b: %s, %%c: %s):\n", elt(a->dtype), elt(b->dtype),
	        elt(n->dtype));
	fprintf(f, "      %%p = arith.mulf %%a, %%b : %s\n      %%q = arith.addf %%c, %%p : %s\n"
	           "      linalg.yield %%q : %s\n    } -> ", elt(n->dtype), elt(n->dtype),
	        elt(n->dtype));
	ntype(f, n);
	fputc('\n', f);
}

static void reduce(Ex *e, const IrNode *n)
{
	const IrNode *x = e->m->nodes[n->ops[0]];
	const IrAttrAxes *ax = ir_attr_axes(n);
	bool red[IR_MAX_RANK] = {false};
	int64_t rs[IR_MAX_RANK], count = 1;
	int rr = 0;
	for (int k = 0; k < ax->n; k++)
		if (ax->axes[k] >= 0 && ax->axes[k] < x->rank)
			red[ax->axes[k]] = true;
	for (int d = 0; d < x->rank; d++) {
		if (red[d])
			count *= x->shape[d];
		else
			rs[rr++] = x->shape[d];
	}
	bool max = n->op == IR_OP_MAX;
	int init = filled(e, rr, rs, n->dtype, max ? "0xFF800000" : "0.0");
	if (max && n->dtype != IR_F32) /* -inf of a 16-bit type */
		e->ok = false, snprintf(e->err, sizeof e->err, "max of %s", elt(n->dtype));
	/* the last op of reduce, mulf (mean) and expand_shape (keepdims)
	 * defines the node's value */
	bool mean = n->op == IR_OP_MEAN, expand = ax->keepdims && rr != n->rank;
	char cur[32];
	if (mean || expand)
		snprintf(cur, sizeof cur, "%%t%d", tmp(e));
	else
		snprintf(cur, sizeof cur, "%%v%d", n->id);
	FILE *f = e->body;
	fprintf(f, "    %s = linalg.reduce ins(", cur);
	val(e, f, x->id);
	fputs(" : ", f);
	ntype(f, x);
	fprintf(f, ") outs(%%t%d : ", init);
	put_type(f, rr, rs, n->dtype);
	fputs(") dimensions = [", f);
	for (int d = 0, first = 1; d < x->rank; d++)
		if (red[d]) {
			fprintf(f, "%s%d", first ? "" : ", ", d);
			first = 0;
		}
	fputc(']', f);
	if (!mean && !expand)
		tags(e, f, n, false);
	fprintf(f, "\n      (%%in: %s, %%acc: %s) {\n        %%o = %s %%in, %%acc : %s\n"
	           "        linalg.yield %%o : %s\n      }\n",
	        elt(x->dtype), elt(n->dtype), max ? "arith.maximumf" : "arith.addf", elt(n->dtype),
	        elt(n->dtype));
	if (mean) {
		char res[32];
		int c = tmp(e);
		if (expand)
			snprintf(res, sizeof res, "%%t%d", tmp(e));
		else
			snprintf(res, sizeof res, "%%v%d", n->id);
		fprintf(f, "    %%t%d = arith.constant dense<", c);
		put_fp(f, 1.0 / (double)count);
		fputs("> : ", f);
		put_type(f, rr, rs, n->dtype);
		fprintf(f, "\n    %s = arith.mulf %s, %%t%d", res, cur, c);
		if (!expand)
			tags(e, f, n, false);
		fputs(" : ", f);
		put_type(f, rr, rs, n->dtype);
		fputc('\n', f);
		snprintf(cur, sizeof cur, "%s", res);
	}
	if (expand) {
		/* expand back: each kept dim groups the reduced (size 1) dims
		 * after it; leading reduced dims join the first group */
		fprintf(f, "    %%v%d = tensor.expand_shape %s [", n->id, cur);
		if (rr == 0) {
			fputs("] output_shape [", f);
		} else {
			int d = 0;
			for (int g = 0; g < rr; g++) {
				fputs(g ? ", [" : "[", f);
				bool first = true;
				/* group g: up to and including its kept dim, then the
				 * reduced dims that follow when it is the last */
				while (d < n->rank) {
					fprintf(f, "%s%d", first ? "" : ", ", d);
					first = false;
					bool kept = !red[d];
					d++;
					if (kept && g < rr - 1)
						break;
				}
				fputc(']', f);
			}
			fputs("] output_shape [", f);
		}
		for (int d = 0; d < n->rank; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", n->shape[d]);
		fputc(']', f);
		tags(e, f, n, false);
		fputs(" : ", f);
		put_type(f, rr, rs, n->dtype);
		fputs(" into ", f);
		ntype(f, n);
		fputc('\n', f);
	}
}

void mlir_node(Ex *e, const IrNode *n)
{
	FILE *f = e->body;
	switch (n->op) {
	case IR_OP_PARAM:
	case IR_OP_INPUT:
		return; /* arguments */
	case IR_OP_CONST:
		fprintf(f, "    %%v%d = arith.constant", n->id);
		tags(e, f, n, false);
		fputs(" dense<", f);
		if (n->dtype == IR_I32)
			fprintf(f, "%lld", (long long)ir_attr_scalar(n)->value);
		else
			put_fp(f, ir_attr_scalar(n)->value);
		fputs("> : ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	case IR_OP_ADD: binary(e, n, "arith.addf"); return;
	case IR_OP_SUB: binary(e, n, "arith.subf"); return;
	case IR_OP_MUL: binary(e, n, "arith.mulf"); return;
	case IR_OP_DIV: binary(e, n, "arith.divf"); return;
	case IR_OP_NEG: unary(e, n, "arith.negf"); return;
	case IR_OP_EXP: unary(e, n, "math.exp"); return;
	case IR_OP_LOG: unary(e, n, "math.log"); return;
	case IR_OP_SQRT: unary(e, n, "math.sqrt"); return;
	case IR_OP_RSQRT: unary(e, n, "math.rsqrt"); return;
	case IR_OP_TANH: unary(e, n, "math.tanh"); return;
	case IR_OP_SCALE: {
		int c = splat(e, n, ir_attr_scalar(n)->value);
		fprintf(f, "    %%v%d = arith.mulf ", n->id);
		val(e, f, n->ops[0]);
		fprintf(f, ", %%t%d", c);
		tags(e, f, n, false);
		fputs(" : ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	}
	case IR_OP_CAST: {
		const IrNode *x = e->m->nodes[n->ops[0]];
		if (x->dtype == n->dtype || !is_floatt(x->dtype) || !is_floatt(n->dtype)) {
			call_op(e, n);
			return;
		}
		bool wider = n->dtype == IR_F32 || (n->dtype != x->dtype && x->dtype != IR_F32);
		fprintf(f, "    %%v%d = %s ", n->id, wider ? "arith.extf" : "arith.truncf");
		val(e, f, x->id);
		tags(e, f, n, false);
		fputs(" : ", f);
		ntype(f, x);
		fputs(" to ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	}
	case IR_OP_MATMUL:
		matmul(e, n);
		return;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		reduce(e, n);
		return;
	case IR_OP_SOFTMAX: {
		int init = empty(e, n->rank, n->shape, n->dtype);
		fprintf(f, "    %%v%d = linalg.softmax", n->id);
		tags(e, f, n, false);
		fprintf(f, " dimension(%" PRId64 ") ins(", ir_attr_axis(n)->axis);
		val(e, f, n->ops[0]);
		fputs(" : ", f);
		ntype(f, n);
		fprintf(f, ") outs(%%t%d : ", init);
		ntype(f, n);
		fputs(") -> ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	}
	case IR_OP_PERMUTE: {
		int init = empty(e, n->rank, n->shape, n->dtype);
		fprintf(f, "    %%v%d = linalg.transpose ins(", n->id);
		val(e, f, n->ops[0]);
		fputs(" : ", f);
		ntype(f, e->m->nodes[n->ops[0]]);
		fprintf(f, ") outs(%%t%d : ", init);
		ntype(f, n);
		fputs(") permutation = [", f);
		for (int d = 0; d < ir_attr_perm(n)->n; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", ir_attr_perm(n)->perm[d]);
		fputc(']', f);
		tags(e, f, n, false);
		fputc('\n', f);
		return;
	}
	case IR_OP_RESHAPE: {
		int s = tmp(e);
		fprintf(f, "    %%t%d = arith.constant dense<[", s);
		for (int d = 0; d < n->rank; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", n->shape[d]);
		fprintf(f, "]> : tensor<%dxi64>\n    %%v%d = tensor.reshape ", n->rank, n->id);
		val(e, f, n->ops[0]);
		fprintf(f, "(%%t%d)", s);
		tags(e, f, n, false);
		fputs(" : (", f);
		ntype(f, e->m->nodes[n->ops[0]]);
		fprintf(f, ", tensor<%dxi64>) -> ", n->rank);
		ntype(f, n);
		fputc('\n', f);
		return;
	}
	case IR_OP_CONCAT:
		fprintf(f, "    %%v%d = tensor.concat dim(%" PRId64 ") ", n->id, ir_attr_axis(n)->axis);
		for (int i = 0; i < n->nops; i++) {
			fputs(i ? ", " : "", f);
			val(e, f, n->ops[i]);
		}
		tags(e, f, n, false);
		fputs(" : (", f);
		for (int i = 0; i < n->nops; i++) {
			fputs(i ? ", " : "", f);
			ntype(f, e->m->nodes[n->ops[i]]);
		}
		fputs(") -> ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	case IR_OP_SLICE: {
		const IrAttrSlice *sa = ir_attr_slice(n);
		fprintf(f, "    %%v%d = tensor.extract_slice ", n->id);
		val(e, f, n->ops[0]);
		fputc('[', f);
		for (int d = 0; d < n->rank; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", d == sa->axis ? sa->start : 0);
		fputs("] [", f);
		for (int d = 0; d < n->rank; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", n->shape[d]);
		fputs("] [", f);
		for (int d = 0; d < n->rank; d++)
			fprintf(f, "%s1", d ? ", " : "");
		fputc(']', f);
		tags(e, f, n, false);
		fputs(" : ", f);
		ntype(f, e->m->nodes[n->ops[0]]);
		fputs(" to ", f);
		ntype(f, n);
		fputc('\n', f);
		return;
	}
	default:
		call_op(e, n);
		return;
	}
}

/* <@mesh, [[0], [], [1, 2]], partial = sum[3]> */
void put_sharding(Ex *e, FILE *f, const Placement *p)
{
	fputs("<@mesh, [", f);
	int last = p->ndims - 1;
	while (last >= 0 && !p->naxes[last])
		last--;
	if (last < 0) /* replicated: MLIR wants one (empty) dim, not none */
		fputs("[]", f);
	for (int d = 0; d <= last; d++) {
		fputs(d ? ", [" : "[", f);
		for (int k = 0; k < p->naxes[d]; k++)
			fprintf(f, "%s%d", k ? ", " : "", p->axes[d][k]);
		fputc(']', f);
	}
	fputc(']', f);
	if (p->partial) {
		fprintf(f, ", partial = %s[", p->partial_op == IR_RED_MAX ? "max" : "sum");
		for (int a = 0, first = 1; a < e->m->mesh.naxes; a++)
			if (p->partial >> a & 1) {
				fprintf(f, "%s%d", first ? "" : ", ", a);
				first = 0;
			}
		fputc(']', f);
	}
	fputc('>', f);
}

/* The mesh.shard of node i, when dtm knows its placement. */
static void shard(Ex *e, int i)
{
	const IrNode *n = e->m->nodes[i];
	const Placement *p = ir_place(e->m, n);
	if (!n->place || !p->known)
		return;
	fprintf(e->body, "    %%s%d = mesh.shard %%v%d to ", i, i);
	put_sharding(e, e->body, p);
	fputs(" : ", e->body);
	ntype(e->body, n);
	fputc('\n', e->body);
	e->sharded[i] = true;
}

void mlir_header(Ex *e, FILE *out)
{
	const IrModule *m = e->m;
	fputs("module attributes {dtm.mesh_axes = [", out);
	for (int a = 0; a < m->mesh.naxes; a++) {
		fputs(a ? ", " : "", out);
		put_str(out, m->mesh.names[a]);
	}
	fputs("], dtm.model = ", out);
	put_str(out, m->name ? m->name : "");
	char *tr = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&tr, &len);
	if (f) {
		ir_print_train(f, m);
		fclose(f);
	}
	fputs(", dtm.train = ", out);
	put_str(out, tr ? tr : "");
	free(tr);
	fputs("} {\n  mesh.mesh @mesh(shape = ", out);
	for (int a = 0; a < m->mesh.naxes; a++)
		fprintf(out, "%s%" PRId64, a ? "x" : "", m->mesh.sizes[a]);
	fputs(")\n", out);
}

bool mlir_export_text(const IrModule *m, char **text, char *err, size_t cap)
{
	Ex e = {.m = m, .ok = true};
	char *body = NULL, *decls = NULL;
	size_t lb = 0, ld = 0, lt = 0;
	e.body = open_memstream(&body, &lb);
	e.decls = open_memstream(&decls, &ld);
	e.sharded = calloc((size_t)(m->nnodes ? m->nnodes : 1), sizeof *e.sharded);
	FILE *out = open_memstream(text, &lt);
	if (!e.body || !e.decls || !e.sharded || !out) {
		snprintf(err, cap, "out of memory");
		e.ok = false;
	}
	if (e.ok && m->loss < 0) {
		snprintf(err, cap, "the program has no loss to return");
		e.ok = false;
	}
	if (e.ok) {
		mlir_header(&e, out);
		/* the signature: params and inputs in node order */
		fputs("  func.func @forward(", e.body);
		bool first = true;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op != IR_OP_PARAM && n->op != IR_OP_INPUT)
				continue;
			fprintf(e.body, "%s%%v%d: ", first ? "" : ",\n      ", i);
			first = false;
			ntype(e.body, n);
			fputs(" {dtm.name = ", e.body);
			put_str(e.body, n->name ? n->name : "");
			fprintf(e.body, ", dtm.role = \"%s\"", n->op == IR_OP_PARAM ? "param" : "input");
			char *a = attr_text(m, n);
			if (a && *a) {
				fputs(", dtm.attr = ", e.body);
				put_str(e.body, a);
			}
			free(a);
			if (ir_stage(m, n) >= 0)
				fprintf(e.body, ", dtm.stage = %d : i64", ir_stage(m, n));
			if (ir_block(m, n) >= 0)
				fprintf(e.body, ", dtm.block = %d : i64", ir_block(m, n));
			fputc('}', e.body);
		}
		fputs(") -> ", e.body);
		ntype(e.body, m->nodes[m->loss]);
		fputs(" {\n", e.body);
		for (int i = 0; i < m->nnodes; i++)
			if (m->nodes[i]->op == IR_OP_PARAM || m->nodes[i]->op == IR_OP_INPUT)
				shard(&e, i);
		for (int i = 0; i < m->nnodes && e.ok; i++) {
			mlir_node(&e, m->nodes[i]);
			if (m->nodes[i]->op != IR_OP_PARAM && m->nodes[i]->op != IR_OP_INPUT)
				shard(&e, i);
		}
		fputs("    return ", e.body);
		val(&e, e.body, m->loss);
		fputs(" : ", e.body);
		ntype(e.body, m->nodes[m->loss]);
		fputs("\n  }\n}\n", e.body);
		if (!e.ok && !err[0])
			snprintf(err, cap, "%s", e.err[0] ? e.err : "out of memory");
	}
	if (e.body)
		fclose(e.body);
	if (e.decls)
		fclose(e.decls);
	if (out) {
		if (e.ok) {
			fputs(decls ? decls : "", out);
			fputs(body ? body : "", out);
		}
		fclose(out);
	}
	for (int i = 0; i < e.nsigs; i++)
		free(e.sigs[i]);
	free(e.sigs);
	free(body);
	free(decls);
	free(e.sharded);
	if (!e.ok) {
		free(*text);
		*text = NULL;
	}
	return e.ok;
}
