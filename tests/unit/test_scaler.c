/* test_scaler.c - loss scaling: the runtime's scaler (runtime/scaler.c,
 * torch.amp.GradScaler's update rule) and the CPU optimizer kernels'
 * side of it (codegen/cpu/dtmk_optim.h): gradients times S are unscaled
 * to the unscaled update, a non-finite norm changes nothing, and t counts
 * only the steps taken. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "codegen/cpu/dtmk_optim.h"
#include "runtime/rt.h"

static DtmTrainCfg cfg(DtmLossScale mode, float init, int64_t interval)
{
	DtmTrainCfg c;
	memset(&c, 0, sizeof c);
	c.loss_scale = mode;
	c.init_scale = init;
	c.growth_factor = 2.0f;
	c.backoff_factor = 0.5f;
	c.growth_interval = interval;
	return c;
}

/* GradScaler's sequence: skip -> x0.5 and reset; interval good -> x2. */
static void test_dynamic_rule(void)
{
	DtmTrainCfg c = cfg(DTM_LOSS_SCALE_DYNAMIC, 65536.0f, 3);
	RtScaler s;
	rt_scaler_init(&s, &c);
	CHECK(s.on && s.scale == 65536.0f && s.good == 0 && s.skipped == 0);
	/* norms: inf, nan, ok, ok, ok (grow), ok, inf (back off, reset), ok x3 */
	const double norm[] = {INFINITY, NAN, 1, 1, 1, 1, INFINITY, 1, 1, 1};
	const float want[] = {32768, 16384, 16384, 16384, 32768, 32768, 16384, 16384, 16384, 32768};
	const bool skip[] = {true, true, false, false, false, false, true, false, false, false};
	for (int i = 0; i < 10; i++) {
		CHECK(rt_scaler_update(&s, &c, norm[i]) == skip[i]);
		CHECK_NEAR(s.scale, want[i], 0);
	}
	CHECK_EQ_INT(s.skipped, 3);
	CHECK_EQ_INT(s.good, 0);
	/* a growth that would overflow f32 keeps the scale (torch's isfinite) */
	c = cfg(DTM_LOSS_SCALE_DYNAMIC, 3e38f, 1);
	rt_scaler_init(&s, &c);
	CHECK(!rt_scaler_update(&s, &c, 1.0));
	CHECK(s.scale == 3e38f && s.good == 0);
}

static void test_fixed_and_off(void)
{
	DtmTrainCfg c = cfg(DTM_LOSS_SCALE_FIXED, 1024.0f, 1);
	RtScaler s;
	rt_scaler_init(&s, &c);
	CHECK(rt_scaler_update(&s, &c, INFINITY));
	CHECK(!rt_scaler_update(&s, &c, 2.0));
	CHECK(!rt_scaler_update(&s, &c, 2.0));
	CHECK(s.scale == 1024.0f && s.skipped == 1);
	c = cfg(DTM_LOSS_SCALE_OFF, 1024.0f, 1);
	rt_scaler_init(&s, &c);
	CHECK(!s.on && s.scale == 0.0f);
	CHECK(!rt_scaler_update(&s, &c, INFINITY));
	CHECK_EQ_INT(s.skipped, 0);
}

enum { N = 5 };

static DtmkTensor vec(void *p, DtmDtype dt)
{
	DtmkTensor t;
	memset(&t, 0, sizeof t);
	t.p = p;
	t.dtype = dt;
	t.rank = 1;
	t.shape[0] = N;
	t.numel = N;
	return t;
}

/* out = the global grad norm of g as grad_norm computes it (unscaled by
 * ctx's scale, not finite on an overflow). */
static void grad_norm_of(DtmCtx *ctx, DtmkTensor g, DtmkTensor out)
{
	DtmkArgs gn;
	memset(&gn, 0, sizeof gn);
	gn.nin = 1;
	gn.in[0] = g;
	gn.out = out;
	dtmk_grad_norm(ctx, &gn);
}

/* One adamw_step on an f16 param with its f32 master; g holds the
 * gradient times scale (f16), norm the norm grad_norm would give. */
typedef struct Adam {
	uint16_t p[N], g[N];
	float m[N], v[N], w[N], norm, out_norm;
} Adam;

static void adam_init(Adam *s, double gscale)
{
	for (int i = 0; i < N; i++) {
		s->w[i] = 0.5f - 0.25f * (float)i;
		s->p[i] = f16_from_f32(s->w[i]);
		s->g[i] = f16_from_f32((float)(gscale * (0.125 * (i + 1) - 0.3)));
		s->m[i] = 0.01f * (float)i;
		s->v[i] = 0.001f * (float)(i + 1);
	}
}

