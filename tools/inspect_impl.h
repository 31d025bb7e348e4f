/* inspect_impl.h - what tools/inspect.c and inspect_dot.c share: the
 * analysis of one compiled layout (Insp, computed once by inspect.c) and
 * the mesh helpers both print with.
 */
#ifndef DTM_INSPECT_IMPL_H
#define DTM_INSPECT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "passes/fuse.h"
#include "passes/memplan.h"
#include "tools/cost.h"
#include "tools/hw.h"
#include "tools/inspect.h"

/* Above this many ranks the trace has one track pair per stage (its first
 * rank) instead of one per rank. */
#define INSPECT_TRACE_MAX_RANKS 64

typedef struct StageMem {
	int64_t arena[DTM_ARENA_COUNT];
	int64_t peak; /* the arenas: what a rank of the stage allocates */
	int64_t params, grads, master, opt_m, opt_v, opt_mom, opt_other, inputs;
	/* of params, grads, master and optimizer state: the rows past a dim's
	 * global extent that uneven (torch.chunk) shards hold on the rank
	 * shown, padded to equal size for the collectives (ZeRO at a group
	 * size that does not divide dim 0, or uneven_shards) */
	int64_t padding, padding_max; /* max: on the stage's rank with the most */
	/* the activation arena at its fullest point (node act_at): bytes live
	 * there (64-byte aligned, as planned), split into collective/recv
	 * results (gathered: all_gathers of params, ZeRO-3's units) and the
	 * rest; the arena minus live is fragmentation */
	int act_at;
	int64_t act_live, act_comm, act_gathered, act_other;
	int inflight;    /* micro-batches whose activations are live at once */
	int64_t staging; /* overlap copies outside the arenas */
	int nstaging;
	/* the CPU's GEMM staging outside the arenas (runtime/dev_cpu.c): f32
	 * copies of 16-bit operands and results, and a block of a 16-bit
	 * result per pool thread */
	int64_t gemm, gemm_thread;
} StageMem;

typedef CostSpan Span; /* tools/cost.h: an action on the simulated timeline */

typedef struct Insp {
	const InspectOptions *o;
	Arena *a;
	Diag *d;
	IrModule *m;
	const DtmPlan *p;
	const FusePlan *fp; /* the compile's analyses (driver/driver.h) */
	const MemPlan *mp;
	HwProfile hw;
	CostReport cost;
	int64_t world, node_size;
	int pp;          /* the pipeline axis, or -1 */
	int nstages;
	int64_t *rep;    /* per stage: the rank shown */
	StageMem *mem;
	Span **span;     /* per stage, per action */
	double makespan; /* of the simulated timeline */
	double nparams;
	int64_t layers, channels, seq;
	bool reported; /* analyse printed its error (else it ran out of memory) */
	double flops_per_token, mfu;
	/* --dot-scope: per node, drawn in full (else a stub at most); NULL:
	 * every node (inspect_dot_scope) */
	bool *dot_sel;
} Insp;

/* ---- the mesh (inspect.c) ---- */

/* The rank a send goes to, or a recv comes from. */
int64_t inspect_p2p_peer(const DtmPlan *p, int64_t rank, const DtmAction *a);
/* "dp,tp", or "-" for none. */
void inspect_axes_text(const DtmPlan *p, uint32_t axes, char *buf, size_t cap);
/* "pp=0, dp=1, tp=0". */
void inspect_coords_text(const DtmPlan *p, int64_t rank, char *buf, size_t cap);
/* rank's group along axes: "[0 1]", or "[0 2 .. 14] (8)" for big groups. */
void inspect_group_text(const DtmPlan *p, int64_t rank, uint32_t axes, char *buf, size_t cap);
/* Node i is in stage s's program (every node when there is one stage). */
bool inspect_node_in_stage(const Insp *in, int i, int s);

/* ---- DOT (inspect_dot.c) ---- */

/* Parses o->dot_scope against the compiled module into in->dot_sel.  An
 * unknown or empty scope: a one-line error on stderr listing the valid
 * ones, false. */
bool inspect_dot_scope(Insp *in);
/* Writes the graph of --rank's pipeline to path; false after an error. */
bool inspect_write_dot(const Insp *in, const char *path);

#endif
