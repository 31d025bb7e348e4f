/* test_cost.c - conformance of the cost model (tools/cost.c) and the hardware
 * profiles (tools/hw.c).
 *
 * Every expected number below is copied from ../shared/REFERENCE.md (or a
 * datasheet cited in tools/hw.c, or worked by hand in the comment above the
 * check), never from the code's own output: a mismatch means one of the two
 * is wrong.
 */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "cost_util.h"
#include "tools/calibrate.h"
#include "tools/cost.h"
#include "tools/hw.h"

#define GBd 1e9
#define REL(x, r) ((double)(x) * (r))

/* ---- Collectives (REFERENCE.md "Collectives") ---- */

static void test_ring_bytes(void)
{
	/* N ranks, D bytes per rank: all_gather (N-1)/N*D, reduce_scatter
	 * (N-1)/N*D, all_reduce 2(N-1)/N*D, all_to_all (N-1)/N*D */
	double D = 1000;
	CHECK_NEAR(cost_ring_bytes(COST_ALL_REDUCE, 4, D), 1500, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_ALL_GATHER, 4, D), 750, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_REDUCE_SCATTER, 4, D), 750, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_ALL_TO_ALL, 4, D), 750, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_BROADCAST, 4, D), 1000, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_SEND, 2, D), 1000, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_RECV, 2, D), 0, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_ALL_REDUCE, 1, D), 0, 1e-9);
	CHECK_NEAR(cost_ring_bytes(COST_ALL_REDUCE, 64, 64), 126, 1e-9);
	/* steps: all_gather N-1, reduce_scatter N-1, all_reduce 2(N-1) */
	CHECK_EQ_INT(cost_ring_steps(COST_ALL_GATHER, 4), 3);
	CHECK_EQ_INT(cost_ring_steps(COST_REDUCE_SCATTER, 4), 3);
	CHECK_EQ_INT(cost_ring_steps(COST_ALL_REDUCE, 4), 6);
	CHECK_EQ_INT(cost_ring_steps(COST_ALL_REDUCE, 1), 0);
	/* nccl-tests bus factors: all_reduce 2(N-1)/N; reduce_scatter,
	 * all_gather, all_to_all (N-1)/N; broadcast 1 */
	CHECK_NEAR(cost_bus_factor(COST_ALL_REDUCE, 4), 1.5, 1e-12);
	CHECK_NEAR(cost_bus_factor(COST_REDUCE_SCATTER, 4), 0.75, 1e-12);
	CHECK_NEAR(cost_bus_factor(COST_ALL_GATHER, 8), 0.875, 1e-12);
	CHECK_NEAR(cost_bus_factor(COST_ALL_TO_ALL, 2), 0.5, 1e-12);
	CHECK_NEAR(cost_bus_factor(COST_BROADCAST, 4), 1, 1e-12);
	/* the worked example, ranks hold [0,1,2,3]+r, N = 4, f32 (16 bytes):
	 * all_reduce sends 2*3/4*16 = 24 bytes per rank; reduce_scatter 12;
	 * the all_gather of the 4-byte results back to 16 bytes 12 */
	CHECK_NEAR(cost_ring_bytes(COST_ALL_REDUCE, 4, 16), 24, 1e-12);
	CHECK_NEAR(cost_ring_bytes(COST_REDUCE_SCATTER, 4, 16), 12, 1e-12);
	CHECK_NEAR(cost_ring_bytes(COST_ALL_GATHER, 4, 4 * 4), 12, 1e-12);
}

static void test_measured_busbw(void)
{
	/* seed 003, p = 4, 100*1024^2 fp32 elements: all_reduce 1.38-1.60 ms
	 * is "366-426 GB/s", reduce_scatter (each rank keeps 100Mi elements,
	 * so its input is 4x that) 2.39-2.61 ms is "450-490 GB/s"; GiB/s */
	double S = 100.0 * 1024 * 1024 * 4, gib = 1073741824.0;
	double hi = cost_bus_bw(COST_ALL_REDUCE, 4, S, 1.38e-3) / gib;
	double lo = cost_bus_bw(COST_ALL_REDUCE, 4, S, 1.60e-3) / gib;
	CHECK_NEAR(hi, 426, REL(426, 0.01));
	CHECK_NEAR(lo, 366, REL(366, 0.01));
	hi = cost_bus_bw(COST_REDUCE_SCATTER, 4, 4 * S, 2.39e-3) / gib;
	lo = cost_bus_bw(COST_REDUCE_SCATTER, 4, 4 * S, 2.61e-3) / gib;
	CHECK_NEAR(hi, 490, REL(490, 0.01));
	CHECK_NEAR(lo, 450, REL(450, 0.01));
}

static void test_alpha_beta(void)
{
	/* alpha = 5 us, beta = 50 GB/s: ring T = 2(p-1)(alpha + n/(p beta)),
	 * tree T = 2 log2(p) (alpha + n/beta); at p = 64 they cross near
	 * n = 2.8 MB, the tree faster below */
	double alpha = 5e-6, beta = 50e9;
	HwLink ib = {.bw = beta, .latency = alpha};
	/* p = 8, n = 8 MB: 14 * (5 us + 1 MB / 50 GB/s) = 14 * 25 us = 350 us */
	CHECK_NEAR(cost_allreduce_ring_time(8, 8e6, alpha, beta), 350e-6, 1e-12);
	CHECK_NEAR(cost_comm_time(COST_ALL_REDUCE, 8, 8e6, ib), 350e-6, 1e-12);
	/* tree, p = 8, n = 8 MB: 6 * (5 us + 160 us) = 990 us */
	CHECK_NEAR(cost_allreduce_tree_time(8, 8e6, alpha, beta), 990e-6, 1e-12);
	double lo = 1e3, hi = 1e9;
	for (int i = 0; i < 200; i++) {
		double mid = sqrt(lo * hi);
		if (cost_allreduce_tree_time(64, mid, alpha, beta) <
		    cost_allreduce_ring_time(64, mid, alpha, beta))
			lo = mid;
		else
			hi = mid;
	}
	CHECK_NEAR(lo / 1e6, 2.8, 0.05);
	CHECK(cost_allreduce_tree_time(64, 1e6, alpha, beta) <
	      cost_allreduce_ring_time(64, 1e6, alpha, beta));
	CHECK(cost_allreduce_tree_time(64, 1e7, alpha, beta) >
	      cost_allreduce_ring_time(64, 1e7, alpha, beta));
	/* all_gather of 64 MB over 8: 7 steps, 7/8 * 64 MB */
	CHECK_NEAR(cost_comm_time(COST_ALL_GATHER, 8, 64e6, ib), 7 * 5e-6 + 56e6 / 50e9, 1e-12);
	CHECK_NEAR(cost_comm_time(COST_ALL_GATHER, 1, 64e6, ib), 0, 0);
	CHECK_NEAR(cost_comm_time(COST_SEND, 2, 50e6, ib), 5e-6 + 1e-3, 1e-12);
}

static void test_link_class(void)
{
	/* Worked layouts: mesh (pp = 2, fsdp = 4, tp = 2), rank = pp*8 +
	 * fsdp*2 + tp; tp groups [0,1]...; fsdp [0,2,4,6],[1,3,5,7],...; pp
	 * [0,8]...  With 8 GPUs per node: tp and fsdp stay inside a node, pp
	 * crosses nodes; with 4 per node fsdp crosses too. */
	int64_t m[3] = {2, 4, 2};
	uint32_t pp = 1u << 0, fsdp = 1u << 1, tp = 1u << 2;
	CHECK_EQ_INT(cost_group_size(3, m, fsdp), 4);
	CHECK_EQ_INT(cost_group_size(3, m, fsdp | tp), 8);
	CHECK_EQ_INT(cost_link_class(3, m, tp, 8), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, fsdp, 8), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, fsdp | tp, 8), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, pp, 8), COST_LINK_INTER);
	CHECK_EQ_INT(cost_link_class(3, m, tp, 4), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, fsdp, 4), COST_LINK_INTER);
	CHECK_EQ_INT(cost_link_class(3, m, tp, 2), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, tp, 1), COST_LINK_INTER);
	CHECK_EQ_INT(cost_link_class(3, m, pp, 16), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(3, m, 0, 1), COST_LINK_NONE);
	/* (a = 2, b = 3) on 4-rank nodes: b groups [0,1,2] [3,4,5]; the
	 * second straddles ranks 3 | 4,5 */
	int64_t m2[2] = {2, 3};
	CHECK_EQ_INT(cost_link_class(2, m2, 1u << 1, 4), COST_LINK_INTER);
	CHECK_EQ_INT(cost_link_class(2, m2, 1u << 1, 3), COST_LINK_INTRA);
	CHECK_EQ_INT(cost_link_class(2, m2, 1u << 1, 6), COST_LINK_INTRA);
	/* an axis of size 1 moves nothing */
	int64_t m3[2] = {1, 8};
	CHECK_EQ_INT(cost_link_class(2, m3, 1u << 0, 8), COST_LINK_NONE);
}

