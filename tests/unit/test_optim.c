/* test_optim.c - the optimizer and mixed-precision passes, the optimizer
 * ops' f64 semantics (interp/eval_optim.c) and their CPU kernels
 * (codegen/cpu/dtmk_optim.h).
 *
 * Each optimizer case builds a module of three params with hand-set
 * gradients (input leaves named grad.P, role grad, linked to P, standing
 * in for autodiff), runs the optim pass, then takes three steps with the
 * interpreter and three with the kernels and compares both with the
 * PyTorch formulas written out below in double (torch.optim.AdamW and SGD
 * after clip_grad_norm_).  The interpreter must agree to rounding; the f32
 * kernels to f32 accuracy.  The last tests run precision -> autodiff ->
 * optim on a small regression model. */
#include "check.h"
#include "codegen/emit_common.h"
#include "testlib_attr.h"
#include "codegen/cpu/dtmk_optim.h"
#include "frontend/lower.h"
#include "interp/eval.h"
#include "ir/ir.h"
#include "ir/optim_ops.h"
#include "passes/optim.h"
#include "passes/precision.h"
#include "passes/passes.h"

#include <stdlib.h>

static Arena arena;
static Diag diag;

/* Expected errors go to /dev/null. */
static void quiet(bool on)
{
	static FILE *sink;
	if (on) {
		sink = fopen("/dev/null", "w");
		diag.out = sink ? sink : stderr;
	} else {
		diag.out = stderr;
		if (sink)
			fclose(sink);
		sink = NULL;
	}
}

#define NP 3
#define MAXN 8
static const char *const pnames[NP] = {"w", "b", "u"};
static const int prank[NP] = {2, 1, 1};
static const int64_t pshape[NP][2] = {{2, 3}, {3, 0}, {4, 0}};
static const int pnumel[NP] = {6, 3, 4};

typedef struct Case {
	const char *label;
	const char *opt; /* "adamw" | "sgd" */
	double beta1, beta2, eps, wd, clip, momentum;
	bool nesterov;
	IrDtype dtype;   /* the params' (and grads') dtype */
	bool clip_hits;  /* the case expects clipping to scale the grads */
} Case;

/* ---- the module ---- */

typedef struct Mod {
	IrModule *m;
	int param[NP], grad[NP], step[NP], norm;
	int state_m[NP], state_v[NP], mom[NP], master[NP];
} Mod;

static IrModule *new_module(void)
{
	arena_free(&arena);
	arena_init(&arena);
	IrModule *m = ir_module_new(&arena, "t");
	ir_train_defaults(&m->train);
	return m;
}

static int find(const IrModule *m, const char *name)
{
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->name && strcmp(m->nodes[i]->name, name) == 0)
			return i;
	return -1;
}

static int leaf(IrModule *m, IrOp op, IrRole role, const char *name, IrDtype t, int k)
{
	IrNode *n = ir_node_new(m, op, NULL, 0, (SrcLoc){0});
	n->dtype = t;
	n->rank = prank[k];
	for (int i = 0; i < prank[k]; i++)
		n->shape[i] = pshape[k][i];
	n->role = role;
	n->name = name;
	if (op == IR_OP_PARAM)
		*ir_attr_init_mut(m, n) = (IrAttrInit){.kind = IR_INIT_NORMAL, .std = 0.5};
	CHECK(ir_infer(m, n, &diag));
	return n->id;
}

static void build(Mod *md, const Case *c)
{
	memset(md, -1, sizeof *md);
	IrModule *m = md->m = new_module();
	IrTrain *t = &m->train;
	t->optimizer = strcmp(c->opt, "sgd") == 0 ? IR_OPTIMIZER_SGD : IR_OPTIMIZER_ADAMW;
	t->lr = 0.01;
	t->beta1 = c->beta1;
	t->beta2 = c->beta2;
	t->eps = c->eps;
	t->weight_decay = c->wd;
	t->clip = c->clip;
	t->momentum = c->momentum;
	t->nesterov = c->nesterov;
	for (int k = 0; k < NP; k++)
		md->param[k] = leaf(m, IR_OP_PARAM, IR_ROLE_PARAM, pnames[k], c->dtype, k);
	for (int k = 0; k < NP; k++)
		md->grad[k] = leaf(m, IR_OP_INPUT, IR_ROLE_GRAD,
		                   arena_printf(&arena, "grad.%s", pnames[k]), c->dtype, k);
	for (int k = 0; k < NP; k++)
		CHECK(ir_set_link(m, m->nodes[md->grad[k]], IR_LINK_GRAD, md->param[k]));
	CHECK(pass_optim(m, &diag, NULL));
	CHECK(ir_verify(m, &diag, "optim"));
	md->norm = find(m, "grad_norm");
	for (int k = 0; k < NP; k++) {
		char buf[64];
		snprintf(buf, sizeof buf, "opt.m.%s", pnames[k]);
		md->state_m[k] = find(m, buf);
		snprintf(buf, sizeof buf, "opt.v.%s", pnames[k]);
		md->state_v[k] = find(m, buf);
		snprintf(buf, sizeof buf, "opt.mom.%s", pnames[k]);
		md->mom[k] = find(m, buf);
		snprintf(buf, sizeof buf, "opt.master.%s", pnames[k]);
		md->master[k] = find(m, buf);
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if ((ir_op_flags(n->op) & OPF_INPLACE) && n->ops[0] == md->param[k])
				md->step[k] = i;
		}
	}
}

