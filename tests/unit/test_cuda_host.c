/* test_cuda_host.c - the CUDA device's host-side decisions, without a GPU
 * (runtime/cuda_host.h): launch shapes, the cuBLAS form of row-major GEMMs
 * (checked by running that form through a column-major reference GEMM with
 * cuBLAS's semantics), the events between the compute and communication
 * streams, NCCL groups and communicators, device and NVRTC target choice,
 * and the cubin cache's key and folder.  Where the build has the cuda
 * device (DTM_TEST_CUDA), also that probing reports "no CUDA
 * driver/device" on a machine without one. */
#include <stdlib.h>

#include "check.h"
#include "runtime/cuda_host.h"
#include "runtime/rt.h"

static char err[RT_ERR_LEN];

/* ---- launches ---- */

static const RtCudaLimits h200 = { 1024, 2147483647LL, 48 << 10, 227 << 10 };

static void test_launch(void)
{
	RtCudaLaunch l;
	DtmCudaKernel k = { "k", 1000, 256, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &h200, &l, err), 0);
	CHECK_EQ_INT(l.grid, 4);
	CHECK_EQ_INT(l.block, 256);
	CHECK(!l.skip && !l.smem_optin);
	k = (DtmCudaKernel){ "k", 1024, 256, 0 };
	rt_cuda_launch_config(&k, &h200, &l, err);
	CHECK_EQ_INT(l.grid, 4); /* exact multiple: no extra block */
	k = (DtmCudaKernel){ "k", 1, 0, 0 };
	rt_cuda_launch_config(&k, &h200, &l, err);
	CHECK_EQ_INT(l.block, 256); /* block 0 means the default */
	CHECK_EQ_INT(l.grid, 1);
	k = (DtmCudaKernel){ "k", 0, 128, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &h200, &l, err), 0);
	CHECK(l.skip);
	k = (DtmCudaKernel){ "big", 50257LL * 16384, 1024, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &h200, &l, err), 0);
	CHECK_EQ_INT(l.grid, (50257LL * 16384 + 1023) / 1024);
	k = (DtmCudaKernel){ "wide", 64, 2048, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &h200, &l, err), -1);
	CHECK(strstr(err, "wide") && strstr(err, "2048"));
	RtCudaLimits tiny = { 1024, 4, 48 << 10, 96 << 10 };
	k = (DtmCudaKernel){ "many", 5 * 256, 256, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &tiny, &l, err), -1);
	CHECK(strstr(err, "5 blocks") != NULL);
	k = (DtmCudaKernel){ "smem", 256, 256, 64 << 10 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &tiny, &l, err), 0);
	CHECK(l.smem_optin);
	CHECK_EQ_INT(l.smem, 64 << 10);
	k = (DtmCudaKernel){ "smem", 256, 256, 100 << 10 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &tiny, &l, err), -1);
	k = (DtmCudaKernel){ "neg", -1, 256, 0 };
	CHECK_EQ_INT(rt_cuda_launch_config(&k, &tiny, &l, err), -1);
}

/* ---- GEMM ---- */

/* cuBLAS's cublasGemmStridedBatchedEx, column-major, in doubles. */
static void colmajor_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
			  int lda, long long sa, const float *B, int ldb, long long sb, float beta,
			  float *C, int ldc, long long sc, int batch)
{
	for (int q = 0; q < batch; q++) {
		const float *a = A + q * sa, *b = B + q * sb;
		float *c = C + q * sc;
		for (int i = 0; i < m; i++) {
			for (int j = 0; j < n; j++) {
				double acc = 0;
				for (int p = 0; p < k; p++) {
					double x = ta ? a[p + i * lda] : a[i + p * lda];
					double y = tb ? b[j + p * ldb] : b[p + j * ldb];
					acc += x * y;
				}
				c[i + j * ldc] = (float)(alpha * acc + beta * c[i + j * ldc]);
			}
		}
	}
}

/* The plan's row-major GEMM, computed directly. */
static void rowmajor_ref(const DtmAction *a, const float *A, const float *B, float *C)
{
	int64_t batch = a->batch > 1 ? a->batch : 1;
	for (int64_t q = 0; q < batch; q++) {
		const float *x = A + q * a->stride_a, *y = B + q * a->stride_b;
		float *c = C + q * a->stride_c;
		for (int64_t i = 0; i < a->m; i++) {
			for (int64_t j = 0; j < a->n; j++) {
				double acc = 0;
				for (int64_t p = 0; p < a->k; p++) {
					double u = a->trans_a ? x[p * a->m + i] : x[i * a->k + p];
					double v = a->trans_b ? y[j * a->k + p] : y[p * a->n + j];
					acc += u * v;
				}
				c[i * a->n + j] = (float)(a->alpha * acc + a->beta * c[i * a->n + j]);
			}
		}
	}
}