static void test_roofline(void)
{
	/* H100 bf16 989 TFLOP/s, 3.35 TB/s: a 4096^3 GEMM (137.4 GFLOP,
	 * 3 x 32 MiB in bf16) is compute-bound at 137.4e9/989e12 s */
	const HwProfile *h = hw_builtin("h100");
	double f = 2.0 * 4096 * 4096 * 4096, b = 3.0 * 4096 * 4096 * 2;
	CHECK_NEAR(cost_roofline(f, b, hw_peak_flops(h, DTM_BF16), h->mem_bw), f / 989e12, 1e-12);
	/* an elementwise add of 1 GB in and out: 2 GB / 3.35 TB/s */
	CHECK_NEAR(cost_roofline(2.5e8, 2e9, hw_peak_flops(h, DTM_BF16), h->mem_bw), 2e9 / 3.35e12,
	           1e-12);
}

/* ---- Memory per parameter (REFERENCE.md) ---- */

static void test_zero_memory(void)
{
	CostStateBytes mp = COST_MIXED_ADAM;
	CHECK_NEAR(mp.param + mp.grad + mp.master + mp.opt, 16, 0);
	CHECK_NEAR(mp.master + mp.opt, 12, 0); /* K = 12 */
	/* 7.5B params, N = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB */
	double P = 7.5e9;
	CHECK_NEAR(cost_zero_memory(0, P, 64, mp).total / GBd, 120, 0.05);
	CHECK_NEAR(cost_zero_memory(1, P, 64, mp).total / GBd, 31.4, 0.05);
	CHECK_NEAR(cost_zero_memory(2, P, 64, mp).total / GBd, 16.6, 0.05);
	CHECK_NEAR(cost_zero_memory(3, P, 64, mp).total / GBd, 1.9, 0.05);
	/* the table's rows: ZeRO-1 2P + 2P + 12P/N, ZeRO-2 2P + 2P/N + 12P/N */
	CostMemory z1 = cost_zero_memory(1, P, 64, mp);
	CHECK_NEAR(z1.params, 2 * P, 0);
	CHECK_NEAR(z1.grads, 2 * P, 0);
	CHECK_NEAR(z1.master + z1.opt, 12 * P / 64, 1e-3);
	CostMemory z2 = cost_zero_memory(2, P, 64, mp);
	CHECK_NEAR(z2.grads, 2 * P / 64, 1e-3);
	/* 100B, N = 64: DDP 1.6 TB; ZeRO-1 418.75 GB; ZeRO-2 221.9 GB; ZeRO-3 25 GB */
	P = 100e9;
	CHECK_NEAR(cost_zero_memory(0, P, 64, mp).total / GBd, 1600, 1e-9);
	CHECK_NEAR(cost_zero_memory(1, P, 64, mp).total / GBd, 418.75, 1e-9);
	CHECK_NEAR(cost_zero_memory(2, P, 64, mp).total / GBd, 221.9, 0.05);
	CHECK_NEAR(cost_zero_memory(3, P, 64, mp).total / GBd, 25, 1e-9);
	/* 70B, N = 64: 1120 GB naive; ZeRO-1 still holds 4P = 280 GB of
	 * params + grads; ZeRO-3 17.5 GB */
	P = 70e9;
	CHECK_NEAR(cost_zero_memory(0, P, 64, mp).total / GBd, 1120, 1e-9);
	z1 = cost_zero_memory(1, P, 64, mp);
	CHECK_NEAR((z1.params + z1.grads) / GBd, 280, 1e-9);
	CHECK_NEAR(cost_zero_memory(3, P, 64, mp).total / GBd, 17.5, 1e-9);
	/* 7B, bf16 params and grads, Adam m, v in f32, no master:
	 * 14 + 14 + 56 = 84 GB; FSDP on 8: 10.5 GB */
	CostStateBytes nomaster = {.param = 2, .grad = 2, .master = 0, .opt = 8};
	CostMemory d7 = cost_zero_memory(0, 7e9, 8, nomaster);
	CHECK_NEAR(d7.params / GBd, 14, 1e-9);
	CHECK_NEAR(d7.grads / GBd, 14, 1e-9);
	CHECK_NEAR(d7.opt / GBd, 56, 1e-9);
	CHECK_NEAR(d7.total / GBd, 84, 1e-9);
	CHECK_NEAR(cost_zero_memory(3, 7e9, 8, nomaster).total / GBd, 10.5, 1e-9);
}

static void test_zero_comm(void)
{
	/* communication per step: DDP all_reduce(grads) 2(N-1)/N * grad
	 * bytes; ZeRO-1 and ZeRO-2 the same as DDP; ZeRO-3 1.5x DDP, 1x
	 * with reshard_after_forward = False.  bf16 params and grads, P = 1e9 */
	double Pb = 2e9, G = 2e9;
	double ddp = cost_zero_comm_bytes(0, Pb, G, 64, true);
	CHECK_NEAR(ddp, 2.0 * 63 / 64 * G, 1e-3);
	CHECK_NEAR(cost_zero_comm_bytes(1, Pb, G, 64, true), ddp, 1e-3);
	CHECK_NEAR(cost_zero_comm_bytes(2, Pb, G, 64, true), ddp, 1e-3);
	CHECK_NEAR(cost_zero_comm_bytes(3, Pb, G, 64, true), 1.5 * ddp, 1e-3);
	CHECK_NEAR(cost_zero_comm_bytes(3, Pb, G, 64, false), ddp, 1e-3);
	CHECK_NEAR(cost_zero_comm_bytes(3, Pb, G, 1, true), 0, 0);
}

static void test_megatron_distopt(void)
{
	/* bytes/param, non-distributed -> over d ranks: fp16 params+grads
	 * 20 -> 4 + 16/d; bf16 params, fp32 grads 18 -> 6 + 12/d (d = 8:
	 * 7.5); fp32 both 16 -> 8 + 8/d */
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_F16, DTM_F16, 1), 20, 0);
	CostDistOpt o = cost_megatron_distopt(DTM_F16, DTM_F16);
	CHECK_NEAR(o.replicated, 4, 0);
	CHECK_NEAR(o.sharded, 16, 0);
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_F16, DTM_F16, 8), 4 + 16.0 / 8, 1e-12);
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_BF16, DTM_F32, 1), 18, 0);
	o = cost_megatron_distopt(DTM_BF16, DTM_F32);
	CHECK_NEAR(o.replicated, 6, 0);
	CHECK_NEAR(o.sharded, 12, 0);
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_BF16, DTM_F32, 8), 7.5, 1e-12);
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_F32, DTM_F32, 1), 16, 0);
	o = cost_megatron_distopt(DTM_F32, DTM_F32);
	CHECK_NEAR(o.replicated, 8, 0);
	CHECK_NEAR(o.sharded, 8, 0);
	CHECK_NEAR(cost_megatron_bytes_per_param(DTM_F32, DTM_F32, 64), 8 + 8.0 / 64, 1e-12);
}

/* ---- Pipelines ---- */

static void test_pipeline(void)
{
	/* P = 4, M = 8: M+P-1 = 11 forward steps, utilisation 8/11 = 72.7%,
	 * bubble 27.3% */
	CHECK_NEAR(cost_bubble_fraction(4, 8, 1), 3.0 / 11, 1e-12);
	CHECK_NEAR(cost_bubble_fraction(4, 8, 1) * 100, 27.3, 0.05);
	CHECK_NEAR((1 - cost_bubble_fraction(4, 8, 1)) * 100, 72.7, 0.05);
	CHECK_NEAR(cost_pipeline_time(4, 8, 1), 11, 1e-12);
	/* interleaved, L = 2: LM+P-1 = 19 slots of t/2, utilisation 16/19 =
	 * 84.2%, 9.5t vs 11t; hops P*L-1 = 7 instead of P-1 = 3 */
	CHECK_NEAR((1 - cost_bubble_fraction(4, 8, 2)) * 100, 84.2, 0.05);
	CHECK_NEAR(cost_bubble_fraction(4, 8, 2), 3.0 / 19, 1e-12);
	CHECK_NEAR(cost_pipeline_time(4, 8, 2), 9.5, 1e-12);
	CHECK_EQ_INT(cost_pipeline_hops(4, 2), 7);
	CHECK_EQ_INT(cost_pipeline_hops(4, 1), 3);
	/* Megatron: bubble (p-1)/m plain, (p-1)/(v m) interleaved */
	CHECK_NEAR(cost_bubble_ratio(4, 8, 1), 3.0 / 8, 1e-12);
	CHECK_NEAR(cost_bubble_ratio(4, 8, 2), 3.0 / 16, 1e-12);
	CHECK_NEAR(cost_bubble_fraction(1, 8, 1), 0, 0);
}

