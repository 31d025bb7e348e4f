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

#define RT_ERR_LEN 512
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

static inline float rt_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN instead of rounding to
 * infinity. */
static inline uint16_t rt_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float rt_f16_to_f32(uint16_t h);
uint16_t rt_f32_to_f16(float f);

/* Element i of a float-like buffer of dtype t, as f32 (I32 converted). */
static inline float rt_load_f32(const void *p, DtmDtype t, int64_t i)
{
	switch (t) {
	case DTM_F32: return ((const float *)p)[i];
	case DTM_BF16: return rt_bf16_to_f32(((const uint16_t *)p)[i]);
	case DTM_F16: return rt_f16_to_f32(((const uint16_t *)p)[i]);
	case DTM_I32: return (float)((const int32_t *)p)[i];
	}
	return 0;
}

static inline void rt_store_f32(void *p, DtmDtype t, int64_t i, float v)
{
	switch (t) {
	case DTM_F32: ((float *)p)[i] = v; break;
	case DTM_BF16: ((uint16_t *)p)[i] = rt_f32_to_bf16(v); break;
	case DTM_F16: ((uint16_t *)p)[i] = rt_f32_to_f16(v); break;
	case DTM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	}
}

/* ---- shard layout (exec.c) ---- */

int64_t rt_numel(const DtmBuffer *b);
int64_t rt_global_numel(const DtmBuffer *b);
/* Mesh coordinates of `rank` (row-major over the mesh axes, axis 0
 * major). */
void rt_rank_coords(const DtmPlan *p, int64_t rank, int64_t *coords);
int64_t rt_world_size(const DtmPlan *p);
/* Where this rank's shard starts along each dim of the global tensor
 * (torch.chunk rule: chunk = ceil(n / parts), shard i starts at i*chunk). */
void rt_shard_start(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords,
		    int64_t *start);
/* Row-major global index of each local element, in local row-major order,
 * written to out[0 .. numel).  Walks the local index like an odometer so
 * the cost is O(numel), not O(numel * rank). */
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
 * so no step allocates. */
typedef struct RtGemmScratch {
	float *a, *b, *c;
	int64_t na, nb, nc;
} RtGemmScratch;

/* Elements of A, B and C a GEMM action touches across its batch. */
void rt_gemm_extent(const DtmAction *a, int64_t *na, int64_t *nb, int64_t *nc);
int rt_gemm_reserve(RtGemmScratch *s, const DtmPlan *p, char *err);
void rt_gemm_scratch_free(RtGemmScratch *s);
/* C = alpha op(A) op(B) + beta C for each batch item; 16-bit operands are
 * staged through f32 scratch. */
int rt_cpu_gemm(const DtmAction *a, const DtmBuffer *bufs, void *const *ptrs,
		RtGemmScratch *s, RtPool *pool, char *err);
void rt_blas_set_threads(int n);
const char *rt_blas_name(void);

/* ---- execution (exec.c) ---- */

struct Comm;

typedef struct RtRun {
	const DtmPlan *plan;
	struct Comm *comm;      /* runtime/comm.h; NULL on a one-rank run */
	int stage;
	int64_t rank;
	int64_t coords[DTM_MAX_AXES];
	void *arena[DTM_ARENA_COUNT];
	void **ptr;             /* per buffer: arena base + offset */
	DtmCtx ctx;
	float *scratch;
	RtPool *pool;
	RtGemmScratch gemm;
	bool check_numerics;
	double compute_s, comm_s; /* this step, split by action kind */
	char err[RT_ERR_LEN];
} RtRun;

/* Checks the plan's invariants (ids, offsets inside arenas, shapes that
 * fit their bytes) so a codegen bug is a message, not a wild write. */
int rt_plan_validate(const DtmPlan *p, char *err);
int rt_run_init(RtRun *r, const DtmPlan *p, int64_t rank, int nthreads);
void rt_run_free(RtRun *r);
/* Initial values of every PARAM and OPT_STATE buffer from (seed, name,
 * global element index). */
