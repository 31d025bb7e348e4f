/* autodiff.c - reverse-mode gradients of the loss with respect to every
 * param.
 *
 * Consumes the typed global IR as lowering leaves it (global shapes, the
 * scalar loss in m->loss).  Produces the same module with the backward
 * graph appended after the forward nodes, still SSA and in topological
 * order: the seed dloss = const 1.0 (loss_scale, the runtime's scale S,
 * under train { loss_scale }), then, walking the forward nodes from
 * the loss back to the first, each node's gradient rule applied to the sum
 * of the gradients its users contributed.  Each param P gets exactly one
 * node with role grad, named "grad.P" and linked to P (IR_LINK_GRAD), of
 * P's shape (a param the loss does not depend on gets zeros, so the
 * optimizer sees every param alike).  Its dtype is the policy's
 * reduce_dtype R (train.def): the gradient terms of a param of another
 * dtype T (bf16 params, f32 R) are cast to R where they are produced and
 * summed in R, and so, with micro-batches, are the terms of a value every
 * micro-batch shares (transpose(wte), computed once from params), whose
 * rule then runs on the sum cast back to T: whatever a gradient is
 * accumulated over (micro-batches, tied uses) it is accumulated in R, and
 * partition's all_reduce / reduce_scatter of grad.P, ZeRO's and DDP's
 * buckets, move R (FSDP2's reduce_dtype, Megatron's fp32 main grads).  All
 * other new nodes have role act; every new node carries the stage and
 * source location of the forward node it differentiates (a sum of
 * contributions: the stage of the value summed), so pipelining can cut the
 * backward where it cuts the forward.
 *
 * Only nodes on a path from a param to the loss are differentiated, and
 * integer values (ids, targets) get no gradient.  Most rules compose
 * existing ops (matmul's is matmuls of transposes plus sum_to over
 * broadcast batch dims); the rest use the gradient ops of ops.def.  The
 * collectives follow DESIGN.md section 4's table.  A differentiable op with
 * no rule here is an internal error naming the op, never a silent zero.
 * Nodes a rule emitted that no gradient ends up using are removed at the
 * end.
 */
#include "passes/autodiff.h"
#include "passes/pipeline.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct Ad {
	IrModule *m;
	Diag *d;
	int n0;         /* the forward nodes are [0, n0) */
	int *grad;      /* [n0]: the summed gradient of node i so far, or -1 */
	bool *need;     /* [n0]: on a path from a param to the loss */
	int *kept;      /* gradient sends: side effects, kept by the clean-up */
	int nkept;
	int stage;      /* stage, micro-batch, block instance and location given
	                 * to new nodes: the forward node's being differentiated */
	int mb;
	int block;
	/* Pipelined with micro-batches: the gradient terms of values shared
	 * by the micro-batches (params, transpose(wte)) are summed in
	 * micro-batch order once all are in (flush), so the pipeline can add
	 * each micro-batch's term as its backward finishes rather than hold
	 * them all until the last. */
	bool defer;
	int (*pend)[3]; /* (value, term, the value's previous entry or -1) */
	int npend, cappend;
	bool *haspend;  /* [n0] */
	int *phead;     /* [n0]: the value's last entry in pend, or -1 */
	/* reuse()'s index: per forward value x, the backward reshapes and
	 * permutes of x in creation order, a list through view_next (indexed
	 * by id - n0); NULL: reuse scans */
	int *view_head, *view_tail, *view_next;
	int capview;
	/* [n0]: the label of value v's gradient terms and sums ("grad.x"),
	 * made on v's first; NULL: none yet, or no room (then none is given) */
	const char **glabel;
	SrcLoc loc;
	bool failed;
} Ad;

static IrNode *nd(const Ad *a, int id)
{
	return a->m->nodes[id];
}

static bool is_float(IrDtype t)
{
	return t == IR_F32 || t == IR_BF16 || t == IR_F16;
}

static void internal(Ad *a, const char *what, const char *detail)
{
	if (!a->failed)
		pass_fault(a->m, a->d, a->loc, "autodiff: %s%s%s", what,
		           detail ? ": " : "", detail ? detail : "");
	a->failed = true;
}

/* Out of memory, or the backward would pass IR_MAX_NODES (a user error:
 * the program is too large). */
static void too_large(Ad *a)
{
	if (!a->failed)
		diag_error(a->d, a->loc, "autodiff: out of memory, or the backward graph would "
		           "have more than %d nodes", IR_MAX_NODES);
	a->failed = true;
}

/* A backward reshape or permute of a forward value made before (matmul
 * rules transpose the same activation for each weight it multiplies):
 * its id, or -1.  Only these view ops are shared; the index (index_view)
 * lists the candidates, so this is not a scan of the backward so far. */
static int reuse(const Ad *a, IrOp op, const int *ops, int nops, const IrAttr *at,
                 const IrNode *type)
{
	if ((op != IR_OP_RESHAPE && op != IR_OP_PERMUTE) || nops != 1 || ops[0] >= a->n0)
		return -1;
	bool indexed = a->view_head != NULL;
	for (int i = indexed ? a->view_head[ops[0]] : a->n0; indexed ? i >= 0 : i < a->m->nnodes;
	     i = indexed ? a->view_next[i - a->n0] : i + 1) {
		const IrNode *n = a->m->nodes[i];
		if (n->op != op || n->ops[0] != ops[0] || ir_stage(a->m, n) != a->stage ||
		    ir_mb(a->m, n) != a->mb)
			continue;
		if (op == IR_OP_PERMUTE && at && ir_attr_perm(n)->n == at->perm.n &&
		    memcmp(ir_attr_perm(n)->perm, at->perm.perm, sizeof(int64_t) * (size_t)at->perm.n) == 0)
			return i;
		if (op == IR_OP_RESHAPE && type && n->rank == type->rank &&
		    memcmp(n->shape, type->shape, sizeof(int64_t) * (size_t)n->rank) == 0)
			return i;
	}
	return -1;
}