/* ---- Throughput accounting ---- */

static void test_throughput(void)
{
	/* llm.c GPT-2 124M (124,439,808 params: README's `dtmc check` of
	 * GPT-2 small; 12 layers, 768 channels, T = 1024) on 8 A100 at
	 * ~1.75M tok/s is ~56% MFU against 312 TFLOP/s dense bf16 */
	const HwProfile *a100 = hw_builtin("a100");
	CHECK(a100 != NULL);
	if (!a100)
		return;
	double fpt = cost_flops_per_token(124439808, 12, 768, 1024);
	CHECK_NEAR(fpt, 6.0 * 124439808 + 6.0 * 12 * 768 * 1024, 0);
	double mfu = cost_mfu(fpt, 1.75e6, 8, hw_peak_flops(a100, DTM_BF16));
	CHECK_NEAR(mfu, 0.56, 0.01);
	/* training FLOPs ~ 6 N D: no attention term */
	CHECK_NEAR(cost_flops_per_token(1e9, 0, 0, 0), 6e9, 0);
	/* b >= bytes_per_param * F / (6 BW): 2 bytes, 989 TFLOP/s, 50 GB/s ->
	 * 6,593 tokens */
	CHECK_NEAR(cost_ddp_hide_tokens(2, 989e12, 50e9), 2 * 989e12 / (6 * 50e9), 1e-6);
	/* datasheet figures the profiles must carry: H100 SXM bf16 989
	 * TFLOP/s and 3.35 TB/s; H200 the same compute at 4.8 TB/s, 141 GB;
	 * A100 312 TFLOP/s, NVLink 600 GB/s (300 per direction); B200 2.25
	 * PFLOP/s, 8 TB/s, NVLink 1.8 TB/s; InfiniBand 400 Gb/s = 50 GB/s */
	const HwProfile *h100 = hw_builtin("h100"), *h200 = hw_builtin("h200"),
	                *b200 = hw_builtin("b200"), *cpu = hw_builtin("cpu");
	CHECK(h100 && h200 && b200 && cpu);
	if (!h100 || !h200 || !b200 || !cpu)
		return;
	CHECK_NEAR(hw_peak_flops(h100, DTM_BF16), 989e12, 0);
	CHECK_NEAR(h100->mem_bw, 3.35e12, 1);
	CHECK_NEAR(2 * h100->intra.bw, 900e9, 1);
	CHECK_NEAR(h100->inter.bw, 400e9 / 8, 1);
	CHECK_NEAR(hw_peak_flops(h200, DTM_BF16), hw_peak_flops(h100, DTM_BF16), 0);
	CHECK_NEAR(h200->mem_bw, 4.8e12, 1);
	CHECK_NEAR(h200->mem_bytes, 141e9, 1);
	CHECK_NEAR(hw_peak_flops(a100, DTM_BF16), 312e12, 0);
	/* the A100's links at NCCL's measured all_reduce figures (tools/hw.c):
	 * 200 GB/s on NVLink 3 (line rate 300), 24 GB/s per HDR NIC */
	CHECK_NEAR(a100->intra.bw, 200e9, 1);
	CHECK_NEAR(a100->inter.bw, 24e9, 1);
	CHECK_NEAR(a100->gemm_eff, 267.9 / 312, 1e-3);
	CHECK_NEAR(hw_peak_flops(b200, DTM_BF16), 2.25e15, 1);
	CHECK_NEAR(b200->mem_bw, 8e12, 1);
	CHECK_NEAR(2 * b200->intra.bw, 1.8e12, 1);
	CHECK_EQ_INT(h100->devices_per_node, 8);
	CHECK_NEAR(hw_peak_flops(h100, DTM_I32), hw_peak_flops(h100, DTM_F32), 0);
	CHECK_EQ_INT(hw_builtin_count(), 5);
	CHECK(hw_builtin("tpu") == NULL);
	CHECK(hw_builtin(NULL) == NULL);
	for (int i = 0; i < hw_builtin_count(); i++) {
		const HwProfile *h = hw_builtin_at(i);
		CHECK(h->peak_flops[DTM_F32] > 0 && h->mem_bw > 0 && h->mem_bytes > 0);
		CHECK(h->intra.bw > h->inter.bw && h->devices_per_node >= 1);
		CHECK(h->intra.a2a_bw > h->inter.a2a_bw && h->inter.a2a_bw > 0);
	}
	/* all_to_all on GPUs: NVLink 4 at ~370 GB/s effective
	 * (nccl-tests#212), one NDR NIC at 48-49 GB/s (nccl-tests#267); both
	 * below the ring's line rates */
	CHECK_NEAR(h100->intra.a2a_bw, 370e9, 1);
	CHECK_NEAR(h100->inter.a2a_bw, 48e9, 1);
	for (int i = 0; i < hw_builtin_count(); i++) {
		const HwProfile *h = hw_builtin_at(i);
		if (strcmp(h->name, "cpu") != 0)
			CHECK(h->intra.a2a_bw < h->intra.bw && h->inter.a2a_bw < h->inter.bw);
	}
}

/* ---- the override file ---- */

static void test_hw_file(void)
{
	HwProfile h = *hw_builtin("cpu");
	const char *good = "# an H100 cluster on 200 Gb/s InfiniBand\n"
	                   "base = h100\n"
	                   "inter_bw = 25 GB/s\r\n"
	                   "inter_latency = 8 us\n"
	                   "\n"
	                   "  mem_size = 80 GiB\n"
	                   "peak_bf16 = 1.5e15\n"
	                   "peak_f16=1.2 PFLOP/s\n"
	                   "intra_bw = 400G   # per direction\n"
	                   "gpus_per_node = 4   # a small node\n"
	                   "intra_latency = 0.5 ms\n"
	                   "inter_a2a_bw = 20 GB/s\n"
	                   "intra_a2a_bw = 0.3 TB/s\n"
	                   "name = my-h100";
	CHECK_EQ_INT(hw_parse_overrides(&h, good, strlen(good), "good.hw", stderr), 0);
	CHECK_EQ_STR(h.name, "my-h100");
	CHECK_NEAR(h.inter.bw, 25e9, 0);
	CHECK_NEAR(h.inter.latency, 8e-6, 1e-18);
	CHECK_NEAR(h.mem_bytes, 80.0 * 1024 * 1024 * 1024, 0);
	CHECK_NEAR(h.peak_flops[DTM_BF16], 1.5e15, 0);
	CHECK_NEAR(h.peak_flops[DTM_F16], 1.2e15, 1);
	CHECK_NEAR(h.intra.bw, 400e9, 0);
	CHECK_NEAR(h.intra.latency, 0.5e-3, 1e-18);
	CHECK_NEAR(h.inter.a2a_bw, 20e9, 0);
	CHECK_NEAR(h.intra.a2a_bw, 300e9, 1);
	CHECK_EQ_INT(h.devices_per_node, 4);
	CHECK_NEAR(h.mem_bw, 3.35e12, 1); /* from the base */
	CHECK_NEAR(h.peak_flops[DTM_F32], 67e12, 1);

	/* errors: file:line:col, every one reported, the profile untouched */
	const char *bad = "mem_bw = 3 TX/s\n"
	                  "bogus = 1\n"
	                  "peak_f32 =\n"
	                  "base = a100\n"
	                  "gpus_per_node = 2.5\n"
	                  "intra_bw = -4\n"
	                  " no equals here\n"
	                  "intra_latency = 0\n"
	                  "= 5\n"
	                  "mem_size = 1e999\n"
	                  "name = a b\n";
	FILE *f;
	char *out;
	size_t len;
	capture_start(&f, &out, &len);
	HwProfile before = h;
	int nerr = hw_parse_overrides(&h, bad, strlen(bad), "x.hw", f);
	fclose(f);
	CHECK_EQ_INT(nerr, 10);
	CHECK(memcmp(&before, &h, sizeof h) == 0);
	CHECK_EQ_STR(
	        out,
	        "x.hw:1:12: error: unknown unit 'TX/s' (bytes/s, e.g. 3.35 TB/s or 900 GB/s)\n"
	        "x.hw:2:1: error: unknown key 'bogus' (keys: base, name, source, peak_f32, "
	        "peak_bf16, peak_f16, mem_bw, mem_size, intra_bw, intra_latency, intra_a2a_bw, "
	        "inter_bw, inter_latency, inter_a2a_bw, gpus_per_node, gemm_eff, mem_eff, "
	        "link_eff, kernel_overhead, step_overhead, coll_overhead, coll_byte_time, "
	        "comm_blocking, feed_rate, feed_x_rate, cores, gemm, stream_bw, attn_rate, "
	        "attn_bwd_rate, "
	        "kernel_time, kernel_factor, kernel_factor_bf16, coll)\n"
	        "x.hw:3:11: error: missing value for 'peak_f32'\n"
	        "x.hw:4:1: error: 'base' must come before any other key\n"
	        "x.hw:5:17: error: bad value '2.5' (a whole number from 1 to 1048576, e.g. 8)\n"
	        "x.hw:6:12: error: bad value '-4' (bytes/s, e.g. 3.35 TB/s or 900 GB/s)\n"
	        "x.hw:7:5: error: expected '=' after 'no'\n"
	        "x.hw:9:1: error: expected 'key = value', got '= 5'\n"
	        "x.hw:10:12: error: value '1e999' is out of range (finite, > 0)\n"
	        "x.hw:11:8: error: bad name 'a b' (letters, digits, '_', '-', '.'; at most 31 "
	        "characters)\n");
	free(out);

	/* an unknown base, bytes that are not text, a missing file */
	const char bin[] = "base = tpu\nmem_bw = 1\x00\xff GB/s\n";
	capture_start(&f, &out, &len);
	nerr = hw_parse_overrides(&h, bin, sizeof bin - 1, "y.hw", f);
	fclose(f);
	CHECK_EQ_INT(nerr, 2);
	CHECK_EQ_STR(out,
	             "y.hw:1:8: error: unknown base profile 'tpu' (h100, h200, a100, b200, "
	             "cpu)\n"
	             "y.hw:2:11: error: unknown unit '\\x00\\xff GB/s' (bytes/s, e.g. 3.35 TB/s "
	             "or 900 GB/s)\n");
	free(out);
	capture_start(&f, &out, &len);
	CHECK_EQ_INT(hw_load_overrides(&h, "/nonexistent/dtm.hw", f), 1);
	fclose(f);
	CHECK_EQ_STR(out, "/nonexistent/dtm.hw: error: cannot open the hardware file\n");
	free(out);

	/* hw_print reads back to the same profile */
	for (int i = 0; i < hw_builtin_count(); i++) {
		const HwProfile *b = hw_builtin_at(i);
		capture_start(&f, &out, &len);
		hw_print(f, b);
		fclose(f);
		HwProfile r;
		memset(&r, 0, sizeof r);
		CHECK_EQ_INT(hw_parse_overrides(&r, out, len, "print.hw", stderr), 0);
		CHECK_EQ_STR(r.name, b->name);
		CHECK(memcmp(r.peak_flops, b->peak_flops, sizeof r.peak_flops) == 0);
		CHECK(r.mem_bw == b->mem_bw && r.mem_bytes == b->mem_bytes);
		CHECK(r.intra.bw == b->intra.bw && r.intra.latency == b->intra.latency);
		CHECK(r.inter.bw == b->inter.bw && r.inter.latency == b->inter.latency);
		CHECK(r.intra.a2a_bw == b->intra.a2a_bw && r.inter.a2a_bw == b->inter.a2a_bw);
		CHECK_EQ_INT(r.devices_per_node, b->devices_per_node);
		free(out);
	}
}

