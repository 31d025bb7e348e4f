/* fuse.c - pass "fuse": elementwise chains into single loops, transposes
 * into GEMM flags.
 *
 * Consumes the final (single-device) IR and leaves it unchanged; produces a
 * FusePlan (fuse.h), computed once per compile by the pipeline's `fuse`
 * entry and handed to memplan and codegen (passes.h's PassAnalyses).
 * Keeping it beside the module instead of on it keeps compiler-only data
 * off the IR and out of runtime/plan.h; the plan is a pure function of the
 * module, so every reader sees the same one.
 *
 * Grouping: nodes are visited in order; an elementwise node c absorbs an
 * operand o when o is elementwise too, has exactly one use (c), has c's
 * shape (so it is computed at c's index, never recomputed per broadcast
 * element), is in the same phase (forward = up to the loss), and is not a
 * value the runtime reads (loss, gradients, grad_norm).  External inputs
 * of a group may broadcast onto its shape.  Every memory round trip saved
 * is bandwidth saved: the CPU kernels here are memory bound.
 */
#include "passes/fuse.h"

#include <string.h>

bool pass_fuse_op_ok(IrOp op)
{
	switch (op) {
	case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV:
	case IR_OP_NEG: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT:
	case IR_OP_RSQRT: case IR_OP_TANH: case IR_OP_RELU: case IR_OP_GELU:
	case IR_OP_SILU: case IR_OP_SIGMOID: case IR_OP_SCALE: case IR_OP_CAST:
	case IR_OP_DROPOUT:
		return true;
	default:
		return false;
	}
}

bool pass_is_last2_transpose(const IrNode *n)
{
	if (n->op != IR_OP_PERMUTE || n->rank < 2 || ir_attr_perm(n)->n != n->rank)
		return false;
	const int64_t *p = ir_attr_perm(n)->perm;
	for (int i = 0; i < n->rank - 2; i++)
		if (p[i] != i)
			return false;
	return p[n->rank - 2] == n->rank - 1 && p[n->rank - 1] == n->rank - 2;
}

/* X's batch dims, right-aligned to C's: all 1 (broadcast) or all equal. */
static bool batch_ok(const IrNode *x, const IrNode *c)
{
	int nb = c->rank - 2, xb = x->rank - 2;
	bool ones = true, equal = xb <= nb;
	for (int i = 0; i < xb; i++)
		ones &= x->shape[i] == 1;
	for (int i = 0; equal && i < nb; i++) {
		int j = i - (nb - xb);
		int64_t s = j >= 0 ? x->shape[j] : 1;
		equal = s == c->shape[i];
	}
	return ones || equal;
}

bool pass_matmul_is_gemm(const IrModule *m, const IrNode *mm)
{
	if (mm->op != IR_OP_MATMUL || mm->nops != 2 || mm->rank < 2)
		return false;
	const IrNode *a = m->nodes[mm->ops[0]], *b = m->nodes[mm->ops[1]];
	if (a->rank < 2 || b->rank < 2 || a->rank > mm->rank || b->rank > mm->rank)
		return false;
	return batch_ok(a, mm) && batch_ok(b, mm);
}

int pass_fuse_operand(const IrModule *m, const FusePlan *fp, int id, int i, bool *trans)
{
	int o = m->nodes[id]->ops[i];
	*trans = false;
	if (fp && fp->folded[o]) {
		*trans = true;
		return m->nodes[o]->ops[0];
	}
	return o;
}

/* A value the runtime reads after the step must stay in memory. */
static bool must_materialise(const IrModule *m, const IrNode *n)
{
	return n->id == m->loss || n->role != IR_ROLE_ACT || (ir_op_flags(n->op) & OPF_INPLACE) ||
	       ir_link(m, n) == IR_LINK_GRAD_NORM;
}

static bool same_shape(const IrNode *a, const IrNode *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->shape[i] != b->shape[i])
			return false;
	return true;
}

/* Distinct outside operands of the union of two groups (members listed
 * through next[], ending at -1). */
static int count_inputs(const IrModule *m, const int *root, const int *next, int g1, int g2)
{
	int ext[2 * FUSE_MAX_MEMBERS * 2 + 8], n = 0;
	int heads[2] = { g1, g2 };
	for (int h = 0; h < 2; h++) {
		for (int x = heads[h]; x >= 0; x = next[x]) {
			const IrNode *nd = m->nodes[x];
			for (int k = 0; k < nd->nops; k++) {
				int o = nd->ops[k];
				if (root[o] == g1 || root[o] == g2)
					continue;
				bool seen = false;
				for (int j = 0; j < n && !seen; j++)
					seen = ext[j] == o;
				if (!seen && n < (int)(sizeof ext / sizeof ext[0]))
					ext[n++] = o;
			}
		}
	}
	return n;
}

