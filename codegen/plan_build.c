/* plan_build.c - the Plan as data (see plan_build.h).
 *
 * Consumes the final IR (one rank's program, per pipeline stage after the
 * pipeline pass), its FusePlan and its MemPlan; produces the DtmPlan that
 * codegen/emit_c.c prints as C tables and the tools read.  Node by node,
 * in order, what each becomes:
 *   matmul that one strided GEMM expresses -> a DTM_ACT_GEMM action
 *     (transposes folded into trans flags; a batch over A's rows with a
 *     shared B becomes one tall GEMM, which BLAS runs far faster than a
 *     loop of small ones);
 *   root of a fused elementwise group, or any other computing op -> a
 *     DTM_ACT_KERNEL action calling the plan's kernel for it (the kernels'
 *     code is the emitters' business: cg_plan_kernels numbers them);
 *   a grad_norm over more gradients than one action carries -> a chain of
 *     kernel actions over consecutive slices of them;
 *   collective -> a DTM_ACT_COLL action (runtime/comm.c's conventions);
 *   send/recv -> DTM_ACT_SEND / DTM_ACT_RECV;
 *   leaves, fused-away members, folded transposes, copy-free reshapes ->
 *     nothing (const: a kernel).
 * Buffers: one per storage owner of the MemPlan, numbered in node order.
 * Phases: the pipeline pass's when set; else nodes up to the loss are
 * forward (what --eval-every runs), from the first optimizer node
 * (in-place update or grad_norm) on they are optimizer, the rest backward.
 */
#include "codegen/plan_build.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "passes/target.h"
#include "codegen/emit_c.h"

/* ---- what each node becomes (shared with cg_plan_kernels) ---- */

/* NK_MATMUL: a matmul outside any fused group, whose GEMM test (which
 * reads its operands) the plan builder leaves until it fills the action:
 * NK_GEMM or NK_KERNEL. */
typedef enum NodeKind {
	NK_NONE, NK_GEMM, NK_FUSED, NK_COLL, NK_KERNEL, NK_GNORM, NK_MATMUL
} NodeKind;

/* Gradients per action of a chunked grad_norm (plus its output). */
#define GNORM_CHUNK (DTM_MAX_ARGS - 2)

static int gnorm_chunks(int nops)
{
	return (nops + GNORM_CHUNK - 1) / GNORM_CHUNK;
}

/* NK_MATMUL resolved: fused, one GEMM, or a kernel. */
static NodeKind matmul_kind(const IrModule *m, const FusePlan *fp, int i)
{
	if (pass_matmul_is_gemm(m, m->nodes[i]))
		return NK_GEMM;
	return fp->root[i] == i ? NK_FUSED : NK_KERNEL;
}

/* What node i, whose op has flags fl (ir_op_flags), becomes; NK_MATMUL
 * left unresolved when `lazy`. */
static NodeKind node_kind_ex(const IrModule *m, const FusePlan *fp, const MemPlan *mp, int i,
                             unsigned fl, bool lazy)
{
	const MemPlanNode *n = &mp->node[i];
	if (n->op == IR_OP_SEND || n->op == IR_OP_RECV)
		return NK_NONE; /* plan actions of their own, no kernel */
	if (fp->internal[i] || fp->folded[i])
		return NK_NONE;
	/* a copy-free reshape shares its operand's bytes: nothing to run */
	if (mp->buf[i].owner >= 0 && mp->buf[i].owner != i && !(fl & OPF_INPLACE))
		return NK_NONE;
	if (fl & OPF_LEAF)
		return n->op == IR_OP_CONST || n->op == IR_OP_LOSS_SCALE ? NK_KERNEL : NK_NONE;
	if (fl & OPF_COLL)
		return NK_COLL;
	if (n->op == IR_OP_GRAD_NORM && n->nops > DTM_MAX_ARGS - 1)
		return NK_GNORM;
	if (n->op == IR_OP_MATMUL_WGRAD || n->op == IR_OP_MATMUL_WGRAD_ACC)
		return NK_GEMM; /* always one GEMM: fill_gemm */
	if (n->op == IR_OP_MATMUL)
		return lazy && fp->root[i] != i ? NK_MATMUL : matmul_kind(m, fp, i);
	if (fp->root[i] == i)
		return NK_FUSED;
	return NK_KERNEL;
}

static NodeKind node_kind(const IrModule *m, const FusePlan *fp, const MemPlan *mp, int i)
{
	return node_kind_ex(m, fp, mp, i, ir_op_flags((IrOp)mp->node[i].op), false);
}

/* A kernel action's args as node ids: a grad_norm chunk's gradients, a
 * fused group's external inputs (in the order its loop numbers them: the
 * emitters read them from here), or the op's operands; then the output. */
static_assert(FUSE_MAX_INPUTS <= DTM_MAX_ARGS - 1, "a fused group's inputs fit one action");
/* The passes' view of the target (passes/target.h, passes/memplan.h) is
 * the runtime's: memplan's arenas are DtmArena's, one for one, and an
 * action names as many buffers as the passes plan for. */
static_assert(PASS_MAX_ACTION_ARGS == DTM_MAX_ARGS, "passes/target.h: an action's buffers");
static_assert((int)MEMPLAN_ARENA_COUNT == (int)DTM_ARENA_COUNT, "memplan's arenas are the runtime's");
static_assert((int)MEMPLAN_ARENA_PARAM == (int)DTM_ARENA_PARAM &&
              (int)MEMPLAN_ARENA_OPT == (int)DTM_ARENA_OPT &&
              (int)MEMPLAN_ARENA_GRAD == (int)DTM_ARENA_GRAD &&
              (int)MEMPLAN_ARENA_ACT == (int)DTM_ARENA_ACT &&
              (int)MEMPLAN_ARENA_INPUT == (int)DTM_ARENA_INPUT,
              "memplan's arena numbers are DtmArena's");
