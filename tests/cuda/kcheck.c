/* kcheck.c - every CUDA kernel of a plan against its C kernel, on the host.
 *
 * Linked in place of the runtime with a training program's generated C
 * (`dtmc build --cuda --keep-c`), whose main() calls dtm_main(&plan), and
 * with the plan's CUDA source compiled for the host emulator (emu.h,
 * emu.cpp).  For each kernel action of the plan, in order: its buffers
 * get fresh random values (ids in [0, vocab), second moments positive,
 * segment ids (a buffer named "seg") in [-1, 3), so rows share segments
 * and some attend nothing), the C kernel runs on one copy and the CUDA
 * kernel (its launch from plan->cuda_kernels) on another, and every
 * buffer of the action must then agree: NaN where the other is NaN, and
 * max |a - b| / max |b| within 2e-4 for f32 and 2e-2 for bf16/f16
 * buffers.  An input an attention kernel produces (attention_bwd's
 * forward, attn.lse: its output and the rows' log-sum-exps after it) is
 * made by that C kernel from the action's own q, k, v instead (fwd_input):
 * random values would not be the statistics of those q and k.  An
 * attention's output buffer longer than its values (attn.lse) has its
 * f32 log-sum-exps after them compared too (compare_tail).
 *
 *   ./NAME [--rank R] [-v]
 *
 * --rank picks the mesh coordinates (default: the last rank, so
 * vocab-parallel and shard offsets are not 0).  Exit status 0 when every
 * kernel agrees.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan.h"

int emu_launch(const char *name, const void *args, long long threads, int block, int smem);

/* Whether an action's label names op ("attention_bwd %106", or the op
 * alone). */
static bool is_op(const char *label, const char *op)
{
	size_t n = strlen(op);
	return label && strncmp(label, op, n) == 0 && (label[n] == ' ' || label[n] == 0);
}

/* Where action a's input j is an attention kernel's output: runs that
 * kernel's C into cpu[j], on a's buffers of the same ids (its q, k, v and
 * segment ids are a's), and copies it to gpu[j].  False: no such input. */
static bool fwd_input(const DtmPlan *plan, const DtmStage *st, const DtmAction *a, int j,
                      DtmCtx *ctx, void **cpu, void **gpu)
{
	for (int pi = 0; pi < st->nactions; pi++) {
		const DtmAction *p = &st->actions[pi];
		if (p->kind != DTM_ACT_KERNEL || p->nargs < 1 || p->args[p->nargs - 1] != a->args[j] ||
		    !is_op(p->label, "attention"))
			continue;
		void *args[DTM_MAX_ARGS];
		for (int k = 0; k < p->nargs; k++) {
			args[k] = NULL;
			for (int q = 0; q < a->nargs; q++)
				if (a->args[q] == p->args[k])
					args[k] = cpu[q];
			if (!args[k])
				return false;
		}
		plan->kernels[p->kernel](ctx, args);
		memcpy(gpu[j], cpu[j], (size_t)plan->buffers[a->args[j]].bytes);
		return true;
	}
	return false;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* f16 of small random values: the normal range only */
static float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	if (e == 0)
		return s ? -0.0f : 0.0f;
	u = s | ((e + 127 - 15) << 23) | (m << 13);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a < 0x38800000u)
		return (uint16_t)s;
	uint32_t r = a + 0xfffu + ((a >> 13) & 1) - ((uint32_t)(127 - 15) << 23);
	return (uint16_t)(s | (r >> 13));
}

static int64_t numel(const DtmBuffer *b)
{
	int64_t n = 1;
	for (int d = 0; d < b->rank; d++)
		n *= b->shape[d];
	return n;
}

static double load(const DtmBuffer *b, const void *p, int64_t i)
{
	switch (b->dtype) {
	case DTM_F32:
		return ((const float *)p)[i];
	case DTM_BF16:
		return bf16_to_f32(((const uint16_t *)p)[i]);
	case DTM_F16:
		return f16_to_f32(((const uint16_t *)p)[i]);
	default:
		return ((const int32_t *)p)[i];
	}
}

