/* attn_stats.c - pass "attn_stats": attention's backward reads its
 * forward's row statistics.
 *
 * attention_bwd(dy, q, k, v[, seg]) needs each query row's softmax.  Alone
 * it recomputes the row's max and sum over all its keys before any key's
 * gradient, so its CPU kernel holds a block's scores for the whole key
 * range.  Given the forward's log-sum-exp of each row's scaled scores, a
 * probability is exp(s - lse) at once, and rowsum(P * dP) is rowsum(dy *
 * y), y the forward's output: the keys then run in tiles as in the
 * forward (FlashAttention-2's backward; codegen/cpu/dtmk_bwd.h,
 * dtmkb_attn_block_lse).  This pass pairs each attention_bwd with the
 * attention that has the same q, k, v, segment ids and attributes (the
 * latest before it: a micro-batch's own, or recompute's clone), sets
 * attn.lse on both and appends that attention to the backward's operands.
 * The attention's storage then holds its rows' log-sum-exps after its
 * result (f32 [B, H, T], ir_attn_lse_count; pass_memplan counts them), and
 * it stays live until the backward, as FlashAttention keeps its output
 * and statistics.
 *
 * It runs on the ordered per-rank program, after which no pass moves or
 * copies the pair's operands (accumulate, after it, rewrites only weight
 * gradient sums).  Only where the CPU kernel reads the
 * statistics: head sizes that are multiples of 16, v's head size q's.  The
 * CUDA kernels read them as well (dtmk_cuda_attn.cuh: the backward's
 * first phase then reads the rows' statistics instead of computing them).
 */
#include "passes/attn_stats.h"

#include <stdlib.h>
#include <string.h>

/* Whether attention f and attention_bwd g share their attributes (but
 * lse) and g's q, k, v and segment ids are f's operands. */
static bool pairs(const IrNode *f, const IrNode *g)
{
	if (g->nops != f->nops + 1)
		return false;
	for (int i = 0; i < f->nops; i++)
		if (g->ops[i + 1] != f->ops[i])
			return false;
	IrAttrAttn a = *ir_attr_attn(f), b = *ir_attr_attn(g);
	a.lse = b.lse = 0;
	return memcmp(&a, &b, sizeof a) == 0;
}

/* Whether the CPU kernel reads the statistics of attention f. */
static bool kernel_takes(const IrNode *f)
{
	int64_t H = ir_attr_attn(f)->heads;
	if (f->rank != 3 || H < 1 || f->shape[2] % H || (f->shape[2] / H) % 16)
		return false;
	return f->dtype == IR_F32 || f->dtype == IR_BF16 || f->dtype == IR_F16;
}

bool pass_attn_stats(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	int nn = m->nnodes;
	int *last = NULL; /* q's id -> the latest attention of it, -1 none */
	for (int i = 0; i < nn; i++) {
		const IrNode *g = m->nodes[i];
		if (g->op == IR_OP_ATTENTION && !last) {
			last = malloc(sizeof(int) * (size_t)nn);
			if (!last) {
				diag_error(d, (SrcLoc){0}, "attn_stats: out of memory");
				return false;
			}
			memset(last, 0xff, sizeof(int) * (size_t)nn);
		}
		if (g->op == IR_OP_ATTENTION && g->nops > 0) {
			last[g->ops[0]] = i;
			continue;
		}
		if (g->op != IR_OP_ATTENTION_BWD || !last || g->nops < 4 || ir_attr_attn(g)->lse)
			continue;
		int fi = last[g->ops[1]];
		IrNode *f = fi >= 0 ? m->nodes[fi] : NULL;
		if (!f || !pairs(f, g) || !kernel_takes(f) || f->dtype != m->nodes[g->ops[1]]->dtype)
			continue;
		int *ops = arena_alloc(m->arena, sizeof(int) * (size_t)(g->nops + 1));
		if (!ops) {
			free(last);
			diag_error(d, (SrcLoc){0}, "attn_stats: out of memory");
			return false;
		}
		memcpy(ops, g->ops, sizeof(int) * (size_t)g->nops);
		ops[g->nops] = fi;
		IrNode *gm = m->nodes[i];
		gm->ops = ops;
		gm->nops++;
		ir_attr_attn_mut(m, gm)->lse = 1;
		ir_attr_attn_mut(m, f)->lse = 1;
	}
	free(last);
	return true;
}
