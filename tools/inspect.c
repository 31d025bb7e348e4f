/* inspect.c - `dtmc inspect` (see inspect.h).
 *
 * Reads the DtmPlan of codegen/plan_build.h (what the binary runs) plus the
 * final IR it came from (names of the tensors moved, source locations, the
 * liveness behind the activation arena).  Everything is computed once into
 * an Insp (inspect_impl.h), then written as text, JSON, a Chrome trace or
 * a DOT graph (inspect_dot.c).
 *
 * The schedule is per stage, at one mesh coordinate: every rank of a stage
 * runs the same actions, only its groups differ (the rank shown is --rank
 * with its pp coordinate set to the stage).  Communication time and bytes
 * come from cost_action_seconds, the step time and bubble from
 * cost_plan_step.  The trace replays every stage's actions on two streams
 * per rank under cost_plan_step's rules and, across stages, makes a recv
 * wait for the matching send (the k-th send from stage a to stage b meets
 * the k-th recv of b from a), so a pipeline's bubbles show.
 */
#include "tools/inspect_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/zero.h"
#include "runtime/planinfo.h"
#include "support/json.h"
#include "tools/cost.h"
#include "tools/hw.h"
#include "tools/mlir.h"
#include "tools/report.h"

/* ---- the mesh ---- */

static void coords_of(const DtmPlan *p, int64_t rank, int64_t *c)
{
	for (int a = p->mesh_naxes - 1; a >= 0; a--) {
		c[a] = rank % p->mesh_sizes[a];
		rank /= p->mesh_sizes[a];
	}
}

static int64_t rank_of(const DtmPlan *p, const int64_t *c)
{
	int64_t r = 0;
	for (int a = 0; a < p->mesh_naxes; a++)
		r = r * p->mesh_sizes[a] + c[a];
	return r;
}

static int stage_of(const Insp *in, int64_t rank)
{
	if (in->pp < 0)
		return 0;
	int64_t c[DTM_MAX_AXES];
	coords_of(in->p, rank, c);
	return (int)c[in->pp];
}

/* Member `index` of rank's group along axes (mixed radix over the axes,
 * the last one minor: runtime/comm.c's numbering); *pos gets rank's own
 * index when pos is non-NULL. */
static int64_t group_member(const DtmPlan *p, int64_t rank, uint32_t axes, int64_t index,
                            int64_t *pos)
{
	int64_t c[DTM_MAX_AXES];
	coords_of(p, rank, c);
	int64_t me = 0;
	for (int a = 0; a < p->mesh_naxes; a++)
		if (axes >> a & 1)
			me = me * p->mesh_sizes[a] + c[a];
	if (pos)
		*pos = me;
	for (int a = p->mesh_naxes - 1; a >= 0; a--) {
		if (!(axes >> a & 1))
			continue;
		c[a] = index % p->mesh_sizes[a];
		index /= p->mesh_sizes[a];
	}
	return rank_of(p, c);
}

/* The rank a send goes to, or a recv comes from: peer_offset steps along
 * the axes, wrapping, forward for a send and back for a recv (so a matched
 * pair carries the same offset, runtime/comm.h). */
int64_t inspect_p2p_peer(const DtmPlan *p, int64_t rank, const DtmAction *a)
{
	int64_t n = cost_group_size(p->mesh_naxes, p->mesh_sizes, a->axes), me;
	group_member(p, rank, a->axes, 0, &me);
	int64_t k = dtm_peer_index(me, n, a->peer_offset, a->peer_mirror,
	                           a->kind == DTM_ACT_RECV ? -1 : 1);
	return group_member(p, rank, a->axes, k, NULL);
}

void inspect_axes_text(const DtmPlan *p, uint32_t axes, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = 0;
	for (int a = 0; a < p->mesh_naxes && n < cap; a++)
		if (axes >> a & 1)
			n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", p->mesh_names[a]);
	if (!n)
		snprintf(buf, cap, "-");
}

void inspect_coords_text(const DtmPlan *p, int64_t rank, char *buf, size_t cap)
{
	int64_t c[DTM_MAX_AXES];
	coords_of(p, rank, c);
	size_t n = 0;
	buf[0] = 0;
	for (int a = 0; a < p->mesh_naxes && n < cap; a++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s=%" PRId64, a ? ", " : "",
		                      p->mesh_names[a], c[a]);
}

/* "[0 1]", or "[0 2 .. 14] (8 ranks)" for big groups. */
void inspect_group_text(const DtmPlan *p, int64_t rank, uint32_t axes, char *buf, size_t cap)
{
	int64_t n = cost_group_size(p->mesh_naxes, p->mesh_sizes, axes);
	size_t k = (size_t)snprintf(buf, cap, "[");
	for (int64_t i = 0; i < n && k < cap; i++) {
		if (n > 8 && i == 2) {
			k += (size_t)snprintf(buf + k, cap - k, " ..");
			i = n - 1;
		}
		k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? " " : "",
		                      group_member(p, rank, axes, i, NULL));
	}
	if (k < cap && n > 8)
		snprintf(buf + k, cap - k, "] (%" PRId64 ")", n);
	else if (k < cap)
		snprintf(buf + k, cap - k, "]");
}

/* ---- names ---- */

static const char *dtype_name(DtmDtype t)
{
	switch (t) {
	case DTM_BF16: return "bf16";
	case DTM_F16: return "f16";
	case DTM_I32: return "i32";
	default: return "f32";
	}
}

static const char *phase_name(DtmPhase ph)
{
	return ph == DTM_PHASE_FORWARD ? "forward" : ph == DTM_PHASE_BACKWARD ? "backward"
	                                                                      : "optimizer";
}

static const char *arena_name(int a)
{
	return pass_memplan_arena_name(a);
}

static CostComm comm_kind(const DtmAction *a)
{
	return a->kind == DTM_ACT_SEND ? COST_SEND : a->kind == DTM_ACT_RECV ? COST_RECV
	                                                                     : (CostComm)a->coll;
}

static bool is_comm(const DtmAction *a)
{
	return a->kind == DTM_ACT_COLL || a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV;
}

/* A partial sum of squares on its way to the global grad norm. */
static bool feeds_grad_norm(const IrModule *m, int x)
{
	for (int hop = 0; x >= 0 && hop < 4; hop++) {
		const IrNode *xn = m->nodes[x];
		if (xn->op == IR_OP_GRAD_NORM)
			return true;
		x = xn->nops > 0 ? xn->ops[0] : -1;
	}
	return false;
}

