/* test_comm_ddp.c - multi-rank execution end to end on hand-written Plans:
 * DDP on a linear regression (pred = x @ w, MSE, SGD with momentum), the
 * batch split over dp = 1, 2 and 4, gradients and the loss all-reduced
 * (avg).  Every mesh must give the one-rank losses (f32, relative 1e-5),
 * on the local backend (ranks as threads) and, with --mpi under mpirun,
 * on the mpi backend.  Also: per-rank checkpoints and resume, a one-rank
 * checkpoint resumed on 4 ranks, and a rank that fails mid-step (the
 * others stop at once; the error names it).
 *
 *   test_comm_ddp                   local
 *   mpirun -np 4 test_comm_ddp --mpi   rank 0 runs the one-rank plan, then
 *                                       all run the 4-rank plan on mpi
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "testlib_rt.h"
#include "testlib.h"
#include "runtime/comm.h"
#include "runtime/fsio.h"
#include "runtime/rt.h"

enum { B_W, B_X, B_Y, B_PRED, B_DPRED, B_LOSS, B_DW, B_GNORM, B_MOM, NBUF };

/* rows of this rank's batch shard: the kernels read it from the plan
 * through a per-plan table, since generated kernels have sizes baked in */
#define MSE_KERNELS(R)                                                               \
	static void k_mse_##R(const DtmCtx *ctx, void *const *a)                     \
	{                                                                            \
		const float *p = a[0], *y = a[1];                                    \
		double s = 0;                                                        \
		for (int i = 0; i < 2 * R; i++)                                      \
			s += (double)(p[i] - y[i]) * (p[i] - y[i]);                  \
		*(float *)a[2] = (float)(s / (2 * R));                               \
	}                                                                            \
	static void k_mse_grad_##R(const DtmCtx *ctx, void *const *a)                \
	{                                                                            \
		const float *p = a[0], *y = a[1];                                    \
		float *d = a[2];                                                     \
		for (int i = 0; i < 2 * R; i++)                                      \
			d[i] = 2.0f * (p[i] - y[i]) / (float)(2 * R);                \
	}
MSE_KERNELS(8)
MSE_KERNELS(4)
MSE_KERNELS(2)

static void k_gnorm(const DtmCtx *ctx, void *const *a)
{
	const float *g = a[0];
	double s = 0;
	for (int i = 0; i < 8; i++)
		s += (double)g[i] * g[i];
	*(float *)a[1] = (float)sqrt(s);
}

static void k_sgd(const DtmCtx *ctx, void *const *a)
{
	const float *g = a[0];
	float *m = a[1], *w = a[2];
	for (int i = 0; i < 8; i++) {
		m[i] = 0.9f * m[i] + g[i];
		w[i] -= ctx->lr * m[i];
	}
}

/* NaN into rank 2's pred at step 3: --check-numerics stops that rank */
static void k_poison(const DtmCtx *ctx, void *const *a)
{
	if (ctx->step >= 3 && ctx->rank == 2)
		((float *)a[0])[0] = NAN;
}

typedef struct Variant {
	int ranks, rows;
	DtmBuffer buffers[NBUF];
	DtmAction actions[10];
	DtmStage stage;
	DtmKernelFn kernels[5];
	const char *names[5];
	DtmPlan plan;
} Variant;

#define BUF(nm, role_, r, s0, s1, g0, ar, off, by, in)                                    \
	(DtmBuffer){ .name = nm, .role = role_, .dtype = DTM_F32, .rank = r,              \
		     .shape = { s0, s1 }, .global_shape = { g0, s1 }, .arena = ar,         \
		     .offset = off, .bytes = by, .init = in }

