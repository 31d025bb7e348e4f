/* test_comm.c - the collectives of runtime/comm.h on a backend: the
 * worked examples of REFERENCE.md ("Collectives") exactly, groups over
 * every subset of 2x2 and 2x2x2 meshes, uneven all_to_all, the dim forms,
 * send/recv rings, broadcast, avg/max/16-bit/i32, and ranks that fail,
 * exit early or arrive late (which must end in an error naming them, never
 * a hang).
 *
 *   test_comm                  every test on the local backend (4 or 8
 *                              thread ranks)
 *   mpirun -np 4 test_comm --mpi          the same checks, one process
 *                                         per rank (the mpi ctest)
 *   mpirun -np 4 test_comm --mpi --dead   rank 2 fails; the others must
 *                                         print "rank 2 failed" and exit 1
 *   mpirun -np 4 test_comm --mpi --stopped  rank 2 stops itself (SIGSTOP)
 *                                         before an all_reduce: the others
 *                                         time out naming rank 2, and the
 *                                         job ends
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/comm.h"
#include "runtime/rt.h"

static _Atomic int rfail, rcount;

/* CHECK for rank threads: counters shared, output names the rank. */
#define RCHECK(c, cond)                                                                   \
	do {                                                                              \
		atomic_fetch_add(&rcount, 1);                                             \
		if (!(cond)) {                                                            \
			atomic_fetch_add(&rfail, 1);                                      \
			fprintf(stderr, "%s:%d: rank %d: CHECK failed: %s\n", __FILE__,   \
				__LINE__, (c)->rank, #cond);                              \
		}                                                                         \
	} while (0)
#define RCALL(c, call)                                                                    \
	do {                                                                              \
		int rc_ = (call);                                                         \
		RCHECK(c, rc_ == 0);                                                      \
		if (rc_) {                                                                \
			fprintf(stderr, "  rank %d: %s\n", (c)->rank, comm_error(c));     \
			return -1;                                                        \
		}                                                                         \
	} while (0)

typedef int (*RankFn)(Comm *c, void *arg);

/* ---- harness: a world of thread ranks (local), or this process (mpi) ---- */

static bool use_mpi;
static Comm *mpi_comm;

typedef struct Job {
	CommLocalWorld *w;
	int rank;
	RankFn fn;
	void *arg;
	int rc;
	char err[COMM_ERR_LEN];
	double secs;
} Job;

static void *job_main(void *p)
{
	Job *j = p;
	Comm *c;
	double t0 = comm_now();
	if (comm_local_open(&c, j->w, j->rank, j->err)) {
		j->rc = -1;
		return NULL;
	}
	j->rc = j->fn(c, j->arg);
	if (j->rc) {
		snprintf(j->err, sizeof j->err, "%s", comm_error(c));
		/* a rank's own failure is announced; a peer's is not re-announced */
		if (!c->peer_failed)
			comm_fail(c, j->err[0] ? j->err : "failed");
	}
	j->secs = comm_now() - t0;
	comm_close(c);
	comm_local_exit(j->w, j->rank);
	return NULL;
}

/* Runs fn on every rank of mesh; jobs (optional) get each rank's result. */
static int run_world(const CommMesh *mesh, double timeout, RankFn fn, void *arg, Job *jobs_out)
{
	if (use_mpi) {
		if (comm_world_size(mesh) != mpi_comm->size)
			return 0; /* another world size: not this run's */
		mpi_comm->mesh = *mesh;
		comm_coords(mesh, mpi_comm->rank, mpi_comm->coords);
		return fn(mpi_comm, arg);
	}
	char err[COMM_ERR_LEN];
	int n = comm_world_size(mesh);
	CommLocalWorld *w = comm_local_world_new(mesh, timeout, err);
	CHECK(w != NULL);
	if (!w)
		return -1;
	Job jobs[16];
	pthread_t th[16];
	for (int r = 0; r < n; r++) {
		jobs[r] = (Job){ .w = w, .rank = r, .fn = fn, .arg = arg };
		pthread_create(&th[r], NULL, job_main, &jobs[r]);
	}
	int rc = 0;
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
		rc |= jobs[r].rc;
		if (jobs_out)
			jobs_out[r] = jobs[r];
	}
	comm_local_world_free(w);
	return rc;
}

