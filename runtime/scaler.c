/* scaler.c - dynamic loss scaling: torch.amp.GradScaler's update rule.
 *
 * The plan scales the backward's seed by DtmCtx.loss_scale and its
 * grad_norm and optimizer kernels unscale the gradients and skip the
 * update when the global gradient norm is not finite (ir/ops.def); what
 * is left is the scale itself, which this file keeps.  After each step,
 * with found_inf = "the step's global gradient norm is not finite" (the
 * same value on every rank: the norm is all-reduced, so every rank
 * skips the same steps and keeps the same scale):
 *   found_inf: scale *= backoff_factor, good = 0, the step is skipped;
 *   otherwise: good += 1, and when good reaches growth_interval,
 *              scale *= growth_factor (kept only if finite), good = 0.
 * This is torch's _amp_update_scale_ in f32 (GradScaler keeps its scale
 * in an f32 tensor).  DTM_LOSS_SCALE_FIXED keeps init_scale: steps are
 * still skipped on overflow, the scale never moves.  The state (scale,
 * good steps in a row, steps skipped) is saved in checkpoints
 * (runtime/save.c), so a resumed run goes on with the same scales.
 */
#include <math.h>

#include "runtime/rt.h"

void rt_scaler_init(RtScaler *s, const DtmTrainCfg *c)
{
	memset(s, 0, sizeof *s);
	s->on = c->loss_scale != DTM_LOSS_SCALE_OFF;
	s->scale = s->on ? c->init_scale : 0.0f;
}

bool rt_scaler_update(RtScaler *s, const DtmTrainCfg *c, double grad_norm)
{
	if (!s->on)
		return false;
	bool found_inf = !isfinite(grad_norm);
	if (found_inf)
		s->skipped++;
	if (c->loss_scale == DTM_LOSS_SCALE_FIXED)
		return found_inf;
	if (found_inf) {
		s->scale *= c->backoff_factor;
		s->good = 0;
		return true;
	}
	if (++s->good >= c->growth_interval) {
		float grown = s->scale * c->growth_factor;
		if (isfinite(grown))
			s->scale = grown;
		s->good = 0;
	}
	return false;
}
