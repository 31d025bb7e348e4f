/* ir.h - dtm's IR: an SSA graph of tensor ops with placements.
 *
 * A module holds the mesh, the training configuration, the choose() sweep
 * points and a list of nodes in topological order.  Each node produces one
 * value (its dtype, shape, placement and role live on the node), so "node"
 * and "value" are the same thing and operands are node ids.
 *
 * Before `partition` shapes are global; after it they are per-rank shard
 * shapes and collectives are ordinary nodes naming mesh axes.
 */
#ifndef DTM_IR_H
#define DTM_IR_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "support/arena.h"
#include "support/diag.h"
#include "support/invariant.h"

#define IR_MAX_RANK 8   /* tensor rank */
#define IR_MAX_AXES 8   /* mesh axes */
#define IR_MAX_INTS 8   /* integer attributes per node */
/* Beyond IR_MAX_NODES nodes a program is refused.  A compile costs some
 * 1.5 KB of memory per node (tests/cost/published.sh's GPT, all passes and
 * the plan), so the default cap is ~6 GB; a build may set its own
 * (-DIR_MAX_NODES=N in CFLAGS) for the programs beyond it, e.g. the 1T-
 * parameter row of tests/cost/megatron_sc21.rows (512 micro-batches x 128
 * layers, ~11M nodes). */
#ifndef IR_MAX_NODES
#define IR_MAX_NODES (1 << 22)
#endif
#define IR_MAX_ELEMS ((int64_t)1 << 48) /* elements in one tensor */

typedef enum IrOp {
#define IR_OP(e, name, mn, mx, ak, fl) IR_OP_##e,
#include "ir/ops.def"
#undef IR_OP
	IR_OP_COUNT
} IrOp;

enum {
	OPF_LEAF = 1 << 0,
	OPF_ELEMWISE = 1 << 1,
	OPF_UNARY = 1 << 2,
	OPF_BINARY = 1 << 3,
	OPF_REDUCE = 1 << 4,
	OPF_COLL = 1 << 5,
	OPF_INPLACE = 1 << 6, /* the result aliases operand 0 (updates, accumulations) */
	OPF_LOCAL = 1 << 7,   /* per-rank: only after partition (see ops.def) */
};

/* An op's attribute family (ops.def's attr_kind): which member of IrAttr
 * it carries, and how the text form writes it. */
typedef enum IrAttrKind {
	IR_ATTR_NONE,
	IR_ATTR_INIT,    /* param, state */
	IR_ATTR_SCALAR,  /* const, scale */
	IR_ATTR_AXES,    /* sum, mean, max, max_bwd */
	IR_ATTR_AXIS,    /* softmax, log_softmax, concat and their backwards */
	IR_ATTR_EPS,     /* layernorm, rmsnorm and their backwards */
	IR_ATTR_PERM,    /* permute */
	IR_ATTR_SLICE,   /* slice, pad */
	IR_ATTR_ATTN,    /* attention, attention_bwd */
	IR_ATTR_DROPOUT, /* dropout */
	IR_ATTR_COLL,    /* collectives and the per-rank ops over a group */
	IR_ATTR_OPTIM,   /* adamw_step, sgd_step */
	IR_ATTR_ROPE,    /* rope */
	IR_ATTR_ROUTE,   /* topk, one_hot, moe_slot, moe_token */
	IR_ATTR_KIND_COUNT
} IrAttrKind;

typedef enum IrDtype { IR_F32, IR_BF16, IR_F16, IR_I32, IR_DTYPE_COUNT } IrDtype;

typedef enum IrRole {
	IR_ROLE_ACT,      /* an intermediate value */
	IR_ROLE_PARAM,
	IR_ROLE_INPUT,
	IR_ROLE_LOSS,
	IR_ROLE_GRAD,
	IR_ROLE_OPT_STATE,
	IR_ROLE_COUNT
} IrRole;

typedef enum IrInit {
	IR_INIT_NONE, IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_NORMAL, IR_INIT_UNIFORM
} IrInit;

typedef enum IrRed { IR_RED_SUM, IR_RED_AVG, IR_RED_MAX, IR_RED_COUNT } IrRed;

/* ---- attributes: a tagged union, one member per IrAttrKind ---- */

typedef struct IrAttrInit {
	IrInit kind;
	union {
		struct { double mean, std; }; /* normal */
		struct { double lo, hi; };    /* uniform */
		double arg[2];
	};
} IrAttrInit;

typedef struct IrAttrScalar {
	double value; /* const: the value; scale: the factor */
} IrAttrScalar;

typedef struct IrAttrAxes {
	int n;
	int64_t axes[IR_MAX_INTS]; /* the reduced dims, sorted, unique */
	bool keepdims;
} IrAttrAxes;

typedef struct IrAttrAxis {
	int64_t axis; /* non-negative */
} IrAttrAxis;

typedef struct IrAttrEps {
	double eps;
} IrAttrEps;

typedef struct IrAttrPerm {
	int n;
	int64_t perm[IR_MAX_INTS]; /* output dim i = input dim perm[i] */
} IrAttrPerm;

typedef struct IrAttrSlice {
	int64_t axis, start, end; /* [start, end) along axis */
} IrAttrSlice;

/* attention's mask and head grouping (ir/ops.def).  Zero-initialised
 * fields mean plain multi-head attention without a window. */