/* Adds backward view node id of forward value x to reuse()'s index (or,
 * out of memory, drops the index: reuse scans then). */
static void index_view(Ad *a, int id, int x)
{
	int k = id - a->n0;
	if (k >= a->capview) {
		int cap = a->capview ? 2 * a->capview : 1024;
		while (cap <= k)
			cap *= 2;
		int *nx = realloc(a->view_next, sizeof(int) * (size_t)cap);
		if (!nx) {
			free(a->view_head);
			free(a->view_tail);
			free(a->view_next);
			a->view_head = a->view_tail = a->view_next = NULL;
			return;
		}
		a->view_next = nx;
		a->capview = cap;
	}
	a->view_next[k] = -1;
	if (a->view_tail[x] >= 0)
		a->view_next[a->view_tail[x] - a->n0] = id;
	else
		a->view_head[x] = id;
	a->view_tail[x] = id;
}

/* Appends op(ops){at} typed by ir_infer; `type` presets the type of the
 * ops that carry their own (reshape, expand, sum_to, pad, embed_bwd, cast,
 * const, recv).  -1 once anything failed. */
static int emit(Ad *a, IrOp op, const int *ops, int nops, const IrAttr *at,
                const IrNode *type)
{
	if (a->failed)
		return -1;
	for (int i = 0; i < nops; i++)
		if (ops[i] < 0)
			return -1;
	int same = reuse(a, op, ops, nops, at, type);
	if (same >= 0)
		return same;
	IrNode *n = ir_node_new(a->m, op, ops, nops, a->loc);
	if (!n) {
		too_large(a);
		return -1;
	}
	if (at)
		ir_attr_set(a->m, n, at); /* out of memory: the verifier says */
	if (type) {
		n->dtype = type->dtype;
		n->rank = type->rank;
		memcpy(n->shape, type->shape, sizeof n->shape);
	}
	ir_set_stage(a->m, n, a->stage);
	ir_set_mb(a->m, n, a->mb);
	ir_set_block(a->m, n, a->block);
	char msg[512];
	if (!ir_infer_msg(a->m, n, msg, sizeof msg)) {
		internal(a, "a backward node does not type-check", msg);
		return -1;
	}
	if (a->view_head && (op == IR_OP_RESHAPE || op == IR_OP_PERMUTE) && nops == 1 &&
	    ops[0] < a->n0)
		index_view(a, n->id, ops[0]);
	return n->id;
}

static int op1(Ad *a, IrOp op, int x)
{
	return emit(a, op, &x, 1, NULL, NULL);
}

static int op2(Ad *a, IrOp op, int x, int y)
{
	int o[2] = {x, y};
	return emit(a, op, o, 2, NULL, NULL);
}

static int op3(Ad *a, IrOp op, int x, int y, int z, const IrAttr *at)
{
	int o[3] = {x, y, z};
	return emit(a, op, o, 3, at, NULL);
}

static int scale(Ad *a, int x, double s)
{
	IrAttr at = {.kind = IR_ATTR_SCALAR, .scalar = {s}};
	return x < 0 || s == 1.0 ? x : emit(a, IR_OP_SCALE, &x, 1, &at, NULL);
}

static bool same_type(const IrNode *x, const IrNode *t)
{
	return x->dtype == t->dtype && x->rank == t->rank &&
	       memcmp(x->shape, t->shape, (size_t)x->rank * sizeof x->shape[0]) == 0;
}

/* x given `like`'s shape (and x's dtype) by `op` (reshape, expand,
 * sum_to); x itself when it already has it. */
static int reshaped(Ad *a, IrOp op, int x, int rank, const int64_t *shape)
{
	if (x < 0)
		return -1;
	/* only the type is read of t (same_type, emit, reuse): no copy of
	 * the whole node */
	IrNode t;
	t.dtype = nd(a, x)->dtype;
	t.rank = rank;
	memset(t.shape, 0, sizeof t.shape);
	memcpy(t.shape, shape, (size_t)rank * sizeof *shape);
	if (same_type(nd(a, x), &t))
		return x;
	if (op == IR_OP_SUM_TO)
		t.dtype = ir_dtype_accum(t.dtype); /* contribute casts it where needed */
	return emit(a, op, &x, 1, NULL, &t);
}

static int sum_to(Ad *a, int x, const IrNode *like)
{
	return reshaped(a, IR_OP_SUM_TO, x, like->rank, like->shape);
}

static int cast_to(Ad *a, int x, IrDtype t)
{
	if (x < 0 || nd(a, x)->dtype == t)
		return x;
	IrNode ty; /* as in reshaped: only the type is read */
	ty.dtype = t;
	ty.rank = nd(a, x)->rank;
	memcpy(ty.shape, nd(a, x)->shape, sizeof ty.shape);
	return emit(a, IR_OP_CAST, &x, 1, NULL, &ty);
}

static int permute(Ad *a, int x, const int64_t *perm, int r)
{
	IrAttr at = {.kind = IR_ATTR_PERM, .perm = {.n = r}};
	memcpy(at.perm.perm, perm, (size_t)r * sizeof *perm);
	return emit(a, IR_OP_PERMUTE, &x, 1, &at, NULL);
}

/* x with its last two dims swapped. */
static int transpose(Ad *a, int x)
{
	if (x < 0)
		return -1;
	int r = nd(a, x)->rank;
	int64_t p[IR_MAX_RANK];
	for (int i = 0; i < r; i++)
		p[i] = i;
	p[r - 2] = r - 1;
	p[r - 1] = r - 2;
	return permute(a, x, p, r);
}

