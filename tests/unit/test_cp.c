/* test_cp.c - context parallelism (issue 17 point 3): attention with its
 * sequence dim split over a mesh axis `cp`, as passes/partition_rules.c
 * runs it.
 *
 * The model: models/gpt.dtm with a `cp` axis in its mesh (after dp) and the
 * tokens, the targets and the MLP's hidden activation split over (dp, cp)
 * on (batch, sequence), which is how a user asks for context parallelism.
 * Equivalence: cp = 2, dp = 2 x cp = 2 and cp = 2 x tp = 2 (Ulysses, the
 * default where the heads divide), partitioned and run on every rank by
 * the SPMD interpreter, give the single-device interpreter's loss,
 * gathered gradients and updated params over two steps to 1e-9 relative;
 * so does cp = 4 with heads that do not divide it (the sequence gathered).
 * Collectives: Ulysses' all_to_alls per layer, 4 forward (q, k, v to heads,
 * the output back) and 2 backward (dy to heads, the stacked dq, dk, dv
 * back), moving 8 tensors of B T D / (dp cp tp) elements per layer (each
 * rank sends (cp-1)/cp of them), and no all_gather feeding attention.  Memory: each rank's q, k and
 * v at attention are 1/cp of one device's.  Ring (context_parallel ring):
 * cp = 2, cp = 4, dp = 2 x cp = 2, cp = 2 x tp = 2 and cp = 3 give the
 * one-device function, load-balanced for the causal mask, with the sends
 * and elements per layer of the formula in test_ring; so does the ring on
 * llama with a window and document masks (test_ring_segments: the key
 * block's segment ids travel with it).  Ring on a sequence its ranks do
 * not divide (uneven shards: blocks of ceil(T / N) rows, the padding
 * last, keys past T seen by no query): cp = 3 on T = 8, cp = 4 on T = 5
 * (the last rank's block all padding; balanced: the padded sequence's
 * chunks) and T = 10, cp = 3 x tp = 2 on T = 10, the masked llama on
 * cp = 3, T = 10 (balanced) and 13 (not); and without the causal mask
 * (cp = 3 on T = 8, cp = 4 on T = 5), where every query would see the
 * padding.  Refusal: context_parallel ulysses where
 * the heads do not divide cp x tp, a diagnostic at the attention call.
 */
#include "check.h"
#include "testlib_lower.h"
#include "spmd_check.h"
#include "frontend/lower.h"
#include "interp/eval.h"
#include "interp/eval_spmd.h"
#include "ir/ir.h"
#include "passes/passes.h"

#include <stdlib.h>

/* models/gpt.dtm with the cp axis and the sequence split over it. */
static char *gpt_cp(void)
{
	char *s = slurp("models/gpt.dtm");
	CHECK(s != NULL);
	if (!s)
		return NULL;
	s = replace(s, "mesh (pp = 1, dp = 2, tp = 2)", "mesh (pp = 1, dp = 2, cp = 1, tp = 2)");
	s = replace(s, "i32[batch, ctx] @ [dp, _]", "i32[batch, ctx] @ [dp, cp]");
	s = replace(s, "@ [dp, _, tp]", "@ [dp, cp, tp]");
	CHECK(strstr(s, "cp = 1") && strstr(s, "@ [dp, cp, tp]"));
	return s;
}

static const char *const defs4[] = {"vocab", "16", "ctx", "8", "d", "16", "heads", "4",
                                    "layers", "2", "batch", "4", NULL};
static const char *const defs2[] = {"vocab", "16", "ctx", "8", "d", "16", "heads", "2",
                                    "layers", "1", "batch", "4", NULL};

/* Lowered with its own --train (NULL: none), through partition (or, for
 * the reference, optim); NULL when it failed. */
