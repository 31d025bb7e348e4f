/* cost.c - the cost model (see cost.h): formulas, then a Plan's step.
 *
 * The formulas are REFERENCE.md's, written once here so that `inspect`,
 * `sweep` and the conformance tests agree.  cost_plan_step() reads only
 * runtime/plan.h: it replays each stage's actions on a two-stream timeline
 * (compute, communication) with per-buffer ready times, which is how the
 * CUDA runtime overlaps a stream-1 collective with the kernels that do not
 * need its result.
 */
#include "tools/cost.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cost_comm_name(CostComm kind)
{
	switch (kind) {
	case COST_ALL_REDUCE:
		return "all_reduce";
	case COST_ALL_GATHER:
		return "all_gather";
	case COST_REDUCE_SCATTER:
		return "reduce_scatter";
	case COST_ALL_TO_ALL:
		return "all_to_all";
	case COST_BROADCAST:
		return "broadcast";
	case COST_SEND:
		return "send";
	case COST_RECV:
		return "recv";
	default:
		return "?";
	}
}

/* ---- collectives ---- */

double cost_ring_bytes(CostComm kind, int64_t n, double S)
{
	if (n <= 1)
		return 0;
	double f = (double)(n - 1) / (double)n;
	switch (kind) {
	case COST_ALL_REDUCE:
		return 2 * f * S;
	case COST_ALL_GATHER:
	case COST_REDUCE_SCATTER:
	case COST_ALL_TO_ALL:
		return f * S;
	case COST_BROADCAST:
	case COST_SEND:
		return S;
	default:
		return 0;
	}
}

int64_t cost_ring_steps(CostComm kind, int64_t n)
{
	if (n <= 1)
		return 0;
	switch (kind) {
	case COST_ALL_REDUCE:
		return 2 * (n - 1);
	case COST_SEND:
	case COST_RECV:
		return 1;
	default:
		return n - 1;
	}
}

double cost_bus_factor(CostComm kind, int64_t n)
{
	if (n <= 1)
		return kind == COST_SEND || kind == COST_RECV || kind == COST_BROADCAST ? 1 : 0;
	double f = (double)(n - 1) / (double)n;
	switch (kind) {
	case COST_ALL_REDUCE:
		return 2 * f;
	case COST_ALL_GATHER:
	case COST_REDUCE_SCATTER:
	case COST_ALL_TO_ALL:
		return f;
	default:
		return 1;
	}
}

double cost_bus_bw(CostComm kind, int64_t n, double S, double seconds)
{
	return seconds > 0 ? S / seconds * cost_bus_factor(kind, n) : 0;
}

double cost_alpha_beta(HwLink link, int64_t steps, double bytes)
{
	double t = link.latency * (double)steps;
	if (bytes > 0 && link.bw > 0)
		t += bytes / link.bw;
	return t;
}

double cost_comm_time(CostComm kind, int64_t n, double S, HwLink link)
{
	if (kind == COST_SEND || kind == COST_RECV)
		return cost_alpha_beta(link, 1, S);
	if (n <= 1)
		return 0;
	/* a broadcast pipelines S through the chain: S / bw plus a step's
	 * latency per hop */
	double bytes = kind == COST_BROADCAST ? S : cost_ring_bytes(kind, n, S);
	/* all_to_all moves the ring's bytes, (n-1)/n S, but at its own
	 * bandwidth: nccl-tests' alltoall busbw is what the a2a figures are */
	if (kind == COST_ALL_TO_ALL && link.a2a_bw > 0)
		link.bw = link.a2a_bw;
	return cost_alpha_beta(link, cost_ring_steps(kind, n), bytes);
}

double cost_allreduce_ring_time(int64_t p, double n, double alpha, double beta)
{
	if (p <= 1)
		return 0;
	return 2.0 * (double)(p - 1) * (alpha + n / ((double)p * beta));
}

double cost_allreduce_tree_time(int64_t p, double n, double alpha, double beta)
{
	if (p <= 1)
		return 0;
	return 2.0 * log2((double)p) * (alpha + n / beta);
}

int64_t cost_group_size(int naxes, const int64_t *sizes, uint32_t axes)
{
	int64_t n = 1;
	for (int a = 0; a < naxes && a < DTM_MAX_AXES; a++)
		if (axes & (1u << a))
			n *= sizes[a];
	return n;
}

/* Beyond this many groups, cost_link_class decides by the block rule
 * instead of checking every group. */
#define COST_MAX_GROUPS_SCANNED (1 << 20)

CostLinkClass cost_link_class(int naxes, const int64_t *sizes, uint32_t axes, int64_t node_size)
{
	if (naxes > DTM_MAX_AXES)
		naxes = DTM_MAX_AXES;
	int64_t n = cost_group_size(naxes, sizes, axes);
	if (n <= 1)
		return COST_LINK_NONE;
	if (node_size < 1)
		node_size = 1;
	int64_t world = cost_group_size(naxes, sizes, 0xffffffffu);
	if (world <= node_size)
		return COST_LINK_INTRA;
	/* strides (row-major: the last axis is the fastest) and the distance
	 * from a group's first rank to its last */
	int64_t stride[DTM_MAX_AXES], s = 1, ext = 0;
	int major = -1;
	for (int a = naxes - 1; a >= 0; a--) {
		stride[a] = s;
		if (axes & (1u << a)) {
			ext += (sizes[a] - 1) * s;
			major = a;
		}
		s *= sizes[a];
	}
	if (ext >= node_size)
		return COST_LINK_INTER;
	int64_t ngroups = world / n;
	if (ngroups > COST_MAX_GROUPS_SCANNED) {
		/* groups tile blocks of sizes[major] * stride[major] ranks;
		 * every block is inside a node when the block size divides it */
		int64_t block = sizes[major] * stride[major];
		return node_size % block == 0 ? COST_LINK_INTRA : COST_LINK_INTER;
	}
	/* every group's first rank (zero coordinates on `axes`), by a
	 * mixed-radix counter over the other axes; a group is inside a node
	 * when its first and last ranks are */
	int64_t coord[DTM_MAX_AXES] = {0};
	for (int64_t g = 0; g < ngroups; g++) {
		int64_t first = 0;
		for (int a = 0; a < naxes; a++)
			first += coord[a] * stride[a];
		if (first / node_size != (first + ext) / node_size)
			return COST_LINK_INTER;
		for (int a = naxes - 1; a >= 0; a--) {
			if (axes & (1u << a))
				continue;
			if (++coord[a] < sizes[a])
				break;
			coord[a] = 0;
		}
	}
	return COST_LINK_INTRA;
}

/* ---- kernels ---- */

double cost_roofline(double flops, double bytes, double peak_flops, double mem_bw)
{
	double tc = peak_flops > 0 ? flops / peak_flops : 0;
	double tm = mem_bw > 0 ? bytes / mem_bw : 0;
	return tc > tm ? tc : tm;
}

