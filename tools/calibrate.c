/* calibrate.c - `dtmc calibrate`: measure this machine into a hardware
 * profile the cost model reads (`--hw FILE`, and sweep's default).
 *
 * What it measures, all through dtm's own runtime:
 * - GEMMs: the binary's --calibrate-gemm times the runtime's own GEMM over
 *   a grid of shapes, on one rank over every core and on a rank per core
 *   (each on one thread, all at once), and the rate a GEMM reads operands
 *   evicted from the L2 at (`l2_size`, `gemm_cold_bw`: one-row micro-batch
 *   shapes on copies of a 1 MiB operand that fill the L2s four times
 *   over, runtime/dev_cpu.c cold_rate); it also times the synthetic
 *   regression feed's two parts (feed_x_rate: a sample's x; feed_rate: its
 *   target's product).
 * - kernels and GEMMs: a GPT (the shape of models/gpt.dtm) at a few sizes
 *   is built as `dtmc build` builds it and trained a few steps on one rank
 *   with --profile-actions, on 1 thread and on every core, each run twice
 *   (each action's faster mean kept: a shared VM's slow spell slows one
 *   run; the multi-rank ones once more at the end, again_multi).  From
 *   the per-action times: every GEMM is a point of the GEMM curve (its
 *   shape, the runtime's own blocked GEMM path), and all of them against
 *   the grid's times give the `gemm` factor (operands not in cache); the
 *   other kernels, binned by size, give bandwidth as a function of a
 *   kernel's bytes (dispatch and pool wake-up included, so small kernels
 *   come out slow), and each class of them (its op, or fused.ROOT) its
 *   factor over that curve (GELU's arithmetic, bf16 widening); attention
 *   kernels' FLOPs over their time give the attention rate, forward and
 *   backward apart; the step's time less its actions' the per-step
 *   overhead.  The first size again with `precision bf16` gives the bf16
 *   GEMMs' points and attention's bf16 rates (the grid times bf16 GEMMs
 *   too where the runtime runs them on oneDNN).
 * - communication: the binary's --calibrate-comm (runtime/comm.c's
 *   comm_calibrate) on a calibration GPT of 2, 4 (and the core count's)
 *   ranks, on the local backend (ranks as threads) or with --backend mpi
 *   under Open MPI's mpirun: each collective kind and send/recv at two
 *   sizes, latency and bandwidth through the two points.
 *
 * With --device cuda, the same on the GPU (calibrate_cuda): the binary's
 * --calibrate-gemm times cuBLAS through the runtime's GEMM call
 * (rt_cuda_calibrate_gemm), and the calibration GPT, at sizes where a GPU
 * is not all launches, is trained with --device cuda --profile-actions
 * (each kernel and GEMM timed by its own pair of CUDA events), in f32
 * and bf16.  The profile starts from the built-in one of that GPU
 * (calibrate_gpu_base): its datasheet peaks (MFU's denominator) and its
 * links, since NCCL's collectives need a second GPU, which this does not
 * measure; it has no `cores` (a device per rank), so the cost model
 * prices kernels by its curves and never stretches them.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/link.h"
#include "driver/driver.h"
#include "runtime/fsio.h"
#include "tools/calibrate.h"
#include "tools/cost.h"
#include "tools/sweep_impl.h"

const char calibrate_help[] =
        "usage: dtmc calibrate [--hw-out FILE] [--budget SECONDS] [--backend local|mpi]\n"
        "                      [--device cpu|cuda] [--print] [-q]\n"
        "\n"
        "Measures this machine and writes a hardware profile that --hw FILE reads\n"
        "and `dtmc sweep` uses by default: GEMM throughput by shape, kernel\n"
        "bandwidth, the rate GEMMs read operands not in cache at, the attention\n"
        "kernels' rate (f32 and bf16: GEMMs and attention\n"
        "are timed in both) and the runtime's per-kernel and\n"
        "per-step overheads (a small GPT built and trained with --profile-actions\n"
        "on one rank over every core and on a rank per core; the binary's\n"
        "--calibrate-gemm grid), the backend's latency and bandwidth per\n"
        "collective kind and group size (--calibrate-comm over 2 and 4 ranks),\n"
        "and what a collective costs inside a run (a data- and a tensor-parallel\n"
        "run of that GPT).\n"
        "\n"
        "options:\n"
        "  --hw-out FILE     where to write it (default: $DTM_HW_PROFILE, else\n"
        "                    ~/.config/dtm/hw-HOST.txt, where sweep looks)\n"
        "  --budget SECONDS  about how long to measure, C compiles of the\n"
        "                    calibration model included (default 60; with less, fewer\n"
        "                    model sizes: one takes about 15 s on 2 cores)\n"
        "  --backend B       local (default: ranks as threads) or mpi (one process\n"
        "                    per rank under Open MPI's mpirun, on this host)\n"
        "  --device D        cpu (default) or cuda: the GPU instead, through the\n"
        "                    runtime's --device cuda (cuBLAS GEMMs by shape, the\n"
        "                    generated kernels and attention, f32 and bf16); links\n"
        "                    and peaks are the GPU's built-in profile's (h100, h200,\n"
        "                    a100, b200), as one GPU cannot measure NCCL\n"
        "  --print           also print the profile on standard output\n"
        "  -q                no progress lines\n";

/* The calibration model: models/gpt.dtm (its tensor-parallel placements
 * too), without pipeline stages. */
static const char cal_model[] =
        "model calibrate\n"
        "let vocab = 256, ctx = 32, d = 64, heads = 4, layers = 2, batch = 8\n"
        "let ffn = 4 * d\n"
        "mesh (dp = 1, tp = 1)\n"
        "input tokens  : i32[batch, ctx] @ [dp, _]\n"
        "input targets : i32[batch, ctx] @ [dp, _]\n"
        "param wte  : f32[vocab, d] @ [tp, _] init normal(0, 0.02)\n"
        "param wpe  : f32[ctx, d] init normal(0, 0.01)\n"
        "param lnf  : f32[d] init ones\n"
        "param lnfb : f32[d] init zeros\n"
        "block layer(x) {\n"
        "  param ln1 : f32[d] init ones\n"
        "  param ln1b : f32[d] init zeros\n"
        "  param wq : f32[d, d] @ [_, tp] init normal(0, 0.02)\n"
        "  param bq : f32[d] @ [tp] init zeros\n"
        "  param wk : f32[d, d] @ [_, tp] init normal(0, 0.02)\n"
        "  param bk : f32[d] @ [tp] init zeros\n"
        "  param wv : f32[d, d] @ [_, tp] init normal(0, 0.02)\n"
        "  param bv : f32[d] @ [tp] init zeros\n"
        "  param wo : f32[d, d] @ [tp, _] init normal(0, 0.02)\n"
        "  param bo : f32[d] init zeros\n"
        "  param ln2 : f32[d] init ones\n"
        "  param ln2b : f32[d] init zeros\n"
        "  param wfc : f32[d, ffn] @ [_, tp] init normal(0, 0.02)\n"
        "  param bfc : f32[ffn] @ [tp] init zeros\n"
        "  param wproj : f32[ffn, d] @ [tp, _] init normal(0, 0.02)\n"
        "  param bproj : f32[d] init zeros\n"
        "  h = layernorm(x, ln1, ln1b)\n"
        "  q = h @ wq + bq\n"
        "  k = h @ wk + bk\n"
        "  v = h @ wv + bv\n"
        "  x = x + attention(q, k, v, heads = heads, causal = true) @ wo + bo\n"
        "  h = gelu(layernorm(x, ln2, ln2b) @ wfc + bfc) @ [dp, _, tp]\n"
        "  x = x + h @ wproj + bproj\n"
        "  return x\n"
        "}\n"
        "forward {\n"
        "  x = embed(wte, tokens) + wpe\n"
        "  for i in 0 .. layers {\n"
        "    x = layer(x)\n"
        "  }\n"
        "  logits = layernorm(x, lnf, lnfb) @ transpose(wte)\n"
        "  loss = cross_entropy(logits, targets)\n"
        "}\n"
        "train {\n"
        "  optimizer adamw(lr = 1e-3, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1, "
        "clip = 1.0)\n"
        "  precision f32\n"
        "  steps 10\n  uneven_shards true\n"
        "  data synthetic\n"
        "}\n";