static IrModule *compile(Arena *a, Diag *d, const char *src, const char *mesh,
                         const char *const *defs, const char *train, bool partition)
{
	IrModule *m = test_lower(a, d, src, mesh, defs, train);
	if (!m)
		return NULL;
	if (!pass_run_until(m, d, NULL, partition ? "partition" : "optim"))
		return NULL;
	return m;
}

static int count_op(const IrModule *m, IrOp op)
{
	int c = 0;
	for (int i = 0; i < m->nnodes; i++)
		c += m->nodes[i]->op == op;
	return c;
}

/* The layout runs as one device does; returns the partitioned module (in
 * a, NULL when it failed) for the callers' further checks. */
static IrModule *equivalence_of(Arena *a, const char *label, char *src, const char *mesh,
                                const char *const *defs, const char *train)
{
	CHECK(src != NULL); /* a model that did not read is a failure, not a skip */
	if (!src)
		return NULL;
	Diag d;
	diag_init(&d, stderr);
	IrModule *ref = compile(a, &d, src, "pp=1,dp=1,cp=1,tp=1", defs, NULL, false);
	IrModule *dm = compile(a, &d, src, mesh, defs, train, true);
	free(src);
	CHECK(ref && dm);
	if (!ref || !dm) {
		fprintf(stderr, "%s: pipeline failed\n", label);
		return NULL;
	}
	int bad = spmd_compare(label, ref, dm, 16, &d);
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %d mismatches\n", label, bad);
	}
	if (getenv("DTM_TEST_VERBOSE"))
		fprintf(stderr, "%s: all_to_all %d, all_gather %d, all_reduce %d\n", label,
		        count_op(dm, IR_OP_ALL_TO_ALL), count_op(dm, IR_OP_ALL_GATHER),
		        count_op(dm, IR_OP_ALL_REDUCE));
	return dm;
}

static IrModule *equivalence(Arena *a, const char *label, const char *mesh,
                             const char *const *defs, const char *train)
{
	return equivalence_of(a, label, gpt_cp(), mesh, defs, train);
}

/* No operand of an attention or attention_bwd is an all_gather: the
 * sequence is never gathered whole for it. */
static bool attention_ungathered(const IrModule *m)
{
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_BWD)
			continue;
		for (int k = 0; k < n->nops; k++)
			if (m->nodes[n->ops[k]]->op == IR_OP_ALL_GATHER)
				return false;
	}
	return true;
}

/* Checks that every attention and attention_bwd of m holds `heads` query
 * heads and `kv_heads` kv heads, numbered over head_axes with head_minor's
 * axes last; returns how many there are. */
static int check_attention(const IrModule *m, int64_t heads, int64_t kv_heads,
                           uint32_t head_axes, uint32_t head_minor)
{
	int attn = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_BWD)
			continue;
		attn++;
		const IrAttrAttn *at = ir_attr_attn(n);
		CHECK_EQ_INT(at->heads, heads);
		CHECK_EQ_INT(ir_attn_kv_heads(at), kv_heads);
		CHECK_EQ_INT(at->head_axes, head_axes);
		CHECK_EQ_INT(at->head_minor, head_minor);
	}
	return attn;
}

