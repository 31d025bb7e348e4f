/* planinfo.c - pure functions of a plan: what `dtmc inspect` reads
 * without running anything (global sizes, a stage's view, the overlap
 * stream's hazards and staging copies; runtime/overlap.c runs them).  Kept
 * apart from the executor so dtmc links none of it: exec.c brings the CPU
 * device and with it OpenBLAS, whose idle threads spin for the first tenth
 * of a second of every process that loads it (on 2 cores, a tenth of a
 * sweep's CPU). */
#include <stdlib.h>
#include <string.h>

#include "runtime/planinfo.h"

const char *rt_optimizer_name(DtmOptimizer o)
{
	return o == DTM_OPTIMIZER_SGD ? "sgd" : o == DTM_OPTIMIZER_ADAMW ? "adamw" : "?";
}

const char *rt_lr_schedule_name(DtmLrSchedule s)
{
	return s == DTM_LR_CONSTANT ? "constant" : s == DTM_LR_COSINE ? "cosine" : "?";
}

const char *rt_pipe_schedule_name(DtmPipeSchedule s)
{
	switch (s) {
	case DTM_PIPE_1F1B: return "1f1b";
	case DTM_PIPE_GPIPE: return "gpipe";
	case DTM_PIPE_INTERLEAVED: return "interleaved";
	case DTM_PIPE_ZB: return "zb";
	}
	return "?";
}

int64_t rt_global_numel(const DtmBuffer *b)
{
	int64_t n = 1;
	for (int d = 0; d < b->rank; d++)
		n *= b->global_shape[d];
	return n;
}

void rt_plan_stage_view(const DtmPlan *p, int stage, DtmPlan *view)
{
	*view = *p;
	if (p->nstages <= 1 || stage < 0 || stage >= p->nstages)
		return;
	const DtmStage *s = &p->stages[stage];
	view->nstages = 1;
	view->stages = s;
	view->stage = stage;
	memcpy(view->arena_bytes, s->arena_bytes, sizeof view->arena_bytes);
	view->ninputs = s->ninputs;
	memcpy(view->inputs, s->inputs, sizeof view->inputs);
	view->loss = s->loss;
	view->grad_norm = s->grad_norm;
}

/* ---- hazards ---- */

static void add_range(RtAccess *x, const DtmPlan *p, int id, bool write)
{
	if (id < 0 || id >= p->nbuffers || x->n >= RT_ACCESS_MAX)
		return;
	const DtmBuffer *b = &p->buffers[id];
	if (b->bytes <= 0)
		return;
	x->r[x->n++] = (RtRange){ .arena = (int)b->arena, .lo = b->offset,
				  .hi = b->offset + b->bytes, .write = write };
}

void rt_access_of(const DtmPlan *p, const DtmAction *a, RtAccess *x)
{
	x->n = 0;
	int n = a->nargs < 0 ? 0 : a->nargs > DTM_MAX_ARGS ? DTM_MAX_ARGS : a->nargs;
	switch (a->kind) {
	case DTM_ACT_GEMM:
		/* C is read too when beta != 0: a write covers that */
		for (int j = 0; j < n; j++)
			add_range(x, p, a->args[j], j == n - 1);
		break;
	case DTM_ACT_KERNEL:
		/* The output is the last argument, but some kernels update
		 * others in place (adamw_step's moments), so every argument
		 * counts as written.  Extra conflicts cost only a wait when a
		 * pending collective reads what a kernel reads. */
		for (int j = 0; j < n; j++)
			add_range(x, p, a->args[j], true);
		break;
	case DTM_ACT_COLL:
		/* args[0] in, the rest out (in == out: read and written) */
		for (int j = 0; j < n; j++)
			add_range(x, p, a->args[j], j > 0 || n == 1);
		break;
	case DTM_ACT_SEND:
		for (int j = 0; j < n; j++)
			add_range(x, p, a->args[j], false);
		break;
	case DTM_ACT_RECV:
		for (int j = 0; j < n; j++)
			add_range(x, p, a->args[j], true);
		break;
	case DTM_ACT_WAIT:
		break;
	}
}

bool rt_access_conflict(const RtAccess *earlier, const RtAccess *later)
{
	for (int i = 0; i < earlier->n; i++) {
		const RtRange *e = &earlier->r[i];
		for (int j = 0; j < later->n; j++) {
			const RtRange *l = &later->r[j];
			if ((e->write || l->write) && e->arena == l->arena && e->lo < l->hi &&
			    l->lo < e->hi)
				return true;
		}
	}
	return false;
}

