/* test_state.c - passes/state.c: ZeRO stages 1-3, FSDP units, HSDP and the
 * memory formulas.
 *
 * Equivalence: models/mlp.dtm and models/gpt.dtm (tiny, every param's dim 0
 * divisible by the zero group) under zero 1, 2 and 3 (with and without
 * reshard_after_forward) over dp = 4, HSDP (rep = 2, dp = 2, zero over dp)
 * and FSDP x TP (dp = 2, tp = 2, zero 3), partitioned and run on every rank
 * by the SPMD interpreter, give the single-device interpreter's loss,
 * gathered gradients and updated params over two steps to 1e-9 relative.
 * Collectives: per stage, which kinds appear, per FSDP unit how many
 * gathers, and the per-rank communication volume against DDP's (REFERENCE.md:
 * ZeRO-1/2 1x, ZeRO-3 1.5x, 1x without reshard_after_forward).  Memory:
 * the per-rank bytes of params, grads, master and Adam state of the MLP
 * under bf16 equal 16P, 2P + 2P + 12P/N, 2P + 2P/N + 12P/N and 16P/N.
 * Prefetch: REFERENCE.md's rule (L = 4, n = 2) and, on gpt with 4 layers,
 * where each unit's gathers land for n = 0, 1, 2 and the planned ACT peak
 * growing with n.
 */
#include "check.h"
#include "frontend/lower.h"
#include "ir/eval.h"
#include "ir/eval_spmd.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/state.h"

#include <stdlib.h>

static uint64_t rng_state;

static double rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

/* s with every `from` replaced by `to` (malloc'd; s is freed). */
static char *replace(char *s, const char *from, const char *to)
{
	size_t lf = strlen(from), lt = strlen(to), n = 0;
	for (const char *p = strstr(s, from); p; p = strstr(p + lf, from))
		n++;
	char *r = malloc(strlen(s) + n * (lt + 1) + 1), *w = r;
	const char *p = s, *q;
	while ((q = strstr(p, from))) {
		memcpy(w, p, (size_t)(q - p));
		w += q - p;
		memcpy(w, to, lt);
		w += lt;
		p = q + lf;
	}
	strcpy(w, p);
	free(s);
	return r;
}

/* The model's source with its zero line dropped and `train` settings added
 * at the top of the train section; hsdp adds a replicate axis in front of
 * dp and splits the batch over both. */
static char *model(const char *path, const char *train, bool hsdp)
{
	char *s = slurp(path);
	CHECK(s != NULL);
	if (!s)
		return NULL;
	s = replace(s, "  zero 0 over dp\n", "");
	char ins[512];
	snprintf(ins, sizeof ins, "train {\n%s", train);
	s = replace(s, "train {\n", ins);
	if (hsdp) {
		s = replace(s, "mesh (dp = 2, tp = 2)", "mesh (rep = 2, dp = 2, tp = 1)");
		s = replace(s, "mesh (pp = 1, dp = 2, tp = 2)", "mesh (pp = 1, rep = 2, dp = 2, tp = 1)");
		s = replace(s, "[dp,", "[(rep, dp),");
	}
	return s;
}

static IrModule *lower_src(Arena *a, Diag *d, const char *src, const char *mesh,
                           const char *const *defs)
{
	SrcFile *sf = arena_alloc(a, sizeof *sf);
	sf->name = "t.dtm";
	sf->text = src;
	sf->len = strlen(src);
	diag_add_file(d, sf);
	LowerOptions o = {.mesh = mesh};
	for (int i = 0; defs && defs[2 * i]; i++) {
		o.define_names[o.ndefines] = defs[2 * i];
		o.define_values[o.ndefines++] = defs[2 * i + 1];
	}
	AstFile af;
	if (!ast_parse(a, d, sf, &af))
		return NULL;
	return lower_file(a, d, &af, &o);
}

/* bucket_bytes for the next programs (0: the model's): the tiny models'
 * gradients are far below bucket_mb's 1 MB unit */
static int64_t bucket_bytes;

/* The per-rank program, through the passes around partition and the
 * gradient buckets. */
