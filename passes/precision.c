/* precision.c - mixed precision (train { precision bf16 | f16 }).
 *
 * Consumes the forward module as lowering left it (floats f32 but for the
 * user's casts) and, when m->train.precision is bf16 or f16 (call it T),
 * produces the same program computing in T, with the casts a mixed
 * program needs, as torch.autocast inserts them:
 *   - params become T (their f32 master copies are added by the optim
 *     pass, which sees a T param and gives it opt.master.P);
 *   - float inputs stay f32, since the data loader writes f32, and get a
 *     cast to T right after them that every consumer reads instead;
 *   - float constants and receives become T, and every other node's dtype
 *     is re-inferred, so activations are T; a user's cast keeps its dtype
 *     (`cast(x, f32)` computes what follows in f32);
 *   - matmul and attention run in T (autocast's lower-precision list):
 *     an operand of another dtype is cast to T;
 *   - sum and mean reduce in f32 (autocast's fp32 list): a T operand is
 *     cast to f32 first, so a loss term like `0.01 * mean(h)` is not
 *     rounded to 8 bits of mantissa;
 *   - every other op with several float operands (+ - * /, mse, concat,
 *     layernorm, rmsnorm) promotes them to the widest dtype (torch's type
 *     promotion, ir_dtype_promote: for different dtypes f32), casting the
 *     others; a scalar constant takes the other operands' dtype instead
 *     (it is retyped, or copied when another op uses it in T), as a Python
 *     scalar never promotes a tensor;
 *   - an op that wants an f32 input in f32 (mse against f32 predictions,
 *     a user's `cast(x, f32)`) reads the input as it came, not through
 *     its cast to T and back;
 *   - the loss stays f32: cross_entropy and mse produce f32 by their type
 *     rule, sums and means are f32, and a loss that still comes out in T
 *     (a max, say) gets a cast to f32 appended, which becomes the loss.
 * i32 values are untouched.  What must stay f32 inside an op (matmul and
 * reduction accumulators, softmax/layernorm/cross_entropy statistics) is
 * the kernels' business: they load T, compute in f32 and store T, so the
 * IR needs no casts around them.  The module is rebuilt node by node, the
 * casts placed right before the node that reads them (an input's right
 * after it).
 *
 * It runs before autodiff on purpose: autodiff then builds gradients of T
 * params through T activations (a cast's gradient is the cast back), so
 * gradients are T without a second pass over the backward graph, and the
 * optimizer (after autodiff) sees the final dtypes when it decides which
 * params need a master copy.  Run again on its own output (IR text printed
 * after it) it adds nothing.  With f32 precision the pass does nothing.
 */
#include "passes/precision.h"

#include <stdlib.h>
#include <string.h>

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

typedef struct Prec {
	const IrModule *m; /* the module as it was */
	IrModule *out;     /* the module being built */
	Diag *d;
	IrDtype t;
	int *use;   /* old id -> the id in out its consumers read (an input's cast) */
	int *self;  /* old id -> its copy in out */
	bool *read; /* out id -> a node read it already (a const's dtype is final) */
} Prec;

static bool oom(Diag *d)
{
	diag_error(d, (SrcLoc){0}, "precision: out of memory or too many nodes");
	return false;
}

static IrNode *onode(const Prec *p, int id)
{
	return p->out->nodes[id];
}

/* c is this pass's cast of an input: right after it, at its declaration
 * (a user's cast of the input has the call's location). */
static bool is_input_cast(const IrModule *m, const IrNode *c)
{
	if (c->op != IR_OP_CAST || c->nops != 1 || c->ops[0] != c->id - 1)
		return false;
	const IrNode *x = m->nodes[c->ops[0]];
	return x->op == IR_OP_INPUT && c->loc.line == x->loc.line && c->loc.col == x->loc.col;
}

/* Input i is followed by this pass's cast to t already (the pass ran
 * before: IR text printed after it and fed back). */
static bool has_cast(const IrModule *m, int i, IrDtype t)
{
	const IrNode *c = i + 1 < m->nnodes ? m->nodes[i + 1] : NULL;
	return c && is_input_cast(m, c) && c->dtype == t;
}

