/* test_accumulate.c - passes/accumulate.c: weight gradients summed over
 * micro-batches by their GEMMs (matmul_wgrad_acc, beta = 1).
 *
 * For models/mlp.dtm and models/gpt.dtm (tiny) with micro-batches, one
 * device and DDP (with tensor parallelism, ZeRO-1, bf16), the program
 * through `accumulate` against the same program through `attn_stats`:
 *  - the count of sums fused: every weight's M - 1 micro-batch sums, the
 *    last one grad.P itself on one device and under ZeRO-1 (its node then
 *    the matmul_wgrad_acc), else an activation the bucket's all_reduce
 *    reads;
 *  - no add of an activation or of a grad.P is left with a matmul_wgrad
 *    operand read only there;
 *  - every grad.P's storage is in the GRAD arena and carries its identity
 *    (MemPlanBuf.ident), the GRAD arena no larger than without the pass;
 *  - identity: run by the f64 SPMD interpreter two steps from the same
 *    params and inputs, both give the same loss, gradients and updated
 *    params bit for bit (in f64 acc + x^T dy is the add's own sum);
 *  - equivalence: the fused program gives the single-device M = 1
 *    interpreter's values (spmd_check.h, 1e-9 relative);
 *  - memory: memplan's ACT peak is no larger with the pass, and smaller
 *    where a gradient buffer per weight goes (the MLP's at M = 4).
 * The refusals (an accumulator read again, a reshape, one that comes after
 * the gradient) are tests/passes/accumulate/refused.ir; the compiled
 * binaries' losses tests/e2e/accum.sh (M = 2 and 4, one device and DDP,
 * against M = 1 to 1e-5).
 */
#include "check.h"
#include "testlib_lower.h"
#include "spmd_check.h"
#include "interp/eval.h"
#include "interp/eval_spmd.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "passes/memplan.h"

#include <stdlib.h>
#include <string.h>

static const char *const mlp_defs[] = {"batch", "8", "din", "4", "hidden", "8", "dout", "4",
                                       NULL};
static const char *const gpt_defs[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
                                       "layers", "2", "batch", "8", NULL};

static int count_op(const IrModule *m, IrOp op)
{
	int n = 0;
	for (int i = 0; i < m->nnodes; i++)
		n += m->nodes[i]->op == op;
	return n;
}

/* Adds of an activation matmul_wgrad read only there, onto an activation:
 * what the pass fuses when the order and storage allow. */
static int fusable_left(const IrModule *m)
{
	int *uses = calloc((size_t)m->nnodes + 1, sizeof(int)), n = 0;
	for (int i = 0; i < m->nnodes; i++)
		for (int k = 0; k < m->nodes[i]->nops; k++)
			uses[m->nodes[i]->ops[k]]++;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *s = m->nodes[i];
		if (s->op != IR_OP_ADD || (s->role != IR_ROLE_ACT && s->role != IR_ROLE_GRAD))
			continue;
		for (int k = 0; k < 2; k++) {
			const IrNode *w = m->nodes[s->ops[k]];
			n += w->op == IR_OP_MATMUL_WGRAD && uses[w->id] == 1;
		}
	}
	free(uses);
	return n;
}

/* The planned bytes of arena k (-1: memplan failed); each grad.P's
 * storage checked: in the GRAD arena, carrying its identity. */
static int64_t arena_bytes(const IrModule *m, int k)
{
	PassAnalyses an = {0};
	Diag d;
	diag_init(&d, stderr);
	bool ok = pass_analyses(m, &an, &d);
	CHECK(ok);
	if (!ok)
		return -1;
	for (int i = 0; i < m->nnodes; i++) {
		if (m->nodes[i]->role != IR_ROLE_GRAD)
			continue;
		const MemPlanBuf *o = &an.mem->buf[an.mem->buf[i].owner];
		CHECK(o->arena == MEMPLAN_ARENA_GRAD && o->ident == i);
	}
	return an.mem->arena_bytes[k];
}

