/* inspect_dot.c - `dtmc inspect --dot FILE [--dot-scope SCOPE]` (see
 * inspect_impl.h).
 *
 * One graphviz graph of the partitioned programs of --rank's pipeline: per
 * stage, the program of the rank with --rank's other mesh coordinates
 * (Insp.rep), one node per IR value, in nested clusters stage >
 * micro-batch > block instance (layer.1, IrNode.block); the values of no
 * micro-batch (params, grads, optimizer state and updates) sit in their
 * stage, in their block's cluster.  A node's label is its id, op and name;
 * the global type with the placement ("f32[8, 32, 64] @ [dp, _, _]"); the
 * shard the rank stores ("local f32[4, 32, 64]"); and for a collective its
 * group, for a send or recv the peer rank.  A dashed edge joins each send
 * to its recv (the cost simulation's matching, Span.peer_action).  A
 * legend cluster shows the colours and shapes.
 *
 * --dot-scope keeps big models drawable: comma-separated terms stage=S,
 * mb=K and block instances (layer.1, or block=layer.1); terms of one kind
 * add up, kinds intersect ("layer.1,mb=0": layer.1's nodes of micro-batch
 * 0, in any stage).  Only the selected nodes are drawn, and a dashed stub
 * for each node outside that feeds one of them or reads one.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/inspect_impl.h"

/* ---- what a node is: its colour and shape, and the legend's rows ---- */

typedef enum DotKind {
	DK_COMPUTE,
	DK_INPUT, /* inputs and constants */
	DK_PARAM,
	DK_GRAD,
	DK_STATE,  /* optimizer state (and master weights) */
	DK_UPDATE, /* the optimizer's steps and the grad norm */
	DK_ALL_REDUCE,
	DK_ALL_GATHER,
	DK_REDUCE_SCATTER,
	DK_ALL_TO_ALL,
	DK_BROADCAST,
	DK_SEND,
	DK_RECV,
	DK_COUNT
} DotKind;

static const struct {
	const char *legend, *shape, *style, *fill;
} kinds[DK_COUNT] = {
	[DK_COMPUTE] = {"compute", "box", "filled", "white"},
	[DK_INPUT] = {"input, constant", "box", "rounded,filled", "#e0e0e0"},
	[DK_PARAM] = {"param", "box", "rounded,filled", "#b8e0b0"},
	[DK_GRAD] = {"grad (grad.P)", "box", "filled", "#f3ee9a"},
	[DK_STATE] = {"optimizer state", "box", "rounded,filled", "#b0c8e8"},
	[DK_UPDATE] = {"optimizer step, grad norm", "box", "filled", "#dce6f5"},
	[DK_ALL_REDUCE] = {"all_reduce", "hexagon", "filled", "#f4a6a6"},
	[DK_ALL_GATHER] = {"all_gather", "hexagon", "filled", "#c9b3e8"},
	[DK_REDUCE_SCATTER] = {"reduce_scatter", "hexagon", "filled", "#f7bde0"},
	[DK_ALL_TO_ALL] = {"all_to_all", "hexagon", "filled", "#a8dcd9"},
	[DK_BROADCAST] = {"broadcast", "hexagon", "filled", "#e6d2a8"},
	[DK_SEND] = {"send (to the next stage)", "cds", "filled", "#f8c77e"},
	[DK_RECV] = {"recv (dashed edge: from its send)", "cds", "filled", "#fbe0b4"},
};

