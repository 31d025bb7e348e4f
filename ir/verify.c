/* verify.c - the IR verifier, run after the lowering and after every pass.
 *
 * It checks what a pass can break without noticing: the mesh, topological
 * order and arity, attribute sanity, placements against the mesh and the
 * value's rank, choose points, and (by re-running ir_infer on a scratch
 * copy of each node) that the recorded dtype and shape are still what the
 * operands give, and that an in-place accumulation (matmul_wgrad_acc) owns
 * the buffer it adds to.  Each problem is one error at the node's source
 * location, naming the pass that left it, so a broken pass is found by
 * name.
 */
#include "ir/ir.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Verifier {
	IrModule *m;
	Diag *d;
	const char *after;
	int errors;
	int *reads; /* per node, its readers; counted when first needed */
} Verifier;

static void node_error(Verifier *v, const IrNode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void node_error(Verifier *v, const IrNode *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	v->errors++;
	diag_error(v->d, n->loc, "verifier failed after pass '%s': %%%d (%s): %s", v->after,
	           n->id, ir_op_name(n->op), msg);
}

static void module_error(Verifier *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void module_error(Verifier *v, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	v->errors++;
	diag_error(v->d, (SrcLoc){0}, "verifier failed after pass '%s': %s", v->after, msg);
}

static bool check_mesh(Verifier *v)
{
	const Mesh *mesh = &v->m->mesh;
	if (mesh->naxes < 0 || mesh->naxes > IR_MAX_AXES) {
		module_error(v, "the mesh has %d axes (0 to %d)", mesh->naxes, IR_MAX_AXES);
		return false;
	}
	bool ok = true;
	for (int i = 0; i < mesh->naxes; i++) {
		if (!mesh->names[i]) {
			module_error(v, "mesh axis %d has no name", i);
			ok = false;
			continue;
		}
		if (mesh->sizes[i] < 1 || mesh->sizes[i] > ((int64_t)1 << 24)) {
			module_error(v, "mesh axis '%s' has size %" PRId64, mesh->names[i], mesh->sizes[i]);
			ok = false;
		}
		for (int j = 0; j < i; j++)
			if (mesh->names[j] && strcmp(mesh->names[i], mesh->names[j]) == 0) {
				module_error(v, "mesh axis '%s' is declared twice", mesh->names[i]);
				ok = false;
			}
	}
	return ok;
}

/* Empty string when fine, else what is wrong (for a value of rank `rank`;
 * rank < 0 skips the rank check). */
static bool placement_problem(const Verifier *v, const Placement *p, int rank, char *msg,
                              size_t cap)
{
	const Mesh *mesh = &v->m->mesh;
	uint32_t used = 0;
	if (!p->known)
		return false;
	if (p->ndims > IR_MAX_RANK) {
		snprintf(msg, cap, "placement has %d dims", p->ndims);
		return true;
	}
	if (rank >= 0 && p->ndims != rank) {
		snprintf(msg, cap, "placement has %d dims but the value has rank %d", p->ndims, rank);
		return true;
	}
	for (int d = 0; d < p->ndims; d++) {
		if (p->naxes[d] > IR_MAX_AXES) {
			snprintf(msg, cap, "placement dim %d lists %d axes", d, p->naxes[d]);
			return true;
		}
		for (int k = 0; k < p->naxes[d]; k++) {
			int a = p->axes[d][k];
			if (a >= mesh->naxes) {
				snprintf(msg, cap, "placement dim %d names mesh axis %d but the mesh has %d",
				         d, a, mesh->naxes);
				return true;
			}
			if (used & (1u << a)) {
				snprintf(msg, cap, "mesh axis '%s' appears twice in the placement",
				         mesh->names[a]);
				return true;
			}
			used |= 1u << a;
		}
	}
	if (p->partial) {
		uint32_t valid = mesh->naxes >= 32 ? ~0u : (1u << mesh->naxes) - 1;
		if (p->partial & ~valid) {
			snprintf(msg, cap, "placement is partial over mesh axis %d but the mesh has %d",
			         __builtin_ctz(p->partial & ~valid), mesh->naxes);
			return true;
		}
		if (p->partial & used) {
			snprintf(msg, cap, "mesh axis '%s' both splits and is partial in the placement",
			         mesh->names[__builtin_ctz(p->partial & used)]);
			return true;
		}
		if ((unsigned)p->partial_op >= IR_RED_COUNT) {
			snprintf(msg, cap, "placement has an invalid partial reduction %d",
			         (int)p->partial_op);
			return true;
		}
	}
	return false;
}

/* A link names what it says: a gradient or an optimizer state a param
 * of the same (global) shape, the grad norm no param. */
static void check_link(Verifier *v, const IrNode *n)
{
	const IrModule *m = v->m;
	IrLink k = ir_link(m, n);
	int p = ir_link_param(m, n);
	if (k < IR_LINK_NONE || k >= IR_LINK_COUNT) {
		node_error(v, n, "invalid link kind %d", (int)k);
		return;
	}
	if (k == IR_LINK_NONE || k == IR_LINK_GRAD_NORM) {
		if (p != -1)
			node_error(v, n, "links param %%%d without saying what it is of it", p);
		return;
	}
	const char *what = k == IR_LINK_GRAD ? "a gradient" : "an optimizer state";
	if (p < 0 || p >= m->nnodes || m->nodes[p]->op != IR_OP_PARAM) {
		node_error(v, n, "%s linked to %%%d, which is no param", what, p);
		return;
	}
	if (k == IR_LINK_GRAD ? n->role != IR_ROLE_GRAD
	                      : n->op != IR_OP_STATE || n->role != IR_ROLE_OPT_STATE) {
		node_error(v, n, "linked as %s of %%%d, but it is a %s of role %s", what, p,
		           ir_op_name(n->op), ir_role_name(n->role));
		return;
	}
	/* the same shape; after partition, of shards of the same global one
	 * (ZeRO splits a gradient or a state, not its param) */
	const IrNode *pn = m->nodes[p];
	bool same = pn->rank == n->rank, local = same, global = same;
	for (int d = 0; same && d < n->rank; d++) {
		local = local && pn->shape[d] == n->shape[d];
		global = global && ir_global_dim(m, pn, d) == ir_global_dim(m, n, d);
	}
	same = local || global;
	if (!same) {
		char ps[200], ns[200];
		ir_format_type(ps, sizeof ps, pn->dtype, pn->rank, pn->shape);
		ir_format_type(ns, sizeof ns, n->dtype, n->rank, n->shape);
		node_error(v, n, "%s %s of param %%%d %s: another shape", what, ns, p, ps);
	}
}

/* matmul_wgrad_acc(acc, x, dy) writes acc's buffer (OPF_INPLACE): acc must
 * be read by it alone and have a buffer of its own, a GEMM's or an add's
 * activation (passes/accumulate.c makes no other), or the value the
 * interpreter computes is not the one the runtime does. */
static void check_accumulator(Verifier *v, const IrNode *n)
{
	IrModule *m = v->m;
	if (!v->reads) {
		v->reads = calloc((size_t)m->nnodes + 1, sizeof(int));
		if (!v->reads) {
			node_error(v, n, "out of memory checking the accumulator");
			return;
		}
		for (int i = 0; i < m->nnodes; i++)
			for (int k = 0; k < m->nodes[i]->nops; k++)
				if (m->nodes[i]->ops[k] >= 0 && m->nodes[i]->ops[k] < m->nnodes)
					v->reads[m->nodes[i]->ops[k]]++;
	}
	const IrNode *a = m->nodes[n->ops[0]];
	bool own = a->op == IR_OP_MATMUL_WGRAD || a->op == IR_OP_MATMUL_WGRAD_ACC ||
	           a->op == IR_OP_ADD;
	if (!own || a->role != IR_ROLE_ACT || a->id == m->loss)
		node_error(v, n, "the accumulator %%%d (%s, role %s) is not an activation a GEMM or an "
		           "add made: matmul_wgrad_acc adds into a buffer of its own",
		           a->id, ir_op_name(a->op), ir_role_name(a->role));
	else if (v->reads[a->id] != 1)
		node_error(v, n, "the accumulator %%%d is read %d times: matmul_wgrad_acc overwrites "
		           "it, so it must be its only reader", a->id, v->reads[a->id]);
}

static void check_node(Verifier *v, int i)
{
	IrModule *m = v->m;
	IrNode *n = m->nodes[i];
	char msg[512];
	if (n->id != i) {
		node_error(v, n, "node at position %d has id %d", i, n->id);
		return;
	}
	if ((unsigned)n->op >= IR_OP_COUNT) {
		node_error(v, n, "invalid op %d", (int)n->op);
		return;
	}
	if (n->nops < 0 || (n->nops > 0 && !n->ops)) {
		node_error(v, n, "invalid operand list");
		return;
	}
	for (int k = 0; k < n->nops; k++)
		if (n->ops[k] < 0 || n->ops[k] >= i) {
			node_error(v, n, "operand %%%d is not defined before %%%d", n->ops[k], i);
			return;
		}
	if ((unsigned)n->dtype >= IR_DTYPE_COUNT) {
		node_error(v, n, "invalid dtype %d", (int)n->dtype);
		return;
	}
	if (n->rank < 0 || n->rank > IR_MAX_RANK) {
		node_error(v, n, "invalid rank %d", n->rank);
		return;
	}
	if ((unsigned)n->role >= IR_ROLE_COUNT)
		node_error(v, n, "invalid role %d", (int)n->role);
	if (ir_stage(m, n) < -1)
		node_error(v, n, "invalid pipeline stage %d", ir_stage(m, n));
	if (ir_mb(m, n) < -1)
		node_error(v, n, "invalid micro-batch %d", ir_mb(m, n));
	if (ir_block(m, n) < -1)
		node_error(v, n, "invalid block instance %d", ir_block(m, n));
	if (ir_unit(m, n) < -1)
		node_error(v, n, "invalid FSDP unit %d", ir_unit(m, n));
	else if (ir_unit(m, n) >= 0 && n->op != IR_OP_PARAM)
		node_error(v, n, "an FSDP unit (%d) on a %s: only params have one", ir_unit(m, n),
		           ir_op_name(n->op));
	int ch = ir_choose(m, n), from = ir_place_from(m, n);
	if (ch != -1 && (ch < 0 || ch >= m->nchooses || m->chooses[ch].node != i))
		node_error(v, n, "choose index %d does not point back at this node", ch);
	IrAttrKind ak = ir_op_attr_kind(n->op);
	if (n->attr && n->attr->kind != ak) {
		node_error(v, n, "attributes of kind %d, but its op's are of kind %d",
		           (int)n->attr->kind, (int)ak);
		return;
	}
	if (ak == IR_ATTR_INIT && (unsigned)ir_attr_init(n)->kind > IR_INIT_UNIFORM)
		node_error(v, n, "invalid init kind %d", (int)ir_attr_init(n)->kind);
	if (n->place >= m->places->n) {
		node_error(v, n, "placement id %u is not in the module's table", n->place);
		return;
	}
	if (placement_problem(v, ir_place(m, n), n->rank, msg, sizeof msg))
		node_error(v, n, "%s", msg);
	if (from < -1 || from >= m->nnodes || from == n->id)
		node_error(v, n, "placement origin %%%d is not another node", from);
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++) {
		/* padded uneven shards: ceil(global / parts) rows each */
		int64_t g = ir_padded(m, n, d), parts = placement_dim_parts(ir_place(m, n), &m->mesh, d);
		if (g && (g < 0 || parts < 2 || g / parts + (g % parts != 0) != n->shape[d]))
			node_error(v, n, "dim %d: padded shards of %" PRId64 " over %" PRId64
			           " parts do not hold a global extent of %" PRId64, d, n->shape[d],
			           parts, g);
	}

	check_link(v, n);

	/* types: arity, attrs (axes, perm, ranges) and shapes in one go */
	IrNode s = *n;
	if (!ir_infer_msg(m, &s, msg, sizeof msg)) {
		node_error(v, n, "%s", ir_strip_op_name(msg, n->op));
		return;
	}
	if (s.dtype != n->dtype || s.rank != n->rank ||
	    memcmp(s.shape, n->shape, (size_t)n->rank * sizeof n->shape[0]) != 0) {
		char had[200], got[200];
		ir_format_type(had, sizeof had, n->dtype, n->rank, n->shape);
		ir_format_type(got, sizeof got, s.dtype, s.rank, s.shape);
		node_error(v, n, "recorded type %s but the operands give %s", had, got);
	}
	if (n->op == IR_OP_MATMUL_WGRAD_ACC)
		check_accumulator(v, n);
}

static void check_chooses(Verifier *v)
{
	IrModule *m = v->m;
	char msg[512];
	for (int i = 0; i < m->nchooses; i++) {
		const IrChoose *c = &m->chooses[i];
		if (c->node < 0 || c->node >= m->nnodes) {
			module_error(v, "choose %d names node %%%d, which does not exist", i, c->node);
			continue;
		}
		const IrNode *n = m->nodes[c->node];
		if (c->nopts < 1 || !c->opts) {
			node_error(v, n, "choose %d has no options", i);
			continue;
		}
		if (c->selected < 0 || c->selected >= c->nopts)
			node_error(v, n, "choose %d selects option %d of %d", i, c->selected, c->nopts);
		if (ir_choose(m, n) != i)
			node_error(v, n, "choose %d points here but the node records choose %d", i,
			           ir_choose(m, n));
		for (int k = 0; k < c->nopts; k++)
			if (placement_problem(v, &c->opts[k], n->rank, msg, sizeof msg))
				node_error(v, n, "choose %d option %d: %s", i, k, msg);
	}
}

bool ir_loss_not_scalar(const IrModule *m, char *msg, size_t cap)
{
	if (m->loss < 0 || m->loss >= m->nnodes)
		return false;
	const IrNode *l = m->nodes[m->loss];
	if (l->rank == 0 && l->dtype != IR_I32)
		return false;
	char t[128];
	ir_format_type(t, sizeof t, l->dtype, l->rank, l->shape);
	snprintf(msg, cap, "the loss %%%d (%s) is %s: a loss is a float scalar", m->loss,
	         ir_op_name(l->op), t);
	return true;
}

bool ir_verify(IrModule *m, Diag *d, const char *after)
{
	Verifier v = {m, d, after ? after : "?", 0, NULL};
	char msg[256];
	if (m->places->oom || m->oom) {
		module_error(&v, "out of memory for the placements or attributes");
		return false;
	}
	if (!check_mesh(&v))
		return false; /* placements cannot be checked against a bad mesh */
	if (m->nnodes < 0 || m->nnodes > IR_MAX_NODES || (m->nnodes > 0 && !m->nodes)) {
		module_error(&v, "invalid node count %d", m->nnodes);
		return false;
	}
	for (int i = 0; i < m->nnodes; i++) {
		if (!m->nodes[i]) {
			module_error(&v, "node %d is missing", i);
			return false;
		}
		check_node(&v, i);
		/* a broken pass breaks every node after it; the first few say
		 * enough and the rest would be slow noise */
		if (v.errors >= 50) {
			free(v.reads);
			return false;
		}
	}
	free(v.reads);
	if (m->loss < -1 || m->loss >= m->nnodes)
		module_error(&v, "the loss names node %%%d, which does not exist", m->loss);
	else if (ir_loss_not_scalar(m, msg, sizeof msg))
		module_error(&v, "%s", msg);
	check_chooses(&v);
	if (m->train.zero < 0 || m->train.zero > 3)
		module_error(&v, "zero stage %d (0 to 3)", m->train.zero);
	return v.errors == 0;
}
