/* lower.h - check a parsed .dtm file and lower it to the global IR.
 *
 * Lowering evaluates `let` constants (with -D overrides), applies --mesh,
 * instantiates every block call with its own parameters (named by path:
 * layer.3.wqkv), unrolls `for` loops (recording pipeline stages), resolves
 * names, infers and checks shapes and dtypes op by op (ir_infer), checks
 * placements against the mesh, and records choose() points and the train
 * section (with --train overrides).  Every user error is a diagnostic at file:line:col.
 */
#ifndef DTM_LOWER_H
#define DTM_LOWER_H

#include "frontend/ast.h"
#include "ir/ir.h"

#define LOWER_MAX_DEFINES 64
#define LOWER_MAX_TRAIN 32

typedef struct LowerOptions {
	int ndefines;
	const char *define_names[LOWER_MAX_DEFINES];  /* -D name=value */
	const char *define_values[LOWER_MAX_DEFINES];
	const char *mesh;  /* --mesh "dp=4,tp=2" or NULL */
	/* every mesh axis of size 1 (after the file's mesh and --mesh): the
	 * sweep's probe, which reads the axes, the placements and the shapes,
	 * so a file whose own mesh does not divide its -D sizes still sweeps */
	bool mesh_ones;
	/* --train KEY=VALUE: a train setting, VALUE written as after the key in
	 * the train section ("zero=3 over dp", "reshard_after_forward=false").
	 * Applied in order after the file's train section, each replacing the
	 * file's setting of that key (so the last one for a key wins). */
	int ntrain;
	const char *train[LOWER_MAX_TRAIN];
} LowerOptions;

/* Returns the module, or NULL when errors were reported to d. */
IrModule *lower_file(Arena *a, Diag *d, const AstFile *f, const LowerOptions *opt);

/* opt's --mesh and --train onto a module that was not lowered from a .dtm
 * file (an imported MLIR model); -D is an error there.  False after
 * reporting to d. */
bool lower_apply_options(Arena *a, Diag *d, IrModule *m, const LowerOptions *opt);

/* Convenience: read, parse and lower one file. */
IrModule *lower_path(Arena *a, Diag *d, const char *path, const LowerOptions *opt);

#endif
