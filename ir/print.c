/* print.c - the textual form of the IR.
 *
 *   module gpt
 *   mesh (pp = 1, dp = 2, tp = 2)
 *   train optimizer = "adamw", lr = 0.001, ...
 *   after partition
 *   %0 = input "tokens" : i32[8, 32] @ [dp, _] role input loc "models/gpt.dtm":19:1-39
 *   %7 = matmul %5, %6 : f32[8, 32, 64] @ ? loc "models/gpt.dtm":40:7-13
 *   %9 = softmax %8 {axis = 2} : f32[8, 4, 32, 32] @ ?
 *   loss %40
 *   choose 0 node %7 options [_, tp] | [tp, _] selected 0 loc "models/gpt.dtm":40:7-13
 *
 * A node line is: id, op, operands, {attrs} (by the op's IrAttrKind),
 * "name" (when it has one), ': dtype[shape]', '@ placement' (? when not known),
 * 'of [global shape]' (padded uneven shards, after partition), its
 * origin ('from %N' or 'from "file":l:c-e', when known), then the optional role (when not act), stage (when assigned), micro-batch
 * ('mb K'), block instance ('block K'), phase and loc.  Output is
 * a function of the module alone so print -> parse -> print is
 * byte-identical and golden files stay stable (parse.c reads it back).
 */
#include "ir/irtext.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const IrTextField irtext_train_fields[] = {
#define IR_TRAIN(e, member, kind, line, range, lo, hi)                                         \
	{#member, kind, offsetof(IrTrain, member), line},
#include "ir/train.def"
#undef IR_TRAIN
};
const int irtext_ntrain_fields = sizeof irtext_train_fields / sizeof irtext_train_fields[0];

const char *const *irtext_coll_names(IrOp op, int *n)
{
	static const char *const dim[] = {"dim"};
	static const char *const a2a[] = {"split", "concat", "rows"};
	static const char *const root[] = {"root"};
	static const char *const shift[] = {"shift", "mirror"};
	static const char *const pad[] = {"dim", "size", "low"};
	switch (op) {
	case IR_OP_ALL_GATHER:
	case IR_OP_REDUCE_SCATTER:
	case IR_OP_SHARD_SLICE:
		*n = 1;
		return dim;
	case IR_OP_ALL_TO_ALL: /* rows (args[2]) only where set: ir.h */
		*n = 3;
		return a2a;
	case IR_OP_BROADCAST:
		*n = 1;
		return root;
	case IR_OP_SEND:
	case IR_OP_RECV: /* mirror (args[1]) only where set: ir.h */
		*n = 2;
		return shift;
	case IR_OP_PAD_MASK:
		*n = 3;
		return pad;
	default:
		*n = 0;
		return NULL;
	}
}

void irtext_double(char *buf, size_t cap, double v)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, cap, "%.*g", prec, v);
		if (prec == 17 || strtod(buf, NULL) == v)
			return;
	}
}