static IrModule *spmd(Arena *a, Diag *d, const char *src, const char *mesh,
                      const char *const *defs)
{
	IrModule *m = lower_src(a, d, src, mesh, defs);
	if (m && bucket_bytes)
		m->train.bucket_bytes = bucket_bytes;
	return m && pass_run_until(m, d, NULL, "bucket") ? m : NULL;
}

static int find_named(const IrModule *m, IrOp op, IrRole role, const char *name)
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
static bool close_rel(const double *a, const double *b, int64_t n, double tol, double *err)
{
	double mx = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
		e = fabs(a[i] - b[i]) > e ? fabs(a[i] - b[i]) : e;
	}
	*err = mx > 0 ? e / mx : e;
	return e <= tol * (mx > 1e-300 ? mx : 1e-300) || e == 0;
}

static void global_input(const IrNode *n, int64_t N, int idlim, double *v)
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
static int compare_param(const char *label, int step, const IrModule *ref, const IrEval *e,
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
	} else if (!close_rel(v, e->val[g0], N, 1e-9, &err)) {
		fprintf(stderr, "%s: step %d %s differs (relative %.3g)\n", label, step, gname, err);
		bad++;
	}
	ir_spmd_gather(s, p1, v);
	if (!noise && !close_rel(v, e->val[i], N, 1e-9, &err)) {
		fprintf(stderr, "%s: step %d updated %s differs (relative %.3g)\n", label, step,
		        p->name, err);
		bad++;
	}
	free(v);
	return bad;
}

/* Two training steps of src on mesh against one device running ref_src
 * (NULL: src). */
static void equivalence_ref(const char *label, const char *src, const char *ref_src,
                            const char *single, const char *mesh, const char *const *defs,
                            int idlim)
{
	if (!src)
		return;
	Arena a;
	arena_init(&a);
	Diag d;
	diag_init(&d, stderr);
	IrModule *ref = lower_src(&a, &d, ref_src ? ref_src : src, single, defs);
	bool ok = ref && pass_run_until(ref, &d, NULL, "optim");
	IrModule *dm = ok ? spmd(&a, &d, src, mesh, defs) : NULL;
	CHECK(ok && dm);
	if (!ok || !dm) {
		fprintf(stderr, "%s: pipeline failed\n", label);
		arena_free(&a);
		return;
	}
	IrEval e;
	IrSpmd s;
	CHECK(ir_eval_init(&e, ref));
	CHECK(ir_spmd_init(&s, dm));
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
	int bad = 0;
	for (int step = 1; step <= 2 && ok; step++) {
		ok = ir_eval_run(&e, &d, 7, step) && ir_spmd_run(&s, &d, 7, step);
		CHECK(ok);
		if (!ok)
			break;
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
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %d mismatches\n", label, bad);
	}
	ir_spmd_free(&s);
	ir_eval_free(&e);
	arena_free(&a);
}

static void equivalence(const char *label, const char *src, const char *single,
                        const char *mesh, const char *const *defs, int idlim)
{
	equivalence_ref(label, src, NULL, single, mesh, defs, idlim);
}

static const char *const mlp_defs[] = {"batch", "8", "din", "4", "hidden", "8", "dout", "4",
                                       NULL};
static const char *const gpt_defs[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
                                       "layers", "2", "batch", "4", NULL};

#define ADAMW "  optimizer adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, " \
              "weight_decay = 0.1, clip = 1.0)\n"

