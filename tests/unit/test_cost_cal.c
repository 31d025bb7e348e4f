/* test_cost_cal.c - the cost model on calibrated curves (tools/cost.c,
 * tools/hw.c): kernel classes' factors, a GPU's calibrated profile, the
 * cache model of GEMM operands, the GEMM rate memo.
 *
 * Expected prices are worked by hand from the profile each test writes
 * (rates, bandwidths, factors), never copied from the code's output. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "cost_util.h"
#include "tools/calibrate.h"
#include "tools/cost.h"
#include "tools/hw.h"

/* One kernel of class (kname, label) over two buffers of `bytes` each
 * (the output of dtype dt). */
static void one_kernel_plan(DtmPlan *p, DtmBuffer *b, DtmAction *a, DtmStage *s,
                            const char *const *kname, const char *label, int64_t bytes,
                            DtmDtype dt)
{
	b[0] = (DtmBuffer){.bytes = bytes, .dtype = dt};
	b[1] = (DtmBuffer){.bytes = bytes, .dtype = dt};
	*a = (DtmAction){.kind = DTM_ACT_KERNEL, .nargs = 2, .args = {0, 1}, .kernel = 0,
	                 .label = label};
	*s = (DtmStage){.nactions = 1, .actions = a};
	*p = (DtmPlan){.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	               .mesh_sizes = {1}, .nbuffers = 2, .buffers = b, .nstages = 1, .stages = s,
	               .nkernels = 1, .kernel_names = kname,
	               .train = {.microbatches = 1, .precision = dt}};
}

/* Kernel classes' factors (hw.h): parsed, looked up, printed back; a
 * kernel's and a GEMM's price with them. */