typedef struct IrAttrAttn {
	int64_t heads;
	int64_t causal;   /* 0 or 1 (IR text may say otherwise; ir_infer refuses it) */
	int64_t kv_heads; /* k, v's heads (grouped-query); 0 = heads */
	int64_t window;   /* keys within window positions of the query; 0 = all */
	/* partition's: the query heads are split over these mesh axes while k
	 * and v stay whole, so this rank's first query head is heads times its
	 * position in the group (dtmk_group_index's order: mesh order, the
	 * axes of head_minor, a subset, last; Ulysses' split (tp, cp) on a
	 * mesh (cp, tp)); 0 = none */
	uint32_t head_axes, head_minor;
	/* ring attention's blocks (ops.def): the group the sequence is split
	 * over, and the ring step (the key block is the rank's minus it) */
	uint32_t ring;
	int64_t step;
	/* causal load balancing (part_ring): each block of T rows is two
	 * chunks of T/2, group member i's chunks 2i and 2N-1-2i of the 2N */
	int64_t balanced;
	/* ring blocks on a sequence their group does not divide (uneven,
	 * padded shards: each block ceil(seq / N) rows, the tail's padding
	 * last): the global length; keys at or past it are padding that no
	 * query sees.  0 = the blocks tile the sequence */
	int64_t seq;
	/* pass attn_stats (passes/attn_stats.c): on attention, its result's
	 * storage also holds each row's log-sum-exp of the scaled scores (f32,
	 * [batch, heads, seq], after the result's numel elements: ir_attn_lse_at),
	 * -inf where a row attends nothing; on attention_bwd, its last operand
	 * is that attention (ir_attn_bwd_y), whose rows' statistics it reads */
	int64_t lse;
} IrAttrAttn;

/* The number of k, v heads of a (kv_heads, or heads when 0). */
static inline int64_t ir_attn_kv_heads(const IrAttrAttn *a)
{
	return a->kv_heads ? a->kv_heads : a->heads;
}

/* ir/dropout.c says how the mask is keyed. */
typedef struct IrAttrDropout {
	double rate;
	int64_t salt;  /* the dropout site */
	/* a micro-batch's copy (passes/microbatch.c): micro-batch mb of mbs,
	 * the batch dim bdim, binner elements per batch row */
	bool has_mb;
	int64_t mbs, mb, bdim, binner;
} IrAttrDropout;

typedef struct IrAttrColl {
	uint32_t axes; /* the group: bit i = mesh axis i */
	IrRed red;     /* all_reduce, reduce_scatter (sum for the rest) */
	int n;         /* how many of args the op has (the text lists them) */
	union {
		int64_t args[IR_MAX_INTS];
		int64_t dim;   /* all_gather, reduce_scatter, shard_slice */
		int64_t root;  /* broadcast: the group member */
		/* send, recv: ranks along the axes; args[1] (mirror, when n is
		 * 2 and it is 1): to and from member (shift - g) mod n instead */
		int64_t shift;
		/* all_to_all; rows (args[2], when n is 3 and it is > 0): the
		 * sparse form, only each slab's leading rows along that dim up
		 * to its last non-zero one travel (runtime/comm.c,
		 * comm_all_to_all_rows: dispatched tokens, the rest of each
		 * expert's capacity empty) */
		struct { int64_t split, concat, rows; } a2a;
		struct { int64_t dim, size, low; } pad; /* pad_mask, ops.def */
	};
} IrAttrColl;

/* torch.optim's hyperparameters but the learning rate (the runtime's). */
typedef struct IrAttrOptim {
	double beta1, beta2, eps;  /* adamw_step */
	double momentum;           /* sgd_step: 0 = none */
	bool nesterov;             /* sgd_step */
	double weight_decay, clip; /* clip 0 = off */
	bool master;               /* an f32 master operand is present */
} IrAttrOptim;

/* rope (ops.def): heads of D, the base theta; inverse rotates by -angle
 * (the backward); axes: the mesh axes the position dim T is split over
 * (partition sets it: a rank's positions start at its shard's offset). */
typedef struct IrAttrRope {
	int64_t heads;
	double theta;
	bool inverse;
	uint32_t axes;
} IrAttrRope;

/* The routing ops (ops.def): topk's k; one_hot's classes n; moe_slot's and
 * moe_token's experts n and capacity per expert and group. */
typedef struct IrAttrRoute {
	int64_t k, n, capacity;
	/* moe_slot: its routing site (1, 2, ... as the model calls it; 0 =
	 * none: a recompute clone), whose expert load the runtime logs; and
	 * the mesh axes it is replicated over (partition sets them: only the
	 * ranks at coordinate 0 on them count, so each choice counts once) */
	int64_t stats;
	uint32_t replicas;
} IrAttrRoute;

/* A node's attributes: kind says which member is valid (the node's op's
 * IrAttrKind), the accessors below assert it (debug builds).  Stored out
 * of line (IrNode.attr), immutable once a node points at it, so copies of
 * a node share it; a pass that changes one writes a fresh copy
 * (ir_attr_*_mut). */
typedef struct IrAttr {
	IrAttrKind kind;
	union {
		IrAttrInit init;
		IrAttrScalar scalar;
		IrAttrAxes axes;
		IrAttrAxis axis;
		IrAttrEps eps;
		IrAttrPerm perm;
		IrAttrSlice slice;
		IrAttrAttn attn;
		IrAttrDropout dropout;
		IrAttrColl coll;
		IrAttrOptim optim;
		IrAttrRope rope;
		IrAttrRoute route;
	};
} IrAttr;

/* A placement, per tensor dim: the ordered mesh axes that split it (major
 * first); plus the axes over which the value is a pending reduction.
 * Mesh axes not named anywhere are replicated.  ndims == 0 with known ==
 * false means "not decided yet" (propagation fills it in). */
typedef struct Placement {
	bool known;
	uint8_t ndims;
	uint8_t naxes[IR_MAX_RANK];
	uint8_t axes[IR_MAX_RANK][IR_MAX_AXES];
	uint32_t partial;  /* bitmask of mesh axes */
	IrRed partial_op;
} Placement;

/* The placements of a module's values, interned (hash-consed): each
 * distinct placement once, in canonical form (nothing past ndims or a
 * dim's naxes, partial_op SUM when nothing is partial), v[0] the one not
 * known.  A node holds its placement's id, so two values are placed alike
 * exactly when their ids are equal.  The modules a pass builds from
 * another share its table (ir_module_derive); a clone copies it.  A
 * pointer ir_place gives stays valid, its placement unchanged, while the
 * table's arena lives (growing copies, never frees).  Not safe to intern
 * into from two threads. */
typedef struct IrPlaces {
	Arena *arena;
	Placement *v;   /* [n]: by id */
	uint32_t *h;    /* [n]: each one's hash */
	uint32_t n, cap;
	uint32_t *slot; /* open addressing: an id, 0 empty */
	uint32_t nslot; /* a power of two */
	bool oom;       /* an intern ran out of memory (the verifier says so) */
} IrPlaces;