static void test_equivalence(void)
{
	static const struct {
		const char *label, *train;
		bool hsdp;
		const char *mesh;
	} cases[] = {
		{"zero 1", "  zero 1 over dp\n", false, "dp=4,tp=1"},
		{"zero 2", "  zero 2 over dp\n", false, "dp=4,tp=1"},
		{"zero 3", "  zero 3 over dp\n", false, "dp=4,tp=1"},
		{"zero 3 keep", "  zero 3 over dp\n  reshard_after_forward false\n", false, "dp=4,tp=1"},
		{"hsdp zero 3", "  zero 3 over dp\n", true, "rep=2,dp=2,tp=1"},
		{"hsdp zero 1", "  zero 1 over dp\n", true, "rep=2,dp=2,tp=1"},
		{"fsdp x tp", "  zero 3 over dp\n", false, "dp=2,tp=2"},
		{"zero 2 x tp", "  zero 2 over dp\n", false, "dp=2,tp=2"},
		/* DDP: one bucket (the default 25 MB), a few (below), none */
		{"ddp", "", false, "dp=4,tp=1"},
		{"ddp x tp", "", false, "dp=2,tp=2"},
		{"ddp buckets 600", "", false, "dp=4,tp=1"},
		{"ddp x tp buckets 600", "", false, "dp=2,tp=2"},
		{"ddp no buckets", "  bucket_mb 0\n", false, "dp=4,tp=1"},
		{"hsdp zero 0", "  zero 0 over dp\n", true, "rep=2,dp=2,tp=1"},
	};
	char label[128], train[512];
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		bucket_bytes = strstr(cases[k].label, "buckets 600") ? 600 : 0;
		/* the MLP with its own SGD (momentum state) and with AdamW in bf16 */
		snprintf(label, sizeof label, "mlp %s", cases[k].label);
		char *src = model("models/mlp.dtm", cases[k].train, cases[k].hsdp);
		equivalence(label, src, cases[k].hsdp ? "rep=1,dp=1,tp=1" : "dp=1,tp=1",
		            cases[k].mesh, mlp_defs, 1);
		free(src);
		snprintf(label, sizeof label, "mlp bf16 adamw %s", cases[k].label);
		snprintf(train, sizeof train, "%s  precision bf16\n" ADAMW, cases[k].train);
		src = model("models/mlp.dtm", train, cases[k].hsdp);
		src = src ? replace(src, "  optimizer sgd(lr = 0.05, momentum = 0.9)\n", "") : NULL;
		equivalence(label, src, cases[k].hsdp ? "rep=1,dp=1,tp=1" : "dp=1,tp=1",
		            cases[k].mesh, mlp_defs, 1);
		free(src);

		snprintf(label, sizeof label, "gpt %s", cases[k].label);
		src = model("models/gpt.dtm", cases[k].train, cases[k].hsdp);
		char gmesh[64];
		snprintf(gmesh, sizeof gmesh, "pp=1,%s", cases[k].mesh);
		equivalence(label, src, cases[k].hsdp ? "pp=1,rep=1,dp=1,tp=1" : "pp=1,dp=1,tp=1",
		            gmesh, gpt_defs, 16);
		free(src);
	}
	bucket_bytes = 0;
}

/* Gradient accumulation (passes/microbatch.c): microbatches 2 and 4 on
 * one device and under DDP (with buckets, and with zero 1) equal the M = 1
 * single-device run: loss (the mean over the whole batch), gradients and
 * updated params, to 1e-9. */
static void test_microbatches(void)
{
	static const char *const gpt8[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
	                                   "layers", "2", "batch", "8", NULL};
	static const struct {
		int M;
		const char *extra, *mesh;
	} cases[] = {
		{2, "", "dp=1,tp=1"}, {4, "", "dp=1,tp=1"}, {2, "", "dp=4,tp=1"},
		{4, "", "dp=2,tp=1"}, {2, "", "dp=2,tp=2"}, {2, "  zero 1 over dp\n", "dp=2,tp=1"},
		{2, "  zero 3 over dp\n", "dp=2,tp=1"},
	};
	char *ref_mlp = model("models/mlp.dtm", "", false);
	char *ref_gpt = model("models/gpt.dtm", "", false);
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		char train[256], label[128], gmesh[64];
		snprintf(train, sizeof train, "%s  microbatches %d\n", cases[k].extra, cases[k].M);
		char *src = model("models/mlp.dtm", train, false);
		src = src ? replace(src, "  microbatches 1\n", "") : NULL;
		snprintf(label, sizeof label, "mlp microbatches %d %s%s", cases[k].M, cases[k].mesh,
		         cases[k].extra);
		equivalence_ref(label, src, ref_mlp, "dp=1,tp=1", cases[k].mesh, mlp_defs, 1);
		free(src);
		src = model("models/gpt.dtm", train, false);
		src = src ? replace(src, "  microbatches 1\n", "") : NULL;
		snprintf(label, sizeof label, "gpt microbatches %d %s%s", cases[k].M, cases[k].mesh,
		         cases[k].extra);
		snprintf(gmesh, sizeof gmesh, "pp=1,%s", cases[k].mesh);
		equivalence_ref(label, src, ref_gpt, "pp=1,dp=1,tp=1", gmesh, gpt8, 16);
		free(src);
	}
	free(ref_mlp);
	free(ref_gpt);
}