/* Sizes of the calibration model (-D values), in the order they are
 * measured while the budget lasts. */
typedef struct CalSize {
	const char *vocab, *ctx, *d, *heads, *layers, *batch;
} CalSize;

static const CalSize sizes[] = {
        {"512", "128", "256", "4", "2", "8"},  {"256", "32", "64", "4", "2", "8"},
        {"128", "16", "32", "2", "1", "2"},    {"1024", "256", "512", "8", "1", "4"},
        {"512", "64", "128", "4", "2", "16"},
};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

typedef struct Opts {
	const char *out;
	const char *backend; /* local or mpi */
	bool cuda;           /* --device cuda */
	double budget;
	bool print, quiet;
	double t0; /* when it started */
} Opts;

/* One profiled action. */
typedef struct Act {
	bool gemm, bwd; /* a GEMM; a backward kernel (its op ends in _bwd) */
	bool bf16;      /* its rate argument is bf16 (a GEMM's A) */
	double flops, bytes, m, n, k, batch, s;
	char cls[HW_KCLASS_LEN]; /* a kernel's class (cost_kernel_class) */
} Act;

typedef struct Fit {
	Act *acts;
	int nacts, cap;
	double over_sum; /* step time less its actions', summed */
	int nover;
} Fit;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Builds the calibration model at size z on mesh into exe, its plan
 * (in arena a, which the caller frees) in *plan; false after printing. */
static bool build_model(Arena *a, const char *src, const CalSize *z, const char *mesh,
                        const char *train, bool cuda, const char *exe, const DtmPlan **plan)
{
	Diag d;
	diag_init(&d, stderr);
	d.no_warnings = true;
	LowerOptions lo = {0};
	const char *names[] = {"vocab", "ctx", "d", "heads", "layers", "batch"};
	const char *vals[] = {z->vocab, z->ctx, z->d, z->heads, z->layers, z->batch};
	for (int i = 0; i < 6; i++) {
		lo.define_names[lo.ndefines] = names[i];
		lo.define_values[lo.ndefines++] = vals[i];
	}
	lo.mesh = mesh;
	if (train)
		lo.train[lo.ntrain++] = train;
	DrvOptions o = {0};
	DrvSource ds;
	Compiled cc;
	bool ok = drv_parse(&ds, a, &d, src) && drv_lower_ast(&cc, a, &d, &ds, &lo, &o) &&
	          pass_check_input(cc.m, &d) && drv_run(&cc, &d, &o) && drv_plan(&cc, &d, &o);
	if (ok) {
		CgBuildOptions bo = {.output = exe, .cuda = cuda};
		ok = cg_build(cc.m, cc.an.fuse, cc.an.mem, cc.plan, &bo, &d);
	}
	if (d.nerr > 0)
		diag_summary(&d);
	*plan = ok ? cc.plan : NULL;
	return ok;
}

static bool push(Fit *f, Act a)
{
	if (f->nacts == f->cap) {
		int cap = f->cap ? 2 * f->cap : 256;
		Act *n = realloc(f->acts, sizeof *n * (size_t)cap);
		if (!n)
			return false;
		f->acts = n;
		f->cap = cap;
	}
	f->acts[f->nacts++] = a;
	return true;
}

/* Reads a --profile-actions file into f; the sum of its seconds in *sum. */
static bool read_profile(const char *path, Fit *f, double *sum)
{
	FILE *in = fopen(path, "r");
	if (!in)
		return false;
	char line[2048];
	*sum = 0;
	bool ok = true;
	while (ok && fgets(line, sizeof line, in)) {
		if (line[0] == '#')
			continue;
		int idx, kernel, dtype;
		char kind[16], name[64] = "", label[64] = "";
		long long flops, memb, m, n, k, batch;
		double argb, s;
		/* the label's first word: a fused group's root op */
		if (sscanf(line,
		           "%d\t%15s\t%d\t%lld\t%lld\t%lf\t%lld\t%lld\t%lld\t%lld\t%d\t%lf\t%63s\t%63s",
		           &idx, kind, &kernel, &flops, &memb, &argb, &m, &n, &k, &batch, &dtype, &s,
		           name, label) < 13)
			continue;
		size_t nl = strlen(name);
		Act a = {.gemm = !strcmp(kind, "gemm"), .flops = (double)flops,
		         .bytes = memb > 0 ? (double)memb : argb, .m = (double)m, .n = (double)n,
		         .k = (double)k, .batch = (double)(batch > 1 ? batch : 1), .s = s,
		         .bwd = nl > 4 && !strcmp(name + nl - 4, "_bwd"),
		         .bf16 = dtype == (int)DTM_BF16};
		if (a.gemm && a.flops <= 0)
			a.flops = 2 * a.m * a.n * a.k * a.batch;
		cost_kernel_class(name, label, a.cls, sizeof a.cls);
		*sum += s;
		ok = push(f, a);
	}
	fclose(in);
	return ok;
}

/* Whether a is a plain kernel: no FLOPs (not attention), not a GEMM;
 * stream_points' and kernel_factors' kernels. */
static bool plain(const Act *a)
{
	return !a->gemm && a->flops <= 0 && a->bytes >= 1 && a->s > 0;
}

/* The plain kernels' bandwidth by size: kernels binned by log2 of their
 * bytes, each bin's bytes over its seconds (dispatch included) at the
 * bin's geometric-mean size; bins of under 4 kernels are merged into the
 * next. */
