/* coalesce.h - pass "coalesce": ZeRO's per-tensor all_gathers and
 * reduce_scatters as one collective per unit (ZeRO-3) or bucket (ZeRO-1/2)
 * over one flat buffer, FSDP2's copy-in / copy-out (see coalesce.c).
 * After `fsdp_units`, before `bucket`; nothing to do at zero 0.
 */
#ifndef DTM_PASSES_COALESCE_H
#define DTM_PASSES_COALESCE_H

#include "passes/passes.h"

bool pass_coalesce(IrModule *m, Diag *d, const PassOptions *opt);

#endif
