/* test_overlap.c - the communication thread of runtime/overlap.c: the
 * hazard rule as a pure function (byte ranges in arenas; RAW, WAR and WAW
 * conflict, two reads or disjoint or other-arena ranges do not; the
 * newest conflicting pending action is the one waited for), then a plan
 * run by 4 thread ranks with a slow all_reduce in flight: a kernel that
 * touches nothing of it runs at once, one that overwrites (through another
 * buffer sharing its bytes, as memplan reuses memory) the input it still
 * reads waits -- or, with the input copied aside when queued
 * (rt_overlap_staging, also checked as a pure function), does not -- and
 * one that reads its output waits; and a rank dying inside the
 * asynchronous all_reduce stops every other rank with an error naming it,
 * well before the timeout.
 *
 *   test_overlap                          all of it on the local backend
 *   mpirun -np 4 test_overlap --mpi       the plan on the mpi backend
 *   mpirun -np 4 test_overlap --mpi --dead  rank 2 dies in the all_reduce;
 *                                         the others print "rank 2 failed"
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "runtime/comm.h"
#include "runtime/rt.h"

/* ---- the hazard rule ---- */

/* A (ACT [0, 256)), B (ACT [256, 512)), A2 (ACT [192, 320): shares bytes
 * with both, as memplan's reuse does), P (PARAM [0, 256): same offsets
 * as A, another arena), Q (INPUT: apart from everything). */
enum { HA, HB, HA2, HP, HQ, HNBUF };

static const DtmBuffer hbufs[HNBUF] = {
	[HA] = { .dtype = DTM_F32, .rank = 1, .shape = { 64 }, .arena = DTM_ARENA_ACT,
		 .offset = 0, .bytes = 256 },
	[HB] = { .dtype = DTM_F32, .rank = 1, .shape = { 64 }, .arena = DTM_ARENA_ACT,
		 .offset = 256, .bytes = 256 },
	[HA2] = { .dtype = DTM_F32, .rank = 1, .shape = { 32 }, .arena = DTM_ARENA_ACT,
		  .offset = 192, .bytes = 128 },
	[HP] = { .dtype = DTM_F32, .rank = 1, .shape = { 64 }, .arena = DTM_ARENA_PARAM,
		 .offset = 0, .bytes = 256 },
	[HQ] = { .dtype = DTM_F32, .rank = 1, .shape = { 64 }, .arena = DTM_ARENA_INPUT,
		 .offset = 0, .bytes = 256 },
};

static RtAccess access_of(const DtmPlan *p, DtmAction a)
{
	RtAccess x;
	rt_access_of(p, &a, &x);
	return x;
}