static void stream_points(const Fit *f, int t, HwProfile *hw)
{
	enum { NBIN = 48 };
	double by[NBIN] = {0}, sec[NBIN] = {0}, lsum[NBIN] = {0};
	int cnt[NBIN] = {0};
	for (int i = 0; i < f->nacts; i++) {
		const Act *a = &f->acts[i];
		if (!plain(a))
			continue;
		int b = (int)floor(log2(a->bytes));
		b = b < 0 ? 0 : b >= NBIN ? NBIN - 1 : b;
		by[b] += a->bytes;
		sec[b] += a->s;
		lsum[b] += log(a->bytes);
		cnt[b]++;
	}
	double cb = 0, cs = 0, cl = 0;
	int cc = 0;
	for (int b = 0; b < NBIN; b++) {
		cb += by[b], cs += sec[b], cl += lsum[b], cc += cnt[b];
		bool last = true;
		for (int j = b + 1; j < NBIN; j++)
			last = last && cnt[j] == 0;
		if (cc == 0 || (cc < 4 && !last) || cs <= 0)
			continue;
		if (hw->nstream < HW_MAX_STREAM)
			hw->stream[hw->nstream++] = (HwStreamPoint){t, round(exp(cl / cc)), cb / cs};
		cb = cs = cl = 0;
		cc = 0;
	}
}

/* Sets class cls's factor at t threads (bf16 or f32 kernels) to x. */
static void set_factor(HwProfile *hw, const char *cls, int t, bool bf16, double x)
{
	HwKernelFactor *kf = NULL;
	for (int j = 0; j < hw->nkfactor && !kf; j++)
		if (hw->kfactor[j].threads == t && hw->kfactor[j].bf16 == (int)bf16 &&
		    !strcmp(hw->kfactor[j].cls, cls))
			kf = &hw->kfactor[j];
	if (!kf && hw->nkfactor == HW_MAX_KFACTOR)
		return;
	if (!kf)
		kf = &hw->kfactor[hw->nkfactor++];
	*kf = (HwKernelFactor){.threads = t, .bf16 = bf16, .factor = x};
	snprintf(kf->cls, sizeof kf->cls, "%s", cls);
}

/* Each kernel class's factor at t threads (hw.h HwKernelFactor): its
 * kernels' measured seconds over what the stream curve (stream_points',
 * and the per-kernel time) gives for their bytes, as compute_seconds
 * prices them.  bf16: of the bf16 kernels (a bf16 run's), else of the
 * f32 ones.  Only kernels of the curve's sizes count: below its smallest
 * point it is extrapolated (a 4-byte `const` is its dispatch, 800x what
 * the smallest point's bandwidth gives). */
static void kernel_factors(const Fit *f, int t, bool bf16, HwProfile *hw)
{
	double kover = hw_kernel_overhead(hw, t), minb = INFINITY;
	for (int j = 0; j < hw->nstream; j++)
		if (hw->stream[j].threads == t)
			minb = fmin(minb, hw->stream[j].bytes);
	/* per class, in order of first appearance: measured and priced */
	struct {
		const char *cls;
		double s, pred;
	} c[HW_MAX_KFACTOR];
	int nc = 0;
	for (int i = 0; i < f->nacts; i++) {
		const Act *a = &f->acts[i];
		if (!plain(a) || a->bf16 != bf16 || a->bytes < minb)
			continue;
		int k = 0;
		while (k < nc && strcmp(c[k].cls, a->cls))
			k++;
		if (k == nc && nc == HW_MAX_KFACTOR)
			continue;
		if (k == nc) {
			c[k].cls = a->cls;
			c[k].s = c[k].pred = 0;
			nc++;
		}
		c[k].s += a->s;
		c[k].pred += kover + a->bytes / hw_stream_bw(hw, t, a->bytes);
	}
	for (int k = 0; k < nc; k++)
		if (c[k].pred > 0)
			set_factor(hw, c[k].cls, t, bf16, c[k].s / c[k].pred);
}

/* The step's GEMMs against the grid's, the same shapes timed back to back
 * with their operands in cache: the `gemm` class's factor at t threads
 * (bf16 operands or f32), their measured seconds over what the grid's
 * points give (d=256 GPT's bf16 GEMMs at one thread: 1.3x on an AMX
 * Xeon).  Before gemm_points adds the step's own shapes to the grid. */
static void gemm_factor(const Fit *f, int t, bool bf16, HwProfile *hw)
{
	double s = 0, pred = 0;
	for (int i = 0; i < f->nacts; i++) {
		const Act *a = &f->acts[i];
		if (a->gemm && a->flops > 0 && a->s > 0 && a->bf16 == bf16) {
			double r = hw_gemm_rate(hw, bf16 ? DTM_BF16 : DTM_F32, a->m, a->n, a->k,
			                        a->batch, t);
			s += a->s;
			pred += r > 0 ? a->flops / r : 0;
		}
	}
	if (pred > 0)
		set_factor(hw, "gemm", t, bf16, s / pred);
}

/* Attention kernels' FLOPs over their seconds, forward or backward, on
 * f32 or bf16 operands. */
static double attn_rate(const Fit *f, bool bwd, bool bf16)
{
	double fl = 0, s = 0;
	for (int i = 0; i < f->nacts; i++) {
		const Act *a = &f->acts[i];
		if (!a->gemm && a->flops > 0 && a->bwd == bwd && a->bf16 == bf16) {
			fl += a->flops;
			s += a->s;
		}
	}
	return s > 0 ? fl / s : 0;
}

/* Each GEMM shape's rate (its instances' FLOPs over their time) as a
 * point of t threads (f32 and bf16 operands apart), as the grid would
 * time it: times the `gemm` factor (gemm_factor's; the cost model
 * multiplies every GEMM by it, so the step's own shapes come out as
 * measured). */
static void gemm_points(const Fit *f, int t, HwProfile *hw)
{
	for (int i = 0; i < f->nacts; i++) {
		const Act *a = &f->acts[i];
		if (!a->gemm || a->flops <= 0)
			continue;
		double m = a->m * a->batch; /* hw_gemm_rate's batch convention */
		bool seen = false;
		for (int j = 0; j < i && !seen; j++) {
			const Act *b = &f->acts[j];
			seen = b->gemm && b->m * b->batch == m && b->n == a->n && b->k == a->k &&
			       b->bf16 == a->bf16;
		}
		if (seen)
			continue;
		double fl = 0, s = 0;
		for (int j = i; j < f->nacts; j++) {
			const Act *b = &f->acts[j];
			if (b->gemm && b->m * b->batch == m && b->n == a->n && b->k == a->k &&
			    b->bf16 == a->bf16) {
				fl += b->flops;
				s += b->s;
			}
		}
		if (s <= 0)
			continue;
		double rate = fl / s * hw_kernel_factor(hw, "gemm", t, a->bf16 ? DTM_BF16 : DTM_F32);
		/* the model's own GEMM, timed in training, and the grid's
		 * point of the same shape: the faster (slow spells only slow) */
		HwGemmPoint *g = NULL;
		for (int j = 0; j < hw->ngemm && !g; j++)
			if (hw->gemm[j].threads == t && hw->gemm[j].m == round(m) &&
			    hw->gemm[j].n == a->n && hw->gemm[j].k == a->k &&
			    hw->gemm[j].bf16 == (int)a->bf16)
				g = &hw->gemm[j];
		if (!g && hw->ngemm == HW_MAX_GEMM)
			continue;
		if (g)
			g->rate = fmax(g->rate, rate);
		else
			hw->gemm[hw->ngemm++] = (HwGemmPoint){t, round(m), a->n, a->k, rate, a->bf16};
	}
}

