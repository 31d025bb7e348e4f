/* dtmk_optim.h - CPU kernels of the optimizer ops (see dtmk.h for the
 * calling convention and ir/ops.def for the ops).
 *
 * The math follows torch.optim's single-tensor (foreach=False) path in f32,
 * op by op, with the scalars (1 - lr*wd, lr / (1 - b1^t), ...) computed in
 * double as Python does, because the PyTorch oracle compares 20 steps of
 * weights within 1e-4 and AdamW's division by sqrt(v) amplifies drift.
 * The learning rate is ctx->lr (the runtime applies the schedule) and t is
 * ctx->step (1-based).  Hyperparameters arrive in a->fx (ir/optim_ops.h's
 * layout), a->ints[0] = nesterov and a->flag = a master operand follows.
 *
 * Operands: adamw_step (p, g, m, v[, master], norm); sgd_step (p, g[, mom]
 * [, master], norm), mom present iff momentum != 0.  The updates are in
 * place on p (a->out aliases a->in[0]; a distinct a->out gets a copy) and
 * on the state.  Loads and stores go through dtmk_load/dtmk_store so bf16
 * params and grads work; with a master copy the math runs on it in f32 and
 * p is its rounding.  All-f32 tensors take a plain-pointer fast path.
 *
 * Loss scaling (ctx->loss_scale = S > 0): the gradients are S times the
 * true ones; grad_norm and the steps multiply by 1/S in f32 first (so the
 * norm is the true gradients'), a step whose norm is not finite changes
 * nothing (torch.amp.GradScaler skips optimizer.step: params, moments,
 * momentum and master stay, and t = ctx->step - ctx->skipped counts only
 * the steps taken), and loss_scale writes S, the backward's seed.
 *
 * dtmk_grad_norm sums squares in f64 over fixed-size chunks added in
 * order, so the norm (and every clipped update) is the same whatever the
 * thread count.  A node with more grads than DTMK_MAX_IN can be emitted as
 * dtmk_sumsq calls per tensor, summed in operand order, then sqrt.
 */
#ifndef DTMK_OPTIM_H
#define DTMK_OPTIM_H

#include "codegen/cpu/dtmk.h"

/* ir/optim_ops.h's fx layout, repeated here because kernels do not see the
 * compiler's headers. */
enum {
	DTMK_OPT_BETA1 = 0, DTMK_OPT_MOMENTUM = 0, DTMK_OPT_BETA2 = 1, DTMK_OPT_EPS = 2,
	DTMK_OPT_WD = 3, DTMK_OPT_CLIP = 4,
};

#define DTMK_OPT_GRAIN 16384
#define DTMK_OPT_MAX_CHUNKS 64

static inline void dtmk_opt_par(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn,
				void *arg)
{
	if (n <= 0)
		return;
	if (ctx && ctx->parallel_for && n > grain)
		ctx->parallel_for(ctx, n, grain, fn, arg);
	else
		fn(arg, 0, n);
}

/* ---- loss scaling ---- */

/* 1/S as GradScaler computes it (in f64, then f32); 1 when off. */
static inline float dtmk_inv_scale(const DtmCtx *ctx)
{
	return ctx && ctx->loss_scale > 0 ? (float)(1.0 / (double)ctx->loss_scale) : 1.0f;
}

/* The step this norm belongs to is skipped: loss scaling is on and some
 * gradient somewhere overflowed (the norm is the global one). */
static inline int dtmk_opt_skip(const DtmCtx *ctx, float norm)
{
	return ctx && ctx->loss_scale > 0 && !isfinite(norm);
}

/* loss_scale -> f32[]: S, the backward's seed (1 when off). */
static inline void dtmk_loss_scale(const DtmCtx *ctx, const DtmkArgs *a)
{
	float s = ctx && ctx->loss_scale > 0 ? ctx->loss_scale : 1.0f;
	for (int64_t i = 0; i < a->out.numel; i++)
		dtmk_store(&a->out, i, s);
}

/* ---- global gradient norm ---- */

struct dtmk_sumsq_job {
	const DtmkTensor *t;
	int64_t chunk;
	double part[DTMK_OPT_MAX_CHUNKS];
};

static void dtmk_sumsq_range(void *argp, int64_t lo, int64_t hi)
{
	struct dtmk_sumsq_job *j = argp;
	for (int64_t c = lo; c < hi; c++) {
		int64_t a = c * j->chunk, b = a + j->chunk;
		if (b > j->t->numel)
			b = j->t->numel;
		/* four accumulators break the add chain; their order is fixed */
		double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
		int64_t i = a;
		if (j->t->dtype == DTM_F32) {
			const float *x = j->t->p;
			for (; i + 4 <= b; i += 4) {
				s0 += (double)x[i] * x[i];
				s1 += (double)x[i + 1] * x[i + 1];
				s2 += (double)x[i + 2] * x[i + 2];
				s3 += (double)x[i + 3] * x[i + 3];
			}
		}
		for (; i < b; i++) {
			double v = dtmk_load(j->t, i);
			s0 += v * v;
		}
		j->part[c] = (s0 + s1) + (s2 + s3);
	}
}

