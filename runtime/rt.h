/* rt.h - the runtime's internal interface (rt_ names), shared by exec.c,
 * dev_cpu.c, log.c and main.c.  Nothing here is seen by generated code,
 * which knows only runtime/plan.h; tests may include it to look inside.
 *
 * Errors: functions return 0 on success and -1 on failure after writing a
 * message (without the "error: " prefix) into the RtRun's err buffer or
 * the caller's; only dtm_main turns them into an exit status.
 */
#ifndef DTM_RT_H
#define DTM_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/data.h"
#include "runtime/plan.h"
#include "runtime/planinfo.h"
#include "support/float16.h"

#define RT_ERR_LEN 1024
#define RT_ALIGN 64

/* ---- dtypes ---- */

static inline size_t rt_dtype_size(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

static inline const char *rt_dtype_name(DtmDtype t)
{
	switch (t) {
	case DTM_F32: return "f32";
	case DTM_BF16: return "bf16";
	case DTM_F16: return "f16";
	case DTM_I32: return "i32";
	}
	return "?";
}

/* Element i of a float-like buffer of dtype t, as f32 (I32 converted). */
static inline float rt_load_f32(const void *p, DtmDtype t, int64_t i)
{
	switch (t) {
	case DTM_F32: return ((const float *)p)[i];
	case DTM_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
	case DTM_F16: return f16_to_f32(((const uint16_t *)p)[i]);
	case DTM_I32: return (float)((const int32_t *)p)[i];
	}
	return 0;
}

static inline void rt_store_f32(void *p, DtmDtype t, int64_t i, float v)
{
	switch (t) {
	case DTM_F32: ((float *)p)[i] = v; break;
	case DTM_BF16: ((uint16_t *)p)[i] = bf16_from_f32(v); break;
	case DTM_F16: ((uint16_t *)p)[i] = f16_from_f32(v); break;
	case DTM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	}
}

/* dst[0, n) = the n values of p from element off as f32, and back: a loop
 * per dtype, so the 16-bit ones vectorise where the caller's file is
 * compiled -O3 (a per-element rt_load_f32 switch does not: the GEMM
 * staging, the backends' 16-bit reductions). */
static inline void rt_widen(float *restrict dst, const void *restrict p, DtmDtype t, int64_t off,
			    int64_t n)
{
	if (t == DTM_F32) {
		memcpy(dst, (const float *)p + off, sizeof(float) * (size_t)n);
	} else if (t == DTM_BF16) {
		const uint16_t *restrict s = (const uint16_t *)p + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = bf16_to_f32(s[i]);
	} else if (t == DTM_F16) {
		const uint16_t *restrict s = (const uint16_t *)p + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = f16_to_f32(s[i]);
	} else {
		for (int64_t i = 0; i < n; i++)
			dst[i] = rt_load_f32(p, t, off + i);
	}
}

static inline void rt_narrow(void *restrict p, DtmDtype t, int64_t off, const float *restrict src,
			     int64_t n)
{
	if (t == DTM_F32) {
		memcpy((float *)p + off, src, sizeof(float) * (size_t)n);
	} else if (t == DTM_BF16) {
		uint16_t *restrict d = (uint16_t *)p + off;
		for (int64_t i = 0; i < n; i++)
			d[i] = bf16_from_f32(src[i]);
	} else if (t == DTM_F16) {
		uint16_t *restrict d = (uint16_t *)p + off;
		for (int64_t i = 0; i < n; i++)
			d[i] = f16_from_f32(src[i]);
	} else {
		for (int64_t i = 0; i < n; i++)
			rt_store_f32(p, t, off + i, src[i]);
	}
}

/* ---- shard layout (exec.c) ---- */

int64_t rt_numel(const DtmBuffer *b);
/* Mesh coordinates of `rank` (row-major over the mesh axes, axis 0
 * major). */
void rt_rank_coords(const DtmPlan *p, int64_t rank, int64_t *coords);
int64_t rt_world_size(const DtmPlan *p);
/* Where this rank's shard starts along each dim of the global tensor
 * (torch.chunk rule: chunk = ceil(n / parts), shard i starts at i*chunk). */
void rt_shard_start(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords,
		    int64_t *start);
/* Row-major global index of each local element, in local row-major order,
 * written to out[0 .. numel); -1 for the padding of an uneven shard (every
 * rank stores ceil(n / parts) rows of a dim of n: the tail shards' rows
 * past n, zero in every buffer).  Walks the local index like an odometer
 * so the cost is O(numel), not O(numel * rank). */
void rt_global_indices(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords,
		       int64_t *out);

/* ---- the thread pool and the CPU device (dev_cpu.c) ---- */

typedef struct RtPool RtPool;

RtPool *rt_pool_new(int nthreads);
void rt_pool_free(RtPool *pool);
int rt_pool_threads(const RtPool *pool);
void rt_parallel_for(RtPool *pool, int64_t n, int64_t grain, DtmRangeFn fn, void *arg);
/* The DtmCtx.parallel_for the kernels see. */
void rt_ctx_parallel_for(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn,
			 void *arg);

/* f32 staging space for GEMMs on 16-bit buffers, sized once from the plan
 * (rt_gemm_plan_need, runtime/planinfo.c: what inspect reports) so no step
 * allocates: A and B widened whole (reserved, and untouched where oneDNN
 * takes bf16 operands), all of C for a batch accumulating into one 16-bit
 * C, and for any other 16-bit C one block (rt_gemm_split's) per pool
 * thread. */
typedef struct RtGemmScratch {
	float *a, *b, *c, *blk;
	int64_t na, nb, nc, nblk; /* floats; blk holds nslots blocks of nblk */
	int nslots;
} RtGemmScratch;

int rt_gemm_alloc(RtGemmScratch *s, const int64_t need[4], int nslots, char *err);
/* The plan's staging for a pool of nslots threads. */
int rt_gemm_reserve(RtGemmScratch *s, const DtmPlan *p, int nslots, char *err);
int64_t rt_gemm_scratch_bytes(const RtGemmScratch *s);
void rt_gemm_scratch_free(RtGemmScratch *s);

/* C = alpha op(A) op(B) + beta C for each batch item; 16-bit operands are
 * staged through f32 scratch.  The result does not depend on the pool's
 * thread count (see rt_gemm_split). */
/* --calibrate-gemm: times rt_cpu_gemm on pool over a grid of shapes (every
 * rank runs it at once); with text, *text (malloc'd, NUL-terminated,
 * *textlen bytes) gets `gemm THREADS M N K = FLOP/s` lines.  Returns 0,
 * or -1 with err set. */
int rt_calibrate_gemm(RtPool *pool, char **text, size_t *textlen, char *err);
int rt_cpu_gemm(const DtmAction *a, const DtmBuffer *bufs, void *const *ptrs,
		RtGemmScratch *s, RtPool *pool, char *err);
/* OpenBLAS's own thread count; rt_cpu_gemm sets 1 (bench/gemm_bench sets
 * more for plain sgemm). */
void rt_blas_set_threads(int n);
const char *rt_blas_name(void);

/* ---- execution (exec.c) ---- */

struct Comm;
struct RtRun;

/* A device other than the CPU (runtime/dev_cuda.c), attached to a run
 * after rt_run_init: it keeps the arenas in its own memory and runs the
 * actions there.  The host arenas that remain hold what crosses over:
 * params and optimizer state (initial values, checkpoints) and inputs. */
typedef struct RtDeviceOps {
	const char *name;
	int (*run_actions)(struct RtRun *r, bool forward_only);
	int (*read_scalar)(struct RtRun *r, int buf, double *out);
	int (*to_device)(struct RtRun *r); /* host params and state -> device */
	int (*to_host)(struct RtRun *r);   /* device params and state -> host */
	void (*close)(struct RtRun *r);
} RtDeviceOps;

typedef struct RtRun {
	const DtmPlan *plan;
	struct Comm *comm;      /* runtime/comm.h; NULL on a one-rank run */
	int stage;
	int64_t rank;
	int64_t coords[DTM_MAX_AXES];
	void *arena[DTM_ARENA_COUNT];
	int64_t arena_alloc[DTM_ARENA_COUNT]; /* bytes allocated per host arena */
	void **ptr;             /* per buffer: arena base + offset */
	DtmCtx ctx;
	float *scratch;
	RtPool *pool;
	RtGemmScratch gemm;
	bool check_numerics;
	/* This pass: compute_s inside kernels and GEMMs, comm_s inside
	 * communication actions (on the communication thread with overlap),
	 * idle_s the compute thread not computing because of communication:
	 * waiting for it (overlap) or running it itself (inline). */
	double compute_s, comm_s, idle_s;
	/* when set, each kernel's and GEMM's seconds are added to act_s[i]
	 * (i its index in the stage; main.c's --profile-actions) */
	double *act_s;
	/* --overlap: communication actions run on a thread of their own
	 * (runtime/overlap.c), started by the first pass; needs r->comm and
	 * a backend another thread may call (Comm.any_thread). */
	bool overlap;
	/* with overlap: copy a collective's input aside when a later kernel
	 * would overwrite it while the collective is pending, instead of
	 * waiting for it (rt_overlap_staging) */
	bool overlap_copy;
	int64_t comm_delay_us;    /* --comm-delay-us: sleep before each message */
	struct RtCommThread *cthread;
	const RtDeviceOps *dev;   /* NULL: the CPU runs the actions */
	void *dev_state;
	char err[RT_ERR_LEN];
} RtRun;

/* Checks the plan's invariants (ids, offsets inside arenas, shapes that
 * fit their bytes) so a codegen bug is a message, not a wild write. */
int rt_plan_validate(const DtmPlan *p, char *err);
int rt_run_init(RtRun *r, const DtmPlan *p, int64_t rank, int nthreads);
/* As rt_run_init, with host memory only for the arenas in the bitmask
 * host_arenas (bit a = arena a) plus those holding params, optimizer state
 * or inputs; other buffers get NULL host pointers.  For runs whose actions
 * execute on a device: all arenas means the CPU can run them too. */
#define RT_HOST_ALL ((1u << DTM_ARENA_COUNT) - 1)
int rt_run_init_ex(RtRun *r, const DtmPlan *p, int64_t rank, int nthreads, uint32_t host_arenas);
void rt_run_free(RtRun *r);
/* With a device attached: copy params and optimizer state to it (after
 * initial values or a checkpoint load), or back (before a checkpoint
 * save).  No-ops on the CPU. */
int rt_run_to_device(RtRun *r);
int rt_run_to_host(RtRun *r);
/* --check-numerics: the first non-finite value among the buffers action
 * idx wrote, read through ptr (per buffer id), as r->err. */
int rt_check_action(RtRun *r, int idx, const DtmAction *a, void *const *ptr);
/* Initial values of every PARAM and OPT_STATE buffer from (seed, name,
 * global element index). */
int rt_run_init_values(RtRun *r, uint64_t seed);
/* One pass over this stage's actions; forward_only runs just the
 * DTM_PHASE_FORWARD ones (evaluation). */
int rt_run_actions(RtRun *r, bool forward_only);
/* Test-only fault injection: when set, called on the rank's own thread
 * before each action rt_run_actions runs on the CPU (action: its index in
 * the stage); nonzero stops the pass as a failed action would, with the
 * message the hook wrote into r->err.  A hook that does not return
 * simulates a rank stuck outside communication.  NULL (the default) costs
 * one test per action; set it only while no rank runs. */
extern int (*rt_test_action_hook)(RtRun *r, int action);
int rt_read_scalar(RtRun *r, int buf, double *out);
/* Runs communication action a now on this thread (with --comm-delay-us's
 * sleep first when a message moves); err gets the message. */
int rt_comm_action(RtRun *r, const DtmAction *a, void *const *ptr, char *err);
int rt_find_buffer(const DtmPlan *p, const char *name); /* of p->stage */
/* A pipelined plan (nstages > 1): the stage rank runs (its pp coordinate;
 * rt_plan_stage_view, planinfo.h, makes the one-stage plan it runs).  A
 * one-stage plan: stage 0. */
int rt_plan_stage(const DtmPlan *p, int64_t rank);

/* ---- overlap: the communication thread (overlap.c) ---- */

typedef struct RtCommThread RtCommThread;
/* Start (once) and stop (rt_run_free) r's communication thread. */
int rt_overlap_start(RtRun *r);
void rt_overlap_stop(RtRun *r);
/* One pass: begin; issue each communication action in plan order
 * (returns its sequence number); before any other action, wait_for what
 * it touches; wait_all at the end.  Every call returns -1 with r->err once
 * an action has failed.  abort drops what has not started and waits for
 * the action in flight, so the caller may use r->comm afterwards. */
int rt_overlap_begin(RtRun *r);
int rt_overlap_issue(RtRun *r, int action, const RtAccess *acc);
int rt_overlap_wait_for(RtRun *r, const RtAccess *acc);
int rt_overlap_wait_all(RtRun *r);
void rt_overlap_abort(RtRun *r);
/* Seconds this pass's actions took on the thread (after wait_all). */
double rt_overlap_comm_s(RtRun *r);
/* Bytes the most recent rt_run_init allocated for arena a: the tests and
 * `-v` compare it with plan->arena_bytes. */
int64_t dtm_rt_allocated_bytes(int arena);

/* ---- the CUDA device (dev_cuda.c, library dtm_runtime_cuda) ----
 *
 * Built only where CMake found the CUDA toolkit, and linked into training
 * binaries only then: main.c refers to these weakly, so they are NULL in
 * a binary without CUDA (`--device cuda` then says so). */

typedef struct RtCudaOpts {
	bool local_backend;     /* ranks are threads of this process */
	bool verbose;           /* print the device, arch and cache use */
} RtCudaOpts;

/* Whether a GPU is usable: *ndev >= 1, or -1 with "no CUDA
 * driver/device: ..." in err. */
int rt_cuda_probe(int *ndev, char *err) __attribute__((weak));
/* Moves a run onto its GPU (rt_cuda_pick_device): device arenas, NVRTC
 * module, cuBLAS, streams, events and (several ranks) NCCL communicators
 * over r->comm; then r->dev runs the actions. */
int rt_cuda_attach(RtRun *r, const RtCudaOpts *o, char *err) __attribute__((weak));
/* --calibrate-gemm on an attached run's GPU: cuBLAS through the runtime's
 * GEMM call over rt_cuda_cal_shapes, f32 and bf16, as profile lines
 * (`gemm 1 M N K = FLOP/s`, `gemm_bf16 ...`), after a `# device: NAME`
 * comment and its `mem_size`, into *text (malloc'd; when text is
 * non-NULL). */
int rt_cuda_calibrate_gemm(RtRun *r, char **text, size_t *textlen, char *err)
	__attribute__((weak));

/* ---- input data (feed.c) ---- */

/* Held-out synthetic samples for --eval-every start here, far past any
 * training run. */
#define RT_EVAL_FIRST_SAMPLE (1ull << 40)

typedef struct RtFeed {
	const DtmPlan *plan;
	int kind;               /* DTM_DATA_TOKENS or DTM_DATA_REGRESSION */
	int64_t batch, T;       /* global batch; tokens per sample */
	int64_t *gidx[4];       /* per input: global index of each local element */
	int32_t *row;           /* one token sample (T + 1) */
	float *rx, *ry;         /* one regression sample */
	/* token streams, borrowed (opened once per process by dtm_main and
	 * shared by its ranks): train NULL means synthetic tokens, val NULL
	 * no --val-data */
	const DtmTokenShards *train, *val;
	uint64_t seed;
	int vocab;
	DtmRegression reg;
	bool have_reg;
} RtFeed;

int rt_feed_open(RtFeed *f, const DtmPlan *p, const int64_t *coords, const DtmTokenShards *train,
		 const DtmTokenShards *val, uint64_t seed, char *err);
/* Fills the inputs with training samples [first_sample, first_sample + batch). */
int rt_feed_fill(RtFeed *f, void *const *ptr, uint64_t first_sample, char *err);
/* Whether there is held-out data for --eval-every: the --val-data stream,
 * or synthetic data's samples from RT_EVAL_FIRST_SAMPLE; token files
 * without --val-data have none. */
bool rt_feed_has_eval(const RtFeed *f);
/* Fills the inputs with the evaluation batch: the --val-data stream's
 * samples [0, batch) (the same batch at every evaluation, as llm.c resets
 * its val loader), else the synthetic samples from RT_EVAL_FIRST_SAMPLE. */
int rt_feed_fill_eval(RtFeed *f, void *const *ptr, char *err);
void rt_feed_close(RtFeed *f);
/* --dump-batches: writes this rank's input buffers as they are now to
 * DIR/step_%06lld.safetensors, one tensor per input named as the input
 * (tokens, targets or x, y), so an oracle can train on exactly the data
 * dtm saw.  Single rank only (the local buffers are the global batch). */
int rt_feed_dump(const RtFeed *f, void *const *ptr, const char *dir, int64_t step, char *err);

/* ---- loss scaling (scaler.c) ---- */

/* The dynamic loss scaler's state (torch.amp.GradScaler's): the scale
 * the next step runs with, the good steps in a row since it last changed
 * (GradScaler's growth tracker) and the steps skipped so far. */
typedef struct RtScaler {
	bool on;       /* the plan scales its loss (DtmTrainCfg.loss_scale) */
	float scale;
	int64_t good;
	int64_t skipped;
} RtScaler;

/* The state a run starts with: init_scale, nothing counted. */
void rt_scaler_init(RtScaler *s, const DtmTrainCfg *c);
/* After a step whose global gradient norm was grad_norm: true when the
 * step was skipped (the norm is not finite); moves the scale by
 * GradScaler's rule (scaler.c).  Off: false, nothing changes. */
bool rt_scaler_update(RtScaler *s, const DtmTrainCfg *c, double grad_norm);

/* ---- checkpoints (save.c, over runtime/ckpt.h) ---- */

typedef struct RtCkptMeta {
	int64_t step;
	uint64_t seed;
	int64_t lr_decay_steps; /* the schedule's horizon, so a resume keeps it */
	/* the stream the data position (step * batch samples) is in:
	 * "synthetic" or dtm_shards_describe's text; "" when a loaded
	 * checkpoint does not say (saved before it was recorded) */
	char data[96];
	/* the loss scaler's state after step, when the plan scales its loss
	 * (saved as metadata loss_scale, loss_scale_good, skipped_steps); a
	 * loaded checkpoint without it leaves scaler as it was */
	RtScaler scaler;
} RtCkptMeta;

/* Writes every named PARAM and OPT_STATE buffer plus metadata as DIR's
 * checkpoint of step m->step. */
int rt_ckpt_save(const RtRun *r, const char *dir, const RtCkptMeta *m, char *err);
/* Loads DIR's latest checkpoint into the PARAM and OPT_STATE buffers (a
 * whole tensor is sliced to this rank's shard).  The checkpoint must match
 * the plan: the mesh (axis names, order, sizes) for shards, and every
 * tensor's dtype, global shape and placement; see save.c.  0, or -1 with
 * err.  With several ranks, a collective: a failure of rank 0 reaches the
 * others as a peer failure (Comm.peer_failed), so it is said once. */
int rt_ckpt_load(RtRun *r, const char *dir, RtCkptMeta *m, char *err);
/* Called on every rank, in the same order, for each checkpoint
 * rt_ckpt_load_fallback skips: its step directory (or DIR) and why, the
 * message of the lowest rank that found it damaged ("rank 2: PATH:
 * tensor w1: data does not match its checksum ..."). */
typedef void RtCkptSkipFn(void *ctx, const char *ckpt, const char *why);
/* rt_ckpt_load for --resume-fallback: when a file of the checkpoint is
 * damaged (unreadable, torn, a bad header, a checksum mismatch, contents
 * that contradict index.json), on any rank, every rank falls back
 * together to the newest older DIR/step_N that has an index.json, and so
 * on.  Another model, or any failure that is not damage, is an error as
 * in rt_ckpt_load; so is running out of checkpoints ("no complete
 * checkpoint left").  from gets the directory loaded: DIR, or the step
 * directory fallen back to.  A collective: every rank calls it. */
int rt_ckpt_load_fallback(RtRun *r, const char *dir, RtCkptSkipFn *skipped, void *ctx,
			  RtCkptMeta *m, char *from, size_t nfrom, char *err);

/* ---- logging (log.c) ---- */

typedef struct RtLogStep {
	int64_t step, steps;
	double loss, grad_norm; /* grad_norm NaN when the plan has none */
	bool has_grad_norm;
	double lr, tokens_per_s, ms, compute_ms, comm_ms;
	double feed_ms; /* making or reading this step's batch (rt_feed_fill) */
	double compute_s, comm_s, idle_s;
	/* loss scaling (logged only when on): the scale this step ran with,
	 * whether it was skipped, and the steps skipped so far, this one
	 * included */
	bool has_loss_scale, skipped;
	double loss_scale;
	int64_t skipped_steps;
	/* a mixture of experts' routing this step, over all ranks: per site
	 * (moe_slot call) the choices each expert got (moe_load[site * 2E +
	 * e]) and dropped past its capacity (E on); NULL when not kept */
	const float *moe_load;
	int moe_sites, moe_experts;
	/* bytes this rank's all_to_alls sent to other ranks this step (the
	 * sparse dispatch's only the used rows); -1 when it has no comm */
	int64_t a2a_bytes;
} RtLogStep;

/* The .jsonl log's writes are checked (each line flushed, fsync and
 * fclose at the end): a failure is an error naming the file and strerror,
 * or with warn_only (--log-errors warn) one warning, after which the log
 * is closed and the run goes on without it. */
typedef struct RtLog {
	FILE *jsonl;
	const char *path;
	bool warn_only;
	bool tty, quiet;
	int64_t print_every;
	int64_t first_step;
	double t0;              /* wall clock at the first logged step */
	double last_draw;       /* when the progress line was last redrawn */
	bool progress_open;     /* a \r line is on the terminal */
} RtLog;

int rt_log_open(RtLog *l, const char *path, bool quiet, char *err);
/* 0, or -1 with err when the log cannot be written (see RtLog). */
int rt_log_step(RtLog *l, const RtLogStep *s, char *err);
int rt_log_eval(RtLog *l, int64_t step, double loss, char *err);
int rt_log_close(RtLog *l, char *err);
/* One event line in the .jsonl log (none without one):
 * {"event":EVENT,"checkpoint":CKPT,"step":STEP,"error":WHY}, "step" left
 * out when step < 0 and "error" when why is NULL.  Events:
 * "checkpoint_skipped" (--resume-fallback skipped a damaged checkpoint),
 * "resumed" (the checkpoint and step a --resume-fallback run went on
 * from).  Lines without "loss" are never step lines. */
int rt_log_event(RtLog *l, const char *event, const char *ckpt, int64_t step, const char *why,
		 char *err);
/* Prints "error: ..." on stderr, ending a progress line first.  These and
 * rt_log_line write each line with one write(2), so lines of ranks
 * printing at once never mix. */
void rt_log_error(RtLog *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_log_note(RtLog *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_log_line(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "rank 2", "ranks 0-3", "ranks 0-1, 3" for ranks in increasing order. */
const char *rt_ranks_name(const int *ranks, int n, char *buf, int len);
double rt_now(void);
/* The median of v[0..n) (n >= 1), which it sorts: timings on a shared
 * machine, whose slow spells move a mean. */
double rt_median(double *v, int n);
/* Formats a message into err (RT_ERR_LEN bytes, truncated) and returns -1,
 * so error paths read `return rt_errf(err, "...", ...);`. */
int rt_errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
