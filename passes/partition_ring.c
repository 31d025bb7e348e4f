/* partition_ring.c - ring attention (context_parallel ring) in the
 * partition pass: an attention or attention_bwd node whose local rule
 * (partition_rules.c, attention_rule) marked it attn.ring becomes the
 * block ops, merges and sends round the ring (ARCHITECTURE.md "Context
 * parallelism"); part_node (partition.c) calls part_ring. */
#include "passes/partition_impl.h"

/* ---- ring attention (context_parallel ring; ARCHITECTURE.md) ----
 * attention (or attention_bwd) whose rule split the sequence over the
 * group attn.ring of n ranks: each rank keeps its query block and the
 * K/V blocks go round the ring, shift 1, n - 1 times; each step's block
 * result (attn_block: output and log-sum-exp) is merged into the running
 * one (attn_merge, online softmax).  The backward runs that forward again
 * for the rows' output and log-sum-exp, then the ring once more with
 * attn_block_bwd: dq adds up at home, dk and dv travel with their K/V
 * block and, after the last step, one more shift takes them home. */

/* A global node like n with dim d of extent e (the shape of a local value
 * whose placement is n's, that dim unsplit or split as n's). */
static IrNode like_dim(const IrNode *n, int d, int64_t e)
{
	IrNode x = *n;
	x.shape[d] = e;
	return x;
}

/* send(x) then recv(), shift 1 over axes: the neighbour's x. */
static int ring_pass(Part *p, int x, const IrNode *like, uint32_t axes)
{
	IrAttr at = {.kind = IR_ATTR_COLL, .coll = {.axes = axes, .n = 1, .shift = 1}};
	const Placement *pl = ir_place(p->out, part_loc_node(p, x));
	Placement cp = *pl;
	if (part_emit(p, IR_OP_SEND, &x, 1, &at, like, &cp, x) < 0)
		return -1;
	return part_emit(p, IR_OP_RECV, NULL, 0, &at, like, &cp, x);
}

/* Causal load balancing (attn.balanced): x's sequence dim d, two chunks
 * of half a block, goes from chunks 2g, 2g+1 of the 2N (the contiguous
 * split) to chunks 2g, 2N-1-2g by swapping second halves with member
 * N-1-g (send/recv mirror), so each rank's causal work is the same: a
 * pair i, 2N-1-i as Megatron-CP's, in another order of ranks.  The swap is
 * its own inverse, so the same call takes a result back.  On an uneven
 * sequence the chunks are the padded sequence's (N blocks of Tl rows). */
static int ring_balance(Part *p, int x, const IrNode *like, int d, uint32_t axes, int64_t N)
{
	int64_t Tl = part_loc_node(p, x)->shape[d], h = Tl / 2;
	Placement pl = *ir_place(p->out, part_loc_node(p, x));
	/* a half block a rank (an uneven sequence's padded: N h rows in all) */
	IrNode lh = like_dim(like, d, N * h);
	IrAttr s0 = {.kind = IR_ATTR_SLICE, .slice = {d, 0, h}};
	IrAttr s1 = {.kind = IR_ATTR_SLICE, .slice = {d, h, Tl}};
	IrAttr mi = {.kind = IR_ATTR_COLL, .coll = {.axes = axes, .n = 2, .args = {N - 1, 1}}};
	IrAttr cat = {.kind = IR_ATTR_AXIS, .axis = {d}};
	int a = part_emit(p, IR_OP_SLICE, &x, 1, &s0, &lh, &pl, x);
	int b = a < 0 ? -1 : part_emit(p, IR_OP_SLICE, &x, 1, &s1, &lh, &pl, x);
	if (b < 0 || part_emit(p, IR_OP_SEND, &b, 1, &mi, &lh, &pl, x) < 0 ||
	    (b = part_emit(p, IR_OP_RECV, NULL, 0, &mi, &lh, &pl, x)) < 0)
		return -1;
	return part_emit(p, IR_OP_CONCAT, (int[]){a, b}, 2, &cat, like, &pl, x);
}