/* ---- memory per parameter ---- */

CostMemory cost_zero_memory(int stage, double P, int64_t n, CostStateBytes b)
{
	double inv = n > 1 ? 1.0 / (double)n : 1.0;
	CostMemory m;
	m.master = b.master * P * (stage >= 1 ? inv : 1);
	m.opt = b.opt * P * (stage >= 1 ? inv : 1);
	m.grads = b.grad * P * (stage >= 2 ? inv : 1);
	m.params = b.param * P * (stage >= 3 ? inv : 1);
	m.total = m.params + m.grads + m.master + m.opt;
	return m;
}

double cost_zero_comm_bytes(int stage, double param_bytes, double grad_bytes, int64_t n,
                            bool reshard_after_forward)
{
	if (n <= 1)
		return 0;
	double f = (double)(n - 1) / (double)n;
	if (stage <= 0)
		return 2 * f * grad_bytes;
	if (stage < 3 || !reshard_after_forward)
		return f * (grad_bytes + param_bytes);
	return f * (grad_bytes + 2 * param_bytes);
}

static double dtype_bytes(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

CostDistOpt cost_megatron_distopt(DtmDtype param, DtmDtype grad)
{
	CostDistOpt d;
	double pb = dtype_bytes(param), gb = dtype_bytes(grad);
	d.replicated = pb + gb;
	/* Adam m and v in f32; an f32 master copy of 16-bit params; an f32
	 * main-grad buffer when the model's grads are 16-bit */
	d.sharded = 8 + (pb < 4 ? 4 : 0) + (gb < 4 ? 4 : 0);
	return d;
}

double cost_megatron_bytes_per_param(DtmDtype param, DtmDtype grad, int64_t d)
{
	CostDistOpt o = cost_megatron_distopt(param, grad);
	return o.replicated + o.sharded / (double)(d > 1 ? d : 1);
}

/* ---- pipelines ---- */

double cost_bubble_fraction(int64_t P, int64_t M, int64_t v)
{
	if (P <= 1 || M < 1)
		return 0;
	if (v < 1)
		v = 1;
	return (double)(P - 1) / (double)(v * M + P - 1);
}

double cost_schedule_bubble(DtmPipeSchedule schedule, int64_t P, int64_t M, int64_t v)
{
	if (schedule == DTM_PIPE_INTERLEAVED)
		return cost_bubble_fraction(P, M, v);
	/* ZB-H1 with F, B and W of equal length: 1F1B's bubble minus the
	 * W passes that fill it, (P - 1) slots of the 3M + P - 1 */
	if (schedule == DTM_PIPE_ZB)
		return P <= 1 || M < 1 ? 0 : (double)(P - 1) / (double)(3 * M + P - 1);
	return cost_bubble_fraction(P, M, 1);
}

static double dmax(double a, double b)
{
	return a > b ? a : b;
}

int64_t cost_schedule_slots(DtmPipeSchedule schedule, int64_t M, int64_t v)
{
	if (M < 1)
		M = 1;
	if (schedule == DTM_PIPE_INTERLEAVED)
		return (v > 1 ? v : 1) * M;
	if (schedule == DTM_PIPE_ZB)
		return 3 * M;
	return M;
}

double cost_pipeline_step(const double *work, int P, int64_t slots, double *bubble)
{
	double mx = 0, sum = 0;
	for (int s = 0; s < P; s++) {
		mx = dmax(mx, work[s]);
		sum += work[s];
	}
	double step = mx + (sum - mx) / (double)(slots > 0 ? slots : 1);
	if (bubble)
		*bubble = P > 1 && step > 0 ? 1 - sum / P / step : 0;
	return step;
}

double cost_pipeline_time(int64_t P, int64_t M, int64_t v)
{
	if (v < 1)
		v = 1;
	if (P < 1)
		P = 1;
	return (double)(v * M + P - 1) / (double)v;
}

double cost_bubble_ratio(int64_t P, int64_t M, int64_t v)
{
	if (P <= 1 || M < 1)
		return 0;
	if (v < 1)
		v = 1;
	return (double)(P - 1) / (double)(v * M);
}

int64_t cost_pipeline_hops(int64_t P, int64_t v)
{
	if (v < 1)
		v = 1;
	return P < 1 ? 0 : P * v - 1;
}

/* ---- throughput ---- */

double cost_flops_per_token(double N, int64_t L, int64_t C, int64_t T)
{
	return 6 * N + 6.0 * (double)L * (double)C * (double)T;
}

double cost_mfu(double flops_per_token, double tokens_per_s, int64_t ndevices, double peak)
{
	if (ndevices < 1 || peak <= 0)
		return 0;
	return flops_per_token * tokens_per_s / ((double)ndevices * peak);
}

double cost_ddp_hide_tokens(double bytes_per_param, double peak, double bw)
{
	return bw > 0 ? bytes_per_param * peak / (6 * bw) : 0;
}

/* ---- a Plan's step ---- */

__attribute__((format(printf, 2, 3))) static int bad_plan(CostReport *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out->err, sizeof out->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* Roofline inputs of a kernel or GEMM, given its arguments' bytes (argb)
 * and the dtype it runs at: the plan's counts where given, else the GEMM's
 * 2mnk per batch item and the bytes of every operand. */
static void work_of(const DtmAction *a, const double *argb, DtmDtype rate, double *flops,
                    double *bytes, DtmDtype *dtype)
{
	*flops = (double)a->flops;
	*bytes = (double)a->mem_bytes;
	if (a->kind == DTM_ACT_GEMM && *flops <= 0)
		*flops = 2.0 * (double)a->m * (double)a->n * (double)a->k *
		         (double)(a->batch > 0 ? a->batch : 1);
	if (*bytes <= 0) {
		for (int j = 0; j < a->nargs; j++)
			*bytes += argb[j];
		if (a->kind == DTM_ACT_GEMM && a->beta != 0 && a->nargs > 0)
			*bytes += argb[a->nargs - 1];
	}
	*dtype = rate;
}

/* The argument whose dtype sets the rate: a GEMM runs at its A operand's,
 * a kernel at its output's; -1 for none. */
static int rate_arg(const DtmAction *a)
{
	return a->nargs < 1 ? -1 : a->kind == DTM_ACT_GEMM ? a->args[0] : a->args[a->nargs - 1];
}

static void kernel_work(const DtmPlan *p, const DtmAction *a, double *flops, double *bytes,
                        DtmDtype *dtype)
{
	double argb[DTM_MAX_ARGS];
	for (int j = 0; j < a->nargs && j < DTM_MAX_ARGS; j++)
		argb[j] = (double)p->buffers[a->args[j]].bytes;
	int id = rate_arg(a);
	work_of(a, argb, id >= 0 ? p->buffers[id].dtype : p->train.precision, flops, bytes, dtype);
}

/* What kernel_work reads of a buffer.  cost_plan_step copies it out of
 * the buffer table in one pass: the table's entries are a few hundred
 * bytes, so reading them per argument misses the cache. */
typedef struct BufInfo {
	double bytes;
	DtmDtype dtype;
} BufInfo;

/* kernel_work from the copy: the same sums in the same order. */
static void kernel_work_info(const BufInfo *bi, DtmDtype precision, const DtmAction *a,
                             double *flops, double *bytes, DtmDtype *dtype)
{
	double argb[DTM_MAX_ARGS];
	for (int j = 0; j < a->nargs && j < DTM_MAX_ARGS; j++)
		argb[j] = bi[a->args[j]].bytes;
	int id = rate_arg(a);
	work_of(a, argb, id >= 0 ? bi[id].dtype : precision, flops, bytes, dtype);
}

/* The BufInfo copy of p's buffer table (malloc'd; NULL out of memory). */
static BufInfo *buf_info(const DtmPlan *p)
{
	BufInfo *bi = malloc(sizeof *bi * (size_t)(p->nbuffers > 0 ? p->nbuffers : 1));
	for (int b = 0; bi && b < p->nbuffers; b++)
		bi[b] = (BufInfo){(double)p->buffers[b].bytes, p->buffers[b].dtype};
	return bi;
}

static void tally(CostTally *t, double bytes, double seconds)
{
	t->count++;
	t->bytes += bytes;
	t->seconds += seconds;
}

static CostComm comm_kind(const DtmAction *a)
{
	return a->kind == DTM_ACT_SEND   ? COST_SEND
	       : a->kind == DTM_ACT_RECV ? COST_RECV
	                                 : (CostComm)a->coll;
}

/* What the machine gives one rank: threads per rank and how much the
 * node's ranks oversubscribe its cores (ranks as threads on a CPU; a
 * profile without `cores` has a device per rank). */
typedef struct CostEnv {
	const HwProfile *hw;
	int64_t node_size, local; /* ranks per node; of them, this plan's */
	int threads;
	double oversub; /* >= 1: compute runs this much slower */
	double kover;   /* hw_kernel_overhead at threads */
	double bw;      /* hw_stream_bw when it does not depend on size, else 0 */
	double gemmf[2]; /* the `gemm` factor of f32 and of 16-bit operands */
	double *kfac;   /* per kernel id, its factor once looked up (0: not yet);
	                 * NULL: look up every time */
	int nkfac;
	struct GemmMemo *grate; /* gemm_rate's memo (NULL: none) */
	double cold_bw;  /* hw_gemm_cold_bw at threads; 0: no cache model */
	double **cold;   /* per stage and action, cold_bytes' (NULL: none) */
} CostEnv;

static CostEnv cost_env(const DtmPlan *p, const HwProfile *hw, int64_t node_size)
{
	CostEnv e = {hw, node_size, 0, 1, 1, 0, 0, {1, 1}, NULL, 0, NULL, 0, NULL};
	int64_t world = 1;
	for (int a = 0; a < p->mesh_naxes; a++)
		world *= p->mesh_sizes[a] > 0 ? p->mesh_sizes[a] : 1;
	e.local = world < node_size ? world : node_size;
	if (hw->cores > 0) {
		/* runtime/main.c: threads = cores / ranks on the host, at least 1 */
		int64_t t = hw->cores / (e.local > 0 ? e.local : 1);
		e.threads = t < 1 ? 1 : t > HW_MAX_THREADS ? HW_MAX_THREADS : (int)t;
		double busy = (double)e.local * e.threads;
		e.oversub = busy > hw->cores ? busy / hw->cores : 1;
	}
	e.kover = hw_kernel_overhead(hw, e.threads);
	e.gemmf[0] = hw_kernel_factor(hw, "gemm", e.threads, DTM_F32);
	e.gemmf[1] = hw_kernel_factor(hw, "gemm", e.threads, DTM_BF16);
	e.bw = hw->nstream == 0 ? hw_stream_bw(hw, e.threads, 1) : 0;
	e.cold_bw = hw_gemm_cold_bw(hw, e.threads);
	return e;
}

/* ---- the GEMM rate memo ----
 *
 * hw_gemm_rate interpolates over every grid point of the thread count
 * (four logs each: a calibrated CPU's 400 points, ~1,600 logs a call),
 * and a plan's thousands of GEMMs have a few dozen shapes: cost_plan_step
 * and simulate keep each shape's rate (CostEnv.grate, open addressing;
 * full, or NULL as in cost_action_seconds: computed every time).  The
 * same function of the same arguments: it changes no price
 * (test_cost_cal's test_gemm_memo). */
typedef struct GemmMemo {
	int64_t m, n, k, batch;
	int dt, used;
	double rate;
} GemmMemo;
#define GEMM_MEMO 512

static double gemm_rate(const CostEnv *e, DtmDtype dt, const DtmAction *a)
{
	int64_t b = a->batch > 1 ? a->batch : 1;
	uint64_t h = (uint64_t)a->m * 0x9E3779B97F4A7C15u ^ (uint64_t)a->n * 0xC2B2AE3D27D4EB4Fu ^
	             (uint64_t)a->k * 0x165667B19E3779F9u ^ (uint64_t)b * 0x27D4EB2F165667C5u ^
	             (uint64_t)dt;
	GemmMemo *g = NULL; /* the shape's slot, or a free one */
	for (int probe = 0; e->grate && probe < GEMM_MEMO && !g; probe++) {
		GemmMemo *q = &e->grate[(h + (uint64_t)probe) & (GEMM_MEMO - 1)];
		if (!q->used || (q->m == a->m && q->n == a->n && q->k == a->k && q->batch == b &&
		                 q->dt == (int)dt))
			g = q;
	}
	if (g && g->used)
		return g->rate;
	double r = hw_gemm_rate(e->hw, dt, (double)a->m, (double)a->n, (double)a->k, (double)b,
	                        e->threads);
	if (g)
		*g = (GemmMemo){a->m, a->n, a->k, b, (int)dt, 1, r};
	return r;
}

/* ---- which operands a GEMM reads from beyond the cache ----
 *
 * The GEMM grid times each shape back to back, its operands in cache; in
 * a step the rest of the weights, gradients and activations pass through
 * between two uses of one.  A GEMM's operand (A, B, and C: a C written
 * outside the cache is fetched first) is cold when the distinct bytes the
 * rank's actions touched since its last use (its LRU stack distance,
 * itself excluded) reach the
 * rank's cache, or it alone fills it: the l2_size of each of its threads,
 * shared by the ranks that share its cores.  The step is taken as one of
 * many: a pass over the actions first, so a weight's first use sees the
 * previous step's last.  (A micro-batch of one or two rows on the MLP of
 * bench/fidelity.sh: forward GEMMs alternate two 1 MiB weights and stay
 * in a 2 MiB L2, the backward's cycle through a weight and two gradients
 * and ran 2-4x slower than the grid's time.)  compute_seconds adds the
 * cold bytes at gemm_cold_bw to the GEMM's time from the grid: a GEMM of
 * a few hundred tokens does not hide them behind its arithmetic (oneDNN's
 * bf16 256x1024x256 on one thread: 142 us with its operands in cache, 247
 * with A, B and C each another of 16 copies per call, +105 us for 1.6 MB;
 * a bf16 pipeline's weight gradients ran 2x the grid's time in the step).
 * Priced as the larger of the two instead, every layout of
 * bench/fidelity.sh's GPT came out 1.1-1.2x too fast per action, and the
 * MLP's 1-row micro-batches 1.5x.  The `gemm` factor is fitted to the
 * calibration GPT's GEMMs without this term, so at that model's own
 * shapes (1,024 tokens, where the fetch hides better) it is counted
 * twice: one device comes out at 0.92-0.94 per action, against 1.03-1.06
 * (bench/README.md, "Cold operands on top").
 * A C the GEMM adds to (beta != 0: a weight gradient accumulated over
 * micro-batches, passes/accumulate.c) is not counted: the GEMM streams it
 * once, read and written, and that costs about the same from beyond the
 * cache as from within (the calibration's beta = 1 C of 1 MiB at k = 1:
 * 52 us a call cycling 2 copies, 59-64 us cycling 3-10, where a B of
 * 1 MiB went 20 -> 34-41 us).  Counted, the MLP's 64- and 128-micro-batch
 * layouts came out at 0.67-0.75 per action, 0.89-1.10 without
 * (bench/README.md, "Weight gradients summed by their GEMMs"). */

/* Fenwick tree over touch numbers 1..n: bytes of the buffers last touched
 * there. */
static void fen_add(double *f, int n, int i, double x)
{
	for (; i <= n; i += i & -i)
		f[i] += x;
}

static double fen_sum(const double *f, int i)
{
	double x = 0;
	for (; i > 0; i -= i & -i)
		x += f[i];
	return x;
}

/* Whether a's argument j is a buffer id of p not listed before j. */
static bool first_arg(const DtmPlan *p, const DtmAction *a, int j)
{
	int b = a->args[j];
	bool ok = b >= 0 && b < p->nbuffers;
	for (int q = 0; q < j && ok; q++)
		ok = a->args[q] != b;
	return ok;
}

/* out[i]: the bytes of action i's operands that are cold (GEMMs; 0 for
 * the rest; an accumulated C never), for stage s and a cache of cap bytes;
 * bi the buffers' bytes (BufInfo: the buffer table's entries miss the
 * cache). */
static bool cold_bytes(const DtmPlan *p, int s, double cap, const BufInfo *bi, double *out)
{
	const DtmStage *st = &p->stages[s];
	int n = 0;
	for (int i = 0; i < st->nactions; i++)
		n += st->actions[i].nargs > 0 ? st->actions[i].nargs : 0;
	n = 2 * n;
	double *f = calloc((size_t)n + 1, sizeof *f);
	int *last = malloc(sizeof *last * (size_t)(p->nbuffers > 0 ? p->nbuffers : 1));
	if (!f || !last) {
		free(f);
		free(last);
		return false;
	}
	for (int b = 0; b < p->nbuffers; b++)
		last[b] = 0;
	int seq = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			/* the tree as pass 0 leaves it, built in one sweep */
			for (int b = 0; b < p->nbuffers; b++)
				if (last[b] > 0)
					f[last[b]] = bi[b].bytes;
			for (int i = 1; i <= n; i++)
				if (i + (i & -i) <= n)
					f[i + (i & -i)] += f[i];
		}
		for (int i = 0; i < st->nactions; i++) {
			const DtmAction *a = &st->actions[i];
			int na = a->nargs < 0 ? 0 : a->nargs > DTM_MAX_ARGS ? DTM_MAX_ARGS : a->nargs;
			if (pass == 1)
				out[i] = 0;
			if (a->kind == DTM_ACT_WAIT)
				continue;
			for (int j = 0; pass == 1 && a->kind == DTM_ACT_GEMM && j < na; j++) {
				int b = a->args[j];
				if (!first_arg(p, a, j) || (j == na - 1 && a->beta != 0))
					continue;
				double by = bi[b].bytes;
				if (by >= cap || fen_sum(f, seq) - fen_sum(f, last[b]) >= cap)
					out[i] += by;
			}
			for (int j = 0; j < na; j++) {
				int b = a->args[j];
				if (!first_arg(p, a, j) || seq >= n)
					continue;
				if (pass == 1) {
					double by = bi[b].bytes;
					if (last[b] > 0)
						fen_add(f, n, last[b], -by);
					fen_add(f, n, seq + 1, by);
				}
				last[b] = ++seq;
			}
		}
	}
	free(f);
	free(last);
	return true;
}

