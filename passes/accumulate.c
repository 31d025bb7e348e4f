/* accumulate.c - pass "accumulate": a weight gradient summed onto the
 * running sum of the earlier micro-batches' by its own GEMM.
 *
 * With M micro-batches autodiff sums a weight's M gradients with adds:
 * add(add(w_M-1, w_M-2), ...), each w a matmul_wgrad into a fresh f32
 * buffer (a GEMM with beta = 0), each add reading two such buffers and
 * writing a third.  A GEMM can add its product to what C holds (beta = 1),
 * so this pass rewrites
 *
 *     s = add(acc, w)    w = matmul_wgrad(x, dy)
 *
 * (either operand order) into w' = matmul_wgrad_acc(acc, x, dy) at w's
 * place, in place in acc's buffer (OPF_INPLACE: memplan gives it acc's
 * storage), and s's readers read w'.  Per weight and micro-batch that
 * saves the add's kernel (three passes over the gradient's bytes) and the
 * fresh C, and the chain of sums lives in one buffer.  Megatron-LM does
 * the same (gradient_accumulation_fusion: the wgrad GEMM accumulates into
 * main_grad).
 *
 * When it is the same program.  acc's bytes are overwritten at w's place
 * instead of read at s's, so
 *  - acc is read by s alone, and comes before w (after the rewrites
 *    before it: acc may itself be a rewritten sum, whose node is then the
 *    matmul_wgrad_acc that holds it);
 *  - acc has storage of its own: a matmul_wgrad, a matmul_wgrad_acc or an
 *    add (a reshape or a received value may share bytes with another);
 *  - s, w and acc are f32 values of one shape and placement on one stage,
 *    w and acc activations (role act, no link) and w read by s alone; s an
 *    activation or a param's gradient (grad.P: the last sum of a weight
 *    that no collective reduces, on one device, with pp alone or under
 *    ZeRO-1/2).  w' takes s's identity (rb_take: name, role, link), and
 *    memplan puts a chain that ends in grad.P in the GRAD arena from its
 *    first GEMM on (MemPlanBuf.ident: the buffer carries grad.P's name
 *    and role for the runtime and inspect).
 * The sum is the same but for rounding: the interpreter (f64) gives the
 * two forms bit for bit; a BLAS adds C to its K blocks' partial products
 * one at a time, so in f32 the last bits can differ as between any two
 * layouts.
 *
 * It runs after attn_stats, on the program the pipeline pass ordered (node
 * order is each rank's execution order), so nothing moves the nodes after
 * it.
 */
#include "passes/accumulate.h"
#include "passes/rebuild.h"

#include <stdlib.h>

/* Whether node v is an f32 value like s (same shape, placement and stage)
 * that is an activation, or with grad, a param's gradient (grad.P). */
static bool like_sum(const IrModule *m, const IrNode *v, const IrNode *s, bool grad)
{
	bool act = v->role == IR_ROLE_ACT && ir_link(m, v) == IR_LINK_NONE;
	bool g = grad && v->role == IR_ROLE_GRAD && ir_link(m, v) == IR_LINK_GRAD;
	if (v->dtype != IR_F32 || v->rank != s->rank || v->place != s->place || !(act || g) ||
	    v->id == m->loss || ir_stage(m, v) != ir_stage(m, s))
		return false;
	for (int k = 0; k < v->rank; k++)
		if (v->shape[k] != s->shape[k])
			return false;
	return true;
}

/* The matmul_wgrad that s = add(.., ..) sums onto its other operand (*acc),
 * or -1.  rep[v]: the node that holds value v after the rewrites so far. */
static int match(const IrModule *m, const IrNode *s, const int *uses, const int *rep, int *acc)
{
	if (s->op != IR_OP_ADD || s->nops != 2 || s->ops[0] == s->ops[1] || !like_sum(m, s, s, true))
		return -1;
	/* both operands may be gradients: the later one accumulates */
	int first = s->ops[0] > s->ops[1] ? 0 : 1;
	for (int t = 0; t < 2; t++) {
		int w = s->ops[first ^ t], a = s->ops[first ^ t ^ 1];
		const IrNode *wn = m->nodes[w], *an = m->nodes[a];
		if (wn->op != IR_OP_MATMUL_WGRAD || uses[w] != 1 || uses[a] != 1 ||
		    !like_sum(m, wn, s, false) || !like_sum(m, an, s, false) || rep[a] >= w)
			continue;
		IrOp ao = m->nodes[rep[a]]->op;
		if (ao != IR_OP_MATMUL_WGRAD && ao != IR_OP_MATMUL_WGRAD_ACC && ao != IR_OP_ADD)
			continue;
		*acc = a;
		return w;
	}
	return -1;
}

bool pass_accumulate(IrModule *m, Diag *d, const PassOptions *opt)
{
	int nn = m->nnodes;
	int *uses = calloc((size_t)nn + 1, sizeof(int));
	int *rep = malloc(sizeof(int) * ((size_t)nn + 1));
	int *acc = malloc(sizeof(int) * ((size_t)nn + 1)); /* w -> its accumulator, or -1 */
	if (!uses || !rep || !acc) {
		free(uses);
		free(rep);
		free(acc);
		diag_error(d, (SrcLoc){0}, "accumulate: out of memory");
		return false;
	}
	for (int i = 0; i < nn; i++) {
		const IrNode *n = m->nodes[i];
		for (int k = 0; k < n->nops; k++)
			uses[n->ops[k]]++;
		rep[i] = i;
		acc[i] = -1;
	}
	int nfused = 0;
	/* in node order, so an operand's rep[] is final when a sum reads it */
	for (int s = 0; s < nn; s++) {
		int a, w = match(m, m->nodes[s], uses, rep, &a);
		if (w < 0)
			continue;
		acc[w] = a;
		rep[s] = w;
		nfused++;
	}
	bool ok = true;
	if (nfused) {
		Rebuild rb;
		ok = rb_begin(&rb, m, d, "accumulate", (size_t)nn);
		for (int i = 0; ok && i < nn; i++) {
			IrNode *n = m->nodes[i];
			if (rep[i] != i) {
				/* a sum the GEMM made: its readers read that, which
				 * takes its identity (grad.P's name, role, link) */
				IrNode *x = rb.out->nodes[rb.map[rep[i]]];
				rb_take(&rb, x, i);
				int pf = ir_place_from(m, n);
				ir_set_place_from(rb.out, x, pf >= 0 && pf < i ? rb.map[pf] : -1);
				continue;
			}
			if (acc[i] >= 0) {
				int *ops = arena_alloc_raw(m->arena, sizeof(int) * 3);
				if (!ops) {
					diag_error(d, n->loc, "accumulate: out of memory");
					ok = false;
					break;
				}
				/* the node holding acc: adopted already (match: rep[acc]
				 * < i), where a sum it made may come after i */
				ops[0] = rep[acc[i]];
				ops[1] = n->ops[0];
				ops[2] = n->ops[1];
				n->op = IR_OP_MATMUL_WGRAD_ACC;
				n->ops = ops;
				n->nops = 3;
			}
			ok = rb_adopt(&rb, i);
		}
		ok = rb_finish(&rb, ok);
	}
	if (ok && opt && opt->verbose)
		fprintf(stderr, "dtmc: accumulate: %d weight gradient%s summed by %s (beta = 1)\n",
		        nfused, nfused == 1 ? "" : "s", nfused == 1 ? "its GEMM" : "their GEMMs");
	free(uses);
	free(rep);
	free(acc);
	return ok;
}
