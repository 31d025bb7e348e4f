/* link.h - `dtmc build`: plan, emit C, compile and link the training binary.
 */
#ifndef DTM_LINK_H
#define DTM_LINK_H

#include "../ir/ir.h"

typedef struct CgBuildOptions {
	const char *output; /* the executable's path */
	bool verbose;       /* print arenas and the cc command */
	bool keep_c;        /* keep the generated C as OUTPUT.dtm.c */
	bool cuda;          /* embed the CUDA kernels (codegen/emit_cuda.h) */
} CgBuildOptions;

/* The repository root the generated code's headers and kernel library
 * come from (CMake's source dir). */
const char *cg_source_dir(void);

/* m has been through the whole pass pipeline.  Writes OUTPUT only when
 * everything succeeded (compiled to a temporary name, then renamed).
 * Returns false after reporting to d. */
bool cg_build(const IrModule *m, const CgBuildOptions *opt, Diag *d);

#endif