/* Names, roles, dtypes and operands the pass must produce. */
static void check_structure(const Mod *md, const Case *c)
{
	const IrModule *m = md->m;
	bool adamw = strcmp(c->opt, "adamw") == 0, master = c->dtype != IR_F32;
	CHECK(md->norm >= 0);
	if (md->norm < 0)
		return;
	const IrNode *norm = m->nodes[md->norm];
	CHECK(norm->op == IR_OP_GRAD_NORM && norm->nops == NP && norm->dtype == IR_F32 &&
	      norm->rank == 0);
	CHECK(ir_link(m, norm) == IR_LINK_GRAD_NORM && ir_link_param(m, norm) == -1);
	static const IrLink kinds[4] = {IR_LINK_OPT_M, IR_LINK_OPT_V, IR_LINK_OPT_MOM,
	                                IR_LINK_OPT_MASTER};
	for (int k = 0; k < NP; k++) {
		int states[4] = {md->state_m[k], md->state_v[k], md->mom[k], md->master[k]};
		bool want[4] = {adamw, adamw, !adamw && c->momentum != 0, master};
		for (int s = 0; s < 4; s++) {
			CHECK((states[s] >= 0) == want[s]);
			if (states[s] < 0)
				continue;
			const IrNode *n = m->nodes[states[s]];
			CHECK(n->op == IR_OP_STATE && n->role == IR_ROLE_OPT_STATE);
			CHECK(ir_link(m, n) == kinds[s] && ir_link_param(m, n) == md->param[k]);
			CHECK(n->dtype == IR_F32 && n->rank == prank[k]);
			CHECK(ir_attr_init(n)->kind == (s == 3 ? IR_INIT_NORMAL : IR_INIT_ZEROS));
		}
		CHECK(md->step[k] >= 0);
		if (md->step[k] < 0)
			continue;
		const IrNode *st = m->nodes[md->step[k]];
		CHECK(st->op == (adamw ? IR_OP_ADAMW_STEP : IR_OP_SGD_STEP));
		CHECK(st->dtype == c->dtype && st->role == IR_ROLE_ACT);
		CHECK(st->ops[1] == md->grad[k] && st->ops[st->nops - 1] == md->norm);
		CHECK(ir_attr_optim(st)->master == master);
		CHECK(ir_attr_optim(st)->weight_decay == c->wd && ir_attr_optim(st)->clip == c->clip);
	}
}

/* print -> parse -> print gives the same text, and the parsed module
 * verifies. */
static void check_roundtrip(const IrModule *m)
{
	char *a = NULL, *b = NULL;
	size_t la = 0, lb = 0;
	FILE *f = open_memstream(&a, &la);
	ir_print(f, m);
	fclose(f);
	Arena pa;
	arena_init(&pa);
	SrcFile src = {"t.ir", a, la};
	Diag pd; /* remembers src, which dies with this frame */
	diag_init(&pd, stderr);
	IrModule *p = ir_parse(&pa, &pd, &src);
	CHECK(p != NULL);
	if (p) {
		CHECK(ir_verify(p, &pd, "parse"));
		f = open_memstream(&b, &lb);
		ir_print(f, p);
		fclose(f);
		CHECK(la == lb && memcmp(a, b, la) == 0);
	}
	arena_free(&pa);
	free(a);
	free(b);
}

/* ---- the PyTorch formulas in double ---- */

typedef struct RefState {
	double p[NP][MAXN], w[NP][MAXN], m[NP][MAXN], v[NP][MAXN], mom[NP][MAXN];
} RefState;

/* The gradient of param k at step t: a few bits, so bf16 holds it
 * exactly; large enough that the norm exceeds 1. */
static double grad_value(int k, int i, int t)
{
	return (double)(((i * 7 + k * 5 + t * 3) % 11) - 5) / 8.0;
}

static double ref_norm(int t)
{
	double s = 0;
	for (int k = 0; k < NP; k++)
		for (int i = 0; i < pnumel[k]; i++)
			s += grad_value(k, i, t) * grad_value(k, i, t);
	return sqrt(s);
}

static void ref_step(RefState *r, const Case *c, int t, double lr)
{
	double norm = ref_norm(t), coef = 1;
	if (c->clip > 0 && c->clip / (norm + 1e-6) < 1)
		coef = c->clip / (norm + 1e-6);
	for (int k = 0; k < NP; k++)
		for (int i = 0; i < pnumel[k]; i++) {
			double g = grad_value(k, i, t) * coef, *w = &r->w[k][i];
			if (strcmp(c->opt, "adamw") == 0) {
				/* torch.optim.AdamW, amsgrad off */
				*w *= 1 - lr * c->wd;
				r->m[k][i] = c->beta1 * r->m[k][i] + (1 - c->beta1) * g;
				r->v[k][i] = c->beta2 * r->v[k][i] + (1 - c->beta2) * g * g;
				double bias1 = 1 - pow(c->beta1, t), bias2 = 1 - pow(c->beta2, t);
				*w -= (lr / bias1) * r->m[k][i] / (sqrt(r->v[k][i]) / sqrt(bias2) + c->eps);
			} else {
				/* torch.optim.SGD, dampening 0 */
				g += c->wd * *w;
				if (c->momentum != 0) {
					r->mom[k][i] = t == 1 ? g : c->momentum * r->mom[k][i] + g;
					g = c->nesterov ? g + c->momentum * r->mom[k][i] : r->mom[k][i];
				}
				*w -= lr * g;
			}
			r->p[k][i] = c->dtype == IR_F32 ? *w : ir_eval_round(c->dtype, *w);
		}
}

/* ---- kernels ---- */

typedef struct KBufs {
	void *buf[64]; /* by node id; steps alias their param */
} KBufs;

