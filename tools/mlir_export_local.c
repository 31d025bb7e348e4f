/* mlir_export_local.c - one rank's program as MLIR text (`dtmc
 * export-mlir --after=partition --rank R`).
 *
 * Consumes the module after `partition` (or fsdp_units, coalesce, bucket,
 * pipeline: the same per-rank program, its gradients bucketed as concat,
 * all_reduce and slice, then split into one program per pp coordinate):
 * local shapes, placements global in meaning.  Writes the program of the
 * pipeline stage of rank R (its pp coordinate; the whole program without
 * a pipeline) as `func.func @step`, its attributes the rank, its mesh
 * coordinates, the stage and the pass exported after.  The arguments are
 * the params, inputs and optimizer state the stage reads, each with
 * dtm.name, dtm.role, dtm.attr and its placement as dtm.sharding (a
 * #mesh.shard: which shard of the global value this rank holds); the
 * result is the loss where the stage computes it (or, after pipeline,
 * the stage's all_reduce of it over pp), else nothing.
 *
 * The collectives are MLIR's mesh ops on @mesh, the group's axes in
 * ascending order as mesh_axes (dtm's groups run the lowest-numbered
 * axis major, as MLIR's do), dtm's attributes as dtm.attr:
 *   all_reduce     -> mesh.all_reduce, reduction <sum>, <average>, <max>
 *   all_gather     -> mesh.all_gather, gather_axis = coll.dim
 *   reduce_scatter -> mesh.reduce_scatter, scatter_axis = coll.dim
 *   all_to_all     -> mesh.all_to_all, split_axis and concat_axis; the
 *                     sparse form (a2a.rows) too: it skips only the rows
 *                     after each slab's last non-zero one, which the
 *                     receiver writes as zeros (runtime/comm.h), so the
 *                     result is the dense one's
 *   broadcast      -> mesh.broadcast, root the member's coordinates
 *   shard_slice    -> mesh.all_slice, slice_axis = coll.dim
 * when the shapes are MLIR's (an uneven, padded shard's are not: then,
 * as for send and recv, a call of a declared @dtm.OP.N with the dtm
 * attributes).  Bucketed and coalesced collectives are plain ones over a
 * flat buffer (concat, all_reduce, slice), so they map as above.  Every
 * other op is written as the global export writes it (mlir_export.c).
 *
 * Before `pipeline` the program holds every stage, a value read on
 * another stage being an SSA edge: the stage's program keeps the nodes of
 * its model chunks (chunk mod P) and those of none (the global grad norm,
 * which every rank computes on its own gradients: a grad_norm drops the
 * other stages' operands, as pipeline does), clones the leafy values it
 * reads (leaves, and views and in-stage collectives of them: pipeline's
 * rule), and receives every other value from its owner (a call of
 * @dtm.recv.N right before the first reader), which sends it right after
 * computing it (@dtm.send.N), coll.shift as pipeline spells it.  That is
 * the data flow, not pipeline's schedule or its tied-param handling: for
 * those, export after pipeline, whose program already has them.
 */
#include "tools/mlir.h"
#include "tools/mlir_text.h"
#include "passes/pipeline.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct Local {
	Ex e;
	int pp, P, stage; /* the pipeline's axis (-1: none), size, this stage */
	bool *in;         /* [nnodes]: in this stage's program */
	bool *leafy;      /* [nnodes]: cloned into each stage reading it */
	bool *got;        /* [nnodes]: received already */
	uint64_t *to;     /* [nnodes]: the stages reading it (bit s) */
} Local;

/* The stage whose program computes node i, -1: every stage's. */
static int owner(const Local *L, int i)
{
	int c = L->pp < 0 ? -1 : ir_stage(L->e.m, L->e.m->nodes[i]);
	return c < 0 ? -1 : c % L->P;
}

/* pipeline.c's leafy values: a leaf, or a view or an in-stage collective
 * of leafy values. */
