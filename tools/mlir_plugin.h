/* mlir_plugin.h - what the files of libdtm_mlir.so share (they include
 * MLIR's C API headers; dtmc itself sees tools/mlir.h only). */
#ifndef DTM_TOOLS_MLIR_PLUGIN_H
#define DTM_TOOLS_MLIR_PLUGIN_H

#include "tools/mlir.h"

#include <mlir-c/IR.h>

/* The module (parsed and verified) as dtm IR text in *out (malloc'd), its
 * nodes located in path; false with "LINE:COL: message" lines in *err
 * (malloc'd).  tools/mlir_import.c. */
bool mlir_import_module(MlirModule mod, const char *path, char **out, char **err);

#endif