/* What goes round the ring: the local K and V blocks and, with document
 * masks, the key block's segment ids (id), their global nodes (g). */
typedef struct RingKV {
	int id[3];
	const IrNode *g[3];
	int n;
} RingKV;

/* kv one rank along the ring: false when out of memory. */
static bool ring_step(Part *p, RingKV *kv, uint32_t axes)
{
	for (int j = 0; j < kv->n; j++)
		if ((kv->id[j] = ring_pass(p, kv->id[j], kv->g[j], axes)) < 0)
			return false;
	return true;
}

/* A block op's operands: head (q, or dy, q), the K and V block, tail
 * (attn_block_bwd's ol), then the segment ids of the query and of the
 * key block where there are any; returns the count. */
static int block_ops(int *o, const int *head, int nhead, const RingKV *kv, int tail, int qseg)
{
	int k = 0;
	for (int i = 0; i < nhead; i++)
		o[k++] = head[i];
	o[k++] = kv->id[0];
	o[k++] = kv->id[1];
	if (tail >= 0)
		o[k++] = tail;
	if (kv->n > 2) {
		o[k++] = qseg;
		o[k++] = kv->id[2];
	}
	return k;
}

/* The forward ring on local q (its segment ids qseg) and kv: the merged
 * [B, Tl, Dl + Hl], or -1. */
static int ring_forward(Part *p, const IrNode *n, int q, int qseg, RingKV kv, const IrAttr *at,
                        const Placement *res, int64_t N)
{
	int b0 = n->rank == 4 ? 1 : 0; /* attention_bwd's [3, B, T, D] */
	IrNode ol = *n;
	ol.rank = 3;
	ol.shape[0] = n->shape[b0];
	ol.shape[1] = n->shape[b0 + 1];
	ol.shape[2] = n->shape[b0 + 2] + ir_attr_attn(n)->heads;
	ol.shape[3] = 0;
	Placement rp = *res;
	if (n->rank == 4) { /* drop the stack dim */
		for (int d = 0; d < 3; d++) {
			rp.naxes[d] = res->naxes[d + 1];
			memcpy(rp.axes[d], res->axes[d + 1], sizeof rp.axes[d]);
		}
		rp.ndims = 3;
		rp.naxes[3] = 0;
	}
	IrAttr ba = *at;
	ba.attn.step = 0;
	int o[5], no = block_ops(o, &q, 1, &kv, -1, qseg);
	int acc = part_emit(p, IR_OP_ATTN_BLOCK, o, no, &ba, &ol, &rp, q);
	for (int64_t s = 1; acc >= 0 && s < N; s++) {
		if (!ring_step(p, &kv, at->attn.ring))
			return -1;
		ba.attn.step = s;
		no = block_ops(o, &q, 1, &kv, -1, qseg);
		int b = part_emit(p, IR_OP_ATTN_BLOCK, o, no, &ba, &ol, &rp, q);
		IrAttr ma = {.kind = IR_ATTR_ATTN, .attn = {.heads = at->attn.heads}};
		acc = b < 0 ? -1 : part_emit(p, IR_OP_ATTN_MERGE, (int[]){acc, b}, 2, &ma, &ol, &rp, acc);
	}
	return acc;
}

/* attention_bwd's ring on local dy, q (in) with its segment ids qseg and
 * kv: [3, B, Tl, D]. */