static DotKind kind_of(const IrNode *n)
{
	switch (n->op) {
	case IR_OP_SEND: return DK_SEND;
	case IR_OP_RECV: return DK_RECV;
	case IR_OP_ALL_REDUCE: return DK_ALL_REDUCE;
	case IR_OP_ALL_GATHER: return DK_ALL_GATHER;
	case IR_OP_REDUCE_SCATTER: return DK_REDUCE_SCATTER;
	case IR_OP_ALL_TO_ALL: return DK_ALL_TO_ALL;
	case IR_OP_BROADCAST: return DK_BROADCAST;
	case IR_OP_PARAM: return DK_PARAM;
	case IR_OP_STATE: return DK_STATE;
	case IR_OP_ADAMW_STEP:
	case IR_OP_SGD_STEP:
	case IR_OP_GRAD_NORM: return DK_UPDATE;
	default: break;
	}
	if (ir_op_flags(n->op) & OPF_LEAF)
		return DK_INPUT;
	return n->role == IR_ROLE_GRAD ? DK_GRAD : DK_COMPUTE;
}

/* ---- text ---- */

/* A DOT string's body: quotes and backslashes escaped, newlines as \n. */
static void dot_str(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\n') {
			fputs("\\n", out);
			continue;
		}
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		fputc(*s, out);
	}
}

typedef struct Buf {
	char s[1024];
	size_t n;
} Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...)
{
	if (b->n >= sizeof b->s)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		b->n += (size_t)k;
}

/* The stage whose program node i is in. */
static int node_stage(const Insp *in, int i)
{
	int s = ir_stage(in->m, in->m->nodes[i]);
	return in->nstages > 1 && s >= 0 && s < in->nstages ? s : 0;
}

/* ---- block instances ---- */

/* "layer.3" when s starts with a block instance's prefix NAME.K. (lowering
 * names its params NAME.K.param, K counting the calls of block NAME), into
 * buf; false otherwise. */
static bool instance_prefix(const char *s, char *buf, size_t cap)
{
	const char *dot = s ? strchr(s, '.') : NULL;
	if (!dot || dot == s || dot[1] < '0' || dot[1] > '9')
		return false;
	const char *e = dot + 1;
	while (*e >= '0' && *e <= '9')
		e++;
	if (*e != '.' || (size_t)(e - s) >= cap)
		return false;
	memcpy(buf, s, (size_t)(e - s));
	buf[e - s] = 0;
	return true;
}

/* The name of each block instance: the NAME.K prefix of its first param,
 * else of its first named value outside grad.* and opt.*; "block.B" when
 * neither has one (IrNode.block numbers the instances; the IR keeps no
 * name for them). */
static const char **block_names(const Insp *in, int nb)
{
	const IrModule *m = in->m;
	const char **name = arena_alloc(in->a, sizeof *name * (size_t)(nb > 0 ? nb : 1));
	if (!name)
		return NULL;
	char buf[256];
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			/* a gradient's or optimizer state's name is its param's,
			 * prefixed */
			int b = ir_block(m, n);
			if (b < 0 || b >= nb || name[b] || !n->name ||
			    (pass == 0 && n->op != IR_OP_PARAM) || ir_link(m, n) != IR_LINK_NONE)
				continue;
			if (instance_prefix(n->name, buf, sizeof buf))
				name[b] = arena_printf(in->a, "%s", buf);
		}
	for (int b = 0; b < nb; b++)
		if (!name[b])
			name[b] = arena_printf(in->a, "block.%d", b);
	for (int b = 0; b < nb; b++)
		if (!name[b])
			return NULL;
	return name;
}

/* "layer.0 .. layer.11": runs of NAME.K with consecutive K shortened. */
static void list_blocks(Buf *b, const char **name, int nb)
{
	for (int i = 0; i < nb;) {
		const char *dot = strrchr(name[i], '.');
		size_t plen = dot ? (size_t)(dot - name[i]) : 0;
		int j = i;
		while (dot && j + 1 < nb) {
			const char *d2 = strrchr(name[j + 1], '.');
			if (!d2 || (size_t)(d2 - name[j + 1]) != plen ||
			    strncmp(name[j + 1], name[i], plen) != 0 ||
			    atol(d2 + 1) != atol(strrchr(name[j], '.') + 1) + 1)
				break;
			j++;
		}
		put(b, "%s%s", i ? ", " : "", name[i]);
		if (j > i)
			put(b, "%s%s", j > i + 1 ? " .. " : ", ", name[j]);
		i = j + 1;
	}
}

