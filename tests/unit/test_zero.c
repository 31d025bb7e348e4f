/* test_zero.c - passes/zero.c and fsdp_units.c: ZeRO stages 1-3, FSDP units, HSDP and the
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
 * under bf16 equal 18P, 2P + 4P + 12P/N, 2P + 4P/N + 12P/N and 18P/N (f32
 * gradients, the default reduce_dtype), and with reduce_dtype bf16
 * REFERENCE.md's 16P, 2P + 2P + 12P/N, 2P + 2P/N + 12P/N and 16P/N.
 * Prefetch: REFERENCE.md's rule (L = 4, n = 2) and, on gpt with 4 layers,
 * where each unit's gathers land for n = 0, 1, 2 and the planned ACT peak
 * growing with n.
 */
#include "check.h"
#include "testlib_lower.h"
#include "spmd_check.h"
#include "frontend/lower.h"
#include "interp/eval.h"
#include "interp/eval_spmd.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/fsdp_units.h"
#include "passes/zero.h"

#include <stdlib.h>

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
	return test_lower(a, d, src, mesh, defs, NULL);
}

/* bucket_bytes for the next programs (0: the model's): the tiny models'
 * gradients are far below bucket_mb's 1 MB unit */
static int64_t bucket_bytes;

/* The last pass the next programs run: bucket (every collective grouped:
 * ZeRO's per unit or bucket, DDP's in buckets), or fsdp_units for the
 * tests of the per-tensor collectives partition and fsdp_units place. */
static const char *until = "bucket";

/* The per-rank program, through the passes around partition and (until)
 * the grouped collectives. */
static IrModule *spmd(Arena *a, Diag *d, const char *src, const char *mesh,
                      const char *const *defs)
{
	IrModule *m = lower_src(a, d, src, mesh, defs);
	if (m && bucket_bytes)
		m->train.bucket_bytes = bucket_bytes;
	return m && pass_run_until(m, d, NULL, until) ? m : NULL;
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
	int bad = spmd_compare(label, ref, dm, idlim, &d);
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %d mismatches\n", label, bad);
	}
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

/* A layout: train settings added to the model's, hsdp (see model()), the
 * mesh (without pp). */
typedef struct Case {
	const char *label, *train;
	bool hsdp;
	const char *mesh;
} Case;

/* Each case on the MLP with its own SGD (momentum state), the MLP with
 * AdamW in bf16, and GPT, against one device. */
static void run_cases(const Case *cases, size_t n, const char *const *mdefs,
                      const char *const *gdefs)
{
	char label[128], train[512];
	for (size_t k = 0; k < n; k++) {
		bucket_bytes = strstr(cases[k].label, "buckets 600") ? 600 : 0;
		snprintf(label, sizeof label, "mlp %s", cases[k].label);
		char *src = model("models/mlp.dtm", cases[k].train, cases[k].hsdp);
		equivalence(label, src, cases[k].hsdp ? "rep=1,dp=1,tp=1" : "dp=1,tp=1",
		            cases[k].mesh, mdefs, 1);
		free(src);
		snprintf(label, sizeof label, "mlp bf16 adamw %s", cases[k].label);
		snprintf(train, sizeof train, "%s  precision bf16\n" ADAMW, cases[k].train);
		src = model("models/mlp.dtm", train, cases[k].hsdp);
		src = src ? replace(src, "  optimizer sgd(lr = 0.05, momentum = 0.9)\n", "") : NULL;
		/* gradients in f32 (reduce_dtype): each rank's partial term is
		 * rounded to f32 before the reduction, one device's whole sum
		 * once; measured up to 4.8e-8 relative (under 1 ulp) */
		spmd_tol = 2.5e-7;
		equivalence(label, src, cases[k].hsdp ? "rep=1,dp=1,tp=1" : "dp=1,tp=1",
		            cases[k].mesh, mdefs, 1);
		spmd_tol = 1e-9;
		free(src);

		snprintf(label, sizeof label, "gpt %s", cases[k].label);
		src = model("models/gpt.dtm", cases[k].train, cases[k].hsdp);
		char gmesh[64];
		snprintf(gmesh, sizeof gmesh, "pp=1,%s", cases[k].mesh);
		equivalence(label, src, cases[k].hsdp ? "pp=1,rep=1,dp=1,tp=1" : "pp=1,dp=1,tp=1",
		            gmesh, gdefs, 16);
		free(src);
	}
	bucket_bytes = 0;
}

