/* dtmk_ring.h - CPU kernels of ring attention's block ops (ir/ops.def:
 * attn_block, attn_merge, attn_block_bwd; semantics: interp/eval_ring.c).
 * Attributes as cg_kernel_attrs writes them: ints = {heads, causal,
 * kv_heads, window, ring, step, balanced[, 0, seq]}, mesh_axes =
 * head_axes; when balanced, member g's block is chunks 2g and 2n-1-2g of
 * T/2 rows; with seq (an uneven split: blocks of ceil(seq / n) rows, the
 * tail padded) keys at or past seq are padding that no query sees.  The query block
 * is the rank's index in the group ring (ctx->coords), the key block step
 * places before it; masks compare global positions.
 *
 * Head sizes that are multiples of 16 run attention's own kernels in
 * blocks of 8 query rows over tiles of keys (dtmk_attention_block,
 * dtmkb_attn_block_lse), told where the block's rows sit
 * (DtmkAttnPos), the keys' own segment ids, and the ol layout (bf16
 * operands: their bf16 products, as attention's).  Those
 * take each row's keys as one range, which they are when the keys lie in
 * the order of their places: a balanced key block whose second chunk
 * comes first in the sequence (member g > (n - 1) / 2) is rotated by half
 * a block for them (k, v and the key segment ids in; dk and dv back).
 * Other head sizes take dtmk_ring_item: f32 loops over a staged key
 * block. */
#ifndef DTMK_RING_H
#define DTMK_RING_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"
#include "codegen/cpu/dtmk_bwd.h"
#include "codegen/cpu/dtmk_fwd.h"

struct dtmk_ring_job {
	const DtmkArgs *a;
	int64_t H, T, D, Dk, h0, group, qoff, koff, half, qoff2, koff2;
	int64_t len; /* attn.seq: keys at or past it pad an uneven block; 0: none */
	int bwd;
	const DtmkTensor *qseg, *kseg; /* [B, T] i32 segment ids, or NULL */
};

/* Rank's (query, key) block offsets along the sequence of T rows a block. */
static inline void dtmk_ring_pos(const DtmCtx *ctx, const DtmkArgs *a, struct dtmk_ring_job *j)
{
	int64_t T = j->T;
	uint32_t ring = a->nints > 4 ? (uint32_t)a->ints[4] : 0;
	int64_t step = a->nints > 5 ? a->ints[5] : 0, idx = 0, n = 1;
	for (int k = 0; ctx && k < ctx->mesh_naxes; k++)
		if (ring >> k & 1) {
			idx = idx * ctx->mesh_sizes[k] + ctx->coords[k];
			n *= ctx->mesh_sizes[k];
		}
	int64_t kb = ((idx - step) % n + n) % n;
	j->qoff = idx * T;
	j->koff = kb * T;
	j->len = a->nints > 8 ? a->ints[8] : 0;
	if (a->nints > 6 && a->ints[6]) {
		int64_t c = j->half = T / 2;
		j->qoff = 2 * idx * c, j->qoff2 = (2 * n - 1 - 2 * idx) * c;
		j->koff = 2 * kb * c, j->koff2 = (2 * n - 1 - 2 * kb) * c;
	}
}

static inline int64_t dtmk_ring_at(const struct dtmk_ring_job *j, int64_t i, int64_t off,
                                   int64_t off2)
{
	return j->half && i >= j->half ? off2 + (i - j->half) : off + i;
}

static inline int dtmk_ring_sees(const struct dtmk_ring_job *j, int64_t b, int64_t i, int64_t k)
{
	if (j->qseg) {
		int32_t si = dtmk_load_i32(j->qseg, b * j->T + i);
		if (si < 0 || si != dtmk_load_i32(j->kseg, b * j->T + k))
			return 0;
	}
	int64_t gi = dtmk_ring_at(j, i, j->qoff, j->qoff2);
	int64_t gk = dtmk_ring_at(j, k, j->koff, j->koff2), W = j->a->ints[3];
	if ((j->len > 0 && gk >= j->len) || (j->a->ints[1] && gk > gi))
		return 0;
	return W <= 0 || (gi - gk < W && gk - gi < W);
}

/* One (batch, head) item: forward (output and log-sum-exp) or backward.
 * The item's key block is staged as f32, k transposed ([hd, T]) and v
 * row-major ([T, hd]), so the scores of a query row over the keys and
 * the sums over keys run along contiguous memory; dk and dv add up in f32
 * buffers and are stored once.  buf holds 4 T hd + 3 T + 2 hd floats. */
