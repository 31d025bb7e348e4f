/* precision.h - pass "precision": mixed precision (precision.c). */
#ifndef DTM_PASSES_PRECISION_H
#define DTM_PASSES_PRECISION_H

#include "passes/passes.h"

/* With m->train.precision bf16 or f16: params, activations and (through
 * autodiff, which runs after it) gradients in that dtype. */
bool pass_precision(IrModule *m, Diag *d, const PassOptions *opt);

#endif
