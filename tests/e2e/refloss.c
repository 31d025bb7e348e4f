/* refloss.c - the f64 reference loss of a model's first training step.
 *
 *   dtm_refloss MODEL.dtm [-D name=value]... [--mesh axis=size,...]
 *
 * Lowers the model (no passes: the forward program), initialises params as
 * the runtime does (ir_eval_init_params: Philox keyed by seed, name and
 * index, rounded to f32), fills the inputs with step 1's batch (samples
 * 0 .. B-1 of the synthetic data, as runtime/feed.c does) and prints
 * ir_eval's loss.  tests/e2e/train.sh compares a built binary's step-1
 * loss against it.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"
#include "interp/eval.h"
#include "runtime/data.h"

static bool fill_inputs(IrEval *e, const IrModule *m, uint64_t seed)
{
	int in[4], n = 0;
	for (int i = 0; i < m->nnodes && n < 4; i++)
		if (m->nodes[i]->op == IR_OP_INPUT)
			in[n++] = i;
	if (n < 2)
		return false;
	const IrNode *a = m->nodes[in[0]], *b = m->nodes[in[1]];
	int64_t B = a->shape[0], na = ir_node_numel(a), nb = ir_node_numel(b);
	double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
	char err[256];
	bool ok = va && vb;
	if (ok && a->dtype == IR_I32) {
		int64_t T = na / B;
		int vocab = 0;
		for (int i = 0; i < m->nnodes && !vocab; i++)
			if (m->nodes[i]->op == IR_OP_EMBED)
				vocab = (int)m->nodes[m->nodes[i]->ops[0]]->shape[0];
		int32_t *ti = malloc(sizeof(int32_t) * (size_t)na), *tt = malloc(sizeof(int32_t) * (size_t)na);
		DtmData d;
		ok = ti && tt && dtm_data_open(&d, "synthetic", seed, vocab, err, sizeof err) == 0;
		if (ok) {
			ok = dtm_data_batch(&d, 0, (int)B, (int)T, ti, tt, err, sizeof err) == 0;
			dtm_data_close(&d);
		}
		for (int64_t i = 0; ok && i < na; i++) {
			va[i] = ti[i];
			vb[i] = tt[i];
		}
		free(ti);
		free(tt);
	} else if (ok) {
		int din = (int)(na / B), dout = (int)(nb / B);
		DtmRegression r;
		float *x = malloc(sizeof(float) * (size_t)din), *y = malloc(sizeof(float) * (size_t)dout);
		ok = x && y && dtm_regression_init(&r, seed, din, dout, err, sizeof err) == 0;
		for (int64_t s = 0; ok && s < B; s++) {
			dtm_regression_sample(&r, (uint64_t)s, x, y);
			for (int k = 0; k < din; k++)
				va[s * din + k] = x[k];
			for (int k = 0; k < dout; k++)
				vb[s * dout + k] = y[k];
		}
		if (ok)
			dtm_regression_free(&r);
		free(x);
		free(y);
	}
	if (ok) {
		ir_eval_set(e, in[0], va);
		ir_eval_set(e, in[1], vb);
	}
	free(va);
	free(vb);
	return ok;
}

int main(int argc, char **argv)
{
	LowerOptions lo = { 0 };
	const char *path = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--mesh") == 0 && i + 1 < argc) {
			lo.mesh = argv[++i];
		} else if (strcmp(argv[i], "-D") == 0 && i + 1 < argc && lo.ndefines < LOWER_MAX_DEFINES) {
			char *def = argv[++i], *eq = strchr(def, '=');
			if (!eq)
				return 2;
			*eq = 0;
			lo.define_names[lo.ndefines] = def;
			lo.define_values[lo.ndefines++] = eq + 1;
		} else {
			path = argv[i];
		}
	}
	if (!path) {
		fprintf(stderr, "usage: dtm_refloss MODEL.dtm [-D n=v]... [--mesh ...]\n");
		return 2;
	}
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	IrModule *m = lower_path(&a, &d, path, &lo);
	IrEval e;
	int rc = 1;
	if (m && d.nerr == 0 && ir_eval_init(&e, m)) {
		uint64_t seed = (uint64_t)m->train.seed;
		ir_eval_init_params(&e, seed);
		if (!fill_inputs(&e, m, seed))
			fprintf(stderr, "error: cannot make the inputs\n");
		else if (ir_eval_run(&e, &d, seed, 1)) {
			printf("%.12g\n", ir_eval_loss(&e));
			rc = 0;
		}
		ir_eval_free(&e);
	}
	diag_summary(&d);
	arena_free(&a);
	return rc;
}