typedef struct Mesh {
	int naxes;
	const char *names[IR_MAX_AXES];
	int64_t sizes[IR_MAX_AXES];
} Mesh;

/* What part of a training step a node belongs to (passes/pipeline.c sets
 * it; before, it follows from the node order: up to the loss, forward). */
enum { IR_PHASE_FORWARD, IR_PHASE_BACKWARD, IR_PHASE_OPTIMIZER };

/* A node: what every pass needs of a value, nothing else (the facts one
 * pass decides are annotations beside the nodes, the module's tables;
 * attributes are out of line).  The fields every walk reads come first:
 * op, operands, placement, in the first 64-byte line; the shape fills the
 * second.  op, dtype and role are enum bit-fields, so switches over them
 * still check their cases. */
typedef struct IrNode {
	int id;             /* index in IrModule.nodes; printed as %id */
	IrOp op : 8;
	IrDtype dtype : 8;
	signed int rank : 8;
	IrRole role : 8;
	int nops;
	uint32_t place;     /* the placement's id in the module's table
	                     * (ir_place), 0: not decided yet */
	int *ops;           /* operand node ids, all < id */
	const char *name;   /* param/input path, or the user's variable; may be NULL */
	const IrAttr *attr; /* by the op's IrAttrKind (ir_attr_*); NULL: none,
	                     * or all zero */
	SrcLoc loc;
	int64_t shape[IR_MAX_RANK];
} IrNode;
_Static_assert(sizeof(IrNode) <= 128, "IrNode: two cache lines at most (ir.h)");
_Static_assert(IR_OP_COUNT <= 128 && IR_DTYPE_COUNT <= 128 && IR_ROLE_COUNT <= 128,
               "IrNode's op, dtype and role bit-fields hold every value");

/* A choose(spec, ...) sweep point: the node whose placement it sets, the
 * options, and the one in force (the first by default). */
typedef struct IrChoose {
	int node;
	int nopts;
	Placement *opts;
	int selected;
	SrcLoc loc;
} IrChoose;

/* The train settings, one per IrTrain member (train.def). */
typedef enum IrTrainField {
#define IR_TRAIN(e, member, kind, line, range, lo, hi) IR_TRAIN_##e,
#include "ir/train.def"
#undef IR_TRAIN
	IR_TRAIN_COUNT
} IrTrainField;

/* The word settings, by their words' order in ir/validate.c (the text
 * form and the train section spell them; ir_train_word).  0: not given,
 * printed as none (what a zeroed IrTrain holds; each consumer says what
 * it takes then). */
typedef enum IrOptimizer { IR_OPTIMIZER_NONE, IR_OPTIMIZER_ADAMW, IR_OPTIMIZER_SGD } IrOptimizer;
typedef enum IrLrSchedule { IR_LR_NONE, IR_LR_CONSTANT, IR_LR_COSINE } IrLrSchedule;
typedef enum IrLossScale {
	IR_LOSS_SCALE_NONE,
	IR_LOSS_SCALE_DYNAMIC,
	IR_LOSS_SCALE_FIXED,
	IR_LOSS_SCALE_OFF,
} IrLossScale;
typedef enum IrContextParallel {
	IR_CP_NONE, /* choose (ir_train_context_parallel) */
	IR_CP_ULYSSES,
	IR_CP_RING,
} IrContextParallel;
typedef enum IrRecomputeScope {
	IR_RECOMPUTE_READ, /* none: what the backward reads */
	IR_RECOMPUTE_LAYER,
} IrRecomputeScope;
typedef enum IrPipeSchedule {
	IR_PIPE_NONE,
	IR_PIPE_GPIPE,
	IR_PIPE_1F1B,
	IR_PIPE_INTERLEAVED,
	IR_PIPE_ZB,
} IrPipeSchedule;

/* The train { ... } section.  Strings are arena-owned; unset numbers are
 * their defaults (ir_train_defaults). */
typedef struct IrTrain {
	IrOptimizer optimizer;
	double lr, beta1, beta2, eps, weight_decay, clip, momentum;
	bool nesterov;
	IrLrSchedule lr_schedule;
	int64_t warmup;
	double min_lr;
	int zero;                /* 0..3 */
	uint32_t zero_axes;      /* mesh axes the ZeRO state is split over */
	bool reshard_after_forward;
	int64_t microbatches;
	IrPipeSchedule schedule; /* the pipeline schedule */
	int64_t virtual_stages;  /* for interleaved(v) */
	IrDtype precision;       /* param_dtype: IR_F32 | IR_BF16 | IR_F16 */
	IrDtype reduce_dtype;    /* gradients' accumulation and reduction: f32 or precision */
	IrDtype master_dtype;    /* the optimizer's weights: f32 or precision (no master) */
	int64_t steps;
	const char *data;        /* "synthetic" or a path */
	bool sequence_parallel;
	bool recompute;
	bool uneven_shards;
	int64_t bucket_bytes;
	int64_t prefetch;
	int64_t seed;
	/* loss scaling (ir_train_loss_scale resolves none) */
	IrLossScale loss_scale;
	double init_scale, growth_factor, backoff_factor;
	int64_t growth_interval;
	IrContextParallel context_parallel;
	IrRecomputeScope recompute_scope;
	/* where each setting was given (the .dtm's value, `<command line>`
	 * for --train, the IR text's value; none: the default), for the
	 * errors of checks that read several settings or the program; not
	 * part of the text form */
	SrcLoc loc[IR_TRAIN_COUNT];
} IrTrain;

/* What a node is to a param beyond being computed from it: its gradient
 * (passes/autodiff.c), its optimizer state (passes/optim.c), with the param
 * a link names (IrModule.link_param); or the global gradient norm
 * (passes/optim.c).  Names say the same to people and to checkpoints
 * ("grad.P", "opt.m.P", "grad_norm"), but no pass decides by a name: the
 * IR text parser, which has only the names, is the one reader of them
 * (ir/parse.c), and the verifier checks every link. */