/* The calibrated tables: parsed, looked up, printed back, and used by the
 * step's cost (threads per rank, oversubscription, curves). */
static void test_hw_calibrated(void)
{
	const char *text = "base = cpu\nname = here\nsource = calibrated on box 2026-12-02\n"
	                   "cores = 2\nstep_overhead = 100 us\n"
	                   "gemm 1 64 64 64 = 20 GFLOP/s\ngemm 1 1024 1024 1024 = 80 GFLOP/s\n"
	                   "gemm 2 1024 1024 1024 = 150 GFLOP/s\n"
	                   "stream_bw 1 = 10 GB/s\nstream_bw 2 1000 = 4 GB/s\n"
	                   "stream_bw 2 1000000 = 16 GB/s\n"
	                   "attn_rate 1 = 15 GFLOP/s\nattn_bwd_rate 1 = 5 GFLOP/s\n"
	                   "kernel_time 1 = 2 us\nkernel_time 2 = 5 us\n"
	                   "coll all_reduce 2 = 20 us, 4 GB/s\ncoll all_reduce 4 = 40 us, 2 GB/s\n"
	                   "coll send 2 = 5 us, 8 GB/s\n"
	                   "gemm_bf16 1 64 64 64 = 60 GFLOP/s\nattn_bf16_rate 2 = 30 GFLOP/s\n";
	HwProfile h = *hw_builtin("h100");
	CHECK_EQ_INT(hw_parse_overrides(&h, text, strlen(text), "cal.hw", stderr), 0);
	CHECK_EQ_STR(h.name, "here");
	CHECK_EQ_STR(h.source, "calibrated on box 2026-12-02");
	CHECK_EQ_INT(h.cores, 2);
	CHECK_EQ_INT(h.ngemm, 4);
	CHECK_EQ_INT(h.ncoll, 3);
	/* exact at a point; between points, between their rates */
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F32, 64, 64, 64, 1, 1), 20e9, 1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F32, 1024, 1024, 1024, 1, 2), 150e9, 1e-3);
	double mid = hw_gemm_rate(&h, DTM_F32, 256, 256, 256, 1, 1);
	CHECK(mid > 20e9 && mid < 80e9);
	/* bf16 GEMMs at the bf16 points (any thread count's nearest), f32
	 * ones never; bf16 attention at its own rate, backward too when its
	 * backward was not measured */
	CHECK(hw_has_bf16_gemm(&h));
	CHECK_NEAR(hw_gemm_rate(&h, DTM_BF16, 64, 64, 64, 1, 1), 60e9, 1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_BF16, 1024, 1024, 1024, 1, 2), 60e9, 1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F16, 64, 64, 64, 1, 1), 20e9, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 2, false, DTM_BF16), 30e9, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 2, true, DTM_BF16), 30e9, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 1, true, DTM_F16), 5e9, 1e-3);
	/* thread counts not measured take the nearest */
	/* a kernel's bandwidth by its size: log-log between points, clamped */
	CHECK_NEAR(hw_stream_bw(&h, 8, 1e6), 16e9, 1e-3);
	CHECK_NEAR(hw_stream_bw(&h, 2, 1000), 4e9, 1e-3);
	CHECK_NEAR(hw_stream_bw(&h, 2, sqrt(1e9)), 8e9, 1e-2);
	CHECK_NEAR(hw_stream_bw(&h, 2, 10), 4e9, 1e-3);
	CHECK_NEAR(hw_stream_bw(&h, 2, 1e9), 16e9, 1e-3);
	CHECK_NEAR(hw_stream_bw(&h, 1, 5), 10e9, 1e-3);
	CHECK_NEAR(hw_kernel_overhead(&h, 1), 2e-6, 1e-18);
	CHECK_NEAR(hw_attn_rate(&h, 2, false, DTM_F32), 15e9, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 2, true, DTM_F32), 5e9, 1e-3);
	CHECK(hw_coll(&h, COST_ALL_REDUCE, 3)->n == 4); /* ties: the larger */
	CHECK(hw_coll(&h, COST_ALL_GATHER, 2) == NULL);
	/* printed, it reads back to the same tables */
	HwProfile r;
	reprint(&h, &r);
	CHECK_EQ_STR(r.source, h.source);
	CHECK(r.ngemm == h.ngemm && memcmp(r.gemm, h.gemm, sizeof h.gemm) == 0);
	CHECK(r.ncoll == h.ncoll && memcmp(r.coll, h.coll, sizeof h.coll) == 0);
	CHECK(r.nstream == h.nstream && memcmp(r.stream, h.stream, sizeof h.stream) == 0);
	CHECK(memcmp(r.attn_bwd_rate, h.attn_bwd_rate, sizeof h.attn_bwd_rate) == 0);
	CHECK(memcmp(r.attn_bf16_rate, h.attn_bf16_rate, sizeof h.attn_bf16_rate) == 0);
	CHECK(memcmp(r.kernel_t, h.kernel_t, sizeof h.kernel_t) == 0);
	CHECK(r.cores == 2 && r.step_s == h.step_s);
	/* errors in table lines */
	const char *bad = "gemm 1 64 64 = 1 GFLOP/s\ngemm 0 1 1 1 = 1\ncoll foo 2 = 1 us, 1 GB/s\n"
	                  "coll all_reduce 1 = 1 us, 1 GB/s\ncoll send 2 = 1 us\n"
	                  "stream_bw 17 = 1 GB/s\ngemm_eff = 1.5\ngemm_bf16 1 8 = 1 GFLOP/s\n";
	char *out = parse_errors(&r, bad, 8);
	CHECK(strstr(out, "bad.hw:1:6: error: wrong arguments for 'gemm'") != NULL);
	CHECK(strstr(out, "bad.hw:2:6: error: bad thread count '0'") != NULL);
	CHECK(strstr(out, "bad.hw:3:6: error: unknown collective 'foo'") != NULL);
	CHECK(strstr(out, "bad.hw:4:17: error: bad group size '1'") != NULL);
	CHECK(strstr(out, "bad.hw:5:15: error: expected 'LATENCY, BYTES/s'") != NULL);
	CHECK(strstr(out, "bad.hw:6:11: error: bad thread count '17'") != NULL);
	CHECK(strstr(out, "bad.hw:7:12: error: value '1.5' is out of range") != NULL);
	CHECK(strstr(out, "bad.hw:8:") != NULL &&
	      strstr(out, "note: the form is 'gemm_bf16 THREADS M N K = FLOP/s'") != NULL);
	free(out);
	/* the step: one 64^3 GEMM on one rank (2 threads: the 1024 point of
	 * 2 threads is the only one), then a 1 MB all_reduce over 2 ranks */
	static DtmBuffer cb[3];
	static DtmAction ga[1];
	static DtmStage gs[1];
	DtmPlan p;
	one_gemm_plan(&p, cb, ga, gs, 64, 1 << 14, DTM_F32);
	CostReport rep;
	CHECK_EQ_INT(cost_plan_step(&p, &h, 1, &rep), 0);
	double fl = 2.0 * 64 * 64 * 64;
	CHECK_NEAR(rep.step_s, 5e-6 + fl / 150e9 + 100e-6, 1e-15);
	cost_report_free(&rep);
	/* 4 ranks on 2 cores: one thread each, twice oversubscribed */
	p.mesh_sizes[0] = 4;
	CHECK_EQ_INT(cost_plan_step(&p, &h, 1, &rep), 0);
	CHECK_NEAR(rep.step_s, 2 * (2e-6 + fl / hw_gemm_rate(&h, DTM_F32, 64, 64, 64, 1, 1)) + 100e-6,
	           1e-15);
	CHECK_NEAR(rep.oversub, 2, 0);
	cost_report_free(&rep);
	/* ... but on pp=2 x dp=2 with every layer on stage 1, stage 0's ranks
	 * idle (a bubble of 0.5) and leave their cores to stage 1's: no
	 * stretch (it was 2x), in the step and in the simulated timeline */
	static const DtmStage idle0[] = {{.nactions = 0, .actions = NULL},
	                                 {.nactions = 1, .actions = ga}};
	static const char *ppdp[] = {"pp", "dp"};
	DtmPlan pp = p;
	pp.mesh_naxes = 2;
	pp.mesh_names[0] = ppdp[0];
	pp.mesh_names[1] = ppdp[1];
	pp.mesh_sizes[0] = 2;
	pp.mesh_sizes[1] = 2;
	pp.pp_axis = 0;
	pp.nstages = 2;
	pp.stages = idle0;
	double tg1 = 2e-6 + fl / hw_gemm_rate(&h, DTM_F32, 64, 64, 64, 1, 1);
	CHECK_EQ_INT(cost_plan_step(&pp, &h, 1, &rep), 0);
	CHECK_NEAR(rep.bubble, 0.5, 1e-12);
	CHECK_NEAR(rep.oversub, 1, 0);
	CHECK_NEAR(rep.step_s, tg1 + 100e-6, 1e-15);
	cost_report_free(&rep);
	double mk = 0;
	CHECK_EQ_INT(cost_simulate(&pp, &h, 4, NULL, &mk), 0);
	CHECK_NEAR(mk, tg1, 1e-15);
	/* the regression feed: every rank makes its batch at once, on one
	 * thread: 2 ranks on 2 cores at the calibrated rate, 4 at half */
	static DtmBuffer fbuf[2] = {
	        {.dtype = DTM_F32, .rank = 2, .shape = {8, 16}, .global_shape = {8, 16}},
	        {.dtype = DTM_F32, .rank = 2, .shape = {8, 4}, .global_shape = {8, 4}}};
	static const DtmStage nothing[] = {{.nactions = 0, .actions = NULL}};
	DtmPlan fp = {.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	              .mesh_sizes = {2}, .nbuffers = 2, .buffers = fbuf, .ninputs = 2,
	              .inputs = {0, 1}, .nstages = 1, .stages = nothing,
	              .train = {.microbatches = 1, .precision = DTM_F32}};
	h.feed_rate = 1e9;
	h.feed_x_rate = 1e8;
	double feed = cost_feed_seconds(&fp, &h);
	CHECK(feed > 0);
	CHECK_EQ_INT(cost_plan_step(&fp, &h, 1, &rep), 0);
	CHECK_NEAR(rep.step_s, 100e-6 + feed, 1e-15);
	cost_report_free(&rep);
	fp.mesh_sizes[0] = 4;
	CHECK_EQ_INT(cost_plan_step(&fp, &h, 1, &rep), 0);
	CHECK_NEAR(rep.step_s, 100e-6 + 2 * feed, 1e-15);
	cost_report_free(&rep);
	h.feed_rate = h.feed_x_rate = 0;
	DtmAction ar = {.kind = DTM_ACT_COLL, .coll = DTM_COLL_ALL_REDUCE, .axes = 1, .nargs = 1,
	                .args = {0}, .bytes = 1000000, .stream = 1};
	p.mesh_sizes[0] = 2;
	CHECK_NEAR(cost_action_seconds(&p, &h, 2, &ar, NULL), 20e-6 + 1e6 / 4e9, 1e-15);
	/* a bf16 payload of the same bytes: the CPU backends reduce it in
	 * f32, at the (f32) curve's rate per element, twice the elements;
	 * its bytes sent stay the payload's */
	double sent = 0;
	cb[0].dtype = DTM_BF16;
	CHECK_NEAR(cost_action_seconds(&p, &h, 2, &ar, &sent), 20e-6 + 2e6 / 4e9, 1e-15);
	CHECK_NEAR(sent, 1e6, 1e-6);
	cb[0].dtype = DTM_F32;
	/* a 2-rank group measured alone, here beside another (4 ranks on 2
	 * cores): twice as long */
	static const char *two[] = {"dp", "tp"};
	p.mesh_naxes = 2;
	p.mesh_names[0] = two[0];
	p.mesh_names[1] = two[1];
	p.mesh_sizes[0] = 2;
	p.mesh_sizes[1] = 2;
	ar.axes = 1;
	CHECK_NEAR(cost_action_seconds(&p, &h, 4, &ar, NULL), 2 * (20e-6 + 1e6 / 4e9), 1e-15);
	/* comm_blocking: a stream-1 all_reduce, then a GEMM of other buffers:
	 * side by side at 0, one after the other at 1, a quarter of the
	 * all_reduce in the way at 0.25; the in-run overheads add to it */
	static const DtmAction pair[] = {{.kind = DTM_ACT_COLL, .coll = DTM_COLL_ALL_REDUCE,
	                                 .axes = 1, .nargs = 1, .args = {0}, .bytes = 1000000,
	                                 .stream = 1},
	                                {.kind = DTM_ACT_GEMM, .nargs = 3, .args = {1, 2, 2},
	                                 .m = 64, .n = 64, .k = 64}};
	static const DtmStage ts[] = {{.nactions = 2, .actions = pair}};
	DtmPlan q = {.version = DTM_PLAN_VERSION, .mesh_naxes = 1, .mesh_names = {"dp"},
	             .mesh_sizes = {2}, .nbuffers = 3, .buffers = cb, .nstages = 1, .stages = ts,
	             .train = {.microbatches = 1, .precision = DTM_F32}};
	double tcomm = 20e-6 + 1e6 / 4e9, tg = 2e-6 + fl / hw_gemm_rate(&h, DTM_F32, 64, 64, 64, 1, 1);
	for (int b = 0; b <= 4; b++) {
		h.comm_blocking = b / 4.0;
		CHECK_EQ_INT(cost_plan_step(&q, &h, 1, &rep), 0);
		double want = b == 0 ? (tcomm > tg ? tcomm : tg)
		                     : (b / 4.0 * tcomm + tg > tcomm ? b / 4.0 * tcomm + tg : tcomm);
		CHECK_NEAR(rep.step_s, want + 100e-6, 1e-15);
		cost_report_free(&rep);
	}
	h.comm_blocking = 0;
	h.coll_s = 1e-3;
	h.coll_byte_s = 1e-9;
	CHECK_NEAR(cost_action_seconds(&q, &h, 2, &ar, NULL), 1e-3 + 1e-3 + tcomm, 1e-15);
}

