/* cost.h - the cost model: bytes, seconds and memory of a training step.
 *
 * Two layers.  The formulas (ring bytes per collective, alpha-beta time per
 * link class, roofline time of a kernel, model state per parameter under
 * ZeRO 0-3 and Megatron's distributed optimizer, pipeline bubbles, MFU) are
 * pure functions of their arguments; tests/unit/test_cost.c checks each
 * against the numbers of ../shared/REFERENCE.md.  cost_plan_step() applies
 * them to a DtmPlan, the same Plan the runtime executes, so the bytes it
 * counts are the bytes the runtime moves.
 *
 * Conventions: bytes and seconds are doubles; n is a group size (ranks);
 * "send-side bytes" are what one rank sends in a ring algorithm.
 */
#ifndef DTM_COST_H
#define DTM_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/plan.h"
#include "tools/hw.h"

/* Communication kinds: the DtmColl values, then point-to-point. */
typedef enum CostComm {
	COST_ALL_REDUCE = DTM_COLL_ALL_REDUCE,
	COST_ALL_GATHER = DTM_COLL_ALL_GATHER,
	COST_REDUCE_SCATTER = DTM_COLL_REDUCE_SCATTER,
	COST_ALL_TO_ALL = DTM_COLL_ALL_TO_ALL,
	COST_BROADCAST = DTM_COLL_BROADCAST,
	COST_SEND,
	COST_RECV,
	COST_NCOMM
} CostComm;

const char *cost_comm_name(CostComm kind); /* "all_reduce", ..., "send", "recv" */

/* ---- collectives ----
 * S is the full tensor: all_reduce's and broadcast's buffer, all_gather's
 * output, reduce_scatter's input, all_to_all's per-rank input, a send's
 * payload.  Ring send-side bytes per rank: all_reduce 2(n-1)/n*S;
 * all_gather, reduce_scatter, all_to_all (n-1)/n*S; broadcast and send S
 * (recv sends nothing).  0 for n <= 1. */
double cost_ring_bytes(CostComm kind, int64_t n, double S);
/* Ring steps: all_reduce 2(n-1); all_gather, reduce_scatter, all_to_all and
 * broadcast (a pipelined chain) n-1; send/recv 1.  0 for n <= 1. */
int64_t cost_ring_steps(CostComm kind, int64_t n);
/* nccl-tests bus-bandwidth factor: all_reduce 2(n-1)/n; all_gather,
 * reduce_scatter, all_to_all (n-1)/n; broadcast and send/recv 1. */
double cost_bus_factor(CostComm kind, int64_t n);
/* nccl-tests busbw = S / seconds * factor, bytes/s. */
double cost_bus_bw(CostComm kind, int64_t n, double S, double seconds);

/* alpha-beta: latency * steps + bytes / bw. */
double cost_alpha_beta(HwLink link, int64_t steps, double bytes);
/* One collective of S bytes over n ranks on one link class; all_to_all
 * at the link's a2a_bw (bw when that is 0), every other kind at bw. */
double cost_comm_time(CostComm kind, int64_t n, double S, HwLink link);
/* REFERENCE.md's all_reduce comparison, n bytes over p ranks:
 * ring 2(p-1)(alpha + n/(p beta)), tree 2 log2(p) (alpha + n/beta). */
double cost_allreduce_ring_time(int64_t p, double n, double alpha, double beta);
double cost_allreduce_tree_time(int64_t p, double n, double alpha, double beta);

/* Which link a group's ring crosses.  Ranks are row-major over the mesh
 * axes (the last axis varies fastest) and nodes hold node_size consecutive
 * ranks; the groups along `axes` are intra-node when every one of them lies
 * inside one node, so minor axes are the ones that stay on NVLink. */
typedef enum CostLinkClass { COST_LINK_NONE, COST_LINK_INTRA, COST_LINK_INTER } CostLinkClass;
CostLinkClass cost_link_class(int naxes, const int64_t *sizes, uint32_t axes, int64_t node_size);
/* Ranks in the group along axes (the product of their sizes). */
int64_t cost_group_size(int naxes, const int64_t *sizes, uint32_t axes);

/* ---- kernels ---- */

/* Roofline: max(flops / peak, bytes / bw). */
double cost_roofline(double flops, double bytes, double peak_flops, double mem_bw);

/* ---- memory per parameter ---- */

/* Bytes per parameter of each part of the model state. */
typedef struct CostStateBytes {
	double param, grad, master, opt;
} CostStateBytes;

/* REFERENCE.md's mixed-precision Adam: bf16 param 2 + bf16 grad 2 + f32
 * master 4 + f32 m and v 8 = 16 bytes (K = 12). */