/* The concat leaves of a pack at x (nested concats flattened) into
 * leaf[0 .. cap), returning how many; 0 when x is no pack.  A DDP
 * bucket's pack (passes/bucket.c) concatenates gradients along dim 0; a
 * ZeRO unit's or bucket's (passes/coalesce.c) rows [1 or N, n] along dim
 * 1, each labelled with the param or gradient it carries. */
static int pack_leaves(const IrModule *m, int x, int *leaf, int cap, int n)
{
	const IrNode *c = m->nodes[x];
	if (c->op != IR_OP_CONCAT || c->name || ir_label(m, c))
		return 0;
	bool rows = c->rank == 2 && ir_attr_axis(c)->axis == 1;
	for (int i = 0; i < c->nops; i++) {
		int y = ir_label_source(m, c->ops[i]);
		const IrNode *l = m->nodes[y];
		if (l->op == IR_OP_CONCAT && !l->name && !ir_label(m, l)) {
			if (!(n = pack_leaves(m, y, leaf, cap, n)))
				return 0;
			continue;
		}
		const char *s = l->name ? l->name : ir_label(m, l);
		if (!s || (!rows && strncmp(s, "grad.", 5) != 0))
			return 0;
		if (n < cap)
			leaf[n] = y;
		n++;
	}
	return n;
}

/* The pack a collective moves (its operand, or itself: an all_reduce's
 * action names its input), or -1. */
static int pack_of(const IrModule *m, int node)
{
	int x = ir_label_source(m, node);
	const IrNode *xn = m->nodes[x];
	if ((xn->op == IR_OP_ALL_GATHER || xn->op == IR_OP_REDUCE_SCATTER) && xn->nops == 1)
		x = ir_label_source(m, xn->ops[0]);
	return m->nodes[x]->op == IR_OP_CONCAT ? x : -1;
}

/* The tensor a collective, send or recv node moves, for people, in the
 * source's terms (ir_value_label: the value's name, else its label, else
 * the expression that computed it), found from the node and its operand,
 * never from its users: a DDP bucket or a ZeRO unit lists its tensors,
 * and a grad norm's partial sums say so. */
static void tensor_name(const Insp *in, int node, char *buf, size_t cap)
{
	const IrModule *m = in->m;
	int x = ir_label_source(m, node), leaf[3];
	const IrNode *xn = m->nodes[x];
	if (!xn->name && !ir_label(m, xn) && feeds_grad_norm(m, x)) {
		snprintf(buf, cap, "grad_norm (partial sums of squares)");
		return;
	}
	int pk = pack_of(m, node);
	int nl = pk >= 0 ? pack_leaves(m, pk, leaf, 3, 0) : 0;
	if (nl > 1) {
		bool unit = m->nodes[pk]->rank == 2 && m->train.zero >= 3;
		size_t k = (size_t)snprintf(buf, cap, "%s of %d: ", unit ? "unit" : "bucket", nl);
		for (int i = 0; i < nl && i < 3 && k < cap; i++) {
			const IrNode *l = m->nodes[leaf[i]];
			k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "",
			                      l->name ? l->name : ir_label(m, l));
		}
		if (nl > 3 && k < cap)
			snprintf(buf + k, cap - k, ", ...");
		return;
	}
	ir_value_label(m, node, buf, cap);
}

/* Writes the JSON list of the tensors a packed collective carries (every
 * one, in pack order), or nothing for one tensor. */
static void json_tensors(FILE *out, const IrModule *m, int node)
{
	int pk = pack_of(m, node);
	int nl = pk >= 0 ? pack_leaves(m, pk, NULL, 0, 0) : 0;
	int *leaf = nl > 1 ? malloc(sizeof(int) * (size_t)nl) : NULL;
	if (!leaf)
		return;
	pack_leaves(m, pk, leaf, nl, 0);
	fputs(", \"tensors\": [", out);
	for (int i = 0; i < nl; i++) {
		const IrNode *l = m->nodes[leaf[i]];
		if (i)
			fputs(", ", out);
		json_put_str(out, l->name ? l->name : ir_label(m, l));
	}
	fputc(']', out);
	free(leaf);
}

/* The tensor action i of stage s moves: a recv's is its send's. */
static void action_tensor(const Insp *in, int s, int i, char *buf, size_t cap)
{
	const DtmAction *a = &in->p->stages[s].actions[i];
	const Span *sp = &in->span[s][i];
	if (a->kind == DTM_ACT_RECV && sp->peer_action >= 0 && sp->peer_stage >= 0)
		a = &in->p->stages[sp->peer_stage].actions[sp->peer_action];
	tensor_name(in, a->node, buf, cap);
}

/* ---- memory ---- */