static void make(Variant *v, int ranks, bool poison)
{
	int R = 8 / ranks;
	memset(v, 0, sizeof *v);
	v->ranks = ranks;
	v->rows = R;
	DtmBuffer *b = v->buffers;
	b[B_W] = BUF("w", DTM_ROLE_PARAM, 2, 4, 2, 4, DTM_ARENA_PARAM, 0, 32, DTM_INIT_NORMAL);
	b[B_W].init_b = 0.5f;
	b[B_X] = BUF("x", DTM_ROLE_INPUT, 2, R, 4, 8, DTM_ARENA_INPUT, 0, 128, DTM_INIT_NONE);
	b[B_Y] = BUF("y", DTM_ROLE_INPUT, 2, R, 2, 8, DTM_ARENA_INPUT, 128, 64, DTM_INIT_NONE);
	/* the batch dim split over dp (mesh axis 0) */
	b[B_X].split_naxes[0] = b[B_Y].split_naxes[0] = 1;
	b[B_PRED] = BUF("pred", DTM_ROLE_ACT, 2, R, 2, 8, DTM_ARENA_ACT, 0, 64, DTM_INIT_NONE);
	b[B_DPRED] = BUF("dpred", DTM_ROLE_ACT, 2, R, 2, 8, DTM_ARENA_ACT, 64, 64, DTM_INIT_NONE);
	b[B_PRED].split_naxes[0] = b[B_DPRED].split_naxes[0] = 1;
	b[B_LOSS] = BUF("loss", DTM_ROLE_LOSS, 0, 0, 0, 0, DTM_ARENA_ACT, 128, 4, DTM_INIT_NONE);
	b[B_DW] = BUF("grad.w", DTM_ROLE_GRAD, 2, 4, 2, 4, DTM_ARENA_GRAD, 0, 32, DTM_INIT_NONE);
	b[B_GNORM] = BUF("grad_norm", DTM_ROLE_ACT, 0, 0, 0, 0, DTM_ARENA_ACT, 192, 4,
			 DTM_INIT_NONE);
	b[B_MOM] = BUF("opt.mom.w", DTM_ROLE_OPT_STATE, 2, 4, 2, 4, DTM_ARENA_OPT, 0, 32,
		       DTM_INIT_ZEROS);
	v->kernels[0] = R == 8 ? k_mse_8 : R == 4 ? k_mse_4 : k_mse_2;
	v->kernels[1] = R == 8 ? k_mse_grad_8 : R == 4 ? k_mse_grad_4 : k_mse_grad_2;
	v->kernels[2] = k_gnorm;
	v->kernels[3] = k_sgd;
	v->kernels[4] = k_poison;
	const char *names[5] = { "mse", "mse_grad", "gnorm", "sgd", "poison" };
	memcpy(v->names, names, sizeof names);
	DtmAction *a = v->actions;
	int n = 0;
	a[n++] = (DtmAction){ .kind = DTM_ACT_GEMM, .label = "matmul x w", .nargs = 3,
			      .args = { B_X, B_W, B_PRED }, .m = R, .n = 2, .k = 4, .batch = 1,
			      .alpha = 1 };
	if (poison)
		a[n++] = (DtmAction){ .kind = DTM_ACT_KERNEL, .label = "poison pred", .nargs = 1,
				      .args = { B_PRED }, .kernel = 4 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_KERNEL, .label = "mse", .nargs = 3,
			      .args = { B_PRED, B_Y, B_LOSS }, .kernel = 0 };
	/* the loss: each rank's mean over its shard, averaged over dp, so
	 * every rank holds the global mean */
	a[n++] = (DtmAction){ .kind = DTM_ACT_COLL, .label = "all_reduce loss", .nargs = 1,
			      .args = { B_LOSS }, .coll = DTM_COLL_ALL_REDUCE, .red = DTM_RED_AVG,
			      .axes = 1, .stream = 1 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_KERNEL, .phase = DTM_PHASE_BACKWARD,
			      .label = "mse grad", .nargs = 3, .args = { B_PRED, B_Y, B_DPRED },
			      .kernel = 1 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_GEMM, .phase = DTM_PHASE_BACKWARD,
			      .label = "matmul grad w", .nargs = 3, .args = { B_X, B_DPRED, B_DW },
			      .m = 4, .n = 2, .k = R, .batch = 1, .trans_a = true, .alpha = 1 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_COLL, .phase = DTM_PHASE_BACKWARD,
			      .label = "all_reduce grad.w", .nargs = 2, .args = { B_DW, B_DW },
			      .coll = DTM_COLL_ALL_REDUCE, .red = DTM_RED_AVG, .axes = 1,
			      .bytes = 32, .stream = 1 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_KERNEL, .phase = DTM_PHASE_OPTIMIZER,
			      .label = "grad norm", .nargs = 2, .args = { B_DW, B_GNORM },
			      .kernel = 2 };
	a[n++] = (DtmAction){ .kind = DTM_ACT_KERNEL, .phase = DTM_PHASE_OPTIMIZER,
			      .label = "sgd w", .nargs = 3, .args = { B_DW, B_MOM, B_W },
			      .kernel = 3 };
	v->stage = (DtmStage){ .nactions = n, .actions = v->actions };
	v->plan = (DtmPlan){
		.version = DTM_PLAN_VERSION,
		.model = "linreg",
		.mesh_naxes = 1,
		.mesh_names = { "dp" },
		.mesh_sizes = { ranks },
		.nbuffers = NBUF,
		.buffers = v->buffers,
		.arena_bytes = { [DTM_ARENA_PARAM] = 32, [DTM_ARENA_OPT] = 32,
				 [DTM_ARENA_GRAD] = 32, [DTM_ARENA_ACT] = 196,
				 [DTM_ARENA_INPUT] = 192 },
		.nstages = 1,
		.stages = &v->stage,
		.nkernels = 5,
		.kernels = v->kernels,
		.kernel_names = v->names,
		.ninputs = 2,
		.inputs = { B_X, B_Y },
		.loss = B_LOSS,
		.grad_norm = B_GNORM,
		.train = { .optimizer = DTM_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f,
			   .lr_schedule = DTM_LR_CONSTANT, .steps = 20, .data = "synthetic",
			   .seed = 1, .tokens_per_step = 8, .batch = 8,
			   .data_kind = DTM_DATA_REGRESSION, .microbatches = 1,
			   .precision = DTM_F32 },
	};
}