static int slice(Ad *a, int x, int64_t axis, int64_t s, int64_t e)
{
	IrAttr at = {.kind = IR_ATTR_SLICE, .slice = {axis, s, e}};
	return emit(a, IR_OP_SLICE, &x, 1, &at, NULL);
}

/* Labels backward node g, a term or the sum of the gradient of forward
 * value v, for people (IrNode.label): the first value a node becomes the
 * gradient of names it, the one its rule computed it for (an add hands
 * the one gradient of its result on to both operands).  Nodes with a name
 * (grad.P) keep it. */
static void label_grad(Ad *a, int v, int g)
{
	if (g < a->n0 || !a->glabel || nd(a, g)->name || ir_label(a->m, nd(a, g)))
		return;
	if (!a->glabel[v]) {
		char buf[256];
		ir_grad_label(a->m, v, buf, sizeof buf);
		a->glabel[v] = arena_strdup(a->m->arena, buf);
	}
	ir_set_label(a->m, nd(a, g), a->glabel[v]);
}

/* The dtype forward node v's gradient is summed in (the file's comment):
 * reduce_dtype for a param, and with micro-batches for a value they all
 * share, when it is wider than v's dtype (an f32 param keeps f32
 * gradients whatever the policy); v's own otherwise. */
static IrDtype grad_dtype(const Ad *a, const IrNode *v)
{
	IrDtype r = a->m->train.reduce_dtype;
	if (!is_float(v->dtype) || !is_float(r) || v->dtype == r ||
	    ir_dtype_promote(v->dtype, r) != r)
		return v->dtype;
	if (v->op == IR_OP_PARAM || (a->m->train.microbatches > 1 && ir_mb(a->m, v) < 0))
		return r;
	return v->dtype;
}

/* Adds g to the gradient of forward node v (if v needs one), cast to the
 * dtype v's gradient is summed in first, where g was produced. */
static void contribute(Ad *a, int v, int g)
{
	if (g < 0 || !a->need[v] || !is_float(nd(a, v)->dtype))
		return;
	IrDtype gt = grad_dtype(a, nd(a, v));
	if (is_float(nd(a, g)->dtype) && nd(a, g)->dtype != gt && (g = cast_to(a, g, gt)) < 0)
		return;
	label_grad(a, v, g);
	IrNode want = *nd(a, v);
	want.dtype = gt;
	if (!same_type(nd(a, g), &want)) {
		char msg[160];
		snprintf(msg, sizeof msg, "the gradient of %%%d (%s) has the wrong type", v,
		         ir_op_name(nd(a, v)->op));
		internal(a, msg, NULL);
		return;
	}
	if (a->defer && ir_mb(a->m, nd(a, v)) < 0) {
		if (a->npend == a->cappend) {
			int cap = a->cappend ? 2 * a->cappend : 64;
			int (*p)[3] = realloc(a->pend, sizeof *p * (size_t)cap);
			if (!p) {
				too_large(a);
				return;
			}
			a->pend = p;
			a->cappend = cap;
		}
		a->pend[a->npend][0] = v;
		a->pend[a->npend][1] = g;
		a->pend[a->npend][2] = a->haspend[v] ? a->phead[v] : -1;
		a->phead[v] = a->npend++;
		a->haspend[v] = true;
		return;
	}
	if (a->grad[v] < 0) {
		a->grad[v] = g;
		return;
	}
	int stage = a->stage, mb = a->mb, block = a->block;
	SrcLoc loc = a->loc;
	/* On the terms' stage when they share one, else on v's: where a
	 * pipeline cut separates v from all its users (a stage's input, used
	 * by the next stage's residual add and layernorm), the sum is made
	 * before the cut and one gradient crosses it, as Megatron-LM sends
	 * one, not each term. */
	int ts = ir_stage(a->m, nd(a, a->grad[v]));
	a->stage = ts == ir_stage(a->m, nd(a, g)) ? ts : ir_stage(a->m, nd(a, v));
	a->mb = ir_mb(a->m, nd(a, v));
	a->block = ir_block(a->m, nd(a, v));
	a->loc = nd(a, v)->loc;
	a->grad[v] = op2(a, IR_OP_ADD, a->grad[v], g);
	label_grad(a, v, a->grad[v]);
	a->stage = stage;
	a->mb = mb;
	a->block = block;
	a->loc = loc;
}

/* The deferred terms of v summed in micro-batch order (terms of no
 * micro-batch last). */
static void flush(Ad *a, int v)
{
	if (!a->defer || !a->haspend[v])
		return;
	a->haspend[v] = false;
	int stage = a->stage, mb = a->mb, block = a->block;
	SrcLoc loc = a->loc;
	a->stage = ir_stage(a->m, nd(a, v));
	a->mb = -1;
	a->block = ir_block(a->m, nd(a, v));
	a->loc = nd(a, v)->loc;
	/* v's entries through their chain (newest first), rather than a
	 * scan of every value's per term: the pick below is unchanged, the
	 * lowest micro-batch, the earliest entry among equals */
	for (;;) {
		int best = -1, bk = INT_MAX;
		for (int j = a->phead[v]; j >= 0; j = a->pend[j][2]) {
			if (a->pend[j][0] != v)
				continue;
			int k = ir_mb(a->m, nd(a, a->pend[j][1]));
			k = k < 0 ? INT_MAX - 1 : k;
			if (k <= bk) /* newest first: the last of equals is the earliest */
				best = j, bk = k;
		}
		if (best < 0 || a->failed)
			break;
		int g = a->pend[best][1];
		a->pend[best][0] = -1;
		a->grad[v] = a->grad[v] < 0 ? g : op2(a, IR_OP_ADD, a->grad[v], g);
		label_grad(a, v, a->grad[v]);
	}
	a->stage = stage;
	a->mb = mb;
	a->block = block;
	a->loc = loc;
}

