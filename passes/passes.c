/* passes.c - the pipeline of IR -> IR passes, in order.
 *
 * The registry is one table.  Each pass consumes a verified module and
 * leaves one; pass_run_until runs the verifier after every pass, so a pass
 * that breaks an invariant is named in the message.  "lower" is not a pass:
 * it names the module as lowering left it, before any pass ran.
 *
 * For now the pipeline is only the verifier; later issues add shape,
 * autodiff, optimizer, propagate, partition, state, pipeline, schedule and
 * memplan in front of it.
 */
#include "passes.h"
#include "autodiff.h"
#include "bucket.h"
#include "fuse.h"
#include "memplan.h"
#include "microbatch.h"
#include "optim.h"
#include "partition.h"
#include "pipeline.h"
#include "propagate.h"
#include "recompute.h"
#include "state.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool run_verify(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	return ir_verify(m, d, "verify");
}

/* fuse and memplan are analyses: they leave the IR as it is and codegen
 * recomputes their plans (see fuse.h); running them here checks that the
 * final IR can be planned and, with -v, reports the arenas. */
static bool run_fuse(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	Arena a;
	FusePlan fp;
	arena_init(&a);
	bool ok = pass_fuse_plan(m, &a, d, &fp);
	arena_free(&a);
	return ok;
}

static bool run_memplan(IrModule *m, Diag *d, const PassOptions *opt)
{
	Arena a;
	FusePlan fp;
	MemPlan mp;
	arena_init(&a);
	bool ok = pass_fuse_plan(m, &a, d, &fp) && pass_memplan(m, &fp, &a, d, &mp);
	if (ok && opt->verbose) {
		for (int k = 0; k < DTM_ARENA_COUNT; k++)
			fprintf(stderr, "dtmc: memplan: arena %-5s %lld bytes\n",
			        pass_memplan_arena_name(k), (long long)mp.arena_bytes[k]);
		for (int s = 0; mp.nstages > 1 && s < mp.nstages; s++) {
			fprintf(stderr, "dtmc: memplan: stage %d:", s);
			for (int k = 0; k < DTM_ARENA_COUNT; k++)
				fprintf(stderr, " %s %lld", pass_memplan_arena_name(k),
				        (long long)mp.stage_arena_bytes[s][k]);
			fprintf(stderr, " bytes; %d micro-batches in flight\n",
			        pass_memplan_inflight(m, &mp, s));
		}
	}
	arena_free(&a);
	return ok;
}

static const Pass passes[] = {
	/* gradient accumulation: the forward unrolled over the micro-batches
	 * (microbatch.c), so everything after sees one program */
	/* pipeline model chunks, carried by everything derived after */
	{"stages", pass_stages},
	{"microbatch", pass_microbatch},
	/* precision before autodiff so gradients come out in the compute
	 * dtype; optim after it, consuming the gradients (see precision.c) */
	{"precision", pass_precision},
	{"autodiff", pass_autodiff},
	{"optim", pass_optim},
	/* every value gets a placement; partition consumes them */
	{"propagate", pass_propagate},
	/* activation checkpointing: clones of each block's forward in its
	 * backward, placed as the originals (recompute.c) */
	{"recompute", pass_recompute},
	/* ZeRO stages as placements, then FSDP's per-unit gathers (state.c) */
	{"state", pass_state},
	{"partition", pass_partition},
	{"state_units", pass_state_units},
	/* DDP's per-gradient all_reduces grouped into buckets (bucket.c) */
	{"bucket", pass_bucket},
	/* one program per pp coordinate in schedule order (pipeline.c) */
	{"pipeline", pass_pipeline},
	{"verify", run_verify},
	{"fuse", run_fuse},
	{"memplan", run_memplan},
	{NULL, NULL},
};

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
		bool il = t->schedule && !strcmp(t->schedule, "interleaved") && t->virtual_stages > 1;
		K = m->mesh.sizes[ax] * (il ? t->virtual_stages : 1);
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		SrcLoc at_loc = m->after ? m->after_loc : n->loc;
		if (n->mb >= M && n->mb >= 0) {
			if (M > 0)
				diag_error(d, at_loc, "%%%d (%s) is in micro-batch %d, but the train "
				           "section has %lld micro-batches", i, ir_op_name(n->op), n->mb,
				           (long long)M);
			else
				diag_error(d, at_loc, "%%%d (%s) is in micro-batch %d, but this IR is "
				           "not split into micro-batches (%s)", i, ir_op_name(n->op), n->mb,
				           at < position("microbatch") ? "the microbatch pass has not run"
				                                       : "microbatches 1");
			return false;
		}
		if (K >= 0 && n->stage >= K) {
			diag_error(d, at_loc, "%%%d (%s) is in pipeline chunk %d, but pp = %lld makes "
			           "%lld chunks", i, ir_op_name(n->op), n->stage,
			           (long long)m->mesh.sizes[ax], (long long)K);
			return false;
		}
	}
	return true;
}