/* ---- --dot-scope ---- */

static int max_mb(const IrModule *m)
{
	int k = -1;
	for (int i = 0; i < m->nnodes; i++)
		if (ir_mb(m, m->nodes[i]) > k)
			k = ir_mb(m, m->nodes[i]);
	return k;
}

static bool int_term(const char *s, int lim, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < 0 || v >= lim)
		return false;
	*out = (int)v;
	return true;
}

bool inspect_dot_scope(Insp *in)
{
	const char *scope = in->o->dot_scope;
	in->dot_sel = NULL;
	if (!scope)
		return true;
	const IrModule *m = in->m;
	int nb = 0, nmb = max_mb(m) + 1;
	for (int i = 0; i < m->nnodes; i++)
		if (ir_block(m, m->nodes[i]) >= nb)
			nb = ir_block(m, m->nodes[i]) + 1;
	const char **bname = block_names(in, nb);
	bool *stage = arena_alloc(in->a, (size_t)in->nstages + 1);
	bool *mb = arena_alloc(in->a, (size_t)nmb + 1);
	bool *blk = arena_alloc(in->a, (size_t)nb + 1);
	char *copy = arena_printf(in->a, "%s", scope);
	in->dot_sel = arena_alloc(in->a, (size_t)m->nnodes + 1);
	if (!bname || !stage || !mb || !blk || !copy || !in->dot_sel) {
		fputs("dtmc: error: out of memory\n", stderr);
		return false;
	}
	bool any_stage = false, any_mb = false, any_blk = false;
	const char *bad = NULL;
	for (char *t = copy, *next; t && !bad; t = next) {
		next = strchr(t, ',');
		if (next)
			*next++ = 0;
		while (*t == ' ')
			t++;
		for (char *e = t + strlen(t); e > t && e[-1] == ' ';)
			*--e = 0;
		int k;
		if (strncmp(t, "stage=", 6) == 0 && int_term(t + 6, in->nstages, &k)) {
			stage[k] = any_stage = true;
		} else if (strncmp(t, "mb=", 3) == 0 && int_term(t + 3, nmb, &k)) {
			mb[k] = any_mb = true;
		} else {
			const char *name = strncmp(t, "block=", 6) == 0 ? t + 6 : t;
			int b = 0;
			while (b < nb && strcmp(bname[b], name) != 0)
				b++;
			if (b < nb)
				blk[b] = any_blk = true;
			else
				bad = t;
		}
	}
	int nsel = 0;
	for (int i = 0; !bad && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		bool s = !any_stage || stage[node_stage(in, i)];
		bool k = !any_mb || (ir_mb(m, n) >= 0 && ir_mb(m, n) < nmb && mb[ir_mb(m, n)]);
		bool b = !any_blk || (ir_block(m, n) >= 0 && ir_block(m, n) < nb && blk[ir_block(m, n)]);
		in->dot_sel[i] = s && k && b;
		nsel += in->dot_sel[i];
	}
	if (!bad && nsel > 0)
		return true;
	/* one line: what is wrong, and what would do */
	Buf valid = {.n = 0};
	put(&valid, "stage=%s", in->nstages > 1 ? "0.." : "");
	put(&valid, "%d", in->nstages - 1);
	if (nmb > 1)
		put(&valid, ", mb=0..%d", nmb - 1);
	else if (nmb == 1)
		put(&valid, ", mb=0");
	if (nb > 0) {
		put(&valid, ", ");
		list_blocks(&valid, bname, nb);
	}
	if (bad && !*bad)
		fprintf(stderr, "dtmc: error: --dot-scope '%s': an empty term; valid: %s "
		                "(comma-separated; terms of one kind add up, kinds intersect)\n",
		        scope, valid.s);
	else if (bad)
		fprintf(stderr, "dtmc: error: --dot-scope '%s': unknown scope '%s'; valid: %s "
		                "(comma-separated; terms of one kind add up, kinds intersect)\n",
		        scope, bad, valid.s);
	else
		fprintf(stderr, "dtmc: error: --dot-scope '%s' selects no node of rank %" PRId64
		                "'s pipeline; valid: %s\n", scope, in->o->rank, valid.s);
	return false;
}