static void test_hazards(void)
{
	DtmPlan p = { .nbuffers = HNBUF, .buffers = hbufs };
	DtmAction ar = { .kind = DTM_ACT_COLL, .coll = DTM_COLL_ALL_REDUCE, .nargs = 2,
			 .args = { HA, HB }, .stream = 1 };
	DtmAction ar_inplace = { .kind = DTM_ACT_COLL, .nargs = 1, .args = { HB } };
	DtmAction send_a = { .kind = DTM_ACT_SEND, .nargs = 1, .args = { HA } };
	DtmAction recv_b = { .kind = DTM_ACT_RECV, .nargs = 1, .args = { HB } };
	/* C = A @ P: reads A and P, writes B */
	DtmAction gemm = { .kind = DTM_ACT_GEMM, .nargs = 3, .args = { HA, HP, HB } };
	DtmAction gemm_read_a = { .kind = DTM_ACT_GEMM, .nargs = 3, .args = { HA, HA, HQ } };
	DtmAction k_a2 = { .kind = DTM_ACT_KERNEL, .nargs = 1, .args = { HA2 } };
	DtmAction k_p = { .kind = DTM_ACT_KERNEL, .nargs = 1, .args = { HP } };

	RtAccess x = access_of(&p, ar);
	CHECK_EQ_INT(x.n, 2);
	CHECK(!x.r[0].write && x.r[0].lo == 0 && x.r[0].hi == 256);
	CHECK(x.r[1].write && x.r[1].lo == 256 && x.r[1].hi == 512);
	x = access_of(&p, ar_inplace);
	CHECK(x.n == 1 && x.r[0].write);
	x = access_of(&p, send_a);
	CHECK(x.n == 1 && !x.r[0].write);
	x = access_of(&p, recv_b);
	CHECK(x.n == 1 && x.r[0].write);
	x = access_of(&p, gemm);
	CHECK(x.n == 3 && !x.r[0].write && !x.r[1].write && x.r[2].write);
	CHECK_EQ_INT(x.r[1].arena, DTM_ARENA_PARAM);
	x = access_of(&p, k_p);
	CHECK(x.n == 1 && x.r[0].write); /* kernels: every argument may be written */
	DtmAction wait = { .kind = DTM_ACT_WAIT };
	CHECK_EQ_INT(access_of(&p, wait).n, 0);

	RtAccess acc_ar = access_of(&p, ar), acc_send = access_of(&p, send_a);
	/* reads B (the all_reduce's output) into Q */
	DtmAction read_b = { .kind = DTM_ACT_GEMM, .nargs = 3, .args = { HB, HB, HQ } };
	DtmAction k_q = { .kind = DTM_ACT_KERNEL, .nargs = 1, .args = { HQ } };
	CHECK(rt_access_conflict(&acc_ar, &(RtAccess){ 0 }) == false);
	CHECK(rt_access_conflict(&acc_ar, &(RtAccess){ .n = 1, .r = { { DTM_ARENA_ACT, 256, 260,
									false } } }));
	/* WAR: A2's bytes [192, 256) are the tail of A, which the all_reduce reads */
	CHECK(rt_access_conflict(&acc_ar, &(RtAccess){ .n = 1, .r = { { DTM_ARENA_ACT, 192, 193,
									true } } }));
	RtAccess acc_k_a2 = access_of(&p, k_a2), acc_gemm = access_of(&p, gemm);
	RtAccess acc_read_a = access_of(&p, gemm_read_a), acc_k_p = access_of(&p, k_p);
	RtAccess acc_read_b = access_of(&p, read_b);
	CHECK(rt_access_conflict(&acc_ar, &acc_k_a2));   /* WAR (and RAW on B) */
	CHECK(rt_access_conflict(&acc_ar, &acc_gemm));   /* WAW on B */
	CHECK(rt_access_conflict(&acc_ar, &acc_read_b)); /* RAW on B */
	CHECK(!rt_access_conflict(&acc_send, &acc_read_a)); /* reads of A only... */
	CHECK(rt_access_conflict(&acc_send, &acc_k_a2)); /* ...but A2 writes A's tail */
	CHECK(!rt_access_conflict(&acc_ar, &acc_k_p));   /* same offsets, other arena */
	/* touching ranges do not overlap: [0, 256) and [256, 260) */
	RtAccess lo = { .n = 1, .r = { { DTM_ARENA_ACT, 0, 256, true } } };
	RtAccess hi = { .n = 1, .r = { { DTM_ARENA_ACT, 256, 260, true } } };
	CHECK(!rt_access_conflict(&lo, &hi) && !rt_access_conflict(&hi, &lo));
	/* zero-byte buffers take part in nothing */
	DtmBuffer empty[1] = { { .arena = DTM_ARENA_ACT, .offset = 0, .bytes = 0 } };
	DtmPlan pe = { .nbuffers = 1, .buffers = empty };
	DtmAction k0 = { .kind = DTM_ACT_KERNEL, .nargs = 1, .args = { 0 } };
	CHECK_EQ_INT(access_of(&pe, k0).n, 0);

	/* the newest conflicting pending action, oldest first */
	RtAccess pending[4] = { acc_ar, acc_send, acc_k_p, access_of(&p, k_q) };
	CHECK_EQ_INT(rt_hazard_newest(pending, 4, &acc_k_a2), 1); /* send reads A's tail */
	CHECK_EQ_INT(rt_hazard_newest(pending, 4, &acc_read_b), 3); /* k_q writes Q */
	CHECK_EQ_INT(rt_hazard_newest(pending, 3, &acc_read_b), 0); /* RAW on B */
	CHECK_EQ_INT(rt_hazard_newest(pending, 3, &acc_read_a), -1); /* A is only read */
	CHECK_EQ_INT(rt_hazard_newest(pending, 4, &acc_read_a), 3);
	CHECK_EQ_INT(rt_hazard_newest(pending, 3, &acc_k_p), 2);     /* WAW on P */
	CHECK_EQ_INT(rt_hazard_newest(pending, 0, &acc_k_a2), -1);
}