/* ---- helpers (as test_runtime_exec.c) ---- */



/* The "loss" values of a log's step lines. */
static int losses(const char *path, double *out, int max)
{
	char *log = slurp(path);
	int n = 0;
	for (const char *l = log; l && *l && n < max;) {
		const char *e = strchr(l, '\n');
		const char *k = strstr(l, "\"loss\":");
		if (k && (!e || k < e))
			out[n++] = strtod(k + 7, NULL);
		l = e ? e + 1 : NULL;
	}
	free(log);
	return n;
}

static void check_same(const char *a, const char *b, int want, double rtol)
{
	double la[64], lb[64];
	int na = losses(a, la, 64), nb = losses(b, lb, 64);
	CHECK_EQ_INT(na, want);
	CHECK_EQ_INT(nb, want);
	for (int i = 0; i < na && i < nb; i++) {
		double tol = rtol * fabs(la[i]);
		if (!(fabs(la[i] - lb[i]) <= tol))
			fprintf(stderr, "  step %d: %s %.9g vs %s %.9g\n", i + 1, a, la[i], b, lb[i]);
		CHECK(fabs(la[i] - lb[i]) <= tol);
	}
	/* and it trains */
	if (na == want)
		CHECK(la[na - 1] < 0.5 * la[0]);
}