/* Runs action a both ways on the same random operands; max difference. */
static double gemm_diff(const DtmAction *a)
{
	int64_t na, nb, nc;
	rt_gemm_extent(a, &na, &nb, &nc);
	float *A = malloc((size_t)na * 4), *B = malloc((size_t)nb * 4);
	float *C1 = malloc((size_t)nc * 4), *C2 = malloc((size_t)nc * 4);
	unsigned s = 12345;
	for (int64_t i = 0; i < na; i++)
		A[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 255) / 64 - 2;
	for (int64_t i = 0; i < nb; i++)
		B[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 255) / 64 - 2;
	for (int64_t i = 0; i < nc; i++)
		C1[i] = C2[i] = (float)(i % 7) - 3;
	rowmajor_ref(a, A, B, C1);
	RtCudaGemm g;
	double d = 1e30;
	if (rt_cuda_gemm_desc(a, &g, err) == 0) {
		if (!g.sequential) {
			colmajor_gemm(g.trans_first, g.trans_second, g.rows, g.cols, g.k, a->alpha, B,
				      g.ld_first, g.stride_first, A, g.ld_second, g.stride_second,
				      a->beta, C2, g.ldc, g.stride_c, g.batch);
		} else {
			for (int q = 0; q < g.batch; q++)
				colmajor_gemm(g.trans_first, g.trans_second, g.rows, g.cols, g.k,
					      a->alpha, B + q * g.stride_first, g.ld_first, 0,
					      A + q * g.stride_second, g.ld_second, 0, a->beta, C2,
					      g.ldc, 0, 1);
		}
		d = 0;
		for (int64_t i = 0; i < nc; i++)
			d = fmax(d, fabs((double)C1[i] - C2[i]));
	}
	free(A);
	free(B);
	free(C1);
	free(C2);
	return d;
}

static void test_gemm(void)
{
	for (int t = 0; t < 4; t++) {
		DtmAction a = { .kind = DTM_ACT_GEMM, .label = "g", .m = 5, .n = 3, .k = 4,
				.batch = 1, .trans_a = t & 1, .trans_b = t >> 1, .alpha = 1 };
		CHECK_NEAR(gemm_diff(&a), 0, 1e-5);
		a.alpha = 0.5f;
		a.beta = 1; /* accumulate into C */
		CHECK_NEAR(gemm_diff(&a), 0, 1e-5);
		/* batched, strided, with gaps between items of C */
		a = (DtmAction){ .kind = DTM_ACT_GEMM, .label = "b", .m = 4, .n = 6, .k = 3,
				 .batch = 3, .stride_a = 12, .stride_b = 18, .stride_c = 30,
				 .trans_a = t & 1, .trans_b = t >> 1, .alpha = 1 };
		CHECK_NEAR(gemm_diff(&a), 0, 1e-5);
		/* B broadcast to every item (attention-free linear on [B,T,D]) */
		a.stride_b = 0;
		CHECK_NEAR(gemm_diff(&a), 0, 1e-5);
	}
	/* every item into one C (a weight gradient summed over the batch) */
	DtmAction acc = { .kind = DTM_ACT_GEMM, .label = "acc", .m = 3, .n = 2, .k = 5,
			  .batch = 4, .stride_a = 15, .stride_b = 10, .stride_c = 0,
			  .trans_a = true, .alpha = 1, .beta = 1 };
	RtCudaGemm g;
	CHECK_EQ_INT(rt_cuda_gemm_desc(&acc, &g, err), 0);
	CHECK(g.sequential);
	CHECK_NEAR(gemm_diff(&acc), 0, 1e-4);
	/* operands swapped: cuBLAS's m is the plan's n */
	DtmAction a = { .kind = DTM_ACT_GEMM, .m = 7, .n = 11, .k = 13, .batch = 1, .trans_b = true };
	CHECK_EQ_INT(rt_cuda_gemm_desc(&a, &g, err), 0);
	CHECK_EQ_INT(g.rows, 11);
	CHECK_EQ_INT(g.cols, 7);
	CHECK(g.trans_first && !g.trans_second);
	CHECK_EQ_INT(g.ld_first, 13);
	CHECK_EQ_INT(g.ld_second, 13);
	CHECK_EQ_INT(g.ldc, 11);
	a.m = 1LL << 32;
	CHECK_EQ_INT(rt_cuda_gemm_desc(&a, &g, err), -1);
	/* types */
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_BF16, DTM_BF16, DTM_BF16, "x", err), 0);
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_BF16, DTM_BF16, DTM_F32, "x", err), 0);
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_F32, DTM_F32, DTM_F32, "x", err), 0);
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_F16, DTM_F16, DTM_F16, "x", err), 0);
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_F32, DTM_BF16, DTM_F32, "mix", err), -1);
	CHECK(strstr(err, "mix") && strstr(err, "f32 x bf16"));
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_F32, DTM_F32, DTM_BF16, "x", err), -1);
	CHECK_EQ_INT(rt_cuda_gemm_types(DTM_I32, DTM_I32, DTM_I32, "x", err), -1);
}

