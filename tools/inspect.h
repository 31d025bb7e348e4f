/* inspect.h - `dtmc inspect`: what a compiled layout will do, without running.
 *
 * Compiles a model as `dtmc build` does (driver/driver.h: the same
 * DtmPlan the binary runs) and reports, per pipeline stage and mesh
 * coordinate, the communication schedule, the totals per step by mesh axes
 * and by collective kind, memory per rank (peak = the stage's arenas, what
 * the runtime allocates), and the step time, bubble and MFU of the cost
 * model (tools/cost.h) on a hardware profile (tools/hw.h).  Outputs: text,
 * JSON, a Chrome trace of the simulated timeline, a graphviz graph of the
 * programs of one rank's pipeline (inspect_dot.c).
 */
#ifndef DTM_INSPECT_H
#define DTM_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend/lower.h"

typedef struct InspectOptions {
	const char *file;          /* the .dtm model */
	LowerOptions lower;        /* --mesh, -D, --train */
	bool time_passes;          /* --time-passes: time per pass on stderr */
	const char *hw;            /* --hw: a built-in profile or an override file; NULL: h100 */
	int nodes;                 /* --nodes K: the mesh over K nodes; 0: hw's node size */
	int64_t rank;              /* --rank R: whose coordinates the schedule shows (per stage) */
	bool json;                 /* --json instead of text */
	const char *trace;         /* --trace FILE: Chrome trace JSON, or NULL */
	const char *dot;           /* --dot FILE: graphviz of --rank's pipeline, or NULL */
	const char *dot_scope;     /* --dot-scope: what --dot draws ("layer.1,mb=0"), or NULL */
} InspectOptions;

/* Runs `dtmc inspect`: the report on standard output, the files asked for.
 * Errors (the model's, at file:line:col; a bad --hw or --rank) go to
 * stderr.  Returns the exit status: 0, or 1 after an error. */
int inspect_main(const InspectOptions *o);

#endif
