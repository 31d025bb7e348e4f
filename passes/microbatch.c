/* microbatch.c - pass "microbatch": gradient accumulation over
 * micro-batches (train { microbatches M }); with pipeline stages the
 * pipeline pass then runs each micro-batch's share by the schedule.
 *
 * The first pass, on the global forward program as lowering left it.
 * Every input's dim 0 is its batch dim; the step's batch is processed as M
 * micro-batches and the forward program is unrolled M times:
 *   micro-batch k of input x [B, ...] = reshape x to [B/M, M, ...], slice
 *   [k, k+1) of dim 1, reshape to [B/M, ...]: the rows i with i mod M = k.
 *   The slice carries its input's annotation.  Under a split of dim 0
 *   (DDP's [dp, _]) that is each rank's own rows with local index mod M =
 *   k, so the slicing is local (no communication) whenever B/M divides by
 *   the split.  Otherwise (uneven_shards) the input's chunks do not map
 *   onto a micro-batch's: partition gathers the input once and each rank
 *   takes its chunk of each micro-batch, zero-padded (passes/partition.c;
 *   token ids too), so the micro-batches stay split.  Without the
 *   annotation on the slice they were whole on every rank, the data
 *   parallelism lost (test_partition's test_uneven_microbatches).
 *   Every node that depends on an input is cloned once per micro-batch on
 *   those slices; nodes that depend on params only (transpose(wte)) are
 *   computed once and shared.  A copy's IrNode.mb is its micro-batch (the
 *   shared nodes keep -1); autodiff gives a gradient its value's.  A copy
 *   keeps its variable's name (layer.1.h of micro-batch 2), except the
 *   per-micro-batch losses: "loss" names their mean, they are labelled so.
 *   loss = (loss_0 + ... + loss_{M-1}) / M, the mean over the whole batch
 *   when each micro-batch's loss is a mean over its (equal-sized) samples,
 *   as cross_entropy and mse are, plus any batch-independent term.
 * Autodiff then differentiates the one loss: each param's gradient is the
 * sum of its M micro-batch terms (seeded with 1/M), computed before any
 * collective, and partition and `bucket` reduce that sum once per step:
 * one gradient synchronisation per step under DDP, whatever M.
 *
 * Cost: the program (and the compile time) grows M-fold in the forward and
 * backward passes; without pipeline stages the program runs the M
 * forwards, then the M backwards, so the activations of all micro-batches
 * are live together: peak activation memory is the whole batch's, as with
 * M = 1 (gradient accumulation here buys the numerics and the single
 * synchronisation, not the memory saving a per-micro-batch schedule would
 * give; with pp > 1, 1F1B holds at most P micro-batches' activations).
 *
 * Dropout: a sample must draw the mask it draws with M = 1, so each
 * micro-batch's copy of a dropout records where its elements sit in the
 * full batch (ir/dropout.c): M, k, the operand's dim whose extent shrank
 * M-fold (the batch dim, usually 0) and the elements of that dim per
 * batch row (1, or T where [B, T, D] was reshaped to [B*T, D]: the
 * extent over the inputs' batch size B).  A dropout of a value with no
 * batch dim (a batch reduction) keeps its element index: every
 * micro-batch draws the same mask there.
 */
#include "passes/microbatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(Diag *d, const IrNode *n, const char *what, const char *msg)
{
	diag_error(d, n->loc, "microbatches %s: %s", what, msg);
	return false;
}

/* The dim of n (an op that carries its own shape) that holds the batch
 * dim of its micro-batch operand: o0 is the full operand, c0 its copy, a
 * dim of which shrank M-fold.  The dims in front of it keep their
 * elements (an expert dim before the batch, say), so n's batch dim is the
 * first one whose prefix has as many elements and that M divides (a
 * reshape merging it with the dims after it, [E, B, C] -> [E, B*C], or
 * splitting them); scatter_add keeps the operand's dims, expand aligns
 * them right.  -1: none. */
static int batch_dim_of(const IrNode *n, const IrNode *o0, const IrNode *c0, int64_t M)
{
	int b = 0;
	while (b < o0->rank && o0->shape[b] == c0->shape[b])
		b++;
	if (b == o0->rank)
		return -1;
	if (n->op == IR_OP_SCATTER_ADD || n->op == IR_OP_EXPAND) {
		/* expand aligns its operand's dims right (numpy) */
		int j = n->op == IR_OP_EXPAND ? b + n->rank - o0->rank : b;
		return j >= 0 && j < n->rank && n->shape[j] % M == 0 ? j : -1;
	}
	if (n->op == IR_OP_SUM_TO)
		return n->rank >= 1 && n->shape[0] % M == 0 ? 0 : -1;
	int64_t pre = 1, at = 1;
	for (int j = 0; j < b; j++)
		pre *= o0->shape[j];
	for (int j = 0; j < n->rank; j++) {
		if (at == pre && n->shape[j] % M == 0 && n->shape[j] >= M)
			return j;
		at *= n->shape[j];
		if (at > pre)
			break;
	}
	return -1;
}