static void test_ulysses(void)
{
	Arena a;
	arena_init(&a);
	const char *const layouts[][2] = {
	        {"cp=2 ulysses", "pp=1,dp=1,cp=2,tp=1"},
	        {"dp=2 x cp=2 ulysses", "pp=1,dp=2,cp=2,tp=1"},
	        {"cp=2 x tp=2 ulysses", "pp=1,dp=1,cp=2,tp=2"},
	        {"cp=4 ulysses", "pp=1,dp=1,cp=4,tp=1"},
	};
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		IrModule *m = equivalence(&a, layouts[l][0], layouts[l][1], defs4, NULL);
		if (!m)
			continue;
		/* per layer: q, k, v to heads and the output back; dy to heads
		 * and the stacked dq, dk, dv back (q, k, v the forward's) */
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 6 * 2);
		CHECK(attention_ungathered(m));
		/* the bytes: each all_to_all moves its [B, T/cp, D/tp] operand
		 * (the stacked gradients 3 of them): per layer 4 + 1 + 3 such
		 * tensors of B T D / (dp cp tp) elements */
		int64_t moved = 0;
		for (int i = 0; i < m->nnodes; i++)
			if (m->nodes[i]->op == IR_OP_ALL_TO_ALL)
				moved += ir_node_numel(m->nodes[m->nodes[i]->ops[0]]);
		int64_t dpn = strstr(layouts[l][1], "dp=2") ? 2 : 1;
		int64_t ranks = dpn * (strstr(layouts[l][1], "cp=4") ? 4 : 2) *
		                (strstr(layouts[l][1], "tp=2") ? 2 : 1);
		CHECK_EQ_INT(moved, 2 * 8 * (4 * 8 * 16 / ranks));
		/* the local attention: heads / (cp x tp), the whole sequence, and
		 * q, k, v of 1/(cp x tp) of the one-device [B, T, D] each */
		int64_t parts = strstr(layouts[l][1], "cp=4") ? 4 : strstr(layouts[l][1], "tp=2") ? 4 : 2;
		int64_t dp = strstr(layouts[l][1], "dp=2") ? 2 : 1;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op != IR_OP_ATTENTION)
				continue;
			CHECK_EQ_INT(ir_attr_attn(n)->heads, 4 / parts);
			CHECK_EQ_INT(n->shape[1], 8);
			for (int k = 0; k < 3; k++)
				CHECK_EQ_INT(ir_node_numel(m->nodes[n->ops[k]]), 4 * 8 * 16 / (parts * dp));
		}
	}
	/* the setting given: the same program */
	IrModule *m = equivalence(&a, "cp=2 ulysses given", "pp=1,dp=1,cp=2,tp=1", defs4,
	                          "context_parallel=ulysses");
	if (m)
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 12);
	/* heads = 2 over cp = 4: not Ulysses; chosen, the sequence is
	 * gathered (all_gather), still the one-device function */
	m = equivalence(&a, "cp=4, 2 heads, gathered", "pp=1,dp=1,cp=4,tp=1", defs2, NULL);
	if (m) {
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 0);
		CHECK(!attention_ungathered(m));
	}
	arena_free(&a);
}

/* Ulysses with grouped-query k and v whose kv heads do not divide the
 * head split (llama: 4 heads, 2 kv heads, on cp = 2 x tp = 2 and cp = 4):
 * q goes to heads over (tp, cp) by all_to_all, k and v keep tp's head
 * split and gather the sequence over cp (an all_gather each), the local
 * op reading its query heads' kv heads numbered by cp (head_axes); dk and
 * dv, per query head, summed over each group, go back to the sequence
 * split.  The one-device function, with and without the setting given
 * (the choice takes it), and on a sequence cp does not divide (T = 10
 * over cp = 4, where the reshards go through gathers). */
