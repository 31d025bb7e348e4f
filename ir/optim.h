/* optim.h - the optimizer ops' type rules and reference semantics.
 *
 * The ops (state, grad_norm, adamw_step, sgd_step) are documented in
 * ops.def; passes/optim.c adds them.  Their shape rules live in
 * shape_optim.c and their f64 semantics in eval_optim.c, so shape.c and
 * eval.c only dispatch to them.
 *
 * IR_ATTR_OPTIM layout (the printer names the fields per op):
 *   fx[0] beta1 (adamw) or momentum (sgd)     fx[1] beta2 (adamw)
 *   fx[2] eps (adamw)    fx[3] weight_decay   fx[4] clip (0 = off)
 *   ints[0] nesterov (sgd; nints = 1)         flag  a master operand
 */
#ifndef DTM_IR_OPTIM_H
#define DTM_IR_OPTIM_H

#include "ir/ir.h"
#include "ir/eval.h"

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

/* f64 semantics (ir_eval_run dispatches here).  The in-place ops write
 * their param, state and master operands' buffers, so running a module
 * again is the next training step. */
bool ir_eval_optim(IrEval *e, const IrNode *n, Diag *d);
/* The learning rate at 1-based step t under t's schedule: constant, or
 * linear warmup over `warmup` steps then cosine decay to min_lr at
 * `steps` (runtime/main.c's lr_at, in f64). */
double ir_optim_lr_at(const IrTrain *t, int64_t step);

#endif
