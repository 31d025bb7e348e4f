/* passes.c - the pipeline of IR -> IR passes, in order.
 *
 * The registry is one table.  Each pass consumes a verified module and
 * leaves one; pass_run_until runs the verifier after every pass, so a pass
 * that breaks an invariant is named in the message.  "lower" is not a pass:
 * it names the module as lowering left it, before any pass ran.
 *
 * pass_run is the pass manager: stop-after, verify-each (on unless the
 * caller trusts its input), a time per pass, and the analyses at the end
 * (fuse, memplan) kept for the caller.  driver/driver.c calls it for every
 * command that compiles.
 */
#include "passes/passes.h"
#include "passes/accumulate.h"
#include "passes/attn_stats.h"
#include "passes/autodiff.h"
#include "passes/bucket.h"
#include "passes/coalesce.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/microbatch.h"
#include "passes/optim.h"
#include "passes/partition.h"
#include "passes/reshard.h"
#include "passes/precision.h"
#include "passes/pipeline.h"
#include "passes/propagate.h"
#include "passes/recompute.h"
#include "passes/stages.h"
#include "passes/fsdp_units.h"
#include "passes/zero.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static bool run_verify(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	return ir_verify(m, d, "verify");
}

/* fuse and memplan are analyses: they leave the IR as it is and keep their
 * plans in the run's PassAnalyses, which the plan builder and the emitters
 * read (see fuse.h).  Run on IR text printed after fuse, memplan computes
 * the fuse plan it needs itself. */
static Arena *analysis_arena(const IrModule *m, PassAnalyses *an)
{
	return an->arena ? an->arena : m->arena;
}

static bool run_fuse(const IrModule *m, PassAnalyses *an, Diag *d, const PassOptions *opt)
{
	(void)opt;
	FusePlan *fp = arena_alloc(analysis_arena(m, an), sizeof *fp);
	if (!fp) {
		diag_error(d, (SrcLoc){0}, "fuse: out of memory");
		return false;
	}
	if (!pass_fuse_plan(m, analysis_arena(m, an), d, fp))
		return false;
	an->fuse = fp;
	return true;
}

static bool run_memplan(const IrModule *m, PassAnalyses *an, Diag *d, const PassOptions *opt)
{
	if (!an->fuse && !run_fuse(m, an, d, opt))
		return false;
	MemPlan *mp = arena_alloc(analysis_arena(m, an), sizeof *mp);
	if (!mp) {
		diag_error(d, (SrcLoc){0}, "memplan: out of memory");
		return false;
	}
	if (!pass_memplan(m, an->fuse, analysis_arena(m, an), d, mp))
		return false;
	an->mem = mp;
	if (opt->verbose) {
		for (int k = 0; k < MEMPLAN_ARENA_COUNT; k++)
			fprintf(stderr, "dtmc: memplan: arena %-5s %lld bytes\n",
			        pass_memplan_arena_name(k), (long long)mp->arena_bytes[k]);
		for (int s = 0; mp->nstages > 1 && s < mp->nstages; s++) {
			fprintf(stderr, "dtmc: memplan: stage %d:", s);
			for (int k = 0; k < MEMPLAN_ARENA_COUNT; k++)
				fprintf(stderr, " %s %lld", pass_memplan_arena_name(k),
				        (long long)mp->stage_arena_bytes[s][k]);
			fprintf(stderr, " bytes; %d micro-batches in flight\n",
			        pass_memplan_inflight(m, mp, s));
		}
	}
	return true;
}

bool pass_analyses(const IrModule *m, PassAnalyses *an, Diag *d)
{
	PassOptions quiet = {0};
	return (an->fuse || run_fuse(m, an, d, &quiet)) && (an->mem || run_memplan(m, an, d, &quiet));
}

#define R(f) PASS_READS(IR_TRAIN_##f)

/* The pipeline.  `reads`: the train settings each pass's output depends on
 * (passes.h); keep them exact, `dtmc sweep` shares work by them. */
