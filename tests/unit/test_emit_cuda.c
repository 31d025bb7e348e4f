/* test_emit_cuda.c - the CUDA code generator's host side (codegen/emit_cuda.c).
 *
 * The launch shapes it computes from the shapes alone (threads, block,
 * shared memory of elementwise, row, attention and multi-phase kernels),
 * then whole models: one CUDA kernel per plan kernel, in the C back end's
 * order and with its names, each launch within the limits every GPU
 * since sm_80 has (blocks of 128 or 256, at most 48 KiB of shared memory
 * without the opt-in, at most CG_CUDA_MAX_BLOCKS blocks of a multi-phase
 * kernel), the attention kernels launched as cg_cuda_launch_attention
 * says, and the C tables the training binary embeds.  Whether the source
 * compiles is the NVRTC check's (tests/cuda/nvrtc.sh), whether it computes
 * what the C kernels do the host emulator's (tests/cuda/kcheck.sh). */
#include <stdlib.h>

#include "check.h"
#include "codegen/emit_c.h"
#include "codegen/emit_cuda.h"
#include "codegen/link.h"
#include "frontend/lower.h"
#include "passes/passes.h"

static void test_launch_shapes(void)
{
	CgCudaKernel k = cg_cuda_launch_elementwise(1000);
	CHECK_EQ_INT(k.threads, 1000);
	CHECK_EQ_INT(k.block, 256);
	CHECK_EQ_INT(k.smem_bytes, 0);
	CHECK_EQ_INT(cg_cuda_launch_elementwise(0).threads, 0); /* nothing to launch */

	/* a warp per row below 1024 elements, a block from there */
	CHECK_EQ_INT(cg_cuda_row_tpo(64), 32);
	CHECK_EQ_INT(cg_cuda_row_tpo(1023), 32);
	CHECK_EQ_INT(cg_cuda_row_tpo(1024), 256);
	CHECK_EQ_INT(cg_cuda_row_tpo(50257), 256);
	k = cg_cuda_launch_rows(16384, 768); /* GPT-2's layernorm rows */
	CHECK_EQ_INT(k.threads, 16384 * 32);
	CHECK_EQ_INT(k.block, 256);
	k = cg_cuda_launch_rows(16384, 50257); /* its logits */
	CHECK_EQ_INT(k.threads, 16384LL * 256);

	/* multi-phase kernels loop over their items: at most 1024 blocks */
	k = cg_cuda_launch_phased(5, 256, 0);
	CHECK_EQ_INT(k.threads, 5 * 256);
	k = cg_cuda_launch_phased(100000, 256, 512);
	CHECK_EQ_INT(k.threads, CG_CUDA_MAX_BLOCKS * 256);
	CHECK_EQ_INT(k.smem_bytes, 512);
	CHECK_EQ_INT(cg_cuda_launch_phased(0, 128, 0).threads, 128); /* one block finishes */
}