/* The sum of squares of t's elements in f64; the chunking depends only on
 * t's size, so the result does not depend on the thread count. */
static double dtmk_sumsq(const DtmCtx *ctx, const DtmkTensor *t)
{
	struct dtmk_sumsq_job j;
	int64_t n = t->numel;
	if (n <= 0)
		return 0;
	int64_t nch = (n + DTMK_OPT_GRAIN - 1) / DTMK_OPT_GRAIN;
	if (nch > DTMK_OPT_MAX_CHUNKS)
		nch = DTMK_OPT_MAX_CHUNKS;
	j.t = t;
	j.chunk = (n + nch - 1) / nch;
	nch = (n + j.chunk - 1) / j.chunk;
	dtmk_opt_par(ctx, nch, 1, dtmk_sumsq_range, &j);
	double s = 0;
	for (int64_t c = 0; c < nch; c++)
		s += j.part[c];
	return s;
}

/* grad_norm(g1, ..., gn) -> f32[]. */
static void dtmk_grad_norm(const DtmCtx *ctx, const DtmkArgs *a)
{
	double s = 0;
	for (int i = 0; i < a->nin; i++)
		s += dtmk_sumsq(ctx, &a->in[i]);
	dtmk_store(&a->out, 0, (float)(sqrt(s) * dtmk_inv_scale(ctx)));
}

/* clip_grad_norm_'s factor as torch computes it in f32:
 * clamp(clip * reciprocal(norm + 1e-6), max = 1); 1 when clipping is off. */
static inline float dtmk_clip_coef(double clip, float norm)
{
	if (!(clip > 0))
		return 1.0f;
	float c = (1.0f / (norm + 1e-6f)) * (float)clip;
	return c < 1.0f ? c : 1.0f;
}

/* In-place ops whose output buffer is separate get a copy of p. */
static inline void dtmk_opt_copy_out(const DtmkArgs *a)
{
	if (!a->out.p || a->out.p == a->in[0].p)
		return;
	size_t es = a->in[0].dtype == DTM_BF16 || a->in[0].dtype == DTM_F16 ? 2 : 4;
	memcpy(a->out.p, a->in[0].p, (size_t)a->in[0].numel * es);
}

/* ---- AdamW ---- */

struct dtmk_adamw_job {
	const DtmkTensor *p, *g, *m, *v, *w; /* w: the master copy, or p */
	float inv, coef, decay, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
	int fast; /* 1: p, g, m, v all f32, no master; 2: bf16 p, f32 master, m, v */
};

/* The master-weight step (precision bf16): the same arithmetic as the
 * general loop below, on plain pointers; g is bf16 (gbf) or f32. */
static inline __attribute__((always_inline)) void
dtmk_adamw_master(const struct dtmk_adamw_job *j, int64_t lo, int64_t hi, int gbf)
{
	float *restrict w = j->w->p, *restrict m = j->m->p, *restrict v = j->v->p;
	uint16_t *restrict p = j->p->p;
	const float *restrict g32 = j->g->p;
	const uint16_t *restrict g16 = j->g->p;
	const float decay = j->decay, b1 = j->b1, omb1 = j->omb1;
	const float b2 = j->b2, omb2 = j->omb2, bc2 = j->bc2_sqrt, eps = j->eps;
	const float ns = j->neg_step, inv = j->inv, coef = j->coef;
	for (int64_t i = lo; i < hi; i++) {
		float gi = gbf ? dtmk_bf16_to_f32(g16[i]) : g32[i];
		gi = gi * inv;
		gi = gi * coef;
		float wi = w[i] * decay;
		float mi = m[i] * b1 + omb1 * gi;
		float vi = v[i] * b2 + omb2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		wi = wi + ns * (mi / (sqrtf(vi) / bc2 + eps));
		w[i] = wi;
		p[i] = dtmk_f32_to_bf16(wi);
	}
}

