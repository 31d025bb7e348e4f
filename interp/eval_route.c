/* eval_route.c - f64 semantics of the routing ops (ir/ops.def): topk,
 * one_hot, gather, scatter_add, moe_slot, moe_token.  Integers are held
 * as doubles, as everywhere in the interpreter. */
#include "interp/eval_impl.h"
#include "support/route.h"

#include <stdlib.h>
#include <string.h>

/* The sizes of a gather or scatter_add: groups B (idx's leading dims),
 * m indices per group, n the indexed extent, r elements per row. */
typedef struct Ix {
	int64_t B, m, n, r;
} Ix;

static Ix ix_of(const IrNode *x, const IrNode *idx, const IrNode *out, bool gather)
{
	int b = idx->rank - 1;
	const IrNode *big = gather ? x : out;
	return (Ix){.B = prod(idx->shape, 0, b), .m = idx->shape[b], .n = big->shape[b],
	            .r = prod(big->shape, b + 1, big->rank)};
}

static bool ev_topk(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	int64_t N = X->shape[X->rank - 1], k = ir_attr_route(n)->k, rows = ir_node_numel(n) / k;
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	if (k < 1 || k > N)
		return ir_eval_bad(d, n, "k = %lld out of range", (long long)k);
	for (int64_t r = 0; r < rows; r++) {
		const double *row = x + r * N;
		for (int64_t t = 0; t < k; t++) {
			int64_t best = -1;
			for (int64_t i = 0; i < N; i++) {
				bool used = false;
				for (int64_t u = 0; u < t && !used; u++)
					used = y[r * k + u] == (double)i;
				if (!used && (best < 0 || row[i] > row[best]))
					best = i;
			}
			y[r * k + t] = (double)best;
		}
	}
	return true;
}

static bool ev_one_hot(IrEval *e, const IrNode *n)
{
	int64_t N = ir_attr_route(n)->n, rows = ir_node_numel(n) / N;
	const double *ids = in(e, n, 0);
	double *y = e->val[n->id];
	memset(y, 0, sizeof(double) * (size_t)(rows * N));
	for (int64_t r = 0; r < rows; r++)
		if (ids[r] >= 0 && ids[r] < (double)N)
			y[r * N + (int64_t)ids[r]] = 1;
	return true;
}

static bool ev_gather(IrEval *e, const IrNode *n, bool gather)
{
	const IrNode *X = arg(e, n, 0), *I = arg(e, n, 1);
	Ix z = ix_of(X, I, n, gather);
	const double *x = in(e, n, 0), *idx = in(e, n, 1);
	double *y = e->val[n->id];
	if (!gather)
		memset(y, 0, sizeof(double) * (size_t)ir_node_numel(n));
	for (int64_t b = 0; b < z.B; b++)
		for (int64_t i = 0; i < z.m; i++) {
			double v = idx[b * z.m + i];
			bool ok = v >= 0 && v < (double)z.n;
			int64_t j = ok ? (int64_t)v : 0;
			if (gather) {
				double *dst = y + (b * z.m + i) * z.r;
				if (ok)
					memcpy(dst, x + (b * z.n + j) * z.r, sizeof(double) * (size_t)z.r);
				else
					memset(dst, 0, sizeof(double) * (size_t)z.r);
			} else if (ok) {
				double *dst = y + (b * z.n + j) * z.r;
				const double *src = x + (b * z.m + i) * z.r;
				for (int64_t c = 0; c < z.r; c++)
					dst[c] += src[c];
			}
		}
	return true;
}

static bool ev_moe(IrEval *e, const IrNode *n, Diag *d)
{
	const IrNode *X = arg(e, n, 0);
	const IrAttrRoute *ra = ir_attr_route(n);
	int64_t S = X->shape[X->rank - 2], k = X->shape[X->rank - 1], E = ra->n, C = ra->capacity;
	int64_t G = ir_node_numel(X) / (S * k);
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)(S * k + S * k + E * C));
	int64_t *cnt = malloc(sizeof(int64_t) * (size_t)E);
	if (!ids || !cnt) {
		free(ids);
		free(cnt);
		return ir_eval_bad(d, n, "out of memory");
	}
	int32_t *slot = ids + S * k, *tok = slot + S * k;
	const double *x = in(e, n, 0);
	double *y = e->val[n->id];
	bool is_slot = n->op == IR_OP_MOE_SLOT;
	for (int64_t g = 0; g < G; g++) {
		for (int64_t i = 0; i < S * k; i++) {
			double v = x[g * S * k + i];
			ids[i] = v >= 0 && v < (double)E ? (int32_t)v : -1;
		}
		dtm_moe_route(ids, S, k, E, C, slot, tok, cnt);
		if (is_slot)
			for (int64_t i = 0; i < S * k; i++)
				y[g * S * k + i] = slot[i];
		else
			for (int64_t i = 0; i < E * C; i++)
				y[g * E * C + i] = tok[i];
	}
	free(ids);
	free(cnt);
	return true;
}

bool ir_eval_route(IrEval *e, const IrNode *n, Diag *d)
{
	switch (n->op) {
	case IR_OP_TOPK:
		return ev_topk(e, n, d);
	case IR_OP_ONE_HOT:
		return ev_one_hot(e, n);
	case IR_OP_GATHER:
		return ev_gather(e, n, true);
	case IR_OP_SCATTER_ADD:
		return ev_gather(e, n, false);
	case IR_OP_MOE_SLOT:
	case IR_OP_MOE_TOKEN:
		return ev_moe(e, n, d);
	default:
		return ir_eval_bad(d, n, "not a routing op");
	}
}