static int64_t align64(int64_t b)
{
	return (b + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
}

bool inspect_node_in_stage(const Insp *in, int i, int s)
{
	return in->mp->nstages <= 1 || ir_stage(in->m, in->m->nodes[i]) == s;
}

/* The bytes of b that lie past its global shape on rank (padded uneven
 * shards: every rank holds ceil(G / parts) rows of a dim of G, the last
 * ones fewer real rows, or none). */
static int64_t padding_bytes(const DtmPlan *p, const DtmBuffer *b, int64_t rank)
{
	int64_t c[DTM_MAX_AXES], real = 1, local = 1;
	coords_of(p, rank, c);
	for (int d = 0; d < b->rank; d++) {
		int64_t idx = 0;
		for (int j = 0; j < b->split_naxes[d]; j++) {
			int a = b->split_axes[d][j];
			idx = idx * p->mesh_sizes[a] + c[a];
		}
		int64_t L = b->shape[d], r = b->global_shape[d] - idx * L;
		real *= r < 0 ? 0 : r > L ? L : r;
		local *= L;
	}
	return local > real ? b->bytes / local * (local - real) : 0;
}

static bool memory(Insp *in, int s)
{
	const DtmPlan *p = in->p;
	const IrModule *m = in->m;
	StageMem *sm = &in->mem[s];
	const int64_t *ab = p->nstages > 1 ? p->stages[s].arena_bytes : p->arena_bytes;
	for (int a = 0; a < DTM_ARENA_COUNT; a++) {
		sm->arena[a] = ab[a];
		sm->peak += ab[a];
	}
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->stage != (p->nstages > 1 ? s : 0))
			continue;
		switch (b->role) {
		case DTM_ROLE_PARAM: sm->params += b->bytes; break;
		case DTM_ROLE_GRAD: sm->grads += b->bytes; break;
		case DTM_ROLE_INPUT: sm->inputs += b->bytes; break;
		case DTM_ROLE_OPT_STATE:
			switch (b->opt_kind) {
			case DTM_OPT_MASTER: sm->master += b->bytes; break;
			case DTM_OPT_M: sm->opt_m += b->bytes; break;
			case DTM_OPT_V: sm->opt_v += b->bytes; break;
			case DTM_OPT_MOM: sm->opt_mom += b->bytes; break;
			case DTM_OPT_NONE: sm->opt_other += b->bytes; break;
			}
			break;
		default: break;
		}
	}
	/* padding, on the rank shown and on the stage's rank with the most:
	 * the model state's buffers with a padded dim, each rank's of them
	 * (most layouts have none, and then no rank is visited) */
	int *padded = malloc(sizeof(int) * (p->nbuffers > 0 ? (size_t)p->nbuffers : 1));
	int npadded = 0;
	if (!padded)
		return false;
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->stage != (p->nstages > 1 ? s : 0) ||
		    (b->role != DTM_ROLE_PARAM && b->role != DTM_ROLE_GRAD &&
		     b->role != DTM_ROLE_OPT_STATE))
			continue;
		bool pads = false;
		for (int d = 0; d < b->rank && !pads; d++) {
			int64_t parts = 1;
			for (int j = 0; j < b->split_naxes[d]; j++)
				parts *= p->mesh_sizes[b->split_axes[d][j]];
			pads = b->shape[d] * parts != b->global_shape[d];
		}
		if (pads)
			padded[npadded++] = i;
	}
	for (int64_t r = 0; npadded && r < in->world; r++) {
		if (stage_of(in, r) != s)
			continue;
		int64_t pad = 0;
		for (int k = 0; k < npadded; k++)
			pad += padding_bytes(p, &p->buffers[padded[k]], r);
		if (r == in->rep[s])
			sm->padding = pad;
		if (pad > sm->padding_max)
			sm->padding_max = pad;
	}
	free(padded);
	/* the activation arena's fullest point, from the planner's liveness
	 * (positions are node ids, inclusive; n means to the end) */
	int n = m->nnodes;
	int64_t *live = calloc((size_t)n + 2, sizeof *live);
	if (!live)
		return false;
	for (int i = 0; i < n; i++) {
		const MemPlanBuf *b = &in->mp->buf[i];
		if (b->owner != i || b->arena != MEMPLAN_ARENA_ACT || !inspect_node_in_stage(in, i, s))
			continue;
		int lo = b->live_from < 0 ? 0 : b->live_from > n ? n : b->live_from;
		int hi = b->live_to < lo ? lo : b->live_to > n ? n : b->live_to;
		live[lo] += align64(b->bytes);
		live[hi + 1] -= align64(b->bytes);
	}
	int64_t run = 0, best = -1;
	for (int i = 0; i <= n; i++) {
		run += live[i];
		if (run > best) {
			best = run;
			sm->act_at = i;
		}
	}
	free(live);
	for (int i = 0; i < n; i++) {
		const MemPlanBuf *b = &in->mp->buf[i];
		if (b->owner != i || b->arena != MEMPLAN_ARENA_ACT || !inspect_node_in_stage(in, i, s) ||
		    b->live_from > sm->act_at || b->live_to < sm->act_at)
			continue;
		const IrNode *nd = m->nodes[i];
		int64_t bytes = align64(b->bytes);
		sm->act_live += bytes;
		if (nd->op == IR_OP_ALL_GATHER && m->nodes[nd->ops[0]]->role == IR_ROLE_PARAM)
			sm->act_gathered += bytes;
		else if ((ir_op_flags(nd->op) & OPF_COLL) || nd->op == IR_OP_RECV)
			sm->act_comm += bytes;
		else
			sm->act_other += bytes;
	}
	sm->inflight = pass_memplan_inflight(m, in->mp, s);
	DtmPlan view;
	rt_plan_stage_view(p, s, &view);
	sm->staging = rt_overlap_staging_bytes(&view, &view.stages[0], &sm->nstaging);
	int64_t need[4];
	rt_gemm_plan_need(&view, false, need); /* as rt_gemm_reserve: on any machine */
	sm->gemm = 4 * (need[0] + need[1] + need[2]);
	sm->gemm_thread = 4 * need[3];
	return true;
}

/* ---- the simulated timeline ---- */

static bool simulate(Insp *in)
{
	const DtmPlan *p = in->p;
	for (int s = 0; s < in->nstages; s++) {
		in->span[s] = arena_alloc(in->a, sizeof(Span) * (size_t)(p->stages[s].nactions + 1));
		if (!in->span[s])
			return false;
	}
	return cost_simulate(p, &in->hw, in->node_size, in->span, &in->makespan) == 0;
}

/* ---- analysis ---- */

/* --hw, else h100 (a calibrated profile only when named: inspect's
 * figures do not change with the machine it runs on) */
static bool load_hw(Insp *in)
{
	return hw_resolve(in->o->hw ? in->o->hw : "h100", "h100", &in->hw, NULL, 0, stderr);
}

static int cmp_buffer_name(const void *a, const void *b)
{
	const DtmBuffer *x = *(const DtmBuffer *const *)a, *y = *(const DtmBuffer *const *)b;
	return strcmp(x->name ? x->name : "", y->name ? y->name : "");
}

/* N of 6N: the params' global elements, a param in several stages' buffers
 * (a tied weight) once; sorted by name, not compared pairwise (a model of
 * 100k params). */
static bool count_params(Insp *in)
{
	const DtmPlan *p = in->p;
	const DtmBuffer **v = arena_alloc(in->a, sizeof *v * (size_t)(p->nbuffers + 1));
	if (!v)
		return false;
	int n = 0;
	for (int i = 0; i < p->nbuffers; i++)
		if (p->buffers[i].role == DTM_ROLE_PARAM)
			v[n++] = &p->buffers[i];
	qsort(v, (size_t)n, sizeof *v, cmp_buffer_name);
	for (int i = 0; i < n; i++)
		if (i == 0 || !v[i]->name || !v[i - 1]->name || strcmp(v[i]->name, v[i - 1]->name))
			in->nparams += (double)rt_global_numel(v[i]);
	return true;
}