/* ---- a plan with a slow all_reduce in flight ---- */

/* fill A = rank + 1; all_reduce A -> B (async); probe (touches only C);
 * clobber A2 (the tail of A: WAR); probe again; use D = B (RAW).  D must
 * be the sum 1 + 2 + ... + n everywhere. */
enum { BA, BB, BA2, BC, BD, BE, NB };
#define N 64

static const DtmBuffer pbufs[NB] = {
	[BA] = { .name = "a", .dtype = DTM_F32, .rank = 1, .shape = { N }, .global_shape = { N },
		 .arena = DTM_ARENA_ACT, .offset = 0, .bytes = 4 * N },
	[BB] = { .name = "b", .dtype = DTM_F32, .rank = 1, .shape = { N }, .global_shape = { N },
		 .arena = DTM_ARENA_ACT, .offset = 4 * N, .bytes = 4 * N },
	[BA2] = { .name = "a2", .dtype = DTM_F32, .rank = 1, .shape = { N / 2 },
		  .global_shape = { N / 2 }, .arena = DTM_ARENA_ACT, .offset = 4 * N / 2,
		  .bytes = 4 * N / 2 },
	[BC] = { .name = "c", .dtype = DTM_F32, .rank = 1, .shape = { N }, .global_shape = { N },
		 .arena = DTM_ARENA_ACT, .offset = 8 * N, .bytes = 4 * N },
	[BD] = { .name = "d", .dtype = DTM_F32, .rank = 1, .shape = { N }, .global_shape = { N },
		 .arena = DTM_ARENA_ACT, .offset = 12 * N, .bytes = 4 * N },
	[BE] = { .name = "e", .dtype = DTM_F32, .rank = 1, .shape = { N }, .global_shape = { N },
		 .arena = DTM_ARENA_ACT, .offset = 16 * N, .bytes = 4 * N },
};

#define MAXR 4
static RtRun *runs[MAXR];   /* per rank, for the probe */
static float probe_saw[MAXR], probe2_saw[MAXR];

static void k_fill(const DtmCtx *ctx, void *const *a)
{
	for (int i = 0; i < N; i++)
		((float *)a[0])[i] = (float)(ctx->rank + 1);
}

/* Reads B behind the runtime's back (B is not its argument, so nothing
 * makes it wait): what it sees tells whether the all_reduce was done. */
static void k_probe(const DtmCtx *ctx, void *const *a)
{
	const float *b = runs[ctx->rank]->ptr[BB];
	if (((float *)a[0])[0] == 0)
		probe_saw[ctx->rank] = b[0];
	else
		probe2_saw[ctx->rank] = b[0];
	((float *)a[0])[0] = 1;
}

static void k_clobber(const DtmCtx *ctx, void *const *a)
{
	for (int i = 0; i < N / 2; i++)
		((float *)a[0])[i] = -100;
}

static void k_use(const DtmCtx *ctx, void *const *a)
{
	memcpy(a[1], a[0], 4 * N);
}

static const DtmKernelFn pkernels[] = { k_fill, k_probe, k_clobber, k_use };

static const DtmAction pactions[] = {
	{ .kind = DTM_ACT_KERNEL, .label = "fill a", .nargs = 1, .args = { BA }, .kernel = 0 },
	{ .kind = DTM_ACT_COLL, .label = "all_reduce a", .nargs = 2, .args = { BA, BB },
	  .coll = DTM_COLL_ALL_REDUCE, .red = DTM_RED_SUM, .axes = 1, .stream = 1 },
	{ .kind = DTM_ACT_KERNEL, .label = "probe", .nargs = 1, .args = { BC }, .kernel = 1 },
	{ .kind = DTM_ACT_KERNEL, .label = "clobber", .nargs = 1, .args = { BA2 }, .kernel = 2 },
	{ .kind = DTM_ACT_KERNEL, .label = "probe 2", .nargs = 1, .args = { BC }, .kernel = 1 },
	{ .kind = DTM_ACT_KERNEL, .label = "use", .nargs = 2, .args = { BB, BD }, .kernel = 3 },
};

static const DtmStage pstage = { .nactions = 6, .actions = pactions };

/* A collective feeding the next: all_reduce A -> B, all_reduce B -> E,
 * then B overwritten before E is read.  The second all_reduce's input
 * may not be copied when it is queued, the first still writing it: D must
 * be n * (1 + ... + n). */
