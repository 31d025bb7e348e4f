/* route.h - a mixture of experts' slot assignment, shared by the reference
 * interpreter (interp/eval_route.c) and the generated CPU and CUDA-host
 * kernels (codegen/cpu/dtmk_route.h), so every executor drops the same
 * tokens.
 *
 * One group: e[s * k + j] is token s's j-th expert choice.  Choices queue
 * at their expert in token order (s, then j); the p-th in expert x's queue
 * gets slot x * C + p while p < C, and is dropped (slot -1) after that, or
 * when x is not in [0, E).  tok (E * C entries, or NULL) is the inverse:
 * the token in each slot, -1 where the slot is empty.  count is E entries
 * of scratch; on return count[x] is the number of choices of expert x,
 * dropped ones included (the expert's load).
 */
#ifndef DTM_SUPPORT_ROUTE_H
#define DTM_SUPPORT_ROUTE_H

#include <stdint.h>

static inline void dtm_moe_route(const int32_t *e, int64_t S, int64_t k, int64_t E, int64_t C,
                                 int32_t *slot, int32_t *tok, int64_t *count)
{
	for (int64_t x = 0; x < E; x++)
		count[x] = 0;
	if (tok)
		for (int64_t i = 0; i < E * C; i++)
			tok[i] = -1;
	for (int64_t s = 0; s < S; s++)
		for (int64_t j = 0; j < k; j++) {
			int64_t x = e[s * k + j], p = -1;
			if (x >= 0 && x < E && (p = count[x]++) >= C)
				p = -1;
			int32_t at = p < 0 ? -1 : (int32_t)(x * C + p);
			if (slot)
				slot[s * k + j] = at;
			if (tok && at >= 0)
				tok[at] = (int32_t)s;
		}
}

/* topk's order: the index of the largest value of row x[0..n) not yet in
 * taken[0..t), ties (and NaNs, which never win) to the lower index. */
static inline int64_t dtm_topk_next(const float *x, int64_t n, const int32_t *taken, int64_t t)
{
	int64_t best = -1;
	for (int64_t i = 0; i < n; i++) {
		int used = 0;
		for (int64_t u = 0; u < t && !used; u++)
			used = taken[u] == i;
		if (!used && (best < 0 || x[i] > x[best]))
			best = i;
	}
	return best;
}

#endif