static void test_ulysses_gqa(void)
{
	Arena a;
	arena_init(&a);
	static const char *const defs12[] = {"ctx", "12", "batch", "2", "layers", "2", NULL};
	static const char *const defs10[] = {"ctx", "10", "batch", "2", "layers", "2", NULL};
	const struct {
		const char *label, *mesh, *train;
		const char *const *defs;
		int64_t cp, tp;
	} layouts[] = {
	        {"llama cp=2 x tp=2 ulysses", "pp=1,dp=1,cp=2,tp=2", "context_parallel=ulysses",
	         defs12, 2, 2},
	        {"llama cp=4 ulysses", "pp=1,dp=1,cp=4,tp=1", "context_parallel=ulysses", defs12, 4,
	         1},
	        {"llama cp=2 x tp=2, chosen", "pp=1,dp=1,cp=2,tp=2", NULL, defs12, 2, 2},
	        {"llama dp=2 x cp=4 ulysses, T=10 (uneven)", "pp=1,dp=2,cp=4,tp=1",
	         "context_parallel=ulysses", defs10, 4, 1},
	};
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		IrModule *m = equivalence_of(&a, layouts[l].label, slurp("models/llama.dtm"),
		                             layouts[l].mesh, layouts[l].defs, layouts[l].train);
		if (!m)
			continue;
		int64_t cp = layouts[l].cp, tp = layouts[l].tp, gathers = 0;
		uint32_t cpmask = 1u << 2; /* mesh (pp, dp, cp, tp) */
		/* forward and backward, 2 layers */
		CHECK_EQ_INT(check_attention(m, 4 / (cp * tp), 2 / tp, cpmask, 0), 2 * 2);
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			for (int k = 1; k < 3 && n->op == IR_OP_ATTENTION; k++) { /* k, v */
				const IrNode *x = m->nodes[n->ops[k]];
				if (x->op == IR_OP_SLICE) /* uneven: trimmed after */
					x = m->nodes[x->ops[0]];
				gathers += x->op == IR_OP_ALL_GATHER && ir_attr_coll(x)->axes == cpmask;
			}
		}
		CHECK_EQ_INT(gathers, 2 * 2); /* k and v of each forward attention */
		/* q, y, dy, dqkv; uneven, the sequence padded before and trimmed
		 * after, no all_gather of q or the output */
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 8);
	}
	arena_free(&a);
}

/* Ulysses where tp outnumbers the kv heads (multi-query attention, or
 * LLaMA's 2 kv heads on tp = 4): k and v stay whole over tp (Megatron's
 * rule, head_axes) and gather the sequence over cp; q and the output take
 * the all_to_alls, so the query heads are split over (tp, cp) in that
 * order: the local op numbers them with cp minor (attn.head_minor), which
 * the mesh's order (pp, dp, cp, tp) alone would number the other way
 * round. */
static void test_ulysses_kv_whole(void)
{
	Arena a;
	arena_init(&a);
	static const char *const mqa[] = {"ctx", "12", "batch", "2", "layers", "2",
	                                  "kv_heads", "1", NULL};
	static const char *const tp4[] = {"ctx", "12", "batch", "2", "layers", "2", "heads", "8",
	                                  "d", "64", NULL};
	const struct {
		const char *label, *mesh, *train;
		const char *const *defs;
		int64_t cp, tp, H, G;
	} layouts[] = {
	        {"llama kv_heads=1, cp=2 x tp=2 ulysses", "pp=1,dp=1,cp=2,tp=2",
	         "context_parallel=ulysses", mqa, 2, 2, 4, 1},
	        {"llama kv_heads=1, cp=2 x tp=2, chosen", "pp=1,dp=1,cp=2,tp=2", NULL, mqa, 2, 2, 4,
	         1},
	        {"llama 8 heads, 2 kv heads, cp=2 x tp=4 ulysses", "pp=1,dp=1,cp=2,tp=4",
	         "context_parallel=ulysses", tp4, 2, 4, 8, 2},
	};
	uint32_t cpmask = 1u << 2, tpmask = 1u << 3; /* mesh (pp, dp, cp, tp) */
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		IrModule *m = equivalence_of(&a, layouts[l].label, slurp("models/llama.dtm"),
		                             layouts[l].mesh, layouts[l].defs, layouts[l].train);
		if (!m)
			continue;
		int64_t heads = layouts[l].H / (layouts[l].cp * layouts[l].tp);
		/* forward and backward, 2 layers */
		CHECK_EQ_INT(check_attention(m, heads, layouts[l].G, cpmask | tpmask, cpmask), 2 * 2);
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 8); /* q, y, dy, dq (k, v whole) */
	}
	arena_free(&a);
}