/* ---- streams and events ---- */

/* Buffers: X, Y, G in the act arena (G and Z overlap: reused memory), P a
 * param, S and R send/recv buffers. */
enum { X, Y, G, Z, P, S, R, NB };

static const DtmBuffer sbufs[NB] = {
	[X] = { .name = "x", .dtype = DTM_F32, .rank = 1, .shape = { 16 }, .arena = DTM_ARENA_ACT,
		.offset = 0, .bytes = 64 },
	[Y] = { .name = "y", .dtype = DTM_F32, .rank = 1, .shape = { 16 }, .arena = DTM_ARENA_ACT,
		.offset = 64, .bytes = 64 },
	[G] = { .name = "g", .dtype = DTM_F32, .rank = 1, .shape = { 16 }, .arena = DTM_ARENA_ACT,
		.offset = 128, .bytes = 64 },
	[Z] = { .name = "z", .dtype = DTM_F32, .rank = 1, .shape = { 8 }, .arena = DTM_ARENA_ACT,
		.offset = 160, .bytes = 32 },
	[P] = { .name = "p", .dtype = DTM_F32, .rank = 1, .shape = { 16 },
		.arena = DTM_ARENA_PARAM, .offset = 128, .bytes = 64 },
	[S] = { .name = "s", .dtype = DTM_F32, .rank = 1, .shape = { 4 }, .arena = DTM_ARENA_ACT,
		.offset = 256, .bytes = 16 },
	[R] = { .name = "r", .dtype = DTM_F32, .rank = 1, .shape = { 4 }, .arena = DTM_ARENA_ACT,
		.offset = 272, .bytes = 16 },
};

#define KERN(ph, o, ...) { .kind = DTM_ACT_KERNEL, .phase = ph, .nargs = sizeof((int[]){ __VA_ARGS__ }) / sizeof(int), .args = { __VA_ARGS__ }, .label = o }
#define COLL(ph, o, buf, ax) { .kind = DTM_ACT_COLL, .phase = ph, .nargs = 1, .args = { buf }, .axes = ax, .stream = 1, .label = o }
#define P2P(k, o, buf) { .kind = k, .phase = DTM_PHASE_FORWARD, .nargs = 1, .args = { buf }, .axes = 1, .stream = 1, .label = o }

static DtmPlan splan(const DtmAction *acts, int n, DtmStage *st)
{
	st->nactions = n;
	st->actions = acts;
	DtmPlan p = { .version = DTM_PLAN_VERSION, .nbuffers = NB, .buffers = sbufs, .nstages = 1,
		      .stages = st };
	return p;
}