#define COST_MIXED_ADAM ((CostStateBytes){.param = 2, .grad = 2, .master = 4, .opt = 8})

/* Resident model state per rank, bytes. */
typedef struct CostMemory {
	double params, grads, master, opt, total;
} CostMemory;

/* ZeRO stage 0 (DDP) to 3 over a data-parallel degree n, P parameters:
 * stage >= 1 splits master and optimizer state, >= 2 also gradients, 3
 * also params, each 1/n per rank (without gathered units and buffers). */
CostMemory cost_zero_memory(int stage, double P, int64_t n, CostStateBytes b);
/* Ring send-side bytes per rank per step: DDP all_reduce(grads)
 * 2(n-1)/n*G; ZeRO-1/2 reduce_scatter(grads) + all_gather(params)
 * (n-1)/n*(G + Pb); ZeRO-3 adds the backward all_gather, (n-1)/n*(G + 2Pb),
 * or (G + Pb) without reshard_after_forward.  G and Pb are the whole
 * model's gradient and parameter bytes. */
double cost_zero_comm_bytes(int stage, double param_bytes, double grad_bytes, int64_t n,
                            bool reshard_after_forward);

/* Megatron's distributed optimizer: per parameter, `replicated` bytes stay
 * on every data-parallel rank (the model params and grads) and `sharded`
 * are split over the d ranks (f32 master unless the params are f32, an f32
 * main-grad copy when grads are 16-bit, Adam m and v). */
typedef struct CostDistOpt {
	double replicated, sharded;
} CostDistOpt;
CostDistOpt cost_megatron_distopt(DtmDtype param, DtmDtype grad);
/* replicated + sharded / d. */
double cost_megatron_bytes_per_param(DtmDtype param, DtmDtype grad, int64_t d);

/* ---- pipelines ----
 * P stages, M micro-batches, v virtual stages per rank (1 = GPipe/1F1B). */

/* Idle fraction of the step: (P-1)/(vM+P-1). */
double cost_bubble_fraction(int64_t P, int64_t M, int64_t v);
/* Step time in units of one micro-batch's stage time t: (vM+P-1)/v. */
double cost_pipeline_time(int64_t P, int64_t M, int64_t v);
/* The bubble fraction of a schedule (gpipe, 1f1b, interleaved with v
 * virtual stages per rank, zb for ZB-H1) on balanced stages:
 * cost_pipeline_step's bubble when every stage's work is the same. */
double cost_schedule_bubble(DtmPipeSchedule schedule, int64_t P, int64_t M, int64_t v);
/* The slots a schedule cuts each stage's work into: M micro-batches, vM
 * for interleaved(v) (a chunk each), 3M for ZB-H1 (F, B and W). */
int64_t cost_schedule_slots(DtmPipeSchedule schedule, int64_t M, int64_t v);
/* A pipeline step whose P stages take work[s] for all their slots (each
 * stage's actions cover every micro-batch): the slowest stage runs
 * throughout, and the fill and drain add one slot of each other stage,
 * max + (sum - max) / slots (on balanced stages the schedule's step,
 * (slots + P - 1) / slots of a stage).  *bubble gets the stages' mean idle
 * share of the step, 1 - mean / step: the schedule's bubble when balanced,
 * more when the work is not (an empty stage idles throughout). */
double cost_pipeline_step(const double *work, int P, int64_t slots, double *bubble);
/* Megatron's ratio of bubble time to ideal time: (P-1)/(vM). */
double cost_bubble_ratio(int64_t P, int64_t M, int64_t v);
/* Stage-to-stage hops of one micro-batch's forward: Pv-1. */
int64_t cost_pipeline_hops(int64_t P, int64_t v);

/* ---- throughput ---- */

/* llm.c: 6N + 6*L*C*T FLOPs per token (N params, L layers, C channels,
 * T sequence length; the attention term counts the causal half). */
double cost_flops_per_token(double N, int64_t L, int64_t C, int64_t T);
/* Achieved FLOP/s over the devices' dense peak. */
double cost_mfu(double flops_per_token, double tokens_per_s, int64_t ndevices, double peak);
/* Tokens per rank per step that hide DDP's gradient all_reduce behind
 * compute: bytes_per_param * peak / (6 * bw). */
double cost_ddp_hide_tokens(double bytes_per_param, double peak, double bw);

/* ---- a Plan's step ---- */

typedef struct CostTally {
	int count;
	double bytes;   /* send-side bytes per rank (ring) */
	double seconds; /* alpha-beta time */
} CostTally;

#define COST_AXES_MASKS (1u << DTM_MAX_AXES)

