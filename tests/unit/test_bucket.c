/* test_bucket.c - passes/bucket.c: DDP gradient buckets.
 *
 * models/gpt.dtm (tiny: 2 layers, 36 params) under DDP over dp = 4: with
 * the default 25 MB one all_reduce reduces every gradient; with a bucket of
 * about a third of the gradient bytes, 3 do; with bucket_mb 0, one per
 * gradient.  Buckets follow the reverse order of the params' first use
 * (the first bucket holds lnf, the head's gradients and the last layer's;
 * the last holds the embedding's), every bucket's all_reduce sits right
 * after the last of its gradients is produced, and no all_reduce over a
 * flat buffer is bigger than bucket_bytes plus its last gradient.  With
 * microbatches 2 the count is the same (the micro-batch terms are summed
 * before the one reduction).  A batch split over (rep, dp) is bucketed as
 * one over dp is (test_two_axes).  That the
 * bucketed programs still compute the single-device function is
 * test_zero.c's (ddp cases, f64 SPMD interpreter) and tests/e2e/equiv.sh's
 * (the compiled binaries).
 */
#include "check.h"
#include "testlib.h"
#include "frontend/lower.h"
#include "ir/ir.h"
#include "passes/passes.h"

#include <stdlib.h>


static const char *const gpt_defs[] = {"vocab", "16", "ctx", "4", "d", "8", "heads", "2",
                                       "layers", "2", "batch", "4", NULL};

/* gpt through `bucket` on mesh with the given bucket_bytes (-1: the
 * model's). */
static IrModule *build(Arena *a, const char *src, const char *mesh, int64_t bucket)
{
	Diag d;
	diag_init(&d, stderr);
	SrcFile *sf = arena_alloc(a, sizeof *sf);
	sf->name = "gpt.dtm";
	sf->text = src;
	sf->len = strlen(src);
	diag_add_file(&d, sf);
	LowerOptions o = {.mesh = mesh};
	for (int i = 0; gpt_defs[2 * i]; i++) {
		o.define_names[o.ndefines] = gpt_defs[2 * i];
		o.define_values[o.ndefines++] = gpt_defs[2 * i + 1];
	}
	AstFile af;
	IrModule *m = ast_parse(a, &d, sf, &af) ? lower_file(a, &d, &af, &o) : NULL;
	if (m && bucket >= 0)
		m->train.bucket_bytes = bucket;
	bool ok = m && pass_run_until(m, &d, NULL, "bucket");
	CHECK(ok);
	return ok ? m : NULL;
}

static int count_params(const IrModule *m, int64_t *bytes)
{
	int n = 0;
	*bytes = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_PARAM) {
			n++;
			*bytes += ir_node_numel(m->nodes[i]) * ir_dtype_size(m->nodes[i]->dtype);
		}
	return n;
}

/* Non-scalar all_reduces (the loss and grad-norm ones are scalars). */
static int count_ar(const IrModule *m)
{
	int n = 0;
	for (int i = 0; i < m->nnodes; i++)
		n += m->nodes[i]->op == IR_OP_ALL_REDUCE && m->nodes[i]->rank > 0;
	return n;
}

static int first_use(const IrModule *m, const char *pname)
{
	for (int i = 0; i < m->nnodes; i++)
		for (int k = 0; k < m->nodes[i]->nops; k++) {
			const IrNode *o = m->nodes[m->nodes[i]->ops[k]];
			if (o->op == IR_OP_PARAM && o->name && !strcmp(o->name, pname))
				return i;
		}
	return -1;
}

/* Per bucket (a flat all_reduce), in program order: the first uses of the
 * params its slices give the gradients of; each bucket's must all come
 * after the next bucket's (reverse order of first use). */
