/* rebuild.c - rewriting a per-rank module node by node (see rebuild.h).
 *
 * Adopting moves the old node itself into the new list rather than a
 * copy (the old list is dropped), so a pass reads old nodes by index only
 * for the fields adopting leaves alone, and their annotations by their old
 * id in m.  A place_from that points at a node not in out yet is remapped
 * at the end.
 */
#include "passes/rebuild.h"

#include <stdlib.h>
#include <string.h>

bool rb_begin(Rebuild *rb, IrModule *m, Diag *d, const char *pass, size_t room)
{
	int nn = m->nnodes;
	*rb = (Rebuild){.m = m, .d = d, .pass = pass};
	rb->out = ir_module_derive(m);
	rb->map = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
	rb->later = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
	if (room > IR_MAX_NODES)
		room = IR_MAX_NODES;
	if (room < 1)
		room = 1;
	bool ok = rb->out && rb->map && rb->later;
	if (ok) {
		rb->out->nodes = arena_alloc_raw(m->arena, sizeof *rb->out->nodes * room);
		rb->out->cap = (int)room;
		ok = rb->out->nodes != NULL;
	}
	if (!ok) {
		diag_error(d, (SrcLoc){0}, "%s: out of memory", pass);
		free(rb->map);
		free(rb->later);
		rb->map = rb->later = NULL;
		return false;
	}
	for (int i = 0; i < nn; i++)
		rb->map[i] = -1;
	return true;
}

bool rb_adopt(Rebuild *rb, int i)
{
	IrNode *x = rb->m->nodes[i];
	IrModule *out = rb->out;
	if (out->nnodes == out->cap && out->nnodes < IR_MAX_NODES) {
		/* grown as ir_node_new would */
		int cap = out->cap ? 2 * out->cap : 64;
		IrNode **v = arena_alloc_raw(out->arena, sizeof *v * (size_t)cap);
		if (v) {
			if (out->nnodes)
				memcpy(v, out->nodes, sizeof *v * (size_t)out->nnodes);
			out->nodes = v;
			out->cap = cap;
		}
	}
	if (out->nnodes >= out->cap || out->nnodes >= IR_MAX_NODES) {
		diag_error(rb->d, x->loc, "%s: out of memory", rb->pass);
		return false;
	}
	for (int k = 0; k < x->nops; k++)
		x->ops[k] = rb->map[x->ops[k]];
	if (!x->nops)
		x->ops = NULL;
	int id = out->nnodes++;
	out->nodes[id] = x;
	x->id = id;
	rb->map[i] = id;
	ir_annots_copy(out, id, rb->m, i);
	int lp = ir_link_param(out, x);
	if (lp >= 0) /* a param, in out already: it comes before what reads it */
		ir_set_link(out, x, lp < i ? ir_link(out, x) : IR_LINK_NONE, lp < i ? rb->map[lp] : -1);
	int pf = ir_place_from(out, x), nn = rb->m->nnodes;
	if (pf >= 0 && pf < nn) {
		if (pf > i || rb->map[pf] < 0) {
			rb->later[rb->nlater++] = i;
			return true;
		}
		pf = rb->map[pf];
	}
	if (pf < -1 || pf == id)
		pf = -1;
	ir_set_place_from(out, x, pf);
	return true;
}

bool rb_infer(Rebuild *rb, IrNode *x, SrcLoc loc)
{
	char msg[512];
	if (ir_infer_msg(rb->out, x, msg, sizeof msg))
		return true;
	pass_fault(rb->m, rb->d, loc, "%s: %s: %s", rb->pass, ir_op_name(x->op), msg);
	return false;
}

IrNode *rb_add(Rebuild *rb, IrOp op, const int *ops, int nops, int like_id, bool infer)
{
	const IrNode *like = rb->m->nodes[like_id];
	IrNode li = {.id = like_id};
	IrNode *n = ir_node_new(rb->out, op, ops, nops, like->loc);
	if (!n) {
		diag_error(rb->d, like->loc, "%s: out of memory", rb->pass);
		return NULL;
	}
	n->dtype = like->dtype;
	ir_set_stage(rb->out, n, ir_stage(rb->m, &li));
	ir_set_block(rb->out, n, ir_block(rb->m, &li));
	ir_set_place_from(rb->out, n, nops ? ops[0] : -1);
	if (infer && !rb_infer(rb, n, like->loc))
		return NULL;
	return n;
}

void rb_take(Rebuild *rb, IrNode *x, int g)
{
	const IrNode *gn = rb->m->nodes[g];
	IrNode go = {.id = g};
	x->name = gn->name;
	x->role = gn->role;
	x->place = gn->place;
	for (int d = 0; d < IR_MAX_RANK; d++)
		ir_set_padded(rb->out, x, d, ir_padded(rb->m, &go, d));
	ir_set_choose(rb->out, x, ir_choose(rb->m, &go));
	ir_set_place_loc(rb->out, x, ir_place_loc(rb->m, &go));
	int lp = ir_link_param(rb->m, &go);
	ir_set_link(rb->out, x, ir_link(rb->m, &go), lp >= 0 ? rb->map[lp] : -1);
	rb->map[g] = x->id;
}

void rb_flat_place(IrModule *out, IrNode *x, uint32_t partial, IrRed op)
{
	Placement p;
	placement_replicated(&p, x->rank);
	p.partial = partial;
	p.partial_op = partial ? op : IR_RED_SUM;
	ir_place_set(out, x, &p); /* out of memory: the verifier says */
}

bool rb_finish(Rebuild *rb, bool ok)
{
	IrModule *m = rb->m;
	if (ok) {
		/* the origins rb_adopt could not remap yet */
		for (int j = 0; j < rb->nlater; j++) {
			IrNode *x = rb->out->nodes[rb->map[rb->later[j]]];
			int pf = rb->map[ir_place_from(rb->out, x)];
			ir_set_place_from(rb->out, x, pf < -1 || pf == x->id ? -1 : pf);
		}
		m->loss = m->loss >= 0 ? rb->map[m->loss] : -1;
		for (int c = 0; c < m->nchooses; c++)
			m->chooses[c].node = rb->map[m->chooses[c].node];
		ir_module_take_nodes(m, rb->out);
	} else if (!rb->d->nerr) {
		diag_error(rb->d, (SrcLoc){0}, "%s: out of memory", rb->pass);
	}
	free(rb->map);
	free(rb->later);
	rb->map = rb->later = NULL;
	return ok;
}