/* ---- collectives ---- */

typedef struct Comm {
	int ag, rs, ar;  /* non-scalar collectives */
	double bytes;    /* per rank, ring: (G-1)/G of the full buffer, all_reduce twice */
} Comm;

static Comm comm_of(const IrModule *m)
{
	Comm c = {0};
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (!(ir_op_flags(n->op) & OPF_COLL) || n->rank == 0)
			continue;
		double G = (double)mesh_axes_size(&m->mesh, n->attrs.mesh_axes);
		double out = (double)(ir_node_numel(n) * ir_dtype_size(n->dtype));
		double in = (double)(ir_node_numel(m->nodes[n->ops[0]]) * ir_dtype_size(n->dtype));
		if (n->op == IR_OP_ALL_GATHER) {
			c.ag++;
			c.bytes += out * (G - 1) / G;
		} else if (n->op == IR_OP_REDUCE_SCATTER) {
			c.rs++;
			c.bytes += in * (G - 1) / G;
		} else if (n->op == IR_OP_ALL_REDUCE) {
			c.ar++;
			c.bytes += 2 * in * (G - 1) / G;
		}
	}
	return c;
}

static IrModule *build(Arena *a, const char *path, const char *train, const char *mesh,
                       const char *const *defs)
{
	Diag d;
	diag_init(&d, stderr);
	char *src = model(path, train, false);
	if (!src)
		return NULL;
	/* the module keeps pointers into its source */
	char *keep = arena_alloc(a, strlen(src) + 1);
	strcpy(keep, src);
	free(src);
	IrModule *m = spmd(a, &d, keep, mesh, defs);
	CHECK(m != NULL);
	return m;
}

/* The root param of a gathered param or a view of one, or -1. */
static int gather_root(const IrModule *m, int i)
{
	while (i >= 0 && ((ir_op_flags(m->nodes[i]->op) & OPF_COLL) ||
	                  m->nodes[i]->op == IR_OP_PERMUTE || m->nodes[i]->op == IR_OP_RESHAPE))
		i = m->nodes[i]->nops ? m->nodes[i]->ops[0] : -1;
	return i >= 0 && m->nodes[i]->op == IR_OP_PARAM ? i : -1;
}

static bool in_unit(const char *name, const char *unit)
{
	size_t lu = strlen(unit);
	return lu ? strncmp(name, unit, lu) == 0 : strchr(name, '.') == NULL;
}

/* zero 3 on gpt: per unit (layer.0, layer.1, the top level) every param is
 * gathered once in forward, and the forward gathers of a block are
 * adjacent.  With reshard_after_forward nothing after the loss reads a
 * forward gather (the backward pass gathers its own copies, adjacent per
 * block); without it the backward pass gathers nothing. */
static void check_units(const IrModule *m, bool reshard)
{
	static const char *const units[] = {"layer.0.", "layer.1.", ""};
	for (int u = 0; u < 3; u++) {
		int nparams = 0, nfwd = 0, nbwd = 0, first[2] = {-1, -1}, last[2] = {-1, -1};
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op == IR_OP_PARAM && n->name && in_unit(n->name, units[u]))
				nparams++;
			for (int k = 0; i > m->loss && k < n->nops; k++) {
				int o = n->ops[k];
				if (o < m->loss && gather_root(m, o) >= 0 && o != gather_root(m, o) &&
				    in_unit(m->nodes[gather_root(m, o)]->name, units[u])) {
					CHECK(!reshard);
					break;
				}
			}
			int r = n->op == IR_OP_ALL_GATHER ? gather_root(m, i) : -1;
			if (r < 0 || !in_unit(m->nodes[r]->name, units[u]))
				continue;
			int b = i > m->loss;
			if (b)
				nbwd++;
			else
				nfwd++;
			first[b] = first[b] < 0 ? i : first[b];
			last[b] = i;
		}
		CHECK(nparams > 0);
		CHECK_EQ_INT(nfwd, nparams);
		CHECK(reshard ? nbwd > 0 : nbwd == 0);
		/* the top-level unit's embedding and head uses are far apart */
		if (u < 2) {
			CHECK_EQ_INT(last[0] - first[0] + 1, nfwd);
			CHECK(!reshard || last[1] - first[1] + 1 == nbwd);
		}
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "unit '%s': %d params, gathered %d in forward, %d in backward\n",
			        units[u], nparams, nfwd, nbwd);
	}
}