int rt_hazard_newest(const RtAccess *pending, int npending, const RtAccess *next)
{
	for (int k = npending - 1; k >= 0; k--)
		if (rt_access_conflict(&pending[k], next))
			return k;
	return -1;
}

bool rt_overlap_split_input(const DtmPlan *p, const DtmAction *a, RtAccess *in,
                            RtAccess *rest)
{
	bool coll = a->kind == DTM_ACT_COLL && a->nargs >= 2 &&
		    a->args[0] != a->args[a->nargs - 1];
	if (a->stream == 0 || !(coll || (a->kind == DTM_ACT_SEND && a->nargs >= 1)))
		return false;
	RtAccess all;
	rt_access_of(p, a, &all);
	in->n = rest->n = 0;
	for (int j = 0; j < all.n; j++) {
		/* args[0] is the first range when it has bytes */
		bool input = j == 0 && !all.r[0].write && p->buffers[a->args[0]].bytes > 0;
		if (input)
			in->r[in->n++] = all.r[j];
		else
			rest->r[rest->n++] = all.r[j];
	}
	/* the action's own outputs over its input: comm.c stages it itself */
	RtAccess in_w = *in;
	for (int j = 0; j < in_w.n; j++)
		in_w.r[j].write = true;
	return in->n == 1 && !rt_access_conflict(rest, &in_w);
}

int rt_overlap_staging(const DtmPlan *p, const DtmAction *acts, int n, bool *stage)
{
	int count = 0;
	for (int i = 0; i < n; i++) {
		RtAccess in, rest;
		stage[i] = false;
		if (!rt_overlap_split_input(p, &acts[i], &in, &rest))
			continue;
		for (int j = i + 1; j < n; j++) {
			const DtmAction *b = &acts[j];
			bool compute = b->kind == DTM_ACT_KERNEL || b->kind == DTM_ACT_GEMM;
			if (b->kind == DTM_ACT_WAIT || (b->stream == 0 && !compute))
				break; /* everything pending is waited for here */
			if (!compute)
				continue; /* queued behind it: runs after it */
			RtAccess acc;
			rt_access_of(p, b, &acc);
			if (rt_access_conflict(&rest, &acc))
				break; /* the action is waited for here anyway */
			if (rt_access_conflict(&in, &acc)) {
				stage[i] = true; /* b overwrites the input first */
				count++;
				break;
			}
		}
	}
	return count;
}

int64_t rt_overlap_staging_bytes(const DtmPlan *p, const DtmStage *st, int *count)
{
	bool *stage = calloc((size_t)(st->nactions > 0 ? st->nactions : 1), sizeof *stage);
	int64_t bytes = 0;
	*count = stage ? rt_overlap_staging(p, st->actions, st->nactions, stage) : 0;
	for (int i = 0; stage && i < st->nactions; i++)
		if (stage[i])
			bytes += p->buffers[st->actions[i].args[0]].bytes;
	free(stage);
	return bytes;
}

/* ---- the CPU's GEMM blocks and staging (runtime/dev_cpu.c runs them) ---- */

void rt_gemm_extent(const DtmAction *a, int64_t *na, int64_t *nb, int64_t *nc)
{
	int64_t last = a->batch > 1 ? a->batch - 1 : 0;
	*na = a->stride_a * last + a->m * a->k;
	*nb = a->stride_b * last + a->k * a->n;
	*nc = a->stride_c * last + a->m * a->n;
}

/* ---- GEMM: fixed blocks ----
 *
 * A GEMM's result must not depend on the thread count, and BLAS's does.
 * OpenBLAS 0.3.21 (SkylakeX kernels), measured: 512x512xK on 2 or 3
 * threads differs from 1 thread in 65 - 77% of C's elements for K = 500,
 * 600, 700, 1000, 1500 (its threaded driver cuts K into other blocks), and
 * 128x32x64 (A B^T) called as 48 + 48 + 32 rows differs from one call of
 * 128 rows in 833 of 4096 elements (small calls take kernels of their
 * own).  So BLAS stays on one thread, and every GEMM item is cut into
 * blocks of C's rows (or, when C is wider than tall, its columns) that
 * depend on m, n and k alone: each block is one BLAS call with the same
 * arguments whichever thread runs it and however many there are; the pool
 * only hands the blocks out.
 *
 * Each block is a BLAS call that repacks the operand it does not cut (B
 * for row blocks), so on one thread every extra block costs time:
 * measured on one thread (CPU time), one 2048x2048x512 GEMM cut in blocks
 * of 1024, 512 and 256 rows took 1.6%, 3.6% and 11% more than one call;
 * the default GPT's GEMMs (256x64x64 to 256x256x64, 2 - 8 MFLOP, operands
 * in cache) cut in two took 2 - 8% more, or up to 40% less where the
 * halves take OpenBLAS's small-matrix kernels; 512x512x2048 (A^T B) cut in
 * two took 9% more.  So every block has RT_GEMM_BLOCK_FLOPS at least; a
 * GEMM is cut in two when the halves have RT_GEMM_EXT2 rows (two threads
 * then halve its time for one extra call), and in more blocks only of
 * RT_GEMM_EXT rows, and of RT_GEMM_EXTRA_FLOPS per block past two; both
 * RT_GEMM_EXT_CACHED when the uncut operand fits in RT_GEMM_CACHED_FLOATS.
 * The price is parallelism: one GEMM runs on at most nblocks threads (a
 * GEMM of 2048 rows on 2, of 12288 rows on 12), where OpenBLAS's own
 * threads took any number; a batch's items run in parallel too. */
