/* eval_optim.c - f64 semantics of the optimizer ops, for the reference
 * interpreter (ir_eval_run calls ir_eval_optim for them).
 *
 * The formulas are torch.optim's (AdamW and SGD, single-tensor path) after
 * torch.nn.utils.clip_grad_norm_, written out in double so that the
 * interpreter can run whole training steps and serve as the oracle for the
 * CPU kernels (codegen/cpu/dtmk_optim.h, which do the same in f32).  The
 * update ops are in place: they write the buffers of their param, state
 * and master operands and copy the param into their own result, so the
 * next ir_eval_run is the next step.
 */
#include "ir/optim_ops.h"
#include "interp/eval_impl.h"

#include <math.h>
#include <string.h>

#include "support/philox.h"

double ir_optim_lr_at(const IrTrain *t, int64_t step)
{
	if (t->lr_schedule != IR_LR_COSINE)
		return t->lr;
	int64_t w = t->warmup, horizon = t->steps;
	if (w > 0 && step <= w)
		return t->lr * (double)step / (double)w;
	if (horizon <= w || step >= horizon)
		return t->min_lr;
	double prog = (double)(step - w) / (double)(horizon - w);
	return t->min_lr + 0.5 * (t->lr - t->min_lr) * (1.0 + cos(3.14159265358979323846 * prog));
}

/* clip_grad_norm_'s factor: 1 unless clipping is on and the norm is over. */
static double clip_coef(double clip, double norm)
{
	if (clip <= 0)
		return 1;
	double c = clip / (norm + IR_OPTIM_CLIP_EPS);
	return c < 1 ? c : 1;
}

/* 1/S under loss scaling, 1 when off. */
static double inv_scale(const IrEval *e)
{
	return e->loss_scale > 0 ? 1 / e->loss_scale : 1;
}

static bool ev_grad_norm(IrEval *e, const IrNode *n)
{
	double s = 0;
	for (int i = 0; i < n->nops; i++) {
		const double *g = e->val[n->ops[i]];
		int64_t N = ir_node_numel(e->m->nodes[n->ops[i]]);
		for (int64_t j = 0; j < N; j++)
			s += g[j] * g[j];
	}
	e->val[n->id][0] = sqrt(s) * inv_scale(e);
	return true;
}

static bool ev_step(IrEval *e, const IrNode *n, Diag *d)
{
	IrOptimOps ix;
	if (!ir_optim_ops(n, &ix))
		return ir_eval_bad(d, n, "operands do not match the attributes");
	if (e->step - e->skipped < 1)
		return ir_eval_bad(d, n, "optimizer steps count from 1");
	const IrNode *pn = e->m->nodes[n->ops[ix.p]];
	const IrAttrOptim *a = ir_attr_optim(n);
	double lr = e->lr_fixed ? e->lr : ir_optim_lr_at(&e->m->train, e->step);
	double t = (double)(e->step - e->skipped), wd = a->weight_decay;
	double norm = e->val[n->ops[ix.norm]][0];
	double coef = clip_coef(a->clip, norm) * inv_scale(e);
	double *p = e->val[n->ops[ix.p]];
	int64_t N = ir_node_numel(pn);
	if (e->loss_scale > 0 && !isfinite(norm)) { /* skipped: nothing changes */
		memcpy(e->val[n->id], p, (size_t)N * sizeof *p);
		return true;
	}
	const double *g = e->val[n->ops[ix.g]];
	/* with a master copy the math runs on it and p is its rounding */
	double *w = ix.master >= 0 ? e->val[n->ops[ix.master]] : p;

	if (n->op == IR_OP_ADAMW_STEP) {
		double b1 = a->beta1, b2 = a->beta2, eps = a->eps;
		double *m = e->val[n->ops[ix.m]], *v = e->val[n->ops[ix.v]];
		double step_size = lr / (1 - pow(b1, t)), bc2_sqrt = sqrt(1 - pow(b2, t));
		for (int64_t i = 0; i < N; i++) {
			double gi = g[i] * coef;
			w[i] *= 1 - lr * wd;
			m[i] = b1 * m[i] + (1 - b1) * gi;
			v[i] = b2 * v[i] + (1 - b2) * gi * gi;
			w[i] -= step_size * m[i] / (sqrt(v[i]) / bc2_sqrt + eps);
		}
	} else {
		double mu = a->momentum;
		bool nesterov = a->nesterov;
		double *mom = ix.mom >= 0 ? e->val[n->ops[ix.mom]] : NULL;
		for (int64_t i = 0; i < N; i++) {
			double gi = g[i] * coef + wd * w[i];
			if (mom) {
				/* torch starts the buffer as a copy of the first step's
				 * gradient rather than decaying a zero buffer */
				mom[i] = t == 1 ? gi : mu * mom[i] + gi;
				gi = nesterov ? gi + mu * mom[i] : mom[i];
			}
			w[i] -= lr * gi;
		}
	}
	if (w != p)
		for (int64_t i = 0; i < N; i++)
			p[i] = ir_eval_round(pn->dtype, w[i]);
	memcpy(e->val[n->id], p, (size_t)N * sizeof *p);
	return true;
}

bool ir_eval_optim(IrEval *e, const IrNode *n, Diag *d)
{
	switch (n->op) {
	case IR_OP_STATE:
		return true; /* a leaf: its buffer persists across runs */
	case IR_OP_LOSS_SCALE:
		e->val[n->id][0] = e->loss_scale > 0 ? e->loss_scale : 1;
		return true;
	case IR_OP_GRAD_NORM:
		return ev_grad_norm(e, n);
	case IR_OP_ADAMW_STEP:
	case IR_OP_SGD_STEP:
		return ev_step(e, n, d);
	case IR_OP_ASSIGN: {
		/* in place: the destination's buffer, then this node's copy */
		size_t bytes = sizeof(double) * (size_t)ir_node_numel(n);
		memcpy(e->val[n->ops[0]], e->val[n->ops[1]], bytes);
		memcpy(e->val[n->id], e->val[n->ops[1]], bytes);
		return true;
	}
	default:
		return ir_eval_bad(d, n, "not an optimizer op");
	}
}