typedef enum IrLink {
	IR_LINK_NONE = -1,
	IR_LINK_GRAD,       /* the gradient of the param (grad.P) */
	IR_LINK_OPT_M,      /* AdamW's first moment of it (opt.m.P) */
	IR_LINK_OPT_V,      /* AdamW's second moment (opt.v.P) */
	IR_LINK_OPT_MOM,    /* SGD's momentum buffer (opt.mom.P) */
	IR_LINK_OPT_MASTER, /* its f32 master copy (opt.master.P) */
	IR_LINK_GRAD_NORM,  /* the global gradient norm ("grad_norm"), no param */
	IR_LINK_COUNT
} IrLink;
/* The name's word for an optimizer state's link (opt.WORD.P), NULL for
 * the others; IR_LINK_NONE for a word that is none. */
const char *ir_link_state_word(IrLink k);
IrLink ir_link_state_lookup(const char *word, size_t len);

/* ---- annotations: what passes decide about nodes, beside the nodes ----
 * A table by node id, allocated when the pass that owns it first writes
 * one (v NULL until then), v[id] for id < cap, the default past it: -1
 * for the ints, no location, no padding, no label.  ir_node_new gives a
 * node the defaults, ir_node_copy the source's, a clone copies the
 * tables; read and written through ir_stage(m, n), ir_set_stage(m, n, v)
 * and the like (the module's annotations section). */
typedef struct IrInts {
	int *v;
	int cap;
} IrInts;
typedef struct IrLocs {
	SrcLoc *v;
	int cap;
} IrLocs;
/* Few nodes hold padded dims: a row index per node (0: none) into rows,
 * each the global extents per dim. */
typedef struct IrPads {
	int *row;
	int cap;
	int64_t (*rows)[IR_MAX_RANK]; /* rows[0] unused */
	int nrows, caprows;
} IrPads;
typedef struct IrStrs {
	const char **v;
	int cap;
} IrStrs;

/* The nodes [first, end) that one iteration of a `for ... stage EXPR` loop
 * lowered, and where EXPR is: passes/pipeline.c reports stage annotations
 * against the data flow there.  Kept by lowering only (not part of the
 * text form, not renumbered by passes: read by "stages", the first). */
typedef struct IrStageNote {
	int first, end;
	SrcLoc loc;
} IrStageNote;

typedef struct IrModule {
	Arena *arena;
	const char *name;
	Mesh mesh;
	IrPlaces *places; /* the nodes' placements, by id (ir_place) */
	IrTrain train;
	IrNode **nodes;
	int nnodes, cap;
	IrChoose *chooses;
	int nchooses, capchooses;
	int loss;          /* node id of the loss, or -1 */
	/* The last pass of the pipeline that ran on the module (its name in
	 * passes/passes.c), NULL as lowered.  pass_run_until goes on after it,
	 * so IR text printed after a pass (which says `after NAME`) is fed
	 * back where it left off; after_loc is that line's location. */
	const char *after;
	SrcLoc after_loc;
	/* Parsed from IR text: its annotations (stage, mb, block, phase, role)
	 * are the text's, not what a pass derived (see pass_fault). */
	bool from_text;
	/* The model's attention layers and their width (q's last dim), counted
	 * on the global program as lowered (ir_count_attention), before any
	 * pass unrolls micro-batches or splits stages and shapes: inspect's
	 * 6LCT term.  -1 until counted. */
	int64_t attn_layers, attn_width;
	/* The mesh axis the pipeline runs along, whatever its size (the axis
	 * named pp: frontend/lower_mesh.c decides, the IR text parser reads
	 * it so); -1: none.  Passes find the pipeline by it, never by a name. */
	int pp_axis;
	IrStageNote *stage_notes; /* in the order their iterations ended */
	int nstage_notes, capstage_notes;
	/* Out of memory for an attribute or annotation: the verifier
	 * reports it (attribute writes went to sink meanwhile). */
	bool oom;
	IrAttr sink;

	/* ---- annotations, each named for the pass that decides it ---- */
	/* The pipeline model chunk: lowering (a `stage` annotation) and
	 * passes/stages.c; after passes/pipeline.c, the pp coordinate whose
	 * program holds the node.  Derived nodes inherit it.  -1: none. */
	IrInts stage;
	/* The micro-batch: passes/microbatch.c.  -1: none. */
	IrInts mb;
	/* IR_PHASE_*: passes/pipeline.c.  -1 before. */
	IrInts phase;
	/* The outermost block instance lowering inlined the node from
	 * (frontend/lower.c; layer.3: the 4th call of any block at top level),
	 * -1 outside blocks; passes/recompute.c recomputes by it.  What passes
	 * derive from a node inherits it: the backward of a forward node, a
	 * param's grad, optimizer state and update, the collectives and
	 * send/recv of a value (a bucket over several blocks: -1); inspect's
	 * DOT clusters by it. */
	IrInts block;
	/* A param's FSDP unit (passes/fsdp_units.c): the block instance whose
	 * call declared it, the innermost (frontend/lower.c; an inner block's
	 * params are its own unit inside the outer one's block), -1 outside
	 * blocks; partition keeps it.  The IR text has no syntax for it: the
	 * parser gives the params of one name prefix (layer.3.) one unit. */
	IrInts unit;
	/* The choose() point setting the node's placement, an index into
	 * chooses: frontend/lower_mesh.c (ir_choose_add).  -1: none. */
	IrInts choose;
	/* Where the placement came from: passes/propagate.c (the node it was
	 * propagated from, or -1 for a user annotation at place_loc, which
	 * frontend/lower_mesh.c sets; no file: not known).  Printed as
	 * "from %N" / "from "file":l:c-e". */
	IrInts place_from;
	IrLocs place_loc;
	/* After passes/partition.c, per dim: the global extent of a dim whose
	 * shards are padded (uneven torch.chunk shards: every rank stores
	 * ceil(n / parts) rows and the rows past n are zero), or 0 where the
	 * global extent is the local one times the parts.  Printed as "of
	 * [global shape]". */
	IrPads padded;
	/* For people only (dtmc inspect, label.c), where the name cannot say
	 * it: the value a nameless node holds in the source's terms, as
	 * passes/autodiff.c labels a gradient term "grad.layer.0.x" and
	 * passes/recompute.c a clone of h "h".  No pass decides anything by
	 * it, and it is not part of the text form.  NULL: the name, or the
	 * expression. */
	IrStrs label;
	/* IrLink: what the node is to a param, or the grad norm; the param's
	 * node (its gradient: passes/autodiff.c; its optimizer state, and the
	 * grad norm, with no param: passes/optim.c).  Passes that renumber
	 * nodes map link_param as they map operands.  -1: none. */
	IrInts link;
	IrInts link_param;
} IrModule;

