/* optim_ops.h - the optimizer ops' attributes, operands and type rules.
 *
 * The ops (state, grad_norm, adamw_step, sgd_step) are documented in
 * ops.def; passes/optim.c adds them.  Their shape rules live in
 * shape_optim.c, so shape.c only dispatches to them; their f64 semantics
 * are the reference interpreter's (interp/eval_optim.c).
 *
 * IR_ATTR_OPTIM layout (the printer names the fields per op):
 *   fx[0] beta1 (adamw) or momentum (sgd)     fx[1] beta2 (adamw)
 *   fx[2] eps (adamw)    fx[3] weight_decay   fx[4] clip (0 = off)
 *   ints[0] nesterov (sgd; nints = 1)         flag  a master operand
 */
#ifndef DTM_IR_OPTIM_OPS_H
#define DTM_IR_OPTIM_OPS_H

#include "ir/ir.h"

enum {
	IR_OPTIM_BETA1 = 0,
	IR_OPTIM_MOMENTUM = 0,
	IR_OPTIM_BETA2 = 1,
	IR_OPTIM_EPS = 2,
	IR_OPTIM_WD = 3,
	IR_OPTIM_CLIP = 4,
};

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