static void test_schedule(void)
{
	const int F = DTM_PHASE_FORWARD, B = DTM_PHASE_BACKWARD;
	static const DtmAction acts[] = {
		/* 0 */ KERN(F, "write x", Y, X),
		/* 1 */ COLL(B, "all_reduce x", X, 1),       /* RAW on x: waits for 0 */
		/* 2 */ KERN(B, "read y", Y, P),              /* independent: no wait */
		/* 3 */ KERN(B, "read x", X, Y),              /* RAW on the reduced x: waits for 1 */
		/* 4 */ KERN(B, "read x again", X, P),        /* covered by 3's wait */
		/* 5 */ COLL(B, "all_reduce g", G, 2),        /* g last written by nobody */
		/* 6 */ KERN(B, "write z (g's memory)", Y, Z), /* WAR/WAW on g's bytes: waits for 5 */
		/* 7 */ { .kind = DTM_ACT_WAIT, .label = "wait" },
		/* 8 */ KERN(B, "read p", P, Y),              /* p is another arena: no wait */
	};
	DtmStage st;
	DtmPlan p = splan(acts, 9, &st);
	RtCudaSched s;
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, false, &s, err), 0);
	CHECK_EQ_INT(s.n, 9);
	int want_wait[9] = { -1, 0, -1, 1, -1, -1, 5, -1, -1 };
	int want_stream[9] = { 0, 1, 0, 0, 0, 1, 0, -1, 0 };
	for (int i = 0; i < 9; i++) {
		CHECK_EQ_INT(s.wait[i], want_wait[i]);
		CHECK_EQ_INT(s.stream[i], want_stream[i]);
		CHECK_EQ_INT(s.group_len[i], 1);
	}
	CHECK(s.record[0] && s.record[1] && s.record[5]);
	CHECK(!s.record[2] && !s.record[3] && !s.record[4] && !s.record[6]);
	CHECK_EQ_INT(s.nwaits, 3);
	rt_cuda_sched_free(&s);

	/* forward only: the backward actions do not run, nothing waits */
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, true, &s, err), 0);
	CHECK_EQ_INT(s.stream[0], 0);
	for (int i = 1; i < 9; i++)
		CHECK_EQ_INT(s.stream[i], -1);
	CHECK_EQ_INT(s.nwaits, 0);
	rt_cuda_sched_free(&s);

	CHECK_EQ_INT(rt_cuda_schedule(&p, 1, false, &s, err), -1);

	/* a communication action after an earlier one it overlaps needs no
	 * event: one stream runs in order; and a compute action that waited
	 * for the later comm action is ordered after the earlier one too */
	static const DtmAction two[] = {
		COLL(B, "ar x", X, 1),
		COLL(B, "ar x again", X, 1),
		KERN(B, "read x", X, Y),
		KERN(B, "write g", Y, G),
	};
	p = splan(two, 4, &st);
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, false, &s, err), 0);
	CHECK_EQ_INT(s.wait[0], -1);
	CHECK_EQ_INT(s.wait[1], -1);
	CHECK_EQ_INT(s.wait[2], 1);
	CHECK_EQ_INT(s.wait[3], -1);
	CHECK(!s.record[0] && s.record[1]);
	rt_cuda_sched_free(&s);

	/* comm stream waits for compute, compute for comm, alternating */
	static const DtmAction pingpong[] = {
		KERN(F, "x = f(y)", Y, X),
		COLL(F, "ar x", X, 1),
		KERN(F, "g = f(x)", X, G),
		COLL(F, "ar g", G, 1),
		KERN(F, "y = f(g)", G, Y),
	};
	p = splan(pingpong, 5, &st);
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, false, &s, err), 0);
	int pw[5] = { -1, 0, 1, 2, 3 };
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(s.wait[i], pw[i]);
	rt_cuda_sched_free(&s);
}

static void test_p2p_groups(void)
{
	DtmStage st;
	RtCudaSched s;
	/* a send and an independent receive form one NCCL group */
	static const DtmAction pair[] = {
		KERN(DTM_PHASE_FORWARD, "make s", Y, S),
		P2P(DTM_ACT_SEND, "send s", S),
		P2P(DTM_ACT_RECV, "recv r", R),
		KERN(DTM_PHASE_FORWARD, "use r", R, Y),
	};
	DtmPlan p = splan(pair, 4, &st);
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, false, &s, err), 0);
	CHECK_EQ_INT(s.group_len[1], 2);
	CHECK_EQ_INT(s.group_len[2], 0);
	CHECK_EQ_INT(s.group_len[0], 1);
	CHECK_EQ_INT(s.group_len[3], 1);
	CHECK_EQ_INT(s.wait[1], 0); /* the send waits for the kernel making s */
	CHECK_EQ_INT(s.wait[3], 2); /* the kernel waits for the receive */
	rt_cuda_sched_free(&s);
	/* receiving into the buffer just sent: not in the same group */
	static const DtmAction same[] = {
		P2P(DTM_ACT_SEND, "send s", S),
		P2P(DTM_ACT_RECV, "recv s", S),
		P2P(DTM_ACT_SEND, "send r", R),
	};
	p = splan(same, 3, &st);
	CHECK_EQ_INT(rt_cuda_schedule(&p, 0, false, &s, err), 0);
	CHECK_EQ_INT(s.group_len[0], 1);
	CHECK_EQ_INT(s.group_len[1], 2);
	CHECK_EQ_INT(s.group_len[2], 0);
	rt_cuda_sched_free(&s);
}