static CommMesh mesh1(int n)
{
	CommMesh m = { .naxes = 1, .sizes = { n }, .names = { "dp" } };
	return m;
}

/* ---- REFERENCE.md worked examples ---- */

static int ref_set1(Comm *c, void *arg)
{
	int r = c->rank;
	float x[4] = { 0 + r, 1 + r, 2 + r, 3 + r }, y[4], s[1], g[4];
	RCALL(c, comm_all_reduce(c, 1, x, y, 4, DTM_F32, DTM_RED_SUM));
	float want[4] = { 6, 10, 14, 18 };
	RCHECK(c, memcmp(y, want, sizeof want) == 0);
	RCALL(c, comm_reduce_scatter(c, 1, x, s, 1, DTM_F32, DTM_RED_SUM));
	RCHECK(c, s[0] == want[r]);
	RCALL(c, comm_all_gather(c, 1, s, g, 1, DTM_F32));
	RCHECK(c, memcmp(g, want, sizeof want) == 0);
	/* in place all_reduce */
	RCALL(c, comm_all_reduce(c, 1, x, x, 4, DTM_F32, DTM_RED_SUM));
	RCHECK(c, memcmp(x, want, sizeof want) == 0);
	return 0;
}

static int ref_set2(Comm *c, void *arg)
{
	int r = c->rank;
	float x[4], y[4], s[1], t[4];
	for (int i = 0; i < 4; i++)
		x[i] = (float)(4 * r + i + 1);
	RCALL(c, comm_all_reduce(c, 1, x, y, 4, DTM_F32, DTM_RED_SUM));
	float want[4] = { 28, 32, 36, 40 };
	RCHECK(c, memcmp(y, want, sizeof want) == 0);
	RCALL(c, comm_reduce_scatter(c, 1, x, s, 1, DTM_F32, DTM_RED_SUM));
	RCHECK(c, s[0] == want[r]);
	RCALL(c, comm_all_to_all(c, 1, x, t, 1, DTM_F32));
	/* the transpose: r0 [1,5,9,13], r1 [2,6,10,14], ... */
	for (int j = 0; j < 4; j++)
		RCHECK(c, t[j] == (float)(4 * j + r + 1));
	return 0;
}

/* Length 2 with N = 4: all_reduce works as is; reduce_scatter and
 * all_gather work on the buffer padded to 4 (one element per rank; ranks 2
 * and 3 own padding). */
static int ref_len2(Comm *c, void *arg)
{
	int r = c->rank;
	float x[2] = { (float)r, (float)(10 * r) }, y[2];
	RCALL(c, comm_all_reduce(c, 1, x, y, 2, DTM_F32, DTM_RED_SUM));
	RCHECK(c, y[0] == 6 && y[1] == 60);
	float pad[4] = { x[0], x[1], 0, 0 }, s[1], g[4];
	RCALL(c, comm_reduce_scatter(c, 1, pad, s, 1, DTM_F32, DTM_RED_SUM));
	RCHECK(c, s[0] == (r == 0 ? 6 : r == 1 ? 60 : 0));
	RCALL(c, comm_all_gather(c, 1, s, g, 1, DTM_F32));
	RCHECK(c, g[0] == 6 && g[1] == 60 && g[2] == 0 && g[3] == 0);
	return 0;
}

/* ---- groups over every subset of the mesh axes ---- */

static float val(int rank, int i)
{
	return (float)(rank * 100 + i);
}