/* Member x of fused group r (x <= r): its operands from outside the group
 * join r's inputs args[0 .. na), first use first; returns the new na. */
static int add_fused_inputs(const FusePlan *fp, const MemPlan *mp, int x, int r, int *args,
                            int na)
{
	const MemPlanNode *mx = &mp->node[x];
	const int *ops = &mp->opnd[mx->ops];
	for (int q = 0; q < mx->nops; q++) {
		int o = ops[q];
		if (fp->root[o] == r && fp->internal[o])
			continue;
		bool seen = false;
		for (int j = 0; j < na; j++)
			seen |= args[j] == o;
		if (!seen && na < DTM_MAX_ARGS - 1)
			args[na++] = o;
	}
	return na;
}

static int kernel_args(const FusePlan *fp, const MemPlan *mp, NodeKind k, int i, int chunk,
                       int *args)
{
	const MemPlanNode *n = &mp->node[i];
	const int *ops = &mp->opnd[n->ops];
	int na = 0;
	if (k == NK_GNORM) {
		int lo = chunk * GNORM_CHUNK;
		int hi = lo + GNORM_CHUNK < n->nops ? lo + GNORM_CHUNK : n->nops;
		for (int q = lo; q < hi; q++)
			args[na++] = ops[q];
	} else if (k == NK_FUSED) {
		for (int x = fp->first ? fp->first[i] : 0; x <= i; x++)
			if (fp->root[x] == i)
				na = add_fused_inputs(fp, mp, x, i, args, na);
	} else {
		for (int q = 0; q < n->nops && na < DTM_MAX_ARGS - 1; q++)
			args[na++] = ops[q];
	}
	args[na++] = i;
	return na;
}

int cg_plan_kernels(const IrModule *m, const FusePlan *fp, const MemPlan *mp, CgPlanKernel *out,
                    int cap)
{
	int nk = 0;
	for (int i = 0; i < m->nnodes; i++) {
		NodeKind k = node_kind(m, fp, mp, i);
		if (k != NK_FUSED && k != NK_KERNEL && k != NK_GNORM)
			continue;
		int nc = k == NK_GNORM ? gnorm_chunks(mp->node[i].nops) : 1;
		for (int c = 0; c < nc; c++, nk++) {
			if (!out || nk >= cap)
				continue;
			CgPlanKernel *pk = &out[nk];
			*pk = (CgPlanKernel){ .node = i, .fused = k == NK_FUSED, .chunk = c,
			                      .nchunks = nc };
			pk->nargs = kernel_args(fp, mp, k, i, c, pk->args);
		}
	}
	return nk;
}

/* ---- enums ---- */

static DtmDtype dtype_of(IrDtype t)
{
	switch (t) {
	case IR_BF16: return DTM_BF16;
	case IR_F16: return DTM_F16;
	case IR_I32: return DTM_I32;
	default: return DTM_F32;
	}
}

static DtmRole role_of(IrRole r)
{
	switch (r) {
	case IR_ROLE_PARAM: return DTM_ROLE_PARAM;
	case IR_ROLE_INPUT: return DTM_ROLE_INPUT;
	case IR_ROLE_LOSS: return DTM_ROLE_LOSS;
	case IR_ROLE_GRAD: return DTM_ROLE_GRAD;
	case IR_ROLE_OPT_STATE: return DTM_ROLE_OPT_STATE;
	default: return DTM_ROLE_ACT;
	}
}

static DtmColl coll_of(IrOp op)
{
	switch (op) {
	case IR_OP_ALL_GATHER: return DTM_COLL_ALL_GATHER;
	case IR_OP_REDUCE_SCATTER: return DTM_COLL_REDUCE_SCATTER;
	case IR_OP_ALL_TO_ALL: return DTM_COLL_ALL_TO_ALL;
	case IR_OP_BROADCAST: return DTM_COLL_BROADCAST;
	default: return DTM_COLL_ALL_REDUCE;
	}
}

static DtmRed red_of(IrRed r)
{
	switch (r) {
	case IR_RED_AVG: return DTM_RED_AVG;
	case IR_RED_MAX: return DTM_RED_MAX;
	default: return DTM_RED_SUM;
	}
}

/* ---- the builder ----
 *
 * Two walks over the nodes (`dtmc sweep` builds a plan per candidate, and
 * the module is larger than the caches), both over the MemPlan's compact
 * records of them rather than the IrNodes: classify finds what each node
 * becomes, numbers the buffers and counts each stage's actions, so that
 * every table is allocated once at its size; fill then numbers the
 * kernels and writes the buffers, the actions and the stages' and the
 * train config's buffer ids in node order, which is the order of each
 * table.  A matmul's GEMM test reads its operands, so it waits for fill,
 * which reads them for the GEMM's fields.  fill reads IrNodes only for
 * what the records leave out (a lean plan: a GEMM's shapes, a
 * collective's or a send's attributes) and asks for them, and for the
 * table entries it writes, a few nodes ahead.
 */

typedef struct Build {
	const IrModule *m;
	const FusePlan *fp;
	const MemPlan *mp;
	Arena *a;
	Diag *d;
	int *bufid;     /* per node: its buffer (its storage owner's), or -1 */
	/* per node: its NodeKind (NK_NONE also for send/recv); fill
	 * resolves NK_MATMUL as it reaches the node */
	uint8_t *kind;
	int *nacts;     /* per stage: how many actions it has */
	/* per fused group (numbered by classify, fslot[root]): its inputs so
	 * far, which fill gathers as it passes the group's members
	 * (kernel_args without a scan of the group's span per root) */
	int *fslot;
	int (*fin)[DTM_MAX_ARGS - 1];
	uint8_t *nfin;
	int nbuf, nfused;
	/* fill numbers the kernels (in node order, as cg_plan_kernels does)
	 * and names them here while there is room */
	int nkernels;
	const char **knames;
	int knames_cap;
	int opt_start;  /* first optimizer node */
	/* cg_plan_build_lean: no text for reports (placements, labels),
	 * names borrowed from the module, buffers without shapes (but the
	 * inputs'), split layouts or init */
	bool lean;
	CgLeanStore *keep; /* lean: the buffer table's, or NULL */
	/* ir_op_flags per op (a MemPlanNode's op is a byte), looked up once
	 * rather than called for per node */
	unsigned opfl[256];
	DtmPlan *p;
} Build;