static bool analyse(Insp *in)
{
	const DtmPlan *p = in->p;
	const IrModule *m = in->m;
	in->nstages = p->nstages;
	in->pp = -1;
	in->world = 1;
	for (int a = 0; a < p->mesh_naxes; a++) {
		in->world *= p->mesh_sizes[a];
		if (p->nstages > 1 && p->mesh_sizes[a] == p->nstages && a == m->pp_axis)
			in->pp = a;
	}
	if (in->o->rank < 0 || in->o->rank >= in->world) {
		fprintf(stderr, "dtmc: error: --rank %" PRId64 ": the mesh has ranks 0..%" PRId64 "\n",
		        in->o->rank, in->world - 1);
		in->reported = true;
		return false;
	}
	if (cost_plan_step(p, &in->hw, in->o->nodes, &in->cost) != 0) {
		fprintf(stderr, "dtmc: error: the cost model rejected the plan: %s\n", in->cost.err);
		in->reported = true;
		return false;
	}
	in->node_size = in->cost.node_size;
	in->rep = arena_alloc(in->a, sizeof(int64_t) * (size_t)in->nstages);
	in->mem = arena_alloc(in->a, sizeof(StageMem) * (size_t)in->nstages);
	in->span = arena_alloc(in->a, sizeof(Span *) * (size_t)in->nstages);
	if (!in->rep || !in->mem || !in->span)
		return false;
	for (int s = 0; s < in->nstages; s++) {
		int64_t c[DTM_MAX_AXES];
		coords_of(p, in->o->rank, c);
		if (in->pp >= 0)
			c[in->pp] = s;
		in->rep[s] = rank_of(p, c);
	}
	for (int s = 0; s < in->nstages; s++)
		if (!memory(in, s))
			return false;
	if (!simulate(in))
		return false;
	/* the llm.c FLOPs per token: N params (a tied weight counted once),
	 * L attention layers and C their width, T the sequence; L and C are
	 * the model's, counted before the passes (drv_load) */
	if (!count_params(in))
		return false;
	in->layers = m->attn_layers > 0 ? m->attn_layers : 0;
	in->channels = m->attn_width > 0 ? m->attn_width : 0;
	in->seq = p->train.seq;
	in->flops_per_token = cost_flops_per_token(in->nparams, in->layers, in->channels, in->seq);
	in->mfu = cost_mfu(in->flops_per_token, in->cost.tokens_per_s, in->world,
	                   hw_peak_flops(&in->hw, p->train.precision));
	return true;
}

/* ---- text ---- */

static char *fmt_time(char *buf, size_t cap, double s)
{
	if (s <= 0)
		snprintf(buf, cap, "0");
	else if (s < 1e-3)
		snprintf(buf, cap, "%.3g us", s * 1e6);
	else if (s < 1)
		snprintf(buf, cap, "%.3g ms", s * 1e3);
	else
		snprintf(buf, cap, "%.3g s", s);
	return buf;
}

/* "1,234,567 B (1.18 MiB)"; the part in parentheses from 1 MiB up. */
static char *fmt_bytes(char *buf, size_t cap, double b)
{
	char c[32];
	int64_t v = (int64_t)llround(b);
	if (b < 1024.0 * 1024)
		snprintf(buf, cap, "%s B", report_count(c, v));
	else if (b < 1024.0 * 1024 * 1024)
		snprintf(buf, cap, "%s B (%.2f MiB)", report_count(c, v), b / (1024.0 * 1024));
	else
		snprintf(buf, cap, "%s B (%.2f GiB)", report_count(c, v), b / (1024.0 * 1024 * 1024));
	return buf;
}

static void text_header(FILE *out, const Insp *in)
{
	const DtmPlan *p = in->p;
	const IrTrain *t = &in->m->train;
	const char *sched = ir_train_word(IR_TRAIN_SCHEDULE, (int)t->schedule);
	char c[32];
	fprintf(out, "model %s: mesh ", p->model ? p->model : "?");
	for (int a = 0; a < p->mesh_naxes; a++)
		fprintf(out, "%s%s=%" PRId64, a ? " x " : "", p->mesh_names[a], p->mesh_sizes[a]);
	fprintf(out, " (%" PRId64 " rank%s), %d stage%s\n", in->world, in->world == 1 ? "" : "s",
	        in->nstages, in->nstages == 1 ? "" : "s");
	/* the stage that holds: zero N over axes of one rank is zero 0 */
	int zero = pass_zero_axes(in->m) ? t->zero : 0;
	fprintf(out, "train: %s, zero %d", rt_optimizer_name(p->train.optimizer), zero);
	if (zero != t->zero)
		fprintf(out, " (zero %d has no effect)", t->zero);
	fprintf(out, ", %d micro-batch%s", p->train.microbatches,
	        p->train.microbatches == 1 ? "" : "es");
	if (in->nstages > 1)
		fprintf(out, ", schedule %s", sched ? sched : "-");
	fprintf(out, ", precision %s", dtype_name(p->train.precision));
	/* the rest of the mixed-precision policy where it is not all f32 */
	if (t->precision != IR_F32 || t->reduce_dtype != IR_F32 || t->master_dtype != IR_F32)
		fprintf(out, " (gradients %s, master %s)", ir_dtype_name(t->reduce_dtype),
		        t->master_dtype == t->precision ? "none" : ir_dtype_name(t->master_dtype));
	fprintf(out, ", %s %s per step\n", report_count(c, p->train.tokens_per_step),
	        p->train.data_kind == DTM_DATA_TOKENS ? "tokens" : "samples");
	fprintf(out, "parameters: %s\n", report_count(c, (int64_t)in->nparams));
	int64_t nodes = (in->world + in->node_size - 1) / in->node_size;
	fprintf(out, "hardware: %s, %" PRId64 " rank%s per node, %" PRId64 " node%s\n", in->hw.name,
	        in->node_size, in->node_size == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s");
}

static void text_schedule(FILE *out, const Insp *in, int s)
{
	const DtmPlan *p = in->p;
	const DtmStage *st = &p->stages[s];
	int64_t r = in->rep[s];
	char co[256], ax[64], grp[128], tb[32], tn[512], c1[32], c2[32];
	inspect_coords_text(p, r, co, sizeof co);
	fprintf(out, "\nstage %d, rank %" PRId64 " (%s): communication, in order\n", s, r, co);
	fprintf(out, "  %5s  %-14s %-8s %-16s %-5s %12s %12s %9s  %-9s %3s  %s\n", "#", "kind",
	        "axes", "group", "dtype", "bytes", "send/rank", "time", "phase", "mb", "tensor");
	int count = 0;
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (!is_comm(a))
			continue;
		count++;
		double send;
		double sec = cost_action_seconds(p, &in->hw, in->node_size, a, &send);
		inspect_axes_text(p, a->axes, ax, sizeof ax);
		if (a->kind == DTM_ACT_COLL)
			inspect_group_text(p, r, a->axes, grp, sizeof grp);
		else
			snprintf(grp, sizeof grp, "%s %" PRId64, a->kind == DTM_ACT_SEND ? "to" : "from",
			         inspect_p2p_peer(p, r, a));
		action_tensor(in, s, i, tn, sizeof tn);
		fprintf(out, "  %5d  %-14s %-8s %-16s %-5s %12s %12s %9s  %-9s %3d  %s\n", i,
		        cost_comm_name(comm_kind(a)), ax, grp,
		        dtype_name(a->nargs > 0 ? p->buffers[a->args[0]].dtype : DTM_F32),
		        report_count(c1, a->bytes), report_count(c2, (int64_t)llround(send)),
		        fmt_time(tb, sizeof tb, sec), phase_name(a->phase), a->microbatch, tn);
	}
	if (!count)
		fputs("  (none)\n", out);
}