/* ---- annotations (annot.c): the tables above, by node ---- */
static inline int ir_int_at(const IrInts *t, int id)
{
	return id < t->cap ? t->v[id] : -1;
}
/* Sets t[id] = v, making room (defaults) as needed; false when out of
 * memory (m->oom set). */
bool ir_int_grow_set(IrModule *m, IrInts *t, int id, int v);
static inline bool ir_int_set(IrModule *m, IrInts *t, int id, int v)
{
	if (id < t->cap) {
		t->v[id] = v;
		return true;
	}
	return v == -1 || ir_int_grow_set(m, t, id, v);
}

#define IR_ANNOT_INT(name)                                                      \
	static inline int ir_##name(const IrModule *m, const IrNode *n)            \
	{                                                                           \
		return ir_int_at(&m->name, n->id);                                      \
	}                                                                           \
	static inline bool ir_set_##name(IrModule *m, const IrNode *n, int v)      \
	{                                                                           \
		return ir_int_set(m, &m->name, n->id, v);                               \
	}
IR_ANNOT_INT(stage)
IR_ANNOT_INT(mb)
IR_ANNOT_INT(phase)
IR_ANNOT_INT(block)
IR_ANNOT_INT(unit)
IR_ANNOT_INT(choose)
IR_ANNOT_INT(place_from)
IR_ANNOT_INT(link_param)
#undef IR_ANNOT_INT

static inline IrLink ir_link(const IrModule *m, const IrNode *n)
{
	return (IrLink)ir_int_at(&m->link, n->id);
}
/* n becomes kind k of param (IR_LINK_NONE: no link; param -1 for the grad
 * norm).  False when out of memory. */
bool ir_set_link(IrModule *m, const IrNode *n, IrLink k, int param);

static inline SrcLoc ir_place_loc(const IrModule *m, const IrNode *n)
{
	return n->id < m->place_loc.cap ? m->place_loc.v[n->id] : (SrcLoc){0};
}
bool ir_place_loc_grow_set(IrModule *m, const IrNode *n, SrcLoc loc);
static inline bool ir_set_place_loc(IrModule *m, const IrNode *n, SrcLoc loc)
{
	if (n->id < m->place_loc.cap) {
		m->place_loc.v[n->id] = loc;
		return true;
	}
	return ir_place_loc_grow_set(m, n, loc);
}
/* Dim d's padded global extent (0: not padded). */
static inline int64_t ir_padded(const IrModule *m, const IrNode *n, int d)
{
	int r = n->id < m->padded.cap ? m->padded.row[n->id] : 0;
	return r && d >= 0 && d < IR_MAX_RANK ? m->padded.rows[r][d] : 0;
}
/* Whether any dim of n is padded. */
bool ir_any_padded(const IrModule *m, const IrNode *n);
bool ir_set_padded(IrModule *m, const IrNode *n, int d, int64_t g);
static inline const char *ir_label(const IrModule *m, const IrNode *n)
{
	return n->id < m->label.cap ? m->label.v[n->id] : NULL;
}
bool ir_label_grow_set(IrModule *m, const IrNode *n, const char *label);
static inline bool ir_set_label(IrModule *m, const IrNode *n, const char *label)
{
	if (n->id < m->label.cap) {
		m->label.v[n->id] = label;
		return true;
	}
	return !label || ir_label_grow_set(m, n, label);
}
/* Node dst_id of dst takes every annotation of node src_id of src (which
 * may be dst). */
void ir_annots_copy(IrModule *dst, int dst_id, const IrModule *src, int src_id);
/* Node id of m gets the defaults (its slot may hold another's). */
void ir_annots_reset(IrModule *m, int id);
/* c's tables become copies of m's, in a (ir_module_clone); false when
 * out of memory. */
bool ir_annots_clone(Arena *a, IrModule *c, const IrModule *m);

/* ---- op table ---- */
const char *ir_op_name(IrOp op);
int ir_op_min_operands(IrOp op);
int ir_op_max_operands(IrOp op); /* -1 = variadic */
IrAttrKind ir_op_attr_kind(IrOp op);
unsigned ir_op_flags(IrOp op);
bool ir_op_lookup(const char *name, IrOp *out);
/* An optimizer-phase update of a persistent value in place (adamw_step,
 * sgd_step, assign): OPF_INPLACE but matmul_wgrad_acc, which accumulates a
 * backward value.  The first of them starts the optimizer phase. */
static inline bool ir_op_is_update(IrOp op)
{
	return (ir_op_flags(op) & OPF_INPLACE) && op != IR_OP_MATMUL_WGRAD_ACC;
}

const char *ir_dtype_name(IrDtype t);
bool ir_dtype_lookup(const char *name, IrDtype *out);
int ir_dtype_size(IrDtype t);
/* The dtype two float operands of different dtypes compute in (torch's
 * type promotion): the wider one, which for two different float dtypes
 * is always f32. */
IrDtype ir_dtype_promote(IrDtype a, IrDtype b);
/* The dtype a gradient's sum of t values is stored in (matmul_wgrad,
 * sum_to, the norms' gamma gradients: ops.def): f32 for bf16 and f16,
 * whose f32 accumulator is kept unrounded; t otherwise. */