static void dtmk_adamw_range(void *argp, int64_t lo, int64_t hi)
{
	const struct dtmk_adamw_job *j = argp;
	if (j->fast == 2) {
		if (j->g->dtype == DTM_BF16)
			dtmk_adamw_master(j, lo, hi, 1);
		else
			dtmk_adamw_master(j, lo, hi, 0);
		return;
	}
	if (j->fast) {
		/* the scalars in locals and restrict pointers: stores through p,
		 * m, v could otherwise alias *j, and the loop would not vectorise */
		float *restrict p = j->p->p, *restrict m = j->m->p, *restrict v = j->v->p;
		const float *restrict g = j->g->p;
		const float coef = j->coef, decay = j->decay, b1 = j->b1, omb1 = j->omb1;
		const float b2 = j->b2, omb2 = j->omb2, bc2 = j->bc2_sqrt, eps = j->eps;
		const float ns = j->neg_step, inv = j->inv;
		if (coef == 1.0f && inv == 1.0f) {
			for (int64_t i = lo; i < hi; i++) {
				float gi = g[i], w = p[i] * decay;
				float mi = m[i] * b1 + omb1 * gi;
				float vi = v[i] * b2 + omb2 * gi * gi;
				m[i] = mi;
				v[i] = vi;
				p[i] = w + ns * (mi / (sqrtf(vi) / bc2 + eps));
			}
			return;
		}
		for (int64_t i = lo; i < hi; i++) {
			float gi = g[i] * inv * coef, w = p[i] * decay;
			float mi = m[i] * b1 + omb1 * gi;
			float vi = v[i] * b2 + omb2 * gi * gi;
			m[i] = mi;
			v[i] = vi;
			p[i] = w + ns * (mi / (sqrtf(vi) / bc2 + eps));
		}
		return;
	}
	for (int64_t i = lo; i < hi; i++) {
		float gi = dtmk_load(j->g, i);
		if (j->inv != 1.0f)
			gi *= j->inv;
		if (j->coef != 1.0f)
			gi *= j->coef;
		float w = dtmk_load(j->w, i) * j->decay;
		float mi = dtmk_load(j->m, i) * j->b1 + j->omb1 * gi;
		float vi = dtmk_load(j->v, i) * j->b2 + j->omb2 * gi * gi;
		dtmk_store(j->m, i, mi);
		dtmk_store(j->v, i, vi);
		w = w + j->neg_step * (mi / (sqrtf(vi) / j->bc2_sqrt + j->eps));
		dtmk_store(j->w, i, w);
		if (j->w != j->p)
			dtmk_store(j->p, i, w);
	}
}

/* adamw_step(p, g, m, v[, master], norm) -> p. */
static void dtmk_adamw_step(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *in = a->in;
	int master = a->flag != 0;
	const DtmkTensor *norm = &in[4 + master];
	if (dtmk_opt_skip(ctx, dtmk_load(norm, 0))) {
		dtmk_opt_copy_out(a);
		return;
	}
	double lr = ctx->lr, t = (double)(ctx->step - ctx->skipped);
	double b1 = a->fx[DTMK_OPT_BETA1], b2 = a->fx[DTMK_OPT_BETA2];
	struct dtmk_adamw_job j = {
		.p = &in[0], .g = &in[1], .m = &in[2], .v = &in[3],
		.w = master ? &in[4] : &in[0],
		.inv = dtmk_inv_scale(ctx),
		.coef = dtmk_clip_coef(a->fx[DTMK_OPT_CLIP], dtmk_load(norm, 0)),
		.decay = (float)(1.0 - lr * a->fx[DTMK_OPT_WD]),
		.b1 = (float)b1, .omb1 = (float)(1.0 - b1),
		.b2 = (float)b2, .omb2 = (float)(1.0 - b2),
		.bc2_sqrt = (float)sqrt(1.0 - pow(b2, t)),
		.eps = (float)a->fx[DTMK_OPT_EPS],
		.neg_step = (float)-(lr / (1.0 - pow(b1, t))),
	};
	j.fast = !master && in[0].dtype == DTM_F32 && in[1].dtype == DTM_F32 &&
		 in[2].dtype == DTM_F32 && in[3].dtype == DTM_F32;
	if (master && in[0].dtype == DTM_BF16 && in[4].dtype == DTM_F32 &&
	    (in[1].dtype == DTM_BF16 || in[1].dtype == DTM_F32) && in[2].dtype == DTM_F32 &&
	    in[3].dtype == DTM_F32)
		j.fast = 2;
	dtmk_opt_par(ctx, in[0].numel, DTMK_OPT_GRAIN, dtmk_adamw_range, &j);
	dtmk_opt_copy_out(a);
}

/* ---- SGD ---- */

struct dtmk_sgd_job {
	const DtmkTensor *p, *g, *mom, *w; /* mom may be NULL; w: master or p */
	float inv, coef, wd, mu, neg_lr;
	int first, nesterov, fast;
};

/* The f32 loop without a master (j->fast, momentum f32 or none), one
 * copy per (weight decay, momentum) so each vectorises: the same
 * arithmetic as the general loop below (a scale by 1 is exact, so the
 * two scales need no test; the rest are selects). */