/* ---- rules: n is the forward node, dy its gradient ---- */

static bool needs(const Ad *a, const IrNode *n, int k)
{
	return a->need[n->ops[k]] && is_float(nd(a, n->ops[k])->dtype);
}

/* C = A @ B with broadcast batch dims: dA = dC @ B^T, dB = A^T @ dC, each
 * summed over the batch dims its operand was broadcast along.  A weight
 * (rank 2) takes matmul_wgrad, one GEMM over the flattened rows instead of
 * a batch of GEMMs and a sum; not a matmul of reshapes, whose merged batch
 * and sequence dim could not keep a split of the sequence (context
 * parallelism).  Its result is f32 (ops.def), so a 16-bit weight's
 * gradient is not rounded before it is summed in an f32 reduce_dtype. */
static void bw_matmul(Ad *a, const IrNode *n, int dy)
{
	const IrNode *A = nd(a, n->ops[0]), *B = nd(a, n->ops[1]);
	if (needs(a, n, 0))
		contribute(a, A->id, sum_to(a, op2(a, IR_OP_MATMUL, dy, transpose(a, B->id)), A));
	if (!needs(a, n, 1))
		return;
	if (B->rank == 2 && A->rank >= 2) {
		contribute(a, B->id, op2(a, IR_OP_MATMUL_WGRAD, A->id, dy));
		return;
	}
	contribute(a, B->id, sum_to(a, op2(a, IR_OP_MATMUL, transpose(a, A->id), dy), B));
}

static void bw_binary(Ad *a, const IrNode *n, int dy)
{
	const IrNode *A = nd(a, n->ops[0]), *B = nd(a, n->ops[1]);
	bool na = needs(a, n, 0), nb = needs(a, n, 1);
	switch (n->op) {
	case IR_OP_ADD:
	case IR_OP_SUB:
		if (na)
			contribute(a, A->id, sum_to(a, dy, A));
		if (nb) {
			int g = sum_to(a, dy, B);
			contribute(a, B->id, n->op == IR_OP_SUB ? op1(a, IR_OP_NEG, g) : g);
		}
		break;
	case IR_OP_MUL:
		if (na)
			contribute(a, A->id, sum_to(a, op2(a, IR_OP_MUL, dy, B->id), A));
		if (nb)
			contribute(a, B->id, sum_to(a, op2(a, IR_OP_MUL, dy, A->id), B));
		break;
	default: /* div: d(a/b)/db = -(a/b)/b */
		if (na)
			contribute(a, A->id, sum_to(a, op2(a, IR_OP_DIV, dy, B->id), A));
		if (nb) {
			int t = op2(a, IR_OP_DIV, op2(a, IR_OP_MUL, dy, n->id), B->id);
			contribute(a, B->id, op1(a, IR_OP_NEG, sum_to(a, t, B)));
		}
		break;
	}
}

/* Elementwise unary ops, written with the result y where that is cheaper
 * than recomputing from x. */
static void bw_unary(Ad *a, const IrNode *n, int dy)
{
	int x = n->ops[0], y = n->id, g = -1, t;
	switch (n->op) {
	case IR_OP_NEG:
		g = op1(a, IR_OP_NEG, dy);
		break;
	case IR_OP_EXP:
		g = op2(a, IR_OP_MUL, dy, y);
		break;
	case IR_OP_LOG:
		g = op2(a, IR_OP_DIV, dy, x);
		break;
	case IR_OP_SQRT: /* 1 / (2 sqrt x) */
		g = scale(a, op2(a, IR_OP_DIV, dy, y), 0.5);
		break;
	case IR_OP_RSQRT: /* -x^(-3/2) / 2 = -y / (2x) */
		g = scale(a, op2(a, IR_OP_DIV, op2(a, IR_OP_MUL, dy, y), x), -0.5);
		break;
	case IR_OP_TANH: /* 1 - y^2 */
		t = op2(a, IR_OP_MUL, dy, y);
		g = op2(a, IR_OP_SUB, dy, op2(a, IR_OP_MUL, t, y));
		break;
	case IR_OP_SIGMOID: /* y (1 - y) */
		t = op2(a, IR_OP_MUL, dy, y);
		g = op2(a, IR_OP_SUB, t, op2(a, IR_OP_MUL, t, y));
		break;
	case IR_OP_RELU:
		g = op2(a, IR_OP_RELU_BWD, dy, x);
		break;
	case IR_OP_GELU:
		g = op2(a, IR_OP_GELU_BWD, dy, x);
		break;
	case IR_OP_SILU:
		g = op2(a, IR_OP_SILU_BWD, dy, x);
		break;
	case IR_OP_SCALE:
		g = scale(a, dy, ir_attr_scalar(n)->value);
		break;
	case IR_OP_CAST:
		/* straight to the dtype x's gradient is summed in: cast(p, f32)
		 * of a bf16 param with an f32 reduce_dtype passes dy on unrounded */
		g = cast_to(a, dy, grad_dtype(a, nd(a, x)));
		break;
	default: /* dropout: the same mask and 1/(1-rate) on the gradient */
		g = emit(a, IR_OP_DROPOUT, &dy, 1, ir_attr_get(n, IR_ATTR_DROPOUT), NULL);
		break;
	}
	contribute(a, x, g);
}

