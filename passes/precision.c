/* precision.c - mixed precision (train { precision bf16 | f16 }).
 *
 * Consumes the forward module as lowering left it (all floats f32) and,
 * when m->train.precision is bf16 or f16 (call it T), produces the same
 * program computing in T:
 *   - params become T (their f32 master copies are added by the optim
 *     pass, which sees a T param and gives it opt.master.P);
 *   - float inputs stay f32, since the data loader writes f32, and get a
 *     cast to T right after them that every consumer reads instead;
 *   - float constants and receives become T, casts to f32 become casts to
 *     T, and every other node's dtype is re-inferred, so activations are T;
 *   - the loss stays f32: cross_entropy and mse produce f32 by their type
 *     rule, and a loss that comes out in T (a hand-written mean) gets a
 *     cast to f32 appended, which becomes the loss.
 * i32 values are untouched.  What must stay f32 inside an op (matmul and
 * reduction accumulators, softmax/layernorm/cross_entropy statistics) is
 * the kernels' business: they load T, compute in f32 and store T, so the
 * IR needs no casts around them.
 *
 * It runs before autodiff on purpose: autodiff then builds gradients of T
 * params through T activations, so gradients are T without a second pass
 * over the backward graph, and the optimizer (after autodiff) sees the
 * final dtypes when it decides which params need a master copy.  With f32
 * precision the pass does nothing.
 */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static bool oom(Diag *d)
{
	diag_error(d, (SrcLoc){0}, "precision: out of memory or too many nodes");
	return false;
}

/* Input i is already followed by its cast to t: the pass ran before (IR
 * text printed after it and fed back through the pipeline). */
static bool has_cast(const IrModule *m, int i, IrDtype t)
{
	const IrNode *c = i + 1 < m->nnodes ? m->nodes[i + 1] : NULL;
	return c && c->op == IR_OP_CAST && c->nops == 1 && c->ops[0] == i && c->dtype == t;
}

/* A cast of node x to dtype t, appended (its id is fixed up later). */
static IrNode *new_cast(IrModule *m, const IrNode *x, IrDtype t)
{
	int op = x->id;
	IrNode *c = ir_node_new(m, IR_OP_CAST, &op, 1, x->loc);
	if (!c)
		return NULL;
	c->dtype = t;
	c->rank = x->rank;
	memcpy(c->shape, x->shape, sizeof c->shape);
	c->place = x->place;
	c->stage = x->stage;
	c->mb = x->mb;
	c->block = x->block;
	return c;
}

/* Puts each input's cast right after the input and renumbers: pos[i] is
 * old node i's new id, use[i] the id its consumers read (its cast's, for
 * a cast input).  Casts are the nodes appended past n0. */
static bool reorder(IrModule *m, int n0, IrNode **cast_of)
{
	int n = m->nnodes;
	IrNode **order = malloc((size_t)n * sizeof *order);
	int *use = malloc((size_t)n0 * sizeof *use), *pos = malloc((size_t)n0 * sizeof *pos);
	if (!order || !use || !pos) {
		free(order);
		free(use);
		free(pos);
		return false;
	}
	int k = 0;
	for (int i = 0; i < n0; i++) {
		pos[i] = use[i] = k;
		order[k++] = m->nodes[i];
		if (cast_of[i]) {
			use[i] = k;
			cast_of[i]->ops[0] = pos[i];
			order[k++] = cast_of[i];
		}
	}
	for (int i = 0; i < n0; i++) {
		IrNode *x = m->nodes[i];
		for (int j = 0; j < x->nops; j++)
			x->ops[j] = use[x->ops[j]];
	}
	memcpy(m->nodes, order, (size_t)n * sizeof *order);
	for (int i = 0; i < n; i++)
		m->nodes[i]->id = i;
	if (m->loss >= 0)
		m->loss = pos[m->loss];
	for (int c = 0; c < m->nchooses; c++)
		m->chooses[c].node = pos[m->chooses[c].node];
	free(order);
	free(use);
	free(pos);
	return true;
}

bool pass_precision(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	IrDtype t = m->train.precision;
	if (t == IR_F32)
		return true;
	if (t != IR_BF16 && t != IR_F16) {
		diag_error(d, (SrcLoc){0}, "precision must be f32, bf16 or f16, got %s",
		           ir_dtype_name(t));
		return false;
	}
	/* gradients mean autodiff ran, so this pass did too (IR text printed
	 * after it and fed back); the backward graph's dtypes are its own */
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->role == IR_ROLE_GRAD)
			return true;
	int n0 = m->nnodes;
	IrNode **cast_of = calloc(n0 > 0 ? (size_t)n0 : 1, sizeof *cast_of);
	if (!cast_of)
		return oom(d);
	for (int i = 0; i < n0; i++) {
		IrNode *x = m->nodes[i];
		if (x->op != IR_OP_INPUT || x->dtype != IR_F32 || has_cast(m, i, t))
			continue;
		if (!(cast_of[i] = new_cast(m, x, t))) {
			free(cast_of);
			return oom(d);
		}
	}
	bool ok = reorder(m, n0, cast_of);
	free(cast_of);
	if (!ok)
		return oom(d);

	for (int i = 0; i < m->nnodes; i++) {
		IrNode *x = m->nodes[i];
		switch (x->op) {
		case IR_OP_INPUT:
			break; /* the loader's dtype; its cast follows */
		case IR_OP_PARAM:
		case IR_OP_CONST:
		case IR_OP_RECV:
			if (x->dtype == IR_F32)
				x->dtype = t;
			break;
		case IR_OP_CAST:
			/* an input's cast is already T; a user's cast to f32 means
			 * "to float", which is now T */
			if (x->dtype == IR_F32)
				x->dtype = t;
			break;
		default:
			break;
		}
		if (!ir_infer(m, x, d))
			return false;
	}
	if (m->loss >= 0 && is_float(m->nodes[m->loss]->dtype) &&
	    m->nodes[m->loss]->dtype != IR_F32) {
		IrNode *l = m->nodes[m->loss], *c = new_cast(m, l, IR_F32);
		if (!c)
			return oom(d);
		c->role = IR_ROLE_LOSS;
		c->name = l->name;
		l->role = IR_ROLE_ACT;
		l->label = l->name;
		l->name = NULL;
		m->loss = c->id;
		if (!ir_infer(m, c, d))
			return false;
	}
	return true;
}