#define RT_GEMM_EXT 1024
#define RT_GEMM_EXT2 256
#define RT_GEMM_EXT_CACHED 32
#define RT_GEMM_CACHED_FLOATS (64 << 10)
#define RT_GEMM_BLOCK_FLOPS (1 << 20)
#define RT_GEMM_EXTRA_FLOPS (16 << 20)
#define RT_GEMM_MAX_BLOCKS 64

void rt_gemm_split(int64_t m, int64_t n, int64_t k, RtGemmSplit *sp)
{
	sp->rows = m >= n;
	int64_t lim = sp->rows ? m : n, other = k * (sp->rows ? n : m);
	int64_t flops = 2 * m * n * k, units = (lim + 15) / 16;
	if (lim <= 0) { /* nothing to write */
		sp->ext = 16;
		sp->nblocks = 0;
		return;
	}
	bool cached = other <= RT_GEMM_CACHED_FLOATS;
	int64_t nb = lim / (cached ? RT_GEMM_EXT_CACHED : RT_GEMM_EXT);
	if (nb > 2 + flops / RT_GEMM_EXTRA_FLOPS)
		nb = 2 + flops / RT_GEMM_EXTRA_FLOPS;
	if (nb < 2 && lim >= 2 * (cached ? RT_GEMM_EXT_CACHED : RT_GEMM_EXT2))
		nb = 2;
	if (nb > flops / RT_GEMM_BLOCK_FLOPS)
		nb = flops / RT_GEMM_BLOCK_FLOPS;
	if (nb > RT_GEMM_MAX_BLOCKS)
		nb = RT_GEMM_MAX_BLOCKS;
	if (nb > units)
		nb = units;
	if (nb < 1)
		nb = 1;
	sp->ext = (units + nb - 1) / nb * 16;
	sp->nblocks = (lim + sp->ext - 1) / sp->ext;
}

/* rt_cpu_gemm's staging for one action (planinfo.h). */
void rt_gemm_need(const DtmAction *a, DtmDtype ta, DtmDtype tb, DtmDtype tc, bool bf16_native,
		  int64_t need[4])
{
	int64_t na, nb, nc;
	rt_gemm_extent(a, &na, &nb, &nc);
	bool native = ta == DTM_BF16 && tb == DTM_BF16 && bf16_native;
	bool whole = a->batch > 1 && a->stride_c == 0;
	RtGemmSplit sp;
	rt_gemm_split(a->m, a->n, a->k, &sp);
	need[0] = !native && ta != DTM_F32 ? na : 0;
	need[1] = !native && tb != DTM_F32 ? nb : 0;
	need[2] = tc != DTM_F32 && whole ? nc : 0;
	need[3] = tc != DTM_F32 && !whole ? (sp.rows ? sp.ext * a->n : a->m * sp.ext) : 0;
}

void rt_gemm_plan_need(const DtmPlan *p, bool bf16_native, int64_t need[4])
{
	need[0] = need[1] = need[2] = need[3] = 0;
	for (int st = 0; st < p->nstages; st++) {
		for (int i = 0; i < p->stages[st].nactions; i++) {
			const DtmAction *a = &p->stages[st].actions[i];
			if (a->kind != DTM_ACT_GEMM)
				continue;
			int64_t n[4];
			rt_gemm_need(a, p->buffers[a->args[0]].dtype, p->buffers[a->args[1]].dtype,
				     p->buffers[a->args[2]].dtype, bf16_native, n);
			for (int k = 0; k < 4; k++)
				need[k] = n[k] > need[k] ? n[k] : need[k];
		}
	}
}