static void test_kernel_factors(void)
{
	char cls[32];
	cost_kernel_class("fused", "gelu layer.0.h", cls, sizeof cls);
	CHECK_EQ_STR(cls, "fused.gelu");
	cost_kernel_class("fused", NULL, cls, sizeof cls);
	CHECK_EQ_STR(cls, "fused");
	cost_kernel_class("layernorm_bwd", "layernorm_bwd %7", cls, sizeof cls);
	CHECK_EQ_STR(cls, "layernorm_bwd");
	cost_kernel_class(NULL, "x", cls, sizeof cls);
	CHECK_EQ_STR(cls, "?");
	const char *text = "base = cpu\ncores = 1\nstep_overhead = 0\nkernel_overhead = 0\n"
	                   "stream_bw 1 = 10 GB/s\ngemm 1 64 64 64 = 20 GFLOP/s\n"
	                   "kernel_factor 1 gelu_bwd = 3\nkernel_factor 2 gelu_bwd = 2\n"
	                   "kernel_factor_bf16 1 gelu_bwd = 4\nkernel_factor 1 fused.gelu = 5\n"
	                   "kernel_factor 1 gemm = 1.5\n";
	HwProfile h = *hw_builtin("cpu");
	CHECK_EQ_INT(hw_parse_overrides(&h, text, strlen(text), "k.hw", stderr), 0);
	CHECK_EQ_INT(h.nkfactor, 5);
	/* the nearest thread count; 16-bit kernels the bf16 entries, else the
	 * f32 ones; a class not measured 1 */
	CHECK_NEAR(hw_kernel_factor(&h, "gelu_bwd", 1, DTM_F32), 3, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "gelu_bwd", 8, DTM_F32), 2, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "gelu_bwd", 2, DTM_BF16), 4, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "gelu_bwd", 1, DTM_F16), 4, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "fused.gelu", 1, DTM_BF16), 5, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "layernorm", 1, DTM_F32), 1, 0);
	CHECK_NEAR(hw_kernel_factor(&h, NULL, 1, DTM_F32), 1, 0);
	/* printed, it reads back to the same table */
	HwProfile r;
	reprint(&h, &r);
	CHECK(r.nkfactor == h.nkfactor && memcmp(r.kfactor, h.kfactor, sizeof h.kfactor) == 0);
	const char *bad = "kernel_factor 1 Gelu = 2\nkernel_factor 1 = 2\nkernel_factor 1 x = 0\n"
	                  "kernel_factor_bf16 1 x = 2 GB/s\nkernel_factor 0 x = 2\n";
	char *out = parse_errors(&r, bad, 5);
	CHECK(strstr(out, "bad.hw:1:17: error: bad kernel class 'Gelu'") != NULL);
	CHECK(strstr(out, "bad.hw:2:15: error: wrong arguments for 'kernel_factor'") != NULL);
	CHECK(strstr(out, "note: the form is 'kernel_factor THREADS CLASS = X'") != NULL);
	CHECK(strstr(out, "bad.hw:3:21: error: value '0' is out of range") != NULL);
	CHECK(strstr(out, "bad.hw:4:28: error: unknown unit 'GB/s' (a factor > 0") != NULL);
	CHECK(strstr(out, "bad.hw:5:15: error: bad thread count '0'") != NULL);
	free(out);
	/* a kernel: its bytes at the curve times its class's factor */
	static const char *const kn_gelu[] = {"gelu_bwd"}, *const kn_fused[] = {"fused"};
	static DtmBuffer kb[2];
	static DtmAction ka[1];
	static DtmStage ks[1];
	DtmPlan p;
	one_kernel_plan(&p, kb, ka, ks, kn_gelu, "gelu_bwd %9", 1 << 20, DTM_F32);
	CHECK_NEAR(plan_step_s(&p, &h), 3 * 2.0 * (1 << 20) / 10e9, 1e-15);
	kb[1].dtype = DTM_BF16;
	CHECK_NEAR(plan_step_s(&p, &h), 4 * 2.0 * (1 << 20) / 10e9, 1e-15);
	/* a fused group by its root's op; without a label, "fused": 1 */
	one_kernel_plan(&p, kb, ka, ks, kn_fused, "gelu layer.0.h", 1 << 20, DTM_F32);
	CHECK_NEAR(plan_step_s(&p, &h), 5 * 2.0 * (1 << 20) / 10e9, 1e-15);
	ka[0].label = NULL;
	CHECK_NEAR(plan_step_s(&p, &h), 2.0 * (1 << 20) / 10e9, 1e-15);
	CHECK_NEAR(cost_action_seconds(&p, &h, 1, &ka[0], NULL), 2.0 * (1 << 20) / 10e9, 1e-15);
	ka[0].label = "gelu x";
	CHECK_NEAR(cost_action_seconds(&p, &h, 1, &ka[0], NULL), 5 * 2.0 * (1 << 20) / 10e9, 1e-15);
	/* a GEMM: its shape's rate times the gemm factor */
	static DtmBuffer gb[3];
	static DtmAction ga[1];
	static DtmStage gs[1];
	one_gemm_plan(&p, gb, ga, gs, 64, 1 << 20, DTM_F32);
	CHECK_NEAR(plan_step_s(&p, &h), 1.5 * 2.0 * 64 * 64 * 64 / 20e9, 1e-15);
}

/* The cache model (cost.c cold_bytes): a GEMM whose operand was not used
 * within l2_size bytes is priced at no less than its bytes at
 * gemm_cold_bw; the step and the trace alike. */