static bool is_leafy(const Local *L, const IrNode *n)
{
	if (n->op == IR_OP_RECV)
		return false;
	if (ir_op_flags(n->op) & OPF_LEAF)
		return true;
	bool view = n->op == IR_OP_RESHAPE || n->op == IR_OP_SLICE || n->op == IR_OP_PERMUTE ||
	            n->op == IR_OP_CAST;
	bool coll = (ir_op_flags(n->op) & OPF_COLL) && n->op != IR_OP_SEND &&
	            !(L->pp >= 0 && (ir_attr_coll(n)->axes >> L->pp & 1));
	if (!view && !coll)
		return false;
	for (int k = 0; k < n->nops; k++)
		if (!L->leafy[n->ops[k]])
			return false;
	return true;
}

/* A stage-less grad_norm keeps only this stage's gradients. */
static bool drops(const Local *L, const IrNode *user, int i)
{
	return user->op == IR_OP_GRAD_NORM && owner(L, user->id) < 0 && !L->in[i];
}

/* in[]: the stage's own nodes, the stage-less ones, and the leafy values
 * they read (walking back, so a view's leaves come along); to[]: which
 * stages read each value (a stage-less reader: all but a grad_norm). */
static void select_nodes(Local *L)
{
	const IrModule *m = L->e.m;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		L->leafy[i] = is_leafy(L, n);
		int s = owner(L, i);
		L->in[i] = s < 0 || s == L->stage;
		uint64_t bits = s >= 0 ? 1ull << (s & 63) : n->op == IR_OP_GRAD_NORM ? 0 : ~0ull;
		for (int k = 0; k < n->nops; k++)
			L->to[n->ops[k]] |= bits;
	}
	for (int j = m->nnodes - 1; j >= 0; j--)
		for (int k = 0; L->in[j] && k < m->nodes[j]->nops; k++) {
			int i = m->nodes[j]->ops[k];
			if (L->leafy[i])
				L->in[i] = true;
		}
}

/* A send or recv of node i's value along pp as a @dtm call: recv defines
 * %vI, send's result (the value, as dtm's send returns it) is a %tN. */
static void transfer(Local *L, IrOp op, int i, int shift)
{
	Ex *e = &L->e;
	IrAttr at = {.kind = IR_ATTR_COLL};
	at.coll.axes = 1u << L->pp;
	at.coll.n = 1;
	at.coll.shift = shift;
	IrNode f = *e->m->nodes[i];
	f.op = op;
	f.attr = &at;
	f.nops = op == IR_OP_SEND;
	f.ops = &i;
	char name[96];
	mlir_callee(e, &f, name, sizeof name);
	if (op == IR_OP_SEND)
		fprintf(e->body, "    %%t%d = func.call %s(%%v%d)", e->tmp++, name, i);
	else
		fprintf(e->body, "    %%v%d = func.call %s()", i, name);
	put_dtm_attr(e, e->body, &f);
	fputs(op == IR_OP_SEND ? " : (" : " : () -> ", e->body);
	if (op == IR_OP_SEND) {
		ntype(e->body, &f);
		fputs(") -> ", e->body);
	}
	ntype(e->body, &f);
	fputc('\n', e->body);
}

/* The operands of n computed on another stage, received before n. */
static void receive(Local *L, const IrNode *n)
{
	for (int k = 0; k < n->nops; k++) {
		int i = n->ops[k];
		if (L->in[i] || L->got[i] || drops(L, n, i))
			continue;
		L->got[i] = true;
		transfer(L, IR_OP_RECV, i, L->stage - owner(L, i));
	}
}

/* Node i owned by this stage, sent to each other stage that reads it. */
static void send(Local *L, int i)
{
	if (L->pp < 0 || owner(L, i) != L->stage || L->leafy[i])
		return;
	for (int s = 0; s < L->P && s < 64; s++)
		if (s != L->stage && (L->to[i] >> s & 1))
			transfer(L, IR_OP_SEND, i, s - L->stage);
}