bool irtext_is_ident(const char *s)
{
	if (!s || !(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
		return false;
	for (s++; *s; s++)
		if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9')))
			return false;
	return true;
}

void irtext_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", out);
		else if (*p == '\t')
			fputs("\\t", out);
		else if (*p < 32 || *p == 127)
			fprintf(out, "\\x%02x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

static void print_double(FILE *out, double v)
{
	char buf[40];
	irtext_double(buf, sizeof buf, v);
	fputs(buf, out);
}

static void print_axis(FILE *out, const Mesh *mesh, int a)
{
	if (a < mesh->naxes && mesh->names[a])
		fputs(mesh->names[a], out);
	else
		fprintf(out, "#%d", a); /* verifier error; visible, never parsed */
}

static void print_axes(FILE *out, const Mesh *mesh, uint32_t mask)
{
	bool first = true;
	fputc('(', out);
	for (int a = 0; a < 32; a++)
		if (mask & (1u << a)) {
			if (!first)
				fputs(", ", out);
			print_axis(out, mesh, a);
			first = false;
		}
	fputc(')', out);
}

static void print_ints(FILE *out, const int64_t *v, int n)
{
	fputc('(', out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", v[i]);
	fputc(')', out);
}

static void print_loc(FILE *out, SrcLoc loc)
{
	if (!loc.file)
		return;
	fputs(" loc ", out);
	irtext_string(out, loc.file);
	fprintf(out, ":%d:%d-%d", loc.line, loc.col, loc.end_col);
}

/* The placement's origin: " from %N" (propagated from node N) or
 * " from "file":l:c-e" (a user annotation); nothing when not known. */
static void print_origin(FILE *out, const IrModule *m, const IrNode *n)
{
	if (!n->place)
		return;
	SrcLoc at = ir_place_loc(m, n);
	if (ir_place_from(m, n) >= 0) {
		fprintf(out, " from %%%d", ir_place_from(m, n));
	} else if (at.file) {
		fputs(" from ", out);
		irtext_string(out, at.file);
		fprintf(out, ":%d:%d-%d", at.line, at.col, at.end_col);
	}
}

/* " of [global shape]" for a node holding padded (uneven) shards. */
static void print_padded(FILE *out, const IrModule *m, const IrNode *n)
{
	bool any = false;
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++)
		any |= ir_padded(m, n, d) != 0;
	if (!any)
		return;
	fputs(" of [", out);
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++)
		fprintf(out, "%s%" PRId64, d ? ", " : "", ir_global_dim(m, n, d));
	fputc(']', out);
}

static void print_placement(FILE *out, const IrModule *m, const Placement *p)
{
	char buf[512];
	int n = placement_format(p, &m->mesh, buf, sizeof buf);
	if (n >= (int)sizeof buf) {
		char *big = malloc((size_t)n + 1);
		if (big) {
			placement_format(p, &m->mesh, big, (size_t)n + 1);
			fputs(big, out);
			free(big);
			return;
		}
	}
	fputs(buf, out);
}

/* Optimizer hyperparameters, by name for the op. */
static void print_optim(FILE *out, const IrNode *n)
{
	const IrAttrOptim *a = ir_attr_optim(n);
	if (n->op == IR_OP_SGD_STEP) {
		fputs(" {momentum = ", out);
		print_double(out, a->momentum);
		fprintf(out, ", nesterov = %s", a->nesterov ? "true" : "false");
	} else {
		fputs(" {beta1 = ", out);
		print_double(out, a->beta1);
		fputs(", beta2 = ", out);
		print_double(out, a->beta2);
		fputs(", eps = ", out);
		print_double(out, a->eps);
	}
	fputs(", weight_decay = ", out);
	print_double(out, a->weight_decay);
	fputs(", clip = ", out);
	print_double(out, a->clip);
	fprintf(out, ", master = %s", a->master ? "true" : "false");
}

/* A count of list entries the printer can write. */
static int list_len(int n)
{
	return n < 0 ? 0 : n > IR_MAX_INTS ? IR_MAX_INTS : n;
}

void ir_print_attrs(FILE *out, const IrModule *m, const IrNode *n)
{
	IrAttrKind kind = ir_op_attr_kind(n->op);
	if (n->attr && n->attr->kind != kind) {
		fprintf(out, " {#kind %d}", (int)n->attr->kind); /* verifier error; never parsed */
		return;
	}
	switch (kind) {
	case IR_ATTR_NONE:
	case IR_ATTR_KIND_COUNT:
		return;
	case IR_ATTR_INIT: {
		const IrAttrInit *a = ir_attr_init(n);
		fprintf(out, " {init = %s", ir_init_name(a->kind));
		if (a->kind == IR_INIT_NORMAL || a->kind == IR_INIT_UNIFORM) {
			fputc('(', out);
			print_double(out, a->arg[0]);
			fputs(", ", out);
			print_double(out, a->arg[1]);
			fputc(')', out);
		}
		break;
	}
	case IR_ATTR_SCALAR:
		fputs(" {value = ", out);
		print_double(out, ir_attr_scalar(n)->value);
		break;
	case IR_ATTR_AXES: {
		const IrAttrAxes *a = ir_attr_axes(n);
		fputs(" {axes = ", out);
		print_ints(out, a->axes, list_len(a->n));
		if (a->keepdims)
			fputs(", keepdims = true", out);
		break;
	}
	case IR_ATTR_AXIS:
		fprintf(out, " {axis = %" PRId64, ir_attr_axis(n)->axis);
		break;
	case IR_ATTR_EPS:
		fputs(" {eps = ", out);
		print_double(out, ir_attr_eps(n)->eps);
		break;
	case IR_ATTR_PERM: {
		const IrAttrPerm *a = ir_attr_perm(n);
		fputs(" {perm = ", out);
		print_ints(out, a->perm, list_len(a->n));
		break;
	}
	case IR_ATTR_SLICE: {
		const IrAttrSlice *a = ir_attr_slice(n);
		fprintf(out, " {axis = %" PRId64 ", start = %" PRId64 ", end = %" PRId64, a->axis,
		        a->start, a->end);
		break;
	}
	case IR_ATTR_ATTN: {
		const IrAttrAttn *a = ir_attr_attn(n);
		fprintf(out, " {heads = %" PRId64 ", causal = ", a->heads);
		if (a->causal == 0 || a->causal == 1)
			fputs(a->causal ? "true" : "false", out);
		else
			fprintf(out, "%" PRId64, a->causal);
		/* the defaults are left out, so plain attention reads as before */
		if (a->kv_heads)
			fprintf(out, ", kv_heads = %" PRId64, a->kv_heads);
		if (a->window)
			fprintf(out, ", window = %" PRId64, a->window);
		if (a->head_axes) {
			fputs(", head_axes = ", out);
			print_axes(out, &m->mesh, a->head_axes);
		}
		if (a->head_minor) {
			fputs(", head_minor = ", out);
			print_axes(out, &m->mesh, a->head_minor);
		}
		if (a->ring) {
			fputs(", ring = ", out);
			print_axes(out, &m->mesh, a->ring);
			fprintf(out, ", step = %" PRId64, a->step);
			if (a->balanced)
				fputs(", balanced = 1", out);
			if (a->seq)
				fprintf(out, ", seq = %" PRId64, a->seq);
		}
		if (a->lse)
			fputs(", lse = 1", out);
		break;
	}
	case IR_ATTR_DROPOUT: {
		const IrAttrDropout *a = ir_attr_dropout(n);
		fputs(" {rate = ", out);
		print_double(out, a->rate);
		fprintf(out, ", salt = %" PRId64, a->salt);
		if (a->has_mb)
			fprintf(out, ", mbs = %" PRId64 ", mb = %" PRId64 ", bdim = %" PRId64
			        ", binner = %" PRId64, a->mbs, a->mb, a->bdim, a->binner);
		break;
	}
	case IR_ATTR_COLL: {
		const IrAttrColl *a = ir_attr_coll(n);
		int ni = list_len(a->n);
		fputs(" {axes = ", out);
		print_axes(out, &m->mesh, a->axes);
		/* the reduction only means something for these two */
		if (n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER ||
		    a->red != IR_RED_SUM)
			fprintf(out, ", red = %s", ir_red_name(a->red));
		int nn;
		const char *const *names = irtext_coll_names(n->op, &nn);
		bool opt = n->op == IR_OP_SEND || n->op == IR_OP_RECV || n->op == IR_OP_ALL_TO_ALL;
		if (ni == nn || (opt && ni == nn - 1)) {
			for (int i = 0; i < ni; i++)
				fprintf(out, ", %s = %" PRId64, names[i], a->args[i]);
		} else {
			fputs(", ints = ", out);
			print_ints(out, a->args, ni);
		}
		break;
	}
	case IR_ATTR_OPTIM:
		print_optim(out, n);
		break;
	case IR_ATTR_ROPE: {
		const IrAttrRope *a = ir_attr_rope(n);
		fprintf(out, " {heads = %" PRId64 ", theta = ", a->heads);
		print_double(out, a->theta);
		if (a->inverse)
			fputs(", inverse = true", out);
		if (a->axes) {
			fputs(", axes = ", out);
			print_axes(out, &m->mesh, a->axes);
		}
		break;
	}
	case IR_ATTR_ROUTE: {
		const IrAttrRoute *a = ir_attr_route(n);
		fprintf(out, " {k = %" PRId64 ", n = %" PRId64 ", capacity = %" PRId64, a->k, a->n,
		        a->capacity);
		if (a->stats)
			fprintf(out, ", stats = %" PRId64, a->stats);
		if (a->replicas) {
			fputs(", replicas = ", out);
			print_axes(out, &m->mesh, a->replicas);
		}
		break;
	}
	}
	fputc('}', out);
}

void ir_print_node(FILE *out, const IrModule *m, const IrNode *n)
{
	fprintf(out, "%%%d = %s", n->id, ir_op_name(n->op));
	for (int i = 0; i < n->nops; i++)
		fprintf(out, "%s%%%d", i ? ", " : " ", n->ops[i]);
	ir_print_attrs(out, m, n);
	if (n->name) {
		fputc(' ', out);
		irtext_string(out, n->name);
	}
	fprintf(out, " : %s[", ir_dtype_name(n->dtype));
	for (int i = 0; i < n->rank && i < IR_MAX_RANK; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", n->shape[i]);
	fputs("] @ ", out);
	print_placement(out, m, ir_place(m, n));
	print_padded(out, m, n);
	print_origin(out, m, n);
	if (n->role != IR_ROLE_ACT)
		fprintf(out, " role %s", ir_role_name(n->role));
	if (ir_stage(m, n) != -1)
		fprintf(out, " stage %d", ir_stage(m, n));
	if (ir_mb(m, n) != -1)
		fprintf(out, " mb %d", ir_mb(m, n));
	if (ir_block(m, n) != -1)
		fprintf(out, " block %d", ir_block(m, n));
	int phase = ir_phase(m, n);
	if (phase >= 0 && phase <= IR_PHASE_OPTIMIZER)
		fprintf(out, " phase %s", (const char *[]){ "forward", "backward", "optimizer" }[phase]);
	print_loc(out, n->loc);
	fputc('\n', out);
}

/* The lines from the loss scaler's on (train.def: loss scaling, context
 * parallelism): each printed only when a setting on it is not its
 * default, so the IR text of every program without them reads as it did
 * before the settings existed. */
enum { OPTIONAL_LINE = 6 };

static bool line_is_default(const IrTrain *t, int line)
{
	IrTrain def;
	ir_train_defaults(&def);
	for (int i = 0; i < irtext_ntrain_fields; i++) {
		const IrTextField *f = &irtext_train_fields[i];
		size_t sz = f->kind == TF_F64 ? sizeof(double) : f->kind == TF_I64 ? sizeof(int64_t)
		                                                                   : sizeof(int);
		DTM_ASSERT(f->line != line || f->kind == TF_F64 || f->kind == TF_I64 ||
		           f->kind == TF_ENUM);
		if (f->line == line &&
		    memcmp((const char *)t + f->off, (const char *)&def + f->off, sz) != 0)
			return false;
	}
	return true;
}

void ir_print_train(FILE *out, const IrModule *m)
{
	const char *base = (const char *)&m->train;
	int line = -1;
	for (int i = 0; i < irtext_ntrain_fields; i++) {
		const IrTextField *f = &irtext_train_fields[i];
		const void *p = base + f->off;
		if (f->line >= OPTIONAL_LINE && line_is_default(&m->train, f->line))
			continue;
		if (f->line != line) {
			if (line >= 0)
				fputc('\n', out);
			fputs("train ", out);
			line = f->line;
		} else {
			fputs(", ", out);
		}
		fprintf(out, "%s = ", f->name);
		switch (f->kind) {
		case TF_STR: {
			const char *s = *(const char *const *)p;
			if (s)
				irtext_string(out, s);
			else
				fputs("none", out);
			break;
		}
		case TF_F64:
			print_double(out, *(const double *)p);
			break;
		case TF_I64:
			fprintf(out, "%" PRId64, *(const int64_t *)p);
			break;
		case TF_INT:
			fprintf(out, "%d", *(const int *)p);
			break;
		case TF_BOOL:
			fputs(*(const bool *)p ? "true" : "false", out);
			break;
		case TF_AXES:
			print_axes(out, &m->mesh, *(const uint32_t *)p);
			break;
		case TF_DTYPE:
			fputs(ir_dtype_name(*(const IrDtype *)p), out);
			break;
		case TF_ENUM: {
			const char *s = ir_train_word((IrTrainField)i, *(const int *)p);
			if (s)
				irtext_string(out, s);
			else
				fputs("none", out);
			break;
		}
		}
	}
	fputc('\n', out);
}

void ir_print(FILE *out, const IrModule *m)
{
	if (m->name) {
		fputs("module ", out);
		if (irtext_is_ident(m->name))
			fputs(m->name, out);
		else
			irtext_string(out, m->name);
		fputc('\n', out);
	}
	fputs("mesh (", out);
	for (int i = 0; i < m->mesh.naxes && i < IR_MAX_AXES; i++) {
		fprintf(out, "%s", i ? ", " : "");
		print_axis(out, &m->mesh, i);
		fprintf(out, " = %" PRId64, m->mesh.sizes[i]);
	}
	fputs(")\n", out);
	ir_print_train(out, m);
	if (m->after)
		fprintf(out, "after %s\n", m->after);
	for (int i = 0; i < m->nnodes; i++)
		ir_print_node(out, m, m->nodes[i]);
	if (m->loss >= 0)
		fprintf(out, "loss %%%d\n", m->loss);
	for (int i = 0; i < m->nchooses; i++) {
		const IrChoose *c = &m->chooses[i];
		fprintf(out, "choose %d node %%%d options ", i, c->node);
		for (int k = 0; k < c->nopts; k++) {
			if (k)
				fputs(" | ", out);
			print_placement(out, m, &c->opts[k]);
		}
		fprintf(out, " selected %d", c->selected);
		print_loc(out, c->loc);
		fputc('\n', out);
	}
}