/* What pass_fuse_plan notes per node in its walk over all of them. */
enum {
	K_ELEMWISE = 1 << 0, /* pass_fuse_op_ok */
	K_PERMUTE = 1 << 1,
};

bool pass_fuse_plan(const IrModule *m, Arena *a, Diag *d, FusePlan *fp)
{
	int n = m->nnodes;
	memset(fp, 0, sizeof *fp);
	fp->n = n;
	fp->root = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1));
	fp->internal = arena_alloc(a, sizeof(bool) * (size_t)(n + 1));
	fp->folded = arena_alloc(a, sizeof(bool) * (size_t)(n + 1));
	fp->first = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1));
	int *uses = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
	/* per transpose: 0 unread, 1 read only by GEMMs, 2 read by another op */
	uint8_t *read = arena_alloc(a, sizeof(uint8_t) * (size_t)(n + 1));
	/* per node: K_* */
	uint8_t *kind = arena_alloc_raw(a, sizeof(uint8_t) * (size_t)(n + 1));
	int *next = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1));
	int *size = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1));
	if (!fp->root || !fp->internal || !fp->folded || !fp->first || !uses || !read || !kind ||
	    !next || !size) {
		diag_error(d, (SrcLoc){0}, "out of memory planning fusion");
		return false;
	}
	/* One walk over the nodes counts uses and notes who reads what, so
	 * that grouping and transpose folding below touch only the nodes
	 * they may change (walking the nodes, not in memory order, is the
	 * cost). */
	for (int j = 0; j < n; j++) {
		const IrNode *u = m->nodes[j];
		kind[j] = (pass_fuse_op_ok(u->op) ? K_ELEMWISE : 0) |
		          (u->op == IR_OP_PERMUTE ? K_PERMUTE : 0);
		fp->root[j] = -1;
		fp->first[j] = j;
		/* whether a matmul is a GEMM matters only to transposes it
		 * reads (the rest of read[] is not looked at) */
		bool gemm = false;
		if (u->op == IR_OP_MATMUL)
			for (int k = 0; k < u->nops && !gemm; k++)
				gemm = kind[u->ops[k]] & K_PERMUTE;
		gemm = gemm && pass_matmul_is_gemm(m, u);
		for (int k = 0; k < u->nops; k++) {
			int o = u->ops[k];
			uses[o]++;
			if (!gemm || read[o] == 0)
				read[o] = gemm ? 1 : 2;
		}
	}
	for (int i = 0; i < n; i++) {
		if (!(kind[i] & K_ELEMWISE))
			continue;
		const IrNode *c = m->nodes[i];
		fp->root[i] = i;
		next[i] = -1; /* next[] and size[] are read only for elementwise nodes */
		size[i] = 1;
		bool fwd_c = m->loss < 0 || i <= m->loss;
		for (int k = 0; k < c->nops; k++) {
			int o = c->ops[k];
			bool fwd_o = m->loss < 0 || o <= m->loss;
			if (fp->root[o] != o || uses[o] != 1 || fwd_o != fwd_c)
				continue;
			const IrNode *on = m->nodes[o];
			if (!same_shape(on, c) || must_materialise(m, on))
				continue;
			if (size[i] + size[o] > FUSE_MAX_MEMBERS ||
			    count_inputs(m, fp->root, next, i, o) > FUSE_MAX_INPUTS)
				continue;
			/* splice o's member list in front of c's */
			int last = o;
			for (int x = o; x >= 0; x = next[x]) {
				fp->root[x] = i;
				fp->internal[x] = true;
				last = x;
			}
			next[last] = next[i];
			next[i] = o;
			size[i] += size[o];
		}
	}
	for (int i = 0; i < n; i++)
		if (fp->root[i] >= 0 && fp->first[fp->root[i]] > i)
			fp->first[fp->root[i]] = i;
	/* Transposes read only by GEMMs become trans flags. */
	for (int i = 0; i < n; i++) {
		if (read[i] != 1 || !(kind[i] & K_PERMUTE))
			continue;
		const IrNode *p = m->nodes[i];
		fp->folded[i] = pass_is_last2_transpose(p) && !must_materialise(m, p);
	}
	return true;
}
