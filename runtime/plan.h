/* plan.h - the Plan: the contract between the compiler, the runtime and
 * the tools.
 *
 * dtmc compiles a model into a Plan: the buffers of one pipeline stage (with
 * arena offsets planned at compile time) and, per stage, the ordered list of
 * actions (kernel, gemm, collective, send/recv, optimizer) that one training
 * step runs.  The generated C file defines the kernels and a `const DtmPlan`
 * table and calls dtm_main(); the runtime executes the Plan and knows nothing
 * else of the compiler.  `dtmc inspect` reads the same Plan.
 *
 * Everything here is plain data (no pointers into compiler memory), so a
 * Plan can be emitted as a C initialiser.
 */
#ifndef DTM_PLAN_H
#define DTM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#define DTM_PLAN_VERSION 2
#define DTM_MAX_RANK 8
#define DTM_MAX_AXES 8

typedef enum DtmDtype { DTM_F32, DTM_BF16, DTM_F16, DTM_I32 } DtmDtype;

/* Mirrors IrRole; OPT_STATE buffers are told apart by DtmBuffer.opt_kind
 * where a plan is the compiler's own (dtmc inspect, sweep); a generated
 * program's buffers say it only in their checkpoint names ("opt.m.",
 * "opt.v.", "opt.master.", "opt.mom."), which the runtime reads. */
typedef enum DtmRole {
	DTM_ROLE_ACT,
	DTM_ROLE_PARAM,
	DTM_ROLE_INPUT,
	DTM_ROLE_LOSS,
	DTM_ROLE_GRAD,
	DTM_ROLE_OPT_STATE,
} DtmRole;

/* Arenas: one allocation each; every buffer lives at a planned offset. */
typedef enum DtmArena {
	DTM_ARENA_PARAM,   /* params (persistent) */
	DTM_ARENA_OPT,     /* optimizer state and master weights (persistent) */
	DTM_ARENA_GRAD,    /* gradients (live from backward to the update) */
	DTM_ARENA_ACT,     /* activations and scratch (reused by liveness) */
	DTM_ARENA_INPUT,   /* data fed each step */
	DTM_ARENA_COUNT
} DtmArena;

typedef enum DtmInit {
	DTM_INIT_NONE, DTM_INIT_ZEROS, DTM_INIT_ONES, DTM_INIT_NORMAL, DTM_INIT_UNIFORM
} DtmInit;

/* What an optimizer state buffer holds for its param (IrLink's OPT_*). */
typedef enum DtmOptKind {
	DTM_OPT_NONE,   /* not an optimizer state */
	DTM_OPT_M,      /* AdamW's first moment */
	DTM_OPT_V,      /* AdamW's second moment */
	DTM_OPT_MOM,    /* SGD's momentum buffer */
	DTM_OPT_MASTER, /* the f32 master weights */
} DtmOptKind;

typedef struct DtmBuffer {
	const char *name;  /* checkpoint name (layer.3.wqkv, opt.m.layer.3.wqkv), or NULL */
	DtmRole role;
	DtmDtype dtype;
	int rank;
	int64_t shape[DTM_MAX_RANK];        /* this rank's (shard) shape */
	int64_t global_shape[DTM_MAX_RANK]; /* the unsharded shape */
	/* shard layout: per dim, the mesh axes splitting it (major first),
	 * as a bitmask list; ndims == rank.  Used for init, data and
	 * checkpoints so any mesh sees the same global tensor. */
	uint8_t split_naxes[DTM_MAX_RANK];
	uint8_t split_axes[DTM_MAX_RANK][DTM_MAX_AXES];
	const char *placement; /* as text, for reports and the checkpoint index */
	DtmArena arena;
	int64_t offset, bytes;
	DtmInit init;
	float init_a, init_b;  /* normal(mean a, std b), uniform(lo a, hi b) */
	/* The pipeline stage (pp coordinate) whose program uses the buffer;
	 * 0 in a plan of one stage.  A rank allocates, initialises, feeds and
	 * checkpoints only its stage's buffers; offsets are in that stage's
	 * arenas (DtmStage.arena_bytes).  A value every stage holds (a tied
	 * embedding, the loss) has one buffer per stage. */
	int stage;
	/* An optimizer state's kind, from the IR's links (codegen/plan_build.c);
	 * not written into generated programs (codegen/emit_c.c), whose plans
	 * read DTM_OPT_NONE: their buffer names say it (see DtmRole). */
	DtmOptKind opt_kind;
} DtmBuffer;

