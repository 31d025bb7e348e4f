/* dtmk_lib.c - the CPU kernel library: every kernel of this folder,
 * compiled once when dtm is built (the dtm_kernels library, with the flags
 * codegen/link.c gives the generated C), and linked into every training
 * binary.
 *
 * The generated C holds only what differs between models: its fused
 * elementwise loops, one small wrapper per distinct kernel that fills a
 * DtmkArgs with constant shapes and calls dtmk_op_NAME, and the Plan's
 * tables.  So `dtmc build` compiles kilobytes, not the attention and
 * norm kernels again for every model (issue 22, point 1). */
#include "codegen/cpu/dtmk.h"
#include "codegen/cpu/dtmk_bwd.h"
#include "codegen/cpu/dtmk_fwd.h"
#include "codegen/cpu/dtmk_lib.h"
#include "codegen/cpu/dtmk_optim.h"
#include "codegen/cpu/dtmk_ring.h"
#include "codegen/cpu/dtmk_rope.h"
#include "codegen/cpu/dtmk_route.h"
#include "codegen/cpu/dtmk_uneven.h"
#include "codegen/cpu/dtmk_vp.h"

#define DTMK_OP(name)                                                  \
	void dtmk_op_##name(const DtmCtx *ctx, const DtmkArgs *a)      \
	{                                                              \
		dtmk_##name(ctx, a);                                   \
	}
#include "codegen/cpu/dtmk_ops.def"
#undef DTMK_OP