/* Mutated inputs never crash (ASan/UBSan runs this in `make test`), and a
 * failed parse leaves the profile as it was. */
static void test_hw_fuzz(void)
{
	const char *seed = "base = h100\ninter_bw = 25 GB/s\nmem_size = 80 GiB # c\n"
	                   "gpus_per_node = 4\nintra_latency = 2 us\nname = x\npeak_f32 = 1e12\n"
	                   "gemm 1 64 64 64 = 2 GFLOP/s\ncoll all_reduce 2 = 1 us, 1 GB/s\n"
	                   "stream_bw 2 4096 = 3 GB/s\nattn_rate 1 = 1e9\nsource = x y\n";
	size_t sl = strlen(seed);
	char buf[512];
	uint64_t r = 0x9e3779b97f4a7c15ull;
	int ok = 0;
	for (int it = 0; it < 20000; it++) {
		memcpy(buf, seed, sl);
		size_t n = sl;
		int muts = 1 + (int)(r % 8);
		for (int k = 0; k < muts; k++) {
			r ^= r << 13, r ^= r >> 7, r ^= r << 17;
			size_t at = (size_t)(r >> 20) % (n + 1);
			unsigned char c = (unsigned char)(r >> 8);
			static const char special[] = "=#\n \t.eE+-0123456789GiBs/u\0\xff";
			if (r & 1)
				c = (unsigned char)special[(r >> 40) % (sizeof special - 1)];
			switch ((r >> 4) % 4) {
			case 0:
				if (at < n)
					buf[at] = (char)c;
				break;
			case 1:
				if (n < sizeof buf) {
					memmove(buf + at + 1, buf + at, n - at);
					buf[at] = (char)c;
					n++;
				}
				break;
			case 2:
				if (at < n) {
					memmove(buf + at, buf + at + 1, n - at - 1);
					n--;
				}
				break;
			default:
				n = at;
				break;
			}
		}
		HwProfile h = *hw_builtin("b200"), keep = h;
		FILE *sink = (it % 16 == 0) ? fopen("/dev/null", "w") : NULL;
		int e = hw_parse_overrides(&h, buf, n, "fuzz.hw", sink);
		if (sink)
			fclose(sink);
		CHECK(e >= 0);
		if (e)
			CHECK(memcmp(&h, &keep, sizeof h) == 0);
		else
			ok++;
	}
	CHECK(ok > 0);
}