static int ring_backward(Part *p, const IrNode *n, const int *in, int qseg, RingKV kv,
                         const PartRule *r, int64_t N)
{
	uint32_t axes = r->at.attn.ring;
	int ol = ring_forward(p, n, in[1], qseg, kv, &r->at, &r->res, N);
	IrNode l1 = like_dim(n, 0, 1), l2 = like_dim(n, 0, 2);
	IrAttr s1 = {.kind = IR_ATTR_SLICE, .slice = {0, 0, 1}};
	IrAttr s2 = {.kind = IR_ATTR_SLICE, .slice = {0, 1, 3}};
	IrAttr ba = r->at;
	ba.attn.step = 0;
	int o[7], no = block_ops(o, in, 2, &kv, ol, qseg);
	int g = ol < 0 ? -1 : part_emit(p, IR_OP_ATTN_BLOCK_BWD, o, no, &ba, n, &r->res, in[1]);
	int dq = g < 0 ? -1 : part_emit(p, IR_OP_SLICE, &g, 1, &s1, &l1, &r->res, g);
	int dkv = dq < 0 ? -1 : part_emit(p, IR_OP_SLICE, &g, 1, &s2, &l2, &r->res, g);
	for (int64_t s = 1; dkv >= 0 && s < N; s++) {
		if (!ring_step(p, &kv, axes) || (dkv = ring_pass(p, dkv, &l2, axes)) < 0)
			return -1;
		ba.attn.step = s;
		no = block_ops(o, in, 2, &kv, ol, qseg);
		g = part_emit(p, IR_OP_ATTN_BLOCK_BWD, o, no, &ba, n, &r->res, in[1]);
		int a = g < 0 ? -1 : part_emit(p, IR_OP_SLICE, &g, 1, &s1, &l1, &r->res, g);
		int b = a < 0 ? -1 : part_emit(p, IR_OP_SLICE, &g, 1, &s2, &l2, &r->res, g);
		dq = b < 0 ? -1 : part_emit(p, IR_OP_ADD, (int[]){dq, a}, 2, NULL, &l1, &r->res, dq);
		dkv = dq < 0 ? -1 : part_emit(p, IR_OP_ADD, (int[]){dkv, b}, 2, NULL, &l2, &r->res, dkv);
	}
	/* the last step's dk, dv belong to the next rank's block */
	if (dkv < 0 || (dkv = ring_pass(p, dkv, &l2, axes)) < 0)
		return -1;
	IrAttr cat = {.kind = IR_ATTR_AXIS, .axis = {0}};
	return part_emit(p, IR_OP_CONCAT, (int[]){dq, dkv}, 2, &cat, n, &r->res, dq);
}

int part_ring(Part *p, const IrNode *n, const int *ops, const PartRule *r)
{
	uint32_t axes = r->at.attn.ring;
	int64_t N = mesh_axes_size(&p->m->mesh, axes);
	int q0 = n->op == IR_OP_ATTENTION ? 0 : 1; /* attention_bwd: dy first */
	int64_t Dl = part_loc_node(p, ops[q0])->shape[2];
	/* balanced: every operand to the balanced chunks, the result back */
	int in[5] = {-1, -1, -1, -1, -1};
	for (int i = 0; i < n->nops && i < 5; i++) {
		in[i] = ops[i];
		if (r->at.attn.balanced &&
		    (in[i] = ring_balance(p, ops[i], p->m->nodes[n->ops[i]], 1, axes, N)) < 0)
			return -1;
	}
	int qseg = n->nops > q0 + 3 ? in[q0 + 3] : -1;
	RingKV kv = {{in[q0 + 1], in[q0 + 2], qseg}, {0}, qseg >= 0 ? 3 : 2};
	for (int j = 0; j < kv.n; j++)
		kv.g[j] = p->m->nodes[n->ops[q0 + 1 + j]];
	if (n->op == IR_OP_ATTENTION) {
		int acc = ring_forward(p, n, in[0], qseg, kv, &r->at, &r->res, N);
		IrAttr sl = {.kind = IR_ATTR_SLICE, .slice = {2, 0, Dl}};
		int y = acc < 0 ? -1 : part_emit(p, IR_OP_SLICE, &acc, 1, &sl, n, &r->res, acc);
		return y < 0 || !r->at.attn.balanced ? y : ring_balance(p, y, n, 1, axes, N);
	}
	int g3 = ring_backward(p, n, in, qseg, kv, r, N);
	return g3 < 0 || !r->at.attn.balanced ? g3 : ring_balance(p, g3, n, 2, axes, N);
}