static inline __attribute__((always_inline)) void
dtmk_sgd_f32(const struct dtmk_sgd_job *j, int64_t lo, int64_t hi, int has_wd, int has_mom)
{
	const float *restrict g = j->g->p;
	float *restrict p = j->p->p;
	float *restrict m = has_mom ? (float *)j->mom->p : NULL;
	const float inv = j->inv, coef = j->coef, wd = j->wd, mu = j->mu, nlr = j->neg_lr;
	const int first = j->first, nest = j->nesterov;
	for (int64_t i = lo; i < hi; i++) {
		float gi = g[i] * inv * coef, w = p[i];
		if (has_wd)
			gi = gi + wd * w;
		if (has_mom) {
			float b = first ? gi : m[i] * mu + gi;
			m[i] = b;
			gi = nest ? gi + mu * b : b;
		}
		p[i] = w + nlr * gi;
	}
}

static void dtmk_sgd_range(void *argp, int64_t lo, int64_t hi)
{
	const struct dtmk_sgd_job *j = argp;
	if (j->fast && (!j->mom || j->mom->dtype == DTM_F32)) {
		if (j->wd != 0.0f)
			j->mom ? dtmk_sgd_f32(j, lo, hi, 1, 1) : dtmk_sgd_f32(j, lo, hi, 1, 0);
		else
			j->mom ? dtmk_sgd_f32(j, lo, hi, 0, 1) : dtmk_sgd_f32(j, lo, hi, 0, 0);
		return;
	}
	for (int64_t i = lo; i < hi; i++) {
		float gi, w;
		if (j->fast) {
			gi = ((const float *)j->g->p)[i];
			w = ((const float *)j->p->p)[i];
		} else {
			gi = dtmk_load(j->g, i);
			w = dtmk_load(j->w, i);
		}
		if (j->inv != 1.0f)
			gi *= j->inv;
		if (j->coef != 1.0f)
			gi *= j->coef;
		if (j->wd != 0.0f)
			gi = gi + j->wd * w;
		if (j->mom) {
			/* torch's buffer starts as a copy of the first gradient */
			float b = j->first ? gi : dtmk_load(j->mom, i) * j->mu + gi;
			dtmk_store(j->mom, i, b);
			gi = j->nesterov ? gi + j->mu * b : b;
		}
		w = w + j->neg_lr * gi;
		if (j->fast) {
			((float *)j->p->p)[i] = w;
			continue;
		}
		dtmk_store(j->w, i, w);
		if (j->w != j->p)
			dtmk_store(j->p, i, w);
	}
}

/* sgd_step(p, g[, mom][, master], norm) -> p. */
static void dtmk_sgd_step(const DtmCtx *ctx, const DtmkArgs *a)
{
	const DtmkTensor *in = a->in;
	int has_mom = a->fx[DTMK_OPT_MOMENTUM] != 0, master = a->flag != 0;
	const DtmkTensor *norm = &in[2 + has_mom + master];
	if (dtmk_opt_skip(ctx, dtmk_load(norm, 0))) {
		dtmk_opt_copy_out(a);
		return;
	}
	struct dtmk_sgd_job j = {
		.p = &in[0], .g = &in[1], .mom = has_mom ? &in[2] : NULL,
		.w = master ? &in[2 + has_mom] : &in[0],
		.inv = dtmk_inv_scale(ctx),
		.coef = dtmk_clip_coef(a->fx[DTMK_OPT_CLIP], dtmk_load(norm, 0)),
		.wd = (float)a->fx[DTMK_OPT_WD],
		.mu = (float)a->fx[DTMK_OPT_MOMENTUM],
		.neg_lr = -ctx->lr,
		.first = ctx->step - ctx->skipped <= 1,
		.nesterov = a->nints > 0 && a->ints[0] != 0,
	};
	j.fast = !master && in[0].dtype == DTM_F32 && in[1].dtype == DTM_F32;
	dtmk_opt_par(ctx, in[0].numel, DTMK_OPT_GRAIN, dtmk_sgd_range, &j);
	dtmk_opt_copy_out(a);
}

/* ---- assign ---- */

/* assign(dst, src) -> dst (in place): ZeRO-1/2 write the all_gathered
 * updated shards back into the replicated param (passes/zero.c). */
static inline void dtmk_assign(const DtmCtx *ctx, const DtmkArgs *a)
{
	(void)ctx;
	size_t es = a->in[0].dtype == DTM_BF16 || a->in[0].dtype == DTM_F16 ? 2 : 4;
	if (a->in[0].p != a->in[1].p)
		memmove(a->in[0].p, a->in[1].p, (size_t)a->in[0].numel * es);
	dtmk_opt_copy_out(a);
}

#endif