typedef struct CostStage {
	double compute_s;        /* roofline time of kernels and GEMMs */
	double comm_s;           /* alpha-beta time of collectives and send/recv */
	double exposed_comm_s;   /* time_s - compute_s: communication not hidden */
	double time_s;           /* this stage's step: both streams done */
	double flops, mem_bytes; /* of kernels and GEMMs */
	double send_bytes;       /* ring send-side bytes per rank */
	CostTally by_kind[COST_NCOMM];
	CostTally by_axes[COST_AXES_MASKS]; /* by group: index = mesh-axes mask */
} CostStage;

typedef struct CostReport {
	int nstages;
	CostStage *stages; /* nstages, owned: cost_report_free */
	int64_t world;     /* ranks in the mesh */
	int64_t node_size; /* ranks per node */
	int64_t microbatches;
	double bubble;       /* the stages' mean idle share of the step
	                      * (cost_pipeline_step): (P-1)/(M+P-1) for
	                      * balanced 1F1B stages, 0 for one stage */
	double step_s;       /* one stage: its time; several: the simulated
	                      * timeline's (cost_simulate); plus hw->step_s */
	double tokens_per_s; /* train.tokens_per_step / step_s, 0 if unknown */
	double mem_bytes;    /* per rank: the plan's arenas */
	double hfu;          /* every rank's kernel FLOPs / (step_s * world * peak) */
	double oversub;      /* >= 1: how much slower compute runs because this
	                      * node's ranks share its cores (calibrated CPU
	                      * profiles: ranks x threads over cores, times the
	                      * share of the step the stages compute) */
	char err[160];
} CostReport;

/* Costs one training step of plan on hw.  nodes > 0 spreads the mesh over
 * that many nodes (ceil(world / nodes) ranks each), otherwise nodes hold
 * hw->devices_per_node ranks.  Per stage, actions run in order on two
 * streams: kernels and GEMMs (roofline, at the peak of their operands'
 * dtype) on the compute stream, which waits for the inputs a stream-1
 * collective produces; a stream-1 collective starts once the compute stream
 * has issued it and the previous one finished; stream-0 communication and
 * DTM_ACT_WAIT join the two.  Returns 0, or -1 with out->err set (a buffer
 * id out of range, a bad mesh).  Call cost_report_free either way. */
int cost_plan_step(const DtmPlan *plan, const HwProfile *hw, int nodes, CostReport *out);
void cost_report_free(CostReport *r);

/* Seconds a rank spends making a step's synthetic regression data (two
 * f32 inputs x, y: a sample of in x out multiply-adds per local row of
 * each) at hw->feed_rate; 0 for token inputs or without a rate. */
double cost_feed_seconds(const DtmPlan *plan, const HwProfile *hw);

/* One action's place on the simulated timeline. */
typedef struct CostSpan {
	double t0, t1;
	int peer_stage;  /* send/recv: the other stage, -1 elsewhere */
	int peer_action; /* recv: the matching send's action in peer_stage, or -1 */
	double cold_bytes; /* a GEMM: its operands' bytes from beyond the cache
	                    * (the profile's cache model; 0 without one) */
} CostSpan;

/* Runs every stage's actions together on the timeline: per stage a compute
 * and a communication stream as in cost_plan_step, and a recv starting no
 * sooner than its matching send (stage s's sends to stage t are matched
 * with t's receives from s in order).  span[s][i] (span may be NULL) gets
 * each action's times; *makespan the time the last stream ends.  Returns
 * 0, or -1 out of memory.  The buffer ids must be valid (cost_plan_step
 * checks them). */
int cost_simulate(const DtmPlan *plan, const HwProfile *hw, int64_t node_size, CostSpan **span,
                  double *makespan);

/* One action of plan on hw, as cost_plan_step counts it: the duration
 * (roofline for kernels and GEMMs at their operands' dtype, alpha-beta on
 * the link its group crosses for communication, 0 for DTM_ACT_WAIT) and,
 * for communication, the ring send-side bytes per rank in *send_bytes (may
 * be NULL).  node_size: ranks per node.  The action's buffer ids must be
 * valid.  For timelines of one's own (`dtmc inspect --trace`). */
double cost_action_seconds(const DtmPlan *plan, const HwProfile *hw, int64_t node_size,
                           const DtmAction *a, double *send_bytes);

/* A kernel's class for the profile's kernel factors (hw.h HwKernelFactor):
 * its op's name (kname, the plan's kernel name), or for a fused group
 * (kname "fused") "fused." and its root's op, the first word of its label
 * ("gelu layer.0.h": fused.gelu); into out[0..n), truncated. */
void cost_kernel_class(const char *kname, const char *label, char *out, size_t n);

#endif
