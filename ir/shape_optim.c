/* shape_optim.c - type rules of the optimizer ops (see ops.def).
 *
 * The update ops are in place (OPF_INPLACE): their result is operand 0,
 * so the rule is mostly that every per-element operand has the param's
 * shape, that the state the kernels write is float, and that the
 * hyperparameters are ones torch.optim would accept.
 */
#include "ir/optim_ops.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static bool msgf(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool msgf(char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (cap)
		vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
	return false;
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static bool same_shape(const IrNode *a, const IrNode *b)
{
	return a->rank == b->rank &&
	       memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0;
}

bool ir_optim_ops(const IrNode *n, IrOptimOps *o)
{
	int k = 0, want;
	memset(o, -1, sizeof *o);
	o->p = k++;
	o->g = k++;
	if (n->op == IR_OP_ADAMW_STEP) {
		o->m = k++;
		o->v = k++;
	} else if (n->op == IR_OP_SGD_STEP) {
		if (ir_attr_optim(n)->momentum != 0)
			o->mom = k++;
	} else {
		return false;
	}
	if (ir_attr_optim(n)->master)
		o->master = k++;
	o->norm = k++;
	want = k;
	return n->nops == want;
}

static const char *const part_names[] = {"p", "g", "m", "v", "mom", "master", "norm"};

/* The hyperparameters torch.optim accepts. */
static bool check_hyper(const IrNode *n, char *msg, size_t cap)
{
	const IrAttrOptim *a = ir_attr_optim(n);
	const char *op = ir_op_name(n->op);
	bool sgd = n->op == IR_OP_SGD_STEP;
	/* numbered as the text form lists them */
	const double hyper[5] = {sgd ? a->momentum : a->beta1, a->beta2, a->eps, a->weight_decay,
	                         a->clip};
	for (int i = 0; i < 5; i++)
		if (!isfinite(hyper[i]))
			return msgf(msg, cap, "%s: hyperparameter %d is not finite", op, i);
	if (!(a->weight_decay >= 0))
		return msgf(msg, cap, "%s: weight decay must be >= 0, got %g", op, a->weight_decay);
	if (!(a->clip >= 0))
		return msgf(msg, cap, "%s: clip must be >= 0 (0 = off), got %g", op, a->clip);
	if (!sgd) {
		if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1))
			return msgf(msg, cap, "%s: betas must be in [0, 1), got (%g, %g)", op, a->beta1,
			            a->beta2);
		if (!(a->eps >= 0))
			return msgf(msg, cap, "%s: eps must be >= 0, got %g", op, a->eps);
		if (a->nesterov || a->momentum != 0)
			return msgf(msg, cap, "%s: takes no momentum or nesterov", op);
		return true;
	}
	if (!(a->momentum >= 0))
		return msgf(msg, cap, "%s: momentum must be >= 0, got %g", op, a->momentum);
	if (a->beta1 != 0 || a->beta2 != 0 || a->eps != 0)
		return msgf(msg, cap, "%s: beta1, beta2 and eps are adamw's", op);
	if (a->nesterov && a->momentum == 0)
		return msgf(msg, cap, "%s: nesterov needs a non-zero momentum", op);
	return true;
}

static bool infer_step(IrNode *n, IrNode *const *o, char *msg, size_t cap)
{
	const char *op = ir_op_name(n->op);
	IrOptimOps ix;
	if (!ir_optim_ops(n, &ix))
		return msgf(msg, cap, "%s: %d operands do not match the attributes (momentum, "
		            "master) of (p, g%s%s%s, norm)", op, n->nops,
		            n->op == IR_OP_ADAMW_STEP ? ", m, v" : "",
		            ix.mom >= 0 ? ", mom" : "", ir_attr_optim(n)->master ? ", master" : "");
	if (!check_hyper(n, msg, cap))
		return false;
	const IrNode *p = o[ix.p];
	const int parts[7] = {ix.p, ix.g, ix.m, ix.v, ix.mom, ix.master, ix.norm};
	for (int k = 0; k < 7; k++) {
		int i = parts[k];
		if (i < 0)
			continue;
		const IrNode *x = o[i];
		if (!is_float(x->dtype))
			return msgf(msg, cap, "%s: %s (%%%d) must be a float tensor, got %s", op,
			            part_names[k], x->id, ir_dtype_name(x->dtype));
		if (i == ix.norm) {
			if (x->rank != 0 || x->dtype != IR_F32)
				return msgf(msg, cap, "%s: norm (%%%d) must be f32[], got %s of rank %d", op,
				            x->id, ir_dtype_name(x->dtype), x->rank);
		} else if (!same_shape(x, p)) {
			return msgf(msg, cap, "%s: %s (%%%d) must have the shape of p (%%%d)", op,
			            part_names[k], x->id, p->id);
		}
	}
	if (ix.master >= 0 && o[ix.master]->dtype != IR_F32)
		return msgf(msg, cap, "%s: the master copy (%%%d) must be f32", op, o[ix.master]->id);
	n->dtype = p->dtype;
	n->rank = p->rank;
	memset(n->shape, 0, sizeof n->shape);
	memcpy(n->shape, p->shape, (size_t)p->rank * sizeof p->shape[0]);
	return true;
}

bool ir_infer_optim(IrModule *m, IrNode *n, IrNode *const *o, char *msg, size_t cap)
{
	(void)m;
	switch (n->op) {
	case IR_OP_STATE:
		if (!is_float(n->dtype))
			return msgf(msg, cap, "state: optimizer state must be a float tensor, got %s",
			            ir_dtype_name(n->dtype));
		return true;
	case IR_OP_GRAD_NORM:
		for (int i = 0; i < n->nops; i++)
			if (!is_float(o[i]->dtype))
				return msgf(msg, cap, "grad_norm: operand %%%d must be a float tensor, got %s",
				            o[i]->id, ir_dtype_name(o[i]->dtype));
		n->dtype = IR_F32;
		n->rank = 0;
		memset(n->shape, 0, sizeof n->shape);
		return true;
	case IR_OP_ADAMW_STEP:
	case IR_OP_SGD_STEP:
		return infer_step(n, o, msg, cap);
	case IR_OP_ASSIGN:
		if (o[0]->dtype != o[1]->dtype || !same_shape(o[0], o[1]))
			return msgf(msg, cap, "assign: %%%d and %%%d differ in type", o[0]->id, o[1]->id);
		n->dtype = o[0]->dtype;
		n->rank = o[0]->rank;
		memset(n->shape, 0, sizeof n->shape);
		memcpy(n->shape, o[0]->shape, (size_t)o[0]->rank * sizeof o[0]->shape[0]);
		return true;
	default:
		return msgf(msg, cap, "%s: not an optimizer op", ir_op_name(n->op));
	}
}