static void test_cold_operands(void)
{
	const char *text = "base = cpu\ncores = 1\nstep_overhead = 0\nkernel_overhead = 0\n"
	                   "gemm 1 1 1024 256 = 20 GFLOP/s\nl2_size = 2 MiB\n"
	                   "gemm_cold_bw 1 = 10 GB/s\n";
	HwProfile h = *hw_builtin("cpu");
	CHECK_EQ_INT(hw_parse_overrides(&h, text, strlen(text), "c.hw", stderr), 0);
	CHECK_NEAR(h.l2_bytes, 2 << 20, 0);
	CHECK_NEAR(hw_gemm_cold_bw(&h, 4), 10e9, 0);
	HwProfile r;
	reprint(&h, &r);
	CHECK(r.l2_bytes == h.l2_bytes &&
	      memcmp(r.gemm_cold_bw, h.gemm_cold_bw, sizeof h.gemm_cold_bw) == 0);
	r.l2_bytes = 0; /* no cache size: no model */
	CHECK_NEAR(hw_gemm_cold_bw(&r, 1), 0, 0);
	char *out = parse_errors(&r, "gemm_cold_bw 1 = 5 GFLOP/s\nl2_size = 0\ngemm_cold_bw = 1\n", 3);
	CHECK(strstr(out, "bad.hw:1:20: error: unknown unit 'GFLOP/s' (bytes/s") != NULL);
	CHECK(strstr(out, "bad.hw:2:11: error: value '0' is out of range") != NULL);
	CHECK(strstr(out, "bad.hw:3:14: error: wrong arguments for 'gemm_cold_bw'") != NULL &&
	      strstr(out, "note: the form is 'gemm_cold_bw THREADS = BYTES/s'") != NULL);
	free(out);
	/* x [1, 256] times weights of 1 MiB into y [1, 1024]: two weights
	 * in turn fit the 2 MiB cache, three do not */
	enum { X, Y, W0, W1, W2 };
	static DtmBuffer b[5];
	static DtmAction a[3];
	b[X] = (DtmBuffer){.bytes = 1024, .dtype = DTM_F32};
	b[Y] = (DtmBuffer){.bytes = 4096, .dtype = DTM_F32};
	for (int i = 0; i < 3; i++) {
		b[W0 + i] = (DtmBuffer){.bytes = 1 << 20, .dtype = DTM_F32};
		a[i] = (DtmAction){.kind = DTM_ACT_GEMM, .nargs = 3, .args = {X, W0 + i, Y}, .m = 1,
		                   .n = 1024, .k = 256};
	}
	DtmStage st = {.nactions = 2, .actions = a};
	DtmPlan p = {.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	             .mesh_sizes = {1}, .nbuffers = 5, .buffers = b, .nstages = 1, .stages = &st,
	             .train = {.microbatches = 1, .precision = DTM_F32}};
	double hot = 2.0 * 1024 * 256 / 20e9, cold = (double)(1 << 20) / 10e9, mk;
	CHECK_NEAR(plan_step_s(&p, &h), 2 * hot, 1e-15);
	st.nactions = 3;
	/* the grid's time and the fetch of the cold weight on top */
	CHECK_NEAR(plan_step_s(&p, &h), 3 * (hot + cold), 1e-15);
	CostSpan sp[3], *spans[1] = {sp};
	CHECK_EQ_INT(cost_simulate(&p, &h, 1, spans, &mk), 0);
	CHECK_NEAR(mk, 3 * (hot + cold), 1e-15);
	for (int i = 0; i < 3; i++) /* what inspect --trace shows */
		CHECK_NEAR(sp[i].cold_bytes, 1 << 20, 0);
	/* without the model, the grid's time; one weight of 3 MiB alone is
	 * cold every time, and so is x, whose reuse crosses it (y was the
	 * last touched) */
	CHECK_NEAR(plan_step_s(&p, &r), 3 * hot, 1e-15);
	st.nactions = 1;
	b[W0].bytes = 3 << 20;
	CHECK_NEAR(plan_step_s(&p, &h), hot + ((3 << 20) + 1024) / 10e9, 1e-15);
	/* a C the GEMM adds to (beta = 1: a gradient accumulated over
	 * micro-batches, passes/accumulate.c) is not fetched cold: the GEMM
	 * streams it once, read and written, at the rate the grid's own
	 * timing holds (bench/README.md, "Weight gradients summed by their
	 * GEMMs"); as C of a beta = 0 GEMM it is */
	a[0].args[1] = W1;
	a[0].args[2] = W0; /* 3 MiB: cold as a beta = 0 GEMM's C */
	CHECK_NEAR(plan_step_s(&p, &h), hot + ((3 << 20) + (1 << 20) + 1024) / 10e9, 1e-15);
	a[0].beta = 1;
	CHECK_NEAR(plan_step_s(&p, &h), hot + ((1 << 20) + 1024) / 10e9, 1e-15);
	CHECK_NEAR(cost_simulate(&p, &h, 1, spans, &mk), 0, 0);
	CHECK_NEAR(sp[0].cold_bytes, (1 << 20) + 1024, 0);
}

/* The GEMM rate memo (cost.c gemm_rate) changes no price: a plan's step
 * is the sum of its GEMMs' cost_action_seconds, which has no memo, to the
 * bit, over shapes that repeat, differ only in batch or only in dtype,
 * fall between the grid's points, and outnumber the memo's slots (so
 * probes collide and the last ones are computed unkept). */