static void check_order(const IrModule *m, int64_t cap)
{
	int lo_prev = -1, nb = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *r = m->nodes[i];
		if (r->op != IR_OP_ALL_REDUCE || r->rank != 1 || m->nodes[r->ops[0]]->op != IR_OP_CONCAT)
			continue;
		nb++;
		/* right after the last gradient: the nodes between the last
		 * operand a pack reads from outside and the all_reduce are the
		 * pack itself (reshapes and concats) */
		for (int j = i - 1; j >= 0; j--) {
			IrOp op = m->nodes[j]->op;
			if (op != IR_OP_CONCAT && op != IR_OP_RESHAPE)
				break;
			CHECK(m->nodes[j]->role == IR_ROLE_ACT);
		}
		int lo = m->nnodes, hi = -1, ng = 0;
		int64_t bytes = 0, last = 0;
		for (int j = i + 1; j < m->nnodes; j++) {
			const IrNode *s = m->nodes[j];
			if (s->op != IR_OP_SLICE || s->ops[0] != i)
				continue;
			const IrNode *g = s;
			if (!g->name && j + 1 < m->nnodes && m->nodes[j + 1]->ops &&
			    m->nodes[j + 1]->ops[0] == j)
				g = m->nodes[j + 1];
			CHECK(g->name && !strncmp(g->name, "grad.", 5) && g->role == IR_ROLE_GRAD);
			if (!g->name)
				continue;
			int u = first_use(m, g->name + 5);
			CHECK(u >= 0);
			lo = u < lo ? u : lo;
			hi = u > hi ? u : hi;
			ng++;
			last = ir_node_numel(s) * ir_dtype_size(s->dtype);
			bytes += last;
		}
		CHECK(ng >= 2);
		CHECK_EQ_INT(bytes, ir_node_numel(r) * ir_dtype_size(r->dtype));
		CHECK(bytes - last < cap);
		if (lo_prev >= 0)
			CHECK(hi <= lo_prev);
		lo_prev = lo;
	}
	CHECK(nb > 0);
}

static void test_counts(void)
{
	char *src = slurp("models/gpt.dtm");
	CHECK(src != NULL);
	if (!src)
		return;
	Arena a;
	arena_init(&a);
	const char *mesh = "pp=1,dp=4,tp=1";
	IrModule *one = build(&a, src, mesh, -1);
	IrModule *none = build(&a, src, mesh, 0);
	if (!one || !none) {
		arena_free(&a);
		free(src);
		return;
	}
	int64_t total;
	int np = count_params(one, &total);
	CHECK_EQ_INT(np, 4 + 2 * 16);
	/* the default: every gradient in one bucket */
	CHECK_EQ_INT(one->train.bucket_bytes, (int64_t)25 << 20);
	CHECK_EQ_INT(count_ar(one), 1);
	check_order(one, one->train.bucket_bytes);
	/* off: one per gradient */
	CHECK_EQ_INT(count_ar(none), np);
	/* about a third of the bytes a bucket: 3 buckets */
	int64_t cap = (total + 2) / 3;
	IrModule *three = build(&a, src, mesh, cap);
	if (three) {
		CHECK_EQ_INT(count_ar(three), 3);
		check_order(three, cap);
	}
	/* half: 2 */
	IrModule *two = build(&a, src, mesh, (total + 1) / 2);
	if (two) {
		CHECK_EQ_INT(count_ar(two), 2);
		check_order(two, (total + 1) / 2);
	}
	/* DP x TP: one bucket per set of mesh axes the gradients are
	 * reduced over */
	IrModule *dt = build(&a, src, "pp=1,dp=2,tp=2", -1);
	if (dt) {
		uint32_t groups[8];
		int ng = 0, nar = 0;
		for (int i = dt->loss + 1; i < dt->nnodes; i++) {
			const IrNode *r = dt->nodes[i];
			if (r->op != IR_OP_ALL_REDUCE || r->rank != 1 ||
			    dt->nodes[r->ops[0]]->op != IR_OP_CONCAT)
				continue;
			nar++;
			for (int k = 0; k < ng; k++)
				CHECK(groups[k] != ir_attr_coll(r)->axes);
			if (ng < 8)
				groups[ng++] = ir_attr_coll(r)->axes;
		}
		CHECK(nar >= 1);
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "dp x tp: %d bucket all_reduces, %d all_reduces in all\n", nar,
			        count_ar(dt));
	}
	/* gradient accumulation (passes/microbatch.c): the micro-batches'
	 * terms are summed before the reduction, one synchronisation a step */
	const char *mb = "  microbatches 1\n";
	char *src2 = malloc(strlen(src) + 8);
	char *at = strstr(src, mb);
	CHECK(at != NULL);
	if (src2 && at) {
		sprintf(src2, "%.*s  microbatches 2\n%s", (int)(at - src), src, at + strlen(mb));
		IrModule *acc = build(&a, src2, "pp=1,dp=2,tp=1", -1);
		IrModule *acc0 = build(&a, src2, "pp=1,dp=2,tp=1", 0);
		if (acc && acc0) {
			CHECK_EQ_INT(acc->train.microbatches, 2);
			CHECK_EQ_INT(count_ar(acc), 1);
			CHECK_EQ_INT(count_ar(acc0), np);
			check_order(acc, acc->train.bucket_bytes);
		}
	}
	if (getenv("DTM_TEST_VERBOSE"))
		fprintf(stderr, "gpt dp=4: %d params, %lld bytes; all_reduces: default %d, none %d, "
		        "cap %lld: %d\n", np, (long long)total, count_ar(one), count_ar(none),
		        (long long)cap, three ? count_ar(three) : -1);
	arena_free(&a);
	free(src2);
	free(src);
}

