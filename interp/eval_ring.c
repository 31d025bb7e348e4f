/* eval_ring.c - f64 semantics of ring attention's block ops (ops.def:
 * attn_block, attn_merge, attn_block_bwd), which partition emits for
 * context_parallel ring.  Rank dependent through attn.ring: the query
 * block is the rank's position in that group, the key block step places
 * before it, and the masks compare global positions. */
#include "interp/eval_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sets a's global offsets of the rank's query block and of the key block
 * `step` places before it (T rows a block) in the group attn.ring; when
 * balanced, member g's block is chunks 2g and 2n-1-2g of T/2 rows; with
 * attn.seq (uneven blocks, the tail padded) the keys from it on are
 * padding. */
static void ring_pos(const IrEval *e, const IrAttrAttn *at, int64_t T, EvAttn *a)
{
	const Mesh *mesh = &e->m->mesh;
	int64_t idx = 0, n = 1;
	for (int k = 0; k < mesh->naxes; k++)
		if (at->ring >> k & 1) {
			idx = idx * mesh->sizes[k] + e->coords[k];
			n *= mesh->sizes[k];
		}
	int64_t kb = ((idx - at->step) % n + n) % n;
	a->qoff = idx * T;
	a->koff = kb * T;
	a->len = at->seq;
	if (at->balanced) {
		int64_t c = a->half = T / 2;
		a->qoff = 2 * idx * c, a->qoff2 = (2 * n - 1 - 2 * idx) * c;
		a->koff = 2 * kb * c, a->koff2 = (2 * n - 1 - 2 * kb) * c;
	}
}

static bool ev_block(IrEval *e, const IrNode *n, Diag *d, bool bwd)
{
	int q0 = bwd ? 1 : 0;
	const IrNode *Q = arg(e, n, q0), *K = arg(e, n, q0 + 1);
	int64_t B = Q->shape[0], T = Q->shape[1], D = Q->shape[2], Dk = K->shape[2];
	int s0 = bwd ? 5 : 3; /* qseg, kseg */
	EvAttn at = ev_attn(e, n, s0, T);
	if (at.seg)
		at.kseg = in(e, n, s0 + 1);
	int64_t H = at.H;
	if (Q->rank != 3 || H < 1 || D % H || Dk % (D / H) || ev_attn_kv(&at, H - 1) >= Dk / (D / H))
		return ir_eval_bad(d, n, "shapes do not agree");
	int64_t hd = D / H, W = D + H, S = B * T * D;
	double scale = 1.0 / sqrt((double)hd);
	ring_pos(e, ir_attr_attn(n), T, &at);
	double *p = malloc(sizeof(double) * (size_t)(2 * T + 1));
	if (!p)
		return ir_eval_bad(d, n, "out of memory");
	double *dp = p + T;
	const double *q = in(e, n, q0), *k = in(e, n, q0 + 1), *v = in(e, n, q0 + 2);
	const double *dy = bwd ? in(e, n, 0) : NULL, *ol = bwd ? in(e, n, 4) : NULL;
	double *y = e->val[n->id];
	memset(y, 0, sizeof(double) * (size_t)(bwd ? 3 * S : B * T * W));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < T; i++) {
				int64_t g = ev_attn_kv(&at, h), row = b * T + i;
				double mx = ev_attn_scores(&at, q, k, b, h, i, T, T, D, Dk, hd, p);
				if (!bwd) {
					double *yi = y + row * W;
					yi[D + h] = -INFINITY;
					if (mx == -INFINITY)
						continue;
					double sum = 0;
					for (int64_t j = 0; j < T; j++)
						sum += p[j] = exp(p[j] - mx);
					for (int64_t j = 0; j < T; j++) {
						const double *vj = v + (b * T + j) * Dk + g * hd;
						for (int64_t c = 0; p[j] != 0 && c < hd; c++)
							yi[h * hd + c] += p[j] / sum * vj[c];
					}
					yi[D + h] = mx + log(sum);
					continue;
				}
				/* backward: p from the whole row's log-sum-exp */
				double lse = ol[row * W + D + h], pdo = 0;
				if (mx == -INFINITY || lse == -INFINITY)
					continue;
				int64_t qi = row * D + h * hd;
				for (int64_t c = 0; c < hd; c++)
					pdo += dy[qi + c] * ol[row * W + h * hd + c];
				double *dq = y, *dk = y + S, *dv = y + 2 * S;
				for (int64_t j = 0; j < T; j++) {
					p[j] = exp(p[j] - lse);
					int64_t vj = (b * T + j) * Dk + g * hd, oj = (b * T + j) * D + h * hd;
					dp[j] = 0;
					for (int64_t c = 0; c < hd; c++) {
						dv[oj + c] += p[j] * dy[qi + c];
						dp[j] += dy[qi + c] * v[vj + c];
					}
				}
				for (int64_t j = 0; j < T; j++) {
					int64_t kj = (b * T + j) * Dk + g * hd, oj = (b * T + j) * D + h * hd;
					double ds = p[j] * (dp[j] - pdo) * scale;
					for (int64_t c = 0; c < hd; c++) {
						dq[qi + c] += ds * k[kj + c];
						dk[oj + c] += ds * q[qi + c];
					}
				}
			}
	free(p);
	return true;
}

static bool ev_merge(IrEval *e, const IrNode *n, Diag *d)
{
	int64_t H = ir_attr_attn(n)->heads, W = n->shape[2], D = W - H;
	if (n->rank != 3 || H < 1 || D < H || D % H)
		return ir_eval_bad(d, n, "shapes do not agree");
	int64_t hd = D / H, rows = n->shape[0] * n->shape[1];
	const double *a = in(e, n, 0), *b = in(e, n, 1);
	double *y = e->val[n->id];
	for (int64_t r = 0; r < rows; r++)
		for (int64_t h = 0; h < H; h++) {
			const double *ar = a + r * W, *br = b + r * W;
			double *yr = y + r * W;
			double l1 = ar[D + h], l2 = br[D + h], m = fmax(l1, l2);
			if (m == -INFINITY) {
				for (int64_t c = 0; c < hd; c++)
					yr[h * hd + c] = 0;
				yr[D + h] = -INFINITY;
				continue;
			}
			double w1 = exp(l1 - m), w2 = exp(l2 - m), s = w1 + w2;
			for (int64_t c = 0; c < hd; c++)
				yr[h * hd + c] = (ar[h * hd + c] * w1 + br[h * hd + c] * w2) / s;
			yr[D + h] = m + log(s);
		}
	return true;
}

bool ir_eval_ring(IrEval *e, const IrNode *n, Diag *d)
{
	switch (n->op) {
	case IR_OP_ATTN_BLOCK:
		return ev_block(e, n, d, false);
	case IR_OP_ATTN_BLOCK_BWD:
		return ev_block(e, n, d, true);
	case IR_OP_ATTN_MERGE:
		return ev_merge(e, n, d);
	default:
		break;
	}
	return ir_eval_bad(d, n, "not a ring attention op");
}