static void test_collectives(void)
{
	Arena a;
	arena_init(&a);
	const char *mesh = "dp=4,tp=1";
	IrModule *m0 = build(&a, "models/mlp.dtm", "", mesh, mlp_defs);
	IrModule *m1 = build(&a, "models/mlp.dtm", "  zero 1 over dp\n", mesh, mlp_defs);
	IrModule *m2 = build(&a, "models/mlp.dtm", "  zero 2 over dp\n", mesh, mlp_defs);
	IrModule *m3 = build(&a, "models/mlp.dtm", "  zero 3 over dp\n", mesh, mlp_defs);
	IrModule *m3k = build(&a, "models/mlp.dtm",
	                      "  zero 3 over dp\n  reshard_after_forward false\n", mesh, mlp_defs);
	if (!m0 || !m1 || !m2 || !m3 || !m3k) {
		arena_free(&a);
		return;
	}
	Comm c0 = comm_of(m0), c1 = comm_of(m1), c2 = comm_of(m2), c3 = comm_of(m3);
	Comm c3k = comm_of(m3k);
	/* 4 params: DDP all_reduces their gradients in one bucket
	 * (passes/bucket.c; test_bucket.c counts smaller buckets) */
	CHECK_EQ_INT(c0.ar, 1);
	CHECK_EQ_INT(c0.ag + c0.rs, 0);
	/* ZeRO-1/2: reduce_scatter each gradient, all_gather each update */
	CHECK_EQ_INT(c1.rs, 4);
	CHECK_EQ_INT(c1.ag, 4);
	CHECK_EQ_INT(c1.ar, 0);
	CHECK_EQ_INT(c2.rs, 4);
	CHECK_EQ_INT(c2.ag, 4);
	CHECK_EQ_INT(c2.ar, 0);
	/* ZeRO-3: gathers in forward and again in backward for the params
	 * the backward pass reads: w2 (dh = dy w2^T); w1's would be for dx,
	 * which an input does not need, and biases are not read */
	CHECK_EQ_INT(c3.rs, 4);
	CHECK_EQ_INT(c3.ag, 4 + 1);
	CHECK_EQ_INT(c3k.ag, 4);
	CHECK_EQ_INT(c3k.rs, 4);
	CHECK_NEAR(c1.bytes / c0.bytes, 1.0, 1e-12);
	CHECK_NEAR(c2.bytes / c0.bytes, 1.0, 1e-12);
	CHECK_NEAR(c3k.bytes / c0.bytes, 1.0, 1e-12);
	/* REFERENCE.md's 1.5x counts a backward gather of every param: it
	 * holds when the backward pass reads them all; the MLP's reads w2
	 * only, so the ratio is 1 + w2 / (2 P) */
	double P = 4 * 8 + 8 + 8 * 4 + 4;
	CHECK_NEAR(c3.bytes / c0.bytes, 1.0 + 32.0 / (2 * P), 1e-12);
	if (getenv("DTM_TEST_VERBOSE"))
		fprintf(stderr, "mlp bytes/rank: ddp %.0f zero1 %.0f zero2 %.0f zero3 %.0f keep %.0f\n",
		        c0.bytes, c1.bytes, c2.bytes, c3.bytes, c3k.bytes);

	IrModule *g0 = build(&a, "models/gpt.dtm", "", "pp=1,dp=4,tp=1", gpt_defs);
	IrModule *g3 = build(&a, "models/gpt.dtm", "  zero 3 over dp\n", "pp=1,dp=4,tp=1",
	                     gpt_defs);
	IrModule *g3k = build(&a, "models/gpt.dtm", "  zero 3 over dp\n  reshard_after_forward "
	                      "false\n", "pp=1,dp=4,tp=1", gpt_defs);
	if (g0 && g3 && g3k) {
		check_units(g3, true);
		check_units(g3k, false);
		Comm d0 = comm_of(g0), d3 = comm_of(g3), d3k = comm_of(g3k);
		CHECK(d3.bytes > d3k.bytes);
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "gpt bytes/rank: ddp %.0f zero3 %.0f keep %.0f (ag %d/%d, rs "
			        "%d/%d)\n", d0.bytes, d3.bytes, d3k.bytes, d3.ag, d3k.ag, d3.rs, d3k.rs);
	}
	arena_free(&a);
}