static void test_equivalence(void)
{
	static const Case cases[] = {
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
		/* sequence parallelism: the norms' gradients are partial over
		 * tp too, reduced by one bucket over (dp, tp) (rep, dp, tp) */
		{"ddp x tp sp", "  sequence_parallel true\n", false, "dp=2,tp=2"},
		{"hsdp x tp sp", "  sequence_parallel true\n", true, "rep=2,dp=2,tp=2"},
	};
	run_cases(cases, sizeof cases / sizeof cases[0], mlp_defs, gpt_defs);
}

/* The per-rank model state of the MLP with AdamW in bf16 under `stage`
 * (a zero line, or nothing) on mesh; false (checked) when it does not
 * compile. */
static bool mlp_state(Arena *a, const char *stage, const char *mesh, const char *const *defs,
                      StateMem *out)
{
	char train[512];
	snprintf(train, sizeof train, "%s  precision bf16\n" ADAMW, stage);
	char *src = model("models/mlp.dtm", train, false);
	if (!src)
		return false;
	src = replace(src, "  optimizer sgd(lr = 0.05, momentum = 0.9)\n", "");
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = spmd(a, &d, src, mesh, defs);
	CHECK(m != NULL);
	if (m)
		pass_state_memory(m, out);
	free(src);
	return m != NULL;
}

/* ZeRO at group sizes that divide no dim (issue 16): dp = 3 and 6 on
 * sizes where every param's dims are cut unevenly (torch.chunk shards,
 * padded), with TP and HSDP; each equals one device. */
static const char *const mlp_defs6[] = {"batch", "6", "din", "4", "hidden", "8", "dout", "4",
                                        NULL};
static const char *const gpt_defs6[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
                                        "layers", "2", "batch", "6", NULL};

static void test_any_n(void)
{
	static const Case cases[] = {
		{"zero 1 dp=3", "  zero 1 over dp\n", false, "dp=3,tp=1"},
		{"zero 2 dp=3", "  zero 2 over dp\n", false, "dp=3,tp=1"},
		{"zero 3 dp=3", "  zero 3 over dp\n", false, "dp=3,tp=1"},
		{"zero 1 dp=6", "  zero 1 over dp\n", false, "dp=6,tp=1"},
		{"zero 2 dp=6", "  zero 2 over dp\n", false, "dp=6,tp=1"},
		{"zero 3 dp=6", "  zero 3 over dp\n", false, "dp=6,tp=1"},
		{"fsdp x tp dp=3", "  zero 3 over dp\n", false, "dp=3,tp=2"},
		{"hsdp 2x3 zero 3", "  zero 3 over dp\n", true, "rep=2,dp=3,tp=1"},
	};
	run_cases(cases, sizeof cases / sizeof cases[0], mlp_defs6, gpt_defs6);
}

/* Every param is sharded at dp = 3, which divides none of the MLP's dims
 * (din 4, hidden 8, dout 4): each rank holds torch.chunk's ceil(n / 3)
 * rows of dim 0, padded: w1 [4, 8] 2 x 8, b1 [8] 3, w2 [8, 4] 3 x 4, b2 [4]
 * 2, 33 elements where 76 / 3 would be 25.3; before, all four stayed whole
 * (76 each).  A param of the vocab-parallel GPT embedding [vocab over tp,
 * d] whose vocab dp would cut unevenly after tp takes dp on d instead. */