/* e->cold for every stage of p when the profile has a cache model (the
 * arrays in one block: free(e->cold[0]), free(e->cold)). */
static bool cold_env(CostEnv *e, const DtmPlan *p, const BufInfo *bi)
{
	e->cold = NULL;
	if (e->cold_bw <= 0 || p->nstages < 1)
		return true;
	size_t total = 0;
	for (int s = 0; s < p->nstages; s++)
		total += p->stages[s].nactions > 0 ? (size_t)p->stages[s].nactions : 0;
	double **c = malloc(sizeof *c * (size_t)p->nstages);
	double *buf = calloc(total ? total : 1, sizeof *buf);
	if (!c || !buf) {
		free(c);
		free(buf);
		return false;
	}
	double cap = e->hw->l2_bytes * e->threads / (e->oversub > 1 ? e->oversub : 1);
	bool ok = true;
	for (int s = 0, off = 0; s < p->nstages; s++) {
		c[s] = buf + off;
		off += p->stages[s].nactions > 0 ? p->stages[s].nactions : 0;
		ok = ok && (p->stages[s].nactions <= 0 || !p->stages[s].actions ||
		            cold_bytes(p, s, cap, bi, c[s]));
	}
	if (!ok) {
		free(buf);
		free(c);
		return false;
	}
	e->cold = c;
	return true;
}