typedef enum DtmActionKind {
	DTM_ACT_KERNEL,  /* kernels[kernel](ctx, args) */
	DTM_ACT_GEMM,    /* C = alpha * op(A) op(B) + beta * C, batched and strided */
	DTM_ACT_COLL,    /* a collective over a group of mesh axes */
	DTM_ACT_SEND,
	DTM_ACT_RECV,
	DTM_ACT_WAIT,    /* wait for an earlier asynchronous action */
} DtmActionKind;

typedef enum DtmPhase { DTM_PHASE_FORWARD, DTM_PHASE_BACKWARD, DTM_PHASE_OPTIMIZER } DtmPhase;

typedef enum DtmColl {
	DTM_COLL_ALL_REDUCE, DTM_COLL_ALL_GATHER, DTM_COLL_REDUCE_SCATTER,
	DTM_COLL_ALL_TO_ALL, DTM_COLL_BROADCAST,
} DtmColl;

typedef enum DtmRed { DTM_RED_SUM, DTM_RED_AVG, DTM_RED_MAX } DtmRed;

#define DTM_MAX_ARGS 8

typedef struct DtmAction {
	DtmActionKind kind;
	DtmPhase phase;
	int microbatch;
	int node;            /* IR node id, for reports and --check-numerics */
	const char *label;   /* "matmul layer.0.wq" */
	int nargs;
	int args[DTM_MAX_ARGS]; /* buffer ids; for kernels/gemm the last is the output */
	/* DTM_ACT_KERNEL */
	int kernel;
	/* DTM_ACT_GEMM: args = {A, B, C}; row-major; op(X) = X^T when trans */
	int64_t m, n, k, batch;
	int64_t stride_a, stride_b, stride_c; /* elements between batch items (0 = broadcast) */
	bool trans_a, trans_b;
	float alpha, beta;
	/* DTM_ACT_COLL / SEND / RECV */
	DtmColl coll;
	uint32_t axes;       /* mesh axes of the group */
	DtmRed red;
	int dim;             /* gather/scatter dim; all_to_all: split dim */
	int dim2;            /* all_to_all: concat dim */
	int vdim;            /* all_to_all: > 0, the sparse form's rows dim (IrAttrColl) */
	int peer_offset;     /* send/recv: steps along the axes */
	bool peer_mirror;    /* send/recv: to and from (peer_offset - g) mod n */
	int64_t bytes;       /* payload bytes per rank */
	/* cost model inputs */
	int64_t flops, mem_bytes;
	int stream;          /* 0 = compute, 1 = communication */
} DtmAction;

/* The group index of a send's (sign +1) or recv's (sign -1) peer, this
 * rank being member g of n: offset steps along the group, wrapping (a
 * matched pair carries the same offset on both sides), or with mirror
 * member (offset - g) mod n both ways, a reflection that is its own
 * inverse (ring attention's load balancing swaps with member n-1-g). */
static inline int64_t dtm_peer_index(int64_t g, int64_t n, int64_t offset, bool mirror, int sign)
{
	int64_t k = mirror ? offset - g : g + sign * offset;
	return (k % n + n) % n;
}

/* The runtime zeroes every arena once at start-up and never again: a plan
 * that accumulates (gradients over micro-batches, beta = 1 GEMMs) zeroes
 * its accumulators itself.  Eval (--eval-every) runs only the actions
 * whose phase is DTM_PHASE_FORWARD. */
typedef struct DtmStage {
	int nactions;
	const DtmAction *actions;
	/* With more than one stage, what DtmPlan holds for a one-stage plan,
	 * for this stage's buffers: rt_plan_stage_view() makes the one-stage
	 * plan a rank of this stage runs. */
	int64_t arena_bytes[DTM_ARENA_COUNT];
	int ninputs;
	int inputs[4];
	int loss, grad_norm;
} DtmStage;

/* Floats in DtmCtx.scratch (zeroed once at start-up, then left to the
 * kernels: the runtime never clears it between calls). */
#define DTM_SCRATCH_FLOATS 4096