static void test_memory_any_n(void)
{
	Arena a;
	arena_init(&a);
	const int64_t P3 = 2 * 8 + 3 + 3 * 4 + 2;
	const char *stages[] = {"  zero 1 over dp\n", "  zero 2 over dp\n", "  zero 3 over dp\n"};
	const int64_t P = 4 * 8 + 8 + 8 * 4 + 4;
	/* bf16 params, f32 gradients (reduce_dtype), f32 master and m, v */
	const int64_t want[3][4] = {
		{2 * P, 4 * P, 4 * P3, 8 * P3},
		{2 * P, 4 * P3, 4 * P3, 8 * P3},
		{2 * P3, 4 * P3, 4 * P3, 8 * P3},
	};
	for (int k = 0; k < 3; k++) {
		StateMem s;
		if (mlp_state(&a, stages[k], "dp=3,tp=1", mlp_defs6, &s)) {
			CHECK_EQ_INT(s.param, want[k][0]);
			CHECK_EQ_INT(s.grad, want[k][1]);
			CHECK_EQ_INT(s.master, want[k][2]);
			CHECK_EQ_INT(s.optim, want[k][3]);
		}
	}
	/* GPT-2's vocab 50257 over tp = 2 then dp = 4 would be uneven over
	 * two axes (moved only through the whole dim); d = 16 takes dp evenly */
	const char *const defs[] = {"vocab", "50257", "ctx", "4", "d", "16", "heads", "2",
	                            "layers", "1", "batch", "4", NULL};
	char *src = model("models/gpt.dtm", "  zero 3 over dp\n", false);
	Diag d;
	diag_init(&d, stderr);
	IrModule *m = src ? spmd(&a, &d, src, "pp=1,dp=4,tp=2", defs) : NULL;
	CHECK(m != NULL && d.nerr == 0 && d.nwarn == 0);
	bool found = false;
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_PARAM || !n->name || strcmp(n->name, "wte"))
			continue;
		found = true;
		CHECK_EQ_INT(n->shape[0], 25129); /* ceil(50257 / 2) */
		CHECK_EQ_INT(n->shape[1], 4);     /* 16 / 4 */
	}
	CHECK(found);
	free(src);
	arena_free(&a);
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
		double G = (double)mesh_axes_size(&m->mesh, ir_attr_coll(n)->axes);
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
	/* a mesh with a replica axis: the HSDP copy of the model */
	char *src = model(path, train, strstr(mesh, "rep=") != NULL);
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

/* Whether a node after the loss reads a gather issued before it (through
 * the copy-out's slices and views): reshard_after_forward broken. */
static bool backward_reads_forward_gather(const IrModule *m)
{
	bool *fwd = calloc((size_t)m->nnodes, sizeof(bool));
	bool bad = false;
	for (int i = 0; fwd && i < m->nnodes && !bad; i++) {
		const IrNode *n = m->nodes[i];
		bool view = n->op == IR_OP_SLICE || n->op == IR_OP_RESHAPE || n->op == IR_OP_PERMUTE;
		if (i < m->loss && n->op == IR_OP_ALL_GATHER)
			fwd[i] = true;
		else if (i < m->loss && view && n->nops == 1 && fwd[n->ops[0]])
			fwd[i] = true;
		for (int k = 0; i > m->loss && k < n->nops; k++)
			bad = bad || fwd[n->ops[k]];
	}
	free(fwd);
	return bad;
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
	/* ZeRO-1/2: one reduce_scatter of the gradients, one all_gather of the
	 * updates (passes/coalesce.c: one bucket; per tensor, 4 of each) */
	CHECK_EQ_INT(c1.rs, 1);
	CHECK_EQ_INT(c1.ag, 1);
	CHECK_EQ_INT(c1.ar, 0);
	CHECK_EQ_INT(c2.rs, 1);
	CHECK_EQ_INT(c2.ag, 1);
	CHECK_EQ_INT(c2.ar, 0);
	/* ZeRO-3: the unit (the MLP's 4 params are one, the top level)
	 * gathered in forward, and again in backward for the params the
	 * backward pass reads: w2 (dh = dy w2^T) alone; w1's would be for dx,
	 * which an input does not need, and biases are not read */
	CHECK_EQ_INT(c3.rs, 1);
	CHECK_EQ_INT(c3.ag, 1 + 1);
	CHECK_EQ_INT(c3k.ag, 1);
	CHECK_EQ_INT(c3k.rs, 1);
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

	/* per tensor, as fsdp_units places them */
	until = "fsdp_units";
	/* padded shards (dp = 3): the backward pass gathers its own copy of
	 * w2, through the slice that drops the padding (it read the forward's) */
	static const char *const mlp6[] = {"batch", "6", "din", "4", "hidden", "8", "dout", "4",
	                                   NULL};
	IrModule *p3 = build(&a, "models/mlp.dtm", "  zero 3 over dp\n", "dp=3,tp=1", mlp6);
	if (p3) {
		CHECK(!backward_reads_forward_gather(p3));
		CHECK_EQ_INT(comm_of(p3).ag, 4 + 1);
	}
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
	until = "bucket";
	arena_free(&a);
}

/* ---- prefetch ---- */