static void test_gemm_memo(void)
{
	const char *text = "base = cpu\ncores = 1\nstep_overhead = 0\nkernel_overhead = 3 us\n"
	                   "gemm 1 1 64 64 = 2 GFLOP/s\ngemm 1 64 64 64 = 20 GFLOP/s\n"
	                   "gemm 1 512 512 512 = 60 GFLOP/s\ngemm_bf16 1 64 64 64 = 50 GFLOP/s\n"
	                   "gemm_bf16 1 512 512 512 = 90 GFLOP/s\n";
	HwProfile h = *hw_builtin("cpu");
	CHECK_EQ_INT(hw_parse_overrides(&h, text, strlen(text), "m.hw", stderr), 0);
	/* 700 shapes, each m x n x k in 2 batch counts and 2 dtypes, then
	 * the first 300 again */
	enum { SHAPES = 700, N = SHAPES + 300 };
	static DtmBuffer b[3];
	static DtmAction a[N];
	b[0] = b[2] = (DtmBuffer){.bytes = 4096, .dtype = DTM_F32};
	b[1] = (DtmBuffer){.bytes = 4096, .dtype = DTM_BF16};
	for (int i = 0; i < N; i++) {
		int q = i % SHAPES, s = q / 4;
		a[i] = (DtmAction){.kind = DTM_ACT_GEMM, .nargs = 3, .args = {q % 2, q % 2, 2},
		                   .m = 1 + s % 37, .n = 16 + s * 7 % 300, .k = 8 + s * 13 % 500,
		                   .batch = 1 + q / 2 % 2};
	}
	DtmStage st = {.nactions = N, .actions = a};
	DtmPlan p = {.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	             .mesh_sizes = {1}, .nbuffers = 3, .buffers = b, .nstages = 1, .stages = &st,
	             .train = {.microbatches = 1, .precision = DTM_F32}};
	double sum = 0, mk;
	for (int i = 0; i < N; i++)
		sum += cost_action_seconds(&p, &h, 1, &a[i], NULL);
	CHECK(sum > 0);
	CHECK_NEAR(plan_step_s(&p, &h), sum, 0);
	CHECK_EQ_INT(cost_simulate(&p, &h, 1, NULL, &mk), 0);
	CHECK_NEAR(mk, sum, 0);
	/* a shape at a grid point: its rate */
	a[0] = (DtmAction){.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 0, 2}, .m = 64, .n = 64,
	                   .k = 64, .batch = 1};
	CHECK_NEAR(cost_action_seconds(&p, &h, 1, &a[0], NULL), 3e-6 + 2.0 * 64 * 64 * 64 / 20e9,
	           1e-18);
}

/* Writes text to the file at path. */
static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* `calibrate --device cuda`'s profile, made from what it measured (here
 * written by hand as the binary writes it: its GEMM grid's output and
 * --profile-actions files): the GPU's built-in base by its name, the
 * curves at one "thread", no `cores` and no fixed kernel time, the
 * peaks kept and the efficiencies reached. */