/* Ring attention (context_parallel ring): the one-device function, with
 * per layer 2 (N - 1) sends and recvs forward (a K and a V block each
 * step), and in the backward the forward's ring again plus N - 1 steps
 * of K, V and the stacked dk, dv block [2, B, T/N, D/tp], and one last
 * shift of that home: 5 (N - 1) + 1 sends.  Every send moves a [B, T/N,
 * D/tp] block (dk, dv: two of them).  A causal mask on a sequence 2N
 * divides is load-balanced (attn.balanced): each of q, k, v going in and
 * the output coming out swaps the second half of its block with member
 * N-1-g (send/recv mirror), forward 4 sends of half a block, backward 5
 * (dy, q, k, v in; the stacked dq, dk, dv out, 3 half blocks): per layer
 * 2 (N - 1) + 4 and 5 (N - 1) + 6 sends, 2 + 5.5 blocks more.  cp = 3
 * swaps the middle rank with itself; T = 12 on cp = 4 (T/N odd) is not
 * balanced. */
static void test_ring(void)
{
	Arena a;
	arena_init(&a);
	static const char *const defs12[] = {"vocab", "16", "ctx", "12", "d", "16", "heads", "4",
	                                     "layers", "2", "batch", "4", NULL};
	static const char *const defs5[] = {"vocab", "16", "ctx", "5", "d", "16", "heads", "4",
	                                    "layers", "2", "batch", "4", NULL};
	static const char *const defs10[] = {"vocab", "16", "ctx", "10", "d", "16", "heads", "4",
	                                     "layers", "2", "batch", "4", NULL};
	const struct {
		const char *label, *mesh;
		const char *const *defs;
		int64_t N, dp, tp, T;
		bool balanced, bidirectional; /* causal = false */
	} layouts[] = {
	        {"cp=2 ring", "pp=1,dp=1,cp=2,tp=1", defs4, 2, 1, 1, 8, true, false},
	        {"cp=4 ring", "pp=1,dp=1,cp=4,tp=1", defs4, 4, 1, 1, 8, true, false},
	        {"dp=2 x cp=2 ring", "pp=1,dp=2,cp=2,tp=1", defs4, 2, 2, 1, 8, true, false},
	        {"cp=2 x tp=2 ring", "pp=1,dp=1,cp=2,tp=2", defs4, 2, 1, 2, 8, true, false},
	        {"cp=3 ring, T=12", "pp=1,dp=1,cp=3,tp=1", defs12, 3, 1, 1, 12, true, false},
	        {"cp=4 ring, T=12 (unbalanced)", "pp=1,dp=1,cp=4,tp=1", defs12, 4, 1, 1, 12, false,
	         false},
	        {"cp=3 ring, T=8 (uneven)", "pp=1,dp=1,cp=3,tp=1", defs4, 3, 1, 1, 8, false, false},
	        {"cp=4 ring, T=5 (a block all padding)", "pp=1,dp=1,cp=4,tp=1", defs5, 4, 1, 1, 5,
	         true, false},
	        {"dp=2 x cp=4 ring, T=10 (uneven)", "pp=1,dp=2,cp=4,tp=1", defs10, 4, 2, 1, 10,
	         false, false},
	        {"cp=3 x tp=2 ring, T=10 (uneven)", "pp=1,dp=1,cp=3,tp=2", defs10, 3, 1, 2, 10,
	         true, false},
	        /* not causal: the padded keys are the last, which no real
	         * query's causal mask reaches, but every one sees them here */
	        {"cp=3 ring, T=8 (uneven, not causal)", "pp=1,dp=1,cp=3,tp=1", defs4, 3, 1, 1, 8,
	         false, true},
	        {"cp=4 ring, T=5 (uneven, not causal)", "pp=1,dp=1,cp=4,tp=1", defs5, 4, 1, 1, 5,
	         false, true},
	        {"cp=2 ring, T=8 (not causal)", "pp=1,dp=1,cp=2,tp=1", defs4, 2, 1, 1, 8, false, true},
	};
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		char *src = gpt_cp();
		if (src && layouts[l].bidirectional)
			src = replace(src, "causal = true)", "causal = false)");
		IrModule *m = equivalence_of(&a, layouts[l].label, src, layouts[l].mesh,
		                             layouts[l].defs, "context_parallel=ring");
		if (!m)
			continue;
		int64_t N = layouts[l].N, dp = layouts[l].dp, tp = layouts[l].tp;
		bool bal = layouts[l].balanced;
		/* B T D / (dp N tp), T / N rounded up (uneven: padded blocks) */
		int64_t T = layouts[l].T, layers = 2;
		int64_t blk = (4 / dp) * ((T + N - 1) / N) * (16 / tp);
		int64_t uneven = 0;
		int64_t fwd = 2 * (N - 1) + (bal ? 4 : 0);
		int64_t bwd = 2 * (N - 1) + 3 * (N - 1) + 1 + (bal ? 5 : 0);
		CHECK_EQ_INT(count_op(m, IR_OP_SEND), layers * (fwd + bwd));
		CHECK_EQ_INT(count_op(m, IR_OP_RECV), layers * (fwd + bwd));
		CHECK_EQ_INT(count_op(m, IR_OP_ALL_TO_ALL), 0);
		CHECK(attention_ungathered(m));
		int64_t moved = 0, mirrored = 0, balanced = 0;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op == IR_OP_SEND) {
				const IrAttrColl *c = ir_attr_coll(n);
				bool mirror = c->n > 1 && c->args[1];
				moved += ir_node_numel(m->nodes[n->ops[0]]);
				mirrored += mirror;
				if (mirror)
					CHECK_EQ_INT(c->shift, N - 1);
			}
			if (n->op == IR_OP_ATTN_BLOCK || n->op == IR_OP_ATTN_BLOCK_BWD) {
				balanced += ir_attr_attn(n)->balanced != 0;
				uneven += ir_attr_attn(n)->seq == (T % N ? T : 0);
			}
		}
		/* in half blocks: forward 4 (N - 1) + 4; backward 4 (N - 1) +
		 * 8 (N - 1) + 4, and 4 + 3 more where balanced */
		int64_t halves = 4 * (N - 1) + 12 * (N - 1) + 4 + (bal ? 4 + 7 : 0);
		CHECK_EQ_INT(2 * moved, layers * blk * halves);
		CHECK_EQ_INT(mirrored, bal ? layers * 9 : 0);
		CHECK_EQ_INT(count_op(m, IR_OP_ATTENTION), 0);
		CHECK_EQ_INT(count_op(m, IR_OP_ATTN_BLOCK), layers * 2 * N);
		CHECK_EQ_INT(balanced, bal ? layers * 3 * N : 0);
		CHECK_EQ_INT(uneven, layers * 3 * N); /* attn.seq: T where uneven, else 0 */
		if (getenv("DTM_TEST_VERBOSE"))
			fprintf(stderr, "%s: send %d, elements sent %lld\n", layouts[l].label,
			        count_op(m, IR_OP_SEND), (long long)moved);
	}
	arena_free(&a);
}