static void check_window(int L, int n, int i, bool bwd, int nwant, const int *want)
{
	int out[16];
	int got = pass_fsdp_prefetch(L, n, i, bwd, out);
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
		until = "fsdp_units";
		IrModule *m = build(&a, "models/gpt.dtm", train, "pp=1,dp=4,tp=1", defs);
		until = "bucket";
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
			act[n] = mp.arena_bytes[MEMPLAN_ARENA_ACT];
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "gpt layers=4 zero 3 prefetch %d: ACT %lld bytes\n", n,
			        (long long)act[n]);
		arena_free(&a);
	}
	CHECK(act[0] > 0);
	CHECK(act[1] > act[0]);
	CHECK(act[2] > act[1]);
}

/* ---- one collective per unit or bucket (passes/coalesce.c) ---- */

/* Each layout compiled with per-tensor collectives (until fsdp_units) and
 * coalesced: the coalesced one issues `ag` all_gathers and `rs`
 * reduce_scatters (-1: more than one, fewer than per tensor), no more
 * all_reduces, and moves the same bytes; its SPMD run is checked against
 * one device by the equivalence cases, which run through coalesce. */
static void coalesced(const char *label, const char *path, const char *train, const char *mesh,
                      const char *const *defs, int ag, int rs)
{
	Arena a;
	arena_init(&a);
	until = "fsdp_units";
	IrModule *m0 = build(&a, path, train, mesh, defs);
	until = "coalesce";
	IrModule *m1 = build(&a, path, train, mesh, defs);
	until = "bucket";
	if (m0 && m1) {
		Comm c0 = comm_of(m0), c1 = comm_of(m1);
		if (ag >= 0)
			CHECK_EQ_INT(c1.ag, ag);
		else
			CHECK(c1.ag > 1 && c1.ag < c0.ag);
		if (rs >= 0)
			CHECK_EQ_INT(c1.rs, rs);
		else
			CHECK(c1.rs > 1 && c1.rs < c0.rs);
		CHECK(c1.ar <= c0.ar);
		CHECK_NEAR(c1.bytes / c0.bytes, 1.0, 1e-12);
		CHECK(!backward_reads_forward_gather(m1) || strstr(train, "reshard_after_forward"));
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "%s: all_gathers %d -> %d, reduce_scatters %d -> %d, %.0f "
			        "bytes/rank\n", label, c0.ag, c1.ag, c0.rs, c1.rs, c1.bytes);
	}
	arena_free(&a);
}

static void test_coalesce(void)
{
	static const char *const gpt4[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
	                                   "layers", "4", "batch", "4", NULL};
	static const char *const mlp3[] = {"batch", "6", "din", "4", "hidden", "8", "dout", "4",
	                                   NULL};
	/* dim 0 of w1 (4) uneven over 3, its dim 1 (48) even: split on dim 1 */
	static const char *const mlp48[] = {"batch", "6", "din", "4", "hidden", "48", "dout", "4",
	                                    NULL};
	const char *m4 = "pp=1,dp=4,tp=1";
	/* ZeRO-1/2: the 4-layer GPT's 68 gradients and updates, one bucket */
	coalesced("gpt zero 1", "models/gpt.dtm", "  zero 1 over dp\n", m4, gpt4, 1, 1);
	coalesced("gpt zero 2", "models/gpt.dtm", "  zero 2 over dp\n", m4, gpt4, 1, 1);
	/* ZeRO-3: 5 units (the top level, layer.0-3), gathered in forward and
	 * again in backward, reduced once each */
	coalesced("gpt zero 3", "models/gpt.dtm", "  zero 3 over dp\n", m4, gpt4, 10, 5);
	coalesced("gpt zero 3 keep", "models/gpt.dtm",
	          "  zero 3 over dp\n  reshard_after_forward false\n", m4, gpt4, 5, 5);
	coalesced("gpt zero 3 prefetch 2", "models/gpt.dtm", "  zero 3 over dp\n  prefetch 2\n",
	          m4, gpt4, 10, 5);
	/* FSDP x TP: per unit over dp (and the top-level unit's params that
	 * are split over tp gathered over tp too, in one more); the gradients
	 * of params replicated over tp (the norms) are partial over tp as
	 * well: their all_reduce over tp folded into the unit's, over their
	 * columns of the scattered buffer */
	coalesced("gpt fsdp x tp", "models/gpt.dtm", "  zero 3 over dp\n", "pp=1,dp=2,tp=2",
	          gpt4, 11, 5);
	/* HSDP: per unit over dp, the all_reduce over rep folded in */
	coalesced("gpt hsdp zero 3", "models/gpt.dtm", "  zero 3 over dp\n", "pp=1,rep=2,dp=2,tp=1",
	          gpt4, 10, 5);
	/* small buckets: several, fewer than the tensors */
	bucket_bytes = 600;
	coalesced("gpt zero 1 buckets 600", "models/gpt.dtm", "  zero 1 over dp\n", m4, gpt4, -1,
	          -1);
	bucket_bytes = 0;
	/* padded shards (dp = 3), a dim-1 split (permuted in and out) */
	coalesced("mlp zero 3 dp 3", "models/mlp.dtm", "  zero 3 over dp\n", "dp=3,tp=1", mlp3, 2,
	          1);
	coalesced("mlp zero 1 dp 3", "models/mlp.dtm", "  zero 1 over dp\n", "dp=3,tp=1", mlp3, 1,
	          1);
	coalesced("mlp zero 3 dim 1", "models/mlp.dtm", "  zero 3 over dp\n", "dp=3,tp=1", mlp48,
	          2, 1);
	/* bucket_mb 0: a collective per tensor under ZeRO-1/2 */
	coalesced("mlp zero 1 no buckets", "models/mlp.dtm", "  zero 1 over dp\n  bucket_mb 0\n",
	          "dp=4,tp=1", mlp_defs, 4, 4);
}