static const DtmAction chain_actions[] = {
	pactions[0],
	pactions[1],
	{ .kind = DTM_ACT_COLL, .label = "all_reduce b", .nargs = 2, .args = { BB, BE },
	  .coll = DTM_COLL_ALL_REDUCE, .red = DTM_RED_SUM, .axes = 1, .stream = 1 },
	{ .kind = DTM_ACT_KERNEL, .label = "clobber b", .nargs = 1, .args = { BB }, .kernel = 2 },
	{ .kind = DTM_ACT_KERNEL, .label = "use e", .nargs = 2, .args = { BE, BD }, .kernel = 3 },
};

static const DtmStage chain_stage = { .nactions = 5, .actions = chain_actions };
static const DtmStage *plan_stage = &pstage;

static DtmPlan make_plan(int n)
{
	DtmPlan p = {
		.version = DTM_PLAN_VERSION, .model = "overlap", .mesh_naxes = 1,
		.mesh_names = { "dp" }, .mesh_sizes = { n }, .nbuffers = NB, .buffers = pbufs,
		.arena_bytes = { [DTM_ARENA_ACT] = 20 * N }, .nstages = 1, .stages = plan_stage,
		.nkernels = 4, .kernels = pkernels, .loss = BD, .grad_norm = -1,
	};
	return p;
}

/* rank 2 dies inside the all_reduce, after its peers have entered it */
static int dying_all_reduce(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			    DtmDtype t, DtmRed red)
{
	usleep(100 * 1000);
	return comm_errf(c, "boom on purpose");
}

static CommOps dying_ops;

typedef struct Rank {
	const DtmPlan *plan;
	CommLocalWorld *w;      /* NULL: c is an mpi Comm */
	Comm *c;
	int rank;
	bool overlap, copy, die;
	int64_t delay_us;
	int rc;
	float d[N];
	double secs, idle_s, comm_s;
	bool peer_failed;
	char err[RT_ERR_LEN];
} Rank;

/* One rank's pass, as dtm_main's rank thread runs it: a rank that failed
 * announces it after its communication thread has stopped. */
static void run_rank(Rank *k)
{
	RtRun run;
	double t0 = rt_now();
	if (k->die) {
		dying_ops = *k->c->ops;
		dying_ops.all_reduce = dying_all_reduce;
		k->c->ops = &dying_ops;
	}
	if (rt_run_init(&run, k->plan, k->rank, 1)) {
		k->rc = -1;
		snprintf(k->err, sizeof k->err, "%s", run.err);
		return;
	}
	run.comm = k->c;
	run.overlap = k->overlap;
	run.overlap_copy = k->copy;
	run.comm_delay_us = k->delay_us;
	runs[k->rank % MAXR] = &run;
	k->rc = rt_run_actions(&run, false);
	if (k->rc)
		snprintf(k->err, sizeof k->err, "%s", run.err);
	else
		memcpy(k->d, run.ptr[BD], sizeof k->d);
	k->idle_s = run.idle_s;
	k->comm_s = run.comm_s;
	rt_run_free(&run);
	k->secs = rt_now() - t0;
	k->peer_failed = k->c->peer_failed;
	if (k->rc && !k->c->peer_failed)
		comm_fail(k->c, k->err);
}

static void *rank_main(void *arg)
{
	Rank *k = arg;
	char err[COMM_ERR_LEN];
	if (comm_local_open(&k->c, k->w, k->rank, err)) {
		k->rc = -1;
		snprintf(k->err, sizeof k->err, "%s", err);
	} else {
		run_rank(k);
		comm_close(k->c);
	}
	comm_local_exit(k->w, k->rank);
	return NULL;
}

static void run_world(Rank *ranks, int n, double timeout_s)
{
	DtmPlan plan = make_plan(n);
	CommMesh mesh;
	comm_mesh_from_plan(&mesh, &plan);
	char err[COMM_ERR_LEN];
	CommLocalWorld *w = comm_local_world_new(&mesh, timeout_s, err);
	CHECK(w != NULL);
	if (!w)
		return;
	pthread_t th[MAXR];
	for (int r = 0; r < n; r++) {
		ranks[r].plan = &plan;
		ranks[r].w = w;
		ranks[r].rank = r;
		CHECK(pthread_create(&th[r], NULL, rank_main, &ranks[r]) == 0);
	}
	for (int r = 0; r < n; r++)
		pthread_join(th[r], NULL);
	comm_local_world_free(w);
}