/* A cast of out node x to t, appended to out: placed as x, in x's stage,
 * micro-batch and block (an input's cast); `at`, when given, is the node
 * that reads it, whose location, stage, micro-batch and block it takes,
 * its placement left to propagation. */
static int add_cast(Prec *p, int x, IrDtype t, const IrNode *at)
{
	const IrNode *src = onode(p, x);
	IrNode *c = ir_node_new(p->out, IR_OP_CAST, &x, 1, at ? at->loc : src->loc);
	if (!c)
		return -1;
	c->dtype = t;
	c->rank = src->rank;
	memcpy(c->shape, src->shape, sizeof c->shape);
	/* at is an old node, src out's */
	const IrModule *hm = at ? p->m : p->out;
	const IrNode *home = at ? at : src;
	if (!at)
		c->place = src->place;
	ir_set_stage(p->out, c, ir_stage(hm, home));
	ir_set_mb(p->out, c, ir_mb(hm, home));
	ir_set_block(p->out, c, ir_block(hm, home));
	return ir_infer(p->out, c, p->d) ? c->id : -1;
}

/* The dtype node x (operands ops, ids in out) wants its float operands
 * in, or -1 for "as they are". */
static int wanted_dtype(const Prec *p, const IrNode *x, const int *ops)
{
	switch (x->op) {
	case IR_OP_MATMUL:
	case IR_OP_ATTENTION:
		return (int)p->t;
	case IR_OP_SUM:
	case IR_OP_MEAN:
		return IR_F32;
	case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV:
	case IR_OP_MSE: case IR_OP_CONCAT: case IR_OP_LAYERNORM: case IR_OP_RMSNORM: {
		int want = -1;
		for (int j = 0; j < x->nops; j++) {
			const IrNode *o = onode(p, ops[j]);
			if (!is_float(o->dtype) || o->op == IR_OP_CONST)
				continue;
			want = want < 0 ? (int)o->dtype
			                : (int)ir_dtype_promote((IrDtype)want, o->dtype);
		}
		return want;
	}
	default:
		return -1;
	}
}

/* Operand j of x (ops[j], in out) in dtype want: this pass's cast of an
 * input is skipped (the f32 input read as it came), a scalar constant no node
 * read yet is retyped, one read already is copied, anything else is cast.
 * Returns the id to read, -1 when out of memory. */
static int in_dtype(Prec *p, const IrNode *x, int id, IrDtype want)
{
	IrNode *o = onode(p, id);
	if (!is_float(o->dtype) || o->dtype == want)
		return id;
	if (is_input_cast(p->out, o) && onode(p, o->ops[0])->dtype == want)
		return o->ops[0];
	if (o->op == IR_OP_CONST && !p->read[id]) {
		o->dtype = want;
		return id;
	}
	if (o->op == IR_OP_CONST) {
		IrNode *c = ir_node_copy(p->out, p->out, o, NULL, 0);
		if (!c)
			return -1;
		c->dtype = want;
		c->name = NULL;
		ir_set_stage(p->out, c, ir_stage(p->m, x));
		ir_set_mb(p->out, c, ir_mb(p->m, x));
		ir_set_block(p->out, c, ir_block(p->m, x));
		return c->id;
	}
	return add_cast(p, id, want, x);
}