static void test_attention_shapes(void)
{
	/* threads per row: powers of two dividing the head dim, <= 16 columns
	 * each where the head dim allows */
	CHECK_EQ_INT(cg_cuda_attn_parts(16), 1);
	CHECK_EQ_INT(cg_cuda_attn_parts(32), 2);
	CHECK_EQ_INT(cg_cuda_attn_parts(64), 4);
	CHECK_EQ_INT(cg_cuda_attn_parts(128), 8);
	CHECK_EQ_INT(cg_cuda_attn_parts(96), 8);  /* 12 columns each */
	CHECK_EQ_INT(cg_cuda_attn_parts(20), 2);  /* 10 */
	CHECK_EQ_INT(cg_cuda_attn_parts(100), 4); /* 25: 100 / 8 is not whole */
	CHECK_EQ_INT(cg_cuda_attn_parts(7), 1);
	/* key tiles: the block's rows up to 32, halved until the backward's
	 * shared memory fits in 48 KiB */
	CHECK_EQ_INT(cg_cuda_attn_tile(64), 32);
	CHECK_EQ_INT(cg_cuda_attn_tile(128), 16);
	CHECK_EQ_INT(cg_cuda_attn_tile(16), 32);
	CHECK_EQ_INT(cg_cuda_attn_tile(250), 16);
	for (int hd = 1; hd <= 1024; hd++)
		CHECK((2 * cg_cuda_attn_tile(hd) * hd + 3 * cg_cuda_attn_tile(hd)) * 4 <=
		      CG_CUDA_MAX_SMEM);

	/* GPT-2 small: B 16, T 1024, D 768, 12 heads of 64: 32 queries per
	 * block, 16 x 12 x 32 blocks */
	CgCudaKernel f = cg_cuda_launch_attention(16, 1024, 768, 12, false);
	CHECK_EQ_INT(f.block, 128);
	CHECK_EQ_INT(f.threads, 16LL * 12 * 32 * 128);
	CHECK_EQ_INT(f.smem_bytes, (2 * 32 * 64 + 32) * 4); /* k, v tiles, segment ids */
	/* backward: 3 items per query tile, in at most 1024 looping blocks */
	CgCudaKernel b = cg_cuda_launch_attention(16, 1024, 768, 12, true);
	CHECK_EQ_INT(b.block, 128);
	CHECK_EQ_INT(b.threads, CG_CUDA_MAX_BLOCKS * 128);
	CHECK_EQ_INT(b.smem_bytes, (2 * 32 * 64 + 3 * 32) * 4);
	/* a short sequence: T 20 is one partial tile per head */
	b = cg_cuda_launch_attention(2, 20, 32, 2, true);
	CHECK_EQ_INT(b.threads, 3 * 2 * 2 * 1 * 128);
	f = cg_cuda_launch_attention(2, 20, 32, 2, false);
	CHECK_EQ_INT(f.threads, 2 * 2 * 1 * 128);
	CHECK_EQ_INT(f.smem_bytes, (2 * 32 * 16 + 32) * 4);
}

static bool contains(const char *s, const char *what)
{
	return s && strstr(s, what) != NULL;
}