static void cold_free(CostEnv *e)
{
	if (e->cold)
		free(e->cold[0]);
	free(e->cold);
	e->cold = NULL;
}

static double cold_of(const CostEnv *e, int s, int i)
{
	return e->cold ? e->cold[s][i] : 0;
}

/* Whether a's kernel is a backward one (its op's name ends in _bwd: the
 * attention backward, at its own calibrated rate). */
static bool backward_kernel(const DtmPlan *p, const DtmAction *a)
{
	if (a->kind != DTM_ACT_KERNEL || !p->kernel_names || a->kernel < 0 ||
	    a->kernel >= p->nkernels || !p->kernel_names[a->kernel])
		return false;
	const char *n = p->kernel_names[a->kernel];
	size_t l = strlen(n);
	return l > 4 && strcmp(n + l - 4, "_bwd") == 0;
}

void cost_kernel_class(const char *kname, const char *label, char *out, size_t n)
{
	if (n == 0)
		return;
	if (!kname || strcmp(kname, "fused") != 0 || !label || !*label) {
		snprintf(out, n, "%s", kname ? kname : "?");
		return;
	}
	snprintf(out, n, "fused.%.*s", (int)strcspn(label, " "), label);
}

/* A plain kernel's factor (hw_kernel_factor of its class at dt), cached
 * per kernel id in e->kfac: a plan has thousands of kernel actions, its
 * kernels a few hundred. */