static int subsets(Comm *c, void *arg)
{
	enum { K = 37 }; /* not a multiple of 16: slices end mid-line */
	float x[K], y[K], g[8 * K], s[K];
	for (int i = 0; i < K; i++)
		x[i] = val(c->rank, i);
	for (uint32_t axes = 0; axes < (1u << c->mesh.naxes); axes++) {
		CommGroup gr = comm_group(&c->mesh, c->rank, axes);
		RCALL(c, comm_all_reduce(c, axes, x, y, K, DTM_F32, DTM_RED_SUM));
		for (int i = 0; i < K; i++) {
			float want = 0;
			for (int j = 0; j < gr.size; j++)
				want += val(comm_group_member(&c->mesh, c->rank, axes, j), i);
			RCHECK(c, y[i] == want);
		}
		RCALL(c, comm_all_gather(c, axes, x, g, K, DTM_F32));
		for (int j = 0; j < gr.size; j++)
			for (int i = 0; i < K; i++)
				RCHECK(c, g[j * K + i] ==
						  val(comm_group_member(&c->mesh, c->rank, axes, j), i));
		/* reduce_scatter of g (every member holds the same n*K): chunk
		 * index keeps n times member index's values */
		RCALL(c, comm_reduce_scatter(c, axes, g, s, K, DTM_F32, DTM_RED_MAX));
		for (int i = 0; i < K; i++)
			RCHECK(c, s[i] == val(c->rank, i));
		RCALL(c, comm_barrier(c, axes));
	}
	/* the group rule itself: 2x2 -> axis 0 groups [0,2],[1,3]; axis 1 [0,1],[2,3] */
	if (c->mesh.naxes == 2) {
		RCHECK(c, comm_group_member(&c->mesh, 1, 1, 1) == 3);
		RCHECK(c, comm_group_member(&c->mesh, 2, 2, 1) == 3);
		RCHECK(c, comm_group(&c->mesh, 3, 3).index == 3);
	}
	if (c->mesh.naxes == 3) {
		/* (pp, fsdp, tp) = (2, 2, 2): axes {pp, tp} of rank 2 = [2, 3, 6, 7] */
		int want[4] = { 2, 3, 6, 7 };
		for (int j = 0; j < 4; j++)
			RCHECK(c, comm_group_member(&c->mesh, 2, 5, j) == want[j]);
		RCHECK(c, comm_group(&c->mesh, 7, 5).index == 3);
	}
	return 0;
}

/* ---- uneven all_to_all, dims, p2p, broadcast, reductions ---- */

static int uneven_a2a(Comm *c, void *arg)
{
	int r = c->rank, n = c->size;
	int64_t sc[8] = { 0 }, rc[8] = { 0 };
	float in[64] = { 0 }, out[64] = { 0 };
	int k = 0;
	for (int j = 0; j < n; j++) {
		sc[j] = r + j + 1; /* to member j: r + j + 1 values */
		rc[j] = j + r + 1;
		for (int e = 0; e < sc[j]; e++)
			in[k++] = (float)(r * 100 + j * 10 + e);
	}
	RCALL(c, comm_all_to_allv(c, 1, in, sc, out, rc, DTM_F32));
	k = 0;
	for (int j = 0; j < n; j++)
		for (int e = 0; e < rc[j]; e++)
			RCHECK(c, out[k++] == (float)(j * 100 + r * 10 + e));
	return 0;
}

static int dims(Comm *c, void *arg)
{
	int r = c->rank, n = c->size;
	/* a [2, 3] shard; gathered along dim 1 -> [2, 3n] */
	float x[6], g[2 * 3 * 8];
	int64_t sh[2] = { 2, 3 };
	for (int i = 0; i < 6; i++)
		x[i] = (float)(r * 10 + i);
	RCALL(c, comm_all_gather_dim(c, 1, x, g, sh, 2, 1, DTM_F32));
	for (int row = 0; row < 2; row++)
		for (int j = 0; j < n; j++)
			for (int col = 0; col < 3; col++)
				RCHECK(c, g[row * 3 * n + j * 3 + col] == (float)(j * 10 + row * 3 + col));
	/* reduce_scatter along dim 1 of [2, 3n] (every rank holds g): each
	 * keeps [2, 3] = n * its own shard */
	float s[6];
	int64_t gs[2] = { 2, 3 * n };
	RCALL(c, comm_reduce_scatter_dim(c, 1, g, s, gs, 2, 1, DTM_F32, DTM_RED_SUM));
	for (int i = 0; i < 6; i++)
		RCHECK(c, s[i] == (float)n * x[i]);
	/* all_to_all: [n, 2] split along dim 0, concatenated along dim 1 ->
	 * [1, 2n]: element (0, 2j + e) = member j's row r */
	float a[16], b[16];
	int64_t as[2] = { n, 2 };
	for (int i = 0; i < 2 * n; i++)
		a[i] = (float)(r * 100 + i);
	RCALL(c, comm_all_to_all_dim(c, 1, a, b, as, 2, 0, 1, DTM_F32));
	for (int j = 0; j < n; j++)
		for (int e = 0; e < 2; e++)
			RCHECK(c, b[2 * j + e] == (float)(j * 100 + r * 2 + e));
	return 0;
}