/* sum / mean: the gradient spread back over the reduced axes. */
static void bw_reduce(Ad *a, const IrNode *n, int dy)
{
	const IrNode *X = nd(a, n->ops[0]);
	if (n->op == IR_OP_MAX) {
		contribute(a, X->id, op3(a, IR_OP_MAX_BWD, dy, X->id, n->id, ir_attr_get(n, IR_ATTR_AXES)));
		return;
	}
	int64_t keep[IR_MAX_RANK], count = 1;
	int k = 0;
	for (int d = 0; d < X->rank; d++) {
		bool red = k < ir_attr_axes(n)->n && ir_attr_axes(n)->axes[k] == d;
		k += red;
		keep[d] = red ? 1 : X->shape[d];
		count *= red ? X->shape[d] : 1;
	}
	int g = dy;
	if (n->op == IR_OP_MEAN && count > 0)
		g = scale(a, g, 1.0 / (double)count);
	g = reshaped(a, IR_OP_RESHAPE, g, X->rank, keep);
	contribute(a, X->id, reshaped(a, IR_OP_EXPAND, g, X->rank, X->shape));
}

static void bw_norm(Ad *a, const IrNode *n, int dy)
{
	bool ln = n->op == IR_OP_LAYERNORM;
	IrAttr eps = {.kind = IR_ATTR_EPS, .eps = *ir_attr_eps(n)};
	int x = n->ops[0], gm = n->ops[1];
	if (needs(a, n, 0))
		contribute(a, x, op3(a, ln ? IR_OP_LAYERNORM_BWD : IR_OP_RMSNORM_BWD, dy, x, gm, &eps));
	if (needs(a, n, 1)) {
		int o[2] = {dy, x};
		IrOp op = ln ? IR_OP_LAYERNORM_BWD_GAMMA : IR_OP_RMSNORM_BWD_GAMMA;
		contribute(a, gm, emit(a, op, o, 2, &eps, NULL));
	}
	if (ln && needs(a, n, 2))
		contribute(a, n->ops[2], sum_to(a, dy, nd(a, n->ops[2])));
}

static void bw_permute(Ad *a, const IrNode *n, int dy)
{
	int64_t inv[IR_MAX_RANK];
	for (int i = 0; i < n->rank; i++)
		inv[ir_attr_perm(n)->perm[i]] = i;
	contribute(a, n->ops[0], permute(a, dy, inv, n->rank));
}

static void bw_concat(Ad *a, const IrNode *n, int dy)
{
	int64_t ax = ir_attr_axis(n)->axis, off = 0;
	for (int k = 0; k < n->nops; k++) {
		int64_t len = nd(a, n->ops[k])->shape[ax];
		if (needs(a, n, k))
			contribute(a, n->ops[k], slice(a, dy, ax, off, off + len));
		off += len;
	}
}

static void bw_slice(Ad *a, const IrNode *n, int dy)
{
	const IrNode *X = nd(a, n->ops[0]);
	IrNode t = *X;
	t.dtype = nd(a, dy)->dtype;
	IrAttr at = {.kind = IR_ATTR_SLICE, .slice = *ir_attr_slice(n)};
	contribute(a, X->id, emit(a, IR_OP_PAD, &dy, 1, &at, &t));
}

/* One attention_bwd computes dq, dk and dv stacked as [3, B, T, D] (the
 * segment ids have no gradient).  With kv_heads G < heads H its dk and dv
 * are per query head: each kv head's gradient is the sum over its group,
 * [B, T, D] as [B, T, G, H/G, hd] summed over dim 3. */
static void bw_attention(Ad *a, const IrNode *n, int dy)
{
	int o[5] = {dy, n->ops[0], n->ops[1], n->ops[2], n->nops > 3 ? n->ops[3] : -1};
	const IrAttrAttn *at = ir_attr_attn(n);
	int pack = emit(a, IR_OP_ATTENTION_BWD, o, n->nops + 1, ir_attr_get(n, IR_ATTR_ATTN), NULL);
	const IrNode *Q = nd(a, n->ops[0]);
	int64_t H = at->heads, G = ir_attn_kv_heads(at);
	for (int w = 0; w < 3; w++)
		if (needs(a, n, w)) {
			const IrNode *X = nd(a, n->ops[w]);
			int s = slice(a, pack, 0, w, w + 1);
			if (w > 0 && G != H) {
				int64_t grp[5] = {Q->shape[0], Q->shape[1], G, H / G, Q->shape[2] / H};
				IrAttr sum = {.kind = IR_ATTR_AXES, .axes = {.n = 1, .axes = {3}}};
				s = reshaped(a, IR_OP_RESHAPE, s, 5, grp);
				s = s < 0 ? -1 : emit(a, IR_OP_SUM, &s, 1, &sum, NULL);
			}
			contribute(a, X->id, reshaped(a, IR_OP_RESHAPE, s, X->rank, X->shape));
		}
}

/* mse(a, b) = mean((a - b)^2): da = 2 (a - b) dl / N = -db.  The loss is
 * f32 whatever the operands are, so dl is cast to theirs. */
static void bw_mse(Ad *a, const IrNode *n, int dy)
{
	const IrNode *A = nd(a, n->ops[0]);
	int64_t N = ir_node_numel(A);
	int g = op2(a, IR_OP_SUB, A->id, n->ops[1]);
	const IrNode *D = nd(a, dy);
	if (!(D->op == IR_OP_CONST && ir_attr_scalar(D)->value == 1.0)) /* the seed: no need */
		g = op2(a, IR_OP_MUL, g, cast_to(a, dy, A->dtype));
	g = scale(a, g, 2.0 / (double)(N ? N : 1));
	if (needs(a, n, 0))
		contribute(a, A->id, g);
	if (needs(a, n, 1))
		contribute(a, n->ops[1], op1(a, IR_OP_NEG, g));
}

/* DESIGN.md section 4: all_gather <-> reduce_scatter, all_reduce ->
 * identity, all_to_all(i, j) -> all_to_all(j, i), send <-> recv.  An
 * average is a sum scaled by 1/group; a max has no gradient rule. */