static DtmPhase phase_of(const Build *b, int id)
{
	int ph = b->mp->node[id].phase;
	if (ph >= 0)
		return ph == IR_PHASE_FORWARD ? DTM_PHASE_FORWARD
		       : ph == IR_PHASE_BACKWARD ? DTM_PHASE_BACKWARD : DTM_PHASE_OPTIMIZER;
	if (b->m->loss < 0 || id <= b->m->loss)
		return DTM_PHASE_FORWARD;
	return id >= b->opt_start ? DTM_PHASE_OPTIMIZER : DTM_PHASE_BACKWARD;
}

static int64_t value_bytes(const MemPlanNode *x)
{
	return x->numel * ir_dtype_size((IrDtype)x->dtype);
}

/* The split layout the runtime's init, data feed and checkpoints index by
 * (DtmBuffer.split_axes): per dim, the mesh axes cutting it, major first.
 * Axes of size 1 cut nothing and are left out, so a one-rank plan's
 * tables stay as they were; no axis cutting anything: all zero. */
static void fill_split(const IrModule *m, const IrNode *n, DtmBuffer *buf)
{
	const Placement *p = ir_place(m, n);
	if (!p->known)
		return;
	bool any = false;
	for (int d = 0; d < n->rank && d < p->ndims; d++)
		for (int k = 0; k < p->naxes[d]; k++)
			any |= m->mesh.sizes[p->axes[d][k]] > 1;
	if (!any)
		return;
	for (int d = 0; d < n->rank && d < DTM_MAX_RANK; d++) {
		int c = 0;
		for (int k = 0; d < p->ndims && k < p->naxes[d]; k++)
			if (m->mesh.sizes[p->axes[d][k]] > 1 && c < DTM_MAX_AXES)
				buf->split_axes[d][c++] = (uint8_t)p->axes[d][k];
		buf->split_naxes[d] = (uint8_t)c;
	}
}

/* Buffer *buf (zeroed, or a lean buffer before) for storage owner i in a
 * lean plan: field by field from the node's record and its MemPlanBuf, so
 * that the lines of the fields a lean buffer leaves zero are not written. */
static void fill_buffer_lean(const Build *b, int i, DtmBuffer *buf)
{
	const MemPlanBuf *mb = &b->mp->buf[i];
	const MemPlanNode *n = &b->mp->node[mb->ident >= 0 ? mb->ident : i];
	buf->name = n->name;
	buf->role = role_of(i == b->m->loss ? IR_ROLE_LOSS : (IrRole)n->role);
	buf->dtype = dtype_of((IrDtype)n->dtype);
	buf->arena =
	        mb->arena >= 0 && mb->arena < MEMPLAN_ARENA_COUNT ? (DtmArena)mb->arena : DTM_ARENA_ACT;
	buf->offset = mb->offset;
	buf->bytes = mb->bytes;
	buf->stage = b->mp->nstages > 1 ? n->stage : 0;
	if (n->op == IR_OP_INPUT) {
		/* the inputs' shapes: the cost of making the batch reads them
		 * (cost_feed_seconds) */
		const IrNode *x = b->m->nodes[i];
		buf->rank = x->rank;
		for (int d = 0; d < x->rank && d < DTM_MAX_RANK; d++) {
			buf->shape[d] = x->shape[d];
			buf->global_shape[d] = ir_global_dim(b->m, x, d);
		}
	}
}

/* Buffer *buf (zeroed) for storage owner i, named and placed as the value
 * it holds for the runtime (MemPlanBuf.ident: i, or the grad.P that a
 * chain of accumulations in place ends in). */
static bool fill_buffer(Build *b, int i, DtmBuffer *buf)
{
	const IrModule *m = b->m;
	const MemPlanBuf *mb = &b->mp->buf[i];
	const IrNode *n = m->nodes[mb->ident >= 0 ? mb->ident : i];
	buf->name = n->name && !b->lean ? arena_strdup(b->a, n->name) : n->name;
	buf->role = role_of(i == m->loss ? IR_ROLE_LOSS : n->role);
	buf->dtype = dtype_of(n->dtype);
	buf->rank = n->rank;
	for (int d = 0; d < n->rank && d < DTM_MAX_RANK; d++) {
		buf->shape[d] = n->shape[d];
		buf->global_shape[d] = ir_global_dim(m, n, d);
	}
	fill_split(m, n, buf);
	if (!b->lean) {
		char pl[256];
		placement_format(ir_place(m, n), &m->mesh, pl, sizeof pl);
		buf->placement = arena_strdup(b->a, pl);
		if (!buf->placement)
			return false;
	}
	buf->arena =
	        mb->arena >= 0 && mb->arena < MEMPLAN_ARENA_COUNT ? (DtmArena)mb->arena : DTM_ARENA_ACT;
	buf->offset = mb->offset;
	buf->bytes = mb->bytes;
	buf->stage = b->mp->nstages > 1 ? ir_stage(m, n) : 0;
	switch (ir_link(m, n)) {
	case IR_LINK_OPT_M: buf->opt_kind = DTM_OPT_M; break;
	case IR_LINK_OPT_V: buf->opt_kind = DTM_OPT_V; break;
	case IR_LINK_OPT_MOM: buf->opt_kind = DTM_OPT_MOM; break;
	case IR_LINK_OPT_MASTER: buf->opt_kind = DTM_OPT_MASTER; break;
	default: buf->opt_kind = DTM_OPT_NONE; break;
	}
	if (ir_op_attr_kind(n->op) == IR_ATTR_INIT) {
		const IrAttrInit *init = ir_attr_init(n);
		int k = (int)init->kind;
		buf->init = k >= 0 && k <= DTM_INIT_UNIFORM ? (DtmInit)k : DTM_INIT_NONE;
		buf->init_a = (float)init->arg[0];
		buf->init_b = (float)init->arg[1];
	}
	return !n->name || buf->name;
}