/* Copies old node i into out, with the casts its operands need first. */
static bool copy_node(Prec *p, int i, int *ops)
{
	const IrNode *x = p->m->nodes[i];
	int nerr = p->d->nerr;
	for (int j = 0; j < x->nops; j++)
		ops[j] = p->use[x->ops[j]];
	/* a user's cast of an input to the input's own dtype reads it as it
	 * came, not its cast to T */
	if (x->op == IR_OP_CAST && is_input_cast(p->out, onode(p, ops[0])) &&
	    onode(p, onode(p, ops[0])->ops[0])->dtype == x->dtype)
		ops[0] = onode(p, ops[0])->ops[0];
	int want = wanted_dtype(p, x, ops);
	for (int j = 0; want >= 0 && j < x->nops; j++)
		if ((ops[j] = in_dtype(p, x, ops[j], (IrDtype)want)) < 0)
			return p->d->nerr > nerr ? false : oom(p->d);
	for (int j = 0; j < x->nops; j++)
		p->read[ops[j]] = true;
	IrNode *c = ir_node_copy(p->out, p->m, x, ops, x->nops);
	if (!c)
		return oom(p->d);
	switch (c->op) {
	case IR_OP_PARAM:
	case IR_OP_CONST:
	case IR_OP_RECV:
		if (c->dtype == IR_F32)
			c->dtype = p->t;
		break;
	default:
		break; /* an input's dtype is the loader's, a cast's the user's */
	}
	if (!ir_infer(p->out, c, p->d))
		return false;
	p->use[i] = p->self[i] = c->id;
	if (x->op == IR_OP_INPUT && x->dtype == IR_F32 && !has_cast(p->m, i, p->t) &&
	    (p->use[i] = add_cast(p, c->id, p->t, NULL)) < 0)
		return p->d->nerr > nerr ? false : oom(p->d);
	return true;
}

/* The loss in T (a max, a scale of one): a cast to f32 appended becomes
 * the loss. */
static bool loss_to_f32(IrModule *m, Diag *d)
{
	IrNode *l = m->nodes[m->loss];
	if (!is_float(l->dtype) || l->dtype == IR_F32)
		return true;
	int id = l->id;
	IrNode *c = ir_node_new(m, IR_OP_CAST, &id, 1, l->loc);
	if (!c)
		return oom(d);
	c->dtype = IR_F32;
	c->rank = l->rank;
	memcpy(c->shape, l->shape, sizeof c->shape);
	c->place = l->place;
	ir_set_stage(m, c, ir_stage(m, l));
	ir_set_mb(m, c, ir_mb(m, l));
	ir_set_block(m, c, ir_block(m, l));
	c->role = IR_ROLE_LOSS;
	c->name = l->name;
	l->role = IR_ROLE_ACT;
	ir_set_label(m, l, l->name);
	l->name = NULL;
	m->loss = c->id;
	return ir_infer(m, c, d);
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
	int n0 = m->nnodes, maxops = 0;
	int64_t nops = 0;
	for (int i = 0; i < n0; i++) {
		if (m->nodes[i]->role == IR_ROLE_GRAD)
			return true;
		nops += m->nodes[i]->nops;
		maxops = m->nodes[i]->nops > maxops ? m->nodes[i]->nops : maxops;
	}
	/* out holds each node, an input's cast, a cast or const per operand
	 * and the loss's cast */
	int64_t cap = 2 * (int64_t)n0 + nops + 2;
	if (cap > IR_MAX_NODES + 2)
		cap = IR_MAX_NODES + 2;
	Prec p = {.m = m, .d = d, .t = t};
	p.out = ir_module_derive(m);
	p.use = malloc((size_t)(n0 ? n0 : 1) * sizeof *p.use);
	p.self = malloc((size_t)(n0 ? n0 : 1) * sizeof *p.self);
	p.read = calloc((size_t)cap, sizeof *p.read);
	int *ops = malloc((size_t)(maxops ? maxops : 1) * sizeof *ops);
	bool ok = p.out && p.use && p.self && p.read && ops;
	if (!ok)
		oom(d);
	for (int i = 0; ok && i < n0; i++)
		ok = copy_node(&p, i, ops);
	if (ok) {
		/* the copies' origins (IR text fed back after propagate) */
		for (int i = 0; i < n0; i++) {
			IrNode *c = p.out->nodes[p.self[i]];
			int pf = ir_place_from(p.out, c), lp = ir_link_param(p.out, c);
			if (pf >= 0 && pf < n0)
				ir_set_place_from(p.out, c, p.self[pf]);
			if (lp >= 0 && lp < n0)
				ir_set_link_param(p.out, c, p.self[lp]);
		}
		if (m->loss >= 0)
			m->loss = p.self[m->loss];
		for (int c = 0; c < m->nchooses; c++)
			m->chooses[c].node = p.self[m->chooses[c].node];
		ir_module_take_nodes(m, p.out);
		ok = m->loss < 0 || loss_to_f32(m, d);
	}
	free(p.use);
	free(p.self);
	free(p.read);
	free(ops);
	return ok;
}
