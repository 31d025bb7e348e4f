/* attr.c - node attributes: the tagged union's writes, its zero values,
 * and its content as words for keys.
 *
 * A node points at its IrAttr (NULL: the kind's zero), which is never
 * written once a node points at it: ir_node_copy and ir_module_clone
 * share it, and a pass that changes a node's attributes gets a fresh copy
 * (ir_attr_mut) first.
 */
#include "ir/ir.h"

#include <string.h>

const IrAttr ir_attr_zero[IR_ATTR_KIND_COUNT] = {
#define Z(k) [k] = {.kind = k}
	Z(IR_ATTR_NONE),  Z(IR_ATTR_INIT),  Z(IR_ATTR_SCALAR), Z(IR_ATTR_AXES),
	Z(IR_ATTR_AXIS),  Z(IR_ATTR_EPS),   Z(IR_ATTR_PERM),   Z(IR_ATTR_SLICE),
	Z(IR_ATTR_ATTN),  Z(IR_ATTR_DROPOUT), Z(IR_ATTR_COLL), Z(IR_ATTR_OPTIM),
	Z(IR_ATTR_ROPE),  Z(IR_ATTR_ROUTE),
#undef Z
};

IrAttr *ir_attr_mut(IrModule *m, IrNode *n, IrAttrKind k)
{
	assert(ir_op_attr_kind(n->op) == k);
	IrAttr *a = arena_alloc_raw(m->arena, sizeof *a);
	if (!a) {
		m->oom = true;
		m->sink = ir_attr_zero[k];
		return &m->sink;
	}
	if (n->attr && n->attr->kind == k)
		*a = *n->attr;
	else
		*a = ir_attr_zero[k];
	n->attr = a;
	return a;
}

static uint64_t bits(double v)
{
	uint64_t u;
	memcpy(&u, &v, sizeof u);
	return u;
}

int ir_attr_words(const IrNode *n, int64_t *w)
{
	/* none stored reads as the op's zero, as ir_attr_get has it */
	const IrAttr *a = n->attr ? n->attr : &ir_attr_zero[ir_op_attr_kind(n->op)];
	int k = 0;
	w[k++] = (int64_t)a->kind;
	switch (a->kind) {
	case IR_ATTR_NONE:
	case IR_ATTR_KIND_COUNT:
		break;
	case IR_ATTR_INIT:
		w[k++] = a->init.kind;
		w[k++] = (int64_t)bits(a->init.arg[0]);
		w[k++] = (int64_t)bits(a->init.arg[1]);
		break;
	case IR_ATTR_SCALAR:
		w[k++] = (int64_t)bits(a->scalar.value);
		break;
	case IR_ATTR_AXES:
		w[k++] = a->axes.n | (int64_t)a->axes.keepdims << 32;
		for (int i = 0; i < a->axes.n && i < IR_MAX_INTS; i++)
			w[k++] = a->axes.axes[i];
		break;
	case IR_ATTR_AXIS:
		w[k++] = a->axis.axis;
		break;
	case IR_ATTR_EPS:
		w[k++] = (int64_t)bits(a->eps.eps);
		break;
	case IR_ATTR_PERM:
		w[k++] = a->perm.n;
		for (int i = 0; i < a->perm.n && i < IR_MAX_INTS; i++)
			w[k++] = a->perm.perm[i];
		break;
	case IR_ATTR_SLICE:
		w[k++] = a->slice.axis;
		w[k++] = a->slice.start;
		w[k++] = a->slice.end;
		break;
	case IR_ATTR_ATTN:
		w[k++] = a->attn.heads;
		w[k++] = a->attn.causal;
		w[k++] = a->attn.kv_heads;
		w[k++] = a->attn.window;
		/* the three masks (IR_MAX_AXES bits each) in one word: 10 words
		 * in all (IR_ATTR_WORDS) */
		w[k++] = (int64_t)a->attn.head_axes | (int64_t)a->attn.head_minor << 16 |
		         (int64_t)a->attn.ring << 32;
		w[k++] = a->attn.step;
		w[k++] = a->attn.balanced;
		w[k++] = a->attn.seq;
		w[k++] = a->attn.lse;
		break;
	case IR_ATTR_DROPOUT:
		w[k++] = (int64_t)bits(a->dropout.rate);
		w[k++] = a->dropout.salt;
		w[k++] = a->dropout.has_mb;
		if (a->dropout.has_mb) {
			w[k++] = a->dropout.mbs;
			w[k++] = a->dropout.mb;
			w[k++] = a->dropout.bdim;
			w[k++] = a->dropout.binner;
		}
		break;
	case IR_ATTR_COLL:
		w[k++] = (int64_t)a->coll.axes | (int64_t)a->coll.red << 32 | (int64_t)a->coll.n << 40;
		for (int i = 0; i < a->coll.n && i < IR_MAX_INTS; i++)
			w[k++] = a->coll.args[i];
		break;
	case IR_ATTR_OPTIM:
		w[k++] = (int64_t)bits(a->optim.beta1);
		w[k++] = (int64_t)bits(a->optim.beta2);
		w[k++] = (int64_t)bits(a->optim.eps);
		w[k++] = (int64_t)bits(a->optim.momentum);
		w[k++] = (int64_t)bits(a->optim.weight_decay);
		w[k++] = (int64_t)bits(a->optim.clip);
		w[k++] = a->optim.nesterov | a->optim.master << 1;
		break;
	case IR_ATTR_ROPE:
		w[k++] = a->rope.heads;
		w[k++] = (int64_t)bits(a->rope.theta);
		w[k++] = (int64_t)a->rope.axes | (int64_t)a->rope.inverse << 32;
		break;
	case IR_ATTR_ROUTE:
		w[k++] = a->route.k;
		w[k++] = a->route.n;
		w[k++] = a->route.capacity;
		w[k++] = a->route.stats;
		w[k++] = a->route.replicas;
		break;
	}
	return k;
}

bool ir_attr_set(IrModule *m, IrNode *n, const IrAttr *a)
{
	if (!a) {
		n->attr = NULL;
		return true;
	}
	if (n->attr == a)
		return true;
	IrAttr *c = arena_alloc_raw(m->arena, sizeof *c);
	if (!c) {
		m->oom = true;
		return false;
	}
	*c = *a;
	n->attr = c;
	return true;
}