static int p2p(Comm *c, void *arg)
{
	/* a ring along the last axis: send to +1, receive from -1 */
	uint32_t axes = 1u << (c->mesh.naxes - 1);
	CommGroup g = comm_group(&c->mesh, c->rank, axes);
	float mine[3] = { (float)c->rank, 1, 2 }, got[3];
	RCALL(c, comm_send(c, axes, 1, false, mine, sizeof mine));
	RCALL(c, comm_recv(c, axes, 1, false, got, sizeof got));
	int from = comm_group_member(&c->mesh, c->rank, axes, (g.index + g.size - 1) % g.size);
	RCHECK(c, got[0] == (float)from && got[2] == 2);
	/* offset 2 around the ring, twice (the mailbox is reused) */
	for (int k = 0; k < 2; k++) {
		float v = (float)(c->rank + k);
		RCALL(c, comm_send(c, axes, 2, false, &v, 4));
		RCALL(c, comm_recv(c, axes, 2, false, &v, 4));
		int src = comm_group_member(&c->mesh, c->rank, axes, (g.index + 2 * g.size - 2) % g.size);
		RCHECK(c, v == (float)(src + k));
	}
	return 0;
}

static int bcast_red(Comm *c, void *arg)
{
	int r = c->rank;
	float b[5];
	for (int i = 0; i < 5; i++)
		b[i] = (float)(r * 10 + i);
	RCALL(c, comm_broadcast(c, 1, b, 5, DTM_F32, 2));
	for (int i = 0; i < 5; i++)
		RCHECK(c, b[i] == (float)(20 + i));
	float x[3] = { (float)r, (float)-r, 1.5f }, y[3];
	RCALL(c, comm_all_reduce(c, 1, x, y, 3, DTM_F32, DTM_RED_AVG));
	RCHECK(c, y[0] == 1.5f && y[1] == -1.5f && y[2] == 1.5f);
	RCALL(c, comm_all_reduce(c, 1, x, y, 3, DTM_F32, DTM_RED_MAX));
	RCHECK(c, y[0] == 3 && y[1] == 0 && y[2] == 1.5f);
	int32_t xi[2] = { r, 7 }, yi[2];
	RCALL(c, comm_all_reduce(c, 1, xi, yi, 2, DTM_I32, DTM_RED_SUM));
	RCHECK(c, yi[0] == 6 && yi[1] == 28);
	/* bf16 / f16: summed in f32 and rounded once.  1 + 3 * 2^-9: each
	 * partial sum 1 + k*2^-9 rounds away in bf16 (8 bits), the f32 sum
	 * does not (rounds to 1 + 2^-7 * 0.75 -> 1.0078125 in bf16) */
	uint16_t hb[1] = { bf16_from_f32(r == 0 ? 1.0f : 0x1p-9f) }, ob[1];
	RCALL(c, comm_all_reduce(c, 1, hb, ob, 1, DTM_BF16, DTM_RED_SUM));
	RCHECK(c, bf16_to_f32(ob[0]) == bf16_to_f32(bf16_from_f32(1.0f + 3 * 0x1p-9f)));
	uint16_t hf[2] = { f16_from_f32(0.25f * (float)r), f16_from_f32(-1) }, of[2];
	RCALL(c, comm_all_reduce(c, 1, hf, of, 2, DTM_F16, DTM_RED_SUM));
	RCHECK(c, f16_to_f32(of[0]) == 1.5f && f16_to_f32(of[1]) == -4.0f);
	return 0;
}

/* A large all_reduce: slices cross blocks and cache lines. */
static int big(Comm *c, void *arg)
{
	int64_t n = 300001;
	float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)((i % 1000) * (c->rank + 1));
	int rc = comm_all_reduce(c, 1, x, y, n, DTM_F32, DTM_RED_SUM);
	RCHECK(c, rc == 0);
	int bad = 0;
	float f = (float)(c->size * (c->size + 1) / 2);
	for (int64_t i = 0; i < n && !rc; i++)
		bad += y[i] != (float)(i % 1000) * f;
	RCHECK(c, bad == 0);
	free(x);
	free(y);
	return rc;
}

/* ---- failures ---- */

