/* eval.h - a reference interpreter for the global IR, in double precision
 * (the interp library: linked by the tests and tests/e2e/refloss, never by
 * dtmc or the runtime).
 *
 * This is the test oracle: autodiff is checked against its finite
 * differences, and code generation and every distributed layout are checked
 * against its values.  It runs the unpartitioned, single-device program (full
 * shapes, no collectives), one buffer of doubles per node, row-major.  It
 * favours being obviously right over being fast; the loops are plain but
 * keep the innermost one contiguous so GPT-sized test models stay quick.
 *
 * Integer tensors (i32 ids and targets) are stored as doubles holding whole
 * numbers.  Values are not rounded to their node's dtype except by `cast`,
 * which rounds to f32, bf16 (round to nearest even) or f16 exactly as a
 * device would (unless exact_casts: the identity, for finite differences
 * through a cast).
 *
 * Usage:
 *     IrEval e;
 *     ir_eval_init(&e, m);            // after ir_infer has typed every node
 *     ir_eval_set(&e, wte, data);     // each param and input
 *     ir_eval_run(&e, d, seed, step); // e.val[n] now holds node n's value
 *     ir_eval_free(&e);
 */
#ifndef DTM_INTERP_EVAL_H
#define DTM_INTERP_EVAL_H

#include "ir/ir.h"

typedef struct IrEval {
	const IrModule *m;
	double **val;  /* val[n]: node n's numel doubles, row-major; owned */
	bool training; /* dropout is active (default true); false = identity */
	/* A cast to a float dtype keeps the value as it is (default false):
	 * the mathematical function whose derivative autodiff's rule is, so
	 * finite differences can check gradients through casts. */
	bool exact_casts;
	uint64_t seed; /* of the last ir_eval_run, reused by ir_eval_loss_fd */
	int64_t step;
	/* this rank's mesh coordinates, for the rank-dependent vocab-parallel
	 * ops (embed_vp, ...) and dropout masks: eval_spmd sets them; zero
	 * elsewhere */
	int64_t coords[IR_MAX_AXES];
	/* the module is one rank's after `partition` (eval_spmd sets it):
	 * shapes are shards of the placements, which dropout keys by */
	bool partitioned;
	/* The learning rate of optimizer ops: m->train's schedule at the
	 * run's step (as the runtime computes it) unless lr_fixed is set, in
	 * which case lr. */
	double lr;
	bool lr_fixed;
	/* Loss scaling, as the runtime's DtmCtx has it: the scale S the
	 * loss_scale op gives (0: off, a seed of 1), by which grad_norm and
	 * the updates divide the gradients, an update whose norm is not
	 * finite then changing nothing; and the steps skipped before this
	 * one (the optimizers' t is step - skipped).  Zero by default. */
	double loss_scale;
	int64_t skipped;
} IrEval;

/* Allocates one zeroed buffer per node (freed by ir_eval_free).  Returns
 * false when out of memory or when a node's element count is out of range;
 * *e is then left freed. */
bool ir_eval_init(IrEval *e, const IrModule *m);
/* Fills every param from its init attribute (zeros, ones, normal(mean, std),
 * uniform(f[0], f[1])) with the runtime's generator, keyed by (seed,
 * hash of the param's name, global index) and rounded to f32 as the runtime
 * stores them, so the oracle starts from the weights every mesh starts from.
 * Params with init none are left as they are.  Optimizer state (`state`
 * leaves) is filled the same way; a master copy opt.master.P is keyed by
 * P's name, so it holds P's initial value before rounding to P's dtype (the
 * runtime keys it the same way). */
void ir_eval_init_params(IrEval *e, uint64_t seed);
/* Copies ir_node_numel(node) doubles into the node's buffer.  Meant for
 * params and inputs (i32 values as whole doubles); leaves start at zero. */
void ir_eval_set(IrEval *e, int node, const double *data);
/* Evaluates every non-leaf node in order; dropout masks are keyed by
 * (seed, salt, step, the element's full-batch global index: ir/dropout.c).  Reports the first failing node to d
 * (out-of-range ids or targets, collectives, inconsistent shapes) and
 * returns false. */
bool ir_eval_run(IrEval *e, Diag *d, uint64_t seed, int64_t step);
/* Evaluates node i alone (e->seed and e->step as set by the caller): the
 * SPMD interpreter (eval_spmd.h) steps every rank through a partitioned
 * module this way and runs the collectives itself. */
bool ir_eval_node(IrEval *e, int i, Diag *d);
/* Writes the init values (n's init attrs, keyed as ir_eval_init_params
 * keys them) of global elements 0 .. N-1 of the param or state n. */
void ir_eval_fill_init(const IrModule *m, const IrNode *n, uint64_t seed, int64_t N, double *v);
/* The loss value (m->loss) after a run; NAN when the module has none. */
double ir_eval_loss(const IrEval *e);
void ir_eval_free(IrEval *e);

/* The central difference (L(p + h) - L(p - h)) / 2h of the loss with
 * respect to element `elem` of node `param`, using the seed and step of the
 * last run.  The parameter is restored afterwards but the other buffers are
 * left from the p - h run (re-run to refresh them).  NAN on error. */
double ir_eval_loss_fd(IrEval *e, Diag *d, int param, int64_t elem, double h);

/* Rounding helpers, exported so kernels' tests can compare bit for bit. */
double ir_eval_round(IrDtype t, double x);

/* The learning rate at 1-based step t under t's schedule: constant, or
 * linear warmup over `warmup` steps then cosine decay to min_lr at
 * `steps` (runtime/main.c's lr_at, in f64). */
double ir_optim_lr_at(const IrTrain *t, int64_t step);

#endif