/* ---- a Plan's step ---- */

/* A hand-made profile with round numbers: 1 TFLOP/s, 100 GB/s memory,
 * intra 10 GB/s + 1 us, inter 1 GB/s + 10 us, 2 ranks per node. */
static const HwProfile test_hw = {
        .name = "test",
        .peak_flops = {1e12, 1e12, 1e12, 1e12},
        .mem_bw = 1e11,
        .mem_bytes = 1e10,
        .intra = {.bw = 1e10, .latency = 1e-6},
        .inter = {.bw = 1e9, .latency = 1e-5},
        .devices_per_node = 2,
};

static const DtmBuffer bufs[] = {
        {.name = "x", .bytes = 1000000},     /* 0 */
        {.name = "w", .bytes = 1000000},     /* 1 */
        {.name = "y", .bytes = 2000000},     /* 2 */
        {.name = "z", .bytes = 2000000},     /* 3 */
        {.name = "grad", .bytes = 4000000},  /* 4 */
        {.name = "wfull", .bytes = 2000000}, /* 5 */
};

/* mesh (dp = 2, tp = 2): tp groups [0,1] [2,3] inside 2-rank nodes, dp
 * groups [0,2] [1,3] across them.  The timeline, by hand (ms):
 *   0 gemm x,w->y     2e9 FLOP: 2 ms (bytes 4e6 / 1e11 = 0.04 ms)  [0, 2]
 *   1 all_reduce y tp, stream 1: 2 steps x 1 us + 2e6 B / 10 GB/s
 *                     = 0.202 ms                                  [2, 2.202]
 *   2 gemm x,w->grad  1e9 FLOP: 1 ms, needs nothing from 1        [2, 3]
 *   3 all_reduce grad dp, stream 1: inter, 2 x 10 us + 4e6 B / 1 GB/s
 *                     = 4.02 ms, after gemm 2                     [3, 7.02]
 *   4 kernel y->z     4e6 B / 100 GB/s = 0.04 ms, waits for 1     [3, 3.04]
 *   5 all_gather x->wfull tp, stream 0 (blocking): 1 step + 1e6 B
 *     (half of the 2e6 gathered) / 10 GB/s = 0.101 ms, after 3    [7.02, 7.121]
 *   6 wait
 * compute 3.04 ms, comm 4.323 ms, step 7.121 ms, exposed 4.081 ms;
 * send-side bytes 2e6 + 4e6 + 1e6 = 7e6. */
static const DtmAction acts[] = {
        {.kind = DTM_ACT_GEMM,
         .label = "gemm y",
         .nargs = 3,
         .args = {0, 1, 2},
         .m = 1000,
         .n = 1000,
         .k = 1000,
         .batch = 1,
         .flops = 2000000000},
        {.kind = DTM_ACT_COLL,
         .label = "all_reduce y",
         .nargs = 1,
         .args = {2},
         .coll = DTM_COLL_ALL_REDUCE,
         .axes = 2,
         .bytes = 2000000,
         .stream = 1},
        {.kind = DTM_ACT_GEMM,
         .label = "gemm grad",
         .phase = DTM_PHASE_BACKWARD,
         .nargs = 3,
         .args = {0, 1, 4},
         .m = 500,
         .n = 1000,
         .k = 1000,
         .batch = 1},
        {.kind = DTM_ACT_COLL,
         .label = "all_reduce grad",
         .phase = DTM_PHASE_BACKWARD,
         .nargs = 1,
         .args = {4},
         .coll = DTM_COLL_ALL_REDUCE,
         .axes = 1,
         .bytes = 4000000,
         .stream = 1},
        {.kind = DTM_ACT_KERNEL, .label = "gelu z", .nargs = 2, .args = {2, 3}},
        {.kind = DTM_ACT_COLL,
         .label = "all_gather w",
         .nargs = 2,
         .args = {0, 5},
         .coll = DTM_COLL_ALL_GATHER,
         .axes = 2,
         .bytes = 1000000,
         .stream = 0},
        {.kind = DTM_ACT_WAIT, .label = "wait"},
};

static const DtmStage stages1[] = {{.nactions = 7, .actions = acts}};

/* The regression feed (runtime/feed.c): the target input's local rows
 * each cost one din x dout product; each sample a rank holds a row of
 * (of x or y) costs one x of din normals, made once for both. */
static void test_feed_seconds(void)
{
	DtmBuffer fb[2] = {
		{.name = "x", .dtype = DTM_F32, .rank = 2, .shape = {32, 256}, .global_shape = {64, 256}},
		{.name = "y", .dtype = DTM_F32, .rank = 2, .shape = {32, 128}, .global_shape = {64, 128}},
	};
	DtmPlan p = {.nbuffers = 2, .buffers = fb, .ninputs = 2, .inputs = {0, 1}};
	HwProfile hw = {.feed_rate = 1e9};
	CHECK_NEAR(cost_feed_seconds(&p, &hw), 32.0 * 256 * 128 / 1e9, 1e-12);
	hw.feed_x_rate = 1e8;
	CHECK_NEAR(cost_feed_seconds(&p, &hw), 32.0 * 256 * 128 / 1e9 + 32.0 * 256 / 1e8, 1e-12);
	/* x's columns split (x [32, 128] of [64, 256]): still 32 samples' x */
	fb[0].shape[1] = 128;
	CHECK_NEAR(cost_feed_seconds(&p, &hw), 32.0 * 256 * 128 / 1e9 + 32.0 * 256 / 1e8, 1e-12);
	/* y replicated, x split by rows: 64 samples, 64 targets */
	fb[0].shape[1] = 256;
	fb[1].shape[0] = 64;
	CHECK_NEAR(cost_feed_seconds(&p, &hw), 64.0 * 256 * 128 / 1e9 + 64.0 * 256 / 1e8, 1e-12);
	hw.feed_rate = hw.feed_x_rate = 0; /* not calibrated: not priced */
	CHECK_NEAR(cost_feed_seconds(&p, &hw), 0.0, 0.0);
}

