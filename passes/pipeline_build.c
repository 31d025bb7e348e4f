/* pipeline_build.c - pass "pipeline": the ranks' entry lists made IR
 * nodes, one program per pp coordinate after another (materialise).
 */
#include "passes/pipeline_impl.h"

static void copy_type(IrNode *to, const IrNode *from)
{
	to->dtype = from->dtype;
	to->rank = from->rank;
	memcpy(to->shape, from->shape, sizeof to->shape);
	to->place = from->place;
}

/* A node of rank r's program like m's node i (read by i: the node itself
 * may be out's already, adopted, its id out's). */
static IrNode *new_node(Pl *p, IrModule *out, IrOp op, const int *ops, int nops, int i, int r,
                        int phase)
{
	const IrNode *like = p->m->nodes[i];
	IrNode li = {.id = i};
	IrNode *n = ir_node_new(out, op, ops, nops, like->loc);
	if (!n) {
		pl_oom(p);
		return NULL;
	}
	copy_type(n, like);
	ir_set_stage(out, n, r);
	ir_set_mb(out, n, ir_mb(p->m, &li));
	ir_set_block(out, n, ir_block(p->m, &li));
	ir_set_phase(out, n, phase);
	return n;
}

/* ir_node_copy without the copy: n itself (m's node i) becomes out's next
 * node, with the operands ops[0 .. nops), nops at most n's own (written
 * over them), and its annotations. */
static IrNode *adopt(IrModule *out, const IrModule *m, int i, IrNode *n, const int *ops,
                     int nops)
{
	if (out->nnodes >= IR_MAX_NODES)
		return NULL;
	if (out->nnodes == out->cap) {
		/* room was made for every node; grown as ir_node_new would */
		int cap = out->cap ? 2 * out->cap : 64;
		IrNode **v = arena_alloc_raw(out->arena, sizeof *v * (size_t)cap);
		if (!v)
			return NULL;
		if (out->nnodes)
			memcpy(v, out->nodes, sizeof *v * (size_t)out->nnodes);
		out->nodes = v;
		out->cap = cap;
	}
	if (nops > 0)
		memcpy(n->ops, ops, sizeof(int) * (size_t)nops);
	else
		n->ops = NULL;
	n->id = out->nnodes;
	n->nops = nops;
	out->nodes[out->nnodes++] = n;
	ir_annots_copy(out, n->id, m, i);
	return n;
}

/* Turns the entry lists into out's nodes, rank by rank.  mr: room for nn
 * ids, the node each of m's stands for on the rank being made. */