/* Without uneven_shards, a placement the program gives (an annotation:
 * no origin node) splits each dim evenly, as the .dtm lowering requires of
 * its annotations (frontend/sema.c); IR text before partition is held to
 * the same. */
static bool check_even(const IrModule *m, Diag *d)
{
	if (m->train.uneven_shards || mesh_size(&m->mesh) <= 1)
		return true;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (!n->place.known || n->place_from >= 0)
			continue;
		for (int k = 0; k < n->rank && k < n->place.ndims; k++) {
			int64_t parts = placement_dim_parts(&n->place, &m->mesh, k);
			if (parts <= 1 || n->shape[k] % parts == 0)
				continue;
			SrcLoc at = n->place_loc.file ? n->place_loc : n->loc;
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

/* What a module must be to enter the pipeline where it stands (IR text can
 * say anything the parser and the verifier accept):
 *   - its `after` names a pass;
 *   - micro-batch and chunk numbers only after the passes that give them,
 *     and within their counts;
 *   - before the microbatch pass, what it asks of `microbatches M`
 *     (pass_microbatch_check: inputs divisible, the unrolled size);
 *   - after propagate (on more than one rank), a placement on every value;
 *   - before partition, without uneven_shards, annotations that split
 *     their dims evenly;
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
			if (!m->nodes[i]->place.known) {
				diag_error(d, m->after ? m->after_loc : m->nodes[i]->loc,
				           "%%%d (%s) has no placement ('@ ?'), but this IR is after "
				           "propagate, which places every value", i,
				           ir_op_name(m->nodes[i]->op));
				return false;
			}
	if (at >= position("partition"))
		return true;
	if (!check_even(m, d))
		return false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		bool padded = false;
		for (int k = 0; k < n->rank && k < IR_MAX_RANK; k++)
			padded = padded || n->padded[k] != 0;
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

bool pass_run_until(IrModule *m, Diag *d, const PassOptions *opt, const char *stop_after)
{
	static const PassOptions defaults = {0};
	if (!opt)
		opt = &defaults;
	if (stop_after && !pass_exists(stop_after)) {
		char names[512];
		known_passes(names, sizeof names);
		diag_error(d, (SrcLoc){0}, "unknown pass '%s' (known passes: %s)", stop_after,
		           names);
		return false;
	}
	if (!pass_check_input(m, d))
		return false;
	/* IR text printed after a pass goes on from there: the passes before
	 * it ran already, and those after partition would not take their own
	 * output again (a pipeline's stage programs split twice) */
	int from = position(m->after), to = -1;
	while (passes[to + 1].name)
		to++;
	if (stop_after)
		to = position(stop_after);
	if (to < from) {
		char names[512];
		names_from(from, names, sizeof names);
		diag_error(d, m->after_loc,
		           "this IR is after pass '%s': --after=%s names an earlier pass (the IR "
		           "can only go on: --after=%s)",
		           m->after, stop_after, names);
		return false;
	}
	int nerr0 = d->nerr;
	for (int i = from + 1; i <= to; i++) {
		const Pass *p = &passes[i];
		if (opt->verbose)
			fprintf(stderr, "dtmc: running pass '%s'\n", p->name);
		if (!p->run(m, d, opt) || d->nerr > nerr0) {
			if (d->nerr == nerr0)
				diag_internal(d, (SrcLoc){0}, "pass '%s' failed without saying why",
				              p->name);
			return false;
		}
		/* the verifier after every pass, except after the verifier itself:
		 * what it finds is the pass's fault, the input was verified */
		if (p->run != run_verify && !ir_verify(m, d, p->name)) {
			diag_internal(d, (SrcLoc){0}, "pass '%s' left IR that does not verify",
			              p->name);
			return false;
		}
		m->after = p->name;
		m->after_loc = (SrcLoc){0};
	}
	return true;
}