static const Pass passes[] = {
	/* pipeline model chunks, carried by everything derived after */
	{.name = "stages", .run = pass_stages, .reads = PASS_READS_CHUNKS},
	/* gradient accumulation: the forward unrolled over the micro-batches
	 * (microbatch.c), so everything after sees one program */
	{.name = "microbatch", .run = pass_microbatch, .reads = R(MICROBATCHES)},
	/* precision before autodiff so gradients come out in the compute
	 * dtype (a param's in reduce_dtype, autodiff.c); optim after it,
	 * consuming the gradients (see precision.c) */
	{.name = "precision", .run = pass_precision, .reads = R(PRECISION)},
	/* with pp > 1 and micro-batches, the gradient sums deferred; params'
	 * gradients summed in reduce_dtype */
	{.name = "autodiff", .run = pass_autodiff, .reads = R(MICROBATCHES) | R(REDUCE_DTYPE)},
	{.name = "optim", .run = pass_optim,
	 .reads = R(OPTIMIZER) | R(BETA1) | R(BETA2) | R(EPS) | R(WEIGHT_DECAY) | R(CLIP) |
	          R(MOMENTUM) | R(NESTEROV) | R(MASTER_DTYPE)},
	/* every value gets a placement; partition consumes them */
	{.name = "propagate", .run = pass_propagate,
	 .reads = R(SEQUENCE_PARALLEL) | R(UNEVEN_SHARDS)},
	/* activation checkpointing: clones of each block's forward in its
	 * backward, placed as the originals (recompute.c) */
	{.name = "recompute", .run = pass_recompute,
	 .reads = R(RECOMPUTE) | R(RECOMPUTE_SCOPE)},
	/* ZeRO stages as placements (zero.c); partition then inserts the
	 * collectives they imply; FSDP's per-unit gathers (fsdp_units.c) */
	{.name = "zero", .run = pass_zero, .reads = R(ZERO) | R(ZERO_AXES)},
	{.name = "partition", .run = pass_partition,
	 .reads = R(SEQUENCE_PARALLEL) | R(CONTEXT_PARALLEL)},
	{.name = "fsdp_units", .run = pass_fsdp_units,
	 .reads = R(ZERO) | R(ZERO_AXES) | R(RESHARD_AFTER_FORWARD) | R(PREFETCH)},
	/* ZeRO's gathers and reduce_scatters, one per unit or bucket (coalesce.c) */
	{.name = "coalesce", .run = pass_coalesce, .reads = R(ZERO) | R(BUCKET_BYTES)},
	/* DDP's per-gradient all_reduces grouped into buckets (bucket.c) */
	{.name = "bucket", .run = pass_bucket, .reads = R(BUCKET_BYTES)},
	/* one program per pp coordinate in schedule order (pipeline.c) */
	{.name = "pipeline", .run = pass_pipeline,
	 .reads = R(MICROBATCHES) | R(SCHEDULE) | R(VIRTUAL_STAGES) | PASS_READS_CHUNKS},
	/* attention_bwd reads its forward's log-sum-exps (attn_stats.c) */
	{.name = "attn_stats", .run = pass_attn_stats},
	/* a weight gradient's sum over micro-batches by its GEMM, beta = 1
	 * (accumulate.c) */
	{.name = "accumulate", .run = pass_accumulate},
	{.name = "verify", .run = run_verify},
	{.name = "fuse", .analyse = run_fuse},
	{.name = "memplan", .analyse = run_memplan},
	{.name = NULL},
};
#undef R

static_assert(sizeof passes / sizeof passes[0] - 1 <= PASS_MAX, "PASS_MAX holds the pipeline");
static_assert(IR_TRAIN_COUNT < 63, "PASS_READS bits fit a uint64_t");

const Pass *pass_list(void)
{
	return passes;
}

bool pass_exists(const char *name)
{
	if (!name)
		return false;
	if (strcmp(name, "lower") == 0)
		return true;
	for (const Pass *p = passes; p->name; p++)
		if (strcmp(p->name, name) == 0)
			return true;
	return false;
}