static DtmkTensor tensor_of(const IrModule *m, const KBufs *kb, int id)
{
	const IrNode *n = m->nodes[id];
	DtmkTensor t;
	memset(&t, 0, sizeof t);
	t.p = kb->buf[id];
	t.dtype = (DtmDtype)n->dtype;
	t.rank = n->rank;
	for (int i = 0; i < n->rank; i++)
		t.shape[i] = n->shape[i];
	t.numel = ir_node_numel(n);
	return t;
}

static void run_kernel(const IrModule *m, const KBufs *kb, int id, const DtmCtx *ctx)
{
	const IrNode *n = m->nodes[id];
	DtmkArgs a;
	memset(&a, 0, sizeof a);
	a.nin = n->nops;
	for (int i = 0; i < n->nops; i++)
		a.in[i] = tensor_of(m, kb, n->ops[i]);
	a.out = tensor_of(m, kb, id);
	CgKernelAttrs ka;
	cg_kernel_attrs(n, &ka);
	a.nints = ka.nints;
	memcpy(a.ints, ka.ints, sizeof a.ints);
	memcpy(a.fx, ka.fx, sizeof a.fx);
	a.flag = ka.flag;
	if (n->op == IR_OP_GRAD_NORM)
		dtmk_grad_norm(ctx, &a);
	else if (n->op == IR_OP_ADAMW_STEP)
		dtmk_adamw_step(ctx, &a);
	else
		dtmk_sgd_step(ctx, &a);
}

static double rel_err(double got, double want)
{
	return fabs(got - want) / (fabs(want) > 1e-3 ? fabs(want) : 1e-3);
}

/* ---- one optimizer case ---- */

static void run_case(const Case *c)
{
	Mod md;
	build(&md, c);
	check_structure(&md, c);
	check_roundtrip(md.m);
	const IrModule *m = md.m;
	bool ok = md.norm >= 0;
	for (int k = 0; k < NP; k++)
		ok = ok && md.step[k] >= 0;
	if (!ok) {
		fprintf(stderr, "case %s: pass output incomplete\n", c->label);
		return;
	}
	float lr = 0.01f;

	/* the interpreter: params from their init (masters must match them
	 * before rounding), then rounded to the param dtype */
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_init_params(&e, 7);
	e.lr = lr;
	e.lr_fixed = true;
	RefState r;
	memset(&r, 0, sizeof r);
	double init0[NP][MAXN];
	for (int k = 0; k < NP; k++) {
		double *p = e.val[md.param[k]];
		for (int i = 0; i < pnumel[k]; i++) {
			if (md.master[k] >= 0)
				CHECK(e.val[md.master[k]][i] == p[i]);
			r.w[k][i] = p[i];
			p[i] = r.p[k][i] = c->dtype == IR_F32 ? p[i] : ir_eval_round(c->dtype, p[i]);
		}
		memcpy(init0[k], p, (size_t)pnumel[k] * sizeof *p);
	}

	/* the kernels: the same starting values in the nodes' dtypes */
	KBufs kb;
	memset(&kb, 0, sizeof kb);
	CHECK(m->nnodes <= 64);
	for (int id = 0; id < m->nnodes && id < 64; id++) {
		const IrNode *n = m->nodes[id];
		if (ir_op_flags(n->op) & OPF_INPLACE) {
			kb.buf[id] = kb.buf[n->ops[0]];
			continue;
		}
		kb.buf[id] = calloc((size_t)ir_node_numel(n) + 1, 4);
		DtmkTensor t = tensor_of(m, &kb, id);
		if (n->op == IR_OP_PARAM ||
		    (n->op == IR_OP_STATE && ir_attr_init(n)->kind != IR_INIT_ZEROS))
			for (int64_t i = 0; i < t.numel; i++)
				dtmk_store(&t, i, (float)e.val[id][i]);
	}
	DtmCtx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.lr = lr;

	double max_ev = 0, max_k = 0, max_master = 0;
	for (int t = 1; t <= 3; t++) {
		for (int k = 0; k < NP; k++) {
			DtmkTensor gt = tensor_of(m, &kb, md.grad[k]);
			for (int i = 0; i < pnumel[k]; i++) {
				e.val[md.grad[k]][i] = grad_value(k, i, t);
				dtmk_store(&gt, i, (float)grad_value(k, i, t));
			}
		}
		CHECK(ir_eval_run(&e, &diag, 0, t));
		ctx.step = t;
		run_kernel(m, &kb, md.norm, &ctx);
		for (int k = 0; k < NP; k++)
			run_kernel(m, &kb, md.step[k], &ctx);
		ref_step(&r, c, t, lr);

		CHECK_NEAR(e.val[md.norm][0], ref_norm(t), 1e-12);
		CHECK_NEAR(*(float *)kb.buf[md.norm], ref_norm(t), 1e-6);
		if (c->clip_hits)
			CHECK(ref_norm(t) > c->clip);
		for (int k = 0; k < NP; k++) {
			DtmkTensor pt = tensor_of(m, &kb, md.param[k]);
			for (int i = 0; i < pnumel[k]; i++) {
				/* the interpreter to rounding, and its in-place result */
				double ev = e.val[md.param[k]][i];
				max_ev = fmax(max_ev, fabs(ev - r.p[k][i]));
				CHECK(e.val[md.step[k]][i] == ev);
				if (md.master[k] >= 0)
					max_ev = fmax(max_ev, fabs(e.val[md.master[k]][i] - r.w[k][i]));
				/* the kernels to f32 accuracy; with a master, p is
				 * exactly the rounding of the kernel's master */
				if (md.master[k] >= 0) {
					double km = ((float *)kb.buf[md.master[k]])[i];
					max_master = fmax(max_master, rel_err(km, r.w[k][i]));
					CHECK(dtmk_load(&pt, i) == ir_eval_round(c->dtype, km));
				} else {
					max_k = fmax(max_k, rel_err(dtmk_load(&pt, i), r.p[k][i]));
				}
			}
		}
	}
	if (max_ev > 1e-12 || max_k > 2e-6 || max_master > 2e-6)
		fprintf(stderr, "case %s: interpreter %.3g, kernels %.3g, master %.3g\n", c->label,
		        max_ev, max_k, max_master);
	CHECK(max_ev <= 1e-12);
	CHECK(max_k <= 2e-6);
	CHECK(max_master <= 2e-6);
	/* the steps moved every param */
	for (int k = 0; k < NP; k++) {
		bool moved = false;
		for (int i = 0; i < pnumel[k]; i++)
			moved |= e.val[md.param[k]][i] != init0[k][i];
		CHECK(moved);
	}
	ir_eval_free(&e);
	for (int id = 0; id < m->nnodes && id < 64; id++)
		if (!(ir_op_flags(m->nodes[id]->op) & OPF_INPLACE))
			free(kb.buf[id]);
}

