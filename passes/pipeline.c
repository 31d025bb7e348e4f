/* pipeline.c - pass "pipeline": pipeline parallelism, one program per pp
 * coordinate.
 *
 * P = the size of mesh axis `pp`, v = the virtual stages per rank of an
 * interleaved schedule (1 otherwise), K = P * v model chunks; chunk k runs
 * on pp coordinate k mod P (Megatron's layout).
 *
 * "pipeline" runs after `bucket`, on the per-rank program.  Each node has
 * a chunk (pass "stages", stages.c; rank = chunk mod P), or none (the global grad norm, which every
 * rank computes), or is *leafy*: a leaf, or a view (reshape, slice,
 * permute, cast) or a collective within the stage (ZeRO-3's all_gather of
 * a param shard) of leafy values outside the optimizer step (input
 * micro-batch slices, transpose(wte)), cloned into every rank that uses it
 * and placed where that rank first needs it.  The output module is the concatenation of P
 * programs, one per pp coordinate (IrNode.stage = that coordinate), each in
 * its schedule's order:
 *   - the schedule (passes/schedule.h) lists, per rank, the forward and
 *     backward work items (micro-batch, chunk); a node belongs to the item
 *     of its phase, micro-batch and chunk (ZB-H1 splits a backward item
 *     into B, what leads to a value another rank or item reads, and W, the
 *     rest: the weight gradients); nodes of no item (gradient
 *     accumulation, bucket reductions, the optimizer) run as soon as their
 *     operands are there, or at the end of the step when they read another
 *     rank's value or are a collective over pp; those of leaves only
 *     (ZeRO-3's param all_gathers) run where first needed;
 *   - a value used on another rank is sent right after it is computed and
 *     received where it is first needed (send is buffered, recv blocks);
 *     per pair of ranks, sends are ordered as the receiver receives;
 *   - grad_norm keeps on each rank the gradients that rank owns and its
 *     squares are all_reduced over pp as well (partition adds pp to the
 *     groups): every rank clips with the global norm;
 *   - the loss (on the last chunk's rank) is all_reduced over pp with
 *     zeros elsewhere, so every rank logs it;
 *   - a param used on ranks other than its owner's (the tied embedding)
 *     is sent, after the owner's optimizer step, to those ranks, which
 *     assign it to their copy.
 * The finished programs are simulated against each other (sends buffered,
 * receives and pp collectives blocking) so a schedule that would deadlock
 * or mismatch is a compile-time error, never a hang.
 *
 * The output takes the input's nodes over where it can (materialise) and
 * rewrites their heads (the fields before IrNode.shape) and operand lists:
 * the input module is consumed (`dtmc sweep` copies it first for all but
 * its last schedule).
 *
 * This file indexes the nodes in one walk and runs the steps, each in a
 * file of its own (pipeline_impl.h): each rank's program in schedule order
 * (pipeline_order.c), the sends in the receivers' order
 * (pipeline_sends.c), the simulation (pipeline_simulate.c) and the new
 * module's nodes (pipeline_build.c).
 */
#include "passes/pipeline_impl.h"

#include <stdio.h>
#include <stdlib.h>

int pipeline_axis(const IrModule *m)
{
	int a = m->pp_axis;
	return a >= 0 && a < m->mesh.naxes && m->mesh.sizes[a] > 1 ? a : -1;
}

bool pl_oom(Pl *p)
{
	if (!p->failed)
		diag_error(p->d, (SrcLoc){0}, "pipeline: out of memory");
	p->failed = true;
	return false;
}

/* Each rank of a stage runs the same program, so a send or recv within the
 * stage (over axes other than pp: context parallelism's ring and swap)
 * pairs with the same node on its peer, and a recv must come after the
 * send its peer makes for it: per stage and channel (axes, shift, mirror),
 * at every recv the sends so far outnumber the recvs before it.  A
 * schedule that breaks this hangs every rank of the stage (ZB-H1 once
 * split such pairs between B and W); here it is a compiler error. */
