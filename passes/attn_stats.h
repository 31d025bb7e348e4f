/* attn_stats.h - pass "attn_stats": attention_bwd reads its forward's row
 * statistics (see attn_stats.c).
 *
 * On the ordered per-rank program: each attention_bwd whose q, k, v (and
 * segment ids) and attributes are an attention's gets attn.lse and that
 * attention as its last operand; the attention gets attn.lse, its storage
 * then also holding its rows' log-sum-exps.
 */
#ifndef DTM_ATTN_STATS_H
#define DTM_ATTN_STATS_H

#include "passes/passes.h"

bool pass_attn_stats(IrModule *m, Diag *d, const PassOptions *opt);

#endif