static void bw_coll(Ad *a, const IrNode *n, int dy)
{
	const IrAttrColl *c = ir_attr_coll(n);
	IrAttr at = {.kind = IR_ATTR_COLL,
	             .coll = {.axes = c->axes, .red = IR_RED_SUM, .n = 1, .args = {c->args[0]}}};
	double inv = 1.0 / (double)mesh_axes_size(&a->m->mesh, c->axes);
	int x = n->nops ? n->ops[0] : -1, g = -1;
	if ((n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER) && c->red == IR_RED_MAX) {
		a->loc = n->loc;
		internal(a, "no gradient rule for a max reduction", ir_op_name(n->op));
		return;
	}
	bool avg = c->red == IR_RED_AVG;
	switch (n->op) {
	case IR_OP_ALL_GATHER:
		g = emit(a, IR_OP_REDUCE_SCATTER, &dy, 1, &at, NULL);
		break;
	case IR_OP_REDUCE_SCATTER:
		g = scale(a, emit(a, IR_OP_ALL_GATHER, &dy, 1, &at, NULL), avg ? inv : 1.0);
		break;
	case IR_OP_ALL_REDUCE:
		g = scale(a, dy, avg ? inv : 1.0);
		break;
	case IR_OP_ALL_TO_ALL:
		at.coll.n = 2;
		at.coll.a2a.split = c->a2a.concat;
		at.coll.a2a.concat = c->a2a.split;
		g = emit(a, IR_OP_ALL_TO_ALL, &dy, 1, &at, NULL);
		break;
	case IR_OP_BROADCAST:
		/* as all_reduce: the gradient of a replicated value is the
		 * replicated gradient */
		g = dy;
		break;
	case IR_OP_SEND: {
		/* send returns x, and x's message went `shift` steps along: its
		 * gradient comes back from there */
		if (dy >= 0)
			contribute(a, x, dy);
		IrNode t = *nd(a, x);
		g = emit(a, IR_OP_RECV, NULL, 0, &at, &t);
		break;
	}
	default: /* recv: send the gradient back where the value came from */
		g = emit(a, IR_OP_SEND, &dy, 1, &at, NULL);
		if (g >= 0)
			a->kept[a->nkept++] = g;
		return;
	}
	contribute(a, x, g);
}

static void backward(Ad *a, const IrNode *n, int dy)
{
	switch (n->op) {
	case IR_OP_MATMUL:
		bw_matmul(a, n, dy);
		return;
	case IR_OP_ADD:
	case IR_OP_SUB:
	case IR_OP_MUL:
	case IR_OP_DIV:
		bw_binary(a, n, dy);
		return;
	case IR_OP_NEG: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT:
	case IR_OP_TANH: case IR_OP_RELU: case IR_OP_GELU: case IR_OP_SILU:
	case IR_OP_SIGMOID: case IR_OP_SCALE: case IR_OP_CAST: case IR_OP_DROPOUT:
		bw_unary(a, n, dy);
		return;
	case IR_OP_SUM:
	case IR_OP_MEAN:
	case IR_OP_MAX:
		bw_reduce(a, n, dy);
		return;
	case IR_OP_SOFTMAX:
	case IR_OP_LOG_SOFTMAX: {
		IrAttr at = {.kind = IR_ATTR_AXIS, .axis = *ir_attr_axis(n)};
		IrOp op = n->op == IR_OP_SOFTMAX ? IR_OP_SOFTMAX_BWD : IR_OP_LOG_SOFTMAX_BWD;
		int o[2] = {dy, n->id};
		contribute(a, n->ops[0], emit(a, op, o, 2, &at, NULL));
		return;
	}
	case IR_OP_LAYERNORM:
	case IR_OP_RMSNORM:
		bw_norm(a, n, dy);
		return;
	case IR_OP_EMBED: {
		int o[2] = {dy, n->ops[1]};
		IrNode t = *nd(a, n->ops[0]);
		contribute(a, n->ops[0], emit(a, IR_OP_EMBED_BWD, o, 2, NULL, &t));
		return;
	}
	case IR_OP_GATHER:
	case IR_OP_SCATTER_ADD:
		/* each other's transpose: rows go back where they came from
		 * (repeated indices add up) */
		if (needs(a, n, 0)) {
			int o[2] = {dy, n->ops[1]};
			IrNode t = *nd(a, n->ops[0]);
			IrOp op = n->op == IR_OP_GATHER ? IR_OP_SCATTER_ADD : IR_OP_GATHER;
			contribute(a, n->ops[0], emit(a, op, o, 2, NULL, op == IR_OP_SCATTER_ADD ? &t : NULL));
		}
		return;
	case IR_OP_TOPK: case IR_OP_ONE_HOT: case IR_OP_MOE_SLOT: case IR_OP_MOE_TOKEN:
		return; /* indices and counts: no gradient (gather carries topk's) */
	case IR_OP_PERMUTE:
		bw_permute(a, n, dy);
		return;
	case IR_OP_RESHAPE: {
		const IrNode *X = nd(a, n->ops[0]);
		contribute(a, X->id, reshaped(a, IR_OP_RESHAPE, dy, X->rank, X->shape));
		return;
	}
	case IR_OP_CONCAT:
		bw_concat(a, n, dy);
		return;
	case IR_OP_SLICE:
		bw_slice(a, n, dy);
		return;
	case IR_OP_ATTENTION:
		bw_attention(a, n, dy);
		return;
	case IR_OP_ROPE: {
		/* a rotation: its transpose rotates back by -angle */
		IrAttr at = {.kind = IR_ATTR_ROPE, .rope = *ir_attr_rope(n)};
		at.rope.inverse = !at.rope.inverse;
		contribute(a, n->ops[0], emit(a, IR_OP_ROPE, &dy, 1, &at, NULL));
		return;
	}
	case IR_OP_CROSS_ENTROPY:
		if (needs(a, n, 0))
			contribute(a, n->ops[0],
			           op3(a, IR_OP_CROSS_ENTROPY_BWD, dy, n->ops[0], n->ops[1], NULL));
		return;
	case IR_OP_MSE:
		bw_mse(a, n, dy);
		return;
	case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_REDUCE:
	case IR_OP_ALL_TO_ALL: case IR_OP_BROADCAST: case IR_OP_SEND: case IR_OP_RECV:
		bw_coll(a, n, dy);
		return;
	default:
		/* gradient and optimizer ops never sit between a param and the
		 * loss; anything else reaching here is a missing rule */
		break;
	}
	char msg[96];
	snprintf(msg, sizeof msg, "no gradient rule for op '%s' (%%%d)", ir_op_name(n->op), n->id);
	internal(a, msg, NULL);
}

