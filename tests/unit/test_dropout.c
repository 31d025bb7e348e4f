/* test_dropout.c - dropout masks under every split (ir/dropout.c, issue 14
 * points 3 and 4).
 *
 * A model with dropouts on a [B, T, D] input split over dp, on a hidden
 * activation split over dp and tp, on a [B*T, D] reshape (a batch row
 * spans T elements of dim 0) and on a [T, B, D] permute (the batch in dim
 * 1), compiled with micro-batches (M = 2, 4) and partitioned over dp = 2,
 * dp = 3, tp = 2 and combinations.  The f64 SPMD interpreter runs every
 * rank; each dropout's value, gathered and put back where its micro-batch
 * sits in the full batch, must be the one-device (M = 1) interpreter's,
 * element for element, zeros (dropped elements) at the same places; and
 * two training steps must give the one-device loss, gradients and
 * updates.  Partitioning must not gather a dropout's operand whole: the
 * program has the collectives of the same model without dropout.
 */
#include "check.h"
#include "testlib_lower.h"
#include "spmd_check.h"
#include "interp/eval.h"
#include "interp/eval_spmd.h"
#include "ir/ir.h"
#include "passes/passes.h"

#include <stdlib.h>

static const char model[] =
        "model drop\n"
        "let B = 12, T = 4, D = 6, H = 8\n"
        "mesh (dp = 1, tp = 1)\n"
        "input x : f32[B, T, D] @ [dp, _, _]\n"
        "input y : f32[B, T, D] @ [dp, _, _]\n"
        "param w1 : f32[D, H] @ [_, tp] init normal(0, 0.5)\n"
        "param w2 : f32[H, D] @ [tp, _] init normal(0, 0.5)\n"
        "forward {\n"
        "  a = dropout(x, rate = 0.3)\n"
        "  h = dropout(gelu(a @ w1), rate = 0.5)\n"
        "  r = dropout(reshape(h @ w2, (B * T, D)), rate = 0.2)\n"
        "  p = dropout(permute(a, (1, 0, 2)), rate = 0.4)\n"
        "  loss = mse(reshape(r, (B, T, D)) + permute(p, (1, 0, 2)), y)\n"
        "}\n"
        "train {\n  optimizer sgd(lr = 0.1)\n}\n";

/* model without its dropouts: dropout(E, rate = R) -> (E) */
static char *without_dropout(const char *src)
{
	char *out = malloc(strlen(src) + 1), *o = out;
	for (const char *s = src; *s;) {
		if (strncmp(s, "dropout(", 8) != 0) {
			*o++ = *s++;
			continue;
		}
		s += 8;
		*o++ = '(';
		int depth = 1;
		for (; *s && !(depth == 1 && strncmp(s, ", rate", 6) == 0); s++) {
			depth += (*s == '(') - (*s == ')');
			*o++ = *s;
		}
		while (*s && *s != ')')
			s++;
		if (*s)
			*o++ = *s++;
	}
	*o = 0;
	return out;
}

static IrModule *compile(Arena *a, Diag *d, const char *src, const char *mesh, const char *train,
                         bool partition)
{
	IrModule *m = test_lower(a, d, src, mesh, NULL, train);
	bool ok = m && pass_run_until(m, d, NULL, partition ? "partition" : "optim");
	CHECK(ok);
	return ok ? m : NULL;
}

/* The forward dropout of ref with dm's dropout n's site, or -1. */
static int ref_site(const IrModule *ref, const IrNode *n)
{
	for (int i = 0; i < ref->loss; i++) {
		const IrNode *r = ref->nodes[i];
		if (r->op == IR_OP_DROPOUT && ir_attr_dropout(r)->salt == ir_attr_dropout(n)->salt)
			return i;
	}
	return -1;
}

/* Every forward dropout of dm, gathered, against ref's value at the
 * elements its micro-batch holds of the full batch; returns mismatches.
 * Each element of each ref dropout must be covered exactly once. */
