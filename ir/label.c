/* label.c - what a value is, in the source's terms, for people.
 *
 * `dtmc inspect` says which tensor each collective, send and recv moves;
 * autodiff labels each gradient with the value it is the gradient of.
 * Both describe a value by what the model file calls it: its name (the
 * user's variable in its block instance, layer.1.h; a param; grad.wte),
 * else its label (a gradient: grad.layer.0.x), else the value it is a
 * view, cast, shard or collective of (an all_gather of wte moves wte),
 * else the op that computed it over its operands so described, with the
 * source location: "matmul(layer.0.h, layer.0.wproj) at gpt.dtm:50:11".
 * Never its SSA id, which differs between micro-batches and between
 * passes: operands nested deeper than LABEL_DEPTH print as "op(...)".
 */
#include "ir/ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LABEL_DEPTH 2 /* nested operand expressions shown */
#define LABEL_ARGS 3  /* operands shown per op, then ", ..." */

typedef struct Out {
	char *buf;
	size_t cap, len;
} Out;

static void put(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(Out *o, const char *fmt, ...)
{
	if (o->len + 1 >= o->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (w > 0)
		o->len = o->len + (size_t)w < o->cap ? o->len + (size_t)w : o->cap - 1;
}

/* Ops whose result is their operand 0's value moved, viewed, cast,
 * padded or (in place) updated: a name found through them is the value's. */
static bool passthrough(const IrNode *n)
{
	if (n->nops < 1)
		return false;
	switch (n->op) {
	case IR_OP_RESHAPE:
	case IR_OP_PERMUTE:
	case IR_OP_CAST:
	case IR_OP_SLICE:
	case IR_OP_SHARD_SLICE:
	case IR_OP_PAD:
	case IR_OP_PAD_MASK:
		return true;
	default:
		return (ir_op_flags(n->op) & OPF_COLL) || ir_op_is_update(n->op);
	}
}

int ir_label_source(const IrModule *m, int x)
{
	const IrNode *n = m->nodes[x];
	while (!n->name && !ir_label(m, n) && passthrough(n))
		n = m->nodes[n->ops[0]];
	return n->id;
}

/* Writes the description of value x; returns the node whose op it wrote
 * as an expression (its location is the caller's to add), or -1 for a
 * name or label. */
static int describe(const IrModule *m, int x, int depth, Out *o)
{
	int y = ir_label_source(m, x);
	const IrNode *n = m->nodes[y];
	if (n->name || ir_label(m, n)) {
		put(o, "%s", n->name ? n->name : ir_label(m, n));
		return -1;
	}
	put(o, "%s(", ir_op_name(n->op));
	if (depth >= LABEL_DEPTH && n->nops > 0) {
		put(o, "...)");
		return y;
	}
	for (int i = 0; i < n->nops && i < LABEL_ARGS; i++) {
		put(o, "%s", i ? ", " : "");
		describe(m, n->ops[i], depth + 1, o);
	}
	put(o, "%s)", n->nops > LABEL_ARGS ? ", ..." : "");
	return y;
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;
	return s ? s + 1 : path ? path : "?";
}

static void put_loc(Out *o, const IrNode *n)
{
	if (n->loc.file)
		put(o, " at %s:%d:%d", base_name(n->loc.file), n->loc.line, n->loc.col);
}

size_t ir_value_label(const IrModule *m, int x, char *buf, size_t cap)
{
	Out o = {.buf = buf, .cap = cap};
	if (!cap)
		return 0;
	buf[0] = 0;
	int e = describe(m, x, 0, &o);
	if (e >= 0)
		put_loc(&o, m->nodes[e]);
	return o.len;
}

size_t ir_grad_label(const IrModule *m, int x, char *buf, size_t cap)
{
	Out o = {.buf = buf, .cap = cap};
	if (!cap)
		return 0;
	buf[0] = 0;
	int y = ir_label_source(m, x);
	const IrNode *n = m->nodes[y];
	const char *s = n->name ? n->name : ir_label(m, n);
	if (s && strncmp(s, "grad", 4) != 0) {
		put(&o, "grad.%s", s);
		return o.len;
	}
	/* an expression, or the gradient of a gradient */
	put(&o, "grad(");
	int e = describe(m, y, 0, &o);
	put(&o, ")");
	if (e >= 0)
		put_loc(&o, m->nodes[e]);
	return o.len;
}