static inline void dtmk_ring_item(const struct dtmk_ring_job *j, int64_t it, float *buf)
{
	const DtmkArgs *a = j->a;
	int q0 = j->bwd ? 1 : 0;
	const DtmkTensor *Q = &a->in[q0], *K = &a->in[q0 + 1], *V = &a->in[q0 + 2];
	int64_t H = j->H, T = j->T, D = j->D, Dk = j->Dk, hd = D / H, Wd = D + H;
	int64_t S = Q->numel, b = it / H, h = it % H, g = (j->h0 + h) / j->group;
	float scale = 1.0f / sqrtf((float)hd);
	float *restrict kt = buf, *restrict vb = kt + hd * T, *restrict dkb = vb + T * hd;
	float *restrict dvb = dkb + T * hd, *restrict p = dvb + T * hd, *restrict dp = p + T;
	float *restrict seen = dp + T, *restrict qrow = seen + T, *restrict acc = qrow + hd;
	for (int64_t t = 0; t < T; t++)
		for (int64_t c = 0; c < hd; c++) {
			int64_t o = (b * T + t) * Dk + g * hd + c;
			kt[c * T + t] = dtmk_load(K, o);
			vb[t * hd + c] = dtmk_load(V, o);
		}
	if (j->bwd)
		for (int64_t e = 0; e < T * hd; e++)
			dkb[e] = dvb[e] = 0;
	for (int64_t i = 0; i < T; i++) {
		int64_t row = b * T + i, qi = row * D + h * hd;
		int any = 0;
		for (int64_t t = 0; t < T; t++) {
			seen[t] = dtmk_ring_sees(j, b, i, t) ? 1.0f : 0.0f;
			any |= seen[t] != 0;
		}
		const DtmkTensor *dy = j->bwd ? &a->in[0] : NULL, *ol = j->bwd ? &a->in[4] : NULL;
		float lse = ol && any ? dtmk_load(ol, row * Wd + D + h) : 0.0f;
		if (!any || lse == -INFINITY) {
			if (!j->bwd) {
				for (int64_t c = 0; c < hd; c++)
					dtmk_store(&a->out, row * Wd + h * hd + c, 0.0f);
				dtmk_store(&a->out, row * Wd + D + h, -INFINITY);
			} else {
				for (int64_t c = 0; c < hd; c++)
					dtmk_store(&a->out, qi + c, 0.0f);
			}
			continue;
		}
		for (int64_t c = 0; c < hd; c++)
			qrow[c] = dtmk_load(Q, qi + c) * scale;
		for (int64_t t = 0; t < T; t++)
			p[t] = 0;
		for (int64_t c = 0; c < hd; c++) {
			const float *kc = kt + c * T;
			float qc = qrow[c];
			for (int64_t t = 0; t < T; t++)
				p[t] += qc * kc[t];
		}
		if (!j->bwd) {
			float mx = -INFINITY, sum = 0;
			for (int64_t t = 0; t < T; t++)
				if (seen[t] != 0 && p[t] > mx)
					mx = p[t];
			for (int64_t t = 0; t < T; t++) {
				p[t] = seen[t] != 0 ? dtmk_expf(p[t] - mx) : 0.0f;
				sum += p[t];
			}
			for (int64_t c = 0; c < hd; c++)
				acc[c] = 0;
			for (int64_t t = 0; t < T; t++) {
				const float *vt = vb + t * hd;
				float pt = p[t] / sum;
				for (int64_t c = 0; pt != 0 && c < hd; c++)
					acc[c] += pt * vt[c];
			}
			for (int64_t c = 0; c < hd; c++)
				dtmk_store(&a->out, row * Wd + h * hd + c, acc[c]);
			dtmk_store(&a->out, row * Wd + D + h, mx + logf(sum));
			continue;
		}
		/* backward: p from the whole row's log-sum-exp (ol) */
		float pdo = 0;
		for (int64_t c = 0; c < hd; c++) {
			acc[c] = dtmk_load(dy, qi + c);
			pdo += acc[c] * dtmk_load(ol, row * Wd + h * hd + c);
		}
		for (int64_t t = 0; t < T; t++) {
			p[t] = seen[t] != 0 ? dtmk_expf(p[t] - lse) : 0.0f;
			const float *vt = vb + t * hd;
			float d = 0;
			for (int64_t c = 0; c < hd; c++)
				d += acc[c] * vt[c];
			dp[t] = p[t] * (d - pdo); /* ds, before the scale */
		}
		for (int64_t t = 0; t < T; t++) {
			float *dvt = dvb + t * hd, *dkt = dkb + t * hd;
			for (int64_t c = 0; p[t] != 0 && c < hd; c++) {
				dvt[c] += p[t] * acc[c];
				dkt[c] += dp[t] * qrow[c]; /* qrow holds q scale */
			}
		}
		for (int64_t c = 0; c < hd; c++) {
			const float *kc = kt + c * T;
			float dq = 0;
			for (int64_t t = 0; t < T; t++)
				dq += dp[t] * kc[t];
			dtmk_store(&a->out, qi + c, dq * scale);
		}
	}
	if (j->bwd)
		for (int64_t t = 0; t < T; t++)
			for (int64_t c = 0; c < hd; c++) {
				int64_t o = (b * T + t) * D + h * hd + c;
				dtmk_store(&a->out, S + o, dkb[t * hd + c]);
				dtmk_store(&a->out, 2 * S + o, dvb[t * hd + c]);
			}
}