IrDtype ir_dtype_accum(IrDtype t);
const char *ir_role_name(IrRole r);
bool ir_role_lookup(const char *name, IrRole *out);
const char *ir_red_name(IrRed r);
bool ir_red_lookup(const char *name, IrRed *out);
const char *ir_init_name(IrInit i);

/* Writes a type as "f32[8, 32]" (truncated to cap). */
void ir_format_type(char *buf, size_t cap, IrDtype t, int rank, const int64_t *shape);
/* ir_infer's messages start with "opname: "; this returns the rest, for
 * callers whose own prefix names the op already. */
const char *ir_strip_op_name(const char *msg, IrOp op);

/* ---- checks of what the user gives (validate.c) ----
 * One check per setting and per init, shared by the .dtm lowering
 * (frontend/lower_train.c, lower.c), --train and the IR text parser, so both
 * paths accept the same values and say the same thing about the rest. */
/* The name of setting f in IR text and in ir_train_check's messages. */
const char *ir_train_key(IrTrainField f);
/* Checks setting f of t against its range (train.def); reports at loc,
 * naming the setting `key` as the user spelled it ("betas" for beta1,
 * NULL: ir_train_key), and returns false when it is out of range. */
bool ir_train_check_field(const IrTrain *t, IrTrainField f, const char *key, SrcLoc loc,
                          Diag *d);
/* Setting f of t becomes v when v passes that check (then t->loc[f] =
 * loc), else t is left as it was: what the train section and --train call
 * (_int also for bools and mesh-axis masks).
 * A word (optimizer, schedule, data, precision: a dtype's name) must
 * outlive t. */
bool ir_train_set_int(IrTrain *t, IrTrainField f, int64_t v, const char *key, SrcLoc loc,
                      Diag *d);
bool ir_train_set_real(IrTrain *t, IrTrainField f, double v, const char *key, SrcLoc loc,
                       Diag *d);
bool ir_train_set_word(IrTrain *t, IrTrainField f, const char *w, const char *key, SrcLoc loc,
                       Diag *d);
/* The word of value v of word setting f (optimizer, lr_schedule,
 * schedule: "adamw", "cosine", "1f1b"); NULL for 0 (not given) or a value
 * out of range. */
const char *ir_train_word(IrTrainField f, int v);
/* Whether t scales the loss, none resolved: dynamic under precision f16,
 * off otherwise; IR_LOSS_SCALE_OFF, _DYNAMIC or _FIXED. */
IrLossScale ir_train_loss_scale(const IrTrain *t);
/* Every setting at t->loc, then what settings ask of each other (sgd's
 * nesterov needs a momentum). */
bool ir_train_check(const IrTrain *t, Diag *d);
/* An init's arguments: normal(mean, std) needs finite values and std >= 0,
 * uniform(lo, hi) finite lo <= hi.  at[0], at[1]: where each argument was
 * given, at[2] the whole init (may be equal).  Returns false after
 * reporting. */
bool ir_init_check(IrInit init, double a, double b, const SrcLoc at[3], Diag *d);
/* As ir_init_check, without reporting: the reason, or NULL when fine
 * (ir_infer's rule for param and state). */
const char *ir_init_problem(IrInit init, double a, double b, char *buf, size_t cap);

/* ---- modules and nodes ---- */
IrModule *ir_module_new(Arena *a, const char *name);
/* A module without nodes in m's arena, with m's name, mesh and training
 * settings, sharing m's placement table: what a pass that rebuilds m's
 * node list builds into (then ir_module_take_nodes).  NULL when out of
 * memory. */
IrModule *ir_module_derive(const IrModule *m);
/* m's node list becomes out's (out was derived from m). */
void ir_module_take_nodes(IrModule *m, IrModule *out);
void ir_train_defaults(IrTrain *t);
/* Appends a node with the given operands (copied); shape, dtype and attrs
 * are left for the caller / shape inference.  Returns NULL past
 * IR_MAX_NODES or out of memory. */
IrNode *ir_node_new(IrModule *m, IrOp op, const int *ops, int nops, SrcLoc loc);
/* Appends a copy of src, node of srcm (m itself, or a module sharing m's
 * placement table, see ir_module_derive): every field and annotation, its
 * own id and the given nops operands (copied): what passes that rebuild a
 * module do per node, without ir_node_new's defaults written and then
 * overwritten.  NULL as ir_node_new. */
IrNode *ir_node_copy(IrModule *m, const IrModule *srcm, const IrNode *src, const int *ops,
                     int nops);
/* Records that nodes [first, end) come from a loop iteration whose stage
 * expression is at loc (a run of iterations of one loop is one note).
 * False when out of memory. */
bool ir_stage_note_add(IrModule *m, int first, int end, SrcLoc loc);
/* Where node x's stage annotation is: the innermost note holding x, or
 * x's own location when no note does (IR text, a node passes made). */
SrcLoc ir_stage_note_loc(const IrModule *m, int x);
int64_t ir_node_numel(const IrNode *n);
/* Sets m->attn_layers and m->attn_width from m's attention ops: call it on
 * the global program before the passes (tools/compile.c does). */
void ir_count_attention(IrModule *m);
int ir_choose_add(IrModule *m, int node, const Placement *opts, int nopts, SrcLoc loc);
/* A deep copy of m in a (clone.c): nodes, operand lists and choose()
 * points are copied, strings are shared, so m's arena must outlive the
 * copy.  NULL when out of memory. */
IrModule *ir_module_clone(Arena *a, const IrModule *m);
/* The named params of m sorted by (name, id) into out (room for
 * m->nnodes); returns how many, or -1 when out of memory (params.c). */
int ir_params_by_name(const IrModule *m, int *out);
/* The position in such a list of the first param called name, or -1; the
 * entries after it with the same name follow.  O(log n). */
int ir_param_lookup(const IrModule *m, const int *sorted, int n, const char *name);

/* ---- attributes (attr.c) ---- */
/* The all-zero attributes of each kind: those of a node with attr NULL. */
extern const IrAttr ir_attr_zero[IR_ATTR_KIND_COUNT];
/* n's attributes, of kind k: asserted (debug builds) to be its op's kind
 * and the stored one's, as SQLite asserts which union member is valid. */