static void text_totals(FILE *out, const Insp *in, int s)
{
	const DtmPlan *p = in->p;
	const CostStage *cs = &in->cost.stages[s];
	char ax[64], b[64], tb[32];
	fputs("  per step, send-side bytes per rank (ring) and time:\n", out);
	for (uint32_t k = 0; k < COST_AXES_MASKS; k++) {
		if (!cs->by_axes[k].count)
			continue;
		inspect_axes_text(p, k, ax, sizeof ax);
		fprintf(out, "    axes %-14s %4d ops  %-28s %s\n", ax, cs->by_axes[k].count,
		        fmt_bytes(b, sizeof b, cs->by_axes[k].bytes),
		        fmt_time(tb, sizeof tb, cs->by_axes[k].seconds));
	}
	for (int k = 0; k < COST_NCOMM; k++) {
		if (!cs->by_kind[k].count)
			continue;
		fprintf(out, "    %-19s %4d ops  %-28s %s\n", cost_comm_name((CostComm)k),
		        cs->by_kind[k].count, fmt_bytes(b, sizeof b, cs->by_kind[k].bytes),
		        fmt_time(tb, sizeof tb, cs->by_kind[k].seconds));
	}
	fprintf(out, "    %-19s %4s      %-28s %s\n", "total", "", fmt_bytes(b, sizeof b, cs->send_bytes),
	        fmt_time(tb, sizeof tb, cs->comm_s));
}

static void text_memory(FILE *out, const Insp *in, int s)
{
	const StageMem *sm = &in->mem[s];
	char b[64];
	int64_t opt = sm->opt_m + sm->opt_v + sm->opt_mom + sm->opt_other;
	fputs("  memory per rank:\n", out);
	fprintf(out, "    %-26s %s\n", "params", fmt_bytes(b, sizeof b, (double)sm->params));
	fprintf(out, "    %-26s %s\n", "gradients", fmt_bytes(b, sizeof b, (double)sm->grads));
	fprintf(out, "    %-26s %s\n", "master weights", fmt_bytes(b, sizeof b, (double)sm->master));
	fprintf(out, "    %-26s %s", "optimizer state", fmt_bytes(b, sizeof b, (double)opt));
	const char *parts[] = {"m", "v", "momentum", "other"};
	const int64_t bytes[] = {sm->opt_m, sm->opt_v, sm->opt_mom, sm->opt_other};
	const char *sep = " (";
	for (int k = 0; k < 4; k++) {
		if (!bytes[k])
			continue;
		fprintf(out, "%s%s %s", sep, parts[k], fmt_bytes(b, sizeof b, (double)bytes[k]));
		sep = ", ";
	}
	fputs(opt ? ")\n" : "\n", out);
	if (sm->padding_max) {
		char b2[64];
		fprintf(out, "    %-26s %s (at most %s on a rank: uneven shards padded to equal "
		        "size, in the above)\n", "padding", fmt_bytes(b, sizeof b, (double)sm->padding),
		        fmt_bytes(b2, sizeof b2, (double)sm->padding_max));
	}
	fprintf(out, "    %-26s %s\n", "inputs", fmt_bytes(b, sizeof b, (double)sm->inputs));
	fprintf(out, "    %-26s %s", "activations (arena)",
	        fmt_bytes(b, sizeof b, (double)sm->arena[DTM_ARENA_ACT]));
	if (sm->inflight > 0)
		fprintf(out, ", %d micro-batch%s in flight", sm->inflight,
		        sm->inflight == 1 ? "" : "es");
	fputc('\n', out);
	fprintf(out, "      %-24s %s\n", "live at its peak", fmt_bytes(b, sizeof b, (double)sm->act_live));
	fprintf(out, "      %-24s %s\n", "  activations", fmt_bytes(b, sizeof b, (double)sm->act_other));
	fprintf(out, "      %-24s %s\n", "  gathered param units",
	        fmt_bytes(b, sizeof b, (double)sm->act_gathered));
	fprintf(out, "      %-24s %s\n", "  communication results",
	        fmt_bytes(b, sizeof b, (double)sm->act_comm));
	fprintf(out, "    %-26s %s", "arenas", "");
	for (int a = 0; a < DTM_ARENA_COUNT; a++) {
		char c[32];
		fprintf(out, "%s%s %s", a ? ", " : "", arena_name(a), report_count(c, sm->arena[a]));
	}
	fputc('\n', out);
	fprintf(out, "    %-26s %s\n", "peak (allocated)", fmt_bytes(b, sizeof b, (double)sm->peak));
	fprintf(out, "    %-26s %s in %d cop%s (outside the arenas)\n", "overlap staging",
	        fmt_bytes(b, sizeof b, (double)sm->staging), sm->nstaging,
	        sm->nstaging == 1 ? "y" : "ies");
	if (sm->gemm || sm->gemm_thread) {
		char b2[64];
		fprintf(out, "    %-26s %s + %s per thread (outside the arenas: 16-bit GEMMs in f32 "
		        "on this CPU)\n", "GEMM staging", fmt_bytes(b, sizeof b, (double)sm->gemm),
		        fmt_bytes(b2, sizeof b2, (double)sm->gemm_thread));
	}
}

