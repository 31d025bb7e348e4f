/* eval_impl.h - helpers shared by the reference interpreter's files
 * (eval.c, eval_grad.c, eval_optim.c, eval_ring.c); not part of its interface. */
#ifndef DTM_INTERP_EVAL_IMPL_H
#define DTM_INTERP_EVAL_IMPL_H

#include "interp/eval.h"

#include <math.h>

/* f64 semantics of the optimizer ops (ir_eval_run dispatches here;
 * eval_optim.c).  The in-place ops write their param, state and master
 * operands' buffers, so running a module again is the next training
 * step. */
bool ir_eval_optim(IrEval *e, const IrNode *n, Diag *d);

/* f64 semantics of ring attention's block ops (eval_ring.c). */
bool ir_eval_ring(IrEval *e, const IrNode *n, Diag *d);

/* f64 semantics of the routing ops: topk, one_hot, gather, scatter_add,
 * moe_slot, moe_token (eval_route.c). */
bool ir_eval_route(IrEval *e, const IrNode *n, Diag *d);

/* Reports "op %id: message" at the node's source location; returns false. */
bool ir_eval_bad(Diag *d, const IrNode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Operand i of n, and its value buffer. */
static inline const IrNode *arg(const IrEval *e, const IrNode *n, int i)
{
	return e->m->nodes[n->ops[i]];
}

static inline const double *in(const IrEval *e, const IrNode *n, int i)
{
	return e->val[n->ops[i]];
}

/* The product of shape[from, to). */
static inline int64_t prod(const int64_t *shape, int from, int to)
{
	int64_t p = 1;
	for (int i = from; i < to; i++)
		p *= shape[i];
	return p;
}

/* attention's head grouping and mask (ir/ops.def), as ev_attention and
 * ev_attention_bwd read them. */
typedef struct EvAttn {
	int64_t H;     /* query heads here */
	int64_t group; /* query heads per kv head */
	int64_t h0;    /* this rank's first query head (head_axes) */
	int64_t window, T;
	bool causal;
	const double *seg;  /* [B, T] or NULL: the queries' segment ids */
	const double *kseg; /* the keys' (seg, but for a ring block's) */
	/* the global positions of query row 0 and key row 0 (a ring block
	 * pair's, eval_ring.c; 0 for attention); balanced blocks (half > 0):
	 * rows from half on start at qoff2, koff2; keys at or past len (> 0:
	 * attn.seq, an uneven block's padding) are seen by none */
	int64_t qoff, koff, half, qoff2, koff2, len;
} EvAttn;

/* The global position of row i of a block whose first half starts at
 * off and (balanced) second half at off2. */
static inline int64_t ev_attn_pos(const EvAttn *a, int64_t i, int64_t off, int64_t off2)
{
	return a->half && i >= a->half ? off2 + (i - a->half) : off + i;
}

static inline EvAttn ev_attn(const IrEval *e, const IrNode *n, int segop, int64_t T)
{
	const IrAttrAttn *at = ir_attr_attn(n);
	const Mesh *mesh = &e->m->mesh;
	int64_t idx = 0, parts = 1;
	/* mesh order, head_minor's axes last (dtmk_group_index) */
	for (uint32_t last = 0; last < 2; last++)
		for (int k = 0; k < mesh->naxes; k++)
			if ((at->head_axes >> k & 1) && (at->head_minor >> k & 1) == last) {
				idx = idx * mesh->sizes[k] + e->coords[k];
				parts *= mesh->sizes[k];
			}
	EvAttn a = {.H = at->heads, .group = at->heads * parts / ir_attn_kv_heads(at),
	            .h0 = idx * at->heads, .window = at->window, .T = T, .causal = at->causal != 0,
	            .seg = segop >= 0 && n->nops > segop ? in(e, n, segop) : NULL};
	a.kseg = a.seg;
	if (a.group < 1)
		a.group = 1;
	return a;
}

/* The kv head that query head h (here) reads. */
static inline int64_t ev_attn_kv(const EvAttn *a, int64_t h)
{
	return (a->h0 + h) / a->group;
}

/* Whether query i of batch row b attends key j (causal and window by
 * global positions, segment ids by local rows). */
static inline bool ev_attn_sees(const EvAttn *a, int64_t b, int64_t i, int64_t j)
{
	int64_t gi = ev_attn_pos(a, i, a->qoff, a->qoff2), gj = ev_attn_pos(a, j, a->koff, a->koff2);
	if ((a->len > 0 && gj >= a->len) || (a->causal && gj > gi))
		return false;
	if (a->window && (gi - gj >= a->window || gj - gi >= a->window))
		return false;
	if (a->seg) {
		double si = a->seg[b * a->T + i], sj = a->kseg[b * a->T + j];
		if (si < 0 || si != sj)
			return false;
	}
	return true;
}

/* Head h of query row i (batch row b) against Tk keys: the scaled scores
 * q.k / sqrt(hd) into p, -inf where masked; returns their max (-inf:
 * the row attends nothing).  q is [.., Tq, D], k [.., Tk, Dk]. */
static inline double ev_attn_scores(const EvAttn *a, const double *q, const double *k, int64_t b,
                                    int64_t h, int64_t i, int64_t Tq, int64_t Tk, int64_t D,
                                    int64_t Dk, int64_t hd, double *p)
{
	double mx = -INFINITY, scale = 1.0 / sqrt((double)hd);
	const double *qi = q + (b * Tq + i) * D + h * hd;
	int64_t g = ev_attn_kv(a, h);
	for (int64_t j = 0; j < Tk; j++) {
		p[j] = -INFINITY;
		if (!ev_attn_sees(a, b, i, j))
			continue;
		const double *kj = k + (b * Tk + j) * Dk + g * hd;
		double s = 0;
		for (int64_t c = 0; c < hd; c++)
			s += qi[c] * kj[c];
		p[j] = s * scale;
		mx = fmax(mx, p[j]);
	}
	return mx;
}

#endif