/* ---- the graph ---- */

/* A node's clusters: its micro-batch and block within its stage. */
typedef struct NodePlace {
	int grp; /* 0: the program, 1: grads and optimizer */
	int mb, block, id;
} NodePlace;

typedef struct Dot {
	const Insp *in;
	FILE *out;
	const char **bname;
	int nb;
	int *peer;   /* per node: a recv's send, or -1 */
	bool *stub;  /* per node: drawn as a stub */
	bool *opt;   /* per node: a grad, optimizer state, or reads one */
	bool *leafy; /* per node: a param or constant, or computed from those alone */
} Dot;

static bool drawn(const Dot *g, int i)
{
	return !g->in->dot_sel || g->in->dot_sel[i];
}

/* s without the blanks after commas: "[dp,_,_]", narrower nodes. */
static void squeeze(char *s)
{
	char *w = s;
	for (const char *r = s; *r; r++)
		if (!(*r == ' ' && r > s && r[-1] == ','))
			*w++ = *r;
	*w = 0;
}

/* "f32[8,32,64] @ [dp,_,_]\nlocal f32[4,32,64]": the global type and the
 * placement, then the shard the rank stores (rank 0's chunk, padded for
 * uneven torch.chunk shards: IrNode.padded). */
static void types_text(const Insp *in, const IrNode *n, Buf *b)
{
	const IrModule *m = in->m;
	int64_t global[IR_MAX_RANK];
	bool padded = false;
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++) {
		global[d] = ir_global_dim(m, n, d);
		padded = padded || ir_padded(m, n, d) != 0;
	}
	char t[256], pl[256];
	ir_format_type(t, sizeof t, n->dtype, n->rank, global);
	placement_format(ir_place(m, n), &m->mesh, pl, sizeof pl);
	squeeze(t);
	squeeze(pl);
	put(b, "%s @ %s\n", t, pl);
	ir_format_type(t, sizeof t, n->dtype, n->rank, n->shape);
	squeeze(t);
	put(b, "local %s%s", t, padded ? " (padded)" : "");
}

static void node_label(const Dot *g, int i, Buf *b)
{
	const Insp *in = g->in;
	const DtmPlan *p = in->p;
	const IrNode *n = in->m->nodes[i];
	int64_t r = in->rep[node_stage(in, i)];
	put(b, "%%%d %s", i, ir_op_name(n->op));
	if ((n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER) && ir_attr_coll(n)->axes)
		put(b, " %s", ir_red_name(ir_attr_coll(n)->red));
	if (n->name)
		put(b, " %s", n->name);
	put(b, "\n");
	types_text(in, n, b);
	char ax[64], grp[128];
	if (n->op == IR_OP_SEND || n->op == IR_OP_RECV) {
		const IrAttrColl *c = ir_attr_coll(n);
		DtmAction a = {.kind = n->op == IR_OP_SEND ? DTM_ACT_SEND : DTM_ACT_RECV,
		               .axes = c->axes,
		               .peer_offset = c->n > 0 ? (int)c->shift : 0,
		               .peer_mirror = c->n > 1 && c->args[1]};
		put(b, "\n%s rank %" PRId64, n->op == IR_OP_SEND ? "to" : "from",
		    inspect_p2p_peer(p, r, &a));
	} else if (ir_op_flags(n->op) & OPF_COLL) {
		inspect_axes_text(p, ir_attr_coll(n)->axes, ax, sizeof ax);
		inspect_group_text(p, r, ir_attr_coll(n)->axes, grp, sizeof grp);
		put(b, "\nover %s: ranks %s", ax, grp);
	}
}

