/* autodiff.h - reverse-mode gradients of the loss (passes/autodiff.c). */
#ifndef DTM_AUTODIFF_H
#define DTM_AUTODIFF_H

#include "passes/passes.h"

/* Appends the backward graph: one node "grad.<param>" (role grad,
 * linked to it) per param.  Returns false after reporting to d. */
bool pass_autodiff(IrModule *m, Diag *d, const PassOptions *opt);

#endif
