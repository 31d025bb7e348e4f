/* mlir.h - MLIR as dtm's exchange format (`dtmc export-mlir`), and its
 * sharding passes as a second opinion on partition (`dtmc mlir-spmd`).
 *
 * mlir_export.c writes dtm's global program as MLIR text, and
 * mlir_export_local.c one rank's program after partition (func, arith,
 * math, linalg, tensor and mesh, the collectives as mesh ops; the ops MLIR
 * has no equivalent for as calls of declared @dtm.OP functions).  MLIR itself parses and verifies
 * that text through its C API, in the plugin libdtm_mlir.so
 * (mlir_capi.c, built where CMake finds MLIR 19), which dtmc loads from
 * its own directory when an MLIR command runs, so dtmc does not load
 * libMLIR for anything else.
 */
#ifndef DTM_TOOLS_MLIR_H
#define DTM_TOOLS_MLIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ir/ir.h"

/* The global program m as MLIR text in *text (malloc'd); false and a
 * message in err when it cannot be written. */
bool mlir_export_text(const IrModule *m, char **text, char *err, size_t cap);

/* The program of rank `rank`'s pipeline stage in m, partitioned (after
 * `partition` up to `pipeline`), as MLIR text in *text (malloc'd); false
 * and a message in err when it cannot be written (mlir_export_local.c). */
bool mlir_export_local_text(const IrModule *m, int64_t rank, char **text, char *err,
                            size_t cap);
/* `dtmc mlir-spmd` (mlir_spmd.c): the forward program of g (the global
 * program after propagate) cut into functions MLIR 19's sharding-
 * propagation and mesh-spmdization accept, those passes run through api,
 * and the collectives MLIR inserts set beside those partition inserted for
 * the same nodes in p (g after partition), as a table (or JSON) on out.
 * False and a message in err when it cannot be done. */
struct DtmMlirApi;
bool mlir_spmd_compare(const IrModule *g, const IrModule *p, const struct DtmMlirApi *api,
                       FILE *out, bool json, char *err, size_t cap);
/* The cut module mlir_spmd_compare gives MLIR (malloc'd; NULL when out of
 * memory): for mlir-opt-19 by hand. */
char *mlir_spmd_cut(const IrModule *g);

/* The plugin's entry points.  Each returns 0 on success with the module as
 * MLIR prints it in *out, or 1 with MLIR's diagnostics in *err (both
 * malloc'd, the caller frees them). */
typedef struct DtmMlirApi {
	int version; /* DTM_MLIR_API_VERSION */
	/* parse src, verify it */
	int (*check)(const char *src, char **out, char **err);
	/* parse, verify, run the textual pass pipeline, verify again */
	int (*run)(const char *src, const char *pipeline, char **out, char **err);
	/* parse, verify, and write the module's program as dtm IR text, its
	 * nodes located in path (tools/mlir_import.c); errors as
	 * "LINE:COL: message" lines */
	int (*import)(const char *src, const char *path, char **out, char **err);
	/* run's passes without the verifier, the result in the generic form
	 * even when it does not verify (its diagnostics then in *bad, else
	 * NULL): `dtmc mlir-spmd`, around an MLIR 19 bug (mlir_capi.c) */
	int (*run_unverified)(const char *src, const char *pipeline, char **out, char **bad,
	                      char **err);
} DtmMlirApi;
#define DTM_MLIR_API_VERSION 3

/* A .mlir model (src: its text, src->name its path) as dtm IR text in *ir
 * (malloc'd); false after reporting to d, at the .mlir file's lines (the
 * driver's DrvImportFn). */
bool mlir_import_file(const SrcFile *src, char **ir, Diag *d);

/* job(api, arg, outs) in a child process, its rc and the strings it left
 * in outs[0..nouts) (malloc'd or NULL) brought back: MLIR 19 crashes on
 * some inputs (its parser on malformed linalg ops, its mesh passes on
 * conflicting shardings), and a crash must not take dtmc with it.  A
 * crash is rc 1 with "MLIR crashed (signal N)" in outs[nouts - 1]. */
typedef int (*MlirJob)(const DtmMlirApi *api, const void *arg, char **outs);
int mlir_in_child(const DtmMlirApi *api, MlirJob job, const void *arg, char **outs, int nouts);

/* The exported symbol of libdtm_mlir.so. */
const DtmMlirApi *dtm_mlir_api(void);

/* libdtm_mlir.so from dtmc's directory, or NULL with err saying what to
 * install (dtmc built without MLIR, or the library missing). */
const DtmMlirApi *mlir_plugin(char *err, size_t cap);

#endif