static inline void dtmk_ring_items(void *argp, int64_t lo, int64_t hi)
{
	const struct dtmk_ring_job *j = argp;
	int64_t hd = j->D / j->H;
	float *buf = malloc(sizeof(float) * (size_t)(4 * j->T * hd + 3 * j->T + 2 * hd));
	if (!buf)
		return;
	for (int64_t it = lo; it < hi; it++)
		dtmk_ring_item(j, it, buf);
	free(buf);
}

/* x [B, T, ..] with its two halves along T swapped, into a new buffer
 * (NULL when out of memory). */
static inline void *dtmk_ring_rotated(const DtmkTensor *x)
{
	int64_t B = x->shape[0], T = x->shape[1], half = T / 2;
	size_t row = (size_t)(x->numel / (B * T)) * dtmk_esize(x->dtype);
	char *r = malloc(row * (size_t)(x->numel ? B * T : 1));
	for (int64_t b = 0; r && b < B; b++) {
		const char *src = (const char *)x->p + (size_t)(b * T) * row;
		char *dst = r + (size_t)(b * T) * row;
		memcpy(dst, src + (size_t)half * row, (size_t)(T - half) * row);
		memcpy(dst + (size_t)(T - half) * row, src, (size_t)half * row);
	}
	return r;
}

/* The block's forward in attention's kernel (dtmk_attention_items):
 * its y and log-sum-exps into ol's layout. */
static inline void dtmk_ring_fwd_blocks(const DtmCtx *ctx, const struct dtmk_ring_job *j,
                                        const DtmkAttnPos *pos)
{
	const DtmkArgs *a = j->a;
	struct dtmk_attn_job aj = {.a = a, .H = j->H, .Tq = j->T, .Tk = j->T, .D = j->D,
	                           .Dv = j->D, .Dk = j->Dk, .Dkv = j->Dk, .h0 = j->h0,
	                           .group = j->group, .qseg = j->qseg, .kseg = j->kseg,
	                           .ldo = j->D + j->H, .pos = pos, .ring = 1};
	dtmk_par(ctx, a->in[0].shape[0] * j->H, 1, dtmk_attention_items, &aj);
}

/* The block's backward in attention's (dtmkb_attn_block_lse, _bf16 on
 * bf16 operands): the merged output and its log-sum-exps read off ol,
 * the operands widened to f32 where the f32 kernel runs and they are
 * not. */