static int compare_masks(const char *label, const IrModule *ref, const IrEval *e,
                         const IrModule *dm, const IrSpmd *s)
{
	int bad = 0;
	char *covered[64] = {0};
	int nsites = 0;
	for (int i = 0; i < dm->loss; i++) {
		const IrNode *n = dm->nodes[i];
		if (n->op != IR_OP_DROPOUT)
			continue;
		int r = ref_site(ref, n);
		CHECK(r >= 0);
		if (r < 0 || r >= 64)
			return bad + 1;
		const IrNode *rn = ref->nodes[r];
		int64_t RN = ir_node_numel(rn);
		if (!covered[r]) {
			covered[r] = calloc((size_t)RN, 1);
			nsites++;
		}
		int64_t g[IR_MAX_RANK], f[IR_MAX_RANK], st[IR_MAX_RANK], c[IR_MAX_RANK] = {0};
		int rk = ir_spmd_global_shape(s, i, g), bd = -1;
		int64_t M = 1, k = 0, X = 1, N = 1;
		const IrAttrDropout *da = ir_attr_dropout(n);
		if (da->has_mb) {
			M = da->mbs;
			k = da->mb;
			bd = (int)da->bdim;
			X = da->binner;
		}
		for (int j = 0; j < rk; j++) {
			f[j] = g[j] * (j == bd ? M : 1);
			N *= g[j];
		}
		CHECK_EQ_INT(N * M, RN);
		for (int64_t j = rk - 1, acc = 1; j >= 0; j--) {
			st[j] = acc;
			acc *= f[j];
		}
		double *v = malloc(sizeof(double) * (size_t)N), mx = 0;
		ir_spmd_gather(s, i, v);
		for (int64_t q = 0; q < RN; q++)
			mx = fabs(e->val[r][q]) > mx ? fabs(e->val[r][q]) : mx;
		for (int64_t q = 0; q < N; q++) {
			int64_t full = 0;
			for (int j = 0; j < rk; j++) {
				int64_t cj = c[j];
				if (j == bd)
					cj = (cj / X * M + k) * X + cj % X;
				full += cj * st[j];
			}
			double want = e->val[r][full];
			if ((want == 0) != (v[q] == 0) || fabs(want - v[q]) > 1e-9 * mx) {
				if (bad < 5)
					fprintf(stderr, "%s: dropout %%%d (site %lld, micro-batch %lld) "
					        "element %lld: %.9g, one device %.9g\n", label, i,
					        (long long)ir_attr_dropout(n)->salt, (long long)k, (long long)full,
					        v[q], want);
				bad++;
			}
			covered[r][full]++;
			for (int j = rk - 1; j >= 0; j--) {
				if (++c[j] < g[j])
					break;
				c[j] = 0;
			}
		}
		free(v);
	}
	CHECK_EQ_INT(nsites, 4);
	for (int r = 0; r < 64; r++) {
		for (int64_t q = 0; covered[r] && q < ir_node_numel(ref->nodes[r]); q++)
			if (covered[r][q] != 1) {
				fprintf(stderr, "%s: element %lld of %%%d drawn %d times\n", label,
				        (long long)q, r, covered[r][q]);
				bad++;
				break;
			}
		free(covered[r]);
	}
	return bad;
}

static void masks(const char *label, const char *mesh, const char *train)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *ref = compile(&a, &d, model, "dp=1,tp=1", NULL, false);
	IrModule *dm = compile(&a, &d, model, mesh, train, true);
	if (!ref || !dm) {
		fprintf(stderr, "%s: compile failed\n", label);
		arena_free(&a);
		return;
	}
	IrEval e;
	IrSpmd s;
	if (spmd_start(ref, dm, 1, &e, &s)) {
		bool ok = ir_eval_run(&e, &d, 7, 3) && ir_spmd_run(&s, &d, 7, 3);
		CHECK(ok);
		int bad = ok ? compare_masks(label, ref, &e, dm, &s) : 0;
		check_count++;
		if (bad) {
			check_failures++;
			fprintf(stderr, "%s: %d dropout elements differ from one device's\n", label, bad);
		}
		ir_spmd_free(&s);
		ir_eval_free(&e);
	}
	int bad = spmd_compare(label, ref, dm, 1, &d);
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %d mismatches in training\n", label, bad);
	}
	arena_free(&a);
}

/* The collectives of a partitioned program: count and elements moved. */
static void collectives(const IrModule *m, int *n, int64_t *elems)
{
	*n = 0;
	*elems = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (ir_op_flags(m->nodes[i]->op) & OPF_COLL) {
			(*n)++;
			*elems += ir_node_numel(m->nodes[m->nodes[i]->ops[0]]);
		}
}

static void no_gather(const char *mesh, const char *train)
{
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	char *plain = without_dropout(model);
	CHECK(strstr(plain, "dropout") == NULL && strstr(plain, "a = (x)") != NULL);
	IrModule *m = compile(&a, &d, model, mesh, train, true);
	IrModule *p = compile(&a, &d, plain, mesh, train, true);
	if (m && p) {
		int n0, n1;
		int64_t e0, e1;
		collectives(m, &n0, &e0);
		collectives(p, &n1, &e1);
		if (n0 != n1 || e0 != e1)
			fprintf(stderr, "%s %s: %d collectives moving %lld elements; without "
			        "dropout %d moving %lld\n", mesh, train ? train : "", n0,
			        (long long)e0, n1, (long long)e1);
		CHECK(n0 == n1 && e0 == e1);
	}
	free(plain);
	arena_free(&a);
}

int main(void)
{
	masks("M=2", "dp=1,tp=1", "microbatches=2");
	masks("M=4", "dp=1,tp=1", "microbatches=4");
	masks("dp=2", "dp=2,tp=1", NULL);
	masks("dp=3", "dp=3,tp=1", NULL);
	masks("tp=2", "dp=1,tp=2", NULL);
	masks("dp=2 x tp=2", "dp=2,tp=2", NULL);
	masks("dp=3, M=2", "dp=3,tp=1", "microbatches=2");
	masks("dp=2 x tp=2, M=2", "dp=2,tp=2", "microbatches=2");
	masks("dp=2, M=3", "dp=2,tp=1", "microbatches=3");
	no_gather("dp=3,tp=1", NULL);
	no_gather("dp=2,tp=2", NULL);
	no_gather("dp=3,tp=1", "microbatches=2");
	return check_report();
}