static void fill(const DtmBuffer *b, void *p, int64_t vocab)
{
	int64_t n = numel(b);
	memset(p, 0, (size_t)b->bytes);
	bool pos = b->name && strncmp(b->name, "opt.v.", 6) == 0;
	bool seg = b->name && strcmp(b->name, "seg") == 0;
	for (int64_t i = 0; i < n; i++) {
		float v = (float)(urand() * 4.0 - 2.0);
		if (pos)
			v = fabsf(v);
		switch (b->dtype) {
		case DTM_F32:
			((float *)p)[i] = v;
			break;
		case DTM_BF16:
			((uint16_t *)p)[i] = f32_to_bf16(v);
			break;
		case DTM_F16:
			((uint16_t *)p)[i] = f32_to_f16(v);
			break;
		default:
			((int32_t *)p)[i] = seg ? (int32_t)(urand() * 4.0) - 1
			                        : (int32_t)(urand() * (double)vocab);
			break;
		}
	}
	/* a chunked grad_norm's f64 running sum (passes/memplan.h) */
	if (n == 1 && b->bytes >= 16)
		*(double *)((char *)p + 8) = urand();
}

/* max |a - b| / max |b| over the buffer; -1 when NaNs differ. */
static double compare(const DtmBuffer *b, const void *x, const void *y)
{
	int64_t n = numel(b);
	double md = 0, mb = 0;
	for (int64_t i = 0; i < n; i++) {
		double u = load(b, x, i), v = load(b, y, i);
		if (isnan(u) != isnan(v))
			return -1;
		if (isnan(u))
			continue;
		if (isinf(u) || isinf(v)) {
			if (u != v)
				return -1;
			continue;
		}
		md = fmax(md, fabs(u - v));
		mb = fmax(mb, fabs(v));
	}
	if (n == 1 && b->bytes >= 16) {
		double u = *(const double *)((const char *)x + 8),
		       v = *(const double *)((const char *)y + 8);
		md = fmax(md, fabs(u - v));
		mb = fmax(mb, fabs(v));
	}
	return md / (mb > 1e-6 ? mb : 1e-6);
}

/* The f32 values of buffer b after its numel elements (an attention's
 * log-sum-exps, attn.lse), x against y as compare's; 0 when none. */
static double compare_tail(const DtmBuffer *b, const void *x, const void *y)
{
	int64_t es = b->dtype == DTM_F32 || b->dtype == DTM_I32 ? 4 : 2;
	int64_t off = numel(b) * es, n = (b->bytes - off) / 4;
	double md = 0, mb = 0;
	for (int64_t i = 0; i < n; i++) {
		float u, v;
		memcpy(&u, (const char *)x + off + 4 * i, 4);
		memcpy(&v, (const char *)y + off + 4 * i, 4);
		if (isinf(u) || isinf(v) || isnan(u) || isnan(v)) {
			if (!(u == v))
				return -1;
			continue;
		}
		md = fmax(md, fabs((double)u - v));
		mb = fmax(mb, fabs((double)v));
	}
	return md / (mb > 1e-6 ? mb : 1e-6);
}