/* ---- the command ---- */

static int parse_opts(int argc, char **argv, Opts *o)
{
	*o = (Opts){.budget = 60, .backend = "local"};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(calibrate_help, stdout);
			return 2;
		} else if (!strcmp(a, "--print")) {
			o->print = true;
		} else if (!strcmp(a, "-q")) {
			o->quiet = true;
		} else if (!strcmp(a, "--hw-out") || !strcmp(a, "--budget") ||
		           !strcmp(a, "--backend") || !strcmp(a, "--device")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "dtmc: error: option '%s' needs a value\n", a);
				return 1;
			}
			const char *v = argv[++i];
			if (!strcmp(a, "--hw-out")) {
				o->out = v;
				continue;
			}
			if (!strcmp(a, "--device")) {
				if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
					fprintf(stderr, "dtmc: error: --device needs cpu or cuda, "
					                "got '%s'\n", v);
					return 1;
				}
				o->cuda = !strcmp(v, "cuda");
				continue;
			}
			if (!strcmp(a, "--backend")) {
				if (strcmp(v, "local") && strcmp(v, "mpi")) {
					fprintf(stderr, "dtmc: error: --backend needs local or mpi, "
					                "got '%s'\n", v);
					return 1;
				}
				o->backend = v;
				continue;
			}
			char *end;
			errno = 0;
			o->budget = strtod(v, &end);
			if (!*v || *end || errno || !(o->budget >= 1 && o->budget <= 3600)) {
				fprintf(stderr,
				        "dtmc: error: --budget needs seconds from 1 to 3600, got '%s'\n",
				        v);
				return 1;
			}
		} else {
			fprintf(stderr,
			        "dtmc: error: unknown option '%s' (see dtmc calibrate --help)\n", a);
			return 1;
		}
	}
	return 0;
}

