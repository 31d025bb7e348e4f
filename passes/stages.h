/* stages.h - pass "stages" (first, on the forward program): every forward
 * node gets its model chunk: from the `stage` annotations when they name
 * exactly P * v chunks (P the size of mesh axis `pp`, v the virtual stages
 * of an interleaved schedule), else a split that balances estimated
 * compute.  Later passes carry the chunk to the nodes they derive
 * (gradients, optimizer steps, collectives); pass "pipeline" (pipeline.h)
 * cuts the program by it.  Without a pp axis of size > 1 it changes
 * nothing.
 */
#ifndef DTM_PASSES_STAGES_H
#define DTM_PASSES_STAGES_H

#include "passes/passes.h"

bool pass_stages(IrModule *m, Diag *d, const PassOptions *opt);

#endif