/* Runs a and b (the same program, b after accumulate) two steps by the
 * SPMD interpreter from the same state; returns the values that differ in
 * any bit: the loss, every gradient and every param. */
static int identity(const char *label, const IrModule *a, const IrModule *b, int idlim)
{
	IrSpmd s[2];
	const IrModule *ms[2] = {a, b};
	bool ok = ir_spmd_init(&s[0], a);
	ok = ok && ir_spmd_init(&s[1], b);
	CHECK(ok);
	if (!ok)
		return 1;
	for (int k = 0; k < 2; k++)
		ir_spmd_init_params(&s[k], 42);
	for (int i = 0; i < a->nnodes; i++) {
		const IrNode *n = a->nodes[i];
		if (n->op != IR_OP_INPUT)
			continue;
		int64_t N = ir_spmd_global_numel(&s[0], i);
		double *v = malloc(sizeof(double) * (size_t)N);
		global_input(n, N, idlim, v);
		ir_spmd_set_global(&s[0], i, v);
		int j = find_named(b, IR_OP_INPUT, n->role, n->name);
		CHECK(j >= 0);
		if (j >= 0)
			ir_spmd_set_global(&s[1], j, v);
		free(v);
	}
	Diag d;
	diag_init(&d, stderr);
	int bad = 0, compared = 0;
	for (int step = 1; step <= 2 && ok; step++) {
		ok = ir_spmd_run(&s[0], &d, 7, step) && ir_spmd_run(&s[1], &d, 7, step);
		CHECK(ok);
		double l[2];
		for (int k = 0; ok && k < 2; k++)
			ir_spmd_gather(&s[k], ms[k]->loss, &l[k]);
		if (ok && memcmp(&l[0], &l[1], sizeof l[0])) {
			fprintf(stderr, "%s: step %d loss %.17g vs %.17g\n", label, step, l[0], l[1]);
			bad++;
		}
		for (int i = 0; ok && i < a->nnodes; i++) {
			const IrNode *n = a->nodes[i];
			if (!(n->op == IR_OP_PARAM || n->role == IR_ROLE_GRAD) || !n->name)
				continue;
			int j = find_named(b, n->op == IR_OP_PARAM ? IR_OP_PARAM : IR_OP_COUNT, n->role,
			                   n->name);
			CHECK(j >= 0);
			if (j < 0)
				continue;
			int64_t N = ir_spmd_global_numel(&s[0], i);
			double *v0 = malloc(sizeof(double) * (size_t)N);
			double *v1 = malloc(sizeof(double) * (size_t)N);
			ir_spmd_gather(&s[0], i, v0);
			ir_spmd_gather(&s[1], j, v1);
			if (memcmp(v0, v1, sizeof(double) * (size_t)N)) {
				fprintf(stderr, "%s: step %d %s differs\n", label, step, n->name);
				bad++;
			}
			compared++;
			free(v0);
			free(v1);
		}
	}
	CHECK(compared > 0);
	ir_spmd_free(&s[0]);
	ir_spmd_free(&s[1]);
	return bad;
}

typedef struct Case {
	const char *model; /* "mlp" or "gpt" */
	const char *mesh;
	const char *train[3]; /* --train overrides, NULL-terminated */
	int fused;            /* the sums the pass fuses */
	bool equiv;           /* compared with one device, M = 1 */
	bool smaller;         /* the ACT peak goes down */
} Case;