static void test_comm_axes(void)
{
	static const DtmAction acts[] = {
		COLL(DTM_PHASE_BACKWARD, "a", X, 2),
		KERN(DTM_PHASE_BACKWARD, "k", X, Y),
		COLL(DTM_PHASE_BACKWARD, "b", X, 1),
		COLL(DTM_PHASE_BACKWARD, "c", X, 2),
		P2P(DTM_ACT_SEND, "s", S),
		COLL(DTM_PHASE_BACKWARD, "d", X, 3),
	};
	DtmStage st;
	DtmPlan p = splan(acts, 6, &st);
	uint32_t ax[8];
	int n = rt_cuda_comm_axes(&p, ax, 8);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(ax[0], 2);
	CHECK_EQ_INT(ax[1], 1);
	CHECK_EQ_INT(ax[2], 3);
	CHECK_EQ_INT(rt_cuda_comm_axes(&p, ax, 2), 2);
}

/* ---- devices and NVRTC ---- */

static void test_devices(void)
{
	CHECK_EQ_INT(rt_cuda_pick_device(1, true, 0, 1, -1, err), 0);
	CHECK_EQ_INT(rt_cuda_pick_device(8, true, 5, 8, -1, err), 5);
	CHECK_EQ_INT(rt_cuda_pick_device(1, true, 0, 4, -1, err), -1);
	CHECK(strstr(err, "4 ranks") && strstr(err, "1 is visible") && strstr(err, "mpirun"));
	CHECK_EQ_INT(rt_cuda_pick_device(8, false, 13, 16, 5, err), 5);
	CHECK_EQ_INT(rt_cuda_pick_device(8, false, 0, 1, -1, err), 0);
	CHECK_EQ_INT(rt_cuda_pick_device(2, false, 3, 4, 3, err), -1);
	CHECK(strstr(err, "local rank 3") != NULL);
	CHECK_EQ_INT(rt_cuda_pick_device(0, true, 0, 1, -1, err), -1);
}

static void test_nvrtc(void)
{
	static const int sup[] = { 75, 80, 86, 87, 89, 90, 100, 103, 120 };
	int arch = 0;
	bool ptx = true;
	CHECK_EQ_INT(rt_cuda_pick_arch(9, 0, sup, 9, &arch, &ptx, err), 0);
	CHECK_EQ_INT(arch, 90);
	CHECK(!ptx);
	CHECK_EQ_INT(rt_cuda_pick_arch(9, 5, sup, 9, &arch, &ptx, err), 0);
	CHECK_EQ_INT(arch, 90);
	CHECK(ptx); /* newer than the compiler knows: PTX the driver compiles */
	CHECK_EQ_INT(rt_cuda_pick_arch(6, 0, sup, 9, &arch, &ptx, err), -1);
	CHECK(strstr(err, "6.0") != NULL);
	char opts[RT_CUDA_MAX_OPTS][RT_CUDA_OPT_LEN];
	int n = rt_cuda_nvrtc_options(90, false, opts);
	CHECK_EQ_INT(n, 2);
	CHECK_EQ_STR(opts[0], "--gpu-architecture=sm_90");
	n = rt_cuda_nvrtc_options(80, true, opts);
	CHECK_EQ_STR(opts[0], "--gpu-architecture=compute_80");
	for (int i = 0; i < n; i++)
		CHECK(strstr(opts[i], "fast") == NULL);
}