static inline const IrAttr *ir_attr_get(const IrNode *n, IrAttrKind k)
{
	assert(ir_op_attr_kind(n->op) == k);
	assert(!n->attr || n->attr->kind == k);
	return n->attr ? n->attr : &ir_attr_zero[k];
}
/* A fresh copy of n's attributes (kind k, zero when it has none) that n
 * points at from now on, in m's arena, for the caller to fill: every
 * write goes through it, so the nodes sharing the old ones keep them.
 * Out of memory: m->sink, and m->oom set (the verifier reports it). */
IrAttr *ir_attr_mut(IrModule *m, IrNode *n, IrAttrKind k);
/* n's attributes become a copy of *a (NULL: none).  False when out of
 * memory (m->oom set).  To share another node's: n->attr = o->attr. */
bool ir_attr_set(IrModule *m, IrNode *n, const IrAttr *a);
/* The attributes as words, canonical (kind first, then each field; a
 * double by its bits): equal words, equal attributes.  For keys and
 * hashes (passes/propagate.c's signatures, partition_twin.c's classes).
 * Returns how many, at most IR_ATTR_WORDS (a collective's and attention's
 * 10). */
#define IR_ATTR_WORDS (2 + IR_MAX_INTS)
int ir_attr_words(const IrNode *n, int64_t *w);

/* ir_attr_NAME(n): node n's IrAttrNAME, read; ir_attr_NAME_mut(m, n): the
 * fresh copy to write (ir_attr_mut). */
#define IR_ATTR_ACCESS(member, K, T)                                            \
	static inline const T *ir_attr_##member(const IrNode *n)                   \
	{                                                                           \
		return &ir_attr_get(n, K)->member;                                      \
	}                                                                           \
	static inline T *ir_attr_##member##_mut(IrModule *m, IrNode *n)            \
	{                                                                           \
		return &ir_attr_mut(m, n, K)->member;                                   \
	}
IR_ATTR_ACCESS(init, IR_ATTR_INIT, IrAttrInit)
IR_ATTR_ACCESS(scalar, IR_ATTR_SCALAR, IrAttrScalar)
IR_ATTR_ACCESS(axes, IR_ATTR_AXES, IrAttrAxes)
IR_ATTR_ACCESS(axis, IR_ATTR_AXIS, IrAttrAxis)
IR_ATTR_ACCESS(eps, IR_ATTR_EPS, IrAttrEps)
IR_ATTR_ACCESS(perm, IR_ATTR_PERM, IrAttrPerm)
IR_ATTR_ACCESS(slice, IR_ATTR_SLICE, IrAttrSlice)
IR_ATTR_ACCESS(attn, IR_ATTR_ATTN, IrAttrAttn)
IR_ATTR_ACCESS(dropout, IR_ATTR_DROPOUT, IrAttrDropout)
IR_ATTR_ACCESS(coll, IR_ATTR_COLL, IrAttrColl)
IR_ATTR_ACCESS(optim, IR_ATTR_OPTIM, IrAttrOptim)
IR_ATTR_ACCESS(rope, IR_ATTR_ROPE, IrAttrRope)
IR_ATTR_ACCESS(route, IR_ATTR_ROUTE, IrAttrRoute)
#undef IR_ATTR_ACCESS

/* attention_bwd(dy, q, k, v[, seg][, y]): the operand index of the segment
 * ids and of the forward attention y (attn.lse), -1 where absent. */
static inline int ir_attn_bwd_seg(const IrNode *n)
{
	return n->nops - (ir_attr_attn(n)->lse ? 1 : 0) > 4 ? 4 : -1;
}
static inline int ir_attn_bwd_y(const IrNode *n)
{
	return ir_attr_attn(n)->lse && n->nops > 4 ? n->nops - 1 : -1;
}

/* How many log-sum-exps attention n (attn.lse) keeps after its result's
 * numel elements: one per batch row, head and query (the result's numel
 * over the value head size); 0 without attn.lse.  f32, [batch, heads,
 * seq], starting at byte numel * element size of the result's storage. */
static inline int64_t ir_attn_lse_count(const IrNode *n)
{
	const IrAttrAttn *a = ir_attr_attn(n);
	int64_t hv = n->rank > 0 && a->heads > 0 ? n->shape[n->rank - 1] / a->heads : 0;
	int64_t numel = 1;
	for (int d = 0; d < n->rank; d++)
		numel *= n->shape[d];
	return a->lse && hv > 0 ? numel / hv : 0;
}

/* ---- labels (label.c): what a value is, for people ---- */
/* Writes a description of value x in the source's terms to buf (at most
 * cap - 1 chars and a NUL; returns the length): its name, else its label,
 * else, through views, casts, shards, collectives and in-place updates,
 * its operand's; else its op over its operands so described and its
 * location, "matmul(layer.0.h, layer.0.wproj) at gpt.dtm:50:11".  Never
 * an SSA id: the same for every micro-batch's copy of a value. */
size_t ir_value_label(const IrModule *m, int x, char *buf, size_t cap);
/* The label of the gradient of x: "grad.NAME" when x is described by a
 * name or label, else "grad(EXPRESSION) at FILE:LINE:COL". */
size_t ir_grad_label(const IrModule *m, int x, char *buf, size_t cap);
/* The node x's description comes from: x or the node it passes through
 * to (an all_gather's operand, a reshape's). */
int ir_label_source(const IrModule *m, int x);

/* ---- mesh (mesh.c): row-major coordinates over the declared axes ---- */
int64_t mesh_size(const Mesh *m);                    /* number of ranks */
int mesh_axis_index(const Mesh *m, const char *name); /* -1 if absent */
void mesh_coords(const Mesh *m, int64_t rank, int64_t *coords);
int64_t mesh_rank(const Mesh *m, const int64_t *coords);
/* The group of `rank` along the axes in `axes_mask`: the ranks that differ
 * from it only in those coordinates, in row-major order of those axes.
 * Writes up to `cap` ranks to out, returns the group size.  *index gets
 * rank's position in the group (if index != NULL). */