static void write_node(const Dot *g, int i)
{
	const IrNode *n = g->in->m->nodes[i];
	DotKind k = kind_of(n);
	Buf b = {.n = 0};
	node_label(g, i, &b);
	fprintf(g->out, "n%d [label=\"", i);
	dot_str(g->out, b.s);
	fprintf(g->out, "\", shape=%s, style=\"%s\", fillcolor=\"%s\"%s];\n", kinds[k].shape,
	        kinds[k].style, kinds[k].fill, n->role == IR_ROLE_LOSS ? ", penwidth=2.5" : "");
}

/* A node outside the scope that an edge of it reaches: id, op, name and
 * where it is. */
static void write_stub(const Dot *g, int i)
{
	const Insp *in = g->in;
	const IrNode *n = in->m->nodes[i];
	Buf b = {.n = 0};
	put(&b, "%%%d %s", i, ir_op_name(n->op));
	if (n->name)
		put(&b, " %s", n->name);
	put(&b, "\n(outside: ");
	if (in->nstages > 1)
		put(&b, "stage %d, ", node_stage(in, i));
	const IrModule *m = in->m;
	int blk = ir_block(m, n);
	if (ir_mb(m, n) >= 0)
		put(&b, "mb %d, ", ir_mb(m, n));
	put(&b, "%s)", blk >= 0 && blk < g->nb ? g->bname[blk] : "no block");
	fprintf(g->out, "x%d [label=\"", i);
	dot_str(g->out, b.s);
	fputs("\", shape=box, style=\"dashed\", color=\"#888888\", fontcolor=\"#555555\"];\n",
	      g->out);
}

/* The legend: a sample node per kind, four to a row, then how to read a
 * label. */
static void write_legend(const Dot *g)
{
	FILE *out = g->out;
	fputs("subgraph cluster_legend {\nlabel=\"legend\"; style=\"rounded\"; color=\"#999999\";\n",
	      out);
	enum { PER_ROW = 4 };
	for (int k = 0; k < DK_COUNT; k++) {
		fprintf(out, "legend%d [label=\"%s\", shape=%s, style=\"%s\", fillcolor=\"%s\"];\n", k,
		        kinds[k].legend, kinds[k].shape, kinds[k].style, kinds[k].fill);
		if (k >= PER_ROW)
			fprintf(out, "legend%d -> legend%d [style=invis];\n", k - PER_ROW, k);
	}
	int last = DK_COUNT;
	fprintf(out, "legend%d [label=\"loss\", shape=box, style=filled, fillcolor=white, "
	             "penwidth=2.5];\nlegend%d -> legend%d [style=invis];\n",
	        last, last - PER_ROW, last);
	fprintf(out,
	        "legend%d [label=\"outside --dot-scope (stub)\", shape=box, style=dashed, "
	        "color=\"#888888\", fontcolor=\"#555555\"];\nlegend%d -> legend%d [style=invis];\n",
	        last + 1, last + 1 - PER_ROW, last + 1);
	fprintf(out,
	        "legend_label [label=\"%%id op [reduction] name\\lglobal dtype[shape] @ "
	        "placement (mesh axes per dim)\\llocal dtype[shard this rank stores]\\l"
	        "collective: over axes: ranks [group]; send/recv: the peer rank\\l\", "
	        "shape=note, style=filled, fillcolor=\"#fafafa\"];\n"
	        "legend%d -> legend_label [style=invis];\n}\n",
	        last + 2 - PER_ROW);
}

/* Node order within a stage: by group, micro-batch and block (none
 * first), then id, so that each cluster's nodes come together. */