bool pipeline_check_p2p(const IrModule *m, Diag *d, int P, int ax)
{
	enum { CH = 8 };
	int64_t key[CH];
	int nk = 0;
	int *cnt = calloc((size_t)P * CH * 2, sizeof *cnt); /* [stage][channel][send, recv] */
	if (!cnt) {
		diag_error(d, (SrcLoc){0}, "pipeline: out of memory");
		return false;
	}
	bool ok = true;
	for (int i = 0; ok && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		int r = ir_stage(m, n);
		if ((n->op != IR_OP_SEND && n->op != IR_OP_RECV) || r < 0 || r >= P)
			continue;
		const IrAttrColl *c = ir_attr_coll(n);
		if (c->axes & (1u << ax))
			continue;
		int64_t k = (int64_t)c->axes << 32 | (c->shift & 0xffff) << 1 |
		            (c->n == 2 && c->args[1] == 1);
		int j = 0;
		while (j < nk && key[j] != k)
			j++;
		if (j == CH)
			continue; /* more channels than any partition makes */
		if (j == nk)
			key[nk++] = k;
		int *s = &cnt[((size_t)r * CH + (size_t)j) * 2];
		if (n->op == IR_OP_SEND) {
			s[0]++;
		} else if (++s[1] > s[0]) {
			diag_error(d, n->loc, "pipeline: internal error: on stage %d, recv %%%d "
			           "(micro-batch %d, %s) comes before the send its peer makes for it: "
			           "every rank of the stage would wait there; please report it", r,
			           n->id, ir_mb(m, n),
			           ir_phase(m, n) == IR_PHASE_FORWARD ? "forward" : "backward");
			ok = false;
		}
	}
	free(cnt);
	return ok;
}