static void test_model(const char *path, const char *mesh, const char *prec)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	LowerOptions lo = {.mesh = mesh};
	if (prec)
		lo.train[lo.ntrain++] = prec;
	IrModule *m = lower_path(&a, &d, path, &lo);
	CHECK(m != NULL);
	FusePlan fp;
	MemPlan mp;
	if (!m || !pass_run_until(m, &d, NULL, NULL) || !pass_fuse_plan(m, &a, &d, &fp) ||
	    !pass_memplan(m, &fp, &a, &d, &mp)) {
		CHECK(0);
		arena_free(&a);
		return;
	}
	int nk = cg_plan_kernels(m, &fp, &mp, NULL, 0);
	CHECK(nk > 0);
	CgPlanKernel *pk = calloc((size_t)nk, sizeof *pk);
	CgCudaKernel *tab = calloc((size_t)nk, sizeof *tab);
	char *src = NULL;
	size_t len = 0;
	FILE *ms = open_memstream(&src, &len);
	CHECK(pk && tab && ms);
	if (!pk || !tab || !ms)
		goto out;
	CHECK_EQ_INT(cg_plan_kernels(m, &fp, &mp, pk, nk), nk);
	int got = -1;
	CHECK(cg_emit_cuda(ms, m, &fp, &mp, cg_source_dir(), tab, nk, &got, &d));
	fclose(ms);
	ms = NULL;
	CHECK_EQ_INT(got, nk);
	CHECK(!contains(src, "#include")); /* self-contained */
	int bad = 0, defined = 0, rounded = 0;
	for (int k = 0; k < nk; k++) {
		const CgCudaKernel *t = &tab[k];
		const IrNode *n = m->nodes[pk[k].node];
		char want[32], decl[96];
		if (pk[k].nchunks > 1)
			snprintf(want, sizeof want, "k_%d_%d", pk[k].node, pk[k].chunk);
		else
			snprintf(want, sizeof want, "k_%d", pk[k].node);
		/* a kernel is defined under its own name, or launches an
		 * identical one defined earlier (the same text but for names) */
		snprintf(decl, sizeof decl, "__launch_bounds__(%d) %s(DtmCudaArgs a)", t->block,
		         t->name);
		bad += !contains(src, decl);
		if (strcmp(t->name, want) == 0) {
			defined++;
			/* a fused group's 16-bit members are rounded as their
			 * own kernels would store them (not kept in f32) */
			for (int x = 0; pk[k].fused && x < pk[k].node; x++) {
				const IrNode *v = m->nodes[x];
				bool b16 = v->dtype == IR_BF16;
				if (fp.root[x] != pk[k].node || v->op == IR_OP_CAST ||
				    (!b16 && v->dtype != IR_F16))
					continue;
				char r[64];
				snprintf(r, sizeof r, "const float t%d = dtmc_round_%s(", x,
				         b16 ? "bf16" : "f16");
				bad += !contains(src, r);
				rounded++;
			}
		} else
			bad += strncmp(t->name, "k_", 2) != 0 || atoi(t->name + 2) > pk[k].node;
		bad += t->block != 128 && t->block != 256;
		bad += t->threads < 0 || t->smem_bytes < 0 || t->smem_bytes > CG_CUDA_MAX_SMEM;
		/* attention and ring attention's blocks launch alike */
		bool fwd = n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTN_BLOCK;
		if (fwd || n->op == IR_OP_ATTENTION_BWD || n->op == IR_OP_ATTN_BLOCK_BWD) {
			const IrNode *q = m->nodes[n->ops[fwd ? 0 : 1]];
			CgCudaKernel w =
			        cg_cuda_launch_attention(q->shape[0], q->shape[1], q->shape[2],
			                                 ir_attr_attn(n)->heads, !fwd);
			CHECK_EQ_INT(t->threads, w.threads);
			CHECK_EQ_INT(t->block, 128);
			CHECK_EQ_INT(t->smem_bytes, w.smem_bytes);
		}
		if (n->op == IR_OP_LAYERNORM) {
			const IrNode *x = m->nodes[n->ops[0]];
			int64_t D = x->shape[x->rank - 1];
			CHECK_EQ_INT(t->threads,
			             cg_cuda_launch_rows(ir_node_numel(x) / D, D).threads);
		}
		if (n->op == IR_OP_ADAMW_STEP || n->op == IR_OP_SGD_STEP)
			CHECK_EQ_INT(t->threads, ir_node_numel(m->nodes[n->ops[0]]));
		if (pk[k].fused)
			CHECK_EQ_INT(t->threads, ir_node_numel(n));
		if (n->op == IR_OP_GRAD_NORM || n->op == IR_OP_CROSS_ENTROPY)
			bad += t->threads % t->block != 0 ||
			       t->threads / t->block > CG_CUDA_MAX_BLOCKS;
	}
	CHECK_EQ_INT(bad, 0);
	if (prec && strstr(prec, "16"))
		CHECK(rounded > 0); /* the check above ran */
	/* one function per distinct kernel: as many definitions as names used */
	int ndef = 0;
	for (const char *p = src; (p = strstr(p, "__global__")); p++)
		ndef++;
	CHECK_EQ_INT(ndef, defined);

	/* the tables the training binary's C file gets */
	char *c = NULL;
	size_t clen = 0;
	FILE *cs = open_memstream(&c, &clen);
	CHECK(cs && cg_emit_cuda_tables(cs, m, &fp, &mp, cg_source_dir(), &d));
	if (cs)
		fclose(cs);
	CHECK(contains(c, "static const char dtm_cuda_source[] ="));
	CHECK(contains(c, "static const DtmCudaKernel dtm_cuda_kernels[] = {"));
	char first[64];
	snprintf(first, sizeof first, "{ \"%s\", %lld, %d, %d },", tab[0].name,
	         (long long)tab[0].threads, tab[0].block, tab[0].smem_bytes);
	CHECK(contains(c, first));
	free(c);
out:
	if (ms)
		fclose(ms);
	free(src);
	free(pk);
	free(tab);
	arena_free(&a);
}

int main(void)
{
	test_launch_shapes();
	test_attention_shapes();
	test_model("models/mlp.dtm", "dp=1", NULL);
	test_model("models/gpt.dtm", "dp=1", NULL);
	test_model("models/gpt.dtm", "dp=2,tp=2", "precision=bf16");
	test_model("tests/cuda/ops.dtm", "dp=1", "precision=f16");
	test_model("models/llama.dtm", "tp=4", NULL); /* kv heads kept whole over tp */
	test_model("models/llama.dtm", "cp=2", "context_parallel=ring");
	return check_report();
}