/* "matmul layer.0.wq" or "add %42"; by hand rather than arena_printf,
 * which formats twice: `dtmc sweep` builds thousands of plans. */
static const char *label_of(Build *b, const IrNode *n)
{
	const char *op = ir_op_name(n->op);
	char id[16];
	const char *tail = n->name;
	if (!tail) { /* "%<id>", ids are >= 0 */
		char digits[12];
		int nd = 0;
		unsigned v = n->id >= 0 ? (unsigned)n->id : 0;
		do
			digits[nd++] = (char)('0' + v % 10);
		while ((v /= 10) && nd < 11);
		id[0] = '%';
		for (int k = 0; k < nd; k++)
			id[1 + k] = digits[nd - 1 - k];
		id[1 + nd] = 0;
		tail = id;
	}
	size_t a = strlen(op), t = strlen(tail);
	char *s = arena_alloc_raw(b->a, a + t + 2);
	if (!s)
		return NULL;
	memcpy(s, op, a);
	s[a] = ' ';
	memcpy(s + a + 1, tail, t + 1);
	return s;
}

/* GEMM fields for matmul i: see the file comment for the batch folding. */
static void fill_gemm(Build *b, int i, DtmAction *act)
{
	const IrModule *m = b->m;
	const FusePlan *fp = b->fp;
	const IrNode *n = m->nodes[i];
	/* pass_fuse_operand, from the records */
	const MemPlanNode *rec = b->mp->node;
	const int *ops = &b->mp->opnd[rec[i].ops];
	/* matmul_wgrad_acc(acc, x, dy): x^T dy onto acc's bytes, which are
	 * this node's (in place), so C = x^T dy + C */
	bool acc = n->op == IR_OP_MATMUL_WGRAD_ACC;
	if (acc)
		ops++;
	int A = ops[0], B = ops[1];
	bool ta = fp->folded[A], tb = fp->folded[B];
	if (ta)
		A = b->mp->opnd[rec[A].ops];
	if (tb)
		B = b->mp->opnd[rec[B].ops];
	const IrNode *an = m->nodes[ops[0]];
	int r = n->rank;
	int64_t M = n->shape[r - 2], N = n->shape[r - 1], K = an->shape[an->rank - 1];
	int64_t batch = 1, sa = 0, sb = 0, sc = 0;
	if (n->op == IR_OP_MATMUL_WGRAD || acc) {
		/* [K, N] = x^T dy over the rows: x [rows, K] read transposed */
		M = n->shape[0];
		K = M > 0 ? rec[ops[0]].numel / M : 0;
		ta = true;
	} else {
		for (int d = 0; d < r - 2; d++)
			batch *= n->shape[d];
		int64_t abat = M * K > 0 ? rec[ops[0]].numel / (M * K) : 1;
		int64_t bbat = K * N > 0 ? rec[ops[1]].numel / (K * N) : 1;
		sa = abat > 1 ? M * K : 0, sb = bbat > 1 ? K * N : 0, sc = M * N;
		if (batch > 1 && abat > 1 && bbat <= 1 && !ta) {
			M *= batch;
			batch = 1;
			sa = sb = sc = 0;
		}
	}
	act->kind = DTM_ACT_GEMM;
	act->nargs = 3;
	act->args[0] = b->bufid[A];
	act->args[1] = b->bufid[B];
	act->args[2] = b->bufid[i];
	act->m = M;
	act->n = N;
	act->k = K;
	act->batch = batch;
	act->stride_a = sa;
	act->stride_b = sb;
	act->stride_c = sc;
	act->trans_a = ta;
	act->trans_b = tb;
	act->alpha = 1.0f;
	act->beta = acc ? 1.0f : 0.0f;
	act->flops = 2 * M * N * K * batch;
}

/* The FLOPs of an attention-family kernel (0 for any other kernel, which
 * the cost model prices by the bytes it moves).  Attention on q [B, T, D]
 * and k [B, Tk, Dk] is two GEMMs, scores and scores times v: 4 B T Tk D
 * (D = heads x hd; grouped-query k and v change no count); causal, half
 * of it; its backward twice the forward (llm.c's 6N + 6LCT, which
 * inspect's FLOPs per token uses, counts the same).  A ring block
 * (attn_block, attn_block_bwd on a [B, Tl, D] query block against a
 * [B, Tl, Dk] key block) counts as attention on those shapes: causal, its
 * diagonal block (step 0) half, the others whole.  Off the diagonal a
 * rank's contiguous key block is either all below it or all masked, by
 * rank, and the ranks step round the ring in lockstep, so the step waits
 * for the rank whose blocks are all below: whole.  Load-balanced blocks
 * (attn.balanced: chunks 2g and 2N-1-2g) see exactly half of every key
 * block on every rank, the kernels skipping masked keys: half, each
 * step.  attn_merge is elementwise: bytes.
 * A window is not counted (the whole row). */
