/* clone.c - a deep copy of a module, so a caller can run the rest of the
 * pass pipeline on several copies of one prefix (`dtmc sweep` lowers and
 * propagates once per mesh and runs state, partition, pipeline ... on a
 * copy per ZeRO stage, schedule and recompute setting).
 *
 * Nodes, their operand lists, the placement table and the choose() points
 * are copied into the destination arena; strings (names, the train
 * section's words, the mesh's axis names, source locations) are shared
 * with the source, whose arena must outlive the copy.  Passes never write
 * into a string they did not allocate, so sharing them is safe.
 */
#include "ir/ir.h"

#include <string.h>

IrModule *ir_module_clone(Arena *a, const IrModule *m)
{
	IrModule *c = arena_alloc(a, sizeof *c);
	if (!c)
		return NULL;
	*c = *m;
	c->arena = a;
	c->places = ir_places_copy(a, m->places);
	if (!c->places || !ir_annots_clone(a, c, m))
		return NULL;
	c->capstage_notes = c->nstage_notes; /* shared: a note added copies them */
	int n = m->nnodes;
	/* room to grow by half again before ir_node_new copies the array */
	int cap = n + n / 2 + 64;
	if (cap > IR_MAX_NODES)
		cap = IR_MAX_NODES > n ? IR_MAX_NODES : n;
	size_t nops = 0;
	for (int i = 0; i < n; i++)
		nops += (size_t)m->nodes[i]->nops;
	/* every byte of the first n slots, the nodes and their operands is
	 * copied over below: only the spare slots need zeroing */
	c->nodes = arena_alloc_raw(a, sizeof *c->nodes * (size_t)(cap ? cap : 1));
	IrNode *body = n ? arena_alloc_raw(a, sizeof *body * (size_t)n) : NULL;
	int *ops = nops ? arena_alloc_raw(a, sizeof *ops * nops) : NULL;
	if (!c->nodes || (n && !body) || (nops && !ops))
		return NULL;
	if (cap > n)
		memset(c->nodes + n, 0, sizeof *c->nodes * (size_t)(cap - n));
	c->cap = cap;
	for (int i = 0; i < n; i++) {
		const IrNode *s = m->nodes[i];
		IrNode *d = &body[i];
		*d = *s;
		if (s->nops > 0) {
			memcpy(ops, s->ops, sizeof *ops * (size_t)s->nops);
			d->ops = ops;
			ops += s->nops;
		} else {
			d->ops = NULL;
		}
		c->nodes[i] = d;
	}
	if (m->nchooses > 0) {
		c->chooses = arena_alloc(a, sizeof *c->chooses * (size_t)m->nchooses);
		if (!c->chooses)
			return NULL;
		c->capchooses = m->nchooses;
		for (int k = 0; k < m->nchooses; k++) {
			c->chooses[k] = m->chooses[k];
			size_t sz = sizeof(Placement) * (size_t)m->chooses[k].nopts;
			Placement *o = arena_alloc(a, sz ? sz : 1);
			if (!o)
				return NULL;
			if (sz)
				memcpy(o, m->chooses[k].opts, sz);
			c->chooses[k].opts = o;
		}
	} else {
		c->chooses = NULL;
		c->capchooses = 0;
	}
	return c;
}