typedef struct Failure {
	int who;        /* the rank that misbehaves */
	int how;        /* 0 fail with an error, 1 return early, 2 arrive late,
			 * 3 stop (SIGSTOP: mpi only) */
} Failure;

static int misbehave(Comm *c, void *arg)
{
	const Failure *f = arg;
	float x[4] = { 1, 2, 3, 4 }, y[4];
	if (c->rank == f->who) {
		if (f->how == 0)
			return comm_errf(c, "boom on purpose");
		if (f->how == 1)
			return 0;
		if (f->how == 3)
			raise(SIGSTOP); /* a hung process: answers nothing */
		usleep(1500 * 1000);
	}
	for (int k = 0; k < 3; k++)
		if (comm_all_reduce(c, 1, x, y, 4, DTM_F32, DTM_RED_SUM))
			return -1;
	return 0;
}

/* err names rank r among those a timed-out rank waited for: "waiting for
 * rank 2", or, when another rank was slow too (a loaded machine), "waiting
 * for ranks 2, 3". */
static bool waits_for(const char *err, int r)
{
	const char *p = strstr(err, "waiting for rank");
	if (!p)
		return false;
	p += strlen("waiting for rank");
	if (*p == 's')
		p++;
	for (;;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			return false;
		if (v == r)
			return true;
		if (strncmp(end, ", ", 2) != 0)
			return false;
		p = end + 2;
	}
}

static void test_failures(void)
{
	CommMesh m = mesh1(4);
	Job jobs[4];
	const char *want[3] = { "rank 2 failed: boom on purpose",
				"rank 2 finished without joining all_reduce over {dp}",
				NULL /* waits_for(err, 2) */ };
	for (int how = 0; how < 3; how++) {
		Failure f = { 2, how };
		double t0 = comm_now();
		int rc = run_world(&m, how == 2 ? 0.5 : 20.0, misbehave, &f, jobs);
		double dt = comm_now() - t0;
		CHECK(rc != 0);
		/* never a hang: a failed or finished rank is noticed without
		 * waiting for the (20 s) timeout; a late one just past its
		 * 0.5 s (bounds loose enough for a loaded machine) */
		CHECK(dt < (how == 2 ? 5.0 : 10.0));
		for (int r = 0; r < 4; r++) {
			if (r == 2) {
				CHECK(how == 1 ? jobs[r].rc == 0 : jobs[r].rc != 0);
				continue;
			}
			CHECK(jobs[r].rc != 0);
			/* a late rank: peers that timed out name it (with any
			 * other rank that was late too, on a loaded machine);
			 * the others may report that announcement instead */
			bool ok = how == 2 ? waits_for(jobs[r].err, 2)
			                   : strstr(jobs[r].err, want[how]) != NULL;
			CHECK(ok);
			if (!ok || r == 0)
				fprintf(stderr, "(expected, case %d) rank %d: %s\n", how, r, jobs[r].err);
		}
	}
}

/* ---- main ---- */

/* The sparse all_to_all (comm_all_to_all_rows): a dispatch's [groups 3,
 * experts 2n, C 4, d 3] split over the experts and concatenated over the
 * groups, each (group, expert) slab holding u rows then zeros.  What
 * arrives equals all_to_all_dim's, byte for byte (a -0.0 row travels; a
 * zero row before a used one too), and `sent` counts the slab counts and
 * the used rows sent to the others only. */
static int slab_used(int r, int g, int e)
{
	return (r + 2 * g + e) % 5; /* 0 .. C */
}