static void text_step(FILE *out, const Insp *in)
{
	const CostReport *c = &in->cost;
	char t1[32], t2[32], t3[32], t4[32];
	fprintf(out, "\nstep time on %s (cost model):\n", in->hw.name);
	for (int s = 0; s < in->nstages; s++) {
		const CostStage *cs = &c->stages[s];
		fprintf(out, "  stage %d: compute %s, communication %s (exposed %s), stage %s\n", s,
		        fmt_time(t1, sizeof t1, cs->compute_s), fmt_time(t2, sizeof t2, cs->comm_s),
		        fmt_time(t3, sizeof t3, cs->exposed_comm_s), fmt_time(t4, sizeof t4, cs->time_s));
	}
	fprintf(out, "  step %s, bubble %.1f%%", fmt_time(t1, sizeof t1, c->step_s), 100 * c->bubble);
	if (in->nstages > 1)
		fprintf(out, " (simulated pipeline: %s)", fmt_time(t2, sizeof t2, in->makespan));
	fputc('\n', out);
	if (c->oversub > 1)
		fprintf(out, "  this node's ranks share its %d cores: compute %.2fx slower (ranks x "
		             "threads over cores, times the share of the step the stages compute)\n",
		        in->hw.cores, c->oversub);
	fprintf(out, "  %.4g %s/s; %.4g FLOPs per token (6N + 6LCT, N %.0f, L %" PRId64
	             ", C %" PRId64 ", T %" PRId64 "); MFU %.2f%%, HFU %.2f%%\n",
	        c->tokens_per_s, in->p->train.data_kind == DTM_DATA_TOKENS ? "tokens" : "samples",
	        in->flops_per_token, in->nparams, in->layers, in->channels, in->seq,
	        100 * in->mfu, 100 * c->hfu);
}

/* A mixture of experts' routing sites on stage s (moe_slot nodes with a
 * stats site; micro-batch copies of one site add up): what the plan fixes
 * of them.  The load and drops are the data's: the run's log (`moe`). */
typedef struct RouteSite {
	int64_t site, experts, capacity, groups, tokens, choices;
	const char *name;
} RouteSite;

static int route_sites(const Insp *in, int s, RouteSite *out, int cap)
{
	int n = 0;
	for (int i = 0; i < in->m->nnodes; i++) {
		const IrNode *x = in->m->nodes[i];
		if (x->op != IR_OP_MOE_SLOT || !inspect_node_in_stage(in, i, s))
			continue;
		const IrAttrRoute *ra = ir_attr_route(x);
		if (ra->stats < 1 || x->rank < 2)
			continue;
		int64_t S = x->shape[x->rank - 2], k = x->shape[x->rank - 1];
		int64_t g = S > 0 && k > 0 ? ir_node_numel(x) / (S * k) : 0;
		int j = 0;
		while (j < n && out[j].site != ra->stats)
			j++;
		if (j == n) {
			if (n == cap)
				continue;
			out[n++] = (RouteSite){.site = ra->stats, .experts = ra->n,
			                       .capacity = ra->capacity, .tokens = S, .choices = k,
			                       .name = x->name ? x->name : "?"};
		}
		out[j].groups += g;
	}
	return n;
}

#define MAX_ROUTE_SITES 256

static void text_routing(FILE *out, const Insp *in, int s)
{
	RouteSite rs[MAX_ROUTE_SITES];
	int n = route_sites(in, s, rs, MAX_ROUTE_SITES);
	if (!n)
		return;
	fputs("  routing (mixture of experts), per step on this rank; each expert's load and drops\n"
	      "  are the data's, in the run's log (\"moe\"):\n", out);
	fprintf(out, "    %4s  %-18s %7s %8s %6s %6s %7s %12s %15s\n", "site", "layer", "experts",
	        "capacity", "groups", "tokens", "choices", "slots/expert", "capacity factor");
	for (int j = 0; j < n; j++) {
		const RouteSite *r = &rs[j];
		double cf = (double)(r->capacity * r->experts) / (double)(r->tokens * r->choices);
		fprintf(out, "    %4" PRId64 "  %-18s %7" PRId64 " %8" PRId64 " %6" PRId64 " %6" PRId64
		             " %7" PRId64 " %12" PRId64 " %15.3g\n", r->site, r->name, r->experts,
		        r->capacity, r->groups, r->tokens, r->choices, r->groups * r->capacity, cf);
	}
}

static void write_text(FILE *out, const Insp *in)
{
	text_header(out, in);
	for (int s = 0; s < in->nstages; s++) {
		text_schedule(out, in, s);
		text_totals(out, in, s);
		text_routing(out, in, s);
		text_memory(out, in, s);
	}
	text_step(out, in);
}

/* ---- JSON ---- */

static void json_num(FILE *out, double v)
{
	if (!isfinite(v))
		v = 0;
	fprintf(out, "%.9g", v);
}

static void json_axes(FILE *out, const DtmPlan *p, uint32_t axes)
{
	fputc('[', out);
	bool first = true;
	for (int a = 0; a < p->mesh_naxes; a++) {
		if (!(axes >> a & 1))
			continue;
		if (!first)
			fputs(", ", out);
		json_put_str(out, p->mesh_names[a]);
		first = false;
	}
	fputc(']', out);
}

static void json_tally(FILE *out, const CostTally *t)
{
	fprintf(out, "\"count\": %d, \"send_bytes\": ", t->count);
	json_num(out, t->bytes);
	fputs(", \"seconds\": ", out);
	json_num(out, t->seconds);
}