static int cmp_place(const void *a, const void *b)
{
	const NodePlace *x = a, *y = b;
	if (x->grp != y->grp)
		return x->grp < y->grp ? -1 : 1;
	if (x->mb != y->mb)
		return x->mb < y->mb ? -1 : 1;
	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Where node i goes.  The gradients and the optimizer (a grad, optimizer
 * state, and what reads them) form one cluster per stage, by block: as
 * part of a block's cluster they would stretch it from the params at the
 * top to the update at the bottom, beside the micro-batches.  For the same
 * reason the values of no micro-batch computed from params and constants
 * alone (params, their casts and ZeRO-3 gathers) are in no cluster but
 * their stage's. */
static NodePlace place_of(const Dot *g, int i)
{
	const IrModule *m = g->in->m;
	const IrNode *n = m->nodes[i];
	if (g->opt[i])
		return (NodePlace){1, -1, ir_block(m, n), i};
	if (g->leafy[i] && ir_mb(m, n) < 0)
		return (NodePlace){0, -1, -1, i};
	return (NodePlace){0, ir_mb(m, n), ir_block(m, n), i};
}

static void open_block(const Dot *g, const char *parent, int b)
{
	fprintf(g->out, "subgraph %s_b%d {\nlabel=\"", parent, b);
	dot_str(g->out, b < g->nb ? g->bname[b] : "?");
	fputs("\"; style=\"rounded,filled\"; fillcolor=\"#fdfaf0\"; color=\"#c8b070\";\n", g->out);
}

static void write_stage(const Dot *g, int s, NodePlace *ids, int nids)
{
	const Insp *in = g->in;
	FILE *out = g->out;
	qsort(ids, (size_t)nids, sizeof *ids, cmp_place);
	char co[256], outer[64] = "";
	inspect_coords_text(in->p, in->rep[s], co, sizeof co);
	fprintf(out, "subgraph cluster_s%d {\nlabel=\"stage %d: rank %" PRId64 " (", s, s,
	        in->rep[s]);
	dot_str(out, co);
	fputs(")\"; style=\"rounded\"; color=\"#555555\"; penwidth=1.5;\n", out);
	/* outer: the micro-batch's or the optimizer's cluster, "" for none */
	int cur_grp = -1, cur_mb = INT_MIN, cur_b = INT_MIN;
	for (int k = 0; k < nids; k++) {
		const NodePlace *x = &ids[k];
		if (x->grp != cur_grp || x->mb != cur_mb) {
			if (cur_b >= 0)
				fputs("}\n", out);
			if (outer[0])
				fputs("}\n", out);
			cur_grp = x->grp;
			cur_mb = x->mb;
			cur_b = INT_MIN;
			outer[0] = 0;
			if (cur_grp == 1) {
				snprintf(outer, sizeof outer, "cluster_s%d_opt", s);
				fprintf(out,
				        "subgraph %s {\nlabel=\"grads and optimizer step\"; "
				        "style=\"rounded,filled\"; fillcolor=\"#f4f8f4\"; "
				        "color=\"#80a880\";\n",
				        outer);
			} else if (cur_mb >= 0) {
				snprintf(outer, sizeof outer, "cluster_s%d_mb%d", s, cur_mb);
				fprintf(out,
				        "subgraph %s {\nlabel=\"micro-batch %d\"; "
				        "style=\"rounded,filled\"; fillcolor=\"#f6f8fc\"; "
				        "color=\"#8aa0c8\";\n",
				        outer, cur_mb);
			}
		}
		if (x->block != cur_b) {
			if (cur_b >= 0)
				fputs("}\n", out);
			cur_b = x->block;
			if (cur_b >= 0) {
				char parent[64];
				if (outer[0])
					snprintf(parent, sizeof parent, "%s", outer);
				else
					snprintf(parent, sizeof parent, "cluster_s%d", s);
				open_block(g, parent, cur_b);
			}
		}
		write_node(g, x->id);
	}
	if (cur_b >= 0)
		fputs("}\n", out);
	if (outer[0])
		fputs("}\n", out);
	fputs("}\n", out);
}

static void edge(const Dot *g, int from, int to, const char *attrs)
{
	bool f = drawn(g, from), t = drawn(g, to);
	if (!f && !t)
		return;
	fprintf(g->out, "%c%d -> %c%d", f ? 'n' : 'x', from, t ? 'n' : 'x', to);
	if (attrs || !f || !t)
		fprintf(g->out, " [%s%s%s]", attrs ? attrs : "", attrs && (!f || !t) ? ", " : "",
		        !f || !t ? "style=dashed, color=\"#888888\"" : "");
	fputs(";\n", g->out);
}

/* The optimizer's updates are independent chains (state leaves -> step),
 * one per param: side by side they make the widest rows of the graph.
 * Invisible edges from each step to the state leaves of the step `cols`
 * later in its stage stack them into a grid of cols columns. */
static void stack_updates(const Dot *g)
{
	const Insp *in = g->in;
	const IrModule *m = in->m;
	for (int s = 0; s < in->nstages; s++) {
		int nup = 0;
		for (int i = 0; i < m->nnodes; i++)
			nup += drawn(g, i) && node_stage(in, i) == s && kind_of(m->nodes[i]) == DK_UPDATE &&
			       m->nodes[i]->op != IR_OP_GRAD_NORM;
		int cols = 1;
		while (cols * cols < nup)
			cols++;
		int *ring = calloc((size_t)cols, sizeof *ring), k = 0;
		if (!ring || nup < 4) {
			free(ring);
			continue;
		}
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (!drawn(g, i) || node_stage(in, i) != s || kind_of(n) != DK_UPDATE ||
			    n->op == IR_OP_GRAD_NORM)
				continue;
			if (k >= cols)
				for (int j = 0; j < n->nops; j++)
					if (m->nodes[n->ops[j]]->op == IR_OP_STATE && drawn(g, n->ops[j]))
						fprintf(g->out, "n%d -> n%d [style=invis];\n", ring[k % cols],
						        n->ops[j]);
			ring[k++ % cols] = i;
		}
		free(ring);
	}
}

