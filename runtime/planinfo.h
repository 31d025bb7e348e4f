/* planinfo.h - pure functions of a plan, the runtime's public interface to
 * the tools: what `dtmc inspect` reads of a plan without running anything
 * (global sizes, a stage's view, the overlap thread's hazards and staging
 * copies, which runtime/overlap.c runs).  Implemented in planinfo.c, which
 * needs nothing else of the runtime, so dtmc links none of the executor.
 */
#ifndef DTM_RT_PLANINFO_H
#define DTM_RT_PLANINFO_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/plan.h"

/* The words a model writes for the plan's train settings ("adamw",
 * "cosine", "1f1b"); "?" for a value out of range. */
const char *rt_optimizer_name(DtmOptimizer o);
const char *rt_lr_schedule_name(DtmLrSchedule s);
const char *rt_pipe_schedule_name(DtmPipeSchedule s);

/* The elements of b's unsharded (global) shape. */
int64_t rt_global_numel(const DtmBuffer *b);
/* The one-stage plan that stage `stage` of a pipelined plan runs: that
 * stage's actions, arenas, inputs, loss and grad norm, with p->stage set
 * (buffers of other stages stay in the table); a copy of p otherwise. */
void rt_plan_stage_view(const DtmPlan *p, int stage, DtmPlan *view);

/* ---- the overlap thread's hazards ---- */

/* The arena bytes [lo, hi) an action reads, or reads and writes. */
typedef struct RtRange {
	int arena;
	int64_t lo, hi;
	bool write;
} RtRange;

#define RT_ACCESS_MAX DTM_MAX_ARGS
typedef struct RtAccess {
	int n;
	RtRange r[RT_ACCESS_MAX];
} RtAccess;

/* What action a touches, from its buffers' planned offsets: GEMMs read A
 * and B and write C; kernels count every argument as written (some update
 * state in place); collectives read args[0] and write the rest (args[0]
 * as well when it is the only one); sends read, receives write. */
void rt_access_of(const DtmPlan *p, const DtmAction *a, RtAccess *out);
/* Must `later` wait for `earlier`: some range of one overlaps a range of
 * the other in the same arena, and one of the two writes it (RAW, WAR,
 * WAW; two reads never conflict). */
bool rt_access_conflict(const RtAccess *earlier, const RtAccess *later);
/* Index of the newest of pending[0 .. npending) (oldest first) that next
 * conflicts with, or -1: waiting for it covers the older ones, since the
 * communication thread completes them in order. */
int rt_hazard_newest(const RtAccess *pending, int npending, const RtAccess *next);
/* Which of the actions acts[0 .. n) the communication thread runs on a
 * copy of their input, taken when queued: stage[i] is set for a
 * collective (out of place) or send on stream 1 whose input a later kernel
 * or GEMM overwrites before any action reads or writes its output (and
 * before a WAIT or stream-0 communication).  Returns how many. */
int rt_overlap_staging(const DtmPlan *p, const DtmAction *acts, int n, bool *stage);
/* The input a queued communication action only reads (in), apart from the
 * rest of what it touches; false when there is none to copy aside (in
 * place, receives, stream 0, which is waited for at once). */
bool rt_overlap_split_input(const DtmPlan *p, const DtmAction *a, RtAccess *in,
                            RtAccess *rest);

/* Bytes of the input copies rt_overlap_staging asks for in stage st
 * (outside the arenas), and in *count how many actions. */
int64_t rt_overlap_staging_bytes(const DtmPlan *p, const DtmStage *st, int *count);

/* ---- the CPU's GEMMs: their blocks and staging (runtime/dev_cpu.c runs
 * them; inspect reports the staging) ---- */

/* Elements of A, B and C a GEMM action touches across its batch. */
void rt_gemm_extent(const DtmAction *a, int64_t *na, int64_t *nb, int64_t *nc);
/* How rt_cpu_gemm cuts each GEMM item: nblocks blocks of ext rows of C
 * (columns when !rows; the last block shorter), from the shape alone. */
typedef struct RtGemmSplit {
	bool rows;
	int64_t ext, nblocks;
} RtGemmSplit;
void rt_gemm_split(int64_t m, int64_t n, int64_t k, RtGemmSplit *sp);
/* The f32 elements one GEMM action stages on operands of dtypes ta, tb, tc
 * (bf16_native: oneDNN takes bf16 operands as they are): need[0], need[1]
 * A and B widened whole; need[2] all of C, for a batch accumulating into
 * one 16-bit C; need[3] one block of any other 16-bit C, for each of the
 * pool's threads. */
void rt_gemm_need(const DtmAction *a, DtmDtype ta, DtmDtype tb, DtmDtype tc, bool bf16_native,
		  int64_t need[4]);
/* The most any GEMM of the plan needs, each of the four. */
void rt_gemm_plan_need(const DtmPlan *p, bool bf16_native, int64_t need[4]);

#endif