static int64_t attn_flops(const IrModule *m, const IrNode *n)
{
	int q, k;
	bool bwd = n->op == IR_OP_ATTENTION_BWD || n->op == IR_OP_ATTN_BLOCK_BWD;
	switch (n->op) {
	case IR_OP_ATTENTION:
	case IR_OP_ATTN_BLOCK:
		q = 0, k = 1;
		break;
	case IR_OP_ATTENTION_BWD:
	case IR_OP_ATTN_BLOCK_BWD:
		q = 1, k = 2;
		break;
	default:
		return 0;
	}
	const IrNode *qn = m->nodes[n->ops[q]], *kn = m->nodes[n->ops[k]];
	if (qn->rank != 3 || kn->rank != 3)
		return 0;
	const IrAttrAttn *at = ir_attr_attn(n);
	int64_t f = 4 * qn->shape[0] * qn->shape[1] * kn->shape[1] * qn->shape[2];
	bool block = n->op == IR_OP_ATTN_BLOCK || n->op == IR_OP_ATTN_BLOCK_BWD;
	if (at->causal && (!block || at->step == 0 || at->balanced))
		f /= 2;
	return bwd ? 2 * f : f;
}

/* A collective's fields, in runtime/comm.c's conventions (above
 * comm_run_action): dim and dim2 are dims of the input's shape (the
 * gather/scatter dim, or all_to_all's split and concat dims), bytes the
 * input's local bytes, a broadcast's root (a group index) in
 * peer_offset. */
static void fill_coll(const MemPlan *mp, const IrNode *n, int i, DtmAction *act)
{
	const MemPlanNode *x = &mp->node[mp->opnd[mp->node[i].ops]];
	const IrAttrColl *c = ir_attr_coll(n);
	int i0 = c->n > 0 ? (int)c->args[0] : 0;
	int i1 = c->n > 1 ? (int)c->args[1] : 0;
	bool dims = n->op != IR_OP_BROADCAST && n->op != IR_OP_ALL_REDUCE;
	act->kind = DTM_ACT_COLL;
	act->coll = coll_of(n->op);
	act->axes = c->axes;
	act->red = red_of(c->red);
	act->dim = dims ? i0 : 0;
	act->dim2 = n->op == IR_OP_ALL_TO_ALL ? i1 : 0;
	act->vdim = n->op == IR_OP_ALL_TO_ALL && c->n > 2 ? (int)c->args[2] : 0;
	if (n->op == IR_OP_BROADCAST)
		act->peer_offset = i0;
	act->bytes = value_bytes(x);
	act->stream = 1;
}

/* Member x of fused group r: gathered as the walk passes it, in the order
 * kernel_args lists them. */
static void gather_fused(Build *b, int x, int r)
{
	int f = b->fslot[r];
	b->nfin[f] = (uint8_t)add_fused_inputs(b->fp, b->mp, x, r, b->fin[f], b->nfin[f]);
}

/* Node i's actions (one, or a chunked grad_norm's several) into out
 * (zeroed); a kernel's are kernels kernel, kernel + 1, ...  Returns the
 * slot after them, NULL when out of memory. */
static DtmAction *fill_actions(Build *b, int i, int kernel, DtmAction *out)
{
	const IrModule *m = b->m;
	const MemPlanNode *n = &b->mp->node[i];
	bool p2p = n->op == IR_OP_SEND || n->op == IR_OP_RECV;
	NodeKind k = (NodeKind)b->kind[i];
	int nact = k == NK_GNORM ? gnorm_chunks(n->nops) : 1;
	DtmPhase phase = phase_of(b, i);
	for (int c = 0; c < nact; c++) {
		/* zeroed by copying a zero action: what a compound literal
		 * compiles to here (rep stos) costs more than the copy */
		static const DtmAction no_action;
		DtmAction *act = out++;
		*act = no_action;
		act->phase = phase;
		act->microbatch = n->mb > 0 ? n->mb : 0;
		act->node = i;
		act->label = b->lean ? ir_op_name((IrOp)n->op) : label_of(b, m->nodes[i]);
		if (!act->label)
			return NULL;
		if (p2p) {
			/* args = { the buffer sent, or received into } */
			const IrNode *nd = m->nodes[i];
			int buf = n->op == IR_OP_SEND ? b->mp->opnd[n->ops] : i;
			act->kind = n->op == IR_OP_SEND ? DTM_ACT_SEND : DTM_ACT_RECV;
			act->nargs = 1;
			act->args[0] = b->bufid[buf];
			const IrAttrColl *c = ir_attr_coll(nd);
			act->axes = c->axes;
			act->peer_offset = c->n > 0 ? (int)c->shift : 0;
			act->peer_mirror = c->n > 1 && c->args[1];
			act->bytes = value_bytes(&b->mp->node[buf]);
			act->stream = 1;
			continue;
		}
		if (k == NK_GEMM) {
			fill_gemm(b, i, act);
			continue;
		}
		/* a kernel's args are its kernel's (cg_plan_kernels) */
		int args[DTM_MAX_ARGS];
		int na;
		if (k == NK_FUSED) {
			/* the inputs fill gathered, then the output */
			int f = b->fslot[i];
			na = b->nfin[f];
			memcpy(args, b->fin[f], sizeof(int) * (size_t)na);
			args[na++] = i;
		} else {
			na = kernel_args(b->fp, b->mp, k, i, c, args);
		}
		act->nargs = na;
		for (int j = 0; j < na; j++)
			act->args[j] = b->bufid[args[j]];
		if (k == NK_COLL) {
			fill_coll(b->mp, m->nodes[i], i, act);
		} else {
			act->kind = DTM_ACT_KERNEL;
			act->kernel = kernel + c;
			if (k == NK_KERNEL)
				act->flops = attn_flops(m, m->nodes[i]);
			/* a slice reads the part it copies, not its whole operand (a
			 * DDP bucket's unpack would be charged the bucket per
			 * gradient); the cost model sums the arguments otherwise */
			if (k == NK_KERNEL && m->nodes[i]->op == IR_OP_SLICE)
				act->mem_bytes = 2 * value_bytes(&b->mp->node[i]);
		}
	}
	return out;
}