/* A value the model annotated (`x = ... @ [ep, dp, _]`) has its gradient
 * placed the same way, as JAX's with_sharding_constraint constrains the
 * cotangent: the backward then runs where the forward did (a mixture of
 * experts' expert-split layer: without it propagate may keep the
 * gradient split by groups and move the experts' activations instead). */
static void pin_grad(Ad *a, const IrNode *n, int dy)
{
	if (!n->place || dy < a->n0 || nd(a, dy)->place || nd(a, dy)->rank != n->rank ||
	    (ir_op_flags(n->op) & OPF_LEAF))
		return;
	Placement p = *ir_place(a->m, n);
	p.partial = 0;
	p.partial_op = IR_RED_SUM;
	ir_place_set(a->m, nd(a, dy), &p); /* out of memory: the verifier says */
}

/* ---- which nodes need a gradient ---- */

/* need = reachable from a param and reaching the loss.  A message has no
 * edge in the graph, so a send carries "from a param" to every recv over
 * the same axes and a recv carries "reaches the loss" back to the sends;
 * iterate until nothing changes. */
static void find_needed(Ad *a, bool *from, bool *to)
{
	IrModule *m = a->m;
	bool changed = true;
	while (changed) {
		changed = false;
		for (int i = 0; i < a->n0; i++) {
			const IrNode *n = nd(a, i);
			bool f = from[i] || n->op == IR_OP_PARAM;
			for (int k = 0; k < n->nops && !f; k++)
				f = from[n->ops[k]];
			if (n->op == IR_OP_SEND && f)
				for (int j = 0; j < a->n0; j++)
					if (nd(a, j)->op == IR_OP_RECV && !from[j] &&
					    ir_attr_coll(nd(a, j))->axes == ir_attr_coll(n)->axes)
						from[j] = changed = true;
			if (f && !from[i])
				from[i] = changed = true;
		}
		for (int i = a->n0 - 1; i >= 0; i--) {
			const IrNode *n = nd(a, i);
			if (i == m->loss)
				to[i] = true;
			if (!to[i])
				continue;
			for (int k = 0; k < n->nops; k++)
				if (!to[n->ops[k]])
					to[n->ops[k]] = changed = true;
			if (n->op == IR_OP_RECV)
				for (int j = 0; j < a->n0; j++)
					if (nd(a, j)->op == IR_OP_SEND && !to[j] &&
					    ir_attr_coll(nd(a, j))->axes == ir_attr_coll(n)->axes)
						to[j] = changed = true;
		}
	}
	for (int i = 0; i < a->n0; i++)
		a->need[i] = from[i] && to[i];
}

/* ---- param gradients and clean-up ---- */

/* Gives each param its "grad.<name>" node.  A summed gradient that is
 * also some other value's gradient or another node's operand is copied (a
 * reshape to its own shape) so the grad node belongs to its param alone. */
static void finish_params(Ad *a)
{
	IrModule *m = a->m;
	for (int i = 0; i < a->n0 && !a->failed; i++)
		if (nd(a, i)->op == IR_OP_PARAM)
			flush(a, i);
	if (a->failed)
		return;
	int cap = m->nnodes + 2 * a->n0 + 1;
	int *uses = calloc((size_t)cap, sizeof *uses);
	if (!uses) {
		too_large(a);
		return;
	}
	for (int i = a->n0; i < m->nnodes; i++)
		for (int k = 0; k < nd(a, i)->nops; k++)
			uses[nd(a, i)->ops[k]]++;
	for (int i = 0; i < a->n0; i++)
		if (a->grad[i] >= 0 && nd(a, i)->op != IR_OP_PARAM)
			uses[a->grad[i]]++;
	for (int i = 0; i < a->n0 && !a->failed; i++) {
		IrNode *p = nd(a, i);
		if (p->op != IR_OP_PARAM)
			continue;
		a->stage = ir_stage(a->m, p);
		a->mb = -1;
		a->block = ir_block(a->m, p);
		a->loc = p->loc;
		int g = a->grad[i];
		if (g < 0) {
			IrNode t = {.dtype = grad_dtype(a, p), .rank = 0};
			IrAttr zero = {.kind = IR_ATTR_SCALAR, .scalar = {0.0}};
			g = reshaped(a, IR_OP_EXPAND, emit(a, IR_OP_CONST, NULL, 0, &zero, &t),
			             p->rank, p->shape);
		} else if (g < a->n0 || uses[g] > 0) {
			IrNode t = *p;
			t.dtype = nd(a, g)->dtype;
			g = emit(a, IR_OP_RESHAPE, &g, 1, NULL, &t);
		}
		if (g < 0)
			break;
		uses[g]++;
		nd(a, g)->role = IR_ROLE_GRAD;
		nd(a, g)->name = arena_printf(m->arena, "grad.%s", p->name ? p->name : "?");
		if (!ir_set_link(m, nd(a, g), IR_LINK_GRAD, p->id))
			too_large(a);
	}
	free(uses);
}