static bool all_equal(const float *d, float v)
{
	for (int i = 0; i < N; i++)
		if (d[i] != v)
			return false;
	return true;
}

static bool all_sum(const float *d, int n)
{
	return all_equal(d, (float)(n * (n + 1) / 2));
}

static void test_staging(void)
{
	DtmPlan p = make_plan(MAXR);
	bool stage[8];
	/* clobber overwrites A before `use` reads B: copy A aside */
	CHECK_EQ_INT(rt_overlap_staging(&p, pactions, 6, stage), 1);
	CHECK(stage[1] && !stage[0] && !stage[3]);
	/* B read before A is overwritten: waiting there anyway, no copy */
	DtmAction late[6] = { pactions[0], pactions[1], pactions[2], pactions[5], pactions[3],
			      pactions[4] };
	CHECK_EQ_INT(rt_overlap_staging(&p, late, 6, stage), 0);
	/* a WAIT or stream-0 communication before the clobber waits for all */
	DtmAction waits[6] = { pactions[0], pactions[1], { .kind = DTM_ACT_WAIT },
			       pactions[3], pactions[4], pactions[5] };
	CHECK_EQ_INT(rt_overlap_staging(&p, waits, 6, stage), 0);
	waits[2] = pactions[1];
	waits[2].stream = 0;
	waits[2].args[0] = BC;
	waits[2].args[1] = BC;
	CHECK_EQ_INT(rt_overlap_staging(&p, waits, 6, stage), 0);
	/* in place, stream 0, or a receive: nothing to copy */
	DtmAction other[6] = { pactions[0], pactions[1], pactions[2], pactions[3], pactions[4],
			       pactions[5] };
	other[1].nargs = 1;
	CHECK_EQ_INT(rt_overlap_staging(&p, other, 6, stage), 0);
	other[1] = pactions[1];
	other[1].stream = 0;
	CHECK_EQ_INT(rt_overlap_staging(&p, other, 6, stage), 0);
	other[1] = (DtmAction){ .kind = DTM_ACT_RECV, .nargs = 1, .args = { BA }, .stream = 1 };
	CHECK_EQ_INT(rt_overlap_staging(&p, other, 6, stage), 0);
	/* a send's buffer is its input */
	other[1].kind = DTM_ACT_SEND;
	CHECK_EQ_INT(rt_overlap_staging(&p, other, 6, stage), 1);
	CHECK(stage[1]);
}

static void test_overlap_local(void)
{
	const int64_t delay = 200 * 1000;
	/* off; on, waiting before the clobber; on, the input copied */
	for (int mode = 0; mode <= 2; mode++) {
		bool on = mode > 0;
		Rank ranks[MAXR] = { 0 };
		for (int r = 0; r < MAXR; r++) {
			ranks[r].overlap = on;
			ranks[r].copy = mode == 2;
			ranks[r].delay_us = delay;
			probe_saw[r] = probe2_saw[r] = -1;
		}
		run_world(ranks, MAXR, 30);
		for (int r = 0; r < MAXR; r++) {
			CHECK_EQ_INT(ranks[r].rc, 0);
			if (ranks[r].rc)
				fprintf(stderr, "rank %d: %s\n", r, ranks[r].err);
			/* the WAR wait kept the clobber off A until the all_reduce
			 * read it; the RAW wait made use read the result */
			CHECK(all_sum(ranks[r].d, MAXR));
			/* overlapped, the probe ran during the delay; in line, after;
			 * the second probe: after the clobber's wait, unless the
			 * input was copied and the clobber did not wait */
			float want1 = on ? 0.0f : 10.0f, want2 = mode == 2 ? 0.0f : 10.0f;
			CHECK(probe_saw[r] == want1 && probe2_saw[r] == want2);
			if (probe_saw[r] != want1 || probe2_saw[r] != want2)
				fprintf(stderr, "mode %d rank %d: the probes saw %g, %g\n", mode, r,
					(double)probe_saw[r], (double)probe2_saw[r]);
			CHECK(ranks[r].comm_s >= delay * 1e-6);
			CHECK(ranks[r].idle_s >= 0.5 * delay * 1e-6);
		}
	}
}

