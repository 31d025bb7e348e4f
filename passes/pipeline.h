/* pipeline.h - pass "pipeline": pipeline parallelism.
 *
 * After `bucket`, on the per-rank program: the program cut into one
 * program per pp coordinate, ordered by the schedule (passes/schedule.h),
 * with send/recv at every edge between stages; see pipeline.c.  The model
 * chunk each node belongs to is pass "stages"'s (stages.h).  Without a pp
 * axis of size > 1 it changes nothing.
 */
#ifndef DTM_PIPELINE_H
#define DTM_PIPELINE_H

#include "passes/passes.h"

bool pass_pipeline(IrModule *m, Diag *d, const PassOptions *opt);

/* The pipeline mesh axis (IrModule.pp_axis) when it has more than one
 * member, else -1. */
int pipeline_axis(const IrModule *m);

/* After the pass (every node's stage its pp rank, P of them, ax the pp
 * axis): false, with an internal error at the node, where a rank's recv
 * within its stage comes before the send its peer makes for it (a
 * schedule that would hang). */
bool pipeline_check_p2p(const IrModule *m, Diag *d, int P, int ax);

#endif