static int sparse_rows(Comm *c, void *arg)
{
	(void)arg;
	int n = comm_group(&c->mesh, c->rank, 1).size, r = c->rank;
	enum { G = 3, C = 4, D = 3 };
	int E = 2 * n;
	int64_t sh[4] = { G, E, C, D }, numel = (int64_t)G * E * C * D;
	float *in = calloc((size_t)numel, sizeof *in), *o1 = malloc((size_t)numel * sizeof *o1),
	      *o2 = malloc((size_t)numel * sizeof *o2);
	if (!in || !o1 || !o2) {
		free(in);
		free(o1);
		free(o2);
		return -1;
	}
	int64_t want = (int64_t)(n - 1) * G * 2 * 4; /* G x E/n slab counts to each other */
	for (int g = 0; g < G; g++)
		for (int e = 0; e < E; e++) {
			int u = slab_used(r, g, e);
			float *slab = in + ((int64_t)g * E + e) * C * D;
			for (int row = 0; row < u; row++)
				for (int k = 0; k < D; k++)
					slab[row * D + k] = (float)(r * 1000 + g * 100 + e * 10 + row) + 0.5f * k;
			if (u >= 2 && e % 2) /* a zero row before the last used one */
				memset(slab + (u - 2) * D, 0, sizeof(float) * D);
			if (u >= 1 && g == 1) /* the last used row -0.0: it is sent */
				for (int k = 0; k < D; k++)
					slab[(u - 1) * D + k] = -0.0f;
			if (e / 2 != comm_group(&c->mesh, c->rank, 1).index)
				want += (int64_t)u * D * 4;
		}
	int64_t sent = -1;
	RCALL(c, comm_all_to_all_dim(c, 1, in, o1, sh, 4, 1, 0, DTM_F32));
	RCALL(c, comm_all_to_all_rows(c, 1, in, o2, sh, 4, 1, 0, 2, DTM_F32, &sent));
	RCHECK(c, memcmp(o1, o2, (size_t)numel * sizeof *o1) == 0);
	RCHECK(c, sent == want);
	/* the rows dim must follow the split and concat dims */
	RCHECK(c, comm_all_to_all_rows(c, 1, in, o2, sh, 4, 1, 2, 2, DTM_F32, NULL) != 0);
	free(in);
	free(o1);
	free(o2);
	return 0;
}

static void run_all(void)
{
	CommMesh m4 = mesh1(4);
	CHECK_EQ_INT(run_world(&m4, 10, ref_set1, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, ref_set2, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, ref_len2, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, uneven_a2a, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, dims, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, sparse_rows, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, bcast_red, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, big, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m4, 10, p2p, NULL, NULL), 0);
	CommMesh m22 = { .naxes = 2, .sizes = { 2, 2 }, .names = { "dp", "tp" } };
	CHECK_EQ_INT(run_world(&m22, 10, subsets, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m22, 10, p2p, NULL, NULL), 0);
	CommMesh m222 = { .naxes = 3, .sizes = { 2, 2, 2 }, .names = { "pp", "fsdp", "tp" } };
	CHECK_EQ_INT(run_world(&m222, 10, subsets, NULL, NULL), 0);
	CHECK_EQ_INT(run_world(&m222, 10, p2p, NULL, NULL), 0);
}

int main(int argc, char **argv)
{
	bool dead = false, stopped = false;
	for (int i = 1; i < argc; i++) {
		use_mpi |= !strcmp(argv[i], "--mpi");
		dead |= !strcmp(argv[i], "--dead");
		stopped |= !strcmp(argv[i], "--stopped");
	}
	if (!use_mpi) {
		run_all();
		test_failures();
		check_count += rcount;
		check_failures += rfail;
		return check_report();
	}
	if (!comm_mpi_open) {
		fprintf(stderr, "test_comm: built without the mpi backend\n");
		return 1;
	}
	char err[COMM_ERR_LEN];
	CommMesh m4 = mesh1(4);
	dead |= stopped;
	if (comm_mpi_open(&mpi_comm, &m4, dead ? 2.0 : 30.0, err)) {
		fprintf(stderr, "error: %s\n", err);
		comm_mpi_finalize(true);
		return 1;
	}
	if (dead) {
		Failure f = { 2, stopped ? 3 : 0 };
		int rc = misbehave(mpi_comm, &f);
		if (rc) {
			fprintf(stderr, "error: rank %d: %s\n", mpi_comm->rank, comm_error(mpi_comm));
			if (!mpi_comm->peer_failed)
				comm_fail(mpi_comm, comm_error(mpi_comm));
		}
		comm_close(mpi_comm);
		comm_mpi_finalize(rc != 0);
		return rc ? 1 : 0;
	}
	run_all();
	check_count += rcount;
	check_failures += rfail;
	int rc = check_failures ? 1 : 0;
	if (mpi_comm->rank == 0 || rc)
		printf("rank %d: ", mpi_comm->rank), check_report();
	comm_close(mpi_comm);
	comm_mpi_finalize(rc != 0);
	return rc;
}