/* models/llama.dtm as tests/e2e/mask.sed makes it: attention with a
 * sliding window of 8 and document masks from segment ids `seg`. */
static char *llama_mask(void)
{
	char *s = slurp("models/llama.dtm");
	CHECK(s != NULL);
	if (!s)
		return NULL;
	s = replace(s, "causal = true)", "causal = true, window = 8, segments = seg)");
	s = replace(s, "input targets : i32[batch, ctx] @ [dp, cp]\n",
	            "input targets : i32[batch, ctx] @ [dp, cp]\n"
	            "input seg     : i32[batch, ctx] @ [dp, cp]\n");
	CHECK(strstr(s, "segments = seg)") && strstr(s, "input seg "));
	return s;
}

/* Ring attention with document masks: the key block's segment ids go
 * round the ring with its K and V (an i32 [B, T/N] send more per step:
 * N - 1 forward, 2 (N - 1) backward) and, load-balanced, are swapped into
 * the chunks with the queries' (one mirror send forward, one backward);
 * the one-device function at cp = 2 and 2 x tp = 2 (balanced), cp = 3
 * (T = 12: 2 rows a chunk) and cp = 3 on T = 10 (uneven: blocks of 4, 4
 * and 2 rows and padding, balanced in chunks of 2) and T = 13 (blocks of
 * 5: unbalanced) on the masked llama. */
