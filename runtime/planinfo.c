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
