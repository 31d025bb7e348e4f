/* dtmk_route.h - CPU kernels of the routing ops (ir/ops.def: topk,
 * one_hot, gather, scatter_add, moe_slot, moe_token; semantics there and
 * in interp/eval_route.c).  Attributes as cg_kernel_attrs gives them:
 * ints = {k, n, capacity}.  The slot assignment is support/route.h's, the
 * interpreter's, so every executor drops the same tokens. */
#ifndef DTMK_ROUTE_H
#define DTMK_ROUTE_H

#include <stdlib.h>

#include "codegen/cpu/dtmk.h"
#include "support/route.h"

static void dtmk_topk(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	const DtmkTensor *X = &a->in[0];
	int64_t n = X->shape[X->rank - 1], k = a->ints[0], rows = a->out.numel / k;
	float *row = malloc(sizeof(float) * (size_t)n);
	if (!row)
		return;
	int32_t *y = (int32_t *)a->out.p;
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < n; i++)
			row[i] = dtmk_load(X, r * n + i);
		for (int64_t t = 0; t < k; t++)
			y[r * k + t] = (int32_t)dtm_topk_next(row, n, y + r * k, t);
	}
	free(row);
}

static void dtmk_one_hot(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	int64_t n = a->ints[1], rows = a->in[0].numel;
	for (int64_t r = 0; r < rows; r++) {
		int32_t id = dtmk_load_i32(&a->in[0], r);
		for (int64_t j = 0; j < n; j++)
			dtmk_store(&a->out, r * n + j, j == id ? 1.0f : 0.0f);
	}
}

/* gather (gather = 1) and scatter_add: B groups of m indices into an
 * indexed extent n of rows of r elements (ops.def). */
static void dtmk_gather_rows(const DtmkArgs *a, int gather)
{
	const DtmkTensor *X = &a->in[0], *I = &a->in[1], *big = gather ? X : &a->out;
	int b = I->rank - 1;
	int64_t B = dtmk_span(I, 0, b), m = I->shape[b], n = big->shape[b];
	int64_t r = dtmk_span(big, b + 1, big->rank);
	if (!gather && a->out.dtype == DTM_F32)
		memset(a->out.p, 0, sizeof(float) * (size_t)a->out.numel);
	else if (!gather)
		for (int64_t i = 0; i < a->out.numel; i++)
			dtmk_store(&a->out, i, 0.0f);
	for (int64_t g = 0; g < B; g++)
		for (int64_t i = 0; i < m; i++) {
			int32_t j = dtmk_load_i32(I, g * m + i);
			int ok = j >= 0 && j < n;
			int64_t at = (g * m + i) * r, to = (g * n + j) * r;
			if (gather && X->dtype == DTM_F32 && a->out.dtype == DTM_F32) {
				float *dst = (float *)a->out.p + at;
				if (ok)
					memcpy(dst, (const float *)X->p + to, sizeof(float) * (size_t)r);
				else
					memset(dst, 0, sizeof(float) * (size_t)r);
			} else if (gather) {
				for (int64_t c = 0; c < r; c++)
					dtmk_store(&a->out, at + c, ok ? dtmk_load(X, to + c) : 0.0f);
			} else if (ok) {
				for (int64_t c = 0; c < r; c++)
					dtmk_store(&a->out, to + c,
					           dtmk_load(&a->out, to + c) + dtmk_load(X, at + c));
			}
		}
}

static void dtmk_gather(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmk_gather_rows(a, 1);
}

static void dtmk_scatter_add(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	dtmk_gather_rows(a, 0);
}

/* Adds a group's expert load (cnt) and drops past capacity C to the
 * runtime's statistics of site `site` (DtmCtx.moe_stats), on the ranks at
 * coordinate 0 of the axes the op is replicated over only. */
static void dtmk_moe_stats(const DtmCtx *ctx, const DtmkArgs *a, const int64_t *cnt, int64_t E,
                           int64_t C)
{
	int64_t site = a->nints > 3 ? a->ints[3] : 0;
	if (!ctx || !ctx->moe_stats || site < 1 || E > ctx->moe_experts)
		return;
	for (int k = 0; k < ctx->mesh_naxes; k++)
		if ((a->mesh_axes >> k & 1) && ctx->coords[k] != 0)
			return;
	float *st = ctx->moe_stats + (site - 1) * 2 * ctx->moe_experts;
	for (int64_t x = 0; x < E; x++) {
		st[x] += (float)cnt[x];
		st[ctx->moe_experts + x] += (float)(cnt[x] > C ? cnt[x] - C : 0);
	}
}

/* moe_slot (slot = 1) and moe_token over the groups of e [B..., S, k]. */
static void dtmk_moe_route(const DtmCtx *ctx, const DtmkArgs *a, int slot)
{
	const DtmkTensor *X = &a->in[0];
	int64_t S = X->shape[X->rank - 2], k = X->shape[X->rank - 1];
	int64_t E = a->ints[1], C = a->ints[2], G = X->numel / (S * k);
	int64_t *cnt = malloc(sizeof(int64_t) * (size_t)E);
	int32_t *tmp = slot ? NULL : malloc(sizeof(int32_t) * (size_t)(S * k));
	if (cnt && (slot || tmp)) {
		const int32_t *e = (const int32_t *)X->p;
		int32_t *y = (int32_t *)a->out.p;
		for (int64_t g = 0; g < G; g++)
			if (slot) {
				dtm_moe_route(e + g * S * k, S, k, E, C, y + g * S * k, NULL, cnt);
				dtmk_moe_stats(ctx, a, cnt, E, C);
			} else
				dtm_moe_route(e + g * S * k, S, k, E, C, tmp, y + g * E * C, cnt);
	}
	free(cnt);
	free(tmp);
}

static void dtmk_moe_slot(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_moe_route(ctx, a, 1);
}

static void dtmk_moe_token(const DtmCtx *ctx, const DtmkArgs *a)
{
	dtmk_moe_route(ctx, a, 0);
}

#endif