static inline void dtmk_ring_bwd_blocks(const DtmCtx *ctx, const struct dtmk_ring_job *j,
                                        const DtmkAttnPos *pos)
{
	const DtmkArgs *a = j->a;
	const DtmkTensor *Q = &a->in[1], *OL = &a->in[4];
	int64_t B = Q->shape[0], T = j->T, D = j->D, H = j->H, S = B * T * D, Wd = D + H;
	bool bf = a->in[0].dtype == DTM_BF16 && OL->dtype == DTM_BF16 &&
	          dtmk_attn_bf16(Q, &a->in[2], &a->in[3], D / H, D / H);
	bool bout = bf && a->out.dtype == DTM_BF16;
	DtmkbBuf none = {NULL, 0}, out = bout ? none : dtmkb_out(&a->out);
	DtmkbBuf dy = bf ? none : dtmkb_in(ctx, &a->in[0]), q = bf ? none : dtmkb_in(ctx, Q);
	DtmkbBuf k = bf ? none : dtmkb_in(ctx, &a->in[2]), v = bf ? none : dtmkb_in(ctx, &a->in[3]);
	DtmkbBuf ol = bf ? none : dtmkb_in(ctx, OL);
	/* the bf16 kernel's log-sum-exps as f32 [B, T, H] */
	float *lse = bf ? malloc(sizeof(float) * (size_t)(B * T * H)) : NULL;
	for (int64_t r = 0; lse && r < B * T; r++)
		for (int64_t h = 0; h < H; h++)
			lse[r * H + h] = dtmk_load(OL, r * Wd + D + h);
	if ((bf ? lse != NULL : dy.p && q.p && k.p && v.p && ol.p) && (bout || out.p)) {
		DtmkbAttn w = {.a = a, .dy = dy.p, .q = q.p, .k = k.p, .v = v.p, .dq = out.p,
		               .dk = out.p ? out.p + S : NULL, .dv = out.p ? out.p + 2 * S : NULL,
		               .bout = bout ? a->out.p : NULL, .T = T, .D = D, .H = H, .hd = D / H,
		               .Dk = j->Dk, .h0 = j->h0, .group = j->group,
		               .scale = (float)(1.0 / sqrt((double)(D / H))), .seg = j->qseg,
		               .y = ol.p, .lse = ol.p ? ol.p + D : NULL, .kseg = j->kseg, .ly = Wd,
		               .ls_b = T * Wd, .ls_h = 1, .ls_i = Wd, .pos = pos};
		if (bf) {
			w.bdy = a->in[0].p;
			w.bq = Q->p;
			w.bk = a->in[2].p;
			w.bv = a->in[3].p;
			w.by = OL->p;
			w.lse = lse;
			w.ls_b = T * H, w.ls_h = 1, w.ls_i = H;
		}
		dtmk_par(ctx, B * H, 1, dtmkb_attn_range, &w);
	}
	free(lse);
	dtmkb_free(dy);
	dtmkb_free(q);
	dtmkb_free(k);
	dtmkb_free(v);
	dtmkb_free(ol);
	dtmkb_done(ctx, &a->out, out);
}

/* Whether every query row's keys are one range (attention's block
 * kernels take them so). */
static inline bool dtmk_ring_ranges(const struct dtmk_ring_job *j, const DtmkAttnPos *pos)
{
	for (int64_t i = 0; i < j->T; i++) {
		int64_t lo, hi;
		if (!dtmk_attn_range_pos(j->a, pos, i, j->T, &lo, &hi))
			return false;
	}
	return true;
}

/* The job of attn_block (bwd 0) or attn_block_bwd (1) on this rank; false
 * when there is nothing to do. */
static inline bool dtmk_ring_setup(const DtmCtx *ctx, const DtmkArgs *a, int bwd,
                                   struct dtmk_ring_job *j)
{
	const DtmkTensor *Q = &a->in[bwd ? 1 : 0], *K = &a->in[bwd ? 2 : 1];
	*j = (struct dtmk_ring_job){.a = a, .H = a->ints[0], .T = Q->shape[1], .D = Q->shape[2],
	                            .Dk = K->shape[2], .group = 1, .bwd = bwd};
	if (j->H <= 0 || j->D % j->H)
		return false;
	dtmk_attn_heads(ctx, a, &j->h0, &j->group);
	dtmk_ring_pos(ctx, a, j);
	int s0 = bwd ? 5 : 3;
	if (a->nin > s0 + 1) {
		j->qseg = &a->in[s0];
		j->kseg = &a->in[s0 + 1];
	}
	return true;
}

/* dtmk_ring_item on every (batch, head): the kernels every ring block
 * can take (and what the tiled ones are tested against). */
static inline void dtmk_ring_scalar(const DtmCtx *ctx, const DtmkArgs *a, int bwd)
{
	struct dtmk_ring_job j;
	if (dtmk_ring_setup(ctx, a, bwd, &j))
		dtmk_par(ctx, a->in[bwd ? 1 : 0].shape[0] * j.H, 1, dtmk_ring_items, &j);
}

/* The key block's operands (k, v and the key segment ids) rotated by
 * half a block into r's copy of the arguments, and pos's key chunks
 * swapped to match; false when out of memory. */