static bool write_graph(Dot *g, NodePlace *ids)
{
	const Insp *in = g->in;
	const IrModule *m = in->m;
	const DtmPlan *p = in->p;
	FILE *out = g->out;
	/* every recv's send, from the simulation's matching */
	for (int i = 0; i < m->nnodes; i++)
		g->peer[i] = -1;
	for (int s = 0; s < in->nstages; s++)
		for (int i = 0; i < p->stages[s].nactions; i++) {
			const DtmAction *a = &p->stages[s].actions[i];
			const Span *sp = &in->span[s][i];
			if (a->kind == DTM_ACT_RECV && sp->peer_stage >= 0 && sp->peer_action >= 0 &&
			    a->node >= 0 && a->node < m->nnodes)
				g->peer[a->node] = p->stages[sp->peer_stage].actions[sp->peer_action].node;
		}
	/* the stubs: nodes outside the scope an edge reaches */
	int nsel = 0, nstub = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (!drawn(g, i))
			continue;
		nsel++;
		for (int k = 0; k < n->nops; k++)
			if (!drawn(g, n->ops[k]))
				g->stub[n->ops[k]] = true;
		int q = g->peer[i];
		if (q >= 0 && q < m->nnodes && !drawn(g, q))
			g->stub[q] = true;
	}
	/* and the users of drawn nodes outside the scope */
	for (int j = 0; j < m->nnodes; j++)
		for (int k = 0; !drawn(g, j) && !g->stub[j] && k < m->nodes[j]->nops; k++)
			if (drawn(g, m->nodes[j]->ops[k]))
				g->stub[j] = true;
	for (int i = 0; i < m->nnodes; i++) {
		if (g->peer[i] >= 0 && drawn(g, g->peer[i]) && !drawn(g, i))
			g->stub[i] = true;
		nstub += g->stub[i];
	}
	char co[256];
	fputs("digraph dtm {\ngraph [labelloc=t, fontname=\"Helvetica\", fontsize=14, "
	      "nodesep=0.1, ranksep=0.25, label=\"",
	      out);
	dot_str(out, p->model);
	fputs(" on ", out);
	for (int a = 0; a < p->mesh_naxes; a++)
		fprintf(out, "%s%s=%" PRId64, a ? ", " : "", p->mesh_names[a], p->mesh_sizes[a]);
	inspect_coords_text(p, in->o->rank, co, sizeof co);
	fprintf(out, ": the partitioned program%s of rank %" PRId64 " (", in->nstages > 1 ? "s" : "",
	        in->o->rank);
	dot_str(out, co);
	fprintf(out, ")%s", in->nstages > 1 ? "'s pipeline" : "");
	if (in->dot_sel) {
		fputs("\\n--dot-scope ", out);
		dot_str(out, in->o->dot_scope);
		fprintf(out, ": %d of %d nodes, %d stubs (dashed) for the edges that leave it", nsel,
		        m->nnodes, nstub);
	}
	fputs("\"];\nnode [fontname=\"Helvetica\", fontsize=9, margin=\"0.06,0.03\"];\n"
	      "edge [arrowsize=0.6, color=\"#444444\"];\n",
	      out);
	write_legend(g);
	for (int s = 0; s < in->nstages; s++) {
		int nids = 0;
		for (int i = 0; i < m->nnodes; i++)
			if (drawn(g, i) && node_stage(in, i) == s)
				ids[nids++] = place_of(g, i);
		if (nids)
			write_stage(g, s, ids, nids);
	}
	for (int i = 0; i < m->nnodes; i++)
		if (g->stub[i])
			write_stub(g, i);
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		for (int k = 0; k < n->nops; k++)
			edge(g, n->ops[k], i, NULL);
		if (g->peer[i] >= 0)
			edge(g, g->peer[i], i,
			     "style=dashed, color=\"#e08a00\", penwidth=1.5, constraint=false");
	}
	stack_updates(g);
	fputs("}\n", out);
	return !ferror(out);
}