static void run_case(const Case *c)
{
	bool gpt = !strcmp(c->model, "gpt");
	char path[64], label[256];
	snprintf(path, sizeof path, "models/%s.dtm", c->model);
	snprintf(label, sizeof label, "%s %s %s %s", c->model, c->mesh, c->train[0],
	         c->train[1] ? c->train[1] : "");
	char *src = slurp(path);
	CHECK(src != NULL);
	if (!src)
		return;
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	const char *const *defs = gpt ? gpt_defs : mlp_defs;
	IrModule *m0 = test_lower_trains(&a, &d, src, c->mesh, defs, c->train);
	bool ok = m0 && pass_run_until(m0, &d, NULL, "attn_stats");
	IrModule *m1 = ok ? ir_module_clone(&a, m0) : NULL;
	ok = m1 && pass_run_until(m1, &d, NULL, "accumulate");
	CHECK(ok);
	if (!ok) {
		fprintf(stderr, "%s: pipeline failed\n", label);
		goto out;
	}
	int fused = count_op(m1, IR_OP_MATMUL_WGRAD_ACC);
	if (fused != c->fused)
		fprintf(stderr, "%s: %d sums fused, expected %d\n", label, fused, c->fused);
	CHECK(fused == c->fused);
	CHECK(count_op(m0, IR_OP_ADD) - count_op(m1, IR_OP_ADD) == fused);
	CHECK(count_op(m0, IR_OP_MATMUL_WGRAD) - count_op(m1, IR_OP_MATMUL_WGRAD) == fused);
	CHECK(fusable_left(m1) == 0);
	int idlim = gpt ? 16 : 1;
	int bad = identity(label, m0, m1, idlim);
	if (bad)
		fprintf(stderr, "%s: %d values differ with the pass\n", label, bad);
	CHECK(bad == 0);
	if (c->equiv) {
		IrModule *ref = test_lower(&a, &d, src, gpt ? "pp=1,dp=1,tp=1" : "dp=1,tp=1", defs,
		                           NULL);
		ok = ref && pass_run_until(ref, &d, NULL, "optim");
		CHECK(ok);
		if (ok) {
			bad = spmd_compare(label, ref, m1, idlim, &d);
			if (bad)
				fprintf(stderr, "%s: %d mismatches against one device\n", label, bad);
			CHECK(bad == 0);
		}
	}
	CHECK(arena_bytes(m1, MEMPLAN_ARENA_GRAD) == arena_bytes(m0, MEMPLAN_ARENA_GRAD));
	int64_t p0 = arena_bytes(m0, MEMPLAN_ARENA_ACT), p1 = arena_bytes(m1, MEMPLAN_ARENA_ACT);
	if (c->smaller ? !(p1 < p0) : !(p1 <= p0))
		fprintf(stderr, "%s: ACT peak %lld bytes with the pass, %lld without\n", label,
		        (long long)p1, (long long)p0);
	CHECK(p1 >= 0 && (c->smaller ? p1 < p0 : p1 <= p0));
out:
	arena_free(&a);
	free(src);
}

static void test_cases(void)
{
	/* the MLP's weights: w1, w2; the GPT's: 6 per layer and the head's
	 * transpose(wte), whose gradient is summed before it is transposed
	 * and added to the embedding's */
	static const Case cases[] = {
		{"mlp", "dp=1,tp=1", {"microbatches=4", NULL}, 2 * 3, true, true},
		{"mlp", "dp=2,tp=1", {"microbatches=4", NULL}, 2 * 3, true, true},
		{"mlp", "dp=2,tp=2", {"microbatches=2", NULL}, 2 * 1, true, false},
		/* 1-row micro-batches over dp = 2 (padded): the sums come after
		 * the gradients, each fused one's accumulator a later sum */
		{"mlp", "dp=2,tp=1", {"microbatches=8", NULL}, 2 * 7, true, true},
		{"mlp", "dp=2,tp=1", {"microbatches=4", "precision=bf16", NULL}, 2 * 3, false, true},
		/* ZeRO-1's last sum is grad.P, then reduce_scattered */
		{"mlp", "dp=2,tp=1", {"microbatches=4", "zero=1", NULL}, 2 * 3, true, true},
		{"gpt", "pp=1,dp=1,tp=1", {"microbatches=2", NULL}, 13, true, false},
		{"gpt", "pp=1,dp=2,tp=1", {"microbatches=2", NULL}, 13, true, false},
		{"gpt", "pp=1,dp=2,tp=2", {"microbatches=4", NULL}, 13 * 3, false, false},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		run_case(&cases[k]);
}

int main(void)
{
	test_cases();
	return check_report();
}