/* The first walk: opt_start, buffer ids, kinds (a matmul's maybe
 * NK_MATMUL), fused groups and each stage's action count (a node of no
 * stage 0 .. ns-1 is in none). */
static void classify(Build *b)
{
	const IrModule *m = b->m;
	const MemPlan *mp = b->mp;
	int nn = m->nnodes, ns = mp->nstages;
	bool later = false; /* an alias of a later node */
	for (int i = 0; i < nn; i++) {
		const MemPlanNode *n = &b->mp->node[i];
		bool gn = n->fl & MEMPLAN_N_GRAD_NORM;
		if (i < b->opt_start &&
		    (ir_op_is_update((IrOp)n->op) || gn || n->op == IR_OP_GRAD_NORM))
			b->opt_start = i;
		int o = mp->buf[i].owner;
		b->bufid[i] = o == i ? b->nbuf++ : o >= 0 && o < i ? b->bufid[o] : -1;
		later |= o > i;
		bool p2p = n->op == IR_OP_SEND || n->op == IR_OP_RECV;
		NodeKind k = p2p ? NK_NONE : node_kind_ex(m, b->fp, mp, i, b->opfl[n->op], true);
		int nc = k == NK_GNORM ? gnorm_chunks(n->nops) : 1;
		b->kind[i] = (uint8_t)k;
		if (k == NK_FUSED)
			b->fslot[i] = b->nfused++;
		int s = ns > 1 ? n->stage : 0;
		if ((p2p || k != NK_NONE) && s >= 0 && s < ns)
			b->nacts[s] += nc;
	}
	if (later) {
		/* an alias of a later alias takes that one's id before its own
		 * owner's is copied in: number first, then copy in node order */
		for (int i = 0; i < nn; i++)
			b->bufid[i] = mp->buf[i].owner == i ? b->bufid[i] : -1;
		for (int i = 0; i < nn; i++)
			if (mp->buf[i].owner >= 0 && mp->buf[i].owner != i)
				b->bufid[i] = b->bufid[mp->buf[i].owner];
	}
}

/* The kernel table, after fill has numbered and named the kernels. */
static bool build_kernels(Build *b)
{
	const IrModule *m = b->m;
	int nk = b->nkernels;
	DtmKernelFn *fns = arena_alloc(b->a, sizeof *fns * (size_t)(nk ? nk : 1));
	const char **names = b->knames;
	if (nk > b->knames_cap) /* chunked grad_norms: more kernels than nodes */
		names = arena_alloc_raw(b->a, sizeof *names * (size_t)nk);
	if (!fns || !names)
		return false;
	for (int i = 0, k = 0; names != b->knames && i < m->nnodes; i++) {
		NodeKind kind = (NodeKind)b->kind[i];
		if (kind != NK_FUSED && kind != NK_KERNEL && kind != NK_GNORM)
			continue;
		const MemPlanNode *n = &b->mp->node[i];
		int nc = kind == NK_GNORM ? gnorm_chunks(n->nops) : 1;
		for (int c = 0; c < nc; c++)
			names[k++] = kind == NK_FUSED ? "fused" : ir_op_name((IrOp)n->op);
	}
	b->p->nkernels = nk;
	b->p->kernels = fns;
	b->p->kernel_names = names;
	return true;
}

/* The plan's inputs (the first four of stage 0), loss and grad norm, and
 * the train config with the global sizes the data feed draws from. */
