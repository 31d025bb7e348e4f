/* optim.c - the optimizer pass: turns gradients into parameter updates.
 *
 * Consumes a module after autodiff: params (role param) and, for each
 * param P, a gradient node (role grad, named "grad.P") linked to P
 * (IR_LINK_GRAD) of P's shape.  Produces, appended after everything else:
 *   - grad_norm(every grad) named "grad_norm", linked IR_LINK_GRAD_NORM:
 *     the global L2 norm that clipping uses and the runtime logs (computed
 *     even when clipping is off, for the log);
 *   - per param P, its optimizer state as `state` leaves (role opt_state,
 *     linked to P with the state's kind, IR_LINK_OPT_*): opt.m.P and
 *     opt.v.P (AdamW moments, zeros), opt.mom.P (SGD momentum,
 *     zeros; only when momentum != 0), and opt.master.P when P's dtype is
 *     not the policy's master_dtype (bf16 or f16 params under the default
 *     master_dtype f32: an f32 copy with P's init, which the update runs
 *     on; master_dtype = the params' dtype: none, the update runs on P
 *     with f32 moments).  Moments and masters are f32 whatever P's dtype;
 *     the gradient is in reduce_dtype (autodiff.c), read as it is;
 *   - per param P, adamw_step or sgd_step updating P (and its state) in
 *     place, with m->train's hyperparameters in its attrs.
 * The learning rate is not baked in: the runtime applies the schedule and
 * hands each step's value to the kernels (DtmCtx.lr), so one plan serves
 * every step and --lr overrides it without recompiling.
 *
 * State takes P's placement and pipeline stage (the ZeRO pass re-splits
 * it later).  A param without a gradient is frozen: it gets no update.  A
 * module without gradients (autodiff has not run) is left as it is.
 */
#include "passes/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/optim_ops.h"

typedef struct Optim {
	IrModule *m;
	Diag *d;
	bool adamw;
} Optim;

/* Hyperparameters torch.optim would refuse were refused where they were
 * given (the train section, --train or IR text: ir/validate.c); the same
 * check again here covers a module built in memory, before any node. */
static bool check_train(Optim *o)
{
	const IrTrain *t = &o->m->train;
	o->adamw = t->optimizer != IR_OPTIMIZER_SGD; /* none given: adamw */
	return ir_train_check(t, o->d);
}

static bool typed(Optim *o, IrNode *n)
{
	return ir_infer(o->m, n, o->d);
}

/* A `state` leaf of kind k of P, named opt.WORD.P, shaped like P. */
static IrNode *new_state(Optim *o, const IrNode *p, IrLink k)
{
	bool master = k == IR_LINK_OPT_MASTER;
	IrNode *n = ir_node_new(o->m, IR_OP_STATE, NULL, 0, p->loc);
	if (!n)
		return NULL;
	n->name = arena_printf(o->m->arena, "opt.%s.%s", ir_link_state_word(k), p->name);
	if (!n->name || !ir_set_link(o->m, n, k, p->id))
		return NULL;
	n->dtype = IR_F32;
	n->rank = p->rank;
	memcpy(n->shape, p->shape, sizeof n->shape);
	n->role = IR_ROLE_OPT_STATE;
	n->place = p->place;
	ir_set_stage(o->m, n, ir_stage(o->m, p));
	ir_set_block(o->m, n, ir_block(o->m, p));
	if (master) /* keyed by P's name at init (ir/optim_ops.h): P's value unrounded */
		n->attr = p->attr;
	else
		ir_attr_init_mut(o->m, n)->kind = IR_INIT_ZEROS;
	return typed(o, n) ? n : NULL;
}