/* Records on c, micro-batch k's copy of dropout n, where its elements sit
 * in the full batch; B: the inputs' batch size (0: they differ). */
static void dropout_rows(IrModule *out, const IrNode *n, IrNode *c, int64_t M, int64_t k,
                         int64_t B)
{
	int bdim = -1;
	for (int j = 0; j < n->rank; j++) {
		if (c->shape[j] == n->shape[j])
			continue;
		if (bdim >= 0 || c->shape[j] * M != n->shape[j])
			return; /* not a batch dim we can name */
		bdim = j;
	}
	if (bdim < 0)
		return;
	IrAttrDropout *a = ir_attr_dropout_mut(out, c);
	a->has_mb = true;
	a->mbs = M;
	a->mb = k;
	a->bdim = bdim;
	a->binner = B > 0 && n->shape[bdim] % B == 0 ? n->shape[bdim] / B : 1;
}

/* The setting's location for the error, the input's in a note. */
static bool refuse(const IrModule *m, Diag *d, const IrNode *n, const char *msg)
{
	SrcLoc at = m->train.loc[IR_TRAIN_MICROBATCHES];
	diag_error(d, at.file ? at : n->loc, "microbatches %lld: %s",
	           (long long)m->train.microbatches, msg);
	if (at.file && n->loc.file)
		diag_note(d, n->loc, "%s is declared here", n->name ? n->name : "the input");
	return false;
}

bool pass_microbatch_check(const IrModule *m, Diag *d)
{
	int64_t M = m->train.microbatches;
	if (M <= 1 || m->nnodes == 0)
		return true;
	SrcLoc at = m->train.loc[IR_TRAIN_MICROBATCHES];
	if (m->loss < 0) {
		diag_error(d, at, "microbatches %lld: the program has no loss", (long long)M);
		return false;
	}
	int nn = m->nnodes;
	bool *dep = calloc((size_t)nn, sizeof(bool));
	if (!dep) {
		diag_error(d, (SrcLoc){0}, "microbatch: out of memory");
		return false;
	}
	bool ok = true;
	for (int i = 0; ok && i < nn; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_INPUT) {
			dep[i] = true;
			if (n->rank < 1 || n->rank >= IR_MAX_RANK || n->shape[0] % M) {
				char msg[256];
				snprintf(msg, sizeof msg, "input %s's batch dim (dim 0, %lld) does not divide "
				         "into %lld micro-batches", n->name ? n->name : "?",
				         (long long)(n->rank ? n->shape[0] : 0), (long long)M);
				ok = refuse(m, d, n, msg);
			}
		}
		for (int k = 0; k < n->nops; k++)
			dep[i] = dep[i] || dep[n->ops[k]];
	}
	if (ok && !dep[m->loss])
		ok = refuse(m, d, m->nodes[m->loss], "the loss does not depend on any input");
	/* the unrolled program's size, before the pass sizes its tables by M:
	 * the shared nodes once, per micro-batch a clone of every node that
	 * depends on an input, 3 slicing nodes per input, an add of losses */
	int64_t per = 1, once = 0;
	for (int i = 0; i < nn; i++)
		if (!dep[i] || m->nodes[i]->op == IR_OP_INPUT)
			once++;
	for (int i = 0; i < nn; i++)
		per += !dep[i] ? 0 : m->nodes[i]->op == IR_OP_INPUT ? 3 : 1;
	if (ok && (M > (IR_MAX_NODES - once) / per || (int64_t)nn * M > IR_MAX_NODES)) {
		diag_error(d, at, "microbatches %lld: the program unrolled %lld times would have "
		           "some %lld nodes, more than the %d a program may have", (long long)M,
		           (long long)M, (long long)(once + per * M), IR_MAX_NODES);
		ok = false;
	}
	free(dep);
	return ok;
}