static double kernel_factor(const CostEnv *e, const DtmPlan *p, const DtmAction *a, DtmDtype dt)
{
	if (e->hw->nkfactor == 0 || a->kind != DTM_ACT_KERNEL || !p->kernel_names ||
	    a->kernel < 0 || a->kernel >= p->nkernels)
		return 1;
	double *c = e->kfac && a->kernel < e->nkfac ? &e->kfac[a->kernel] : NULL;
	if (c && *c > 0)
		return *c;
	char cls[HW_KCLASS_LEN];
	cost_kernel_class(p->kernel_names[a->kernel], a->label, cls, sizeof cls);
	double f = hw_kernel_factor(e->hw, cls, e->threads, dt);
	if (c)
		*c = f;
	return f;
}

/* A kernel or GEMM.  Calibrated (hw_calibrated: a CPU's curves, or a
 * GPU's from `calibrate --device cuda`): a GEMM's FLOPs at its shape's
 * measured rate times the `gemm` factor (a step's GEMMs against the same
 * shapes timed back to back), plus its cold operands' bytes (cold_bytes)
 * at the profile's gemm_cold_bw, an attention kernel's at the attention
 * rate (forward or backward), any other kernel's bytes at the bandwidth
 * measured for kernels of its size (dispatch included) times its class's
 * factor (GELU's arithmetic is not LayerNorm's); the calibrated
 * per-kernel overhead on top, and oversubscribed cores stretch it all.
 * Otherwise a roofline at the efficiency-scaled peaks plus the profile's
 * fixed kernel time (kernel factors apply to calibrated curves only). */
static double compute_seconds(const CostEnv *e, const DtmPlan *p, const DtmAction *a,
                              double flops, double bytes, DtmDtype dt, double cold)
{
	const HwProfile *hw = e->hw;
	double t = e->kover;
	bool cal = hw_calibrated(hw);
	double bw = e->bw > 0 ? e->bw : hw_stream_bw(hw, e->threads, bytes);
	double tf = 0, tm = bytes > 0 && bw > 0 ? bytes / bw : 0;
	if (a->kind == DTM_ACT_GEMM) {
		double rate = gemm_rate(e, dt, a);
		tf = rate > 0 ? flops / rate : 0;
		if (cal) {
			/* the CPU widens 16-bit operands to f32 and narrows C
			 * back (runtime/dev_cpu.c): one more pass over them,
			 * except bf16 ones at the bf16 points (oneDNN's GEMM,
			 * its C's narrowing timed with it); cuBLAS takes them
			 * as they are */
			bool wide = hw->cores > 0 && (dt == DTM_F16 ||
			                              (dt == DTM_BF16 && !hw_has_bf16_gemm(hw)));
			tm = wide ? tm : 0;
			double gf = e->gemmf[dt == DTM_BF16 || dt == DTM_F16];
			double hot = t + (tf + tm) * gf;
			/* operands from beyond the cache (cold_bytes): their
			 * bytes at the cold rate on top, not hidden behind the
			 * arithmetic (see the cache model's comment) */
			if (cold > 0 && e->cold_bw > 0)
				hot += cold / e->cold_bw;
			return hot * e->oversub;
		}
	} else if (flops > 0) {
		double rate = cal ? hw_attn_rate(hw, e->threads, backward_kernel(p, a), dt)
		                  : hw_peak_flops(hw, dt) * (hw->gemm_eff > 0 ? hw->gemm_eff : 1);
		tf = rate > 0 ? flops / rate : 0;
		if (cal)
			return (t + tf) * e->oversub;
	} else if (cal) {
		return (t + tm) * kernel_factor(e, p, a, dt) * e->oversub;
	}
	return (t + (tf > tm ? tf : tm)) * e->oversub;
}

/* A collective or send/recv: the calibrated (kind, group) curve when the
 * profile has one, stretched when more ranks share the cores than it was
 * measured with; else alpha-beta on the link its group crosses. */
static double comm_seconds(const CostEnv *e, const DtmPlan *p, const DtmAction *a,
                           double *send_bytes)
{
	CostComm kind = comm_kind(a);
	uint32_t axes = a->axes & (COST_AXES_MASKS - 1);
	int64_t n = cost_group_size(p->mesh_naxes, p->mesh_sizes, axes);
	/* the plan's bytes are the input's local bytes: all_gather's full
	 * tensor is n of them */
	double S = (double)a->bytes * (kind == COST_ALL_GATHER ? (double)n : 1.0);
	CostLinkClass lc = cost_link_class(p->mesh_naxes, p->mesh_sizes, axes, e->node_size);
	if (lc == COST_LINK_NONE)
		return 0;
	if (send_bytes)
		*send_bytes = cost_ring_bytes(kind, n, S);
	const HwProfile *hw = e->hw;
	const HwCollPoint *c = lc == COST_LINK_INTRA ? hw_coll(hw, (int)kind, n) : NULL;
	if (c) {
		/* ranks as threads: more of them than were measured share
		 * the cores (a device per rank: never) */
		double meas = (double)(c->n > hw->cores ? c->n : hw->cores);
		double f = hw->cores > 0 && (double)e->local > meas ? (double)e->local / meas : 1;
		/* the in-run costs are the collectives' (a send's partner
		 * waits for it anyway) */
		double inrun = kind == COST_SEND || kind == COST_RECV ? 0
		                                                        : hw->coll_s + hw->coll_byte_s * S;
		/* the CPU backends reduce 16-bit payloads in f32 (widen, add,
		 * narrow: runtime/comm_local.c), at the f32 curve's rate per
		 * element, not per byte (GPT d=256 on dp=2 in bf16: priced
		 * at half its gradient all_reduce's time) */
		double Sb = S;
		if ((kind == COST_ALL_REDUCE || kind == COST_REDUCE_SCATTER) && a->nargs > 0 &&
		    a->args[0] >= 0 && a->args[0] < p->nbuffers) {
			DtmDtype dt = p->buffers[a->args[0]].dtype;
			Sb = dt == DTM_BF16 || dt == DTM_F16 ? 2 * S : S;
		}
		return inrun + (c->latency + (c->bw > 0 ? Sb / c->bw : 0)) * f;
	}
	HwLink link = lc == COST_LINK_INTER ? hw->inter : hw->intra;
	if (hw->link_eff > 0) {
		link.bw *= hw->link_eff;
		link.a2a_bw *= hw->link_eff;
	}
	double inrun = kind == COST_SEND || kind == COST_RECV ? 0 : hw->coll_s + hw->coll_byte_s * S;
	return inrun + cost_comm_time(kind, n, S, link);
}

