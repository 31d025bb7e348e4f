/* mlir_spmd.c - `dtmc mlir-spmd`: MLIR's own sharding passes as a second
 * opinion on dtm's partition (issue 19, point 3).
 *
 * MLIR 19 spmdizes only ops with a sharding interface: the linalg
 * structured ops, not arith, math, tensor.empty, linalg.fill's scalar,
 * arith.constant or func.call.  So the forward program (the ancestors of
 * the loss, after propagate) is cut: each maximal run, in node order, of
 * ops MLIR can spmdize (matmul, the elementwise arithmetic, the unary math
 * ops, scale) becomes its own func.func @rK, written with linalg.generic
 * only; the values crossing the cut are its arguments and
 * results, each a mesh.shard to the placement dtm's propagate gave it (so
 * both sides start and end a region alike), and every linalg op's init is
 * an argument of its own, unannotated (tensor.empty has no sharding
 * interface; what the init holds does not matter to the collectives).  A
 * run never holds a call, so the cut programs compose in node order.
 *
 * MLIR's sharding-propagation and mesh-spmdization then run on that
 * module through the C API (mlir_capi.c, without the verifier: see
 * run_unverified there), and the collectives each @rK holds (kind, mesh
 * axes, the bytes of one rank's operand) are set beside those dtm's
 * partition inserted for the same nodes: the forward collectives whose
 * first consumer is one of the region's nodes (the partitioned program's
 * nodes matched to the global program's by source location, in order,
 * the region's by op too; a collective a region needs for an argument is
 * the region's, as MLIR's reshard of that argument is), or which make a
 * region node's value what propagate placed it.  all_slice and
 * shard_slice move no data and are left out, as are collectives over
 * mesh axes of size 1 only (the cut module's mesh has one more such
 * axis: see put_sharding).  Each region runs in a child process, and one
 * MLIR fails or crashes on is reported as such.
 */
#include "tools/mlir.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_PIPELINE "builtin.module(func.func(sharding-propagation,mesh-spmdization))"

/* One collective: its kind, mesh axes (bit a = axis a) and the bytes of
 * one rank's operand. */
typedef struct SpColl {
	char kind[24];
	uint32_t axes;
	int64_t bytes;
	int region;
} SpColl;

typedef struct SpColls {
	SpColl *v;
	int n, cap;
} SpColls;

typedef struct Sp {
	const IrModule *g; /* global, after propagate */
	const IrModule *p; /* the same after partition */
	bool *fwd;         /* [g nodes]: an ancestor of the loss */
	int *reg;          /* [g nodes]: its region, -1: none */
	int nreg;
	FILE *f; /* the cut module's text */
	SpColls dtm, mlir;
	char **bad;  /* [nreg]: MLIR's verifier on the region's result */
	char **fail; /* [nreg]: why MLIR's passes failed on it */
	bool plain;  /* the region being written splits nothing at its cut */
	char err[256];
} Sp;

static bool push(SpColls *c, const char *kind, uint32_t axes, int64_t bytes, int region)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 16;
		SpColl *v = realloc(c->v, sizeof *v * (size_t)cap);
		if (!v)
			return false;
		c->v = v;
		c->cap = cap;
	}
	SpColl *x = &c->v[c->n++];
	snprintf(x->kind, sizeof x->kind, "%s", kind);
	x->axes = axes;
	x->bytes = bytes;
	x->region = region;
	return true;
}