static void test_cache(void)
{
	char opts[RT_CUDA_MAX_OPTS][RT_CUDA_OPT_LEN], k1[33], k2[33], k3[33], k4[33], k5[33];
	int n = rt_cuda_nvrtc_options(90, false, opts);
	const char *src = "extern \"C\" __global__ void k(DtmCudaArgs a) {}";
	rt_cuda_cache_key(src, strlen(src), opts, n, 13, 0, k1);
	rt_cuda_cache_key(src, strlen(src), opts, n, 13, 0, k2);
	CHECK_EQ_STR(k1, k2);
	CHECK_EQ_INT(strlen(k1), 32);
	CHECK(strspn(k1, "0123456789abcdef") == 32);
	rt_cuda_cache_key(src, strlen(src) - 1, opts, n, 13, 0, k3); /* source */
	rt_cuda_cache_key(src, strlen(src), opts, n, 13, 1, k4);     /* NVRTC version */
	CHECK(strcmp(k1, k3) != 0);
	CHECK(strcmp(k1, k4) != 0);
	n = rt_cuda_nvrtc_options(80, false, opts); /* target */
	rt_cuda_cache_key(src, strlen(src), opts, n, 13, 0, k5);
	CHECK(strcmp(k1, k5) != 0);
	char dir[256];
	CHECK_EQ_INT(rt_cuda_cache_dir("/x/cache", "/home/u", dir, sizeof dir), 0);
	CHECK_EQ_STR(dir, "/x/cache/dtm/cubin");
	CHECK_EQ_INT(rt_cuda_cache_dir("relative", "/home/u", dir, sizeof dir), 0);
	CHECK_EQ_STR(dir, "/home/u/.cache/dtm/cubin"); /* XDG wants absolute paths */
	CHECK_EQ_INT(rt_cuda_cache_dir(NULL, "/home/u", dir, sizeof dir), 0);
	CHECK_EQ_STR(dir, "/home/u/.cache/dtm/cubin");
	CHECK_EQ_INT(rt_cuda_cache_dir("", "", dir, sizeof dir), -1);
	CHECK_EQ_INT(rt_cuda_cache_dir("/a/very/long/path", NULL, dir, 8), -1);
}

/* ---- the device's GEMM grid (--calibrate-gemm) ---- */

static void test_cal_grid(void)
{
	int64_t g[RT_CUDA_CAL_SHAPES + 1][3];
	int n = rt_cuda_cal_shapes(g, RT_CUDA_CAL_SHAPES + 1);
	CHECK_EQ_INT(n, RT_CUDA_CAL_SHAPES);
	/* every shape once; the corners of the grid; each one cuBLAS takes */
	bool one = false, big = false;
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < i; j++)
			CHECK(g[i][0] != g[j][0] || g[i][1] != g[j][1] || g[i][2] != g[j][2]);
		one = one || (g[i][0] == 1 && g[i][1] == 256 && g[i][2] == 64);
		big = big || (g[i][0] == 16384 && g[i][1] == 16384 && g[i][2] == 16384);
		DtmAction a = {.kind = DTM_ACT_GEMM, .m = g[i][0], .n = g[i][1], .k = g[i][2],
			       .batch = 1, .label = "calibrate"};
		RtCudaGemm d;
		CHECK_EQ_INT(rt_cuda_gemm_desc(&a, &d, err), 0);
		CHECK(d.rows == (int)g[i][1] && d.cols == (int)g[i][0] && !d.sequential);
	}
	CHECK(one && big);
	/* a shorter array gets its first shapes */
	CHECK_EQ_INT(rt_cuda_cal_shapes(g, 7), 7);
	/* calls per batch: ~5 ms of them, 1 to 1000 */
	CHECK_EQ_INT(rt_cuda_cal_reps(1e-3), 5);
	CHECK_EQ_INT(rt_cuda_cal_reps(0.3e-3), 17);
	CHECK_EQ_INT(rt_cuda_cal_reps(0.2), 1);
	CHECK_EQ_INT(rt_cuda_cal_reps(1e-9), RT_CUDA_CAL_MAX_REPS);
	CHECK_EQ_INT(rt_cuda_cal_reps(0), 1);
	CHECK_EQ_INT(rt_cuda_cal_reps(-1), 1);
	CHECK_EQ_INT(rt_cuda_cal_reps(NAN), 1);
}

/* ---- the device library, where built ---- */

static void test_probe(void)
{
#ifdef DTM_TEST_CUDA
	int ndev = -1;
	int rc = rt_cuda_probe(&ndev, err);
	if (rc == 0) {
		printf("cuda: %d GPU(s) visible\n", ndev);
		CHECK(ndev >= 1);
	} else {
		printf("cuda: %s\n", err);
		CHECK(strncmp(err, "no CUDA driver/device: ", 23) == 0);
	}
#else
	printf("cuda: the cuda device is not built; probe not tested\n");
#endif
}

int main(void)
{
	test_launch();
	test_gemm();
	test_schedule();
	test_p2p_groups();
	test_comm_axes();
	test_devices();
	test_nvrtc();
	test_cache();
	test_cal_grid();
	test_probe();
	return check_report();
}