/* Lists the names --after accepts, for the "unknown pass" error. */
static void known_passes(char *buf, size_t cap)
{
	size_t n = 0;
	int w = snprintf(buf, cap, "lower");
	n = w > 0 ? (size_t)w : 0;
	for (const Pass *p = passes; p->name && n < cap; p++) {
		w = snprintf(buf + n, cap - n, ", %s", p->name);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

void pass_fault(const IrModule *m, Diag *d, SrcLoc loc, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (m->from_text)
		diag_error(d, loc, "the IR text is inconsistent: %s (IR that dtmc printed is "
		           "not; print it again from the model)", msg);
	else
		diag_internal(d, loc, "%s", msg);
}

/* The pipeline position of pass `name`: its index in passes[], -1 for
 * "lower" (or NULL: as lowered), -2 when no pass has that name. */
static int position(const char *name)
{
	if (!name || strcmp(name, "lower") == 0)
		return -1;
	for (int i = 0; passes[i].name; i++)
		if (strcmp(passes[i].name, name) == 0)
			return i;
	return -2;
}

int pass_position(const char *name)
{
	return position(name);
}

int pass_count(void)
{
	return (int)(sizeof passes / sizeof passes[0]) - 1;
}

int pass_first_reader(uint64_t settings)
{
	int i = 0;
	while (passes[i].name && !(passes[i].reads & settings))
		i++;
	return i;
}

bool pass_has_run(const IrModule *m, const char *name)
{
	int at = position(m->after), p = position(name);
	return p >= 0 && at >= p;
}

/* The names of the passes from position `from` on, for messages. */
static void names_from(int from, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = 0;
	for (int i = from < 0 ? 0 : from; passes[i].name && n < cap; i++) {
		int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", passes[i].name);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

/* The micro-batch and pipeline chunk of every node are the microbatch
 * and stages passes' (later passes trust them): none before they ran,
 * within the train section's counts after. */
static bool check_annotations(const IrModule *m, Diag *d, int at)
{
	const IrTrain *t = &m->train;
	int64_t M = at >= position("microbatch") && t->microbatches > 1 ? t->microbatches : 0;
	int64_t K = -1; /* chunks, when the stages pass gave them */
	int ax = pipeline_axis(m);
	if (ax >= 0 && at >= position("stages")) {
		bool il = t->schedule == IR_PIPE_INTERLEAVED && t->virtual_stages > 1;
		K = m->mesh.sizes[ax] * (il ? t->virtual_stages : 1);
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		SrcLoc at_loc = m->after ? m->after_loc : n->loc;
		if (ir_mb(m, n) >= M && ir_mb(m, n) >= 0) {
			if (M > 0)
				diag_error(d, at_loc, "%%%d (%s) is in micro-batch %d, but the train "
				           "section has %lld micro-batches", i, ir_op_name(n->op), ir_mb(m, n),
				           (long long)M);
			else
				diag_error(d, at_loc, "%%%d (%s) is in micro-batch %d, but this IR is "
				           "not split into micro-batches (%s)", i, ir_op_name(n->op), ir_mb(m, n),
				           at < position("microbatch") ? "the microbatch pass has not run"
				                                       : "microbatches 1");
			return false;
		}
		if (K >= 0 && ir_stage(m, n) >= K) {
			diag_error(d, at_loc, "%%%d (%s) is in pipeline chunk %d, but pp = %lld makes "
			           "%lld chunks", i, ir_op_name(n->op), ir_stage(m, n),
			           (long long)m->mesh.sizes[ax], (long long)K);
			return false;
		}
	}
	return true;
}

/* Without uneven_shards, a placement the program gives (an annotation:
 * no origin node) splits each dim evenly, as the .dtm lowering requires of
 * its annotations (frontend/lower_mesh.c); IR text before partition is held to
 * the same. */
static bool check_even(const IrModule *m, Diag *d)
{
	if (m->train.uneven_shards || mesh_size(&m->mesh) <= 1)
		return true;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const Placement *p = ir_place(m, n);
		if (!p->known || ir_place_from(m, n) >= 0)
			continue;
		for (int k = 0; k < n->rank && k < p->ndims; k++) {
			int64_t parts = placement_dim_parts(p, &m->mesh, k);
			if (parts <= 1 || n->shape[k] % parts == 0)
				continue;
			SrcLoc at = ir_place_loc(m, n).file ? ir_place_loc(m, n) : n->loc;
			diag_error(d, at, "dim %d of %%%d (%s%s%s, size %lld) is not divisible by its "
			           "%lld shards", k, i, n->name ? "'" : "", n->name ? n->name
			           : ir_op_name(n->op), n->name ? "'" : "", (long long)n->shape[k],
			           (long long)parts);
			diag_note(d, m->train.loc[IR_TRAIN_UNEVEN_SHARDS].file
			                     ? m->train.loc[IR_TRAIN_UNEVEN_SHARDS] : at,
			          "'uneven_shards true' in the train section allows uneven "
			          "(torch.chunk) shards");
			return false;
		}
	}
	return true;
}

/* The pipeline axis places nodes on stages; a placement or ZeRO split over
 * it would make a value both one stage's and every stage's (the .dtm
 * lowering refuses it at the axis's name: frontend/lower_mesh.c). */
static bool check_no_pp(const IrModule *m, Diag *d)
{
	int ax = m->pp_axis;
	if (ax < 0 || ax >= m->mesh.naxes)
		return true;
	uint32_t bit = 1u << ax;
	if (m->train.zero > 0 && (m->train.zero_axes & bit)) {
		diag_error(d, m->train.loc[IR_TRAIN_ZERO], "zero %d shards over 'pp', the pipeline "
		           "axis, which places blocks on stages: shard over another axis",
		           (int)m->train.zero);
		return false;
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const Placement *p = ir_place(m, n);
		if (!p->known || !((p->partial | pass_placement_split_axes(p)) & bit))
			continue;
		SrcLoc at = ir_place_loc(m, n).file ? ir_place_loc(m, n) : n->loc;
		diag_error(d, at, "%%%d (%s%s%s) is placed over 'pp', the pipeline axis, which "
		           "places blocks on stages and cannot split a value", i, n->name ? "'" : "",
		           n->name ? n->name : ir_op_name(n->op), n->name ? "'" : "");
		return false;
	}
	return true;
}

/* What a module must be to enter the pipeline where it stands (IR text can
 * say anything the parser and the verifier accept):
 *   - its `after` names a pass;
 *   - micro-batch and chunk numbers only after the passes that give them,
 *     and within their counts;
 *   - before the microbatch pass, what it asks of `microbatches M`
 *     (pass_microbatch_check: inputs divisible, the unrolled size);
 *   - after propagate (on more than one rank), a placement on every value;
 *   - before partition, without uneven_shards, annotations that split
 *     their dims evenly; nothing placed or ZeRO-sharded over pp;
 *   - before partition, it holds no per-rank op (OPF_LOCAL: collectives,
 *     vocab-parallel and padding ops) and no padded shard (the parser
 *     refuses both in IR without an `after` line, at the node). */
bool pass_check_input(const IrModule *m, Diag *d)
{
	int at = position(m->after);
	if (at == -2) {
		char names[512];
		known_passes(names, sizeof names);
		diag_error(d, m->after_loc, "unknown pass '%s' (known passes: %s)", m->after, names);
		return false;
	}
	if (!check_annotations(m, d, at))
		return false;
	/* the micro-batch count against the program, before the pass that
	 * unrolls it (and before anything is sized by it) */
	if (at < position("microbatch") && !pass_microbatch_check(m, d))
		return false;
	/* partition reads a placement off every value, which propagate gave */
	if (mesh_size(&m->mesh) > 1 && at >= position("propagate") && at < position("partition"))
		for (int i = 0; i < m->nnodes; i++)
			if (!m->nodes[i]->place) {
				diag_error(d, m->after ? m->after_loc : m->nodes[i]->loc,
				           "%%%d (%s) has no placement ('@ ?'), but this IR is after "
				           "propagate, which places every value", i,
				           ir_op_name(m->nodes[i]->op));
				return false;
			}
	if (at >= position("partition"))
		return true;
	if (!check_even(m, d) || !check_no_pp(m, d))
		return false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		bool padded = false;
		for (int k = 0; k < n->rank && k < IR_MAX_RANK; k++)
			padded = padded || ir_padded(m, n, k) != 0;
		if (!(ir_op_flags(n->op) & OPF_LOCAL) && !padded)
			continue;
		char what[96];
		if (padded)
			snprintf(what, sizeof what, "%%%d (%s) is a padded shard", n->id,
			         ir_op_name(n->op));
		else
			snprintf(what, sizeof what, "%%%d (%s) is a per-rank op", n->id,
			         ir_op_name(n->op));
		diag_error(d, m->after ? m->after_loc : n->loc,
		           "%s, which only the IR after partition holds, but this IR is %s%s%s",
		           what, m->after ? "after '" : "as lowered (it has no `after` line)",
		           m->after ? m->after : "", m->after ? "', before partition" : "");
		return false;
	}
	return true;
}

/* The calling thread's CPU time and the wall time, in seconds. */
static void clocks(double *cpu, double *wall)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	*cpu = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
	clock_gettime(CLOCK_MONOTONIC, &t);
	*wall = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool known_stop(const char *stop_after, Diag *d)
{
	if (!stop_after || pass_exists(stop_after))
		return true;
	char names[512];
	known_passes(names, sizeof names);
	diag_error(d, (SrcLoc){0}, "unknown pass '%s' (known passes: %s)", stop_after, names);
	return false;
}

bool pass_run(IrModule *m, Diag *d, const PassRunOptions *o)
{
	static const PassRunOptions defaults = {0};
	if (!o)
		o = &defaults;
	if (!known_stop(o->stop_after, d))
		return false;
	/* IR text printed after a pass goes on from there: the passes before
	 * it ran already, and those after partition would not take their own
	 * output again (a pipeline's stage programs split twice) */
	int from = position(m->after), to = pass_count() - 1;
	if (o->stop_after)
		to = position(o->stop_after);
	if (to < from) {
		char names[512];
		names_from(from, names, sizeof names);
		diag_error(d, m->after_loc,
		           "this IR is after pass '%s': --after=%s names an earlier pass (the IR "
		           "can only go on: --after=%s)",
		           m->after, o->stop_after, names);
		return false;
	}
	/* without a caller's store, the analyses run as checks (can the final
	 * IR be planned?) into a scratch arena */
	Arena scratch;
	PassAnalyses drop = {.arena = &scratch};
	PassAnalyses *an = o->an ? o->an : &drop;
	if (!o->an)
		arena_init(&scratch);
	PassOptions popt = {.verbose = o->verbose};
	int nerr0 = d->nerr;
	bool ok = true;
	for (int i = from + 1; i <= to && ok; i++) {
		const Pass *p = &passes[i];
		bool verifier = p->run == run_verify;
		if (verifier && o->no_verify) {
			m->after = p->name;
			m->after_loc = (SrcLoc){0};
			continue;
		}
		if (o->verbose)
			fprintf(stderr, "dtmc: running pass '%s'\n", p->name);
		double c0 = 0, w0 = 0;
		if (o->times)
			clocks(&c0, &w0);
		if (p->run) {
			/* a transform: analyses of the IR before it no longer hold */
			an->fuse = NULL;
			an->mem = NULL;
			ok = p->run(m, d, &popt);
		} else {
			ok = p->analyse(m, an, d, &popt);
		}
		if (!ok || d->nerr > nerr0) {
			if (d->nerr == nerr0)
				diag_internal(d, (SrcLoc){0}, "pass '%s' failed without saying why",
				              p->name);
			ok = false;
		} else if (p->run && !verifier && !o->no_verify && !ir_verify(m, d, p->name)) {
			/* the verifier after every pass, except after the verifier
			 * itself (what it finds is the pass's fault, the input was
			 * verified) and the analyses (which leave the IR as it is) */
			diag_internal(d, (SrcLoc){0}, "pass '%s' left IR that does not verify",
			              p->name);
			ok = false;
		}
		if (o->times) {
			double c1, w1;
			clocks(&c1, &w1);
			o->times->cpu_s[i] += c1 - c0;
			o->times->wall_s[i] += w1 - w0;
		}
		if (ok) {
			m->after = p->name;
			m->after_loc = (SrcLoc){0};
		}
	}
	if (!o->an)
		arena_free(&scratch);
	return ok;
}

bool pass_run_until(IrModule *m, Diag *d, const PassOptions *opt, const char *stop_after)
{
	if (!known_stop(stop_after, d) || !pass_check_input(m, d))
		return false;
	PassRunOptions o = {.stop_after = stop_after, .verbose = opt && opt->verbose};
	return pass_run(m, d, &o);
}