static inline bool dtmk_ring_rotate_keys(const struct dtmk_ring_job *j, DtmkArgs *r,
                                         DtmkAttnPos *pos, void **bufs)
{
	int k0 = j->bwd ? 2 : 1, ks = j->bwd ? 6 : 4;
	int which[3] = {k0, k0 + 1, j->kseg ? ks : -1};
	*r = *j->a;
	for (int i = 0; i < 3; i++) {
		bufs[i] = NULL;
		if (which[i] < 0)
			continue;
		bufs[i] = dtmk_ring_rotated(&r->in[which[i]]);
		if (!bufs[i])
			return false;
		r->in[which[i]].p = bufs[i];
	}
	int64_t ko = pos->koff;
	pos->koff = pos->koff2;
	pos->koff2 = ko;
	return true;
}

static inline void dtmk_ring_run(const DtmCtx *ctx, const DtmkArgs *a, int bwd)
{
	struct dtmk_ring_job j;
	if (!dtmk_ring_setup(ctx, a, bwd, &j))
		return;
	DtmkAttnPos pos = {j.qoff, j.qoff2, j.koff, j.koff2, j.half, j.len};
	DtmkArgs r;
	void *bufs[3] = {NULL, NULL, NULL};
	bool rot = j.half && j.koff2 < j.koff;
	bool tiled = (j.D / j.H) % 16 == 0;
	struct dtmk_ring_job j0 = j; /* the operands as given: the scalar item's */
	if (tiled && rot) {
		tiled = dtmk_ring_rotate_keys(&j, &r, &pos, bufs);
		j.a = &r;
		if (j.kseg)
			j.kseg = &r.in[bwd ? 6 : 4];
	}
	if (tiled && dtmk_ring_ranges(&j, &pos)) {
		if (!bwd) {
			dtmk_ring_fwd_blocks(ctx, &j, &pos);
		} else {
			dtmk_ring_bwd_blocks(ctx, &j, &pos);
			/* dk and dv back in the key block's order */
			for (int part = 1; rot && part < 3; part++) {
				int64_t S = a->out.numel / 3;
				DtmkTensor x = {.p = (char *)a->out.p + (size_t)(part * S) *
				                                          dtmk_esize(a->out.dtype),
				                .dtype = a->out.dtype, .rank = 3,
				                .shape = {a->out.shape[1], a->out.shape[2], a->out.shape[3]},
				                .numel = S};
				void *back = dtmk_ring_rotated(&x);
				if (back)
					memcpy(x.p, back, (size_t)S * dtmk_esize(x.dtype));
				free(back);
			}
		}
	} else {
		dtmk_par(ctx, a->in[bwd ? 1 : 0].shape[0] * j0.H, 1, dtmk_ring_items, &j0);
	}
	for (int i = 0; i < 3; i++)
		free(bufs[i]);
}

/* attn_block(q, k, v [B, T, D][, qseg, kseg [B, T]]) -> [B, T, D + H]. */
static inline void dtmk_attn_block(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_ring_run(ctx, a, 0);
}

/* attn_block_bwd(dy, q, k, v, ol[, qseg, kseg]) -> [3, B, T, D]. */
static inline void dtmk_attn_block_bwd(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_ring_run(ctx, a, 1);
}

/* attn_merge(a, b [B, T, D + H]) -> like a (online softmax); y may alias
 * either operand: each row's values are read before written. */
static inline void dtmk_attn_merge(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t H = a->ints[0], Wd = a->out.shape[2], D = Wd - H;
	if (H <= 0 || D % H)
		return;
	int64_t hd = D / H, rows = a->out.shape[0] * a->out.shape[1];
	for (int64_t r = 0; r < rows; r++)
		for (int64_t h = 0; h < H; h++) {
			double l1 = dtmk_load(&a->in[0], r * Wd + D + h);
			double l2 = dtmk_load(&a->in[1], r * Wd + D + h);
			double m = l1 > l2 ? l1 : l2;
			double w1 = m == -INFINITY ? 0 : exp(l1 - m), w2 = m == -INFINITY ? 0 : exp(l2 - m);
			double s = w1 + w2;
			for (int64_t c = 0; c < hd; c++) {
				int64_t o = r * Wd + h * hd + c;
				double y = s > 0 ? (dtmk_load(&a->in[0], o) * w1 +
				                    dtmk_load(&a->in[1], o) * w2) / s : 0;
				dtmk_store(&a->out, o, (float)y);
			}
			dtmk_store(&a->out, r * Wd + D + h, m == -INFINITY ? -INFINITY : (float)(m + log(s)));
		}
}

#endif
