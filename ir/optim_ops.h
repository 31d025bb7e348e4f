/* optim_ops.h - the optimizer ops' attributes, operands and type rules.
 *
 * The ops (state, grad_norm, adamw_step, sgd_step) are documented in
 * ops.def; passes/optim.c adds them.  Their shape rules live in
 * shape_optim.c, so shape.c only dispatches to them; their f64 semantics
 * are the reference interpreter's (interp/eval_optim.c).
 *
 * Their attributes are IrAttrOptim (ir.h): adamw_step's beta1, beta2 and
 * eps, sgd_step's momentum and nesterov, both's weight_decay, clip (0 =
 * off) and master (a master operand is present).
 */
#ifndef DTM_IR_OPTIM_OPS_H
#define DTM_IR_OPTIM_OPS_H

#include "ir/ir.h"

/* torch.nn.utils.clip_grad_norm_'s guard against a zero norm. */
#define IR_OPTIM_CLIP_EPS 1e-6

/* The operand index of an optimizer op's parts, or -1 when absent. */
typedef struct IrOptimOps {
	int p, g, m, v, mom, master, norm;
} IrOptimOps;
/* Fills *o from n's op, attrs and operand count; false when the count
 * does not match the attrs. */
bool ir_optim_ops(const IrNode *n, IrOptimOps *o);

/* The type rule of state, grad_norm, adamw_step and sgd_step (state's
 * declared type is checked by the caller).  Sets n's dtype and shape, or
 * writes the problem to msg and returns false.  o[i] is operand i. */
bool ir_infer_optim(IrModule *m, IrNode *n, IrNode *const *o, char *msg, size_t cap);

#endif
