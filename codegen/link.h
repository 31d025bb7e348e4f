/* link.h - `dtmc build`: plan, emit C, compile and link the training binary.
 */
#ifndef DTM_LINK_H
#define DTM_LINK_H

#include <stdio.h>

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "runtime/plan.h"

typedef struct CgBuildOptions {
	const char *output; /* the executable's path */
	bool verbose;       /* print arenas and the cc command */
	bool keep_c;        /* keep the generated C as OUTPUT.dtm.c */
	bool cuda;          /* embed the CUDA kernels (codegen/emit_cuda.h) */
} CgBuildOptions;

/* The repository root the generated code's headers and kernel library
 * come from (CMake's source dir). */
const char *cg_source_dir(void);

/* With opt->verbose, the planned bytes per arena (what `dtmc build -v`
 * prints before it writes the C). */
void cg_report_memory(FILE *out, const MemPlan *mp);

/* m has been through the whole pass pipeline; fp, mp and p are its
 * fusion and memory plans and the Plan built from them (driver/driver.h
 * computes each once).  Writes OUTPUT only when everything succeeded
 * (compiled to a temporary name, then renamed).  Returns false after
 * reporting to d. */
bool cg_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, const DtmPlan *p,
              const CgBuildOptions *opt, Diag *d);

#endif