int dtm_main(const DtmPlan *plan, int argc, char **argv)
{
	int64_t rank = -1;
	bool verbose = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc)
			rank = atoll(argv[++i]);
		else if (strcmp(argv[i], "-v") == 0)
			verbose = true;
	}
	if (!plan->cuda_source || !plan->cuda_kernels) {
		fputs("kcheck: the plan has no CUDA kernels (dtmc build --cuda)\n", stderr);
		return 1;
	}
	int64_t nranks = 1, coords[DTM_MAX_AXES] = {0};
	for (int a = 0; a < plan->mesh_naxes; a++)
		nranks *= plan->mesh_sizes[a];
	if (rank < 0 || rank >= nranks)
		rank = nranks - 1;
	for (int a = plan->mesh_naxes - 1, r = (int)rank; a >= 0; a--) {
		coords[a] = r % plan->mesh_sizes[a];
		r /= (int)plan->mesh_sizes[a];
	}
	int64_t vocab = plan->train.vocab > 0 ? plan->train.vocab : 16;
	static float scratch[DTM_SCRATCH_FLOATS];
	DtmCtx ctx = {.step = 3,
	              .lr = 0.01f,
	              .seed = 1234,
	              .rank = rank,
	              .coords = coords,
	              .nthreads = 1,
	              .scratch = scratch,
	              .mesh_naxes = plan->mesh_naxes,
	              .mesh_sizes = plan->mesh_sizes};
	int checked = 0, bad = 0;
	for (int s = 0; s < plan->nstages; s++) {
		const DtmStage *st = &plan->stages[s];
		for (int ai = 0; ai < st->nactions; ai++) {
			const DtmAction *a = &st->actions[ai];
			if (a->kind != DTM_ACT_KERNEL)
				continue;
			const DtmCudaKernel *ck = &plan->cuda_kernels[a->kernel];
			void *cpu[DTM_MAX_ARGS], *gpu[DTM_MAX_ARGS];
			for (int j = 0; j < a->nargs; j++) {
				const DtmBuffer *b = &plan->buffers[a->args[j]];
				cpu[j] = gpu[j] = NULL;
				for (int k = 0; k < j; k++)
					if (a->args[k] == a->args[j]) {
						cpu[j] = cpu[k];
						gpu[j] = gpu[k];
					}
				if (cpu[j])
					continue;
				size_t bytes = (size_t)(b->bytes > 16 ? b->bytes : 16);
				cpu[j] = malloc(bytes);
				gpu[j] = malloc(bytes);
				if (!cpu[j] || !gpu[j]) {
					fputs("kcheck: out of memory\n", stderr);
					return 1;
				}
				fill(b, cpu[j], vocab);
				memcpy(gpu[j], cpu[j], bytes);
			}
			for (int j = 0; is_op(a->label, "attention_bwd") && j < a->nargs - 1; j++)
				fwd_input(plan, st, a, j, &ctx, cpu, gpu);
			plan->kernels[a->kernel](&ctx, cpu);
			DtmCudaArgs ca;
			memset(&ca, 0, sizeof ca);
			for (int j = 0; j < a->nargs; j++)
				ca.p[j] = gpu[j];
			ca.step = ctx.step;
			ca.lr = ctx.lr;
			ca.seed = ctx.seed;
			ca.rank = rank;
			for (int k = 0; k < DTM_MAX_AXES; k++)
				ca.coords[k] = coords[k];
			int rc = emu_launch(ck->name ? ck->name : "?", &ca, (long long)ck->threads,
			                    ck->block, ck->smem_bytes);
			double worst = 0;
			for (int j = 0; j < a->nargs && rc == 0; j++) {
				const DtmBuffer *b = &plan->buffers[a->args[j]];
				double tol = b->dtype == DTM_F32 ? 2e-4 : 2e-2;
				double err = compare(b, gpu[j], cpu[j]);
				if (err >= 0 && j == a->nargs - 1 && is_op(a->label, "attention")) {
					double et = compare_tail(b, gpu[j], cpu[j]);
					err = et < 0 ? et : fmax(err, et);
				}
				if (err < 0 || err > tol) {
					fprintf(stderr,
					        "kcheck: %s (%s): arg %d (%s) differs: %s %.3g\n",
					        ck->name, a->label ? a->label : "?", j,
					        b->name ? b->name : "-", err < 0 ? "NaNs" : "error",
					        err);
					rc = 1;
				}
				worst = fmax(worst, err);
			}
			if (verbose || rc)
				printf("%-10s %-40s %s (max error %.2g; %lld threads, block %d, "
				       "smem %d)\n",
				       ck->name ? ck->name : "?", a->label ? a->label : "?",
				       rc ? "FAIL" : "ok", worst, (long long)ck->threads, ck->block,
				       ck->smem_bytes);
			checked++;
			bad += rc != 0;
			for (int j = 0; j < a->nargs; j++) {
				bool first = true;
				for (int k = 0; k < j; k++)
					first &= cpu[k] != cpu[j];
				if (first) {
					free(cpu[j]);
					free(gpu[j]);
				}
			}
		}
	}
	printf("kcheck %s (rank %lld): %d kernels, %d differ\n", plan->model ? plan->model : "?",
	       (long long)rank, checked, bad);
	return bad ? 1 : 0;
}
