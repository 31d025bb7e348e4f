/* dtmk_lib.h - the kernels of codegen/cpu/dtmk_lib.c, as the generated C
 * calls them: dtmk_op_NAME for each DTMK_OP(NAME) of dtmk_ops.def. */
#ifndef DTMK_LIB_H
#define DTMK_LIB_H

#include "codegen/cpu/dtmk.h"

#define DTMK_OP(name) void dtmk_op_##name(const DtmCtx *ctx, const DtmkArgs *a);
#include "codegen/cpu/dtmk_ops.def"
#undef DTMK_OP

#endif