bool inspect_write_dot(const Insp *in, const char *path)
{
	const IrModule *m = in->m;
	Dot g = {.in = in};
	for (int i = 0; i < m->nnodes; i++)
		if (ir_block(m, m->nodes[i]) >= g.nb)
			g.nb = ir_block(m, m->nodes[i]) + 1;
	g.bname = block_names(in, g.nb);
	g.peer = arena_alloc(in->a, sizeof(int) * (size_t)(m->nnodes + 1));
	g.stub = arena_alloc(in->a, (size_t)m->nnodes + 1);
	g.opt = arena_alloc(in->a, (size_t)m->nnodes + 1);
	g.leafy = arena_alloc(in->a, (size_t)m->nnodes + 1);
	NodePlace *ids = arena_alloc(in->a, sizeof *ids * (size_t)(m->nnodes + 1));
	if (!g.bname || !g.peer || !g.stub || !g.opt || !g.leafy || !ids) {
		fputs("dtmc: error: out of memory\n", stderr);
		return false;
	}
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		g.opt[i] = n->role == IR_ROLE_GRAD || n->op == IR_OP_STATE;
		g.leafy[i] = n->op == IR_OP_PARAM || n->op == IR_OP_CONST;
		bool all = n->nops > 0;
		for (int k = 0; k < n->nops; k++) {
			g.opt[i] = g.opt[i] || g.opt[n->ops[k]];
			all = all && g.leafy[n->ops[k]];
		}
		g.leafy[i] = (g.leafy[i] || all) && !g.opt[i];
	}
	g.out = fopen(path, "w");
	if (!g.out) {
		fprintf(stderr, "dtmc: error: cannot write '%s': %s\n", path, strerror(errno));
		return false;
	}
	bool ok = write_graph(&g, ids);
	if (fclose(g.out) != 0 || !ok) {
		fprintf(stderr, "dtmc: error: cannot write '%s'\n", path);
		return false;
	}
	return true;
}