double cost_action_seconds(const DtmPlan *p, const HwProfile *hw, int64_t node_size,
                           const DtmAction *a, double *send_bytes)
{
	if (send_bytes)
		*send_bytes = 0;
	CostEnv e = cost_env(p, hw, node_size);
	if (a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM) {
		double flops, bytes;
		DtmDtype dt;
		kernel_work(p, a, &flops, &bytes, &dt);
		return compute_seconds(&e, p, a, flops, bytes, dt, 0);
	}
	if (a->kind != DTM_ACT_COLL && a->kind != DTM_ACT_SEND && a->kind != DTM_ACT_RECV)
		return 0;
	return comm_seconds(&e, p, a, send_bytes);
}

static int cost_stage(const DtmPlan *p, const CostEnv *e, int s, const BufInfo *bi,
                      double *ready, double *dur_out, CostReport *out)
{
	const DtmStage *st = &p->stages[s];
	CostStage *cs = &out->stages[s];
	if (st->nactions < 0 || (st->nactions > 0 && !st->actions))
		return bad_plan(out, "stage %d has a bad action list (%d actions)", s,
		                st->nactions);
	for (int b = 0; b < p->nbuffers; b++)
		ready[b] = 0;
	double tc = 0, tm = 0; /* when the compute and communication streams are free */
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (a->nargs < 0 || a->nargs > DTM_MAX_ARGS)
			return bad_plan(out, "stage %d action %d: bad argument count", s, i);
		for (int j = 0; j < a->nargs; j++)
			if (a->args[j] < 0 || a->args[j] >= p->nbuffers)
				return bad_plan(out, "stage %d action %d: buffer id out of range",
				                s, i);
		if (a->kind == DTM_ACT_WAIT) {
			tc = tm = dmax(tc, tm);
			if (dur_out)
				dur_out[i] = 0;
			continue;
		}
		if (a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM) {
			double flops, bytes;
			DtmDtype dt;
			kernel_work_info(bi, p->train.precision, a, &flops, &bytes, &dt);
			/* cost_action_seconds' time, without its second kernel_work */
			double dur = compute_seconds(e, p, a, flops, bytes, dt, cold_of(e, s, i));
			if (dur_out)
				dur_out[i] = dur;
			double start = tc;
			for (int j = 0; j + 1 < a->nargs; j++)
				start = dmax(start, ready[a->args[j]]);
			tc = start + dur;
			if (a->nargs > 0)
				ready[a->args[a->nargs - 1]] = tc;
			cs->compute_s += dur;
			cs->flops += flops;
			cs->mem_bytes += bytes;
			continue;
		}
		if (a->kind != DTM_ACT_COLL && a->kind != DTM_ACT_SEND && a->kind != DTM_ACT_RECV)
			return bad_plan(out, "stage %d action %d: unknown kind", s, i);
		if (a->kind == DTM_ACT_COLL && ((int)a->coll < 0 || a->coll > DTM_COLL_BROADCAST))
			return bad_plan(out, "stage %d action %d: unknown collective", s, i);
		CostComm kind = comm_kind(a);
		uint32_t axes = a->axes & (COST_AXES_MASKS - 1);
		double bytes;
		bytes = 0;
		double dur = comm_seconds(e, p, a, &bytes);
		if (dur_out)
			dur_out[i] = dur;
		double start = dmax(tc, tm);
		if (a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_COLL)
			for (int j = 0; j < a->nargs; j++)
				start = dmax(start, ready[a->args[j]]);
		tm = start + dur;
		if (a->stream == 0)
			tc = tm;
		else /* the share of it that holds up compute (hw.h comm_blocking) */
			tc = dmax(tc, start) + e->hw->comm_blocking * dur;
		/* collectives write their last argument (in place when it is
		 * the only one), receives every argument */
		if (a->kind == DTM_ACT_RECV)
			for (int j = 0; j < a->nargs; j++)
				ready[a->args[j]] = tm;
		else if (a->kind == DTM_ACT_COLL && a->nargs > 0)
			ready[a->args[a->nargs - 1]] = tm;
		cs->comm_s += dur;
		cs->send_bytes += bytes;
		tally(&cs->by_kind[kind], bytes, dur);
		tally(&cs->by_axes[axes], bytes, dur);
	}
	cs->time_s = dmax(tc, tm);
	cs->exposed_comm_s = dmax(0, cs->time_s - cs->compute_s);
	return 0;
}

/* ---- the stages together: the simulated timeline ---- */

/* Sends from stage a to stage b, in order: their start times and action
 * indices. */
typedef struct Chan {
	double *t;
	int *act;
	int n, cap, taken;
} Chan;

static int p2p_stage(const DtmPlan *p, int s, const DtmAction *a)
{
	if (p->nstages <= 1 || p->pp_axis < 0 || a->axes != 1u << p->pp_axis)
		return s;
	int P = p->nstages;
	int off = a->kind == DTM_ACT_RECV ? -a->peer_offset : a->peer_offset;
	return ((s + off) % P + P) % P;
}

static bool chan_push(Chan *c, int i, double t0)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		double *t = realloc(c->t, sizeof *t * (size_t)cap);
		if (t)
			c->t = t;
		int *ia = realloc(c->act, sizeof *ia * (size_t)cap);
		if (ia)
			c->act = ia;
		if (!t || !ia)
			return false;
		c->cap = cap;
	}
	c->act[c->n] = i;
	c->t[c->n++] = t0;
	return true;
}

/* The timeline of every stage at once; dur[s][i] each action's duration
 * (cost_stage's), or NULL to compute them here with compute stretched by
 * oversub (cost_plan_step's). */
