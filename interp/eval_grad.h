/* eval_grad.h - the reference interpreter's rules for the gradient ops
 * (ops.def's "gradient ops"), called from eval.c's switch. */
#ifndef DTM_INTERP_EVAL_GRAD_H
#define DTM_INTERP_EVAL_GRAD_H

#include "interp/eval.h"

/* Evaluates gradient-op node n into e->val[n->id]; reports to d and
 * returns false on an inconsistent node or out-of-range ids/targets. */
bool ir_eval_grad(IrEval *e, const IrNode *n, Diag *d);

#endif