/* Through coalesce on one device's reference: the layouts whose
 * collectives it rewrites most (padding, a dim-1 split, HSDP, TP, small
 * buckets), each trained two steps by the SPMD interpreter. */
static void test_coalesce_equivalence(void)
{
	static const Case cases[] = {
		{"zero 3 dp 3", "  zero 3 over dp\n", false, "dp=3,tp=1"},
		{"zero 1 dp 3", "  zero 1 over dp\n", false, "dp=3,tp=1"},
		{"zero 2 dp 3 x tp 2", "  zero 2 over dp\n", false, "dp=3,tp=2"},
		{"hsdp 2 x 3 zero 3", "  zero 3 over dp\n", true, "rep=2,dp=3,tp=1"},
		{"zero 1 buckets 600", "  zero 1 over dp\n", false, "dp=3,tp=1"},
	};
	static const char *const mdefs[] = {"batch", "6", "din", "4", "hidden", "48", "dout", "4",
	                                    NULL};
	static const char *const gdefs[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
	                                    "layers", "2", "batch", "6", NULL};
	run_cases(cases, sizeof cases / sizeof cases[0], mdefs, gdefs);
}

/* ---- memory by the formulas ---- */

static void test_memory(void)
{
	Arena a;
	arena_init(&a);
	const int64_t N = 4, P = 4 * 8 + 8 + 8 * 4 + 4;
	const char *stages[] = {"", "  zero 1 over dp\n", "  zero 2 over dp\n",
	                        "  zero 3 over dp\n"};
	/* REFERENCE.md: bf16 param 2, bf16 grad 2 (reduce_dtype bf16), f32
	 * master 4, m and v 8; the default f32 reduce_dtype makes the grad 4,
	 * Megatron's "bf16 params, fp32 grads 18 -> 6 + 12/d" */
	for (int g = 2; g <= 4; g += 2) {
		const int64_t want[4][4] = {
			{2 * P, g * P, 4 * P, 8 * P},
			{2 * P, g * P, 4 * P / N, 8 * P / N},
			{2 * P, g * P / N, 4 * P / N, 8 * P / N},
			{2 * P / N, g * P / N, 4 * P / N, 8 * P / N},
		};
		const int64_t total[4] = {(14 + g) * P, 2 * P + g * P + 12 * P / N,
		                          2 * P + g * P / N + 12 * P / N, (14 + g) * P / N};
		for (int k = 0; k < 4; k++) {
			char stage[96];
			snprintf(stage, sizeof stage, "%s%s", stages[k],
			         g == 2 ? "  reduce_dtype bf16\n" : "");
			StateMem s;
			if (mlp_state(&a, stage, "dp=4,tp=1", mlp_defs, &s)) {
				CHECK_EQ_INT(s.param, want[k][0]);
				CHECK_EQ_INT(s.grad, want[k][1]);
				CHECK_EQ_INT(s.master, want[k][2]);
				CHECK_EQ_INT(s.optim, want[k][3]);
				CHECK_EQ_INT(s.param + s.grad + s.master + s.optim, total[k]);
			}
		}
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
	test_any_n();
	test_memory_any_n();
	test_coalesce();
	test_coalesce_equivalence();
	return check_report();
}