int rt_run_init_values(RtRun *r, uint64_t seed);
/* One pass over this stage's actions; forward_only runs just the
 * DTM_PHASE_FORWARD ones (evaluation). */
int rt_run_actions(RtRun *r, bool forward_only);
int rt_read_scalar(RtRun *r, int buf, double *out);
int rt_find_buffer(const DtmPlan *p, const char *name);

/* Bytes the most recent rt_run_init allocated for arena a: the tests and
 * `-v` compare it with plan->arena_bytes. */
int64_t dtm_rt_allocated_bytes(int arena);

/* ---- input data (feed.c) ---- */

/* Held-out samples for --eval-every start here, far past any training run. */
#define RT_EVAL_FIRST_SAMPLE (1ull << 40)

typedef struct RtFeed {
	const DtmPlan *plan;
	int kind;               /* DTM_DATA_TOKENS or DTM_DATA_REGRESSION */
	int64_t batch, T;       /* global batch; tokens per sample */
	int64_t *gidx[4];       /* per input: global index of each local element */
	int32_t *row;           /* one token sample (T + 1) */
	float *rx, *ry;         /* one regression sample */
	int64_t cached_row;
	DtmData data;
	DtmRegression reg;
	bool have_data, have_reg;
} RtFeed;

int rt_feed_open(RtFeed *f, const DtmPlan *p, const int64_t *coords, const char *spec,
		 uint64_t seed, char *err);
/* Fills the inputs with samples [first_sample, first_sample + batch). */
int rt_feed_fill(RtFeed *f, void *const *ptr, uint64_t first_sample, char *err);
void rt_feed_close(RtFeed *f);
/* --dump-batches: writes this rank's input buffers as they are now to
 * DIR/step_%06lld.safetensors, one tensor per input named as the input
 * (tokens, targets or x, y), so an oracle can train on exactly the data
 * dtm saw.  Single rank only (the local buffers are the global batch). */
int rt_feed_dump(const RtFeed *f, void *const *ptr, const char *dir, int64_t step, char *err);

/* ---- checkpoints (save.c, over runtime/ckpt.h) ---- */

typedef struct RtCkptMeta {
	int64_t step;
	uint64_t seed;
	int64_t lr_decay_steps; /* the schedule's horizon, so a resume keeps it */
} RtCkptMeta;

/* Writes every named PARAM and OPT_STATE buffer plus metadata as DIR's
 * checkpoint of step m->step. */
int rt_ckpt_save(const RtRun *r, const char *dir, const RtCkptMeta *m, char *err);
/* Loads DIR's latest checkpoint into the PARAM and OPT_STATE buffers
 * (any dtype converts; a whole tensor is sliced to this rank's shard). */
int rt_ckpt_load(RtRun *r, const char *dir, RtCkptMeta *m, char *err);

/* ---- logging (log.c) ---- */

typedef struct RtLogStep {
	int64_t step, steps;
	double loss, grad_norm; /* grad_norm NaN when the plan has none */
	bool has_grad_norm;
	double lr, tokens_per_s, ms, compute_ms, comm_ms;
} RtLogStep;

typedef struct RtLog {
	FILE *jsonl;
	bool tty, quiet;
	int64_t print_every;
	int64_t first_step;
	double t0;              /* wall clock at the first logged step */
	double last_draw;       /* when the progress line was last redrawn */
	bool progress_open;     /* a \r line is on the terminal */
} RtLog;

int rt_log_open(RtLog *l, const char *path, bool quiet, char *err);
void rt_log_step(RtLog *l, const RtLogStep *s);
void rt_log_eval(RtLog *l, int64_t step, double loss);
void rt_log_close(RtLog *l);
/* Prints "error: ..." on stderr, ending a progress line first. */
void rt_log_error(RtLog *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_log_note(RtLog *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double rt_now(void);
/* Formats a message into err (RT_ERR_LEN bytes, truncated) and returns -1,
 * so error paths read `return rt_errf(err, "...", ...);`. */
int rt_errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