static bool build_train(Build *b, const int *inputs, int ninputs, int gnorm)
{
	const IrModule *m = b->m;
	const IrTrain *t = &m->train;
	DtmPlan *p = b->p;
	/* tokens when the first two inputs are i32 (tokens, targets), else
	 * regression on (x, y) */
	bool tokens = ninputs >= 2 && m->nodes[inputs[0]]->dtype == IR_I32 &&
	              m->nodes[inputs[1]]->dtype == IR_I32;
	const IrNode *in0 = ninputs ? m->nodes[inputs[0]] : NULL;
	int64_t B = in0 ? ir_global_dim(m, in0, 0) : 0;
	int64_t T = tokens && in0->rank > 1 ? ir_global_dim(m, in0, 1) : 1;
	int64_t vocab = 0;
	for (int i = 0; tokens && i < m->nnodes && !vocab; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_EMBED || n->op == IR_OP_EMBED_VP)
			vocab = ir_global_dim(m, m->nodes[n->ops[0]], 0);
		else if (n->op == IR_OP_CROSS_ENTROPY)
			vocab = ir_global_dim(m, m->nodes[n->ops[0]], m->nodes[n->ops[0]]->rank - 1);
	}
	p->ninputs = ninputs;
	for (int k = 0; k < ninputs; k++)
		p->inputs[k] = b->bufid[inputs[k]];
	p->loss = m->loss >= 0 ? b->bufid[m->loss] : -1;
	p->grad_norm = gnorm >= 0 ? b->bufid[gnorm] : -1;
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_MOE_SLOT) {
			const IrAttrRoute *ra = ir_attr_route(m->nodes[i]);
			if (ra->stats > p->moe_sites)
				p->moe_sites = (int)ra->stats;
			if (ra->n > p->moe_experts)
				p->moe_experts = (int)ra->n;
		}
	DtmTrainCfg *c = &p->train;
	/* not given: the runtime's defaults (sgd, constant, 1f1b) */
	c->optimizer = t->optimizer == IR_OPTIMIZER_ADAMW ? DTM_OPTIMIZER_ADAMW : DTM_OPTIMIZER_SGD;
	c->lr = (float)t->lr;
	c->beta1 = (float)t->beta1;
	c->beta2 = (float)t->beta2;
	c->eps = (float)t->eps;
	c->weight_decay = (float)t->weight_decay;
	c->clip = (float)t->clip;
	c->momentum = (float)t->momentum;
	c->nesterov = t->nesterov;
	c->lr_schedule = t->lr_schedule == IR_LR_COSINE ? DTM_LR_COSINE : DTM_LR_CONSTANT;
	c->warmup = t->warmup;
	c->min_lr = (float)t->min_lr;
	c->steps = t->steps;
	c->data = arena_strdup(b->a, t->data ? t->data : "synthetic");
	c->seed = t->seed;
	c->tokens_per_step = B * T;
	c->batch = B;
	c->seq = tokens ? T : 0;
	c->vocab = vocab;
	c->data_kind = tokens ? DTM_DATA_TOKENS : DTM_DATA_REGRESSION;
	c->microbatches = (int)(t->microbatches > 0 ? t->microbatches : 1);
	c->precision = dtype_of(t->precision);
	switch (ir_train_loss_scale(t)) {
	case IR_LOSS_SCALE_DYNAMIC: c->loss_scale = DTM_LOSS_SCALE_DYNAMIC; break;
	case IR_LOSS_SCALE_FIXED: c->loss_scale = DTM_LOSS_SCALE_FIXED; break;
	default: c->loss_scale = DTM_LOSS_SCALE_OFF; break;
	}
	c->init_scale = (float)t->init_scale;
	c->growth_factor = (float)t->growth_factor;
	c->backoff_factor = (float)t->backoff_factor;
	c->growth_interval = t->growth_interval;
	c->schedule = t->schedule == IR_PIPE_GPIPE         ? DTM_PIPE_GPIPE
	              : t->schedule == IR_PIPE_INTERLEAVED ? DTM_PIPE_INTERLEAVED
	              : t->schedule == IR_PIPE_ZB          ? DTM_PIPE_ZB
	                                                   : DTM_PIPE_1F1B;
	c->virtual_stages = (int)(t->virtual_stages > 0 ? t->virtual_stages : 1);
	return c->data != NULL;
}

/* The second walk: buffers, each stage's actions (in node order) and,
 * pipelined, its inputs, loss, grad norm and arenas, which a plan of one
 * stage keeps in DtmPlan (runtime/plan.h); then the train config.  An
 * empty stage gets one WAIT so its table is never empty.  1 when done, 0
 * when out of memory, -1 after reporting a kernel whose operands do not
 * fit an action. */
static int fill(Build *b)
{
	const IrModule *m = b->m;
	const MemPlan *mp = b->mp;
	int nn = m->nnodes, ns = mp->nstages;
	size_t nbufs = (size_t)(b->nbuf ? b->nbuf : 1);
	DtmBuffer *bufs;
	CgLeanStore *keep = b->keep;
	if (keep && keep->cap < (int)nbufs) {
		int cap = (int)nbufs + (int)nbufs / 4;
		free(keep->bufs);
		keep->bufs = calloc((size_t)cap, sizeof *keep->bufs);
		keep->cap = keep->bufs ? cap : 0;
	}
	bufs = keep ? keep->bufs : arena_alloc(b->a, sizeof *bufs * nbufs);
	DtmStage *st = arena_alloc(b->a, sizeof *st * (size_t)ns);
	DtmAction **cur = arena_alloc(b->a, sizeof *cur * (size_t)ns);
	int *sl = arena_alloc_raw(b->a, sizeof *sl * 2 * (size_t)ns), *sg = sl ? sl + ns : NULL;
	size_t nf = (size_t)(b->nfused ? b->nfused : 1);
	b->fin = arena_alloc_raw(b->a, sizeof *b->fin * nf);
	b->nfin = arena_alloc(b->a, nf);
	if (!bufs || !st || !cur || !sl || !b->fin || !b->nfin)
		return 0;
	for (int s = 0; s < ns; s++) {
		int n = b->nacts[s] ? b->nacts[s] : 1;
		DtmAction *acts = arena_alloc_raw(b->a, sizeof *acts * (size_t)n);
		if (!acts)
			return 0;
		if (!b->nacts[s])
			*acts = (DtmAction){ .kind = DTM_ACT_WAIT, .label = "empty" };
		st[s].nactions = n;
		st[s].actions = acts;
		cur[s] = acts;
		sl[s] = sg[s] = -1;
	}
	int inputs[4], ninputs = 0, gnorm = -1, named = -1;
	const MemPlanNode *rec = b->mp->node;
	for (int i = 0; i < nn; i++) {
		const MemPlanNode *n = &rec[i];
		int id = b->bufid[i];
		int r = b->fp->root[i];
		if (r >= i && r < nn && b->kind[r] == NK_FUSED &&
		    (!b->fp->first || i >= b->fp->first[r]))
			gather_fused(b, i, r);
		if (mp->buf[i].owner == i) {
			if (b->lean)
				fill_buffer_lean(b, i, &bufs[id]);
			else if (!fill_buffer(b, i, &bufs[id]))
				return 0;
		}
		bool gn = false;
		if (id >= 0) {
			if (n->op == IR_OP_INPUT && ninputs < 4 && (ns == 1 || n->stage == 0))
				inputs[ninputs++] = i;
			gn = n->fl & MEMPLAN_N_GRAD_NORM;
			if (named < 0 && gn)
				named = i;
			if (gnorm < 0 && (gn || n->op == IR_OP_GRAD_NORM))
				gnorm = i;
		}
		/* the GEMM test reads the operands, which the GEMM's fields
		 * read next; kernels are numbered and named in node order */
		NodeKind k = (NodeKind)b->kind[i];
		if (k == NK_MATMUL)
			b->kind[i] = (uint8_t)(k = matmul_kind(m, b->fp, i));
		int kernel = b->nkernels;
		if (k == NK_FUSED || k == NK_KERNEL || k == NK_GNORM) {
			/* a generic wrapper passes every operand: they must fit */
			if (k == NK_KERNEL && n->nops + 1 > DTM_MAX_ARGS) {
				diag_error(b->d, m->nodes[i]->loc,
				           "%s with %d operands: the CPU back end takes at most %d",
				           ir_op_name((IrOp)n->op), n->nops, DTM_MAX_ARGS - 1);
				return -1;
			}
			const char *name = k == NK_FUSED ? "fused" : ir_op_name((IrOp)n->op);
			int nc = k == NK_GNORM ? gnorm_chunks(n->nops) : 1;
			for (int c = 0; c < nc; c++, b->nkernels++)
				if (b->nkernels < b->knames_cap)
					b->knames[b->nkernels] = name;
		}
		int s = ns > 1 ? n->stage : 0;
		if (s < 0 || s >= ns)
			continue;
		if (ns > 1 && id >= 0) {
			if (n->op == IR_OP_INPUT && st[s].ninputs < 4)
				st[s].inputs[st[s].ninputs++] = id;
			if (n->role == IR_ROLE_LOSS)
				sl[s] = i;
			if (sg[s] < 0 && gn)
				sg[s] = i;
		}
		if (k != NK_NONE || n->op == IR_OP_SEND || n->op == IR_OP_RECV) {
			cur[s] = fill_actions(b, i, kernel, cur[s]);
			if (!cur[s])
				return 0;
		}
	}
	for (int s = 0; s < ns; s++) {
		assert(cur[s] == st[s].actions + b->nacts[s]);
		if (ns == 1)
			continue;
		memcpy(st[s].arena_bytes, mp->stage_arena_bytes[s], sizeof st[s].arena_bytes);
		st[s].loss = sl[s] >= 0 ? b->bufid[sl[s]] : -1;
		st[s].grad_norm = sg[s] >= 0 ? b->bufid[sg[s]] : -1;
	}
	b->p->nbuffers = b->nbuf;
	b->p->buffers = bufs;
	b->p->nstages = ns;
	b->p->stages = st;
	/* partitioned: the grad_norm ops are per-group partial norms, the
	 * global norm is the value named grad_norm that combines them */
	return build_train(b, inputs, ninputs, named >= 0 ? named : gnorm) ? 1 : 0;
}