/* The group's size and its axes, ascending, as `[0, 2]`. */
static int64_t group(const Local *L, uint32_t axes, FILE *f)
{
	const Mesh *mesh = &L->e.m->mesh;
	int64_t g = 1;
	fputc('[', f);
	for (int a = 0, first = 1; a < mesh->naxes; a++)
		if (axes >> a & 1) {
			fprintf(f, "%s%d", first ? "" : ", ", a);
			first = 0;
			g *= mesh->sizes[a];
		}
	fputc(']', f);
	return g;
}

/* Whether n's shape is what MLIR's op gives x over a group of g: x's,
 * dim `cut` divided by g, dim `grow` multiplied (-1: none). */
static bool mlir_shape(const IrNode *x, const IrNode *n, int64_t g, int64_t cut, int64_t grow)
{
	if (x->dtype != n->dtype || x->rank != n->rank)
		return false;
	for (int d = 0; d < n->rank; d++) {
		int64_t want = x->shape[d];
		if (d == cut) {
			if (want % g)
				return false;
			want /= g;
		}
		if (d == grow)
			want *= g;
		if (n->shape[d] != want)
			return false;
	}
	return true;
}

static const char *reduction(IrRed r)
{
	return r == IR_RED_MAX ? "<max>" : r == IR_RED_AVG ? "<average>" : "<sum>";
}

/* The broadcast root's coordinates on the group's axes, the lowest-
 * numbered axis major: `[1, 0]`. */
static void root(const Local *L, const IrAttrColl *c, FILE *f)
{
	const Mesh *mesh = &L->e.m->mesh;
	int64_t r = c->root, co[IR_MAX_AXES];
	for (int a = mesh->naxes - 1; a >= 0; a--)
		if (c->axes >> a & 1) {
			co[a] = r % mesh->sizes[a];
			r /= mesh->sizes[a];
		}
	fputc('[', f);
	for (int a = 0, first = 1; a < mesh->naxes; a++)
		if (c->axes >> a & 1) {
			fprintf(f, "%s%" PRId64, first ? "" : ", ", co[a]);
			first = 0;
		}
	fputc(']', f);
}

/* n as a mesh collective; false (nothing written) when MLIR's op would
 * not give n's shape. */
static bool collective(Local *L, const IrNode *n)
{
	const IrNode *x = L->e.m->nodes[n->ops[0]];
	const IrAttrColl *c = ir_attr_coll(n);
	char *ax = NULL;
	size_t len = 0;
	FILE *a = open_memstream(&ax, &len);
	if (!a)
		return false;
	int64_t g = group(L, c->axes, a);
	fclose(a);
	const char *op = NULL;
	bool fits = false;
	char extra[96] = "";
	switch (n->op) {
	case IR_OP_ALL_REDUCE:
		op = "all_reduce", fits = mlir_shape(x, n, g, -1, -1);
		snprintf(extra, sizeof extra, " reduction = %s", reduction(c->red));
		break;
	case IR_OP_ALL_GATHER:
		op = "all_gather", fits = mlir_shape(x, n, g, -1, c->dim);
		snprintf(extra, sizeof extra, " gather_axis = %" PRId64, c->dim);
		break;
	case IR_OP_REDUCE_SCATTER:
		op = "reduce_scatter", fits = mlir_shape(x, n, g, c->dim, -1);
		snprintf(extra, sizeof extra, " reduction = %s scatter_axis = %" PRId64,
		         reduction(c->red), c->dim);
		break;
	case IR_OP_ALL_TO_ALL:
		op = "all_to_all", fits = mlir_shape(x, n, g, c->a2a.split, c->a2a.concat);
		snprintf(extra, sizeof extra, " split_axis = %" PRId64 " concat_axis = %" PRId64,
		         c->a2a.split, c->a2a.concat);
		break;
	case IR_OP_BROADCAST:
		op = "broadcast", fits = mlir_shape(x, n, g, -1, -1) && c->root >= 0 && c->root < g;
		break;
	case IR_OP_SHARD_SLICE:
		op = "all_slice", fits = mlir_shape(x, n, g, c->dim, -1);
		snprintf(extra, sizeof extra, " slice_axis = %" PRId64, c->dim);
		break;
	default:
		break;
	}
	FILE *f = L->e.body;
	if (fits) {
		fprintf(f, "    %%v%d = mesh.%s %%v%d on @mesh mesh_axes = %s%s", n->id, op, x->id,
		        ax, extra);
		if (n->op == IR_OP_BROADCAST) {
			fputs(" root = ", f);
			root(L, c, f);
		}
		put_dtm_attr(&L->e, f, n);
		fputs(n->op == IR_OP_BROADCAST ? " : (" : " : ", f);
		ntype(f, x);
		fputs(n->op == IR_OP_BROADCAST ? ") -> " : " -> ", f);
		ntype(f, n);
		fputc('\n', f);
	}
	free(ax);
	return fits;
}