static void test_plan_step(void)
{
	DtmPlan p = {
	        .version = DTM_PLAN_VERSION,
	        .model = "hand",
	        .mesh_naxes = 2,
	        .mesh_names = {"dp", "tp"},
	        .mesh_sizes = {2, 2},
	        .nbuffers = 6,
	        .buffers = bufs,
	        .arena_bytes = {100, 200, 300, 400, 0},
	        .nstages = 1,
	        .stages = stages1,
	        .train = {.microbatches = 1, .tokens_per_step = 7121, .precision = DTM_F32},
	};
	CostReport r;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), 0);
	CHECK_EQ_INT(r.world, 4);
	CHECK_EQ_INT(r.node_size, 2);
	CHECK_EQ_INT(r.nstages, 1);
	const CostStage *s = &r.stages[0];
	CHECK_NEAR(s->compute_s, 3.04e-3, 1e-12);
	CHECK_NEAR(s->comm_s, 4.323e-3, 1e-12);
	CHECK_NEAR(s->time_s, 7.121e-3, 1e-12);
	CHECK_NEAR(s->exposed_comm_s, 4.081e-3, 1e-12);
	CHECK_NEAR(s->send_bytes, 7e6, 1e-6);
	CHECK_NEAR(s->flops, 3e9, 0);
	CHECK_NEAR(s->mem_bytes, 4e6 + 6e6 + 4e6, 0);
	CHECK_EQ_INT(s->by_kind[COST_ALL_REDUCE].count, 2);
	CHECK_NEAR(s->by_kind[COST_ALL_REDUCE].bytes, 6e6, 1e-6);
	CHECK_NEAR(s->by_kind[COST_ALL_REDUCE].seconds, 4.222e-3, 1e-12);
	CHECK_EQ_INT(s->by_kind[COST_ALL_GATHER].count, 1);
	CHECK_NEAR(s->by_kind[COST_ALL_GATHER].bytes, 1e6, 1e-6);
	CHECK_NEAR(s->by_kind[COST_ALL_GATHER].seconds, 0.101e-3, 1e-12);
	CHECK_EQ_INT(s->by_axes[2].count, 2); /* tp */
	CHECK_NEAR(s->by_axes[2].bytes, 3e6, 1e-6);
	CHECK_NEAR(s->by_axes[2].seconds, 0.303e-3, 1e-12);
	CHECK_EQ_INT(s->by_axes[1].count, 1); /* dp */
	CHECK_NEAR(s->by_axes[1].bytes, 4e6, 1e-6);
	CHECK_NEAR(s->by_axes[1].seconds, 4.02e-3, 1e-12);
	CHECK_NEAR(r.bubble, 0, 0);
	CHECK_NEAR(r.step_s, 7.121e-3, 1e-12);
	CHECK_NEAR(r.tokens_per_s, 1e6, 1e-3);
	CHECK_NEAR(r.mem_bytes, 1000, 0);
	/* every rank runs 3e9 FLOP in 7.121 ms of 1 TFLOP/s */
	CHECK_NEAR(r.hfu, 3e9 / (7.121e-3 * 1e12), 1e-12);
	cost_report_free(&r);

	/* one node of 4: dp stays intra, 2 x 1 us + 4e6 / 10 GB/s = 0.402 ms,
	 * ending at 3.402; the all_gather then runs 3.402 .. 3.503 */
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 1, &r), 0);
	CHECK_EQ_INT(r.node_size, 4);
	CHECK_NEAR(r.stages[0].by_axes[1].seconds, 0.402e-3, 1e-12);
	CHECK_NEAR(r.stages[0].time_s, 3.503e-3, 1e-12);
	cost_report_free(&r);

	/* a bad buffer id is an error, not a crash */
	DtmAction badacts[1] = {{.kind = DTM_ACT_KERNEL, .nargs = 2, .args = {0, 9}}};
	DtmStage badst = {.nactions = 1, .actions = badacts};
	p.stages = &badst;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), -1);
	CHECK_EQ_STR(r.err, "stage 0 action 0: buffer id out of range");
	cost_report_free(&r);
	p.nstages = 0;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), -1);
	cost_report_free(&r);
}

/* mesh (pp = 2, tp = 2), two stages, 4 micro-batches; pp groups [0,2]
 * [1,3] cross the 2-rank nodes.
 *   stage 0: gemm 4e9 FLOP 4 ms [0, 4]; send y over pp, stream 1:
 *            10 us + 2e6 B / 1 GB/s = 2.01 ms [4, 6.01]
 *   stage 1: recv y 2.01 ms [0, 2.01]; gemm 1e9 FLOP after it [2.01, 3.01]
 * The slowest stage runs throughout and the fill and drain add a slot (a
 * micro-batch's share) of the other: step 6.01 + 3.01 / 4 = 6.7625 ms;
 * bubble 1 - mean / step = 1 - 4.51 / 6.7625 = 0.3331 (the stages are
 * unbalanced: more than 1F1B's (2-1)/(4+2-1) = 0.2, which assumed both
 * take 6.01 ms, and then charged 6.01 / 0.8 = 7.5125 ms); 1000 tokens per
 * step. */
static const DtmAction s0acts[] = {
        {.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2}, .flops = 4000000000},
        {.kind = DTM_ACT_SEND,
         .nargs = 1,
         .args = {2},
         .axes = 1,
         .peer_offset = 1,
         .bytes = 2000000,
         .stream = 1},
};
static const DtmAction s1acts[] = {
        {.kind = DTM_ACT_RECV,
         .nargs = 1,
         .args = {2},
         .axes = 1,
         .peer_offset = -1,
         .bytes = 2000000,
         .stream = 1},
        {.kind = DTM_ACT_GEMM, .nargs = 3, .args = {2, 1, 3}, .flops = 1000000000},
};
static const DtmStage stages2[] = {{.nactions = 2, .actions = s0acts},
                                   {.nactions = 2, .actions = s1acts}};

/* all_to_all (expert parallelism's dispatch and combine) at the link's
 * a2a bandwidth, intra- or inter-node by the group, and every other
 * collective still at the ring bandwidth.  mesh (dp = 2, ep = 2) on
 * 2-rank nodes: ep groups [0,1] [2,3] inside a node, dp groups [0,2]
 * [1,3] across.  The a2a figures differ from the ring ones so that a
 * wrong pick shows. */
static void test_a2a_link(void)
{
	HwProfile hw = test_hw;
	hw.intra.a2a_bw = 4e9;
	hw.inter.a2a_bw = 0.25e9;
	static const DtmBuffer b[] = {{.name = "tokens", .bytes = 3000000}};
	DtmAction a2a_ep = {.kind = DTM_ACT_COLL,
	                    .nargs = 1,
	                    .args = {0},
	                    .coll = DTM_COLL_ALL_TO_ALL,
	                    .axes = 2,
	                    .bytes = 3000000};
	DtmAction a2a_dp = a2a_ep, ar_ep = a2a_ep, ar_dp = a2a_ep;
	a2a_dp.axes = 1;
	ar_ep.coll = ar_dp.coll = DTM_COLL_ALL_REDUCE;
	ar_dp.axes = 1;
	DtmPlan p = {
	        .version = DTM_PLAN_VERSION,
	        .mesh_naxes = 2,
	        .mesh_names = {"dp", "ep"},
	        .mesh_sizes = {2, 2},
	        .nbuffers = 1,
	        .buffers = b,
	};
	/* n = 2, S = 3 MB: one step of the link's latency, then (n-1)/n S
	 * sent at the a2a bandwidth */
	double n = 2, S = 3e6, send = (n - 1) / n * S, bytes;
	double intra = hw.intra.latency * (n - 1) + send / hw.intra.a2a_bw;
	double inter = hw.inter.latency * (n - 1) + send / hw.inter.a2a_bw;
	CHECK_NEAR(cost_action_seconds(&p, &hw, 2, &a2a_ep, &bytes), intra, 1e-15);
	CHECK_NEAR(bytes, send, 0);
	CHECK_NEAR(cost_action_seconds(&p, &hw, 2, &a2a_dp, &bytes), inter, 1e-15);
	CHECK_NEAR(bytes, send, 0);
	/* the ring collectives keep bw: 2 steps, 2 (n-1)/n S */
	CHECK_NEAR(cost_action_seconds(&p, &hw, 2, &ar_ep, NULL),
	           2 * hw.intra.latency + 2 * send / hw.intra.bw, 1e-15);
	CHECK_NEAR(cost_action_seconds(&p, &hw, 2, &ar_dp, NULL),
	           2 * hw.inter.latency + 2 * send / hw.inter.bw, 1e-15);
	/* one node of 4 ranks: both groups intra-node */
	CHECK_NEAR(cost_action_seconds(&p, &hw, 4, &a2a_dp, NULL), intra, 1e-15);
	/* a link without an a2a figure falls back to bw */
	HwLink bare = {.bw = hw.intra.bw, .latency = hw.intra.latency};
	CHECK_NEAR(cost_comm_time(COST_ALL_TO_ALL, 2, S, bare),
	           hw.intra.latency + send / hw.intra.bw, 1e-15);
	/* the built-in h100: ep = 16 spans two 8-GPU nodes, ep = 8 fits one */
	const HwProfile *h100 = hw_builtin("h100");
	DtmPlan p16 = p;
	p16.mesh_naxes = 1;
	p16.mesh_sizes[0] = 16;
	DtmAction a16 = a2a_ep;
	a16.axes = 1;
	double n16 = 16;
	CHECK_NEAR(cost_action_seconds(&p16, h100, 8, &a16, NULL),
	           h100->inter.latency * (n16 - 1) + (n16 - 1) / n16 * S / h100->inter.a2a_bw,
	           1e-15);
	p16.mesh_sizes[0] = 8;
	CHECK_NEAR(cost_action_seconds(&p16, h100, 8, &a16, NULL),
	           h100->intra.latency * 7 + 7.0 / 8 * S / h100->intra.a2a_bw, 1e-15);
}

