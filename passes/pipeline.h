/* pipeline.h - pipeline parallelism: passes "stages" and "pipeline".
 *
 * "stages" (first, on the forward program) gives every forward node its
 * model chunk: from the `stage` annotations when they name exactly P * v
 * chunks (P the size of mesh axis `pp`, v the virtual stages of an
 * interleaved schedule), else a split that balances estimated compute.
 * Later passes carry the chunk to the nodes they derive (gradients,
 * optimizer steps, collectives).
 *
 * "pipeline" (after `bucket`, on the per-rank program) cuts the program
 * into one program per pp coordinate, ordered by the schedule
 * (passes/schedule.h), with send/recv at every edge between stages; see
 * pipeline.c.  Without a pp axis of size > 1 both passes change nothing.
 */
#ifndef DTM_PIPELINE_H
#define DTM_PIPELINE_H

#include "passes/passes.h"

bool pass_stages(IrModule *m, Diag *d, const PassOptions *opt);
bool pass_pipeline(IrModule *m, Diag *d, const PassOptions *opt);

/* The pp mesh axis when it has more than one member, else -1. */
int pipeline_axis(const IrModule *m);

#endif