/* Non-scalar all_reduces over a data axis (rep or dp): the gradient
 * synchronisation, not tensor parallelism's activations. */
static int count_data_ar(const IrModule *m)
{
	uint32_t data = 0;
	int r = mesh_axis_index(&m->mesh, "rep"), d = mesh_axis_index(&m->mesh, "dp");
	data |= r >= 0 ? 1u << r : 0;
	data |= d >= 0 ? 1u << d : 0;
	int n = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *x = m->nodes[i];
		n += x->op == IR_OP_ALL_REDUCE && x->rank > 0 && (ir_attr_coll(x)->axes & data);
	}
	return n;
}

static int count_op(const IrModule *m, IrOp op)
{
	int n = 0;
	for (int i = 0; i < m->nnodes; i++)
		n += m->nodes[i]->op == op;
	return n;
}

/* A batch split over two axes (HSDP's [(rep, dp), _]) syncs its gradients
 * in buckets as the same split over one axis does: under zero 1 over dp
 * the one reduce_scatter over dp of the 36 gradients (passes/coalesce.c)
 * is followed by one all_reduce over rep (there were 36 of each, then 36
 * reduce_scatters and one bucket); with sequence parallelism
 * the norms' gradients, partial over the data axes and tp, are one bucket
 * over (rep, dp, tp) (partition reduces them over rep, then (dp, tp): 14
 * all_reduces, and over tp, then dp, on one axis: 14 more than buckets),
 * so DDP is two all_reduces on either split. */
static void test_two_axes(void)
{
	Arena a;
	arena_init(&a);
	char *z1 = replace(slurp("models/gpt.dtm"), "  zero 0 over dp\n", "  zero 1 over dp\n");
	char *sp = replace(slurp("models/gpt.dtm"), "  zero 0 over dp\n",
	                   "  zero 0 over dp\n  sequence_parallel true\n");
	char *hz1 = replace(replace(strdup(z1 ? z1 : ""), "mesh (pp = 1, dp = ",
	                            "mesh (pp = 1, rep = 1, dp = "), "[dp,", "[(rep, dp),");
	char *hsp = replace(replace(strdup(sp ? sp : ""), "mesh (pp = 1, dp = ",
	                            "mesh (pp = 1, rep = 1, dp = "), "[dp,", "[(rep, dp),");
	CHECK(z1 && sp && hz1 && hsp && strstr(hz1, "[(rep, dp), _]") && strstr(hsp, "rep = 1"));
	if (!z1 || !sp || !hz1 || !hsp)
		goto done;
	IrModule *one = build(&a, z1, "pp=1,dp=4,tp=1", -1);
	IrModule *two = build(&a, hz1, "pp=1,rep=2,dp=2,tp=1", -1);
	if (one && two) {
		CHECK_EQ_INT(count_op(one, IR_OP_REDUCE_SCATTER), 1);
		CHECK_EQ_INT(count_data_ar(one), 0);
		CHECK_EQ_INT(count_op(two, IR_OP_REDUCE_SCATTER), 1);
		CHECK_EQ_INT(count_data_ar(two), 1);
	}
	one = build(&a, sp, "pp=1,dp=4,tp=2", -1);
	two = build(&a, hsp, "pp=1,rep=2,dp=2,tp=2", -1);
	IrModule *ddp = build(&a, hsp, "pp=1,rep=2,dp=2,tp=1", -1);
	if (one && two && ddp) {
		CHECK_EQ_INT(count_data_ar(one), 2);
		CHECK_EQ_INT(count_data_ar(two), 2);
		CHECK_EQ_INT(count_ar(two), count_ar(one));
		CHECK_EQ_INT(count_data_ar(ddp), 1);
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "sp: all_reduces dp=4,tp=2 %d, rep=2,dp=2,tp=2 %d\n",
			        count_ar(one), count_ar(two));
	}