/* The ancestors of m's loss (the forward program). */
static bool *forward_nodes(const IrModule *m)
{
	bool *f = calloc((size_t)(m->nnodes ? m->nnodes : 1), sizeof *f);
	if (!f || m->loss < 0)
		return f;
	f[m->loss] = true;
	for (int i = m->loss; i >= 0; i--)
		if (f[i])
			for (int k = 0; k < m->nodes[i]->nops; k++)
				f[m->nodes[i]->ops[k]] = true;
	return f;
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static bool is_leaf(const IrNode *n)
{
	return n->op == IR_OP_PARAM || n->op == IR_OP_INPUT || n->op == IR_OP_CONST;
}

/* What MLIR 19 can spmdize, written as linalg: matmul and the elementwise
 * float ops; rank 0 results stay out (a scalar has nothing to split). */
static bool spmdizable(const IrModule *m, const IrNode *n)
{
	switch (n->op) {
	case IR_OP_MATMUL:
		if (m->nodes[n->ops[0]]->rank < 2 || m->nodes[n->ops[1]]->rank < 2)
			return false;
		break;
	case IR_OP_ADD:
	case IR_OP_SUB:
	case IR_OP_MUL:
	case IR_OP_DIV:
	case IR_OP_NEG:
	case IR_OP_EXP:
	case IR_OP_LOG:
	case IR_OP_SQRT:
	case IR_OP_RSQRT:
	case IR_OP_TANH:
	case IR_OP_SCALE:
		break;
	default:
		return false;
	}
	if (n->rank < 1 || !is_float(n->dtype))
		return false;
	for (int k = 0; k < n->nops; k++)
		if (!is_float(m->nodes[n->ops[k]]->dtype))
			return false;
	return true;
}

/* Regions: maximal runs of spmdizable forward nodes in node order; leaves
 * (arguments wherever used) and backward nodes do not end a run. */
static void cut(Sp *s)
{
	int cur = -1;
	for (int i = 0; i < s->g->nnodes; i++) {
		const IrNode *n = s->g->nodes[i];
		s->reg[i] = -1;
		if (!s->fwd[i] || is_leaf(n))
			continue;
		if (!spmdizable(s->g, n)) {
			cur = -1;
			continue;
		}
		if (cur < 0)
			cur = s->nreg++;
		s->reg[i] = cur;
	}
}

static const char *elt(IrDtype t)
{
	return t == IR_BF16 ? "bf16" : t == IR_F16 ? "f16" : t == IR_I32 ? "i32" : "f32";
}

static void put_type(FILE *f, const IrNode *n)
{
	fputs("tensor<", f);
	for (int d = 0; d < n->rank; d++)
		fprintf(f, "%" PRId64 "x", n->shape[d]);
	fprintf(f, "%s>", elt(n->dtype));
}

/* <@mesh, [[0], [], [1]], partial = sum[1]>.  With one, a value split
 * nowhere is written split over the mesh's extra axis of size 1 (the same
 * placement): MLIR 19's spmdization crashes when a matmul's partial
 * result is to end up split nowhere, [[]], and on a region whose every
 * argument and result is [[]].  Not an argument of a region that splits
 * something: a split over that axis on a loop dim another operand splits
 * over a real axis crashes it too. */
static void put_sharding(FILE *f, const IrModule *m, const Placement *p, bool one)
{
	int last = p->ndims - 1;
	while (last >= 0 && !p->naxes[last])
		last--;
	if (last < 0)
		fprintf(f, one ? "<@mesh, [[%d]]" : "<@mesh, [[]]", m->mesh.naxes);
	else
		fputs("<@mesh, [", f);
	for (int d = 0; d <= last; d++) {
		fputs(d ? ", [" : "[", f);
		for (int k = 0; k < p->naxes[d]; k++)
			fprintf(f, "%s%d", k ? ", " : "", p->axes[d][k]);
		fputc(']', f);
	}
	if (last >= 0)
		fputc(']', f);
	if (p->partial) {
		fprintf(f, ", partial = %s[", p->partial_op == IR_RED_MAX ? "max" : "sum");
		for (int a = 0, first = 1; a < m->mesh.naxes; a++)
			if (p->partial >> a & 1) {
				fprintf(f, "%s%d", first ? "" : ", ", a);
				first = 0;
			}
		fputc(']', f);
	}
	fputc('>', f);
}

/* Whether node i of region r is used outside it by the forward program
 * (or is the loss): a result of @rK. */
static bool escapes(const Sp *s, int i, int r)
{
	if (i == s->g->loss)
		return true;
	for (int j = i + 1; j < s->g->nnodes; j++) {
		const IrNode *u = s->g->nodes[j];
		if (!s->fwd[j] || s->reg[j] == r)
			continue;
		for (int k = 0; k < u->nops; k++)
			if (u->ops[k] == i)
				return true;
	}
	return false;
}

/* The value of node i inside region r: its argument's mesh.shard, or the
 * op's result. */
static void val(const Sp *s, int i, int r)
{
	/* (a scalar argument is read as it is: shard_line) */
	char c = s->reg[i] == r ? 'v' : s->g->nodes[i]->rank ? 's' : 'a';
	fprintf(s->f, "%%%c%d", c, i);
}

/* The argument list: the operands from outside the region (each once, in
 * order of first use), then one init per node.  Marks them in seen. */
static void signature(Sp *s, int r, bool *seen)
{
	const IrModule *g = s->g;
	bool first = true;
	for (int i = 0; i < g->nnodes; i++) {
		if (s->reg[i] != r)
			continue;
		for (int k = 0; k < g->nodes[i]->nops; k++) {
			int o = g->nodes[i]->ops[k];
			if (s->reg[o] == r || seen[o])
				continue;
			seen[o] = true;
			fprintf(s->f, "%s%%a%d: ", first ? "" : ", ", o);
			put_type(s->f, g->nodes[o]);
			first = false;
		}
	}
	for (int i = 0; i < g->nnodes; i++)
		if (s->reg[i] == r) {
			fprintf(s->f, "%s%%i%d: ", first ? "" : ", ", i);
			put_type(s->f, g->nodes[i]);
			first = false;
		}
}

/* affine_map<(d0, .., d(r-1)) -> (..)> of operand x of an elementwise op
 * with result n: x's dims aligned right, a broadcast size-1 dim as 0. */
static void ew_map(FILE *f, const IrNode *n, const IrNode *x)
{
	fputs("affine_map<(", f);
	for (int d = 0; d < n->rank; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(") -> (", f);
	int off = n->rank - x->rank;
	for (int j = 0; j < x->rank; j++) {
		int d = j + off;
		if (x->shape[j] == 1 && n->shape[d] != 1)
			fprintf(f, "%s0", j ? ", " : "");
		else
			fprintf(f, "%sd%d", j ? ", " : "", d);
	}
	fputs(")>", f);
}

/* The body's op for an elementwise node: %p from %x0 (and %x1). */
static void ew_body(FILE *f, const IrNode *n)
{
	const char *t = elt(n->dtype);
	static const struct {
		IrOp op;
		const char *name;
	} bin[] = {{IR_OP_ADD, "arith.addf"},
	           {IR_OP_SUB, "arith.subf"},
	           {IR_OP_MUL, "arith.mulf"},
	           {IR_OP_DIV, "arith.divf"}},
	  un[] = {{IR_OP_NEG, "arith.negf"},   {IR_OP_EXP, "math.exp"},
	          {IR_OP_LOG, "math.log"},     {IR_OP_SQRT, "math.sqrt"},
	          {IR_OP_RSQRT, "math.rsqrt"}, {IR_OP_TANH, "math.tanh"}};
	for (size_t k = 0; k < sizeof bin / sizeof *bin; k++)
		if (bin[k].op == n->op)
			fprintf(f, "      %%p = %s %%x0, %%x1 : %s\n", bin[k].name, t);
	for (size_t k = 0; k < sizeof un / sizeof *un; k++)
		if (un[k].op == n->op)
			fprintf(f, "      %%p = %s %%x0 : %s\n", un[k].name, t);
	if (n->op == IR_OP_SCALE) {
		char b[40];
		snprintf(b, sizeof b, "%.17g", ir_attr_scalar(n)->value);
		fprintf(f,
		        "      %%c = arith.constant %s%s : %s\n      %%p = arith.mulf %%x0, %%c : "
		        "%s\n",
		        b, strpbrk(b, ".eni") ? "" : ".0", t, t);
	}
}

static void elementwise(Sp *s, const IrNode *n, int r)
{
	FILE *f = s->f;
	const IrModule *g = s->g;
	fprintf(f, "    %%v%d = linalg.generic {indexing_maps = [", n->id);
	for (int k = 0; k < n->nops; k++) {
		ew_map(f, n, g->nodes[n->ops[k]]);
		fputs(", ", f);
	}
	ew_map(f, n, n);
	fputs("], iterator_types = [", f);
	for (int d = 0; d < n->rank; d++)
		fprintf(f, "%s\"parallel\"", d ? ", " : "");
	fputs("]} ins(", f);
	for (int k = 0; k < n->nops; k++) {
		fputs(k ? ", " : "", f);
		val(s, n->ops[k], r);
	}
	fputs(" : ", f);
	for (int k = 0; k < n->nops; k++) {
		fputs(k ? ", " : "", f);
		put_type(f, g->nodes[n->ops[k]]);
	}
	fprintf(f, ") outs(%%i%d : ", n->id);
	put_type(f, n);
	fputs(") {\n    ^bb0(", f);
	for (int k = 0; k < n->nops; k++)
		fprintf(f, "%%x%d: %s, ", k, elt(g->nodes[n->ops[k]]->dtype));
	fprintf(f, "%%o: %s):\n", elt(n->dtype));
	ew_body(f, n);
	fprintf(f, "      linalg.yield %%p : %s\n    } -> ", elt(n->dtype));
	put_type(f, n);
	fputc('\n', f);
}

/* matmul as linalg.generic: loops d0..d(r-1) over the result, d(r) over
 * k; broadcast batch dims of size 1 as 0 (what export-mlir writes). */
static void mm_map(FILE *f, const IrNode *n, const IrNode *x, int side)
{
	int r = n->rank, br = r - 2, ob = x->rank - 2;
	fputs("affine_map<(", f);
	for (int d = 0; d <= r; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(") -> (", f);
	for (int j = 0; j < ob; j++) {
		int d = j + br - ob;
		bool one = x->shape[j] == 1 && n->shape[d] != 1;
		fprintf(f, one ? "%s0" : "%sd%d", j ? ", " : "", d);
	}
	if (side == 0)
		fprintf(f, "%sd%d, d%d)>", ob ? ", " : "", br, r);
	else
		fprintf(f, "%sd%d, d%d)>", ob ? ", " : "", r, br + 1);
}

static void matmul(Sp *s, const IrNode *n, int r)
{
	FILE *f = s->f;
	const IrNode *a = s->g->nodes[n->ops[0]], *b = s->g->nodes[n->ops[1]];
	fprintf(f, "    %%v%d = linalg.generic {indexing_maps = [", n->id);
	mm_map(f, n, a, 0);
	fputs(", ", f);
	mm_map(f, n, b, 1);
	fputs(", affine_map<(", f);
	for (int d = 0; d <= n->rank; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(") -> (", f);
	for (int d = 0; d < n->rank; d++)
		fprintf(f, "%sd%d", d ? ", " : "", d);
	fputs(")>], iterator_types = [", f);
	for (int d = 0; d < n->rank; d++)
		fputs("\"parallel\", ", f);
	fputs("\"reduction\"]} ins(", f);
	val(s, a->id, r);
	fputs(", ", f);
	val(s, b->id, r);
	fputs(" : ", f);
	put_type(f, a);
	fputs(", ", f);
	put_type(f, b);
	fprintf(f, ") outs(%%i%d : ", n->id);
	put_type(f, n);
	const char *t = elt(n->dtype);
	fprintf(f,
	        ") {\n    ^bb0(%%x: %s, %%y: %s, %%o: %s):\n      %%p = arith.mulf %%x, %%y : %s\n"
	        "      %%q = arith.addf %%o, %%p : %s\n      linalg.yield %%q : %s\n    } -> ",
	        elt(a->dtype), elt(b->dtype), t, t, t, t);
	put_type(f, n);
	fputc('\n', f);
}

static bool splits(const Placement *p)
{
	for (int d = 0; d < p->ndims; d++)
		if (p->naxes[d])
			return true;
	return p->partial != 0;
}

static void shard_line(Sp *s, char pre, int i, char src)
{
	const IrNode *n = s->g->nodes[i];
	if (n->rank == 0) /* a scalar: nothing to split, and MLIR has no shard of rank 0 */
		return;
	fprintf(s->f, "    %%%c%d = mesh.shard %%%c%d to ", pre, i, src, i);
	put_sharding(s->f, s->g, ir_place(s->g, n), pre == 'r' || s->plain);
	fputs(" : ", s->f);
	put_type(s->f, n);
	fputc('\n', s->f);
}

/* func.func @rK: the arguments' shards, the ops, the results' shards. */
static void region(Sp *s, int r, bool *seen)
{
	const IrModule *g = s->g;
	memset(seen, 0, sizeof *seen * (size_t)g->nnodes);
	fprintf(s->f, "  func.func @r%d(", r);
	signature(s, r, seen);
	fputs(") -> (", s->f);
	bool first = true;
	for (int i = 0; i < g->nnodes; i++)
		if (s->reg[i] == r && escapes(s, i, r)) {
			fputs(first ? "" : ", ", s->f);
			put_type(s->f, g->nodes[i]);
			first = false;
		}
	fputs(") {\n", s->f);
	s->plain = true;
	for (int i = 0; i < g->nnodes; i++)
		if (seen[i] || (s->reg[i] == r && escapes(s, i, r)))
			s->plain = s->plain && !splits(ir_place(g, g->nodes[i]));
	for (int i = 0; i < g->nnodes; i++)
		if (seen[i])
			shard_line(s, 's', i, 'a');
	for (int i = 0; i < g->nnodes; i++) {
		if (s->reg[i] != r)
			continue;
		if (g->nodes[i]->op == IR_OP_MATMUL)
			matmul(s, g->nodes[i], r);
		else
			elementwise(s, g->nodes[i], r);
	}
	for (int i = 0; i < g->nnodes; i++)
		if (s->reg[i] == r && escapes(s, i, r))
			shard_line(s, 'r', i, 'v');
	fputs("    return", s->f);
	first = true;
	for (int i = 0; i < g->nnodes; i++)
		if (s->reg[i] == r && escapes(s, i, r)) {
			fprintf(s->f, "%s %%r%d", first ? "" : ",", i);
			first = false;
		}
	fputs(" : ", s->f);
	first = true;
	for (int i = 0; i < g->nnodes; i++)
		if (s->reg[i] == r && escapes(s, i, r)) {
			fputs(first ? "" : ", ", s->f);
			put_type(s->f, g->nodes[i]);
			first = false;
		}
	fputs("\n  }\n", s->f);
}

/* The cut module: region r's function, or every region's (r < 0). */
static char *cut_module(Sp *s, int r)
{
	char *text = NULL;
	size_t len = 0;
	bool *seen = calloc((size_t)s->g->nnodes + 1, sizeof *seen);
	s->f = open_memstream(&text, &len);
	if (!s->f || !seen) {
		free(seen);
		if (s->f)
			fclose(s->f);
		free(text);
		return NULL;
	}
	fputs("module {\n  mesh.mesh @mesh(shape = ", s->f);
	for (int a = 0; a < s->g->mesh.naxes; a++)
		fprintf(s->f, "%s%" PRId64, a ? "x" : "", s->g->mesh.sizes[a]);
	fputs("x1)\n", s->f); /* the extra axis (put_sharding) */
	for (int k = 0; k < s->nreg; k++)
		if (r < 0 || k == r)
			region(s, k, seen);
	fputs("}\n", s->f);
	fclose(s->f);
	free(seen);
	return text;
}

/* ---- MLIR's collectives, from its generic form ---- */

static int64_t elt_bytes(const char *t)
{
	if (!strncmp(t, "f64", 3) || !strncmp(t, "i64", 3))
		return 8;
	if (!strncmp(t, "bf16", 4) || !strncmp(t, "f16", 3) || !strncmp(t, "i16", 3))
		return 2;
	return 4;
}

/* The bytes of "tensor<8x8xf32>" at t. */
static int64_t tensor_bytes(const char *t)
{
	if (strncmp(t, "tensor<", 7) != 0)
		return -1;
	t += 7;
	int64_t n = 1;
	while (*t >= '0' && *t <= '9') {
		char *e;
		n *= strtoll(t, &e, 10);
		t = *e == 'x' ? e + 1 : e;
	}
	return n * elt_bytes(t);
}

/* mesh_axes = array<i16: 0, 1> as a mask (absent: none). */
static uint32_t mesh_axes(const char *line)
{
	const char *a = strstr(line, "mesh_axes = array<i16");
	uint32_t m = 0;
	if (!a)
		return 0;
	a += strlen("mesh_axes = array<i16");
	while (*a && *a != '>') {
		if (*a >= '0' && *a <= '9') {
			char *e;
			m |= 1u << strtol(a, &e, 10);
			a = e;
		} else {
			a++;
		}
	}
	return m;
}

/* Whether a collective over these mesh axes moves anything: not over
 * axes of size 1 alone (the extra one's index is the mesh's count). */
static bool moves_data(const IrModule *m, uint32_t axes)
{
	for (int a = 0; a < m->mesh.naxes; a++)
		if (axes >> a & 1 && m->mesh.sizes[a] > 1)
			return true;
	return false;
}

static bool parse_mlir(Sp *s, const char *out, int region)
{
	static const char *const kinds[] = {
	        "all_gather", "all_reduce", "all_to_all", "reduce_scatter", "broadcast",
	        "gather",     "scatter",    "send",       "recv",           "shift"};
	for (const char *l = out; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);
		char line[4096];
		snprintf(line, sizeof line, "%.*s",
		         (int)(len < sizeof line ? len : sizeof line - 1), l);
		const char *op = strstr(line, "\"mesh.");
		for (size_t k = 0; op && k < sizeof kinds / sizeof *kinds; k++) {
			size_t kl = strlen(kinds[k]);
			if (strncmp(op + 6, kinds[k], kl) != 0 || op[6 + kl] != '"')
				continue;
			const char *ty = strstr(op, ": (");
			if (!moves_data(s->g, mesh_axes(line)))
				continue;
			if (!push(&s->mlir, kinds[k], mesh_axes(line),
			          ty ? tensor_bytes(ty + 3) : -1, region))
				return false;
		}
		l = nl ? nl + 1 : NULL;
	}
	return true;
}

/* ---- dtm's collectives, from the partitioned program ---- */

static bool moves(IrOp op)
{
	return op == IR_OP_ALL_REDUCE || op == IR_OP_ALL_GATHER || op == IR_OP_REDUCE_SCATTER ||
	       op == IR_OP_ALL_TO_ALL || op == IR_OP_BROADCAST;
}

/* A node partition adds between a value and its users. */
static bool inserted(IrOp op)
{
	return (ir_op_flags(op) & OPF_COLL) || op == IR_OP_SHARD_SLICE || op == IR_OP_PAD_MASK;
}

static bool same_loc(SrcLoc a, SrcLoc b)
{
	return a.line == b.line && a.col == b.col && a.end_col == b.end_col &&
	       (a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file)));
}

/* map[p node] = the global node it is (matched by location, in order),
 * -1 for nodes partition added. */
static int *match(Sp *s, const bool *pf)
{
	const IrModule *g = s->g, *p = s->p;
	int *map = malloc(sizeof *map * (size_t)(p->nnodes + 1));
	if (!map)
		return NULL;
	int j = 0;
	for (int i = 0; i < p->nnodes; i++) {
		map[i] = -1;
		const IrNode *n = p->nodes[i];
		if (!pf[i] || inserted(n->op))
			continue;
		while (j < g->nnodes && !s->fwd[j])
			j++;
		/* (partition may rewrite an op: embed becomes embed_vp) */
		if (j < g->nnodes && same_loc(g->nodes[j]->loc, n->loc))
			map[i] = j++;
	}
	return map;
}

/* The region of the first consumer of partitioned node c, through other
 * inserted nodes; -1: none. */
static int consumer_region(const Sp *s, const int *map, int c, int depth)
{
	const IrModule *p = s->p;
	for (int u = c + 1; u < p->nnodes && depth < 8; u++)
		for (int k = 0; k < p->nodes[u]->nops; k++) {
			if (p->nodes[u]->ops[k] != c)
				continue;
			int r = inserted(p->nodes[u]->op) ? consumer_region(s, map, u, depth + 1)
			        : map[u] >= 0             ? s->reg[map[u]]
			                                  : -1;
			if (r >= 0)
				return r;
		}
	return -1;
}

static bool same_place(const Placement *a, const Placement *b)
{
	if (a->known != b->known || a->ndims != b->ndims || a->partial != b->partial ||
	    (a->partial && a->partial_op != b->partial_op))
		return false;
	for (int d = 0; d < a->ndims; d++)
		if (a->naxes[d] != b->naxes[d] ||
		    memcmp(a->axes[d], b->axes[d], sizeof *a->axes[d] * a->naxes[d]) != 0)
			return false;
	return true;
}

/* The region collective c of the partitioned program belongs to, -1:
 * none.  One that makes its producer's value what propagate placed it
 * (embed_vp's partial sums all_reduced into embed's replicated result)
 * belongs to the producer, as its cut argument already holds that; any
 * other to the region of its first consumer, where MLIR reshards. */
static int coll_region(const Sp *s, const int *map, int c)
{
	const IrModule *p = s->p;
	int q = p->nodes[c]->ops[0];
	while (inserted(p->nodes[q]->op) && p->nodes[q]->nops > 0)
		q = p->nodes[q]->ops[0];
	if (map[q] >= 0 &&
	    same_place(ir_place(p, p->nodes[c]), ir_place(s->g, s->g->nodes[map[q]])))
		return s->reg[map[q]];
	return consumer_region(s, map, c, 0);
}

static bool dtm_colls(Sp *s)
{
	const IrModule *p = s->p;
	bool *pf = forward_nodes(p);
	int *map = pf ? match(s, pf) : NULL;
	bool ok = map != NULL;
	/* every region node must have its partitioned twin */
	bool *found = ok ? calloc((size_t)s->g->nnodes + 1, sizeof *found) : NULL;
	for (int i = 0; ok && found && i < p->nnodes; i++)
		if (map[i] >= 0 && p->nodes[i]->op == s->g->nodes[map[i]]->op)
			found[map[i]] = true;
	for (int i = 0; ok && found && i < s->g->nnodes; i++)
		if (s->reg[i] >= 0 && !found[i]) {
			snprintf(s->err, sizeof s->err, "node %%%d (%s) not found after partition",
			         i, ir_op_name(s->g->nodes[i]->op));
			ok = false;
		}
	for (int i = 0; ok && found && i < p->nnodes; i++) {
		const IrNode *n = p->nodes[i];
		if (!pf[i] || !moves(n->op))
			continue;
		int r = coll_region(s, map, i);
		const IrNode *x = p->nodes[n->ops[0]];
		int64_t bytes = ir_dtype_size(x->dtype);
		for (int d = 0; d < x->rank; d++)
			bytes *= x->shape[d];
		if (r >= 0 && !push(&s->dtm, ir_op_name(n->op), ir_attr_coll(n)->axes, bytes, r))
			ok = false;
	}
	ok = ok && found;
	free(found);
	free(map);
	free(pf);
	return ok;
}

/* ---- the side-by-side report ---- */

static void put_axes(FILE *f, const IrModule *m, uint32_t axes, bool json)
{
	bool first = true;
	if (json)
		fputc('[', f);
	for (int a = 0; a < m->mesh.naxes; a++)
		if (axes >> a & 1) {
			fprintf(f, json ? "%s\"%s\"" : "%s%s",
			        first  ? ""
			        : json ? ", "
			               : ",",
			        m->mesh.names[a]);
			first = false;
		}
	if (json)
		fputc(']', f);
	else if (first)
		fputc('-', f);
}

static int count(const SpColls *c, int r, const SpColl *k)
{
	int n = 0;
	for (int i = 0; i < c->n; i++)
		n += c->v[i].region == r && c->v[i].axes == k->axes && c->v[i].bytes == k->bytes &&
		     !strcmp(c->v[i].kind, k->kind);
	return n;
}

/* Whether an equal collective came before index i of c (one row each). */
static bool listed(const SpColls *c, int i, const SpColls *before)
{
	const SpColl *k = &c->v[i];
	for (int j = 0; j < (before == c ? i : before->n); j++) {
		const SpColl *o = &before->v[j];
		if (o->region == k->region && o->axes == k->axes && o->bytes == k->bytes &&
		    !strcmp(o->kind, k->kind))
			return true;
	}
	return false;
}

static void verdict(char *b, size_t cap, int nd, int nm, bool failed)
{
	if (failed)
		snprintf(b, cap, "differs: MLIR fails on it");
	else if (nd == nm)
		snprintf(b, cap, "agree");
	else if (!nm)
		snprintf(b, cap, "differs: only dtm");
	else if (!nd)
		snprintf(b, cap, "differs: only MLIR");
	else
		snprintf(b, cap, "differs: dtm %d, MLIR %d", nd, nm);
}

/* The region's nodes: "%6 matmul, %7 add". */
static void put_nodes(FILE *f, const Sp *s, int r)
{
	bool first = true;
	for (int i = 0; i < s->g->nnodes; i++)
		if (s->reg[i] == r) {
			fprintf(f, "%s%%%d %s", first ? "" : ", ", i,
			        ir_op_name(s->g->nodes[i]->op));
			first = false;
		}
}

static void row(FILE *f, const Sp *s, const SpColl *k, int r, bool json, bool *first)
{
	int nd = count(&s->dtm, r, k), nm = count(&s->mlir, r, k);
	char v[64];
	verdict(v, sizeof v, nd, nm, s->fail[r] != NULL);
	if (json) {
		fprintf(f, "%s\n      {\"kind\": \"%s\", \"axes\": ", *first ? "" : ",", k->kind);
		put_axes(f, s->g, k->axes, true);
		fprintf(f,
		        ", \"bytes\": %" PRId64 ", \"dtm\": %d, \"mlir\": %d, \"verdict\": \"%s\"}",
		        k->bytes, nd, nm, v);
	} else {
		char ax[96] = "-";
		FILE *m = fmemopen(ax, sizeof ax - 1, "w");
		if (m) {
			put_axes(m, s->g, k->axes, false);
			fclose(m);
		}
		fprintf(f, "  r%-4d %-15s %-8s %12" PRId64 " %5d %5d  %s\n", r, k->kind, ax,
		        k->bytes, nd, nm, v);
	}
	*first = false;
}

static void region_rows(FILE *f, const Sp *s, int r, bool json)
{
	bool first = true;
	for (int i = 0; i < s->dtm.n; i++)
		if (s->dtm.v[i].region == r && !listed(&s->dtm, i, &s->dtm))
			row(f, s, &s->dtm.v[i], r, json, &first);
	for (int i = 0; i < s->mlir.n; i++)
		if (s->mlir.v[i].region == r && !listed(&s->mlir, i, &s->mlir) &&
		    !listed(&s->mlir, i, &s->dtm))
			row(f, s, &s->mlir.v[i], r, json, &first);
	if (first && !json)
		fprintf(f, "  r%-4d %-15s %-8s %12s %5d %5d  %s\n", r, "(none)", "-", "-", 0, 0,
		        s->fail[r] ? "differs: MLIR fails on it" : "agree");
}

/* A JSON string, or null. */
static void put_json_str(FILE *f, const char *t)
{
	if (!t) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (; *t; t++) {
		unsigned char c = (unsigned char)*t;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void report(FILE *f, const Sp *s, bool json)
{
	const IrModule *g = s->g;
	if (json) {
		fprintf(f, "{\"model\": \"%s\", \"mesh\": {", g->name ? g->name : "");
		for (int a = 0; a < g->mesh.naxes; a++)
			fprintf(f, "%s\"%s\": %" PRId64, a ? ", " : "", g->mesh.names[a],
			        g->mesh.sizes[a]);
		fprintf(f, "}, \"pipeline\": \"%s\",\n \"regions\": [", SP_PIPELINE);
		for (int r = 0; r < s->nreg; r++) {
			fprintf(f, "%s\n  {\"region\": \"r%d\", \"nodes\": \"", r ? "," : "", r);
			put_nodes(f, s, r);
			fprintf(f, "\", \"mlir_verifies\": %s, \"mlir_fails\": ",
			        s->bad[r] || s->fail[r] ? "false" : "true");
			put_json_str(f, s->fail[r]);
			fputs(", \"rows\": [", f);
			region_rows(f, s, r, true);
			fputs("]}", f);
		}
		fputs("]}\n", f);
		return;
	}
	fprintf(f, "model %s: dtm's partition beside MLIR 19's %s\n", g->name ? g->name : "",
	        SP_PIPELINE);
	fprintf(f, "  %-5s %-15s %-8s %12s %5s %5s  %s\n", "func", "kind", "axes", "bytes/rank",
	        "dtm", "MLIR", "verdict");
	for (int r = 0; r < s->nreg; r++)
		region_rows(f, s, r, false);
	fputs("regions (the global program's nodes after propagate):\n", f);
	for (int r = 0; r < s->nreg; r++) {
		fprintf(f, "  r%-4d ", r);
		put_nodes(f, s, r);
		if (s->fail[r])
			fprintf(f, "  [MLIR fails: %.*s]\n", (int)strcspn(s->fail[r], "\n"),
			        s->fail[r]);
		else
			fputs(s->bad[r]
			              ? "  [MLIR's result does not verify: MLIR 19's scf.if bug]\n"
			              : "\n",
			      f);
	}
}

/* api->run_unverified in a child process: MLIR 19's mesh passes crash on
 * some inputs (conflicting shardings of one loop dim), and a crash is a
 * finding about the region, not the end of dtmc. */
static int spmd_job(const DtmMlirApi *api, const void *arg, char **outs)
{
	return api->run_unverified(arg, SP_PIPELINE, &outs[0], &outs[1], &outs[2]);
}

static int run_isolated(const DtmMlirApi *api, const char *src, char **out, char **bad, char **err)
{
	char *outs[3] = {NULL, NULL, NULL};
	int rc = mlir_in_child(api, spmd_job, src, outs, 3);
	*out = outs[0];
	*bad = outs[1];
	*err = outs[2];
	return rc;
}

/* MLIR's passes on region r alone (so a failure or an unverifiable
 * result is that region's), its collectives into s->mlir. */
static bool run_region(Sp *s, const DtmMlirApi *api, int r)
{
	char *src = cut_module(s, r), *out = NULL, *bad = NULL, *err = NULL;
	if (!src) {
		snprintf(s->err, sizeof s->err, "out of memory");
		return false;
	}
	bool ok = true;
	/* a region MLIR cannot spmdize is a finding, not an error */
	if (run_isolated(api, src, &out, &bad, &err) != 0)
		s->fail[r] = err ? err : strdup("MLIR's passes failed"), err = NULL;
	else if (!parse_mlir(s, out, r))
		snprintf(s->err, sizeof s->err, "out of memory"), ok = false;
	s->bad[r] = bad;
	free(src);
	free(out);
	free(err);
	return ok;
}

/* s's forward nodes and regions; false when out of memory. */
static bool sp_init(Sp *s, const IrModule *g)
{
	s->g = g;
	s->fwd = forward_nodes(g);
	s->reg = malloc(sizeof *s->reg * (size_t)(g->nnodes + 1));
	bool ok = s->fwd && s->reg && g->loss >= 0;
	if (ok)
		cut(s);
	s->bad = calloc((size_t)s->nreg + 1, sizeof *s->bad);
	s->fail = calloc((size_t)s->nreg + 1, sizeof *s->fail);
	ok = ok && s->bad && s->fail;
	if (!ok)
		snprintf(s->err, sizeof s->err,
		         g->loss < 0 ? "the program has no loss" : "out of memory");
	return ok;
}

static void sp_free(Sp *s)
{
	for (int r = 0; s->bad && s->fail && r < s->nreg; r++) {
		free(s->bad[r]);
		free(s->fail[r]);
	}
	free(s->bad);
	free(s->fail);
	free(s->dtm.v);
	free(s->mlir.v);
	free(s->reg);
	free(s->fwd);
}

char *mlir_spmd_cut(const IrModule *g)
{
	Sp s = {0};
	char *text = sp_init(&s, g) ? cut_module(&s, -1) : NULL;
	sp_free(&s);
	return text;
}

bool mlir_spmd_compare(const IrModule *g, const IrModule *p, const DtmMlirApi *api, FILE *out,
                       bool json, char *err, size_t cap)
{
	Sp s = {.p = p};
	bool ok = sp_init(&s, g);
	for (int r = 0; ok && r < s.nreg; r++)
		ok = run_region(&s, api, r);
	ok = ok && dtm_colls(&s);
	if (ok)
		report(out, &s, json);
	else
		snprintf(err, cap, "%s", s.err[0] ? s.err : "out of memory");
	sp_free(&s);
	return ok;
}
