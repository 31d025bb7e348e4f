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

#include "passes/passes.h"

bool pass_microbatch(IrModule *m, Diag *d, const PassOptions *opt);
/* What the pass asks of the program and `microbatches M`, checked before
 * it allocates anything: a loss that depends on the inputs, every input's
 * batch dim (dim 0) divisible by M (integer inputs: each micro-batch's rows
 * even over the ranks of their split), at most IR_MAX_NODES nodes
 * unrolled.  Errors at the setting (t->loc), a note at the input.  dtmc
 * check runs it too (pass_check_input, on a program before this pass). */
bool pass_microbatch_check(const IrModule *m, Diag *d);

#endif
