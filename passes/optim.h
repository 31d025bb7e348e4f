/* optim.h - the optimizer and mixed-precision passes (see optim.c and
 * precision.c for what each consumes and produces). */
#ifndef DTM_PASSES_OPTIM_H
#define DTM_PASSES_OPTIM_H

#include "passes/passes.h"

/* Adds optimizer state, the global grad norm and one in-place update per
 * (param, grad.param) pair, from m->train. */
bool pass_optim(IrModule *m, Diag *d, const PassOptions *opt);
/* With m->train.precision bf16 or f16: params, activations and (through
 * autodiff, which runs after it) gradients in that dtype. */
bool pass_precision(IrModule *m, Diag *d, const PassOptions *opt);

#endif