static void json_stage(FILE *out, const Insp *in, int s)
{
	const DtmPlan *p = in->p;
	const DtmStage *st = &p->stages[s];
	const StageMem *sm = &in->mem[s];
	const CostStage *cs = &in->cost.stages[s];
	int64_t r = in->rep[s], c[DTM_MAX_AXES];
	char tn[512];
	coords_of(p, r, c);
	fprintf(out, "    {\"stage\": %d, \"rank\": %" PRId64 ", \"coords\": {", s, r);
	for (int a = 0; a < p->mesh_naxes; a++) {
		fputs(a ? ", " : "", out);
		json_put_str(out, p->mesh_names[a]);
		fprintf(out, ": %" PRId64, c[a]);
	}
	fputs("},\n     \"comm\": [", out);
	bool first = true;
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (!is_comm(a))
			continue;
		double send, sec = cost_action_seconds(p, &in->hw, in->node_size, a, &send);
		fprintf(out, "%s\n      {\"index\": %d, \"kind\": \"%s\", \"axes\": ", first ? "" : ",", i,
		        cost_comm_name(comm_kind(a)));
		first = false;
		json_axes(out, p, a->axes);
		if (a->kind == DTM_ACT_COLL) {
			int64_t n = cost_group_size(p->mesh_naxes, p->mesh_sizes, a->axes);
			fputs(", \"group\": [", out);
			for (int64_t k = 0; k < n; k++)
				fprintf(out, "%s%" PRId64, k ? ", " : "", group_member(p, r, a->axes, k, NULL));
			fputc(']', out);
		} else {
			fprintf(out, ", \"peer\": %" PRId64, inspect_p2p_peer(p, r, a));
		}
		action_tensor(in, s, i, tn, sizeof tn);
		fprintf(out, ", \"dtype\": \"%s\", \"bytes\": %" PRId64 ", \"send_bytes\": ",
		        dtype_name(a->nargs > 0 ? p->buffers[a->args[0]].dtype : DTM_F32), a->bytes);
		json_num(out, send);
		fputs(", \"seconds\": ", out);
		json_num(out, sec);
		fputs(", \"tensor\": ", out);
		json_put_str(out, tn);
		json_tensors(out, in->m, a->node);
		fprintf(out, ", \"phase\": \"%s\", \"microbatch\": %d, \"node\": %d, \"label\": ",
		        phase_name(a->phase), a->microbatch, a->node);
		json_put_str(out, a->label);
		fputc('}', out);
	}
	fputs("],\n     \"totals\": {\"by_axes\": [", out);
	first = true;
	for (uint32_t k = 0; k < COST_AXES_MASKS; k++) {
		if (!cs->by_axes[k].count)
			continue;
		fprintf(out, "%s{\"axes\": ", first ? "" : ", ");
		first = false;
		json_axes(out, p, k);
		fputs(", ", out);
		json_tally(out, &cs->by_axes[k]);
		fputc('}', out);
	}
	fputs("], \"by_kind\": [", out);
	first = true;
	for (int k = 0; k < COST_NCOMM; k++) {
		if (!cs->by_kind[k].count)
			continue;
		fprintf(out, "%s{\"kind\": \"%s\", ", first ? "" : ", ", cost_comm_name((CostComm)k));
		first = false;
		json_tally(out, &cs->by_kind[k]);
		fputc('}', out);
	}
	fputs("], \"send_bytes\": ", out);
	json_num(out, cs->send_bytes);
	fputs(", \"seconds\": ", out);
	json_num(out, cs->comm_s);
	fputs("},\n     \"memory\": {\"arenas\": {", out);
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		fprintf(out, "%s\"%s\": %" PRId64, a ? ", " : "", arena_name(a), sm->arena[a]);
	fprintf(out, "}, \"peak_bytes\": %" PRId64 ", \"params\": %" PRId64 ", \"grads\": %" PRId64
	             ", \"master\": %" PRId64 ", \"optimizer_state\": %" PRId64 ", \"opt_m\": %" PRId64
	             ", \"opt_v\": %" PRId64 ", \"opt_momentum\": %" PRId64 ", \"opt_other\": %" PRId64
	             ", \"padding\": %" PRId64 ", \"padding_max\": %" PRId64
	             ", \"inputs\": %" PRId64 ",\n      \"activations\": {\"arena\": %" PRId64
	             ", \"live_at_peak\": %" PRId64 ", \"values\": %" PRId64
	             ", \"gathered_units\": %" PRId64 ", \"comm_results\": %" PRId64
	             ", \"microbatches_in_flight\": %d}, \"staging_bytes\": %" PRId64
	             ", \"staging_copies\": %d, \"gemm_staging_bytes\": %" PRId64
	             ", \"gemm_staging_thread_bytes\": %" PRId64 "},\n",
	        sm->peak, sm->params, sm->grads, sm->master,
	        sm->opt_m + sm->opt_v + sm->opt_mom + sm->opt_other, sm->opt_m, sm->opt_v, sm->opt_mom,
	        sm->opt_other, sm->padding, sm->padding_max, sm->inputs, sm->arena[DTM_ARENA_ACT], sm->act_live, sm->act_other,
	        sm->act_gathered, sm->act_comm, sm->inflight > 0 ? sm->inflight : 0, sm->staging,
	        sm->nstaging, sm->gemm, sm->gemm_thread);
	RouteSite rs[MAX_ROUTE_SITES];
	int nr = route_sites(in, s, rs, MAX_ROUTE_SITES);
	fputs("     \"routing\": [", out);
	for (int j = 0; j < nr; j++) {
		fprintf(out, "%s{\"site\": %" PRId64 ", \"layer\": ", j ? ", " : "", rs[j].site);
		json_put_str(out, rs[j].name);
		fprintf(out, ", \"experts\": %" PRId64 ", \"capacity\": %" PRId64 ", \"groups\": %" PRId64
		             ", \"tokens\": %" PRId64 ", \"choices\": %" PRId64 "}",
		        rs[j].experts, rs[j].capacity, rs[j].groups, rs[j].tokens, rs[j].choices);
	}
	fputs("],\n", out);
	fputs("     \"time\": {\"compute_s\": ", out);
	json_num(out, cs->compute_s);
	fputs(", \"comm_s\": ", out);
	json_num(out, cs->comm_s);
	fputs(", \"exposed_comm_s\": ", out);
	json_num(out, cs->exposed_comm_s);
	fputs(", \"time_s\": ", out);
	json_num(out, cs->time_s);
	fputs(", \"flops\": ", out);
	json_num(out, cs->flops);
	fputs("}}", out);
}

static void write_json(FILE *out, const Insp *in)
{
	const DtmPlan *p = in->p;
	const IrTrain *t = &in->m->train;
	const CostReport *c = &in->cost;
	fputs("{\"model\": ", out);
	json_put_str(out, p->model);
	fputs(", \"mesh\": {", out);
	for (int a = 0; a < p->mesh_naxes; a++) {
		fputs(a ? ", " : "", out);
		json_put_str(out, p->mesh_names[a]);
		fprintf(out, ": %" PRId64, p->mesh_sizes[a]);
	}
	fprintf(out, "}, \"world\": %" PRId64 ", \"nstages\": %d,\n \"train\": {\"optimizer\": ",
	        in->world, in->nstages);
	json_put_str(out, rt_optimizer_name(p->train.optimizer));
	/* "zero": the stage that holds; "zero_setting": the one asked for */
	fprintf(out, ", \"zero\": %d, \"zero_setting\": %d, \"microbatches\": %d, \"schedule\": ",
	        pass_zero_axes(in->m) ? t->zero : 0, t->zero, p->train.microbatches);
	const char *sched = ir_train_word(IR_TRAIN_SCHEDULE, (int)t->schedule);
	json_put_str(out, sched ? sched : "");
	fprintf(out,
	        ", \"virtual_stages\": %" PRId64 ", \"precision\": \"%s\", "
	        "\"reduce_dtype\": \"%s\", \"master_dtype\": \"%s\", "
	        "\"tokens_per_step\": %" PRId64 "},\n \"params\": ",
	        t->virtual_stages, dtype_name(p->train.precision), ir_dtype_name(t->reduce_dtype),
	        ir_dtype_name(t->master_dtype), p->train.tokens_per_step);
	/* a count, exact (json_num's 9 digits would round 12,853,386,240) */
	fprintf(out, "%.0f", isfinite(in->nparams) ? in->nparams : 0);
	fputs(", \"hw\": {\"name\": ", out);
	json_put_str(out, in->hw.name);
	fprintf(out, ", \"ranks_per_node\": %" PRId64 "},\n \"stages\": [\n", in->node_size);
	for (int s = 0; s < in->nstages; s++) {
		json_stage(out, in, s);
		fputs(s + 1 < in->nstages ? ",\n" : "\n", out);
	}
	fputs(" ],\n \"step\": {\"step_s\": ", out);
	json_num(out, c->step_s);
	fputs(", \"bubble\": ", out);
	json_num(out, c->bubble);
	fputs(", \"simulated_s\": ", out);
	json_num(out, in->makespan);
	fputs(", \"tokens_per_s\": ", out);
	json_num(out, c->tokens_per_s);
	fputs(", \"flops_per_token\": ", out);
	json_num(out, in->flops_per_token);
	fprintf(out, ", \"layers\": %" PRId64 ", \"channels\": %" PRId64 ", \"seq\": %" PRId64
	             ", \"mfu\": ",
	        in->layers, in->channels, in->seq);
	json_num(out, in->mfu);
	fputs(", \"hfu\": ", out);
	json_num(out, c->hfu);
	fputs("}}\n", out);
}

