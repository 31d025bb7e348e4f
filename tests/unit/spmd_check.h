/* spmd_check.h - the SPMD equivalence check the unit tests share: a
 * program partitioned for a mesh, run on every rank by the f64 SPMD
 * interpreter (interp/eval_spmd.c), against the single-device interpreter
 * (interp/eval.c) on the same global inputs and initial values: over two
 * steps the loss, every gathered gradient and every updated param agree
 * to 1e-9 relative (gradients and updated params: spmd_tol).  Include
 * after check.h. */
#ifndef DTM_SPMD_CHECK_H
#define DTM_SPMD_CHECK_H

#include "interp/eval.h"
#include "interp/eval_spmd.h"
#include "ir/ir.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state;

/* The relative tolerance of gradients and updated params.  1e-9 but where
 * the program rounds what it reduces: under bf16 params with f32
 * reduce_dtype each rank casts its partial gradient to f32 before the
 * reduction, where one device casts the whole sum, a few f32 ulps apart
 * (the test that sets it says how many). */
static double spmd_tol = 1e-9;

static inline double rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}


static inline int find_named(const IrModule *m, IrOp op, IrRole role, const char *name)
{
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->name && strcmp(n->name, name) == 0 && (op == IR_OP_COUNT || n->op == op) &&
		    n->role == role)
			return i;
	}
	return -1;
}

/* max |a - b| <= tol * max(max |b|, tiny) */
static inline bool close_rel(const double *a, const double *b, int64_t n, double tol, double *err)
{
	double mx = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
		e = fabs(a[i] - b[i]) > e ? fabs(a[i] - b[i]) : e;
	}
	*err = mx > 0 ? e / mx : e;
	return e <= tol * (mx > 1e-300 ? mx : 1e-300) || e == 0;
}

static inline void global_input(const IrNode *n, int64_t N, int idlim, double *v)
{
	rng_state = 1000 + strlen(n->name ? n->name : "") * 77 + (uint64_t)N;
	for (int64_t j = 0; j < N; j++)
		v[j] = n->dtype == IR_I32 ? (double)((uint64_t)((rnd() + 1) * 1e6) % (uint64_t)idlim)
		                          : rnd();
}

/* Compares one param's gathered gradient and updated value; returns the
 * mismatches.  A gradient far below the largest is rounding noise around
 * an exact zero (the key bias: softmax ignores a shift of a whole row):
 * compared absolutely, and its param is skipped (Adam turns noise into a
 * full step). */
static inline int compare_param(const char *label, int step, const IrModule *ref, const IrEval *e,
                         const IrModule *dm, const IrSpmd *s, int i, double gscale)
{
	const IrNode *p = ref->nodes[i];
	char gname[256];
	snprintf(gname, sizeof gname, "grad.%s", p->name);
	int g0 = find_named(ref, IR_OP_COUNT, IR_ROLE_GRAD, gname);
	int g1 = find_named(dm, IR_OP_COUNT, IR_ROLE_GRAD, gname);
	int p1 = find_named(dm, IR_OP_PARAM, IR_ROLE_PARAM, p->name);
	CHECK(g0 >= 0 && g1 >= 0 && p1 >= 0);
	if (g0 < 0 || g1 < 0 || p1 < 0)
		return 1;
	int bad = 0;
	int64_t N = ir_node_numel(p);
	double *v = malloc(sizeof(double) * (size_t)N), err;
	ir_spmd_gather(s, g1, v);
	double gmax = 0;
	for (int64_t j = 0; j < N; j++)
		gmax = fabs(e->val[g0][j]) > gmax ? fabs(e->val[g0][j]) : gmax;
	bool noise = gmax < 1e-9 * gscale;
	if (noise) {
		for (int64_t j = 0; j < N; j++)
			if (fabs(v[j] - e->val[g0][j]) > 1e-9 * gscale) {
				fprintf(stderr, "%s: step %d %s[%lld] is %.3g, not ~0\n", label, step, gname,
				        (long long)j, v[j]);
				bad++;
				break;
			}
	} else if (!close_rel(v, e->val[g0], N, spmd_tol, &err)) {
		fprintf(stderr, "%s: step %d %s differs (relative %.3g)\n", label, step, gname, err);
		bad++;
	}
	ir_spmd_gather(s, p1, v);
	if (!noise && !close_rel(v, e->val[i], N, spmd_tol, &err)) {
		fprintf(stderr, "%s: step %d updated %s differs (relative %.3g)\n", label, step,
		        p->name, err);
		bad++;
	}
	free(v);
	return bad;
}

/* Readies the interpreters of ref (a single-device program) and dm (its
 * per-rank program): the initial values of seed 42 and the same global
 * inputs (ids below idlim).  False (both freed) when out of memory. */
static inline bool spmd_start(const IrModule *ref, const IrModule *dm, int idlim, IrEval *ep,
                              IrSpmd *sp)
{
	IrEval e;
	IrSpmd s;
	bool ok = ir_eval_init(&e, ref);
	CHECK(ok);
	if (!ok)
		return false;
	ok = ir_spmd_init(&s, dm);
	CHECK(ok);
	if (!ok) {
		ir_eval_free(&e);
		return false;
	}
	ir_eval_init_params(&e, 42);
	ir_spmd_init_params(&s, 42);
	for (int i = 0; i < ref->nnodes; i++) {
		const IrNode *n = ref->nodes[i];
		if (n->op != IR_OP_INPUT)
			continue;
		int j = find_named(dm, IR_OP_INPUT, n->role, n->name);
		CHECK(j >= 0);
		int64_t N = ir_node_numel(n);
		double *v = malloc(sizeof(double) * (size_t)N);
		global_input(n, N, idlim, v);
		ir_eval_set(&e, i, v);
		if (j >= 0)
			ir_spmd_set_global(&s, j, v);
		free(v);
	}
	*ep = e;
	*sp = s;
	return true;
}

/* Runs ref (a single-device program through optim) and dm (its per-rank
 * program) two steps from seed 42 with the same global inputs (ids below
 * idlim) and returns the mismatches, each reported on stderr under label;
 * -1 when a run fails. */
static inline int spmd_compare(const char *label, const IrModule *ref, const IrModule *dm,
                               int idlim, Diag *d)
{
	IrEval e;
	IrSpmd s;
	if (!spmd_start(ref, dm, idlim, &e, &s))
		return -1;
	bool ok = true;
	int bad = 0;
	for (int step = 1; step <= 2 && ok; step++) {
		ok = ir_eval_run(&e, d, 7, step) && ir_spmd_run(&s, d, 7, step);
		CHECK(ok);
		if (!ok) {
			bad = -1;
			break;
		}
		double l0 = ir_eval_loss(&e), l1, err;
		ir_spmd_gather(&s, dm->loss, &l1);
		if (!close_rel(&l1, &l0, 1, 1e-9, &err)) {
			fprintf(stderr, "%s: step %d loss %.15g, single device %.15g\n", label, step, l1,
			        l0);
			bad++;
		}
		double gscale = 0;
		for (int i = 0; i < ref->nnodes; i++) {
			const IrNode *g = ref->nodes[i];
			for (int64_t j = 0; g->role == IR_ROLE_GRAD && j < ir_node_numel(g); j++)
				gscale = fabs(e.val[i][j]) > gscale ? fabs(e.val[i][j]) : gscale;
		}
		for (int i = 0; i < ref->nnodes; i++)
			if (ref->nodes[i]->op == IR_OP_PARAM)
				bad += compare_param(label, step, ref, &e, dm, &s, i, gscale);
	}
	ir_spmd_free(&s);
	ir_eval_free(&e);
	return bad;
}

#endif