static void test_chain_local(void)
{
	plan_stage = &chain_stage;
	DtmPlan p = make_plan(MAXR);
	bool stage[5];
	/* statically the second all_reduce's input would be copied... */
	CHECK_EQ_INT(rt_overlap_staging(&p, chain_actions, 5, stage), 1);
	CHECK(stage[2]);
	Rank ranks[MAXR] = { 0 };
	for (int r = 0; r < MAXR; r++) {
		ranks[r].overlap = ranks[r].copy = true;
		ranks[r].delay_us = 100 * 1000;
	}
	/* ...but when queued the first still writes it */
	run_world(ranks, MAXR, 30);
	for (int r = 0; r < MAXR; r++) {
		CHECK_EQ_INT(ranks[r].rc, 0);
		CHECK(all_equal(ranks[r].d, (float)(MAXR * MAXR * (MAXR + 1) / 2)));
		if (ranks[r].rc || ranks[r].d[0] != 40.0f)
			fprintf(stderr, "chain rank %d: d %g %s\n", r, (double)ranks[r].d[0],
				ranks[r].err);
	}
	plan_stage = &pstage;
}

static void test_dead_rank_local(void)
{
	Rank ranks[MAXR] = { 0 };
	for (int r = 0; r < MAXR; r++) {
		ranks[r].overlap = true;
		ranks[r].die = r == 2;
	}
	double t0 = rt_now();
	run_world(ranks, MAXR, 20);
	double dt = rt_now() - t0;
	/* the failure notice, not the 20 s timeout */
	CHECK(dt < 5.0);
	for (int r = 0; r < MAXR; r++) {
		CHECK(ranks[r].rc != 0);
		const char *want = r == 2 ? "boom on purpose (action 'all_reduce a')" :
				   "rank 2 failed: boom on purpose";
		CHECK(strstr(ranks[r].err, want) != NULL);
		CHECK(ranks[r].peer_failed == (r != 2));
		if (!strstr(ranks[r].err, want) || r == 0)
			fprintf(stderr, "(expected) rank %d: %s\n", r, ranks[r].err);
	}
}

/* ---- mpi: this process is one rank ---- */

static int run_mpi(bool dead)
{
	if (!comm_mpi_open) {
		fprintf(stderr, "test_overlap: built without the mpi backend\n");
		return 1;
	}
	char err[COMM_ERR_LEN];
	DtmPlan plan = make_plan(MAXR);
	CommMesh mesh;
	comm_mesh_from_plan(&mesh, &plan);
	Rank k = { .plan = &plan, .overlap = true, .copy = true,
		   .delay_us = dead ? 0 : 200 * 1000 };
	if (comm_mpi_open(&k.c, &mesh, 20, err)) {
		fprintf(stderr, "error: %s\n", err);
		comm_mpi_finalize(true);
		return 1;
	}
	k.rank = k.c->rank;
	k.die = dead && k.rank == 2;
	CHECK(k.c->any_thread); /* Open MPI gives MPI_THREAD_SERIALIZED */
	probe_saw[k.rank % MAXR] = probe2_saw[k.rank % MAXR] = -1;
	run_rank(&k);
	if (dead) {
		/* the ctest matches "rank [013]: ...rank 2 failed: boom on purpose" */
		fprintf(stderr, "rank %d: %s (%.1f s)\n", k.rank, k.rc ? k.err : "no error",
			k.secs);
	} else {
		CHECK_EQ_INT(k.rc, 0);
		if (k.rc)
			fprintf(stderr, "rank %d: %s\n", k.rank, k.err);
		CHECK(all_sum(k.d, MAXR));
		CHECK(probe_saw[k.rank % MAXR] == 0.0f && probe2_saw[k.rank % MAXR] == 0.0f);
	}
	comm_close(k.c);
	int rc = dead ? (k.rc != 0) : check_failures != 0;
	if (!dead && (k.rank == 0 || rc))
		printf("rank %d: ", k.rank), check_report();
	comm_mpi_finalize(rc != 0);
	return rc;
}

int main(int argc, char **argv)
{
	bool mpi = false, dead = false;
	for (int i = 1; i < argc; i++) {
		mpi |= !strcmp(argv[i], "--mpi");
		dead |= !strcmp(argv[i], "--dead");
	}
	if (mpi)
		return run_mpi(dead);
	test_hazards();
	test_staging();
	test_overlap_local();
	test_chain_local();
	test_dead_rank_local();
	return check_report();
}