/* ---- prefetch ---- */

static void check_window(int L, int n, int i, bool bwd, int nwant, const int *want)
{
	int out[16];
	int got = pass_state_prefetch(L, n, i, bwd, out);
	CHECK_EQ_INT(got, nwant);
	for (int k = 0; k < got && k < nwant; k++)
		CHECK_EQ_INT(out[k], want[k]);
}

/* REFERENCE.md's worked layout, L = 4, n = 2: forward {0:[1,2], 1:[2,3]},
 * backward {3:[2,1], 2:[1,0]}, nothing for the others; and the edges. */
static void test_prefetch_rule(void)
{
	check_window(4, 2, 0, false, 2, (const int[]){1, 2});
	check_window(4, 2, 1, false, 2, (const int[]){2, 3});
	check_window(4, 2, 2, false, 0, NULL);
	check_window(4, 2, 3, false, 0, NULL);
	check_window(4, 2, 3, true, 2, (const int[]){2, 1});
	check_window(4, 2, 2, true, 2, (const int[]){1, 0});
	check_window(4, 2, 1, true, 0, NULL);
	check_window(4, 2, 0, true, 0, NULL);
	/* n = 1: the next unit; n = 0: none; deeper than L - 1: all ahead */
	for (int i = 0; i < 4; i++) {
		check_window(4, 1, i, false, i < 3, (const int[]){i + 1});
		check_window(4, 1, i, true, i > 0, (const int[]){i - 1});
		check_window(4, 0, i, false, 0, NULL);
		check_window(4, 0, i, true, 0, NULL);
	}
	check_window(4, 9, 0, false, 3, (const int[]){1, 2, 3});
	check_window(4, 9, 3, true, 3, (const int[]){2, 1, 0});
	check_window(4, 9, 1, false, 0, NULL);
	check_window(1, 1, 0, false, 0, NULL);
}

static bool chain_op(IrOp op)
{
	return (ir_op_flags(op) & OPF_COLL) || op == IR_OP_PERMUTE || op == IR_OP_RESHAPE;
}

/* Per unit, the first all_gather of its params and the first use (a node
 * not itself a gather or view) of a gathered param, forward (b = 0) and
 * backward (b = 1). */
static void unit_points(const IrModule *m, const char *unit, int gather[2], int use[2])
{
	gather[0] = gather[1] = use[0] = use[1] = -1;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int b = i > m->loss;
		int r = n->op == IR_OP_ALL_GATHER ? gather_root(m, i) : -1;
		if (r >= 0 && in_unit(m->nodes[r]->name, unit) && gather[b] < 0)
			gather[b] = i;
		for (int k = 0; !chain_op(n->op) && use[b] < 0 && k < n->nops; k++) {
			int o = n->ops[k], g = gather_root(m, o);
			if (g >= 0 && g != o && in_unit(m->nodes[g]->name, unit))
				use[b] = i;
		}
	}
}

/* gpt with 4 layers, zero 3 over dp = 4, prefetch 0, 1, 2: units in order
 * of first forward use "", layer.0 .. layer.3 (0..4); backward, the head
 * (top level) starts first, so the rule's index is layer.k = k, "" = 4.
 * Unit j's forward gathers come in front of unit max(j-n, 0)'s first use
 * and after unit j-n-1's; its backward gathers in front of unit
 * min(j+n, 4)'s first backward use and after unit j+n+1's.  Memory: the
 * planned ACT arena grows with n (n more gathered units live at once). */