/* Drops backward nodes that no grad (and no gradient send) depends on,
 * renumbering the rest; forward nodes keep their ids. */
static void remove_dead(Ad *a)
{
	IrModule *m = a->m;
	bool *live = calloc((size_t)m->nnodes + 1, sizeof *live);
	int *to = calloc((size_t)m->nnodes + 1, sizeof *to);
	if (!live || !to) {
		free(live);
		free(to);
		return; /* keeping dead nodes is harmless */
	}
	for (int i = 0; i < a->nkept; i++)
		live[a->kept[i]] = true;
	for (int i = m->nnodes - 1; i >= 0; i--) {
		IrNode *n = nd(a, i);
		if (i < a->n0 || n->role == IR_ROLE_GRAD)
			live[i] = true;
		if (live[i])
			for (int k = 0; k < n->nops; k++)
				live[n->ops[k]] = true;
	}
	int j = 0;
	for (int i = 0; i < m->nnodes; i++) {
		if (!live[i])
			continue;
		IrNode *n = nd(a, i);
		to[i] = j;
		for (int k = 0; k < n->nops; k++)
			n->ops[k] = to[n->ops[k]];
		if (j != i) /* j < i: slot j's own moved or died already */
			ir_annots_copy(m, j, m, i);
		n->id = j;
		m->nodes[j++] = n;
	}
	m->nnodes = j;
	free(live);
	free(to);
}

bool pass_autodiff(IrModule *m, Diag *d, const PassOptions *opt)
{
	(void)opt;
	if (m->loss < 0)
		return true; /* nothing to differentiate */
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->role == IR_ROLE_GRAD)
			return true; /* IR text printed after autodiff: already done */
	const IrNode *L = m->nodes[m->loss];
	if (L->rank != 0 || !is_float(L->dtype)) {
		diag_error(d, L->loc, "autodiff: the loss must be a float scalar");
		return false;
	}
	Ad a = {.m = m, .d = d, .n0 = m->nnodes};
	a.defer = pipeline_axis(m) >= 0 && m->train.microbatches > 1;
	a.haspend = calloc((size_t)a.n0 + 1, sizeof(bool));
	a.phead = malloc(sizeof(int) * ((size_t)a.n0 + 1));
	if (!a.haspend || !a.phead)
		a.defer = false; /* summing in traversal order is correct too */
	a.grad = malloc(sizeof(int) * (size_t)a.n0);
	a.need = calloc((size_t)a.n0, sizeof(bool));
	a.kept = malloc(sizeof(int) * (size_t)a.n0);
	a.glabel = calloc((size_t)a.n0, sizeof *a.glabel); /* NULL: no labels, no harm */
	bool *from = calloc((size_t)a.n0, sizeof(bool)), *to = calloc((size_t)a.n0, sizeof(bool));
	if (!a.grad || !a.need || !a.kept || !from || !to) {
		too_large(&a);
		goto out;
	}
	for (int i = 0; i < a.n0; i++)
		a.grad[i] = -1;
	a.view_head = malloc(sizeof(int) * (size_t)a.n0);
	a.view_tail = malloc(sizeof(int) * (size_t)a.n0);
	if (a.view_head && a.view_tail) {
		for (int i = 0; i < a.n0; i++)
			a.view_head[i] = a.view_tail[i] = -1;
	} else {
		free(a.view_head);
		free(a.view_tail);
		a.view_head = a.view_tail = NULL;
	}
	find_needed(&a, from, to);

	a.stage = ir_stage(m, L);
	a.mb = ir_mb(m, L);
	a.block = ir_block(m, L);
	a.loc = L->loc;
	IrNode one = {.dtype = L->dtype, .rank = 0};
	IrAttr at1 = {.kind = IR_ATTR_SCALAR, .scalar = {1.0}};
	/* under loss scaling the seed is the runtime's scale S (loss_scale),
	 * so every gradient comes out times S: the optimizer's kernels
	 * unscale them (ir/ops.def) */
	if (ir_train_loss_scale(&m->train) != IR_LOSS_SCALE_OFF)
		a.grad[m->loss] = cast_to(&a, emit(&a, IR_OP_LOSS_SCALE, NULL, 0, NULL, NULL), L->dtype);
	else
		a.grad[m->loss] = emit(&a, IR_OP_CONST, NULL, 0, &at1, &one);
	for (int i = m->loss; i >= 0 && !a.failed; i--) {
		const IrNode *n = nd(&a, i);
		bool leaf = ir_op_flags(n->op) & OPF_LEAF;
		if (!a.need[i] || !is_float(n->dtype) || (leaf && n->op != IR_OP_RECV))
			continue;
		flush(&a, i);
		if (a.grad[i] < 0 && n->op != IR_OP_SEND)
			continue;
		a.stage = ir_stage(m, n);
		a.mb = ir_mb(m, n);
		a.block = ir_block(m, n);
		a.loc = n->loc;
		/* a shared value's sum in reduce_dtype, back to its own dtype for
		 * its rule; a view's rule moves it as it is */
		int dy = a.grad[i];
		if (n->op != IR_OP_PERMUTE && n->op != IR_OP_RESHAPE)
			dy = cast_to(&a, dy, n->dtype);
		pin_grad(&a, n, dy);
		backward(&a, n, dy);
	}
	if (!a.failed)
		finish_params(&a);
	if (!a.failed)
		remove_dead(&a);
out:
	free(a.grad);
	free(a.need);
	free(a.kept);
	free(a.pend);
	free(a.haspend);
	free(a.phead);
	free(a.view_head);
	free(a.view_tail);
	free(a.view_next);
	free(a.glabel);
	free(from);
	free(to);
	return !a.failed;
}