static void test_gpu_profile(void)
{
	CHECK_EQ_STR(calibrate_gpu_base("NVIDIA H200"), "h200");
	CHECK_EQ_STR(calibrate_gpu_base("NVIDIA GH200 480GB"), "h200");
	CHECK_EQ_STR(calibrate_gpu_base("NVIDIA H100 80GB HBM3"), "h100");
	CHECK_EQ_STR(calibrate_gpu_base("NVIDIA A100-SXM4-80GB"), "a100");
	CHECK_EQ_STR(calibrate_gpu_base("NVIDIA B200"), "b200");
	CHECK(calibrate_gpu_base("NVIDIA GeForce RTX 4090") == NULL);
	CHECK(calibrate_gpu_base(NULL) == NULL);
	char dir[] = "/tmp/dtm-test-gpuprof.XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char p32[2][64], p16[64];
	snprintf(p32[0], sizeof p32[0], "%s/a.tsv", dir);
	snprintf(p32[1], sizeof p32[1], "%s/b.tsv", dir);
	snprintf(p16, sizeof p16, "%s/c.tsv", dir);
	/* idx kind kernel flops mem_bytes argbytes m n k batch dtype s name label */
	write_text(p32[0], "# dtm action profile: 9 steps\n"
	                   "0\tkernel\t0\t0\t1000000\t1000000\t0\t0\t0\t0\t0\t1e-6\tadd\ta\n"
	                   "1\tkernel\t1\t0\t1000000\t1000000\t0\t0\t0\t0\t0\t1e-6\tadd\tb\n"
	                   "2\tkernel\t2\t0\t1000000\t1000000\t0\t0\t0\t0\t0\t1e-6\tadd\tc\n"
	                   "3\tkernel\t3\t0\t1000000\t1000000\t0\t0\t0\t0\t0\t1e-6\tadd\td\n"
	                   "4\tkernel\t4\t4000000000\t0\t1\t0\t0\t0\t0\t0\t1e-4\tattention\te\n"
	                   "5\tkernel\t5\t8000000000\t0\t1\t0\t0\t0\t0\t0\t4e-4\tattention_bwd\tf\n"
	                   "6\tgemm\t-1\t0\t0\t1\t2048\t768\t768\t1\t0\t1e-4\tgemm\tg\n");
	write_text(p32[1], "# dtm action profile: 9 steps\n"
	                   "0\tkernel\t0\t0\t1000000\t1000000\t0\t0\t0\t0\t0\t1e-6\tadd\ta\n");
	write_text(p16, "# dtm action profile: 9 steps\n"
	                "0\tkernel\t0\t2000000000\t0\t1\t0\t0\t0\t0\t1\t1e-5\tattention\te\n"
	                "1\tgemm\t-1\t0\t0\t1\t2048\t768\t768\t1\t1\t1e-5\tgemm\tg\n"
	                "2\tkernel\t1\t0\t1000000\t1000000\t0\t0\t0\t0\t1\t3e-6\tfused\tgelu h\n"
	                "3\tkernel\t2\t0\t4\t4\t0\t0\t0\t0\t1\t2e-6\tconst\tconst z\n");
	const char *grid = "# device: NVIDIA H200\nmem_size = 150754820096 B\n"
	                   "gemm 1 1024 1024 1024 = 4e13\ngemm_bf16 1 1024 1024 1024 = 6e14\n"
	                   "gemm_bf16 1 16384 16384 16384 = 7.5e14\n"
	                   "feed_rate = 1e9\nfeed_x_rate = 2e8\n";
	const char *const profs[2] = {p32[0], p32[1]};
	const double steps[2] = {1.0e-3, 5e-7}; /* the second below its actions' 1 us */
	HwProfile h;
	char gpu[64];
	CHECK(calibrate_gpu_profile(&h, grid, strlen(grid), profs, steps, 2, p16, gpu, sizeof gpu,
	                            stderr));
	CHECK_EQ_STR(gpu, "NVIDIA H200");
	CHECK_EQ_STR(h.name, "calibrated");
	CHECK(strncmp(h.source, "dtmc calibrate --device cuda on ", 32) == 0);
	CHECK(strstr(h.source, "NVIDIA H200; links h200's") != NULL);
	CHECK(hw_calibrated(&h) && h.cores == 0 && h.kernel_s == 0);
	CHECK_NEAR(h.peak_flops[DTM_BF16], 989e12, 1);
	CHECK_NEAR(h.gemm_eff, 7.5e14 / 989e12, 1e-12);
	CHECK_NEAR(h.mem_bytes, 150754820096.0, 0);
	CHECK_NEAR(h.feed_rate, 1e9, 0);
	CHECK_NEAR(h.intra.bw, hw_builtin("h200")->intra.bw, 0);
	/* the grid's 3 points and the model's GEMM in f32 and bf16 */
	CHECK_EQ_INT(h.ngemm, 5);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F32, 2048, 768, 768, 1, 1), 2.0 * 2048 * 768 * 768 / 1e-4,
	           1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_BF16, 2048, 768, 768, 1, 1),
	           2.0 * 2048 * 768 * 768 / 1e-5, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 1, false, DTM_F32), 4e13, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 1, true, DTM_F32), 2e13, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 1, false, DTM_BF16), 2e14, 1);
	/* 5 kernels of 1 MB in 5 us: 1 TB/s (the last bin takes a lone one) */
	CHECK_EQ_INT(h.nstream, 1);
	CHECK_NEAR(hw_stream_bw(&h, 1, 1e6), 1e12, 1e-3);
	CHECK_NEAR(h.mem_eff, 1e12 / 4800e9, 1e-12);
	/* the steps less their actions: 1 ms - 0.604 ms, and 0 (not below) */
	CHECK_NEAR(h.step_s, (1e-3 - 6.04e-4) / 2, 1e-12);
	/* kernel classes against that curve: the f32 adds at it (1), the bf16
	 * fused GELU (its root op from the label) 3x; the 4-byte const below
	 * the curve's sizes gives none */
	CHECK_EQ_INT(h.nkfactor, 2);
	CHECK_NEAR(hw_kernel_factor(&h, "add", 1, DTM_F32), 1, 1e-12);
	CHECK_NEAR(hw_kernel_factor(&h, "fused.gelu", 1, DTM_BF16), 3, 1e-9);
	CHECK_NEAR(hw_kernel_factor(&h, "fused.gelu", 1, DTM_F32), 1, 0);
	CHECK_NEAR(hw_kernel_factor(&h, "const", 1, DTM_BF16), 1, 0);
	/* written as calibrate writes it, it reads back the same */
	FILE *f;
	char *out;
	size_t len;
	capture_start(&f, &out, &len);
	fputs("base = h200\n", f);
	hw_print(f, &h);
	fclose(f);
	HwProfile r = *hw_builtin("h100");
	CHECK_EQ_INT(hw_parse_overrides(&r, out, len, "gpu.hw", stderr), 0);
	free(out);
	CHECK(r.cores == 0 && r.kernel_s == 0 && r.ngemm == h.ngemm && r.nstream == h.nstream);
	CHECK(r.nkfactor == h.nkfactor && memcmp(r.kfactor, h.kfactor, sizeof h.kfactor) == 0);
	CHECK(memcmp(r.gemm, h.gemm, sizeof h.gemm) == 0);
	CHECK_NEAR(r.gemm_eff, h.gemm_eff, 1e-15);
	CHECK_NEAR(r.attn_bf16_rate[1], h.attn_bf16_rate[1], 0);
	/* a GPU without a built-in: the H100's; no device line: "?" */
	const char *other = "# device: NVIDIA RTX 6000 Ada Generation\ngemm 1 64 64 64 = 1e12\n";
	CHECK(calibrate_gpu_profile(&h, other, strlen(other), profs, steps, 1, NULL, gpu,
	                            sizeof gpu, stderr));
	CHECK_EQ_STR(gpu, "NVIDIA RTX 6000 Ada Generation");
	CHECK(strstr(h.source, "links h100's") != NULL);
	CHECK_NEAR(h.peak_flops[DTM_BF16], 989e12, 1);
	CHECK(calibrate_gpu_profile(&h, "gemm 1 64 64 64 = 1e12\n", 23, profs, steps, 1, NULL,
	                            gpu, sizeof gpu, stderr));
	CHECK_EQ_STR(gpu, "?");
	/* a bad grid or a missing file: false and a message */
	capture_start(&f, &out, &len);
	CHECK(!calibrate_gpu_profile(&h, "gemm 1 64 = 1\n", 14, profs, steps, 1, NULL, gpu,
	                             sizeof gpu, f));
	const char *missing[1] = {"/nonexistent/x.tsv"};
	CHECK(!calibrate_gpu_profile(&h, grid, strlen(grid), missing, steps, 1, NULL, gpu,
	                             sizeof gpu, f));
	fclose(f);
	CHECK(strstr(out, "the GEMM grid:1:") != NULL);
	CHECK(strstr(out, "cannot read a --profile-actions file") != NULL);
	free(out);
	unlink(p32[0]);
	unlink(p32[1]);
	unlink(p16);
	rmdir(dir);
}

int main(void)
{
	test_gpu_profile();
	test_kernel_factors();
	test_cold_operands();
	test_gemm_memo();
	return check_report();
}