static int simulate(const DtmPlan *p, const HwProfile *hw, int64_t node_size,
                    double *const *durs, double oversub, CostSpan **span, double *makespan)
{
	int P = p->nstages;
	CostEnv e = cost_env(p, hw, node_size);
	bool cold_ok = true;
	if (!durs)
		e.grate = calloc(GEMM_MEMO, sizeof *e.grate); /* NULL: no memo */
	if (!durs && e.cold_bw > 0) { /* at cost_plan_step's cache share */
		BufInfo *bi = buf_info(p);
		cold_ok = bi && cold_env(&e, p, bi);
		free(bi);
	}
	e.oversub = oversub;
	double *ready = calloc((size_t)(p->nbuffers > 0 ? p->nbuffers : 1), sizeof *ready);
	double *tc = calloc((size_t)P, sizeof *tc), *tm = calloc((size_t)P, sizeof *tm);
	int *next = calloc((size_t)P, sizeof *next);
	Chan *ch = calloc((size_t)P * (size_t)P, sizeof *ch);
	bool ok = cold_ok && ready && tc && tm && next && ch;
	CostSpan scratch;
	for (bool progress = true; ok && progress;) {
		progress = false;
		for (int s = 0; s < P; s++) {
			const DtmStage *st = &p->stages[s];
			while (next[s] < st->nactions) {
				int i = next[s];
				const DtmAction *a = &st->actions[i];
				CostSpan *sp = span ? &span[s][i] : &scratch;
				sp->peer_stage = sp->peer_action = -1;
				sp->cold_bytes = durs ? 0 : cold_of(&e, s, i);
				double dur = 0;
				if (durs) {
					dur = durs[s][i];
				} else if (a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM) {
					double flops, bytes;
					DtmDtype dt;
					kernel_work(p, a, &flops, &bytes, &dt);
					dur = compute_seconds(&e, p, a, flops, bytes, dt,
					                      cold_of(&e, s, i));
				} else if (a->kind != DTM_ACT_WAIT) {
					dur = comm_seconds(&e, p, a, NULL);
				}
				if (a->kind == DTM_ACT_WAIT) {
					tc[s] = tm[s] = fmax(tc[s], tm[s]);
					sp->t0 = sp->t1 = tc[s];
				} else if (a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM) {
					double t0 = tc[s];
					for (int j = 0; j + 1 < a->nargs; j++)
						t0 = fmax(t0, ready[a->args[j]]);
					tc[s] = t0 + dur;
					if (a->nargs > 0)
						ready[a->args[a->nargs - 1]] = tc[s];
					sp->t0 = t0;
					sp->t1 = tc[s];
				} else {
					double t0 = fmax(tc[s], tm[s]), t1;
					if (a->kind != DTM_ACT_RECV)
						for (int j = 0; j < a->nargs; j++)
							t0 = fmax(t0, ready[a->args[j]]);
					t1 = t0 + dur;
					int other = a->kind == DTM_ACT_COLL ? -1 : p2p_stage(p, s, a);
					sp->peer_stage = other;
					if (a->kind == DTM_ACT_SEND) {
						if (!chan_push(&ch[s * P + other], i, t0)) {
							ok = false;
							break;
						}
					} else if (a->kind == DTM_ACT_RECV) {
						Chan *c = &ch[other * P + s];
						if (c->taken >= c->n)
							break; /* its send is not issued yet */
						sp->peer_action = c->act[c->taken];
						t1 = fmax(t0, c->t[c->taken++]) + dur;
					}
					tm[s] = t1;
					if (a->stream == 0)
						tc[s] = tm[s];
					else
						tc[s] = fmax(tc[s], t1 - dur) + hw->comm_blocking * dur;
					if (a->kind == DTM_ACT_RECV)
						for (int j = 0; j < a->nargs; j++)
							ready[a->args[j]] = tm[s];
					else if (a->kind == DTM_ACT_COLL && a->nargs > 0)
						ready[a->args[a->nargs - 1]] = tm[s];
					sp->t0 = t0;
					sp->t1 = t1;
				}
				next[s]++;
				progress = true;
			}
		}
		if (!progress) {
			/* a recv with no send ahead of it (a schedule the compiler
			 * would have refused): let the first such run unmatched */
			for (int s = 0; s < P && !progress; s++) {
				if (next[s] >= p->stages[s].nactions)
					continue;
				const DtmAction *a = &p->stages[s].actions[next[s]];
				double dur = durs ? durs[s][next[s]] : comm_seconds(&e, p, a, NULL);
				CostSpan *sp = span ? &span[s][next[s]] : &scratch;
				sp->cold_bytes = 0;
				sp->t0 = fmax(tc[s], tm[s]);
				sp->t1 = sp->t0 + dur;
				sp->peer_stage = p2p_stage(p, s, a);
				sp->peer_action = -1;
				tm[s] = sp->t1;
				for (int j = 0; j < a->nargs; j++)
					ready[a->args[j]] = tm[s];
				next[s]++;
				progress = true;
			}
		}
	}
	double mk = 0;
	for (int s = 0; ok && s < P; s++)
		mk = fmax(mk, fmax(tc[s], tm[s]));
	*makespan = mk;
	for (int k = 0; ch && k < P * P; k++) {
		free(ch[k].t);
		free(ch[k].act);
	}
	free(ch);
	free(next);
	free(tm);
	free(tc);
	free(ready);
	free(e.grate);
	cold_free(&e);
	return ok ? 0 : -1;
}

double cost_feed_seconds(const DtmPlan *p, const HwProfile *hw)
{
	if ((hw->feed_rate <= 0 && hw->feed_x_rate <= 0) || p->ninputs != 2)
		return 0;
	const DtmBuffer *x = &p->buffers[p->inputs[0]], *y = &p->buffers[p->inputs[1]];
	if (x->dtype == DTM_I32 || y->dtype == DTM_I32 || x->rank < 1 || y->rank < 1)
		return 0; /* tokens: a hash per token, in step_overhead */
	double din = (double)x->global_shape[x->rank - 1];
	double macs = din * (double)y->global_shape[y->rank - 1];
	/* runtime/feed.c: each local row of y is one sample's product; each
	 * sample a rank holds a row of, of x or of y, one x made (the larger
	 * of the two row sets: one holds the other in every layout where the
	 * batch dim is split alike or not at all) */
	double rows_x = 1, rows_y = 1;
	for (int d = 0; d + 1 < x->rank; d++)
		rows_x *= (double)x->shape[d];
	for (int d = 0; d + 1 < y->rank; d++)
		rows_y *= (double)y->shape[d];
	double t = hw->feed_rate > 0 ? rows_y * macs / hw->feed_rate : 0;
	if (hw->feed_x_rate > 0)
		t += (rows_x > rows_y ? rows_x : rows_y) * din / hw->feed_x_rate;
	return t;
}

int cost_simulate(const DtmPlan *p, const HwProfile *hw, int64_t node_size, CostSpan **span,
                  double *makespan)
{
	/* compute stretched as cost_plan_step found it (ranks idle in the
	 * bubble leave their cores to the others) */
	CostReport r = {0};
	double f = cost_env(p, hw, node_size).oversub;
	int64_t world = 1;
	for (int a = 0; a < p->mesh_naxes; a++)
		world *= p->mesh_sizes[a] > 0 ? p->mesh_sizes[a] : 1;
	int64_t nodes = node_size > 0 ? (world + node_size - 1) / node_size : 0;
	if (f > 1 && nodes <= 1 && cost_plan_step(p, hw, 1, &r) == 0)
		f = r.oversub;
	cost_report_free(&r);
	return simulate(p, hw, node_size, NULL, f, span, makespan);
}