/* ---- Chrome trace ---- */

static void trace_thread(FILE *out, int64_t rank, int stream, const char *name, bool *first)
{
	fprintf(out, "%s\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %" PRId64
	             ", \"args\": {\"name\": ",
	        *first ? "" : ",", rank * 2 + stream);
	json_put_str(out, name);
	fprintf(out, "}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %" PRId64
	             ", \"args\": {\"sort_index\": %" PRId64 "}}",
	        rank * 2 + stream, rank * 2 + stream);
	*first = false;
}

static bool write_trace(const Insp *in, const char *path)
{
	const DtmPlan *p = in->p;
	FILE *out = fopen(path, "w");
	if (!out) {
		fprintf(stderr, "dtmc: error: cannot write '%s': %s\n", path, strerror(errno));
		return false;
	}
	bool all = in->world <= INSPECT_TRACE_MAX_RANKS, first = true;
	fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"model\": ", out);
	json_put_str(out, p->model);
	fputs(", \"hw\": ", out);
	json_put_str(out, in->hw.name);
	fputs(", \"note\": ", out);
	json_put_str(out, all ? "the cost model's simulated timeline: one track per rank and stream"
	                  : "the cost model's simulated timeline: the first rank of each stage");
	fputs("},\n\"traceEvents\": [", out);
	fprintf(out, "\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": ");
	json_put_str(out, p->model);
	fputs("}}", out);
	first = false;
	for (int64_t r = 0; r < in->world; r++) {
		int s = stage_of(in, r);
		if (!all && r != in->rep[s])
			continue;
		char co[256], name[320];
		inspect_coords_text(p, r, co, sizeof co);
		snprintf(name, sizeof name, "rank %" PRId64 " (%s) compute", r, co);
		trace_thread(out, r, 0, name, &first);
		snprintf(name, sizeof name, "rank %" PRId64 " (%s) communication", r, co);
		trace_thread(out, r, 1, name, &first);
		const DtmStage *st = &p->stages[s];
		for (int i = 0; i < st->nactions; i++) {
			const DtmAction *a = &st->actions[i];
			const Span *sp = &in->span[s][i];
			if (a->kind == DTM_ACT_WAIT)
				continue;
			int stream = is_comm(a) && a->stream == 1 ? 1 : 0;
			fputs(",\n{\"name\": ", out);
			json_put_str(out, a->label ? a->label : "?");
			fprintf(out, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %" PRId64
			             ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"phase\": \"%s\", "
			             "\"microbatch\": %d, \"action\": %d",
			        is_comm(a) ? cost_comm_name(comm_kind(a))
			                   : a->kind == DTM_ACT_GEMM ? "gemm" : "kernel",
			        r * 2 + stream, sp->t0 * 1e6, (sp->t1 - sp->t0) * 1e6, phase_name(a->phase),
			        a->microbatch, i);
			if (is_comm(a))
				fprintf(out, ", \"bytes\": %" PRId64, a->bytes);
			if (sp->cold_bytes > 0) /* cost.c cold_bytes */
				fprintf(out, ", \"cold_bytes\": %.0f", sp->cold_bytes);
			if (a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV)
				fprintf(out, ", \"peer\": %" PRId64, inspect_p2p_peer(p, r, a));
			fputs("}}", out);
		}
	}
	fputs("\n]}\n", out);
	if (fclose(out) != 0) {
		fprintf(stderr, "dtmc: error: cannot write '%s'\n", path);
		return false;
	}
	return true;
}

/* ---- the command ---- */

int inspect_main(const InspectOptions *o)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	Insp in = {.o = o, .a = &a, .d = &d};
	DrvProfile prof = {0};
	DrvOptions dopt = {.lower = o->lower, .import_mlir = mlir_import_file,
	                   .profile = o->time_passes ? &prof : NULL};
	bool ok = load_hw(&in);
	if (ok) {
		Compiled c;
		ok = drv_compile(&c, &a, &d, o->file, &dopt) && d.nerr == 0;
		/* the plan, and its fuse and memory plans for liveness and the
		 * micro-batches in flight */
		in.m = c.m;
		in.p = c.plan;
		in.fp = c.an.fuse;
		in.mp = c.an.mem;
	}
	if (ok && !analyse(&in)) {
		if (!d.nerr && !in.reported)
			fputs("dtmc: error: out of memory\n", stderr);
		ok = false;
	}
	/* a bad --dot-scope before any report */
	if (ok && o->dot)
		ok = inspect_dot_scope(&in);
	if (ok) {
		if (o->json)
			write_json(stdout, &in);
		else
			write_text(stdout, &in);
		if (fflush(stdout) != 0 || ferror(stdout)) {
			fputs("dtmc: error: cannot write to standard output\n", stderr);
			ok = false;
		}
	}
	if (ok && o->trace)
		ok = write_trace(&in, o->trace);
	if (ok && o->dot)
		ok = inspect_write_dot(&in, o->dot);
	if (d.nerr)
		diag_summary(&d);
	if (o->time_passes)
		drv_profile_print(stderr, &prof, 0, NULL);
	cost_report_free(&in.cost);
	arena_free(&a);
	return ok ? 0 : 1;
}