static void test_local(void)
{
	static Variant v1, v2, v4, vp;
	make(&v1, 1, false);
	make(&v2, 2, false);
	make(&v4, 4, false);
	CHECK_EQ_INT(run(&v1.plan, "--steps", "20", "--log", tpath("r1.jsonl"), NULL), 0);
	CHECK_EQ_INT(run(&v2.plan, "--steps", "20", "--log", tpath("r2.jsonl"), NULL), 0);
	CHECK_EQ_INT(run(&v4.plan, "--steps", "20", "--log", tpath("r4.jsonl"), "--threads", "1",
			 NULL), 0);
	check_same(tpath("r1.jsonl"), tpath("r2.jsonl"), 20, 1e-5);
	check_same(tpath("r1.jsonl"), tpath("r4.jsonl"), 20, 1e-5);

	/* per-rank checkpoints: 10 steps + resume to 20 == 20 steps, exactly */
	CHECK_EQ_INT(run(&v4.plan, "--steps", "10", "--save", tpath("ck4"), NULL), 0);
	CHECK(access(tpath("ck4/step_000010/rank00003.safetensors"), F_OK) == 0);
	CHECK(access(tpath("ck4/step_000010/index.json"), F_OK) == 0);
	CHECK_EQ_INT(run(&v4.plan, "--steps", "20", "--resume", tpath("ck4"), "--log",
			 tpath("r4b.jsonl"), NULL), 0);
	double a[32], b[32];
	CHECK_EQ_INT(losses(tpath("r4.jsonl"), a, 32), 20);
	CHECK_EQ_INT(losses(tpath("r4b.jsonl"), b, 32), 10);
	for (int i = 0; i < 10; i++)
		CHECK(a[10 + i] == b[i]);
	/* a one-rank checkpoint resumes on four */
	CHECK_EQ_INT(run(&v1.plan, "--steps", "10", "--save", tpath("ck1"), NULL), 0);
	CHECK_EQ_INT(run(&v4.plan, "--steps", "20", "--resume", tpath("ck1"), "--log",
			 tpath("r41.jsonl"), NULL), 0);
	CHECK_EQ_INT(losses(tpath("r41.jsonl"), b, 32), 10);
	for (int i = 0; i < 10; i++)
		CHECK(fabs(a[10 + i] - b[i]) <= 1e-5 * fabs(a[10 + i]));
	/* a four-rank checkpoint on two ranks: resharded (each reads the
	 * overlapping parts of the four files) */
	CHECK_EQ_INT(run(&v2.plan, "--steps", "20", "--resume", tpath("ck4"), "--log",
			 tpath("r24.jsonl"), NULL), 0);
	CHECK_EQ_INT(losses(tpath("r24.jsonl"), b, 32), 10);
	for (int i = 0; i < 10; i++)
		CHECK(fabs(a[10 + i] - b[i]) <= 1e-5 * fabs(a[10 + i]));
	char *e;

	/* rank 2 fails at step 3: the run ends at once, naming rank 2 only */
	make(&vp, 4, true);
	double t0 = comm_now();
	CHECK_EQ_INT(run(&vp.plan, "--steps", "10", "--check-numerics", "--comm-timeout", "5",
			 NULL), 1);
	CHECK(comm_now() - t0 < 3);
	e = slurp(tpath("stderr.txt"));
	CHECK(e && strstr(e, "error: rank 2: non-finite value") && !strstr(e, "rank 0:"));
	if (e)
		fprintf(stderr, "(expected) %s", e);
	free(e);
	/* flags */
	CHECK_EQ_INT(run(&v4.plan, "--backend", "nccl", NULL), 1);
	CHECK_EQ_INT(run(&v4.plan, "--comm-timeout", "0", NULL), 1);
}

/* Under mpirun -np 4: every process runs the 4-rank plan on mpi; rank 0
 * first runs the one-rank plan (no MPI involved: --backend local, as under
 * a launcher mpi is the default) to compare. */
static int test_mpi(void)
{
	static Variant v1, v4;
	make(&v1, 1, false);
	make(&v4, 4, false);
	const char *r = getenv("OMPI_COMM_WORLD_RANK");
	bool lead = !r || atoi(r) == 0;
	if (lead)
		CHECK_EQ_INT(run(&v1.plan, "--backend", "local", "--steps", "20", "--log",
				 tpath("m1.jsonl"), NULL), 0);
	/* rank 0's temporary directory is the one its log goes to */
	CHECK_EQ_INT(run(&v4.plan, "--backend", "mpi", "--steps", "20", "--threads", "1",
			 "--log", tpath("m4.jsonl"), NULL), 0);
	if (lead) {
		check_same(tpath("m1.jsonl"), tpath("m4.jsonl"), 20, 1e-5);
		/* the local backend agrees with mpi */
		CHECK_EQ_INT(run(&v4.plan, "--backend", "local", "--steps", "20", "--log",
				 tpath("l4.jsonl"), NULL), 0);
		check_same(tpath("l4.jsonl"), tpath("m4.jsonl"), 20, 1e-5);
	}
	return lead;
}

int main(int argc, char **argv)
{
	bool mpi = argc > 1 && !strcmp(argv[1], "--mpi");
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dtm_ddp_XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	if (mpi) {
		if (!comm_mpi_open) {
			fprintf(stderr, "test_comm_ddp: built without the mpi backend\n");
			return 1;
		}
		if (!test_mpi()) {
			rm_tree(tmpdir);
			return check_failures ? 1 : 0;
		}
	} else {
		test_local();
	}
	if (!check_failures)
		rm_tree(tmpdir);
	return check_report();
}