static void test_prefetch(void)
{
	static const char *const defs[] = {"layers", "4", NULL};
	static const char *const fwd[] = {"", "layer.0.", "layer.1.", "layer.2.", "layer.3."};
	static const char *const bwd[] = {"layer.0.", "layer.1.", "layer.2.", "layer.3.", ""};
	int64_t act[3] = {0};
	for (int n = 0; n < 3; n++) {
		Arena a;
		arena_init(&a);
		char train[128];
		snprintf(train, sizeof train, "  zero 3 over dp\n  prefetch %d\n", n);
		IrModule *m = build(&a, "models/gpt.dtm", train, "pp=1,dp=4,tp=1", defs);
		if (!m) {
			arena_free(&a);
			continue;
		}
		check_units(m, true);
		int fg[5][2], fu[5][2], bg[5][2], bu[5][2];
		for (int j = 0; j < 5; j++) {
			unit_points(m, fwd[j], fg[j], fu[j]);
			unit_points(m, bwd[j], bg[j], bu[j]);
		}
		for (int j = 0; j < 5; j++) {
			int at = j - n > 0 ? j - n : 0, before = j - n - 1;
			CHECK(fg[j][0] >= 0 && fg[j][0] < fu[at][0]);
			CHECK(before < 0 || fg[j][0] > fu[before][0]);
			at = j + n < 4 ? j + n : 4;
			int after = j + n + 1;
			CHECK(bg[j][1] > m->loss && bg[j][1] < bu[at][1]);
			CHECK(after > 4 || bg[j][1] > bu[after][1]);
		}
		Diag d;
		diag_init(&d, stderr);
		FusePlan fp;
		MemPlan mp;
		bool ok = pass_fuse_plan(m, &a, &d, &fp) && pass_memplan(m, &fp, &a, &d, &mp);
		CHECK(ok);
		if (ok)
			act[n] = mp.arena_bytes[DTM_ARENA_ACT];
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "gpt layers=4 zero 3 prefetch %d: ACT %lld bytes\n", n,
			        (long long)act[n]);
		arena_free(&a);
	}
	CHECK(act[0] > 0);
	CHECK(act[1] > act[0]);
	CHECK(act[2] > act[1]);
}

/* ---- memory by the formulas ---- */

static void test_memory(void)
{
	Arena a;
	arena_init(&a);
	const int64_t N = 4, P = 4 * 8 + 8 + 8 * 4 + 4;
	const char *stages[] = {"", "  zero 1 over dp\n", "  zero 2 over dp\n",
	                        "  zero 3 over dp\n"};
	/* REFERENCE.md: bf16 param 2, bf16 grad 2, f32 master 4, m and v 8 */
	const int64_t want[4][4] = {
		{2 * P, 2 * P, 4 * P, 8 * P},
		{2 * P, 2 * P, 4 * P / N, 8 * P / N},
		{2 * P, 2 * P / N, 4 * P / N, 8 * P / N},
		{2 * P / N, 2 * P / N, 4 * P / N, 8 * P / N},
	};
	const int64_t total[4] = {16 * P, 2 * P + 2 * P + 12 * P / N, 2 * P + 2 * P / N + 12 * P / N,
	                          16 * P / N};
	for (int k = 0; k < 4; k++) {
		char train[512];
		snprintf(train, sizeof train, "%s  precision bf16\n" ADAMW, stages[k]);
		char *src = model("models/mlp.dtm", train, false);
		if (!src)
			continue;
		src = replace(src, "  optimizer sgd(lr = 0.05, momentum = 0.9)\n", "");
		Diag d;
		diag_init(&d, stderr);
		IrModule *m = spmd(&a, &d, src, "dp=4,tp=1", mlp_defs);
		CHECK(m != NULL);
		if (m) {
			StateMem s;
			pass_state_memory(m, &s);
			CHECK_EQ_INT(s.param, want[k][0]);
			CHECK_EQ_INT(s.grad, want[k][1]);
			CHECK_EQ_INT(s.master, want[k][2]);
			CHECK_EQ_INT(s.optim, want[k][3]);
			CHECK_EQ_INT(s.param + s.grad + s.master + s.optim, total[k]);
		}
		free(src);
	}
	arena_free(&a);
}

int main(void)
{
	test_equivalence();
	test_microbatches();
	test_collectives();
	test_prefetch_rule();
	test_prefetch();
	test_memory();
	return check_report();
}
