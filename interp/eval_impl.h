/* eval_impl.h - helpers shared by the reference interpreter's files
 * (eval.c, eval_grad.c, eval_optim.c); not part of its interface. */
#ifndef DTM_INTERP_EVAL_IMPL_H
#define DTM_INTERP_EVAL_IMPL_H

#include "interp/eval.h"

/* f64 semantics of the optimizer ops (ir_eval_run dispatches here;
 * eval_optim.c).  The in-place ops write their param, state and master
 * operands' buffers, so running a module again is the next training
 * step. */
bool ir_eval_optim(IrEval *e, const IrNode *n, Diag *d);

/* Reports "op %id: message" at the node's source location; returns false. */
bool ir_eval_bad(Diag *d, const IrNode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Operand i of n, and its value buffer. */
static inline const IrNode *arg(const IrEval *e, const IrNode *n, int i)
{
	return e->m->nodes[n->ops[i]];
}

static inline const double *in(const IrEval *e, const IrNode *n, int i)
{
	return e->val[n->ops[i]];
}

/* The product of shape[from, to). */
static inline int64_t prod(const int64_t *shape, int from, int to)
{
	int64_t p = 1;
	for (int i = from; i < to; i++)
		p *= shape[i];
	return p;
}

#endif