static void adam_step(Adam *s, int64_t step, int64_t skipped, float scale)
{
	DtmCtx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.step = step;
	ctx.skipped = skipped;
	ctx.lr = 1e-2f;
	ctx.loss_scale = scale;
	DtmkArgs a;
	memset(&a, 0, sizeof a);
	a.nin = 6;
	a.in[0] = vec(s->p, DTM_F16);
	a.in[1] = vec(s->g, DTM_F16);
	a.in[2] = vec(s->m, DTM_F32);
	a.in[3] = vec(s->v, DTM_F32);
	a.in[4] = vec(s->w, DTM_F32);
	a.in[5] = vec(&s->norm, DTM_F32);
	a.in[5].rank = 0;
	a.in[5].numel = 1;
	a.out = a.in[0];
	a.flag = 1;
	a.fx[DTMK_OPT_BETA1] = 0.9;
	a.fx[DTMK_OPT_BETA2] = 0.999;
	a.fx[DTMK_OPT_EPS] = 1e-8;
	a.fx[DTMK_OPT_WD] = 0.01;
	/* the norm as grad_norm computes it, unscaled */
	grad_norm_of(&ctx, a.in[1], a.in[5]);
	dtmk_adamw_step(&ctx, &a);
}

static void test_kernels(void)
{
	/* gradients times 2^10 (exact in f16), unscaled: the unscaled step,
	 * bit for bit, norm included; at step 7 after 6 skips as at step 1 */
	Adam ref, scaled;
	adam_init(&ref, 1.0);
	adam_init(&scaled, 1024.0);
	adam_step(&ref, 1, 0, 0.0f);
	adam_step(&scaled, 7, 6, 1024.0f);
	CHECK(ref.norm == scaled.norm && ref.norm > 0);
	CHECK(memcmp(ref.p, scaled.p, sizeof ref.p) == 0);
	CHECK(memcmp(ref.w, scaled.w, sizeof ref.w) == 0);
	CHECK(memcmp(ref.m, scaled.m, sizeof ref.m) == 0);
	CHECK(memcmp(ref.v, scaled.v, sizeof ref.v) == 0);
	/* an overflowed gradient: the norm is inf and nothing changes */
	Adam over, before;
	adam_init(&over, 1.0);
	over.g[2] = 0x7c00; /* f16 inf */
	before = over;
	adam_step(&over, 3, 0, 65536.0f);
	CHECK(isinf(over.norm));
	CHECK(memcmp(over.p, before.p, sizeof over.p) == 0);
	CHECK(memcmp(over.w, before.w, sizeof over.w) == 0);
	CHECK(memcmp(over.m, before.m, sizeof over.m) == 0);
	CHECK(memcmp(over.v, before.v, sizeof over.v) == 0);
	/* without loss scaling the same step is not skipped (the run stops on
	 * the NaN loss that follows, as before) */
	adam_step(&over, 3, 0, 0.0f);
	CHECK(memcmp(over.w, before.w, sizeof over.w) != 0);
}

/* sgd_step(p, g, mom, norm) in f32 with momentum 0.9: torch's buffer
 * starts as the first step's gradient, the first step taken. */
static void sgd(float *p, float *mom, const float *g, int64_t step, int64_t skipped, float scale)
{
	DtmCtx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.step = step;
	ctx.skipped = skipped;
	ctx.lr = 0.1f;
	ctx.loss_scale = scale;
	float norm = 0;
	DtmkArgs a;
	memset(&a, 0, sizeof a);
	a.nin = 4;
	a.in[0] = vec(p, DTM_F32);
	a.in[1] = vec((void *)g, DTM_F32);
	a.in[2] = vec(mom, DTM_F32);
	a.in[3] = vec(&norm, DTM_F32);
	a.in[3].rank = 0;
	a.in[3].numel = 1;
	a.out = a.in[0];
	a.fx[DTMK_OPT_MOMENTUM] = 0.9;
	grad_norm_of(&ctx, a.in[1], a.in[3]);
	dtmk_sgd_step(&ctx, &a);
}

static void test_sgd(void)
{
	float p1[N], m1[N], p2[N], m2[N], g[N], gs[N];
	for (int i = 0; i < N; i++) {
		p1[i] = p2[i] = 1.0f - 0.5f * (float)i;
		m1[i] = m2[i] = 7.0f; /* stale: the first step taken ignores it */
		g[i] = 0.25f * (float)(i - 2);
		gs[i] = g[i] * 256.0f;
	}
	sgd(p1, m1, g, 1, 0, 0.0f);
	sgd(p2, m2, gs, 4, 3, 256.0f);
	CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(m1, m2, sizeof m1) == 0);
	gs[1] = NAN;
	memcpy(m1, m2, sizeof m1);
	memcpy(p1, p2, sizeof p1);
	sgd(p2, m2, gs, 5, 3, 256.0f);
	CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(m1, m2, sizeof m1) == 0);
}

int main(void)
{
	test_dynamic_rule();
	test_fixed_and_off();
	test_kernels();
	test_sgd();
	return check_report();
}