int64_t mesh_group(const Mesh *m, int64_t rank, uint32_t axes_mask,
                   int64_t *out, int64_t cap, int64_t *index);
int64_t mesh_axes_size(const Mesh *m, uint32_t axes_mask);

/* ---- placements (placement.c) ---- */
void placement_replicated(Placement *p, int ndims);
/* The placement of id in table t, in m's table; node n's. */
static inline const Placement *ir_places_get(const IrPlaces *t, uint32_t id)
{
	return &t->v[id];
}
static inline const Placement *ir_place_get(const IrModule *m, uint32_t id)
{
	return &m->places->v[id];
}
static inline const Placement *ir_place(const IrModule *m, const IrNode *n)
{
	return &m->places->v[n->place];
}
/* The id of p in m's table, added when new: 0 when p is not known, or
 * when out of memory (then m->places->oom is set and the verifier reports
 * it).  The one place placements are compared. */
uint32_t ir_place_intern(IrModule *m, const Placement *p);
/* The same on a table of one's own (passes/reshard.c's search states);
 * ir_places_find only looks: 0 when p is not in t (or not known). */
uint32_t ir_places_intern(IrPlaces *t, const Placement *p);
uint32_t ir_places_find(const IrPlaces *t, const Placement *p);
/* Node n's placement becomes p (interned); false when out of memory. */
bool ir_place_set(IrModule *m, IrNode *n, const Placement *p);
/* A table holding only "not known"; a copy of one (ir_module_clone's).
 * NULL when out of memory. */
IrPlaces *ir_places_new(Arena *a);
IrPlaces *ir_places_copy(Arena *a, const IrPlaces *src);
/* The number of shards dim d is cut into under mesh m. */
int64_t placement_dim_parts(const Placement *p, const Mesh *m, int d);
/* torch.chunk rule: the size of shard `idx` of a dim of `n` cut in `parts`:
 * chunk = ceil(n / parts); shard idx gets clamp(n - idx*chunk, 0, chunk). */
int64_t chunk_size(int64_t n, int64_t parts, int64_t idx);
int64_t chunk_offset(int64_t n, int64_t parts, int64_t idx);
/* After `partition`: the global extent of dim d of the value node n holds
 * a shard of (its padded extent, or the local extent times the parts). */
int64_t ir_global_dim(const IrModule *m, const IrNode *n, int d);
/* This rank's shard shape of a global shape. */
void placement_shard_shape(const Placement *p, const Mesh *m, int64_t rank,
                           int nd, const int64_t *global, int64_t *local);
/* Writes "[dp, (tp, sp), _] partial(tp)" style text; returns chars written. */
int placement_format(const Placement *p, const Mesh *m, char *buf, size_t cap);

/* ---- dropout masks (dropout.c) ---- */
/* Element i of a dropout node draws the mask element of index
 * ir_dropout_index(key, i): its index in the operand of the one-device,
 * one-micro-batch program (dropout.c says how). */
typedef struct IrDropKey {
	int rank;
	int64_t local[IR_MAX_RANK];  /* the node's shape (a shard after partition) */
	int64_t parts[IR_MAX_RANK];  /* shards of each dim (1: whole) */
	int64_t off[IR_MAX_RANK];    /* the rank's first global coordinate per dim */
	int64_t stride[IR_MAX_RANK]; /* of each dim in the full-batch operand */
	int bdim;                    /* the micro-batch's batch dim, -1: none */
	int64_t mbs, mb, inner;      /* micro-batch mb of mbs; batch rows span inner */
} IrDropKey;
/* A dropout copy of one of several micro-batches (passes/microbatch.c). */
bool ir_dropout_has_mb(const IrNode *n);
/* Fills k for dropout node n of m: partitioned says n's shape is a shard
 * of its placement's (after `partition`), coords is the rank's mesh
 * coordinates (NULL: all offsets 0).  Returns false when the index is the
 * element's own (no shard split, no micro-batch). */
bool ir_dropout_key(const IrModule *m, const IrNode *n, bool partitioned, const int64_t *coords,
                    IrDropKey *k);
uint64_t ir_dropout_index(const IrDropKey *k, int64_t i);

/* ---- shape rules (shape.c): driven by the op table ---- */
/* Computes n's dtype and shape from its operands and attrs (for RESHAPE,
 * RECV, PARAM, INPUT, CONST and CAST the node's own type is checked, not
 * computed).  Reports to d at n->loc and returns false on a mismatch. */
bool ir_infer(IrModule *m, IrNode *n, Diag *d);
/* As ir_infer, but the first error's message (no location, nothing
 * counted) goes to msg, so a caller can add its own context: the verifier
 * ("verifier failed after pass ...") and the IR text parser. */
bool ir_infer_msg(IrModule *m, IrNode *n, char *msg, size_t cap);

/* ---- printing and parsing (print.c, parse.c) ---- */
/* The textual form; print then parse then print gives identical text. */
void ir_print(FILE *out, const IrModule *m);
void ir_print_node(FILE *out, const IrModule *m, const IrNode *n);
/* A node's attributes as the text form writes them (" {heads = 4, ...}",
 * nothing for an op without), and the module's train lines: the pieces
 * tools/mlir_export.c carries through MLIR as strings. */
void ir_print_attrs(FILE *out, const IrModule *m, const IrNode *n);
void ir_print_train(FILE *out, const IrModule *m);
/* Parses the textual form; errors go to d with file:line:col. */
IrModule *ir_parse(Arena *a, Diag *d, const SrcFile *src);

/* ---- verifier (verify.c) ---- */
/* Checks topological order, arities, attribute sanity, placements against
 * the mesh and (by re-running ir_infer on a copy) types and shapes.
 * `after` names the pass for the message.  Returns false and reports. */
bool ir_verify(IrModule *m, Diag *d, const char *after);
/* Whether m's loss is set and not a float scalar (every pass after
 * autodiff reads one float: the backward's seed, the pipeline's loss
 * all_reduce, the log); then msg says what it is instead.  The verifier's
 * check, and IR text's at its `loss` line. */
bool ir_loss_not_scalar(const IrModule *m, char *msg, size_t cap);

#endif
