/* shape_grad.h - shape rules of the gradient ops (ops.def's "gradient ops"),
 * called from ir_infer's switch in shape.c. */
#ifndef DTM_SHAPE_GRAD_H
#define DTM_SHAPE_GRAD_H

#include "ir/ir.h"

/* Sets n's dtype and shape from its operands o[0..n->nops) (fetched and
 * checked by the caller) or, for ops that carry their own shape (expand,
 * sum_to, embed_bwd, pad), checks it.  On a mismatch writes the message,
 * starting with the op's name, to msg and returns false. */
bool ir_infer_grad(IrModule *m, IrNode *n, IrNode **o, char *msg, size_t cap);

/* attention's attributes and the shapes of k, v and the segment ids seg
 * (NULL when absent) against q [B, T, D] (rank and dtype checked by the
 * caller): k, v [B, T, G*hd], seg i32[B, T].  The message starts with
 * what (the op's name). */
bool ir_attn_check(const char *what, const IrAttrAttn *a, const IrNode *q, const IrNode *k,
                   const IrNode *v, const IrNode *seg, char *msg, size_t cap);

#endif