/* The update of param p from gradient g. */
static bool add_update(Optim *o, const IrNode *p, const IrNode *g, int norm)
{
	const IrTrain *t = &o->m->train;
	int ops[6], k = 0;
	ops[k++] = p->id;
	ops[k++] = g->id;
	/* master_dtype is f32 or the params' dtype (validate.c) */
	bool master = p->dtype != t->master_dtype && t->master_dtype == IR_F32;
	if (o->adamw) {
		IrNode *mm = new_state(o, p, IR_LINK_OPT_M);
		IrNode *vv = mm ? new_state(o, p, IR_LINK_OPT_V) : NULL;
		if (!vv)
			return false;
		ops[k++] = mm->id;
		ops[k++] = vv->id;
	} else if (t->momentum != 0) {
		IrNode *mom = new_state(o, p, IR_LINK_OPT_MOM);
		if (!mom)
			return false;
		ops[k++] = mom->id;
	}
	if (master) {
		IrNode *w = new_state(o, p, IR_LINK_OPT_MASTER);
		if (!w)
			return false;
		ops[k++] = w->id;
	}
	ops[k++] = norm;
	IrNode *n = ir_node_new(o->m, o->adamw ? IR_OP_ADAMW_STEP : IR_OP_SGD_STEP, ops, k,
	                        p->loc);
	if (!n)
		return false;
	IrAttrOptim *a = ir_attr_optim_mut(o->m, n);
	if (o->adamw) {
		a->beta1 = t->beta1;
		a->beta2 = t->beta2;
		a->eps = t->eps;
	} else {
		a->momentum = t->momentum;
		a->nesterov = t->nesterov;
	}
	a->weight_decay = t->weight_decay;
	a->clip = t->clip;
	a->master = master;
	n->place = p->place;
	ir_set_stage(o->m, n, ir_stage(o->m, p));
	ir_set_block(o->m, n, ir_block(o->m, p));
	return typed(o, n);
}

/* The gradient of each param, by their links; -1 for none.  Returns
 * false on a gradient that does not fit its param. */
static bool match_grads(Optim *o, int *grad_of, int *ngrads)
{
	IrModule *m = o->m;
	int n0 = m->nnodes;
	*ngrads = 0;
	for (int i = 0; i < n0; i++)
		grad_of[i] = -1;
	bool ok = true;
	for (int i = 0; i < n0 && ok; i++) {
		const IrNode *g = m->nodes[i];
		int j = ir_link_param(m, g);
		if (g->role != IR_ROLE_GRAD || ir_link(m, g) != IR_LINK_GRAD || j < 0)
			continue;
		const IrNode *p = m->nodes[j];
		const char *pname = p->name ? p->name : "?";
		if (grad_of[j] >= 0) {
			diag_error(o->d, g->loc, "param '%s' has two gradients (%%%d and %%%d)", pname,
			           grad_of[j], i);
			ok = false;
		} else if (p->rank != g->rank ||
		           memcmp(p->shape, g->shape, (size_t)p->rank * sizeof p->shape[0]) != 0) {
			diag_error(o->d, g->loc, "gradient %%%d of param '%s' (%%%d) has another shape",
			           i, pname, j);
			ok = false;
		} else {
			grad_of[j] = i;
			(*ngrads)++;
		}
	}
	return ok;
}

bool pass_optim(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	Optim o = {m, d, true};
	int n0 = m->nnodes, ngrads = 0;
	for (int i = 0; i < n0; i++)
		if (m->nodes[i]->op == IR_OP_ADAMW_STEP || m->nodes[i]->op == IR_OP_SGD_STEP)
			return true; /* already has its updates (IR text after this pass) */
	int *grad_of = malloc((size_t)(n0 ? n0 : 1) * sizeof *grad_of);
	int *gids = malloc((size_t)(n0 ? n0 : 1) * sizeof *gids);
	bool ok = grad_of && gids;
	if (!ok)
		diag_error(d, (SrcLoc){0}, "optim: out of memory");
	ok = ok && match_grads(&o, grad_of, &ngrads);
	if (!ok || ngrads == 0)
		goto done;
	SrcLoc loc = m->loss >= 0 ? m->nodes[m->loss]->loc : (SrcLoc){0};
	if (!(ok = check_train(&o)))
		goto done;

	int k = 0;
	for (int j = 0; j < n0; j++)
		if (grad_of[j] >= 0)
			gids[k++] = grad_of[j];
	IrNode *norm = ir_node_new(m, IR_OP_GRAD_NORM, gids, k, loc);
	ok = norm != NULL;
	if (ok) {
		norm->name = "grad_norm";
		ok = ir_set_link(m, norm, IR_LINK_GRAD_NORM, -1);
	}
	if (ok) {
		Placement rep;
		placement_replicated(&rep, 0);
		ok = ir_place_set(m, norm, &rep) && typed(&o, norm);
	}
	for (int j = 0; ok && j < n0; j++)
		if (grad_of[j] >= 0)
			ok = add_update(&o, m->nodes[j], m->nodes[grad_of[j]], norm->id);
	if (!ok && d->nerr == 0)
		diag_error(d, (SrcLoc){0}, "optim: out of memory or too many nodes");
done:
	free(grad_of);
	free(gids);
	return ok;
}