done:
	free(z1);
	free(sp);
	free(hz1);
	free(hsp);
	arena_free(&a);
}

/* The one bucket of gpt under `train` text extra (for its precision
 * line) with mb micro-batches, on dp=4: its dtype and element count through *t and *n; the number of
 * gradients that are a cast of a reduction (a gradient reduced before its
 * cast to reduce_dtype) through *recast. */
static void one_bucket(const char *extra, const char *mb, IrDtype *t, int64_t *n, int *recast)
{
	Arena a;
	arena_init(&a);
	char *src = replace(replace(slurp("models/gpt.dtm"), "  precision f32\n", extra),
	                    "  microbatches 1\n", mb);
	CHECK(src && strstr(src, "precision bf16") && strstr(src, mb));
	IrModule *m = src ? build(&a, src, "pp=1,dp=4,tp=1", -1) : NULL;
	int nb = 0, ngrads = 0, np = 0;
	int64_t total;
	*t = IR_DTYPE_COUNT, *n = -1, *recast = 0;
	for (int i = 0; m && i < m->nnodes; i++) {
		const IrNode *x = m->nodes[i];
		if (x->op == IR_OP_ALL_REDUCE && x->rank == 1 &&
		    m->nodes[x->ops[0]]->op == IR_OP_CONCAT) {
			nb++;
			*t = x->dtype;
			*n = x->shape[0];
		}
		if (x->role == IR_ROLE_GRAD && x->name && !strncmp(x->name, "grad.", 5)) {
			ngrads++;
			CHECK(x->dtype == IR_F32 || x->dtype == IR_BF16);
			if (x->op != IR_OP_CAST)
				continue;
			/* through the unpack (slice, reshape) to what it casts */
			const IrNode *o = m->nodes[x->ops[0]];
			while (o->op == IR_OP_RESHAPE || o->op == IR_OP_SLICE)
				o = m->nodes[o->ops[0]];
			*recast += o->op == IR_OP_ALL_REDUCE;
		}
	}
	if (m)
		np = count_params(m, &total);
	CHECK_EQ_INT(nb, 1); /* 118,528 elements: one 25 MB bucket */
	CHECK_EQ_INT(ngrads, np);
	free(src);
	arena_free(&a);
}

/* precision bf16: every gradient is summed and reduced in reduce_dtype,
 * the same with one micro-batch as with two: f32 by default (a weight's
 * gradient is matmul_wgrad's f32, a bias's bf16 sum is cast to f32 and
 * then reduced), bf16 when asked (matmul_wgrad's f32 cast to bf16 before
 * the reduction).  Before, one micro-batch reduced every gradient in bf16
 * and cast it after (cast(all_reduce)), while two reduced f32 sums: the
 * reduce dtype depended on the micro-batch count. */
static void test_bf16(void)
{
	IrDtype t1, t2, tb;
	int64_t n1, n2, nbf;
	int r1, r2, rb;
	one_bucket("  precision bf16\n", "  microbatches 1\n", &t1, &n1, &r1);
	one_bucket("  precision bf16\n  reduce_dtype f32\n", "  microbatches 2\n", &t2, &n2, &r2);
	one_bucket("  precision bf16\n  reduce_dtype bf16\n", "  microbatches 1\n", &tb, &nbf, &rb);
	CHECK(t1 == IR_F32);
	CHECK(t2 == IR_F32);
	CHECK(tb == IR_BF16);
	CHECK(n1 > 0);
	CHECK(n2 == n1);
	CHECK(nbf == n1);
	CHECK_EQ_INT(r1, 0);
	CHECK_EQ_INT(r2, 0);
	CHECK_EQ_INT(rb, 0);
}

int main(void)
{
	test_counts();
	test_two_axes();
	test_bf16();
	return check_report();
}