bool pass_microbatch(IrModule *m, Diag *d, const PassOptions *opt)
{
	int64_t M = m->train.microbatches;
	if (M <= 1 || m->nnodes == 0)
		return true;
	/* before anything is sized by M */
	if (!pass_microbatch_check(m, d))
		return false;
	char what[32];
	snprintf(what, sizeof what, "%lld", (long long)M);
	int nn = m->nnodes;
	bool *dep = calloc((size_t)nn, sizeof(bool));
	int *map = malloc(sizeof(int) * (size_t)nn * (size_t)M); /* [k * nn + i] */
	int *ops = malloc(sizeof(int) * (size_t)(nn + 2));
	int *base = malloc(sizeof(int) * (size_t)nn); /* the shared copy of a node */
	/* per new node: the old node it copies and which micro-batch's */
	size_t cap = (size_t)nn * (size_t)(M + 1) + 4 * (size_t)nn * (size_t)M + (size_t)M + 8;
	int *orig = malloc(sizeof(int) * cap), *origk = malloc(sizeof(int) * cap);
	IrModule *out = ir_module_derive(m);
	int64_t batch = -1; /* the inputs' batch size, 0 if they differ (dropout_rows) */
	bool ok = dep && map && ops && base && orig && origk && out;
	if (!ok) {
		diag_error(d, (SrcLoc){0}, "microbatch: out of memory");
		goto done;
	}
	for (int i = 0; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		dep[i] = n->op == IR_OP_INPUT;
		if (dep[i])
			batch = batch < 0 || (n->rank && batch == n->shape[0]) ? n->shape[0] : 0;
		for (int k = 0; k < n->nops; k++)
			dep[i] = dep[i] || dep[n->ops[k]];
	}
	/* the shared nodes, once */
	for (int i = 0; ok && i < nn; i++) {
		const IrNode *n = m->nodes[i];
		if (dep[i] && n->op != IR_OP_INPUT)
			continue;
		for (int k = 0; k < n->nops; k++)
			ops[k] = base[n->ops[k]];
		IrNode *c = ir_node_new(out, n->op, ops, n->nops, n->loc);
		if (!c) {
			ok = false;
			break;
		}
		int id = c->id, *cops = c->ops;
		*c = *n;
		c->id = id;
		c->ops = cops;
		ir_annots_copy(out, id, m, i);
		orig[id] = i;
		origk[id] = 0;
		base[i] = id;
		for (int k = 0; k < M; k++)
			map[k * nn + i] = id;
	}
	/* per micro-batch: the input slices, then the clones */
	for (int64_t k = 0; ok && k < M; k++) {
		int *mk = map + k * nn;
		for (int i = 0; ok && i < nn; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op != IR_OP_INPUT)
				continue;
			int x = base[i];
			IrNode *r1 = ir_node_new(out, IR_OP_RESHAPE, &x, 1, n->loc);
			if (!r1) {
				ok = false;
				break;
			}
			r1->dtype = n->dtype;
			r1->rank = n->rank + 1;
			r1->shape[0] = n->shape[0] / M;
			r1->shape[1] = M;
			for (int j = 1; j < n->rank; j++)
				r1->shape[j + 1] = n->shape[j];
			ir_set_place_from(out, r1, x);
			int y = r1->id;
			IrNode *s = ir_node_new(out, IR_OP_SLICE, &y, 1, n->loc);
			if (!s) {
				ok = false;
				break;
			}
			s->dtype = n->dtype;
			*ir_attr_slice_mut(out, s) = (IrAttrSlice){1, k, k + 1};
			s->rank = r1->rank;
			memcpy(s->shape, r1->shape, sizeof s->shape);
			s->shape[1] = 1;
			ir_set_place_from(out, s, y);
			int z = s->id;
			IrNode *r2 = ir_node_new(out, IR_OP_RESHAPE, &z, 1, n->loc);
			if (!r2) {
				ok = false;
				break;
			}
			r2->dtype = n->dtype;
			r2->rank = n->rank;
			memcpy(r2->shape, n->shape, sizeof r2->shape);
			r2->shape[0] /= M;
			ir_set_place_from(out, r2, z);
			/* the micro-batch is split as its input is (DDP's [dp, _]):
			 * the same placement as the slicing gives where B/M divides
			 * by the split; where it does not, the input's rows do not
			 * carry over to the micro-batch's and it would otherwise be
			 * whole on every rank, the data parallelism lost */
			if (n->place) {
				r2->place = n->place;
				ir_set_place_from(out, r2, -1);
				ir_set_place_loc(out, r2, ir_place_loc(m, n));
			}
			mk[i] = r2->id;
			for (int id = r1->id; id <= r2->id; id++) {
				orig[id] = -1;
				ir_set_mb(out, out->nodes[id], (int)k);
				ir_set_stage(out, out->nodes[id], ir_stage(m, n));
			}
		}
		for (int i = 0; ok && i < nn; i++) {
			const IrNode *n = m->nodes[i];
			if (!dep[i] || n->op == IR_OP_INPUT)
				continue;
			for (int j = 0; j < n->nops; j++)
				ops[j] = mk[n->ops[j]];
			IrNode *c = ir_node_new(out, n->op, ops, n->nops, n->loc);
			if (!c) {
				ok = false;
				break;
			}
			int id = c->id, *cops = c->ops;
			*c = *n;
			c->id = id;
			c->ops = cops;
			ir_annots_copy(out, id, m, i);
			orig[id] = i;
			origk[id] = (int)k;
			ir_set_mb(out, c, (int)k);
			/* every micro-batch's copy of a variable is that variable
			 * (its mb says which); the loss is the sum's alone */
			if (i == m->loss) {
				ir_set_label(out, c, c->name);
				c->name = NULL;
				c->role = IR_ROLE_ACT;
			}
			/* ops whose node carries its shape: the batch dim shrinks
			 * with the operand's */
			if (n->nops >= 1) {
				const IrNode *o0 = m->nodes[n->ops[0]], *c0 = out->nodes[ops[0]];
				int64_t ratio = ir_node_numel(c0) ? ir_node_numel(o0) / ir_node_numel(c0) : 1;
				if (n->op == IR_OP_CAST) {
					memcpy(c->shape, c0->shape, sizeof c->shape);
				} else if ((n->op == IR_OP_RESHAPE || n->op == IR_OP_EXPAND ||
				            n->op == IR_OP_SUM_TO || n->op == IR_OP_SCATTER_ADD) &&
				           ratio == M) {
					int j = batch_dim_of(n, o0, c0, M);
					if (j < 0) {
						ok = fail(d, n, what, "a reshape of a micro-batch whose batch "
						          "dim is merged with a dim before it");
						break;
					}
					c->shape[j] = n->shape[j] / M;
				}
			}
			char msg[512];
			if (!ir_infer_msg(out, c, msg, sizeof msg)) {
				ok = fail(d, n, what, msg);
				break;
			}
			if (n->op == IR_OP_DROPOUT)
				dropout_rows(out, n, c, M, k, batch);
			mk[i] = id;
		}
	}
	if (ok) {
		/* loss = (loss_0 + ... + loss_{M-1}) / M */
		const IrNode *L = m->nodes[m->loss];
		int acc = map[m->loss];
		for (int64_t k = 1; ok && k < M; k++) {
			int ab[2] = {acc, map[k * nn + m->loss]};
			IrNode *a = ir_node_new(out, IR_OP_ADD, ab, 2, L->loc);
			ok = a != NULL;
			if (ok) {
				a->dtype = L->dtype;
				ir_set_stage(out, a, ir_stage(m, L));
				char msg[512];
				if (!ir_infer_msg(out, a, msg, sizeof msg))
					ok = fail(d, L, what, msg);
				acc = a->id;
				orig[acc] = -1;
			}
		}
		IrNode *f = ok ? ir_node_new(out, IR_OP_SCALE, &acc, 1, L->loc) : NULL;
		if (ok && f) {
			ir_attr_scalar_mut(out, f)->value = 1.0 / (double)M;
			f->dtype = L->dtype;
			char msg[512];
			if (!ir_infer_msg(out, f, msg, sizeof msg))
				ok = fail(d, L, what, msg);
			f->name = L->name;
			f->role = L->role;
			f->place = L->place;
			ir_set_place_from(out, f, ir_place_from(m, L) < 0 ? -1 : acc);
			ir_set_place_loc(out, f, ir_place_loc(m, L));
			ir_set_stage(out, f, ir_stage(m, L));
			orig[f->id] = -1;
			m->loss = f->id;
		} else if (ok) {
			ok = false;
		}
	}
	if (ok) {
		/* origins: a copy's origin is the same micro-batch's copy of it
		 * (the shared copy for shared nodes) */
		for (int id = 0; id < out->nnodes; id++) {
			IrNode *c = out->nodes[id];
			if (orig[id] < 0)
				continue;
			int o = ir_place_from(out, c), to = -1, lp = ir_link_param(out, c);
			if (o >= 0 && o < nn)
				to = dep[o] && m->nodes[o]->op != IR_OP_INPUT ? map[origk[id] * nn + o]
				                                              : base[o];
			ir_set_place_from(out, c, to == id ? -1 : to);
			if (lp >= 0 && lp < nn) /* a param: shared */
				ir_set_link_param(out, c, base[lp]);
		}
		for (int c = 0; c < m->nchooses; c++) {
			int o = m->chooses[c].node;
			m->chooses[c].node = dep[o] && m->nodes[o]->op != IR_OP_INPUT ? map[o] : base[o];
		}
		ir_module_take_nodes(m, out);
		if (opt && opt->verbose)
			fprintf(stderr, "dtmc: microbatch: the forward pass unrolled over %lld "
			        "micro-batches (%d -> %d nodes)\n", (long long)M, nn, m->nnodes);
	} else if (!d->nerr) {
		diag_error(d, (SrcLoc){0}, "microbatch: out of memory");
	}
done:
	free(dep);
	free(map);
	free(ops);
	free(base);
	free(orig);
	free(origk);
	return ok;
}