bool pl_materialise(Pl *p, IrModule *out, int *mr, int *loss_out)
{
	IrModule *m = p->m;
	int nn = p->nn;
	uint32_t ppm = 1u << p->ax;
	/* A node runs on every rank that places it, a copy each, but the
	 * last of those can have the node itself (lastr: that rank): most
	 * nodes run on one rank, and copying ~500 bytes a node was most of
	 * this pass's time.  Past that point nothing reads what the rank's
	 * version changes (id, operands, stage, phase, choose, place_from):
	 * sends, receives and syncs of the value copy its type, place, mb and
	 * location; the loss's name and role, which the rank holding the
	 * loss clears, are kept aside here. */
	const int *lastr = p->lastr;
	int *ops = arena_alloc_raw(&p->a, sizeof(int) * (size_t)(nn + 2));
	/* at most two nodes an entry (a param sync's recv and assign, the
	 * loss's zero and all_reduce): room in out for them all, made once */
	size_t room = 0;
	for (int r = 0; r < p->P; r++)
		room += 2 * (size_t)p->list[r].n;
	if (room > IR_MAX_NODES)
		room = IR_MAX_NODES;
	out->nodes = arena_alloc_raw(m->arena, sizeof *out->nodes * (room ? room : 1));
	out->cap = (int)room;
	if (!ops || !out->nodes)
		return pl_oom(p);
	/* mr[i] stands for i on rank r when it is at least base, the first
	 * id of r's nodes: -1 (or an earlier rank's) otherwise */
	for (int i = 0; i < nn; i++)
		mr[i] = -1;
	const char *loss_name = m->nodes[m->loss]->name;
	IrRole loss_role = m->nodes[m->loss]->role;
	for (int r = 0; r < p->P && !p->failed; r++) {
		const int base = out->nnodes;
#define MR(x) (mr[x] >= base ? mr[x] : -1)
		const EntList *l = &p->list[r];
		for (int j = 0; j < l->n && !p->failed; j++) {
			const Ent *e = &l->e[j];
			IrNode *n = m->nodes[e->node];
			if (e->kind == E_NODE) {
				int no = 0;
				for (int k = p->opstart[e->node]; k < p->opstart[e->node + 1]; k++)
					if (pl_reads(p, e->node, p->opv[k], r))
						ops[no++] = MR(p->opv[k]);
				for (int k = 0; k < no; k++)
					if (ops[k] < 0) {
						pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d reads a "
						           "value not on pp rank %d", ir_op_name(n->op),
						           e->node, r);
						p->failed = true;
						break;
					}
				if (p->failed)
					break;
				IrNode *c;
				if (n->op == IR_OP_GRAD_NORM && no == 0) {
					/* this rank owns no gradient of the group */
					c = new_node(p, out, IR_OP_CONST, NULL, 0, e->node, r, p->phase[e->node]);
					if (c)
						c->name = NULL;
				} else {
					/* the last rank's adopts n: the earlier ones copy it
					 * while its id is still m's */
					c = lastr[e->node] == r ? adopt(out, m, e->node, n, ops, no)
					                        : ir_node_copy(out, m, n, ops, no);
					if (!c) {
						pl_oom(p);
						break;
					}
					int id = c->id, pf = ir_place_from(out, c);
					ir_set_stage(out, c, r);
					ir_set_phase(out, c, p->phase[e->node]);
					ir_set_choose(out, c, -1);
					pf = pf >= 0 ? MR(pf) : -1;
					ir_set_place_from(out, c, pf == id ? -1 : pf);
				}
				if (!c)
					break;
				mr[e->node] = c->id;
			} else if (e->kind == E_SEND) {
				int x = MR(e->node);
				IrNode *c = x < 0 ? NULL : new_node(p, out, IR_OP_SEND, &x, 1, e->node, r,
				                                    p->syncof[e->node] >= 0
				                                        ? IR_PHASE_OPTIMIZER
				                                        : p->phase[e->node]);
				if (!c) {
					if (x < 0)
						pass_fault(p->m, p->d, n->loc, "pipeline: a send of %%%d "
						           "before it is computed", e->node);
					p->failed = true;
					break;
				}
				*ir_attr_coll_mut(out, c) = (IrAttrColl){.axes = ppm, .n = 1, .shift = e->peer - r};
			} else if (e->kind == E_RECV) {
				IrNode *c = new_node(p, out, IR_OP_RECV, NULL, 0, e->node, r, p->phase[e->node]);
				if (!c)
					break;
				*ir_attr_coll_mut(out, c) = (IrAttrColl){.axes = ppm, .n = 1, .shift = r - e->peer};
				mr[e->node] = c->id;
			} else if (e->kind == E_SYNC) {
				IrNode *c = new_node(p, out, IR_OP_RECV, NULL, 0, e->node, r, IR_PHASE_OPTIMIZER);
				if (!c)
					break;
				*ir_attr_coll_mut(out, c) = (IrAttrColl){.axes = ppm, .n = 1, .shift = r - e->peer};
				int ab[2] = { MR(e->node), c->id };
				if (ab[0] < 0)
					continue; /* the param is not on this rank after all */
				IrNode *a = new_node(p, out, IR_OP_ASSIGN, ab, 2, e->node, r, IR_PHASE_OPTIMIZER);
				if (!a)
					break;
				a->role = n->role;
				a->name = NULL;
			} else { /* E_LOSS */
				int x = MR(m->loss);
				IrNode *src = NULL;
				if (x < 0) {
					src = new_node(p, out, IR_OP_CONST, NULL, 0, e->node, r, IR_PHASE_FORWARD);
					if (!src)
						break;
					src->attr = NULL; /* 0 */
					src->name = NULL;
					src->role = IR_ROLE_ACT;
					x = src->id;
				} else {
					ir_set_label(out, out->nodes[x], out->nodes[x]->name);
					out->nodes[x]->name = NULL;
					out->nodes[x]->role = IR_ROLE_ACT;
				}
				IrNode *c = new_node(p, out, IR_OP_ALL_REDUCE, &x, 1, e->node, r, IR_PHASE_FORWARD);
				if (!c)
					break;
				*ir_attr_coll_mut(out, c) = (IrAttrColl){.axes = ppm, .red = IR_RED_SUM};
				c->name = loss_name;
				c->role = loss_role;
				ir_set_mb(out, c, -1);
				*loss_out = c->id;
			}
		}
		/* links to this rank's copy of the param (none: unlinked) */
		for (int id = base; id < out->nnodes && !p->failed; id++) {
			const IrNode *x = out->nodes[id];
			int lp = ir_link_param(out, x);
			if (lp >= 0 && MR(lp) >= 0)
				ir_set_link_param(out, x, MR(lp));
			else if (lp >= 0)
				ir_set_link(out, x, IR_LINK_NONE, -1);
		}
	}
#undef MR
	return !p->failed;
}