static void test_plan_pipeline(void)
{
	DtmPlan p = {
	        .version = DTM_PLAN_VERSION,
	        .mesh_naxes = 2,
	        .mesh_names = {"pp", "tp"},
	        .mesh_sizes = {2, 2},
	        .nbuffers = 6,
	        .buffers = bufs,
	        .nstages = 2,
	        .stages = stages2,
	        .train = {.microbatches = 4, .tokens_per_step = 1000, .precision = DTM_F32},
	};
	CostReport r;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), 0);
	CHECK_NEAR(r.stages[0].time_s, 6.01e-3, 1e-12);
	CHECK_NEAR(r.stages[0].send_bytes, 2e6, 1e-6);
	CHECK_EQ_INT(r.stages[0].by_kind[COST_SEND].count, 1);
	CHECK_NEAR(r.stages[1].time_s, 3.01e-3, 1e-12);
	CHECK_NEAR(r.stages[1].send_bytes, 0, 0);
	CHECK_EQ_INT(r.stages[1].by_kind[COST_RECV].count, 1);
	CHECK_NEAR(r.stages[1].by_kind[COST_RECV].seconds, 2.01e-3, 1e-12);
	CHECK_NEAR(r.stages[1].exposed_comm_s, 2.01e-3, 1e-12);
	/* the stages together (cost_simulate): stage 1's recv ends 2.01 ms
	 * after stage 0's send starts (at 4 ms), then its 1 ms kernel */
	CHECK_NEAR(r.step_s, 7.01e-3, 1e-12);
	CHECK_NEAR(r.bubble, 1 - 4.51 / 7.01, 1e-12);
	CHECK_NEAR(r.tokens_per_s, 1000 / 7.01e-3, 1e-6);
	/* 2 ranks per stage: (4e9 + 1e9) * 2 / (7.01 ms * 4 * 1 TFLOP/s) */
	CHECK_NEAR(r.hfu, 1e10 / (7.01e-3 * 4e12), 1e-12);
	cost_report_free(&r);
	/* the plan's order is the schedule: the schedule field changes nothing */
	static const DtmPipeSchedule sc[] = {DTM_PIPE_INTERLEAVED, DTM_PIPE_ZB, DTM_PIPE_GPIPE};
	for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) {
		p.train.schedule = sc[i];
		p.train.virtual_stages = sc[i] == DTM_PIPE_INTERLEAVED ? 2 : 1;
		CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), 0);
		CHECK_NEAR(r.step_s, 7.01e-3, 1e-12);
		cost_report_free(&r);
	}
	/* stages with nothing between them run side by side: no bubble */
	static const DtmStage even[] = {{.nactions = 1, .actions = s0acts},
	                                {.nactions = 1, .actions = s0acts}};
	p.stages = even;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), 0);
	CHECK_NEAR(r.bubble, 0, 1e-12);
	CHECK_NEAR(r.step_s, 4e-3, 1e-12);
	cost_report_free(&r);
	/* an empty stage (every layer on the other one) idles throughout:
	 * half the ranks, a bubble of 0.5, never 1F1B's balanced 0.2 */
	static const DtmStage lopsided[] = {{.nactions = 0, .actions = NULL},
	                                    {.nactions = 1, .actions = s0acts}};
	p.stages = lopsided;
	p.train.schedule = DTM_PIPE_1F1B;
	p.train.virtual_stages = 1;
	CHECK_EQ_INT(cost_plan_step(&p, &test_hw, 0, &r), 0);
	CHECK_NEAR(r.step_s, 4e-3, 1e-12);
	CHECK_NEAR(r.bubble, 0.5, 1e-12);
	cost_report_free(&r);
	double w[3] = {1, 2, 3}, b;
	CHECK_NEAR(cost_pipeline_step(w, 3, 2, &b), 3 + 3.0 / 2, 1e-12);
	CHECK_NEAR(b, 1 - 2 / 4.5, 1e-12);
	CHECK_NEAR(cost_pipeline_step(w, 1, 4, &b), 1, 0);
	CHECK_NEAR(b, 0, 0);
	CHECK_NEAR(cost_schedule_bubble(DTM_PIPE_INTERLEAVED, 4, 8, 2), 3.0 / 19, 1e-12);
	CHECK_NEAR(cost_schedule_bubble(DTM_PIPE_ZB, 4, 8, 1), 3.0 / 27, 1e-12);
	CHECK_NEAR(cost_schedule_bubble(DTM_PIPE_1F1B, 4, 8, 2), 3.0 / 11, 1e-12);
	CHECK_NEAR(cost_schedule_bubble(DTM_PIPE_ZB, 1, 8, 1), 0, 0);
}

/* A GPU's calibrated profile (`dtmc calibrate --device cuda`): curves
 * without `cores`.  Kernels are priced by the curves (no roofline, no
 * fixed launch time on top: the measured times include it), 16-bit
 * GEMMs at the bf16 points with no widening pass (cuBLAS takes them as
 * they are; f16 too, on the same tensor cores), and collectives are
 * never stretched by ranks beyond what was measured: each rank has a
 * device of its own. */
static void test_hw_device_calibrated(void)
{
	const char *text = "base = h200\nname = calibrated\nkernel_overhead = 0\n"
	                   "step_overhead = 0\n"
	                   "gemm 1 1024 1024 1024 = 40 TFLOP/s\n"
	                   "gemm_bf16 1 1024 1024 1024 = 600 TFLOP/s\n"
	                   "stream_bw 1 1000000 = 0.2 TB/s\n"
	                   "attn_bf16_rate 1 = 300 TFLOP/s\n"
	                   "coll all_reduce 8 = 10 us, 200 GB/s\n";
	HwProfile h = *hw_builtin("h100");
	CHECK_EQ_INT(hw_parse_overrides(&h, text, strlen(text), "gpu.hw", stderr), 0);
	CHECK_EQ_INT(h.cores, 0);
	CHECK(hw_calibrated(&h));
	CHECK(!hw_calibrated(hw_builtin("h200")));
	CHECK_NEAR(hw_gemm_rate(&h, DTM_BF16, 1024, 1024, 1024, 1, 1), 600e12, 1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F16, 1024, 1024, 1024, 1, 1), 600e12, 1e-3);
	CHECK_NEAR(hw_gemm_rate(&h, DTM_F32, 1024, 1024, 1024, 1, 1), 40e12, 1e-3);
	CHECK_NEAR(hw_attn_rate(&h, 1, false, DTM_F16), 300e12, 1e-3);
	static DtmBuffer gb[3];
	static DtmAction ga[1];
	static DtmStage gs[1];
	DtmPlan p;
	one_gemm_plan(&p, gb, ga, gs, 1024, 2 << 20, DTM_BF16);
	double fl = 2.0 * 1024 * 1024 * 1024;
	for (int dt = 0; dt < 2; dt++) {
		for (int i = 0; i < 3; i++)
			gb[i].dtype = dt ? DTM_F16 : DTM_BF16;
		CostReport rep;
		CHECK_EQ_INT(cost_plan_step(&p, &h, 8, &rep), 0);
		CHECK_NEAR(rep.step_s, fl / 600e12, 1e-15);
		cost_report_free(&rep);
	}
	/* 16 ranks of a node of 16 in one all_reduce, measured over 8: the
	 * 8-GPU curve as it is */
	DtmAction ar = {.kind = DTM_ACT_COLL, .coll = DTM_COLL_ALL_REDUCE, .axes = 1, .nargs = 1,
	                .args = {0}, .bytes = 1000000, .stream = 1};
	gb[0].dtype = DTM_F32;
	p.mesh_sizes[0] = 16;
	h.devices_per_node = 16;
	CHECK_NEAR(cost_action_seconds(&p, &h, 16, &ar, NULL), 10e-6 + 1e6 / 200e9, 1e-15);
}

int main(void)
{
	test_ring_bytes();
	test_measured_busbw();
	test_alpha_beta();
	test_link_class();
	test_roofline();
	test_zero_memory();
	test_zero_comm();
	test_megatron_distopt();
	test_pipeline();
	test_throughput();
	test_hw_file();
	test_hw_fuzz();
	test_hw_calibrated();
	test_hw_device_calibrated();
	test_feed_seconds();
	test_plan_step();
	test_a2a_link();
	test_plan_pipeline();
	return check_report();
}