bool pass_pipeline(IrModule *m, Diag *d, const PassOptions *opt)
{
	int ax = pipeline_axis(m);
	if (ax < 0 || m->nnodes == 0)
		return true;
	if (m->loss < 0) {
		diag_error(d, (SrcLoc){0}, "pipeline: the program has no loss");
		return false;
	}
	Pl p = { .m = m, .d = d, .ax = ax, .nn = m->nnodes };
	p.P = (int)m->mesh.sizes[ax];
	p.V = pl_virtual_stages(m);
	p.M = m->train.microbatches > 1 ? (int)m->train.microbatches : 1;
	if (p.P > 64) {
		diag_error(d, (SrcLoc){0}, "pp = %d: at most 64 pipeline stages", p.P);
		return false;
	}
	SchedKind kind = SCHED_1F1B; /* none given too */
	switch (m->train.schedule) {
	case IR_PIPE_GPIPE: kind = SCHED_GPIPE; break;
	case IR_PIPE_INTERLEAVED: kind = SCHED_INTERLEAVED; break;
	case IR_PIPE_ZB: kind = SCHED_ZBH1; break;
	case IR_PIPE_NONE:
	case IR_PIPE_1F1B: break;
	}
	const char *sname = sched_name(kind); /* the train setting's word */
	SrcLoc sl = pl_schedule_loc(m);
	if (kind == SCHED_INTERLEAVED && p.V < 2) {
		diag_error(d, sl, "schedule interleaved needs 2 or more virtual stages: "
		           "interleaved(2)");
		return false;
	}
	int nn = p.nn, P = p.P;
	/* all the pass's scratch memory, freed at its end */
	Arena *a = &p.a;
	arena_init(a);
	/* every rank's schedule first: its errors are the user's */
	SchedItem **items = arena_alloc(a, sizeof *items * (size_t)P);
	int *nitems = arena_alloc(a, sizeof(int) * (size_t)P);
	bool ok = items && nitems;
	for (int r = 0; ok && r < P; r++) {
		char err[256];
		int cnt = sched_build(kind, P, p.M, p.V, r, NULL, 0, err, sizeof err);
		if (cnt < 0) {
			diag_error(d, sl, "schedule %s with pp = %d and microbatches "
			           "%d: %s (set microbatches in the train section or with --train "
			           "microbatches=M)", sname, P, p.M, err);
			ok = false;
			break;
		}
		items[r] = arena_alloc_raw(a, sizeof(SchedItem) * (size_t)(cnt ? cnt : 1));
		ok = items[r] && sched_build(kind, P, p.M, p.V, r, items[r], cnt, err, sizeof err) == cnt;
		nitems[r] = cnt;
		if (!ok && items[r])
			diag_internal(d, (SrcLoc){0}, "schedule: %s", err);
	}
	/* operand slots: grown in the walk below */
	size_t nops = 2 * (size_t)nn + 16;
	p.rank = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.phase = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.home = arena_alloc_raw(a, (size_t)nn);
	p.dest = arena_alloc(a, sizeof(uint64_t) * (size_t)nn);
	p.users = arena_alloc(a, sizeof(uint64_t) * (size_t)nn);
	p.upd = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.sync = arena_alloc(a, sizeof(uint64_t) * (size_t)nn);
	p.syncof = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.nf = arena_alloc_raw(a, (size_t)nn);
	p.mb = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.stage = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.opstart = arena_alloc_raw(a, sizeof(int) * ((size_t)nn + 1));
	p.opv = arena_alloc_raw(a, sizeof(int) * nops);
	p.placed = arena_alloc(a, (size_t)nn);
	p.recvd = arena_alloc(a, (size_t)nn);
	p.htouch = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.lastr = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.cnt = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.head = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	if (p.head)
		memset(p.head, 0xff, sizeof(int) * (size_t)nn);
	p.heap = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.onstart = arena_alloc_raw(a, sizeof(int) * ((size_t)P + 1));
	p.inputs = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.syncp = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	p.list = arena_alloc(a, sizeof(EntList) * (size_t)P);
	p.ns = arena_alloc(a, sizeof(int) * (size_t)P * (size_t)P);
	p.nq = arena_alloc(a, sizeof(int) * (size_t)P * (size_t)P);
	int *map = arena_alloc_raw(a, sizeof(int) * (size_t)nn);
	Items it = { .start = NULL, .byitem = NULL };
	if (ok && (!p.rank || !p.phase || !p.home || !p.dest || !p.users || !p.upd ||
	           !p.sync || !p.syncof || !p.nf || !p.mb || !p.stage || !p.opstart || !p.opv ||
	           !p.placed || !p.recvd || !p.htouch || !p.lastr || !p.cnt || !p.head || !p.heap ||
	           !p.onstart || !p.inputs || !p.syncp || !p.list || !p.ns || !p.nq || !map))
		ok = pl_oom(&p);
	if (!ok)
		goto done;
	/* The one walk over the nodes themselves (nodes next in id order are
	 * not always next in memory): everything later reads arrays.  What
	 * it finds of node i needs only operands', which come before it. */
	unsigned opfl[IR_OP_COUNT];
	for (int o = 0; o < IR_OP_COUNT; o++)
		opfl[o] = ir_op_flags((IrOp)o);
	uint8_t *op = arena_alloc_raw(a, (size_t)nn);
	if (!op) {
		ok = pl_oom(&p);
		goto done;
	}
	_Static_assert(IR_OP_COUNT <= 256, "ops fit a byte");
	uint64_t all = P == 64 ? ~0ull : (1ull << P) - 1;
	/* the optimizer step starts at the first in-place update or
	 * grad_norm after the loss */
	bool opt_started = false;
	p.ninputs = 0;
	size_t nop = 0;
	int *lfv = arena_alloc_raw(a, sizeof(int) * (size_t)nn), nlf = 0; /* the leafy nodes */
	int nall = 0; /* nodes on every rank */
	int nkeys = p.M * p.P * p.V * 3;
	it.start = arena_alloc(a, sizeof(int) * ((size_t)nkeys + 2));
	it.byitem = arena_alloc_raw(a, sizeof(int) * (size_t)(nn ? nn : 1));
	if (!lfv || !it.start || !it.byitem) {
		ok = pl_oom(&p);
		goto done;
	}
	for (int r = 0; r <= P; r++)
		p.onstart[r] = 0;
	const int loss = m->loss;
	for (int i = 0; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		IrOp o = n->op;
		unsigned fl = (unsigned)o < IR_OP_COUNT ? opfl[o] : 0;
		op[i] = (uint8_t)o;
		int stage = ir_stage(m, n);
		p.stage[i] = stage;
		p.opstart[i] = (int)nop;
		int nops_i = n->nops;
		if (nop + (size_t)nops_i > nops) {
			while (nop + (size_t)nops_i > nops)
				nops *= 2;
			int *v = arena_alloc_raw(a, sizeof(int) * nops);
			if (!v) {
				ok = pl_oom(&p);
				goto done;
			}
			memcpy(v, p.opv, sizeof(int) * nop);
			p.opv = v;
		}
		int *ops = p.opv + nop;
		for (int j = 0; j < nops_i; j++)
			ops[j] = n->ops[j];
		nop += (size_t)nops_i;
		if (i > loss && !opt_started && (ir_op_is_update((IrOp)o) || o == IR_OP_GRAD_NORM))
			opt_started = true;
		int phase = i <= loss ? IR_PHASE_FORWARD
		            : !opt_started ? IR_PHASE_BACKWARD : IR_PHASE_OPTIMIZER;
		p.phase[i] = phase;
		int rank = stage < 0 ? RANK_ALL : stage < P ? stage : stage % P;
		p.rank[i] = rank;
		int mb = pl_node_mb(&p, ir_mb(m, n));
		p.mb[i] = mb;
		p.upd[i] = p.syncof[i] = -1;
		bool lf = pl_is_leaf_op(o);
		/* views of leaves, and collectives within a stage of leaves
		 * (ZeRO-3's param all_gathers): each rank that reads one makes
		 * its own, where it first needs it */
		bool coll = (fl & OPF_COLL) && o != IR_OP_SEND && o != IR_OP_RECV;
		bool ppc = coll && (ir_attr_coll(n)->axes & (1u << ax));
		bool gather = coll && !ppc;
		if (!lf && phase != IR_PHASE_OPTIMIZER && (pl_is_view_op(o) || gather)) {
			lf = true;
			for (int k = 0; k < nops_i && lf; k++)
				lf = p.home[ops[k]] == HOME_LEAFY;
		}
		p.home[i] = (int8_t)(lf ? HOME_LEAFY : rank);
		uint8_t f = 0;
		if (ppc)
			f |= NF_PPCOLL;
		if (o == IR_OP_GRAD_NORM && rank == RANK_ALL)
			f |= NF_GNORM;
		if (o == IR_OP_INPUT)
			p.inputs[p.ninputs++] = i;
		map[i] = -1; /* the item key */
		/* in a schedule item, or free? */
		if (!lf && rank != RANK_ALL && mb >= 0 &&
		    (phase == IR_PHASE_FORWARD || phase == IR_PHASE_BACKWARD)) {
			f |= NF_ITEM;
			if (kind != SCHED_ZBH1) { /* else known below */
				map[i] = pl_item_key(&p, i);
				if (map[i] >= 0)
					it.start[map[i] + 2]++;
			}
		}
		if (fl & OPF_INPLACE) {
			int b = ops[0];
			while (!pl_is_leaf_op(op[b]) && (opfl[op[b]] & OPF_INPLACE))
				b = p.opv[p.opstart[b]];
			if (op[b] == IR_OP_PARAM)
				p.upd[b] = i;
		}
		p.nf[i] = f;
		if (lf) {
			lfv[nlf++] = i;
			continue; /* a leafy node's operands are leafy */
		}
		/* who uses what: the ranks reading each leafy value, and the
		 * ranks each computed value is sent to (those that read it and
		 * do not compute it; grad_norm on every rank reads no other
		 * rank's); the users of leafy values are added below */
		uint64_t mine = rank == RANK_ALL ? all : 1ull << rank;
		bool gn = f & NF_GNORM;
		for (int k = 0; k < nops_i; k++) {
			int u = ops[k];
			int h = p.home[u];
			if (h == HOME_LEAFY) {
				p.users[u] |= mine;
				continue;
			}
			f |= NF_COMPUTED;
			if (h != HOME_ALL && !gn)
				p.dest[u] |= mine & ~(1ull << h);
		}
		p.nf[i] = f;
		if (rank == RANK_ALL)
			nall++;
		else
			p.onstart[rank + 1]++;
	}
	p.opstart[nn] = (int)nop;
	p.enext = arena_alloc_raw(a, sizeof(int) * (nop ? nop : 1));
	p.euser = arena_alloc_raw(a, sizeof(int) * (nop ? nop : 1));
	if (!p.enext || !p.euser) {
		ok = pl_oom(&p);
		goto done;
	}
	/* the users of leafy values, which read leafy values only: a
	 * node's users come after it, so walking back finds them all */
	for (int j = nlf - 1; j >= 0; j--) {
		int i = lfv[j];
		for (int k = p.opstart[i]; k < p.opstart[i + 1]; k++)
			p.users[p.opv[k]] |= p.users[i];
	}
	/* upd is set for params only */
	p.nsyncp = 0;
	for (int j = 0; j < nlf; j++) {
		int i = lfv[j];
		if (p.upd[i] >= 0 && p.rank[p.upd[i]] >= 0) {
			p.sync[i] = p.users[i] & ~(1ull << p.rank[p.upd[i]]);
			if (p.sync[i]) {
				p.syncof[p.upd[i]] = i;
				p.syncp[p.nsyncp++] = i;
			}
		}
	}
	/* the nodes on each rank (counted above) */
	for (int r = 0; r < P; r++)
		p.onstart[r + 1] += p.onstart[r] + nall;
	/* ZB-H1 splits each micro-batch's backward into B, the work the
	 * previous stage waits for (what leads to a value another rank reads,
	 * or to another item's work), and W, the rest (weight gradients).  A
	 * send or recv within the stage (context parallelism's ring and its
	 * load-balancing swap) is B: the send's value is read by no node here
	 * but by its peer's recv, which B work reads, and a pair split between
	 * B and W leaves both ranks waiting in B for the other's W. */
	if (kind == SCHED_ZBH1) {
		p.wgrad = arena_alloc(a, sizeof(bool) * (size_t)nn);
		if (!p.wgrad) {
			ok = pl_oom(&p);
			goto done;
		}
		/* users come after their operands: walk back, so a node's
		 * users are classified before it */
		bool *need = arena_alloc(a, sizeof(bool) * (size_t)nn);
		if (!need) {
			ok = pl_oom(&p);
			goto done;
		}
		for (int j = nn - 1; j >= 0; j--) {
			bool bw = (p.nf[j] & NF_ITEM) && p.phase[j] == IR_PHASE_BACKWARD;
			if (bw)
				p.wgrad[j] = !(need[j] || p.dest[j] != 0 || op[j] == IR_OP_SEND ||
				               op[j] == IR_OP_RECV);
			for (int k = p.opstart[j]; bw && k < p.opstart[j + 1]; k++) {
				int o = p.opv[k];
				if (!(p.nf[o] & NF_ITEM) || p.phase[o] != IR_PHASE_BACKWARD)
					continue;
				bool same = p.mb[o] == p.mb[j] && p.stage[o] == p.stage[j];
				need[o] = need[o] || !same || !p.wgrad[j];
			}
		}
	}
	/* the nodes of each item, in node order (a counting sort by key;
	 * the keys and their counts are found above, but ZB-H1's only
	 * now), and the nodes on each rank */
	if (kind == SCHED_ZBH1)
		for (int i = 0; i < nn; i++) {
			map[i] = p.nf[i] & NF_ITEM ? pl_item_key(&p, i) : -1;
			if (map[i] >= 0)
				it.start[map[i] + 2]++;
		}
	for (int k = 0; k < nkeys; k++)
		it.start[k + 2] += it.start[k + 1];
	p.onv = arena_alloc_raw(a, sizeof(int) * (size_t)(p.onstart[P] ? p.onstart[P] : 1));
	int *oncur = arena_alloc_raw(a, sizeof(int) * (size_t)P);
	if (!p.onv || !oncur) {
		ok = pl_oom(&p);
		goto done;
	}
	memcpy(oncur, p.onstart, sizeof(int) * (size_t)P);
	for (int i = 0; i < nn; i++) {
		if (p.home[i] == HOME_LEAFY)
			continue;
		if (map[i] >= 0)
			it.byitem[it.start[map[i] + 1]++] = i;
		if (p.rank[i] != RANK_ALL)
			p.onv[oncur[p.rank[i]]++] = i;
		else
			for (int r = 0; r < P; r++)
				p.onv[oncur[r]++] = i;
	}
	int loss_rank = p.rank[m->loss] == RANK_ALL ? P - 1 : p.rank[m->loss];
	for (int r = 0; ok && r < P; r++)
		ok = pl_build_rank(&p, r, items[r], nitems[r], &loss_rank, &it);
	ok = ok && pl_order_sends(&p) && pl_simulate(&p);
	IrModule *out = ok ? ir_module_derive(m) : NULL;
	if (ok && !out)
		ok = pl_oom(&p);
	int loss_out = -1;
	if (ok)
		ok = pl_materialise(&p, out, map, &loss_out);
	if (ok) {
		ir_module_take_nodes(m, out);
		m->loss = loss_out;
		m->nchooses = 0;
		ok = pipeline_check_p2p(m, d, P, ax);
		if (opt && opt->verbose)
			for (int r = 0; r < P; r++)
				fprintf(stderr, "dtmc: pipeline: pp rank %d runs %d nodes (%s, %d "
				        "micro-batches)\n", r, p.list[r].n, sname, p.M);
	}
done:
	arena_free(a);
	return ok && !p.failed;
}
