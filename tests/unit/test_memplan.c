/* test_memplan.c - the static memory plan (passes/memplan.c).
 *
 * The interval packer: values live at the same time never share bytes,
 * values whose live ranges are disjoint may (and here do) share an offset,
 * offsets are 64-byte aligned and the peak is what the offsets reach.
 * Then the whole pass on models/mlp.dtm and models/gpt.dtm (one rank):
 * arenas by role, in-place updates aliasing their param, the loss live to
 * the end, and no two simultaneously live activations overlapping.  Pass
 * attn_stats on models/gpt.dtm: each attention_bwd takes its forward
 * (attn.lse) where the CPU kernel reads the statistics (head size 16, f32
 * and bf16, with micro-batches each its own), not at head size 8, and the
 * forward's storage holds its B H T log-sum-exps after it. */
#include <stdlib.h>

#include "check.h"
#include "frontend/lower.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "support/philox.h"

static bool overlap(int64_t a, int64_t na, int64_t b, int64_t nb)
{
	return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

static void test_pack_small(void)
{
	/* A [0,2] and B [1,3] overlap in time; C [3,5] starts after A died */
	int from[3] = { 0, 1, 3 }, to[3] = { 2, 3, 5 };
	int64_t bytes[3] = { 100, 100, 100 }, off[3];
	int64_t peak = pass_memplan_pack(3, from, to, bytes, off);
	CHECK_EQ_INT(off[0], 0);
	CHECK_EQ_INT(off[1], 128);
	CHECK_EQ_INT(off[2], 0); /* reuses A's bytes */
	CHECK_EQ_INT(peak, 256);
	/* inclusive ends: a value read by the node that writes C still
	 * overlaps C */
	int f2[2] = { 0, 2 }, t2[2] = { 2, 4 };
	int64_t b2[2] = { 64, 64 }, o2[2];
	CHECK_EQ_INT(pass_memplan_pack(2, f2, t2, b2, o2), 128);
	CHECK(o2[0] != o2[1]);
}

static void test_pack_random(void)
{
	enum { N = 300 };
	int from[N], to[N];
	int64_t bytes[N], off[N], sum = 0;
	for (int i = 0; i < N; i++) {
		from[i] = (int)(philox_rand_u32(3, 1, i) % 200);
		to[i] = from[i] + (int)(philox_rand_u32(3, 2, i) % 40);
		bytes[i] = philox_rand_u32(3, 3, i) % 5000;
		sum += (bytes[i] + 63) / 64 * 64;
	}
	int64_t peak = pass_memplan_pack(N, from, to, bytes, off);
	int bad = 0, misaligned = 0;
	int64_t reach = 0, most_live = 0;
	for (int i = 0; i < N; i++) {
		misaligned += off[i] % 64 != 0;
		if (bytes[i] && off[i] + bytes[i] > reach)
			reach = off[i] + bytes[i];
		for (int j = i + 1; j < N; j++)
			if (from[i] <= to[j] && from[j] <= to[i] &&
			    overlap(off[i], bytes[i], off[j], bytes[j]))
				bad++;
	}
	for (int t = 0; t < 240; t++) {
		int64_t live = 0;
		for (int i = 0; i < N; i++)
			if (from[i] <= t && t <= to[i])
				live += (bytes[i] + 63) / 64 * 64;
		most_live = live > most_live ? live : most_live;
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(misaligned, 0);
	CHECK(peak >= reach && peak - reach < 64);
	CHECK(peak >= most_live); /* no plan beats the live-bytes bound */
	CHECK(peak < sum);        /* reuse happened */
}

static void test_model(const char *path)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	LowerOptions lo = { .mesh = "dp=1" };
	IrModule *m = lower_path(&a, &d, path, &lo);
	CHECK(m != NULL);
	if (!m || !pass_run_until(m, &d, NULL, NULL)) {
		CHECK(0);
		arena_free(&a);
		return;
	}
	FusePlan fp;
	MemPlan mp;
	CHECK(pass_fuse_plan(m, &a, &d, &fp));
	CHECK(pass_memplan(m, &fp, &a, &d, &mp));
	int bad = 0, inplace = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const MemPlanBuf *b = &mp.buf[i];
		if (b->owner < 0) {
			CHECK(fp.internal[i] || fp.folded[i]);
			continue;
		}
		CHECK_EQ_INT(b->offset % MEMPLAN_ALIGN, 0);
		CHECK(b->offset + b->bytes <= mp.arena_bytes[b->arena]);
		if (n->op == IR_OP_PARAM)
			CHECK_EQ_INT(b->arena, MEMPLAN_ARENA_PARAM);
		if (n->role == IR_ROLE_GRAD)
			CHECK_EQ_INT(b->arena, MEMPLAN_ARENA_GRAD);
		if (n->role == IR_ROLE_OPT_STATE && b->owner == i)
			CHECK_EQ_INT(b->arena, MEMPLAN_ARENA_OPT);
		if (ir_op_flags(n->op) & OPF_INPLACE) {
			inplace++;
			CHECK_EQ_INT(b->owner, mp.buf[n->ops[0]].owner);
		}
		if (i == m->loss)
			CHECK_EQ_INT(b->live_to, m->nnodes);
		if (b->owner != i || b->arena != MEMPLAN_ARENA_ACT)
			continue;
		for (int j = i + 1; j < m->nnodes; j++) {
			const MemPlanBuf *c = &mp.buf[j];
			if (c->owner != j || c->arena != MEMPLAN_ARENA_ACT)
				continue;
			if (b->live_from <= c->live_to && c->live_from <= b->live_to &&
			    overlap(b->offset, b->bytes, c->offset, c->bytes))
				bad++;
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK(mp.arena_bytes[MEMPLAN_ARENA_ACT] <= mp.act_unshared);
	fprintf(stderr, "%s: act %lld bytes planned, %lld without reuse; %d in-place updates\n",
	        path, (long long)mp.arena_bytes[MEMPLAN_ARENA_ACT], (long long)mp.act_unshared, inplace);
	arena_free(&a);
}

/* models/gpt.dtm (4 heads of d/4) on one rank: `want` whether pass
 * attn_stats pairs its attentions' backwards with them. */
static void test_attn_stats(const char *d_model, IrDtype precision, int64_t mbs, bool want)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	LowerOptions lo = {.mesh = "dp=1"};
	lo.define_names[lo.ndefines] = "d";
	lo.define_values[lo.ndefines++] = d_model;
	IrModule *m = lower_path(&a, &d, "models/gpt.dtm", &lo);
	CHECK(m != NULL);
	if (!m) {
		arena_free(&a);
		return;
	}
	m->train.precision = precision;
	m->train.microbatches = mbs;
	FusePlan fp;
	MemPlan mp;
	bool ok = pass_run_until(m, &d, NULL, NULL) && pass_fuse_plan(m, &a, &d, &fp) &&
	          pass_memplan(m, &fp, &a, &d, &mp);
	CHECK(ok);
	int bwd = 0, paired = 0;
	for (int i = 0; ok && i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ATTENTION_BWD)
			continue;
		bwd++;
		int yi = ir_attn_bwd_y(n);
		CHECK_EQ_INT(yi >= 0, want);
		if (yi < 0)
			continue;
		paired++;
		const IrNode *y = m->nodes[n->ops[yi]];
		CHECK(y->op == IR_OP_ATTENTION && ir_attr_attn(y)->lse);
		for (int k = 0; k < y->nops; k++)
			CHECK_EQ_INT(n->ops[k + 1], y->ops[k]);
		/* [B, T, D], then B * H * T f32 log-sum-exps */
		int64_t B = y->shape[0], T = y->shape[1], D = y->shape[2];
		int64_t es = precision == IR_BF16 ? 2 : 4;
		CHECK_EQ_INT(y->dtype, precision);
		CHECK_EQ_INT(ir_attn_lse_count(y), B * 4 * T);
		CHECK_EQ_INT(mp.buf[y->id].owner, y->id);
		CHECK_EQ_INT(mp.buf[y->id].bytes, es * B * T * D + 4 * B * 4 * T);
		CHECK(mp.buf[y->id].live_to >= i);
	}
	CHECK_EQ_INT(bwd, 2 * (int)mbs); /* 2 layers */
	CHECK_EQ_INT(paired, want ? bwd : 0);
	arena_free(&a);
}

int main(void)
{
	test_attn_stats("64", IR_F32, 1, true);
	test_attn_stats("64", IR_F32, 2, true);
	test_attn_stats("32", IR_F32, 1, false); /* head size 8 */
	test_attn_stats("64", IR_BF16, 1, true);
	test_pack_small();
	test_pack_random();
	test_model("models/mlp.dtm");
	test_model("models/gpt.dtm");
	return check_report();
}
