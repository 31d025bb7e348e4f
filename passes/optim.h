/* optim.h - pass "optim": the optimizer step and its state (optim.c). */
#ifndef DTM_PASSES_OPTIM_H
#define DTM_PASSES_OPTIM_H

#include "passes/passes.h"

/* Adds optimizer state, the global grad norm and one in-place update per
 * (param, grad.param) pair, from m->train. */
bool pass_optim(IrModule *m, Diag *d, const PassOptions *opt);

#endif