static void test_ring_segments(void)
{
	Arena a;
	arena_init(&a);
	static const char *const defs[] = {"ctx", "12", "batch", "2", "layers", "1", NULL};
	static const char *const defs10[] = {"ctx", "10", "batch", "2", "layers", "1", NULL};
	static const char *const defs13[] = {"ctx", "13", "batch", "2", "layers", "1", NULL};
	const struct {
		const char *label, *mesh;
		int64_t N;
		const char *const *defs;
		bool balanced;
	} layouts[] = {
	        {"masked llama, cp=2 ring", "pp=1,dp=1,cp=2,tp=1", 2, defs, true},
	        {"masked llama, cp=3 ring", "pp=1,dp=1,cp=3,tp=1", 3, defs, true},
	        {"masked llama, cp=2 x tp=2 ring", "pp=1,dp=1,cp=2,tp=2", 2, defs, true},
	        {"masked llama, cp=3 ring, T=10 (uneven)", "pp=1,dp=1,cp=3,tp=1", 3, defs10, true},
	        {"masked llama, cp=3 ring, T=13 (uneven)", "pp=1,dp=1,cp=3,tp=1", 3, defs13, false},
	};
	for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
		IrModule *m = equivalence_of(&a, layouts[l].label, llama_mask(), layouts[l].mesh,
		                             layouts[l].defs, "context_parallel=ring");
		if (!m)
			continue;
		int64_t N = layouts[l].N, ids = 0, blocks = 0;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			ids += n->op == IR_OP_SEND && n->dtype == IR_I32;
			if (n->op == IR_OP_ATTN_BLOCK || n->op == IR_OP_ATTN_BLOCK_BWD)
				blocks += n->nops == (n->op == IR_OP_ATTN_BLOCK ? 5 : 7);
		}
		CHECK_EQ_INT(ids, 3 * (N - 1) + (layouts[l].balanced ? 2 : 0));
		CHECK_EQ_INT(blocks, 3 * N);
		CHECK(attention_ungathered(m));
	}
	arena_free(&a);
}

/* The diagnostics of `train` on mesh (the run fails). */
static char *refusal(const char *mesh, const char *const *defs, const char *train)
{
	char *src = gpt_cp();
	if (!src)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *sink = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, sink);
	Arena a;
	arena_init(&a);
	IrModule *m = compile(&a, &d, src, mesh, defs, train, true);
	CHECK(m == NULL);
	fclose(sink);
	arena_free(&a);
	free(src);
	return buf;
}

static void test_refusals(void)
{
	char *e = refusal("pp=1,dp=1,cp=4,tp=1", defs2, "context_parallel=ulysses");
	if (e) {
		CHECK(strstr(e, "t.dtm:48:11: error: context_parallel ulysses: attention's 2 heads "
		                "are not divisible by 4 (the 4 ranks of cp, over which its sequence is "
		                "split, times the 1 its heads are split over); use context_parallel "
		                "ring (no head split), or leave context_parallel unset to gather the "
		                "sequence for attention\n") == e);
		if (getenv("DTM_TEST_VERBOSE"))
			fputs(e, stderr);
	}
	free(e);
}

int main(void)
{
	test_ulysses();
	test_ulysses_gqa();
	test_ulysses_kv_whole();
	test_ring();
	test_ring_segments();
	test_refusals();
	return check_report();
}