static void note(const Opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const Opts *o, const char *fmt, ...)
{
	if (o->quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "dtmc: calibrate: [%5.1f s] ", now() - o->t0);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void remove_files(const char *dir)
{
	static const char *const names[] = {"cal.dtm", "cal", "cal.dtm.c", "prof.tsv",
	                                    "log.jsonl", "run.txt"};
	char path[4300];
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		snprintf(path, sizeof path, "%.4000s/%s", dir, names[i]);
		unlink(path);
	}
	for (int i = 0; i < 16; i++) { /* the multi-rank runs' binaries */
		snprintf(path, sizeof path, "%.4000s/cal.m%d", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

/* Where one calibration run's files go. */
typedef struct Paths {
	char src[4200], exe[4200], prof[4200], log[4200], txt[4200];
} Paths;

/* Runs args (the binary and its options, NULL-terminated, at most 12) to
 * pa->txt: directly, or with the mpi backend and np > 1 under `mpirun
 * --oversubscribe -np NP ... --backend mpi` (as root too: Open MPI asks
 * for its two variables then).  Returns the exit status. */
static int launch(const Opts *o, const Paths *pa, int np, char **args)
{
	char *argv[28], n[16];
	int k = 0;
	bool mpi = !strcmp(o->backend, "mpi") && np > 1;
	if (mpi) {
		setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
		setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
		snprintf(n, sizeof n, "%d", np);
		argv[k++] = "mpirun";
		argv[k++] = "--oversubscribe";
		argv[k++] = "-np";
		argv[k++] = n;
	}
	for (int i = 0; args[i] && k < 20; i++)
		argv[k++] = args[i];
	if (mpi) {
		argv[k++] = "--backend";
		argv[k++] = "mpi";
	}
	if (o->cuda) {
		argv[k++] = "--device";
		argv[k++] = "cuda";
	}
	argv[k] = NULL;
	return sweep_run_to_file(argv, pa->txt);
}

/* Runs the built binary: a 2-step run sizes the profiled one to about
 * `share` seconds (3 to 50 steps; their count into *nsteps).  Its rank 0
 * actions into f (when non-NULL); the median step seconds into *step and
 * the sum of the profiled actions' into *sum.  False after printing. */
static bool run_model(const Opts *o, const Paths *pa, int np, const char *threads, double share,
                      Fit *f, double *step, double *sum, int *nsteps)
{
	double tb = now();
	char *argv1[] = {(char *)pa->exe, "--steps", "2", "--log", (char *)pa->log, "-q",
	                 threads ? "--threads" : NULL, (char *)threads, NULL};
	if (launch(o, pa, np, argv1) != 0) {
		fprintf(stderr, "dtmc: error: calibrate: the calibration run failed; its output is "
		                "in %s\n", pa->txt);
		return false;
	}
	double per = (now() - tb) / 2;
	if (o->cuda) {
		/* the first run of a binary compiles its kernels (NVRTC):
		 * the log's step, not the wall time, sizes the next */
		int n2;
		double ls = sweep_log_step_s(pa->log, &n2);
		per = isfinite(ls) && ls > 0 ? ls : per;
	}
	char steps[16];
	int ns = (int)fmin(50, fmax(3, share / fmax(per, 1e-4)));
	*nsteps = ns;
	snprintf(steps, sizeof steps, "%d", ns);
	char *argv[] = {(char *)pa->exe, "--steps", steps, "--log", (char *)pa->log, "-q",
	                "--profile-actions", (char *)pa->prof, threads ? "--threads" : NULL,
	                (char *)threads, NULL};
	note(o, "  %d steps, twice", ns);
	/* twice, each action's faster mean and the faster step kept: a
	 * VM's slow spell of a second slowed every action of one run (the
	 * runs have the same actions, in the same order) */
	Fit run[2] = {{0}, {0}};
	double sums[2], steps2[2];
	int n;
	bool ok = true;
	for (int k = 0; k < 2 && ok; k++)
		ok = launch(o, pa, np, argv) == 0 && read_profile(pa->prof, &run[k], &sums[k]) &&
		     isfinite(steps2[k] = sweep_log_step_s(pa->log, &n)) &&
		     run[k].nacts == run[0].nacts;
	if (ok) {
		/* the step and its actions' sum from the same run (their
		 * difference is the per-step overhead) */
		int b = steps2[1] < steps2[0];
		*step = steps2[b];
		*sum = sums[b];
		for (int i = 0; i < run[0].nacts; i++)
			run[0].acts[i].s = fmin(run[0].acts[i].s, run[1].acts[i].s);
		for (int i = 0; f && i < run[0].nacts && ok; i++)
			ok = push(f, run[0].acts[i]);
	}
	free(run[0].acts);
	free(run[1].acts);
	if (!ok)
		fprintf(stderr, "dtmc: error: calibrate: the calibration run failed; its output is "
		                "in %s\n", pa->txt);
	return ok;
}

/* Runs args (launch) and reads the profile lines it wrote to pa->prof
 * into hw. */
static bool run_lines(const Opts *o, const Paths *pa, int np, char **args, HwProfile *hw)
{
	char *text = NULL, err[1024];
	size_t len = 0;
	bool ok = launch(o, pa, np, args) == 0 &&
	          rt_read_file(pa->prof, &text, &len, 1 << 20, err, sizeof err) == 0 &&
	          hw_parse_overrides(hw, text, len, pa->prof, stderr) == 0;
	free(text);
	return ok;
}

/* The built binary's --calibrate-gemm (every rank at once, on `threads`
 * threads or the default share) into hw's GEMM points. */
static bool gemm_grid(const Opts *o, const Paths *pa, int np, const char *threads,
                      HwProfile *hw)
{
	char *argv[] = {(char *)pa->exe, "--calibrate-gemm", (char *)pa->prof, "-q",
	                threads ? "--threads" : NULL, (char *)threads, NULL};
	note(o, "  the GEMM grid");
	bool ok = run_lines(o, pa, np, argv, hw);
	if (!ok)
		fprintf(stderr, "dtmc: error: calibrate: the GEMM grid failed; its output is in %s\n",
		        pa->txt);
	return ok;
}

/* The built binary's --calibrate-comm over its np ranks into hw's
 * collective points. */
static bool comm_grid(const Opts *o, const Paths *pa, int np, HwProfile *hw)
{
	note(o, "  the %s backend over %d ranks", o->backend, np);
	char *args[] = {(char *)pa->exe, "--calibrate-comm", (char *)pa->prof, "-q", NULL};
	bool ok = run_lines(o, pa, np, args, hw);
	if (!ok)
		fprintf(stderr, "dtmc: error: calibrate: the %s backend's calibration failed%s; its "
		                "output is in %s\n",
		        o->backend, strcmp(o->backend, "mpi") ? "" : " (is Open MPI's mpirun on PATH?)",
		        pa->txt);
	return ok;
}

/* Writes hw to outp (atomically) as an override file on `base`, and to
 * standard output with --print; the exit status. */
static int write_hw(const Opts *o, const char *outp, const HwProfile *hw, const char *base,
                    const char *how)
{
	char *text = NULL, err[1024];
	size_t len = 0;
	FILE *mf = open_memstream(&text, &len);
	if (!mf) {
		fprintf(stderr, "dtmc: error: out of memory\n");
		return 1;
	}
	fprintf(mf, "# dtm hardware profile, written by `%s` (tools/hw.h has the keys)\nbase = %s\n",
	        how, base);
	hw_print(mf, hw);
	fclose(mf);
	if (rt_write_file_atomic(outp, text, len, err, sizeof err)) {
		fprintf(stderr, "dtmc: error: calibrate: %s\n", err);
		free(text);
		return 1;
	}
	if (o->print)
		fwrite(text, 1, len, stdout);
	free(text);
	return 0;
}

/* ---- --device cuda ---- */

/* Sizes of the calibration GPT on a GPU, in the order measured while the
 * budget lasts: large enough that its kernels are not all launch time,
 * head size 64 throughout (GPT-2's; the CUDA attention's tiles). */
static const CalSize gpu_sizes[] = {
        {"8192", "1024", "768", "12", "2", "8"},
        {"4096", "256", "256", "4", "2", "8"},
        {"32768", "2048", "2048", "32", "1", "4"},
};
#define NGPU_SIZES ((int)(sizeof gpu_sizes / sizeof gpu_sizes[0]))

const char *calibrate_gpu_base(const char *name)
{
	/* B before the others, GH200 with the H200s (HBM3e) */
	static const char *const map[][2] = {{"B200", "b200"}, {"B100", "b200"},
	                                     {"H200", "h200"}, {"H100", "h100"},
	                                     {"H800", "h100"}, {"A100", "a100"},
	                                     {"A800", "a100"}};
	for (size_t i = 0; name && i < sizeof map / sizeof *map; i++)
		if (strstr(name, map[i][0]))
			return map[i][1];
	return NULL;
}

/* A failed --device cuda run whose output says why the GPU cannot be used
 * (no driver, no device, no CUDA in the binary): that line, on stderr as
 * calibrate's error; false when it says nothing of the kind. */
static bool device_unusable(const Paths *pa)
{
	FILE *in = fopen(pa->txt, "r");
	if (!in)
		return false;
	char line[1024];
	bool found = false;
	while (!found && fgets(line, sizeof line, in)) {
		const char *m = strstr(line, "error: --device cuda: ");
		if (m) {
			line[strcspn(line, "\n")] = 0;
			fprintf(stderr, "dtmc: error: calibrate --device cuda: %s\n",
			        m + strlen("error: --device cuda: "));
			found = true;
		}
	}
	fclose(in);
	return found;
}

/* "DATE UTC" of now and this host's name. */
static void host_date(char *host, size_t nh, char *date, size_t nd)
{
	snprintf(host, nh, "?");
	snprintf(date, nd, "?");
	gethostname(host, nh - 1);
	host[nh - 1] = 0;
	time_t tt = time(NULL);
	struct tm tmv;
	if (gmtime_r(&tt, &tmv))
		strftime(date, nd, "%Y-%m-%d %H:%M UTC", &tmv);
}

/* The GPU's profile from what calibrate --device cuda measured: grid (the
 * binary's --calibrate-gemm output: the GPU's name, its memory, cuBLAS's
 * points), the f32 runs' actions (fit, with the steps' overhead) and the
 * bf16 run's (fit16).  *base gets the built-in it starts from. */
static bool gpu_profile(HwProfile *hw, const char *grid, size_t len, const Fit *fit,
                        const Fit *fit16, char *gpu, size_t ngpu, const char **base, FILE *err)
{
	snprintf(gpu, ngpu, "?");
	const char *dl = NULL;
	for (size_t i = 0; i + 10 <= len && !dl; i++)
		if ((i == 0 || grid[i - 1] == '\n') && !memcmp(grid + i, "# device: ", 10))
			dl = grid + i + 10;
	if (dl) {
		const char *nl = memchr(dl, '\n', (size_t)(grid + len - dl));
		snprintf(gpu, ngpu, "%.*s", (int)((nl ? nl : grid + len) - dl), dl);
	}
	*base = calibrate_gpu_base(gpu);
	*hw = *hw_builtin(*base ? *base : "h100");
	if (hw_parse_overrides(hw, grid, len, "the GEMM grid", err) != 0)
		return false;
	stream_points(fit, 1, hw);
	hw->attn_rate[1] = attn_rate(fit, false, false);
	hw->attn_bwd_rate[1] = attn_rate(fit, true, false);
	hw->attn_bf16_rate[1] = attn_rate(fit16, false, true);
	hw->attn_bf16_bwd_rate[1] = attn_rate(fit16, true, true);
	gemm_points(fit, 1, hw);
	gemm_points(fit16, 1, hw);
	if (fit->nover)
		hw->step_s = fit->over_sum / fit->nover;
	/* the curves carry each kernel's launch: no fixed time on top; a
	 * device per rank; the peaks stay the datasheet's (MFU's
	 * denominator), the efficiencies become what was reached */
	hw->kernel_s = 0;
	hw->cores = 0;
	kernel_factors(fit, 1, false, hw);
	kernel_factors(fit16, 1, true, hw);
	double best16 = 0;
	for (int j = 0; j < hw->ngemm; j++)
		if (hw->gemm[j].bf16)
			best16 = fmax(best16, hw->gemm[j].rate);
	if (best16 > 0 && hw->peak_flops[DTM_BF16] > 0)
		hw->gemm_eff = fmin(1, best16 / hw->peak_flops[DTM_BF16]);
	double sbw = hw->nstream ? hw_stream_bw(hw, 1, 1 << 28) : 0;
	if (sbw > 0 && hw->mem_bw > 0)
		hw->mem_eff = fmin(1, sbw / hw->mem_bw);
	char host[256], date[32];
	host_date(host, sizeof host, date, sizeof date);
	snprintf(hw->name, sizeof hw->name, "calibrated");
	snprintf(hw->source, sizeof hw->source,
	         "dtmc calibrate --device cuda on %.32s, %.24s, %.40s; links %.8s's", host, date,
	         gpu, *base ? *base : "h100");
	return true;
}

bool calibrate_gpu_profile(HwProfile *hw, const char *grid, size_t len, const char *const *prof,
                           const double *step, int nprof, const char *prof16, char *gpu,
                           size_t ngpu, FILE *err)
{
	Fit fit = {0}, fit16 = {0};
	bool ok = true;
	for (int i = 0; i < nprof && ok; i++) {
		double sum;
		ok = read_profile(prof[i], &fit, &sum);
		fit.over_sum += fmax(0, step[i] - sum);
		fit.nover++;
	}
	double sum;
	ok = ok && (!prof16 || read_profile(prof16, &fit16, &sum));
	const char *base;
	if (!ok && err)
		fprintf(err, "dtmc: error: calibrate: cannot read a --profile-actions file\n");
	ok = ok && gpu_profile(hw, grid, len, &fit, &fit16, gpu, ngpu, &base, err);
	free(fit.acts);
	free(fit16.acts);
	return ok;
}

/* `calibrate --device cuda` into the profile at outp; the exit status. */
static int calibrate_cuda(const Opts *o, const Paths *pa, const char *dir, const char *outp)
{
	double t_start = o->t0;
	/* the first size's binary runs the GEMM grid, which also says
	 * which GPU this is (a `# device:` line) */
	Arena a;
	arena_init(&a);
	const DtmPlan *plan;
	note(o, "the calibration GPT (d=%s, ctx=%s, batch=%s) for the GPU", gpu_sizes[0].d,
	     gpu_sizes[0].ctx, gpu_sizes[0].batch);
	bool ok = build_model(&a, pa->src, &gpu_sizes[0], "dp=1,tp=1", NULL, true, pa->exe, &plan);
	arena_free(&a);
	char *argv[] = {(char *)pa->exe, "--calibrate-gemm", (char *)pa->prof, "-q", NULL};
	note(o, "  cuBLAS over the GEMM grid");
	if (ok && launch(o, pa, 1, argv) != 0) {
		if (device_unusable(pa)) {
			remove_files(dir);
			return 1;
		}
		fprintf(stderr, "dtmc: error: calibrate: the GEMM grid failed; its output is in %s\n",
		        pa->txt);
		return 1;
	}
	if (!ok)
		return 1;
	char *grid = NULL, err[1024];
	size_t glen = 0;
	if (rt_read_file(pa->prof, &grid, &glen, 1 << 20, err, sizeof err) != 0) {
		fprintf(stderr, "dtmc: error: calibrate: %s\n", err);
		return 1;
	}
	/* the GPT on the GPU, f32 at each size the budget allows, then the
	 * first size in bf16 */
	Fit fit = {0}, fit16 = {0};
	double per_size = 0;
	for (int zi = 0; zi < NGPU_SIZES + 1 && ok; zi++) {
		bool bf16 = zi == NGPU_SIZES;
		const CalSize *z = &gpu_sizes[bf16 ? 0 : zi];
		if (zi > 0 && !bf16 && now() - t_start + 2 * per_size > o->budget * 0.7)
			continue; /* the bf16 run still comes */
		double tz = now();
		note(o, "the calibration GPT (d=%s, ctx=%s, batch=%s) on the GPU%s", z->d, z->ctx,
		     z->batch, bf16 ? " in bf16" : "");
		arena_init(&a);
		double step, sum;
		int ns;
		/* the first is the grid's binary */
		ok = (zi == 0 || build_model(&a, pa->src, z, "dp=1,tp=1",
		                             bf16 ? "precision=bf16" : NULL, true, pa->exe, &plan)) &&
		     run_model(o, pa, 1, NULL, o->budget * 0.1, bf16 ? &fit16 : &fit, &step, &sum,
		               &ns);
		arena_free(&a);
		if (ok && !bf16) {
			fit.over_sum += fmax(0, step - sum);
			fit.nover++;
		}
		per_size = now() - tz;
	}
	HwProfile hw;
	char gpu[256];
	const char *base = NULL;
	ok = ok && gpu_profile(&hw, grid, glen, &fit, &fit16, gpu, sizeof gpu, &base, stderr);
	free(grid);
	free(fit.acts);
	free(fit16.acts);
	if (!ok) /* the folder kept: the message names its run.txt */
		return 1;
	remove_files(dir);
	if (!base)
		note(o, "%s: no built-in profile of that GPU; h100's peaks and links assumed", gpu);
	if (write_hw(o, outp, &hw, base ? base : "h100", "dtmc calibrate --device cuda"))
		return 1;
	note(o, "wrote %s (%s, %d GEMM shapes, bf16 GEMMs at %.0f%% of peak at best) in %.1f s",
	     outp, gpu, hw.ngemm, 100 * hw.gemm_eff, now() - t_start);
	return 0;
}

/* A multi-rank calibration run kept for the collective overhead: its plan
 * and measured step. */
typedef struct MultiRun {
	Arena a;
	const DtmPlan *plan;
	double step;
	int steps;       /* of its profiled runs */
	char exe[4300];  /* its binary, kept for the last look (again_multi) */
} MultiRun;

/* The multi-rank runs once more, at the end: a run's step is what the
 * collectives' fit rests on, and a slow spell of a shared VM across both
 * of its back-to-back runs (a tp run at 71.5 ms where four calibrations
 * around it measured 59-64) moved every dp and tp prediction 10-25%; the
 * faster of that and a run tens of seconds later is kept. */
static void again_multi(const Opts *o, const Paths *pa, int np, MultiRun *multi, int nmulti)
{
	for (int i = 0; i < nmulti; i++) {
		char steps[16];
		snprintf(steps, sizeof steps, "%d", multi[i].steps);
		char *argv[] = {multi[i].exe, "--steps", steps, "--log", (char *)pa->log, "-q",
		                "--profile-actions", (char *)pa->prof, NULL};
		int n;
		double st = launch(o, pa, np, argv) == 0 ? sweep_log_step_s(pa->log, &n) : NAN;
		if (isfinite(st) && st > 0)
			multi[i].step = fmin(multi[i].step, st);
		else
			note(o, "the second look at a multi-rank run failed (%s); its first kept",
			     pa->txt);
	}
}

int calibrate_main(int argc, char **argv)
{
	Opts o;
	int prc = parse_opts(argc, argv, &o);
	if (prc)
		return prc == 2 ? 0 : 1;
	char outp[4096];
	if (o.out)
		snprintf(outp, sizeof outp, "%s", o.out);
	else if (!hw_default_path(outp, sizeof outp)) {
		fprintf(stderr, "dtmc: error: no place for the profile: set HOME or DTM_HW_PROFILE "
		                "(not 'none'), or name a file with --hw-out\n");
		return 1;
	}
	/* where it goes, checked before measuring anything: the folder of
	 * the default path may not exist yet */
	char parent[4096], err[1024];
	snprintf(parent, sizeof parent, "%s", outp);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = 0;
	else
		snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
	if (rt_mkdirs(parent, err, sizeof err) || access(parent, W_OK) != 0) {
		fprintf(stderr, "dtmc: error: calibrate: cannot write the profile to %s: %s\n",
		        outp, rt_mkdirs(parent, err, sizeof err) ? err : strerror(errno));
		return 1;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int cores = ncpu > 0 ? (int)(ncpu < HW_MAX_THREADS ? ncpu : HW_MAX_THREADS) : 1;
	double t_start = now();
	o.t0 = t_start;

	HwProfile hw = *hw_builtin("cpu");
	hw.cores = cores;
	/* ranks as threads of this host: any number of them */
	hw.devices_per_node = 1 << 20;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0)
		hw.mem_bytes = (double)pages * (double)psz;

	char dir[4096];
	if (!sweep_tmpdir("dtm-calibrate", "calibrate", dir, sizeof dir))
		return 1;
	Paths pa;
	snprintf(pa.src, sizeof pa.src, "%s/cal.dtm", dir);
	snprintf(pa.exe, sizeof pa.exe, "%s/cal", dir);
	snprintf(pa.prof, sizeof pa.prof, "%s/prof.tsv", dir);
	snprintf(pa.log, sizeof pa.log, "%s/log.jsonl", dir);
	snprintf(pa.txt, sizeof pa.txt, "%s/run.txt", dir);
	if (rt_write_file_atomic(pa.src, cal_model, strlen(cal_model), err, sizeof err)) {
		fprintf(stderr, "dtmc: error: calibrate: %s\n", err);
		remove_files(dir);
		return 1;
	}
	if (o.cuda)
		return calibrate_cuda(&o, &pa, dir, outp);
	/* Per size: one rank on every core (the curves of `cores` threads),
	 * then `cores` ranks of one thread each (the curves of one thread, as
	 * ranks see them: every core busy); the first size also on tp =
	 * cores with sequence parallelism.  The multi-rank runs' steps, less
	 * what the rest of the profile predicts for them, give the overhead
	 * of a collective inside a run (ranks arriving apart, the
	 * communication thread's wake-ups), which the back-to-back
	 * microbenchmark below does not see. */
	enum { MAXRUNS = 2 * NSIZES + 1 };
	_Static_assert(MAXRUNS <= 16, "remove_files removes the binaries cal.m0 .. cal.m15");
	int tl[2] = {cores, 1}, nt = cores > 1 ? 2 : 1;
	Fit fit[2] = {{0}};
	MultiRun multi[MAXRUNS];
	int nmulti = 0;
	char dpmesh[64], tpmesh[64], ncores[16];
	snprintf(dpmesh, sizeof dpmesh, "dp=%d,tp=1", cores);
	snprintf(tpmesh, sizeof tpmesh, "dp=1,tp=%d", cores);
	snprintf(ncores, sizeof ncores, "%d", cores);
	bool ok = true;
	double per_size = 0; /* the last size's builds and runs */
	for (int zi = 0; zi < NSIZES && ok; zi++) {
		const CalSize *z = &sizes[zi];
		/* the first size always; another while it fits in about 70% of
		 * the budget (a build is a C compile: seconds) */
		if (zi > 0 && now() - t_start + per_size > o.budget * 0.7)
			break;
		double tz = now();
		int nruns = nt + (zi == 0 && cores > 1);
		for (int r = 0; r < nruns && ok; r++) {
			bool tp = r == 2;
			const char *mesh = r == 0 ? "dp=1,tp=1" : tp ? tpmesh : dpmesh;
			note(&o, "the calibration GPT (d=%s, ctx=%s, batch=%s) on %s%s", z->d, z->ctx,
			     z->batch, mesh, tp ? ", sequence parallel" : "");
			MultiRun *mr = &multi[nmulti];
			arena_init(&mr->a);
			double sum;
			int ns;
			ok = build_model(&mr->a, pa.src, z, mesh, tp ? "sequence_parallel=true" : NULL,
			                 false, pa.exe, &mr->plan) &&
			     run_model(&o, &pa, r == 0 ? 1 : cores, r == 0 ? ncores : NULL, o.budget * 0.1,
			               tp ? NULL : &fit[r], &mr->step, &sum, &ns);
			if (ok && r == 0) {
				fit[0].over_sum += fmax(0, mr->step - sum);
				fit[0].nover++;
			}
			/* the GEMM grid, once per thread count: the binary times the
			 * runtime's own GEMM over shapes the model does not have */
			if (ok && zi == 0 && !tp)
				ok = gemm_grid(&o, &pa, r == 0 ? 1 : cores, r == 0 ? ncores : NULL, &hw);
			/* and the backend over `cores` ranks, on this binary */
			if (ok && zi == 0 && r == 1)
				ok = comm_grid(&o, &pa, cores, &hw);
			if (ok && r > 0) { /* kept: its plan, step and binary */
				mr->steps = ns;
				snprintf(mr->exe, sizeof mr->exe, "%.4200s.m%d", pa.exe, nmulti);
				ok = rename(pa.exe, mr->exe) == 0;
				if (!ok)
					fprintf(stderr, "dtmc: error: calibrate: cannot rename %s: %s\n",
					        pa.exe, strerror(errno));
				nmulti++;
			} else {
				arena_free(&mr->a);
			}
		}
		per_size = now() - tz;
	}
	/* bf16 (`precision bf16`): the first size again, on one rank over
	 * every core and on a rank per core, for the bf16 GEMMs of the model
	 * and attention's bf16 rates (the grid timed bf16 GEMMs already where
	 * oneDNN runs them) */
	Fit fit16[2] = {{0}};
	for (int r = 0; r < nt && ok; r++) {
		const char *mesh = r == 0 ? "dp=1,tp=1" : dpmesh;
		note(&o, "the calibration GPT (d=%s, ctx=%s, batch=%s) in bf16 on %s", sizes[0].d,
		     sizes[0].ctx, sizes[0].batch, mesh);
		Arena ba;
		arena_init(&ba);
		const DtmPlan *bp;
		double step, sum;
		int ns;
		ok = build_model(&ba, pa.src, &sizes[0], mesh, "precision=bf16", false, pa.exe, &bp) &&
		     run_model(&o, &pa, r == 0 ? 1 : cores, r == 0 ? ncores : NULL, o.budget * 0.1,
		               &fit16[r], &step, &sum, &ns);
		arena_free(&ba);
	}
	/* every thread count's GEMM factors against the grid alone, then
	 * the steps' shapes added to it */
	for (int ti = 0; ti < nt && ok; ti++) {
		gemm_factor(&fit[ti], tl[ti], false, &hw);
		gemm_factor(&fit16[ti], tl[ti], true, &hw);
	}
	for (int ti = 0; ti < nt && ok; ti++) {
		int t = tl[ti];
		stream_points(&fit[ti], t, &hw);
		kernel_factors(&fit[ti], t, false, &hw);
		kernel_factors(&fit16[ti], t, true, &hw);
		hw.attn_rate[t] = attn_rate(&fit[ti], false, false);
		hw.attn_bwd_rate[t] = attn_rate(&fit[ti], true, false);
		hw.attn_bf16_rate[t] = attn_rate(&fit16[ti], false, true);
		hw.attn_bf16_bwd_rate[t] = attn_rate(&fit16[ti], true, true);
		gemm_points(&fit[ti], t, &hw);
		gemm_points(&fit16[ti], t, &hw);
	}
	if (fit[0].nover)
		hw.step_s = fit[0].over_sum / fit[0].nover;
	for (int ti = 0; ti < nt; ti++) {
		free(fit[ti].acts);
		free(fit16[ti].acts);
	}
	if (!ok) { /* the folder kept: the message names its run.txt */
		for (int i = 0; i < nmulti; i++)
			arena_free(&multi[i].a);
		return 1;
	}
	/* the peaks the MFU and roofline figures use: what was reached */
	double best = 0, best16 = 0;
	for (int j = 0; j < hw.ngemm; j++)
		if (hw.gemm[j].threads == cores && !hw.gemm[j].bf16)
			best = fmax(best, hw.gemm[j].rate);
		else if (hw.gemm[j].threads == cores)
			best16 = fmax(best16, hw.gemm[j].rate);
	if (best > 0)
		for (int dt = 0; dt < 4; dt++)
			hw.peak_flops[dt] = dt == DTM_BF16 && best16 > best ? best16 : best;
	hw.mem_bw = hw_stream_bw(&hw, cores, 1 << 24);

	/* the communication backend: the binary's --calibrate-comm over 2, 4
	 * (and the core count's) ranks of the smallest calibration GPT */
	int groups[3] = {2, 4, cores}, ng = cores > 4 ? 3 : 2;
	for (int g = 0; g < ng && ok; g++) {
		if (groups[g] > HW_MAX_THREADS || (g < 2 && groups[g] == cores) ||
		    (g == 2 && groups[g] <= 4) || (g > 0 && groups[g] == groups[g - 1]))
			continue; /* measured above, or listed twice */
		char mesh[64];
		snprintf(mesh, sizeof mesh, "dp=%d,tp=1", groups[g]);
		Arena ca;
		arena_init(&ca);
		const DtmPlan *cp;
		ok = build_model(&ca, pa.src, &sizes[2], mesh, NULL, false, pa.exe, &cp);
		arena_free(&ca);
		ok = ok && comm_grid(&o, &pa, groups[g], &hw);
	}
	if (!ok) { /* the folder kept: the message names its run.txt */
		for (int i = 0; i < nmulti; i++)
			arena_free(&multi[i].a);
		return 1;
	}
	note(&o, "the multi-rank runs again");
	again_multi(&o, &pa, cores, multi, nmulti);
	remove_files(dir);

	/* the collectives inside a run: the multi-rank runs' excess over the
	 * prediction, as excess = n * coll_overhead + bytes * coll_byte_time
	 * (n communication actions of `bytes` in all), least squares over the
	 * runs the rest of the profile under-predicts */
	/* first how much a collective holds up compute (comm_blocking): the
	 * share of 0, 1/4 .. 1 that predicts the runs best (log ratios) */
	double best_b = 0, best_err = INFINITY;
	for (int q = 0; q <= 4; q++) {
		hw.comm_blocking = q / 4.0;
		double e2 = 0;
		for (int i = 0; i < nmulti; i++) {
			CostReport rep;
			if (cost_plan_step(multi[i].plan, &hw, 1, &rep) == 0 && rep.step_s > 0) {
				double lr = log(multi[i].step / rep.step_s);
				e2 += lr * lr;
			}
			cost_report_free(&rep);
		}
		if (e2 < best_err)
			best_err = e2, best_b = hw.comm_blocking;
	}
	hw.comm_blocking = best_b;
	note(&o, "a collective holds up compute for %.0f%% of its time", best_b * 100);
	/* then the collectives' bytes at what a run reaches: the excess the
	 * rest under-predicts, per byte of collectives, least squares through
	 * the origin over the runs (both kinds measured here gave 2-3 ns per
	 * byte where a count term fitted 0.5-2 ms per collective, which small
	 * collectives never cost) */
	double sbb = 0, sbe = 0;
	for (int i = 0; i < nmulti; i++) {
		CostReport rep;
		if (cost_plan_step(multi[i].plan, &hw, 1, &rep) == 0) {
			const DtmPlan *p = multi[i].plan;
			const DtmStage *st = &p->stages[0];
			double nc = 0, by = 0;
			for (int k = 0; k < st->nactions; k++) {
				const DtmAction *ac = &st->actions[k];
				if (ac->kind != DTM_ACT_COLL)
					continue;
				nc++;
				by += (double)ac->bytes;
			}
			double ex = multi[i].step - rep.step_s;
			note(&o, "%s run: measured %.2f ms, predicted %.2f ms before the collectives' "
			         "in-run cost, %.0f collectives of %.0f bytes",
			     p->mesh_sizes[1] > 1 ? "tp" : "dp", multi[i].step * 1e3,
			     rep.step_s * 1e3, nc, by);
			sbb += by * by;
			sbe += by * ex;
		}
		cost_report_free(&rep);
		arena_free(&multi[i].a);
	}
	hw.coll_s = 0;
	hw.coll_byte_s = sbb > 0 && sbe > 0 ? sbe / sbb : 0;
	const HwCollPoint *ar = hw_coll(&hw, COST_ALL_REDUCE, 2);
	if (ar) {
		hw.intra.bw = ar->bw;
		hw.intra.latency = ar->latency;
	}

	char host[256], date[32];
	host_date(host, sizeof host, date, sizeof date);
	snprintf(hw.name, sizeof hw.name, "calibrated");
	snprintf(hw.source, sizeof hw.source,
	         "dtmc calibrate on %.60s, %s, %d cores, %s backend, %.0f s budget", host, date,
	         cores, o.backend, o.budget);

	if (write_hw(&o, outp, &hw, "cpu", "dtmc calibrate"))
		return 1;
	note(&o, "wrote %s (%d GEMM shapes, %d collectives) in %.1f s", outp, hw.ngemm, hw.ncoll,
	     now() - t_start);
	return 0;
}
