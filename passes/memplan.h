/* memplan.h - the static memory plan: an arena and an offset per value.
 *
 * Computed by pass_memplan over the final IR and its FusePlan; read by
 * codegen (the Plan's buffer table) and by `dtmc build -v`.  Like the
 * FusePlan it is kept beside the module (the pipeline's `memplan` entry
 * computes it once per compile into passes.h's PassAnalyses), not stored
 * on it, so the IR carries no compiler-only side data and runtime/plan.h
 * stays the runtime's.
 */
#ifndef DTM_MEMPLAN_H
#define DTM_MEMPLAN_H

#include "ir/ir.h"
#include "passes/fuse.h"

/* Where a value's storage lives: one allocation per arena at run time;
 * codegen maps these onto the runtime's DtmArena one for one. */
typedef enum MemPlanArena {
	MEMPLAN_ARENA_PARAM, /* params (persistent) */
	MEMPLAN_ARENA_OPT,   /* optimizer state and master weights (persistent) */
	MEMPLAN_ARENA_GRAD,  /* gradients (live from backward to the update) */
	MEMPLAN_ARENA_ACT,   /* activations and scratch (reused by liveness) */
	MEMPLAN_ARENA_INPUT, /* data fed each step */
	MEMPLAN_ARENA_COUNT
} MemPlanArena;

#define MEMPLAN_ALIGN 64
/* A grad_norm with more operands than one action carries is computed by a
 * chain of actions; its buffer holds the f32 norm at byte 0 and the chain's
 * f64 running sum of squares at this byte offset. */
#define MEMPLAN_GNORM_ACC 8
#define MEMPLAN_GNORM_BYTES 16

typedef struct MemPlanBuf {
	int arena;            /* a MemPlanArena, or -1: the value has no storage */
	int64_t offset, bytes;
	/* The node whose storage this value uses: itself, or for in-place
	 * results and copy-free reshapes the node it aliases; -1 without
	 * storage. */
	int owner;
	/* For an owner, the node whose name, role and placement its storage
	 * carries: itself, or the gradient (grad.P) a chain of in-place
	 * accumulations ends in (passes/accumulate.c), whose persistent
	 * arena the chain's storage is in from its first GEMM on. */
	int ident;
	int live_from, live_to; /* ACT owners: node positions, inclusive */
} MemPlanBuf;

#define MEMPLAN_MAX_STAGES 64

/* What the code generator reads of a node, gathered in pass_memplan's one
 * walk over the module: compact records (and every node's operands, one
 * list after another in MemPlan.opnd) stay in cache where the ~500-byte
 * IrNodes do not, so codegen/plan_build.c reads these instead. */
typedef struct MemPlanNode {
	const char *name;  /* IrNode.name */
	int64_t numel;     /* ir_node_numel */
	int ops, nops;     /* operands: opnd[ops .. ops + nops) */
	int stage, mb;     /* IrNode.stage, IrNode.mb */
	uint8_t op, dtype, role; /* IrOp, IrDtype, IrRole */
	int8_t phase;      /* IrNode.phase */
	uint8_t fl;        /* MEMPLAN_N_* */
} MemPlanNode;

enum {
	MEMPLAN_N_GRAD_NORM = 1 << 0, /* the global grad norm (IR_LINK_GRAD_NORM) */
};

typedef struct MemPlan {
	int n;
	MemPlanBuf *buf;      /* per node */
	int64_t arena_bytes[MEMPLAN_ARENA_COUNT]; /* planned bytes per arena (the
	                                       * largest stage's) */
	/* After the pipeline pass (nodes have a phase) each pp coordinate's
	 * program is planned on its own: offsets are within its stage's
	 * arenas.  nstages = 1 otherwise. */
	int nstages;
	int64_t stage_arena_bytes[MEMPLAN_MAX_STAGES][MEMPLAN_ARENA_COUNT];
	int64_t act_unshared; /* ACT bytes without reuse, for reports */
	/* Per node: its record; the operands of every node. */
	MemPlanNode *node;
	int *opnd;
} MemPlan;

/* Plans every node of m.  Returns false (reported to d) when out of
 * memory or when an alias has no storage to share. */
bool pass_memplan(const IrModule *m, const FusePlan *fp, Arena *a, Diag *d, MemPlan *mp);

/* The interval allocator under the ACT arena, exposed for tests: item i
 * of `bytes` bytes is live over node positions [from[i], to[i]] inclusive;
 * items are placed first-fit by offset (MEMPLAN_ALIGN-aligned) so items
 * live at the same time never overlap.  Writes offsets and returns the
 * peak (aligned), or -1 when out of memory. */
int64_t pass_memplan_pack(int n, const int *from, const int *to, const int64_t *bytes,
                          int64_t *offset);

/* The most micro-batches whose forward activations are live at once in
 * stage `stage`'s program (memory held between a micro-batch's forward
 * and its backward): M for GPipe, at most P for 1F1B; 0 without
 * micro-batches. */
int pass_memplan_inflight(const IrModule *m, const MemPlan *mp, int stage);

/* "param", "opt", "grad", "act", "input". */
const char *pass_memplan_arena_name(int arena);

#endif