static DtmPlan *plan_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, Arena *a,
                           Diag *d, bool lean, CgLeanStore *keep)
{
	Build b = { .m = m, .fp = fp, .mp = mp, .a = a, .d = d, .opt_start = m->nnodes,
	            .lean = lean, .keep = keep };
	for (int op = 0; op < 256; op++)
		b.opfl[op] = ir_op_flags((IrOp)op); /* 0 past the ops */
	size_t nn = (size_t)m->nnodes + 1;
	b.p = arena_alloc(a, sizeof *b.p);
	b.bufid = arena_alloc_raw(a, sizeof(int) * nn);
	b.fslot = arena_alloc_raw(a, sizeof(int) * nn);
	b.kind = arena_alloc_raw(a, nn);
	b.nacts = arena_alloc(a, sizeof(int) * ((size_t)mp->nstages + 1));
	b.knames = arena_alloc_raw(a, sizeof *b.knames * nn);
	b.knames_cap = (int)nn;
	if (!b.p || !b.bufid || !b.fslot || !b.kind || !b.nacts || !b.knames || m->nnodes < 1)
		goto oom;
	if (m->mesh.naxes > DTM_MAX_AXES) {
		diag_error(d, (SrcLoc){0}, "a mesh of %d axes: plans hold at most %d",
		           m->mesh.naxes, DTM_MAX_AXES);
		return NULL;
	}
	classify(&b);
	DtmPlan *p = b.p;
	p->version = DTM_PLAN_VERSION;
	p->model = m->name ? arena_strdup(a, m->name) : NULL;
	p->mesh_naxes = m->mesh.naxes;
	for (int ax = 0; ax < m->mesh.naxes; ax++) {
		p->mesh_names[ax] = m->mesh.names[ax] ? arena_strdup(a, m->mesh.names[ax]) : NULL;
		p->mesh_sizes[ax] = m->mesh.sizes[ax];
		if (m->mesh.names[ax] && !p->mesh_names[ax])
			goto oom;
	}
	p->pp_axis = m->pp_axis;
	if (m->name && !p->model)
		goto oom;
	memcpy(p->arena_bytes, mp->arena_bytes, sizeof p->arena_bytes);
	int filled = fill(&b);
	if (filled < 0)
		return NULL;
	if (!filled || !build_kernels(&b))
		goto oom;
	/* pipelined: the plan's own inputs are stage 0's copies */
	if (p->nstages > 1)
		for (int k = 0; k < p->ninputs && k < p->stages[0].ninputs; k++)
			p->inputs[k] = p->stages[0].inputs[k];
	return p;
oom:
	diag_error(d, (SrcLoc){0}, "out of memory building the plan");
	return NULL;
}

DtmPlan *cg_plan_build(const IrModule *m, const FusePlan *fp, const MemPlan *mp, Arena *a, Diag *d)
{
	return plan_build(m, fp, mp, a, d, false, NULL);
}

DtmPlan *cg_plan_build_lean(const IrModule *m, const FusePlan *fp, const MemPlan *mp,
                            CgLeanStore *keep, Arena *a, Diag *d)
{
	return plan_build(m, fp, mp, a, d, true, keep);
}

void cg_plan_lean_store_free(CgLeanStore *s)
{
	free(s->bufs);
	*s = (CgLeanStore){0};
}