static void test_cases(void)
{
	static const Case cases[] = {
		{"adamw wd clip", "adamw", 0.9, 0.95, 1e-8, 0.1, 1.0, 0, false, IR_F32, true},
		{"adamw no clip", "adamw", 0.9, 0.999, 1e-8, 0.0, 0.0, 0, false, IR_F32, false},
		{"adamw clip above norm", "adamw", 0.8, 0.99, 1e-6, 0.01, 100, 0, false, IR_F32,
		 false},
		{"sgd momentum wd", "sgd", 0, 0, 0, 0.01, 0.0, 0.9, false, IR_F32, false},
		{"sgd nesterov clip", "sgd", 0, 0, 0, 0.01, 1.0, 0.9, true, IR_F32, true},
		{"sgd plain", "sgd", 0, 0, 0, 0.0, 0.0, 0.0, false, IR_F32, false},
		{"adamw bf16 master", "adamw", 0.9, 0.95, 1e-8, 0.1, 1.0, 0, false, IR_BF16, true},
		{"sgd bf16 master", "sgd", 0, 0, 0, 0.01, 0.0, 0.9, true, IR_BF16, false},
		{"adamw f16 master", "adamw", 0.9, 0.999, 1e-8, 0.0, 0.0, 0, false, IR_F16, false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int before = check_failures;
		run_case(&cases[i]);
		if (check_failures != before)
			fprintf(stderr, "  (in case '%s')\n", cases[i].label);
	}
}

/* ---- pass details ---- */

/* Bad hyperparameters are errors at the train section; a module without
 * gradients is left alone; the pass does not add a second update. */
static void test_pass_edges(void)
{
	IrModule *m = new_module();
	int p = leaf(m, IR_OP_PARAM, IR_ROLE_PARAM, "w", IR_F32, 0);
	CHECK(pass_optim(m, &diag, NULL) && m->nnodes == 1);
	int g = leaf(m, IR_OP_INPUT, IR_ROLE_GRAD, "grad.w", IR_F32, 0);
	CHECK(ir_set_link(m, m->nodes[g], IR_LINK_GRAD, p));
	quiet(true);
	int nerr = diag.nerr;
	m->train.optimizer = (IrOptimizer)7; /* no optimizer */
	CHECK(!pass_optim(m, &diag, NULL) && diag.nerr > nerr);
	m->train.optimizer = IR_OPTIMIZER_SGD;
	m->train.momentum = 0;
	m->train.nesterov = true;
	nerr = diag.nerr;
	CHECK(!pass_optim(m, &diag, NULL) && diag.nerr > nerr);
	quiet(false);
	m->train.nesterov = false;
	CHECK(pass_optim(m, &diag, NULL));
	int n = m->nnodes;
	CHECK(n == 4); /* grad_norm, sgd_step: no momentum buffer */
	CHECK(pass_optim(m, &diag, NULL) && m->nnodes == n);
	CHECK(ir_verify(m, &diag, "optim"));

	/* the verifier catches a step whose operands do not match its attrs */
	IrNode *st = m->nodes[n - 1];
	ir_attr_optim_mut(m, st)->master = true;
	quiet(true);
	CHECK(!ir_verify(m, &diag, "test"));
	ir_attr_optim_mut(m, st)->master = false;
	ir_attr_optim_mut(m, st)->clip = -1;
	CHECK(!ir_verify(m, &diag, "test"));
	quiet(false);
}

/* The parser reads what the printer writes and refuses another op's keys. */
static void test_text(void)
{
	const char *good =
		"module t\nmesh ()\n"
		"%0 = param {init = zeros} \"w\" : bf16[2] @ ? role param\n"
		"%1 = input \"grad.w\" : bf16[2] @ ? role grad\n"
		"%2 = state {init = zeros} \"opt.mom.w\" : f32[2] @ ? role opt_state\n"
		"%3 = state {init = zeros} \"opt.master.w\" : f32[2] @ ? role opt_state\n"
		"%4 = grad_norm %1 \"grad_norm\" : f32[] @ []\n"
		"%5 = sgd_step %0, %1, %2, %3, %4 {momentum = 0.5, nesterov = true, "
		"weight_decay = 0.25, clip = 2, master = true} : bf16[2] @ ?\n";
	SrcFile src = {"t.ir", good, strlen(good)};
	Arena pa;
	arena_init(&pa);
	Diag pd;
	diag_init(&pd, stderr);
	IrModule *m = ir_parse(&pa, &pd, &src);
	CHECK(m != NULL);
	if (m) {
		const IrNode *s = m->nodes[5];
		const IrAttrOptim *so = ir_attr_optim(s);
		CHECK(so->momentum == 0.5 && so->nesterov && so->weight_decay == 0.25 &&
		      so->clip == 2 && so->master);
		CHECK(ir_verify(m, &pd, "parse"));
		check_roundtrip(m);
	}
	arena_free(&pa);

	const char *bad =
		"module t\nmesh ()\n"
		"%0 = param {init = zeros} \"w\" : f32[2] @ ? role param\n"
		"%1 = input \"grad.w\" : f32[2] @ ? role grad\n"
		"%2 = grad_norm %1 : f32[] @ ?\n"
		"%3 = sgd_step %0, %1, %2 {beta1 = 0.9, master = false} : f32[2] @ ?\n";
	SrcFile bsrc = {"t.ir", bad, strlen(bad)};
	arena_init(&pa);
	quiet(true);
	diag_init(&pd, diag.out);
	CHECK(ir_parse(&pa, &pd, &bsrc) == NULL && pd.nerr > 0);
	quiet(false);
	arena_free(&pa);
}

/* The schedule the interpreter uses when no lr is fixed. */
static void test_lr_schedule(void)
{
	IrTrain t;
	ir_train_defaults(&t);
	t.lr = 1.0;
	t.lr_schedule = IR_LR_CONSTANT;
	CHECK_NEAR(ir_optim_lr_at(&t, 5), 1.0, 0);
	t.lr_schedule = IR_LR_COSINE;
	t.warmup = 4;
	t.steps = 14;
	t.min_lr = 0.1;
	CHECK_NEAR(ir_optim_lr_at(&t, 1), 0.25, 1e-15);
	CHECK_NEAR(ir_optim_lr_at(&t, 4), 1.0, 1e-15);
	CHECK_NEAR(ir_optim_lr_at(&t, 9), 0.55, 1e-15);
	CHECK_NEAR(ir_optim_lr_at(&t, 14), 0.1, 1e-15);
	CHECK_NEAR(ir_optim_lr_at(&t, 20), 0.1, 1e-15);
}

/* ---- mixed precision ---- */

/* x f32[4, 3] @ w [3, 2] (+ 0.5) vs y f32[4, 2]: mse, or a hand-written
 * mean of squares when `mean_loss`. */
static IrModule *regression(IrDtype precision, bool mean_loss)
{
	IrModule *m = new_module();
	m->train.precision = precision;
	m->train.optimizer = IR_OPTIMIZER_ADAMW;
	m->train.lr = 0.05;
	m->train.weight_decay = 0.0;
	m->train.clip = 0;
	IrNode *x = ir_node_new(m, IR_OP_INPUT, NULL, 0, (SrcLoc){0});
	x->rank = 2, x->shape[0] = 4, x->shape[1] = 3, x->name = "x", x->role = IR_ROLE_INPUT;
	IrNode *y = ir_node_new(m, IR_OP_INPUT, NULL, 0, (SrcLoc){0});
	y->rank = 2, y->shape[0] = 4, y->shape[1] = 2, y->name = "y", y->role = IR_ROLE_INPUT;
	IrNode *w = ir_node_new(m, IR_OP_PARAM, NULL, 0, (SrcLoc){0});
	w->rank = 2, w->shape[0] = 3, w->shape[1] = 2, w->name = "w", w->role = IR_ROLE_PARAM;
	ir_attr_init_mut(m, w)->kind = IR_INIT_NORMAL;
	ir_attr_init_mut(m, w)->arg[1] = 0.5;
	IrNode *c = ir_node_new(m, IR_OP_CONST, NULL, 0, (SrcLoc){0});
	ir_attr_scalar_mut(m, c)->value = 0.5;
	IrNode *ids[] = {x, y, w, c};
	for (int i = 0; i < 4; i++)
		CHECK(ir_infer(m, ids[i], &diag));
	int o[2] = {x->id, w->id};
	IrNode *mm = ir_node_new(m, IR_OP_MATMUL, o, 2, (SrcLoc){0});
	CHECK(ir_infer(m, mm, &diag));
	o[0] = mm->id, o[1] = c->id;
	IrNode *h = ir_node_new(m, IR_OP_ADD, o, 2, (SrcLoc){0});
	CHECK(ir_infer(m, h, &diag));
	o[0] = h->id, o[1] = y->id;
	IrNode *loss;
	if (!mean_loss) {
		loss = ir_node_new(m, IR_OP_MSE, o, 2, (SrcLoc){0});
	} else {
		IrNode *dd = ir_node_new(m, IR_OP_SUB, o, 2, (SrcLoc){0});
		CHECK(ir_infer(m, dd, &diag));
		o[0] = o[1] = dd->id;
		IrNode *sq = ir_node_new(m, IR_OP_MUL, o, 2, (SrcLoc){0});
		CHECK(ir_infer(m, sq, &diag));
		loss = ir_node_new(m, IR_OP_MEAN, &sq->id, 1, (SrcLoc){0});
		ir_attr_axes_mut(m, loss)->n = 2;
		ir_attr_axes_mut(m, loss)->axes[0] = 0;
		ir_attr_axes_mut(m, loss)->axes[1] = 1;
	}
	CHECK(ir_infer(m, loss, &diag));
	loss->role = IR_ROLE_LOSS;
	loss->name = "loss";
	m->loss = loss->id;
	CHECK(ir_verify(m, &diag, "build"));
	return m;
}

static void test_precision_pass(void)
{
	/* f32: nothing changes */
	IrModule *m = regression(IR_F32, false);
	int n = m->nnodes;
	CHECK(pass_precision(m, &diag, NULL) && m->nnodes == n);

	m = regression(IR_BF16, false);
	CHECK(pass_precision(m, &diag, NULL));
	CHECK(ir_verify(m, &diag, "precision"));
	CHECK_EQ_INT(m->nnodes, n + 2); /* a cast after x and after y */
	int x = find(m, "x"), y = find(m, "y"), w = find(m, "w");
	CHECK(x >= 0 && y >= 0 && w >= 0);
	if (x >= 0 && y >= 0 && w >= 0) {
		CHECK(m->nodes[x]->dtype == IR_F32 && m->nodes[y]->dtype == IR_F32);
		CHECK(m->nodes[x + 1]->op == IR_OP_CAST && m->nodes[x + 1]->dtype == IR_BF16 &&
		      m->nodes[x + 1]->ops[0] == x);
		CHECK(m->nodes[y + 1]->op == IR_OP_CAST && m->nodes[y + 1]->ops[0] == y);
		CHECK(m->nodes[w]->dtype == IR_BF16);
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *nd = m->nodes[i];
		if (nd->op == IR_OP_MATMUL || nd->op == IR_OP_ADD || nd->op == IR_OP_CONST)
			CHECK(nd->dtype == IR_BF16);
		if (nd->op == IR_OP_MATMUL)
			CHECK(nd->ops[0] == x + 1);
	}
	CHECK(m->loss >= 0 && m->nodes[m->loss]->dtype == IR_F32 &&
	      m->nodes[m->loss]->role == IR_ROLE_LOSS);
	check_roundtrip(m);

	/* a hand-written mean loss reduces in f32: its f16 operand is cast up
	 * first (autocast's fp32 list), so the loss needs no cast after */
	m = regression(IR_F16, true);
	CHECK(pass_precision(m, &diag, NULL));
	CHECK(ir_verify(m, &diag, "precision"));
	const IrNode *l = m->nodes[m->loss];
	CHECK(l->op == IR_OP_MEAN && l->dtype == IR_F32 && l->role == IR_ROLE_LOSS);
	CHECK(l->name && strcmp(l->name, "loss") == 0);
	const IrNode *c = m->nodes[l->ops[0]];
	CHECK(c->op == IR_OP_CAST && c->dtype == IR_F32 && m->nodes[c->ops[0]]->dtype == IR_F16);
	check_roundtrip(m);
}

/* Lowers src (the mesh dp=1) with precision p and runs the pass. */
static IrModule *lower_prec(const char *src, const char *p)
{
	SrcFile *sf = arena_alloc(&arena, sizeof *sf);
	if (!sf)
		return NULL;
	sf->name = "t.dtm";
	sf->text = src;
	sf->len = strlen(src);
	diag_add_file(&diag, sf);
	char prec[32];
	snprintf(prec, sizeof prec, "precision=%s", p);
	LowerOptions o = {.ntrain = 1};
	o.train[0] = arena_strdup(&arena, prec);
	AstFile af;
	IrModule *m = ast_parse(&arena, &diag, sf, &af) ? lower_file(&arena, &diag, &af, &o) : NULL;
	CHECK(m != NULL);
	bool ok = m && pass_precision(m, &diag, NULL) && ir_verify(m, &diag, "precision");
	CHECK(ok);
	return ok ? m : NULL;
}

/* The first node with op `op` that reads node x, directly or through a
 * cast of it. */
static const IrNode *reader(const IrModule *m, int x, IrOp op)
{
	for (int i = x + 1; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		for (int j = 0; j < n->nops; j++) {
			const IrNode *o = m->nodes[n->ops[j]];
			if (n->ops[j] == x || (o->op == IR_OP_CAST && o->ops[0] == x)) {
				if (n->op == op)
					return n;
			}
		}
	}
	return NULL;
}

/* The casts a mixed-precision program needs (issue 14.2), as autocast
 * inserts them: a loss adding an f32 term (mse) to a bf16 one (a mean,
 * which reduces in f32, scaled) checks and types; a matmul of an f32
 * operand (a user's cast) runs in bf16; + - * / of bf16 and f32 promote to
 * f32; a scalar takes its tensor's dtype; a loss left in bf16 (a max) gets
 * a cast to f32; a second run adds nothing. */
static void test_autocast(void)
{
	static const char src[] = "model t\n"
	                          "input x : f32[4, 3]\ninput y : f32[4, 2]\n"
	                          "param w : f32[3, 2] init normal(0, 0.1)\n"
	                          "param v : f32[2, 2] init normal(0, 0.1)\n"
	                          "forward {\n"
	                          "  h = x @ w + 1\n"
	                          "  g = cast(h, f32) @ v\n"
	                          "  k = cast(g, f32) * h + 0.5\n"
	                          "  loss = mse(k, y) + 0.01 * mean(h) + mean(g)\n"
	                          "       + mean(cast(x, f32)) + 2\n"
	                          "}\n";
	IrModule *f32 = lower_prec(src, "f32");
	IrModule *m = lower_prec(src, "bf16");
	if (!m || !f32)
		return;
	int x = find(m, "x"), h = find(m, "h"), g = find(m, "g"), k = find(m, "k");
	CHECK(x >= 0 && h >= 0 && g >= 0 && k >= 0);
	if (x < 0 || h < 0 || g < 0 || k < 0)
		return;
	const IrNode *lo = m->nodes[m->loss];
	CHECK(lo->dtype == IR_F32 && lo->op == IR_OP_ADD && lo->role == IR_ROLE_LOSS);
	CHECK(m->nodes[h]->dtype == IR_BF16);
	/* g = cast(h, f32) @ v: the cast stays the user's (f32), the matmul
	 * casts it back to bf16 */
	const IrNode *gm = m->nodes[g];
	CHECK(gm->op == IR_OP_MATMUL && gm->dtype == IR_BF16);
	const IrNode *a0 = m->nodes[gm->ops[0]];
	CHECK(a0->op == IR_OP_CAST && a0->dtype == IR_BF16);
	CHECK(m->nodes[a0->ops[0]]->op == IR_OP_CAST && m->nodes[a0->ops[0]]->dtype == IR_F32);
	/* k = cast(g, f32) * h + 0.5: f32 * bf16 promotes, the 0.5 is f32 */
	const IrNode *km = m->nodes[k];
	CHECK(km->op == IR_OP_ADD && km->dtype == IR_F32);
	CHECK(m->nodes[km->ops[1]]->op == IR_OP_CONST && m->nodes[km->ops[1]]->dtype == IR_F32);
	const IrNode *mul = m->nodes[km->ops[0]];
	CHECK(mul->op == IR_OP_MUL && mul->dtype == IR_F32 &&
	      m->nodes[mul->ops[1]]->op == IR_OP_CAST && m->nodes[mul->ops[1]]->ops[0] == h);
	/* h = x @ w + 1: the 1 is bf16 */
	const IrNode *hm = m->nodes[h];
	CHECK(hm->op == IR_OP_ADD && m->nodes[hm->ops[1]]->op == IR_OP_CONST &&
	      m->nodes[hm->ops[1]]->dtype == IR_BF16);
	/* mean(h) and mean(g) reduce an f32 cast; mse(k f32, y) promotes,
	 * reading the f32 input y rather than its bf16 cast */
	const IrNode *mh = reader(m, h, IR_OP_MEAN), *mg = reader(m, g, IR_OP_MEAN);
	CHECK(mh && mh->dtype == IR_F32 && m->nodes[mh->ops[0]]->op == IR_OP_CAST);
	CHECK(mg && mg->dtype == IR_F32 && m->nodes[mg->ops[0]]->op == IR_OP_CAST);
	const IrNode *ms = reader(m, k, IR_OP_MSE);
	CHECK(ms && ms->dtype == IR_F32 && ms->ops[1] == find(m, "y"));
	/* the user's cast(x, f32) reads the input as it came */
	const IrNode *cx = reader(m, x, IR_OP_MEAN);
	CHECK(cx && m->nodes[cx->ops[0]]->op == IR_OP_CAST && m->nodes[cx->ops[0]]->ops[0] == x &&
	      m->nodes[cx->ops[0]]->dtype == IR_F32);
	/* the f32 program has the user's casts alone */
	int casts = 0;
	for (int i = 0; i < f32->nnodes; i++)
		casts += f32->nodes[i]->op == IR_OP_CAST;
	CHECK_EQ_INT(casts, 3);
	check_roundtrip(m);
	/* again: nothing to add */
	int n = m->nnodes;
	CHECK(pass_precision(m, &diag, NULL) && ir_verify(m, &diag, "precision"));
	CHECK_EQ_INT(m->nnodes, n);
	/* and on through autodiff: every param's gradient is in reduce_dtype,
	 * f32 by default */
	CHECK(pass_run_until(m, &diag, NULL, "optim"));
	int gw = find(m, "grad.w"), gv = find(m, "grad.v");
	CHECK(gw >= 0 && gv >= 0);
	CHECK(gw >= 0 && m->nodes[gw]->dtype == IR_F32);
	CHECK(gv >= 0 && m->nodes[gv]->dtype == IR_F32);

	/* a loss that stays bf16 (a max) gets a cast to f32, which is the loss */
	m = lower_prec("model t\ninput x : f32[4, 3]\nparam w : f32[3, 2]\n"
	               "forward {\n  loss = max(x @ w)\n}\n", "bf16");
	if (!m)
		return;
	lo = m->nodes[m->loss];
	CHECK(lo->op == IR_OP_CAST && lo->dtype == IR_F32 && lo->role == IR_ROLE_LOSS);
	CHECK(lo->name && strcmp(lo->name, "loss") == 0);
	CHECK(m->nodes[lo->ops[0]]->op == IR_OP_MAX && m->nodes[lo->ops[0]]->dtype == IR_BF16 &&
	      m->nodes[lo->ops[0]]->role == IR_ROLE_ACT);
}

/* precision -> autodiff -> optim through the registry, then training steps
 * in the interpreter: each step's update is the AdamW formula applied to
 * that step's gradient, and the loss falls. */
static void test_pipeline(IrDtype precision)
{
	IrModule *m = regression(precision, false);
	CHECK(pass_run_until(m, &diag, NULL, "optim"));
	int w = find(m, "w"), g = find(m, "grad.w"), master = find(m, "opt.master.w");
	int mo = find(m, "opt.m.w"), vo = find(m, "opt.v.w");
	CHECK(w >= 0 && g >= 0 && mo >= 0 && vo >= 0);
	CHECK((master >= 0) == (precision != IR_F32));
	if (w < 0 || g < 0 || mo < 0 || vo < 0)
		return;
	CHECK(m->nodes[g]->dtype == IR_F32); /* reduce_dtype */
	IrEval e;
	CHECK(ir_eval_init(&e, m));
	ir_eval_init_params(&e, 3);
	int x = find(m, "x"), y = find(m, "y");
	double xv[12], yv[8];
	for (int i = 0; i < 12; i++)
		xv[i] = (double)((i * 5) % 7 - 3) / 4;
	for (int i = 0; i < 8; i++)
		yv[i] = (double)((i * 3) % 5 - 2) / 2;
	ir_eval_set(&e, x, xv);
	ir_eval_set(&e, y, yv);
	double wv[6], mv[6] = {0}, vv[6] = {0}, first = 0, last = 0;
	double *wsrc = master >= 0 ? e.val[master] : e.val[w];
	memcpy(wv, wsrc, sizeof wv);
	double lr = 0.05, b1 = m->train.beta1, b2 = m->train.beta2, eps = m->train.eps;
	double worst = 0;
	for (int t = 1; t <= 5; t++) {
		CHECK(ir_eval_run(&e, &diag, 0, t));
		double loss = ir_eval_loss(&e);
		if (t == 1)
			first = loss;
		last = loss;
		for (int i = 0; i < 6; i++) {
			double gi = e.val[g][i];
			mv[i] = b1 * mv[i] + (1 - b1) * gi;
			vv[i] = b2 * vv[i] + (1 - b2) * gi * gi;
			wv[i] -= (lr / (1 - pow(b1, t))) * mv[i] /
			         (sqrt(vv[i]) / sqrt(1 - pow(b2, t)) + eps);
			worst = fmax(worst, fabs(wsrc[i] - wv[i]));
			double pw = precision == IR_F32 ? wv[i] : ir_eval_round(precision, wv[i]);
			worst = fmax(worst, fabs(e.val[w][i] - pw));
		}
	}
	CHECK(worst < 1e-12);
	CHECK(last < first);
	ir_eval_free(&e);
}

/* ---- the way a kernel's work is cut changes no bit (issue 13 point 9) ----
 *
 * grad_norm sums squares in chunks fixed by the tensor's size and adds
 * them in order; the updates are elementwise.  Both on tensors big enough
 * to be cut (over DTMK_OPT_GRAIN elements), run serially and cut in 2, 3
 * and 4 ranges (last first): the norm, params and state must be the same
 * bytes. */

static int parts_n, cut_calls;

static void parts_for(const DtmCtx *c, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	(void)c;
	(void)grain;
	cut_calls++;
	for (int i = parts_n - 1; i >= 0; i--) {
		int64_t lo = n * i / parts_n, hi = n * (i + 1) / parts_n;
		if (lo < hi)
			fn(arg, lo, hi);
	}
}

enum { CUT_N = 40000 };

static DtmkTensor cut_tensor(float *p, int64_t n)
{
	DtmkTensor t = { .p = p, .dtype = DTM_F32, .rank = 1, .shape = { n }, .numel = n };
	return t;
}

static void test_cut_bits(void)
{
	/* p, g, m, v (v >= 0), a second small gradient, the norm */
	static float init[4][CUT_N], bufs[4][CUT_N], ref[4][CUT_N], g2[7];
	for (int k = 0; k < 4; k++)
		for (int i = 0; i < CUT_N; i++) {
			double r = sin(0.37 * i + k) * 0.5;
			init[k][i] = (float)(k == 3 ? r * r : r);
		}
	for (int i = 0; i < 7; i++)
		g2[i] = (float)i;
	float norm, ref_norm = 0;
	for (int kern = 0; kern < 3; kern++) {
		for (int cut = 1; cut <= 4; cut++) {
			DtmCtx ctx = { .lr = 0.01f, .step = 3, .nthreads = 4 };
			if (cut > 1)
				ctx.parallel_for = parts_for;
			parts_n = cut;
			cut_calls = 0;
			memcpy(bufs, init, sizeof bufs);
			DtmkArgs a;
			memset(&a, 0, sizeof a);
			a.fx[DTMK_OPT_BETA1] = kern == 1 ? 0.9 : 0.5; /* beta1 or momentum */
			a.fx[DTMK_OPT_BETA2] = 0.95;
			a.fx[DTMK_OPT_EPS] = 1e-8;
			a.fx[DTMK_OPT_WD] = 0.1;
			a.fx[DTMK_OPT_CLIP] = 1.0;
			const char *what;
			if (kern == 0) {
				what = "grad_norm";
				a.nin = 2;
				a.in[0] = cut_tensor(bufs[1], CUT_N);
				a.in[1] = cut_tensor(g2, 7);
				a.out = cut_tensor(&norm, 1);
				a.out.rank = 0;
				dtmk_grad_norm(&ctx, &a);
			} else {
				/* the norm makes the clip factor < 1 */
				float nv = 3.0f;
				a.in[0] = cut_tensor(bufs[0], CUT_N);
				a.in[1] = cut_tensor(bufs[1], CUT_N);
				a.in[2] = cut_tensor(bufs[2], CUT_N);
				a.in[3] = cut_tensor(bufs[3], CUT_N);
				a.out = a.in[0];
				if (kern == 1) {
					what = "adamw_step";
					a.nin = 5;
					a.in[4] = cut_tensor(&nv, 1);
					dtmk_adamw_step(&ctx, &a);
				} else {
					what = "sgd_step";
					a.nin = 4; /* p, g, mom, norm */
					a.in[3] = cut_tensor(&nv, 1);
					dtmk_sgd_step(&ctx, &a);
				}
			}
			if (cut == 1) {
				memcpy(ref, bufs, sizeof ref);
				ref_norm = norm;
				continue;
			}
			CHECK(cut_calls > 0);
			check_count++;
			if (memcmp(ref, bufs, sizeof ref) != 0 ||
			    (kern == 0 && memcmp(&ref_norm, &norm, sizeof norm) != 0)) {
				check_failures++;
				fprintf(stderr, "%s: cut in %d ranges, not the serial result\n",
				        what, cut);
			}
		}
	}
}

int main(void)
{
	diag_init(&diag, stderr);
	arena_init(&arena);
	test_cases();
	test_pass_edges();
	test_text();
	test_lr_schedule();
	test_precision_pass();
	test_autocast();
	test_pipeline(IR_F32);
	test_pipeline(IR_BF16);
	test_cut_bits();
	arena_free(&arena);
	return check_report();
}