/* A stage-less grad_norm of this stage's gradients only. */
static void grad_norm(Local *L, const IrNode *n)
{
	int *ops = malloc(sizeof *ops * (size_t)(n->nops ? n->nops : 1));
	if (!ops) {
		L->e.ok = false;
		return;
	}
	IrNode f = *n;
	f.ops = ops;
	f.nops = 0;
	for (int k = 0; k < n->nops; k++)
		if (!drops(L, n, n->ops[k]))
			ops[f.nops++] = n->ops[k];
	call_op(&L->e, &f);
	free(ops);
}

/* The ops `collective` writes as mesh ops. */
static bool is_mesh_op(IrOp op)
{
	return op == IR_OP_ALL_REDUCE || op == IR_OP_ALL_GATHER || op == IR_OP_REDUCE_SCATTER ||
	       op == IR_OP_ALL_TO_ALL || op == IR_OP_BROADCAST || op == IR_OP_SHARD_SLICE;
}

static void local_node(Local *L, const IrNode *n)
{
	receive(L, n);
	if (n->op == IR_OP_STATE)
		return; /* an argument, as params and inputs */
	if (n->op == IR_OP_GRAD_NORM)
		grad_norm(L, n);
	else if (!is_mesh_op(n->op))
		mlir_node(&L->e, n); /* send and recv too: @dtm calls */
	else if (!collective(L, n))
		call_op(&L->e, n);
	send(L, n->id);
}

static bool is_arg(const IrNode *n)
{
	return n->op == IR_OP_PARAM || n->op == IR_OP_INPUT || n->op == IR_OP_STATE;
}

static void argument(Local *L, const IrNode *n, bool first)
{
	FILE *f = L->e.body;
	fprintf(f, "%s%%v%d: ", first ? "" : ",\n      ", n->id);
	ntype(f, n);
	fputs(" {dtm.name = ", f);
	put_str(f, n->name ? n->name : "");
	fprintf(f, ", dtm.role = \"%s\"", ir_role_name(n->role));
	char *a = attr_text(L->e.m, n);
	if (a && *a) {
		fputs(", dtm.attr = ", f);
		put_str(f, a);
	}
	free(a);
	const Placement *p = ir_place(L->e.m, n);
	if (n->place && p->known) {
		fputs(", dtm.sharding = #mesh.shard", f);
		put_sharding(&L->e, f, p);
	}
	fputc('}', f);
}

/* What @step returns: the loss where this stage has it, else -1. */
static int result(const Local *L)
{
	const IrModule *m = L->e.m;
	if (m->loss >= 0 && L->in[m->loss])
		return m->loss;
	int r = -1;
	for (int i = 0; i < m->nnodes; i++)
		if (L->in[i] && m->nodes[i]->role == IR_ROLE_LOSS)
			r = i;
	return r;
}