int cost_plan_step(const DtmPlan *plan, const HwProfile *hw, int nodes, CostReport *out)
{
	memset(out, 0, sizeof *out);
	if (!plan || !hw)
		return bad_plan(out, "no plan or no hardware profile");
	if (plan->mesh_naxes < 0 || plan->mesh_naxes > DTM_MAX_AXES)
		return bad_plan(out, "bad mesh: %d axes (at most %d)", plan->mesh_naxes,
		                DTM_MAX_AXES);
	if (plan->nstages < 1 || !plan->stages)
		return bad_plan(out, "the plan has no stages (%d)", plan->nstages);
	if (plan->nbuffers < 0 || (plan->nbuffers > 0 && !plan->buffers))
		return bad_plan(out, "bad buffer table (%d buffers)", plan->nbuffers);
	int64_t world = 1;
	for (int a = 0; a < plan->mesh_naxes; a++) {
		if (plan->mesh_sizes[a] < 1 || plan->mesh_sizes[a] > (1 << 24))
			return bad_plan(out, "bad mesh: axis %d has size %lld", a,
			                (long long)plan->mesh_sizes[a]);
		world *= plan->mesh_sizes[a];
		if (world > ((int64_t)1 << 40))
			return bad_plan(out, "bad mesh: over 2^40 ranks");
	}
	out->world = world;
	out->node_size = nodes > 0 ? (world + nodes - 1) / nodes
	                           : (hw->devices_per_node > 0 ? hw->devices_per_node : 1);
	out->nstages = plan->nstages;
	out->stages = calloc((size_t)plan->nstages, sizeof *out->stages);
	size_t nb = (size_t)(plan->nbuffers > 0 ? plan->nbuffers : 1);
	double *ready = malloc(nb * sizeof *ready);
	BufInfo *bi = buf_info(plan);
	if (!out->stages || !ready || !bi) {
		free(ready);
		free(bi);
		return bad_plan(out, "out of memory");
	}
	int rc = 0;
	double flops = 0;
	CostEnv env = cost_env(plan, hw, out->node_size);
	/* several stages: each action's duration kept for the timeline */
	double **durs = NULL, *dbuf = NULL;
	if (plan->nstages > 1) {
		size_t total = 0;
		for (int s = 0; s < plan->nstages; s++)
			total += plan->stages[s].nactions > 0 ? (size_t)plan->stages[s].nactions : 0;
		durs = malloc(sizeof *durs * (size_t)plan->nstages);
		dbuf = malloc(sizeof *dbuf * (total ? total : 1));
		if (!durs || !dbuf) {
			free(durs);
			free(dbuf);
			free(ready);
			free(bi);
			return bad_plan(out, "out of memory");
		}
		for (int s = 0, off = 0; s < plan->nstages; s++) {
			durs[s] = dbuf + off;
			off += plan->stages[s].nactions > 0 ? plan->stages[s].nactions : 0;
		}
	}
	double *work = malloc(sizeof(double) * (size_t)plan->nstages);
	if (!work) {
		free(durs);
		free(dbuf);
		free(ready);
		free(bi);
		return bad_plan(out, "out of memory");
	}
	if (!cold_env(&env, plan, bi)) {
		free(work);
		free(durs);
		free(dbuf);
		free(ready);
		free(bi);
		return bad_plan(out, "out of memory");
	}
	env.grate = calloc(GEMM_MEMO, sizeof *env.grate); /* NULL: no memo */
	/* the kernels' factors, looked up once each (NULL: every time) */
	if (hw->nkfactor > 0 && plan->nkernels > 0) {
		env.kfac = calloc((size_t)plan->nkernels, sizeof *env.kfac);
		env.nkfac = env.kfac ? plan->nkernels : 0;
	}
	out->microbatches = plan->train.microbatches > 0 ? plan->train.microbatches : 1;
	int64_t slots = cost_schedule_slots(plan->train.schedule, out->microbatches,
	                                    plan->train.virtual_stages);
	/* Ranks as threads beyond the cores stretch compute (cost_env).  A
	 * pipeline's ranks idle in its bubble leave their cores to the
	 * others: a second pass stretches by the ranks computing at once on
	 * average, (1 - bubble) of them (4 stages of M=1 on 2 cores: 454 ms
	 * predicted against 221 measured with the full stretch). */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		flops = 0;
		for (int s = 0; s < plan->nstages && rc == 0; s++) {
			memset(&out->stages[s], 0, sizeof out->stages[s]);
			rc = cost_stage(plan, &env, s, bi, ready, durs ? durs[s] : NULL, out);
			work[s] = out->stages[s].time_s;
			flops += out->stages[s].flops;
		}
		if (rc)
			break;
		/* each stage's actions cover all M micro-batches: the step and
		 * the bubble from the stages' own times, so unbalanced or empty
		 * stages show (a bubble by the schedule's formula alone assumed
		 * them equal) */
		out->step_s = cost_pipeline_step(work, plan->nstages, slots, &out->bubble);
		if (plan->nstages > 1) {
			/* the stages together, each waiting for the sends it
			 * receives: the schedule's real dependencies, not the
			 * formula's */
			double mk = 0;
			if (simulate(plan, hw, out->node_size, durs, env.oversub, NULL, &mk) != 0) {
				rc = bad_plan(out, "out of memory");
				break;
			}
			double sum = 0;
			for (int s = 0; s < plan->nstages; s++)
				sum += work[s];
			out->step_s = mk;
			out->bubble = mk > 0 ? dmax(0, 1 - sum / plan->nstages / mk) : 0;
		}
		double f = dmax(1, env.oversub * (1 - out->bubble));
		if (pass > 0 || plan->nstages == 1 || env.oversub <= 1 || f >= env.oversub)
			break;
		env.oversub = f;
	}
	out->oversub = env.oversub;
	free(env.kfac);
	free(env.grate);
	cold_free(&env);
	free(ready);
	free(bi);
	free(durs);
	free(dbuf);
	if (rc) {
		free(work);
		return rc;
	}
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		out->mem_bytes += (double)plan->arena_bytes[a];
	/* every rank makes its batch at once, each on one thread: ranks
	 * beyond the cores share them (4 ranks on 2 cores: the mlp's feed
	 * 9.6 ms a step measured, 4.6 priced before this) */
	double feed_share = hw->cores > 0 && env.local > hw->cores ?
	                            (double)env.local / hw->cores : 1;
	out->step_s += hw->step_s + cost_feed_seconds(plan, hw) * feed_share;
	free(work);
	if (out->step_s > 0) {
		out->tokens_per_s = (double)plan->train.tokens_per_step / out->step_s;
		double peak = hw_peak_flops(hw, plan->train.precision);
		int64_t per_stage = world % plan->nstages == 0 ? world / plan->nstages : world;
		if (peak > 0)
			out->hfu = flops * (double)per_stage / (out->step_s * (double)world * peak);
	}
	return 0;
}

void cost_report_free(CostReport *r)
{
	if (!r)
		return;
	free(r->stages);
	r->stages = NULL;
	r->nstages = 0;
}