/* A body for DtmCtx.parallel_for: handles items [lo, hi). */
typedef void (*DtmRangeFn)(void *arg, int64_t lo, int64_t hi);

/* What a kernel sees each call. */
typedef struct DtmCtx {
	int64_t step;        /* 1-based optimizer step */
	float lr;            /* this step's learning rate (schedule applied) */
	uint64_t seed;
	int64_t rank;
	const int64_t *coords; /* this rank's mesh coordinates */
	int nthreads;        /* threads a kernel may use */
	float *scratch;      /* per-call scratch (norms, clip factor) */
	/* Runs fn over [0, n) split into at most nthreads contiguous ranges
	 * on the runtime's thread pool and returns when all are done; ranges
	 * are at least `grain` items.  Serial when called from inside a
	 * parallel_for body.  How [0, n) is cut depends on the thread count,
	 * which follows the host's cores, so a kernel's result must not: a
	 * sum over items goes through chunks fixed by the shape, combined in
	 * order (tests/unit/test_kernels_*.c check every cut gives the same
	 * bytes).  Generated kernels use this instead of OpenMP so
	 * the binary needs no -fopenmp and shares one pool with the GEMMs. */
	void (*parallel_for)(const struct DtmCtx *ctx, int64_t n, int64_t grain,
			     DtmRangeFn fn, void *arg);
	void *pool;          /* the runtime's, for parallel_for */
	/* Routing statistics (NULL: not kept): moe_slot adds each site's
	 * expert load at moe_stats[(site - 1) * 2 * moe_experts + e] and
	 * the choices it dropped moe_experts further on (runtime/main.c
	 * zeroes them each step, sums them over the ranks and logs them). */
	float *moe_stats;
	int moe_experts;
	/* The mesh (the plan's), so rank-dependent kernels (shard_slice) can
	 * find this rank's position in a group from coords. */
	int mesh_naxes;
	const int64_t *mesh_sizes;
	/* Loss scaling (DtmTrainCfg.loss_scale; the runtime's scaler,
	 * runtime/scaler.c): this step's scale S, which the loss_scale op
	 * writes as the backward's seed and by which grad_norm, adamw_step
	 * and sgd_step divide the gradients; an update whose gradient norm is
	 * not finite then leaves everything as it was.  0 when off: a seed of
	 * 1, nothing skipped.  skipped: the steps skipped before this one, so
	 * the optimizers' t is step - skipped. */
	float loss_scale;
	int64_t skipped;
} DtmCtx;

typedef void (*DtmKernelFn)(const DtmCtx *ctx, void *const *args);

enum { DTM_DATA_TOKENS, DTM_DATA_REGRESSION };

/* The train settings that are words in a model (`optimizer = "adamw"`),
 * as the IR's enums (ir/train.def); 0 is the default a plan built by hand
 * gets.  runtime/planinfo.h names them. */
typedef enum DtmOptimizer { DTM_OPTIMIZER_SGD, DTM_OPTIMIZER_ADAMW } DtmOptimizer;
typedef enum DtmLrSchedule { DTM_LR_CONSTANT, DTM_LR_COSINE } DtmLrSchedule;
typedef enum DtmLossScale {
	DTM_LOSS_SCALE_OFF, DTM_LOSS_SCALE_DYNAMIC, DTM_LOSS_SCALE_FIXED
} DtmLossScale;
typedef enum DtmPipeSchedule {
	DTM_PIPE_1F1B, DTM_PIPE_GPIPE, DTM_PIPE_INTERLEAVED, DTM_PIPE_ZB
} DtmPipeSchedule;

