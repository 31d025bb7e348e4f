/* microbatch.h - pass "microbatch": gradient accumulation over
 * train { microbatches M } (see microbatch.c).
 *
 * The first pass: the forward program is unrolled over M micro-batches
 * (input rows i with i mod M = k), the loss is the mean of theirs, so
 * autodiff sums each gradient over the micro-batches before any
 * collective and DDP synchronises once per step.
 */
#ifndef DTM_MICROBATCH_H
#define DTM_MICROBATCH_H

#include "passes.h"

bool pass_microbatch(IrModule *m, Diag *d, const PassOptions *opt);

#endif
