/* recompute.h - pass "recompute": activation checkpointing per block
 * instance (train { recompute true }).  See recompute.c. */
#ifndef DTM_RECOMPUTE_H
#define DTM_RECOMPUTE_H

#include "passes/passes.h"

bool pass_recompute(IrModule *m, Diag *d, const PassOptions *opt);

#endif