static void signature(Local *L, int64_t rank, int ret)
{
	const IrModule *m = L->e.m;
	FILE *f = L->e.body;
	fputs("  func.func @step(", f);
	bool first = true;
	for (int i = 0; i < m->nnodes; i++)
		if (L->in[i] && is_arg(m->nodes[i])) {
			argument(L, m->nodes[i], first);
			first = false;
		}
	fputc(')', f);
	if (ret >= 0) {
		fputs(" -> ", f);
		ntype(f, m->nodes[ret]);
	}
	int64_t co[IR_MAX_AXES];
	mesh_coords(&m->mesh, rank, co);
	fprintf(f, " attributes {dtm.after = ");
	put_str(f, m->after ? m->after : "");
	fputs(", dtm.coords = array<i64", f);
	for (int a = 0; a < m->mesh.naxes; a++)
		fprintf(f, "%s %" PRId64, a ? "," : ":", co[a]);
	fprintf(f, ">, dtm.rank = %" PRId64 " : i64, dtm.stage = %d : i64} {\n", rank, L->stage);
}

static void body(Local *L, int64_t rank)
{
	const IrModule *m = L->e.m;
	int ret = result(L);
	signature(L, rank, ret);
	for (int i = 0; i < m->nnodes && L->e.ok; i++)
		if (L->in[i])
			local_node(L, m->nodes[i]);
	fputs("    return", L->e.body);
	if (ret >= 0) {
		fprintf(L->e.body, " %%v%d : ", ret);
		ntype(L->e.body, m->nodes[ret]);
	}
	fputs("\n  }\n}\n", L->e.body);
}

bool mlir_export_local_text(const IrModule *m, int64_t rank, char **text, char *err, size_t cap)
{
	Local L = {.e = {.m = m, .ok = true}, .pp = pipeline_axis(m), .P = 1};
	size_t n = (size_t)(m->nnodes ? m->nnodes : 1), lb = 0, ld = 0, lt = 0;
	char *bodytext = NULL, *decls = NULL;
	*text = NULL;
	if (rank < 0 || rank >= mesh_size(&m->mesh)) {
		snprintf(err, cap, "--rank %" PRId64 " is not a rank of the %" PRId64 "-rank mesh",
		         rank, mesh_size(&m->mesh));
		return false;
	}
	if (L.pp >= 0) {
		int64_t co[IR_MAX_AXES];
		mesh_coords(&m->mesh, rank, co);
		L.P = (int)m->mesh.sizes[L.pp];
		L.stage = (int)co[L.pp];
	}
	L.e.sharded = calloc(n, sizeof *L.e.sharded);
	L.in = calloc(n, sizeof *L.in);
	L.leafy = calloc(n, sizeof *L.leafy);
	L.got = calloc(n, sizeof *L.got);
	L.to = calloc(n, sizeof *L.to);
	L.e.body = open_memstream(&bodytext, &lb);
	L.e.decls = open_memstream(&decls, &ld);
	FILE *out = open_memstream(text, &lt);
	L.e.ok = L.e.sharded && L.in && L.leafy && L.got && L.to && L.e.body && L.e.decls && out;
	if (L.e.ok) {
		select_nodes(&L);
		mlir_header(&L.e, out);
		body(&L, rank);
	}
	if (!L.e.ok)
		snprintf(err, cap, "%s", L.e.err[0] ? L.e.err : "out of memory");
	if (L.e.body)
		fclose(L.e.body);
	if (L.e.decls)
		fclose(L.e.decls);
	if (out) {
		if (L.e.ok) {
			fputs(decls ? decls : "", out);
			fputs(bodytext ? bodytext : "", out);
		}
		fclose(out);
	}
	for (int i = 0; i < L.e.nsigs; i++)
		free(L.e.sigs[i]);
	free(L.e.sigs);
	free(bodytext);
	free(decls);
	free(L.e.sharded);
	free(L.in);
	free(L.leafy);
	free(L.got);
	free(L.to);
	if (!L.e.ok) {
		free(*text);
		*text = NULL;
	}
	return L.e.ok;
}