typedef struct DtmTrainCfg {
	DtmOptimizer optimizer;
	float lr, beta1, beta2, eps, weight_decay, clip, momentum;
	bool nesterov;
	DtmLrSchedule lr_schedule;
	int64_t warmup;
	float min_lr;
	int64_t steps;
	const char *data;        /* "synthetic" or a token file */
	int64_t seed;
	int64_t tokens_per_step; /* global; for tokens/s */
	int64_t batch, seq;      /* global batch and sequence length (token models) */
	int64_t vocab;           /* for token inputs; 0 for regression models */
	/* DTM_DATA_TOKENS: inputs[0] = tokens i32[B, T], inputs[1] = targets
	 * (the next tokens); DTM_DATA_REGRESSION: inputs[0] = x f32[B, ...],
	 * inputs[1] = y f32[B, ...] from the synthetic regression task. */
	int data_kind;
	int microbatches;
	DtmDtype precision;
	/* the pipeline schedule and its virtual stages per rank: the cost
	 * model's bubble */
	DtmPipeSchedule schedule;
	int virtual_stages;
	/* Loss scaling, torch.amp.GradScaler's rule (runtime/scaler.c): the
	 * scale starts at init_scale; a step whose gradient norm is not
	 * finite is skipped and the scale multiplied by backoff_factor; after
	 * growth_interval good steps in a row it is multiplied by
	 * growth_factor.  DTM_LOSS_SCALE_FIXED keeps init_scale (skipping
	 * still), DTM_LOSS_SCALE_OFF (0, a plan built by hand) has none. */
	DtmLossScale loss_scale;
	float init_scale, growth_factor, backoff_factor;
	int64_t growth_interval;
} DtmTrainCfg;

/* ---- CUDA kernels (codegen/emit_cuda.c; `dtmc build --cuda`) ----
 *
 * One CUDA kernel per plan kernel index (same order as DtmPlan.kernels),
 * all in DtmPlan.cuda_source: self-contained CUDA C++ (no #include) that
 * NVRTC compiles as is, with every shape a constant.  Each is
 *     extern "C" __global__ void NAME(DtmCudaArgs a)
 * launched on ceil(threads / block) blocks of `block` threads with
 * smem_bytes of dynamic shared memory (never above 48 KiB, so no opt-in
 * attribute is needed); threads == 0 means nothing to launch.  Kernels
 * rely on exactly that grid.  a.p[k] is the
 * device address of the action's args[k] (the output last); step, lr,
 * seed, rank, coords, loss_scale and skipped are DtmCtx's.  Some kernels keep scratch
 * (partial sums, counters) in __device__ globals of the module that they
 * leave zeroed when they finish: each rank loads its own module, and a
 * kernel never runs concurrently with itself. */
typedef struct DtmCudaArgs {
	void *p[DTM_MAX_ARGS];
	long long step;
	float lr;
	unsigned long long seed;
	long long rank;
	long long coords[DTM_MAX_AXES];
	float loss_scale;
	long long skipped;
} DtmCudaArgs; /* passed by value */

typedef struct DtmCudaKernel {
	const char *name; /* extern "C" __global__ void NAME(DtmCudaArgs a) */
	int64_t threads;  /* total threads to launch (grid = ceil(threads / block)) */
	int block;
	int smem_bytes;
} DtmCudaKernel;

typedef struct DtmPlan {
	int version;
	const char *model;
	int mesh_naxes;
	const char *mesh_names[DTM_MAX_AXES];
	int64_t mesh_sizes[DTM_MAX_AXES];
	/* The mesh axis whose coordinate is a rank's pipeline stage (the
	 * mesh's, frontend/lower_mesh.c); read only when nstages > 1, and then
	 * its size is nstages (rt_plan_validate). */
	int pp_axis;
	int nbuffers;
	const DtmBuffer *buffers;
	int64_t arena_bytes[DTM_ARENA_COUNT];
	int nstages;
	const DtmStage *stages;
	int nkernels;
	const DtmKernelFn *kernels;
	const char *const *kernel_names;
	/* inputs: the buffers data fills each step (tokens, targets or x, y) */
	int ninputs;
	int inputs[4];
	int loss;            /* buffer id of the loss scalar */
	/* moe_slot sites and the most experts of one (DtmCtx.moe_stats) */
	int moe_sites, moe_experts;
	int grad_norm;       /* buffer id of the global grad norm scalar, or -1 */
	DtmTrainCfg train;
	/* The stage a per-rank view of a pipelined plan runs (see
	 * rt_plan_stage_view); 0 otherwise.  Buffers of other stages are not
	 * this rank's. */
	int stage;
	/* CUDA: the kernels' source and launch shapes, one per kernels[]
	 * entry; NULL when not emitted (dtmc build without --cuda). */
	const char *cuda_source;
	const DtmCudaKernel *cuda_kernels;
} DtmPlan;

/* The training binary's entry: parses the command line, runs the Plan.
 * Returns the process exit status. */
int dtm_main(const DtmPlan *plan, int argc, char **argv);

#endif
